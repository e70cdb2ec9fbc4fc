//! `tally cancel`: cancels a queued or running job.

use std::process::ExitCode;

use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::{self, outln};

/// Cancels the job and prints its state.
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let job = client
        .cancel(quick(proto::CancelRequest {
            job_id: job_id.to_string(),
        }))
        .await?
        .into_inner();
    if json {
        outln!("{}", output::job_json(&job))?;
    } else {
        outln!("{} {}", job.id, job.state_name())?;
    }
    Ok(ExitCode::SUCCESS)
}
