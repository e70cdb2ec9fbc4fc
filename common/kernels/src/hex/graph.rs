//! Construction of the frontier graph: all states, and the reversed transitions
//! (for every target state, the states that lead to it) of every column, stored
//! by blocks of consecutive columns.
//!
//! Deciding the cell of column `c` changes the occupancy of frontier position `c`
//! only (merges rename labels but never empty or fill a position). So for a block
//! `W` of consecutive columns, the states with the same occupancy outside `W` form
//! a group that is closed under the transitions of all columns of `W`: the sweep
//! can carry one group at a time through all the cell steps of a block while its
//! polynomials stay in cache. Each block numbers the states by group ("positions")
//! and stores its gather lists in these positions.
//!
//! Memory: the search keeps, per column, only the target of each state when the
//! occupancy of that column flips (4 bytes per state and column; a kept
//! occupancy maps every state the sweep can meet to itself, see [`Gather`]), and
//! a hash table of 16-byte slots at most three quarters full; each column's flips
//! are freed as soon as its gather list is built. The peak of the build is about
//! 10% above the finished graph.

use super::frontier::{Word, advance, label, top_row_state};
use crate::cache::prefetch;
use crate::parallel::map_indices;
use crate::{Control, Result};

/// Work units a build counts on its control: the search for the states (in
/// proportion to the states whose transitions are done, against their known
/// count), then the gather lists (in proportion to the columns done); a long
/// build shows progress as it goes.
pub const BUILD_WORK: u64 = 100;
/// Of [`BUILD_WORK`], the search's units; the gather lists have the rest.
const SEARCH_WORK: u64 = 70;

/// The work a build has counted on its control, raised to a new mark.
struct BuildProgress<'a> {
    control: &'a Control,
    counted: u64,
}

impl BuildProgress<'_> {
    /// Counts up to `units` (of [`BUILD_WORK`]), and stops the build if the
    /// control was cancelled.
    fn reach(&mut self, units: u64) -> Result<()> {
        let units = units.min(BUILD_WORK);
        if units > self.counted {
            self.control.add_work(units - self.counted);
            self.counted = units;
        }
        self.control.check()
    }
}

/// Marks a dropped transition while the graph is built.
const NONE: u32 = u32::MAX;

/// Default number of columns per block: two blocks per row. Wider blocks mean
/// fewer passes over the whole vectors, which cost more than the cache misses of
/// bigger groups (measured for sides 11 to 13); two blocks still leave
/// `2^(side/2)` or more groups to share among threads.
pub(crate) fn default_block_width(side: usize) -> usize {
    side.div_ceil(2).max(1)
}

/// A hash table from packed states (never 0) to their indices: open addressing
/// with linear probing (at most three quarters full), the key and the index of a slot side by side, so that a
/// lookup usually costs one cache miss, which [`StateTable::prefetch`] can start
/// early.
struct StateTable<W: Word> {
    /// `(state, index)` per slot (16 bytes for a `u64` state); state 0 marks an
    /// empty slot.
    slots: Vec<(W, u32)>,
    bits: u32,
    len: usize,
}

impl<W: Word> StateTable<W> {
    fn with_capacity(n: usize) -> Self {
        // At most three quarters full once `n` states are in.
        let bits = (n.max(8) * 4)
            .div_ceil(3)
            .next_power_of_two()
            .trailing_zeros();
        StateTable {
            slots: vec![(W::ZERO, 0); 1 << bits],
            bits,
            len: 0,
        }
    }

