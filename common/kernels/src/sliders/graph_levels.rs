//! The frontier plan's backward search: the shortest-path graph, level by
//! level from the target. The graph's level `D` is the target; level `j` is
//! the boards of `L_j` next to a board of graph level `j + 1`. The members of
//! `L_j` written by the shards of level `j` are kept for this: shard `q` of
//! graph level `j` intersects its bucket of them with the neighbours of graph
//! level `j + 1` that fall in `q` (sent by the shards of graph level `j + 1`),
//! and sends the neighbours of what it keeps on, bucketed for graph level
//! `j - 1`. Small levels go several to a shard, which reads every bucket of
//! each ([`expand_backward_levels`]).

use super::forms::encode_boards_as;
use super::levels::{Boards, POLL_BOARDS, TAG_NEIGHBOURS, merge_sets};
use super::state::StateHint;
use crate::buckets::{bucket_of, encode_buckets};
use crate::compact::ListForm;
use crate::{Control, Result, invalid};

/// What one backward shard found and sends on.
#[derive(Debug)]
pub struct GraphLevel {
    /// The graph's boards in the shard's bucket of its level, increasing.
    pub boards: Vec<u64>,
    /// `buckets_out` buckets of their neighbours; empty for level 0.
    pub output: Vec<u8>,
}

/// The neighbours of the target in bucket `bucket` of `buckets`: what the
/// shards of the graph level next to the target start from.
pub fn target_neighbours(boards: &Boards, bucket: u32, buckets: u32) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    boards.neighbours(boards.target(), &mut StateHint::default(), |n| {
        if bucket_of(u128::from(n), buckets) == bucket {
            out.push(n);
        }
    })?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// One shard of a graph level: its bucket of the level's boards (`members`,
/// one list per forward shard) next to a board of the graph level after it
/// (`neighbours`, one list per shard of that level), and their neighbours in
/// the `buckets_out` buckets of the graph level before (none when 0). One unit
/// of work per board kept. The neighbours are written in `form`.
pub fn expand_backward(
    boards: &Boards,
    members: &[Vec<u64>],
    neighbours: &[Vec<u64>],
    buckets_out: u32,
    form: ListForm,
    control: &Control,
) -> Result<GraphLevel> {
    let neighbours = merge_sets(neighbours);
    control.check()?;
    let kept = members_among(members, &neighbours);
    expand_kept(boards, kept, buckets_out, form, control)
}

/// What a shard of several graph levels found: each level's boards (the
/// highest level first, each increasing) and the last one's neighbours.
#[derive(Debug)]
pub struct GraphLevels {
    pub levels: Vec<Vec<u64>>,
    /// `buckets_out` buckets of the last level's neighbours; empty for 0.
    pub output: Vec<u8>,
}

/// Several graph levels in one shard, from the highest down: `members[i]`
/// holds every forward shard's list of level `top - i`'s boards (all its
/// buckets), and `neighbours` the boards next to the graph level above
/// `top`. Each level's graph boards are its members next to the level
/// above; the last level's neighbours go to the `buckets_out` buckets of
/// the graph level below it (none when 0), in `form`. One unit of work per
/// board kept.
pub fn expand_backward_levels(
    boards: &Boards,
    members: &[Vec<&[u64]>],
    neighbours: &[Vec<u64>],
    buckets_out: u32,
    form: ListForm,
    control: &Control,
) -> Result<GraphLevels> {
    let Some((last, above)) = members.split_last() else {
        return Err(invalid!("a shard of graph levels was handed no level"));
    };
    let mut next_to = merge_sets(neighbours);
    let mut levels = Vec::with_capacity(members.len());
    let mut hint = StateHint::default();
    for level in above {
        control.check()?;
        let kept = members_among(level, &next_to);
        control.add_work(kept.len() as u64);
        next_to.clear();
        for &board in &kept {
            boards.neighbours(board, &mut hint, |n| next_to.push(n))?;
        }
        next_to.sort_unstable();
        next_to.dedup();
        levels.push(kept);
    }
    control.check()?;
    let kept = members_among(last, &next_to);
    let found = expand_kept(boards, kept, buckets_out, form, control)?;
    levels.push(found.boards);
    Ok(GraphLevels {
        levels,
        output: found.output,
    })
}

