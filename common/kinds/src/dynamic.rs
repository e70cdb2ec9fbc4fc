//! The runner's handle on a kind, in two object-safe faces of [`JobKind`],
//! each implemented once for every kind:
//!
//! - [`Kind`], what needs no spec (the name, the command line, the proto form,
//!   the check that makes a spec), implemented by every `JobKind` itself, so
//!   the registry lists the kinds' unit structs;
//! - [`SpecOps`], what the runner does with a checked spec (plan, run, check,
//!   finish), implemented by [`Checked`], which holds the kind's typed spec;
//!   a `ValidSpec` hands it out.
//!
//! The tests' fault injection ([`FaultInjection`]) is apart from both, behind
//! [`SpecOps::fault_injection`].
//!
//! Both take and return encoded values: decoding, checking and encoding happen
//! here, at the boundary, so neither the kinds nor the runner deal with both forms.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, Barrier, Checkpoint, FaultInjection, FileReader, FinishedStage, JobKind, NextStage,
    Outcome, Planned, ResourceEstimate, ShardRun, SpecArgs, StageRead, WorkerRoom,
};
use crate::values::{EncodedPartial, EncodedTask, JobPlan, PlannedShard, ShardEvent, ShardOutcome};
use crate::{Control, Error, Result, Room, Stored, invalid};
use tally_wire::proto;

/// A stage's decoded input, shared by the shards of the stage.
pub type StageInput = Arc<dyn Any + Send + Sync>;

/// What a running shard has at hand besides its task (see [`ShardRun`]).
pub struct ShardContext<'a> {
    pub input: Option<&'a StageInput>,
    /// See [`ShardRun::checkpoint`].
    pub checkpoint: &'a dyn Stored,
    pub cache: &'a KernelCache,
    pub control: &'a Control,
    pub checkpoint_every: Duration,
    pub on_event: &'a mut dyn FnMut(ShardEvent),
    /// The shard's memory share and spill, when the worker gives them;
    /// `None`: memory without limit, runs kept in memory.
    pub room: Option<Room<'a>>,
}

/// A kind as the registry lists it: what it is before there is a spec.
pub trait Kind: Send + Sync {
    fn name(&self) -> &'static str;
    /// `tally run|submit NAME` with the kind's own options.
    fn command(&self) -> clap::Command;
    fn params_from_matches(
        &self,
        matches: &clap::ArgMatches,
        files: &dyn FileReader,
    ) -> Result<Map<String, Value>>;
    /// The parameters of the proto `oneof`, or `None` when it is another kind's.
    fn params_from_proto(&self, kind: &proto::job_spec::Kind)
    -> Option<Result<Map<String, Value>>>;
    /// The parameters of the kind's small example job (see
    /// [`JobKind::small_example`]).
    fn small_example(&self) -> Option<Result<Map<String, Value>>>;
    /// Parses and validates the spec's parameters; returns the checked spec
    /// and the parameters with every default filled in.
    fn check(&self, params: &Map<String, Value>) -> Result<(Arc<dyn SpecOps>, Map<String, Value>)>;
}

