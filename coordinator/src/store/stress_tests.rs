//! sled 0.34.7 has an open report of deadlocks under load (hundreds of gets
//! and dozens of inserts a second over 8 threads, spacejam/sled#1412). This
//! drives the coordinator's own pattern on it, with parking_lot's deadlock
//! detector (sled's parking_lot 0.11, its `deadlock_detection` feature on in
//! test builds) looking every 100 ms, and a progress check besides: readers
//! (get, scan) on 6 threads, a writer applying batches as the scheduler does,
//! a flusher flushing as the group commit does, and sled's own trees written
//! and read directly on 2 more threads. A cycle among sled's locks, or a
//! thread that makes no progress for four minutes, fails it with the stacks.
//!
//! The suite runs a short round; `TALLY_SLED_STRESS_OPS` sets a long one
//! (a measurement, run by hand with `cargo test`, which sets no time limit:
//! docs/testing.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Batch, SledStore, Store, Tree};

/// Operations each thread does in the suite's round.
const SUITE_OPS: u64 = 3_000;

/// A thread that completes no operation for this long has stalled (a
/// deadlock is for ever; one scan of a prefix of a tree of millions of
/// entries took half a minute on a loaded machine in a long round).
const STALL: Duration = Duration::from_secs(240);

fn ops_per_thread() -> u64 {
    std::env::var("TALLY_SLED_STRESS_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SUITE_OPS)
}

/// Every thread's stack in this process, from gdb if it is installed (the
/// evidence of a stall that is not a cycle of parking_lot's locks).
fn own_stacks() -> String {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("timeout")
        .args([
            "120",
            "gdb",
            "-p",
            &pid,
            "-batch",
            "-ex",
            "thread apply all bt",
        ])
        .output();
    match out {
        Ok(out) if !out.stdout.is_empty() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(out) => format!("(no stacks: {})", String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("(no stacks: gdb: {e})"),
    }
}

/// Each thread's count of completed operations.
struct Progress {
    done: Vec<AtomicU64>,
    names: Vec<&'static str>,
}

impl Progress {
    fn tick(&self, thread: usize) {
        self.done[thread].fetch_add(1, Ordering::Relaxed);
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("job-{:06}/{:08}", i % 97, i).into_bytes()
}

#[test]
fn the_stores_get_insert_flush_pattern_does_not_deadlock_sled() {
    the_deadlock_detector_finds_a_planted_cycle();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(&dir.path().join("store")).unwrap());
    let raw = sled::open(dir.path().join("raw")).unwrap();
    let raw_tree = raw.open_tree("t").unwrap();
    let ops = ops_per_thread();
    let names = vec![
        "writer",
        "flusher",
        "reader",
        "reader",
        "reader",
        "reader",
        "scanner",
        "scanner",
        "sled insert",
        "sled get",
    ];
    let progress = Arc::new(Progress {
        done: names.iter().map(|_| AtomicU64::new(0)).collect(),
        names,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, role) in progress.names.clone().into_iter().enumerate() {
        let (store, raw_tree, raw, progress, stop) = (
            store.clone(),
            raw_tree.clone(),
            raw.clone(),
            progress.clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            // The writer and the raw inserter set the pace; the others go on
            // until they stop.
            let paced = matches!(role, "writer" | "sled insert");
            while !stop.load(Ordering::Relaxed) && (!paced || n < ops) {
                n += 1;
                match role {
                    "writer" => {
                        let mut batch = Batch::default();
                        for j in 0..8 {
                            batch.put(Tree::Shards, key(n * 8 + j), vec![n as u8; 64]);
                        }
                        batch.put(Tree::Jobs, key(n % 97), n.to_be_bytes().to_vec());
                        if n.is_multiple_of(5) {
                            batch.remove(Tree::Shards, key((n - 4) * 8));
                        }
                        store.apply(batch).unwrap();
                    }
                    "flusher" => {
                        store.flush().unwrap();
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    "reader" => {
                        store.get(Tree::Shards, &key(n % (ops * 8 + 1))).unwrap();
                        store.get(Tree::Jobs, &key(n % 97)).unwrap();
                    }
                    "scanner" => {
                        store
                            .scan_prefix(Tree::Shards, format!("job-{:06}/", n % 97).as_bytes())
                            .unwrap();
                    }
                    "sled insert" => {
                        raw_tree.insert(key(n), vec![n as u8; 128]).unwrap();
                        if n.is_multiple_of(3) {
                            raw_tree.remove(key(n - 2)).unwrap();
                        }
                        if n.is_multiple_of(64) {
                            raw.flush().unwrap();
                        }
                    }
                    _ => {
                        raw_tree.get(key(n % (ops + 1))).unwrap();
                        raw_tree.scan_prefix(&key(n % 97)[..10]).next();
                    }
                }
                progress.tick(i);
            }
        }));
    }

    // Watch: a cycle among parking_lot 0.11's locks (sled's), or a thread
    // stuck, fails the test with what is known; the paced threads' end ends it.
    let mut last: Vec<(u64, Instant)> =
        progress.names.iter().map(|_| (0, Instant::now())).collect();
    let paced = [0usize, 8];
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if ops > SUITE_OPS && said.elapsed() >= Duration::from_secs(30) {
            said = Instant::now();
            let done: Vec<u64> = progress
                .done
                .iter()
                .map(|d| d.load(Ordering::Relaxed))
                .collect();
            eprintln!(
                "sled stress: {:.0} s, operations by thread {done:?}",
                started.elapsed().as_secs_f64()
            );
        }
        let cycles = parking_lot_011::deadlock::check_deadlock();
        if !cycles.is_empty() {
            let report: Vec<String> = cycles
                .iter()
                .flatten()
                .map(|t| format!("thread {:?}:\n{:?}", t.thread_id(), t.backtrace()))
                .collect();
            panic!(
                "sled deadlocked: {} cycle(s)\n{}",
                cycles.len(),
                report.join("\n")
            );
        }
        let now = Instant::now();
        for (i, seen) in last.iter_mut().enumerate() {
            let done = progress.done[i].load(Ordering::Relaxed);
            let finished = paced.contains(&i) && done >= ops;
            if done != seen.0 || finished {
                *seen = (done, now);
            }
        }
        if let Some(stuck) = last.iter().position(|seen| now - seen.1 >= STALL) {
            let threads: Vec<String> = last
                .iter()
                .zip(&progress.names)
                .map(|((done, at), name)| {
                    format!(
                        "{name}: {done} ops, last {:.0} s ago",
                        (now - *at).as_secs_f64()
                    )
                })
                .collect();
            panic!(
                "the {} thread made no progress for {STALL:?} after {:.0} s\n{}\n{}",
                progress.names[stuck],
                started.elapsed().as_secs_f64(),
                threads.join("\n"),
                own_stacks()
            );
        }
        if paced
            .iter()
            .all(|&i| progress.done[i].load(Ordering::Relaxed) >= ops)
        {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    // What was written is there, once flushed.
    store.flush().unwrap();
    let last_job = store.get(Tree::Jobs, &key(ops % 97)).unwrap();
    assert_eq!(last_job, Some(ops.to_be_bytes().to_vec()));
    let total: u64 = progress
        .done
        .iter()
        .map(|d| d.load(Ordering::Relaxed))
        .sum();
    eprintln!(
        "sled stress: {total} operations over {} threads, no deadlock",
        progress.names.len()
    );
}

/// The detector the test relies on is on: a planted cycle between two of
/// parking_lot 0.11's mutexes is found (and, found, is not reported again).
fn the_deadlock_detector_finds_a_planted_cycle() {
    let a = Arc::new(parking_lot_011::Mutex::new(()));
    let b = Arc::new(parking_lot_011::Mutex::new(()));
    let both_hold_one = Arc::new(std::sync::Barrier::new(2));
    for (first, second) in [(a.clone(), b.clone()), (b, a)] {
        let both_hold_one = both_hold_one.clone();
        // Left deadlocked: the test's process ends with them.
        std::thread::spawn(move || {
            let _first = first.lock();
            both_hold_one.wait();
            let _second = second.lock();
        });
    }
    let started = Instant::now();
    loop {
        if !parking_lot_011::deadlock::check_deadlock().is_empty() {
            break;
        }
        assert!(started.elapsed() < STALL, "no cycle found");
        std::thread::sleep(Duration::from_millis(50));
    }
}
