//! The untruncated scalar sweep of the `points` plan: `sum_k C_k x^k mod p` for up
//! to [`POINTS_PER_PASS`] numbers `x` at once, one residue per state and point.
//!
//! A pass keeps one vector of `num_states` entries (one residue per point, 64
//! bytes for 16 points), in the order of the graph's first block (the "home"
//! block). The cell steps are made a block of columns at a time, like
//! [`HexGraph::sweep`]: each group of states (closed under the block's steps) is
//! carried through all of them in two buffers, and its entries of the vector are
//! overwritten with the result. Groups are disjoint, so the vector is updated in
//! place and threads may share one pass. In the home block a group is a
//! contiguous part of the vector and serves as one of the two buffers; in the
//! other block it is gathered from runs of the vector (states of one occupancy
//! pattern are contiguous in every block's order) and scattered back.
//!
//! Speed: every target is its own source, and most have one other source or
//! none; the loop adds the first other source under a mask instead of
//! branching on it, and multiplies by `x` (Shoup's method: two 32-bit products
//! per lane, no division) only the targets whose decided cell is occupied, which
//! come in long runs. With AVX2 the 16 residues of a state are two registers.

use std::hint::select_unpredictable;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::HexGraph;
use super::graph::{Block, COUNT_MASK, Gather, OCCUPIED};
use super::kernel::Isa;
use super::tiles::Tiles;
use crate::modular::pow_mod;
use crate::parallel::in_rounds;
use crate::{Control, Result};

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
struct SharedVec<const NP: usize>(*mut [u32; NP]);

impl<const NP: usize> SharedVec<NP> {
    /// The vector of `states` entries as `states * NP` residues.
    ///
    /// # Safety
    /// The pointer is to at least `states` initialised entries that outlive
    /// `'a`, and no one writes them while the slice lives.
    unsafe fn residues<'a>(self, states: usize) -> &'a [u32] {
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
        let mut values = Vec::with_capacity(xs.len());
        for batch in xs.chunks(POINTS_PER_PASS) {
            values.extend(self.evaluate_pass(batch, modulus, threads, control, None, &|_| {})?);
        }
        Ok(values)
    }

