//! What tally's processes say to each other and how they reach each other.
//! Layer: beside the kernels, below the kinds. The gRPC contract (generated from
//! `proto/`), its codec and limits, the calls' deadlines, transport security,
//! lease ids, digests and the Prometheus text encoding; no kind and no
//! scheduling logic.

#![forbid(unsafe_code)]

pub mod codec;
pub mod deadline;
pub mod digest;
pub mod error;
pub mod lease;
pub mod limits;
pub mod metrics;
pub mod proto;
pub mod transport;

pub use error::{Error, Result};
