//! The forward count by levels, the kernel of the pegs frontier plan.
//!
//! Level `k` holds the classes of boards reached after `k` jumps (every jump
//! removes a peg, so a level is a peg count and levels never meet), each with
//! the number of `k`-jump sequences from the start that end in the class: the
//! sum of `f(b)` over the boards `b` of the class, where `f(b)` counts the
//! sequences reaching `b`. These class sums add up level by level: a symmetry
//! maps the jumps of a board one to one onto the jumps of its image, so every
//! board of a class has the same number of jumps into each class of the next
//! level, and the sum for a class of level `k + 1` is the sum over the classes
//! of level `k` of their sum times the jumps of their representative into it.
//! The symmetries fix the final hole, so the class of the one-peg board on it
//! is that board alone and its sum is the number of solutions.
//!
//! Level `k` is split into buckets by a hash of the board. A shard owns one
//! bucket: it merges what every shard of the previous level sent it (sorted
//! lists, summing the counts of equal boards), expands every board, and sends
//! each child with its count to the bucket of the next level the child falls
//! in. Counts are summed in cache-sized hash tables before the children are
//! sorted, so a shard's memory follows the distinct children, not the jumps.

use std::collections::HashMap;

use super::PegGame;
use super::pagoda::{ChildFilter, Pruner};
use crate::buckets::bucket_of;
use crate::cache::prefetch;
use crate::varint::{self, Reader};
use crate::{Control, Error, Result, invalid};

/// Boards expanded between two polls of the control.
const POLL_BOARDS: usize = 4096;

/// Distinct boards per partition of the count tables aimed at: a partition's
/// table (16 bytes a slot, at most three quarters full) then stays in the L2 cache
/// while a batch goes in.
const BOARDS_PER_PARTITION: usize = 16384;
const MAX_PARTITIONS: usize = 8192;
/// Children gathered for a partition before they are summed into its table:
/// at least this many, and at least half the table, so that each cache line
/// of the table loaded for a batch takes several children.
const MIN_BATCH: usize = 1024;

/// Part of one level sent to one bucket: boards strictly increasing, each with
/// the (nonzero) number of jump sequences reaching its class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PegBucket {
    pub boards: Vec<u64>,
    pub counts: Vec<u128>,
}

impl PegBucket {
    pub fn len(&self) -> usize {
        self.boards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.boards.is_empty()
    }

    /// The number of boards, then for each board its gap from the previous
    /// one (the first board itself) and its count, all varints.
    pub fn encode(&self) -> Vec<u8> {
        let entries = self.boards.iter().copied().zip(self.counts.iter().copied());
        encode_raw(self.len(), entries)
    }

    /// Reads [`PegBucket::encode`]'s bytes. Anything else (truncated, boards
    /// not strictly increasing or wider than 64 bits, a zero count, trailing
    /// bytes) is `InvalidArgument`, and nothing is allocated beyond what the
    /// input can describe.
    pub fn decode(bytes: &[u8]) -> Result<PegBucket> {
        let mut reader = Reader::new(bytes, "peg level bucket");
        let count = reader.varint("the board count")?;
        // Every board takes at least two bytes (its gap and its count).
        if count > (reader.remaining() / 2) as u128 {
            return Err(invalid!(
                "peg level bucket: {count} boards announced in {} bytes",
                bytes.len()
            ));
        }
        let mut bucket = PegBucket {
            boards: Vec::with_capacity(count as usize),
            counts: Vec::with_capacity(count as usize),
        };
        let mut previous: u64 = 0;
        for index in 0..count as usize {
            let gap = reader.varint("a board")?;
            if gap == 0 && index > 0 {
                return Err(invalid!(
                    "peg level bucket: board {index} repeats the previous one"
                ));
            }
            let board = u64::try_from(gap)
                .ok()
                .and_then(|gap| previous.checked_add(gap))
                .ok_or_else(|| invalid!("peg level bucket: board {index} exceeds 64 bits"))?;
            let ways = reader.varint("a count")?;
            if ways == 0 {
                return Err(invalid!("peg level bucket: board {index} has a zero count"));
            }
            bucket.boards.push(board);
            bucket.counts.push(ways);
            previous = board;
        }
        reader.finish(&format!("{count} boards"))?;
        Ok(bucket)
    }
}

