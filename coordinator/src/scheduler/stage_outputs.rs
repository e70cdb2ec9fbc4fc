//! The stage output of one job that its readers need: the current stage's
//! accepted outputs, the previous stage's, which the current stage reads, and
//! the older stages the kind keeps for later stages (retention), as the
//! number of stored chunks of each of their shards.
//!
//! Outputs live in the store, in chunks of `OUTPUT_CHUNK`; only small ones
//! (stage-store references, thin levels) are also held in memory. A reader
//! gets a [`StageSource`] and reads what it needs chunk by chunk, outside the
//! scheduler's lock, so no level is ever held whole.
//!
//! Everything here is derived from the store (each done shard's record says
//! how many chunks of output it stored) and read back at load. A stage's
//! output is deleted, by key, at the barrier after which nothing reads it.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use tally_kinds::spec::ValidSpec;
use tally_kinds::values::JobPlan;
use tally_stage::BlobRef;

use tally_wire::limits::OUTPUT_CHUNK;

use crate::error::{CoordinatorError, Result};
use crate::records::{ShardRecord, output_key};
use crate::store::{Batch, Store, Tree};

/// Outputs up to this size are held in memory besides the store: stage-store
/// references and thin levels, which readers ask for every time.
const HELD_OUTPUT: usize = 64 << 10;

/// At most this many bytes of one stage's outputs are held in memory;
/// past it, only stage-store references are (so many small outputs of a
/// stage cannot fill the coordinator's memory).
const HELD_STAGE_BYTES: usize = 256 << 20;

#[derive(Clone, Default)]
pub(super) struct StageOutputs {
    /// What this coordinator accepted of each shard of the current stage, by
    /// index (`None`: nothing, or before a restart).
    current: Vec<Option<Accepted>>,
    /// The bytes of `current` held in memory.
    current_held: usize,
    /// The merged output of the previous stage (what the current stage reads).
    input: Option<FinishedStage>,
    /// Older stages whose output later stages read (the kind's
    /// `kept_stages`): the number of stored chunks of each of their shards.
    kept: BTreeMap<u32, Vec<u32>>,
    /// The kept stage last read, loaded from the store on its first fetch
    /// (its readers come together, one stage at a time).
    kept_loaded: Option<FinishedStage>,
}

/// An output accepted by this coordinator: held (small enough, see
/// [`HELD_OUTPUT`]), or only in the store (its batch may not be applied yet
/// when the barrier reads it).
#[derive(Clone)]
pub(super) enum Accepted {
    Held(Arc<Vec<u8>>),
    Stored,
}

/// The output of a finished stage: each shard's stored chunks, and its bytes
/// when they are small enough to hold.
#[derive(Clone)]
pub(super) struct FinishedStage {
    pub(super) stage: u32,
    outputs: Arc<Vec<StoredOutput>>,
    chunks: Vec<u32>,
}

impl FinishedStage {
    /// About how many bytes the stage's outputs take where they are stored:
    /// a stage-store blob's size, a held output's length, else its chunks
    /// (whole chunks: at most one chunk a shard too many).
    pub(super) fn approx_bytes(&self) -> u64 {
        self.outputs
            .iter()
            .map(|output| match &output.held {
                Some(held) => BlobRef::decode(held).map_or(held.len() as u64, |blob| blob.size),
                None => u64::from(output.chunks) * OUTPUT_CHUNK as u64,
            })
            .sum()
    }
}

/// One shard's output in the store.
#[derive(Default)]
struct StoredOutput {
    chunks: u32,
    held: Option<Arc<Vec<u8>>>,
    /// The XXH3-128 of a held output that is not a stage-store reference,
    /// hashed on the stage's first listing (only readers of a stage store
    /// ask for it).
    digest: OnceLock<u128>,
    /// Where each bucket of a frontier output lies (read from its head on
    /// the first bucket read).
    buckets: OnceLock<Vec<Range<u64>>>,
}

/// Where a stage's outputs are (see [`FinishedStage::blobs`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StageBlobs {
    /// Each shard's blob, in order; `None` where it has none.
    pub blobs: Vec<Option<BlobRef>>,
    /// The shards, in order, whose outputs are held by the coordinator.
    pub held: Vec<u32>,
    /// The XXH3-128 of each output of `held`, where it is held in memory.
    pub held_digests: Vec<Option<u128>>,
}

