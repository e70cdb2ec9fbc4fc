//! A forward level shard within a memory share: the same level and the same
//! bytes as [`super::levels::expand_forward`], without holding the level.
//!
//! Every sender's forward bucket (candidates with their counts and moves
//! back, then the level before) and members are read as streams; the
//! candidates are merged and summed and the two earlier levels removed in the
//! same walk. What the shard gathers for each bucket of the next level (the
//! neighbours with their counts, its own boards, the level before) spills to
//! the spill as one sorted run whenever it passes half of the share; at the
//! end each list is the merge of its runs, written to the spill as it is
//! merged when the shard spilled. Buckets are read in the form their tags
//! say and written in the job's form ([`ListForm`]); the runs of the spill,
//! which no other shard reads, are always raw.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;
use std::sync::Arc;

use super::forms::{
    CandidateWriter, TAG_FORWARD_COMPACT, TAG_MEMBERS_COMPACT, candidate_of, forward_lists,
};
use super::levels::{Boards, TAG_FORWARD, TAG_FORWARD_PLAIN, TAG_MEMBERS};
use super::state::StateHint;
use crate::buckets::bucket_of;
use crate::compact::{ListForm, ListStream};
use crate::spill::{
    ChunkedWrite, CountedList, IncreasingStream, MergedIncreasing, Room, RunOrSlice, Source, Spill,
    Stored, StoredSource, VarintStream, write_bucket_lists, write_increasing_as,
};
use crate::varint::{push as push_varint, push_increasing};
use crate::{Control, Result, invalid};

/// Boards expanded between two polls of the control.
const POLL_BOARDS: usize = 4096;
/// Bytes a neighbour takes while it is gathered (its key and its count).
const SENT_BYTES: u64 = 32;
/// Bytes a board of a list takes while it is gathered.
const BOARD_BYTES: u64 = 8;

/// One forward shard's level, its `2 P` outgoing buckets as pieces.
#[derive(Debug, Default)]
pub struct EncodedForward {
    /// Boards of the level in the shard's bucket.
    pub boards: u64,
    /// The shortest sequences to the target, if it is in this bucket.
    pub target_paths: Option<u128>,
    /// The forward buckets, then the members, each as pieces written one
    /// after another.
    pub sent: Vec<Vec<CountedList>>,
    pub runs: u32,
    pub spilled_bytes: u64,
}

/// The candidates of a forward bucket (or of a run's segment: the same
/// entries without the tag), read as they come and checked as
/// [`super::levels::ForwardBucket::decode`] checks them.
struct CandidateStream<S> {
    stream: VarintStream<S>,
    left: u128,
    index: u64,
    last: Option<u64>,
    with_back: bool,
    /// A compact bucket's candidates and its label, read instead of `stream`.
    compact: Option<(ListStream<S>, String)>,
}

impl<S: Source> CandidateStream<S> {
    /// A bucket's candidates: its tag, its count, then its entries.
    fn bucket(source: S) -> Result<Self> {
        let mut stream = VarintStream::new(source, "forward bucket");
        let with_back = match stream.varint("its tag")? {
            tag if tag == u128::from(TAG_FORWARD) => true,
            tag if tag == u128::from(TAG_FORWARD_PLAIN) => false,
            tag => {
                return Err(invalid!(
                    "forward bucket: tag {tag} where {TAG_FORWARD} was expected"
                ));
            }
        };
        CandidateStream::entries(stream, with_back)
    }

    /// A segment of a run: its count, then its entries.
    fn segment(source: S) -> Result<Self> {
        CandidateStream::entries(VarintStream::new(source, "forward bucket"), true)
    }

    fn entries(mut stream: VarintStream<S>, with_back: bool) -> Result<Self> {
        let left = stream.varint("the candidate count")?;
        Ok(CandidateStream {
            stream,
            left,
            index: 0,
            last: None,
            with_back,
            compact: None,
        })
    }

