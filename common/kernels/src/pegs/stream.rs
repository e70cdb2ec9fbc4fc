//! A level shard within a memory share (see `levels` for the count itself).
//!
//! The input is read board by board from the encoded parts every shard of
//! the previous level sent (a merge of sorted streams), never decoded whole.
//! The children's counts are summed in the partitioned tables of `levels`;
//! when the tables pass the shard's share of memory they are written to the
//! spill as one sorted run (every outgoing bucket in order, encoded as a
//! [`PegBucket`]) and emptied. At the end each outgoing bucket is the merge
//! of its segment of every run and of what the tables still hold, read in
//! chunks. A shard that spilled writes its outgoing buckets to the spill
//! too ([`SentBucket::Spilled`]), so its memory is its share and buffers
//! whatever its input and output.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::PegGame;
use super::form::{BoardRanks, BoardStream, FormWriter, LevelForm, encode_entries};
use super::levels::{CountSums, Expander, PegBucket, encode_raw, pegs_at_level};
use crate::spill::{
    CheckedSource, ChunkedWrite, CountedList, Room, RunOrSlice, Source, Spill, Stored,
    StoredSource, VarintStream,
};
use crate::{Control, Error, Result, invalid};

/// Boards expanded between two polls of the control and of the tables' size.
const POLL_BOARDS: usize = 4096;
/// The most bytes a shard's tables hold before they spill, whatever its
/// share: far larger tables sum no faster (each child costs a cache and TLB
/// miss either way), and the sorted runs they spill are merged with
/// sequential reads. The French board from hole 6 ran in 13 min 26 s with
/// tables of 0.7 GB a shard and in 14 min 29 s with 3 GB; with the tables
/// partitioned by the boards' high bits, in 9 min 3 s at 512 MiB and 8 min
/// 43 s at 768 MiB (peak RSS 2.61 and 3.52 GB).
const MAX_TABLE_BYTES: u64 = 768 << 20;
/// Bytes an encoded board takes at least (its gap and its count), to guess
/// how many boards some bytes hold.
const MIN_BOARD_BYTES: u64 = 2;

/// [`PegBucket::encode`]'s bytes of one outgoing bucket: in memory, or (from
/// a shard that spilled) its board count and the rest of its bytes, a range
/// of a spill run.
pub type SentBucket = CountedList;

/// One shard's part of one level, its outgoing buckets encoded.
#[derive(Debug, Default)]
pub struct EncodedLevel {
    /// Distinct classes of the level in this shard's bucket.
    pub states: u64,
    /// Those of them expanded: not pruned (see [`PegGame::worth_expanding`]);
    /// on the level of one peg, all of them.
    pub expanded: u64,
    /// Solutions among them (boards of one peg).
    pub solutions: u128,
    /// What goes to each bucket of the next level.
    pub sent: Vec<SentBucket>,
    /// Sorted runs written to the spill, and their bytes.
    pub runs: u32,
    pub spilled_bytes: u64,
    /// Children left out as they were made because they cannot finish, one
    /// for each jump to them (see [`super::PegLevel::pruned`]).
    pub pruned: u64,
    /// On the level of one peg: each class with its sum, the sum of the jump
    /// sequences reaching its boards (the solutions by final hole).
    pub finals: Vec<(u64, u128)>,
}

fn too_large() -> Error {
    Error::Internal("pegs: count exceeds 128 bits".into())
}

/// The boards of one encoded [`PegBucket`] in either form, read as they come
/// and checked as [`PegBucket::decode_as`] checks them (and, when `pegs` is
/// given, that each is a board of that many pegs of the game).
pub(super) enum PartStream<'r, S> {
    Raw(RawStream<S>),
    Compact {
        boards: Box<BoardStream<'r, S>>,
        check: Option<(u64, u32)>,
    },
}

impl<'r, S: Source> PartStream<'r, S> {
    /// `label` names the list in errors of the compact form.
    pub(super) fn new(
        source: S,
        form: LevelForm,
        ranks: &'r BoardRanks,
        label: impl FnOnce() -> String,
        check: Option<(u64, u32)>,
    ) -> Result<Self> {
        Ok(match form {
            LevelForm::Raw => PartStream::Raw(RawStream::new(source, check)?),
            LevelForm::Compact => PartStream::Compact {
                boards: Box::new(BoardStream::new(source, form, ranks, label())?),
                check,
            },
        })
    }

