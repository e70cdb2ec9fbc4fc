//! Room on the stage store's disk. A frontier plan finds its levels as it
//! goes, and a level may need more disk than is free: at each barrier of
//! such a plan the scheduler guesses the next stage's output from the last
//! two stages' (their growth, bounded), and when it would not fit the free
//! space (with the previous stage's output counted as freed when the barrier
//! deletes it) the job waits at the barrier, saying why, instead of failing
//! mid-level on a full disk. The barrier is tried again on every tick of the
//! lease expiry loop and at every restart; it passes as soon as there is
//! room, and nothing about the job changes meanwhile.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tally_kinds::kind::format_bytes;

use crate::error::Result;
use crate::store::Batch;

use super::events::Event;
use super::job::JobEntry;
use super::state::Scheduler;

/// How many bytes the stage store's disk has free; `None` where that is
/// not known (an object store), where no job ever waits for room.
pub trait StageRoom: Send + Sync {
    fn free_bytes(&self) -> Option<u64>;
}

/// The free space of the file system a directory is on.
pub struct DiskRoom {
    pub dir: PathBuf,
}

impl StageRoom for DiskRoom {
    fn free_bytes(&self) -> Option<u64> {
        // A directory not made yet (a stage store before its first blob)
        // is on its nearest existing parent's file system.
        let dir = self.dir.ancestors().find(|d| d.exists())?;
        fs4::available_space(dir).ok()
    }
}

/// The room source a scheduler asks, shown by its kind in the configuration.
#[derive(Clone)]
pub struct RoomSource(pub Arc<dyn StageRoom>);

impl fmt::Debug for RoomSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RoomSource({:?} bytes free)", self.0.free_bytes())
    }
}

/// A stage grows by at least a quarter and at most four times the last
/// one's output in the guess: a level's growth slows level by level, and a
/// first stage's tiny output says little.
const GROWTH_BOUNDS: (f64, f64) = (0.25, 4.0);
/// Room kept free beyond the guess: the store's own writes, logs, and the
/// guess's error.
const MARGIN_BYTES: u64 = 64 << 20;

/// Why a job waits at its barrier for room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RoomWait {
    /// The stage whose barrier waits.
    pub(super) stage: u32,
    /// The room the next stage is guessed to need, and what was free.
    pub(super) needed: u64,
    pub(super) free: u64,
}

impl RoomWait {
    /// The job's waiting line.
    pub(super) fn reason(&self) -> String {
        format!(
            "the stage store is short of room: stage {} is guessed to write {} of stage data and \
             {} is free; the job waits at the barrier of stage {} and goes on by itself once \
             there is room (free disk space, or give the stage store a larger disk)",
            self.stage + 1,
            format_bytes(self.needed),
            format_bytes(self.free),
            self.stage
        )
    }
}

/// The next stage's output guessed from the last stage's (`done`) and the
/// one before (`before`, if any): `done` times their ratio, within
/// [`GROWTH_BOUNDS`] (1 without `before`).
pub(super) fn guess_next_stage_bytes(done: u64, before: Option<u64>) -> u64 {
    let growth = match before {
        Some(before) if before > 0 => done as f64 / before as f64,
        _ => 1.0,
    };
    let growth = growth.clamp(GROWTH_BOUNDS.0, GROWTH_BOUNDS.1);
    (done as f64 * growth).ceil() as u64
}

/// Whether `needed` bytes fit in `free` once `freed` are deleted, with
/// [`MARGIN_BYTES`] to spare; the wait to record when not.
pub(super) fn room_for(
    stage: u32,
    needed: u64,
    free: u64,
    freed: u64,
) -> std::result::Result<(), RoomWait> {
    let needed = needed.saturating_add(MARGIN_BYTES);
    if needed <= free.saturating_add(freed) {
        Ok(())
    } else {
        Err(RoomWait {
            stage,
            needed,
            free,
        })
    }
}

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

/// Whether the stage after `done` may start on the room `source` tells:
/// the wait to record when its guessed output does not fit. Only frontier
/// plans (whose stages are found as they go) are checked; `freed` is the
/// input of the stage just done when the barrier deletes it.
pub(super) fn check_room(
    entry: &JobEntry,
    source: Option<&RoomSource>,
    done_bytes: u64,
    freed: u64,
) -> Option<RoomWait> {
    if entry.rec.spec.stages_known() {
        return None;
    }
    let free = source?.0.free_bytes()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guess_follows_the_last_growth_within_bounds() {
        assert_eq!(guess_next_stage_bytes(1000, None), 1000);
        assert_eq!(guess_next_stage_bytes(1000, Some(500)), 2000);
        assert_eq!(guess_next_stage_bytes(1000, Some(2000)), 500);
        assert_eq!(guess_next_stage_bytes(1000, Some(1)), 4000, "bounded above");
        assert_eq!(
            guess_next_stage_bytes(1000, Some(1_000_000)),
            250,
            "bounded below"
        );
        assert_eq!(guess_next_stage_bytes(0, Some(0)), 0);
    }

    #[test]
    fn room_counts_what_the_barrier_frees_and_keeps_a_margin() {
        let gib = 1 << 30;
        assert!(room_for(3, gib, 2 * gib, 0).is_ok());
        assert!(
            room_for(3, gib, gib / 2, gib).is_ok(),
            "the freed stage counts"
        );
        let wait = room_for(3, gib, gib, 0).unwrap_err();
        assert_eq!(wait.needed, gib + MARGIN_BYTES);
        assert_eq!(wait.free, gib);
        assert!(
            wait.reason().contains("stage 4 is guessed to write"),
            "{}",
            wait.reason()
        );
    }
}
