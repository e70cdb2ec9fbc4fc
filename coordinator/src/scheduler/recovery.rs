//! Rebuilding the scheduler from the store after a start or a crash.
//!
//! Every job, the shards of its current stage and its counters come back as
//! they were committed. Leases are not: they were never written, and each
//! load starts a new epoch, above every attempt leased before it, so every
//! lease handed out before is stale and its shard pending again (its work
//! resumes from the shard's last checkpoint). A barrier that was passed but
//! not acted on is acted on. A job whose stored spec this release refuses
//! fails alone (`refused`); the others load as ever.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::error::{CoordinatorError, Result};
use crate::records::shard_prefix;
use crate::records::{JobRecord, JobState, ShardRecord, ShardState};
use crate::records::{decode, encode, job_key};
use crate::store::{Batch, EPOCH_KEY, NEXT_JOB_KEY, Store, Tree};
use tally_wire::lease::Attempt;

use super::events::Event;
use super::job::JobEntry;
use super::jobs::Jobs;
use super::stage_outputs::{FinishedStage, retained_stages};
use super::state::{Scheduler, SchedulerConfig};
use super::stored::{StoredJob, next_event_seq, read_job};
use super::workers::Workers;

impl Scheduler {
    /// Rebuilds the state from the store: every job, the shards of its current
    /// stage, and its counters, in a new epoch (written before anything is
    /// leased in it): every shard not done is pending, and no attempt from
    /// before is current. Also finishes any stage barrier that was passed
    /// but not yet acted on.
    pub fn load(store: Arc<dyn Store>, config: SchedulerConfig, now_ms: u64) -> Result<Scheduler> {
        let external = config.keeps_spare_stage();
        let epoch = next_epoch(store.as_ref())?;
        let mut scheduler = Scheduler {
            store: store.clone(),
            config,
            jobs: Jobs::new(read_job_counter(store.as_ref())?),
            workers: Workers::default(),
            epoch,
            group_commit: false,
            job_ids_below: Arc::new(AtomicU64::new(u64::MAX)),
            sharing: super::accounts::Sharing::load(store.as_ref())?,
        };
        let mut lost = Vec::new();
        let mut refused = Vec::new();
        for (_, bytes) in store.scan_prefix(Tree::Jobs, b"")? {
            let rec = match read_job(&bytes)? {
                StoredJob::Checked(rec) => rec,
                // A tombstone's spec matters no more.
                StoredJob::Refused(rec, why) => {
                    match rec.deleted_ms {
                        Some(when) => scheduler.jobs.note_deleted(&rec.id, when),
                        None => refused.push((rec, why)),
                    }
                    continue;
                }
            };
            if let Some(when) = rec.deleted_ms {
                scheduler.jobs.note_deleted(&rec.id, when);
                continue;
            }
            let (entry, lost_input) = load_job(store.as_ref(), rec, external, epoch)?;
            if let Some(why) = lost_input {
                lost.push((entry.rec.id.clone(), why));
            }
            scheduler.jobs.add(entry);
        }
        for (id, why) in lost {
            scheduler.fail_for_lost_input(&id, &why, now_ms)?;
        }
        for (rec, why) in refused {
            scheduler.hold_refused(rec, why, now_ms)?;
        }
        scheduler.resume(now_ms)?;
        Ok(scheduler)
    }

    /// Reads the state back from the store after a failed apply or flush
    /// (opening the store again first if it must be): changes applied after
    /// the last good flush may be gone, and none of them was acknowledged.
    /// The workers heard from stay registered.
    pub fn reload(&mut self, now_ms: u64) -> Result<()> {
        self.store.reopen_if_broken()?;
        let mut fresh = Scheduler::load(self.store.clone(), self.config.clone(), now_ms)?;
        fresh.workers = std::mem::take(&mut self.workers);
        fresh.jobs.continue_turns(&self.jobs);
        fresh.group_commit = self.group_commit;
        fresh.sharing.continue_from(&mut self.sharing);
        *self = fresh;
        tracing::warn!("the scheduler was read back from the store after a failed write");
        Ok(())
    }

