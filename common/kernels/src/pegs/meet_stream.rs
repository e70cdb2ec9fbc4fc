//! The meeting level and the join within a memory share (see `meet` for the
//! count itself, whose decoded functions these equal).
//!
//! The start search's meeting level is read as a stream, once for its
//! classes keyed by their complements' classes and once more for what it
//! sends besides (its children, or itself): each pass sums into the tables of
//! `stream`, which spill as sorted runs past the shard's share, so the
//! level is never decoded whole. A join shard merges its two sorted inputs,
//! the end search's level and the joined classes, as two streams side by
//! side: it holds a few buffers, whatever the size of its bucket. Both read
//! and write the job's form of lists (see `form`), and the meeting level
//! keys only the classes the pruning keeps, as `meet` does.

use super::PegGame;
use super::form::{BoardRanks, LevelForm};
use super::levels::{PegBucket, pegs_at_level};
use super::meet::{AtMeeting, Meeting, solutions_through};
use super::stream::{Merged, PartStream, SentBucket, SentSums, SpillingSums, expand_level_within};
use crate::spill::{Room, Source};
use crate::{Control, Result, invalid};

/// Boards read between two polls of the control and of the tables' size.
const POLL_BOARDS: usize = 4096;

/// The start search's shard of its meeting level, its buckets encoded.
#[derive(Debug, Default)]
pub struct EncodedMeeting {
    /// Distinct classes of the level in this shard's bucket.
    pub states: u64,
    /// Those of them kept (not pruned): the classes keyed for the join.
    pub expanded: u64,
    /// What goes to each bucket of the end search's level (see [`AtMeeting`]).
    pub sent: Vec<SentBucket>,
    /// The classes keyed by their complements' classes, by join bucket.
    pub joined: Vec<SentBucket>,
    /// Sorted runs written to the spill, and the bytes spilled.
    pub runs: u32,
    pub spilled_bytes: u64,
    /// The most bytes the tables of the passes keying the level held (the
    /// children's pass is `expand_level_within`'s).
    pub table_bytes: u64,
    /// Children left out because they cannot finish (with
    /// [`AtMeeting::Children`]; see [`super::EncodedLevel::pruned`]).
    pub pruned: u64,
}

/// [`super::meet_level`] within `room`: the level's parts, which `parts`
/// gives afresh for each pass over them, read as streams in `form` (and the
/// buckets written in it); the tables spill to `room.spill` past a third of
/// `room.memory`. The same classes and buckets, encoded.
// The meeting, the level's parts and their form, the outgoing buckets, what
// the level sends, the room and the control are each the caller's.
#[allow(clippy::too_many_arguments)]
pub fn meet_level_within<S: Source>(
    game: &PegGame,
    meeting: &Meeting,
    mut parts: impl FnMut() -> Result<Vec<S>>,
    input_bytes: u64,
    buckets_out: u32,
    what: AtMeeting,
    form: LevelForm,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<EncodedMeeting> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let level = meeting.start_level;
    let pegs = pegs_at_level(game, level)
        .filter(|&p| p >= 1)
        .ok_or_else(|| invalid!("level {level} is past the last peg of the {}", game.shape()))?;
    let holes = game.hole_mask();
    let ranks = BoardRanks::new(holes);
    let input = Input {
        check: Some((holes, pegs)),
        level,
        form,
        ranks: &ranks,
        bytes: input_bytes,
    };
    let pruner = game.pruner();
    // A pruned class reaches no end: its complements are not reached from
    // the end start, and it joins with nothing.
    let complement = |board: u64| {
        (pruner.is_none_or(|p| p.may_finish(board))).then(|| game.canonical(holes & !board))
    };
    let name = format!("peg level {level}: the joined positions");
    let keyed = bucket_within(
        parts()?,
        &input,
        name,
        buckets_out,
        room,
        control,
        (complement, holes.count_ones() - pegs),
    )?;
    let mut outcome = EncodedMeeting {
        states: keyed.states,
        expanded: keyed.kept,
        joined: keyed.sent,
        runs: keyed.runs,
        spilled_bytes: keyed.spilled_bytes,
        table_bytes: keyed.table_bytes,
        sent: Vec::new(),
        pruned: 0,
    };
    let (sent, runs, spilled_bytes) = match what {
        AtMeeting::Nothing => {
            let empty = SentBucket::Bytes(PegBucket::default().encode_as(form, &ranks));
            (vec![empty; buckets_out as usize], 0, 0)
        }
        AtMeeting::Itself => {
            let name = format!("peg level {level}");
            let itself = bucket_within(
                parts()?,
                &input,
                name,
                buckets_out,
                room,
                control,
                (Some, pegs),
            )?;
            control.add_work(itself.states);
            outcome.table_bytes = outcome.table_bytes.max(itself.table_bytes);
            (itself.sent, itself.runs, itself.spilled_bytes)
        }
        AtMeeting::Children => {
            let children = expand_level_within(
                game,
                level,
                parts()?,
                input_bytes,
                buckets_out,
                form,
                room,
                control,
            )?;
            outcome.pruned = children.pruned;
            (children.sent, children.runs, children.spilled_bytes)
        }
    };
    outcome.sent = sent;
    outcome.runs += runs;
    outcome.spilled_bytes += spilled_bytes;
    Ok(outcome)
}

