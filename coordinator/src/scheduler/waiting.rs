//! Why a job waits: the line the job view gives a queued or running job whose
//! shards are not all running, from what the scheduler knows of the live
//! workers (their slots, capabilities and memory) and of the job's shards
//! (their backoff, replicas and the stage barrier), of its cap on slots and of
//! its owner's slot quota.

use std::collections::HashMap;

use tally_kinds::kind::format_bytes;

use crate::records::ShardState;

use super::job::JobEntry;
use super::jobs::utc_time;
use super::protocol::WorkerInfo;
use super::state::Scheduler;

/// The live workers, and the shards each holds now (of every job).
pub(super) struct Fleet<'a> {
    live: Vec<(&'a str, &'a WorkerInfo)>,
    held: HashMap<&'a str, u64>,
}

impl Fleet<'_> {
    fn held_by(&self, worker: &str) -> u64 {
        self.held.get(worker).copied().unwrap_or(0)
    }
}

impl Scheduler {
    /// The live workers as [`Scheduler::waiting`] needs them.
    pub(super) fn fleet(&self, now_ms: u64) -> Fleet<'_> {
        let live = self.workers.live(now_ms).collect();
        let mut held: HashMap<&str, u64> = HashMap::new();
        for entry in self.jobs.iter().filter(|e| !e.rec.state.is_finished()) {
            for i in entry.shards.leased() {
                if let Some(worker) = entry.shards[i].worker.as_deref() {
                    *held.entry(worker).or_default() += 1;
                }
            }
        }
        Fleet { live, held }
    }

    /// Why the job's shards wait instead of running, in one line; empty
    /// when nothing holds the job up (or it is finished).
    pub(super) fn waiting(&self, entry: &JobEntry, fleet: &Fleet, now_ms: u64) -> String {
        if entry.rec.state.is_finished() {
            return String::new();
        }
        if let Some(wait) = &entry.room_wait {
            return wait.reason();
        }
        let need = entry.rec.spec.capability();
        let able: Vec<(&str, &WorkerInfo)> = fleet
            .live
            .iter()
            .copied()
            .filter(|(_, w)| need.is_none_or(|c| w.capabilities.iter().any(|o| o == c)))
            .collect();
        let free: Vec<(&str, &WorkerInfo)> = able
            .iter()
            .copied()
            .filter(|(id, w)| fleet.held_by(id) < u64::from(w.slots))
            .collect();
        if !entry.may_have_pending() {
            return barrier(entry, !free.is_empty());
        }
        if fleet.live.is_empty() {
            return "no worker is connected".into();
        }
        if able.is_empty() {
            let cap = need.unwrap_or_default();
            return format!(
                "none of the {} live worker(s) offers {cap}: the job waits for one (tally worker \
                 --allow-{cap})",
                fleet.live.len()
            );
        }
        // A job read back and never leased has every shard pending, none
        // backing off.
        if entry.shards_loaded {
            let pending = || {
                entry
                    .pending
                    .iter()
                    .map(|&i| &entry.shards[i as usize])
                    .filter(|s| s.state == ShardState::Pending)
            };
            let no_room = || pending().filter(|s| s.no_room_note.is_some());
            if let Some(last) = no_room().max_by_key(|s| s.not_before_ms)
                && let Some(note) = &last.no_room_note
            {
                let shards = match no_room().count() {
                    1 => format!("shard {}", last.index),
                    n => format!("{n} shards (the last, shard {})", last.index),
                };
                return format!(
                    "{shards} found no room on disk {}: tried again from {} (free room in the \
                     workers' spill directories or raise their --spill-limit, or add a worker \
                     with room)",
                    note,
                    utc_time(last.not_before_ms.max(now_ms))
                );
            }
            if pending().all(|s| s.not_before_ms > now_ms)
                && let Some(next) = pending().map(|s| s.not_before_ms).min()
            {
                return format!(
                    "its shards back off after failed attempts until {}",
                    utc_time(next)
                );
            }
            let ready = || pending().filter(|s| s.not_before_ms <= now_ms);
            let fresh_worker = |s: &crate::records::ShardRecord| {
                able.iter()
                    .any(|(id, _)| !s.replicas.iter().any(|r| r.worker == *id))
            };
            // Shards whose workers vanished while running them wait for a
            // larger one.
            let largest = able
                .iter()
                .map(|(_, w)| w.memory_budget())
                .max()
                .unwrap_or(0);
            let needs = |s: &crate::records::ShardRecord| s.needs_budget_over();
            if ready().next().is_some() && ready().all(|s| needs(s).is_some_and(|o| largest <= o)) {
                let over = ready().filter_map(needs).min().unwrap_or(0);
                return format!(
                    "its shards' workers vanished while running them: they wait for a worker \
                     with a memory budget over {} (the largest of the {} live worker(s) that run \
                     it has {}; with none larger, the largest live one takes them {} s after \
                     their last attempt)",
                    format_bytes(over),
                    able.len(),
                    format_bytes(largest),
                    crate::records::LARGER_WORKER_PATIENCE_MS / 1000
                );
            }
            let replicas = entry.rec.spec.options().replicas;
            if replicas > 1 && ready().next().is_some() && !ready().any(fresh_worker) {
                return format!(
                    "each of the {} replicas of a shard must come from a different worker, and \
                     the {} live worker(s) that run it have computed its waiting shards",
                    replicas,
                    able.len()
                );
            }
        }
        let cap = entry.rec.spec.options().max_slots;
        if cap != 0 && entry.shards.leased_count() >= cap as usize {
            return format!("it holds the {cap} slot(s) its --max-slots allows");
        }
        let owner = entry.rec.owner();
        if let Some(quota) = self.sharing.users.owner(owner).quotas.slots {
            let held = self.slots_held_by(owner);
            if held >= quota {
                return format!(
                    "its owner {owner}'s jobs hold {held} slot(s), their quota is {quota}: it \
                     waits for one of them to free"
                );
            }
        }
        if free.is_empty() {
            let slots: u64 = able.iter().map(|(_, w)| u64::from(w.slots)).sum();
            return format!(
                "every slot is busy: the {} live worker(s) that run it have {slots} slot(s), all \
                 leased",
                able.len()
            );
        }
        if let Some(memory) = entry.memory() {
            let held_here = |worker: &str| {
                entry
                    .shards
                    .leased()
                    .filter(|&i| entry.shards[i].worker.as_deref() == Some(worker))
                    .count() as u64
            };
            let room = |(id, w): &(&str, &WorkerInfo)| {
                memory.shards_within(w.memory_budget()) > held_here(id)
            };
            if !free.iter().any(room) {
                return format!(
                    "the memory budgets of the {} worker(s) with a free slot hold no more of its \
                     shards ({} at least per worker)",
                    free.len(),
                    format_bytes(memory.smallest_worker_bytes())
                );
            }
        }
        String::new()
    }
}

/// A job with no shard waiting for a lease: at a stage barrier, the next
/// stage waits for the last running shards while a worker could take more.
fn barrier(entry: &JobEntry, idle_slots: bool) -> String {
    let rec = &entry.rec;
    let running = entry.shards.leased().count();
    let more_stages = rec.stage < rec.plan.stages_total || !rec.spec.stages_known();
    if !idle_slots || running == 0 || !more_stages {
        return String::new();
    }
    format!(
        "at the barrier of stage {}: the next stage starts when its {running} running shard(s) \
         finish",
        rec.stage
    )
}