/// Whether an output is held in memory, with `held` bytes of its stage held
/// already: a stage-store reference always, others up to [`HELD_OUTPUT`]
/// and within [`HELD_STAGE_BYTES`] a stage.
fn holds(output: &[u8], held: usize) -> bool {
    BlobRef::decode(output).is_some()
        || (output.len() <= HELD_OUTPUT && held + output.len() <= HELD_STAGE_BYTES)
}

/// The blobs committed as the outputs of kept stages, read once per sweep:
/// by job and stage, each shard's blob key (if its output is a blob).
pub(super) type KeptBlobs = HashMap<(String, u32), Vec<Option<String>>>;

impl StageOutputs {
    /// Makes room for the outputs of a new current stage of `shards` shards.
    pub(super) fn start_stage(&mut self, shards: usize) {
        self.current = vec![None; shards];
        self.current_held = 0;
    }

    /// Notes the accepted output of the current stage's shard `index`,
    /// holding it if it is small (see [`holds`]).
    pub(super) fn accept(&mut self, index: u32, output: &[u8]) {
        self.forget(index);
        self.current[index as usize] = Some(match holds(output, self.current_held) {
            true => {
                self.current_held += output.len();
                Accepted::Held(Arc::new(output.to_vec()))
            }
            false => Accepted::Stored,
        });
    }

    /// Lets go of the output of shard `index` (its acceptance was undone).
    pub(super) fn forget(&mut self, index: u32) {
        if let Some(Accepted::Held(output)) = &self.current[index as usize] {
            self.current_held -= output.len();
        }
        self.current[index as usize] = None;
    }

    /// The accepted output of the current stage's shard `index`, if it is
    /// held in memory.
    pub(super) fn accepted(&self, index: u32) -> Option<&[u8]> {
        match self.current.get(index as usize) {
            Some(Some(Accepted::Held(output))) => Some(output),
            _ => None,
        }
    }

    /// The output of the current stage, `stage`, whose shards are all done:
    /// from memory where it is held, else from the store.
    pub(super) fn gather(
        &self,
        store: &dyn Store,
        stage: u32,
        shards: &[ShardRecord],
    ) -> Result<FinishedStage> {
        FinishedStage::read(store, stage, shards, &self.current)
    }

    /// The stage of the previous stage's output, if it is still held.
    pub(super) fn input_stage(&self) -> Option<u32> {
        self.input.as_ref().map(|input| input.stage)
    }

    /// About how many bytes the previous stage's output (the current
    /// stage's input) takes in the store, if it is still there.
    pub(super) fn input_bytes(&self) -> Option<u64> {
        self.input.as_ref().map(FinishedStage::approx_bytes)
    }

    /// Sets the previous stage's output, read back at load.
    pub(super) fn set_input(&mut self, input: FinishedStage) {
        self.input = Some(input);
    }

    /// Notes, at load, that shard `index` of the kept stage `stage` stored
    /// `chunks` chunks of output.
    pub(super) fn keep_chunks(&mut self, stage: u32, index: u32, chunks: u32) {
        let kept = self.kept.entry(stage).or_default();
        let index = index as usize;
        if kept.len() <= index {
            kept.resize(index + 1, 0);
        }
        kept[index] = chunks;
    }

    /// Passes the barrier after the stage whose output is `done`: it becomes
    /// the input of the next stage if there is one (`next`), else it is
    /// deleted. The input of the stage just done moves among the kept
    /// stages if `keep` names it, else it is deleted, as are the kept stages
    /// `keep` no longer names. The deletions go to `batch`.
    pub(super) fn pass_barrier(
        &mut self,
        done: FinishedStage,
        next: bool,
        keep: &[u32],
        job: &str,
        batch: &mut Batch,
    ) {
        if let Some(previous) = self.input.take() {
            if keep.contains(&previous.stage) {
                self.kept.insert(previous.stage, previous.chunks);
            } else {
                previous.delete(job, batch);
            }
        }
        let dropped: Vec<u32> = self
            .kept
            .keys()
            .copied()
            .filter(|stage| !keep.contains(stage))
            .collect();
        for stage in dropped {
            let chunks = self.kept.remove(&stage).unwrap_or_default();
            delete_stage_outputs(job, stage, &chunks, batch);
        }
        if self
            .kept_loaded
            .as_ref()
            .is_some_and(|k| !self.kept.contains_key(&k.stage))
        {
            self.kept_loaded = None;
        }
        if next {
            self.input = Some(done);
        } else {
            done.delete(job, batch);
        }
    }