/// One bucket of a level shard's output: positions of the next level, and at
/// the meeting level (see `meet`) positions keyed by their complements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageBucket {
    pub level: PegBucket,
    pub joined: PegBucket,
}

impl StageBucket {
    /// The level's bytes after their length (u64, little-endian), then the
    /// joined positions' bytes.
    pub fn encode(&self) -> Vec<u8> {
        let level = self.level.encode();
        let mut out = Vec::with_capacity(8 + level.len() + 1);
        out.extend_from_slice(&(level.len() as u64).to_le_bytes());
        out.extend_from_slice(&level);
        out.extend_from_slice(&self.joined.encode());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<StageBucket> {
        let (level, joined) = StageBucket::split(bytes)?;
        Ok(StageBucket {
            level: PegBucket::decode(level)?,
            joined: PegBucket::decode(joined)?,
        })
    }

    /// The encoded level and joined positions of [`StageBucket::encode`]'s
    /// bytes, not decoded.
    pub fn split(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
        let len = bytes
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| invalid!("peg stage bucket: shorter than its length"))?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| len.checked_add(8))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| invalid!("peg stage bucket: its level runs past the end"))?;
        Ok((&bytes[8..end], &bytes[end..]))
    }
}

/// What the first level's only shard receives: the start position's class,
/// reached once.
pub fn start_bucket(game: &PegGame) -> PegBucket {
    PegBucket {
        boards: vec![game.canonical(game.start_board())],
        counts: vec![1],
    }
}

/// The number of pegs of the boards of `level`: the start has one hole empty.
pub fn pegs_at_level(game: &PegGame, level: u32) -> Option<u32> {
    game.start_board().count_ones().checked_sub(level)
}

/// One shard's part of one level.
#[derive(Debug, Default)]
pub struct PegLevel {
    /// Distinct classes of the level in this shard's bucket.
    pub states: u64,
    /// Those of them expanded: not pruned (see [`PegGame::worth_expanding`]);
    /// on the level of one peg, all of them.
    pub expanded: u64,
    /// Solutions among them: the sum for the final position when the boards
    /// have one peg.
    pub solutions: u128,
    /// What the shard sends to each bucket of the next level.
    pub sent: Vec<PegBucket>,
    /// Children the shard left out as it made them because they cannot
    /// finish, one for each jump to them (see [`Expander`]).
    pub pruned: u64,
}

/// [`PegBucket::encode`]'s bytes for the `len` boards `entries` gives, in
/// increasing order with their counts.
pub(super) fn encode_raw(len: usize, entries: impl Iterator<Item = (u64, u128)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + len * 6);
    varint::push(&mut out, len as u128);
    let mut previous = 0;
    for (board, count) in entries {
        varint::push(&mut out, u128::from(board - previous));
        varint::push(&mut out, count);
        previous = board;
    }
    out
}

/// Bucket `q` of level `level`, from what every shard of the previous level
/// sent it (`inputs`): its classes and solutions, and what it sends each of
/// the `buckets_out` buckets of the next level.
///
/// Every input must be sorted, with boards of the level's peg count on the
/// board; otherwise `InvalidArgument`. One unit of work per class expanded.
pub fn expand_level(
    game: &PegGame,
    level: u32,
    inputs: Vec<PegBucket>,
    buckets_out: u32,
    control: &Control,
) -> Result<PegLevel> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let pegs = pegs_at_level(game, level)
        .filter(|&p| p >= 1)
        .ok_or_else(|| invalid!("level {level} is past the last peg of the {}", game.shape()))?;
    let merged = checked_merge(game, inputs, pegs)?;
    control.check()?;
    let mut outcome = PegLevel {
        states: merged.len() as u64,
        ..PegLevel::default()
    };
    if pegs == 1 {
        for (&board, &ways) in merged.boards.iter().zip(&merged.counts) {
            outcome.solutions = game
                .final_value(board)
                .checked_mul(ways)
                .and_then(|w| w.checked_add(outcome.solutions))
                .ok_or_else(|| Error::Internal("pegs: count exceeds 128 bits".into()))?;
        }
        control.add_work(merged.len() as u64);
        outcome.expanded = outcome.states;
        outcome.sent = vec![PegBucket::default(); buckets_out as usize];
        return Ok(outcome);
    }
    let (sent, expanded, pruned) = children(game, &merged, pegs, buckets_out, control)?;
    (outcome.sent, outcome.expanded, outcome.pruned) = (sent, expanded, pruned);
    Ok(outcome)
}

