//! Handing shards to workers. A lease is soft state: granting one writes
//! nothing that must be durable before it is returned. Its attempt number
//! grows in memory and carries the load's epoch, which was committed before
//! the first lease of that load, so attempt numbers never repeat, even across
//! restarts: they are fencing tokens, and a restart makes every earlier lease
//! stale. Only pending shards are leased: each to the owner furthest below
//! their fair share (`sharing`), and an owner's highest priority first, then
//! in turn.

use tally_stage::BlobRef;
use tally_wire::lease::{Attempt, LeaseId};
use tally_wire::limits::{INLINE_CHECKPOINT_BYTES, MAX_INLINE_CHECKPOINTS_PER_RESPONSE};

use crate::error::{CoordinatorError, Result};
use crate::records::{
    JobState, LARGER_WORKER_PATIENCE_MS, ShardRecord, ShardState, checkpoint_blob_key,
    checkpoint_key, encode, job_key,
};
use crate::store::{Batch, Store, Tree};
use crate::users::User;
use std::sync::Arc;

use super::events::Event;
use super::job::{JobEntry, MAX_LEASE_AHEAD};
use super::jobs::OwnerQueue;
use super::protocol::Grant;
use super::state::Scheduler;

/// Who asks for work, and how much it can take.
struct LeaseRequest<'a> {
    worker: &'a str,
    free_slots: u32,
    /// Shards the worker may queue beyond its free slots: granted only of
    /// jobs with short shards (`ShardTime::lease_ahead`).
    ahead: u32,
    /// The memory the worker may use for shards.
    memory_budget: u64,
    /// The largest memory budget of a live worker.
    largest_live_budget: u64,
    /// What the worker runs besides the built-in kinds.
    capabilities: Vec<String>,
    now_ms: u64,
    /// The scheduler's epoch, the high half of the attempts leased now.
    epoch: u64,
}

impl LeaseRequest<'_> {
    /// How many more shards of the job this worker may hold now: none if
    /// the job needs what the worker does not offer (`--allow-wasm`), else
    /// those its memory budget holds at once (by the job's estimate), less those it
    /// holds already and those this request leased; and no more than the
    /// job's `max_slots` leave, less its leases on every worker.
    fn room_for(&self, entry: &JobEntry, staged: &StagedLeases) -> usize {
        if let Some(needed) = entry.rec.spec.capability()
            && !self.capabilities.iter().any(|c| c == needed)
        {
            return 0;
        }
        let staged_here = staged
            .updated
            .iter()
            .filter(|(job, _)| *job == entry.rec.id)
            .count();
        let in_memory = match entry.memory() {
            None => usize::MAX,
            Some(memory) => {
                let fit =
                    usize::try_from(memory.shards_within(self.memory_budget)).unwrap_or(usize::MAX);
                let held = entry
                    .shards
                    .leased()
                    .filter(|&i| entry.shards[i].worker.as_deref() == Some(self.worker))
                    .count();
                fit.saturating_sub(held + staged_here)
            }
        };
        match entry.rec.spec.options().max_slots {
            0 => in_memory,
            cap => in_memory
                .min((cap as usize).saturating_sub(entry.shards.leased_count() + staged_here)),
        }
    }

    fn is_full(&self, staged: &StagedLeases) -> bool {
        staged.grants.len() as u32 >= self.free_slots + self.ahead
    }

    /// How many of the job's shards this request may take: the free slots,
    /// and as many more as the job's shards are short enough to queue.
    fn cap_for(&self, entry: &JobEntry) -> usize {
        let ahead = self.ahead.min(entry.shard_time.lease_ahead());
        (self.free_slots + ahead) as usize
    }

    /// Whether this worker may take the shard now: its backoff is over, a
    /// replica comes from a worker that has not computed the shard, and a
    /// shard whose workers vanished while running it goes only to a worker
    /// with a larger memory budget than theirs, or, when none is live after
    /// [`LARGER_WORKER_PATIENCE_MS`], to the largest live one.
    fn may_take(&self, shard: &ShardRecord) -> bool {
        shard.not_before_ms <= self.now_ms
            && !self.gave_a_replica(shard)
            && shard.needs_budget_over().is_none_or(|over| {
                self.memory_budget > over
                    || (self.largest_live_budget <= over
                        && self.memory_budget >= self.largest_live_budget
                        && self.now_ms >= shard.not_before_ms + LARGER_WORKER_PATIENCE_MS)
            })
    }

    /// Whether this worker has computed a replica of the shard already.
    fn gave_a_replica(&self, shard: &ShardRecord) -> bool {
        shard.replicas.iter().any(|r| r.worker == self.worker)
    }
}

