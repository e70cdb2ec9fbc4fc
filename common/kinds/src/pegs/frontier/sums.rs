//! A finished stage of the pegs frontier plan summed over its shards: each
//! search's level sizes, positions expanded and children pruned as made,
//! the solutions and the solutions by final hole.

use std::collections::BTreeMap;

use super::PegSide;
use crate::pegs::{PegsPartial, PegsPlan, parse_solutions};
use crate::{Error, Result, invalid};
use tally_kernels::buckets::add_level_sizes;

/// Each search's level sizes and the solutions of a finished stage, summed
/// over its shards.
pub(super) struct StageSums {
    pub(super) start: Vec<u64>,
    pub(super) end: Vec<u64>,
    /// Of those positions, the ones expanded.
    pub(super) start_expanded: Vec<u64>,
    pub(super) end_expanded: Vec<u64>,
    /// Of their children, the ones pruned as made (one for each jump).
    pub(super) start_pruned: Vec<u64>,
    pub(super) end_pruned: Vec<u64>,
    /// The positions of the joined level, when the stage joined the searches.
    pub(super) joined: Option<u64>,
    /// The buckets a group the shards wrote.
    pub(super) written: Option<u32>,
    /// The bytes the shards spilled past their memory shares.
    pub(super) spilled: u64,
    pub(super) solutions: u128,
    /// The solutions by final hole found in the stage, with those before.
    pub(super) finals: BTreeMap<u32, u128>,
}

pub(super) fn sum_stage(plan: &PegsPlan, partials: &[PegsPartial]) -> Result<StageSums> {
    let mut sums = StageSums {
        start: Vec::new(),
        end: Vec::new(),
        start_expanded: Vec::new(),
        end_expanded: Vec::new(),
        start_pruned: Vec::new(),
        end_pruned: Vec::new(),
        joined: None,
        written: None,
        spilled: 0,
        solutions: parse_solutions(&plan.solutions)?,
        finals: plan
            .finals
            .iter()
            .map(|(&hole, ways)| Ok((hole, parse_solutions(ways)?)))
            .collect::<Result<_>>()?,
    };
    for partial in partials {
        let PegsPartial::PegLevels {
            sizes: own,
            solutions: found,
            buckets,
            side,
            finals,
            expanded,
            spilled,
            pruned,
        } = partial
        else {
            return Err(invalid!("a frontier level returned {partial:?}"));
        };
        sums.spilled = sums.spilled.saturating_add(*spilled);
        sums.solutions = sums
            .solutions
            .checked_add(parse_solutions(found)?)
            .ok_or_else(|| Error::Internal("peg solution count overflows".into()))?;
        for (&hole, ways) in finals {
            let sum = sums.finals.entry(hole).or_insert(0);
            *sum = sum
                .checked_add(parse_solutions(ways)?)
                .ok_or_else(|| Error::Internal("peg solution count overflows".into()))?;
        }
        if *side == PegSide::Join {
            *sums.joined.get_or_insert(0) += own.iter().sum::<u64>();
            continue;
        }
        let (sizes, kept, left_out) = if *side == PegSide::Start {
            (
                &mut sums.start,
                &mut sums.start_expanded,
                &mut sums.start_pruned,
            )
        } else {
            (&mut sums.end, &mut sums.end_expanded, &mut sums.end_pruned)
        };
        if sums.written.is_some_and(|w| w != *buckets) {
            return Err(invalid!("the shards of one level disagree on its shape"));
        }
        sums.written = Some(*buckets);
        add_level_sizes(sizes, own, "level")?;
        // A shard of a release that did not prune expanded every position.
        let expanded = if expanded.is_empty() { own } else { expanded };
        add_level_sizes(kept, expanded, "level")?;
        // One that did not prune children as made pruned none.
        let none = vec![0; own.len()];
        let pruned = if pruned.is_empty() { &none } else { pruned };
        add_level_sizes(left_out, pruned, "level")?;
    }
    Ok(sums)
}
