//! Boards as colour masks, their moves, and their dense index.
//!
//! Read the `t = cells - 1` tiles row by row, skipping the empty cell: tile
//! position `i` is cell `i` before the empty cell and cell `i + 1` after it. The
//! colours present are ordered by tile count: the primary (fewest), the
//! secondary, and the rest (most tiles). A board is
//! - its empty cell `z`,
//! - the mask `A` of the positions whose tile is not of the rest colour
//!   (`kA` bits among `t`),
//! - with three colours, the mask `B` over those `kA` tiles, in order, marking the
//!   primary ones (`k1` bits among `kA`); with two colours (or one) `B` is empty.
//!
//! A [`State`] packs `A` in bits 0..24, `B` in bits 24..48 and `z` in bits 48..53.
//!
//! A horizontal move keeps the order of the tiles: only `z` changes. A vertical
//! move takes one tile past the `C - 1` tiles between its cell and the empty
//! cell, which rotates a window of `C` positions of `A` by one and, if that tile
//! belongs to `A`, a window of `B` (the `A`-tiles it passes, plus itself).
//!
//! The index is `(rank(A) * binom(kA, k1) + rank(B)) * cells + z`, where `rank`
//! is the colex rank of a subset: `sum_j binom(p_j, j)` over its positions
//! `p_1 < ... < p_k`, read per byte from tables. With `z` varying fastest, a
//! horizontal move changes the index by one, and the distance entries of the
//! two boards share a cache line.

use super::board::Geometry;
use super::index::binomials;

const MASK_BITS: u32 = 24;
const MASK: u64 = (1 << MASK_BITS) - 1;
const BLANK_SHIFT: u32 = 2 * MASK_BITS;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct State(u64);

impl State {
    #[inline]
    pub(crate) fn blank(self) -> usize {
        (self.0 >> BLANK_SHIFT) as usize
    }
}

/// One move from a given empty cell, as bit operations on a [`State`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Move {
    /// Bits kept in place (everything but the rotated window of `A`).
    keep: u64,
    /// Window bits of `A` moving by one position, and their shifts.
    step: u64,
    step_left: u8,
    step_right: u8,
    /// The window bit of `A` wrapping around the window, and its shifts.
    wrap: u64,
    wrap_left: u8,
    wrap_right: u8,
    /// The new empty cell, in place.
    blank: u64,
    /// Vertical moves: the moving tile's bit in `A`, the bits of `A` below the
    /// window and the bits of the window the tile passes.
    mover: u64,
    below: u64,
    passed: u64,
    pub(crate) letter: u8,
    /// Code (see [`letter_code`]) of the move that undoes this one.
    pub(crate) back: u8,
    /// For horizontal moves, the change of the index (wrapping): plus or minus 1.
    pub(crate) index_step: Option<u64>,
}

/// Codes 0..=3 of the move letters `D`, `L`, `R`, `U`; 4 stands for none.
pub(crate) const NO_MOVE: u8 = 4;

impl Move {
    /// This move's code (see [`letter_code`]).
    #[inline]
    pub(crate) fn code(&self) -> u8 {
        letter_code(self.letter)
    }
}

fn letter_code(letter: u8) -> u8 {
    match letter {
        b'D' => 0,
        b'L' => 1,
        b'R' => 2,
        _ => 3,
    }
}

/// Colex ranks of `k`-subsets of 24 positions, one table lookup per byte,
/// and their inverse, a search per byte.
#[derive(Clone, Debug)]
struct ColexTable {
    /// Number of set bits plus one.
    stride: usize,
    /// `table[(chunk * 256 + byte) * stride + s]`: the contribution of the set
    /// bits of `byte` at positions `8 * chunk + q` when `s` set bits precede.
    table: Vec<u32>,
    /// The top bytes (positions 16..24) a `k`-subset can have, by their
    /// contribution: the subsets with one top byte have the consecutive ranks
    /// of a [`ByteRange`].
    top: Vec<ByteRange>,
    /// `middle[j]`: the same for the byte of positions 8..16 of a `j`-subset
    /// of positions 0..16.
    middle: Vec<Vec<ByteRange>>,
    /// `low[j][r]`: the byte with `j` set bits of colex rank `r`.
    low: Vec<Vec<u8>>,
}

