//! `-- defaults`: the runner's cost at its defaults, the table of the commands a
//! user runs without tuning, for this build and, with `TALLY_BENCH_BEFORE=BIN`,
//! an older build, the two alternating run by run so that both see the same
//! machine. Each row is the median of the runs; the ratios that matter (the
//! default slots against 128 slots, 100 shards a cell step against 1) are
//! printed under the table. `-- defaults 1m` adds a million synthetic shards
//! (time and peak memory).

use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One row: what it runs, and how.
struct Row {
    name: &'static str,
    run: Box<dyn Fn(&OsStr) -> Measured>,
}

#[derive(Clone, Copy, Default)]
struct Measured {
    seconds: f64,
    peak_bytes: u64,
}

pub fn defaults(runs: usize, million: bool) {
    let binaries = crate::runner_processes::builds();
    let module = trivial_module();
    let mut rows = vec![
        run_row(
            "tally run synthetic --shards 1000",
            &["synthetic", "--shards", "1000"],
        ),
        run_row(
            "tally run synthetic --shards 100000",
            &["synthetic", "--shards", "100000"],
        ),
        run_row(
            "tally run synthetic --shards 100000 --slots 128",
            &["synthetic", "--shards", "100000", "--slots", "128"],
        ),
        run_row(
            "tally run hex --side 11 --plan cell-step --shards-per-step 1",
            &[
                "hex",
                "--side",
                "11",
                "--plan",
                "cell-step",
                "--shards-per-step",
                "1",
            ],
        ),
        run_row(
            "tally run hex --side 11 --plan cell-step --shards-per-step 100",
            &[
                "hex",
                "--side",
                "11",
                "--plan",
                "cell-step",
                "--shards-per-step",
                "100",
            ],
        ),
    ];
    let path = module.path().to_string_lossy().to_string();
    rows.push(Row {
        name: "tally run wasm (a trivial module) --shards 10000",
        run: Box::new(move |binary| {
            timed(
                binary,
                &["run", "wasm", "--module", &path, "--shards", "10000"],
            )
        }),
    });
    rows.push(Row {
        name: "tally submit kayles --pins 10, then tally result (running cluster)",
        run: Box::new(tiny_job),
    });
    if million {
        rows.push(run_row(
            "tally run synthetic --shards 1000000",
            &["synthetic", "--shards", "1000000"],
        ));
    }
    let mut times = vec![vec![Vec::new(); rows.len()]; binaries.len()];
    let mut peaks = vec![vec![0u64; rows.len()]; binaries.len()];
    for _ in 0..runs {
        for (r, row) in rows.iter().enumerate() {
            for (b, (_, binary)) in binaries.iter().enumerate() {
                let m = (row.run)(binary);
                times[b][r].push(m.seconds);
                peaks[b][r] = peaks[b][r].max(m.peak_bytes);
            }
        }
    }
    let medians: Vec<Vec<f64>> = times
        .into_iter()
        .map(|rows| {
            rows.into_iter()
                .map(crate::runner_processes::middle)
                .collect()
        })
        .collect();
    println!("the runner at its defaults (median of {runs}, seconds; peak memory in MB)");
    let header: Vec<&str> = binaries.iter().map(|(name, _)| *name).collect();
    println!("| command | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(binaries.len()));
    for (r, row) in rows.iter().enumerate() {
        let cells: Vec<String> = (0..binaries.len())
            .map(|b| {
                format!(
                    "{:.3} s ({:.0} MB)",
                    medians[b][r],
                    peaks[b][r] as f64 / 1e6
                )
            })
            .collect();
        println!("| `{}` | {} |", row.name, cells.join(" | "));
    }
    for (b, (name, _)) in binaries.iter().enumerate() {
        let m = &medians[b];
        println!(
            "{name}: 10^5 synthetic shards at the default slots / at 128 slots: {:.2}; \
             hex side 11 cell-step, 100 shards a step / 1: {:.2}; per shard at the defaults: {:.3} ms",
            m[1] / m[2],
            m[4] / m[3],
            (m[1] - m[0]) * 1e3 / 99_000.0
        );
    }
    if binaries.len() == 2 {
        for (r, row) in rows.iter().enumerate() {
            println!(
                "this build / before, `{}`: {:.3}",
                row.name,
                medians[0][r] / medians[1][r]
            );
        }
    }
}

fn run_row(name: &'static str, args: &'static [&'static str]) -> Row {
    Row {
        name,
        run: Box::new(move |binary| {
            let args: Vec<&str> = std::iter::once("run").chain(args.iter().copied()).collect();
            timed(binary, &args)
        }),
    }
}

/// Runs `binary args` to the end: wall time and peak memory.
fn timed(binary: &OsStr, args: &[&str]) -> Measured {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (seconds, _, peak_bytes) = crate::runner_processes::median_with_peak(binary, &args, 1);
    Measured {
        seconds,
        peak_bytes,
    }
}

/// A module whose every shard returns the residue 1: all runner, no kernel.
fn trivial_module() -> tempfile::NamedTempFile {
    let wasm = wat::parse_str(
        r#"(module
             (memory (export "memory") 1)
             (func (export "tally_abi_version") (result i32) (i32.const 1))
             (func (export "tally_alloc") (param i32) (result i32) (i32.const 4096))
             (func (export "tally_shard")
               (param i64 i64 i64 i32 i32 i32 i32 i32 i32) (result i32)
               (i64.store (local.get 7) (i64.const 1))
               (local.get 8)))"#,
    )
    .expect("the module assembles");
    let file = tempfile::Builder::new().suffix(".wasm").tempfile().unwrap();
    std::fs::write(file.path(), wasm).unwrap();
    file
}

/// A coordinator and a worker of `binary` running; then the time from
/// `tally submit kayles --pins 10` to the first `tally result` that answers.
#[allow(clippy::zombie_processes)]
fn tiny_job(binary: &OsStr) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let tally = || {
        let mut command = Command::new(binary);
        command.stderr(Stdio::null());
        command
    };
    let mut coordinator = tally()
        .args([
            "coordinator",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data",
        ])
        .arg(dir.path().join("data"))
        .spawn()
        .unwrap();
    let mut worker = tally()
        .args(["worker", "--coordinator", &url])
        .spawn()
        .unwrap();
    let ready = |args: &[&str]| {
        tally()
            .args(args)
            .args(["--coordinator", &url])
            .output()
            .unwrap()
    };
    // Warm: the coordinator answers and the worker has registered and taken
    // a job, so that what is timed is the job's own path.
    let mut warm = None;
    for _ in 0..200 {
        let out = ready(&["submit", "kayles", "--pins", "10"]);
        if out.status.success() {
            warm = Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let warm = warm.expect("the coordinator answers");
    while !ready(&["result", &warm]).status.success() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let out = ready(&["submit", "kayles", "--pins", "10"]);
    assert!(out.status.success());
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    while !ready(&["result", &job]).status.success() {}
    let seconds = started.elapsed().as_secs_f64();
    let _ = worker.kill();
    let _ = coordinator.kill();
    let _ = worker.wait();
    let _ = coordinator.wait();
    Measured {
        seconds,
        peak_bytes: 0,
    }
}
