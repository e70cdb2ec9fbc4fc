//! The pegs frontier plan: which level shards each stage runs, what they
//! write, and the checks of their results.
//!
//! Without a final hole, one search runs level by level to the boards of one
//! peg. With one, two searches meet in the middle (see `pegs::meet`): the
//! search from the start runs to level `a` (stage `a`), the search from the
//! end to level `b - 1` (stage `b - 1 + end_delay = a`, alongside), and the
//! join shards of stage `a + 1` sum the products. When the start hole is the
//! final hole the end search is the start search and runs once.
//!
//! Every shard of a stage writes the same buckets: one group of `P` buckets
//! per search the next stage runs (the start search's first, then the end
//! search's), or one group for the join. A shard fills its own search's group
//! and leaves the other empty; a shard of the next stage reads bucket `q` of
//! its search's group from every shard.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::output::{encode_output, write_output};
use super::{PegInput, alone_buckets_after, buckets_after, game, parse_solutions};
use super::{PegsPartial, PegsPlan, PegsSpec, PegsTask};
use crate::kind::{FinishedStage, NextStage, Outcome, Planned, ShardRun};
use crate::{Error, MemorySpill, Result, Room, invalid};
use tally_kernels::buckets::{bucket_of, encode_buckets, levels_note, split_buckets};
use tally_kernels::pegs::{
    self, AtMeeting, BoardRanks, LevelForm, Meeting, PegBucket, PegGame, SentBucket, Side,
    StageBucket,
};
use tally_kernels::spill::Source;

mod sums;
use sums::sum_stage;

/// Which part of the frontier plan a level shard runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PegSide {
    /// A level of the search from the start position.
    #[default]
    Start,
    /// A level of the search from the end (every hole but the final one).
    End,
    /// The join of the two searches where they meet.
    Join,
}

/// The shards of one search's level (or of the join), reading bucket groups
/// of `buckets_in` buckets: one shard for level 0, which starts from one
/// position, else one per bucket. Each writes `buckets_out` per group.
fn level_shards(
    side: PegSide,
    level: u32,
    buckets_in: u32,
    buckets_out: u32,
    alone: bool,
    fixes_start: bool,
    compact: bool,
) -> impl Iterator<Item = Planned<PegsTask>> {
    let shards = if level == 0 && side != PegSide::Join {
        1
    } else {
        buckets_in
    };
    (0..shards).map(move |bucket| Planned {
        task: PegsTask::PegLevel {
            level,
            bucket,
            buckets_out,
            alone,
            side,
            buckets_in,
            fixes_start,
            compact,
        },
        work_total: 1,
    })
}

/// The game a level shard searches: positions reduced by the symmetries
/// fixing the start hole when the plan says so.
fn level_game(spec: &PegsSpec, fixes_start: bool) -> Result<PegGame> {
    let game = game(spec)?;
    Ok(if fixes_start {
        game.fixing_start()
    } else {
        game
    })
}

/// The form of a level task's lists: compact unless planned before it was.
fn level_form(compact: bool) -> LevelForm {
    match compact {
        true => LevelForm::Compact,
        false => LevelForm::Raw,
    }
}

/// The first stage: level 0 of the start search alone, with level 0 of the
/// end search beside it when both start in the same stage.
pub(super) fn first_stage(spec: &PegsSpec, plan: &PegsPlan) -> Result<Vec<Planned<PegsTask>>> {
    let game = game(spec)?;
    let out = buckets_after(spec, 1, 1);
    let meeting = pegs::meeting(&game);
    let alone = meeting.is_none_or(|m| !m.two_sided && m.start_level > 1);
    let (fixes, compact) = (plan.fixes_start, plan.compact);
    let mut planned: Vec<_> =
        level_shards(PegSide::Start, 0, 1, out, alone, fixes, compact).collect();
    if meeting.is_some_and(|m| m.two_sided && m.end_delay == 0) {
        planned.extend(level_shards(PegSide::End, 0, 1, out, false, fixes, compact));
    }
    Ok(planned)
}

/// What a level shard computing up to `last` writes: `(groups, own)`, the
/// bucket groups of its output and the index of its own.
fn layout(meeting: Option<&Meeting>, side: PegSide, last: u32) -> (u32, u32) {
    let Some(m) = meeting else {
        return (1, 0);
    };
    match side {
        PegSide::Join => (0, 0),
        // The join stage reads one group.
        PegSide::Start if last >= m.start_level => (1, 0),
        PegSide::End if last + 1 >= m.end_level => (1, 0),
        PegSide::Start if m.two_sided => (2, 0),
        PegSide::Start => (1, 0),
        PegSide::End => (2, 1),
    }
}

