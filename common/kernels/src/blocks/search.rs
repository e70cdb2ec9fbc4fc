//! Layered breadth-first search without a visited set.
//!
//! Layer rule: let `L_k` be the states at distance `k` from the start. Slides
//! are reversible (the cells a piece leaves are empty afterwards, so it can
//! slide back), so the move graph is undirected and the distances of two
//! neighbours differ by at most 1. A neighbour of a state in `L_k` therefore
//! lies in `L_(k-1)`, `L_k` or `L_(k+1)`; conversely every state of `L_(k+1)`
//! has a neighbour in `L_k` (its predecessor on a shortest path). Hence
//! `L_(k+1) = N(L_k) \ (L_k ∪ L_(k-1))`, and two layers are all the memory the
//! search needs.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::puzzle::Puzzle;
use super::state_set::StateSet;
use crate::{Control, Result, invalid};

/// States expanded between two polls of the control.
const POLL_STATES: usize = 1024;
/// Fewest states per thread: below this a thread costs more than it saves.
const MIN_STATES_PER_THREAD: usize = 512;
/// States a thread of the single-process search claims at a time.
const CHUNK_STATES: usize = 128;

/// The result of a full search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlocksCount {
    /// Number of configurations reachable from the initial one (itself included).
    pub configurations: u64,
    /// Number of BFS layers: 1 + the largest distance from the start.
    pub layers: u32,
    /// Size of the largest layer.
    pub largest_layer: u64,
}

fn check_frontier(states: &[u128], what: &str) -> Result<()> {
    match states.windows(2).position(|w| w[0] >= w[1]) {
        None => Ok(()),
        Some(i) => Err(invalid!(
            "the {what} layer is not sorted and deduplicated (entries {i} and {})",
            i + 1
        )),
    }
}

/// Expands `current[slice]`: returns, sorted and deduplicated, the neighbours of
/// those states that are in neither `current` nor `previous`. With `current =
/// L_k` and `previous = L_(k-1)`, the union of the results over slices covering
/// `current` is `L_(k+1)` (see the module documentation).
///
/// `current` and `previous` must be strictly increasing and every expanded state
/// a configuration of `puzzle`; otherwise `InvalidArgument`. One unit of work
/// per expanded state. Memory besides the inputs: the neighbours of the slice,
/// 16 bytes each (about 3 per state for Project Euler 766).
pub fn expand_layer(
    puzzle: &Puzzle,
    current: &[u128],
    previous: &[u128],
    slice: Range<usize>,
    control: &Control,
) -> Result<Vec<u128>> {
    if slice.start > slice.end || slice.end > current.len() {
        return Err(invalid!(
            "slice {}..{} is outside the current layer of {} states",
            slice.start,
            slice.end,
            current.len()
        ));
    }
    check_frontier(current, "current")?;
    check_frontier(previous, "previous")?;
    let mut found = Vec::with_capacity(slice.len() * 4);
    for chunk in current[slice].chunks(POLL_STATES) {
        control.check()?;
        for &state in chunk {
            puzzle.push_checked_neighbours(state, &mut found)?;
        }
        control.add_work(chunk.len() as u64);
    }
    control.check()?;
    found.sort_unstable();
    found.dedup();
    remove_present(&mut found, current);
    remove_present(&mut found, previous);
    Ok(found)
}

/// Removes from the sorted `states` every element of the sorted `known`.
fn remove_present(states: &mut Vec<u128>, known: &[u128]) {
    let mut rest = known;
    states.retain(|&s| {
        rest = &rest[lower_bound(rest, s)..];
        rest.first() != Some(&s)
    });
}

/// First index of `sorted` holding a value `>= x`, searching from the front
/// with doubling steps: cheap when the answer is near, as it is when the
/// values looked up ascend.
fn lower_bound(sorted: &[u128], x: u128) -> usize {
    let mut below = 0; // sorted[..below] < x
    let mut step = 1;
    while below + step <= sorted.len() && sorted[below + step - 1] < x {
        below += step;
        step *= 2;
    }
    let end = (below + step).min(sorted.len());
    below + sorted[below..end].partition_point(|&v| v < x)
}

