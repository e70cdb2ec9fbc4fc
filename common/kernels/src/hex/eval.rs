//! The untruncated scalar sweep of the `points` plan: `sum_k C_k x^k mod p` for up
//! to [`POINTS_PER_PASS`] numbers `x` at once, one residue per state and point.
//!
//! A pass keeps one vector of `num_states` entries (one residue per point, 64
//! bytes for 16 points), by occupancy pattern (see `tiles`). The cell steps are
//! made a block of columns at a time, like [`HexGraph::sweep`]: each group of
//! states (closed under the block's steps) is carried through all of them in two
//! buffers (`group_pass`), and its entries of the vector are overwritten with the
//! result. Groups are disjoint, so the vector is updated in place and threads
//! may share one pass. In the first ("home") block a group is a contiguous part
//! of the vector and serves as one of the two buffers; in the other block it is
//! gathered from its tiles (the states of one occupancy pattern, contiguous in
//! every block's order and in the vector) and scattered back.
//!
//! Speed: every target is its own source, and most have one other source or
//! none; the loop adds the first other source under a mask instead of
//! branching on it, and multiplies by `x` (Shoup's method: two 32-bit products
//! per lane, no division) only the targets whose decided cell is occupied, which
//! come in long runs. With AVX2 the 16 residues of a state are two registers.

use std::ops::Range;

use super::HexGraph;
use super::group_pass::{GroupCopy, GroupPass, Lanes, PassVector, SharedVec};
use super::kernel::Isa;
use super::tiles::Tiles;
use crate::modular::pow_mod;
use crate::parallel::in_rounds;
use crate::spill::Stored;
use crate::{Control, Result};

/// Points swept together by one pass (64 bytes per state: one cache line).
pub const POINTS_PER_PASS: usize = 16;

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
    /// to the same values. A vector to resume from that does not fit the
    /// pass (its length, its rounds, a residue not below `modulus`) is refused.
    pub fn evaluate_pass(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
        resume: Option<Resume<'_>>,
        after_round: &(dyn Fn(PassPoint<'_>) + Sync),
    ) -> Result<Vec<u32>> {
        check_pass(xs, modulus);
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
        let (x, lanes) = pass_lanes::<NP>(xs, modulus);
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
            Some(resume) => {
                resumed_vector::<NP>(home_runs, self.num_states(), stages.len(), resume, modulus)?
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
                    vector: PassVector::Memory(shared),
                };
                // SAFETY: `shared` points to the `num_states` entries of `home`,
                // which outlives `in_rounds` and is touched by nothing else
                // meanwhile. `in_rounds` hands item `g` of round `i` to one
                // thread only, the groups of a block hold disjoint sets of
                // states, and the rounds before ended at the barrier of
                // `in_rounds` (which orders their writes before this call): the
                // entries of group `g` are this call's alone.
                unsafe { run.run(g, &mut local) }.expect("a pass in memory reads no file");
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
                after_round(PassPoint::new(done, stages.len(), vector, NP, home_runs));
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

/// Refuses what no pass takes: a modulus outside `2..2^31`, no point or
/// more than [`POINTS_PER_PASS`].
pub(super) fn check_pass(xs: &[u32], modulus: u32) {
    assert!(
        modulus > 1 && modulus < 1 << 31,
        "modulus must be in 2..2^31"
    );
    assert!(
        !xs.is_empty() && xs.len() <= POINTS_PER_PASS,
        "a pass takes 1 to {POINTS_PER_PASS} points"
    );
}

/// Where a pass resumes: after `rounds_done` of its rounds, from a
/// [`PassPoint`]'s residues as little-endian bytes: those of `vector` from
/// byte `from` to its end (a checkpoint behind its header, in memory or in a
/// file: it is read a chunk at a time, never whole).
#[derive(Clone, Copy)]
pub struct Resume<'a> {
    pub rounds_done: usize,
    pub vector: &'a dyn Stored,
    pub from: u64,
}

impl<'a> Resume<'a> {
    /// After `rounds_done` rounds, from all of `vector`.
    pub fn new(rounds_done: usize, vector: &'a dyn Stored) -> Resume<'a> {
        Resume {
            rounds_done,
            vector,
            from: 0,
        }
    }
}

/// States read at a time when a pass resumes.
const RESUME_CHUNK_STATES: usize = 1 << 14;

/// The vector of a pass of `rounds` rounds that resumes from `resume`, put
/// back into the `runs` of the first block's groups. Every residue is checked
/// to be below `modulus`: the steps' reductions take nothing larger, and a
/// larger one would give wrong values without a sign.
pub(super) fn resumed_vector<const NP: usize>(
    runs: &[Range<usize>],
    num_states: usize,
    rounds: usize,
    resume: Resume<'_>,
    modulus: u32,
) -> Result<(usize, Vec<[u32; NP]>)> {
    let Resume {
        rounds_done: done,
        vector,
        from,
    } = resume;
    let entry = NP * 4;
    let bytes = vector.len().saturating_sub(from);
    if done >= rounds || bytes != (num_states * entry) as u64 {
        return Err(crate::Error::InvalidArgument(format!(
            "a pass of this graph resumes after 0 to {} rounds from {} bytes, not after {done} \
             from {bytes}",
            rounds - 1,
            num_states * entry,
        )));
    }
    let mut home = vec![[0u32; NP]; num_states];
    let mut slots = runs.iter().flat_map(|run| run.clone());
    let mut chunk = vec![0u8; RESUME_CHUNK_STATES * entry];
    let mut at = from;
    while at < vector.len() {
        let n = chunk.len().min((vector.len() - at) as usize);
        vector.read_exact_at(at, &mut chunk[..n])?;
        at += n as u64;
        for state in chunk[..n].chunks_exact(entry) {
            let value: [u32; NP] = std::array::from_fn(|k| {
                u32::from_le_bytes(state[4 * k..4 * k + 4].try_into().expect("4 bytes"))
            });
            if value.iter().any(|&r| r >= modulus) {
                return Err(crate::Error::InvalidArgument(format!(
                    "the vector to resume from holds a residue that is not below {modulus}"
                )));
            }
            let slot = slots.next().ok_or_else(|| {
                crate::Error::Internal("the first block's groups hold fewer states".into())
            })?;
            home[slot] = value;
        }
    }
    Ok((done, home))
}

/// A pass's points reduced (missing lanes 0), and its lanes' arithmetic.
pub(super) fn pass_lanes<const NP: usize>(xs: &[u32], modulus: u32) -> ([u32; NP], Lanes<NP>) {
    let mut x = [0u32; NP];
    for (slot, &v) in x.iter_mut().zip(xs) {
        *slot = v % modulus;
    }
    (x, Lanes::new(x, modulus))
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

impl<'a> PassPoint<'a> {
    pub(super) fn new(
        rounds_done: usize,
        rounds: usize,
        vector: &'a [u32],
        lanes: usize,
        runs: &'a [Range<usize>],
    ) -> PassPoint<'a> {
        PassPoint {
            rounds_done,
            rounds,
            vector,
            lanes,
            runs,
        }
    }

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
    resume: Option<Resume<'a>>,
    after_round: &'a (dyn Fn(PassPoint<'_>) + Sync),
    /// Whether each group's part of the graph is first copied out, as a pass
    /// that reads its graph group by group from a file would hold it.
    group_copies: bool,
}