    /// The output of `stage` if it can be read: the input of the current
    /// stage, or a kept stage (read from the store on its first use and
    /// held until another is read).
    pub(super) fn readable(
        &mut self,
        store: &dyn Store,
        job: &str,
        stage: u32,
    ) -> Result<Option<FinishedStage>> {
        let finished = match (&self.input, self.kept.get(&stage)) {
            (Some(input), _) if input.stage == stage => input,
            (_, Some(chunks)) => {
                if self.kept_loaded.as_ref().map(|k| k.stage) != Some(stage) {
                    let chunks = chunks.clone();
                    self.kept_loaded = Some(FinishedStage::load(store, job, stage, chunks, &[])?);
                }
                self.kept_loaded.as_ref().expect("loaded above")
            }
            _ => return Ok(None),
        };
        Ok(Some(finished.clone()))
    }

    /// The keys of the blobs (or packs) the committed outputs of the earlier
    /// stage `stage` lie in, if the job still holds that stage (else none).
    /// A kept stage's blobs are read once into `kept`.
    pub(super) fn committed_keys(
        &self,
        store: &dyn Store,
        job: &str,
        stage: u32,
        kept: &mut KeptBlobs,
    ) -> Result<HashSet<String>> {
        let shards = match (&self.input, self.kept.get(&stage)) {
            (Some(input), _) if input.stage == stage => input.outputs.len(),
            (_, Some(chunks)) => chunks.len(),
            _ => return Ok(HashSet::new()),
        };
        let mut keys = HashSet::new();
        for index in 0..shards as u32 {
            keys.extend(self.committed_blob(store, job, stage, index, kept)?);
        }
        Ok(keys)
    }

    /// The key of the blob committed as the output of shard `index` of the
    /// earlier stage `stage`, if the job still holds that stage and the
    /// output is a blob. A kept stage's blobs are read once into `kept`.
    pub(super) fn committed_blob(
        &self,
        store: &dyn Store,
        job: &str,
        stage: u32,
        index: u32,
        kept: &mut KeptBlobs,
    ) -> Result<Option<String>> {
        if let Some(input) = self.input.as_ref().filter(|f| f.stage == stage) {
            let output = input.outputs.get(index as usize);
            return Ok(committed_key(
                output.and_then(|o| o.held.as_deref()).map(Vec::as_slice),
            ));
        }
        let Some(chunks) = self.kept.get(&stage) else {
            return Ok(None);
        };
        let refs = match kept.entry((job.to_string(), stage)) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let finished = FinishedStage::load(store, job, stage, chunks.clone(), &[])?;
                let refs = finished
                    .outputs
                    .iter()
                    .map(|o| committed_key(o.held.as_deref().map(Vec::as_slice)))
                    .collect();
                v.insert(refs)
            }
        };
        Ok(refs.get(index as usize).cloned().flatten())
    }
}

impl FinishedStage {
    /// The stored output of `stage`'s `shards` in index order, holding the
    /// small ones: what this coordinator accepted (`memory`, by index), else
    /// read from the store.
    pub(super) fn read(
        store: &dyn Store,
        stage: u32,
        shards: &[ShardRecord],
        memory: &[Option<Accepted>],
    ) -> Result<FinishedStage> {
        let Some(first) = shards.first() else {
            return Ok(FinishedStage {
                stage,
                outputs: Arc::default(),
                chunks: Vec::new(),
            });
        };
        let mut chunks = vec![0; shards.len()];
        let mut held = vec![None; shards.len()];
        for shard in shards {
            let index = shard.index as usize;
            *chunks.get_mut(index).ok_or_else(|| {
                CoordinatorError::Internal(format!("stage {stage} has no shard {index}"))
            })? = shard.output_chunks;
            held[index] = memory.get(index).cloned().flatten();
        }
        FinishedStage::load(store, &first.job, stage, chunks, &held)
    }

