//! Real processes on loopback: a coordinator and workers as child processes of
//! the `tally` binary, killed with SIGKILL in the middle of jobs.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use support::*;
use tally_kernels::sliders::SliderParams;
use tally_kinds::blocks::{BlocksPlanName, BlocksSpec};
use tally_kinds::hex::{HexPlan, HexSpec};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::pegs::{PegsPlanName, PegsSpec};
use tally_kinds::queens::QueensSpec;
use tally_kinds::sliders::{SlidersPlanName, SlidersSpec};
use tally_kinds::spec::JobSpec;
use tally_wire::proto::{self, JobState};

/// kill -9 of the coordinator in the middle of a hex cell-step job: after a
/// restart on the same data directory the job completes with the right answer,
/// and no shard accepted before the kill is leased or accepted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_kill_and_restart_resumes_without_recomputing_accepted_shards() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut coordinator = spawn_coordinator(port, &data, &log);
    // Each shard takes at least 50 ms, so the steps after the 20th take
    // seconds: the kill lands mid-job even when this test is slow to look.
    let delay = ["--shard-delay-ms", "50"];
    let _w1 = spawn_worker(&url, "w1", 1, &delay, &log);
    let _w2 = spawn_worker(&url, "w2", 1, &delay, &log);
    let mut client = jobs_client(&url).await;

    let spec = JobSpec::new(HexSpec {
        side: 9,
        modulus: 1_000_000_007,
        plan: HexPlan::CellStep,
        shards_per_step: 3,
        exact: false,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    });
    let job = submit(&mut client, &spec, "").await;
    // Let a good part of the job be accepted, then kill the coordinator.
    wait_for_stage(&mut client, &job.id, 20).await;
    let before = events(&mut client, &job.id).await;
    coordinator.kill9();
    let killed_at = Instant::now();

    tokio::time::sleep(Duration::from_millis(500)).await;
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));

    let all = events(&mut client, &job.id).await;
    let resumed = all
        .iter()
        .position(|e| e.kind == "resumed")
        .expect("a resumed event");
    let first_accept_after = all[resumed..].iter().find(|e| e.kind == "accepted");
    eprintln!(
        "restart: first accepted report {} ms after the restarted coordinator resumed ({} ms after the kill)",
        first_accept_after
            .map(|e| e.time_ms)
            .unwrap_or(0)
            .saturating_sub(all[resumed].time_ms),
        killed_at.elapsed().as_millis()
    );
    each_shard_accepted_once(&before, &all, done.shards_total);
}

/// kill -9 of the coordinator in the middle of a job of 100,000 short shards,
/// leased ahead and reported in batches by a worker of two slots: after a
/// restart the job completes with the right answer, every shard accepted
/// exactly once and none accepted before the kill leased again (the worker's
/// leases from before the restart are stale: see the scheduler's tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_kill_during_a_hundred_thousand_short_shards_loses_and_repeats_nothing() {
    use tally_kinds::synthetic::SyntheticSpec;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut coordinator = spawn_coordinator(port, &data, &log);
    let _worker = spawn_worker(&url, "w1", 2, &[], &log);
    let mut client = jobs_client(&url).await;
    let spec = JobSpec::new(SyntheticSpec {
        shards: 100_000,
        terms_per_shard: 1,
    });
    let job = submit(&mut client, &spec, "").await;
    // Kill once a good part is accepted, but well before the end.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = get_job(&mut client, &job.id).await;
        assert!(!finished(&j), "the job finished before the kill");
        if j.shards_done >= 20_000 {
            break;
        }
        assert!(Instant::now() < deadline, "20,000 shards not done");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = events(&mut client, &job.id).await;
    coordinator.kill9();
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    let all = events(&mut client, &job.id).await;
    each_shard_accepted_once(&before, &all, done.shards_total);
}

