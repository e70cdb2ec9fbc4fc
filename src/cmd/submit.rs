//! `tally submit`: sends a job to the coordinator; prints its id.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tally_wasm::{GuestSandbox, Limits};
use tally_wire::proto;

use crate::client::{Remote, connect, planned, quick};
use crate::flags::SpecArgs;
use crate::output::{self, errln, outln};
use crate::sizing::Sized;
use crate::spec_input;

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// Submitting again with the same key returns the first job.
    #[arg(long, global = true)]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Submits the job; its id is the last line of stdout.
pub async fn execute(remote: &Remote, args: SubmitArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (spec, attachments) = spec_input::job_spec(&args.spec)?;
    let mut client = connect(remote).await?;
    let sized = match spec.shard_count() {
        Some(_) => {
            let info = client
                .info(quick(proto::InfoRequest {}))
                .await?
                .into_inner();
            // The trial of a user kernel's first shard runs in a sandbox
            // as a worker's.
            let sandbox = Arc::new(GuestSandbox::new(Limits::default())?);
            crate::sizing::size(spec, &attachments, u64::from(info.slots_live), sandbox)?
        }
        None => Sized { spec, note: None },
    };
    let spec = sized.spec;
    let response = client
        .submit(planned(proto::SubmitRequest {
            spec: Some((&spec).into()),
            idempotency_key: args.idempotency_key.unwrap_or_default(),
            attachments,
        }))
        .await?
        .into_inner();
    let job = response.job.context("the coordinator returned no job")?;
    if json {
        let mut value = output::job_json(&job);
        value["created"] = serde_json::Value::Bool(response.created);
        if let Some(note) = &sized.note {
            value["note"] = serde_json::Value::String(note.clone());
        }
        outln!("{value}")?;
    } else {
        if !response.created {
            errln!("a job with this idempotency key exists already");
        }
        match &sized.note {
            Some(note) => errln!("submitted {} ({note})", job.description),
            None => errln!("submitted {}", job.description),
        }
        outln!("{}", job.id)?;
    }
    Ok(ExitCode::SUCCESS)
}
