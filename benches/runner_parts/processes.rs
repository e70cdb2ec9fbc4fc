//! Running the `tally` binary and measuring its processes: wall times and
//! their medians, peak memory and CPU time (by `wait4`), the builds compared
//! (`TALLY_BENCH_BEFORE`), and the size of a data directory.

use std::process::{Command, Stdio};
use std::time::Instant;

pub fn tally() -> Command {
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

pub fn median(args: &[&str], runs: usize) -> (f64, String) {
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
pub fn middle(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times[times.len() / 2]
}

/// The builds a benchmark compares: this one, and the older build named by
/// `TALLY_BENCH_BEFORE`, when set.
pub fn builds() -> Vec<(&'static str, std::ffi::OsString)> {
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
pub fn median_with_peak(
    binary: &std::ffi::OsStr,
    args: &[String],
    runs: usize,
) -> (f64, String, u64) {
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
pub fn wait_with_usage(mut child: std::process::Child) -> (String, u64, f64) {
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

/// Kills (with `signal`) and reaps a child: its CPU seconds and peak memory.
pub fn reap(pid: u32, signal: libc::c_int) -> (f64, u64) {
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

/// The bytes of the files under `path`.
pub fn dir_size(path: &std::path::Path) -> u64 {
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