/// Waits until job `id` is at stage `stage`; it must not have finished by
/// then (the test's kills would land after the job).
async fn wait_for_stage(
    client: &mut tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
    id: &str,
    stage: u32,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = get_job(client, id).await;
        assert!(
            !finished(&j),
            "the job finished before the kill; make it longer"
        );
        if j.stage >= stage {
            return;
        }
        assert!(Instant::now() < deadline, "stage {stage} not reached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Across kills whose log up to the kill was `before` and whose whole log is
/// `all`: the log before the kill is kept unchanged, every shard was accepted
/// exactly once (`shards_total` of them), and none accepted before the kill
/// was leased again after it.
fn each_shard_accepted_once(before: &[proto::Event], all: &[proto::Event], shards_total: u64) {
    assert_eq!(
        &all[..before.len()],
        before,
        "events before the kill changed"
    );
    let accepted_before: HashSet<(u32, u32)> = before
        .iter()
        .filter(|e| e.kind == "accepted")
        .map(|e| (e.stage, e.shard))
        .collect();
    assert!(
        !accepted_before.is_empty(),
        "nothing was accepted before the kill"
    );
    let mut accepted: HashMap<(u32, u32), usize> = HashMap::new();
    for e in all.iter().filter(|e| e.kind == "accepted") {
        *accepted.entry((e.stage, e.shard)).or_default() += 1;
    }
    assert!(
        accepted.values().all(|&n| n == 1),
        "a shard was accepted twice"
    );
    assert_eq!(accepted.len() as u64, shards_total);
    for e in &all[before.len()..] {
        if e.kind == "leased" {
            assert!(
                !accepted_before.contains(&(e.stage, e.shard)),
                "shard {}/{} accepted before the kill was leased again",
                e.stage,
                e.shard
            );
        }
    }
}

/// kill -9 of the coordinator and of a worker in the middle of a frontier job
/// (blocks, a stage per layer, three buckets per layer): after restarts the
/// job ends with the single-process search's count, no shard is accepted twice,
/// and no shard accepted before the kills is leased again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frontier_job_survives_kills_of_the_coordinator_and_a_worker() {
    // 37 layers of 3 shards, each at least 30 ms: seconds of work after layer 10.
    let spec = JobSpec::new(BlocksSpec {
        puzzle: "aab.\naab.\ncd..\nefgh\nsame: cdefgh\n".into(),
        plan: BlocksPlanName::Frontier,
        buckets: 3,
    });
    survives_kills(spec, 10).await;
}

/// The same for the pegs frontier plan with two searches meeting in the
/// middle: 10 stages of both searches in 3 buckets each, then the join.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pegs_frontier_job_survives_kills_of_the_coordinator_and_a_worker() {
    let spec = JobSpec::new(PegsSpec {
        board: "triangle:6".into(),
        start: Some(2),
        end: Some(8),
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets: 3,
        by_final_hole: false,
        no_prune: false,
    });
    survives_kills(spec, 5).await;
}

/// The same for the sliders frontier plan, killed while the graph is being
/// found backwards (stage 24 of 26: the target is at distance 22, and one
/// shard takes the graph's small levels together): it reads forward levels
/// kept from stages long done, which the restarted coordinator must still
/// have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sliders_frontier_job_survives_kills_in_its_backward_levels() {
    let spec = JobSpec::new(SlidersSpec {
        board: SliderParams::new(3, 3, "WRRRRBBBB", "WBBBBRRRR"),
        plan: SlidersPlanName::Frontier,
        buckets: 3,
        ..Default::default()
    });
    survives_kills(spec, 24).await;
}

