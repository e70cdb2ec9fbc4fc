//! `tally run`: a job to completion on this machine, on an embedded cluster
//! (or, with `--direct`, the kernel alone), resumable with `--data`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tally_kinds::Control;
use tally_kinds::guest::GuestRuntime;
use tally_kinds::invalid;
use tally_kinds::spec::ValidSpec;
use tally_wasm::{GuestSandbox, Limits};
use tally_wire::digest::fnv1a64;
use tally_wire::proto::{self, Job};

use crate::client::{Remote, connect, follow, planned, quick};
use crate::embedded::{LocalCluster, Workers};
use crate::flags::{MAX_THREADS, SpecArgs, count_to};
use crate::output::{self, errln, outln};
use crate::signals::Interrupts;
use crate::spec_input;

/// Most in-process workers of `tally run`.
const MAX_RUN_WORKERS: u64 = 64;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// In-process workers (1 to 64).
    #[arg(
        help_heading = "Runner options",
        long,
        global = true,
        default_value_t = 1,
        value_parser = count_to(MAX_RUN_WORKERS)
    )]
    pub workers: usize,
    /// Compute threads per worker (1 to 1024); default: all cores.
    #[arg(help_heading = "Runner options", long, global = true, value_parser = count_to(MAX_THREADS))]
    pub threads: Option<usize>,
    /// Shards a worker holds at once (1 to 1024), leased together; those
    /// beyond the threads wait for one (more slots: fewer round trips for
    /// short shards). Default: the threads.
    #[arg(help_heading = "Runner options", long, global = true, value_parser = count_to(MAX_THREADS))]
    pub slots: Option<usize>,
    /// Keep the job's store here (default: a temporary directory).
    #[arg(help_heading = "Runner options", long, global = true)]
    pub data: Option<PathBuf>,
    /// Compute in this process with the kernel alone, without the runner.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub direct: bool,
    /// Memory the workers' shards may use, e.g. `4GB` (as `tally worker
    /// --memory-budget`), shared among the workers: a job is fitted to it,
    /// or refused with the numbers when not even its smallest shard fits.
    /// Default: three quarters of the machine's memory (or its container's).
    #[arg(help_heading = "Runner options", long, global = true, value_name = "SIZE", value_parser = super::worker::parse_memory)]
    pub memory_budget: Option<u64>,
    /// Keep stage data (the levels of frontier plans) in `file:///dir`,
    /// `s3://bucket/prefix` or `coordinator` (as `tally coordinator
    /// --stage-store`). Default: the directory `stage` of the run's data
    /// directory, so that no level is held in memory whole.
    #[arg(help_heading = "Runner options", long, global = true, value_name = "URL", value_parser = super::coordinator::StageStoreParser)]
    pub stage_store: Option<tally_stage::StageStoreUrl>,
    /// Stage outputs up to this size stay in the run's store instead of
    /// the stage store (as `tally coordinator --inline-stage-output`).
    #[arg(help_heading = "Runner options", long, global = true, value_name = "SIZE", default_value = "256KiB", value_parser = super::coordinator::parse_inline_stage_output)]
    pub inline_stage_output: usize,
    /// Where the workers' shards spill past their share of the memory
    /// budget (as `tally worker --spill-dir`). Default: `tally-spill` in the
    /// temporary directory.
    #[arg(
        help_heading = "Runner options",
        long,
        global = true,
        value_name = "DIR"
    )]
    pub spill_dir: Option<PathBuf>,
    /// The most bytes the run's spill files hold at once, shared evenly by
    /// its workers (as `tally worker --spill-limit`): a shard past its
    /// worker's share, or on a full disk, waits to be tried again, and the
    /// job's progress line says why. Default: no limit but the disk's.
    #[arg(help_heading = "Runner options", long, global = true, value_name = "SIZE", value_parser = super::worker::parse_memory)]
    pub spill_limit: Option<u64>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

impl RunArgs {
    /// The spec of [`spec_input::job_spec`], refused if it asks for more
    /// replicas than this run has workers: they go to different workers, so
    /// the job would wait forever.
    fn to_spec(&self) -> anyhow::Result<(ValidSpec, Vec<Vec<u8>>)> {
        let (spec, attachments) = spec_input::job_spec(&self.spec)?;
        let (replicas, workers) = (spec.options().replicas, self.workers);
        if !self.direct && replicas as usize > workers {
            return Err(invalid!(
                "--replicas {replicas} needs {replicas} workers and this run has {workers}: give --workers {replicas}"
            )
            .into());
        }
        Ok((spec, attachments))
    }
}

