//! The tally worker: registers with a coordinator, leases shards up to its free
//! slots, runs each on the dedicated [`pool::ComputePool`], streams checkpoints
//! while it computes, and reports each result until the coordinator has it.
//!
//! The worker holds no durable state: everything it has not reported is lost on a
//! crash, and the coordinator re-leases the shard (from its last accepted
//! checkpoint) once the lease expires.

#![forbid(unsafe_code)]

pub mod pool;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tally_common::cache::KernelCache;
use tally_common::dynamic::{ShardContext, StageInput};
use tally_common::kind::CHECKPOINT_EVERY;
use tally_common::metrics::{Counter, Exposition, Histogram};
use tally_common::proto::worker_service_client::WorkerServiceClient;
use tally_common::proto::{self, report_message::Body};
use tally_common::spec::ValidSpec;
use tally_common::transport::{AuthChannel, ClientSecurity};
use tally_common::values::{EncodedTask, ShardEvent, ShardOutcome};
use tally_common::{Control, Error as CommonError};
use tokio::sync::Notify;

use pool::ComputePool;

/// Largest gRPC message the worker sends or accepts.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Stage output is sent in chunks of this size.
const OUTPUT_CHUNK: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid coordinator address {0:?}: {1}")]
    Address(String, String),
    #[error("{0}")]
    Rpc(#[from] tonic::Status),
    #[error("{0}")]
    Kernel(#[from] CommonError),
}

pub type Result<T> = std::result::Result<T, WorkerError>;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub coordinator: String,
    /// Shards run at the same time.
    pub slots: usize,
    /// Threads of the compute pool.
    pub threads: usize,
    /// Stable identity across reconnects.
    pub worker_id: String,
    /// How long a lease request waits for work.
    pub lease_wait: Duration,
    /// On shutdown, how long running shards may take to finish before they are
    /// handed back.
    pub drain_timeout: Duration,
    /// Fault injection: wait this long before computing each shard (holding its
    /// lease), so tests can kill a worker that is surely mid-shard.
    pub shard_delay: Duration,
    /// Fault injection: alter every result before reporting it, as a faulty
    /// machine would (tests of the checks that must catch it).
    pub corrupt_results: bool,
    /// Fault injection: after a shard's first checkpoint is handed to the
    /// forwarder, stall its computation this long (holding the lease), so tests
    /// can kill a worker that has surely checkpointed mid-shard.
    pub pause_after_checkpoint: Duration,
    /// The cache of per-job structures (slider graphs, hex graphs); a worker in
    /// the coordinator's process shares the coordinator's.
    pub kernel_cache: Arc<KernelCache>,
    /// How often a long shard sends a resumable checkpoint.
    pub checkpoint_interval: Duration,
    /// The bearer token and TLS material presented to the coordinator.
    pub security: ClientSecurity,
    /// Where to serve Prometheus `/metrics` over HTTP, if anywhere.
    pub http: Option<std::net::SocketAddr>,
}

impl WorkerConfig {
    pub fn new(coordinator: impl Into<String>) -> Self {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        WorkerConfig {
            coordinator: coordinator.into(),
            slots: threads,
            threads,
            worker_id: default_worker_id(),
            lease_wait: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(30),
            shard_delay: Duration::ZERO,
            corrupt_results: false,
            pause_after_checkpoint: Duration::ZERO,
            kernel_cache: Arc::new(KernelCache::new()),
            checkpoint_interval: CHECKPOINT_EVERY,
            security: ClientSecurity::default(),
            http: None,
        }
    }
}

/// `<host>-<pid>-<random>`: unique per process, readable in logs.
pub fn default_worker_id() -> String {
    let host = hostname();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}-{}-{:05x}", std::process::id(), nanos & 0xfffff)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_string())
}

/// Counters of one worker's life, returned when it stops.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub shards_completed: AtomicU64,
    pub shards_failed: AtomicU64,
    pub shards_abandoned: AtomicU64,
    /// Wall time of shards that finished, from lease to result.
    pub compute_seconds: Histogram,
    /// Work units of finished shards.
    pub work_units: Counter,
}

/// A running shard as the worker's other tasks see it.
#[derive(Default)]
struct ShardHandle {
    control: Control,
    /// Set when the coordinator no longer wants this attempt (revoked lease,
    /// refused report): the shard then stops without a final report.
    revoked: std::sync::atomic::AtomicBool,
}

impl ShardHandle {
    fn revoke(&self) {
        self.revoked.store(true, Ordering::Relaxed);
        self.control.cancel();
    }

    fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Relaxed)
    }
}

type CachedStage = ((String, u32), StageInput);

struct Inner {
    config: WorkerConfig,
    client: WorkerServiceClient<AuthChannel>,
    pool: ComputePool,
    cache: Arc<KernelCache>,
    active: Mutex<HashMap<String, Arc<ShardHandle>>>,
    slot_freed: Notify,
    /// The decoded output of the last stage fetched: (job, stage) and its data.
    stage_cache: tokio::sync::Mutex<Option<CachedStage>>,
    stats: Arc<WorkerStats>,
}

/// Connects lazily (the coordinator may not be up yet) with the message limits.
pub fn connect(url: &str, security: &ClientSecurity) -> Result<WorkerServiceClient<AuthChannel>> {
    let channel = tally_common::transport::lazy_channel(url, security)
        .map_err(|e| WorkerError::Address(url.to_string(), e.to_string()))?;
    Ok(WorkerServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// Runs the worker until `shutdown` completes, then drains: no new leases,
/// running shards get `drain_timeout` to finish, the rest are handed back.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<Arc<WorkerStats>> {
    let client = connect(&config.coordinator, &config.security)?;
    let inner = Arc::new(Inner {
        pool: ComputePool::new(config.threads),
        cache: config.kernel_cache.clone(),
        active: Mutex::new(HashMap::new()),
        slot_freed: Notify::new(),
        stage_cache: tokio::sync::Mutex::new(None),
        stats: Arc::new(WorkerStats::default()),
        client,
        config,
    });
    let stats = inner.stats.clone();
    tokio::pin!(shutdown);
    let metrics_server = match inner.config.http {
        Some(addr) => Some(serve_metrics(inner.clone(), addr).await?),
        None => None,
    };

    let heartbeat = tokio::spawn(heartbeat_loop(inner.clone()));
    let mut registered = false;
    let mut backoff = Backoff::new();
    let mut shards = tokio::task::JoinSet::new();
    loop {
        if !registered {
            let request = proto::RegisterRequest {
                worker_id: inner.config.worker_id.clone(),
                hostname: hostname(),
                slots: inner.config.slots as u32,
                version: env!("CARGO_PKG_VERSION").to_string(),
            };
            let mut client = inner.client.clone();
            let attempt = client.register(request);
            tokio::select! {
                        _ = &mut shutdown => break,
                        r = attempt => match r {
                            Ok(_) => {
                                tracing::info!(worker = %inner.config.worker_id, coordinator = %inner.config.coordinator, "registered");
                                registered = true;
                                backoff.reset();
                            }
                            Err(e) if e.code() == tonic::Code::Unauthenticated => {
                                // Retrying cannot help: the operator must fix the token.
                                heartbeat.abort();
            if let Some(server) = metrics_server {
                server.abort();
            }
                                return Err(WorkerError::Rpc(e));
                            }
                            Err(e) => {
                                tracing::warn!(error = %e.message(), "coordinator unreachable; retrying");
                                tokio::select! { _ = &mut shutdown => break, _ = backoff.wait() => {} }
                                continue;
                            }
                        },
                    }
        }
        while shards.try_join_next().is_some() {}
        let free = inner
            .config
            .slots
            .saturating_sub(inner.active.lock().unwrap().len());
        if free == 0 {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = inner.slot_freed.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        }
        let request = proto::LeaseRequest {
            worker_id: inner.config.worker_id.clone(),
            free_slots: free as u32,
            wait_ms: inner.config.lease_wait.as_millis() as u64,
        };
        let mut client = inner.client.clone();
        let leased = client.lease(request);
        let leases = tokio::select! {
            _ = &mut shutdown => break,
            r = leased => r,
        };
        match leases {
            Ok(response) => {
                backoff.reset();
                for lease in response.into_inner().leases {
                    let handle = Arc::new(ShardHandle::default());
                    inner
                        .active
                        .lock()
                        .unwrap()
                        .insert(lease.lease_id.clone(), handle.clone());
                    shards.spawn(run_shard(inner.clone(), lease, handle));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.message(), code = ?e.code(), "lease request failed; retrying");
                if e.code() == tonic::Code::Unavailable {
                    registered = false;
                }
                tokio::select! { _ = &mut shutdown => break, _ = backoff.wait() => {} }
            }
        }
    }

    // Drain.
    let running = inner.active.lock().unwrap().len();
    if running > 0 {
        tracing::info!(running, timeout = ?inner.config.drain_timeout, "draining: finishing running shards");
    }
    let drained = tokio::time::timeout(inner.config.drain_timeout, async {
        while shards.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("drain timeout: handing back unfinished shards");
        for shard in inner.active.lock().unwrap().values() {
            shard.control.cancel();
        }
        while shards.join_next().await.is_some() {}
    }
    heartbeat.abort();
    if let Some(server) = metrics_server {
        server.abort();
    }
    Ok(stats)
}

/// Exponential backoff between retries: 100 ms doubling to 5 s.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
        }
    }

    fn reset(&mut self) {
        self.next = Duration::from_millis(100);
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Duration::from_secs(5));
    }
}