    #[inline]
    pub(super) fn next(&mut self) -> Result<Option<(u64, u128)>> {
        match self {
            PartStream::Raw(raw) => raw.next(),
            PartStream::Compact { boards, check } => {
                let next = boards.pull()?;
                if let (Some((board, _)), Some((holes, pegs))) = (next, *check)
                    && (board & !holes != 0 || board.count_ones() != pegs)
                {
                    return Err(invalid!(
                        "peg level bucket: board {board:#x} is not a board of {pegs} pegs on this \
                         board"
                    ));
                }
                Ok(next)
            }
        }
    }
}

/// The boards of one [`PegBucket::encode`]d list (the raw form), read as
/// they come and checked as [`PegBucket::decode`] checks them.
pub(super) struct RawStream<S> {
    stream: VarintStream<S>,
    left: u128,
    index: u64,
    previous: u64,
    check: Option<(u64, u32)>,
}

impl<S: Source> RawStream<S> {
    fn new(source: S, check: Option<(u64, u32)>) -> Result<Self> {
        let mut stream = VarintStream::new(source, "peg level bucket");
        let left = stream.varint("the board count")?;
        Ok(RawStream {
            stream,
            left,
            index: 0,
            previous: 0,
            check,
        })
    }

    fn next(&mut self) -> Result<Option<(u64, u128)>> {
        if self.left == 0 {
            if !self.stream.at_end()? {
                return Err(invalid!(
                    "peg level bucket: bytes after its {} boards",
                    self.index
                ));
            }
            return Ok(None);
        }
        let index = self.index;
        let gap = self.stream.varint("a board")?;
        if gap == 0 && index > 0 {
            return Err(invalid!(
                "peg level bucket: board {index} repeats the previous one"
            ));
        }
        let board = u64::try_from(gap)
            .ok()
            .and_then(|gap| self.previous.checked_add(gap))
            .ok_or_else(|| invalid!("peg level bucket: board {index} exceeds 64 bits"))?;
        let ways = self.stream.varint("a count")?;
        if ways == 0 {
            return Err(invalid!("peg level bucket: board {index} has a zero count"));
        }
        if let Some((holes, pegs)) = self.check
            && (board & !holes != 0 || board.count_ones() != pegs)
        {
            return Err(invalid!(
                "peg level bucket: board {board:#x} is not a board of {pegs} pegs on this board"
            ));
        }
        self.left -= 1;
        self.index += 1;
        self.previous = board;
        Ok(Some((board, ways)))
    }
}

/// Parts up to this many are merged by a scan of their heads, past it by a
/// heap: a scan of a few heads costs less than a heap's pop and push.
const SCANNED_PARTS: usize = 8;

/// Sorted streams merged into one, the counts of equal boards summed.
pub(super) struct Merged<'r, S> {
    parts: Vec<PartStream<'r, S>>,
    /// Each part's next board, `u128::MAX` once it is done (a scan).
    heads: Vec<u128>,
    /// The parts' next boards (past [`SCANNED_PARTS`] parts).
    heap: Option<BinaryHeap<Reverse<(u64, usize)>>>,
    ways: Vec<u128>,
}

impl<'r, S: Source> Merged<'r, S> {
    pub(super) fn new(parts: Vec<PartStream<'r, S>>) -> Result<Self> {
        let mut merged = Merged {
            heads: vec![u128::MAX; parts.len()],
            heap: (parts.len() > SCANNED_PARTS).then(|| BinaryHeap::with_capacity(parts.len())),
            ways: vec![0; parts.len()],
            parts,
        };
        for i in 0..merged.parts.len() {
            merged.advance(i)?;
        }
        Ok(merged)
    }

    #[inline]
    fn advance(&mut self, i: usize) -> Result<()> {
        match self.parts[i].next()? {
            Some((board, ways)) => {
                self.ways[i] = ways;
                match &mut self.heap {
                    Some(heap) => heap.push(Reverse((board, i))),
                    None => self.heads[i] = u128::from(board),
                }
            }
            None => self.heads[i] = u128::MAX,
        }
        Ok(())
    }

