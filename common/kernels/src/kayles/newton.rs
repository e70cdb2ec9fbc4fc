//! Power series truncated at `u^len` with coefficients modulo an integer: the
//! inverse and the square root by Newton's iteration on exact convolutions,
//! and the schoolbook versions they start from and are checked against.
//!
//! ## The moduli
//!
//! A square root is computed from a series `s = r^2` known modulo `Q`, where
//! `r` has integer coefficients and `r_0 = s_0 = 1`. Its coefficients are kept
//! modulo `R`: `R = Q` when `Q` is odd (2 is invertible), and `R = Q / 2` when
//! `Q` is divisible by 4 (the halving rule).
//!
//! **Squares need the root only modulo `R`.** If `x ≡ x* (mod R)` for integer
//! polynomials, `x = x* + R t`, then `x^2 = x*^2 + 2R x* t + R^2 t^2`. For odd
//! `Q = R` both extra terms vanish modulo `Q`; for `Q = 2R` with `R` even, `2R`
//! and `R^2 = (R/2) 2R` are multiples of `Q`. So `x^2 ≡ x*^2 (mod Q)`
//! coefficientwise, whatever representatives are used.
//!
//! ## One Newton step, from `a` known coefficients to `t <= 2a`
//!
//! Let `ρ ≡ r (mod u^a, R)`, `ρ*` the integer polynomial `r mod u^a`, and
//! `δ = r - ρ*`, a multiple of `u^a`. Let `ψ ≡ y = r^-1` (an integer series,
//! since `r_0 = 1`) modulo `u^a'`, `a' >= a / 2`.
//!
//! 1. *Inverse to precision `a`*: `ψ' = ψ + ψ (1 - ρψ) mod u^a`. Modulo `u^a`,
//!    `1 - ρψ ≡ r (y - ψ)`, so `y - ψ' ≡ r (y - ψ)^2 ≡ 0 (mod u^{2a'})`: an
//!    identity in any commutative ring, here the integers modulo `R`.
//! 2. *The square's new coefficients*: the transforms give the exact integer
//!    cyclic convolution `c` of the representatives of `ρ` on `N1 >= a` points
//!    (from here on `ρ^2` is the square of those integers),
//!    `c_i = (ρ^2)_i + (ρ^2)_{i+N1}`. The square has degree `<= 2a - 2`, so for
//!    `a <= i < N1` nothing wraps onto `c_i`; for `N1 <= i < t`,
//!    `(ρ^2)_i = c_{i-N1} - (ρ^2)_{i-N1}` with `i - N1 < a`, and
//!    `(ρ^2)_j ≡ (ρ*^2)_j = s_j (mod Q)` for `j < a` by the lemma above.
//! 3. *Halving*: `s = r^2 = ρ*^2 + 2ρ*δ + δ^2` and `δ^2 ≡ 0 (mod u^{2a})`, so
//!    for `a <= i < t`, `v_i = s_i - (ρ^2)_i ≡ 2 (ρ*δ)_i (mod Q)`: `v_i` is the
//!    residue of an even integer. For even `Q` it is even and
//!    `v_i / 2 ≡ (ρ*δ)_i (mod R)`; for odd `Q`, `v_i 2^-1 ≡ (ρ*δ)_i (mod Q)`.
//! 4. *The correction*: `ρ*δ ≡ rδ (mod u^{2a})` and `yr = 1`, so
//!    `δ u^-a ≡ y (ρ*δ u^-a) (mod u^{t-a})`, a product modulo `R` of `ψ'` (of
//!    precision `a >= t - a`) and the halved values. Then `ρ + δ ≡ r (mod u^t)`.
//!    All `a` coefficients of `ψ'` enter: the product has degree below `t`, so on
//!    `N2 >= t` points nothing wraps, the terms past `t - a` only reach degrees
//!    past `t - a`, and the transform of `ψ'` is the one step 1 of the next
//!    step needs (its `N1` is `N2`).
//!
//! The first `a` coefficients come from the schoolbook recurrences, whose
//! halving rests on the same lemma (see `residues`), with `ψ` to the same
//! precision.
//!
//! Every product is an exact integer convolution reduced modulo `R` or `Q`
//! (see `ntt`), and is used only on coefficients that no cyclic wrap reaches:
//! in step 1, `ρψ` on `N1 >= a` points wraps only below `a'`, and `ψ (1 - ρψ)`
//! has degree below `a - 1`.

use super::ntt::{Convolution, Reducer, Spectrum};
use crate::{Control, Error, Result};

