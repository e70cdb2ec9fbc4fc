//! One group of a points pass through the cell steps of one block: the
//! arithmetic on its lanes, the vector its threads share, and the step itself
//! (with AVX2 where the CPU has it).

use std::hint::select_unpredictable;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::graph::{Block, COUNT_MASK, Gather, OCCUPIED};
use super::kernel::Isa;
use super::tiles::Tiles;
use crate::Result;
use crate::spill::Scratch;

/// Arithmetic modulo `q < 2^31` on `NP` lanes, with multiplication by fixed
/// residues `x` (one per lane) through precomputed quotients (Shoup): no
/// division per product.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lanes<const NP: usize> {
    /// `[x, 1]`: the factor of a target whose decided cell is occupied, and of
    /// one whose cell is empty (multiplying by 1 avoids a branch).
    x: [[u32; NP]; 2],
    /// `floor(x * 2^32 / q)` for both.
    x_scaled: [[u32; NP]; 2],
    q: u32,
}

impl<const NP: usize> Lanes<NP> {
    pub(super) fn new(xs: [u32; NP], q: u32) -> Self {
        let scaled = |x: u32| ((u64::from(x) << 32) / u64::from(q)) as u32;
        Lanes {
            x: [xs, [1; NP]],
            x_scaled: [xs.map(scaled), [scaled(1); NP]],
            q,
        }
    }

    /// `s mod q` for `s < 2q`.
    #[inline(always)]
    fn reduce(&self, s: u32) -> u32 {
        s.min(s.wrapping_sub(self.q))
    }

    /// `r * x mod q` for any `r < 2^32`, with the factor `which` (0: `x`, 1: 1)
    /// of lane `k`.
    #[inline(always)]
    fn mul(&self, r: u32, which: usize, k: usize) -> u32 {
        let quotient = ((u64::from(r) * u64::from(self.x_scaled[which][k])) >> 32) as u32;
        // r x - quotient q lies in [0, 2q), which fits a u32 since q < 2^31.
        let t = r
            .wrapping_mul(self.x[which][k])
            .wrapping_sub(quotient.wrapping_mul(self.q));
        self.reduce(t)
    }
}

/// The vector of a pass, shared by its threads: in a round each thread
/// touches only the entries of the groups it took.
#[derive(Clone, Copy)]
pub(super) struct SharedVec<const NP: usize>(pub(super) *mut [u32; NP]);

impl<const NP: usize> SharedVec<NP> {
    /// The vector of `states` entries as `states * NP` residues.
    ///
    /// # Safety
    /// The pointer is to at least `states` initialised entries that outlive
    /// `'a`, and no one writes them while the slice lives.
    pub(super) unsafe fn residues<'a>(self, states: usize) -> &'a [u32] {
        // SAFETY: `[u32; NP]` is `NP` `u32`s in a row with the alignment of
        // `u32`, so `states` entries are `states * NP` residues; valid and
        // unwritten for `'a` as the caller guarantees.
        unsafe { std::slice::from_raw_parts(self.0 as *const u32, states * NP) }
    }

    /// The entries `range` of the vector.
    ///
    /// # Safety
    /// The pointer is to a vector with at least `range.end` entries that
    /// outlive `'a`, and no one writes these entries while the slice lives.
    unsafe fn entries<'a>(self, range: Range<usize>) -> &'a [[u32; NP]] {
        // SAFETY: as the caller guarantees.
        unsafe { std::slice::from_raw_parts(self.0.add(range.start), range.len()) }
    }

    /// The entries `range` of the vector, to write.
    ///
    /// # Safety
    /// The pointer is to a vector with at least `range.end` entries that
    /// outlive `'a`, and no one else reads or writes these entries while the
    /// slice lives.
    unsafe fn entries_mut<'a>(self, range: Range<usize>) -> &'a mut [[u32; NP]] {
        // SAFETY: as the caller guarantees.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(range.start), range.len()) }
    }
}

