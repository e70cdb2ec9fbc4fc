//! What operators look at: Prometheus text at `/metrics` on the coordinator and
//! the workers, and the status page, loaded in headless Chromium during a job.

use crate::support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;
use tally_coordinator::CoordinatorConfig;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto::JobState;

/// The value of the sample `name` (with labels, if any) in a Prometheus text body.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

fn metric_type(body: &str, name: &str) -> Option<String> {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("# TYPE {name} ")))
        .map(str::to_string)
}

/// A kayles job with 16 shards, whose leases last long enough for a shard the
/// test holds to keep the job running as long as the test looks.
fn slow_job() -> JobSpec {
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 2000,
        digits: 9,
    });
    spec.options.lease_ttl_ms = 600_000;
    spec
}

async fn start_observed(data: &std::path::Path) -> tally_coordinator::RunningCoordinator {
    let mut config =
        CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), Some(data.to_path_buf()));
    config.http = Some("127.0.0.1:0".parse().unwrap());
    tally_coordinator::start(config).await.expect("starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_move_during_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_observed(dir.path()).await;
    let http = coordinator.http_addr.expect("an HTTP listener");
    let (status, before) = tokio::task::spawn_blocking(move || http_get(http, "/metrics"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    for (name, kind) in [
        ("tally_jobs", "gauge"),
        ("tally_shards", "gauge"),
        ("tally_leases_granted_total", "counter"),
        ("tally_leases_expired_total", "counter"),
        ("tally_results_accepted_total", "counter"),
        ("tally_work_units_accepted_total", "counter"),
        ("tally_work_units_per_second", "gauge"),
        ("tally_report_latency_seconds", "histogram"),
        ("tally_shard_compute_seconds", "histogram"),
        ("tally_store_commit_seconds", "histogram"),
        ("tally_store_batches_total", "counter"),
        ("tally_store_size_bytes", "gauge"),
    ] {
        assert_eq!(
            metric_type(&before, name).as_deref(),
            Some(kind),
            "{name} in\n{before}"
        );
    }
    assert_eq!(sample(&before, "tally_leases_granted_total"), Some(0.0));

    let mut client = jobs_client(&coordinator.url()).await;
    let spec = slow_job();
    let job = submit(&mut client, &spec, "").await;
    // The test holds one shard until it has read the metrics of the running job.
    let (held, session) = hold_a_shard(&coordinator.url(), "holder").await;
    let worker_http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let workers = Workers::start_with(&coordinator.url(), 1, 2, |c| {
        c.shard_delay = Duration::from_millis(150);
        c.http = Some(worker_http);
    });

    // While it runs: one running job, leases granted, and the counters only grow.
    let deadline = Instant::now() + Duration::from_secs(120);
    let during = loop {
        let (_, body) = tokio::task::spawn_blocking(move || http_get(http, "/metrics"))
            .await
            .unwrap();
        if sample(&body, "tally_jobs{state=\"running\"}") == Some(1.0)
            && sample(&body, "tally_results_accepted_total").unwrap_or(0.0) > 0.0
        {
            break body;
        }
        assert!(Instant::now() < deadline, "no progress seen:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(sample(&during, "tally_leases_granted_total").unwrap() > 0.0);

    workers_client(&coordinator.url())
        .await
        .report(tokio_stream::iter(result_report(
            &spec, &held, "holder", &session,
        )))
        .await
        .expect("the held shard's result is accepted");
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded);
    let (_, after) = tokio::task::spawn_blocking(move || http_get(http, "/metrics"))
        .await
        .unwrap();
    let get = |name: &str| sample(&after, name).unwrap_or_else(|| panic!("{name}:\n{after}"));
    assert_eq!(get("tally_jobs{state=\"succeeded\"}"), 1.0);
    assert_eq!(get("tally_jobs{state=\"running\"}"), 0.0);
    assert_eq!(
        get("tally_results_accepted_total"),
        done.shards_total as f64
    );
    assert!(get("tally_leases_granted_total") >= done.shards_total as f64);
    assert_eq!(
        get("tally_work_units_accepted_total"),
        done.work_total as f64
    );
    assert!(
        get("tally_results_accepted_total")
            >= sample(&during, "tally_results_accepted_total").unwrap()
    );
    assert_eq!(
        get("tally_shard_compute_seconds_count"),
        done.shards_total as f64
    );
    assert!(get("tally_report_latency_seconds_count") >= done.shards_total as f64);
    // Submit, the leases and every accepted result were applied as batches,
    // and flushed: a flush covers one batch or more.
    let batches = get("tally_store_batches_total");
    assert!(batches > done.shards_total as f64);
    let flushes = get("tally_store_commit_seconds_count");
    assert!(
        flushes >= 1.0 && flushes <= batches,
        "{flushes} flushes of {batches} batches"
    );
    assert!(get("tally_store_size_bytes") > 0.0);
    // Each shard waited 150 ms before computing.
    assert!(get("tally_shard_compute_seconds_sum") >= 0.15 * done.shards_total as f64);

    let (status, worker_body) =
        tokio::task::spawn_blocking(move || http_get(worker_http, "/metrics"))
            .await
            .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        metric_type(&worker_body, "tally_worker_shards_completed_total").as_deref(),
        Some("counter")
    );
    // Every shard but the held one.
    assert_eq!(
        sample(&worker_body, "tally_worker_shards_completed_total"),
        Some(done.shards_total as f64 - 1.0)
    );
    assert_eq!(
        sample(&worker_body, "tally_worker_work_units_total"),
        Some((done.work_total - held.work_total) as f64)
    );
    workers.stop().await;
    coordinator.shutdown().await;
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

/// The page after its scripts ran, as headless Chromium sees it.
fn rendered_dom(browser: &str, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=3000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_status_page_shows_a_running_job_in_a_browser() {
    let Some(browser) = chromium() else {
        // CI installs Chromium; elsewhere the test says what it skipped.
        assert!(
            std::env::var_os("CI").is_none(),
            "Chromium is required in CI (apt-get install chromium)"
        );
        eprintln!("skipped: no Chromium on this machine");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_observed(dir.path()).await;
    let http = coordinator.http_addr.unwrap();
    let mut client = jobs_client(&coordinator.url()).await;
    let job = submit(&mut client, &slow_job(), "").await;
    // Running while the browser looks, however long it takes: the test holds
    // one shard and never reports it.
    let _held = hold_a_shard(&coordinator.url(), "holder").await;
    let workers = Workers::start(&coordinator.url(), 1, 1);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let j = client
            .get(tally_wire::proto::GetJobRequest {
                job_id: job.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if j.shards_done >= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the job made no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let url = format!("http://{http}/");
    let dom = tokio::task::spawn_blocking(move || rendered_dom(&browser, &url))
        .await
        .unwrap();
    let row_start = dom
        .find(&format!("data-job=\"{}\"", job.id))
        .unwrap_or_else(|| panic!("the job's row is missing:\n{dom}"));
    let row = &dom[row_start..dom[row_start..].find("</tr>").unwrap() + row_start];
    assert!(row.contains("data-state=\"running\""), "{row}");
    let progress: f64 = row
        .split("data-progress=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|p| p.parse().ok())
        .expect("a progress value");
    assert!(
        progress > 0.0 && progress < 100.0,
        "progress {progress} in {row}"
    );
    assert!(row.contains("shards"), "{row}");
    // The worker table lists the live worker, with its memory budget.
    let worker_start = dom
        .find("data-worker=\"test-worker-0-")
        .unwrap_or_else(|| panic!("the worker's row is missing:\n{dom}"));
    let worker_row = &dom[worker_start..dom[worker_start..].find("</tr>").unwrap() + worker_start];
    assert!(worker_row.contains(" GB</td>"), "{worker_row}");
    workers.stop().await;
    coordinator.shutdown().await;
}
