//! `synthetic`: a load-test kind for the runner itself. A job of S shards sums
//! i^2 modulo 2^61 - 1 over i < S * W, each shard W consecutive terms. The work
//! per shard is as small as the operator asks, so a run measures what the
//! control plane costs per shard (leases, reports, commits) and how it behaves
//! with millions of shards; the sum has a closed form, so every run checks
//! itself.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, FaultInjection, JobKind, Outcome, Planned, ShardCount, ShardRun, SpecOf, no_output,
};
use crate::{Control, Error, Result, invalid};
use tally_kernels::modular::mul_mod;
use tally_wire::proto;

pub struct Synthetic;

/// The modulus of the sum: the Mersenne prime 2^61 - 1.
pub const MODULUS: u64 = (1 << 61) - 1;
/// At most this many shards in one job.
pub const MAX_SHARDS: u64 = 10_000_000;
/// At most this many terms per shard (about a second of work).
pub const MAX_TERMS_PER_SHARD: u64 = 1 << 30;

/// A spec file's parameters and the command line's flags alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Shards of the job, 1 to 10 000 000.
    #[arg(long)]
    pub shards: u64,
    /// Terms each shard sums (its work), 1 to 2^30.
    #[arg(long, default_value_t = 1)]
    #[serde(default = "one")]
    pub terms_per_shard: u64,
}

fn one() -> u64 {
    1
}

