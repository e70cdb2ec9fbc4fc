//! What the CLI prints of a job: the status text, the table, the JSON and
//! the progress bar, drawn on a screen kept in memory.

use parking_lot::Mutex;
use std::sync::Arc;

use indicatif::{ProgressDrawTarget, TermLike};
use tally_wire::proto::{Job, JobState};

use super::progress::{since_submitted, three_digits};
use super::*;

/// A terminal that keeps what is drawn on it.
#[derive(Clone, Debug, Default)]
struct Screen(Arc<Mutex<String>>);

impl Screen {
    fn target(&self) -> ProgressDrawTarget {
        ProgressDrawTarget::term_like(Box::new(self.clone()))
    }

    fn text(&self) -> String {
        self.0.lock().clone()
    }
}

impl TermLike for Screen {
    fn width(&self) -> u16 {
        200
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.lock().push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

fn job(state: JobState) -> Job {
    Job {
        id: "job-000007".into(),
        kind: "kayles".into(),
        state: state as i32,
        description: "kayles 100 pins, 9 digits".into(),
        stage: 1,
        stages_total: 1,
        shards_total: 16,
        work_total: 20_800,
        ..Job::default()
    }
}

/// A frontier search at its level 398, with about 1,000 levels to go.
fn frontier_mid_way() -> Job {
    Job {
        kind: "blocks".into(),
        description: "blocks euler-766 (3 buckets per layer)".into(),
        stage: 398,
        stages_total: 398,
        shards_done: 1_191,
        shards_total: 1_194,
        work_done: 997,
        work_total: 1_000,
        elapsed_ms: 60_000,
        stages_unknown: true,
        ..job(JobState::Running)
    }
}

#[test]
fn the_bar_shows_no_fraction_before_the_job_is_seen() {
    let screen = Screen::default();
    let view = ProgressView::to(screen.target());
    view.note("waiting for the coordinator: connection refused");
    assert!(!screen.text().contains('%'), "{}", screen.text());
    view.update(&job(JobState::Queued));
    let text = screen.text();
    assert!(text.contains("0%") && !text.contains("100%"), "{text}");
}

#[test]
fn the_bar_rounds_its_rate_and_names_the_unit() {
    let screen = Screen::default();
    let view = ProgressView::to(screen.target());
    view.update(&Job {
        shards_done: 35,
        shards_total: 100,
        work_done: 2_000,
        elapsed_ms: 1_200,
        ..job(JobState::Running)
    });
    let text = screen.text();
    assert!(text.contains("29.2 shards/s"), "{text}");
    assert!(!text.contains("29.16"), "{text}");
}

/// A plan that finds its stages as it goes claims no fraction of them.
#[test]
fn a_job_of_stages_not_known_yet_claims_no_fraction() {
    let job = frontier_mid_way();
    let status = status_text(&job);
    assert!(!status.contains("398/398"), "{status}");
    assert!(!status.contains("99.7"), "{status}");
    assert!(status.contains("stage     398 so far"), "{status}");
    let table = job_table(std::slice::from_ref(&job));
    assert!(!table.contains('%'), "{table}");
    assert!(table.contains("stage 398"), "{table}");
    let screen = Screen::default();
    let view = ProgressView::to(screen.target());
    view.update(&job);
    let text = screen.text();
    assert!(!text.contains('%') && text.contains("stage 398"), "{text}");
    assert_eq!(job_json(&job)["stages_unknown"], true);
}

#[test]
fn a_waiting_job_says_why() {
    let job = Job {
        waiting: "no worker is connected".into(),
        ..job(JobState::Queued)
    };
    let status = status_text(&job);
    assert!(
        status.contains("  waiting   no worker is connected\n"),
        "{status}"
    );
    assert_eq!(job_json(&job)["waiting"], "no worker is connected");
}

#[test]
fn rates_keep_three_significant_digits() {
    for (x, shown) in [
        (29.1524, "29.2"),
        (1234.5, "1230"),
        (9.996, "10.0"),
        (0.012345, "0.0123"),
        (0.0, "0"),
        (f64::INFINITY, "0"),
    ] {
        assert_eq!(three_digits(x), shown, "{x}");
    }
}

#[test]
fn bad_input_exits_2_whichever_layer_refused_it() {
    let bad: Vec<anyhow::Error> = vec![
        tonic::Status::invalid_argument("x").into(),
        tally_kinds::Error::InvalidArgument("x".into()).into(),
        tally_wire::Error::InvalidArgument("x".into()).into(),
        tally_coordinator::CoordinatorError::InvalidArgument("x".into()).into(),
        tally_worker::WorkerError::Wire(tally_wire::Error::InvalidArgument("x".into())).into(),
        tally_worker::WorkerError::Kernel(tally_kinds::Error::InvalidArgument("x".into())).into(),
        tally_worker::WorkerError::Config("x".into()).into(),
        // A worker that refuses the stage store it was told of.
        tally_worker::WorkerError::Stage(tally_stage::StageError::InvalidConfig("x".into())).into(),
        // So wrapped, as `run` says which of its workers stopped.
        anyhow::Error::from(tally_worker::WorkerError::Config("x".into()))
            .context("an in-process worker stopped"),
    ];
    for e in &bad {
        assert_eq!(exit_code(e), 2, "{e}");
    }
    let other: Vec<anyhow::Error> = vec![
        tonic::Status::unavailable("x").into(),
        tally_kinds::Error::Internal("x".into()).into(),
        anyhow::anyhow!("x"),
        // A stage store that never answered may answer later.
        tally_worker::WorkerError::Stage(tally_stage::StageError::Unavailable("x".into())).into(),
    ];
    for e in &other {
        assert_eq!(exit_code(e), 1, "{e}");
    }
}

/// The line a followed job ends with counts from its submission: a sliders
/// job planned for 2.9 s and computed in 0.1 s took 3.0 s, not 0.1 s.
#[test]
fn a_finished_job_took_the_time_since_its_submission() {
    let planned_long = Job {
        created_ms: 1_000_000,
        started_ms: 1_002_900,
        finished_ms: 1_003_000,
        elapsed_ms: 100,
        ..job(JobState::Succeeded)
    };
    assert_eq!(duration(since_submitted(&planned_long)), "3.0s");
    // A job record without its times (an older coordinator's) keeps the
    // time since its first lease.
    let unknown = Job {
        elapsed_ms: 100,
        ..job(JobState::Succeeded)
    };
    assert_eq!(duration(since_submitted(&unknown)), "0.1s");
}
