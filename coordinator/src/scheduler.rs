//! The scheduler: the synchronous state machine of jobs, stages, shards and leases.
//!
//! Invariants (see ARCHITECTURE.md, "The checkpoint protocol"):
//! - every change that a client or worker may rely on is written to the store as
//!   one batch, and the store has flushed it before the call returns;
//! - a shard's `attempt` only grows, and is persisted before the lease that
//!   carries it is handed out, so two leases never share an attempt number, even
//!   across coordinator restarts;
//! - a result is accepted only from the shard's current attempt, once: the shard
//!   becomes `Done` in the same batch that stores its partial and output;
//! - a stage's shards are planned only when every shard of the previous stage is
//!   done (the barrier), deterministically from the spec, so planning again after
//!   a crash yields the same shards.
//!
//! The in-memory state is derived from the store at [`Scheduler::load`]; nothing
//! that matters lives only in memory except lease renewals (a restart gives every
//! outstanding lease a fresh TTL) and live progress.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tally_common::proto;
use tally_common::spec::ValidSpec;
use tally_common::values::{EncodedPartial, JobPlan, PlannedShard};

use crate::records::{
    self, EventRecord, JobRecord, JobState, ReplicaRecord, ShardRecord, ShardState, checkpoint_key,
    decode, encode, event_key, event_prefix, job_key, output_key, shard_key, shard_prefix,
};
use crate::store::{Batch, Store, Tree};
use crate::{CoordinatorError, Result};

/// Output chunks are stored in blobs of at most this size.
pub const OUTPUT_CHUNK: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// First retry delay after a failed attempt; doubles per failure.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            backoff_base_ms: 250,
            backoff_max_ms: 10_000,
        }
    }
}

/// One job and the shards of its current stage.
struct JobEntry {
    rec: JobRecord,
    shards: Vec<ShardRecord>,
    /// Indexes of pending shards, in order.
    pending: VecDeque<u32>,
    /// Shards and work finished in earlier stages.
    shards_done_before: u64,
    work_done_before: u64,
    next_event: u64,
    /// Accepted stage output of the current stage's shards, kept in memory so the
    /// barrier can publish it without reading the store back.
    outputs: Vec<Option<Arc<Vec<u8>>>>,
    /// The merged output of the previous stage (what the current stage reads),
    /// and the number of stored chunks of each of its shards.
    finished: Option<FinishedStage>,
}

#[derive(Clone)]
struct FinishedStage {
    stage: u32,
    data: Arc<Vec<u8>>,
    chunks: Vec<u32>,
}

impl JobEntry {
    /// A job with no shards in memory yet.
    fn new(rec: JobRecord) -> JobEntry {
        JobEntry {
            rec,
            shards: Vec::new(),
            pending: VecDeque::new(),
            shards_done_before: 0,
            work_done_before: 0,
            next_event: 0,
            outputs: Vec::new(),
            finished: None,
        }
    }

    /// Queues shard `index` for its next attempt, once.
    fn requeue(&mut self, index: u32) {
        if !self.pending.contains(&index) {
            self.pending.push_back(index);
        }
    }

    fn shards_done(&self) -> u64 {
        self.shards_done_before
            + self
                .shards
                .iter()
                .filter(|s| s.state == ShardState::Done)
                .count() as u64
    }

    fn work_done(&self) -> u64 {
        self.work_done_before
            + self
                .shards
                .iter()
                .map(|s| {
                    if s.state == ShardState::Done {
                        s.work_total
                    } else {
                        s.work_done.min(s.work_total)
                    }
                })
                .sum::<u64>()
    }
}

#[derive(Clone, Debug)]
pub struct WorkerInfo {
    pub hostname: String,
    pub slots: u32,
    pub version: String,
    pub last_seen_ms: u64,
}

/// A lease handed to a worker.
#[derive(Clone, Debug)]
pub struct Grant {
    pub lease_id: String,
    pub job: String,
    pub stage: u32,
    pub index: u32,
    pub attempt: u64,
    pub spec: ValidSpec,
    pub task: Vec<u8>,
    pub checkpoint: Vec<u8>,
    pub ttl_ms: u64,
    pub work_total: u64,
}

/// One report of a shard attempt, as received from a worker.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub worker: String,
    pub lease_id: String,
    /// The last checkpoint of the report: (state, partial, work done).
    pub checkpoint: Option<(Vec<u8>, Vec<u8>, u64)>,
    pub output: Vec<u8>,
    pub result: Option<(Vec<u8>, u64)>,
    pub failure: Option<ReportedFailure>,
}

#[derive(Clone, Debug)]
pub struct ReportedFailure {
    pub message: String,
    pub permanent: bool,
    pub handed_back: bool,
}

/// What the scheduler tells the worker after a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOutcome {
    /// The worker should stop working on this shard.
    pub stop: bool,
    /// The report's result was stored (as the shard's result or a replica); a
    /// result for a job that is already finished is answered with `stop` and
    /// dropped.
    pub accepted: bool,
}

pub struct Scheduler {
    store: Arc<dyn Store>,
    config: SchedulerConfig,
    jobs: BTreeMap<String, JobEntry>,
    keys: HashMap<String, String>,
    next_job: u64,
    workers: HashMap<String, WorkerInfo>,
}

const NEXT_JOB_KEY: &[u8] = b"next_job";

