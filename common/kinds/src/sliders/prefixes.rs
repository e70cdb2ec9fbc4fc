//! The prefixes plan of `sliders`: the prefix tasks of the shortest-path
//! graph grouped into shards of equal weight, and a shard's enumeration of
//! its prefixes, with checkpoints between them. The frontier plan ends with
//! the same shards, over the graph its stages found.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{Checkpoint, Outcome, Planned, ShardRun};
use crate::{Control, Error, Result, invalid};
use tally_kernels::balance::group_by_weight;
use tally_kernels::sliders;

use super::input::SlidersInput;
use super::records::{SlidersPartial, SlidersPlan, SlidersTask};
use super::spec::SlidersSpec;

/// Default minimum number of prefix tasks, and of shards.
pub const DEFAULT_PREFIXES: u32 = 64;
/// At most this many shards for the prefixes of one job.
pub const MAX_SHARDS: usize = 256;
/// Largest `work_total` of one shard (sequences). Only a shard that could never
/// finish reaches it; the cap keeps a job's sum of `work_total` far from
/// overflowing.
pub const MAX_SHARD_UNITS: u64 = 1 << 55;
/// Slider graphs kept per process: they can be large.
const CACHED_SPACES: usize = 4;

#[derive(Serialize, Deserialize)]
struct SliderCheckpoint {
    prefixes_done: u32,
    sums: sliders::PathSums,
}

/// Number of shards the prefixes of a job are grouped into (fewer if there are
/// fewer prefixes): the `prefixes` asked for (default [`DEFAULT_PREFIXES`]), at
/// most [`MAX_SHARDS`].
pub fn shard_count(spec: &SlidersSpec) -> usize {
    min_prefixes(spec).clamp(1, MAX_SHARDS)
}

pub(super) fn min_prefixes(spec: &SlidersSpec) -> usize {
    if spec.prefixes == 0 {
        DEFAULT_PREFIXES as usize
    } else {
        spec.prefixes as usize
    }
}

/// Work units (sequences) as a counter value, saturating.
pub(super) fn units(sequences: u128) -> u64 {
    u64::try_from(sequences).unwrap_or(u64::MAX)
}

pub(super) fn space(
    spec: &SlidersSpec,
    cache: &KernelCache,
    control: &Control,
) -> Result<std::sync::Arc<sliders::SliderSpace>> {
    let key = serde_json::to_string(&spec.board).expect("params serialise");
    cache.get_or_build(&key, CACHED_SPACES, || {
        sliders::SliderSpace::build(&spec.board, control)
    })
}

/// Prefix tasks grouped into [`shard_count`] shards of equal weight (the
/// sequences they extend, decimal in `weights`); `graph`: the shards read
/// the graph as stage data (frontier plan).
pub(super) fn weighted_shards(
    spec: &SlidersSpec,
    prefixes: &[String],
    weights: &[String],
    graph: bool,
) -> Result<Vec<Planned<SlidersTask>>> {
    let weights = weights
        .iter()
        .map(|w| w.parse::<u128>())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("malformed prefix weight: {e}")))?;
    Ok(group_by_weight(&weights, shard_count(spec))
        .into_iter()
        .map(|group| {
            let weight = group
                .iter()
                .fold(0u128, |acc, &i| acc.saturating_add(weights[i]));
            Planned {
                task: SlidersTask::SliderPrefixes {
                    prefixes: group.iter().map(|&i| prefixes[i].clone()).collect(),
                    weighted: true,
                    graph,
                },
                work_total: units(weight).min(MAX_SHARD_UNITS),
            }
        })
        .collect())
}

/// A plan stored before prefixes had weights: batches by count.
pub(super) fn batches_by_count(plan: &SlidersPlan) -> Vec<Planned<SlidersTask>> {
    let batch = plan.prefixes.len().div_ceil(MAX_SHARDS).max(1);
    plan.prefixes
        .chunks(batch)
        .map(|chunk| Planned {
            task: SlidersTask::SliderPrefixes {
                prefixes: chunk.to_vec(),
                weighted: false,
                graph: false,
            },
            work_total: chunk.len() as u64,
        })
        .collect()
}

/// Enumerates the prefixes of a shard one after the other, with a checkpoint
/// between two prefixes. Weighted shards count sequences: the kernel adds the
/// sequences it finds to the control as it goes, and a finished prefix has
/// added exactly its weight, which is checked. Unweighted (older) shards count
/// prefixes, with the kernel's units on a counter of its own.
pub(super) fn enumerate_prefixes(
    space: &sliders::SliderSpace,
    prefixes: &[String],
    weighted: bool,
    run: &mut ShardRun<'_, SlidersInput, SlidersPartial>,
) -> Result<Outcome<SlidersPartial>> {
    let (mut done, mut sums) = resume_point(&run.checkpoint_bytes()?, prefixes.len())?;
    let units_of = |prefix: &str| -> Result<u64> {
        if weighted {
            space.prefix_weight(prefix).map(units)
        } else {
            Ok(1)
        }
    };
    let own_counter = run.control.with_own_counter();
    let control = run.control;
    let kernel_control = if weighted { control } else { &own_counter };
    // A resumed shard's progress continues from its checkpoint.
    let mut work = prefixes[..done]
        .iter()
        .try_fold(0u64, |w, p| Ok::<_, Error>(w.saturating_add(units_of(p)?)))?;
    control.add_work(work);
    let mut last_checkpoint = std::time::Instant::now();
    while done < prefixes.len() {
        let prefix = &prefixes[done];
        let part = space.enumerate(prefix, kernel_control)?;
        let weight = units_of(prefix)?;
        if weighted && units(part.count) != weight {
            return Err(Error::Internal(format!(
                "prefix {prefix:?} has {} shortest sequences, but the graph counts {weight}",
                part.count
            )));
        }
        if !weighted {
            control.add_work(1);
        }
        sums.merge(part);
        work = work.saturating_add(weight);
        done += 1;
        let due = last_checkpoint.elapsed() >= run.checkpoint_every;
        if done < prefixes.len() && (due || run.control.checkpoint_asked()) {
            last_checkpoint = std::time::Instant::now();
            run.checkpoint(checkpoint(done, sums, work));
        }
    }
    Ok(Outcome {
        output: crate::StageOutput::default(),
        partial: SlidersPartial::SliderSums {
            prefixes_done: done as u32,
            sums,
        },
        work_done: work,
    })
}

/// A checkpoint after the first `done` prefixes of a shard.
fn checkpoint(done: usize, sums: sliders::PathSums, work: u64) -> Checkpoint<SlidersPartial> {
    let prefixes_done = done as u32;
    let state = SliderCheckpoint {
        prefixes_done,
        sums,
    };
    Checkpoint {
        state: serde_json::to_vec(&state)
            .expect("checkpoint serialises")
            .into(),
        partial: Some(SlidersPartial::SliderSums {
            prefixes_done,
            sums,
        }),
        work_done: work,
    }
}

/// Where a shard resumes: the prefixes done and their sums, from the checkpoint.
fn resume_point(checkpoint: &[u8], prefixes: usize) -> Result<(usize, sliders::PathSums)> {
    if checkpoint.is_empty() {
        return Ok((0, sliders::PathSums::default()));
    }
    let c: SliderCheckpoint = serde_json::from_slice(checkpoint)
        .map_err(|e| invalid!("malformed slider checkpoint: {e}"))?;
    if c.prefixes_done as usize > prefixes {
        return Err(invalid!("slider checkpoint is past the end of its shard"));
    }
    Ok((c.prefixes_done as usize, c.sums))
}