/// One owner's place in a lease request: their jobs, where their turn
/// stands, and what orders them against the other owners.
struct OwnerTurns {
    user: Arc<User>,
    queue: OwnerQueue,
    /// The priority group and the job in it whose turn is next.
    group: usize,
    cursor: usize,
    /// Shards of their jobs leased, this request's included.
    held: u32,
    /// Decayed slot-milliseconds over weight.
    usage: f64,
    /// None of their jobs has a shard for this request.
    done: bool,
}

impl OwnerTurns {
    fn under_slot_quota(&self) -> bool {
        self.user.quotas.slots.is_none_or(|most| self.held < most)
    }

    /// Least usage over weight first; then fewest slots held over weight (a
    /// request of several slots, or owners new to the cluster, share by
    /// weight), then the name.
    fn order(&self, other: &OwnerTurns) -> std::cmp::Ordering {
        let share = |t: &OwnerTurns| f64::from(t.held) / f64::from(t.user.weight.max(1));
        (self.usage.total_cmp(&other.usage))
            .then(share(self).total_cmp(&share(other)))
            .then_with(|| self.queue.owner.cmp(&other.queue.owner))
    }
}

/// Leases prepared but not yet committed: the in-memory shards change only
/// after the commit.
#[derive(Default)]
struct StagedLeases {
    batch: Batch,
    grants: Vec<Grant>,
    /// The leased shards' new records, by job.
    updated: Vec<(String, ShardRecord)>,
    /// Jobs that start running with these leases.
    started: Vec<String>,
    /// Checkpoint bytes the grants carry so far.
    inline_checkpoints: usize,
}

impl Scheduler {
    /// Leases up to `free_slots` ready shards to `worker`, each to the owner
    /// furthest below their fair share (within their slot quota); an owner's
    /// highest priority first, and their jobs of equal priority in turn,
    /// starting after the job served last, so that one job's many shards
    /// never hold back the others. Nothing here needs a flush before the grants are
    /// returned: a lease's attempt is of this load's epoch, committed when it
    /// started; a job's start is applied for the next flush, and the `leased`
    /// events wait for the job's next batch (`events.rs`), so a crash that
    /// loses them loses only soft state.
    pub fn lease(&mut self, worker: &str, free_slots: u32, now_ms: u64) -> Result<Vec<Grant>> {
        self.lease_ahead(worker, free_slots, 0, now_ms)
    }

    /// Leases like [`Scheduler::lease`], and up to `ahead` shards more for the
    /// worker to queue, of jobs whose shards are short: one call then
    /// carries many of them.
    pub fn lease_ahead(
        &mut self,
        worker: &str,
        free_slots: u32,
        ahead: u32,
        now_ms: u64,
    ) -> Result<Vec<Grant>> {
        if free_slots + ahead == 0 {
            return Ok(Vec::new());
        }
        // Work goes only to a worker that introduced itself: a made-up id gets
        // nothing. A worker forgotten after a long silence, or unknown to a
        // restarted coordinator, registers again and then leases.
        let largest_live_budget = self
            .workers
            .live(now_ms)
            .map(|(_, w)| w.memory_budget())
            .max()
            .unwrap_or(0);
        let Some(info) = self.workers.heard_from(worker, now_ms) else {
            return Err(CoordinatorError::NotFound(
                "this worker is not registered (or was forgotten): register first".into(),
            ));
        };
        let mut request = LeaseRequest {
            worker,
            free_slots,
            ahead: ahead.min(MAX_LEASE_AHEAD),
            memory_budget: info.memory_budget(),
            largest_live_budget,
            capabilities: info.capabilities.clone(),
            now_ms,
            epoch: self.epoch,
        };
        let mut staged = StagedLeases::default();
        let mut turns: Vec<OwnerTurns> = (self.jobs.leasing_order().into_iter())
            .map(|queue| {
                let user = self.sharing.users.owner(&queue.owner);
                OwnerTurns {
                    held: self.slots_held_by(&queue.owner),
                    usage: self.usage_over_weight(&queue.owner, user.weight),
                    user,
                    queue,
                    group: 0,
                    cursor: 0,
                    done: false,
                }
            })
            .collect();
        // Shards queued on a worker run in the order they were leased, past
        // the fair share's say: while several owners have work, a worker
        // leases only what its free slots run now.
        if turns.len() > 1 {
            request.ahead = 0;
        }
        // A shard at a time to the owner furthest below their share (see
        // `sharing`), until the request is full or no owner leases more.
        while !request.is_full(&staged) {
            let next = (turns.iter_mut())
                .filter(|t| !t.done && t.under_slot_quota())
                .min_by(|a, b| a.order(b));
            let Some(turn) = next else {
                break;
            };
            match self.lease_one_of(turn, &request, &mut staged)? {
                true => turn.held += 1,
                false => turn.done = true,
            }
        }
        self.stage_started_jobs(&mut staged, now_ms);
        if staged.grants.is_empty() && staged.batch.is_empty() {
            return Ok(Vec::new());
        }
        self.commit_leases(staged, now_ms)
    }

