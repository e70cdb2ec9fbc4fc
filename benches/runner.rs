//! Runner overhead, measured on this machine in one run:
//! - `tally run hex --side 11` through the embedded runner against the kernel alone;
//! - the cost per shard: the same hex job with 1 and with ~110 shards per cell step
//!   (about 10 000 shards);
//! - the time from a coordinator restart (after kill -9 mid-job) to the first
//!   accepted report (`runner_parts/overhead.rs`, `runner_parts/restart.rs`).
//!
//! - `-- scale [sides]`: wall time and peak memory of `tally run hex --side N` for
//!   N = 14, 15, 16 (or the sides given) (`runner_parts/scale.rs`, with `-- hex-large`).
//!
//! - `-- frontier`: the frontier plans. Pegs (English, centre to centre) through
//!   the runner with one worker against the kernel alone; the same job through a
//!   coordinator with one worker process of two slots and with two worker
//!   processes of one slot each (the same cores), wall time and each worker's
//!   peak memory; blocks (Project Euler 766) with one and two workers against the
//!   kernel alone. `-- frontier prefixes` adds one run of the pegs prefixes plan
//!   (`runner_parts/frontier.rs`, with `-- frontier-budget`).
//!
//! - `-- sliders`: the 5 x 5 sliders instance of docs/kinds/sliders.md through a
//!   coordinator and one worker process, prefixes plan against frontier plan
//!   (stage data in the coordinator's store, then in a `file://` stage store):
//!   wall time, the coordinator's CPU time and peak memory, the worker's peak
//!   (`runner_parts/sliders.rs`).
//!
//! - `-- shards`: the cost per shard at about 10^5 shards (hex side 11,
//!   cell-step, 1 against 1,024 shards per step); with `TALLY_BENCH_BEFORE=BIN`,
//!   the same with an older build, for the ratio (`runner_parts/overhead.rs`).
//!
//! - `-- synthetic [SHARDS]`: the cost per shard of the runner alone, with
//!   shards of no work (`tally run synthetic`, 128 slots), 1,000 against SHARDS
//!   (default 10^5) shards; and the peak memory of the larger job
//!   (`runner_parts/overhead.rs`).
//!
//! - `-- restart [JOBS]`: a coordinator given JOBS queued jobs (default 16,000
//!   queens jobs of 64 shards: about a million shards) is killed with SIGKILL
//!   and started again: the time until it answers, and the store's size; then
//!   the same with the jobs finished (cancelled, hence settled)
//!   (`runner_parts/restart.rs`).
//!
//! - `-- stage-store`: the 5 x 5 sliders instance, frontier plan, through a
//!   coordinator and one worker process of 2 slots with stage data in the
//!   coordinator, in a directory (`file://`) and in S3 (a `moto_server` on
//!   loopback, if installed): wall time, the coordinator's CPU time, peak
//!   memory and store size at the end (`runner_parts/sliders.rs`).
//!
//! - `-- defaults [1m]`: the runner's cost at its defaults, the commands a user
//!   runs without tuning (synthetic shards at the default slots and at 128,
//!   hex cell-step with 1 and 100 shards a step, a trivial wasm module over
//!   10,000 shards, a tiny job through a running cluster), with
//!   `TALLY_BENCH_BEFORE=BIN` for an older build alongside (`runner_parts/defaults.rs`).
//!
//! - `-- replication [SHARDS]`: the store replicated (`--replicate-every 2s`)
//!   against not (`0s`), alternating: a commit-heavy synthetic job's wall time
//!   and per-shard cost, the group commit's mean latency, the replica's size
//!   against the store's (`runner_parts/replication.rs`).
//!
//! Run: `cargo bench --bench runner` (add `-- quick` for one repetition).
//!
//! Each benchmark is in `runner_parts/` (named beside it above); they share
//! `processes.rs` (running `tally`, timing it, its peak memory) and
//! `cluster.rs` (a coordinator and workers as processes).

#[path = "runner_parts/cluster.rs"]
mod runner_cluster;
#[path = "runner_parts/defaults.rs"]
mod runner_defaults;
#[path = "runner_parts/frontier.rs"]
mod runner_frontier;
#[path = "runner_parts/overhead.rs"]
mod runner_overhead;
#[path = "runner_parts/processes.rs"]
mod runner_processes;
#[path = "runner_parts/replication.rs"]
mod runner_replication;
#[path = "runner_parts/restart.rs"]
mod runner_restart;
#[path = "runner_parts/scale.rs"]
mod runner_scale;
#[path = "runner_parts/sliders.rs"]
mod runner_sliders;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("scale") {
        let sides: Vec<u32> = args[1..].iter().filter_map(|a| a.parse().ok()).collect();
        let sides = if sides.is_empty() {
            vec![14, 15, 16]
        } else {
            sides
        };
        return runner_scale::scale(&sides);
    }
    let quick = args.iter().any(|a| a == "quick");
    let runs = if quick { 1 } else { 3 };
    if args.first().map(String::as_str) == Some("frontier") {
        return runner_frontier::frontier(runs);
    }
    if args.first().map(String::as_str) == Some("frontier-budget") {
        let board = args.get(1).map_or("english", String::as_str);
        return runner_frontier::frontier_budget(board, args.get(2).map(String::as_str));
    }
    if args.first().map(String::as_str) == Some("sliders") {
        return runner_sliders::sliders(runs);
    }
    if args.first().map(String::as_str) == Some("stage-store") {
        return runner_sliders::stage_stores(runs);
    }
    if args.first().map(String::as_str) == Some("defaults") {
        let million = args.iter().any(|a| a == "1m");
        return runner_defaults::defaults(runs, million);
    }
    if args.first().map(String::as_str) == Some("shards") {
        return runner_overhead::shard_cost(runs);
    }
    if args.first().map(String::as_str) == Some("synthetic") {
        let shards = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
        return runner_overhead::synthetic_cost(shards, runs);
    }
    if args.first().map(String::as_str) == Some("hex-large") {
        let side = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(17);
        let places: Vec<&str> = match args.iter().find_map(|a| a.strip_prefix("graph=")) {
            Some(place) => vec![place],
            None => vec!["worker", "stage"],
        };
        let budget = args.iter().find_map(|a| a.strip_prefix("budget="));
        return runner_scale::hex_large(side, args.iter().any(|a| a == "exact"), &places, budget);
    }
    if args.first().map(String::as_str) == Some("replication") {
        let shards = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
        return runner_replication::replication(shards, runs);
    }
    if args.first().map(String::as_str) == Some("restart") {
        let jobs = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(16_000);
        runner_restart::restart_at_scale(jobs, false);
        return runner_restart::restart_at_scale(jobs, true);
    }

    runner_overhead::hex_overhead(runs);
    runner_restart::restart_to_first_report();
}
