//! Stage barriers. When every shard of a job's current stage is done, the kind
//! says what follows from the stage's partials (deterministically, so deciding
//! again after a crash yields the same shards): the next stage's shards, or
//! the job's answer. The stage output that the next stage reads is kept in
//! the store until the stage after it is done, and read from there a chunk at
//! a time; a frontier plan's shards each read one bucket of it
//! (`tally_kernels::buckets`).

use std::collections::VecDeque;

use tally_kinds::kind::Barrier;
use tally_kinds::values::{EncodedPartial, EncodedTask, PlannedShard};
use tally_stage::BlobRef;

use crate::error::{CoordinatorError, Result};
use crate::records::{JobState, ShardRecord, decode, encode, job_key, shard_key};
use crate::store::{Batch, Tree};

use super::events::Event;
use super::job::JobEntry;
use super::room::{check_room, note_room_wait};
use super::stage_outputs::{
    FinishedStage, HeldRead, StageBlobs, StageOutputs, StageSource, retained_stages,
};
use super::state::Scheduler;

impl Scheduler {
    /// If every shard of the job's current stage is done: plan the next stage, or
    /// finish the job. Adds the writes to `batch` and updates memory; the caller
    /// commits (and restores memory if the commit fails).
    pub(super) fn advance_if_stage_done(
        &mut self,
        job: &str,
        batch: &mut Batch,
        now_ms: u64,
    ) -> Result<()> {
        let store = self.store.clone();
        let external = self.config.keeps_spare_stage();
        let slots = self.workers.live(now_ms).map(|(_, w)| w.slots).sum();
        let slot_memory = self.workers.least_slot_memory(now_ms);
        let stage_room = self.config.stage_room.clone();
        let entry = self.jobs.known(job);
        if entry.rec.state.is_finished() || !entry.shards_loaded || !entry.shards.all_done() {
            return Ok(());
        }
        let done =
            entry
                .outputs
                .gather(store.as_ref(), entry.rec.stage, entry.shards.as_slice())?;
        let partials: Vec<EncodedPartial> = entry
            .shards
            .iter()
            .map(|s| s.partial.clone())
            .collect::<Option<_>>()
            .ok_or_else(|| CoordinatorError::Internal("a done shard has no result".into()))?;
        let mut plan = entry.rec.plan.clone();
        // The free space is read once a barrier: the kind sizes its buckets
        // by it and the barrier waits by it.
        let barrier = Barrier {
            slots,
            slot_memory,
            stage_bytes: done.approx_bytes(),
            stage_room: stage_room.and_then(|source| source.0.free_bytes()),
        };
        let next = entry
            .rec
            .spec
            .next_stage(&mut plan, entry.rec.stage, &partials, barrier);
        let next_stage = entry.rec.stage + 1;
        let next = next.and_then(|next| {
            let keep = match &next {
                Some(_) => retained_stages(&entry.rec.spec, &plan, next_stage, external)?,
                None => Vec::new(),
            };
            Ok((next, keep))
        });
        match next {
            // The previous stage's output is no longer read once this one is
            // done, unless the kind keeps it for a later stage.
            Ok((Some((planned, note)), keep)) => {
                let freed = match entry.outputs.input_stage() {
                    Some(previous) if !keep.contains(&previous) => {
                        entry.outputs.input_bytes().unwrap_or(0)
                    }
                    _ => 0,
                };
                let done_bytes = barrier.stage_bytes;
                let wait = check_room(entry, barrier.stage_room, done_bytes, freed);
                let waits = wait.is_some();
                note_room_wait(entry, wait, batch, now_ms);
                if waits {
                    return Ok(());
                }
                entry.rec.plan = plan;
                entry.outputs.pass_barrier(done, true, &keep, job, batch);
                let note = with_stage_bytes(note, done_bytes);
                start_next_stage(entry, planned, &note, batch, now_ms)
            }
            Ok((None, _)) => {
                entry.rec.plan = plan;
                entry.outputs.pass_barrier(done, false, &[], job, batch);
                finish_job(entry, batch, now_ms);
                Ok(())
            }
            // The kind cannot go on (a level past its limits): retrying the
            // barrier would fail the same way, so the job fails, saying why.
            Err(e) => {
                entry.outputs.pass_barrier(done, false, &[], job, batch);
                let message = format!("after stage {}: {e}", entry.rec.stage);
                fail_job(entry, &message, batch, now_ms);
                Ok(())
            }
        }
    }

