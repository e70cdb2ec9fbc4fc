//! The life of a lease after it is handed out: heartbeats renew the worker's
//! live leases (in memory) and revoke the others; a lease not renewed
//! expires. An expired lease returns its shard to the queue with backoff
//! and a failed attempt counted; a shard whose failed attempts reach the job's
//! limit fails its job. The expired attempt stays the shard's latest until the
//! shard is leased again, so its late result is still accepted.

use tally_kinds::kind::format_bytes;
use tally_wire::lease::LeaseId;
use tally_wire::proto;

use crate::error::{CoordinatorError, Result};
use crate::records::{JobRecord, JobState, ShardRecord, ShardState, encode, job_key, shard_key};
use crate::store::{Batch, Tree};

use super::events::Event;
use super::job::JobEntry;
use super::protocol::{Restarted, WORKER_LOST_MS};
use super::state::{Scheduler, SchedulerConfig};

impl Scheduler {
    /// Renews the worker's valid leases and records their progress; returns the
    /// leases it must stop (unknown, superseded, or of a job that is not running).
    pub fn heartbeat(
        &mut self,
        worker: &str,
        leases: &[proto::LeaseProgress],
        now_ms: u64,
    ) -> Vec<String> {
        self.workers.heard_from(worker, now_ms);
        let mut revoked = Vec::new();
        for progress in leases {
            let current = progress
                .lease_id
                .parse::<LeaseId>()
                .map_err(CoordinatorError::from)
                .and_then(|lease| Ok((self.current_lease(worker, &lease)?, lease)));
            match current {
                Ok((position, lease)) => {
                    let stall_limit = self.config.stall_limit_ms;
                    let entry = self.jobs.known(&lease.job);
                    let ttl = entry.rec.spec.options().lease_ttl_ms;
                    entry.shards.update(position, |shard| {
                        let work_done = progress.work_done.min(shard.work_total);
                        if work_done > shard.work_done || shard.progress_ms == 0 {
                            shard.progress_ms = now_ms;
                        }
                        shard.work_done = work_done;
                        // A shard stuck in a live worker (no progress for the
                        // stall limit) is no longer renewed: its lease expires
                        // and the shard goes to another attempt.
                        if now_ms.saturating_sub(shard.progress_ms) <= stall_limit {
                            shard.lease_expires_ms = now_ms + ttl;
                        }
                    });
                }
                Err(_) => revoked.push(progress.lease_id.clone()),
            }
        }
        revoked
    }

    /// Checks that `lease` is the current, live lease of `worker` on a running
    /// job; returns the shard's position in the job's current stage.
    fn current_lease(&self, worker: &str, lease: &LeaseId) -> Result<usize> {
        let LeaseId {
            job,
            stage,
            index,
            attempt,
        } = lease;
        let entry = self.jobs.get(job)?;
        if entry.rec.state.is_finished() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "job {job} is {}",
                entry.rec.state.name()
            )));
        }
        // Shards sit at their index in the current stage.
        let pos = *index as usize;
        entry
            .shards
            .get(pos)
            .filter(|s| s.stage == *stage && s.index == *index)
            .ok_or_else(|| {
                CoordinatorError::FailedPrecondition(format!(
                    "shard {index} of stage {stage} of job {job} is not current"
                ))
            })?;
        let shard = &entry.shards[pos];
        if shard.attempt != *attempt || shard.state == ShardState::Done {
            return Err(super::reports::stale_attempt(lease, shard));
        }
        if shard.state == ShardState::Leased && shard.worker.as_deref() != Some(worker) {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "lease {lease} belongs to another worker"
            )));
        }
        Ok(pos)
    }

    /// Returns expired leases to the queue (with backoff); a shard whose failed
    /// attempts reach the job's limit fails its job. Returns how many expired.
    pub fn expire_leases(&mut self, now_ms: u64) -> Result<usize> {
        let ids = self.jobs.unfinished();
        let mut expired = 0;
        for id in ids {
            expired += self.expire_job_leases(&id, now_ms)?;
        }
        Ok(expired)
    }

    /// Returns the leases `worker` held to the queue at once: a new process
    /// of it registered, so the old one, which held them, is gone (killed,
    /// out of memory when `restarted` says its cgroup counted a kill). Each
    /// counts as a worker that vanished with its shard (see `expire`).
    /// Returns how many.
    pub fn expire_restarted(
        &mut self,
        worker: &str,
        restarted: &Restarted,
        now_ms: u64,
    ) -> Result<usize> {
        let note = match restarted.oom_kills {
            Some(kills) => format!(
                "its worker was killed for lack of memory while running it (its cgroup counts {kills} out-of-memory kill(s)) and restarted"
            ),
            None => "its worker restarted while running it".to_string(),
        };
        let mut lost = 0;
        for id in self.jobs.unfinished() {
            let entry = self.jobs.known(&id);
            let held: Vec<(usize, Option<(u64, String)>)> = entry
                .shards
                .leased()
                .filter(|&i| entry.shards[i].worker.as_deref() == Some(worker))
                .map(|i| (i, Some((restarted.budget, note.clone()))))
                .collect();
            lost += self.expire_shards(&id, held, now_ms)?;
        }
        Ok(lost)
    }

    /// Writes every job's deferred events in one batch (the expiry tick's),
    /// so that leases show in the log within a tick (see `events.rs`).
    pub fn write_deferred_events(&mut self) -> Result<()> {
        let mut batch = Batch::default();
        for entry in self.jobs.iter_mut() {
            entry.log_deferred(&mut batch);
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.write(batch)
    }

    /// Expires the job's due leases in one batch; returns how many.
    fn expire_job_leases(&mut self, id: &str, now_ms: u64) -> Result<usize> {
        let entry = self.jobs.known(id);
        let ttl = entry.rec.spec.options().lease_ttl_ms;
        let due: Vec<(usize, Option<(u64, String)>)> = entry
            .shards
            .leased()
            .filter(|&i| entry.shards[i].lease_expires_ms <= now_ms)
            .map(|i| {
                // A worker not heard from since it took or last renewed the
                // lease, or not within the lease's time to live, vanished
                // with the shard (killed, out of memory): a live one would
                // have renewed it, or at least beaten (a stalled shard). Both
                // bounds are strict: an expiry at the lease's very deadline
                // finds a silent worker last seen exactly when it took it.
                // Its budget, as it said it at registration.
                let shard = &entry.shards[i];
                let holder = shard.worker.as_deref().unwrap_or_default();
                let granted_ms = shard.lease_expires_ms.saturating_sub(ttl);
                let gone = || "its worker vanished while running it".to_string();
                let vanished = match self.workers.all().get(holder) {
                    Some(w)
                        if w.last_seen_ms > granted_ms
                            && w.last_seen_ms + ttl.min(WORKER_LOST_MS) > now_ms =>
                    {
                        None
                    }
                    Some(w) => Some((w.memory_budget(), gone())),
                    None => Some((0, gone())),
                };
                (i, vanished)
            })
            .collect();
        self.expire_shards(id, due, now_ms)
    }

    /// Expires the leases of the job's shards `due` (each with its worker's
    /// budget and why, when the worker is gone) in one batch; returns how
    /// many.
    fn expire_shards(
        &mut self,
        id: &str,
        due: Vec<(usize, Option<(u64, String)>)>,
        now_ms: u64,
    ) -> Result<usize> {
        if due.is_empty() {
            return Ok(0);
        }
        let config = self.config.clone();
        let entry = self.jobs.known(id);
        let mut batch = Batch::default();
        let mut rec = entry.rec.clone();
        let mut changed = Vec::new();
        for (i, vanished) in due {
            let vanished = vanished
                .as_ref()
                .map(|(budget, why)| (*budget, why.as_str()));
            changed.push(expire(
                entry, &mut rec, i, vanished, &config, &mut batch, now_ms,
            ));
        }
        self.write(batch)?;
        let entry = self.jobs.known(id);
        let expired = changed.len();
        for shard in changed {
            let i = shard.index;
            entry.shards.set(i as usize, shard);
            entry.requeue(i);
        }
        if rec.state == JobState::Failed {
            entry.pending.clear();
        }
        entry.rec = rec;
        Ok(expired)
    }
}

