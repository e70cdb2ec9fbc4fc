//! Shared helpers of the integration tests: in-process clusters, child-process
//! clusters, gRPC clients and small waits.
#![allow(dead_code)]

pub mod chaos;
pub mod evidence;
pub mod s3;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tally_coordinator::{CoordinatorConfig, RunningCoordinator};
use tally_kinds::cache::KernelCache;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::values::EncodedTask;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::worker_service_client::WorkerServiceClient;
use tally_wire::proto::{self, Job, JobState};
use tonic::transport::Channel;

pub async fn start_coordinator(data: Option<&Path>) -> RunningCoordinator {
    let config =
        CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), data.map(Path::to_path_buf));
    tally_coordinator::start(with_sandbox(config))
        .await
        .expect("coordinator starts")
}

pub async fn start_coordinator_on(addr: SocketAddr, data: &Path) -> RunningCoordinator {
    let config = CoordinatorConfig::new(addr, Some(data.to_path_buf()));
    tally_coordinator::start(with_sandbox(config))
        .await
        .expect("coordinator starts")
}

/// `config` with the sandbox wasm modules are checked in at submission, as
/// `tally coordinator` gives it.
pub fn with_sandbox(config: CoordinatorConfig) -> CoordinatorConfig {
    let sandbox = tally_wasm::GuestSandbox::new(tally_wasm::Limits::default()).expect("a sandbox");
    config
        .kernel_cache
        .set_guest_runtime(std::sync::Arc::new(sandbox));
    config
}

/// That the workers of `stats` spilled past their shares, kept their larger
/// inputs in files and sent outputs from files, and left `spill` empty;
/// `what` names the job in a failure.
pub fn assert_spilled_through_files(
    stats: &[std::sync::Arc<tally_worker::WorkerStats>],
    spill: &Path,
    what: &str,
) {
    let spilled: u64 = stats.iter().map(|s| s.spilled_bytes.get()).sum();
    assert!(spilled > 0, "{what}: the shards spilled");
    let in_files: u64 = stats.iter().map(|s| s.input_in_files_bytes.get()).sum();
    assert!(in_files > 0, "{what}: the larger inputs were kept in files");
    let out_files: u64 = stats.iter().map(|s| s.output_in_files_bytes.get()).sum();
    assert!(out_files > 0, "{what}: outputs were sent from files");
    let left: Vec<_> = std::fs::read_dir(spill).unwrap().collect();
    assert!(left.is_empty(), "{what}: the spill is removed: {left:?}");
}

/// In-process workers that stop when the returned sender is dropped or set.
pub struct Workers {
    stop: tokio::sync::watch::Sender<bool>,
    handles: Vec<tokio::task::JoinHandle<std::sync::Arc<tally_worker::WorkerStats>>>,
}

impl Workers {
    pub fn start(url: &str, count: usize, slots: usize) -> Workers {
        Workers::start_with(url, count, slots, |_| {})
    }

    /// Like [`Workers::start`], with `adjust` applied to each worker's config.
    pub fn start_with(
        url: &str,
        count: usize,
        slots: usize,
        adjust: impl Fn(&mut tally_worker::WorkerConfig),
    ) -> Workers {
        let (stop, rx) = tokio::sync::watch::channel(false);
        let handles = (0..count)
            .map(|i| {
                let mut config = tally_worker::WorkerConfig::new(url.to_string());
                config.slots = slots;
                config.threads = slots;
                config.worker_id = format!("test-worker-{i}-{}", std::process::id());
                config.lease_wait = Duration::from_millis(500);
                config.drain_timeout = Duration::from_secs(5);
                adjust(&mut config);
                let mut rx = rx.clone();
                tokio::spawn(async move {
                    tally_worker::run(config, async move {
                        let _ = rx.wait_for(|s| *s).await;
                    })
                    .await
                    .expect("worker runs")
                })
            })
            .collect();
        Workers { stop, handles }
    }

    /// Stops the workers; the counters of those that stopped cleanly.
    pub async fn stop(self) -> Vec<std::sync::Arc<tally_worker::WorkerStats>> {
        let _ = self.stop.send(true);
        let mut stats = Vec::new();
        for h in self.handles {
            if let Ok(s) = h.await {
                stats.push(s);
            }
        }
        stats
    }
}