/// What the runner does with a checked spec of some kind. See [`JobKind`] for
/// what each method means; made by [`Kind::check`].
pub trait SpecOps: Send + Sync {
    fn kind_name(&self) -> &'static str;
    /// A one-line human description, e.g. `hex side 11 mod 1000000007 (cell-step)`.
    fn describe(&self) -> String;
    fn to_proto(&self) -> proto::job_spec::Kind;
    fn estimate(&self) -> Option<ResourceEstimate>;
    /// What the shards of stage `stage` need (see [`JobKind::stage_estimate`]).
    fn stage_estimate(&self, stage: u32) -> Option<ResourceEstimate>;
    /// The parameters of the spec made to fit workers of `budget` bytes
    /// (see [`JobKind::fit_to_budget`]).
    fn fit_to_budget(
        &self,
        worker: WorkerRoom,
        output_limit: Option<u64>,
    ) -> Result<Map<String, Value>>;
    /// The shard count the user chose (see [`JobKind::shard_count`]).
    fn shard_count(&self) -> Option<crate::kind::ShardCount>;
    /// The parameters with `shards` shards (see [`JobKind::with_shard_count`]).
    fn with_shard_count(&self, shards: u64) -> Result<Map<String, Value>>;
    /// The SHA-256 (hex) of every attachment the job needs.
    fn attachments(&self) -> Vec<String>;
    /// What a worker must offer to run the job's shards, if anything.
    fn capability(&self) -> Option<&'static str>;
    /// Whether the plan knows its stage count from the start.
    fn stages_known(&self) -> bool;
    /// Computes the facts the plan needs (the expensive part of planning: building
    /// a graph, a search). Runs once per job, at submission.
    fn prepare(&self, cache: &KernelCache, control: &Control) -> Result<JobPlan>;
    /// The shards of stage `stage` (1-based). Deterministic.
    fn plan_stage(&self, plan: &JobPlan, stage: u32) -> Result<Vec<PlannedShard>>;
    /// The plan as the job record keeps it once the first stage is planned.
    fn trim_plan(&self, plan: &mut JobPlan) -> Result<()>;
    /// What follows stage `finished` given its partials (in shard order): the
    /// next stage's shards and a line for the events, or `None` when the job
    /// is done. May update `plan`, which is stored with the transition, as
    /// are the shards: they may depend on what the `barrier` knows (the live
    /// workers' slots and the least memory one of them has, the stage
    /// store's room).
    fn next_stage(
        &self,
        plan: &mut JobPlan,
        finished: u32,
        partials: &[EncodedPartial],
        barrier: Barrier,
    ) -> Result<Option<(Vec<PlannedShard>, String)>>;
    /// The stage outputs a shard of `stage` with `task` reads, in order.
    fn stage_reads(&self, stage: u32, task: &EncodedTask) -> Result<Vec<StageRead>>;
    /// Decodes the outputs [`SpecOps::stage_reads`] named, in its order.
    fn decode_stage_inputs(&self, parts: &[&[u8]]) -> Result<StageInput>;
    /// How much of a stage input stays in memory before the rest goes to a
    /// file (see [`JobKind::stage_input_memory`] and
    /// [`SpecOps::decode_stored_inputs`]).
    fn stage_input_memory(&self, share: u64) -> Option<u64>;
    /// [`SpecOps::decode_stage_inputs`] of parts that may be in files.
    fn decode_stored_inputs(&self, parts: Vec<Arc<dyn Stored>>) -> Result<StageInput>;
    /// The outputs of stages before `stage - 1` that must be kept while the
    /// job is at `stage`.
    fn kept_stages(&self, plan: &JobPlan, stage: u32) -> Result<Vec<u32>>;
    fn execute(&self, task: &EncodedTask, context: ShardContext<'_>) -> Result<ShardOutcome>;
    /// Checks that a checkpoint's partial is one of the kind's partials.
    fn check_checkpoint(&self, partial: &EncodedPartial) -> Result<()>;
    /// Whether two replicas' partials hold the same result (see
    /// [`JobKind::same_result`]).
    fn same_result(&self, a: &EncodedPartial, b: &EncodedPartial) -> Result<bool>;
    /// Checks the shape of a reported result against its shard before it is
    /// accepted. `output` is `None` when the stage output is in a stage store
    /// outside the coordinator: only the partial's type is checked then (its
    /// readers check the output as they decode it).
    fn check_result(
        &self,
        plan: &JobPlan,
        task: &EncodedTask,
        partial: &EncodedPartial,
        output: Option<&[u8]>,
    ) -> Result<()>;
    /// The answer from the partial results of the last stage, in shard order
    /// (borrowed: a stage may hold a million).
    fn finish(&self, plan: &JobPlan, partials: &[&EncodedPartial]) -> Result<Answer>;
    /// The answer computed in this process by the kernel alone, without shards:
    /// the reference every run through the runner must equal.
    fn compute_direct(&self, threads: usize, control: &Control) -> Result<Answer>;
    /// The kind's fault injection, for a worker run to corrupt its results
    /// (see [`FaultInjection`]); no part of running a job.
    fn fault_injection(&self) -> &dyn FaultInjector;
}

/// A kind's [`FaultInjection`] on encoded results.
pub trait FaultInjector: Send + Sync {
    /// Alters a result the way a faulty machine might.
    fn corrupt_for_testing(&self, partial: &mut EncodedPartial) -> Result<()>;
}

/// A spec of kind `K` that passed [`JobKind::validate`].
pub struct Checked<K: JobKind>(K::Spec);

fn to_map<T: Serialize>(value: &T) -> Result<Map<String, Value>> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Error::Internal(format!(
            "expected a JSON object, got {other}"
        ))),
        Err(e) => Err(Error::Internal(format!("cannot serialise: {e}"))),
    }
}

fn plan_of<K: JobKind>(plan: &JobPlan) -> Result<K::Plan> {
    K::Plan::deserialize(Value::Object(plan.facts.clone()))
        .map_err(|e| Error::Internal(format!("stored {} plan does not load: {e}", K::NAME)))
}

fn encode_planned<K: JobKind>(shards: Vec<Planned<K::Task>>) -> Vec<PlannedShard> {
    shards
        .into_iter()
        .map(|p| PlannedShard {
            task: EncodedTask::encode(&p.task),
            work_total: p.work_total,
        })
        .collect()
}