/// A level's parts as a pass reads them: their boards' check (the holes and
/// the pegs), their level (named in errors), form and bytes.
struct Input<'r> {
    check: Option<(u64, u32)>,
    level: u32,
    form: LevelForm,
    ranks: &'r BoardRanks,
    bytes: u64,
}

/// One pass over a level: each board's `key` with its count (the boards
/// without one left out), in sorted buckets, summed in tables that spill
/// past a third of `room.memory`; `name` says what the buckets are.
struct Bucketed {
    states: u64,
    /// The boards keyed.
    kept: u64,
    sent: Vec<SentBucket>,
    runs: u32,
    spilled_bytes: u64,
    table_bytes: u64,
}

fn bucket_within<S: Source>(
    parts: Vec<S>,
    input: &Input<'_>,
    name: String,
    buckets_out: u32,
    room: &mut Room<'_>,
    control: &Control,
    (key, key_pegs): (impl Fn(u64) -> Option<u64>, u32),
) -> Result<Bucketed> {
    let level = input.level;
    let label = |i: usize| format!("peg level {level}: the part of shard {i}");
    let (form, ranks) = (input.form, input.ranks);
    let mut merged = merged(parts, input.check, form, ranks, label)?;
    let keys = (input.check.map_or(u64::MAX, |(holes, _)| holes), key_pegs);
    let mut sums = SpillingSums::new(room, name, keys, buckets_out, input.bytes, form, ranks);
    let (mut states, mut kept, mut table_bytes) = (0, 0, 0);
    loop {
        control.check()?;
        let mut read = 0;
        while read < POLL_BOARDS {
            let Some((board, ways)) = merged.next()? else {
                break;
            };
            read += 1;
            if let Some(key) = key(board) {
                sums.add(key, ways);
                kept += 1;
            }
        }
        states += read as u64;
        table_bytes = table_bytes.max(sums.table_bytes());
        if read < POLL_BOARDS {
            break;
        }
        sums.spill_if_full()?;
    }
    let SentSums {
        sent,
        runs,
        spilled_bytes,
        ..
    } = sums.finish()?;
    Ok(Bucketed {
        states,
        kept,
        sent,
        runs,
        spilled_bytes,
        table_bytes,
    })
}

/// `parts` in `form` merged as they are read, `label(i)` naming part `i`
/// in errors.
fn merged<'r, S: Source>(
    parts: Vec<S>,
    check: Option<(u64, u32)>,
    form: LevelForm,
    ranks: &'r BoardRanks,
    label: impl Fn(usize) -> String,
) -> Result<Merged<'r, S>> {
    let streams = (parts.into_iter().enumerate())
        .map(|(i, part)| PartStream::new(part, form, ranks, || label(i), check))
        .collect::<Result<Vec<_>>>()?;
    Merged::new(streams)
}

