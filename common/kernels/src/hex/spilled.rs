//! A points pass that holds neither the graph nor its vector: the graph's
//! blocks written group by group to the caller's spill, read back one group at
//! a time by each thread, and the vector in the caller's scratch, read and
//! written a group at a time (see `tiles`). The kernel does no I/O itself.
//! What stays in memory is an index of a few bytes a group, the tiles' starts
//! (`2^side` entries) and each thread's two group buffers, so the memory of a
//! pass is set by the largest group, not by the number of states; the price
//! is the copies (measured in docs/benchmarks.md, "Hex sides 17 to 20").

use std::ops::Range;
use std::sync::Arc;

use super::HexGraph;
use super::eval::{PassPoint, Resume, check_pass, pass_lanes, resumed_vector};
use super::graph_file::{self, GraphIndex, SpilledBlock};
use super::group_pass::{GroupCopy, GroupPass, PassVector, SharedVec};
use super::kernel::Isa;
use super::tiles::Tiles;
use crate::modular::pow_mod;
use crate::parallel::in_rounds;
use crate::spill::{Scratch, Spill, Stored};
use crate::{Control, Error, Result};

/// The graph of [`HexGraph::spill`]: what a pass needs of it in memory, and
/// the spilled parts of its groups (with the index, one run of bytes: see
/// `graph_file`).
pub struct SpilledGraph {
    index: GraphIndex,
    /// The block of each round of a pass.
    rounds: Vec<usize>,
    /// The groups' parts, as [`HexGraph::spill`] wrote them.
    parts: Arc<dyn Stored>,
}

impl HexGraph {
    /// Writes the graph's blocks group by group to one run of `spill` (each
    /// group's gather lists, column after column), for passes that hold one
    /// group at a time ([`SpilledGraph::evaluate_pass`]); the graph itself may
    /// then be dropped.
    pub fn spill(&self, spill: &mut dyn Spill) -> Result<SpilledGraph> {
        let tiles = Tiles::new(self);
        let home = &self.blocks[0];
        let home_starts: Vec<usize> = (0..home.groups())
            .map(|g| tiles.first_block_group(home, g).start)
            .collect();
        let mut top_row = Vec::new();
        for (g, &start) in home_starts.iter().enumerate() {
            let first = home.group_offsets[g] as usize;
            let last = home.group_offsets[g + 1] as usize;
            for (k, &i) in home.members[first..last].iter().enumerate() {
                if let Some(degree) = super::graph::top_row_degree(self.masks[i as usize]) {
                    top_row.push(((start + k) as u32, degree));
                }
            }
        }
        let mut bytes = Vec::new();
        let mut at = 0u64;
        let mut copy = GroupCopy::default();
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for block in &self.blocks {
            let mut parts = vec![at];
            let mut others = Vec::with_capacity(block.groups() * block.cols.len());
            for g in 0..block.groups() {
                copy.fill(block, g);
                for col in &copy.block.cols {
                    let sources = &col.others[..col.others.len() - 1];
                    bytes.clear();
                    bytes.extend_from_slice(&col.info);
                    bytes.extend(sources.iter().flat_map(|s| s.to_le_bytes()));
                    spill.write(&bytes)?;
                    at += bytes.len() as u64;
                    others.push(sources.len() as u32);
                }
                parts.push(at);
            }
            blocks.push(SpilledBlock {
                first_col: block.first_col,
                width: block.cols.len(),
                group_offsets: block.group_offsets.clone(),
                chunk_offsets: block.chunk_offsets.clone(),
                parts,
                others,
                // Derived from the tiles when the graph is opened.
                home_starts: Vec::new(),
            });
        }
        let index = GraphIndex {
            side: self.side,
            num_states: self.num_states(),
            blocks,
            tiles,
            top_row,
        };
        spill.write(&graph_file::encode_index(&index))?;
        let run = spill.end_run()?;
        // Read back as any worker would read it, so that what was written is
        // what a pass of this process uses too.
        SpilledGraph::open(spill.keep_run(run)?)
    }
}