impl Scheduler {
    /// Rebuilds the state from the store: every job, the shards of its current
    /// stage, and its counters. Leases outstanding at the crash get a fresh TTL
    /// from `now_ms`: their workers may still report; dead ones expire normally.
    /// Also finishes any stage barrier that was passed but not yet acted on.
    pub fn load(store: Arc<dyn Store>, config: SchedulerConfig, now_ms: u64) -> Result<Scheduler> {
        let next_job = match store.get(Tree::Meta, NEXT_JOB_KEY)? {
            Some(v) => u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| CoordinatorError::Store("corrupt job counter".into()))?,
            ),
            None => 1,
        };
        let mut scheduler = Scheduler {
            store: store.clone(),
            config,
            jobs: BTreeMap::new(),
            keys: HashMap::new(),
            next_job,
            workers: HashMap::new(),
        };
        for (_, bytes) in store.scan_prefix(Tree::Jobs, b"")? {
            let rec: JobRecord = decode("job", &bytes)?;
            let mut entry = JobEntry::new(rec);
            let id = entry.rec.id.clone();
            let mut previous = Vec::new();
            for (_, bytes) in store.scan_prefix(Tree::Shards, &shard_prefix(&id))? {
                let shard: ShardRecord = decode("shard", &bytes)?;
                if shard.stage < entry.rec.stage {
                    entry.shards_done_before += 1;
                    entry.work_done_before += shard.work_total;
                    if shard.stage + 1 == entry.rec.stage {
                        previous.push(shard);
                    }
                } else if shard.stage == entry.rec.stage {
                    entry.shards.push(shard);
                }
            }
            entry.shards.sort_by_key(|s| s.index);
            entry.outputs = vec![None; entry.shards.len()];
            if !previous.is_empty() && !entry.rec.state.is_finished() {
                previous.sort_by_key(|s| s.index);
                let data = read_outputs(store.as_ref(), &previous, &[])?;
                entry.finished = Some(FinishedStage {
                    stage: entry.rec.stage - 1,
                    data: Arc::new(data),
                    chunks: previous.iter().map(|s| s.output_chunks).collect(),
                });
            }
            for shard in &mut entry.shards {
                match shard.state {
                    ShardState::Pending => entry.pending.push_back(shard.index),
                    ShardState::Leased => {
                        let ttl = entry.rec.spec.options().lease_ttl_ms;
                        shard.lease_expires_ms = shard.lease_expires_ms.max(now_ms + ttl);
                    }
                    ShardState::Done => {}
                }
            }
            entry.next_event = store
                .scan_prefix(Tree::Events, &event_prefix(&id))?
                .last()
                .map(|(_, v)| decode::<EventRecord>("event", v).map(|e| e.seq + 1))
                .transpose()?
                .unwrap_or(0);
            if let Some(key) = &entry.rec.idempotency_key {
                scheduler.keys.insert(key.clone(), id.clone());
            }
            scheduler.jobs.insert(id, entry);
        }
        // Resume: note it in each unfinished job's log, and pass any barrier whose
        // stage completed just before the crash.
        let unfinished: Vec<String> = scheduler
            .jobs
            .iter()
            .filter(|(_, e)| !e.rec.state.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in unfinished {
            let mut batch = Batch::default();
            let entry = scheduler.jobs.get_mut(&id).unwrap();
            push_event(
                entry,
                &mut batch,
                now_ms,
                "resumed",
                0,
                0,
                0,
                "",
                "coordinator restarted",
            );
            scheduler.advance_if_stage_done(&id, &mut batch, now_ms)?;
            scheduler.store.commit(batch)?;
        }
        Ok(scheduler)
    }

    // ------------------------------------------------------------ clients

    /// Stores a new job with the shards of its first stage, or returns the job
    /// already submitted under the same idempotency key (`created` is false).
    pub fn submit(
        &mut self,
        spec: ValidSpec,
        mut plan: JobPlan,
        idempotency_key: Option<String>,
        now_ms: u64,
    ) -> Result<(proto::Job, bool)> {
        if let Some(key) = &idempotency_key
            && let Some(id) = self.keys.get(key)
        {
            return Ok((self.job(id, now_ms)?, false));
        }
        let seq = self.next_job;
        let id = format!("job-{seq:06}");
        let first = spec.plan_stage(&plan, 1)?;
        if first.is_empty() {
            return Err(CoordinatorError::Internal("the plan has no shards".into()));
        }
        // What the shards' tasks hold, the job record need not keep.
        spec.trim_plan(&mut plan)?;
        let rec = JobRecord {
            id: id.clone(),
            seq,
            spec,
            plan,
            state: JobState::Queued,
            idempotency_key: idempotency_key.clone(),
            created_ms: now_ms,
            started_ms: None,
            finished_ms: None,
            stage: 1,
            shards_per_stage: first.len() as u64,
            work_per_stage: first.iter().map(|s| s.work_total).sum(),
            answer: None,
            details: None,
            error: None,
        };
        let mut entry = JobEntry::new(rec);
        let mut batch = Batch::default();
        install_stage(&mut entry, 1, first, &mut batch);
        batch.put(Tree::Jobs, job_key(&id), encode(&entry.rec));
        batch.put(Tree::Meta, NEXT_JOB_KEY, (seq + 1).to_be_bytes().to_vec());
        if let Some(key) = &idempotency_key {
            batch.put(Tree::Keys, key.as_bytes().to_vec(), id.as_bytes().to_vec());
        }
        let description = entry.rec.spec.describe();
        push_event(
            &mut entry,
            &mut batch,
            now_ms,
            "submitted",
            0,
            0,
            0,
            "",
            &description,
        );
        self.store.commit(batch)?;
        self.next_job = seq + 1;
        if let Some(key) = idempotency_key {
            self.keys.insert(key, id.clone());
        }
        self.jobs.insert(id.clone(), entry);
        Ok((self.job(&id, now_ms)?, true))
    }

    pub fn job_by_key(&self, key: &str, now_ms: u64) -> Option<proto::Job> {
        self.keys.get(key).and_then(|id| self.job(id, now_ms).ok())
    }

    pub fn job(&self, id: &str, now_ms: u64) -> Result<proto::Job> {
        let entry = self.entry(id)?;
        Ok(job_view(entry, now_ms))
    }

    pub fn list(&self, now_ms: u64) -> Vec<proto::Job> {
        self.jobs.values().map(|e| job_view(e, now_ms)).collect()
    }

    pub fn result(&self, id: &str) -> Result<proto::JobResult> {
        let entry = self.entry(id)?;
        let rec = &entry.rec;
        match rec.state {
            JobState::Succeeded | JobState::Failed | JobState::Cancelled => Ok(proto::JobResult {
                job_id: rec.id.clone(),
                state: state_to_proto(rec.state) as i32,
                answer: rec.answer.clone().unwrap_or_default(),
                details_json: rec
                    .details
                    .as_ref()
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                error: rec.error.clone().unwrap_or_default(),
            }),
            state => Err(CoordinatorError::FailedPrecondition(format!(
                "job {id} is {} and has no result yet",
                state.name()
            ))),
        }
    }

    /// Cancels a queued or running job; cancelling a cancelled job is a no-op.
    pub fn cancel(&mut self, id: &str, now_ms: u64) -> Result<proto::Job> {
        let entry = self.entry_mut(id)?;
        match entry.rec.state {
            JobState::Cancelled => return Ok(job_view(entry, now_ms)),
            JobState::Succeeded | JobState::Failed => {
                return Err(CoordinatorError::FailedPrecondition(format!(
                    "job {id} already {}",
                    entry.rec.state.name()
                )));
            }
            JobState::Queued | JobState::Running => {}
        }
        let mut rec = entry.rec.clone();
        rec.state = JobState::Cancelled;
        rec.finished_ms = Some(now_ms);
        let mut batch = Batch::default();
        batch.put(Tree::Jobs, job_key(id), encode(&rec));
        push_event(
            entry,
            &mut batch,
            now_ms,
            "cancelled",
            0,
            0,
            0,
            "",
            "cancelled by request",
        );
        self.store.commit(batch)?;
        let entry = self.entry_mut(id)?;
        entry.rec = rec;
        entry.pending.clear();
        Ok(job_view(entry, now_ms))
    }

    pub fn events(&self, id: &str, from: u64) -> Result<Vec<EventRecord>> {
        self.entry(id)?;
        let mut start = event_prefix(id);
        start.extend_from_slice(format!("{from:012}").as_bytes());
        let all = self.store.scan_prefix(Tree::Events, &event_prefix(id))?;
        all.into_iter()
            .filter(|(k, _)| *k >= start)
            .map(|(_, v)| decode("event", &v))
            .collect()
    }

    // ------------------------------------------------------------ workers

    pub fn register(
        &mut self,
        worker: &str,
        hostname: &str,
        slots: u32,
        version: &str,
        now_ms: u64,
    ) {
        self.workers.insert(
            worker.to_string(),
            WorkerInfo {
                hostname: hostname.to_string(),
                slots,
                version: version.to_string(),
                last_seen_ms: now_ms,
            },
        );
    }

    pub fn workers(&self) -> &HashMap<String, WorkerInfo> {
        &self.workers
    }

    pub fn store_size_on_disk(&self) -> Option<u64> {
        self.store.size_on_disk()
    }

    /// Renews the worker's valid leases and records their progress; returns the
    /// leases it must stop (unknown, superseded, or of a job that is not running).
    pub fn heartbeat(
        &mut self,
        worker: &str,
        leases: &[(String, u64)],
        now_ms: u64,
    ) -> Vec<String> {
        if let Some(info) = self.workers.get_mut(worker) {
            info.last_seen_ms = now_ms;
        } else {
            self.register(worker, "", 0, "", now_ms);
        }
        let mut revoked = Vec::new();
        for (lease_id, work_done) in leases {
            match self.current_lease(worker, lease_id) {
                Ok((job, index)) => {
                    let entry = self.jobs.get_mut(&job).unwrap();
                    let ttl = entry.rec.spec.options().lease_ttl_ms;
                    let shard = &mut entry.shards[index];
                    shard.lease_expires_ms = now_ms + ttl;
                    shard.work_done = (*work_done).min(shard.work_total);
                }
                Err(_) => revoked.push(lease_id.clone()),
            }
        }
        revoked
    }

    /// Checks that `lease_id` is the current, live lease of `worker` on a running
    /// job; returns the job id and the shard's position in the current stage.
    fn current_lease(&self, worker: &str, lease_id: &str) -> Result<(String, usize)> {
        let (job, stage, index, attempt) = records::parse_lease_id(lease_id)?;
        let entry = self.entry(&job)?;
        if entry.rec.state.is_finished() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "job {job} is {}",
                entry.rec.state.name()
            )));
        }
        let pos = entry
            .shards
            .iter()
            .position(|s| s.stage == stage && s.index == index)
            .ok_or_else(|| {
                CoordinatorError::FailedPrecondition(format!(
                    "shard {index} of stage {stage} of job {job} is not current"
                ))
            })?;
        let shard = &entry.shards[pos];
        if shard.attempt != attempt || shard.state == ShardState::Done {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "attempt {attempt} of shard {stage}/{index} of job {job} is stale (current attempt {}, {:?})",
                shard.attempt, shard.state
            )));
        }
        if shard.state == ShardState::Leased && shard.worker.as_deref() != Some(worker) {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "lease {lease_id} belongs to another worker"
            )));
        }
        Ok((job, pos))
    }

    /// Leases up to `free_slots` ready shards to `worker`, highest priority first,
    /// then oldest job first. The new attempt numbers are durable before return.
    pub fn lease(&mut self, worker: &str, free_slots: u32, now_ms: u64) -> Result<Vec<Grant>> {
        if free_slots == 0 {
            return Ok(Vec::new());
        }
        if let Some(info) = self.workers.get_mut(worker) {
            info.last_seen_ms = now_ms;
        }
        let mut order: Vec<(i32, u64, String)> = self
            .jobs
            .values()
            .filter(|e| {
                matches!(e.rec.state, JobState::Queued | JobState::Running) && !e.pending.is_empty()
            })
            .map(|e| (-e.rec.spec.options().priority, e.rec.seq, e.rec.id.clone()))
            .collect();
        order.sort();
        let mut batch = Batch::default();
        let mut grants = Vec::new();
        // Staged copies: the in-memory state changes only after the commit.
        let mut updated: Vec<(String, ShardRecord)> = Vec::new();
        let mut started: Vec<String> = Vec::new();
        'jobs: for (_, _, id) in order {
            let entry = self.jobs.get_mut(&id).unwrap();
            let ttl = entry.rec.spec.options().lease_ttl_ms;
            let mut skipped = 0;
            while skipped < entry.pending.len() {
                if grants.len() as u32 >= free_slots {
                    break 'jobs;
                }
                let index = entry.pending[skipped];
                let shard = &entry.shards[index as usize];
                // Only pending shards are leased: a shard done while it was
                // queued (its expired attempt reported) is dropped from the queue.
                if shard.state != ShardState::Pending {
                    entry.pending.remove(skipped);
                    continue;
                }
                // A replica must come from a worker that has not computed the shard.
                if shard.not_before_ms > now_ms || shard.replicas.iter().any(|r| r.worker == worker)
                {
                    skipped += 1;
                    continue;
                }
                let mut shard = shard.clone();
                shard.attempt += 1;
                shard.state = ShardState::Leased;
                shard.worker = Some(worker.to_string());
                shard.lease_expires_ms = now_ms + ttl;
                batch.put(
                    Tree::Shards,
                    shard_key(&id, shard.stage, shard.index),
                    encode(&shard),
                );
                let checkpoint = if shard.has_checkpoint {
                    self.store
                        .get(Tree::Blobs, &checkpoint_key(&id, shard.stage, shard.index))?
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                grants.push(Grant {
                    lease_id: records::lease_id(&id, shard.stage, shard.index, shard.attempt),
                    job: id.clone(),
                    stage: shard.stage,
                    index: shard.index,
                    attempt: shard.attempt,
                    spec: entry.rec.spec.clone(),
                    task: shard.task.to_bytes(),
                    checkpoint,
                    ttl_ms: ttl,
                    work_total: shard.work_total,
                });
                let note = if shard.has_checkpoint {
                    format!("from checkpoint at work {}", shard.work_done)
                } else {
                    String::new()
                };
                push_event(
                    entry,
                    &mut batch,
                    now_ms,
                    "leased",
                    shard.stage,
                    shard.index,
                    shard.attempt,
                    worker,
                    &note,
                );
                entry.pending.remove(skipped);
                updated.push((id.clone(), shard));
            }
        }
        // Jobs that got their first lease start running now (recorded in the same batch).
        for (id, _) in &updated {
            let entry = &self.jobs[id];
            if entry.rec.state == JobState::Queued && !started.contains(id) {
                let mut rec = entry.rec.clone();
                rec.state = JobState::Running;
                rec.started_ms = Some(now_ms);
                batch.put(Tree::Jobs, job_key(id), encode(&rec));
                started.push(id.clone());
            }
        }
        if grants.is_empty() {
            return Ok(grants);
        }
        if let Err(e) = self.store.commit(batch) {
            // Nothing was handed out: put the shards back.
            for (id, shard) in updated {
                self.jobs
                    .get_mut(&id)
                    .unwrap()
                    .pending
                    .push_front(shard.index);
            }
            for entry in self.jobs.values_mut() {
                entry.pending.make_contiguous().sort();
            }
            return Err(e);
        }
        for (id, shard) in updated {
            let entry = self.jobs.get_mut(&id).unwrap();
            let i = shard.index as usize;
            entry.shards[i] = shard;
        }
        for id in started {
            let entry = self.jobs.get_mut(&id).unwrap();
            entry.rec.state = JobState::Running;
            entry.rec.started_ms = Some(now_ms);
        }
        Ok(grants)
    }

    /// Whether some shard could be leased now.
    pub fn has_ready_work(&self, now_ms: u64) -> bool {
        self.jobs.values().any(|e| {
            matches!(e.rec.state, JobState::Queued | JobState::Running)
                && e.pending
                    .iter()
                    .any(|&i| e.shards[i as usize].not_before_ms <= now_ms)
        })
    }

    /// Accepts a report of the current attempt of a shard: a checkpoint, a result
    /// (with the stage output), or a failure. A report of any other attempt is
    /// refused with FailedPrecondition and changes nothing.
    pub fn report(&mut self, report: Report, now_ms: u64) -> Result<ReportOutcome> {
        let (job, stage, index, attempt) = records::parse_lease_id(&report.lease_id)?;
        let entry = self.entry(&job)?;
        if entry.rec.state.is_finished() {
            return Ok(ReportOutcome {
                stop: true,
                accepted: false,
            });
        }
        if stage != entry.rec.stage || index as usize >= entry.shards.len() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "shard {index} of stage {stage} of job {job} is not current (the job is at stage {})",
                entry.rec.stage
            )));
        }
        let shard = &entry.shards[index as usize];
        // A lease that expired but was not yet re-issued is still the latest
        // attempt: its result is as good as any, so it is accepted.
        if shard.attempt != attempt || shard.state == ShardState::Done {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "attempt {attempt} of shard {stage}/{index} of job {job} is stale (current attempt {})",
                shard.attempt
            )));
        }
        if shard.state == ShardState::Leased
            && shard.worker.as_deref() != Some(report.worker.as_str())
        {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "lease {} belongs to another worker",
                report.lease_id
            )));
        }
        if let Some((partial, work_done)) = &report.result {
            return self.accept_result(
                &job,
                index,
                partial,
                &report.output,
                *work_done,
                &report.worker,
                now_ms,
            );
        }
        if let Some(failure) = &report.failure {
            if shard.state == ShardState::Pending {
                // The attempt's lease expired and was counted as a failed attempt
                // then; the shard is already queued for its next attempt.
                return Ok(ReportOutcome {
                    stop: true,
                    accepted: false,
                });
            }
            return self.record_failure(&job, index, failure, &report.worker, now_ms, false);
        }
        if let Some((state, partial, work_done)) = &report.checkpoint {
            let partial = if partial.is_empty() {
                None
            } else {
                let partial = EncodedPartial::from_bytes(partial)?;
                entry.rec.spec.check_checkpoint(&partial)?;
                Some(partial)
            };
            let entry = self.jobs.get_mut(&job).unwrap();
            let mut shard = entry.shards[index as usize].clone();
            shard.has_checkpoint = true;
            shard.partial = partial;
            shard.work_done = (*work_done).min(shard.work_total);
            let mut batch = Batch::default();
            batch.put(
                Tree::Blobs,
                checkpoint_key(&job, stage, index),
                state.clone(),
            );
            batch.put(Tree::Shards, shard_key(&job, stage, index), encode(&shard));
            let seq = entry.next_event;
            let note = format!("work {}", shard.work_done);
            push_event(
                entry,
                &mut batch,
                now_ms,
                "checkpoint",
                stage,
                index,
                attempt,
                &report.worker,
                &note,
            );
            if let Err(e) = self.store.commit(batch) {
                self.jobs.get_mut(&job).unwrap().next_event = seq;
                return Err(e);
            }
            let entry = self.jobs.get_mut(&job).unwrap();
            entry.shards[index as usize] = shard;
        }
        Ok(ReportOutcome {
            stop: false,
            accepted: false,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn accept_result(
        &mut self,
        job: &str,
        index: u32,
        partial: &[u8],
        output: &[u8],
        work_done: u64,
        worker: &str,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let partial = EncodedPartial::from_bytes(partial)?;
        let entry = self.jobs.get(job).unwrap();
        let shard = entry.shards[index as usize].clone();
        entry
            .rec
            .spec
            .check_result(&entry.rec.plan, &shard.task, &partial, output)?;
        let replicas = entry.rec.spec.options().replicas as usize;
        if replicas > 1 {
            let this = ReplicaRecord {
                worker: worker.to_string(),
                attempt: shard.attempt,
                partial: partial.clone(),
                output_digest: records::fnv1a64(output),
            };
            if let Some(first) = shard.replicas.first()
                && (first.partial != this.partial || first.output_digest != this.output_digest)
            {
                let failure = ReportedFailure {
                    message: format!(
                        "replicas disagree: workers {} (attempt {}) and {} (attempt {}) returned different results",
                        first.worker, first.attempt, this.worker, this.attempt
                    ),
                    permanent: false,
                    handed_back: false,
                };
                return self.record_failure(job, index, &failure, worker, now_ms, true);
            }
            if shard.replicas.len() + 1 < replicas {
                return self.record_replica(job, index, this, now_ms);
            }
        }
        let stage = shard.stage;
        let mut shard = shard;
        shard.replicas.clear();
        shard.state = ShardState::Done;
        shard.partial = Some(partial);
        shard.work_done = work_done.min(shard.work_total).max(shard.work_total);
        shard.worker = Some(worker.to_string());
        shard.output_chunks = output.len().div_ceil(OUTPUT_CHUNK) as u32;
        let mut batch = Batch::default();
        for (chunk, data) in output.chunks(OUTPUT_CHUNK).enumerate() {
            batch.put(
                Tree::Blobs,
                output_key(job, stage, index, chunk as u32),
                data.to_vec(),
            );
        }
        if shard.has_checkpoint {
            batch.remove(Tree::Blobs, checkpoint_key(job, stage, index));
            shard.has_checkpoint = false;
        }
        batch.put(Tree::Shards, shard_key(job, stage, index), encode(&shard));
        // Work on a scratch copy so that a failed commit leaves memory untouched.
        let saved = self.jobs.get(job).unwrap().shards[index as usize].clone();
        let saved_rec = self.jobs.get(job).unwrap().rec.clone();
        let saved_event = self.jobs.get(job).unwrap().next_event;
        let saved_pending = self.jobs.get(job).unwrap().pending.clone();
        {
            let entry = self.jobs.get_mut(job).unwrap();
            entry.shards[index as usize] = shard.clone();
            // The attempt may have expired and queued the shard again (its
            // result still counts while no later attempt exists): done shards
            // leave the queue, or they would be computed and accepted twice.
            entry.pending.retain(|&i| i != index);
            entry.outputs[index as usize] = Some(Arc::new(output.to_vec()));
            push_event(
                entry,
                &mut batch,
                now_ms,
                "accepted",
                stage,
                index,
                shard.attempt,
                worker,
                "",
            );
        }
        let snapshot = self.snapshot_stage(job);
        if let Err(e) = self
            .advance_if_stage_done(job, &mut batch, now_ms)
            .and_then(|_| self.store.commit(batch))
        {
            let entry = self.jobs.get_mut(job).unwrap();
            entry.rec = saved_rec;
            entry.next_event = saved_event;
            if let Some(s) = snapshot {
                entry.restore_stage(s);
            }
            entry.pending = saved_pending;
            entry.shards[index as usize] = saved;
            return Err(e);
        }
        let finished = self.jobs.get(job).unwrap().rec.state.is_finished();
        Ok(ReportOutcome {
            stop: finished,
            accepted: true,
        })
    }

    /// Keeps one replica's result and puts the shard back for another worker.
    fn record_replica(
        &mut self,
        job: &str,
        index: u32,
        replica: ReplicaRecord,
        now_ms: u64,
    ) -> Result<ReportOutcome> {
        let entry = self.jobs.get_mut(job).unwrap();
        let needed = entry.rec.spec.options().replicas;
        let mut shard = entry.shards[index as usize].clone();
        let (stage, attempt, worker) = (shard.stage, shard.attempt, replica.worker.clone());
        shard.replicas.push(replica);
        shard.state = ShardState::Pending;
        shard.worker = None;
        shard.not_before_ms = now_ms;
        shard.work_done = 0;
        shard.partial = None;
        let mut batch = Batch::default();
        // The next replica starts from scratch, not from this worker's checkpoint.
        if shard.has_checkpoint {
            batch.remove(Tree::Blobs, checkpoint_key(job, stage, index));
            shard.has_checkpoint = false;
        }
        batch.put(Tree::Shards, shard_key(job, stage, index), encode(&shard));
        let seq = entry.next_event;
        let note = format!(
            "result {} of {needed}; the next comes from another worker",
            shard.replicas.len()
        );
        push_event(
            entry, &mut batch, now_ms, "replica", stage, index, attempt, &worker, &note,
        );
        if let Err(e) = self.store.commit(batch) {
            self.jobs.get_mut(job).unwrap().next_event = seq;
            return Err(e);
        }
        let entry = self.jobs.get_mut(job).unwrap();
        entry.shards[index as usize] = shard;
        entry.requeue(index);
        Ok(ReportOutcome {
            stop: false,
            accepted: true,
        })
    }

    fn record_failure(
        &mut self,
        job: &str,
        index: u32,
        failure: &ReportedFailure,
        worker: &str,
        now_ms: u64,
        discard_replicas: bool,
    ) -> Result<ReportOutcome> {
        let backoff = self.config.clone();
        let entry = self.jobs.get_mut(job).unwrap();
        let mut shard = entry.shards[index as usize].clone();
        let mut rec = entry.rec.clone();
        shard.state = ShardState::Pending;
        shard.worker = None;
        let mut batch = Batch::default();
        if discard_replicas {
            shard.replicas.clear();
            if shard.has_checkpoint {
                batch.remove(Tree::Blobs, checkpoint_key(job, shard.stage, index));
                shard.has_checkpoint = false;
            }
        }
        let (stage, attempt) = (shard.stage, shard.attempt);
        if failure.handed_back {
            shard.not_before_ms = now_ms;
            push_event(
                entry,
                &mut batch,
                now_ms,
                "handed-back",
                stage,
                index,
                attempt,
                worker,
                &failure.message,
            );
        } else {
            shard.failed_attempts += 1;
            shard.last_error = Some(failure.message.clone());
            shard.not_before_ms = now_ms + backoff_ms(&backoff, shard.failed_attempts);
            push_event(
                entry,
                &mut batch,
                now_ms,
                "failed-attempt",
                stage,
                index,
                attempt,
                worker,
                &failure.message,
            );
        }
        let fail_job = !failure.handed_back
            && (failure.permanent || shard.failed_attempts >= rec.spec.options().max_attempts);
        if fail_job {
            rec.state = JobState::Failed;
            rec.finished_ms = Some(now_ms);
            rec.error = Some(format!(
                "shard {stage}/{index} failed after {} attempt(s): {}",
                shard.failed_attempts, failure.message
            ));
            batch.put(Tree::Jobs, job_key(job), encode(&rec));
            let message = rec.error.clone().unwrap();
            push_event(
                entry, &mut batch, now_ms, "failed", stage, index, attempt, worker, &message,
            );
        }
        batch.put(Tree::Shards, shard_key(job, stage, index), encode(&shard));
        self.store.commit(batch)?;
        let entry = self.jobs.get_mut(job).unwrap();
        entry.shards[index as usize] = shard;
        entry.rec = rec;
        if fail_job {
            entry.pending.clear();
        } else {
            entry.requeue(index);
        }
        Ok(ReportOutcome {
            stop: true,
            accepted: false,
        })
    }

    fn snapshot_stage(&self, job: &str) -> Option<StageSnapshot> {
        let e = self.jobs.get(job)?;
        Some(StageSnapshot {
            shards: e.shards.clone(),
            pending: e.pending.clone(),
            shards_done_before: e.shards_done_before,
            work_done_before: e.work_done_before,
            outputs: e.outputs.clone(),
            finished: e.finished.clone(),
        })
    }

    /// If every shard of the job's current stage is done: plan the next stage, or
    /// finish the job. Adds the writes to `batch` and updates memory; the caller
    /// commits (and restores memory if the commit fails).
    fn advance_if_stage_done(&mut self, job: &str, batch: &mut Batch, now_ms: u64) -> Result<()> {
        let entry = self.jobs.get_mut(job).unwrap();
        if entry.rec.state.is_finished() || entry.shards.iter().any(|s| s.state != ShardState::Done)
        {
            return Ok(());
        }
        let stage = entry.rec.stage;
        // The previous stage's output is no longer needed once this one is done.
        if let Some(previous) = entry.finished.take() {
            delete_outputs(&previous, job, batch);
        }
        let data = read_outputs(self.store.as_ref(), &entry.shards, &entry.outputs)?;
        let current = FinishedStage {
            stage,
            data: Arc::new(data),
            chunks: entry.shards.iter().map(|s| s.output_chunks).collect(),
        };
        if stage < entry.rec.plan.stages_total {
            let next = entry.rec.spec.plan_stage(&entry.rec.plan, stage + 1)?;
            entry.finished = Some(current);
            entry.shards_done_before += entry.shards.len() as u64;
            entry.work_done_before += entry.shards.iter().map(|s| s.work_total).sum::<u64>();
            entry.rec.stage = stage + 1;
            install_stage(entry, stage + 1, next, batch);
            batch.put(Tree::Jobs, job_key(job), encode(&entry.rec));
            push_event(entry, batch, now_ms, "stage", stage + 1, 0, 0, "", "");
        } else {
            delete_outputs(&current, job, batch);
            let partials: Option<Vec<EncodedPartial>> =
                entry.shards.iter().map(|s| s.partial.clone()).collect();
            let mut rec = entry.rec.clone();
            let answer = partials
                .ok_or_else(|| tally_common::Error::Internal("a done shard has no result".into()))
                .and_then(|partials| rec.spec.finish(&rec.plan, &partials));
            match answer {
                Ok(answer) => {
                    rec.state = JobState::Succeeded;
                    rec.answer = Some(answer.line.clone());
                    rec.details = Some(answer.details);
                    push_event(
                        entry,
                        batch,
                        now_ms,
                        "succeeded",
                        stage,
                        0,
                        0,
                        "",
                        &answer.line,
                    );
                }
                Err(e) => {
                    rec.state = JobState::Failed;
                    rec.error = Some(format!("could not combine the results: {e}"));
                    push_event(
                        entry,
                        batch,
                        now_ms,
                        "failed",
                        stage,
                        0,
                        0,
                        "",
                        &e.to_string(),
                    );
                }
            }
            rec.finished_ms = Some(now_ms);
            batch.put(Tree::Jobs, job_key(job), encode(&rec));
            entry.rec = rec;
        }
        Ok(())
    }

    /// Returns expired leases to the queue (with backoff); a shard whose failed
    /// attempts reach the job's limit fails its job. Returns how many expired.
    pub fn expire_leases(&mut self, now_ms: u64) -> Result<usize> {
        let config = self.config.clone();
        let mut expired = 0;
        let ids: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, e)| !e.rec.state.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let entry = self.jobs.get_mut(&id).unwrap();
            let due: Vec<usize> = entry
                .shards
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state == ShardState::Leased && s.lease_expires_ms <= now_ms)
                .map(|(i, _)| i)
                .collect();
            if due.is_empty() {
                continue;
            }
            let mut batch = Batch::default();
            let mut rec = entry.rec.clone();
            let mut changed = Vec::new();
            for i in due {
                let mut shard = entry.shards[i].clone();
                let worker = shard.worker.take().unwrap_or_default();
                shard.state = ShardState::Pending;
                shard.failed_attempts += 1;
                shard.last_error = Some(format!("lease of attempt {} expired", shard.attempt));
                shard.not_before_ms = now_ms + backoff_ms(&config, shard.failed_attempts);
                push_event(
                    entry,
                    &mut batch,
                    now_ms,
                    "expired",
                    shard.stage,
                    shard.index,
                    shard.attempt,
                    &worker,
                    "",
                );
                if shard.failed_attempts >= rec.spec.options().max_attempts
                    && rec.state != JobState::Failed
                {
                    rec.state = JobState::Failed;
                    rec.finished_ms = Some(now_ms);
                    rec.error = Some(format!(
                        "shard {}/{} failed after {} attempt(s): its lease expired each time",
                        shard.stage, shard.index, shard.failed_attempts
                    ));
                    let message = rec.error.clone().unwrap();
                    push_event(
                        entry,
                        &mut batch,
                        now_ms,
                        "failed",
                        shard.stage,
                        shard.index,
                        shard.attempt,
                        &worker,
                        &message,
                    );
                    batch.put(Tree::Jobs, job_key(&id), encode(&rec));
                }
                batch.put(
                    Tree::Shards,
                    shard_key(&id, shard.stage, shard.index),
                    encode(&shard),
                );
                changed.push(shard);
            }
            self.store.commit(batch)?;
            let entry = self.jobs.get_mut(&id).unwrap();
            for shard in changed {
                expired += 1;
                let i = shard.index;
                entry.shards[i as usize] = shard;
                entry.requeue(i);
            }
            if rec.state == JobState::Failed {
                entry.pending.clear();
            }
            entry.rec = rec;
        }
        Ok(expired)
    }

    /// The merged output of the previous stage, which the current stage reads.
    pub fn stage_data(&self, job: &str, stage: u32) -> Result<Arc<Vec<u8>>> {
        let entry = self.entry(job)?;
        match &entry.finished {
            Some(finished) if finished.stage == stage && !entry.rec.state.is_finished() => {
                Ok(finished.data.clone())
            }
            _ => Err(CoordinatorError::FailedPrecondition(format!(
                "job {job} has no readable output of stage {stage} (it is at stage {}, {})",
                entry.rec.stage,
                entry.rec.state.name()
            ))),
        }
    }

    fn entry(&self, id: &str) -> Result<&JobEntry> {
        self.jobs
            .get(id)
            .ok_or_else(|| CoordinatorError::NotFound(format!("no job {id:?}")))
    }

    fn entry_mut(&mut self, id: &str) -> Result<&mut JobEntry> {
        self.jobs
            .get_mut(id)
            .ok_or_else(|| CoordinatorError::NotFound(format!("no job {id:?}")))
    }
}

