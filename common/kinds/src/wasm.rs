//! `wasm`: a user kernel compiled to WebAssembly (`docs/wasm-abi.md`). Shard
//! `i` of `S` returns `L` residues modulo a prime; the job's answer is the sum
//! of the shards' residue vectors modulo the job's prime, or, with `exact`,
//! the same over enough primes below 2^62 for the bound, joined by the CRT.
//!
//! The module travels as an attachment named by its SHA-256: the coordinator
//! stores it once and checks it at submission; a worker fetches it, keeps it
//! compiled, and runs each shard in the sandbox its `KernelCache` holds
//! (only workers started with `--allow-wasm` have one, and only they are
//! leased wasm shards).

use crate::guest_args::GuestArgs;
use std::sync::Arc;
use std::time::Instant;

use num_bigint::BigUint;
use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
pub use crate::exact::{
    DEFAULT_MODULUS, MAX_BOUND_BITS, PRIME_LIMIT, SPARE_PRIMES, primes_for_bits,
};
use crate::exact::{
    check_choice, checked_value, crt, describe_choice, exact_primes, modulus_from_proto,
};
pub use crate::guest::MAX_PARAMS_BYTES;
use crate::guest::{
    GuestCall, GuestHooks, GuestModule, MODULES_KEPT, SEND_MODULE, WASM_CAPABILITY,
    check_module_and_params, described_params,
};
use crate::kind::{
    Answer, Checkpoint, FaultInjection, FileReader, JobKind, Outcome, Planned, ShardCount,
    ShardRun, SpecArgs, SpecOf, no_output,
};
use crate::{Control, Error, Result, invalid};
use tally_wire::proto;

pub struct Wasm;

pub const MAX_SHARDS: u64 = 100_000;
/// At most this many shards times primes in one job.
pub const MAX_TASKS: u64 = 1_000_000;
pub const MAX_OUTPUTS: u32 = 4096;
/// A shard's progress in these units, whatever the module's own.
const WORK_UNITS: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WasmSpecFields")]
pub struct WasmSpec {
    /// The module's SHA-256, lowercase hex.
    pub module_sha256: String,
    pub shards: u64,
    /// `K=V` lines for the module, in order.
    pub params: Vec<String>,
    /// The prime; 0 when `exact`.
    pub modulus: u64,
    pub exact: bool,
    /// With `exact`: every value is below 2^bound_bits.
    pub bound_bits: u32,
    pub outputs: u32,
}

/// A wasm spec as a spec file may write it: a modulus left out is the
/// default prime, or none (0) for an exact job, which is joined by the CRT.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WasmSpecFields {
    module_sha256: String,
    shards: u64,
    #[serde(default)]
    params: Vec<String>,
    modulus: Option<u64>,
    #[serde(default)]
    exact: bool,
    #[serde(default)]
    bound_bits: u32,
    #[serde(default = "one")]
    outputs: u32,
}

impl From<WasmSpecFields> for WasmSpec {
    fn from(f: WasmSpecFields) -> WasmSpec {
        let default_modulus = if f.exact { 0 } else { DEFAULT_MODULUS };
        WasmSpec {
            module_sha256: f.module_sha256,
            shards: f.shards,
            params: f.params,
            modulus: f.modulus.unwrap_or(default_modulus),
            exact: f.exact,
            bound_bits: f.bound_bits,
            outputs: f.outputs,
        }
    }
}

fn one() -> u32 {
    1
}

impl SpecOf for WasmSpec {
    type Kind = Wasm;
}

#[derive(clap::Args, Debug)]
pub struct WasmArgs {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// Shards the sum is cut into, 1 to 100000, or auto: picked when the job
    /// is submitted, from the workers' slots and a shard timed then.
    #[arg(long, value_parser = crate::kind::parse_shard_count)]
    pub shards: u64,
    /// Residues each shard returns (the length of the answer), 1 to 4096.
    #[arg(long, default_value_t = 1)]
    pub outputs: u32,
}