pub async fn jobs_client(url: &str) -> JobServiceClient<Channel> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match JobServiceClient::connect(url.to_string()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub async fn workers_client(url: &str) -> WorkerServiceClient<Channel> {
    WorkerServiceClient::connect(url.to_string())
        .await
        .expect("connects")
}

/// The spec checked as the coordinator checks it; a test's own specs are valid.
/// A hex job with the cell-step plan, modulo 1 000 000 007.
pub fn hex_cell_step(side: u32, shards_per_step: u32) -> JobSpec {
    use tally_kinds::hex::{HexPlan, HexSpec};
    JobSpec::new(HexSpec {
        side,
        modulus: 1_000_000_007,
        plan: HexPlan::CellStep,
        shards_per_step,
        exact: false,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    })
}

/// A pegs frontier job on the triangle of side 5 (3 buckets a level).
pub fn pegs_frontier() -> JobSpec {
    use tally_kinds::pegs::{PegsPlanName, PegsSpec};
    JobSpec::new(PegsSpec {
        board: "triangle:5".into(),
        start: Some(4),
        end: None,
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets: 3,
        by_final_hole: false,
        no_prune: false,
    })
}

pub fn valid(spec: &JobSpec) -> ValidSpec {
    ValidSpec::new(spec.clone()).unwrap_or_else(|e| panic!("{spec:?} is refused: {e}"))
}

/// The spec's proto form, through the kind's own conversion (the spec is
/// checked first: a test's own specs are valid; a test of what the
/// coordinator refuses writes the proto message itself).
pub fn proto_spec(spec: &JobSpec) -> proto::JobSpec {
    proto::JobSpec::from(&valid(spec))
}

/// Submits `spec` with `attachments` (a wasm module) sent beside it.
pub async fn submit_attached(
    client: &mut JobServiceClient<Channel>,
    spec: &JobSpec,
    attachments: &[&[u8]],
) -> Job {
    client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(spec)),
            attachments: attachments.iter().map(|a| a.to_vec()).collect(),
            ..Default::default()
        })
        .await
        .expect("submit")
        .into_inner()
        .job
        .expect("a job")
}

pub async fn submit(client: &mut JobServiceClient<Channel>, spec: &JobSpec, key: &str) -> Job {
    client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(spec)),
            idempotency_key: key.into(),
            ..Default::default()
        })
        .await
        .expect("submit")
        .into_inner()
        .job
        .expect("job")
}

pub fn state(job: &Job) -> JobState {
    JobState::try_from(job.state).unwrap()
}

pub fn finished(job: &Job) -> bool {
    matches!(
        state(job),
        JobState::Succeeded | JobState::Failed | JobState::Cancelled
    )
}

/// The job as `Get` returns it now.
pub async fn get_job(client: &mut JobServiceClient<Channel>, id: &str) -> Job {
    client
        .get(proto::GetJobRequest { job_id: id.into() })
        .await
        .unwrap()
        .into_inner()
}

/// Polls the job until it finishes (panics after `timeout`).
pub async fn wait_finished(
    client: &mut JobServiceClient<Channel>,
    id: &str,
    timeout: Duration,
) -> Job {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(job) = client.get(proto::GetJobRequest { job_id: id.into() }).await {
            let job = job.into_inner();
            if finished(&job) {
                return job;
            }
        }
        assert!(
            Instant::now() < deadline,
            "job {id} did not finish within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn events(client: &mut JobServiceClient<Channel>, id: &str) -> Vec<proto::Event> {
    let mut events: Vec<proto::Event> = Vec::new();
    loop {
        let page = client
            .events(proto::EventsRequest {
                job_id: id.into(),
                from_sequence: events.last().map_or(0, |e| e.sequence + 1),
            })
            .await
            .expect("events")
            .into_inner()
            .events;
        let full = page.len() >= tally_coordinator::scheduler::EVENTS_PER_CALL;
        events.extend(page);
        if !full {
            return events;
        }
    }
}

/// The job's whole event log, retrying for up to 20 s while the coordinator
/// does not answer.
pub async fn events_with_retry(
    client: &mut JobServiceClient<Channel>,
    id: &str,
) -> Option<Vec<proto::Event>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let request = proto::EventsRequest {
            job_id: id.into(),
            from_sequence: 0,
        };
        if let Ok(Ok(r)) =
            tokio::time::timeout(Duration::from_secs(5), client.events(request)).await
        {
            return Some(r.into_inner().events);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The answer line computed by the kernels alone.
pub fn direct_answer(spec: &JobSpec) -> String {
    valid(spec)
        .compute_direct(2, &tally_kinds::Control::new())
        .expect("direct")
        .line
}

/// Registers `worker` (work goes only to registered workers); returns the
/// session its later calls carry.
pub async fn register(client: &mut WorkerServiceClient<Channel>, worker: &str) -> String {
    client
        .register(proto::RegisterRequest {
            worker_id: worker.into(),
            hostname: "test".into(),
            slots: 4,
            version: "test".into(),
            memory_budget_bytes: 0,
            ..Default::default()
        })
        .await
        .expect("register")
        .into_inner()
        .session
}

/// Leases one shard as the fake worker `worker` and holds it: nothing renews
/// the lease, so it lasts the job's lease TTL, and the job cannot finish
/// before the test reports the shard (or the lease expires). Returns the
/// lease and the worker's session.
pub async fn hold_a_shard(url: &str, worker: &str) -> (proto::ShardLease, String) {
    let mut client = workers_client(url).await;
    let session = register(&mut client, worker).await;
    let lease = client
        .lease(proto::LeaseRequest {
            lease_ahead: 0,
            worker_id: worker.into(),
            free_slots: 1,
            wait_ms: 5_000,
            session: session.clone(),
        })
        .await
        .expect("lease")
        .into_inner()
        .leases
        .pop()
        .expect("a shard to hold");
    (lease, session)
}

/// The report stream of a leased shard's honest result, computed here by the
/// kernels, as worker `worker` would send it.
pub fn result_report(
    spec: &JobSpec,
    lease: &proto::ShardLease,
    worker: &str,
    session: &str,
) -> Vec<proto::ReportMessage> {
    use proto::report_message::Body;
    let task = EncodedTask::from_bytes(&lease.task).unwrap();
    let outcome = valid(spec)
        .execute_once(&task, &KernelCache::new(), &tally_kinds::Control::new())
        .unwrap();
    [
        Body::Header(proto::ReportHeader {
            worker_id: worker.into(),
            lease_id: lease.lease_id.clone(),
            session: session.into(),
            output_bytes: 0,
        }),
        Body::Result(proto::ReportResult {
            compute_us: 0,
            partial: outcome.partial.to_bytes(),
            work_done: lease.work_total,
        }),
    ]
    .into_iter()
    .map(|b| proto::ReportMessage { body: Some(b) })
    .collect()
}

// ------------------------------------------------------------ processes

pub fn tally_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tally"))
}

/// A child process killed (SIGKILL) when dropped; dropped by a failing
/// test's panic, it first saves the evidence of the test's live processes
/// (`evidence::on_failure`).
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        evidence::unwatch(self.pid());
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            evidence::on_failure(self.pid());
        }
        self.kill9();
    }
}