/// Group commit: the coordinator aborts right after its 30th store flush,
/// before it answers any call that flush covered (what a kill -9 between a
/// batched flush and its answers leaves). Every event a client read before
/// (reads answer only what is durable) is still there after the restart, the
/// store opens without `--recover` (nothing half-applied: its commit mark and
/// its content agree), and the job ends with the right answer, every shard
/// accepted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_a_group_flush_and_its_answers_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut coordinator =
        spawn_coordinator_with(port, &data, &log, &["--exit-after-flushes", "10"]);
    // Two workers of one slot, each holding a shard 100 ms: a flush covers
    // at most a call of each, and a call the results of the shards finished
    // while the one before it waited for its flush (a few, even with flushes
    // of 300 ms on a loaded machine); the registrations and the submission
    // take three flushes at most, so the seven after them carry far fewer
    // than the job's 64 results, and the abort comes in the middle of the job.
    let delay = ["--shard-delay-ms", "100"];
    let _w1 = spawn_worker(&url, "w1", 1, &delay, &log);
    let _w2 = spawn_worker(&url, "w2", 1, &delay, &log);
    let mut client = jobs_client(&url).await;
    let mut spec = JobSpec::new(QueensSpec { n: 11 });
    spec.options.lease_ttl_ms = 3_000;
    let job = submit(&mut client, &spec, "").await;
    // Read the log until the coordinator is gone; keep the last answer.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let request = proto::EventsRequest {
            job_id: job.id.clone(),
            from_sequence: 0,
        };
        match tokio::time::timeout(Duration::from_secs(5), client.events(request)).await {
            Ok(Ok(events)) => seen = events.into_inner().events,
            _ => break,
        }
        assert!(
            !seen.iter().any(|e| e.kind == "succeeded"),
            "the job finished before the coordinator aborted"
        );
        assert!(Instant::now() < deadline, "the coordinator never aborted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    coordinator.kill9();

    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    let all = events(&mut client, &job.id).await;
    each_shard_accepted_once(&seen, &all, done.shards_total);
}

/// Runs `spec` on two workers that hold each shard 30 ms, kill -9s one worker
/// and the coordinator once the job reaches `stage`, restarts the coordinator
/// with a new worker, and checks the answer and that no shard ran twice.
async fn survives_kills(spec: JobSpec, stage: u32) {
    let answer = direct_answer(&spec);
    survives_kills_as(
        spec,
        stage,
        Resumption {
            coordinator_args: &[],
            worker_args: &[],
            attachments: &[],
            answer,
        },
    )
    .await;
}

/// [`survives_kills`] with the processes' options, the job's attachments and
/// the answer it must end with.
pub(crate) async fn survives_kills_as(mut spec: JobSpec, stage: u32, run: Resumption<'_>) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut coordinator = spawn_coordinator_with(port, &data, &log, run.coordinator_args);
    let delay = [&["--shard-delay-ms", "30"], run.worker_args].concat();
    let mut w1 = spawn_worker(&url, "w1", 1, &delay, &log);
    let _w2 = spawn_worker(&url, "w2", 1, &delay, &log);
    let mut client = jobs_client(&url).await;
    // The killed worker's lease lapses soon after the restart.
    spec.options.lease_ttl_ms = 3_000;
    let job = submit_attached(&mut client, &spec, run.attachments).await;
    wait_for_stage(&mut client, &job.id, stage).await;
    let before = events(&mut client, &job.id).await;
    w1.kill9();
    coordinator.kill9();

    tokio::time::sleep(Duration::from_millis(300)).await;
    let _coordinator = spawn_coordinator_with(port, &data, &log, run.coordinator_args);
    let _w3 = spawn_worker(&url, "w3", 1, &delay, &log);
    let mut client = jobs_client(&url).await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, run.answer);

    let all = events(&mut client, &job.id).await;
    each_shard_accepted_once(&before, &all, done.shards_total);
}