/// The boards of `members` (lists, each increasing or not) that are in
/// `wanted` (increasing, without repeats), increasing.
fn members_among<L: AsRef<[u64]>>(members: &[L], wanted: &[u64]) -> Vec<u64> {
    // Where the wanted boards are few next to the level's members (most graph
    // levels), each is looked up in every sender's increasing list instead of
    // merging the lists.
    let total: usize = members.iter().map(|l| l.as_ref().len()).sum();
    if wanted.len().saturating_mul(members.len()) > total / 8 {
        return merge_sets(members)
            .into_iter()
            .filter(|b| wanted.binary_search(b).is_ok())
            .collect();
    }
    let mut kept: Vec<u64> = Vec::new();
    for list in members {
        let list = list.as_ref();
        let sorted = match list.is_sorted() {
            true => std::borrow::Cow::Borrowed(list),
            false => std::borrow::Cow::Owned(merge_sets(&[list])),
        };
        kept.extend(wanted.iter().filter(|b| sorted.binary_search(b).is_ok()));
    }
    kept.sort_unstable();
    kept.dedup();
    kept
}

/// The rest of [`expand_backward`]: the graph level's boards `kept`, and
/// their neighbours bucketed for the graph level before.
fn expand_kept(
    boards: &Boards,
    kept: Vec<u64>,
    buckets_out: u32,
    form: ListForm,
    control: &Control,
) -> Result<GraphLevel> {
    control.add_work(kept.len() as u64);
    if buckets_out == 0 {
        return Ok(GraphLevel {
            boards: kept,
            output: Vec::new(),
        });
    }
    let mut out: Vec<Vec<u64>> = vec![Vec::new(); buckets_out as usize];
    let mut hint = StateHint::default();
    for chunk in kept.chunks(POLL_BOARDS) {
        control.check()?;
        for &board in chunk {
            boards.neighbours(board, &mut hint, |n| {
                out[bucket_of(u128::from(n), buckets_out) as usize].push(n)
            })?;
        }
    }
    let buckets: Vec<Vec<u8>> = out
        .into_iter()
        .map(|mut list| {
            list.sort_unstable();
            list.dedup();
            encode_boards_as(form, TAG_NEIGHBOURS, &list)
        })
        .collect();
    Ok(GraphLevel {
        boards: kept,
        output: encode_buckets(&buckets),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_level_keeps_the_members_next_to_it_by_lookups_or_by_a_merge() {
        let boards = Boards::new(&super::super::SliderParams::default()).unwrap();
        let control = Control::new();
        for (sorted, few) in [(true, true), (false, true), (true, false), (false, false)] {
            let members: Vec<Vec<u64>> = (0..3u64)
                .map(|s| {
                    let mut list: Vec<u64> =
                        (0..2000).map(|i| (i * 37 + s * 11) % 100_000).collect();
                    if sorted {
                        list.sort_unstable();
                        list.dedup();
                    }
                    list
                })
                .collect();
            let step = if few { 9_973 } else { 7 };
            let neighbours: Vec<Vec<u64>> = vec![
                (0..100_000).step_by(step).collect(),
                vec![74, 1_000_000_000],
            ];
            let level = expand_backward(&boards, &members, &neighbours, 2, ListForm::Raw, &control)
                .unwrap();
            let wanted: std::collections::BTreeSet<u64> = neighbours.concat().into_iter().collect();
            let expected: std::collections::BTreeSet<u64> = members
                .concat()
                .into_iter()
                .filter(|b| wanted.contains(b))
                .collect();
            assert_eq!(
                level.boards,
                expected.into_iter().collect::<Vec<_>>(),
                "{sorted} {few}"
            );
            assert!(!level.boards.is_empty());
        }
    }
}
