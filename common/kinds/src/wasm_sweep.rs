//! `wasm-sweep`: a user's sweep over keyed states, compiled to WebAssembly
//! (kernel ABI version 2, `docs/wasm-abi.md`). The module says what a
//! state's children and weights are; the runner does the rest, one stage a
//! level: level `s`'s shard `q` sums the counts of the states every shard of
//! level `s - 1` sent bucket `q` (modulo each prime of the job at once),
//! adds their weights times their counts to the answer, and sends their
//! children on in buckets by a hash of their keys. The answer is the sum
//! over every level, joined by the CRT for an exact job and checked by its
//! spare prime.
//!
//! The module travels as the `wasm` kind's does (an attachment named by its
//! SHA-256, run only by workers started with `--allow-wasm`). The
//! coordinator compiles and checks it, never runs it: the module's plan (its
//! weights a state, when the sweep ends, its limits) comes back with the
//! first level's result, and every later shard's must equal it, so a module
//! whose plan depends on anything but its parameters fails the job.

use crate::guest_args::GuestArgs;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use num_bigint::BigUint;
use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
pub use crate::exact::{DEFAULT_MODULUS, MAX_BOUND_BITS};
use crate::exact::{
    SPARE_PRIMES, check_choice, checked_value, describe_choice, exact_primes, modulus_from_proto,
};
use crate::guest::{
    GuestSweepEnd, GuestSweepModule, GuestSweepPlan, MAX_SWEEP_CHILDREN, MAX_SWEEP_KEY_LIMIT,
    MAX_SWEEP_OUTPUTS, MAX_SWEEP_STEPS, MODULES_KEPT, SEND_MODULE, WASM_CAPABILITY,
    check_module_and_params, described_params,
};
use crate::kind::{
    Answer, FaultInjection, FileReader, FinishedStage, JobKind, NextStage, Outcome, Planned,
    ShardRun, SpecArgs, SpecOf, StageRead, single_input, single_stored,
};
use crate::{Control, Error, MemorySpill, Result, Room, Stored, invalid};
use tally_kernels::buckets::{bucket_count, gathered_ranges, levels_note, split_buckets};
use tally_kernels::spill::{CountedList, StoredSource, stage_output};
use tally_kernels::sweep::{
    LevelShard, SweepState, decode_flat, encode_states, key_bucket, sweep_level_within,
};
use tally_wire::proto;

pub struct WasmSweep;

/// The most shards a level.
pub const MAX_BUCKETS: u32 = 1024;
/// States of a level a shard: a level shard keeps within its memory share
/// by spilling, so a level is split over the slots, and finer only when it
/// is this large (few shards, few copies of a state reached from several).
const STATES_PER_BUCKET: u64 = 1 << 26;
/// States worth a shard of their own.
const MIN_STATES_PER_BUCKET: u64 = 4096;
/// States of a level the module is asked about at once.
const BATCH: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WasmSweepSpecFields")]
pub struct WasmSweepSpec {
    /// The module's SHA-256, lowercase hex.
    pub module_sha256: String,
    /// `K=V` lines for the module, in order.
    pub params: Vec<String>,
    /// The prime; 0 when `exact`.
    pub modulus: u64,
    pub exact: bool,
    /// With `exact`: every value of the answer is below 2^bound_bits.
    pub bound_bits: u32,
    /// Shards a level; 0 chooses from each level's size.
    pub buckets: u32,
}

/// A spec as a spec file may write it: a modulus left out is the default
/// prime, or none (0) for an exact job.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WasmSweepSpecFields {
    module_sha256: String,
    #[serde(default)]
    params: Vec<String>,
    modulus: Option<u64>,
    #[serde(default)]
    exact: bool,
    #[serde(default)]
    bound_bits: u32,
    #[serde(default)]
    buckets: u32,
}

impl From<WasmSweepSpecFields> for WasmSweepSpec {
    fn from(f: WasmSweepSpecFields) -> WasmSweepSpec {
        let default_modulus = if f.exact { 0 } else { DEFAULT_MODULUS };
        WasmSweepSpec {
            module_sha256: f.module_sha256,
            params: f.params,
            modulus: f.modulus.unwrap_or(default_modulus),
            exact: f.exact,
            bound_bits: f.bound_bits,
            buckets: f.buckets,
        }
    }
}

