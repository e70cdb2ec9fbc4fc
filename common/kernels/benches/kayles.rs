//! Times the `kayles` kernel on 2 threads.
//!
//! `cargo bench -p tally-kernels --bench kayles [-- PINS...]` times `fair_rows`
//! (median of 5) at the given pin counts (default: 1000 and 10000). Without pin
//! counts it then times the fast path at 10^5 pins (median of 3) and 10^6 pins
//! (one run), the quadratic method at 10^5 pins for the ratio, and prints the
//! peak resident memory. `--crossover` instead times both methods at a range
//! of pin counts around the threshold of `fair_rows`, and `--fast PINS` times
//! one run of the fast path with its peak memory. CPU times (all threads, 10 ms
//! ticks) are printed next to wall times, since the machine may be shared.
//!
//! If `KAYLES_REFERENCE` names an external reference program, it is timed in
//! the same run: it is started without arguments and must print the last 9
//! digits of f(1000) as its last line, so it is only compared at 1000 pins (it
//! takes no pin count); set `KAYLES_REFERENCE_PINS_ARG=1` for a program that
//! takes the pin count as its only argument.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{median, peak_rss_mib};
use tally_kernels::Control;
use tally_kernels::kayles::{
    DEFAULT_DIGITS, fair_rows, fair_rows_fast, fair_rows_quadratic, format_answer,
};

const RUNS: usize = 5;
const THREADS: usize = 2;
const REFERENCE_PINS: u64 = 1000;

/// User and system CPU time of this process so far (all threads), from
/// `/proc/self/stat`, in clock ticks of 10 ms; zero where unavailable.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name, which ends with the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 here.
    Duration::from_millis(10 * (ticks(11) + ticks(12)))
}

type Kernel = fn(u64, u32, usize, &Control) -> tally_kernels::Result<u64>;

/// Median wall time and median CPU time of `runs` runs, and the answer.
fn time_kernel(kernel: Kernel, pins: u64, runs: usize) -> (Duration, Duration, String) {
    let mut answer = String::new();
    let (walls, cpus): (Vec<Duration>, Vec<Duration>) = (0..runs)
        .map(|_| {
            let (start, cpu_start) = (Instant::now(), cpu_time());
            let value = kernel(pins, DEFAULT_DIGITS, THREADS, &Control::new())
                .unwrap_or_else(|e| panic!("kayles {pins}: {e}"));
            let times = (start.elapsed(), cpu_time().saturating_sub(cpu_start));
            answer = format_answer(value, DEFAULT_DIGITS);
            times
        })
        .unzip();
    (median(walls), median(cpus), answer)
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

fn print_peak() {
    match peak_rss_mib() {
        Some(mib) => println!("  peak RSS so far (VmHWM): {mib:.1} MiB"),
        None => println!("  peak RSS: unavailable"),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The fast path at 10^5 and 10^6 pins and the quadratic method at 10^5.
fn large() {
    let (fast, fast_cpu, answer) = time_kernel(fair_rows_fast, 100_000, 3);
    println!(
        "kayles fast      n=  100000 threads={THREADS}: median {:>10.3} ms of 3 (CPU {:.0} ms), \
         answer {answer}",
        ms(fast),
        ms(fast_cpu)
    );
    print_peak();
    let (quadratic, quadratic_cpu, quadratic_answer) = time_kernel(fair_rows_quadratic, 100_000, 1);
    let verdict = if quadratic_answer == answer {
        "same answer"
    } else {
        "DIFFERENT ANSWER"
    };
    println!(
        "kayles quadratic n=  100000 threads={THREADS}: {:>10.3} ms (one run, CPU {:.0} ms), \
         answer {quadratic_answer} ({verdict}); quadratic / fast = {:.1}",
        ms(quadratic),
        ms(quadratic_cpu),
        quadratic.as_secs_f64() / fast.as_secs_f64()
    );
    let (million, million_cpu, answer) = time_kernel(fair_rows_fast, 1_000_000, 1);
    println!(
        "kayles fast      n= 1000000 threads={THREADS}: {:>10.3} ms (one run, CPU {:.0} ms), \
         answer {answer}",
        ms(million),
        ms(million_cpu)
    );
    print_peak();
}

/// CPU time per run of `kernel` at `pins`, over as many runs as fill `budget`
/// of CPU time (the clock ticks are coarse), and the answer.
fn cpu_per_run(kernel: Kernel, pins: u64, budget: Duration) -> (Duration, String) {
    let (start, mut runs, mut answer) = (cpu_time(), 0u32, String::new());
    while runs == 0 || cpu_time().saturating_sub(start) < budget {
        let value = kernel(pins, DEFAULT_DIGITS, THREADS, &Control::new())
            .unwrap_or_else(|e| panic!("kayles {pins}: {e}"));
        answer = format_answer(value, DEFAULT_DIGITS);
        runs += 1;
    }
    (cpu_time().saturating_sub(start) / runs, answer)
}

/// Both methods around the threshold of `fair_rows`, by CPU time per run (all
/// threads): wall times are unreliable on a shared machine.
fn crossover() {
    let budget = Duration::from_millis(1500);
    for pins in [
        1000u64, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 12_000, 16_000,
    ] {
        let (fast, a) = cpu_per_run(fair_rows_fast, pins, budget);
        let (quadratic, b) = cpu_per_run(fair_rows_quadratic, pins, budget);
        assert_eq!(a, b, "the methods disagree at {pins} pins");
        println!(
            "n={pins:>6}: CPU per run: fast {:>8.3} ms, quadratic {:>8.3} ms, quadratic / fast = {:.2}",
            ms(fast),
            ms(quadratic),
            quadratic.as_secs_f64() / fast.as_secs_f64()
        );
    }
}

/// `f(pins)` by the fast path once, with its time and the peak memory.
fn single(pins: u64) {
    let (wall, cpu, answer) = time_kernel(fair_rows_fast, pins, 1);
    println!(
        "kayles fast n={pins} threads={THREADS}: {:.3} s (CPU {:.1} s), answer {answer}",
        wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
    print_peak();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--crossover") {
        crossover();
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "--fast") {
        let pins = args
            .get(at + 1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("--fast needs a pin count"));
        single(pins);
        return;
    }
    let mut pins: Vec<u64> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().unwrap_or_else(|_| panic!("not a pin count: {a}")))
        .collect();
    let defaults = pins.is_empty();
    if defaults {
        pins = vec![1000, 10_000];
    }
    let reference = std::env::var("KAYLES_REFERENCE")
        .ok()
        .filter(|s| !s.is_empty());
    let pass_pins = std::env::var_os("KAYLES_REFERENCE_PINS_ARG").is_some_and(|v| v == "1");
    for n in pins {
        let (ours, _, answer) = time_kernel(fair_rows, n, RUNS);
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
    if defaults {
        large();
    }
}
