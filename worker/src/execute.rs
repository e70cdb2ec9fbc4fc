//! Shard execution: a lease's job and task decoded, the previous stage's output
//! fetched when the shard needs it, and the kernel run on the compute pool while
//! its checkpoints stream out. The worker's only calls into the kind layer
//! (`ValidSpec`) are here.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tally_kinds::cache::KernelCache;
use tally_kinds::dynamic::{ShardContext, StageInput};
use tally_kinds::kind::StageRead;
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::{EncodedTask, ShardEvent, ShardOutcome};
use tally_kinds::{Error as KindError, Result as KindResult, Room, Spill, StageOutput, Stored};
use tally_stage::store::PARALLEL_READS;
use tally_stage::{BlobRef, StageError, StageStore, blob_key};
use tally_wire::lease::LeaseId;
use tally_wire::limits::{INLINE_CHECKPOINT_BYTES, MAX_REPORT_OUTPUT_BYTES};
use tally_wire::proto;
use tokio::sync::{mpsc, oneshot};

use crate::budget::READ_PIECE;
use crate::context::{Context, ShardHandle};
use crate::error::{Result, WorkerError};
use crate::fetch::{fetch_attachment, fetch_checkpoint, fetch_stage, with_retries};
use crate::held::{bucket_of_output, fetch_held, own_copies, own_packed_copies, push_own_output};
use crate::reports::{self, Checkpoint, ShardIo, ShardResult};
use crate::spill::{FileSpill, Gathering};

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
        let (input, read) = stage_input(ctx, &spec, &lease.job_id, reads, handle).await?;
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

/// A shard's output for a report to a coordinator that keeps stage data:
/// read from its file if it was written to one, up to what a report holds.
async fn output_in_memory(output: StageOutput) -> Result<Vec<u8>> {
    let stored = match output {
        StageOutput::Bytes(bytes) => return Ok(bytes),
        StageOutput::Stored(stored) => stored,
    };
    if stored.len() > MAX_REPORT_OUTPUT_BYTES as u64 {
        return Err(KindError::InvalidArgument(format!(
            "a shard's output of {} bytes is more than the {MAX_REPORT_OUTPUT_BYTES} a report \
             carries to a coordinator that keeps stage data itself; give the coordinator a \
             --stage-store",
            stored.len()
        ))
        .into());
    }
    tokio::task::spawn_blocking(move || stored.read_range(0..stored.len()))
        .await
        .map_err(|e| KindError::Internal(format!("reading a shard's output: {e}")))?
        .map_err(Into::into)
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

/// One shard's kernel call, with all it needs, for a compute thread.
struct Kernel {
    spec: ValidSpec,
    task: EncodedTask,
    input: Option<StageInput>,
    /// The last accepted checkpoint of an earlier attempt, or empty.
    checkpoint: Arc<dyn Stored>,
    cache: Arc<KernelCache>,
    handle: Arc<ShardHandle>,
    checkpoint_every: Duration,
    /// Fault injection: see `WorkerConfig::pause_after_checkpoint`.
    pause_after_checkpoint: Duration,
    /// The shard's part of the worker's memory budget, and where it spills
    /// past it (removed when the kernel returns).
    memory_share: u64,
    spill: FileSpill,
}

impl Kernel {
    /// Runs the kernel on this thread, sending its checkpoints to
    /// `checkpoints`: its outcome and the bytes it spilled.
    fn run(
        mut self,
        checkpoints: mpsc::UnboundedSender<Checkpoint>,
    ) -> KindResult<(ShardOutcome, u64)> {
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
                state_blob: None,
            });
            if !self.pause_after_checkpoint.is_zero() && !paused {
                paused = true;
                std::thread::sleep(self.pause_after_checkpoint);
            }
        };
        let outcome = self.spec.execute(
            &self.task,
            ShardContext {
                input: self.input.as_ref(),
                checkpoint: &*self.checkpoint,
                cache: &self.cache,
                control: &self.handle.control,
                checkpoint_every: self.checkpoint_every,
                on_event: &mut on_event,
                room: Some(Room {
                    memory: self.memory_share,
                    spill: &mut self.spill,
                }),
            },
        )?;
        // The output written to the spill is counted as written, not spilled.
        let output_in_file = match &outcome.output {
            StageOutput::Stored(stored) => stored.len(),
            StageOutput::Bytes(_) => 0,
        };
        Ok((outcome, self.spill.bytes_written() - output_in_file))
    }
}

