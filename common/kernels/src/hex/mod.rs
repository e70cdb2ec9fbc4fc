//! Hex (Project Euler 1018): the number `H(N)` of Hex games on an `N x N` board
//! modulo a prime.
//!
//! Let `C_k` be the number of `k`-cell sets of the `M = N^2` cells that contain a
//! top-bottom path. Every game count follows from `C_0..C_ceil(M/2)` ([`game_count`]),
//! and by the Hex theorem `C_k + C_(M-k) = binom(M, k)`, so only the degrees up to
//! `floor(M/2)` are computed. They come from a cell-by-cell frontier sweep: a state
//! labels the `N` most recently decided cells (empty, top piece, other pieces), and
//! every state carries a polynomial in `x` truncated at degree `floor(M/2)` whose
//! coefficient of `x^k` counts the ways to reach it with `k` occupied cells.
//!
//! The sweep has `N (N - 1)` cell steps (the top row is decided at once, in
//! [`HexGraph::initial_vector`]); step `s` decides the cell `(1 + (s-1)/N, (s-1) % N)`.
//! [`HexGraph::step_range`] is the unit of the distributed `cell-step` plan, and
//! [`HexGraph::sweep`] runs all steps on local threads.
//!
//! The `points` plan: [`HexGraph::evaluate_points`] is the untruncated scalar sweep
//! at up to [`POINTS_PER_PASS`] points per pass, [`points_layout`] says which points
//! (`K` unknowns, spares and a check point), [`solve_crossings`] solves `C_0..=C_M`
//! from the values and checks them. [`exact_primes`], [`exact_crossings`] (CRT)
//! and [`exact_game_count`] give the exact `H(N)`. [`known_state_count`] and
//! [`HexGraph::memory_bytes`] size a job without or with the graph.
//!
//! The graph stores per column and target only the sources besides the target
//! itself (about one per target) and a byte of flags: about 120 bytes per state
//! at side 16 (5.1 million states, 0.6 GB).
//!
//! Speed: a cell step only changes the occupancy of one frontier position, so the
//! sweep takes the cells of a row in blocks of columns and carries each group of
//! states (same occupancy outside the block) through all steps of the block in a
//! private buffer; the whole vectors are read and written once per block instead
//! of once per cell. Polynomials only hold the degrees a state can reach (bounds
//! from its occupied cells and its row), and residues are added eight at a time
//! with AVX2 where the CPU has it, reduced by one conditional subtraction.

mod codec;
mod eval;
mod exact;
mod frontier;
mod graph;
mod graph_file;
mod group_pass;
mod kernel;
mod parts;
mod points;
mod spilled;
mod states;
mod sweep;
mod tiles;

#[cfg(test)]
mod tests;

use crate::modular::{inv_mod, is_prime, mul_mod};
use crate::{Control, Result, invalid};

pub use graph::BUILD_WORK;
use graph::Block;

pub use codec::{check_polynomials, decode_polynomials, encode_polynomials};
pub use eval::{POINTS_PER_PASS, PassPoint, Resume};
pub use exact::{exact_crossings, exact_game_count, exact_primes};
pub use parts::{MAX_GRAPH_PARTS, build_graph_part, graph_part_count, max_graph_parts};
pub use points::{PointsLayout, SPARE_POINTS, full_crossings, points_layout, solve_crossings};
pub use spilled::{PassOptions, SpilledGraph};

/// Largest supported board side. Sides up to 16 pack a frontier state in a
/// `u64`, larger ones in a `u128`; beyond 20 the graph alone would need some
/// hundred gigabytes.
pub const MAX_SIDE: u32 = 20;

/// Largest side whose states fit a `u64` (16 labels of 4 bits).
pub const NARROW_SIDES: u32 = 16;

/// The modulus of the Project Euler problem.
pub const DEFAULT_MODULUS: u32 = 1_000_000_007;

