//! `pegs`: the number of peg solitaire solutions (exact). Two plans:
//! `frontier` (the default), the forward count by levels (a level per number
//! of jumps made), each large level split into buckets by a hash of the
//! position, one shard per bucket (see `pegs::levels`), thin levels run
//! together on one shard; and `prefixes`, the distinct positions after a few
//! jumps (with the number of jump sequences reaching each) counted in batches,
//! each shard over its own layers.

#[cfg(test)]
mod form_tests;
mod frontier;
mod input;
mod output;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use frontier::PegSide;
pub use input::PegInput;

use crate::cache::KernelCache;
use crate::kind::{
    Answer, FaultInjection, FileReader, FinishedStage, JobKind, NextStage, Outcome, Planned,
    ShardRun, SpecArgs, SpecOf, StageRead, no_output, single_input, single_stored,
};
use crate::{Control, Error, Result, Stored, invalid};
use tally_kernels::buckets::bucket_count;
use tally_kernels::pegs;
use tally_wire::proto;

pub struct Pegs;

/// Default minimum number of prefix tasks. Tasks of one shard share their
/// layers, so a shard holds several tasks and the shards stay few.
pub const DEFAULT_PREFIXES: u32 = 256;
/// At most this many shards for one job.
pub const MAX_SHARDS: usize = 32;
/// Most prefix tasks a job may ask for.
pub const MAX_PREFIX_TASKS: u32 = 100_000;

/// Most shards of one level of the frontier plan.
pub const MAX_BUCKETS: u32 = 1024;

/// Positions of a level per shard of the next level when the frontier plan
/// chooses the bucket count: so many that a level takes one round of the live
/// slots, unless it passes this many positions a slot. Fewer, larger shards
/// send less: a position is sent once by every shard holding one of its
/// parents, so a level's stage data grows with its shards (on the French
/// board about 1.9 copies of each position with 2 shards, 8 and more with a
/// shard per 500,000 positions as before), and a shard past its memory share
/// spills its tables to sorted runs and merges them with sequential reads.
/// The French board from hole 6 took 38 minutes in 2 shards a level, 59 in a
/// shard per 500,000 positions (docs/benchmarks.md).
const POSITIONS_PER_BUCKET: u64 = 1 << 28;
/// The most of a level shard's input held in memory as it arrives; the rest
/// goes to a file in the spill directory (see `JobKind::stage_input_memory`).
const INPUT_IN_MEMORY: u64 = 256 << 20;
/// Positions a shard alone in its stage computes level after level before
/// it hands a level on in buckets (one per so many): a search's thin first
/// levels run in one shard, in memory, without a barrier each; past it the
/// levels are split over the live slots.
const ALONE_POSITIONS: u64 = 500_000;
/// Positions of a level worth a shard of their own: a level of fewer shards
/// than slots gets one per so many positions.
const POSITIONS_WORTH_A_SHARD: u64 = 125_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PegsPlanName {
    /// Prefix tasks counted in batches, each shard over its own layers.
    Prefixes,
    /// The forward count by levels, large levels split over shards.
    #[default]
    Frontier,
}

