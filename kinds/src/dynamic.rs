//! The runner's handle on a kind: [`Kind`], an object-safe face of
//! [`JobKind`] that takes and returns encoded values, implemented once for
//! every kind by [`Registered`]. Decoding, checking and encoding happen here,
//! at the boundary, so neither the kinds nor the runner deal with both forms.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, Checkpoint, FileReader, FinishedStage, JobKind, NextStage, Outcome, Planned,
    ResourceEstimate, ShardRun, StageRead,
};
use crate::values::{EncodedPartial, EncodedTask, JobPlan, PlannedShard, ShardEvent, ShardOutcome};
use crate::{Control, Error, Result, invalid};
use tally_wire::proto;

/// A kind's decoded, validated spec, behind the runner's back.
pub type TypedSpec = Arc<dyn Any + Send + Sync>;
/// A stage's decoded input, shared by the shards of the stage.
pub type StageInput = Arc<dyn Any + Send + Sync>;

/// What a running shard has at hand besides its task (see [`ShardRun`]).
pub struct ShardContext<'a> {
    pub input: Option<&'a StageInput>,
    pub checkpoint: &'a [u8],
    pub cache: &'a KernelCache,
    pub control: &'a Control,
    pub checkpoint_every: Duration,
    pub on_event: &'a mut dyn FnMut(ShardEvent),
}

/// A kind as the runner sees it. See [`JobKind`] for what each method means;
/// the `spec` arguments are the [`TypedSpec`] made by [`Kind::check`].
pub trait Kind: Send + Sync {
    fn name(&self) -> &'static str;
    /// `tally run|submit NAME` with the kind's own options.
    fn command(&self) -> clap::Command;
    fn params_from_matches(
        &self,
        matches: &clap::ArgMatches,
        files: &dyn FileReader,
    ) -> Result<Map<String, Value>>;
    fn params_from_proto(&self, kind: &proto::job_spec::Kind)
    -> Option<Result<Map<String, Value>>>;
    /// Parses and validates the spec's parameters; returns the typed spec and
    /// the parameters with every default filled in.
    fn check(&self, params: &Map<String, Value>) -> Result<(TypedSpec, Map<String, Value>)>;
    /// The parameters of the spec made to fit workers of `budget` bytes
    /// (see [`JobKind::fit_to_budget`]).
    fn fit_to_budget(&self, spec: &TypedSpec, budget: u64) -> Result<Map<String, Value>>;
    fn to_proto(&self, spec: &TypedSpec) -> proto::job_spec::Kind;
    fn describe(&self, spec: &TypedSpec) -> String;
    fn estimate(&self, spec: &TypedSpec) -> Option<ResourceEstimate>;
    fn attachments(&self, spec: &TypedSpec) -> Vec<String>;
    fn capability(&self, spec: &TypedSpec) -> Option<&'static str>;
    fn stages_known(&self, spec: &TypedSpec) -> bool;
    fn prepare(&self, spec: &TypedSpec, cache: &KernelCache, control: &Control) -> Result<JobPlan>;
    fn plan_stage(&self, spec: &TypedSpec, plan: &JobPlan, stage: u32)
    -> Result<Vec<PlannedShard>>;
    fn trim_plan(&self, plan: &mut JobPlan) -> Result<()>;
    /// The next stage's shards and a line for the events, or `None` when the
    /// job is done; may update the plan (see [`JobKind::next_stage`]).
    fn next_stage(
        &self,
        spec: &TypedSpec,
        plan: &mut JobPlan,
        finished: u32,
        partials: &[EncodedPartial],
    ) -> Result<Option<(Vec<PlannedShard>, String)>>;
    fn stage_reads(
        &self,
        spec: &TypedSpec,
        stage: u32,
        task: &EncodedTask,
    ) -> Result<Vec<StageRead>>;
    fn decode_stage_inputs(&self, spec: &TypedSpec, parts: &[&[u8]]) -> Result<StageInput>;
    fn kept_stages(&self, spec: &TypedSpec, plan: &JobPlan, stage: u32) -> Result<Vec<u32>>;
    fn execute(
        &self,
        spec: &TypedSpec,
        task: &EncodedTask,
        context: ShardContext<'_>,
    ) -> Result<ShardOutcome>;
    /// Checks that a checkpoint's partial is one of the kind's partials.
    fn check_checkpoint(&self, partial: &EncodedPartial) -> Result<()>;
    /// `output` is `None` when the stage output is in a stage store outside
    /// the coordinator: only the partial's type is checked then (its readers
    /// check the output as they decode it).
    fn check_result(
        &self,
        spec: &TypedSpec,
        plan: &JobPlan,
        task: &EncodedTask,
        partial: &EncodedPartial,
        output: Option<&[u8]>,
    ) -> Result<()>;
    fn finish(
        &self,
        spec: &TypedSpec,
        plan: &JobPlan,
        partials: &[EncodedPartial],
    ) -> Result<Answer>;
    fn direct(&self, spec: &TypedSpec, threads: usize, control: &Control) -> Result<Answer>;
    fn corrupt_for_testing(&self, partial: &mut EncodedPartial) -> Result<()>;
}