impl SpilledGraph {
    /// The graph whose parts, index and trailer [`HexGraph::spill`] wrote to
    /// `stored` (a run of its spill, or those bytes kept anywhere else), its
    /// index checked.
    pub fn open(stored: Arc<dyn Stored>) -> Result<SpilledGraph> {
        let index = graph_file::decode(stored.as_ref())?;
        Ok(SpilledGraph::from_index(index, stored))
    }

    /// What a pass holds of the graph (for tests that compare two graphs).
    #[cfg(test)]
    pub(super) fn index(&self) -> &GraphIndex {
        &self.index
    }

    /// The graph of a checked `index` whose groups' parts are `parts`.
    pub(super) fn from_index(index: GraphIndex, parts: Arc<dyn Stored>) -> SpilledGraph {
        // A round a block, row after row (see `HexGraph::stages`).
        let rounds = (1..index.side as usize)
            .flat_map(|_| 0..index.blocks.len())
            .collect();
        SpilledGraph {
            index,
            rounds,
            parts,
        }
    }

    pub fn side(&self) -> u32 {
        self.index.side
    }

    pub fn num_states(&self) -> usize {
        self.index.num_states
    }

    /// The graph's spilled form, as [`SpilledGraph::open`] takes it: a
    /// stage's output, say.
    pub fn stored(&self) -> Arc<dyn Stored> {
        self.parts.clone()
    }

    /// Bytes of the graph's spilled form: its parts and its index.
    pub fn spilled_bytes(&self) -> u64 {
        self.parts.len()
    }

    /// Bytes of the scratch a pass of `points` points keeps its vector in.
    pub fn vector_bytes(&self, points: usize) -> u64 {
        let lanes = points.clamp(1, super::POINTS_PER_PASS).next_power_of_two();
        self.index.num_states as u64 * 4 * lanes as u64
    }

    /// The most states of one group, which sets a pass's buffers.
    pub fn max_group(&self) -> usize {
        self.index
            .blocks
            .iter()
            .flat_map(|b| b.group_offsets.windows(2).map(|w| (w[1] - w[0]) as usize))
            .max()
            .unwrap_or(0)
    }

    /// [`HexGraph::evaluate_pass`] with the graph read a group at a time:
    /// the same values, the same resumption and the same checkpoints (a
    /// [`PassPoint`] of either resumes the other), the vector in memory or
    /// in the options' scratch.
    pub fn evaluate_pass(
        &self,
        xs: &[u32],
        modulus: u32,
        options: &PassOptions<'_>,
    ) -> Result<Vec<u32>> {
        check_pass(xs, modulus);
        options.control.check()?;
        let len = xs.len();
        Ok(match len.next_power_of_two() {
            1 => self.pass::<1>(xs, modulus, options)?.to_vec(),
            2 => self.pass::<2>(xs, modulus, options)?.to_vec(),
            4 => self.pass::<4>(xs, modulus, options)?[..len].to_vec(),
            8 => self.pass::<8>(xs, modulus, options)?[..len].to_vec(),
            _ => self.pass::<16>(xs, modulus, options)?[..len].to_vec(),
        })
    }

    /// The first block's groups as runs of the vector, in the order of its
    /// positions: the order of a checkpoint's vector.
    fn home_runs(&self) -> Vec<Range<usize>> {
        let home = &self.index.blocks[0];
        home.group_offsets
            .windows(2)
            .zip(&home.home_starts)
            .map(|(w, &start)| start..start + (w[1] - w[0]) as usize)
            .collect()
    }