/// What the start search's meeting level sends besides its joined classes.
fn at_meeting(m: &Meeting) -> AtMeeting {
    if m.two_sided {
        AtMeeting::Nothing
    } else if m.end_level > m.start_level {
        AtMeeting::Children
    } else {
        AtMeeting::Itself
    }
}

/// Runs a level shard: each level read as a stream and expanded (or, at the
/// meeting level, keyed by its complements) within the shard's room (its
/// memory share, spilling past it); a join merges its two inputs as streams.
pub(super) fn execute(
    spec: &PegsSpec,
    task: &PegsTask,
    run: &mut ShardRun<'_, PegInput, PegsPartial>,
) -> Result<Outcome<PegsPartial>> {
    let &PegsTask::PegLevel {
        level,
        buckets_out,
        alone,
        side,
        fixes_start,
        compact,
        ..
    } = task
    else {
        return Err(invalid!("not a level task: {task:?}"));
    };
    let game = level_game(spec, fixes_start)?;
    let (form, ranks) = (level_form(compact), BoardRanks::new(game.hole_mask()));
    let empty = PegBucket::default().encode_as(form, &ranks);
    let meeting = pegs::meeting(&game);
    let input = run.input;
    // The kernel's units (positions) would exceed work_total: count them on
    // a private counter, sharing only the cancellation flag.
    let inner = run.control.with_own_counter();
    if side == PegSide::Join {
        let m = meeting.ok_or_else(|| invalid!("a join without a final hole"))?;
        let input = input.ok_or_else(|| invalid!("a join needs the meeting levels' buckets"))?;
        let levels = input.level_sources().collect();
        let joined = input.joined_sources().collect();
        let (states, solutions) =
            pegs::join_level_within(&game, &m, level, levels, joined, form, &inner)?;
        run.control.add_work(1);
        return Ok(Outcome {
            output: encode_buckets(&[]).into(),
            partial: PegsPartial::PegLevels {
                sizes: vec![states],
                solutions: solutions.to_string(),
                buckets: 0,
                side,
                finals: BTreeMap::new(),
                expanded: Vec::new(),
                spilled: 0,
                pruned: Vec::new(),
            },
            work_done: 1,
        });
    }
    if let Some(input) = input
        && input.has_joined(&empty)?
    {
        return Err(invalid!("a level shard was sent joined positions"));
    }
    let search = if side == PegSide::End {
        Side::End
    } else {
        Side::Start
    };
    let game = game.searching_from(search); // pruning towards its own ends
    // The level's parts: the stage input's, or this shard's own (the first
    // level, or the next level of a shard alone in its stage).
    let mut input = match (level, input) {
        (0, _) => None,
        (_, Some(input)) => Some(input),
        (_, None) => return Err(invalid!("level {level} needs the previous level's buckets")),
    };
    let mut own = match input {
        Some(_) => Vec::new(),
        None => vec![pegs::side_start(&game, search)?.encode_as(form, &ranks)],
    };
    let mut in_memory = MemorySpill::default();
    let mut room = Room::or_in_memory(run.room.as_mut(), &mut in_memory);
    let mut sizes = Vec::new();
    let mut expanded = Vec::new();
    let mut pruned = Vec::new();
    let mut solutions: u128 = 0;
    let mut spilled = 0;
    let mut finals = BTreeMap::new();
    // Solutions by final hole: from a search fixing the start, or reduced by
    // every symmetry where the parities still tell the holes apart.
    let by_final_hole = game.end_hole().is_none() && (fixes_start || game.final_classes_resolve());
    let mut current = level;
    let meets =
        |level: u32| side == PegSide::Start && meeting.is_some_and(|m| m.start_level == level);
    let bytes_all = |buckets: Vec<PegBucket>| {
        (buckets.iter())
            .map(|b| SentBucket::Bytes(b.encode_as(form, &ranks)))
            .collect()
    };
    let (sent, joined): (Vec<SentBucket>, Vec<SentBucket>) = loop {
        // The level's parts, read as streams (afresh for each pass).
        let sources = || -> Result<Vec<Box<dyn Source>>> {
            Ok(match input {
                Some(input) => input.level_sources().map(|s| Box::new(s) as _).collect(),
                None => own.iter().map(|p| Box::new(&p[..]) as _).collect(),
            })
        };
        let input_bytes = match input {
            Some(input) => input.level_bytes(),
            None => own.iter().map(|p| p.len() as u64).sum(),
        };
        if meets(current) {
            let m = meeting.expect("a meeting level has a meeting");
            let met = pegs::meet_level_within(
                &game,
                &m,
                sources,
                input_bytes,
                buckets_out,
                at_meeting(&m),
                form,
                &mut room,
                &inner,
            )?;
            sizes.push(met.states);
            // The classes kept are those keyed for the join.
            expanded.push(met.expanded);
            pruned.push(met.pruned);
            spilled += met.spilled_bytes;
            break (met.sent, met.joined);
        }
        let out_buckets = if alone { 1 } else { buckets_out };
        let part = pegs::expand_level_within(
            &game,
            current,
            sources()?,
            input_bytes,
            out_buckets,
            form,
            &mut room,
            &inner,
        )?;
        sizes.push(part.states);
        expanded.push(part.expanded);
        pruned.push(part.pruned);
        spilled += part.spilled_bytes;
        solutions += part.solutions;
        if by_final_hole {
            add_finals(&game, &part.finals, fixes_start, &mut finals)?;
        }
        let sent = part.sent;
        if !alone {
            break (sent, Vec::new());
        }
        // A shard alone in its stage has a level too small to split, held in
        // memory as the next level's input.
        let mut sent = (sent.iter())
            .map(|bucket| bucket.to_bytes(&*room.spill))
            .collect::<Result<Vec<_>>>()?;
        let next = alone_buckets_after(spec, part.states);
        let more = pegs::pegs_at_level(&game, current + 1).is_some_and(|p| p > 0);
        // An alone shard stops before the meeting level, which runs in its
        // own stage with the join's bucket count.
        if part.states == 0 || next > 1 || !more || meets(current + 1) {
            let whole = match sent.pop() {
                Some(bytes) => {
                    let label = format!("peg level {}", current + 1);
                    PegBucket::decode_as(&bytes, form, &ranks, &label)?
                }
                None => PegBucket::default(),
            };
            break (bytes_all(pegs::rebucket(whole, next)), Vec::new());
        }
        own = sent;
        input = None;
        current += 1;
    };
    drop(own);
    run.control.add_work(1);
    let per_group = sent.len() as u32;
    let (groups, own) = layout(meeting.as_ref(), side, current);
    let in_memory = (sent.iter().chain(&joined)).all(|b| matches!(b, SentBucket::Bytes(_)));
    let output = match in_memory {
        true => encode_output(groups * per_group, own * per_group, sent, joined, &empty).into(),
        false => write_output(
            groups * per_group,
            own * per_group,
            &sent,
            &joined,
            &empty,
            &mut *room.spill,
        )?,
    };
    Ok(Outcome {
        output,
        partial: PegsPartial::PegLevels {
            sizes,
            solutions: solutions.to_string(),
            buckets: per_group,
            side,
            finals: finals
                .into_iter()
                .map(|(hole, ways): (u32, u128)| (hole, ways.to_string()))
                .collect(),
            expanded,
            spilled,
            pruned,
        },
        work_done: 1,
    })
}

