//! What clients change: submitting and cancelling jobs, and reading a job's
//! event log.

use std::sync::Arc;

use tally_kinds::guest::SEND_MODULE;
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::{JobPlan, PlannedShard};
use tally_wire::proto;

use crate::error::{CoordinatorError, Result};
use crate::records::{
    EventRecord, JobRecord, JobState, attachment_key, decode, encode, event_prefix, job_id,
    job_key, shard_prefix,
};
use crate::store::{Batch, NEXT_JOB_KEY, Store, Tree};

use super::accounts::Access;
use super::events::Event;
use super::job::JobEntry;
use super::stage_outputs::StageOutputs;
use super::stages::{install_stage_unwritten, write_shard_records};
use super::state::Scheduler;
use crate::users::{ADMIN, User};

/// Who deletes the jobs past `--retain-finished`, as the audit log says.
const RETENTION: &str = "(retention)";

/// At most this many shard records in one store transaction at submission.
pub(super) const SUBMIT_PART: usize = 16_384;

impl Scheduler {
    /// Stores a new job with the shards of its first stage, or returns the job
    /// already submitted under the same idempotency key (`created` is false).
    /// A key already used for a different spec is a conflict: the caller
    /// would otherwise follow someone else's job. The attachments the job
    /// names that the store does not hold yet go with it, from `attachments`
    /// (digest and bytes, checked by the caller).
    pub fn submit(
        &mut self,
        spec: ValidSpec,
        plan: JobPlan,
        idempotency_key: Option<String>,
        attachments: Vec<(String, Arc<[u8]>)>,
        now_ms: u64,
    ) -> Result<(proto::Job, bool)> {
        let admin = User::admin();
        self.submit_by(&admin, spec, plan, idempotency_key, attachments, now_ms)
    }

    /// [`Scheduler::submit`] by `user`, who owns the job: refused past their
    /// quotas of jobs and of stage data (the refusal audited), and audited
    /// in the job's batch.
    pub fn submit_by(
        &mut self,
        user: &User,
        spec: ValidSpec,
        mut plan: JobPlan,
        idempotency_key: Option<String>,
        attachments: Vec<(String, Arc<[u8]>)>,
        now_ms: u64,
    ) -> Result<(proto::Job, bool)> {
        if let Some(key) = &idempotency_key
            && let Some(job) = self.job_for_key_of(&user.name, key, &spec, now_ms)?
        {
            return Ok((job, false));
        }
        self.check_submit_quotas(user, now_ms)?;
        let mut new_attachments = Vec::new();
        for digest in spec.attachments() {
            let key = attachment_key(&digest);
            if self.store.value_len(Tree::Blobs, &key)?.is_some() {
                continue;
            }
            // Held when the submission was checked, and deleted since with
            // the last job that named it: the job cannot run without it.
            let Some((_, bytes)) = attachments.iter().find(|(sent, _)| *sent == digest) else {
                return Err(CoordinatorError::InvalidArgument(format!(
                    "the job names a module with SHA-256 {digest}, which the coordinator no \
                     longer holds: {SEND_MODULE}"
                )));
            };
            new_attachments.push((key, bytes.clone()));
        }
        let seq = self.jobs.next_seq();
        let below = self.job_ids_below.load(std::sync::atomic::Ordering::SeqCst);
        if seq >= below {
            return Err(CoordinatorError::Unavailable(format!(
                "job numbers up to {} are reserved in the stage store's owner record, and the \
                 next reservation is not written yet (the store is slow or unreachable); submit \
                 again in a few seconds",
                below.saturating_sub(1)
            )));
        }
        let first = spec.plan_stage(&plan, 1)?;
        if first.is_empty() {
            return Err(CoordinatorError::Internal("the plan has no shards".into()));
        }
        // What the shards' tasks hold, the job record need not keep.
        spec.trim_plan(&mut plan)?;
        let mut rec = new_job(seq, spec, plan, idempotency_key.clone(), &first, now_ms);
        rec.owner = Some(user.name.clone());
        let id = rec.id.clone();
        let mut entry = JobEntry::new(rec);
        install_stage_unwritten(&mut entry, 1, first);
        let mut batch = self.write_shards_ahead(&entry, seq)?;
        for (key, bytes) in new_attachments {
            batch.put(Tree::Blobs, key, bytes.to_vec());
        }
        batch.put(Tree::Jobs, job_key(&id), encode(&entry.rec));
        batch.put(Tree::Meta, NEXT_JOB_KEY, (seq + 1).to_be_bytes().to_vec());
        if let Some(key) = &idempotency_key {
            batch.put(Tree::Keys, key.as_bytes().to_vec(), id.as_bytes().to_vec());
        }
        let description = entry.rec.spec.describe();
        entry.log(&mut batch, now_ms, Event::job("submitted", &description));
        self.audit(
            &mut batch,
            now_ms,
            &user.name,
            "submit",
            &id,
            true,
            &description,
        );
        if let Some(needed) = entry.rec.spec.capability()
            && !self
                .workers
                .live(now_ms)
                .any(|(_, w)| w.capabilities.iter().any(|c| c == needed))
        {
            let waiting = format!(
                "no live worker offers {needed}: the job waits for one (tally worker --allow-{needed})"
            );
            entry.log(&mut batch, now_ms, Event::job("waiting", &waiting));
        }
        self.write(batch)?;
        self.jobs.numbered(seq);
        self.jobs.add(entry);
        Ok((self.job(&id, now_ms)?, true))
    }

