//! The worker's counters and their Prometheus text; the HTTP listener that
//! serves them is in `http`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tally_wire::metrics::{Counter, Exposition, Histogram};

/// Counters of one worker's life, returned when it stops.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub shards_completed: AtomicU64,
    pub shards_failed: AtomicU64,
    pub shards_abandoned: AtomicU64,
    /// Wall time of shards that finished, from lease to result.
    pub compute_seconds: Histogram,
    /// Work units of finished shards.
    pub work_units: Counter,
    /// Stage blobs found missing or damaged and computed again.
    pub blobs_recomputed: AtomicU64,
    /// Stage outputs this worker computed and read again from its own copy.
    pub own_outputs_reused: AtomicU64,
    /// Packs of stage outputs written (each the outputs of one report
    /// batch's shards of one stage), and the outputs in them.
    pub packs_written: AtomicU64,
    pub outputs_packed: AtomicU64,
    /// Bytes shards wrote to the spill directory past their memory share.
    pub spilled_bytes: Counter,
    /// Bytes of stage input kept in files of the spill directory, being
    /// larger than a quarter of their shard's memory share.
    pub input_in_files_bytes: Counter,
    /// Bytes of stage output written to the spill directory and sent from
    /// there, by shards that spilled.
    pub output_in_files_bytes: Counter,
    /// Calls the coordinator did not answer: unreachable, or past their
    /// deadline.
    pub calls_not_answered: AtomicU64,
    /// Times the coordinator went without answering long enough for the
    /// worker to say so (see `calls`).
    pub coordinator_silences: AtomicU64,
}

impl WorkerStats {
    pub(crate) fn record_completed(&self, wall_time: Duration, work_units: u64) {
        self.shards_completed.fetch_add(1, Ordering::Relaxed);
        self.compute_seconds.observe(wall_time);
        self.work_units.add(work_units);
    }

    pub(crate) fn record_failed(&self) {
        self.shards_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A shard handed back or stopped (revoked, drained).
    pub(crate) fn record_abandoned(&self) {
        self.shards_abandoned.fetch_add(1, Ordering::Relaxed);
    }
}

/// The worker's state now, beside its counters.
pub(crate) struct Gauges {
    pub active_shards: usize,
    pub slots: usize,
    /// Work units done so far by the running shards.
    pub work_in_progress: u64,
    /// The memory budget, and the process's peak resident memory (where
    /// the system says).
    pub memory_budget: u64,
    pub memory_peak: Option<u64>,
    /// Bytes the worker's files in its spill directory hold now and at
    /// most, and their limit (`--spill-limit`).
    pub spill_in_use: u64,
    pub spill_peak: u64,
    pub spill_limit: Option<u64>,
}

/// The Prometheus text exposition of `stats` and `gauges`.
pub(crate) fn exposition(stats: &WorkerStats, gauges: &Gauges) -> String {
    let mut e = Exposition::new();
    e.counter(
        "tally_worker_shards_completed_total",
        "Shards this worker finished and reported.",
        stats.shards_completed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_shards_failed_total",
        "Shards that failed on this worker.",
        stats.shards_failed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_shards_abandoned_total",
        "Shards handed back or stopped (revoked, drained).",
        stats.shards_abandoned.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_work_units_total",
        "Work units of finished shards.",
        stats.work_units.get(),
    );
    e.counter(
        "tally_worker_stage_blobs_recomputed_total",
        "Stage blobs found missing or damaged in the stage store and computed again.",
        stats.blobs_recomputed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_stage_outputs_reused_total",
        "Stage outputs this worker computed and read again from its own copy instead of fetching them.",
        stats.own_outputs_reused.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_stage_packs_written_total",
        "Packs written to the stage store, each holding the stage outputs of one report batch.",
        stats.packs_written.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_stage_outputs_packed_total",
        "Stage outputs written in packs rather than sent inline to the coordinator.",
        stats.outputs_packed.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_spilled_bytes_total",
        "Bytes shards wrote to the spill directory past their memory share.",
        stats.spilled_bytes.get(),
    );
    e.counter(
        "tally_worker_stage_input_in_files_bytes_total",
        "Bytes of stage input kept in the spill directory instead of memory, past a quarter of the shard's memory share.",
        stats.input_in_files_bytes.get(),
    );
    e.counter(
        "tally_worker_stage_output_in_files_bytes_total",
        "Bytes of stage output written to the spill directory and sent from there, by shards that spilled.",
        stats.output_in_files_bytes.get(),
    );
    e.counter(
        "tally_worker_calls_not_answered_total",
        "Calls to the coordinator that found it unreachable or were not answered within their deadline.",
        stats.calls_not_answered.load(Ordering::Relaxed),
    );
    e.counter(
        "tally_worker_coordinator_silences_total",
        "Times the coordinator went without answering this worker for longer than the silence notice.",
        stats.coordinator_silences.load(Ordering::Relaxed),
    );
    e.gauge(
        "tally_worker_active_shards",
        "Shards running now.",
        gauges.active_shards as f64,
    );
    e.gauge(
        "tally_worker_slots",
        "Shards this worker runs at once.",
        gauges.slots as f64,
    );
    e.gauge(
        "tally_worker_work_in_progress",
        "Work units done so far by the running shards.",
        gauges.work_in_progress as f64,
    );
    e.gauge(
        "tally_worker_memory_budget_bytes",
        "The memory this worker's shards may use (--memory-budget).",
        gauges.memory_budget as f64,
    );
    if let Some(peak) = gauges.memory_peak {
        e.gauge(
            "tally_worker_memory_peak_bytes",
            "The most resident memory this worker's process has held (VmHWM), to set beside its budget.",
            peak as f64,
        );
    }
    e.gauge(
        "tally_worker_spill_bytes",
        "Bytes this worker's files in its spill directory hold now.",
        gauges.spill_in_use as f64,
    );
    e.gauge(
        "tally_worker_spill_peak_bytes",
        "The most bytes this worker's files in its spill directory have held at once.",
        gauges.spill_peak as f64,
    );
    if let Some(limit) = gauges.spill_limit {
        e.gauge(
            "tally_worker_spill_limit_bytes",
            "The most bytes this worker's spill files may hold at once (--spill-limit).",
            limit as f64,
        );
    }
    e.histogram(
        "tally_worker_shard_compute_seconds",
        "Wall time of finished shards.",
        &stats.compute_seconds,
    );
    e.finish()
}