// SAFETY: a `SharedVec` is only a pointer; moving it to another thread touches
// no memory. The accesses through it are those of `HexGraph::pass`, whose
// comments show them free of data races.
unsafe impl<const NP: usize> Send for SharedVec<NP> {}
// SAFETY: `&SharedVec` only gives a copy of the pointer; as for `Send`.
unsafe impl<const NP: usize> Sync for SharedVec<NP> {}

/// The steps of one block for one group of a pass.
pub(super) struct GroupPass<'a, const NP: usize> {
    /// The block, or a copy of the group alone (see [`GroupCopy`]).
    pub(super) block: &'a Block,
    /// The vector's order.
    pub(super) tiles: &'a Tiles,
    /// The occupancy outside the block's columns that the group's states share.
    pub(super) key: usize,
    /// In the first block, where the group starts in the vector.
    pub(super) home_start: usize,
    /// Whether the block is the first of the row, whose groups are runs of the
    /// vector.
    pub(super) is_home: bool,
    pub(super) lanes: Lanes<NP>,
    /// `Some` when the explicit AVX2 step may run.
    pub(super) avx2: Option<Isa<true>>,
    pub(super) vector: PassVector<'a, NP>,
}

/// Where a pass keeps its vector: in memory, shared by its threads, or in
/// the caller's scratch (`NP` residues a state, in the machine's byte order:
/// the scratch is the pass's own), read and written a group at a time.
#[derive(Clone, Copy)]
pub(super) enum PassVector<'a, const NP: usize> {
    Memory(SharedVec<NP>),
    Scratch(&'a dyn Scratch),
}

/// Reads `into.len()` entries of a vector in scratch from entry `first` on.
fn read_entries<const NP: usize>(
    scratch: &dyn Scratch,
    first: usize,
    into: &mut [[u32; NP]],
) -> Result<()> {
    // SAFETY: `[u32; NP]` entries are `4 NP` bytes each with no padding, and
    // every byte pattern is a valid `u32`: the slice's memory as bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(into.as_mut_ptr() as *mut u8, std::mem::size_of_val(into))
    };
    scratch.read_at((first * 4 * NP) as u64, bytes)
}

/// Writes `from` to a vector in scratch from entry `first` on.
fn write_entries<const NP: usize>(
    scratch: &dyn Scratch,
    first: usize,
    from: &[[u32; NP]],
) -> Result<()> {
    // SAFETY: as in `read_entries`, for reading.
    let bytes = unsafe {
        std::slice::from_raw_parts(from.as_ptr() as *const u8, std::mem::size_of_val(from))
    };
    scratch.write_at((first * 4 * NP) as u64, bytes)
}

/// One group of a block copied out as a block of its own (one group, at
/// positions from 0), the form in which a pass reading its graph from a file
/// group by group holds it; the group's key gives its tiles (see [`Tiles`]).
#[derive(Default)]
pub(super) struct GroupCopy {
    pub(super) block: Block,
}

impl GroupCopy {
    /// Makes the copy's block group `g` alone of a block starting at column
    /// `first_col`, `width` columns wide, with these offsets (its columns
    /// left to the caller to fill); returns the group's positions.
    pub(super) fn begin(
        &mut self,
        first_col: usize,
        width: usize,
        group_offsets: &[u32],
        chunk_offsets: &[u32],
        g: usize,
    ) -> (usize, usize) {
        let (start, end) = (group_offsets[g] as usize, group_offsets[g + 1] as usize);
        let part = &mut self.block;
        part.first_col = first_col;
        part.max_group = end - start;
        part.group_offsets.clear();
        part.group_offsets.extend([0, (end - start) as u32]);
        part.chunk_offsets.clear();
        part.chunk_offsets.extend(
            chunk_offsets[g << width..=(g + 1) << width]
                .iter()
                .map(|&p| p - start as u32),
        );
        part.cols.resize_with(width, Default::default);
        (start, end)
    }