/// The [`Kind`] of a [`JobKind`]: `&Registered::<Hex>::KIND` in the registry.
pub struct Registered<K>(PhantomData<fn() -> K>);

impl<K> Registered<K> {
    pub const KIND: Registered<K> = Registered(PhantomData);
}

fn typed<K: JobKind>(spec: &TypedSpec) -> &K::Spec {
    spec.downcast_ref::<K::Spec>()
        .unwrap_or_else(|| unreachable!("a {} spec handed to another kind", K::NAME))
}

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

fn decode_partials<K: JobKind>(partials: &[EncodedPartial]) -> Result<Vec<K::Partial>> {
    partials
        .iter()
        .map(|p| {
            p.decode::<K::Partial>().map_err(|e| {
                Error::Internal(format!("stored {} result does not load: {e}", K::NAME))
            })
        })
        .collect()
}

impl<K: JobKind> Kind for Registered<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn command(&self) -> clap::Command {
        use clap::Args;
        let command = clap::Command::new(K::NAME).about(K::ABOUT);
        let command = if K::EXAMPLES.is_empty() {
            command
        } else {
            command.after_help(format!("Examples:\n{}", K::EXAMPLES))
        };
        K::Args::augment_args(command)
    }

    fn params_from_matches(
        &self,
        matches: &clap::ArgMatches,
        files: &dyn FileReader,
    ) -> Result<Map<String, Value>> {
        let args = <K::Args as clap::FromArgMatches>::from_arg_matches(matches)
            .map_err(|e| invalid!("{e}"))?;
        to_map(&K::spec_from_args(args, files)?)
    }

    fn params_from_proto(
        &self,
        kind: &proto::job_spec::Kind,
    ) -> Option<Result<Map<String, Value>>> {
        K::spec_from_proto(kind).map(|spec| to_map(&spec?))
    }

    fn check(&self, params: &Map<String, Value>) -> Result<(TypedSpec, Map<String, Value>)> {
        let spec = K::Spec::deserialize(Value::Object(params.clone()))
            .map_err(|e| invalid!("invalid {} job spec: {e}", K::NAME))?;
        K::validate(&spec)?;
        let normalised = to_map(&spec)?;
        Ok((Arc::new(spec), normalised))
    }

    fn fit_to_budget(&self, spec: &TypedSpec, budget: u64) -> Result<Map<String, Value>> {
        to_map(&K::fit_to_budget(typed::<K>(spec), budget))
    }

    fn to_proto(&self, spec: &TypedSpec) -> proto::job_spec::Kind {
        K::spec_to_proto(typed::<K>(spec))
    }

    fn describe(&self, spec: &TypedSpec) -> String {
        K::describe(typed::<K>(spec))
    }

    fn estimate(&self, spec: &TypedSpec) -> Option<ResourceEstimate> {
        K::estimate(typed::<K>(spec))
    }

    fn attachments(&self, spec: &TypedSpec) -> Vec<String> {
        K::attachments(typed::<K>(spec))
    }

    fn capability(&self, spec: &TypedSpec) -> Option<&'static str> {
        K::capability(typed::<K>(spec))
    }

    fn stages_known(&self, spec: &TypedSpec) -> bool {
        K::stages_known(typed::<K>(spec))
    }

    fn prepare(&self, spec: &TypedSpec, cache: &KernelCache, control: &Control) -> Result<JobPlan> {
        let spec = typed::<K>(spec);
        let plan = K::prepare(spec, cache, control)?;
        Ok(JobPlan {
            stages_total: K::stages(spec, &plan),
            facts: to_map(&plan)?,
        })
    }

    fn plan_stage(
        &self,
        spec: &TypedSpec,
        plan: &JobPlan,
        stage: u32,
    ) -> Result<Vec<PlannedShard>> {
        if stage == 0 || stage > plan.stages_total {
            return Err(Error::Internal(format!(
                "stage {stage} is outside 1..={}",
                plan.stages_total
            )));
        }
        let shards = K::plan_stage(typed::<K>(spec), &plan_of::<K>(plan)?, stage)?;
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
        spec: &TypedSpec,
        plan: &mut JobPlan,
        finished: u32,
        partials: &[EncodedPartial],
    ) -> Result<Option<(Vec<PlannedShard>, String)>> {
        let partials = decode_partials::<K>(partials)?;
        let mut facts = plan_of::<K>(plan)?;
        let stage = FinishedStage {
            stage: finished,
            stages_total: plan.stages_total,
            partials: &partials,
        };
        let next = K::next_stage(typed::<K>(spec), &mut facts, stage)?;
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

    fn stage_reads(
        &self,
        spec: &TypedSpec,
        stage: u32,
        task: &EncodedTask,
    ) -> Result<Vec<StageRead>> {
        Ok(K::stage_reads(typed::<K>(spec), stage, &task.decode()?))
    }

    fn decode_stage_inputs(&self, spec: &TypedSpec, parts: &[&[u8]]) -> Result<StageInput> {
        Ok(Arc::new(K::decode_stage_inputs(typed::<K>(spec), parts)?))
    }

    fn kept_stages(&self, spec: &TypedSpec, plan: &JobPlan, stage: u32) -> Result<Vec<u32>> {
        Ok(K::kept_stages(
            typed::<K>(spec),
            &plan_of::<K>(plan)?,
            stage,
        ))
    }

    fn execute(
        &self,
        spec: &TypedSpec,
        task: &EncodedTask,
        context: ShardContext<'_>,
    ) -> Result<ShardOutcome> {
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
        };
        let Outcome {
            output,
            partial,
            work_done,
        } = K::execute(typed::<K>(spec), &task, &mut run)?;
        Ok(ShardOutcome {
            output,
            partial: EncodedPartial::encode(&partial),
            work_done,
        })
    }

    fn check_checkpoint(&self, partial: &EncodedPartial) -> Result<()> {
        partial.decode::<K::Partial>().map(|_| ())
    }

    fn check_result(
        &self,
        spec: &TypedSpec,
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
        K::check_result(
            typed::<K>(spec),
            &plan_of::<K>(plan)?,
            &task,
            &partial,
            output,
        )
    }

    fn finish(
        &self,
        spec: &TypedSpec,
        plan: &JobPlan,
        partials: &[EncodedPartial],
    ) -> Result<Answer> {
        let partials = decode_partials::<K>(partials)?;
        K::finish(typed::<K>(spec), &plan_of::<K>(plan)?, partials)
    }

    fn direct(&self, spec: &TypedSpec, threads: usize, control: &Control) -> Result<Answer> {
        K::direct(typed::<K>(spec), threads.max(1), control)
    }

    fn corrupt_for_testing(&self, partial: &mut EncodedPartial) -> Result<()> {
        let mut typed: K::Partial = partial.decode()?;
        K::corrupt_for_testing(&mut typed);
        *partial = EncodedPartial::encode(&typed);
        Ok(())
    }
}
