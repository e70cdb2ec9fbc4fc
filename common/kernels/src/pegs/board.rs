//! Board geometry: holes on an 8 x 8 grid of bits (the diamond on a sheared
//! layout), jumps grouped by axis, the board symmetries as bit transforms and
//! the parity invariants of the jumps.

use std::sync::OnceLock;

use super::BoardShape;

/// Bits per grid row: hole `(row, col)` is bit `GRID * row + col`.
pub(crate) const GRID: u32 = 8;

/// The diamond's rows (and columns): holes `(row, col)` with
/// `|row - 4| + |col - 4| <= 4`.
const DIAMOND_SIDE: u32 = 9;

/// The bit of hole `(row, col)` of `shape`. The 9 x 9 diamond does not fit
/// the 8 x 8 grid: its holes are bits `7 row + 2 col - 8`, from 0 to 56,
/// distinct on the diamond (two holes with the same bit would be 2 rows and
/// 7 columns apart, which no two holes are); a step along a row is 2 bits,
/// down a column 7.
pub(crate) fn cell_bit(shape: BoardShape, row: u32, col: u32) -> u32 {
    match shape {
        BoardShape::Diamond => 7 * row + 2 * col - 8,
        _ => GRID * row + col,
    }
}

/// Whether `(row, col)` is a hole of `shape`.
fn is_cell(shape: BoardShape, row: u32, col: u32) -> bool {
    match shape {
        BoardShape::English | BoardShape::French => {
            let cross = row < 7 && col < 7 && ((2..=4).contains(&row) || (2..=4).contains(&col));
            let corner =
                shape == BoardShape::French && (row == 1 || row == 5) && (col == 1 || col == 5);
            cross || corner
        }
        BoardShape::Triangle(side) => row < side && col <= row,
        BoardShape::Diamond => row.abs_diff(4) + col.abs_diff(4) <= 4,
    }
}

/// The grid cells of the holes of a board, in hole-number order: row by row
/// from the top, left to right within a row.
pub(crate) fn hole_cells(shape: BoardShape) -> Vec<(u32, u32)> {
    let side = match shape {
        BoardShape::English | BoardShape::French => 7,
        BoardShape::Triangle(side) => side,
        BoardShape::Diamond => DIAMOND_SIDE,
    };
    (0..side)
        .flat_map(|row| (0..side).map(move |col| (row, col)))
        .filter(|&(row, col)| is_cell(shape, row, col))
        .collect()
}

/// One jump: the peg on `from` jumps over the peg on `over` into the empty `to`.
/// Each field is a one-bit board.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Jump {
    pub from: u64,
    pub over: u64,
    pub to: u64,
}

impl Jump {
    /// The three holes the jump changes.
    pub fn mask(&self) -> u64 {
        self.from | self.over | self.to
    }
}

/// All jumps along one axis of the grid, found for every position at once by
/// shifting the board by the axis step.
#[derive(Clone, Debug)]
pub(crate) struct Axis {
    /// Bit offset of one step along the axis (1: east, 8: south, 9: south-east).
    pub(crate) step: u32,
    /// The three bits of a jump that starts at bit 0 and goes forward.
    pub(crate) line: u64,
    /// Holes `p` with holes at `p + step` and `p + 2 step` on the same line.
    pub(crate) forward: u64,
    /// Holes `p` with holes at `p - step` and `p - 2 step` on the same line.
    pub(crate) backward: u64,
}

/// The jump axes of a shape, built from cell coordinates so that a jump never
/// wraps from one grid row into the next.
pub(crate) fn axes(shape: BoardShape) -> Vec<Axis> {
    let directions: &[(u32, u32)] = match shape {
        BoardShape::English | BoardShape::French | BoardShape::Diamond => &[(0, 1), (1, 0)],
        BoardShape::Triangle(_) => &[(0, 1), (1, 0), (1, 1)],
    };
    let is_hole = |row: u32, col: u32| is_cell(shape, row, col);
    directions
        .iter()
        .map(|&(dr, dc)| {
            // The layouts are linear: a step is the same number of bits
            // from every hole.
            let step = match shape {
                BoardShape::Diamond => 7 * dr + 2 * dc,
                _ => cell_bit(shape, dr, dc),
            };
            let mut forward = 0;
            let mut backward = 0;
            for (row, col) in hole_cells(shape) {
                let bit = 1u64 << cell_bit(shape, row, col);
                if is_hole(row + dr, col + dc) && is_hole(row + 2 * dr, col + 2 * dc) {
                    forward |= bit;
                }
                if row >= 2 * dr
                    && col >= 2 * dc
                    && is_hole(row - dr, col - dc)
                    && is_hole(row - 2 * dr, col - 2 * dc)
                {
                    backward |= bit;
                }
            }
            Axis {
                step,
                line: 1 | 1 << step | 1 << (2 * step),
                forward,
                backward,
            }
        })
        .collect()
}

