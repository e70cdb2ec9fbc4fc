//! The sweep kind's plan run stage by stage in this process, each result
//! checked as the coordinator checks it, on the example model (independent
//! sets of a grid, row by row) called natively through the kind layer's
//! traits: against brute force, the guest SDK's own runner, and the grid's
//! symmetry; and a faulty model's results refused.

use std::sync::atomic::{AtomicUsize, Ordering};

use tally_example_independent_sets_sweep::IndependentRows;
use tally_guest::Params;
use tally_guest::sweep::{Sweep, SweepEnd, run_sweep};
use tally_kernels::buckets::encode_buckets;
use tally_kernels::sweep::{SweepChildren, SweepModel};

use super::*;
use crate::guest::{GuestModule, GuestRuntime, GuestSweep, sha256_hex};
use crate::staged_tests::run_stages_in;

/// The module's name in the tests: the runtime below answers for any.
const MODULE: &[u8] = b"independent rows";

/// A runtime whose sweep modules are the example model called natively;
/// the instances it starts from the `change_plan_from`-th on (0-based) say
/// a longer key limit, as a module whose plan is not its parameters' alone.
struct NativeRuntime(Arc<Starts>);

struct Starts {
    started: AtomicUsize,
    change_plan_from: usize,
}

impl NativeRuntime {
    fn new() -> Arc<NativeRuntime> {
        Self::changing_plan_from(usize::MAX)
    }

    fn changing_plan_from(change_plan_from: usize) -> Arc<NativeRuntime> {
        Arc::new(NativeRuntime(Arc::new(Starts {
            started: AtomicUsize::new(0),
            change_plan_from,
        })))
    }
}

impl GuestRuntime for NativeRuntime {
    fn load(&self, _module: &[u8]) -> Result<Arc<dyn GuestModule>> {
        Err(invalid!("a sweep module, not a shard module"))
    }

    fn load_sweep(&self, module: &[u8]) -> Result<Arc<dyn GuestSweepModule>> {
        assert_eq!(module, MODULE);
        Ok(Arc::new(NativeModule(self.0.clone())))
    }
}

struct NativeModule(Arc<Starts>);

impl GuestSweepModule for NativeModule {
    fn start(
        &self,
        params: &str,
        _cancelled: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Box<dyn GuestSweep>> {
        let n = self.0.started.fetch_add(1, Ordering::SeqCst);
        let params = Params::parse(params).map_err(|e| invalid!("{e:?}"))?;
        let model = IndependentRows::new(&params).map_err(|e| invalid!("{e:?}"))?;
        Ok(Box::new(Native {
            model,
            longer_keys: n >= self.0.change_plan_from,
        }))
    }
}

/// The example model as a guest instance.
struct Native {
    model: IndependentRows,
    longer_keys: bool,
}

impl SweepModel for Native {
    fn expand(&mut self, step: u32, keys: &[&[u8]], out: &mut SweepChildren) -> Result<()> {
        for (parent, key) in keys.iter().enumerate() {
            let mut emit = |key: &[u8], multiplier| out.push(parent as u32, key, multiplier);
            (self.model.expand(step, key, &mut emit)).map_err(|e| Error::Failed(e.to_string()))?;
        }
        Ok(())
    }

    fn weights(&mut self, step: u32, last: bool, keys: &[&[u8]]) -> Result<Vec<u64>> {
        let outputs = self.model.plan().outputs;
        let mut all = Vec::new();
        for key in keys {
            let mut weights = vec![0; outputs];
            self.model.weights(step, key, last, &mut weights);
            all.extend(weights);
        }
        Ok(all)
    }
}

impl GuestSweep for Native {
    fn plan(&self) -> GuestSweepPlan {
        let plan = self.model.plan();
        GuestSweepPlan {
            key_limit: plan.key_limit + usize::from(self.longer_keys),
            outputs: plan.outputs,
            end: match plan.end {
                SweepEnd::Steps(steps) => GuestSweepEnd::Steps(steps),
                SweepEnd::WhenEmpty => GuestSweepEnd::WhenEmpty,
            },
            most_children: plan.most_children,
        }
    }

