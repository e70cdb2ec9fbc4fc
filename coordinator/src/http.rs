//! The HTTP listener (`--http`): Prometheus text at `/metrics`, a JSON
//! snapshot at `/api/status` and the status page at `/`.
//!
//! The listener is read-only and needs no token: bind it to an address only
//! operators and Prometheus can reach.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tally_wire::metrics::{self, Exposition};
use tally_wire::proto::{Job, JobState};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::metrics::CoordinatorMetrics;
use crate::replica::ReplicaStatus;
use crate::scheduler::WorkerInfo;
use crate::shared::{PEEK_WAIT_LIMIT, Shared};
use crate::watchdog::Holds;

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
        .route("/healthz", get(healthz))
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

/// What one request shows, read under the scheduler lock at once.
struct Snapshot {
    jobs: Vec<Job>,
    /// By user of the users file (a bounded set of labels).
    accounts: std::collections::BTreeMap<String, crate::scheduler::Account>,
    workers: Vec<(String, WorkerInfo)>,
    store_bytes: Option<u64>,
}

async fn snapshot(shared: &Arc<Shared>) -> Result<Snapshot> {
    shared
        .with_scheduler_within(PEEK_WAIT_LIMIT, |s| {
            let now = now_ms();
            let mut workers: Vec<_> = s
                .workers()
                .iter()
                .map(|(id, w)| (id.clone(), w.clone()))
                .collect();
            workers.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Snapshot {
                jobs: s.list(now),
                accounts: s.accounts(),
                workers,
                store_bytes: s.store_size_on_disk(),
            })
        })
        .await
}

fn unavailable(err: CoordinatorError) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("unavailable: {err}\n"),
    )
        .into_response()
}

/// 200 `serving` while the watchdog sees no stall; 503 with what is held,
/// by whom and for how long otherwise (for probes that speak HTTP).
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    match shared.liveness.stalled() {
        None => (StatusCode::OK, "serving\n").into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not serving: {why}\n"),
        )
            .into_response(),
    }
}

/// During a stall the scheduler's gauges are left out (they cannot be read)
/// and the rest is served: the stall is what an operator must see.
async fn metrics_text(State(shared): State<Arc<Shared>>) -> Response {
    let snap = snapshot(&shared).await;
    let now = now_ms();
    let mut e = Exposition::new();
    if let Ok(snap) = &snap {
        cluster_gauges(&mut e, snap, now);
    }
    activity_metrics(&mut e, &shared.metrics, now);
    stall_metrics(&mut e, &shared.holds);
    if let Some(bytes) = snap.ok().and_then(|s| s.store_bytes) {
        e.gauge(
            "tally_store_size_bytes",
            "Size of the store on disk.",
            bytes as f64,
        );
    }
    if let Some(replica) = shared.replica.get() {
        replica_metrics(&mut e, &replica.status, now);
    }
    ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], e.finish()).into_response()
}

/// How long the scheduler lock and the store's flush have been held now.
fn stall_metrics(e: &mut Exposition, holds: &Holds) {
    let now = std::time::Instant::now();
    let held = |hold: &crate::watchdog::Hold| hold.held(now).map_or(0.0, |(_, d)| d.as_secs_f64());
    e.gauge(
        "tally_scheduler_lock_held_seconds",
        "How long the scheduler lock has been held by its current holder (0: free).",
        held(&holds.scheduler),
    );
    e.gauge(
        "tally_store_flush_running_seconds",
        "How long the store's flush in progress has run (0: none).",
        held(&holds.flush),
    );
}

/// How far the store's replica in the stage store is behind.
fn replica_metrics(e: &mut Exposition, status: &ReplicaStatus, now: u64) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    e.gauge(
        "tally_replica_lag_seconds",
        "How long the oldest change not yet in the replica has waited (0: the replica has every change).",
        status.lag_ms(now) as f64 / 1e3,
    );
    e.gauge(
        "tally_replica_pending_changes",
        "Changes applied to the store and not yet shipped to the replica.",
        status.pending_changes() as f64,
    );
    e.counter(
        "tally_replica_shipped_changes_total",
        "Changes shipped to the replica.",
        load(&status.shipped_changes),
    );
    e.counter(
        "tally_replica_shipped_bytes_total",
        "Bytes of log segments shipped to the replica (snapshots not counted).",
        load(&status.shipped_bytes),
    );
    e.gauge(
        "tally_replica_generation",
        "The replica's current generation (a new one begins with each snapshot).",
        load(&status.generation) as f64,
    );
}

/// Jobs, shards and workers as they are now.
fn cluster_gauges(e: &mut Exposition, snap: &Snapshot, now: u64) {
    let by_state: Vec<(&str, f64)> = JobState::KNOWN
        .iter()
        .map(|&st| {
            let n = snap.jobs.iter().filter(|j| j.state() == st).count();
            (st.name(), n as f64)
        })
        .collect();
    e.labelled_gauge("tally_jobs", "Jobs by state.", "state", &by_state);
    let shards = ShardCounts::of(&snap.jobs);
    e.labelled_gauge(
        "tally_shards",
        "Shards of unfinished jobs by state.",
        "state",
        &[
            ("pending", shards.pending as f64),
            ("leased", shards.leased as f64),
            ("done", shards.done as f64),
        ],
    );
    user_gauges(e, snap);
    let live = snap.workers.iter().filter(|(_, w)| w.is_live(now)).count();
    e.gauge(
        "tally_workers_live",
        "Workers heard from in the last 10 s.",
        live as f64,
    );
}

