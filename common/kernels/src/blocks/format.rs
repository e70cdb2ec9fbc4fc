//! Reading a puzzle file: the grid, the `same:` lines, and every check that
//! names the offending line. The result is a [`Layout`]: the grid geometry, the
//! piece types with their shapes, and where every piece starts.

use std::collections::BTreeMap;

use super::{MAX_CELLS, MAX_STATE_BITS};
use crate::{Result, invalid};

/// A kind of piece: pieces of one type have the same shape and are
/// interchangeable, so configurations that only swap them are one configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PieceType {
    /// The characters naming the pieces of this type, in reading order of
    /// their first cells in the initial grid.
    pub pieces: String,
    /// The cells of the shape as (row, column) offsets from its anchor, the
    /// first cell in reading order; sorted in reading order, so the first
    /// offset is always `(0, 0)` and rows are never negative.
    pub shape: Vec<(i32, i32)>,
}

impl PieceType {
    /// Number of pieces of this type.
    pub fn count(&self) -> usize {
        self.pieces.chars().count()
    }
}

/// What a puzzle file says, checked: grid size, blocked cells, the piece
/// types (in reading order of their first piece) and the initial anchor cell
/// of every piece, per type.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) blocked: u128,
    pub(crate) types: Vec<PieceType>,
    /// Per type, the anchor cells (`row * cols + col`) of its pieces.
    pub(crate) anchors: Vec<Vec<usize>>,
}

/// One grid row as read: its line number and its cells.
struct Row {
    line: usize,
    cells: Vec<u8>,
}

/// A piece of the grid: its character and its cells in reading order.
struct Piece {
    name: u8,
    cells: Vec<(usize, usize)>,
}

impl Piece {
    fn shape(&self) -> Vec<(i32, i32)> {
        let (r0, c0) = self.cells[0];
        self.cells
            .iter()
            .map(|&(r, c)| (r as i32 - r0 as i32, c as i32 - c0 as i32))
            .collect()
    }
}

fn is_piece_char(ch: u8) -> bool {
    ch.is_ascii_alphanumeric()
}

/// The part of a line before its comment, without surrounding blanks.
fn content(line: &str) -> &str {
    line.split(';').next().unwrap_or("").trim()
}

pub(crate) fn parse_layout(text: &str) -> Result<Layout> {
    let mut rows: Vec<Row> = Vec::new();
    let mut same_lines: Vec<(usize, &str)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let body = content(raw);
        if body.is_empty() {
            continue;
        }
        if let Some((keyword, list)) = body.split_once(':') {
            let keyword = keyword.trim();
            if !keyword.eq_ignore_ascii_case("same") {
                return Err(invalid!(
                    "line {line}: unknown directive '{keyword}'; the only directive is \
                     'same: <pieces>'"
                ));
            }
            same_lines.push((line, list));
            continue;
        }
        if let Some(&(first_same, _)) = same_lines.first() {
            return Err(invalid!(
                "line {line}: grid row after the 'same:' line {first_same}; write the \
                 whole grid first"
            ));
        }
        rows.push(read_row(line, body)?);
    }
    let (first_line, last_line) = match (rows.first(), rows.last()) {
        (Some(first), Some(last)) => (first.line, last.line),
        _ => {
            return Err(invalid!(
                "the puzzle has no grid: write one row of cells per line ('.' empty, \
                 '#' blocked, a letter or digit per piece)"
            ));
        }
    };
    let cols = rows[0].cells.len();
    for row in &rows[1..] {
        if row.cells.len() != cols {
            return Err(invalid!(
                "line {}: the rows are ragged: this row has {} cells, the first row \
                 (line {first_line}) has {cols}",
                row.line,
                row.cells.len()
            ));
        }
    }
    let cell_count = rows.len() * cols;
    if cell_count > MAX_CELLS {
        return Err(invalid!(
            "line {first_line}: the puzzle is too large for the state encoding: the \
             grid has {} x {cols} = {cell_count} cells, the limit is {MAX_CELLS}",
            rows.len()
        ));
    }

    let mut blocked = 0u128;
    let mut empty = 0usize;
    let mut cells_of: BTreeMap<u8, Vec<(usize, usize)>> = BTreeMap::new();
    for (r, row) in rows.iter().enumerate() {
        for (c, &ch) in row.cells.iter().enumerate() {
            match ch {
                b'.' => empty += 1,
                b'#' => blocked |= 1 << (r * cols + c),
                _ => cells_of.entry(ch).or_default().push((r, c)),
            }
        }
    }
    let mut pieces: Vec<Piece> = cells_of
        .into_iter()
        .map(|(name, cells)| Piece { name, cells })
        .collect();
    for piece in &pieces {
        check_connected(piece, &rows)?;
    }
    if empty == 0 {
        return Err(invalid!(
            "line {first_line}: the grid (lines {first_line}-{last_line}) has no empty \
             cell '.', so no piece can ever move"
        ));
    }
    // Reading order of first cells fixes the order of pieces and of types, so
    // the state encoding of a puzzle file never depends on anything else.
    pieces.sort_by_key(|p| p.cells[0]);

    let groups = read_groups(&same_lines, &pieces)?;
    let (types, anchors) = piece_types(&pieces, &groups, cols);
    let bits = bits_per_cell(types.len());
    let needed = cell_count * bits as usize;
    if needed > MAX_STATE_BITS {
        return Err(invalid!(
            "line {first_line}: the puzzle is too large for the state encoding: \
             {cell_count} cells x {bits} bits per cell ({} piece types) = {needed} bits, \
             the limit is {MAX_STATE_BITS}; use fewer cells or make more pieces \
             interchangeable",
            types.len()
        ));
    }
    Ok(Layout {
        rows: rows.len(),
        cols,
        blocked,
        types,
        anchors,
    })
}

