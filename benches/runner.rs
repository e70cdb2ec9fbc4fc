//! Runner overhead, measured on this machine in one run:
//! - `tally run hex --side 11` through the embedded runner against the kernel alone;
//! - the cost per shard: the same hex job with 1 and with ~110 shards per cell step
//!   (about 10 000 shards);
//! - the time from a coordinator restart (after kill -9 mid-job) to the first
//!   accepted report.
//!
//! - `-- scale [sides]`: wall time and peak memory of `tally run hex --side N` for
//!   N = 14, 15, 16 (or the sides given).
//!
//! - `-- frontier`: the frontier plans. Pegs (English, centre to centre) through
//!   the runner with one worker against the kernel alone; the same job through a
//!   coordinator with one worker process of two slots and with two worker
//!   processes of one slot each (the same cores), wall time and each worker's
//!   peak memory; blocks (Project Euler 766) with one and two workers against the
//!   kernel alone. `-- frontier prefixes` adds one run of the pegs prefixes plan.
//!
//! - `-- sliders`: the 5 x 5 sliders instance of docs/kinds/sliders.md through a
//!   coordinator and one worker process, prefixes plan against frontier plan
//!   (stage data in the coordinator's store, then in a `file://` stage store):
//!   wall time, the coordinator's CPU time and peak memory, the worker's peak.
//!
//! - `-- shards`: the cost per shard at about 10^5 shards (hex side 11,
//!   cell-step, 1 against 1,024 shards per step); with `TALLY_BENCH_BEFORE=BIN`,
//!   the same with an older build, for the ratio.
//!
//! - `-- synthetic [SHARDS]`: the cost per shard of the runner alone, with
//!   shards of no work (`tally run synthetic`, 128 slots), 1,000 against SHARDS
//!   (default 10^5) shards; and the peak memory of the larger job.
//!
//! - `-- restart [JOBS]`: a coordinator given JOBS queued jobs (default 16,000
//!   queens jobs of 64 shards: about a million shards) is killed with SIGKILL
//!   and started again: the time until it answers, and the store's size; then
//!   the same with the jobs finished (cancelled, hence settled).
//!
//! - `-- stage-store`: the 5 x 5 sliders instance, frontier plan, through a
//!   coordinator and one worker process of 2 slots with stage data in the
//!   coordinator, in a directory (`file://`) and in S3 (a `moto_server` on
//!   loopback, if installed): wall time, the coordinator's CPU time, peak
//!   memory and store size at the end.
//!
//! - `-- defaults [1m]`: the runner's cost at its defaults, the commands a user
//!   runs without tuning (synthetic shards at the default slots and at 128,
//!   hex cell-step with 1 and 100 shards a step, a trivial wasm module over
//!   10,000 shards, a tiny job through a running cluster), with
//!   `TALLY_BENCH_BEFORE=BIN` for an older build alongside (`runner_parts/defaults.rs`).
//!
//! - `-- replication [SHARDS]`: the store replicated (`--replicate-every 2s`)
//!   against not (`0s`), alternating: a commit-heavy synthetic job's wall time
//!   and per-shard cost, the group commit's mean latency, the replica's size
//!   against the store's (`runner_parts/replication.rs`).
//!
//! Run: `cargo bench --bench runner` (add `-- quick` for one repetition).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "runner_parts/defaults.rs"]
mod runner_defaults;
#[path = "runner_parts/replication.rs"]
mod runner_replication;

fn tally() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tally"))
}

fn timed(args: &[&str]) -> (f64, String) {
    let started = Instant::now();
    let out = tally()
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("tally runs");
    assert!(out.status.success(), "tally {args:?} failed");
    let answer = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    (started.elapsed().as_secs_f64(), answer)
}

fn median(args: &[&str], runs: usize) -> (f64, String) {
    let mut times = Vec::new();
    let mut answer = String::new();
    for _ in 0..runs {
        let (t, a) = timed(args);
        times.push(t);
        answer = a;
    }
    (middle(times), answer)
}

