//! The gRPC services: a thin async shell over the [`Scheduler`]. Every scheduler
//! call (which may flush the store or plan a job) runs on the blocking pool, never
//! on the async runtime's threads.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tally_common::cache::KernelCache;
use tally_common::lease::LeaseId;
use tally_common::proto::job_service_server::JobService;
use tally_common::proto::worker_service_server::WorkerService;
use tally_common::proto::{self, report_message::Body};
use tally_common::spec::ValidSpec;
use tally_common::wire::OUTPUT_CHUNK;
use tally_common::{Control, proto::Job};
use tokio::sync::{Notify, broadcast};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::error::{CoordinatorError, Result};
use crate::group_commit::GroupCommit;
use crate::metrics::CoordinatorMetrics;
use crate::scheduler::{
    Grant, ListPage, Report, ReportOutcome, ReportedCheckpoint, ReportedFailure, ReportedResult,
    Scheduler,
};

/// Longest long-poll a worker may ask for.
pub const MAX_LEASE_WAIT: Duration = Duration::from_secs(30);
/// Largest report (stage output included) the coordinator accepts.
pub const MAX_REPORT_BYTES: usize = 1 << 30;
pub const HEARTBEAT_INTERVAL_MS: u64 = 1_000;

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// State shared by both services and the background tasks.
pub struct Shared {
    /// `None` once the coordinator has shut down: dropping the scheduler closes
    /// the store, so a restart in the same process can open it again.
    pub scheduler: Mutex<Option<Scheduler>>,
    /// Structures built while planning (slider graphs); shared with in-process
    /// workers so that they do not build them again.
    pub cache: Arc<KernelCache>,
    /// Woken when shards may have become leasable.
    pub work_ready: Notify,
    /// Ids of jobs that changed.
    pub changes: broadcast::Sender<String>,
    pub metrics: Arc<CoordinatorMetrics>,
    /// Makes the scheduler's changes durable before calls answer.
    pub group: GroupCommit,
    /// Set when a write failed: the scheduler is read back from the store
    /// before the next call uses it.
    reload: AtomicBool,
}

impl Shared {
    pub fn new(
        scheduler: Scheduler,
        metrics: Arc<CoordinatorMetrics>,
        cache: Arc<KernelCache>,
        group: GroupCommit,
    ) -> Arc<Shared> {
        // Everything the store holds at start was committed (flushed).
        group.durable_through(scheduler.store().applied());
        let (changes, _) = broadcast::channel(1024);
        Arc::new(Shared {
            scheduler: Mutex::new(Some(scheduler)),
            cache,
            work_ready: Notify::new(),
            changes,
            metrics,
            group,
            reload: AtomicBool::new(false),
        })
    }

    /// Runs `f` on the scheduler from the blocking pool, then waits (outside
    /// the scheduler's lock) until every change applied so far, `f`'s
    /// included, is durable: a call answers nothing a crash could take back.
    pub async fn with_scheduler<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || {
            let (result, store, ticket) = {
                let mut scheduler = shared.scheduler.lock().unwrap_or_else(|p| p.into_inner());
                let Some(scheduler) = scheduler.as_mut() else {
                    return Err(CoordinatorError::Unavailable(
                        "the coordinator is shutting down".into(),
                    ));
                };
                if shared.reload.load(Ordering::SeqCst) {
                    scheduler.reload(now_ms()).map_err(|e| {
                        CoordinatorError::Unavailable(format!(
                            "the store failed and cannot be read back yet: {e}"
                        ))
                    })?;
                    shared.reload.store(false, Ordering::SeqCst);
                }
                let result = f(scheduler);
                if let Err(CoordinatorError::Store(_) | CoordinatorError::StoreFull(_)) = &result {
                    shared.reload.store(true, Ordering::SeqCst);
                }
                let store = scheduler.store();
                let ticket = store.applied();
                (result, store, ticket)
            };
            if let Err(e) = shared.group.wait_durable(store.as_ref(), ticket) {
                shared.reload.store(true, Ordering::SeqCst);
                return Err(e);
            }
            result
        })
        .await
        .map_err(|e| CoordinatorError::Internal(format!("scheduler task failed: {e}")))?
    }

    /// Checks a report's result against its shard on the blocking pool,
    /// holding the scheduler's lock only to copy what the check needs; the
    /// report comes back marked checked (a report that is not the result of
    /// a current attempt comes back as it was: accepting it refuses it).
    pub async fn check_result(self: &Arc<Self>, report: Report) -> Result<Report> {
        if report.result.is_none() {
            return Ok(report);
        }
        let shared = self.clone();
        tokio::task::spawn_blocking(move || {
            let check = {
                let scheduler = shared.scheduler.lock().unwrap_or_else(|p| p.into_inner());
                match scheduler.as_ref() {
                    Some(scheduler) => scheduler.result_to_check(&report),
                    None => None,
                }
            };
            let mut report = report;
            if let Some(check) = check {
                check.run(&report)?;
                report.checked = true;
            }
            Ok(report)
        })
        .await
        .map_err(|e| CoordinatorError::Internal(format!("result check failed: {e}")))?
    }

    /// Drops the scheduler and with it the store, after any call in progress.
    pub fn close(&self) {
        let scheduler = self
            .scheduler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(scheduler);
    }

    pub fn changed(&self, job: &str) {
        let _ = self.changes.send(job.to_string());
    }
}

