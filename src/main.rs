//! `tally`: the one command-line binary. Runs jobs on an embedded cluster, serves
//! the coordinator, runs workers, and talks to a coordinator as a client.
//!
//! Contract: the answer is the last line of stdout, alone; progress and logs go
//! to stderr; `--json` prints one JSON object instead.

#![forbid(unsafe_code)]
// Standard output is written through `output::out!`, which ends the command
// quietly when its reader has gone instead of panicking.
#![deny(clippy::print_stdout)]

mod args;
mod client;
mod config;
mod output;

use std::process::ExitCode;
use std::time::Duration;

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};
use tally_kinds::invalid;
use tally_wire::transport::{self, ClientSecurity, ClientTls, ServerTls, Tokens};

use args::{Cli, Command};

// The coordinator makes and drops many small buffers per shard (records,
// batches, protocol messages); mimalloc keeps that cheaper than the system
// allocator, which showed as a quarter of the runner's own time per shard.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Known before parsing: under `--json` a parser error is one JSON object too.
    let json = std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json");
    let (config_path, config) = match config::load() {
        Ok(loaded) => loaded,
        Err(e) => return output::failed(&e.to_string(), 2, json),
    };
    let parsed = config::apply(Cli::command(), &config)
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            // Help and version are answers (exit 0); so is the help a bare
            // `tally` prints, except where one JSON object is promised.
            let answer = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => true,
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => !json,
                _ => false,
            };
            if answer {
                e.exit();
            }
            return output::failed(&args::parser_error_line(&e), 2, json);
        }
    };
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return output::failed(&format!("cannot start the async runtime: {e}"), 1, json);
        }
    };
    let outcome = runtime.block_on(dispatch(cli, config_path));
    // Work still running on the blocking pool (a store that will not close, a
    // kernel that has not seen its cancellation) must not hold the exit up.
    runtime.shutdown_timeout(RUNTIME_EXIT_LIMIT);
    match outcome {
        Ok(code) => code,
        // Nobody reads any more (`| head`): nothing to say, and no one to say it to.
        Err(e) if e.downcast_ref::<output::ReaderGone>().is_some() => {
            ExitCode::from(output::READER_GONE_EXIT)
        }
        Err(e) => output::failed(&output::error_line(&e), output::exit_code(&e), json),
    }
}

/// How long the process waits at exit for blocking work to end.
const RUNTIME_EXIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

