//! Everything the CLI prints: job status (text and JSON with stable field
//! names), the job table, results and error lines; the progress bars are
//! `progress`'s.

use std::error::Error as _;
use std::process::ExitCode;

use tally_wire::proto::{Job, JobResult, JobState};
use tally_wire::transport;

mod progress;

pub use progress::ProgressView;

/// `print!` that returns the write's failure instead of panicking on it.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that returns the write's failure instead of panicking on it.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics: a line for a standard error that is
/// closed or whose reader has gone is lost (there is no one to tell), and
/// the exit code still says what happened.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};

/// Standard output's reader has gone (`tally events JOB | head -1`): the
/// command stops and exits quietly with [`READER_GONE_EXIT`].
#[derive(Debug)]
pub struct ReaderGone;

impl std::fmt::Display for ReaderGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for ReaderGone {}

/// 128 + SIGPIPE: what a shell reports for `cat` or `yes` whose reader went
/// away, so `set -o pipefail` treats `tally` as it treats them. The process
/// keeps SIGPIPE ignored (it also serves sockets) and exits with this itself.
pub const READER_GONE_EXIT: u8 = 141;

/// Writes to standard output at once; a closed pipe is [`ReaderGone`].
pub fn write_stdout(text: std::fmt::Arguments) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ReaderGone.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to standard output: {e}")),
    }
}

/// Writes to standard error, ignoring a failure (see [`errln!`]).
pub fn write_stderr(text: std::fmt::Arguments) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// The job as JSON. These field names are a stable interface (docs/cli.md, `status --json`).
pub fn job_json(job: &Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "kind": job.kind,
        "state": job.state_name(),
        "description": job.description,
        "stage": job.stage,
        "stages_total": job.stages_total,
        "shards_done": job.shards_done,
        "shards_total": job.shards_total,
        "shards_leased": job.shards_leased,
        "failed_attempts": job.shards_failed_attempts,
        "work_done": job.work_done,
        "work_total": job.work_total,
        "created_ms": job.created_ms,
        "started_ms": job.started_ms,
        "finished_ms": job.finished_ms,
        "elapsed_ms": job.elapsed_ms,
        "eta_ms": job.eta_ms,
        "answer": job.answer,
        "error": job.error,
        "stages_unknown": job.stages_unknown,
        "waiting": job.waiting,
        "owner": job.owner,
        "slot_seconds": job.slot_seconds,
    })
}

pub fn duration(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

fn percent(done: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * done as f64 / total as f64
    }
}

pub fn status_text(job: &Job) -> String {
    let mut out = format!("{}  {}  {}\n", job.id, job.state_name(), job.description);
    out += &format!(
        "  owner     {} ({:.1} slot-seconds so far)\n",
        job.owner, job.slot_seconds
    );
    // A plan that finds its stages as it goes knows only the stages so far:
    // no total, and no fraction of one.
    if job.stages_unknown {
        out += &format!(
            "  stage     {} so far (the plan finds its stages as it goes)\n",
            job.stage
        );
        out += &format!(
            "  shards    {} done so far, {} leased, {} failed attempt(s)\n",
            job.shards_done, job.shards_leased, job.shards_failed_attempts
        );
        out += &format!("  work      {} done so far\n", job.work_done);
    } else {
        out += &format!("  stage     {} of {}\n", job.stage, job.stages_total);
        out += &format!(
            "  shards    {}/{} done, {} leased, {} failed attempt(s)\n",
            job.shards_done, job.shards_total, job.shards_leased, job.shards_failed_attempts
        );
        out += &format!(
            "  work      {}/{} ({:.1}%)\n",
            job.work_done,
            job.work_total,
            percent(job.work_done, job.work_total)
        );
    }
    let eta = if job.eta_ms > 0 {
        duration(job.eta_ms)
    } else {
        "-".into()
    };
    out += &format!("  elapsed   {}   eta {}\n", duration(job.elapsed_ms), eta);
    if !job.waiting.is_empty() {
        out += &format!("  waiting   {}\n", job.waiting);
    }
    if !job.answer.is_empty() {
        out += &format!("  answer    {}\n", job.answer);
    }
    if !job.error.is_empty() {
        out += &format!("  error     {}\n", job.error);
    }
    out
}