#[derive(Clone)]
pub struct JobApi {
    shared: Arc<Shared>,
}

impl JobApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        JobApi { shared }
    }
}

type JobStream = Pin<Box<dyn Stream<Item = std::result::Result<Job, Status>> + Send>>;

#[tonic::async_trait]
impl JobService for JobApi {
    async fn submit(
        &self,
        request: Request<proto::SubmitRequest>,
    ) -> std::result::Result<Response<proto::SubmitResponse>, Status> {
        let request = request.into_inner();
        let spec_proto = request
            .spec
            .ok_or_else(|| Status::invalid_argument("the request has no job spec"))?;
        let spec = ValidSpec::try_from(&spec_proto).map_err(CoordinatorError::from)?;
        let key = Some(request.idempotency_key).filter(|k| !k.is_empty());
        if let Some(k) = &key
            && k.len() > 256
        {
            return Err(Status::invalid_argument(
                "the idempotency key is longer than 256 bytes",
            ));
        }
        // A repeated key answers at once, without planning again.
        if let Some(k) = key.clone() {
            let asked = spec.clone();
            let existing = self
                .shared
                .with_scheduler(move |s| s.job_for_key(&k, &asked, now_ms()))
                .await?;
            if let Some(job) = existing {
                return Ok(Response::new(proto::SubmitResponse {
                    job: Some(job),
                    created: false,
                }));
            }
        }
        // Planning may build a large graph: do it outside the scheduler lock.
        let shared = self.shared.clone();
        let plan_spec = spec.clone();
        let plan =
            tokio::task::spawn_blocking(move || plan_spec.prepare(&shared.cache, &Control::new()))
                .await
                .map_err(|e| Status::internal(format!("planning failed: {e}")))?
                .map_err(CoordinatorError::from)?;
        let (job, created) = self
            .shared
            .with_scheduler(move |s| s.submit(spec, plan, key, now_ms()))
            .await?;
        tracing::info!(job = %job.id, created, description = %job.description, "job submitted");
        self.shared.changed(&job.id);
        self.shared.work_ready.notify_waiters();
        Ok(Response::new(proto::SubmitResponse {
            job: Some(job),
            created,
        }))
    }

    async fn get(
        &self,
        request: Request<proto::GetJobRequest>,
    ) -> std::result::Result<Response<Job>, Status> {
        let id = request.into_inner().job_id;
        let job = self
            .shared
            .with_scheduler(move |s| s.job(&id, now_ms()))
            .await?;
        Ok(Response::new(job))
    }

    async fn list(
        &self,
        request: Request<proto::ListJobsRequest>,
    ) -> std::result::Result<Response<proto::ListJobsResponse>, Status> {
        let page = ListPage::from_request(request.get_ref())?;
        let (jobs, next_page_token) = self
            .shared
            .with_scheduler(move |s| Ok(s.list_page(&page, now_ms())))
            .await?;
        Ok(Response::new(proto::ListJobsResponse {
            jobs,
            next_page_token,
        }))
    }

