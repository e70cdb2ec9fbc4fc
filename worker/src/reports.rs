//! Reports to the coordinator: the checkpoints of a running shard, then the
//! final report of its attempt (result, failure or hand-back), retried until
//! the coordinator has it or refuses it for good.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tally_kinds::{Error as KindError, StageOutput};
use tally_stage::{StageStore, blob_key};
use tally_wire::deadline;
use tally_wire::lease::LeaseId;
use tally_wire::limits::{INLINE_CHECKPOINT_BYTES, MAX_CHECKPOINT_BYTES, OUTPUT_CHUNK};
use tally_wire::proto::{self, batched_report::Ending as BatchedEnding, report_message::Body};
use tokio::sync::mpsc;

use crate::backoff::Backoff;
use crate::batch;
use crate::context::{Context, ShardHandle};
use crate::error::WorkerError;

/// A resumable state of a running shard, encoded for the wire.
pub(crate) struct Checkpoint {
    /// The state, in memory or in a file of the shard's spill; empty when
    /// it is in the stage store.
    pub state: StageOutput,
    pub state_blob: Option<proto::BlobRef>,
    /// The encoded partial result the state stands for.
    pub partial: Vec<u8>,
    pub work_done: u64,
}

/// What a finished shard reports, encoded for the wire.
pub(crate) struct ShardResult {
    /// Stage data for the next stage, else empty.
    pub output: bytes::Bytes,
    /// The stage data in the stage store instead (`output` is then empty).
    pub output_blob: Option<proto::BlobRef>,
    /// The encoded partial result; empty when the output is all.
    pub partial: Vec<u8>,
    pub work_done: u64,
    /// Microseconds from the start of the computation to its end.
    pub compute_us: u64,
    /// What the attempt read, wrote and spilled (logged, not reported).
    pub io: ShardIo,
}

/// The bytes of stage data a shard attempt read (0 when its input was
/// cached) and wrote, and the bytes it spilled past its memory share.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ShardIo {
    pub read: u64,
    pub written: u64,
    pub spilled: u64,
}

/// How a shard attempt ended, for the final report.
pub(crate) enum Ending {
    Done(ShardResult),
    Failed {
        message: String,
        permanent: bool,
    },
    HandedBack,
    /// The worker had no room on disk for the shard's files: it waits to be
    /// tried again, and its job does not fail for it.
    NoRoom(String),
    /// The coordinator no longer wants the attempt: no final report.
    Stopped,
}

impl Ending {
    /// The ending of an attempt that computed `computed`; `revoked` tells a
    /// cancellation by the coordinator from one by the drain timeout, and
    /// `cancelled` whether either asked the shard to stop at all: a kernel
    /// that stops as cancelled when nothing asked it to has failed (handing
    /// it back would lease it again at once, for ever).
    pub(crate) fn of(
        computed: Result<ShardResult, WorkerError>,
        revoked: bool,
        cancelled: bool,
    ) -> Ending {
        match computed {
            Ok(result) => Ending::Done(result),
            Err(e) if e.is_cancelled() && revoked => Ending::Stopped,
            Err(e) if e.is_cancelled() && cancelled => Ending::HandedBack,
            Err(e) if e.is_cancelled() => Ending::Failed {
                message: "the shard stopped as cancelled, but nothing cancelled it".into(),
                permanent: false,
            },
            Err(WorkerError::Kernel(KindError::NoRoom(message))) => Ending::NoRoom(message),
            Err(
                WorkerError::Kernel(KindError::InvalidArgument(message))
                | WorkerError::Wire(tally_wire::Error::InvalidArgument(message)),
            ) => Ending::Failed {
                message,
                permanent: true,
            },
            Err(e) => Ending::Failed {
                message: e.to_string(),
                permanent: false,
            },
        }
    }

