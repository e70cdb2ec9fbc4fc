//! `tally coordinator`: serves the job and worker gRPC services over a sled
//! store, refusing to serve beyond this host with an API left open.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tally_wire::transport::{ServerTls, Tokens};

use crate::output::errln;
use crate::signals::shutdown_signal;

#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// Address to serve gRPC on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: std::net::SocketAddr,
    /// Data directory of the sled store (created if missing).
    #[arg(long)]
    pub data: PathBuf,
    /// Address to serve HTTP on: Prometheus `/metrics` and the status page at `/`.
    #[arg(long, env = "TALLY_HTTP", value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Start even if the store has lost acknowledged commits (a damaged file):
    /// continue from what is intact, note it in each unfinished job's events and
    /// name the jobs that were lost. Job ids never go back.
    #[arg(long)]
    pub recover: bool,
    /// Serve a non-loopback address with an API that has no token and no
    /// client certificates (refused without this flag).
    #[arg(long)]
    pub insecure: bool,
    /// Delete finished jobs (their shards, events, stage data and checkpoints)
    /// this long after they finished, e.g. `7d`, `12h`, `30m`. Default: keep them.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retain_finished: Option<Duration>,
    /// Where stage data (frontier buckets, hex frontier vectors, checkpoints
    /// over 4 MiB) lives: `coordinator` (in this store, streamed through this
    /// process), `file:///path` (a directory this process and every worker
    /// mount at that path) or `s3://bucket/prefix` (endpoint, region and
    /// credentials from the AWS_* environment variables or the shared
    /// credentials file, on this process and every worker). Workers learn it
    /// when they register. A data directory with unfinished jobs keeps the
    /// store they began with.
    #[arg(long, env = "TALLY_STAGE_STORE", value_name = "URL", default_value = "coordinator", value_parser = StageStoreParser)]
    pub stage_store: tally_stage::StageStoreUrl,
    /// How often a stage store outside the coordinator is swept for blobs
    /// nothing references any more (failed attempts, finished jobs).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub stage_sweep_every: Duration,
    /// With a stage store outside the coordinator: stage outputs up to this
    /// size come inline with their reports and are kept in this store (a
    /// blob of its own costs a file or a request, more than a small output's
    /// bytes here); larger ones go to the stage store. `0`: all go there.
    /// At most 1MiB.
    #[arg(long, value_name = "SIZE", default_value = "256KiB", value_parser = parse_inline_stage_output)]
    pub inline_stage_output: usize,
    /// Give this data directory a new prefix of its own in the stage store:
    /// for a copy of another data directory (a restored backup, a cloned
    /// machine), which the stage store refuses while the original holds the
    /// prefix they share. Its unfinished jobs compute again the stage data
    /// they no longer find.
    #[arg(long)]
    pub new_stage_prefix: bool,
    /// How often the coordinator renews its hold on its stage-store prefix;
    /// after an unclean stop the next start watches the hold for three times
    /// this before taking it back.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, hide = true)]
    pub stage_owner_renew_every: Duration,
    /// With a stage store outside the coordinator: how often the store's
    /// changes (job records, accepted results, checkpoints, events) are
    /// shipped to its replica under this data directory's prefix there, so
    /// that a coordinator on a new node can restore it (`--restore-from`)
    /// when this one's disk is lost; what is lost then is at most this
    /// interval of accepted results, which are computed again. `0s`: not
    /// replicated.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub replicate_every: Duration,
    /// The users of the job API: a user a line, `NAME ROLE sha256:HASH
    /// [weight=N] [slots=N] [queued=N] [stage-bytes=SIZE]` (ROLE `admin` or
    /// `user`; HASH from `tally hash-token`; see docs/security.md). Read again
    /// on SIGHUP; a file with a bad line is refused at start and at a reload
    /// (the users before it keep serving). The client token stays the admin
    /// user `admin`.
    #[arg(long, env = "TALLY_USERS_FILE", value_name = "FILE")]
    pub users_file: Option<PathBuf>,
    /// Who sees which jobs: `all` (every user sees every job and changes
    /// only their own) or `own` (a user sees only their own; admins see all).
    #[arg(long, value_enum, default_value = "all")]
    pub jobs_visible: JobsVisible,
    /// How long a user's past slot time takes to count half in the fair
    /// share (free slots go to the user with work furthest below their
    /// weight's share).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub fair_share_half_life: Duration,
    /// Before serving, restore the store into the data directory (which must
    /// be empty) from the replica under a data directory's prefix in the
    /// stage store: `s3://bucket/prefix/d-…` or `file:///path/d-…`, as the
    /// lost coordinator's log and `tally doctor` name it. Refused while the
    /// coordinator that owns the replica still renews its hold on it. The
    /// stage store defaults to the one above that prefix.
    #[arg(long, value_name = "URL", value_parser = StageStoreParser)]
    pub restore_from: Option<tally_stage::StageStoreUrl>,
    /// With --restore-from: restore even when the replica's log has a gap (a
    /// log segment missing or damaged before later ones, or a newer
    /// generation lost), which loses more than the last interval: the
    /// restore then stops before the gap, and what was recorded after it
    /// (jobs submitted, results accepted) is gone. Refused without it, with
    /// the gap named.
    #[arg(long, requires = "restore_from")]
    pub restore_accept_loss: bool,
    /// Fault injection for tests: abort the process right after the N-th
    /// store flush, before any call it covered is answered.
    #[arg(long, hide = true)]
    pub exit_after_flushes: Option<u64>,
    /// How long one call may hold the scheduler lock, or one store flush
    /// run, before the coordinator exits with code 70 so that its supervisor
    /// (systemd, Kubernetes) starts it again and its jobs resume from the
    /// store. It reports itself not serving (health, `/healthz`) once such
    /// a hold passes 5 s (or half this), warns at a sixth of this and logs
    /// an error at half, naming the call.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_stall_limit)]
    pub stall_limit: Duration,
    /// Fault injection for tests: `CALL:N`, the N-th call whose name
    /// contains CALL (as the watchdog names calls, e.g. `WorkerApi::report`)
    /// keeps the scheduler lock for ever.
    #[arg(long, hide = true, value_parser = parse_stall_in)]
    pub fault_stall_scheduler_in: Option<(String, u64)>,
}

