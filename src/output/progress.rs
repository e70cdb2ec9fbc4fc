//! The progress bar of a job followed to its end, on stderr.

use std::time::Duration;

use tally_wire::proto::Job;

use super::{duration, errln};

/// A progress bar on stderr (drawn only on a terminal). It is made when
/// the job is first seen: a bar of no length would draw as full.
pub struct ProgressView {
    /// Where the bar is drawn, until it is made; `None` when disabled.
    target: parking_lot::Mutex<Option<indicatif::ProgressDrawTarget>>,
    bar: std::sync::OnceLock<indicatif::ProgressBar>,
}

impl ProgressView {
    pub fn new(enabled: bool) -> ProgressView {
        let target = enabled.then(|| indicatif::ProgressDrawTarget::stderr_with_hz(4));
        ProgressView {
            target: parking_lot::Mutex::new(target),
            bar: std::sync::OnceLock::new(),
        }
    }

    /// A view drawn on `target`.
    #[cfg(test)]
    pub(super) fn to(target: indicatif::ProgressDrawTarget) -> ProgressView {
        ProgressView {
            target: parking_lot::Mutex::new(Some(target)),
            bar: std::sync::OnceLock::new(),
        }
    }

    /// The bar, made on the first call that may draw it; `None` when disabled.
    fn bar(&self) -> Option<&indicatif::ProgressBar> {
        if let Some(bar) = self.bar.get() {
            return Some(bar);
        }
        let target = self.target.lock().take()?;
        let bar = indicatif::ProgressBar::with_draw_target(None, target);
        bar.set_style(style(false));
        bar.enable_steady_tick(Duration::from_millis(250));
        Some(self.bar.get_or_init(|| bar))
    }

    pub fn update(&self, job: &Job) {
        if let Some(bar) = self.bar() {
            // A job whose stage count is not known yet has no fraction to show.
            if job.stages_unknown {
                bar.unset_length();
            } else {
                bar.set_length(job.work_total.max(1));
            }
            bar.set_style(style(!job.stages_unknown));
            bar.set_position(job.work_done);
            bar.set_prefix(format!("{} {}", job.id, job.state_name()));
            bar.set_message(bar_message(job));
        }
    }

    pub fn note(&self, text: &str) {
        if let Some(bar) = self.bar() {
            bar.set_message(text.to_string());
        }
    }

    pub fn finish(&self, job: &Job) {
        if let Some(bar) = self.bar() {
            self.update(job);
            bar.finish_and_clear();
            errln!(
                "{} {} in {}",
                job.id,
                job.state_name(),
                duration(since_submitted(job))
            );
        }
    }

    pub fn abandon(&self) {
        if let Some(bar) = self.bar.get() {
            bar.abandon();
        }
    }
}

/// How long a finished job took from its submission, its planning and any
/// wait for workers included (`elapsed_ms` counts from the first lease).
pub(super) fn since_submitted(job: &Job) -> u64 {
    match (job.created_ms, job.finished_ms) {
        (created, finished) if created > 0 && finished >= created => finished - created,
        _ => job.elapsed_ms,
    }
}

/// The bar's look: with the bar and the share done when the work's total is
/// known, else a spinner and the message alone.
fn style(fraction_known: bool) -> indicatif::ProgressStyle {
    let template = if fraction_known {
        "{spinner} {prefix} [{bar:30}] {percent:>3}% {msg}"
    } else {
        "{spinner} {prefix} {msg}"
    };
    indicatif::ProgressStyle::with_template(template)
        .expect("valid template")
        .progress_chars("=> ")
}

/// `x` to three significant digits (29.1524 is 29.2, 1234.5 is 1230).
pub(super) fn three_digits(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return "0".into();
    }
    let unit = 10f64.powi(x.log10().floor() as i32 - 2);
    let rounded = (x / unit).round() * unit;
    let decimals = (2 - rounded.log10().floor() as i32).max(0) as usize;
    format!("{rounded:.decimals$}")
}

/// What the bar says beside the bar: the stage, the shards, the rate of
/// the job's run so far, its time and what is left.
fn bar_message(job: &Job) -> String {
    let mut parts = Vec::new();
    if job.stages_unknown {
        parts.push(format!("stage {} so far", job.stage));
        parts.push(format!("shards {} done", job.shards_done));
    } else {
        if job.stages_total > 1 {
            parts.push(format!("stage {} of {}", job.stage, job.stages_total));
        }
        parts.push(format!("shards {}/{}", job.shards_done, job.shards_total));
    }
    if job.elapsed_ms > 0 {
        let rate = job.shards_done as f64 * 1000.0 / job.elapsed_ms as f64;
        parts.push(format!("{} shards/s", three_digits(rate)));
        parts.push(duration(job.elapsed_ms));
    }
    if job.eta_ms > 0 {
        parts.push(format!("eta {}", duration(job.eta_ms)));
    }
    if !job.waiting.is_empty() {
        parts.push(format!("waiting: {}", job.waiting));
    }
    parts.join(", ")
}