async fn heartbeat_loop(inner: Arc<Inner>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let leases: Vec<proto::LeaseProgress> = inner
            .active
            .lock()
            .unwrap()
            .iter()
            .map(|(id, h)| proto::LeaseProgress {
                lease_id: id.clone(),
                work_done: h.control.work_done(),
            })
            .collect();
        let request = proto::HeartbeatRequest {
            worker_id: inner.config.worker_id.clone(),
            leases,
        };
        match inner.client.clone().heartbeat(request).await {
            Ok(response) => {
                let active = inner.active.lock().unwrap();
                for id in response.into_inner().revoked_lease_ids {
                    if let Some(shard) = active.get(&id) {
                        tracing::info!(lease = %id, "lease revoked; stopping the shard");
                        shard.revoke();
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e.message(), "heartbeat failed"),
        }
    }
}

/// How a shard attempt ended, for the final report.
enum Ending {
    Done(ShardOutcome),
    Failed { message: String, permanent: bool },
    HandedBack,
    Stopped,
}

async fn run_shard(inner: Arc<Inner>, lease: proto::ShardLease, handle: Arc<ShardHandle>) {
    let lease_id = lease.lease_id.clone();
    let started = std::time::Instant::now();
    tracing::debug!(lease = %lease_id, "shard started");
    let ending = compute_shard(&inner, &lease, &handle).await;
    let ending = match ending {
        Ok(outcome) => Ending::Done(outcome),
        // Cancelled either by the coordinator (revoked) or by the drain timeout.
        Err(WorkerError::Kernel(CommonError::Cancelled)) if handle.is_revoked() => Ending::Stopped,
        Err(WorkerError::Kernel(CommonError::Cancelled)) => Ending::HandedBack,
        Err(WorkerError::Kernel(CommonError::InvalidArgument(m))) => Ending::Failed {
            message: m,
            permanent: true,
        },
        Err(e) => Ending::Failed {
            message: e.to_string(),
            permanent: false,
        },
    };
    match &ending {
        Ending::Done(outcome) => {
            inner.stats.shards_completed.fetch_add(1, Ordering::Relaxed);
            inner.stats.compute_seconds.observe(started.elapsed());
            inner.stats.work_units.add(outcome.work_done);
            tracing::info!(lease = %lease_id, seconds = started.elapsed().as_secs_f64(), "shard finished");
        }
        Ending::Failed { message, .. } => {
            inner.stats.shards_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(lease = %lease_id, error = %message, "shard failed");
        }
        Ending::HandedBack | Ending::Stopped => {
            inner.stats.shards_abandoned.fetch_add(1, Ordering::Relaxed);
        }
    }
    if !matches!(ending, Ending::Stopped) {
        deliver_final_report(&inner, &lease, ending).await;
    }
    inner.active.lock().unwrap().remove(&lease_id);
    inner.slot_freed.notify_one();
}

async fn compute_shard(
    inner: &Arc<Inner>,
    lease: &proto::ShardLease,
    handle: &Arc<ShardHandle>,
) -> Result<ShardOutcome> {
    let spec_proto = lease
        .spec
        .as_ref()
        .ok_or_else(|| CommonError::InvalidArgument("the lease carries no job spec".into()))?;
    let spec = ValidSpec::try_from(spec_proto)?;
    let task = EncodedTask::from_bytes(&lease.task)?;
    if !inner.config.shard_delay.is_zero() {
        tokio::time::sleep(inner.config.shard_delay).await;
    }
    let input = if spec.needs_stage_input(lease.stage) {
        Some(fetch_stage(inner, &spec, &lease.job_id, lease.stage - 1).await?)
    } else {
        None
    };

    // Checkpoints flow from the kernel thread to an async forwarder.
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel::<ShardEvent>();
    let forwarder = {
        let inner = inner.clone();
        let lease_id = lease.lease_id.clone();
        let handle = handle.clone();
        tokio::spawn(async move {
            while let Some(ShardEvent {
                state,
                partial,
                work_done,
            }) = events_rx.recv().await
            {
                let messages = vec![
                    header(&inner, &lease_id),
                    Body::Checkpoint(proto::ReportCheckpoint {
                        state,
                        partial: partial.map(|p| p.to_bytes()).unwrap_or_default(),
                        work_done,
                    }),
                ];
                match send_report(&inner, messages).await {
                    Ok(stop) if stop => handle.revoke(),
                    Ok(_) => {}
                    Err(status) if is_refusal(&status) => {
                        tracing::info!(lease = %lease_id, reason = %status.message(), "checkpoint refused; stopping");
                        handle.revoke();
                    }
                    // A lost checkpoint only costs recomputation after a crash.
                    Err(status) => {
                        tracing::debug!(error = %status.message(), "checkpoint not delivered")
                    }
                }
            }
        })
    };

    let cache = inner.cache.clone();
    let kernel_handle = handle.clone();
    let checkpoint = lease.checkpoint.clone();
    let checkpoint_every = inner.config.checkpoint_interval;
    let pause = inner.config.pause_after_checkpoint;
    let kernel_spec = spec.clone();
    let result = inner.pool.run(move || {
        let mut paused = false;
        let mut on_event = |event: ShardEvent| {
            let _ = events_tx.send(event);
            if !pause.is_zero() && !paused {
                paused = true;
                std::thread::sleep(pause);
            }
        };
        kernel_spec.execute(
            &task,
            ShardContext {
                input: input.as_ref(),
                checkpoint: &checkpoint,
                cache: &cache,
                control: &kernel_handle.control,
                checkpoint_every,
                on_event: &mut on_event,
            },
        )
    });
    let mut outcome = result
        .await
        .map_err(|_| CommonError::Internal("the compute thread stopped".into()))??;
    let _ = forwarder.await;
    if inner.config.corrupt_results {
        spec.corrupt_for_testing(&mut outcome.partial)?;
    }
    Ok(outcome)
}

/// The merged output of `stage`, fetched and decoded once per worker and shared by
/// the shards of the next stage.
async fn fetch_stage(
    inner: &Arc<Inner>,
    spec: &ValidSpec,
    job: &str,
    stage: u32,
) -> Result<StageInput> {
    let mut cached = inner.stage_cache.lock().await;
    if let Some(((j, s), data)) = cached.as_ref()
        && j == job
        && *s == stage
    {
        return Ok(data.clone());
    }
    let mut backoff = Backoff::new();
    let data = loop {
        match fetch_stage_once(inner, job, stage).await {
            Ok(data) => break data,
            Err(status) if status.code() == tonic::Code::Unavailable => {
                tracing::warn!(error = %status.message(), "stage data fetch failed; retrying");
                backoff.wait().await;
            }
            Err(status) => return Err(status.into()),
        }
    };
    let spec = spec.clone();
    let decoded = inner.pool.run(move || spec.decode_stage_input(&data));
    let data = decoded
        .await
        .map_err(|_| CommonError::Internal("the compute thread stopped".into()))??;
    *cached = Some(((job.to_string(), stage), data.clone()));
    Ok(data)
}

async fn fetch_stage_once(
    inner: &Arc<Inner>,
    job: &str,
    stage: u32,
) -> std::result::Result<Vec<u8>, tonic::Status> {
    let request = proto::FetchStageDataRequest {
        job_id: job.to_string(),
        stage,
    };
    let mut stream = inner
        .client
        .clone()
        .fetch_stage_data(request)
        .await?
        .into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        data.extend_from_slice(&chunk.data);
    }
    Ok(data)
}

