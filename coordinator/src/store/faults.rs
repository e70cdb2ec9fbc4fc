//! Storage failures: what kind each is (full, permission, I/O, damage), its
//! one-line message, and the guard that turns sled's panics on damaged files
//! into errors.

use std::path::Path;

use crate::error::{CoordinatorError, Result, sled_message};

/// What kind of storage failure an error is: each has its own message, and a
/// full disk its own status (the work waits for space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    Full,
    Permission,
    Io,
    Corruption,
}

impl StorageFault {
    pub fn of(e: &sled::Error) -> StorageFault {
        match e {
            sled::Error::Io(io) => StorageFault::of_io(io),
            sled::Error::Corruption { .. } => StorageFault::Corruption,
            _ => StorageFault::Io,
        }
    }

    pub fn of_io(e: &std::io::Error) -> StorageFault {
        use std::io::ErrorKind;
        // ENOSPC, EDQUOT; EACCES, EPERM, EROFS.
        match (e.kind(), e.raw_os_error()) {
            (ErrorKind::StorageFull | ErrorKind::QuotaExceeded, _) | (_, Some(28 | 122)) => {
                StorageFault::Full
            }
            (ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem, _)
            | (_, Some(1 | 13 | 30)) => StorageFault::Permission,
            _ => StorageFault::Io,
        }
    }
}

/// Runs a call into sled, turning a panic into an error: sled 0.34 panics on
/// some damaged files instead of returning its corruption error, and a damaged
/// store must be refused with a clear line, not crash the coordinator.
pub(super) fn guarded<T>(dir: &Path, call: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        // sled's message may dump a whole page: one short line is enough.
        let why: String = why.chars().take(120).collect::<String>().replace('\n', " ");
        Err(CoordinatorError::Store(format!(
            "the store in {} is damaged: sled failed reading it ({why})",
            dir.display()
        )))
    })
}

/// The coordinator's error for a storage failure in `dir`, classified, in one line.
pub(super) fn fault(dir: &Path, e: &sled::Error) -> CoordinatorError {
    let dir = dir.display();
    let detail = sled_message(e);
    match StorageFault::of(e) {
        StorageFault::Full => CoordinatorError::StoreFull(format!(
            "the disk holding the store in {dir} is full ({detail}); work is paused until space is freed"
        )),
        StorageFault::Permission => CoordinatorError::Store(format!(
            "no permission to write the store in {dir} ({detail})"
        )),
        StorageFault::Io => {
            CoordinatorError::Store(format!("I/O error in the store in {dir} ({detail})"))
        }
        StorageFault::Corruption => {
            CoordinatorError::Store(format!("the store in {dir} is damaged ({detail})"))
        }
    }
}