fn init_logging(cli: &Cli) {
    // Servers log what they do; one-shot commands only warn.
    let default = match cli.command {
        Command::Coordinator(_) | Command::Worker(_) => "info",
        _ => "warn",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_new(cli.log_level.as_deref().unwrap_or(default))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: a log file or a collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if cli.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn dispatch(cli: Cli, config_path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    let tokens = tokens(&cli)?;
    // Credentials are read only by the commands that use them; a worker
    // presents the worker token, every other command the client token.
    let remote = match &cli.command {
        Command::Run(_) | Command::Coordinator(_) | Command::Completions { .. } => None,
        Command::Worker(_) => Some(client::Remote {
            url: cli.coordinator.clone(),
            security: client_security(&cli, tokens.worker.clone())?,
        }),
        _ => Some(client::Remote {
            url: cli.coordinator.clone(),
            security: client_security(&cli, tokens.client.clone())?,
        }),
    };
    let tls = match &cli.command {
        Command::Coordinator(_) => server_tls(&cli)?,
        _ => None,
    };
    let remote = || remote.clone().expect("client commands have a remote");
    match cli.command {
        Command::Run(run) => client::run(run, json).await,
        Command::Coordinator(args) => serve_coordinator(&args, tls, tokens).await,
        Command::Worker(args) => serve_worker(&args, remote()).await,
        Command::Submit(args) => client::submit(&remote(), args, json).await,
        Command::Status(job) => client::status(&remote(), &job.job, json).await,
        Command::Watch(job) => client::watch(&remote(), &job.job, json).await,
        Command::Result(job) => client::result(&remote(), &job.job, json).await,
        Command::Cancel(job) => client::cancel(&remote(), &job.job, json).await,
        Command::List(args) => client::list(&remote(), &args, json).await,
        Command::Delete(args) => client::delete(&remote(), &args, json).await,
        Command::Events(job) => client::events(&remote(), &job.job, json).await,
        Command::Doctor => client::doctor(&remote(), config_path.as_deref(), json).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tally", &mut script);
            // A reader that stops early (`| head`) is not an error.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A bearer token: from the file `path`, else from the environment variable `env`.
fn token(path: Option<&std::path::Path>, env: &str) -> anyhow::Result<Option<String>> {
    if let Some(path) = path {
        let text = args::read_bounded(path, MAX_CREDENTIAL_BYTES, "the token file")?;
        let text = String::from_utf8(text)
            .map_err(|_| invalid!("the token file {} is not text", path.display()))?;
        let token = transport::parse_token(text.trim())
            .map_err(|e| invalid!("token file {}: {e}", path.display()))?;
        return Ok(Some(token));
    }
    match std::env::var(env) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(
            transport::parse_token(t.trim()).map_err(|e| invalid!("{env}: {e}"))?,
        )),
        _ => Ok(None),
    }
}

/// The tokens this command uses: the client token (--token-file, TALLY_TOKEN)
/// and the worker token (--worker-token-file, TALLY_WORKER_TOKEN). Read only
/// where needed, so a command never fails over a file it does not use.
fn tokens(cli: &Cli) -> anyhow::Result<Tokens> {
    let client = || token(cli.token_file.as_deref(), "TALLY_TOKEN");
    let worker = || token(cli.worker_token_file.as_deref(), "TALLY_WORKER_TOKEN");
    Ok(match &cli.command {
        Command::Run(_) | Command::Completions { .. } => Tokens::default(),
        Command::Coordinator(_) => Tokens {
            client: client()?,
            worker: worker()?,
        },
        Command::Worker(_) => Tokens {
            client: None,
            worker: worker()?,
        },
        _ => Tokens {
            client: client()?,
            worker: None,
        },
    })
}

/// Largest token or PEM file read: credentials are small, and a path such as
/// `/dev/zero` must not be read for gigabytes.
const MAX_CREDENTIAL_BYTES: u64 = 1 << 20;

fn read_pem(path: &std::path::Path, what: &str) -> anyhow::Result<Vec<u8>> {
    args::read_bounded(path, MAX_CREDENTIAL_BYTES, &format!("the {what}"))
}

fn client_security(cli: &Cli, token: Option<String>) -> anyhow::Result<ClientSecurity> {
    let identity = match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Some((
            read_pem(cert, "TLS certificate")?,
            read_pem(key, "TLS key")?,
        )),
        _ => None,
    };
    Ok(ClientSecurity {
        token,
        tls: ClientTls {
            ca: cli
                .tls_ca
                .as_deref()
                .map(|p| read_pem(p, "CA certificate"))
                .transpose()?,
            identity,
            domain: cli.tls_domain.clone(),
        },
    })
}

fn server_tls(cli: &Cli) -> anyhow::Result<Option<ServerTls>> {
    match (&cli.tls_cert, &cli.tls_key) {
        (Some(cert), Some(key)) => Ok(Some(ServerTls {
            cert: read_pem(cert, "TLS certificate")?,
            key: read_pem(key, "TLS key")?,
            client_ca: cli
                .tls_ca
                .as_deref()
                .map(|p| read_pem(p, "client CA certificate"))
                .transpose()?,
        })),
        _ if cli.tls_ca.is_some() => Err(invalid!(
            "--tls-ca on the coordinator requires client certificates, which needs TLS: give --tls-cert and --tls-key too"
        )
        .into()),
        _ => Ok(None),
    }
}

/// SIGINT and SIGTERM, caught from the moment this is created (so one that
/// arrives before anyone waits is not lost, nor fatal), delivered one by one.
pub struct Interrupts {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Interrupts {
    pub fn new() -> anyhow::Result<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next SIGINT or SIGTERM.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Refuses to serve beyond this host with an API that has no authentication,
/// unless `--insecure` says that is meant: then anyone who reaches the port
/// could submit and cancel jobs, or act as a worker.
fn check_exposure(
    args: &args::CoordinatorArgs,
    tokens: &Tokens,
    tls: Option<&ServerTls>,
) -> anyhow::Result<()> {
    let client_certificates = tls.is_some_and(|t| t.client_ca.is_some());
    let open: Vec<&str> = [
        (
            tokens.client.is_none(),
            "the job API (--token-file or TALLY_TOKEN)",
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
fn security_summary(tokens: &Tokens, tls: Option<&ServerTls>) -> String {
    let client_certificates = tls.is_some_and(|t| t.client_ca.is_some());
    let guard = |token: &Option<String>| match token {
        Some(_) => "needs a token",
        None if client_certificates => "needs only a client certificate",
        None => "open",
    };
    let tls = match tls {
        Some(tls) if tls.client_ca.is_some() => "TLS, client certificates required",
        Some(_) => "TLS",
        None => "no TLS",
    };
    format!(
        "job API {}, worker API {}; {tls}",
        guard(&tokens.client),
        guard(&tokens.worker)
    )
}

async fn serve_coordinator(
    args: &args::CoordinatorArgs,
    tls: Option<ServerTls>,
    tokens: Tokens,
) -> anyhow::Result<ExitCode> {
    let mut config =
        tally_coordinator::CoordinatorConfig::new(args.listen, Some(args.data.clone()));
    check_exposure(args, &tokens, tls.as_ref())?;
    let secured = security_summary(&tokens, tls.as_ref());
    config.tokens = tokens;
    config.tls = tls;
    config.http = args.http;
    config.recover = args.recover;
    config.retain_finished = args.retain_finished;
    config.exit_after_flushes = args.exit_after_flushes;
    config.stage_store = args.stage_store.clone();
    config.stage_sweep_every = args.stage_sweep_every;
    config.new_stage_prefix = args.new_stage_prefix;
    config.stage_owner_renew_every = args.stage_owner_renew_every;
    let mut coordinator = tally_coordinator::start(config).await?;
    eprintln!(
        "coordinator listening on {} (data in {}; {secured})",
        coordinator.addr,
        args.data.display()
    );
    if let Some(http) = coordinator.http_addr {
        eprintln!("status page http://{http}/ and metrics http://{http}/metrics");
    }
    tokio::select! {
        r = coordinator.wait() => r?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            coordinator.shutdown().await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve_worker(args: &args::WorkerArgs, remote: client::Remote) -> anyhow::Result<ExitCode> {
    let mut config = tally_worker::WorkerConfig::new(remote.url);
    config.security = remote.security;
    if let Some(threads) = args.threads {
        config.threads = threads;
        config.slots = threads;
    }
    if let Some(slots) = args.slots {
        config.slots = slots;
    }
    if let Some(id) = &args.id {
        config.worker_id = id.clone();
    }
    config.drain_timeout = Duration::from_secs(args.drain_seconds);
    config.shard_delay = Duration::from_millis(args.shard_delay_ms);
    config.corrupt_results = args.corrupt_results;
    config.pause_after_checkpoint = Duration::from_millis(args.pause_after_checkpoint_ms);
    config.pause_mid_upload = Duration::from_millis(args.pause_mid_upload_ms);
    config.http = args.http;
    config.allow_wasm = args.allow_wasm;
    if let Some(fuel) = args.wasm_fuel {
        config.wasm_limits.fuel = fuel;
    }
    if let Some(memory) = args.wasm_memory {
        config.wasm_limits.memory_bytes = usize::try_from(memory).unwrap_or(usize::MAX);
    }
    if let Some(budget) = args.memory_budget {
        config.memory_budget = budget;
    }
    config.checkpoint_interval = Duration::from_millis(args.checkpoint_ms);
    eprintln!(
        "worker {} serving {} with {} slot(s), {} thread(s), a memory budget of {}",
        config.worker_id,
        config.coordinator,
        config.slots,
        config.threads,
        tally_kinds::kind::format_bytes(config.memory_budget)
    );
    let stats = tally_worker::run(config, shutdown_signal()).await?;
    tracing::info!(
        completed = stats
            .shards_completed
            .load(std::sync::atomic::Ordering::Relaxed),
        "worker stopped"
    );
    Ok(ExitCode::SUCCESS)
}
