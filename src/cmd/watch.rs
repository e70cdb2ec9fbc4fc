//! `tally watch`: follows a job with a progress bar until it finishes, then
//! prints its answer as `result` does.

use std::process::ExitCode;

use tally_wire::proto;

use crate::client::{Remote, connect, follow, quick};
use crate::output;

/// Follows the job to its end (a progress bar on a terminal), then prints
/// its answer; a job that failed or was cancelled exits 1.
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let job = follow(remote, job_id, !json).await?;
    let mut client = connect(remote).await?;
    let result = client
        .result(quick(proto::ResultRequest {
            job_id: job.id.clone(),
        }))
        .await?
        .into_inner();
    output::print_result(&job, &result, json)
}
