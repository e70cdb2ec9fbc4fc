//! Shard execution: a lease's job and task decoded, the previous stage's output
//! fetched when the shard needs it (`stage_input`), and the kernel run on the
//! compute pool while its checkpoints stream out (`kernel`). The worker's only
//! calls into the kind layer (`ValidSpec`) are here, in this module and its
//! two children.

mod kernel;
mod stage_input;

use std::sync::Arc;

use futures::StreamExt;
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::EncodedTask;
use tally_kinds::{Error as KindError, StageOutput, Stored};
use tally_stage::store::PARALLEL_READS;
use tally_stage::{BlobRef, StageError, StageStore, blob_key};
use tally_wire::lease::LeaseId;
use tally_wire::limits::INLINE_CHECKPOINT_BYTES;
use tally_wire::proto;

use crate::budget::READ_PIECE;
use crate::context::{Context, ShardHandle};
use crate::error::{Result, WorkerError};
use crate::fetch::{fetch_attachment, fetch_checkpoint};
use crate::reports::{self, ShardIo, ShardResult};
use kernel::{Kernel, computed, output_in_memory};
use stage_input::ReadContext;

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
        .ok_or_else(|| KindError::InvalidArgument("the lease carries no job spec".into()))?;
    let spec = ValidSpec::try_from(spec_proto)?;
    let task = EncodedTask::from_bytes(&lease.task)?;
    if let Some(limit) = ctx.config.die_above_bytes
        && spec
            .stage_estimate(lease.stage)
            .is_some_and(|e| e.smallest_worker_bytes() > limit)
    {
        tracing::error!(lease = %lease.lease_id, "fault injection: the shard needs more memory than the worker has; aborting");
        std::process::abort();
    }
    if !ctx.config.shard_delay.is_zero() {
        tokio::time::sleep(ctx.config.shard_delay).await;
    }
    for sha256 in spec.attachments() {
        fetch_attachment(ctx, &sha256, &handle.control).await?;
    }
    let stage_store = ctx.stage_store()?;
    let reads = spec.stage_reads(lease.stage, &task)?;
    let (input, read) = if reads.is_empty() {
        (None, 0)
    } else {
        let reader = ReadContext {
            ctx,
            spec: &spec,
            job: &lease.job_id,
            handle,
            store: stage_store.as_ref(),
            depth: 0,
        };
        let (input, read) = reader.stage_input(reads).await?;
        (Some(input), read)
    };
    let checkpoint = if let Some(blob) = &lease.checkpoint_blob {
        let store = stage_store.as_ref().ok_or_else(|| {
            StageError::InvalidConfig("a checkpoint blob, and no stage store to read it".into())
        })?;
        checkpoint_from_store(ctx, store, blob, &lease.lease_id, &handle.control).await?
    } else if lease.checkpoint_bytes > 0 && lease.checkpoint.is_empty() {
        let mut into = ctx.spill.gathering(Some(INLINE_CHECKPOINT_BYTES as u64));
        fetch_checkpoint(
            ctx,
            &lease.lease_id,
            lease.checkpoint_bytes,
            &handle.control,
            &mut into,
        )
        .await?;
        into.finish()?.0
    } else {
        Arc::new(lease.checkpoint.clone())
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
        memory_share: ctx.memory_share(),
        spill: ctx.spill.attempt(),
    };
    // The forwarder ends once the kernel has dropped its sender and the last
    // checkpoint is sent.
    let computing = computed(ctx.pool.run(move || kernel.run(checkpoints)));
    let (computed, ()) = tokio::join!(computing, forwarder);
    let (mut outcome, spilled) = computed?;
    // Logged with the shard's other bytes when it finishes (`ShardIo`).
    ctx.stats.spilled_bytes.add(spilled);
    if ctx.config.corrupt_results {
        spec.fault_injection()
            .corrupt_for_testing(&mut outcome.partial)?;
    }
    let written = outcome.output.len();
    let io = ShardIo {
        read,
        written,
        spilled,
    };
    if let StageOutput::Stored(_) = &outcome.output {
        ctx.stats.output_in_files_bytes.add(written);
    }
    // With a stage store, the output goes there under this attempt's own key,
    // unless the coordinator takes it inline: a small one costs less there.
    let (output, output_blob) = match (stage_store, outcome.output) {
        (Some(store), output) if !output.is_empty() && !goes_inline(ctx, &output) => {
            let lease_id: LeaseId = lease.lease_id.parse()?;
            let key = blob_key(&lease_id, "output");
            let blob = match output {
                StageOutput::Bytes(bytes) => store.put(&key, bytes, &handle.control).await?,
                StageOutput::Stored(stored) => {
                    store.put_stored(&key, stored, &handle.control).await?
                }
            };
            (bytes::Bytes::new(), Some(proto::BlobRef::from(&blob)))
        }
        (store, output) => {
            let output = bytes::Bytes::from(output_in_memory(output).await?);
            // Inline beside a stage store: kept for the next stage's input
            // (the same buffer as the report's).
            if store.is_some() && !output.is_empty() {
                let lease_id: LeaseId = lease.lease_id.parse()?;
                ctx.own_outputs.lock().keep(
                    &lease_id.job,
                    lease_id.stage,
                    lease_id.index,
                    output.clone(),
                );
            }
            (output, None)
        }
    };
    Ok(ShardResult {
        output,
        output_blob,
        partial: outcome.partial.to_bytes(),
        work_done: outcome.work_done,
        // Set by the attempt, which times the whole computation.
        compute_us: 0,
        io,
    })
}