/// Adds the one-peg classes' sums to the solutions by final hole, each class's
/// in equal shares among its holes that solutions end on. With the search
/// reduced by the symmetries fixing the start (`fixes_start`), those are the
/// holes of the class's images, each reached as often (the symmetries map the
/// sequences one to one). Reduced by every symmetry, they are the holes the
/// parity invariants allow from the start, one orbit of the symmetries fixing
/// it (the caller has checked, [`PegGame::final_classes_resolve`]).
fn add_finals(
    game: &PegGame,
    classes: &[(u64, u128)],
    fixes_start: bool,
    finals: &mut BTreeMap<u32, u128>,
) -> Result<()> {
    for &(board, ways) in classes {
        let holes = match fixes_start {
            true => image_holes(game, board)?,
            false => game.final_share(board).ok_or_else(|| {
                Error::Internal(format!("pegs: no share of the final class of {board:#x}"))
            })?,
        };
        let n = holes.len() as u128;
        if n == 0 || ways % n != 0 {
            return Err(Error::Internal(format!(
                "pegs: {ways} solutions end in the class of {board:#x}, shared by {n} holes"
            )));
        }
        for hole in holes {
            let sum = finals.entry(hole).or_insert(0);
            *sum = sum
                .checked_add(ways / n)
                .ok_or_else(|| Error::Internal("pegs: count exceeds 128 bits".into()))?;
        }
    }
    Ok(())
}

/// The holes of the distinct images of the one-peg `board`.
fn image_holes(game: &PegGame, board: u64) -> Result<Vec<u32>> {
    let mut images = game.symmetric_images(board);
    images.sort_unstable();
    images.dedup();
    images
        .into_iter()
        .map(|image| match game.pegs_of(image).as_slice() {
            &[hole] => Ok(hole),
            _ => Err(invalid!("a final position {image:#x} of more than one peg")),
        })
        .collect()
}