/// What a stage transition changes in memory, to undo it if its commit fails.
struct StageSnapshot {
    shards: Vec<ShardRecord>,
    pending: VecDeque<u32>,
    shards_done_before: u64,
    work_done_before: u64,
    outputs: Vec<Option<Arc<Vec<u8>>>>,
    finished: Option<FinishedStage>,
}

impl JobEntry {
    fn restore_stage(&mut self, s: StageSnapshot) {
        self.shards = s.shards;
        self.pending = s.pending;
        self.shards_done_before = s.shards_done_before;
        self.work_done_before = s.work_done_before;
        self.outputs = s.outputs;
        self.finished = s.finished;
    }
}

/// The stored output of `shards` in index order, preferring the copies in
/// `memory` (by index) over reading the store.
fn read_outputs(
    store: &dyn Store,
    shards: &[ShardRecord],
    memory: &[Option<Arc<Vec<u8>>>],
) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    for shard in shards {
        if let Some(Some(bytes)) = memory.get(shard.index as usize) {
            data.extend_from_slice(bytes);
            continue;
        }
        for chunk in 0..shard.output_chunks {
            let key = output_key(&shard.job, shard.stage, shard.index, chunk);
            let bytes = store.get(Tree::Blobs, &key)?.ok_or_else(|| {
                CoordinatorError::Store(format!(
                    "output chunk {chunk} of shard {}/{} of job {} is missing",
                    shard.stage, shard.index, shard.job
                ))
            })?;
            data.extend_from_slice(&bytes);
        }
    }
    Ok(data)
}

