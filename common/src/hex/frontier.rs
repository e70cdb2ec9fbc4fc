//! Frontier states: one 4-bit label per column of the board, packed in a `u64`
//! (position `j` in bits `4j..4j+4`).
//!
//! Label `0` is an empty cell, `1` a cell of the top piece (connected to the top
//! side through occupied decided cells) and `2, 3, ...` the other pieces, numbered
//! in the order of their first position from the left. A live state always holds a
//! `1`, so the value `0` is free to mean "dropped". The updates work on all 16
//! nibbles at once (SWAR); positions at or beyond the side are always 0.

/// Mask of one label.
const MASK: u64 = 0xF;
/// Temporary label of a cell that starts a new piece (never survives `normalize`).
const FRESH: u64 = 0xF;
/// Bit 0 of every nibble.
const LOW: u64 = 0x1111_1111_1111_1111;
/// Bits 0..2 of every nibble.
const LOW3: u64 = 0x7777_7777_7777_7777;
/// Bit 3 of every nibble.
const HIGH: u64 = 0x8888_8888_8888_8888;

/// Label at frontier position `pos`.
#[inline]
pub(crate) fn label(state: u64, pos: usize) -> u64 {
    (state >> (4 * pos)) & MASK
}

#[inline]
fn with_label(state: u64, pos: usize, value: u64) -> u64 {
    let shift = 4 * pos;
    (state & !(MASK << shift)) | (value << shift)
}

/// Bit 3 of each nibble of `x` set exactly when that nibble is non-zero (no
/// carries cross nibbles: the low three bits plus 7 stay within the nibble).
#[inline]
fn nonzero_nibbles(x: u64) -> u64 {
    (((x & LOW3) + LOW3) | x) & HIGH
}

/// `0xF` in every nibble of `state` equal to `value` (`value` in 1..=15).
#[inline]
fn nibbles_equal(state: u64, value: u64) -> u64 {
    let zero = !nonzero_nibbles(state ^ (value * LOW)) & HIGH;
    (zero >> 3) * MASK
}

/// Whether some position carries the top label 1.
#[inline]
fn has_top(state: u64) -> bool {
    nibbles_equal(state, 1) != 0
}

/// The state after row 0 was decided with the occupied columns `mask`: every
/// occupied cell touches the top side and gets the label 1.
pub(crate) fn top_row_state(mask: u64, side: usize) -> u64 {
    (0..side)
        .filter(|&col| mask >> col & 1 == 1)
        .fold(0, |state, col| with_label(state, col, 1))
}

/// Renames the labels >= 2 as 2, 3, ... in order of first appearance; returns 0
/// (dropped) when no label 1 is left.
#[inline]
fn normalize(state: u64) -> u64 {
    if !has_top(state) {
        return 0;
    }
    // Nibbles with a label >= 2 that still need their new name.
    let mut pending = nonzero_nibbles(state & !LOW);
    let mut out = state;
    let mut next = 2;
    while pending != 0 {
        let pos = pending.trailing_zeros() as usize / 4;
        let piece = nibbles_equal(state, label(state, pos));
        out = (out & !piece) | ((next * LOW) & piece);
        pending &= !piece;
        next += 1;
    }
    out
}