/// The median of `times`.
fn middle(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times[times.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("scale") {
        let sides: Vec<u32> = args[1..].iter().filter_map(|a| a.parse().ok()).collect();
        let sides = if sides.is_empty() {
            vec![14, 15, 16]
        } else {
            sides
        };
        return scale(&sides);
    }
    let quick = args.iter().any(|a| a == "quick");
    let runs = if quick { 1 } else { 3 };
    if args.first().map(String::as_str) == Some("frontier") {
        return frontier(runs);
    }
    if args.first().map(String::as_str) == Some("frontier-budget") {
        let board = args.get(1).map_or("english", String::as_str);
        return frontier_budget(board, args.get(2).map(String::as_str));
    }
    if args.first().map(String::as_str) == Some("sliders") {
        return sliders(runs);
    }
    if args.first().map(String::as_str) == Some("stage-store") {
        return stage_stores(runs);
    }
    if args.first().map(String::as_str) == Some("defaults") {
        let million = args.iter().any(|a| a == "1m");
        return runner_defaults::defaults(runs, million);
    }
    if args.first().map(String::as_str) == Some("shards") {
        return shard_cost(runs);
    }
    if args.first().map(String::as_str) == Some("synthetic") {
        let shards = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
        return synthetic_cost(shards, runs);
    }
    if args.first().map(String::as_str) == Some("hex-large") {
        let side = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(17);
        let places: Vec<&str> = match args.iter().find_map(|a| a.strip_prefix("graph=")) {
            Some(place) => vec![place],
            None => vec!["worker", "stage"],
        };
        let budget = args.iter().find_map(|a| a.strip_prefix("budget="));
        return hex_large(side, args.iter().any(|a| a == "exact"), &places, budget);
    }
    if args.first().map(String::as_str) == Some("replication") {
        let shards = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
        return runner_replication::replication(shards, runs);
    }
    if args.first().map(String::as_str) == Some("restart") {
        let jobs = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16_000);
        restart_at_scale(jobs, false);
        return restart_at_scale(jobs, true);
    }

    for plan in ["points", "cell-step"] {
        let (direct, a) = median(
            &["run", "hex", "--side", "11", "--direct", "--threads", "2"],
            runs,
        );
        let (runner, b) = median(&["run", "hex", "--side", "11", "--plan", plan], runs);
        assert_eq!(a, b, "runner and kernel disagree");
        println!(
            "hex side 11, {plan} plan: kernel alone {direct:.3} s, through the runner {runner:.3} s, ratio {:.2} (answer {a})",
            runner / direct
        );
    }

    let few = [
        "run",
        "hex",
        "--side",
        "10",
        "--plan",
        "cell-step",
        "--shards-per-step",
        "1",
    ];
    let many = [
        "run",
        "hex",
        "--side",
        "10",
        "--plan",
        "cell-step",
        "--shards-per-step",
        "111",
    ];
    let (t_few, a) = median(&few, runs);
    let (t_many, b) = median(&many, runs);
    assert_eq!(a, b);
    let shards_few = 90.0;
    let shards_many = 90.0 * 111.0;
    println!(
        "hex side 10: {shards_few} shards {t_few:.3} s, {shards_many} shards {t_many:.3} s: {:.3} ms per extra shard",
        (t_many - t_few) * 1e3 / (shards_many - shards_few)
    );

    restart_to_first_report();
}

/// The runner's cost per shard at about 10^5 shards: `tally run hex --side 11
/// --plan cell-step` with 1 and with 1,024 shards per cell step (110 and
/// 112,640 shards), the difference per extra shard; and the same with the
/// binary named by `TALLY_BENCH_BEFORE` (an older build), when set, run
/// alternately in the same run.
fn shard_cost(runs: usize) {
    let job = |per_step: &str| {
        [
            "run",
            "hex",
            "--side",
            "11",
            "--plan",
            "cell-step",
            "--shards-per-step",
            per_step,
        ]
        .map(String::from)
    };
    let binaries = builds();
    let (few, many) = (110.0, 110.0 * 1024.0);
    let mut costs = Vec::new();
    for (name, binary) in &binaries {
        let time = |args: &[String]| median_with_peak(binary.as_os_str(), args, runs);
        let (t_few, a, _) = time(&job("1"));
        let (t_many, b, peak) = time(&job("1024"));
        assert_eq!(a, b, "{name}: the answers differ");
        let per_shard = (t_many - t_few) * 1e3 / (many - few);
        println!(
            "{name}: hex side 11 cell-step, {few} shards {t_few:.2} s, {many} shards {t_many:.2} s \
             (peak {:.0} MB): {per_shard:.3} ms per extra shard",
            peak as f64 / 1e6
        );
        costs.push(per_shard);
    }
    if let [now, before] = costs[..] {
        println!("cost per shard, this build / before: {:.2}", now / before);
    }
}

