//! Scoped threads for the kernels' parallel loops. Each helper runs its work on
//! up to `threads` threads, the calling one included, and returns the results
//! in a fixed order, so that a kernel's answer does not depend on the number of
//! threads. A panic on any thread is raised again on the caller, with its own
//! message, once every thread has ended.
//!
//! * [`map_parts`]: one thread per part (the parts are split up by the caller).
//! * [`map_indices`], [`try_map_indices`]: `0..count`, each thread taking the
//!   next index in turn; the fallible one stops at the first error.
//! * [`in_rounds`]: rounds of items that must all end before the next round
//!   begins, the threads meeting at a barrier between rounds.

use parking_lot::Mutex;
use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::{Control, Error, Result};

/// `work(part)` for each of `parts`, each on a thread of its own (the first on
/// the calling thread); the results in the order of `parts`.
pub fn map_parts<P, R>(parts: impl IntoIterator<Item = P>, work: impl Fn(P) -> R + Sync) -> Vec<R>
where
    P: Send,
    R: Send,
{
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let work = &work;
    std::thread::scope(|scope| {
        let others: Vec<_> = parts.map(|part| scope.spawn(move || work(part))).collect();
        let mut results = Vec::with_capacity(others.len() + 1);
        results.push(work(first));
        for other in others {
            results.push(other.join().unwrap_or_else(|p| panic::resume_unwind(p)));
        }
        results
    })
}

/// `work(i)` for every `i` in `0..count`, on up to `threads` threads that each
/// take the next index in turn; the results in the order of `i`.
pub fn map_indices<T: Send>(
    count: usize,
    threads: usize,
    work: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    try_map_indices(count, threads, |i| Ok(work(i))).expect("work that cannot fail")
}

/// [`map_indices`] for work that can fail: no index is taken after the first
/// error, and the error is returned. When several threads fail, an error other
/// than [`Error::Cancelled`] is returned before a cancellation it may have
/// raced with.
pub fn try_map_indices<T: Send>(
    count: usize,
    threads: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let take = |_thread| -> Result<Vec<(usize, T)>> {
        let mut done = Vec::new();
        while !failed.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                break;
            }
            match work(i) {
                Ok(value) => done.push((i, value)),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(done)
    };
    let outcomes = map_parts(0..threads.clamp(1, count.max(1)), take);
    let mut values: Vec<Option<T>> = (0..count).map(|_| None).collect();
    let mut errors = Vec::new();
    for outcome in outcomes {
        match outcome {
            Ok(done) => done.into_iter().for_each(|(i, v)| values[i] = Some(v)),
            Err(e) => errors.push(e),
        }
    }
    if let Some(e) = errors
        .into_iter()
        .min_by_key(|e| matches!(e, Error::Cancelled))
    {
        return Err(e);
    }
    // Without an error every index was taken, and its value kept.
    Ok(values
        .into_iter()
        .map(|v| v.expect("index taken"))
        .collect())
}

