//! User sweeps in WebAssembly through the runner (`wasm-sweep`): the example
//! sweep module on one and three workers equals the published counts and
//! the guest SDK's own runner, exactly beyond 64 bits; the pegs example
//! equals the built-in kind; replicas of its level shards agree and a faulty
//! worker's disagree; a module that breaks its plan fails its job with the
//! reason; a kill -9 of a worker and the coordinator mid-sweep resumes to
//! the same answer, no level shard accepted twice; and level shards that
//! spill past a tiny memory budget count what the built-in kind counts.

use std::sync::Arc;
use std::time::Duration;

use tally_example_independent_sets::A006506;
use tally_example_independent_sets_sweep::run_sweep_native;
use tally_kinds::guest::sha256_hex;
use tally_kinds::spec::JobSpec;
use tally_kinds::wasm_sweep::{DEFAULT_MODULUS, WasmSweepSpec};
use tally_wasm::{GuestSandbox, Limits};
use tally_wire::proto::{self, JobState};
use tonic::transport::Channel;

use crate::processes::{Resumption, survives_kills_as};
use crate::support::*;

type JobClient = proto::job_service_client::JobServiceClient<Channel>;

const SWEEP: &[u8] = include_bytes!("../../examples/wasm/independent-sets-sweep.wasm");
const PEGS: &[u8] = include_bytes!("../../examples/wasm/pegs-sweep.wasm");

/// A sweep of the example module with `params`, `buckets` a level (0: auto).
fn sweep_spec(params: &[&str], buckets: u32) -> WasmSweepSpec {
    WasmSweepSpec {
        module_sha256: sha256_hex(SWEEP),
        params: params.iter().map(|p| p.to_string()).collect(),
        modulus: DEFAULT_MODULUS,
        exact: false,
        bound_bits: 0,
        buckets,
    }
}

fn exact_spec(params: &[&str], buckets: u32, bound_bits: u32) -> WasmSweepSpec {
    WasmSweepSpec {
        modulus: 0,
        exact: true,
        bound_bits,
        ..sweep_spec(params, buckets)
    }
}

async fn submit_with_module(client: &mut JobClient, spec: &JobSpec) -> proto::Job {
    submit_with(client, spec, SWEEP).await
}

async fn submit_with(client: &mut JobClient, spec: &JobSpec, module: &[u8]) -> proto::Job {
    submit_attached(client, spec, &[module]).await
}

fn sweep_workers(url: &str, count: usize, corrupt: bool) -> Workers {
    Workers::start_with(url, count, 2, |c| {
        c.allow_wasm = true;
        let sandbox = GuestSandbox::new(Limits::default()).expect("a sandbox");
        c.kernel_cache.set_guest_runtime(Arc::new(sandbox));
        if corrupt {
            c.corrupt_results = true;
            c.worker_id = format!("faulty-{}", std::process::id());
        }
    })
}

/// The built-in pegs kind's job on the triangle of `side` from `start`.
fn built_in_pegs(side: usize, start: usize, end: Option<usize>) -> JobSpec {
    JobSpec::new(tally_kinds::pegs::PegsSpec {
        board: format!("triangle:{side}"),
        start: Some(start as u32),
        end: end.map(|e| e as u32),
        prefixes: 0,
        plan: None,
        buckets: 0,
        by_final_hole: false,
        no_prune: false,
    })
}