    /// Writes a large first stage's shard records in parts ahead of the job
    /// record (one store transaction of a million records takes gigabytes);
    /// returns the last part, for the batch that writes the job. The job
    /// counter goes with the first part, so a failure or a crash between the
    /// parts leaves only records of an id never given again, which no job
    /// record names and nothing reads.
    /// Each part is encoded only when it is written, so that a million
    /// records are never held encoded at once.
    fn write_shards_ahead(&mut self, entry: &JobEntry, seq: u64) -> Result<Batch> {
        let total = entry.shards.len();
        let mut start = 0;
        loop {
            let end = (start + SUBMIT_PART).min(total);
            let mut batch = Batch::default();
            write_shard_records(entry, start..end, &mut batch);
            if end == total {
                return Ok(batch);
            }
            if start == 0 {
                batch.put(Tree::Meta, NEXT_JOB_KEY, (seq + 1).to_be_bytes().to_vec());
            }
            self.write(batch)?;
            self.jobs.numbered(seq);
            // Flushed part by part: the store's memory holds one part's
            // unwritten pages, not a million records'.
            self.store.flush()?;
            start = end;
        }
    }

    pub fn job_by_key(&self, key: &str, now_ms: u64) -> Option<proto::Job> {
        self.jobs
            .by_key(key)
            .and_then(|id| self.job(id, now_ms).ok())
    }

    /// The job submitted under `key`, if any, provided it was submitted with
    /// `spec`; a key already used for another spec is a conflict.
    pub fn job_for_key(
        &self,
        key: &str,
        spec: &ValidSpec,
        now_ms: u64,
    ) -> Result<Option<proto::Job>> {
        self.job_for_key_of(ADMIN, key, spec, now_ms)
    }

    /// [`Scheduler::job_for_key`] for `owner`: a key that names another
    /// user's job is a conflict, and says nothing of that job.
    pub fn job_for_key_of(
        &self,
        owner: &str,
        key: &str,
        spec: &ValidSpec,
        now_ms: u64,
    ) -> Result<Option<proto::Job>> {
        let Some(id) = self.jobs.by_key(key) else {
            return Ok(None);
        };
        let owned_by = match (self.jobs.get(id), self.jobs.refused(id)) {
            (Ok(entry), _) => entry.rec.owner(),
            (_, Some(refused)) => refused.rec.owner(),
            (Err(_), None) => owner,
        };
        if owned_by != owner {
            return Err(CoordinatorError::AlreadyExists(format!(
                "idempotency key {} already names another user's job; submit under another key",
                shown_key(key)
            )));
        }
        if self.jobs.refused(id).is_some() {
            return Err(CoordinatorError::AlreadyExists(format!(
                "idempotency key {} already names job {id}, whose stored spec this release \
                 refuses; submit under another key",
                shown_key(key)
            )));
        }
        let existing = &self.jobs.get(id)?.rec.spec;
        if !existing.same_question(spec) {
            return Err(CoordinatorError::AlreadyExists(format!(
                "idempotency key {} already names job {id}, submitted with a different spec ({})",
                shown_key(key),
                existing.describe()
            )));
        }
        self.job(id, now_ms).map(Some)
    }

    /// Cancels a queued or running job; cancelling a cancelled job is a no-op.
    pub fn cancel(&mut self, id: &str, now_ms: u64) -> Result<proto::Job> {
        self.cancel_as(ADMIN, id, now_ms)
    }

