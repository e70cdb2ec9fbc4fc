//! The frontier plan of `sliders`: its stages, each planned when the one
//! before has finished (what their shards do is in `frontier_shards`).
//!
//! With `D` the distance of the target (found as the search goes):
//! - stages `1 ..= D + 1`: forward level `k = stage - 1` (`sliders::levels`),
//!   level `k`'s shards reading both halves of level `k - 1`'s output; the
//!   level holding the target ends the search;
//! - stages `D + 2 ..`: the graph levels from `D - 1` down to 0, a stage for
//!   each large one (its shards reading their bucket of the members of
//!   forward level `j`, kept since stage `j + 1`, and the neighbours the
//!   graph level after it sent) and one shard for a run of small ones (every
//!   bucket of each), `plan.backward_tops` naming each stage's highest level;
//! - then one shard turns the graph's levels (gathered in the plan from the
//!   graph shards' partials) into stage data and the prefix tasks;
//! - and last the prefix tasks, enumerated as in the prefixes plan over the
//!   graph read from stage data (no search on any worker).

use crate::kind::{FinishedStage, NextStage, Planned, StageRead};
use crate::{Error, Result, invalid};
use tally_kernels::buckets::{add_level_sizes, bucket_count, levels_note, states_per_slot};
use tally_kernels::sliders::levels::Boards;

use super::prefixes::weighted_shards;
use super::records::{SlidersPartial, SlidersPlan, SlidersTask};
use super::spec::SlidersSpec;

/// Most shards of one level.
pub const MAX_BUCKETS: u32 = 1024;

/// Boards of a level per shard of the level after next when the plan
/// chooses the bucket count (a shard then holds a few million candidates
/// with their counts, some tens of bytes each, while it sums them).
const BOARDS_PER_BUCKET: u64 = 2_000_000;

/// Memory a forward shard takes per board of its bucket: the candidates it
/// is sent, the level with its counts, and the neighbours it sends on
/// (measured: a worker of 2 slots peaks at 550 to 600 MB on levels of 3
/// million boards in 4 buckets, about 400 bytes a board; with room to spare).
const SHARD_BYTES_PER_BOARD: u64 = 500;

/// The fewest boards per shard the plan sizes to a small worker, and the
/// fewest for which a level is spread over the live slots: below it, the
/// runner's cost per shard would outweigh the shard.
const MIN_BOARDS_PER_BUCKET: u64 = 50_000;

/// Most boards of the shortest-path graph: its levels are kept in the job
/// record (about 10 bytes a board) until they become stage data.
pub const MAX_GRAPH_BOARDS: u64 = 1_000_000;

/// Most boards of forward levels whose graph levels one shard takes
/// together (reading every bucket of each): below it, a stage a level
/// (a barrier, a report and a lease, some milliseconds) costs more than
/// reading the levels' members on one slot instead of all (about 8 bytes
/// a board decoded, a few nanoseconds each).
const GRAPH_GROUP_BOARDS: u64 = 4_000_000;

/// Where a stage lies in the plan.
enum Phase {
    Forward {
        level: u32,
    },
    /// Graph levels from `top` down, in one stage.
    Backward {
        top: u32,
    },
    Graph,
    Enumerate,
}

fn phase(plan: &SlidersPlan, stage: u32) -> Phase {
    let Some(d) = plan.target_level else {
        return Phase::Forward { level: stage - 1 };
    };
    if stage <= d + 1 {
        return Phase::Forward { level: stage - 1 };
    }
    let after = (stage - d - 2) as usize;
    let backward_stages = match plan.backward_tops.len() {
        // Plans made before stages took several levels: one each.
        0 => d as usize,
        n => n,
    };
    match after.cmp(&backward_stages) {
        std::cmp::Ordering::Less => Phase::Backward {
            top: plan
                .backward_tops
                .get(after)
                .copied()
                .unwrap_or(d - 1 - after as u32),
        },
        std::cmp::Ordering::Equal => Phase::Graph,
        std::cmp::Ordering::Greater => Phase::Enumerate,
    }
}