fn header(inner: &Inner, lease_id: &str) -> Body {
    Body::Header(proto::ReportHeader {
        worker_id: inner.config.worker_id.clone(),
        lease_id: lease_id.to_string(),
    })
}

/// Sends one report stream; returns the coordinator's `stop`.
async fn send_report(
    inner: &Inner,
    messages: Vec<Body>,
) -> std::result::Result<bool, tonic::Status> {
    let stream = tokio_stream::iter(
        messages
            .into_iter()
            .map(|body| proto::ReportMessage { body: Some(body) }),
    );
    let response = inner.client.clone().report(stream).await?;
    Ok(response.into_inner().stop)
}

/// The coordinator refused the report for good: the attempt is stale, the job or
/// shard is unknown, or the report is malformed.
fn is_refusal(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::FailedPrecondition | tonic::Code::NotFound | tonic::Code::InvalidArgument
    )
}

fn is_result(messages: &[Body]) -> bool {
    messages.iter().any(|m| matches!(m, Body::Result(_)))
}

/// Sends the final report of an attempt, retrying while the coordinator is
/// unreachable, until it is accepted or refused for good.
async fn deliver_final_report(inner: &Arc<Inner>, lease: &proto::ShardLease, ending: Ending) {
    let lease_id = &lease.lease_id;
    let mut messages = vec![header(inner, lease_id)];
    match ending {
        Ending::Done(outcome) => {
            for chunk in outcome.output.chunks(OUTPUT_CHUNK) {
                messages.push(Body::Output(proto::OutputChunk {
                    data: chunk.to_vec(),
                }));
            }
            let partial = outcome.partial.to_bytes();
            messages.push(Body::Result(proto::ReportResult {
                partial,
                work_done: outcome.work_done,
            }));
        }
        Ending::Failed { message, permanent } => {
            messages.push(Body::Failure(proto::ReportFailure {
                message,
                permanent,
                handed_back: false,
            }));
        }
        Ending::HandedBack => {
            messages.push(Body::Failure(proto::ReportFailure {
                message: "worker shutting down".into(),
                permanent: false,
                handed_back: true,
            }));
        }
        Ending::Stopped => return,
    }
    let mut backoff = Backoff::new();
    loop {
        match send_report(inner, messages.clone()).await {
            Ok(stop) => {
                if is_result(&messages) {
                    // The coordinator has stored the result (or, with `stop`,
                    // the job is finished): the chaos tests check from this
                    // line that an accepted shard is never computed again.
                    tracing::info!(lease = %lease_id, stop, "result accepted");
                }
                return;
            }
            Err(status)
                if status.code() == tonic::Code::InvalidArgument && is_result(&messages) =>
            {
                // The coordinator found the result malformed: say so as a failed
                // attempt, so the shard is retried now rather than at lease expiry.
                tracing::warn!(lease = %lease_id, reason = %status.message(), "result refused as malformed");
                messages = vec![
                    header(inner, lease_id),
                    Body::Failure(proto::ReportFailure {
                        message: format!("result refused: {}", status.message()),
                        permanent: false,
                        handed_back: false,
                    }),
                ];
            }
            Err(status) if is_refusal(&status) => {
                tracing::info!(lease = %lease_id, reason = %status.message(), "report refused");
                return;
            }
            Err(status) => {
                tracing::warn!(lease = %lease_id, error = %status.message(), "report not delivered; retrying");
                backoff.wait().await;
            }
        }
    }
}