/// [`super::join_level`] on streams: the end search's level `b` as every
/// shard of the previous stage sent this bucket (`levels`) and the start
/// search's classes keyed by their complements (`joined`), each merged as
/// it is read, both in `form`. The classes of level `b` in the bucket and
/// the solutions through them; errors name the join's `level` and the shard.
pub fn join_level_within<S: Source>(
    game: &PegGame,
    meeting: &Meeting,
    level: u32,
    levels: Vec<S>,
    joined: Vec<S>,
    form: LevelForm,
    control: &Control,
) -> Result<(u64, u128)> {
    let pegs = pegs_at_level(game, meeting.end_level).unwrap_or(0);
    let check = Some((game.hole_mask(), pegs));
    let ranks = BoardRanks::new(game.hole_mask());
    let label = |what: &'static str| {
        move |i: usize| format!("peg join of level {level}: the {what} of shard {i}")
    };
    let mut level = merged(levels, check, form, &ranks, label("level"))?;
    let mut keys = merged(joined, check, form, &ranks, label("joined positions"))?;
    let mut solutions: u128 = 0;
    let mut states: u64 = 0;
    let mut head = level.next()?;
    let mut read: usize = 0;
    while let Some((key, ways)) = keys.next()? {
        read += 1;
        if read.is_multiple_of(POLL_BOARDS) {
            control.check()?;
            control.add_work(POLL_BOARDS as u64);
        }
        while let Some((board, _)) = head
            && board < key
        {
            states += 1;
            head = level.next()?;
        }
        if let Some((board, from_end)) = head
            && board == key
        {
            solutions = solutions_through(game, key, from_end, ways, solutions)?;
        }
    }
    control.add_work((read % POLL_BOARDS) as u64);
    while head.is_some() {
        states += 1;
        head = level.next()?;
    }
    Ok((states, solutions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::levels::expand_level;
    use crate::pegs::meet::{join_level, meet_level, meeting, side_start};
    use crate::pegs::{BoardShape, Side};
    use crate::spill::{MemorySpill, Spill};

    /// Level `last` of one search, in `buckets` buckets, as each shard of
    /// the level before sent them (decoded kernel).
    fn level_parts(game: &PegGame, side: Side, last: u32, buckets: u32) -> Vec<Vec<PegBucket>> {
        let control = Control::new();
        let game = &game.clone().searching_from(side);
        let mut inbox = vec![vec![side_start(game, side).unwrap()]];
        for level in 0..last {
            let mut next = vec![Vec::new(); buckets as usize];
            for inputs in inbox {
                let part = expand_level(game, level, inputs, buckets, &control).unwrap();
                for (q, bucket) in part.sent.into_iter().enumerate() {
                    next[q].push(bucket);
                }
            }
            inbox = next;
        }
        inbox
    }

    fn decoded(
        sent: &[SentBucket],
        spill: &dyn Spill,
        form: LevelForm,
        ranks: &BoardRanks,
    ) -> Vec<PegBucket> {
        (sent.iter())
            .map(|b| {
                let bytes = b.to_bytes(spill).unwrap();
                PegBucket::decode_as(&bytes, form, ranks, "test").unwrap()
            })
            .collect()
    }

    const FORMS: [LevelForm; 2] = [LevelForm::Raw, LevelForm::Compact];

    /// The most a pass's tables hold with a share of `memory`: a third of
    /// it, and what one poll's boards add before the tables are weighed
    /// (each at most two 16-byte slots, doubled while a table grows).
    fn share_bound(memory: u64) -> u64 {
        memory / 3 + 4 * (POLL_BOARDS as u64) * 32
    }

    #[test]
    fn the_meeting_level_in_a_share_equals_the_level_decoded_whole() {
        // English centre to centre meets itself through its children; the
        // searches of triangle 5 from 4 to 15 meet; triangle 6 from 4 to 4
        // meets itself.
        let games = [
            (BoardShape::English, 17, 17, AtMeeting::Children),
            (BoardShape::Triangle(5), 4, 15, AtMeeting::Nothing),
            (BoardShape::Triangle(6), 4, 4, AtMeeting::Itself),
        ];
        let control = Control::new();
        for (shape, start, end, what) in games {
            let game = PegGame::new(shape, Some(start), Some(end)).unwrap();
            let m = meeting(&game).unwrap();
            // The English level is cut short: level 13 as if it were the
            // meeting level.
            let m = match shape {
                BoardShape::English => Meeting {
                    start_level: 13,
                    ..m
                },
                _ => m,
            };
            let parts = level_parts(&game, Side::Start, m.start_level, 3);
            let bucket = &parts[1];
            let expected = meet_level(&game, &m, bucket.clone(), 4, what, &control).unwrap();
            let kept: u64 = expected.2.iter().map(|b| b.len() as u64).sum();
            let ranks = BoardRanks::new(game.hole_mask());
            let memories: &[u64] = match shape {
                BoardShape::English => &[u64::MAX, 1 << 20],
                _ => &[u64::MAX, 1 << 10, 0],
            };
            for (form, &memory) in FORMS
                .iter()
                .flat_map(|&f| memories.iter().map(move |m| (f, m)))
            {
                let encoded: Vec<Vec<u8>> =
                    bucket.iter().map(|b| b.encode_as(form, &ranks)).collect();
                let input_bytes = encoded.iter().map(|p| p.len() as u64).sum();
                let mut spill = MemorySpill::default();
                let mut room = Room {
                    memory,
                    spill: &mut spill,
                };
                let got = meet_level_within(
                    &game,
                    &m,
                    || Ok(encoded.iter().map(Vec::as_slice).collect()),
                    input_bytes,
                    4,
                    what,
                    form,
                    &mut room,
                    &control,
                )
                .unwrap();
                let name = format!("{shape} {start} to {end}, {form:?}, memory {memory}");
                assert_eq!(got.states, expected.0, "{name}");
                assert_eq!(got.expanded, kept, "{name}");
                let decoded = |sent| decoded(sent, &spill, form, &ranks);
                assert_eq!(decoded(&got.joined), expected.2, "{name}");
                assert_eq!(decoded(&got.sent), expected.1, "{name}");
                if memory == u64::MAX {
                    assert_eq!((got.runs, spill.bytes_written()), (0, 0), "{name}");
                    if shape == BoardShape::English {
                        // Held whole, the keyed classes take several times
                        // the share the spilling passes stay within.
                        assert!(
                            got.table_bytes > 3 * share_bound(1 << 20),
                            "{name}: {}",
                            got.table_bytes
                        );
                    }
                } else if shape == BoardShape::English {
                    assert!(got.runs >= 2, "{name}: {} runs", got.runs);
                    let bound = share_bound(memory);
                    assert!(
                        got.table_bytes <= bound,
                        "{name}: {} bytes",
                        got.table_bytes
                    );
                }
            }
        }
    }

    #[test]
    fn a_join_of_streams_equals_the_join_decoded_whole() {
        for (shape, start, end) in [
            (BoardShape::Triangle(5), 4, 15),
            (BoardShape::Triangle(6), 2, 8),
            (BoardShape::Triangle(6), 4, 4),
        ] {
            let game = PegGame::new(shape, Some(start), Some(end)).unwrap();
            let control = Control::new();
            let m = meeting(&game).unwrap();
            let buckets = 3;
            let at_start = level_parts(&game, Side::Start, m.start_level, buckets);
            let mut levels = vec![Vec::new(); buckets as usize];
            let mut joined = vec![Vec::new(); buckets as usize];
            let what = match (m.two_sided, m.end_level > m.start_level) {
                (true, _) => AtMeeting::Nothing,
                (false, true) => AtMeeting::Children,
                (false, false) => AtMeeting::Itself,
            };
            for inputs in at_start {
                let (_, sent, keyed) =
                    meet_level(&game, &m, inputs, buckets, what, &control).unwrap();
                for (q, (s, k)) in sent.into_iter().zip(keyed).enumerate() {
                    levels[q].push(s);
                    joined[q].push(k);
                }
            }
            if m.two_sided {
                let at_end = level_parts(&game, Side::End, m.end_level, buckets);
                for (q, parts) in at_end.into_iter().enumerate() {
                    levels[q].extend(parts);
                }
            }
            let ranks = BoardRanks::new(game.hole_mask());
            let direct = game.count(&Control::new()).unwrap().solutions;
            for form in FORMS {
                let mut total = 0;
                for (l, j) in levels.iter().zip(&joined) {
                    let expected = join_level(&game, &m, l.clone(), j.clone(), &control).unwrap();
                    let encode = |b: &PegBucket| b.encode_as(form, &ranks);
                    let (l, j): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (
                        l.iter().map(encode).collect(),
                        j.iter().map(encode).collect(),
                    );
                    let got = join_level_within(
                        &game,
                        &m,
                        m.start_level + 1,
                        l.iter().map(Vec::as_slice).collect(),
                        j.iter().map(Vec::as_slice).collect(),
                        form,
                        &control,
                    )
                    .unwrap();
                    assert_eq!(got, expected, "{shape} {start} to {end}, {form:?}");
                    total += got.1;
                }
                assert_eq!(total, direct, "{shape} {start} to {end}, {form:?}");
            }
        }
    }

    #[test]
    fn a_join_refuses_what_the_decoded_join_refuses() {
        let game = PegGame::new(BoardShape::Triangle(5), Some(4), Some(15)).unwrap();
        let m = meeting(&game).unwrap();
        let control = Control::new();
        let ranks = BoardRanks::new(game.hole_mask());
        let level = level_parts(&game, Side::End, m.end_level, 1).remove(0);
        for form in FORMS {
            let join = |levels, joined| {
                join_level_within(&game, &m, 7, levels, joined, form, &control).unwrap_err()
            };
            let start = side_start(&game, Side::Start)
                .unwrap()
                .encode_as(form, &ranks);
            // Boards of the wrong peg count, and bytes cut short.
            let e = join(vec![&start[..]], vec![]);
            assert!(e.to_string().contains("pegs"), "{form:?}: {e}");
            let bytes = level[0].encode_as(form, &ranks);
            let cut = &bytes[..bytes.len() - 1];
            let e = join(vec![cut], vec![]).to_string();
            let e_joined = join(vec![], vec![cut]).to_string();
            if form == LevelForm::Compact {
                // The join's level and the shard are named.
                let named = "peg join of level 7: the level of shard 0: ";
                assert!(e.starts_with(named), "{e}");
                let named = "peg join of level 7: the joined positions of shard 0: ";
                assert!(e_joined.starts_with(named), "{e_joined}");
            }
        }
    }
}
