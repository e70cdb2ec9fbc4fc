//! Flags that more than one command takes: the global connection and output
//! flags, the job-spec flags of `run` and `submit`, and the bounds of counts.
//! Only their declarations: what the spec flags build is `spec_input`'s.

use std::path::PathBuf;

use clap::Args;
use tally_kinds as kinds;

const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7878";

/// Most compute threads (and shard slots) a worker takes.
pub const MAX_THREADS: u64 = 1024;

/// A count from 1 to `max`, refused by the parser otherwise.
pub fn count_to(max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=max)
}

/// The flags every command takes (`global`): where the coordinator is, the
/// credentials to present, and how to print and log.
#[derive(Args, Debug)]
pub struct GlobalArgs {
    /// Coordinator URL for client and worker commands.
    #[arg(help_heading = "Connection options", long, global = true, env = "TALLY_COORDINATOR", default_value = DEFAULT_COORDINATOR)]
    pub coordinator: String,
    /// Print one JSON object instead of text.
    #[arg(help_heading = "Output options", long, global = true)]
    pub json: bool,
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(
        help_heading = "Output options",
        long,
        global = true,
        env = "TALLY_LOG"
    )]
    pub log_level: Option<String>,
    /// Log format on stderr.
    #[arg(
        help_heading = "Output options",
        long,
        global = true,
        value_parser = ["text", "json"],
        default_value = "text"
    )]
    pub log_format: String,
    /// File holding the client token. The coordinator requires it on the job
    /// API (submit, watch, cancel, ...); `tally` commands send it. Env
    /// TALLY_TOKEN gives the token itself instead.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_TOKEN_FILE",
        value_name = "PATH"
    )]
    pub token_file: Option<PathBuf>,
    /// File holding the worker token, distinct from the client token. The
    /// coordinator requires it on the worker API (register, lease, report);
    /// `tally worker` sends it. Env TALLY_WORKER_TOKEN gives the token itself.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_WORKER_TOKEN_FILE",
        value_name = "PATH"
    )]
    pub worker_token_file: Option<PathBuf>,
    /// File holding the autoscaler's token: the coordinator's external scaler
    /// service (KEDA's) takes it instead of the client token, in the
    /// trigger's `token` metadata or as a bearer token. Env TALLY_SCALER_TOKEN
    /// gives the token itself.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_SCALER_TOKEN_FILE",
        value_name = "PATH"
    )]
    pub scaler_token_file: Option<PathBuf>,
    /// PEM CA certificate: clients trust it for the coordinator's certificate;
    /// the coordinator requires client certificates signed by it (mutual TLS).
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_TLS_CA",
        value_name = "PATH"
    )]
    pub tls_ca: Option<PathBuf>,
    /// PEM certificate: the coordinator's server certificate, or a client's
    /// certificate for mutual TLS. Needs --tls-key.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Server name to verify in the coordinator's certificate, if not the URL's host.
    #[arg(
        help_heading = "Connection options",
        long,
        global = true,
        env = "TALLY_TLS_DOMAIN",
        value_name = "NAME"
    )]
    pub tls_domain: Option<String>,
}

/// What a job is: a kind and its own flags, or a spec file; and the runner
/// options that override the spec's.
#[derive(Args, Debug)]
pub struct SpecArgs {
    /// Read the job spec from a JSON or TOML file instead of flags.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub spec_file: Option<PathBuf>,
    /// With --spec-file: a file to send with the job, which the spec names
    /// by its SHA-256 (a wasm job's `module_sha256`); repeatable.
    #[arg(
        help_heading = "Runner options",
        long,
        global = true,
        value_name = "FILE",
        requires = "spec_file"
    )]
    pub attach: Vec<PathBuf>,
    #[command(flatten)]
    pub options: RunnerArgs,
    #[command(subcommand)]
    pub kind: Option<KindArgs>,
}

/// The runner options of a job spec, each overriding the spec file's.
#[derive(Args, Debug)]
pub struct RunnerArgs {
    /// A user's higher-priority jobs are leased first (-1000 to 1000); free
    /// slots go to users by the fair share.
    #[arg(
        help_heading = "Runner options",
        long,
        global = true,
        allow_negative_numbers = true
    )]
    pub priority: Option<i32>,
    /// Failed attempts of one shard before the job fails.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub max_attempts: Option<u32>,
    /// Lease time-to-live in milliseconds.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub lease_ttl_ms: Option<u64>,
    /// Run even if the resource estimate says the job does not fit.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub force: bool,
    /// Compute every shard on this many different workers (1 to 3) and fail
    /// the attempt when their results differ.
    #[arg(help_heading = "Runner options", long, global = true)]
    pub replicas: Option<u32>,
    /// The most shards of the job leased at once across the cluster, so that
    /// a large job leaves slots to the others (default: no cap).
    #[arg(help_heading = "Runner options", long, global = true, value_name = "N")]
    pub max_slots: Option<u32>,
}

/// A kind's command whose required flags a spec file may give instead
/// (`tally run hex --spec-file job.json`): the file is then held to the same
/// rules (`spec_input`).
fn spec_file_satisfies_required(command: clap::Command) -> clap::Command {
    let required: Vec<clap::Id> = command
        .get_arguments()
        .filter(|arg| arg.is_required_set())
        .map(|arg| arg.get_id().clone())
        .collect();
    required.into_iter().fold(command, |command, id| {
        command.mut_arg(id, |arg| {
            arg.required(false).required_unless_present("spec_file")
        })
    })
}

/// The kind named on the command line and its own options, parsed by the
/// kind (every kind of the registry is a subcommand).
#[derive(Debug, Clone)]
pub struct KindArgs {
    pub name: String,
    pub matches: clap::ArgMatches,
}

impl clap::FromArgMatches for KindArgs {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        match matches.subcommand() {
            Some((name, sub)) => Ok(KindArgs {
                name: name.to_string(),
                matches: sub.clone(),
            }),
            None => Err(clap::Error::new(clap::error::ErrorKind::MissingSubcommand)),
        }
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = KindArgs::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Subcommand for KindArgs {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        kinds::KINDS.iter().fold(command, |command, kind| {
            command.subcommand(spec_file_satisfies_required(kind.command()))
        })
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        KindArgs::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        kinds::lookup(name).is_ok()
    }
}