/// Rounds of work on `threads` threads, each round ending before the next
/// begins (a sweep whose every step reads all of the step before). In round
/// `r` the threads take the items `0..sizes[r]` one at a time; then they meet
/// at a barrier, where one of them calls `after_round(r)` and polls `control`,
/// and the rounds stop with [`Error::Cancelled`] once it is cancelled.
///
/// Each thread calls `worker()` once and then its result `step(round, item)`
/// for every item it takes, so `step` may own buffers that it reuses. Every
/// item is taken by exactly one thread, and everything written in a round is
/// seen by every thread in the rounds after it. A panic stops the rounds at
/// the next barrier, and is raised again here.
pub fn in_rounds<S: FnMut(usize, usize)>(
    threads: usize,
    sizes: &[usize],
    control: &Control,
    worker: impl Fn() -> S + Sync,
    after_round: impl Fn(usize) + Sync,
) -> Result<()> {
    let threads = threads.max(1);
    let taken: Vec<AtomicUsize> = sizes.iter().map(|_| AtomicUsize::new(0)).collect();
    let barrier = Barrier::new(threads);
    // Set only between the two waits of a barrier, so that every thread sees
    // the same value at the start of a round and no thread is left waiting.
    let stop = AtomicBool::new(false);
    let panicked = FirstPanic::default();
    let run = |_thread| {
        let mut step = panicked.catch(&worker);
        for (round, &size) in sizes.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(step) = step.as_mut() {
                panicked.catch(|| {
                    loop {
                        let item = taken[round].fetch_add(1, Ordering::Relaxed);
                        if item >= size {
                            break;
                        }
                        step(round, item);
                    }
                });
            }
            if barrier.wait().is_leader() {
                panicked.catch(|| after_round(round));
                if panicked.is_set() || control.is_cancelled() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            barrier.wait();
        }
    };
    map_parts(0..threads, run);
    panicked.raise();
    if stop.load(Ordering::Relaxed) {
        return Err(Error::Cancelled);
    }
    control.check()
}

/// The payload of the first panic caught on any thread.
#[derive(Default)]
struct FirstPanic(Mutex<Option<Box<dyn Any + Send>>>);

