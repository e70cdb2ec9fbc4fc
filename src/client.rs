//! Client commands (`submit`, `status`, `watch`, `result`, `cancel`, `list`,
//! `events`) and `run`, which starts an embedded coordinator with in-process
//! workers on loopback and follows one job through the same code paths.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use tally_kinds::Control;
use tally_kinds::spec::ValidSpec;
use tally_wire::digest::fnv1a64;
use tally_wire::limits::MAX_MESSAGE_BYTES;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::{self, Job};
use tally_wire::transport::{self, AuthChannel, BearerToken, ClientSecurity};
use tonic::service::interceptor::InterceptedService;

use crate::args::{DeleteArgs, ListArgs, MAX_THREADS, RunArgs, SubmitArgs};
use crate::output::{self, out, outln};

/// A coordinator to talk to and the credentials to present.
#[derive(Clone, Debug)]
pub struct Remote {
    pub url: String,
    pub security: ClientSecurity,
}

impl Remote {
    /// A coordinator that needs no credentials (the embedded one of `run`).
    pub fn open(url: String) -> Remote {
        Remote {
            url,
            security: ClientSecurity::default(),
        }
    }
}

pub async fn connect(remote: &Remote) -> anyhow::Result<JobServiceClient<AuthChannel>> {
    let url = &remote.url;
    let channel = transport::endpoint(url, &remote.security)?
        .connect()
        .await
        .with_context(|| format!("cannot reach the coordinator at {url}"))?;
    let auth = BearerToken::new(remote.security.token.as_deref())?;
    Ok(
        JobServiceClient::new(InterceptedService::new(channel, auth))
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
    )
}

/// How long a client call may take before it fails: a coordinator that is
/// stopped (not down) accepts the connection and never answers.
const CALL_DEADLINE: Duration = Duration::from_secs(15);

/// How long `watch` keeps trying a coordinator it cannot reach.
const COORDINATOR_LOST_LIMIT: Duration = Duration::from_secs(60);

/// A submission plans the job first, which for large jobs takes a while.
const SUBMIT_DEADLINE: Duration = Duration::from_secs(600);

/// `message` as a request with the call deadline (for a Watch, the deadline
/// of its first answer; the stream itself lives as long as the job).
fn quick<T>(message: T) -> tonic::Request<T> {
    with_deadline(message, CALL_DEADLINE)
}

/// A submission as a request with the planning deadline.
fn planned<T>(message: T) -> tonic::Request<T> {
    with_deadline(message, SUBMIT_DEADLINE)
}

fn with_deadline<T>(message: T, limit: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(limit);
    request
}

/// A key that makes `run` with the same spec and data directory resume the job
/// it started before instead of starting another (FNV-1a of the spec).
fn run_key(spec: &ValidSpec) -> String {
    let text = serde_json::to_string(spec).expect("specs serialise");
    format!("run-{:016x}", fnv1a64(text.as_bytes()))
}

pub async fn run(args: RunArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (spec, attachments) = args.to_spec()?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = args.threads.unwrap_or(cores.min(MAX_THREADS as usize));
    let slots = args.slots.unwrap_or(threads);
    if args.direct {
        return run_direct(spec, threads, json).await;
    }
    let (data_dir, _temporary) = match &args.data {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir = tempfile::Builder::new().prefix("tally-run-").tempdir()?;
            (dir.path().to_path_buf(), Some(dir))
        }
    };
    let mut interrupts = crate::Interrupts::new()?;
    let cluster = LocalCluster::start(data_dir, args.workers, threads, slots).await?;
    let data = args.data.as_deref();
    let submission = Submission {
        spec: &spec,
        attachments,
    };
    let outcome = submit_and_follow(&cluster.remote, submission, data, json, &mut interrupts).await;
    match outcome {
        Ok(Followed::Finished(finished)) => {
            cluster.stop().await;
            let (job, result) = *finished;
            output::print_result(&job, &result, json)
        }
        Ok(Followed::Interrupted(job)) => interrupted(cluster, &job, data, &mut interrupts).await,
        Err(e) => {
            cluster.stop().await;
            Err(e)
        }
    }
}