/// The buckets per group a level shard that computed levels of `sizes`
/// writes.
fn buckets_written(spec: &PegsSpec, task: &PegsTask, sizes: &[u64]) -> Result<u32> {
    match task {
        PegsTask::PegLevel {
            side: PegSide::Join,
            ..
        } => Ok(0),
        PegsTask::PegLevel { alone: true, .. } => Ok(alone_buckets_after(
            spec,
            sizes.last().copied().unwrap_or(0),
        )),
        PegsTask::PegLevel { buckets_out, .. } if sizes.len() == 1 => Ok(*buckets_out),
        PegsTask::PegLevel { .. } => Err(invalid!(
            "a level shard that shares its stage computes one level, not {}",
            sizes.len()
        )),
        PegsTask::PegTasks { .. } => Err(invalid!("the prefixes plan writes no buckets")),
    }
}

/// Checks a level shard's result: its buckets as many as it says and the
/// next stage reads, its own group's positions of the right peg count, each
/// in its own bucket, and the other groups empty.
pub(super) fn check(
    spec: &PegsSpec,
    task: &PegsTask,
    partial: &PegsPartial,
    output: &[u8],
) -> Result<()> {
    let (
        &PegsTask::PegLevel {
            level,
            side,
            fixes_start,
            compact,
            ..
        },
        PegsPartial::PegLevels {
            sizes,
            solutions,
            buckets: said,
            side: said_side,
            finals,
            expanded,
            ..
        },
    ) = (task, partial)
    else {
        return Err(invalid!("a {partial:?} result for the task {task:?}"));
    };
    if side != *said_side {
        return Err(invalid!("a {said_side:?} result for a {side:?} level"));
    }
    let game = game(spec)?;
    let meeting = pegs::meeting(&game);
    let solutions = parse_solutions(solutions)?;
    // The solutions by final hole, when given, are holes of the board and
    // add up to the solutions.
    let mut by_hole: u128 = 0;
    for (&hole, ways) in finals {
        if hole == 0 || hole > game.shape().holes() {
            return Err(invalid!(
                "solutions on hole {hole}, not a hole of the board"
            ));
        }
        by_hole = by_hole
            .checked_add(parse_solutions(ways)?)
            .ok_or_else(|| invalid!("solutions by final hole overflow"))?;
    }
    if !finals.is_empty() && by_hole != solutions {
        return Err(invalid!(
            "solutions by final hole add up to {by_hole}, not {solutions}"
        ));
    }
    if sizes.is_empty() {
        return Err(invalid!("a level shard computed no level"));
    }
    if !expanded.is_empty()
        && (expanded.len() != sizes.len() || expanded.iter().zip(sizes).any(|(e, s)| e > s))
    {
        return Err(invalid!(
            "a level shard expanded {expanded:?} of levels of {sizes:?} positions"
        ));
    }
    let per_group = buckets_written(spec, task, sizes)?;
    let last = level + sizes.len() as u32 - 1;
    let (groups, own) = layout(meeting.as_ref(), side, last);
    let buckets = split_buckets(output)?;
    if buckets.len() != (groups * per_group) as usize || *said != per_group {
        return Err(invalid!(
            "the level shard wrote {} buckets and said {said} per group; the next stage \
             reads {groups} groups of {per_group}",
            buckets.len()
        ));
    }
    // The peg counts of what the shard sends on, and of its joined classes.
    let meets = side == PegSide::Start && meeting.is_some_and(|m| m.start_level == last);
    let pegs_at = |level: u32| pegs::pegs_at_level(&game, level).unwrap_or(0);
    let (level_pegs, joined_pegs) = match meeting.filter(|_| meets) {
        Some(m) => {
            let sent = match at_meeting(&m) {
                AtMeeting::Nothing => None,
                AtMeeting::Children => Some(pegs_at(last + 1)),
                AtMeeting::Itself => Some(pegs_at(last)),
            };
            (sent, Some(pegs_at(m.end_level)))
        }
        None => (Some(pegs_at(last + 1)), None),
    };
    let ranks = BoardRanks::new(level_game(spec, fixes_start)?.hole_mask());
    for (index, bytes) in buckets.into_iter().enumerate() {
        let label = format!("peg level {level}: output bucket {index}");
        let bucket = StageBucket::decode_as(bytes, level_form(compact), &ranks, &label)?;
        let mine = index as u32 / per_group.max(1) == own;
        let q = index as u32 % per_group.max(1);
        for (list, pegs, what) in [
            (&bucket.level, level_pegs, "position"),
            (&bucket.joined, joined_pegs, "joined position"),
        ] {
            if !mine || pegs.is_none() {
                if !list.is_empty() {
                    return Err(invalid!("bucket {index} holds {what}s it should not"));
                }
                continue;
            }
            let pegs = pegs.unwrap_or(0);
            check_list(&game, list, per_group, q, pegs, what)?;
        }
    }
    Ok(())
}