impl FirstPanic {
    /// `f()`, or `None` if it panicked.
    fn catch<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        match panic::catch_unwind(AssertUnwindSafe(f)) {
            Ok(value) => Some(value),
            Err(payload) => {
                self.slot().get_or_insert(payload);
                None
            }
        }
    }

    fn is_set(&self) -> bool {
        self.slot().is_some()
    }

    /// Raises the panic caught, if any.
    fn raise(&self) {
        if let Some(payload) = self.slot().take() {
            panic::resume_unwind(payload);
        }
    }

    fn slot(&self) -> parking_lot::MutexGuard<'_, Option<Box<dyn Any + Send>>> {
        self.0.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn panic_message(payload: Box<dyn Any + Send>) -> String {
        match payload.downcast::<&str>() {
            Ok(s) => s.to_string(),
            Err(payload) => *payload.downcast::<String>().expect("a panic message"),
        }
    }

    #[test]
    fn map_parts_keeps_the_order_and_starts_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let results = map_parts(0..5, |p| (p * 10, std::thread::current().id()));
        let values: Vec<_> = results.iter().map(|r| r.0).collect();
        assert_eq!(values, [0, 10, 20, 30, 40]);
        assert_eq!(results[0].1, caller);
        assert!(results[1..].iter().all(|r| r.1 != caller));
        assert!(map_parts(Vec::<u8>::new(), |p| p).is_empty());
    }

    #[test]
    fn map_parts_raises_a_panic_with_its_message() {
        for bad in [0, 2] {
            let caught = panic::catch_unwind(|| {
                map_parts(0..3, |p| {
                    assert!(p != bad, "part {p} failed");
                    p
                })
            });
            let message = panic_message(caught.expect_err("the panic comes through"));
            assert_eq!(message, format!("part {bad} failed"));
        }
    }

    #[test]
    fn map_indices_returns_values_in_index_order() {
        for threads in [1, 2, 5] {
            for count in [0, 1, 7, 100] {
                let values = map_indices(count, threads, |i| i * i);
                assert_eq!(values, (0..count).map(|i| i * i).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn try_map_indices_takes_no_index_after_an_error() {
        let calls = AtomicUsize::new(0);
        let result = try_map_indices(10, 1, |i| {
            calls.fetch_add(1, Ordering::Relaxed);
            if i == 3 {
                Err(Error::Internal("three".into()))
            } else {
                Ok(i)
            }
        });
        assert!(matches!(result, Err(Error::Internal(m)) if m == "three"));
        assert_eq!(calls.load(Ordering::Relaxed), 4);
        assert_eq!(try_map_indices(3, 2, |i| Ok(i + 1)).unwrap(), [1, 2, 3]);
    }

    #[test]
    fn try_map_indices_prefers_a_real_error_to_a_cancellation() {
        // Both threads take their index before either fails.
        let both_taken = Barrier::new(2);
        let result = try_map_indices(2, 2, |i| -> Result<()> {
            both_taken.wait();
            Err(if i == 0 {
                Error::Cancelled
            } else {
                Error::Internal("real".into())
            })
        });
        assert!(matches!(result, Err(Error::Internal(m)) if m == "real"));
    }

    /// Rounds of the given sizes: every item checks that the round before has
    /// ended, and the worker's own buffer survives across rounds.
    fn check_rounds(threads: usize, sizes: &[usize]) {
        let done: Vec<AtomicUsize> = sizes.iter().map(|_| AtomicUsize::new(0)).collect();
        let after = AtomicUsize::new(0);
        let steps = AtomicU64::new(0);
        let (done, steps) = (&done, &steps);
        let worker = move || {
            let mut mine = 0u64;
            move |round: usize, _item: usize| {
                if round > 0 {
                    assert_eq!(done[round - 1].load(Ordering::Relaxed), sizes[round - 1]);
                }
                done[round].fetch_add(1, Ordering::Relaxed);
                mine += 1;
                steps.fetch_max(mine, Ordering::Relaxed);
            }
        };
        let after_round = |round: usize| {
            assert_eq!(done[round].load(Ordering::Relaxed), sizes[round]);
            assert_eq!(after.fetch_add(1, Ordering::Relaxed), round);
        };
        in_rounds(threads, sizes, &Control::new(), worker, after_round).unwrap();
        assert_eq!(after.load(Ordering::Relaxed), sizes.len());
        let total: usize = sizes.iter().sum();
        assert!(steps.load(Ordering::Relaxed) as usize >= total.div_ceil(threads));
    }

    #[test]
    fn in_rounds_finishes_each_round_before_the_next() {
        for threads in [1, 2, 3, 8] {
            check_rounds(threads, &[5, 0, 17, 1, 64, 3]);
            check_rounds(threads, &[]);
        }
    }

    #[test]
    fn in_rounds_stops_at_the_barrier_after_a_cancellation() {
        for threads in [1, 3] {
            let control = Control::new();
            let last_round = &AtomicUsize::new(0);
            let worker = move || {
                move |round: usize, _| {
                    last_round.fetch_max(round, Ordering::Relaxed);
                }
            };
            let result = in_rounds(threads, &[4; 6], &control, worker, |round| {
                if round == 2 {
                    control.cancel();
                }
            });
            assert!(matches!(result, Err(Error::Cancelled)));
            assert_eq!(last_round.load(Ordering::Relaxed), 2);
        }
    }

    #[test]
    fn in_rounds_raises_a_panic_without_leaving_a_thread_waiting() {
        for threads in [1, 2, 4] {
            let last_round = &AtomicUsize::new(0);
            let worker = move || {
                move |round: usize, item: usize| {
                    last_round.fetch_max(round, Ordering::Relaxed);
                    assert!(round != 1 || item != 2, "item 2 of round 1 failed");
                }
            };
            let caught = panic::catch_unwind(AssertUnwindSafe(|| {
                in_rounds(threads, &[8; 5], &Control::new(), worker, |_| {})
            }));
            let message = panic_message(caught.expect_err("the panic comes through"));
            assert_eq!(message, "item 2 of round 1 failed");
            assert_eq!(last_round.load(Ordering::Relaxed), 1);
        }
        let made = AtomicUsize::new(0);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            let worker = || {
                assert!(made.fetch_add(1, Ordering::Relaxed) != 1, "no buffer");
                |_: usize, _: usize| {}
            };
            in_rounds(3, &[2, 2], &Control::new(), worker, |_| {})
        }));
        assert_eq!(
            panic_message(caught.expect_err("comes through")),
            "no buffer"
        );
    }
}
