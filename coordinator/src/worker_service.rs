//! The tonic WorkerService: registration, heartbeats, leases and stage data,
//! each a scheduler call through [`Shared`]; and reports (one shard's,
//! streamed, or several shards' final reports at once), read off the wire
//! here and taken by [`intake`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tally_stage::BlobRef;
use tally_wire::lease::LeaseId;
use tally_wire::limits::{MAX_BATCH_OUTPUT, MAX_BATCH_REPORTS, MAX_CHECKPOINT_BYTES, OUTPUT_CHUNK};
use tally_wire::proto::worker_service_server::WorkerService;
use tally_wire::proto::{self, report_message::Body};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::intake;
use crate::scheduler::{
    Grant, HeldRead, Piece, Registration, Report, ReportOutcome, ReportedCheckpoint,
    ReportedFailure, ReportedResult, StageSource,
};
use crate::shared::Shared;

/// Longest long-poll a worker may ask for.
pub const MAX_LEASE_WAIT: Duration = Duration::from_secs(30);
/// Largest report (stage output included) the coordinator accepts.
pub const MAX_REPORT_BYTES: usize = tally_wire::limits::MAX_REPORT_OUTPUT_BYTES;
pub const HEARTBEAT_INTERVAL_MS: u64 = 1_000;

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
    Ok(tally_wire::digest::to_hex(&bytes))
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
        let epoch = self
            .shared
            .with_scheduler(move |s| {
                let registration = Registration {
                    hostname: r.hostname,
                    slots: r.slots,
                    version: r.version,
                    memory_budget: r.memory_budget_bytes,
                    capabilities: r.capabilities,
                    incarnation: r.incarnation,
                    oom_kills: r.oom_kills,
                };
                let now = now_ms();
                // A new process of a known worker: the old one's leases are
                // lost with it, and go back now rather than at their expiry.
                if let Some(restarted) = s.register(&r.worker_id, registration, given, now) {
                    let lost = s.expire_restarted(&r.worker_id, &restarted, now)?;
                    if lost > 0 {
                        tracing::warn!(worker = %r.worker_id, lost, oom_kills = ?restarted.oom_kills, "a worker restarted while holding leases; they go back now");
                    }
                }
                Ok(s.epoch())
            })
            .await?;
        Ok(Response::new(proto::RegisterResponse {
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            coordinator_version: env!("CARGO_PKG_VERSION").to_string(),
            session,
            stage_store: self.shared.stage_store.to_string(),
            max_inline_stage_output: self.shared.inline_stage_output as u64,
            takes_packed_outputs: self.shared.stage_store.is_external(),
            epoch,
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
        if r.lease_ahead > 1024 {
            return Err(Status::invalid_argument("lease ahead must be at most 1024"));
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
            let (slots, ahead) = (r.free_slots, r.lease_ahead);
            // A lease waits for no flush (see `scheduler::leasing`).
            let grants = self
                .shared
                .with_scheduler_unflushed(move |s| {
                    s.check_session(&worker, &session)?;
                    s.lease_ahead(&worker, slots, ahead, now_ms())
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
        let outcome = intake::take_report(&self.shared, report, session).await?;
        Ok(Response::new(proto::ReportResponse {
            stop: outcome.stop,
            accepted: outcome.accepted,
        }))
    }

    async fn report_batch(
        &self,
        request: Request<proto::ReportBatchRequest>,
    ) -> std::result::Result<Response<proto::ReportBatchResponse>, Status> {
        let verdicts = receive_batch(&self.shared, request.into_inner()).await?;
        Ok(Response::new(proto::ReportBatchResponse { verdicts }))
    }

    type FetchStageDataStream = ChunkStream;

    async fn fetch_stage_data(
        &self,
        request: Request<proto::FetchStageDataRequest>,
    ) -> std::result::Result<Response<Self::FetchStageDataStream>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let bucket = r.bucket;
        let held = match (r.held_only, r.shards.is_empty()) {
            (false, true) => HeldRead::No,
            (false, false) => {
                return Err(Status::invalid_argument(
                    "shards are named only in a read of held outputs (held_only)",
                ));
            }
            (true, true) => HeldRead::All,
            (true, false) if r.shards.windows(2).all(|pair| pair[0] < pair[1]) => {
                HeldRead::Only(r.shards.clone())
            }
            (true, false) => {
                return Err(Status::invalid_argument(
                    "the shards of a read are named in ascending order, each once",
                ));
            }
        };
        // Not after a flush: what a reader computes from stage data not yet
        // durable is fenced by its lease's epoch (docs/checkpoint-protocol.md, step 2).
        let source = self
            .shared
            .with_scheduler_unflushed(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                s.stage_source(&r.job_id, r.stage)
            })
            .await?;
        Ok(Response::new(stage_stream(source, bucket, held)))
    }

    type FetchCheckpointStream = ChunkStream;

    async fn fetch_checkpoint(
        &self,
        request: Request<proto::FetchCheckpointRequest>,
    ) -> std::result::Result<Response<Self::FetchCheckpointStream>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let lease: LeaseId = r.lease_id.parse().map_err(CoordinatorError::from)?;
        let (store, key) = self
            .shared
            .with_scheduler(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                s.checkpoint_of(&r.worker_id, &lease)
            })
            .await?;
        // Read outside the scheduler's lock: a checkpoint may be a gigabyte.
        let data = tokio::task::spawn_blocking(move || store.get(crate::store::Tree::Blobs, &key))
            .await
            .map_err(|e| CoordinatorError::Internal(format!("reading a checkpoint: {e}")))??
            .ok_or_else(|| {
                CoordinatorError::FailedPrecondition(
                    "the checkpoint is gone: its shard has moved on".into(),
                )
            })?;
        Ok(Response::new(chunk_stream(Arc::new(data))))
    }

    async fn fetch_attachment(
        &self,
        request: Request<proto::FetchAttachmentRequest>,
    ) -> std::result::Result<Response<proto::FetchAttachmentResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        if !tally_kinds::guest::is_sha256_hex(&r.sha256) {
            return Err(Status::invalid_argument(
                "an attachment is named by its SHA-256 in 64 lowercase hex digits",
            ));
        }
        let sha256 = r.sha256.clone();
        self.shared
            .with_scheduler(move |s| s.check_session(&r.worker_id, &r.session))
            .await?;
        let data = self.shared.attachment(&sha256).await?.ok_or_else(|| {
            CoordinatorError::NotFound(format!("no attachment with SHA-256 {sha256}"))
        })?;
        Ok(Response::new(proto::FetchAttachmentResponse {
            data: data.to_vec(),
        }))
    }

    async fn stage_blobs(
        &self,
        request: Request<proto::StageBlobsRequest>,
    ) -> std::result::Result<Response<proto::StageBlobsResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let (reads_held, reads_packed) = (r.reads_held, r.reads_packed);
        let (job, stage) = (r.job_id.clone(), r.stage);
        // Not after a flush, as `fetch_stage_data`.
        let listed = self
            .shared
            .with_scheduler_unflushed(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                s.stage_blobs(&r.job_id, r.stage)
            })
            .await?;
        if !listed.held.is_empty() && !reads_held {
            return Err(Status::failed_precondition(format!(
                "stage {stage} of job {job} has outputs the coordinator holds itself, which this \
                 worker cannot read: run a worker of this coordinator's release"
            )));
        }
        if !reads_packed && listed.blobs.iter().flatten().any(|b| b.offset > 0) {
            return Err(Status::failed_precondition(format!(
                "stage {stage} of job {job} has outputs in packs of several shards, which this \
                 worker cannot read: run a worker of this coordinator's release"
            )));
        }
        let blobs = listed
            .blobs
            .iter()
            .map(|blob| blob.as_ref().map(proto::BlobRef::from).unwrap_or_default())
            .collect();
        let held_digests = listed
            .held_digests
            .iter()
            .map(|digest| digest.map_or_else(Vec::new, |d| d.to_le_bytes().to_vec()))
            .collect();
        Ok(Response::new(proto::StageBlobsResponse {
            blobs,
            held: listed.held,
            held_digests,
        }))
    }

    async fn stage_shard(
        &self,
        request: Request<proto::StageShardRequest>,
    ) -> std::result::Result<Response<proto::StageShardResponse>, Status> {
        let r = request.into_inner();
        require_worker_id(&r.worker_id)?;
        let (task, partial, blob) = self
            .shared
            .with_scheduler(move |s| {
                s.check_session(&r.worker_id, &r.session)?;
                s.stage_shard(&r.job_id, r.stage, r.index)
            })
            .await?;
        Ok(Response::new(proto::StageShardResponse {
            task: task.to_bytes(),
            partial: partial.to_bytes(),
            output_blob: Some(proto::BlobRef::from(&blob)),
        }))
    }
}