    type WatchStream = JobStream;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> std::result::Result<Response<Self::WatchStream>, Status> {
        let id = request.into_inner().job_id;
        let shared = self.shared.clone();
        let first = {
            let id = id.clone();
            shared.with_scheduler(move |s| s.job(&id, now_ms())).await?
        };
        let mut changes = shared.changes.subscribe();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut last = first;
            if tx.send(Ok(last.clone())).await.is_err() {
                return;
            }
            loop {
                if last.is_finished() {
                    return;
                }
                // Wake on a change of this job, or every second for elapsed/ETA.
                let deadline = tokio::time::sleep(Duration::from_secs(1));
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        _ = &mut deadline => break,
                        changed = changes.recv() => match changed {
                            Ok(job) if job == id => break,
                            Ok(_) => continue,
                            Err(broadcast::error::RecvError::Lagged(_)) => break,
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                    }
                }
                let id = id.clone();
                let job = match shared.with_scheduler(move |s| s.job(&id, now_ms())).await {
                    Ok(job) => job,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                if job != last {
                    last = job;
                    if tx.send(Ok(last.clone())).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn cancel(
        &self,
        request: Request<proto::CancelRequest>,
    ) -> std::result::Result<Response<Job>, Status> {
        let id = request.into_inner().job_id;
        let job = self
            .shared
            .with_scheduler(move |s| s.cancel(&id, now_ms()))
            .await?;
        tracing::info!(job = %job.id, "job cancelled");
        self.shared.changed(&job.id);
        Ok(Response::new(job))
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> std::result::Result<Response<proto::DeleteResponse>, Status> {
        let r = request.into_inner();
        let id = r.job_id.clone();
        let (before, after) = self
            .shared
            .with_scheduler(move |s| {
                let before = s.store_size_on_disk().unwrap_or(0);
                s.delete(&id, r.force, now_ms())?;
                Ok((before, s.store_size_on_disk().unwrap_or(0)))
            })
            .await?;
        tracing::info!(job = %r.job_id, store_bytes_before = before, store_bytes_after = after, "job deleted");
        self.shared.changed(&r.job_id);
        Ok(Response::new(proto::DeleteResponse {
            job_id: r.job_id,
            store_bytes_before: before,
            store_bytes_after: after,
        }))
    }

    async fn result(
        &self,
        request: Request<proto::ResultRequest>,
    ) -> std::result::Result<Response<proto::JobResult>, Status> {
        let id = request.into_inner().job_id;
        let result = self.shared.with_scheduler(move |s| s.result(&id)).await?;
        Ok(Response::new(result))
    }

    async fn events(
        &self,
        request: Request<proto::EventsRequest>,
    ) -> std::result::Result<Response<proto::EventsResponse>, Status> {
        let request = request.into_inner();
        let events = self
            .shared
            .with_scheduler(move |s| s.events(&request.job_id, request.from_sequence))
            .await?;
        let events = events
            .into_iter()
            .map(|e| proto::Event {
                sequence: e.seq,
                time_ms: e.time_ms,
                kind: e.kind,
                stage: e.stage,
                shard: e.shard,
                attempt: e.attempt,
                worker_id: e.worker,
                message: e.message,
            })
            .collect();
        Ok(Response::new(proto::EventsResponse { events }))
    }

    async fn info(
        &self,
        _request: Request<proto::InfoRequest>,
    ) -> std::result::Result<Response<proto::InfoResponse>, Status> {
        let info = self
            .shared
            .with_scheduler(|s| {
                let now = now_ms();
                let jobs = s.list(now);
                Ok(proto::InfoResponse {
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    workers_live: s.workers().values().filter(|w| w.is_live(now)).count() as u32,
                    jobs: jobs.len() as u32,
                    jobs_unfinished: jobs.iter().filter(|j| !j.is_finished()).count() as u32,
                    store_bytes: s.store_size_on_disk().unwrap_or(0),
                })
            })
            .await?;
        Ok(Response::new(info))
    }
}

#[derive(Clone)]
pub struct WorkerApi {
    shared: Arc<Shared>,
}

impl WorkerApi {
    pub fn new(shared: Arc<Shared>) -> Self {
        WorkerApi { shared }
    }
}

type ChunkStream =
    Pin<Box<dyn Stream<Item = std::result::Result<proto::StageDataChunk, Status>> + Send>>;

/// A new session secret: 128 random bits from the operating system, in hex.
fn new_session() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| CoordinatorError::Internal(format!("no randomness for a session: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn require_worker_id(id: &str) -> std::result::Result<(), Status> {
    if id.is_empty() || id.len() > 128 {
        return Err(Status::invalid_argument("worker id must be 1 to 128 bytes"));
    }
    Ok(())
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register(
        &self,
        request: Request<proto::RegisterRequest>,
    ) -> std::result::Result<Response<proto::RegisterResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        tracing::info!(worker = %r.worker_id, host = %r.hostname, slots = r.slots, "worker registered");
        let session = new_session()?;
        let given = session.clone();
        self.shared
            .with_scheduler(move |s| {
                s.register(
                    &r.worker_id,
                    &r.hostname,
                    r.slots,
                    &r.version,
                    given,
                    now_ms(),
                );
                Ok(())
            })
            .await?;
        Ok(Response::new(proto::RegisterResponse {
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            coordinator_version: env!("CARGO_PKG_VERSION").to_string(),
            session,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<proto::HeartbeatRequest>,
    ) -> std::result::Result<Response<proto::HeartbeatResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let revoked = self
            .shared
            .with_scheduler(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                Ok(s.heartbeat(&r.worker_id, &r.leases, now_ms()))
            })
            .await?;
        Ok(Response::new(proto::HeartbeatResponse {
            revoked_lease_ids: revoked,
        }))
    }

    async fn lease(
        &self,
        request: Request<proto::LeaseRequest>,
    ) -> std::result::Result<Response<proto::LeaseResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        if r.free_slots > 1024 {
            return Err(Status::invalid_argument("free slots must be at most 1024"));
        }
        let wait = Duration::from_millis(r.wait_ms).min(MAX_LEASE_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Register interest before looking, so a wake-up between the look and
            // the wait is not lost.
            let notified = self.shared.work_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let worker = r.worker_id.clone();
            let session = r.session.clone();
            let slots = r.free_slots;
            let grants = self
                .shared
                .with_scheduler(move |s| {
                    s.check_session(&worker, &session)?;
                    s.lease(&worker, slots, now_ms())
                })
                .await?;
            if !grants.is_empty() || tokio::time::Instant::now() >= deadline {
                for g in &grants {
                    self.shared.changed(&g.lease.job);
                    self.shared.metrics.leased(&g.lease);
                }
                let leases = grants.into_iter().map(shard_lease).collect();
                return Ok(Response::new(proto::LeaseResponse { leases }));
            }
            // Backoff timers also make work ready: look again at least every 250 ms.
            let nap = tokio::time::Instant::now() + Duration::from_millis(250);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline.min(nap)) => {}
            }
        }
    }

    async fn report(
        &self,
        request: Request<Streaming<proto::ReportMessage>>,
    ) -> std::result::Result<Response<proto::ReportResponse>, Status> {
        let (report, session) = receive_report(request.into_inner()).await?;
        let lease = report.lease.clone();
        let finished_shard = report.result.is_some() || report.failure.is_some();
        let accepted_work = report.result.as_ref().map(|r| r.work_done);
        let started = std::time::Instant::now();
        let metrics = &self.shared.metrics;
        // A result is checked by its kind (which may decode all its stage
        // output) before the lock is taken to accept it, so that a large
        // result does not hold up every other call.
        let report = match self.shared.check_result(report).await {
            Ok(report) => report,
            Err(e) => {
                metrics.report_latency.observe(started.elapsed());
                metrics.reports_refused.add(1);
                return Err(e.into());
            }
        };
        let outcome = self
            .shared
            .with_scheduler(move |s| {
                s.check_session(&report.worker, &session)?;
                s.report(report, now_ms())
            })
            .await;
        metrics.report_latency.observe(started.elapsed());
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                metrics.reports_refused.add(1);
                return Err(e.into());
            }
        };
        record_outcome(metrics, &lease, accepted_work, finished_shard, &outcome);
        if finished_shard {
            self.shared.changed(&lease.job);
            self.shared.work_ready.notify_waiters();
        }
        Ok(Response::new(proto::ReportResponse {
            stop: outcome.stop,
            accepted: outcome.accepted,
        }))
    }

