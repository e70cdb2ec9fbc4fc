//! `hex`: the number of Hex games on an N x N board, modulo a prime or exactly.
//! Two plans: `points` (independent shards, each evaluating the full crossing
//! polynomial at a few points; the coordinator solves for the counts) and
//! `cell-step` (state ranges per cell step, a barrier per step; the frontier
//! vector passes through the coordinator at every step). The points plan's
//! graph is built by every worker in its memory, or once a job by one shard
//! as stage data that the point shards read a group at a time (`staged`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, FaultInjection, FileReader, JobKind, Outcome, Planned, ResourceEstimate, ShardRun,
    SpecArgs, SpecOf, StageRead, WorkerRoom, no_output, single_input,
};
use crate::local::run_locally;
use crate::{Control, Result, Stored, invalid};
use tally_kernels::hex;
use tally_wire::proto;

mod execute;
mod finish;
mod resources;
mod staged;

pub use resources::estimate;

use execute::{StepShard, execute_points, execute_step};
use finish::{check_crossing_sums, check_evaluations, finish_cell_step, finish_points};

pub struct Hex;

/// Most shards per cell step a job may ask for.
pub const MAX_SHARDS_PER_STEP: u32 = 1_024;
/// Points per points shard: one vectorised pass of the scalar sweep.
pub const POINTS_PER_SHARD: usize = hex::POINTS_PER_PASS;
/// State graphs kept per process (one per side).
const CACHED_GRAPHS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HexPlan {
    /// Independent shards, each evaluating the full crossing polynomial at a few
    /// points; the coordinator solves for the counts. Nothing is exchanged
    /// between shards, so it scales with workers.
    #[default]
    Points,
    /// State ranges per cell step, a barrier per step; the frontier vector passes
    /// through the coordinator at every step.
    CellStep,
}

/// Where the points plan's shards find the state graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HexGraphPlace {
    /// Not chosen: the coordinator chooses from its workers' memory at
    /// submission (a job stored before the choice existed: `Worker`).
    #[default]
    Auto,
    /// Every worker builds the graph and holds it in memory.
    Worker,
    /// One shard builds it and writes it as stage data; the point shards
    /// read it a group at a time (`staged`).
    Stage,
}

impl HexGraphPlace {
    pub fn name(self) -> &'static str {
        match self {
            HexGraphPlace::Auto => "",
            HexGraphPlace::Worker => "worker",
            HexGraphPlace::Stage => "stage",
        }
    }

    /// The empty name leaves the choice to the coordinator.
    pub fn parse(name: &str) -> Result<HexGraphPlace> {
        match name {
            "" => Ok(HexGraphPlace::Auto),
            "worker" => Ok(HexGraphPlace::Worker),
            "stage" => Ok(HexGraphPlace::Stage),
            other => Err(invalid!(
                "unknown hex graph place {other:?}: expected \"worker\" or \"stage\""
            )),
        }
    }
}

impl HexSpec {
    /// Whether the points plan's graph is stage data (else each worker's).
    fn staged(&self) -> bool {
        self.plan == HexPlan::Points && self.graph == HexGraphPlace::Stage
    }
}