/// kill -9 of a worker while its level shards spill past its memory share:
/// the job finishes with the kernel alone's answer, and the next worker to
/// start on the same spill directory removes the dead worker's runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_while_spilling_leaves_no_runs_and_the_answer_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let spill = dir.path().join("spill");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    // The English board in two buckets a level: its widest levels' shards
    // outgrow the share of a 160 MB budget (the least one slot may have is
    // about 157 MB).
    let mut spec = JobSpec::new(PegsSpec {
        board: "english".into(),
        start: None,
        end: None,
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets: 2,
        by_final_hole: false,
        no_prune: false,
    });
    spec.options.lease_ttl_ms = 3_000;
    spec.options.max_attempts = 10;
    let small = [
        "--spill-dir",
        spill.to_str().unwrap(),
        "--memory-budget",
        "160MB",
    ];
    let mut spiller = spawn_worker(&url, "spiller", 1, &small, &log);
    let job = submit(&mut client, &spec, "").await;
    let runs = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                match path.is_dir() {
                    true => pending.push(path),
                    false if entry.file_name().to_string_lossy().starts_with("run-") => {
                        found.push(path)
                    }
                    false => {}
                }
            }
        }
        found
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while runs(&spill).is_empty() {
        assert!(Instant::now() < deadline, "the worker never spilled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    spiller.kill9();
    let left = runs(&spill);
    assert!(
        !left.is_empty(),
        "the dead worker's runs stay until a worker starts"
    );
    let _sweeper = spawn_worker(&url, "sweeper", 1, &small, &log);
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(600)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    let owners: Vec<String> = std::fs::read_dir(&spill)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        owners.iter().all(|name| name.starts_with("sweeper")),
        "the dead worker's directory is swept: {owners:?}"
    );
    assert!(left.iter().all(|run| !run.exists()));
}

/// A worker process holds a count whose meeting level and join are wide to
/// its memory budget: the peak resident memory it reports beside its budget
/// on `/metrics` (its `VmHWM`) stays within half as much again as the
/// budget, however the machine's load interleaves its shards (two slots,
/// each within its share), and the answer is the kernel's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_keeps_its_peak_near_its_budget_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let spill = dir.path().join("spill");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    // The English board from its centre back to it: the two middle levels
    // (3.3 and 3.6 million positions) meet in four buckets, each far more
    // than a slot's share of 256 MiB when held whole.
    let spec = JobSpec::new(PegsSpec {
        board: "english".into(),
        start: None,
        end: Some(17),
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets: 4,
        by_final_hole: false,
        no_prune: false,
    });
    let http = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let budget: u64 = 256 << 20;
    let args = [
        "--spill-dir",
        spill.to_str().unwrap(),
        "--memory-budget",
        "256MiB",
        "--http",
        &http.to_string(),
    ];
    let _worker = spawn_worker(&url, "budgeted", 2, &args, &log);
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(900)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, "40861647040079968");
    let (status, body) = tokio::task::spawn_blocking(move || http_get(http, "/metrics"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(metric(&body, "tally_worker_memory_budget_bytes"), budget);
    let peak = metric(&body, "tally_worker_memory_peak_bytes");
    assert!(
        peak <= budget * 3 / 2,
        "the worker peaked at {peak} bytes against a budget of {budget}"
    );
}

/// kill -9 of a worker that holds a lease: the lease expires and another worker
/// completes the shard; the answer is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_kill_mid_shard_lets_another_worker_finish_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;

    let mut spec = JobSpec::new(KaylesSpec {
        pins: 4_000,
        digits: 9,
    });
    // Workers heartbeat every second: a lease of 3 s survives a busy machine,
    // and spare attempts keep an expiry under load from failing the job.
    spec.options.lease_ttl_ms = 3_000;
    spec.options.max_attempts = 10;
    let job = submit(&mut client, &spec, "").await;
    // The doomed worker holds each lease for 30 s before computing.
    let mut doomed = spawn_worker(&url, "doomed", 1, &["--shard-delay-ms", "30000"], &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let ev = events(&mut client, &job.id).await;
        if let Some(e) = ev
            .iter()
            .find(|e| e.kind == "leased" && e.worker_id == "doomed")
        {
            break (e.stage, e.shard, e.attempt);
        }
        assert!(Instant::now() < deadline, "the doomed worker never leased");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    doomed.kill9();
    let _healthy = spawn_worker(&url, "healthy", 2, &[], &log);
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    let ev = events(&mut client, &job.id).await;
    assert!(
        ev.iter()
            .any(|e| e.kind == "expired" && (e.stage, e.shard, e.attempt) == held),
        "the killed worker's lease did not expire"
    );
    let finisher = ev
        .iter()
        .find(|e| e.kind == "accepted" && (e.stage, e.shard) == (held.0, held.1))
        .expect("the shard was accepted");
    assert_eq!(finisher.worker_id, "healthy");
    assert!(finisher.attempt > held.2);
}

/// A worker killed after its shard checkpointed: the next attempt is leased with
/// the checkpoint and continues from it; the answer is right. The first worker
/// stalls after its first checkpoint, so the kill surely lands mid-shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_leased_shard_resumes_from_its_last_checkpoint() {
    resumes_from_its_last_checkpoint(
        JobSpec::new(KaylesSpec {
            pins: 200_000,
            digits: 9,
        }),
        &[],
    )
    .await;
}

