//! The store under kill -9, and data directories the store must refuse.
//!
//! A child process (this test binary started again with [`CHILD_DIR`] set) opens
//! the sled store and drives the real [`Scheduler`] the way the coordinator
//! does: submits jobs, leases shards, reports checkpoints, results and failures,
//! expires leases, cancels. After every call that returned it appends what the
//! call acknowledged to a log that it fsyncs. The parent kills it with SIGKILL
//! after a random delay, reopens the store and checks it against that log and
//! against what it found after the previous kill.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tally_coordinator::CoordinatorError;
use tally_coordinator::records::{
    self, AuditRecord, EventRecord, JobRecord, JobState, ShardRecord, ShardState, checkpoint_key,
    decode, shard_key,
};
use tally_coordinator::scheduler::{
    Grant, Registration, Report, ReportedCheckpoint, ReportedFailure, ReportedResult, Scheduler,
    SchedulerConfig,
};
use tally_coordinator::store::{SledStore, Store, Tree};
use tally_kernels::sliders::SliderParams;
use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::dynamic::ShardContext;
use tally_kinds::hex::{HexPlan, HexSpec};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::sliders::SlidersSpec;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::values::{EncodedPartial, EncodedTask, ShardOutcome};
use tally_wire::lease::LeaseId;
use tally_wire::proto;

use support::{Rng, copy_dir};

// ------------------------------------------------------------ the crash loop

/// The child's environment: its data directory, acknowledgement log, seed and
/// the start of its clock.
const CHILD_DIR: &str = "TALLY_CRASH_CHILD_DIR";
const CHILD_ACKS: &str = "TALLY_CRASH_CHILD_ACKS";
const CHILD_SEED: &str = "TALLY_CRASH_CHILD_SEED";
const CHILD_CLOCK: &str = "TALLY_CRASH_CHILD_CLOCK";
/// Replays a run: the seed is printed at the start of every run.
const SEED_ENV: &str = "TALLY_CRASH_SEED";
const ITERATIONS_ENV: &str = "TALLY_CRASH_ITERATIONS";
const DEFAULT_ITERATIONS: usize = 100;
const MAX_KILL_DELAY_MS: u64 = 300;
/// The scheduler's clock is an argument: each child's starts this far after the
/// previous one's, so time never goes backwards across kills, and the resumed
/// copy runs at half that distance, after anything the child could have done.
const CLOCK_GAP_MS: u64 = 1_000_000;
/// The child's clock advances this much per operation: a lease (TTL 500 ms)
/// left behind by a killed child expires after about 20 operations.
const CHILD_TICK_MS: u64 = 25;
/// A child that is never killed stops here and fails the run.
const MAX_CHILD_STEPS: u64 = 10_000;
/// Unfinished jobs the child keeps at most.
const MAX_OPEN_JOBS: usize = 4;
/// Whether the child's workers also report on leases that expired without
/// being leased again. The scheduler accepts such reports but leaves the shard
/// in its queue, so it hands the same attempt out twice or leases a done shard
/// again (see the ignored `*_expired_lease_*` tests); off until it does not.
const REPORT_ON_EXPIRED_LEASES: bool = false;

/// One thing a call acknowledged, in the child's log.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Ack {
    /// The store and the scheduler were loaded.
    Opened,
    Submitted {
        job: String,
        key: Option<String>,
        spec: ValidSpec,
    },
    Leased {
        lease: String,
    },
    Checkpoint {
        lease: String,
    },
    Accepted {
        lease: String,
        partial: EncodedPartial,
    },
    Cancelled {
        job: String,
    },
}

/// The scheduler of `store`, with the workers the tests lease for registered
/// (work goes only to registered workers).
fn load_scheduler(store: Arc<dyn Store>, now: u64) -> tally_coordinator::Result<Scheduler> {
    let mut scheduler = Scheduler::load(store, scheduler_config(), now)?;
    for worker in ["w0", "w1", "w2", "r0", "r1", "r2", "a", "b"] {
        let registration = Registration {
            slots: 4,
            ..Registration::default()
        };
        scheduler.register(worker, registration, format!("session-{worker}"), now);
    }
    Ok(scheduler)
}

fn scheduler_config() -> SchedulerConfig {
    SchedulerConfig {
        backoff_base_ms: 1,
        backoff_max_ms: 10,
        ..SchedulerConfig::default()
    }
}

/// Small jobs of every kind and plan: multi-stage hex cell steps (barriers and
/// stage output), kayles rows long enough to checkpoint, sliders with
/// checkpoints, replicated jobs, and jobs that fail after two lost leases.
fn random_spec(rng: &mut Rng) -> ValidSpec {
    let mut spec = match rng.below(7) {
        0 => JobSpec::new(KaylesSpec {
            pins: *rng.pick(&[0, 10, 24, 40]),
            digits: 9,
        }),
        1 => JobSpec::new(KaylesSpec {
            pins: 4_500,
            digits: *rng.pick(&[3, 18]),
        }),
        2 | 3 => JobSpec::new(HexSpec {
            side: *rng.pick(&[2, 3]),
            modulus: *rng.pick(&[1_000_000_007, 998_244_353, 101]),
            plan: HexPlan::CellStep,
            shards_per_step: 1 + rng.below(3) as u32,
            exact: false,
            points_per_shard: 0,
            graph: Default::default(),
            graph_parts: 0,
        }),
        4 => JobSpec::new(HexSpec {
            side: 1 + rng.below(5) as u32,
            modulus: 1_000_000_007,
            plan: HexPlan::Points,
            shards_per_step: 0,
            exact: rng.chance(30),
            points_per_shard: 0,
            graph: Default::default(),
            graph_parts: 0,
        }),
        _ => JobSpec::new(SlidersSpec {
            board: SliderParams::new(3, 3, "WRRRRBBBB", "WBBBBRRRR"),
            prefixes: *rng.pick(&[2, 8]),
            ..Default::default()
        }),
    };
    spec.options.lease_ttl_ms = tally_kinds::spec::MIN_LEASE_TTL_MS;
    spec.options.max_attempts = if rng.chance(15) { 2 } else { 100 };
    spec.options.replicas = if rng.chance(20) { 2 } else { 1 };
    spec.options.priority = rng.below(5) - 2;
    ValidSpec::new(spec).expect("the random specs are valid")
}

/// Appends acknowledgements, one JSON line each, durable before it returns.
struct AckLog(std::fs::File);

impl AckLog {
    fn open(path: &Path) -> AckLog {
        AckLog(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("the acknowledgement log opens"),
        )
    }

    fn append(&mut self, ack: &Ack) {
        let mut line = serde_json::to_vec(ack).expect("acks serialise");
        line.push(b'\n');
        self.0.write_all(&line).expect("ack written");
        self.0.sync_data().expect("ack synced");
    }
}

/// The complete lines of a log; a last line without its newline was cut by the
/// kill and was never acknowledged.
fn read_acks(path: &Path) -> Vec<Ack> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    complete
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("complete ack lines parse"))
        .collect()
}

/// A checkpoint a kernel offered: resumable state, partial, work done.
type Offered = (Vec<u8>, Option<EncodedPartial>, u64);