/// The ranks `start..end` of the subsets that have `byte` in one chunk (and
/// given bytes above it), relative to the chunk above.
#[derive(Clone, Copy, Debug, Default)]
struct ByteRange {
    start: u32,
    end: u32,
    byte: u8,
}

/// The top and middle [`ByteRange`]s of the last rank unranked, in absolute
/// ranks: increasing ranks mostly fall in the same ones, which then need no
/// search.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UnrankHint {
    top: (u64, u64, u8),
    middle: (u64, u64, u8),
}

/// An [`UnrankHint`] for each of a board's two masks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StateHint {
    a: UnrankHint,
    b: UnrankHint,
}

impl ColexTable {
    fn new(k: usize) -> ColexTable {
        let binom = binomials();
        let stride = k + 1;
        let mut table = vec![0u32; 3 * 256 * stride];
        for chunk in 0..3 {
            for byte in 0..256usize {
                for s in 0..stride {
                    let mut sum = 0u64;
                    let mut j = s;
                    for q in 0..8 {
                        if byte >> q & 1 == 1 {
                            j += 1;
                            sum += binom[8 * chunk + q][j.min(25)];
                        }
                    }
                    // Sums of at most 8 binomials below binom(23, 11).
                    table[(chunk * 256 + byte) * stride + s] = sum as u32;
                }
            }
        }
        // The bytes of `chunk` whose set bits, with `ones` set bits in all up
        // to the chunk's end, leave at most `8 * chunk` below it.
        let ranges = |chunk: usize, ones: usize| {
            let mut list: Vec<ByteRange> = (0..256usize)
                .filter(|&b| {
                    let own = POPCOUNT[b] as usize;
                    own <= ones && ones - own <= 8 * chunk
                })
                .map(|b| {
                    let below = ones - POPCOUNT[b] as usize;
                    let start = table[(chunk * 256 + b) * stride + below];
                    let subsets_below = binom[8 * chunk][below] as u32;
                    ByteRange {
                        start,
                        end: start + subsets_below,
                        byte: b as u8,
                    }
                })
                .collect();
            list.sort_unstable_by_key(|r| r.start);
            list
        };
        let top = ranges(2, k);
        let middle = (0..=k.min(16)).map(|j| ranges(1, j)).collect();
        let low = (0..=k.min(8))
            .map(|j| ranges(0, j).into_iter().map(|r| r.byte).collect())
            .collect();
        ColexTable {
            stride,
            table,
            top,
            middle,
            low,
        }
    }

    /// The `k`-subset (`k` as built) of colex rank `rank`, which is below
    /// `binom(24, k)`: the top byte's range found by a search, the middle
    /// byte's within it, the low byte looked up. A search is skipped where
    /// `hint` (the ranges of the rank before) already holds the rank.
    #[inline]
    fn unrank(&self, rank: u64, hint: &mut UnrankHint) -> u64 {
        let find = |list: &[ByteRange], base: u64| {
            let i = list.partition_point(|r| base + u64::from(r.start) <= rank) - 1;
            let r = list[i];
            (base + u64::from(r.start), base + u64::from(r.end), r.byte)
        };
        if !(hint.top.0..hint.top.1).contains(&rank) {
            hint.top = find(&self.top, 0);
            hint.middle = (0, 0, 0);
        }
        let (top_start, _, b2) = hint.top;
        let ones = self.stride - 1 - POPCOUNT[b2 as usize] as usize;
        if !(hint.middle.0..hint.middle.1).contains(&rank) {
            hint.middle = find(&self.middle[ones], top_start);
        }
        let (middle_start, _, b1) = hint.middle;
        let ones = ones - POPCOUNT[b1 as usize] as usize;
        let b0 = self.low[ones][(rank - middle_start) as usize];
        u64::from(b0) | u64::from(b1) << 8 | u64::from(b2) << 16
    }

