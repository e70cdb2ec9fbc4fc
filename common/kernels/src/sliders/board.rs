//! The grid geometry and its moves, and board strings: cells are colour codes
//! 0 = empty (`W`), 1 = `R`, 2 = `B`, 3 = `G`, row by row from cell 0.

use crate::{Result, invalid};

/// Letters of the colour codes 0..=3.
pub(crate) const CODE_LETTERS: [char; 4] = ['W', 'R', 'B', 'G'];

/// An R x C grid and, for every cell of the empty square, its legal moves.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    pub(crate) rows: u32,
    pub(crate) cols: u32,
    pub(crate) cells: usize,
    /// Per empty cell: (source cell of the sliding tile, move letter), in ASCII
    /// order of the letters (`D`: the tile above slides down, `L`: the tile to the
    /// right slides left, `R`, `U`); the first `degree[cell]` entries are used.
    moves: Vec<[(u8, u8); 4]>,
    degree: Vec<u8>,
}

impl Geometry {
    pub(crate) fn new(rows: u32, cols: u32) -> Geometry {
        let (r, c) = (rows as usize, cols as usize);
        let cells = r * c;
        let mut moves = vec![[(0u8, 0u8); 4]; cells];
        let mut degree = vec![0u8; cells];
        for z in 0..cells {
            let (row, col) = (z / c, z % c);
            let mut list = Vec::with_capacity(4);
            if row > 0 {
                list.push((z - c, b'D'));
            }
            if col + 1 < c {
                list.push((z + 1, b'L'));
            }
            if col > 0 {
                list.push((z - 1, b'R'));
            }
            if row + 1 < r {
                list.push((z + c, b'U'));
            }
            degree[z] = list.len() as u8;
            for (slot, &(src, letter)) in moves[z].iter_mut().zip(&list) {
                *slot = (src as u8, letter);
            }
        }
        Geometry {
            rows,
            cols,
            cells,
            moves,
            degree,
        }
    }

    /// The legal moves with the empty square on `blank`: (source cell, letter).
    #[inline]
    pub(crate) fn moves(&self, blank: usize) -> &[(u8, u8)] {
        &self.moves[blank][..self.degree[blank] as usize]
    }

    /// The source cell of move `letter` with the empty square on `blank`, if legal.
    pub(crate) fn source(&self, blank: usize, letter: u8) -> Option<usize> {
        self.moves(blank)
            .iter()
            .find(|&&(_, l)| l == letter)
            .map(|&(src, _)| src as usize)
    }

    #[cfg(test)]
    /// Number of undirected edges of the grid: `R(C-1) + C(R-1)`.
    pub(crate) fn grid_edges(&self) -> u64 {
        let (r, c) = (u64::from(self.rows), u64::from(self.cols));
        r * (c - 1) + c * (r - 1)
    }

    /// "row r, column c" of a cell, both from 1.
    pub(crate) fn describe_cell(&self, cell: usize) -> String {
        let c = self.cols as usize;
        format!("row {}, column {}", cell / c + 1, cell % c + 1)
    }
}

/// A board read from its string, with its tile counts per colour code.
#[derive(Clone, Debug)]
pub(crate) struct ParsedBoard {
    /// Colour code of every cell.
    pub(crate) codes: Vec<u8>,
    /// counts[code] for the codes 0..=3 (counts[0] is 1).
    pub(crate) counts: [u32; 4],
}

/// Reads a board string: one letter per cell, row by row (`W` empty, `R`, `B`,
/// `G` tiles, either case), optionally with rows separated by `/`.
pub(crate) fn parse_board(text: &str, geom: &Geometry, what: &str) -> Result<ParsedBoard> {
    let (rows, cols) = (geom.rows as usize, geom.cols as usize);
    let letters: Vec<char> = if text.contains('/') {
        let parts: Vec<&str> = text.split('/').collect();
        if parts.len() != rows {
            return Err(invalid!(
                "{what} board has {} rows separated by '/', a {} x {} board needs {}",
                parts.len(),
                geom.rows,
                geom.cols,
                rows
            ));
        }
        for (i, part) in parts.iter().enumerate() {
            let len = part.chars().count();
            if len != cols {
                return Err(invalid!(
                    "{what} board row {} has {len} cells, a {} x {} board needs {cols} per row",
                    i + 1,
                    geom.rows,
                    geom.cols
                ));
            }
        }
        parts.iter().flat_map(|p| p.chars()).collect()
    } else {
        text.chars().collect()
    };
    if letters.len() != geom.cells {
        return Err(invalid!(
            "{what} board has {} cells, a {} x {} board needs {}",
            letters.len(),
            geom.rows,
            geom.cols,
            geom.cells
        ));
    }
    let mut codes = Vec::with_capacity(geom.cells);
    let mut counts = [0u32; 4];
    let mut empties = Vec::new();
    for (i, &ch) in letters.iter().enumerate() {
        let code = match ch {
            'W' | 'w' => 0,
            'R' | 'r' => 1,
            'B' | 'b' => 2,
            'G' | 'g' => 3,
            _ => {
                return Err(invalid!(
                    "{what} board: unknown character {ch:?} at position {} ({}); \
                     use W for the empty cell and R, B, G for the tiles",
                    i + 1,
                    geom.describe_cell(i)
                ));
            }
        };
        if code == 0 {
            empties.push(i + 1);
        }
        counts[code as usize] += 1;
        codes.push(code);
    }
    match empties.len() {
        1 => {}
        0 => {
            return Err(invalid!(
                "{what} board has no empty cell W, it needs exactly one"
            ));
        }
        n => {
            let list: Vec<String> = empties.iter().map(|p| p.to_string()).collect();
            return Err(invalid!(
                "{what} board has {n} empty cells W (positions {}), it needs exactly one",
                list.join(", ")
            ));
        }
    }
    Ok(ParsedBoard { codes, counts })
}

/// The canonical string of a board: upper-case letters, row by row, no separators.
pub(crate) fn format_codes(codes: &[u8]) -> String {
    codes.iter().map(|&c| CODE_LETTERS[c as usize]).collect()
}

/// Describes tile counts like "7 R, 8 B, 0 G".
pub(crate) fn describe_counts(counts: &[u32; 4]) -> String {
    format!("{} R, {} B, {} G", counts[1], counts[2], counts[3])
}
