//! The `sliders` kernel: Project Euler 244 ("Sliders") on any R x C board.
//!
//! A board has `R x C` cells (`2 <= R, C <= 5`), exactly one of them empty, and
//! tiles of up to three colours; tiles of one colour are interchangeable. Boards
//! are written row by row as strings of the letters `W` (the empty cell), `R`,
//! `B` and `G` (the three tile colours); lower-case letters are accepted, and the
//! rows may be separated by `/` (`WRBB/RRBB/RRBB/RRBB`). A move is named by the
//! direction in which the TILE moves: `L` (the tile right of the empty cell
//! slides left), `R`, `U` (the tile below slides up) and `D`.
//!
//! The checksum of `m_1 ... m_k` is `c_k = (base * c_(k-1) + ascii(m_k)) mod
//! modulus`, `c_0 = 0`. The answer of a job is the exact sum of the checksums of
//! all shortest move sequences from the start to the target board, with their
//! number and length `D`.
//!
//! [`SliderSpace::build`] runs a breadth-first search from the start over a dense
//! index of the boards (distances modulo 3, two bits per board) and extracts the
//! shortest-path graph backwards from the target: the useful moves `v -> w`, with
//! `dS(w) = dS(v) + 1` and `dS(w) + dT(w) = D`. Prefix tasks split the shortest
//! sequences into independent shards; [`SliderSpace::enumerate`] lists the
//! sequences extending one prefix with exact sums. [`SliderSpace::dp_totals`] is
//! an independent check by the seed's method: a second search from the target
//! and a layer-by-layer count over the boards (exact number, sum modulo the
//! modulus).

mod arith;
mod board;
mod buckets;
mod forms;
pub mod graph_levels;
mod index;
pub mod levels;
mod space;
mod state;
pub mod stream;
#[cfg(test)]
mod tests;

pub use space::{MAX_BALANCED_PREFIXES, SliderSpace};

use arith::Arith;
use board::{Geometry, describe_counts, format_codes, parse_board};

use crate::{Result, invalid};

pub const DEFAULT_START: &str = "WRBBRRBBRRBBRRBB";
pub const DEFAULT_TARGET: &str = "WBRBBRBRRBRBBRBR";
pub const DEFAULT_BASE: u64 = 243;
pub const DEFAULT_MODULUS: u64 = 100_000_007;
/// Smallest and largest number of rows or columns.
pub const MIN_SIDE: u32 = 2;
pub const MAX_SIDE: u32 = 5;
/// Largest number of boards (colourings with the given tiles, the empty cell
/// anywhere) the kernel accepts; see [`estimated_memory_bytes`] for what a
/// space of a given size needs.
pub const MAX_BOARDS: u128 = 1 << 34;

/// Parameters of a sliders job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SliderParams {
    /// Number of rows, 2..=5.
    pub rows: u32,
    /// Number of columns, 2..=5.
    pub cols: u32,
    /// The start board, row by row (see the module docs for the letters).
    pub start: String,
    /// The target board, with the same tiles as the start board.
    pub target: String,
    /// Checksum base: below the modulus, with `base * (modulus - 1) + 85`
    /// below 2^64.
    pub base: u64,
    /// Checksum modulus, at least 2.
    pub modulus: u64,
}

impl Default for SliderParams {
    /// The boards of Project Euler 244: 4 x 4, 7 red and 8 blue tiles.
    fn default() -> Self {
        SliderParams {
            rows: 4,
            cols: 4,
            start: DEFAULT_START.to_string(),
            target: DEFAULT_TARGET.to_string(),
            base: DEFAULT_BASE,
            modulus: DEFAULT_MODULUS,
        }
    }
}

impl SliderParams {
    /// Boards with the default checksum base and modulus.
    pub fn new(rows: u32, cols: u32, start: &str, target: &str) -> SliderParams {
        SliderParams {
            rows,
            cols,
            start: start.to_string(),
            target: target.to_string(),
            base: DEFAULT_BASE,
            modulus: DEFAULT_MODULUS,
        }
    }
}

/// The parameters read and checked.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    pub(crate) geom: Geometry,
    pub(crate) start: Vec<u8>,
    pub(crate) target: Vec<u8>,
    pub(crate) counts: [u32; 4],
    pub(crate) arith: Arith,
    pub(crate) boards: u128,
}

fn check_side(name: &str, value: u32) -> Result<()> {
    if (MIN_SIDE..=MAX_SIDE).contains(&value) {
        Ok(())
    } else {
        Err(invalid!(
            "{name} must be between {MIN_SIDE} and {MAX_SIDE}, got {value}"
        ))
    }
}

fn geometry(rows: u32, cols: u32) -> Result<Geometry> {
    check_side("rows", rows)?;
    check_side("cols", cols)?;
    Ok(Geometry::new(rows, cols))
}

