//! The worker's errors.

use tally_common::Error as CommonError;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid coordinator address {0:?}: {1}")]
    Address(String, String),
    #[error("{0}")]
    Rpc(#[from] tonic::Status),
    #[error("{0}")]
    Kernel(#[from] CommonError),
    #[error("{0}")]
    Stage(#[from] tally_stage::StageError),
}

impl WorkerError {
    /// The shard was asked to stop (revoked, or the worker draining), in the
    /// kernel or while it read or wrote stage data.
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self,
            WorkerError::Kernel(CommonError::Cancelled)
                | WorkerError::Stage(tally_stage::StageError::Cancelled)
        )
    }
}

pub type Result<T> = std::result::Result<T, WorkerError>;
