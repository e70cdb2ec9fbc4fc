//! The one error type of the coordinator, and its mapping to gRPC status codes.

use tally_kinds::Error as KindError;

#[derive(Clone, Debug, thiserror::Error)]
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
    /// A worker call without a live session of that worker.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known user asking for what is not theirs: another user's job, or
    /// what only an admin may do.
    #[error("{0}")]
    PermissionDenied(String),
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

impl From<KindError> for CoordinatorError {
    fn from(e: KindError) -> Self {
        match e {
            KindError::InvalidArgument(m) => CoordinatorError::InvalidArgument(m),
            KindError::Cancelled => CoordinatorError::FailedPrecondition("cancelled".into()),
            KindError::Internal(m) | KindError::Failed(m) => CoordinatorError::Internal(m),
            KindError::NoRoom(m) => CoordinatorError::ResourceExhausted(m),
        }
    }
}

impl From<tally_wire::Error> for CoordinatorError {
    fn from(e: tally_wire::Error) -> Self {
        match e {
            tally_wire::Error::InvalidArgument(m) => CoordinatorError::InvalidArgument(m),
        }
    }
}

impl From<tally_stage::StageError> for CoordinatorError {
    fn from(e: tally_stage::StageError) -> Self {
        use tally_stage::StageError;
        match e {
            StageError::InvalidConfig(m) => CoordinatorError::InvalidArgument(m),
            StageError::Unavailable(_) | StageError::Cancelled => {
                CoordinatorError::Unavailable(e.to_string())
            }
            StageError::Corrupt { .. } | StageError::Refused(_) => {
                CoordinatorError::FailedPrecondition(e.to_string())
            }
        }
    }
}

impl CoordinatorError {
    /// The same error with its message passed through `f`.
    fn map_message(self, f: impl FnOnce(String) -> String) -> CoordinatorError {
        use CoordinatorError::*;
        match self {
            InvalidArgument(m) => InvalidArgument(f(m)),
            NotFound(m) => NotFound(f(m)),
            FailedPrecondition(m) => FailedPrecondition(f(m)),
            ResourceExhausted(m) => ResourceExhausted(f(m)),
            AlreadyExists(m) => AlreadyExists(f(m)),
            Unauthenticated(m) => Unauthenticated(f(m)),
            PermissionDenied(m) => PermissionDenied(f(m)),
            Store(m) => Store(f(m)),
            StoreFull(m) => StoreFull(f(m)),
            Unavailable(m) => Unavailable(f(m)),
            Internal(m) => Internal(f(m)),
        }
    }
}

impl From<sled::Error> for CoordinatorError {
    fn from(e: sled::Error) -> Self {
        CoordinatorError::Store(sled_message(&e))
    }
}

/// sled's error in one line for users: its corruption error's own text ends
/// in the debug form of a backtrace sled does not capture ("backtrace ()"),
/// and its I/O error wraps the OS error in another.
pub(crate) fn sled_message(e: &sled::Error) -> String {
    match e {
        sled::Error::Corruption { at, .. } => {
            let offset = match at {
                Some(sled::DiskPtr::Inline(offset) | sled::DiskPtr::Blob(offset, _)) => {
                    format!(" at file offset {offset}")
                }
                None => String::new(),
            };
            format!("sled read corrupted data{offset}")
        }
        sled::Error::Io(io) => match io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        {
            Some(inner) => inner.to_string(),
            None => io.to_string(),
        },
        other => other.to_string(),
    }
}

/// The longest status message sent. Messages may quote what a client sent (a
/// kind name, a board); a status travels in HTTP/2 headers, which clients
/// limit to a few KiB, so a long quote would break the client, not inform it.
pub const MAX_STATUS_MESSAGE: usize = 1024;

/// `message` cut to [`MAX_STATUS_MESSAGE`] bytes at a character boundary.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_STATUS_MESSAGE {
        let mut end = MAX_STATUS_MESSAGE - 30;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let cut = message.len() - end;
        message.truncate(end);
        message.push_str(&format!("... ({cut} more bytes)"));
    }
    message
}

/// The one place where coordinator errors become gRPC statuses.
impl From<CoordinatorError> for tonic::Status {
    fn from(e: CoordinatorError) -> Self {
        use tonic::Status;
        let e = e.map_message(bounded);
        match e {
            CoordinatorError::InvalidArgument(m) => Status::invalid_argument(m),
            CoordinatorError::NotFound(m) => Status::not_found(m),
            CoordinatorError::FailedPrecondition(m) => Status::failed_precondition(m),
            CoordinatorError::ResourceExhausted(m) => Status::resource_exhausted(m),
            CoordinatorError::AlreadyExists(m) => Status::already_exists(m),
            CoordinatorError::Unauthenticated(m) => Status::unauthenticated(m),
            CoordinatorError::PermissionDenied(m) => Status::permission_denied(m),
            CoordinatorError::Store(m) => Status::unavailable(format!("store: {m}")),
            CoordinatorError::StoreFull(m) => Status::resource_exhausted(format!("store: {m}")),
            CoordinatorError::Unavailable(m) => Status::unavailable(m),
            CoordinatorError::Internal(m) => Status::internal(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_bounded_at_a_character_boundary() {
        let long = format!("unknown kind {}", "é".repeat(100_000));
        let status = tonic::Status::from(CoordinatorError::InvalidArgument(long));
        assert!(
            status.message().len() <= MAX_STATUS_MESSAGE,
            "{}",
            status.message().len()
        );
        assert!(status.message().starts_with("unknown kind é"));
        assert!(status.message().ends_with("more bytes)"));
        let short = tonic::Status::from(CoordinatorError::NotFound("no job \"x\"".into()));
        assert_eq!(short.message(), "no job \"x\"");
    }

    /// A damaged store is refused in words: sled's own text for its
    /// corruption error ends in "backtrace ()".
    #[test]
    fn sled_errors_read_as_one_plain_line() {
        let at = sled::Error::Corruption {
            at: Some(sled::DiskPtr::Inline(4096)),
            bt: (),
        };
        assert_eq!(
            sled_message(&at),
            "sled read corrupted data at file offset 4096"
        );
        let nowhere = CoordinatorError::from(sled::Error::Corruption { at: None, bt: () });
        assert_eq!(nowhere.to_string(), "store: sled read corrupted data");
        let io = sled::Error::Io(std::io::Error::other(std::io::Error::from_raw_os_error(28)));
        let line = CoordinatorError::from(io).to_string();
        assert!(line.contains("No space left on device"), "{line}");
        assert!(!line.contains("IO error"), "{line}");
    }
}
