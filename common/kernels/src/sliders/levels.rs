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
//! `q`. It sums the counts of equal candidates (a merge of the senders'
//! increasing lists), removes the two earlier levels, and writes `2 P`
//! buckets for the `P` shards of level `k + 1`: the forward buckets first,
//! then its boards of `L_k` by bucket (the members).
//! Each candidate carries the moves back to the boards that sent it: they
//! lead to `L_(k-1)`, so the shard expanding it skips them.
//!
//! **Backward** is [`super::graph_levels`]: the shortest-path graph found
//! from the members of each level that the forward shards wrote.
//!
//! Every bucket starts with a tag byte naming what it holds and its form
//! (the raw form here, the compact form of `forms` in jobs planned since it
//! was), so a shard that is handed the wrong data refuses it.

pub use super::buckets::{Candidate, ForwardBucket};
pub(super) use super::buckets::{TAG_FORWARD, TAG_FORWARD_PLAIN, TAG_MEMBERS, TAG_NEIGHBOURS};
use super::forms::{
    CandidateWriter, TAG_FORWARD_COMPACT, TAG_MEMBERS_COMPACT, decode_boards_compact,
    decode_forward_compact, encode_boards_as, encode_forward_compact, is_boards_tag,
};
use super::state::{Layout, State, StateHint};
use super::{SliderParams, parse_params};
use crate::buckets::{bucket_of, encode_buckets};
use crate::compact::ListForm;
use crate::varint::{Reader, push as push_varint, push_increasing};
use crate::{Control, Result, invalid};

/// Boards handled between two polls of the control.
pub(super) const POLL_BOARDS: usize = 4096;

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

    /// Whether a board's index leaves 4 bits for its moves back in a `u64`.
    pub fn fits_narrow_keys(&self) -> bool {
        self.layout.total() < 1 << 60
    }

    fn board(&self, index: u64, hint: &mut StateHint) -> Result<State> {
        self.layout
            .state_near(index, hint)
            .ok_or_else(|| invalid!("board index {index} is past the last board"))
    }

    /// Calls `f` with the index of every neighbour of board `index` but those
    /// the moves in `skip` (bit `c` for the move of code `c`) lead to, and
    /// the code of the move back from it. Boards come faster in increasing
    /// order with one `hint`.
    pub(super) fn neighbours_except(
        &self,
        index: u64,
        skip: u8,
        hint: &mut StateHint,
        mut f: impl FnMut(u64, u8),
    ) -> Result<()> {
        let board = self.board(index, hint)?;
        for m in self.layout.moves(board.blank()) {
            if skip & 1 << m.code() == 0 {
                f(self.neighbour(index, board, m), m.back);
            }
        }
        Ok(())
    }

    /// The index of the board move `m` makes of `board` (at `index`): one
    /// step along the index for a horizontal move, which keeps the tiles'
    /// order, else ranked again.
    #[inline]
    fn neighbour(&self, index: u64, board: State, m: &super::state::Move) -> u64 {
        match m.index_step {
            Some(step) => index.wrapping_add(step),
            None => self.layout.index(self.layout.apply(m, board)),
        }
    }

    /// Calls `f` with the index of every neighbour of board `index`.
    pub(super) fn neighbours(
        &self,
        index: u64,
        hint: &mut StateHint,
        mut f: impl FnMut(u64),
    ) -> Result<()> {
        self.neighbours_except(index, 0, hint, |n, _| f(n))
    }
}

impl ForwardBucket {
    /// The bucket in `form`.
    pub fn encode_as(&self, form: ListForm) -> Vec<u8> {
        match form {
            ListForm::Raw => self.encode(),
            ListForm::Compact => {
                encode_forward_compact(self.candidates.iter().copied(), &self.previous)
            }
        }
    }