/// Runs the job to its answer; Ctrl-C stops it (see [`interrupted`]).
pub async fn execute(args: RunArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (spec, attachments) = args.to_spec()?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = args.threads.unwrap_or(cores.min(MAX_THREADS as usize));
    let slots = args.slots.unwrap_or(threads);
    if args.direct {
        return run_direct(spec, threads, json).await;
    }
    let budget = args.memory_budget.unwrap_or_else(default_memory_budget);
    let per_worker = (budget / args.workers as u64).max(1);
    if let Some(why) = tally_worker::budget_refusal(per_worker, slots) {
        return Err(match args.workers {
            1 => invalid!("--memory-budget {why}"),
            n => invalid!(
                "--memory-budget {} gives each of {n} workers {why}",
                tally_kinds::kind::format_bytes(budget)
            ),
        }
        .into());
    }
    let (data_dir, _temporary) = match &args.data {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir = tempfile::Builder::new().prefix("tally-run-").tempdir()?;
            (dir.path().to_path_buf(), Some(dir))
        }
    };
    let mut interrupts = Interrupts::new()?;
    let workers = Workers {
        count: args.workers,
        threads,
        slots,
        memory_budget: per_worker,
        run_budget: budget,
        spill_dir: args
            .spill_dir
            .clone()
            .unwrap_or_else(tally_worker::default_spill_dir),
        spill_limit: args
            .spill_limit
            .map(|limit| limit / args.workers.max(1) as u64),
    };
    let stage_store = match &args.stage_store {
        Some(url) => url.clone(),
        None => default_stage_store(&data_dir)?,
    };
    // The run's key names the question, before its shards are sized: the
    // same command resumes the job whatever count `--shards auto` picks.
    let key = run_key(&spec);
    // One sandbox for the process: the trial of a user kernel's first shard,
    // the coordinator's check of its module and the workers' shards.
    let sandbox: Arc<dyn GuestRuntime> = Arc::new(GuestSandbox::new(Limits::default())?);
    let slots_live = (args.workers * slots) as u64;
    let sized = crate::sizing::size(spec, &attachments, slots_live, sandbox.clone())?;
    if let Some(note) = &sized.note {
        errln!("note: {note}");
    }
    let spec = sized.spec;
    let mut cluster = LocalCluster::start(
        data_dir,
        stage_store,
        args.inline_stage_output,
        workers,
        sandbox,
    )
    .await?;
    let data = args.data.as_deref();
    let submission = Submission {
        spec: &spec,
        attachments,
        key,
    };
    let remote = cluster.remote().clone();
    // A worker that stops on its own (it refused the stage store) would
    // leave the job waiting for ever: the run ends with its reason.
    let outcome = tokio::select! {
        outcome = submit_and_follow(&remote, submission, data, json, &mut interrupts) => outcome,
        failed = cluster.worker_failed() => Err(failed),
    };
    match outcome {
        Ok(Followed::Finished(finished)) => {
            cluster.stop().await;
            let (job, result) = *finished;
            output::print_result(&job, &result, json)
        }
        Ok(Followed::Interrupted(job)) => {
            interrupted(cluster, &job, data, &mut interrupts, json).await
        }
        Err(e) => {
            cluster.stop().await;
            Err(e)
        }
    }
}

/// The memory `run`'s workers share by default: three quarters of the
/// machine's, leaving the rest to the coordinator's store, the page cache
/// and the other processes.
fn default_memory_budget() -> u64 {
    tally_worker::machine_memory() / 4 * 3
}

/// `run`'s stage store by default: a directory of its data directory, so the
/// levels of a frontier plan go to disk, not into the coordinator's memory.
fn default_stage_store(data_dir: &Path) -> anyhow::Result<tally_stage::StageStoreUrl> {
    let dir = std::path::absolute(data_dir.join(tally_coordinator::STAGE_DIR))
        .with_context(|| format!("the data directory {}", data_dir.display()))?;
    Ok(tally_stage::StageStoreUrl::File(dir))
}

/// The exit status of a command stopped by Ctrl-C or SIGTERM.
const INTERRUPTED: u8 = 130;

