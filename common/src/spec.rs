//! Job specifications: what to count (the kind and its parameters) and how to run
//! it (priority, attempts, lease TTL). Specs come from CLI flags, from TOML/JSON
//! files or from gRPC, are normalised (defaults filled in) and validated here, in
//! one place, before anything is stored.

use serde::{Deserialize, Serialize};

use crate::{Result, blocks, hex, invalid, kayles, pegs, proto, sliders};

/// Upper bounds that keep one job within what a cluster can hold.
pub const MAX_PRIORITY: i32 = 1_000;
pub const MAX_ATTEMPTS: u32 = 100;
/// Most workers that may be asked to compute the same shard.
pub const MAX_REPLICAS: u32 = 3;
pub const MIN_LEASE_TTL_MS: u64 = 500;
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;
pub const MAX_SHARDS_PER_STEP: u32 = 1_024;
pub const MAX_PREFIX_TASKS: u32 = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HexPlan {
    /// Independent shards, each evaluating the full crossing polynomial at a few
    /// points; the coordinator solves for the counts. Nothing is exchanged
    /// between shards, so it scales with workers.
    #[default]
    Points,
    /// State ranges per cell step, a barrier per step; the frontier vector passes
    /// through the coordinator at every step.
    CellStep,
}

impl HexPlan {
    pub fn name(self) -> &'static str {
        match self {
            HexPlan::Points => "points",
            HexPlan::CellStep => "cell-step",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<HexPlan> {
        match name {
            "" => Ok(HexPlan::default()),
            "points" => Ok(HexPlan::Points),
            "cell-step" => Ok(HexPlan::CellStep),
            other => Err(invalid!(
                "unknown hex plan {other:?}: expected \"points\" or \"cell-step\""
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HexSpec {
    pub side: u32,
    #[serde(default = "default_hex_modulus")]
    pub modulus: u32,
    #[serde(default)]
    pub plan: HexPlan,
    /// Cell-step plan: shards per cell step; 0 chooses from the number of states.
    #[serde(default)]
    pub shards_per_step: u32,
    /// Points plan: the exact count (several primes and the CRT) instead of a
    /// residue.
    #[serde(default)]
    pub exact: bool,
}

fn default_hex_modulus() -> u32 {
    hex::DEFAULT_MODULUS
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KaylesSpec {
    pub pins: u64,
    #[serde(default = "default_kayles_digits")]
    pub digits: u32,
}

fn default_kayles_digits() -> u32 {
    kayles::DEFAULT_DIGITS
}

// No deny_unknown_fields: serde does not support it together with flatten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidersSpec {
    #[serde(flatten)]
    pub board: sliders::SliderParams,
    /// Minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PegsSpec {
    /// `english`, `french` or `triangle:N`.
    #[serde(default = "default_peg_board")]
    pub board: String,
    /// The hole empty at the start; `None` is the board's default.
    #[serde(default)]
    pub start: Option<u32>,
    /// The hole the last peg must end in; `None` accepts any.
    #[serde(default)]
    pub end: Option<u32>,
    /// Minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
}

fn default_peg_board() -> String {
    "english".into()
}

/// Longest accepted puzzle text.
pub const MAX_PUZZLE_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksSpec {
    /// The puzzle in the text format of `blocks` (the file's contents).
    #[serde(default = "default_puzzle")]
    pub puzzle: String,
}

fn default_puzzle() -> String {
    blocks::PE766.to_string()
}

/// What to count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum KindSpec {
    Hex(HexSpec),
    Kayles(KaylesSpec),
    Sliders(SlidersSpec),
    Pegs(PegsSpec),
    Blocks(BlocksSpec),
}

/// How to run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerOptions {
    pub priority: i32,
    pub max_attempts: u32,
    pub lease_ttl_ms: u64,
    /// Run even if the resource estimate says the job does not fit.
    pub force: bool,
    /// Distinct workers that must compute each shard and agree on its result.
    pub replicas: u32,
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            priority: 0,
            max_attempts: 3,
            lease_ttl_ms: 15_000,
            force: false,
            replicas: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    #[serde(flatten)]
    pub kind: KindSpec,
    #[serde(default)]
    pub options: RunnerOptions,
}

impl JobSpec {
    pub fn new(kind: KindSpec) -> JobSpec {
        JobSpec {
            kind,
            options: RunnerOptions::default(),
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            KindSpec::Hex(_) => "hex",
            KindSpec::Kayles(_) => "kayles",
            KindSpec::Sliders(_) => "sliders",
            KindSpec::Pegs(_) => "pegs",
            KindSpec::Blocks(_) => "blocks",
        }
    }

    /// A one-line human description, e.g. `hex side 11 mod 1000000007 (cell-step)`.
    pub fn describe(&self) -> String {
        match &self.kind {
            KindSpec::Hex(h) if h.exact => format!("hex side {} exact ({})", h.side, h.plan.name()),
            KindSpec::Hex(h) => {
                format!("hex side {} mod {} ({})", h.side, h.modulus, h.plan.name())
            }
            KindSpec::Kayles(k) => format!("kayles {} pins, {} digits", k.pins, k.digits),
            KindSpec::Sliders(s) => format!(
                "sliders {}x{} {} -> {}",
                s.board.rows, s.board.cols, s.board.start, s.board.target
            ),
            KindSpec::Blocks(b) => match blocks::parse_puzzle(&b.puzzle) {
                Ok(puzzle) => format!("blocks {}", puzzle.describe()),
                Err(_) => "blocks (invalid puzzle)".into(),
            },
            KindSpec::Pegs(p) => {
                let start = p
                    .start
                    .or_else(|| pegs::parse_board(&p.board).ok().map(|b| b.default_start()))
                    .unwrap_or(0);
                match p.end {
                    Some(end) => format!("pegs {} from hole {start} to hole {end}", p.board),
                    None => format!("pegs {} from hole {start}", p.board),
                }
            }
        }
    }

    /// Checks every value; the message names the value and the accepted range.
    pub fn validate(&self) -> Result<()> {
        let o = &self.options;
        // Not `abs()`: it overflows on i32::MIN.
        if !(-MAX_PRIORITY..=MAX_PRIORITY).contains(&o.priority) {
            return Err(invalid!(
                "priority must be between -{MAX_PRIORITY} and {MAX_PRIORITY}, got {}",
                o.priority
            ));
        }
        if !(1..=MAX_ATTEMPTS).contains(&o.max_attempts) {
            return Err(invalid!(
                "max attempts must be between 1 and {MAX_ATTEMPTS}, got {}",
                o.max_attempts
            ));
        }
        if !(1..=MAX_REPLICAS).contains(&o.replicas) {
            return Err(invalid!(
                "replicas must be between 1 and {MAX_REPLICAS}, got {}",
                o.replicas
            ));
        }
        if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&o.lease_ttl_ms) {
            return Err(invalid!(
                "lease TTL must be between {MIN_LEASE_TTL_MS} and {MAX_LEASE_TTL_MS} ms, got {}",
                o.lease_ttl_ms
            ));
        }
        match &self.kind {
            KindSpec::Hex(h) => {
                hex::validate(h.side, h.modulus)?;
                if h.shards_per_step > MAX_SHARDS_PER_STEP {
                    return Err(invalid!(
                        "shards per step must be at most {MAX_SHARDS_PER_STEP}, got {}",
                        h.shards_per_step
                    ));
                }
                if h.exact && h.plan != HexPlan::Points {
                    return Err(invalid!(
                        "exact hex counts need the points plan (--plan points)"
                    ));
                }
                // The points plan evaluates at x = 2, 3, ... below the modulus: a
                // tiny prime may not have enough of them to solve and check.
                if h.plan == HexPlan::Points && !h.exact {
                    let layout = hex::points_layout(h.side, h.modulus);
                    if layout.points.len() <= layout.unknowns {
                        return Err(invalid!(
                            "modulus {} is too small for the points plan of side {}: it has {} evaluation points, the plan needs {}; use a larger prime or the cell-step plan",
                            h.modulus,
                            h.side,
                            layout.points.len(),
                            layout.unknowns + 1
                        ));
                    }
                }
                if !o.force {
                    let estimate = crate::jobs::hex_estimate(h);
                    if estimate.worker_memory_bytes > crate::jobs::WORKER_MEMORY_BUDGET {
                        return Err(invalid!(
                            "{}; this is more than the {} a worker is assumed to have: use the points plan, or --force",
                            estimate.describe(),
                            crate::jobs::format_bytes(crate::jobs::WORKER_MEMORY_BUDGET)
                        ));
                    }
                }
                Ok(())
            }
            KindSpec::Kayles(k) => kayles::validate(k.pins, k.digits),
            KindSpec::Sliders(s) => {
                // On the wire 0 stands for the default base, so a spec file's
                // base 0 would reach the coordinator as 243.
                if s.board.base == 0 {
                    return Err(invalid!(
                        "checksum base must be at least 1, got 0 (0 selects the default, {}, over gRPC)",
                        sliders::DEFAULT_BASE
                    ));
                }
                sliders::validate(&s.board)?;
                if s.prefixes > MAX_PREFIX_TASKS {
                    return Err(invalid!(
                        "prefixes must be at most {MAX_PREFIX_TASKS}, got {}",
                        s.prefixes
                    ));
                }
                Ok(())
            }
            KindSpec::Blocks(b) => {
                if b.puzzle.len() > MAX_PUZZLE_BYTES {
                    return Err(invalid!(
                        "the puzzle is longer than {MAX_PUZZLE_BYTES} bytes"
                    ));
                }
                blocks::parse_puzzle(&b.puzzle).map(|_| ())
            }
            KindSpec::Pegs(p) => {
                pegs::validate(pegs::parse_board(&p.board)?, p.start, p.end)?;
                if p.prefixes > MAX_PREFIX_TASKS {
                    return Err(invalid!(
                        "prefixes must be at most {MAX_PREFIX_TASKS}, got {}",
                        p.prefixes
                    ));
                }
                Ok(())
            }
        }
    }

    /// Parses a spec file: TOML-like `key = value` lines are not supported; JSON is
    /// the file format (`{"kind": "hex", "side": 11}`).
    pub fn from_json(text: &str) -> Result<JobSpec> {
        let spec: JobSpec =
            serde_json::from_str(text).map_err(|e| invalid!("invalid job spec: {e}"))?;
        spec.validate()?;
        Ok(spec)
    }
}

// ------------------------------------------------------------------ proto

impl From<&JobSpec> for proto::JobSpec {
    fn from(spec: &JobSpec) -> proto::JobSpec {
        use proto::job_spec::Kind;
        let kind = match &spec.kind {
            KindSpec::Hex(h) => Kind::Hex(proto::HexSpec {
                side: h.side,
                modulus: h.modulus,
                plan: h.plan.name().to_string(),
                shards_per_step: h.shards_per_step,
                exact: h.exact,
            }),
            KindSpec::Kayles(k) => Kind::Kayles(proto::KaylesSpec {
                pins: k.pins,
                digits: k.digits,
            }),
            KindSpec::Sliders(s) => Kind::Sliders(proto::SlidersSpec {
                rows: s.board.rows,
                cols: s.board.cols,
                start: s.board.start.clone(),
                target: s.board.target.clone(),
                checksum_base: s.board.base,
                checksum_modulus: s.board.modulus,
                prefixes: s.prefixes,
            }),
            KindSpec::Blocks(b) => Kind::Blocks(proto::BlocksSpec {
                puzzle: b.puzzle.clone(),
            }),
            KindSpec::Pegs(p) => Kind::Pegs(proto::PegsSpec {
                board: p.board.clone(),
                start: p.start.unwrap_or(0),
                end: p.end.unwrap_or(0),
                prefixes: p.prefixes,
            }),
        };
        proto::JobSpec {
            kind: Some(kind),
            options: Some(proto::RunnerOptions {
                priority: spec.options.priority,
                max_attempts: spec.options.max_attempts,
                lease_ttl_ms: spec.options.lease_ttl_ms,
                force: spec.options.force,
                replicas: spec.options.replicas,
            }),
        }
    }
}

impl TryFrom<&proto::JobSpec> for JobSpec {
    type Error = crate::Error;

    /// Fills defaults for zero values and validates the result.
    fn try_from(p: &proto::JobSpec) -> Result<JobSpec> {
        use proto::job_spec::Kind;
        let kind = match p.kind.as_ref() {
            None => {
                return Err(invalid!(
                    "the job spec names no kind (hex, kayles, sliders, pegs or blocks)"
                ));
            }
            Some(Kind::Hex(h)) => KindSpec::Hex(HexSpec {
                side: h.side,
                modulus: if h.modulus == 0 {
                    hex::DEFAULT_MODULUS
                } else {
                    h.modulus
                },
                plan: HexPlan::parse(&h.plan)?,
                shards_per_step: h.shards_per_step,
                exact: h.exact,
            }),
            Some(Kind::Kayles(k)) => KindSpec::Kayles(KaylesSpec {
                pins: k.pins,
                digits: if k.digits == 0 {
                    kayles::DEFAULT_DIGITS
                } else {
                    k.digits
                },
            }),
            Some(Kind::Sliders(s)) => {
                let defaults = sliders::SliderParams::default();
                let rows = if s.rows == 0 { defaults.rows } else { s.rows };
                let cols = if s.cols == 0 { defaults.cols } else { s.cols };
                let (start, target) = match (s.start.is_empty(), s.target.is_empty()) {
                    (true, true) => (defaults.start.clone(), defaults.target.clone()),
                    (false, false) => (s.start.clone(), s.target.clone()),
                    _ => return Err(invalid!("give both a start and a target board, or neither")),
                };
                KindSpec::Sliders(SlidersSpec {
                    board: sliders::SliderParams {
                        rows,
                        cols,
                        start,
                        target,
                        base: if s.checksum_base == 0 {
                            defaults.base
                        } else {
                            s.checksum_base
                        },
                        modulus: if s.checksum_modulus == 0 {
                            defaults.modulus
                        } else {
                            s.checksum_modulus
                        },
                    },
                    prefixes: s.prefixes,
                })
            }
            Some(Kind::Blocks(b)) => KindSpec::Blocks(BlocksSpec {
                puzzle: if b.puzzle.is_empty() {
                    default_puzzle()
                } else {
                    b.puzzle.clone()
                },
            }),
            Some(Kind::Pegs(g)) => KindSpec::Pegs(PegsSpec {
                board: if g.board.is_empty() {
                    default_peg_board()
                } else {
                    g.board.clone()
                },
                start: (g.start != 0).then_some(g.start),
                end: (g.end != 0).then_some(g.end),
                prefixes: g.prefixes,
            }),
        };
        let defaults = RunnerOptions::default();
        let options = match p.options.as_ref() {
            None => defaults,
            Some(o) => RunnerOptions {
                priority: o.priority,
                max_attempts: if o.max_attempts == 0 {
                    defaults.max_attempts
                } else {
                    o.max_attempts
                },
                lease_ttl_ms: if o.lease_ttl_ms == 0 {
                    defaults.lease_ttl_ms
                } else {
                    o.lease_ttl_ms
                },
                force: o.force,
                replicas: if o.replicas == 0 {
                    defaults.replicas
                } else {
                    o.replicas
                },
            },
        };
        let spec = JobSpec { kind, options };
        spec.validate()?;
        Ok(spec)
    }
}
