//! Room on the stage store's disk. A frontier plan finds its levels as it
//! goes, and a level may need more disk than is free: at each barrier of
//! such a plan the scheduler guesses the next stage's output from the last
//! two stages' (their growth, bounded), and when it would not fit the free
//! space (with the previous stage's output counted as freed when the barrier
//! deletes it) the job waits at the barrier, saying why, instead of failing
//! mid-level on a full disk. The barrier is tried again on every tick of the
//! lease expiry loop and at every restart; it passes as soon as there is
//! room, and nothing about the job changes meanwhile.

use crate::error::Result;
use crate::store::Batch;

use super::events::Event;
use super::job::JobEntry;
use super::stage_room::{RoomWait, guess_next_stage_bytes, room_for};
use super::state::Scheduler;

/// Marks the job as waiting at its barrier for `wait` (logging it once
/// per wait), or clears a wait that is over (logging that too).
pub(super) fn note_room_wait(
    entry: &mut JobEntry,
    wait: Option<RoomWait>,
    batch: &mut Batch,
    now_ms: u64,
) {
    match (&entry.room_wait, wait) {
        (None, Some(wait)) => {
            tracing::warn!(job = %entry.rec.id, stage = wait.stage, needed = wait.needed,
                free = wait.free, "a job waits at its barrier for room in the stage store");
            let reason = wait.reason();
            let event = Event {
                stage: wait.stage,
                ..Event::job("waiting", &reason)
            };
            entry.log(batch, now_ms, event);
            entry.room_wait = Some(wait);
        }
        (Some(_), Some(wait)) => entry.room_wait = Some(wait),
        (Some(old), None) => {
            let stage = old.stage;
            tracing::info!(job = %entry.rec.id, stage, "the stage store has room: the barrier passes");
            let event = Event {
                stage,
                ..Event::job(
                    "room",
                    "the stage store has room again: the next stage starts",
                )
            };
            entry.log(batch, now_ms, event);
            entry.room_wait = None;
        }
        (None, None) => {}
    }
}

/// Whether the stage after `done` may start in `free` bytes (if known):
/// the wait to record when its guessed output does not fit. Only frontier
/// plans (whose stages are found as they go) are checked; `freed` is the
/// input of the stage just done when the barrier deletes it.
pub(super) fn check_room(
    entry: &JobEntry,
    free: Option<u64>,
    done_bytes: u64,
    freed: u64,
) -> Option<RoomWait> {
    if entry.rec.spec.stages_known() {
        return None;
    }
    let free = free?;
    let before = entry.outputs.input_bytes();
    let needed = guess_next_stage_bytes(done_bytes, before);
    room_for(entry.rec.stage, needed, free, freed).err()
}

impl Scheduler {
    /// Tries again the barriers of the jobs that wait for room; returns how
    /// many passed. Each job's changes are written as one batch.
    pub fn retry_room_waits(&mut self, now_ms: u64) -> Result<usize> {
        let waiting: Vec<String> = self
            .jobs
            .iter()
            .filter(|e| e.room_wait.is_some() && !e.rec.state.is_finished())
            .map(|e| e.rec.id.clone())
            .collect();
        let mut passed = 0;
        for job in waiting {
            let mut batch = Batch::default();
            let entry = self.jobs.known(&job);
            let snapshot = entry.snapshot_stage();
            let saved = (entry.rec.clone(), entry.room_wait.clone(), entry.next_event);
            let advanced = self
                .advance_if_stage_done(&job, &mut batch, now_ms)
                .and_then(|_| self.write(batch));
            let entry = self.jobs.known(&job);
            if let Err(e) = advanced {
                entry.restore_stage(snapshot);
                (entry.rec, entry.room_wait, entry.next_event) = saved;
                return Err(e);
            }
            entry.replaced_shards = None;
            if entry.room_wait.is_none() {
                passed += 1;
            }
        }
        Ok(passed)
    }
}
