//! Pure, synchronous core of tally: job specifications, counting kernels and the
//! modular arithmetic they share. Nothing here performs I/O or knows about the
//! async runtime, the network or the store; the coordinator and the worker call
//! into it (`transport` only checks and applies credentials the callers read).

pub mod blocks;
pub mod control;
pub mod error;
pub mod hex;
pub mod jobs;
pub mod kayles;
pub mod metrics;
pub mod modular;
pub mod pegs;
pub mod proto;
pub mod sliders;
pub mod spec;
pub mod transport;

#[doc(hidden)]
pub mod test_rng;

pub use control::Control;
pub use error::{Error, Result};
