//! A layer shard within a memory share: the same rule and the same bytes as
//! [`super::expand_bucket`], without holding the layer.
//!
//! The three lists every shard of the previous layer sent are read as
//! streams and merged (candidates less the two earlier layers, as the layer
//! rule says). The shard's output is three lists for each bucket of the next
//! layer: the neighbours of the layer's states, the layer's states and the
//! layer before. They gather in memory until they pass half of the shard's
//! share, and are then written to the spill as one run (each bucket's three
//! lists in turn, sorted and deduplicated) and emptied. At the end each list
//! of each bucket is the merge of its segment of every run and of what memory
//! still holds, written to the spill as it is merged when the shard spilled.
//! Lists read and written are in the job's form ([`ListForm`]); the runs of
//! the spill, which no other shard reads, are always raw.

use std::ops::Range;
use std::sync::Arc;

use super::levels::{LIST_NAMES, encode_states_as};
use super::puzzle::Puzzle;
use crate::buckets::bucket_of;
use crate::compact::ListForm;
use crate::spill::{
    CountedList, IncreasingStream, MergedIncreasing, Room, RunOrSlice, Source, Stored,
    StoredSource, write_bucket_lists, write_increasing_as,
};
use crate::{Control, Result, invalid};

/// States expanded between two polls of the control and of the lists' size.
const POLL_STATES: usize = 1024;
/// Bytes a state takes in the lists being gathered.
const STATE_BYTES: u64 = 16;

/// The names of a bucket's three lists, in their order.
const LISTS: [&str; 3] = [
    "layer bucket: its candidates",
    "layer bucket: its current layer",
    "layer bucket: its previous layer",
];

/// One shard's layer, its outgoing buckets encoded.
#[derive(Debug, Default)]
pub struct EncodedLayer {
    /// States of the layer in this shard's bucket.
    pub states: u64,
    /// [`super::LevelBucket::encode`]'s bytes of each bucket of the next layer, as
    /// pieces one after another.
    pub sent: Vec<Vec<CountedList>>,
    /// Runs written to the spill, and the bytes written to it.
    pub runs: u32,
    pub spilled_bytes: u64,
}

/// [`super::LevelBucket::encode`]'s pieces of one outgoing bucket: each of its
/// three lists after its length.
fn bucket_pieces(lists: [CountedList; 3]) -> Vec<CountedList> {
    let mut pieces = Vec::with_capacity(6);
    for list in lists {
        pieces.push(CountedList::Bytes(list.len().to_le_bytes().to_vec()));
        pieces.push(list);
    }
    pieces
}

/// The next layer's lists by bucket, spilled as runs when they pass `limit`
/// bytes.
struct SpillingLists<'r, 's> {
    /// For each bucket: candidates (unsorted), current, previous (increasing).
    lists: Vec<[Vec<u128>; 3]>,
    held: u64,
    limit: u64,
    /// The form of the lists sent on.
    form: ListForm,
    room: &'r mut Room<'s>,
    /// For each run: its number and each bucket's three byte ranges in it.
    runs: Vec<(u32, Vec<[Range<u64>; 3]>)>,
    spilled_bytes: u64,
}

impl SpillingLists<'_, '_> {
    fn push(&mut self, list: usize, state: u128, buckets: u32) {
        self.lists[bucket_of(state, buckets) as usize][list].push(state);
        self.held += STATE_BYTES;
    }

    fn spill_if_full(&mut self) -> Result<()> {
        if self.held <= self.limit {
            return Ok(());
        }
        let buckets = self.lists.iter_mut().map(|lists| {
            lists[0].sort_unstable();
            lists[0].dedup();
            Ok(lists
                .each_mut()
                .map(|list| super::encode_states(&std::mem::take(list))))
        });
        let (run, ranges, bytes) = write_bucket_lists(&mut *self.room.spill, buckets)?;
        self.spilled_bytes += bytes;
        self.held = 0;
        self.runs.push((run, ranges));
        Ok(())
    }