    pub(super) fn next(&mut self) -> Result<Option<(u64, u128)>> {
        if self.heap.is_some() {
            return self.next_by_heap();
        }
        let least = self.heads.iter().copied().min().unwrap_or(u128::MAX);
        if least == u128::MAX {
            return Ok(None);
        }
        let mut ways = 0u128;
        for i in 0..self.heads.len() {
            if self.heads[i] == least {
                ways = ways.checked_add(self.ways[i]).ok_or_else(too_large)?;
                self.advance(i)?;
            }
        }
        Ok(Some((least as u64, ways)))
    }

    fn next_by_heap(&mut self) -> Result<Option<(u64, u128)>> {
        let heap = self.heap.as_mut().expect("a heap");
        let Some(Reverse((board, i))) = heap.pop() else {
            return Ok(None);
        };
        let mut ways = self.ways[i];
        self.advance(i)?;
        loop {
            let heap = self.heap.as_mut().expect("a heap");
            match heap.peek() {
                Some(&Reverse((next, j))) if next == board => {
                    heap.pop();
                    ways = ways.checked_add(self.ways[j]).ok_or_else(too_large)?;
                    self.advance(j)?;
                }
                _ => break,
            }
        }
        Ok(Some((board, ways)))
    }
}

/// `sums` in `buckets` buckets, each encoded as [`PegBucket::encode_as`]
/// encodes it, one bucket at a time (the buckets are never held decoded).
fn encoded_buckets(
    sums: CountSums,
    buckets: u32,
    form: LevelForm,
    ranks: &BoardRanks,
) -> Result<Vec<Vec<u8>>> {
    let sorted = sums.into_sorted(buckets)?;
    Ok((sorted.into_iter())
        .map(|sorted| encode_entries(form, ranks, sorted.len(), sorted.entries()))
        .collect())
}

/// `sums` in `buckets` buckets for a spill run, each in the raw form: a run
/// is read back only by the shard that wrote it, as it merges them, so it is
/// written in the form quickest to write and read (the compact form's bit
/// codes cost about a tenth of a spilling level's time, for a fifth fewer
/// bytes). With `checked`, each with its CRC-32, kept in memory; without,
/// for what the tables still hold when the shard merges (never on disk).
fn encoded_run_buckets(
    sums: CountSums,
    buckets: u32,
    checked: bool,
) -> Result<Vec<(Vec<u8>, Option<u32>)>> {
    let sorted = sums.into_sorted(buckets)?;
    Ok((sorted.into_iter())
        .map(|sorted| {
            let bytes = encode_raw(sorted.len(), sorted.entries());
            let crc = checked.then(|| crc32fast::hash(&bytes));
            (bytes, crc)
        })
        .collect())
}

/// The children's sums, spilled as sorted runs when they pass `limit` bytes.
pub(super) struct SpillingSums<'r, 's> {
    sums: CountSums,
    /// What the sums are, named in errors (say `peg level 9`).
    name: String,
    form: LevelForm,
    ranks: &'r BoardRanks,
    boards_hint: usize,
    limit: u64,
    buckets: u32,
    /// The hole mask and peg count of every board summed: a board read back
    /// from a run must be one.
    boards: (u64, u32),
    room: &'r mut Room<'s>,
    /// For each run: its number and each bucket's part of it.
    runs: Vec<(u32, Vec<RunPart>)>,
    spilled_bytes: u64,
}

/// One outgoing bucket's bytes in a spill run, and their CRC-32.
#[derive(Clone)]
struct RunPart {
    range: std::ops::Range<u64>,
    crc: Option<u32>,
}

/// What [`SpillingSums::finish`] sends, and what it took.
pub(super) struct SentSums {
    pub(super) sent: Vec<SentBucket>,
    /// Runs made and bytes spilled.
    pub(super) runs: u32,
    pub(super) spilled_bytes: u64,
}