/// The number of frontier states of a side (what [`HexGraph::num_states`] gives),
/// for sides 1 to 18, without building the graph: 1, 3, 9, 25, 69, 189, ...
/// (each side's graph was built to count them; see the ignored test
/// `hex_large_state_counts`).
pub fn known_state_count(side: u32) -> Option<u64> {
    const COUNTS: [u64; 18] = [
        1, 3, 9, 25, 69, 189, 518, 1422, 3915, 10813, 29964, 83304, 232323, 649845, 1822824,
        5126520, 14453451, 40843521,
    ];
    COUNTS.get((side as usize).wrapping_sub(1)).copied()
}

/// The number of frontier states of a side: [`known_state_count`] where known,
/// beyond that the term the known ones follow. Every known count equals
/// `T(side + 1, 2)` of the Motzkin triangle (OEIS A005322: lattice paths of
/// `side + 1` steps up, down or level, never below 0, ending at height 2), so
/// the estimate takes that term: 115,668,105 states at side 19 and 328,233,969
/// at 20.
pub fn estimated_state_count(side: u32) -> u64 {
    known_state_count(side).unwrap_or_else(|| motzkin_height_two(side as usize + 1))
}

/// `T(n, 2)` of the Motzkin triangle, by rows.
fn motzkin_height_two(n: usize) -> u64 {
    let mut row = vec![1u64];
    for len in 1..=n {
        row = (0..=len)
            .map(|k| {
                let at = |j: Option<usize>| j.and_then(|j| row.get(j)).copied().unwrap_or(0);
                at(k.checked_sub(1)) + at(Some(k)) + at(Some(k + 1))
            })
            .collect();
    }
    row.get(2).copied().unwrap_or(0)
}

/// Checks that `side` is in `1..=MAX_SIDE` and that `modulus` is a prime with
/// `side^2 < modulus < 2^31`.
pub fn validate(side: u32, modulus: u32) -> Result<()> {
    validate_side(side)?;
    validate_modulus(side, modulus)
}

fn validate_side(side: u32) -> Result<()> {
    if !(1..=MAX_SIDE).contains(&side) {
        return Err(invalid!(
            "side must be between 1 and {MAX_SIDE}, got {side}"
        ));
    }
    Ok(())
}

fn validate_modulus(side: u32, modulus: u32) -> Result<()> {
    let cells = side * side;
    if modulus >= 1 << 31 {
        return Err(invalid!(
            "modulus must be below 2^31 = 2147483648, got {modulus}"
        ));
    }
    if modulus <= cells {
        return Err(invalid!(
            "modulus must be greater than the number of cells {side}^2 = {cells}, got {modulus}"
        ));
    }
    if !is_prime(u64::from(modulus)) {
        return Err(invalid!("modulus must be a prime, got {modulus}"));
    }
    Ok(())
}

/// The frontier graph of one board side: all states and, for every column, the
/// gather lists of the cell step (each target state with its source states; the
/// decided cell is occupied exactly when the target's label at that column is
/// non-zero).
///
/// States are numbered in the order a breadth-first search from the top row
/// finds them, which does not depend on the number of threads nor on the block
/// width: the `2^side - 1` top-row states come first (by their set of occupied
/// columns read as a binary number), and every vector of
/// [`HexGraph::initial_vector`] and [`HexGraph::step_range`] is in this order.
#[derive(Clone)]
pub struct HexGraph {
    side: u32,
    stride: usize,
    num_states: usize,
    /// Per state: occupied positions (low 32 bits), top-piece positions (high
    /// 32); the packed states themselves are not kept.
    masks: Vec<u64>,
    /// The same masks in 32 bits for the polynomial sweep (sides up to 16).
    narrow_masks: Vec<u32>,
    /// The gather lists, by blocks of consecutive columns.
    blocks: Vec<Block>,
    /// Per column: its block and its index inside the block.
    col_block: Vec<(usize, usize)>,
}

