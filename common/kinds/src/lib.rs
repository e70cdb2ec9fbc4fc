//! The job kinds: what each kind's spec, plan, shards and answer mean to the runner.
//! Layer: above the kernels and the wire (the only tally crates it imports),
//! below the stage store, the sandbox, the coordinator, the worker and the
//! binary. Outside their tests the last three name no kind module: they know a
//! kind only through the [`registry`], [`dynamic::Kind`], [`dynamic::SpecOps`]
//! and [`spec::ValidSpec`].
//!
//! The kind API, one generation of it:
//!
//! - `kind`: what a kind means to the runner, [`kind::JobKind`], written once
//!   per kind on its typed values (spec, plan, task, partial, stage input):
//!   the spec's forms (serde, the command line through [`kind::SpecArgs`],
//!   the proto), its checks, its small example job, the plan and its stages,
//!   the shards, the answer. The tests' fault injection is a trait of its own,
//!   [`kind::FaultInjection`], apart from the production trait.
//! - `dynamic`: the object-safe faces, derived from `JobKind` and never
//!   written by a kind: [`dynamic::Kind`] (before a spec: name, command line,
//!   proto, the check) is implemented by every kind's unit struct itself, and
//!   [`dynamic::SpecOps`] (what the runner does with a checked spec) by
//!   [`dynamic::Checked`], which holds the typed spec; both take and return
//!   encoded values.
//! - `spec`: [`spec::JobSpec`] as written, checked once into a
//!   [`spec::ValidSpec`], which dereferences to its `SpecOps`.
//! - one module per kind (`hex`, `kayles`, `sliders`, `pegs`, `blocks`,
//!   `queens`, `wasm`, `wasm_sweep`, `synthetic`) and the [`registry`], their one list:
//!   adding a kind is its module, its line there and its proto message.
//! - `cache`, `values`, `local` and `guest`: the encoded forms and helpers the
//!   kinds share.
//!
//! Modules, from the bottom up; a module imports only modules below it (and
//! the kernels' `Control`, `Error`, `Spill` and `Stored`, re-exported here):
//! `guest`, `values` and `exact`; `cache` (on `guest`); `kind` (on `cache`); `dynamic`
//! (on `kind`, `values`) and `local` (on `kind`); the kinds' modules (on
//! `kind` and `cache`; `hex` and `synthetic` on `local`, `wasm` and `wasm_sweep` on `guest`
//! and `exact`),
//! which import no other kind's module; `registry` (on the kinds' modules and
//! `dynamic`); `spec` (on `registry`, `dynamic`, `values`).

#![forbid(unsafe_code)]

pub mod blocks;
pub mod cache;
pub mod dynamic;
pub mod exact;
pub mod guest;
pub mod guest_args;
pub mod hex;
pub mod kayles;
pub mod kind;
pub mod local;
pub mod pegs;
pub mod queens;
pub mod registry;
pub mod sliders;
pub mod spec;
#[cfg(test)]
mod staged_tests;
pub mod synthetic;
pub mod values;
pub mod wasm;
pub mod wasm_sweep;

pub use registry::{KINDS, lookup, names};
pub use tally_kernels::spill::{MemorySpill, Room, Spill, StageOutput, Stored};
pub use tally_kernels::{Control, Error, Result, invalid};