/// What expands the boards of a level: each board not pruned, into its
/// children that may still finish. A board the pagodas rule out has no
/// solution, nor have its children; a child they rule out is left out as it
/// is made, so it is never stored, sent or read. The children of one peg are
/// the ends themselves and all go on.
pub(super) struct Expander<'g> {
    game: &'g PegGame,
    pruner: Option<&'g Pruner>,
    /// The filter the children are held to (children of two pegs and more).
    filter: Option<ChildFilter<'g>>,
    children: Vec<u64>,
    /// The children left out so far, one for each jump to them.
    pub(super) pruned: u64,
}

impl<'g> Expander<'g> {
    /// The expander of boards of `pegs` pegs.
    pub(super) fn new(game: &'g PegGame, pegs: u32) -> Expander<'g> {
        let pruner = game.pruner();
        Expander {
            game,
            pruner,
            filter: pruner.filter(|_| pegs > 2).map(ChildFilter::new),
            children: Vec::with_capacity(64),
            pruned: 0,
        }
    }

    /// The children of `board` kept, one per jump to each (canonical
    /// boards); `None` when `board` itself is pruned.
    #[inline]
    pub(super) fn expand(&mut self, board: u64) -> Option<&[u64]> {
        self.children.clear();
        match &mut self.filter {
            Some(filter) => {
                if !filter.load(board) {
                    return None;
                }
                self.pruned +=
                    self.game
                        .push_children_where(board, &mut self.children, |f, o, t| {
                            filter.child_may_finish(f, o, t)
                        });
            }
            None => {
                if self.pruner.is_some_and(|p| !p.may_finish(board)) {
                    return None;
                }
                self.game.push_children(board, &mut self.children);
            }
        }
        Some(&self.children)
    }
}

/// The children of the sorted `level` (boards of `pegs` pegs) with their
/// summed counts, in `buckets_out` buckets, the number of boards expanded
/// (those not pruned) and the number of children left out (see
/// [`Expander`]).
pub(super) fn children(
    game: &PegGame,
    level: &PegBucket,
    pegs: u32,
    buckets_out: u32,
    control: &Control,
) -> Result<(Vec<PegBucket>, u64, u64)> {
    let mut sums = CountSums::for_boards(level.len(), game.holes);
    let mut expander = Expander::new(game, pegs);
    let mut expanded = 0;
    let mut at = 0;
    for block in level.boards.chunks(POLL_BOARDS) {
        control.check()?;
        for &board in block {
            let ways = level.counts[at];
            at += 1;
            let Some(children) = expander.expand(board) else {
                continue;
            };
            expanded += 1;
            for &child in children {
                sums.add(child, ways);
            }
        }
        control.add_work(block.len() as u64);
    }
    Ok((sums.into_buckets(buckets_out)?, expanded, expander.pruned))
}

/// One bucket split into `buckets` buckets (at least 1), for a shard that
/// computed the next levels alone and must now hand them to several.
pub fn rebucket(bucket: PegBucket, buckets: u32) -> Vec<PegBucket> {
    let buckets = buckets.max(1);
    let mut out = vec![PegBucket::default(); buckets as usize];
    for (board, ways) in bucket.boards.into_iter().zip(bucket.counts) {
        let q = &mut out[bucket_of(u128::from(board), buckets) as usize];
        q.boards.push(board);
        q.counts.push(ways);
    }
    out
}

/// The `inputs`, each checked to hold boards of `pegs` pegs, merged.
pub(super) fn checked_merge(
    game: &PegGame,
    inputs: Vec<PegBucket>,
    pegs: u32,
) -> Result<PegBucket> {
    for input in &inputs {
        check_bucket(game, input, pegs)?;
    }
    merge_buckets(inputs)
}

fn check_bucket(game: &PegGame, bucket: &PegBucket, pegs: u32) -> Result<()> {
    if bucket.boards.len() != bucket.counts.len() {
        return Err(invalid!(
            "peg level bucket: boards and counts differ in number"
        ));
    }
    if bucket.boards.windows(2).any(|w| w[0] >= w[1]) {
        return Err(invalid!(
            "peg level bucket: its boards are not sorted and distinct"
        ));
    }
    if let Some(&board) = bucket
        .boards
        .iter()
        .find(|&&b| b & !game.hole_mask() != 0 || b.count_ones() != pegs)
    {
        return Err(invalid!(
            "peg level bucket: board {board:#x} is not a board of {pegs} pegs on the {}",
            game.shape()
        ));
    }
    Ok(())
}

/// The sorted lists merged, counts of equal boards summed.
fn merge_buckets(inputs: Vec<PegBucket>) -> Result<PegBucket> {
    let mut lists = inputs;
    // Pairwise: each board is copied about log2(inputs) times.
    while lists.len() > 1 {
        let mut merged = Vec::with_capacity(lists.len().div_ceil(2));
        let mut iter = lists.into_iter();
        while let Some(a) = iter.next() {
            merged.push(match iter.next() {
                Some(b) => merge_two(a, b)?,
                None => a,
            });
        }
        lists = merged;
    }
    Ok(lists.pop().unwrap_or_default())
}

fn merge_two(a: PegBucket, b: PegBucket) -> Result<PegBucket> {
    let mut out = PegBucket {
        boards: Vec::with_capacity(a.len() + b.len()),
        counts: Vec::with_capacity(a.len() + b.len()),
    };
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a.boards[i], b.boards[j]);
        if x < y {
            out.boards.push(x);
            out.counts.push(a.counts[i]);
            i += 1;
        } else if y < x {
            out.boards.push(y);
            out.counts.push(b.counts[j]);
            j += 1;
        } else {
            let sum = a.counts[i]
                .checked_add(b.counts[j])
                .ok_or_else(|| Error::Internal("pegs: count exceeds 128 bits".into()))?;
            out.boards.push(x);
            out.counts.push(sum);
            i += 1;
            j += 1;
        }
    }
    out.boards.extend_from_slice(&a.boards[i..]);
    out.counts.extend_from_slice(&a.counts[i..]);
    out.boards.extend_from_slice(&b.boards[j..]);
    out.counts.extend_from_slice(&b.counts[j..]);
    Ok(out)
}