/// Merges two strictly increasing lists into one, dropping duplicates.
fn merge_unique(a: Vec<u128>, b: Vec<u128>) -> Vec<u128> {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        out.push(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The neighbours of the states of `current` not in `known`, deduplicated and
/// sorted, for the chunks of `current` this thread claims from `next_chunk`.
/// Threads claim chunks until none is left, so a thread that starts late (the
/// machine is busy) just takes fewer. Used by the single-process search, whose
/// states all descend from the validated initial one: no checks.
fn fresh_neighbours(
    puzzle: &Puzzle,
    current: &[u128],
    threads: usize,
    next_chunk: &AtomicUsize,
    known: &StateSet,
    control: &Control,
) -> Result<Vec<u128>> {
    // New states number about as many as the states expanded.
    let mut fresh = StateSet::with_capacity(current.len() / threads);
    let mut found = Vec::new();
    let mut neighbours = Vec::new();
    loop {
        let start = next_chunk.fetch_add(1, Ordering::Relaxed) * CHUNK_STATES;
        if start >= current.len() {
            break;
        }
        control.check()?;
        let chunk = &current[start..(start + CHUNK_STATES).min(current.len())];
        for &state in chunk {
            puzzle.neighbours(state, &mut neighbours);
            for &n in &neighbours {
                if !known.contains(n) && fresh.insert(n) {
                    found.push(n);
                }
            }
        }
        control.add_work(chunk.len() as u64);
    }
    control.check()?;
    found.sort_unstable();
    Ok(found)
}

/// The next layer, the current one shared among up to `threads` threads.
fn next_layer(
    puzzle: &Puzzle,
    current: &[u128],
    previous: &[u128],
    threads: usize,
    control: &Control,
) -> Result<Vec<u128>> {
    let mut known = StateSet::with_capacity(current.len() + previous.len());
    for &state in current.iter().chain(previous) {
        known.insert(state);
    }
    let known = &known;
    let next_chunk = &AtomicUsize::new(0);
    let threads = threads.min(current.len() / MIN_STATES_PER_THREAD).max(1);
    let results: Vec<Result<Vec<u128>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                scope.spawn(move || {
                    fresh_neighbours(puzzle, current, threads, next_chunk, known, control)
                })
            })
            .collect();
        let mut results = vec![fresh_neighbours(
            puzzle, current, threads, next_chunk, known, control,
        )];
        results.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("a layer expansion thread panicked")),
        );
        results
    });
    Ok(merge_states(
        results.into_iter().collect::<Result<Vec<_>>>()?,
    ))
}

/// The union of strictly increasing lists of states (the outputs of
/// [`expand_layer`] over the slices of a layer), strictly increasing.
pub fn merge_states(parts: Vec<Vec<u128>>) -> Vec<u128> {
    let mut lists = parts;
    // Pairwise merging: each state is copied about log2(parts) times.
    while lists.len() > 1 {
        let mut merged = Vec::with_capacity(lists.len().div_ceil(2));
        let mut iter = lists.into_iter();
        while let Some(a) = iter.next() {
            merged.push(match iter.next() {
                Some(b) => merge_unique(a, b),
                None => a,
            });
        }
        lists = merged;
    }
    lists.pop().unwrap_or_default()
}

/// Counts the configurations reachable from the initial one by a layered
/// breadth-first search in this process, each layer split among `threads`
/// threads (at least 1). One unit of work per configuration.
///
/// The same layers as [`expand_layer`], computed another way: the union of
/// the last two layers goes into a hash set shared by the threads, so only the
/// new states are sorted. Memory: three layers of 16 bytes a state and hash
/// sets of 32 to 64 bytes a state, at most about 200 bytes per state of the
/// largest layer (Project Euler 766: 12,712 states, a few megabytes).
pub fn count_reachable(puzzle: &Puzzle, threads: usize, control: &Control) -> Result<BlocksCount> {
    if threads == 0 {
        return Err(invalid!("threads must be at least 1"));
    }
    let mut count = BlocksCount::default();
    let mut previous: Vec<u128> = Vec::new();
    let mut current = vec![puzzle.initial_state()];
    while !current.is_empty() {
        control.check()?;
        count.configurations += current.len() as u64;
        count.layers += 1;
        count.largest_layer = count.largest_layer.max(current.len() as u64);
        let next = next_layer(puzzle, &current, &previous, threads, control)?;
        previous = std::mem::replace(&mut current, next);
    }
    Ok(count)
}
