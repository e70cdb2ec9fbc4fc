//! The chaos driver: a coordinator and workers as child processes of the `tally`
//! binary, a seeded schedule of faults (kill -9 of the coordinator or a worker,
//! SIGSTOP for a while then SIGCONT, restarts of killed processes), and a
//! steady stream of hex, kayles and sliders jobs submitted with `tally submit`
//! at a fixed rate whatever the faults do. After the faults stop, every job
//! must finish within the settle bound with the answer of the kernels alone,
//! and no shard whose result was acknowledged may ever be leased again.
//!
//! Used by `tests/it/chaos.rs`; parameterised by [`ChaosConfig::from_env`]
//! (`TALLY_CHAOS_SEED`, `TALLY_CHAOS_SECS`). It lives with the tests, not in
//! the product CLI: it needs the test binary's path, tempdirs, SIGSTOP and
//! in-process reference answers, none of which belong in `tally`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tally_kinds::hex::{HexPlan, HexSpec};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::kind::SpecOf;
use tally_kinds::sliders::SlidersSpec;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_wire::lease::LeaseId;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::{self, JobState};
use tonic::transport::Channel;

use super::{ChildGuard, Rng, evidence, free_port, log_file, tally_bin};

// ------------------------------------------------------------------ rng

// ------------------------------------------------------------------ config

/// One job the driver may submit: the `tally submit` arguments and the spec
/// they must produce (the reference answer is computed from the spec).
#[derive(Clone, Debug)]
pub struct JobTemplate {
    pub kind: &'static str,
    pub args: Vec<String>,
    pub spec: ValidSpec,
}

impl JobTemplate {
    fn new<S: SpecOf>(params: S, args: &[&str]) -> JobTemplate {
        let spec = ValidSpec::of(params).expect("the menu's specs are valid");
        JobTemplate {
            kind: spec.kind_name(),
            args: args.iter().map(|s| s.to_string()).collect(),
            spec,
        }
    }
}

/// The default menu: moderate sizes, each job a few seconds on one core, so a
/// job is interrupted by faults but the stream of jobs keeps moving.
pub fn default_menu() -> Vec<JobTemplate> {
    let hex = |side: u32, shards: u32| {
        JobTemplate::new(
            HexSpec {
                side,
                modulus: 1_000_000_007,
                plan: HexPlan::CellStep,
                shards_per_step: shards,
                exact: false,
                points_per_shard: 0,
                graph: Default::default(),
                graph_parts: 0,
            },
            &[
                "hex",
                "--side",
                &side.to_string(),
                "--plan",
                "cell-step",
                "--shards-per-step",
                &shards.to_string(),
            ],
        )
    };
    let kayles = |pins: u64| {
        JobTemplate::new(
            KaylesSpec { pins, digits: 9 },
            &["kayles", "--pins", &pins.to_string()],
        )
    };
    let sliders = |prefixes: u32| {
        JobTemplate::new(
            SlidersSpec {
                board: tally_kernels::sliders::SliderParams::default(),
                prefixes,
                ..Default::default()
            },
            &["sliders", "--prefixes", &prefixes.to_string()],
        )
    };
    vec![
        hex(5, 2),
        hex(6, 3),
        hex(7, 3),
        kayles(3_000),
        kayles(8_000),
        kayles(5_000),
        sliders(64),
        sliders(128),
    ]
}

#[derive(Clone, Debug)]
pub struct ChaosConfig {
    pub seed: u64,
    /// How long faults are injected; then everything is healed and the jobs
    /// in flight must finish.
    pub duration: Duration,
    /// Time allowed after the faults stop for the jobs in flight to finish.
    pub settle: Duration,
    pub workers: usize,
    /// Long enough that a heartbeat delayed by a busy machine does not lose
    /// the lease: the faults, not the load, make leases expire.
    pub lease_ttl_ms: u64,
    /// High enough that the faults' expiries never fail a job: its answer is
    /// what the run checks.
    pub max_attempts: u32,
    /// Workers hold each lease this long before computing (the hidden
    /// `--shard-delay-ms`), so faults often hit shards in flight even though
    /// the menu's shards compute in milliseconds.
    pub shard_delay_ms: u64,
    /// Pause between two faults, drawn uniformly.
    pub fault_gap_ms: (u64, u64),
    /// A job is submitted this often while the faults run (kinds in turn),
    /// whether or not earlier jobs have finished...
    pub submit_every: Duration,
    /// ...unless this many are unfinished: the stream then waits, so a long
    /// run does not pile up more work than the workers can do in the settle time.
    pub max_unfinished: usize,
    pub menu: Vec<JobTemplate>,
}

