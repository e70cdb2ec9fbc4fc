//! Hex at large sides: the embedded run's wall time and peak memory
//! (`-- scale`), and a side beyond the small ones through a coordinator with
//! one and two worker processes (`-- hex-large`).

use std::process::Stdio;
use std::time::Instant;

use crate::runner_cluster::{Cluster, Setup, cluster};
use crate::runner_processes::tally;

/// Wall time and peak memory (max RSS of the process) of `tally run hex --side N`.
// The child is reaped by wait4, which also returns its peak memory.
#[allow(clippy::zombie_processes)]
pub fn scale(sides: &[u32]) {
    for &side in sides {
        let started = Instant::now();
        let child = tally()
            .args(["run", "hex", "--side", &side.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tally runs");
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: rusage is plain data filled in by the kernel for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let mut stdout = child.stdout.expect("piped");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut answer).unwrap();
        // SAFETY: waits for the child spawned above; the pointers are valid locals.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert_eq!(waited, pid);
        assert_eq!(status, 0, "tally run hex --side {side} failed");
        println!(
            "tally run hex --side {side}: {:.1} s, peak memory {:.2} GB, answer {}",
            started.elapsed().as_secs_f64(),
            usage.ru_maxrss as f64 * 1024.0 / 1e9,
            answer.trim()
        );
    }
}

/// A hex side beyond the small ones through a coordinator, one run each: one
/// worker process of two threads, then two worker processes of one thread
/// (the same two cores, each with its own graph): wall time, each worker's
/// peak memory, and the answer (with `exact`, its digit count and ends).
pub fn hex_large(side: u32, exact: bool, places: &[&str], budget: Option<&str>) {
    let side_arg = side.to_string();
    let mode = if exact { "exact" } else { "mod 1000000007" };
    // Stage data in a directory, as a cluster would keep a staged graph
    // (larger than a report carries to a coordinator that keeps it itself):
    // a directory a run, removed after it (a side-18 run leaves gigabytes).
    let run_on = |submit: &[&str], workers: &[usize]| {
        let stage = tempfile::tempdir().unwrap();
        let setup = Setup {
            coordinator_args: vec![
                "--stage-store".into(),
                format!("file://{}", stage.path().display()),
            ],
            worker_args: budget
                .map(|b| vec!["--memory-budget".to_string(), b.to_string()])
                .unwrap_or_default(),
            ..Setup::default()
        };
        cluster(submit, workers, &setup)
    };
    let mut answers = Vec::new();
    for &place in places {
        let mut submit = vec!["hex", "--side", side_arg.as_str(), "--graph", place];
        if exact {
            submit.push("--exact");
        }
        let one = run_on(&submit, &[2]);
        let two = run_on(&submit, &[1, 1]);
        assert_eq!(one.answer, two.answer, "one and two workers disagree");
        let answer = if exact && one.answer.len() > 40 {
            format!(
                "{} digits, {}...{}",
                one.answer.len(),
                &one.answer[..20],
                &one.answer[one.answer.len() - 20..]
            )
        } else {
            one.answer.clone()
        };
        let peaks = |c: &Cluster| c.worker_peaks(1e9, "GB", 2);
        let cpu = |c: &Cluster| c.worker_cpu.iter().sum::<f64>();
        println!(
            "hex side {side} {mode}, graph in {place}{}: 1 worker process (2 threads) {:.1} s, \
             workers' CPU {:.1} s, peak {}; 2 worker processes (1 thread each) {:.1} s \
             ({:.2}x), CPU {:.1} s, peaks {}; coordinator peak {:.2} GB; answer {answer}",
            budget.map_or(String::new(), |b| format!(", workers of {b}")),
            one.wall,
            cpu(&one),
            peaks(&one),
            two.wall,
            two.wall / one.wall,
            cpu(&two),
            peaks(&two),
            one.coordinator_rss.max(two.coordinator_rss) as f64 / 1e9,
        );
        answers.push(one.answer);
    }
    assert!(
        answers.windows(2).all(|w| w[0] == w[1]),
        "the graph's places disagree"
    );
}