    /// The store, for the group commit that makes the scheduler's changes
    /// durable.
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Fails a job whose current stage cannot run because the output of its
    /// previous stage is gone (only a store recovered with `--recover` lacks
    /// it): its shards would read nothing.
    fn fail_for_lost_input(&mut self, id: &str, why: &str, now_ms: u64) -> Result<()> {
        let entry = self.jobs.known(id);
        let mut rec = entry.rec.clone();
        rec.state = JobState::Failed;
        rec.finished_ms = Some(now_ms);
        let message = format!(
            "the output of stage {} was lost with the damaged store ({why}); submit the job again",
            rec.stage.saturating_sub(1)
        );
        rec.error = Some(message.clone());
        let mut batch = Batch::default();
        batch.put(Tree::Jobs, job_key(id), encode(&rec));
        entry.log(&mut batch, now_ms, Event::job("failed", &message));
        entry.pending.clear();
        self.store.commit(batch)?;
        self.jobs.known(id).rec = rec;
        tracing::warn!(job = %id, "{message}");
        Ok(())
    }

    /// Commits the epoch, notes the restart in each unfinished job's log, and
    /// passes any barrier whose stage completed just before the crash.
    fn resume(&mut self, now_ms: u64) -> Result<()> {
        // Many jobs to a batch, and one flush for all: a store holds
        // thousands of queued jobs, and a flush is an fsync.
        const JOBS_PER_BATCH: usize = 1024;
        let mut epoch = Batch::default();
        epoch.put(Tree::Meta, EPOCH_KEY, self.epoch.to_be_bytes().to_vec());
        self.store.apply(epoch)?;
        let unfinished = self.jobs.unfinished();
        for ids in unfinished.chunks(JOBS_PER_BATCH) {
            let mut batch = Batch::default();
            for id in ids {
                let resumed = Event::job("resumed", "coordinator restarted");
                self.jobs.known(id).log(&mut batch, now_ms, resumed);
                self.advance_if_stage_done(id, &mut batch, now_ms)?;
            }
            self.store.apply(batch)?;
            for id in ids {
                self.jobs.known(id).replaced_shards = None;
            }
        }
        self.store.flush()
    }
}

impl Scheduler {
    /// Reads the shards of a job that was never leased (left in the store at
    /// load) and queues them; nothing for a job whose shards are in memory.
    pub(super) fn ensure_shards(&mut self, id: &str) -> Result<()> {
        let store = self.store.clone();
        let entry = self.jobs.known(id);
        if entry.shards_loaded {
            return Ok(());
        }
        load_shards(store.as_ref(), entry, &[])?;
        for position in 0..entry.shards.len() {
            if entry.shards[position].state == ShardState::Pending {
                let index = entry.shards[position].index;
                entry.pending.push_back(index);
            }
        }
        entry.shards_loaded = true;
        Ok(())
    }

    /// After a damaged store was recovered: logs a `recovered` event in every
    /// unfinished job (its progress may have gone back) and returns the ids
    /// handed out whose jobs the store no longer holds.
    pub fn note_recovery(&mut self, lost_commits: u64, now_ms: u64) -> Result<Vec<String>> {
        let lost = self.jobs.absent_ids();
        let unfinished = self.jobs.unfinished();
        let what = match lost_commits {
            0 => "lost acknowledged data".to_string(),
            n => format!("lost {n} acknowledged commits"),
        };
        let note = format!("the store {what} and was recovered; this job may redo work");
        let mut batch = Batch::default();
        for id in unfinished {
            let recovered = Event::job("recovered", &note);
            self.jobs.known(&id).log(&mut batch, now_ms, recovered);
        }
        self.store.commit(batch)?;
        Ok(lost)
    }
}

/// The epoch after the previous load's. `resume` commits it: one write a
/// load, durable before the first lease of the new epoch. (Not written here:
/// a store writes nothing before its content check, which runs meanwhile.)
fn next_epoch(store: &dyn Store) -> Result<u64> {
    let previous = match store.get(Tree::Meta, EPOCH_KEY)? {
        Some(v) => u64::from_be_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| CoordinatorError::Store("corrupt epoch".into()))?,
        ),
        None => 0,
    };
    // Epochs are the high half of a u64 attempt number.
    let epoch = previous + 1;
    if epoch > u64::from(u32::MAX) {
        return Err(CoordinatorError::Store(
            "the store's epoch counter is exhausted".into(),
        ));
    }
    Ok(epoch)
}

