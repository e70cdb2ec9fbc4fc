//! Command-line arguments of `tally`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tally_common::spec::{
    BlocksSpec, HexPlan, HexSpec, JobSpec, KaylesSpec, KindSpec, PegsSpec, SlidersSpec,
};
use tally_common::{hex, kayles, sliders};

pub const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7878";

#[derive(Parser, Debug)]
#[command(
    name = "tally",
    version,
    about = "Exact combinatorial counts, distributed: Hex games, fair Kayles rows, shortest slider sequences",
    after_help = "Examples:\n  tally run hex --side 8\n  tally coordinator --listen 0.0.0.0:7878 --data /var/lib/tally\n  tally worker --coordinator http://coord:7878\n  tally submit kayles --pins 1000\n  tally watch job-000001"
)]
pub struct Cli {
    /// Coordinator URL for client and worker commands.
    #[arg(long, global = true, env = "TALLY_COORDINATOR", default_value = DEFAULT_COORDINATOR)]
    pub coordinator: String,
    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log level (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, global = true, env = "TALLY_LOG")]
    pub log_level: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
    /// File holding the shared bearer token. The coordinator requires it on
    /// every call; clients and workers send it. Env TALLY_TOKEN gives the token
    /// itself instead.
    #[arg(long, global = true, env = "TALLY_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// PEM CA certificate: clients trust it for the coordinator's certificate;
    /// the coordinator requires client certificates signed by it (mutual TLS).
    #[arg(long, global = true, env = "TALLY_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,
    /// PEM certificate: the coordinator's server certificate, or a client's
    /// certificate for mutual TLS. Needs --tls-key.
    #[arg(
        long,
        global = true,
        env = "TALLY_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "TALLY_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Server name to verify in the coordinator's certificate, if not the URL's host.
    #[arg(long, global = true, env = "TALLY_TLS_DOMAIN", value_name = "NAME")]
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
    /// List all jobs.
    #[command(after_help = "Example:\n  tally list --json")]
    List,
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
pub struct JobArg {
    /// The job id, as printed by submit.
    pub job: String,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// In-process workers.
    #[arg(long, global = true, default_value_t = 1)]
    pub workers: usize,
    /// Compute threads (and concurrent shards) per worker; default: all cores.
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    /// Keep the job's store here (default: a temporary directory).
    #[arg(long, global = true)]
    pub data: Option<PathBuf>,
    /// Compute in this process with the kernel alone, without the runner.
    #[arg(long, global = true)]
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
    #[arg(long, global = true)]
    pub spec_file: Option<PathBuf>,
    #[command(flatten)]
    pub options: RunnerArgs,
    #[command(subcommand)]
    pub kind: Option<KindArgs>,
}

#[derive(Args, Debug)]
pub struct RunnerArgs {
    /// Higher-priority jobs are leased first (-1000 to 1000).
    #[arg(long, global = true, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// Failed attempts of one shard before the job fails.
    #[arg(long, global = true)]
    pub max_attempts: Option<u32>,
    /// Lease time-to-live in milliseconds.
    #[arg(long, global = true)]
    pub lease_ttl_ms: Option<u64>,
    /// Run even if the resource estimate says the job does not fit.
    #[arg(long, global = true)]
    pub force: bool,
    /// Compute every shard on this many different workers (1 to 3) and fail
    /// the attempt when their results differ.
    #[arg(long, global = true)]
    pub replicas: Option<u32>,
}

#[derive(Subcommand, Debug)]
pub enum KindArgs {
    /// Number of Hex games on a side x side board, modulo a prime.
    Hex(HexArgs),
    /// Fair Partisan Kayles rows of n pins, last digits.
    Kayles(KaylesArgs),
    /// Sum of the checksums of all shortest slider sequences.
    Sliders(SlidersArgs),
    /// Configurations a sliding-block puzzle reaches (exact).
    #[command(
        after_help = "Examples:\n  tally run blocks                      # Project Euler 766\n  tally run blocks --puzzle my.blocks"
    )]
    Blocks(BlocksArgs),
    /// Number of peg solitaire solutions (exact).
    #[command(
        after_help = "Examples:\n  tally run pegs --board triangle:5 --start 1\n  tally run pegs --board english --end 17\n  tally submit pegs --board triangle:6 --start 4"
    )]
    Pegs(PegsArgs),
}