/// What the coordinator has done since it started, and how fast.
/// Each user's account, labelled by user (the users file's names: at most
/// `users::MAX_USERS` and the admin).
fn user_gauges(e: &mut Exposition, snap: &Snapshot) {
    type Field = fn(&crate::scheduler::Account) -> f64;
    let fields: [(&str, &str, Field); 6] = [
        (
            "tally_user_slots_held",
            "Shards of the user's jobs leased now.",
            |a| f64::from(a.slots_held),
        ),
        (
            "tally_user_jobs_unfinished",
            "The user's jobs queued or running.",
            |a| f64::from(a.jobs_unfinished),
        ),
        (
            "tally_user_slot_seconds",
            "Slot-seconds the user's kept jobs have held leases.",
            |a| a.slot_seconds,
        ),
        (
            "tally_user_shards_done",
            "Shards of the user's kept jobs done.",
            |a| a.shards_done as f64,
        ),
        (
            "tally_user_stage_bytes",
            "Stage data the user's unfinished jobs hold.",
            |a| a.stage_bytes as f64,
        ),
        (
            "tally_user_decayed_slot_seconds",
            "The user's slot-seconds with history decayed (the fair share's usage).",
            |a| a.decayed_slot_seconds,
        ),
    ];
    for (name, help, field) in fields {
        let values: Vec<(&str, f64)> = (snap.accounts.iter())
            .map(|(user, account)| (user.as_str(), field(account)))
            .collect();
        e.labelled_gauge(name, help, "user", &values);
    }
}

fn activity_metrics(e: &mut Exposition, m: &CoordinatorMetrics, now: u64) {
    let counters = [
        (
            "tally_leases_granted_total",
            "Shard leases handed to workers.",
            &m.leases_granted,
        ),
        (
            "tally_leases_expired_total",
            "Leases that expired and went back to the queue.",
            &m.leases_expired,
        ),
        (
            "tally_results_accepted_total",
            "Shard results accepted (replicas included).",
            &m.results_accepted,
        ),
        (
            "tally_reports_refused_total",
            "Reports refused (stale attempts, malformed results).",
            &m.reports_refused,
        ),
        (
            "tally_stalls_total",
            "Holds of the scheduler lock or a store flush that passed the watchdog's warning limit.",
            &m.stalls,
        ),
        (
            "tally_store_batches_total",
            "Batches of changes applied to the store; one flush makes every batch applied before it durable.",
            &m.store_batches,
        ),
        (
            "tally_work_units_accepted_total",
            "Work units of accepted shard results.",
            &m.work_units_accepted,
        ),
    ];
    for (name, help, counter) in counters {
        e.counter(name, help, counter.get());
    }
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
        "Latency of a store flush (a group commit: every batch applied before it made durable).",
        &m.store_commit,
    );
}

/// Shards of the unfinished jobs' current stages by state.
struct ShardCounts {
    pending: u64,
    leased: u64,
    done: u64,
}

impl ShardCounts {
    fn of(jobs: &[Job]) -> ShardCounts {
        let mut counts = ShardCounts {
            pending: 0,
            leased: 0,
            done: 0,
        };
        for job in jobs.iter().filter(|j| !j.is_finished()) {
            counts.leased += job.shards_leased;
            // Done counts every stage; the current stage's pending are what is left.
            counts.done += job.shards_done;
            counts.pending += job
                .shards_total
                .saturating_sub(job.shards_done)
                .saturating_sub(job.shards_leased);
        }
        counts
    }
}

async fn status_json(State(shared): State<Arc<Shared>>) -> Response {
    let snap = match snapshot(&shared).await {
        Ok(s) => s,
        Err(err) => return unavailable(err),
    };
    let now = now_ms();
    let mut jobs = snap.jobs;
    jobs.sort_by(|a, b| b.id.cmp(&a.id));
    let jobs: Vec<_> = jobs.iter().map(|j| job_json(j, &shared.metrics)).collect();
    let workers: Vec<_> = snap
        .workers
        .iter()
        .map(|(id, w)| {
            json!({
                "id": id,
                "hostname": w.hostname,
                "slots": w.slots,
                "memory_budget_bytes": w.memory_budget(),
                "version": w.version,
                "last_seen_ms": w.last_seen_ms,
                "live": w.is_live(now),
            })
        })
        .collect();
    let users: Vec<_> = (snap.accounts.iter())
        .map(|(user, a)| {
            json!({
                "user": user,
                "slots_held": a.slots_held,
                "jobs_unfinished": a.jobs_unfinished,
                "slot_seconds": a.slot_seconds,
                "shards_done": a.shards_done,
                "stage_bytes": a.stage_bytes,
                "decayed_slot_seconds": a.decayed_slot_seconds,
            })
        })
        .collect();
    axum::Json(json!({
        "now_ms": now,
        "version": env!("CARGO_PKG_VERSION"),
        "jobs": jobs,
        "workers": workers,
        "users": users,
    }))
    .into_response()
}

fn job_json(j: &Job, metrics: &CoordinatorMetrics) -> serde_json::Value {
    json!({
        "id": j.id,
        "description": j.description,
        "owner": j.owner,
        "slot_seconds": j.slot_seconds,
        "state": j.state_name(),
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
        "stages_unknown": j.stages_unknown,
        "waiting": j.waiting,
        "history": metrics.history(&j.id),
    })
}

async fn status_page() -> Html<&'static str> {
    Html(include_str!("status.html"))
}