/// The value a compute thread sends back.
async fn computed<T>(receiver: oneshot::Receiver<KindResult<T>>) -> Result<T> {
    let result = receiver
        .await
        .map_err(|_| KindError::Internal("the compute thread stopped".into()))?;
    Ok(result?)
}

/// The stage outputs a shard reads (each merged, or one bucket of it),
/// fetched and decoded once per worker, job and reads, and shared by the
/// shards that read the same (unless they were kept in a file: see
/// [`fetch_stage_input`]). Retries while the coordinator is unreachable,
/// until the shard is stopped (its lease revoked, or the worker draining).
async fn stage_input(
    ctx: &Context,
    spec: &ValidSpec,
    job: &str,
    reads: Vec<StageRead>,
    handle: &Arc<ShardHandle>,
) -> Result<(StageInput, u64)> {
    let mut cached = ctx.stage_cache.lock().await;
    if let Some(((j, r), data)) = cached.as_ref()
        && j == job
        && *r == reads
    {
        return Ok((data.clone(), 0));
    }
    let (data, in_files, read) = fetch_stage_input(ctx, spec, job, &reads, handle, 0).await?;
    // An input in files is one shard's (a bucket of a level): kept no longer
    // than that shard needs it.
    *cached = match in_files {
        false => Some(((job.to_string(), reads), data.clone())),
        true => None,
    };
    Ok((data, read))
}

/// [`stage_input`] without the cache. `depth` counts the shards being
/// computed again on the way (see [`recompute_output`]). Read as it arrives,
/// in pieces: for a kind that reads its input as a stream, a part past what
/// the kind keeps in memory (a quarter of the shard's memory share, unless it
/// says less) goes to a file in the spill directory instead of memory (and
/// whether one did is returned, with the bytes read).
async fn fetch_stage_input(
    ctx: &Context,
    spec: &ValidSpec,
    job: &str,
    reads: &[StageRead],
    handle: &Arc<ShardHandle>,
    depth: u32,
) -> Result<(StageInput, bool, u64)> {
    let control = &handle.control;
    let store = ctx.stage_store()?;
    let in_memory = spec.stage_input_memory(ctx.memory_share());
    let mut parts = Vec::with_capacity(reads.len());
    let mut in_files = false;
    for read in reads {
        let mut into = ctx.spill.gathering(in_memory);
        match &store {
            None => {
                let into = std::sync::Mutex::new(&mut into);
                with_retries(ctx, control, "stage data", |session| {
                    fetch_stage(ctx, job, read, session, &into, None)
                })
                .await??;
            }
            Some(store) => {
                read_from_store(ctx, store, spec, job, read, handle, depth, &mut into).await?
            }
        };
        let (part, in_file) = into.finish()?;
        if in_file {
            ctx.stats.input_in_files_bytes.add(part.len());
        }
        in_files |= in_file;
        parts.push(part);
    }
    let read = parts.iter().map(|p| p.len()).sum();
    let spec = spec.clone();
    let decoded = ctx.pool.run(move || spec.decode_stored_inputs(parts));
    Ok((computed(decoded).await?, in_files, read))
}