    /// The messages after the header; `None` for an attempt that sends none.
    fn body(self) -> Option<Vec<Body>> {
        Some(match self {
            Ending::Done(result) => {
                // Chunks are slices of one buffer: neither this nor a resend copies them.
                let output = result.output;
                let blob = result.output_blob.map(Body::OutputBlob);
                let mut messages: Vec<Body> = blob.into_iter().collect();
                messages.extend((0..output.len()).step_by(OUTPUT_CHUNK).map(|start| {
                    let end = (start + OUTPUT_CHUNK).min(output.len());
                    Body::Output(proto::OutputChunk {
                        data: output.slice(start..end),
                    })
                }));
                messages.push(Body::Result(proto::ReportResult {
                    partial: result.partial,
                    work_done: result.work_done,
                    compute_us: result.compute_us,
                }));
                messages
            }
            Ending::Failed { message, permanent } => vec![failure(message, permanent, false)],
            Ending::HandedBack => vec![failure("worker shutting down".into(), false, true)],
            Ending::NoRoom(message) => vec![Body::Failure(proto::ReportFailure {
                message,
                no_room: true,
                ..Default::default()
            })],
            Ending::Stopped => return None,
        })
    }
}

fn failure(message: String, permanent: bool, handed_back: bool) -> Body {
    Body::Failure(proto::ReportFailure {
        message,
        permanent,
        handed_back,
        no_room: false,
    })
}

fn message(body: Body) -> proto::ReportMessage {
    proto::ReportMessage { body: Some(body) }
}

/// The messages of a report after its header. A large checkpoint state goes
/// first in chunks, each copied out only when the stream sends it.
struct Messages {
    chunked: Vec<u8>,
    sent: usize,
    rest: std::vec::IntoIter<Body>,
}

impl From<Vec<Body>> for Messages {
    fn from(messages: Vec<Body>) -> Messages {
        Messages {
            chunked: Vec::new(),
            sent: 0,
            rest: messages.into_iter(),
        }
    }
}

impl Messages {
    /// The length of the output chunks among the messages.
    fn output_bytes(&self) -> u64 {
        let chunks = self.rest.as_slice().iter().map(|m| match m {
            Body::Output(chunk) => chunk.data.len() as u64,
            _ => 0,
        });
        chunks.sum()
    }

    /// About the bytes the messages carry, for the report's deadline.
    fn bytes(&self) -> u64 {
        let rest = self.rest.as_slice().iter().map(|m| match m {
            Body::Output(chunk) => chunk.data.len(),
            Body::Checkpoint(c) => c.state.len() + c.partial.len(),
            Body::Result(r) => r.partial.len(),
            _ => 0,
        });
        (self.chunked.len() - self.sent + rest.sum::<usize>()) as u64
    }
}

impl Iterator for Messages {
    type Item = Body;

    fn next(&mut self) -> Option<Body> {
        if self.sent < self.chunked.len() {
            let end = (self.sent + OUTPUT_CHUNK).min(self.chunked.len());
            let data = self.chunked[self.sent..end].to_vec();
            self.sent = end;
            return Some(Body::CheckpointChunk(proto::CheckpointChunk { data }));
        }
        self.rest.next()
    }
}

/// A checkpoint's messages: a state larger than one chunk goes in chunks.
/// The report of a checkpoint whose state is `state` (the checkpoint's own
/// read into memory, or none when it is in the stage store).
fn checkpoint_body(checkpoint: Checkpoint, state: Vec<u8>) -> Messages {
    let (chunked, state) = if state.len() > OUTPUT_CHUNK {
        (state, Vec::new())
    } else {
        (Vec::new(), state)
    };
    let last = Body::Checkpoint(proto::ReportCheckpoint {
        state,
        partial: checkpoint.partial,
        work_done: checkpoint.work_done,
        state_blob: checkpoint.state_blob,
    });
    Messages {
        chunked,
        ..Messages::from(vec![last])
    }
}

