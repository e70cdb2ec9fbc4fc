//! Group commit: the scheduler applies each call's changes to the store as
//! it makes them (under its lock, readable at once, not yet durable); the
//! call then waits, outside the lock, until a flush covers its changes, and
//! only then answers. Calls that arrive while a flush runs apply theirs
//! meanwhile, and the next flush covers them all: one flush for many calls.
//!
//! The durability promise is unchanged: nothing is acknowledged before it is
//! on disk. A call that changed nothing waits too, for every change applied
//! before it but a lease's (soft state: `shared.rs` decides what a call
//! waits for), so that no answer shows state a crash could take back.
//!
//! When a flush fails, every call it covered fails with its error, and the
//! scheduler must be read back from the store (see `shared::Shared`): the
//! store may have lost what was applied after the last good flush.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;

use crate::error::{CoordinatorError, Result};
use crate::store::Store;

/// Failed flushes remembered for the calls that wait on them.
const FAILURES_KEPT: usize = 64;

#[derive(Default)]
struct State {
    /// Batches known durable (or failed): calls with a ticket up to this
    /// are answered.
    flushed: u64,
    /// Whether a call is flushing now (the leader); the others wait for it.
    flushing: bool,
    /// Failed flushes: the tickets they covered, and why.
    failures: VecDeque<(u64, u64, CoordinatorError)>,
    /// Flushes done and batches they covered, for the metrics and tests.
    flushes: u64,
}

/// The leader's flush: whatever way it ends (an error, a panic in the store),
/// dropping this hands the group its outcome, clears `flushing` and wakes
/// the calls waiting, so that none of them waits for a leader that is gone.
struct Leading<'a> {
    group: &'a GroupCommit,
    /// The batches durable before, and those the flush covers.
    from: u64,
    target: u64,
    /// The flush's outcome; `None` if it panicked.
    flushed: Option<Result<()>>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let group = self.group;
        let (from, target) = (self.from, self.target);
        let mut state = group.state.lock();
        state.flushing = false;
        state.flushes += 1;
        let failed = match self.flushed.take() {
            Some(Ok(())) => None,
            Some(Err(e)) => Some(e),
            None => Some(CoordinatorError::Internal(
                "the store's flush panicked; the coordinator reads its state back from the store"
                    .into(),
            )),
        };
        if let Some(e) = failed {
            tracing::error!(error = %e, "a store flush failed; {} changes not acknowledged", target - from);
            if state.failures.len() == FAILURES_KEPT {
                state.failures.pop_front();
            }
            state.failures.push_back((from, target, e));
        }
        if group.exit_after == Some(state.flushes) {
            tracing::error!("aborting after flush {} (fault injection)", state.flushes);
            std::process::abort();
        }
        state.flushed = state.flushed.max(target);
        group.done.notify_all();
    }
}

/// Shared by every call of a coordinator.
#[derive(Default)]
pub struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
    /// Fault injection: abort the process right after this many flushes,
    /// before the calls they covered are answered (what a kill -9 at that
    /// moment leaves).
    exit_after: Option<u64>,
}

impl GroupCommit {
    pub fn new(exit_after: Option<u64>) -> GroupCommit {
        GroupCommit {
            exit_after,
            ..GroupCommit::default()
        }
    }

    /// Notes that the first `applied` batches are durable already (those a
    /// store applied and flushed before the group commit took over).
    pub fn durable_through(&self, applied: u64) {
        let mut state = self.state.lock();
        state.flushed = state.flushed.max(applied);
    }

    /// Returns once the first `ticket` batches applied to `store` are
    /// durable: at once if a flush already covered them; else after the
    /// flush in progress and, if that one started too early, after one this
    /// call runs itself for every call waiting. Fails if the flush that
    /// covered the ticket failed.
    pub fn wait_durable(&self, store: &dyn Store, ticket: u64) -> Result<()> {
        let mut state = self.state.lock();
        loop {
            if state.flushed >= ticket {
                return match state
                    .failures
                    .iter()
                    .find(|(from, to, _)| *from < ticket && ticket <= *to)
                {
                    Some((_, _, e)) => Err(e.clone()),
                    None => Ok(()),
                };
            }
            if state.flushing {
                self.done.wait(&mut state);
                continue;
            }
            state.flushing = true;
            let from = state.flushed;
            drop(state);
            // Every batch counted here was applied before the flush starts.
            let target = store.applied();
            let mut leading = Leading {
                group: self,
                from,
                target,
                flushed: None,
            };
            leading.flushed = Some(store.flush());
            drop(leading);
            state = self.state.lock();
        }
    }

