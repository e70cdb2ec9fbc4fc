//! `-- replication [SHARDS]`: what replicating the store costs. The same job
//! (synthetic, SHARDS shards of little work, default 20,000: a commit-heavy
//! load) through a coordinator with a `file://` stage store and one worker
//! process of two slots, with `--replicate-every 2s` and with `0s` (off),
//! alternating run by run: wall time and per-shard cost, the group commit's
//! mean latency and flush count (from `/metrics`), and at the end the replica's
//! size against the store's.

use std::process::Stdio;
use std::time::Duration;

struct Run {
    wall: f64,
    commit_mean_ms: f64,
    flushes: f64,
    store_bytes: u64,
    replica_bytes: u64,
    answer: String,
}

pub fn replication(shards: u64, runs: usize) {
    let mut on = Vec::new();
    let mut off = Vec::new();
    for _ in 0..runs {
        off.push(run(shards, "0s"));
        on.push(run(shards, "2s"));
    }
    let middle = |mut rs: Vec<Run>| {
        rs.sort_by(|a, b| a.wall.partial_cmp(&b.wall).unwrap());
        rs.swap_remove(rs.len() / 2)
    };
    let (on, off) = (middle(on), middle(off));
    assert_eq!(on.answer, off.answer, "the answers differ");
    for (name, r) in [("off", &off), ("on (every 2 s)", &on)] {
        println!(
            "synthetic {shards} shards, replication {name}: {:.2} s ({:.3} ms a shard), group \
             commit mean {:.3} ms over {:.0} flushes, store {:.1} MB, replica {:.1} MB (answer {})",
            r.wall,
            r.wall * 1e3 / shards as f64,
            r.commit_mean_ms,
            r.flushes,
            r.store_bytes as f64 / 1e6,
            r.replica_bytes as f64 / 1e6,
            r.answer
        );
    }
    println!(
        "on/off: wall {:.3}, group commit mean {:.3}; replica/store size {:.2}",
        on.wall / off.wall,
        on.commit_mean_ms / off.commit_mean_ms,
        on.replica_bytes as f64 / on.store_bytes as f64
    );
}

// The worker and the coordinator are reaped by wait4.
#[allow(clippy::zombie_processes)]
fn run(shards: u64, every: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let stage = dir.path().join("stage");
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (port, http) = (free(), free());
    let url = format!("http://127.0.0.1:{port}");
    let coordinator = crate::runner_processes::tally()
        .args(["coordinator", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .arg("--data")
        .arg(&data)
        .args(["--stage-store", &format!("file://{}", stage.display())])
        .args(["--replicate-every", every])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let worker = crate::runner_processes::tally()
        .args([
            "worker",
            "--coordinator",
            &url,
            "--slots",
            "2",
            "--threads",
            "2",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let shards_arg = shards.to_string();
    let (wall, answer) =
        crate::runner_cluster::submit_and_watch(&url, &["synthetic", "--shards", &shards_arg]);
    // The replica catches up within an interval or two.
    std::thread::sleep(Duration::from_secs(5));
    let metrics = get_metrics(http);
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let flushes = value("tally_store_commit_seconds_count");
    let commit_mean_ms = value("tally_store_commit_seconds_sum") * 1e3 / flushes.max(1.0);
    crate::runner_processes::reap(worker.id(), libc::SIGTERM);
    crate::runner_processes::reap(coordinator.id(), libc::SIGKILL);
    let replica_bytes = std::fs::read_dir(&stage)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| crate::runner_processes::dir_size(&e.path().join("replica")))
                .sum()
        })
        .unwrap_or(0);
    Run {
        wall,
        commit_mean_ms,
        flushes,
        store_bytes: crate::runner_processes::dir_size(&data),
        replica_bytes,
        answer,
    }
}

fn get_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}
