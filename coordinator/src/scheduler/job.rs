//! One job as the scheduler holds it: its record, the shards of its current
//! stage and the queue of those waiting for a lease, its event log, and the
//! stage output its readers fetch.

use std::collections::VecDeque;

use tally_kinds::kind::ResourceEstimate;

use crate::records::{JobRecord, JobState};

use super::shard_table::ShardTable;
use super::stage_outputs::StageOutputs;

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
    /// The stage output its readers need.
    pub(super) outputs: StageOutputs,
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
            outputs: StageOutputs::default(),
            waiting_noted: false,
            shards_loaded: true,
        }
    }

    /// Whether the job may have a shard to lease: it is queued or running,
    /// and some shard may wait for a lease.
    pub(super) fn is_leasable(&self) -> bool {
        matches!(self.rec.state, JobState::Queued | JobState::Running) && self.may_have_pending()
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
