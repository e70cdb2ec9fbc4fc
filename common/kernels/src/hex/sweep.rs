//! The sweep over the cell steps: one step for a range of targets (the unit of the
//! distributed plan) and the whole sweep on local threads.

use std::ops::Range;

use super::graph::{Block, MAX_SOURCES};
use super::kernel::{Isa, Prior, Shape, Sources, target_poly};
use super::{HexGraph, NARROW_SIDES, validate_modulus};
use crate::cache::prefetch;
use crate::parallel::in_rounds;
use crate::{Control, Result, invalid};

/// One of the two vectors of [`HexGraph::sweep`], shared by its threads: during
/// a block of steps each thread writes the polynomials of the groups it took
/// into one, and only reads the other.
#[derive(Clone, Copy)]
struct SharedBuf(*mut u32);

// SAFETY: a `SharedBuf` is only a pointer; moving it to another thread touches
// no memory. The accesses through it are those of `HexGraph::sweep`, whose
// comments show them free of data races.
unsafe impl Send for SharedBuf {}
// SAFETY: `&SharedBuf` only gives a copy of the pointer; as for `Send`.
unsafe impl Sync for SharedBuf {}

/// One block of cell steps of the sweep: steps `first..first + block.cols.len()`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stage {
    pub first: usize,
    pub block: usize,
}

impl HexGraph {
    pub(crate) fn shape(&self, step: usize) -> Shape {
        Shape::of_step(self.side as usize, self.stride, step)
    }

    /// The block and the column inside it of cell step `step`.
    pub(crate) fn block_of(&self, step: usize) -> (&Block, usize) {
        assert!(
            (1..=self.num_steps()).contains(&step),
            "cell step must be in 1..={}, got {step}",
            self.num_steps()
        );
        let (b, j) = self.col_block[(step - 1) % self.side as usize];
        (&self.blocks[b], j)
    }

    /// One cell step for a range of targets: given the whole vector of step
    /// `step - 1` (`step` is 1-based; the vector of step 0 is
    /// [`HexGraph::initial_vector`]), writes the polynomials of the target states
    /// `targets` after step `step` into `out` (`targets.len() * stride` residues).
    /// Independent of any other range, so a step may be split arbitrarily.
    ///
    /// `modulus` must satisfy [`super::validate`]; panics on a step out of
    /// `1..=num_steps` or on slices of the wrong length.
    pub fn step_range(
        &self,
        step: usize,
        input: &[u32],
        targets: Range<usize>,
        modulus: u32,
        out: &mut [u32],
    ) {
        assert!(
            self.check_polynomial_side().is_ok(),
            "the polynomial sweep of side {}",
            self.side
        );
        assert_eq!(input.len(), self.vector_len(), "input vector length");
        assert!(
            targets.start <= targets.end && targets.end <= self.num_states(),
            "target range {targets:?} out of 0..{}",
            self.num_states()
        );
        assert_eq!(out.len(), targets.len() * self.stride, "output length");
        debug_assert!(modulus < 1 << 31 && modulus > self.cells());
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = Isa::detect() {
            // SAFETY: `isa` shows that the CPU has AVX2 and POPCNT, the
            // features `step_range_avx2` is compiled for.
            return unsafe { self.step_range_avx2(isa, step, input, targets, modulus, out) };
        }
        self.step_range_impl(Isa::PORTABLE, step, input, targets, modulus, out)
    }

    /// The polynomial sweep (the cell-step plan and [`HexGraph::sweep`]) runs
    /// up to side 16: beyond, one frontier vector alone takes over 8 GB (side
    /// 17: 145 residues for each of about 14 million states).
    pub fn check_polynomial_side(&self) -> Result<()> {
        if self.side > NARROW_SIDES {
            return Err(invalid!(
                "the polynomial sweep (cell-step plan) supports sides up to {NARROW_SIDES}, got {}: use the points plan",
                self.side
            ));
        }
        Ok(())
    }

