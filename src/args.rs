//! Command-line arguments of `tally`.

use std::path::PathBuf;

use std::path::Path;

use clap::{Args, Parser, Subcommand};
use tally_kinds as kinds;
use tally_kinds::guest::{MAX_MODULE_BYTES, sha256_hex};
use tally_kinds::invalid;
use tally_kinds::kind::FileReader;
use tally_kinds::spec::{JobSpec, RunnerOptions, ValidSpec};

pub const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7878";

/// Most compute threads (and shard slots) a worker takes.
pub const MAX_THREADS: u64 = 1024;

/// Most in-process workers of `tally run`.
const MAX_RUN_WORKERS: u64 = 64;

/// What `tally --help` says first: every kind of the registry.
fn about() -> String {
    format!(
        "Exact combinatorial counts, distributed. Kinds: {} (tally run KIND --help)",
        kinds::names().join(", ")
    )
}

/// A count from 1 to `max`, refused by the parser otherwise.
fn count_to(max: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=max)
}

/// A number of at least `min`, refused by the parser otherwise.
fn at_least(min: u64) -> impl clap::builder::TypedValueParser<Value = u64> {
    use clap::builder::TypedValueParser;
    clap::value_parser!(u64).try_map(move |n| {
        (n >= min)
            .then_some(n)
            .ok_or_else(|| format!("must be at least {min}"))
    })
}

#[derive(Parser, Debug)]
#[command(
    name = "tally",
    version,
    about = about(),
    after_help = "Examples:\n  tally run hex --side 8\n  tally coordinator --listen 0.0.0.0:7878 --data /var/lib/tally\n  tally worker --coordinator http://coord:7878\n  tally submit kayles --pins 1000\n  tally watch job-000001"
)]
pub struct Cli {
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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a job to completion on this machine (embedded coordinator and workers).
    #[command(
        after_help = "Examples:\n  tally run hex --side 11\n  tally run kayles --pins 1000 --digits 9\n  tally run sliders\n  tally run hex --side 8 --workers 2 --data ./tally-data"
    )]
    Run(RunArgs),
    /// Serve the coordinator: job and worker gRPC services backed by a sled store.
    #[command(
        after_help = "Example:\n  tally coordinator --listen 0.0.0.0:7878 --data /var/lib/tally"
    )]
    Coordinator(CoordinatorArgs),
    /// Run a worker that leases shards from a coordinator.
    #[command(after_help = "Example:\n  tally worker --coordinator http://coord:7878 --slots 2")]
    Worker(WorkerArgs),
    /// Submit a job; prints the job id as the last line.
    #[command(
        after_help = "Examples:\n  tally submit hex --side 9\n  tally submit kayles --pins 100000 --priority 5\n  tally submit --spec-file job.json"
    )]
    Submit(SubmitArgs),
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
    Delete(DeleteArgs),
    /// List jobs in submission order, a page at a time.
    #[command(
        after_help = "Examples:\n  tally list\n  tally list --state running --state queued --kind hex\n  tally list --limit 20 --page-token 20 --json\n  tally list --all"
    )]
    List(ListArgs),
    /// Print a job's durable event log (leases, accepted results, stages).
    #[command(after_help = "Example:\n  tally events job-000001")]
    Events(JobArg),
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

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The job id, as printed by submit.
    pub job: String,
    /// Cancel the job first if it is queued or running.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Jobs per page (at most 1000).
    #[arg(long, default_value_t = 100)]
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
    /// Every page, one after another.
    #[arg(long, conflicts_with = "page_token")]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct JobArg {
    /// The job id, as printed by submit.
    pub job: String,
}

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
    #[command(flatten)]
    pub spec: SpecArgs,
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// Submitting again with the same key returns the first job.
    #[arg(long, global = true)]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub spec: SpecArgs,
}

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

#[derive(Args, Debug)]
pub struct RunnerArgs {
    /// Higher-priority jobs are leased first (-1000 to 1000).
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
        kinds::KINDS
            .iter()
            .fold(command, |command, kind| command.subcommand(kind.command()))
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        KindArgs::augment_subcommands(command)
    }

    fn has_subcommand(name: &str) -> bool {
        kinds::lookup(name).is_ok()
    }
}

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
    pub retain_finished: Option<std::time::Duration>,
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
    pub stage_sweep_every: std::time::Duration,
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
    pub stage_owner_renew_every: std::time::Duration,
    /// Fault injection for tests: abort the process right after the N-th
    /// store flush, before any call it covered is answered.
    #[arg(long, hide = true)]
    pub exit_after_flushes: Option<u64>,
}