/// The runner's own cost per shard, with nothing else in the way: `tally run
/// synthetic` (shards of one term each) with 1,000 and with `shards` shards,
/// 128 slots (so that leases and reports go many to a round trip), the
/// difference per extra shard, and the peak memory of the larger job; and the
/// same with the binary named by `TALLY_BENCH_BEFORE` (an older build), when
/// set, the two run alternately in the same run.
fn synthetic_cost(shards: u64, runs: usize) {
    let job = |n: u64| {
        ["run", "synthetic", "--slots", "128", "--shards"]
            .map(String::from)
            .into_iter()
            .chain([n.to_string()])
            .collect::<Vec<_>>()
    };
    let binaries = builds();
    let few = 1_000;
    // Alternate the builds run by run, so that both see the same machine.
    let mut times = vec![(Vec::new(), Vec::new(), String::new(), 0u64); binaries.len()];
    for _ in 0..runs {
        for ((_, binary), (t_few, t_many, answer, peak)) in binaries.iter().zip(&mut times) {
            t_few.push(median_with_peak(binary, &job(few), 1).0);
            let (t, a, p) = median_with_peak(binary, &job(shards), 1);
            t_many.push(t);
            *answer = a;
            *peak = (*peak).max(p);
        }
    }
    let mut costs = Vec::new();
    for ((name, _), (t_few, t_many, answer, peak)) in binaries.iter().zip(times) {
        let (t_few, t_many) = (middle(t_few), middle(t_many));
        let per_shard = (t_many - t_few) * 1e3 / (shards - few) as f64;
        println!(
            "{name}: synthetic {few} shards {t_few:.2} s, {shards} shards {t_many:.2} s (peak {:.0} MB, \
             answer {answer}): {per_shard:.3} ms per extra shard",
            peak as f64 / 1e6
        );
        costs.push(per_shard);
    }
    if let [now, before] = costs[..] {
        println!("cost per shard, this build / before: {:.2}", now / before);
    }
}

/// The builds a benchmark compares: this one, and the older build named by
/// `TALLY_BENCH_BEFORE`, when set.
fn builds() -> Vec<(&'static str, std::ffi::OsString)> {
    let this = (
        "this build",
        std::ffi::OsString::from(env!("CARGO_BIN_EXE_tally")),
    );
    std::iter::once(this)
        .chain(std::env::var_os("TALLY_BENCH_BEFORE").map(|b| ("before", b)))
        .collect()
}

/// `binary args` run `runs` times: the median wall time, the last line of
/// output and the highest peak memory.
fn median_with_peak(binary: &std::ffi::OsStr, args: &[String], runs: usize) -> (f64, String, u64) {
    let mut times = Vec::new();
    let mut answer = String::new();
    let mut peak = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let child = Command::new(binary)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (out, rss) = wait_with_peak(child);
        times.push(started.elapsed().as_secs_f64());
        answer = out;
        peak = peak.max(rss);
    }
    (middle(times), answer, peak)
}

/// Waits for `child`: its last line of output and its peak memory.
fn wait_with_peak(child: std::process::Child) -> (String, u64) {
    let (out, rss, _) = wait_with_usage(child);
    (out, rss)
}

/// Waits for `child`: its last line of output, its peak memory and its CPU
/// time (user and system).
#[allow(clippy::zombie_processes)]
fn wait_with_usage(mut child: std::process::Child) -> (String, u64, f64) {
    use std::io::Read;
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // SAFETY: reaps our own child; the pointers are valid locals.
    let rss = unsafe {
        let mut status = 0;
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut usage), pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the job failed"
        );
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (
            usage.ru_maxrss as u64 * 1024,
            seconds(usage.ru_utime) + seconds(usage.ru_stime),
        )
    };
    let (rss, cpu) = rss;
    (out.lines().last().unwrap_or_default().to_string(), rss, cpu)
}

