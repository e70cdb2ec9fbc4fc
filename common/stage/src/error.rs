//! The one error type of `tally-stage`.

/// What a stage store refuses or fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    /// The `--stage-store` value or the store's configuration is not usable;
    /// the message says which part and why.
    #[error("{0}")]
    InvalidConfig(String),
    /// The store did not answer within the patience given (down, unreachable,
    /// throttling): the caller may try again later.
    #[error("the stage store is unavailable: {0}")]
    Unavailable(String),
    /// A committed blob is missing, or fails its digest: it must be computed
    /// again, never used.
    #[error("the stage blob {key} cannot be used: {why}")]
    Corrupt { key: String, why: String },
    /// The store refused the request for good (permissions, a bad bucket).
    #[error("the stage store refused the request: {0}")]
    Refused(String),
    /// The operation was asked to stop.
    #[error("cancelled")]
    Cancelled,
}

pub type Result<T> = std::result::Result<T, StageError>;
