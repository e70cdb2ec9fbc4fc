//! The dedicated compute pool: a fixed set of OS threads that run kernels, so the
//! async runtime's threads never block on computation.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::mpsc;

type Task = Box<dyn FnOnce() + Send + 'static>;

pub struct ComputePool {
    sender: Option<mpsc::Sender<Task>>,
}

impl ComputePool {
    pub fn new(threads: usize) -> ComputePool {
        let (sender, receiver) = mpsc::channel::<Task>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..threads.max(1) {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("tally-compute-{i}"))
                .spawn(move || {
                    loop {
                        let task = receiver.lock().recv();
                        match task {
                            Ok(task) => task(),
                            Err(_) => return,
                        }
                    }
                })
                .expect("spawning a compute thread");
        }
        ComputePool {
            sender: Some(sender),
        }
    }

    /// Runs `f` on a pool thread; the result arrives through the returned future.
    pub fn run<T, F>(&self, f: F) -> tokio::sync::oneshot::Receiver<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task: Task = Box::new(move || {
            let _ = tx.send(f());
        });
        self.sender
            .as_ref()
            .expect("pool is open")
            .send(task)
            .expect("compute threads alive");
        rx
    }
}

impl Drop for ComputePool {
    /// Closes the pool: each thread ends once its current kernel returns.
    /// They are not joined: a drop must never block (it may run on the async
    /// runtime, and shutdown has a bound), and kernels hold no resources that
    /// outlive the process.
    fn drop(&mut self) {
        self.sender.take();
    }
}