/// Removes the stored output of a finished stage, by key (no scan).
fn delete_outputs(finished: &FinishedStage, job: &str, batch: &mut Batch) {
    for (index, &chunks) in finished.chunks.iter().enumerate() {
        for chunk in 0..chunks {
            batch.remove(
                Tree::Blobs,
                output_key(job, finished.stage, index as u32, chunk),
            );
        }
    }
}

fn backoff_ms(config: &SchedulerConfig, failures: u32) -> u64 {
    let factor = 1u64 << failures.saturating_sub(1).min(20);
    config
        .backoff_base_ms
        .saturating_mul(factor)
        .min(config.backoff_max_ms)
}

/// Replaces the entry's current shards by a new stage's, all pending.
fn install_stage(entry: &mut JobEntry, stage: u32, planned: Vec<PlannedShard>, batch: &mut Batch) {
    entry.shards.clear();
    entry.pending.clear();
    entry.outputs = vec![None; planned.len()];
    for (i, p) in planned.into_iter().enumerate() {
        let shard = ShardRecord {
            job: entry.rec.id.clone(),
            stage,
            index: i as u32,
            task: p.task,
            work_total: p.work_total,
            state: ShardState::Pending,
            attempt: 0,
            failed_attempts: 0,
            worker: None,
            lease_expires_ms: 0,
            not_before_ms: 0,
            work_done: 0,
            partial: None,
            has_checkpoint: false,
            output_chunks: 0,
            last_error: None,
            replicas: Vec::new(),
        };
        batch.put(
            Tree::Shards,
            shard_key(&entry.rec.id, stage, i as u32),
            encode(&shard),
        );
        entry.shards.push(shard);
        entry.pending.push_back(i as u32);
    }
}

