//! The slider search as a frontier plan: breadth-first levels from the start
//! with the number of shortest sequences reaching each board, then the
//! shortest-path graph level by level backwards from the target, each level
//! split into buckets by a hash of the boards' dense indices.
//!
//! **Forward.** Level `k` is `L_k = N(L_(k-1)) \ (L_(k-1) ∪ L_(k-2))`. Shard
//! `q` of level `k` gets, from every shard of level `k - 1`, two buckets: a
//! [`ForwardBucket`] (the neighbours of its boards that fall in `q`, each with
//! the number of shortest sequences reaching it through that shard, and the
//! boards of `L_(k-2)` in `q` it was handed) and the boards of `L_(k-1)` in
//! `q`. It sums the counts of equal candidates, removes the two earlier
//! levels, and writes `2 P` buckets for the `P` shards of level `k + 1`: the
//! forward buckets first, then its boards of `L_k` by bucket (the members).
//!
//! **Backward.** The graph's level `D` is the target; level `j` is the boards
//! of `L_j` next to a board of graph level `j + 1`. The members of `L_j`
//! written by the shards of level `j` are kept for this: shard `q` of graph
//! level `j` intersects its bucket of them with the neighbours of graph level
//! `j + 1` that fall in `q` (sent by the shards of graph level `j + 1`), and
//! sends the neighbours of what it keeps on, bucketed for graph level `j - 1`.
//!
//! Every bucket starts with a tag byte naming what it holds, so a shard that
//! is handed the wrong data refuses it.

use super::state::{Layout, State};
use super::{SliderParams, parse_params};
use crate::buckets::{bucket_of, encode_buckets};
use crate::varint::{Reader, push as push_varint, push_increasing};
use crate::{Control, Result, invalid};

/// Boards handled between two polls of the control.
const POLL_BOARDS: usize = 4096;

/// Tag of a [`ForwardBucket`].
const TAG_FORWARD: u8 = 1;
/// Tag of a bucket of a level's boards.
const TAG_MEMBERS: u8 = 2;
/// Tag of a bucket of neighbours of a graph level.
const TAG_NEIGHBOURS: u8 = 3;
/// Tag of a whole shortest-path graph.
const TAG_GRAPH: u8 = 4;

/// The boards of one job and their dense indices.
pub struct Boards {
    layout: Layout,
    start: u64,
    target: u64,
}

impl Boards {
    pub fn new(params: &SliderParams) -> Result<Boards> {
        let parsed = parse_params(params)?;
        let layout = Layout::new(&parsed.geom, &parsed.counts);
        let start = layout.index(layout.state(&parsed.start));
        let target = layout.index(layout.state(&parsed.target));
        Ok(Boards {
            layout,
            start,
            target,
        })
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn target(&self) -> u64 {
        self.target
    }

    fn board(&self, index: u64) -> Result<State> {
        self.layout
            .state_at(index)
            .ok_or_else(|| invalid!("board index {index} is past the last board"))
    }

    /// Calls `f` with the index of every neighbour of board `index`.
    fn neighbours(&self, index: u64, mut f: impl FnMut(u64)) -> Result<()> {
        let board = self.board(index)?;
        for m in self.layout.moves(board.blank()) {
            f(self.layout.index(self.layout.apply(m, board)));
        }
        Ok(())
    }
}

/// What one shard of a forward level sends one bucket of the next level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForwardBucket {
    /// Neighbours of the sender's boards, strictly increasing, each with the
    /// number of shortest sequences reaching it through the sender's boards.
    pub candidates: Vec<(u64, u128)>,
    /// The boards of the level before the sender's that it was handed.
    pub previous: Vec<u64>,
}