    /// [`Scheduler::cancel`] by `user`: only their own job, unless an admin.
    pub fn cancel_by(&mut self, user: &User, id: &str, now_ms: u64) -> Result<proto::Job> {
        self.authorize(user, id, Access::Cancel, now_ms)?;
        self.cancel_as(&user.name, id, now_ms)
    }

    /// Cancels the job on `who`'s word, audited in its batch.
    fn cancel_as(&mut self, who: &str, id: &str, now_ms: u64) -> Result<proto::Job> {
        if let Some(refused) = self.jobs.refused(id) {
            return match refused.rec.state {
                JobState::Cancelled => Ok(refused.view(now_ms)),
                state => Err(CoordinatorError::FailedPrecondition(format!(
                    "job {id} already {}",
                    state.name()
                ))),
            };
        }
        let entry = self.jobs.get_mut(id)?;
        match entry.rec.state {
            JobState::Cancelled => return Ok(entry.view(now_ms)),
            JobState::Succeeded | JobState::Failed => {
                return Err(CoordinatorError::FailedPrecondition(format!(
                    "job {id} already {}",
                    entry.rec.state.name()
                )));
            }
            JobState::Queued | JobState::Running => {}
        }
        let mut rec = entry.rec.clone();
        rec.state = JobState::Cancelled;
        rec.finished_ms = Some(now_ms);
        let mut batch = Batch::default();
        batch.put(Tree::Jobs, job_key(id), encode(&rec));
        let by = format!("cancelled by {who}");
        let cancelled = Event::job("cancelled", &by);
        entry.log(&mut batch, now_ms, cancelled);
        self.audit(&mut batch, now_ms, who, "cancel", id, true, "cancelled");
        self.write(batch)?;
        let entry = self.jobs.get_mut(id)?;
        entry.rec = rec;
        entry.pending.clear();
        Ok(entry.view(now_ms))
    }

    /// Deletes a finished job (with `force`, a queued or running one is
    /// cancelled first): its shards, events, stage output and checkpoints go
    /// in one batch, and a tombstone keeps its id, so the id is never reused
    /// and asking for the job says it was deleted. Refused, changing nothing,
    /// for an unfinished job without `force`.
    pub fn delete(&mut self, id: &str, force: bool, now_ms: u64) -> Result<()> {
        self.delete_as(ADMIN, id, force, now_ms)
    }

    /// [`Scheduler::delete`] by `user`: only their own job, unless an admin.
    pub fn delete_by(&mut self, user: &User, id: &str, force: bool, now_ms: u64) -> Result<()> {
        self.authorize(user, id, Access::Delete, now_ms)?;
        self.delete_as(&user.name, id, force, now_ms)
    }

    /// Deletes the job on `who`'s word, audited in its batch.
    fn delete_as(&mut self, who: &str, id: &str, force: bool, now_ms: u64) -> Result<()> {
        if self.jobs.refused(id).is_some() {
            return self.delete_refused(who, id, now_ms);
        }
        let entry = self.jobs.get(id)?;
        if !entry.rec.state.is_finished() {
            if !force {
                return Err(CoordinatorError::FailedPrecondition(format!(
                    "job {id} is {}: cancel it first, or delete it with --force",
                    entry.rec.state.name()
                )));
            }
            self.cancel_as(who, id, now_ms)?;
        }
        let entry = self.jobs.get(id)?;
        let mut batch = job_data_removed(self.store.as_ref(), id)?;
        // Attachments no other job names go with their last job.
        for digest in entry.rec.spec.attachments() {
            let shared = self
                .jobs
                .iter()
                .any(|other| other.rec.id != id && other.rec.spec.attachments().contains(&digest));
            if !shared {
                batch.remove(Tree::Blobs, attachment_key(&digest));
            }
        }
        let tombstone = tombstone(&entry.rec, &mut batch, now_ms);
        batch.put(Tree::Jobs, job_key(id), encode(&tombstone));
        self.audit(&mut batch, now_ms, who, "delete", id, true, "deleted");
        self.write(batch)?;
        self.jobs.remove(id, now_ms);
        Ok(())
    }

