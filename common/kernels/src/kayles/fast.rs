//! The fast path: every coefficient `c_h(0..=m) mod M` of a character in
//! `O(m log m)`, by power-series arithmetic.
//!
//! The quotient `s` comes from its short linear recurrence (the fraction of
//! `rational`, `O(m)` with a few dozen terms per coefficient), the root from
//! Newton's iteration on exact convolutions (`newton`, `ntt`). Both run in the
//! working modulus `Q = 2M = 2^(b+1+d) 5^d` when it is below `2^63` (then the
//! root comes out modulo `M` by the halving rule); for larger `M` they run
//! modulo `2^(b+1+d)` (root modulo `2^(b+d)`) and modulo `5^d` separately, and
//! the two roots join by the CRT into `c_h(k) mod M`.

use super::newton::{self, RootModuli};
use super::ntt::{Convolution, Reducer};
use super::rational::{self, Fraction};
use super::{Crt, character_count, character_values, combine, grundy, validate};
use crate::{Control, Error, Result, invalid};

/// Block lengths whose signs fix the periodic form of a fraction; the rest of
/// the lists is checked against it.
const FRACTION_PREFIX: usize = 2048;

/// Coefficients of the quotient between two polls of the control.
const QUOTIENT_POLL: usize = 1 << 16;

/// One coprime part of the working modulus with its transforms.
#[derive(Debug)]
struct Part {
    moduli: RootModuli,
    conv: Convolution,
}

/// What every character of one job `(pins, digits)` shares on the fast path.
#[derive(Debug)]
pub(super) struct FastPlan {
    digits: u32,
    bits: u32,
    /// `m + 1` coefficients per character.
    len: usize,
    grundy: Vec<u8>,
    parts: Vec<Part>,
}

impl FastPlan {
    /// The plan of the job; `threads` threads per convolution (one per prime
    /// at most).
    pub(super) fn new(pins: u64, digits: u32, threads: usize) -> Result<FastPlan> {
        validate(pins, digits)?;
        let pins = usize::try_from(pins).map_err(|_| invalid!("pins too large"))?;
        let grundy = grundy::grundy_values(pins);
        let bits = grundy::character_bits(&grundy);
        let len = pins / 2 + 1;
        let size = newton::max_transform_size(len);
        let modulus = (1u128 << bits) * 10u128.pow(digits);
        let squares: Vec<u64> = if 2 * modulus < 1 << 63 {
            vec![2 * modulus as u64]
        } else {
            vec![1u64 << (bits + 1 + digits), 5u64.pow(digits)]
        };
        let parts = squares
            .into_iter()
            .map(|q| {
                let moduli = RootModuli::new(q)?;
                let conv = Convolution::new(moduli.root_modulus(), size, threads)?;
                Ok(Part { moduli, conv })
            })
            .collect::<Result<Vec<Part>>>()?;
        Ok(FastPlan {
            digits,
            bits,
            len,
            grundy,
            parts,
        })
    }

    /// `M = 2^b 10^d`.
    fn modulus(&self) -> u64 {
        ((1u128 << self.bits) * 10u128.pow(self.digits)) as u64
    }

