//! Coordinator restarts: the time from a restart (after SIGKILL mid-job) to
//! the first accepted report, and (`-- restart`) the time until a store of
//! many queued or finished jobs serves again, and its size.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::runner_cluster::coordinator_on_a_free_port;
use crate::runner_processes::{dir_size, reap, tally};

/// The time from a coordinator restart (killed mid-job) to the first
/// accepted report.
pub fn restart_to_first_report() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (url, spawn_coordinator) = coordinator_on_a_free_port(&data);
    let mut coordinator = spawn_coordinator();
    let mut worker = tally()
        .args(["worker", "--coordinator", &url, "--slots", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = tally()
        .args(["submit", "hex", "--side", "11", "--coordinator", &url])
        .output()
        .unwrap();
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::thread::sleep(Duration::from_secs(2));
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let restarted = Instant::now();
    let mut coordinator = spawn_coordinator();
    // Poll the event log for the first accepted report after the restart.
    let first = loop {
        let out = tally()
            .args(["events", &job, "--json", "--coordinator", &url])
            .output()
            .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let events = v["events"].as_array().unwrap();
            if let Some(i) = events.iter().position(|e| e["kind"] == "resumed")
                && events[i..].iter().any(|e| e["kind"] == "accepted")
            {
                break restarted.elapsed();
            }
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(60),
            "no report after the restart"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "coordinator restart to first accepted report: {:.0} ms (worker reconnects with backoff)",
        first.as_secs_f64() * 1e3
    );
    let _ = worker.kill();
    let _ = coordinator.kill();
    let _ = worker.wait();
    let _ = coordinator.wait();
}

/// Fills a coordinator's store with `jobs` queued queens jobs (cancelled, so
/// finished, if `finished`), kills it and times its restart until it answers
/// `Info` (which reads every job).
// Each restarted coordinator is reaped by wait4, which also returns its peak memory.
#[allow(clippy::zombie_processes)]
pub fn restart_at_scale(jobs: usize, finished: bool) {
    use tally_wire::proto::job_service_client::JobServiceClient;
    use tally_wire::proto::{self, job_spec::Kind};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (url, spawn) = coordinator_on_a_free_port(&data);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let connect = |url: String| async move {
        loop {
            match JobServiceClient::connect(url.clone()).await {
                Ok(client) => return client,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    let mut coordinator = spawn();
    let filled = Instant::now();
    let shards: u64 = runtime.block_on(async {
        let client = connect(url.clone()).await;
        // Sixteen submissions in flight at a time.
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..16 {
            let mut client = client.clone();
            tasks.spawn(async move {
                let mut shards = 0;
                for _ in (worker..jobs).step_by(16) {
                    let request = proto::SubmitRequest {
                        spec: Some(proto::JobSpec {
                            kind: Some(Kind::Queens(proto::QueensSpec { n: 10 })),
                            options: None,
                        }),
                        idempotency_key: String::new(),
                        ..Default::default()
                    };
                    let job = client
                        .submit(request)
                        .await
                        .unwrap()
                        .into_inner()
                        .job
                        .unwrap();
                    shards += job.shards_total;
                }
                shards
            });
        }
        let mut shards = 0;
        while let Some(done) = tasks.join_next().await {
            shards += done.unwrap();
        }
        if finished {
            let mut client = client.clone();
            for n in 1..=jobs {
                let job_id = format!("job-{n:06}");
                client
                    .cancel(proto::CancelRequest { job_id })
                    .await
                    .unwrap();
            }
            // Finished jobs are settled at the next expiry tick (250 ms).
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        shards
    });
    let fill = filled.elapsed().as_secs_f64();
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let store_mb = dir_size(&data) as f64 / 1e6;
    // Three restarts of the same store: the median, and the coordinator's
    // peak memory once it serves.
    let mut readies = Vec::new();
    let mut peak_mb = 0.0f64;
    for _ in 0..3 {
        let started = Instant::now();
        let coordinator = spawn();
        let (ready, listed) = runtime.block_on(async {
            let mut client = connect(url.clone()).await;
            let info = client
                .info(proto::InfoRequest {})
                .await
                .unwrap()
                .into_inner();
            (started.elapsed(), info.jobs)
        });
        assert_eq!(listed as usize, jobs);
        readies.push(ready.as_secs_f64() * 1e3);
        let (_, peak) = reap(coordinator.id(), libc::SIGKILL);
        peak_mb = peak_mb.max(peak as f64 / 1e6);
    }
    let runs = readies
        .iter()
        .map(|ms| format!("{ms:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    readies.sort_by(f64::total_cmp);
    let state = if finished { "finished" } else { "queued" };
    println!(
        "restart with {jobs} {state} jobs and {shards} shards in the store ({store_mb:.0} MB, \
         filled in {fill:.1} s): ready to serve in {:.0} ms (median of {runs} ms; peak {peak_mb:.0} MB)",
        readies[1]
    );
    if std::env::var_os("TALLY_BENCH_KEEP_STORE").is_some() {
        println!("store kept in {}", data.display());
        std::mem::forget(dir);
    }
}
