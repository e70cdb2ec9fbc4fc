//! The commands of `tally`, one module each, and the dispatch to them. Each
//! command module holds its own flags and how it runs; this one holds the
//! root parser, the list of commands, and what each is handed: the
//! credentials it uses and the coordinator it talks to.

mod cancel;
mod completions;
mod coordinator;
mod delete;
mod doctor;
mod events;
mod list;
mod result;
mod run;
mod status;
mod submit;
mod watch;
mod whoami;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use tally_kinds as kinds;

use crate::credentials;
use crate::flags::GlobalArgs;

/// What `tally --help` says first: every kind of the registry.
fn about() -> String {
    format!(
        "Exact combinatorial counts, distributed. Kinds: {} (tally run KIND --help)",
        kinds::names().join(", ")
    )
}

/// The command line: the global flags and one command.
#[derive(Parser, Debug)]
#[command(
    name = "tally",
    version,
    about = about(),
    after_help = "Examples:\n  tally run hex --side 8\n  tally coordinator --listen 0.0.0.0:7878 --data /var/lib/tally\n  tally worker --coordinator http://coord:7878\n  tally submit kayles --pins 1000\n  tally watch job-000001"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The commands; each one's help is the comment above it.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a job to completion on this machine (embedded coordinator and workers).
    #[command(
        after_help = "Examples:\n  tally run hex --side 11\n  tally run kayles --pins 1000 --digits 9\n  tally run sliders\n  tally run hex --side 8 --workers 2 --data ./tally-data"
    )]
    Run(run::RunArgs),
    /// Serve the coordinator: job and worker gRPC services backed by a sled store.
    #[command(
        after_help = "Example:\n  tally coordinator --listen 0.0.0.0:7878 --data /var/lib/tally"
    )]
    Coordinator(coordinator::CoordinatorArgs),
    /// Run a worker that leases shards from a coordinator.
    #[command(after_help = "Example:\n  tally worker --coordinator http://coord:7878 --slots 2")]
    Worker(worker::WorkerArgs),
    /// Submit a job; prints the job id as the last line.
    #[command(
        after_help = "Examples:\n  tally submit hex --side 9\n  tally submit kayles --pins 100000 --priority 5\n  tally submit --spec-file job.json"
    )]
    Submit(submit::SubmitArgs),
    /// Show a job's state, progress, elapsed time and ETA.
    #[command(after_help = "Example:\n  tally status job-000001 --json")]
    Status(JobArg),
    /// Follow a job with a progress bar until it finishes; prints its answer.
    #[command(after_help = "Example:\n  tally watch job-000001")]
    Watch(JobArg),
    /// Print a finished job's answer.
    #[command(after_help = "Example:\n  tally result job-000001")]
    Result(JobArg),
    /// Cancel a queued or running job.
    #[command(after_help = "Example:\n  tally cancel job-000001")]
    Cancel(JobArg),
    /// Delete a finished job: its shards, events, stage data and checkpoints.
    /// Its id is never given again.
    #[command(
        after_help = "Examples:\n  tally delete job-000001\n  tally delete job-000002 --force   # cancel it first if it is running"
    )]
    Delete(delete::DeleteArgs),
    /// List jobs in submission order, a page at a time.
    #[command(
        after_help = "Examples:\n  tally list\n  tally list --state running --state queued --kind hex\n  tally list --limit 20 --page-token 20 --json\n  tally list --all"
    )]
    List(list::ListArgs),
    /// Print a job's durable event log (leases, accepted results, stages), or
    /// with --audit the audit log (submissions, cancellations, deletions,
    /// refusals: all of it for an admin, a user's own entries for a user).
    #[command(after_help = "Examples:\n  tally events job-000001\n  tally events --audit")]
    Events(events::EventsArgs),
    /// Print who the client token stands for: name, role, fair-share weight,
    /// quotas, and what their jobs hold and have used.
    #[command(after_help = "Example:\n  tally whoami --json")]
    Whoami,
    /// Print the SHA-256 of the client token (TALLY_TOKEN or --token-file) as
    /// a users file takes it; reads no other file and calls no coordinator.
    #[command(
        name = "hash-token",
        after_help = "Example:\n  head -c 32 /dev/urandom | base64 > alice.token\n  tally hash-token --token-file alice.token"
    )]
    HashToken,
    /// Check the setup: config file, coordinator reachable, token accepted,
    /// versions, live workers.
    #[command(
        after_help = "Example:\n  TALLY_TOKEN_FILE=/etc/tally/token tally doctor --coordinator https://coord:7878"
    )]
    Doctor,
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  tally completions bash > /etc/bash_completion.d/tally\n  tally completions zsh > ~/.zfunc/_tally\n  tally completions fish > ~/.config/fish/completions/tally.fish"
    )]
    Completions { shell: clap_complete::Shell },
}

/// The one argument of the commands about one job.
#[derive(Args, Debug)]
pub struct JobArg {
    /// The job id, as printed by submit.
    pub job: String,
}

impl Command {
    /// Whether the command is a long-running server (the coordinator or a
    /// worker) rather than a command that runs once.
    pub fn serves(&self) -> bool {
        matches!(self, Command::Coordinator(_) | Command::Worker(_))
    }
}

/// Runs the command. Each reads only the credentials it uses, before it
/// starts: a worker presents the worker token, the other clients the client
/// token, the coordinator requires both; `run` and `completions` need none.
pub async fn dispatch(cli: Cli, config_path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let Cli { global, command } = cli;
    let json = global.json;
    let client = || credentials::client_remote(&global);
    match command {
        Command::Run(args) => run::execute(args, json).await,
        Command::Coordinator(args) => {
            let tokens = credentials::server_tokens(&global)?;
            let tls = credentials::server_tls(&global)?;
            coordinator::execute(&args, tokens, tls).await
        }
        Command::Worker(args) => worker::execute(&args, credentials::worker_remote(&global)?).await,
        Command::Submit(args) => submit::execute(&client()?, args, json).await,
        Command::Status(job) => status::execute(&client()?, &job.job, json).await,
        Command::Watch(job) => watch::execute(&client()?, &job.job, json).await,
        Command::Result(job) => result::execute(&client()?, &job.job, json).await,
        Command::Cancel(job) => cancel::execute(&client()?, &job.job, json).await,
        Command::List(args) => list::execute(&client()?, &args, json).await,
        Command::Delete(args) => delete::execute(&client()?, &args, json).await,
        Command::Events(args) => events::execute(&client()?, &args, json).await,
        Command::Whoami => whoami::execute(&client()?, json).await,
        Command::HashToken => whoami::hash_token(&global, json),
        Command::Doctor => doctor::execute(&client()?, config_path.as_deref(), json).await,
        Command::Completions { shell } => completions::execute(shell, Cli::command()),
    }
}
