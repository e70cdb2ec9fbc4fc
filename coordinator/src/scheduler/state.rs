//! The scheduler's in-memory state: every job with the shards of its current
//! stage, the idempotency keys, the job counter and the workers heard from.
//! Everything here except lease renewals, live progress and the workers is
//! derived from the store (see `recovery`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::error::{CoordinatorError, Result};
use tally_common::kind::ResourceEstimate;

use crate::records::JobRecord;
use crate::store::Store;

use super::protocol::{Registration, WorkerInfo};
use super::shard_table::ShardTable;
use super::workers::Workers;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// First retry delay after a failed attempt; doubles per failure.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// Heartbeats stop renewing a lease whose shard has made no progress for
    /// this long (its work counter did not grow), so a shard stuck in a live
    /// worker expires and is leased again. Far above any kernel's quiet
    /// stretch between progress updates.
    pub stall_limit_ms: u64,
    /// Stage data is in a stage store outside the coordinator: the outputs
    /// kept are blob references, and a finished stage's input stays one
    /// stage longer (see [`retained_stages`]).
    pub external_stage_store: bool,
}

/// The older stages whose output stays while `stage` runs: those the kind
/// keeps for it, and with a stage store outside the coordinator, those the
/// stage before it read, so that a shard of that stage whose blob was lost
/// can be computed again.
impl FinishedStage {
    /// Each shard's output, in order.
    pub(super) fn outputs(&self) -> Vec<&[u8]> {
        let mut outputs = Vec::with_capacity(self.lengths.len());
        let mut at = 0;
        for &len in &self.lengths {
            outputs.push(&self.data[at..at + len]);
            at += len;
        }
        outputs
    }
}

/// A time in Unix milliseconds as users read times: UTC, to the second
/// (RFC 3339, as the coordinator's log lines show theirs).
pub(super) fn utc_time(ms: u64) -> String {
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(when).to_string()
}

pub(super) fn retained_stages(
    spec: &tally_common::spec::ValidSpec,
    plan: &tally_common::values::JobPlan,
    stage: u32,
    external: bool,
) -> tally_common::Result<Vec<u32>> {
    let mut keep = spec.kept_stages(plan, stage)?;
    if external && stage >= 2 {
        if stage >= 3 {
            keep.push(stage - 2);
        }
        keep.extend(spec.kept_stages(plan, stage - 1)?);
        keep.sort_unstable();
        keep.dedup();
    }
    Ok(keep)
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            backoff_base_ms: 250,
            backoff_max_ms: 10_000,
            stall_limit_ms: 30 * 60 * 1000,
            external_stage_store: false,
        }
    }
}

impl SchedulerConfig {
    /// The delay before a shard's next attempt after `failures` failed ones.
    pub(super) fn backoff_ms(&self, failures: u32) -> u64 {
        let factor = 1u64 << failures.saturating_sub(1).min(20);
        self.backoff_base_ms
            .saturating_mul(factor)
            .min(self.backoff_max_ms)
    }
}

/// The state machine of jobs, stages, shards and leases. Its methods live in
/// the submodules of `scheduler`, one responsibility each.
pub struct Scheduler {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: SchedulerConfig,
    pub(super) jobs: BTreeMap<String, JobEntry>,
    /// Idempotency keys to job ids.
    pub(super) keys: HashMap<String, String>,
    pub(super) next_job: u64,
    pub(super) workers: Workers,
    /// The submission number of the job the last lease served: jobs of equal
    /// priority are served in turn from the one after it (fairness needs no
    /// durability, so this is not stored).
    pub(super) served_last: Option<u64>,
    /// Deleted jobs' ids, with when they were deleted: only their tombstones
    /// remain in the store.
    pub(super) deleted: HashMap<String, u64>,
    /// Whether a group commit flushes the changes after each call (the
    /// coordinator's service); otherwise each change is flushed as it is
    /// written (a scheduler driven directly).
    pub(super) group_commit: bool,
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

    pub(super) fn entry(&self, id: &str) -> Result<&JobEntry> {
        self.jobs.get(id).ok_or_else(|| self.missing(id))
    }

    pub(super) fn entry_mut(&mut self, id: &str) -> Result<&mut JobEntry> {
        let missing = self.missing(id);
        self.jobs.get_mut(id).ok_or(missing)
    }

    /// The error for a job id that names no job: deleted, or never given.
    fn missing(&self, id: &str) -> CoordinatorError {
        match self.deleted.get(id) {
            Some(&when) => CoordinatorError::NotFound(format!(
                "job {id} was deleted at {}; its results and events are gone",
                utc_time(when)
            )),
            None => CoordinatorError::NotFound(format!("no job {id:?}")),
        }
    }

