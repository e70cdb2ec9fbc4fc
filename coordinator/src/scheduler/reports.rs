//! Reports of shard attempts: checkpoints and failures here, results in
//! `acceptance`. A report is accepted only from the shard's current attempt; a
//! report of any other attempt is refused with FailedPrecondition and changes
//! nothing.

use std::sync::Arc;

use tally_kinds::values::EncodedPartial;
use tally_wire::lease::{Attempt, LeaseId};

use crate::error::{CoordinatorError, Result};
use crate::records::{
    JobRecord, JobState, ShardRecord, ShardState, checkpoint_blob_key, checkpoint_key, encode,
    job_key, remove_checkpoint, shard_key,
};
use crate::store::{Batch, Store, Tree};

use super::events::Event;
use super::job::JobEntry;
use super::protocol::{Report, ReportOutcome, ReportedCheckpoint, ReportedFailure, ResultCheck};
use super::state::{Scheduler, SchedulerConfig};

impl Scheduler {
    /// Accepts a report of the current attempt of a shard: a checkpoint, a result
    /// (with the stage output), or a failure. A report of any other attempt is
    /// refused with FailedPrecondition and changes nothing.
    pub fn report(&mut self, mut report: Report, now_ms: u64) -> Result<ReportOutcome> {
        let entry = self.jobs.get(&report.lease.job)?;
        if entry.rec.state.is_finished() {
            return Ok(ReportOutcome::STOP);
        }
        let state = current_attempt(entry, &report)?.state;
        if let Some(result) = &report.result {
            return self.accept_result(&report, result, now_ms);
        }
        if let Some(failure) = &report.failure {
            if state == ShardState::Pending {
                // The attempt's lease expired and was counted as a failed attempt
                // then; the shard is already queued for its next attempt.
                return Ok(ReportOutcome::STOP);
            }
            let failed = FailedAttempt {
                lease: &report.lease,
                worker: &report.worker,
                failure,
                discard_replicas: false,
            };
            return self.record_failure(failed, now_ms);
        }
        if let Some(checkpoint) = report.checkpoint.take() {
            self.record_checkpoint(&report, checkpoint, now_ms)?;
        }
        Ok(ReportOutcome::CONTINUE)
    }

