//! Helpers shared by the kernel benchmarks: medians, peak memory, and timing an
//! external reference program in the same run.

#![allow(dead_code)] // each benchmark uses its own subset

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Peak resident memory of this process so far (`VmHWM`, Linux), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// [`peak_rss_mib`] for printing.
pub fn peak() -> String {
    peak_rss_mib().map_or("?".into(), |m| format!("{m:.0} MiB"))
}

/// Runs `program` (no arguments, no input) `runs` times: the median wall time of
/// the whole process and what it printed last, trimmed.
pub fn time_program(program: &str, runs: usize) -> (Duration, String) {
    let mut times = Vec::new();
    let mut output = String::new();
    for _ in 0..runs {
        let t0 = Instant::now();
        let out = Command::new(program)
            .stdin(Stdio::null())
            .output()
            .expect("run the reference program");
        times.push(t0.elapsed());
        assert!(out.status.success(), "reference program failed");
        output = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    (median(times), output)
}
