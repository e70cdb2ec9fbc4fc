//! A coordinator alive but serving nothing: its scheduler lock held for ever
//! by one call (a fault injection standing for a deadlock in the store). The
//! health service and `/healthz` say so, `/metrics` counts the stall, the
//! watchdog names the call and ends the process, and a supervisor that starts
//! it again sees every job finish with the right answer.

use crate::support;

use std::time::{Duration, Instant};

use support::*;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::queens::QueensSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto::JobState;
use tonic_health::pb::health_check_response::ServingStatus;

/// The exit code of a coordinator the watchdog ended.
const STALL_EXIT_CODE: i32 = tally_coordinator::watchdog::STALL_EXIT_CODE;

/// The health service's verdict, or `None` if it did not answer in time.
async fn health(url: &str) -> Option<i32> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .ok()?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()?;
    let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
    let request = tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    Some(client.check(request).await.ok()?.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_scheduler_lock_is_seen_and_a_supervised_restart_finishes_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("coordinator.log");
    let workers_log = dir.path().join("workers.log");
    let port = free_port();
    let http_port = free_port();
    let http: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let url = format!("http://127.0.0.1:{port}");
    // The sixth lease call keeps the lock: the jobs below are submitted
    // before any worker starts, under way by then (two workers lease one
    // shard at a time, each held 100 ms) and far from done (queens alone has
    // 64 shards).
    let limit_s = 30;
    let stalled = [
        "--http",
        &http.to_string(),
        "--stall-limit",
        &format!("{limit_s}s"),
        "--fault-stall-scheduler-in",
        "WorkerApi::lease:6",
    ];
    let mut coordinator = spawn_coordinator_with(port, &data, &log, &stalled);
    let mut client = jobs_client(&url).await;
    let specs = [
        JobSpec::new(QueensSpec { n: 11 }),
        JobSpec::new(KaylesSpec {
            pins: 40,
            digits: 9,
        }),
    ];
    let mut jobs = Vec::new();
    for spec in &specs {
        jobs.push(submit(&mut client, spec, "").await);
    }
    // Workers only once both jobs are in: lease calls, the stall's among
    // them, come after every submission.
    let delay = ["--shard-delay-ms", "100"];
    let _w1 = spawn_worker(&url, "w1", 1, &delay, &workers_log);
    let _w2 = spawn_worker(&url, "w2", 1, &delay, &workers_log);

    // The probe fails while the lock is held, and says by whom; the
    // metrics, served without the lock, count the stall.
    let started = Instant::now();
    let bound = Duration::from_secs(limit_s + 120);
    let mut not_serving = None;
    let mut counted = false;
    while not_serving.is_none() || !counted {
        assert!(
            started.elapsed() < bound,
            "no stall seen (health {not_serving:?}, counted {counted}); log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        if let Ok(Some(code)) = coordinator.0.try_wait() {
            panic!(
                "the coordinator exited ({code}) before the stall was seen; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if not_serving.is_none() && health(&url).await == Some(ServingStatus::NotServing as i32) {
            let (status, body) = http_get(http, "/healthz");
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("held by WorkerApi::lease"), "{body}");
            not_serving = Some(body);
        }
        if let Ok((200, metrics)) = http_request(http, "GET", "/metrics") {
            counted = metric(&metrics, "tally_stalls_total") >= 1;
            if counted {
                assert!(metric(&metrics, "tally_scheduler_lock_held_seconds") >= 1);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The watchdog ends the process at its limit, with its code.
    let exited = loop {
        if let Some(status) = coordinator.0.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < bound, "the coordinator never exited");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(exited.code(), Some(STALL_EXIT_CODE), "{exited:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    for line in [
        "holding the scheduler lock for ever (fault injection)",
        "held for longer than it should be",
        "still held; the coordinator exits at the limit",
        "past the limit of 30 s: exiting",
    ] {
        let found = text
            .lines()
            .find(|l| l.contains(line))
            .unwrap_or_else(|| panic!("no {line:?} in the log:\n{text}"));
        assert!(found.contains("WorkerApi::lease"), "{found}");
        eprintln!("{found}");
    }

    // The supervisor starts it again, without the fault: every job finishes
    // right, the workers carrying on by themselves.
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    for (spec, job) in specs.iter().zip(&jobs) {
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
        assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
        assert_eq!(done.answer, direct_answer(spec));
    }
    assert_eq!(health(&url).await, Some(ServingStatus::Serving as i32));
}