/// Every jump of the board, sorted.
pub(crate) fn jumps_of(axes: &[Axis]) -> Vec<Jump> {
    let mut jumps = Vec::new();
    for axis in axes {
        let s = axis.step;
        for p in bits(axis.forward) {
            jumps.push(Jump {
                from: 1 << p,
                over: 1 << (p + s),
                to: 1 << (p + 2 * s),
            });
        }
        for p in bits(axis.backward) {
            jumps.push(Jump {
                from: 1 << p,
                over: 1 << (p - s),
                to: 1 << (p - 2 * s),
            });
        }
    }
    jumps.sort();
    jumps
}

/// The set bits of `mask`, lowest first.
pub(crate) fn bits(mut mask: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let p = mask.trailing_zeros();
            mask &= mask - 1;
            p
        })
    })
}

// ---- symmetries ----

/// Exchanges the bits selected by `mask` with the bits `shift` places above them.
#[inline(always)]
fn delta_swap(x: u64, mask: u64, shift: u32) -> u64 {
    let t = ((x >> shift) ^ x) & mask;
    x ^ t ^ (t << shift)
}

/// `(row, col) -> (col, row)` on the 8 x 8 grid: exchanges the off-diagonal
/// quarters, then within them the off-diagonal 2 x 2 blocks, then single cells.
#[inline(always)]
fn transpose(x: u64) -> u64 {
    let x = delta_swap(x, 0x0000_0000_f0f0_f0f0, 28);
    let x = delta_swap(x, 0x0000_cccc_0000_cccc, 14);
    delta_swap(x, 0x00aa_00aa_00aa_00aa, 7)
}

/// `(row, col) -> (row, 7 - col)`: reverses the bits of every byte.
#[inline(always)]
fn reverse_columns(x: u64) -> u64 {
    let x = ((x >> 4) & 0x0f0f_0f0f_0f0f_0f0f) | ((x & 0x0f0f_0f0f_0f0f_0f0f) << 4);
    let x = ((x >> 2) & 0x3333_3333_3333_3333) | ((x & 0x3333_3333_3333_3333) << 2);
    ((x >> 1) & 0x5555_5555_5555_5555) | ((x & 0x5555_5555_5555_5555) << 1)
}

/// Shifts grid row `r` right by `7 - r` columns, in three stages (by 4, 2, 1)
/// over the rows whose shift has that bit. Only valid when every bit of row `r`
/// is in a column `>= 7 - r`, so that no bit leaves its row.
#[inline(always)]
fn shift_rows_to_apex(x: u64) -> u64 {
    const BY_4: u64 = 0x0000_0000_ffff_ffff; // rows 0..=3: shifts 7, 6, 5, 4
    const BY_2: u64 = 0x0000_ffff_0000_ffff; // rows 0, 1, 4, 5: shifts 7, 6, 3, 2
    const BY_1: u64 = 0x00ff_00ff_00ff_00ff; // rows 0, 2, 4, 6: shifts 7, 5, 3, 1
    let x = (x & !BY_4) | ((x & BY_4) >> 4);
    let x = (x & !BY_2) | ((x & BY_2) >> 2);
    (x & !BY_1) | ((x & BY_1) >> 1)
}

/// The symmetry group of a board shape, as bit transforms of whole boards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Symmetries {
    /// The 7 x 7 cross boards: the 8 symmetries of the square.
    Square,
    /// A triangle of the given side: the 6 symmetries of the triangle.
    Triangle(u32),
    /// The diamond: the 8 symmetries of the square about its centre hole, by
    /// table on its sheared layout.
    Diamond,
}

/// Upper bound of the group order.
pub(crate) const MAX_GROUP: usize = 8;

impl Symmetries {
    pub(crate) fn of(shape: BoardShape) -> Symmetries {
        match shape {
            BoardShape::English | BoardShape::French => Symmetries::Square,
            BoardShape::Triangle(side) => Symmetries::Triangle(side),
            BoardShape::Diamond => Symmetries::Diamond,
        }
    }

