//! Accepting a shard's result, exactly once. One batch marks the shard done
//! with its partial, stores its stage output in chunks, removes its checkpoint
//! and logs an `accepted` event; if this completes the stage, the same batch
//! passes the barrier. With replicas, each result but the last is kept as a
//! replica and the shard returns to the queue for another worker; the last is
//! accepted only if it equals the first.

use tally_kinds::values::EncodedPartial;
use tally_wire::lease::LeaseId;
use tally_wire::limits::OUTPUT_CHUNK;

use crate::error::Result;
use crate::records::{
    JobRecord, ReplicaRecord, ShardRecord, ShardState, encode, output_key, remove_checkpoint,
    shard_key,
};
use crate::store::{Batch, Tree};

use super::events::Event;
use super::job::JobEntry;
use super::protocol::{Report, ReportOutcome, ReportedFailure, ReportedResult};
use super::reports::FailedAttempt;
use super::stages::StageSnapshot;
use super::state::Scheduler;

impl Scheduler {
    /// Accepts the result of the shard's current attempt (checked by the caller),
    /// as the shard's result or as one of its replicas.
    pub(super) fn accept_result(
        &mut self,
        report: &Report,
        result: &ReportedResult,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let partial = EncodedPartial::from_bytes(&result.partial)?;
        let entry = self.jobs.known(&report.lease.job);
        let shard = entry.shards[report.lease.index as usize].clone();
        // A replica of this attempt is kept already: its worker sent it
        // again, the answer to the first lost (its call's deadline passed).
        // Counted twice, one worker's result would pass for two.
        if shard.replicas.iter().any(|r| r.attempt == shard.attempt) {
            return Ok(ReportOutcome::STOP);
        }
        if !report.checked {
            let rec = &entry.rec;
            rec.spec
                .check_result(&rec.plan, &shard.task, &partial, report.output_to_check())?;
        }
        entry.shard_time.note(result.compute_us);
        let replicas = entry.rec.spec.options().replicas as usize;
        if replicas > 1 {
            let this = ReplicaRecord {
                worker: report.worker.clone(),
                attempt: shard.attempt,
                partial: partial.clone(),
                output_digest: report.output_digest(),
            };
            if let Some(first) = shard.replicas.first()
                && (first.output_digest != this.output_digest
                    || !entry.rec.spec.same_result(&first.partial, &this.partial)?)
            {
                return self.discard_replicas(report, first, &this, now_ms);
            }
            if shard.replicas.len() + 1 < replicas {
                return self.record_replica(&report.lease, this, now_ms);
            }
        }
        let shard = done(shard, partial, result.work_done, &report.worker);
        self.commit_result(report, shard, now_ms)
    }

    /// Two replicas disagree: both are discarded and the attempt counts as failed.
    fn discard_replicas(
        &mut self,
        report: &Report,
        first: &ReplicaRecord,
        this: &ReplicaRecord,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let failure = ReportedFailure {
            message: format!(
                "replicas disagree: workers {} (attempt {}) and {} (attempt {}) returned different results",
                first.worker,
                tally_wire::lease::Attempt(first.attempt),
                this.worker,
                tally_wire::lease::Attempt(this.attempt)
            ),
            permanent: false,
            handed_back: false,
            no_room: false,
        };
        let failed = FailedAttempt {
            lease: &report.lease,
            worker: &report.worker,
            failure: &failure,
            discard_replicas: true,
        };
        self.record_failure(failed, now_ms)
    }

    /// Keeps one replica's result and puts the shard back for another worker.
    fn record_replica(
        &mut self,
        lease: &LeaseId,
        replica: ReplicaRecord,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let LeaseId {
            job, stage, index, ..
        } = lease;
        let entry = self.jobs.known(job);
        let needed = entry.rec.spec.options().replicas;
        let mut shard = entry.shards[*index as usize].clone();
        let worker = replica.worker.clone();
        shard.replicas.push(replica);
        shard.state = ShardState::Pending;
        shard.worker = None;
        shard.not_before_ms = now_ms;
        shard.work_done = 0;
        shard.partial = None;
        let mut batch = Batch::default();
        // The next replica starts from scratch, not from this worker's checkpoint.
        if shard.has_checkpoint {
            remove_checkpoint(&mut batch, job, *stage, *index);
            shard.has_checkpoint = false;
        }
        batch.put(Tree::Shards, shard_key(job, *stage, *index), encode(&shard));
        let seq = entry.next_event;
        let note = format!(
            "result {} of {needed}; the next comes from another worker",
            shard.replicas.len()
        );
        entry.log(
            &mut batch,
            now_ms,
            Event::shard("replica", &shard, &worker, &note),
        );
        if let Err(e) = self.write(batch) {
            self.jobs.known(job).next_event = seq;
            return Err(e);
        }
        let entry = self.jobs.known(job);
        entry.shards.set(*index as usize, shard);
        entry.requeue(*index);
        Ok(ReportOutcome {
            stop: false,
            accepted: true,
        })
    }