/// Runs one shard as a worker would: the previous stage's data if the shard
/// needs it, the grant's checkpoint, and every checkpoint the kernel offers.
/// `None` when the job has moved on and its stage data is gone.
fn compute(
    scheduler: &mut Scheduler,
    grant: &Grant,
    cache: &KernelCache,
) -> Option<(ShardOutcome, Vec<Offered>)> {
    let task = EncodedTask::from_bytes(&grant.task).expect("stored tasks decode");
    let reads = grant
        .spec
        .stage_reads(grant.lease.stage, &task)
        .expect("stored tasks decode");
    let input = if reads.is_empty() {
        None
    } else {
        let mut parts = Vec::new();
        for read in reads {
            parts.push(
                scheduler
                    .stage_data(&grant.lease.job, read.stage, read.bucket)
                    .ok()?,
            );
        }
        let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        Some(
            grant
                .spec
                .decode_stage_inputs(&slices)
                .expect("stage data decodes"),
        )
    };
    let mut checkpoints = Vec::new();
    let outcome = grant
        .spec
        .execute(
            &task,
            ShardContext {
                input: input.as_ref(),
                checkpoint: &grant.checkpoint,
                cache,
                control: &Control::new(),
                checkpoint_every: Duration::ZERO,
                on_event: &mut |event| {
                    let state = event.state.into_bytes().expect("a state in memory");
                    checkpoints.push((state, event.partial, event.work_done));
                },
                room: None,
            },
        )
        .unwrap_or_else(|e| panic!("shard {} does not compute: {e}", grant.lease));
    Some((outcome, checkpoints))
}

fn result_report(worker: &str, grant: &Grant, outcome: &ShardOutcome) -> Report {
    let result = ReportedResult {
        partial: outcome.partial.to_bytes(),
        work_done: outcome.work_done,
        compute_us: 0,
    };
    Report::result(
        worker,
        grant.lease.clone(),
        result,
        outcome.output.clone().into_bytes().unwrap(),
    )
}

/// A refusal a worker may meet in normal operation: its attempt was superseded
/// (expired and leased again) or its job moved on. Anything else is a bug.
fn expect_stale(result: Result<impl Sized, CoordinatorError>, what: &str) -> bool {
    match result {
        Ok(_) => true,
        Err(CoordinatorError::FailedPrecondition(_)) => false,
        Err(e) => panic!("{what}: unexpected refusal: {e}"),
    }
}

fn read_shard(store: &dyn Store, job: &str, stage: u32, index: u32) -> Option<ShardRecord> {
    store
        .get(Tree::Shards, &shard_key(job, stage, index))
        .expect("store reads")
        .map(|bytes| decode("shard", &bytes).expect("shard decodes"))
}

/// The child half of [`the_store_survives_sigkill_at_random_moments`]: does
/// nothing unless that test started this process.
#[test]
fn store_writer_child_process() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let acks = std::env::var(CHILD_ACKS).expect("ack log path");
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let clock: u64 = std::env::var(CHILD_CLOCK).unwrap().parse().unwrap();
    run_child(Path::new(&dir), Path::new(&acks), seed, clock);
}

fn run_child(dir: &Path, acks: &Path, seed: u64, mut now: u64) {
    let mut log = AckLog::open(acks);
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir).expect("the store opens"));
    let mut scheduler = load_scheduler(store.clone(), now).expect("the scheduler loads");
    log.append(&Ack::Opened);
    let mut rng = Rng(seed);
    let cache = KernelCache::new();
    // Each held lease with its worker and the time it expires unless renewed.
    let mut held: Vec<(String, Grant, u64)> = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for step in 0..MAX_CHILD_STEPS {
        now += CHILD_TICK_MS;
        let open: Vec<proto::Job> = scheduler
            .list(now)
            .into_iter()
            .filter(|j| !support::finished(j))
            .collect();
        let roll = rng.below(100);
        if open.len() < MAX_OPEN_JOBS && (roll < 12 || open.is_empty()) {
            // A repeated idempotency key must return the job it named.
            if !keys.is_empty() && rng.chance(10) {
                let (key, job) = rng.pick(&keys).clone();
                let existing = scheduler.job_by_key(&key, now).expect("the key is known");
                assert_eq!(existing.id, job, "idempotency key {key}");
                continue;
            }
            let spec = random_spec(&mut rng);
            let key = rng.chance(30).then(|| format!("key-{seed}-{step}"));
            let plan = spec.prepare(&cache, &Control::new()).expect("plans");
            let (job, created) = scheduler
                .submit(spec.clone(), plan, key.clone(), Vec::new(), now)
                .expect("submits");
            assert!(created);
            if let Some(key) = &key {
                keys.push((key.clone(), job.id.clone()));
            }
            log.append(&Ack::Submitted {
                job: job.id,
                key,
                spec,
            });
        } else if roll < 40 {
            let worker = format!("w{}", rng.below(3));
            let slots = 1 + rng.below(3) as u32;
            for grant in scheduler.lease(&worker, slots, now).expect("leases") {
                log.append(&Ack::Leased {
                    lease: grant.lease.to_string(),
                });
                let expires = now + grant.ttl_ms;
                held.push((worker.clone(), grant, expires));
            }
        } else if roll < 88 && !held.is_empty() {
            let (worker, grant, expires) = held.swap_remove(rng.below(held.len() as u64) as usize);
            if REPORT_ON_EXPIRED_LEASES || now < expires {
                let child = Child {
                    scheduler: &mut scheduler,
                    store: &*store,
                    cache: &cache,
                    rng: &mut rng,
                    log: &mut log,
                };
                work_on(child, &worker, &grant, now);
            }
        } else if roll < 94 {
            scheduler.expire_leases(now).expect("expires");
        } else if roll < 95 && rng.chance(40) && !open.is_empty() {
            let job = rng.pick(&open).id.clone();
            scheduler.cancel(&job, now).expect("cancels");
            log.append(&Ack::Cancelled { job });
        } else {
            let worker = format!("w{}", rng.below(3));
            // A worker renews only what it still believes it holds.
            let leases: Vec<proto::LeaseProgress> = held
                .iter()
                .filter(|(w, _, expires)| *w == worker && now < *expires)
                .map(|(_, g, _)| proto::LeaseProgress {
                    lease_id: g.lease.to_string(),
                    work_done: 0,
                })
                .collect();
            let revoked = scheduler.heartbeat(&worker, &leases, now);
            held.retain(|(w, g, _)| *w != worker || !revoked.contains(&g.lease.to_string()));
            for (w, grant, expires) in &mut held {
                if *w == worker && now < *expires {
                    *expires = now + grant.ttl_ms;
                }
            }
        }
    }
    panic!("the child was not killed within {MAX_CHILD_STEPS} operations");
}

/// What a worker's handling of one lease touches in the child process.
struct Child<'a> {
    scheduler: &'a mut Scheduler,
    store: &'a dyn Store,
    cache: &'a KernelCache,
    rng: &'a mut Rng,
    log: &'a mut AckLog,
}

