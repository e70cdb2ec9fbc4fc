//! The work the jobs have for workers, as an autoscaler reads it: the slots
//! their runnable shards could use now.

use std::collections::HashMap;

use super::state::Scheduler;

/// What the jobs could use of a cluster now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotDemand {
    /// Unfinished jobs with shards of their current stage not yet done.
    pub jobs: u64,
    /// Slots those shards could use at once: each job's shards of its
    /// current stage that are pending or leased (a shard takes one slot), at
    /// most its `max_slots`; and of each owner's jobs together, at most the
    /// owner's slot quota.
    pub slots: u64,
}

impl Scheduler {
    /// The slots the jobs' runnable work could use now (see [`SlotDemand`]).
    /// A stage's barrier shows as none until the next stage is planned, at
    /// once after the last shard's acceptance.
    pub fn slot_demand(&self) -> SlotDemand {
        let mut demand = SlotDemand::default();
        let mut by_owner: HashMap<&str, u64> = HashMap::new();
        for entry in self.jobs.iter().filter(|e| !e.rec.state.is_finished()) {
            // A job read back and never leased has its first stage to run.
            let open = match entry.shards_loaded {
                true => entry.shards.len() as u64 - entry.shards.done(),
                false => entry.rec.shards_per_stage,
            };
            let slots = match entry.rec.spec.options().max_slots {
                0 => open,
                cap => open.min(u64::from(cap)),
            };
            if slots > 0 {
                demand.jobs += 1;
                *by_owner.entry(entry.rec.owner()).or_default() += slots;
            }
        }
        let users = &self.sharing.users;
        demand.slots = (by_owner.into_iter())
            .map(|(owner, slots)| match users.owner(owner).quotas.slots {
                Some(quota) => slots.min(u64::from(quota)),
                None => slots,
            })
            .sum();
        demand
    }
}
