//! The spilled graph built in parts, no part needing the whole graph: any
//! worker computes the graph's layout (its blocks, groups, chunks and the
//! vector's tiles) from the number of states of each occupancy pattern
//! ([`super::states`]), and each part's shard builds the gather lists of a
//! run of groups by stepping the group's states and ranking the targets,
//! with no search and no table of all states. A part needs one group at a
//! time a thread (the largest about 2% of the states), where the build of
//! the whole graph holds all of it and a hash table besides.
//!
//! The parts are the groups' parts of the spilled graph in order (block after
//! block), each followed by a trailer that says which groups it holds and
//! their number of other sources a column (checked by CRC-32, ending in
//! `HXGP`); [`SpilledGraph::open_parts`] joins them into one graph whose
//! index it computes and checks as [`SpilledGraph::open`] checks a stored one.
//!
//! The graph is the one the search builds but for the order of the states of
//! each pattern (here the order of the packed states, there the order the
//! search found them): the same groups, chunks, tiles and sources, so the
//! same values a pass (a test checks both). A checkpoint of a pass over one
//! does not resume a pass over the other; a job's point shards all read the
//! one graph of the job.

use std::ops::Range;
use std::sync::Arc;

use super::frontier::{Word, advance, label};
use super::graph::{COUNT_MASK, OCCUPIED, block_layout, default_block_width};
use super::graph_file::{self, GraphIndex, SpilledBlock, damaged};
use super::spilled::SpilledGraph;
use super::states::Labellings;
use super::tiles::Tiles;
use super::{BUILD_WORK, NARROW_SIDES};
use crate::parallel::try_map_indices;
use crate::spill::{Spill, Stored};
use crate::{Control, Error, Result};

const MAGIC: &[u8; 4] = b"HXGP";
/// The trailer's length (u64), its CRC-32 (u32) and the magic.
const TRAILER_END: u64 = 16;
/// The most parts a graph is built in.
pub const MAX_GRAPH_PARTS: u32 = 4096;
/// Bytes of spilled graph a part holds by default.
const PART_BYTES: u64 = 256 << 20;
/// Bytes of spilled graph a state, about (see [`graph_part_count`]).
const SPILLED_BYTES_PER_STATE: u64 = 90;

/// The default number of parts of side `side`'s graph: one a
/// [`PART_BYTES`] of its spilled form (5 at side 17, 14 at 18, 110 at 20).
pub fn graph_part_count(side: u32) -> u32 {
    let bytes = super::estimated_state_count(side) * SPILLED_BYTES_PER_STATE;
    bytes
        .div_ceil(PART_BYTES)
        .clamp(1, u64::from(MAX_GRAPH_PARTS)) as u32
}

/// The most parts side `side`'s graph can be built in: one group each, and
/// at most [`MAX_GRAPH_PARTS`].
pub fn max_graph_parts(side: u32) -> u32 {
    if super::validate_side(side).is_err() {
        return 0;
    }
    group_count(side as usize).min(MAX_GRAPH_PARTS as usize) as u32
}

/// The groups of side `side`'s graph, without computing its layout: every
/// occupancy outside a block's columns has states (some pattern of the
/// block's columns with it has a run), so a block of `w` columns has
/// `2^(side - w)` groups.
fn group_count(side: usize) -> usize {
    block_layout(side, default_block_width(side))
        .iter()
        .map(|cols| 1usize << (side - cols.len()))
        .sum()
}

/// The graph without its gather lists: what every part's shard and every
/// reader computes alike.
struct Layout {
    side: usize,
    labellings: Labellings,
    /// Where each pattern's states start in the vector (the tiles).
    starts: Vec<u32>,
    blocks: Vec<LayoutBlock>,
}

struct LayoutBlock {
    first_col: usize,
    width: usize,
    /// Per group, largest first: the occupancy outside the block's columns.
    keys: Vec<usize>,
    group_offsets: Vec<u32>,
    chunk_offsets: Vec<u32>,
}

