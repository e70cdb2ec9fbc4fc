//! Peg solitaire (`pegs` jobs, seed 004): the exact number of solutions of a
//! peg solitaire board.
//!
//! ## The game
//!
//! Every hole but one (the start hole) holds a peg. A jump takes a peg over an
//! orthogonally adjacent peg (on a triangle: adjacent along one of the three
//! edge directions) into the empty hole just behind it and removes the peg
//! jumped over. A solution is a sequence of jumps from the start position that
//! leaves exactly one peg, in the required final hole when one is given.
//! Boards: `english` (33 holes), `french` (37 holes), `diamond` (41 holes: a
//! 9 x 9 square standing on a corner) and `triangle:N` (side `N`,
//! `N (N + 1) / 2` holes). Holes are numbered from 1 row by row from the
//! top, left to right within a row; on a triangle, 1 is the apex and 2, 3 the
//! second row.
//!
//! ## Counting
//!
//! A position is a bitboard: hole `(row, col)` of the board is bit
//! `8 row + col` of a `u64`, a set bit being a peg (triangle rows are
//! left-aligned, `col <= row`; the diamond, 9 holes wide, is sheared to bit
//! `7 row + 2 col - 8`, its symmetries applied by table). All jumps along one
//! axis are found at once by shifting the board by the axis step (1, 8 and on
//! triangles 9; 2 and 7 on the diamond) and masking
//! with the holes where such a jump stays on the board.
//!
//! The count from a position is the sum of the counts from the positions one
//! jump later, and 1 or 0 on a one-peg position. Positions are reduced by the
//! symmetries of the board (8 for the cross boards and the diamond, 6 for
//! triangles),
//! restricted to those that fix the required final hole: under such a symmetry
//! `g` the jumps from `b` and from `g(b)` correspond one to one, and so do their
//! solutions. A class is represented by its canonical board, the smallest of
//! its images as a `u64`.
//!
//! Every jump removes a peg, so the positions fall into layers by peg count;
//! the count runs over whole layers (`count`): a forward pass lists the
//! canonical positions reachable from the tasks layer by layer, a backward pass
//! computes the counts from one peg upwards and keeps only the nonzero ones of
//! the layer below. On the English board from the centre that is 23 475 686
//! positions of two pegs or more and 1 679 071 solvable ones (the figures of the
//! seed). Both passes stream through the layers; a depth-first count over one
//! large memo spends most of its time waiting for random memory accesses.

//! A jump flips its three holes, so for every hole set `w` that meets each jump
//! in 0 or 2 holes the parity of the number of pegs in `w` never changes (for
//! the cross boards these are the classical position classes, the "rule of
//! three"). A task whose parities differ from those of every allowed final
//! position has no solution and is answered without a search; the French board
//! from its centre is such a case.
//!
//! ## Shards
//!
//! [`PegGame::prefix_tasks`] lists the canonical boards after `d` jumps with the
//! number of jump sequences reaching each class; the solutions are the sum of
//! multiplicity times count over the tasks, because the number of jumps from a
//! board into a class is the same for every board of its class.
//! [`PegGame::count_from`] counts a batch of tasks over shared layers.

mod board;
mod count;
mod form;
mod levels;
mod meet;
mod meet_stream;
mod memo;
mod pagoda;
#[cfg(test)]
mod prune_tests;
mod set;
mod stream;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use crate::{Control, Error, Result, invalid};

pub use board::Jump;
use board::{Axis, Canonicalizer, Images, Symmetries, bits, cell_bit, hole_cells};
pub use form::{BoardRanks, LevelForm};
pub use levels::{
    PegBucket, PegLevel, StageBucket, expand_level, pegs_at_level, rebucket, start_bucket,
};
pub use meet::{AtMeeting, Meeting, Side, join_level, meet_level, meeting, side_start};
pub use meet_stream::{EncodedMeeting, join_level_within, meet_level_within};
pub use pagoda::Pruner;
pub use stream::{EncodedLevel, SentBucket, expand_level_within};