/// One worker's handling of a lease: lost (the lease will expire), failed, or
/// computed and reported, with a checkpoint first when the kernel offered one.
fn work_on(child: Child<'_>, worker: &str, grant: &Grant, now: u64) {
    let Child {
        scheduler,
        store,
        cache,
        rng,
        log,
    } = child;
    let fate = rng.below(100);
    if fate < 8 {
        return;
    }
    let Some((outcome, checkpoints)) = compute(scheduler, grant, cache) else {
        return;
    };
    if !checkpoints.is_empty() && rng.chance(70) {
        let (state, partial, work_done) = rng.pick(&checkpoints).clone();
        let checkpoint = ReportedCheckpoint {
            state,
            // As a worker sends it: no partial is empty bytes.
            partial: partial.map(|p| p.to_bytes()).unwrap_or_default(),
            work_done,
            state_blob: None,
        };
        let report = Report::checkpoint(worker, grant.lease.clone(), checkpoint);
        // A finished job answers `stop` and stores nothing.
        match scheduler.report(report, now) {
            Ok(outcome) if !outcome.stop => {}
            other => {
                expect_stale(other, "checkpoint");
                return;
            }
        }
        log.append(&Ack::Checkpoint {
            lease: grant.lease.to_string(),
        });
        if fate < 16 {
            return; // the worker dies after its checkpoint
        }
    }
    if fate < 24 {
        let failure = ReportedFailure {
            message: "the worker ran out of memory".into(),
            permanent: false,
            handed_back: rng.chance(30),
            no_room: false,
        };
        let failure = Report::failure(worker, grant.lease.clone(), failure);
        expect_stale(scheduler.report(failure, now), "failure");
        return;
    }
    let report = result_report(worker, grant, &outcome);
    if !expect_stale(scheduler.report(report, now), "result") {
        return;
    }
    // With replicas the first result is kept but not yet accepted; a finished
    // job acknowledges a report without accepting it.
    let lease = &grant.lease;
    let shard = read_shard(store, &lease.job, lease.stage, lease.index).expect("shard exists");
    if shard.state == ShardState::Done && shard.attempt == lease.attempt {
        log.append(&Ack::Accepted {
            lease: lease.to_string(),
            partial: outcome.partial,
        });
    }
}

type ShardId = (String, u32, u32);

fn parse_lease(lease: &str) -> (ShardId, u64) {
    let lease: LeaseId = lease.parse().expect("lease ids parse");
    ((lease.job, lease.stage, lease.index), lease.attempt)
}

