//! A parsed puzzle, its canonical state encoding and its moves.
//!
//! A state is a `u128` with one field of `bits` bits per cell (cell `i` =
//! `row * cols + col` owns bits `i * bits .. (i + 1) * bits`). The field of a
//! piece's anchor cell holds the piece's type code (type index + 1); every other
//! field is 0. Pieces of one type carry the same code, so configurations that
//! only swap them are the same number.
//!
//! Moves are computed on "spread" cell sets: a `u128` with the lowest bit of
//! the field of every cell in the set. In that form the anchors of one type are
//! an equality test of every field against the code (a few shifts and ORs), a
//! piece's cells are its anchor set shifted by each cell offset of the shape,
//! and the pieces of a type that can slide in a direction are its anchors that
//! are valid for the slide and whose entered cells (fixed offsets) are all
//! empty: a handful of word operations per type and direction, whatever the
//! number of pieces.

use std::fmt;

use super::format::{Layout, PieceType, bits_per_cell, parse_layout};
use crate::{Result, invalid};

/// The slides of one type in one direction.
#[derive(Clone, Debug)]
struct Slide {
    /// Spread set of the anchors from which the piece can slide on the empty
    /// grid (it stays inside and off blocked cells).
    valid: u128,
    /// Index in [`Tables::first_offsets`] of the first cell the piece enters
    /// (shared by many slides, so computed once per state), or `NOT_SHARED`
    /// if that table is full; then `first_shift` is used.
    first: u32,
    first_shift: (u32, u32),
    /// `entering[entering_start..entering_end]` are the other cells the piece
    /// enters, as (right shift, left shift) pairs taking a spread set of empty
    /// cells to the anchors whose entered cell is empty.
    entering_start: u32,
    entering_end: u32,
    /// `flip << (anchor bit - back)` turns the state before the slide into the
    /// state after it (the code leaves the old anchor field for the new one).
    flip: u128,
    back: u32,
}

/// Everything about one piece type the move generation needs.
#[derive(Clone, Debug)]
struct TypeTables {
    /// The type code in every field.
    pattern: u128,
    /// Number of pieces.
    count: u32,
    /// Spread set of the anchors where the piece fits in the grid.
    fits: u128,
    /// Bit shifts from the anchor field to the field of each cell of the shape.
    cell_shifts: Vec<u32>,
    slides: Vec<Slide>,
}

#[derive(Clone)]
struct Tables {
    bits: u32,
    /// Bits of the state in use: cells x bits.
    used: u32,
    /// The lowest bit of every cell's field: the spread set of all cells.
    all_cells: u128,
    blocked: u128,
    types: Vec<TypeTables>,
    /// Distinct bit offsets from an anchor to the first cell entered by a
    /// slide, as (right shift, left shift); at most [`SHARED_OFFSETS`].
    first_offsets: Vec<(u32, u32)>,
    entering: Vec<(u32, u32)>,
}

/// Number of first-entered-cell offsets computed once per state; puzzles with
/// more distinct offsets (many shapes) compute the rest slide by slide.
const SHARED_OFFSETS: usize = 32;
const NOT_SHARED: u32 = u32::MAX;

/// A sliding-block puzzle: the grid, its blocked cells, the piece types and the
/// initial configuration, with the tables its moves are generated from.
#[derive(Clone)]
pub struct Puzzle {
    rows: usize,
    cols: usize,
    blocked: u128,
    types: Vec<PieceType>,
    initial: u128,
    tables: Tables,
}

impl fmt::Debug for Puzzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Puzzle")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("blocked", &format_args!("{:#x}", self.blocked))
            .field("types", &self.types)
            .field("initial", &format_args!("{:#x}", self.initial))
            .finish_non_exhaustive()
    }
}

/// Reads a puzzle file (see the module documentation for the format).
pub fn parse_puzzle(text: &str) -> Result<Puzzle> {
    Ok(Puzzle::from_layout(parse_layout(text)?))
}

