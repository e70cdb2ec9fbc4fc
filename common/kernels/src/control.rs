//! Cooperative cancellation and progress counting for long-running kernels.
//!
//! A kernel receives a `&Control`, adds the work units it has finished to it and
//! polls [`Control::check`] at convenient points (once per cell step, per
//! coefficient block, per few thousand nodes). The caller reads the counter from
//! another thread to report progress and sets the flag to stop the kernel; atomics
//! keep the kernel free of channels, locks and I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Control {
    /// Shared with the controls made by [`Control::with_own_counter`].
    cancelled: Arc<AtomicBool>,
    /// Set when the caller wants a checkpoint as soon as the kernel can make
    /// one (a worker draining before it stops), whatever the kernel's
    /// interval.
    checkpoint_asked: Arc<AtomicBool>,
    work_done: AtomicU64,
    /// Tests only: cancel once this many work units are recorded.
    #[cfg(test)]
    cancel_at: Option<u64>,
}

impl Control {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every kernel observing this control to stop soon.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// The flag [`Control::cancel`] sets, for code the kernel cannot poll
    /// while it runs (a sandboxed module's call, interrupted when it is set).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancelled.clone()
    }

    /// Asks the kernel for a checkpoint at its next chance, not at its next
    /// interval; it stays asked (every chance then makes one) until the
    /// caller stops the kernel.
    pub fn ask_checkpoint(&self) {
        self.checkpoint_asked.store(true, Ordering::Relaxed);
    }

    /// Whether [`Control::ask_checkpoint`] was called: a kernel that
    /// checkpoints makes one at its next chance.
    pub fn checkpoint_asked(&self) -> bool {
        self.checkpoint_asked.load(Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once [`Control::cancel`] has been called.
    pub fn check(&self) -> crate::Result<()> {
        if self.is_cancelled() {
            Err(crate::Error::Cancelled)
        } else {
            Ok(())
        }
    }

    /// Records `units` more units of finished work.
    pub fn add_work(&self, units: u64) {
        let _done = self.work_done.fetch_add(units, Ordering::Relaxed) + units;
        #[cfg(test)]
        if self.cancel_at.is_some_and(|at| _done >= at) {
            self.cancel();
        }
    }

    /// A control with the same cancellation flag (cancelling either cancels
    /// both) and a counter of its own, starting at zero: for a preliminary step
    /// whose work units are not those of the caller's progress (building a
    /// kernel's graph before the counted work starts).
    pub fn with_own_counter(&self) -> Control {
        Control {
            cancelled: self.cancelled.clone(),
            checkpoint_asked: self.checkpoint_asked.clone(),
            work_done: AtomicU64::new(0),
            #[cfg(test)]
            cancel_at: None,
        }
    }

    pub fn work_done(&self) -> u64 {
        self.work_done.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
impl Control {
    /// A control that cancels itself as the kernel records its `units`-th work
    /// unit: the kernel is then stopped in the middle of its run at a point the
    /// test chooses, whatever the threads' scheduling (a helper thread that
    /// cancels may run only after a short kernel has finished).
    pub(crate) fn cancelled_at_work(units: u64) -> Control {
        Control {
            cancel_at: Some(units),
            ..Control::default()
        }
    }
}