impl HexPlan {
    pub fn name(self) -> &'static str {
        match self {
            HexPlan::Points => "points",
            HexPlan::CellStep => "cell-step",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<HexPlan> {
        match name {
            "" => Ok(HexPlan::default()),
            "points" => Ok(HexPlan::Points),
            "cell-step" => Ok(HexPlan::CellStep),
            other => Err(invalid!(
                "unknown hex plan {other:?}: expected \"points\" or \"cell-step\""
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HexSpec {
    pub side: u32,
    #[serde(default = "default_modulus")]
    pub modulus: u32,
    #[serde(default)]
    pub plan: HexPlan,
    /// Cell-step plan: shards per cell step; 0 chooses from the number of states.
    #[serde(default)]
    pub shards_per_step: u32,
    /// Points plan: the exact count (several primes and the CRT) instead of a
    /// residue.
    #[serde(default)]
    pub exact: bool,
    /// Points plan: evaluation points per shard (a power of two up to
    /// [`POINTS_PER_SHARD`]);
    /// 0 leaves it to the coordinator, which takes the most that fit its
    /// workers' memory.
    #[serde(default)]
    pub points_per_shard: u32,
    /// Points plan: where its shards find the graph.
    #[serde(default)]
    pub graph: HexGraphPlace,
    /// Points plan, the graph as stage data: the shards that build it, each
    /// a run of its groups, none holding the whole graph (`hex::parts`); 0
    /// leaves the number to the coordinator, which sets it at submission. A
    /// staged job stored before parts existed keeps 0: one shard builds the
    /// whole graph.
    #[serde(default)]
    pub graph_parts: u32,
}

fn default_modulus() -> u32 {
    hex::DEFAULT_MODULUS
}

impl SpecOf for HexSpec {
    type Kind = Hex;
}

#[derive(clap::Args, Debug)]
pub struct HexArgs {
    /// Board side, 1 to 20 (the cell-step plan: 1 to 16).
    #[arg(long)]
    pub side: u32,
    /// Prime modulus with side^2 < P < 2^31 (2147483648); not with --exact,
    /// which chooses its own primes.
    #[arg(
        long,
        default_value_t = hex::DEFAULT_MODULUS,
        value_parser = parse_modulus,
        conflicts_with = "exact"
    )]
    pub modulus: u32,
    /// Shard plan: points (independent shards; the default) or cell-step.
    #[arg(long, default_value = "points")]
    pub plan: String,
    /// Exact count (several primes and the CRT; points plan) instead of a residue.
    #[arg(long)]
    pub exact: bool,
    /// Shards per cell step (default: from the number of frontier states).
    #[arg(long, default_value_t = 0)]
    pub shards_per_step: u32,
    /// Points plan: evaluation points per shard, 16, 8, 4, 2 or 1 (default:
    /// the most that fit the workers' memory budgets; fewer points, less
    /// memory a shard).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::builder::TypedValueParser::try_map(
            clap::builder::PossibleValuesParser::new(["16", "8", "4", "2", "1"]),
            |points| points.parse::<u32>()
        )
    )]
    pub points_per_shard: Option<u32>,
    /// Points plan: where the shards find the state graph: "worker" (each
    /// worker builds it and holds it in memory) or "stage" (built once a job
    /// by one shard, stage data the others read a group at a time; a
    /// fraction of the memory a shard, at some CPU). Default: stage where
    /// the workers' memory budgets hold no graph, or where it gives a shard
    /// more points; else worker.
    #[arg(long, value_name = "PLACE", value_parser = ["worker", "stage"])]
    pub graph: Option<String>,
    /// Points plan, the graph as stage data: the shards that build it, each
    /// a part of it (default: one for about 256 MiB of graph).
    #[arg(long, value_name = "N")]
    pub graph_parts: Option<u32>,
}

impl SpecArgs<HexSpec> for HexArgs {
    fn into_spec(self, _files: &dyn FileReader) -> Result<HexSpec> {
        Ok(HexSpec {
            side: self.side,
            modulus: self.modulus,
            plan: HexPlan::parse(&self.plan)?,
            shards_per_step: self.shards_per_step,
            exact: self.exact,
            points_per_shard: self.points_per_shard.unwrap_or(0),
            graph: HexGraphPlace::parse(self.graph.as_deref().unwrap_or(""))?,
            graph_parts: self.graph_parts.unwrap_or(0),
        })
    }
}

/// A `--modulus` below 2^31 (the kernel's limit), with that limit in the
/// refusal of any larger number, however large.
fn parse_modulus(text: &str) -> std::result::Result<u32, String> {
    let too_large = || "must be a prime below 2^31 = 2147483648".to_string();
    match text.parse::<u64>() {
        Ok(modulus) => u32::try_from(modulus)
            .ok()
            .filter(|&m| m < 1 << 31)
            .ok_or_else(too_large),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Err(too_large()),
        Err(e) => Err(e.to_string()),
    }
}

/// Facts about a job computed at submission.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HexFacts {
    /// Number of frontier states.
    #[serde(default)]
    pub states: u64,
    /// Coefficients per state.
    #[serde(default)]
    pub stride: u64,
    /// Cell-step plan: the number of stages.
    #[serde(default)]
    pub steps: u32,
    /// Points plan: the primes (one, or several for exact counts) and the
    /// evaluation points used with each.
    #[serde(default)]
    pub primes: Vec<u32>,
    #[serde(default)]
    pub points: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum HexTask {
    /// Target states `[start, end)` of cell step `step` (0 is the top row). On
    /// the last stage the shard returns the sum of its polynomials instead of
    /// the polynomials themselves.
    HexStep {
        step: u32,
        start: u32,
        end: u32,
        last: bool,
    },
    /// The full crossing polynomial at a few points, modulo one prime.
    HexPoints { modulus: u32, points: Vec<u32> },
    /// The state graph of `side`, built and written as the stage's output
    /// (the points plan with its graph as stage data, a job stored before
    /// graphs were built in parts).
    HexGraph { side: u32 },
    /// Part `part` of `parts` of the state graph of `side`, built and
    /// written as the shard's output (the points plan with its graph as
    /// stage data).
    HexGraphPart { side: u32, part: u32, parts: u32 },
}

/// What a hex shard reads: the previous cell step's polynomials, or the
/// graph a shard of the job built.
pub enum HexInput {
    Polynomials(Vec<u32>),
    Graph(hex::SpilledGraph),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HexPartial {
    /// Nothing to merge: the shard's output is stage data.
    None,
    /// Sum of the crossing polynomials over a range of states, mod p.
    HexCrossings { residues: Vec<u32> },
    /// (x, P(x) mod p) for the shard's points, P the full crossing polynomial.
    HexEvaluations {
        modulus: u32,
        evaluations: Vec<(u32, u32)>,
    },
}

/// Default number of shards per cell step for a graph of `states` states.
pub fn default_shards_per_step(states: u64) -> u32 {
    states.div_ceil(4096).clamp(1, 8) as u32
}

fn stride(side: u32) -> u64 {
    (side * side / 2 + 1) as u64
}

/// The state graph of `side`, built once per process with all cores: the other
/// The cores a graph is built with: all of the process's (a build is
/// needed before any shard of the worker can go on).
pub(super) fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// shards of the worker wait for it.
pub(super) fn graph(cache: &KernelCache, side: u32) -> Result<Arc<hex::HexGraph>> {
    cache.get_or_build(&side.to_string(), CACHED_GRAPHS, || {
        hex::HexGraph::build_parallel(side, all_cores())
    })
}

impl JobKind for Hex {
    type Spec = HexSpec;
    type Args = HexArgs;
    type Plan = HexFacts;
    type Task = HexTask;
    type Partial = HexPartial;
    type StageInput = HexInput;

    const NAME: &'static str = "hex";
    const ABOUT: &'static str = "Number of Hex games on a side x side board, modulo a prime.";
    const EXAMPLES: &'static str = "  tally run hex --side 11\n  tally run hex --side 9 --exact\n  tally run hex --side 8 --plan cell-step --workers 2";

