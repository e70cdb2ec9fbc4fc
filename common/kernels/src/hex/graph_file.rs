//! A spilled graph as one self-describing run of bytes, so that a graph
//! built once can be handed to every worker of a job as stage data: the
//! groups' parts as [`HexGraph::spill`](super::HexGraph::spill) writes them,
//! then the index a pass holds in memory, then a trailer (the index's length,
//! its CRC-32 and `HXG1`). All numbers are little-endian.
//!
//! The index is checked whole when it is read: a pass writes its vector
//! through the tiles and group offsets without bounds checks, so every range
//! they name must lie inside the vector, and the groups of a block must not
//! share a state. (Each group's part is checked when a pass reads it.)

use super::tiles::Tiles;
use crate::spill::Stored;
use crate::{Error, Result};

const MAGIC: &[u8; 4] = b"HXG1";
/// The index's length (u64), its CRC-32 (u32) and the magic.
const TRAILER: u64 = 16;
/// The largest side a spilled graph can hold: a pattern of the vector's
/// tiles is a `u32` of `side` bits.
const MAX_SIDE: u32 = 24;

/// What a pass holds of a spilled graph in memory: where each group's part
/// is, and the vector's tiles.
pub(super) struct GraphIndex {
    pub(super) side: u32,
    pub(super) num_states: usize,
    pub(super) blocks: Vec<SpilledBlock>,
    pub(super) tiles: Tiles,
    /// The top-row states: their entries of the vector, and their occupied
    /// cells (the power of `x` they start with).
    pub(super) top_row: Vec<(u32, u32)>,
}

/// A block without its gather lists: where each group's part is.
pub(super) struct SpilledBlock {
    pub(super) first_col: usize,
    pub(super) width: usize,
    pub(super) group_offsets: Vec<u32>,
    pub(super) chunk_offsets: Vec<u32>,
    /// Per group: the start of its part (one more entry: the end).
    pub(super) parts: Vec<u64>,
    /// Per group and column: the number of other sources.
    pub(super) others: Vec<u32>,
    /// Per group: where it starts in the vector, for the first block.
    pub(super) home_starts: Vec<usize>,
}

/// The index of `graph` as bytes, then the trailer: what follows its parts.
pub(super) fn encode_index(graph: &GraphIndex) -> Vec<u8> {
    let mut out = Index::default();
    out.u32(graph.side);
    out.u64(graph.num_states as u64);
    out.u32(graph.blocks.len() as u32);
    for (b, block) in graph.blocks.iter().enumerate() {
        out.u32(block.first_col as u32);
        out.u32(block.width as u32);
        out.u32((block.group_offsets.len() - 1) as u32);
        out.u32s(&block.group_offsets);
        out.u32s(&block.chunk_offsets);
        block.parts.iter().for_each(|&p| out.u64(p));
        out.u32s(&block.others);
        graph.tiles.keys()[b]
            .iter()
            .for_each(|&k| out.u32(k as u32));
    }
    out.u32s(graph.tiles.starts());
    out.u64(graph.top_row.len() as u64);
    for &(at, degree) in &graph.top_row {
        out.u32(at);
        out.u32(degree);
    }
    let len = out.0.len() as u64;
    let crc = crc32fast::hash(&out.0);
    out.u64(len);
    out.u32(crc);
    out.0.extend_from_slice(MAGIC);
    out.0
}