impl Layout {
    fn new(side: usize) -> Layout {
        let labellings = Labellings::new();
        let counts: Vec<u32> = (0..1u32 << side).map(|p| labellings.count(p)).collect();
        let mut starts = Vec::with_capacity(counts.len() + 1);
        let mut at = 0u32;
        for &c in &counts {
            starts.push(at);
            at += c;
        }
        starts.push(at);
        let blocks = block_layout(side, default_block_width(side))
            .into_iter()
            .map(|cols| layout_block(side, cols, &counts))
            .collect();
        Layout {
            side,
            labellings,
            starts,
            blocks,
        }
    }

    fn num_states(&self) -> usize {
        self.starts[self.starts.len() - 1] as usize
    }

    /// Every group as (block, group), in the order of the spilled graph.
    fn groups(&self) -> Vec<(usize, usize)> {
        self.blocks
            .iter()
            .enumerate()
            .flat_map(|(b, block)| (0..block.keys.len()).map(move |g| (b, g)))
            .collect()
    }

    fn group_states(&self, b: usize, g: usize) -> usize {
        let block = &self.blocks[b];
        (block.group_offsets[g + 1] - block.group_offsets[g]) as usize
    }

    /// The bytes of group `g` of block `b`'s part, whose columns have
    /// `others` other sources each: a byte a state and column, four a source.
    fn group_bytes(&self, b: usize, g: usize, others: &[u32]) -> u64 {
        (self.blocks[b].width * self.group_states(b, g)) as u64
            + 4 * others.iter().map(|&n| u64::from(n)).sum::<u64>()
    }

    /// The groups of each of `parts` parts: runs of about equal bytes (a
    /// byte a state and column, and about one source of four bytes).
    fn part_ranges(&self, parts: u32) -> Vec<Range<usize>> {
        let groups = self.groups();
        let weight =
            |&(b, g): &(usize, usize)| (self.group_states(b, g) * self.blocks[b].width) as u64;
        let total: u64 = groups.iter().map(weight).sum();
        let parts = (parts as usize).clamp(1, groups.len());
        let mut ranges = Vec::with_capacity(parts);
        let (mut start, mut done) = (0, 0u64);
        for (i, group) in groups.iter().enumerate() {
            done += weight(group);
            let part = ranges.len() as u64 + 1;
            // Close the part once it holds its share, leaving a group for
            // each part still to come.
            let left = groups.len() - i - 1;
            let parts_left = parts - ranges.len() - 1;
            if parts_left > 0 && (done * parts as u64 >= total * part || left == parts_left) {
                ranges.push(start..i + 1);
                start = i + 1;
            }
        }
        ranges.push(start..groups.len());
        ranges
    }
}

/// Block `cols`'s groups in the order the search's build gives them (largest
/// first, then by key) and their chunks, from the patterns' counts.
fn layout_block(side: usize, cols: Range<usize>, counts: &[u32]) -> LayoutBlock {
    let window = cols.clone().fold(0usize, |w, c| w | 1 << c);
    let mut sizes = vec![0u32; 1 << side];
    for (p, &c) in counts.iter().enumerate() {
        sizes[p & !window] += c;
    }
    let mut keys: Vec<usize> = (0..sizes.len()).filter(|&k| sizes[k] > 0).collect();
    keys.sort_unstable_by_key(|&k| (std::cmp::Reverse(sizes[k]), k));
    let mut group_offsets = Vec::with_capacity(keys.len() + 1);
    let mut chunk_offsets = Vec::with_capacity((keys.len() << cols.len()) + 1);
    let mut at = 0u32;
    for &key in &keys {
        group_offsets.push(at);
        for m in 0..1usize << cols.len() {
            chunk_offsets.push(at);
            at += counts[key | m << cols.start];
        }
    }
    group_offsets.push(at);
    chunk_offsets.push(at);
    LayoutBlock {
        first_col: cols.start,
        width: cols.len(),
        keys,
        group_offsets,
        chunk_offsets,
    }
}

