//! Pure, synchronous core of tally: job kinds and their specifications, the
//! counting kernels and the modular arithmetic they share. Nothing here performs
//! I/O or knows about the async runtime, the network or the store; the
//! coordinator and the worker call into it (`transport` only checks and applies
//! credentials the callers read).
//!
//! Layers, from the bottom: the kernels (`hex`, `kayles`, `sliders`, `pegs`,
//! `blocks`, `queens`) and their helpers; `kind` (what a kind means to the
//! runner), `cache` and `values` (the encoded forms the runner holds);
//! `dynamic` (the runner's object-safe face of a kind); `kinds` (one file per
//! kind, and the registry); `spec` (job specs checked into a `ValidSpec`).

pub mod balance;
pub mod blocks;
pub mod buckets;
pub mod cache;
pub mod codec;
pub mod control;
pub mod digest;
pub mod dynamic;
pub mod error;
pub mod guest;
pub mod hex;
pub mod kayles;
pub mod kind;
pub mod kinds;
pub mod lease;
pub mod local;
pub mod metrics;
pub mod modular;
pub mod parallel;
pub mod pegs;
pub mod proto;
pub mod queens;
pub mod sliders;
pub mod spec;
pub mod transport;
pub mod values;
pub mod varint;
pub mod wire;

#[doc(hidden)]
pub mod test_rng;

pub use control::Control;
pub use error::{Error, Result};