/// Whether a shard's output goes inline to a coordinator with a stage store:
/// small enough for it, and not one it could take for a reference.
fn goes_inline(ctx: &Context, output: &StageOutput) -> bool {
    match output {
        StageOutput::Bytes(bytes) => {
            ctx.takes_inline(bytes.len() as u64) && !BlobRef::is_encoded(bytes)
        }
        // Written to a file: too large to go inline.
        StageOutput::Stored(_) => false,
    }
}

/// The checkpoint of a lease in the stage store, read in pieces (each
/// checked) a few at a time; one larger than a report's checkpoint goes to a
/// file of the spill directory instead of memory (a hex pass vector is
/// gigabytes: the shard holds its own vector, not a copy of it besides). One
/// that is missing or fails its checks is refused: the shard starts from the
/// beginning.
async fn checkpoint_from_store(
    ctx: &Context,
    store: &StageStore,
    blob: &proto::BlobRef,
    lease_id: &str,
    control: &tally_kinds::Control,
) -> Result<Arc<dyn Stored>> {
    let blob = BlobRef::try_from(blob)?;
    let mut into = ctx.spill.gathering(Some(INLINE_CHECKPOINT_BYTES as u64));
    let read = async {
        let (index, range) = store.locate(&blob, None, control).await?;
        let pieces: Vec<_> = (range.start..range.end)
            .step_by(READ_PIECE as usize)
            .map(|at| store.read_range(&blob, &index, at..range.end.min(at + READ_PIECE), control))
            .collect();
        let mut pieces = futures::stream::iter(pieces).buffered(PARALLEL_READS);
        while let Some(piece) = pieces.next().await {
            into.push(&piece?)?;
        }
        Ok::<_, WorkerError>(())
    };
    match read.await {
        Ok(()) => {
            let (state, in_file) = into.finish()?;
            tracing::info!(lease = %lease_id, in_file, bytes = state.len(), "checkpoint read from the stage store; resuming from it");
            Ok(state)
        }
        Err(WorkerError::Stage(e @ StageError::Corrupt { .. })) => {
            tracing::warn!(lease = %lease_id, error = %e, "checkpoint refused; computing the shard from the beginning");
            Ok(Arc::new(Vec::new()))
        }
        Err(e) => Err(e),
    }
}
