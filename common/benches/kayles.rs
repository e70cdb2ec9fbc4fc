//! Times the `kayles` kernel: the median of 5 runs of `fair_rows` on 2 threads.
//!
//! `cargo bench -p tally-common --bench kayles [-- PINS...]` (default: 1000 and
//! 10000 pins). If `KAYLES_REFERENCE` names an external reference program, it is
//! timed in the same run: it is started without arguments and must print the
//! last 9 digits of f(1000) as its last line, so it is only compared at 1000 pins
//! (it takes no pin count); set `KAYLES_REFERENCE_PINS_ARG=1` for a program that
//! takes the pin count as its only argument.

use std::process::Command;
use std::time::{Duration, Instant};

use tally_common::Control;
use tally_common::kayles::{DEFAULT_DIGITS, fair_rows, format_answer};

const RUNS: usize = 5;
const THREADS: usize = 2;
const REFERENCE_PINS: u64 = 1000;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time_kernel(pins: u64) -> (Duration, String) {
    let mut answer = String::new();
    let times = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let value = fair_rows(pins, DEFAULT_DIGITS, THREADS, &Control::new())
                .unwrap_or_else(|e| panic!("kayles {pins}: {e}"));
            let elapsed = start.elapsed();
            answer = format_answer(value, DEFAULT_DIGITS);
            elapsed
        })
        .collect();
    (median(times), answer)
}

fn time_reference(program: &str, pins: u64, pass_pins: bool) -> (Duration, String) {
    let mut answer = String::new();
    let times = (0..RUNS)
        .map(|_| {
            let mut command = Command::new(program);
            if pass_pins {
                command.arg(pins.to_string());
            }
            let start = Instant::now();
            let output = command
                .output()
                .unwrap_or_else(|e| panic!("cannot run the reference {program}: {e}"));
            let elapsed = start.elapsed();
            assert!(output.status.success(), "the reference failed: {output:?}");
            let stdout = String::from_utf8_lossy(&output.stdout);
            answer = stdout.lines().last().unwrap_or("").trim().to_string();
            elapsed
        })
        .collect();
    (median(times), answer)
}

fn main() {
    let mut pins: Vec<u64> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().unwrap_or_else(|_| panic!("not a pin count: {a}")))
        .collect();
    if pins.is_empty() {
        pins = vec![1000, 10_000];
    }
    let reference = std::env::var("KAYLES_REFERENCE")
        .ok()
        .filter(|s| !s.is_empty());
    let pass_pins = std::env::var_os("KAYLES_REFERENCE_PINS_ARG").is_some_and(|v| v == "1");
    for n in pins {
        let (ours, answer) = time_kernel(n);
        println!(
            "kayles n={n:>7} threads={THREADS}: median {:>10.3} ms of {RUNS}, answer {answer}",
            ours.as_secs_f64() * 1e3
        );
        let Some(program) = reference.as_deref() else {
            continue;
        };
        if !pass_pins && n != REFERENCE_PINS {
            println!(
                "  reference: skipped (it takes no pin count and always computes n={REFERENCE_PINS})"
            );
            continue;
        }
        let (theirs, their_answer) = time_reference(program, n, pass_pins);
        let verdict = if their_answer == answer {
            "same answer"
        } else {
            "DIFFERENT ANSWER"
        };
        println!(
            "  reference:  median {:>10.3} ms of {RUNS} (process start included), answer {their_answer} \
             ({verdict}); reference / ours = {:.2}",
            theirs.as_secs_f64() * 1e3,
            theirs.as_secs_f64() / ours.as_secs_f64()
        );
    }
}