/// Builds part `part` of `parts` of side `side`'s spilled graph on up to
/// `threads` threads (a group a thread at a time) and writes it to one run of
/// `spill`; counts [`BUILD_WORK`] units on `control` as it goes and stops when
/// it is cancelled.
pub fn build_graph_part(
    side: u32,
    part: u32,
    parts: u32,
    threads: usize,
    control: &Control,
    spill: &mut dyn Spill,
) -> Result<Arc<dyn Stored>> {
    super::validate_side(side)?;
    control.check()?;
    let layout = Layout::new(side as usize);
    let groups = layout.groups();
    let most = groups.len().min(MAX_GRAPH_PARTS as usize);
    if parts == 0 || parts as usize > most || part >= parts {
        return Err(Error::InvalidArgument(format!(
            "hex graph part {part} of {parts}: side {side}'s graph is built in 1 to {most} parts"
        )));
    }
    let ranges = layout.part_ranges(parts);
    let range = &ranges[part as usize];
    let mine = &groups[range.clone()];
    let states: u64 = mine
        .iter()
        .map(|&(b, g)| layout.group_states(b, g) as u64)
        .sum();
    let mut others = Vec::new();
    let (mut done, mut counted) = (0u64, 0u64);
    for &(b, g) in mine {
        let counts = match side <= NARROW_SIDES {
            true => group_part::<u64>(&layout, b, g, threads, spill),
            false => group_part::<u128>(&layout, b, g, threads, spill),
        }?;
        others.extend(counts);
        done += layout.group_states(b, g) as u64;
        let units = done * BUILD_WORK / states.max(1);
        control.add_work(units - counted);
        counted = units;
        control.check()?;
    }
    let mut body = Vec::with_capacity(32 + 4 * others.len());
    for v in [side, parts, part] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    for v in [
        layout.num_states() as u64,
        range.start as u64,
        range.len() as u64,
    ] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    others
        .iter()
        .for_each(|v| body.extend_from_slice(&v.to_le_bytes()));
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&((body.len() as u64).to_le_bytes()));
    body.extend_from_slice(&crc.to_le_bytes());
    body.extend_from_slice(MAGIC);
    spill.write(&body)?;
    control.add_work(BUILD_WORK - counted);
    let run = spill.end_run()?;
    spill.keep_run(run)
}

/// Writes group `g` of block `b`'s part of the spilled graph to `spill`
/// (each column's byte a target, then its other sources as positions in the
/// group, as [`super::HexGraph::spill`] writes them), its columns built on up
/// to `threads` threads; returns its other sources a column. It holds the
/// group's states and a column's lists a thread.
fn group_part<W: Word>(
    layout: &Layout,
    b: usize,
    g: usize,
    threads: usize,
    spill: &mut dyn Spill,
) -> Result<Vec<u32>> {
    let block = &layout.blocks[b];
    let (width, first_col, key) = (block.width, block.first_col, block.keys[g]);
    let base = block.group_offsets[g];
    let chunks: Vec<usize> = block.chunk_offsets[g << width..=(g + 1) << width]
        .iter()
        .map(|&c| (c - base) as usize)
        .collect();
    let mut states: Vec<W> = Vec::with_capacity(chunks[1 << width]);
    for m in 0..1usize << width {
        let pattern = (key | m << first_col) as u32;
        let count = chunks[m + 1] - chunks[m];
        states.extend((0..count as u32).map(|r| layout.labellings.state::<W>(pattern, r)));
    }
    let mut counts = Vec::with_capacity(width);
    let columns: Vec<usize> = (0..width).collect();
    for batch in columns.chunks(threads.max(1)) {
        let built = try_map_indices(batch.len(), threads, |k| {
            column_part(layout, &chunks, &states, first_col, batch[k])
        })?;
        for (bytes, count) in built {
            spill.write(&bytes)?;
            counts.push(count);
        }
    }
    Ok(counts)
}