/// Sends one report of `lease_id`, its header then `body`, with the current
/// session; returns the coordinator's answer (`stop`, and `accepted` for a
/// result). A report refused for its session asks for a new registration
/// (and is sent again by the caller).
async fn send_report(
    ctx: &Context,
    lease_id: &str,
    body: Messages,
) -> Result<proto::ReportResponse, tonic::Status> {
    let session = ctx.session();
    let output_bytes = body.output_bytes();
    let bytes = body.bytes();
    let header = Body::Header(proto::ReportHeader {
        worker_id: ctx.config.worker_id.clone(),
        lease_id: lease_id.to_string(),
        session: session.clone(),
        output_bytes,
    });
    let stream = tokio_stream::iter(std::iter::once(header).chain(body).map(message));
    match ctx.coordinator.report(&ctx.stats, stream, bytes).await {
        Ok(response) => Ok(response),
        Err(status) => {
            if status.code() == tonic::Code::Unauthenticated {
                ctx.session_refused(&session);
            }
            Err(status)
        }
    }
}

/// Sends a final report in the next batch, or alone through `Report` when
/// its output is large or the coordinator does not take batches.
async fn send_final_report(
    ctx: &Arc<Context>,
    lease_id: &str,
    body: &[Body],
) -> Result<proto::ReportResponse, tonic::Status> {
    if !ctx.batching_refused.load(Ordering::Relaxed)
        && let Some(report) = batched(lease_id, body)
    {
        match batch::send(ctx, report).await {
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                tracing::info!("the coordinator takes no report batches; reporting one by one");
                ctx.batching_refused.store(true, Ordering::Relaxed);
            }
            answer => return answer,
        }
    }
    send_report(ctx, lease_id, body.to_vec().into()).await
}

/// A final report's body as one report of a batch; `None` when its output
/// is too large for one.
fn batched(lease_id: &str, body: &[Body]) -> Option<proto::BatchedReport> {
    let mut report = proto::BatchedReport {
        lease_id: lease_id.to_string(),
        ..Default::default()
    };
    for message in body {
        match message {
            Body::Output(chunk) => {
                if report.output.len() + chunk.data.len() > batch::MAX_BATCHED_OUTPUT {
                    return None;
                }
                // One chunk (an output below a chunk, as every batched one
                // is) is shared, not copied.
                report.output = match report.output.is_empty() {
                    true => chunk.data.clone(),
                    false => [&report.output[..], &chunk.data[..]].concat().into(),
                };
            }
            Body::OutputBlob(blob) => report.output_blob = Some(blob.clone()),
            Body::Result(r) => report.ending = Some(BatchedEnding::Result(r.clone())),
            Body::Failure(f) => report.ending = Some(BatchedEnding::Failure(f.clone())),
            Body::Header(_) | Body::Checkpoint(_) | Body::CheckpointChunk(_) => return None,
        }
    }
    report.ending.is_some().then_some(report)
}

/// The coordinator refused the report for good: the attempt is stale, the job or
/// shard is unknown, or the report is malformed. (A refused session is not a
/// refusal of the report: the worker registers again and resends it.)
fn is_refusal(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::FailedPrecondition | tonic::Code::NotFound | tonic::Code::InvalidArgument
    )
}