#[derive(Args, Debug)]
pub struct BlocksArgs {
    /// Puzzle file (format in the README). Default: the Project Euler 766 puzzle.
    #[arg(long, value_name = "FILE")]
    pub puzzle: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PegsArgs {
    /// english (33 holes), french (37) or triangle:N (N = 4 to 7).
    #[arg(long, default_value = "english")]
    pub board: String,
    /// The hole empty at the start, numbered row by row from 1 (default: the
    /// centre; 1 on a triangle).
    #[arg(long)]
    pub start: Option<u32>,
    /// The hole the last peg must end in (default: any).
    #[arg(long)]
    pub end: Option<u32>,
    /// Minimum number of prefix tasks (0 chooses).
    #[arg(long, default_value_t = 0)]
    pub prefixes: u32,
}

#[derive(Args, Debug)]
pub struct HexArgs {
    /// Board side, 1 to 16.
    #[arg(long)]
    pub side: u32,
    /// Prime modulus with side^2 < P < 2^31.
    #[arg(long, default_value_t = hex::DEFAULT_MODULUS)]
    pub modulus: u32,
    /// Shard plan: points (independent shards; the default) or cell-step.
    #[arg(long, default_value = "points")]
    pub plan: String,
    /// Exact count (several primes and the CRT; points plan) instead of a residue.
    #[arg(long)]
    pub exact: bool,
    /// Shards per cell step (default: from the number of frontier states).
    #[arg(long, default_value_t = 0)]
    pub shards_per_step: u32,
}

#[derive(Args, Debug)]
pub struct KaylesArgs {
    /// Number of pins (even).
    #[arg(long)]
    pub pins: u64,
    /// Last digits to compute (1 to 18), printed zero-padded.
    #[arg(long, default_value_t = kayles::DEFAULT_DIGITS)]
    pub digits: u32,
}

#[derive(Args, Debug)]
pub struct SlidersArgs {
    /// Start board, row by row (W empty; R, B, G tiles). Default: Project Euler 244.
    #[arg(long)]
    pub start: Option<String>,
    /// Target board, row by row.
    #[arg(long)]
    pub target: Option<String>,
    #[arg(long, default_value_t = 4)]
    pub rows: u32,
    #[arg(long, default_value_t = 4)]
    pub cols: u32,
    /// Checksum base.
    #[arg(long, default_value_t = sliders::DEFAULT_BASE)]
    pub base: u64,
    /// Checksum modulus.
    #[arg(long, default_value_t = sliders::DEFAULT_MODULUS)]
    pub checksum_modulus: u64,
    /// Minimum number of prefix tasks (default 64).
    #[arg(long, default_value_t = 0)]
    pub prefixes: u32,
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
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// Shards computed at the same time (default: the compute threads).
    #[arg(long)]
    pub slots: Option<usize>,
    /// Compute threads (default: all cores).
    #[arg(long)]
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
    /// Milliseconds between checkpoints of a long shard.
    #[arg(long, default_value_t = 3000)]
    pub checkpoint_ms: u64,
    /// Fault injection for tests: alter every result before reporting it.
    #[arg(long, hide = true)]
    pub corrupt_results: bool,
    /// Fault injection for tests: stall a shard this long after its first checkpoint.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_after_checkpoint_ms: u64,
    /// Address to serve Prometheus `/metrics` on.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
}

impl SpecArgs {
    /// The validated job spec from the kind flags or the spec file.
    pub fn to_spec(&self) -> anyhow::Result<JobSpec> {
        let mut spec = match (&self.spec_file, &self.kind) {
            (Some(_), Some(_)) => {
                anyhow::bail!("give either a job kind with flags or --spec-file, not both")
            }
            (None, None) => {
                anyhow::bail!(
                    "name a job kind (hex, kayles, sliders, pegs, blocks) or give --spec-file"
                )
            }
            (Some(path), None) => read_spec_file(path)?,
            (None, Some(kind)) => JobSpec::new(kind.to_kind()?),
        };
        let o = &self.options;
        spec.options.priority = o.priority.unwrap_or(spec.options.priority);
        spec.options.max_attempts = o.max_attempts.unwrap_or(spec.options.max_attempts);
        spec.options.lease_ttl_ms = o.lease_ttl_ms.unwrap_or(spec.options.lease_ttl_ms);
        spec.options.force |= o.force;
        spec.options.replicas = o.replicas.unwrap_or(spec.options.replicas);
        spec.validate()?;
        Ok(spec)
    }
}

fn read_spec_file(path: &std::path::Path) -> anyhow::Result<JobSpec> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let is_toml = path.extension().is_some_and(|e| e == "toml");
    let spec: JobSpec = if is_toml {
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    } else {
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    };
    Ok(spec)
}

impl KindArgs {
    pub fn to_kind(&self) -> anyhow::Result<KindSpec> {
        Ok(match self {
            KindArgs::Hex(h) => KindSpec::Hex(HexSpec {
                side: h.side,
                modulus: h.modulus,
                plan: HexPlan::parse(&h.plan)?,
                shards_per_step: h.shards_per_step,
                exact: h.exact,
            }),
            KindArgs::Kayles(k) => KindSpec::Kayles(KaylesSpec {
                pins: k.pins,
                digits: k.digits,
            }),
            KindArgs::Sliders(s) => {
                let defaults = sliders::SliderParams::default();
                let (start, target) = match (&s.start, &s.target) {
                    (Some(a), Some(b)) => (a.clone(), b.clone()),
                    (None, None) if s.rows == defaults.rows && s.cols == defaults.cols => {
                        (defaults.start.clone(), defaults.target.clone())
                    }
                    (None, None) => anyhow::bail!(
                        "the default boards are 4 x 4; give --start and --target for a {} x {} board",
                        s.rows,
                        s.cols
                    ),
                    _ => anyhow::bail!("give both --start and --target, or neither"),
                };
                KindSpec::Sliders(SlidersSpec {
                    board: sliders::SliderParams {
                        rows: s.rows,
                        cols: s.cols,
                        start,
                        target,
                        base: s.base,
                        modulus: s.checksum_modulus,
                    },
                    prefixes: s.prefixes,
                })
            }
            KindArgs::Blocks(b) => KindSpec::Blocks(BlocksSpec {
                puzzle: match &b.puzzle {
                    None => tally_common::blocks::PE766.to_string(),
                    Some(path) => std::fs::read_to_string(path).map_err(|e| {
                        anyhow::anyhow!("cannot read the puzzle {}: {e}", path.display())
                    })?,
                },
            }),
            KindArgs::Pegs(p) => KindSpec::Pegs(PegsSpec {
                board: p.board.trim().to_ascii_lowercase(),
                start: p.start,
                end: p.end,
                prefixes: p.prefixes,
            }),
        })
    }
}