    /// One pass at up to [`POINTS_PER_PASS`] points (the values in the order
    /// of `xs`) that can stop and resume between blocks of cell steps: after
    /// each block but the last, while no thread writes the vector, it shows
    /// `after_round` where it stands; given such a [`PassPoint`]'s rounds and
    /// vector (as little-endian bytes) as `resume`, it carries on from there
    /// to the same values.
    pub fn evaluate_pass(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
        resume: Option<(usize, &[u8])>,
        after_round: &(dyn Fn(PassPoint<'_>) + Sync),
    ) -> Result<Vec<u32>> {
        assert!(
            modulus > 1 && modulus < 1 << 31,
            "modulus must be in 2..2^31"
        );
        assert!(
            !xs.is_empty() && xs.len() <= POINTS_PER_PASS,
            "a pass takes 1 to {POINTS_PER_PASS} points"
        );
        control.check()?;
        let pass = PassArgs {
            xs,
            modulus,
            threads,
            control,
            resume,
            after_round,
            group_copies: false,
        };
        self.pass_with(pass)
    }

    /// [`HexGraph::evaluate_pass`] (without resume) where each group's part
    /// of the graph is copied out before its steps, as a pass reading its
    /// graph group by group from a file would: the same values, at the cost
    /// of the copies. For measuring that route (`hex_streamed_pass_cost`).
    #[cfg(test)]
    pub(crate) fn evaluate_pass_group_copies(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
    ) -> Result<Vec<u32>> {
        let pass = PassArgs {
            xs,
            modulus,
            threads,
            control: &Control::new(),
            resume: None,
            after_round: &|_| {},
            group_copies: true,
        };
        self.pass_with(pass)
    }

    fn pass_with(&self, pass: PassArgs<'_>) -> Result<Vec<u32>> {
        let len = pass.xs.len();
        Ok(match len.next_power_of_two() {
            1 => self.pass::<1>(pass)?.to_vec(),
            2 => self.pass::<2>(pass)?.to_vec(),
            4 => self.pass::<4>(pass)?[..len].to_vec(),
            8 => self.pass::<8>(pass)?[..len].to_vec(),
            _ => self.pass::<16>(pass)?[..len].to_vec(),
        })
    }

    /// The rounds of a pass: one per block of cell steps.
    pub fn pass_rounds(&self) -> usize {
        self.stages().len()
    }

    /// Bytes of the vector of one pass of `points` points (the private buffers
    /// of its threads add `2 * largest group * 4 * points` bytes each).
    pub fn pass_bytes(&self, points: usize) -> usize {
        self.num_states() * 4 * points.clamp(1, POINTS_PER_PASS).next_power_of_two()
    }

    /// One pass at up to `NP` points (missing points are 0).
    fn pass<const NP: usize>(&self, args: PassArgs<'_>) -> Result<[u32; NP]> {
        let PassArgs {
            xs,
            modulus,
            threads,
            control,
            resume,
            after_round,
            group_copies,
        } = args;
        let q = u64::from(modulus);
        let mut x = [0u32; NP];
        for (slot, &v) in x.iter_mut().zip(xs) {
            *slot = v % modulus;
        }
        let lanes = Lanes::new(x, modulus);
        let home_block = &self.blocks[0];
        let tiles = &Tiles::new(self);
        // The first block's groups as runs of the vector, in the order of the
        // block's positions: the order of a checkpoint's vector.
        let home_runs: Vec<Range<usize>> = (0..home_block.groups())
            .map(|g| tiles.first_block_group(home_block, g))
            .collect();
        let home_runs = &home_runs;
        let stages = &self.stages();
        let (first_round, mut home) = match resume {
            Some((done, vector)) => {
                if done >= stages.len() || vector.len() != self.num_states() * NP * 4 {
                    return Err(crate::Error::InvalidArgument(format!(
                        "a pass of this graph resumes after 0 to {} rounds from {} bytes, \
                         not after {done} from {}",
                        stages.len() - 1,
                        self.num_states() * NP * 4,
                        vector.len()
                    )));
                }
                let mut home = vec![[0u32; NP]; self.num_states()];
                let mut states = vector.chunks_exact(NP * 4).map(|state| {
                    std::array::from_fn(|k| {
                        let at = 4 * k;
                        u32::from_le_bytes(state[at..at + 4].try_into().expect("4 bytes"))
                    })
                });
                for run in home_runs {
                    for (slot, value) in home[run.clone()].iter_mut().zip(&mut states) {
                        *slot = value;
                    }
                }
                (done, home)
            }
            None => {
                // The vector after the top row: x^(occupied cells) at the
                // top-row states (the states with labels 0 and 1 only).
                let mut home = vec![[0u32; NP]; self.num_states()];
                let first_positions = home_block.group_offsets.iter().map(|&p| p as usize);
                for (run, first) in home_runs.iter().zip(first_positions) {
                    let members = &home_block.members[first..first + run.len()];
                    for (slot, &i) in home[run.clone()].iter_mut().zip(members) {
                        if let Some(degree) = super::graph::top_row_degree(self.masks[i as usize]) {
                            let degree = u64::from(degree);
                            *slot = x.map(|v| pow_mod(u64::from(v), degree, q) as u32);
                        }
                    }
                }
                (0, home)
            }
        };
        let groups: Vec<usize> = stages
            .iter()
            .map(|s| self.blocks[s.block].groups())
            .collect();
        // The rounds done before a resume are skipped: no items.
        let to_do: Vec<usize> = groups
            .iter()
            .enumerate()
            .map(|(round, &g)| if round < first_round { 0 } else { g })
            .collect();
        let max_group = self.blocks.iter().map(|b| b.max_group).max().unwrap_or(0);
        let groups_total: usize = groups.iter().sum();
        let threads = threads.clamp(1, (groups_total / stages.len().max(1)).max(1));
        let shared = SharedVec(home.as_mut_ptr());
        let avx2 = Isa::detect();
        // Round i is stage i; its items are the groups of the stage's block.
        let worker = || {
            let mut local = [vec![[0u32; NP]; max_group], vec![[0u32; NP]; max_group]];
            let mut copy = GroupCopy::default();
            move |i: usize, g: usize| {
                let block = stages[i].block;
                let key = tiles.key(block, g);
                let home_start = match block {
                    0 => home_runs[g].start,
                    _ => 0,
                };
                let (part, g) = match group_copies {
                    true => {
                        copy.fill(&self.blocks[block], g);
                        (&copy.block, 0)
                    }
                    false => (&self.blocks[block], g),
                };
                let run = GroupPass {
                    block: part,
                    tiles,
                    key,
                    home_start,
                    is_home: block == 0,
                    lanes,
                    avx2,
                };
                // SAFETY: `shared` points to the `num_states` entries of `home`,
                // which outlives `in_rounds` and is touched by nothing else
                // meanwhile. `in_rounds` hands item `g` of round `i` to one
                // thread only, the groups of a block hold disjoint sets of
                // states, and the rounds before ended at the barrier of
                // `in_rounds` (which orders their writes before this call): the
                // entries of group `g` are this call's alone.
                unsafe { run.run(g, shared, &mut local) };
            }
        };
        let between_rounds = |round: usize| {
            let done = round + 1;
            if done > first_round && done < stages.len() {
                // SAFETY: `shared` points to the `num_states` entries of `home`,
                // which outlives `in_rounds`. `in_rounds` calls this between
                // the two waits of its barrier, when every other thread waits
                // and all writes of the round are done, and the slice does not
                // outlive this call (`after_round` takes any lifetime).
                let vector = unsafe { shared.residues(self.num_states()) };
                after_round(PassPoint {
                    rounds_done: done,
                    rounds: stages.len(),
                    vector,
                    lanes: NP,
                    runs: home_runs,
                });
            }
        };
        in_rounds(threads, &to_do, control, worker, between_rounds)?;
        let mut sums = [0u64; NP];
        for value in &home {
            for k in 0..NP {
                sums[k] += u64::from(value[k]);
            }
        }
        Ok(sums.map(|s| (s % q) as u32))
    }
}

/// Where a pass stands between two rounds (blocks of cell steps).
pub struct PassPoint<'a> {
    /// Rounds done, `1..rounds`.
    pub rounds_done: usize,
    pub rounds: usize,
    /// The vector: one residue per state and lane (the points rounded up to
    /// a power of two), state by state, in the pass's order.
    vector: &'a [u32],
    lanes: usize,
    /// The states of [`PassPoint::residues`], in turn, as runs of `vector`.
    runs: &'a [Range<usize>],
}

impl PassPoint<'_> {
    /// The states of the vector.
    pub fn states(&self) -> usize {
        self.vector.len() / self.lanes
    }

