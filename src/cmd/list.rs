//! `tally list`: jobs in submission order, a page at a time (or all).

use std::process::ExitCode;

use clap::Args;
use tally_wire::proto;

use crate::client::{Remote, connect, quick};
use crate::output::{self, out, outln};

/// The most jobs a page holds: the coordinator's limit, checked before
/// connecting.
const MAX_LIMIT: i64 = tally_coordinator::scheduler::MAX_PAGE as i64;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Jobs per page, 1 to 1000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT))]
    pub limit: u32,
    /// Start after this page: the token a previous page printed.
    #[arg(long, value_name = "TOKEN")]
    pub page_token: Option<String>,
    /// Only jobs in this state; repeat for several.
    #[arg(
        long,
        value_name = "STATE",
        ignore_case = true,
        value_parser = ["queued", "running", "succeeded", "failed", "cancelled"]
    )]
    pub state: Vec<String>,
    /// Only jobs of this kind (one of those `tally --help` names).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only jobs of this user.
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// Every page, one after another.
    #[arg(long, conflicts_with = "page_token")]
    pub all: bool,
}

/// Lists the jobs of one page (or, with `--all`, of every page).
pub async fn execute(remote: &Remote, args: &ListArgs, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let mut request = proto::ListJobsRequest {
        limit: args.limit,
        page_token: args.page_token.clone().unwrap_or_default(),
        states: states(&args.state)?,
        kind: args.kind.clone().unwrap_or_default(),
        owner: args.owner.clone().unwrap_or_default(),
    };
    let mut jobs = Vec::new();
    // With --all, pages until the last; each page is one call with its own deadline.
    let next = loop {
        let page = client.list(quick(request.clone())).await?.into_inner();
        jobs.extend(page.jobs);
        if !args.all || page.next_page_token.is_empty() {
            break page.next_page_token;
        }
        request.page_token = page.next_page_token;
    };
    if json {
        let list: Vec<_> = jobs.iter().map(output::job_json).collect();
        outln!(
            "{}",
            serde_json::json!({ "jobs": list, "next_page_token": next })
        )?;
    } else {
        out!("{}", output::job_table(&jobs))?;
        if !next.is_empty() {
            outln!("{}", next_page_hint(args, &next))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The states `--state` names, as the request wants them.
fn states(names: &[String]) -> anyhow::Result<Vec<i32>> {
    let mut states = Vec::new();
    for name in names {
        let state = [
            proto::JobState::Queued,
            proto::JobState::Running,
            proto::JobState::Succeeded,
            proto::JobState::Failed,
            proto::JobState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "unknown state {name:?}: expected queued, running, succeeded, failed or cancelled"
            )
        })?;
        states.push(state as i32);
    }
    Ok(states)
}

/// The command that lists the next page with the same filters.
fn next_page_hint(args: &ListArgs, next: &str) -> String {
    let mut hint = format!("more: tally list --page-token {next}");
    if args.limit != 100 {
        hint += &format!(" --limit {}", args.limit);
    }
    for state in &args.state {
        hint += &format!(" --state {state}");
    }
    if let Some(kind) = &args.kind {
        hint += &format!(" --kind {kind}");
    }
    if let Some(owner) = &args.owner {
        hint += &format!(" --owner {owner}");
    }
    hint
}