    /// Keeps the counts of newly finished jobs in their records and lets their
    /// shards and stage data go from memory, so that memory follows the
    /// unfinished jobs, not the history (and a restart reads no shard of a
    /// settled job). Returns how many were settled.
    pub fn settle_finished(&mut self, now_ms: u64) -> Result<usize> {
        let mut batch = Batch::default();
        let mut settled = Vec::new();
        for entry in self.jobs.iter() {
            if entry.rec.state.is_finished() && entry.rec.final_counts.is_none() {
                let mut rec = entry.rec.clone();
                rec.final_counts = Some(entry.final_counts(now_ms));
                batch.put(Tree::Jobs, job_key(&rec.id), encode(&rec));
                settled.push(rec);
            }
        }
        if settled.is_empty() {
            return Ok(0);
        }
        self.write(batch)?;
        let count = settled.len();
        for rec in settled {
            let entry = self.jobs.known(&rec.id.clone());
            entry.rec = rec;
            entry.shards.clear();
            entry.outputs = StageOutputs::default();
            entry.pending.clear();
        }
        Ok(count)
    }

    /// Deletes every job that finished at or before `cutoff_ms` (retention);
    /// returns how many.
    pub fn delete_finished_before(&mut self, cutoff_ms: u64, now_ms: u64) -> Result<usize> {
        let due_at = |state: JobState, finished: Option<u64>| {
            state.is_finished() && finished.is_some_and(|f| f <= cutoff_ms)
        };
        let runnable = self
            .jobs
            .iter()
            .map(|e| (&e.rec.id, e.rec.state, e.rec.finished_ms));
        let refused = self
            .jobs
            .refused_jobs()
            .map(|r| (&r.rec.id, r.rec.state, r.rec.finished_ms));
        let due: Vec<String> = runnable
            .chain(refused)
            .filter(|&(_, state, finished)| due_at(state, finished))
            .map(|(id, _, _)| id.clone())
            .collect();
        for id in &due {
            self.delete_as(RETENTION, id, false, now_ms)?;
        }
        Ok(due.len())
    }

    /// The job's events from sequence number `from` on.
    /// The job's events from sequence `from`, at most [`EVENTS_PER_CALL`]
    /// of them: a job of a million shards has millions, more than one
    /// message holds; the caller asks again from the next sequence.
    pub fn events(&self, id: &str, from: u64) -> Result<Vec<EventRecord>> {
        self.jobs.check_exists(id)?;
        let mut start = event_prefix(id);
        start.extend_from_slice(format!("{from:012}").as_bytes());
        let all = self.store.scan_prefix(Tree::Events, &event_prefix(id))?;
        all.into_iter()
            .filter(|(k, _)| *k >= start)
            .take(EVENTS_PER_CALL)
            .map(|(_, v)| decode("event", &v))
            .collect()
    }
}

/// The most events one `Events` call returns (well within a message).
pub const EVENTS_PER_CALL: usize = 16_384;

/// A removal of everything a job keeps under its prefix: its shards, events,
/// stage output and checkpoints.
pub(super) fn job_data_removed(store: &dyn Store, id: &str) -> Result<Batch> {
    let mut batch = Batch::default();
    for tree in [Tree::Shards, Tree::Events, Tree::Blobs] {
        for (key, _) in store.scan_prefix(tree, &shard_prefix(id))? {
            batch.remove(tree, key);
        }
    }
    Ok(batch)
}

/// The record a deleted job leaves (its id stays taken); its idempotency
/// key is removed in `batch`.
pub(super) fn tombstone<S: Clone>(
    rec: &JobRecord<S>,
    batch: &mut Batch,
    now_ms: u64,
) -> JobRecord<S> {
    let mut tombstone = rec.clone();
    tombstone.deleted_ms = Some(now_ms);
    tombstone.details = None;
    if let Some(key) = tombstone.idempotency_key.take() {
        batch.remove(Tree::Keys, key.into_bytes());
    }
    tombstone
}

/// An idempotency key as messages echo it: in part, since it may be 256
/// bytes long.
fn shown_key(key: &str) -> String {
    let shown: String = key.chars().take(32).collect();
    let more = if shown.len() < key.len() { "..." } else { "" };
    format!("{shown:?}{more}")
}

/// The record of job number `seq`, queued, at its first stage.
fn new_job(
    seq: u64,
    spec: ValidSpec,
    plan: JobPlan,
    idempotency_key: Option<String>,
    first: &[PlannedShard],
    now_ms: u64,
) -> JobRecord {
    JobRecord {
        id: job_id(seq),
        seq,
        spec,
        plan,
        state: JobState::Queued,
        idempotency_key,
        created_ms: now_ms,
        started_ms: None,
        finished_ms: None,
        deleted_ms: None,
        final_counts: None,
        owner: None,
        slot_ms: 0,
        stage: 1,
        shards_per_stage: first.len() as u64,
        work_per_stage: first.iter().map(|s| s.work_total).sum(),
        answer: None,
        details: None,
        error: None,
    }
}