/// The plan before the search: level 0 (the start) on one shard.
pub(super) fn initial_plan(spec: &SlidersSpec) -> SlidersPlan {
    SlidersPlan {
        buckets: vec![1, next_buckets(spec, 1, 1, 0)],
        compact: true,
        ..SlidersPlan::default()
    }
}

/// The shards of the level after next, chosen from the size of the level
/// just found (levels grow by less than half from one to the next), the
/// live workers' `slots` and the least memory of a slot (`slot_memory`, 0
/// when unknown): a shard's bucket fits the smallest slot.
fn next_buckets(spec: &SlidersSpec, level_size: u64, slots: u32, slot_memory: u64) -> u32 {
    let per_bucket = states_per_slot(
        slot_memory,
        SHARD_BYTES_PER_BOARD,
        MIN_BOARDS_PER_BUCKET,
        BOARDS_PER_BUCKET,
    );
    bucket_count(
        level_size.saturating_mul(2),
        per_bucket,
        MIN_BOARDS_PER_BUCKET,
        spec.buckets,
        MAX_BUCKETS,
        slots,
    )
}

/// The shards of the first stage.
pub(super) fn first_stage(plan: &SlidersPlan) -> Vec<Planned<SlidersTask>> {
    forward_level(plan, 0, 1)
}

fn forward_level(plan: &SlidersPlan, level: u32, work: u64) -> Vec<Planned<SlidersTask>> {
    let buckets = plan.buckets[level as usize];
    let buckets_out = plan.buckets[level as usize + 1];
    (0..buckets)
        .map(|bucket| Planned {
            task: SlidersTask::SliderLevel {
                level,
                bucket,
                buckets,
                buckets_out,
                compact: plan.compact,
            },
            work_total: (work / u64::from(buckets)).max(1),
        })
        .collect()
}

/// The stage of graph levels from `top` down: one shard for a run of small
/// levels, else a shard for each bucket of `top`.
fn backward_stage(
    plan: &mut SlidersPlan,
    index: usize,
    top: u32,
    shortest: u32,
) -> Vec<Planned<SlidersTask>> {
    plan.backward_tops.truncate(index);
    // A job planned before stages took several levels took one a stage.
    while plan.backward_tops.len() < index {
        let before = plan.backward_tops.len() as u32;
        plan.backward_tops.push(shortest - 1 - before);
    }
    plan.backward_tops.push(top);
    let size = |level: u32| plan.levels.get(level as usize).copied().unwrap_or(u64::MAX);
    let mut sum = size(top);
    if sum > group_boards() {
        return graph_level(plan, top, shortest);
    }
    let mut bottom = top;
    while bottom > 0 && sum.saturating_add(size(bottom - 1)) <= group_boards() {
        bottom -= 1;
        sum += size(bottom);
    }
    // A level alone keeps its shards a bucket, spread over the slots.
    if bottom == top && plan.buckets[top as usize + 1] > 1 {
        return graph_level(plan, top, shortest);
    }
    let member_buckets = (bottom..=top)
        .rev()
        .map(|level| plan.buckets[level as usize + 1])
        .collect();
    let neighbour_buckets = match top + 1 == shortest {
        true => 0,
        false => plan.buckets[top as usize + 1],
    };
    let buckets_out = match bottom {
        0 => 0,
        _ => plan.buckets[bottom as usize],
    };
    vec![Planned {
        task: SlidersTask::SliderGraphLevels {
            top,
            bottom,
            member_buckets,
            neighbour_buckets,
            buckets_out,
            shortest,
            compact: plan.compact,
        },
        work_total: 1,
    }]
}

/// The most boards of forward levels one graph shard takes together.
#[cfg(not(test))]
fn group_boards() -> u64 {
    GRAPH_GROUP_BOARDS
}

#[cfg(test)]
thread_local! {
    /// Tests group levels of a few boards, to have groups of several buckets.
    pub(super) static GROUP_BOARDS: std::cell::Cell<u64> = const { std::cell::Cell::new(GRAPH_GROUP_BOARDS) };
}

#[cfg(test)]
fn group_boards() -> u64 {
    GROUP_BOARDS.get()
}