/// A child that a failing test saves the evidence of, its log beside it.
fn watched(child: Child, name: &str, log: &Path) -> ChildGuard {
    evidence::watch(child.id(), name, Some(log));
    ChildGuard(child)
}

/// Copies a directory tree (a store fixture into a test's directory).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A process's log file, opened to append (a process started again adds to
/// its log).
pub fn log_file(log: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap()
}

/// The text of the log at `path` once a line of it holds every one of
/// `needles`: a process's background tasks (and a non-blocking log writer)
/// write when they get to it, so a log is never read once for a line.
/// Panics with the log if no such line comes within `limit`.
pub async fn wait_for_log_line(path: &Path, needles: &[&str], limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| needles.iter().all(|n| l.contains(n))) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no line with {needles:?} in {} within {limit:?}:\n{text}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn spawn_coordinator(port: u16, data: &Path, log: &Path) -> ChildGuard {
    spawn_coordinator_with(port, data, log, &[])
}

/// A coordinator process with `extra` options.
pub fn spawn_coordinator_with(port: u16, data: &Path, log: &Path, extra: &[&str]) -> ChildGuard {
    watched(
        Command::new(tally_bin())
            .args([
                "coordinator",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data",
            ])
            .arg(data)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log_file(log))
            .spawn()
            .expect("spawn coordinator"),
        "coordinator",
        log,
    )
}

/// `tally ARGS` with `env` added and logging at info level to `log`
/// (appended: a process started again adds to its log).
pub fn spawn_tally(args: &[&str], env: &[(String, String)], log: &Path) -> ChildGuard {
    watched(
        Command::new(tally_bin())
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("TALLY_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(log))
            .spawn()
            .expect("spawn tally"),
        &format!("tally-{}", args.first().unwrap_or(&"")),
        log,
    )
}

pub fn spawn_worker(url: &str, id: &str, slots: usize, extra: &[&str], log: &Path) -> ChildGuard {
    watched(
        Command::new(tally_bin())
            .args([
                "worker",
                "--coordinator",
                url,
                "--id",
                id,
                "--slots",
                &slots.to_string(),
            ])
            .args(["--threads", &slots.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log_file(log))
            .spawn()
            .expect("spawn worker"),
        &format!("worker-{id}"),
        log,
    )
}

// ------------------------------------------------------------ HTTP

/// A plain HTTP/1.1 GET: status code and body.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, "GET", path).unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

/// One bodiless HTTP/1.1 request: the status code and body of the answer,
/// or why there was none (nothing listening yet, say).
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let not_http = || std::io::Error::other(format!("not an HTTP answer: {response:.80}"));
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(not_http)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(not_http)?;
    Ok((status, body.to_string()))
}

/// The tests' seeded generator (SplitMix64), shared with the kernels' tests.
pub use tally_kernels::test_rng::Rng;

/// A runtime for tests that drive child processes from plain `#[test]`s.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The value of the Prometheus metric `name` in `/metrics` text.
pub fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("metric {name} missing"))
}