    pub(crate) fn order(self) -> usize {
        match self {
            Symmetries::Square | Symmetries::Diamond => 8,
            Symmetries::Triangle(_) => 6,
        }
    }

    /// The images of `board` under the group, the identity first; a triangle's
    /// last two entries repeat the identity.
    #[inline(always)]
    pub(crate) fn images(self, board: u64) -> [u64; MAX_GROUP] {
        match self {
            Symmetries::Square => {
                // On the 7 x 7 square in the corner of the grid: a half turn is
                // the reversal of all 64 bits moved back by one row and column,
                // a flip of the rows is the byte reversal moved back by one row.
                let half_turn = |x: u64| x.reverse_bits() >> 9;
                let flip_rows = |x: u64| x.swap_bytes() >> 8;
                let t = transpose(board);
                let v = flip_rows(board);
                let tv = flip_rows(t);
                [
                    board,
                    half_turn(board),
                    v,
                    half_turn(v),
                    t,
                    half_turn(t),
                    tv,
                    half_turn(tv),
                ]
            }
            Symmetries::Triangle(side) => {
                // Two reflections generate the group: `mirror` keeps the rows,
                // `(r, c) -> (r, r - c)`; `reflect` keeps the lines parallel to
                // the left edge, `(r, c) -> (side-1-c, side-1-r)`, a reflection
                // of the grid in its anti-diagonal moved back into the corner.
                let corner = 9 * (GRID - side);
                let mirror = |x: u64| shift_rows_to_apex(reverse_columns(x));
                let reflect = |x: u64| transpose(x).reverse_bits() >> corner;
                let m = mirror(board);
                let a = reflect(board);
                let am = reflect(m);
                [board, m, a, mirror(a), am, mirror(am), board, board]
            }
            Symmetries::Diamond => diamond_tables().images(board),
        }
    }
}

/// The diamond's symmetries as tables: for byte `k` of a board with value
/// `v`, the images of its bits under every symmetry (one cache line), so a
/// board's images are eight lookups or'ed together. Bit permutations have no
/// cheap shift form on the sheared layout.
struct DiamondTables(Box<[[Images; 256]; 8]>);

fn diamond_tables() -> &'static DiamondTables {
    static TABLES: OnceLock<DiamondTables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let shape = BoardShape::Diamond;
        // About the centre (4, 4): (x, y) to (±x, ±y) and (±y, ±x), in the
        // order of the square's images: identity, half turn, rows flipped,
        // columns flipped, transposed, and the three others.
        type PlaneMap = fn(i32, i32) -> (i32, i32);
        let maps: [PlaneMap; MAX_GROUP] = [
            |x, y| (x, y),
            |x, y| (-x, -y),
            |x, y| (x, -y),
            |x, y| (-x, y),
            |x, y| (y, x),
            |x, y| (-y, -x),
            |x, y| (-y, x),
            |x, y| (y, -x),
        ];
        let mut image_of_bit = [[0u64; MAX_GROUP]; 64];
        for (row, col) in hole_cells(shape) {
            let (x, y) = (col as i32 - 4, row as i32 - 4);
            for (i, map) in maps.iter().enumerate() {
                let (mx, my) = map(x, y);
                let to = cell_bit(shape, (my + 4) as u32, (mx + 4) as u32);
                image_of_bit[cell_bit(shape, row, col) as usize][i] = 1 << to;
            }
        }
        let mut tables = Box::new([[Images::default(); 256]; 8]);
        for (k, table) in tables.iter_mut().enumerate() {
            for (value, images) in table.iter_mut().enumerate() {
                for bit in bits(value as u64) {
                    let of_bit = &image_of_bit[8 * k + bit as usize];
                    for (image, of) in images.0.iter_mut().zip(of_bit) {
                        *image |= of;
                    }
                }
            }
        }
        DiamondTables(tables)
    })
}

impl DiamondTables {
    #[inline(always)]
    fn images(&self, board: u64) -> [u64; MAX_GROUP] {
        let mut out = [0u64; MAX_GROUP];
        for (k, table) in self.0.iter().enumerate() {
            let images = &table[(board >> (8 * k)) as usize & 0xff].0;
            for i in 0..MAX_GROUP {
                out[i] |= images[i];
            }
        }
        out
    }
}

/// The group elements allowed for canonical boards and the smallest image
/// among them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Canonicalizer {
    pub(crate) symmetries: Symmetries,
    /// Per group element: 0 when it is used, all ones when it is not, so that
    /// `image | pad` drops out of the minimum without a branch.
    pads: [u64; MAX_GROUP],
    pub(crate) identity_only: bool,
}