    type FetchStageDataStream = ChunkStream;

    async fn fetch_stage_data(
        &self,
        request: Request<proto::FetchStageDataRequest>,
    ) -> std::result::Result<Response<Self::FetchStageDataStream>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let data = self
            .shared
            .with_scheduler(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                s.stage_data(&r.job_id, r.stage, r.bucket)
            })
            .await?;
        let chunks = data.len().div_ceil(OUTPUT_CHUNK);
        let stream = tokio_stream::iter((0..chunks).map(move |i| {
            let end = ((i + 1) * OUTPUT_CHUNK).min(data.len());
            Ok(proto::StageDataChunk {
                data: data[i * OUTPUT_CHUNK..end].to_vec(),
            })
        }));
        Ok(Response::new(Box::pin(stream)))
    }
}

/// The lease as the worker receives it.
fn shard_lease(g: Grant) -> proto::ShardLease {
    proto::ShardLease {
        lease_id: g.lease.to_string(),
        job_id: g.lease.job,
        stage: g.lease.stage,
        index: g.lease.index,
        attempt: g.lease.attempt,
        spec: Some((&g.spec).into()),
        task: g.task,
        checkpoint: g.checkpoint,
        ttl_ms: g.ttl_ms,
        work_total: g.work_total,
    }
}