/// Waits until the child has logged that it opened the store, or has ended.
fn wait_until_opened(child: &mut std::process::Child, acks: &Path) {
    let limit = Instant::now() + Duration::from_secs(120);
    while Instant::now() < limit {
        let opened = !read_acks(acks).is_empty();
        if opened || !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("the child did not open the store within two minutes");
}

/// Everything the children acknowledged, over the whole run.
#[derive(Default)]
struct Acknowledged {
    leases: HashSet<String>,
    highest_attempt: HashMap<ShardId, u64>,
    accepted: HashMap<ShardId, (u64, EncodedPartial)>,
    checkpoints: Vec<(ShardId, u64)>,
    submitted: BTreeMap<String, (Option<String>, ValidSpec)>,
    cancelled: HashSet<String>,
}

impl Acknowledged {
    /// Adds one child's log; a lease or an acceptance acknowledged twice is
    /// already a violation.
    fn absorb(&mut self, acks: &[Ack]) {
        for ack in acks {
            match ack {
                Ack::Opened => {}
                Ack::Submitted { job, key, spec } => {
                    let previous = self
                        .submitted
                        .insert(job.clone(), (key.clone(), spec.clone()));
                    assert!(previous.is_none(), "job id {job} was handed out twice");
                }
                Ack::Leased { lease } => {
                    assert!(
                        self.leases.insert(lease.clone()),
                        "lease {lease} (an attempt number) was handed out twice"
                    );
                    let (shard, attempt) = parse_lease(lease);
                    let highest = self.highest_attempt.entry(shard).or_default();
                    *highest = (*highest).max(attempt);
                }
                Ack::Checkpoint { lease } => self.checkpoints.push(parse_lease(lease)),
                Ack::Accepted { lease, partial } => {
                    let (shard, attempt) = parse_lease(lease);
                    if let Some(first) = self.accepted.get(&shard) {
                        panic!(
                            "shard {shard:?} accepted twice: attempts {} and {attempt}",
                            first.0
                        );
                    }
                    self.accepted.insert(shard, (attempt, partial.clone()));
                }
                Ack::Cancelled { job } => {
                    self.cancelled.insert(job.clone());
                }
            }
        }
    }
}

/// The whole store, decoded.
#[derive(Default)]
struct Snapshot {
    next_job: u64,
    /// The epoch of the last load: the high half of its attempt numbers.
    epoch: u64,
    jobs: BTreeMap<String, JobRecord>,
    shards: BTreeMap<ShardId, ShardRecord>,
    /// Raw event bytes by job, in sequence order, and the decoded records.
    events: BTreeMap<String, Vec<(Vec<u8>, EventRecord)>>,
    /// The audit log's entries (beside the events, under `audit/`).
    audit: Vec<AuditRecord>,
    blobs: BTreeSet<Vec<u8>>,
    keys: BTreeMap<String, String>,
}

fn key_parts(key: &[u8]) -> Vec<String> {
    String::from_utf8(key.to_vec())
        .expect("keys are text")
        .split('/')
        .map(str::to_string)
        .collect()
}

impl Snapshot {
    fn read(store: &dyn Store) -> Snapshot {
        let scan = |tree| store.scan_prefix(tree, b"").expect("store scans");
        let mut snapshot = Snapshot {
            next_job: store
                .get(Tree::Meta, b"next_job")
                .expect("reads")
                .map(|v| u64::from_be_bytes(v.try_into().expect("an 8-byte counter")))
                .unwrap_or(1),
            epoch: store
                .get(Tree::Meta, b"epoch")
                .expect("reads")
                .map(|v| u64::from_be_bytes(v.try_into().expect("an 8-byte epoch")))
                .unwrap_or(0),
            ..Snapshot::default()
        };
        for (key, value) in scan(Tree::Jobs) {
            let rec: JobRecord = decode("job", &value).expect("job records decode");
            assert_eq!(key, rec.id.as_bytes(), "job key and record disagree");
            snapshot.jobs.insert(rec.id.clone(), rec);
        }
        for (key, value) in scan(Tree::Shards) {
            let rec: ShardRecord = decode("shard", &value).expect("shard records decode");
            let parts = key_parts(&key);
            assert_eq!(parts.len(), 3, "shard key {parts:?}");
            let id = (
                parts[0].clone(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            );
            assert_eq!(
                (rec.job.clone(), rec.stage, rec.index),
                id,
                "shard key and record disagree"
            );
            snapshot.shards.insert(id, rec);
        }
        for (key, value) in scan(Tree::Events) {
            if key.starts_with(records::AUDIT_PREFIX) {
                let entry: AuditRecord = decode("audit", &value).expect("audit entries decode");
                assert_eq!(key, records::audit_key(entry.seq), "audit key and entry");
                snapshot.audit.push(entry);
                continue;
            }
            let rec: EventRecord = decode("event", &value).expect("event records decode");
            let parts = key_parts(&key);
            assert_eq!(parts.len(), 2, "event key {parts:?}");
            assert_eq!(
                parts[1].parse::<u64>().unwrap(),
                rec.seq,
                "event key and record"
            );
            snapshot
                .events
                .entry(parts[0].clone())
                .or_default()
                .push((value, rec));
        }
        snapshot.blobs = scan(Tree::Blobs).into_iter().map(|(k, _)| k).collect();
        for (key, value) in scan(Tree::Keys) {
            snapshot.keys.insert(
                String::from_utf8(key).unwrap(),
                String::from_utf8(value).unwrap(),
            );
        }
        snapshot
    }

    fn stage_shards(&self, job: &str, stage: u32) -> Vec<&ShardRecord> {
        self.shards
            .range((job.to_string(), stage, 0)..=(job.to_string(), stage, u32::MAX))
            .map(|(_, s)| s)
            .collect()
    }
}

/// Counts of what was checked, for the report at the end.
#[derive(Default, Debug)]
struct Tally {
    kills: usize,
    kills_after_open: usize,
    acks: usize,
    checks: BTreeMap<&'static str, u64>,
    jobs_resumed: usize,
    /// Time spent running children, checking the store, and resuming copies.
    running: Duration,
    checking: Duration,
    resuming: Duration,
}

impl Tally {
    fn check(&mut self, invariant: &'static str, holds: bool, detail: impl FnOnce() -> String) {
        *self.checks.entry(invariant).or_default() += 1;
        assert!(holds, "{invariant}: {}", detail());
    }
}

/// Every record belongs to a job, every job has all the shards of its stages,
/// counters, logs and blobs agree with the records.
fn check_consistent(s: &Snapshot, t: &mut Tally) {
    for (job, stage, index) in s.shards.keys() {
        t.check("no shard without its job", s.jobs.contains_key(job), || {
            format!("shard {job}/{stage}/{index}")
        });
    }
    for job in s.events.keys() {
        t.check(
            "no events without their job",
            s.jobs.contains_key(job),
            || job.clone(),
        );
    }
    // A submission is audited in the job's own batch.
    for entry in s.audit.iter().filter(|e| e.action == "submit" && e.done) {
        t.check(
            "no audited submission without its job",
            s.jobs.contains_key(&entry.job),
            || entry.job.clone(),
        );
    }
    for key in &s.blobs {
        let parts = key_parts(key);
        let shard = (
            parts[0].clone(),
            parts[1].parse::<u32>().unwrap(),
            parts[2].parse::<u32>().unwrap(),
        );
        t.check(
            "no blob without its shard",
            s.shards.contains_key(&shard),
            || format!("{parts:?}"),
        );
    }
    for (key, job) in &s.keys {
        let named = s.jobs.get(job).and_then(|r| r.idempotency_key.as_deref());
        t.check(
            "idempotency keys name their job",
            named == Some(key.as_str()),
            || format!("key {key} -> {job}"),
        );
    }
    for (id, rec) in &s.jobs {
        t.check(
            "job ids follow the counter",
            *id == format!("job-{:06}", rec.seq) && rec.seq < s.next_job,
            || format!("{id} seq {} next {}", rec.seq, s.next_job),
        );
        if let Some(key) = &rec.idempotency_key {
            t.check(
                "keyed jobs are in the key tree",
                s.keys.get(key) == Some(id),
                || id.clone(),
            );
        }
        t.check(
            "the current stage is planned",
            (1..=rec.plan.stages_total).contains(&rec.stage),
            || format!("{id} at stage {} of {}", rec.stage, rec.plan.stages_total),
        );
        for stage in 1..=rec.plan.stages_total {
            let shards = s.stage_shards(id, stage);
            if stage > rec.stage {
                t.check("no shards of a later stage", shards.is_empty(), || {
                    format!("{id} stage {stage}")
                });
                continue;
            }
            let indexes: Vec<u32> = shards.iter().map(|r| r.index).collect();
            let expected: Vec<u32> = (0..rec.shards_per_stage as u32).collect();
            t.check("a job has all its shards", indexes == expected, || {
                format!("{id} stage {stage}: {indexes:?}")
            });
            let done = shards.iter().all(|r| r.state == ShardState::Done);
            if stage < rec.stage || rec.state == JobState::Succeeded {
                t.check("a passed barrier had every shard done", done, || {
                    format!("{id} stage {stage}")
                });
            }
            for shard in shards {
                let checkpoint = s.blobs.contains(&checkpoint_key(id, stage, shard.index));
                t.check(
                    "a checkpoint flag and its blob agree",
                    checkpoint == shard.has_checkpoint,
                    || format!("{id}/{stage}/{}", shard.index),
                );
                if shard.state != ShardState::Pending {
                    t.check(
                        "a leased or done shard has an attempt",
                        shard.attempt >= 1,
                        || format!("{id}/{stage}/{}", shard.index),
                    );
                }
                // Stage output lives from its acceptance until the barrier after
                // the next stage; the running stage reads it.
                let needed = !rec.state.is_finished()
                    && shard.state == ShardState::Done
                    && (stage == rec.stage || stage + 1 == rec.stage);
                let obsolete = rec.state == JobState::Succeeded || stage + 1 < rec.stage;
                for chunk in 0..shard.output_chunks {
                    let present =
                        s.blobs
                            .contains(&records::output_key(id, stage, shard.index, chunk));
                    if needed {
                        t.check("stage output the job reads is kept", present, || {
                            format!("{id}/{stage}/{} chunk {chunk}", shard.index)
                        });
                    }
                    if obsolete {
                        t.check("stage output no stage reads is deleted", !present, || {
                            format!("{id}/{stage}/{} chunk {chunk}", shard.index)
                        });
                    }
                }
            }
        }
        if rec.state == JobState::Succeeded {
            t.check(
                "a succeeded job has its answer",
                rec.answer.is_some(),
                || id.clone(),
            );
        }
        let events = s.events.get(id).map(Vec::as_slice).unwrap_or(&[]);
        let sequences: Vec<u64> = events.iter().map(|(_, e)| e.seq).collect();
        t.check(
            "the event log is gapless and starts with the submission",
            sequences.iter().copied().eq(0..events.len() as u64)
                && events.first().map(|(_, e)| e.kind.as_str()) == Some("submitted"),
            || format!("{id}: {sequences:?}"),
        );
    }
}

/// Everything acknowledged is still there.
fn check_acknowledged(s: &Snapshot, acked: &Acknowledged, t: &mut Tally) {
    for (job, (key, spec)) in &acked.submitted {
        let rec = s.jobs.get(job);
        t.check(
            "an acknowledged submission is stored",
            rec.is_some_and(|r| r.spec == *spec && r.idempotency_key == *key),
            || job.clone(),
        );
    }
    // Leases are not stored; the epoch they carry is, before the first of
    // them is handed out, so the next load's attempts exceed them all.
    for (shard, &attempt) in &acked.highest_attempt {
        let leased_in = tally_wire::lease::Attempt(attempt).epoch();
        t.check(
            "attempt numbers never go backwards",
            s.epoch >= leased_in,
            || format!("{shard:?}: leased as attempt {attempt} in epoch {leased_in}, the store's epoch {}", s.epoch),
        );
    }
    for (shard, (attempt, partial)) in &acked.accepted {
        let rec = s.shards.get(shard);
        t.check(
            "an acknowledged result is kept with its partial",
            rec.is_some_and(|r| {
                r.state == ShardState::Done
                    && r.attempt == *attempt
                    && r.partial.as_ref() == Some(partial)
            }),
            || format!("{shard:?} attempt {attempt}: stored {rec:?}"),
        );
    }
    for (shard, attempt) in &acked.checkpoints {
        let rec = s.shards.get(shard).expect("checkpointed shard exists");
        // Replicas start over from scratch, dropping the checkpoint on purpose.
        if s.jobs[&shard.0].spec.options().replicas == 1 {
            t.check(
                "an acknowledged checkpoint is kept until the shard is done",
                rec.state == ShardState::Done || (rec.has_checkpoint && rec.attempt >= *attempt),
                || format!("{shard:?} attempt {attempt}: {rec:?}"),
            );
        }
    }
    for job in &acked.cancelled {
        t.check(
            "a cancelled job stays cancelled",
            s.jobs.get(job).map(|r| r.state) == Some(JobState::Cancelled),
            || job.clone(),
        );
    }
}

/// Nothing seen after the previous kill was lost or rewritten.
fn check_monotonic(now: &Snapshot, before: &Snapshot, t: &mut Tally) {
    t.check(
        "the job counter never goes back",
        now.next_job >= before.next_job,
        || format!("{} after {}", now.next_job, before.next_job),
    );
    for (id, old) in &before.jobs {
        let new = now.jobs.get(id);
        t.check("jobs are never lost", new.is_some(), || id.clone());
        if old.state.is_finished() {
            t.check("a finished job never changes", new == Some(old), || {
                format!("{id}: {old:?} became {new:?}")
            });
        }
        let (old_events, new_events) = (&before.events[id], &now.events[id]);
        t.check(
            "the event log only grows",
            new_events.len() >= old_events.len()
                && old_events
                    .iter()
                    .zip(new_events)
                    .all(|((a, _), (b, _))| a == b),
            || {
                format!(
                    "{id}: {} events became {}",
                    old_events.len(),
                    new_events.len()
                )
            },
        );
    }
    for (id, old) in &before.shards {
        let new = now.shards.get(id);
        t.check(
            "attempt numbers never go backwards",
            new.is_some_and(|n| n.attempt >= old.attempt),
            || format!("{id:?}: {old:?} became {new:?}"),
        );
        if old.state == ShardState::Done {
            t.check("a done shard never changes", new == Some(old), || {
                format!("{id:?}: {old:?} became {new:?}")
            });
        }
    }
}

/// The answer of the kernels alone, computed once per kind and parameters.
fn direct_answer(spec: &ValidSpec, cache: &mut HashMap<String, String>) -> String {
    let job = spec.spec();
    let key = serde_json::to_string(&(&job.kind, &job.params)).unwrap();
    cache
        .entry(key)
        .or_insert_with(|| support::direct_answer(job))
        .clone()
}

/// Loads the scheduler on a copy of the store and runs every unfinished job to
/// its end: the results of the leases the killed child's store recorded (by
/// a checkpoint) are refused, being of an earlier epoch, and everything is
/// leased again and computed. Every such job must succeed with the direct
/// answer, and the finished ones must not change.
fn resume_to_completion(
    copy: &Path,
    snapshot: &Snapshot,
    clock: u64,
    directs: &mut HashMap<String, String>,
    t: &mut Tally,
) {
    let store: Arc<dyn Store> = Arc::new(SledStore::open(copy).expect("the copy opens"));
    let mut now = clock;
    let mut scheduler = load_scheduler(store.clone(), now)
        .unwrap_or_else(|e| panic!("the scheduler does not load: {e}"));
    let listed: BTreeMap<String, (i32, u32)> = scheduler
        .list(now)
        .into_iter()
        .map(|j| (j.id, (j.state, j.stage)))
        .collect();
    let stored: BTreeMap<String, (i32, u32)> = snapshot
        .jobs
        .iter()
        .map(|(id, r)| {
            let state = r.state.to_proto() as i32;
            (id.clone(), (state, r.stage))
        })
        .collect();
    t.check(
        "the loaded scheduler lists the stored jobs",
        listed == stored,
        || format!("{listed:?} vs {stored:?}"),
    );
    let cache = KernelCache::new();
    let mut stale: Vec<(String, Grant)> = Vec::new();
    for (id, shard) in &snapshot.shards {
        let rec = &snapshot.jobs[&id.0];
        if shard.state != ShardState::Leased || rec.state.is_finished() || shard.stage != rec.stage
        {
            continue;
        }
        let checkpoint = if shard.has_checkpoint {
            store
                .get(Tree::Blobs, &checkpoint_key(&id.0, id.1, id.2))
                .unwrap()
                .unwrap()
        } else {
            Vec::new()
        };
        let grant = Grant {
            lease: LeaseId::new(id.0.clone(), id.1, id.2, shard.attempt),
            spec: rec.spec.clone(),
            task: shard.task.to_bytes(),
            checkpoint,
            checkpoint_bytes: 0,
            checkpoint_blob: None,
            ttl_ms: rec.spec.options().lease_ttl_ms,
            work_total: shard.work_total,
        };
        stale.push((
            shard
                .worker
                .clone()
                .expect("a leased shard names its worker"),
            grant,
        ));
    }
    for (worker, grant) in &stale {
        now += 1;
        let refused = match compute(&mut scheduler, grant, &cache) {
            Some((outcome, _)) => scheduler
                .report(result_report(worker, grant, &outcome), now)
                .is_err(),
            // The stage data its attempt read may be gone: nothing to report.
            None => true,
        };
        t.check(
            "a result leased before the restart is refused",
            refused,
            || grant.lease.to_string(),
        );
    }
    let mut held: Vec<(String, Grant)> = Vec::new();
    let open: Vec<&String> = snapshot
        .jobs
        .iter()
        .filter(|(_, r)| !r.state.is_finished())
        .map(|(id, _)| id)
        .collect();
    for round in 0.. {
        assert!(round < 1_000, "the resumed jobs do not finish");
        for worker in ["r0", "r1", "r2"] {
            for grant in scheduler.lease(worker, 64, now).expect("leases") {
                held.push((worker.to_string(), grant));
            }
        }
        if held.is_empty() {
            break;
        }
        for (worker, grant) in std::mem::take(&mut held) {
            now += 1;
            let (outcome, _) = compute(&mut scheduler, &grant, &cache)
                .unwrap_or_else(|| panic!("no stage data for {}", grant.lease));
            scheduler
                .report(result_report(&worker, &grant, &outcome), now)
                .unwrap_or_else(|e| panic!("result of {} refused: {e}", grant.lease));
        }
    }
    for id in open {
        let job = scheduler.job(id, now).unwrap();
        let expected = direct_answer(&snapshot.jobs[id].spec, directs);
        t.check(
            "a resumed job finishes with the direct answer",
            support::state(&job) == proto::JobState::Succeeded && job.answer == expected,
            || {
                format!(
                    "{id}: {:?} {:?} {}, expected {expected}",
                    support::state(&job),
                    job.answer,
                    job.error
                )
            },
        );
        t.jobs_resumed += 1;
    }
    for (id, rec) in snapshot.jobs.iter().filter(|(_, r)| r.state.is_finished()) {
        let job = scheduler.job(id, now).unwrap();
        t.check(
            "a finished job stays finished after a restart",
            job.state == rec.state.to_proto() as i32,
            || id.clone(),
        );
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// SIGKILL of a process writing through the scheduler, at random moments: after
/// every kill the store opens, everything acknowledged is there, no job is
/// half-written, attempts and logs never go back, and every unfinished job
/// resumes to the direct answer.
#[test]
fn the_store_survives_sigkill_at_random_moments() {
    let seed = env_or(
        SEED_ENV,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    let iterations = env_or(ITERATIONS_ENV, DEFAULT_ITERATIONS);
    eprintln!("storage crash loop: seed {seed} ({SEED_ENV}={seed} replays it), {iterations} kills");
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let stderr_path = root.path().join("child-stderr.txt");
    let mut rng = Rng(seed);
    let mut acked = Acknowledged::default();
    let mut tally = Tally::default();
    let mut previous = Snapshot::default();
    let mut directs = HashMap::new();
    for iteration in 0..iterations {
        let context = format!("seed {seed}, iteration {iteration}");
        let spawned = Instant::now();
        let acks_path = root.path().join(format!("acks-{iteration}.log"));
        let clock = (iteration as u64 + 1) * CLOCK_GAP_MS;
        let delay = Duration::from_millis(rng.below(MAX_KILL_DELAY_MS + 1));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "storage_crash::store_writer_child_process",
                "--nocapture",
            ])
            .env(CHILD_DIR, &data)
            .env(CHILD_ACKS, &acks_path)
            .env(CHILD_SEED, rng.next_u64().to_string())
            .env(CHILD_CLOCK, clock.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("the child starts");
        // Most kills land while the child writes: after it says it opened the
        // store (waiting for that line, not guessing how long opening takes on
        // a busy machine); the rest at any moment from its start.
        if rng.chance(80) {
            wait_until_opened(&mut child, &acks_path);
        }
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        if status.signal() != Some(libc::SIGKILL) {
            panic!(
                "{context}: the child ended by itself ({status}):\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        tally.running += spawned.elapsed();
        let acks = read_acks(&acks_path);
        tally.kills += 1;
        if matches!(acks.first(), Some(Ack::Opened)) {
            tally.kills_after_open += 1;
        }
        tally.acks += acks.len();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let checked = Instant::now();
            acked.absorb(&acks);
            let snapshot = {
                let store = SledStore::open(&data).unwrap_or_else(|e| {
                    let kept = keep_for_diagnosis(&data, seed, iteration);
                    panic!("the store does not open after the kill: {e} (kept in {kept})")
                });
                Snapshot::read(&store)
            };
            check_consistent(&snapshot, &mut tally);
            check_acknowledged(&snapshot, &acked, &mut tally);
            check_monotonic(&snapshot, &previous, &mut tally);
            for (id, rec) in &snapshot.jobs {
                if let (JobState::Succeeded, Some(answer)) = (rec.state, &rec.answer) {
                    let expected = direct_answer(&rec.spec, &mut directs);
                    tally.check(
                        "a stored answer is the direct answer",
                        *answer == expected,
                        || format!("{id}: {answer} vs {expected}"),
                    );
                }
            }
            tally.checking += checked.elapsed();
            let resumed = Instant::now();
            let copy = root.path().join("resumed");
            let _ = std::fs::remove_dir_all(&copy);
            copy_dir(&data, &copy);
            resume_to_completion(
                &copy,
                &snapshot,
                clock + CLOCK_GAP_MS / 2,
                &mut directs,
                &mut tally,
            );
            tally.resuming += resumed.elapsed();
            snapshot
        }));
        match outcome {
            Ok(snapshot) => previous = snapshot,
            Err(e) => {
                let message = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{context} (killed after {delay:?}): {message}");
            }
        }
    }
    let mut states: BTreeMap<&str, usize> = BTreeMap::new();
    for rec in previous.jobs.values() {
        *states.entry(rec.state.name()).or_default() += 1;
    }
    let finished = previous
        .jobs
        .values()
        .filter(|r| r.state.is_finished())
        .count();
    eprintln!(
        "storage crash loop: {} kills ({} after the store was open), {} acknowledgements, \
         jobs by state {states:?}, {} resumed to completion on copies; {:.1} s \
         (children {:.1} s, checks {:.1} s, resuming {:.1} s)",
        tally.kills,
        tally.kills_after_open,
        tally.acks,
        tally.jobs_resumed,
        started.elapsed().as_secs_f64(),
        tally.running.as_secs_f64(),
        tally.checking.as_secs_f64(),
        tally.resuming.as_secs_f64(),
    );
    for (invariant, count) in &tally.checks {
        eprintln!("  {count:>9}  {invariant}");
    }
    assert!(
        tally.kills_after_open * 2 >= tally.kills,
        "most kills must hit a child that writes"
    );
    assert!(finished > 0 && tally.jobs_resumed > 0);
}

/// Copies a store that failed to open to the temporary directory, so that the
/// failure can be examined after the test's own directory is gone.
fn keep_for_diagnosis(data: &Path, seed: u64, iteration: usize) -> String {
    let kept = std::env::temp_dir().join(format!("tally-crash-{seed}-{iteration}"));
    let _ = std::fs::create_dir_all(&kept);
    for file in files_under(data) {
        let to = kept.join(file.strip_prefix(data).unwrap());
        let _ = std::fs::create_dir_all(to.parent().unwrap());
        let _ = std::fs::copy(&file, &to);
    }
    kept.display().to_string()
}

// ------------------------------------------------------------ expired leases

/// A kayles job of four shards whose first lease, held by worker `a`, has
/// expired without being leased again; and the honest result of that lease.
fn expired_first_lease(dir: &Path) -> (Scheduler, Arc<dyn Store>, Grant, ShardOutcome) {
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir).unwrap());
    let mut scheduler = load_scheduler(store.clone(), 0).unwrap();
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 10,
        digits: 9,
    });
    spec.options.lease_ttl_ms = tally_kinds::spec::MIN_LEASE_TTL_MS;
    let spec = ValidSpec::new(spec).unwrap();
    let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
    scheduler.submit(spec, plan, None, Vec::new(), 0).unwrap();
    let grant = scheduler.lease("a", 1, 0).unwrap().remove(0);
    assert_eq!(scheduler.expire_leases(1_000).unwrap(), 1);
    let (outcome, _) = compute(&mut scheduler, &grant, &KernelCache::new()).unwrap();
    (scheduler, store, grant, outcome)
}

