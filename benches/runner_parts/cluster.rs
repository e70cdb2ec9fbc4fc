//! A benchmark cluster: a coordinator process on a free loopback port and
//! worker processes, a job submitted and watched to its answer, and what each
//! process cost (wall time, CPU time, peak memory, the store's size).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::runner_processes::{dir_size, reap, tally};

pub struct Cluster {
    pub wall: f64,
    pub answer: String,
    /// Each worker process's CPU time (user and system) and peak memory.
    pub worker_cpu: Vec<f64>,
    pub worker_rss: Vec<u64>,
    /// The coordinator process's CPU time (user and system) and peak memory.
    pub coordinator_cpu: f64,
    pub coordinator_rss: u64,
    /// The coordinator's data directory's size once the job is done.
    pub store_bytes: u64,
}

impl Cluster {
    /// Each worker process's peak memory in `unit` (`scale` bytes), with
    /// `decimals` digits.
    pub fn worker_peaks(&self, scale: f64, unit: &str, decimals: usize) -> String {
        self.worker_rss
            .iter()
            .map(|b| format!("{:.decimals$} {unit}", *b as f64 / scale))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The run with the median wall time of `runs` runs of [`cluster`].
pub fn median_cluster(submit: &[&str], slots: &[usize], runs: usize) -> Cluster {
    median_cluster_with(submit, slots, &Setup::default(), runs)
}

/// [`median_cluster`] with the coordinator's extra options and the
/// processes' environment of `setup`.
pub fn median_cluster_with(
    submit: &[&str],
    slots: &[usize],
    setup: &Setup,
    runs: usize,
) -> Cluster {
    let mut all: Vec<Cluster> = (0..runs).map(|_| cluster(submit, slots, setup)).collect();
    all.sort_by(|a, b| a.wall.partial_cmp(&b.wall).unwrap());
    all.swap_remove(all.len() / 2)
}

/// What a benchmark cluster adds to the defaults.
#[derive(Default)]
pub struct Setup {
    pub coordinator_args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub worker_args: Vec<String>,
    /// Where the workers' logs go (else nowhere).
    pub worker_log: Option<std::path::PathBuf>,
}

/// Runs `tally submit SUBMIT...` on a coordinator with one worker process per
/// entry of `slots` (that many slots and threads each) and waits for it: the
/// wall time from submission to the answer, and each worker's peak memory.
// The workers are reaped by wait4, which also returns their peak memory.
#[allow(clippy::zombie_processes)]
pub fn cluster(submit: &[&str], slots: &[usize], setup: &Setup) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (url, spawn_coordinator) = coordinator_on_a_free_port_with(&data, setup);
    let coordinator = spawn_coordinator();
    let workers: Vec<_> = slots
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let n = n.to_string();
            tally()
                .args([
                    "worker",
                    "--coordinator",
                    &url,
                    "--slots",
                    &n,
                    "--threads",
                    &n,
                ])
                .args(["--id", &format!("bench-{i}")])
                .args(&setup.worker_args)
                .envs(setup.env.iter().cloned())
                .stderr(match &setup.worker_log {
                    Some(path) => Stdio::from(
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .unwrap(),
                    ),
                    None => Stdio::null(),
                })
                .spawn()
                .unwrap()
        })
        .collect();
    let (wall, answer) = submit_and_watch(&url, submit);
    let (worker_cpu, worker_rss) = workers
        .into_iter()
        .map(|w| reap(w.id(), libc::SIGTERM))
        .unzip();
    let store_bytes = dir_size(&data);
    let (coordinator_cpu, coordinator_rss) = reap(coordinator.id(), libc::SIGKILL);
    Cluster {
        wall,
        answer,
        worker_cpu,
        worker_rss,
        coordinator_cpu,
        coordinator_rss,
        store_bytes,
    }
}

/// Submits `tally submit SUBMIT...` to the coordinator at `url` (again until
/// it answers: it takes a moment to listen) and waits for the job: the wall
/// time from submission to the answer, and the answer.
pub fn submit_and_watch(url: &str, submit: &[&str]) -> (f64, String) {
    let mut tries = 0;
    let (started, out) = loop {
        let started = Instant::now();
        let out = tally()
            .arg("submit")
            .args(submit)
            .args(["--coordinator", url])
            .output()
            .unwrap();
        tries += 1;
        if out.status.success() || tries == 100 {
            break (started, out);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(out.status.success(), "submit failed: {out:?}");
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = tally()
        .args(["watch", &job, "--coordinator", url])
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let wall = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "the job failed");
    let answer = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    (wall, answer)
}

/// A free loopback port's URL, and a function that starts a coordinator
/// process there on the store in `data` (again after it was killed).
pub fn coordinator_on_a_free_port(
    data: &std::path::Path,
) -> (String, impl Fn() -> std::process::Child + use<>) {
    coordinator_on_a_free_port_with(data, &Setup::default())
}

/// [`coordinator_on_a_free_port`] with the extra options and environment of
/// `setup`.
pub fn coordinator_on_a_free_port_with(
    data: &std::path::Path,
    setup: &Setup,
) -> (String, impl Fn() -> std::process::Child + use<>) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = data.to_path_buf();
    let (args, env) = (setup.coordinator_args.clone(), setup.env.clone());
    let spawn = move || {
        tally()
            .args([
                "coordinator",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data",
            ])
            .arg(&data)
            .args(&args)
            .envs(env.iter().cloned())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    (format!("http://127.0.0.1:{port}"), spawn)
}
