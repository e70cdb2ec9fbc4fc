//! Frontier states: one 4-bit label per column of the board, packed in a word
//! (position `j` in bits `4j..4j+4`): a `u64` for sides up to 16, a `u128` for
//! sides 17 to 32 ([`Word`]). The code is generic over the word, so each side
//! runs on the narrowest one with no cost for the other.
//!
//! Label `0` is an empty cell, `1` a cell of the top piece (connected to the top
//! side through occupied decided cells) and `2, 3, ...` the other pieces, numbered
//! in the order of their first position from the left. A live state always holds a
//! `1`, so the value `0` is free to mean "dropped". The updates work on all
//! nibbles at once (SWAR); positions at or beyond the side are always 0. A
//! frontier of `n` positions holds at most `ceil(n / 2)` pieces (two pieces are
//! never adjacent), so labels stay below 15 (the temporary [`FRESH`]) up to 26
//! positions.

use std::ops::{Add, BitAnd, BitOr, BitXor, Mul, Not, Shl, Shr};

/// Temporary label of a cell that starts a new piece (never survives `normalize`).
const FRESH: u32 = 0xF;

/// A packed frontier state: the operations the updates need, on `u64` and `u128`.
pub(crate) trait Word:
    Copy
    + Eq
    + std::hash::Hash
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
    + Shl<usize, Output = Self>
    + Shr<usize, Output = Self>
    + Add<Output = Self>
    + Mul<Output = Self>
{
    const ZERO: Self;
    /// Frontier positions a word holds.
    const POSITIONS: usize;
    /// Bit 0 of every nibble.
    const LOW: Self;
    /// Bits 0..2 of every nibble.
    const LOW3: Self;
    /// Bit 3 of every nibble.
    const HIGH: Self;
    /// A label (or any value below 16) as a word.
    fn small(value: u32) -> Self;
    /// The low 32 bits.
    fn low32(self) -> u32;
    fn trailing_zeros(self) -> u32;
    /// The state as a `u128` (the same bits).
    fn widen(self) -> u128;
    /// A 64-bit mix of the word, for hash tables.
    fn fold64(self) -> u64;
}

macro_rules! word {
    ($ty:ty) => {
        impl Word for $ty {
            const ZERO: $ty = 0;
            const POSITIONS: usize = <$ty>::BITS as usize / 4;
            const LOW: $ty = <$ty>::MAX / 0xF;
            const LOW3: $ty = Self::LOW * 7;
            const HIGH: $ty = Self::LOW * 8;
            #[inline]
            fn small(value: u32) -> $ty {
                value as $ty
            }
            #[inline]
            fn low32(self) -> u32 {
                self as u32
            }
            #[inline]
            fn trailing_zeros(self) -> u32 {
                <$ty>::trailing_zeros(self)
            }
            #[inline]
            fn widen(self) -> u128 {
                self as u128
            }
            #[inline]
            fn fold64(self) -> u64 {
                (self as u64) ^ ((self.widen() >> 64) as u64).rotate_left(29)
            }
        }
    };
}

word!(u64);
word!(u128);

/// Label at frontier position `pos`.
#[inline]
pub(crate) fn label<W: Word>(state: W, pos: usize) -> u32 {
    (state >> (4 * pos)).low32() & 0xF
}

#[inline]
fn with_label<W: Word>(state: W, pos: usize, value: u32) -> W {
    let shift = 4 * pos;
    (state & !(W::small(0xF) << shift)) | (W::small(value) << shift)
}

/// Bit 3 of each nibble of `x` set exactly when that nibble is non-zero (no
/// carries cross nibbles: the low three bits plus 7 stay within the nibble).
#[inline]
fn nonzero_nibbles<W: Word>(x: W) -> W {
    (((x & W::LOW3) + W::LOW3) | x) & W::HIGH
}

/// `0xF` in every nibble of `state` equal to `value` (`value` in 1..=15).
#[inline]
fn nibbles_equal<W: Word>(state: W, value: u32) -> W {
    let zero = !nonzero_nibbles(state ^ (W::small(value) * W::LOW)) & W::HIGH;
    (zero >> 3) * W::small(0xF)
}

/// Whether some position carries the top label 1.
#[inline]
fn has_top<W: Word>(state: W) -> bool {
    nibbles_equal(state, 1) != W::ZERO
}

/// The state after row 0 was decided with the occupied columns `mask`: every
/// occupied cell touches the top side and gets the label 1.
pub(crate) fn top_row_state<W: Word>(mask: u64, side: usize) -> W {
    (0..side)
        .filter(|&col| mask >> col & 1 == 1)
        .fold(W::ZERO, |state, col| with_label(state, col, 1))
}

