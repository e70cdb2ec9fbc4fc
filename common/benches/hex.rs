//! Benchmark of the hex kernel: build + sweep + game count for several board sides
//! on 2 threads, median of 5 runs each.
//!
//! `cargo bench -p tally-common --bench hex [-- SIDE...]` (default sides 11 12 13).
//! When the environment variable `HEX_REFERENCE` names an executable (an external
//! reference program taking `SIDE THREADS` and printing the residue), it is timed
//! the same way and the ratio reference / ours is printed.

use std::process::Command;
use std::time::{Duration, Instant};

use tally_common::Control;
use tally_common::hex::{DEFAULT_MODULUS, HexGraph, game_count};

const RUNS: usize = 5;
const THREADS: usize = 2;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
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

fn main() {
    let sides: Vec<u32> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("not a board side: {a}"))
        })
        .collect();
    let sides = if sides.is_empty() {
        vec![11, 12, 13]
    } else {
        sides
    };
    let reference = std::env::var("HEX_REFERENCE")
        .ok()
        .filter(|s| !s.is_empty());

    println!("hex: build + sweep + game_count, {THREADS} threads, median of {RUNS} runs");
    for side in sides {
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
        if let Some(program) = &reference {
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
    }
}
