//! `kayles`: the fair Partisan Kayles rows of n pins, last d digits. One shard
//! per Walsh character of the series; each shard checkpoints its coefficients.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, Checkpoint, FaultInjection, JobKind, Outcome, Planned, ShardRun, SpecOf, no_output,
};
use crate::{Control, Error, Result, invalid};
use tally_kernels::kayles;
use tally_wire::proto;

pub struct Kayles;

/// A spec file's parameters and the command line's flags alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct KaylesSpec {
    /// Number of pins (even).
    #[arg(long)]
    pub pins: u64,
    /// Last digits to compute (1 to 18), printed zero-padded.
    #[arg(long, default_value_t = kayles::DEFAULT_DIGITS)]
    #[serde(default = "default_digits")]
    pub digits: u32,
}

fn default_digits() -> u32 {
    kayles::DEFAULT_DIGITS
}

impl SpecOf for KaylesSpec {
    type Kind = Kayles;
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KaylesPlan {
    /// Number of Walsh characters (one shard each).
    #[serde(default)]
    pub characters: u32,
}

/// One Walsh character of the series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum KaylesTask {
    KaylesCharacter { character: u32 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KaylesPartial {
    /// c_h(m) modulo 2^b * 10^d.
    KaylesCharacter { character: u32, value: u128 },
}

/// Coefficients computed between two checkpoints of a character.
const CHUNK: usize = 2_048;

/// Work units for `computed` coefficients: the square-root recurrence costs
/// about k multiplications for coefficient k, so work grows with the square.
fn work(computed: u64) -> u64 {
    computed * computed / 2
}

impl JobKind for Kayles {
    type Spec = KaylesSpec;
    type Args = KaylesSpec;
    type Plan = KaylesPlan;
    type Task = KaylesTask;
    type Partial = KaylesPartial;
    type StageInput = ();

    const NAME: &'static str = "kayles";
    const ABOUT: &'static str = "Fair Partisan Kayles rows of n pins, last digits.";
    const EXAMPLES: &'static str =
        "  tally run kayles --pins 1000 --digits 9\n  tally submit kayles --pins 1000000";

    fn spec_to_proto(spec: &KaylesSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Kayles(proto::KaylesSpec {
            pins: spec.pins,
            digits: spec.digits,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<KaylesSpec>> {
        let proto::job_spec::Kind::Kayles(k) = kind else {
            return None;
        };
        Some(Ok(KaylesSpec {
            pins: k.pins,
            digits: if k.digits == 0 {
                kayles::DEFAULT_DIGITS
            } else {
                k.digits
            },
        }))
    }

    fn validate(spec: &KaylesSpec) -> Result<()> {
        kayles::validate(spec.pins, spec.digits)
    }

    fn describe(spec: &KaylesSpec) -> String {
        format!("kayles {} pins, {} digits", spec.pins, spec.digits)
    }

    fn small_example() -> Option<KaylesSpec> {
        Some(KaylesSpec {
            pins: 40,
            digits: kayles::DEFAULT_DIGITS,
        })
    }

    fn prepare(spec: &KaylesSpec, _cache: &KernelCache, _control: &Control) -> Result<KaylesPlan> {
        Ok(KaylesPlan {
            characters: kayles::character_count(spec.pins),
        })
    }

    fn plan_stage(
        spec: &KaylesSpec,
        plan: &KaylesPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<KaylesTask>>> {
        let m = spec.pins / 2 + 1;
        Ok((0..plan.characters)
            .map(|character| Planned {
                task: KaylesTask::KaylesCharacter { character },
                work_total: work(m),
            })
            .collect())
    }

    fn execute(
        spec: &KaylesSpec,
        task: &KaylesTask,
        run: &mut ShardRun<'_, (), KaylesPartial>,
    ) -> Result<Outcome<KaylesPartial>> {
        let KaylesTask::KaylesCharacter { character } = *task;
        let mut series = if run.checkpoint.is_empty() {
            kayles::CharacterSeries::new(spec.pins, spec.digits, character)?
        } else {
            let words = bytes_to_u64s(&run.checkpoint_bytes()?)?;
            kayles::CharacterSeries::restore(spec.pins, spec.digits, character, &words)?
        };
        let mut last_checkpoint = std::time::Instant::now();
        while !series.is_done() {
            let upto = series.computed() + CHUNK;
            series.advance(upto, run.control)?;
            let due = last_checkpoint.elapsed() >= run.checkpoint_every;
            if !series.is_done() && (due || run.control.checkpoint_asked()) {
                last_checkpoint = std::time::Instant::now();
                run.checkpoint(Checkpoint {
                    state: u64s_to_bytes(&series.checkpoint()).into(),
                    partial: None,
                    work_done: work(series.computed() as u64),
                });
            }
        }
        let value = series
            .value()
            .ok_or_else(|| Error::Internal("kayles series finished without a value".into()))?;
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: KaylesPartial::KaylesCharacter { character, value },
            work_done: work(series.target() as u64),
        })
    }

    fn check_result(
        _spec: &KaylesSpec,
        _plan: &KaylesPlan,
        task: &KaylesTask,
        partial: &KaylesPartial,
        output: &[u8],
    ) -> Result<()> {
        let KaylesTask::KaylesCharacter { character } = task;
        let KaylesPartial::KaylesCharacter { character: c, .. } = partial;
        if c != character {
            return Err(invalid!(
                "result for character {c} reported on the shard of character {character}"
            ));
        }
        no_output(output)
    }

    fn finish(
        spec: &KaylesSpec,
        plan: &KaylesPlan,
        partials: Vec<KaylesPartial>,
    ) -> Result<Answer> {
        let mut values = vec![None; plan.characters as usize];
        for partial in partials {
            let KaylesPartial::KaylesCharacter { character, value } = partial;
            let slot = values
                .get_mut(character as usize)
                .ok_or_else(|| Error::Internal("kayles character out of range".into()))?;
            *slot = Some(value);
        }
        let values: Vec<u128> = values
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::Internal("a kayles character is missing".into()))?;
        Ok(answer(
            spec,
            kayles::combine(spec.pins, spec.digits, &values)?,
        ))
    }

    fn direct(spec: &KaylesSpec, threads: usize, control: &Control) -> Result<Answer> {
        Ok(answer(
            spec,
            kayles::fair_rows(spec.pins, spec.digits, threads, control)?,
        ))
    }
}

/// The answer from f(n) mod 10^d.
fn answer(spec: &KaylesSpec, fair: u64) -> Answer {
    let line = kayles::format_answer(fair, spec.digits);
    Answer {
        line: line.clone(),
        details: serde_json::json!({
            "kind": "kayles",
            "pins": spec.pins,
            "digits": spec.digits,
            "fair_rows_mod": line,
        }),
    }
}

fn u64s_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_u64s(bytes: &[u8]) -> Result<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(invalid!(
            "checkpoint length {} is not a multiple of 8",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Kayles {
    fn corrupt_for_testing(partial: &mut KaylesPartial) {
        let KaylesPartial::KaylesCharacter { value, .. } = partial;
        *value = value.wrapping_add(1);
    }
}