    /// Each outgoing bucket, encoded: in memory if nothing spilled, else each
    /// list the merge of its segments, written to one run as it is merged.
    fn finish(mut self) -> Result<(Vec<Vec<CountedList>>, u32, u64)> {
        let runs = self.runs.len() as u32;
        if self.runs.is_empty() {
            let sent = (self.lists.into_iter())
                .map(|[mut candidates, current, previous]| {
                    candidates.sort_unstable();
                    candidates.dedup();
                    bucket_pieces(
                        [candidates, current, previous]
                            .map(|list| CountedList::Bytes(encode_states_as(self.form, &list))),
                    )
                })
                .collect();
            return Ok((sent, 0, 0));
        }
        // The runs are read through handles of their own while the merges
        // are written to the spill.
        let kept = (self.runs.iter())
            .map(|(run, _)| self.room.spill.keep_run(*run))
            .collect::<Result<Vec<Arc<dyn Stored>>>>()?;
        let mut bodies = Vec::with_capacity(self.lists.len());
        let mut at = 0;
        for (q, mut lists) in std::mem::take(&mut self.lists).into_iter().enumerate() {
            lists[0].sort_unstable();
            lists[0].dedup();
            let mut bucket = Vec::with_capacity(3);
            for (i, in_memory) in lists.iter().enumerate() {
                let in_memory = super::encode_states(in_memory);
                let mut parts = Vec::with_capacity(kept.len() + 1);
                for (stored, (_, ranges)) in kept.iter().zip(&self.runs) {
                    let source = StoredSource::new(&**stored, ranges[q][i].clone());
                    parts.push(IncreasingStream::new(RunOrSlice::Run(source), LISTS[i])?);
                }
                parts.push(IncreasingStream::new(
                    RunOrSlice::Slice(&in_memory[..]),
                    LISTS[i],
                )?);
                let (count, len) = write_increasing_as(
                    MergedIncreasing::new(parts)?,
                    self.form,
                    &mut *self.room.spill,
                )?;
                bucket.push((count, at..at + len));
                at += len;
            }
            bodies.push(bucket);
        }
        let run = self.room.spill.end_run()?;
        let sent = (bodies.into_iter())
            .map(|bucket| {
                let mut lists = bucket
                    .into_iter()
                    .map(|(count, body)| CountedList::Spilled { count, run, body });
                bucket_pieces(std::array::from_fn(|_| lists.next().expect("three lists")))
            })
            .collect();
        Ok((sent, runs, self.spilled_bytes + at))
    }
}

/// The three lists of one sender's [`super::LevelBucket::encode`]d bucket.
pub type SenderLists<S> = [S; 3];

