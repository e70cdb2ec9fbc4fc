//! The coordinator's side of the `points` plan: which points the shards evaluate
//! the crossing polynomial `P(x) = sum_{k=0}^{M} C_k x^k` at, and how the counts
//! `C_k` are solved from the values.
//!
//! Most of `P` is known: `C_k = 0` for `k < N` (a top-bottom path has at least
//! `N` cells), `C_(M-k) = binom(M, k) - C_k` (the Hex theorem) and, for even `M`,
//! `C_(M/2) = binom(M, M/2) / 2`. With `L = floor((M-1)/2)` the unknowns are
//! `C_N..=C_L`, `K = L - N + 1` of them (none for sides 1 and 2), and
//!
//! `P(x) - known(x) = sum_{k=N}^{L} C_k (x^k - x^(M-k))`,
//!
//! `known(x) = sum_{k=0}^{L} binom(M, k) x^(M-k) + [M even] binom(M, M/2)/2 x^(M/2)`.
//!
//! Each point gives one linear equation mod `p`. Points `x` and `1/x` give
//! proportional equations (`x^M` times the equation at `1/x` is minus the one at
//! `x`), `x = 1` gives `0 = 0`, and nothing guarantees that `K` other points give
//! independent equations: the layout asks for spare points, the solver picks
//! independent equations by elimination, and a last point that it does not use
//! checks the result.

use super::validate;
use crate::modular::{inv_mod, mul_mod};
use crate::{Error, Result, invalid};

/// Spare points of a layout beyond the `K` needed.
pub const SPARE_POINTS: usize = 2;

/// The points at which the shards of a `points` plan evaluate the polynomial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointsLayout {
    pub side: u32,
    /// `K`, the number of unknown counts.
    pub unknowns: usize,
    /// Points beyond `K` that repair a singular choice of `K`.
    pub spares: usize,
    /// `K + spares + 1` distinct points in increasing order: `2, 3, 4, ...`,
    /// skipping a point whose inverse modulo the prime was already taken. The last
    /// one is the check point, which the solver does not use to solve. (Fewer
    /// when the prime is too small to have that many.)
    pub points: Vec<u32>,
}

impl PointsLayout {
    /// The point that verifies the solution, if any.
    pub fn check_point(&self) -> Option<u32> {
        self.points.last().copied()
    }

    /// Passes of the evaluation sweep with `per_pass` points each.
    pub fn passes(&self, per_pass: usize) -> usize {
        self.points.len().div_ceil(per_pass.max(1))
    }
}

/// `M`, `N` and `L`, `K` of a side.
fn unknown_range(side: u32) -> (usize, std::ops::RangeInclusive<usize>) {
    let m = (side * side) as usize;
    let n = side as usize;
    let l = (m - 1) / 2;
    (m, n..=l)
}

/// The layout of a side for the prime `modulus` (assumed valid, see
/// [`super::validate`]). The same for every prime above about 20000, so one
/// layout serves all the primes of an exact count.
pub fn points_layout(side: u32, modulus: u32) -> PointsLayout {
    let (_, range) = unknown_range(side);
    let unknowns = range.count();
    let wanted = unknowns + SPARE_POINTS + 1;
    let q = u64::from(modulus);
    let mut points: Vec<u32> = Vec::with_capacity(wanted);
    let mut x = 2u64;
    while points.len() < wanted && x + 2 <= q {
        let inverse = inv_mod(x, q).unwrap_or(0);
        if !points.contains(&(inverse as u32)) {
            points.push(x as u32);
        }
        x += 1;
    }
    PointsLayout {
        side,
        unknowns,
        spares: SPARE_POINTS,
        points,
    }
}

/// Binomials `binom(m, k) mod q` for `k = 0..=m` (`q` a prime above `m`).
fn binomials(m: usize, q: u64) -> Vec<u64> {
    let mut row = vec![1u64; m + 1];
    for k in 1..=m {
        let inv = inv_mod(k as u64, q).expect("k < q is invertible");
        row[k] = mul_mod(mul_mod(row[k - 1], (m - k + 1) as u64, q), inv, q);
    }
    row
}