    fn pass<const NP: usize>(
        &self,
        xs: &[u32],
        modulus: u32,
        options: &PassOptions<'_>,
    ) -> Result<[u32; NP]> {
        let PassOptions {
            threads,
            control,
            resume,
            after_round,
            scratch,
        } = *options;
        let q = u64::from(modulus);
        let (x, lanes) = pass_lanes::<NP>(xs, modulus);
        let entry = 4 * NP;
        let home_runs = &self.home_runs();
        let mut in_memory = Vec::new();
        let first_round = match resume {
            Some(resume) => {
                let (done, home) = resumed_vector::<NP>(
                    home_runs,
                    self.index.num_states,
                    self.rounds.len(),
                    resume,
                    modulus,
                )?;
                match scratch {
                    Some(scratch) => {
                        let bytes: Vec<u8> = home
                            .iter()
                            .flatten()
                            .flat_map(|v| v.to_ne_bytes())
                            .collect();
                        scratch.write_at(0, &bytes)?;
                    }
                    None => in_memory = home,
                }
                done
            }
            None => {
                let starts = self.index.top_row.iter().map(|&(at, degree)| {
                    let values = x.map(|v| pow_mod(u64::from(v), u64::from(degree), q) as u32);
                    (at as usize, values)
                });
                match scratch {
                    Some(scratch) => {
                        // Zeros first: the scratch may hold anything.
                        scratch.clear((self.index.num_states * entry) as u64)?;
                        for (at, values) in starts {
                            let bytes: Vec<u8> =
                                values.iter().flat_map(|v| v.to_ne_bytes()).collect();
                            scratch.write_at((at * entry) as u64, &bytes)?;
                        }
                    }
                    None => {
                        in_memory = vec![[0u32; NP]; self.index.num_states];
                        for (at, values) in starts {
                            in_memory[at] = values;
                        }
                    }
                }
                0
            }
        };
        let vector = match scratch {
            Some(scratch) => PassVector::Scratch(scratch),
            None => PassVector::Memory(SharedVec(in_memory.as_mut_ptr())),
        };
        // The rounds done before a resume are skipped: no items.
        let to_do: Vec<usize> = self
            .rounds
            .iter()
            .enumerate()
            .map(|(round, &b)| match round < first_round {
                true => 0,
                false => self.index.blocks[b].group_offsets.len() - 1,
            })
            .collect();
        let max_group = self.max_group();
        let threads = threads.clamp(1, to_do.iter().copied().max().unwrap_or(1));
        let avx2 = Isa::detect();
        let first_error = std::sync::Mutex::new(None::<Error>);
        let first_error_ref = &first_error;
        let worker = || {
            let mut local = [vec![[0u32; NP]; max_group], vec![[0u32; NP]; max_group]];
            let mut copy = GroupCopy::default();
            move |round: usize, g: usize| {
                let b = self.rounds[round];
                let done = self.load(b, g, &mut copy).and_then(|()| {
                    let run = GroupPass {
                        block: &copy.block,
                        tiles: &self.index.tiles,
                        key: self.index.tiles.key(b, g),
                        home_start: self.index.blocks[b]
                            .home_starts
                            .get(g)
                            .copied()
                            .unwrap_or(0),
                        is_home: b == 0,
                        lanes,
                        avx2,
                        vector,
                    };
                    // SAFETY: a vector in memory has the `num_states` entries
                    // of `in_memory`, which outlives `in_rounds` and is
                    // touched by nothing else meanwhile; `in_rounds` hands
                    // item `g` of a round to one thread only, the groups of a
                    // block hold disjoint sets of states, and the rounds
                    // before ended at its barrier: the entries of the group
                    // are this call's alone. A vector in scratch is read and
                    // written through the caller's calls only.
                    unsafe { run.run(0, &mut local) }
                });
                if let Err(e) = done {
                    first_error_ref
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    control.cancel();
                }
            }
        };
        let rounds = self.rounds.len();
        let between_rounds = |round: usize| {
            let done = round + 1;
            if let PassVector::Memory(shared) = vector
                && done > first_round
                && done < rounds
            {
                // SAFETY: `shared` points to the `num_states` entries of
                // `in_memory`, which outlives `in_rounds`. `in_rounds` calls
                // this between the two waits of its barrier, when every other
                // thread waits and all writes of the round are done, and the
                // slice does not outlive this call.
                let vector = unsafe { shared.residues(self.index.num_states) };
                after_round(PassPoint::new(done, rounds, vector, NP, home_runs));
            }
        };
        let ran = in_rounds(threads, &to_do, control, worker, between_rounds);
        if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        ran?;
        let mut sums = [0u64; NP];
        let mut add = |values: &[u32]| {
            for (k, &v) in values.iter().enumerate() {
                sums[k % NP] += u64::from(v);
            }
        };
        match scratch {
            None => in_memory.iter().for_each(|values| add(values)),
            Some(scratch) => {
                let mut chunk = vec![0u8; (1 << 16) * entry];
                let total = self.index.num_states * entry;
                for at in (0..total).step_by(chunk.len()) {
                    let n = chunk.len().min(total - at);
                    scratch.read_at(at as u64, &mut chunk[..n])?;
                    let words: Vec<u32> = chunk[..n]
                        .chunks_exact(4)
                        .map(|w| u32::from_ne_bytes(w.try_into().expect("4 bytes")))
                        .collect();
                    add(&words);
                }
            }
        }
        Ok(sums.map(|s| (s % q) as u32))
    }