impl ChaosConfig {
    /// `TALLY_CHAOS_SEED` (default: from the clock, printed so a failure can be
    /// replayed) and `TALLY_CHAOS_SECS` (default `default_secs`).
    pub fn from_env(default_secs: u64) -> ChaosConfig {
        let seed = match std::env::var("TALLY_CHAOS_SEED") {
            Ok(s) => s
                .trim()
                .parse()
                .expect("TALLY_CHAOS_SEED must be an unsigned integer"),
            Err(_) => {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    % 1_000_000
            }
        };
        let secs = match std::env::var("TALLY_CHAOS_SECS") {
            Ok(s) => s
                .trim()
                .parse()
                .expect("TALLY_CHAOS_SECS must be a number of seconds"),
            Err(_) => default_secs,
        };
        ChaosConfig {
            seed,
            duration: Duration::from_secs(secs),
            settle: Duration::from_secs(180),
            workers: 3,
            lease_ttl_ms: 3_000,
            max_attempts: 20,
            shard_delay_ms: 100,
            fault_gap_ms: (400, 2_500),
            submit_every: Duration::from_millis(1_500),
            max_unfinished: 9,
            menu: default_menu(),
        }
    }
}

// ------------------------------------------------------------------ report

#[derive(Debug, Default)]
pub struct ChaosReport {
    pub seed: u64,
    pub duration: Duration,
    pub coordinator_kills: u32,
    pub coordinator_stops: u32,
    pub worker_kills: u32,
    pub worker_stops: u32,
    /// Per kind: jobs submitted, and jobs whose answer equals the kernels'.
    pub jobs_submitted: BTreeMap<&'static str, u32>,
    pub jobs_verified: BTreeMap<&'static str, u32>,
    /// Jobs that were unfinished when the coordinator was killed.
    pub jobs_interrupted: u32,
    /// The most jobs unfinished at once, and the submissions put off because
    /// `max_unfinished` jobs were unfinished.
    pub most_unfinished: usize,
    pub submissions_deferred: u32,
    /// Seconds from the end of the faults until the last job finished.
    pub drained_after_faults: Duration,
    pub shards: u64,
    /// Leases beyond the first of each shard: work redone because its holder
    /// was killed, stopped past its TTL, or cut off by a coordinator fault.
    pub re_leases: u64,
    pub expired: u64,
    /// Results acknowledged to a worker (from the workers' logs) and accepted
    /// events seen by the driver while the jobs ran.
    pub acknowledged: u64,
    pub observed_accepts: u64,
    /// Shards leased again after their result was acknowledged. Must be 0.
    pub recomputed_after_accept: u64,
    /// Milliseconds from each coordinator restart to the next accepted result.
    pub resume_ms: Vec<u64>,
    /// Restarts followed by another coordinator fault before any result.
    pub restarts_without_result: u32,
    /// Processes that ended by themselves and were started again (as a
    /// supervisor does): a coordinator its watchdog ended, say.
    pub exits_restarted: Vec<String>,
    pub elapsed: Duration,
    /// Everything that broke an invariant; empty on success.
    pub violations: Vec<String>,
    pub workdir: PathBuf,
}

