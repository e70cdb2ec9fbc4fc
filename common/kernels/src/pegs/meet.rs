//! Meeting in the middle: the frontier plan's count when the final hole is
//! given.
//!
//! Pegs and holes trade places when a game is played backwards: a jump from
//! `a` over `b` into `c` on a board is, on its complement, a jump from `c`
//! over `b` into `a`. So the sequences from a board `p` to the one peg on the
//! final hole `e` are, reversed, the sequences from the board with every hole
//! but `e` filled (the *end start*) to the complement of `p`, and with `f` the
//! number of sequences from the start and `f'` the number from the end start,
//!
//! ```text
//! solutions = sum over the boards p after a jumps of f(p) f'(complement p)
//! ```
//!
//! for any `a` between 0 and the `T` jumps of a solution (`T` = holes - 2).
//! Both counts come from forward searches by levels: the search from the
//! start to level `a` and the search from the end start to level `b = T - a`,
//! whose boards have the pegs of the complements of level `a`. Neither goes
//! past the middle, where the levels are largest, so the two halves together
//! cost well under one whole search; when the start is the final hole, the
//! two searches are one and its levels `a` and `b` meet.
//!
//! With classes: the symmetries fix `e`, so they fix the end start and `f'` is
//! the same on every board of a class, and complements of a class form a class
//! of the same size. With `F(c)` the level's sum for class `c` (see `levels`)
//! and `c*` the class of the complements,
//!
//! ```text
//! solutions = sum over the classes c of level a of F(c) F'(c*) / |c*|
//! ```
//!
//! where `|c*|` is the number of distinct images of a board of `c*`, which
//! divides `F'(c*) = |c*| f'(c*)` exactly.
//!
//! In stages: level `k` of the start search runs in stage `k`, level `k` of
//! the end search in stage `k + end_delay`. The stage of level `a` sends, in
//! place of children, each class keyed by its complement's class (`joined`),
//! and the end search's level `b - 1` sends its children, level `b`, as usual;
//! in the next stage the join shards merge both and sum the products.

use super::PegGame;
use super::levels::{PegBucket, checked_merge, pegs_at_level};
use crate::buckets::bucket_of;
use crate::{Control, Error, Result, invalid};

/// Boards joined between two polls of the control.
const POLL_BOARDS: usize = 4096;

/// Which search a level belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// From the start position.
    Start,
    /// From the end start: every hole but the final one filled.
    End,
}

/// Where the two searches meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meeting {
    /// The start search's last level, `a`.
    pub start_level: u32,
    /// The end search's level joined with it, `b = T - a`.
    pub end_level: u32,
    /// Stages between a level of the start search and the same level of the
    /// end search, so that both sides reach the join together.
    pub end_delay: u32,
    /// False when the start hole is the final hole: the end search is the
    /// start search, and its own levels `a` and `b` meet.
    pub two_sided: bool,
}

impl Meeting {
    /// The stage (0-based) whose shards join.
    pub fn join_stage(&self) -> u32 {
        self.start_level + 1
    }
}

/// Where the searches of `game` meet; `None` when no final hole is given
/// (each one-peg board would need its own end search).
pub fn meeting(game: &PegGame) -> Option<Meeting> {
    game.end_hole()?;
    let jumps = game.start_board().count_ones().checked_sub(1)?;
    let two_sided = game.end_hole() != Some(game.start_hole());
    // The start search's level `a` reaches the join stage `a + 1` directly;
    // the end search's level `b` is the join stage's own input, made by its
    // level `b - 1` in stage `a`: `b - 1 + end_delay = a`.
    let (start_level, end_delay) = if jumps % 2 == 1 || !two_sided {
        (jumps / 2, 0)
    } else {
        (jumps / 2, 1)
    };
    let end_level = jumps - start_level;
    let end_delay = if two_sided { end_delay } else { 0 };
    Some(Meeting {
        start_level,
        end_level,
        end_delay,
        two_sided,
    })
}

/// The one class a search starts from: the start position, or the end start.
pub fn side_start(game: &PegGame, side: Side) -> Result<PegBucket> {
    let board = match side {
        Side::Start => game.start_board(),
        Side::End => {
            let end = game
                .end_hole()
                .ok_or_else(|| invalid!("the end search needs a final hole"))?;
            game.hole_mask() & !game.hole_bit(end)?
        }
    };
    Ok(PegBucket {
        boards: vec![game.canonical(board)],
        counts: vec![1],
    })
}

/// What to send besides the joined classes from the start search's last
/// level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtMeeting {
    /// Nothing: the end search sends level `b`.
    Nothing,
    /// The level's children: level `b = a + 1` of the one search.
    Children,
    /// The level itself: `b = a`, the level meets itself.
    Itself,
}