fn check_list(
    game: &PegGame,
    list: &PegBucket,
    buckets: u32,
    q: u32,
    pegs: u32,
    what: &str,
) -> Result<()> {
    if let Some(&board) = list.boards.iter().find(|&&b| {
        bucket_of(u128::from(b), buckets) != q
            || b.count_ones() != pegs
            || b & !game.hole_mask() != 0
    }) {
        return Err(invalid!(
            "{what} {board:#x} sent to bucket {q} is not a position of {pegs} pegs in that bucket"
        ));
    }
    Ok(())
}

/// The largest level a stage found, of the start search or the end search.
/// No level is too large: past `MAX_BUCKETS` shards, each shard takes a
/// larger part and spills past its memory share.
fn largest_level(start_found: &[u64], end_found: &[u64]) -> u64 {
    start_found
        .last()
        .max(end_found.last())
        .copied()
        .unwrap_or(0)
}

/// What follows a stage of the frontier plan (see `JobKind::next_stage`).
pub(super) fn next_stage(
    spec: &PegsSpec,
    plan: &mut PegsPlan,
    finished: FinishedStage<'_, PegsPartial>,
) -> Result<NextStage<PegsTask>> {
    let game = game(spec)?;
    let meeting = pegs::meeting(&game);
    let sums = sum_stage(plan, finished.partials)?;
    if let Some(positions) = sums.joined {
        plan.solutions = sums.solutions.to_string();
        // The joined level is the end search's (or, with one search, the
        // start search's level after the meeting level).
        // Its positions are joined, not expanded.
        match meeting {
            Some(m) if m.two_sided => {
                plan.end_levels.push(positions);
                plan.end_expanded.push(0);
            }
            Some(m) if m.end_level > m.start_level => {
                plan.levels.push(positions);
                plan.expanded.push(0);
            }
            _ => {}
        }
        return Ok(NextStage::Finish);
    }
    let start_found: Vec<u64> = sums.start.iter().copied().take_while(|&n| n > 0).collect();
    let end_found: Vec<u64> = sums.end.iter().copied().take_while(|&n| n > 0).collect();
    let shards = sums.written.unwrap_or(1);
    let largest = largest_level(&start_found, &end_found);
    plan.solutions = sums.solutions.to_string();
    plan.finals = sums
        .finals
        .iter()
        .map(|(&hole, ways)| (hole, ways.to_string()))
        .collect();
    let first = plan.levels.len();
    let first_end = plan.end_levels.len();
    // A plan begun by a release that did not prune expanded every position.
    (plan.expanded.len() != first).then(|| plan.expanded = plan.levels.clone());
    (plan.end_expanded.len() != first_end).then(|| plan.end_expanded = plan.end_levels.clone());
    // One begun before children were pruned as made pruned none.
    plan.pruned.resize(first, 0);
    plan.end_pruned.resize(first_end, 0);
    plan.levels.extend(&start_found);
    plan.end_levels.extend(&end_found);
    plan.expanded
        .extend(&sums.start_expanded[..start_found.len()]);
    plan.end_expanded
        .extend(&sums.end_expanded[..end_found.len()]);
    plan.pruned.extend(&sums.start_pruned[..start_found.len()]);
    plan.end_pruned.extend(&sums.end_pruned[..end_found.len()]);
    let mut note = levels_note("level", first, &start_found, "positions");
    if let [one] = end_found.as_slice() {
        note = format!("{note}; from the end, level {first_end}: {one} positions");
    }
    let pruned: u64 = (sums.start_pruned.iter().chain(&sums.end_pruned)).sum();
    if pruned > 0 {
        note = format!("{note}; {pruned} children pruned as made");
    }
    if sums.spilled > 0 {
        note = format!("{note}; shards spilled {} bytes", sums.spilled);
    }
    // An empty level ends the count: no position goes further.
    if start_found.len() < sums.start.len() || end_found.len() < sums.end.len() {
        return Ok(NextStage::Finish);
    }
    // Shards spill what their share does not hold, so a disk short of room
    // gets fewer, larger ones (fewer copies of each child).
    let buckets_out = match spec.buckets {
        0 => tally_kernels::buckets::within_room(
            buckets_after(spec, largest, finished.slots),
            finished.slots,
            finished.stage_bytes,
            finished.stage_room,
        ),
        _ => buckets_after(spec, largest, finished.slots),
    };
    let Some(m) = meeting else {
        // One search, to the boards of one peg.
        let next = plan.levels.len() as u32;
        if start_found.is_empty() || pegs::pegs_at_level(&game, next).is_none_or(|p| p == 0) {
            return Ok(NextStage::Finish);
        }
        let planned = level_shards(
            PegSide::Start,
            next,
            shards,
            buckets_out,
            shards == 1,
            plan.fixes_start,
            plan.compact,
        )
        .collect();
        return Ok(NextStage::Shards(planned, note));
    };
    let planned = meeting_shards(plan, m, shards, buckets_out)?;
    Ok(NextStage::Shards(planned, note))
}

