//! Tests that no call of the worker waits for ever on a coordinator that
//! takes its calls and never answers them, or that is stopped.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tally_wire::deadline;
use tally_wire::proto;
use tally_wire::transport::ClientSecurity;

use super::Coordinator;
use crate::metrics::WorkerStats;
use crate::test_support::{self, Answers, Logs, wait_until};

/// Slack for a loaded machine above a deadline: a call ends within it.
const SLACK: Duration = Duration::from_secs(30);

type Call<'a> = Pin<Box<dyn Future<Output = Option<tonic::Code>> + Send + 'a>>;

/// Each of the worker's calls, with the deadline it must end at.
fn every_call<'a>(
    c: &'a Coordinator,
    stats: &'a WorkerStats,
) -> Vec<(&'static str, Duration, Call<'a>)> {
    fn code<T>(answer: Result<T, tonic::Status>) -> Option<tonic::Code> {
        answer.err().map(|e| e.code())
    }
    let lease = proto::LeaseRequest {
        wait_ms: 0,
        ..Default::default()
    };
    let report = tokio_stream::iter(vec![proto::ReportMessage::default()]);
    vec![
        (
            "register",
            deadline::REGISTER,
            Box::pin(async move { code(c.register(stats, Default::default()).await) }),
        ),
        (
            "lease",
            deadline::lease(Duration::ZERO),
            Box::pin(async move { code(c.lease(stats, lease).await) }),
        ),
        (
            "heartbeat",
            deadline::HEARTBEAT,
            Box::pin(async move { code(c.heartbeat(stats, Default::default()).await) }),
        ),
        (
            "report",
            deadline::report(0),
            Box::pin(async move { code(c.report(stats, report, 0).await) }),
        ),
        (
            "report_batch",
            deadline::report(0),
            Box::pin(async move { code(c.report_batch(stats, Default::default(), 0).await) }),
        ),
        (
            "fetch_checkpoint",
            deadline::fetch(0),
            Box::pin(async move { code(c.fetch_checkpoint(stats, Default::default(), 0).await) }),
        ),
        (
            // Opened at once, then silent.
            "fetch_stage_data",
            deadline::STREAM_IDLE,
            Box::pin(async move {
                let opened = c.fetch_stage_data(stats, Default::default()).await;
                let mut stream = opened.expect("the stream opens");
                code(c.next_chunk(stats, &mut stream).await)
            }),
        ),
        (
            "fetch_attachment",
            deadline::FETCH,
            Box::pin(async move { code(c.fetch_attachment(stats, Default::default()).await) }),
        ),
        (
            "stage_blobs",
            deadline::FETCH,
            Box::pin(async move { code(c.stage_blobs(stats, Default::default()).await) }),
        ),
        (
            "stage_shard",
            deadline::FETCH,
            Box::pin(async move { code(c.stage_shard(stats, Default::default()).await) }),
        ),
    ]
}

/// Every call ends as DEADLINE_EXCEEDED at its deadline, and the coordinator
/// is told: it drops the call too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_to_a_coordinator_that_never_answers_ends_at_its_deadline() {
    let (url, calls) = test_support::serve(Answers::Nothing).await;
    let coordinator = Coordinator::connect(&url, &ClientSecurity::default()).unwrap();
    let stats = WorkerStats::default();
    let timed =
        every_call(&coordinator, &stats)
            .into_iter()
            .map(|(method, limit, call)| async move {
                let start = Instant::now();
                let code = call.await;
                (method, limit, start.elapsed(), code)
            });
    let ended = futures::future::join_all(timed).await;
    assert_eq!(ended.len(), 10, "every call of the worker service");
    for (method, limit, took, code) in ended {
        assert_eq!(code, Some(tonic::Code::DeadlineExceeded), "{method}");
        assert!(
            took >= limit && took <= limit + SLACK,
            "{method}: {took:?} for {limit:?}"
        );
        wait_until(
            SLACK,
            &format!("{method} dropped by the coordinator"),
            || !calls.held(method).is_empty(),
        )
        .await;
    }
}

/// A stopped coordinator answers nothing at all, not even the deadline's
/// error: the worker's side ends the call on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_to_a_stopped_coordinator_ends_at_its_deadline() {
    let url = test_support::stopped().await;
    let coordinator = Coordinator::connect(&url, &ClientSecurity::default()).unwrap();
    let stats = WorkerStats::default();
    let start = Instant::now();
    let beat = coordinator.heartbeat(&stats, Default::default()).await;
    let took = start.elapsed();
    assert_eq!(beat.unwrap_err().code(), tonic::Code::DeadlineExceeded);
    assert!(
        took >= deadline::HEARTBEAT && took <= deadline::HEARTBEAT + SLACK,
        "{took:?}"
    );
}

/// A worker whose coordinator registers it and then answers nothing keeps
/// asking for leases, each call given up at its deadline, and says once
/// that the coordinator does not answer.
#[tokio::test]
async fn a_worker_says_once_that_its_coordinator_does_not_answer_and_keeps_trying() {
    let logs = Logs::capture();
    let (url, calls) = test_support::serve(Answers::Registrations).await;
    let spill = tempfile::tempdir().unwrap();
    let mut config = crate::WorkerConfig::new(url.clone());
    config.slots = 1;
    config.threads = 1;
    config.memory_budget = 1 << 30;
    config.spill_dir = spill.path().to_path_buf();
    let wait = Duration::from_millis(100);
    config.lease_wait = wait;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(crate::run(config, async {
        let _ = stopped.await;
    }));
    let bound = deadline::lease(wait);
    wait_until(4 * (bound + SLACK), "three lease calls given up", || {
        calls.held("lease").len() >= 3
    })
    .await;
    for held in calls.held("lease") {
        // Timed at the coordinator, from a little after the call began.
        assert!(
            held + Duration::from_secs(1) >= bound && held <= bound + SLACK,
            "a lease call held {held:?} for a deadline of {bound:?}"
        );
    }
    for held in calls.held("heartbeat") {
        assert!(
            held <= deadline::HEARTBEAT + SLACK,
            "a heartbeat held {held:?}"
        );
    }
    assert_eq!(calls.started("register"), 1, "registered once");
    let said = format!("the coordinator at {url} has not answered for");
    assert_eq!(logs.count(&said), 1, "said once");
    assert_eq!(logs.count("still trying"), 1);
    stop.send(()).unwrap();
    let stats = tokio::time::timeout(SLACK, worker)
        .await
        .expect("the worker stops")
        .unwrap()
        .unwrap();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.coordinator_silences.load(Relaxed), 1);
    assert!(stats.calls_not_answered.load(Relaxed) >= 3);
}