impl SpecArgs<WasmSpec> for WasmArgs {
    fn into_spec(self, files: &dyn FileReader) -> Result<WasmSpec> {
        let guest = self.guest.into_parts(files)?;
        Ok(WasmSpec {
            module_sha256: guest.module_sha256,
            shards: self.shards,
            params: guest.params,
            modulus: guest.modulus,
            exact: guest.exact,
            bound_bits: guest.bound_bits,
            outputs: self.outputs,
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasmPlan {
    /// The primes the shards run modulo: the job's, or those of `exact`
    /// (the bound's primes, then the spares).
    #[serde(default)]
    pub primes: Vec<u64>,
    /// With `exact`: how many of the last `primes` are spares, beyond the
    /// product the bound needs, that check the bound (0 in plans made
    /// before spares were run).
    #[serde(default)]
    pub spares: usize,
}

/// Shard `shard` of the sum modulo `prime`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WasmTask {
    pub shard: u64,
    pub prime: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WasmPartial {
    pub residues: Vec<u64>,
}

/// A compiled module in the kernel cache.
struct Loaded(Arc<dyn GuestModule>);

impl JobKind for Wasm {
    type Spec = WasmSpec;
    type Args = WasmArgs;
    type Plan = WasmPlan;
    type Task = WasmTask;
    type Partial = WasmPartial;
    type StageInput = ();

    const NAME: &'static str = "wasm";
    const ABOUT: &'static str =
        "A user kernel compiled to WebAssembly: the sum of its shards modulo a prime, or exact.";
    const EXAMPLES: &'static str = "  tally run wasm --module examples/wasm/queens.wasm --shards 8 --param n=12\n  tally run wasm --module examples/wasm/independent-sets.wasm --shards 16 --param n=11 --exact --bound-bits 80";

    fn spec_to_proto(spec: &WasmSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Wasm(proto::WasmSpec {
            module_sha256: spec.module_sha256.clone(),
            shards: spec.shards,
            params: spec.params.clone(),
            modulus: spec.modulus,
            exact: spec.exact,
            bound_bits: spec.bound_bits,
            outputs: spec.outputs,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<WasmSpec>> {
        let proto::job_spec::Kind::Wasm(w) = kind else {
            return None;
        };
        Some(Ok(WasmSpec {
            module_sha256: w.module_sha256.clone(),
            shards: w.shards,
            params: w.params.clone(),
            modulus: modulus_from_proto(w.exact, w.modulus),
            exact: w.exact,
            bound_bits: w.bound_bits,
            outputs: w.outputs.max(1),
        }))
    }

    fn validate(spec: &WasmSpec) -> Result<()> {
        check_module_and_params(&spec.module_sha256, &spec.params)?;
        // 0: auto, picked by the client before it submits (`shard_count`).
        if spec.shards > MAX_SHARDS {
            return Err(invalid!(
                "shards must be auto or between 1 and {MAX_SHARDS}, not {}",
                spec.shards
            ));
        }
        if !(1..=MAX_OUTPUTS).contains(&spec.outputs) {
            return Err(invalid!(
                "outputs must be between 1 and {MAX_OUTPUTS}, not {}",
                spec.outputs
            ));
        }
        let primes = check_choice(spec.exact, spec.modulus, spec.bound_bits, "wasm job")?;
        if spec.shards * primes > MAX_TASKS {
            return Err(invalid!(
                "{} shards over {primes} primes make {} tasks, more than {MAX_TASKS}",
                spec.shards,
                spec.shards * primes
            ));
        }
        Ok(())
    }

    fn describe(spec: &WasmSpec) -> String {
        let over = describe_choice(spec.exact, spec.modulus, spec.bound_bits);
        let params = described_params(&spec.params);
        format!(
            "wasm module sha256:{}{params}, {} shards, {over}",
            &spec.module_sha256[..12],
            spec.shards,
        )
    }

    fn shard_count(spec: &WasmSpec) -> Option<ShardCount> {
        Some(match spec.shards {
            0 => ShardCount::Auto,
            n => ShardCount::Chosen(n),
        })
    }

    fn with_shard_count(spec: &WasmSpec, shards: u64) -> WasmSpec {
        WasmSpec {
            shards,
            ..spec.clone()
        }
    }

    /// None: a wasm job needs a module, and has no direct computation.
    fn small_example() -> Option<WasmSpec> {
        None
    }

    fn attachments(spec: &WasmSpec) -> Vec<String> {
        vec![spec.module_sha256.clone()]
    }

    fn capability(_spec: &WasmSpec) -> Option<&'static str> {
        Some(WASM_CAPABILITY)
    }

    /// Checks the module (the coordinator holds it in `cache` by now) and
    /// chooses the primes.
    fn prepare(spec: &WasmSpec, cache: &KernelCache, _control: &Control) -> Result<WasmPlan> {
        if spec.shards == 0 {
            return Err(invalid!(
                "shards auto is picked by tally submit or tally run before the job is                  submitted; give a count of 1 to {MAX_SHARDS}"
            ));
        }
        let runtime = cache
            .guest_runtime()
            .ok_or_else(|| Error::Internal("no sandbox to check wasm modules with".into()))?;
        let module = cache.attachment(&spec.module_sha256).ok_or_else(|| {
            invalid!(
                "no module with SHA-256 {} is stored: {SEND_MODULE}",
                spec.module_sha256
            )
        })?;
        // Kept compiled: a process that both plans and runs (`tally run`)
        // compiles it once.
        cache.get_or_build::<Loaded>(&spec.module_sha256, MODULES_KEPT, || {
            Ok(Loaded(runtime.load(&module)?))
        })?;
        Ok(if spec.exact {
            exact_plan(spec)
        } else {
            WasmPlan {
                primes: vec![spec.modulus],
                spares: 0,
            }
        })
    }

    fn plan_stage(spec: &WasmSpec, plan: &WasmPlan, _stage: u32) -> Result<Vec<Planned<WasmTask>>> {
        Ok(plan
            .primes
            .iter()
            .flat_map(|&prime| {
                (0..spec.shards).map(move |shard| Planned {
                    task: WasmTask { shard, prime },
                    work_total: WORK_UNITS,
                })
            })
            .collect())
    }

    fn execute(
        spec: &WasmSpec,
        task: &WasmTask,
        run: &mut ShardRun<'_, (), WasmPartial>,
    ) -> Result<Outcome<WasmPartial>> {
        let runtime = run.cache.guest_runtime().ok_or_else(|| {
            Error::Failed(
                "this worker does not run wasm modules (start it with --allow-wasm)".into(),
            )
        })?;
        let digest = &spec.module_sha256;
        let cache = run.cache;
        let module = cache.get_or_build::<Loaded>(digest, MODULES_KEPT, || {
            let bytes = cache
                .attachment(digest)
                .ok_or_else(|| Error::Failed(format!("the module {digest} was not fetched")))?;
            Ok(Loaded(runtime.load(&bytes)?))
        })?;
        let params = spec.params.join("\n");
        let state = run.checkpoint_bytes()?;
        let call = GuestCall {
            shard: task.shard,
            shards: spec.shards,
            prime: task.prime,
            params: &params,
            state: &state,
            outputs: spec.outputs,
        };
        let mut hooks = Hooks {
            run,
            reported: 0,
            last_checkpoint: None,
        };
        // The sandbox checks the residues' count and range; the coordinator
        // checks them again (`check_result`) before it accepts them.
        let residues = module.0.run(&call, &mut hooks)?;
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: WasmPartial { residues },
            work_done: WORK_UNITS,
        })
    }

    fn check_result(
        spec: &WasmSpec,
        plan: &WasmPlan,
        task: &WasmTask,
        partial: &WasmPartial,
        output: &[u8],
    ) -> Result<()> {
        if !plan.primes.contains(&task.prime) || task.shard >= spec.shards {
            return Err(invalid!("the task is not one of the job's"));
        }
        check_partial(spec, task, partial)?;
        no_output(output)
    }

    fn finish(spec: &WasmSpec, plan: &WasmPlan, partials: Vec<WasmPartial>) -> Result<Answer> {
        let shards = spec.shards as usize;
        if partials.len() != shards * plan.primes.len() || plan.spares >= plan.primes.len() {
            return Err(Error::Internal(format!(
                "{} results for {} shards over {} primes ({} spare)",
                partials.len(),
                shards,
                plan.primes.len(),
                plan.spares
            )));
        }
        // The tasks are planned prime by prime, shard by shard.
        let sums: Vec<Vec<u64>> = plan
            .primes
            .iter()
            .zip(partials.chunks(shards))
            .map(|(&prime, chunk)| sum_mod(chunk, spec.outputs as usize, prime))
            .collect();
        let joined = plan.primes.len() - plan.spares;
        let values: Vec<BigUint> = (0..spec.outputs as usize)
            .map(|i| {
                let residues: Vec<u64> = sums.iter().map(|s| s[i]).collect();
                if spec.exact {
                    checked_value(spec.bound_bits, &plan.primes, plan.spares, i, &residues)
                } else {
                    crt(&residues[..joined], &plan.primes[..joined])
                }
            })
            .collect::<Result<_>>()?;
        Ok(answer(spec, plan, &values))
    }

    fn direct(_spec: &WasmSpec, _threads: usize, _control: &Control) -> Result<Answer> {
        Err(invalid!(
            "a wasm job runs through the runner, in a worker's sandbox: leave out --direct"
        ))
    }
}

/// A shard's residues: as many as the job asks, each below the task's prime.
fn check_partial(spec: &WasmSpec, task: &WasmTask, partial: &WasmPartial) -> Result<()> {
    if partial.residues.len() != spec.outputs as usize {
        return Err(invalid!(
            "the shard returned {} residues, the job asks for {}",
            partial.residues.len(),
            spec.outputs
        ));
    }
    if let Some(r) = partial.residues.iter().find(|&&r| r >= task.prime) {
        return Err(invalid!(
            "the shard returned residue {r}, not below the prime {}",
            task.prime
        ));
    }
    Ok(())
}

/// The shards' residue vectors added modulo `prime`.
fn sum_mod(partials: &[WasmPartial], outputs: usize, prime: u64) -> Vec<u64> {
    let mut sums = vec![0u64; outputs];
    for partial in partials {
        for (sum, &r) in sums.iter_mut().zip(&partial.residues) {
            *sum = ((u128::from(*sum) + u128::from(r)) % u128::from(prime)) as u64;
        }
    }
    sums
}

/// The primes of an exact job (see [`exact_primes`]), the spares drawn by
/// the spec's digest.
fn exact_plan(spec: &WasmSpec) -> WasmPlan {
    let described = serde_json::to_vec(spec).expect("a wasm spec serialises");
    WasmPlan {
        primes: exact_primes(spec.bound_bits, &described),
        spares: SPARE_PRIMES,
    }
}

fn answer(spec: &WasmSpec, plan: &WasmPlan, values: &[BigUint]) -> Answer {
    let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    let mut details = serde_json::json!({
        "kind": "wasm",
        "module_sha256": spec.module_sha256,
        "shards": spec.shards,
        "outputs": spec.outputs,
        "values": values,
    });
    if spec.exact {
        details["exact"] = true.into();
        details["bound_bits"] = spec.bound_bits.into();
        let joined = plan.primes.len() - plan.spares;
        details["primes"] = plan.primes[..joined]
            .iter()
            .map(|p| p.to_string())
            .collect();
        details["spare_primes"] = plan.primes[joined..]
            .iter()
            .map(|p| p.to_string())
            .collect();
    } else {
        details["modulus"] = spec.modulus.into();
    }
    Answer {
        line: values.join(" "),
        details,
    }
}

/// The sandbox's calls during a shard, turned into the worker's progress and
/// checkpoints.
struct Hooks<'r, 'a> {
    run: &'r mut ShardRun<'a, (), WasmPartial>,
    /// Work units added to the control so far.
    reported: u64,
    /// When the last checkpoint was handed on: the module may save more
    /// often than the worker wants to send.
    last_checkpoint: Option<Instant>,
}

impl GuestHooks for Hooks<'_, '_> {
    fn progress(&mut self, done: u64, total: u64) {
        if total == 0 {
            return;
        }
        let units =
            (u128::from(done.min(total)) * u128::from(WORK_UNITS) / u128::from(total)) as u64;
        if units > self.reported {
            self.run.control.add_work(units - self.reported);
            self.reported = units;
        }
    }

    fn checkpoint(&mut self, state: &[u8]) {
        // At most one an interval, unless the worker asks for one now.
        if self
            .last_checkpoint
            .is_some_and(|at| at.elapsed() < self.run.checkpoint_every)
            && !self.run.control.checkpoint_asked()
        {
            return;
        }
        self.last_checkpoint = Some(Instant::now());
        let work_done = self.reported;
        self.run.checkpoint(Checkpoint {
            state: state.to_vec().into(),
            partial: None,
            work_done,
        });
    }

    fn cancelled(&self) -> bool {
        self.run.control.is_cancelled()
    }
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Wasm {
    fn corrupt_for_testing(partial: &mut WasmPartial) {
        if let Some(r) = partial.residues.first_mut() {
            // Another residue, still below any prime.
            *r = if *r == 0 { 1 } else { *r - 1 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::residue;
    use tally_kernels::modular::is_prime;

    #[test]
    fn shards_add_up_modulo_each_prime_then_join() {
        // Shards holding 1, 2, ..., 6 each; the sum 21 and its square 441.
        let spec = WasmSpec {
            module_sha256: "0".repeat(64),
            shards: 6,
            params: Vec::new(),
            modulus: 0,
            exact: true,
            bound_bits: 100,
            outputs: 2,
        };
        Wasm::validate(&spec).unwrap();
        let plan = exact_plan(&spec);
        assert_eq!(plan.primes.len(), primes_for_bits(100).len() + SPARE_PRIMES);
        let tasks = Wasm::plan_stage(&spec, &plan, 1).unwrap();
        assert_eq!(tasks.len(), 6 * plan.primes.len());
        let partials: Vec<WasmPartial> = tasks
            .iter()
            .map(|t| {
                let x = t.task.shard + 1;
                // The second output is x * 2^70 spread over the shards, as a
                // module would compute it modulo the prime.
                let big = BigUint::from(x) << 70;
                WasmPartial {
                    residues: vec![x % t.task.prime, residue(&big, t.task.prime)],
                }
            })
            .collect();
        for (t, p) in tasks.iter().zip(&partials) {
            Wasm::check_result(&spec, &plan, &t.task, p, &[]).unwrap();
        }
        let answer = Wasm::finish(&spec, &plan, partials.clone()).unwrap();
        let expected = BigUint::from(21u32) << 70;
        assert_eq!(answer.line, format!("21 {expected}"));
        // A bound the answer breaks is said, not given a wrong value.
        let tight = WasmSpec {
            bound_bits: 60,
            ..spec.clone()
        };
        let error = Wasm::finish(&tight, &plan, partials).unwrap_err();
        assert!(error.to_string().contains("raise --bound-bits"), "{error}");
    }

    /// The partials of a job whose shards hold `total` between them (the
    /// last shard the rest), each modulo its task's prime.
    fn partials_of(spec: &WasmSpec, plan: &WasmPlan, total: &BigUint) -> Vec<WasmPartial> {
        let part = total / spec.shards;
        Wasm::plan_stage(spec, plan, 1)
            .unwrap()
            .iter()
            .map(|t| {
                let last = t.task.shard + 1 == spec.shards;
                let held = if last {
                    total - &part * (spec.shards - 1)
                } else {
                    part.clone()
                };
                WasmPartial {
                    residues: vec![residue(&held, t.task.prime)],
                }
            })
            .collect()
    }

    #[test]
    fn a_value_at_or_above_the_bound_fails_the_job_whatever_its_residues() {
        let one = BigUint::from(1u32);
        // 1 to 4 primes for the bound, and the spare.
        for (bits, needed) in [
            (20, 1),
            (61, 1),
            (62, 2),
            (123, 2),
            (125, 3),
            (185, 3),
            (186, 4),
            (244, 4),
        ] {
            let spec = WasmSpec {
                module_sha256: "5".repeat(64),
                shards: 5,
                params: vec![format!("bits={bits}")],
                modulus: 0,
                exact: true,
                bound_bits: bits,
                outputs: 1,
            };
            Wasm::validate(&spec).unwrap();
            let plan = exact_plan(&spec);
            assert_eq!(plan.primes.len(), needed + SPARE_PRIMES, "bits {bits}");
            let bound = &one << bits;
            let product: BigUint = plan.primes[..needed]
                .iter()
                .map(|&p| BigUint::from(p))
                .product();
            let just_below = &bound - 1u32;
            let answer = Wasm::finish(&spec, &plan, partials_of(&spec, &plan, &just_below));
            assert_eq!(answer.unwrap().line, just_below.to_string(), "bits {bits}");
            // Above the bound: below the product the CRT gives it back (and
            // it is refused), at or above it the CRT gives a smaller number,
            // which only the spare tells from the truth.
            for above in [
                bound.clone(),
                &bound + 1u32,
                &bound << 1,
                product.clone(),
                &product + 57u32,
                &product * 3u32 + &just_below,
                &one << (bits + 200),
            ] {
                let partials = partials_of(&spec, &plan, &above);
                let error = Wasm::finish(&spec, &plan, partials)
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains("raise --bound-bits"),
                    "bits {bits}, {above}: {error}"
                );
            }
        }
    }

    #[test]
    fn the_spare_prime_depends_on_the_spec_and_is_none_of_the_bounds() {
        let spec = |params: &str| WasmSpec {
            module_sha256: "7".repeat(64),
            shards: 3,
            params: vec![params.to_string()],
            modulus: 0,
            exact: true,
            bound_bits: 130,
            outputs: 1,
        };
        let (a, b) = (exact_plan(&spec("n=1")), exact_plan(&spec("n=2")));
        assert_eq!(a, exact_plan(&spec("n=1")), "the plan is deterministic");
        assert_ne!(a.primes.last(), b.primes.last());
        for plan in [a, b] {
            let spare = *plan.primes.last().unwrap();
            assert!(is_prime(spare) && spare < PRIME_LIMIT && spare > PRIME_LIMIT / 2 - 2000);
            assert!(!plan.primes[..plan.primes.len() - 1].contains(&spare));
        }
    }

    /// A module the coordinator does not hold is refused with how to send it,
    /// on the command line and with a spec file.
    #[test]
    fn a_module_not_stored_is_refused_naming_both_ways_to_send_it() {
        let cache = KernelCache::new();
        cache.set_guest_runtime(Arc::new(Stepping));
        let spec = WasmSpec {
            module_sha256: crate::guest::sha256_hex(b"never sent"),
            shards: 2,
            params: Vec::new(),
            modulus: DEFAULT_MODULUS,
            exact: false,
            bound_bits: 0,
            outputs: 1,
        };
        let error = Wasm::prepare(&spec, &cache, &Control::new()).unwrap_err();
        let line = error.to_string();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert!(
            line.contains("--module FILE") && line.contains("--attach FILE"),
            "{line}"
        );
    }

    /// A module that reports progress and a checkpoint at each of four
    /// steps and returns its shard number and the state it was given.
    struct Stepping;

    impl crate::guest::GuestRuntime for Stepping {
        fn load(&self, module: &[u8]) -> Result<Arc<dyn GuestModule>> {
            assert_eq!(module, b"stepping");
            Ok(Arc::new(Stepping))
        }

        fn load_sweep(&self, _module: &[u8]) -> Result<Arc<dyn crate::guest::GuestSweepModule>> {
            Err(crate::invalid!("the stepping module is no sweep module"))
        }
    }

    impl GuestModule for Stepping {
        fn run(&self, call: &GuestCall<'_>, hooks: &mut dyn GuestHooks) -> Result<Vec<u64>> {
            for step in 1..=4u8 {
                hooks.progress(u64::from(step), 4);
                hooks.checkpoint(&[step]);
            }
            let resumed = call.state.first().copied().unwrap_or(0);
            Ok(vec![call.shard, u64::from(resumed)])
        }
    }

    /// What a shard of the stepping module gave: its residues, the work
    /// recorded, and the checkpoints handed on (state, work done).
    type Stepped = (Vec<u64>, u64, Vec<(Vec<u8>, u64)>);

    /// Runs shard 3 of a job of the stepping module.
    fn run_stepping(
        cache: &KernelCache,
        state: &[u8],
        every: std::time::Duration,
    ) -> Result<Stepped> {
        let spec = WasmSpec {
            module_sha256: crate::guest::sha256_hex(b"stepping"),
            shards: 5,
            params: Vec::new(),
            modulus: DEFAULT_MODULUS,
            exact: false,
            bound_bits: 0,
            outputs: 2,
        };
        let control = Control::new();
        let mut checkpoints = Vec::new();
        let mut on_checkpoint = |c: Checkpoint<WasmPartial>| {
            checkpoints.push((c.state.into_bytes().unwrap(), c.work_done))
        };
        let mut run = ShardRun {
            input: None,
            checkpoint: &state.to_vec(),
            cache,
            control: &control,
            checkpoint_every: every,
            on_checkpoint: &mut on_checkpoint,
            room: None,
        };
        let task = WasmTask {
            shard: 3,
            prime: DEFAULT_MODULUS,
        };
        let outcome = Wasm::execute(&spec, &task, &mut run)?;
        Ok((outcome.partial.residues, control.work_done(), checkpoints))
    }

    #[test]
    fn a_shard_reports_the_modules_progress_and_checkpoints_and_resumes_from_its_state() {
        let cache = KernelCache::new();
        // A process without a sandbox runs no module.
        let error = run_stepping(&cache, &[], std::time::Duration::ZERO).unwrap_err();
        assert!(matches!(error, Error::Failed(_)), "{error:?}");
        assert!(error.to_string().contains("--allow-wasm"), "{error}");
        cache.set_guest_runtime(Arc::new(Stepping));
        let digest = crate::guest::sha256_hex(b"stepping");
        let error = run_stepping(&cache, &[], std::time::Duration::ZERO).unwrap_err();
        assert!(error.to_string().contains("not fetched"), "{error}");
        cache.put_attachment(&digest, Arc::from(&b"stepping"[..]));
        let (residues, work, checkpoints) =
            run_stepping(&cache, &[], std::time::Duration::ZERO).unwrap();
        assert_eq!(residues, [3, 0]);
        assert_eq!(work, WORK_UNITS);
        let quarters = |n: u64| n * WORK_UNITS / 4;
        let expected: Vec<(Vec<u8>, u64)> = (1..=4).map(|s| (vec![s as u8], quarters(s))).collect();
        assert_eq!(checkpoints, expected);
        // At most one checkpoint per interval: here the first only.
        let (_, _, checkpoints) =
            run_stepping(&cache, &[], std::time::Duration::from_secs(3600)).unwrap();
        assert_eq!(checkpoints, expected[..1]);
        // A later attempt hands the module the state it saved.
        let (residues, _, _) = run_stepping(&cache, &[2], std::time::Duration::ZERO).unwrap();
        assert_eq!(residues, [3, 2]);
    }

    #[test]
    fn bad_specs_are_refused_with_the_value_named() {
        let good = WasmSpec {
            module_sha256: "ab".repeat(32),
            shards: 4,
            params: vec!["n=3".into()],
            modulus: DEFAULT_MODULUS,
            exact: false,
            bound_bits: 0,
            outputs: 1,
        };
        Wasm::validate(&good).unwrap();
        assert_eq!(
            Wasm::describe(&good),
            "wasm module sha256:abababababab n=3, 4 shards, mod 1000000007"
        );
        let long = WasmSpec {
            params: vec![format!("data={}", "7".repeat(500))],
            ..good.clone()
        };
        assert!(
            Wasm::describe(&long).len() < 200,
            "{}",
            Wasm::describe(&long)
        );
        let cases = [
            (
                WasmSpec {
                    module_sha256: "AB".repeat(32),
                    ..good.clone()
                },
                "module_sha256",
            ),
            (
                WasmSpec {
                    shards: MAX_SHARDS + 1,
                    ..good.clone()
                },
                "shards must be auto or between 1",
            ),
            (
                WasmSpec {
                    outputs: 0,
                    ..good.clone()
                },
                "outputs",
            ),
            (
                WasmSpec {
                    params: vec!["=3".into()],
                    ..good.clone()
                },
                "K=V",
            ),
            (
                WasmSpec {
                    params: vec!["n".into()],
                    ..good.clone()
                },
                "K=V",
            ),
            (
                WasmSpec {
                    modulus: 1_000_000_008,
                    ..good.clone()
                },
                "prime below 2^62",
            ),
            (
                WasmSpec {
                    modulus: (1 << 62) + 135,
                    ..good.clone()
                },
                "prime below 2^62",
            ),
            (
                WasmSpec {
                    exact: true,
                    modulus: 0,
                    ..good.clone()
                },
                "bound_bits",
            ),
            (
                WasmSpec {
                    bound_bits: 8,
                    ..good.clone()
                },
                "exact only",
            ),
            (
                WasmSpec {
                    shards: MAX_SHARDS,
                    exact: true,
                    modulus: 0,
                    bound_bits: 4096,
                    ..good.clone()
                },
                "tasks",
            ),
        ];
        for (spec, named) in cases {
            let error = Wasm::validate(&spec).unwrap_err().to_string();
            assert!(error.contains(named), "{spec:?}: {error}");
        }
        // 0 is `--shards auto`: a valid spec, which only its client sizes;
        // planning it unsized is refused, saying so.
        let auto = WasmSpec {
            shards: 0,
            ..good.clone()
        };
        Wasm::validate(&auto).unwrap();
        assert_eq!(Wasm::shard_count(&auto), Some(ShardCount::Auto));
        assert_eq!(Wasm::with_shard_count(&auto, 7).shards, 7);
        let unsized_plan = Wasm::prepare(&auto, &KernelCache::new(), &Control::new());
        assert!(
            unsized_plan
                .unwrap_err()
                .to_string()
                .contains("auto is picked"),
            "a spec of 0 shards reached planning"
        );
    }
}