    /// Reads group `g` of block `b` into `copy`, as [`GroupCopy::fill`] makes
    /// it from a block in memory.
    fn load(&self, b: usize, g: usize, copy: &mut GroupCopy) -> Result<()> {
        let block = &self.index.blocks[b];
        let width = block.width;
        let (start, end) = copy.begin(
            block.first_col,
            width,
            &block.group_offsets,
            &block.chunk_offsets,
            g,
        );
        let len = end - start;
        let local = &mut copy.block;
        let mut at = block.parts[g];
        for (j, col) in local.cols.iter_mut().enumerate() {
            let count = block.others[g * width + j] as usize;
            col.info.resize(len, 0);
            self.parts.read_exact_at(at, &mut col.info)?;
            at += len as u64;
            col.others.resize(count + 1, 0);
            // SAFETY: `u32`s have no padding and take any byte pattern: the
            // first `count` entries' memory as bytes, for this statement.
            let raw = unsafe {
                std::slice::from_raw_parts_mut(col.others.as_mut_ptr() as *mut u8, 4 * count)
            };
            self.parts.read_exact_at(at, raw)?;
            at += 4 * count as u64;
            for s in &mut col.others[..count] {
                *s = u32::from_le(*s);
            }
            col.others[count] = 0;
            let counted = col.set_marks();
            // The step reads sources unchecked: a part that damaged storage
            // gave is refused here, never stepped through. (The largest
            // source, not the first one outside: a scan without a branch.)
            let largest = col.others[..count].iter().copied().max();
            let outside = largest.is_some_and(|s| s as usize >= len);
            if counted != count || outside {
                return Err(Error::Failed(format!(
                    "the spilled hex graph is damaged: group {g} of block {b}, column {j}"
                )));
            }
        }
        Ok(())
    }
}

/// How a [`SpilledGraph::evaluate_pass`] runs besides its points.
#[derive(Clone, Copy)]
pub struct PassOptions<'a> {
    pub threads: usize,
    pub control: &'a Control,
    /// Where a pass resumes (see [`Resume`]).
    pub resume: Option<Resume<'a>>,
    /// Shown where the pass stands after each round but the last, as
    /// [`HexGraph::evaluate_pass`] does, when its vector is in memory.
    pub after_round: &'a (dyn Fn(PassPoint<'_>) + Sync),
    /// Where the vector is kept instead of memory (its first
    /// [`SpilledGraph::vector_bytes`] bytes, which the pass writes before it
    /// reads them).
    pub scratch: Option<&'a dyn Scratch>,
}

impl<'a> PassOptions<'a> {
    /// From the start, the vector in memory, no checkpoints.
    pub fn new(threads: usize, control: &'a Control) -> PassOptions<'a> {
        PassOptions {
            threads,
            control,
            resume: None,
            after_round: &|_| {},
            scratch: None,
        }
    }
}