    /// The candidates' list of a compact bucket (`candidates`), and a source
    /// that ends at once for the raw reader it replaces.
    fn compact(candidates: S, empty: S, label: String) -> Result<Self> {
        let list = ListStream::new(candidates, format!("{label}: its candidates"))?;
        Ok(CandidateStream {
            stream: VarintStream::new(empty, "forward bucket"),
            left: 0,
            index: 0,
            last: None,
            with_back: true,
            compact: Some((list, label)),
        })
    }

    /// The next candidate: its board, its count and its moves back.
    fn next(&mut self) -> Result<Option<(u64, u128, u8)>> {
        if let Some((list, label)) = &mut self.compact {
            let Some((key, paths)) = list.pull()? else {
                return Ok(None);
            };
            let c = candidate_of(key, paths, label, self.index)?;
            self.index += 1;
            return Ok(Some((c.board, c.paths, c.back)));
        }
        if self.left == 0 {
            return Ok(None);
        }
        let i = self.index;
        let code = self.stream.varint("a candidate")?;
        let (board, back) = super::levels::next_candidate(code, self.with_back, self.last, i)?;
        let paths = self.stream.varint("a sequence count")?;
        if paths == 0 {
            return Err(invalid!(
                "forward bucket: candidate {i} is reached by no sequence"
            ));
        }
        self.left -= 1;
        self.index += 1;
        self.last = Some(board);
        Ok(Some((board, paths, back)))
    }
}

/// Candidate streams merged, the counts of equal boards summed and their
/// moves back joined.
struct MergedCandidates<S> {
    parts: Vec<CandidateStream<S>>,
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    held: Vec<(u128, u8)>,
}

impl<S: Source> MergedCandidates<S> {
    fn new(parts: Vec<CandidateStream<S>>) -> Result<Self> {
        let mut merged = MergedCandidates {
            heads: BinaryHeap::with_capacity(parts.len()),
            held: vec![(0, 0); parts.len()],
            parts,
        };
        for i in 0..merged.parts.len() {
            merged.advance(i)?;
        }
        Ok(merged)
    }

    fn advance(&mut self, i: usize) -> Result<()> {
        if let Some((board, paths, back)) = self.parts[i].next()? {
            self.held[i] = (paths, back);
            self.heads.push(Reverse((board, i)));
        }
        Ok(())
    }

    fn next(&mut self) -> Result<Option<(u64, u128, u8)>> {
        let Some(Reverse((board, i))) = self.heads.pop() else {
            return Ok(None);
        };
        let (mut paths, mut back) = self.held[i];
        self.advance(i)?;
        while let Some(&Reverse((next, j))) = self.heads.peek() {
            if next != board {
                break;
            }
            self.heads.pop();
            paths = paths
                .checked_add(self.held[j].0)
                .ok_or_else(|| overflow(board))?;
            back |= self.held[j].1;
            self.advance(j)?;
        }
        Ok(Some((board, paths, back)))
    }
}

fn overflow(board: u64) -> crate::Error {
    invalid!("the number of sequences reaching board {board} overflows 128 bits")
}

/// The next level's lists by bucket: neighbours (key `board << 4 | back`,
/// count), the level's boards, the level before; spilled as runs past
/// `limit` bytes.
struct SpillingForward<'r, 's> {
    sent: Vec<Vec<(u64, u128)>>,
    members: Vec<Vec<u64>>,
    previous: Vec<Vec<u64>>,
    held: u64,
    limit: u64,
    /// The form of the buckets sent on.
    form: ListForm,
    room: &'r mut Room<'s>,
    /// For each run: its number and each bucket's three byte ranges in it.
    runs: Vec<(u32, Vec<[Range<u64>; 3]>)>,
    spilled_bytes: u64,
}

