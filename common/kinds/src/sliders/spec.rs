//! The `sliders` kind's marker and its spec: the boards and the plan, as a
//! spec file, the command line and the wire give them.

use serde::{Deserialize, Serialize};

use crate::kind::{FileReader, SpecArgs, SpecOf};
use crate::{Result, invalid};
use tally_kernels::sliders;
use tally_wire::proto;

pub struct Sliders;

/// Most prefix tasks a job may ask for.
pub const MAX_PREFIX_TASKS: u32 = 100_000;
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SlidersPlanName {
    /// The search while planning, prefix tasks over its graph.
    #[default]
    Prefixes,
    /// The search by levels over the workers, then the prefix tasks.
    Frontier,
}

impl SlidersPlanName {
    pub fn name(self) -> &'static str {
        match self {
            SlidersPlanName::Prefixes => "prefixes",
            SlidersPlanName::Frontier => "frontier",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<SlidersPlanName> {
        match name {
            "" => Ok(SlidersPlanName::default()),
            "prefixes" => Ok(SlidersPlanName::Prefixes),
            "frontier" => Ok(SlidersPlanName::Frontier),
            other => Err(invalid!(
                "unknown sliders plan {other:?}: expected \"prefixes\" or \"frontier\""
            )),
        }
    }
}

// No deny_unknown_fields: serde does not support it together with flatten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidersSpec {
    #[serde(flatten)]
    pub board: sliders::SliderParams,
    /// Minimum number of prefix tasks; 0 chooses.
    #[serde(default)]
    pub prefixes: u32,
    #[serde(default)]
    pub plan: SlidersPlanName,
    /// Frontier plan: shards per level; 0 chooses from each level's size.
    #[serde(default)]
    pub buckets: u32,
}

impl Default for SlidersSpec {
    /// The Project Euler 244 boards with the default plan.
    fn default() -> Self {
        SlidersSpec {
            board: sliders::SliderParams::default(),
            prefixes: 0,
            plan: SlidersPlanName::default(),
            buckets: 0,
        }
    }
}

impl SpecOf for SlidersSpec {
    type Kind = Sliders;
}

#[derive(clap::Args, Debug)]
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
    /// Shard plan: prefixes (the default: the search while planning, then
    /// prefix tasks) or frontier (the search itself by levels over the
    /// workers, then prefix tasks over the graph it found).
    #[arg(long, default_value = "prefixes")]
    pub plan: String,
    /// Frontier plan: shards per level (default: from each level's size).
    #[arg(long, value_name = "N")]
    pub buckets: Option<u32>,
}

impl SpecArgs<SlidersSpec> for SlidersArgs {
    fn into_spec(self, _files: &dyn FileReader) -> Result<SlidersSpec> {
        let defaults = sliders::SliderParams::default();
        let (start, target) = match (self.start, self.target) {
            (Some(a), Some(b)) => (a, b),
            (None, None) if self.rows == defaults.rows && self.cols == defaults.cols => {
                (defaults.start, defaults.target)
            }
            (None, None) => {
                return Err(invalid!(
                    "the default boards are 4 x 4; give --start and --target for a {} x {} board",
                    self.rows,
                    self.cols
                ));
            }
            _ => return Err(invalid!("give both --start and --target, or neither")),
        };
        Ok(SlidersSpec {
            board: sliders::SliderParams {
                rows: self.rows,
                cols: self.cols,
                start,
                target,
                base: self.base,
                modulus: self.checksum_modulus,
            },
            prefixes: self.prefixes,
            plan: SlidersPlanName::parse(&self.plan)?,
            buckets: self.buckets.unwrap_or(0),
        })
    }
}

pub(super) fn spec_from_message(s: &proto::SlidersSpec) -> Result<SlidersSpec> {
    let defaults = sliders::SliderParams::default();
    let or = |value: u64, default: u64| if value == 0 { default } else { value };
    let (start, target) = match (s.start.is_empty(), s.target.is_empty()) {
        (true, true) => (defaults.start.clone(), defaults.target.clone()),
        (false, false) => (s.start.clone(), s.target.clone()),
        _ => return Err(invalid!("give both a start and a target board, or neither")),
    };
    Ok(SlidersSpec {
        board: sliders::SliderParams {
            rows: or(s.rows.into(), defaults.rows.into()) as u32,
            cols: or(s.cols.into(), defaults.cols.into()) as u32,
            start,
            target,
            base: or(s.checksum_base, defaults.base),
            modulus: or(s.checksum_modulus, defaults.modulus),
        },
        prefixes: s.prefixes,
        plan: SlidersPlanName::parse(&s.plan)?,
        buckets: s.buckets,
    })
}
