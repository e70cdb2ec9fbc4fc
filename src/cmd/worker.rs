//! `tally worker`: leases shards from a coordinator and computes them until
//! SIGINT or SIGTERM, then drains.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tally_worker::WorkerConfig;

use crate::client::Remote;
use crate::flags::{MAX_THREADS, count_to};
use crate::output::errln;
use crate::signals::shutdown_signal;

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Shards computed at the same time, 1 to 1024 (default: the compute threads).
    #[arg(long, value_parser = count_to(MAX_THREADS))]
    pub slots: Option<usize>,
    /// Compute threads, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = count_to(MAX_THREADS))]
    pub threads: Option<usize>,
    /// Worker id (default: host-pid-random).
    #[arg(long)]
    pub id: Option<String>,
    /// Seconds a drain takes at most after SIGTERM: running shards are asked
    /// for a checkpoint at once and hand their leases back with it (or finish);
    /// those still running then are handed back. With the 5 s the last reports
    /// get, the default stays within Kubernetes' 30 s grace period.
    #[arg(long, default_value_t = 20)]
    pub drain_seconds: u64,
    /// Fault injection for tests: hold each lease this long before computing.
    #[arg(long, default_value_t = 0, hide = true)]
    pub shard_delay_ms: u64,
    /// Fault injection for tests: the process aborts, as one the kernel kills
    /// for lack of memory, when it starts a shard whose stage needs more than
    /// this many bytes a worker.
    #[arg(long, hide = true)]
    pub fault_die_above_bytes: Option<u64>,
    /// Milliseconds between checkpoints of a long shard (for checkpoints up
    /// to 4 MiB; larger ones, such as hex pass vectors, come proportionally
    /// less often, but at least once a minute for each GB). At least 10.
    #[arg(long, default_value_t = 3000, value_parser = at_least(10))]
    pub checkpoint_ms: u64,
    /// Fault injection for tests: alter every result before reporting it.
    #[arg(long, hide = true)]
    pub corrupt_results: bool,
    /// Fault injection for tests: stall a shard this long after its first checkpoint.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_after_checkpoint_ms: u64,
    /// Fault injection for tests: write each stage blob in two parts, pausing this long between them.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_mid_upload_ms: u64,
    /// Address to serve Prometheus `/metrics` on.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Memory the worker's shards may use, e.g. `16GB` or `12GiB`, told to the
    /// coordinator: it gives this worker only as many shards of a job at once
    /// as their estimate fits, and cuts hex points shards to the largest
    /// budget. Default: the machine's memory (or its cgroup's limit).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory_budget: Option<u64>,
    /// Where shards that outgrow their share of the budget (the budget over
    /// the slots) write sorted runs to merge; removed as each shard ends, and
    /// swept of the runs of workers that died. Default: `tally-spill` in the
    /// temporary directory.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<std::path::PathBuf>,
    /// The most bytes this worker's files in its spill directory hold at
    /// once (its share of the disk, or its container's ephemeral storage),
    /// e.g. `20GiB`. A shard that would pass it, or that finds the disk
    /// full, stops and is tried again 30 s later (here or on another
    /// worker) instead of failing its job, whose `waiting` line says why.
    /// Default: no limit but the disk's.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub spill_limit: Option<u64>,
    /// Run `wasm` jobs: user kernels compiled to WebAssembly, in a sandbox
    /// (no files, network, clock or randomness; memory, fuel and time
    /// limited). Off by default: a module is code whoever may submit jobs
    /// wrote, so the operator chooses the machines that run it.
    #[arg(long)]
    pub allow_wasm: bool,
    /// With --allow-wasm: the fuel a shard may burn (about one unit per
    /// WebAssembly instruction), its CPU-time limit [default: 2^44].
    #[arg(long, value_name = "UNITS", requires = "allow_wasm", value_parser = at_least(1))]
    pub wasm_fuel: Option<u64>,
    /// With --allow-wasm: the most linear memory one shard's instance may
    /// have, e.g. `512MiB` [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, requires = "allow_wasm")]
    pub wasm_memory: Option<u64>,
}