/// What the start search's shard of level `a` sends: `(level size, sent,
/// joined)`, `joined[q]` its classes keyed by their complements' classes that
/// fall in bucket `q` of the `buckets_out` join buckets, `sent` as `what` says.
pub fn meet_level(
    game: &PegGame,
    meeting: &Meeting,
    inputs: Vec<PegBucket>,
    buckets_out: u32,
    what: AtMeeting,
    control: &Control,
) -> Result<(u64, Vec<PegBucket>, Vec<PegBucket>)> {
    if buckets_out == 0 {
        return Err(invalid!("a level needs at least one bucket"));
    }
    let pegs = pegs_at_level(game, meeting.start_level).unwrap_or(0);
    let level = checked_merge(game, inputs, pegs)?;
    control.check()?;
    let mut joined = vec![PegBucket::default(); buckets_out as usize];
    let pruner = game.pruner();
    for (&board, &ways) in level.boards.iter().zip(&level.counts) {
        // A pruned class reaches no end: its complements are not reached
        // from the end start, and it joins with nothing.
        if pruner.is_some_and(|p| !p.may_finish(board)) {
            continue;
        }
        let key = game.canonical(game.hole_mask() & !board);
        let bucket = &mut joined[bucket_of(u128::from(key), buckets_out) as usize];
        bucket.boards.push(key);
        bucket.counts.push(ways);
    }
    for bucket in &mut joined {
        sort_bucket(bucket);
    }
    let sent = match what {
        AtMeeting::Nothing => vec![PegBucket::default(); buckets_out as usize],
        AtMeeting::Children => super::levels::children(game, &level, pegs, buckets_out, control)?.0,
        AtMeeting::Itself => {
            control.add_work(level.len() as u64);
            super::levels::rebucket(level.clone(), buckets_out)
        }
    };
    Ok((level.len() as u64, sent, joined))
}

/// A join shard: from the end search's level `b` (what every shard of the
/// previous stage sent this bucket, `levels`) and the start search's classes
/// keyed by their complements (`joined`), the number of classes of level `b`
/// in the bucket and the solutions through them.
pub fn join_level(
    game: &PegGame,
    meeting: &Meeting,
    levels: Vec<PegBucket>,
    joined: Vec<PegBucket>,
    control: &Control,
) -> Result<(u64, u128)> {
    let pegs = pegs_at_level(game, meeting.end_level).unwrap_or(0);
    let level = checked_merge(game, levels, pegs)?;
    let keys = checked_merge(game, joined, pegs)?;
    let mut solutions: u128 = 0;
    let mut at = 0;
    for (block, counts) in keys
        .boards
        .chunks(POLL_BOARDS)
        .zip(keys.counts.chunks(POLL_BOARDS))
    {
        control.check()?;
        for (&key, &ways) in block.iter().zip(counts) {
            at += level.boards[at..].partition_point(|&b| b < key);
            if level.boards.get(at) != Some(&key) {
                continue;
            }
            solutions = solutions_through(game, key, level.counts[at], ways, solutions)?;
        }
        control.add_work(block.len() as u64);
    }
    Ok((level.len() as u64, solutions))
}

/// `solutions` and those through the class `key` of the end search's level:
/// its sum `from_end` over the class's images (see the module's note) times
/// the start search's `ways` to its complements.
pub(super) fn solutions_through(
    game: &PegGame,
    key: u64,
    from_end: u128,
    ways: u128,
    solutions: u128,
) -> Result<u128> {
    let mut images = game.symmetric_images(key);
    images.sort_unstable();
    images.dedup();
    let orbit = images.len() as u128;
    if !from_end.is_multiple_of(orbit) {
        return Err(Error::Internal(format!(
            "pegs: the end search's count {from_end} of board {key:#x} is not a multiple \
             of its {orbit} images"
        )));
    }
    (from_end / orbit)
        .checked_mul(ways)
        .and_then(|w| w.checked_add(solutions))
        .ok_or_else(|| Error::Internal("pegs: count exceeds 128 bits".into()))
}