impl SpecOf for WasmSweepSpec {
    type Kind = WasmSweep;
}

#[derive(clap::Args, Debug)]
pub struct WasmSweepArgs {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// Shards a level, 1 to 1024 [default: chosen from each level's size].
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    pub buckets: u32,
}

impl SpecArgs<WasmSweepSpec> for WasmSweepArgs {
    fn into_spec(self, files: &dyn FileReader) -> Result<WasmSweepSpec> {
        let guest = self.guest.into_parts(files)?;
        Ok(WasmSweepSpec {
            module_sha256: guest.module_sha256,
            params: guest.params,
            modulus: guest.modulus,
            exact: guest.exact,
            bound_bits: guest.bound_bits,
            buckets: self.buckets,
        })
    }
}

/// The module's plan as the runner records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SweepShape {
    pub key_limit: u32,
    /// Weights a state: the answer's length.
    pub outputs: u32,
    /// The sweep's last level, or none: it ends at its first empty level.
    pub last_level: Option<u32>,
    pub most_children: u32,
}

impl SweepShape {
    fn of(plan: GuestSweepPlan) -> SweepShape {
        SweepShape {
            key_limit: plan.key_limit as u32,
            outputs: plan.outputs as u32,
            last_level: match plan.end {
                GuestSweepEnd::Steps(steps) => Some(steps),
                GuestSweepEnd::WhenEmpty => None,
            },
            most_children: plan.most_children as u32,
        }
    }