/// One read of stage data from the stage store, into `into`: the blobs the
/// coordinator names for the stage, each whole (merged in order) or bucket
/// `q` of each (framed as `tally_kernels::buckets` gathers it), read in
/// pieces a few at a time and in order, with the outputs the coordinator
/// holds itself in their places. A blob that is missing or fails its digest
/// is computed again from its shard.
#[allow(clippy::too_many_arguments)]
async fn read_from_store(
    ctx: &Context,
    store: &StageStore,
    spec: &ValidSpec,
    job: &str,
    read: &StageRead,
    handle: &Arc<ShardHandle>,
    depth: u32,
    into: &mut Gathering,
) -> Result<()> {
    let control = &handle.control;
    let listed = with_retries(ctx, control, "stage blobs", |session| async move {
        let request = proto::StageBlobsRequest {
            job_id: job.to_string(),
            stage: read.stage,
            worker_id: ctx.config.worker_id.clone(),
            session,
            reads_held: true,
            reads_packed: true,
        };
        ctx.coordinator.stage_blobs(&ctx.stats, request).await
    })
    .await?;
    let mut blobs = Vec::with_capacity(listed.blobs.len());
    for blob in &listed.blobs {
        blobs.push(match blob.key.is_empty() {
            true => None,
            false => Some(BlobRef::try_from(blob)?),
        });
    }
    let own = own_copies(ctx, job, read.stage, &listed.held, &listed.held_digests).await?;
    let missing: Vec<u32> = listed
        .held
        .iter()
        .zip(&own)
        .filter(|(_, own)| own.is_none())
        .map(|(&index, _)| index)
        .collect();
    // Every output held by the coordinator, and none of them this worker's
    // own: read as from a coordinator that keeps stage data, straight into
    // `into`.
    if !listed.held.is_empty()
        && missing.len() == listed.held.len()
        && blobs.iter().all(Option::is_none)
    {
        let into = std::sync::Mutex::new(into);
        return with_retries(ctx, control, "stage data", |session| {
            fetch_stage(ctx, job, read, session, &into, None)
        })
        .await?;
    }
    let from_coordinator = match listed.held.is_empty() {
        true => None,
        false => Some(fetch_held(ctx, job, read, &listed.held, &missing, &blobs, control).await?),
    };
    let is_held = |index: usize| listed.held.binary_search(&(index as u32)).is_ok();
    if read.bucket.is_some()
        && let Some(index) = (0..blobs.len()).find(|&i| blobs[i].is_none() && !is_held(i))
    {
        return Err(KindError::InvalidArgument(format!(
            "stage {}, shard {index} of job {job} wrote no buckets",
            read.stage
        ))
        .into());
    }
    // Blobs in packs this worker wrote: read from its own copies.
    let own_blobs = own_packed_copies(ctx, job, read.stage, &blobs);
    let written: Vec<&BlobRef> = blobs
        .iter()
        .zip(&own_blobs)
        .filter(|(_, own)| own.is_none())
        .filter_map(|(blob, _)| blob.as_ref())
        .collect();
    // Where each blob's part lies, then its pieces; the futures are made
    // first (see `StageStore::read_range`'s callers: a stream that makes them
    // in a closure over borrowed arguments is not `Send`).
    let locating: Vec<_> = written
        .iter()
        .map(|blob| store.locate(blob, read.bucket, control))
        .collect();
    let located: Vec<_> = futures::stream::iter(locating)
        .buffered(PARALLEL_READS)
        .collect()
        .await;
    let mut pieces = Vec::new();
    let mut piece_counts = vec![0; written.len()];
    for (w, at) in located.iter().enumerate() {
        if let Ok((index, range)) = at {
            let mut start = range.start;
            while start < range.end {
                let end = range.end.min(start + READ_PIECE);
                pieces.push(store.read_range(written[w], index, start..end, control));
                piece_counts[w] += 1;
                start = end;
            }
        }
    }
    let mut fetched = futures::stream::iter(pieces).buffered(PARALLEL_READS);
    let mut w = 0;
    let mut fetched_parts = from_coordinator.iter().flat_map(|held| held.parts.iter());
    let mut own = own.into_iter();
    for (index, blob) in blobs.iter().enumerate() {
        if is_held(index) {
            if let Some(output) = own.next().expect("one entry per held output") {
                push_own_output(into, &output, read.bucket)?;
                continue;
            }
            let (held, range) = (
                from_coordinator.as_ref().expect("fetched when any is held"),
                fetched_parts.next().expect("one part per fetched output"),
            );
            if read.bucket.is_some() {
                into.push(&(range.end - range.start).to_le_bytes())?;
            }
            let mut at = range.start;
            while at < range.end {
                let end = range.end.min(at + READ_PIECE);
                into.push(&held.bytes.read_range(at..end)?)?;
                at = end;
            }
            continue;
        }
        if let Some(output) = &own_blobs[index] {
            push_own_output(into, output, read.bucket)?;
            continue;
        }
        let Some(_) = blob else {
            // A shard of a whole read that wrote nothing: nothing to add.
            continue;
        };
        let mark = into.len();
        let mut refused = located[w].as_ref().err().cloned();
        if let Ok((_, range)) = &located[w]
            && read.bucket.is_some()
        {
            into.push(&(range.end - range.start).to_le_bytes())?;
        }
        for _ in 0..piece_counts[w] {
            let got = fetched.next().await.expect("one result per piece");
            match got {
                Ok(bytes) if refused.is_none() => into.push(&bytes[..])?,
                Ok(_) => {}
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        match refused {
            None => {}
            Some(e @ StageError::Corrupt { .. }) => {
                tracing::warn!(job, stage = read.stage, shard = index, error = %e, "stage blob refused; computing its shard again");
                into.truncate(mark)?;
                let output = recompute_output(
                    ctx,
                    store,
                    spec,
                    job,
                    read.stage,
                    index as u32,
                    handle,
                    depth,
                )
                .await?;
                let part = match read.bucket {
                    Some(q) => bucket_of_output(&output, q)?,
                    None => output,
                };
                if read.bucket.is_some() {
                    into.push(&(part.len() as u64).to_le_bytes())?;
                }
                into.push(&part)?;
            }
            Some(e) => return Err(e.into()),
        }
        w += 1;
    }
    Ok(())
}

/// Computes again the output of shard `index` of `stage`, whose blob is
/// missing or damaged, and writes it back under its committed key (unless
/// that is a pack, whose other blobs are read by their own ranges). Kernels
/// are deterministic, so the result must equal what was committed: its
/// partial, and its blob's digest; anything else fails the shard that
/// needed it. A shard whose own input is lost as well is not chased further.
///
/// Boxed as a `Send` future: it and [`fetch_stage_input`] call each other.
#[allow(clippy::too_many_arguments)]
fn recompute_output<'a>(
    ctx: &'a Context,
    store: &'a StageStore,
    spec: &'a ValidSpec,
    job: &'a str,
    stage: u32,
    index: u32,
    handle: &'a Arc<ShardHandle>,
    depth: u32,
) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send + 'a>> {
    Box::pin(recompute(
        ctx, store, spec, job, stage, index, handle, depth,
    ))
}

