//! An example sweep module (kernel ABI version 2, see `docs/wasm-abi.md`):
//! peg solitaire on any board given as a picture, counted forward level by
//! level. Level `k` holds the positions `k` jumps from the start, each with
//! the number of jump sequences that reach it; the answer is the sum of the
//! counts of the one-peg positions (in the final hole, when one is given).
//!
//! Parameters:
//! - `board` (required): `english`, `french`, or a picture of the board, its
//!   rows separated by `/`, `o` a hole and `.` none (at most 64 holes);
//! - `start` (required): the hole empty at the start, numbered from 1 row by
//!   row from the top, left to right within a row;
//! - `end` (optional): the hole the last peg must be in;
//! - `moves` (optional): `square` (the default: a peg jumps over an
//!   orthogonal neighbour) or `triangle` (rows left-aligned, a peg also jumps
//!   along the diagonal `(1, 1)`: the three edge directions of a triangular
//!   board);
//! - `symmetry` (optional, default 1): 0 counts positions one by one instead
//!   of up to the board's symmetries.
//!
//! A position's key is its bitboard, hole `i` (0-based) bit `i`, in as few
//! little-endian bytes as the holes need. Positions are counted up to the
//! symmetries of the picture's bounding box that map holes to holes (and fix
//! the final hole, when one is given): the sum of the counts over a class
//! follows from the jumps of any one of its positions, and the class's key is
//! the least of its images.
//!
//! Build: `examples/wasm/build.sh`.

#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;

use tally_guest::sweep::{Sweep, SweepEnd, SweepPlan};
use tally_guest::{KernelError, Params};

/// The English board (33 holes; the centre is hole 17).
pub const ENGLISH: &str = "..ooo../..ooo../ooooooo/ooooooo/ooooooo/..ooo../..ooo..";
/// The French board (37 holes; the centre is hole 19).
pub const FRENCH: &str = "..ooo../.ooooo./ooooooo/ooooooo/ooooooo/.ooooo./..ooo..";
const MAX_HOLES: usize = 64;

/// A symmetry of the bounding box: `(row, col, last row, last col)` to the
/// image's row and column.
type Symmetry = fn(i64, i64, i64, i64) -> (i64, i64);

/// A jump: the pegs it needs (the jumping one and the one jumped over) and
/// the hole it lands in, as masks.
#[derive(Clone, Copy)]
struct Jump {
    pegs: u64,
    landing: u64,
}

pub struct PegsSweep {
    key_bytes: usize,
    /// Pegs at the start: every hole but the start hole.
    pegs: u32,
    start: u64,
    /// The one-peg position that counts, or any.
    end: Option<u64>,
    jumps: Vec<Jump>,
    /// For each symmetry but the identity, for each byte of a key and each
    /// value of it, the image of that byte's pegs.
    images: Vec<Vec<[u64; 256]>>,
}

fn bad(message: &str) -> KernelError {
    KernelError::BadParams(String::from(message))
}

/// The holes of a picture: `holes[r][c]` is the hole's index, if any.
fn parse_picture(picture: &str) -> Result<Vec<Vec<Option<usize>>>, KernelError> {
    let mut holes = Vec::new();
    let mut count = 0;
    for row in picture.split('/') {
        let mut cells = Vec::new();
        for cell in row.bytes() {
            cells.push(match cell {
                b'o' => {
                    count += 1;
                    Some(count - 1)
                }
                b'.' => None,
                _ => return Err(bad("a board's picture holds only o, . and /")),
            });
        }
        holes.push(cells);
    }
    if !(2..=MAX_HOLES).contains(&count) {
        return Err(bad("a board has 2 to 64 holes"));
    }
    Ok(holes)
}

impl PegsSweep {
    /// The least image of `board` under the symmetries in use.
    fn canonical(&self, board: u64) -> u64 {
        let mut least = board;
        for table in &self.images {
            let mut image = 0;
            for (k, bytes) in table.iter().enumerate() {
                image |= bytes[(board >> (8 * k)) as usize & 0xff];
            }
            least = least.min(image);
        }
        least
    }

    fn key(&self, board: u64) -> [u8; 8] {
        board.to_le_bytes()
    }
}