/// Parses `--stall-limit`: at least 2 s (a shorter one would end a
/// coordinator for an ordinary slow flush).
fn parse_stall_limit(text: &str) -> Result<Duration, String> {
    let limit = parse_duration(text)?;
    match limit >= Duration::from_secs(2) {
        true => Ok(limit),
        false => Err(format!("{text} is shorter than the least limit, 2s")),
    }
}

fn parse_stall_in(text: &str) -> Result<(String, u64), String> {
    let (call, nth) = text.rsplit_once(':').unwrap_or((text, "1"));
    let nth = nth.parse().map_err(|e| format!("{nth}: {e} (CALL:N)"))?;
    Ok((call.to_string(), nth))
}

/// The watchdog's limits for a `--stall-limit`.
pub(crate) fn watchdog_config(
    stall_limit: Duration,
) -> tally_coordinator::watchdog::WatchdogConfig {
    tally_coordinator::watchdog::WatchdogConfig {
        unhealthy_after: tally_coordinator::watchdog::UNHEALTHY_AFTER.min(stall_limit / 2),
        exit_after: stall_limit,
    }
}

/// Parses `--inline-stage-output`: a size up to `MAX_INLINE_STAGE_OUTPUT`.
pub(crate) fn parse_inline_stage_output(text: &str) -> Result<usize, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("{e} (a size such as 256KiB, or 0)"))?;
    let most = tally_wire::limits::MAX_INLINE_STAGE_OUTPUT;
    match usize::try_from(size.as_u64()) {
        Ok(bytes) if bytes <= most => Ok(bytes),
        _ => Err(format!(
            "{text} is more than the {most} bytes a report carries inline"
        )),
    }
}

/// Parses `--stage-store` (and `--restore-from`, named as itself when
/// refused). A value refused is not echoed whole, as the parser's own
/// message would: it may hold credentials.
#[derive(Clone)]
pub(crate) struct StageStoreParser;

impl clap::builder::TypedValueParser for StageStoreParser {
    type Value = tally_stage::StageStoreUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        self.parse_ref_(cmd, arg, value, clap::parser::ValueSource::CommandLine)
    }

    fn parse_ref_(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
        source: clap::parser::ValueSource,
    ) -> Result<Self::Value, clap::Error> {
        let flag = format!(
            "--{}",
            arg.and_then(|a| a.get_long()).unwrap_or("stage-store")
        );
        let refused = |why: String| {
            // The stage crate's messages name the usual flag.
            let why = why.replace("--stage-store", &flag);
            let from = match source {
                clap::parser::ValueSource::EnvVariable => " (from TALLY_STAGE_STORE)",
                _ => "",
            };
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{why}{from}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refused(format!("{flag}: the value is not UTF-8")))?;
        text.parse()
            .map_err(|e: tally_stage::StageError| refused(e.to_string()))
    }
}

/// `--jobs-visible`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum JobsVisible {
    All,
    Own,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (a duration such as 7d, 12h, 30m or 90s)"))
}

