//! The counting algorithms of tally and the helpers they share.
//! Layer: the bottom; it imports no other tally crate. Pure, synchronous Rust:
//! no I/O, no async runtime, no wire format; a kernel takes its input and a
//! [`Control`] and returns a count.
//!
//! Modules, from the bottom up; a module imports only modules below it:
//! - `error`; then `control`, `varint`, `modular`, `balance`, `bitcode` and
//!   `cache`, which import nothing but `error`;
//! - `parallel` (on `control`), `spill` (on `varint`), `buckets` and `compact`
//!   (on `spill`);
//! - the kernels, which import no other kernel: `kayles` (on `modular`),
//!   `queens`, `hex` (on `modular`, `parallel`, `spill`, `cache`), and the
//!   frontier kernels `pegs`, `sliders` and `blocks` (on `buckets`, `spill`,
//!   `varint`; the first two on `cache` too), and `sweep` (a level of a
//!   user's sweep over keyed states, on `buckets`, `modular`, `varint`).
//!
//! All of tally's unsafe code lives here (vector intrinsics, buffers shared by
//! the threads of a sweep): every unsafe block and impl states why it is sound
//! in a `SAFETY` comment, every unsafe function its contract in a `# Safety`
//! section, and the lints below keep it so.

#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    clippy::unnecessary_safety_comment,
    clippy::unnecessary_safety_doc
)]

pub mod balance;
mod bitcode;
pub mod blocks;
pub mod buckets;
mod cache;
pub mod compact;
pub mod control;
pub mod error;
pub mod hex;
pub mod kayles;
pub mod modular;
pub mod parallel;
pub mod pegs;
pub mod queens;
pub mod sliders;
pub mod spill;
pub mod sweep;
pub mod varint;

#[doc(hidden)]
pub mod test_rng;

pub use control::Control;
pub use error::{Error, Result};
