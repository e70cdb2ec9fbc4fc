//! A shard's stage input: the stage outputs it reads, fetched from a
//! coordinator that keeps stage data, or read from the stage store with the
//! outputs the coordinator holds and this worker's own copies in their
//! places; a blob that is missing or damaged is computed again from its
//! shard. Decoded once per worker, job and reads.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use tally_kinds::Error as KindError;
use tally_kinds::dynamic::StageInput;
use tally_kinds::kind::StageRead;
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::EncodedTask;
use tally_stage::blob::Index;
use tally_stage::store::PARALLEL_READS;
use tally_stage::{BlobRef, StageError, StageStore};
use tally_wire::proto;
use tokio::sync::mpsc;

use super::kernel::{Kernel, computed, output_in_memory};
use crate::budget::READ_PIECE;
use crate::context::{Context, ShardHandle};
use crate::error::Result;
use crate::fetch::{fetch_stage, with_retries};
use crate::held::{
    HeldOutputs, bucket_of_output, fetch_held, own_copies, own_packed_copies, push_own_output,
};
use crate::spill::Gathering;

/// What the reads of a shard's stage input need from its attempt.
pub(super) struct ReadContext<'a> {
    /// The worker's: its calls to the coordinator, its spill directory,
    /// compute pool and kept outputs.
    pub(super) ctx: &'a Context,
    pub(super) spec: &'a ValidSpec,
    pub(super) job: &'a str,
    /// The shard's: its control stops the reads when its lease is revoked or
    /// the worker drains.
    pub(super) handle: &'a Arc<ShardHandle>,
    /// The stage store, or none when the coordinator keeps stage data itself.
    pub(super) store: Option<&'a StageStore>,
    /// The shards being computed again on the way (see
    /// [`ReadContext::recompute_output`]).
    pub(super) depth: u32,
}

/// Where one blob's part lies in the store (or why it cannot be read).
type Located = tally_stage::Result<(Index, Range<u64>)>;