impl Sweep for PegsSweep {
    fn new(params: &Params<'_>) -> Result<Self, KernelError> {
        let picture = match params.get("board") {
            Some("english") => ENGLISH,
            Some("french") => FRENCH,
            Some(picture) => picture,
            None => return Err(bad("board is required: english, french or a picture")),
        };
        let grid = parse_picture(picture)?;
        let holes = grid.iter().flatten().flatten().count();
        let start = params.get_u64_in("start", 1..=holes as u64)? as usize - 1;
        let end = match params.get("end") {
            Some(_) => Some(params.get_u64_in("end", 1..=holes as u64)? as usize - 1),
            None => None,
        };
        let diagonal = match params.get("moves") {
            None | Some("square") => false,
            Some("triangle") => true,
            Some(_) => return Err(bad("moves is square or triangle")),
        };
        let symmetry = params.get_u64_in_or("symmetry", 0..=1, 1)? == 1;
        let rows = grid.len() as i64;
        let cols = grid.iter().map(Vec::len).max().unwrap_or(0) as i64;
        let hole = |r: i64, c: i64| -> Option<usize> {
            if r < 0 || c < 0 {
                return None;
            }
            *grid.get(r as usize)?.get(c as usize)?
        };
        let mut directions = alloc::vec![(0, 1), (1, 0), (0, -1), (-1, 0)];
        if diagonal {
            directions.extend([(1, 1), (-1, -1)]);
        }
        let mut jumps = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                let Some(from) = hole(r, c) else { continue };
                for &(dr, dc) in &directions {
                    if let (Some(over), Some(to)) =
                        (hole(r + dr, c + dc), hole(r + 2 * dr, c + 2 * dc))
                    {
                        jumps.push(Jump {
                            pegs: 1 << from | 1 << over,
                            landing: 1 << to,
                        });
                    }
                }
            }
        }
        // The symmetries of the bounding box that map holes onto holes and
        // keep the final hole, each as the image of every hole.
        let (h, w) = (rows - 1, cols - 1);
        let mut maps: Vec<Symmetry> = alloc::vec![
            |r, c, _, w| (r, w - c),
            |r, c, h, _| (h - r, c),
            |r, c, h, w| (h - r, w - c),
        ];
        if rows == cols {
            maps.extend::<[Symmetry; 4]>([
                |r, c, _, _| (c, r),
                |r, c, h, _| (c, h - r),
                |r, c, _, w| (w - c, r),
                |r, c, h, w| (w - c, h - r),
            ]);
        }
        let key_bytes = holes.div_ceil(8);
        let mut images = Vec::new();
        for map in maps.into_iter().filter(|_| symmetry) {
            let mut image_of = alloc::vec![0usize; holes];
            let mut fits = true;
            for r in 0..rows {
                for c in 0..cols {
                    let Some(from) = hole(r, c) else { continue };
                    let (r2, c2) = map(r, c, h, w);
                    match hole(r2, c2) {
                        Some(to) => image_of[from] = to,
                        None => fits = false,
                    }
                }
            }
            if !fits || end.is_some_and(|e| image_of[e] != e) {
                continue;
            }
            let table: Vec<[u64; 256]> = (0..key_bytes)
                .map(|k| {
                    let mut bytes = [0u64; 256];
                    for (value, image) in bytes.iter_mut().enumerate() {
                        for bit in 0..8 {
                            let i = 8 * k + bit;
                            if value >> bit & 1 == 1 && i < holes {
                                *image |= 1 << image_of[i];
                            }
                        }
                    }
                    bytes
                })
                .collect();
            images.push(table);
        }
        let all = if holes == 64 {
            u64::MAX
        } else {
            (1 << holes) - 1
        };
        let mut model = PegsSweep {
            key_bytes,
            pegs: holes as u32 - 1,
            start: all & !(1 << start),
            end: end.map(|e| 1 << e),
            jumps,
            images,
        };
        model.start = model.canonical(model.start);
        Ok(model)
    }

    fn plan(&self) -> SweepPlan {
        SweepPlan {
            key_limit: self.key_bytes,
            outputs: 1,
            // From `pegs` pegs to one.
            end: SweepEnd::Steps(self.pegs - 1),
            most_children: self.jumps.len().max(1),
        }
    }

    fn starts(&self, emit: &mut dyn FnMut(&[u8], u64)) {
        emit(&self.key(self.start)[..self.key_bytes], 1);
    }

    fn expand(
        &mut self,
        _step: u32,
        key: &[u8],
        emit: &mut dyn FnMut(&[u8], u64),
    ) -> Result<(), KernelError> {
        let mut bytes = [0u8; 8];
        bytes
            .get_mut(..key.len())
            .ok_or(KernelError::Failed)?
            .copy_from_slice(key);
        let board = u64::from_le_bytes(bytes);
        for jump in &self.jumps {
            if board & jump.pegs == jump.pegs && board & jump.landing == 0 {
                let child = self.canonical(board ^ jump.pegs ^ jump.landing);
                emit(&self.key(child)[..self.key_bytes], 1);
            }
        }
        Ok(())
    }

    fn weights(&self, _step: u32, key: &[u8], last: bool, out: &mut [u64]) {
        let mut bytes = [0u8; 8];
        bytes[..key.len().min(8)].copy_from_slice(&key[..key.len().min(8)]);
        let board = u64::from_le_bytes(bytes);
        out[0] = u64::from(last && self.end.is_none_or(|end| board == end));
    }
}

tally_guest::tally_sweep!(PegsSweep);

#[cfg(test)]
mod tests;
