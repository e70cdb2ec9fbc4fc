//! Benchmark of the hex kernel on 2 threads.
//!
//! `cargo bench -p tally-kernels --bench hex [-- [sweep|points|build] SIDE... ...]`
//!
//! * `sweep` (default sides 11 12 13): build + cell-step sweep + game count, median
//!   of 5 runs. When the environment variable `HEX_REFERENCE` names an executable
//!   (an external reference program taking `SIDE THREADS` and printing the
//!   residue), it is timed the same way and the ratio reference / ours is printed.
//! * `points` (default sides 11 12 13): the `points` plan in one process. Build
//!   time, graph memory, the time of one pass of 8 and of 16 points on one thread
//!   and of 16 points shared by 2 threads; the projected plan time with 2 threads
//!   each running whole passes (`ceil(points / per pass)` passes split over the
//!   two, plus the build). Up to side 13 the whole plan also runs (solve + game
//!   count, checked against the sweep). Medians of 5 runs up to side 13, single
//!   runs above.
//! * `build`: only the graph (states, time, memory, peak RSS of the process), for
//!   measuring with `/usr/bin/time -v`.
//!
//! Without a section word the sides go to both `sweep` and `points`.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{median, peak};
use tally_kernels::Control;
use tally_kernels::hex::{
    DEFAULT_MODULUS, HexGraph, POINTS_PER_PASS, game_count, points_layout, solve_crossings,
};

const RUNS: usize = 5;
const THREADS: usize = 2;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// One run: (total time, build time, states, residue).
fn run_ours(side: u32) -> (Duration, Duration, usize, u32) {
    let start = Instant::now();
    let graph = HexGraph::build_parallel(side, THREADS).expect("valid side");
    let built = start.elapsed();
    let crossings = graph
        .sweep(DEFAULT_MODULUS, THREADS, &Control::new())
        .expect("sweep");
    let games = game_count(side, &crossings, DEFAULT_MODULUS);
    (start.elapsed(), built, graph.num_states(), games)
}

