//! The one error type of `tally-wire`.

/// What the wire layer refuses: a malformed lease id, token, URL or TLS setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input is not acceptable; the message says which value and why.
    #[error("{0}")]
    InvalidArgument(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for an [`Error::InvalidArgument`] with a formatted message.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::error::Error::InvalidArgument(format!($($arg)*))
    };
}
pub(crate) use invalid;