    /// [`HexGraph::step_range`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT (as `isa` shows).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    fn step_range_avx2(
        &self,
        isa: Isa<true>,
        step: usize,
        input: &[u32],
        targets: Range<usize>,
        p: u32,
        out: &mut [u32],
    ) {
        self.step_range_impl(isa, step, input, targets, p, out)
    }

    #[inline(always)]
    fn step_range_impl<const AVX: bool>(
        &self,
        isa: Isa<AVX>,
        step: usize,
        input: &[u32],
        targets: Range<usize>,
        p: u32,
        out: &mut [u32],
    ) {
        let shape = self.shape(step);
        let (block, j) = self.block_of(step);
        let gather = &block.cols[j];
        let stride = self.stride;
        let mut buf = [0u32; MAX_SOURCES];
        for (t, dst) in targets.zip(out.chunks_exact_mut(stride)) {
            let pos = block.position[t] as usize;
            let sources = gather.sources(pos, gather.offset(pos), &mut buf);
            let sources = Sources {
                list: sources,
                input,
                at: |s: u32| block.members[s as usize] as usize * stride,
            };
            let mask = self.narrow_masks[t];
            target_poly(isa, &shape, Prior::Unknown, mask, sources, dst, p);
        }
    }

    /// `C_0..C_floor(M/2)` mod `modulus`: the sum of the polynomials of the vector
    /// after the last step.
    pub fn crossings_from_vector(&self, vector: &[u32], modulus: u32) -> Vec<u32> {
        assert_eq!(vector.len(), self.vector_len(), "vector length");
        let q = u64::from(modulus);
        let mut sums = vec![0u64; self.stride];
        // Residues are below 2^31, so 2^32 of them fit a u64: reduce rarely.
        for (i, poly) in vector.chunks_exact(self.stride).enumerate() {
            for (s, &c) in sums.iter_mut().zip(poly) {
                *s += u64::from(c);
            }
            if i % (1 << 30) == (1 << 30) - 1 {
                sums.iter_mut().for_each(|s| *s %= q);
            }
        }
        sums.into_iter().map(|s| (s % q) as u32).collect()
    }

    /// The stages of the sweep: every row of cells cut into the graph's blocks of
    /// columns.
    pub(crate) fn stages(&self) -> Vec<Stage> {
        let side = self.side as usize;
        (1..side)
            .flat_map(|row| {
                self.blocks.iter().enumerate().map(move |(b, block)| Stage {
                    first: (row - 1) * side + block.first_col + 1,
                    block: b,
                })
            })
            .collect()
    }

    /// The whole sweep in this process: `C_0..C_floor(M/2)` mod `modulus`.
    ///
    /// The cell steps are made a block of columns at a time: the states fall into
    /// groups closed under the steps of the block (see the graph module), and each
    /// of `threads` threads takes whole groups in turn (largest first) and carries
    /// them through all these steps in a private buffer, so that the whole
    /// vectors are read and written once per block; the threads meet at a
    /// barrier after each block. [`Control::check`] is polled there, and one work
    /// unit per target state per cell step is added (`num_states * width` per
    /// block, [`HexGraph::total_work`] in all). The result does not depend on
    /// `threads`.
    pub fn sweep(&self, modulus: u32, threads: usize, control: &Control) -> Result<Vec<u32>> {
        validate_modulus(self.side, modulus)?;
        self.check_polynomial_side()?;
        control.check()?;
        let n = self.num_states();
        let stages = &self.stages();
        let threads = threads.clamp(1, n.div_ceil(64).max(1));
        let mut current = self.initial_vector(modulus);
        let mut next = vec![0u32; current.len()];
        let len = current.len();
        let bufs = [
            SharedBuf(current.as_mut_ptr()),
            SharedBuf(next.as_mut_ptr()),
        ];
        let local_len = self.blocks.iter().map(|b| b.max_group).max().unwrap_or(0) * self.stride;
        let groups: Vec<usize> = stages
            .iter()
            .map(|s| self.blocks[s.block].groups())
            .collect();
        let avx2 = Isa::detect();
        // Round i is stage i; its items are the groups of the stage's block.
        let worker = || {
            let mut local = [vec![0u32; local_len], vec![0u32; local_len]];
            move |i: usize, g: usize| {
                let stage = stages[i];
                // SAFETY: `bufs[i % 2]` points to the `len` initialised residues
                // of `current` or `next`, which outlive `in_rounds` and are
                // touched by nothing else meanwhile. In round `i` every thread
                // writes only `bufs[(i + 1) % 2]`, and the rounds before ended at
                // the barrier of `in_rounds` (which orders their writes before
                // these reads), so nothing writes this buffer while the slice
                // lives (it is dropped at the end of the item).
                let input = unsafe { std::slice::from_raw_parts(bufs[i % 2].0, len) };
                let run = GroupRun {
                    graph: self,
                    block: &self.blocks[stage.block],
                    first: stage.first,
                    group: g,
                    canonical_input: i == 0,
                    p: modulus,
                };
                // SAFETY: the output `bufs[(i + 1) % 2]` holds `len` residues,
                // `num_states * stride` (the length of a vector). `in_rounds`
                // hands item `g` of round `i` to one thread only, the groups of
                // a block are disjoint sets of positions, and in this round no
                // thread reads this buffer (see `input`): the polynomials at the
                // positions of group `g` are this call's alone.
                unsafe { run.run(avx2, input, bufs[(i + 1) % 2].0, &mut local) };
            }
        };
        let block_done = |i: usize| {
            let width = self.blocks[stages[i].block].cols.len();
            control.add_work((n * width) as u64);
        };
        in_rounds(threads, &groups, control, worker, block_done)?;
        let last = if stages.len().is_multiple_of(2) {
            &current
        } else {
            &next
        };
        Ok(self.crossings_from_vector(last, modulus))
    }
}

