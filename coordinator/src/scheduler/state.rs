//! The scheduler's state: the store its changes go to, its configuration,
//! and the parts it composes: the job table (`jobs`) and the workers heard
//! from (`workers`). Everything here except lease renewals, live progress
//! and the workers is derived from the store (see `recovery`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use tally_kinds::kind::WorkerRoom;

use crate::error::Result;
use crate::store::Store;

use super::jobs::Jobs;
use super::protocol::{Registration, Restarted, WorkerInfo};
use super::workers::Workers;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// First retry delay after a failed attempt; doubles per failure.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// How long a shard that found no room on its worker's disk waits
    /// before it is leased again (a disk does not free itself within
    /// milliseconds); no attempt is counted for it.
    pub no_room_retry_ms: u64,
    /// Heartbeats stop renewing a lease whose shard has made no progress for
    /// this long (its work counter did not grow), so a shard stuck in a live
    /// worker expires and is leased again. Far above any kernel's quiet
    /// stretch between progress updates.
    pub stall_limit_ms: u64,
    /// Stage data is in a stage store outside the coordinator: the outputs
    /// kept are blob references, and a finished stage's input stays one
    /// stage longer (see `stage_outputs::retained_stages`).
    pub external_stage_store: bool,
    /// With `external_stage_store`: keep the input of the stage before the
    /// current one a stage longer, so that a lost blob of it can be computed
    /// again. Off where the store cannot lose a blob the coordinator's own
    /// disk would not (`tally run`'s stage directory beside its store), to
    /// keep a stage fewer on that disk.
    pub spare_stage: bool,
    /// How much room the stage store's disk has, for the barriers of
    /// frontier plans (see `room`); none: never asked.
    pub stage_room: Option<super::stage_room::RoomSource>,
    /// How long a user's past slot time takes to count half in the fair
    /// share (see `sharing`).
    pub fair_share_half_life_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            backoff_base_ms: 250,
            backoff_max_ms: 10_000,
            no_room_retry_ms: 30_000,
            stall_limit_ms: 30 * 60 * 1000,
            external_stage_store: false,
            spare_stage: true,
            stage_room: None,
            fair_share_half_life_ms: super::accounts::DEFAULT_HALF_LIFE_MS,
        }
    }
}

impl SchedulerConfig {
    /// Whether a stage's input stays a stage longer (see `spare_stage`).
    pub(super) fn keeps_spare_stage(&self) -> bool {
        self.external_stage_store && self.spare_stage
    }

    /// The delay before a shard's next attempt after `failures` failed ones.
    pub(super) fn backoff_ms(&self, failures: u32) -> u64 {
        let factor = 1u64 << failures.saturating_sub(1).min(20);
        self.backoff_base_ms
            .saturating_mul(factor)
            .min(self.backoff_max_ms)
    }
}

/// The state machine of jobs, stages, shards and leases: the parts it
/// composes (the job table, the workers) each keep their own fields; the
/// operations that cross them live in the submodules of `scheduler`, one
/// responsibility each.
pub struct Scheduler {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: SchedulerConfig,
    pub(super) jobs: Jobs,
    pub(super) workers: Workers,
    /// This load's epoch (durable before any lease of it is handed out): the
    /// high half of every attempt number leased now, so that an attempt
    /// from before a restart never passes for a current one.
    pub(super) epoch: u64,
    /// Whether a group commit flushes the changes after each call (the
    /// coordinator's service); otherwise each change is flushed as it is
    /// written (a scheduler driven directly).
    pub(super) group_commit: bool,
    /// Job numbers are handed out below this only: the latest owner record
    /// of the stage-store prefix reserves them (`stage_owner.rs`), so that a
    /// coordinator restored from the replica never gives an id again.
    /// Unbounded without a stage store outside the coordinator.
    pub(super) job_ids_below: Arc<AtomicU64>,
    /// The users, their metered slot time, the audit log's place.
    pub(super) sharing: super::accounts::Sharing,
}

impl Scheduler {
    /// Leaves flushing to the caller's group commit (`group_commit.rs`):
    /// changes are only applied, and the caller answers after a flush.
    pub fn use_group_commit(&mut self) {
        self.group_commit = true;
    }

    /// Writes one change: applied for the group commit to flush, or
    /// committed (applied and flushed) when there is none.
    pub(super) fn write(&self, batch: crate::store::Batch) -> Result<()> {
        if self.group_commit {
            self.store.apply(batch)
        } else {
            self.store.commit(batch)
        }
    }

    /// The bound on job numbers (see the field), shared with whoever
    /// reserves them.
    pub fn job_ids_below(&self) -> Arc<AtomicU64> {
        self.job_ids_below.clone()
    }

    /// The number the next job gets.
    pub fn next_job_number(&self) -> u64 {
        self.jobs.next_seq()
    }

    /// This load's epoch (see the field).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn store_size_on_disk(&self) -> Option<u64> {
        self.store.size_on_disk()
    }

    /// Registers `worker` with a new session (see [`Workers::register`]);
    /// says when it is a new process of a known worker, whose leases are
    /// then lost ([`Scheduler::expire_restarted`]).
    pub fn register(
        &mut self,
        worker: &str,
        registration: Registration,
        session: String,
        now_ms: u64,
    ) -> Option<Restarted> {
        self.workers.register(worker, registration, session, now_ms)
    }

    /// Refuses a call of `worker` without its current session (see
    /// [`Workers::check_session`]).
    pub fn check_session(&self, worker: &str, session: &str) -> Result<()> {
        self.workers.check_session(worker, session)
    }

    /// The largest memory budget of the live workers, and who has it: a job
    /// is fitted to it at submission.
    pub fn largest_worker(&self, now_ms: u64) -> (WorkerRoom, String) {
        self.workers.largest_worker(now_ms)
    }

    pub fn workers(&self) -> &HashMap<String, WorkerInfo> {
        self.workers.all()
    }

    /// Drops the workers long silent; returns how many.
    pub fn forget_silent_workers(&mut self, now_ms: u64) -> usize {
        self.workers.forget_silent(now_ms)
    }
}
