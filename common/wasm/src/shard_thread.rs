//! The thread that runs the shards of one calling thread, kept for its next
//! shards: a thread made for every shard cost more than a short shard itself.
//! It ends when its calling thread ends. A shard that panics gives no result
//! and the thread goes on to the next (a thread left to die with the panic
//! could take the next shard with it, sent before it was gone).

use std::cell::RefCell;
use std::sync::mpsc;

use crate::{Result, WasmError};

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static SHARD_THREAD: RefCell<Option<mpsc::Sender<Job>>> = const { RefCell::new(None) };
}

/// Runs `shard` on this thread's shard thread; its result comes on the
/// receiver (which fails if the shard panicked).
pub(crate) fn run<R: Send + 'static>(
    shard: impl FnOnce() -> R + Send + 'static,
) -> Result<mpsc::Receiver<R>> {
    let (done, result) = mpsc::sync_channel(1);
    let mut job: Job = Box::new(move || {
        let _ = done.send(shard());
    });
    SHARD_THREAD.with(|kept| {
        let mut kept = kept.borrow_mut();
        // At most twice: a kept thread that is gone (its calling thread's
        // state torn down) is replaced once.
        for _ in 0..2 {
            let jobs = match kept.as_ref() {
                Some(jobs) => jobs.clone(),
                None => kept.insert(spawn()?).clone(),
            };
            match jobs.send(job) {
                Ok(()) => return Ok(result),
                Err(mpsc::SendError(back)) => {
                    job = back;
                    *kept = None;
                }
            }
        }
        Err(WasmError::Failed(
            "the shard thread stopped as soon as it was made".into(),
        ))
    })
}

fn spawn() -> Result<mpsc::Sender<Job>> {
    let (jobs, received) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("wasm-shard".into())
        .spawn(move || {
            for job in received {
                // The job's result sender goes with the panic: its caller
                // hears of it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        })
        .map_err(|e| WasmError::Failed(format!("no shard thread: {e}")))?;
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_of_a_shard() -> std::thread::ThreadId {
        run(|| std::thread::current().id()).unwrap().recv().unwrap()
    }

    #[test]
    fn a_callers_shards_share_one_thread_which_outlives_a_panic() {
        let first = thread_of_a_shard();
        assert_ne!(first, std::thread::current().id());
        assert_eq!(thread_of_a_shard(), first);
        for _ in 0..20 {
            let panicked = run(|| -> u32 { panic!("a shard's panic") }).unwrap();
            assert!(panicked.recv().is_err(), "a panic is no result");
            // The next shard, sent at once, runs.
            assert_eq!(thread_of_a_shard(), first);
        }
        // Another caller has a thread of its own.
        let other = std::thread::spawn(thread_of_a_shard).join().unwrap();
        assert_ne!(other, first);
    }
}
