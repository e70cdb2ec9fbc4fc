//! The coordinator's own measurements: counters and histograms the services
//! record into, and each job's recent finished work for the status page's
//! throughput charts. The bottom layer: the store, the services and the HTTP
//! listener all record here, and it imports none of them.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use tally_common::metrics::{Counter, Histogram};
use tally_common::proto::{self, Job};

/// Samples of a job's finished work kept for its throughput chart.
const HISTORY_SAMPLES: usize = 600;
/// Jobs whose history is kept (the most recent ones).
const HISTORY_JOBS: usize = 200;
/// A worker not heard from for this long is shown as lost.
pub const WORKER_LOST_MS: u64 = 10_000;

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
    lease_started: Mutex<HashMap<String, Instant>>,
    history: Mutex<HashMap<String, VecDeque<(u64, u64)>>>,
}

impl CoordinatorMetrics {
    pub fn leased(&self, lease_id: &str) {
        self.leases_granted.add(1);
        let mut started = self.lease_started.lock().unwrap();
        // Leases that expire are never removed: bound the map instead.
        if started.len() > 100_000 {
            started.clear();
        }
        started.insert(lease_id.to_string(), Instant::now());
    }

    /// A result for `lease_id` was accepted: the lease's wall time is the shard's.
    pub fn accepted(&self, lease_id: &str, work_units: u64) {
        self.results_accepted.add(1);
        self.work_units_accepted.add(work_units);
        if let Some(t) = self.lease_started.lock().unwrap().remove(lease_id) {
            self.shard_seconds.observe(t.elapsed());
        }
    }

    pub fn lease_ended(&self, lease_id: &str) {
        self.lease_started.lock().unwrap().remove(lease_id);
    }

    /// Records each unfinished job's finished work for its chart.
    pub(crate) fn sample(&self, jobs: &[Job], now_ms: u64) {
        let mut history = self.history.lock().unwrap();
        for job in jobs {
            let samples = history.entry(job.id.clone()).or_default();
            let finished = is_finished(job);
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

    pub(crate) fn history(&self, job: &str) -> Vec<(u64, u64)> {
        self.history
            .lock()
            .unwrap()
            .get(job)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Work units per second over the last `window` of samples, all jobs together.
    pub(crate) fn recent_rate(&self, window_ms: u64, now_ms: u64) -> f64 {
        let history = self.history.lock().unwrap();
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

pub(crate) fn is_finished(job: &Job) -> bool {
    matches!(
        proto::JobState::try_from(job.state),
        Ok(proto::JobState::Succeeded | proto::JobState::Failed | proto::JobState::Cancelled)
    )
}