/// Renames the labels >= 2 as 2, 3, ... in order of first appearance; returns 0
/// (dropped) when no label 1 is left.
#[inline]
fn normalize<W: Word>(state: W) -> W {
    if !has_top(state) {
        return W::ZERO;
    }
    // Nibbles with a label >= 2 that still need their new name.
    let mut pending = nonzero_nibbles(state & !W::LOW);
    let mut out = state;
    let mut next = 2;
    while pending != W::ZERO {
        let pos = pending.trailing_zeros() as usize / 4;
        let piece = nibbles_equal(state, label(state, pos));
        out = (out & !piece) | ((W::small(next) * W::LOW) & piece);
        pending = pending & !piece;
        next += 1;
    }
    out
}

/// Decides the cell of column `col` in the row being swept (the cell replaces the
/// one of the row above at frontier position `col`); returns the new state, or 0
/// when the top piece has left the frontier (no top-bottom path can follow).
#[inline]
pub(crate) fn advance<W: Word>(state: W, side: usize, col: usize, occupied: bool) -> W {
    let up = label(state, col);
    if !occupied {
        return match up {
            0 => state,
            // Removing a top cell changes no numbering; the state dies with the
            // last one.
            1 => {
                let rest = with_label(state, col, 0);
                if has_top(rest) { rest } else { W::ZERO }
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
            next = (next & !piece) | ((W::small(target) * W::LOW) & piece);
        }
    }
    normalize(with_label(next, col, target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack<W: Word>(labels: &[u32]) -> W {
        labels
            .iter()
            .enumerate()
            .fold(W::ZERO, |s, (pos, &l)| with_label(s, pos, l))
    }

    /// The update written plainly, position by position.
    fn advance_slow<W: Word>(state: W, side: usize, col: usize, occupied: bool) -> W {
        let mut labels: Vec<u32> = (0..side).map(|p| label(state, p)).collect();
        if occupied {
            let near: Vec<u32> = [col.checked_sub(1), Some(col), Some(col + 1)]
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
            return W::ZERO;
        }
        let mut names: Vec<u32> = Vec::new();
        for l in labels.iter_mut() {
            if *l >= 2 {
                let i = names.iter().position(|n| n == l).unwrap_or_else(|| {
                    names.push(*l);
                    names.len() - 1
                });
                *l = i as u32 + 2;
            }
        }
        pack(&labels)
    }

    #[test]
    fn hex_frontier_examples() {
        let pack = pack::<u64>;
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
        assert_eq!(top_row_state::<u64>(0b101, 3), pack(&[1, 0, 1]));
    }

    /// Every state reachable from a sample of top rows (at most `limit`
    /// states), every column, both choices, against [`advance_slow`]; with
    /// `narrow`, also against the same update on a `u64`.
    fn check_reachable<W: Word>(side: usize, every: usize, limit: usize, narrow: bool) {
        let mut seen = std::collections::HashSet::new();
        let mut todo: Vec<W> = (1u64..1 << side)
            .step_by(every)
            .map(|m| top_row_state(m, side))
            .collect();
        while let Some(s) = todo.pop() {
            if !seen.insert(s) || seen.len() > limit {
                continue;
            }
            for col in 0..side {
                for occupied in [false, true] {
                    let t = advance(s, side, col, occupied);
                    assert_eq!(
                        t,
                        advance_slow(s, side, col, occupied),
                        "{s:?} col {col} {occupied}"
                    );
                    if narrow {
                        let n = advance(s.widen() as u64, side, col, occupied);
                        assert_eq!(t.widen(), u128::from(n), "{s:?} col {col} {occupied}");
                    }
                    if t != W::ZERO {
                        todo.push(t);
                    }
                }
            }
        }
        assert!(
            seen.len() >= limit.min(100),
            "side {side}: {} states",
            seen.len()
        );
    }

    #[test]
    fn hex_frontier_matches_plain_update() {
        check_reachable::<u64>(7, 1, 200_000, false);
        check_reachable::<u64>(16, 997, 200_000, false);
    }

    #[test]
    fn wide_frontiers_match_the_plain_update_and_the_narrow_word() {
        // The u128 word on sides the u64 also holds gives the same states.
        check_reachable::<u128>(7, 1, 200_000, true);
        check_reachable::<u128>(16, 1999, 50_000, true);
        // Sides 17 to 20 need the wide word: positions 16 to 19 are used.
        for side in 17..=20 {
            check_reachable::<u128>(side, 4099, 30_000, false);
        }
        assert_eq!(<u64 as Word>::POSITIONS, 16);
        assert_eq!(<u128 as Word>::POSITIONS, 32);
        assert_eq!(
            <u128 as Word>::LOW,
            0x1111_1111_1111_1111_1111_1111_1111_1111
        );
    }

    #[test]
    fn the_highest_positions_of_a_wide_word_are_updated() {
        // A piece in the last column of a 20-wide frontier joins the top.
        let mut labels = [0u32; 20];
        labels[0] = 1;
        labels[19] = 2;
        labels[17] = 1;
        let s: u128 = pack(&labels);
        let t = advance(s, 20, 18, true);
        let mut want = labels;
        want[18] = 1;
        want[19] = 1;
        assert_eq!(t, pack(&want));
        // Emptying the last top cells drops the state.
        let only = pack::<u128>(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(advance(only, 20, 19, false), 0);
    }
}
