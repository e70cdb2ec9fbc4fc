//! The frontier plans (`-- frontier`): pegs and blocks through the runner
//! against the kernel alone and through a coordinator with one and two worker
//! processes; and (`-- frontier-budget`) a pegs count under a memory budget,
//! with the stage data each stage read, wrote and spilled.

use std::process::Stdio;
use std::time::Instant;

use crate::runner_cluster::{Cluster, Setup, cluster, median_cluster};
use crate::runner_processes::{median, tally, wait_with_usage};

/// Pegs (English, centre to centre) and blocks (Project Euler 766) through
/// the runner and through a coordinator, against the kernel alone.
pub fn frontier(runs: usize) {
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
pub fn frontier_budget(board: &str, start: Option<&str>) {
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
