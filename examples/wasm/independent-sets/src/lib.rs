//! An example kernel for tally's `wasm` job kind: the number of independent
//! vertex sets of the `n` x `n` grid graph (OEIS A006506), modulo the job's
//! prime. One residue per shard (`--outputs 1`).
//!
//! Parameters:
//!
//! - `n` (0..=24, required): the grid size;
//! - `checkpoint_every` (default 1, 0 for never): row steps between checkpoints.
//!
//! A row of the set is a mask of `n` bits with no two adjacent ones (a row
//! state); two rows may be neighbours when their masks are disjoint. With
//! `f_k[s]` the number of sets on `k + 1` rows whose last row is `s`,
//! `f_{k+1}[s]` is the sum of `f_k[t]` over the states `t` inside the
//! complement of `s`, which one subset-sum transform over all `2^n` masks gives
//! for every `s` at once (`n * 2^(n-1)` additions per row).
//!
//! Shards split the count by the state `s` of the middle row `m = n / 2`: the
//! sets with middle row `s` number `f_m[s] * f_{n-1-m}[s]` (the rows above and
//! including it, and those below and including it, read upwards), and shard `i`
//! of `S` adds up the row states `i`, `i + S`, ... in increasing mask order.
//! Each shard computes `f_m` (and `f_{n-1-m}` on the way), about half the work
//! of the whole count. Between row steps it reports progress, stops if
//! cancelled, and saves its vectors.
//!
//! Memory: `8 * 2^n` bytes for the transform (128 MiB at `n = 24`) and a few
//! vectors of one word per row state. Time: about `n^2 * 2^n / 4` additions.
//!
//! Build: `cargo build -p tally-example-independent-sets --target wasm32-unknown-unknown --release`.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use tally_guest::state::{decode_words, encode_words};
use tally_guest::{KernelError, Shard, add_mod, check_outputs, mul_mod};

tally_guest::tally_kernel!(count_shard);

/// The largest grid the kernel takes.
pub const MAX_N: u64 = 24;
/// Row steps between checkpoints when `checkpoint_every` is not given.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 1;

/// Marks a saved state of this kernel (state format 1).
const STATE_TAG: u64 = u64::from_le_bytes(*b"indsets\x01");
/// The words before the vectors in a saved state.
const HEADER_LEN: usize = 6;

/// The masks of `n` bits with no two adjacent ones, in increasing order.
fn row_states(n: u32) -> Vec<u32> {
    (0..1u32 << n)
        .filter(|mask| mask & (mask >> 1) == 0)
        .collect()
}

/// One row down: `f[i]` becomes the sum of `f[j]` over the states `j` whose
/// mask is disjoint from that of state `i`. `sums` is scratch space of `2^n`
/// words.
fn step(states: &[u32], f: &mut [u64], sums: &mut [u64], p: u64) {
    sums.fill(0);
    for (&state, &value) in states.iter().zip(f.iter()) {
        sums[state as usize] = value;
    }
    // Subset sums: afterwards `sums[mask]` is the sum over the states inside
    // `mask`.
    let mut half = 1;
    while half < sums.len() {
        for block in sums.chunks_exact_mut(2 * half) {
            let (without, with) = block.split_at_mut(half);
            for (high, &low) in with.iter_mut().zip(without.iter()) {
                *high = add_mod(*high, low, p);
            }
        }
        half *= 2;
    }
    let full = sums.len() - 1;
    for (&state, value) in states.iter().zip(f.iter_mut()) {
        *value = sums[full ^ state as usize];
    }
}

/// The kernel: this shard's share of the count, modulo the prime.
pub fn count_shard(shard: &mut Shard<'_>, out: &mut [u64]) -> Result<usize, KernelError> {
    check_outputs(out, 1)?;
    let params = shard.params();
    let n = params.get_u64_in("n", 0..=MAX_N)?;
    let checkpoint_every = params.get_u64_or("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)?;
    let p = shard.prime();

    let states = row_states(n as u32);
    let t = states.len();
    let middle = n / 2;
    // `f_{below}` counts the rows below the middle one and itself.
    let below = (n - middle).saturating_sub(1);
    let total = middle + 1;
    let header = [STATE_TAG, n, shard.index(), shard.count(), p];

    // `f` is `f_steps`; `g` is `f_below` once `steps >= below`.
    let (mut steps, mut f, mut g) = if shard.state().is_empty() {
        let ones = vec![1 % p; t];
        let g = (below == 0).then(|| ones.clone());
        (0, ones, g)
    } else {
        let words = decode_words(shard.state()).ok_or(KernelError::Failed)?;
        let (saved_header, vectors) = words
            .split_at_checked(HEADER_LEN)
            .ok_or(KernelError::Failed)?;
        let steps = saved_header[HEADER_LEN - 1];
        let expected_len = if steps >= below { 2 * t } else { t };
        if saved_header[..HEADER_LEN - 1] != header
            || steps > middle
            || vectors.len() != expected_len
            || vectors.iter().any(|&word| word >= p)
        {
            return Err(KernelError::Failed);
        }
        let (f, g) = vectors.split_at(t);
        (steps, f.to_vec(), (steps >= below).then(|| g.to_vec()))
    };
    let save = |steps: u64, f: &[u64], g: Option<&[u64]>| {
        let mut words = Vec::with_capacity(HEADER_LEN + 2 * t);
        words.extend_from_slice(&header);
        words.push(steps);
        words.extend_from_slice(f);
        words.extend_from_slice(g.unwrap_or(&[]));
        encode_words(&words)
    };

    let mut sums = vec![0u64; 1 << n];
    shard.progress(steps, total);
    while steps < middle {
        if shard.cancelled() {
            shard.checkpoint(&save(steps, &f, g.as_deref()));
            return Err(KernelError::Cancelled);
        }
        step(&states, &mut f, &mut sums, p);
        steps += 1;
        if steps == below {
            g = Some(f.clone());
        }
        shard.progress(steps, total);
        if checkpoint_every != 0 && steps.is_multiple_of(checkpoint_every) && steps < middle {
            shard.checkpoint(&save(steps, &f, g.as_deref()));
        }
    }
    // `below <= middle`, so `g` is there by now.
    let g = g.ok_or(KernelError::Failed)?;
    out[0] = shard.share(t as u64).fold(0, |sum, i| {
        add_mod(sum, mul_mod(f[i as usize], g[i as usize], p), p)
    });
    shard.progress(total, total);
    Ok(1)
}

#[cfg(test)]
mod tests;

/// The published counts (OEIS A006506), from n = 0: what the tests compare with.
pub const A006506: [u128; 12] = [
    1,
    2,
    7,
    63,
    1234,
    55447,
    5598861,
    1280128950,
    660647962955,
    770548397261707,
    2030049051145980050,
    12083401651433651945979,
];
