//! `tally status`: a job's state, progress, elapsed time and ETA.

use std::process::ExitCode;

use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::{self, out, outln};

/// Prints the job's status: text, or the job as JSON.
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let job = client
        .get(quick(proto::GetJobRequest {
            job_id: job_id.to_string(),
        }))
        .await?
        .into_inner();
    if json {
        outln!("{}", output::job_json(&job))?;
    } else {
        out!("{}", output::status_text(&job))?;
    }
    Ok(ExitCode::SUCCESS)
}
