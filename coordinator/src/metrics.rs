//! What the coordinator measures: counters and latency histograms of leases,
//! reports and store commits, the wall time of each shard from lease to
//! result, and a once-a-second sample of every job's finished work (the
//! status page's throughput charts). Served by [`crate::http`]; the store's
//! commit histogram is filled by [`crate::store::TimedStore`].
//!
//! A bottom layer: it knows the wire types of `tally-wire` and nothing else
//! of the coordinator.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use tally_wire::lease::LeaseId;
use tally_wire::metrics::{Counter, Histogram};
use tally_wire::proto::Job;

/// Samples of a job's finished work kept for its throughput chart.
const HISTORY_SAMPLES: usize = 600;
/// Jobs whose history is kept (the most recent ones).
const HISTORY_JOBS: usize = 200;

#[derive(Debug, Default)]
pub struct CoordinatorMetrics {
    pub leases_granted: Counter,
    pub leases_expired: Counter,
    pub results_accepted: Counter,
    pub reports_refused: Counter,
    pub work_units_accepted: Counter,
    pub report_latency: Histogram,
    pub shard_seconds: Histogram,
    pub store_commit: Histogram,
    /// Batches applied to the store (each call that changes anything applies
    /// one; a flush makes many durable at once).
    pub store_batches: Counter,
    /// Holds of the scheduler lock or a store flush that passed the
    /// watchdog's warning limit (see `watchdog`).
    pub stalls: Counter,
    lease_started: Mutex<HashMap<LeaseId, Instant>>,
    history: Mutex<HashMap<String, VecDeque<(u64, u64)>>>,
}

impl CoordinatorMetrics {
    pub fn leased(&self, lease: &LeaseId) {
        self.leases_granted.add(1);
        let mut started = self.lease_started.lock();
        // Leases that expire are never removed: bound the map instead.
        if started.len() > 100_000 {
            started.clear();
        }
        started.insert(lease.clone(), Instant::now());
    }

    /// A result for `lease` was accepted: the lease's wall time is the shard's.
    pub fn accepted(&self, lease: &LeaseId, work_units: u64) {
        self.results_accepted.add(1);
        self.work_units_accepted.add(work_units);
        if let Some(t) = self.lease_started.lock().remove(lease) {
            self.shard_seconds.observe(t.elapsed());
        }
    }

    pub fn lease_ended(&self, lease: &LeaseId) {
        self.lease_started.lock().remove(lease);
    }

    /// Records each unfinished job's finished work for its chart.
    pub fn sample(&self, jobs: &[Job], now_ms: u64) {
        let mut history = self.history.lock();
        for job in jobs {
            let samples = history.entry(job.id.clone()).or_default();
            let finished = job.is_finished();
            if finished && samples.back().is_some_and(|&(_, w)| w == job.work_done) {
                continue;
            }
            samples.push_back((now_ms, job.work_done));
            if samples.len() > HISTORY_SAMPLES {
                samples.pop_front();
            }
        }
        if history.len() > HISTORY_JOBS {
            let mut ids: Vec<String> = history.keys().cloned().collect();
            ids.sort();
            for id in &ids[..ids.len() - HISTORY_JOBS] {
                history.remove(id);
            }
        }
    }

    pub fn history(&self, job: &str) -> Vec<(u64, u64)> {
        self.history
            .lock()
            .get(job)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Work units per second over the last `window` of samples, all jobs together.
    pub fn recent_rate(&self, window_ms: u64, now_ms: u64) -> f64 {
        let history = self.history.lock();
        let mut units = 0u64;
        for samples in history.values() {
            let recent: Vec<_> = samples
                .iter()
                .filter(|&&(t, _)| t + window_ms >= now_ms)
                .collect();
            if let (Some(first), Some(last)) = (recent.first(), recent.last()) {
                units += last.1.saturating_sub(first.1);
            }
        }
        units as f64 / (window_ms as f64 / 1000.0)
    }
}