impl ForwardBucket {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 6 * self.candidates.len() + 2 * self.previous.len());
        out.push(TAG_FORWARD);
        push_varint(&mut out, self.candidates.len() as u128);
        let mut last = None;
        for &(board, count) in &self.candidates {
            let gap = match last {
                None => board,
                Some(p) => {
                    assert!(board > p, "forward candidates must be strictly increasing");
                    board - p
                }
            };
            push_varint(&mut out, u128::from(gap));
            push_varint(&mut out, count);
            last = Some(board);
        }
        push_increasing(&mut out, &self.previous);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ForwardBucket> {
        let mut reader = tagged(bytes, TAG_FORWARD, "forward bucket")?;
        let count = reader.varint("the candidate count")?;
        if count > reader.remaining() as u128 / 2 {
            return Err(invalid!(
                "forward bucket: {count} candidates announced in {} bytes",
                reader.remaining()
            ));
        }
        let mut candidates = Vec::with_capacity(count as usize);
        let mut last: Option<u64> = None;
        for i in 0..count as usize {
            let gap = reader.varint("a candidate")?;
            let board = match last {
                Some(_) if gap == 0 => {
                    return Err(invalid!(
                        "forward bucket: candidate {i} repeats the previous one"
                    ));
                }
                Some(p) => u128::from(p) + gap,
                None => gap,
            };
            let board = u64::try_from(board)
                .map_err(|_| invalid!("forward bucket: candidate {i} is too large"))?;
            let paths = reader.varint("a sequence count")?;
            if paths == 0 {
                return Err(invalid!(
                    "forward bucket: candidate {i} is reached by no sequence"
                ));
            }
            candidates.push((board, paths));
            last = Some(board);
        }
        let previous = reader.increasing("boards")?;
        reader.finish("the previous level")?;
        Ok(ForwardBucket {
            candidates,
            previous,
        })
    }
}

/// A bucket of a level's boards (`TAG_MEMBERS`) or of a graph level's
/// neighbours (`TAG_NEIGHBOURS`).
fn encode_boards(tag: u8, boards: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 2 * boards.len());
    out.push(tag);
    push_increasing(&mut out, boards);
    out
}

fn decode_boards(bytes: &[u8], tag: u8, what: &'static str) -> Result<Vec<u64>> {
    let mut reader = tagged(bytes, tag, what)?;
    let boards = reader.increasing("boards")?;
    reader.finish("its boards")?;
    Ok(boards)
}

/// A level's boards in one bucket, as the forward shards write them.
pub fn decode_members(bytes: &[u8]) -> Result<Vec<u64>> {
    decode_boards(bytes, TAG_MEMBERS, "level bucket")
}

/// Neighbours of a graph level in one bucket.
pub fn decode_neighbours(bytes: &[u8]) -> Result<Vec<u64>> {
    decode_boards(bytes, TAG_NEIGHBOURS, "graph neighbour bucket")
}

/// A reader past the tag byte, which must be `tag`.
fn tagged<'a>(bytes: &'a [u8], tag: u8, what: &'static str) -> Result<Reader<'a>> {
    match bytes.first() {
        Some(&t) if t == tag => Ok(Reader::new(&bytes[1..], what)),
        Some(&t) => Err(invalid!("{what}: tag {t} where {tag} was expected")),
        None => Err(invalid!("{what}: empty")),
    }
}

/// What one forward shard found and sends on.
#[derive(Debug)]
pub struct ForwardLevel {
    /// Boards of the level in the shard's bucket.
    pub boards: u64,
    /// The number of shortest sequences to the target, if the target is in
    /// the shard's bucket of this level.
    pub target_paths: Option<u128>,
    /// `2 * buckets_out` buckets: forward buckets, then members.
    pub output: Vec<u8>,
}

/// What the only shard of level 0 is handed: the start, reached by the empty
/// sequence.
pub fn start_input(boards: &Boards) -> (Vec<ForwardBucket>, Vec<Vec<u64>>) {
    let bucket = ForwardBucket {
        candidates: vec![(boards.start, 1)],
        previous: Vec::new(),
    };
    (vec![bucket], Vec::new())
}

