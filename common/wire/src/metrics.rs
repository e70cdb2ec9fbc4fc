//! Counters and histograms, and the Prometheus text exposition (format 0.0.4)
//! that the coordinator and the workers serve at `/metrics`. A thin layer over
//! `prometheus-client`: recording is an atomic add for counters and a short
//! lock for histograms, cheap enough for every report and every commit.
//!
//! An [`Exposition`] is built afresh for each scrape from the current values,
//! in the order its metrics are added, and encoded by `prometheus-client`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use prometheus_client::registry::Registry;

/// A monotonically increasing count.
#[derive(Clone, Debug, Default)]
pub struct Counter(prometheus_client::metrics::counter::Counter);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.inc_by(n);
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// Bucket bounds in seconds from 100 µs to about 17 min, a factor of four apart.
pub const SECONDS_BUCKETS: [f64; 12] = [
    0.0001, 0.0004, 0.0016, 0.0064, 0.0256, 0.1024, 0.4096, 1.6384, 6.5536, 26.2144, 104.8576,
    1048.576,
];

/// A histogram of durations over [`SECONDS_BUCKETS`].
#[derive(Clone, Debug)]
pub struct Histogram(PromHistogram);

impl Default for Histogram {
    fn default() -> Self {
        Histogram(PromHistogram::new(SECONDS_BUCKETS))
    }
}

impl Histogram {
    pub fn observe(&self, duration: std::time::Duration) {
        self.0.observe(duration.as_secs_f64());
    }
}

/// One exposition: the metrics of a scrape, in the order they were added.
#[derive(Debug, Default)]
pub struct Exposition {
    metrics: Vec<Metric>,
}

#[derive(Debug)]
struct Metric {
    /// The name as exported; a counter's ends in `_total`.
    name: String,
    help: String,
    value: Value,
}

#[derive(Debug)]
enum Value {
    Counter(u64),
    Gauge(f64),
    /// One sample per value of a single label.
    Labelled(String, Vec<(String, f64)>),
    Histogram(PromHistogram),
}

impl Exposition {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, name: &str, help: &str, value: Value) {
        self.metrics.push(Metric {
            name: name.to_string(),
            help: help.to_string(),
            value,
        });
    }

    /// A counter; `name` is the exported name, `_total` included.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.push(name, help, Value::Counter(value));
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.push(name, help, Value::Gauge(value));
    }

    /// A gauge with one label: `name{label="value"} sample` per entry.
    pub fn labelled_gauge(&mut self, name: &str, help: &str, label: &str, values: &[(&str, f64)]) {
        let values = values.iter().map(|&(v, s)| (v.to_string(), s)).collect();
        self.push(name, help, Value::Labelled(label.to_string(), values));
    }

    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.push(name, help, Value::Histogram(h.0.clone()));
    }

    /// The exposition as Prometheus text.
    pub fn finish(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// The content type of [`Exposition::finish`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for m in &self.metrics {
            match &m.value {
                Value::Counter(v) => {
                    // The encoder appends `_total` to a counter's name.
                    let name = m.name.strip_suffix("_total").unwrap_or(&m.name);
                    encode(&mut encoder, name, &m.help, &ConstCounter::new(*v))?;
                }
                Value::Gauge(v) => encode(&mut encoder, &m.name, &m.help, &ConstGauge::new(*v))?,
                Value::Labelled(label, values) => {
                    let gauge = ConstGauge::new(0.0);
                    let mut family =
                        encoder.encode_descriptor(&m.name, &m.help, None, gauge.metric_type())?;
                    for (value, sample) in values {
                        let labels = [(label.as_str(), value.as_str())];
                        ConstGauge::new(*sample).encode(family.encode_family(&labels)?)?;
                    }
                }
                Value::Histogram(h) => encode(&mut encoder, &m.name, &m.help, h)?,
            }
        }
        Ok(())
    }
}

fn encode(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
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
