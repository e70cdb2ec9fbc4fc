//! What the scheduler knows of room on the stage store's disk: how it asks
//! (`StageRoom`), the guess of a stage's output, and why a barrier waits
//! (`RoomWait`); the waiting itself is `room`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tally_kinds::kind::format_bytes;

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
        f.write_str("RoomSource")
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
