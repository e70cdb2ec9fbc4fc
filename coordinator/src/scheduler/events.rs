//! The per-job event log: every state change writes one event in the batch
//! that makes it, numbered in order.

use crate::records::{EventRecord, ShardRecord, encode, event_key};
use crate::store::{Batch, Tree};

use super::state::JobEntry;

/// One event to log; `stage`, `shard` and `attempt` are 0 for job events.
pub(super) struct Event<'a> {
    pub(super) kind: &'a str,
    pub(super) stage: u32,
    pub(super) shard: u32,
    pub(super) attempt: u64,
    pub(super) worker: &'a str,
    pub(super) message: &'a str,
}

impl<'a> Event<'a> {
    /// An event of the job as a whole.
    pub(super) fn job(kind: &'a str, message: &'a str) -> Event<'a> {
        Event {
            kind,
            stage: 0,
            shard: 0,
            attempt: 0,
            worker: "",
            message,
        }
    }

    /// An event of the latest attempt of `shard`, by `worker`.
    pub(super) fn shard(
        kind: &'a str,
        shard: &ShardRecord,
        worker: &'a str,
        message: &'a str,
    ) -> Event<'a> {
        Event {
            kind,
            stage: shard.stage,
            shard: shard.index,
            attempt: shard.attempt,
            worker,
            message,
        }
    }
}

impl JobEntry {
    /// Adds `event` to `batch` under the job's next event number.
    pub(super) fn log(&mut self, batch: &mut Batch, now_ms: u64, event: Event) {
        let record = EventRecord {
            seq: self.next_event,
            time_ms: now_ms,
            kind: event.kind.to_string(),
            stage: event.stage,
            shard: event.shard,
            attempt: event.attempt,
            worker: event.worker.to_string(),
            message: event.message.to_string(),
        };
        batch.put(
            Tree::Events,
            event_key(&self.rec.id, record.seq),
            encode(&record),
        );
        self.next_event += 1;
    }
}