/// A bucket's neighbours summed by board (exactly: a sum past 128 bits is
/// refused) and encoded as a forward bucket's entries, after their count:
/// raw, or as a compact list.
fn encode_sent(mut sent: Vec<(u64, u128)>, form: ListForm) -> Result<Vec<u8>> {
    sent.sort_unstable_by_key(|&(key, _)| key);
    let mut body = Vec::new();
    let mut count = 0u128;
    let mut last = 0;
    let mut compact = CandidateWriter::new();
    for same in sent.chunk_by(|a, b| a.0 >> 4 == b.0 >> 4) {
        let board = same[0].0 >> 4;
        let paths = same
            .iter()
            .try_fold(0u128, |sum, &(_, p)| sum.checked_add(p))
            .ok_or_else(|| overflow(board))?;
        let back = same.iter().fold(0, |b, &(key, _)| b | (key & 15) as u8);
        match form {
            ListForm::Raw => {
                push_varint(&mut body, u128::from(board - last) << 4 | u128::from(back));
                push_varint(&mut body, paths);
            }
            ListForm::Compact => compact.push(board, paths, back, &mut body),
        }
        last = board;
        count += 1;
    }
    if form == ListForm::Compact {
        count = compact.finish(&mut body);
    }
    let mut out = Vec::with_capacity(body.len() + 10);
    push_varint(&mut out, count);
    out.extend_from_slice(&body);
    Ok(out)
}

impl SpillingForward<'_, '_> {
    fn spill_if_full(&mut self) -> Result<()> {
        if self.held <= self.limit {
            return Ok(());
        }
        let (sent, members, previous) = (&mut self.sent, &mut self.members, &mut self.previous);
        let buckets = (0..sent.len()).map(|q| {
            Ok([
                encode_sent(std::mem::take(&mut sent[q]), ListForm::Raw)?,
                increasing(&std::mem::take(&mut members[q])),
                increasing(&std::mem::take(&mut previous[q])),
            ])
        });
        let (run, ranges, bytes) = write_bucket_lists(&mut *self.room.spill, buckets)?;
        self.spilled_bytes += bytes;
        self.held = 0;
        self.runs.push((run, ranges));
        Ok(())
    }

    /// The `2 P` outgoing buckets: in memory if nothing spilled, else each
    /// list the merge of its segments, written to one run as it is merged.
    fn finish(mut self) -> Result<(Vec<Vec<CountedList>>, u32, u64)> {
        let p = self.sent.len();
        let runs = self.runs.len() as u32;
        let form = self.form;
        let tag = |t: u8| CountedList::Bytes(vec![t]);
        // A forward bucket from its two lists; in the compact form the
        // candidates' length follows the tag.
        let forward = |sent: CountedList, previous: CountedList| match form {
            ListForm::Raw => vec![tag(TAG_FORWARD), sent, previous],
            ListForm::Compact => vec![
                tag(TAG_FORWARD_COMPACT),
                CountedList::Bytes(sent.len().to_le_bytes().to_vec()),
                sent,
                previous,
            ],
        };
        let members_tag = match form {
            ListForm::Raw => TAG_MEMBERS,
            ListForm::Compact => TAG_MEMBERS_COMPACT,
        };
        if self.runs.is_empty() {
            let mut buckets = Vec::with_capacity(2 * p);
            for q in 0..p {
                let sent = encode_sent(std::mem::take(&mut self.sent[q]), form)?;
                let previous = increasing_as(form, &self.previous[q]);
                buckets.push(forward(
                    CountedList::Bytes(sent),
                    CountedList::Bytes(previous),
                ));
            }
            for members in &self.members {
                buckets.push(vec![
                    tag(members_tag),
                    CountedList::Bytes(increasing_as(form, members)),
                ]);
            }
            return Ok((buckets, 0, 0));
        }
        let kept = (self.runs.iter())
            .map(|(run, _)| self.room.spill.keep_run(*run))
            .collect::<Result<Vec<Arc<dyn Stored>>>>()?;
        let mut at = 0;
        let mut lists = Vec::with_capacity(p);
        for q in 0..p {
            let in_memory = [
                encode_sent(std::mem::take(&mut self.sent[q]), ListForm::Raw)?,
                increasing(&self.members[q]),
                increasing(&self.previous[q]),
            ];
            let segment = |i: usize| {
                (kept.iter().zip(&self.runs))
                    .map(move |(stored, (_, ranges))| {
                        RunOrSlice::Run(StoredSource::new(&**stored, ranges[q][i].clone()))
                    })
                    .chain(std::iter::once(RunOrSlice::Slice(&in_memory[i][..])))
            };
            let spill = &mut *self.room.spill;
            let sent = segment(0)
                .map(CandidateStream::segment)
                .collect::<Result<Vec<_>>>()?;
            let (count, len) = write_candidates(MergedCandidates::new(sent)?, form, spill)?;
            let mut bucket = vec![(count, at..at + len)];
            at += len;
            for (i, what) in [(1, "level members"), (2, "previous level")] {
                let parts = segment(i)
                    .map(|source| IncreasingStream::new(source, what))
                    .collect::<Result<Vec<_>>>()?;
                let (count, len) = write_increasing_as(MergedIncreasing::new(parts)?, form, spill)?;
                bucket.push((count, at..at + len));
                at += len;
            }
            lists.push(bucket);
        }
        let run = self.room.spill.end_run()?;
        let spilled = |(count, body): &(u128, Range<u64>)| CountedList::Spilled {
            count: *count,
            run,
            body: body.clone(),
        };
        let mut buckets: Vec<Vec<CountedList>> = (lists.iter())
            .map(|l| forward(spilled(&l[0]), spilled(&l[2])))
            .collect();
        buckets.extend(lists.iter().map(|l| vec![tag(members_tag), spilled(&l[1])]));
        Ok((buckets, runs, self.spilled_bytes + at))
    }
}

