//! Job specifications: what to count (a kind and its parameters) and how to run
//! it (priority, attempts, lease TTL, replicas). Specs come from CLI flags, from
//! TOML/JSON files or from gRPC, and are checked once, at that edge, into a
//! [`ValidSpec`]: the proof that every value was accepted, which the runner
//! takes from then on instead of checking again.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cache::KernelCache;
use crate::dynamic::{Kind, ShardContext, StageInput, TypedSpec};
use crate::kind::{Answer, JobKind, ResourceEstimate, SpecOf, StageRead};
use crate::values::{EncodedPartial, EncodedTask, JobPlan, PlannedShard, ShardOutcome};
use crate::{self as kinds, Control, Result, invalid};
use tally_wire::proto;

/// Upper bounds that keep one job within what a cluster can hold.
pub const MAX_PRIORITY: i32 = 1_000;
pub const MAX_ATTEMPTS: u32 = 100;
/// Most workers that may be asked to compute the same shard.
pub const MAX_REPLICAS: u32 = 3;
pub const MIN_LEASE_TTL_MS: u64 = 500;
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;

/// How to run a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerOptions {
    pub priority: i32,
    pub max_attempts: u32,
    pub lease_ttl_ms: u64,
    /// Run even if the resource estimate says the job does not fit.
    pub force: bool,
    /// Distinct workers that must compute each shard and agree on its result.
    pub replicas: u32,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            priority: 0,
            max_attempts: 3,
            lease_ttl_ms: 15_000,
            force: false,
            replicas: 1,
        }
    }
}

impl RunnerOptions {
    /// Checks every value; the message names the value and the accepted range.
    pub fn validate(&self) -> Result<()> {
        // Not `abs()`: it overflows on i32::MIN.
        if !(-MAX_PRIORITY..=MAX_PRIORITY).contains(&self.priority) {
            return Err(invalid!(
                "priority must be between -{MAX_PRIORITY} and {MAX_PRIORITY}, got {}",
                self.priority
            ));
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.max_attempts) {
            return Err(invalid!(
                "max attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                self.max_attempts
            ));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(invalid!(
                "replicas must be between 1 and {MAX_REPLICAS}, got {}",
                self.replicas
            ));
        }
        if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&self.lease_ttl_ms) {
            return Err(invalid!(
                "lease TTL must be between {MIN_LEASE_TTL_MS} and {MAX_LEASE_TTL_MS} ms, got {}",
                self.lease_ttl_ms
            ));
        }
        Ok(())
    }

    fn from_proto(o: Option<&proto::RunnerOptions>) -> RunnerOptions {
        let defaults = RunnerOptions::default();
        let Some(o) = o else {
            return defaults;
        };
        let or_default = |value: u64, default: u64| if value == 0 { default } else { value };
        RunnerOptions {
            priority: o.priority,
            max_attempts: or_default(o.max_attempts.into(), defaults.max_attempts.into()) as u32,
            lease_ttl_ms: or_default(o.lease_ttl_ms, defaults.lease_ttl_ms),
            force: o.force,
            replicas: or_default(o.replicas.into(), defaults.replicas.into()) as u32,
        }
    }
}

/// A job spec as written: `{"kind": "hex", "side": 11, "options": {...}}`.
/// Unchecked; [`ValidSpec::new`] checks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub kind: String,
    /// The kind's parameters, read by the kind alone.
    #[serde(flatten)]
    pub params: Map<String, Value>,
    #[serde(default)]
    pub options: RunnerOptions,
}

impl JobSpec {
    /// A spec of the kind whose parameters `params` are, with default options.
    pub fn new<S: SpecOf>(params: S) -> JobSpec {
        let params = match serde_json::to_value(&params) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("kind specs serialise to JSON objects"),
        };
        JobSpec {
            kind: S::Kind::NAME.to_string(),
            params,
            options: RunnerOptions::default(),
        }
    }

    /// Parses a JSON spec file's text and checks it.
    pub fn from_json(text: &str) -> Result<ValidSpec> {
        let spec: JobSpec =
            serde_json::from_str(text).map_err(|e| invalid!("invalid job spec: {e}"))?;
        ValidSpec::new(spec)
    }
}

/// A spec whose every value was checked, with the kind's decoded parameters.
/// Made only by [`ValidSpec::new`] (and the conversions that call it); stored as
/// the [`JobSpec`] it came from, with every default filled in.
#[derive(Clone)]
pub struct ValidSpec {
    spec: JobSpec,
    kind: &'static dyn Kind,
    typed: TypedSpec,
}

