//! `sliders`: the sum of the checksums of all shortest slider sequences from a
//! start board to a target board. Two plans: `prefixes` (the default), where
//! planning searches the board graph once and the shards enumerate the
//! shortest sequences by prefix, in batches balanced by the number of
//! sequences each prefix holds (every worker process searches the graph once
//! too); and `frontier`, where the search itself is spread over the workers
//! level by level, forward from the start and back from the target, and the
//! enumeration reads the shortest-path graph as stage data (see `frontier`).

mod frontier;
/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Sliders {
    fn corrupt_for_testing(partial: &mut SlidersPartial) {
        match partial {
            SlidersPartial::SliderSums { sums, .. } => {
                sums.checksum_sum = sums.checksum_sum.wrapping_add(1)
            }
            SlidersPartial::SliderLevel { boards, .. } => *boards += 1,
            SlidersPartial::SliderGraphLevel { boards, .. } => boards.clear(),
            SlidersPartial::SliderGraphLevels { levels, .. } => {
                levels.iter_mut().for_each(Vec::clear)
            }
            SlidersPartial::SliderGraph { sequences, .. } => sequences.push('0'),
        }
    }
}

#[cfg(test)]
mod kind_tests;

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, Checkpoint, FaultInjection, FileReader, FinishedStage, JobKind, NextStage, Outcome,
    Planned, ShardRun, SpecArgs, SpecOf, StageRead, no_output,
};
use crate::{Control, Error, Result, invalid};
use tally_kernels::balance::group_by_weight;
use tally_kernels::sliders;
use tally_wire::proto;

pub struct Sliders;

/// Default minimum number of prefix tasks, and of shards.
pub const DEFAULT_PREFIXES: u32 = 64;
/// At most this many shards for the prefixes of one job.
pub const MAX_SHARDS: usize = 256;
/// Largest `work_total` of one shard (sequences). Only a shard that could never
/// finish reaches it; the cap keeps a job's sum of `work_total` far from
/// overflowing.
pub const MAX_SHARD_UNITS: u64 = 1 << 55;
/// Most prefix tasks a job may ask for.
pub const MAX_PREFIX_TASKS: u32 = 100_000;
/// Slider graphs kept per process: they can be large.
const CACHED_SPACES: usize = 4;

pub use frontier::{MAX_BUCKETS, MAX_GRAPH_BOARDS};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SlidersPlanName {
    /// The search while planning, prefix tasks over its graph.
    #[default]
    Prefixes,
    /// The search by levels over the workers, then the prefix tasks.
    Frontier,
}

impl SlidersPlanName {
    pub fn name(self) -> &'static str {
        match self {
            SlidersPlanName::Prefixes => "prefixes",
            SlidersPlanName::Frontier => "frontier",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<SlidersPlanName> {
        match name {
            "" => Ok(SlidersPlanName::default()),
            "prefixes" => Ok(SlidersPlanName::Prefixes),
            "frontier" => Ok(SlidersPlanName::Frontier),
            other => Err(invalid!(
                "unknown sliders plan {other:?}: expected \"prefixes\" or \"frontier\""
            )),
        }
    }
}

// No deny_unknown_fields: serde does not support it together with flatten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidersSpec {
    #[serde(flatten)]
    pub board: sliders::SliderParams,
    /// Minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
    #[serde(default)]
    pub plan: SlidersPlanName,
    /// Frontier plan: shards per level; 0 chooses from each level's size.
    #[serde(default)]
    pub buckets: u32,
}

impl Default for SlidersSpec {
    /// The Project Euler 244 boards with the default plan.
    fn default() -> Self {
        SlidersSpec {
            board: sliders::SliderParams::default(),
            prefixes: 0,
            plan: SlidersPlanName::default(),
            buckets: 0,
        }
    }
}

impl SpecOf for SlidersSpec {
    type Kind = Sliders;
}