    #[inline]
    fn rank(&self, mask: u64) -> u64 {
        let (b0, b1, b2) = (
            (mask & 0xFF) as usize,
            (mask >> 8 & 0xFF) as usize,
            (mask >> 16 & 0xFF) as usize,
        );
        let s1 = POPCOUNT[b0] as usize;
        let s2 = s1 + POPCOUNT[b1] as usize;
        let st = self.stride;
        u64::from(self.table[b0 * st])
            + u64::from(self.table[(256 + b1) * st + s1])
            + u64::from(self.table[(512 + b2) * st + s2])
    }
}

const POPCOUNT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u32).count_ones() as u8;
        i += 1;
    }
    t
};

/// Population count of a 24-bit mask by table (the portable target has no
/// popcount instruction).
#[inline]
fn popcount24(x: u64) -> u32 {
    u32::from(POPCOUNT[(x & 0xFF) as usize])
        + u32::from(POPCOUNT[(x >> 8 & 0xFF) as usize])
        + u32::from(POPCOUNT[(x >> 16 & 0xFF) as usize])
}

/// Colour order, moves and dense index for boards with fixed tile counts.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    cells: usize,
    /// Colour codes: primary, secondary, rest (0 when absent).
    order: [u8; 3],
    three_colours: bool,
    /// `moves[z][..degree[z]]`: the moves with the empty cell on `z`, in ASCII
    /// order of their letters.
    moves: Vec<[Move; 4]>,
    degree: Vec<u8>,
    /// `forward[z * 5 + back]`: the indices into `moves[z]` of the moves other
    /// than the one with code `back`, and their number.
    forward: Vec<([u8; 4], u8)>,
    rank_a: ColexTable,
    rank_b: ColexTable,
    /// Number of `B` masks: `binom(kA, k1)` (1 without a third colour).
    span_b: u64,
    /// Number of tile sequences `M`.
    per_blank: u64,
}

impl Layout {
    /// `counts[code]` for the codes 0..=3 (with `counts[1..]` summing to
    /// `cells - 1`); the caller has checked that the number of boards fits.
    pub(crate) fn new(geom: &Geometry, counts: &[u32; 4]) -> Layout {
        let binom = binomials();
        let cells = geom.cells;
        let t = cells - 1;
        let mut present: Vec<(u32, u8)> = (1..4u8)
            .filter(|&c| counts[c as usize] > 0)
            .map(|c| (counts[c as usize], c))
            .collect();
        present.sort();
        let three_colours = present.len() == 3;
        let (order, k_a, k1) = match present[..] {
            [(k1, p), (k2, s), (_, r)] => ([p, s, r], (k1 + k2) as usize, k1 as usize),
            [(k1, p), (_, r)] => ([p, 0, r], k1 as usize, 0),
            _ => ([present[0].1, 0, 0], t, 0),
        };
        let span_b = binom[k_a][k1];
        let per_blank = binom[t][k_a] * span_b;

        let cols = geom.cols as usize;
        let mut moves = vec![[Move::default(); 4]; cells];
        let mut degree = vec![0u8; cells];
        for z in 0..cells {
            let list = geom.moves(z);
            degree[z] = list.len() as u8;
            for (slot, &(src, letter)) in moves[z].iter_mut().zip(list) {
                let src = src as usize;
                let mut m = Move {
                    blank: (src as u64) << BLANK_SHIFT,
                    letter,
                    back: 3 - letter_code(letter),
                    ..Move::default()
                };
                let low = z.min(src);
                let window = ((1u64 << cols) - 1) << low;
                let c1 = (cols - 1) as u8;
                m.keep = !window & !(0x1F << BLANK_SHIFT);
                m.below = (1u64 << low) - 1;
                match letter {
                    b'L' => m.index_step = Some(1),
                    b'R' => m.index_step = Some(1u64.wrapping_neg()),
                    b'U' => {
                        // Positions z..z+C-1: all move up by one, the top one to z.
                        let top = 1u64 << (z + cols - 1);
                        m.step = window & !top;
                        m.step_left = 1;
                        m.wrap = top;
                        m.wrap_right = c1;
                        m.mover = top;
                        m.passed = window & !top;
                    }
                    _ => {
                        // Positions z-C..z-1: all move down by one, the bottom
                        // one to z-1.
                        let bottom = 1u64 << src;
                        m.step = window & !bottom;
                        m.step_right = 1;
                        m.wrap = bottom;
                        m.wrap_left = c1;
                        m.mover = bottom;
                        m.passed = window & !bottom;
                    }
                }
                if m.index_step.is_some() {
                    m.keep = !(0x1F << BLANK_SHIFT);
                }
                *slot = m;
            }
        }
        let mut forward = vec![([0u8; 4], 0u8); cells * 5];
        for z in 0..cells {
            for back in 0..=NO_MOVE {
                let entry = &mut forward[z * 5 + back as usize];
                for (k, m) in moves[z][..degree[z] as usize].iter().enumerate() {
                    if letter_code(m.letter) != back {
                        entry.0[entry.1 as usize] = k as u8;
                        entry.1 += 1;
                    }
                }
            }
        }
        Layout {
            cells,
            order,
            three_colours,
            moves,
            degree,
            forward,
            rank_a: ColexTable::new(k_a),
            rank_b: ColexTable::new(k1),
            span_b,
            per_blank,
        }
    }