impl<'r, 's> SpillingSums<'r, 's> {
    /// Empty tables for `buckets` outgoing buckets, spilling past a third of
    /// `room.memory` (the rest is for the copy a table takes while it
    /// spills, the input's buffers and the output), sized for an input of
    /// `input_bytes`, written in `form`; `name` says what the sums are in
    /// errors, `boards` the hole mask and peg count of every board summed.
    // The room, what the sums are, and their buckets and form are each the
    // caller's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        room: &'r mut Room<'s>,
        name: String,
        boards: (u64, u32),
        buckets: u32,
        input_bytes: u64,
        form: LevelForm,
        ranks: &'r BoardRanks,
    ) -> Self {
        // A table at its limit and the buckets it is sorted into (16 bytes
        // a board, at most three quarters of its slots) take under twice
        // the limit while it spills.
        let limit = (room.memory / 3).min(MAX_TABLE_BYTES);
        // A table slot takes 16 bytes; the hint errs low, the tables grow.
        let boards_hint = (input_bytes / MIN_BOARD_BYTES).min((limit / 32).max(1)) as usize;
        SpillingSums {
            sums: CountSums::for_boards(boards_hint, boards.0),
            name,
            form,
            ranks,
            boards_hint,
            limit,
            buckets,
            boards,
            room,
            runs: Vec::new(),
            spilled_bytes: 0,
        }
    }

    /// The bytes the tables hold now.
    pub(super) fn table_bytes(&self) -> u64 {
        self.sums.bytes()
    }

    /// Adds `ways` to `board`'s sum (call [`Self::spill_if_full`] now and then).
    pub(super) fn add(&mut self, board: u64, ways: u128) {
        self.sums.add(board, ways);
    }

    pub(super) fn spill_if_full(&mut self) -> Result<()> {
        if self.sums.bytes() <= self.limit {
            return Ok(());
        }
        let full = std::mem::replace(
            &mut self.sums,
            CountSums::for_boards(self.boards_hint, self.boards.0),
        );
        let mut ranges = Vec::with_capacity(self.buckets as usize);
        let mut at = 0;
        let buckets = encoded_run_buckets(full, self.buckets, true)?;
        for (bytes, crc) in buckets {
            self.room.spill.write(&bytes)?;
            let range = at..at + bytes.len() as u64;
            ranges.push(RunPart { range, crc });
            at += bytes.len() as u64;
        }
        let run = self.room.spill.end_run()?;
        self.spilled_bytes += at;
        self.runs.push((run, ranges));
        Ok(())
    }

    /// Each outgoing bucket, encoded: the tables' part merged with every
    /// run's, written to one run of the spill as it is merged. With the runs
    /// made and the bytes spilled.
    pub(super) fn finish(self) -> Result<SentSums> {
        let runs = self.runs.len() as u32;
        if self.runs.is_empty() {
            let held = encoded_buckets(self.sums, self.buckets, self.form, self.ranks)?;
            let sent = held.into_iter().map(SentBucket::Bytes).collect();
            return Ok(SentSums {
                sent,
                runs: 0,
                spilled_bytes: 0,
            });
        }
        // The runs are read through handles of their own while the merge is
        // written to the spill.
        // What the tables hold is merged with the runs as one more of them.
        let held = encoded_run_buckets(self.sums, self.buckets, false)?;
        let kept = (self.runs.iter())
            .map(|(run, _)| self.room.spill.keep_run(*run))
            .collect::<Result<Vec<Arc<dyn Stored>>>>()?;
        let mut bodies = Vec::with_capacity(held.len());
        let mut at = 0;
        let (form, ranks, name) = (self.form, self.ranks, &self.name);
        // A damaged run may read as boards out of order before its checksum
        // is reached: each board read back must be one the shard summed.
        let check = Some(self.boards);
        for (q, in_memory) in held.into_iter().enumerate() {
            let mut parts = Vec::with_capacity(self.runs.len() + 1);
            for (i, (stored, (_, ranges))) in kept.iter().zip(&self.runs).enumerate() {
                let RunPart { range, crc } = ranges[q].clone();
                let source = RunOrSlice::Run(StoredSource::new(&**stored, range));
                let label = format!("{name}: spill run {i} of bucket {q}");
                parts.push(PartStream::Raw(RawStream::new(
                    CheckedSource::new(source, crc, label),
                    check,
                )?));
            }
            let (in_memory, crc) = in_memory;
            let source = RunOrSlice::Slice(&in_memory[..]);
            let label = format!("{name}: bucket {q} in memory");
            parts.push(PartStream::Raw(RawStream::new(
                CheckedSource::new(source, crc, label),
                check,
            )?));
            let merged = Merged::new(parts)?;
            let (count, len) = write_merged(merged, &mut *self.room.spill, form, ranks)?;
            bodies.push((count, at..at + len));
            at += len;
        }
        let run = self.room.spill.end_run()?;
        let sent = (bodies.into_iter())
            .map(|(count, body)| SentBucket::Spilled { count, run, body })
            .collect();
        Ok(SentSums {
            sent,
            runs,
            spilled_bytes: self.spilled_bytes + at,
        })
    }
}

