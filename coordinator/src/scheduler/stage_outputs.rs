//! The stage output of one job that its readers need: the accepted outputs
//! of the current stage's shards (kept in memory, so that the barrier
//! publishes them without reading the store back); the merged output of the
//! previous stage, which the current stage reads; and the older stages the
//! kind keeps for later stages (retention), as the number of stored chunks
//! of each of their shards, read from the store on their first fetch.
//!
//! Everything here is derived from the store (each done shard's record says
//! how many chunks of output it stored) and read back at load. A stage's
//! output is deleted, by key, at the barrier after which nothing reads it.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tally_kinds::spec::ValidSpec;
use tally_kinds::values::JobPlan;
use tally_stage::BlobRef;

use crate::error::{CoordinatorError, Result};
use crate::records::{ShardRecord, output_key};
use crate::store::{Batch, Store, Tree};

#[derive(Clone, Default)]
pub(super) struct StageOutputs {
    /// The accepted output of each shard of the current stage, by index.
    current: Vec<Option<Arc<Vec<u8>>>>,
    /// The merged output of the previous stage (what the current stage reads).
    input: Option<FinishedStage>,
    /// Older stages whose output later stages read (the kind's
    /// `kept_stages`): the number of stored chunks of each of their shards.
    kept: BTreeMap<u32, Vec<u32>>,
    /// The kept stage last read, loaded from the store on its first fetch
    /// (its readers come together, one stage at a time).
    kept_loaded: Option<FinishedStage>,
}

/// The output of a finished stage, merged, and the number of stored chunks
/// of each of its shards.
#[derive(Clone)]
pub(super) struct FinishedStage {
    pub(super) stage: u32,
    pub(super) data: Arc<Vec<u8>>,
    /// Each shard's share of `data`, in shard order.
    lengths: Vec<usize>,
    chunks: Vec<u32>,
}

/// The blobs committed as the outputs of kept stages, read once per sweep:
/// by job and stage, each shard's blob key (if its output is a blob).
pub(super) type KeptBlobs = HashMap<(String, u32), Vec<Option<String>>>;

impl StageOutputs {
    /// Makes room for the outputs of a new current stage of `shards` shards.
    pub(super) fn start_stage(&mut self, shards: usize) {
        self.current = vec![None; shards];
    }

    /// Holds the accepted output of the current stage's shard `index`.
    pub(super) fn accept(&mut self, index: u32, output: Arc<Vec<u8>>) {
        self.current[index as usize] = Some(output);
    }

    /// Lets go of the output of shard `index` (its acceptance was undone).
    pub(super) fn forget(&mut self, index: u32) {
        self.current[index as usize] = None;
    }

    /// The accepted output of the current stage's shard `index`, if it is
    /// held in memory.
    pub(super) fn accepted(&self, index: u32) -> Option<&[u8]> {
        match self.current.get(index as usize) {
            Some(Some(output)) => Some(output),
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
                    let (data, lengths) = read_stage_outputs(store, job, stage, &chunks)?;
                    self.kept_loaded = Some(FinishedStage {
                        stage,
                        data: Arc::new(data),
                        lengths,
                        chunks,
                    });
                }
                self.kept_loaded.as_ref().expect("loaded above")
            }
            _ => return Ok(None),
        };
        Ok(Some(finished.clone()))
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
            let outputs = input.outputs();
            return Ok(committed_key(outputs.get(index as usize).copied()));
        }
        let Some(chunks) = self.kept.get(&stage) else {
            return Ok(None);
        };
        let refs = match kept.entry((job.to_string(), stage)) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let (data, lengths) = read_stage_outputs(store, job, stage, chunks)?;
                let mut at = 0;
                let refs = lengths
                    .iter()
                    .map(|&len| {
                        let output = &data[at..at + len];
                        at += len;
                        committed_key(Some(output))
                    })
                    .collect();
                v.insert(refs)
            }
        };
        Ok(refs.get(index as usize).cloned().flatten())
    }
}

impl FinishedStage {
    /// The stored output of `stage`'s `shards` in index order, preferring the
    /// copies in `memory` (by index) over reading the store.
    pub(super) fn read(
        store: &dyn Store,
        stage: u32,
        shards: &[ShardRecord],
        memory: &[Option<Arc<Vec<u8>>>],
    ) -> Result<FinishedStage> {
        let mut data = Vec::new();
        let mut lengths = Vec::with_capacity(shards.len());
        for shard in shards {
            let before = data.len();
            if let Some(Some(bytes)) = memory.get(shard.index as usize) {
                data.extend_from_slice(bytes);
                lengths.push(bytes.len());
                continue;
            }
            for chunk in 0..shard.output_chunks {
                let key = output_key(&shard.job, shard.stage, shard.index, chunk);
                let bytes = store.get(Tree::Blobs, &key)?.ok_or_else(|| {
                    CoordinatorError::Store(format!(
                        "output chunk {chunk} of stage {}, shard {} of job {} is missing",
                        shard.stage, shard.index, shard.job
                    ))
                })?;
                data.extend_from_slice(&bytes);
            }
            lengths.push(data.len() - before);
        }
        Ok(FinishedStage {
            stage,
            data: Arc::new(data),
            lengths,
            chunks: shards.iter().map(|s| s.output_chunks).collect(),
        })
    }

    /// Each shard's output, in order.
    pub(super) fn outputs(&self) -> Vec<&[u8]> {
        let mut outputs = Vec::with_capacity(self.lengths.len());
        let mut at = 0;
        for &len in &self.lengths {
            outputs.push(&self.data[at..at + len]);
            at += len;
        }
        outputs
    }

    /// Removes the stored output of the stage, by key (no scan).
    fn delete(&self, job: &str, batch: &mut Batch) {
        delete_stage_outputs(job, self.stage, &self.chunks, batch);
    }
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

/// The stored output of the shards of `stage` (with `chunks[i]` chunks for
/// shard `i`) in index order, and each shard's length.
fn read_stage_outputs(
    store: &dyn Store,
    job: &str,
    stage: u32,
    chunks: &[u32],
) -> Result<(Vec<u8>, Vec<usize>)> {
    let mut data = Vec::new();
    let mut lengths = Vec::with_capacity(chunks.len());
    for (index, &count) in chunks.iter().enumerate() {
        let before = data.len();
        for chunk in 0..count {
            let key = output_key(job, stage, index as u32, chunk);
            let bytes = store.get(Tree::Blobs, &key)?.ok_or_else(|| {
                CoordinatorError::Store(format!(
                    "output chunk {chunk} of stage {stage}, shard {index} of job {job} is missing"
                ))
            })?;
            data.extend_from_slice(&bytes);
        }
        lengths.push(data.len() - before);
    }
    Ok((data, lengths))
}

fn delete_stage_outputs(job: &str, stage: u32, chunks: &[u32], batch: &mut Batch) {
    for (index, &count) in chunks.iter().enumerate() {
        for chunk in 0..count {
            batch.remove(Tree::Blobs, output_key(job, stage, index as u32, chunk));
        }
    }
}
