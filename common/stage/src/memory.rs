//! A slot's share of a worker's memory budget: what one shard may use once
//! the process and each slot's stage I/O have theirs. The one reckoning of
//! it: a worker gives each shard this share, and the coordinator sizes the
//! shards of a stage to the least share among its workers.

use crate::store::{PARALLEL_READS, PART};

/// Bytes read from the stage store at once: a few of these per reader are in
/// memory at a time, whatever the size of the part.
pub const READ_PIECE: u64 = 4 << 20;

/// What a worker holds besides its shards' tables and data: the process
/// itself, about 20 MB idle.
pub const PROCESS_MEMORY: u64 = 32 << 20;

/// What each slot holds for stage data in flight: [`PARALLEL_READS`] pieces
/// of [`READ_PIECE`] being read, and an upload's parts (two in flight and one
/// being read from its file).
pub const IO_MEMORY_PER_SLOT: u64 = PARALLEL_READS as u64 * READ_PIECE + 3 * PART as u64;

/// The part of a worker's memory `budget` one shard of its `slots` may use:
/// the budget less what the process and each slot's stage I/O hold (at most
/// three quarters of it), over the slots (at least one).
pub fn slot_share(budget: u64, slots: u64) -> u64 {
    let slots = slots.max(1);
    budget.saturating_sub(reserved(slots)).max(budget / 4) / slots
}

/// What a worker of `slots` holds besides its shards: the process, and
/// each slot's stage I/O.
pub fn reserved(slots: u64) -> u64 {
    PROCESS_MEMORY + slots.max(1) * IO_MEMORY_PER_SLOT
}

/// The least budget a worker of `slots` may have: what it holds besides its
/// shards ([`reserved`]) and a quarter of the budget for the shards.
pub fn least_budget(slots: u64) -> u64 {
    reserved(slots) * 4 / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_leaves_room_for_the_process_and_each_slots_stage_io() {
        let gib = 1u64 << 30;
        // 3 GiB over 2 slots: 32 MiB for the process, 80 MiB a slot for I/O.
        assert_eq!(
            slot_share(3 * gib, 2),
            (3 * gib - (32 << 20) - 2 * (80 << 20)) / 2
        );
        assert_eq!(
            slot_share(3 * gib, 0),
            slot_share(3 * gib, 1),
            "at least one slot"
        );
        // A budget the I/O would mostly take: a quarter of it is shared.
        assert_eq!(slot_share(128 << 20, 2), (128 << 20) / 4 / 2);
        assert_eq!(slot_share(0, 2), 0);
        // At the least budget the shards get a quarter of it.
        for slots in [1, 2, 16] {
            let least = least_budget(slots);
            assert!(slot_share(least, slots) * slots >= least / 4 - slots);
            assert_eq!(least_budget(2), 256 << 20);
        }
        for budget in [64 << 20, gib, 20 * gib] {
            for slots in [1, 2, 16] {
                let share = slot_share(budget, slots);
                assert!(share * slots <= budget, "{budget} over {slots}");
                assert!(share * slots >= budget / 4 - slots);
            }
        }
    }
}