/// `run` after Ctrl-C. With `--data` the job is kept: the workers hand their
/// shards back and the same command resumes it; a second Ctrl-C while they
/// stop cancels it instead. Without `--data` nothing could resume it, so it
/// is cancelled. Under `--json` the outcome is one object too, with its
/// exit code, as every failure's.
async fn interrupted(
    cluster: LocalCluster,
    job: &str,
    data: Option<&Path>,
    interrupts: &mut Interrupts,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let outcome = match data {
        None => {
            cancel_quietly(cluster.remote(), job).await;
            cluster.stop().await;
            format!("interrupted; job {job} cancelled (with --data DIR a run can be resumed)")
        }
        Some(dir) => {
            errln!(
                "interrupted; stopping (press Ctrl-C again to cancel job {job} instead of keeping it)"
            );
            let remote = cluster.remote().clone();
            let stopping = cluster.stop();
            tokio::pin!(stopping);
            tokio::select! {
                () = &mut stopping => format!(
                    "job {job} is kept in {}: run the same command again to resume it",
                    dir.display()
                ),
                () = interrupts.next() => {
                    cancel_quietly(&remote, job).await;
                    stopping.await;
                    format!("job {job} cancelled")
                }
            }
        }
    };
    errln!("{outcome}");
    if json {
        let value = serde_json::json!({ "id": job, "error": outcome, "exit_code": INTERRUPTED });
        outln!("{value}")?;
    }
    Ok(ExitCode::from(INTERRUPTED))
}

/// Cancels `job`, saying so on stderr if it cannot.
async fn cancel_quietly(remote: &Remote, job: &str) {
    let request = proto::CancelRequest {
        job_id: job.to_string(),
    };
    let cancelled = async {
        connect(remote)
            .await?
            .cancel(quick(request))
            .await
            .map_err(Into::into)
    };
    if let Err(e) = cancelled.await {
        errln!("could not cancel job {job}: {}", output::error_line(&e));
    }
}

/// `run --direct`: the kernel alone, in this process.
async fn run_direct(spec: ValidSpec, threads: usize, json: bool) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let direct_spec = spec.clone();
    let answer =
        tokio::task::spawn_blocking(move || direct_spec.compute_direct(threads, &Control::new()))
            .await??;
    let elapsed = started.elapsed();
    if json {
        let value = serde_json::json!({
            "kind": spec.kind_name(),
            "state": "succeeded",
            "answer": answer.line,
            "details": answer.details,
            "elapsed_ms": elapsed.as_millis() as u64,
            "direct": true,
        });
        outln!("{value}")?;
    } else {
        errln!(
            "{} in {:.3} s (direct)",
            spec.describe(),
            elapsed.as_secs_f64()
        );
        outln!("{}", answer.line)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How following a job ended.
enum Followed {
    Finished(Box<(Job, proto::JobResult)>),
    /// Ctrl-C or SIGTERM: the job, still running.
    Interrupted(String),
}

/// A job to submit, with the files it sends along.
struct Submission<'a> {
    spec: &'a ValidSpec,
    attachments: Vec<Vec<u8>>,
    /// The idempotency key (`run_key`).
    key: String,
}

/// Submits the job (or finds the one a previous `run` with the same spec and
/// data directory started) and follows it to its result.
async fn submit_and_follow(
    remote: &Remote,
    submission: Submission<'_>,
    data: Option<&Path>,
    json: bool,
    interrupts: &mut Interrupts,
) -> anyhow::Result<Followed> {
    let mut client = connect(remote).await?;
    let spec = submission.spec;
    let request = proto::SubmitRequest {
        spec: Some(spec.into()),
        idempotency_key: submission.key,
        attachments: submission.attachments,
    };
    let submitted = client.submit(planned(request)).await?.into_inner();
    let job = submitted.job.context("the coordinator returned no job")?;
    match data {
        Some(dir) if submitted.created => errln!(
            "started {} in {} (Ctrl-C stops it; the same command resumes it)",
            job.id,
            dir.display()
        ),
        Some(dir) => errln!("resuming {} from {}", job.id, dir.display()),
        None => {}
    }
    let finished = tokio::select! {
        finished = follow(remote, &job.id, !json) => finished?,
        () = interrupts.next() => return Ok(Followed::Interrupted(job.id)),
    };
    let result = client
        .result(quick(proto::ResultRequest {
            job_id: finished.id.clone(),
        }))
        .await?
        .into_inner();
    Ok(Followed::Finished(Box::new((finished, result))))
}

/// A key that makes `run` with the same spec and data directory resume the job
/// it started before instead of starting another (FNV-1a of the spec).
fn run_key(spec: &ValidSpec) -> String {
    let text = serde_json::to_string(spec).expect("specs serialise");
    format!("run-{:016x}", fnv1a64(text.as_bytes()))
}
