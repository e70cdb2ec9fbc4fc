//! `tally events`: a job's durable event log.

use std::process::ExitCode;

use tally_wire::lease::Attempt;
use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::outln;

/// Prints the job's events, one a line (or all in one JSON object).
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let events = client
        .events(quick(proto::EventsRequest {
            job_id: job_id.to_string(),
            from_sequence: 0,
        }))
        .await?
        .into_inner()
        .events;
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