/// The next stage's shards of a count with a meeting level: the start
/// search's next level (and the end search's, once it has started), or the
/// join once the start search has reached the meeting level.
fn meeting_shards(
    plan: &PegsPlan,
    m: Meeting,
    shards: u32,
    buckets_out: u32,
) -> Result<Vec<Planned<PegsTask>>> {
    let next = plan.levels.len() as u32;
    if next > m.start_level {
        let join = level_shards(
            PegSide::Join,
            m.end_level,
            shards,
            0,
            false,
            plan.fixes_start,
            plan.compact,
        );
        return Ok(join.collect());
    }
    // Alone shards stop before the meeting level, which gets its own stage.
    let alone = !m.two_sided && shards == 1 && next < m.start_level;
    let mut planned: Vec<_> = level_shards(
        PegSide::Start,
        next,
        shards,
        buckets_out,
        alone,
        plan.fixes_start,
        plan.compact,
    )
    .collect();
    let end_next = plan.end_levels.len() as u32;
    if m.two_sided && next >= m.end_delay && end_next < m.end_level {
        if end_next + m.end_delay != next {
            return Err(Error::Internal(format!(
                "the end search is at level {end_next} in the stage of level {next}"
            )));
        }
        planned.extend(level_shards(
            PegSide::End,
            end_next,
            shards,
            buckets_out,
            false,
            plan.fixes_start,
            plan.compact,
        ));
    }
    Ok(planned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::PegsPlanName;

    fn spec(end: Option<u32>, buckets: u32) -> PegsSpec {
        PegsSpec {
            board: "english".into(),
            start: None,
            end,
            prefixes: 0,
            plan: Some(PegsPlanName::Frontier),
            buckets,
            by_final_hole: false,
            no_prune: false,
        }
    }

    fn levels(sizes: &[u64], buckets: u32, side: PegSide) -> PegsPartial {
        PegsPartial::PegLevels {
            sizes: sizes.to_vec(),
            solutions: String::new(),
            buckets,
            side,
            finals: BTreeMap::new(),
            expanded: Vec::new(),
            spilled: 0,
            pruned: Vec::new(),
        }
    }

    use crate::pegs::MAX_BUCKETS;

    /// Stage `stage`, the last planned so far, finished with `partials` on
    /// `slots` slots.
    fn finished(
        stage: u32,
        partials: &[PegsPartial],
        slots: u32,
    ) -> FinishedStage<'_, PegsPartial> {
        FinishedStage {
            stage,
            stages_total: stage,
            partials,
            slots,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        }
    }

    /// Stage 4 of 4 finished with `partials`, on one slot.
    fn fourth_stage(partials: &[PegsPartial]) -> FinishedStage<'_, PegsPartial> {
        finished(4, partials, 1)
    }

    #[test]
    fn a_level_of_any_size_is_planned_over_at_most_the_most_shards() {
        let huge = u64::MAX / 4;
        for (buckets, expected) in [(2, 2), (0, MAX_BUCKETS as usize)] {
            let spec = spec(None, buckets);
            let mut plan = PegsPlan {
                levels: vec![1, 1, 2],
                ..PegsPlan::default()
            };
            let partials = [
                levels(&[huge], 2, PegSide::Start),
                levels(&[huge], 2, PegSide::Start),
            ];
            let finished = fourth_stage(&partials);
            match next_stage(&spec, &mut plan, finished).unwrap() {
                NextStage::Shards(shards, note) => {
                    assert_eq!(shards.len(), 2, "the shards the last stage wrote for");
                    assert_eq!(note, format!("level 3: {} positions", 2 * huge));
                    let PegsTask::PegLevel { buckets_out, .. } = shards[0].task else {
                        panic!("{:?}", shards[0].task);
                    };
                    assert_eq!(buckets_out as usize, expected, "buckets {buckets}");
                }
                NextStage::Finish => panic!("finished"),
            }
        }
    }

    /// The stage's note says what its shards spilled past their memory
    /// shares, summed, and nothing when none did.
    #[test]
    fn the_stage_note_sums_what_the_shards_spilled() {
        for (spills, said) in [([0, 0], None), ([5_000, 7], Some(5_007))] {
            let spec = spec(None, 2);
            let mut plan = PegsPlan {
                levels: vec![1, 1, 2],
                ..PegsPlan::default()
            };
            let partials = spills.map(|bytes| {
                let mut partial = levels(&[40], 2, PegSide::Start);
                if let PegsPartial::PegLevels { spilled, .. } = &mut partial {
                    *spilled = bytes;
                }
                partial
            });
            let finished = fourth_stage(&partials);
            let NextStage::Shards(_, note) = next_stage(&spec, &mut plan, finished).unwrap() else {
                panic!("finished");
            };
            match said {
                None => assert_eq!(note, "level 3: 80 positions"),
                Some(bytes) => {
                    assert_eq!(
                        note,
                        format!("level 3: 80 positions; shards spilled {bytes} bytes")
                    )
                }
            }
        }
    }

    /// Replicas of a level shard agree whatever they spilled (it follows the
    /// worker's memory share), and disagree on anything they found.
    #[test]
    fn replicas_agree_whatever_they_spilled_and_not_on_a_different_count() {
        use crate::kind::JobKind;
        use crate::pegs::Pegs;
        let with = |bytes: u64, solutions: &str| {
            let mut partial = levels(&[40], 2, PegSide::Start);
            if let PegsPartial::PegLevels {
                spilled,
                solutions: found,
                ..
            } = &mut partial
            {
                *spilled = bytes;
                *found = solutions.into();
            }
            partial
        };
        assert!(Pegs::same_result(&with(0, "7"), &with(123_456, "7")));
        assert!(!Pegs::same_result(&with(0, "7"), &with(0, "8")));
        assert!(!Pegs::same_result(
            &with(5, "7"),
            &levels(&[41], 2, PegSide::Start)
        ));
    }

    /// The children pruned as made are summed per level into the plan and
    /// the stage's note; a plan begun, and a shard run, by a release that
    /// sent every child count none.
    #[test]
    fn the_plan_and_the_note_sum_the_children_pruned_as_made() {
        let spec = spec(None, 2);
        let mut plan = PegsPlan {
            levels: vec![1, 1, 2],
            expanded: vec![1, 1, 2],
            ..PegsPlan::default()
        };
        let mut newer = levels(&[40], 2, PegSide::Start);
        if let PegsPartial::PegLevels { pruned, .. } = &mut newer {
            *pruned = vec![9];
        }
        let partials = [newer, levels(&[30], 2, PegSide::Start)];
        let finished = fourth_stage(&partials);
        let NextStage::Shards(_, note) = next_stage(&spec, &mut plan, finished).unwrap() else {
            panic!("finished");
        };
        assert_eq!(note, "level 3: 70 positions; 9 children pruned as made");
        assert_eq!(plan.pruned, [0, 0, 0, 9]);
        assert_eq!(plan.levels, [1, 1, 2, 70]);
    }

    /// A shard alone in its stage hands a level of a million positions on
    /// in buckets, however large a level shard may be: it holds its levels
    /// in memory, on one thread.
    #[test]
    fn a_shard_alone_goes_on_only_through_thin_levels() {
        let chosen = spec(None, 0);
        assert_eq!(alone_buckets_after(&chosen, 1), 1);
        assert_eq!(
            alone_buckets_after(&chosen, super::super::ALONE_POSITIONS),
            1
        );
        assert_eq!(alone_buckets_after(&chosen, 1_000_000), 2);
        assert!(alone_buckets_after(&chosen, 200_000_000) >= 400);
        assert_eq!(alone_buckets_after(&spec(None, 3), 1_000_000), 3, "fixed");
        // Level shards that share their stage are sized apart from it.
        assert_eq!(buckets_after(&chosen, 1_000_000, 2), 2);
    }

    #[test]
    fn a_stage_store_short_of_room_gets_one_bucket_a_slot_unless_the_spec_fixed_them() {
        let wide = 40 * crate::pegs::POSITIONS_PER_BUCKET;
        let gib = 1u64 << 30;
        for (buckets, room, expected) in [
            (0, None, None),
            (0, Some(1000 * gib), None),
            (0, Some(gib), Some(4)),
            (6, Some(gib), Some(6)),
        ] {
            let mut plan = PegsPlan {
                levels: vec![1, 1, 2],
                ..PegsPlan::default()
            };
            let partials = [levels(&[wide], 2, PegSide::Start)];
            let finished = FinishedStage {
                stage: 4,
                stages_total: 4,
                partials: &partials,
                slots: 4,
                slot_memory: 0,
                stage_bytes: gib,
                stage_room: room,
            };
            let NextStage::Shards(shards, _) =
                next_stage(&spec(None, buckets), &mut plan, finished).unwrap()
            else {
                panic!("finished");
            };
            let PegsTask::PegLevel { buckets_out, .. } = shards[0].task else {
                panic!("{:?}", shards[0].task);
            };
            match expected {
                Some(expected) => assert_eq!(buckets_out, expected, "{buckets} {room:?}"),
                None => assert!(
                    buckets_out >= 40,
                    "{buckets_out} buckets with room {room:?}"
                ),
            }
        }
    }

    #[test]
    fn two_searches_run_side_by_side_and_end_in_a_join() {
        // English from hole 10 to the centre: 31 jumps, the start search to
        // level 15 and the end search to level 16, side by side.
        let spec = PegsSpec {
            start: Some(10),
            ..spec(Some(17), 3)
        };
        let m = pegs::meeting(&game(&spec).unwrap()).unwrap();
        assert_eq!((m.start_level, m.end_level, m.end_delay), (15, 16, 0));
        let mut plan = PegsPlan {
            fixes_start: true,
            ..PegsPlan::default()
        };
        let first = first_stage(&spec, &plan).unwrap();
        assert_eq!(first.len(), 2, "both searches start in the first stage");
        plan.fixes_start = false;
        let mut stage = 1;
        let mut partials = vec![
            levels(&[1], 3, PegSide::Start),
            levels(&[1], 3, PegSide::End),
        ];
        loop {
            match next_stage(&spec, &mut plan, finished(stage, &partials, 3)).unwrap() {
                NextStage::Finish => break,
                NextStage::Shards(shards, _) => {
                    stage += 1;
                    partials = shards
                        .iter()
                        .map(|s| match s.task {
                            PegsTask::PegLevel { side, .. } => levels(&[10], 3, side),
                            _ => panic!("{s:?}"),
                        })
                        .collect();
                    let sides: Vec<PegSide> = shards
                        .iter()
                        .map(|s| match s.task {
                            PegsTask::PegLevel { side, .. } => side,
                            _ => unreachable!(),
                        })
                        .collect();
                    if sides.contains(&PegSide::Join) {
                        assert!(sides.iter().all(|&s| s == PegSide::Join));
                        assert_eq!(stage, 17, "the join follows level 15");
                    } else {
                        assert_eq!(sides.len(), 6, "stage {stage}: {sides:?}");
                    }
                }
            }
        }
        assert_eq!(plan.levels.len(), 16, "start levels 0 to 15");
        assert_eq!(
            plan.end_levels.len(),
            17,
            "end levels 0 to 15, and 16 at the join"
        );
    }
}