/// What sends a shard's checkpoints as they come, each once (the caller
/// runs it beside the shard's computation, in the shard's own task: a task of
/// its own would cost every short shard a spawn and a wake-up): a
/// lost checkpoint only costs recomputation after a crash. Of the checkpoints
/// that wait while one is sent, only the newest is sent next (the others are
/// dropped: a large one is a copy of the shard's whole state). A refusal, or
/// the coordinator's `stop`, revokes the shard. It ends when the sender
/// is dropped and the newest checkpoint is sent.
pub(crate) fn forward_checkpoints(
    ctx: Arc<Context>,
    lease_id: String,
    handle: Arc<ShardHandle>,
) -> (
    mpsc::UnboundedSender<Checkpoint>,
    impl Future<Output = ()> + Send,
) {
    let (sender, mut checkpoints) = mpsc::unbounded_channel::<Checkpoint>();
    let forwarder = async move {
        let mut uploaded = 0;
        let mut handing_back = false;
        while let Some(mut checkpoint) = checkpoints.recv().await {
            while let Ok(newer) = checkpoints.try_recv() {
                checkpoint = newer;
            }
            if checkpoint.state.len() > INLINE_CHECKPOINT_BYTES as u64
                && let Ok(Some(store)) = ctx.stage_store()
            {
                uploaded += 1;
                let name = tally_stage::checkpoint_blob_name(uploaded);
                if let Err(e) =
                    to_stage_store(&store, &lease_id, &name, &mut checkpoint, &handle).await
                {
                    // Only a checkpoint: the shard goes on, and the next one may get through.
                    tracing::warn!(lease = %lease_id, error = %e, "checkpoint not written to the stage store");
                    continue;
                }
            }
            // In memory for the report: read from its file only where there
            // is no stage store to send it to.
            let state = match std::mem::take(&mut checkpoint.state) {
                StageOutput::Bytes(bytes) => bytes,
                StageOutput::Stored(stored) if stored.len() > MAX_CHECKPOINT_BYTES as u64 => {
                    tracing::debug!(lease = %lease_id, bytes = stored.len(), "checkpoint larger than a report carries, and no stage store: not sent");
                    continue;
                }
                StageOutput::Stored(stored) => {
                    let read =
                        tokio::task::spawn_blocking(move || stored.read_range(0..stored.len()))
                            .await
                            .map_err(|e| KindError::Internal(e.to_string()))
                            .and_then(|read| read);
                    match read {
                        Ok(bytes) => bytes,
                        Err(e) => {
                            tracing::warn!(lease = %lease_id, error = %e, "checkpoint not read from the spill");
                            continue;
                        }
                    }
                }
            };
            match send_report(&ctx, &lease_id, checkpoint_body(checkpoint, state)).await {
                Ok(answer) if answer.stop => handle.revoke(),
                // Asked for while draining: the work is at the coordinator,
                // so the shard stops and its lease goes back, to resume there.
                // Said once a lease: a kernel may deliver a few more
                // before it sees that it is stopped.
                Ok(_) if handle.control.checkpoint_asked() => {
                    if !std::mem::replace(&mut handing_back, true) {
                        tracing::info!(lease = %lease_id, "checkpoint delivered while draining; handing the lease back");
                    }
                    handle.cancel();
                }
                Ok(_) => {}
                Err(status) if is_refusal(&status) => {
                    tracing::info!(lease = %lease_id, reason = %status.message(), "checkpoint refused; stopping");
                    handle.revoke();
                }
                Err(status) => {
                    tracing::debug!(error = %status.message(), "checkpoint not delivered")
                }
            }
        }
    };
    (sender, forwarder)
}

/// Writes a checkpoint's state to the stage store as `name` of its attempt,
/// leaving its reference in its place; on failure the state is gone (the
/// caller drops such a checkpoint: the next may get through).
async fn to_stage_store(
    store: &StageStore,
    lease_id: &str,
    name: &str,
    checkpoint: &mut Checkpoint,
    handle: &ShardHandle,
) -> Result<(), WorkerError> {
    let lease: LeaseId = lease_id.parse()?;
    let key = blob_key(&lease, name);
    // Handed over, not copied: a hex pass vector is gigabytes (and sent
    // from its file when the shard wrote it to one).
    let blob = match std::mem::take(&mut checkpoint.state) {
        StageOutput::Bytes(state) => store.put(&key, state, &handle.control).await?,
        StageOutput::Stored(state) => store.put_stored(&key, state, &handle.control).await?,
    };
    checkpoint.state_blob = Some(proto::BlobRef::from(&blob));
    Ok(())
}

