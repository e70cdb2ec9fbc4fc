//! The counting algorithms of tally and the helpers they share.
//! Layer: the bottom. Pure, synchronous Rust: no I/O, no async runtime, no wire
//! format; a kernel takes its input and a [`Control`] and returns a count.

pub mod balance;
pub mod blocks;
pub mod buckets;
pub mod control;
pub mod error;
pub mod hex;
pub mod kayles;
pub mod modular;
pub mod parallel;
pub mod pegs;
pub mod queens;
pub mod sliders;
pub mod varint;

#[doc(hidden)]
pub mod test_rng;

pub use control::Control;
pub use error::{Error, Result};