fn decode_partials<'a, K: JobKind>(
    partials: impl IntoIterator<Item = &'a EncodedPartial>,
) -> Result<Vec<K::Partial>> {
    partials
        .into_iter()
        .map(|p| {
            p.decode::<K::Partial>().map_err(|e| {
                Error::Internal(format!("stored {} result does not load: {e}", K::NAME))
            })
        })
        .collect()
}

impl<K: JobKind + FaultInjection> Kind for K {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn command(&self) -> clap::Command {
        use clap::Args;
        // The about after the options: a doc comment on the options' struct
        // (a spec that is its own options) would set it otherwise.
        let command = K::Args::augment_args(clap::Command::new(K::NAME))
            .about(K::ABOUT)
            .long_about(None);
        if K::EXAMPLES.is_empty() {
            command
        } else {
            command.after_help(format!("Examples:\n{}", K::EXAMPLES))
        }
    }

    fn params_from_matches(
        &self,
        matches: &clap::ArgMatches,
        files: &dyn FileReader,
    ) -> Result<Map<String, Value>> {
        let args = <K::Args as clap::FromArgMatches>::from_arg_matches(matches)
            .map_err(|e| invalid!("{e}"))?;
        to_map(&args.into_spec(files)?)
    }

    fn params_from_proto(
        &self,
        kind: &proto::job_spec::Kind,
    ) -> Option<Result<Map<String, Value>>> {
        K::spec_from_proto(kind).map(|spec| to_map(&spec?))
    }

    fn small_example(&self) -> Option<Result<Map<String, Value>>> {
        K::small_example().map(|spec| to_map(&spec))
    }

    fn check(&self, params: &Map<String, Value>) -> Result<(Arc<dyn SpecOps>, Map<String, Value>)> {
        let spec = K::Spec::deserialize(Value::Object(params.clone()))
            .map_err(|e| invalid!("invalid {} job spec: {e}", K::NAME))?;
        K::validate(&spec)?;
        let normalised = to_map(&spec)?;
        Ok((Arc::new(Checked::<K>(spec)), normalised))
    }
}

