//! A points pass that holds neither the graph nor its vector: the graph's
//! blocks written group by group to a file, read back one group at a time by
//! each thread, and the vector in a file of its own, read and written a group
//! at a time (see `tiles`). What stays in memory is an index of a few bytes a
//! group, the tiles' starts (`2^side` entries) and each thread's two group
//! buffers, so the memory of a pass is set by the largest group, not by the
//! number of states; the price is the copies (measured in
//! docs/benchmarks.md, "Hex sides 17 to 20").

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::HexGraph;
use super::graph::COUNT_MASK;
use super::group_pass::{GroupCopy, GroupPass, Lanes, PassVector, SharedVec};
use super::kernel::Isa;
use super::tiles::Tiles;
use crate::modular::pow_mod;
use crate::parallel::in_rounds;
use crate::{Control, Error, Result};

/// The graph of [`HexGraph::spill`]: what a pass needs of it in memory, and
/// the file of its groups.
pub struct SpilledGraph {
    num_states: usize,
    blocks: Vec<SpilledBlock>,
    tiles: Tiles,
    /// The block of each round of a pass.
    rounds: Vec<usize>,
    /// The top-row states: their entries of the vector, and their occupied
    /// cells (the power of `x` they start with).
    top_row: Vec<(u32, u32)>,
    file: File,
    path: PathBuf,
}

/// A block without its gather lists: where each group's part is in the file.
struct SpilledBlock {
    first_col: usize,
    width: usize,
    group_offsets: Vec<u32>,
    chunk_offsets: Vec<u32>,
    /// Per group: the start of its part in the file (one more entry: the end).
    parts: Vec<u64>,
    /// Per group and column: the number of other sources.
    others: Vec<u32>,
    /// Per group: where it starts in the vector, for the first block.
    home_starts: Vec<usize>,
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Failed(format!("{what} {}: {e}", path.display()))
}

impl HexGraph {
    /// Writes the graph's blocks group by group to a new file at `path` (each
    /// group's gather lists, column after column), for passes that hold one
    /// group at a time ([`SpilledGraph::evaluate_pass`]); the graph itself may
    /// then be dropped. Only with two blocks a row or one (the default widths).
    pub fn spill(&self, path: &Path) -> Result<SpilledGraph> {
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
        let failed = |e| io_failed("cannot write the graph to", path, e);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(failed)?;
        let mut out = BufWriter::new(file);
        let mut at = 0u64;
        let mut copy = GroupCopy::default();
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for (b, block) in self.blocks.iter().enumerate() {
            let mut parts = vec![at];
            let mut others = Vec::with_capacity(block.groups() * block.cols.len());
            for g in 0..block.groups() {
                copy.fill(block, g);
                for col in &copy.block.cols {
                    out.write_all(&col.info).map_err(failed)?;
                    let sources = &col.others[..col.others.len() - 1];
                    for s in sources {
                        out.write_all(&s.to_le_bytes()).map_err(failed)?;
                    }
                    at += (col.info.len() + 4 * sources.len()) as u64;
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
                home_starts: if b == 0 {
                    home_starts.clone()
                } else {
                    Vec::new()
                },
            });
        }
        let file = out.into_inner().map_err(|e| failed(e.into_error()))?;
        file.sync_data().map_err(failed)?;
        Ok(SpilledGraph {
            num_states: self.num_states(),
            blocks,
            tiles,
            rounds: self.stages().iter().map(|s| s.block).collect(),
            top_row,
            file,
            path: path.to_path_buf(),
        })
    }
}

impl SpilledGraph {
    pub fn num_states(&self) -> usize {
        self.num_states
    }

    /// Bytes of the graph's file.
    pub fn file_bytes(&self) -> u64 {
        self.blocks
            .last()
            .map_or(0, |b| *b.parts.last().unwrap_or(&0))
    }