/// Bits per cell of the state: enough for the type codes `1..=types`.
pub(crate) fn bits_per_cell(types: usize) -> u32 {
    usize::BITS - types.leading_zeros()
}

fn read_row(line: usize, body: &str) -> Result<Row> {
    let mut cells = Vec::with_capacity(body.len());
    for (i, ch) in body.chars().enumerate() {
        let column = i + 1;
        match ch {
            '.' | '#' => cells.push(ch as u8),
            _ if ch.is_ascii() && is_piece_char(ch as u8) => cells.push(ch as u8),
            _ if ch.is_whitespace() => {
                return Err(invalid!(
                    "line {line}, column {column}: blank inside a grid row; write one \
                     character per cell, '.' for an empty cell"
                ));
            }
            _ => {
                return Err(invalid!(
                    "line {line}, column {column}: unknown character {ch:?}; a cell is \
                     '.' (empty), '#' (blocked) or a letter or digit naming a piece"
                ));
            }
        }
    }
    Ok(Row { line, cells })
}

/// Every cell of a piece must be reachable from its first cell through
/// edge-adjacent cells of the same piece.
fn check_connected(piece: &Piece, rows: &[Row]) -> Result<()> {
    let mut reached = vec![false; piece.cells.len()];
    reached[0] = true;
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let (r, c) = piece.cells[i];
        for (j, &(r2, c2)) in piece.cells.iter().enumerate() {
            if !reached[j] && r.abs_diff(r2) + c.abs_diff(c2) == 1 {
                reached[j] = true;
                stack.push(j);
            }
        }
    }
    match reached.iter().position(|&x| !x) {
        None => Ok(()),
        Some(j) => {
            let (r, c) = piece.cells[j];
            Err(invalid!(
                "line {}: piece '{}' is not connected: its cell in column {} does not \
                 touch the part that starts on line {}; every piece needs its own \
                 character",
                rows[r].line,
                piece.name as char,
                c + 1,
                rows[piece.cells[0].0].line
            ))
        }
    }
}

/// The `same:` groups as indices into `pieces`, with every rule checked.
fn read_groups(same_lines: &[(usize, &str)], pieces: &[Piece]) -> Result<Vec<Vec<usize>>> {
    let mut group_line: BTreeMap<u8, usize> = BTreeMap::new();
    let mut groups = Vec::new();
    for &(line, list) in same_lines {
        let mut group: Vec<usize> = Vec::new();
        for ch in list.chars().filter(|ch| !ch.is_whitespace()) {
            let index = pieces
                .iter()
                .position(|p| ch.is_ascii() && p.name == ch as u8)
                .ok_or_else(|| {
                    invalid!("line {line}: unknown piece {ch:?}: no piece of the grid has it")
                })?;
            let name = pieces[index].name;
            if group.contains(&index) {
                return Err(invalid!(
                    "line {line}: piece '{}' is listed twice",
                    name as char
                ));
            }
            if let Some(&earlier) = group_line.get(&name) {
                return Err(invalid!(
                    "line {line}: piece '{}' is already in the 'same:' group of line \
                     {earlier}; a piece belongs to at most one group",
                    name as char
                ));
            }
            group_line.insert(name, line);
            group.push(index);
        }
        if group.len() < 2 {
            return Err(invalid!(
                "line {line}: a 'same:' line lists at least two pieces"
            ));
        }
        let first = &pieces[group[0]];
        for &other in &group[1..] {
            if pieces[other].shape() != first.shape() {
                return Err(invalid!(
                    "line {line}: pieces '{}' and '{}' have different shapes, so they \
                     cannot be interchangeable",
                    first.name as char,
                    pieces[other].name as char
                ));
            }
        }
        groups.push(group);
    }
    Ok(groups)
}

/// Piece types in reading order of their first piece, and per type the anchor
/// cells of its pieces. A piece in no group is a type of its own.
fn piece_types(
    pieces: &[Piece],
    groups: &[Vec<usize>],
    cols: usize,
) -> (Vec<PieceType>, Vec<Vec<usize>>) {
    let mut type_of: Vec<Option<usize>> = vec![None; pieces.len()];
    let mut types: Vec<PieceType> = Vec::new();
    let mut anchors: Vec<Vec<usize>> = Vec::new();
    for (index, piece) in pieces.iter().enumerate() {
        if type_of[index].is_some() {
            continue;
        }
        let mut members: Vec<usize> = groups
            .iter()
            .find(|g| g.contains(&index))
            .cloned()
            .unwrap_or_else(|| vec![index]);
        members.sort_unstable();
        let t = types.len();
        for &m in &members {
            type_of[m] = Some(t);
        }
        types.push(PieceType {
            pieces: members.iter().map(|&m| pieces[m].name as char).collect(),
            shape: piece.shape(),
        });
        anchors.push(
            members
                .iter()
                .map(|&m| {
                    let (r, c) = pieces[m].cells[0];
                    r * cols + c
                })
                .collect(),
        );
    }
    (types, anchors)
}
