//! Job specifications: what to count (a kind and its parameters) and how to run
//! it (priority, attempts, lease TTL, replicas). Specs come from CLI flags, from
//! TOML/JSON files or from gRPC, and are checked once, at that edge, into a
//! [`ValidSpec`]: the proof that every value was accepted, which the runner
//! takes from then on instead of checking again.

use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cache::KernelCache;
use crate::dynamic::{ShardContext, SpecOps};
use crate::kind::{JobKind, SpecOf, WorkerRoom};
use crate::values::{EncodedTask, ShardOutcome};
use crate::{self as kinds, Control, Result, invalid};
use tally_wire::proto;

/// Upper bounds that keep one job within what a cluster can hold.
pub const MAX_PRIORITY: i32 = 1_000;
pub const MAX_ATTEMPTS: u32 = 100;
/// Most workers that may be asked to compute the same shard.
pub const MAX_REPLICAS: u32 = 3;
pub const MIN_LEASE_TTL_MS: u64 = 500;
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;
/// The largest cap on a job's slots (`max_slots`; 0 is no cap).
pub const MAX_JOB_SLOTS: u32 = 1_000_000;

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
    /// The most shards of the job leased at once across the cluster; 0 for
    /// no cap. A job of many shards then leaves slots to the others.
    #[serde(skip_serializing_if = "is_zero")]
    pub max_slots: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            priority: 0,
            max_attempts: 3,
            lease_ttl_ms: 15_000,
            force: false,
            replicas: 1,
            max_slots: 0,
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
        if self.max_slots > MAX_JOB_SLOTS {
            return Err(invalid!(
                "max slots must be at most {MAX_JOB_SLOTS} (0: no cap), got {}",
                self.max_slots
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
            max_slots: o.max_slots,
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
            kind: <S::Kind as JobKind>::NAME.to_string(),
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
/// the [`JobSpec`] it came from, with every default filled in. What the runner
/// does with it (plan, run, check, finish) are the methods of [`SpecOps`], to
/// which it dereferences.
#[derive(Clone)]
pub struct ValidSpec {
    spec: JobSpec,
    checked: Arc<dyn SpecOps>,
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

impl Deref for ValidSpec {
    type Target = dyn SpecOps;

    fn deref(&self) -> &(dyn SpecOps + 'static) {
        &*self.checked
    }
}

impl ValidSpec {
    /// Checks the options and the kind's parameters. (The memory the job
    /// needs is checked against the workers at submission:
    /// [`ValidSpec::fitted_to`].)
    pub fn new(spec: JobSpec) -> Result<ValidSpec> {
        spec.options.validate()?;
        let (checked, params) = kinds::lookup(&spec.kind)?.check(&spec.params)?;
        Ok(ValidSpec {
            spec: JobSpec { params, ..spec },
            checked,
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

    /// The job made to fit `worker` (the worker with the largest budget,
    /// `workers` says which) and a coordinator that takes shard outputs of
    /// at most `output_limit` bytes (`None`: any), with the choices the spec
    /// left open made for it; refused, unless forced, when not even its
    /// smallest shard fits, with the numbers, and always when a shard's
    /// output would be more than the coordinator takes.
    pub fn fitted_to(
        &self,
        worker: WorkerRoom,
        workers: &str,
        output_limit: Option<u64>,
    ) -> Result<ValidSpec> {
        let budget = worker.budget;
        let fitted = ValidSpec::new(JobSpec {
            params: self.fit_to_budget(worker, output_limit)?,
            ..self.spec.clone()
        })?;
        let Some(estimate) = fitted.estimate() else {
            return Ok(fitted);
        };
        if let Some(limit) = output_limit
            && estimate.largest_output_bytes > limit
        {
            return Err(invalid!(
                "{} sends a shard output of about {}, more than the {} a coordinator that keeps \
                 stage data itself takes: give the coordinator a --stage-store",
                estimate.subject,
                crate::kind::format_bytes(estimate.largest_output_bytes),
                crate::kind::format_bytes(limit)
            ));
        }
        if !self.options().force && estimate.shards_within(budget) == 0 {
            return Err(invalid!(
                "{}; that is more than {workers} has ({}): {}, or --force",
                estimate.describe(),
                crate::kind::format_bytes(budget),
                estimate.advice
            ));
        }
        Ok(fitted)
    }

    /// The same job cut into `shards` shards (the count picked for
    /// `--shards auto`); checked again.
    pub fn with_shard_count(&self, shards: u64) -> Result<ValidSpec> {
        ValidSpec::new(JobSpec {
            params: self.checked.with_shard_count(shards)?,
            ..self.spec.clone()
        })
    }

    /// Whether `other` asks the same question: the same spec, or one that
    /// differs only in a shard count the kind would pick itself (`--shards
    /// auto`: the count changes how the work is cut, not the answer).
    pub fn same_question(&self, other: &ValidSpec) -> bool {
        if self.spec == other.spec {
            return true;
        }
        let unsized_spec = |s: &ValidSpec| {
            s.with_shard_count(0)
                .ok()
                .filter(|u| u.shard_count() == Some(crate::kind::ShardCount::Auto))
        };
        match (unsized_spec(self), unsized_spec(other)) {
            (Some(a), Some(b)) => a.spec == b.spec,
            _ => false,
        }
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
                checkpoint: &crate::kind::NO_CHECKPOINT,
                cache,
                control,
                checkpoint_every: crate::kind::CHECKPOINT_EVERY,
                on_event: &mut |_| {},
                room: None,
            },
        )
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
            kind: Some(spec.to_proto()),
            options: Some(proto::RunnerOptions {
                priority: o.priority,
                max_attempts: o.max_attempts,
                lease_ttl_ms: o.lease_ttl_ms,
                force: o.force,
                replicas: o.replicas,
                max_slots: o.max_slots,
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
