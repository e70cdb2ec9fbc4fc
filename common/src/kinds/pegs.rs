//! `pegs`: the number of peg solitaire solutions (exact). The job is split into
//! prefix tasks (the distinct positions after a few jumps, reduced by the
//! board's symmetries, with the number of jump sequences reaching each); each
//! shard counts a batch of them over shared layers.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{Answer, FileReader, JobKind, Outcome, Planned, ShardRun, SpecOf, no_output};
use crate::{Control, Error, Result, invalid, pegs, proto};

pub struct Pegs;

/// Default minimum number of prefix tasks. Tasks of one shard share their
/// layers, so a shard holds several tasks and the shards stay few.
pub const DEFAULT_PREFIXES: u32 = 256;
/// At most this many shards for one job.
pub const MAX_SHARDS: usize = 32;
/// Most prefix tasks a job may ask for.
pub const MAX_PREFIX_TASKS: u32 = 100_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PegsSpec {
    /// `english`, `french` or `triangle:N`.
    #[serde(default = "default_board")]
    pub board: String,
    /// The hole empty at the start; `None` is the board's default.
    #[serde(default)]
    pub start: Option<u32>,
    /// The hole the last peg must end in; `None` accepts any.
    #[serde(default)]
    pub end: Option<u32>,
    /// Minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
}

fn default_board() -> String {
    "english".into()
}

impl SpecOf for PegsSpec {
    type Kind = Pegs;
}

#[derive(clap::Args, Debug)]
pub struct PegsArgs {
    /// english (33 holes), french (37) or triangle:N (N = 4 to 7).
    #[arg(long, default_value = "english")]
    pub board: String,
    /// The hole empty at the start, numbered row by row from 1 (default: the
    /// centre; 1 on a triangle).
    #[arg(long)]
    pub start: Option<u32>,
    /// The hole the last peg must end in (default: any).
    #[arg(long)]
    pub end: Option<u32>,
    /// Minimum number of prefix tasks (0 chooses).
    #[arg(long, default_value_t = 0)]
    pub prefixes: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PegsPlan {
    /// The prefix tasks; copied into the shards, then dropped from the record.
    #[serde(default)]
    pub peg_tasks: Vec<pegs::PegTask>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PegsTask {
    /// Positions after a few jumps, with the number of jump sequences reaching
    /// each, counted over shared layers.
    PegTasks { tasks: Vec<PegShardTask> },
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
}

fn game(spec: &PegsSpec) -> Result<pegs::PegGame> {
    pegs::PegGame::new(pegs::parse_board(&spec.board)?, spec.start, spec.end)
}

impl JobKind for Pegs {
    type Spec = PegsSpec;
    type Args = PegsArgs;
    type Plan = PegsPlan;
    type Task = PegsTask;
    type Partial = PegsPartial;
    type StageInput = ();

    const NAME: &'static str = "pegs";
    const ABOUT: &'static str = "Number of peg solitaire solutions (exact).";
    const EXAMPLES: &'static str = "  tally run pegs --board triangle:5 --start 1\n  tally run pegs --board english --end 17\n  tally submit pegs --board triangle:6 --start 4";

    fn spec_from_args(args: PegsArgs, _files: &dyn FileReader) -> Result<PegsSpec> {
        Ok(PegsSpec {
            board: args.board.trim().to_ascii_lowercase(),
            start: args.start,
            end: args.end,
            prefixes: args.prefixes,
        })
    }

    fn spec_to_proto(spec: &PegsSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Pegs(proto::PegsSpec {
            board: spec.board.clone(),
            start: spec.start.unwrap_or(0),
            end: spec.end.unwrap_or(0),
            prefixes: spec.prefixes,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<PegsSpec>> {
        let proto::job_spec::Kind::Pegs(g) = kind else {
            return None;
        };
        Some(Ok(PegsSpec {
            board: if g.board.is_empty() {
                default_board()
            } else {
                g.board.clone()
            },
            start: (g.start != 0).then_some(g.start),
            end: (g.end != 0).then_some(g.end),
            prefixes: g.prefixes,
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
        Ok(())
    }

    fn describe(spec: &PegsSpec) -> String {
        let start = start_hole(spec);
        match spec.end {
            Some(end) => format!("pegs {} from hole {start} to hole {end}", spec.board),
            None => format!("pegs {} from hole {start}", spec.board),
        }
    }

    fn prepare(spec: &PegsSpec, _cache: &KernelCache, _control: &Control) -> Result<PegsPlan> {
        let wanted = if spec.prefixes == 0 {
            DEFAULT_PREFIXES
        } else {
            spec.prefixes
        };
        Ok(PegsPlan {
            peg_tasks: game(spec)?.prefix_tasks(wanted as usize),
        })
    }

    fn plan_stage(
        _spec: &PegsSpec,
        plan: &PegsPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<PegsTask>>> {
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

    fn execute(
        spec: &PegsSpec,
        task: &PegsTask,
        run: &mut ShardRun<'_, (), PegsPartial>,
    ) -> Result<Outcome<PegsPartial>> {
        let PegsTask::PegTasks { tasks } = task;
        let tasks = tasks
            .iter()
            .map(PegShardTask::to_task)
            .collect::<Result<Vec<_>>>()?;
        let count = game(spec)?.count_from(&tasks, run.control, |_, _| {})?;
        // Work units are tasks: the kernel's own units are not known in advance.
        run.control.add_work(tasks.len() as u64);
        Ok(Outcome {
            output: Vec::new(),
            partial: PegsPartial::PegCount {
                tasks: tasks.len() as u32,
                solutions: count.solutions,
                positions: count.memo_boards,
            },
            work_done: tasks.len() as u64,
        })
    }

    fn check_result(
        _spec: &PegsSpec,
        _plan: &PegsPlan,
        task: &PegsTask,
        partial: &PegsPartial,
        output: &[u8],
    ) -> Result<()> {
        let PegsTask::PegTasks { tasks } = task;
        let PegsPartial::PegCount { tasks: counted, .. } = partial;
        if *counted as usize != tasks.len() {
            return Err(invalid!(
                "peg result covers {counted} of {} tasks",
                tasks.len()
            ));
        }
        no_output(output)
    }

    fn finish(spec: &PegsSpec, _plan: &PegsPlan, partials: Vec<PegsPartial>) -> Result<Answer> {
        let mut solutions: u128 = 0;
        let mut positions: u64 = 0;
        for PegsPartial::PegCount {
            solutions: s,
            positions: p,
            ..
        } in partials
        {
            solutions = solutions
                .checked_add(s)
                .ok_or_else(|| Error::Internal("peg solution count overflows".into()))?;
            positions += p;
        }
        Ok(answer(spec, solutions, positions))
    }

    fn direct(spec: &PegsSpec, threads: usize, control: &Control) -> Result<Answer> {
        let count = pegs::count_solutions(
            pegs::parse_board(&spec.board)?,
            spec.start,
            spec.end,
            threads,
            control,
        )?;
        Ok(answer(spec, count.solutions, count.memo_boards))
    }

    fn corrupt_for_testing(partial: &mut PegsPartial) {
        let PegsPartial::PegCount { solutions, .. } = partial;
        *solutions = solutions.wrapping_add(1);
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

fn answer(spec: &PegsSpec, solutions: u128, positions: u64) -> Answer {
    Answer {
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
    }
}