#[cfg(test)]
mod validation {
    use super::*;
    use crate::kind::JobKind;
    use crate::pegs::MAX_BUCKETS;
    use crate::pegs::{Pegs, PegsPlanName};

    fn spec(plan: Option<PegsPlanName>, prefixes: u32, buckets: u32) -> PegsSpec {
        PegsSpec {
            board: "english".into(),
            start: None,
            end: Some(17),
            prefixes,
            plan,
            buckets,
            by_final_hole: false,
            no_prune: false,
        }
    }

    #[test]
    fn plans_and_their_values_are_checked_and_named() {
        use PegsPlanName::{Frontier, Prefixes};
        for (ok, plan) in [
            (spec(None, 0, 0), Frontier),
            (spec(None, 0, MAX_BUCKETS), Frontier),
            (spec(None, 7, 0), Prefixes),
            (spec(Some(Prefixes), 0, 0), Prefixes),
            (spec(Some(Frontier), 0, 3), Frontier),
        ] {
            Pegs::validate(&ok).unwrap();
            assert_eq!(ok.plan_name(), plan);
            // The proto form keeps the choice, or its absence.
            let back = Pegs::spec_from_proto(&Pegs::spec_to_proto(&ok))
                .unwrap()
                .unwrap();
            assert_eq!(back, ok);
        }
        for (bad, needle) in [
            (
                spec(None, 0, MAX_BUCKETS + 1),
                "buckets must be at most 1024",
            ),
            (spec(None, 7, 2), "buckets are for the frontier plan"),
            (
                spec(Some(Frontier), 7, 0),
                "prefixes are for the prefixes plan",
            ),
        ] {
            let e = Pegs::validate(&bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let mut sideways = Pegs::spec_to_proto(&spec(None, 0, 0));
        if let tally_wire::proto::job_spec::Kind::Pegs(p) = &mut sideways {
            p.plan = "sideways".into();
        }
        let e = Pegs::spec_from_proto(&sideways)
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown pegs plan \"sideways\""), "{e}");
    }
}