    /// Number of indices: all boards with these tiles.
    pub(crate) fn total(&self) -> u64 {
        self.cells as u64 * self.per_blank
    }

    #[inline]
    pub(crate) fn moves(&self, blank: usize) -> &[Move] {
        &self.moves[blank][..self.degree[blank] as usize]
    }

    /// The moves with the empty cell on `blank` except the one with code `back`
    /// (all of them for [`NO_MOVE`]).
    #[inline]
    pub(crate) fn moves_except(&self, blank: usize, back: u8) -> impl Iterator<Item = &Move> {
        let (list, len) = &self.forward[blank * 5 + back as usize];
        let moves = &self.moves[blank];
        list[..*len as usize]
            .iter()
            .map(move |&k| &moves[k as usize & 3])
    }

    #[inline]
    pub(crate) fn degree(&self, blank: usize) -> usize {
        self.degree[blank] as usize
    }

    /// The most moves of any board.
    pub(crate) fn max_degree(&self) -> usize {
        self.degree.iter().copied().max().unwrap_or(0) as usize
    }

    /// The board after move `m` (one of `moves(s.blank())`).
    #[inline]
    pub(crate) fn apply(&self, m: &Move, s: State) -> State {
        let x = s.0;
        let y = (x & m.keep)
            | ((x & m.step) << m.step_left >> m.step_right)
            | ((x & m.wrap) << m.wrap_left >> m.wrap_right)
            | m.blank;
        if self.three_colours && m.mover != 0 {
            State(Self::rotate_b(m, x, y))
        } else {
            State(y)
        }
    }

    /// The `B` part of a vertical move: if the moving tile is in `A`, it passes
    /// the `len` tiles of `A` between its cell and the empty cell, which rotates
    /// bits `lo..=lo + len` of `B` by one.
    #[inline]
    fn rotate_b(m: &Move, x: u64, y: u64) -> u64 {
        let a = x & MASK;
        let b = x >> MASK_BITS & MASK;
        let lo = popcount24(a & m.below);
        let len = popcount24(a & m.passed);
        let window = ((2u64 << len) - 1) << lo;
        let bits = b & window;
        let rotated = if m.step_left == 1 {
            // Up: the tile at lo + len comes first.
            ((bits << 1) & window) | ((bits >> len) & (1 << lo))
        } else {
            // Down: the tile at lo goes last.
            ((bits >> 1) & window) | ((bits << len) & (1 << (lo + len)))
        };
        let moving = 0u64.wrapping_sub(u64::from(a & m.mover != 0));
        let new_b = (b & !(window & moving)) | (rotated & moving);
        (y & !(MASK << MASK_BITS)) | (new_b << MASK_BITS)
    }

    /// The state of a board given by its cell codes (with these tile counts).
    pub(crate) fn state(&self, codes: &[u8]) -> State {
        let z = codes.iter().position(|&c| c == 0).unwrap_or(0);
        let mut x = (z as u64) << BLANK_SHIFT;
        let mut in_a = 0;
        for (pos, &code) in codes.iter().filter(|&&c| c != 0).enumerate() {
            if code == self.order[0] || (self.three_colours && code == self.order[1]) {
                x |= 1 << pos;
                if self.three_colours && code == self.order[0] {
                    x |= 1 << (MASK_BITS + in_a);
                }
                in_a += 1;
            }
        }
        State(x)
    }

