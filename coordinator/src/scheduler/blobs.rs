//! The stage store outside the coordinator, as the scheduler sees it: which
//! store a data directory's jobs use, and which of the store's blobs no
//! committed state references any more (the sweep deletes them).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use tally_stage::{StageStoreUrl, blob_owner, checkpoint_number, job_prefix, pack_owner};

use crate::error::{CoordinatorError, Result};
use crate::records::{ShardState, checkpoint_blob_key, output_key};
use crate::store::{Batch, Store, Tree};

use super::job::JobEntry;
use super::stage_outputs::{KeptBlobs, committed_key};
use super::state::Scheduler;

/// The stage store the data directory's jobs were last run with, in
/// [`Tree::Meta`]; absent: the coordinator's own.
const STAGE_STORE_KEY: &[u8] = b"stage-store";

/// The data directory's own prefix in any stage store, in [`Tree::Meta`]:
/// job ids restart with a new data directory, so two directories (one
/// replacing a lost one, say) sharing a store must not share keys.
const STAGE_PREFIX_KEY: &[u8] = b"stage-prefix";

/// The nonces this data directory wrote to its prefix's owner records, in
/// [`Tree::Meta`]: the one it holds the prefix with, and the one it is
/// taking it with (written before the owner record, so a crash between the
/// two leaves it known). A copy of the directory has them too: the owner
/// records tell the two apart (see `tally_stage::owner`).
const STAGE_OWNER_KEY: &[u8] = b"stage-owner";

/// The owner epoch at which a restore into this data directory took its
/// prefix, in [`Tree::Meta`]; absent: never restored (see `stage_owner`).
const STAGE_OWNER_RESTORED_KEY: &[u8] = b"stage-owner-restored";

/// What a data directory keeps of its stage-store prefix, read before its
/// jobs are loaded: the prefix, its owner-record nonces, and the owner epoch
/// a restore into it took the prefix at.
#[derive(Debug, Default)]
pub struct KeptStageOwner {
    pub prefix: Option<String>,
    pub nonces: Vec<String>,
    pub restored_at: Option<u64>,
}

impl KeptStageOwner {
    pub fn read(store: &dyn Store) -> Result<KeptStageOwner> {
        let text = |key: &[u8]| -> Result<Option<String>> {
            Ok(store
                .get(Tree::Meta, key)?
                .map(|v| String::from_utf8_lossy(&v).into_owned()))
        };
        Ok(KeptStageOwner {
            prefix: text(STAGE_PREFIX_KEY)?,
            nonces: text(STAGE_OWNER_KEY)?
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            restored_at: text(STAGE_OWNER_RESTORED_KEY)?.and_then(|t| t.parse().ok()),
        })
    }
}