/// Parses `--stage-store`. A value refused is not echoed whole, as the
/// parser's own message would: it may hold credentials.
#[derive(Clone)]
struct StageStoreParser;

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
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
        source: clap::parser::ValueSource,
    ) -> Result<Self::Value, clap::Error> {
        let refused = |why: String| {
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
            .ok_or_else(|| refused("--stage-store: the value is not UTF-8".into()))?;
        text.parse()
            .map_err(|e: tally_stage::StageError| refused(e.to_string()))
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e} (a duration such as 7d, 12h, 30m or 90s)"))
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Shards computed at the same time, 1 to 1024 (default: the compute threads).
    #[arg(long, value_parser = count_to(MAX_THREADS))]
    pub slots: Option<usize>,
    /// Compute threads, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = count_to(MAX_THREADS))]
    pub threads: Option<usize>,
    /// Worker id (default: host-pid-random).
    #[arg(long)]
    pub id: Option<String>,
    /// Seconds running shards may take to finish after SIGTERM before they are handed back.
    #[arg(long, default_value_t = 30)]
    pub drain_seconds: u64,
    /// Fault injection for tests: hold each lease this long before computing.
    #[arg(long, default_value_t = 0, hide = true)]
    pub shard_delay_ms: u64,
    /// Milliseconds between checkpoints of a long shard (for checkpoints up
    /// to 4 MiB; larger ones, such as hex pass vectors, come proportionally
    /// less often, but at least once a minute). At least 10.
    #[arg(long, default_value_t = 3000, value_parser = at_least(10))]
    pub checkpoint_ms: u64,
    /// Fault injection for tests: alter every result before reporting it.
    #[arg(long, hide = true)]
    pub corrupt_results: bool,
    /// Fault injection for tests: stall a shard this long after its first checkpoint.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_after_checkpoint_ms: u64,
    /// Fault injection for tests: write each stage blob in two parts, pausing this long between them.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_mid_upload_ms: u64,
    /// Address to serve Prometheus `/metrics` on.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Memory the worker's shards may use, e.g. `16GB` or `12GiB`, told to the
    /// coordinator: it gives this worker only as many shards of a job at once
    /// as their estimate fits, and cuts hex points shards to the largest
    /// budget. Default: the machine's memory (or its cgroup's limit).
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub memory_budget: Option<u64>,
    /// Run `wasm` jobs: user kernels compiled to WebAssembly, in a sandbox
    /// (no files, network, clock or randomness; memory, fuel and time
    /// limited). Off by default: a module is code whoever may submit jobs
    /// wrote, so the operator chooses the machines that run it.
    #[arg(long)]
    pub allow_wasm: bool,
    /// With --allow-wasm: the fuel a shard may burn (about one unit per
    /// WebAssembly instruction), its CPU-time limit [default: 2^44].
    #[arg(long, value_name = "UNITS", requires = "allow_wasm", value_parser = at_least(1))]
    pub wasm_fuel: Option<u64>,
    /// With --allow-wasm: the most linear memory one shard's instance may
    /// have, e.g. `512MiB` [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, requires = "allow_wasm")]
    pub wasm_memory: Option<u64>,
}

/// A memory size such as `16GB`, `12GiB` or `800MB`, in bytes; at least 64 MB.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|e| format!("{e} (a size such as 16GB, 12GiB or 800MB)"))?;
    if size.as_u64() < 64_000_000 {
        return Err(format!("{text} is less than the 64 MB a worker needs"));
    }
    Ok(size.as_u64())
}

