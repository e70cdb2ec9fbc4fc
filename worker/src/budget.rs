//! A worker's memory budget: the share of it each slot's shard may use
//! (reckoned in `tally_stage::memory`, as the coordinator reckons it), the
//! least budget a worker of its slots may have, and its process's peak
//! resident memory held against it.

use std::sync::atomic::{AtomicU64, Ordering};

use tally_kinds::kind::format_bytes;
use tally_stage::memory::{IO_MEMORY_PER_SLOT, PROCESS_MEMORY, least_budget, slot_share};

/// Bytes read from the stage store at once (see `tally_stage::memory`).
pub(crate) use tally_stage::memory::READ_PIECE;

/// The part of a worker's memory `budget` one shard may use (the one
/// reckoning, which the coordinator sizes stages to as well: see
/// [`tally_stage::memory::slot_share`]).
pub(crate) fn share_of(budget: u64, slots: usize) -> u64 {
    slot_share(budget, slots as u64)
}

/// Why a worker of `slots` cannot keep to `budget`, if it cannot (a clause
/// that starts with the budget): the budget is below what the process and
/// its slots' stage reads and uploads take besides the shards, and a
/// quarter more for the shards. `tally worker` and `tally run` refuse such
/// a budget with this.
pub fn budget_refusal(budget: u64, slots: usize) -> Option<String> {
    let least = least_budget(slots as u64);
    (budget < least).then(|| {
        format!(
            "{} is less than the {} a worker of {slots} slot(s) needs ({} for the process, \
             {} a slot for stage reads and uploads, and a quarter of the budget for its \
             shards): give at least {}, or fewer --slots",
            format_bytes(budget),
            format_bytes(least),
            format_bytes(PROCESS_MEMORY),
            format_bytes(IO_MEMORY_PER_SLOT),
            format_bytes(least),
        )
    })
}

/// Says so when the budget cannot hold what the process and its slots'
/// stage I/O take besides the shards: the worker will then use more (the
/// command line refuses such a budget; a worker started in a process of
/// its own making, as the tests start them, is let run).
pub(crate) fn warn_if_budget_is_small(budget: u64, slots: usize) {
    let needed = least_budget(slots as u64);
    if budget < needed {
        tracing::warn!(
            budget = %format_bytes(budget),
            slots,
            needed = %format_bytes(needed),
            "the memory budget is smaller than the process and its slots' stage reads and \
             uploads take besides the shards; a worker of these slots may use more"
        );
    }
}

/// The most resident memory this process has held (`VmHWM`), where the
/// system says.
pub(crate) fn peak_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The process's peak held against a budget: past it the worker says so in
/// its log, once, and again each time the peak grows by a tenth more.
pub(crate) struct PeakWatch {
    budget: Option<u64>,
    /// The peak last said (0: none yet).
    said: AtomicU64,
}

impl PeakWatch {
    pub(crate) fn new(budget: Option<u64>) -> PeakWatch {
        PeakWatch {
            budget,
            said: AtomicU64::new(0),
        }
    }

    /// Looks at the peak now; says so if it passed the budget (or grew by
    /// a tenth since it was last said). The peak said, if any.
    pub(crate) fn check(&self) -> Option<u64> {
        let budget = self.budget?;
        let peak = peak_resident()?;
        let said = self.said.load(Ordering::Relaxed);
        if peak <= budget || peak <= said + said / 10 {
            return None;
        }
        self.said.store(peak, Ordering::Relaxed);
        tracing::warn!(
            peak = %format_bytes(peak),
            budget = %format_bytes(budget),
            "the process's peak resident memory passed its memory budget"
        );
        Some(peak)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_below_what_the_slots_need_is_refused_with_the_numbers() {
        let refused = budget_refusal(64 << 20, 2).expect("64 MiB is too small for 2 slots");
        assert!(refused.contains("67.1 MB"), "{refused}");
        assert!(refused.contains("268.4 MB"), "{refused}");
        assert!(refused.starts_with("67.1 MB is less than"), "{refused}");
        assert!(refused.contains("fewer --slots"), "{refused}");
        assert_eq!(budget_refusal(256 << 20, 2), None);
        assert_eq!(budget_refusal(160 << 20, 1), None);
        assert!(budget_refusal(160 << 20, 2).is_some());
    }

    #[test]
    fn the_peak_is_said_once_past_the_budget_and_again_when_it_grows() {
        let peak = peak_resident().expect("Linux says VmHWM");
        assert!(peak > 0);
        assert_eq!(
            PeakWatch::new(None).check(),
            None,
            "no budget, nothing said"
        );
        assert_eq!(PeakWatch::new(Some(u64::MAX)).check(), None);
        let watch = PeakWatch::new(Some(1));
        let said = watch.check().expect("any process passes one byte");
        assert!(said >= peak);
        assert_eq!(watch.check(), None, "said once until it grows by a tenth");
    }
}