    /// `c_h(k) mod M` for `k <= m`. As the Newton steps finish, `progress(k)`
    /// is told that `k` of the `m + 1` coefficients are known (with two parts,
    /// each part counts for half of them).
    pub(super) fn coefficients(
        &self,
        character: u32,
        control: &Control,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<u64>> {
        control.check()?;
        let fraction = long_fraction(&self.grundy, character, self.len);
        let count = self.parts.len();
        let mut roots = Vec::with_capacity(count);
        for (index, part) in self.parts.iter().enumerate() {
            let s = quotient_series(&fraction, self.len, &part.moduli.square, control)?;
            // Parts report in turn: part i covers [i len, (i + 1) len) / count.
            let mut report = |known: usize| progress((index * self.len + known) / count);
            let root =
                newton::sqrt_newton(&part.conv, &part.moduli, &s, self.len, control, &mut report)?;
            roots.push((root, part.moduli.root_modulus()));
        }
        if roots.len() == 1 {
            return Ok(roots.pop().expect("one part").0);
        }
        let (five, five_modulus) = roots.pop().expect("two parts");
        let (two, two_modulus) = roots.pop().expect("two parts");
        let crt = Crt::new(two_modulus, five_modulus)?;
        debug_assert_eq!(
            u128::from(two_modulus) * u128::from(five_modulus),
            u128::from(self.modulus())
        );
        Ok(two
            .iter()
            .zip(&five)
            .map(|(&a, &c)| crt.join(a, c))
            .collect())
    }
}

/// The fraction of `character` modulo `u^len`, reading its periodic form off
/// the first [`FRACTION_PREFIX`] block lengths and checking every later sign
/// against it, so that long lists are never materialised; a list that breaks
/// the form falls back to the fraction of the whole lists.
fn long_fraction(grundy: &[u8], character: u32, len: usize) -> Fraction {
    let prefix = len.min(FRACTION_PREFIX);
    if prefix == len {
        return rational::character_fraction(grundy, character, len);
    }
    let (even, odd) = rational::block_series(grundy, character, prefix);
    let form = rational::periodic_form(&even, &odd);
    let q = form.period;
    let sign = |l: usize| rational::sign(grundy, character, l);
    // (1 - u^q) E and (1 - u^q) P have no coefficient at or after the prefix.
    let holds = q > 0
        && q < prefix - 1
        && (prefix..len).all(|j| sign(2 * j) == sign(2 * (j - q)))
        && (prefix - 1..len - 1).all(|j| sign(2 * j + 1) == sign(2 * (j - q) + 1));
    if holds {
        rational::fraction_of(&form, len)
    } else {
        rational::character_fraction(grundy, character, len)
    }
}

/// `s = num / den mod (u^len, q)` by `s_k = num_k - sum_{j>=1} den_j s_{k-j}`.
fn quotient_series(
    fraction: &Fraction,
    len: usize,
    modulus: &Reducer,
    control: &Control,
) -> Result<Vec<u64>> {
    let q = modulus.modulus();
    let reduce = |x: i128| {
        let r = modulus.rem(x.unsigned_abs());
        if x < 0 && r != 0 { q - r } else { r }
    };
    let num: Vec<u64> = fraction
        .num
        .iter()
        .map(|&x| reduce(i128::from(x)))
        .collect();
    // den_D, ..., den_1, so that the sum reads s forwards.
    let den_rev: Vec<i64> = fraction.den[1..].iter().rev().copied().collect();
    let terms = den_rev.len();
    let weight: u128 = den_rev.iter().map(|d| u128::from(d.unsigned_abs())).sum();
    // With every s_j < q, |sum| <= q * weight.
    let bound = u128::from(q) * weight;
    let mut s: Vec<u64> = Vec::with_capacity(len);
    if bound < 1 << 53 {
        // Every partial sum is an integer below 2^53 in absolute value, so the
        // double precision sums are exact in any order; four running sums let
        // the products vectorise. The last `terms` values sit twice in `window`
        // so that they always read as one slice.
        let den_f: Vec<f64> = den_rev.iter().map(|&d| d as f64).collect();
        let mut window = vec![0f64; 2 * terms.max(1)];
        for k in 0..len {
            if k % QUOTIENT_POLL == QUOTIENT_POLL - 1 {
                control.check()?;
            }
            let sum = if terms == 0 {
                0.0
            } else if k >= terms {
                let at = k % terms;
                exact_dot(&window[at..at + terms], &den_f)
            } else {
                (0..k).map(|j| den_f[terms - k + j] * s[j] as f64).sum()
            };
            let head = num.get(k).copied().unwrap_or(0);
            let value = reduce(i128::from(head) - i128::from(sum as i64));
            if terms > 0 {
                let at = k % terms;
                window[at] = value as f64;
                window[at + terms] = value as f64;
            }
            s.push(value);
        }
        return Ok(s);
    }
    for k in 0..len {
        if k % QUOTIENT_POLL == QUOTIENT_POLL - 1 {
            control.check()?;
        }
        let used = terms.min(k);
        let sum: i128 = s[k - used..k]
            .iter()
            .zip(&den_rev[terms - used..])
            .map(|(&x, &d)| i128::from(x) * i128::from(d))
            .sum();
        let head = num.get(k).copied().unwrap_or(0);
        s.push(reduce(i128::from(head) - sum));
    }
    Ok(s)
}

/// `sum a_i b_i` in four running sums (exact when every partial sum is an
/// integer below `2^53`).
#[inline]
fn exact_dot(a: &[f64], b: &[f64]) -> f64 {
    let mut sums = [0f64; 4];
    let (a4, b4) = (a.chunks_exact(4), b.chunks_exact(4));
    let (a_rest, b_rest) = (a4.remainder(), b4.remainder());
    for (x, y) in a4.zip(b4) {
        for l in 0..4 {
            sums[l] += x[l] * y[l];
        }
    }
    let rest: f64 = a_rest.iter().zip(b_rest).map(|(x, y)| x * y).sum();
    (sums[0] + sums[1]) + (sums[2] + sums[3]) + rest
}

/// All coefficients `c_h(0..=m) mod M` (`M = 2^b 10^d < 2^64`) of character
/// `character` of the job `(pins, digits)`, by power-series arithmetic in
/// `O(m log m)`: the coefficients that [`super::CharacterSeries`] computes one by
/// one. Adds `m + 1` work units to `control` as the coefficients become known;
/// `threads` threads share each convolution.
pub fn character_coefficients_fast(
    pins: u64,
    digits: u32,
    character: u32,
    threads: usize,
    control: &Control,
) -> Result<Vec<u64>> {
    validate(pins, digits)?;
    check_character(pins, character)?;
    let plan = FastPlan::new(pins, digits, threads.max(1))?;
    let mut reported = 0;
    plan.coefficients(character, control, &mut |known| {
        control.add_work((known - reported) as u64);
        reported = known;
    })
}

/// `c_h(m) mod M` of character `character`: exactly what
/// [`super::CharacterSeries::value`] gives after a full advance, by the fast path.
pub fn character_value_fast(
    pins: u64,
    digits: u32,
    character: u32,
    threads: usize,
    control: &Control,
) -> Result<u128> {
    let coefficients = character_coefficients_fast(pins, digits, character, threads, control)?;
    coefficients
        .last()
        .map(|&v| u128::from(v))
        .ok_or_else(|| Error::Internal("kayles: empty series".into()))
}

fn check_character(pins: u64, character: u32) -> Result<()> {
    let count = character_count(pins);
    if character >= count {
        return Err(invalid!(
            "character must be below {count} for {pins} pins, got {character}"
        ));
    }
    Ok(())
}

/// `f(pins) mod 10^digits` by the fast path, the characters shared among
/// `threads` threads. Adds [`super::total_work`]`(pins)` work units in all.
pub fn fair_rows_fast(pins: u64, digits: u32, threads: usize, control: &Control) -> Result<u64> {
    validate(pins, digits)?;
    control.check()?;
    let count = character_count(pins);
    // Threads beyond one per character share the primes of each convolution.
    let per_character = (threads / count as usize).max(1);
    let plan = FastPlan::new(pins, digits, per_character)?;
    let values = character_values(count, threads, |h| {
        let mut reported = 0;
        let coefficients = plan.coefficients(h, control, &mut |known| {
            control.add_work((known - reported) as u64);
            reported = known;
        })?;
        coefficients
            .last()
            .map(|&v| u128::from(v))
            .ok_or_else(|| Error::Internal("kayles: empty series".into()))
    })?;
    combine(pins, digits, &values)
}
