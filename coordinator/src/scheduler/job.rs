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
    /// Set while its barrier waits for room in the stage store (in memory
    /// only: a restart asks again).
    pub(super) room_wait: Option<super::stage_room::RoomWait>,
    /// False for a job read back from the store that was never leased: its
    /// shards (all pending, as planned) stay in the store until a lease
    /// wants them (`Scheduler::ensure_shards`), so that a restart with many
    /// queued jobs neither reads nor holds their shards.
    pub(super) shards_loaded: bool,
    /// How long its shards take a worker, as reported (in memory only).
    pub(super) shard_time: ShardTime,
    /// Events waiting for the job's next batch (`events.rs`).
    pub(super) deferred_events: Vec<DeferredEvent>,
    /// The table of the stage a transition replaced, until the batch that
    /// replaced it is written (see `stages::StageSnapshot`).
    pub(super) replaced_shards: Option<ShardTable>,
    /// The fraction of a slot-millisecond metered but not yet in
    /// `rec.slot_ms` (a worker's slots shared among more shards than it has
    /// meter in fractions).
    pub(super) slot_ms_fraction: f64,
}

/// An event logged later, with the next batch of its job (`events.rs`).
pub(super) struct DeferredEvent {
    pub(super) time_ms: u64,
    pub(super) kind: String,
    pub(super) stage: u32,
    pub(super) shard: u32,
    pub(super) attempt: u64,
    pub(super) worker: String,
    pub(super) message: String,
}

/// The time a job's shards take to compute: a moving average of the times
/// workers report, which sizes how far ahead of their slots workers may
/// lease the job's shards.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ShardTime {
    /// Microseconds; `None` before the first report that says.
    average_us: Option<u64>,
}

/// Work a worker may hold queued beyond its slots, in microseconds of the
/// job's shards: short enough that the last shards of a stage wait little
/// in one worker's queue while another is idle, long enough that a call and
/// a flush (about a millisecond) are shared by many shards.
pub(super) const LEASE_AHEAD_WORK_US: u64 = 50_000;

/// The most shards a worker may hold queued beyond its slots.
pub(super) const MAX_LEASE_AHEAD: u32 = 128;

impl ShardTime {
    /// Notes one shard's time (0: not measured, ignored). The average
    /// follows a change of shard size within a few tens of shards.
    pub(super) fn note(&mut self, compute_us: u64) {
        if compute_us == 0 {
            return;
        }
        self.average_us = Some(match self.average_us {
            None => compute_us,
            Some(average) => (average.saturating_mul(7).saturating_add(compute_us)) / 8,
        });
    }

    /// How many of the job's shards a worker may hold beyond its slots:
    /// none before a time is known, or for shards of
    /// [`LEASE_AHEAD_WORK_US`] or more.
    pub(super) fn lease_ahead(&self) -> u32 {
        match self.average_us {
            None => 0,
            Some(us) => (LEASE_AHEAD_WORK_US / us.max(1)).min(u64::from(MAX_LEASE_AHEAD)) as u32,
        }
    }
}

impl JobEntry {
    /// The memory a worker needs for the job's current stage (per worker,
    /// per shard held): a worker gets only as many of its shards at once as
    /// its budget holds. Asked of the kind each time: stages may differ.
    pub(super) fn memory(&self) -> Option<ResourceEstimate> {
        self.rec.spec.stage_estimate(self.rec.stage)
    }

    /// A job with no shards in memory yet.
    pub(super) fn new(rec: JobRecord) -> JobEntry {
        JobEntry {
            rec,
            shards: ShardTable::default(),
            pending: VecDeque::new(),
            shards_done_before: 0,
            work_done_before: 0,
            next_event: 0,
            last_checkpoint_event: None,
            outputs: StageOutputs::default(),
            waiting_noted: false,
            room_wait: None,
            shards_loaded: true,
            shard_time: ShardTime::default(),
            deferred_events: Vec::new(),
            replaced_shards: None,
            slot_ms_fraction: 0.0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_shards_are_leased_ahead_and_long_ones_not() {
        let mut time = ShardTime::default();
        assert_eq!(time.lease_ahead(), 0, "nothing known: nothing ahead");
        time.note(0);
        assert_eq!(time.lease_ahead(), 0, "an unmeasured report says nothing");
        time.note(5);
        assert_eq!(time.lease_ahead(), MAX_LEASE_AHEAD);
        let mut slow = ShardTime::default();
        slow.note(2_000_000);
        assert_eq!(slow.lease_ahead(), 0, "a shard of seconds needs no queue");
        // Shards of a millisecond: the queue holds about the work allowed.
        let mut middling = ShardTime::default();
        for _ in 0..100 {
            middling.note(1_000);
        }
        assert_eq!(middling.lease_ahead() as u64, LEASE_AHEAD_WORK_US / 1_000);
        // The average follows the shards as they grow.
        for _ in 0..100 {
            middling.note(1_000_000);
        }
        assert_eq!(middling.lease_ahead(), 0);
    }
}