/// Column `first_col + j` of a group whose states are `states`, its chunks
/// at `chunks`: the byte of each target and its other sources (as bytes), and
/// their number.
fn column_part<W: Word>(
    layout: &Layout,
    chunks: &[usize],
    states: &[W],
    first_col: usize,
    j: usize,
) -> Result<(Vec<u8>, u32)> {
    let (side, col, len) = (layout.side, first_col + j, states.len());
    let mut target = vec![u32::MAX; len];
    let mut info = vec![0u8; len];
    for m in 0..chunks.len() - 1 {
        let flipped = m ^ 1 << j;
        for pos in chunks[m]..chunks[m + 1] {
            let s = states[pos];
            let t = advance(s, side, col, label(s, col) == 0);
            if t == W::ZERO {
                continue;
            }
            let rank = layout
                .labellings
                .rank(t, side)
                .map(|r| chunks[flipped] + r as usize);
            let Some(at) = rank.filter(|&at| at < chunks[flipped + 1]) else {
                return Err(Error::Failed(format!(
                    "hex side {side}: a step of column {col} leads outside the states of its pattern"
                )));
            };
            if info[at] >= COUNT_MASK {
                return Err(Error::Failed(format!(
                    "hex side {side}: more sources for one state than a graph holds"
                )));
            }
            info[at] += 1;
            target[pos] = at as u32;
        }
    }
    let mut fill = Vec::with_capacity(len);
    let mut total = 0u32;
    for m in 0..chunks.len() - 1 {
        for byte in &mut info[chunks[m]..chunks[m + 1]] {
            fill.push(total);
            total += u32::from(*byte);
            if m >> j & 1 == 1 {
                *byte |= OCCUPIED;
            }
        }
    }
    let mut bytes = info;
    bytes.resize(len + 4 * total as usize, 0);
    // Sources by position, so that each target's list is ascending.
    for (pos, &at) in target.iter().enumerate() {
        if at != u32::MAX {
            let slot = &mut fill[at as usize];
            let to = len + 4 * *slot as usize;
            bytes[to..to + 4].copy_from_slice(&(pos as u32).to_le_bytes());
            *slot += 1;
        }
    }
    Ok((bytes, total))
}

/// One part's trailer, read and checked.
struct PartTrailer {
    side: u32,
    parts: u32,
    part: u32,
    num_states: u64,
    first_group: u64,
    groups: u64,
    others: Vec<u32>,
    /// Where the trailer starts in its stored bytes: the part's groups end
    /// there.
    start: u64,
}

/// The trailer of the part that ends at byte `end` of `stored`.
fn read_trailer(stored: &dyn Stored, end: u64, index: usize) -> Result<PartTrailer> {
    let bad = |what: &str| damaged(format!("part {index} from the end {what}"));
    if end < TRAILER_END {
        return Err(bad("is too short"));
    }
    let tail = stored.read_range(end - TRAILER_END..end)?;
    if &tail[12..] != MAGIC {
        return Err(bad("does not end with HXGP"));
    }
    let body_len = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    let start = (end - TRAILER_END)
        .checked_sub(body_len)
        .filter(|_| body_len >= 36 && (body_len - 36) % 4 == 0)
        .ok_or_else(|| bad("has a trailer of a wrong length"))?;
    let body = stored.read_range(start..end - TRAILER_END)?;
    if crc32fast::hash(&body) != u32::from_le_bytes(tail[8..12].try_into().expect("4 bytes")) {
        return Err(bad("does not match its checksum"));
    }
    let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    Ok(PartTrailer {
        side: u32_at(0),
        parts: u32_at(4),
        part: u32_at(8),
        num_states: u64_at(12),
        first_group: u64_at(20),
        groups: u64_at(28),
        others: (36..body.len()).step_by(4).map(u32_at).collect(),
        start,
    })
}

/// The parts' groups as one run of bytes (without their trailers): each a
/// range of stored bytes.
struct Joined {
    pieces: Vec<(Arc<dyn Stored>, u64)>,
    /// Where each piece starts in the run, and the end.
    starts: Vec<u64>,
}