impl RunArgs {
    /// The spec of [`SpecArgs::to_spec`], refused if it asks for more
    /// replicas than this run has workers: they go to different workers, so
    /// the job would wait forever.
    pub fn to_spec(&self) -> anyhow::Result<(ValidSpec, Vec<Vec<u8>>)> {
        let (spec, attachments) = self.spec.to_spec()?;
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

impl SpecArgs {
    /// The checked job spec from the kind flags or the spec file, and the
    /// attachments its flags named (a wasm module), to send with it.
    pub fn to_spec(&self) -> anyhow::Result<(ValidSpec, Vec<Vec<u8>>)> {
        let files = Files::default();
        let mut spec = match (&self.spec_file, &self.kind) {
            (Some(_), Some(_)) => {
                return Err(
                    invalid!("give either a job kind with flags or --spec-file, not both").into(),
                );
            }
            (None, None) => {
                return Err(invalid!(
                    "name a job kind ({}) or give --spec-file",
                    kinds::names().join(", ")
                )
                .into());
            }
            (Some(path), None) => read_spec_file(path)?,
            (None, Some(kind)) => JobSpec {
                kind: kind.name.clone(),
                params: kinds::lookup(&kind.name)?.params_from_matches(&kind.matches, &files)?,
                options: RunnerOptions::default(),
            },
        };
        let o = &self.options;
        spec.options.priority = o.priority.unwrap_or(spec.options.priority);
        spec.options.max_attempts = o.max_attempts.unwrap_or(spec.options.max_attempts);
        spec.options.lease_ttl_ms = o.lease_ttl_ms.unwrap_or(spec.options.lease_ttl_ms);
        spec.options.force |= o.force;
        spec.options.replicas = o.replicas.unwrap_or(spec.options.replicas);
        for path in &self.attach {
            files.attach(path)?;
        }
        let attachments = files.attachments.into_inner().unwrap_or_default();
        Ok((ValidSpec::new(spec)?, attachments))
    }
}

/// Largest file a kind's option may name (a puzzle, say): read no further.
const MAX_KIND_FILE_BYTES: u64 = 1 << 20;

/// Reads the files kinds' options name, up to [`MAX_KIND_FILE_BYTES`], and
/// keeps those that go with the job as attachments.
#[derive(Default)]
struct Files {
    attachments: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl FileReader for Files {
    fn read_to_string(&self, path: &Path) -> tally_kinds::Result<String> {
        let bytes = read_bounded(path, MAX_KIND_FILE_BYTES, "")
            .map_err(|e| invalid!("{}", crate::output::error_line(&e)))?;
        String::from_utf8(bytes).map_err(|_| invalid!("{} is not UTF-8 text", path.display()))
    }

    fn attach(&self, path: &Path) -> tally_kinds::Result<String> {
        let bytes = read_bounded(path, MAX_MODULE_BYTES as u64, "")
            .map_err(|e| invalid!("{}", crate::output::error_line(&e)))?;
        let sha256 = sha256_hex(&bytes);
        self.attachments.lock().unwrap().push(bytes);
        Ok(sha256)
    }
}

/// Reads at most `limit` bytes of `path` (`what` names it in messages); a
/// longer file is refused without reading the rest, so `/dev/zero` costs
/// nothing. Errors are bad input.
pub fn read_bounded(path: &Path, limit: u64, what: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let named = if what.is_empty() {
        path.display().to_string()
    } else {
        format!("{what} {}", path.display())
    };
    let cannot = |e: std::io::Error| invalid!("cannot read {named}: {e}");
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(invalid!("{named} is larger than {limit} bytes").into());
    }
    Ok(bytes)
}

/// A parser error as one line: clap's message and tips without the usage,
/// and where to read more (`see 'tally run hex --help'`).
pub fn parser_error_line(error: &clap::Error) -> String {
    let path = command_path();
    if error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return format!("'{path}' needs a command; see '{path} --help'");
    }
    let mut line = String::new();
    for text in error.render().to_string().lines().map(str::trim) {
        if text.starts_with("Usage:") {
            break;
        }
        if text.is_empty() || text.starts_with("For more information") {
            continue;
        }
        match text.strip_prefix("tip: ") {
            Some(tip) => line += &format!("; {tip}"),
            None if line.is_empty() => line += text.strip_prefix("error: ").unwrap_or(text),
            None => line += &format!(" {text}"),
        }
    }
    format!("{line}; see '{path} --help'")
}

/// The subcommands this process was given, from `tally` on (`tally run hex`).
fn command_path() -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut path = vec![command.get_name().to_string()];
    for arg in std::env::args_os().skip(1) {
        let Some(arg) = arg.to_str() else { continue };
        if arg == "--" {
            break;
        }
        if let Some(sub) = command.find_subcommand(arg).cloned() {
            path.push(sub.get_name().to_string());
            command = sub;
        }
    }
    path.join(" ")
}

fn read_spec_file(path: &std::path::Path) -> anyhow::Result<JobSpec> {
    let text = Files::default().read_to_string(path)?;
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    // A spec file that does not parse is bad input (exit code 2), like a bad flag.
    let spec: JobSpec = if is_toml {
        toml::from_str(&text).map_err(|e| invalid!("{}: {e}", path.display()))?
    } else {
        serde_json::from_str(&text).map_err(|e| invalid!("{}: {e}", path.display()))?
    };
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::parse_memory;

    #[test]
    fn memory_sizes_parse_in_decimal_and_binary_units_and_tiny_ones_are_refused() {
        assert_eq!(parse_memory("16GB"), Ok(16_000_000_000));
        assert_eq!(parse_memory("12GiB"), Ok(12 << 30));
        assert_eq!(parse_memory("800 MB"), Ok(800_000_000));
        let tiny = parse_memory("1MB").unwrap_err();
        assert!(tiny.contains("less than the 64 MB"), "{tiny}");
        let bad = parse_memory("lots").unwrap_err();
        assert!(bad.contains("a size such as"), "{bad}");
    }
}