// ---- summing the counts of the children ----

const EMPTY: u64 = 0;
const SLOT_MULTIPLIER: u64 = 0xbf58_476d_1ce4_e5b9;
const MIN_TABLE_BITS: u32 = 10;
/// Batch entries between the prefetch of a slot and its probe.
const PREFETCH_AHEAD: usize = 8;

/// A board and a count below 2^64: counts of the cross boards stay far below
/// it, and 16 bytes a slot put four slots in a cache line. Larger counts go to
/// the partition's side table.
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Slot {
    board: u64,
    ways: u64,
}

/// A hash table from boards to summed counts (open addressing, linear
/// probing, at most three quarters full: a probe seldom leaves the cache
/// line of its home slot, and a spilling shard holds more boards a run),
/// filled from a batch at a time.
struct Partition {
    slots: Vec<Slot>,
    len: usize,
    batch: Vec<Slot>,
    /// Sums of 2^64 and more, and the boards they belong to.
    wide: HashMap<u64, u128>,
    overflow: bool,
}

impl Partition {
    fn new() -> Partition {
        Partition {
            slots: vec![Slot::default(); 1 << MIN_TABLE_BITS],
            len: 0,
            batch: Vec::with_capacity(MIN_BATCH),
            wide: HashMap::new(),
            overflow: false,
        }
    }