impl std::fmt::Debug for ValidSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.spec.fmt(f)
    }
}

impl PartialEq for ValidSpec {
    fn eq(&self, other: &ValidSpec) -> bool {
        self.spec == other.spec
    }
}

impl ValidSpec {
    /// Checks the options and the kind's parameters. (The memory the job
    /// needs is checked against the workers at submission:
    /// [`ValidSpec::fitted_to`].)
    pub fn new(spec: JobSpec) -> Result<ValidSpec> {
        spec.options.validate()?;
        let kind = kinds::lookup(&spec.kind)?;
        let (typed, params) = kind.check(&spec.params)?;
        Ok(ValidSpec {
            spec: JobSpec { params, ..spec },
            kind,
            typed,
        })
    }

    /// A spec of `params`' kind with default options.
    pub fn of<S: SpecOf>(params: S) -> Result<ValidSpec> {
        ValidSpec::new(JobSpec::new(params))
    }

    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    pub fn options(&self) -> &RunnerOptions {
        &self.spec.options
    }

    /// The same job with other runner options.
    pub fn with_options(&self, options: RunnerOptions) -> Result<ValidSpec> {
        options.validate()?;
        ValidSpec::new(JobSpec {
            options,
            ..self.spec.clone()
        })
    }

    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// The kind's own parameters, when the spec is of kind `S`.
    pub fn params<S: SpecOf>(&self) -> Option<&S> {
        self.typed.downcast_ref::<S>()
    }

    /// A one-line human description, e.g. `hex side 11 mod 1000000007 (cell-step)`.
    pub fn describe(&self) -> String {
        self.kind.describe(&self.typed)
    }

    pub fn estimate(&self) -> Option<ResourceEstimate> {
        self.kind.estimate(&self.typed)
    }

    /// The SHA-256 (hex) of every attachment the job needs.
    pub fn attachments(&self) -> Vec<String> {
        self.kind.attachments(&self.typed)
    }