#[derive(clap::Args, Debug)]
pub struct SlidersArgs {
    /// Start board, row by row (W empty; R, B, G tiles). Default: Project Euler 244.
    #[arg(long)]
    pub start: Option<String>,
    /// Target board, row by row.
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long, default_value_t = 4)]
    pub rows: u32,
    #[arg(long, default_value_t = 4)]
    pub cols: u32,
    /// Checksum base.
    #[arg(long, default_value_t = sliders::DEFAULT_BASE)]
    pub base: u64,
    /// Checksum modulus.
    #[arg(long, default_value_t = sliders::DEFAULT_MODULUS)]
    pub checksum_modulus: u64,
    /// Minimum number of prefix tasks (default 64).
    #[arg(long, default_value_t = 0)]
    pub prefixes: u32,
    /// Shard plan: prefixes (the default: the search while planning, then
    /// prefix tasks) or frontier (the search itself by levels over the
    /// workers, then prefix tasks over the graph it found).
    #[arg(long, default_value = "prefixes")]
    pub plan: String,
    /// Frontier plan: shards per level (default: from each level's size).
    #[arg(long, value_name = "N")]
    pub buckets: Option<u32>,
}

impl SpecArgs<SlidersSpec> for SlidersArgs {
    fn into_spec(self, _files: &dyn FileReader) -> Result<SlidersSpec> {
        let defaults = sliders::SliderParams::default();
        let (start, target) = match (self.start, self.target) {
            (Some(a), Some(b)) => (a, b),
            (None, None) if self.rows == defaults.rows && self.cols == defaults.cols => {
                (defaults.start, defaults.target)
            }
            (None, None) => {
                return Err(invalid!(
                    "the default boards are 4 x 4; give --start and --target for a {} x {} board",
                    self.rows,
                    self.cols
                ));
            }
            _ => return Err(invalid!("give both --start and --target, or neither")),
        };
        Ok(SlidersSpec {
            board: sliders::SliderParams {
                rows: self.rows,
                cols: self.cols,
                start,
                target,
                base: self.base,
                modulus: self.checksum_modulus,
            },
            prefixes: self.prefixes,
            plan: SlidersPlanName::parse(&self.plan)?,
            buckets: self.buckets.unwrap_or(0),
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidersPlan {
    /// The prefix tasks; copied into the shards, then dropped from the record.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// The weight of each prefix (the number of shortest sequences extending
    /// it), by which the prefixes are grouped into shards; decimal, for u128.
    #[serde(default)]
    pub prefix_weights: Vec<String>,
    #[serde(default)]
    pub shortest_length: u32,
    /// Boards reachable (prefixes plan), or found up to the target's level
    /// (frontier plan).
    #[serde(default)]
    pub boards: u64,
    /// Frontier plan: the size of each level found so far.
    #[serde(default)]
    pub levels: Vec<u64>,
    /// Frontier plan: the shards of each level (`buckets[k]` for level `k`),
    /// one level ahead of the levels found.
    #[serde(default)]
    pub buckets: Vec<u32>,
    /// Frontier plan: the target's level once found (`D`).
    #[serde(default)]
    pub target_level: Option<u32>,
    /// Frontier plan: the number of shortest sequences counted by the forward
    /// search (decimal, for u128).
    #[serde(default)]
    pub sequences: String,
    /// Frontier plan: the levels of the shortest-path graph found so far, as
    /// dense board indices, until the graph stage takes them.
    #[serde(default)]
    pub graph: Vec<Vec<u64>>,
    /// Frontier plan: the highest graph level of each backward stage so far
    /// (a stage takes one level, or several small ones); empty in plans
    /// made before stages took several, whose stage `D + 1 + i` is graph
    /// level `D - i`.
    #[serde(default)]
    pub backward_tops: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SlidersTask {
    /// A batch of prefixes, enumerated one after the other. `weighted`: the
    /// work units are shortest sequences (the shard's `work_total` is the sum of
    /// the prefixes' weights); false in shards planned before weights existed,
    /// whose units are prefixes.
    SliderPrefixes {
        prefixes: Vec<String>,
        #[serde(default)]
        weighted: bool,
        /// Frontier plan: the graph is read from the previous stage's output
        /// instead of searched for.
        #[serde(default)]
        graph: bool,
    },
    /// Frontier plan: bucket `bucket` of the `buckets` of forward level
    /// `level`, written for the `buckets_out` shards of the next.
    SliderLevel {
        level: u32,
        bucket: u32,
        buckets: u32,
        buckets_out: u32,
    },
    /// Frontier plan: bucket `bucket` of the `buckets` of level `level` of the
    /// shortest-path graph, whose neighbours go to the `buckets_out` shards of
    /// the level before; the target is at distance `shortest`.
    SliderGraphLevel {
        level: u32,
        bucket: u32,
        buckets: u32,
        buckets_out: u32,
        shortest: u32,
    },
    /// Frontier plan: graph levels `top` down to `bottom` in one shard, which
    /// reads every bucket of each level's members (`member_buckets[i]`
    /// buckets for level `top - i`) and every one of the `neighbour_buckets`
    /// buckets the stage before sent (none next to the target): small levels,
    /// where a stage each would cost more than their work. The last level's
    /// neighbours go to the `buckets_out` shards of the level below it.
    SliderGraphLevels {
        top: u32,
        bottom: u32,
        member_buckets: Vec<u32>,
        neighbour_buckets: u32,
        buckets_out: u32,
        shortest: u32,
    },
    /// Frontier plan: the graph's levels (dense board indices), to become
    /// stage data and prefix tasks.
    SliderGraph { layers: Vec<Vec<u64>> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlidersPartial {
    /// Exact sums over the prefixes enumerated so far.
    SliderSums {
        prefixes_done: u32,
        sums: sliders::PathSums,
    },
    /// A forward level's boards in one bucket, and the number of shortest
    /// sequences (decimal) if the target is among them.
    SliderLevel {
        level: u32,
        boards: u64,
        #[serde(default)]
        target_paths: Option<String>,
    },
    /// A graph level's boards in one bucket (dense indices).
    SliderGraphLevel { level: u32, boards: Vec<u64> },
    /// Several graph levels' boards (dense indices), level `top` first.
    SliderGraphLevels { top: u32, levels: Vec<Vec<u64>> },
    /// The prefix tasks over the graph, with their weights, and the number of
    /// shortest sequences (decimal).
    SliderGraph {
        prefixes: Vec<String>,
        weights: Vec<String>,
        sequences: String,
    },
}

/// What the shards of a frontier stage read, decoded once per worker.
#[derive(Debug)]
pub enum SlidersInput {
    Levels(sliders::levels::LevelInput),
    /// A forward level's two inputs (every sender's forward bucket, every
    /// sender's members) kept encoded, in memory or in files the worker wrote
    /// as they arrived: read as streams when they are large next to the
    /// shard's memory share.
    Forward(Box<[frontier::Framed; 2]>),
    /// The shortest-path graph, for the prefix tasks.
    Graph(Box<sliders::SliderSpace>),
}

#[derive(Serialize, Deserialize)]
struct SliderCheckpoint {
    prefixes_done: u32,
    sums: sliders::PathSums,
}

/// Number of shards the prefixes of a job are grouped into (fewer if there are
/// fewer prefixes): the `prefixes` asked for (default [`DEFAULT_PREFIXES`]), at
/// most [`MAX_SHARDS`].
pub fn shard_count(spec: &SlidersSpec) -> usize {
    min_prefixes(spec).clamp(1, MAX_SHARDS)
}

fn min_prefixes(spec: &SlidersSpec) -> usize {
    if spec.prefixes == 0 {
        DEFAULT_PREFIXES as usize
    } else {
        spec.prefixes as usize
    }
}

/// Work units (sequences) as a counter value, saturating.
fn units(sequences: u128) -> u64 {
    u64::try_from(sequences).unwrap_or(u64::MAX)
}

fn space(
    spec: &SlidersSpec,
    cache: &KernelCache,
    control: &Control,
) -> Result<std::sync::Arc<sliders::SliderSpace>> {
    let key = serde_json::to_string(&spec.board).expect("params serialise");
    cache.get_or_build(&key, CACHED_SPACES, || {
        sliders::SliderSpace::build(&spec.board, control)
    })
}

impl JobKind for Sliders {
    type Spec = SlidersSpec;
    type Args = SlidersArgs;
    type Plan = SlidersPlan;
    type Task = SlidersTask;
    type Partial = SlidersPartial;
    type StageInput = SlidersInput;

    const NAME: &'static str = "sliders";
    const ABOUT: &'static str = "Sum of the checksums of all shortest slider sequences.";
    const EXAMPLES: &'static str = "  tally run sliders\n  tally run sliders --rows 3 --cols 3 --start WRBRBRBRB --target WBRBRBRBR";

    fn spec_to_proto(s: &SlidersSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Sliders(proto::SlidersSpec {
            rows: s.board.rows,
            cols: s.board.cols,
            start: s.board.start.clone(),
            target: s.board.target.clone(),
            checksum_base: s.board.base,
            checksum_modulus: s.board.modulus,
            prefixes: s.prefixes,
            plan: s.plan.name().to_string(),
            buckets: s.buckets,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<SlidersSpec>> {
        let proto::job_spec::Kind::Sliders(s) = kind else {
            return None;
        };
        Some(spec_from_message(s))
    }

    fn validate(s: &SlidersSpec) -> Result<()> {
        // On the wire 0 stands for the default base, so a spec file's base 0
        // would reach the coordinator as 243.
        if s.board.base == 0 {
            return Err(invalid!(
                "checksum base must be at least 1, got 0 (0 selects the default, {}, over gRPC)",
                sliders::DEFAULT_BASE
            ));
        }
        sliders::validate(&s.board)?;
        if s.prefixes > MAX_PREFIX_TASKS {
            return Err(invalid!(
                "prefixes must be at most {MAX_PREFIX_TASKS}, got {}",
                s.prefixes
            ));
        }
        match s.plan {
            SlidersPlanName::Prefixes if s.buckets != 0 => Err(invalid!(
                "buckets are for the frontier plan; add --plan frontier or drop --buckets"
            )),
            _ if s.buckets > MAX_BUCKETS => Err(invalid!(
                "buckets must be between 1 and {MAX_BUCKETS}, got {}",
                s.buckets
            )),
            _ => Ok(()),
        }
    }

    fn describe(s: &SlidersSpec) -> String {
        format!(
            "sliders {}x{} {} -> {} ({})",
            s.board.rows,
            s.board.cols,
            s.board.start,
            s.board.target,
            s.plan.name()
        )
    }

    fn small_example() -> Option<SlidersSpec> {
        Some(SlidersSpec {
            board: sliders::SliderParams {
                rows: 3,
                cols: 3,
                start: "WRBRBRBRB".into(),
                target: "WBRBRBRBR".into(),
                base: 243,
                modulus: 100_000_007,
            },
            ..SlidersSpec::default()
        })
    }

    fn stages_known(spec: &SlidersSpec) -> bool {
        spec.plan != SlidersPlanName::Frontier
    }

    fn prepare(spec: &SlidersSpec, cache: &KernelCache, control: &Control) -> Result<SlidersPlan> {
        if spec.plan == SlidersPlanName::Frontier {
            // The search is the job's own stages: nothing to do here.
            return Ok(frontier::initial_plan(spec));
        }
        let space = space(spec, cache, control)?;
        let tasks = space.balanced_prefix_tasks(min_prefixes(spec), shard_count(spec));
        let (prefixes, weights): (Vec<String>, Vec<u128>) = tasks.into_iter().unzip();
        Ok(SlidersPlan {
            prefixes,
            prefix_weights: weights.iter().map(u128::to_string).collect(),
            shortest_length: space.shortest_length(),
            boards: space.reachable_boards() as u64,
            ..SlidersPlan::default()
        })
    }

    fn plan_stage(
        spec: &SlidersSpec,
        plan: &SlidersPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<SlidersTask>>> {
        if spec.plan == SlidersPlanName::Frontier {
            return Ok(frontier::first_stage(plan));
        }
        if plan.prefix_weights.len() != plan.prefixes.len() {
            return Ok(batches_by_count(plan));
        }
        weighted_shards(spec, &plan.prefixes, &plan.prefix_weights, false)
    }

    fn trim_plan(plan: &mut SlidersPlan) {
        plan.prefixes.clear();
        plan.prefix_weights.clear();
    }

    fn next_stage(
        spec: &SlidersSpec,
        plan: &mut SlidersPlan,
        finished: FinishedStage<'_, SlidersPartial>,
    ) -> Result<NextStage<SlidersTask>> {
        match spec.plan {
            SlidersPlanName::Prefixes => Ok(NextStage::Finish),
            SlidersPlanName::Frontier => frontier::next_stage(spec, plan, finished),
        }
    }

    fn stage_reads(_spec: &SlidersSpec, stage: u32, task: &SlidersTask) -> Vec<StageRead> {
        frontier::stage_reads(stage, task)
    }

    fn decode_stage_inputs(spec: &SlidersSpec, parts: &[&[u8]]) -> Result<SlidersInput> {
        frontier::decode_inputs(spec, parts)
    }

    const STREAMS_STAGE_INPUT: bool = true;

    fn decode_stored_inputs(
        spec: &SlidersSpec,
        parts: Vec<std::sync::Arc<dyn crate::Stored>>,
    ) -> Result<SlidersInput> {
        frontier::decode_stored_inputs(spec, parts)
    }

    fn kept_stages(spec: &SlidersSpec, plan: &SlidersPlan, stage: u32) -> Vec<u32> {
        match spec.plan {
            SlidersPlanName::Prefixes => Vec::new(),
            SlidersPlanName::Frontier => frontier::kept_stages(plan, stage),
        }
    }

    fn execute(
        spec: &SlidersSpec,
        task: &SlidersTask,
        run: &mut ShardRun<'_, SlidersInput, SlidersPartial>,
    ) -> Result<Outcome<SlidersPartial>> {
        match (task, run.input) {
            (
                SlidersTask::SliderPrefixes {
                    prefixes,
                    weighted,
                    graph: false,
                },
                _,
            ) => {
                // The search is not the shard's work units: count it apart.
                let space = space(spec, run.cache, &run.control.with_own_counter())?;
                enumerate_prefixes(&space, prefixes, *weighted, run)
            }
            (
                SlidersTask::SliderPrefixes {
                    prefixes,
                    weighted,
                    graph: true,
                },
                Some(SlidersInput::Graph(space)),
            ) => enumerate_prefixes(space, prefixes, *weighted, run),
            (SlidersTask::SliderPrefixes { .. }, _) => Err(invalid!(
                "a slider prefix shard of the frontier plan needs the graph as stage data"
            )),
            (task, input) => {
                let input = match input {
                    Some(SlidersInput::Graph(_)) => {
                        return Err(invalid!("a level shard was handed the graph"));
                    }
                    other => other,
                };
                frontier::execute(spec, task, input, run.control, run.room.as_mut())
            }
        }
    }

    fn check_result(
        _spec: &SlidersSpec,
        _plan: &SlidersPlan,
        task: &SlidersTask,
        partial: &SlidersPartial,
        output: &[u8],
    ) -> Result<()> {
        let (
            SlidersTask::SliderPrefixes { prefixes, .. },
            SlidersPartial::SliderSums { prefixes_done, .. },
        ) = (task, partial)
        else {
            return frontier::check_result(task, partial, output);
        };
        if *prefixes_done as usize != prefixes.len() {
            return Err(invalid!(
                "slider result covers {prefixes_done} of {} prefixes",
                prefixes.len()
            ));
        }
        no_output(output)
    }

    fn finish(
        spec: &SlidersSpec,
        plan: &SlidersPlan,
        partials: Vec<SlidersPartial>,
    ) -> Result<Answer> {
        let mut total = sliders::PathSums::default();
        for partial in partials {
            let SlidersPartial::SliderSums { sums, .. } = partial else {
                return Err(Error::Internal(format!(
                    "the last slider stage reported {partial:?}"
                )));
            };
            total.merge(sums);
        }
        if spec.plan == SlidersPlanName::Frontier && total.count.to_string() != plan.sequences {
            return Err(Error::Internal(format!(
                "the enumeration found {} shortest sequences, the forward search counted {}",
                total.count, plan.sequences
            )));
        }
        let mut details = serde_json::json!({
            "kind": "sliders",
            "rows": spec.board.rows,
            "cols": spec.board.cols,
            "start": spec.board.start,
            "target": spec.board.target,
            "plan": spec.plan.name(),
            "shortest_length": plan.shortest_length,
            "sequences": total.count.to_string(),
            "checksum_sum": total.checksum_sum.to_string(),
        });
        // The prefixes plan searched every reachable board; the frontier
        // plan stops at the target's level.
        let boards = match spec.plan {
            SlidersPlanName::Prefixes => "boards",
            SlidersPlanName::Frontier => "boards_searched",
        };
        details[boards] = plan.boards.into();
        if spec.plan == SlidersPlanName::Frontier {
            details["levels"] = plan.levels.clone().into();
        }
        Ok(Answer {
            line: total.checksum_sum.to_string(),
            details,
        })
    }

    fn direct(spec: &SlidersSpec, _threads: usize, control: &Control) -> Result<Answer> {
        let space = sliders::SliderSpace::build(&spec.board, control)?;
        let sums = space.enumerate("", control)?;
        let plan = SlidersPlan {
            shortest_length: space.shortest_length(),
            boards: space.reachable_boards() as u64,
            sequences: sums.count.to_string(),
            ..SlidersPlan::default()
        };
        let partial = SlidersPartial::SliderSums {
            prefixes_done: 1,
            sums,
        };
        Self::finish(spec, &plan, vec![partial])
    }
}

fn spec_from_message(s: &proto::SlidersSpec) -> Result<SlidersSpec> {
    let defaults = sliders::SliderParams::default();
    let or = |value: u64, default: u64| if value == 0 { default } else { value };
    let (start, target) = match (s.start.is_empty(), s.target.is_empty()) {
        (true, true) => (defaults.start.clone(), defaults.target.clone()),
        (false, false) => (s.start.clone(), s.target.clone()),
        _ => return Err(invalid!("give both a start and a target board, or neither")),
    };
    Ok(SlidersSpec {
        board: sliders::SliderParams {
            rows: or(s.rows.into(), defaults.rows.into()) as u32,
            cols: or(s.cols.into(), defaults.cols.into()) as u32,
            start,
            target,
            base: or(s.checksum_base, defaults.base),
            modulus: or(s.checksum_modulus, defaults.modulus),
        },
        prefixes: s.prefixes,
        plan: SlidersPlanName::parse(&s.plan)?,
        buckets: s.buckets,
    })
}

/// Prefix tasks grouped into [`shard_count`] shards of equal weight (the
/// sequences they extend, decimal in `weights`); `graph`: the shards read
/// the graph as stage data (frontier plan).
fn weighted_shards(
    spec: &SlidersSpec,
    prefixes: &[String],
    weights: &[String],
    graph: bool,
) -> Result<Vec<Planned<SlidersTask>>> {
    let weights = weights
        .iter()
        .map(|w| w.parse::<u128>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("malformed prefix weight: {e}")))?;
    Ok(group_by_weight(&weights, shard_count(spec))
        .into_iter()
        .map(|group| {
            let weight = group
                .iter()
                .fold(0u128, |acc, &i| acc.saturating_add(weights[i]));
            Planned {
                task: SlidersTask::SliderPrefixes {
                    prefixes: group.iter().map(|&i| prefixes[i].clone()).collect(),
                    weighted: true,
                    graph,
                },
                work_total: units(weight).min(MAX_SHARD_UNITS),
            }
        })
        .collect())
}

/// A plan stored before prefixes had weights: batches by count.
fn batches_by_count(plan: &SlidersPlan) -> Vec<Planned<SlidersTask>> {
    let batch = plan.prefixes.len().div_ceil(MAX_SHARDS).max(1);
    plan.prefixes
        .chunks(batch)
        .map(|chunk| Planned {
            task: SlidersTask::SliderPrefixes {
                prefixes: chunk.to_vec(),
                weighted: false,
                graph: false,
            },
            work_total: chunk.len() as u64,
        })
        .collect()
}

/// Enumerates the prefixes of a shard one after the other, with a checkpoint
/// between two prefixes. Weighted shards count sequences: the kernel adds the
/// sequences it finds to the control as it goes, and a finished prefix has
/// added exactly its weight, which is checked. Unweighted (older) shards count
/// prefixes, with the kernel's units on a counter of its own.
fn enumerate_prefixes(
    space: &sliders::SliderSpace,
    prefixes: &[String],
    weighted: bool,
    run: &mut ShardRun<'_, SlidersInput, SlidersPartial>,
) -> Result<Outcome<SlidersPartial>> {
    let (mut done, mut sums) = resume_point(&run.checkpoint_bytes()?, prefixes.len())?;
    let units_of = |prefix: &str| -> Result<u64> {
        if weighted {
            space.prefix_weight(prefix).map(units)
        } else {
            Ok(1)
        }
    };
    let own_counter = run.control.with_own_counter();
    let control = run.control;
    let kernel_control = if weighted { control } else { &own_counter };
    // A resumed shard's progress continues from its checkpoint.
    let mut work = prefixes[..done]
        .iter()
        .try_fold(0u64, |w, p| Ok::<_, Error>(w.saturating_add(units_of(p)?)))?;
    control.add_work(work);
    let mut last_checkpoint = std::time::Instant::now();
    while done < prefixes.len() {
        let prefix = &prefixes[done];
        let part = space.enumerate(prefix, kernel_control)?;
        let weight = units_of(prefix)?;
        if weighted && units(part.count) != weight {
            return Err(Error::Internal(format!(
                "prefix {prefix:?} has {} shortest sequences, but the graph counts {weight}",
                part.count
            )));
        }
        if !weighted {
            control.add_work(1);
        }
        sums.merge(part);
        work = work.saturating_add(weight);
        done += 1;
        let due = last_checkpoint.elapsed() >= run.checkpoint_every;
        if done < prefixes.len() && (due || run.control.checkpoint_asked()) {
            last_checkpoint = std::time::Instant::now();
            run.checkpoint(checkpoint(done, sums, work));
        }
    }
    Ok(Outcome {
        output: crate::StageOutput::default(),
        partial: SlidersPartial::SliderSums {
            prefixes_done: done as u32,
            sums,
        },
        work_done: work,
    })
}

/// A checkpoint after the first `done` prefixes of a shard.
fn checkpoint(done: usize, sums: sliders::PathSums, work: u64) -> Checkpoint<SlidersPartial> {
    let prefixes_done = done as u32;
    let state = SliderCheckpoint {
        prefixes_done,
        sums,
    };
    Checkpoint {
        state: serde_json::to_vec(&state)
            .expect("checkpoint serialises")
            .into(),
        partial: Some(SlidersPartial::SliderSums {
            prefixes_done,
            sums,
        }),
        work_done: work,
    }
}

/// Where a shard resumes: the prefixes done and their sums, from the checkpoint.
fn resume_point(checkpoint: &[u8], prefixes: usize) -> Result<(usize, sliders::PathSums)> {
    if checkpoint.is_empty() {
        return Ok((0, sliders::PathSums::default()));
    }
    let c: SliderCheckpoint = serde_json::from_slice(checkpoint)
        .map_err(|e| invalid!("malformed slider checkpoint: {e}"))?;
    if c.prefixes_done as usize > prefixes {
        return Err(invalid!("slider checkpoint is past the end of its shard"));
    }
    Ok((c.prefixes_done as usize, c.sums))
}