/// Writes a merge to `spill` as [`PegBucket::encode_as`] writes a bucket's
/// boards in `form` (their count, which comes first, is returned instead):
/// the count and the bytes written.
fn write_merged<S: Source>(
    mut merged: Merged<'_, S>,
    spill: &mut dyn Spill,
    form: LevelForm,
    ranks: &BoardRanks,
) -> Result<(u128, u64)> {
    let mut out = ChunkedWrite::new(spill);
    let mut writer = FormWriter::new(form, ranks);
    while let Some((board, ways)) = merged.next()? {
        writer.push(board, ways, &mut out.buf);
        out.flush_if_full()?;
    }
    let count = writer.finish(&mut out.buf);
    Ok((count, out.finish()?))
}

/// Bucket `q` of level `level` (see [`super::expand_level`]) from the parts
/// every shard of the previous level sent it, encoded in `form` (and its
/// output in the same form), within `room`: the
/// children's tables spill to `room.spill` past a third of `room.memory`
/// (the rest is for the copy a table takes while it spills, the input's
/// buffers and the output). The same classes,
/// solutions and buckets as [`super::expand_level`], encoded.
// The level, its parts and their form, the outgoing buckets, the room and
// the control are each the caller's.
#[allow(clippy::too_many_arguments)]
pub fn expand_level_within<S: Source>(
    game: &PegGame,
    level: u32,
    parts: Vec<S>,
    input_bytes: u64,
    buckets_out: u32,
    form: LevelForm,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<EncodedLevel> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let pegs = pegs_at_level(game, level)
        .filter(|&p| p >= 1)
        .ok_or_else(|| invalid!("level {level} is past the last peg of the {}", game.shape()))?;
    let check = Some((game.hole_mask(), pegs));
    let ranks = BoardRanks::new(game.hole_mask());
    let streams = (parts.into_iter().enumerate())
        .map(|(i, part)| {
            let label = || format!("peg level {level}: the part of shard {i}");
            PartStream::new(part, form, &ranks, label, check)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut input = Merged::new(streams)?;
    let mut outcome = EncodedLevel::default();
    if pegs == 1 {
        while let Some((board, ways)) = input.next()? {
            outcome.states += 1;
            outcome.finals.push((board, ways));
            outcome.solutions = game
                .final_value(board)
                .checked_mul(ways)
                .and_then(|w| w.checked_add(outcome.solutions))
                .ok_or_else(too_large)?;
        }
        control.add_work(outcome.states);
        outcome.expanded = outcome.states;
        let empty = PegBucket::default().encode_as(form, &ranks);
        outcome.sent = vec![SentBucket::Bytes(empty); buckets_out as usize];
        return Ok(outcome);
    }
    let name = format!("peg level {}", level + 1);
    let children = (game.hole_mask(), pegs - 1);
    let mut sums = SpillingSums::new(room, name, children, buckets_out, input_bytes, form, &ranks);
    let mut expander = Expander::new(game, pegs);
    loop {
        control.check()?;
        let mut expanded = 0;
        while expanded < POLL_BOARDS {
            let Some((board, ways)) = input.next()? else {
                break;
            };
            expanded += 1;
            let Some(children) = expander.expand(board) else {
                continue;
            };
            outcome.expanded += 1;
            for &child in children {
                sums.add(child, ways);
            }
        }
        outcome.states += expanded as u64;
        control.add_work(expanded as u64);
        if expanded < POLL_BOARDS {
            break;
        }
        sums.spill_if_full()?;
    }
    let sums = sums.finish()?;
    outcome.sent = sums.sent;
    outcome.runs = sums.runs;
    outcome.spilled_bytes = sums.spilled_bytes;
    outcome.pruned = expander.pruned;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::{BoardShape, expand_level, start_bucket};
    use crate::spill::MemorySpill;
    use crate::varint;

    /// The levels of `game` up to `last` with `buckets` buckets each, by the
    /// decoded kernel: each level's shards' outputs.
    fn levels_decoded(game: &PegGame, last: u32, buckets: u32) -> Vec<Vec<Vec<PegBucket>>> {
        let control = Control::new();
        let mut inbox = vec![vec![start_bucket(game)]];
        let mut levels = Vec::new();
        for level in 0..last {
            let mut outputs = Vec::new();
            let mut next = vec![Vec::new(); buckets as usize];
            for inputs in inbox {
                let part = expand_level(game, level, inputs, buckets, &control).unwrap();
                for (q, bucket) in part.sent.iter().enumerate() {
                    next[q].push(bucket.clone());
                }
                outputs.push(part.sent);
            }
            levels.push(outputs);
            inbox = next;
        }
        levels
    }

    /// In both forms (the raw one of jobs planned before the compact form,
    /// which must still read).
    #[test]
    fn a_level_that_spills_equals_the_level_held_in_memory() {
        let game = PegGame::new(BoardShape::English, None, None).unwrap();
        let ranks = BoardRanks::new(game.hole_mask());
        let control = Control::new();
        let levels = levels_decoded(&game, 10, 3);
        // Level 10's bucket 1, from the three shards of level 9.
        let inputs: Vec<PegBucket> = levels[9].iter().map(|sent| sent[1].clone()).collect();
        let expected = expand_level(&game, 10, inputs, 4, &control).unwrap();
        assert!(expected.states > 10_000, "{}", expected.states);
        for (form, memory) in [LevelForm::Raw, LevelForm::Compact]
            .into_iter()
            .flat_map(|form| [u64::MAX, 1 << 18, 0].map(|memory| (form, memory)))
        {
            let encode = |bucket: &PegBucket| bucket.encode_as(form, &ranks);
            let parts: Vec<Vec<u8>> = levels[9].iter().map(|sent| encode(&sent[1])).collect();
            let input_bytes = parts.iter().map(|p| p.len() as u64).sum();
            let mut spill = MemorySpill::default();
            let mut room = Room {
                memory,
                spill: &mut spill,
            };
            let slices = parts.iter().map(Vec::as_slice).collect();
            let got =
                expand_level_within(&game, 10, slices, input_bytes, 4, form, &mut room, &control)
                    .unwrap();
            assert_eq!(got.states, expected.states);
            let decoded: Vec<PegBucket> = (got.sent.iter())
                .map(|b| {
                    let bytes = b.to_bytes(&spill).unwrap();
                    PegBucket::decode_as(&bytes, form, &ranks, "test").unwrap()
                })
                .collect();
            let lengths: Vec<u64> = (expected.sent.iter())
                .map(|b| encode(b).len() as u64)
                .collect();
            let sent_lengths: Vec<u64> = got.sent.iter().map(SentBucket::len).collect();
            assert_eq!(sent_lengths, lengths, "memory {memory}");
            assert_eq!(decoded, expected.sent, "memory {memory}");
            match memory {
                u64::MAX => {
                    assert_eq!((got.runs, spill.bytes_written()), (0, 0));
                    assert!(matches!(got.sent[0], SentBucket::Bytes(_)));
                }
                _ => {
                    assert!(got.runs >= 2, "memory {memory}: {} runs", got.runs);
                    assert_eq!(got.spilled_bytes, spill.bytes_written());
                    assert!(matches!(got.sent[0], SentBucket::Spilled { .. }));
                    // Copied into a run of their own, as a stage output is.
                    for bucket in &got.sent {
                        bucket.write_to(&mut spill).unwrap();
                    }
                    let run = spill.end_run().unwrap();
                    let whole = spill.keep_run(run).unwrap();
                    let together: Vec<u8> = expected.sent.iter().flat_map(encode).collect();
                    assert_eq!(whole.read_range(0..whole.len()).unwrap(), together);
                }
            }
        }
    }

    /// A spill whose kept run `run` reads with bit `bit` of byte `at`
    /// flipped, as a run damaged on disk would.
    struct DamagingSpill {
        inner: MemorySpill,
        run: u32,
        at: usize,
        bit: u32,
    }

    impl Spill for DamagingSpill {
        fn write(&mut self, bytes: &[u8]) -> Result<()> {
            self.inner.write(bytes)
        }
        fn end_run(&mut self) -> Result<u32> {
            self.inner.end_run()
        }
        fn read_at(&self, run: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
            self.inner.read_at(run, offset, buf)
        }
        fn bytes_written(&self) -> u64 {
            self.inner.bytes_written()
        }
        fn keep_run(&self, run: u32) -> Result<Arc<dyn Stored>> {
            let kept = self.inner.keep_run(run)?;
            if run != self.run {
                return Ok(kept);
            }
            let mut bytes = kept.read_range(0..kept.len())?;
            bytes[self.at] ^= 1 << self.bit;
            Ok(Arc::new(bytes))
        }
        fn release_run(&mut self, run: u32) -> Result<()> {
            self.inner.release_run(run)
        }
    }

    /// A spill run that reads back otherwise than it was written is
    /// refused: bytes whose change the raw form still parses (a count's
    /// bits) are caught by the run's checksum, never summed as other counts.
    #[test]
    fn a_damaged_spill_run_is_refused() {
        let game = PegGame::new(BoardShape::English, None, None).unwrap();
        let ranks = BoardRanks::new(game.hole_mask());
        let control = Control::new();
        let levels = levels_decoded(&game, 9, 2);
        let form = LevelForm::Compact;
        let parts: Vec<Vec<u8>> = (levels[8].iter())
            .map(|sent| sent[0].encode_as(form, &ranks))
            .collect();
        let input_bytes = parts.iter().map(|p| p.len() as u64).sum();
        let expand = |spill: &mut dyn Spill| {
            let mut room = Room {
                memory: 1 << 18,
                spill,
            };
            let slices = parts.iter().map(Vec::as_slice).collect();
            expand_level_within(&game, 9, slices, input_bytes, 2, form, &mut room, &control)
        };
        let mut whole = MemorySpill::default();
        let sound = expand(&mut whole).unwrap();
        assert!(sound.runs >= 2, "{} runs", sound.runs);
        let first_run = whole.keep_run(0).unwrap().len() as usize;
        let (mut by_checksum, mut tried) = (0, 0);
        for at in (0..first_run).step_by(first_run / 40) {
            for bit in [0, 1, 6] {
                let mut spill = DamagingSpill {
                    inner: MemorySpill::default(),
                    run: 0,
                    at,
                    bit,
                };
                let Err(e) = expand(&mut spill) else {
                    panic!("byte {at} bit {bit} of run 0 changed and was read");
                };
                tried += 1;
                let message = e.to_string();
                if message.contains("checksum fails") {
                    assert!(message.contains("spill run 0 of bucket"), "{message}");
                    by_checksum += 1;
                }
            }
        }
        assert!(
            by_checksum > tried / 4,
            "{by_checksum} of {tried} damaged runs were caught by their checksum"
        );
    }

    #[test]
    fn streamed_input_is_checked_like_decoded_input() {
        let game = PegGame::new(BoardShape::Triangle(5), Some(1), None).unwrap();
        let control = Control::new();
        let levels = levels_decoded(&game, 2, 1);
        let good = levels[1][0][0].encode();
        let run_as = |bytes: &[u8], level, form| {
            let mut spill = MemorySpill::default();
            let mut room = Room {
                memory: u64::MAX,
                spill: &mut spill,
            };
            expand_level_within(
                &game,
                level,
                vec![bytes],
                bytes.len() as u64,
                1,
                form,
                &mut room,
                &control,
            )
        };
        let run = |bytes: &[u8], level| run_as(bytes, level, LevelForm::Raw);
        assert!(run(&good, 2).is_ok());
        assert!(run(&good, 3).is_err(), "boards of the wrong peg count");
        for cut in 0..good.len() {
            assert!(run(&good[..cut], 2).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(run(&longer, 2).is_err());
        assert!(
            run(&[1, 5, 0], 2)
                .unwrap_err()
                .to_string()
                .contains("zero count")
        );
        let mut wide = vec![1];
        varint::push(&mut wide, 1 << 64);
        wide.push(1);
        assert!(run(&wide, 2).unwrap_err().to_string().contains("64 bits"));

        // The compact form: a level cut short or damaged anywhere is refused,
        // naming the level and the shard whose part it is.
        let ranks = BoardRanks::new(game.hole_mask());
        let good = levels[1][0][0].encode_as(LevelForm::Compact, &ranks);
        let run = |bytes: &[u8], level| run_as(bytes, level, LevelForm::Compact);
        assert_eq!(run(&good, 2).unwrap().states, levels[1][0][0].len() as u64);
        assert!(run(&good, 3).is_err(), "boards of the wrong peg count");
        let named = "peg level 2: the part of shard 0: ";
        for cut in 0..good.len() {
            let e = run(&good[..cut], 2).unwrap_err().to_string();
            assert!(e.starts_with(named), "cut at {cut}: {e}");
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut damaged = good.clone();
                damaged[at] ^= 1 << bit;
                let e = run(&damaged, 2).unwrap_err().to_string();
                assert!(e.starts_with(named), "byte {at} bit {bit}: {e}");
            }
        }
    }

    /// Merges of a few parts (a scan) and of many (a heap) sum what a map
    /// of every part's entries sums, parts empty or not, boards shared or not.
    #[test]
    fn merges_of_few_and_many_parts_sum_every_board() {
        let mut rng = crate::test_rng::Rng::new(5556);
        let ranks = BoardRanks::new(u64::MAX);
        // Boards of one peg count, as a level's are.
        let boards: Vec<u64> = (0..1u64 << 12).filter(|b| b.count_ones() == 4).collect();
        for parts in [1, 2, 3, SCANNED_PARTS, SCANNED_PARTS + 1, 3 * SCANNED_PARTS] {
            let mut expected = std::collections::BTreeMap::new();
            let buckets: Vec<Vec<u8>> = (0..parts)
                .map(|_| {
                    let mut bucket = std::collections::BTreeMap::new();
                    for _ in 0..rng.below(200u64) {
                        let board = boards[rng.below(boards.len() as u64) as usize];
                        let ways = u128::from(1 + rng.below(1000u64));
                        *bucket.entry(board).or_insert(0u128) += ways;
                        *expected.entry(board).or_insert(0u128) += ways;
                    }
                    let bucket = PegBucket {
                        boards: bucket.keys().copied().collect(),
                        counts: bucket.values().copied().collect(),
                    };
                    bucket.encode_as(LevelForm::Compact, &ranks)
                })
                .collect();
            let streams = (buckets.iter())
                .map(|bytes| {
                    let label = || "test".into();
                    PartStream::new(&bytes[..], LevelForm::Compact, &ranks, label, None).unwrap()
                })
                .collect();
            let mut merged = Merged::new(streams).unwrap();
            let mut got = Vec::new();
            while let Some(entry) = merged.next().unwrap() {
                got.push(entry);
            }
            let expected: Vec<(u64, u128)> = expected.into_iter().collect();
            assert_eq!(got, expected, "{parts} parts");
        }
    }

    #[test]
    fn sums_past_128_bits_in_a_merge_are_refused() {
        let a = PegBucket {
            boards: vec![7],
            counts: vec![u128::MAX],
        };
        let b = PegBucket {
            boards: vec![7],
            counts: vec![1],
        };
        let ranks = BoardRanks::new(u64::MAX);
        for form in [LevelForm::Raw, LevelForm::Compact] {
            let (a, b) = (a.encode_as(form, &ranks), b.encode_as(form, &ranks));
            let part = |bytes| PartStream::new(bytes, form, &ranks, || "test".into(), None);
            let parts = vec![part(&a[..]).unwrap(), part(&b[..]).unwrap()];
            let mut spill = MemorySpill::default();
            let merged = Merged::new(parts).unwrap();
            assert!(write_merged(merged, &mut spill, form, &ranks).is_err());
        }
    }
}
