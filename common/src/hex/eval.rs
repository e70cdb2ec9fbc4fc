//! The untruncated scalar sweep of the `points` plan: `sum_k C_k x^k mod p` for up
//! to [`POINTS_PER_PASS`] numbers `x` at once, one residue per state and point.
//!
//! A pass keeps one vector of `num_states` entries (one residue per point), in
//! the order of the graph's first block. The cell steps are made a block of
//! columns at a time, like [`HexGraph::sweep`]: the states of a group (closed under
//! the block's steps) are copied into a private buffer, carried through the
//! block's steps there, and written back to the same entries. Groups are disjoint,
//! so the vector is updated in place and threads may share one pass.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::HexGraph;
use super::graph::{Block, COUNT_MASK, Gather, OCCUPIED};
use super::kernel::has_avx2;
use crate::modular::pow_mod;
use crate::{Control, Error, Result};

/// Points swept together by one pass (64 bytes per state: one cache line).
pub const POINTS_PER_PASS: usize = 16;

/// Arithmetic modulo `q < 2^31` on `NP` lanes, with multiplication by fixed
/// residues `x` (one per lane) through precomputed quotients (Shoup): no
/// division per product.
#[derive(Debug, Clone, Copy)]
struct Lanes<const NP: usize> {
    /// `[x, 1]`: the factor of a target whose decided cell is occupied, and of
    /// one whose cell is empty (multiplying by 1 avoids a branch).
    x: [[u32; NP]; 2],
    /// `floor(x * 2^32 / q)` for both.
    x_scaled: [[u32; NP]; 2],
    q: u32,
}

impl<const NP: usize> Lanes<NP> {
    fn new(xs: [u32; NP], q: u32) -> Self {
        let scaled = |x: u32| ((u64::from(x) << 32) / u64::from(q)) as u32;
        Lanes {
            x: [xs, [1; NP]],
            x_scaled: [xs.map(scaled), [scaled(1); NP]],
            q,
        }
    }

    /// `a = a + (b & mask) mod q`.
    #[inline(always)]
    fn add_masked(&self, a: &mut [u32; NP], b: &[u32; NP], mask: u32) {
        for k in 0..NP {
            let s = a[k] + (b[k] & mask);
            a[k] = s.min(s.wrapping_sub(self.q));
        }
    }

    /// `a = a * x mod q` lane by lane, with the factors `which` (0: `x`, 1: 1).
    #[inline(always)]
    fn mul(&self, a: &mut [u32; NP], which: usize) {
        let (x, x_scaled) = (&self.x[which], &self.x_scaled[which]);
        for k in 0..NP {
            let r = a[k];
            let quotient = ((u64::from(r) * u64::from(x_scaled[k])) >> 32) as u32;
            // r x - quotient q lies in [0, 2q), which fits a u32 since q < 2^31.
            let t = r
                .wrapping_mul(x[k])
                .wrapping_sub(quotient.wrapping_mul(self.q));
            a[k] = t.min(t.wrapping_sub(self.q));
        }
    }
}

/// The vector of a pass, shared by its threads.
#[derive(Clone, Copy)]
struct SharedVec<const NP: usize>(*mut [u32; NP]);

// SAFETY: the pointer is only dereferenced under the protocol of `HexGraph::pass`:
// a thread only touches the entries of the groups it claimed, and the threads
// meet at a barrier between blocks of steps.
unsafe impl<const NP: usize> Send for SharedVec<NP> {}
unsafe impl<const NP: usize> Sync for SharedVec<NP> {}

impl HexGraph {
    /// `sum_{k=0}^{M} C_k x^k mod modulus`: the sweep with the number `x` in place
    /// of the variable and without truncation.
    pub fn evaluate_crossings(&self, x: u32, modulus: u32) -> u32 {
        self.evaluate_points(&[x], modulus)[0]
    }

    /// [`HexGraph::evaluate_crossings`] at several points, on the calling thread:
    /// the values in the order of `xs`. Points are swept together in passes of up
    /// to [`POINTS_PER_PASS`]; a pass holds `num_states` entries of 4 bytes per
    /// point (rounded up to a power of two), see [`HexGraph::pass_bytes`].
    ///
    /// `modulus` must be in `2..2^31` (see [`super::validate`]).
    pub fn evaluate_points(&self, xs: &[u32], modulus: u32) -> Vec<u32> {
        self.evaluate_points_with(xs, modulus, 1, &Control::new())
            .expect("a pass without cancellation does not fail")
    }