/// One run of the reference: (time, printed answer) or an error message.
fn run_reference(program: &str, side: u32) -> Result<(Duration, String), String> {
    let start = Instant::now();
    let output = Command::new(program)
        .arg(side.to_string())
        .arg(THREADS.to_string())
        .output()
        .map_err(|e| format!("cannot run: {e}"))?;
    let elapsed = start.elapsed();
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(format!("{} ({})", output.status, err.trim()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = stdout.lines().last().unwrap_or("").trim().to_string();
    Ok((elapsed, answer))
}

fn bench_sweep(side: u32, reference: Option<&str>) -> u32 {
    let mut totals = Vec::new();
    let mut builds = Vec::new();
    let mut states = 0;
    let mut games = 0;
    for _ in 0..RUNS {
        let (total, built, s, g) = run_ours(side);
        totals.push(total);
        builds.push(built);
        states = s;
        games = g;
    }
    let ours = median(totals);
    println!(
        "N={side:2}  states {states:>9}  H mod p {games:>10}  total {:8.3} s  (build {:.3} s)",
        secs(ours),
        secs(median(builds))
    );
    if let Some(program) = reference {
        let mut times = Vec::new();
        let mut failure = None;
        let mut answer = String::new();
        for _ in 0..RUNS {
            match run_reference(program, side) {
                Ok((t, a)) => {
                    times.push(t);
                    answer = a;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        match failure {
            Some(e) => println!("       reference: failed: {e}"),
            None => {
                let theirs = median(times);
                let agree = if answer == games.to_string() {
                    "same answer"
                } else {
                    "DIFFERENT ANSWER"
                };
                println!(
                    "       reference {:8.3} s  ratio reference/ours {:5.2}  ({agree})",
                    secs(theirs),
                    secs(theirs) / secs(ours)
                );
            }
        }
    }
    games
}

/// Times `f` `runs` times; the median.
fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        last = Some(f());
        times.push(start.elapsed());
    }
    (median(times), last.expect("at least one run"))
}

/// The whole points plan in this process: every pass of `POINTS_PER_PASS`
/// points, the passes shared by 2 threads, then the solve and the game count.
fn points_plan(graph: &HexGraph, p: u32) -> u32 {
    let side = graph.side();
    let layout = points_layout(side, p);
    let batches: Vec<&[u32]> = layout.points.chunks(POINTS_PER_PASS).collect();
    let values: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let batches = &batches;
                scope.spawn(move || {
                    (t..batches.len())
                        .step_by(THREADS)
                        .map(|b| (b, graph.evaluate_points(batches[b], p)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, Vec<u32>)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_by_key(|(b, _)| *b);
        all.into_iter().map(|(_, v)| v).collect()
    });
    let evaluations: Vec<(u32, u32)> = layout
        .points
        .iter()
        .copied()
        .zip(values.into_iter().flatten())
        .collect();
    let crossings = solve_crossings(side, p, &evaluations).expect("consistent evaluations");
    game_count(side, &crossings, p)
}

fn bench_points(side: u32, swept: Option<u32>) {
    let runs = if side <= 13 { RUNS } else { 1 };
    let p = DEFAULT_MODULUS;
    let (build, graph) = timed(runs, || {
        HexGraph::build_parallel(side, THREADS).expect("valid side")
    });
    let built_peak = peak();
    let layout = points_layout(side, p);
    let xs: Vec<u32> = layout
        .points
        .iter()
        .copied()
        .take(POINTS_PER_PASS)
        .collect();
    let (pass8, _) = timed(runs, || graph.evaluate_points(&xs[..xs.len().min(8)], p));
    let (pass16, _) = timed(runs, || graph.evaluate_points(&xs, p));
    let (shared16, _) = timed(runs, || {
        graph
            .evaluate_points_with(&xs, p, THREADS, &Control::new())
            .expect("not cancelled")
    });
    let points = layout.points.len();
    let project = |per_pass: usize, pass: Duration| {
        let rounds = points.div_ceil(per_pass).div_ceil(THREADS);
        secs(build) + rounds as f64 * secs(pass)
    };
    println!(
        "N={side:2}  states {:>9}  build {:7.2} s  graph {:7.1} MiB  peak after build {built_peak}",
        graph.num_states(),
        secs(build),
        mib(graph.memory_bytes()),
    );
    println!(
        "       {points} points (K = {}): pass of 8 {:7.2} s, of 16 {:7.2} s, of 16 on {THREADS} threads {:7.2} s; vector of 16 {:.0} MiB",
        layout.unknowns,
        secs(pass8),
        secs(pass16),
        secs(shared16),
        mib(graph.pass_bytes(16))
    );
    println!(
        "       projected plan on {THREADS} threads: {:7.1} s with 8 points per pass, {:7.1} s with 16",
        project(8, pass8),
        project(16, pass16)
    );
    if side <= 13 {
        let (plan, games) = timed(runs, || points_plan(&graph, p));
        let check = match swept {
            Some(g) if g == games => "same as the sweep",
            Some(_) => "DIFFERENT FROM THE SWEEP",
            None => "",
        };
        println!(
            "       whole plan (passes of 16 on {THREADS} threads + solve): {:7.3} s + build  H mod p {games}  {check}",
            secs(plan)
        );
    }
    println!("       peak RSS {}", peak());
}

fn bench_build(side: u32) {
    let start = Instant::now();
    let graph = HexGraph::build_parallel(side, THREADS).expect("valid side");
    println!(
        "N={side:2}  states {:>9}  build {:7.2} s on {THREADS} threads  graph {:7.1} MiB  peak RSS {}",
        graph.num_states(),
        secs(start.elapsed()),
        mib(graph.memory_bytes()),
        peak()
    );
}

fn main() {
    #[derive(PartialEq, Clone, Copy)]
    enum Section {
        Both,
        Sweep,
        Points,
        Build,
    }
    let mut section = Section::Both;
    let mut jobs: Vec<(Section, u32)> = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with('-')) {
        match arg.as_str() {
            "sweep" => section = Section::Sweep,
            "points" => section = Section::Points,
            "build" => section = Section::Build,
            side => jobs.push((
                section,
                side.parse()
                    .unwrap_or_else(|_| panic!("not a board side: {side}")),
            )),
        }
    }
    if jobs.is_empty() {
        let defaults = [11, 12, 13];
        jobs = match section {
            Section::Both => defaults.iter().map(|&s| (Section::Both, s)).collect(),
            s => defaults.iter().map(|&side| (s, side)).collect(),
        };
    }
    let reference = std::env::var("HEX_REFERENCE")
        .ok()
        .filter(|s| !s.is_empty());

    println!("hex, {THREADS} threads, modulus {DEFAULT_MODULUS}");
    for &(section, side) in &jobs {
        match section {
            Section::Sweep => {
                bench_sweep(side, reference.as_deref());
            }
            Section::Points => bench_points(side, None),
            Section::Build => bench_build(side),
            Section::Both => {
                let games = bench_sweep(side, reference.as_deref());
                bench_points(side, Some(games));
            }
        }
    }
}
