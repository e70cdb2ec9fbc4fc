//! The one list of job kinds. A kind is a module of this crate, over its kernel
//! in `tally-kernels`; adding a kind is writing that module and adding one line
//! to [`KINDS`] (and its message to the proto `oneof`).

use crate::dynamic::Kind;
use crate::{Result, invalid};
use crate::{blocks, hex, kayles, pegs, queens, sliders, synthetic, wasm, wasm_sweep};

/// Every kind, in the order the CLI lists them.
pub static KINDS: &[&dyn Kind] = &[
    &hex::Hex,
    &kayles::Kayles,
    &sliders::Sliders,
    &pegs::Pegs,
    &blocks::Blocks,
    &queens::Queens,
    &wasm::Wasm,
    &wasm_sweep::WasmSweep,
    &synthetic::Synthetic,
];

/// The kind named `name`.
pub fn lookup(name: &str) -> Result<&'static dyn Kind> {
    KINDS
        .iter()
        .copied()
        .find(|k| k.name() == name)
        .ok_or_else(|| {
            invalid!(
                "unknown job kind {name:?}: expected one of {}",
                names().join(", ")
            )
        })
}

/// The kinds' names, in registry order.
pub fn names() -> Vec<&'static str> {
    KINDS.iter().map(|k| k.name()).collect()
}
