//! An example sweep module (the proposed kernel ABI version 2, see
//! `docs/design/keyed-sweeps.md`): the number of independent vertex sets of
//! the `m` x `n` grid graph (OEIS A006506 when square), row by row.
//!
//! Parameters: `n` (1..=22, required), the width; `m` (1..=4096, default
//! `n`), the rows.
//!
//! A state is the mask of the last row's vertices in the set (no two
//! adjacent ones), its key the mask as 4 little-endian bytes. The start
//! states are every such row, each counted once; a step adds a row, whose
//! mask must be disjoint from the last one. After `m - 1` steps every state
//! of the last level weighs 1: the answer is the sum of their counts.
//!
//! Build: `examples/wasm/build.sh`.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::vec::Vec;

use tally_guest::sweep::{Sweep, SweepEnd, SweepPlan};
use tally_guest::{KernelError, Params};

/// The widest grid: its rows number F(24) = 46,368, within the most
/// children a state may have.
const MAX_WIDTH: u64 = 22;
const MAX_ROWS: u64 = 4096;

pub struct IndependentRows {
    rows: u32,
    /// Every row mask with no two adjacent vertices, increasing.
    masks: Vec<u32>,
}

impl Sweep for IndependentRows {
    fn new(params: &Params<'_>) -> Result<Self, KernelError> {
        let width = params.get_u64("n")?;
        let rows = params.get_u64_or("m", width)?;
        if !(1..=MAX_WIDTH).contains(&width) || !(1..=MAX_ROWS).contains(&rows) {
            return Err(KernelError::BadParams(alloc::format!(
                "n must be 1 to {MAX_WIDTH} and m 1 to {MAX_ROWS}"
            )));
        }
        let masks = (0..1u32 << width).filter(|&s| s & s >> 1 == 0).collect();
        Ok(IndependentRows {
            rows: rows as u32,
            masks,
        })
    }

    fn plan(&self) -> SweepPlan {
        SweepPlan {
            key_limit: 4,
            outputs: 1,
            end: SweepEnd::Steps(self.rows - 1),
            most_children: self.masks.len(),
        }
    }

    fn starts(&self, emit: &mut dyn FnMut(&[u8], u64)) {
        for mask in &self.masks {
            emit(&mask.to_le_bytes(), 1);
        }
    }

    fn expand(
        &mut self,
        _step: u32,
        key: &[u8],
        emit: &mut dyn FnMut(&[u8], u64),
    ) -> Result<(), KernelError> {
        let last = u32::from_le_bytes(key.try_into().map_err(|_| KernelError::Failed)?);
        for &mask in self.masks.iter().filter(|&&mask| mask & last == 0) {
            emit(&mask.to_le_bytes(), 1);
        }
        Ok(())
    }
}

tally_guest::tally_sweep!(IndependentRows);

#[cfg(test)]
mod tests;