/// The smallest and largest triangle side. A count on side 7 (28 holes) visits
/// up to 18 million boards; side 8 (36 holes) would still fit the bitboards
/// (the geometry handles it) but would visit billions.
pub const MIN_TRIANGLE_SIDE: u32 = 4;
pub const MAX_TRIANGLE_SIDE: u32 = 7;
/// The largest number of boards one count may visit: the layers keep 8 bytes
/// per board (8 GiB at the limit), and the largest layer needs about 3 times
/// its size again while it is built.
pub const MAX_BOARDS: usize = 1 << 30;
/// Boards processed between two polls of the control.
const POLL_BOARDS: usize = 4096;

/// The images of every jump's three holes under `canonicalizer`, by axis,
/// direction and position.
fn jump_images(axes: &[Axis], canonicalizer: &Canonicalizer) -> Vec<Images> {
    let mut images = vec![Images::default(); axes.len() * 2 * 64];
    for (a, axis) in axes.iter().enumerate() {
        let s = axis.step;
        for p in bits(axis.forward) {
            images[2 * a * 64 + p as usize] = canonicalizer.images(axis.line << p);
        }
        for p in bits(axis.backward) {
            images[(2 * a + 1) * 64 + p as usize] = canonicalizer.images(axis.line << (p - 2 * s));
        }
    }
    images
}

/// The shape of a board.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BoardShape {
    /// The English cross, 33 holes, centre 17.
    English,
    /// The French (European) board, 37 holes, centre 19.
    French,
    /// A triangle of the given side.
    Triangle(u32),
    /// The 41-hole diamond (a 9 x 9 square standing on a corner, holes with
    /// `|row - 4| + |col - 4| <= 4`), centre 21.
    Diamond,
}

impl BoardShape {
    /// The number of holes.
    pub fn holes(self) -> u32 {
        match self {
            BoardShape::English => 33,
            BoardShape::French => 37,
            BoardShape::Triangle(side) => side * (side + 1) / 2,
            BoardShape::Diamond => 41,
        }
    }

    /// The start hole when none is given: the centre of a cross board, the apex
    /// of a triangle.
    pub fn default_start(self) -> u32 {
        match self {
            BoardShape::English => 17,
            BoardShape::French => 19,
            BoardShape::Triangle(_) => 1,
            BoardShape::Diamond => 21,
        }
    }
}

impl fmt::Display for BoardShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BoardShape::English => f.write_str("english"),
            BoardShape::French => f.write_str("french"),
            BoardShape::Triangle(side) => write!(f, "triangle:{side}"),
            BoardShape::Diamond => f.write_str("diamond"),
        }
    }
}

impl FromStr for BoardShape {
    type Err = Error;

    fn from_str(s: &str) -> Result<BoardShape> {
        parse_board(s)
    }
}

/// Reads `english`, `french`, `diamond` or `triangle:N` (`N` from [`MIN_TRIANGLE_SIDE`] to
/// [`MAX_TRIANGLE_SIDE`]); the text is trimmed and case-insensitive.
pub fn parse_board(s: &str) -> Result<BoardShape> {
    let text = s.trim().to_ascii_lowercase();
    let expected = format!(
        "expected english, french, diamond or triangle:N with N from {MIN_TRIANGLE_SIDE} to \
         {MAX_TRIANGLE_SIDE}"
    );
    match text.as_str() {
        "english" => Ok(BoardShape::English),
        "french" => Ok(BoardShape::French),
        "diamond" => Ok(BoardShape::Diamond),
        _ => {
            let Some(side) = text.strip_prefix("triangle:") else {
                return Err(invalid!("unknown board {s:?}: {expected}"));
            };
            let side: u32 = side
                .trim()
                .parse()
                .map_err(|_| invalid!("bad triangle side in {s:?}: {expected}"))?;
            let shape = BoardShape::Triangle(side);
            check_shape(shape)?;
            Ok(shape)
        }
    }
}