impl Scheduler {
    /// Records `url` as the stage store of the jobs from now on, and returns
    /// where in it this data directory keeps its blobs (`url` one level down,
    /// under a name drawn once per data directory, or again when
    /// `new_prefix`). Refused while a job is unfinished that began with
    /// another store: its stage data is there, where the coordinator would
    /// no longer look.
    pub fn use_stage_store(
        &mut self,
        url: &StageStoreUrl,
        new_prefix: bool,
    ) -> Result<StageStoreUrl> {
        let kept = self.store.get(Tree::Meta, STAGE_PREFIX_KEY)?;
        let prefix = match kept.filter(|_| !new_prefix) {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => {
                let prefix = format!("d-{}", random_hex()?);
                let mut batch = Batch::default();
                batch.put(Tree::Meta, STAGE_PREFIX_KEY, prefix.clone().into_bytes());
                // The owner records of the new prefix are yet to be written.
                batch.remove(Tree::Meta, STAGE_OWNER_KEY);
                self.write(batch)?;
                self.store.flush()?;
                if new_prefix {
                    tracing::warn!(prefix = %prefix, "a new stage-store prefix for this data directory");
                }
                prefix
            }
        };
        let own = url.within(&prefix);
        let before = match self.store.get(Tree::Meta, STAGE_STORE_KEY)? {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => StageStoreUrl::Coordinator.to_string(),
        };
        let now = url.to_string();
        if before == now {
            return Ok(own);
        }
        let unfinished: Vec<&str> = self
            .jobs
            .iter()
            .filter(|e| !e.rec.state.is_finished())
            .map(|e| e.rec.id.as_str())
            .collect();
        if let Some(first) = unfinished.first() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "--stage-store {now}: {} unfinished job(s) (first {first}) keep their stage data \
                 in {before}; start with --stage-store {before} until they finish, or cancel them",
                unfinished.len()
            )));
        }
        let mut batch = Batch::default();
        batch.put(Tree::Meta, STAGE_STORE_KEY, now.clone().into_bytes());
        self.write(batch)?;
        // Durable before anything is served: the group commit counts what
        // the store holds at start as flushed.
        self.store.flush()?;
        tracing::info!(before = %before, now = %now, "stage store changed");
        Ok(own)
    }

    /// What this data directory keeps of its stage-store prefix's owner
    /// records (see [`STAGE_OWNER_KEY`]).
    pub fn stage_owner_kept(&self) -> Result<KeptStageOwner> {
        KeptStageOwner::read(&*self.store)
    }

    /// Records, durably, that a restore into this data directory took its
    /// prefix at owner epoch `epoch`.
    pub fn note_stage_owner_restored(&mut self, epoch: u64) -> Result<()> {
        let mut batch = Batch::default();
        let epoch = epoch.to_string().into_bytes();
        batch.put(Tree::Meta, STAGE_OWNER_RESTORED_KEY, epoch);
        self.write(batch)?;
        self.store.flush()?;
        Ok(())
    }

    /// Draws the nonce to take the prefix with and records it, durably,
    /// beside `held` (the nonce of the latest owner record, if this data
    /// directory wrote it), before the owner record is written.
    pub fn begin_stage_owner_claim(&mut self, held: Option<&str>) -> Result<String> {
        let nonce = random_hex()?;
        let kept = [held, Some(nonce.as_str())];
        self.note_stage_owner_nonces(kept.iter().flatten().copied())?;
        Ok(nonce)
    }

    /// Records, durably, that the prefix is held with `nonce` alone.
    pub fn end_stage_owner_claim(&mut self, nonce: &str) -> Result<()> {
        self.note_stage_owner_nonces(std::iter::once(nonce))
    }

    fn note_stage_owner_nonces<'a>(&mut self, nonces: impl Iterator<Item = &'a str>) -> Result<()> {
        let nonces: Vec<&str> = nonces.collect();
        let mut batch = Batch::default();
        batch.put(Tree::Meta, STAGE_OWNER_KEY, nonces.join(" ").into_bytes());
        // Durable before the owner record is written: the caller's call
        // answers only once the group commit has flushed it (no fsync under
        // the scheduler's lock).
        self.write(batch)
    }

    /// Of `keys` (blobs listed in the stage store), those nothing committed
    /// refers to and no attempt still running may: blobs of finished or
    /// deleted jobs, of stages no longer read, of attempts that ended without
    /// their blob being committed. The caller deletes them once this call's
    /// state is durable. Keys the runner did not write are left alone.
    pub fn unreferenced_blobs(&self, keys: Vec<String>) -> Result<Vec<String>> {
        let jobs: HashMap<String, &JobEntry> = self
            .jobs
            .iter()
            .filter(|e| !e.rec.state.is_finished())
            .map(|e| (job_prefix(&e.rec.id), e))
            .collect();
        // The committed blobs of kept stages, read once per call, and the
        // keys each earlier stage's outputs lie in, gathered once per call.
        let mut kept = KeptBlobs::new();
        let mut in_packs: HashMap<(String, u32), HashSet<String>> = HashMap::new();
        let mut garbage = Vec::new();
        for key in keys {
            if let Some((prefix, stage)) = pack_owner(&key) {
                let in_use = match jobs.get(&prefix) {
                    Some(entry) => {
                        self.pack_in_use(entry, &key, stage, &mut kept, &mut in_packs)?
                    }
                    None => false,
                };
                if !in_use {
                    garbage.push(key);
                }
                continue;
            }
            let Some((prefix, stage, index, attempt)) = blob_owner(&key) else {
                continue;
            };
            let Some(entry) = jobs.get(&prefix) else {
                garbage.push(key);
                continue;
            };
            if !self.blob_in_use(entry, &key, stage, index, attempt, &mut kept)? {
                garbage.push(key);
            }
        }
        Ok(garbage)
    }

    /// A pack holds the outputs of several shards of one stage: it is in use
    /// while that stage is current (the reports of a pack just written may
    /// still be on their way) or later (not known yet), and after it while
    /// any committed output of a stage the job still holds lies in it.
    fn pack_in_use(
        &self,
        entry: &JobEntry,
        key: &str,
        stage: u32,
        kept: &mut KeptBlobs,
        in_packs: &mut HashMap<(String, u32), HashSet<String>>,
    ) -> Result<bool> {
        if stage >= entry.rec.stage {
            return Ok(true);
        }
        let job = &entry.rec.id;
        let keys = match in_packs.entry((job.clone(), stage)) {
            Entry::Occupied(keys) => keys.into_mut(),
            Entry::Vacant(slot) => {
                let store = self.store.as_ref();
                slot.insert(entry.outputs.committed_keys(store, job, stage, kept)?)
            }
        };
        Ok(keys.contains(key))
    }

    fn blob_in_use(
        &self,
        entry: &JobEntry,
        key: &str,
        stage: u32,
        index: u32,
        attempt: u64,
        kept: &mut KeptBlobs,
    ) -> Result<bool> {
        let job = &entry.rec.id;
        let current = entry.rec.stage;
        if stage > current || (stage == current && !entry.shards_loaded) {
            // Not known yet: left for a later sweep.
            return Ok(true);
        }
        if stage == current {
            if index as usize >= entry.shards.len() {
                return Ok(false);
            }
            let shard = &entry.shards[index as usize];
            // A finished shard needs its committed output only: its
            // checkpoints (of a pass of gigabytes, say) go now, not when the
            // stage ends.
            if shard.state == ShardState::Done {
                let output = match entry.outputs.accepted(index) {
                    Some(output) => Some(output.to_vec()),
                    None => self
                        .store
                        .get(Tree::Blobs, &output_key(job, stage, index, 0))?,
                };
                return Ok(committed_key(output.as_deref()).as_deref() == Some(key));
            }
            // The latest attempt may be running: its blobs may be in
            // flight, but not its checkpoints before the one committed,
            // which no one reads again (a pass vector of gigabytes a minute,
            // at hex side 19: they go now, not when the attempt ends).
            if attempt == shard.attempt {
                let Some(n) = checkpoint_number(key) else {
                    return Ok(true);
                };
                let committed = self
                    .store
                    .get(Tree::Blobs, &checkpoint_blob_key(job, stage, index))?;
                let superseded = committed_key(committed.as_deref()).is_some_and(|c| {
                    let same_attempt = blob_owner(&c).is_some_and(|owner| owner.3 == attempt);
                    same_attempt && checkpoint_number(&c).is_some_and(|last| n < last)
                });
                return Ok(!superseded);
            }
            // An earlier attempt's checkpoint that a later attempt resumes
            // from.
            let checkpoint = self
                .store
                .get(Tree::Blobs, &checkpoint_blob_key(job, stage, index))?;
            return Ok(committed_key(checkpoint.as_deref()).as_deref() == Some(key));
        }
        let committed =
            entry
                .outputs
                .committed_blob(self.store.as_ref(), job, stage, index, kept)?;
        Ok(committed.as_deref() == Some(key))
    }
}

/// Sixteen random hex digits: a prefix's name, an owner record's nonce.
fn random_hex() -> Result<String> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random)
        .map_err(|e| CoordinatorError::Internal(format!("no randomness: {e}")))?;
    Ok(tally_wire::digest::to_hex(&random))
}