/// One group carried through the cell steps of a block.
struct GroupRun<'a> {
    graph: &'a HexGraph,
    block: &'a Block,
    /// First cell step of the block.
    first: usize,
    group: usize,
    /// Whether the input vector is in state order (the initial vector) rather
    /// than in the order of the previous block.
    canonical_input: bool,
    p: u32,
}

impl GroupRun<'_> {
    /// Reads the group's polynomials from `input` (the whole vector before the
    /// block, in the order of the previous block, or of the states for the first
    /// stage), makes the block's steps in `local`, and writes the result at the
    /// group's positions in `output` (the whole vector after the block, in the
    /// order of this block).
    ///
    /// With the AVX2 loops when `avx2` is `Some`.
    ///
    /// # Safety
    /// `output` points to a vector of `num_states * stride` residues (valid for
    /// reads and writes) whose polynomials at this group's positions (in the
    /// order of this block) no one else accesses during the call.
    unsafe fn run(
        &self,
        avx2: Option<Isa<true>>,
        input: &[u32],
        output: *mut u32,
        local: &mut [Vec<u32>; 2],
    ) {
        #[cfg(target_arch = "x86_64")]
        if let Some(isa) = avx2 {
            // SAFETY: `isa` shows that the CPU has AVX2 and POPCNT, the
            // features of `run_avx2`; `output` as this function's caller
            // guarantees.
            return unsafe { self.run_avx2(isa, input, output, local) };
        }
        let _ = avx2;
        // SAFETY: `output` as this function's caller guarantees.
        unsafe { self.run_impl(Isa::PORTABLE, input, output, local) }
    }

    /// [`GroupRun::run`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT (as `isa` shows); `output` as for
    /// [`GroupRun::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn run_avx2(
        &self,
        isa: Isa<true>,
        input: &[u32],
        output: *mut u32,
        local: &mut [Vec<u32>; 2],
    ) {
        // SAFETY: `output` as this function's caller guarantees.
        unsafe { self.run_impl(isa, input, output, local) }
    }

    /// # Safety
    /// `output` as for [`GroupRun::run`].
    #[inline(always)]
    unsafe fn run_impl<const AVX: bool>(
        &self,
        isa: Isa<AVX>,
        input: &[u32],
        output: *mut u32,
        local: &mut [Vec<u32>; 2],
    ) {
        let block = self.block;
        let stride = self.graph.stride;
        let start = block.group_offsets[self.group] as usize;
        let end = block.group_offsets[self.group + 1] as usize;
        // Where the first step finds each position's polynomial in `input`.
        let input_pos = if self.canonical_input {
            &block.members
        } else {
            &block.from_prev
        };
        let width = block.cols.len();
        let [even, odd] = local;
        for j in 0..width {
            let shape = self.graph.shape(self.first + j);
            let gather = &block.cols[j];
            let last = j + 1 == width;
            // Steps after the first read the previous step's local buffer.
            let (src_buf, dst_buf): (&[u32], &mut [u32]) =
                if j % 2 == 0 { (odd, even) } else { (even, odd) };
            let input_here = if j == 0 { input } else { src_buf };
            let local_prior = if j >= 2 {
                Prior::Step(self.graph.shape(self.first + j - 2))
            } else {
                Prior::Unknown
            };
            let mut offset = gather.offset(start);
            let mut ahead = if j == 0 && start + PREFETCH_AHEAD < end {
                gather.offset(start + PREFETCH_AHEAD)
            } else {
                0
            };
            let mut buf = [0u32; MAX_SOURCES];
            let mut ahead_buf = [0u32; MAX_SOURCES];
            for pos in start..end {
                // The first step reads polynomials scattered over the whole
                // input: ask for those of a later target early.
                if j == 0 && pos + PREFETCH_AHEAD < end {
                    let later = pos + PREFETCH_AHEAD;
                    for &s in gather.sources(later, ahead, &mut ahead_buf) {
                        prefetch_poly(
                            input
                                .as_ptr()
                                .wrapping_add(input_pos[s as usize] as usize * stride),
                            stride,
                        );
                    }
                    ahead += gather.count(later);
                }
                let mask = block.masks[pos];
                let sources = gather.sources(pos, offset, &mut buf);
                offset += gather.count(pos);
                let dst: &mut [u32] = if last {
                    // SAFETY: `pos < end <= num_states` (the group offsets are
                    // positions of the block), so the `stride` residues at
                    // `pos * stride` lie inside `output`; they are the polynomial
                    // at a position of this group, which the caller leaves to
                    // this call alone, and this loop visits each position once.
                    unsafe { std::slice::from_raw_parts_mut(output.add(pos * stride), stride) }
                } else {
                    &mut dst_buf[(pos - start) * stride..][..stride]
                };
                let prior = if last { Prior::Unknown } else { local_prior };
                if j == 0 {
                    let sources = Sources {
                        list: sources,
                        input: input_here,
                        at: |s: u32| input_pos[s as usize] as usize * stride,
                    };
                    target_poly(isa, &shape, prior, mask, sources, dst, self.p);
                } else {
                    let sources = Sources {
                        list: sources,
                        input: input_here,
                        at: |s: u32| (s as usize - start) * stride,
                    };
                    target_poly(isa, &shape, prior, mask, sources, dst, self.p);
                }
            }
        }
    }
}

/// How many targets ahead the first step of a block prefetches sources.
const PREFETCH_AHEAD: usize = 4;

/// Asks the CPU to start loading the cache lines of the `stride` residues at `p`.
#[inline(always)]
fn prefetch_poly(p: *const u32, stride: usize) {
    let bytes = stride * 4;
    let mut off = 0;
    while off < bytes + 63 {
        prefetch((p as *const i8).wrapping_add(off.min(bytes - 1)));
        off += 64;
    }
}