/// Precisions at or below this are computed by the schoolbook recurrences.
pub(super) const BASE_PRECISION: usize = 32;

/// The modulus `Q` of a square and the modulus `R` of its root.
#[derive(Debug, Clone, Copy)]
pub(super) struct RootModuli {
    pub(super) square: Reducer,
    pub(super) root: Reducer,
    /// `2^-1 mod Q` for odd `Q`; `None` for even `Q`.
    half: Option<u64>,
}

impl RootModuli {
    /// The moduli for squares modulo `q`: odd, or divisible by 4 (below `2^63`).
    pub(super) fn new(q: u64) -> Result<RootModuli> {
        if !(3..1 << 63).contains(&q) || (q.is_multiple_of(2) && !q.is_multiple_of(4)) {
            return Err(Error::Internal(format!(
                "kayles: {q} is not a modulus for square roots"
            )));
        }
        let (root, half) = if q % 2 == 1 {
            (q, Some(q.div_ceil(2)))
        } else {
            (q / 2, None)
        };
        Ok(RootModuli {
            square: Reducer::new(q),
            root: Reducer::new(root),
            half,
        })
    }

    pub(super) fn square_modulus(&self) -> u64 {
        self.square.modulus()
    }

    pub(super) fn root_modulus(&self) -> u64 {
        self.root.modulus()
    }

    /// `x` with `2x ≡ v (mod Q)`, modulo `R`; `v` must be the residue of an
    /// even integer.
    fn halve(&self, v: u64) -> Result<u64> {
        match self.half {
            Some(h) => Ok(self.square.mul(v, h)),
            None if v % 2 == 1 => Err(Error::Internal(
                "kayles: odd value to halve in the square root".into(),
            )),
            None => Ok(v / 2),
        }
    }
}

/// `a - b` modulo `m` for residues `a, b < m`.
#[inline(always)]
fn sub_mod(a: u64, b: u64, m: u64) -> u64 {
    if a >= b { a - b } else { a + (m - b) }
}

/// The first `len` coefficients of `x^-1` modulo `R`, `x_0 = 1`, by the
/// recurrence `y_k = -sum_{0<i<=k} x_i y_{k-i}`.
pub(super) fn inverse_schoolbook(x: &[u64], len: usize, modulus: &Reducer) -> Vec<u64> {
    let m = modulus.modulus();
    let mut y = Vec::with_capacity(len);
    for k in 0..len {
        if k == 0 {
            y.push(1 % m);
            continue;
        }
        let sum = (1..=k.min(x.len() - 1)).fold(0u64, |acc, i| {
            (acc + modulus.rem(u128::from(x[i]) * u128::from(y[k - i]))) % m
        });
        y.push(sub_mod(0, sum, m));
    }
    y
}

/// The first `len` coefficients of `sqrt(s)` modulo `R` from `s` modulo `Q`, by
/// `2 r_k = s_k - sum_{0<i<k} r_i r_{k-i}`.
pub(super) fn sqrt_schoolbook(s: &[u64], len: usize, moduli: &RootModuli) -> Result<Vec<u64>> {
    let q = moduli.square_modulus();
    if s.first() != Some(&1) {
        return Err(Error::Internal(
            "kayles: the square must start with 1".into(),
        ));
    }
    let mut r = Vec::with_capacity(len);
    for k in 0..len {
        if k == 0 {
            r.push(1);
            continue;
        }
        // Products of residues below R, reduced modulo Q = 2R or R.
        let sum = (1..k).fold(0u64, |acc, i| {
            (acc + moduli.square.rem(u128::from(r[i]) * u128::from(r[k - i]))) % q
        });
        r.push(moduli.halve(sub_mod(s[k], sum, q))?);
    }
    Ok(r)
}

/// The precisions of a Newton iteration to `len`: `len`, `ceil(len/2)`, ...
/// down to the first at most [`BASE_PRECISION`], smallest first.
fn schedule(len: usize) -> Vec<usize> {
    let mut steps = vec![len];
    while *steps.last().unwrap() > BASE_PRECISION {
        let last = *steps.last().unwrap();
        steps.push(last.div_ceil(2));
    }
    steps.reverse();
    steps
}

/// The largest transform of a square root of `len` coefficients.
pub(super) fn max_transform_size(len: usize) -> usize {
    len.next_power_of_two()
}