    /// Leases one shard of the owner's jobs: their highest priority group
    /// first, its jobs in turn from the one after the last served; false
    /// when none of their jobs has a shard for this request.
    fn lease_one_of(
        &mut self,
        turn: &mut OwnerTurns,
        request: &LeaseRequest,
        staged: &mut StagedLeases,
    ) -> Result<bool> {
        while let Some(group) = turn.queue.groups.get(turn.group) {
            for step in 0..group.len() {
                let at = (turn.cursor + step) % group.len();
                let (seq, id) = &group[at];
                let had = staged.grants.len();
                self.stage_job_leases(id, request, staged, 1)?;
                if staged.grants.len() > had {
                    self.jobs.served(&turn.queue.owner, *seq);
                    turn.cursor = at + 1;
                    return Ok(true);
                }
            }
            turn.group += 1;
            turn.cursor = 0;
        }
        Ok(false)
    }

    /// Whether some shard could be leased now.
    pub fn has_ready_work(&self, now_ms: u64) -> bool {
        self.jobs.iter().any(|e| {
            matches!(e.rec.state, JobState::Queued | JobState::Running)
                && (!e.shards_loaded
                    || e.pending
                        .iter()
                        .map(|&i| &e.shards[i as usize])
                        .any(|s| s.state == ShardState::Pending && s.not_before_ms <= now_ms))
        })
    }

    /// Leases up to `most` of the job's ready shards, while the request is
    /// not full.
    fn stage_job_leases(
        &mut self,
        id: &str,
        request: &LeaseRequest,
        staged: &mut StagedLeases,
        most: usize,
    ) -> Result<()> {
        self.ensure_shards(id)?;
        let store = self.store.clone();
        let entry = self.jobs.known(id);
        let taken = staged.updated.iter().filter(|(job, _)| job == id).count();
        let most = most
            .min(request.room_for(entry, staged))
            .min(request.cap_for(entry).saturating_sub(taken));
        let mut skipped = 0;
        let mut leased = 0;
        while skipped < entry.pending.len() && !request.is_full(staged) && leased < most {
            let index = entry.pending[skipped];
            let shard = &entry.shards[index as usize];
            // Only pending shards are leased: a shard done while it was
            // queued (its expired attempt reported) is dropped from the queue.
            if shard.state != ShardState::Pending {
                entry.pending.remove(skipped);
                continue;
            }
            if !request.may_take(shard) {
                let too_small = shard
                    .needs_budget_over()
                    .is_some_and(|over| request.memory_budget <= over);
                if !entry.waiting_noted && (request.gave_a_replica(shard) || too_small) {
                    note_waiting(entry, index, request, staged);
                }
                skipped += 1;
                continue;
            }
            let grant = lease_shard(entry, store.as_ref(), index, request, staged)?;
            staged.grants.push(grant);
            entry.pending.remove(skipped);
            leased += 1;
        }
        Ok(())
    }

    /// Jobs that got their first lease start running now (recorded in the same batch).
    fn stage_started_jobs(&self, staged: &mut StagedLeases, now_ms: u64) {
        for (id, _) in &staged.updated {
            let entry = self.jobs.get(id).expect("a job leased from");
            if entry.rec.state == JobState::Queued && !staged.started.contains(id) {
                let mut rec = entry.rec.clone();
                rec.state = JobState::Running;
                rec.started_ms = Some(now_ms);
                staged.batch.put(Tree::Jobs, job_key(id), encode(&rec));
                staged.started.push(id.clone());
            }
        }
    }