    /// Commits the done shard with its output, and the barrier if the stage is
    /// complete. Works on the entry in place and restores it if anything fails.
    fn commit_result(
        &mut self,
        report: &Report,
        shard: ShardRecord,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let (job, index) = (&report.lease.job, report.lease.index);
        let mut shard = shard;
        let mut batch = result_batch(&mut shard, &report.output);
        let entry = self.jobs.known(job);
        let saved = SavedAcceptance::of(entry, index);
        let before = entry.shards.set(index as usize, shard.clone());
        // The attempt may have expired and queued the shard again (its
        // result still counts while no later attempt exists): done shards
        // leave the queue, or they would be computed and accepted twice.
        // (Only then is the queue searched: it may hold a million shards.)
        if before.state == ShardState::Pending {
            entry.pending.retain(|&i| i != index);
        }
        entry.outputs.accept(index, &report.output);
        let accepted = Event::shard("accepted", &shard, &report.worker, "");
        entry.log(&mut batch, now_ms, accepted);
        // Only a result that completes the stage changes more than this
        // shard: only then is the stage worth saving.
        let snapshot = entry.shards.all_done().then(|| entry.snapshot_stage());
        if let Err(e) = self
            .advance_if_stage_done(job, &mut batch, now_ms)
            .and_then(|_| self.write(batch))
        {
            saved.restore(self.jobs.known(job), snapshot, index);
            return Err(e);
        }
        self.jobs.known(job).replaced_shards = None;
        Ok(ReportOutcome {
            stop: self.jobs.known(job).rec.state.is_finished(),
            accepted: true,
        })
    }
}

/// The shard once its result is accepted.
fn done(
    mut shard: ShardRecord,
    partial: EncodedPartial,
    work_done: u64,
    worker: &str,
) -> ShardRecord {
    shard.replicas.clear();
    shard.state = ShardState::Done;
    shard.partial = Some(partial);
    shard.work_done = work_done.min(shard.work_total).max(shard.work_total);
    shard.worker = Some(worker.to_string());
    shard
}

/// The writes of an accepted result: the output in chunks, the checkpoint
/// removed, the done shard.
fn result_batch(shard: &mut ShardRecord, output: &[u8]) -> Batch {
    let (job, stage, index) = (shard.job.clone(), shard.stage, shard.index);
    shard.output_chunks = output.len().div_ceil(OUTPUT_CHUNK) as u32;
    let mut batch = Batch::default();
    for (chunk, data) in output.chunks(OUTPUT_CHUNK).enumerate() {
        batch.put(
            Tree::Blobs,
            output_key(&job, stage, index, chunk as u32),
            data.to_vec(),
        );
    }
    if shard.has_checkpoint {
        remove_checkpoint(&mut batch, &job, stage, index);
        shard.has_checkpoint = false;
    }
    batch.put(Tree::Shards, shard_key(&job, stage, index), encode(&*shard));
    batch
}

/// What accepting a result changes in a job's entry besides its stage.
struct SavedAcceptance {
    shard: ShardRecord,
    rec: JobRecord,
    next_event: u64,
    /// The shard's place in the queue, if it was queued again.
    queued_at: Option<usize>,
}

impl SavedAcceptance {
    fn of(entry: &JobEntry, index: u32) -> SavedAcceptance {
        let shard = entry.shards[index as usize].clone();
        let queued_at = (shard.state == ShardState::Pending)
            .then(|| entry.pending.iter().position(|&i| i == index))
            .flatten();
        SavedAcceptance {
            shard,
            rec: entry.rec.clone(),
            next_event: entry.next_event,
            queued_at,
        }
    }

    /// Undoes the acceptance; `stage` is the stage as it was before the
    /// barrier, when the result completed it.
    fn restore(self, entry: &mut JobEntry, stage: Option<StageSnapshot>, index: u32) {
        entry.rec = self.rec;
        entry.next_event = self.next_event;
        if let Some(stage) = stage {
            entry.restore_stage(stage);
        }
        if let Some(position) = self.queued_at
            && !entry.pending.contains(&index)
        {
            entry
                .pending
                .insert(position.min(entry.pending.len()), index);
        }
        entry.outputs.forget(index);
        entry.shards.set(index as usize, self.shard);
    }
}