#[allow(clippy::too_many_arguments)]
fn push_event(
    entry: &mut JobEntry,
    batch: &mut Batch,
    now_ms: u64,
    kind: &str,
    stage: u32,
    shard: u32,
    attempt: u64,
    worker: &str,
    message: &str,
) {
    let event = EventRecord {
        seq: entry.next_event,
        time_ms: now_ms,
        kind: kind.to_string(),
        stage,
        shard,
        attempt,
        worker: worker.to_string(),
        message: message.to_string(),
    };
    batch.put(
        Tree::Events,
        event_key(&entry.rec.id, event.seq),
        encode(&event),
    );
    entry.next_event += 1;
}

pub fn state_to_proto(state: JobState) -> proto::JobState {
    match state {
        JobState::Queued => proto::JobState::Queued,
        JobState::Running => proto::JobState::Running,
        JobState::Succeeded => proto::JobState::Succeeded,
        JobState::Failed => proto::JobState::Failed,
        JobState::Cancelled => proto::JobState::Cancelled,
    }
}

fn job_view(entry: &JobEntry, now_ms: u64) -> proto::Job {
    let rec = &entry.rec;
    let stages = rec.plan.stages_total as u64;
    let shards_total = rec.shards_per_stage * stages;
    let work_total = rec.work_per_stage * stages;
    let finished = rec.state.is_finished();
    let (shards_done, work_done) = if rec.state == JobState::Succeeded {
        (shards_total, work_total)
    } else {
        (entry.shards_done(), entry.work_done())
    };
    let elapsed_ms = match rec.started_ms {
        Some(start) => rec.finished_ms.unwrap_or(now_ms).saturating_sub(start),
        None => 0,
    };
    let eta_ms = if finished || work_done == 0 || elapsed_ms == 0 {
        0
    } else {
        let remaining = work_total.saturating_sub(work_done) as u128;
        (remaining * elapsed_ms as u128 / work_done as u128) as u64
    };
    proto::Job {
        id: rec.id.clone(),
        kind: rec.spec.kind_name().to_string(),
        state: state_to_proto(rec.state) as i32,
        spec: Some((&rec.spec).into()),
        created_ms: rec.created_ms,
        started_ms: rec.started_ms.unwrap_or(0),
        finished_ms: rec.finished_ms.unwrap_or(0),
        stage: rec.stage,
        stages_total: rec.plan.stages_total,
        shards_done,
        shards_total,
        work_done,
        work_total,
        elapsed_ms,
        eta_ms,
        answer: rec.answer.clone().unwrap_or_default(),
        error: rec.error.clone().unwrap_or_default(),
        shards_leased: entry
            .shards
            .iter()
            .filter(|s| s.state == ShardState::Leased)
            .count() as u64,
        shards_failed_attempts: entry.shards.iter().map(|s| s.failed_attempts as u64).sum(),
        description: rec.spec.describe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use tally_common::Control;
    use tally_common::cache::KernelCache;
    use tally_common::kinds::kayles::KaylesSpec;
    use tally_common::spec::JobSpec;
    use tally_common::values::EncodedTask;

    fn kayles(pins: u64) -> JobSpec {
        let mut spec = JobSpec::new(KaylesSpec { pins, digits: 9 });
        spec.options.lease_ttl_ms = 1_000;
        spec
    }

    pub(super) fn direct_answer(spec: &JobSpec) -> tally_common::kind::Answer {
        ValidSpec::new(spec.clone())
            .unwrap()
            .compute_direct(1, &Control::new())
            .unwrap()
    }

    fn new_scheduler(store: Arc<dyn Store>) -> Scheduler {
        Scheduler::load(store, SchedulerConfig::default(), 0).unwrap()
    }

    pub(super) fn submit(s: &mut Scheduler, spec: &JobSpec) -> String {
        let spec = ValidSpec::new(spec.clone()).unwrap();
        let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
        s.submit(spec, plan, None, 0).unwrap().0.id
    }

    fn result_of(grant: &Grant) -> Report {
        report_from("w", grant, false)
    }

    /// The worker's report for `grant`, optionally corrupted as a faulty machine would.
    pub(super) fn report_from(worker: &str, grant: &Grant, corrupt: bool) -> Report {
        let task = EncodedTask::from_bytes(&grant.task).unwrap();
        let mut outcome = grant
            .spec
            .execute_once(&task, &KernelCache::new(), &Control::new())
            .unwrap();
        if corrupt {
            grant
                .spec
                .corrupt_for_testing(&mut outcome.partial)
                .unwrap();
        }
        Report {
            worker: worker.into(),
            lease_id: grant.lease_id.clone(),
            output: outcome.output,
            result: Some((outcome.partial.to_bytes(), outcome.work_done)),
            ..Report::default()
        }
    }

    fn event_count(s: &Scheduler, job: &str) -> usize {
        s.events(job, 0).unwrap().len()
    }

    #[test]
    fn a_job_runs_to_the_direct_answer() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let spec = kayles(30);
        let id = submit(&mut s, &spec);
        // A first lease that fills the worker's slots still starts the job.
        let first = s.lease("w", 1, 1).unwrap();
        let running = s.job(&id, 1).unwrap();
        assert_eq!(running.state, proto::JobState::Running as i32);
        assert_eq!(running.started_ms, 1);
        let mut grants = s.lease("w", 100, 5).unwrap();
        grants.extend(first);
        assert_eq!(
            grants.len() as u32,
            tally_common::kayles::character_count(30)
        );
        assert_eq!(s.job(&id, 6).unwrap().started_ms, 1);
        for g in &grants {
            s.report(result_of(g), 2).unwrap();
        }
        let job = s.job(&id, 3).unwrap();
        assert_eq!(job.state, proto::JobState::Succeeded as i32);
        let direct = direct_answer(&spec);
        assert_eq!(job.answer, direct.line);
        assert_eq!(job.shards_done, grants.len() as u64);
    }

    /// Found by the chaos suite: a result of an attempt that expired but was not
    /// yet re-issued is accepted; the shard must then leave the queue, or it is
    /// leased (computed) and accepted a second time.
    #[test]
    fn a_late_result_of_an_expired_attempt_takes_the_shard_out_of_the_queue() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let id = submit(&mut s, &kayles(10));
        let grants = s.lease("w", 100, 0).unwrap();
        assert_eq!(s.expire_leases(5_000).unwrap(), grants.len());
        // The holder was only slow (a SIGSTOP, a paused coordinator): its result
        // arrives before anyone else leased the shard, and is accepted.
        let late = &grants[0];
        s.report(result_of(late), 5_001).unwrap();
        let again = s.lease("other", 100, 60_000).unwrap();
        assert_eq!(again.len(), grants.len() - 1);
        assert!(again.iter().all(|g| g.index != late.index));
        for g in &again {
            let mut r = result_of(g);
            r.worker = "other".into();
            s.report(r, 60_001).unwrap();
        }
        let job = s.job(&id, 60_002).unwrap();
        assert_eq!(job.state, proto::JobState::Succeeded as i32);
        let accepted = s
            .events(&id, 0)
            .unwrap()
            .iter()
            .filter(|e| e.kind == "accepted")
            .count();
        assert_eq!(accepted, grants.len(), "a shard was accepted twice");
    }

    #[test]
    fn stale_attempts_are_refused_and_change_nothing() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let id = submit(&mut s, &kayles(10));
        let first = s.lease("a", 1, 0).unwrap().remove(0);
        assert_eq!(s.expire_leases(5_000).unwrap(), 1);
        // Backoff: not leased again before its delay.
        assert!(
            s.lease("b", 100, 5_001)
                .unwrap()
                .iter()
                .all(|g| g.index != first.index)
        );
        let again = s.lease("b", 100, 60_000).unwrap();
        let second = again.iter().find(|g| g.index == first.index).unwrap();
        assert_eq!(second.attempt, first.attempt + 1);
        let before = event_count(&s, &id);
        let err = s.report(result_of(&first), 60_001).unwrap_err();
        assert!(
            matches!(err, CoordinatorError::FailedPrecondition(_)),
            "{err}"
        );
        assert_eq!(event_count(&s, &id), before);
        assert_eq!(s.job(&id, 60_002).unwrap().shards_done, 0);
        // The current attempt is accepted; a second report of it is refused.
        let mut current = result_of(second);
        current.worker = "b".into();
        s.report(current.clone(), 60_003).unwrap();
        assert!(matches!(
            s.report(current, 60_004),
            Err(CoordinatorError::FailedPrecondition(_))
        ));
    }

    #[test]
    fn malformed_results_are_refused_and_change_nothing() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let id = submit(&mut s, &kayles(10));
        let grants = s.lease("w", 2, 0).unwrap();
        let before = event_count(&s, &id);
        // The result of character 1 reported on the shard of character 0.
        let mut wrong = result_of(&grants[1]);
        wrong.lease_id = grants[0].lease_id.clone();
        assert!(matches!(
            s.report(wrong, 1),
            Err(CoordinatorError::InvalidArgument(_))
        ));
        let mut garbage = result_of(&grants[0]);
        garbage.result = Some((b"{not json".to_vec(), 1));
        assert!(matches!(
            s.report(garbage, 1),
            Err(CoordinatorError::InvalidArgument(_))
        ));
        let mut unknown = result_of(&grants[0]);
        unknown.lease_id = "job-424242/1/0/1".into();
        assert!(matches!(
            s.report(unknown, 1),
            Err(CoordinatorError::NotFound(_))
        ));
        assert_eq!(event_count(&s, &id), before);
        assert_eq!(s.job(&id, 2).unwrap().shards_done, 0);
    }

    #[test]
    fn a_reload_keeps_accepted_results_and_attempt_numbers() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut s = new_scheduler(store.clone());
        let id = submit(&mut s, &kayles(20));
        let grants = s.lease("w", 3, 0).unwrap();
        s.report(result_of(&grants[0]), 1).unwrap();
        drop(s);
        let mut s = Scheduler::load(store, SchedulerConfig::default(), 10).unwrap();
        let job = s.job(&id, 10).unwrap();
        assert_eq!(job.shards_done, 1);
        assert_eq!(job.shards_leased, 2);
        // The surviving leases are still valid: their workers may report.
        s.report(result_of(&grants[1]), 11).unwrap();
        // After expiry the third shard is leased again with a new attempt number.
        s.expire_leases(100_000).unwrap();
        let again = s.lease("v", 100, 200_000).unwrap();
        let third = again.iter().find(|g| g.index == grants[2].index).unwrap();
        assert_eq!(third.attempt, grants[2].attempt + 1);
        assert!(
            again
                .iter()
                .all(|g| g.index != grants[0].index && g.index != grants[1].index)
        );
        assert!(
            s.events(&id, 0)
                .unwrap()
                .iter()
                .any(|e| e.kind == "resumed")
        );
    }

    #[test]
    fn repeated_failures_fail_the_job_with_the_workers_message() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let spec = kayles(0); // a single shard
        let id = submit(&mut s, &spec);
        let mut now = 0;
        for attempt in 1..=spec.options.max_attempts as u64 {
            now += 100_000;
            let grant = s.lease("w", 1, now).unwrap().remove(0);
            assert_eq!((grant.index, grant.attempt), (0, attempt));
            let failure = ReportedFailure {
                message: "disk on fire".into(),
                permanent: false,
                handed_back: false,
            };
            s.report(
                Report {
                    worker: "w".into(),
                    lease_id: grant.lease_id,
                    failure: Some(failure),
                    ..Report::default()
                },
                now,
            )
            .unwrap();
        }
        let job = s.job(&id, now).unwrap();
        assert_eq!(job.state, proto::JobState::Failed as i32);
        assert!(job.error.contains("disk on fire"), "{}", job.error);
        assert!(s.lease("w", 100, now + 100_000).unwrap().is_empty());
    }

    #[test]
    fn handed_back_shards_return_at_once_without_counting_an_attempt() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let id = submit(&mut s, &kayles(10));
        let grant = s.lease("w", 1, 0).unwrap().remove(0);
        let failure = ReportedFailure {
            message: "draining".into(),
            permanent: false,
            handed_back: true,
        };
        s.report(
            Report {
                worker: "w".into(),
                lease_id: grant.lease_id,
                failure: Some(failure),
                ..Report::default()
            },
            1,
        )
        .unwrap();
        let again = s.lease("v", 100, 1).unwrap();
        assert!(
            again
                .iter()
                .any(|g| g.index == grant.index && g.attempt == grant.attempt + 1)
        );
        assert_eq!(s.job(&id, 2).unwrap().shards_failed_attempts, 0);
    }

    #[test]
    fn higher_priority_jobs_are_leased_first() {
        let mut s = new_scheduler(Arc::new(MemoryStore::new()));
        let low = submit(&mut s, &kayles(10));
        let mut urgent = kayles(12);
        urgent.options.priority = 5;
        let high = submit(&mut s, &urgent);
        let grants = s.lease("w", 100, 0).unwrap();
        let high_count = tally_common::kayles::character_count(12) as usize;
        assert!(grants.len() > high_count);
        assert!(grants[..high_count].iter().all(|g| g.job == high));
        assert!(grants[high_count..].iter().all(|g| g.job == low));
    }
}

