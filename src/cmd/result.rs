//! `tally result`: a finished job's answer.

use std::process::ExitCode;

use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output;

/// Prints the answer of a finished job; a job that failed or was cancelled
/// exits 1.
pub async fn execute(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let job = client
        .get(quick(proto::GetJobRequest {
            job_id: job_id.to_string(),
        }))
        .await?
        .into_inner();
    let result = client
        .result(quick(proto::ResultRequest {
            job_id: job_id.to_string(),
        }))
        .await?
        .into_inner();
    output::print_result(&job, &result, json)
}