#[allow(clippy::too_many_arguments)]
async fn recompute(
    ctx: &Context,
    store: &StageStore,
    spec: &ValidSpec,
    job: &str,
    stage: u32,
    index: u32,
    handle: &Arc<ShardHandle>,
    depth: u32,
) -> Result<Vec<u8>> {
    if depth >= 1 {
        return Err(StageError::Corrupt {
            key: format!("{job}/{stage}/{index}"),
            why: "the stage data it was computed from is lost as well".into(),
        }
        .into());
    }
    let control = &handle.control;
    let shard = with_retries(ctx, control, "stage shard", |session| async move {
        let request = proto::StageShardRequest {
            job_id: job.to_string(),
            stage,
            index,
            worker_id: ctx.config.worker_id.clone(),
            session,
        };
        ctx.coordinator.stage_shard(&ctx.stats, request).await
    })
    .await?;
    let committed = shard.output_blob.as_ref().ok_or_else(|| {
        KindError::Internal(format!(
            "stage {stage}, shard {index} has no committed blob"
        ))
    })?;
    let committed = BlobRef::try_from(committed)?;
    let task = EncodedTask::from_bytes(&shard.task)?;
    let reads = spec.stage_reads(stage, &task)?;
    let input = match reads.is_empty() {
        true => None,
        false => Some(
            fetch_stage_input(ctx, spec, job, &reads, handle, depth + 1)
                .await?
                .0,
        ),
    };
    // Its checkpoints go nowhere: it is not a leased attempt.
    let (checkpoints, _) = mpsc::unbounded_channel();
    let kernel = Kernel {
        spec: spec.clone(),
        task,
        input,
        checkpoint: Arc::new(Vec::new()),
        cache: ctx.config.kernel_cache.clone(),
        handle: handle.clone(),
        checkpoint_every: ctx.config.checkpoint_interval,
        pause_after_checkpoint: Duration::ZERO,
        memory_share: ctx.memory_share(),
        spill: ctx.spill.attempt(),
    };
    let (outcome, _) = computed(ctx.pool.run(move || kernel.run(checkpoints))).await?;
    let output = output_in_memory(outcome.output).await?;
    let (_, digest) = tally_stage::blob::index(&output);
    if outcome.partial.to_bytes() != shard.partial || digest != committed.digest {
        return Err(KindError::Internal(format!(
            "stage {stage}, shard {index} of job {job} computed again differs from its committed result"
        ))
        .into());
    }
    // The same bytes under the same key: readers after this one find it
    // whole. (Not into a pack: its other blobs may be whole, and are read
    // by their own ranges.)
    let in_pack = tally_stage::is_pack_key(&committed.key);
    if !in_pack {
        store.put(&committed.key, output.clone(), control).await?;
    }
    ctx.stats
        .blobs_recomputed
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match in_pack {
        true => {
            tracing::info!(job, stage, shard = index, key = %committed.key, "stage blob in a pack computed again")
        }
        false => {
            tracing::info!(job, stage, shard = index, key = %committed.key, "stage blob computed again and written back")
        }
    }
    Ok(output)
}