/// Wall time and peak memory (max RSS of the process) of `tally run hex --side N`.
// The child is reaped by wait4, which also returns its peak memory.
#[allow(clippy::zombie_processes)]
fn scale(sides: &[u32]) {
    for &side in sides {
        let started = Instant::now();
        let child = tally()
            .args(["run", "hex", "--side", &side.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tally runs");
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: rusage is plain data filled in by the kernel for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let mut stdout = child.stdout.expect("piped");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut answer).unwrap();
        // SAFETY: waits for the child spawned above; the pointers are valid locals.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid);
        assert_eq!(status, 0, "tally run hex --side {side} failed");
        println!(
            "tally run hex --side {side}: {:.1} s, peak memory {:.2} GB, answer {}",
            started.elapsed().as_secs_f64(),
            usage.ru_maxrss as f64 * 1024.0 / 1e9,
            answer.trim()
        );
    }
}

fn restart_to_first_report() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (url, spawn_coordinator) = coordinator_on_a_free_port(&data);
    let mut coordinator = spawn_coordinator();
    let mut worker = tally()
        .args(["worker", "--coordinator", &url, "--slots", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = tally()
        .args(["submit", "hex", "--side", "11", "--coordinator", &url])
        .output()
        .unwrap();
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    std::thread::sleep(Duration::from_secs(2));
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let restarted = Instant::now();
    let mut coordinator = spawn_coordinator();
    // Poll the event log for the first accepted report after the restart.
    let first = loop {
        let out = tally()
            .args(["events", &job, "--json", "--coordinator", &url])
            .output()
            .unwrap();
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let events = v["events"].as_array().unwrap();
            if let Some(i) = events.iter().position(|e| e["kind"] == "resumed")
                && events[i..].iter().any(|e| e["kind"] == "accepted")
            {
                break restarted.elapsed();
            }
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(60),
            "no report after the restart"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "coordinator restart to first accepted report: {:.0} ms (worker reconnects with backoff)",
        first.as_secs_f64() * 1e3
    );
    let _ = worker.kill();
    let _ = coordinator.kill();
    let _ = worker.wait();
    let _ = coordinator.wait();
}

fn frontier(runs: usize) {
    let pegs = ["run", "pegs", "--board", "english", "--end", "17"];
    let (direct, a) = median(&[&pegs[..], &["--direct", "--threads", "2"]].concat(), runs);
    let (runner, b) = median(&[&pegs[..], &["--workers", "1"]].concat(), runs);
    assert_eq!(a, b, "runner and kernel disagree");
    println!(
        "pegs english 17 to 17: kernel alone {direct:.2} s, frontier plan with 1 worker {runner:.2} s, \
         ratio {:.2} (answer {a})",
        runner / direct
    );
    if std::env::args().any(|a| a == "prefixes") {
        let (prefixes, c) = median(&[&pegs[..], &["--plan", "prefixes"]].concat(), 1);
        assert_eq!(a, c);
        println!("pegs english 17 to 17: prefixes plan with 1 worker {prefixes:.2} s (one run)");
    }
    let submit = ["pegs", "--board", "english", "--end", "17"];
    let one = median_cluster(&submit, &[2], runs);
    let two = median_cluster(&submit, &[1, 1], runs);
    assert_eq!(one.answer, a);
    assert_eq!(two.answer, a);
    let peak = |c: &Cluster| c.worker_peaks(1e6, "MB", 0);
    let largest = |c: &Cluster| c.worker_rss.iter().copied().max().unwrap_or(0) as f64;
    println!(
        "pegs english 17 to 17 through a coordinator: 1 worker process (2 slots) {:.2} s, peak {}; \
         2 worker processes (1 slot each) {:.2} s, peaks {}: largest worker {:.2}x the single one",
        one.wall,
        peak(&one),
        two.wall,
        peak(&two),
        largest(&two) / largest(&one)
    );

    let (direct, a) = median(&["run", "blocks", "--direct", "--threads", "2"], runs);
    for workers in ["1", "2"] {
        let (runner, b) = median(
            &["run", "blocks", "--workers", workers, "--threads", "1"],
            runs,
        );
        assert_eq!(a, b, "runner and kernel disagree");
        println!(
            "blocks PE 766: kernel alone {direct:.2} s, frontier plan with {workers} worker(s) of 1 \
             thread {runner:.2} s, ratio {:.2} (answer {a})",
            runner / direct
        );
    }
}

/// `frontier-budget [BOARD [START]]`: a pegs count without a final hole on
/// the embedded default (`tally run`, its stage data in its data directory),
/// then through a coordinator with a stage directory and 1 worker process (2
/// slots) and 3 (1 slot each), each with `--memory-budget 3GiB`: wall time,
/// CPU, every process's peak memory, bytes spilled, the level sizes and, from
/// a centre, the solutions by final hole. Default the English board from its
/// centre; `frontier-budget french 6` is the French board (long, and tens of
/// GB of stage data on disk).
fn frontier_budget(board: &str, start: Option<&str>) {
    let mut spec = vec!["pegs", "--board", board];
    if let Some(start) = start {
        spec.extend(["--start", start]);
    }
    let run: Vec<String> = ["run"]
        .iter()
        .chain(&spec)
        .chain(&["--json"])
        .map(|a| a.to_string())
        .collect();
    let run_dir = tempfile::tempdir().unwrap();
    let run_log = run_dir.path().join("run.log");
    let started = Instant::now();
    let child = tally()
        .args(&run)
        .env("TALLY_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&run_log).unwrap())
        .spawn()
        .unwrap();
    let (out, rss, cpu) = wait_with_usage(child);
    let wall = started.elapsed().as_secs_f64();
    let job: serde_json::Value = serde_json::from_str(&out).expect("run --json");
    let answer = job["answer"].as_str().unwrap_or_default().to_string();
    let details = &job["details"];
    println!(
        "pegs {board} from {}: embedded default (`tally run`) {wall:.1} s, CPU {cpu:.1} s, peak {:.2} GB; \
         answer {answer}",
        start.unwrap_or("the centre"),
        rss as f64 / 1e9
    );
    println!("  level sizes: {}", details["levels"]);
    print_stage_io(&run_log);
    if let Some(finals) = details["by_final_hole"].as_object() {
        let by_hole: Vec<String> = finals
            .iter()
            .map(|(h, n)| format!("{h}: {}", n.as_str().unwrap_or("?")))
            .collect();
        println!("  solutions by final hole: {}", by_hole.join(", "));
    }
    for slots in [vec![2], vec![1, 1, 1]] {
        let dir = tempfile::tempdir().unwrap();
        let (stage, spill, log) = (
            dir.path().join("stage"),
            dir.path().join("spill"),
            dir.path().join("workers.log"),
        );
        let setup = Setup {
            coordinator_args: vec![
                "--stage-store".into(),
                format!("file://{}", stage.display()),
            ],
            env: vec![("TALLY_LOG".into(), "info".into())],
            worker_args: ["--memory-budget", "3GiB", "--spill-dir"]
                .iter()
                .map(|a| a.to_string())
                .chain([spill.display().to_string()])
                .collect(),
            worker_log: Some(log.clone()),
        };
        let submit: Vec<&str> = spec.clone();
        let c = cluster(&submit, &slots, &setup);
        assert_eq!(
            c.answer, answer,
            "the cluster and the embedded run disagree"
        );
        let spilled: u64 = stage_io(&log).iter().map(|io| io.spilled).sum();
        let cpus: Vec<String> = c.worker_cpu.iter().map(|t| format!("{t:.1} s")).collect();
        println!(
            "  {} worker process(es) of --memory-budget 3GiB: {:.1} s; CPU coordinator {:.1} s, workers {}; \
             peak coordinator {:.2} GB, workers {}; spilled {:.2} GB",
            slots.len(),
            c.wall,
            c.coordinator_cpu,
            cpus.join(", "),
            c.coordinator_rss as f64 / 1e9,
            c.worker_peaks(1e9, "GB", 2),
            spilled as f64 / 1e9
        );
        print_stage_io(&log);
    }
}

/// Bytes of stage data one stage's shards read and wrote, and spilled.
#[derive(Clone, Copy, Default)]
struct StageIo {
    read: u64,
    written: u64,
    spilled: u64,
}

/// Each stage's bytes, from the workers' `shard finished` lines in `log`
/// (the stage is the second field of the lease id).
fn stage_io(log: &std::path::Path) -> Vec<StageIo> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<String> {
        let value = line.split(&format!(" {name}=")).nth(1)?;
        Some(value.split_whitespace().next()?.to_string())
    };
    let mut stages: Vec<StageIo> = Vec::new();
    for line in text.lines().filter(|l| l.contains("shard finished")) {
        let Some(stage) =
            field(line, "lease").and_then(|lease| lease.split('/').nth(1)?.parse::<usize>().ok())
        else {
            continue;
        };
        let bytes = |name| field(line, name).and_then(|v| v.parse::<u64>().ok());
        if stages.len() <= stage {
            stages.resize(stage + 1, StageIo::default());
        }
        let io = &mut stages[stage];
        io.read += bytes("read").unwrap_or(0);
        io.written += bytes("written").unwrap_or(0);
        io.spilled += bytes("spilled").unwrap_or(0);
    }
    stages
}

/// One line per stage of [`stage_io`]: read, written and spilled in MB.
fn print_stage_io(log: &std::path::Path) {
    let mb = |b: u64| b as f64 / 1e6;
    let stages = stage_io(log);
    let rows: Vec<String> = stages
        .iter()
        .enumerate()
        .filter(|(_, io)| io.read + io.written + io.spilled > 0)
        .map(|(s, io)| {
            format!(
                "{s}: {:.1}/{:.1}/{:.1}",
                mb(io.read),
                mb(io.written),
                mb(io.spilled)
            )
        })
        .collect();
    println!(
        "  stage data per stage (the first holds the thin levels), MB read/written/spilled: {}",
        rows.join(", ")
    );
}

struct Cluster {
    wall: f64,
    answer: String,
    /// Each worker process's CPU time (user and system) and peak memory.
    worker_cpu: Vec<f64>,
    worker_rss: Vec<u64>,
    /// The coordinator process's CPU time (user and system) and peak memory.
    coordinator_cpu: f64,
    coordinator_rss: u64,
    /// The coordinator's data directory's size once the job is done.
    store_bytes: u64,
}

impl Cluster {
    /// Each worker process's peak memory in `unit` (`scale` bytes), with
    /// `decimals` digits.
    fn worker_peaks(&self, scale: f64, unit: &str, decimals: usize) -> String {
        self.worker_rss
            .iter()
            .map(|b| format!("{:.decimals$} {unit}", *b as f64 / scale))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Kills (with `signal`) and reaps a child: its CPU seconds and peak memory.
fn reap(pid: u32, signal: libc::c_int) -> (f64, u64) {
    let pid = pid as libc::pid_t;
    // SAFETY: signals and reaps our own child; the pointers are valid locals.
    unsafe {
        libc::kill(pid, signal);
        let mut status = 0;
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut usage), pid);
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (
            seconds(usage.ru_utime) + seconds(usage.ru_stime),
            usage.ru_maxrss as u64 * 1024,
        )
    }
}

/// The run with the median wall time of `runs` runs of [`cluster`].
fn median_cluster(submit: &[&str], slots: &[usize], runs: usize) -> Cluster {
    median_cluster_with(submit, slots, &Setup::default(), runs)
}

/// [`median_cluster`] with the coordinator's extra options and the
/// processes' environment of `setup`.
fn median_cluster_with(submit: &[&str], slots: &[usize], setup: &Setup, runs: usize) -> Cluster {
    let mut all: Vec<Cluster> = (0..runs).map(|_| cluster(submit, slots, setup)).collect();
    all.sort_by(|a, b| a.wall.partial_cmp(&b.wall).unwrap());
    all.swap_remove(all.len() / 2)
}

/// What a benchmark cluster adds to the defaults.
#[derive(Default)]
struct Setup {
    coordinator_args: Vec<String>,
    env: Vec<(String, String)>,
    worker_args: Vec<String>,
    /// Where the workers' logs go (else nowhere).
    worker_log: Option<std::path::PathBuf>,
}

/// Runs `tally submit SUBMIT...` on a coordinator with one worker process per
/// entry of `slots` (that many slots and threads each) and waits for it: the
/// wall time from submission to the answer, and each worker's peak memory.
// The workers are reaped by wait4, which also returns their peak memory.
#[allow(clippy::zombie_processes)]
fn cluster(submit: &[&str], slots: &[usize], setup: &Setup) -> Cluster {
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
fn submit_and_watch(url: &str, submit: &[&str]) -> (f64, String) {
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

/// The 5 x 5 sliders frontier job with its stage data in each store.
// moto_server is reaped by wait4.
#[allow(clippy::zombie_processes)]
fn stage_stores(runs: usize) {
    let submit = [&SLIDERS_5X5[..], &["--plan", "frontier"]].concat();
    let stage_dir = tempfile::tempdir().unwrap();
    let mut stores = vec![
        ("coordinator", Setup::default()),
        (
            "file://",
            Setup {
                coordinator_args: vec![
                    "--stage-store".into(),
                    format!("file://{}", stage_dir.path().display()),
                ],
                ..Setup::default()
            },
        ),
    ];
    let moto = moto_server();
    if let Some((_, port)) = &moto {
        stores.push((
            "s3:// (moto)",
            Setup {
                coordinator_args: vec!["--stage-store".into(), "s3://tally-stage/bench".into()],
                env: [
                    ("AWS_ACCESS_KEY_ID", "bench".to_string()),
                    ("AWS_SECRET_ACCESS_KEY", "bench".to_string()),
                    ("AWS_REGION", "us-east-1".to_string()),
                    ("AWS_ALLOW_HTTP", "true".to_string()),
                    ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
                ..Setup::default()
            },
        ));
    } else {
        println!("moto_server not found (pip install \"moto[server]\"): no S3 run");
    }
    let mut answers = Vec::new();
    for (name, setup) in &stores {
        let c = median_cluster_with(&submit, &[2], setup, runs);
        println!(
            "sliders 5 x 5 frontier, stage data in {name}: {:.2} s; coordinator CPU {:.2} s, \
             peak {:.0} MB, store {:.1} MB at the end; worker peak {:.0} MB (answer {})",
            c.wall,
            c.coordinator_cpu,
            c.coordinator_rss as f64 / 1e6,
            c.store_bytes as f64 / 1e6,
            c.worker_rss[0] as f64 / 1e6,
            c.answer
        );
        answers.push(c.answer);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the stores disagree"
    );
    if let Some((server, _)) = moto {
        reap(server.id(), libc::SIGKILL);
    }
}

/// A moto S3 server on a free loopback port, with the bucket `tally-stage`.
fn moto_server() -> Option<(std::process::Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let server = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    for _ in 0..300 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let request = format!(
                "PUT /tally-stage HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            if stream.write_all(request.as_bytes()).is_ok()
                && stream.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return Some((server, port));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// A hex side beyond the small ones through a coordinator, one run each: one
/// worker process of two threads, then two worker processes of one thread
/// (the same two cores, each with its own graph): wall time, each worker's
/// peak memory, and the answer (with `exact`, its digit count and ends).
fn hex_large(side: u32, exact: bool, places: &[&str], budget: Option<&str>) {
    let side_arg = side.to_string();
    let mode = if exact { "exact" } else { "mod 1000000007" };
    // Stage data in a directory, as a cluster would keep a staged graph
    // (larger than a report carries to a coordinator that keeps it itself):
    // a directory a run, removed after it (a side-18 run leaves gigabytes).
    let run_on = |submit: &[&str], workers: &[usize]| {
        let stage = tempfile::tempdir().unwrap();
        let setup = Setup {
            coordinator_args: vec![
                "--stage-store".into(),
                format!("file://{}", stage.path().display()),
            ],
            worker_args: budget
                .map(|b| vec!["--memory-budget".to_string(), b.to_string()])
                .unwrap_or_default(),
            ..Setup::default()
        };
        cluster(submit, workers, &setup)
    };
    let mut answers = Vec::new();
    for &place in places {
        let mut submit = vec!["hex", "--side", side_arg.as_str(), "--graph", place];
        if exact {
            submit.push("--exact");
        }
        let one = run_on(&submit, &[2]);
        let two = run_on(&submit, &[1, 1]);
        assert_eq!(one.answer, two.answer, "one and two workers disagree");
        let answer = if exact && one.answer.len() > 40 {
            format!(
                "{} digits, {}...{}",
                one.answer.len(),
                &one.answer[..20],
                &one.answer[one.answer.len() - 20..]
            )
        } else {
            one.answer.clone()
        };
        let peaks = |c: &Cluster| c.worker_peaks(1e9, "GB", 2);
        let cpu = |c: &Cluster| c.worker_cpu.iter().sum::<f64>();
        println!(
            "hex side {side} {mode}, graph in {place}{}: 1 worker process (2 threads) {:.1} s, \
             workers' CPU {:.1} s, peak {}; 2 worker processes (1 thread each) {:.1} s \
             ({:.2}x), CPU {:.1} s, peaks {}; coordinator peak {:.2} GB; answer {answer}",
            budget.map_or(String::new(), |b| format!(", workers of {b}")),
            one.wall,
            cpu(&one),
            peaks(&one),
            two.wall,
            two.wall / one.wall,
            cpu(&two),
            peaks(&two),
            one.coordinator_rss.max(two.coordinator_rss) as f64 / 1e9,
        );
        answers.push(one.answer);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the graph's places disagree"
    );
}

/// The 5 x 5 sliders instance of docs/kinds/sliders.md, as `tally submit` arguments.
const SLIDERS_5X5: [&str; 9] = [
    "sliders",
    "--rows",
    "5",
    "--cols",
    "5",
    "--start",
    "WRRBB/RRRBB/RRBBB/RRRBB/RRBBB",
    "--target",
    "WBRBR/BRBRB/RBRBR/BRBRB/RBRBR",
];

/// The sliders 5 x 5 instance of docs/kinds/sliders.md through a coordinator with one
/// worker process of two slots: the prefixes plan (the coordinator searches
/// while planning) against the frontier plan (the workers search), with the
/// stage data in the coordinator's store and in a `file://` stage store.
fn sliders(runs: usize) {
    let board = SLIDERS_5X5;
    let stage_dir = tempfile::tempdir().unwrap();
    let stage_store = Setup {
        coordinator_args: vec![
            "--stage-store".into(),
            format!("file://{}", stage_dir.path().display()),
        ],
        ..Setup::default()
    };
    let runs_of = [
        ("prefixes", "", Setup::default()),
        ("frontier", "", Setup::default()),
        ("frontier", ", stage data in a file:// store", stage_store),
    ];
    let mut answers = Vec::new();
    let mut walls = Vec::new();
    for (plan, store, setup) in &runs_of {
        let submit = [&board[..], &["--plan", plan]].concat();
        let c = median_cluster_with(&submit, &[2], setup, runs);
        println!(
            "sliders 5 x 5, {plan} plan{store}, 1 worker process of 2 slots: {:.2} s; \
             coordinator CPU {:.2} s, peak {:.0} MB; worker peak {:.0} MB (answer {})",
            c.wall,
            c.coordinator_cpu,
            c.coordinator_rss as f64 / 1e6,
            c.worker_rss[0] as f64 / 1e6,
            c.answer
        );
        answers.push(c.answer);
        walls.push(c.wall);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the plans disagree"
    );
    println!(
        "sliders 5 x 5: frontier plan / prefixes plan wall time {:.2}; with a file:// stage \
         store {:.2}",
        walls[1] / walls[0],
        walls[2] / walls[0]
    );
}

/// Fills a coordinator's store with `jobs` queued queens jobs (cancelled, so
/// finished, if `finished`), kills it and times its restart until it answers
/// `Info` (which reads every job).
// Each restarted coordinator is reaped by wait4, which also returns its peak memory.
#[allow(clippy::zombie_processes)]
fn restart_at_scale(jobs: usize, finished: bool) {
    use tally_wire::proto::job_service_client::JobServiceClient;
    use tally_wire::proto::{self, job_spec::Kind};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (url, spawn) = coordinator_on_a_free_port(&data);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let connect = |url: String| async move {
        loop {
            match JobServiceClient::connect(url.clone()).await {
                Ok(client) => return client,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    let mut coordinator = spawn();
    let filled = Instant::now();
    let shards: u64 = runtime.block_on(async {
        let client = connect(url.clone()).await;
        // Sixteen submissions in flight at a time.
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..16 {
            let mut client = client.clone();
            tasks.spawn(async move {
                let mut shards = 0;
                for _ in (worker..jobs).step_by(16) {
                    let request = proto::SubmitRequest {
                        spec: Some(proto::JobSpec {
                            kind: Some(Kind::Queens(proto::QueensSpec { n: 10 })),
                            options: None,
                        }),
                        idempotency_key: String::new(),
                        ..Default::default()
                    };
                    let job = client
                        .submit(request)
                        .await
                        .unwrap()
                        .into_inner()
                        .job
                        .unwrap();
                    shards += job.shards_total;
                }
                shards
            });
        }
        let mut shards = 0;
        while let Some(done) = tasks.join_next().await {
            shards += done.unwrap();
        }
        if finished {
            let mut client = client.clone();
            for n in 1..=jobs {
                let job_id = format!("job-{n:06}");
                client
                    .cancel(proto::CancelRequest { job_id })
                    .await
                    .unwrap();
            }
            // Finished jobs are settled at the next expiry tick (250 ms).
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        shards
    });
    let fill = filled.elapsed().as_secs_f64();
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let store_mb = dir_size(&data) as f64 / 1e6;
    // Three restarts of the same store: the median, and the coordinator's
    // peak memory once it serves.
    let mut readies = Vec::new();
    let mut peak_mb = 0.0f64;
    for _ in 0..3 {
        let started = Instant::now();
        let coordinator = spawn();
        let (ready, listed) = runtime.block_on(async {
            let mut client = connect(url.clone()).await;
            let info = client
                .info(proto::InfoRequest {})
                .await
                .unwrap()
                .into_inner();
            (started.elapsed(), info.jobs)
        });
        assert_eq!(listed as usize, jobs);
        readies.push(ready.as_secs_f64() * 1e3);
        let (_, peak) = reap(coordinator.id(), libc::SIGKILL);
        peak_mb = peak_mb.max(peak as f64 / 1e6);
    }
    let runs = readies
        .iter()
        .map(|ms| format!("{ms:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    readies.sort_by(f64::total_cmp);
    let state = if finished { "finished" } else { "queued" };
    println!(
        "restart with {jobs} {state} jobs and {shards} shards in the store ({store_mb:.0} MB, \
         filled in {fill:.1} s): ready to serve in {:.0} ms (median of {runs} ms; peak {peak_mb:.0} MB)",
        readies[1]
    );
    if std::env::var_os("TALLY_BENCH_KEEP_STORE").is_some() {
        println!("store kept in {}", data.display());
        std::mem::forget(dir);
    }
}

/// A free loopback port's URL, and a function that starts a coordinator
/// process there on the store in `data` (again after it was killed).
fn coordinator_on_a_free_port(
    data: &std::path::Path,
) -> (String, impl Fn() -> std::process::Child + use<>) {
    coordinator_on_a_free_port_with(data, &Setup::default())
}

/// [`coordinator_on_a_free_port`] with the extra options and environment of
/// `setup`.
fn coordinator_on_a_free_port_with(
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

fn dir_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}
