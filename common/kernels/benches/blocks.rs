//! Benchmark of the blocks kernel on the Project Euler 766 puzzle: the full
//! layered search with 1 and 2 threads, median of 3 runs each, then the peak
//! resident memory of the process. If `BLOCKS_REFERENCE` names an executable
//! (an external reference program for the same puzzle, run without
//! arguments), it is timed in the same run and the ratio is printed.
//!
//! `cargo bench -p tally-kernels --bench blocks`
//! Optional: `BLOCKS_BENCH_PUZZLE` (a puzzle file) times another puzzle,
//! `BLOCKS_BENCH_RUNS` changes the number of runs, `BLOCKS_BENCH_THREADS`
//! (e.g. `1,2,4`) the thread counts.

mod support;

use std::time::{Duration, Instant};

use support::{median, peak, time_program};
use tally_kernels::Control;
use tally_kernels::blocks::{BlocksCount, PE766, count_reachable, parse_puzzle};

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.split(',')
                .map(|x| x.trim().parse().expect(name))
                .filter(|&x| x > 0)
                .collect::<Vec<usize>>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

fn main() {
    let text = match std::env::var("BLOCKS_BENCH_PUZZLE") {
        Ok(path) => std::fs::read_to_string(&path).expect("read BLOCKS_BENCH_PUZZLE"),
        Err(_) => PE766.to_string(),
    };
    let puzzle = parse_puzzle(&text).expect("puzzle");
    let runs = env_list("BLOCKS_BENCH_RUNS", &[3])[0];
    println!("blocks: {}", puzzle.describe());

    let mut best_single = None;
    let mut count = BlocksCount::default();
    for threads in env_list("BLOCKS_BENCH_THREADS", &[1, 2]) {
        let mut times = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            count = count_reachable(&puzzle, threads, &Control::new()).expect("count");
            times.push(t0.elapsed());
        }
        let ours = median(times);
        best_single = Some(best_single.map_or(ours, |b: Duration| b.min(ours)));
        println!(
            "{threads} thread(s), median of {runs}: {:.3} s; {} configurations, {} layers, \
             largest layer {}",
            ours.as_secs_f64(),
            count.configurations,
            count.layers,
            count.largest_layer
        );
    }
    println!("peak resident memory (VmHWM): {}", peak());
    let ours = best_single.expect("at least one thread count");

    let Ok(reference) = std::env::var("BLOCKS_REFERENCE") else {
        println!("(set BLOCKS_REFERENCE to an external reference program to compare)");
        return;
    };
    let (theirs, ref_output) = time_program(&reference, runs);
    println!(
        "reference median of {runs}: {:.3} s (whole process; printed {ref_output}{})",
        theirs.as_secs_f64(),
        if ref_output == count.configurations.to_string() {
            ", the same count"
        } else {
            ", A DIFFERENT COUNT"
        }
    );
    println!(
        "ratio reference / ours (fastest thread count): {:.1}x",
        theirs.as_secs_f64() / ours.as_secs_f64()
    );
}