/// The shard at position `i` with its lease expired, and the job failed in
/// `rec` if that was the shard's last attempt; the writes go to `batch`.
/// `vanished` is the budget of the lease's worker when it is gone (no longer
/// heard from, or restarted), and why: from
/// [`crate::records::VANISHED_LIMIT`] such workers on, the shard goes only to
/// larger ones, which its event says.
fn expire(
    entry: &mut JobEntry,
    rec: &mut JobRecord,
    i: usize,
    vanished: Option<(u64, &str)>,
    config: &SchedulerConfig,
    batch: &mut Batch,
    now_ms: u64,
) -> ShardRecord {
    let mut shard = entry.shards[i].clone();
    let worker = shard.worker.take().unwrap_or_default();
    shard.state = ShardState::Pending;
    shard.failed_attempts += 1;
    shard.last_error = Some(format!(
        "lease of attempt {} expired",
        tally_wire::lease::Attempt(shard.attempt)
    ));
    shard.not_before_ms = now_ms + config.backoff_ms(shard.failed_attempts);
    let note = match vanished {
        Some((budget, why)) => {
            shard.vanished += 1;
            shard.vanished_budget = shard.vanished_budget.max(budget);
            why
        }
        None => "",
    };
    entry.log(
        batch,
        now_ms,
        Event::shard("expired", &shard, &worker, note),
    );
    if let Some(over) = shard.needs_budget_over()
        && vanished.is_some()
    {
        let message = format!(
            "{} workers vanished while running it, the largest with a memory budget of {}: it \
             seems to need more, and goes only to workers with a larger budget",
            shard.vanished,
            format_bytes(over)
        );
        entry.log(
            batch,
            now_ms,
            Event::shard("needs-memory", &shard, &worker, &message),
        );
    }
    if shard.failed_attempts >= rec.spec.options().max_attempts && rec.state != JobState::Failed {
        rec.state = JobState::Failed;
        rec.finished_ms = Some(now_ms);
        let why = match shard.needs_budget_over() {
            Some(over) => format!(
                "its workers vanished while running it {} time(s), the largest with a memory \
                 budget of {}: it seems to need more memory than that",
                shard.vanished,
                format_bytes(over)
            ),
            None => "its lease expired each time".to_string(),
        };
        let message = format!(
            "stage {}, shard {} failed after {} attempt(s): {why}",
            shard.stage, shard.index, shard.failed_attempts
        );
        rec.error = Some(message.clone());
        entry.log(
            batch,
            now_ms,
            Event::shard("failed", &shard, &worker, &message),
        );
        batch.put(Tree::Jobs, job_key(&rec.id), encode(&*rec));
    }
    batch.put(
        Tree::Shards,
        shard_key(&rec.id, shard.stage, shard.index),
        encode(&shard),
    );
    shard
}