/// Sends the final report of an attempt, retrying while the coordinator does
/// not answer, until it is accepted or refused for good, or until
/// [`deadline::WORKER_PATIENCE`] has passed without an answer: the lease
/// has then expired at the coordinator, which leases the shard again.
pub(crate) async fn deliver_final_report(ctx: &Arc<Context>, lease_id: &str, ending: Ending) {
    let Some(body) = ending.body() else { return };
    let mut is_result = body.iter().any(|m| matches!(m, Body::Result(_)));
    let mut body = body;
    let mut backoff = Backoff::new();
    let started = tokio::time::Instant::now();
    loop {
        match send_final_report(ctx, lease_id, &body).await {
            Ok(answer) => {
                if is_result && answer.accepted {
                    // The coordinator has stored the result: the chaos tests
                    // check from this line that an accepted shard is never
                    // computed again.
                    tracing::info!(lease = %lease_id, stop = answer.stop, "result accepted");
                } else if is_result {
                    tracing::info!(lease = %lease_id, "result not needed: the job has finished or the attempt was counted");
                }
                return;
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument && is_result => {
                // The coordinator found the result malformed: say so as a failed
                // attempt, so the shard is retried now rather than at lease expiry.
                tracing::warn!(lease = %lease_id, reason = %status.message(), "result refused as malformed");
                let message = format!("result refused: {}", status.message());
                body = vec![failure(message, false, false)];
                is_result = false;
            }
            Err(status) if is_refusal(&status) => {
                tracing::info!(lease = %lease_id, reason = %status.message(), "report refused");
                return;
            }
            Err(status) if started.elapsed() >= deadline::WORKER_PATIENCE => {
                tracing::error!(
                    lease = %lease_id,
                    error = %status.message(),
                    "report not delivered within {}; giving it up (its lease expires at the coordinator)",
                    deadline::seconds(deadline::WORKER_PATIENCE)
                );
                return;
            }
            Err(status) => {
                // A coordinator that does not answer is said once (see `calls`).
                match deadline::not_answered(&status) {
                    true => {
                        tracing::debug!(lease = %lease_id, error = %status.message(), "report not answered; retrying")
                    }
                    false => {
                        tracing::warn!(lease = %lease_id, error = %status.message(), "report not delivered; retrying")
                    }
                }
                backoff.wait().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{self, Answers, Logs, wait_until};
    use std::time::Duration;

    /// A kernel asked for a checkpoint by a drain may deliver a few before
    /// it sees that it is stopped: the hand-back is said once.
    #[tokio::test]
    async fn a_checkpoint_delivered_while_draining_is_said_once_a_lease() {
        let logs = Logs::capture();
        let (url, calls) = test_support::serve(Answers::RegistrationsAndReports).await;
        let (ctx, _spill) = test_support::context(&url);
        let lease = "job-000001/0/0/1";
        let handle = ctx.track(lease, Duration::from_secs(60));
        handle.control.ask_checkpoint();
        let (checkpoints, forwarder) =
            forward_checkpoints(ctx.clone(), lease.into(), handle.clone());
        let forwarder = tokio::spawn(forwarder);
        for sent in 1..=3 {
            let checkpoint = Checkpoint {
                state: StageOutput::Bytes(vec![sent as u8; 16]),
                state_blob: None,
                partial: Vec::new(),
                work_done: sent,
            };
            checkpoints.send(checkpoint).unwrap();
            let reported = || calls.started("report") >= sent as usize;
            wait_until(Duration::from_secs(60), "the checkpoint reported", reported).await;
        }
        drop(checkpoints);
        forwarder.await.unwrap();
        assert!(handle.control.is_cancelled(), "the shard is stopped");
        assert_eq!(logs.count("checkpoint delivered while draining"), 1);
    }

    fn cancelled() -> Result<ShardResult, WorkerError> {
        Err(WorkerError::Kernel(KindError::Cancelled))
    }

    #[test]
    fn a_cancellation_nothing_asked_for_is_a_failure_not_a_hand_back() {
        assert!(matches!(
            Ending::of(cancelled(), true, true),
            Ending::Stopped
        ));
        assert!(matches!(
            Ending::of(cancelled(), false, true),
            Ending::HandedBack
        ));
        match Ending::of(cancelled(), false, false) {
            Ending::Failed { message, permanent } => {
                assert!(!permanent);
                assert!(message.contains("nothing cancelled it"), "{message}");
            }
            _ => panic!("an unasked cancellation was not a failure"),
        }
    }
}