/// A memory size such as `16GB`, `12GiB` or `800MB`, in bytes; at least 64 MB.
pub(crate) fn parse_memory(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("{e} (a size such as 16GB, 12GiB or 800MB)"))?;
    if size.as_u64() < 64_000_000 {
        return Err(format!("{text} is less than the 64 MB a worker needs"));
    }
    Ok(size.as_u64())
}

/// A number of at least `min`, refused by the parser otherwise.
fn at_least(min: u64) -> impl clap::builder::TypedValueParser<Value = u64> {
    use clap::builder::TypedValueParser;
    clap::value_parser!(u64).try_map(move |n| {
        (n >= min)
            .then_some(n)
            .ok_or_else(|| format!("must be at least {min}"))
    })
}

/// Serves the coordinator of `remote` until SIGINT or SIGTERM.
pub async fn execute(args: &WorkerArgs, remote: Remote) -> anyhow::Result<ExitCode> {
    let shutdown = shutdown_signal()?;
    let config = worker_config(args, remote)?;
    errln!(
        "worker {} serving {} with {} slot(s), {} thread(s), a memory budget of {}",
        config.worker_id,
        tally_wire::transport::without_userinfo(&config.coordinator),
        config.slots,
        config.threads,
        tally_kinds::kind::format_bytes(config.memory_budget)
    );
    let stats = tally_worker::run(config, shutdown).await?;
    tracing::info!(
        completed = stats
            .shards_completed
            .load(std::sync::atomic::Ordering::Relaxed),
        "worker stopped"
    );
    Ok(ExitCode::SUCCESS)
}

/// The worker's configuration: its defaults, under the flags given; with
/// `--allow-wasm`, the sandbox its shards of user kernels run in.
fn worker_config(args: &WorkerArgs, remote: Remote) -> anyhow::Result<WorkerConfig> {
    let mut config = WorkerConfig::new(remote.url);
    config.security = remote.security;
    if let Some(threads) = args.threads {
        config.threads = threads;
        config.slots = threads;
    }
    if let Some(slots) = args.slots {
        config.slots = slots;
    }
    if let Some(id) = &args.id {
        config.worker_id = id.clone();
    }
    config.drain_timeout = Duration::from_secs(args.drain_seconds);
    config.shard_delay = Duration::from_millis(args.shard_delay_ms);
    config.die_above_bytes = args.fault_die_above_bytes;
    config.corrupt_results = args.corrupt_results;
    config.pause_after_checkpoint = Duration::from_millis(args.pause_after_checkpoint_ms);
    config.pause_mid_upload = Duration::from_millis(args.pause_mid_upload_ms);
    config.http = args.http;
    config.allow_wasm = args.allow_wasm;
    if args.allow_wasm {
        let mut limits = tally_wasm::Limits::default();
        if let Some(fuel) = args.wasm_fuel {
            limits.fuel = fuel;
        }
        if let Some(memory) = args.wasm_memory {
            limits.memory_bytes = usize::try_from(memory).unwrap_or(usize::MAX);
        }
        let sandbox = tally_wasm::GuestSandbox::new(limits)?;
        config.kernel_cache.set_guest_runtime(Arc::new(sandbox));
    }
    if let Some(budget) = args.memory_budget {
        config.memory_budget = budget;
    }
    if let Some(why) = tally_worker::budget_refusal(config.memory_budget, config.slots) {
        return Err(tally_kinds::invalid!("--memory-budget {why}").into());
    }
    config.peak_budget = Some(config.memory_budget);
    if let Some(dir) = &args.spill_dir {
        config.spill_dir = dir.clone();
    }
    config.spill_limit = args.spill_limit;
    config.checkpoint_interval = Duration::from_millis(args.checkpoint_ms);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::parse_memory;

    #[test]
    fn memory_sizes_parse_in_decimal_and_binary_units_and_tiny_ones_are_refused() {
        assert_eq!(parse_memory("16GB"), Ok(16_000_000_000));
        assert_eq!(parse_memory("12GiB"), Ok(12 << 30));
        assert_eq!(parse_memory("800 MB"), Ok(800_000_000));
        let tiny = parse_memory("1MB").unwrap_err();
        assert!(tiny.contains("less than the 64 MB"), "{tiny}");
        let bad = parse_memory("lots").unwrap_err();
        assert!(bad.contains("a size such as"), "{bad}");
    }
}
