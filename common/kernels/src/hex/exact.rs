//! Exact counts: the residues of `C_k` modulo several primes joined by the
//! Chinese remainder theorem, and `H(N)` from the exact `C_k` in integer
//! arithmetic.

use num_bigint::BigUint;

use super::validate;
use crate::modular::{inv_mod, is_prime};
use crate::{Error, Result, invalid};

/// `binom(m, k)` for `k = 0..=m`, exactly.
fn binomials(m: usize) -> Vec<BigUint> {
    let mut row = Vec::with_capacity(m + 1);
    row.push(BigUint::from(1u32));
    for k in 1..=m {
        let next = &row[k - 1] * BigUint::from(m - k + 1) / BigUint::from(k);
        row.push(next);
    }
    row
}

/// Primes below 2^31, from the largest (2^31 - 1) down, as many as it takes for
/// their product to exceed `binom(M, floor(M/2))`, the largest `C_k`: then the
/// residues of every `C_k` modulo these primes determine it. One prime up to
/// side 5, nine for side 16.
pub fn exact_primes(side: u32) -> Vec<u32> {
    let m = (side * side) as usize;
    let bound = &binomials(m)[m / 2];
    let mut product = BigUint::from(1u32);
    let mut primes = Vec::new();
    let mut candidate: u32 = (1 << 31) - 1;
    while &product <= bound {
        while !is_prime(u64::from(candidate)) {
            candidate -= 2;
        }
        primes.push(candidate);
        product *= BigUint::from(candidate);
        candidate -= 2;
    }
    primes
}

fn internal(message: String) -> Error {
    Error::Internal(message)
}

/// `C_0..=C_M` exactly from their residues: `crossings_per_prime[i]` is the full
/// list `C_0..=C_M mod primes[i]` (as [`super::solve_crossings`] gives it).
///
/// The primes must be distinct, valid moduli for the side (see
/// [`super::validate`]) and their product must exceed `binom(M, floor(M/2))`.
/// The result is checked: `C_k = 0` for `k < N`, `C_N = (N + 1) 2^(N - 2)`
/// (the shortest paths), `0 <= C_k <= binom(M, k)`,
/// `C_k + C_(M-k) = binom(M, k)`, and `C_k / binom(M, k)` never decreases with
/// `k` (a random set of more cells contains a path at least as often). A failed
/// check is an [`Error::Internal`] (a wrong residue somewhere).
pub fn exact_crossings(
    side: u32,
    primes: &[u32],
    crossings_per_prime: &[Vec<u32>],
) -> Result<Vec<BigUint>> {
    let m = (side * side) as usize;
    if primes.is_empty() || primes.len() != crossings_per_prime.len() {
        return Err(invalid!(
            "exact counts need one list of residues per prime, got {} primes and {} lists",
            primes.len(),
            crossings_per_prime.len()
        ));
    }
    for (i, &p) in primes.iter().enumerate() {
        validate(side, p)?;
        if primes[..i].contains(&p) {
            return Err(invalid!("the prime {p} is given twice"));
        }
        let list = &crossings_per_prime[i];
        if list.len() != m + 1 {
            return Err(invalid!(
                "the residues modulo {p} hold {} counts, not C_0..C_{m}",
                list.len()
            ));
        }
        if let Some(&r) = list.iter().find(|&&r| r >= p) {
            return Err(invalid!("{r} is not a residue modulo {p}"));
        }
    }
    let binom = binomials(m);
    let product = primes
        .iter()
        .fold(BigUint::from(1u32), |acc, &p| acc * BigUint::from(p));
    if product <= binom[m / 2] {
        return Err(invalid!(
            "the product of the {} primes does not exceed binom({m}, {}): the counts are not determined",
            primes.len(),
            m / 2
        ));
    }
    // Incremental CRT: c = c mod (p_0 ... p_(i-1)) extended by one prime at a time.
    let mut counts: Vec<BigUint> = crossings_per_prime[0]
        .iter()
        .map(|&r| BigUint::from(r))
        .collect();
    let mut modulus = BigUint::from(primes[0]);
    for (&p, residues) in primes.iter().zip(crossings_per_prime).skip(1) {
        let q = u64::from(p);
        let big_q = BigUint::from(p);
        let m_mod = residue(&modulus, &big_q);
        let m_inv = inv_mod(m_mod, q).expect("distinct primes are coprime");
        for (c, &r) in counts.iter_mut().zip(residues) {
            let current = residue(c, &big_q);
            let t = (u64::from(r) + q - current) % q * m_inv % q;
            *c += &modulus * BigUint::from(t);
        }
        modulus *= big_q;
    }
    // The checks.
    let zero = BigUint::from(0u32);
    // The shortest paths: one cell a row, each next cell one of the two below
    // the last, (N + 1) 2^(N - 2) of them (1 on a single cell).
    let n = side as usize;
    let shortest = if n < 2 {
        BigUint::from(1u32)
    } else {
        BigUint::from(n + 1) << (n - 2)
    };
    if counts[n] != shortest {
        return Err(internal(format!(
            "exact counts: C_{n} is {}, not the (N + 1) 2^(N - 2) = {shortest} shortest paths (a wrong residue?)",
            counts[n]
        )));
    }
    for k in 0..=m {
        if counts[k] > binom[k] {
            return Err(internal(format!(
                "exact counts: C_{k} exceeds binom({m}, {k}) (a wrong residue?)"
            )));
        }
        if &counts[k] + &counts[m - k] != binom[k] {
            return Err(internal(format!(
                "exact counts: C_{k} + C_{} is not binom({m}, {k}) (a wrong residue?)",
                m - k
            )));
        }
        if k < side as usize && counts[k] != zero {
            return Err(internal(format!(
                "exact counts: C_{k} is not 0 although a path needs {side} cells"
            )));
        }
        if k < m && &counts[k + 1] * BigUint::from(k + 1) < &counts[k] * BigUint::from(m - k) {
            return Err(internal(format!(
                "exact counts: C_{} / binom({m}, {}) is below C_{k} / binom({m}, {k}) (a wrong residue?)",
                k + 1,
                k + 1
            )));
        }
    }
    Ok(counts)
}