/// One shard of a forward level: from the forward buckets and the members
/// every shard of the level before sent this bucket, the level's boards in the
/// bucket with their sequence counts, expanded into the `buckets_out` buckets
/// of the next level. One unit of work per board of the level.
pub fn expand_forward(
    boards: &Boards,
    inputs: &[ForwardBucket],
    members: &[Vec<u64>],
    buckets_out: u32,
    control: &Control,
) -> Result<ForwardLevel> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let mut candidates = Vec::new();
    let mut previous = Vec::new();
    for input in inputs {
        candidates.extend_from_slice(&input.candidates);
        previous.extend_from_slice(&input.previous);
    }
    let current = merge_sets(members);
    previous.sort_unstable();
    previous.dedup();
    let level = sum_equal(candidates)?;
    control.check()?;
    let level: Vec<(u64, u128)> = level
        .into_iter()
        .filter(|(b, _)| current.binary_search(b).is_err() && previous.binary_search(b).is_err())
        .collect();
    let target_paths = level
        .binary_search_by_key(&boards.target, |&(b, _)| b)
        .ok()
        .map(|i| level[i].1);

    let p = buckets_out as usize;
    let mut out_candidates: Vec<Vec<(u64, u128)>> = vec![Vec::new(); p];
    for chunk in level.chunks(POLL_BOARDS) {
        control.check()?;
        for &(board, paths) in chunk {
            boards.neighbours(board, |n| {
                out_candidates[bucket_of(u128::from(n), buckets_out) as usize].push((n, paths))
            })?;
        }
        control.add_work(chunk.len() as u64);
    }
    let mut out_previous: Vec<Vec<u64>> = vec![Vec::new(); p];
    for &board in &current {
        out_previous[bucket_of(u128::from(board), buckets_out) as usize].push(board);
    }
    let mut out_members: Vec<Vec<u64>> = vec![Vec::new(); p];
    for &(board, _) in &level {
        out_members[bucket_of(u128::from(board), buckets_out) as usize].push(board);
    }
    let mut buckets = Vec::with_capacity(2 * p);
    for (candidates, previous) in out_candidates.into_iter().zip(out_previous) {
        control.check()?;
        let bucket = ForwardBucket {
            candidates: sum_equal(candidates)?,
            previous,
        };
        buckets.push(bucket.encode());
    }
    for members in &out_members {
        buckets.push(encode_boards(TAG_MEMBERS, members));
    }
    Ok(ForwardLevel {
        boards: level.len() as u64,
        target_paths,
        output: encode_buckets(&buckets),
    })
}

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
    boards.neighbours(boards.target, |n| {
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
/// of work per board kept.
pub fn expand_backward(
    boards: &Boards,
    members: &[Vec<u64>],
    neighbours: &[Vec<u64>],
    buckets_out: u32,
    control: &Control,
) -> Result<GraphLevel> {
    let members = merge_sets(members);
    let neighbours = merge_sets(neighbours);
    control.check()?;
    let kept: Vec<u64> = members
        .into_iter()
        .filter(|b| neighbours.binary_search(b).is_ok())
        .collect();
    control.add_work(kept.len() as u64);
    if buckets_out == 0 {
        return Ok(GraphLevel {
            boards: kept,
            output: Vec::new(),
        });
    }
    let mut out: Vec<Vec<u64>> = vec![Vec::new(); buckets_out as usize];
    for chunk in kept.chunks(POLL_BOARDS) {
        control.check()?;
        for &board in chunk {
            boards.neighbours(board, |n| {
                out[bucket_of(u128::from(n), buckets_out) as usize].push(n)
            })?;
        }
    }
    let buckets: Vec<Vec<u8>> = out
        .into_iter()
        .map(|mut list| {
            list.sort_unstable();
            list.dedup();
            encode_boards(TAG_NEIGHBOURS, &list)
        })
        .collect();
    Ok(GraphLevel {
        boards: kept,
        output: encode_buckets(&buckets),
    })
}

/// The shortest-path graph's levels as stage data.
pub fn encode_graph(levels: &[Vec<u64>]) -> Vec<u8> {
    let mut out = vec![TAG_GRAPH];
    push_varint(&mut out, levels.len() as u128);
    for level in levels {
        push_increasing(&mut out, level);
    }
    out
}

pub fn decode_graph(bytes: &[u8]) -> Result<Vec<Vec<u64>>> {
    let mut reader = tagged(bytes, TAG_GRAPH, "shortest-path graph")?;
    let count = reader.varint("the level count")?;
    if count > reader.remaining() as u128 {
        return Err(invalid!("shortest-path graph: {count} levels announced"));
    }
    let mut levels = Vec::with_capacity(count as usize);
    for _ in 0..count {
        levels.push(reader.increasing("boards")?);
    }
    reader.finish("the last level")?;
    Ok(levels)
}

/// The union of increasing lists, increasing. Any list that is not strictly
/// increasing is still merged correctly (sorted and deduplicated).
fn merge_sets(lists: &[Vec<u64>]) -> Vec<u64> {
    let mut all: Vec<u64> = lists.iter().flatten().copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Sorts `(board, count)` pairs and sums the counts of equal boards
/// (exactly: a sum past 128 bits is refused).
fn sum_equal(mut pairs: Vec<(u64, u128)>) -> Result<Vec<(u64, u128)>> {
    pairs.sort_unstable_by_key(|&(b, _)| b);
    let mut out: Vec<(u64, u128)> = Vec::with_capacity(pairs.len());
    for (board, count) in pairs {
        match out.last_mut() {
            Some((b, c)) if *b == board => {
                *c = c.checked_add(count).ok_or_else(|| {
                    invalid!("the number of sequences reaching board {board} overflows 128 bits")
                })?;
            }
            _ => out.push((board, count)),
        }
    }
    Ok(out)
}

/// What the shards of a stage of the frontier plan read, decoded.
#[derive(Debug)]
pub enum LevelInput {
    /// A forward level: every shard of the level before sent its forward
    /// bucket and its members.
    Forward {
        buckets: Vec<ForwardBucket>,
        members: Vec<Vec<u64>>,
    },
    /// A graph level: the forward shards' members of the level, and the
    /// neighbours of the graph level after it (none next to the target).
    Backward {
        members: Vec<Vec<u64>>,
        neighbours: Vec<Vec<u64>>,
    },
    /// The whole graph's levels.
    Graph(Vec<Vec<u64>>),
}

/// Decodes the gathered buckets (`buckets::split_gathered` form) a shard of
/// the frontier plan reads, in the order its task names them; what they are
/// follows from their tags, and any mismatch is `InvalidArgument`.
pub fn decode_inputs(parts: &[&[u8]]) -> Result<LevelInput> {
    let segments = parts
        .iter()
        .map(|part| crate::buckets::split_gathered(part))
        .collect::<Result<Vec<_>>>()?;
    let first_tag = segments
        .first()
        .and_then(|s| s.first())
        .and_then(|b| b.first())
        .copied();
    match (first_tag, segments.as_slice()) {
        (Some(TAG_FORWARD), [buckets, members]) => Ok(LevelInput::Forward {
            buckets: buckets
                .iter()
                .map(|b| ForwardBucket::decode(b))
                .collect::<Result<_>>()?,
            members: members
                .iter()
                .map(|b| decode_members(b))
                .collect::<Result<_>>()?,
        }),
        (Some(TAG_MEMBERS), [members, rest @ ..]) if rest.len() <= 1 => Ok(LevelInput::Backward {
            members: members
                .iter()
                .map(|b| decode_members(b))
                .collect::<Result<_>>()?,
            neighbours: rest
                .iter()
                .flat_map(|part| part.iter())
                .map(|b| decode_neighbours(b))
                .collect::<Result<_>>()?,
        }),
        (Some(TAG_GRAPH), [graph]) if graph.len() == 1 => {
            Ok(LevelInput::Graph(decode_graph(graph[0])?))
        }
        _ => Err(invalid!(
            "slider stage data: {} inputs starting with tag {first_tag:?} are not what a \
             shard of the frontier plan reads",
            parts.len()
        )),
    }
}
