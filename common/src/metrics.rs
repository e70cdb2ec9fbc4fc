//! Counters and histograms in the Prometheus text exposition format, shared by
//! the coordinator and the workers. Plain atomics: recording never blocks and
//! never allocates, so it is cheap enough for every report and every commit.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bucket bounds in seconds from 100 µs to about 17 min, a factor of four apart.
pub const SECONDS_BUCKETS: [f64; 12] = [
    0.0001, 0.0004, 0.0016, 0.0064, 0.0256, 0.1024, 0.4096, 1.6384, 6.5536, 26.2144, 104.8576,
    1048.576,
];

/// A histogram of durations with fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; SECONDS_BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, duration: std::time::Duration) {
        let seconds = duration.as_secs_f64();
        // Counts are per bucket, not cumulative; exposition accumulates them.
        if let Some(i) = SECONDS_BUCKETS.iter().position(|&b| seconds <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            duration.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Builds one exposition: `# HELP`, `# TYPE` and samples, metric by metric.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, "counter", help);
        let _ = writeln!(self.text, "{name} {value}");
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        let _ = writeln!(self.text, "{name} {value}");
    }

    /// A gauge with one label: `name{label="value"} sample` per entry.
    pub fn labelled_gauge(&mut self, name: &str, help: &str, label: &str, values: &[(&str, f64)]) {
        self.header(name, "gauge", help);
        for (value_of_label, sample) in values {
            let _ = writeln!(
                self.text,
                "{name}{{{label}=\"{}\"}} {sample}",
                escape_label(value_of_label)
            );
        }
    }

    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, "histogram", help);
        let mut cumulative = 0;
        for (bound, bucket) in SECONDS_BUCKETS.iter().zip(&h.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(self.text, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(self.text, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(self.text, "{name}_sum {sum}");
        let _ = writeln!(self.text, "{name}_count {count}");
    }

    pub fn finish(self) -> String {
        self.text
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn histogram_buckets_are_cumulative_and_count_everything() {
        let h = Histogram::default();
        for micros in [50, 300, 300, 2_000_000, 5_000_000_000] {
            h.observe(Duration::from_micros(micros));
        }
        let mut e = Exposition::new();
        e.histogram("t_seconds", "test", &h);
        let text = e.finish();
        let sample = |key: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key).map(|v| v.trim().parse().unwrap()))
                .unwrap_or_else(|| panic!("{key} missing in\n{text}"))
        };
        assert_eq!(sample("t_seconds_bucket{le=\"0.0001\"}"), 1.0);
        assert_eq!(sample("t_seconds_bucket{le=\"0.0004\"}"), 3.0);
        assert_eq!(sample("t_seconds_bucket{le=\"6.5536\"}"), 4.0);
        assert_eq!(sample("t_seconds_bucket{le=\"1048.576\"}"), 4.0);
        assert_eq!(sample("t_seconds_bucket{le=\"+Inf\"}"), 5.0);
        assert_eq!(sample("t_seconds_count"), 5.0);
        let sum = sample("t_seconds_sum");
        assert!((sum - 5002.00065).abs() < 1e-6, "{sum}");
        assert!(text.contains("# TYPE t_seconds histogram"));
    }

    #[test]
    fn labels_are_escaped() {
        let mut e = Exposition::new();
        e.labelled_gauge("g", "help", "job", &[("a\"b\\c", 1.0)]);
        assert!(e.finish().contains("g{job=\"a\\\"b\\\\c\"} 1"));
    }
}