    /// The output of the previous stage, which the current stage reads, or of
    /// a stage the kind keeps, for a reader to fetch outside the lock: all of
    /// it merged, or one bucket of every shard's output
    /// ([`StageSource::pieces`]).
    pub fn stage_source(&mut self, job: &str, stage: u32) -> Result<StageSource> {
        let finished = self.readable_stage(job, stage)?;
        Ok(StageSource::new(self.store.clone(), job, finished))
    }

    /// [`Scheduler::stage_source`]'s read whole, under the lock: for tests
    /// and small stages only (the service streams it).
    pub fn stage_data(&mut self, job: &str, stage: u32, bucket: Option<u32>) -> Result<Vec<u8>> {
        self.stage_source(job, stage)?
            .read_all(bucket, &HeldRead::No)
    }

    /// With a stage store outside the coordinator: the blob of each shard of
    /// a readable stage (see [`Scheduler::stage_data`]), in order (`None`
    /// for a shard that wrote no output, or whose output is held here), and
    /// the shards whose outputs this coordinator holds itself: small ones
    /// that came inline, or written before it had a stage store (read with
    /// [`StageSource::pieces`], `held_only`).
    pub fn stage_blobs(&mut self, job: &str, stage: u32) -> Result<StageBlobs> {
        Ok(self.readable_stage(job, stage)?.blobs())
    }

    /// One shard of a readable stage, for a worker that computes its output
    /// again: its task, accepted partial and committed blob.
    pub fn stage_shard(
        &mut self,
        job: &str,
        stage: u32,
        index: u32,
    ) -> Result<(EncodedTask, EncodedPartial, BlobRef)> {
        let blob = self
            .stage_blobs(job, stage)?
            .blobs
            .into_iter()
            .nth(index as usize)
            .flatten()
            .ok_or_else(|| {
                CoordinatorError::NotFound(format!(
                    "stage {stage}, shard {index} of job {job} has no output in the stage store"
                ))
            })?;
        let bytes = self
            .store
            .get(Tree::Shards, &shard_key(job, stage, index))?
            .ok_or_else(|| {
                CoordinatorError::Store(format!(
                    "stage {stage}, shard {index} of job {job} is missing"
                ))
            })?;
        let shard: ShardRecord = decode("shard", &bytes)?;
        let partial = shard.partial.ok_or_else(|| {
            CoordinatorError::Internal(format!(
                "stage {stage}, shard {index} is done but has no result"
            ))
        })?;
        Ok((shard.task, partial, blob))
    }

    /// A stage whose output can be read: the one before the current stage,
    /// or one that is kept (read from the store on its first use and held
    /// until another is read).
    fn readable_stage(&mut self, job: &str, stage: u32) -> Result<FinishedStage> {
        let store = self.store.clone();
        let entry = self.jobs.get_mut(job)?;
        let unreadable = |entry: &JobEntry| {
            CoordinatorError::FailedPrecondition(format!(
                "job {job} has no readable output of stage {stage} (it is at stage {}, {})",
                entry.rec.stage,
                entry.rec.state.name()
            ))
        };
        if entry.rec.state.is_finished() {
            return Err(unreadable(entry));
        }
        match entry.outputs.readable(store.as_ref(), job, stage)? {
            Some(finished) => Ok(finished),
            None => Err(unreadable(entry)),
        }
    }
}

/// The stage event's note with the bytes of stage data the stage wrote
/// (about: whole stored chunks), when it wrote any.
fn with_stage_bytes(note: String, bytes: u64) -> String {
    match (bytes, note.is_empty()) {
        (0, _) => note,
        (_, true) => format!("stage data written: {bytes} bytes"),
        (_, false) => format!("{note}; stage data written: {bytes} bytes"),
    }
}

/// Starts the stage after the current one with the `planned` shards; `note`
/// goes with its `stage` event.
fn start_next_stage(
    entry: &mut JobEntry,
    planned: Vec<PlannedShard>,
    note: &str,
    batch: &mut Batch,
    now_ms: u64,
) -> Result<()> {
    let next = entry.rec.stage + 1;
    entry.shards_done_before += entry.shards.len() as u64;
    entry.work_done_before += entry.shards.work_total();
    entry.rec.stage = next;
    install_stage(entry, next, planned, batch);
    batch.put(Tree::Jobs, job_key(&entry.rec.id), encode(&entry.rec));
    let event = Event {
        stage: next,
        ..Event::job("stage", note)
    };
    entry.log(batch, now_ms, event);
    Ok(())
}

