//! The one error type of the coordinator, and its mapping to gRPC status codes.

use tally_common::Error as CommonError;

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    /// The request is well formed but the state does not allow it: a report from a
    /// stale attempt, a result that is not ready, cancelling a finished job.
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// The request conflicts with what exists: an idempotency key reused for
    /// a different spec.
    #[error("{0}")]
    AlreadyExists(String),
    #[error("store: {0}")]
    Store(String),
    /// The store's disk is full: nothing can be written until space is freed.
    #[error("store: {0}")]
    StoreFull(String),
    /// Temporarily unable to serve (shutting down); clients retry.
    #[error("{0}")]
    Unavailable(String),
    #[error("internal: {0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, CoordinatorError>;

impl From<CommonError> for CoordinatorError {
    fn from(e: CommonError) -> Self {
        match e {
            CommonError::InvalidArgument(m) => CoordinatorError::InvalidArgument(m),
            CommonError::Cancelled => CoordinatorError::FailedPrecondition("cancelled".into()),
            CommonError::Internal(m) => CoordinatorError::Internal(m),
        }
    }
}

impl From<sled::Error> for CoordinatorError {
    fn from(e: sled::Error) -> Self {
        CoordinatorError::Store(e.to_string())
    }
}

/// The one place where coordinator errors become gRPC statuses.
impl From<CoordinatorError> for tonic::Status {
    fn from(e: CoordinatorError) -> Self {
        use tonic::Status;
        match e {
            CoordinatorError::InvalidArgument(m) => Status::invalid_argument(m),
            CoordinatorError::NotFound(m) => Status::not_found(m),
            CoordinatorError::FailedPrecondition(m) => Status::failed_precondition(m),
            CoordinatorError::ResourceExhausted(m) => Status::resource_exhausted(m),
            CoordinatorError::AlreadyExists(m) => Status::already_exists(m),
            CoordinatorError::Store(m) => Status::unavailable(format!("store: {m}")),
            CoordinatorError::StoreFull(m) => Status::resource_exhausted(format!("store: {m}")),
            CoordinatorError::Unavailable(m) => Status::unavailable(m),
            CoordinatorError::Internal(m) => Status::internal(m),
        }
    }
}
