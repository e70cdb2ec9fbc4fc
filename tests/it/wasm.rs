//! User kernels in WebAssembly through the runner: the two example modules on
//! one and three workers equal the published counts (modulo a prime, and
//! exactly beyond 64 bits by the CRT), replicas agree, only workers started
//! with `--allow-wasm` run them, modules are checked and stored once at
//! submission, a faulty module fails its job with the reason and stalls no
//! worker, and a re-leased shard resumes from the module's checkpoint.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tally_example_independent_sets::A006506;
use tally_example_queens::A000170;
use tally_kinds::guest::sha256_hex;
use tally_kinds::spec::JobSpec;
use tally_kinds::wasm::{DEFAULT_MODULUS, WasmSpec};
use tally_wasm::{GuestSandbox, Limits};
use tally_wire::proto::{self, JobState};
use tonic::transport::Channel;

use crate::processes::{Resumption, resumes_from_its_last_checkpoint_as};
use crate::support::*;

type JobClient = proto::job_service_client::JobServiceClient<Channel>;

const QUEENS: &[u8] = include_bytes!("../../examples/wasm/queens.wasm");
const INDEPENDENT_SETS: &[u8] = include_bytes!("../../examples/wasm/independent-sets.wasm");
const P61: u64 = (1 << 61) - 1;

/// A job of `module` modulo the default prime, one output.
fn wasm_spec(module: &[u8], shards: u64, params: &[&str]) -> WasmSpec {
    WasmSpec {
        module_sha256: sha256_hex(module),
        shards,
        params: params.iter().map(|p| p.to_string()).collect(),
        modulus: DEFAULT_MODULUS,
        exact: false,
        bound_bits: 0,
        outputs: 1,
    }
}

fn wasm_job(module: &[u8], shards: u64, params: &[&str], modulus: u64) -> JobSpec {
    JobSpec::new(WasmSpec {
        modulus,
        ..wasm_spec(module, shards, params)
    })
}

fn exact_job(module: &[u8], shards: u64, params: &[&str], bound_bits: u32) -> JobSpec {
    JobSpec::new(WasmSpec {
        modulus: 0,
        exact: true,
        bound_bits,
        ..wasm_spec(module, shards, params)
    })
}

async fn submit_with(
    client: &mut JobClient,
    spec: &JobSpec,
    attachments: &[&[u8]],
) -> Result<proto::Job, tonic::Status> {
    let response = client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(spec)),
            attachments: attachments.iter().map(|a| a.to_vec()).collect(),
            ..Default::default()
        })
        .await?;
    Ok(response.into_inner().job.expect("a job"))
}

fn wasm_workers(url: &str, count: usize) -> Workers {
    Workers::start_with(url, count, 2, |c| allow_wasm(c, Limits::default()))
}

/// Lets the worker run wasm jobs, in a sandbox of `limits`, as `tally worker
/// --allow-wasm` does.
fn allow_wasm(c: &mut tally_worker::WorkerConfig, limits: Limits) {
    c.allow_wasm = true;
    let sandbox = GuestSandbox::new(limits).expect("a sandbox");
    c.kernel_cache.set_guest_runtime(Arc::new(sandbox));
}

/// Waits for the job to fail, with an error that says `says`.
async fn failed_saying(client: &mut JobClient, id: &str, says: &str) -> proto::Job {
    let done = wait_finished(client, id, Duration::from_secs(300)).await;
    assert_eq!(state(&done), JobState::Failed, "{}", done.description);
    assert!(done.error.contains(says), "{says:?} not in: {}", done.error);
    done
}