fn read_job_counter(store: &dyn Store) -> Result<u64> {
    match store.get(Tree::Meta, NEXT_JOB_KEY)? {
        Some(v) => {
            Ok(u64::from_be_bytes(v.as_slice().try_into().map_err(
                |_| CoordinatorError::Store("corrupt job counter".into()),
            )?))
        }
        None => Ok(1),
    }
}

/// One job as it was committed, its shards not done pending in `epoch`; and
/// why the input of its current stage cannot be read, if it cannot.
fn load_job(
    store: &dyn Store,
    rec: JobRecord,
    external: bool,
    epoch: u64,
) -> Result<(JobEntry, Option<String>)> {
    let mut entry = JobEntry::new(rec);
    let id = entry.rec.id.clone();
    // A settled job's view needs none of its shards.
    // Older outputs the kind keeps for later stages; a plan that cannot say
    // keeps none, and its readers then fail on the fetch, saying why.
    let keep = if entry.rec.state.is_finished() {
        Vec::new()
    } else {
        let rec = &entry.rec;
        retained_stages(&rec.spec, &rec.plan, rec.stage, external).unwrap_or_else(|e| {
            tracing::warn!(job = %id, error = %e, "cannot tell which stage outputs to keep");
            Vec::new()
        })
    };
    // A job never leased holds only the pending shards it was planned
    // with: they are read when a lease wants them.
    let never_leased = entry.rec.state == JobState::Queued && entry.rec.stage == 1;
    if never_leased {
        entry.shards_loaded = false;
    }
    let previous = if entry.rec.final_counts.is_some() || never_leased {
        Vec::new()
    } else {
        load_shards(store, &mut entry, &keep)?
    };
    let mut lost_input = None;
    if !previous.is_empty() && !entry.rec.state.is_finished() {
        match FinishedStage::read(store, entry.rec.stage - 1, &previous, &[]) {
            Ok(input) => entry.outputs.set_input(input),
            Err(CoordinatorError::Store(why)) => lost_input = Some(why),
            Err(e) => return Err(e),
        }
    }
    let floor = Attempt::epoch_floor(epoch).0;
    for position in 0..entry.shards.len() {
        if entry.shards[position].state == ShardState::Done {
            continue;
        }
        // A shard recorded as leased (by a checkpoint) was leased in an
        // earlier epoch: pending now, its attempt below every current one.
        entry.shards.update(position, |shard| {
            shard.state = ShardState::Pending;
            shard.worker = None;
            shard.lease_expires_ms = 0;
            shard.attempt = shard.attempt.max(floor);
        });
        entry.pending.push_back(entry.shards[position].index);
    }
    entry.next_event = next_event_seq(store, &id)?;
    Ok((entry, lost_input))
}

/// Puts the current stage's shards into `entry` and counts the earlier stages'
/// as done, and the output chunks of the stages in `keep` among its kept
/// outputs; returns the previous stage's shards (whose output the
/// current stage reads), in index order.
fn load_shards(store: &dyn Store, entry: &mut JobEntry, keep: &[u32]) -> Result<Vec<ShardRecord>> {
    let mut previous = Vec::new();
    for (_, bytes) in store.scan_prefix(Tree::Shards, &shard_prefix(&entry.rec.id))? {
        let shard: ShardRecord = decode("shard", &bytes)?;
        if shard.stage < entry.rec.stage {
            entry.shards_done_before += 1;
            entry.work_done_before += shard.work_total;
            if shard.stage + 1 == entry.rec.stage {
                previous.push(shard);
            } else if keep.contains(&shard.stage) {
                entry
                    .outputs
                    .keep_chunks(shard.stage, shard.index, shard.output_chunks);
            }
        } else if shard.stage == entry.rec.stage {
            entry.shards.push(shard);
        }
    }
    entry.shards.sort_by_index();
    entry.outputs.start_stage(entry.shards.len());
    previous.sort_by_key(|s| s.index);
    Ok(previous)
}