impl HexGraph {
    /// Builds all states of an `side x side` board and the transitions of every
    /// column.
    pub fn build(side: u32) -> Result<HexGraph> {
        Self::build_with(side, 1, graph::default_block_width(side as usize))
    }

    /// [`HexGraph::build`] on up to `threads` threads.
    pub fn build_parallel(side: u32, threads: usize) -> Result<HexGraph> {
        Self::build_with(side, threads, graph::default_block_width(side as usize))
    }

    /// [`HexGraph::build_parallel`] that counts [`BUILD_WORK`] units of work
    /// on `control` as it goes (a build of a large side takes long enough to
    /// need progress) and stops soon after `control` is cancelled.
    pub fn build_controlled(side: u32, threads: usize, control: &Control) -> Result<HexGraph> {
        let width = graph::default_block_width(side as usize);
        Self::build_inner(side, threads, width, control)
    }

    /// [`HexGraph::build`] on up to `threads` threads, with `width` columns per
    /// block of the sweep (see [`HexGraph::sweep`]). The graph, every vector and
    /// every result are the same whatever the two numbers.
    pub fn build_with(side: u32, threads: usize, width: usize) -> Result<HexGraph> {
        Self::build_inner(side, threads, width, &Control::new())
    }

    fn build_inner(side: u32, threads: usize, width: usize, control: &Control) -> Result<HexGraph> {
        validate_side(side)?;
        let (width, threads) = (width.clamp(1, side as usize), threads.max(1));
        let built = graph::build(side as usize, width, threads, control)?;
        Ok(HexGraph {
            side,
            stride: (side * side / 2) as usize + 1,
            num_states: built.num_states,
            masks: built.masks,
            narrow_masks: built.narrow_masks,
            blocks: built.blocks,
            col_block: built.col_block,
        })
    }

    pub fn side(&self) -> u32 {
        self.side
    }

    /// `M = side^2`.
    pub fn cells(&self) -> u32 {
        self.side * self.side
    }

    /// Number of frontier states (1, 3, 9, 25, 69, ... for side 1, 2, 3, 4, 5, ...).
    pub fn num_states(&self) -> usize {
        self.num_states
    }

    /// Bytes held by the graph: states, masks, and per block the orders of the
    /// states and the gather lists of its columns.
    pub fn memory_bytes(&self) -> usize {
        8 * self.masks.capacity()
            + 4 * self.narrow_masks.capacity()
            + self.blocks.iter().map(Block::bytes).sum::<usize>()
            + 16 * self.col_block.capacity()
    }

    /// Coefficients per state: `floor(M/2) + 1`.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Length of a frontier vector: `num_states * stride`.
    pub fn vector_len(&self) -> usize {
        self.num_states * self.stride
    }

    /// Number of cell steps, `side * (side - 1)`: one per cell of rows `1..side`.
    pub fn num_steps(&self) -> usize {
        (self.side * (self.side - 1)) as usize
    }

    /// Number of transitions (source, target pairs) of the cell step `step`
    /// (1-based) that the sweep follows: every target from itself, and the
    /// states whose occupancy of the decided cell flips into it (transitions out
    /// of states that cannot occur before the step are left out).
    pub fn num_transitions(&self, step: usize) -> usize {
        let (block, j) = self.block_of(step);
        block.cols[j].transitions()
    }

    /// Work units [`HexGraph::sweep`] adds to its [`Control`] in total: one unit per
    /// target state per cell step, that is `num_states * num_steps`.
    pub fn total_work(&self) -> u64 {
        self.num_states() as u64 * self.num_steps() as u64
    }

    /// The frontier vector after the top row: every non-empty set of `j` top-row
    /// cells is a state whose polynomial is `x^j`. Length `num_states * stride`.
    pub fn initial_vector(&self, modulus: u32) -> Vec<u32> {
        let mut v = vec![0u32; self.vector_len()];
        let one = 1 % modulus;
        for (i, &m) in self.masks.iter().enumerate() {
            if let Some(degree) = graph::top_row_degree(m) {
                let degree = degree as usize;
                if degree < self.stride {
                    v[i * self.stride + degree] = one;
                }
            }
        }
        v
    }
}

