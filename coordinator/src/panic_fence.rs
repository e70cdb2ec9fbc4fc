//! A flag raised when a panic unwinds through a critical section: whatever it
//! guarded may be half changed, so the owner reads it back before using it
//! again (what a poisoned lock guaranteed, without poisoning every later call).

use std::sync::atomic::{AtomicBool, Ordering};

/// Sets its flag when dropped by a panic's unwinding; nothing otherwise.
pub(crate) struct SetOnPanic<'a>(pub(crate) &'a AtomicBool);

impl Drop for SetOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_panic_through_the_fence_raises_the_flag() {
        let flag = AtomicBool::new(false);
        drop(SetOnPanic(&flag));
        assert!(!flag.load(Ordering::SeqCst));
        let unwound = std::panic::catch_unwind(|| {
            let _fence = SetOnPanic(&flag);
            panic!("a bug in a critical section");
        });
        assert!(unwound.is_err());
        assert!(flag.load(Ordering::SeqCst));
    }
}
