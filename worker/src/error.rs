//! The worker's errors.

use tally_kinds::Error as KindError;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid coordinator address {0:?}: {1}")]
    Address(String, String),
    /// The coordinator refused the worker's credentials: retrying cannot
    /// help, the operator must give the worker its token.
    #[error(
        "the coordinator refused the worker token ({}): {}",
        code_name(.0.code()),
        .0.message()
    )]
    Refused(tonic::Status),
    #[error("the coordinator answered {}: {}", code_name(.0.code()), .0.message())]
    Rpc(#[from] tonic::Status),
    #[error("{0}")]
    Kernel(#[from] KindError),
    #[error("{0}")]
    Wire(#[from] tally_wire::Error),
    #[error("{0}")]
    Stage(#[from] tally_stage::StageError),
    /// The worker's own configuration cannot be used (its spill directory).
    #[error("{0}")]
    Config(String),
}

impl WorkerError {
    /// The shard was asked to stop (revoked, or the worker draining), in the
    /// kernel or while it read or wrote stage data.
    pub fn is_cancelled(&self) -> bool {
        matches!(
            self,
            WorkerError::Kernel(KindError::Cancelled)
                | WorkerError::Stage(tally_stage::StageError::Cancelled)
        )
    }
}

pub type Result<T> = std::result::Result<T, WorkerError>;

/// A gRPC code by its name in the gRPC specification (`PERMISSION_DENIED`),
/// as the coordinator's documentation and `grpcurl` name it.
fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_a_line_with_the_codes_name() {
        let refused = WorkerError::Refused(tonic::Status::permission_denied("not this token"));
        assert_eq!(
            refused.to_string(),
            "the coordinator refused the worker token (PERMISSION_DENIED): not this token"
        );
        let other = WorkerError::Rpc(tonic::Status::deadline_exceeded("slow"));
        assert_eq!(
            other.to_string(),
            "the coordinator answered DEADLINE_EXCEEDED: slow"
        );
    }
}