/// The last report of an expired attempt fails it; the shard is queued once,
/// so its next attempt is handed out once.
#[test]
fn a_failure_on_an_expired_lease_never_hands_out_an_attempt_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (mut scheduler, _, grant, _) = expired_first_lease(dir.path());
    let failure = ReportedFailure {
        message: "out of memory".into(),
        permanent: false,
        handed_back: false,
        no_room: false,
    };
    let failure = Report::failure("a", grant.lease.clone(), failure);
    scheduler.report(failure, 1_001).unwrap();
    let leases: Vec<LeaseId> = scheduler
        .lease("b", 16, 2_000)
        .unwrap()
        .into_iter()
        .map(|g| g.lease)
        .collect();
    let distinct: HashSet<&LeaseId> = leases.iter().collect();
    assert_eq!(
        distinct.len(),
        leases.len(),
        "an attempt handed out twice: {leases:?}"
    );
}

/// The result of an expired attempt that was not leased again is accepted (it
/// is still the latest attempt); from then on the shard stays done.
#[test]
fn a_result_on_an_expired_lease_stays_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut scheduler, store, grant, outcome) = expired_first_lease(dir.path());
    scheduler
        .report(result_report("a", &grant, &outcome), 1_001)
        .unwrap();
    let again: Vec<Grant> = scheduler.lease("b", 16, 2_000).unwrap();
    assert!(
        again.iter().all(|g| g.lease.index != grant.lease.index),
        "the accepted shard was leased again"
    );
    let lease = &grant.lease;
    let shard = read_shard(&*store, &lease.job, lease.stage, lease.index).unwrap();
    assert_eq!(shard.state, ShardState::Done);
    assert_eq!(shard.partial, Some(outcome.partial));
}