/// Computes the answer from the last stage's partials; a job whose partials do
/// not combine fails.
fn finish_job(entry: &mut JobEntry, batch: &mut Batch, now_ms: u64) {
    let stage = entry.rec.stage;
    let partials: Option<Vec<&EncodedPartial>> =
        entry.shards.iter().map(|s| s.partial.as_ref()).collect();
    let mut rec = entry.rec.clone();
    let answer = partials
        .ok_or_else(|| tally_kinds::Error::Internal("a done shard has no result".into()))
        .and_then(|partials| rec.spec.finish(&rec.plan, &partials));
    let (kind, message) = match answer {
        Ok(answer) => {
            rec.state = JobState::Succeeded;
            rec.answer = Some(answer.line.clone());
            rec.details = Some(answer.details);
            ("succeeded", answer.line)
        }
        Err(e) => {
            rec.state = JobState::Failed;
            rec.error = Some(format!("could not combine the results: {e}"));
            ("failed", e.to_string())
        }
    };
    let event = Event {
        stage,
        ..Event::job(kind, &message)
    };
    entry.log(batch, now_ms, event);
    rec.finished_ms = Some(now_ms);
    batch.put(Tree::Jobs, job_key(&rec.id), encode(&rec));
    entry.rec = rec;
}

/// Fails the job with `message`, at a barrier.
fn fail_job(entry: &mut JobEntry, message: &str, batch: &mut Batch, now_ms: u64) {
    let mut rec = entry.rec.clone();
    rec.state = JobState::Failed;
    rec.error = Some(message.to_string());
    rec.finished_ms = Some(now_ms);
    let event = Event {
        stage: rec.stage,
        ..Event::job("failed", message)
    };
    entry.log(batch, now_ms, event);
    batch.put(Tree::Jobs, job_key(&rec.id), encode(&rec));
    entry.rec = rec;
}

/// Replaces the entry's current shards by a new stage's, all pending.
pub(super) fn install_stage(
    entry: &mut JobEntry,
    stage: u32,
    planned: Vec<PlannedShard>,
    batch: &mut Batch,
) {
    install_stage_unwritten(entry, stage, planned);
    write_shard_records(entry, 0..entry.shards.len(), batch);
}

/// Puts the planned shards of `stage` into `entry` without writing them:
/// the caller writes them (`write_shard_records`), in parts if many.
pub(super) fn install_stage_unwritten(
    entry: &mut JobEntry,
    stage: u32,
    planned: Vec<PlannedShard>,
) {
    // The stage's table is kept, not copied, until the change that replaces
    // it is written (`StageSnapshot`): a million-shard stage is not held twice.
    entry.replaced_shards = Some(std::mem::take(&mut entry.shards));
    entry.pending.clear();
    entry.outputs.start_stage(planned.len());
    for (i, p) in planned.into_iter().enumerate() {
        let shard = ShardRecord::planned(&entry.rec.id, stage, i as u32, p.task, p.work_total);
        entry.shards.push(shard);
        entry.pending.push_back(i as u32);
    }
}

/// Adds the records of the shards at `positions` to `batch`.
pub(super) fn write_shard_records(
    entry: &JobEntry,
    positions: std::ops::Range<usize>,
    batch: &mut Batch,
) {
    for position in positions {
        let shard = &entry.shards[position];
        batch.put(
            Tree::Shards,
            shard_key(&entry.rec.id, shard.stage, shard.index),
            encode(shard),
        );
    }
}

/// What a stage transition changes in memory, to undo it if its commit fails.
/// The shard table is not copied: a stage transition moves it aside
/// (`JobEntry::replaced_shards`) and a restore moves it back.
pub(super) struct StageSnapshot {
    pending: VecDeque<u32>,
    shards_done_before: u64,
    work_done_before: u64,
    outputs: StageOutputs,
}

impl JobEntry {
    pub(super) fn snapshot_stage(&self) -> StageSnapshot {
        StageSnapshot {
            pending: self.pending.clone(),
            shards_done_before: self.shards_done_before,
            work_done_before: self.work_done_before,
            outputs: self.outputs.clone(),
        }
    }

    pub(super) fn restore_stage(&mut self, s: StageSnapshot) {
        if let Some(shards) = self.replaced_shards.take() {
            self.shards = shards;
        }
        self.pending = s.pending;
        self.shards_done_before = s.shards_done_before;
        self.work_done_before = s.work_done_before;
        self.outputs = s.outputs;
    }
}