    /// The vector, one residue per state and lane (the points rounded up to a
    /// power of two), state by state in the order of the first block's
    /// positions, in runs: the order in which [`HexGraph::evaluate_pass`]
    /// takes a vector to resume from, whatever its own order.
    pub fn residues(&self) -> impl Iterator<Item = &[u32]> {
        self.runs
            .iter()
            .map(|run| &self.vector[run.start * self.lanes..run.end * self.lanes])
    }
}

/// What [`HexGraph::evaluate_pass`] hands its monomorphised pass.
struct PassArgs<'a> {
    xs: &'a [u32],
    modulus: u32,
    threads: usize,
    control: &'a Control,
    resume: Option<(usize, &'a [u8])>,
    after_round: &'a (dyn Fn(PassPoint<'_>) + Sync),
    /// Whether each group's part of the graph is first copied out, as a pass
    /// that reads its graph group by group from a file would hold it.
    group_copies: bool,
}

/// The steps of one block for one group of a pass.
struct GroupPass<'a, const NP: usize> {
    /// The block, or a copy of the group alone (see [`GroupCopy`]).
    block: &'a Block,
    /// The vector's order.
    tiles: &'a Tiles,
    /// The occupancy outside the block's columns that the group's states share.
    key: usize,
    /// In the first block, where the group starts in the vector.
    home_start: usize,
    /// Whether the block is the first of the row, whose groups are runs of the
    /// vector.
    is_home: bool,
    lanes: Lanes<NP>,
    /// `Some` when the explicit AVX2 step may run.
    avx2: Option<Isa<true>>,
}

/// One group of a block copied out as a block of its own (one group, at
/// positions from 0), the form in which a pass reading its graph from a file
/// group by group would hold it: only with two blocks a row, whose
/// whose tiles (see [`Tiles`]) the group's key gives.
#[derive(Default)]
struct GroupCopy {
    block: Block,
}