    /// [`HexGraph::evaluate_points`] with each pass shared by up to `threads`
    /// threads (the result does not depend on their number). [`Control::check`]
    /// is polled after every block of cell steps; no work units are added.
    pub fn evaluate_points_with(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
    ) -> Result<Vec<u32>> {
        assert!(
            modulus > 1 && modulus < 1 << 31,
            "modulus must be in 2..2^31"
        );
        control.check()?;
        let mut values = Vec::with_capacity(xs.len());
        for batch in xs.chunks(POINTS_PER_PASS) {
            let len = batch.len();
            match len.next_power_of_two() {
                1 => values.extend(self.pass::<1>(batch, modulus, threads, control)?),
                2 => values.extend(self.pass::<2>(batch, modulus, threads, control)?),
                4 => values.extend(&self.pass::<4>(batch, modulus, threads, control)?[..len]),
                8 => values.extend(&self.pass::<8>(batch, modulus, threads, control)?[..len]),
                _ => values.extend(&self.pass::<16>(batch, modulus, threads, control)?[..len]),
            }
        }
        Ok(values)
    }

    /// Bytes of the vector of one pass of `points` points (the private buffers
    /// of its threads add `2 * largest group * 4 * points` bytes each).
    pub fn pass_bytes(&self, points: usize) -> usize {
        self.num_states() * 4 * points.clamp(1, POINTS_PER_PASS).next_power_of_two()
    }

    /// One pass at up to `NP` points (missing points are 0).
    fn pass<const NP: usize>(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
    ) -> Result<[u32; NP]> {
        let q = u64::from(modulus);
        let mut x = [0u32; NP];
        for (slot, &v) in x.iter_mut().zip(xs) {
            *slot = v % modulus;
        }
        let lanes = Lanes::new(x, modulus);
        // The vector after the top row, in the order of block 0: x^(occupied
        // cells) at the top-row states (the states with labels 0 and 1 only).
        let home_block = &self.blocks[0];
        let mut home = vec![[0u32; NP]; self.num_states()];
        for (i, &m) in self.masks.iter().enumerate() {
            if m >> 16 == m & 0xFFFF {
                let degree = u64::from((m & 0xFFFF).count_ones());
                home[home_block.position[i] as usize] =
                    x.map(|v| pow_mod(u64::from(v), degree, q) as u32);
            }
        }
        let stages = self.stages();
        let max_group = self.blocks.iter().map(|b| b.max_group).max().unwrap_or(0);
        let groups_total: usize = stages.iter().map(|s| self.blocks[s.block].groups()).sum();
        let threads = threads.clamp(1, (groups_total / stages.len().max(1)).max(1));
        let shared = SharedVec(home.as_mut_ptr());
        let claimed: Vec<AtomicUsize> = stages.iter().map(|_| AtomicUsize::new(0)).collect();
        let barrier = Barrier::new(threads);
        let stop = AtomicBool::new(false);
        let avx2 = has_avx2();
        let work = || {
            let mut local = [vec![[0u32; NP]; max_group], vec![[0u32; NP]; max_group]];
            for (i, stage) in stages.iter().enumerate() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let run = GroupPass {
                    block: &self.blocks[stage.block],
                    home_block,
                    is_home: stage.block == 0,
                    lanes,
                };
                loop {
                    let g = claimed[i].fetch_add(1, Ordering::Relaxed);
                    if g >= run.block.groups() {
                        break;
                    }
                    // SAFETY: group `g` was claimed by this thread alone, and its
                    // entries of the vector belong to no other group of the block;
                    // AVX2 only where the CPU has it.
                    unsafe { run.run(avx2, g, shared, &mut local) };
                }
                if threads > 1 && barrier.wait().is_leader() && control.is_cancelled() {
                    stop.store(true, Ordering::Relaxed);
                }
                if threads == 1 && control.is_cancelled() {
                    stop.store(true, Ordering::Relaxed);
                }
                if threads > 1 {
                    barrier.wait();
                }
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Cancelled);
        }
        control.check()?;
        let mut sums = [0u64; NP];
        for value in &home {
            for k in 0..NP {
                sums[k] += u64::from(value[k]);
            }
        }
        Ok(sums.map(|s| (s % q) as u32))
    }
}