    /// The output of `stage` of `job`, whose shard `i` stored `chunks[i]`
    /// chunks; the small outputs held, from `held` or read from the store.
    fn load(
        store: &dyn Store,
        job: &str,
        stage: u32,
        chunks: Vec<u32>,
        accepted: &[Option<Accepted>],
    ) -> Result<FinishedStage> {
        let mut outputs = Vec::with_capacity(chunks.len());
        let mut held_bytes = 0;
        for (index, &count) in chunks.iter().enumerate() {
            let held = match accepted.get(index).cloned().flatten() {
                Some(Accepted::Held(bytes)) => Some(bytes),
                Some(Accepted::Stored) => None,
                None => Self::check(store, job, stage, index as u32, count)?
                    .filter(|bytes| holds(bytes, held_bytes)),
            };
            held_bytes += held.as_ref().map_or(0, |bytes| bytes.len());
            outputs.push(StoredOutput {
                chunks: count,
                held,
                digest: OnceLock::new(),
                buckets: OnceLock::new(),
            });
        }
        Ok(FinishedStage {
            stage,
            outputs: Arc::new(outputs),
            chunks,
        })
    }

    /// Checks that every chunk of an output accepted before this coordinator
    /// started is there (a lost one fails the job at load) and reads it if
    /// it is small enough to hold.
    fn check(
        store: &dyn Store,
        job: &str,
        stage: u32,
        index: u32,
        count: u32,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        // Every chunk is there (a lost one fails the job at load), and
        // the sizes tell which outputs are small enough to hold.
        let mut len = 0;
        for chunk in 0..count {
            let key = output_key(job, stage, index, chunk);
            len += store
                .value_len(Tree::Blobs, &key)?
                .ok_or_else(|| missing(job, stage, index, chunk))?;
        }
        if len > HELD_OUTPUT as u64 {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(len as usize);
        for chunk in 0..count {
            bytes.extend(read_chunk(store, job, stage, index, chunk)?);
        }
        Ok(Some(Arc::new(bytes)))
    }

    /// Where each shard's output is, with a stage store outside the
    /// coordinator: a blob of the stage store (its reference is held), or
    /// held here (anything else that is not empty).
    pub(super) fn blobs(&self) -> StageBlobs {
        let mut blobs = StageBlobs::default();
        for (index, output) in self.outputs.iter().enumerate() {
            let blob = output
                .held
                .as_deref()
                .and_then(|held| BlobRef::decode(held));
            if blob.is_none() && output.chunks > 0 {
                let digest = output.held.as_deref().map(|held| {
                    *output
                        .digest
                        .get_or_init(|| xxhash_rust::xxh3::xxh3_128(held))
                });
                blobs.held.push(index as u32);
                blobs.held_digests.push(digest);
            }
            blobs.blobs.push(blob);
        }
        blobs
    }

    /// Removes the stored output of the stage, by key (no scan).
    fn delete(&self, job: &str, batch: &mut Batch) {
        delete_stage_outputs(job, self.stage, &self.chunks, batch);
    }
}

/// A readable stage's output as a reader fetches it, chunk by chunk, outside
/// the scheduler's lock: [`StageSource::pieces`], then each piece's bytes.
#[derive(Clone)]
pub struct StageSource {
    store: Arc<dyn Store>,
    job: String,
    finished: FinishedStage,
}

/// Which outputs a read takes: all (the stage as it is stored), or only
/// those held here among blobs of a stage store (see [`FinishedStage::blobs`]),
/// all of them or these shards (ascending).
#[derive(Clone, Debug)]
pub enum HeldRead {
    No,
    All,
    Only(Vec<u32>),
}

/// A part of a read: bytes at hand, or a range of one stored chunk.
pub enum Piece {
    Bytes(Vec<u8>),
    Chunk {
        shard: u32,
        chunk: u32,
        range: Range<usize>,
    },
}

impl StageSource {
    pub(super) fn new(store: Arc<dyn Store>, job: &str, finished: FinishedStage) -> StageSource {
        StageSource {
            store,
            job: job.to_string(),
            finished,
        }
    }

