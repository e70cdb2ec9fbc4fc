//! Benchmark of the sliders kernel on the Project Euler 244 boards: build (both
//! searches and the shortest-path graph) + layer count + enumeration, median of 5
//! runs. If `SLIDERS_REFERENCE` names an executable (an external reference
//! program for the same instance, run without arguments), it is timed in the same
//! run and the ratio is printed.
//!
//! `cargo bench -p tally-common --bench sliders`
//! Optional: `SLIDERS_BENCH_ROWS`/`SLIDERS_BENCH_COLS`/`SLIDERS_BENCH_START`/
//! `SLIDERS_BENCH_TARGET` time another instance instead; `SLIDERS_BENCH_RUNS`
//! changes the number of runs.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tally_common::Control;
use tally_common::sliders::{SliderParams, SliderSpace};

fn runs() -> usize {
    std::env::var("SLIDERS_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn params() -> SliderParams {
    let mut p = SliderParams::default();
    let var = |name: &str| std::env::var(name).ok();
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
    }
    let ours = median(times);
    let (d, boards, sums) = last.expect("runs");
    phases.sort();
    let (b, p, e) = phases[runs / 2];
    println!(
        "sliders {}x{}: D = {d}, count = {}, sum = {}, boards = {boards}",
        params.rows, params.cols, sums.count, sums.checksum_sum
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
    let mut ref_times = Vec::new();
    let mut ref_output = String::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let out = Command::new(&reference)
            .stdin(Stdio::null())
            .output()
            .expect("run the reference program");
        ref_times.push(t0.elapsed());
        assert!(out.status.success(), "reference program failed");
        ref_output = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    let theirs = median(ref_times);
    println!(
        "reference median of {runs}: {:.3} ms (whole process; printed {ref_output})",
        theirs.as_secs_f64() * 1e3
    );
    println!(
        "ratio reference / ours: {:.1}x",
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
}