    /// The most states of one group, which sets a pass's buffers.
    pub fn max_group(&self) -> usize {
        self.blocks
            .iter()
            .flat_map(|b| b.group_offsets.windows(2).map(|w| (w[1] - w[0]) as usize))
            .max()
            .unwrap_or(0)
    }

    /// [`HexGraph::evaluate_pass`] without resume, the graph read a group at a
    /// time and the vector in memory, or with `scratch` in a new file there
    /// (removed when the pass ends): the same values.
    pub fn evaluate_pass(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
        scratch: Option<&Path>,
    ) -> Result<Vec<u32>> {
        assert!(
            modulus > 1 && modulus < 1 << 31,
            "modulus must be in 2..2^31"
        );
        assert!(
            !xs.is_empty() && xs.len() <= super::POINTS_PER_PASS,
            "a pass takes 1 to {} points",
            super::POINTS_PER_PASS
        );
        control.check()?;
        let file = scratch.map(ScratchFile::create).transpose()?;
        let vector = file.as_ref();
        let len = xs.len();
        Ok(match len.next_power_of_two() {
            1 => self
                .pass::<1>(xs, modulus, threads, control, vector)?
                .to_vec(),
            2 => self
                .pass::<2>(xs, modulus, threads, control, vector)?
                .to_vec(),
            4 => self.pass::<4>(xs, modulus, threads, control, vector)?[..len].to_vec(),
            8 => self.pass::<8>(xs, modulus, threads, control, vector)?[..len].to_vec(),
            _ => self.pass::<16>(xs, modulus, threads, control, vector)?[..len].to_vec(),
        })
    }