    /// What a read of the stage consists of, in order: every shard's output
    /// merged, or with `bucket`, that bucket of every shard's output, each
    /// after its length (framed as `tally_kernels::buckets` gathers it).
    /// With `held_only`, only the outputs held here among blobs of a stage
    /// store ([`FinishedStage::blobs`]), each part after its length, whole
    /// or its bucket. Reads the heads of large frontier outputs the first
    /// time; blocking.
    pub fn pieces(&self, bucket: Option<u32>, held: &HeldRead) -> Result<Vec<Piece>> {
        let mut pieces = Vec::new();
        let held_only = !matches!(held, HeldRead::No);
        for (index, output) in self.finished.outputs.iter().enumerate() {
            let index = index as u32;
            if held_only {
                let blob = output
                    .held
                    .as_deref()
                    .is_some_and(|h| BlobRef::is_encoded(h));
                let wanted = match held {
                    HeldRead::Only(shards) => shards.binary_search(&index).is_ok(),
                    _ => true,
                };
                if blob || output.chunks == 0 || !wanted {
                    continue;
                }
                if bucket.is_none() {
                    let len = self.output_len(index, output)?;
                    pieces.push(Piece::Bytes(len.to_le_bytes().to_vec()));
                }
            }
            let Some(q) = bucket else {
                match &output.held {
                    Some(bytes) => pieces.push(Piece::Bytes(bytes.to_vec())),
                    None => pieces.extend((0..output.chunks).map(|chunk| Piece::Chunk {
                        shard: index,
                        chunk,
                        range: 0..OUTPUT_CHUNK,
                    })),
                }
                continue;
            };
            let no_bucket = |why: String| {
                CoordinatorError::FailedPrecondition(format!(
                    "job {} has no bucket {q} in the output of stage {}: shard {index} {why}",
                    self.job, self.finished.stage
                ))
            };
            if let Some(bytes) = &output.held {
                let buckets = tally_kernels::buckets::split_buckets(bytes)
                    .map_err(|e| no_bucket(e.to_string()))?;
                let part = buckets
                    .get(q as usize)
                    .ok_or_else(|| no_bucket(format!("wrote {} buckets", buckets.len())))?;
                pieces.push(Piece::Bytes((part.len() as u64).to_le_bytes().to_vec()));
                pieces.push(Piece::Bytes(part.to_vec()));
                continue;
            }
            let ranges = match output.buckets.get() {
                Some(ranges) => ranges,
                None => {
                    let ranges = self
                        .bucket_ranges(index, output.chunks)
                        .map_err(|e| match e {
                            CoordinatorError::InvalidArgument(why) => no_bucket(why),
                            e => e,
                        })?;
                    output.buckets.get_or_init(|| ranges)
                }
            };
            let range = ranges
                .get(q as usize)
                .ok_or_else(|| no_bucket(format!("wrote {} buckets", ranges.len())))?;
            pieces.push(Piece::Bytes(
                (range.end - range.start).to_le_bytes().to_vec(),
            ));
            let chunk = OUTPUT_CHUNK as u64;
            let mut at = range.start;
            while at < range.end {
                let end = range.end.min((at / chunk + 1) * chunk);
                pieces.push(Piece::Chunk {
                    shard: index,
                    chunk: (at / chunk) as u32,
                    range: (at % chunk) as usize..(end - at / chunk * chunk) as usize,
                });
                at = end;
            }
        }
        Ok(pieces)
    }

