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