    #[inline]
    fn home(&self, state: W) -> usize {
        (state.fold64().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// Hints the CPU to load the slot where the search for `state` starts.
    #[inline]
    fn prefetch(&self, state: W) {
        prefetch(self.slots.as_ptr().wrapping_add(self.home(state)));
    }

    #[inline]
    fn get(&self, state: W) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            let (key, id) = self.slots[i];
            if key == state {
                return Some(id);
            }
            if key == W::ZERO {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The index of `state`, inserting it with index `next` if it is new.
    fn get_or_insert(&mut self, state: W, next: u32) -> u32 {
        if 4 * (self.len + 1) > 3 * self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            let (key, id) = self.slots[i];
            if key == state {
                return id;
            }
            if key == W::ZERO {
                self.slots[i] = (state, next);
                self.len += 1;
                return next;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits += 1;
        self.slots = vec![(W::ZERO, 0); 1 << self.bits];
        self.len = 0;
        for (key, id) in old {
            if key != W::ZERO {
                self.get_or_insert(key, id);
            }
        }
    }
}

/// The incoming transitions of one column, by target position.
///
/// Every target is its own source: in a state that the sweep can reach before
/// the cell of column `c` is decided, frontier positions `c - 1`, `c` and `c + 1`
/// hold mutually adjacent cells, so deciding the cell as the old one at position
/// `c` was (occupied or empty) changes nothing. The other sources are the states
/// whose occupancy at `c` flips into the target; they are stored in `others`,
/// and `info` holds their number per target (bits 0..7) and whether the decided
/// cell is occupied in the target (bit 7). Transitions out of states that cannot
/// occur before the step (their values are zero there) are left out.
///
/// The AVX2 step of the points plan reads sources unchecked, and relies on
/// two facts: `others` ends with one padding entry, and the sources of a target
/// lie in the target's group of the block (a flip at one of the block's columns
/// keeps the occupancy outside them, which is what defines a group; a test
/// checks both on every graph up to side 9, for every block width).
#[derive(Debug, Clone, Default)]
pub(crate) struct Gather {
    pub info: Vec<u8>,
    /// The other sources, target after target, and one padding entry.
    pub others: Vec<u32>,
    /// Offset in `others` of the sources of every [`MARK_EVERY`]-th target.
    pub marks: Vec<u32>,
}

/// Targets between two entries of [`Gather::marks`].
pub(crate) const MARK_EVERY: usize = 64;

/// Bits of [`Gather::info`]: the number of other sources ...
pub(crate) const COUNT_MASK: u8 = 0x7F;
/// ... and the occupancy of the decided cell.
pub(crate) const OCCUPIED: u8 = 0x80;

/// At most this many sources per target (itself included).
pub(crate) const MAX_SOURCES: usize = COUNT_MASK as usize + 1;

impl Gather {
    /// Offset in `others` of the sources of target `pos`.
    #[inline]
    pub fn offset(&self, pos: usize) -> usize {
        let first = pos - pos % MARK_EVERY;
        self.marks[pos / MARK_EVERY] as usize
            + self.info[first..pos]
                .iter()
                .map(|&b| usize::from(b & COUNT_MASK))
                .sum::<usize>()
    }

    /// Number of sources of target `pos` besides itself.
    #[inline(always)]
    pub fn count(&self, pos: usize) -> usize {
        usize::from(self.info[pos] & COUNT_MASK)
    }

    /// The sources of target `pos` (itself first), whose other sources start at
    /// `offset` in `others`, written into `buf`.
    #[inline(always)]
    pub fn sources<'a>(
        &self,
        pos: usize,
        offset: usize,
        buf: &'a mut [u32; MAX_SOURCES],
    ) -> &'a [u32] {
        let count = self.count(pos);
        buf[0] = pos as u32;
        buf[1..=count].copy_from_slice(&self.others[offset..offset + count]);
        &buf[..=count]
    }

    /// Sets `marks` from `info`.
    /// Sets [`Gather::marks`] from the counts of `info`; returns the number
    /// of other sources they add up to.
    pub(crate) fn set_marks(&mut self) -> usize {
        self.marks.clear();
        let mut at = 0usize;
        for chunk in self.info.chunks(MARK_EVERY) {
            self.marks.push(at as u32);
            at += chunk
                .iter()
                .map(|&b| usize::from(b & COUNT_MASK))
                .sum::<usize>();
        }
        at
    }

    /// Source, target pairs: every target with itself, and the others.
    pub fn transitions(&self) -> usize {
        self.info.len() + self.others.len() - 1
    }

    pub(crate) fn bytes(&self) -> usize {
        self.info.capacity() + 4 * (self.others.capacity() + self.marks.capacity())
    }
}

/// The columns `first_col..first_col + cols.len()` with the states grouped by
/// their occupancy outside these columns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Block {
    pub first_col: usize,
    /// State index at each position; groups are contiguous, largest first.
    pub members: Vec<u32>,
    /// Position of each state index (inverse of `members`).
    pub position: Vec<u32>,
    /// [`narrow_mask`] of the states, by position (sides up to 16 only: the
    /// polynomial sweep's bounds; empty beyond).
    pub masks: Vec<u32>,
    /// Group `g` holds the positions `group_offsets[g]..group_offsets[g + 1]`.
    pub group_offsets: Vec<u32>,
    /// Inside group `g`, the states whose occupancy of the block's columns,
    /// read as a number `m` (the block's first column the lowest bit), hold the
    /// positions `chunk_offsets[g * 2^width + m]..chunk_offsets[g * 2^width + m + 1]`.
    pub chunk_offsets: Vec<u32>,
    /// Per column of the block: targets and sources as positions.
    pub cols: Vec<Gather>,
    /// Size of the largest group.
    pub max_group: usize,
    /// For each position, the position of the same state in the previous block
    /// of the row (the last one for the first block): the polynomial sweep
    /// keeps its vectors in the order of the block that wrote them (sides up to
    /// 16 only: the sweep's bounds; empty beyond).
    pub from_prev: Vec<u32>,
}

impl Block {
    pub fn groups(&self) -> usize {
        self.group_offsets.len() - 1
    }
}

/// Bits of a state mask below the top-piece positions.
const TOP_SHIFT: u32 = 32;

/// Per state: bit `j` set when frontier position `j` is occupied (low 32 bits)
/// or carries the top label (high 32 bits).
pub(crate) fn state_mask<W: Word>(state: W, side: usize) -> u64 {
    let mut m = 0u64;
    for pos in 0..side {
        let l = label(state, pos);
        if l != 0 {
            m |= 1 << pos;
        }
        if l == 1 {
            m |= 1 << (TOP_SHIFT as usize + pos);
        }
    }
    m
}

/// The occupied positions of a state mask.
#[inline(always)]
fn occupancy(mask: u64) -> u32 {
    mask as u32
}

/// The positions of a state mask that carry the top piece.
#[inline(always)]
fn top_positions(mask: u64) -> u32 {
    (mask >> TOP_SHIFT) as u32
}

/// The mask in 32 bits (occupancy in the low 16, top positions in the high
/// 16) for the polynomial sweep, whose inner loop reads one per target: half
/// the bytes of the full mask. Only for sides up to 16.
#[inline]
pub(crate) fn narrow_mask(mask: u64) -> u32 {
    (occupancy(mask) & 0xFFFF) | top_positions(mask) << 16
}

/// The number of occupied cells of a state right after the top row (labels 0
/// and 1 only), `None` for any other state.
#[inline]
pub(crate) fn top_row_degree(mask: u64) -> Option<u32> {
    (top_positions(mask) == occupancy(mask)).then(|| occupancy(mask).count_ones())
}

/// Everything `HexGraph::build` computes, before it is wrapped.
pub(crate) struct Built {
    pub num_states: usize,
    pub masks: Vec<u64>,
    /// [`narrow_mask`] of every state (sides up to 16; empty beyond).
    pub narrow_masks: Vec<u32>,
    pub blocks: Vec<Block>,
    /// For each column: (block index, column index inside the block).
    pub col_block: Vec<(usize, usize)>,
}

/// The columns of a row cut into `ceil(side / width)` blocks of nearly equal
/// widths.
pub(crate) fn block_layout(side: usize, width: usize) -> Vec<std::ops::Range<usize>> {
    let count = side.div_ceil(width.max(1));
    let mut start = 0;
    (0..count)
        .map(|b| {
            let len = side / count + usize::from(b < side % count);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Marks a transition whose target was not yet numbered during the search.
const FRESH_TARGET: u32 = u32::MAX - 1;

/// Marks a new state found through a transition that is not stored.
const NOT_STORED: u32 = u32::MAX;

/// The closure under `advance`: all states, numbered in the order a
/// breadth-first search finds them (every state in turn, columns in order, empty
/// before occupied), and per column `flips[col][i]`, the target of state `i` when
/// the occupancy of position `col` flips (or `NONE`).
///
/// The states are taken in rounds of consecutive indices: the targets of a round
/// are computed and looked up in parallel, then the new ones are numbered in
/// order (so the result does not depend on the number of threads). The search
/// follows both choices of every column, also the ones that keep the occupancy
/// (they can only change states that never occur before that column's step, and
/// keeping them keeps the set of states of the original search).
fn closure<W: Word>(
    side: usize,
    threads: usize,
    progress: &mut BuildProgress<'_>,
) -> Result<(Vec<W>, Vec<Vec<u32>>)> {
    let expected = super::known_state_count(side as u32).map_or(1 << 20, |n| n as usize);
    // Every state's transitions are computed once: the states done against
    // all of them (the estimate past the known counts, which holds so far).
    let all = super::estimated_state_count(side as u32).max(1);
    let mut states: Vec<W> = Vec::with_capacity(expected);
    let mut index = StateTable::<W>::with_capacity(expected);
    for mask in 1u64..(1u64 << side) {
        let s = top_row_state(mask, side);
        index.get_or_insert(s, states.len() as u32);
        states.push(s);
    }
    let mut flips: Vec<Vec<u32>> = (0..side).map(|_| Vec::with_capacity(expected)).collect();
    const CHUNK: usize = 2048;
    const ROUND: usize = 32 * CHUNK;
    const BATCH: usize = 32;
    let mut done = 0;
    while done < states.len() {
        let round = done..states.len().min(done + ROUND);
        let chunks = round.len().div_ceil(CHUNK);
        let (states_ref, index_ref) = (&states, &index);
        // Per chunk: the flip target of every state and column ([state][col]),
        // FRESH_TARGET when it is new, and the new targets in the order of the
        // search, each with its slot in the first list or NOT_STORED.
        let found = map_indices(chunks, threads, |c| {
            let range = round.start + c * CHUNK..(round.start + (c + 1) * CHUNK).min(round.end);
            let mut ids = vec![NONE; range.len() * side];
            let mut fresh: Vec<(W, u32)> = Vec::new();
            let mut targets = Vec::with_capacity(BATCH * side * 2);
            for first in range.clone().step_by(BATCH) {
                // Compute a batch of targets and prefetch their slots, then look
                // them up: the cache misses overlap.
                targets.clear();
                let batch_end = (first + BATCH).min(range.end);
                for (i, &s) in (first..batch_end).zip(&states_ref[first..batch_end]) {
                    for col in 0..side {
                        let empty_now = label(s, col) == 0;
                        for occupied in [false, true] {
                            let t = advance(s, side, col, occupied);
                            if t != W::ZERO && t != s {
                                index_ref.prefetch(t);
                            }
                            let slot = if occupied == empty_now {
                                ((i - range.start) * side + col) as u32
                            } else {
                                NOT_STORED
                            };
                            targets.push((s, t, slot));
                        }
                    }
                }
                for &(s, t, slot) in &targets {
                    if t == W::ZERO || t == s {
                        // Dropped, or the identity (never a flip).
                        continue;
                    }
                    match index_ref.get(t) {
                        Some(id) if slot != NOT_STORED => ids[slot as usize] = id,
                        Some(_) => {}
                        None => {
                            fresh.push((t, slot));
                            if slot != NOT_STORED {
                                ids[slot as usize] = FRESH_TARGET;
                            }
                        }
                    }
                }
            }
            (ids, fresh)
        });
        for (mut ids, fresh) in found {
            for (t, slot) in fresh {
                let next = states.len() as u32;
                let id = index.get_or_insert(t, next);
                if id == next {
                    states.push(t);
                }
                if slot != NOT_STORED {
                    ids[slot as usize] = id;
                }
            }
            for row in ids.chunks_exact(side) {
                for (flip, &id) in flips.iter_mut().zip(row) {
                    flip.push(id);
                }
            }
        }
        done = round.end;
        progress.reach(done as u64 * SEARCH_WORK / all)?;
    }
    Ok((states, flips))
}

/// The states of the build's search and their flips, for tests that check
/// other ways of finding them.
#[cfg(test)]
pub(crate) fn states_for_tests<W: Word>(side: usize, control: &Control) -> (Vec<W>, Vec<Vec<u32>>) {
    let mut progress = BuildProgress {
        control,
        counted: 0,
    };
    closure::<W>(side, 1, &mut progress).expect("not cancelled")
}

/// Finds every state reachable from the top row by deciding cells in any column,
/// numbers them, and builds the blocks of `width` columns, on up to `threads`
/// threads; counts [`BUILD_WORK`] units on `control` as it goes, and stops
/// when it is cancelled.
pub(crate) fn build(side: usize, width: usize, threads: usize, control: &Control) -> Result<Built> {
    let mut progress = BuildProgress {
        control,
        counted: 0,
    };
    progress.reach(0)?;
    // The narrowest word that holds the side; the states themselves are not
    // kept, only their masks and transitions.
    let (masks, flips) = if side <= <u64 as Word>::POSITIONS {
        masks_and_flips::<u64>(side, threads, &mut progress)?
    } else {
        masks_and_flips::<u128>(side, threads, &mut progress)?
    };
    progress.reach(SEARCH_WORK)?;
    let layout = block_layout(side, width);
    let mut col_block = vec![(0, 0); side];
    for (b, cols) in layout.iter().enumerate() {
        for (j, col) in cols.clone().enumerate() {
            col_block[col] = (b, j);
        }
    }
    let mut blocks = map_indices(layout.len(), threads, |b| {
        group_states(side, layout[b].clone(), &masks)
    });
    // The gather lists, a few columns at a time; each column's flips are freed
    // once its list is built, which bounds the memory of the build.
    let mut flips: Vec<Option<Vec<u32>>> = flips.into_iter().map(Some).collect();
    let mut gathers: Vec<Gather> = Vec::with_capacity(side);
    for cols in (0..side).collect::<Vec<_>>().chunks(threads.max(1)) {
        let blocks_ref = &blocks;
        let flips_ref = &flips;
        gathers.extend(map_indices(cols.len(), threads, |k| {
            let col = cols[k];
            let flip = flips_ref[col].as_ref().expect("each column is built once");
            column_gather(&blocks_ref[col_block[col].0], &masks, flip, col)
        }));
        for &col in cols {
            flips[col] = None;
        }
        let columns_done = gathers.len() as u64;
        progress.reach(SEARCH_WORK + columns_done * (BUILD_WORK - SEARCH_WORK) / side as u64)?;
    }
    // Only the polynomial sweep reads `from_prev` (a points pass finds a
    // group's states by their tiles), and it stops at the narrow sides.
    let keep_from_prev = side <= super::NARROW_SIDES as usize;
    let from_prev: Vec<Vec<u32>> = (0..blocks.len())
        .map(|b| {
            if !keep_from_prev {
                return Vec::new();
            }
            let prev = &blocks[(b + blocks.len() - 1) % blocks.len()];
            blocks[b]
                .members
                .iter()
                .map(|&i| prev.position[i as usize])
                .collect()
        })
        .collect();
    let mut gathers = gathers.into_iter();
    for ((block, cols), from_prev) in blocks.iter_mut().zip(&layout).zip(from_prev) {
        block.cols = gathers.by_ref().take(cols.len()).collect();
        block.from_prev = from_prev;
    }
    let narrow_masks = if side <= super::NARROW_SIDES as usize {
        masks.iter().map(|&m| narrow_mask(m)).collect()
    } else {
        Vec::new()
    };
    progress.reach(BUILD_WORK)?;
    Ok(Built {
        num_states: masks.len(),
        masks,
        narrow_masks,
        blocks,
        col_block,
    })
}

/// The masks of all states and the flips of [`closure`].
fn masks_and_flips<W: Word>(
    side: usize,
    threads: usize,
    progress: &mut BuildProgress<'_>,
) -> Result<(Vec<u64>, Vec<Vec<u32>>)> {
    let (states, flips) = closure::<W>(side, threads, progress)?;
    let masks = states.iter().map(|&s| state_mask(s, side)).collect();
    Ok((masks, flips))
}

/// The groups of the block of columns `cols` (without its gather lists).
fn group_states(side: usize, cols: std::ops::Range<usize>, masks: &[u64]) -> Block {
    let n = masks.len();
    let window = cols.clone().fold(0usize, |w, c| w | 1 << c);
    let pattern = |i: usize| occupancy(masks[i]) as usize;
    // A group: the states with one occupancy outside the window. Groups come
    // largest first (so that threads taking groups in turn end together); inside
    // a group the states are ordered by their whole occupancy pattern, then by
    // index. The states of one pattern are then contiguous in the order of every
    // block, and the first step of a block reads its sources (stored in the order
    // of the previous block) in long runs.
    let mut count = vec![0u32; 1 << side];
    for i in 0..n {
        count[pattern(i)] += 1;
    }
    let mut sizes = vec![0u32; 1 << side];
    for (p, &c) in count.iter().enumerate() {
        sizes[p & !window] += c;
    }
    let mut keys: Vec<usize> = (0..sizes.len()).filter(|&k| sizes[k] > 0).collect();
    keys.sort_unstable_by_key(|&k| (std::cmp::Reverse(sizes[k]), k));
    let mut start = vec![0u32; 1 << side];
    let mut group_offsets = Vec::with_capacity(keys.len() + 1);
    let mut chunk_offsets = Vec::with_capacity((keys.len() << cols.len()) + 1);
    let mut acc = 0u32;
    for &key in &keys {
        group_offsets.push(acc);
        // The patterns of the group in increasing order: key | every subset of
        // the window.
        let mut sub = 0usize;
        loop {
            start[key | sub] = acc;
            chunk_offsets.push(acc);
            acc += count[key | sub];
            sub = sub.wrapping_sub(window) & window;
            if sub == 0 {
                break;
            }
        }
    }
    group_offsets.push(acc);
    chunk_offsets.push(acc);
    let max_group = keys.first().map_or(0, |&k| sizes[k] as usize);
    let mut members = vec![0u32; n];
    let mut position = vec![0u32; n];
    for i in 0..n {
        let slot = &mut start[pattern(i)];
        members[*slot as usize] = i as u32;
        position[i] = *slot;
        *slot += 1;
    }
    let block_masks: Vec<u32> = if side <= super::NARROW_SIDES as usize {
        members
            .iter()
            .map(|&i| narrow_mask(masks[i as usize]))
            .collect()
    } else {
        Vec::new()
    };
    Block {
        first_col: cols.start,
        members,
        position,
        masks: block_masks,
        group_offsets,
        chunk_offsets,
        cols: Vec::new(),
        max_group,
        from_prev: Vec::new(),
    }
}

/// The gather lists of column `col` from the flips of the states
/// (`flip[i]` = target of state `i`, or `NONE`), with targets and sources as
/// positions of `block`.
fn column_gather(block: &Block, masks: &[u64], flip: &[u32], col: usize) -> Gather {
    let n = block.members.len();
    let position = &block.position;
    let mut info = vec![0u8; n];
    for &t in flip {
        if t != NONE {
            let b = &mut info[position[t as usize] as usize];
            assert!(
                *b < COUNT_MASK,
                "more than {MAX_SOURCES} sources for one state"
            );
            *b += 1;
        }
    }
    // Where the other sources of each target go, and the marks.
    let mut fill = Vec::with_capacity(n);
    let mut marks = Vec::with_capacity(n / MARK_EVERY + 1);
    let mut total = 0u32;
    for (pos, b) in info.iter_mut().enumerate() {
        if pos % MARK_EVERY == 0 {
            marks.push(total);
        }
        fill.push(total);
        total += u32::from(*b);
        // The block's own masks are read in order; wide sides have none.
        let occupied = match block.masks.get(pos) {
            Some(&narrow) => narrow >> col & 1 == 1,
            None => occupancy(masks[block.members[pos] as usize]) >> col & 1 == 1,
        };
        if occupied {
            *b |= OCCUPIED;
        }
    }
    // One padding entry: the sweep may read the entry after the last list.
    let mut others = vec![0u32; total as usize + 1];
    // Visit the sources by position so that each list is ascending.
    for (pos, &i) in block.members.iter().enumerate() {
        let t = flip[i as usize];
        if t != NONE {
            let slot = &mut fill[position[t as usize] as usize];
            others[*slot as usize] = pos as u32;
            *slot += 1;
        }
    }
    Gather {
        info,
        others,
        marks,
    }
}

impl Block {
    /// Bytes held by the block.
    pub fn bytes(&self) -> usize {
        4 * (self.members.capacity()
            + self.position.capacity()
            + self.masks.capacity()
            + self.group_offsets.capacity()
            + self.chunk_offsets.capacity()
            + self.from_prev.capacity())
            + self.cols.iter().map(Gather::bytes).sum::<usize>()
    }
}