fn check_shape(shape: BoardShape) -> Result<()> {
    if let BoardShape::Triangle(side) = shape
        && !(MIN_TRIANGLE_SIDE..=MAX_TRIANGLE_SIDE).contains(&side)
    {
        return Err(invalid!(
            "triangle side must be between {MIN_TRIANGLE_SIDE} and {MAX_TRIANGLE_SIDE}, \
             got {side}"
        ));
    }
    Ok(())
}

fn check_hole(shape: BoardShape, what: &str, hole: u32) -> Result<()> {
    let holes = shape.holes();
    if (1..=holes).contains(&hole) {
        Ok(())
    } else {
        Err(invalid!(
            "{what} hole must be between 1 and {holes} on the {shape} board, got {hole}"
        ))
    }
}

/// Checks a `pegs` job: the shape, the start hole (the hole empty at the start;
/// default [`BoardShape::default_start`]) and the optional final hole.
pub fn validate(shape: BoardShape, start: Option<u32>, end: Option<u32>) -> Result<()> {
    check_shape(shape)?;
    if let Some(start) = start {
        check_hole(shape, "start", start)?;
    }
    if let Some(end) = end {
        check_hole(shape, "final", end)?;
    }
    Ok(())
}

/// A unit of a shard plan: a board (bits as in the module docs) and the number
/// of jump sequences from the start position that reach its symmetry class.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PegTask {
    pub board: u64,
    pub multiplicity: u128,
}

/// The result of a count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PegCount {
    /// The number of solutions (weighted by the task multiplicities).
    pub solutions: u128,
    /// Distinct canonical boards with at least two pegs reachable from the
    /// tasks (those with one peg are answered directly) and kept: with
    /// pruning, those from which no pagoda rules out every allowed end.
    pub memo_boards: u64,
    /// Distinct canonical boards reached but not kept: the pagodas show that
    /// no allowed end can be reached from them (0 without pruning).
    pub pruned_boards: u64,
    /// Those of them with at least one solution: the counts kept.
    pub solvable_boards: u64,
}

/// A board with its start and final holes: the geometry of the count.
#[derive(Clone, Debug)]
pub struct PegGame {
    shape: BoardShape,
    start_hole: u32,
    end_hole: Option<u32>,
    /// Bit of hole `n` at index `n - 1`.
    hole_bits: Vec<u32>,
    /// All holes.
    holes: u64,
    /// The start position.
    start: u64,
    /// The one-peg position required at the end.
    end: Option<u64>,
    axes: Vec<Axis>,
    /// The images of the three holes of every jump, at index
    /// `(2 * axis + 0 forward / 1 backward) * 64 + from`.
    jump_images: Vec<Images>,
    jumps: Vec<Jump>,
    canonicalizer: Canonicalizer,
    /// The most boards a count may visit.
    max_boards: usize,
    /// Hole sets whose peg parity no jump changes.
    invariants: Vec<u64>,
    /// The parity signatures of the allowed one-peg positions.
    final_signatures: Vec<u64>,
    /// Whether searches skip the positions the pagodas rule out.
    prune: bool,
    /// Which search the game is for: its allowed ends (see
    /// [`PegGame::searching_from`]).
    prune_side: Side,
    /// The pagodas, built on first use (see `pagoda`).
    pruner: OnceLock<Option<Arc<Pruner>>>,
}

