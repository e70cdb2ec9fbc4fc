//! The workers the scheduler has heard from: their registrations (each opens
//! a session), the session check on every later call, and when each was last
//! heard from (which makes it live, and after a long silence forgotten).
//! Sessions live in memory only: a restarted coordinator knows no worker
//! until it registers again.

use std::collections::HashMap;

use tally_kinds::kind::WorkerRoom;
use tally_stage::memory::slot_share;
use tally_wire::transport::constant_time_eq;

use crate::error::{CoordinatorError, Result};

use super::protocol::{Registration, Restarted, WORKER_FORGOTTEN_MS, WorkerInfo};

/// The registered workers, by id.
#[derive(Default)]
pub(super) struct Workers {
    known: HashMap<String, WorkerInfo>,
}

impl Workers {
    /// Registers `worker` with a new session: a worker registering again (it
    /// restarted, or this coordinator did) replaces its old session. Says
    /// when the registration is of another process than the one known (both
    /// named their incarnation): the old one is gone.
    pub(super) fn register(
        &mut self,
        worker: &str,
        registration: Registration,
        session: String,
        now_ms: u64,
    ) -> Option<Restarted> {
        let Registration {
            hostname,
            slots,
            version,
            memory_budget,
            capabilities,
            incarnation,
            oom_kills,
        } = registration;
        let info = WorkerInfo {
            hostname,
            session,
            slots,
            version,
            memory_budget,
            capabilities,
            last_seen_ms: now_ms,
            incarnation,
            oom_kills,
        };
        let old = self.known.insert(worker.to_string(), info)?;
        let new = &self.known[worker];
        (!old.incarnation.is_empty()
            && !new.incarnation.is_empty()
            && old.incarnation != new.incarnation)
            .then(|| Restarted {
                budget: old.memory_budget(),
                oom_kills: (new.oom_kills > old.oom_kills).then_some(new.oom_kills),
            })
    }

    /// Notes that `worker` was heard from at `now_ms`; its registration, if
    /// it has one.
    pub(super) fn heard_from(&mut self, worker: &str, now_ms: u64) -> Option<&WorkerInfo> {
        let info = self.known.get_mut(worker)?;
        info.last_seen_ms = now_ms;
        Some(info)
    }

    /// The live worker with the largest memory budget (the budget and its
    /// slots), and who it is: a job is fitted to it at submission. With no
    /// live worker, the worker assumed.
    pub(super) fn largest_worker(&self, now_ms: u64) -> (WorkerRoom, String) {
        match self.live(now_ms).max_by_key(|(_, w)| w.memory_budget()) {
            Some((_, w)) => (
                WorkerRoom {
                    budget: w.memory_budget(),
                    slots: u64::from(w.slots.max(1)),
                },
                format!("the largest worker ({})", w.hostname),
            ),
            None => (
                WorkerRoom::ASSUMED,
                "a worker is assumed to have with none registered".to_string(),
            ),
        }
    }

    /// The least memory a slot of a live worker has (the share of its
    /// budget the worker gives each shard, `tally_stage::memory::slot_share`),
    /// among the workers that said their budget; 0 when none did. A barrier
    /// sizes the next stage's shards to it.
    pub(super) fn least_slot_memory(&self, now_ms: u64) -> u64 {
        self.live(now_ms)
            .filter(|(_, w)| w.slots > 0 && w.memory_budget > 0)
            .map(|(_, w)| slot_share(w.memory_budget, u64::from(w.slots)))
            .min()
            .unwrap_or(0)
    }

    /// Refuses a call of `worker` that does not carry its current session:
    /// a worker never registered, forgotten after a long silence, replaced by
    /// a later registration, or registered with a coordinator that has since
    /// restarted (sessions live in memory). The worker registers again.
    pub(super) fn check_session(&self, worker: &str, session: &str) -> Result<()> {
        match self.known.get(worker) {
            Some(info) if constant_time_eq(info.session.as_bytes(), session.as_bytes()) => Ok(()),
            _ => Err(CoordinatorError::Unauthenticated(format!(
                "no live session {} for worker {worker}: register again",
                if session.is_empty() {
                    "given"
                } else {
                    "matches"
                }
            ))),
        }
    }

    pub(super) fn all(&self) -> &HashMap<String, WorkerInfo> {
        &self.known
    }

    /// The workers heard from lately (see [`WorkerInfo::is_live`]).
    pub(super) fn live(&self, now_ms: u64) -> impl Iterator<Item = (&str, &WorkerInfo)> {
        self.known
            .iter()
            .filter(move |(_, w)| w.is_live(now_ms))
            .map(|(id, w)| (id.as_str(), w))
    }

    /// Drops the workers not heard from for [`WORKER_FORGOTTEN_MS`] from the
    /// list (a worker that comes back registers again); returns how many.
    pub(super) fn forget_silent(&mut self, now_ms: u64) -> usize {
        let before = self.known.len();
        self.known
            .retain(|_, w| w.last_seen_ms + WORKER_FORGOTTEN_MS >= now_ms);
        before - self.known.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::protocol::WORKER_LOST_MS;

    #[test]
    fn the_least_slot_memory_is_among_live_workers_that_said_their_budget() {
        let mut workers = Workers::default();
        let register = |workers: &mut Workers, id: &str, slots, budget, now| {
            let registration = Registration {
                slots,
                memory_budget: budget,
                ..Registration::default()
            };
            workers.register(id, registration, id.to_string(), now);
        };
        assert_eq!(workers.least_slot_memory(0), 0, "no worker");
        register(&mut workers, "silent", 4, 0, 0);
        assert_eq!(workers.least_slot_memory(0), 0, "no budget said");
        register(&mut workers, "large", 2, 8 << 30, 0);
        register(&mut workers, "small", 4, 4 << 30, 0);
        // A slot's share is what its worker gives a shard: the budget less
        // the process's 32 MiB and each slot's 80 MiB of stage I/O.
        let share = |budget: u64, slots: u64| (budget - (32 << 20) - slots * (80 << 20)) / slots;
        assert_eq!(workers.least_slot_memory(0), share(4 << 30, 4));
        // The small one falls silent: the large one's slots remain.
        let later = WORKER_LOST_MS + 1;
        workers.heard_from("large", later);
        assert_eq!(workers.least_slot_memory(later), share(8 << 30, 2));
    }
}