/// The steps of one block for one group of a pass.
struct GroupPass<'a, const NP: usize> {
    block: &'a Block,
    /// The block whose order the vector is in.
    home_block: &'a Block,
    is_home: bool,
    lanes: Lanes<NP>,
}

impl<const NP: usize> GroupPass<'_, NP> {
    /// Carries group `g` through the block's steps.
    ///
    /// # Safety
    /// `home` points to the pass vector, whose entries of group `g` no one else
    /// accesses during the call; `avx2` only if the CPU supports AVX2.
    unsafe fn run(
        &self,
        avx2: bool,
        g: usize,
        home: SharedVec<NP>,
        local: &mut [Vec<[u32; NP]>; 2],
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if avx2 {
                // SAFETY: forwarded from the caller.
                return unsafe { self.run_avx2(g, home, local) };
            }
        }
        let _ = avx2;
        // SAFETY: forwarded from the caller.
        unsafe { self.run_impl(g, home, local) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn run_avx2(&self, g: usize, home: SharedVec<NP>, local: &mut [Vec<[u32; NP]>; 2]) {
        // SAFETY: forwarded from the caller.
        unsafe { self.run_impl(g, home, local) }
    }

    #[inline(always)]
    unsafe fn run_impl(&self, g: usize, home: SharedVec<NP>, local: &mut [Vec<[u32; NP]>; 2]) {
        let block = self.block;
        let start = block.group_offsets[g] as usize;
        let end = block.group_offsets[g + 1] as usize;
        let len = end - start;
        // Where the entry of each position of the group lives in the vector.
        let at = |pos: usize| -> usize {
            if self.is_home {
                pos
            } else {
                self.home_block.position[block.members[pos] as usize] as usize
            }
        };
        let [a, b] = local;
        let (mut src, mut dst) = (&mut a[..len], &mut b[..len]);
        for (k, value) in src.iter_mut().enumerate() {
            // SAFETY: the entry belongs to this group (see the caller's contract).
            *value = unsafe { *home.0.add(at(start + k)) };
        }
        for gather in &block.cols {
            step(gather, start, src, dst, &self.lanes);
            std::mem::swap(&mut src, &mut dst);
        }
        for (k, value) in src.iter().enumerate() {
            // SAFETY: as above.
            unsafe { *home.0.add(at(start + k)) = *value };
        }
    }
}

/// One cell step for the targets `start..start + src.len()` of a group, whose
/// values before the step are in `src` (by position minus `start`).
///
/// Most targets have no other source or one: the first other source is always
/// added (masked to zero when there is none) and every target is multiplied (by
/// 1 when its cell is empty), so that the loop has no unpredictable branch.
#[inline(always)]
fn step<const NP: usize>(
    gather: &Gather,
    start: usize,
    src: &[[u32; NP]],
    dst: &mut [[u32; NP]],
    lanes: &Lanes<NP>,
) {
    let end = start + src.len();
    let info = &gather.info[start..end];
    let others = &gather.others[gather.offset(start)..];
    let mut at = 0;
    for (k, (out, &byte)) in dst.iter_mut().zip(info).enumerate() {
        let count = usize::from(byte & COUNT_MASK);
        let mut acc = src[k];
        // The first other source, or the target itself, masked out.
        let (first, mask) = match others.get(at) {
            Some(&s) if count > 0 => (s as usize - start, u32::MAX),
            _ => (k, 0),
        };
        lanes.add_masked(&mut acc, &src[first], mask);
        for &s in others.get(at + 1..at + count).unwrap_or(&[]) {
            lanes.add_masked(&mut acc, &src[s as usize - start], u32::MAX);
        }
        at += count;
        lanes.mul(&mut acc, usize::from(byte & OCCUPIED == 0));
        *out = acc;
    }
}