/// The index of the spilled graph whose parts, index and trailer are
/// `stored`, checked.
pub(super) fn decode(stored: &dyn Stored) -> Result<GraphIndex> {
    let total = stored.len();
    if total < TRAILER {
        return Err(damaged(format!("{total} bytes are too few for a graph")));
    }
    let trailer = stored.read_range(total - TRAILER..total)?;
    if &trailer[12..] != MAGIC {
        return Err(damaged("it does not end with HXG1".into()));
    }
    let index_len = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let index_start = (total - TRAILER)
        .checked_sub(index_len)
        .ok_or_else(|| damaged(format!("its index of {index_len} bytes is longer than it")))?;
    let bytes = stored.read_range(index_start..total - TRAILER)?;
    let crc = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
    if crc32fast::hash(&bytes) != crc {
        return Err(damaged("its index does not match its checksum".into()));
    }
    let mut input = Reader {
        bytes: &bytes,
        at: 0,
    };
    let side = input.u32()?;
    if side == 0 || side > MAX_SIDE {
        return Err(damaged(format!("side {side}")));
    }
    let num_states = usize::try_from(input.u64()?).unwrap_or(usize::MAX);
    if num_states > u32::MAX as usize {
        return Err(damaged(format!("{num_states} states")));
    }
    let block_count = input.u32()? as usize;
    let mut blocks = Vec::new();
    let mut keys = Vec::new();
    let mut next_col = 0;
    for _ in 0..block_count {
        let first_col = input.u32()? as usize;
        let width = input.u32()? as usize;
        if first_col != next_col || width == 0 || first_col + width > side as usize {
            return Err(damaged(format!(
                "a block of columns {first_col}..{}",
                first_col + width
            )));
        }
        next_col += width;
        let groups = input.u32()? as usize;
        let group_offsets = input.u32s(groups + 1)?;
        let chunk_offsets = input.u32s((groups << width) + 1)?;
        let parts = (0..=groups)
            .map(|_| input.u64())
            .collect::<Result<Vec<_>>>()?;
        let others = input.u32s(groups * width)?;
        let block_keys = (0..groups)
            .map(|_| input.u32().map(|k| k as usize))
            .collect::<Result<Vec<_>>>()?;
        blocks.push(SpilledBlock {
            first_col,
            width,
            group_offsets,
            chunk_offsets,
            parts,
            others,
            home_starts: Vec::new(),
        });
        keys.push(block_keys);
    }
    if blocks.is_empty() || next_col != side as usize {
        return Err(damaged(format!(
            "its blocks cover {next_col} of {side} columns"
        )));
    }
    let starts = input.u32s((1 << side) + 1)?;
    let top_row_len = usize::try_from(input.u64()?).unwrap_or(usize::MAX);
    if top_row_len > num_states {
        return Err(damaged(format!("{top_row_len} top-row states")));
    }
    let top_row = (0..top_row_len)
        .map(|_| Ok((input.u32()?, input.u32()?)))
        .collect::<Result<Vec<_>>>()?;
    if input.at != bytes.len() {
        return Err(damaged("its index has bytes after its end".into()));
    }
    checked(
        GraphIndex {
            side,
            num_states,
            blocks,
            tiles: Tiles::from_parts(starts, keys),
            top_row,
        },
        index_start,
    )
}

/// `index` checked whole, as a pass needs it (every range inside the vector,
/// no two groups of a block on one tile, the groups' parts one after
/// another up to `parts_end`), with its first block's starts derived.
pub(super) fn checked(mut index: GraphIndex, parts_end: u64) -> Result<GraphIndex> {
    let num_states = index.num_states;
    let starts = index.tiles.starts();
    check_states(starts, num_states, "the tiles' starts")?;
    let mut at = 0;
    for (b, block) in index.blocks.iter().enumerate() {
        check_block(b, block, &index.tiles.keys()[b], starts, num_states, at)?;
        at = block.parts[block.parts.len() - 1];
    }
    if at != parts_end {
        return Err(damaged(format!(
            "its parts end at byte {at}, its index starts at {parts_end}"
        )));
    }
    if let Some(&(at, _)) = index
        .top_row
        .iter()
        .find(|(at, _)| *at as usize >= num_states)
    {
        return Err(damaged(format!("a top-row state at {at}")));
    }
    // The first block's groups are contiguous runs of the vector: its
    // columns are the patterns' low bits.
    let home_starts = (0..index.blocks[0].group_offsets.len() - 1)
        .map(|g| index.tiles.starts()[index.tiles.key(0, g)] as usize)
        .collect();
    index.blocks[0].home_starts = home_starts;
    Ok(index)
}

/// Offsets into the vector: from 0, never decreasing, to `num_states`.
fn check_states(offsets: &[u32], num_states: usize, what: &str) -> Result<()> {
    let increasing = offsets.windows(2).all(|w| w[0] <= w[1]);
    if offsets.first() != Some(&0)
        || !increasing
        || offsets.last().copied() != Some(num_states as u32)
    {
        return Err(damaged(format!("{what} do not run from 0 to {num_states}")));
    }
    Ok(())
}

