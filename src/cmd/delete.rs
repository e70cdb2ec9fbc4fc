//! `tally delete`: deletes a finished job and everything it stored.

use std::process::ExitCode;

use clap::Args;
use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::outln;

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The job id, as printed by submit.
    pub job: String,
    /// Cancel the job first if it is queued or running.
    #[arg(long)]
    pub force: bool,
}

/// Deletes the job and prints how much the store shrank.
pub async fn execute(remote: &Remote, args: &DeleteArgs, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let deleted = client
        .delete(quick(proto::DeleteRequest {
            job_id: args.job.clone(),
            force: args.force,
        }))
        .await?
        .into_inner();
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "job_id": deleted.job_id,
                "deleted": true,
                "store_bytes_before": deleted.store_bytes_before,
                "store_bytes_after": deleted.store_bytes_after,
            })
        )?;
    } else {
        outln!(
            "{} deleted (store {} -> {} bytes)",
            deleted.job_id,
            deleted.store_bytes_before,
            deleted.store_bytes_after
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
