//! `tally events`: a job's durable event log.

use std::process::ExitCode;

use tally_wire::lease::Attempt;
use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::outln;

/// The events one `Events` call returns at most (the coordinator's page).
const EVENTS_PAGE: usize = 16_384;

/// Prints the job's events, one a line (or all in one JSON object).
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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
