//! What a shard of the frontier plan of `sliders` does: a forward level
//! (in memory, or read as streams past its memory share), one graph level's
//! bucket or several small graph levels, or the graph stage; and the check of
//! each one's result against its task.

use crate::kind::Outcome;
use crate::{Control, Result, Room, invalid};
use tally_kernels::buckets::encode_buckets;
use tally_kernels::compact::ListForm;
use tally_kernels::sliders;
use tally_kernels::sliders::graph_levels;
use tally_kernels::sliders::levels::{self, Boards, LevelInput};
use tally_kernels::spill::stage_output;

use super::input::{Framed, SlidersInput, decode_forward};
use super::prefixes::{min_prefixes, shard_count};
use super::records::{SlidersPartial, SlidersTask};
use super::spec::SlidersSpec;

/// Bytes of memory a forward shard held in memory takes per byte of its
/// input (measured: about 500 bytes a board, from some 17 bytes of raw input
/// a board, 0.85 of that compact), with room to spare.
const MEMORY_PER_INPUT_BYTE: u64 = 40;

/// Runs a shard of a forward level, a graph level or the graph stage.
pub(super) fn execute(
    spec: &SlidersSpec,
    task: &SlidersTask,
    input: Option<&SlidersInput>,
    control: &Control,
    room: Option<&mut Room<'_>>,
) -> Result<Outcome<SlidersPartial>> {
    let boards = Boards::new(&spec.board)?;
    let form = ListForm::compact_if(match *task {
        SlidersTask::SliderLevel { compact, .. }
        | SlidersTask::SliderGraphLevel { compact, .. }
        | SlidersTask::SliderGraphLevels { compact, .. } => compact,
        _ => false,
    });
    let decoded;
    let input = match input {
        Some(SlidersInput::Forward(framed)) => {
            let SlidersTask::SliderLevel {
                level, buckets_out, ..
            } = task
            else {
                return Err(invalid!(
                    "a forward level's buckets were handed to {task:?}"
                ));
            };
            let bytes = framed[0].bytes() + framed[1].bytes();
            match room {
                Some(room)
                    if bytes.saturating_mul(MEMORY_PER_INPUT_BYTE) > room.memory
                        && boards.fits_narrow_keys() =>
                {
                    return forward_within(
                        &boards,
                        (*level, form),
                        framed,
                        *buckets_out,
                        room,
                        control,
                    );
                }
                _ => {
                    decoded = SlidersInput::Levels(decode_forward(framed)?);
                    Some(&decoded)
                }
            }
        }
        other => other,
    };
    match (task, input) {
        (
            SlidersTask::SliderLevel {
                level: 0,
                buckets_out,
                ..
            },
            None,
        ) => {
            let (inputs, members) = levels::start_input(&boards);
            forward(&boards, (0, form), &inputs, &members, *buckets_out, control)
        }
        (
            SlidersTask::SliderLevel {
                level, buckets_out, ..
            },
            Some(SlidersInput::Levels(LevelInput::Forward { buckets, members })),
        ) => forward(
            &boards,
            (*level, form),
            buckets,
            members,
            *buckets_out,
            control,
        ),
        (
            SlidersTask::SliderGraphLevel {
                level,
                bucket,
                buckets,
                buckets_out,
                shortest,
                ..
            },
            Some(SlidersInput::Levels(LevelInput::Backward {
                members,
                neighbours,
            })),
        ) => {
            let neighbours =
                neighbours_above(&boards, *level, *shortest, (*bucket, *buckets), neighbours)?;
            let [members] = members.as_slice() else {
                return Err(invalid!(
                    "a shard of graph level {level} reads one bucket of its members, not {}",
                    members.len()
                ));
            };
            let found = graph_levels::expand_backward(
                &boards,
                members,
                &neighbours,
                *buckets_out,
                form,
                control,
            )?;
            let work_done = found.boards.len() as u64;
            Ok(Outcome {
                output: found.output.into(),
                partial: SlidersPartial::SliderGraphLevel {
                    level: *level,
                    boards: found.boards,
                },
                work_done,
            })
        }
        (
            SlidersTask::SliderGraphLevels {
                top,
                member_buckets,
                buckets_out,
                shortest,
                ..
            },
            Some(SlidersInput::Levels(LevelInput::Backward {
                members,
                neighbours,
            })),
        ) => {
            if members.len() != member_buckets.iter().map(|&b| b as usize).sum::<usize>() {
                return Err(invalid!(
                    "graph levels from {top}: {} buckets of members where the task names {}",
                    members.len(),
                    member_buckets.iter().sum::<u32>()
                ));
            }
            // The members' buckets, level by level from the top.
            let mut parts = members.iter();
            let by_level: Vec<Vec<&[u64]>> = member_buckets
                .iter()
                .map(|&buckets| {
                    let level = parts.by_ref().take(buckets as usize);
                    level.flatten().map(Vec::as_slice).collect()
                })
                .collect();
            let neighbours = neighbours_above(&boards, *top, *shortest, (0, 1), neighbours)?;
            let found = graph_levels::expand_backward_levels(
                &boards,
                &by_level,
                &neighbours,
                *buckets_out,
                form,
                control,
            )?;
            let work_done = found.levels.iter().map(|l| l.len() as u64).sum();
            Ok(Outcome {
                output: found.output.into(),
                partial: SlidersPartial::SliderGraphLevels {
                    top: *top,
                    levels: found.levels,
                },
                work_done,
            })
        }
        (SlidersTask::SliderGraph { layers }, None) => graph(spec, layers, control),
        _ => Err(invalid!(
            "this slider shard was handed stage data it does not read"
        )),
    }
}

