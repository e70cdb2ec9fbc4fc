//! Jobs whose stored spec this release refuses (a check made stricter since
//! the release that stored them, such as an exact hex count with a modulus,
//! or hex points per shard 3). Such a job never stops a start: it fails
//! alone at load, the reason in its record and its event log, written once
//! (the next load finds it failed and writes nothing), and stays listed,
//! readable and deletable while every other job runs. No checked spec exists
//! for it, so it is held apart from the runnable jobs, its spec the JSON it
//! was stored as. A job that had finished keeps its state and its answer.

use tally_wire::proto;

use crate::error::Result;
use crate::records::{
    EventRecord, FinalCounts, JobState, ShardRecord, ShardState, UncheckedJobRecord, decode,
    encode, event_key, job_key, shard_prefix,
};
use crate::store::{Batch, Store, Tree};

use super::clients::{job_data_removed, tombstone};
use super::state::Scheduler;
use super::stored::{RefusedJob, next_event_seq, refusal};
use super::views::{elapsed_ms, result_of};

impl Scheduler {
    /// Holds a job whose stored spec this release refuses, failing it first
    /// if it was unfinished: its record (with the counts of the shards it
    /// had done) and a `failed` event, in one commit. A finished job's record
    /// is left as it is.
    pub(super) fn hold_refused(
        &mut self,
        mut rec: UncheckedJobRecord,
        why: String,
        now_ms: u64,
    ) -> Result<()> {
        let store = self.store.as_ref();
        // Its view shows the shards it had done (no kind can count them now).
        if rec.final_counts.is_none() {
            rec.final_counts = Some(counts_so_far(store, &rec.id)?);
        }
        if !rec.state.is_finished() {
            let message = refusal(&why);
            rec.state = JobState::Failed;
            rec.finished_ms = Some(now_ms);
            rec.error = Some(message.clone());
            let failed = EventRecord {
                seq: next_event_seq(store, &rec.id)?,
                time_ms: now_ms,
                kind: "failed".into(),
                stage: 0,
                shard: 0,
                attempt: 0,
                worker: String::new(),
                message: message.clone(),
            };
            let mut batch = Batch::default();
            batch.put(Tree::Jobs, job_key(&rec.id), encode(&rec));
            batch.put(
                Tree::Events,
                event_key(&rec.id, failed.seq),
                encode(&failed),
            );
            self.store.commit(batch)?;
            tracing::warn!(job = %rec.id, "{message}");
        }
        self.jobs.add_refused(RefusedJob { rec, why });
        Ok(())
    }

    /// Deletes a job whose stored spec this release refuses, as `delete`
    /// does any finished job. (A wasm module it alone named stays: which
    /// module a refused spec names is not known.)
    pub(super) fn delete_refused(&mut self, who: &str, id: &str, now_ms: u64) -> Result<()> {
        let Some(refused) = self.jobs.refused(id) else {
            return self.jobs.check_exists(id);
        };
        let mut batch = job_data_removed(self.store.as_ref(), id)?;
        let tombstone = tombstone(&refused.rec, &mut batch, now_ms);
        batch.put(Tree::Jobs, job_key(id), encode(&tombstone));
        self.audit(&mut batch, now_ms, who, "delete", id, true, "deleted");
        self.write(batch)?;
        self.jobs.remove(id, now_ms);
        Ok(())
    }
}

impl RefusedJob {
    /// The job as clients see it: no spec (none this release reads), its
    /// kind as stored, the reason in its error (failed at load) or else in
    /// its description (a job that had finished).
    pub(super) fn view(&self, now_ms: u64) -> proto::Job {
        let rec = &self.rec;
        let counts = rec.final_counts.unwrap_or_default();
        let kind = match rec.kind_name() {
            "" => "unknown",
            kind => kind,
        };
        proto::Job {
            id: rec.id.clone(),
            kind: rec.kind_name().to_string(),
            state: rec.state.to_proto() as i32,
            spec: None,
            created_ms: rec.created_ms,
            started_ms: rec.started_ms.unwrap_or(0),
            finished_ms: rec.finished_ms.unwrap_or(0),
            stage: rec.stage,
            stages_total: rec.plan.stages_total,
            shards_done: counts.shards_done,
            shards_total: counts.shards_total,
            work_done: counts.work_done,
            work_total: counts.work_total,
            elapsed_ms: elapsed_ms(rec, now_ms),
            shards_failed_attempts: counts.failed_attempts,
            answer: rec.answer.clone().unwrap_or_default(),
            error: rec.error.clone().unwrap_or_default(),
            description: description(kind, &self.why, rec.error.as_deref()),
            owner: rec.owner().to_string(),
            slot_seconds: rec.slot_ms as f64 / 1000.0,
            ..proto::Job::default()
        }
    }

    pub(super) fn result(&self) -> proto::JobResult {
        result_of(&self.rec)
    }
}

/// What a job whose spec is refused is: why, unless its error says so.
fn description(kind: &str, why: &str, error: Option<&str>) -> String {
    let described = format!("{kind} job whose stored spec this release refuses");
    match error {
        Some(error) if error.contains(why) => described,
        _ => format!("{described} ({why})"),
    }
}

/// The counts of a job's shards as stored, over every stage.
fn counts_so_far(store: &dyn Store, id: &str) -> Result<FinalCounts> {
    let mut counts = FinalCounts::default();
    for (_, bytes) in store.scan_prefix(Tree::Shards, &shard_prefix(id))? {
        let shard: ShardRecord = decode("shard", &bytes)?;
        counts.shards_total += 1;
        counts.work_total += shard.work_total;
        counts.failed_attempts += u64::from(shard.failed_attempts);
        if shard.state == ShardState::Done {
            counts.shards_done += 1;
            counts.work_done += shard.work_total;
        }
    }
    Ok(counts)
}
