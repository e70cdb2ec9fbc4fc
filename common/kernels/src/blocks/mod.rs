//! The `blocks` kernel: how many configurations a sliding-block puzzle reaches
//! (Project Euler 766 and any puzzle written in the format below).
//!
//! # The problem
//!
//! Pieces (polyominoes) lie on a grid; a move slides one piece up, down, left
//! or right into empty cells, without rotating it, leaving the grid or entering
//! a blocked cell. Pieces of the same type (same shape, declared
//! interchangeable) are indistinguishable: two configurations are the same when
//! every type covers the same placements. The answer is the number of
//! configurations reachable from the initial one, the initial one included.
//!
//! Sliding a piece by `k` cells passes through `k - 1` intermediate positions,
//! all of them legal (the piece covers only cells it covers before or after),
//! so unit slides reach exactly the same configurations as longer ones; the
//! kernel only generates unit slides. Every slide can be undone (the cells the
//! piece left are empty), so the move graph is undirected and breadth-first
//! layers obey `L_(k+1) = N(L_k) \ (L_k ∪ L_(k-1))`: no set of all visited
//! configurations is needed, only the last two layers ([`expand_layer`]). A
//! distributed run ships layers as sorted lists of states
//! ([`encode_states`], [`decode_states`]) and splits each layer into slices.
//!
//! # State encoding
//!
//! A configuration is a `u128`: one field of `b` bits per cell, `b` the bit
//! length of the number of piece types (3 bits for 5 to 7 types). The field of
//! a piece's anchor cell (its first cell in reading order) holds the type code
//! (`1..=types`, in reading order of the first piece of each type), every
//! other field is 0. Interchangeable pieces carry the same code, so the number
//! is canonical without sorting. Cells times `b` must fit in 128 bits; the
//! Project Euler 766 puzzle uses 30 cells x 3 bits = 90 bits.
//!
//! For every type and anchor cell, tables hold the covered cells and the legal
//! unit slides on the empty grid (entered cells, XOR moving the code); a
//! state's neighbours are its occupancy (an OR over its pieces) tested against
//! those entered cells.
//!
//! # Puzzle files
//!
//! A puzzle is plain text: a grid, then optional `same:` lines.
//!
//! - **Grid**: one line per row, one character per cell: `.` an empty cell,
//!   `#` a blocked cell (no piece may enter it; use it to shape
//!   non-rectangular boards), a letter or digit (`a`-`z`, `A`-`Z`, `0`-`9`,
//!   case-sensitive, so at most [`MAX_PIECES`] = 62 pieces) for a cell of the
//!   piece of that name. Every piece has its own character and its cells must
//!   be edge-connected. All rows have the same number of cells; blanks inside a
//!   row are refused, leading and trailing blanks are ignored. The grid needs
//!   at least one empty cell.
//! - **`same: <pieces>`**: the listed pieces are interchangeable: two
//!   configurations that only swap them are one configuration. Blanks in the
//!   list are ignored (`same: ab`, `same: 1 2 3 4 5 6`), the keyword is
//!   case-insensitive. Pieces of one group must have the same shape in the same
//!   orientation (pieces only slide, never turn); a group has at least two
//!   pieces and a piece is in at most one group. A piece in no group is
//!   distinguishable from every other, even from a piece of the same shape.
//!   `same:` lines come after the whole grid.
//! - **Comments**: `;` starts a comment that runs to the end of the line, on
//!   a line of its own or after a row or a `same:` list. Blank lines are
//!   ignored.
//!
//! A file is rejected, with its 1-based line number and the reason, for: rows
//! of different lengths, an unknown character or a blank inside a row, a piece
//! whose cells are not connected (its character used in two places), a grid
//! without an empty cell, a `same:` line naming a character that is no piece,
//! a piece listed twice or in two groups, a group whose pieces have different
//! shapes, a group of fewer than two pieces, an unknown directive (a line with
//! `:` other than `same:`), a grid row after a `same:` line, and a puzzle too
//! large for the state encoding: more than [`MAX_CELLS`] cells, or more than
//! [`MAX_STATE_BITS`] bits for cells x bits per cell, where bits per cell is
//! the bit length of the number of piece types (groups plus ungrouped pieces).
//!
//! ```text
//! ; The small example of Project Euler 766: 208 configurations.
//! aa1.
//! a23.
//! 4567
//! same: 1234567   ; the unit squares are interchangeable
//! ```

mod format;
mod frontier;
mod levels;
mod puzzle;
mod search;
mod state_set;
mod stream;
#[cfg(test)]
mod tests;

pub use format::PieceType;
pub use frontier::{decode_states, encode_states};
pub use levels::{
    LevelBucket, decode_states_as, encode_states_as, expand_bucket, rebucket, start_bucket,
};
pub use puzzle::{Puzzle, parse_puzzle};
pub use search::{BlocksCount, count_reachable, expand_layer, merge_states};
pub use stream::{EncodedLayer, SenderLists, expand_bucket_within};

/// The puzzle of Project Euler 766, the default puzzle (2,613,742 reachable
/// configurations).
pub const PE766: &str = include_str!("../../../../examples/pe766.blocks");

/// Largest number of pieces: each has its own letter or digit. With at most
/// this many piece types a cell's field has at most 6 bits.
pub const MAX_PIECES: usize = 62;
/// Largest number of grid cells (occupancy masks are `u128`).
pub const MAX_CELLS: usize = 128;
/// Width of a state: cells x bits per cell must not exceed it.
pub const MAX_STATE_BITS: usize = 128;