    /// The bytes of `piece`; blocking.
    pub fn read(&self, piece: Piece) -> Result<Vec<u8>> {
        match piece {
            Piece::Bytes(bytes) => Ok(bytes),
            Piece::Chunk {
                shard,
                chunk,
                range,
            } => {
                let stage = self.finished.stage;
                let key = output_key(&self.job, stage, shard, chunk);
                // Gone only once the job moved past the stage: the reader
                // is a stale attempt.
                let mut bytes = self.store.get(Tree::Blobs, &key)?.ok_or_else(|| {
                    CoordinatorError::FailedPrecondition(format!(
                        "output chunk {chunk} of stage {stage}, shard {shard} of job {} is gone: \
                         the job has moved past the stage",
                        self.job
                    ))
                })?;
                if range.end > bytes.len() && range != (0..OUTPUT_CHUNK) {
                    return Err(CoordinatorError::Store(format!(
                        "output chunk {chunk} of stage {}, shard {shard} of job {} is shorter than                          its bucket framing says",
                        self.finished.stage, self.job
                    )));
                }
                bytes.truncate(range.end);
                Ok(bytes.split_off(range.start.min(bytes.len())))
            }
        }
    }

    /// The length of shard `index`'s output; blocking.
    fn output_len(&self, index: u32, output: &StoredOutput) -> Result<u64> {
        if let Some(held) = &output.held {
            return Ok(held.len() as u64);
        }
        let (job, stage) = (&self.job, self.finished.stage);
        let mut len = 0;
        for chunk in 0..output.chunks {
            len += self
                .store
                .value_len(Tree::Blobs, &output_key(job, stage, index, chunk))?
                .ok_or_else(|| missing(job, stage, index, chunk))?;
        }
        Ok(len)
    }

    /// The whole read at once (for tests and small stages); blocking.
    pub fn read_all(&self, bucket: Option<u32>, held: &HeldRead) -> Result<Vec<u8>> {
        let mut data = Vec::new();
        for piece in self.pieces(bucket, held)? {
            data.extend_from_slice(&self.read(piece)?);
        }
        Ok(data)
    }