/// Waits, a bounded while, until `wanted` workers have registered: a job is
/// fitted to the memory of the workers registered when it is submitted.
async fn wait_for_workers(remote: &Remote, wanted: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if let Ok(mut client) = connect(remote).await
            && let Ok(info) = client.info(quick(proto::InfoRequest {})).await
            && info.into_inner().workers_live as usize >= wanted
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!("not every in-process worker registered within 10 s; submitting anyway");
}

/// The exit status of a command stopped by Ctrl-C or SIGTERM.
const INTERRUPTED: u8 = 130;

/// `run` after Ctrl-C. With `--data` the job is kept: the workers hand their
/// shards back and the same command resumes it; a second Ctrl-C while they
/// stop cancels it instead. Without `--data` nothing could resume it, so it
/// is cancelled.
async fn interrupted(
    cluster: LocalCluster,
    job: &str,
    data: Option<&std::path::Path>,
    interrupts: &mut crate::Interrupts,
) -> anyhow::Result<ExitCode> {
    let Some(dir) = data else {
        cancel_quietly(&cluster.remote, job).await;
        cluster.stop().await;
        eprintln!("interrupted; job {job} cancelled (with --data DIR a run can be resumed)");
        return Ok(ExitCode::from(INTERRUPTED));
    };
    eprintln!(
        "interrupted; stopping (press Ctrl-C again to cancel job {job} instead of keeping it)"
    );
    let remote = cluster.remote.clone();
    let stopping = cluster.stop();
    tokio::pin!(stopping);
    tokio::select! {
        () = &mut stopping => {
            eprintln!(
                "job {job} is kept in {}: run the same command again to resume it",
                dir.display()
            );
        }
        () = interrupts.next() => {
            cancel_quietly(&remote, job).await;
            stopping.await;
            eprintln!("job {job} cancelled");
        }
    }
    Ok(ExitCode::from(INTERRUPTED))
}

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
        eprintln!("could not cancel job {job}: {}", output::error_line(&e));
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
        eprintln!(
            "{} in {:.3} s (direct)",
            spec.describe(),
            elapsed.as_secs_f64()
        );
        outln!("{}", answer.line)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A coordinator on loopback and in-process workers, for `run`.
struct LocalCluster {
    coordinator: tally_coordinator::RunningCoordinator,
    remote: Remote,
    stop: tokio::sync::watch::Sender<bool>,
    workers: Vec<
        tokio::task::JoinHandle<tally_worker::Result<std::sync::Arc<tally_worker::WorkerStats>>>,
    >,
}

impl LocalCluster {
    async fn start(
        data_dir: std::path::PathBuf,
        workers: usize,
        threads: usize,
        slots: usize,
    ) -> anyhow::Result<LocalCluster> {
        let mut config = tally_coordinator::CoordinatorConfig::new(
            "127.0.0.1:0".parse().expect("loopback address"),
            Some(data_dir),
        );
        // The store is this process's alone: whoever held a lease in it was
        // an in-process worker of a run that has stopped.
        config.release_leases_on_start = true;
        // One process: the workers reuse what planning built (slider graphs).
        let kernel_cache = config.kernel_cache.clone();
        let coordinator = tally_coordinator::start(config).await?;
        let url = coordinator.url();
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let workers_wanted = workers;
        let workers = (0..workers)
            .map(|i| {
                let mut config = tally_worker::WorkerConfig::new(url.clone());
                config.threads = threads;
                config.slots = slots;
                config.worker_id = format!("{}-run{i}", tally_worker::default_worker_id());
                config.lease_wait = Duration::from_secs(1);
                // Stopping `run` hands shards back at once: the job resumes
                // from their last checkpoints.
                config.drain_timeout = Duration::ZERO;
                config.kernel_cache = kernel_cache.clone();
                // The user runs their own module on their own machine.
                config.allow_wasm = true;
                let mut stop = stop_rx.clone();
                tokio::spawn(tally_worker::run(config, async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                }))
            })
            .collect();
        let remote = Remote::open(url);
        wait_for_workers(&remote, workers_wanted).await;
        Ok(LocalCluster {
            coordinator,
            remote,
            stop,
            workers,
        })
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        for worker in self.workers {
            let _ = worker.await;
        }
        self.coordinator.shutdown().await;
    }
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
}