/// A blob reference as a message carries it, checked.
fn blob_ref(blob: &proto::BlobRef) -> std::result::Result<BlobRef, Status> {
    BlobRef::try_from(blob).map_err(|e| Status::invalid_argument(e.to_string()))
}

/// `data` as a stream of chunks of at most [`OUTPUT_CHUNK`] bytes, each
/// copied out when it is sent.
fn chunk_stream(data: Arc<Vec<u8>>) -> ChunkStream {
    let chunks = data.len().div_ceil(OUTPUT_CHUNK);
    Box::pin(tokio_stream::iter((0..chunks).map(move |i| {
        let end = ((i + 1) * OUTPUT_CHUNK).min(data.len());
        Ok(proto::StageDataChunk {
            data: data[i * OUTPUT_CHUNK..end].to_vec(),
        })
    })))
}

/// A stage's output (merged, or one bucket of each shard's) as a stream of
/// chunks of at most [`OUTPUT_CHUNK`] bytes, read from the store a chunk at a
/// time as the reader takes them: a level is never held whole.
fn stage_stream(source: StageSource, bucket: Option<u32>, held: HeldRead) -> ChunkStream {
    // Two chunks ahead of the reader at most.
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let listed = {
            let source = source.clone();
            tokio::task::spawn_blocking(move || source.pieces(bucket, &held)).await
        };
        let pieces = match listed {
            Ok(Ok(pieces)) => pieces,
            Ok(Err(e)) => {
                let _ = tx.send(Err(Status::from(e))).await;
                return;
            }
            Err(e) => {
                let e = CoordinatorError::Internal(format!("reading stage data: {e}"));
                let _ = tx.send(Err(Status::from(e))).await;
                return;
            }
        };
        let mut out = Vec::with_capacity(OUTPUT_CHUNK);
        for piece in pieces {
            let bytes = match piece {
                Piece::Bytes(bytes) => Ok(bytes),
                piece => {
                    let source = source.clone();
                    tokio::task::spawn_blocking(move || source.read(piece))
                        .await
                        .unwrap_or_else(|e| {
                            Err(CoordinatorError::Internal(format!(
                                "reading stage data: {e}"
                            )))
                        })
                }
            };
            let mut bytes = match bytes {
                Ok(bytes) => bytes,
                Err(e) => {
                    let _ = tx.send(Err(Status::from(e))).await;
                    return;
                }
            };
            // A whole chunk goes out as it is; framing and small outputs
            // are gathered into chunks.
            if out.is_empty() && bytes.len() == OUTPUT_CHUNK {
                if tx
                    .send(Ok(proto::StageDataChunk { data: bytes }))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            while !bytes.is_empty() {
                let room = OUTPUT_CHUNK - out.len();
                let rest = bytes.split_off(room.min(bytes.len()));
                out.extend_from_slice(&bytes);
                bytes = rest;
                if out.len() == OUTPUT_CHUNK {
                    let data = std::mem::replace(&mut out, Vec::with_capacity(OUTPUT_CHUNK));
                    if tx.send(Ok(proto::StageDataChunk { data })).await.is_err() {
                        return;
                    }
                }
            }
        }
        if !out.is_empty() {
            let _ = tx.send(Ok(proto::StageDataChunk { data: out })).await;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
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
        checkpoint_bytes: g.checkpoint_bytes,
        checkpoint_blob: g.checkpoint_blob.as_ref().map(proto::BlobRef::from),
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
    let mut parts = ReportParts {
        // Room for the announced output at once, not grown by copying; never
        // more than a report may hold, whatever the header says.
        output: Vec::with_capacity(header.output_bytes.min(MAX_REPORT_BYTES as u64) as usize),
        ..ReportParts::default()
    };
    while let Some(message) = stream.next().await {
        parts.add(message?.body)?;
    }
    if !parts.checkpoint_chunks.is_empty() {
        return Err(Status::invalid_argument(
            "checkpoint chunks without their checkpoint",
        ));
    }
    if !parts.output.is_empty() && parts.result.is_none() {
        return Err(Status::invalid_argument("stage output without a result"));
    }
    // The lease id is parsed once the stream has been read, so that a
    // malformed stream is refused as such whatever its header says.
    let lease: LeaseId = header.lease_id.parse().map_err(CoordinatorError::from)?;
    if parts.output_blob.is_some() && (parts.result.is_none() || !parts.output.is_empty()) {
        return Err(Status::invalid_argument(
            "a stage output blob comes with a result, instead of output chunks",
        ));
    }
    let mut report = Report {
        checkpoint: parts.checkpoint,
        output: parts.output,
        result: parts.result,
        failure: parts.failure,
        ..Report::new(header.worker_id, lease)
    };
    if let Some(blob) = parts.output_blob {
        report = report.with_output_blob(blob);
    }
    Ok((report, header.session))
}

/// The body of a report as it arrives.
#[derive(Default)]
struct ReportParts {
    checkpoint: Option<ReportedCheckpoint>,
    /// The state of the next checkpoint so far, from its chunks.
    checkpoint_chunks: Vec<u8>,
    output: Vec<u8>,
    output_blob: Option<BlobRef>,
    result: Option<ReportedResult>,
    failure: Option<ReportedFailure>,
}

impl ReportParts {
    /// Refuses a checkpoint state that would grow past [`MAX_CHECKPOINT_BYTES`].
    fn take_checkpoint_bytes(&self, more: usize) -> std::result::Result<(), Status> {
        if self.checkpoint_chunks.len() + more > MAX_CHECKPOINT_BYTES {
            return Err(Status::resource_exhausted(format!(
                "a checkpoint holds at most {MAX_CHECKPOINT_BYTES} bytes"
            )));
        }
        Ok(())
    }

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
            Some(Body::CheckpointChunk(c)) => {
                self.take_checkpoint_bytes(c.data.len())?;
                self.checkpoint_chunks.extend_from_slice(&c.data);
            }
            Some(Body::Checkpoint(c)) => {
                self.take_checkpoint_bytes(c.state.len())?;
                let mut state = std::mem::take(&mut self.checkpoint_chunks);
                if state.is_empty() {
                    state = c.state;
                } else {
                    state.extend_from_slice(&c.state);
                }
                let state_blob = c.state_blob.as_ref().map(blob_ref).transpose()?;
                if state_blob.is_some() && !state.is_empty() {
                    return Err(Status::invalid_argument(
                        "a checkpoint's state is inline or a blob, not both",
                    ));
                }
                self.checkpoint = Some(ReportedCheckpoint {
                    state,
                    partial: c.partial,
                    work_done: c.work_done,
                    state_blob,
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
            Some(Body::OutputBlob(blob)) => {
                if self.output_blob.is_some() {
                    return Err(Status::invalid_argument("a report has one output blob"));
                }
                self.output_blob = Some(blob_ref(&blob)?);
            }
            Some(Body::Result(r)) => {
                self.result = Some(ReportedResult {
                    partial: r.partial,
                    work_done: r.work_done,
                    compute_us: r.compute_us,
                })
            }
            Some(Body::Failure(f)) => {
                self.failure = Some(ReportedFailure {
                    message: f.message,
                    permanent: f.permanent,
                    handed_back: f.handed_back,
                    no_room: f.no_room,
                })
            }
        }
        Ok(())
    }
}

/// Reads the final reports of a `ReportBatch` call and hands them to the
/// intake; a report malformed on the wire is refused alone.
async fn receive_batch(
    shared: &Arc<Shared>,
    request: proto::ReportBatchRequest,
) -> std::result::Result<Vec<proto::ReportVerdict>, Status> {
    require_worker_id(&request.worker_id)?;
    if request.reports.len() > MAX_BATCH_REPORTS {
        return Err(Status::invalid_argument(format!(
            "a batch holds at most {MAX_BATCH_REPORTS} reports, got {}",
            request.reports.len()
        )));
    }
    let output: usize = request.reports.iter().map(|r| r.output.len()).sum();
    if output > MAX_BATCH_OUTPUT {
        return Err(Status::resource_exhausted(format!(
            "a batch holds at most {MAX_BATCH_OUTPUT} bytes of output, got {output}; \
             send large outputs through Report"
        )));
    }
    let worker = request.worker_id;
    let reports = request
        .reports
        .into_iter()
        .map(|batched| batched_report(&worker, batched))
        .collect();
    let answers = intake::take_batch(shared, worker, request.session, reports).await?;
    Ok(answers.into_iter().map(verdict).collect())
}

/// One report of a batch as the scheduler takes it: a lease id, and a result
/// (with its output) or a failure.
fn batched_report(
    worker: &str,
    batched: proto::BatchedReport,
) -> std::result::Result<Report, Status> {
    let lease: LeaseId = batched.lease_id.parse().map_err(CoordinatorError::from)?;
    let (result, failure) = match batched.ending {
        Some(proto::batched_report::Ending::Result(r)) => (
            Some(ReportedResult {
                partial: r.partial,
                work_done: r.work_done,
                compute_us: r.compute_us,
            }),
            None,
        ),
        Some(proto::batched_report::Ending::Failure(f)) => (
            None,
            Some(ReportedFailure {
                message: f.message,
                permanent: f.permanent,
                handed_back: f.handed_back,
                no_room: f.no_room,
            }),
        ),
        None => {
            return Err(Status::invalid_argument(
                "a batched report ends in a result or a failure",
            ));
        }
    };
    if !batched.output.is_empty() && result.is_none() {
        return Err(Status::invalid_argument("stage output without a result"));
    }
    let output_blob = batched.output_blob.as_ref().map(blob_ref).transpose()?;
    if output_blob.is_some() && (result.is_none() || !batched.output.is_empty()) {
        return Err(Status::invalid_argument(
            "a stage output blob comes with a result, instead of output bytes",
        ));
    }
    let report = Report {
        output: batched.output.into(),
        result,
        failure,
        ..Report::new(worker.to_string(), lease)
    };
    Ok(match output_blob {
        Some(blob) => report.with_output_blob(blob),
        None => report,
    })
}

/// A report's answer as the batch's response carries it.
fn verdict(answer: std::result::Result<ReportOutcome, Status>) -> proto::ReportVerdict {
    match answer {
        Ok(outcome) => proto::ReportVerdict {
            stop: outcome.stop,
            accepted: outcome.accepted,
            code: 0,
            message: String::new(),
        },
        Err(status) => proto::ReportVerdict {
            stop: false,
            accepted: false,
            code: status.code() as i32,
            message: status.message().to_string(),
        },
    }
}