// ------------------------------------------------------------ refused directories

/// A closed store with one job, two leases and an accepted result.
fn populated_store(dir: &Path) {
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir).unwrap());
    let mut scheduler = load_scheduler(store, 0).unwrap();
    let spec = JobSpec::new(KaylesSpec {
        pins: 24,
        digits: 9,
    });
    let spec = ValidSpec::new(spec).unwrap();
    let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
    scheduler.submit(spec, plan, None, Vec::new(), 0).unwrap();
    let grants = scheduler.lease("a", 2, 0).unwrap();
    let (outcome, _) = compute(&mut scheduler, &grants[0], &KernelCache::new()).unwrap();
    scheduler
        .report(result_report("a", &grants[0], &outcome), 1)
        .unwrap();
}

/// Every regular file under `dir`, in a stable order.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn overwrite(path: &Path, from: u64, len: u64, rng: &mut Rng) {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(from)).unwrap();
    let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    file.write_all(&bytes).unwrap();
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Writes raw entries into the store's meta tree with sled itself.
fn set_meta(dir: &Path, key: &[u8], value: Option<&[u8]>) {
    let db = sled_open(dir);
    let meta = db.open_tree("meta").unwrap();
    match value {
        Some(v) => meta.insert(key, v).unwrap(),
        None => meta.remove(key).unwrap(),
    };
    db.flush().unwrap();
}