impl PegGame {
    /// The game on `shape` with `start` empty (default: the centre or the apex)
    /// and, when given, the last peg in `end`.
    pub fn new(shape: BoardShape, start: Option<u32>, end: Option<u32>) -> Result<PegGame> {
        validate(shape, start, end)?;
        let start_hole = start.unwrap_or(shape.default_start());
        let hole_bits: Vec<u32> = hole_cells(shape)
            .into_iter()
            .map(|(row, col)| cell_bit(shape, row, col))
            .collect();
        let holes = hole_bits.iter().fold(0u64, |m, &b| m | 1 << b);
        let bit_of = |hole: u32| 1u64 << hole_bits[hole as usize - 1];
        let axes = board::axes(shape);
        let jumps = board::jumps_of(&axes);
        let symmetries = Symmetries::of(shape);
        let end_board = end.map(bit_of);
        let canonicalizer = match end_board {
            Some(e) => Canonicalizer::fixing(symmetries, e),
            None => Canonicalizer::fixing(symmetries, holes),
        };
        let jump_images = jump_images(&axes, &canonicalizer);
        let invariants = board::parity_invariants(holes, &jumps);
        let mut final_signatures: Vec<u64> = match end_board {
            Some(e) => vec![e],
            None => bits(holes).map(|b| 1 << b).collect(),
        }
        .into_iter()
        .map(|b| board::parity_signature(&invariants, b))
        .collect();
        final_signatures.sort_unstable();
        final_signatures.dedup();
        Ok(PegGame {
            shape,
            start_hole,
            end_hole: end,
            start: holes & !bit_of(start_hole),
            end: end_board,
            hole_bits,
            holes,
            axes,
            jump_images,
            jumps,
            canonicalizer,
            max_boards: MAX_BOARDS,
            invariants,
            final_signatures,
            prune: true,
            prune_side: Side::Start,
            pruner: OnceLock::new(),
        })
    }

    /// The same game with pruning on (the default) or off: a search then
    /// skips the positions from which a pagoda function shows that no
    /// allowed end can be reached ([`PegGame::pruner`]). Counts are the same
    /// either way; only the positions expanded differ.
    pub fn with_pruning(mut self, on: bool) -> PegGame {
        self.prune = on;
        self
    }

    /// The same game without pruning.
    pub fn without_pruning(self) -> PegGame {
        self.with_pruning(false)
    }

    /// Whether the game prunes.
    pub fn prunes(&self) -> bool {
        self.prune
    }

    /// The same game for the search from `side`: from the start (the
    /// default) positions are held against the allowed ends; from the end
    /// start of a meeting (`meet`) against the one-peg position on the start
    /// hole and its images under the symmetries in use, the complements of
    /// the start search's positions.
    pub fn searching_from(mut self, side: Side) -> PegGame {
        if self.prune_side != side {
            self.prune_side = side;
            self.pruner = OnceLock::new();
        }
        self
    }

    /// The pagodas the searches prune with; `None` when pruning is off.
    pub fn pruner(&self) -> Option<&Pruner> {
        if !self.prune {
            return None;
        }
        self.pruner
            .get_or_init(|| self.pruner_spec().map(|spec| pagoda::pruner(&spec)))
            .as_deref()
    }

    /// Whether a search may expand `board`: false when pruning is on and the
    /// pagodas show that no allowed end can be reached from it.
    #[inline]
    pub fn worth_expanding(&self, board: u64) -> bool {
        self.pruner().is_none_or(|p| p.may_finish(board))
    }

