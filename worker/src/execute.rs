//! Shard execution: a lease's job and task decoded, the previous stage's output
//! fetched when the shard needs it, and the kernel run on the compute pool while
//! its checkpoints stream out. The worker's only calls into the kind layer
//! (`ValidSpec`) are here.

use std::sync::Arc;
use std::time::Duration;

use tally_common::cache::KernelCache;
use tally_common::dynamic::{ShardContext, StageInput};
use tally_common::kind::StageRead;
use tally_common::proto;
use tally_common::spec::ValidSpec;
use tally_common::values::{EncodedTask, ShardEvent, ShardOutcome};
use tally_common::wire::MAX_CHECKPOINT_BYTES;
use tally_common::{Error as CommonError, Result as CommonResult};
use tokio::sync::{mpsc, oneshot};

use crate::backoff::Backoff;
use crate::context::{Context, ShardHandle};
use crate::error::Result;
use crate::reports::{self, Checkpoint, ShardResult};

/// Computes the shard of `lease`: its checkpoints are sent while it runs, and
/// all of them before this returns its result.
pub(crate) async fn compute_shard(
    ctx: &Arc<Context>,
    lease: &proto::ShardLease,
    handle: &Arc<ShardHandle>,
) -> Result<ShardResult> {
    let spec_proto = lease
        .spec
        .as_ref()
        .ok_or_else(|| CommonError::InvalidArgument("the lease carries no job spec".into()))?;
    let spec = ValidSpec::try_from(spec_proto)?;
    let task = EncodedTask::from_bytes(&lease.task)?;
    if !ctx.config.shard_delay.is_zero() {
        tokio::time::sleep(ctx.config.shard_delay).await;
    }
    let reads = spec.stage_reads(lease.stage, &task)?;
    let input = if reads.is_empty() {
        None
    } else {
        Some(stage_input(ctx, &spec, &lease.job_id, reads, &handle.control).await?)
    };
    let checkpoint = if lease.checkpoint_bytes > 0 && lease.checkpoint.is_empty() {
        fetch_checkpoint(
            ctx,
            &lease.lease_id,
            lease.checkpoint_bytes,
            &handle.control,
        )
        .await?
    } else {
        lease.checkpoint.clone()
    };
    let (checkpoints, forwarder) =
        reports::forward_checkpoints(ctx.clone(), lease.lease_id.clone(), handle.clone());
    let kernel = Kernel {
        spec: spec.clone(),
        task,
        input,
        checkpoint,
        cache: ctx.config.kernel_cache.clone(),
        handle: handle.clone(),
        checkpoint_every: ctx.config.checkpoint_interval,
        pause_after_checkpoint: ctx.config.pause_after_checkpoint,
    };
    let mut outcome = computed(ctx.pool.run(move || kernel.run(checkpoints))).await?;
    let _ = forwarder.await;
    if ctx.config.corrupt_results {
        spec.corrupt_for_testing(&mut outcome.partial)?;
    }
    Ok(ShardResult {
        output: outcome.output,
        partial: outcome.partial.to_bytes(),
        work_done: outcome.work_done,
    })
}

/// One shard's kernel call, with all it needs, for a compute thread.
struct Kernel {
    spec: ValidSpec,
    task: EncodedTask,
    input: Option<StageInput>,
    /// The last accepted checkpoint of an earlier attempt, or empty.
    checkpoint: Vec<u8>,
    cache: Arc<KernelCache>,
    handle: Arc<ShardHandle>,
    checkpoint_every: Duration,
    /// Fault injection: see `WorkerConfig::pause_after_checkpoint`.
    pause_after_checkpoint: Duration,
}

impl Kernel {
    /// Runs the kernel on this thread, sending its checkpoints to `checkpoints`.
    fn run(self, checkpoints: mpsc::UnboundedSender<Checkpoint>) -> CommonResult<ShardOutcome> {
        let mut paused = false;
        let mut on_event = |event: ShardEvent| {
            let ShardEvent {
                state,
                partial,
                work_done,
            } = event;
            let _ = checkpoints.send(Checkpoint {
                state,
                partial: partial.map(|p| p.to_bytes()).unwrap_or_default(),
                work_done,
            });
            if !self.pause_after_checkpoint.is_zero() && !paused {
                paused = true;
                std::thread::sleep(self.pause_after_checkpoint);
            }
        };
        self.spec.execute(
            &self.task,
            ShardContext {
                input: self.input.as_ref(),
                checkpoint: &self.checkpoint,
                cache: &self.cache,
                control: &self.handle.control,
                checkpoint_every: self.checkpoint_every,
                on_event: &mut on_event,
            },
        )
    }
}