    /// Copies group `g` of `block`; returns the group's first position.
    pub(super) fn fill(&mut self, block: &Block, g: usize) -> usize {
        let width = block.cols.len();
        let (start, end) = self.begin(
            block.first_col,
            width,
            &block.group_offsets,
            &block.chunk_offsets,
            g,
        );
        let to_local = |p: &u32| p - start as u32;
        let part = &mut self.block;
        for (copy, col) in part.cols.iter_mut().zip(&block.cols) {
            let others = &col.others[col.offset(start)..col.offset(end)];
            copy.info.clear();
            copy.info.extend_from_slice(&col.info[start..end]);
            copy.others.clear();
            copy.others.extend(others.iter().map(to_local));
            copy.others.push(0);
            copy.set_marks();
        }
        start
    }
}

/// A group of a block of at least this many columns takes its steps in two
/// phases when its two buffers take more than [`SPLIT_BYTES`] bytes (about half
/// of a core's L2 cache; the tests lower it to cover both ways).
const SPLIT_WIDTH: usize = 4;
pub(crate) static SPLIT_BYTES: AtomicUsize = AtomicUsize::new(1 << 20);

impl<const NP: usize> GroupPass<'_, NP> {
    /// Carries group `g` through the block's steps, compiled for AVX2 when the
    /// CPU has it.
    ///
    /// # Safety
    /// The pass vector has `num_states` entries, valid for reads and writes,
    /// whose entries of the states of group `g` no one else accesses during
    /// the call.
    pub(super) unsafe fn run(&self, g: usize, local: &mut [Vec<[u32; NP]>; 2]) -> Result<()> {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.avx2 {
            // SAFETY: `isa` shows that the CPU has AVX2 and POPCNT, the
            // features of `run_avx2`; the vector as this function's caller
            // guarantees.
            return unsafe { self.run_avx2(isa, g, local) };
        }
        // SAFETY: the vector as this function's caller guarantees.
        unsafe { self.run_impl(g, local) }
    }

    /// [`GroupPass::run`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT (as `_isa` shows); the vector as for
    /// [`GroupPass::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn run_avx2(
        &self,
        _isa: Isa<true>,
        g: usize,
        local: &mut [Vec<[u32; NP]>; 2],
    ) -> Result<()> {
        // SAFETY: the vector as this function's caller guarantees.
        unsafe { self.run_impl(g, local) }
    }

    /// The group's values go through two buffers, one step after the other. In
    /// the first block of a vector in memory they start in the vector itself
    /// (the group is a contiguous part of it); elsewhere they are copied (or
    /// read) in and out.
    ///
    /// A wide block takes its steps in two phases, each made one sub-group at a
    /// time: the first columns only mix the states of runs of consecutive
    /// occupancy chunks, the last ones those of chunks a fixed stride apart. A
    /// sub-group is small enough to stay in the cache for all the steps of its
    /// phase, while the group as a whole is not.
    ///
    /// # Safety
    /// The vector as for [`GroupPass::run`].
    #[inline(always)]
    unsafe fn run_impl(&self, g: usize, local: &mut [Vec<[u32; NP]>; 2]) -> Result<()> {
        let block = self.block;
        let start = block.group_offsets[g] as usize;
        let end = block.group_offsets[g + 1] as usize;
        let len = end - start;
        let width = block.cols.len();
        let [a, b] = local;
        let chunks = &block.chunk_offsets[g << width..];
        // In the first block the group's entries are the run of `len` entries
        // at `home_start` of the vector, in the order of the block's positions;
        // elsewhere they are the tiles of the group's chunks (see `Tiles`).
        let run = self.home_start..self.home_start + len;
        let mut bufs: [&mut [[u32; NP]]; 2] = match (self.vector, self.is_home) {
            (PassVector::Memory(home), true) => {
                // SAFETY: the run lies inside the vector's `num_states`
                // entries; the caller leaves them to this call, and no other
                // reference to them is made below.
                [unsafe { home.entries_mut(run.clone()) }, &mut a[..len]]
            }
            (PassVector::Scratch(scratch), true) => {
                read_entries(scratch, run.start, &mut a[..len])?;
                [&mut a[..len], &mut b[..len]]
            }
            (vector, false) => {
                for (positions, tile) in self.tiles.group_tiles(block, chunks, self.key, start) {
                    match vector {
                        PassVector::Memory(home) => {
                            // SAFETY: the tiles of the group's chunks are the
                            // group's entries of the vector (inside its
                            // `num_states` entries, as long as the chunks),
                            // which the caller leaves to this call; the slice
                            // does not outlive this statement.
                            let entries = unsafe { home.entries(tile) };
                            a[positions].copy_from_slice(entries);
                        }
                        PassVector::Scratch(scratch) => {
                            read_entries(scratch, tile.start, &mut a[positions])?
                        }
                    }
                }
                [&mut a[..len], &mut b[..len]]
            }
        };
        let bytes = 2 * len * std::mem::size_of::<[u32; NP]>();
        // The first column of each phase, and the end.
        let split = width >= SPLIT_WIDTH && bytes > SPLIT_BYTES.load(Ordering::Relaxed);
        let bounds: &[usize] = if split {
            &[0, width / 2, width]
        } else {
            &[0, width]
        };
        let chunks = &block.chunk_offsets[g << width..];
        let range = |m: usize| chunks[m] as usize..chunks[m + 1] as usize;
        for phase in bounds.windows(2).map(|w| w[0]..w[1]) {
            // The chunks m of a sub-group: the same bits outside the phase.
            let (lo, span) = (phase.start, phase.len());
            for outside in 0..1usize << (width - span) {
                let low = outside & ((1 << lo) - 1);
                let high = (outside >> lo) << (lo + span);
                for j in phase.clone() {
                    let [src, dst] = &mut bufs;
                    let (src, dst): (&[[u32; NP]], &mut [[u32; NP]]) =
                        if j % 2 == 0 { (src, dst) } else { (dst, src) };
                    if lo == 0 {
                        // Consecutive chunks: one range of targets.
                        let first = range(high).start;
                        let last = range(high + (1 << span) - 1).end;
                        // SAFETY: the targets are chunks of group `g`, whose
                        // positions are `start..end`, and the sources of a
                        // target lie in its group (see `Gather`); `src` holds
                        // the `len = end - start` values of the group.
                        unsafe { self.step(j, start, first..last, src, dst) };
                    } else {
                        for m in 0..1usize << span {
                            let targets = range(high | m << lo | low);
                            // SAFETY: as for the consecutive chunks.
                            unsafe { self.step(j, start, targets, src, dst) };
                        }
                    }
                }
            }
        }
        let [first, second] = bufs;
        let result: &[[u32; NP]] = if width.is_multiple_of(2) {
            first
        } else {
            second
        };
        match (self.vector, self.is_home) {
            (PassVector::Memory(_), true) => {
                if width % 2 == 1 {
                    // The result is in the private buffer, and `first` is the
                    // group's part of the vector.
                    first.copy_from_slice(second);
                }
            }
            (PassVector::Scratch(scratch), true) => write_entries(scratch, run.start, result)?,
            (vector, false) => {
                for (positions, tile) in self.tiles.group_tiles(block, chunks, self.key, start) {
                    match vector {
                        PassVector::Memory(home) => {
                            // SAFETY: as for the reads above.
                            let entries = unsafe { home.entries_mut(tile) };
                            entries.copy_from_slice(&result[positions]);
                        }
                        PassVector::Scratch(scratch) => {
                            write_entries(scratch, tile.start, &result[positions])?
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Step `j` of the block for the targets `targets` of the group starting at
    /// position `start`, whose values are `src` (by position minus `start`).
    ///
    /// # Safety
    /// As for the free function [`step`].
    #[inline(always)]
    unsafe fn step(
        &self,
        j: usize,
        start: usize,
        targets: std::ops::Range<usize>,
        src: &[[u32; NP]],
        dst: &mut [[u32; NP]],
    ) {
        if targets.is_empty() {
            return;
        }
        // SAFETY: as this function's caller guarantees.
        unsafe {
            step(
                &self.block.cols[j],
                start,
                targets,
                src,
                dst,
                &self.lanes,
                self.avx2,
            )
        };
    }
}

/// One cell step for the targets `targets` of a group starting at position
/// `start`, whose values before the step are in `src` (by position minus
/// `start`; the sources of these targets all lie in the group): each target gets
/// the sum of its own value and those of its other sources, times `x` when its
/// decided cell is occupied; written to `dst` (by position minus `start`).
///
/// Most targets have no other source or one: the first other source is always
/// added (masked to zero when there is none) so that the loop has no
/// unpredictable branch. The sum of two residues is below 2^32, which the
/// multiplication accepts: it is only reduced before a third term. With
/// explicit AVX2 instructions when `avx2` is `Some` and `NP` is 8 or 16.
///
/// # Safety
/// Every other source of the targets lies in `start..start + src.len()`: the
/// AVX2 step reads the sources' values unchecked. (It holds when `src` holds a
/// whole group, see [`Gather`].)
#[inline(always)]
unsafe fn step<const NP: usize>(
    gather: &Gather,
    start: usize,
    targets: std::ops::Range<usize>,
    src: &[[u32; NP]],
    dst: &mut [[u32; NP]],
    lanes: &Lanes<NP>,
    avx2: Option<Isa<true>>,
) {
    let info = &gather.info[targets.clone()];
    let others = &gather.others[gather.offset(targets.start)..];
    let local = targets.start - start..targets.end - start;
    assert!(local.end <= src.len() && local.end <= dst.len());
    #[cfg(target_arch = "x86_64")]
    if avx2.is_some() && NP.is_multiple_of(8) {
        // SAFETY: `avx2` is an `Isa<true>`, so the CPU has AVX2 (see
        // `Isa::detect`). `info` is `info[targets]`, as long as `local`;
        // `local.end` fits `src` and `dst` (asserted); the other sources of the
        // targets lie in `start..start + src.len()`, as this function's caller
        // guarantees; and `others` starts at the first of them and runs to the
        // end of the list, whose padding entry follows the last of them.
        unsafe { avx2::step(info, others, start, local, src, dst, lanes) };
        return;
    }
    let _ = avx2;
    let mut at = 0;
    for (k, &byte) in local.zip(info) {
        let count = usize::from(byte & COUNT_MASK);
        let which = usize::from(byte & OCCUPIED == 0);
        // `others[at]` exists: the list ends with a padding entry.
        let has = count > 0;
        let first = select_unpredictable(has, (others[at] as usize).wrapping_sub(start), k);
        let mask = select_unpredictable(has, u32::MAX, 0);
        let (own, first) = (&src[k], &src[first]);
        let mut acc = [0u32; NP];
        for j in 0..NP {
            acc[j] = own[j] + (first[j] & mask);
        }
        if count > 1 {
            for &s in &others[at + 1..at + count] {
                let v = &src[s as usize - start];
                for j in 0..NP {
                    acc[j] = lanes.reduce(lanes.reduce(acc[j]) + v[j]);
                }
            }
        }
        at += count;
        let out = &mut dst[k];
        for j in 0..NP {
            out[j] = lanes.mul(acc[j], which, j);
        }
    }
}

/// The cell step with explicit AVX2 instructions, 8 lanes per register.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::hint::select_unpredictable;
    use std::ops::Range;

    use super::{COUNT_MASK, Lanes, OCCUPIED};

    /// `s mod q` for `s < 2q`.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn reduce(s: __m256i, q: __m256i) -> __m256i {
        _mm256_min_epu32(s, _mm256_sub_epi32(s, q))
    }

    /// See [`super::step`], for `NP` 8 or 16; `local` are the targets' positions
    /// minus `start`.
    ///
    /// # Safety
    /// The CPU has AVX2; `info` has `local.len()` entries; `local.end` is at
    /// most the length of `src` and of `dst`; `others` holds the other sources
    /// of the targets, target after target, and at least one more entry; every
    /// one of them, `s`, satisfies `start <= s < start + src.len()`. None of
    /// this is checked in release builds.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn step<const NP: usize>(
        info: &[u8],
        others: &[u32],
        start: usize,
        local: Range<usize>,
        src: &[[u32; NP]],
        dst: &mut [[u32; NP]],
        lanes: &Lanes<NP>,
    ) {
        // SAFETY: the unchecked accesses below, by the contract above:
        // - `lanes.x[0]` and `lanes.x_scaled[0]` hold `NP` residues, and the
        //   loads at `8 v` for `v < NP / 8` end at most at `NP`;
        // - `other` is at the first other source of target `k`, an offset of
        //   `others` at most the number of other sources of all the targets,
        //   below `others.len()`: `*other` and `*other.add(j)` for `j < count`
        //   read entries of `others`, and `other.add(count)` stays inside it;
        // - `own` and `out` are entry `k < local.end` of `src` and `dst`, and
        //   `theirs` is entry `k`, or entry `first = candidate - start` of
        //   `src` when the target has another source `candidate`, as is every
        //   `s` of a further source: all below `src.len()`;
        // - `src` and `dst` do not overlap (`dst` is borrowed mutably).
        unsafe {
            let q = _mm256_set1_epi32(lanes.q as i32);
            let load = |p: *const u32| _mm256_loadu_si256(p as *const __m256i);
            let mut x = [_mm256_setzero_si256(); 2];
            let mut scaled = [_mm256_setzero_si256(); 2];
            let mut scaled_odd = [_mm256_setzero_si256(); 2];
            for v in 0..NP / 8 {
                x[v] = load(lanes.x[0].as_ptr().add(8 * v));
                scaled[v] = load(lanes.x_scaled[0].as_ptr().add(8 * v));
                scaled_odd[v] = _mm256_srli_epi64::<32>(scaled[v]);
            }
            let src_ptr = src.as_ptr() as *const u32;
            let dst_ptr = dst.as_mut_ptr() as *mut u32;
            let mut other = others.as_ptr();
            debug_assert!(info.len() == local.len() && NP <= 16);
            debug_assert!(local.end <= src.len() && local.end <= dst.len());
            for (k, &byte) in local.zip(info) {
                let count = usize::from(byte & COUNT_MASK);
                let candidate = *other as usize;
                let has = count != 0;
                // A conditional move, not a branch: whether a target has another
                // source is hard to predict.
                let first = select_unpredictable(has, candidate.wrapping_sub(start), k);
                debug_assert!(first < src.len());
                let mask = _mm256_set1_epi32(-i32::from(has));
                let own = src_ptr.add(k * NP);
                let theirs = src_ptr.add(first * NP);
                let out = dst_ptr.add(k * NP);
                // The occupancy of the decided cell, unlike the sources, comes in
                // long runs (positions are ordered by occupancy pattern): a branch
                // that skips the multiplication for empty cells is well predicted.
                let occupied = byte & OCCUPIED != 0;
                for v in 0..NP / 8 {
                    let mut acc = _mm256_add_epi32(
                        load(own.add(8 * v)),
                        _mm256_and_si256(load(theirs.add(8 * v)), mask),
                    );
                    if count > 1 {
                        for j in 1..count {
                            let s = *other.add(j) as usize - start;
                            debug_assert!(s < src.len());
                            let value = load(src_ptr.add(s * NP + 8 * v));
                            acc = reduce(_mm256_add_epi32(reduce(acc, q), value), q);
                        }
                    }
                    let value = if occupied {
                        // Shoup: r x - floor(r floor(x 2^32 / q) / 2^32) q, in [0, 2q).
                        let even = _mm256_mul_epu32(acc, scaled[v]);
                        let odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(acc), scaled_odd[v]);
                        let quotient =
                            _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
                        let t = _mm256_sub_epi32(
                            _mm256_mullo_epi32(acc, x[v]),
                            _mm256_mullo_epi32(quotient, q),
                        );
                        reduce(t, q)
                    } else {
                        reduce(acc, q)
                    };
                    _mm256_storeu_si256(out.add(8 * v) as *mut __m256i, value);
                }
                other = other.add(count);
            }
        }
    }
}