pub(crate) fn parse_params(params: &SliderParams) -> Result<Parsed> {
    let geom = geometry(params.rows, params.cols)?;
    let start = parse_board(&params.start, &geom, "start")?;
    let target = parse_board(&params.target, &geom, "target")?;
    if start.counts != target.counts {
        return Err(invalid!(
            "the start and target boards have different tiles: the start has {}, \
             the target has {}",
            describe_counts(&start.counts),
            describe_counts(&target.counts)
        ));
    }
    let arith = Arith::new(params.base, params.modulus)?;
    let boards = index::board_total(geom.cells, &start.counts);
    if boards > MAX_BOARDS {
        return Err(invalid!(
            "{} x {} boards with {} have {boards} arrangements, more than the limit \
             of {MAX_BOARDS}",
            geom.rows,
            geom.cols,
            describe_counts(&start.counts)
        ));
    }
    Ok(Parsed {
        geom,
        start: start.codes,
        target: target.codes,
        counts: start.counts,
        arith,
        boards,
    })
}

/// Checks the parameters; every problem is an `InvalidArgument` saying which
/// value is wrong and why.
pub fn validate(params: &SliderParams) -> Result<()> {
    parse_params(params).map(|_| ())
}

/// Number of boards with the tiles of the start board (the empty cell anywhere):
/// `cells * multinomial(cells - 1; tile counts)`. Every one of them is reachable
/// from the start except on 2 x 2 boards with three different tiles.
pub fn board_count(params: &SliderParams) -> Result<u128> {
    parse_params(params).map(|p| p.boards)
}

/// A rough estimate of the peak memory of [`SliderSpace::build`] plus
/// [`SliderSpace::dp_totals`], in bytes: two 2-bit distance arrays and two search
/// frontiers of 16 bytes per board, about 3 bytes per board in all (the 67.6
/// million boards of 5 x 5 with 12 + 12 tiles peak at about 170 MB), plus the
/// shortest-path graph, which is small unless the shortest sequences are many.
pub fn estimated_memory_bytes(params: &SliderParams) -> Result<u128> {
    let boards = board_count(params)?;
    Ok(boards * 3 + (1 << 20))
}

/// Canonical form of a board: upper-case letters, row by row, no separators.
pub fn normalize_board(rows: u32, cols: u32, board: &str) -> Result<String> {
    let geom = geometry(rows, cols)?;
    Ok(format_codes(&parse_board(board, &geom, "the")?.codes))
}

pub(crate) fn move_letters(moves: &str, what: &str) -> Result<Vec<u8>> {
    moves
        .chars()
        .enumerate()
        .map(|(i, ch)| match ch {
            'L' | 'R' | 'U' | 'D' => Ok(ch as u8),
            _ => Err(invalid!(
                "{what}: unknown move {ch:?} at position {}; moves are L, R, U, D \
                 (the direction in which the tile slides)",
                i + 1
            )),
        })
        .collect()
}

/// The checksum of a move sequence (upper-case `L`, `R`, `U`, `D`).
pub fn checksum(moves: &str, base: u64, modulus: u64) -> Result<u64> {
    let arith = Arith::new(base, modulus)?;
    let letters = move_letters(moves, "moves")?;
    Ok(letters.iter().fold(0, |c, &m| arith.step(c, m)))
}

/// Applies `moves` to `board` (an `rows x cols` board string) and returns the
/// canonical string of the resulting board; an illegal move is `InvalidArgument`.
pub fn apply_moves(rows: u32, cols: u32, board: &str, moves: &str) -> Result<String> {
    let geom = geometry(rows, cols)?;
    let mut codes = parse_board(board, &geom, "the")?.codes;
    let mut blank = codes.iter().position(|&c| c == 0).unwrap_or(0);
    for (i, &m) in move_letters(moves, "moves")?.iter().enumerate() {
        let src = geom.source(blank, m).ok_or_else(|| {
            let side = match m {
                b'L' => "right of",
                b'R' => "left of",
                b'U' => "below",
                _ => "above",
            };
            invalid!(
                "move {} ({}) is illegal: no tile {side} the empty cell at {}",
                i + 1,
                m as char,
                geom.describe_cell(blank)
            )
        })?;
        codes.swap(blank, src);
        blank = src;
    }
    Ok(format_codes(&codes))
}

/// Number and exact checksum sum of a set of shortest sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathSums {
    pub count: u128,
    pub checksum_sum: u128,
}

impl PathSums {
    /// Adds `other` (saturating at `u128::MAX`, which real counts never reach:
    /// a sum that large would need more than 2^64 enumerated sequences).
    pub fn merge(&mut self, other: PathSums) {
        self.count = self.count.saturating_add(other.count);
        self.checksum_sum = self.checksum_sum.saturating_add(other.checksum_sum);
    }

    /// Adds `other`, or `None` if a field would overflow.
    pub fn checked_merge(self, other: PathSums) -> Option<PathSums> {
        Some(PathSums {
            count: self.count.checked_add(other.count)?,
            checksum_sum: self.checksum_sum.checked_add(other.checksum_sum)?,
        })
    }
}

/// Totals of the layer-by-layer count over the shortest-path graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DpTotals {
    /// Number of shortest sequences; `u128::MAX` if it does not fit (then see
    /// `count_mod`).
    pub count: u128,
    /// Number of shortest sequences modulo the modulus.
    pub count_mod: u64,
    /// Sum of the checksums of all shortest sequences modulo the modulus.
    pub checksum_sum_mod: u64,
}