impl ChaosReport {
    pub fn table(&self) -> String {
        let mut t = String::new();
        let mut row = |k: &str, v: String| {
            let _ = writeln!(t, "  {k:<44} {v}");
        };
        row("seed", self.seed.to_string());
        row("fault window", format!("{} s", self.duration.as_secs()));
        row("wall time", format!("{:.1} s", self.elapsed.as_secs_f64()));
        row(
            "coordinator kill -9 / SIGSTOP survived",
            format!("{} / {}", self.coordinator_kills, self.coordinator_stops),
        );
        row(
            "worker kill -9 / SIGSTOP survived",
            format!("{} / {}", self.worker_kills, self.worker_stops),
        );
        let kinds: Vec<String> = self
            .jobs_submitted
            .iter()
            .map(|(k, n)| {
                format!(
                    "{k} {}/{n}",
                    self.jobs_verified.get(k).copied().unwrap_or(0)
                )
            })
            .collect();
        row("jobs verified/submitted", kinds.join(", "));
        row(
            "jobs unfinished at a coordinator kill",
            self.jobs_interrupted.to_string(),
        );
        row(
            "most jobs unfinished at once / deferred",
            format!("{} / {}", self.most_unfinished, self.submissions_deferred),
        );
        row(
            "all jobs finished after the faults within",
            format!("{:.1} s", self.drained_after_faults.as_secs_f64()),
        );
        row("shards accepted", self.shards.to_string());
        row(
            "re-leases (in flight at a fault)",
            self.re_leases.to_string(),
        );
        row("lease expiries", self.expired.to_string());
        row(
            "acknowledged results (worker logs / events)",
            format!("{} / {}", self.acknowledged, self.observed_accepts),
        );
        row(
            "shards recomputed after acceptance",
            self.recomputed_after_accept.to_string(),
        );
        let mut r = self.resume_ms.clone();
        r.sort_unstable();
        row(
            "resume after restart ms (min/median/max)",
            if r.is_empty() {
                "-".into()
            } else {
                format!(
                    "{} / {} / {} (n = {})",
                    r[0],
                    r[r.len() / 2],
                    r[r.len() - 1],
                    r.len()
                )
            },
        );
        row(
            "restarts faulted again before a result",
            self.restarts_without_result.to_string(),
        );
        row(
            "processes exited by themselves, restarted",
            match self.exits_restarted.is_empty() {
                true => "0".to_string(),
                false => self.exits_restarted.join(", "),
            },
        );
        row("violations", self.violations.len().to_string());
        t
    }
}

// ------------------------------------------------------------------ processes

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn signal(child: &ChildGuard, sig: i32) {
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    unsafe {
        libc::kill(child.pid() as i32, sig);
    }
}

/// A process the driver kills, stops and restarts.
struct Proc {
    name: String,
    child: Option<ChildGuard>,
    /// The log of its current generation.
    log: PathBuf,
    generation: u32,
    stopped_until: Option<Instant>,
    restart_at: Option<Instant>,
}

impl Proc {
    fn new(name: String) -> Proc {
        Proc {
            name,
            child: None,
            log: PathBuf::new(),
            generation: 0,
            stopped_until: None,
            restart_at: None,
        }
    }

    fn up(&self) -> bool {
        self.child.is_some() && self.stopped_until.is_none()
    }

    fn kill9(&mut self, restart_after: Duration) {
        if let Some(mut c) = self.child.take() {
            c.kill9();
        }
        self.stopped_until = None;
        self.restart_at = Some(Instant::now() + restart_after);
    }

    fn stop(&mut self, for_: Duration) {
        if let Some(c) = &self.child {
            signal(c, libc::SIGSTOP);
            self.stopped_until = Some(Instant::now() + for_);
        }
    }

    fn cont(&mut self) {
        if let Some(c) = &self.child {
            signal(c, libc::SIGCONT);
        }
        self.stopped_until = None;
    }

    /// How the process ended, if it ended by itself (not killed by the
    /// driver): the driver, as a supervisor, starts it again.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.0.try_wait().ok()??;
        self.child = None;
        self.stopped_until = None;
        Some(status)
    }

    /// Saves its stacks and log tail (`evidence::dump`) if it runs.
    fn dump_evidence(&self, why: &str) -> Option<PathBuf> {
        let child = self.child.as_ref()?;
        let name = format!("{}-g{}", self.name, self.generation);
        evidence::dump(child.pid(), &name, Some(&self.log), why)
    }
}

struct Cluster {
    dir: PathBuf,
    shard_delay_ms: u64,
    port: u16,
    url: String,
    coordinator: Proc,
    workers: Vec<Proc>,
}

