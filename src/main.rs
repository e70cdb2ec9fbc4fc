//! `tally`: the one command-line binary. Runs jobs on an embedded cluster, serves
//! the coordinator, runs workers, and talks to a coordinator as a client.
//!
//! Contract: the answer is the last line of stdout, alone; progress and logs go
//! to stderr; `--json` prints one JSON object instead.

mod args;
mod client;
mod output;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", output::error_line(&e));
            ExitCode::from(output::exit_code(&e))
        }
    }
}

fn init_logging(cli: &Cli) {
    // Servers log what they do; one-shot commands only warn.
    let default = match cli.command {
        Command::Coordinator(_) | Command::Worker(_) => "info",
        _ => "warn",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_new(cli.log_level.as_deref().unwrap_or(default))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if cli.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Run(run) => client::run(run, json).await,
        Command::Coordinator(args) => serve_coordinator(args).await,
        Command::Worker(args) => serve_worker(args, cli.coordinator).await,
        Command::Submit(args) => client::submit(&cli.coordinator, args, json).await,
        Command::Status(job) => client::status(&cli.coordinator, &job.job, json).await,
        Command::Watch(job) => client::watch(&cli.coordinator, &job.job, json).await,
        Command::Result(job) => client::result(&cli.coordinator, &job.job, json).await,
        Command::Cancel(job) => client::cancel(&cli.coordinator, &job.job, json).await,
        Command::List => client::list(&cli.coordinator, json).await,
        Command::Events(job) => client::events(&cli.coordinator, &job.job, json).await,
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

async fn serve_coordinator(args: args::CoordinatorArgs) -> anyhow::Result<ExitCode> {
    let config = tally_coordinator::CoordinatorConfig::new(args.listen, Some(args.data.clone()));
    let mut coordinator = tally_coordinator::start(config).await?;
    eprintln!(
        "coordinator listening on {} (data in {})",
        coordinator.addr,
        args.data.display()
    );
    tokio::select! {
        r = coordinator.wait() => r?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            coordinator.shutdown().await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve_worker(args: args::WorkerArgs, coordinator: String) -> anyhow::Result<ExitCode> {
    let mut config = tally_worker::WorkerConfig::new(coordinator);
    if let Some(threads) = args.threads {
        anyhow::ensure!(
            (1..=1024).contains(&threads),
            "--threads must be between 1 and 1024"
        );
        config.threads = threads;
        config.slots = threads;
    }
    if let Some(slots) = args.slots {
        anyhow::ensure!(
            (1..=1024).contains(&slots),
            "--slots must be between 1 and 1024"
        );
        config.slots = slots;
    }
    if let Some(id) = args.id {
        config.worker_id = id;
    }
    config.drain_timeout = Duration::from_secs(args.drain_seconds);
    config.shard_delay = Duration::from_millis(args.shard_delay_ms);
    config.corrupt_results = args.corrupt_results;
    anyhow::ensure!(
        args.checkpoint_ms >= 10,
        "--checkpoint-ms must be at least 10"
    );
    config.checkpoint_interval = Duration::from_millis(args.checkpoint_ms);
    eprintln!(
        "worker {} serving {} with {} slot(s), {} thread(s)",
        config.worker_id, config.coordinator, config.slots, config.threads
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