impl<K: JobKind + FaultInjection> SpecOps for Checked<K> {
    fn kind_name(&self) -> &'static str {
        K::NAME
    }

    fn describe(&self) -> String {
        K::describe(&self.0)
    }

    fn to_proto(&self) -> proto::job_spec::Kind {
        K::spec_to_proto(&self.0)
    }

    fn estimate(&self) -> Option<ResourceEstimate> {
        K::estimate(&self.0)
    }

    fn stage_estimate(&self, stage: u32) -> Option<ResourceEstimate> {
        K::stage_estimate(&self.0, stage)
    }

    fn fit_to_budget(
        &self,
        worker: WorkerRoom,
        output_limit: Option<u64>,
    ) -> Result<Map<String, Value>> {
        to_map(&K::fit_to_budget(&self.0, worker, output_limit))
    }

    fn shard_count(&self) -> Option<crate::kind::ShardCount> {
        K::shard_count(&self.0)
    }

    fn with_shard_count(&self, shards: u64) -> Result<Map<String, Value>> {
        to_map(&K::with_shard_count(&self.0, shards))
    }

    fn attachments(&self) -> Vec<String> {
        K::attachments(&self.0)
    }

    fn capability(&self) -> Option<&'static str> {
        K::capability(&self.0)
    }

    fn stages_known(&self) -> bool {
        K::stages_known(&self.0)
    }

    fn prepare(&self, cache: &KernelCache, control: &Control) -> Result<JobPlan> {
        let plan = K::prepare(&self.0, cache, control)?;
        Ok(JobPlan {
            stages_total: K::stages(&self.0, &plan),
            facts: to_map(&plan)?,
        })
    }

    fn plan_stage(&self, plan: &JobPlan, stage: u32) -> Result<Vec<PlannedShard>> {
        if stage == 0 || stage > plan.stages_total {
            return Err(Error::Internal(format!(
                "stage {stage} is outside 1..={}",
                plan.stages_total
            )));
        }
        let shards = K::plan_stage(&self.0, &plan_of::<K>(plan)?, stage)?;
        Ok(encode_planned::<K>(shards))
    }

    fn trim_plan(&self, plan: &mut JobPlan) -> Result<()> {
        let mut facts = plan_of::<K>(plan)?;
        K::trim_plan(&mut facts);
        plan.facts = to_map(&facts)?;
        Ok(())
    }

    fn next_stage(
        &self,
        plan: &mut JobPlan,
        finished: u32,
        partials: &[EncodedPartial],
        barrier: Barrier,
    ) -> Result<Option<(Vec<PlannedShard>, String)>> {
        let partials = decode_partials::<K>(partials)?;
        let mut facts = plan_of::<K>(plan)?;
        let stage = FinishedStage {
            stage: finished,
            stages_total: plan.stages_total,
            partials: &partials,
            slots: barrier.slots,
            slot_memory: barrier.slot_memory,
            stage_bytes: barrier.stage_bytes,
            stage_room: barrier.stage_room,
        };
        let next = K::next_stage(&self.0, &mut facts, stage)?;
        plan.facts = to_map(&facts)?;
        Ok(match next {
            NextStage::Finish => None,
            NextStage::Shards(shards, note) => {
                // A plan whose stages are found as it goes counts the stages so far.
                plan.stages_total = plan.stages_total.max(finished + 1);
                Some((encode_planned::<K>(shards), note))
            }
        })
    }

    fn stage_reads(&self, stage: u32, task: &EncodedTask) -> Result<Vec<StageRead>> {
        Ok(K::stage_reads(&self.0, stage, &task.decode()?))
    }

    fn decode_stage_inputs(&self, parts: &[&[u8]]) -> Result<StageInput> {
        Ok(Arc::new(K::decode_stage_inputs(&self.0, parts)?))
    }

    fn stage_input_memory(&self, share: u64) -> Option<u64> {
        K::stage_input_memory(&self.0, share)
    }

    fn decode_stored_inputs(&self, parts: Vec<Arc<dyn Stored>>) -> Result<StageInput> {
        Ok(Arc::new(K::decode_stored_inputs(&self.0, parts)?))
    }

    fn kept_stages(&self, plan: &JobPlan, stage: u32) -> Result<Vec<u32>> {
        Ok(K::kept_stages(&self.0, &plan_of::<K>(plan)?, stage))
    }

    fn execute(&self, task: &EncodedTask, context: ShardContext<'_>) -> Result<ShardOutcome> {
        let task: K::Task = task.decode()?;
        let input = match context.input {
            None => None,
            Some(input) => Some(input.downcast_ref::<K::StageInput>().ok_or_else(|| {
                Error::Internal(format!(
                    "stage input of another kind for a {} shard",
                    K::NAME
                ))
            })?),
        };
        let on_event = context.on_event;
        let mut forward = |c: Checkpoint<K::Partial>| {
            on_event(ShardEvent {
                state: c.state,
                partial: c.partial.map(|p| EncodedPartial::encode(&p)),
                work_done: c.work_done,
            })
        };
        let mut run = ShardRun {
            input,
            checkpoint: context.checkpoint,
            cache: context.cache,
            control: context.control,
            checkpoint_every: context.checkpoint_every,
            on_checkpoint: &mut forward,
            // Reborrowed for the closure's shorter lifetime.
            room: context.room.map(|room| Room {
                memory: room.memory,
                spill: room.spill,
            }),
        };
        let Outcome {
            output,
            partial,
            work_done,
        } = K::execute(&self.0, &task, &mut run)?;
        Ok(ShardOutcome {
            output,
            partial: EncodedPartial::encode(&partial),
            work_done,
        })
    }

    fn check_checkpoint(&self, partial: &EncodedPartial) -> Result<()> {
        partial.decode::<K::Partial>().map(|_| ())
    }

    fn same_result(&self, a: &EncodedPartial, b: &EncodedPartial) -> Result<bool> {
        Ok(a == b || K::same_result(&a.decode()?, &b.decode()?))
    }

    fn check_result(
        &self,
        plan: &JobPlan,
        task: &EncodedTask,
        partial: &EncodedPartial,
        output: Option<&[u8]>,
    ) -> Result<()> {
        let task: K::Task = task.decode()?;
        let partial: K::Partial = partial.decode()?;
        let Some(output) = output else {
            return Ok(());
        };
        K::check_result(&self.0, &plan_of::<K>(plan)?, &task, &partial, output)
    }

    fn finish(&self, plan: &JobPlan, partials: &[&EncodedPartial]) -> Result<Answer> {
        let partials = decode_partials::<K>(partials.iter().copied())?;
        K::finish(&self.0, &plan_of::<K>(plan)?, partials)
    }

    fn compute_direct(&self, threads: usize, control: &Control) -> Result<Answer> {
        K::direct(&self.0, threads.max(1), control)
    }

    fn fault_injection(&self) -> &dyn FaultInjector {
        self
    }
}

impl<K: JobKind + FaultInjection> FaultInjector for Checked<K> {
    fn corrupt_for_testing(&self, partial: &mut EncodedPartial) -> Result<()> {
        let mut typed: K::Partial = partial.decode()?;
        K::corrupt_for_testing(&mut typed);
        *partial = EncodedPartial::encode(&typed);
        Ok(())
    }
}