fn graph_level(plan: &SlidersPlan, level: u32, shortest: u32) -> Vec<Planned<SlidersTask>> {
    // Level j's members were written for the shards of level j + 1.
    let buckets = plan.buckets[level as usize + 1];
    let buckets_out = if level == 0 {
        0
    } else {
        plan.buckets[level as usize]
    };
    (0..buckets)
        .map(|bucket| Planned {
            task: SlidersTask::SliderGraphLevel {
                level,
                bucket,
                buckets,
                buckets_out,
                shortest,
                compact: plan.compact,
            },
            work_total: 1,
        })
        .collect()
}

pub(super) fn next_stage(
    spec: &SlidersSpec,
    plan: &mut SlidersPlan,
    finished: FinishedStage<'_, SlidersPartial>,
) -> Result<NextStage<SlidersTask>> {
    match phase(plan, finished.stage) {
        Phase::Forward { level } => after_forward(spec, plan, level, finished),
        Phase::Backward { top } => {
            after_backward(spec, plan, finished.stage, top, finished.partials)
        }
        Phase::Graph => after_graph(spec, plan, finished.partials),
        Phase::Enumerate => Ok(NextStage::Finish),
    }
}

fn after_forward(
    spec: &SlidersSpec,
    plan: &mut SlidersPlan,
    level: u32,
    finished: FinishedStage<'_, SlidersPartial>,
) -> Result<NextStage<SlidersTask>> {
    let partials = finished.partials;
    let mut size = Vec::new();
    let mut target_paths = None;
    for partial in partials {
        let SlidersPartial::SliderLevel {
            level: l,
            boards,
            target_paths: paths,
        } = partial
        else {
            return Err(Error::Internal(format!(
                "a shard of forward level {level} reported {partial:?}"
            )));
        };
        if *l != level {
            return Err(Error::Internal(format!(
                "a shard of forward level {level} reported level {l}"
            )));
        }
        add_level_sizes(&mut size, &[*boards], "level")?;
        if let Some(paths) = paths {
            target_paths = Some(paths.clone());
        }
    }
    let size = size.first().copied().unwrap_or(0);
    plan.levels.truncate(level as usize);
    plan.levels.push(size);
    let note = levels_note("level", level as usize, &[size], "boards");
    if let Some(paths) = target_paths {
        plan.target_level = Some(level);
        plan.shortest_length = level;
        plan.sequences = paths;
        plan.boards = plan.levels.iter().sum();
        if level == 0 {
            plan.graph = vec![vec![Boards::new(&spec.board)?.start()]];
            return graph_stage(plan, note);
        }
        let shards = backward_stage(plan, 0, level - 1, level);
        return Ok(NextStage::Shards(
            shards,
            format!("{note}; the target is at distance {level}"),
        ));
    }
    if size == 0 {
        return Err(invalid!(
            "the target board cannot be reached from the start board: the search from the \
             start ends after level {} with {} boards",
            level.saturating_sub(1),
            plan.levels.iter().sum::<u64>()
        ));
    }
    // The next level's shards were fixed when this level was planned; the
    // one after is chosen now. No level is too large: past MAX_BUCKETS
    // shards each takes a larger part, read as streams and spilled past its
    // memory share.
    plan.buckets.truncate(level as usize + 2);
    plan.buckets.push(next_buckets(
        spec,
        size,
        finished.slots,
        finished.slot_memory,
    ));
    let work = size.saturating_mul(2);
    Ok(NextStage::Shards(
        forward_level(plan, level + 1, work),
        note,
    ))
}