/// The known part of the polynomial, coefficients `0..=M` mod `q`.
fn known_coefficients(m: usize, l: usize, q: u64) -> Vec<u64> {
    let binom = binomials(m, q);
    let mut known = vec![0u64; m + 1];
    for k in 0..=l.min(m) {
        if m - k > l {
            known[m - k] = binom[k];
        }
    }
    if m.is_multiple_of(2) && m > 0 {
        let half = inv_mod(2, q).expect("q is odd");
        known[m / 2] = mul_mod(binom[m / 2], half, q);
    }
    known
}

fn eval(coefficients: &[u64], x: u64, q: u64) -> u64 {
    coefficients
        .iter()
        .rev()
        .fold(0, |acc, &c| (mul_mod(acc, x, q) + c) % q)
}

/// `C_0..=C_M mod modulus` from `C_0..=C_floor(M/2)` (`half`, at least that many
/// values; more are ignored) with `C_(M-k) = binom(M, k) - C_k`.
///
/// Panics when `half` is too short or `modulus <= M`.
pub fn full_crossings(side: u32, half: &[u32], modulus: u32) -> Vec<u32> {
    let m = (side * side) as usize;
    assert!(half.len() > m / 2, "full_crossings needs C_0..C_{}", m / 2);
    assert!(
        modulus as usize > m,
        "modulus must exceed the number of cells"
    );
    let q = u64::from(modulus);
    let binom = binomials(m, q);
    let mut full = vec![0u32; m + 1];
    for k in 0..=m / 2 {
        let c = u64::from(half[k]) % q;
        full[k] = c as u32;
        if m - k > m / 2 {
            full[m - k] = ((binom[k] + q - c) % q) as u32;
        }
    }
    full
}

/// The equations of the evaluations: per evaluation, the coefficients of the
/// unknowns and the right-hand side `P(x) - known(x)`.
struct System {
    q: u64,
    m: usize,
    first: usize,
    unknowns: usize,
    known: Vec<u64>,
}

impl System {
    fn new(side: u32, q: u64) -> Self {
        let (m, range) = unknown_range(side);
        let (first, l) = (*range.start(), *range.end());
        System {
            q,
            m,
            first,
            unknowns: range.count(),
            known: known_coefficients(m, l, q),
        }
    }

    /// Row of the evaluation `(x, y)`: `K` coefficients and the right-hand side.
    fn row(&self, x: u64, y: u64) -> Vec<u64> {
        let q = self.q;
        let mut powers = vec![1 % q; self.m + 1];
        for e in 1..=self.m {
            powers[e] = mul_mod(powers[e - 1], x, q);
        }
        let mut row: Vec<u64> = (0..self.unknowns)
            .map(|j| {
                let k = self.first + j;
                (powers[k] + q - powers[self.m - k]) % q
            })
            .collect();
        row.push((y + q - eval(&self.known, x, q)) % q);
        row
    }

    /// Solves the equations of `evals` for the unknowns by Gauss-Jordan
    /// elimination, taking the first usable pivot row of every column. `None`
    /// when they do not determine the unknowns; equations left over that
    /// contradict the others are not reported here (the verification finds them).
    fn solve(&self, evals: &[(u64, u64)]) -> Option<Vec<u64>> {
        let q = self.q;
        let k = self.unknowns;
        let mut rows: Vec<Vec<u64>> = evals.iter().map(|&(x, y)| self.row(x, y)).collect();
        for col in 0..k {
            let pivot = (col..rows.len()).find(|&r| rows[r][col] != 0)?;
            rows.swap(col, pivot);
            let inv = inv_mod(rows[col][col], q).expect("non-zero residues are invertible");
            for v in rows[col][col..].iter_mut() {
                *v = mul_mod(*v, inv, q);
            }
            let (head, tail) = rows.split_at_mut(col);
            let (pivot_row, tail) = tail.split_first_mut().expect("pivot row");
            for row in head.iter_mut().chain(tail.iter_mut()) {
                let f = row[col];
                if f == 0 {
                    continue;
                }
                let minus_f = q - f;
                // Products below 2^62: one reduction per entry.
                for (v, &p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *v = (*v + minus_f * p) % q;
                }
            }
        }
        Some(rows[..k].iter().map(|row| row[k]).collect())
    }