    /// Where the checkpoint that `worker`'s current lease `lease` starts from
    /// is kept: the store and key, read outside the lock (a large checkpoint
    /// is fetched apart from its lease, see `FetchCheckpoint`). Any other
    /// attempt, or one without a checkpoint, is refused.
    pub fn checkpoint_of(
        &self,
        worker: &str,
        lease: &LeaseId,
    ) -> Result<(Arc<dyn Store>, Vec<u8>)> {
        let entry = self.jobs.get(&lease.job)?;
        let shard = current_attempt(entry, &Report::new(worker.to_string(), lease.clone()))?;
        if shard.state != ShardState::Leased || !shard.has_checkpoint {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "lease {lease} starts from no checkpoint"
            )));
        }
        Ok((
            self.store.clone(),
            checkpoint_key(&lease.job, lease.stage, lease.index),
        ))
    }

    /// What checking `report`'s result needs, if it is the result of its
    /// shard's current attempt (else `None`: the report itself is then
    /// answered as before). The check can then run without the lock; the
    /// shard's task and the job's plan do not change while the attempt is
    /// current.
    pub fn result_to_check(&self, report: &Report) -> Option<ResultCheck> {
        let entry = self.jobs.get(&report.lease.job).ok()?;
        if report.result.is_none() || entry.rec.state.is_finished() {
            return None;
        }
        let shard = current_attempt(entry, report).ok()?;
        Some(ResultCheck {
            spec: entry.rec.spec.clone(),
            plan: entry.rec.plan.clone(),
            task: shard.task.clone(),
        })
    }

    /// Keeps the checkpoint's state and partial: a later attempt of the shard
    /// continues from it.
    fn record_checkpoint(
        &mut self,
        report: &Report,
        checkpoint: ReportedCheckpoint,
        now_ms: u64,
    ) -> Result<()> {
        let LeaseId {
            job, stage, index, ..
        } = &report.lease;
        let entry = self.jobs.known(job);
        // As a worker sends it: no partial is empty bytes.
        let partial = if checkpoint.partial.is_empty() {
            None
        } else {
            let partial = EncodedPartial::from_bytes(&checkpoint.partial)?;
            entry.rec.spec.check_checkpoint(&partial)?;
            Some(partial)
        };
        let mut shard = entry.shards[*index as usize].clone();
        shard.has_checkpoint = true;
        shard.partial = partial;
        shard.work_done = checkpoint.work_done.min(shard.work_total);
        let mut batch = Batch::default();
        // A state in the stage store is kept as its reference, beside where
        // an inline state would be; the other of the two is removed.
        let (key, other, value) = match &checkpoint.state_blob {
            Some(blob) => (
                checkpoint_blob_key(job, *stage, *index),
                checkpoint_key(job, *stage, *index),
                blob.encode(),
            ),
            None => (
                checkpoint_key(job, *stage, *index),
                checkpoint_blob_key(job, *stage, *index),
                checkpoint.state,
            ),
        };
        batch.put(Tree::Blobs, key, value);
        batch.remove(Tree::Blobs, other);
        batch.put(Tree::Shards, shard_key(job, *stage, *index), encode(&shard));
        let seq = entry.next_event;
        let note = format!("work {}", shard.work_done);
        let event = Event::shard(super::events::CHECKPOINT, &shard, &report.worker, &note);
        entry.log(&mut batch, now_ms, event);
        if let Err(e) = self.write(batch) {
            self.jobs.known(job).next_event = seq;
            return Err(e);
        }
        self.jobs.known(job).shards.set(*index as usize, shard);
        Ok(())
    }

    /// Ends an attempt without a result: the shard returns to the queue with
    /// backoff and a failed attempt counted (none for a shard handed back or
    /// one that found no room on its worker's disk); at the job's limit, or
    /// for a permanent error, the job fails.
    pub(super) fn record_failure(
        &mut self,
        failed: FailedAttempt,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let config = self.config.clone();
        let LeaseId { job, index, .. } = failed.lease;
        let entry = self.jobs.known(job);
        let mut shard = entry.shards[*index as usize].clone();
        let mut rec = entry.rec.clone();
        let mut batch = Batch::default();
        shard.state = ShardState::Pending;
        shard.worker = None;
        if failed.discard_replicas {
            shard.replicas.clear();
            if shard.has_checkpoint {
                remove_checkpoint(&mut batch, job, shard.stage, *index);
                shard.has_checkpoint = false;
            }
        }
        end_attempt(entry, &mut shard, &failed, &config, &mut batch, now_ms);
        let handed_back_too_often =
            failed.failure.handed_back && hand_backs(&shard) > MAX_HAND_BACKS;
        let counted = !failed.failure.handed_back && !failed.failure.no_room;
        let fail_job = handed_back_too_often
            || (counted
                && (failed.failure.permanent
                    || shard.failed_attempts >= rec.spec.options().max_attempts));
        if fail_job {
            let why = if handed_back_too_often {
                format!(
                    "handed back {} times without a result (the last: {})",
                    hand_backs(&shard),
                    failed.failure.message
                )
            } else {
                failed.failure.message.clone()
            };
            fail(
                entry,
                &mut rec,
                &shard,
                failed.worker,
                &why,
                &mut batch,
                now_ms,
            );
        }
        batch.put(
            Tree::Shards,
            shard_key(job, shard.stage, *index),
            encode(&shard),
        );
        self.write(batch)?;
        let entry = self.jobs.known(job);
        entry.shards.set(*index as usize, shard);
        entry.rec = rec;
        if fail_job {
            entry.pending.clear();
        } else {
            entry.requeue(*index);
        }
        Ok(ReportOutcome::STOP)
    }
}

/// Hand-backs one shard may have before its job fails. Each is a worker
/// that stopped while it held the shard (a drain, a restart of `tally run`);
/// more than this means a worker or kernel that hands shards back instead of
/// computing them, which would otherwise lease the shard for ever.
pub const MAX_HAND_BACKS: u64 = 64;

/// Hand-backs after which a handed-back shard waits the failure backoff
/// before its next lease, so that a storm of hand-backs is slowed long before
/// [`MAX_HAND_BACKS`].
const HAND_BACKS_WITHOUT_BACKOFF: u64 = 4;

/// The attempts of `shard` that ended handed back since the scheduler was
/// loaded.
fn hand_backs(shard: &ShardRecord) -> u64 {
    u64::from(shard.hand_backs)
}

/// An attempt that ends without a result.
pub(super) struct FailedAttempt<'a> {
    pub(super) lease: &'a LeaseId,
    pub(super) worker: &'a str,
    pub(super) failure: &'a ReportedFailure,
    /// The replicas kept so far are dropped with it (they disagreed).
    pub(super) discard_replicas: bool,
}