fn after_backward(
    spec: &SlidersSpec,
    plan: &mut SlidersPlan,
    stage: u32,
    top: u32,
    partials: &[SlidersPartial],
) -> Result<NextStage<SlidersTask>> {
    let d = plan.target_level.unwrap_or(0);
    // Each level's boards, from `top` down.
    let mut found: Vec<Vec<u64>> = Vec::new();
    for partial in partials {
        match partial {
            SlidersPartial::SliderGraphLevel { level, boards } if *level == top => {
                found.resize_with(found.len().max(1), Vec::new);
                found[0].extend_from_slice(boards);
            }
            SlidersPartial::SliderGraphLevels { top: t, levels }
                if *t == top && partials.len() == 1 && (levels.len() as u32) <= top + 1 =>
            {
                found = levels.clone();
            }
            other => {
                return Err(Error::Internal(format!(
                    "a shard of graph level {top} reported {other:?}"
                )));
            }
        }
    }
    let bottom = (top + 1)
        .checked_sub(found.len() as u32)
        .filter(|_| !found.is_empty())
        .ok_or_else(|| Error::Internal(format!("graph level {top}: no boards reported")))?;
    // The graph's levels are gathered from the target down: index j is
    // level j once all are in.
    if plan.graph.is_empty() {
        plan.graph = vec![Vec::new(); d as usize + 1];
        plan.graph[d as usize] = vec![Boards::new(&spec.board)?.target()];
    }
    for (level, mut boards) in (bottom..=top).rev().zip(found) {
        boards.sort_unstable();
        if boards.is_empty() {
            return Err(Error::Internal(format!(
                "graph level {level} is empty, though the target is at distance {d}"
            )));
        }
        plan.graph[level as usize] = boards;
    }
    let total: u64 = plan.graph.iter().map(|l| l.len() as u64).sum();
    if total > MAX_GRAPH_BOARDS {
        return Err(invalid!(
            "the shortest-path graph has more than {MAX_GRAPH_BOARDS} boards ({total} from \
             level {bottom} to the target), the frontier plan's limit; use --plan prefixes"
        ));
    }
    let note = match bottom == top {
        true => format!(
            "graph level {top}: {} boards",
            plan.graph[top as usize].len()
        ),
        false => format!(
            "graph levels {top} to {bottom}: {} boards",
            plan.graph[bottom as usize..=top as usize]
                .iter()
                .map(|l| l.len())
                .sum::<usize>()
        ),
    };
    if bottom > 0 {
        let index = (stage - d - 1) as usize;
        return Ok(NextStage::Shards(
            backward_stage(plan, index, bottom - 1, d),
            note,
        ));
    }
    graph_stage(plan, note)
}

/// The stage that turns the graph's levels into stage data and prefix tasks.
fn graph_stage(plan: &mut SlidersPlan, note: String) -> Result<NextStage<SlidersTask>> {
    let layers = std::mem::take(&mut plan.graph);
    let boards = layers.iter().map(|l| l.len() as u64).sum::<u64>();
    Ok(NextStage::Shards(
        vec![Planned {
            task: SlidersTask::SliderGraph { layers },
            work_total: boards,
        }],
        note,
    ))
}

fn after_graph(
    spec: &SlidersSpec,
    plan: &mut SlidersPlan,
    partials: &[SlidersPartial],
) -> Result<NextStage<SlidersTask>> {
    let [
        SlidersPartial::SliderGraph {
            prefixes,
            weights,
            sequences,
        },
    ] = partials
    else {
        return Err(Error::Internal(format!(
            "the graph stage reported {partials:?}"
        )));
    };
    if *sequences != plan.sequences {
        return Err(Error::Internal(format!(
            "the forward search counts {} shortest sequences, the graph {sequences}",
            plan.sequences
        )));
    }
    let shards = weighted_shards(spec, prefixes, weights, true)?;
    let note = format!(
        "{} prefix tasks over {} shortest sequences",
        prefixes.len(),
        sequences
    );
    Ok(NextStage::Shards(shards, note))
}

