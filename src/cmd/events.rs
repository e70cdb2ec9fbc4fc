//! `tally events`: a job's durable event log, or the audit log.

use std::process::ExitCode;

use tally_wire::lease::Attempt;
use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::outln;

/// The events one `Events` call returns at most (the coordinator's page).
const EVENTS_PAGE: usize = 16_384;

#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// The job id, as printed by submit.
    #[arg(required_unless_present = "audit", conflicts_with = "audit")]
    pub job: Option<String>,
    /// The audit log instead of a job's events.
    #[arg(long)]
    pub audit: bool,
}

/// Prints the job's events (or the audit log), one a line (or all in one
/// JSON object).
pub async fn execute(remote: &Remote, args: &EventsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let job_id = match &args.job {
        Some(job) => job.as_str(),
        None => return audit(remote, json).await,
    };
    let mut client = connect(remote).await?;
    // A response holds a page of the log: ask on until one comes back short.
    let mut events: Vec<proto::Event> = Vec::new();
    loop {
        let from_sequence = events.last().map_or(0, |e| e.sequence + 1);
        let page = client
            .events(quick(proto::EventsRequest {
                job_id: job_id.to_string(),
                from_sequence,
            }))
            .await?
            .into_inner()
            .events;
        let full = page.len() >= EVENTS_PAGE;
        events.extend(page);
        if !full {
            break;
        }
    }
    if json {
        let list: Vec<_> = events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "sequence": e.sequence, "time_ms": e.time_ms, "kind": e.kind,
                    "stage": e.stage, "shard": e.shard, "attempt": e.attempt,
                    "worker_id": e.worker_id, "message": e.message,
                })
            })
            .collect();
        outln!(
            "{}",
            serde_json::json!({ "job_id": job_id, "events": list })
        )?;
    } else {
        for e in &events {
            outln!(
                "{:>6} {:<14} stage {:>4} shard {:>5} attempt {:>5} {} {}",
                e.sequence,
                e.kind,
                e.stage,
                e.shard,
                Attempt(e.attempt).to_string(),
                e.worker_id,
                e.message
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the audit log, one entry a line (or all in one JSON object).
async fn audit(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let mut entries: Vec<proto::AuditEntry> = Vec::new();
    let mut from_sequence = 0;
    loop {
        let page = client
            .audit(quick(proto::AuditRequest { from_sequence }))
            .await?
            .into_inner()
            .entries;
        let full = page.len() >= EVENTS_PAGE;
        // A user's page skips others' entries: go on after the last one read.
        from_sequence = page.last().map_or(from_sequence, |e| e.sequence + 1);
        entries.extend(page);
        if !full {
            break;
        }
    }
    if json {
        let list: Vec<_> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "sequence": e.sequence, "time_ms": e.time_ms, "user": e.user,
                    "action": e.action, "job_id": e.job_id, "done": e.done,
                    "message": e.message,
                })
            })
            .collect();
        outln!("{}", serde_json::json!({ "audit": list }))?;
    } else {
        for e in &entries {
            outln!(
                "{:>6} {} {:<12} {:<8} {:<8} {:<12} {}",
                e.sequence,
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.time_ms)
                ),
                e.user,
                e.action,
                if e.done { "done" } else { "REFUSED" },
                e.job_id,
                e.message
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
