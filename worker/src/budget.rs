//! A worker's memory budget: the share of it each slot's shard may use
//! (reckoned in `tally_stage::memory`, as the coordinator reckons it), and
//! a warning when the budget is too small for the process and its slots.

use tally_stage::memory::{reserved, slot_share};

/// Bytes read from the stage store at once (see `tally_stage::memory`).
pub(crate) use tally_stage::memory::READ_PIECE;

/// The part of a worker's memory `budget` one shard may use (the one
/// reckoning, which the coordinator sizes stages to as well: see
/// [`tally_stage::memory::slot_share`]).
pub(crate) fn share_of(budget: u64, slots: usize) -> u64 {
    slot_share(budget, slots as u64)
}

/// Says so when the budget cannot hold what the process and its slots'
/// stage I/O take besides the shards: the worker will then use more.
pub(crate) fn warn_if_budget_is_small(budget: u64, slots: usize) {
    let needed = reserved(slots as u64) * 4 / 3;
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