/// Serves until SIGINT or SIGTERM, or until the coordinator stops.
pub async fn execute(
    args: &CoordinatorArgs,
    tokens: Tokens,
    tls: Option<ServerTls>,
) -> anyhow::Result<ExitCode> {
    let shutdown = shutdown_signal()?;
    let mut config =
        tally_coordinator::CoordinatorConfig::new(args.listen, Some(args.data.clone()));
    check_exposure(args, &tokens, tls.as_ref())?;
    let secured = security_summary(&tokens, args.users_file.is_some(), tls.as_ref());
    config.tokens = tokens;
    config.tls = tls;
    config.http = args.http;
    config.recover = args.recover;
    config.retain_finished = args.retain_finished;
    config.exit_after_flushes = args.exit_after_flushes;
    config.watchdog = watchdog_config(args.stall_limit);
    config.on_stall = crate::logging::on_stall();
    config.stall_in = args.fault_stall_scheduler_in.clone();
    config.stage_store = args.stage_store.clone();
    config.stage_sweep_every = args.stage_sweep_every;
    config.inline_stage_output = args.inline_stage_output;
    config.new_stage_prefix = args.new_stage_prefix;
    config.stage_owner_renew_every = args.stage_owner_renew_every;
    config.replicate_every = args.replicate_every;
    config.restore_from = args.restore_from.clone();
    config.restore_accept_loss = args.restore_accept_loss;
    config.users_file = args.users_file.clone();
    config.jobs_visible = match args.jobs_visible {
        JobsVisible::All => tally_coordinator::users::Visibility::All,
        JobsVisible::Own => tally_coordinator::users::Visibility::Own,
    };
    config.scheduler.fair_share_half_life_ms = args.fair_share_half_life.as_millis().max(1) as u64;
    // Wasm modules are checked (compiled, never run) at submission.
    let sandbox = tally_wasm::GuestSandbox::new(tally_wasm::Limits::default())?;
    config.kernel_cache.set_guest_runtime(Arc::new(sandbox));
    let mut coordinator = tally_coordinator::start(config).await?;
    if let Some(restored) = &coordinator.restored {
        for refused in &restored.refused {
            errln!("refused a damaged replica object: {refused}");
        }
        if let Some(lost) = &restored.lost {
            errln!("WARNING: the restore lost changes the replica held: {lost}");
        }
        errln!(
            "restored from the replica: {} ({} entries from the snapshot, {} changes from the log); \
             results accepted after it are computed again",
            restored.point,
            restored.entries,
            restored.changes_replayed
        );
    }
    errln!(
        "coordinator listening on {} (data in {}; {secured})",
        coordinator.addr,
        args.data.display()
    );
    if let Some(http) = coordinator.http_addr {
        errln!("status page http://{http}/ and metrics http://{http}/metrics");
    }
    tokio::select! {
        r = coordinator.wait() => r?,
        _ = shutdown => {
            tracing::info!("shutting down");
            coordinator.shutdown().await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses to serve beyond this host with an API that has no authentication,
/// unless `--insecure` says that is meant: then anyone who reaches the port
/// could submit and cancel jobs, or act as a worker.
fn check_exposure(
    args: &CoordinatorArgs,
    tokens: &Tokens,
    tls: Option<&ServerTls>,
) -> anyhow::Result<()> {
    let client_certificates = tls.is_some_and(|t| t.client_ca.is_some());
    let open: Vec<&str> = [
        (
            tokens.client.is_none() && args.users_file.is_none(),
            "the job API (--token-file or TALLY_TOKEN, or --users-file)",
        ),
        (
            tokens.worker.is_none(),
            "the worker API (--worker-token-file or TALLY_WORKER_TOKEN)",
        ),
    ]
    .into_iter()
    .filter(|(missing, _)| *missing)
    .map(|(_, api)| api)
    .collect();
    if args.listen.ip().is_loopback() || client_certificates || open.is_empty() {
        return Ok(());
    }
    if !args.insecure {
        return Err(tally_kinds::Error::InvalidArgument(format!(
            "refusing to listen on {} with no authentication on {}: give its token, or client \
             certificates (--tls-ca), or --insecure to serve anyone who reaches the port",
            args.listen,
            open.join(" and ")
        ))
        .into());
    }
    tracing::warn!(
        listen = %args.listen,
        open = %open.join(", "),
        "serving with no authentication (--insecure): anyone who reaches the port can use these APIs"
    );
    Ok(())
}

/// How each API is guarded, for the banner: `job API needs a token, worker
/// API open; no TLS`.
fn security_summary(tokens: &Tokens, users_file: bool, tls: Option<&ServerTls>) -> String {
    let client_certificates = tls.is_some_and(|t| t.client_ca.is_some());
    let jobs = match users_file {
        true => "needs a user's token",
        false => guard_of(&tokens.client, client_certificates),
    };
    let tls = match tls {
        Some(tls) if tls.client_ca.is_some() => "TLS, client certificates required",
        Some(_) => "TLS",
        None => "no TLS",
    };
    format!(
        "job API {jobs}, worker API {}; {tls}",
        guard_of(&tokens.worker, client_certificates)
    )
}

/// How one token guards its API.
fn guard_of(token: &Option<String>, client_certificates: bool) -> &'static str {
    match token {
        Some(_) => "needs a token",
        None if client_certificates => "needs only a client certificate",
        None => "open",
    }
}