/// A block's groups: their chunks partition the states in order, each chunk
/// is exactly one tile of the vector, no two groups share a tile, and their
/// parts follow one another from `parts_start`, each as long as its columns
/// (a byte a state and four a source).
fn check_block(
    b: usize,
    block: &SpilledBlock,
    keys: &[usize],
    starts: &[u32],
    num_states: usize,
    parts_start: u64,
) -> Result<()> {
    let what = |thing: &str| format!("block {b}'s {thing}");
    check_states(&block.group_offsets, num_states, &what("groups"))?;
    check_states(&block.chunk_offsets, num_states, &what("chunks"))?;
    let width = block.width;
    let groups = block.group_offsets.len() - 1;
    let window = ((1usize << width) - 1) << block.first_col;
    let patterns = starts.len() - 1;
    let mut seen = keys.to_vec();
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err(damaged(what("groups share a tile")));
    }
    for (g, &key) in keys.iter().enumerate() {
        if key & window != 0 || key >= patterns {
            return Err(damaged(what(&format!("group {g}'s key {key}"))));
        }
        if block.chunk_offsets[g << width] != block.group_offsets[g] {
            return Err(damaged(what(&format!("group {g}'s first chunk"))));
        }
        for m in 0..1usize << width {
            let pattern = key | m << block.first_col;
            let tile = starts[pattern + 1] - starts[pattern];
            let chunk = (g << width) + m;
            if block.chunk_offsets[chunk + 1] - block.chunk_offsets[chunk] != tile {
                return Err(damaged(what(&format!("group {g}'s chunk {m}"))));
            }
        }
    }
    if block.parts[0] != parts_start {
        return Err(damaged(what("first part")));
    }
    for g in 0..groups {
        let states = u64::from(block.group_offsets[g + 1] - block.group_offsets[g]);
        let sources: u64 = block.others[g * width..(g + 1) * width]
            .iter()
            .map(|&n| u64::from(n))
            .sum();
        if block.parts[g].checked_add(width as u64 * states + 4 * sources)
            != Some(block.parts[g + 1])
        {
            return Err(damaged(what(&format!("group {g}'s part"))));
        }
    }
    Ok(())
}

pub(super) fn damaged(what: String) -> Error {
    Error::Failed(format!("the spilled hex graph is damaged: {what}"))
}

#[derive(Default)]
struct Index(Vec<u8>);

impl Index {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u32s(&mut self, values: &[u32]) {
        values.iter().for_each(|&v| self.u32(v));
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| damaged("its index ends early".into()))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        let bytes = self.take(n.saturating_mul(4))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex::HexGraph;
    use crate::spill::{MemorySpill, Spill};

    /// The graph's bytes with `change` made to its index, written with a
    /// good checksum: what a faulty writer, not damaged storage, would give.
    fn rewritten(graph: &HexGraph, change: impl FnOnce(&mut GraphIndex)) -> Vec<u8> {
        let mut spill = MemorySpill::default();
        graph.spill(&mut spill).unwrap();
        let stored = spill.keep_run(0).unwrap();
        let mut index = decode(stored.as_ref()).unwrap();
        let parts_len = index.blocks.last().unwrap().parts.last().copied().unwrap();
        let mut bytes = stored.read_range(0..parts_len).unwrap();
        change(&mut index);
        bytes.extend(encode_index(&index));
        bytes
    }

    #[test]
    fn an_index_that_would_take_a_pass_outside_its_vector_is_refused() {
        let graph = HexGraph::build(5).unwrap();
        let good = rewritten(&graph, |_| {});
        assert!(decode(&good).is_ok());
        let starts = |g: &GraphIndex| g.tiles.starts().to_vec();
        let keys = |g: &GraphIndex| g.tiles.keys().to_vec();
        type Change<'a> = Box<dyn FnOnce(&mut GraphIndex) + 'a>;
        let changes: Vec<(&str, Change<'_>)> = vec![
            (
                "two groups on one tile",
                Box::new(|g| {
                    let mut k = keys(g);
                    k[1][1] = k[1][0];
                    g.tiles = Tiles::from_parts(starts(g), k);
                }),
            ),
            (
                "a tile one state longer",
                Box::new(|g| {
                    let mut s = starts(g);
                    s[3] += 1;
                    g.tiles = Tiles::from_parts(s, keys(g));
                }),
            ),
            (
                "a key inside its block's columns",
                Box::new(|g| {
                    let mut k = keys(g);
                    k[0][0] |= 1;
                    g.tiles = Tiles::from_parts(starts(g), k);
                }),
            ),
            (
                "a group one state longer",
                Box::new(|g| g.blocks[0].group_offsets[1] += 1),
            ),
            (
                "a chunk one state longer",
                Box::new(|g| g.blocks[1].chunk_offsets[1] += 1),
            ),
            (
                "more sources than the part",
                Box::new(|g| g.blocks[1].others[0] += 1),
            ),
            ("a part moved", Box::new(|g| g.blocks[0].parts[1] += 1)),
            (
                "a top-row state past the vector",
                Box::new(|g| {
                    g.top_row[0].0 = g.num_states as u32;
                }),
            ),
            (
                "a block of another width",
                Box::new(|g| g.blocks[0].width -= 1),
            ),
            ("one state more", Box::new(|g| g.num_states += 1)),
        ];
        for (what, change) in changes {
            let bytes = rewritten(&graph, change);
            let err = decode(&bytes).err();
            assert!(
                err.as_ref()
                    .is_some_and(|e| e.to_string().contains("damaged")),
                "{what}: {err:?}"
            );
        }
    }
}
