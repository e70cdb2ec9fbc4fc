//! A worker's memory budget: what the process and each slot's stage I/O
//! keep out of it, and the share of the rest each slot's shard may use.

use tally_stage::store::PARALLEL_READS;

/// Bytes read from the stage store at once: a few of these per reader are in
/// memory at a time, whatever the size of the part.
pub(crate) const READ_PIECE: u64 = 4 << 20;

/// What a worker holds besides its shards' tables and data: the process
/// itself, about 20 MB idle.
const PROCESS_MEMORY: u64 = 32 << 20;
/// What each slot holds for stage data in flight: `PARALLEL_READS` pieces
/// of `READ_PIECE` being read, and an upload's parts (two in flight and one
/// being read from its file).
const IO_MEMORY_PER_SLOT: u64 = PARALLEL_READS as u64 * READ_PIECE + 3 * UPLOAD_PART;
/// `StageStore::put_stored`'s part size.
const UPLOAD_PART: u64 = 16 << 20;

/// The part of a worker's memory `budget` one shard may use: the budget less
/// what the process and each slot's stage I/O hold (at most three quarters
/// of it), over the `slots`.
pub(crate) fn share_of(budget: u64, slots: usize) -> u64 {
    let slots = slots.max(1) as u64;
    budget
        .saturating_sub(reserved_memory(slots))
        .max(budget / 4)
        / slots
}

fn reserved_memory(slots: u64) -> u64 {
    PROCESS_MEMORY + slots * IO_MEMORY_PER_SLOT
}

/// Says so when the budget cannot hold what the process and its slots'
/// stage I/O take besides the shards: the worker will then use more.
pub(crate) fn warn_if_budget_is_small(budget: u64, slots: usize) {
    let needed = reserved_memory(slots.max(1) as u64) * 4 / 3;
    if budget < needed {
        tracing::warn!(
            budget = %tally_kinds::kind::format_bytes(budget),
            slots,
            needed = %tally_kinds::kind::format_bytes(needed),
            "the memory budget is smaller than the process and its slots' stage reads and \
             uploads take besides the shards; a worker of these slots may use more"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_leaves_room_for_the_process_and_each_slots_stage_io() {
        let gib = 1u64 << 30;
        // 3 GiB over 2 slots: 32 MiB for the process, 80 MiB a slot for I/O.
        assert_eq!(
            share_of(3 * gib, 2),
            (3 * gib - (32 << 20) - 2 * (80 << 20)) / 2
        );
        assert_eq!(
            share_of(3 * gib, 0),
            share_of(3 * gib, 1),
            "at least one slot"
        );
        // A budget the I/O would mostly take: a quarter of it is shared.
        assert_eq!(share_of(128 << 20, 2), (128 << 20) / 4 / 2);
        assert_eq!(share_of(0, 2), 0);
        for budget in [64 << 20, gib, 20 * gib] {
            for slots in [1, 2, 16] {
                let share = share_of(budget, slots);
                assert!(share * slots as u64 <= budget, "{budget} over {slots}");
                assert!(share * slots as u64 >= budget / 4 - slots as u64);
            }
        }
    }
}