#[cfg(test)]
mod replica_tests {
    use super::tests::{direct_answer, report_from as report, submit};
    use super::*;
    use crate::store::MemoryStore;
    use tally_common::kinds::kayles::KaylesSpec;
    use tally_common::spec::JobSpec;

    fn replicated(replicas: u32, max_attempts: u32) -> JobSpec {
        let mut spec = JobSpec::new(KaylesSpec {
            pins: 30,
            digits: 9,
        });
        spec.options.replicas = replicas;
        spec.options.max_attempts = max_attempts;
        spec
    }

    /// Leases everything `worker` may take and reports it.
    fn serve(s: &mut Scheduler, worker: &str, corrupt: bool, now: u64) -> usize {
        let grants = s.lease(worker, 100, now).unwrap();
        for g in &grants {
            s.report(report(worker, g, corrupt), now).unwrap();
        }
        grants.len()
    }

    #[test]
    fn each_replica_comes_from_a_different_worker_and_they_must_agree() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut s = Scheduler::load(store.clone(), SchedulerConfig::default(), 0).unwrap();
        let id = submit(&mut s, &replicated(2, 3));
        let shards = serve(&mut s, "a", false, 1);
        assert!(shards > 0);
        // Worker a has computed every shard once: it may not take them again.
        assert_eq!(s.lease("a", 100, 2).unwrap().len(), 0);
        let job = s.job(&id, 2).unwrap();
        assert_eq!(job.shards_done, 0, "one replica does not finish a shard");
        // The first replicas survive a restart.
        let mut s = Scheduler::load(store, SchedulerConfig::default(), 3).unwrap();
        assert_eq!(s.lease("a", 100, 3).unwrap().len(), 0);
        assert_eq!(serve(&mut s, "b", false, 4), shards);
        let job = s.job(&id, 5).unwrap();
        assert_eq!(job.state, proto::JobState::Succeeded as i32);
        let direct = direct_answer(&replicated(1, 3));
        assert_eq!(job.answer, direct.line);
        let events = s.events(&id, 0).unwrap();
        let kinds = |k: &str| events.iter().filter(|e| e.kind == k).count();
        assert_eq!(kinds("replica"), shards);
        assert_eq!(kinds("accepted"), shards);
        for e in events.iter().filter(|e| e.kind == "accepted") {
            assert_eq!(e.worker, "b");
        }
    }

    #[test]
    fn a_disagreement_discards_both_results_and_fails_the_job_after_max_attempts() {
        let mut s =
            Scheduler::load(Arc::new(MemoryStore::new()), SchedulerConfig::default(), 0).unwrap();
        let id = submit(&mut s, &replicated(2, 2));
        let mut now = 1;
        // An honest worker and a faulty one: every shard disagrees.
        for round in 0..2 {
            now += 60_000; // past any backoff
            let honest = serve(&mut s, "honest", false, now);
            now += 60_000;
            let faulty = serve(&mut s, "faulty", true, now);
            assert!(honest > 0 && faulty > 0, "round {round}");
            let job = s.job(&id, now).unwrap();
            assert_eq!(job.shards_done, 0, "no disagreeing shard is accepted");
            if round == 0 {
                assert_eq!(job.state, proto::JobState::Running as i32);
            }
        }
        let job = s.job(&id, now).unwrap();
        assert_eq!(job.state, proto::JobState::Failed as i32);
        assert!(job.error.contains("replicas disagree"), "{}", job.error);
        assert!(job.answer.is_empty());
        let events = s.events(&id, 0).unwrap();
        assert!(events.iter().all(|e| e.kind != "accepted"));
    }
}
