//! The job kinds: what each kind's spec, plan, shards and answer mean to the runner.
//! Layer: above the kernels and the wire, below the coordinator and the worker,
//! which know a kind only through [`dynamic::Kind`] and [`spec::ValidSpec`].
//!
//! `kind` is what a kind means to the runner ([`kind::JobKind`]); `dynamic` its
//! object-safe faces, `Kind` before a spec and `SpecOps` on a checked one;
//! one module per kind (`hex`, `kayles`, `sliders`, `pegs`, `blocks`,
//! `queens`, `wasm`, `synthetic`) beside the [`registry`]; `spec` checks job
//! specs into a `ValidSpec`; `cache`, `values`, `local` and `guest` are the
//! encoded forms and helpers the kinds share.

pub mod blocks;
pub mod cache;
pub mod dynamic;
pub mod guest;
pub mod hex;
pub mod kayles;
pub mod kind;
pub mod local;
pub mod pegs;
pub mod queens;
pub mod registry;
pub mod sliders;
pub mod spec;
pub mod synthetic;
pub mod values;
pub mod wasm;

pub use registry::{KINDS, lookup, names};
pub use tally_kernels::{Control, Error, Result, invalid};