impl std::fmt::Debug for HexGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HexGraph")
            .field("side", &self.side)
            .field("states", &self.num_states)
            .field("stride", &self.stride)
            .field("blocks", &self.blocks.len())
            .finish_non_exhaustive()
    }
}

/// `H(N) mod p` from `C_0..C_floor(M/2) mod p` (at least `floor(M/2) + 1` values;
/// more are ignored), with `p_k = C_k / binom(M, k)`, `p_(M-k) = 1 - p_k` and
/// `H = sum_{k < ceil(M/2)} M! (M-2k) / (M-2k-1)! (p_(k+1) - p_k)`.
///
/// Panics when `crossings` is too short or `modulus <= M` (see [`validate`]).
pub fn game_count(side: u32, crossings: &[u32], modulus: u32) -> u32 {
    let m = (side * side) as usize;
    let half = m / 2;
    assert!(
        crossings.len() > half,
        "game_count needs C_0..C_{half}, got {} values",
        crossings.len()
    );
    assert!(
        modulus as usize > m,
        "modulus must exceed the number of cells"
    );
    let q = u64::from(modulus);
    let mut fact = vec![1u64; m + 1];
    for i in 1..=m {
        fact[i] = mul_mod(fact[i - 1], i as u64, q);
    }
    let mut inv_fact = vec![1u64; m + 1];
    inv_fact[m] = inv_mod(fact[m], q).expect("M! is invertible modulo a prime above M");
    for i in (1..=m).rev() {
        inv_fact[i - 1] = mul_mod(inv_fact[i], i as u64, q);
    }
    // p_k = C_k k! (M-k)! / M!
    let ceil_half = m.div_ceil(2);
    let mut prob = vec![0u64; ceil_half + 1];
    for (k, p) in prob.iter_mut().enumerate().take(half + 1) {
        let c = u64::from(crossings[k]) % q;
        *p = mul_mod(
            mul_mod(c, fact[k], q),
            mul_mod(fact[m - k], inv_fact[m], q),
            q,
        );
    }
    if ceil_half > half {
        // M odd: p_(half+1) = 1 - p_(M-half-1) = 1 - p_half.
        prob[ceil_half] = (1 + q - prob[half]) % q;
    }
    let mut total = 0u64;
    for k in 0..ceil_half {
        // M! / (M-2k-1)! = M (M-1) ... (M-2k), times (M - 2k).
        let falling = mul_mod(fact[m], inv_fact[m - 2 * k - 1], q);
        let weight = mul_mod(falling, (m - 2 * k) as u64, q);
        let diff = (prob[k + 1] + q - prob[k]) % q;
        total = (total + mul_mod(weight, diff, q)) % q;
    }
    total as u32
}

/// The result of [`count_games`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HexAnswer {
    pub side: u32,
    pub modulus: u32,
    pub states: usize,
    /// `C_0..C_floor(M/2)` modulo `modulus`.
    pub crossings: Vec<u32>,
    /// `H(side)` modulo `modulus`.
    pub games: u32,
}

/// Validates, builds the graph, sweeps it on `threads` threads and applies the game
/// formula.
pub fn count_games(
    side: u32,
    modulus: u32,
    threads: usize,
    control: &Control,
) -> Result<HexAnswer> {
    validate(side, modulus)?;
    let graph = HexGraph::build_parallel(side, threads)?;
    control.check()?;
    let crossings = graph.sweep(modulus, threads, control)?;
    let games = game_count(side, &crossings, modulus);
    Ok(HexAnswer {
        side,
        modulus,
        states: graph.num_states(),
        crossings,
        games,
    })
}
