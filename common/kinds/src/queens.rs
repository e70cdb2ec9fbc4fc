//! `queens`: the number of ways to place N non-attacking queens on an N x N
//! board (exact). Sharded by the placements of the first rows: each shard
//! counts the completions of a batch of prefixes.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{Answer, FaultInjection, JobKind, Outcome, Planned, ShardRun, SpecOf, no_output};
use crate::{Control, Error, Result, invalid};
use tally_kernels::queens;
use tally_wire::proto;

pub struct Queens;

/// Prefixes wanted per job, so that shards balance.
const PREFIXES_WANTED: usize = 256;
/// At most this many shards for one job.
const MAX_SHARDS: usize = 64;

/// A spec file's parameters and the command line's flags alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct QueensSpec {
    /// Board side and number of queens, 1 to 24.
    #[arg(long)]
    pub n: u32,
}

impl SpecOf for QueensSpec {
    type Kind = Queens;
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueensPlan {
    /// Rows fixed by a prefix.
    #[serde(default)]
    pub depth: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum QueensTask {
    /// Placements of the first rows, the columns of their queens.
    QueensPrefixes { prefixes: Vec<queens::Prefix> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueensPartial {
    /// Solutions extending a batch of prefixes (mirror weights applied).
    QueensCount { prefixes: u32, solutions: u64 },
}

impl JobKind for Queens {
    type Spec = QueensSpec;
    type Args = QueensSpec;
    type Plan = QueensPlan;
    type Task = QueensTask;
    type Partial = QueensPartial;
    type StageInput = ();

    const NAME: &'static str = "queens";
    const ABOUT: &'static str = "Ways to place N non-attacking queens on an N x N board (exact).";
    const EXAMPLES: &'static str = "  tally run queens --n 12\n  tally submit queens --n 18";

    fn spec_to_proto(spec: &QueensSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Queens(proto::QueensSpec { n: spec.n })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<QueensSpec>> {
        let proto::job_spec::Kind::Queens(q) = kind else {
            return None;
        };
        Some(Ok(QueensSpec { n: q.n }))
    }

    fn validate(spec: &QueensSpec) -> Result<()> {
        queens::validate(spec.n)
    }

    fn describe(spec: &QueensSpec) -> String {
        format!("queens on {0} x {0}", spec.n)
    }

    fn small_example() -> Option<QueensSpec> {
        Some(QueensSpec { n: 9 })
    }

    fn prepare(spec: &QueensSpec, _cache: &KernelCache, _control: &Control) -> Result<QueensPlan> {
        Ok(QueensPlan {
            depth: queens::prefix_depth(spec.n, PREFIXES_WANTED),
        })
    }

    fn plan_stage(
        spec: &QueensSpec,
        plan: &QueensPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<QueensTask>>> {
        let prefixes = queens::prefixes(spec.n, plan.depth.clamp(1, spec.n));
        let batch = prefixes.len().div_ceil(MAX_SHARDS).max(1);
        Ok(prefixes
            .chunks(batch)
            .map(|chunk| Planned {
                task: QueensTask::QueensPrefixes {
                    prefixes: chunk.to_vec(),
                },
                work_total: chunk.len() as u64,
            })
            .collect())
    }

    fn execute(
        spec: &QueensSpec,
        task: &QueensTask,
        run: &mut ShardRun<'_, (), QueensPartial>,
    ) -> Result<Outcome<QueensPartial>> {
        let QueensTask::QueensPrefixes { prefixes } = task;
        let mut solutions = 0u64;
        for prefix in prefixes {
            run.control.check()?;
            solutions = solutions
                .checked_add(queens::count_prefix(spec.n, prefix)?)
                .ok_or_else(|| Error::Internal("queens count overflows".into()))?;
            run.control.add_work(1);
        }
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: QueensPartial::QueensCount {
                prefixes: prefixes.len() as u32,
                solutions,
            },
            work_done: prefixes.len() as u64,
        })
    }

    fn check_result(
        _spec: &QueensSpec,
        _plan: &QueensPlan,
        task: &QueensTask,
        partial: &QueensPartial,
        output: &[u8],
    ) -> Result<()> {
        let QueensTask::QueensPrefixes { prefixes } = task;
        let QueensPartial::QueensCount {
            prefixes: counted, ..
        } = partial;
        if *counted as usize != prefixes.len() {
            return Err(invalid!(
                "queens result covers {counted} of {} prefixes",
                prefixes.len()
            ));
        }
        no_output(output)
    }

    fn finish(
        spec: &QueensSpec,
        _plan: &QueensPlan,
        partials: Vec<QueensPartial>,
    ) -> Result<Answer> {
        let mut total = 0u64;
        for QueensPartial::QueensCount { solutions, .. } in partials {
            total = total
                .checked_add(solutions)
                .ok_or_else(|| Error::Internal("queens count overflows".into()))?;
        }
        Ok(answer(spec, total))
    }

    fn direct(spec: &QueensSpec, threads: usize, control: &Control) -> Result<Answer> {
        Ok(answer(spec, queens::count(spec.n, threads, control)?))
    }
}

fn answer(spec: &QueensSpec, solutions: u64) -> Answer {
    Answer {
        line: solutions.to_string(),
        details: serde_json::json!({
            "kind": "queens",
            "n": spec.n,
            "solutions": solutions.to_string(),
        }),
    }
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Queens {
    fn corrupt_for_testing(partial: &mut QueensPartial) {
        let QueensPartial::QueensCount { solutions, .. } = partial;
        *solutions = solutions.wrapping_add(1);
    }
}