    fn starts(&mut self) -> Result<Vec<(Vec<u8>, u64)>> {
        let mut starts = Vec::new();
        self.model
            .starts(&mut |key, count| starts.push((key.to_vec(), count)));
        Ok(starts)
    }
}

/// A cache holding `runtime` and the module, as a worker's does.
fn cache_with(runtime: Arc<NativeRuntime>) -> KernelCache {
    let cache = KernelCache::new();
    cache.set_guest_runtime(runtime);
    cache.put_attachment(&sha256_hex(MODULE), MODULE.into());
    cache
}

fn spec(params: &str, buckets: u32) -> WasmSweepSpec {
    WasmSweepSpec {
        module_sha256: sha256_hex(MODULE),
        params: params.split(' ').map(str::to_string).collect(),
        modulus: DEFAULT_MODULUS,
        exact: false,
        bound_bits: 0,
        buckets,
    }
}

fn exact(params: &str, buckets: u32, bound_bits: u32) -> WasmSweepSpec {
    WasmSweepSpec {
        modulus: 0,
        exact: true,
        bound_bits,
        ..spec(params, buckets)
    }
}

/// The job run to its answer through the plan, every result checked.
fn run(spec: &WasmSweepSpec, cache: &KernelCache) -> Result<Answer> {
    WasmSweep::validate(spec)?;
    let plan = WasmSweep::prepare(spec, cache, &Control::new())?;
    run_stages_in::<WasmSweep>(cache, spec, plan, |t| t.clone(), |_| {}).map(|(answer, _)| answer)
}

/// Independent vertex sets of the `rows` x `width` grid, by trying every
/// subset.
fn brute_force(rows: u32, width: u32) -> u64 {
    let cells = rows * width;
    (0u64..1 << cells)
        .filter(|set| {
            (0..cells).all(|c| {
                let (r, x) = (c / width, c % width);
                let has = |cell: u32| set >> cell & 1 == 1;
                !has(c) || ((x + 1 == width || !has(c + 1)) && (r + 1 == rows || !has(c + width)))
            })
        })
        .count() as u64
}

#[test]
fn a_sweep_counts_what_brute_force_counts_in_any_number_of_buckets() {
    let cache = cache_with(NativeRuntime::new());
    for (rows, width) in [(1, 1), (1, 5), (3, 3), (4, 3), (2, 7), (4, 4)] {
        let expected = brute_force(rows, width);
        for buckets in [0, 1, 3] {
            let answer = run(&spec(&format!("n={width} m={rows}"), buckets), &cache).unwrap();
            assert_eq!(
                answer.line,
                expected.to_string(),
                "{rows} x {width}, {buckets}"
            );
            assert_eq!(
                answer.details["levels"].as_array().unwrap().len(),
                rows as usize
            );
        }
    }
}

#[test]
fn exact_sweeps_equal_the_guest_runner_and_the_grid_turned_a_quarter() {
    let cache = cache_with(NativeRuntime::new());
    // 9 x 13 has about 2^76 independent sets: two primes and the spare.
    let wide = run(&exact("n=13 m=9", 4, 90), &cache).unwrap();
    let tall = run(&exact("n=9 m=13", 2, 90), &cache).unwrap();
    assert_eq!(wide.line, tall.line);
    let value: BigUint = wide.line.parse().unwrap();
    assert!(value.bits() > 64, "{value}");
    let primes = [DEFAULT_MODULUS, (1 << 61) - 1];
    let native = run_sweep::<IndependentRows>("n=13\nm=9", &primes).unwrap();
    for (residues, &p) in native.residues.iter().zip(&primes) {
        assert_eq!(residues[0], crate::exact::residue(&value, p), "mod {p}");
    }
    // The same job modulo the default prime agrees.
    let modular = run(&spec("n=13 m=9", 0), &cache).unwrap();
    assert_eq!(modular.line, native.residues[0][0].to_string());
}

#[test]
fn an_answer_past_its_bound_fails_the_job() {
    let cache = cache_with(NativeRuntime::new());
    let error = run(&exact("n=13 m=9", 0, 70), &cache).unwrap_err();
    assert!(error.to_string().contains("raise --bound-bits"), "{error}");
}

#[test]
fn a_module_whose_plan_changes_between_shards_fails_the_job() {
    // The first instance (level 0) and the second (level 1's first shard)
    // agree; the third says another key limit.
    let cache = cache_with(NativeRuntime::changing_plan_from(2));
    let error = run(&spec("n=6 m=5", 3), &cache).unwrap_err();
    assert!(
        error.to_string().contains("depend on its parameters alone"),
        "{error}"
    );
}

/// Level 0's result for `spec`, as its shard made it: the task, the
/// partial and the output.
fn level_zero(
    spec: &WasmSweepSpec,
    cache: &KernelCache,
) -> (WasmSweepPlan, WasmSweepTask, WasmSweepPartial, Vec<u8>) {
    let plan = WasmSweep::prepare(spec, cache, &Control::new()).unwrap();
    let task = WasmSweep::plan_stage(spec, &plan, 1)
        .unwrap()
        .remove(0)
        .task;
    let control = Control::new();
    let mut on_checkpoint = |_| {};
    let mut run = ShardRun {
        input: None,
        checkpoint: &crate::kind::NO_CHECKPOINT,
        cache,
        control: &control,
        checkpoint_every: std::time::Duration::from_secs(3600),
        on_checkpoint: &mut on_checkpoint,
        room: None,
    };
    let outcome = WasmSweep::execute(spec, &task, &mut run).unwrap();
    let output = outcome.output.into_bytes().unwrap();
    (plan, task, outcome.partial, output)
}

#[test]
fn results_that_misroute_miscount_or_break_the_plan_are_refused() {
    let cache = cache_with(NativeRuntime::new());
    let spec = spec("n=6 m=4", 2);
    let (plan, task, partial, output) = level_zero(&spec, &cache);
    WasmSweep::check_result(&spec, &plan, &task, &partial, &output).unwrap();
    let refused = |partial: &WasmSweepPartial, output: &[u8]| {
        WasmSweep::check_result(&spec, &plan, &task, partial, output)
            .unwrap_err()
            .to_string()
    };
    // The buckets swapped: every state is in another bucket than its own.
    let buckets = split_buckets(&output).unwrap();
    assert_eq!(buckets.len(), 2);
    let swapped = encode_buckets(&[buckets[1].to_vec(), buckets[0].to_vec()]);
    assert!(refused(&partial, &swapped).contains("another bucket"));
    // One bucket left out.
    let one = encode_buckets(&[buckets[0].to_vec()]);
    assert!(refused(&partial, &one).contains("wrote 1 buckets"));
    // A damaged list.
    let mut damaged = output.clone();
    let at = damaged.len() - 6;
    damaged[at] ^= 0x10;
    assert!(refused(&partial, &damaged).contains("damaged"));
    // Counts that do not add up, sums past the prime, a plan past the ABI.
    let more = WasmSweepPartial {
        sent: partial.sent + 1,
        ..partial.clone()
    };
    assert!(refused(&more, &output).contains("sent"));
    let past = WasmSweepPartial {
        answer: vec![vec![DEFAULT_MODULUS]],
        ..partial.clone()
    };
    assert!(refused(&past, &output).contains("not below the prime"));
    let mut broken = partial.clone();
    broken.shape.key_limit = MAX_SWEEP_KEY_LIMIT as u32 + 1;
    assert!(refused(&broken, &output).contains("ABI's limits"));
}

#[test]
fn bad_specs_are_refused_with_the_value_named() {
    let good = spec("n=3", 0);
    WasmSweep::validate(&good).unwrap();
    assert_eq!(
        WasmSweep::describe(&good),
        format!(
            "wasm sweep sha256:{} n=3, mod 1000000007",
            &good.module_sha256[..12]
        )
    );
    let cases = [
        (
            WasmSweepSpec {
                buckets: MAX_BUCKETS + 1,
                ..good.clone()
            },
            "buckets must be at most",
        ),
        (
            WasmSweepSpec {
                modulus: 1_000_000,
                ..good.clone()
            },
            "the modulus must be a prime",
        ),
        (exact("n=3", 0, 0), "bound_bits between 1 and"),
        (
            WasmSweepSpec {
                params: vec!["no equals sign".into()],
                ..good.clone()
            },
            "K=V",
        ),
        (
            WasmSweepSpec {
                module_sha256: "xyz".into(),
                ..good.clone()
            },
            "module_sha256",
        ),
    ];
    for (spec, said) in cases {
        let error = WasmSweep::validate(&spec).unwrap_err().to_string();
        assert!(error.contains(said), "{spec:?}: {error}");
    }
    // A module the coordinator does not hold is refused with how to send it.
    let cache = cache_with(NativeRuntime::new());
    let unsent = WasmSweepSpec {
        module_sha256: sha256_hex(b"never sent"),
        ..good
    };
    let error = WasmSweep::prepare(&unsent, &cache, &Control::new()).unwrap_err();
    assert!(error.to_string().contains("--module FILE"), "{error}");
}