    fn flush(&mut self) {
        // The table grows when the boards new to it call for it, not for
        // the whole batch ahead: most of a batch adds to boards already in
        // it. A prefetch made before a growth is only a hint that missed.
        for i in 0..self.batch.len() {
            if let Some(ahead) = self.batch.get(i + PREFETCH_AHEAD) {
                prefetch(self.slots.as_ptr().wrapping_add(self.home(ahead.board)));
            }
            if 4 * (self.len + 1) > 3 * self.slots.len() {
                self.grow();
            }
            let Slot { board, ways } = self.batch[i];
            if self.place(board, ways) {
                self.len += 1;
            }
        }
        self.batch.clear();
    }

    #[inline(always)]
    fn home(&self, board: u64) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (board.wrapping_mul(SLOT_MULTIPLIER) >> (64 - bits)) as usize
    }

    /// Adds `ways` to `board`'s sum; true when the board is new.
    #[inline]
    fn place(&mut self, board: u64, ways: u64) -> bool {
        let mask = self.slots.len() - 1;
        let mut i = self.home(board);
        loop {
            let slot = &mut self.slots[i];
            if slot.board == board {
                match slot.ways.checked_add(ways) {
                    Some(sum) => slot.ways = sum,
                    None => {
                        // The slot keeps the board; its sum moves to `wide`.
                        let total = u128::from(ways) + u128::from(std::mem::take(&mut slot.ways));
                        self.add_wide(board, total);
                    }
                }
                return false;
            }
            if slot.board == EMPTY {
                *slot = Slot { board, ways };
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn add_wide(&mut self, board: u64, ways: u128) {
        let sum = self.wide.entry(board).or_insert(0);
        let (total, over) = sum.overflowing_add(ways);
        *sum = total;
        self.overflow |= over;
    }

    fn grow(&mut self) {
        let doubled = vec![Slot::default(); self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        for slot in old.into_iter().filter(|s| s.board != EMPTY) {
            self.place(slot.board, slot.ways);
        }
    }
}

/// The children of a level with their summed counts, in partitions by the
/// high bits of the board: each partition's table stays in the cache while a
/// batch goes in, and the partitions in order hold ever higher boards, so
/// the sums come out sorted a partition at a time (small sorts that stay in
/// the cache, where one sort of a whole bucket does not).
pub(super) struct CountSums {
    partitions: Vec<Partition>,
    shift: u32,
}

impl CountSums {
    /// Room for the children of `boards` boards (a level has about as many
    /// classes as the one before it; the tables grow when it has more), each
    /// a subset of `holes`.
    pub(super) fn for_boards(boards: usize, holes: u64) -> CountSums {
        let high = 64 - holes.leading_zeros();
        let wanted = (boards / BOARDS_PER_PARTITION)
            .clamp(1, MAX_PARTITIONS)
            .next_power_of_two();
        let bits = wanted.trailing_zeros().min(high);
        CountSums {
            partitions: (0..1usize << bits).map(|_| Partition::new()).collect(),
            shift: high - bits,
        }
    }

    #[inline]
    pub(super) fn add(&mut self, board: u64, ways: u128) {
        // A board past the holes goes to the last partition, so the order
        // of the partitions stays the order of their boards.
        let index = ((board >> self.shift) as usize).min(self.partitions.len() - 1);
        let partition = &mut self.partitions[index];
        match u64::try_from(ways) {
            Ok(ways) => {
                partition.batch.push(Slot { board, ways });
                if partition.batch.len() >= MIN_BATCH.max(partition.slots.len()) {
                    partition.flush();
                }
            }
            Err(_) => partition.add_wide(board, ways),
        }
    }

    /// The bytes the tables hold (slots, batches and wide sums).
    pub(super) fn bytes(&self) -> u64 {
        let slot = std::mem::size_of::<Slot>();
        let wide_entry = 2 * std::mem::size_of::<(u64, u128)>();
        self.partitions
            .iter()
            .map(|p| {
                ((p.slots.len() + p.batch.capacity()) * slot + p.wide.len() * wide_entry) as u64
            })
            .sum()
    }

    /// The sums split into `buckets` buckets, each sorted by board.
    pub(super) fn into_buckets(self, buckets: u32) -> Result<Vec<PegBucket>> {
        let sorted = self.into_sorted(buckets)?;
        let sent = (sorted.into_iter())
            .map(|sorted| {
                let mut bucket = PegBucket {
                    boards: Vec::with_capacity(sorted.len()),
                    counts: Vec::with_capacity(sorted.len()),
                };
                for (board, ways) in sorted.entries() {
                    bucket.boards.push(board);
                    bucket.counts.push(ways);
                }
                bucket
            })
            .collect();
        Ok(sent)
    }

    /// The sums in `buckets` buckets, each sorted: each partition's part
    /// of a bucket is sorted alone and follows the part of the partition
    /// before it.
    pub(super) fn into_sorted(mut self, buckets: u32) -> Result<Vec<SortedSums>> {
        let too_large = || Error::Internal("pegs: count exceeds 128 bits".into());
        let mut boards = 0;
        for partition in &mut self.partitions {
            partition.flush();
            boards += partition.len;
        }
        // Room for an even share and an eighth more: the buckets are a hash's.
        let share = boards / buckets as usize;
        let mut sorted: Vec<SortedSums> = (0..buckets)
            .map(|_| SortedSums {
                narrow: Vec::with_capacity(share + share / 8),
                wide: Vec::new(),
            })
            .collect();
        for mut partition in self.partitions {
            if partition.overflow {
                return Err(too_large());
            }
            let firsts: Vec<usize> = sorted.iter().map(|s| s.narrow.len()).collect();
            let mut wide_sums = std::mem::take(&mut partition.wide);
            for slot in partition.slots.into_iter().filter(|s| s.board != EMPTY) {
                // Most partitions have no wide sum: spare them the lookup.
                let extra = match wide_sums.is_empty() {
                    true => None,
                    false => wide_sums.remove(&slot.board),
                };
                let q = bucket_of(u128::from(slot.board), buckets) as usize;
                match extra {
                    None => sorted[q].narrow.push(slot),
                    Some(extra) => {
                        let ways = extra.checked_add(slot.ways.into()).ok_or_else(too_large)?;
                        sorted[q].wide.push((slot.board, ways));
                    }
                }
            }
            // Boards whose every count was wide have no slot.
            for (board, ways) in wide_sums {
                sorted[bucket_of(u128::from(board), buckets) as usize]
                    .wide
                    .push((board, ways));
            }
            for (bucket, first) in sorted.iter_mut().zip(firsts) {
                bucket.narrow[first..].sort_unstable_by_key(|slot| slot.board);
            }
        }
        for bucket in &mut sorted {
            debug_assert!(bucket.narrow.is_sorted_by_key(|slot| slot.board));
            bucket.wide.sort_unstable_by_key(|&(board, _)| board);
        }
        Ok(sorted)
    }
}

/// One bucket's sums, sorted by board: those below 2^64 as 16-byte slots,
/// the few wide ones apart.
pub(super) struct SortedSums {
    narrow: Vec<Slot>,
    wide: Vec<(u64, u128)>,
}

impl SortedSums {
    pub(super) fn len(&self) -> usize {
        self.narrow.len() + self.wide.len()
    }

    /// The boards and their sums in increasing order.
    pub(super) fn entries(self) -> impl Iterator<Item = (u64, u128)> {
        let mut wide = self.wide.into_iter().peekable();
        let mut narrow = self.narrow.into_iter().peekable();
        std::iter::from_fn(move || match (narrow.peek(), wide.peek()) {
            (Some(slot), Some(&(board, _))) if board < slot.board => wide.next(),
            (Some(_), _) => narrow
                .next()
                .map(|slot| (slot.board, u128::from(slot.ways))),
            (None, _) => wide.next(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::{BoardShape, PegGame};

    /// The whole count run as levels of `buckets(level)` shards in this
    /// process, shipped through the bytes: the solutions and level sizes.
    fn by_levels(game: &PegGame, buckets: impl Fn(u32) -> u32) -> (u128, Vec<u64>) {
        let control = Control::new();
        let mut sizes = Vec::new();
        let mut solutions = 0;
        let mut inbox: Vec<Vec<PegBucket>> = vec![vec![start_bucket(game)]];
        for level in 0.. {
            let out_buckets = buckets(level + 1);
            let mut next: Vec<Vec<PegBucket>> = vec![Vec::new(); out_buckets as usize];
            let mut size = 0;
            for inputs in inbox {
                let inputs = inputs
                    .iter()
                    .map(|b| PegBucket::decode(&b.encode()).unwrap())
                    .collect();
                let part = expand_level(game, level, inputs, out_buckets, &control).unwrap();
                size += part.states;
                solutions += part.solutions;
                for (q, bucket) in part.sent.into_iter().enumerate() {
                    next[q].push(bucket);
                }
            }
            if size == 0 {
                break;
            }
            sizes.push(size);
            if pegs_at_level(game, level) == Some(1) {
                break;
            }
            inbox = next;
        }
        (solutions, sizes)
    }

    #[test]
    fn levels_in_buckets_count_what_the_layered_kernel_counts() {
        let games = [
            PegGame::new(BoardShape::Triangle(5), Some(1), None).unwrap(),
            PegGame::new(BoardShape::Triangle(5), Some(4), Some(15)).unwrap(),
            PegGame::new(BoardShape::Triangle(6), Some(4), None).unwrap(),
            PegGame::new(BoardShape::Triangle(5), Some(1), None)
                .unwrap()
                .without_symmetry(),
        ];
        type Shape = fn(u32) -> u32;
        let shapes: [Shape; 4] = [|_| 1, |_| 2, |_| 7, |k| 1 + k % 5];
        for game in &games {
            let direct = game.count(&Control::new()).unwrap().solutions;
            let name = (game.shape(), game.start_hole(), game.end_hole());
            assert!(direct > 0, "{name:?} has solutions");
            for shape in shapes {
                let (solutions, sizes) = by_levels(game, shape);
                assert_eq!(solutions, direct, "{name:?}");
                assert_eq!(sizes[0], 1);
            }
        }
    }

    /// A level's children come to each board several times; the tables
    /// grow with the boards new to them, not with the children added, so a
    /// board costs its slot (16 bytes at a load of three eighths to three
    /// quarters) and
    /// as much again for the batch beside the table: at most 128 bytes.
    /// (Grown ahead for every child of a batch, they took 2 to 4 times that.)
    #[test]
    fn the_tables_grow_with_their_boards_not_with_the_children_added() {
        let distinct = 300_000u64;
        let mut sums = CountSums::for_boards(distinct as usize, u64::MAX >> 20);
        let mut rng = crate::test_rng::Rng::new(55);
        let mut added = std::collections::BTreeMap::new();
        for _ in 0..6 * distinct {
            let board = rng.range(1, distinct);
            sums.add(board, 1);
            *added.entry(board).or_insert(0u128) += 1;
        }
        let boards = added.len() as u64;
        let bytes = sums.bytes();
        assert!(
            bytes <= 128 * boards,
            "{bytes} bytes for {boards} boards: {} a board",
            bytes / boards
        );
        let summed = sums.into_buckets(1).unwrap().remove(0);
        assert_eq!(summed.boards, added.keys().copied().collect::<Vec<_>>());
        assert_eq!(summed.counts, added.values().copied().collect::<Vec<_>>());
    }

    #[test]
    fn counts_beyond_64_bits_are_summed_exactly() {
        let mut rng = crate::test_rng::Rng::new(766);
        let mut sums = CountSums::for_boards(40_000, u64::MAX >> 20);
        let mut expected = std::collections::BTreeMap::<u64, u128>::new();
        for _ in 0..200_000 {
            let board = 1 + rng.below(30_000u64) * 0x1_0001;
            let ways: u128 = match rng.below(4u64) {
                0 => u128::from(rng.next_u64()),
                1 => u128::from(u64::MAX - rng.below(3u64)),
                2 => (u128::from(rng.below(1u64 << 20)) << 64) | 5,
                _ => u128::from(rng.below(1000u64)) + 1,
            };
            sums.add(board, ways);
            *expected.entry(board).or_default() += ways;
        }
        let buckets = sums.into_buckets(3).unwrap();
        let mut got = std::collections::BTreeMap::new();
        for (q, bucket) in buckets.iter().enumerate() {
            assert!(bucket.boards.windows(2).all(|w| w[0] < w[1]), "sorted");
            for (&board, &ways) in bucket.boards.iter().zip(&bucket.counts) {
                assert_eq!(bucket_of(u128::from(board), 3), q as u32);
                got.insert(board, ways);
            }
        }
        assert_eq!(got, expected);
        assert!(expected.values().any(|&w| w > u128::from(u64::MAX)));
        // A sum past 128 bits is an error, not a wrapped count.
        let mut sums = CountSums::for_boards(1, 7);
        sums.add(7, u128::MAX);
        sums.add(7, 1);
        assert!(sums.into_buckets(1).is_err());
    }

    #[test]
    fn rebucketing_one_bucket_equals_bucketing_at_once() {
        let game = PegGame::new(BoardShape::Triangle(6), Some(4), None).unwrap();
        let control = Control::new();
        let mut one = vec![start_bucket(&game)];
        for level in 0..4 {
            one = expand_level(&game, level, one, 1, &control).unwrap().sent;
        }
        let five = expand_level(&game, 4, one.clone(), 5, &control)
            .unwrap()
            .sent;
        let single = expand_level(&game, 4, one, 1, &control).unwrap().sent;
        let single = single.into_iter().next().unwrap();
        assert!(single.len() > 20);
        assert_eq!(rebucket(single, 5), five);
    }

    #[test]
    fn malformed_buckets_are_refused() {
        let game = PegGame::new(BoardShape::Triangle(5), Some(1), None).unwrap();
        let control = Control::new();
        let first = expand_level(&game, 0, vec![start_bucket(&game)], 1, &control).unwrap();
        let good = expand_level(&game, 1, first.sent, 1, &control)
            .unwrap()
            .sent
            .remove(0);
        let bytes = good.encode();
        assert_eq!(PegBucket::decode(&bytes).unwrap(), good);
        for cut in 0..bytes.len() {
            assert!(PegBucket::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(PegBucket::decode(&longer).is_err());
        // Counts of zero, repeated boards, boards past 64 bits.
        let zero = [1, 5, 0];
        assert!(
            PegBucket::decode(&zero)
                .unwrap_err()
                .to_string()
                .contains("zero count")
        );
        let repeated = [2, 5, 1, 0, 1];
        assert!(
            PegBucket::decode(&repeated)
                .unwrap_err()
                .to_string()
                .contains("repeats")
        );
        let mut wide = vec![1];
        varint::push(&mut wide, 1 << 64);
        wide.push(1);
        assert!(
            PegBucket::decode(&wide)
                .unwrap_err()
                .to_string()
                .contains("64 bits")
        );
        let huge = [0xff, 0xff, 0xff, 0x0f, 1, 1];
        assert!(PegBucket::decode(&huge).is_err());
        // Boards of the wrong peg count, off the board, or unsorted.
        let level_two = |bucket: PegBucket| expand_level(&game, 2, vec![bucket], 1, &control);
        assert!(level_two(good.clone()).is_ok());
        assert!(
            level_two(start_bucket(&game)).is_err(),
            "a board of 14 pegs at level 2"
        );
        let off = PegBucket {
            boards: vec![u64::MAX >> 1],
            counts: vec![1],
        };
        assert!(level_two(off).is_err());
        let mut unsorted = good.clone();
        unsorted.boards.reverse();
        unsorted.counts.reverse();
        assert!(unsorted.len() > 1);
        assert!(level_two(unsorted).is_err());
        assert!(expand_level(&game, 0, vec![start_bucket(&game)], 0, &control).is_err());
        assert!(
            expand_level(&game, 15, Vec::new(), 1, &control).is_err(),
            "past the last peg"
        );
    }
}