/// The boards next to the graph level above `level` that a graph shard
/// starts from: what that level's shards `sent`, or for the level next to
/// the target (at distance `shortest`), the target's neighbours in the
/// shard's bucket (`bucket` of `buckets`).
fn neighbours_above<'a>(
    boards: &Boards,
    level: u32,
    shortest: u32,
    (bucket, buckets): (u32, u32),
    sent: &'a [Vec<u64>],
) -> Result<std::borrow::Cow<'a, [Vec<u64>]>> {
    Ok(match level + 1 == shortest {
        true => vec![graph_levels::target_neighbours(boards, bucket, buckets)?].into(),
        false => sent.into(),
    })
}

/// A forward level shard whose input is large next to its memory share:
/// read as streams, spilling past the share.
fn forward_within(
    boards: &Boards,
    (level, form): (u32, ListForm),
    input: &[Framed; 2],
    buckets_out: u32,
    room: &mut Room<'_>,
    control: &Control,
) -> Result<Outcome<SlidersPartial>> {
    let [buckets, members] = input;
    let found = sliders::stream::expand_forward_within(
        boards,
        (&*buckets.stored, &buckets.buckets),
        (&*members.stored, &members.buckets),
        buckets_out,
        form,
        room,
        control,
    )?;
    let output = stage_output(&found.sent, &mut *room.spill)?;
    Ok(Outcome {
        output,
        partial: SlidersPartial::SliderLevel {
            level,
            boards: found.boards,
            target_paths: found.target_paths.map(|p| p.to_string()),
        },
        work_done: found.boards,
    })
}

fn forward(
    boards: &Boards,
    (level, form): (u32, ListForm),
    inputs: &[levels::ForwardBucket],
    members: &[Vec<u64>],
    buckets_out: u32,
    control: &Control,
) -> Result<Outcome<SlidersPartial>> {
    let found = levels::expand_forward(boards, inputs, members, buckets_out, form, control)?;
    Ok(Outcome {
        output: found.output.into(),
        partial: SlidersPartial::SliderLevel {
            level,
            boards: found.boards,
            target_paths: found.target_paths.map(|p| p.to_string()),
        },
        work_done: found.boards,
    })
}

/// The graph stage: the graph built from its levels, its levels as stage
/// data, and the prefix tasks with their weights.
fn graph(
    spec: &SlidersSpec,
    layers: &[Vec<u64>],
    control: &Control,
) -> Result<Outcome<SlidersPartial>> {
    let space = sliders::SliderSpace::from_layers(&spec.board, layers, control)?;
    let tasks = space.balanced_prefix_tasks(min_prefixes(spec), shard_count(spec));
    let (prefixes, weights): (Vec<String>, Vec<u128>) = tasks.into_iter().unzip();
    let work_done = layers.iter().map(|l| l.len() as u64).sum();
    Ok(Outcome {
        output: encode_buckets(&[levels::encode_graph(layers)]).into(),
        partial: SlidersPartial::SliderGraph {
            prefixes,
            weights: weights.iter().map(u128::to_string).collect(),
            sequences: space.path_count().to_string(),
        },
        work_done,
    })
}

/// The shape of a frontier shard's result: its partial's variant and level,
/// and the number of buckets of its output.
pub(super) fn check_result(
    task: &SlidersTask,
    partial: &SlidersPartial,
    output: &[u8],
) -> Result<()> {
    let buckets = |output: &[u8]| tally_kernels::buckets::split_buckets(output).map(|b| b.len());
    // A graph shard of level 0 sends nothing on.
    let neighbour_buckets = |output: &[u8]| match output.is_empty() {
        true => Ok(0),
        false => buckets(output),
    };
    match (task, partial) {
        (
            SlidersTask::SliderLevel {
                level, buckets_out, ..
            },
            SlidersPartial::SliderLevel { level: l, .. },
        ) if level == l => {
            let found = buckets(output)?;
            if found != 2 * *buckets_out as usize {
                return Err(invalid!(
                    "a shard of level {level} wrote {found} buckets, not {}",
                    2 * buckets_out
                ));
            }
            Ok(())
        }
        (
            SlidersTask::SliderGraphLevel {
                level, buckets_out, ..
            },
            SlidersPartial::SliderGraphLevel { level: l, .. },
        ) if level == l => {
            let found = neighbour_buckets(output)?;
            if found != *buckets_out as usize {
                return Err(invalid!(
                    "a shard of graph level {level} wrote {found} buckets, not {buckets_out}"
                ));
            }
            Ok(())
        }
        (
            SlidersTask::SliderGraphLevels {
                top,
                bottom,
                buckets_out,
                ..
            },
            SlidersPartial::SliderGraphLevels { top: t, levels },
        ) if top == t && levels.len() as u32 == top + 1 - bottom => {
            let found = neighbour_buckets(output)?;
            if found != *buckets_out as usize {
                return Err(invalid!(
                    "a shard of graph levels {top} to {bottom} wrote {found} buckets, not \
                     {buckets_out}"
                ));
            }
            Ok(())
        }
        (
            SlidersTask::SliderGraph { .. },
            SlidersPartial::SliderGraph {
                prefixes, weights, ..
            },
        ) if prefixes.len() == weights.len() && !prefixes.is_empty() => {
            if buckets(output)? != 1 {
                return Err(invalid!(
                    "the graph stage must write the graph as one bucket"
                ));
            }
            Ok(())
        }
        _ => Err(invalid!(
            "a slider result does not match its shard: {partial:?}"
        )),
    }
}