fn residue(value: &BigUint, q: &BigUint) -> u64 {
    (value % q).iter_u64_digits().next().unwrap_or(0)
}

/// `H(N)` exactly from the exact `C_0..=C_ceil(M/2)` (more values are ignored):
/// White wins on move `2k+1` in
/// `G_(2k+1) = ((k+1)! C_(k+1) - k! (M-k) C_k) (M-k-1)! / (M-2k-1)!` games, Black
/// on move `2k+2` in `(M-2k-1) G_(2k+1)`, so `H = sum_(k < ceil(M/2)) (M-2k) G_(2k+1)`.
///
/// Panics when `crossings` is too short or the counts are not those of a board
/// (`G_(2k+1)` would be negative); [`exact_crossings`] checks both.
pub fn exact_game_count(side: u32, crossings: &[BigUint]) -> BigUint {
    let m = (side * side) as usize;
    let ceil_half = m.div_ceil(2);
    assert!(
        crossings.len() > ceil_half,
        "exact_game_count needs C_0..C_{ceil_half}, got {} values",
        crossings.len()
    );
    let mut fact = Vec::with_capacity(m + 1);
    fact.push(BigUint::from(1u32));
    for i in 1..=m {
        let next = &fact[i - 1] * BigUint::from(i);
        fact.push(next);
    }
    let mut total = BigUint::from(0u32);
    for k in 0..ceil_half {
        let gained = &fact[k + 1] * &crossings[k + 1];
        let had = &fact[k] * BigUint::from(m - k) * &crossings[k];
        assert!(
            gained >= had,
            "the counts C_{k}, C_{} are not those of a board",
            k + 1
        );
        // (M-k-1)! / (M-2k-1)!: the ordered choices of the k black stones.
        let black = &fact[m - k - 1] / &fact[m - 2 * k - 1];
        total += (gained - had) * black * BigUint::from(m - 2 * k);
    }
    total
}