    fn pass<const NP: usize>(
        &self,
        xs: &[u32],
        modulus: u32,
        threads: usize,
        control: &Control,
        file: Option<&ScratchFile>,
    ) -> Result<[u32; NP]> {
        let q = u64::from(modulus);
        let mut x = [0u32; NP];
        for (slot, &v) in x.iter_mut().zip(xs) {
            *slot = v % modulus;
        }
        let lanes = Lanes::new(x, modulus);
        let entry = 4 * NP as u64;
        let starts = |values: [u32; NP]| {
            self.top_row.iter().map(move |&(at, degree)| {
                (
                    at as usize,
                    values.map(|v| pow_mod(u64::from(v), u64::from(degree), q) as u32),
                )
            })
        };
        let mut in_memory = Vec::new();
        let vector = match file {
            Some(vector) => {
                let failed = |e| io_failed("cannot write the pass vector", &vector.path, e);
                vector
                    .file
                    .set_len(self.num_states as u64 * entry)
                    .map_err(failed)?;
                for (at, values) in starts(x) {
                    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
                    vector
                        .file
                        .write_all_at(&bytes, at as u64 * entry)
                        .map_err(failed)?;
                }
                PassVector::File(&vector.file)
            }
            None => {
                in_memory = vec![[0u32; NP]; self.num_states];
                for (at, values) in starts(x) {
                    in_memory[at] = values;
                }
                PassVector::Memory(SharedVec(in_memory.as_mut_ptr()))
            }
        };
        let vector_path = file.map(|f| f.path.as_path());
        let to_do: Vec<usize> = self
            .rounds
            .iter()
            .map(|&b| self.blocks[b].group_offsets.len() - 1)
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
                        tiles: &self.tiles,
                        key: self.tiles.key(b, g),
                        home_start: self.blocks[b].home_starts.get(g).copied().unwrap_or(0),
                        is_home: b == 0,
                        lanes,
                        avx2,
                        vector,
                    };
                    // SAFETY: a vector in memory has the `num_states` entries
                    // of `in_memory`, which outlives `in_rounds` and is
                    // touched by nothing else meanwhile; `in_rounds` hands
                    // item `g` of round `i` to one thread only, the groups of
                    // a block hold disjoint sets of states, and the rounds
                    // before ended at its barrier: the entries of the group
                    // are this call's alone. A vector in a file is read and
                    // written through positioned calls only.
                    unsafe { run.run(0, &mut local) }.map_err(|e| {
                        let path = vector_path.unwrap_or(Path::new("(memory)"));
                        io_failed("cannot read or write the pass vector", path, e)
                    })
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
        let ran = in_rounds(threads, &to_do, control, worker, |_| {});
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
        match file {
            None => in_memory.iter().for_each(|values| add(values)),
            Some(vector) => {
                let mut chunk = vec![0u8; (1 << 20) * NP];
                let total = self.num_states as u64 * entry;
                let mut at = 0u64;
                while at < total {
                    let n = chunk.len().min((total - at) as usize);
                    vector
                        .file
                        .read_exact_at(&mut chunk[..n], at)
                        .map_err(|e| io_failed("cannot read the pass vector", &vector.path, e))?;
                    let words: Vec<u32> = chunk[..n]
                        .chunks_exact(4)
                        .map(|w| u32::from_ne_bytes(w.try_into().expect("4 bytes")))
                        .collect();
                    add(&words);
                    at += n as u64;
                }
            }
        }
        Ok(sums.map(|s| (s % q) as u32))
    }

    /// Reads group `g` of block `b` into `copy`, as [`GroupCopy::fill`] makes
    /// it from a block in memory.
    fn load(&self, b: usize, g: usize, copy: &mut GroupCopy) -> Result<()> {
        let block = &self.blocks[b];
        let (start, end) = (
            block.group_offsets[g] as usize,
            block.group_offsets[g + 1] as usize,
        );
        let len = end - start;
        let read = |into: &mut [u8], at: u64| {
            self.file
                .read_exact_at(into, at)
                .map_err(|e| io_failed("cannot read the graph from", &self.path, e))
        };
        let local = &mut copy.block;
        local.first_col = block.first_col;
        local.max_group = len;
        local.group_offsets.clear();
        local.group_offsets.extend([0, len as u32]);
        local.chunk_offsets.clear();
        let width = block.width;
        local.chunk_offsets.extend(
            block.chunk_offsets[g << width..=(g + 1) << width]
                .iter()
                .map(|&p| p - start as u32),
        );
        local.cols.resize_with(width, Default::default);
        let mut at = block.parts[g];
        for (j, col) in local.cols.iter_mut().enumerate() {
            let count = block.others[g * width + j] as usize;
            col.info.resize(len, 0);
            read(&mut col.info, at)?;
            at += len as u64;
            col.others.resize(count + 1, 0);
            // SAFETY: `u32`s have no padding and take any byte pattern: the
            // first `count` entries' memory as bytes, for this statement.
            let raw = unsafe {
                std::slice::from_raw_parts_mut(col.others.as_mut_ptr() as *mut u8, 4 * count)
            };
            read(raw, at)?;
            at += 4 * count as u64;
            for s in &mut col.others[..count] {
                *s = u32::from_le(*s);
            }
            col.others[count] = 0;
            col.set_marks();
            // The step reads sources unchecked: a part that a damaged file
            // gave is refused here, never stepped through.
            let counted: usize = col.info.iter().map(|&b| usize::from(b & COUNT_MASK)).sum();
            let outside = col.others[..count].iter().any(|&s| s as usize >= len);
            if counted != count || outside {
                return Err(Error::Failed(format!(
                    "the graph file {} is damaged: group {g} of block {b}, column {j}",
                    self.path.display()
                )));
            }
        }
        Ok(())
    }
}

impl Drop for SpilledGraph {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A pass's vector file, removed when the pass ends.
struct ScratchFile {
    file: File,
    path: PathBuf,
}

impl ScratchFile {
    fn create(dir: &Path) -> Result<ScratchFile> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("hex-pass-{}-{n}.vector", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_failed("cannot create the pass vector", &path, e))?;
        Ok(ScratchFile { file, path })
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
