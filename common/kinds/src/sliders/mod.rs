//! `sliders`: the sum of the checksums of all shortest slider sequences from a
//! start board to a target board. Two plans: `prefixes` (the default), where
//! planning searches the board graph once and the shards enumerate the
//! shortest sequences by prefix, in batches balanced by the number of
//! sequences each prefix holds (every worker process searches the graph once
//! too); and `frontier`, where the search itself is spread over the workers
//! level by level, forward from the start and back from the target, and the
//! enumeration reads the shortest-path graph as stage data (see `frontier`).
//!
//! Files: `spec` (the kind's marker, its spec and arguments), `records` (the
//! plan, the tasks, the partial results), `input` (what a stage's shards
//! read), `prefixes` (the prefix shards of both plans), `frontier` (the
//! frontier plan's stages) and `frontier_shards` (what their shards do);
//! here, the kind's contract (`JobKind`) over them.

#[cfg(test)]
mod form_tests;
mod frontier;
mod frontier_shards;
mod input;
#[cfg(test)]
mod kind_tests;
mod prefixes;
mod records;
mod spec;

use crate::cache::KernelCache;
use crate::kind::{
    Answer, FaultInjection, FinishedStage, JobKind, NextStage, Outcome, Planned, ShardRun,
    StageRead, no_output,
};
use crate::{Control, Error, Result, invalid};
use tally_kernels::sliders;
use tally_wire::proto;

pub use frontier::{MAX_BUCKETS, MAX_GRAPH_BOARDS};
pub use input::SlidersInput;
pub use prefixes::{DEFAULT_PREFIXES, MAX_SHARD_UNITS, MAX_SHARDS, shard_count};
pub use records::{SlidersPartial, SlidersPlan, SlidersTask};
pub use spec::{MAX_PREFIX_TASKS, Sliders, SlidersArgs, SlidersPlanName, SlidersSpec};

use prefixes::{batches_by_count, enumerate_prefixes, min_prefixes, space, weighted_shards};

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
        Some(spec::spec_from_message(s))
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
        input::decode_inputs(spec, parts)
    }

    const STREAMS_STAGE_INPUT: bool = true;

    fn decode_stored_inputs(
        spec: &SlidersSpec,
        parts: Vec<std::sync::Arc<dyn crate::Stored>>,
    ) -> Result<SlidersInput> {
        input::decode_stored_inputs(spec, parts)
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
                frontier_shards::execute(spec, task, input, run.control, run.room.as_mut())
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
            return frontier_shards::check_result(task, partial, output);
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