    /// Within the ABI's limits (the sandbox checked them; a result that
    /// says otherwise is refused).
    fn check(&self) -> Result<()> {
        let within = (1..=MAX_SWEEP_KEY_LIMIT as u32).contains(&self.key_limit)
            && (1..=MAX_SWEEP_OUTPUTS as u32).contains(&self.outputs)
            && self.last_level.is_none_or(|l| l <= MAX_SWEEP_STEPS)
            && (1..=MAX_SWEEP_CHILDREN as u32).contains(&self.most_children);
        match within {
            true => Ok(()),
            false => Err(invalid!(
                "the module's plan {self:?} is past the ABI's limits"
            )),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasmSweepPlan {
    /// The primes every count is kept modulo: the job's, or those of
    /// `exact` (the bound's primes, then the spares).
    #[serde(default)]
    pub primes: Vec<u64>,
    /// With `exact`: how many of the last `primes` are spares.
    #[serde(default)]
    pub spares: usize,
    /// The module's plan, from the first level's shard.
    #[serde(default)]
    pub shape: Option<SweepShape>,
    /// The states of each level found so far.
    #[serde(default)]
    pub levels: Vec<u64>,
    /// For each prime, the answer so far: the sums over the levels done of
    /// each state's weights times its count.
    #[serde(default)]
    pub sums: Vec<Vec<u64>>,
}

/// Bucket `bucket` of level `level` (0: the module's start states, in one
/// shard), sending the next level's states in `buckets_out` buckets (0 on
/// level 0: as many as its states call for, which the shard decides).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WasmSweepTask {
    pub level: u32,
    pub bucket: u32,
    pub buckets_out: u32,
    /// The job's primes (a shard sees no plan).
    pub primes: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WasmSweepPartial {
    /// The module's plan as this shard's instance gave it.
    pub shape: SweepShape,
    /// The distinct states of the level in this shard's bucket.
    pub states: u64,
    /// The distinct children it sent, over all buckets.
    pub sent: u64,
    /// The buckets it sent them in.
    pub buckets: u32,
    /// For each prime, the sums of its states' weights times their counts.
    pub answer: Vec<Vec<u64>>,
}

/// What a level shard reads: bucket `q` of every shard of the level before,
/// framed as they were gathered, in memory or in a file the worker wrote as
/// it arrived; each sender's list is read as a stream and never held
/// decoded whole.
pub struct SweepInput {
    stored: Arc<dyn Stored>,
    /// Each sender's list: its byte range.
    senders: Vec<Range<u64>>,
}

impl SweepInput {
    /// The gathered lists, their framing checked (the lists are checked as
    /// they are read).
    fn new(stored: Arc<dyn Stored>) -> Result<SweepInput> {
        let senders = gathered_ranges(&*stored)?;
        Ok(SweepInput { stored, senders })
    }
}

/// A compiled sweep module in the kernel cache.
struct LoadedSweep(Arc<dyn GuestSweepModule>);

/// The buckets level 0 sends its children in: one per so many of its
/// states (the next level is about as large), or the spec's count.
fn first_buckets(spec: &WasmSweepSpec, states: u64) -> u32 {
    bucket_count(
        states,
        STATES_PER_BUCKET,
        MIN_STATES_PER_BUCKET,
        spec.buckets,
        MAX_BUCKETS,
        1,
    )
}

/// The buckets a level of about `states` states sends the level after it in,
/// spread over `slots`.
fn buckets_after(spec: &WasmSweepSpec, states: u64, slots: u32) -> u32 {
    bucket_count(
        states,
        STATES_PER_BUCKET,
        MIN_STATES_PER_BUCKET,
        spec.buckets,
        MAX_BUCKETS,
        slots,
    )
}

/// `a + b` modulo `p`, both below it.
fn add_mod(a: u64, b: u64, p: u64) -> u64 {
    ((u128::from(a) + u128::from(b)) % u128::from(p)) as u64
}

/// The module, compiled once per process.
fn loaded(cache: &KernelCache, digest: &str) -> Result<Arc<LoadedSweep>> {
    let runtime = cache.guest_runtime().ok_or_else(|| {
        Error::Failed("this worker does not run wasm modules (start it with --allow-wasm)".into())
    })?;
    cache.get_or_build::<LoadedSweep>(digest, MODULES_KEPT, || {
        let bytes = cache
            .attachment(digest)
            .ok_or_else(|| Error::Failed(format!("the module {digest} was not fetched")))?;
        Ok(LoadedSweep(runtime.load_sweep(&bytes)?))
    })
}

/// The module's start states summed by key, each count modulo every prime,
/// as a level list, and how many there are.
fn start_list(starts: Vec<(Vec<u8>, u64)>, primes: &[u64]) -> (Vec<u8>, u64) {
    let mut summed: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
    for (key, count) in starts {
        let sums = summed.entry(key).or_insert_with(|| vec![0; primes.len()]);
        for (sum, &p) in sums.iter_mut().zip(primes) {
            *sum = add_mod(*sum, count % p, p);
        }
    }
    let states: Vec<SweepState> = summed.into_iter().collect();
    (encode_states(&states, primes.len()), states.len() as u64)
}

impl JobKind for WasmSweep {
    type Spec = WasmSweepSpec;
    type Args = WasmSweepArgs;
    type Plan = WasmSweepPlan;
    type Task = WasmSweepTask;
    type Partial = WasmSweepPartial;
    type StageInput = SweepInput;

    const NAME: &'static str = "wasm-sweep";
    const ABOUT: &'static str = "A user's sweep over keyed states compiled to WebAssembly: counts summed level by level, modulo a prime or exact.";
    const EXAMPLES: &'static str = "  tally run wasm-sweep --module examples/wasm/independent-sets-sweep.wasm --param n=12\n  tally run wasm-sweep --module examples/wasm/independent-sets-sweep.wasm --param n=16 --exact --bound-bits 128";

    fn spec_to_proto(spec: &WasmSweepSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::WasmSweep(proto::WasmSweepSpec {
            module_sha256: spec.module_sha256.clone(),
            params: spec.params.clone(),
            modulus: spec.modulus,
            exact: spec.exact,
            bound_bits: spec.bound_bits,
            buckets: spec.buckets,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<WasmSweepSpec>> {
        let proto::job_spec::Kind::WasmSweep(w) = kind else {
            return None;
        };
        Some(Ok(WasmSweepSpec {
            module_sha256: w.module_sha256.clone(),
            params: w.params.clone(),
            modulus: modulus_from_proto(w.exact, w.modulus),
            exact: w.exact,
            bound_bits: w.bound_bits,
            buckets: w.buckets,
        }))
    }

    fn validate(spec: &WasmSweepSpec) -> Result<()> {
        check_module_and_params(&spec.module_sha256, &spec.params)?;
        if spec.buckets > MAX_BUCKETS {
            return Err(invalid!(
                "buckets must be at most {MAX_BUCKETS} (0 chooses from each level's size), not {}",
                spec.buckets
            ));
        }
        check_choice(spec.exact, spec.modulus, spec.bound_bits, "sweep").map(|_| ())
    }

    fn describe(spec: &WasmSweepSpec) -> String {
        let over = describe_choice(spec.exact, spec.modulus, spec.bound_bits);
        let params = described_params(&spec.params);
        format!(
            "wasm sweep sha256:{}{params}, {over}",
            &spec.module_sha256[..12]
        )
    }

    /// None: a sweep needs a module, and has no direct computation.
    fn small_example() -> Option<WasmSweepSpec> {
        None
    }

    fn attachments(spec: &WasmSweepSpec) -> Vec<String> {
        vec![spec.module_sha256.clone()]
    }

    fn capability(_spec: &WasmSweepSpec) -> Option<&'static str> {
        Some(WASM_CAPABILITY)
    }

    fn stages_known(_spec: &WasmSweepSpec) -> bool {
        false
    }

    /// Checks the module (compiled and its exports checked, never run) and
    /// chooses the primes.
    fn prepare(
        spec: &WasmSweepSpec,
        cache: &KernelCache,
        _control: &Control,
    ) -> Result<WasmSweepPlan> {
        let runtime = cache
            .guest_runtime()
            .ok_or_else(|| Error::Internal("no sandbox to check wasm modules with".into()))?;
        let module = cache.attachment(&spec.module_sha256).ok_or_else(|| {
            invalid!(
                "no module with SHA-256 {} is stored: {SEND_MODULE}",
                spec.module_sha256
            )
        })?;
        cache.get_or_build::<LoadedSweep>(&spec.module_sha256, MODULES_KEPT, || {
            Ok(LoadedSweep(runtime.load_sweep(&module)?))
        })?;
        let (primes, spares) = if spec.exact {
            let described = serde_json::to_vec(spec).expect("a sweep spec serialises");
            (exact_primes(spec.bound_bits, &described), SPARE_PRIMES)
        } else {
            (vec![spec.modulus], 0)
        };
        Ok(WasmSweepPlan {
            primes,
            spares,
            ..WasmSweepPlan::default()
        })
    }

    fn plan_stage(
        _spec: &WasmSweepSpec,
        plan: &WasmSweepPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<WasmSweepTask>>> {
        Ok(vec![Planned {
            task: WasmSweepTask {
                level: 0,
                bucket: 0,
                buckets_out: 0,
                primes: plan.primes.clone(),
            },
            work_total: 1,
        }])
    }

    fn next_stage(
        spec: &WasmSweepSpec,
        plan: &mut WasmSweepPlan,
        finished: FinishedStage<'_, WasmSweepPartial>,
    ) -> Result<NextStage<WasmSweepTask>> {
        let level = plan.levels.len() as u32;
        let Some(first) = finished.partials.first() else {
            return Err(Error::Internal(format!(
                "sweep level {level} had no shards"
            )));
        };
        let shape = *plan.shape.get_or_insert(first.shape);
        if plan.sums.is_empty() {
            plan.sums = vec![vec![0; shape.outputs as usize]; plan.primes.len()];
        }
        let (mut states, mut sent) = (0u64, 0u64);
        for partial in finished.partials {
            if partial.shape != shape {
                return Err(invalid!(
                    "the module's plan changed from {shape:?} to {:?} at level {level}: it \
                     must depend on its parameters alone",
                    partial.shape
                ));
            }
            states += partial.states;
            sent += partial.sent;
            for ((sums, own), &p) in plan.sums.iter_mut().zip(&partial.answer).zip(&plan.primes) {
                for (sum, &r) in sums.iter_mut().zip(own) {
                    *sum = add_mod(*sum, r, p);
                }
            }
        }
        plan.levels.push(states);
        let note = levels_note("level", level as usize, &[states], "states");
        // The last level sends nothing; an empty next level ends the sweep
        // too (every level after it is empty).
        if shape.last_level == Some(level) || sent == 0 {
            return Ok(NextStage::Finish);
        }
        if level >= MAX_SWEEP_STEPS {
            return Err(invalid!(
                "the sweep passed {MAX_SWEEP_STEPS} levels without an empty one"
            ));
        }
        // The next level's shards are the buckets this one wrote.
        let shards = first.buckets;
        if finished.partials.iter().any(|p| p.buckets != shards) {
            return Err(invalid!(
                "the shards of sweep level {level} wrote unlike buckets"
            ));
        }
        // The level after next is about as large as the next.
        let buckets_out = buckets_after(spec, sent, finished.slots);
        let tasks = (0..shards)
            .map(|bucket| Planned {
                task: WasmSweepTask {
                    level: level + 1,
                    bucket,
                    buckets_out,
                    primes: plan.primes.clone(),
                },
                work_total: 1,
            })
            .collect();
        Ok(NextStage::Shards(tasks, note))
    }

    fn stage_reads(_spec: &WasmSweepSpec, _stage: u32, task: &WasmSweepTask) -> Vec<StageRead> {
        if task.level == 0 {
            return Vec::new();
        }
        vec![StageRead {
            stage: task.level,
            bucket: Some(task.bucket),
        }]
    }

    fn decode_stage_inputs(_spec: &WasmSweepSpec, parts: &[&[u8]]) -> Result<SweepInput> {
        SweepInput::new(Arc::new(single_input(Self::NAME, parts)?.to_vec()))
    }

    const STREAMS_STAGE_INPUT: bool = true;

    fn decode_stored_inputs(
        _spec: &WasmSweepSpec,
        parts: Vec<Arc<dyn Stored>>,
    ) -> Result<SweepInput> {
        SweepInput::new(single_stored(Self::NAME, parts)?)
    }

    fn execute(
        spec: &WasmSweepSpec,
        task: &WasmSweepTask,
        run: &mut ShardRun<'_, SweepInput, WasmSweepPartial>,
    ) -> Result<Outcome<WasmSweepPartial>> {
        let module = loaded(run.cache, &spec.module_sha256)?;
        let cancelled = run.control.cancel_flag();
        let mut sweep = module.0.start(&spec.params.join("\n"), cancelled)?;
        let shape = SweepShape::of(sweep.plan());
        let primes = &task.primes;
        let mut in_memory = MemorySpill::default();
        let mut room = Room::or_in_memory(run.room.as_mut(), &mut in_memory);
        let inner = run.control.with_own_counter();
        let last = shape.last_level == Some(task.level);
        let mut shard = LevelShard {
            step: task.level,
            last,
            outputs: shape.outputs as usize,
            buckets_out: task.buckets_out,
            batch: BATCH,
            key_limit: shape.key_limit as usize,
        };
        let level = match (task.level, run.input) {
            // Level 0's states are the start states, summed.
            (0, _) => {
                let (starts, states) = start_list(sweep.starts()?, primes);
                shard.buckets_out = first_buckets(spec, states);
                let parts = vec![starts.as_slice()];
                sweep_level_within(&mut *sweep, &shard, primes, parts, &mut room, &inner)?
            }
            (_, Some(input)) => {
                let parts = (input.senders.iter())
                    .map(|range| StoredSource::new(&*input.stored, range.clone()))
                    .collect();
                sweep_level_within(&mut *sweep, &shard, primes, parts, &mut room, &inner)?
            }
            (level, None) => {
                return Err(invalid!(
                    "sweep level {level} needs the level before's buckets"
                ));
            }
        };
        run.control.add_work(1);
        let sent: Vec<Vec<CountedList>> = level.sent.into_iter().map(|list| vec![list]).collect();
        Ok(Outcome {
            output: stage_output(&sent, &mut *room.spill)?,
            partial: WasmSweepPartial {
                shape,
                states: level.states,
                sent: level.children,
                buckets: shard.buckets_out,
                answer: level.answer,
            },
            work_done: 1,
        })
    }

    fn check_result(
        spec: &WasmSweepSpec,
        plan: &WasmSweepPlan,
        task: &WasmSweepTask,
        partial: &WasmSweepPartial,
        output: &[u8],
    ) -> Result<()> {
        if task.primes != plan.primes {
            return Err(invalid!("the task's primes are not the job's"));
        }
        partial.shape.check()?;
        if plan.shape.is_some_and(|shape| shape != partial.shape) {
            return Err(invalid!(
                "the module's plan changed to {:?}: it must depend on its parameters alone",
                partial.shape
            ));
        }
        let outputs = partial.shape.outputs as usize;
        if partial.answer.len() != plan.primes.len()
            || partial.answer.iter().any(|sums| sums.len() != outputs)
        {
            return Err(invalid!(
                "the shard's answer is not {outputs} sums for each of {} primes",
                plan.primes.len()
            ));
        }
        for (sums, &p) in partial.answer.iter().zip(&plan.primes) {
            if let Some(r) = sums.iter().find(|&&r| r >= p) {
                return Err(invalid!("the shard's sum {r} is not below the prime {p}"));
            }
        }
        let expected = match task.level {
            0 => first_buckets(spec, partial.states),
            _ => task.buckets_out,
        };
        let buckets = split_buckets(output)?;
        if buckets.len() != expected as usize || partial.buckets != expected {
            return Err(invalid!(
                "sweep level {} wrote {} buckets, not {expected}",
                task.level,
                buckets.len()
            ));
        }
        let mut sent = 0u64;
        for (q, bytes) in buckets.into_iter().enumerate() {
            let label = format!("sweep level {}'s output bucket {q}", task.level + 1);
            // Flat: the keys are read in place, with no allocation a state.
            for (key, _) in decode_flat(bytes, &plan.primes, &label)?.iter() {
                if key.len() > partial.shape.key_limit as usize {
                    return Err(invalid!(
                        "{label}: a key of {} bytes, past the module's limit of {}",
                        key.len(),
                        partial.shape.key_limit
                    ));
                }
                if key_bucket(key, expected) != q as u32 {
                    return Err(invalid!(
                        "{label}: a state sent to another bucket than its own"
                    ));
                }
                sent += 1;
            }
        }
        if sent != partial.sent {
            return Err(invalid!(
                "sweep level {} said it sent {} states and sent {sent}",
                task.level,
                partial.sent
            ));
        }
        Ok(())
    }

    fn finish(
        spec: &WasmSweepSpec,
        plan: &WasmSweepPlan,
        _partials: Vec<WasmSweepPartial>,
    ) -> Result<Answer> {
        let (Some(shape), false) = (plan.shape, plan.sums.is_empty()) else {
            return Err(Error::Internal(
                "a sweep finished before its first level".into(),
            ));
        };
        let joined = plan.primes.len() - plan.spares;
        let values: Vec<BigUint> = (0..shape.outputs as usize)
            .map(|i| {
                let residues: Vec<u64> = plan.sums.iter().map(|s| s[i]).collect();
                match spec.exact {
                    true => checked_value(spec.bound_bits, &plan.primes, plan.spares, i, &residues),
                    false => Ok(BigUint::from(residues[0])),
                }
            })
            .collect::<Result<_>>()?;
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let mut details = serde_json::json!({
            "kind": Self::NAME,
            "module_sha256": spec.module_sha256,
            "outputs": shape.outputs,
            "values": values,
            "levels": plan.levels,
            "states": plan.levels.iter().sum::<u64>(),
        });
        if spec.exact {
            details["exact"] = true.into();
            details["bound_bits"] = spec.bound_bits.into();
            details["primes"] = (plan.primes[..joined].iter())
                .map(|p| p.to_string())
                .collect();
            details["spare_primes"] = (plan.primes[joined..].iter())
                .map(|p| p.to_string())
                .collect();
        } else {
            details["modulus"] = spec.modulus.into();
        }
        Ok(Answer {
            line: values.join(" "),
            details,
        })
    }

    fn direct(_spec: &WasmSweepSpec, _threads: usize, _control: &Control) -> Result<Answer> {
        Err(invalid!(
            "a wasm sweep runs through the runner, in a worker's sandbox: leave out --direct"
        ))
    }
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for WasmSweep {
    fn corrupt_for_testing(partial: &mut WasmSweepPartial) {
        if let Some(r) = partial.answer.first_mut().and_then(|s| s.first_mut()) {
            // Another residue, still below any prime.
            *r = if *r == 0 { 1 } else { *r - 1 };
        }
    }
}

#[cfg(test)]
mod tests;