    /// Where each bucket of shard `index`'s stored output lies, from the
    /// bucket count and lengths at its head (`tally_kernels::buckets`).
    fn bucket_ranges(&self, index: u32, chunks: u32) -> Result<Vec<Range<u64>>> {
        let store = self.store.as_ref();
        let stage = self.finished.stage;
        let malformed = |why: &str| CoordinatorError::InvalidArgument(why.to_string());
        let mut head = Vec::new();
        let mut next = 0;
        let mut want = 4;
        let mut lengths_read = false;
        loop {
            while head.len() < want {
                if next >= chunks {
                    return Err(malformed("is too short for its bucket framing"));
                }
                head.extend(read_chunk(store, &self.job, stage, index, next)?);
                next += 1;
            }
            let count = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
            if lengths_read {
                let mut at = want as u64;
                return Ok(head[4..want]
                    .chunks(8)
                    .map(|l| {
                        let len = u64::from_le_bytes(l.try_into().expect("8 bytes"));
                        let range = at..at.saturating_add(len);
                        at = range.end;
                        range
                    })
                    .collect());
            }
            want = 4 + 8 * count;
            if want as u64 > u64::from(chunks) * OUTPUT_CHUNK as u64 {
                return Err(malformed("is too short for its bucket framing"));
            }
            lengths_read = true;
        }
    }
}

/// Chunk `chunk` of the stored output of shard `index` of `stage`.
fn read_chunk(store: &dyn Store, job: &str, stage: u32, index: u32, chunk: u32) -> Result<Vec<u8>> {
    store
        .get(Tree::Blobs, &output_key(job, stage, index, chunk))?
        .ok_or_else(|| missing(job, stage, index, chunk))
}

fn missing(job: &str, stage: u32, index: u32, chunk: u32) -> CoordinatorError {
    CoordinatorError::Store(format!(
        "output chunk {chunk} of stage {stage}, shard {index} of job {job} is missing"
    ))
}

/// The older stages whose output stays while `stage` runs: those the kind
/// keeps for it, and with a stage store outside the coordinator, those the
/// stage before it read, so that a shard of that stage whose blob was lost
/// can be computed again.
pub(super) fn retained_stages(
    spec: &ValidSpec,
    plan: &JobPlan,
    stage: u32,
    external: bool,
) -> tally_kinds::Result<Vec<u32>> {
    let mut keep = spec.kept_stages(plan, stage)?;
    if external && stage >= 2 {
        if stage >= 3 {
            keep.push(stage - 2);
        }
        keep.extend(spec.kept_stages(plan, stage - 1)?);
        keep.sort_unstable();
        keep.dedup();
    }
    Ok(keep)
}

/// The key of the blob a stored reference names, if it is one.
pub(super) fn committed_key(stored: Option<&[u8]>) -> Option<String> {
    BlobRef::decode(stored?).map(|blob| blob.key)
}

fn delete_stage_outputs(job: &str, stage: u32, chunks: &[u32], batch: &mut Batch) {
    for (index, &count) in chunks.iter().enumerate() {
        for chunk in 0..count {
            batch.remove(Tree::Blobs, output_key(job, stage, index as u32, chunk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use tally_kernels::buckets::{encode_buckets, gather_bucket};

    /// Outputs stored in chunks as acceptance stores them.
    fn stored(store: &MemoryStore, job: &str, stage: u32, outputs: &[Vec<u8>]) -> Vec<u32> {
        let mut batch = Batch::default();
        let mut chunks = Vec::new();
        for (index, output) in outputs.iter().enumerate() {
            chunks.push(output.len().div_ceil(OUTPUT_CHUNK) as u32);
            for (chunk, data) in output.chunks(OUTPUT_CHUNK).enumerate() {
                batch.put(
                    Tree::Blobs,
                    output_key(job, stage, index as u32, chunk as u32),
                    data.to_vec(),
                );
            }
        }
        store.commit(batch).unwrap();
        chunks
    }

    /// Bucket reads of outputs larger than a chunk, small ones held and
    /// empty ones, read piece by piece, equal the buckets gathered from the
    /// whole outputs; whole reads equal the outputs merged; a bucket past
    /// the count is refused; a deleted stage is gone for its readers.
    #[test]
    fn reads_by_chunks_equal_the_whole_outputs_gathered() {
        let store = Arc::new(MemoryStore::new());
        let bucket = |seed: u8, len: usize| -> Vec<u8> {
            (0..len)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect()
        };
        let outputs = vec![
            // Buckets across chunk boundaries, the head in the first chunk.
            encode_buckets(&[
                bucket(1, OUTPUT_CHUNK - 100),
                bucket(2, 3 * OUTPUT_CHUNK + 17),
                Vec::new(),
            ]),
            // Small: held.
            encode_buckets(&[bucket(3, 10), bucket(4, 0), bucket(5, 999)]),
            // One bucket, exactly a chunk's worth of data.
            encode_buckets(&[
                bucket(6, OUTPUT_CHUNK - 4 - 3 * 8 - 3),
                bucket(7, 1),
                bucket(8, 2),
            ]),
        ];
        let chunks = stored(&store, "j", 3, &outputs);
        assert_eq!(chunks, [4, 1, 1]);
        assert_eq!(
            outputs[2].len(),
            OUTPUT_CHUNK,
            "one whole chunk, too large to hold"
        );
        let finished = FinishedStage::load(store.as_ref(), "j", 3, chunks.clone(), &[]).unwrap();
        assert!(finished.outputs[1].held.is_some());
        assert!(finished.outputs[0].held.is_none() && finished.outputs[2].held.is_none());
        let source = StageSource::new(store.clone(), "j", finished.clone());
        let slices: Vec<&[u8]> = outputs.iter().map(Vec::as_slice).collect();
        for q in 0..3 {
            let got = source.read_all(Some(q), &HeldRead::No).unwrap();
            assert_eq!(got, gather_bucket(&slices, q).unwrap(), "bucket {q}");
            // Again, from the cached bucket index.
            assert_eq!(source.read_all(Some(q), &HeldRead::No).unwrap(), got);
        }
        assert_eq!(
            source.read_all(None, &HeldRead::No).unwrap(),
            outputs.concat()
        );
        let err = source.read_all(Some(3), &HeldRead::No).unwrap_err();
        assert!(
            matches!(err, CoordinatorError::FailedPrecondition(_)),
            "{err}"
        );
        let mut batch = Batch::default();
        finished.delete("j", &mut batch);
        store.commit(batch).unwrap();
        let err = source.read_all(Some(1), &HeldRead::No).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
        let err = FinishedStage::load(store.as_ref(), "j", 3, chunks, &[])
            .err()
            .unwrap();
        assert!(
            matches!(err, CoordinatorError::Store(_)),
            "a lost chunk at load: {err}"
        );
    }

    /// Frames of the parts a held-only read sent: each after its length.
    fn unframe(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut parts = Vec::new();
        while !bytes.is_empty() {
            let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            parts.push(bytes[8..8 + len].to_vec());
            bytes = &bytes[8 + len..];
        }
        parts
    }

    /// A stage whose outputs are blobs of a stage store, outputs held here
    /// (small, and one past what is held in memory) and empty: each shard is
    /// listed where it is, and a held-only read gives exactly the held ones,
    /// whole or their buckets, each framed, in order, as a read of the stage
    /// without blobs would give them.
    #[test]
    fn a_stage_of_blobs_and_held_outputs_lists_each_where_it_is() {
        let store = Arc::new(MemoryStore::new());
        let blob = |n: u8| BlobRef {
            key: format!("jobs/j/2/{n}.1.output"),
            size: 100 + u64::from(n),
            digest: [n; 32],
            offset: 0,
        };
        let buckets = |seed: u8, len: usize| -> Vec<u8> {
            let part = |q: u8| (0..len).map(|i| (i as u8) ^ seed ^ q).collect();
            encode_buckets(&[part(0), part(1)])
        };
        let outputs = vec![
            blob(0).encode(),
            buckets(1, 10),
            Vec::new(),
            // Past what is held in memory, and more than a chunk.
            buckets(2, OUTPUT_CHUNK),
            blob(4).encode(),
            buckets(3, 0),
        ];
        let chunks = stored(&store, "j", 2, &outputs);
        let finished = FinishedStage::load(store.as_ref(), "j", 2, chunks, &[]).unwrap();
        assert!(finished.outputs[3].held.is_none());
        let listed = finished.blobs();
        assert_eq!(
            listed.blobs,
            [Some(blob(0)), None, None, None, Some(blob(4)), None]
        );
        assert_eq!(listed.held, [1, 3, 5]);
        let digest = |i: usize| Some(xxhash_rust::xxh3::xxh3_128(&outputs[i]));
        assert_eq!(
            listed.held_digests,
            [digest(1), None, digest(5)],
            "digests of the outputs held in memory"
        );
        let source = StageSource::new(store.clone(), "j", finished);
        let held: Vec<&[u8]> = [1, 3, 5].iter().map(|&i| outputs[i].as_slice()).collect();
        assert_eq!(
            unframe(&source.read_all(None, &HeldRead::All).unwrap()),
            held
        );
        let some = source.read_all(None, &HeldRead::Only(vec![3, 5])).unwrap();
        assert_eq!(
            unframe(&some),
            [outputs[3].as_slice(), outputs[5].as_slice()]
        );
        for q in 0..2 {
            let parts = unframe(&source.read_all(Some(q), &HeldRead::All).unwrap());
            let split: Vec<Vec<u8>> = held
                .iter()
                .map(|o| tally_kernels::buckets::split_buckets(o).unwrap()[q as usize].to_vec())
                .collect();
            assert_eq!(parts, split, "bucket {q}");
        }
    }

    /// References are always held in memory; other outputs only while the
    /// stage's held bytes stay within their bound.
    #[test]
    fn held_outputs_are_bounded_by_the_stage_and_references_always_held() {
        let reference = BlobRef {
            key: "jobs/j/1/0.1.output".into(),
            size: 1,
            digest: [0; 32],
            offset: 0,
        }
        .encode();
        assert!(holds(&reference, HELD_STAGE_BYTES));
        assert!(holds(&[7; HELD_OUTPUT], 0));
        assert!(!holds(&[7; HELD_OUTPUT + 1], 0));
        assert!(!holds(&[7; 10], HELD_STAGE_BYTES - 9));
        let mut outputs = StageOutputs::default();
        outputs.start_stage(3);
        outputs.accept(0, &[1; 100]);
        outputs.accept(1, &reference);
        assert_eq!(outputs.current_held, 100 + reference.len());
        outputs.accept(0, &[1; 50]);
        outputs.forget(1);
        assert_eq!(
            outputs.current_held, 50,
            "a replaced or undone output is let go"
        );
    }
}
