//! An example kernel for tally's `wasm` job kind: the number of ways to place
//! `n` non-attacking queens on an `n` x `n` board (OEIS A000170), modulo the
//! job's prime. One residue per shard (`--outputs 1`).
//!
//! Parameters:
//!
//! - `n` (0..=32, required): the board size;
//! - `depth` (0..=n, default `min(n, 3)`): how many rows a prefix places;
//! - `checkpoint_every` (default 16, 0 for never): prefixes between checkpoints.
//!
//! The placements of the first `depth` rows (the prefixes) are listed in a fixed
//! order and dealt round-robin: shard `i` of `S` completes prefixes `i`, `i + S`,
//! `i + 2S`, ... by bitmask backtracking, so the shards' residues add up to the
//! count. Between prefixes it reports progress, stops if cancelled, and now and
//! then saves its state: how many of its prefixes are done, and their count so
//! far.
//!
//! Build: `cargo build -p tally-example-queens --target wasm32-unknown-unknown --release`.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::vec::Vec;
use tally_guest::state::{decode_words, encode_words};
use tally_guest::{KernelError, Shard, add_mod, check_outputs};

tally_guest::tally_kernel!(count_shard);

/// The largest board the kernel takes.
pub const MAX_N: u64 = 32;
/// The prefix depth when `depth` is not given (capped at `n`).
pub const DEFAULT_DEPTH: u64 = 3;
/// Prefixes between checkpoints when `checkpoint_every` is not given.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 16;

/// Marks a saved state of this kernel (state format 1).
const STATE_TAG: u64 = u64::from_le_bytes(*b"queens\0\x01");

/// Queens on the rows placed so far, as column masks: the occupied columns, and
/// the columns the diagonals through them attack on the next row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rows {
    columns: u64,
    left: u64,
    right: u64,
}

impl Rows {
    const EMPTY: Rows = Rows {
        columns: 0,
        left: 0,
        right: 0,
    };

    /// The columns of the next row a queen may take.
    fn free(self, full: u64) -> u64 {
        full & !(self.columns | self.left | self.right)
    }

    /// The rows with a queen added on the next row, in column `bit`.
    fn place(self, bit: u64, full: u64) -> Rows {
        Rows {
            columns: self.columns | bit,
            left: ((self.left | bit) << 1) & full,
            right: (self.right | bit) >> 1,
        }
    }
}

/// Every placement of the first `depth` rows, in order of the column of the
/// first row, then of the second, ...
fn prefixes(full: u64, depth: u64) -> Vec<Rows> {
    fn extend(rows: Rows, left: u64, full: u64, found: &mut Vec<Rows>) {
        if left == 0 {
            found.push(rows);
            return;
        }
        let mut free = rows.free(full);
        while free != 0 {
            let bit = free & free.wrapping_neg();
            free ^= bit;
            extend(rows.place(bit, full), left - 1, full, found);
        }
    }
    let mut found = Vec::new();
    extend(Rows::EMPTY, depth, full, &mut found);
    found
}

/// The number of ways to complete `rows` to a full board, modulo `p`.
fn completions(rows: Rows, full: u64, p: u64) -> u64 {
    if rows.columns == full {
        return 1 % p;
    }
    // Depth first with a stack of its own rather than recursion: a call per
    // square tried costs a wasm function prologue; a loop does not. Each
    // level holds its rows and the squares still to try.
    let mut stack = [(Rows::EMPTY, 0u64); MAX_N as usize + 1];
    let mut depth = 0;
    stack[0] = (rows, rows.free(full));
    // Kept reduced modulo p: past n = 27 the count outgrows 64 bits.
    let mut count = 0u64;
    loop {
        let (rows, free) = stack[depth];
        if free == 0 {
            if depth == 0 {
                return count;
            }
            depth -= 1;
            continue;
        }
        let bit = free & free.wrapping_neg();
        stack[depth].1 = free ^ bit;
        let next = rows.place(bit, full);
        if next.columns == full {
            count = add_mod(count, 1 % p, p);
        } else {
            depth += 1;
            stack[depth] = (next, next.free(full));
        }
    }
}

/// The kernel: this shard's share of the n-queens count, modulo the prime.
pub fn count_shard(shard: &mut Shard<'_>, out: &mut [u64]) -> Result<usize, KernelError> {
    check_outputs(out, 1)?;
    let params = shard.params();
    let n = params.get_u64_in("n", 0..=MAX_N)?;
    let depth = params.get_u64_in_or("depth", 0..=n, n.min(DEFAULT_DEPTH))?;
    let checkpoint_every = params.get_u64_or("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)?;
    let p = shard.prime();

    let full = (1u64 << n) - 1;
    let prefixes = prefixes(full, depth);
    let total = shard.share_len(prefixes.len() as u64);
    let header = [STATE_TAG, n, depth, shard.index(), shard.count(), p];
    let save = |done: u64, count: u64| {
        let mut words = Vec::with_capacity(header.len() + 2);
        words.extend_from_slice(&header);
        words.extend_from_slice(&[done, count]);
        encode_words(&words)
    };

    // Resume from the saved state, if any: it must be this kernel's, for this
    // very shard of this job.
    let (mut done, mut count) = if shard.state().is_empty() {
        (0, 0)
    } else {
        match decode_words(shard.state()).as_deref() {
            Some([tag, n_, depth_, index, shards, prime, done, count])
                if [*tag, *n_, *depth_, *index, *shards, *prime] == header
                    && *done <= total
                    && *count < p =>
            {
                (*done, *count)
            }
            _ => return Err(KernelError::Failed),
        }
    };

    shard.progress(done, total);
    for prefix in shard.share(prefixes.len() as u64).skip(done as usize) {
        if shard.cancelled() {
            shard.checkpoint(&save(done, count));
            return Err(KernelError::Cancelled);
        }
        count = add_mod(count, completions(prefixes[prefix as usize], full, p), p);
        done += 1;
        shard.progress(done, total);
        if checkpoint_every != 0 && done.is_multiple_of(checkpoint_every) && done < total {
            shard.checkpoint(&save(done, count));
        }
    }
    out[0] = count;
    Ok(1)
}

#[cfg(test)]
mod tests;

/// The published counts (OEIS A000170), from n = 0: what the tests compare with.
pub const A000170: [u64; 15] = [
    1, 1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596,
];
