//! `tally whoami`: who the client token stands for; `tally hash-token`: the
//! token's SHA-256 as a users file takes it.

use std::process::ExitCode;

use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::flags::GlobalArgs;
use crate::output::outln;

/// Prints the caller's user, quotas and account.
pub async fn execute(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let me = client
        .who_am_i(quick(proto::WhoAmIRequest {}))
        .await?
        .into_inner();
    let account = me.account.unwrap_or_default();
    let quota = |n: u64| match n {
        0 => "none".to_string(),
        n => n.to_string(),
    };
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "name": me.name, "role": me.role, "weight": me.weight,
                "quotas": {
                    "slots": me.quota_slots, "queued_jobs": me.quota_queued_jobs,
                    "stage_bytes": me.quota_stage_bytes,
                },
                "account": {
                    "slots_held": account.slots_held,
                    "jobs_unfinished": account.jobs_unfinished,
                    "jobs": account.jobs,
                    "slot_seconds": account.slot_seconds,
                    "shards_done": account.shards_done,
                    "stage_bytes": account.stage_bytes,
                    "decayed_slot_seconds": account.decayed_slot_seconds,
                },
            })
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{} ({}), fair-share weight {}", me.name, me.role, me.weight)?;
    outln!(
        "quotas: slots {}, jobs queued or running {}, stage bytes {}",
        quota(me.quota_slots.into()),
        quota(me.quota_queued_jobs.into()),
        quota(me.quota_stage_bytes)
    )?;
    outln!(
        "now: {} slot(s) held, {} job(s) queued or running, {} bytes of stage data",
        account.slots_held,
        account.jobs_unfinished,
        account.stage_bytes
    )?;
    outln!(
        "used: {:.1} slot-seconds, {} shards, over {} job(s) kept ({:.1} slot-seconds with history decayed)",
        account.slot_seconds,
        account.shards_done,
        account.jobs,
        account.decayed_slot_seconds
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Prints `sha256:` and the client token's SHA-256 in hex.
pub fn hash_token(global: &GlobalArgs, json: bool) -> anyhow::Result<ExitCode> {
    let Some(token) = crate::credentials::client_token(global)? else {
        return Err(tally_kinds::invalid!(
            "no client token to hash: give --token-file or TALLY_TOKEN"
        )
        .into());
    };
    let hash = tally_coordinator::users::token_hash_text(&token);
    match json {
        true => outln!("{}", serde_json::json!({ "token_sha256": hash }))?,
        false => outln!("{hash}")?,
    }
    Ok(ExitCode::SUCCESS)
}