/// The stage outputs a frontier shard reads.
pub(super) fn stage_reads(stage: u32, task: &SlidersTask) -> Vec<StageRead> {
    let read = |stage, bucket| StageRead {
        stage,
        bucket: Some(bucket),
    };
    match *task {
        SlidersTask::SliderLevel { level: 0, .. } => Vec::new(),
        SlidersTask::SliderLevel {
            bucket, buckets, ..
        } => vec![read(stage - 1, bucket), read(stage - 1, buckets + bucket)],
        SlidersTask::SliderGraphLevel {
            level,
            bucket,
            buckets,
            shortest,
            ..
        } => {
            // Forward level j is stage j + 1.
            let members = read(level + 1, buckets + bucket);
            if level + 1 == shortest {
                vec![members]
            } else {
                vec![members, read(stage - 1, bucket)]
            }
        }
        SlidersTask::SliderGraphLevels {
            top,
            ref member_buckets,
            neighbour_buckets,
            ..
        } => {
            let mut reads = Vec::new();
            for (level, &buckets) in (0..=top).rev().zip(member_buckets) {
                reads.extend((buckets..2 * buckets).map(|bucket| read(level + 1, bucket)));
            }
            reads.extend((0..neighbour_buckets).map(|bucket| read(stage - 1, bucket)));
            reads
        }
        SlidersTask::SliderGraph { .. } => Vec::new(),
        SlidersTask::SliderPrefixes { graph: true, .. } => vec![read(stage - 1, 0)],
        SlidersTask::SliderPrefixes { .. } => Vec::new(),
    }
}