    /// `C_0..=C_M` from the solved unknowns.
    fn coefficients(&self, solution: &[u64]) -> Vec<u64> {
        let q = self.q;
        let mut c = self.known.clone();
        let binom = binomials(self.m, q);
        for (j, &v) in solution.iter().enumerate() {
            let k = self.first + j;
            c[k] = v;
            c[self.m - k] = (binom[k] + q - v) % q;
        }
        c
    }

    /// The evaluations that disagree with the coefficients.
    fn disagreeing(&self, coefficients: &[u64], evals: &[(u64, u64)]) -> Vec<usize> {
        (0..evals.len())
            .filter(|&i| eval(coefficients, evals[i].0, self.q) != evals[i].1)
            .collect()
    }
}

/// Solves `C_0..=C_M mod modulus` from evaluations `(x, P(x) mod modulus)` (any
/// order; normally those of every point of [`points_layout`]).
///
/// The evaluation at the layout's check point (or, when it is missing, at the
/// largest `x`) is set aside; the others are solved by elimination, which skips
/// equations that add nothing (a repeated point, `x = 1`, the inverse of a point
/// already used) as long as enough independent ones are left. Every evaluation,
/// the check point's included, must then agree with the solved polynomial.
///
/// Errors: an invalid side or modulus; fewer than `K + 1` evaluations ("too few
/// evaluations"); "the points do not determine the counts (singular even with
/// spares)"; "the evaluation at x = .. disagrees with the solved counts (a
/// corrupted evaluation?)", naming the evaluation that is wrong when leaving
/// out a single one makes all others agree.
pub fn solve_crossings(side: u32, modulus: u32, evaluations: &[(u32, u32)]) -> Result<Vec<u32>> {
    validate(side, modulus)?;
    let q = u64::from(modulus);
    let system = System::new(side, q);
    let k = system.unknowns;
    if k > 0 && evaluations.len() <= k {
        return Err(invalid!(
            "too few evaluations: {} for {k} unknown counts and a check",
            evaluations.len()
        ));
    }
    let mut evals: Vec<(u64, u64)> = evaluations
        .iter()
        .map(|&(x, y)| (u64::from(x) % q, u64::from(y)))
        .collect();
    if let Some(&(x, y)) = evals.iter().find(|&&(_, y)| y >= q) {
        return Err(invalid!(
            "the evaluation at x = {x} is {y}, not a residue modulo {modulus}"
        ));
    }
    evals.sort_unstable();
    // The check point goes last and is not used to solve.
    let check = points_layout(side, modulus)
        .check_point()
        .and_then(|c| evals.iter().position(|&(x, _)| x == u64::from(c)))
        .unwrap_or(evals.len().saturating_sub(1));
    if !evals.is_empty() {
        let last = evals.len() - 1;
        let checked = evals.remove(check);
        evals.insert(last, checked);
    }
    let solving = &evals[..evals.len().saturating_sub(1)];
    let Some(solution) = system.solve(if k == 0 { &[] } else { solving }) else {
        return Err(invalid!(
            "the points do not determine the counts (singular even with spares): {} evaluations for {k} unknown counts",
            evaluations.len()
        ));
    };
    let coefficients = system.coefficients(&solution);
    let wrong = system.disagreeing(&coefficients, &evals);
    if let Some(&first) = wrong.first() {
        let culprit = locate_corruption(&system, &evals).unwrap_or(first);
        return Err(Error::Internal(format!(
            "the evaluation at x = {} disagrees with the solved counts (a corrupted evaluation?)",
            evals[culprit].0
        )));
    }
    Ok(coefficients.into_iter().map(|c| c as u32).collect())
}

/// The one evaluation without which the others determine the counts and all
/// agree, if there is exactly one.
fn locate_corruption(system: &System, evals: &[(u64, u64)]) -> Option<usize> {
    let mut found = None;
    for i in 0..evals.len() {
        let mut rest = evals.to_vec();
        rest.remove(i);
        let Some(solution) = system.solve(&rest) else {
            continue;
        };
        let coefficients = system.coefficients(&solution);
        if system.disagreeing(&coefficients, &rest).is_empty() {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    found
}
