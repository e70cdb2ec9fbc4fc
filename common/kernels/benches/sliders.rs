//! Benchmark of the sliders kernel on the Project Euler 244 boards: build (both
//! searches and the shortest-path graph) + layer count + enumeration, median of 5
//! runs. If `SLIDERS_REFERENCE` names an executable (an external reference
//! program for the same instance, run without arguments), it is timed in the same
//! run and the ratio is printed.
//!
//! `cargo bench -p tally-kernels --bench sliders`
//! Optional: `SLIDERS_BENCH_ROWS`/`SLIDERS_BENCH_COLS`/`SLIDERS_BENCH_START`/
//! `SLIDERS_BENCH_TARGET` time another instance instead; `SLIDERS_BENCH_5X5=1`
//! times the 5 x 5 analogue of the Project Euler boards (12 red and 12 blue
//! tiles, the blank in the top-left corner, to a checkerboard; 67,603,900
//! boards); `SLIDERS_BENCH_RUNS` changes the number of runs. The prefix tasks
//! and shard weights of a 64-shard plan are printed too.

mod support;

use std::time::Instant;

use support::{median, time_program};
use tally_kernels::Control;
use tally_kernels::balance::group_by_weight;
use tally_kernels::sliders::{SliderParams, SliderSpace};

/// The 5 x 5 analogue of the Project Euler 244 boards.
const START_5X5: &str = "WRRBB/RRRBB/RRBBB/RRRBB/RRBBB";
const TARGET_5X5: &str = "WBRBR/BRBRB/RBRBR/BRBRB/RBRBR";

fn runs() -> usize {
    std::env::var("SLIDERS_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5)
}

fn params() -> SliderParams {
    let mut p = SliderParams::default();
    let var = |name: &str| std::env::var(name).ok();
    if var("SLIDERS_BENCH_5X5").is_some_and(|v| v == "1") {
        p = SliderParams::new(5, 5, START_5X5, TARGET_5X5);
    }
    if let (Some(r), Some(c)) = (var("SLIDERS_BENCH_ROWS"), var("SLIDERS_BENCH_COLS")) {
        p.rows = r.parse().expect("SLIDERS_BENCH_ROWS");
        p.cols = c.parse().expect("SLIDERS_BENCH_COLS");
    }
    if let Some(s) = var("SLIDERS_BENCH_START") {
        p.start = s;
    }
    if let Some(t) = var("SLIDERS_BENCH_TARGET") {
        p.target = t;
    }
    p
}

fn main() {
    let params = params();
    let runs = runs();
    let mut times = Vec::new();
    let mut phases = Vec::new();
    let mut last = None;
    let mut plan = None;
    for _ in 0..runs {
        let control = Control::new();
        let t0 = Instant::now();
        let space = SliderSpace::build(&params, &control).expect("build");
        let t1 = Instant::now();
        let dp = space.dp_totals();
        let t2 = Instant::now();
        let sums = space.enumerate("", &control).expect("enumerate");
        let t3 = Instant::now();
        times.push(t3 - t0);
        phases.push((t1 - t0, t2 - t1, t3 - t2));
        assert_eq!(dp.count, sums.count, "layer count and enumeration disagree");
        assert_eq!(
            u128::from(dp.checksum_sum_mod),
            sums.checksum_sum % u128::from(params.modulus),
            "layer count and enumeration disagree"
        );
        last = Some((space.shortest_length(), space.reachable_boards(), sums));
        plan = Some(space.balanced_prefix_tasks(64, 64));
    }
    let tasks = plan.expect("runs");
    let weights: Vec<u128> = tasks.iter().map(|t| t.1).collect();
    let loads: Vec<u128> = group_by_weight(&weights, 64)
        .iter()
        .map(|g| g.iter().map(|&i| weights[i]).sum())
        .collect();
    println!(
        "64-shard plan: {} prefixes of length {}, heaviest prefix {}, {} shards weighing {}..={} sequences",
        tasks.len(),
        tasks.first().map_or(0, |t| t.0.len()),
        weights.iter().max().copied().unwrap_or(0),
        loads.len(),
        loads.iter().min().copied().unwrap_or(0),
        loads.iter().max().copied().unwrap_or(0),
    );
    let ours = median(times);
    let (d, boards, sums) = last.expect("runs");
    phases.sort();
    let (b, p, e) = phases[runs / 2];
    println!(
        "sliders {}x{} {} -> {}: D = {d}, count = {}, sum = {}, boards = {boards} \
         (layer count agrees: count exact, sum mod {})",
        params.rows,
        params.cols,
        params.start,
        params.target,
        sums.count,
        sums.checksum_sum,
        params.modulus
    );
    println!(
        "kernel median of {runs}: {:.3} ms (build {:.3} ms, layer count {:.3} ms, enumeration {:.3} ms)",
        ours.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
        p.as_secs_f64() * 1e3,
        e.as_secs_f64() * 1e3
    );

    let Ok(reference) = std::env::var("SLIDERS_REFERENCE") else {
        println!("(set SLIDERS_REFERENCE to an external reference program to compare)");
        return;
    };
    let (theirs, ref_output) = time_program(&reference, runs);
    println!(
        "reference median of {runs}: {:.3} ms (whole process; printed {ref_output})",
        theirs.as_secs_f64() * 1e3
    );
    println!(
        "ratio reference / ours: {:.1}x",
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
}
