//! What tally's processes say to each other and how they reach each other.
//! Layer: beside the kernels, below the kinds; it imports no other tally
//! crate. The gRPC contract (generated from `proto/`), its codec and limits,
//! the calls' deadlines, transport security, lease ids, digests and the
//! Prometheus text encoding; no kind and no scheduling logic.
//!
//! Modules, from the bottom up; a module imports only modules below it:
//! `error`, `proto`, `codec`, `limits`, `digest`, `metrics` and `deadline`,
//! which import no sibling; `lease` (on `error`); `transport` (on `deadline`
//! and `error`).

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
