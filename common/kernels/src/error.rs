//! The one error type of `tally-kernels`.

/// Everything a kernel, a spec or a plan can refuse or fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input (a spec value, a board, a puzzle, a payload) is not acceptable;
    /// the message says which value and why.
    #[error("{0}")]
    InvalidArgument(String),
    /// The computation was asked to stop through its [`crate::Control`].
    #[error("cancelled")]
    Cancelled,
    /// A shard failed in a way another attempt may not repeat (a user
    /// kernel said it failed, or this worker cannot run it): retried.
    #[error("{0}")]
    Failed(String),
    /// The machine has no room on disk for what the shard writes (its spill
    /// directory is full, or at its limit): neither the shard's fault nor
    /// its job's, so the shard waits and is tried again, and no attempt is
    /// counted against it.
    #[error("{0}")]
    NoRoom(String),
    /// An internal consistency check failed: a bug, never a user error.
    #[error("internal check failed: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for returning an [`Error::InvalidArgument`] with a formatted message.
#[macro_export]
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::error::Error::InvalidArgument(format!($($arg)*))
    };
}
