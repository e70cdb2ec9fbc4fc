//! Pure, synchronous core of tally: job specifications, counting kernels and the
//! modular arithmetic they share. Nothing here performs I/O or knows about the
//! async runtime, the network or the store; the coordinator and the worker call
//! into it.

pub mod blocks;
pub mod control;
pub mod error;
pub mod hex;
pub mod jobs;
pub mod kayles;
pub mod modular;
pub mod proto;
pub mod sliders;
pub mod spec;

pub use control::Control;
pub use error::{Error, Result};