impl Stored for Joined {
    fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            let at = offset + filled as u64;
            if at >= self.len() {
                break;
            }
            let i = self.starts.partition_point(|&s| s <= at) - 1;
            let n = (buf.len() - filled).min((self.starts[i + 1] - at) as usize);
            let (stored, from) = &self.pieces[i];
            stored.read_exact_at(from + at - self.starts[i], &mut buf[filled..filled + n])?;
            filled += n;
        }
        Ok(filled)
    }
}

impl SpilledGraph {
    /// The graph of side `side` whose parts [`build_graph_part`] wrote, in
    /// order, one or more of them one after another in each of `stored`
    /// (a stage's outputs may come joined): every trailer checked (its
    /// checksum, its place among the parts, its groups' bytes), the index
    /// computed and checked as [`SpilledGraph::open`] checks a stored one.
    pub fn open_parts(side: u32, stored: Vec<Arc<dyn Stored>>) -> Result<SpilledGraph> {
        super::validate_side(side)?;
        let layout = Layout::new(side as usize);
        let groups = layout.groups();
        // Each part's trailer says how many bytes its groups take: the parts
        // are found from the end of each stored run.
        let data_len = |t: &PartTrailer| -> Option<u64> {
            let first = usize::try_from(t.first_group).ok()?;
            let mine = groups.get(first..first.checked_add(usize::try_from(t.groups).ok()?)?)?;
            let (mut at, mut bytes) = (0, 0);
            for &(b, g) in mine {
                let width = layout.blocks[b].width;
                bytes += layout.group_bytes(b, g, t.others.get(at..at + width)?);
                at += width;
            }
            (at == t.others.len()).then_some(bytes)
        };
        let mut found = Vec::new();
        for run in &stored {
            let mut end = run.len();
            let mut in_run = Vec::new();
            while end > 0 {
                let trailer = read_trailer(run.as_ref(), end, found.len() + in_run.len())?;
                let start = data_len(&trailer)
                    .and_then(|len| trailer.start.checked_sub(len))
                    .ok_or_else(|| {
                        damaged(format!(
                            "part {} holds bytes its groups do not",
                            trailer.part
                        ))
                    })?;
                end = start;
                in_run.push((run.clone(), start, trailer));
            }
            found.extend(in_run.into_iter().rev());
        }
        let count = found.len() as u32;
        let mut others_by_group: Vec<&[u32]> = Vec::with_capacity(groups.len());
        let mut pieces = Vec::with_capacity(found.len());
        let mut starts = vec![0u64];
        for (i, (run, start, trailer)) in found.iter().enumerate() {
            let bad = |what: String| damaged(format!("part {i} {what}"));
            if (trailer.side, trailer.parts, trailer.part) != (side, count, i as u32) {
                return Err(bad(format!(
                    "is part {} of {} of side {}, expected part {i} of {count} of side {side}",
                    trailer.part, trailer.parts, trailer.side
                )));
            }
            if trailer.num_states != layout.num_states() as u64
                || trailer.first_group != others_by_group.len() as u64
            {
                return Err(bad("does not follow the part before it".into()));
            }
            let mut at = 0;
            for &(b, _) in &groups[others_by_group.len()..][..trailer.groups as usize] {
                let width = layout.blocks[b].width;
                others_by_group.push(&trailer.others[at..at + width]);
                at += width;
            }
            starts.push(starts[i] + (trailer.start - start));
            pieces.push((run.clone(), *start));
        }
        if others_by_group.len() != groups.len() {
            return Err(damaged(format!(
                "its parts hold {} of its {} groups",
                others_by_group.len(),
                groups.len()
            )));
        }
        let mut at = 0u64;
        let mut next = others_by_group.iter();
        let blocks = layout
            .blocks
            .iter()
            .enumerate()
            .map(|(b, block)| {
                let mut parts = vec![at];
                let mut others = Vec::with_capacity(block.keys.len() * block.width);
                for g in 0..block.keys.len() {
                    let counts = next.next().expect("a group's counts");
                    at += layout.group_bytes(b, g, counts);
                    others.extend_from_slice(counts);
                    parts.push(at);
                }
                SpilledBlock {
                    first_col: block.first_col,
                    width: block.width,
                    group_offsets: block.group_offsets.clone(),
                    chunk_offsets: block.chunk_offsets.clone(),
                    parts,
                    others,
                    home_starts: Vec::new(),
                }
            })
            .collect();
        // The top row's states: every pattern with all its runs on the top
        // piece, which starts with a power of x of its cells.
        let top_row = (1u32..1 << side)
            .map(|p| {
                let top = super::frontier::top_row_state::<u128>(u64::from(p), side as usize);
                let rank = layout
                    .labellings
                    .rank(top, side as usize)
                    .expect("a top-row state");
                (layout.starts[p as usize] + rank, p.count_ones())
            })
            .collect();
        let keys = layout.blocks.iter().map(|b| b.keys.clone()).collect();
        let index = graph_file::checked(
            GraphIndex {
                side,
                num_states: layout.num_states(),
                blocks,
                tiles: Tiles::from_parts(layout.starts, keys),
                top_row,
            },
            at,
        )?;
        Ok(SpilledGraph::from_index(
            index,
            Arc::new(Joined { pieces, starts }),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex::{HexGraph, PassOptions};
    use crate::spill::MemorySpill;

    const P: u32 = 1_000_000_007;

    /// The parts of side `side`'s graph, each built alone.
    fn built(side: u32, parts: u32) -> Vec<Arc<dyn Stored>> {
        (0..parts)
            .map(|part| {
                let mut spill = MemorySpill::default();
                build_graph_part(side, part, parts, 2, &Control::new(), &mut spill).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_graph_built_in_parts_gives_the_values_of_the_searched_graph() {
        for side in 1..=9u32 {
            let graph = HexGraph::build_parallel(side, 2).unwrap();
            let searched = graph.spill(&mut MemorySpill::default()).unwrap();
            for parts in [1, 2, 3, 7] {
                let parts = parts.min(max_graph_parts(side));
                let joined = SpilledGraph::open_parts(side, built(side, parts)).unwrap();
                assert_eq!(joined.num_states(), graph.num_states(), "side {side}");
                // The same groups, chunks, tiles and numbers of sources.
                let (a, b) = (joined.index(), searched.index());
                assert_eq!(a.tiles.starts(), b.tiles.starts(), "side {side}");
                assert_eq!(a.tiles.keys(), b.tiles.keys(), "side {side}");
                for (x, y) in a.blocks.iter().zip(&b.blocks) {
                    assert_eq!(
                        (&x.group_offsets, &x.chunk_offsets, &x.parts, &x.others),
                        (&y.group_offsets, &y.chunk_offsets, &y.parts, &y.others),
                        "side {side}, {parts} parts"
                    );
                }
                // The parts as a stage's outputs may come: joined in one run.
                let one_run: Vec<u8> = built(side, parts)
                    .iter()
                    .flat_map(|p| p.read_range(0..p.len()).unwrap())
                    .collect();
                let in_one = SpilledGraph::open_parts(side, vec![Arc::new(one_run)]).unwrap();
                for count in [1usize, 5, 16] {
                    let xs: Vec<u32> = (0..count as u32).map(|i| i * 7_919 + 2).collect();
                    let control = Control::new();
                    let got = joined
                        .evaluate_pass(&xs, P, &PassOptions::new(2, &control))
                        .unwrap();
                    let options = PassOptions::new(1, &control);
                    assert_eq!(in_one.evaluate_pass(&xs, P, &options).unwrap(), got);
                    assert_eq!(
                        got,
                        graph.evaluate_points(&xs, P),
                        "side {side}, {parts} parts"
                    );
                }
            }
        }
    }

    #[test]
    fn parts_split_the_groups_in_runs_of_about_equal_bytes() {
        for side in 1..=14 {
            let groups = Layout::new(side).groups().len();
            assert_eq!(group_count(side), groups, "side {side}");
        }
        let layout = Layout::new(12);
        let groups = layout.groups().len();
        for parts in [1u32, 2, 5, 64, groups as u32, groups as u32 + 10] {
            let ranges = layout.part_ranges(parts);
            assert_eq!(ranges.len(), (parts as usize).min(groups));
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[ranges.len() - 1].end, groups);
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            assert!(ranges.iter().all(|r| !r.is_empty()), "{parts} parts");
        }
        // Five parts of side 12: none holds more than twice its share.
        let weight = |r: &Range<usize>| -> u64 {
            layout.groups()[r.clone()]
                .iter()
                .map(|&(b, g)| (layout.group_states(b, g) * layout.blocks[b].width) as u64)
                .sum()
        };
        let ranges = layout.part_ranges(5);
        let total: u64 = ranges.iter().map(weight).sum();
        assert!(
            ranges.iter().all(|r| weight(r) <= 2 * total / 5),
            "{ranges:?}"
        );
    }

    #[test]
    fn parts_out_of_place_missing_or_damaged_are_refused() {
        let side = 7;
        let parts = built(side, 3);
        let refused = |parts: Vec<Arc<dyn Stored>>, what: &str| {
            let err = SpilledGraph::open_parts(side, parts).err().expect(what);
            assert!(err.to_string().contains("damaged"), "{what}: {err}");
        };
        refused(
            vec![parts[1].clone(), parts[0].clone(), parts[2].clone()],
            "swapped",
        );
        refused(parts[..2].to_vec(), "one missing");
        refused(built(6, 3), "another side");
        refused(
            vec![
                parts[0].clone(),
                parts[1].clone(),
                built(side, 4)[2].clone(),
            ],
            "another split",
        );
        let bytes = parts[1].read_range(0..parts[1].len()).unwrap();
        for at in [bytes.len() - 20, bytes.len() - 1, 0] {
            let mut changed = bytes.clone();
            changed[at] ^= 0x10;
            let with = vec![
                parts[0].clone(),
                Arc::new(changed) as Arc<dyn Stored>,
                parts[2].clone(),
            ];
            match at {
                // A changed group byte is the pass's to find (as in a stored
                // graph: its count against its marks, its sources' range).
                0 => assert!(SpilledGraph::open_parts(side, with).is_ok()),
                _ => refused(with, "a changed trailer"),
            }
        }
        let mut short = bytes.clone();
        short.remove(0);
        refused(
            vec![parts[0].clone(), Arc::new(short), parts[2].clone()],
            "a byte short",
        );
        let mut joined = parts[0].read_range(0..parts[0].len()).unwrap();
        joined.extend(&bytes[1..]);
        refused(
            vec![Arc::new(joined), parts[2].clone()],
            "joined, a byte short",
        );
        let mut longer = bytes.clone();
        longer.insert(0, 7);
        refused(
            vec![parts[0].clone(), Arc::new(longer), parts[2].clone()],
            "a byte more",
        );
        let err = build_graph_part(side, 3, 3, 1, &Control::new(), &mut MemorySpill::default());
        assert!(
            matches!(err, Err(Error::InvalidArgument(_))),
            "{:?}",
            err.err()
        );
    }

    #[test]
    fn a_part_counts_its_work_and_stops_when_cancelled() {
        let control = Control::new();
        build_graph_part(10, 1, 4, 2, &control, &mut MemorySpill::default()).unwrap();
        assert_eq!(control.work_done(), BUILD_WORK);
        let cancelled = Control::new();
        cancelled.cancel();
        let err = build_graph_part(10, 1, 4, 2, &cancelled, &mut MemorySpill::default());
        assert!(matches!(err, Err(Error::Cancelled)), "{:?}", err.err());
    }
}