impl Puzzle {
    fn from_layout(layout: Layout) -> Puzzle {
        let Layout {
            rows,
            cols,
            blocked,
            types,
            anchors,
        } = layout;
        let tables = Tables::new(rows, cols, blocked, &types);
        let mut initial = 0u128;
        for (t, list) in anchors.iter().enumerate() {
            for &anchor in list {
                initial |= ((t + 1) as u128) << (anchor as u32 * tables.bits);
            }
        }
        Puzzle {
            rows,
            cols,
            blocked,
            types,
            initial,
            tables,
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Blocked cells as a mask: bit `row * cols + col`.
    pub fn blocked(&self) -> u128 {
        self.blocked
    }

    /// The piece types; type `t` has code `t + 1` in the state.
    pub fn piece_types(&self) -> &[PieceType] {
        &self.types
    }

    /// Number of pieces.
    pub fn piece_count(&self) -> usize {
        self.types.iter().map(PieceType::count).sum()
    }

    /// Bits per cell in the state encoding.
    pub fn bits_per_cell(&self) -> u32 {
        self.tables.bits
    }

    /// Bits of the state in use: cells x bits per cell (at most 128).
    pub fn state_bits(&self) -> u32 {
        self.tables.used
    }

    /// The state of the initial configuration.
    pub fn initial_state(&self) -> u128 {
        self.initial
    }

    /// The pieces of a state: per piece (type index, row, column) of its
    /// anchor, in reading order of the anchors. For the initial state this is
    /// the placement the puzzle file describes.
    pub fn anchors(&self, state: u128) -> Vec<(usize, usize, usize)> {
        let t = &self.tables;
        let mut pieces = Vec::with_capacity(self.piece_count());
        if t.bits == 0 {
            return pieces;
        }
        for (index, tables) in t.types.iter().enumerate() {
            let mut anchors = t.anchors(state, tables.pattern);
            while anchors != 0 {
                let cell = (anchors.trailing_zeros() / t.bits) as usize;
                anchors &= anchors - 1;
                pieces.push((index, cell / self.cols, cell % self.cols));
            }
        }
        pieces.sort_unstable_by_key(|&(_, row, col)| (row, col));
        pieces
    }

    /// A short summary: size, empty and blocked cells, pieces, types, state width.
    pub fn describe(&self) -> String {
        let cells = self.rows * self.cols;
        let blocked = self.blocked.count_ones() as usize;
        let covered: usize = self.types.iter().map(|t| t.count() * t.shape.len()).sum();
        let types: Vec<String> = self
            .types
            .iter()
            .map(|t| {
                let size = t.shape.len();
                let unit = if size == 1 { "cell" } else { "cells" };
                format!("{} ({size} {unit})", t.pieces)
            })
            .collect();
        format!(
            "{} x {} grid, {} empty and {blocked} blocked cells; {} pieces of {} types: \
             {}; {}-bit states",
            self.rows,
            self.cols,
            cells - blocked - covered,
            self.piece_count(),
            self.types.len(),
            types.join(", "),
            self.state_bits()
        )
    }

    /// The configuration of a state as grid text, one row per line: each piece
    /// drawn with the first character of its type, `.` empty, `#` blocked.
    /// Fields holding no type code are drawn as `?` at their cell.
    pub fn render(&self, state: u128) -> String {
        let t = &self.tables;
        let cells = self.rows * self.cols;
        let mut grid: Vec<u8> = (0..cells)
            .map(|i| {
                if (self.blocked >> i) & 1 == 1 {
                    b'#'
                } else {
                    b'.'
                }
            })
            .collect();
        let mut claimed = 0u128;
        for (ty, tables) in self.types.iter().zip(&t.types) {
            let name = ty.pieces.as_bytes()[0];
            let anchors = t.anchors(state, tables.pattern);
            claimed |= anchors;
            for &shift in &tables.cell_shifts {
                draw(&mut grid, (anchors & tables.fits) << shift, t.bits, name);
            }
        }
        draw(&mut grid, t.nonzero_fields(state) & !claimed, t.bits, b'?');
        let mut text = String::with_capacity(cells + self.rows);
        for row in grid.chunks(self.cols) {
            text.extend(row.iter().map(|&b| b as char));
            text.push('\n');
        }
        text
    }

    /// Replaces `out` with the states one unit slide away from `state`. The
    /// state must come from this puzzle (see [`Puzzle::check_state`]); anything
    /// else gives meaningless states but never a panic.
    pub fn neighbours(&self, state: u128, out: &mut Vec<u128>) {
        out.clear();
        self.tables.push_neighbours::<false>(state, out);
    }

    /// Appends the neighbours of a state after checking that it is a
    /// configuration of this puzzle.
    pub(crate) fn push_checked_neighbours(&self, state: u128, out: &mut Vec<u128>) -> Result<()> {
        if self.tables.push_neighbours::<true>(state, out) {
            Ok(())
        } else {
            Err(invalid!(
                "state {state:#x} is not a configuration of this puzzle ({})",
                self.describe()
            ))
        }
    }

    /// `Ok` if `state` is a configuration of this puzzle: every field holds a
    /// type code or 0, every piece lies inside the grid and off blocked cells,
    /// no two pieces overlap, and every type has its number of pieces.
    pub fn check_state(&self, state: u128) -> Result<()> {
        let mut scratch = Vec::new();
        self.push_checked_neighbours(state, &mut scratch)
    }
}

/// Writes `name` into the cells of a spread set.
fn draw(grid: &mut [u8], mut spread: u128, bits: u32, name: u8) {
    while spread != 0 {
        let cell = (spread.trailing_zeros() / bits) as usize;
        if let Some(slot) = grid.get_mut(cell) {
            *slot = name;
        }
        spread &= spread - 1;
    }
}

impl Tables {
    fn new(rows: usize, cols: usize, blocked: u128, types: &[PieceType]) -> Tables {
        let cells = rows * cols;
        let bits = bits_per_cell(types.len());
        let spread = |cell: usize| -> u128 {
            if bits == 0 {
                0
            } else {
                1 << (cell as u32 * bits)
            }
        };
        let all_cells = (0..cells).fold(0, |acc, cell| acc | spread(cell));
        let blocked_spread = (0..cells)
            .filter(|&cell| (blocked >> cell) & 1 == 1)
            .fold(0, |acc, cell| acc | spread(cell));
        // Whether the shape with its anchor at (r, c) lies inside the grid and
        // off blocked cells.
        let fits = |shape: &[(i32, i32)], r: i32, c: i32| -> bool {
            shape.iter().all(|&(dr, dc)| {
                let (rr, cc) = (r + dr, c + dc);
                rr >= 0
                    && cc >= 0
                    && rr < rows as i32
                    && cc < cols as i32
                    && (blocked >> (rr as usize * cols + cc as usize)) & 1 == 0
            })
        };
        let offset = |dr: i32, dc: i32| dr * cols as i32 + dc;
        // Every configuration has the same number of empty cells: a slide that
        // enters more cells than that can never happen.
        let covered: usize = types.iter().map(|t| t.count() * t.shape.len()).sum();
        let empty_cells = cells - blocked.count_ones() as usize - covered;
        let mut entering: Vec<(u32, u32)> = Vec::new();
        let mut first_offsets: Vec<(u32, u32)> = Vec::new();
        let as_pair = |shift: i32| (shift.max(0) as u32, (-shift).max(0) as u32);
        let mut tables = Vec::with_capacity(types.len());
        for (t, ty) in types.iter().enumerate() {
            let code = (t + 1) as u128;
            let anchors_where = |ok: &dyn Fn(i32, i32) -> bool| -> u128 {
                (0..cells)
                    .filter(|&cell| ok((cell / cols) as i32, (cell % cols) as i32))
                    .fold(0, |acc, cell| acc | spread(cell))
            };
            let mut slides = Vec::new();
            for (dr, dc) in [(-1, 0), (0, -1), (0, 1), (1, 0)] {
                // Bit offsets from the anchor to the cells the piece enters.
                let entered: Vec<i32> = ty
                    .shape
                    .iter()
                    .map(|&(sr, sc)| (sr + dr, sc + dc))
                    .filter(|cell| !ty.shape.contains(cell))
                    .map(|(nr, nc)| offset(nr, nc) * bits as i32)
                    .collect();
                let valid =
                    anchors_where(&|r, c| fits(&ty.shape, r, c) && fits(&ty.shape, r + dr, c + dc));
                if valid == 0 || entered.len() > empty_cells {
                    continue;
                }
                let first_shift = as_pair(entered[0]);
                let first = match first_offsets.iter().position(|&o| o == first_shift) {
                    Some(i) => i as u32,
                    None if first_offsets.len() < SHARED_OFFSETS => {
                        first_offsets.push(first_shift);
                        first_offsets.len() as u32 - 1
                    }
                    None => NOT_SHARED,
                };
                let entering_start = entering.len() as u32;
                entering.extend(entered[1..].iter().map(|&shift| as_pair(shift)));
                let step = offset(dr, dc) * bits as i32;
                let (flip, back) = if step > 0 {
                    (code ^ (code << step), 0)
                } else {
                    (code ^ (code << -step), (-step) as u32)
                };
                slides.push(Slide {
                    valid,
                    first,
                    first_shift,
                    entering_start,
                    entering_end: entering.len() as u32,
                    flip,
                    back,
                });
            }
            tables.push(TypeTables {
                pattern: code * all_cells,
                count: ty.count() as u32,
                fits: anchors_where(&|r, c| fits(&ty.shape, r, c)),
                cell_shifts: ty
                    .shape
                    .iter()
                    .map(|&(dr, dc)| (offset(dr, dc) * bits as i32) as u32)
                    .collect(),
                slides,
            });
        }
        Tables {
            bits,
            used: cells as u32 * bits,
            all_cells,
            blocked: blocked_spread,
            types: tables,
            first_offsets,
            entering,
        }
    }

    /// The lowest bit of every field that is not 0.
    #[inline]
    fn nonzero_fields(&self, state: u128) -> u128 {
        let mut any = state;
        for shift in 1..self.bits {
            any |= state >> shift;
        }
        any & self.all_cells
    }

    /// The spread set of the fields of `state` equal to the code of `pattern`.
    #[inline]
    fn anchors(&self, state: u128, pattern: u128) -> u128 {
        self.all_cells & !self.nonzero_fields(state ^ pattern)
    }

    /// Appends the neighbours of `state` to `out`. With `CHECK`, returns false
    /// (and appends nothing) unless `state` is a configuration of the puzzle.
    #[inline]
    fn push_neighbours<const CHECK: bool>(&self, state: u128, out: &mut Vec<u128>) -> bool {
        // The field width as a constant turns the field tests into fixed shifts.
        match self.bits {
            1 => self.push_neighbours_with::<CHECK, 1>(state, out),
            2 => self.push_neighbours_with::<CHECK, 2>(state, out),
            3 => self.push_neighbours_with::<CHECK, 3>(state, out),
            4 => self.push_neighbours_with::<CHECK, 4>(state, out),
            5 => self.push_neighbours_with::<CHECK, 5>(state, out),
            6 => self.push_neighbours_with::<CHECK, 6>(state, out),
            // No piece types: the only configuration is 0, and it has no moves.
            0 => !CHECK || state == 0,
            // At most MAX_PIECES (62) types, so at most 6 bits.
            _ => unreachable!("{} bits per cell", self.bits),
        }
    }

    #[inline]
    fn push_neighbours_with<const CHECK: bool, const BITS: u32>(
        &self,
        state: u128,
        out: &mut Vec<u128>,
    ) -> bool {
        let nonzero = |x: u128| {
            let mut any = x;
            for shift in 1..BITS {
                any |= x >> shift;
            }
            any & self.all_cells
        };
        let mut occupied = self.blocked;
        // With CHECK: the anchors seen, and any sign of a foreign state
        // (overlaps, misplaced anchors, wrong counts), tested once at the end.
        let mut claimed = 0u128;
        let mut wrong = 0u128;
        for ty in &self.types {
            let anchors = self.all_cells & !nonzero(state ^ ty.pattern);
            if CHECK {
                claimed |= anchors;
                wrong |= anchors & !ty.fits;
                wrong |= u128::from(anchors.count_ones() != ty.count);
            }
            for &shift in &ty.cell_shifts {
                let cells = anchors << shift;
                if CHECK {
                    wrong |= cells & occupied;
                }
                occupied |= cells;
            }
        }
        if CHECK {
            if self.used < 128 {
                wrong |= state >> self.used;
            }
            if wrong != 0 || claimed != nonzero(state) {
                return false;
            }
        }
        let empty = self.all_cells & !occupied;
        // Per distinct offset: the anchors whose cell at that offset is empty.
        let mut empty_at = [0u128; SHARED_OFFSETS];
        for (slot, &(right, left)) in empty_at.iter_mut().zip(&self.first_offsets) {
            *slot = (empty >> right) << left;
        }
        for ty in &self.types {
            let anchors = self.all_cells & !nonzero(state ^ ty.pattern);
            for slide in &ty.slides {
                let first = match empty_at.get(slide.first as usize) {
                    Some(&shared) => shared,
                    None => (empty >> slide.first_shift.0) << slide.first_shift.1,
                };
                let mut movable = anchors & slide.valid & first;
                if movable == 0 {
                    continue;
                }
                let entering =
                    &self.entering[slide.entering_start as usize..slide.entering_end as usize];
                for &(right, left) in entering {
                    movable &= (empty >> right) << left;
                }
                while movable != 0 {
                    let bit = movable.trailing_zeros();
                    movable &= movable - 1;
                    out.push(state ^ (slide.flip << (bit - slide.back)));
                }
            }
        }
        true
    }
}
