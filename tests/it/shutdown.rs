//! Shutdowns have a bound, whatever the other side does: a worker told to
//! stop while the coordinator is gone, and a coordinator with a client's
//! Watch stream still open.

use crate::support;

use std::time::{Duration, Instant};

use support::*;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto;

/// A job of a few shards that takes no time to compute.
fn kayles_40() -> JobSpec {
    JobSpec::new(KaylesSpec {
        pins: 40,
        digits: 9,
    })
}

/// Generous slack over each bound, for a loaded machine: the behaviour under
/// test used to never end at all.
const SLACK: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_stops_within_its_drain_bound_while_the_coordinator_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(Some(dir.path())).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let job = submit(&mut client, &kayles_40(), "").await;
    let drain = Duration::from_secs(1);
    // Every shard it leases, it holds for a minute before computing.
    let workers = Workers::start_with(&url, 1, 2, |config| {
        config.shard_delay = Duration::from_secs(60);
        config.drain_timeout = drain;
    });
    let leased = Instant::now() + Duration::from_secs(60);
    while get_job(&mut client, &job.id).await.shards_leased == 0 {
        assert!(Instant::now() < leased, "the worker never leased a shard");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(client);
    coordinator.shutdown().await;

    let stopping = Instant::now();
    let limit = drain + tally_worker::REPORT_GRACE + SLACK;
    tokio::time::timeout(limit, workers.stop())
        .await
        .expect("the worker stops within the drain time plus the report grace");
    eprintln!(
        "worker stopped {:.1} s after being told to (drain {drain:?})",
        stopping.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_stops_within_its_bound_with_a_watch_stream_open() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(Some(dir.path())).await;
    let mut client = jobs_client(&coordinator.url()).await;
    // Never leased: the job stays queued, so the Watch stream never ends.
    let job = submit(&mut client, &kayles_40(), "").await;
    let mut stream = client
        .watch(proto::WatchRequest {
            job_id: job.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());
    let limit = tally_coordinator::server::SHUTDOWN_GRACE
        + tally_coordinator::server::STORE_CLOSE_LIMIT
        + SLACK;
    tokio::time::timeout(limit, coordinator.shutdown())
        .await
        .expect("the coordinator stops within its bound");
    drop(stream);
    // The store was closed: it opens again at once.
    tally_coordinator::store::SledStore::open(dir.path()).expect("the store is free");
}

/// A worker told to stop asks its running shard for a checkpoint at once and
/// hands the lease back with it, well within its drain timeout: the next
/// worker resumes from that checkpoint (the first worker's checkpoint
/// interval is an hour, so the checkpoint is the drain's), and the job's
/// answer is the direct one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drained_shard_hands_back_its_checkpoint_and_the_next_worker_resumes_from_it() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let spec = JobSpec::new(KaylesSpec {
        pins: 6_000_000,
        digits: 9,
    });
    let job = submit(&mut client, &spec, "").await;
    let drain = Duration::from_secs(120);
    let first = Workers::start_with(&url, 1, 1, |config| {
        config.checkpoint_interval = Duration::from_secs(3600);
        config.drain_timeout = drain;
    });
    // Mid-shard: its progress has reached the coordinator.
    let computing = Instant::now() + Duration::from_secs(120);
    loop {
        let seen = get_job(&mut client, &job.id).await;
        assert!(!finished(&seen), "the job ended before the drain: {seen:?}");
        if seen.work_done > 0 && seen.shards_leased > 0 {
            break;
        }
        assert!(Instant::now() < computing, "the worker never computed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopping = Instant::now();
    first.stop().await;
    let stopped = stopping.elapsed();
    assert!(
        stopped < drain / 2,
        "the drain waited for the shard: {stopped:?}"
    );
    let resumed_at = |events: &[proto::Event]| {
        events
            .iter()
            .filter(|e| e.kind == "leased")
            .filter_map(|e| e.message.strip_prefix("from checkpoint at work "))
            .map(|w| w.parse::<u64>().unwrap())
            .max()
    };
    assert_eq!(resumed_at(&events(&mut client, &job.id).await), None);

    let second = Workers::start(&url, 1, 1);
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
    assert_eq!(state(&done), proto::JobState::Succeeded, "{done:?}");
    assert_eq!(done.answer, direct_answer(&spec));
    let at = resumed_at(&events(&mut client, &job.id).await);
    assert!(
        at.is_some_and(|w| w > 0),
        "no lease resumed from a checkpoint: {at:?}"
    );
    eprintln!(
        "drained in {:.2} s; resumed from work {at:?}",
        stopped.as_secs_f64()
    );
    second.stop().await;
    coordinator.shutdown().await;
}