/// The shard of `report`'s lease if the report comes from its current attempt.
/// A lease that expired but was not yet re-issued is still the latest attempt:
/// its result is as good as any, so it is accepted.
fn current_attempt<'a>(entry: &'a JobEntry, report: &Report) -> Result<&'a ShardRecord> {
    let LeaseId {
        job,
        stage,
        index,
        attempt,
    } = &report.lease;
    if *stage != entry.rec.stage || *index as usize >= entry.shards.len() {
        return Err(CoordinatorError::FailedPrecondition(format!(
            "shard {index} of stage {stage} of job {job} is not current (the job is at stage {})",
            entry.rec.stage
        )));
    }
    let shard = &entry.shards[*index as usize];
    if shard.attempt != *attempt || shard.state == ShardState::Done {
        return Err(stale_attempt(&report.lease, shard));
    }
    if shard.state == ShardState::Leased && shard.worker.as_deref() != Some(report.worker.as_str())
    {
        return Err(CoordinatorError::FailedPrecondition(format!(
            "lease {} belongs to another worker",
            report.lease
        )));
    }
    Ok(shard)
}

/// Why `lease` is not the current attempt of `shard`.
pub(super) fn stale_attempt(lease: &LeaseId, shard: &ShardRecord) -> CoordinatorError {
    let (attempt, current) = (Attempt(lease.attempt), Attempt(shard.attempt));
    let why = if shard.state == ShardState::Done {
        "the shard is done".to_string()
    } else if attempt.epoch() < current.epoch() {
        format!("it was leased before the coordinator restarted; current attempt {current}")
    } else {
        format!("current attempt {current}")
    };
    CoordinatorError::FailedPrecondition(format!(
        "attempt {attempt} of shard {}/{} of job {} is stale ({why})",
        lease.stage, lease.index, lease.job
    ))
}

/// Returns the shard to the queue: at once if it was handed back, after a
/// backoff with one more failed attempt otherwise.
fn end_attempt(
    entry: &mut JobEntry,
    shard: &mut ShardRecord,
    failed: &FailedAttempt,
    config: &SchedulerConfig,
    batch: &mut Batch,
    now_ms: u64,
) {
    let message = &failed.failure.message;
    if failed.failure.handed_back {
        shard.hand_backs = shard.hand_backs.saturating_add(1);
        let repeated = hand_backs(shard).saturating_sub(HAND_BACKS_WITHOUT_BACKOFF);
        shard.not_before_ms = match repeated {
            0 => now_ms,
            n => now_ms + config.backoff_ms(n.min(u64::from(u32::MAX)) as u32),
        };
        let event = Event::shard("handed-back", shard, failed.worker, message);
        entry.log(batch, now_ms, event);
    } else if failed.failure.no_room {
        // Waits for room without end: the job says why (`waiting`), and is
        // cancelled by its owner if room never comes. Logged once a wait.
        let waited = shard.no_room_note.is_some();
        shard.no_room_note = Some(format!("on worker {}: {message}", failed.worker));
        shard.not_before_ms = now_ms + config.no_room_retry_ms;
        if !waited {
            let event = Event::shard("no-room", shard, failed.worker, message);
            entry.log(batch, now_ms, event);
        }
    } else {
        shard.no_room_note = None;
        shard.failed_attempts += 1;
        shard.last_error = Some(message.clone());
        shard.not_before_ms = now_ms + config.backoff_ms(shard.failed_attempts);
        let event = Event::shard("failed-attempt", shard, failed.worker, message);
        entry.log(batch, now_ms, event);
    }
}

/// Fails the job, saying `why`.
fn fail(
    entry: &mut JobEntry,
    rec: &mut JobRecord,
    shard: &ShardRecord,
    worker: &str,
    why: &str,
    batch: &mut Batch,
    now_ms: u64,
) {
    rec.state = JobState::Failed;
    rec.finished_ms = Some(now_ms);
    let message = format!(
        "stage {}, shard {} failed after {} attempt(s): {why}",
        shard.stage, shard.index, shard.failed_attempts
    );
    rec.error = Some(message.clone());
    batch.put(Tree::Jobs, job_key(&rec.id), encode(&*rec));
    let event = Event::shard("failed", shard, worker, &message);
    entry.log(batch, now_ms, event);
}