/// One shard of a layer (see [`super::expand_bucket`]) from the lists every
/// shard of the previous layer sent its bucket, read as streams, within
/// `room`: what the shard gathers for the next layer spills to `room.spill`
/// past half of `room.memory` (the rest is for the input's buffers). The same
/// states and the same bytes as [`super::expand_bucket`]'s buckets encoded
/// in `form`, the form of the lists read too.
pub fn expand_bucket_within<S: Source>(
    puzzle: &Puzzle,
    senders: Vec<SenderLists<S>>,
    buckets_out: u32,
    form: ListForm,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<EncodedLayer> {
    if buckets_out == 0 {
        return Err(invalid!("a layer needs at least one bucket"));
    }
    let mut streams: [Vec<IncreasingStream<S>>; 3] = Default::default();
    for (sender, lists) in senders.into_iter().enumerate() {
        for (i, source) in lists.into_iter().enumerate() {
            let label = format!("layer bucket of sender {sender}: its {}", LIST_NAMES[i]);
            streams[i].push(IncreasingStream::in_form(source, form, LISTS[i], label)?);
        }
    }
    let [candidates, current, previous] = streams;
    let (mut candidates, mut current, mut previous) = (
        MergedIncreasing::new(candidates)?,
        MergedIncreasing::new(current)?,
        MergedIncreasing::new(previous)?,
    );
    let limit = room.memory / 2;
    let mut out = SpillingLists {
        lists: (0..buckets_out).map(|_| Default::default()).collect(),
        held: 0,
        limit,
        form,
        room,
        runs: Vec::new(),
        spilled_bytes: 0,
    };
    let mut states = 0u64;
    let mut found = Vec::new();
    loop {
        control.check()?;
        let mut expanded = 0;
        while expanded < POLL_STATES {
            let Some(state) = candidates.pull()? else {
                break;
            };
            // The layer before this one goes on as the next layer's previous.
            while let Some(known) = current.next_below(state)? {
                out.push(2, known, buckets_out);
            }
            if current.take_if(state)? {
                out.push(2, state, buckets_out);
                continue;
            }
            while previous.next_below(state)?.is_some() {}
            if previous.take_if(state)? {
                continue;
            }
            expanded += 1;
            found.clear();
            puzzle.push_checked_neighbours(state, &mut found)?;
            for &n in &found {
                out.push(0, n, buckets_out);
            }
            out.push(1, state, buckets_out);
            out.spill_if_full()?;
        }
        states += expanded as u64;
        control.add_work(expanded as u64);
        if expanded < POLL_STATES && candidates.is_empty() {
            break;
        }
    }
    while let Some(known) = current.pull()? {
        out.push(2, known, buckets_out);
        out.spill_if_full()?;
    }
    // The earlier layers' lists are checked to their ends.
    while previous.pull()?.is_some() {}
    let (sent, runs, spilled_bytes) = out.finish()?;
    Ok(EncodedLayer {
        states,
        sent,
        runs,
        spilled_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::{LevelBucket, expand_bucket, parse_puzzle, start_bucket};
    use crate::spill::Spill;
    use crate::spill::{MemorySpill, StageOutput, any_spilled, pieces_to_bytes, write_framed};
    use crate::varint;

    /// Klotski, its like pieces interchangeable: a few hundred configurations
    /// a layer in the middle of its search.
    const PUZZLE: &str = "aXXb\naXXb\ncdde\nc12e\n3..4\nsame: abce\nsame: 1234\n";

    /// Every layer's buckets by the reference kernel, `buckets` a layer.
    fn layers(puzzle: &Puzzle, last: usize, buckets: u32) -> Vec<Vec<Vec<LevelBucket>>> {
        let control = Control::new();
        let mut inbox = vec![vec![start_bucket(puzzle)]];
        let mut layers = Vec::new();
        for _ in 0..last {
            let mut sent = Vec::new();
            let mut next = vec![Vec::new(); buckets as usize];
            for inputs in inbox {
                let (_, out) = expand_bucket(puzzle, inputs, buckets, &control).unwrap();
                for (q, bucket) in out.iter().enumerate() {
                    next[q].push(bucket.clone());
                }
                sent.push(out);
            }
            layers.push(sent);
            inbox = next;
        }
        layers
    }

    fn lists(bytes: &[u8]) -> [&[u8]; 3] {
        let mut at = 0;
        std::array::from_fn(|_| {
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            let list = &bytes[at + 8..at + 8 + len];
            at += 8 + len;
            list
        })
    }

    #[test]
    fn a_layer_that_spills_equals_the_layer_held_in_memory() {
        let puzzle = parse_puzzle(PUZZLE).unwrap();
        let control = Control::new();
        let all = layers(&puzzle, 91, 3);
        let mut spilled_somewhere = false;
        for (layer, form) in [6, 40, 90]
            .into_iter()
            .flat_map(|layer| [ListForm::Raw, ListForm::Compact].map(|form| (layer, form)))
        {
            // Bucket 1 of the layer after `layer`, from its three senders.
            let inputs: Vec<LevelBucket> = all[layer].iter().map(|out| out[1].clone()).collect();
            let encoded: Vec<Vec<u8>> = inputs.iter().map(|b| b.encode_as(form)).collect();
            let (states, expected) = expand_bucket(&puzzle, inputs, 4, &control).unwrap();
            let expected: Vec<Vec<u8>> = expected.iter().map(|b| b.encode_as(form)).collect();
            for memory in [u64::MAX, 1 << 12, 0] {
                let mut spill = MemorySpill::default();
                let mut room = Room {
                    memory,
                    spill: &mut spill,
                };
                let senders = encoded.iter().map(|b| lists(b)).collect();
                let got =
                    expand_bucket_within(&puzzle, senders, 4, form, &mut room, &control).unwrap();
                assert_eq!(got.states, states, "layer {layer}, memory {memory}");
                let bytes = pieces_to_bytes(&got.sent, &spill).unwrap();
                assert_eq!(bytes, expected, "layer {layer}, memory {memory}");
                let lengths: Vec<u64> = (got.sent.iter())
                    .map(|pieces| pieces.iter().map(CountedList::len).sum())
                    .collect();
                let want: Vec<u64> = expected.iter().map(|b| b.len() as u64).collect();
                assert_eq!(lengths, want);
                if memory == u64::MAX {
                    assert_eq!((got.runs, spill.bytes_written()), (0, 0));
                    continue;
                }
                assert_eq!(got.spilled_bytes, spill.bytes_written());
                if got.runs > 0 {
                    assert!(
                        got.runs >= 2,
                        "layer {layer}, memory {memory}: {} runs",
                        got.runs
                    );
                    spilled_somewhere = true;
                    assert!(any_spilled(&got.sent));
                    // Framed as the shard's output is.
                    let StageOutput::Stored(whole) = write_framed(&got.sent, &mut spill).unwrap()
                    else {
                        panic!("a framed output is a run");
                    };
                    let framed = crate::buckets::encode_buckets(&expected);
                    assert_eq!(whole.read_range(0..whole.len()).unwrap(), framed);
                }
            }
        }
        assert!(spilled_somewhere);
    }

    #[test]
    fn streamed_lists_are_checked_like_decoded_ones() {
        let puzzle = parse_puzzle(PUZZLE).unwrap();
        let control = Control::new();
        let run_as = |form: ListForm, candidates: &[u8], current: &[u8], previous: &[u8]| {
            let mut spill = MemorySpill::default();
            let mut room = Room {
                memory: u64::MAX,
                spill: &mut spill,
            };
            expand_bucket_within(
                &puzzle,
                vec![[candidates, current, previous]],
                2,
                form,
                &mut room,
                &control,
            )
            .map(|layer| layer.states)
        };
        let run = |candidates: &[u8], current: &[u8], previous: &[u8]| {
            run_as(ListForm::Raw, candidates, current, previous)
        };
        let start = super::super::encode_states(&[puzzle.initial_state()]);
        let empty = super::super::encode_states(&[]);
        assert_eq!(run(&start, &empty, &empty).unwrap(), 1);
        assert_eq!(
            run(&start, &start, &empty).unwrap(),
            0,
            "in the layer before"
        );
        assert_eq!(run(&start, &empty, &start).unwrap(), 0, "two layers before");
        for cut in 0..start.len() {
            assert!(run(&start[..cut], &empty, &empty).is_err(), "cut at {cut}");
        }
        let mut longer = start.clone();
        longer.push(0);
        assert!(run(&longer, &empty, &empty).is_err());
        assert!(
            run(&[2, 5, 0], &empty, &empty)
                .unwrap_err()
                .to_string()
                .contains("not sorted")
        );
        assert!(run(&[1, 3], &empty, &empty).is_err(), "not a configuration");
        let mut wide = vec![2, 1];
        varint::push(&mut wide, u128::MAX);
        assert!(
            run(&wide, &empty, &empty)
                .unwrap_err()
                .to_string()
                .contains("128 bits")
        );
        // The compact form: a cut or a damaged byte is refused naming the
        // sender and the list.
        let compact = ListForm::Compact;
        let layer = &layers(&puzzle, 41, 1)[40][0][0];
        let lists = [&layer.candidates, &layer.current, &layer.previous]
            .map(|list| crate::compact::encode_keys(list.iter().copied()));
        let (expected, _) = expand_bucket(&puzzle, vec![layer.clone()], 2, &control).unwrap();
        assert_eq!(
            run_as(compact, &lists[0], &lists[1], &lists[2]).unwrap(),
            expected
        );
        assert!(expected > 10, "{expected} states");
        for (i, name) in LIST_NAMES.iter().enumerate() {
            let label = format!("layer bucket of sender 0: its {name}: ");
            let mut cut = lists.clone();
            cut[i].pop();
            let e = run_as(compact, &cut[0], &cut[1], &cut[2]).unwrap_err();
            assert!(e.to_string().starts_with(&label), "{e}");
            assert!(e.to_string().contains("truncated"), "{e}");
            let mut damaged = lists.clone();
            let at = damaged[i].len() - 2;
            damaged[i][at] ^= 4;
            let e = run_as(compact, &damaged[0], &damaged[1], &damaged[2]).unwrap_err();
            assert!(e.to_string().starts_with(&label), "{e}");
            assert!(e.to_string().contains("damaged"), "{e}");
        }
        // Raw lists are not compact ones.
        assert!(run_as(compact, &start, &empty, &empty).is_err());
    }
}
