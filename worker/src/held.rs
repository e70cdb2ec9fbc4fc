//! The stage outputs a read takes from elsewhere than the stage store's
//! blobs: those the coordinator holds itself (fetched at once, whole or by
//! bucket) and this worker's own copies of the outputs it computed.

use std::sync::Arc;

use tally_kinds::Error as KindError;
use tally_kinds::Stored;
use tally_kinds::kind::StageRead;
use tally_stage::BlobRef;

use crate::context::Context;
use crate::error::{Result, WorkerError};
use crate::fetch::{fetch_stage, with_retries};
use crate::spill::Gathering;

/// The outputs of a stage that the coordinator holds itself, fetched from it
/// at once (in memory, or in a file past a quarter of a shard's memory
/// share): where each shard's part lies, in order.
pub(crate) struct HeldOutputs {
    pub(crate) bytes: Arc<dyn Stored>,
    pub(crate) parts: Vec<std::ops::Range<u64>>,
}

/// Of the outputs of `held` (ascending shard indices the coordinator
/// listed, with no blob in `blobs`), fetches those of `missing` for `read`,
/// each whole or its bucket.
pub(crate) async fn fetch_held(
    ctx: &Context,
    job: &str,
    read: &StageRead,
    held: &[u32],
    missing: &[u32],
    blobs: &[Option<BlobRef>],
    control: &tally_kinds::Control,
) -> Result<HeldOutputs> {
    let malformed = |why: String| {
        WorkerError::from(KindError::Internal(format!(
            "the coordinator's list of the outputs of stage {} of job {job} it holds {why}",
            read.stage
        )))
    };
    let ascending = held.windows(2).all(|pair| pair[0] < pair[1]);
    if !ascending
        || held
            .iter()
            .any(|&i| !matches!(blobs.get(i as usize), Some(None)))
    {
        return Err(malformed("does not match its list of blobs".into()));
    }
    let mut gathered = ctx.spill.gathering(Some(ctx.memory_share() / 4));
    if !missing.is_empty() {
        // All of them: named by none.
        let named = match missing.len() == held.len() {
            true => &[][..],
            false => missing,
        };
        let into = std::sync::Mutex::new(&mut gathered);
        with_retries(ctx, control, "stage data", |session| {
            fetch_stage(ctx, job, read, session, &into, Some(named))
        })
        .await??;
    }
    let (bytes, _) = gathered.finish()?;
    let mut parts = Vec::with_capacity(held.len());
    let mut at = 0;
    while at < bytes.len() {
        let len = bytes
            .read_range(at..at + 8)
            .map_err(|_| malformed("is cut short".into()))?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        let end = (at + 8).checked_add(len).filter(|&end| end <= bytes.len());
        let end = end.ok_or_else(|| malformed("is cut short".into()))?;
        parts.push(at + 8..end);
        at = end;
    }
    if parts.len() != missing.len() {
        return Err(malformed(format!(
            "names {} outputs to fetch and sent {}",
            missing.len(),
            parts.len()
        )));
    }
    Ok(HeldOutputs { bytes, parts })
}

/// For each output of `held` (with the coordinator's `digests`), this
/// worker's own copy where it kept one with that digest; hashed off the async
/// runtime (a step's outputs may be megabytes).
pub(crate) async fn own_copies(
    ctx: &Context,
    job: &str,
    stage: u32,
    held: &[u32],
    digests: &[Vec<u8>],
) -> Result<Vec<Option<bytes::Bytes>>> {
    type Candidate = Option<(bytes::Bytes, [u8; 16])>;
    let candidates: Vec<Candidate> = {
        let kept = ctx.own_outputs.lock();
        held.iter()
            .enumerate()
            .map(|(k, &index)| {
                let digest = digests.get(k)?.as_slice().try_into().ok()?;
                Some((kept.get(job, stage, index)?, digest))
            })
            .collect()
    };
    if candidates.iter().all(Option::is_none) {
        return Ok(vec![None; held.len()]);
    }
    let checked: Vec<Option<bytes::Bytes>> = tokio::task::spawn_blocking(move || {
        candidates
            .into_iter()
            .map(|candidate| {
                let (output, digest) = candidate?;
                let same = xxhash_rust::xxh3::xxh3_128(&output).to_le_bytes() == digest;
                same.then_some(output)
            })
            .collect()
    })
    .await
    .map_err(|e| KindError::Internal(format!("checking kept stage outputs: {e}")))?;
    note_reused(ctx, job, stage, &checked);
    Ok(checked)
}

/// For each blob of a read (in shard order), this worker's own copy where
/// the blob is in a pack this worker wrote with that output.
pub(crate) fn own_packed_copies(
    ctx: &Context,
    job: &str,
    stage: u32,
    blobs: &[Option<BlobRef>],
) -> Vec<Option<bytes::Bytes>> {
    let own: Vec<Option<bytes::Bytes>> = {
        let kept = ctx.own_outputs.lock();
        blobs
            .iter()
            .enumerate()
            .map(|(index, blob)| {
                let blob = blob.as_ref().filter(|b| b.offset > 0)?;
                kept.get_packed(job, stage, index as u32, &blob.digest)
            })
            .collect()
    };
    note_reused(ctx, job, stage, &own);
    own
}

/// Counts (and says) the outputs a read takes from this worker's own copies.
fn note_reused(ctx: &Context, job: &str, stage: u32, own: &[Option<bytes::Bytes>]) {
    let reused = own.iter().flatten().count();
    if reused > 0 {
        ctx.stats
            .own_outputs_reused
            .fetch_add(reused as u64, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            job,
            stage,
            reused,
            "stage outputs this worker computed read from its own copies"
        );
    }
}

/// This worker's own copy of an output, as the read takes it: whole, or its
/// bucket `q` after its length.
pub(crate) fn push_own_output(
    into: &mut Gathering,
    output: &[u8],
    bucket: Option<u32>,
) -> Result<()> {
    match bucket {
        Some(q) => {
            let part = bucket_of_output(output, q)?;
            into.push(&(part.len() as u64).to_le_bytes())?;
            into.push(&part)?;
        }
        None => into.push(output)?,
    }
    Ok(())
}

/// Bucket `q` of a frontier shard's output.
pub(crate) fn bucket_of_output(output: &[u8], q: u32) -> Result<Vec<u8>> {
    let buckets = tally_kernels::buckets::split_buckets(output)?;
    let bucket = buckets.get(q as usize).ok_or_else(|| {
        KindError::InvalidArgument(format!(
            "the output holds {} buckets; bucket {q} was asked for",
            buckets.len()
        ))
    })?;
    Ok(bucket.to_vec())
}
