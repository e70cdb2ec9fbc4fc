//! What a worker is told: where the coordinator is, how much to run at once,
//! and the fault injection the reliability tests use.

use std::sync::Arc;
use std::time::Duration;

use tally_kinds::cache::KernelCache;
use tally_kinds::kind::CHECKPOINT_EVERY;
use tally_wire::transport::ClientSecurity;

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub coordinator: String,
    /// Shards run at the same time.
    pub slots: usize,
    /// Threads of the compute pool.
    pub threads: usize,
    /// Stable identity across reconnects.
    pub worker_id: String,
    /// How long a lease request waits for work.
    pub lease_wait: Duration,
    /// On shutdown, how long running shards may take to checkpoint (and hand
    /// their leases back with it) or finish before they are handed back.
    pub drain_timeout: Duration,
    /// Fault injection: wait this long before computing each shard (holding its
    /// lease), so tests can kill a worker that is surely mid-shard.
    pub shard_delay: Duration,
    /// Fault injection: abort the process, as the kernel kills one that runs
    /// out of memory, when a shard's stage needs more than this a worker
    /// (tests of the placement of shards that kill their workers). Never set
    /// on in-process workers: it ends the whole process.
    pub die_above_bytes: Option<u64>,
    /// Fault injection: alter every result before reporting it, as a faulty
    /// machine would (tests of the checks that must catch it).
    pub corrupt_results: bool,
    /// Fault injection: after a shard's first checkpoint is handed to the
    /// forwarder, stall its computation this long (holding the lease), so tests
    /// can kill a worker that has surely checkpointed mid-shard.
    pub pause_after_checkpoint: Duration,
    /// Fault injection: write each stage blob in two parts, pausing this long
    /// between them, so tests can kill a worker that is surely mid-upload.
    pub pause_mid_upload: Duration,
    /// The cache of per-job structures (slider graphs, hex graphs); a worker in
    /// the coordinator's process shares the coordinator's.
    pub kernel_cache: Arc<KernelCache>,
    /// How often a long shard sends a resumable checkpoint.
    pub checkpoint_interval: Duration,
    /// The bearer token and TLS material presented to the coordinator.
    pub security: ClientSecurity,
    /// Where to serve Prometheus `/metrics` over HTTP, if anywhere.
    pub http: Option<std::net::SocketAddr>,
    /// The memory shards may use, in bytes, advertised at registration: the
    /// coordinator gives this worker only as many shards of a job at once as
    /// their estimate fits in it.
    pub memory_budget: u64,
    /// The budget the process's peak resident memory is held to: past it
    /// the worker says so in its log (once, and again each time the peak
    /// grows by a tenth). `tally worker` gives its memory budget; `tally
    /// run` its whole budget to its first in-process worker (they share the
    /// process with the coordinator); none by default.
    pub peak_budget: Option<u64>,
    /// Where shards that outgrow their share of `memory_budget` write their
    /// sorted runs (a directory per worker inside it, see `spill`).
    pub spill_dir: std::path::PathBuf,
    /// The most bytes this worker's files in `spill_dir` hold at once (its
    /// share of a disk, or a container's ephemeral storage): a shard that
    /// would pass it, or that finds the disk full, stops and waits to be
    /// tried again instead of failing its job. `None`: the disk's room.
    pub spill_limit: Option<u64>,
    /// Run user kernels compiled to WebAssembly (`wasm` jobs), in the
    /// sandbox `kernel_cache` holds: whoever starts the worker puts it there
    /// with its limits (`KernelCache::set_guest_runtime`), and the worker
    /// refuses to start without one. Off by default: such a module is code
    /// anyone who may submit jobs wrote, and the operator decides which
    /// machines run it.
    pub allow_wasm: bool,
}

impl WorkerConfig {
    pub fn new(coordinator: impl Into<String>) -> Self {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        WorkerConfig {
            coordinator: coordinator.into(),
            slots: threads,
            threads,
            worker_id: default_worker_id(),
            lease_wait: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(20),
            shard_delay: Duration::ZERO,
            die_above_bytes: None,
            corrupt_results: false,
            pause_after_checkpoint: Duration::ZERO,
            pause_mid_upload: Duration::ZERO,
            kernel_cache: Arc::new(KernelCache::new()),
            checkpoint_interval: CHECKPOINT_EVERY,
            security: ClientSecurity::default(),
            http: None,
            memory_budget: machine_memory(),
            peak_budget: None,
            spill_dir: default_spill_dir(),
            spill_limit: None,
            allow_wasm: false,
        }
    }
}

/// The spill directory by default: beside the other temporary files.
pub fn default_spill_dir() -> std::path::PathBuf {
    std::env::temp_dir().join("tally-spill")
}

/// The memory this process may use: the machine's (`MemTotal`), or its
/// cgroup's limit when lower (a container); the default a worker is assumed
/// to have when neither can be read.
pub fn machine_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    // cgroup v2, then v1 (which says "no limit" with a huge number).
    let limit = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    match (total, limit) {
        (Some(total), Some(limit)) => total.min(limit),
        (Some(total), None) => total,
        (None, Some(limit)) => limit,
        (None, None) => tally_kinds::kind::WORKER_MEMORY_BUDGET,
    }
}

/// `<host>-<pid>-<random>`: unique per process, readable in logs.
pub fn default_worker_id() -> String {
    let host = hostname();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}-{}-{:05x}", std::process::id(), nanos & 0xfffff)
}

/// The processes of this process's cgroup the kernel killed for lack of
/// memory (`oom_kill` of cgroup v2's `memory.events`, or of v1's
/// `memory.oom_control`); 0 where neither can be read.
pub(crate) fn oom_kills() -> u64 {
    [
        "/sys/fs/cgroup/memory.events",
        "/sys/fs/cgroup/memory/memory.oom_control",
    ]
    .iter()
    .find_map(|path| {
        let text = std::fs::read_to_string(path).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))?
            .trim()
            .parse()
            .ok()
    })
    .unwrap_or(0)
}

/// A random id of this run of a worker, kept across its reconnects: a
/// registration with another one is a new process (see the proto's
/// `incarnation`).
pub(crate) fn new_incarnation() -> String {
    use std::hash::BuildHasher;
    let seed = std::hash::RandomState::new();
    format!("{:016x}", seed.hash_one(std::process::id()))
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_string())
}