/// The same with a hex points shard, whose checkpoint (the pass vector of side
/// 14 at 16 points, about 42 MB) is too large to come with its lease: it is
/// sent in chunks, and the next attempt fetches it apart and resumes from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_leased_hex_points_shard_fetches_its_large_checkpoint_and_resumes() {
    let (spec, vector) = hex_points_with_a_large_checkpoint();
    let log = resumes_from_its_last_checkpoint(spec, &[]).await;
    assert_resumed_from_whole(&log, "checkpoint fetched; resuming from it", vector);
}

/// The same with the checkpoint in a stage store outside the coordinator:
/// the first worker writes it there and reports its reference, the second
/// reads it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_leased_hex_points_shard_reads_its_checkpoint_from_the_stage_store() {
    let (spec, vector) = hex_points_with_a_large_checkpoint();
    let stage = tempfile::tempdir().unwrap();
    let url = format!("file://{}", stage.path().display());
    let log = resumes_from_its_last_checkpoint(spec, &["--stage-store", &url]).await;
    let line = "checkpoint read from the stage store; resuming from it";
    assert_resumed_from_whole(&log, line, vector);
}

/// The same with the graph as stage data: the first worker builds it (the
/// first stage), then checkpoints a point shard that reads it and is killed;
/// the second opens the staged graph and resumes the shard from the
/// checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_leased_point_shard_of_a_staged_graph_resumes_from_its_checkpoint() {
    let (mut spec, vector) = hex_points_with_a_large_checkpoint();
    spec.params.insert("graph".into(), "stage".into());
    assert!(valid(&spec).describe().contains("graph as stage data"));
    let log = resumes_from_its_last_checkpoint(spec, &[]).await;
    assert_resumed_from_whole(&log, "checkpoint fetched; resuming from it", vector);
}

/// A hex points job whose shards checkpoint the pass vector of side 14 at 16
/// points (about 42 MB, above what comes with a lease), and that vector's size.
fn hex_points_with_a_large_checkpoint() -> (JobSpec, u64) {
    let h = HexSpec {
        side: 14,
        modulus: tally_kernels::hex::DEFAULT_MODULUS,
        plan: HexPlan::Points,
        shards_per_step: 0,
        exact: false,
        points_per_shard: 16,
        graph: Default::default(),
        graph_parts: 0,
    };
    let vector = tally_kernels::hex::known_state_count(14).unwrap() * 16 * 4;
    assert!(vector > tally_wire::limits::INLINE_CHECKPOINT_BYTES as u64);
    (JobSpec::new(h), vector)
}

/// The log has `line`, whose last field (a size) is above `vector`.
fn assert_resumed_from_whole(log: &str, line: &str, vector: u64) {
    let read: Option<u64> = log.lines().find(|l| l.contains(line)).and_then(|l| {
        // The size is the line's last field.
        let digits = l.trim_end().rsplit(|c: char| !c.is_ascii_digit()).next()?;
        digits.parse().ok()
    });
    assert!(
        read.is_some_and(|bytes| bytes > vector),
        "the second worker did not read the whole checkpoint:\n{log}"
    );
}