    /// The job of a shard the caller has already found: a missing job is a bug.
    /// The ids of the jobs still queued or running.
    pub(super) fn unfinished_jobs(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter(|(_, e)| !e.rec.state.is_finished())
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(super) fn known_entry(&mut self, id: &str) -> &mut JobEntry {
        self.jobs.get_mut(id).expect("the job was looked up before")
    }

    pub fn store_size_on_disk(&self) -> Option<u64> {
        self.store.size_on_disk()
    }

    /// Registers `worker` with a new session (see [`Workers::register`]).
    pub fn register(
        &mut self,
        worker: &str,
        registration: Registration,
        session: String,
        now_ms: u64,
    ) {
        self.workers.register(worker, registration, session, now_ms);
    }

    /// Refuses a call of `worker` without its current session (see
    /// [`Workers::check_session`]).
    pub fn check_session(&self, worker: &str, session: &str) -> Result<()> {
        self.workers.check_session(worker, session)
    }

    /// The largest memory budget of the live workers, and who has it: a job
    /// is fitted to it at submission.
    pub fn largest_memory_budget(&self, now_ms: u64) -> (u64, String) {
        self.workers.largest_memory_budget(now_ms)
    }

    pub fn workers(&self) -> &HashMap<String, WorkerInfo> {
        self.workers.all()
    }

    /// Drops the workers long silent; returns how many.
    pub fn forget_silent_workers(&mut self, now_ms: u64) -> usize {
        self.workers.forget_silent(now_ms)
    }
}

/// One job and the shards of its current stage.
pub(super) struct JobEntry {
    pub(super) rec: JobRecord,
    /// The current stage's shards, by index.
    pub(super) shards: ShardTable,
    /// Indexes of pending shards, in order. *Invariant:* each at most once.
    pub(super) pending: VecDeque<u32>,
    /// Shards and work finished in earlier stages.
    pub(super) shards_done_before: u64,
    pub(super) work_done_before: u64,
    pub(super) next_event: u64,
    /// The job's last event if it is a checkpoint: (stage, shard, attempt,
    /// its number, the checkpoints it stands for). A checkpoint of the same
    /// attempt right after it replaces it (`JobEntry::log`).
    pub(super) last_checkpoint_event: Option<(u32, u32, u64, u64, u64)>,
    /// Accepted stage output of the current stage's shards, kept in memory so the
    /// barrier can publish it without reading the store back.
    pub(super) outputs: Vec<Option<Arc<Vec<u8>>>>,
    /// The merged output of the previous stage (what the current stage reads),
    /// and the number of stored chunks of each of its shards.
    pub(super) finished: Option<FinishedStage>,
    /// Older stages whose output later stages read (the kind's
    /// `kept_stages`): the number of stored chunks of each of their shards.
    pub(super) kept: BTreeMap<u32, Vec<u32>>,
    /// The kept stage last read, loaded from the store on its first fetch
    /// (its readers come together, one stage at a time).
    pub(super) kept_loaded: Option<FinishedStage>,
    /// Whether the log already says the job waits for another worker (its
    /// replicas must come from different workers); said once per start.
    pub(super) waiting_noted: bool,
    /// False for a job read back from the store that was never leased: its
    /// shards (all pending, as planned) stay in the store until a lease
    /// wants them (`Scheduler::ensure_shards`), so that a restart with many
    /// queued jobs neither reads nor holds their shards.
    pub(super) shards_loaded: bool,
    /// The memory a worker needs for the job (per worker, per shard held):
    /// a worker gets only as many of its shards at once as its budget holds.
    pub(super) memory: Option<ResourceEstimate>,
}

#[derive(Clone)]
pub(super) struct FinishedStage {
    pub(super) stage: u32,
    pub(super) data: Arc<Vec<u8>>,
    /// Each shard's share of `data`, in shard order.
    pub(super) lengths: Vec<usize>,
    pub(super) chunks: Vec<u32>,
}

impl JobEntry {
    /// A job with no shards in memory yet.
    pub(super) fn new(rec: JobRecord) -> JobEntry {
        let memory = rec.spec.estimate();
        JobEntry {
            memory,
            rec,
            shards: ShardTable::default(),
            pending: VecDeque::new(),
            shards_done_before: 0,
            work_done_before: 0,
            next_event: 0,
            last_checkpoint_event: None,
            outputs: Vec::new(),
            finished: None,
            kept: BTreeMap::new(),
            kept_loaded: None,
            waiting_noted: false,
            shards_loaded: true,
        }
    }

    /// Whether some shard may wait for a lease (an unloaded job's all do).
    pub(super) fn may_have_pending(&self) -> bool {
        !self.shards_loaded || !self.pending.is_empty()
    }

    /// Queues shard `index` for its next attempt, once.
    pub(super) fn requeue(&mut self, index: u32) {
        if !self.pending.contains(&index) {
            self.pending.push_back(index);
        }
    }

    pub(super) fn shards_done(&self) -> u64 {
        self.shards_done_before + self.shards.done()
    }

    pub(super) fn work_done(&self) -> u64 {
        self.work_done_before + self.shards.work_done()
    }
}