/// Reads a report stream: exactly one header first, then checkpoints and
/// output, then at most one result or failure, and nothing after it. Returns
/// the report and the session it came with.
async fn receive_report(
    mut stream: Streaming<proto::ReportMessage>,
) -> std::result::Result<(Report, String), Status> {
    let header = match stream.next().await {
        Some(Ok(proto::ReportMessage {
            body: Some(Body::Header(h)),
        })) => h,
        Some(Err(e)) => return Err(e),
        _ => {
            return Err(Status::invalid_argument(
                "a report must start with its header",
            ));
        }
    };
    require_worker_id(&header.worker_id)?;
    let mut parts = ReportParts::default();
    while let Some(message) = stream.next().await {
        parts.add(message?.body)?;
    }
    if !parts.output.is_empty() && parts.result.is_none() {
        return Err(Status::invalid_argument("stage output without a result"));
    }
    // The lease id is parsed once the stream has been read, so that a
    // malformed stream is refused as such whatever its header says.
    let lease: LeaseId = header.lease_id.parse().map_err(CoordinatorError::from)?;
    let report = Report {
        checkpoint: parts.checkpoint,
        output: parts.output,
        result: parts.result,
        failure: parts.failure,
        ..Report::new(header.worker_id, lease)
    };
    Ok((report, header.session))
}

/// The body of a report as it arrives.
#[derive(Default)]
struct ReportParts {
    checkpoint: Option<ReportedCheckpoint>,
    output: Vec<u8>,
    result: Option<ReportedResult>,
    failure: Option<ReportedFailure>,
}

impl ReportParts {
    fn add(&mut self, body: Option<Body>) -> std::result::Result<(), Status> {
        if self.result.is_some() || self.failure.is_some() {
            return Err(Status::invalid_argument(
                "nothing may follow a result or a failure",
            ));
        }
        match body {
            None | Some(Body::Header(_)) => {
                return Err(Status::invalid_argument(
                    "a report has exactly one header, first",
                ));
            }
            Some(Body::Checkpoint(c)) => {
                self.checkpoint = Some(ReportedCheckpoint {
                    state: c.state,
                    partial: c.partial,
                    work_done: c.work_done,
                })
            }
            Some(Body::Output(o)) => {
                if self.output.len() + o.data.len() > MAX_REPORT_BYTES {
                    return Err(Status::resource_exhausted(
                        "the report's output is too large",
                    ));
                }
                self.output.extend_from_slice(&o.data);
            }
            Some(Body::Result(r)) => {
                self.result = Some(ReportedResult {
                    partial: r.partial,
                    work_done: r.work_done,
                })
            }
            Some(Body::Failure(f)) => {
                self.failure = Some(ReportedFailure {
                    message: f.message,
                    permanent: f.permanent,
                    handed_back: f.handed_back,
                })
            }
        }
        Ok(())
    }
}

/// Counts an answered report: an accepted result ends its lease's timing.
fn record_outcome(
    metrics: &CoordinatorMetrics,
    lease: &LeaseId,
    accepted_work: Option<u64>,
    finished_shard: bool,
    outcome: &ReportOutcome,
) {
    match accepted_work {
        Some(work) if outcome.accepted => metrics.accepted(lease, work),
        // A late result of a finished job: answered, not stored.
        Some(_) => metrics.lease_ended(lease),
        None if finished_shard => metrics.lease_ended(lease),
        None => {}
    }
}