async fn finished(client: &mut JobClient, id: &str) -> proto::Job {
    wait_finished(client, id, Duration::from_secs(300)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_example_through_the_runner_equals_the_published_counts_on_1_and_3_workers() {
    for workers in [1, 3] {
        let coordinator = start_coordinator(None).await;
        let url = coordinator.url();
        let mut client = jobs_client(&url).await;
        let pool = sweep_workers(&url, workers, false);
        let mut expected = Vec::new();
        for n in 1..A006506.len() {
            // Past 64 bits from n = 11 on: two primes and the spare.
            let spec = exact_spec(&[&format!("n={n}")], [0, 1, 3][n % 3], 100);
            let job = submit_with_module(&mut client, &JobSpec::new(spec)).await;
            expected.push((job.id, A006506[n].to_string(), n));
        }
        // Grids the published table does not list, modulo the default prime,
        // against the guest SDK's runner of the same model.
        for (rows, width) in [(30, 9), (7, 14)] {
            let params = [format!("n={width}"), format!("m={rows}")];
            let params: Vec<&str> = params.iter().map(String::as_str).collect();
            let native = run_sweep_native(&params.join("\n"), &[DEFAULT_MODULUS]).unwrap();
            let spec = JobSpec::new(sweep_spec(&params, 0));
            let job = submit_with_module(&mut client, &spec).await;
            expected.push((job.id, native.residues[0][0].to_string(), rows));
        }
        for (id, answer, levels) in expected {
            let done = finished(&mut client, &id).await;
            assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
            assert_eq!(done.answer, answer, "{} on {workers}", done.description);
            assert_eq!(done.kind, "wasm-sweep");
            // One stage a level.
            assert_eq!(done.stages_total as usize, levels, "{}", done.description);
        }
        pool.stop().await;
        coordinator.shutdown().await;
    }
}

/// The example pegs module (a frontier search written as a sweep) through
/// the runner counts what the built-in pegs kind counts on triangles, from
/// several starts, with and without a final hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_pegs_module_through_the_runner_equals_the_built_in_kind() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = sweep_workers(&url, 2, false);
    let mut expected = Vec::new();
    for (side, start, end) in [(5, 1, None), (5, 4, None), (5, 13, Some(13)), (6, 1, None)] {
        let rows: Vec<String> = (1..=side).map(|r| "o".repeat(r)).collect();
        let params = [
            format!("board={}", rows.join("/")),
            "moves=triangle".to_string(),
            format!("start={start}"),
        ];
        let mut params: Vec<String> = params.to_vec();
        if let Some(end) = end {
            params.push(format!("end={end}"));
        }
        let params: Vec<&str> = params.iter().map(String::as_str).collect();
        let guest = JobSpec::new(WasmSweepSpec {
            module_sha256: sha256_hex(PEGS),
            ..exact_spec(&params, 2, 64)
        });
        let built_in = built_in_pegs(side, start, end);
        let job = submit_with(&mut client, &guest, PEGS).await;
        expected.push((job.id, direct_answer(&built_in)));
    }
    let mut solvable = 0;
    for (id, answer) in expected {
        let done = finished(&mut client, &id).await;
        assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
        assert_eq!(done.answer, answer, "{}", done.description);
        solvable += usize::from(answer != "0");
    }
    assert!(solvable >= 3, "{solvable}");
    pool.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_sweeps_level_shards_agree_and_a_faulty_workers_do_not() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = sweep_workers(&url, 2, false);
    let mut spec = JobSpec::new(sweep_spec(&["n=9"], 3));
    spec.options.replicas = 2;
    let job = submit_with_module(&mut client, &spec).await;
    let done = finished(&mut client, &job.id).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(
        done.answer,
        (A006506[9] % u128::from(DEFAULT_MODULUS)).to_string()
    );
    assert_eq!(done.shards_failed_attempts, 0);
    let replicas = events(&mut client, &job.id).await;
    let replicas = replicas.iter().filter(|e| e.kind == "replica").count();
    assert_eq!(replicas as u64, done.shards_total, "one replica a shard");
    pool.stop().await;
    // A worker whose results are altered disagrees with an honest one.
    let honest = sweep_workers(&url, 1, false);
    let faulty = sweep_workers(&url, 1, true);
    spec.options.max_attempts = 2;
    spec.params
        .insert("params".into(), serde_json::json!(["n=8"]));
    let job = submit_with_module(&mut client, &spec).await;
    let done = finished(&mut client, &job.id).await;
    assert_eq!(state(&done), JobState::Failed, "{}", done.answer);
    assert!(done.error.contains("replicas disagree"), "{}", done.error);
    honest.stop().await;
    faulty.stop().await;
    coordinator.shutdown().await;
}

/// A sweep on a worker with a tiny memory budget, through the
/// coordinator's stage store and through a directory: its level shards
/// spill sorted runs, keep their larger inputs in files and send their
/// outputs from files, and the count equals the built-in kind's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_whose_level_shards_spill_equals_the_built_in_kind() {
    let params = [
        "board=o/oo/ooo/oooo/ooooo/oooooo",
        "moves=triangle",
        "start=4",
    ];
    let guest = JobSpec::new(WasmSweepSpec {
        module_sha256: sha256_hex(PEGS),
        ..exact_spec(&params, 2, 64)
    });
    let answer = direct_answer(&built_in_pegs(6, 4, None));
    let stage = tempfile::tempdir().unwrap();
    let file_store = format!("file://{}", stage.path().display());
    for store in ["coordinator", file_store.as_str()] {
        let (coordinator, mut client) = crate::kinds::coordinator_on_store(store).await;
        let spill = tempfile::tempdir().unwrap();
        let workers = Workers::start_with(&coordinator.url(), 1, 2, |c| {
            c.allow_wasm = true;
            let sandbox = GuestSandbox::new(Limits::default()).expect("a sandbox");
            c.kernel_cache.set_guest_runtime(Arc::new(sandbox));
            c.spill_dir = spill.path().to_path_buf();
            c.memory_budget = 48 << 10;
        });
        let job = submit_with(&mut client, &guest, PEGS).await;
        let done = finished(&mut client, &job.id).await;
        assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
        assert_eq!(done.answer, answer, "through {store}");
        let stats = workers.stop().await;
        assert_spilled_through_files(&stats, spill.path(), &format!("wasm-sweep through {store}"));
        coordinator.shutdown().await;
    }
}