    /// The bucket in the raw form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 6 * self.candidates.len() + 2 * self.previous.len());
        out.push(TAG_FORWARD);
        push_varint(&mut out, self.candidates.len() as u128);
        let mut last = None;
        for c in &self.candidates {
            let gap = match last {
                None => c.board,
                Some(p) => {
                    assert!(
                        c.board > p,
                        "forward candidates must be strictly increasing"
                    );
                    c.board - p
                }
            };
            push_varint(&mut out, u128::from(gap) << 4 | u128::from(c.back & 15));
            push_varint(&mut out, c.paths);
            last = Some(c.board);
        }
        push_increasing(&mut out, &self.previous);
        out
    }

    /// Reads a forward bucket in either form (its tag says which).
    pub fn decode(bytes: &[u8]) -> Result<ForwardBucket> {
        if bytes.first() == Some(&TAG_FORWARD_COMPACT) {
            return decode_forward_compact(bytes, "forward bucket");
        }
        let with_back = bytes.first() == Some(&TAG_FORWARD);
        let tag = if with_back {
            TAG_FORWARD
        } else {
            TAG_FORWARD_PLAIN
        };
        let mut reader = tagged(bytes, tag, "forward bucket")?;
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
            let (board, back) =
                next_candidate(reader.varint("a candidate")?, with_back, last, i as u64)?;
            let paths = reader.varint("a sequence count")?;
            if paths == 0 {
                return Err(invalid!(
                    "forward bucket: candidate {i} is reached by no sequence"
                ));
            }
            candidates.push(Candidate { board, paths, back });
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

/// Whether a bucket starting with `tag` is a forward bucket.
pub fn is_forward_tag(tag: Option<u8>) -> bool {
    matches!(
        tag,
        Some(TAG_FORWARD | TAG_FORWARD_PLAIN | TAG_FORWARD_COMPACT)
    )
}

/// Candidate `i` of a forward bucket from its encoded gap (with its moves
/// back in the low four bits when the bucket has them) and the board
/// before it: its board and its moves back.
pub(super) fn next_candidate(
    code: u128,
    with_back: bool,
    last: Option<u64>,
    i: u64,
) -> Result<(u64, u8)> {
    let (gap, back) = match with_back {
        true => (code >> 4, (code & 15) as u8),
        false => (code, 0),
    };
    let board = match last {
        Some(_) if gap == 0 => {
            return Err(invalid!(
                "forward bucket: candidate {i} repeats the previous one"
            ));
        }
        Some(p) => u128::from(p) + gap,
        None => gap,
    };
    let board =
        u64::try_from(board).map_err(|_| invalid!("forward bucket: candidate {i} is too large"))?;
    Ok((board, back))
}

fn decode_boards(bytes: &[u8], tag: u8, what: &'static str) -> Result<Vec<u64>> {
    if bytes.first() != Some(&tag) && is_boards_tag(bytes.first().copied(), tag) {
        return decode_boards_compact(bytes, what);
    }
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
        candidates: vec![Candidate {
            board: boards.start,
            paths: 1,
            back: 0,
        }],
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
    form: ListForm,
    control: &Control,
) -> Result<ForwardLevel> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let current = merge_sets(members);
    let previous = merge_sets(&inputs.iter().map(|b| &b.previous[..]).collect::<Vec<_>>());
    control.check()?;
    // The senders' candidates are each increasing: merged, not sorted, and
    // the two earlier levels (increasing too) removed in the same walk.
    let mut level: Vec<Candidate> =
        Vec::with_capacity(inputs.iter().map(|b| b.candidates.len()).sum());
    let (mut in_current, mut in_previous) = (current.iter().peekable(), previous.iter().peekable());
    merge_increasing(
        &inputs.iter().map(|b| &b.candidates[..]).collect::<Vec<_>>(),
        |c| c.board,
        |candidate| {
            let board = candidate.board;
            if let Some(last) = level.last_mut().filter(|last| last.board == board) {
                last.paths = (last.paths)
                    .checked_add(candidate.paths)
                    .ok_or_else(|| overflow(board))?;
                last.back |= candidate.back;
                return Ok(());
            }
            let known = |set: &mut std::iter::Peekable<std::slice::Iter<'_, u64>>| {
                while set.next_if(|&&b| b < board).is_some() {}
                set.peek() == Some(&&board)
            };
            if !known(&mut in_current) && !known(&mut in_previous) {
                level.push(candidate);
            }
            Ok(())
        },
    )?;
    let target_paths = level
        .binary_search_by_key(&boards.target, |c| c.board)
        .ok()
        .map(|i| level[i].paths);

    let p = buckets_out as usize;
    // Room for every move of every board: reserved address space costs
    // nothing until it is written, and the lists never grow by copying.
    let room = level.len() * boards.layout.max_degree() / p + 16;
    // Counts that fit 64 bits and boards that leave 4 bits for the moves
    // back are sent as 16-byte items: half the bytes to write and sort.
    let narrow = boards.layout.total() < 1 << 60 && level.iter().all(|c| c.paths >> 64 == 0);
    let mut out_narrow: Vec<Vec<Sent>> = Vec::new();
    let mut out_wide: Vec<Vec<Candidate>> = Vec::new();
    match narrow {
        true => out_narrow = (0..p).map(|_| Vec::with_capacity(room)).collect(),
        false => out_wide = (0..p).map(|_| Vec::with_capacity(room)).collect(),
    }
    let mut hint = StateHint::default();
    for chunk in level.chunks(POLL_BOARDS) {
        control.check()?;
        for c in chunk {
            // The moves back lead to the level before: skipped, not sent.
            match narrow {
                true => boards.neighbours_except(c.board, c.back, &mut hint, |n, back| {
                    out_narrow[bucket_of(u128::from(n), buckets_out) as usize].push(Sent {
                        key: n << 4 | 1 << back,
                        paths: c.paths as u64,
                    })
                })?,
                false => boards.neighbours_except(c.board, c.back, &mut hint, |n, back| {
                    out_wide[bucket_of(u128::from(n), buckets_out) as usize].push(Candidate {
                        board: n,
                        paths: c.paths,
                        back: 1 << back,
                    })
                })?,
            }
        }
        control.add_work(chunk.len() as u64);
    }
    let mut out_previous: Vec<Vec<u64>> = vec![Vec::new(); p];
    for &board in &current {
        out_previous[bucket_of(u128::from(board), buckets_out) as usize].push(board);
    }
    let mut out_members: Vec<Vec<u64>> = vec![Vec::new(); p];
    for &Candidate { board, .. } in &level {
        out_members[bucket_of(u128::from(board), buckets_out) as usize].push(board);
    }
    let mut buckets = Vec::with_capacity(2 * p);
    for (q, previous) in out_previous.into_iter().enumerate() {
        control.check()?;
        let encoded = match narrow {
            true => encode_sent(std::mem::take(&mut out_narrow[q]), &previous, form),
            false => ForwardBucket {
                candidates: sum_equal(std::mem::take(&mut out_wide[q]))?,
                previous,
            }
            .encode_as(form),
        };
        buckets.push(encoded);
    }
    for members in &out_members {
        buckets.push(encode_boards_as(form, TAG_MEMBERS, members));
    }
    Ok(ForwardLevel {
        boards: level.len() as u64,
        target_paths,
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

/// The union of increasing lists, increasing. A list that is not strictly
/// increasing is still merged correctly (sorted and deduplicated).
pub(super) fn merge_sets<L: AsRef<[u64]>>(lists: &[L]) -> Vec<u64> {
    let lists: Vec<&[u64]> = lists.iter().map(AsRef::as_ref).collect();
    let mut all = Vec::with_capacity(lists.iter().map(|l| l.len()).sum());
    merge_increasing(
        &lists,
        |&b| b,
        |b| {
            if all.last() != Some(&b) {
                all.push(b);
            }
            Ok(())
        },
    )
    .expect("pushing never fails");
    all
}

/// Calls `f` with the items of `lists` in increasing order of `key`. Lists
/// are read as they come when each is sorted (a k-way merge), and sorted
/// first otherwise, so any input gives the same sequence.
fn merge_increasing<T: Copy>(
    lists: &[&[T]],
    key: impl Fn(&T) -> u64,
    mut f: impl FnMut(T) -> Result<()>,
) -> Result<()> {
    use std::cmp::Reverse;
    let sorted: Vec<std::borrow::Cow<'_, [T]>> = lists
        .iter()
        .map(|l| match l.is_sorted_by_key(&key) {
            true => std::borrow::Cow::Borrowed(*l),
            false => {
                let mut owned = l.to_vec();
                owned.sort_unstable_by_key(&key);
                std::borrow::Cow::Owned(owned)
            }
        })
        .filter(|l| !l.is_empty())
        .collect();
    if let [only] = sorted.as_slice() {
        return only.iter().try_for_each(|&item| f(item));
    }
    let mut at = vec![0usize; sorted.len()];
    let mut heads: std::collections::BinaryHeap<Reverse<(u64, usize)>> = sorted
        .iter()
        .enumerate()
        .map(|(i, l)| Reverse((key(&l[0]), i)))
        .collect();
    while let Some(Reverse((_, i))) = heads.pop() {
        f(sorted[i][at[i]])?;
        at[i] += 1;
        if let Some(next) = sorted[i].get(at[i]) {
            heads.push(Reverse((key(next), i)));
        }
    }
    Ok(())
}

fn overflow(board: u64) -> crate::Error {
    invalid!("the number of sequences reaching board {board} overflows 128 bits")
}

/// A candidate as its sender collects it: the board and a move back in one
/// key (`board << 4 | back`, so sorting the keys sorts the boards) and a count
/// that fits 64 bits.
#[derive(Clone, Copy, Debug)]
struct Sent {
    key: u64,
    paths: u64,
}

/// The bytes of the [`ForwardBucket`] of `sent` (summed by board, as
/// [`sum_equal`] sums) and `previous` in `form`: sorted in place and encoded
/// as it is summed, without a list of [`Candidate`]s.
fn encode_sent(mut sent: Vec<Sent>, previous: &[u64], form: ListForm) -> Vec<u8> {
    // A radix sort by the key's bytes that differ: the boards of one job use
    // a few of the key's bytes, so a few passes instead of a comparison sort.
    radsort::sort_by_key(&mut sent, |s| s.key);
    if form == ListForm::Compact {
        let mut list = Vec::new();
        let mut writer = CandidateWriter::new();
        for (board, paths, back) in summed(&sent) {
            writer.push(board, paths, back, &mut list);
        }
        let count = writer.finish(&mut list);
        let mut out = Vec::with_capacity(list.len() + 32 + previous.len());
        out.push(TAG_FORWARD_COMPACT);
        let mut head = Vec::new();
        push_varint(&mut head, count);
        out.extend_from_slice(&((head.len() + list.len()) as u64).to_le_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&list);
        out.extend_from_slice(&crate::compact::encode_keys(
            previous.iter().map(|&b| u128::from(b)),
        ));
        return out;
    }
    let distinct = sent.chunk_by(|a, b| a.key >> 4 == b.key >> 4).count();
    let mut out = Vec::with_capacity(1 + 6 * distinct + 2 * previous.len());
    out.push(TAG_FORWARD);
    push_varint(&mut out, distinct as u128);
    let mut last = 0;
    for (board, paths, back) in summed(&sent) {
        push_varint(&mut out, u128::from(board - last) << 4 | u128::from(back));
        push_varint(&mut out, paths);
        last = board;
    }
    push_increasing(&mut out, previous);
    out
}

/// The sorted items of `sent` summed by board: each board, its sequences and
/// its moves back.
fn summed(sent: &[Sent]) -> impl Iterator<Item = (u64, u128, u8)> + '_ {
    sent.chunk_by(|a, b| a.key >> 4 == b.key >> 4).map(|same| {
        let board = same[0].key >> 4;
        let mut paths: u128 = 0;
        let mut back = 0;
        for s in same {
            // At most one sum per move into the board: never past 128 bits.
            paths += u128::from(s.paths);
            back |= (s.key & 15) as u8;
        }
        (board, paths, back)
    })
}

/// Sorts candidates by board and sums the counts (exactly: a sum past 128
/// bits is refused) and joins the moves back of equal boards, in place.
fn sum_equal(mut candidates: Vec<Candidate>) -> Result<Vec<Candidate>> {
    candidates.sort_unstable_by_key(|c| c.board);
    let mut kept = 0;
    for i in 0..candidates.len() {
        let c = candidates[i];
        match kept {
            0 => kept = 1,
            _ if candidates[kept - 1].board == c.board => {
                let sum = &mut candidates[kept - 1];
                sum.paths = sum
                    .paths
                    .checked_add(c.paths)
                    .ok_or_else(|| overflow(c.board))?;
                sum.back |= c.back;
            }
            _ => {
                candidates[kept] = c;
                kept += 1;
            }
        }
    }
    candidates.truncate(kept);
    Ok(candidates)
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
    /// Graph levels: for each bucket read, the forward shards' members in
    /// it (a shard of one graph level reads one bucket, a shard of several
    /// every bucket of each level, as its task says), and the neighbours of
    /// the graph level above (none next to the target).
    Backward {
        members: Vec<Vec<Vec<u64>>>,
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
        (Some(TAG_FORWARD | TAG_FORWARD_PLAIN | TAG_FORWARD_COMPACT), [buckets, members]) => {
            Ok(LevelInput::Forward {
                buckets: buckets
                    .iter()
                    .map(|b| ForwardBucket::decode(b))
                    .collect::<Result<_>>()?,
                members: members
                    .iter()
                    .map(|b| decode_members(b))
                    .collect::<Result<_>>()?,
            })
        }
        (Some(TAG_MEMBERS | TAG_MEMBERS_COMPACT), _) => {
            // Members' buckets first, then the neighbours' (each bucket's
            // senders all write its tag, in either form).
            let is = |segments: &Vec<&[u8]>, tag: u8| {
                (segments.iter()).all(|b| is_boards_tag(b.first().copied(), tag))
            };
            let split = segments
                .iter()
                .position(|s| !is(s, TAG_MEMBERS))
                .unwrap_or(segments.len());
            let (members, rest) = segments.split_at(split);
            if !rest.iter().all(|s| is(s, TAG_NEIGHBOURS)) {
                return Err(invalid!(
                    "slider stage data: a graph shard's inputs are members' buckets, then \
                     neighbours' buckets"
                ));
            }
            Ok(LevelInput::Backward {
                members: members
                    .iter()
                    .map(|part| part.iter().map(|b| decode_members(b)).collect())
                    .collect::<Result<_>>()?,
                neighbours: rest
                    .iter()
                    .flat_map(|part| part.iter())
                    .map(|b| decode_neighbours(b))
                    .collect::<Result<_>>()?,
            })
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists of pseudo-random boards, some sorted and some not, with repeats.
    fn lists(seed: u64) -> Vec<Vec<(u64, u128)>> {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 40
        };
        (0..5)
            .map(|i| {
                let mut list: Vec<(u64, u128)> = (0..200 + 50 * i)
                    .map(|_| (next() % 700, u128::from(next())))
                    .collect();
                if i % 2 == 0 {
                    list.sort_unstable();
                }
                list
            })
            .collect()
    }

    #[test]
    fn a_merge_gives_every_item_in_order_whether_or_not_its_lists_are_sorted() {
        for seed in 0..20 {
            let lists = lists(seed);
            let slices: Vec<&[(u64, u128)]> = lists.iter().map(Vec::as_slice).collect();
            let mut merged = Vec::new();
            merge_increasing(
                &slices,
                |&(b, _)| b,
                |item| {
                    merged.push(item);
                    Ok(())
                },
            )
            .unwrap();
            let mut expected: Vec<(u64, u128)> = lists.concat();
            expected.sort_unstable();
            assert!(merged.is_sorted_by_key(|&(b, _)| b));
            merged.sort_unstable();
            assert_eq!(merged, expected);
            let boards: Vec<Vec<u64>> = lists
                .iter()
                .map(|l| l.iter().map(|&(b, _)| b).collect())
                .collect();
            let mut union: Vec<u64> = boards.concat();
            union.sort_unstable();
            union.dedup();
            assert_eq!(merge_sets(&boards), union);
        }
    }

    #[test]
    fn a_horizontal_move_steps_the_index_as_ranking_the_board_would() {
        for params in [
            super::super::SliderParams::default(),
            super::super::SliderParams {
                rows: 3,
                cols: 5,
                start: "WRRBB/RRBBG/GGBRB".into(),
                target: "WBRBR/BRBGR/BGRGB".into(),
                ..Default::default()
            },
        ] {
            let boards = Boards::new(&params).unwrap();
            let total = boards.layout.total();
            // One hint for increasing boards, as a level shard uses it.
            let mut hint = StateHint::default();
            for index in (0..total).step_by(101) {
                let board = boards.layout.state_at(index).unwrap();
                let mut fast = Vec::new();
                boards
                    .neighbours(index, &mut hint, |n| fast.push(n))
                    .unwrap();
                let ranked: Vec<u64> = (boards.layout.moves(board.blank()).iter())
                    .map(|m| boards.layout.index(boards.layout.apply(m, board)))
                    .collect();
                assert_eq!(fast, ranked, "board {index}");
            }
        }
    }

    /// Candidates sent as 16-byte items encode to the same bytes as the
    /// same candidates summed as [`Candidate`]s: every board, count and
    /// move back, in any order, repeated.
    #[test]
    fn sent_items_encode_as_the_candidates_they_sum_to() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for len in [0, 1, 2, 100, 5000] {
            let mut sent = Vec::new();
            let mut wide = Vec::new();
            for _ in 0..len {
                // Few boards, so that many repeat; counts up to 64 bits.
                let board = next() % (len as u64 / 3 + 1) + u64::from(len > 100) * (1 << 40);
                let back = (next() % 4) as u8;
                let paths = match next() % 3 {
                    0 => u64::MAX - next() % 5,
                    _ => next() % 1000 + 1,
                };
                sent.push(Sent {
                    key: board << 4 | 1 << back,
                    paths,
                });
                wide.push(Candidate {
                    board,
                    paths: u128::from(paths),
                    back: 1 << back,
                });
            }
            let previous: Vec<u64> = (0..len as u64 / 7).map(|i| 3 * i + 1).collect();
            let expected = ForwardBucket {
                candidates: sum_equal(wide).unwrap(),
                previous: previous.clone(),
            };
            let compact = encode_sent(sent.clone(), &previous, ListForm::Compact);
            assert_eq!(
                compact,
                expected.encode_as(ListForm::Compact),
                "{len} items"
            );
            assert_eq!(ForwardBucket::decode(&compact).unwrap(), expected);
            let got = encode_sent(sent, &previous, ListForm::Raw);
            assert_eq!(got, expected.encode(), "{len} items");
            assert_eq!(ForwardBucket::decode(&got).unwrap(), expected);
        }
    }

    #[test]
    fn a_level_sums_its_senders_counts_and_refuses_a_sum_past_128_bits() {
        let boards = Boards::new(&super::super::SliderParams::default()).unwrap();
        let start = boards.start();
        let mut others = Vec::new();
        boards
            .neighbours(start, &mut StateHint::default(), |n| others.push(n))
            .unwrap();
        others.sort_unstable();
        let sender = |paths: u128| ForwardBucket {
            candidates: others
                .iter()
                .map(|&board| Candidate {
                    board,
                    paths,
                    back: 0,
                })
                .collect(),
            previous: Vec::new(),
        };
        let control = Control::new();
        // Two senders reaching the same boards: each board's count is the sum.
        let level = expand_forward(
            &boards,
            &[sender(3), sender(4)],
            &[vec![start]],
            1,
            ListForm::Raw,
            &control,
        )
        .unwrap();
        assert_eq!(level.boards, others.len() as u64);
        let buckets = crate::buckets::split_buckets(&level.output).unwrap();
        let next = ForwardBucket::decode(buckets[0]).unwrap();
        // The start (the level before) is handed on, and every candidate of
        // the next level is reached through 7 sequences per board it neighbours.
        assert_eq!(next.previous, vec![start]);
        assert!(
            next.candidates
                .iter()
                .all(|c| c.paths % 7 == 0 && c.paths > 0)
        );
        let senders = [sender(u128::MAX), sender(1)];
        let wide = expand_forward(&boards, &senders, &[], 1, ListForm::Raw, &control);
        let error = wide.unwrap_err().to_string();
        assert!(error.contains("overflows 128 bits"), "{error}");
    }

    /// The forward levels from the start in `buckets` buckets, each board
    /// with the sequences reaching it, and the candidates sent; `plain`
    /// hands every bucket on in the form written before candidates carried
    /// their moves back.
    fn forward_levels(levels: usize, buckets: u32, plain: bool) -> (Vec<Vec<(u64, u128)>>, usize) {
        let boards = Boards::new(&super::super::SliderParams::default()).unwrap();
        let control = Control::new();
        let b = buckets as usize;
        let (start_buckets, start_members) = start_input(&boards);
        let mut inputs: Vec<Vec<ForwardBucket>> = vec![start_buckets];
        let mut members: Vec<Vec<Vec<u64>>> = vec![start_members];
        let (mut found, mut sent) = (Vec::new(), 0);
        for _ in 0..levels {
            let mut next_inputs = vec![Vec::new(); b];
            let mut next_members = vec![Vec::new(); b];
            for q in 0..inputs.len() {
                // Written in the compact form, read back by tag.
                let form = ListForm::compact_if(!plain);
                let out = expand_forward(&boards, &inputs[q], &members[q], buckets, form, &control)
                    .unwrap();
                let parts = crate::buckets::split_buckets(&out.output).unwrap();
                for r in 0..b {
                    let mut bucket = ForwardBucket::decode(parts[r]).unwrap();
                    sent += bucket.candidates.len();
                    if plain {
                        bucket = ForwardBucket::decode(&plain_encoding(&bucket)).unwrap();
                        assert!(bucket.candidates.iter().all(|c| c.back == 0));
                    }
                    next_inputs[r].push(bucket);
                    next_members[r].push(decode_members(parts[b + r]).unwrap());
                }
            }
            // The level these shards found: their members, each with the
            // sequences of the candidates they were handed for it.
            let level = merge_sets(&next_members.concat());
            let mut paths = vec![0u128; level.len()];
            for c in inputs
                .iter()
                .flatten()
                .flat_map(|bucket| &bucket.candidates)
            {
                if let Ok(i) = level.binary_search(&c.board) {
                    paths[i] += c.paths;
                }
            }
            found.push(level.into_iter().zip(paths).collect());
            inputs = next_inputs;
            members = next_members;
        }
        (found, sent)
    }

    /// A bucket in the form written before candidates carried moves back.
    fn plain_encoding(bucket: &ForwardBucket) -> Vec<u8> {
        let mut out = vec![TAG_FORWARD_PLAIN];
        push_varint(&mut out, bucket.candidates.len() as u128);
        let mut last = 0;
        for c in &bucket.candidates {
            push_varint(&mut out, u128::from(c.board - last));
            push_varint(&mut out, c.paths);
            last = c.board;
        }
        push_increasing(&mut out, &bucket.previous);
        out
    }

    #[test]
    fn moves_back_are_skipped_without_changing_a_level_and_old_buckets_still_read() {
        for buckets in [1, 3] {
            let (with_back, sent) = forward_levels(12, buckets, false);
            let (plain, sent_plain) = forward_levels(12, buckets, true);
            assert_eq!(with_back, plain);
            assert!(with_back[11].len() > 100, "the levels grow");
            // Every board but the start has a move back to the level before.
            assert!(
                sent < sent_plain,
                "{sent} candidates sent, {sent_plain} without moves back"
            );
        }
    }
}
