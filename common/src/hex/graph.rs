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

use super::frontier::{advance, top_row_state};

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
/// with linear probing, the key and the index of a slot side by side, so that a
/// lookup usually costs one cache miss, which [`StateTable::prefetch`] can start
/// early.
struct StateTable {
    /// `[state, index]` per slot; state 0 marks an empty slot.
    slots: Vec<[u64; 2]>,
    bits: u32,
    len: usize,
}

impl StateTable {
    fn with_capacity(n: usize) -> Self {
        let bits = (2 * n.max(8)).next_power_of_two().trailing_zeros();
        StateTable {
            slots: vec![[0, 0]; 1 << bits],
            bits,
            len: 0,
        }
    }

    #[inline]
    fn home(&self, state: u64) -> usize {
        (state.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// Hints the CPU to load the slot where the search for `state` starts.
    #[inline]
    fn prefetch(&self, state: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p = self.slots.as_ptr().wrapping_add(self.home(state)) as *const i8;
            // SAFETY: a prefetch never faults, whatever the address; SSE is part
            // of the x86_64 baseline.
            unsafe { _mm_prefetch(p, _MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = state;
    }

    #[inline]
    fn get(&self, state: u64) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            let [key, id] = self.slots[i];
            if key == state {
                return Some(id as u32);
            }
            if key == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The index of `state`, inserting it with index `next` if it is new.
    fn get_or_insert(&mut self, state: u64, next: u32) -> u32 {
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(state);
        loop {
            let [key, id] = self.slots[i];
            if key == state {
                return id as u32;
            }
            if key == 0 {
                self.slots[i] = [state, u64::from(next)];
                self.len += 1;
                return next;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits += 1;
        self.slots = vec![[0, 0]; 1 << self.bits];
        self.len = 0;
        for [key, id] in old {
            if key != 0 {
                self.get_or_insert(key, id as u32);
            }
        }
    }
}

/// The incoming transitions of one column in compressed sparse row form: the
/// sources of target position `t` are `sources[offsets[t]..offsets[t + 1]]`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gather {
    pub offsets: Vec<u32>,
    pub sources: Vec<u32>,
}

impl Gather {
    #[inline(always)]
    pub fn sources_of(&self, target: usize) -> &[u32] {
        &self.sources[self.offsets[target] as usize..self.offsets[target + 1] as usize]
    }
}

/// The columns `first_col..first_col + cols.len()` with the states grouped by
/// their occupancy outside these columns.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub first_col: usize,
    /// State index at each position; groups are contiguous, largest first.
    pub members: Vec<u32>,
    /// Position of each state index (inverse of `members`).
    pub position: Vec<u32>,
    /// `masks` of the states, by position.
    pub masks: Vec<u32>,
    /// Group `g` holds the positions `group_offsets[g]..group_offsets[g + 1]`.
    pub group_offsets: Vec<u32>,
    /// Per column of the block: targets and sources as positions.
    pub cols: Vec<Gather>,
    /// Size of the largest group.
    pub max_group: usize,
    /// For each position, the position of the same state in the previous block
    /// of the row (the last one for the first block): the sweep keeps its vectors
    /// in the order of the block that wrote them.
    pub from_prev: Vec<u32>,
}

impl Block {
    pub fn groups(&self) -> usize {
        self.group_offsets.len() - 1
    }
}

/// Per state: bit `j` set when frontier position `j` is occupied (low 16 bits)
/// or carries the top label (high 16 bits).
pub(crate) fn state_mask(state: u64, side: usize) -> u32 {
    let mut m = 0u32;
    for pos in 0..side {
        let l = (state >> (4 * pos)) & 0xF;
        if l != 0 {
            m |= 1 << pos;
        }
        if l == 1 {
            m |= 1 << (16 + pos);
        }
    }
    m
}

/// Everything `HexGraph::build` computes, before it is wrapped.
pub(crate) struct Built {
    pub states: Vec<u64>,
    pub masks: Vec<u32>,
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

/// Runs `f(i)` for `i` in `0..count` on up to `threads` threads (the calling one
/// included), each taking the next index in turn; returns the results in order.
fn parallel_map<T: Send>(count: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = threads.clamp(1, count.max(1));
    if threads == 1 {
        return (0..count).map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= count {
                return done;
            }
            done.push((i, f(i)));
        }
    };
    let mut all: Vec<(usize, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in handles {
            all.extend(h.join().expect("graph builder thread panicked"));
        }
        all
    });
    all.sort_unstable_by_key(|&(i, _)| i);
    all.into_iter().map(|(_, t)| t).collect()
}

/// Marks a transition whose target was not yet numbered during the search.
const FRESH_TARGET: u32 = u32::MAX - 1;

/// The closure under `advance`: all states in breadth-first order, and per column
/// `edges[col][2 * i + occupied]`, the target of state `i` (or `NONE`).
///
/// The search goes level by level: the targets of a level are computed and looked
/// up in parallel, then the new ones are numbered in order (so the result does not
/// depend on the number of threads).
fn closure(side: usize, threads: usize) -> (Vec<u64>, Vec<Vec<u32>>) {
    let expected = expected_states(side);
    let mut states: Vec<u64> = Vec::with_capacity(expected);
    let mut index = StateTable::with_capacity(expected);
    for mask in 1u64..(1u64 << side) {
        let s = top_row_state(mask, side);
        index.get_or_insert(s, states.len() as u32);
        states.push(s);
    }
    let mut edges: Vec<Vec<u32>> = (0..side)
        .map(|_| Vec::with_capacity(2 * expected))
        .collect();
    let mut level = 0..states.len();
    while !level.is_empty() {
        // Targets of every state of the level, per chunk: [state][col][occupied],
        // FRESH_TARGET where the target is new (its value is then in `fresh`).
        const CHUNK: usize = 1024;
        const BATCH: usize = 32;
        let chunks = level.len().div_ceil(CHUNK);
        let (states_ref, index_ref) = (&states, &index);
        let found = parallel_map(chunks, threads, |c| {
            let range = level.start + c * CHUNK..(level.start + (c + 1) * CHUNK).min(level.end);
            let mut ids = Vec::with_capacity(range.len() * side * 2);
            let mut fresh = Vec::new();
            let mut targets = Vec::with_capacity(BATCH * side * 2);
            for first in range.clone().step_by(BATCH) {
                // Compute a batch of targets and prefetch their slots, then look
                // them up: the cache misses overlap.
                targets.clear();
                let batch_end = (first + BATCH).min(range.end);
                for (i, &s) in (first..batch_end).zip(&states_ref[first..batch_end]) {
                    for col in 0..side {
                        for occupied in [false, true] {
                            let t = advance(s, side, col, occupied);
                            if t != 0 && t != s {
                                index_ref.prefetch(t);
                            }
                            targets.push((i, t));
                        }
                    }
                }
                for &(i, t) in &targets {
                    ids.push(if t == 0 {
                        NONE
                    } else if t == states_ref[i] {
                        i as u32
                    } else if let Some(id) = index_ref.get(t) {
                        id
                    } else {
                        fresh.push(t);
                        FRESH_TARGET
                    });
                }
            }
            (ids, fresh)
        });
        let end = level.end;
        for (ids, fresh) in found {
            let mut fresh = fresh.into_iter();
            for (k, &id) in ids.iter().enumerate() {
                let id = if id == FRESH_TARGET {
                    let t = fresh.next().expect("one value per new target");
                    let next = states.len() as u32;
                    let id = index.get_or_insert(t, next);
                    if id == next {
                        states.push(t);
                    }
                    id
                } else {
                    id
                };
                edges[(k / 2) % side].push(id);
            }
        }
        level = end..states.len();
    }
    (states, edges)
}

/// Finds every state reachable from the top row by deciding cells in any column,
/// numbers them, and builds the blocks of `width` columns, on up to `threads`
/// threads.
pub(crate) fn build(side: usize, width: usize, threads: usize) -> Built {
    let (states, edges) = closure(side, threads);
    let masks: Vec<u32> = states.iter().map(|&s| state_mask(s, side)).collect();
    let layout = block_layout(side, width);
    let mut col_block = vec![(0, 0); side];
    for (b, cols) in layout.iter().enumerate() {
        for (j, col) in cols.clone().enumerate() {
            col_block[col] = (b, j);
        }
    }
    // Blocks, then the columns of each block, in parallel.
    let grouped = parallel_map(layout.len(), threads, |b| {
        group_states(side, layout[b].clone(), &masks)
    });
    let mut gathers = parallel_map(side, threads, |col| {
        let (b, _) = col_block[col];
        column_gather(&grouped[b].position, &grouped[b].members, &edges[col])
    })
    .into_iter();
    let from_prev: Vec<Vec<u32>> = (0..grouped.len())
        .map(|b| {
            let prev = &grouped[(b + grouped.len() - 1) % grouped.len()];
            grouped[b]
                .members
                .iter()
                .map(|&i| prev.position[i as usize])
                .collect()
        })
        .collect();
    let blocks = grouped
        .into_iter()
        .zip(&layout)
        .zip(from_prev)
        .map(|((mut block, cols), from_prev)| {
            block.cols = gathers.by_ref().take(cols.len()).collect();
            block.from_prev = from_prev;
            block
        })
        .collect();
    Built {
        states,
        masks,
        blocks,
        col_block,
    }
}

/// The groups of the block of columns `cols` (without its gather lists).
fn group_states(side: usize, cols: std::ops::Range<usize>, masks: &[u32]) -> Block {
    let n = masks.len();
    let window = cols.clone().fold(0usize, |w, c| w | 1 << c);
    let pattern = |i: usize| (masks[i] & 0xFFFF) as usize;
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
    let mut acc = 0u32;
    for &key in &keys {
        group_offsets.push(acc);
        // The patterns of the group in increasing order: key | every subset of
        // the window.
        let mut sub = 0usize;
        loop {
            start[key | sub] = acc;
            acc += count[key | sub];
            sub = sub.wrapping_sub(window) & window;
            if sub == 0 {
                break;
            }
        }
    }
    group_offsets.push(acc);
    let max_group = keys.first().map_or(0, |&k| sizes[k] as usize);
    let mut members = vec![0u32; n];
    let mut position = vec![0u32; n];
    for i in 0..n {
        let slot = &mut start[pattern(i)];
        members[*slot as usize] = i as u32;
        position[i] = *slot;
        *slot += 1;
    }
    let block_masks: Vec<u32> = members.iter().map(|&i| masks[i as usize]).collect();
    Block {
        first_col: cols.start,
        members,
        position,
        masks: block_masks,
        group_offsets,
        cols: Vec::new(),
        max_group,
        from_prev: Vec::new(),
    }
}

/// The reversed transitions of one column (`edges[2 * i + occupied]` = target of
/// state `i`), with targets and sources as positions of the block.
fn column_gather(position: &[u32], members: &[u32], edges: &[u32]) -> Gather {
    let n = position.len();
    let mut offsets = vec![0u32; n + 1];
    for &t in edges {
        if t != NONE {
            offsets[position[t as usize] as usize + 1] += 1;
        }
    }
    for t in 0..n {
        offsets[t + 1] += offsets[t];
    }
    let mut fill = offsets[..n].to_vec();
    let mut sources = vec![0u32; offsets[n] as usize];
    // Visit the sources by position so that each list is ascending.
    for (pos, &i) in members.iter().enumerate() {
        for &t in &edges[2 * i as usize..][..2] {
            if t != NONE {
                let slot = &mut fill[position[t as usize] as usize];
                sources[*slot as usize] = pos as u32;
                *slot += 1;
            }
        }
    }
    Gather { offsets, sources }
}

/// About the number of states of a side (exact up to 13, then a ratio of 2.8 per
/// side), to size the tables once.
fn expected_states(side: usize) -> usize {
    const KNOWN: [usize; 14] = [
        1, 1, 3, 9, 25, 69, 189, 518, 1422, 3915, 10813, 29964, 83304, 232323,
    ];
    match KNOWN.get(side) {
        Some(&n) => n,
        None => (KNOWN[13] as f64 * 2.8f64.powi(side as i32 - 13)) as usize,
    }
}