/// Sorts a bucket whose boards are distinct by board.
fn sort_bucket(bucket: &mut PegBucket) {
    let mut pairs: Vec<(u64, u128)> = bucket
        .boards
        .iter()
        .copied()
        .zip(bucket.counts.iter().copied())
        .collect();
    pairs.sort_unstable_by_key(|&(board, _)| board);
    bucket.boards = pairs.iter().map(|&(b, _)| b).collect();
    bucket.counts = pairs.into_iter().map(|(_, w)| w).collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pegs::levels::expand_level;
    use crate::pegs::{BoardShape, PegGame};

    /// Both searches run as levels of `buckets` shards in this process and
    /// joined: the solutions.
    fn by_meeting(game: &PegGame, buckets: u32) -> u128 {
        let control = Control::new();
        let meeting = meeting(game).unwrap();
        let ship = |inputs: Vec<PegBucket>| -> Vec<PegBucket> {
            inputs
                .iter()
                .map(|b| PegBucket::decode(&b.encode()).unwrap())
                .collect()
        };
        // One search to `last`, in `buckets` buckets: what level `last` holds.
        let search = |side: Side, last: u32| -> Vec<Vec<PegBucket>> {
            let mut inbox = vec![vec![side_start(game, side).unwrap()]];
            let game = &game.clone().searching_from(side);
            for level in 0..last {
                let mut next = vec![Vec::new(); buckets as usize];
                for inputs in inbox {
                    let part = expand_level(game, level, ship(inputs), buckets, &control).unwrap();
                    for (q, bucket) in part.sent.into_iter().enumerate() {
                        next[q].push(bucket);
                    }
                }
                inbox = next;
            }
            inbox
        };
        let at_start = search(Side::Start, meeting.start_level);
        let mut levels = vec![Vec::new(); buckets as usize];
        let mut joined = vec![Vec::new(); buckets as usize];
        let what = match (meeting.two_sided, meeting.end_level > meeting.start_level) {
            (true, _) => AtMeeting::Nothing,
            (false, true) => AtMeeting::Children,
            (false, false) => AtMeeting::Itself,
        };
        for inputs in at_start {
            let (_, sent, keyed) =
                meet_level(game, &meeting, ship(inputs), buckets, what, &control).unwrap();
            for (q, (s, k)) in sent.into_iter().zip(keyed).enumerate() {
                levels[q].push(s);
                joined[q].push(k);
            }
        }
        if meeting.two_sided {
            for (q, bucket) in search(Side::End, meeting.end_level).into_iter().enumerate() {
                levels[q].extend(bucket);
            }
        }
        levels
            .into_iter()
            .zip(joined)
            .map(|(l, j)| {
                join_level(game, &meeting, ship(l), ship(j), &control)
                    .unwrap()
                    .1
            })
            .sum()
    }

    #[test]
    fn meeting_in_the_middle_counts_what_the_layered_kernel_counts() {
        // Odd (5, 6) and even (4) numbers of jumps, one and two searches.
        let games = [
            (BoardShape::Triangle(5), 1, 13),
            (BoardShape::Triangle(5), 4, 15),
            (BoardShape::Triangle(5), 13, 13),
            (BoardShape::Triangle(4), 2, 3),
            (BoardShape::Triangle(4), 4, 8),
            (BoardShape::Triangle(4), 1, 1),
            (BoardShape::Triangle(6), 4, 4),
            (BoardShape::Triangle(6), 2, 8),
        ];
        let mut nonzero = 0;
        for (shape, start, end) in games {
            let game = PegGame::new(shape, Some(start), Some(end)).unwrap();
            let unpruned = game.clone().without_pruning();
            let direct = unpruned.count(&Control::new()).unwrap().solutions;
            nonzero += usize::from(direct > 0);
            let plain = game.clone().without_symmetry();
            for buckets in [1, 2, 7] {
                let name = format!("{shape} {start} to {end}, {buckets} buckets");
                assert_eq!(by_meeting(&game, buckets), direct, "{name}");
                assert_eq!(by_meeting(&unpruned, buckets), direct, "{name}, unpruned");
                assert_eq!(by_meeting(&plain, buckets), direct, "{name}, no symmetry");
            }
        }
        assert_eq!(
            nonzero, 7,
            "every game but the last of triangle 4 has solutions"
        );
    }

    #[test]
    fn searches_meet_where_their_pegs_agree() {
        for (shape, start, end) in [
            (BoardShape::English, 17, 17),
            (BoardShape::English, 10, 17),
            (BoardShape::Triangle(4), 1, 1),
            (BoardShape::Triangle(4), 1, 6),
        ] {
            let game = PegGame::new(shape, Some(start), Some(end)).unwrap();
            let m = meeting(&game).unwrap();
            let jumps = game.start_board().count_ones() - 1;
            assert_eq!(m.start_level + m.end_level, jumps);
            assert_eq!(m.two_sided, start != end);
            // Complements of level a have the pegs of level b.
            let holes = game.hole_mask().count_ones();
            assert_eq!(
                holes - pegs_at_level(&game, m.start_level).unwrap(),
                pegs_at_level(&game, m.end_level).unwrap()
            );
            // Level b - 1 of the end search runs in the stage of level a.
            if m.two_sided {
                assert_eq!(m.end_level - 1 + m.end_delay, m.start_level);
            } else {
                assert!(m.end_level - m.start_level <= 1);
            }
        }
        assert_eq!(
            meeting(&PegGame::new(BoardShape::English, None, None).unwrap()),
            None
        );
    }
}
