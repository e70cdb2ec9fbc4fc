//! The HTTP listener (`--http`) that serves what the coordinator measures: Prometheus text at `/metrics`, a JSON snapshot at `/api/status` and the
//! status page at `/`.
//!
//! The listener is read-only and needs no token: bind it to an address only
//! operators and Prometheus can reach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use serde_json::json;
use tally_common::metrics::Exposition;
use tally_common::proto::{self, Job};

use crate::counters::{WORKER_LOST_MS, is_finished};
use crate::service::{Shared, now_ms};
use crate::{CoordinatorError, Result};

fn state_name(job: &Job) -> &'static str {
    match proto::JobState::try_from(job.state) {
        Ok(proto::JobState::Queued) => "queued",
        Ok(proto::JobState::Running) => "running",
        Ok(proto::JobState::Succeeded) => "succeeded",
        Ok(proto::JobState::Failed) => "failed",
        Ok(proto::JobState::Cancelled) => "cancelled",
        _ => "unknown",
    }
}

/// Samples every second until the coordinator stops.
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

struct Snapshot {
    jobs: Vec<Job>,
    workers: Vec<(String, crate::scheduler::WorkerInfo)>,
    store_bytes: Option<u64>,
}

async fn snapshot(shared: &Arc<Shared>) -> Result<Snapshot> {
    shared
        .with_scheduler(|s| {
            let now = now_ms();
            let mut workers: Vec<_> = s
                .workers()
                .iter()
                .map(|(id, w)| (id.clone(), w.clone()))
                .collect();
            workers.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Snapshot {
                jobs: s.list(now),
                workers,
                store_bytes: s.store_size_on_disk(),
            })
        })
        .await
}

/// Shards of the jobs' current stages: (pending, leased, done).
fn shard_states(jobs: &[Job]) -> (u64, u64, u64) {
    let mut pending = 0;
    let mut leased = 0;
    let mut done = 0;
    for job in jobs.iter().filter(|j| !is_finished(j)) {
        leased += job.shards_leased;
        // Done counts every stage; the current stage's pending are what is left.
        done += job.shards_done;
        pending += job
            .shards_total
            .saturating_sub(job.shards_done)
            .saturating_sub(job.shards_leased);
    }
    (pending, leased, done)
}

async fn metrics_text(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let m = &shared.metrics;
    let mut e = Exposition::new();
    let snap = match snapshot(&shared).await {
        Ok(s) => s,
        Err(err) => {
            return (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("unavailable: {err}\n"),
            )
                .into_response();
        }
    };
    let now = now_ms();
    let states = ["queued", "running", "succeeded", "failed", "cancelled"];
    let by_state: Vec<(&str, f64)> = states
        .iter()
        .map(|&st| {
            let n = snap.jobs.iter().filter(|j| state_name(j) == st).count();
            (st, n as f64)
        })
        .collect();
    e.labelled_gauge("tally_jobs", "Jobs by state.", "state", &by_state);
    let (pending, leased, done) = shard_states(&snap.jobs);
    e.labelled_gauge(
        "tally_shards",
        "Shards of unfinished jobs by state.",
        "state",
        &[
            ("pending", pending as f64),
            ("leased", leased as f64),
            ("done", done as f64),
        ],
    );
    let live = snap
        .workers
        .iter()
        .filter(|(_, w)| w.last_seen_ms + WORKER_LOST_MS >= now)
        .count();
    e.gauge(
        "tally_workers_live",
        "Workers heard from in the last 10 s.",
        live as f64,
    );
    e.counter(
        "tally_leases_granted_total",
        "Shard leases handed to workers.",
        m.leases_granted.get(),
    );
    e.counter(
        "tally_leases_expired_total",
        "Leases that expired and went back to the queue.",
        m.leases_expired.get(),
    );
    e.counter(
        "tally_results_accepted_total",
        "Shard results accepted (replicas included).",
        m.results_accepted.get(),
    );
    e.counter(
        "tally_reports_refused_total",
        "Reports refused (stale attempts, malformed results).",
        m.reports_refused.get(),
    );
    e.counter(
        "tally_work_units_accepted_total",
        "Work units of accepted shard results.",
        m.work_units_accepted.get(),
    );
    e.gauge(
        "tally_work_units_per_second",
        "Finished work units per second over the last 10 s, all jobs.",
        m.recent_rate(10_000, now),
    );
    e.histogram(
        "tally_report_latency_seconds",
        "Time to handle a worker's report, store commit included.",
        &m.report_latency,
    );
    e.histogram(
        "tally_shard_compute_seconds",
        "Wall time from a shard's lease to its accepted result.",
        &m.shard_seconds,
    );
    e.histogram(
        "tally_store_commit_seconds",
        "Store commit latency, flush included.",
        &m.store_commit,
    );
    if let Some(bytes) = snap.store_bytes {
        e.gauge(
            "tally_store_size_bytes",
            "Size of the store on disk.",
            bytes as f64,
        );
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        e.finish(),
    )
        .into_response()
}

async fn status_json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let snap = match snapshot(&shared).await {
        Ok(s) => s,
        Err(err) => {
            return (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!("unavailable: {err}\n"),
            )
                .into_response();
        }
    };
    let now = now_ms();
    let mut jobs = snap.jobs;
    jobs.sort_by(|a, b| b.id.cmp(&a.id));
    let jobs: Vec<_> = jobs
        .iter()
        .map(|j| {
            json!({
                "id": j.id,
                "description": j.description,
                "state": state_name(j),
                "stage": j.stage,
                "stages_total": j.stages_total,
                "shards_done": j.shards_done,
                "shards_leased": j.shards_leased,
                "shards_total": j.shards_total,
                "work_done": j.work_done,
                "work_total": j.work_total,
                "elapsed_ms": j.elapsed_ms,
                "eta_ms": j.eta_ms,
                "answer": j.answer,
                "error": j.error,
                "history": shared.metrics.history(&j.id),
            })
        })
        .collect();
    let workers: Vec<_> = snap
        .workers
        .iter()
        .map(|(id, w)| {
            json!({
                "id": id,
                "hostname": w.hostname,
                "slots": w.slots,
                "version": w.version,
                "last_seen_ms": w.last_seen_ms,
                "live": w.last_seen_ms + WORKER_LOST_MS >= now,
            })
        })
        .collect();
    axum::Json(json!({
        "now_ms": now,
        "version": env!("CARGO_PKG_VERSION"),
        "jobs": jobs,
        "workers": workers,
    }))
    .into_response()
}

async fn status_page() -> Html<&'static str> {
    Html(include_str!("status.html"))
}

/// Serves `/metrics`, `/api/status` and `/` on `listener` until `shutdown`.
pub fn serve(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics_text))
        .route("/api/status", get(status_json))
        .with_state(shared);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "HTTP listener failed");
        }
    })
}

/// Binds the HTTP listener, with a clear message when the address is taken.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        CoordinatorError::InvalidArgument(format!("cannot listen for HTTP on {addr}: {e}"))
    })
}