impl PegsPlanName {
    pub fn name(self) -> &'static str {
        match self {
            PegsPlanName::Prefixes => "prefixes",
            PegsPlanName::Frontier => "frontier",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<PegsPlanName> {
        match name {
            "" => Ok(PegsPlanName::default()),
            "prefixes" => Ok(PegsPlanName::Prefixes),
            "frontier" => Ok(PegsPlanName::Frontier),
            other => Err(invalid!(
                "unknown pegs plan {other:?}: expected \"frontier\" or \"prefixes\""
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PegsSpec {
    /// `english`, `french`, `diamond` or `triangle:N`.
    #[serde(default = "default_board")]
    pub board: String,
    /// The hole empty at the start; `None` is the board's default.
    #[serde(default)]
    pub start: Option<u32>,
    /// The hole the last peg must end in; `None` accepts any.
    #[serde(default)]
    pub end: Option<u32>,
    /// Prefixes plan: minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
    /// The shard plan; `None`: the prefixes plan when `prefixes` is given (as
    /// before there was a choice), else the frontier plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PegsPlanName>,
    /// Frontier plan: shards per level; 0 chooses from each level's size.
    #[serde(default)]
    pub buckets: u32,
    /// Frontier plan without an end hole: the solutions by final hole, the
    /// positions reduced only by the symmetries that fix the start hole
    /// (more positions, unless every symmetry fixes it). Always on when
    /// every symmetry fixes the start: it then costs nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_final_hole: bool,
    /// Expand also the positions a pagoda function shows can reach no
    /// allowed end (skipped by default; the counts are the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_prune: bool,
}

impl PegsSpec {
    /// The plan the job runs (see [`PegsSpec::plan`]).
    pub fn plan_name(&self) -> PegsPlanName {
        match self.plan {
            Some(plan) => plan,
            None if self.prefixes > 0 => PegsPlanName::Prefixes,
            None => PegsPlanName::Frontier,
        }
    }
}

fn default_board() -> String {
    "english".into()
}

impl SpecOf for PegsSpec {
    type Kind = Pegs;
}

#[derive(clap::Args, Debug)]
pub struct PegsArgs {
    /// english (33 holes), french (37), diamond (41) or triangle:N (N = 4 to 7).
    #[arg(long, default_value = "english")]
    pub board: String,
    /// The hole empty at the start, numbered row by row from 1 (default: the
    /// centre; 1 on a triangle).
    #[arg(long)]
    pub start: Option<u32>,
    /// The hole the last peg must end in (default: any).
    #[arg(long)]
    pub end: Option<u32>,
    /// Shard plan: frontier (the default: the count by levels, large levels
    /// split over shards) or prefixes (positions after a few jumps counted in
    /// batches; the default when --prefixes is given).
    #[arg(long)]
    pub plan: Option<String>,
    /// Frontier plan: shards per level (default: from each level's size).
    #[arg(long, value_name = "N")]
    pub buckets: Option<u32>,
    /// Prefixes plan: minimum number of prefix tasks (0 chooses).
    #[arg(long, default_value_t = 0)]
    pub prefixes: u32,
    /// Frontier plan without --end: count the solutions by final hole too
    /// (`by_final_hole` in --json). Off a centre the search then tells
    /// apart positions that differ by a symmetry moving the start hole: up
    /// to 8 times the positions on the cross boards (2.4 times from the
    /// English hole 2). From a centre, and from starts whose final holes the
    /// parity invariants tell apart (the French hole 6), they come without it.
    #[arg(long)]
    pub by_final_hole: bool,
    /// Expand also the positions a pagoda function shows can reach no
    /// allowed end, skipped by default (`no_prune` in --json; same count).
    #[arg(long)]
    pub no_prune: bool,
}

impl SpecArgs<PegsSpec> for PegsArgs {
    fn into_spec(self, _files: &dyn FileReader) -> Result<PegsSpec> {
        Ok(PegsSpec {
            board: self.board.trim().to_ascii_lowercase(),
            start: self.start,
            end: self.end,
            prefixes: self.prefixes,
            plan: self.plan.as_deref().map(PegsPlanName::parse).transpose()?,
            buckets: self.buckets.unwrap_or(0),
            by_final_hole: self.by_final_hole,
            no_prune: self.no_prune,
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PegsPlan {
    /// Prefixes plan: the prefix tasks; copied into the shards, then dropped
    /// from the record.
    #[serde(default)]
    pub peg_tasks: Vec<pegs::PegTask>,
    /// Frontier plan: the number of positions of each level found so far.
    #[serde(default)]
    pub levels: Vec<u64>,
    /// Frontier plan with a final hole: the same for the search from the end.
    #[serde(default)]
    pub end_levels: Vec<u64>,
    /// Frontier plan: the solutions found so far (decimal, empty for none).
    #[serde(default)]
    pub solutions: String,
    /// Frontier plan without a final hole: the solutions by final hole
    /// (decimal), once the level of one peg is done.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub finals: BTreeMap<u32, String>,
    /// Frontier plan: its positions are reduced by the symmetries fixing the
    /// start hole (see `PegGame::fixing_start`); plans made before they were
    /// reduce by all and give no solutions by final hole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixes_start: bool,
    /// The position classes rule out every end from the start
    /// (`PegGame::ends_ruled_out`): on either plan the job is one shard of the
    /// start alone, which the kernel answers 0 without a search.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ruled_out: bool,
    /// Frontier plan: of each level's positions, those expanded (the others
    /// were pruned); from the end search in `end_expanded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expanded: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub end_expanded: Vec<u64>,
    /// Frontier plan: of each level's children, those left out as they were
    /// made because the pagodas rule them out (see `pegs::PegLevel::pruned`),
    /// counted once for each jump to them (by releases that held children to
    /// the rule when sending, once by each shard and spilled run that summed
    /// them); from the end search in `end_pruned`. Plans made before children
    /// were pruned have zeros.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub end_pruned: Vec<u64>,
    /// Frontier plan: its levels' lists are in the compact form
    /// (`pegs::LevelForm::Compact`); plans made before it was write and read
    /// the raw form to the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compact: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PegsTask {
    /// Positions after a few jumps, with the number of jump sequences reaching
    /// each, counted over shared layers.
    PegTasks { tasks: Vec<PegShardTask> },
    /// Bucket `bucket` of level `level` (the positions after `level` jumps)
    /// of one search, or of the join (see `frontier`), sending its children
    /// to the `buckets_out` buckets of the next level. A shard `alone` in its
    /// stage goes on to the levels after it while they would have one shard
    /// too, and then writes as many buckets as the last level it computed
    /// calls for. `buckets_in`: the shards of this level.
    PegLevel {
        level: u32,
        bucket: u32,
        buckets_out: u32,
        #[serde(default)]
        alone: bool,
        #[serde(default)]
        side: PegSide,
        #[serde(default)]
        buckets_in: u32,
        /// Positions reduced by the symmetries fixing the start hole (see
        /// `PegGame::fixing_start`); jobs planned before it was, by all.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fixes_start: bool,
        /// Its input and output lists in the compact form
        /// (`pegs::LevelForm::Compact`); jobs planned before it was, raw.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
}

/// A task as it travels in a shard: the multiplicity as a decimal string,
/// because internally tagged enums cannot carry `u128`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PegShardTask {
    pub board: u64,
    pub multiplicity: String,
}

impl PegShardTask {
    fn from_task(task: &pegs::PegTask) -> PegShardTask {
        PegShardTask {
            board: task.board,
            multiplicity: task.multiplicity.to_string(),
        }
    }

    fn to_task(&self) -> Result<pegs::PegTask> {
        Ok(pegs::PegTask {
            board: self.board,
            multiplicity: self
                .multiplicity
                .parse()
                .map_err(|_| invalid!("malformed peg task multiplicity {:?}", self.multiplicity))?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PegsPartial {
    /// Solutions from a batch of tasks (multiplicities applied).
    PegCount {
        tasks: u32,
        solutions: u128,
        positions: u64,
    },
    /// The positions of one bucket of each level the shard computed (one,
    /// unless it was alone in its stage), the solutions among them (decimal),
    /// and the buckets it wrote.
    PegLevels {
        sizes: Vec<u64>,
        solutions: String,
        buckets: u32,
        #[serde(default)]
        side: PegSide,
        /// On the level of one peg: the solutions by final hole (decimal).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        finals: BTreeMap<u32, String>,
        /// Of each level's positions, those expanded (not pruned).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        expanded: Vec<u64>,
        /// The bytes the shard spilled past its memory share.
        #[serde(default, skip_serializing_if = "is_zero")]
        spilled: u64,
        /// Of each level's children, those not sent because they cannot
        /// finish (empty from a release that sent them all).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pruned: Vec<u64>,
    },
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Shards of the level after one of `positions`, spread over `slots` (1
/// where a shard alone in its stage decides).
fn buckets_after(spec: &PegsSpec, positions: u64, slots: u32) -> u32 {
    bucket_count(
        positions,
        POSITIONS_PER_BUCKET,
        POSITIONS_WORTH_A_SHARD,
        spec.buckets,
        MAX_BUCKETS,
        slots,
    )
}

/// The buckets a shard alone in its stage hands its last level on in: one
/// while the level is under [`ALONE_POSITIONS`] (it goes on alone), one per
/// so many past it.
fn alone_buckets_after(spec: &PegsSpec, positions: u64) -> u32 {
    bucket_count(
        positions,
        ALONE_POSITIONS,
        POSITIONS_WORTH_A_SHARD,
        spec.buckets,
        MAX_BUCKETS,
        1,
    )
}

fn parse_solutions(text: &str) -> Result<u128> {
    if text.is_empty() {
        return Ok(0);
    }
    text.parse()
        .map_err(|_| invalid!("malformed solution count {text:?}"))
}

fn game(spec: &PegsSpec) -> Result<pegs::PegGame> {
    let game = pegs::PegGame::new(pegs::parse_board(&spec.board)?, spec.start, spec.end)?;
    Ok(game.with_pruning(!spec.no_prune))
}

impl JobKind for Pegs {
    type Spec = PegsSpec;
    type Args = PegsArgs;
    type Plan = PegsPlan;
    type Task = PegsTask;
    type Partial = PegsPartial;
    /// The frontier plan's shard input: what each shard of the previous level
    /// sent this bucket, kept encoded.
    type StageInput = PegInput;

    const NAME: &'static str = "pegs";
    const ABOUT: &'static str = "Number of peg solitaire solutions (exact).";
    const EXAMPLES: &'static str = "  tally run pegs --board triangle:5 --start 1\n  tally run pegs --board english --end 17\n  tally run pegs --board english --end 17 --plan prefixes\n  tally submit pegs --board triangle:6 --start 4";

    fn spec_to_proto(spec: &PegsSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Pegs(proto::PegsSpec {
            board: spec.board.clone(),
            start: spec.start.unwrap_or(0),
            end: spec.end.unwrap_or(0),
            prefixes: spec.prefixes,
            plan: spec.plan.map(|p| p.name().to_string()).unwrap_or_default(),
            buckets: spec.buckets,
            by_final_hole: spec.by_final_hole,
            no_prune: spec.no_prune,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<PegsSpec>> {
        let proto::job_spec::Kind::Pegs(g) = kind else {
            return None;
        };
        let plan = match g.plan.as_str() {
            "" => Ok(None),
            name => PegsPlanName::parse(name).map(Some),
        };
        Some(plan.map(|plan| PegsSpec {
            board: if g.board.is_empty() {
                default_board()
            } else {
                g.board.clone()
            },
            start: (g.start != 0).then_some(g.start),
            end: (g.end != 0).then_some(g.end),
            prefixes: g.prefixes,
            plan,
            buckets: g.buckets,
            by_final_hole: g.by_final_hole,
            no_prune: g.no_prune,
        }))
    }

    fn validate(spec: &PegsSpec) -> Result<()> {
        pegs::validate(pegs::parse_board(&spec.board)?, spec.start, spec.end)?;
        if spec.prefixes > MAX_PREFIX_TASKS {
            return Err(invalid!(
                "prefixes must be at most {MAX_PREFIX_TASKS}, got {}",
                spec.prefixes
            ));
        }
        if spec.prefixes > 0 && spec.plan_name() != PegsPlanName::Prefixes {
            return Err(invalid!(
                "prefixes are for the prefixes plan (--plan prefixes)"
            ));
        }
        if spec.buckets > MAX_BUCKETS {
            return Err(invalid!(
                "buckets must be at most {MAX_BUCKETS} (0 chooses from each level's size), got {}",
                spec.buckets
            ));
        }
        if spec.buckets > 0 && spec.plan_name() != PegsPlanName::Frontier {
            return Err(invalid!(
                "buckets are for the frontier plan (--plan frontier)"
            ));
        }
        if spec.by_final_hole && (spec.plan_name() != PegsPlanName::Frontier || spec.end.is_some())
        {
            return Err(invalid!(
                "--by-final-hole is for the frontier plan without --end (with --end the count is for that hole)"
            ));
        }
        Ok(())
    }

    fn describe(spec: &PegsSpec) -> String {
        let start = start_hole(spec);
        let game = match spec.end {
            Some(end) => format!("pegs {} from hole {start} to hole {end}", spec.board),
            None => format!("pegs {} from hole {start}", spec.board),
        };
        match (spec.plan_name(), spec.buckets) {
            (PegsPlanName::Prefixes, _) => format!("{game} (prefixes)"),
            (PegsPlanName::Frontier, 0) => game,
            (PegsPlanName::Frontier, n) => format!("{game} ({n} buckets per level)"),
        }
        .to_string()
            + if spec.by_final_hole {
                " by final hole"
            } else {
                ""
            }
            + if spec.no_prune {
                " without pruning"
            } else {
                ""
            }
    }

    fn small_example() -> Option<PegsSpec> {
        Some(PegsSpec {
            board: "triangle:5".into(),
            start: Some(1),
            end: None,
            prefixes: 0,
            plan: None,
            buckets: 0,
            by_final_hole: false,
            no_prune: false,
        })
    }

    fn stages_known(spec: &PegsSpec) -> bool {
        spec.plan_name() != PegsPlanName::Frontier
    }

    fn prepare(spec: &PegsSpec, _cache: &KernelCache, _control: &Control) -> Result<PegsPlan> {
        let game = game(spec)?;
        if game.ends_ruled_out().is_some() {
            return Ok(PegsPlan {
                peg_tasks: vec![pegs::PegTask {
                    board: game.start_board(),
                    multiplicity: 1,
                }],
                ruled_out: true,
                ..PegsPlan::default()
            });
        }
        if spec.plan_name() == PegsPlanName::Frontier {
            let centre = game
                .symmetric_images(game.start_board())
                .iter()
                .all(|&b| b == game.start_board());
            return Ok(PegsPlan {
                fixes_start: spec.end.is_none() && (spec.by_final_hole || centre),
                compact: true,
                ..PegsPlan::default()
            });
        }
        let wanted = if spec.prefixes == 0 {
            DEFAULT_PREFIXES
        } else {
            spec.prefixes
        };
        Ok(PegsPlan {
            peg_tasks: game.prefix_tasks(wanted as usize)?,
            ..PegsPlan::default()
        })
    }

    fn plan_stage(spec: &PegsSpec, plan: &PegsPlan, _stage: u32) -> Result<Vec<Planned<PegsTask>>> {
        if spec.plan_name() == PegsPlanName::Frontier && !plan.ruled_out {
            return frontier::first_stage(spec, plan);
        }
        let batch = plan.peg_tasks.len().div_ceil(MAX_SHARDS).max(1);
        Ok(plan
            .peg_tasks
            .chunks(batch)
            .map(|chunk| Planned {
                task: PegsTask::PegTasks {
                    tasks: chunk.iter().map(PegShardTask::from_task).collect(),
                },
                work_total: chunk.len() as u64,
            })
            .collect())
    }

    fn trim_plan(plan: &mut PegsPlan) {
        plan.peg_tasks.clear();
    }

    fn next_stage(
        spec: &PegsSpec,
        plan: &mut PegsPlan,
        finished: FinishedStage<'_, PegsPartial>,
    ) -> Result<NextStage<PegsTask>> {
        // The prefixes plan is one stage (the partials, not the spec's
        // default, say which plan a stored job runs).
        if finished
            .partials
            .iter()
            .any(|p| matches!(p, PegsPartial::PegCount { .. }))
        {
            return Ok(NextStage::Finish);
        }
        frontier::next_stage(spec, plan, finished)
    }

    /// A frontier level reads its bucket of what every shard of the previous
    /// level sent (the search from the end: the buckets after the start's).
    fn stage_reads(spec: &PegsSpec, stage: u32, task: &PegsTask) -> Vec<StageRead> {
        if spec.plan_name() != PegsPlanName::Frontier || stage < 2 {
            return Vec::new();
        }
        let bucket = match *task {
            PegsTask::PegLevel {
                side: PegSide::End,
                bucket,
                buckets_in,
                ..
            } => Some(buckets_in + bucket),
            PegsTask::PegLevel { bucket, .. } => Some(bucket),
            PegsTask::PegTasks { .. } => None,
        };
        vec![StageRead {
            stage: stage - 1,
            bucket,
        }]
    }

    fn decode_stage_inputs(_spec: &PegsSpec, parts: &[&[u8]]) -> Result<PegInput> {
        PegInput::in_memory(single_input(Self::NAME, parts)?)
    }

    const STREAMS_STAGE_INPUT: bool = true;

    /// A level is read once, board by board, in order: past
    /// [`INPUT_IN_MEMORY`] it reads as fast from a file of the spill
    /// directory, and the memory is the tables'.
    fn stage_input_memory(_spec: &PegsSpec, share: u64) -> Option<u64> {
        Some((share / 4).min(INPUT_IN_MEMORY))
    }

    fn decode_stored_inputs(_spec: &PegsSpec, parts: Vec<Arc<dyn Stored>>) -> Result<PegInput> {
        PegInput::new(single_stored(Self::NAME, parts)?)
    }

    fn execute(
        spec: &PegsSpec,
        task: &PegsTask,
        run: &mut ShardRun<'_, PegInput, PegsPartial>,
    ) -> Result<Outcome<PegsPartial>> {
        let PegsTask::PegTasks { tasks } = task else {
            return frontier::execute(spec, task, run);
        };
        let game = game(spec)?;
        let tasks = tasks
            .iter()
            .map(PegShardTask::to_task)
            .collect::<Result<Vec<_>>>()?;
        let count = game.count_from(&tasks, run.control, |_, _| {})?;
        // Work units are tasks: the kernel's own units are not known in advance.
        run.control.add_work(tasks.len() as u64);
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: PegsPartial::PegCount {
                tasks: tasks.len() as u32,
                solutions: count.solutions,
                positions: count.memo_boards,
            },
            work_done: tasks.len() as u64,
        })
    }

    fn check_result(
        spec: &PegsSpec,
        _plan: &PegsPlan,
        task: &PegsTask,
        partial: &PegsPartial,
        output: &[u8],
    ) -> Result<()> {
        match (task, partial) {
            (PegsTask::PegTasks { tasks }, PegsPartial::PegCount { tasks: counted, .. }) => {
                if *counted as usize != tasks.len() {
                    return Err(invalid!(
                        "peg result covers {counted} of {} tasks",
                        tasks.len()
                    ));
                }
                no_output(output)
            }
            (PegsTask::PegLevel { .. }, _) => frontier::check(spec, task, partial, output),
            (task, partial) => Err(invalid!("a {partial:?} result for the task {task:?}")),
        }
    }

    /// A level shard's spilled bytes follow its worker's memory share, not
    /// the level: replicas on workers of different budgets agree without it.
    fn same_result(a: &PegsPartial, b: &PegsPartial) -> bool {
        let result = |partial: &PegsPartial| {
            let mut result = partial.clone();
            if let PegsPartial::PegLevels { spilled, .. } = &mut result {
                *spilled = 0;
            }
            result
        };
        result(a) == result(b)
    }

    fn finish(spec: &PegsSpec, plan: &PegsPlan, partials: Vec<PegsPartial>) -> Result<Answer> {
        if partials
            .iter()
            .all(|p| matches!(p, PegsPartial::PegLevels { .. }))
        {
            let solutions = parse_solutions(&plan.solutions)?;
            let positions = plan.levels.iter().chain(&plan.end_levels).sum();
            let mut answer = answer(spec, solutions, positions);
            answer.details["levels"] = serde_json::json!(plan.levels);
            if !plan.end_levels.is_empty() {
                answer.details["levels_from_the_end"] = serde_json::json!(plan.end_levels);
            }
            if !plan.expanded.is_empty() {
                answer.details["expanded"] = serde_json::json!(plan.expanded);
            }
            if !plan.end_expanded.is_empty() {
                answer.details["expanded_from_the_end"] = serde_json::json!(plan.end_expanded);
            }
            if plan.pruned.iter().any(|&n| n > 0) {
                answer.details["pruned_when_sent"] = serde_json::json!(plan.pruned);
            }
            if plan.end_pruned.iter().any(|&n| n > 0) {
                answer.details["pruned_when_sent_from_the_end"] =
                    serde_json::json!(plan.end_pruned);
            }
            // Each shard's holes add up to its solutions (`check`); a job
            // some of whose shards gave none (a worker of a release that
            // gave them only with --by-final-hole) shows none.
            let by_hole = plan
                .finals
                .values()
                .map(|ways| parse_solutions(ways))
                .sum::<Result<u128>>()?;
            if !plan.finals.is_empty() && by_hole == solutions {
                answer.details["by_final_hole"] = serde_json::json!(plan.finals);
            }
            return Ok(answer);
        }
        let mut solutions: u128 = 0;
        let mut positions: u64 = 0;
        for partial in partials {
            let PegsPartial::PegCount {
                solutions: s,
                positions: p,
                ..
            } = partial
            else {
                return Err(Error::Internal(
                    "a pegs job mixes frontier and prefix results".into(),
                ));
            };
            solutions = solutions
                .checked_add(s)
                .ok_or_else(|| Error::Internal("peg solution count overflows".into()))?;
            positions += p;
        }
        Ok(answer(spec, solutions, positions))
    }

    fn direct(spec: &PegsSpec, threads: usize, control: &Control) -> Result<Answer> {
        let count = game(spec)?.count_with_threads(threads, control)?;
        Ok(answer(spec, count.solutions, count.memo_boards))
    }
}

fn start_hole(spec: &PegsSpec) -> u32 {
    spec.start
        .or_else(|| {
            pegs::parse_board(&spec.board)
                .ok()
                .map(|b| b.default_start())
        })
        .unwrap_or(0)
}

/// The answer and its details; where the position classes rule out every
/// end, the reason too (`ruled_out`), whichever way the count was made.
fn answer(spec: &PegsSpec, solutions: u128, positions: u64) -> Answer {
    let mut answer = Answer {
        line: solutions.to_string(),
        details: serde_json::json!({
            "kind": "pegs",
            "board": spec.board,
            "start": start_hole(spec),
            "end": spec.end,
            "solutions": solutions.to_string(),
            // Summed over shards: each shard keeps its own positions.
            "positions": positions,
        }),
    };
    if let Some(why) = game(spec).ok().and_then(|game| game.ends_ruled_out()) {
        answer.details["ruled_out"] = serde_json::json!(why);
    }
    answer
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Pegs {
    fn corrupt_for_testing(partial: &mut PegsPartial) {
        match partial {
            PegsPartial::PegCount { solutions, .. } => *solutions = solutions.wrapping_add(1),
            PegsPartial::PegLevels { sizes, .. } => {
                if let Some(last) = sizes.last_mut() {
                    *last = last.wrapping_add(1)
                }
            }
        }
    }
}