/// The value a compute thread sends back.
async fn computed<T>(receiver: oneshot::Receiver<CommonResult<T>>) -> Result<T> {
    let result = receiver
        .await
        .map_err(|_| CommonError::Internal("the compute thread stopped".into()))?;
    Ok(result?)
}

/// The stage outputs a shard reads (each merged, or one bucket of it),
/// fetched and decoded once per worker, job and reads, and shared by the
/// shards that read the same. Retries while the coordinator is unreachable,
/// until the shard is stopped (its lease revoked, or the worker draining).
async fn stage_input(
    ctx: &Context,
    spec: &ValidSpec,
    job: &str,
    reads: Vec<StageRead>,
    control: &tally_common::Control,
) -> Result<StageInput> {
    let mut cached = ctx.stage_cache.lock().await;
    if let Some(((j, r), data)) = cached.as_ref()
        && j == job
        && *r == reads
    {
        return Ok(data.clone());
    }
    let mut parts = Vec::with_capacity(reads.len());
    for read in &reads {
        let bytes = with_retries(ctx, control, "stage data", |session| {
            fetch_stage(ctx, job, read.stage, read.bucket, session)
        })
        .await?;
        parts.push(bytes);
    }
    let spec = spec.clone();
    let decoded = ctx.pool.run(move || {
        let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        spec.decode_stage_inputs(&slices)
    });
    let data = computed(decoded).await?;
    *cached = Some(((job.to_string(), reads), data.clone()));
    Ok(data)
}

/// The checkpoint a lease starts from when it was too large to come with the
/// lease: fetched in chunks, retried as stage data is. The size the lease
/// announced bounds what is read.
async fn fetch_checkpoint(
    ctx: &Context,
    lease_id: &str,
    announced: u64,
    control: &tally_common::Control,
) -> Result<Vec<u8>> {
    let data = with_retries(ctx, control, "checkpoint", |session| async move {
        let request = proto::FetchCheckpointRequest {
            worker_id: ctx.config.worker_id.clone(),
            session,
            lease_id: lease_id.to_string(),
        };
        let mut stream = ctx.client().fetch_checkpoint(request).await?.into_inner();
        let mut data = Vec::with_capacity(announced.min(MAX_CHECKPOINT_BYTES as u64) as usize);
        while let Some(chunk) = stream.message().await? {
            if (data.len() + chunk.data.len()) as u64 > announced {
                return Err(tonic::Status::data_loss(format!(
                    "the checkpoint of {lease_id} is longer than the {announced} bytes announced"
                )));
            }
            data.extend_from_slice(&chunk.data);
        }
        Ok(data)
    })
    .await?;
    if data.len() as u64 != announced {
        return Err(tonic::Status::data_loss(format!(
            "the checkpoint of {lease_id} has {} bytes, {announced} announced",
            data.len()
        ))
        .into());
    }
    tracing::info!(lease = %lease_id, bytes = announced, "checkpoint fetched; resuming from it");
    Ok(data)
}

/// `fetch` with the current session, until it answers: while the coordinator
/// is unreachable, or has forgotten the session (the worker then registers
/// again), it waits with backoff and tries again, until the shard is stopped.
/// `what` names the data in the log.
async fn with_retries<T, F, Fut>(
    ctx: &Context,
    control: &tally_common::Control,
    what: &str,
    mut fetch: F,
) -> Result<T>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
{
    let mut backoff = Backoff::new();
    loop {
        control.check()?;
        let session = ctx.session();
        match fetch(session.clone()).await {
            Ok(value) => return Ok(value),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                tracing::warn!(error = %status.message(), "{what} fetch failed; retrying");
                backoff.wait().await;
            }
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                tracing::info!(error = %status.message(), "{what} fetch refused; registering again");
                ctx.session_refused(&session);
                backoff.wait().await;
            }
            Err(status) => return Err(status.into()),
        }
    }
}

/// The raw output of `stage` (or one bucket of it), in one call with
/// `session`.
async fn fetch_stage(
    ctx: &Context,
    job: &str,
    stage: u32,
    bucket: Option<u32>,
    session: String,
) -> std::result::Result<Vec<u8>, tonic::Status> {
    let request = proto::FetchStageDataRequest {
        job_id: job.to_string(),
        stage,
        worker_id: ctx.config.worker_id.clone(),
        session,
        bucket,
    };
    let mut stream = ctx.client().fetch_stage_data(request).await?.into_inner();
    let mut data = Vec::new();
    while let Some(chunk) = stream.message().await? {
        data.extend_from_slice(&chunk.data);
    }
    Ok(data)
}
