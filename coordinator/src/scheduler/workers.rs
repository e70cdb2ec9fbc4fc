//! Workers as the scheduler knows them: registration (which opens a session),
//! the session check on every later call, heartbeats (which renew their live
//! leases in memory and revoke the others) and the check that a lease is the
//! current, live attempt of its shard.

use std::collections::HashMap;

use tally_wire::lease::LeaseId;
use tally_wire::proto;
use tally_wire::transport::constant_time_eq;

use crate::error::{CoordinatorError, Result};
use crate::records::ShardState;

use tally_kinds::kind::WORKER_MEMORY_BUDGET;

use super::protocol::{Registration, WORKER_FORGOTTEN_MS, WorkerInfo};
use super::state::Scheduler;

impl Scheduler {
    /// Registers `worker` with a new session: a worker registering again (it
    /// restarted, or this coordinator did) replaces its old session.
    pub fn register(
        &mut self,
        worker: &str,
        registration: Registration,
        session: String,
        now_ms: u64,
    ) {
        let Registration {
            hostname,
            slots,
            version,
            memory_budget,
            capabilities,
        } = registration;
        self.workers.insert(
            worker.to_string(),
            WorkerInfo {
                hostname,
                session,
                slots,
                version,
                memory_budget,
                capabilities,
                last_seen_ms: now_ms,
            },
        );
    }

    /// The largest memory budget of the live workers, and who has it: a job
    /// is fitted to it at submission. With no live worker, the budget a
    /// worker is assumed to have.
    pub fn largest_memory_budget(&self, now_ms: u64) -> (u64, String) {
        let live = self.workers.values().filter(|w| w.is_live(now_ms));
        match live.max_by_key(|w| w.memory_budget()) {
            Some(w) => (
                w.memory_budget(),
                format!("the largest worker ({})", w.hostname),
            ),
            None => (
                WORKER_MEMORY_BUDGET,
                "a worker is assumed to have with none registered".to_string(),
            ),
        }
    }

    /// Refuses a call of `worker` that does not carry its current session:
    /// a worker never registered, forgotten after a long silence, replaced by
    /// a later registration, or registered with a coordinator that has since
    /// restarted (sessions live in memory). The worker registers again.
    pub fn check_session(&self, worker: &str, session: &str) -> Result<()> {
        match self.workers.get(worker) {
            Some(info) if constant_time_eq(info.session.as_bytes(), session.as_bytes()) => Ok(()),
            _ => Err(CoordinatorError::Unauthenticated(format!(
                "no live session {} for worker {worker}: register again",
                if session.is_empty() {
                    "given"
                } else {
                    "matches"
                }
            ))),
        }
    }

    pub fn workers(&self) -> &HashMap<String, WorkerInfo> {
        &self.workers
    }

    /// Drops the workers not heard from for [`WORKER_FORGOTTEN_MS`] from the
    /// list (a worker that comes back registers again); returns how many.
    pub fn forget_silent_workers(&mut self, now_ms: u64) -> usize {
        let before = self.workers.len();
        self.workers
            .retain(|_, w| w.last_seen_ms + WORKER_FORGOTTEN_MS >= now_ms);
        before - self.workers.len()
    }

    /// Renews the worker's valid leases and records their progress; returns the
    /// leases it must stop (unknown, superseded, or of a job that is not running).
    pub fn heartbeat(
        &mut self,
        worker: &str,
        leases: &[proto::LeaseProgress],
        now_ms: u64,
    ) -> Vec<String> {
        if let Some(info) = self.workers.get_mut(worker) {
            info.last_seen_ms = now_ms;
        }
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
                    let entry = self.known_entry(&lease.job);
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
        let entry = self.entry(job)?;
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
            return Err(CoordinatorError::FailedPrecondition(format!(
                "attempt {attempt} of stage {stage}, shard {index} of job {job} is stale (current attempt {}, {:?})",
                shard.attempt, shard.state
            )));
        }
        if shard.state == ShardState::Leased && shard.worker.as_deref() != Some(worker) {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "lease {lease} belongs to another worker"
            )));
        }
        Ok(pos)
    }
}
