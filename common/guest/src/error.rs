//! How a kernel fails, and the codes the ABI gives each failure.

use alloc::string::String;
use core::fmt;

use crate::params::ParamError;

/// Why a kernel returned no residues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// The parameters (or `--outputs`) are unusable: the job fails, since every
    /// shard would fail the same way. Code `-1`; the message goes to the host
    /// through `tally.say`, and the job's error names it.
    BadParams(String),
    /// Any other failure: the attempt fails and is retried. Code `-2`.
    Failed,
    /// The host asked the shard to stop (`tally.cancelled`). Code `-3`.
    Cancelled,
    /// The kernel's output broke the rules of its plan or of the ABI (a key
    /// too long, too many children): found by whoever runs it, never a
    /// kernel's to return; a runner fails the job with the reason.
    Malformed(String),
}

impl KernelError {
    /// The value `tally_shard` returns for this error.
    pub fn code(&self) -> i32 {
        match self {
            KernelError::BadParams(_) => -1,
            KernelError::Failed | KernelError::Malformed(_) => -2,
            KernelError::Cancelled => -3,
        }
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::BadParams(message) => write!(f, "bad parameters: {message}"),
            KernelError::Failed => f.write_str("the kernel failed"),
            KernelError::Cancelled => f.write_str("the shard was cancelled"),
            KernelError::Malformed(why) => write!(f, "the kernel broke its rules: {why}"),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl std::error::Error for KernelError {}

impl From<ParamError> for KernelError {
    fn from(error: ParamError) -> Self {
        KernelError::BadParams(alloc::format!("{error}"))
    }
}