    /// What a worker must offer to run the job's shards, if anything.
    pub fn capability(&self) -> Option<&'static str> {
        self.kind.capability(&self.typed)
    }

    /// Whether the plan knows its stage count from the start (see
    /// `JobKind::stages_known`).
    pub fn stages_known(&self) -> bool {
        self.kind.stages_known(&self.typed)
    }

    /// The job made to fit workers of `budget` bytes (the largest budget of
    /// the workers, `workers` says which), with the choices the spec left
    /// open made for it; refused, unless forced, when not even its smallest
    /// shard fits, with the numbers.
    pub fn fitted_to(&self, budget: u64, workers: &str) -> Result<ValidSpec> {
        let params = self.kind.fit_to_budget(&self.typed, budget)?;
        let fitted = ValidSpec::new(JobSpec {
            params,
            ..self.spec.clone()
        })?;
        if !self.options().force
            && let Some(estimate) = fitted.estimate()
            && estimate.shards_within(budget) == 0
        {
            return Err(invalid!(
                "{}; that is more than {workers} has ({}): {}, or --force",
                estimate.describe(),
                crate::kind::format_bytes(budget),
                estimate.advice
            ));
        }
        Ok(fitted)
    }

    /// Computes the facts the plan needs (the expensive part of planning: building
    /// a graph, a search). Runs once per job, at submission.
    pub fn prepare(&self, cache: &KernelCache, control: &Control) -> Result<JobPlan> {
        self.kind.prepare(&self.typed, cache, control)
    }

    /// The shards of stage `stage` (1-based). Deterministic.
    pub fn plan_stage(&self, plan: &JobPlan, stage: u32) -> Result<Vec<PlannedShard>> {
        self.kind.plan_stage(&self.typed, plan, stage)
    }

    /// The plan as the job record keeps it once the first stage is planned.
    pub fn trim_plan(&self, plan: &mut JobPlan) -> Result<()> {
        self.kind.trim_plan(plan)
    }

    /// What follows stage `finished` given its partials (in shard order): the
    /// next stage's shards and a line for the events, or `None` when the job
    /// is done. May update `plan`, which is stored with the transition.
    pub fn next_stage(
        &self,
        plan: &mut JobPlan,
        finished: u32,
        partials: &[EncodedPartial],
    ) -> Result<Option<(Vec<PlannedShard>, String)>> {
        self.kind.next_stage(&self.typed, plan, finished, partials)
    }

    /// The stage outputs a shard of `stage` with `task` reads, in order.
    pub fn stage_reads(&self, stage: u32, task: &EncodedTask) -> Result<Vec<StageRead>> {
        self.kind.stage_reads(&self.typed, stage, task)
    }

    /// Decodes the outputs [`ValidSpec::stage_reads`] named, in its order.
    pub fn decode_stage_inputs(&self, parts: &[&[u8]]) -> Result<StageInput> {
        self.kind.decode_stage_inputs(&self.typed, parts)
    }

    /// The outputs of stages before `stage - 1` that must be kept while the
    /// job is at `stage` (see [`crate::kind::JobKind::kept_stages`]).
    pub fn kept_stages(&self, plan: &JobPlan, stage: u32) -> Result<Vec<u32>> {
        self.kind.kept_stages(&self.typed, plan, stage)
    }

    /// Runs one shard (see [`ShardContext`]).
    pub fn execute(&self, task: &EncodedTask, context: ShardContext<'_>) -> Result<ShardOutcome> {
        self.kind.execute(&self.typed, task, context)
    }

    /// Runs a shard from its start, with no stage input and no checkpoints.
    pub fn execute_once(
        &self,
        task: &EncodedTask,
        cache: &KernelCache,
        control: &Control,
    ) -> Result<ShardOutcome> {
        self.execute(
            task,
            ShardContext {
                input: None,
                checkpoint: &[],
                cache,
                control,
                checkpoint_every: crate::kind::CHECKPOINT_EVERY,
                on_event: &mut |_| {},
            },
        )
    }

    pub fn check_checkpoint(&self, partial: &EncodedPartial) -> Result<()> {
        self.kind.check_checkpoint(partial)
    }

    /// Checks the shape of a reported result against its shard before it is
    /// accepted; with the output in a stage store (`None`), only its partial.
    pub fn check_result(
        &self,
        plan: &JobPlan,
        task: &EncodedTask,
        partial: &EncodedPartial,
        output: Option<&[u8]>,
    ) -> Result<()> {
        self.kind
            .check_result(&self.typed, plan, task, partial, output)
    }

    /// The answer from the partial results of the last stage, in shard order.
    pub fn finish(&self, plan: &JobPlan, partials: &[EncodedPartial]) -> Result<Answer> {
        self.kind.finish(&self.typed, plan, partials)
    }

    /// The answer computed in this process by the kernel alone, without shards:
    /// the reference every run through the runner must equal.
    pub fn compute_direct(&self, threads: usize, control: &Control) -> Result<Answer> {
        self.kind.direct(&self.typed, threads, control)
    }

    /// Fault injection for tests: alters a result the way a faulty machine might.
    pub fn corrupt_for_testing(&self, partial: &mut EncodedPartial) -> Result<()> {
        self.kind.corrupt_for_testing(partial)
    }
}

impl Serialize for ValidSpec {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.spec.serialize(serializer)
    }
}

/// Stored specs are checked again when they are read back: a record is an
/// edge too (written by another version, or damaged).
impl<'de> Deserialize<'de> for ValidSpec {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<ValidSpec, D::Error> {
        let spec = JobSpec::deserialize(deserializer)?;
        ValidSpec::new(spec).map_err(serde::de::Error::custom)
    }
}

// ------------------------------------------------------------------ proto

impl From<&ValidSpec> for proto::JobSpec {
    fn from(spec: &ValidSpec) -> proto::JobSpec {
        let o = spec.options();
        proto::JobSpec {
            kind: Some(spec.kind.to_proto(&spec.typed)),
            options: Some(proto::RunnerOptions {
                priority: o.priority,
                max_attempts: o.max_attempts,
                lease_ttl_ms: o.lease_ttl_ms,
                force: o.force,
                replicas: o.replicas,
            }),
        }
    }
}

impl TryFrom<&proto::JobSpec> for ValidSpec {
    type Error = crate::Error;

    /// Fills defaults for zero values and checks the result.
    fn try_from(p: &proto::JobSpec) -> Result<ValidSpec> {
        let Some(message) = p.kind.as_ref() else {
            return Err(invalid!(
                "the job spec names no kind ({})",
                kinds::names().join(", ")
            ));
        };
        let (kind, params) = kinds::KINDS
            .iter()
            .find_map(|kind| Some((kind, kind.params_from_proto(message)?)))
            .ok_or_else(|| crate::Error::Internal("a proto kind with no registered kind".into()))?;
        ValidSpec::new(JobSpec {
            kind: kind.name().to_string(),
            params: params?,
            options: RunnerOptions::from_proto(p.options.as_ref()),
        })
    }
}
