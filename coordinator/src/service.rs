//! The tonic JobService: a thin async shell over the [`Scheduler`], each call
//! through [`Shared`] (which runs it on the blocking pool, never on the async
//! runtime's threads). Planning a job runs outside the scheduler's lock.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tally_kinds::Control;
use tally_kinds::guest::{MAX_MODULE_BYTES, SEND_MODULE, sha256_hex};
use tally_kinds::spec::ValidSpec;
use tally_wire::proto;
use tally_wire::proto::Job;
use tally_wire::proto::job_service_server::JobService;
use tokio::sync::broadcast;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::scheduler::{Access, Account, EVENTS_PER_CALL, ListPage};
use crate::shared::Shared;
use crate::users::caller_of;

#[cfg(doc)]
use crate::scheduler::Scheduler;

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
        // The job's creation is the submission's arrival: its planning
        // (seconds for a large sliders graph) is part of its time.
        let received_ms = now_ms();
        let user = caller_of(&request)?;
        let request = request.into_inner();
        let spec_proto = request
            .spec
            .ok_or_else(|| Status::invalid_argument("the request has no job spec"))?;
        let spec = ValidSpec::try_from(&spec_proto).map_err(CoordinatorError::from)?;
        // Shards cut to the workers' memory, or the job refused if not even
        // its smallest shard fits the largest of them.
        let (worker, whose) = self
            .shared
            .with_scheduler(|s| Ok(s.largest_worker(now_ms())))
            .await?;
        // A coordinator that keeps stage data itself takes outputs only as
        // large as a report carries.
        let output_limit = (!self.shared.stage_store.is_external())
            .then_some(tally_wire::limits::MAX_REPORT_OUTPUT_BYTES as u64);
        let spec = spec
            .fitted_to(worker, &whose, output_limit)
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
            let owner = user.name.clone();
            let existing = self
                .shared
                .with_scheduler(move |s| s.job_for_key_of(&owner, &k, &asked, now_ms()))
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
            .with_scheduler(move |s| s.submit_by(&user, spec, plan, key, attachments, received_ms))
            .await?;
        tracing::info!(job = %job.id, created, owner = %job.owner, description = %job.description, "job submitted");
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
        let user = caller_of(&request)?;
        let id = request.into_inner().job_id;
        let job = self
            .shared
            .with_scheduler(move |s| {
                s.authorize(&user, &id, Access::See, now_ms())?;
                s.job(&id, now_ms())
            })
            .await?;
        Ok(Response::new(job))
    }

    async fn list(
        &self,
        request: Request<proto::ListJobsRequest>,
    ) -> std::result::Result<Response<proto::ListJobsResponse>, Status> {
        let user = caller_of(&request)?;
        let page = ListPage::from_request(request.get_ref())?;
        let (jobs, next_page_token) = self
            .shared
            .with_scheduler(move |s| s.list_page_for(&user, page, now_ms()))
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
        let user = caller_of(&request)?;
        let id = request.into_inner().job_id;
        let shared = self.shared.clone();
        let first = {
            let id = id.clone();
            shared
                .with_scheduler(move |s| {
                    s.authorize(&user, &id, Access::See, now_ms())?;
                    s.job(&id, now_ms())
                })
                .await?
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
        let user = caller_of(&request)?;
        let id = request.into_inner().job_id;
        let by = user.name.clone();
        let job = self
            .shared
            .with_scheduler(move |s| s.cancel_by(&user, &id, now_ms()))
            .await?;
        tracing::info!(job = %job.id, by = %by, "job cancelled");
        self.shared.changed(&job.id);
        Ok(Response::new(job))
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> std::result::Result<Response<proto::DeleteResponse>, Status> {
        let user = caller_of(&request)?;
        let r = request.into_inner();
        let id = r.job_id.clone();
        let (before, after) = self
            .shared
            .with_scheduler(move |s| {
                let before = s.store_size_on_disk().unwrap_or(0);
                s.delete_by(&user, &id, r.force, now_ms())?;
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
        let user = caller_of(&request)?;
        let id = request.into_inner().job_id;
        let result = self
            .shared
            .with_scheduler(move |s| {
                s.authorize(&user, &id, Access::See, now_ms())?;
                s.result(&id)
            })
            .await?;
        Ok(Response::new(result))
    }

    async fn events(
        &self,
        request: Request<proto::EventsRequest>,
    ) -> std::result::Result<Response<proto::EventsResponse>, Status> {
        let user = caller_of(&request)?;
        let request = request.into_inner();
        let events = self
            .shared
            .with_scheduler(move |s| {
                s.authorize(&user, &request.job_id, Access::Events, now_ms())?;
                s.events(&request.job_id, request.from_sequence)
            })
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
                    slots_live: s
                        .workers()
                        .values()
                        .filter(|w| w.is_live(now))
                        .map(|w| w.slots)
                        .sum(),
                    jobs: jobs.len() as u32,
                    jobs_unfinished: jobs.iter().filter(|j| !j.is_finished()).count() as u32,
                    store_bytes: s.store_size_on_disk().unwrap_or(0),
                    replica: None,
                })
            })
            .await?;
        let mut info = info;
        info.replica = self.shared.replica.get().map(|r| {
            let load =
                |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            proto::ReplicaInfo {
                url: r.url.clone(),
                every_ms: r.every.as_millis() as u64,
                lag_ms: r.status.lag_ms(now_ms()),
                pending_changes: r.status.pending_changes(),
                generation: load(&r.status.generation),
                snapshot_generation: load(&r.status.snapshot_generation),
                last_error: r.status.last_error.lock().clone().unwrap_or_default(),
            }
        });
        Ok(Response::new(info))
    }

    async fn who_am_i(
        &self,
        request: Request<proto::WhoAmIRequest>,
    ) -> std::result::Result<Response<proto::WhoAmIResponse>, Status> {
        let user = caller_of(&request)?;
        let name = user.name.clone();
        let account = self
            .shared
            .with_scheduler(move |s| Ok(s.account(&name)))
            .await?;
        Ok(Response::new(proto::WhoAmIResponse {
            name: user.name.clone(),
            role: user.role.name().into(),
            weight: user.weight,
            quota_slots: user.quotas.slots.unwrap_or(0),
            quota_queued_jobs: user.quotas.queued_jobs.unwrap_or(0),
            quota_stage_bytes: user.quotas.stage_bytes.unwrap_or(0),
            account: Some(account_proto(&account)),
        }))
    }

    async fn audit(
        &self,
        request: Request<proto::AuditRequest>,
    ) -> std::result::Result<Response<proto::AuditResponse>, Status> {
        let user = caller_of(&request)?;
        let from = request.into_inner().from_sequence;
        let entries = self
            .shared
            .with_scheduler(move |s| {
                let only = (!user.is_admin()).then_some(user.name.as_str());
                s.audit_log(from, EVENTS_PER_CALL, only)
            })
            .await?;
        let entries = entries
            .into_iter()
            .map(|e| proto::AuditEntry {
                sequence: e.seq,
                time_ms: e.time_ms,
                user: e.user,
                action: e.action,
                job_id: e.job,
                done: e.done,
                message: e.message,
            })
            .collect();
        Ok(Response::new(proto::AuditResponse { entries }))
    }
}

/// A user's account as the API sends it.
pub fn account_proto(account: &Account) -> proto::UserAccount {
    proto::UserAccount {
        slots_held: account.slots_held,
        jobs_unfinished: account.jobs_unfinished,
        jobs: account.jobs,
        slot_seconds: account.slot_seconds,
        shards_done: account.shards_done,
        stage_bytes: account.stage_bytes,
        decayed_slot_seconds: account.decayed_slot_seconds,
    }
}