/// Serves Prometheus text at `/metrics` on `addr` until aborted.
async fn serve_metrics(
    inner: Arc<Inner>,
    addr: std::net::SocketAddr,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        WorkerError::Address(addr.to_string(), format!("cannot listen for HTTP: {e}"))
    })?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let inner = inner.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    metrics_text(&inner),
                )
            }
        }),
    );
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP listener failed");
        }
    }))
}

fn metrics_text(inner: &Inner) -> String {
    let stats = &inner.stats;
    let (active, work_in_progress) = {
        let active = inner.active.lock().unwrap();
        let work: u64 = active.values().map(|h| h.control.work_done()).sum();
        (active.len(), work)
    };
    let mut e = Exposition::new();
    e.counter(
        "tally_worker_shards_completed_total",
        "Shards this worker finished and reported.",
        stats.shards_completed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_shards_failed_total",
        "Shards that failed on this worker.",
        stats.shards_failed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_shards_abandoned_total",
        "Shards handed back or stopped (revoked, drained).",
        stats.shards_abandoned.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_work_units_total",
        "Work units of finished shards.",
        stats.work_units.get(),
    );
    e.gauge(
        "tally_worker_active_shards",
        "Shards running now.",
        active as f64,
    );
    e.gauge(
        "tally_worker_slots",
        "Shards this worker runs at once.",
        inner.config.slots as f64,
    );
    e.gauge(
        "tally_worker_work_in_progress",
        "Work units done so far by the running shards.",
        work_in_progress as f64,
    );
    e.histogram(
        "tally_worker_shard_compute_seconds",
        "Wall time of finished shards.",
        &stats.compute_seconds,
    );
    e.finish()
}