/// The images of one board under the whole group, on one cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct Images(pub(crate) [u64; MAX_GROUP]);

impl Canonicalizer {
    /// The subgroup of `symmetries` that maps `fixed` (a board) to itself.
    pub(crate) fn fixing(symmetries: Symmetries, fixed: u64) -> Canonicalizer {
        let images = symmetries.images(fixed);
        let mut pads = [u64::MAX; MAX_GROUP];
        for (i, pad) in pads.iter_mut().enumerate().take(symmetries.order()) {
            if images[i] == fixed {
                *pad = 0;
            }
        }
        let identity_only = pads[1..].iter().all(|&p| p == u64::MAX);
        Canonicalizer {
            symmetries,
            pads,
            identity_only,
        }
    }

    /// Only the identity: no reduction.
    pub(crate) fn identity(symmetries: Symmetries) -> Canonicalizer {
        let mut pads = [u64::MAX; MAX_GROUP];
        pads[0] = 0;
        Canonicalizer {
            symmetries,
            pads,
            identity_only: true,
        }
    }

    /// The number of group elements in use.
    pub(crate) fn order(&self) -> usize {
        self.pads.iter().filter(|&&p| p == 0).count()
    }

    /// The group elements in use, as indices into [`Symmetries::images`].
    pub(crate) fn elements(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_GROUP).filter(|&i| self.pads[i] == 0)
    }

    /// The images of `board` under the whole group.
    #[inline(always)]
    pub(crate) fn images(&self, board: u64) -> Images {
        Images(self.symmetries.images(board))
    }

    /// The canonical form of `board ^ change`, from the images of both: every
    /// symmetry permutes bits, so the image of `board ^ change` is the xor of
    /// the images.
    #[inline(always)]
    pub(crate) fn canonical_after(&self, board: &Images, change: &Images) -> u64 {
        let mut best = u64::MAX;
        for i in 0..MAX_GROUP {
            best = best.min((board.0[i] ^ change.0[i]) | self.pads[i]);
        }
        best
    }

    /// The smallest image of `board` under the elements in use.
    #[inline(always)]
    pub(crate) fn canonical(&self, board: u64) -> u64 {
        if self.identity_only {
            return board;
        }
        let images = self.symmetries.images(board);
        let mut best = board;
        for (image, pad) in images.iter().zip(&self.pads).skip(1) {
            best = best.min(image | pad);
        }
        best
    }
}

// ---- parity invariants ----

/// A basis of the hole sets `w` that every jump meets in an even number of
/// holes (0 or 2 of its 3). A jump flips its three holes, so it keeps the parity
/// of `|board & w|`: the parities are invariants of the game. For the cross
/// boards they are the classical position classes ("rule of three" on the
/// diagonals); here they are found for any board by Gaussian elimination over
/// GF(2): the basis spans the null space of the matrix whose rows are the jumps.
pub(crate) fn parity_invariants(holes: u64, jumps: &[Jump]) -> Vec<u64> {
    // Reduced row echelon form: (pivot bit, row); a pivot bit is set in its own
    // row only.
    let mut rows: Vec<(u32, u64)> = Vec::new();
    for jump in jumps {
        let mut v = jump.mask();
        for &(pivot, row) in &rows {
            if v >> pivot & 1 == 1 {
                v ^= row;
            }
        }
        if v != 0 {
            let pivot = v.trailing_zeros();
            for (_, row) in rows.iter_mut() {
                if *row >> pivot & 1 == 1 {
                    *row ^= v;
                }
            }
            rows.push((pivot, v));
        }
    }
    let pivots: u64 = rows.iter().map(|&(p, _)| 1u64 << p).sum();
    // One basis vector per free hole f: f itself and the pivots whose row has f.
    bits(holes & !pivots)
        .map(|free| {
            rows.iter()
                .filter(|&&(_, row)| row >> free & 1 == 1)
                .fold(1u64 << free, |w, &(pivot, _)| w | 1 << pivot)
        })
        .collect()
}

/// The invariant parities of `board`, one bit per basis vector.
pub(crate) fn parity_signature(invariants: &[u64], board: u64) -> u64 {
    invariants.iter().enumerate().fold(0, |sig, (i, &w)| {
        sig | u64::from((board & w).count_ones() & 1) << i
    })
}
