//! The gRPC services: a thin async shell over the [`Scheduler`]. Every scheduler
//! call (which may flush the store or plan a job) runs on the blocking pool, never
//! on the async runtime's threads.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::guest::{MAX_MODULE_BYTES, SEND_MODULE, sha256_hex};
use tally_kinds::spec::ValidSpec;
use tally_stage::StageStoreUrl;
use tally_wire::proto;
use tally_wire::proto::Job;
use tally_wire::proto::job_service_server::JobService;
use tokio::sync::{Notify, broadcast};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::error::{CoordinatorError, Result};
use crate::group_commit::GroupCommit;
use crate::metrics::CoordinatorMetrics;
use crate::records::attachment_key;
use crate::scheduler::{ListPage, Report, Scheduler};
use crate::store::Tree;

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
    /// Where stage data lives; workers learn it when they register.
    pub stage_store: StageStoreUrl,
}

impl Shared {
    pub fn new(
        scheduler: Scheduler,
        metrics: Arc<CoordinatorMetrics>,
        cache: Arc<KernelCache>,
        group: GroupCommit,
        stage_store: StageStoreUrl,
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
            stage_store,
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
        let mut checked = self.check_results(vec![report]).await;
        checked.pop().expect("one report in, one out")
    }

    /// [`Shared::check_result`] for several reports, under one lock.
    pub async fn check_results(self: &Arc<Self>, reports: Vec<Report>) -> Vec<Result<Report>> {
        let count = reports.len();
        let shared = self.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let checks: Vec<_> = {
                let scheduler = shared.scheduler.lock().unwrap_or_else(|p| p.into_inner());
                reports
                    .iter()
                    .map(|report| match (scheduler.as_ref(), &report.result) {
                        (Some(scheduler), Some(_)) => scheduler.result_to_check(report),
                        _ => None,
                    })
                    .collect()
            };
            reports
                .into_iter()
                .zip(checks)
                .map(|(mut report, check)| {
                    if let Some(check) = check {
                        check.run(&report)?;
                        report.checked = true;
                    }
                    Ok(report)
                })
                .collect::<Vec<_>>()
        })
        .await;
        match checked {
            Ok(checked) => checked,
            Err(e) => (0..count)
                .map(|_| {
                    Err(CoordinatorError::Internal(format!(
                        "result check failed: {e}"
                    )))
                })
                .collect(),
        }
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

    /// The attachment with this SHA-256 (hex), read from the store (outside
    /// the scheduler's lock): the store, not the kernel cache, holds the
    /// attachments jobs may name, since they go with the last job naming them.
    pub async fn attachment(self: &Arc<Self>, sha256: &str) -> Result<Option<Arc<[u8]>>> {
        let store = self.with_scheduler(|s| Ok(s.store())).await?;
        let key = attachment_key(sha256);
        let bytes = tokio::task::spawn_blocking(move || store.get(Tree::Blobs, &key))
            .await
            .map_err(|e| CoordinatorError::Internal(format!("reading an attachment: {e}")))??;
        Ok(bytes.map(Into::into))
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

    /// Checks the attachments sent with a job against those its spec names,
    /// and makes every one it names available to planning (the kernel
    /// cache): sent now, or held from an earlier job (read from the store
    /// unless the cache has it). Returns those sent, for the store.
    async fn attachments(
        &self,
        spec: &ValidSpec,
        sent: Vec<Vec<u8>>,
    ) -> Result<Vec<(String, Arc<[u8]>)>> {
        let total: usize = sent.iter().map(Vec::len).sum();
        if total > MAX_MODULE_BYTES {
            return Err(CoordinatorError::InvalidArgument(format!(
                "the attachments take {total} bytes, more than the {MAX_MODULE_BYTES} a job may send"
            )));
        }
        let named = spec.attachments();
        let sent: Vec<(String, Arc<[u8]>)> = tokio::task::spawn_blocking(move || {
            sent.into_iter()
                .map(|bytes| (sha256_hex(&bytes), Arc::from(bytes)))
                .collect()
        })
        .await
        .map_err(|e| CoordinatorError::Internal(format!("hashing attachments: {e}")))?;
        if let Some((digest, _)) = sent.iter().find(|(d, _)| !named.contains(d)) {
            return Err(CoordinatorError::InvalidArgument(format!(
                "an attachment (SHA-256 {digest}) is not one the job spec names"
            )));
        }
        for digest in &named {
            match sent.iter().find(|(d, _)| d == digest) {
                Some((_, bytes)) => self.shared.cache.put_attachment(digest, bytes.clone()),
                // Planning has it; the scheduler checks that the store still
                // holds it when it stores the job.
                None if self.shared.cache.attachment(digest).is_some() => {}
                None => match self.shared.attachment(digest).await? {
                    Some(bytes) => self.shared.cache.put_attachment(digest, bytes),
                    None => {
                        return Err(CoordinatorError::InvalidArgument(format!(
                            "the job names a module with SHA-256 {digest}, which the coordinator \
                             does not hold: {SEND_MODULE}"
                        )));
                    }
                },
            }
        }
        Ok(sent)
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
        // Shards cut to the workers' memory, or the job refused if not even
        // its smallest shard fits the largest of them.
        let (budget, whose) = self
            .shared
            .with_scheduler(|s| Ok(s.largest_memory_budget(now_ms())))
            .await?;
        let spec = spec
            .fitted_to(budget, &whose)
            .map_err(CoordinatorError::from)?;
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
        let attachments = self.attachments(&spec, request.attachments).await?;
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
            .with_scheduler(move |s| s.submit(spec, plan, key, attachments, now_ms()))
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