    /// Applies the staged writes (the `leased` events, jobs started) and
    /// then the leases in memory; if the apply fails, nothing was handed out
    /// and the shards go back to the queue.
    fn commit_leases(&mut self, staged: StagedLeases, now_ms: u64) -> Result<Vec<Grant>> {
        let written = match staged.batch.is_empty() {
            true => Ok(()),
            false => self.write(staged.batch),
        };
        if let Err(e) = written {
            for (id, shard) in staged.updated {
                self.jobs.known(&id).pending.push_front(shard.index);
            }
            for entry in self.jobs.iter_mut() {
                entry.pending.make_contiguous().sort();
            }
            return Err(e);
        }
        for (id, shard) in staged.updated {
            let i = shard.index as usize;
            self.jobs.known(&id).shards.set(i, shard);
        }
        for id in staged.started {
            let entry = self.jobs.known(&id);
            entry.rec.state = JobState::Running;
            entry.rec.started_ms = Some(now_ms);
        }
        Ok(staged.grants)
    }
}

/// Stages the next attempt of shard `index` for the request's worker: its
/// `leased` event and the grant, with the shard's checkpoint. The shard's
/// record is not written: a lease lives in memory, and a restart makes it
/// stale.
fn lease_shard(
    entry: &mut JobEntry,
    store: &dyn Store,
    index: u32,
    request: &LeaseRequest,
    staged: &mut StagedLeases,
) -> Result<Grant> {
    let id = entry.rec.id.clone();
    let ttl = entry.rec.spec.options().lease_ttl_ms;
    let mut shard = entry.shards[index as usize].clone();
    shard.attempt = Attempt(shard.attempt).next_in(request.epoch).0;
    shard.state = ShardState::Leased;
    shard.worker = Some(request.worker.to_string());
    shard.lease_expires_ms = request.now_ms + ttl;
    shard.progress_ms = request.now_ms;
    // A large checkpoint is not read here, under the lock, nor one that
    // would take the response past its share of a message: the worker
    // fetches it apart (`FetchCheckpoint`).
    let blob_key = checkpoint_blob_key(&id, shard.stage, shard.index);
    let checkpoint_blob = match shard.has_checkpoint {
        true => store
            .get(Tree::Blobs, &blob_key)?
            .map(|bytes| {
                BlobRef::decode(&bytes).ok_or_else(|| {
                    CoordinatorError::Store(format!(
                        "the checkpoint reference of stage {}, shard {} of job {id} is malformed",
                        shard.stage, shard.index
                    ))
                })
            })
            .transpose()?,
        false => None,
    };
    let (checkpoint, checkpoint_bytes) = if shard.has_checkpoint && checkpoint_blob.is_none() {
        let key = checkpoint_key(&id, shard.stage, shard.index);
        match store.value_len(Tree::Blobs, &key)? {
            Some(len)
                if len > INLINE_CHECKPOINT_BYTES as u64
                    || staged.inline_checkpoints + len as usize
                        > MAX_INLINE_CHECKPOINTS_PER_RESPONSE =>
            {
                (Vec::new(), len)
            }
            Some(_) => {
                let checkpoint = store.get(Tree::Blobs, &key)?.unwrap_or_default();
                staged.inline_checkpoints += checkpoint.len();
                (checkpoint, 0)
            }
            None => (Vec::new(), 0),
        }
    } else {
        (Vec::new(), 0)
    };
    let grant = Grant {
        lease: LeaseId::new(id.clone(), shard.stage, shard.index, shard.attempt),
        spec: entry.rec.spec.clone(),
        task: shard.task.to_bytes(),
        checkpoint,
        checkpoint_bytes,
        checkpoint_blob,
        ttl_ms: ttl,
        work_total: shard.work_total,
    };
    let note = if shard.has_checkpoint {
        format!("from checkpoint at work {}", shard.work_done)
    } else {
        String::new()
    };
    let leased = Event::shard("leased", &shard, request.worker, &note);
    entry.defer(request.now_ms, leased);
    staged.updated.push((id, shard));
    Ok(grant)
}

/// Says once in the job's log that a replicated shard waits for a worker that
/// has not computed it: with fewer live workers than replicas, the job would
/// otherwise wait without a word.
fn note_waiting(
    entry: &mut JobEntry,
    index: u32,
    request: &LeaseRequest,
    staged: &mut StagedLeases,
) {
    let shard = &entry.shards[index as usize];
    let message = match shard.needs_budget_over() {
        Some(over) if request.memory_budget <= over => format!(
            "waiting for a worker with a memory budget over {}: the workers that ran the shard \
             vanished while running it",
            tally_kinds::kind::format_bytes(over)
        ),
        _ => format!(
            "waiting for another worker: each of the {} replicas of a shard must come from a \
             different worker",
            entry.rec.spec.options().replicas
        ),
    };
    let event = Event::shard("waiting", shard, request.worker, &message);
    entry.log(&mut staged.batch, request.now_ms, event);
    entry.waiting_noted = true;
}