    /// Flushes run so far.
    pub fn flushes(&self) -> u64 {
        self.state.lock().flushes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;
    use crate::store::{Batch, Tree};

    /// A store that counts flushes, fails the ones asked to, and blocks a
    /// flush until released, so tests can line calls up behind it.
    #[derive(Default)]
    struct Probe {
        applied: AtomicU64,
        flushes: AtomicUsize,
        fail_next: Mutex<bool>,
        panic_next: Mutex<bool>,
        gate: Mutex<bool>,
        opened: Condvar,
    }

    impl Store for Probe {
        fn apply(&self, _batch: Batch) -> Result<()> {
            self.applied.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            let mut closed = self.gate.lock();
            while *closed {
                self.opened.wait(&mut closed);
            }
            self.flushes.fetch_add(1, Ordering::SeqCst);
            if std::mem::take(&mut *self.panic_next.lock()) {
                panic!("the store's flush panicked (test)");
            }
            let mut fail = self.fail_next.lock();
            if std::mem::take(&mut *fail) {
                return Err(CoordinatorError::StoreFull("the disk is full".into()));
            }
            Ok(())
        }
        fn applied(&self) -> u64 {
            self.applied.load(Ordering::SeqCst)
        }
        fn get(&self, _: Tree, _: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn scan_prefix(&self, _: Tree, _: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_ticket_already_flushed_returns_without_a_flush() {
        let store = Probe::default();
        let group = GroupCommit::new(None);
        group.wait_durable(&store, 0).unwrap();
        store.apply(Batch::default()).unwrap();
        group.wait_durable(&store, 1).unwrap();
        group.wait_durable(&store, 1).unwrap();
        assert_eq!(store.flushes.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn calls_waiting_behind_a_flush_share_the_next_one() {
        let store = Arc::new(Probe::default());
        let group = Arc::new(GroupCommit::new(None));
        store.apply(Batch::default()).unwrap();
        *store.gate.lock() = true;
        // The leader flushes ticket 1 and blocks in the store.
        let leader = {
            let (store, group) = (store.clone(), group.clone());
            std::thread::spawn(move || group.wait_durable(store.as_ref(), 1))
        };
        while !group.state.lock().flushing {
            std::thread::yield_now();
        }
        // Eight more calls apply theirs and wait.
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                store.apply(Batch::default()).unwrap();
                let ticket = store.applied();
                let (store, group) = (store.clone(), group.clone());
                std::thread::spawn(move || group.wait_durable(store.as_ref(), ticket))
            })
            .collect();
        *store.gate.lock() = false;
        store.opened.notify_all();
        leader.join().unwrap().unwrap();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        // One flush for the leader, one for the eight.
        assert_eq!(store.flushes.load(Ordering::SeqCst), 2);
        assert_eq!(group.flushes(), 2);
    }

    #[test]
    fn a_failed_flush_fails_exactly_the_calls_it_covered() {
        let store = Probe::default();
        let group = GroupCommit::new(None);
        store.apply(Batch::default()).unwrap();
        group.wait_durable(&store, 1).unwrap();
        store.apply(Batch::default()).unwrap();
        store.apply(Batch::default()).unwrap();
        *store.fail_next.lock() = true;
        let e = group.wait_durable(&store, 3).unwrap_err();
        assert!(matches!(e, CoordinatorError::StoreFull(_)), "{e}");
        // Ticket 2 was in the failed flush too; ticket 1 was not.
        assert!(group.wait_durable(&store, 2).is_err());
        group.wait_durable(&store, 1).unwrap();
        store.apply(Batch::default()).unwrap();
        group.wait_durable(&store, 4).unwrap();
    }

    #[test]
    fn a_panicking_flush_fails_its_calls_and_the_next_call_flushes_again() {
        let store = Arc::new(Probe::default());
        let group = Arc::new(GroupCommit::new(None));
        store.apply(Batch::default()).unwrap();
        *store.panic_next.lock() = true;
        let leader = {
            let (store, group) = (store.clone(), group.clone());
            std::thread::spawn(move || group.wait_durable(store.as_ref(), 1))
        };
        assert!(leader.join().is_err(), "the leader's flush panicked");
        // Without the guard, `flushing` stayed set and this waited for ever.
        let e = group.wait_durable(store.as_ref(), 1).unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
        store.apply(Batch::default()).unwrap();
        group.wait_durable(store.as_ref(), 2).unwrap();
        assert_eq!(store.flushes.load(Ordering::SeqCst), 2);
        assert_eq!(group.flushes(), 2);
    }
}