async fn succeeded(client: &mut JobClient, id: &str) -> proto::Job {
    let done = wait_finished(client, id, Duration::from_secs(300)).await;
    assert_eq!(
        state(&done),
        JobState::Succeeded,
        "{}: {}",
        done.description,
        done.error
    );
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_through_the_runner_equal_the_published_values_on_1_and_3_workers() {
    for workers in [1, 3] {
        let coordinator = start_coordinator(None).await;
        let url = coordinator.url();
        let mut client = jobs_client(&url).await;
        let pool = wasm_workers(&url, workers);
        let mut expected = Vec::new();
        for n in 1..=12u64 {
            let spec = wasm_job(QUEENS, 5, &[&format!("n={n}")], DEFAULT_MODULUS);
            // The module goes with the first job only; the others name it.
            let attachments: &[&[u8]] = if n == 1 { &[QUEENS] } else { &[] };
            let job = submit_with(&mut client, &spec, attachments).await.unwrap();
            expected.push((job.id, A000170[n as usize].to_string()));
        }
        for n in 1..=9u64 {
            for modulus in [DEFAULT_MODULUS, P61] {
                let spec = wasm_job(INDEPENDENT_SETS, 7, &[&format!("n={n}")], modulus);
                let job = submit_with(&mut client, &spec, &[INDEPENDENT_SETS])
                    .await
                    .unwrap();
                let published = A006506[n as usize] % u128::from(modulus);
                expected.push((job.id, published.to_string()));
            }
        }
        for (id, answer) in expected {
            let done = succeeded(&mut client, &id).await;
            assert_eq!(
                done.answer, answer,
                "{} on {workers} worker(s)",
                done.description
            );
            assert_eq!(done.kind, "wasm");
            assert_eq!(done.work_done, done.work_total, "{}", done.description);
        }
        pool.stop().await;
        coordinator.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_count_beyond_64_bits_joins_the_residues_of_several_primes() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = wasm_workers(&url, 3);
    let spec = exact_job(INDEPENDENT_SETS, 9, &["n=11"], 80);
    let job = submit_with(&mut client, &spec, &[INDEPENDENT_SETS])
        .await
        .unwrap();
    let done = succeeded(&mut client, &job.id).await;
    assert!(A006506[11] > u128::from(u64::MAX));
    assert_eq!(done.answer, A006506[11].to_string());
    // 80 bits take two primes below 2^62, and a spare: 9 shards each.
    assert_eq!(done.shards_total, 27);
    let result = client
        .result(proto::ResultRequest { job_id: job.id })
        .await
        .unwrap()
        .into_inner();
    let details: serde_json::Value = serde_json::from_str(&result.details_json).unwrap();
    assert_eq!(details["primes"].as_array().unwrap().len(), 2, "{details}");
    assert_eq!(
        details["spare_primes"].as_array().unwrap().len(),
        1,
        "{details}"
    );
    // A bound the answer breaks is said, not answered wrongly.
    let tight = exact_job(INDEPENDENT_SETS, 3, &["n=11"], 70);
    let job = submit_with(&mut client, &tight, &[]).await.unwrap();
    failed_saying(&mut client, &job.id, "raise --bound-bits").await;
    pool.stop().await;
    coordinator.shutdown().await;
}

/// Each shard returns 2^`power` modulo its prime: S shards sum to S * 2^power.
fn power_of_two(power: u32) -> Vec<u8> {
    handmade(
        "",
        &format!(
            "(i64.store (local.get 7) (i64.rem_u (i64.shl (i64.const 1) (i64.const {power})) \
             (local.get 2))) (i32.const 1)"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_sum_at_or_above_its_bound_fails_instead_of_printing_a_wrong_number() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = wasm_workers(&url, 2);
    // 4 shards of 2^60 make 2^62, whose residue modulo the one prime below
    // 2^62 a 61-bit bound needs is 57, below the bound: only the spare
    // prime tells it from the truth.
    let module = power_of_two(60);
    let mut attachments: &[&[u8]] = &[&module];
    for (bound_bits, answer) in [(61, None), (62, None), (63, Some("4611686018427387904"))] {
        let spec = exact_job(&module, 4, &[], bound_bits);
        let job = submit_with(&mut client, &spec, attachments).await.unwrap();
        attachments = &[];
        match answer {
            Some(answer) => assert_eq!(succeeded(&mut client, &job.id).await.answer, answer),
            None => {
                failed_saying(&mut client, &job.id, "raise --bound-bits").await;
            }
        }
    }
    pool.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_of_a_wasm_shard_agree_bit_for_bit() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = wasm_workers(&url, 2);
    let mut spec = wasm_job(INDEPENDENT_SETS, 6, &["n=9"], P61);
    spec.options.replicas = 2;
    let job = submit_with(&mut client, &spec, &[INDEPENDENT_SETS])
        .await
        .unwrap();
    let done = succeeded(&mut client, &job.id).await;
    assert_eq!(done.answer, (A006506[9] % u128::from(P61)).to_string());
    assert_eq!(done.shards_failed_attempts, 0);
    let ev = events(&mut client, &job.id).await;
    for shard in 0..6 {
        let by = |kind: &str| {
            ev.iter()
                .find(|e| e.kind == kind && e.shard == shard)
                .map(|e| e.worker_id.clone())
                .unwrap_or_else(|| panic!("shard {shard} has no {kind} event: {ev:?}"))
        };
        assert_ne!(by("replica"), by("accepted"), "shard {shard}");
    }
    pool.stop().await;
    // A worker whose results are altered disagrees with an honest one.
    let honest = wasm_workers(&url, 1);
    let faulty = Workers::start_with(&url, 1, 2, |c| {
        allow_wasm(c, Limits::default());
        c.corrupt_results = true;
        c.worker_id = format!("faulty-{}", std::process::id());
    });
    spec.options.max_attempts = 2;
    spec.params.insert("shards".into(), 2.into());
    let job = submit_with(&mut client, &spec, &[]).await.unwrap();
    failed_saying(&mut client, &job.id, "replicas disagree").await;
    honest.stop().await;
    faulty.stop().await;
    coordinator.shutdown().await;
}

/// A worker may run wasm jobs only in the sandbox whoever starts it gives
/// it: allowed them without one, it refuses to start, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_allowed_wasm_without_a_sandbox_refuses_to_start() {
    let coordinator = start_coordinator(None).await;
    let spill = tempfile::tempdir().unwrap();
    let mut config = tally_worker::WorkerConfig::new(coordinator.url());
    config.spill_dir = spill.path().to_path_buf();
    config.allow_wasm = true;
    let run = tally_worker::run(config, std::future::pending());
    let refused = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the worker stops at once")
        .expect_err("refused");
    assert!(
        refused.to_string().contains("no sandbox was given"),
        "{refused}"
    );
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_workers_started_with_allow_wasm_are_leased_wasm_shards() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let plain = Workers::start_with(&url, 1, 2, |c| c.worker_id = "plain".into());
    let wasm = submit_with(&mut client, &wasm_job(QUEENS, 4, &["n=8"], P61), &[QUEENS])
        .await
        .unwrap();
    let waiting = events(&mut client, &wasm.id).await;
    assert!(
        waiting
            .iter()
            .any(|e| e.kind == "waiting" && e.message.contains("--allow-wasm")),
        "{waiting:?}"
    );
    // The plain worker is live and leasing: it runs a built-in job submitted
    // after the wasm one, and passes the wasm one over.
    let queens = JobSpec::from_json(r#"{"kind": "queens", "n": 8}"#).unwrap();
    let builtin = submit(&mut client, queens.spec(), "").await;
    succeeded(&mut client, &builtin.id).await;
    let still = get_job(&mut client, &wasm.id).await;
    assert_eq!(state(&still), JobState::Queued);
    assert_eq!(still.shards_leased, 0);
    let allowed = wasm_workers(&url, 1);
    let done = succeeded(&mut client, &wasm.id).await;
    assert_eq!(done.answer, A000170[8].to_string());
    let ev = events(&mut client, &wasm.id).await;
    assert!(
        ev.iter().all(|e| e.worker_id != "plain"),
        "a wasm shard went to the plain worker: {ev:?}"
    );
    plain.stop().await;
    allowed.stop().await;
    coordinator.shutdown().await;
}

/// A module speaking the ABI whose `tally_shard` body is `body` (locals: 0
/// shard, 1 shards, 2 prime, 3 params, 4 params_len, 5 state, 6 state_len, 7
/// out, 8 out_len), with `imports`.
fn handmade(imports: &str, body: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module {imports}
             (memory (export "memory") 1)
             (func (export "tally_abi_version") (result i32) (i32.const 1))
             (func (export "tally_alloc") (param i32) (result i32) (i32.const 4096))
             (func (export "tally_shard")
               (param i64 i64 i64 i32 i32 i32 i32 i32 i32) (result i32) {body}))"#
    ))
    .expect("the test module assembles")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_are_checked_and_stored_once_at_submission() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let clock = handmade(
        r#"(import "env" "clock_time_get" (func (param i32 i64 i32) (result i32)))"#,
        "(i32.const 1)",
    );
    let oversized = vec![0u8; tally_kinds::guest::MAX_MODULE_BYTES + 1];
    let abi_2 = wat::parse_str(
        r#"(module
             (memory (export "memory") 1)
             (func (export "tally_abi_version") (result i32) (i32.const 2))
             (func (export "tally_alloc") (param i32) (result i32) (i32.const 4096))
             (func (export "tally_shard")
               (param i64 i64 i64 i32 i32 i32 i32 i32 i32) (result i32) (i32.const 1)))"#,
    )
    .unwrap();
    let queens = wasm_job(QUEENS, 2, &["n=6"], P61);
    let cases: Vec<(&str, JobSpec, Vec<&[u8]>, &str)> = vec![
        (
            "not wasm",
            wasm_job(b"hello", 2, &[], P61),
            vec![b"hello"],
            "not a valid module",
        ),
        (
            "a forbidden import",
            wasm_job(&clock, 2, &[], P61),
            vec![&clock],
            "env.clock_time_get, which the ABI does not offer",
        ),
        (
            "a module of another ABI version",
            wasm_job(&abi_2, 2, &[], P61),
            vec![&abi_2],
            "it speaks ABI version 2, and this sandbox speaks ABI version 1",
        ),
        (
            "a module the coordinator does not hold",
            queens.clone(),
            vec![],
            "does not hold: send it with the job (--module FILE with the kind's flags, \
             --attach FILE with --spec-file)",
        ),
        (
            "an attachment the spec does not name",
            queens.clone(),
            vec![QUEENS, INDEPENDENT_SETS],
            "not one the job spec names",
        ),
        (
            "an oversized module",
            wasm_job(&oversized, 2, &[], P61),
            vec![&oversized],
            "more than the",
        ),
    ];
    for (what, spec, attachments, says) in cases {
        let status = submit_with(&mut client, &spec, &attachments)
            .await
            .expect_err(what);
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        );
        assert!(
            status.message().contains(says),
            "{what}: {}",
            status.message()
        );
    }
    let listed = |client: &mut JobClient| {
        let mut client = client.clone();
        async move {
            let request = proto::ListJobsRequest::default();
            client.list(request).await.unwrap().into_inner().jobs.len()
        }
    };
    assert_eq!(listed(&mut client).await, 0, "a refused job was stored");
    // Stored once; a later job names it alone; it goes with the last job
    // that names it.
    let first = submit_with(&mut client, &queens, &[QUEENS]).await.unwrap();
    let mut again = queens.clone();
    again.params.insert("shards".into(), 3.into());
    let second = submit_with(&mut client, &again, &[]).await.unwrap();
    assert!(
        first.description.contains(&sha256_hex(QUEENS)[..12]),
        "{}",
        first.description
    );
    let mut workers = workers_client(&url).await;
    let session = register(&mut workers, "fetcher").await;
    let fetch = |workers: &mut proto::worker_service_client::WorkerServiceClient<Channel>| {
        let mut workers = workers.clone();
        let session = session.clone();
        async move {
            workers
                .fetch_attachment(proto::FetchAttachmentRequest {
                    worker_id: "fetcher".into(),
                    session,
                    sha256: sha256_hex(QUEENS),
                })
                .await
        }
    };
    assert_eq!(fetch(&mut workers).await.unwrap().into_inner().data, QUEENS);
    for (job, kept) in [(first, true), (second, false)] {
        client
            .delete(proto::DeleteRequest {
                job_id: job.id,
                force: true,
            })
            .await
            .unwrap();
        match fetch(&mut workers).await {
            Ok(_) => assert!(kept, "the module outlived its last job"),
            Err(status) => {
                assert!(!kept, "the module went while a job named it: {status:?}");
                assert_eq!(status.code(), tonic::Code::NotFound);
            }
        }
    }
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_faulty_module_fails_its_job_with_the_reason_and_stalls_no_worker() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    // One slot, and limits small enough to reach: a shard the worker could
    // not stop would hold the slot.
    let pool = Workers::start_with(&url, 1, 1, |c| {
        let limits = Limits {
            fuel: 1 << 26,
            memory_bytes: 64 << 20,
            ..Limits::default()
        };
        allow_wasm(c, limits);
    });
    let trap = handmade("", "unreachable");
    let endless = handmade("", "(loop (br 0)) (i32.const 1)");
    let memory_bomb = handmade(
        "",
        "(loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) (i32.const 1)",
    );
    let two_residues = handmade("", "(i32.const 2)");
    // "Cancelled" when nothing cancelled it: was handed back and leased
    // again at once, for ever.
    let cancelled_unasked = handmade("", "(i32.const -3)");
    let honest = wasm_job(QUEENS, 3, &["n=7"], P61);
    for (module, says) in [
        (&trap, "the module trapped"),
        (&endless, "used all its fuel"),
        (&memory_bomb, "more than its memory limit"),
        (&two_residues, "returned 2 residues, the job asks for 1"),
        (&cancelled_unasked, "the shard was not cancelled"),
    ] {
        let job = submit_with(&mut client, &wasm_job(module, 3, &[], P61), &[module])
            .await
            .unwrap();
        let done = failed_saying(&mut client, &job.id, says).await;
        // Failed at once: the module's fault is the same on every attempt.
        assert_eq!(done.shards_failed_attempts, 1, "{}", done.error);
        // And the worker goes on.
        let after = submit_with(&mut client, &honest, &[QUEENS]).await.unwrap();
        let done = succeeded(&mut client, &after.id).await;
        assert_eq!(done.answer, A000170[7].to_string());
    }
    pool.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_stops_its_endless_module_and_frees_the_slot() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = Workers::start_with(&url, 1, 1, |c| allow_wasm(c, Limits::default()));
    let endless = handmade("", "(loop (br 0)) (i32.const 1)");
    let job = submit_with(&mut client, &wasm_job(&endless, 1, &[], P61), &[&endless])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while get_job(&mut client, &job.id).await.shards_leased == 0 {
        assert!(
            Instant::now() < deadline,
            "the endless shard was never leased"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client
        .cancel(proto::CancelRequest { job_id: job.id })
        .await
        .unwrap();
    // The one slot runs the next job only once the endless shard has stopped.
    let honest = wasm_job(QUEENS, 3, &["n=7"], P61);
    let after = submit_with(&mut client, &honest, &[QUEENS]).await.unwrap();
    let done = succeeded(&mut client, &after.id).await;
    assert_eq!(done.answer, A000170[7].to_string());
    pool.stop().await;
    coordinator.shutdown().await;
}

/// `out[0] = shard + 1`, `out[1] = (shard + 1)^2`, modulo the prime: two
/// residues a shard.
fn two_sums() -> Vec<u8> {
    handmade(
        "",
        "(local $x i64)
         (local.set $x (i64.add (local.get 0) (i64.const 1)))
         (i64.store (local.get 7) (i64.rem_u (local.get $x) (local.get 2)))
         (i64.store offset=8 (local.get 7)
           (i64.rem_u (i64.mul (local.get $x) (local.get $x)) (local.get 2)))
         (i32.const 2)",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_several_outputs_sums_each_and_lists_them() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let pool = wasm_workers(&url, 2);
    let module = two_sums();
    let shards = 1000u64;
    let sum: u64 = (1..=shards).sum();
    let squares: u64 = (1..=shards).map(|x| x * x).sum();
    for modulus in [P61, 101] {
        let mut spec = wasm_job(&module, shards, &[], modulus);
        spec.params.insert("outputs".into(), 2.into());
        let job = submit_with(&mut client, &spec, &[&module]).await.unwrap();
        let done = succeeded(&mut client, &job.id).await;
        let expected = format!("{} {}", sum % modulus, squares % modulus);
        assert_eq!(done.answer, expected, "mod {modulus}");
    }
    pool.stop().await;
    coordinator.shutdown().await;
}

/// A worker process killed while it holds a checkpointed independent-sets
/// shard: a second worker is leased the shard with the module's saved state,
/// and the answer is the published one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_leased_wasm_shard_resumes_from_the_modules_checkpoint() {
    let spec = wasm_job(INDEPENDENT_SETS, 1, &["n=11", "checkpoint_every=1"], P61);
    let run = Resumption {
        coordinator_args: &[],
        worker_args: &["--allow-wasm"],
        attachments: &[INDEPENDENT_SETS],
        answer: (A006506[11] % u128::from(P61)).to_string(),
    };
    resumes_from_its_last_checkpoint_as(spec, run).await;
}