/// Submits the job (or finds the one a previous `run` with the same spec and
/// data directory started) and follows it to its result.
async fn submit_and_follow(
    remote: &Remote,
    submission: Submission<'_>,
    data: Option<&std::path::Path>,
    json: bool,
    interrupts: &mut crate::Interrupts,
) -> anyhow::Result<Followed> {
    let mut client = connect(remote).await?;
    let spec = submission.spec;
    let request = proto::SubmitRequest {
        spec: Some(spec.into()),
        idempotency_key: run_key(spec),
        attachments: submission.attachments,
    };
    let submitted = client.submit(planned(request)).await?.into_inner();
    let job = submitted.job.context("the coordinator returned no job")?;
    match data {
        Some(dir) if submitted.created => eprintln!(
            "started {} in {} (Ctrl-C stops it; the same command resumes it)",
            job.id,
            dir.display()
        ),
        Some(dir) => eprintln!("resuming {} from {}", job.id, dir.display()),
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

/// Follows a job until it finishes, showing a progress bar on stderr; survives a
/// coordinator restart by watching again.
pub async fn follow(remote: &Remote, job_id: &str, progress: bool) -> anyhow::Result<Job> {
    let bar = output::ProgressView::new(progress);
    // Since when every attempt to watch has failed, if they do.
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        let attempt = async {
            let mut client = connect(remote).await?;
            let mut stream = client
                .watch(quick(proto::WatchRequest {
                    job_id: job_id.to_string(),
                }))
                .await?
                .into_inner();
            while let Some(job) = stream.message().await? {
                bar.update(&job);
                if job.is_finished() {
                    return anyhow::Ok(Some(job));
                }
            }
            anyhow::Ok(None)
        }
        .await;
        match attempt {
            Ok(Some(job)) => {
                bar.finish(&job);
                return Ok(job);
            }
            Ok(None) => failing_since = None,
            Err(e) => {
                if let Some(status) = e.downcast_ref::<tonic::Status>()
                    && matches!(
                        status.code(),
                        tonic::Code::NotFound | tonic::Code::InvalidArgument
                    )
                {
                    bar.abandon();
                    return Err(e);
                }
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > COORDINATOR_LOST_LIMIT {
                    bar.abandon();
                    return Err(e.context("lost the coordinator for a minute"));
                }
                bar.note(&format!(
                    "waiting for the coordinator: {}",
                    output::error_line(&e)
                ));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn submit(remote: &Remote, args: SubmitArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (spec, attachments) = args.spec.to_spec()?;
    let mut client = connect(remote).await?;
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
        outln!("{value}")?;
    } else {
        if !response.created {
            eprintln!("a job with this idempotency key exists already");
        }
        eprintln!("submitted {}", job.description);
        outln!("{}", job.id)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn status(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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

pub async fn watch(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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

pub async fn result(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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

pub async fn cancel(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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

pub async fn delete(remote: &Remote, args: &DeleteArgs, json: bool) -> anyhow::Result<ExitCode> {
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

pub async fn list(remote: &Remote, args: &ListArgs, json: bool) -> anyhow::Result<ExitCode> {
    let mut client = connect(remote).await?;
    let mut states = Vec::new();
    for name in &args.state {
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
    let mut request = proto::ListJobsRequest {
        limit: args.limit,
        page_token: args.page_token.clone().unwrap_or_default(),
        states,
        kind: args.kind.clone().unwrap_or_default(),
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
            outln!("{hint}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn events(remote: &Remote, job_id: &str, json: bool) -> anyhow::Result<ExitCode> {
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
                "{:>6} {:<14} stage {:>4} shard {:>5} attempt {:>3} {} {}",
                e.sequence,
                e.kind,
                e.stage,
                e.shard,
                e.attempt,
                e.worker_id,
                e.message
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of `tally doctor`.
struct Check {
    name: &'static str,
    ok: bool,
    /// A warning does not fail the doctor.
    warning: bool,
    detail: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            warning: false,
            detail: detail.into(),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: false,
            warning: false,
            detail: detail.into(),
        }
    }

    /// Passes when `ok`, else warns without failing the doctor.
    fn warn_unless(name: &'static str, ok: bool, detail: String) -> Check {
        Check {
            name,
            ok,
            warning: !ok,
            detail,
        }
    }
}

/// Checks what a user needs before submitting: the config, the coordinator's
/// reachability and health, the token, the versions and live workers.
pub async fn doctor(
    remote: &Remote,
    config_path: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut checks = vec![Check::pass(
        "config",
        match config_path {
            Some(p) => format!("{} loaded", p.display()),
            None => "no config file (flags and environment only)".into(),
        },
    )];
    let url = &remote.url;
    let channel = match transport::endpoint(url, &remote.security) {
        Ok(endpoint) => endpoint.connect().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match channel {
        Err(e) => checks.push(Check::fail(
            "reachable",
            format!("cannot connect to {url}: {e}"),
        )),
        Ok(channel) => {
            let how = if url.starts_with("https://") {
                " over TLS"
            } else {
                " (plain text)"
            };
            checks.push(Check::pass("reachable", format!("{url}{how}")));
            checks.push(check_health(channel.clone()).await);
            checks.extend(check_service(remote, channel).await?);
        }
    }
    print_checks(&checks, json)
}

async fn check_health(channel: tonic::transport::Channel) -> Check {
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await;
    match health {
        Ok(r) if r.get_ref().status == 1 => Check::pass("health", "serving"),
        Ok(r) => Check::fail("health", format!("status {}", r.get_ref().status)),
        Err(e) => Check::fail("health", e.message()),
    }
}

/// The token, the versions and the live workers, from one `Info` call.
async fn check_service(
    remote: &Remote,
    channel: tonic::transport::Channel,
) -> anyhow::Result<Vec<Check>> {
    let auth = BearerToken::new(remote.security.token.as_deref())?;
    let info = JobServiceClient::new(InterceptedService::new(channel, auth))
        .info(quick(proto::InfoRequest {}))
        .await;
    let info = match info {
        Ok(info) => info.into_inner(),
        Err(e) if e.code() == tonic::Code::Unauthenticated => {
            return Ok(vec![Check::fail(
                "token",
                format!(
                    "{} (set TALLY_TOKEN or --token-file to the coordinator's token)",
                    e.message()
                ),
            )]);
        }
        Err(e) => return Ok(vec![Check::fail("token", e.message())]),
    };
    let ours = env!("CARGO_PKG_VERSION");
    Ok(vec![
        Check::pass(
            "token",
            if remote.security.token.is_some() {
                "accepted"
            } else {
                "none needed"
            },
        ),
        Check::warn_unless(
            "version",
            info.version == ours,
            format!("tally {ours}, coordinator {}", info.version),
        ),
        Check::warn_unless(
            "workers",
            info.workers_live > 0,
            format!(
                "{} live; {} job(s), {} unfinished",
                info.workers_live, info.jobs, info.jobs_unfinished
            ),
        ),
    ])
}

/// Prints the checks; the exit code fails when a check failed (not warned).
fn print_checks(checks: &[Check], json: bool) -> anyhow::Result<ExitCode> {
    let failed = checks.iter().any(|c| !c.ok && !c.warning);
    if json {
        let list: Vec<_> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "ok": c.ok,
                    "warning": c.warning,
                    "detail": c.detail,
                })
            })
            .collect();
        outln!("{}", serde_json::json!({ "ok": !failed, "checks": list }))?;
    } else {
        for c in checks {
            let mark = match (c.ok, c.warning) {
                (true, _) => "ok  ",
                (false, true) => "warn",
                (false, false) => "FAIL",
            };
            outln!("{mark} {:<10} {}", c.name, c.detail)?;
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
