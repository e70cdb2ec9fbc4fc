//! The series `s = ((1 + E)^2 - O^2) / ((1 - E)^2 - O^2)` of one Walsh character
//! as a quotient of two integer polynomials of small degree.
//!
//! The block signs `w_h(L)` repeat with the period of the Grundy values (34 pins,
//! so 17 steps of `u = t^2`), which makes `E` and `P` (with `O^2 = u P^2`)
//! rational: with `T = 1 - u^q` for a period `q` of their coefficient lists,
//! `T E = R_E` and `T P = R_P` are polynomials. Multiplying numerator and
//! denominator by `T^2` gives
//!
//! `s = ((T + R_E)^2 - u R_P^2) / ((T - R_E)^2 - u R_P^2)`,
//!
//! so each quotient coefficient costs a few dozen operations instead of `m`. All
//! identities are taken modulo `u^len`, and `q` is read off the truncated lists
//! themselves: no periodicity is assumed, a list without a period just keeps
//! `T = 1` and its full length.

/// `s = num / den` modulo `u^len`, with `den[0] = 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fraction {
    pub(super) num: Vec<i64>,
    pub(super) den: Vec<i64>,
}

/// Periods tried for the sign lists (the Grundy period 34 gives 17).
const MAX_PERIOD: usize = 64;

/// `w_h(L) = (-1)^popcount(h & g(L))`.
pub(super) fn sign(grundy: &[u8], character: u32, len: usize) -> i64 {
    if (u32::from(grundy[len]) & character)
        .count_ones()
        .is_multiple_of(2)
    {
        1
    } else {
        -1
    }
}

/// The signed block series of `character` for rows of up to `2 (len - 1)` pins:
/// `E = sum_{j>=1} w(2j) u^j` modulo `u^len` and `P = sum_{j>=0} w(2j+1) u^j`
/// modulo `u^(len-1)`.
pub(super) fn block_series(grundy: &[u8], character: u32, len: usize) -> (Vec<i64>, Vec<i64>) {
    let even = (0..len)
        .map(|j| {
            if j == 0 {
                0
            } else {
                sign(grundy, character, 2 * j)
            }
        })
        .collect();
    let odd = (0..len.saturating_sub(1))
        .map(|j| sign(grundy, character, 2 * j + 1))
        .collect();
    (even, odd)
}

/// The fraction of `character` modulo `u^len` (`len = m + 1`); `grundy` must
/// cover lengths up to `2 (len - 1)`.
pub(super) fn character_fraction(grundy: &[u8], character: u32, len: usize) -> Fraction {
    assert!(
        len >= 1 && grundy.len() > 2 * (len - 1),
        "Grundy table too short"
    );
    let (even, odd) = block_series(grundy, character, len);
    fraction_of(&periodic_form(&even, &odd), len)
}

/// `E` and `P` through a period `q` of their coefficient lists:
/// `R_E = (1 - u^q) E` and `R_P = (1 - u^q) P`, modulo the lists' lengths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PeriodicForm {
    /// `q`, or 0 for `T = 1`.
    pub(super) period: usize,
    even_difference: Vec<i64>,
    odd_difference: Vec<i64>,
}

/// The periodic form of smallest degree of the lists `even` (`E`) and `odd`
/// (`P`).
pub(super) fn periodic_form(even: &[i64], odd: &[i64]) -> PeriodicForm {
    let q = best_period(even, odd);
    PeriodicForm {
        period: q,
        even_difference: difference(even, q),
        odd_difference: difference(odd, q),
    }
}

/// `s = ((T + R_E)^2 - u R_P^2) / ((T - R_E)^2 - u R_P^2)` modulo `u^len`: the
/// quotient series of the character whenever `(1 - u^q) E ≡ R_E (mod u^len)`
/// and `(1 - u^q) P ≡ R_P (mod u^(len-1))`.
pub(super) fn fraction_of(form: &PeriodicForm, len: usize) -> Fraction {
    let q = form.period;
    let mut t = vec![0i64; if q == 0 { 1 } else { q + 1 }];
    t[0] = 1;
    if q > 0 {
        t[q] = -1;
    }
    let re = &form.even_difference;
    let ro = &form.odd_difference;
    let plus = add(&t, re, 1);
    let minus = add(&t, re, -1);
    // u * R_P^2 modulo u^len.
    let mut odd_square = vec![0i64];
    odd_square.extend(mul(ro, ro, len.saturating_sub(1)));
    let num = add(&mul(&plus, &plus, len), &odd_square, -1);
    let den = add(&mul(&minus, &minus, len), &odd_square, -1);
    debug_assert_eq!(den.first(), Some(&1));
    Fraction {
        num: trim(num),
        den: trim(den),
    }
}

/// Index of the last nonzero coefficient of `(1 - u^q) x` (of `x` when `q = 0`).
fn difference_degree(x: &[i64], q: usize) -> Option<usize> {
    (0..x.len()).rev().find(|&j| {
        let earlier = if q > 0 && j >= q { x[j - q] } else { 0 };
        x[j] != earlier
    })
}

/// The `q` (0 for `T = 1`) giving the fraction of smallest degree.
fn best_period(even: &[i64], odd: &[i64]) -> usize {
    let score = |q: usize| {
        let de = difference_degree(even, q).unwrap_or(0);
        let dp = difference_degree(odd, q).map_or(0, |d| 2 * d + 1);
        (2 * q.max(de)).max(dp)
    };
    (1..=MAX_PERIOD.min(even.len().saturating_sub(1)))
        .fold((0, score(0)), |best, q| {
            let s = score(q);
            if s < best.1 { (q, s) } else { best }
        })
        .0
}

/// `(1 - u^q) x` with trailing zeros removed (`x` itself when `q = 0`).
fn difference(x: &[i64], q: usize) -> Vec<i64> {
    let end = difference_degree(x, q).map_or(0, |d| d + 1);
    (0..end)
        .map(|j| x[j] - if q > 0 && j >= q { x[j - q] } else { 0 })
        .collect()
}

/// `a + factor * b`.
fn add(a: &[i64], b: &[i64], factor: i64) -> Vec<i64> {
    let mut out = vec![0i64; a.len().max(b.len())];
    out[..a.len()].copy_from_slice(a);
    for (o, &y) in out.iter_mut().zip(b) {
        *o += factor * y;
    }
    out
}

/// `a * b` modulo `u^len`.
fn mul(a: &[i64], b: &[i64], len: usize) -> Vec<i64> {
    let mut out = vec![0i64; (a.len() + b.len()).saturating_sub(1).min(len)];
    for (i, &x) in a.iter().enumerate().take(out.len()) {
        if x != 0 {
            for (o, &y) in out[i..].iter_mut().zip(b) {
                *o += x * y;
            }
        }
    }
    out
}

fn trim(mut x: Vec<i64>) -> Vec<i64> {
    while x.len() > 1 && x.last() == Some(&0) {
        x.pop();
    }
    x
}