impl Cluster {
    fn spawn_coordinator(&mut self) {
        self.coordinator.generation += 1;
        let log = self
            .dir
            .join(format!("coordinator-{}.log", self.coordinator.generation));
        let child = Command::new(tally_bin())
            .args([
                "coordinator",
                "--listen",
                &format!("127.0.0.1:{}", self.port),
            ])
            .arg("--data")
            .arg(self.dir.join("data"))
            .args(["--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(log_file(&log))
            .spawn()
            .expect("spawn coordinator");
        evidence::watch(child.id(), "coordinator", Some(&log));
        self.coordinator.child = Some(ChildGuard(child));
        self.coordinator.log = log;
        self.coordinator.restart_at = None;
    }

    fn spawn_worker(&mut self, i: usize) {
        let w = &mut self.workers[i];
        w.generation += 1;
        let id = format!("{}-g{}", w.name, w.generation);
        let log = self.dir.join(format!("worker-{id}.log"));
        let child = Command::new(tally_bin())
            .args(["worker", "--coordinator", &self.url, "--id", &id])
            .args(["--slots", "1", "--threads", "1", "--checkpoint-ms", "250"])
            .args(["--shard-delay-ms", &self.shard_delay_ms.to_string()])
            .args(["--log-format", "json"])
            .stdout(Stdio::null())
            .stderr(log_file(&log))
            .spawn()
            .expect("spawn worker");
        evidence::watch(child.id(), &format!("worker-{id}"), Some(&log));
        w.child = Some(ChildGuard(child));
        w.log = log;
        w.restart_at = None;
    }

    /// Saves the evidence of every process running (the coordinator first)
    /// before they are killed; the files' paths.
    fn dump_evidence(&self, why: &str) -> Vec<PathBuf> {
        std::iter::once(&self.coordinator)
            .chain(&self.workers)
            .filter_map(|p| p.dump_evidence(why))
            .collect()
    }
}

/// How long a coordinator that runs (neither stopped nor killed) may leave
/// every call unanswered before the driver saves the evidence of its
/// processes: far beyond a restart's load on a loaded machine.
const UNANSWERED_LIMIT: Duration = Duration::from_secs(60);

async fn connect(url: &str) -> JobServiceClient<Channel> {
    let channel = Channel::from_shared(url.to_string())
        .unwrap()
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .connect_lazy();
    JobServiceClient::new(channel)
}

/// `tally submit` with an idempotency key, so a retry after a lost answer
/// returns the same job. `None` when the coordinator did not answer in time.
async fn cli_submit(url: &str, key: &str, config: &ChaosConfig, args: &[String]) -> Option<String> {
    let mut cmd = tokio::process::Command::new(tally_bin());
    cmd.args(["submit", "--coordinator", url, "--idempotency-key", key])
        .args(["--lease-ttl-ms", &config.lease_ttl_ms.to_string()])
        .args(["--max-attempts", &config.max_attempts.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(5), cmd.output())
        .await
        .ok()?
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().map(|l| l.trim().to_string())
}

// ------------------------------------------------------------------ the run

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    KillCoordinator,
    StopCoordinator,
    KillWorker,
    StopWorker,
}

const FAULTS: [Fault; 4] = [
    Fault::KillCoordinator,
    Fault::StopCoordinator,
    Fault::KillWorker,
    Fault::StopWorker,
];

struct ActiveJob {
    template: usize,
    id: Option<String>,
    key: String,
}

/// The next template of the stream: kinds in turn, a random size of each.
fn next_template(config: &ChaosConfig, kinds: &[&'static str], turn: u32, rng: &mut Rng) -> usize {
    let kind = kinds[turn as usize % kinds.len()];
    let candidates: Vec<usize> = (0..config.menu.len())
        .filter(|&i| config.menu[i].kind == kind)
        .collect();
    candidates[rng.range(0, candidates.len() as u64 - 1) as usize]
}

/// Runs the chaos schedule of `config` and checks the invariants; the report
/// lists any violation (the caller asserts there are none).
pub async fn run(config: &ChaosConfig) -> ChaosReport {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("tally-chaos-")
        .tempdir()
        .unwrap();
    let mut report = ChaosReport {
        seed: config.seed,
        duration: config.duration,
        workdir: tmp.path().to_path_buf(),
        ..ChaosReport::default()
    };
    let mut rng = Rng::new(config.seed);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut cluster = Cluster {
        dir: tmp.path().to_path_buf(),
        shard_delay_ms: config.shard_delay_ms,
        port,
        url: url.clone(),
        coordinator: Proc::new("coordinator".into()),
        workers: (0..config.workers)
            .map(|i| Proc::new(format!("chaos-w{i}")))
            .collect(),
    };
    cluster.spawn_coordinator();
    for i in 0..config.workers {
        cluster.spawn_worker(i);
    }
    let mut client = connect(&url).await;

    // A steady stream: one job every `submit_every` while the faults run,
    // kinds in turn, up to `max_unfinished` unfinished at once.
    let mut kinds: Vec<&'static str> = config.menu.iter().map(|t| t.kind).collect();
    kinds.dedup();
    let mut active: Vec<ActiveJob> = Vec::new();
    let mut submitted = 0u32;
    let mut next_submit = Instant::now();
    // job id -> template index; observed events per job (in order).
    let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
    let mut observed: HashMap<String, Vec<proto::Event>> = HashMap::new();
    let mut finished: HashMap<String, proto::Job> = HashMap::new();

    // The first four faults are the four kinds in a seeded order, so even a
    // short run has each of them.
    let mut opening: Vec<Fault> = FAULTS.to_vec();
    for i in (1..opening.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        opening.swap(i, j);
    }
    opening.reverse();
    let mut next_fault = Instant::now() + Duration::from_secs(2);
    // Coordinator restarts: (unix ms of the spawn); coordinator fault times.
    let mut restarts: Vec<u64> = Vec::new();
    let mut coordinator_faults: Vec<u64> = Vec::new();
    let mut last_restart: Option<Instant> = None;
    let mut last_accept_ms = 0u64;
    let end_of_faults = started + config.duration;
    // Since when the running coordinator has answered no call, and whether
    // that was saved as evidence (once per coordinator generation).
    let mut unanswered_since: Option<Instant> = None;
    let mut unanswered_dumped = 0u32;

    loop {
        let now = Instant::now();
        let faulting = now < end_of_faults;

        // A supervisor: a process that ended by itself starts again. Only
        // the watchdog's exit is expected of a coordinator.
        if let Some(status) = cluster.coordinator.exited() {
            report
                .exits_restarted
                .push(format!("coordinator ({status})"));
            if status.code() != Some(tally_coordinator::watchdog::STALL_EXIT_CODE) {
                report.violations.push(format!(
                    "the coordinator exited by itself ({status}), not by its watchdog; see {}",
                    cluster.dir.display()
                ));
            }
            cluster.spawn_coordinator();
            restarts.push(now_ms());
            last_restart = Some(Instant::now());
            client = connect(&url).await;
        }
        for i in 0..cluster.workers.len() {
            if let Some(status) = cluster.workers[i].exited() {
                let name = cluster.workers[i].name.clone();
                report.exits_restarted.push(format!("{name} ({status})"));
                cluster.spawn_worker(i);
            }
        }
        // Heal what is due: SIGCONT stopped processes, restart killed ones.
        if cluster
            .coordinator
            .stopped_until
            .is_some_and(|t| t <= now || !faulting)
        {
            cluster.coordinator.cont();
        }
        if cluster
            .coordinator
            .restart_at
            .is_some_and(|t| t <= now || !faulting)
        {
            cluster.spawn_coordinator();
            restarts.push(now_ms());
            last_restart = Some(Instant::now());
            client = connect(&url).await;
        }
        for i in 0..cluster.workers.len() {
            let w = &mut cluster.workers[i];
            if w.stopped_until.is_some_and(|t| t <= now || !faulting) {
                w.cont();
            }
            if w.restart_at.is_some_and(|t| t <= now || !faulting) {
                cluster.spawn_worker(i);
            }
        }

        // Inject the next fault.
        if faulting && now >= next_fault {
            next_fault = now + rng.millis(config.fault_gap_ms.0, config.fault_gap_ms.1);
            let opened = opening.pop();
            let mut fault = opened.unwrap_or_else(|| FAULTS[rng.range(0, 3) as usize]);
            // Let a restarted coordinator show progress (or 10 s pass) before
            // the next coordinator fault, so resume times are measurable.
            let coordinator_ready = cluster.coordinator.up()
                && last_restart.is_none_or(|t| {
                    t.elapsed() > Duration::from_secs(10)
                        || last_accept_ms >= *restarts.last().unwrap_or(&0)
                });
            if matches!(fault, Fault::KillCoordinator | Fault::StopCoordinator)
                && !coordinator_ready
            {
                // An opening fault is put off, not dropped: every run must see
                // each kind of fault at least once.
                if opened.is_some() {
                    opening.push(fault);
                }
                fault = Fault::KillWorker;
            }
            let live: Vec<usize> = (0..cluster.workers.len())
                .filter(|&i| cluster.workers[i].up())
                .collect();
            match fault {
                Fault::KillCoordinator => {
                    let unfinished = active.iter().filter(|a| a.id.is_some()).count();
                    report.jobs_interrupted += unfinished as u32;
                    cluster.coordinator.kill9(rng.millis(100, 2_000));
                    coordinator_faults.push(now_ms());
                    report.coordinator_kills += 1;
                }
                Fault::StopCoordinator => {
                    cluster.coordinator.stop(rng.millis(300, 3_000));
                    coordinator_faults.push(now_ms());
                    report.coordinator_stops += 1;
                }
                Fault::KillWorker | Fault::StopWorker if live.is_empty() => {}
                Fault::KillWorker => {
                    let i = live[rng.range(0, live.len() as u64 - 1) as usize];
                    cluster.workers[i].kill9(rng.millis(100, 3_000));
                    report.worker_kills += 1;
                }
                Fault::StopWorker => {
                    let i = live[rng.range(0, live.len() as u64 - 1) as usize];
                    cluster.workers[i].stop(rng.millis(300, 4_000));
                    report.worker_stops += 1;
                }
            }
        }

        // The stream goes on whatever the faults do: a job submitted while the
        // coordinator is down is sent (with its idempotency key) once it is up.
        if faulting && now >= next_submit {
            next_submit += config.submit_every;
            if active.len() >= config.max_unfinished {
                report.submissions_deferred += 1;
            } else {
                let template = next_template(config, &kinds, submitted, &mut rng);
                submitted += 1;
                active.push(ActiveJob {
                    template,
                    id: None,
                    key: format!("chaos-{}-{submitted}", config.seed),
                });
                *report
                    .jobs_submitted
                    .entry(config.menu[template].kind)
                    .or_default() += 1;
                report.most_unfinished = report.most_unfinished.max(active.len());
            }
        }

        // Observe the jobs, while the coordinator answers.
        if cluster.coordinator.up() {
            let mut asked = false;
            let mut answered = false;
            let mut done: Vec<usize> = Vec::new();
            for (slot, job) in active.iter_mut().enumerate() {
                let template = &config.menu[job.template];
                if job.id.is_none() {
                    job.id = cli_submit(&url, &job.key, config, &template.args).await;
                    if let Some(id) = &job.id {
                        jobs.insert(id.clone(), job.template);
                    }
                }
                let Some(id) = job.id.clone() else { continue };
                asked = true;
                // New events since the last look.
                let seen = observed.entry(id.clone()).or_default();
                let from = seen.last().map_or(0, |e| e.sequence + 1);
                if let Ok(Ok(r)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.events(proto::EventsRequest {
                        job_id: id.clone(),
                        from_sequence: from,
                    }),
                )
                .await
                {
                    for e in r.into_inner().events {
                        if e.kind == "accepted" {
                            last_accept_ms = last_accept_ms.max(e.time_ms);
                        }
                        seen.push(e);
                    }
                }
                if let Ok(Ok(j)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.get(proto::GetJobRequest { job_id: id.clone() }),
                )
                .await
                {
                    answered = true;
                    let j = j.into_inner();
                    if super::finished(&j) {
                        finished.insert(id.clone(), j);
                        done.push(slot);
                    }
                }
            }
            for slot in done.into_iter().rev() {
                active.remove(slot);
            }
            match (asked, answered) {
                (true, false) => {
                    let since = *unanswered_since.get_or_insert(now);
                    let generation = cluster.coordinator.generation;
                    if since.elapsed() > UNANSWERED_LIMIT && unanswered_dumped < generation {
                        unanswered_dumped = generation;
                        let why = format!(
                            "the coordinator answered no call for {} s",
                            since.elapsed().as_secs()
                        );
                        cluster.dump_evidence(&why);
                    }
                }
                (true, true) => unanswered_since = None,
                _ => {}
            }
        } else {
            unanswered_since = None;
        }

        if !faulting {
            if active.is_empty() {
                report.drained_after_faults = now.saturating_duration_since(end_of_faults);
                break;
            }
            if now > end_of_faults + config.settle {
                let why = format!(
                    "jobs still unfinished {} s after the faults stopped: {:?}",
                    config.settle.as_secs(),
                    active
                        .iter()
                        .map(|a| a.id.clone().unwrap_or_else(|| a.key.clone()))
                        .collect::<Vec<_>>()
                );
                let saved = cluster.dump_evidence(&why);
                report
                    .violations
                    .push(format!("{why} (stacks and logs: {saved:?})"));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // ---------------------------------------------------------- verification
    let acks = read_acknowledgements(tmp.path());
    report.acknowledged = acks.len() as u64;
    let mut all_events: Vec<proto::Event> = Vec::new();
    let mut direct: HashMap<usize, String> = HashMap::new();
    for (id, &template) in &jobs {
        let t = &config.menu[template];
        let final_events = match super::events_with_retry(&mut client, id).await {
            Some(e) => e,
            None => {
                report.violations.push(format!("{id}: events unavailable"));
                continue;
            }
        };
        // Every event seen while the job ran is still in the log, unchanged.
        let by_seq: HashMap<u64, &proto::Event> =
            final_events.iter().map(|e| (e.sequence, e)).collect();
        for e in observed.get(id).into_iter().flatten() {
            if by_seq.get(&e.sequence) != Some(&e) {
                report.violations.push(format!(
                    "{id}: event {} ({} {}/{} attempt {}) seen before a fault is gone or changed",
                    e.sequence, e.kind, e.stage, e.shard, e.attempt
                ));
            }
            if e.kind == "accepted" {
                report.observed_accepts += 1;
            }
        }
        // Each shard accepted exactly once; leases and expiries.
        let mut accepted: HashMap<(u32, u32), u64> = HashMap::new();
        let mut leases: HashMap<(u32, u32), Vec<u64>> = HashMap::new();
        for e in &final_events {
            let key = (e.stage, e.shard);
            match e.kind.as_str() {
                "accepted" if accepted.insert(key, e.attempt).is_some() => {
                    report.violations.push(format!(
                        "{id}: shard {}/{} accepted twice",
                        e.stage, e.shard
                    ));
                }
                "accepted" => {}
                "leased" => leases.entry(key).or_default().push(e.attempt),
                "expired" => report.expired += 1,
                _ => {}
            }
        }
        report.shards += accepted.len() as u64;
        report.re_leases += leases.values().map(|v| v.len() as u64 - 1).sum::<u64>();
        // Acknowledged results, from the workers and from the events seen
        // live: the shard's accepted attempt, and never leased again.
        let mut acked: HashSet<(u32, u32, u64)> = observed
            .get(id)
            .into_iter()
            .flatten()
            .filter(|e| e.kind == "accepted")
            .map(|e| (e.stage, e.shard, e.attempt))
            .collect();
        let job_finished = finished.get(id);
        for a in acks.iter().filter(|a| &a.job == id) {
            // `stop` on an accepted result means the job is finished: either
            // this result finished it, or it was a late report of a job that
            // had finished without it (answered OK, not stored).
            if a.stop && accepted.get(&(a.stage, a.shard)) != Some(&a.attempt) {
                continue;
            }
            acked.insert((a.stage, a.shard, a.attempt));
        }
        for &(stage, shard, attempt) in &acked {
            match accepted.get(&(stage, shard)) {
                Some(&a) if a == attempt => {}
                other => report.violations.push(format!(
                    "{id}: shard {stage}/{shard} acknowledged at attempt {attempt}, accepted in the log at {other:?}"
                )),
            }
            let later = leases
                .get(&(stage, shard))
                .into_iter()
                .flatten()
                .filter(|&&l| l > attempt)
                .count() as u64;
            if later > 0 {
                report.recomputed_after_accept += 1;
                report.violations.push(format!(
                    "{id}: shard {stage}/{shard} leased {later} time(s) after attempt {attempt} was acknowledged"
                ));
            }
        }
        // The answer is the kernels' answer.
        let Some(job) = job_finished else {
            continue;
        };
        if super::state(job) != JobState::Succeeded {
            report.violations.push(format!(
                "{id} ({}) ended {:?}: {}",
                t.spec.describe(),
                super::state(job),
                job.error
            ));
            continue;
        }
        if accepted.len() as u64 != job.shards_total {
            report.violations.push(format!(
                "{id}: {} shards accepted, {} planned",
                accepted.len(),
                job.shards_total
            ));
        }
        let mut expected_spec: JobSpec = t.spec.spec().clone();
        expected_spec.options.lease_ttl_ms = config.lease_ttl_ms;
        expected_spec.options.max_attempts = config.max_attempts;
        let expected_spec = super::valid(&expected_spec);
        match job.spec.as_ref().map(ValidSpec::try_from) {
            Some(Ok(s)) if s == expected_spec => {}
            other => report.violations.push(format!(
                "{id}: stored spec {other:?} differs from the submitted {expected_spec:?}"
            )),
        }
        let want = match direct.get(&template) {
            Some(a) => a.clone(),
            None => {
                let spec = t.spec.clone();
                let a = tokio::task::spawn_blocking(move || super::direct_answer(spec.spec()))
                    .await
                    .unwrap();
                direct.insert(template, a.clone());
                a
            }
        };
        if job.answer == want {
            *report.jobs_verified.entry(t.kind).or_default() += 1;
        } else {
            report.violations.push(format!(
                "{id} ({}): answer {} but the kernels say {want}",
                t.spec.describe(),
                job.answer
            ));
        }
        all_events.extend(final_events);
    }

    // Resume time after each restart: the first accepted result after it,
    // before the next coordinator fault.
    let mut accept_times: Vec<u64> = all_events
        .iter()
        .filter(|e| e.kind == "accepted")
        .map(|e| e.time_ms)
        .collect();
    accept_times.sort_unstable();
    for &r in &restarts {
        let next_fault = coordinator_faults
            .iter()
            .copied()
            .filter(|&f| f > r)
            .min()
            .unwrap_or(u64::MAX);
        match accept_times.iter().find(|&&t| t >= r) {
            Some(&t) if t < next_fault => report.resume_ms.push(t - r),
            _ => report.restarts_without_result += 1,
        }
    }
    report.elapsed = started.elapsed();
    drop(cluster);
    if report.violations.is_empty() {
        drop(tmp);
    } else {
        // Keep the logs and the store of a failed run.
        let kept = tmp.keep();
        report.workdir = kept;
    }
    report
}

/// A result the coordinator answered OK, from a worker's log.
#[derive(Debug)]
pub struct Ack {
    pub job: String,
    pub stage: u32,
    pub shard: u32,
    pub attempt: u64,
    pub stop: bool,
}

/// The `result accepted` lines of every worker log in `dir` (JSON logs).
pub fn read_acknowledgements(dir: &Path) -> Vec<Ack> {
    let mut acks = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("worker-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            // A kill -9 may cut the last line: skip what does not parse.
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let fields = &v["fields"];
            if fields["message"] != "result accepted" {
                continue;
            }
            let Some(lease) = fields["lease"].as_str() else {
                continue;
            };
            let Ok(lease) = lease.parse::<LeaseId>() else {
                continue;
            };
            acks.push(Ack {
                job: lease.job,
                stage: lease.stage,
                shard: lease.index,
                attempt: lease.attempt,
                stop: fields["stop"].as_bool().unwrap_or(false),
            });
        }
    }
    acks
}