impl ReadContext<'_> {
    fn control(&self) -> &tally_kinds::Control {
        &self.handle.control
    }

    /// The stage outputs a shard reads (each merged, or one bucket of it),
    /// fetched and decoded once per worker, job and reads, and shared by the
    /// shards that read the same (unless they were kept in a file: see
    /// [`ReadContext::fetch_input`]). Retries while the coordinator is
    /// unreachable, until the shard is stopped (its lease revoked, or the
    /// worker draining). Returns the input and the bytes read.
    pub(super) async fn stage_input(&self, reads: Vec<StageRead>) -> Result<(StageInput, u64)> {
        let mut cached = self.ctx.stage_cache.lock().await;
        if let Some(((j, r), data)) = cached.as_ref()
            && j == self.job
            && *r == reads
        {
            return Ok((data.clone(), 0));
        }
        let (data, in_files, read) = self.fetch_input(&reads).await?;
        // An input in files is one shard's (a bucket of a level): kept no longer
        // than that shard needs it.
        *cached = match in_files {
            false => Some(((self.job.to_string(), reads), data.clone())),
            true => None,
        };
        Ok((data, read))
    }

    /// [`ReadContext::stage_input`] without the cache. Read as it arrives, in
    /// pieces: for a kind that reads its input as a stream, a part past what
    /// the kind keeps in memory (a quarter of the shard's memory share, unless
    /// it says less) goes to a file in the spill directory instead of memory
    /// (and whether one did is returned, with the bytes read).
    async fn fetch_input(&self, reads: &[StageRead]) -> Result<(StageInput, bool, u64)> {
        let ctx = self.ctx;
        let in_memory = self.spec.stage_input_memory(ctx.memory_share());
        let mut parts = Vec::with_capacity(reads.len());
        let mut in_files = false;
        for read in reads {
            let mut into = ctx.spill.gathering(in_memory);
            match self.store {
                None => self.fetch_from_coordinator(read, &mut into).await?,
                Some(store) => self.read_from_store(store, read, &mut into).await?,
            };
            let (part, in_file) = into.finish()?;
            if in_file {
                ctx.stats.input_in_files_bytes.add(part.len());
            }
            in_files |= in_file;
            parts.push(part);
        }
        let read = parts.iter().map(|p| p.len()).sum();
        let spec = self.spec.clone();
        let decoded = ctx.pool.run(move || spec.decode_stored_inputs(parts));
        Ok((computed(decoded).await?, in_files, read))
    }

    /// One read from a coordinator that keeps stage data, into `into`.
    async fn fetch_from_coordinator(&self, read: &StageRead, into: &mut Gathering) -> Result<()> {
        let into = Mutex::new(into);
        with_retries(self.ctx, self.control(), "stage data", |session| {
            fetch_stage(self.ctx, self.job, read, session, &into, None)
        })
        .await?
    }

    /// One read of stage data from the stage store, into `into`: the blobs the
    /// coordinator names for the stage, each whole (merged in order) or bucket
    /// `q` of each (framed as `tally_kernels::buckets` gathers it), read in
    /// pieces a few at a time and in order, with the outputs the coordinator
    /// holds itself in their places. A blob that is missing or fails its
    /// digest is computed again from its shard.
    async fn read_from_store(
        &self,
        store: &StageStore,
        read: &StageRead,
        into: &mut Gathering,
    ) -> Result<()> {
        let (ctx, job, control) = (self.ctx, self.job, self.control());
        let listed = self.list_stage_blobs(read).await?;
        let blobs = blob_refs(&listed.blobs)?;
        let held = &listed.held;
        let own = own_copies(ctx, job, read.stage, held, &listed.held_digests).await?;
        let missing: Vec<u32> = held
            .iter()
            .zip(&own)
            .filter(|(_, own)| own.is_none())
            .map(|(&index, _)| index)
            .collect();
        // Every output held by the coordinator, and none of them this worker's
        // own: read as from a coordinator that keeps stage data, straight into
        // `into`.
        if !held.is_empty() && missing.len() == held.len() && blobs.iter().all(Option::is_none) {
            return self.fetch_from_coordinator(read, into).await;
        }
        let from_coordinator = match held.is_empty() {
            true => None,
            false => Some(fetch_held(ctx, job, read, held, &missing, &blobs, control).await?),
        };
        let is_held = |index: usize| held.binary_search(&(index as u32)).is_ok();
        self.check_buckets_written(read, &blobs, is_held)?;
        // Blobs in packs this worker wrote: read from its own copies.
        let own_blobs = own_packed_copies(ctx, job, read.stage, &blobs);
        let written: Vec<&BlobRef> = blobs
            .iter()
            .zip(&own_blobs)
            .filter(|(_, own)| own.is_none())
            .filter_map(|(blob, _)| blob.as_ref())
            .collect();
        let located = locate(store, &written, read.bucket, control).await;
        let (requests, piece_counts) = piece_requests(store, &written, &located, control);
        let mut fetched = futures::stream::iter(requests).buffered(PARALLEL_READS);
        let mut stored_parts = located.iter().zip(piece_counts);
        let mut held_parts = from_coordinator.iter().flat_map(|held| held.parts.iter());
        let mut own = own.into_iter();
        for (index, blob) in blobs.iter().enumerate() {
            if is_held(index) {
                match own.next().expect("one entry per held output") {
                    Some(output) => push_own_output(into, &output, read.bucket)?,
                    None => push_held_part(
                        into,
                        from_coordinator.as_ref().expect("fetched when any is held"),
                        held_parts.next().expect("one part per fetched output"),
                        read.bucket,
                    )?,
                }
            } else if let Some(output) = &own_blobs[index] {
                push_own_output(into, output, read.bucket)?;
            } else if blob.is_some() {
                let (located, pieces) = stored_parts.next().expect("one entry per blob read");
                self.push_stored_part(store, read, index, (located, pieces), &mut fetched, into)
                    .await?;
            }
            // Else a shard of a whole read that wrote nothing: nothing to add.
        }
        Ok(())
    }

    /// The coordinator's list of the blobs of `read`'s stage, and of the
    /// outputs it holds itself.
    async fn list_stage_blobs(&self, read: &StageRead) -> Result<proto::StageBlobsResponse> {
        let (ctx, job) = (self.ctx, self.job);
        with_retries(ctx, self.control(), "stage blobs", |session| async move {
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
        .await
    }

    /// A read of one bucket needs every shard's buckets: a shard with neither
    /// a blob nor an output the coordinator holds wrote none.
    fn check_buckets_written(
        &self,
        read: &StageRead,
        blobs: &[Option<BlobRef>],
        is_held: impl Fn(usize) -> bool,
    ) -> Result<()> {
        if read.bucket.is_some()
            && let Some(index) = (0..blobs.len()).find(|&i| blobs[i].is_none() && !is_held(i))
        {
            return Err(KindError::InvalidArgument(format!(
                "stage {}, shard {index} of job {} wrote no buckets",
                read.stage, self.job
            ))
            .into());
        }
        Ok(())
    }

    /// Appends the part of blob `index` read from the store (`located`, in
    /// `pieces` pieces taken in order from `fetched`) to `into`. One the store
    /// refuses as damaged is computed again from its shard instead.
    async fn push_stored_part(
        &self,
        store: &StageStore,
        read: &StageRead,
        index: usize,
        (located, pieces): (&Located, usize),
        fetched: &mut (impl Stream<Item = tally_stage::Result<Vec<u8>>> + Unpin),
        into: &mut Gathering,
    ) -> Result<()> {
        let mark = into.len();
        let mut refused = located.as_ref().err().cloned();
        if let Ok((_, range)) = located
            && read.bucket.is_some()
        {
            into.push(&(range.end - range.start).to_le_bytes())?;
        }
        for _ in 0..pieces {
            let got = fetched.next().await.expect("one result per piece");
            match got {
                Ok(bytes) if refused.is_none() => into.push(&bytes[..])?,
                Ok(_) => {}
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        match refused {
            None => Ok(()),
            Some(e @ StageError::Corrupt { .. }) => {
                tracing::warn!(job = self.job, stage = read.stage, shard = index, error = %e, "stage blob refused; computing its shard again");
                into.truncate(mark)?;
                let output = self
                    .recompute_output(store, read.stage, index as u32)
                    .await?;
                let part = match read.bucket {
                    Some(q) => bucket_of_output(&output, q)?,
                    None => output,
                };
                if read.bucket.is_some() {
                    into.push(&(part.len() as u64).to_le_bytes())?;
                }
                into.push(&part)?;
                Ok(())
            }
            Some(e) => Err(e.into()),
        }
    }

    /// Computes again the output of shard `index` of `stage`, whose blob is
    /// missing or damaged, and writes it back under its committed key (unless
    /// that is a pack, whose other blobs are read by their own ranges). Kernels
    /// are deterministic, so the result must equal what was committed: its
    /// partial, and its blob's digest; anything else fails the shard that
    /// needed it. A shard whose own input is lost as well is not chased further.
    ///
    /// Boxed as a `Send` future: it and [`ReadContext::fetch_input`] call each
    /// other.
    fn recompute_output<'a>(
        &'a self,
        store: &'a StageStore,
        stage: u32,
        index: u32,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send + 'a>> {
        Box::pin(self.recompute(store, stage, index))
    }

    async fn recompute(&self, store: &StageStore, stage: u32, index: u32) -> Result<Vec<u8>> {
        let (ctx, job, control) = (self.ctx, self.job, self.control());
        if self.depth >= 1 {
            return Err(StageError::Corrupt {
                key: format!("{job}/{stage}/{index}"),
                why: "the stage data it was computed from is lost as well".into(),
            }
            .into());
        }
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
        let reads = self.spec.stage_reads(stage, &task)?;
        let input = match reads.is_empty() {
            true => None,
            false => {
                let deeper = ReadContext {
                    depth: self.depth + 1,
                    ..*self
                };
                Some(deeper.fetch_input(&reads).await?.0)
            }
        };
        // Its checkpoints go nowhere: it is not a leased attempt.
        let (checkpoints, _) = mpsc::unbounded_channel();
        let kernel = Kernel {
            spec: self.spec.clone(),
            task,
            input,
            checkpoint: Arc::new(Vec::new()),
            cache: ctx.config.kernel_cache.clone(),
            handle: self.handle.clone(),
            checkpoint_every: ctx.config.checkpoint_interval,
            pause_after_checkpoint: std::time::Duration::ZERO,
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
}

/// The blob of each shard of a stage as the coordinator lists it: none for
/// a shard that wrote no blob.
fn blob_refs(listed: &[proto::BlobRef]) -> Result<Vec<Option<BlobRef>>> {
    let mut blobs = Vec::with_capacity(listed.len());
    for blob in listed {
        blobs.push(match blob.key.is_empty() {
            true => None,
            false => Some(BlobRef::try_from(blob)?),
        });
    }
    Ok(blobs)
}

/// Where the part of each blob of `written` lies (its whole data, or its
/// bucket), a few looked up at a time.
async fn locate(
    store: &StageStore,
    written: &[&BlobRef],
    bucket: Option<u32>,
    control: &tally_kinds::Control,
) -> Vec<Located> {
    // The futures are made first (see `StageStore::read_range`'s callers: a
    // stream that makes them in a closure over borrowed arguments is not
    // `Send`).
    let locating: Vec<_> = written
        .iter()
        .map(|blob| store.locate(blob, bucket, control))
        .collect();
    futures::stream::iter(locating)
        .buffered(PARALLEL_READS)
        .collect()
        .await
}

/// The reads of the pieces of each located part of `written`, in order, and
/// how many each part has (none for a part that cannot be located).
fn piece_requests<'a>(
    store: &'a StageStore,
    written: &[&'a BlobRef],
    located: &'a [Located],
    control: &'a tally_kinds::Control,
) -> (
    Vec<impl Future<Output = tally_stage::Result<Vec<u8>>> + 'a>,
    Vec<usize>,
) {
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
    (pieces, piece_counts)
}

/// Appends an output the coordinator holds (its `range` of `held`), framed
/// as a bucket when the read takes one.
fn push_held_part(
    into: &mut Gathering,
    held: &HeldOutputs,
    range: &Range<u64>,
    bucket: Option<u32>,
) -> Result<()> {
    if bucket.is_some() {
        into.push(&(range.end - range.start).to_le_bytes())?;
    }
    let mut at = range.start;
    while at < range.end {
        let end = range.end.min(at + READ_PIECE);
        into.push(&held.bytes.read_range(at..end)?)?;
        at = end;
    }
    Ok(())
}