impl GroupCopy {
    /// Copies group `g` of `block`; returns the group's first position.
    fn fill(&mut self, block: &Block, g: usize) -> usize {
        let start = block.group_offsets[g] as usize;
        let end = block.group_offsets[g + 1] as usize;
        let width = block.cols.len();
        let to_local = |p: &u32| p - start as u32;
        let part = &mut self.block;
        part.first_col = block.first_col;
        part.max_group = end - start;
        part.group_offsets.clear();
        part.group_offsets.extend([0, (end - start) as u32]);
        part.chunk_offsets.clear();
        part.chunk_offsets.extend(
            block.chunk_offsets[g << width..=(g + 1) << width]
                .iter()
                .map(to_local),
        );
        part.cols.resize_with(width, Default::default);
        for (copy, col) in part.cols.iter_mut().zip(&block.cols) {
            let others = &col.others[col.offset(start)..col.offset(end)];
            copy.info.clear();
            copy.info.extend_from_slice(&col.info[start..end]);
            copy.others.clear();
            copy.others.extend(others.iter().map(to_local));
            copy.others.push(0);
            copy.marks.clear();
            let mut at = 0u32;
            for chunk in copy.info.chunks(super::graph::MARK_EVERY) {
                copy.marks.push(at);
                at += chunk
                    .iter()
                    .map(|&b| u32::from(b & COUNT_MASK))
                    .sum::<u32>();
            }
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
    /// `home` points to the pass vector (`num_states` entries, valid for reads
    /// and writes), whose entries of the states of group `g` no one else
    /// accesses during the call.
    unsafe fn run(&self, g: usize, home: SharedVec<NP>, local: &mut [Vec<[u32; NP]>; 2]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = self.avx2 {
            // SAFETY: `isa` shows that the CPU has AVX2 and POPCNT, the
            // features of `run_avx2`; `home` as this function's caller
            // guarantees.
            return unsafe { self.run_avx2(isa, g, home, local) };
        }
        // SAFETY: `home` as this function's caller guarantees.
        unsafe { self.run_impl(g, home, local) }
    }

    /// [`GroupPass::run`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT (as `_isa` shows); `home` as for
    /// [`GroupPass::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn run_avx2(
        &self,
        _isa: Isa<true>,
        g: usize,
        home: SharedVec<NP>,
        local: &mut [Vec<[u32; NP]>; 2],
    ) {
        // SAFETY: `home` as this function's caller guarantees.
        unsafe { self.run_impl(g, home, local) }
    }

    /// The group's values go through two buffers, one step after the other. In
    /// the block that orders the vector they start in the vector itself (the
    /// group is a contiguous part of it); elsewhere they are copied in and out.
    ///
    /// A wide block takes its steps in two phases, each made one sub-group at a
    /// time: the first columns only mix the states of runs of consecutive
    /// occupancy chunks, the last ones those of chunks a fixed stride apart. A
    /// sub-group is small enough to stay in the cache for all the steps of its
    /// phase, while the group as a whole is not.
    ///
    /// # Safety
    /// `home` as for [`GroupPass::run`].
    #[inline(always)]
    unsafe fn run_impl(&self, g: usize, home: SharedVec<NP>, local: &mut [Vec<[u32; NP]>; 2]) {
        let block = self.block;
        let start = block.group_offsets[g] as usize;
        let end = block.group_offsets[g + 1] as usize;
        let len = end - start;
        let width = block.cols.len();
        let [a, b] = local;
        let chunks = &block.chunk_offsets[g << width..];
        let mut bufs: [&mut [[u32; NP]]; 2] = if self.is_home {
            // SAFETY: in the first block the group's entries are the run of
            // `len` entries at `home_start` of the vector, in the order of the
            // block's positions (see `Tiles`), inside its `num_states` entries;
            // the caller leaves them to this call, and no other reference to
            // them is made below.
            let home_group =
                unsafe { std::slice::from_raw_parts_mut(home.0.add(self.home_start), len) };
            [home_group, &mut a[..len]]
        } else {
            for (positions, tile) in self.tiles.group_tiles(block, chunks, self.key, start) {
                // SAFETY: the tiles of the group's chunks are the group's
                // entries of the vector (inside its `num_states` entries, as
                // long as the chunks), which the caller leaves to this call;
                // the slice does not outlive this statement.
                let entries = unsafe { home.entries(tile) };
                a[positions].copy_from_slice(entries);
            }
            [&mut a[..len], &mut b[..len]]
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
        if self.is_home {
            if width % 2 == 1 {
                // The result is in the private buffer, and `first` is the
                // group's part of the vector.
                first.copy_from_slice(second);
            }
        } else {
            let result: &[[u32; NP]] = if width.is_multiple_of(2) {
                first
            } else {
                second
            };
            for (positions, tile) in self.tiles.group_tiles(block, chunks, self.key, start) {
                // SAFETY: as for the reads above.
                let entries = unsafe { home.entries_mut(tile) };
                entries.copy_from_slice(&result[positions]);
            }
        }
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