/// Extends `psi ≡ rho^-1 (mod u^{psi.len()}, R)` to precision `a <= 2 psi.len()`
/// (step 1 of the module documentation), given the transform `rho_hat` of the
/// first `a` coefficients of `rho` on `size >= a` points, and possibly the
/// transform `psi_hat` of `psi` (used when it has `size` points).
fn extend_inverse(
    conv: &Convolution,
    modulus: &Reducer,
    rho_hat: &Spectrum,
    size: usize,
    a: usize,
    psi: &mut Vec<u64>,
    psi_hat: Option<Spectrum>,
) {
    let a1 = psi.len();
    if a1 >= a {
        psi.truncate(a);
        return;
    }
    debug_assert!(a <= 2 * a1 && size >= a);
    let r = modulus.modulus();
    let psi_hat = match psi_hat {
        Some(known) if known.size() == size => known,
        _ => conv.spectrum(psi, size),
    };
    // (rho psi)_i for a1 <= i < a: products of degree >= size wrap below a1.
    let product = conv.coefficient_range(conv.multiply(rho_hat, &psi_hat), a1..a, modulus);
    let error: Vec<u64> = product.iter().map(|&x| sub_mod(0, x, r)).collect();
    // psi * error modulo u^{a - a1}: degree below a - 1 < size, no wrap.
    let correction = conv.coefficient_range(
        conv.multiply_into(conv.spectrum(&error, size), &psi_hat),
        0..a - a1,
        modulus,
    );
    psi.extend(correction);
}

/// The first `len` coefficients of `x^-1` modulo `R` (`x_0 = 1`) by Newton's
/// iteration.
#[cfg(test)]
pub(super) fn inverse_newton(
    conv: &Convolution,
    modulus: &Reducer,
    x: &[u64],
    len: usize,
) -> Vec<u64> {
    let steps = schedule(len);
    let mut psi = inverse_schoolbook(x, steps[0], modulus);
    for &a in &steps[1..] {
        let size = a.next_power_of_two();
        let x_hat = conv.spectrum(&x[..a.min(x.len())], size);
        extend_inverse(conv, modulus, &x_hat, size, a, &mut psi, None);
    }
    psi
}