pub fn job_table(jobs: &[Job]) -> String {
    let mut rows = vec![[
        "ID".to_string(),
        "STATE".into(),
        "KIND".into(),
        "OWNER".into(),
        "PROGRESS".into(),
        "ELAPSED".into(),
        "DESCRIPTION".into(),
    ]];
    for job in jobs {
        rows.push([
            job.id.clone(),
            job.state_name().into(),
            job.kind.clone(),
            job.owner.clone(),
            progress(job),
            duration(job.elapsed_ms),
            job.description.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c == 6 {
                    cell.clone()
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        out += line.join("  ").trim_end();
        out.push('\n');
    }
    out
}

/// The progress column of the job table: the share of the work done, or
/// the stage reached when the stage count is not known yet.
fn progress(job: &Job) -> String {
    if job.stages_unknown {
        format!("stage {}", job.stage)
    } else {
        format!("{:.0}%", percent(job.work_done, job.work_total))
    }
}

/// The exit code of a job that failed or was cancelled.
pub const JOB_FAILED_EXIT: u8 = 1;

/// Prints a finished job's answer (last stdout line) or JSON; failed and
/// cancelled jobs exit non-zero with their reason on stderr.
pub fn print_result(job: &Job, result: &JobResult, json: bool) -> anyhow::Result<ExitCode> {
    let state = JobState::try_from(result.state).unwrap_or(JobState::Unspecified);
    if json {
        let mut value = job_json(job);
        value["details"] = if result.details_json.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_str(&result.details_json).unwrap_or(serde_json::Value::Null)
        };
        // A failure under --json carries its exit code, as every other does.
        if state != JobState::Succeeded {
            value["exit_code"] = JOB_FAILED_EXIT.into();
        }
        outln!("{value}")?;
    } else if state == JobState::Succeeded {
        outln!("{}", result.answer)?;
    }
    match state {
        JobState::Succeeded => Ok(ExitCode::SUCCESS),
        JobState::Cancelled => {
            if !json {
                errln!("error: job {} was cancelled", job.id);
            }
            Ok(ExitCode::from(JOB_FAILED_EXIT))
        }
        _ => {
            if !json {
                errln!("error: job {} failed: {}", job.id, result.error);
            }
            Ok(ExitCode::from(JOB_FAILED_EXIT))
        }
    }
}

/// Reports a failure: `error: LINE` on stderr and, under `--json`, one
/// JSON object on stdout too (the contract docs/cli.md states).
pub fn failed(line: &str, code: u8, json: bool) -> ExitCode {
    errln!("error: {line}");
    if json {
        // A reader that has gone is told nothing; the exit code still says it.
        let _ = outln!(
            "{}",
            serde_json::json!({ "error": line, "exit_code": code })
        );
    }
    ExitCode::from(code)
}

/// One line for an error: the gRPC status message without its code noise.
pub fn error_line(e: &anyhow::Error) -> String {
    // A connection failure says only "transport error"; its causes (an
    // unknown CA, a name mismatch, a refused connection) are the news.
    match e.downcast_ref::<tonic::Status>() {
        Some(status) => transport::append_causes(status_line(status), status.source()),
        None => {
            let error: &(dyn std::error::Error + 'static) = e.as_ref();
            transport::append_causes(e.to_string(), error.source())
        }
    }
}

/// A status in words, without its code's noise.
fn status_line(status: &tonic::Status) -> String {
    match status.code() {
        tonic::Code::Unavailable => format!("coordinator unavailable: {}", status.message()),
        tonic::Code::Unauthenticated => format!("not authorised: {}", status.message()),
        // tonic reports its own client-side deadline as Cancelled.
        tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            if status.message().contains("Timeout expired") =>
        {
            "the coordinator did not answer before the call's deadline".to_string()
        }
        _ => status.message().to_string(),
    }
}

/// 2 for bad input, 1 for everything else (docs/cli.md's table).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(status) = e.downcast_ref::<tonic::Status>() {
        return if status.code() == tonic::Code::InvalidArgument {
            2
        } else {
            1
        };
    }
    if let Some(tally_kinds::Error::InvalidArgument(_)) = e.downcast_ref::<tally_kinds::Error>() {
        return 2;
    }
    if let Some(tally_wire::Error::InvalidArgument(_)) = e.downcast_ref::<tally_wire::Error>() {
        return 2;
    }
    // A worker's stage store that fails its check where it answered (a
    // directory it cannot write, a bucket it may not use) is configuration,
    // as it is when the coordinator checks its own.
    if let Some(
        tally_worker::WorkerError::Wire(tally_wire::Error::InvalidArgument(_))
        | tally_worker::WorkerError::Kernel(tally_kinds::Error::InvalidArgument(_))
        | tally_worker::WorkerError::Stage(tally_stage::StageError::InvalidConfig(_))
        | tally_worker::WorkerError::Config(_),
    ) = e.downcast_ref::<tally_worker::WorkerError>()
    {
        return 2;
    }
    if let Some(tally_stage::StageError::InvalidConfig(_)) =
        e.downcast_ref::<tally_stage::StageError>()
    {
        return 2;
    }
    if let Some(tally_coordinator::CoordinatorError::InvalidArgument(_)) =
        e.downcast_ref::<tally_coordinator::CoordinatorError>()
    {
        return 2;
    }
    1
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