/// Runs `spec` through a worker killed after its first checkpoint and a second
/// one, on a coordinator with the `extra` options; returns the log of the
/// coordinator and both workers.
async fn resumes_from_its_last_checkpoint(spec: JobSpec, extra: &[&str]) -> String {
    let answer = direct_answer(&spec);
    let run = Resumption {
        coordinator_args: extra,
        worker_args: &[],
        attachments: &[],
        answer,
    };
    resumes_from_its_last_checkpoint_as(spec, run).await
}

/// How [`resumes_from_its_last_checkpoint_as`] runs its job.
pub(crate) struct Resumption<'a> {
    pub coordinator_args: &'a [&'a str],
    /// Given to both workers.
    pub worker_args: &'a [&'a str],
    /// Sent with the job (a wasm module).
    pub attachments: &'a [&'a [u8]],
    /// The job's right answer.
    pub answer: String,
}

/// Runs `spec` through a worker killed after its first accepted checkpoint:
/// the second worker is leased the checkpointed shard from that checkpoint,
/// finishes it, and the job gives `run.answer`. Returns the log of the
/// coordinator and both workers.
pub(crate) async fn resumes_from_its_last_checkpoint_as(
    mut spec: JobSpec,
    run: Resumption<'_>,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = spawn_coordinator_with(port, &data, &log, run.coordinator_args);
    let mut client = jobs_client(&url).await;
    spec.options.lease_ttl_ms = 3_000;
    spec.options.max_attempts = 10;
    let job = submit_attached(&mut client, &spec, run.attachments).await;
    let stall = [
        "--checkpoint-ms",
        "10",
        "--pause-after-checkpoint-ms",
        "120000",
    ];
    let first_args: Vec<&str> = stall.iter().chain(run.worker_args).copied().collect();
    let mut first = spawn_worker(&url, "first", 1, &first_args, &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    let checkpointed = loop {
        let ev = events(&mut client, &job.id).await;
        if let Some(e) = ev
            .iter()
            .find(|e| e.kind == "checkpoint" && e.worker_id == "first")
        {
            break (e.stage, e.shard);
        }
        assert!(Instant::now() < deadline, "no checkpoint was accepted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    first.kill9();
    let _second = spawn_worker(&url, "second", 2, run.worker_args, &log);
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    let ev = events(&mut client, &job.id).await;
    let accepted = ev
        .iter()
        .find(|e| e.kind == "accepted" && (e.stage, e.shard) == checkpointed)
        .expect("the checkpointed shard was accepted");
    assert_eq!(
        accepted.worker_id, "second",
        "the killed worker finished its shard first"
    );
    let resumed = ev.iter().find(|e| {
        e.kind == "leased" && e.worker_id == "second" && (e.stage, e.shard) == checkpointed
    });
    assert!(
        resumed.is_some_and(|e| e.message.starts_with("from checkpoint")),
        "the second attempt did not start from the checkpoint: {resumed:?}"
    );
    assert_eq!(done.answer, run.answer);
    std::fs::read_to_string(&log).unwrap()
}

/// Ctrl-C during `tally run --data DIR` stops the run and keeps its job: the
/// same command resumes it instead of finding it cancelled.
#[test]
fn ctrl_c_keeps_a_run_with_a_data_directory_resumable() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.display().to_string();
    // Far longer than the moment it takes to interrupt it.
    let args = ["run", "hex", "--side", "16", "--data", data_arg.as_str()];
    for expected in ["started job-000001", "resuming job-000001"] {
        let mut child = Command::new(tally_bin())
            .args(args)
            .env_remove("TALLY_COORDINATOR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tally runs");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).unwrap();
            assert!(read > 0, "run ended before {expected:?}: {seen}");
            seen += &line;
            if line.contains(expected) {
                break;
            }
        }
        let pid = child.id().to_string();
        let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(sent.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
        seen += &rest;
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{seen}");
        assert!(
            seen.contains("job job-000001 is kept in") && !seen.contains("cancelled"),
            "{seen}"
        );
    }
    let store = std::sync::Arc::new(tally_coordinator::store::SledStore::open(&data).unwrap());
    let scheduler = tally_coordinator::scheduler::Scheduler::load(
        store,
        tally_coordinator::scheduler::SchedulerConfig::default(),
        0,
    )
    .unwrap();
    let job = scheduler.job("job-000001", 0).unwrap();
    assert!(
        matches!(state(&job), JobState::Queued | JobState::Running),
        "{job:?}"
    );
}

/// A coordinator that is stopped (SIGSTOP: it accepts connections and never
/// answers) makes a client call fail at its deadline, not hang.
#[test]
fn a_call_to_a_stopped_coordinator_fails_at_its_deadline() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let coordinator = spawn_coordinator(port, &dir.path().join("data"), &dir.path().join("log"));
    let list = || {
        Command::new(tally_bin())
            .args(["list", "--coordinator", &url])
            .output()
            .unwrap()
    };
    let ready = Instant::now() + Duration::from_secs(60);
    while !list().status.success() {
        assert!(Instant::now() < ready, "the coordinator never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = coordinator.pid().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let started = Instant::now();
    let out = list();
    let took = started.elapsed();
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    // The deadline is 15 s; the slack is for a loaded machine. Without a
    // deadline the call never returns.
    assert!(took < Duration::from_secs(60), "took {took:?}: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(stderr.contains("did not answer"), "{stderr}");
    eprintln!(
        "failed after {:.1} s: {}",
        took.as_secs_f64(),
        stderr.trim()
    );
}

/// A shard that kills the small workers that run it (a fault injection
/// aborts them as the kernel's out-of-memory killer would) goes, after two of
/// them, only to a worker with a larger memory budget, which completes it:
/// the events name the vanished workers and what the shard seems to need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_kills_small_workers_completes_on_a_large_one() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let mut spec = JobSpec::new(HexSpec {
        side: 4,
        modulus: 1_000_000_007,
        plan: HexPlan::Points,
        shards_per_step: 0,
        exact: false,
        points_per_shard: 16,
        graph: tally_kinds::hex::HexGraphPlace::Worker,
        graph_parts: 0,
    });
    spec.options.lease_ttl_ms = 2_000;
    spec.options.max_attempts = 5;
    let log = dir.path().join("workers.log");
    let small = ["--memory-budget", "1GB", "--fault-die-above-bytes", "1"];
    let _small_1 = spawn_worker(&url, "small-1", 1, &small, &log);
    let _small_2 = spawn_worker(&url, "small-2", 1, &small, &log);
    let job = submit(&mut client, &spec, "").await;
    let needs = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = events(&mut client, &job.id).await;
        if seen.iter().any(|e| e.kind == "needs-memory") {
            break;
        }
        assert!(Instant::now() < needs, "no needs-memory event: {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _large = spawn_worker(&url, "large", 1, &["--memory-budget", "8GB"], &log);
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{done:?}");
    assert_eq!(done.answer, direct_answer(&spec));
    let seen = events(&mut client, &job.id).await;
    let vanished: HashSet<&str> = seen
        .iter()
        .filter(|e| e.kind == "expired" && e.message.contains("vanished"))
        .map(|e| e.worker_id.as_str())
        .collect();
    assert_eq!(vanished, HashSet::from(["small-1", "small-2"]), "{seen:?}");
    let accepted: Vec<&str> = seen
        .iter()
        .filter(|e| e.kind == "accepted")
        .map(|e| e.worker_id.as_str())
        .collect();
    assert_eq!(accepted, ["large"], "{seen:?}");
    coordinator.shutdown().await;
}