/// The forward stages later stages still read, while the job is at `stage`:
/// every forward level before the previous stage during the search, and the
/// levels the graph has not reached yet after it.
pub(super) fn kept_stages(plan: &SlidersPlan, stage: u32) -> Vec<u32> {
    match phase(plan, stage) {
        Phase::Forward { .. } => (1..stage.saturating_sub(1)).collect(),
        Phase::Backward { top } => (1..=top + 1).collect(),
        Phase::Graph | Phase::Enumerate => Vec::new(),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::Control;
    use crate::cache::KernelCache;
    use crate::kind::{Answer, JobKind};
    use crate::sliders::{Sliders, SlidersPlanName};
    use crate::staged_tests::run_stages;
    use tally_kernels::sliders::{self, SliderParams};

    /// Runs a frontier job in this process the way the runner does: stage by
    /// stage, each shard handed what `stage_reads` names, and every older
    /// stage it reads checked to be one the plan keeps. Returns the answer
    /// and the number of stages, of shards of one graph level's bucket and
    /// of shards of several graph levels.
    fn run_frontier(spec: &SlidersSpec) -> Result<(Answer, u32, [u32; 2])> {
        let mut graph_shards = [0, 0];
        let plan = Sliders::prepare(spec, &KernelCache::new(), &Control::new())?;
        let count = |task: &SlidersTask| match task {
            SlidersTask::SliderGraphLevel { .. } => graph_shards[0] += 1,
            SlidersTask::SliderGraphLevels { .. } => graph_shards[1] += 1,
            _ => {}
        };
        let (answer, stages) = run_stages::<Sliders>(spec, plan, SlidersTask::clone, count)?;
        Ok((answer, stages.len() as u32, graph_shards))
    }

    fn frontier_spec(rows: u32, cols: u32, start: &str, target: &str, buckets: u32) -> SlidersSpec {
        SlidersSpec {
            board: SliderParams::new(rows, cols, start, target),
            plan: SlidersPlanName::Frontier,
            buckets,
            ..SlidersSpec::default()
        }
    }

    #[test]
    fn the_frontier_plan_equals_the_direct_search_for_any_bucket_count() {
        let boards: &[(u32, u32, &str, &str)] = &[
            (3, 3, "WRBRBRBRB", "WBRBRBRBR"),
            (3, 3, "WRRRRBBBB", "WBBBBRRRR"),
            (2, 4, "WRRRBBBG", "GBBBRRRW"),
            (3, 3, "WRRGGBBRB", "BRBGGRRBW"),
            (2, 3, "WRRBBG", "WRRBBG"),
            (2, 3, "WRRBBG", "RWRBBG"),
            (4, 4, "WRRRRRRGRRRRRRRB", "BRRRRRRGRRRRRRRW"),
        ];
        for &(rows, cols, start, target) in boards {
            let direct = Sliders::direct(
                &frontier_spec(rows, cols, start, target, 0),
                1,
                &Control::new(),
            )
            .unwrap();
            let d = direct.details["shortest_length"].as_u64().unwrap() as u32;
            // Graph levels grouped never, by a few, and all in one shard.
            for (buckets, group) in [(1, 0), (2, 0), (7, 0), (2, 40), (7, 40), (3, u64::MAX)] {
                GROUP_BOARDS.set(group);
                let spec = frontier_spec(rows, cols, start, target, buckets);
                let (answer, stages, [single, grouped]) = run_frontier(&spec).unwrap();
                GROUP_BOARDS.set(GRAPH_GROUP_BOARDS);
                let what = format!("{start} -> {target} with {buckets} buckets, groups of {group}");
                assert_eq!(answer.line, direct.line, "{what}");
                for field in ["sequences", "checksum_sum", "shortest_length"] {
                    assert_eq!(
                        answer.details[field], direct.details[field],
                        "{what}: {field}"
                    );
                }
                // D + 1 forward levels, D graph levels (some together), the
                // graph, the prefixes.
                let sizes: Vec<u64> = answer.details["levels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap())
                    .collect();
                let graph_levels = &sizes[..d as usize];
                // Levels are grouped when two or more fit together; a level
                // alone keeps a shard a bucket.
                let pairs = graph_levels.windows(2).any(|w| w[0] + w[1] <= group);
                match group {
                    0 => assert_eq!((stages, grouped), (2 * d + 3, 0), "{what}"),
                    _ if d >= 2 && group == u64::MAX => {
                        assert_eq!((stages, single, grouped), (d + 4, 0, 1), "{what}")
                    }
                    _ => {
                        assert_eq!(grouped > 0, pairs, "{what}");
                        assert_eq!(single % buckets, 0, "{what}");
                        assert!(stages <= 2 * d + 3, "{what}");
                    }
                }
                let levels = answer.details["levels"].as_array().unwrap().len();
                assert_eq!(levels, d as usize + 1, "{what}");
            }
        }
    }

    #[test]
    fn the_forward_levels_are_the_breadth_first_layers() {
        // 3 x 3 with four red and four blue tiles: every level size against a
        // plain breadth-first search over board strings.
        let (start, target) = ("WRRRRBBBB", "WBBBBRRRR");
        let (answer, ..) = run_frontier(&frontier_spec(3, 3, start, target, 2)).unwrap();
        let mut seen = std::collections::HashSet::from([start.to_string()]);
        let mut layer = vec![start.to_string()];
        let mut sizes = Vec::new();
        while !layer.is_empty() && !layer.contains(&target.to_string()) {
            sizes.push(layer.len() as u64);
            let mut next = Vec::new();
            for board in &layer {
                for m in ["L", "R", "U", "D"] {
                    if let Ok(b) = sliders::apply_moves(3, 3, board, m)
                        && seen.insert(b.clone())
                    {
                        next.push(b);
                    }
                }
            }
            layer = next;
        }
        sizes.push(layer.len() as u64);
        let levels: Vec<u64> = answer.details["levels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(levels, sizes);
        assert_eq!(answer.details["boards_searched"], sizes.iter().sum::<u64>());
    }

    #[test]
    fn an_unreachable_target_ends_the_search_with_a_clear_error() {
        // On 2 x 2 the three tiles only rotate: half the boards are out of reach.
        let spec = frontier_spec(2, 2, "WRBG", "WBRG", 0);
        let e = run_frontier(&spec).unwrap_err().to_string();
        assert!(e.contains("cannot be reached"), "{e}");
        assert!(e.contains("ends after level"), "{e}");
    }

    #[test]
    fn a_level_of_any_size_is_planned_over_at_most_the_most_shards() {
        let spec = frontier_spec(3, 3, "WRBRBRBRB", "WBRBRBRBR", 0);
        let mut plan = initial_plan(&spec);
        plan.levels = vec![1, 2, 3];
        plan.buckets = vec![1, 1, 1, 1, 1];
        let huge = u64::MAX / 4;
        let partials = [SlidersPartial::SliderLevel {
            level: 3,
            boards: huge,
            target_paths: None,
        }];
        let finished = FinishedStage {
            stage: 4,
            stages_total: 4,
            partials: &partials,
            slots: 1,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        match next_stage(&spec, &mut plan, finished).unwrap() {
            NextStage::Shards(shards, note) => {
                assert_eq!(shards.len(), 1, "the shards fixed when level 3 was planned");
                assert_eq!(note, format!("level 3: {huge} boards"));
            }
            NextStage::Finish => panic!("finished"),
        }
        assert_eq!(
            plan.buckets.last(),
            Some(&MAX_BUCKETS),
            "the level after next"
        );
    }

    /// The level after next is split so that each shard fits the least
    /// memory a live worker's slot has: the default size when no worker
    /// said, more shards for a small slot.
    #[test]
    fn the_level_after_next_is_split_to_fit_the_smallest_slot() {
        let spec = frontier_spec(3, 3, "WRBRBRBRB", "WBRBRBRBR", 0);
        let size = 6_000_000;
        let plan_for = |slot_memory: u64| {
            let mut plan = initial_plan(&spec);
            plan.levels = vec![1, 2, 3];
            plan.buckets = vec![1, 1, 1, 1, 4];
            let partials = [SlidersPartial::SliderLevel {
                level: 3,
                boards: size,
                target_paths: None,
            }];
            let finished = FinishedStage {
                stage: 4,
                stages_total: 4,
                partials: &partials,
                slots: 2,
                slot_memory,
                stage_bytes: 0,
                stage_room: None,
            };
            match next_stage(&spec, &mut plan, finished).unwrap() {
                NextStage::Shards(..) => u64::from(*plan.buckets.last().unwrap()),
                NextStage::Finish => panic!("finished"),
            }
        };
        // The sizing rule itself is tested in `buckets`: here, that the
        // plan passes it the level after next and the smallest slot.
        let default = plan_for(0);
        assert_eq!(default, 2 * size / BOARDS_PER_BUCKET);
        let small = 300 << 20;
        let per_board = states_per_slot(small, SHARD_BYTES_PER_BOARD, 1, u64::MAX);
        assert_eq!(
            plan_for(small),
            (2 * size).div_ceil(per_board).div_ceil(2) * 2
        );
    }

    /// A job planned before graph stages took several levels (no
    /// `backward_tops`) goes on one level a stage, then groups.
    #[test]
    fn a_plan_from_before_grouped_graph_stages_keeps_its_stage_numbers() {
        let spec = frontier_spec(3, 3, "WRBRBRBRB", "WBRBRBRBR", 0);
        let mut plan = initial_plan(&spec);
        let d = 6;
        plan.target_level = Some(d);
        plan.levels = vec![1, 2, 4, 6, 8, 9, 1];
        plan.buckets = vec![1; d as usize + 2];
        plan.graph = vec![vec![]; d as usize + 1];
        plan.graph[d as usize] = vec![7];
        plan.graph[5] = vec![5];
        // Stage d + 3 took graph level d - 2 = 4 alone.
        let stage = d + 3;
        assert!(matches!(phase(&plan, stage), Phase::Backward { top: 4 }));
        let partials = [SlidersPartial::SliderGraphLevel {
            level: 4,
            boards: vec![3],
        }];
        let finished = FinishedStage {
            stage,
            stages_total: stage,
            partials: &partials,
            slots: 1,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        let NextStage::Shards(shards, _) = next_stage(&spec, &mut plan, finished).unwrap() else {
            panic!("finished");
        };
        // Levels 3 to 0 together, and the stages before mapped as they ran.
        assert_eq!(plan.backward_tops, vec![5, 4, 3]);
        assert!(matches!(
            shards[..],
            [Planned {
                task: SlidersTask::SliderGraphLevels {
                    top: 3,
                    bottom: 0,
                    ..
                },
                ..
            }]
        ));
        assert!(matches!(phase(&plan, d + 2), Phase::Backward { top: 5 }));
        assert!(matches!(phase(&plan, d + 4), Phase::Backward { top: 3 }));
        assert!(matches!(phase(&plan, d + 5), Phase::Graph));
        assert!(matches!(phase(&plan, d + 6), Phase::Enumerate));
    }
}