fn increasing(boards: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * boards.len() + 10);
    push_increasing(&mut out, boards);
    out
}

/// A list of boards in `form`.
fn increasing_as(form: ListForm, boards: &[u64]) -> Vec<u8> {
    match form {
        ListForm::Raw => increasing(boards),
        ListForm::Compact => crate::compact::encode_keys(boards.iter().map(|&b| u128::from(b))),
    }
}

/// Writes merged candidates to `spill` as a forward bucket's entries in
/// `form` (their count is returned instead): the count and the bytes
/// written.
fn write_candidates<S: Source>(
    mut merged: MergedCandidates<S>,
    form: ListForm,
    spill: &mut dyn Spill,
) -> Result<(u128, u64)> {
    let mut out = ChunkedWrite::new(spill);
    if form == ListForm::Compact {
        let mut writer = CandidateWriter::new();
        while let Some((board, paths, back)) = merged.next()? {
            writer.push(board, paths, back, &mut out.buf);
            out.flush_if_full()?;
        }
        let count = writer.finish(&mut out.buf);
        return Ok((count, out.finish()?));
    }
    let (mut count, mut last) = (0u128, 0u64);
    while let Some((board, paths, back)) = merged.next()? {
        push_varint(
            &mut out.buf,
            u128::from(board - last) << 4 | u128::from(back),
        );
        push_varint(&mut out.buf, paths);
        last = board;
        count += 1;
        out.flush_if_full()?;
    }
    Ok((count, out.finish()?))
}

/// The byte of `stored` at `at`.
fn stored_byte(stored: &dyn Stored, at: u64) -> Result<u8> {
    Ok(stored.read_range(at..at + 1)?[0])
}

/// The boards of a stream of `u128` values, each a board index.
fn board_of(value: u128, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| invalid!("{what}: board {value} is too large"))
}