/// What a refusal must leave as it was.
fn kept(dir: &Path, kept: Kept) -> Vec<(Vec<u8>, Vec<u8>)> {
    match kept {
        Kept::Bytes => contents(dir)
            .into_iter()
            .map(|(path, bytes)| (path.into_os_string().into_encoded_bytes(), bytes))
            .collect(),
        Kept::Records => records(dir),
    }
}

/// Opens `dir` with sled itself. A store just closed or refused in this
/// process may hold sled's file lock until its background flusher notices the
/// drop: wait for it (as long as a busy machine may delay that thread).
fn sled_open(dir: &Path) -> sled::Db {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(e) if e.to_string().contains("acquire lock") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("sled cannot read {}: {e}", dir.display()),
        }
    }
}

/// Every tree's entries as sled reads them, each key prefixed by its tree.
fn records(dir: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = sled_open(dir);
    let mut all = Vec::new();
    for name in db.tree_names() {
        for entry in db.open_tree(&name).unwrap().iter() {
            let (key, value) = entry.unwrap();
            all.push(([&name[..], b"/", &key[..]].concat(), value.to_vec()));
        }
    }
    all.sort();
    all
}

/// The bytes of every file under `dir` (empty if it is not a readable directory).
fn contents(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    if !dir.is_dir() {
        return std::fs::read(dir)
            .map(|b| vec![(dir.to_path_buf(), b)])
            .unwrap_or_default();
    }
    files_under(dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect()
}

/// How one kind of damage is made, a piece of the refusal it must get, and
/// what the refusal must leave unchanged.
struct Damage {
    name: &'static str,
    make: fn(&Path, &mut Rng),
    says: &'static str,
    /// Whether the store may open, back at an earlier consistent state. sled
    /// recovers the longest readable prefix of its log, but the commit mark
    /// refuses a store that lost acknowledged commits, so no damage may.
    may_roll_back: bool,
    kept: Kept,
}

#[derive(Clone, Copy)]
enum Kept {
    /// Every byte: the store is refused before sled opens it.
    Bytes,
    /// Every record sled can read: sled rewrites its own files when it opens
    /// them, damaged or not, before tally can look at the records.
    Records,
}

const SLED_ERROR: &str = "cannot open the store in";

/// sled reads a log damaged in the middle as a shorter one; the commit mark
/// then tells that acknowledged commits are missing. Either refusal will do.
const SLED_ERROR_OR_LOST: &str = "cannot open the store in|has lost acknowledged data";

/// Whether `text` says one of the `|`-separated phrases of `says`.
fn says_one_of(text: &str, says: &str) -> bool {
    says.split('|').any(|phrase| text.contains(phrase))
}

fn damages() -> Vec<Damage> {
    vec![
        Damage {
            name: "random bytes over every sled file",
            make: |dir, rng| {
                populated_store(dir);
                for file in files_under(dir) {
                    overwrite(&file, 0, file_len(&file), rng);
                }
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: SLED_ERROR,
        },
        Damage {
            name: "random bytes over the head of the main file",
            make: |dir, rng| {
                populated_store(dir);
                overwrite(&dir.join("db"), 0, 4096, rng);
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "holds nothing sled can read back",
        },
        Damage {
            name: "random bytes inside the main file",
            make: |dir, rng| {
                populated_store(dir);
                let db = dir.join("db");
                let len = file_len(&db);
                overwrite(&db, len / 4, len / 2, rng);
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: SLED_ERROR_OR_LOST,
        },
        Damage {
            name: "random bytes over the configuration",
            make: |dir, rng| {
                populated_store(dir);
                let conf = dir.join("conf");
                overwrite(&conf, 0, file_len(&conf), rng);
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: SLED_ERROR,
        },
        Damage {
            name: "the main file truncated to half",
            make: |dir, _| {
                populated_store(dir);
                let db = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("db"))
                    .unwrap();
                db.set_len(db.metadata().unwrap().len() / 2).unwrap();
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: SLED_ERROR_OR_LOST,
        },
        Damage {
            name: "the main file truncated to nothing",
            make: |dir, _| {
                populated_store(dir);
                std::fs::File::create(dir.join("db")).unwrap();
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "holds nothing sled can read back",
        },
        Damage {
            name: "the main file removed",
            make: |dir, _| {
                populated_store(dir);
                std::fs::remove_file(dir.join("db")).unwrap();
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: "lacks the store file db",
        },
        Damage {
            name: "a directory of another program",
            make: |dir, _| {
                std::fs::create_dir_all(dir.join("photos")).unwrap();
                std::fs::write(dir.join("notes.txt"), "hello").unwrap();
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: "is not empty and holds no tally store",
        },
        Damage {
            name: "another program's file named db",
            make: |dir, _| {
                std::fs::create_dir_all(dir).unwrap();
                let mut sqlite = b"SQLite format 3\0".to_vec();
                sqlite.resize(8192, 0);
                std::fs::write(dir.join("db"), sqlite).unwrap();
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: "lacks the store file conf",
        },
        Damage {
            name: "another program's sled database",
            make: |dir, _| {
                let db = sled_open(dir);
                db.insert(b"user:1", b"alice").unwrap();
                db.open_tree("sessions")
                    .unwrap()
                    .insert(b"s", b"1")
                    .unwrap();
                db.flush().unwrap();
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "was not written by tally",
        },
        Damage {
            name: "a newer schema version",
            make: |dir, _| {
                populated_store(dir);
                set_meta(dir, b"schema", Some(&2u32.to_be_bytes()));
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "has schema version 2; this tally reads version 1",
        },
        Damage {
            name: "a malformed schema version",
            make: |dir, _| {
                populated_store(dir);
                set_meta(dir, b"schema", Some(b"v1"));
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "has a malformed schema version",
        },
        Damage {
            name: "another product's marker",
            make: |dir, _| {
                populated_store(dir);
                set_meta(dir, b"product", Some(b"tallyho"));
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "was not written by tally",
        },
        Damage {
            name: "data without a schema version",
            make: |dir, _| {
                populated_store(dir);
                set_meta(dir, b"schema", None);
                set_meta(dir, b"product", None);
            },
            may_roll_back: false,
            kept: Kept::Records,
            says: "has data but no schema version",
        },
        Damage {
            name: "an empty store without a schema version",
            make: |dir, _| {
                let db = sled_open(dir);
                for tree in ["meta", "jobs", "shards", "blobs", "events", "keys"] {
                    db.open_tree(tree).unwrap();
                }
                db.flush().unwrap();
            },
            says: "is empty and has no schema version: its first start did not finish",
            may_roll_back: false,
            kept: Kept::Records,
        },
        Damage {
            name: "an empty file where the directory should be",
            make: |dir, _| {
                std::fs::write(dir, b"").unwrap();
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: "is not a directory",
        },
        Damage {
            name: "a symbolic link to itself",
            make: |dir, _| {
                std::os::unix::fs::symlink(dir, dir).unwrap();
            },
            may_roll_back: false,
            kept: Kept::Bytes,
            says: "",
        },
    ]
}

/// The refusal `SledStore::open` gives (`None` if it opens), failing the test if
/// it panics.
fn refusal(dir: &Path, name: &str) -> Option<String> {
    match std::panic::catch_unwind(|| SledStore::open(dir).map(drop)) {
        Err(_) => panic!("{name}: opening panicked"),
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
    }
}

/// The coordinator's exit on `dir`: status and stderr. Fails the test if it
/// starts serving.
fn coordinator_exit(dir: &Path, as_nobody: bool) -> (std::process::ExitStatus, String) {
    let mut command = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(support::tally_bin());
        c
    } else {
        Command::new(support::tally_bin())
    };
    let mut child = command
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir)
        .env("RUST_BACKTRACE", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the coordinator starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            return (
                output.status,
                String::from_utf8_lossy(&output.stderr).into(),
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "the coordinator served on {}: {}",
                dir.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A line of the coordinator's log: timestamp, level, target.
fn is_log_record(line: &str) -> bool {
    let plain: String = strip_ansi(line);
    let mut words = plain.split_whitespace();
    let stamped = words
        .next()
        .is_some_and(|w| w.len() > 20 && w.ends_with('Z'));
    stamped
        && words
            .next()
            .is_some_and(|w| ["WARN", "ERROR", "INFO"].contains(&w))
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One line, `error: ...` with the expected words, no panic, no backtrace.
fn check_one_clear_line(name: &str, status: std::process::ExitStatus, stderr: &str, says: &str) {
    assert!(!status.success(), "{name}: exit {status}");
    assert!(
        status.code().is_some(),
        "{name}: killed by a signal: {status}"
    );
    // Log records (sled warns about what it finds) may come first; the error
    // itself is one line.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    let other: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("error") && !is_log_record(l))
        .collect();
    assert!(
        errors.len() == 1 && errors[0].starts_with("error: ") && says_one_of(errors[0], says),
        "{name}: expected one line saying {says:?}, got:\n{stderr}"
    );
    assert!(
        other.is_empty(),
        "{name}: stray lines {other:?} in:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{name}: {stderr}"
    );
}

/// Corrupt, truncated, foreign, newer and misplaced data directories are
/// refused with one clear message, by the store and by `tally coordinator`,
/// and the refusal leaves them as they were.
#[test]
fn damaged_and_foreign_data_directories_are_refused() {
    let mut rng = Rng(0x7a11_d15c);
    let reference = {
        let root = tempfile::tempdir().unwrap();
        populated_store(root.path());
        let store = SledStore::open(root.path()).unwrap();
        Snapshot::read(&store)
    };
    let mut failures = Vec::new();
    let damages = damages();
    for damage in &damages {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        (damage.make)(&dir, &mut rng);
        // The closure only reads `reference`, which a panic leaves as it was.
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let before = kept(&dir, damage.kept);
            let Some(message) = refusal(&dir, damage.name) else {
                assert!(damage.may_roll_back, "{}: the store opened", damage.name);
                return rolled_back(&dir, &reference);
            };
            assert!(
                says_one_of(&message, damage.says) && !message.contains('\n'),
                "{}: {message:?} does not say {:?}",
                damage.name,
                damage.says
            );
            let (status, stderr) = coordinator_exit(&dir, false);
            check_one_clear_line(damage.name, status, &stderr, damage.says);
            assert!(
                kept(&dir, damage.kept) == before,
                "{}: the refusal changed the directory",
                damage.name
            );
            format!("refused: {message}")
        }));
        match checked {
            Ok(outcome) => eprintln!("{}: {outcome}", damage.name),
            Err(e) => failures.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| damage.name.to_string()),
            ),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} damages not refused cleanly:\n{}",
        failures.len(),
        damages.len(),
        failures.join("\n")
    );
}

/// A store sled opened despite damage inside its log must hold a consistent
/// earlier state: every record checks, the scheduler loads, and what is left
/// is part of what was written.
fn rolled_back(dir: &Path, reference: &Snapshot) -> String {
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir).unwrap());
    let snapshot = Snapshot::read(&*store);
    check_consistent(&snapshot, &mut Tally::default());
    for (id, shard) in &snapshot.shards {
        let original = &reference.shards[id];
        assert!(
            shard == original || shard.attempt <= original.attempt,
            "{id:?}: {shard:?} was never written"
        );
    }
    Scheduler::load(store, scheduler_config(), 10).expect("the scheduler loads");
    let count = |s: &Snapshot| {
        s.jobs.len() + s.shards.len() + s.events.values().map(Vec::len).sum::<usize>()
    };
    format!(
        "opened, rolled back to a consistent state with {} of {} records",
        count(&snapshot),
        count(reference)
    )
}

/// A first start killed after sled created its files but before the schema
/// was written leaves its marker: the next start finishes the job.
#[test]
fn an_interrupted_first_start_is_completed_by_the_next() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("data");
    {
        let db = sled_open(&dir);
        db.open_tree("meta").unwrap();
        db.flush().unwrap();
    }
    std::fs::write(dir.join("tally-init"), b"").unwrap();
    populated_store(&dir);
    assert!(!dir.join("tally-init").exists(), "the marker is removed");
    let store = SledStore::open(&dir).expect("a finished store opens");
    assert_eq!(Snapshot::read(&store).jobs.len(), 1);
}

/// A data directory the coordinator may not read is refused the same way. As
/// root every directory is readable, so the coordinator then runs as nobody.
#[test]
fn an_unreadable_data_directory_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = root.path().join("data");
    populated_store(&dir);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o000)).unwrap();
    let as_root = unsafe { libc::geteuid() } == 0;
    if !as_root {
        let message = refusal(&dir, "unreadable").expect("refused");
        assert!(message.contains("ermission denied"), "{message}");
    }
    let (status, stderr) = coordinator_exit(&dir, as_root);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    check_one_clear_line("unreadable", status, &stderr, "ermission denied");
}