impl SpecOf for SyntheticSpec {
    type Kind = Synthetic;
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticPlan {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SyntheticTask {
    /// The terms `first .. first + count`.
    SyntheticTerms { first: u64, count: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyntheticPartial {
    /// The sum of the shard's terms modulo [`MODULUS`].
    SyntheticSum { terms: u64, sum: u64 },
}

impl JobKind for Synthetic {
    type Spec = SyntheticSpec;
    type Args = SyntheticSpec;
    type Plan = SyntheticPlan;
    type Task = SyntheticTask;
    type Partial = SyntheticPartial;
    type StageInput = ();

    const NAME: &'static str = "synthetic";
    const ABOUT: &'static str = "Load test of the runner: S shards of W terms of a sum of squares \
                                 modulo 2^61 - 1, checked against its closed form.";
    const EXAMPLES: &'static str =
        "  tally run synthetic --shards 100000\n  tally submit synthetic --shards 1000000";

    fn spec_to_proto(spec: &SyntheticSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Synthetic(proto::SyntheticSpec {
            shards: spec.shards,
            terms_per_shard: spec.terms_per_shard,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<SyntheticSpec>> {
        let proto::job_spec::Kind::Synthetic(s) = kind else {
            return None;
        };
        Some(Ok(SyntheticSpec {
            shards: s.shards,
            // Zero is proto3's "unset".
            terms_per_shard: s.terms_per_shard.max(1),
        }))
    }

    /// The count is the user's, and part of the sum: never auto.
    fn shard_count(spec: &SyntheticSpec) -> Option<ShardCount> {
        Some(ShardCount::Chosen(spec.shards))
    }

    fn validate(spec: &SyntheticSpec) -> Result<()> {
        if !(1..=MAX_SHARDS).contains(&spec.shards) {
            return Err(invalid!(
                "synthetic shards must be 1 to {MAX_SHARDS}, got {}",
                spec.shards
            ));
        }
        if !(1..=MAX_TERMS_PER_SHARD).contains(&spec.terms_per_shard) {
            return Err(invalid!(
                "synthetic terms per shard must be 1 to {MAX_TERMS_PER_SHARD}, got {}",
                spec.terms_per_shard
            ));
        }
        Ok(())
    }

    fn describe(spec: &SyntheticSpec) -> String {
        format!(
            "synthetic load: {} shards of {} terms",
            spec.shards, spec.terms_per_shard
        )
    }

    fn small_example() -> Option<SyntheticSpec> {
        Some(SyntheticSpec {
            shards: 300,
            terms_per_shard: 7,
        })
    }

    fn prepare(
        _spec: &SyntheticSpec,
        _cache: &KernelCache,
        _control: &Control,
    ) -> Result<SyntheticPlan> {
        Ok(SyntheticPlan {})
    }

    fn plan_stage(
        spec: &SyntheticSpec,
        _plan: &SyntheticPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<SyntheticTask>>> {
        Ok((0..spec.shards)
            .map(|shard| Planned {
                task: SyntheticTask::SyntheticTerms {
                    first: shard * spec.terms_per_shard,
                    count: spec.terms_per_shard,
                },
                work_total: spec.terms_per_shard,
            })
            .collect())
    }

    fn execute(
        _spec: &SyntheticSpec,
        task: &SyntheticTask,
        run: &mut ShardRun<'_, (), SyntheticPartial>,
    ) -> Result<Outcome<SyntheticPartial>> {
        let SyntheticTask::SyntheticTerms { first, count } = *task;
        let mut sum = 0u64;
        // A cancellation check every 2^20 terms: a few milliseconds apart.
        let mut done = 0;
        while done < count {
            run.control.check()?;
            let block = (count - done).min(1 << 20);
            for i in first + done..first + done + block {
                sum = add_mod(sum, mul_mod(i % MODULUS, i % MODULUS, MODULUS));
            }
            done += block;
            run.control.add_work(block);
        }
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: SyntheticPartial::SyntheticSum { terms: count, sum },
            work_done: count,
        })
    }

    fn check_result(
        _spec: &SyntheticSpec,
        _plan: &SyntheticPlan,
        task: &SyntheticTask,
        partial: &SyntheticPartial,
        output: &[u8],
    ) -> Result<()> {
        let SyntheticTask::SyntheticTerms { count, .. } = task;
        let SyntheticPartial::SyntheticSum { terms, sum } = partial;
        if terms != count || *sum >= MODULUS {
            return Err(invalid!(
                "synthetic result covers {terms} of {count} terms (sum {sum})"
            ));
        }
        no_output(output)
    }

    fn finish(
        spec: &SyntheticSpec,
        _plan: &SyntheticPlan,
        partials: Vec<SyntheticPartial>,
    ) -> Result<Answer> {
        let total = partials
            .iter()
            .map(|SyntheticPartial::SyntheticSum { sum, .. }| *sum)
            .fold(0, add_mod);
        let terms = spec.shards * spec.terms_per_shard;
        let expected = sum_of_squares_below(terms);
        if total != expected {
            return Err(Error::Internal(format!(
                "synthetic sum {total} differs from its closed form {expected}"
            )));
        }
        Ok(answer(spec, total))
    }

    fn direct(spec: &SyntheticSpec, _threads: usize, _control: &Control) -> Result<Answer> {
        Ok(answer(
            spec,
            sum_of_squares_below(spec.shards * spec.terms_per_shard),
        ))
    }
}

fn add_mod(a: u64, b: u64) -> u64 {
    let s = a + b; // both below 2^61: no overflow
    if s >= MODULUS { s - MODULUS } else { s }
}

/// The sum of i^2 for i < n modulo [`MODULUS`]: (n - 1) n (2n - 1) / 6.
pub fn sum_of_squares_below(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut factors = [n as u128 - 1, n as u128, 2 * n as u128 - 1];
    // One of n - 1, n is even; one of the three is a multiple of 3.
    let even = factors[..2].iter().position(|f| f % 2 == 0).unwrap();
    factors[even] /= 2;
    let third = factors.iter().position(|f| f % 3 == 0).unwrap();
    factors[third] /= 3;
    factors
        .iter()
        .map(|f| (f % MODULUS as u128) as u64)
        .fold(1, |acc, f| mul_mod(acc, f, MODULUS))
}

fn answer(spec: &SyntheticSpec, sum: u64) -> Answer {
    Answer {
        line: sum.to_string(),
        details: serde_json::json!({
            "kind": "synthetic",
            "shards": spec.shards,
            "terms_per_shard": spec.terms_per_shard,
            "sum": sum.to_string(),
        }),
    }
}

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Synthetic {
    fn corrupt_for_testing(partial: &mut SyntheticPartial) {
        let SyntheticPartial::SyntheticSum { sum, .. } = partial;
        *sum = add_mod(*sum, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_form_equals_the_plain_sum() {
        let mut sum = 0u64;
        for n in 0..2_000u64 {
            assert_eq!(sum_of_squares_below(n), sum, "n = {n}");
            sum = add_mod(sum, mul_mod(n, n, MODULUS));
        }
        // Past 2^61 terms the reduction matters: compare with u128 arithmetic
        // around a large n, term by term.
        let big = 3_000_000_000u64;
        let mut sum = sum_of_squares_below(big);
        for n in big..big + 1_000 {
            sum = add_mod(sum, mul_mod(n % MODULUS, n % MODULUS, MODULUS));
            assert_eq!(sum_of_squares_below(n + 1), sum, "n = {n}");
        }
    }

    #[test]
    fn shards_cover_the_terms_and_sum_to_the_closed_form() {
        let spec = SyntheticSpec {
            shards: 37,
            terms_per_shard: 11,
        };
        Synthetic::validate(&spec).unwrap();
        let control = Control::new();
        let through_shards = crate::local::run_locally::<Synthetic>(&spec, 3, &control).unwrap();
        let plain = (0..37 * 11u64).fold(0, |s, i| add_mod(s, i * i));
        assert_eq!(through_shards.line, plain.to_string());
        assert_eq!(
            Synthetic::direct(&spec, 1, &control).unwrap().line,
            plain.to_string()
        );

        let tasks = Synthetic::plan_stage(&spec, &SyntheticPlan {}, 1).unwrap();
        let mut partials: Vec<_> = tasks
            .iter()
            .map(|planned| {
                let SyntheticTask::SyntheticTerms { first, count } = planned.task;
                let sum = (first..first + count).fold(0, |s, i| add_mod(s, i * i));
                SyntheticPartial::SyntheticSum { terms: count, sum }
            })
            .collect();
        Synthetic::corrupt_for_testing(&mut partials[5]);
        let err = Synthetic::finish(&spec, &SyntheticPlan {}, partials).unwrap_err();
        assert!(err.to_string().contains("closed form"), "{err}");
        let short = SyntheticPartial::SyntheticSum { terms: 10, sum: 0 };
        let err = Synthetic::check_result(&spec, &SyntheticPlan {}, &tasks[0].task, &short, &[]);
        assert!(err.unwrap_err().to_string().contains("10 of 11"));
    }

    #[test]
    fn bad_specs_are_refused_with_their_limits() {
        for (shards, terms) in [
            (0, 1),
            (MAX_SHARDS + 1, 1),
            (1, 0),
            (1, MAX_TERMS_PER_SHARD + 1),
        ] {
            let spec = SyntheticSpec {
                shards,
                terms_per_shard: terms,
            };
            let err = Synthetic::validate(&spec).unwrap_err().to_string();
            assert!(err.contains("must be 1 to"), "{err}");
        }
    }
}