/// One shard of a forward level (see [`super::levels::expand_forward`]) from
/// the byte ranges of `buckets` holding every sender's forward bucket and of
/// `members` holding its members, read as streams, within `room`: what the
/// shard gathers for the next level spills past half of `room.memory`. The
/// same level and the same bytes as `expand_forward`, written in `form`.
pub fn expand_forward_within(
    boards: &Boards,
    buckets: (&dyn Stored, &[Range<u64>]),
    members: (&dyn Stored, &[Range<u64>]),
    buckets_out: u32,
    form: ListForm,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<EncodedForward> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    if !boards.fits_narrow_keys() {
        return Err(invalid!(
            "boards of this size leave no room for their moves back in a 64-bit key"
        ));
    }
    let (stored, ranges) = buckets;
    let mut candidates = Vec::with_capacity(ranges.len());
    let mut previous = Vec::with_capacity(ranges.len());
    let first = |range: &Range<u64>| -> Result<Option<u8>> {
        match range.is_empty() {
            true => Ok(None),
            false => Ok(Some(stored_byte(stored, range.start)?)),
        }
    };
    for (sender, range) in ranges.iter().enumerate() {
        if first(range)? == Some(TAG_FORWARD_COMPACT) {
            let label = format!("forward bucket of sender {sender}");
            let len = range.end - range.start;
            let head = stored
                .read_range(range.start + 1..(range.start + 9).min(range.end))?
                .try_into()
                .map_err(|_| invalid!("{label}: cut short before its candidates"))?;
            let (list, rest) = forward_lists(len, head, &label)?;
            let at = |r: Range<u64>| {
                StoredSource::new(stored, range.start + r.start..range.start + r.end)
            };
            let empty = StoredSource::new(stored, range.start..range.start);
            candidates.push(CandidateStream::compact(at(list), empty, label.clone())?);
            let label = format!("{label}: its previous level");
            previous.push(IncreasingStream::compact(at(rest), label)?);
            continue;
        }
        let source = StoredSource::new(stored, range.clone());
        let mut skip = CandidateStream::bucket(source)?;
        candidates.push(CandidateStream::bucket(StoredSource::new(
            stored,
            range.clone(),
        ))?);
        // The level before follows the candidates: read past them once.
        while skip.next()?.is_some() {}
        previous.push(IncreasingStream::continuing(skip.stream, "previous level")?);
    }
    let (stored, ranges) = members;
    let current = (ranges.iter().enumerate())
        .map(|(sender, range)| {
            if !range.is_empty() && stored_byte(stored, range.start)? == TAG_MEMBERS_COMPACT {
                let source = StoredSource::new(stored, range.start + 1..range.end);
                let label = format!("level bucket of sender {sender}");
                return IncreasingStream::compact(source, label);
            }
            let mut stream =
                VarintStream::new(StoredSource::new(stored, range.clone()), "level bucket");
            match stream.varint("its tag")? {
                tag if tag == u128::from(TAG_MEMBERS) => {}
                tag => {
                    return Err(invalid!(
                        "level bucket: tag {tag} where {TAG_MEMBERS} was expected"
                    ));
                }
            }
            IncreasingStream::continuing(stream, "level bucket")
        })
        .collect::<Result<Vec<_>>>()?;
    let mut candidates = MergedCandidates::new(candidates)?;
    let mut previous = MergedIncreasing::new(previous)?;
    let mut current = MergedIncreasing::new(current)?;
    let p = buckets_out as usize;
    let mut out = SpillingForward {
        sent: vec![Vec::new(); p],
        members: vec![Vec::new(); p],
        previous: vec![Vec::new(); p],
        held: 0,
        limit: room.memory / 2,
        form,
        room,
        runs: Vec::new(),
        spilled_bytes: 0,
    };
    let bucket = |board: u64| bucket_of(u128::from(board), buckets_out) as usize;
    let (mut level, mut target_paths) = (0u64, None);
    let mut hint = StateHint::default();
    loop {
        control.check()?;
        let mut expanded = 0;
        while expanded < POLL_BOARDS {
            let Some((board, paths, back)) = candidates.next()? else {
                break;
            };
            let key = u128::from(board);
            while let Some(known) = current.next_below(key)? {
                let known = board_of(known, "level bucket")?;
                out.previous[bucket(known)].push(known);
                out.held += BOARD_BYTES;
            }
            if current.take_if(key)? {
                out.previous[bucket(board)].push(board);
                out.held += BOARD_BYTES;
                continue;
            }
            while previous.next_below(key)?.is_some() {}
            if previous.take_if(key)? {
                continue;
            }
            expanded += 1;
            if board == boards.target() {
                target_paths = Some(paths);
            }
            // The moves back lead to the level before: skipped, not sent.
            boards.neighbours_except(board, back, &mut hint, |n, back| {
                out.sent[bucket(n)].push((n << 4 | 1 << back, paths));
                out.held += SENT_BYTES;
            })?;
            out.members[bucket(board)].push(board);
            out.held += BOARD_BYTES;
            out.spill_if_full()?;
        }
        level += expanded as u64;
        control.add_work(expanded as u64);
        if expanded < POLL_BOARDS && candidates.heads.is_empty() {
            break;
        }
    }
    while let Some(known) = current.pull()? {
        let known = board_of(known, "level bucket")?;
        out.previous[bucket(known)].push(known);
        out.held += BOARD_BYTES;
        out.spill_if_full()?;
    }
    while previous.pull()?.is_some() {}
    let (sent, runs, spilled_bytes) = out.finish()?;
    Ok(EncodedForward {
        boards: level,
        target_paths,
        sent,
        runs,
        spilled_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buckets::split_buckets;
    use crate::compact::ListForm::{Compact, Raw};
    use crate::sliders::forms::encode_boards_as;
    use crate::sliders::levels::{ForwardBucket, decode_members, expand_forward, start_input};
    use crate::spill::MemorySpill;

    /// The bytes of pieces, one bucket each.
    fn bytes(sent: &[Vec<CountedList>], spill: &dyn Spill) -> Vec<Vec<u8>> {
        (sent.iter())
            .map(|pieces| {
                (pieces.iter())
                    .map(|piece| piece.to_bytes(spill).unwrap())
                    .collect::<Vec<_>>()
                    .concat()
            })
            .collect()
    }

    #[test]
    fn a_level_that_spills_equals_the_level_held_in_memory() {
        let boards = Boards::new(&crate::sliders::SliderParams::default()).unwrap();
        let control = Control::new();
        let (b, last) = (3usize, 13);
        let (start_buckets, start_members) = start_input(&boards);
        let mut inputs: Vec<Vec<ForwardBucket>> = vec![start_buckets];
        let mut members: Vec<Vec<Vec<u64>>> = vec![start_members];
        let mut spilled_somewhere = false;
        for level in 0..last {
            let mut next_inputs = vec![Vec::new(); b];
            let mut next_members = vec![Vec::new(); b];
            for (q, form) in (0..inputs.len()).flat_map(|q| [(q, Raw), (q, Compact)]) {
                let expected =
                    expand_forward(&boards, &inputs[q], &members[q], b as u32, form, &control)
                        .unwrap();
                let parts = split_buckets(&expected.output).unwrap();
                // The same input as stage data: every sender's bucket, framed.
                let frame = |buckets: Vec<Vec<u8>>| {
                    let mut all = Vec::new();
                    let mut ranges = Vec::new();
                    for bucket in buckets {
                        ranges.push(all.len() as u64..(all.len() + bucket.len()) as u64);
                        all.extend_from_slice(&bucket);
                    }
                    (all, ranges)
                };
                let (forward, forward_ranges) =
                    frame(inputs[q].iter().map(|b| b.encode_as(form)).collect());
                let (own, own_ranges) = frame(
                    (members[q].iter())
                        .map(|m| encode_boards_as(form, TAG_MEMBERS, m))
                        .collect(),
                );
                for memory in [u64::MAX, 1 << 12, 0] {
                    let mut spill = MemorySpill::default();
                    let mut room = Room {
                        memory,
                        spill: &mut spill,
                    };
                    let got = expand_forward_within(
                        &boards,
                        (&forward, &forward_ranges),
                        (&own, &own_ranges),
                        b as u32,
                        form,
                        &mut room,
                        &control,
                    )
                    .unwrap();
                    let what = format!("level {level}, shard {q}, memory {memory}, {form:?}");
                    assert_eq!(got.boards, expected.boards, "{what}");
                    assert_eq!(got.target_paths, expected.target_paths, "{what}");
                    assert_eq!(bytes(&got.sent, &spill), parts, "{what}");
                    if memory == u64::MAX {
                        assert_eq!(got.runs, 0);
                    } else if got.runs > 0 {
                        spilled_somewhere |= got.runs >= 2;
                        assert_eq!(got.spilled_bytes, spill.bytes_written(), "{what}");
                    }
                }
                if form == Raw {
                    continue;
                }
                for r in 0..b {
                    next_inputs[r].push(ForwardBucket::decode(parts[r]).unwrap());
                    next_members[r].push(decode_members(parts[b + r]).unwrap());
                }
            }
            inputs = next_inputs;
            members = next_members;
        }
        assert!(spilled_somewhere);
    }

    #[test]
    fn streamed_buckets_are_checked_like_decoded_ones() {
        let boards = Boards::new(&crate::sliders::SliderParams::default()).unwrap();
        let control = Control::new();
        let (start, _) = start_input(&boards);
        let good = start[0].encode();
        let run_as = |form: ListForm, forward: &[u8], members: &[u8]| {
            let mut spill = MemorySpill::default();
            let mut room = Room {
                memory: u64::MAX,
                spill: &mut spill,
            };
            let (forward, members) = (forward.to_vec(), members.to_vec());
            let (all_forward, all_members) = (0..forward.len() as u64, 0..members.len() as u64);
            expand_forward_within(
                &boards,
                (&forward, std::slice::from_ref(&all_forward)),
                (&members, std::slice::from_ref(&all_members)),
                2,
                form,
                &mut room,
                &control,
            )
            .map(|level| level.boards)
        };
        let run = |forward: &[u8], members: &[u8]| run_as(Raw, forward, members);
        let no_members = [TAG_MEMBERS, 0];
        assert_eq!(run(&good, &no_members).unwrap(), 1);
        let mut start_member = vec![TAG_MEMBERS];
        push_increasing(&mut start_member, &[boards.start()]);
        assert_eq!(run(&good, &start_member).unwrap(), 0, "in the level before");
        for cut in 0..good.len() {
            assert!(run(&good[..cut], &no_members).is_err(), "cut at {cut}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(run(&longer, &no_members).is_err());
        assert!(
            run(&good, &[11, 0])
                .unwrap_err()
                .to_string()
                .contains("tag 11")
        );
        assert!(
            run(&[9, 0, 0], &no_members)
                .unwrap_err()
                .to_string()
                .contains("tag 9")
        );
        let mut zero = vec![TAG_FORWARD];
        push_varint(&mut zero, 1);
        push_varint(&mut zero, u128::from(boards.start()) << 4);
        push_varint(&mut zero, 0);
        push_varint(&mut zero, 0);
        assert!(
            run(&zero, &no_members)
                .unwrap_err()
                .to_string()
                .contains("no sequence")
        );
        // Compact buckets: read by their tags; a cut or a damaged byte is
        // refused naming the sender's bucket and the list.
        let (b, last) = (1, 12);
        let (mut inputs, mut members) = start_input(&boards);
        for _ in 0..last {
            let out = expand_forward(&boards, &inputs, &members, b, Compact, &control).unwrap();
            let parts = split_buckets(&out.output).unwrap();
            inputs = vec![ForwardBucket::decode(parts[0]).unwrap()];
            members = vec![decode_members(parts[1]).unwrap()];
        }
        let forward = inputs[0].encode_as(Compact);
        let own = encode_boards_as(Compact, TAG_MEMBERS, &members[0]);
        let expected = expand_forward(&boards, &inputs, &members, 2, Compact, &control).unwrap();
        assert_eq!(run_as(Compact, &forward, &own).unwrap(), expected.boards);
        assert!(expected.boards > 100, "{} boards", expected.boards);
        let candidates = u64::from_le_bytes(forward[1..9].try_into().unwrap()) as usize;
        for (at, list) in [
            (
                9 + candidates / 2,
                "forward bucket of sender 0: its candidates: ",
            ),
            (
                forward.len() - 2,
                "forward bucket of sender 0: its previous level: ",
            ),
        ] {
            let mut damaged = forward.clone();
            damaged[at] ^= 8;
            let e = run_as(Compact, &damaged, &own).unwrap_err().to_string();
            assert!(e.starts_with(list) && e.contains("damaged"), "{e}");
        }
        let e = run_as(Compact, &forward[..forward.len() - 1], &own).unwrap_err();
        assert!(
            e.to_string().contains("its previous level: truncated"),
            "{e}"
        );
        let e = run_as(Compact, &forward, &own[..own.len() - 1]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("level bucket of sender 0: truncated"),
            "{e}"
        );
    }
}