/// 40 levels of 3 shards, each held 30 ms: killed at level 12, the sweep
/// resumes from its accepted levels.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sweep_survives_kills_of_the_coordinator_and_a_worker() {
    let params = ["n=10", "m=40"];
    let native = run_sweep_native(&params.join("\n"), &[DEFAULT_MODULUS]).unwrap();
    let spec = JobSpec::new(sweep_spec(&params, 3));
    let run = Resumption {
        coordinator_args: &[],
        worker_args: &["--allow-wasm"],
        attachments: &[SWEEP],
        answer: native.residues[0][0].to_string(),
    };
    survives_kills_as(spec, 12, run).await;
}

/// A sweep module of 1-byte keys, 1 weight, 1 step and at most 1 child a
/// state, whose `tally_sweep_starts` and `tally_sweep_expand` bodies are
/// given (in WAT: records written at `out`, their byte count returned).
fn faulty_sweep(starts: &str, expand: &str) -> Vec<u8> {
    let plan = "(i32.store (local.get 2) (i32.const 1))
        (i32.store offset=4 (local.get 2) (i32.const 1))
        (i32.store offset=8 (local.get 2) (i32.const 0))
        (i32.store offset=12 (local.get 2) (i32.const 1))
        (i32.store offset=16 (local.get 2) (i32.const 1))
        (i32.const 20)";
    let weights = "(i64.store (local.get 6) (i64.const 1)) (i32.const 8)";
    let text = tally_wasm::sweep::sweep_module_text(plan, starts, expand, weights);
    wat::parse_str(text).expect("the test module assembles")
}

/// A module that breaks its plan fails its job at once with the reason (the
/// same on every attempt), and the worker goes on to the next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_module_that_breaks_its_plan_fails_its_job_with_the_reason() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = sweep_workers(&url, 1, false);
    // One start state, key "a", count 1.
    let one_start = "(i32.store16 (local.get 2) (i32.const 1))
        (i32.store8 offset=2 (local.get 2) (i32.const 0x61))
        (i64.store offset=3 (local.get 2) (i64.const 1))
        (i32.const 11)";
    // A start key of 2 bytes.
    let long_key = "(i32.store16 (local.get 2) (i32.const 2))
        (i32.store16 offset=2 (local.get 2) (i32.const 0x6261))
        (i64.store offset=4 (local.get 2) (i64.const 1))
        (i32.const 12)";
    // Two children of state 0, keys "b" and "c".
    let two_children = "(i32.store (local.get 5) (i32.const 0))
        (i32.store16 offset=4 (local.get 5) (i32.const 1))
        (i32.store8 offset=6 (local.get 5) (i32.const 0x62))
        (i64.store offset=7 (local.get 5) (i64.const 1))
        (i32.store offset=15 (local.get 5) (i32.const 0))
        (i32.store16 offset=19 (local.get 5) (i32.const 1))
        (i32.store8 offset=21 (local.get 5) (i32.const 0x63))
        (i64.store offset=22 (local.get 5) (i64.const 1))
        (i32.const 30)";
    let one_child = "(i32.store (local.get 5) (i32.const 0))
        (i32.store16 offset=4 (local.get 5) (i32.const 1))
        (i32.store8 offset=6 (local.get 5) (i32.const 0x62))
        (i64.store offset=7 (local.get 5) (i64.const 1))
        (i32.const 15)";
    let cases = [
        (faulty_sweep(long_key, one_child), "a key of 2 bytes"),
        (
            faulty_sweep(one_start, two_children),
            "more children than the plan's 1",
        ),
    ];
    for (module, says) in cases {
        let spec = JobSpec::new(WasmSweepSpec {
            module_sha256: sha256_hex(&module),
            ..sweep_spec(&[], 0)
        });
        let job = submit_with(&mut client, &spec, &module).await;
        let done = finished(&mut client, &job.id).await;
        assert_eq!(state(&done), JobState::Failed, "{says}: {}", done.answer);
        assert!(done.error.contains(says), "{says:?} not in: {}", done.error);
        assert_eq!(done.shards_failed_attempts, 1, "{}", done.error);
    }
    // The same shape within its plan runs: one start, one child, each
    // weighing 1 on both levels.
    let good = faulty_sweep(one_start, one_child);
    let spec = JobSpec::new(WasmSweepSpec {
        module_sha256: sha256_hex(&good),
        ..sweep_spec(&[], 0)
    });
    let job = submit_with(&mut client, &spec, &good).await;
    let done = finished(&mut client, &job.id).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, "2");
    pool.stop().await;
    coordinator.shutdown().await;
}
