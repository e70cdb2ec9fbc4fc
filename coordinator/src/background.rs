//! The coordinator's background tasks: lease expiry and retention, the
//! metrics sampler, the stage store's sweep and the renewal of its prefix,
//! and the health service's view of the watchdog's verdict.

use std::sync::Arc;
use std::time::Duration;

use tally_stage::StageStore;
use tally_wire::proto::job_service_server::JobServiceServer;
use tally_wire::proto::worker_service_server::WorkerServiceServer;

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::service::JobApi;
use crate::shared::Shared;
use crate::stage_owner::StageOwner;
use crate::worker_service::WorkerApi;

/// Deletes, every `every`, the stage store's blobs that nothing committed
/// references; a round that fails is logged and the next one tries again.
/// Once the prefix is taken by another data directory, nothing is deleted.
pub async fn sweep_stage_store(
    shared: Arc<Shared>,
    store: StageStore,
    owner: Arc<StageOwner>,
    every: Duration,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match sweep_once(&shared, &store, &owner).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "stage blobs no longer referenced deleted"),
            Err(e) if owner.is_lost() => {
                tracing::error!(error = %e, "the stage store is not swept");
            }
            Err(e) => {
                tracing::warn!(error = %e, "sweeping the stage store failed; trying again later")
            }
        }
    }
}

/// Renews the hold on the stage-store prefix every `every`, until it is
/// found taken by another data directory.
pub async fn renew_stage_owner(owner: Arc<StageOwner>, every: Duration) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match owner.renew().await {
            Ok(()) => {}
            Err(e) if owner.is_lost() => {
                tracing::error!(error = %e, "the stage-store prefix was lost");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "renewing the stage-store prefix failed; trying again")
            }
        }
    }
}

/// One sweep: lists the runner's blobs, asks the scheduler which of them
/// nothing references, and, if this data directory still holds the prefix,
/// deletes those, and the files of uploads to a directory store abandoned
/// an hour ago or more. The scheduler's answer is durable when
/// `with_scheduler` returns, so a blob is deleted only once no state that a
/// restart could read back refers to it.
pub async fn sweep_once(
    shared: &Arc<Shared>,
    store: &StageStore,
    owner: &StageOwner,
) -> Result<usize> {
    let keys = match store.list(Some("jobs")).await {
        // The coordinator is stopping under the sweep (a directory store's
        // blocking call cancelled): nothing to sweep, nothing to warn of.
        Err(tally_stage::StageError::Cancelled) => return Ok(0),
        listed => listed?,
    };
    let garbage = match keys.is_empty() {
        true => Vec::new(),
        false => {
            shared
                .with_scheduler(move |s| s.unreferenced_blobs(keys))
                .await?
        }
    };
    // Blobs under a prefix another data directory took are its own.
    owner.confirm().await?;
    for key in &garbage {
        store.delete(key).await?;
    }
    let partial = store
        .remove_abandoned_uploads(ABANDONED_UPLOAD_IDLE)
        .await?;
    Ok(garbage.len() + partial)
}

/// How long the file of an unfinished upload to a directory store stays
/// untouched before the sweep takes it for abandoned (its writer killed).
const ABANDONED_UPLOAD_IDLE: Duration = Duration::from_secs(3600);