/// Decides the cell of column `col` in the row being swept (the cell replaces the
/// one of the row above at frontier position `col`); returns the new state, or 0
/// when the top piece has left the frontier (no top-bottom path can follow).
#[inline]
pub(crate) fn advance(state: u64, side: usize, col: usize, occupied: bool) -> u64 {
    let up = label(state, col);
    if !occupied {
        return match up {
            0 => state,
            // Removing a top cell changes no numbering; the state dies with the
            // last one.
            1 => {
                let rest = with_label(state, col, 0);
                if has_top(rest) { rest } else { 0 }
            }
            _ => normalize(with_label(state, col, 0)),
        };
    }
    // Decided neighbours of the new cell sit at positions col-1, col and col+1.
    let left = if col > 0 { label(state, col - 1) } else { 0 };
    let up_right = if col + 1 < side {
        label(state, col + 1)
    } else {
        0
    };
    if up != 0 && (left == 0 || left == up) && (up_right == 0 || up_right == up) {
        // The new cell only replaces a cell of the same piece.
        return state;
    }
    let target = [left, up, up_right]
        .into_iter()
        .filter(|&l| l != 0)
        .min()
        .unwrap_or(FRESH);
    let mut next = state;
    for l in [left, up, up_right] {
        if l != 0 && l != target {
            let piece = nibbles_equal(state, l);
            next = (next & !piece) | ((target * LOW) & piece);
        }
    }
    normalize(with_label(next, col, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(labels: &[u64]) -> u64 {
        labels
            .iter()
            .enumerate()
            .fold(0, |s, (pos, &l)| with_label(s, pos, l))
    }

    /// The update written plainly, position by position.
    fn advance_slow(state: u64, side: usize, col: usize, occupied: bool) -> u64 {
        let mut labels: Vec<u64> = (0..side).map(|p| label(state, p)).collect();
        if occupied {
            let near: Vec<u64> = [col.checked_sub(1), Some(col), Some(col + 1)]
                .into_iter()
                .flatten()
                .filter(|&p| p < side && labels[p] != 0)
                .map(|p| labels[p])
                .collect();
            let target = near.iter().copied().min().unwrap_or(FRESH);
            for l in labels.iter_mut() {
                if near.contains(l) {
                    *l = target;
                }
            }
            labels[col] = target;
        } else {
            labels[col] = 0;
        }
        if !labels.contains(&1) {
            return 0;
        }
        let mut names: Vec<u64> = Vec::new();
        for l in labels.iter_mut() {
            if *l >= 2 {
                let i = names.iter().position(|n| n == l).unwrap_or_else(|| {
                    names.push(*l);
                    names.len() - 1
                });
                *l = i as u64 + 2;
            }
        }
        pack(&labels)
    }

    #[test]
    fn hex_frontier_examples() {
        // (2,0,1,0) before deciding column 1: occupied joins piece 2 to the top.
        let s = pack(&[2, 0, 1, 0]);
        assert_eq!(advance(s, 4, 1, true), pack(&[1, 1, 1, 0]));
        assert_eq!(advance(s, 4, 1, false), s);
        // ... and an empty column 2 then drops the top piece: state dropped.
        assert_eq!(advance(s, 4, 2, false), 0);
        // A fresh piece gets the next free label in order of appearance.
        let s = pack(&[0, 0, 0, 1]);
        assert_eq!(advance(s, 4, 0, true), pack(&[2, 0, 0, 1]));
        let s = pack(&[1, 0, 0, 2]);
        assert_eq!(advance(s, 4, 1, true), pack(&[1, 1, 0, 2]));
        let s = pack(&[0, 2, 0, 1, 0, 3]);
        assert_eq!(advance(s, 6, 0, true), pack(&[2, 2, 0, 1, 0, 3]));
        assert_eq!(advance(s, 6, 1, false), pack(&[0, 0, 0, 1, 0, 2]));
        assert_eq!(top_row_state(0b101, 3), pack(&[1, 0, 1]));
    }

    #[test]
    fn hex_frontier_matches_plain_update() {
        // Every state reachable on a 7-wide and a 16-wide frontier (the latter
        // from a sample of top rows), every column, both choices.
        for side in [7usize, 16] {
            let mut seen = std::collections::HashSet::new();
            let mut todo: Vec<u64> = (1u64..1 << side)
                .step_by(if side == 16 { 997 } else { 1 })
                .map(|m| top_row_state(m, side))
                .collect();
            while let Some(s) = todo.pop() {
                if !seen.insert(s) || seen.len() > 200_000 {
                    continue;
                }
                for col in 0..side {
                    for occupied in [false, true] {
                        let t = advance(s, side, col, occupied);
                        assert_eq!(
                            t,
                            advance_slow(s, side, col, occupied),
                            "{s:x} col {col} {occupied}"
                        );
                        if t != 0 {
                            todo.push(t);
                        }
                    }
                }
            }
        }
    }
}