    /// The start, the allowed ends and the symmetries the pruner is built for.
    fn pruner_spec(&self) -> Option<pagoda::PrunerSpec<'_>> {
        let group = self.canonicalizer.symmetries;
        let symmetries: Vec<[u64; 64]> = self
            .canonicalizer
            .elements()
            .map(|i| {
                let mut map = [0u64; 64];
                for b in bits(self.holes) {
                    map[b as usize] = group.images(1 << b)[i];
                }
                map
            })
            .collect();
        let image = |map: &[u64; 64], board: u64| bits(board).fold(0, |m, b| m | map[b as usize]);
        let signature = |board: u64| board::parity_signature(&self.invariants, board);
        let (start, mut ends, by_signature) = match (self.prune_side, self.end) {
            (Side::Start, Some(end)) => (self.start, vec![end], false),
            (Side::Start, None) => {
                // Every one-peg position the start or an image of it (the
                // class representatives) may end on.
                let signatures: Vec<u64> = (symmetries.iter())
                    .map(|m| signature(image(m, self.start)))
                    .collect();
                let ends = bits(self.holes)
                    .map(|b| 1u64 << b)
                    .filter(|&e| signatures.contains(&signature(e)))
                    .collect();
                (self.start, ends, true)
            }
            (Side::End, Some(end)) => {
                let start_peg = self.holes & !self.start;
                let ends = symmetries.iter().map(|m| image(m, start_peg)).collect();
                (self.holes & !end, ends, false)
            }
            (Side::End, None) => return None,
        };
        ends.sort_unstable();
        ends.dedup();
        Some(pagoda::PrunerSpec {
            holes: self.holes,
            jumps: &self.jumps,
            invariants: &self.invariants,
            symmetries,
            start,
            ends,
            by_signature,
        })
    }

    /// Without a final hole, the same game with positions reduced only by
    /// the symmetries that fix the start hole (with one, the game as it is).
    /// A forward search then reaches every board of a class as often, so the
    /// sum of a one-peg class splits evenly among its holes: the solutions
    /// by final hole. About as many classes meet the positions reachable from
    /// the start either way.
    pub fn fixing_start(mut self) -> PegGame {
        if self.end.is_none() {
            let symmetries = self.canonicalizer.symmetries;
            self.canonicalizer = Canonicalizer::fixing(symmetries, self.start);
            self.jump_images = jump_images(&self.axes, &self.canonicalizer);
            self.pruner = OnceLock::new();
        }
        self
    }

    /// The same game without the reduction by symmetries: every board is its
    /// own class.
    pub fn without_symmetry(mut self) -> PegGame {
        self.canonicalizer = Canonicalizer::identity(self.canonicalizer.symmetries);
        self.pruner = OnceLock::new();
        self
    }

    /// The same game with another limit on the boards a count may visit
    /// (default [`MAX_BOARDS`]); a count that needs more fails with
    /// `InvalidArgument` instead of exhausting the memory.
    pub fn with_board_limit(mut self, max_boards: usize) -> PegGame {
        self.max_boards = max_boards;
        self
    }

    pub fn shape(&self) -> BoardShape {
        self.shape
    }

    pub fn start_hole(&self) -> u32 {
        self.start_hole
    }

    pub fn end_hole(&self) -> Option<u32> {
        self.end_hole
    }

    /// The start position: every hole but the start hole.
    pub fn start_board(&self) -> u64 {
        self.start
    }

    /// All holes of the board as one bitboard.
    pub fn hole_mask(&self) -> u64 {
        self.holes
    }

    /// The one-bit board of hole `hole` (numbered from 1).
    pub fn hole_bit(&self, hole: u32) -> Result<u64> {
        check_hole(self.shape, "a", hole)?;
        Ok(1 << self.hole_bits[hole as usize - 1])
    }

    /// The hole numbers of the pegs of `board`, ascending.
    pub fn pegs_of(&self, board: u64) -> Vec<u32> {
        (1..=self.hole_bits.len() as u32)
            .filter(|&h| board >> self.hole_bits[h as usize - 1] & 1 == 1)
            .collect()
    }

    /// Every jump of the board.
    pub fn jumps(&self) -> &[Jump] {
        &self.jumps
    }

    /// The number of symmetries boards are reduced by: the board's symmetries
    /// that fix the final hole (all of them without one), 1 without reduction.
    pub fn symmetry_count(&self) -> usize {
        self.canonicalizer.order()
    }

    /// The images of `board` under the symmetries in use, the board first.
    pub fn symmetric_images(&self, board: u64) -> Vec<u64> {
        let images = self.canonicalizer.symmetries.images(board);
        self.canonicalizer.elements().map(|i| images[i]).collect()
    }

    /// The representative of the class of `board`: its smallest image.
    pub fn canonical(&self, board: u64) -> u64 {
        self.canonicalizer.canonical(board)
    }

    /// The holes of the class of the one-peg `board` (under the symmetries
    /// in use) that a solution from the start may end on: those whose
    /// one-peg position keeps the start's parities, which no jump changes.
    /// A search reduced by symmetries that move the start counts the
    /// solutions ending anywhere in a class together; when this gives one
    /// hole, they all end on it.
    pub fn final_holes_allowed(&self, board: u64) -> Vec<u32> {
        let start = board::parity_signature(&self.invariants, self.start);
        let mut allowed: Vec<u32> = self
            .symmetric_images(board)
            .into_iter()
            .filter(|&b| board::parity_signature(&self.invariants, b) == start)
            .flat_map(|b| self.pegs_of(b))
            .collect();
        allowed.sort_unstable();
        allowed.dedup();
        allowed
    }

    /// The holes that share the solutions ending in the class of the
    /// one-peg `board` equally: its holes a solution may end on (see
    /// [`PegGame::final_holes_allowed`]) when they are one orbit of the
    /// symmetries that fix the start (a symmetry fixing the start maps the
    /// solutions ending on one hole to those ending on its image), else
    /// `None`.
    pub fn final_share(&self, board: u64) -> Option<Vec<u32>> {
        let allowed = self.final_holes_allowed(board);
        let Some(&first) = allowed.first() else {
            return Some(allowed);
        };
        let symmetries = &self.canonicalizer.symmetries;
        let starts = symmetries.images(self.start);
        let firsts = symmetries.images(1 << self.hole_bits[first as usize - 1]);
        let mut orbit: Vec<u32> = self
            .canonicalizer
            .elements()
            .filter(|&i| starts[i] == self.start)
            .flat_map(|i| self.pegs_of(firsts[i]))
            .collect();
        orbit.sort_unstable();
        orbit.dedup();
        (orbit == allowed).then_some(allowed)
    }

    /// Whether every class of one-peg positions has a [`PegGame::final_share`]:
    /// then a search reduced by every symmetry of the board still tells the
    /// solutions by final hole.
    pub fn final_classes_resolve(&self) -> bool {
        (0..self.hole_bits.len()).all(|i| self.final_share(1 << self.hole_bits[i]).is_some())
    }

    /// False when the parity invariants rule out every allowed final position,
    /// so that `board` has no solution.
    pub fn may_finish(&self, board: u64) -> bool {
        let signature = board::parity_signature(&self.invariants, board);
        self.final_signatures.contains(&signature)
    }

    /// Why no allowed end can be reached from the start, when the position
    /// classes rule every one out; `None` when they allow one (which does not
    /// make the start solvable). A jump flips its three holes and each
    /// invariant hole set meets it in 0 or 2 of them, so the parity of the
    /// pegs on each set never changes: a start whose parities no allowed
    /// one-peg position shares has no solution.
    pub fn ends_ruled_out(&self) -> Option<String> {
        if self.may_finish(self.start) {
            return None;
        }
        let ends = match self.end_hole {
            Some(end) => format!("the one-peg position on hole {end}"),
            None => "any one-peg position".to_string(),
        };
        Some(format!(
            "no solution: the position class of the start (hole {} empty), its parities on the \
             {} hole sets that every jump meets in 0 or 2 holes, is not that of {ends}, and no \
             jump changes it",
            self.start_hole,
            self.invariants.len()
        ))
    }

    /// 1 when the one-peg `board` is an allowed end, else 0.
    fn final_value(&self, board: u64) -> u128 {
        u128::from(self.end.is_none_or(|e| e == board))
    }

    /// Appends the canonical boards one jump after `board`, one per jump.
    #[inline]
    fn push_children(&self, board: u64, out: &mut Vec<u64>) {
        self.push_children_where(board, out, |_, _, _| true);
    }

    /// [`Self::push_children`] of the jumps `keep(from, over, to)` (their
    /// holes' bits) allows; the number of those it did not.
    #[inline]
    fn push_children_where(
        &self,
        board: u64,
        out: &mut Vec<u64>,
        mut keep: impl FnMut(u32, u32, u32) -> bool,
    ) -> u64 {
        let empty = self.holes & !board;
        let canon = &self.canonicalizer;
        let mut left_out = 0;
        if canon.identity_only {
            for axis in &self.axes {
                let s = axis.step;
                let forward = board & (board >> s) & (empty >> (2 * s)) & axis.forward;
                let backward = board & (board << s) & (empty << (2 * s)) & axis.backward;
                for p in bits(forward) {
                    match keep(p, p + s, p + 2 * s) {
                        true => out.push(board ^ (axis.line << p)),
                        false => left_out += 1,
                    }
                }
                for p in bits(backward) {
                    match keep(p, p - s, p - 2 * s) {
                        true => out.push(board ^ (axis.line << (p - 2 * s))),
                        false => left_out += 1,
                    }
                }
            }
            return left_out;
        }
        // The images of the board once; those of a child follow from the
        // images of its jump.
        let images = canon.images(board);
        for (a, axis) in self.axes.iter().enumerate() {
            let s = axis.step;
            let forward = board & (board >> s) & (empty >> (2 * s)) & axis.forward;
            let backward = board & (board << s) & (empty << (2 * s)) & axis.backward;
            let forward_images = &self.jump_images[2 * a * 64..][..64];
            let backward_images = &self.jump_images[(2 * a + 1) * 64..][..64];
            for p in bits(forward) {
                match keep(p, p + s, p + 2 * s) {
                    true => out.push(canon.canonical_after(&images, &forward_images[p as usize])),
                    false => left_out += 1,
                }
            }
            for p in bits(backward) {
                match keep(p, p - s, p - 2 * s) {
                    true => out.push(canon.canonical_after(&images, &backward_images[p as usize])),
                    false => left_out += 1,
                }
            }
        }
        left_out
    }

    /// The shard plan: the distinct canonical boards at the smallest depth `d`
    /// with at least `min_tasks` of them (when no depth has that many, the depth
    /// with the most), each with the number of `d`-jump sequences from the start
    /// reaching its class, sorted by board. The sum of multiplicity times count
    /// over the tasks is the number of solutions.
    pub fn prefix_tasks(&self, min_tasks: usize) -> Result<Vec<PegTask>> {
        count::prefix_tasks(self, min_tasks)
    }

    /// The sum of multiplicity times number of solutions over `tasks`, the
    /// boards reachable from them shared by the whole batch. `on_progress(done,
    /// sum)` is called once per task when its count is known, with the number
    /// of tasks done and the sum so far; the layers are counted from one peg
    /// upwards, so a task is known when the layer of its peg count is (prefix
    /// tasks, all of one depth, finish together at the end). Polls `control`
    /// every few thousand boards and stops with `Err(Cancelled)` when it is
    /// cancelled. Work units: one per board of 3 pegs or more when its children
    /// are listed, one per board of 2 pegs or more when its count is computed.
    pub fn count_from(
        &self,
        tasks: &[PegTask],
        control: &Control,
        mut on_progress: impl FnMut(usize, u128),
    ) -> Result<PegCount> {
        count::count_tasks(self, tasks, 1, control, &mut on_progress)
    }

    /// [`PegGame::count_from`] with each layer split over `threads` threads.
    pub fn count_from_with_threads(
        &self,
        tasks: &[PegTask],
        threads: usize,
        control: &Control,
        mut on_progress: impl FnMut(usize, u128),
    ) -> Result<PegCount> {
        count::count_tasks(self, tasks, threads, control, &mut on_progress)
    }

    /// The number of solutions from the start position on one thread.
    pub fn count(&self, control: &Control) -> Result<PegCount> {
        self.count_with_threads(1, control)
    }

    /// The number of solutions from the start position; each layer is split
    /// over `threads` threads.
    pub fn count_with_threads(&self, threads: usize, control: &Control) -> Result<PegCount> {
        let root = PegTask {
            board: self.start,
            multiplicity: 1,
        };
        self.count_from_with_threads(&[root], threads, control, |_, _| {})
    }
}

/// The number of solutions of `shape` from `start` to `end`, each layer split
/// over `threads` threads.
pub fn count_solutions(
    shape: BoardShape,
    start: Option<u32>,
    end: Option<u32>,
    threads: usize,
    control: &Control,
) -> Result<PegCount> {
    PegGame::new(shape, start, end)?.count_with_threads(threads, control)
}