    fn spec_to_proto(h: &HexSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Hex(proto::HexSpec {
            side: h.side,
            modulus: h.modulus,
            plan: h.plan.name().to_string(),
            shards_per_step: h.shards_per_step,
            exact: h.exact,
            points_per_shard: h.points_per_shard,
            graph: h.graph.name().to_string(),
            graph_parts: h.graph_parts,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<HexSpec>> {
        let proto::job_spec::Kind::Hex(h) = kind else {
            return None;
        };
        let graph = HexGraphPlace::parse(&h.graph);
        Some(HexPlan::parse(&h.plan).and_then(|plan| {
            Ok(HexSpec {
                side: h.side,
                modulus: if h.modulus == 0 {
                    hex::DEFAULT_MODULUS
                } else {
                    h.modulus
                },
                plan,
                shards_per_step: h.shards_per_step,
                exact: h.exact,
                points_per_shard: h.points_per_shard,
                graph: graph?,
                graph_parts: h.graph_parts,
            })
        }))
    }

    fn validate(h: &HexSpec) -> Result<()> {
        if h.exact && h.modulus != hex::DEFAULT_MODULUS {
            return Err(invalid!(
                "an exact hex count takes no modulus (it chooses its own primes), got {}",
                h.modulus
            ));
        }
        hex::validate(h.side, h.modulus)?;
        if h.shards_per_step > MAX_SHARDS_PER_STEP {
            return Err(invalid!(
                "shards per step must be at most {MAX_SHARDS_PER_STEP}, got {}",
                h.shards_per_step
            ));
        }
        if h.plan == HexPlan::CellStep && h.side > hex::NARROW_SIDES {
            return Err(invalid!(
                "the cell-step plan supports sides up to {}, got {}: its frontier vectors alone would need {}; use the points plan",
                hex::NARROW_SIDES,
                h.side,
                crate::kind::format_bytes(estimate(h).coordinator_memory_bytes)
            ));
        }
        // 0 leaves the choice to the coordinator. A pass runs a power of two
        // of lanes: any other count would pay for lanes it leaves idle.
        let points = h.points_per_shard;
        if points != 0 && !(points.is_power_of_two() && points as usize <= POINTS_PER_SHARD) {
            return Err(invalid!(
                "points per shard must be 16, 8, 4, 2 or 1, got {points}"
            ));
        }
        if h.points_per_shard != 0 && h.plan != HexPlan::Points {
            return Err(invalid!(
                "points per shard are for the points plan (--plan points)"
            ));
        }
        if h.graph != HexGraphPlace::Auto && h.plan != HexPlan::Points {
            return Err(invalid!(
                "where the graph is (--graph) is for the points plan (--plan points)"
            ));
        }
        if h.graph_parts != 0 {
            if h.plan != HexPlan::Points || h.graph == HexGraphPlace::Worker {
                return Err(invalid!(
                    "graph parts (--graph-parts) are for the points plan with its graph as stage data (--graph stage)"
                ));
            }
            let most = hex::max_graph_parts(h.side);
            if h.graph_parts > most {
                return Err(invalid!(
                    "the graph of side {} is built in at most {most} parts, got {}",
                    h.side,
                    h.graph_parts
                ));
            }
        }
        if h.exact && h.plan != HexPlan::Points {
            return Err(invalid!(
                "exact hex counts need the points plan (--plan points)"
            ));
        }
        // The points plan evaluates at x = 2, 3, ... below the modulus: a tiny
        // prime may not have enough of them to solve and check.
        if h.plan == HexPlan::Points && !h.exact {
            let layout = hex::points_layout(h.side, h.modulus);
            if layout.points.len() <= layout.unknowns {
                return Err(invalid!(
                    "modulus {} is too small for the points plan of side {}: it has {} evaluation points, the plan needs {}; use a larger prime or the cell-step plan",
                    h.modulus,
                    h.side,
                    layout.points.len(),
                    layout.unknowns + 1
                ));
            }
        }
        Ok(())
    }

    fn describe(h: &HexSpec) -> String {
        let plan = match h.staged() {
            true => "points, graph as stage data",
            false => h.plan.name(),
        };
        if h.exact {
            format!("hex side {} exact ({plan})", h.side)
        } else {
            format!("hex side {} mod {} ({plan})", h.side, h.modulus)
        }
    }

    fn small_example() -> Option<HexSpec> {
        Some(HexSpec {
            side: 5,
            modulus: hex::DEFAULT_MODULUS,
            plan: HexPlan::Points,
            shards_per_step: 0,
            exact: false,
            points_per_shard: 0,
            graph: HexGraphPlace::Auto,
            graph_parts: 0,
        })
    }

    fn estimate(h: &HexSpec) -> Option<ResourceEstimate> {
        Some(estimate(h))
    }

    fn stage_estimate(h: &HexSpec, stage: u32) -> Option<ResourceEstimate> {
        Some(match h.staged() {
            true => resources::staged_estimate(h, stage),
            false => estimate(h),
        })
    }

    fn fit_to_budget(h: &HexSpec, worker: WorkerRoom, output_limit: Option<u64>) -> HexSpec {
        resources::fitted(h, worker, output_limit)
    }

    fn prepare(h: &HexSpec, cache: &KernelCache, _control: &Control) -> Result<HexFacts> {
        if h.plan == HexPlan::Points {
            // No graph here: each worker builds its own, the coordinator only solves.
            let primes = if h.exact {
                hex::exact_primes(h.side)
            } else {
                vec![h.modulus]
            };
            let smallest = *primes.iter().min().expect("at least one prime");
            return Ok(HexFacts {
                states: hex::known_state_count(h.side).unwrap_or(0),
                stride: stride(h.side),
                steps: 0,
                points: hex::points_layout(h.side, smallest).points,
                primes,
            });
        }
        let graph = graph(cache, h.side)?;
        Ok(HexFacts {
            states: graph.num_states() as u64,
            stride: graph.stride() as u64,
            steps: graph.num_steps() as u32,
            primes: Vec::new(),
            points: Vec::new(),
        })
    }

    fn stages(h: &HexSpec, facts: &HexFacts) -> u32 {
        match h.plan {
            HexPlan::Points if h.staged() => staged::POINTS_STAGE,
            HexPlan::Points => 1,
            HexPlan::CellStep => facts.steps.max(1),
        }
    }

    fn plan_stage(h: &HexSpec, facts: &HexFacts, stage: u32) -> Result<Vec<Planned<HexTask>>> {
        match h.plan {
            HexPlan::Points if h.staged() && stage < staged::POINTS_STAGE => {
                Ok(staged::build_shards(h))
            }
            HexPlan::Points => Ok(points_shards(facts, points_per_shard(h))),
            HexPlan::CellStep => Ok(step_shards(h, facts, stage)),
        }
    }

    /// A cell step reads the previous step's merged vector; a point shard
    /// of a staged graph, the graph.
    fn stage_reads(_h: &HexSpec, stage: u32, _task: &HexTask) -> Vec<StageRead> {
        if stage < 2 {
            return Vec::new();
        }
        vec![StageRead {
            stage: stage - 1,
            bucket: None,
        }]
    }

    fn decode_stage_inputs(h: &HexSpec, parts: &[&[u8]]) -> Result<HexInput> {
        if h.staged() {
            let parts = parts
                .iter()
                .map(|p| Arc::new(p.to_vec()) as Arc<dyn Stored>);
            return staged::open_graph(h, parts.collect());
        }
        let bytes = single_input(Self::NAME, parts)?;
        let polynomials = hex::decode_polynomials(bytes, stride(h.side) as usize, h.modulus)?;
        Ok(HexInput::Polynomials(polynomials))
    }

    /// A staged graph goes to a file whole: a point shard reads it a group
    /// at a time, and its worker should hold no graph.
    fn stage_input_memory(h: &HexSpec, _share: u64) -> Option<u64> {
        h.staged().then_some(0)
    }

    /// A staged graph is opened where it is; polynomials are read whole.
    fn decode_stored_inputs(h: &HexSpec, parts: Vec<Arc<dyn Stored>>) -> Result<HexInput> {
        match h.staged() {
            true => staged::open_graph(h, parts),
            false => crate::kind::decode_in_memory::<Self>(h, &parts),
        }
    }

    fn execute(
        h: &HexSpec,
        task: &HexTask,
        run: &mut ShardRun<'_, HexInput, HexPartial>,
    ) -> Result<Outcome<HexPartial>> {
        match task {
            HexTask::HexStep {
                step,
                start,
                end,
                last,
            } => {
                let graph = graph(run.cache, h.side)?;
                let shard = StepShard {
                    step: *step,
                    states: *start as usize..*end as usize,
                    last: *last,
                };
                let input = match run.input {
                    Some(HexInput::Polynomials(words)) => Some(words.as_slice()),
                    Some(HexInput::Graph(_)) => {
                        return Err(invalid!("a hex cell step reads polynomials, not a graph"));
                    }
                    None => None,
                };
                execute_step(&graph, h.modulus, &shard, input, run.control)
            }
            HexTask::HexPoints { modulus, points } => execute_points(h, *modulus, points, run),
            HexTask::HexGraph { side } => staged::build_graph(h, *side, run),
            &HexTask::HexGraphPart { side, part, parts } => {
                staged::build_part(h, (side, part, parts), run)
            }
        }
    }

    fn check_result(
        h: &HexSpec,
        facts: &HexFacts,
        task: &HexTask,
        partial: &HexPartial,
        output: &[u8],
    ) -> Result<()> {
        match (task, partial) {
            (HexTask::HexStep { last: true, .. }, HexPartial::HexCrossings { residues }) => {
                check_crossing_sums(h, facts, residues)?;
                no_output(output)
            }
            (HexTask::HexStep { last: true, .. }, _) => {
                Err(invalid!("the last hex stage must return crossing sums"))
            }
            (HexTask::HexStep { start, end, .. }, HexPartial::None) => {
                // Checked in place: the scheduler lock is held here.
                let polynomials = hex::check_polynomials(output, facts.stride as usize, h.modulus)?;
                if polynomials != (end - start) as usize {
                    return Err(invalid!(
                        "hex step output holds {polynomials} polynomials, expected {}",
                        end - start
                    ));
                }
                Ok(())
            }
            (HexTask::HexStep { .. }, _) => {
                Err(invalid!("a hex step returns polynomials, not a partial"))
            }
            (
                HexTask::HexPoints { modulus, points },
                HexPartial::HexEvaluations {
                    modulus: m,
                    evaluations,
                },
            ) => {
                check_evaluations(*modulus, points, *m, evaluations)?;
                no_output(output)
            }
            (HexTask::HexPoints { .. }, _) => {
                Err(invalid!("the result does not match the hex shard"))
            }
            // The graph is checked whole where a point shard opens it, and a
            // wrong one gives values the solver's spare points refuse.
            (HexTask::HexGraph { .. } | HexTask::HexGraphPart { .. }, HexPartial::None) => Ok(()),
            (HexTask::HexGraph { .. } | HexTask::HexGraphPart { .. }, _) => Err(invalid!(
                "a hex graph shard returns its graph, not a partial"
            )),
        }
    }

    fn finish(h: &HexSpec, facts: &HexFacts, partials: Vec<HexPartial>) -> Result<Answer> {
        match h.plan {
            HexPlan::Points => finish_points(h, facts, partials),
            HexPlan::CellStep => finish_cell_step(h, facts, partials),
        }
    }

    fn direct(h: &HexSpec, threads: usize, control: &Control) -> Result<Answer> {
        if h.exact {
            // Exact counts have no single-sweep driver: evaluate every point
            // here, on a graph in memory (one stage).
            let in_memory = HexSpec {
                graph: HexGraphPlace::Worker,
                ..h.clone()
            };
            return run_locally::<Hex>(&in_memory, threads, control);
        }
        let answer = hex::count_games(h.side, h.modulus, threads, control)?;
        let facts = HexFacts {
            states: answer.states as u64,
            stride: answer.crossings.len() as u64,
            ..HexFacts::default()
        };
        let sweep = HexSpec {
            plan: HexPlan::CellStep,
            ..h.clone()
        };
        let partial = HexPartial::HexCrossings {
            residues: answer.crossings,
        };
        finish_cell_step(&sweep, &facts, vec![partial])
    }
}

/// The points a shard of the points plan evaluates: the spec's, or the most.
fn points_per_shard(h: &HexSpec) -> usize {
    match h.points_per_shard {
        0 => POINTS_PER_SHARD,
        n => n as usize,
    }
}

fn points_shards(facts: &HexFacts, per_shard: usize) -> Vec<Planned<HexTask>> {
    let mut shards = Vec::new();
    for &modulus in &facts.primes {
        for points in facts.points.chunks(per_shard) {
            shards.push(Planned {
                task: HexTask::HexPoints {
                    modulus,
                    points: points.to_vec(),
                },
                work_total: points.len() as u64,
            });
        }
    }
    shards
}

fn step_shards(h: &HexSpec, facts: &HexFacts, stage: u32) -> Vec<Planned<HexTask>> {
    let states = facts.states;
    let wanted = if h.shards_per_step == 0 {
        default_shards_per_step(states)
    } else {
        h.shards_per_step
    };
    let count = (wanted as u64).clamp(1, states.max(1));
    // Side 1 has no cell steps: its single stage reduces the top row (step 0).
    let steps = h.side * h.side.saturating_sub(1);
    let step = if steps == 0 { 0 } else { stage };
    let last = stage == steps.max(1);
    (0..count)
        .map(|i| {
            let start = (states * i / count) as u32;
            let end = (states * (i + 1) / count) as u32;
            Planned {
                task: HexTask::HexStep {
                    step,
                    start,
                    end,
                    last,
                },
                work_total: (end - start) as u64,
            }
        })
        .collect()
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Hex {
    fn corrupt_for_testing(partial: &mut HexPartial) {
        match partial {
            HexPartial::None => {}
            HexPartial::HexCrossings { residues } => {
                if let Some(r) = residues.first_mut() {
                    *r = r.wrapping_add(1) % hex::DEFAULT_MODULUS;
                }
            }
            HexPartial::HexEvaluations {
                modulus,
                evaluations,
            } => {
                if let Some((_, v)) = evaluations.first_mut() {
                    *v = (*v + 1) % *modulus;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::execute::pass_checkpoint_interval;
    use super::*;
    use crate::Error;
    use crate::kind::Checkpoint;
    use crate::spec::{JobSpec, ValidSpec};

    /// A worker of `budget` bytes and two slots.
    fn two_slots(budget: u64) -> WorkerRoom {
        WorkerRoom { budget, slots: 2 }
    }

    fn points(side: u32, points_per_shard: u32) -> HexSpec {
        HexSpec {
            side,
            modulus: hex::DEFAULT_MODULUS,
            plan: HexPlan::Points,
            shards_per_step: 0,
            exact: false,
            points_per_shard,
            graph: HexGraphPlace::Auto,
            graph_parts: 0,
        }
    }

    /// The points a shard get as the budget shrinks (the graph in the
    /// workers): the most such that the worker holds a shard in each of its
    /// slots, then one point (the least memory there is); a spec that chose
    /// its points keeps them.
    #[test]
    fn points_per_shard_follow_the_memory_budget() {
        let side = 17;
        let need = |p: u32| estimate(&points(side, p));
        let in_workers = HexSpec {
            graph: HexGraphPlace::Worker,
            ..points(side, 0)
        };
        let fitted_with = |budget: u64, slots: u64| {
            Hex::fit_to_budget(&in_workers, WorkerRoom { budget, slots }, None).points_per_shard
        };
        let fitted = |budget: u64| fitted_with(budget, 2);
        assert_eq!(fitted(u64::MAX), 16);
        for p in [16, 8, 4, 2] {
            for slots in [1, 2, 3] {
                let all = need(p).worker_bytes_with(slots);
                assert_eq!(fitted_with(all, slots), p, "budget {all}, {slots} slots");
                assert!(fitted_with(all - 1, slots) < p, "budget {}", all - 1);
            }
        }
        // The budget of two shards of 8 points holds one of 16.
        assert_eq!(fitted_with(need(8).worker_bytes_with(2), 1), 16);
        assert_eq!(fitted(need(2).worker_memory_bytes() - 1), 1);
        assert_eq!(fitted(0), 1);
        // Fewer points, less memory a shard; the graph is the same.
        assert!(need(1).shard_bytes < need(16).shard_bytes);
        assert_eq!(need(1).worker_base_bytes, need(16).worker_base_bytes);
        assert_eq!(
            Hex::fit_to_budget(&points(side, 3), two_slots(0), None).points_per_shard,
            3
        );
        let cell = HexSpec {
            plan: HexPlan::CellStep,
            ..points(9, 0)
        };
        assert_eq!(Hex::fit_to_budget(&cell, two_slots(0), None), cell);
    }

    /// A job whose smallest shard fits no worker is refused with the
    /// numbers (those of the place that needs less), unless forced; the
    /// graph as stage data, built in parts that need little, is chosen where
    /// it gives a shard more points; one that fits is planned with the
    /// points chosen for it, in shards of that many points.
    #[test]
    fn a_job_whose_smallest_shard_fits_no_worker_is_refused_with_the_numbers() {
        let spec = ValidSpec::new(JobSpec::new(points(17, 0))).unwrap();
        let parts = hex::graph_part_count(17);
        assert!(parts > 1);
        let staged_one = HexSpec {
            graph_parts: parts,
            ..staged(points(17, 1))
        };
        let staged_need = estimate(&staged_one).smallest_worker_bytes();
        let in_memory = estimate(&points(17, 1)).smallest_worker_bytes();
        // A point shard over the staged graph holds no graph; a part of the
        // build holds a group.
        assert!(4 * staged_need < in_memory, "{staged_need} {in_memory}");
        let build_part = resources::staged_estimate(&staged_one, 1).smallest_worker_bytes();
        assert!(build_part < staged_need, "{build_part} {staged_need}");
        // A staged job stored before parts builds the whole graph in one
        // shard, above the graph with a shard of one point.
        let whole_build = estimate(&staged(points(17, 1))).smallest_worker_bytes();
        assert!(in_memory < whole_build, "{whole_build} {in_memory}");
        let refused = spec
            .fitted_to(two_slots(staged_need - 1), "the largest worker (h)", None)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("the largest worker (h) has"), "{refused}");
        assert!(
            refused.contains(&crate::kind::format_bytes(staged_need)),
            "{refused}"
        );
        assert!(refused.contains("or --force"), "{refused}");
        let fitted_with = |spec: &ValidSpec, budget: u64, limit: Option<u64>| {
            let params = spec
                .fitted_to(two_slots(budget), "w", limit)
                .unwrap()
                .spec()
                .params
                .clone();
            (
                params["graph"].as_str().unwrap().to_string(),
                params["points_per_shard"].as_u64().unwrap(),
                params["graph_parts"].as_u64().unwrap(),
            )
        };
        let fitted = |budget: u64| fitted_with(&spec, budget, None);
        // Where no worker holds the graph, the staged graph in its parts.
        assert_eq!(fitted(staged_need), ("stage".into(), 1, u64::from(parts)));
        // Where it would hold the graph with a shard of one point, the
        // staged graph gives a shard more points.
        let (place, points_fitted, _) = fitted(in_memory);
        assert_eq!(place, "stage");
        assert!(points_fitted > 1, "{points_fitted}");
        // With room for two shards of 16 points beside the graph, the graph
        // stays in the workers.
        let roomy = estimate(&points(17, 16)).worker_memory_bytes();
        assert_eq!(fitted(roomy), ("worker".into(), 16, 0));
        // Chosen by the user, the place and the parts stay; parts asked for
        // mean the staged graph.
        let chosen = ValidSpec::new(JobSpec::new(staged(points(17, 0)))).unwrap();
        assert_eq!(fitted_with(&chosen, u64::MAX, None).0, "stage");
        let two = ValidSpec::new(JobSpec::new(HexSpec {
            graph_parts: 2,
            ..points(17, 0)
        }))
        .unwrap();
        assert_eq!(fitted_with(&two, u64::MAX, None), ("stage".into(), 16, 2));
        let mut forced = JobSpec::new(points(17, 0));
        forced.options.force = true;
        let forced = ValidSpec::new(forced).unwrap();
        assert!(forced.fitted_to(two_slots(0), "w", None).is_ok());

        // A coordinator that takes outputs smaller than a part of the staged
        // graph: the graph stays in the workers where they hold it, and a
        // job that asks for it staged is refused, forced or not, saying what
        // to do.
        let part_bytes = estimate(&staged_one).largest_output_bytes;
        assert!(part_bytes > 0);
        let limit = Some(part_bytes - 1);
        assert_eq!(fitted_with(&spec, in_memory, limit).0, "worker");
        assert!(
            spec.fitted_to(two_slots(in_memory - 1), "w", limit)
                .is_err()
        );
        let mut forced_staged = JobSpec::new(staged_one.clone());
        forced_staged.options.force = true;
        let refused = ValidSpec::new(forced_staged)
            .unwrap()
            .fitted_to(two_slots(u64::MAX), "w", limit)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("give the coordinator a --stage-store"),
            "{refused}"
        );
        assert!(
            chosen
                .fitted_to(two_slots(u64::MAX), "w", Some(part_bytes))
                .is_ok()
        );
        // Asked for in one part, the graph is one output of all its bytes.
        let one = HexSpec {
            graph_parts: 1,
            ..points(17, 0)
        };
        assert!(estimate(&staged(one)).largest_output_bytes > 4 * part_bytes);

        let small = points(7, 3);
        let facts = HexFacts {
            primes: vec![hex::DEFAULT_MODULUS],
            points: (2..12).collect(),
            ..HexFacts::default()
        };
        let shards = points_shards(&facts, points_per_shard(&small));
        let sizes: Vec<u64> = shards.iter().map(|s| s.work_total).collect();
        assert_eq!(sizes, [3, 3, 3, 1]);
    }

    #[test]
    fn points_per_shard_out_of_range_or_with_the_cell_step_plan_are_refused() {
        let over = Hex::validate(&points(9, 17)).unwrap_err().to_string();
        assert!(over.contains("16, 8, 4, 2 or 1, got 17"), "{over}");
        let cell = HexSpec {
            plan: HexPlan::CellStep,
            ..points(9, 4)
        };
        let refused = Hex::validate(&cell).unwrap_err().to_string();
        assert!(refused.contains("points plan"), "{refused}");
        Hex::validate(&points(9, 16)).unwrap();
    }

    type Evaluations = Vec<(u32, u32)>;

    /// What one points shard run here did.
    struct PointsRun {
        values: Result<Evaluations>,
        /// Its checkpoints' states and work done.
        checkpoints: Vec<Vec<u8>>,
        checkpoint_work: Vec<u64>,
        /// The work the shard counted on its control.
        work: u64,
    }

    /// Runs one points shard here with `checkpoint`, a checkpoint after every
    /// round.
    fn run_points(h: &HexSpec, points: &[u32], checkpoint: &[u8]) -> PointsRun {
        let cache = KernelCache::new();
        let control = Control::new();
        let mut checkpoints = Vec::new();
        let mut checkpoint_work = Vec::new();
        let mut on_checkpoint = |c: Checkpoint<HexPartial>| {
            assert!(c.partial.is_none());
            checkpoints.push(c.state.into_bytes().unwrap());
            checkpoint_work.push(c.work_done);
        };
        let input = h.staged().then(|| staged_graph(h));
        let mut run = ShardRun {
            input: input.as_ref(),
            checkpoint: &checkpoint.to_vec(),
            cache: &cache,
            control: &control,
            checkpoint_every: std::time::Duration::ZERO,
            on_checkpoint: &mut on_checkpoint,
            room: None,
        };
        let task = HexTask::HexPoints {
            modulus: h.modulus,
            points: points.to_vec(),
        };
        let values = Hex::execute(h, &task, &mut run).map(|o| match o.partial {
            HexPartial::HexEvaluations { evaluations, .. } => evaluations,
            other => panic!("not evaluations: {other:?}"),
        });
        PointsRun {
            values,
            checkpoints,
            checkpoint_work,
            work: control.work_done(),
        }
    }

    /// The graph of a staged job as its point shards read it: built by the
    /// job's build shard, its output opened as a worker opens stage input.
    fn staged_graph(h: &HexSpec) -> HexInput {
        let cache = KernelCache::new();
        let control = Control::new();
        let mut run = ShardRun {
            input: None,
            checkpoint: &crate::kind::NO_CHECKPOINT,
            cache: &cache,
            control: &control,
            checkpoint_every: std::time::Duration::ZERO,
            on_checkpoint: &mut |_| {},
            room: None,
        };
        let builds = staged::build_shards(h);
        assert_eq!(builds.len(), h.graph_parts.max(1) as usize);
        let mut outputs = Vec::new();
        for build in &builds {
            let before = control.work_done();
            let built = Hex::execute(h, &build.task, &mut run).unwrap();
            // Its work, as planned, counted as the build went.
            assert_eq!(built.work_done, build.work_total);
            assert_eq!(control.work_done() - before, build.work_total);
            let crate::StageOutput::Stored(graph) = built.output else {
                panic!("the graph is handed on as stored bytes")
            };
            outputs.push(graph);
        }
        Hex::decode_stored_inputs(h, outputs).unwrap()
    }

    /// The graph as stage data built by one shard (a job stored before
    /// parts).
    fn staged(h: HexSpec) -> HexSpec {
        HexSpec {
            graph: HexGraphPlace::Stage,
            ..h
        }
    }

    /// The graph as stage data built in three parts.
    fn in_parts(h: HexSpec) -> HexSpec {
        HexSpec {
            graph: HexGraphPlace::Stage,
            graph_parts: 3,
            ..h
        }
    }

    fn rounds_done(checkpoint: &[u8]) -> u32 {
        u32::from_le_bytes(checkpoint[4..8].try_into().unwrap())
    }

    /// A points shard checkpoints between blocks of cell steps; resumed from
    /// any of its checkpoints it goes on from there (its next checkpoint is
    /// one round later) to the evaluations of an uninterrupted pass. Its work
    /// (its points) is counted as the rounds go, from where it resumed. The
    /// same with the graph as stage data, whose shards make the same
    /// checkpoints.
    #[test]
    fn a_points_shard_resumes_from_any_of_its_checkpoints() {
        let graph = hex::HexGraph::build(7).unwrap();
        let in_memory = run_points(&points(7, 5), &[3, 5, 7, 11, 13], &[]).checkpoints;
        for h in [points(7, 5), staged(points(7, 5))] {
            resumes_from_any_of_its_checkpoints(&h, &graph);
            let checkpoints = run_points(&h, &[3, 5, 7, 11, 13], &[]).checkpoints;
            assert!(checkpoints == in_memory, "the same checkpoints");
        }
        // A graph built in parts orders each pattern's states otherwise:
        // its own checkpoints, as many, resumed alike.
        let h = in_parts(points(7, 5));
        resumes_from_any_of_its_checkpoints(&h, &graph);
        let checkpoints = run_points(&h, &[3, 5, 7, 11, 13], &[]).checkpoints;
        assert_eq!(checkpoints.len(), in_memory.len());
    }

    fn resumes_from_any_of_its_checkpoints(h: &HexSpec, graph: &hex::HexGraph) {
        let h = h.clone();
        let xs = [3, 5, 7, 11, 13];
        let expected: Vec<(u32, u32)> = xs
            .iter()
            .copied()
            .zip(graph.evaluate_points(&xs, h.modulus))
            .collect();
        let whole = run_points(&h, &xs, &[]);
        assert_eq!(whole.values.unwrap(), expected);
        assert_eq!(whole.work, xs.len() as u64);
        let work = &whole.checkpoint_work;
        assert!(
            work.windows(2).all(|w| w[0] <= w[1])
                && work[0] < work[work.len() - 1]
                && work[work.len() - 1] < xs.len() as u64,
            "the work grows with the rounds, below the points: {work:?}"
        );
        let rounds = graph.pass_rounds();
        assert_eq!(
            whole.checkpoints.len(),
            rounds - 1,
            "one checkpoint between rounds"
        );
        for (k, checkpoint) in whole.checkpoints.iter().enumerate() {
            assert_eq!(rounds_done(checkpoint) as usize, k + 1);
            let resumed = run_points(&h, &xs, checkpoint);
            assert_eq!(
                resumed.values.unwrap(),
                expected,
                "resumed after {} rounds",
                k + 1
            );
            assert_eq!(resumed.work, xs.len() as u64);
            assert_eq!(
                resumed.checkpoints.len(),
                rounds - 2 - k,
                "the resumed pass starts again"
            );
            if let Some(next) = resumed.checkpoints.first() {
                assert_eq!(rounds_done(next) as usize, k + 2);
                assert_eq!(resumed.checkpoint_work[0], whole.checkpoint_work[k + 1]);
            }
        }
    }

    /// Given a spill (as a worker gives one), a points shard writes each
    /// checkpoint there from its vector instead of copying it in memory: a
    /// run the spill releases at once, alive while the worker holds it, with
    /// the bytes of the checkpoint in memory of the same round; and it makes
    /// no new one while the worker still holds the last (one on disk at a
    /// time, none queued behind a slow upload).
    #[test]
    fn a_points_shard_with_a_spill_checkpoints_there_one_at_a_time() {
        let xs = [3, 5, 7, 11, 13];
        for h in [points(7, 5), staged(points(7, 5)), in_parts(points(7, 5))] {
            let in_memory = run_points(&h, &xs, &[]).checkpoints;
            for held in [false, true] {
                let (cache, control) = (KernelCache::new(), Control::new());
                let mut spill = crate::MemorySpill::default();
                let (mut kept, mut made) = (Vec::new(), Vec::new());
                let mut on_checkpoint = |c: Checkpoint<HexPartial>| {
                    let crate::StageOutput::Stored(stored) = c.state else {
                        panic!("a checkpoint in memory")
                    };
                    made.push(stored.read_range(0..stored.len()).unwrap());
                    if held {
                        kept.push(stored);
                    }
                };
                let input = h.staged().then(|| staged_graph(&h));
                let mut run = ShardRun {
                    input: input.as_ref(),
                    checkpoint: &crate::kind::NO_CHECKPOINT,
                    cache: &cache,
                    control: &control,
                    checkpoint_every: std::time::Duration::ZERO,
                    on_checkpoint: &mut on_checkpoint,
                    room: Some(crate::Room {
                        memory: u64::MAX,
                        spill: &mut spill,
                    }),
                };
                let task = HexTask::HexPoints {
                    modulus: h.modulus,
                    points: xs.to_vec(),
                };
                Hex::execute(&h, &task, &mut run).unwrap();
                assert!(!made.is_empty());
                if held {
                    assert_eq!(made.len(), 1, "none while the worker holds the last");
                }
                for checkpoint in &made {
                    let round = rounds_done(checkpoint) as usize;
                    assert!(*checkpoint == in_memory[round - 1], "after {round} rounds");
                }
                for run in 0..made.len() as u32 {
                    let mut byte = [0u8];
                    assert!(
                        crate::Spill::read_at(&spill, run, 0, &mut byte).is_err(),
                        "run {run} released by the spill"
                    );
                }
                drop(kept);
            }
        }
    }

    /// A checkpoint that is not one of the shard's (other lanes, cut short,
    /// a residue out of range, another format) is refused, not resumed.
    #[test]
    fn a_points_checkpoint_of_another_shard_or_damaged_is_refused() {
        let h = points(6, 5);
        let xs = [3, 5, 7, 11, 13];
        let checkpoints = run_points(&h, &xs, &[]).checkpoints;
        let good = &checkpoints[checkpoints.len() / 2];
        let narrower = run_points(&h, &xs[..3], &[]).checkpoints;
        let mut out_of_range = good.clone();
        let last = out_of_range.len() - 4;
        out_of_range[last..].copy_from_slice(&h.modulus.to_le_bytes());
        let mut other_format = good.clone();
        other_format[..4].copy_from_slice(b"HXP0");
        let mut too_many_rounds = good.clone();
        too_many_rounds[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let bad: [(&str, &[u8]); 5] = [
            ("other lanes", &narrower[0]),
            ("cut short", &good[..good.len() - 4]),
            ("out of range", &out_of_range),
            ("other format", &other_format),
            ("too many rounds", &too_many_rounds),
        ];
        for (what, checkpoint) in bad {
            let refused = run_points(&h, &xs, checkpoint).values.expect_err(what);
            assert!(
                matches!(refused, Error::InvalidArgument(_)),
                "{what}: {refused}"
            );
        }
        run_points(&h, &xs, good).values.unwrap();
    }

    /// Large vectors checkpoint less often, in proportion, but at least once
    /// a minute for each gigabyte.
    #[test]
    fn points_checkpoints_are_spaced_by_their_size() {
        let every = std::time::Duration::from_secs(3);
        assert_eq!(pass_checkpoint_interval(every, 1 << 20), every);
        assert_eq!(
            pass_checkpoint_interval(every, 40 << 20),
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            pass_checkpoint_interval(every, 864 << 20),
            std::time::Duration::from_secs(60)
        );
        // Past a gigabyte, a minute for each: side 18 at 16 points, side
        // 20 at 8.
        let minutes =
            |bytes: f64| pass_checkpoint_interval(every, bytes as usize).as_secs_f64() / 60.0;
        assert!((minutes(2.61e9) - 2.61).abs() < 1e-6);
        assert!((minutes(10.5e9) - 10.5).abs() < 1e-6);
        // Never more often than `every`.
        let slow = std::time::Duration::from_secs(600);
        assert_eq!(pass_checkpoint_interval(slow, 2 << 30), slow);
    }
}