    /// The cell codes of a state.
    #[cfg(test)]
    pub(crate) fn codes(&self, s: State) -> Vec<u8> {
        let z = s.blank();
        let mut codes = Vec::with_capacity(self.cells);
        let mut in_a = 0;
        for pos in 0..self.cells - 1 {
            if pos == z {
                codes.push(0);
            }
            codes.push(if s.0 >> pos & 1 == 0 {
                self.order[2]
            } else {
                in_a += 1;
                if !self.three_colours || s.0 >> (MASK_BITS + in_a - 1) & 1 == 1 {
                    self.order[0]
                } else {
                    self.order[1]
                }
            });
        }
        if z == self.cells - 1 {
            codes.push(0);
        }
        codes
    }

    /// The board with dense index `index` (the inverse of [`Layout::index`]),
    /// or `None` past the last index.
    pub(crate) fn state_at(&self, index: u64) -> Option<State> {
        self.state_near(index, &mut StateHint::default())
    }

    /// [`Layout::state_at`], faster for increasing indices that reuse `hint`.
    #[inline]
    pub(crate) fn state_near(&self, index: u64, hint: &mut StateHint) -> Option<State> {
        if index >= self.total() {
            return None;
        }
        let cells = self.cells as u64;
        let (rest, z) = (index / cells, index % cells);
        let (a, b) = match self.three_colours {
            true => (
                self.rank_a.unrank(rest / self.span_b, &mut hint.a),
                self.rank_b.unrank(rest % self.span_b, &mut hint.b),
            ),
            false => (self.rank_a.unrank(rest, &mut hint.a), 0),
        };
        Some(State(a | b << MASK_BITS | z << BLANK_SHIFT))
    }

    /// The dense index of a state, in `0..total()`.
    #[inline(always)]
    pub(crate) fn index(&self, s: State) -> u64 {
        let x = s.0;
        let z = x >> BLANK_SHIFT;
        let r = self.rank_a.rank(x & MASK) * self.span_b;
        let r = if self.three_colours {
            r + self.rank_b.rank(x >> MASK_BITS & MASK)
        } else {
            r
        };
        r * self.cells as u64 + z
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::BinomTable;
    use super::*;

    /// Every third mask of 24 bits: its rank is below `binom(24, k)` and the
    /// search per byte finds the mask again from it.
    /// The subset of colex rank `rank` position by position from the top: its
    /// `j`-th position is the largest `p` with `binom(p, j) <= rank` left.
    fn unrank_by_positions(binom: &BinomTable, mut rank: u64, k: usize) -> u64 {
        let mut mask = 0u64;
        let mut p = MASK_BITS as usize;
        for j in (1..=k).rev() {
            p -= 1;
            while binom[p][j] > rank {
                p -= 1;
            }
            rank -= binom[p][j];
            mask |= 1 << p;
        }
        mask
    }

    #[test]
    fn a_rank_unranks_to_its_subset_for_every_size() {
        let binom = binomials();
        let tables: Vec<ColexTable> = (0..=24).map(ColexTable::new).collect();
        // A hint per size, kept from mask to mask: ranks come in any order.
        let mut hints = [UnrankHint::default(); 25];
        for mask in (0u64..1 << 24).step_by(3) {
            let k = popcount24(mask) as usize;
            let rank = tables[k].rank(mask);
            assert!(rank < binom[24][k], "rank {rank} of {mask:#x}");
            assert_eq!(
                tables[k].unrank(rank, &mut hints[k]),
                mask,
                "rank {rank} of {k} bits"
            );
            assert_eq!(tables[k].unrank(rank, &mut UnrankHint::default()), mask);
            if mask % 61 == 0 {
                assert_eq!(unrank_by_positions(&binom, rank, k), mask);
            }
        }
        for k in 0..=24 {
            let last = binom[24][k] - 1;
            let mut hint = UnrankHint::default();
            assert_eq!(popcount24(tables[k].unrank(last, &mut hint)) as usize, k);
            assert_eq!(
                tables[k].unrank(0, &mut hint),
                (1 << k) - 1,
                "the least subset"
            );
        }
    }
}
