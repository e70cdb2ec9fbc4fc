//! The per-job event log: every state change writes one event in the batch
//! that makes it, numbered in order. A checkpoint right after a checkpoint
//! of the same attempt replaces it, so the log grows with attempts, whose
//! number is bounded, and not with how often a worker saves.
//!
//! A lease writes nothing (it is soft state), so its `leased` event waits in
//! memory ([`JobEntry::defer`]) and goes into the job's next batch, or the
//! next expiry tick's (`Scheduler::write_deferred_events`): the log shows
//! it only once it is as durable as what follows it, and a crash that loses
//! it loses no number a reader has seen.

use crate::records::{EventRecord, ShardRecord, encode, event_key};
use crate::store::{Batch, Tree};

use super::job::{DeferredEvent, JobEntry};

/// The kind of the event a checkpoint writes.
pub(super) const CHECKPOINT: &str = "checkpoint";

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
    /// Keeps `event` for the job's next batch (see the module's note).
    pub(super) fn defer(&mut self, now_ms: u64, event: Event) {
        self.deferred_events.push(DeferredEvent {
            time_ms: now_ms,
            kind: event.kind.to_string(),
            stage: event.stage,
            shard: event.shard,
            attempt: event.attempt,
            worker: event.worker.to_string(),
            message: event.message.to_string(),
        });
    }

    /// Adds the deferred events to `batch`, in order, under the job's next
    /// event numbers.
    pub(super) fn log_deferred(&mut self, batch: &mut Batch) {
        for deferred in std::mem::take(&mut self.deferred_events) {
            let event = Event {
                kind: &deferred.kind,
                stage: deferred.stage,
                shard: deferred.shard,
                attempt: deferred.attempt,
                worker: &deferred.worker,
                message: &deferred.message,
            };
            self.log_now(batch, deferred.time_ms, event);
        }
    }

    /// Adds `event` to `batch` under the job's next event number, after the
    /// events deferred before it.
    pub(super) fn log(&mut self, batch: &mut Batch, now_ms: u64, event: Event) {
        self.log_deferred(batch);
        self.log_now(batch, now_ms, event);
    }

    fn log_now(&mut self, batch: &mut Batch, now_ms: u64, event: Event) {
        let place = (event.stage, event.shard, event.attempt);
        let replaced = match self.last_checkpoint_event {
            Some((stage, shard, attempt, seq, count))
                if event.kind == CHECKPOINT
                    && (stage, shard, attempt) == place
                    && seq + 1 == self.next_event =>
            {
                Some((seq, count + 1))
            }
            _ => None,
        };
        let (seq, count) = replaced.unwrap_or((self.next_event, 1));
        let message = match count {
            1 => event.message.to_string(),
            n => format!("{} ({n} checkpoints of this attempt)", event.message),
        };
        self.last_checkpoint_event =
            (event.kind == CHECKPOINT).then_some((place.0, place.1, place.2, seq, count));
        let record = EventRecord {
            seq,
            time_ms: now_ms,
            kind: event.kind.to_string(),
            stage: event.stage,
            shard: event.shard,
            attempt: event.attempt,
            worker: event.worker.to_string(),
            message,
        };
        batch.put(
            Tree::Events,
            event_key(&self.rec.id, record.seq),
            encode(&record),
        );
        self.next_event = seq + 1;
    }
}