/// The first `len` coefficients of `sqrt(s)` modulo `R` from `s` modulo `Q`
/// (`s_0 = 1`, `s` the square of an integer series), by Newton's iteration (see
/// the module documentation). `progress(k)` is told each time the first `k`
/// coefficients are known; `control` is polled between products.
pub(super) fn sqrt_newton(
    conv: &Convolution,
    moduli: &RootModuli,
    s: &[u64],
    len: usize,
    control: &Control,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<u64>> {
    assert!(s.len() >= len, "the square is too short");
    let (q, r) = (moduli.square_modulus(), moduli.root_modulus());
    let steps = schedule(len);
    // Room for the final lengths up front: growing by doubling would briefly
    // hold two copies of the longest arrays.
    let mut rho = Vec::with_capacity(len);
    rho.extend(sqrt_schoolbook(s, steps[0], moduli)?);
    let mut psi = Vec::with_capacity(len.div_ceil(2));
    psi.extend(inverse_schoolbook(&rho, steps[0], &moduli.root));
    progress(steps[0]);
    // The transform of psi from the previous step's correction, which has the
    // size the next inverse update needs.
    let mut psi_hat: Option<Spectrum> = None;
    for &t in &steps[1..] {
        control.check()?;
        let a = rho.len();
        let n1 = a.next_power_of_two();
        let rho_hat = conv.spectrum(&rho, n1);
        extend_inverse(
            conv,
            &moduli.root,
            &rho_hat,
            n1,
            a,
            &mut psi,
            psi_hat.take(),
        );
        control.check()?;
        // The cyclic square on n1 points: its coefficients a..min(n1, t), and
        // below t - n1 for the part that wraps.
        let upper = t.min(n1);
        let wrapped = t.saturating_sub(n1);
        let [direct, low] = conv
            .coefficients(
                conv.square_into(rho_hat),
                &[a..upper, 0..wrapped],
                &moduli.square,
            )
            .try_into()
            .expect("two ranges");
        let mut halved = Vec::with_capacity(t - a);
        for i in a..t {
            let square = if i < n1 {
                direct[i - a]
            } else {
                sub_mod(low[i - n1], s[i - n1], q)
            };
            halved.push(moduli.halve(sub_mod(s[i], square, q))?);
        }
        control.check()?;
        // psi (all a coefficients: the ones past t - a only reach degrees past
        // t - a) times the halved values: degree below t, no wrap on n2 >= t.
        let n2 = t.next_power_of_two();
        let psi_spectrum = conv.spectrum(&psi, n2);
        let product = conv.multiply_into(conv.spectrum(&halved, n2), &psi_spectrum);
        let delta = conv.coefficient_range(product, 0..t - a, &moduli.root);
        debug_assert!(delta.iter().all(|&d| d < r));
        rho.extend(delta);
        // Kept for the next step only; the last one frees it at once.
        psi_hat = (t < len).then_some(psi_spectrum);
        progress(t);
    }
    Ok(rho)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// `x * y mod (u^len, m)` by schoolbook.
    fn product(x: &[u64], y: &[u64], len: usize, m: u64) -> Vec<u64> {
        let mut out = vec![0u128; len];
        for (i, &a) in x.iter().enumerate().take(len) {
            for (j, &b) in y.iter().enumerate().take(len - i) {
                out[i + j] = (out[i + j] + u128::from(a) * u128::from(b)) % u128::from(m);
            }
        }
        out.into_iter().map(|v| v as u64).collect()
    }

    const LENGTHS: [usize; 12] = [1, 2, 31, 32, 33, 64, 65, 100, 257, 1000, 1024, 3001];

    #[test]
    fn newton_inverse_equals_schoolbook() {
        let mut rng = Rng(3);
        for m in [
            1_953_125u64,
            5u64.pow(18),
            5,
            1 << 13,
            1 << 22,
            2,
            16_000_000_000,
        ] {
            let reducer = Reducer::new(m);
            let conv = Convolution::new(m, max_transform_size(3001), 1).unwrap();
            for len in LENGTHS {
                let mut x: Vec<u64> = (0..len).map(|_| rng.below(m)).collect();
                x[0] = 1;
                let newton = inverse_newton(&conv, &reducer, &x, len);
                let schoolbook = inverse_schoolbook(&x, len, &reducer);
                assert_eq!(newton, schoolbook, "m {m} len {len}");
                let mut one = vec![0u64; len];
                one[0] = 1 % m;
                assert_eq!(product(&x, &newton, len, m), one, "m {m} len {len}");
            }
        }
    }

    #[test]
    fn newton_sqrt_equals_schoolbook() {
        let mut rng = Rng(4);
        // Squares modulo Q of random roots modulo R.
        for q in [
            1_953_125u64,
            5u64.pow(18),
            125,
            1 << 14,
            1 << 23,
            4,
            32_000_000_000,
        ] {
            let moduli = RootModuli::new(q).unwrap();
            let r = moduli.root_modulus();
            let conv = Convolution::new(r, max_transform_size(3001), 2).unwrap();
            for len in LENGTHS {
                let mut root: Vec<u64> = (0..len).map(|_| rng.below(r)).collect();
                root[0] = 1;
                let s = product(&root, &root, len, q);
                let newton =
                    sqrt_newton(&conv, &moduli, &s, len, &Control::new(), &mut |_| {}).unwrap();
                assert_eq!(newton, root, "q {q} len {len}");
                assert_eq!(sqrt_schoolbook(&s, len, &moduli).unwrap(), root);
            }
        }
    }

    #[test]
    fn a_square_that_is_not_one_is_refused() {
        let moduli = RootModuli::new(1 << 10).unwrap();
        let conv = Convolution::new(1 << 9, 1024, 1).unwrap();
        // 1 + u has no square root with integer coefficients: 2 r_1 = 1.
        let mut s = vec![0u64; 100];
        s[0] = 1;
        s[1] = 1;
        let result = sqrt_newton(&conv, &moduli, &s, 100, &Control::new(), &mut |_| {});
        assert!(matches!(result, Err(Error::Internal(_))));
        s[0] = 3;
        assert!(sqrt_schoolbook(&s, 100, &moduli).is_err());
        assert!(RootModuli::new(6).is_err());
    }

    #[test]
    fn progress_reaches_the_length_and_cancellation_stops() {
        let moduli = RootModuli::new(1_953_125).unwrap();
        let conv = Convolution::new(1_953_125, max_transform_size(5000), 1).unwrap();
        let mut s = vec![0u64; 5000];
        s[0] = 1;
        let mut seen = Vec::new();
        let root = sqrt_newton(&conv, &moduli, &s, 5000, &Control::new(), &mut |k| {
            seen.push(k)
        })
        .unwrap();
        assert_eq!(root.len(), 5000);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(seen.last(), Some(&5000));
        let control = Control::new();
        control.cancel();
        assert_eq!(
            sqrt_newton(&conv, &moduli, &s, 5000, &control, &mut |_| {}),
            Err(Error::Cancelled)
        );
    }
}