/// Expires leases every `every`, and deletes the finished jobs older than
/// `retain` (if given) at most once a second.
pub async fn expire_leases(shared: Arc<Shared>, every: Duration, retain: Option<Duration>) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A store that cannot be written (a full disk) fails every tick: say so
    // when it starts and when it ends, not four times a second.
    let mut failing = false;
    let mut retention_due = tokio::time::Instant::now();
    loop {
        ticker.tick().await;
        if let Some(retain) = retain
            && tokio::time::Instant::now() >= retention_due
        {
            retention_due = tokio::time::Instant::now() + Duration::from_secs(1);
            let retain_ms = retain.as_millis() as u64;
            let deleted = shared
                .with_scheduler(move |s| {
                    let now = now_ms();
                    let before = s.store_size_on_disk().unwrap_or(0);
                    let n = s.delete_finished_before(now.saturating_sub(retain_ms), now)?;
                    Ok((n, before, s.store_size_on_disk().unwrap_or(0)))
                })
                .await;
            match deleted {
                Ok((0, _, _)) => {}
                Ok((n, before, after)) => tracing::info!(
                    deleted = n,
                    store_bytes_before = before,
                    store_bytes_after = after,
                    "finished jobs past their retention deleted"
                ),
                Err(e) => tracing::warn!(error = %e, "retention failed; trying again"),
            }
        }
        let expired = shared
            .with_scheduler(|s| {
                let now = now_ms();
                s.forget_silent_workers(now);
                // Best effort: a job left unsettled stays whole in memory.
                if let Err(e) = s.settle_finished(now) {
                    tracing::debug!(error = %e, "settling finished jobs failed");
                }
                s.write_deferred_events()?;
                // Barriers waiting for room in the stage store pass once
                // there is room.
                let passed = s.retry_room_waits(now).unwrap_or_else(|e| {
                    tracing::debug!(error = %e, "a barrier waiting for room failed to pass");
                    0
                });
                Ok((s.expire_leases(now)?, passed))
            })
            .await;
        if let Ok((_, passed @ 1..)) = expired {
            tracing::info!(jobs = passed, "barriers that waited for room passed");
            shared.work_ready.notify_waiters();
            let _ = shared.changes.send(String::new());
        }
        let expired = expired.map(|(n, _)| n);
        if failing && expired.is_ok() {
            failing = false;
            tracing::info!("lease expiry works again");
        }
        match expired {
            Ok(0) => {}
            Ok(n) => {
                shared.metrics.leases_expired.add(n as u64);
                tracing::warn!(expired = n, "leases expired; shards go back to the queue");
                shared.work_ready.notify_waiters();
                let _ = shared.changes.send(String::new());
            }
            Err(e) if !failing => {
                failing = true;
                tracing::error!(error = %e, "lease expiry failed; retrying every tick");
            }
            Err(_) => {}
        }
    }
}

/// Samples every job's finished work every second, for the status page's
/// throughput charts, until the coordinator stops.
pub async fn sample_loop(shared: Arc<Shared>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = now_ms();
        match shared.with_scheduler(move |s| Ok(s.list(now))).await {
            Ok(jobs) => shared.metrics.sample(&jobs, now),
            Err(CoordinatorError::Unavailable(_)) => return,
            Err(e) => tracing::warn!(error = %e, "metrics sampling failed"),
        }
    }
}

/// How often the health service looks at the watchdog's verdict.
const HEALTH_EVERY: Duration = Duration::from_millis(250);

/// Keeps the gRPC health service true to the watchdog: NOT_SERVING (the
/// whole server and each service) while the scheduler lock or a flush is
/// held past its limit, SERVING again once released. Reads only the
/// liveness flag, never the scheduler.
pub async fn report_health(shared: Arc<Shared>, reporter: tonic_health::server::HealthReporter) {
    let mut ticker = tokio::time::interval(HEALTH_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut serving = true;
    loop {
        ticker.tick().await;
        let now_serving = shared.liveness.stalled().is_none();
        if now_serving == serving {
            continue;
        }
        serving = now_serving;
        let status = match serving {
            true => tonic_health::ServingStatus::Serving,
            false => tonic_health::ServingStatus::NotServing,
        };
        reporter.set_service_status("", status).await;
        reporter
            .set_service_status(
                <JobServiceServer<JobApi> as tonic::server::NamedService>::NAME,
                status,
            )
            .await;
        reporter
            .set_service_status(
                <WorkerServiceServer<WorkerApi> as tonic::server::NamedService>::NAME,
                status,
            )
            .await;
    }
}
