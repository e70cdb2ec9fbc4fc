//! Exact integer convolution reduced modulo an arbitrary modulus below `2^63`:
//! number theoretic transforms over several primes below `2^30`, joined by the
//! Chinese remainder theorem (Garner's mixed radix form).
//!
//! Inputs are residues modulo some `R`, taken as balanced integers
//! `|x| <= floor(R / 2)`. A cyclic convolution of size `N` then has integer
//! coefficients of absolute value at most `N * floor(R / 2)^2`; the primes are
//! chosen so that their product `P` exceeds twice that bound, so the residues
//! modulo the primes determine each coefficient exactly as the representative
//! of its class modulo `P` in `(-P/2, P/2)`. That exact integer is then reduced
//! modulo the wanted modulus.

use std::ops::Range;

use num_bigint::BigUint;

use crate::modular::inv_mod;

use super::field::{MAX_LOG_SIZE, Montgomery, PrimeField};
use crate::{Error, Result};

/// Primes `c * 2^23 + 1` below `2^30`, largest first: transforms of up to
/// `2^23` points, and lazy butterflies whose values stay below `4p < 2^32`.
const PRIMES: [u32; 8] = [
    998_244_353,
    897_581_057,
    880_803_841,
    754_974_721,
    645_922_817,
    595_591_169,
    469_762_049,
    377_487_361,
];

/// One radix-2 level of the forward transform: half-length `len`.
#[inline(always)]
fn forward_level(a: &mut [u32], len: usize, field: &PrimeField) {
    let m = field.mont;
    let two_p = 2 * m.p;
    let twiddles = &field.forward[len..2 * len];
    for block in a.chunks_exact_mut(2 * len) {
        let (lo, hi) = block.split_at_mut(len);
        for ((x, y), &w) in lo.iter_mut().zip(hi.iter_mut()).zip(twiddles) {
            let (u, v) = (*x, *y);
            let difference = u.wrapping_add(two_p).wrapping_sub(v);
            *x = m.half_strict(u.wrapping_add(v));
            // The last level's twiddle is 1: no product, as in the vector kernel.
            *y = if len == 1 {
                m.half_strict(difference)
            } else {
                m.mul(difference, w)
            };
        }
    }
}

/// Two forward levels in one pass: half-lengths `2 len`, then `len`.
#[inline(always)]
fn forward_levels(a: &mut [u32], len: usize, field: &PrimeField) {
    let m = field.mont;
    let two_p = 2 * m.p;
    let (outer_lo, outer_hi) = field.forward[2 * len..4 * len].split_at(len);
    let inner = &field.forward[len..2 * len];
    for block in a.chunks_exact_mut(4 * len) {
        let (first, second) = block.split_at_mut(2 * len);
        let (x0, x1) = first.split_at_mut(len);
        let (x2, x3) = second.split_at_mut(len);
        for j in 0..len {
            let (a0, a1, a2, a3) = (x0[j], x1[j], x2[j], x3[j]);
            let b0 = m.half_strict(a0.wrapping_add(a2));
            let b2 = m.mul(a0.wrapping_add(two_p).wrapping_sub(a2), outer_lo[j]);
            let b1 = m.half_strict(a1.wrapping_add(a3));
            let b3 = m.mul(a1.wrapping_add(two_p).wrapping_sub(a3), outer_hi[j]);
            x0[j] = m.half_strict(b0.wrapping_add(b1));
            x1[j] = m.mul(b0.wrapping_add(two_p).wrapping_sub(b1), inner[j]);
            x2[j] = m.half_strict(b2.wrapping_add(b3));
            x3[j] = m.mul(b2.wrapping_add(two_p).wrapping_sub(b3), inner[j]);
        }
    }
}

/// The decimation-in-frequency transform: natural order in, bit-reversed order
/// out, values in `[0, 2p)` (in as well as out). Levels go two at a time while
/// the inner loops stay long enough to vectorise.
#[inline(always)]
fn forward_portable(a: &mut [u32], field: &PrimeField) {
    let mut len = a.len() / 2;
    while len >= 16 {
        forward_levels(a, len / 2, field);
        len /= 4;
    }
    while len >= 1 {
        forward_level(a, len, field);
        len /= 2;
    }
}

/// One radix-2 level of the inverse transform: half-length `len`.
#[inline(always)]
fn inverse_level(a: &mut [u32], len: usize, field: &PrimeField) {
    let m = field.mont;
    let two_p = 2 * m.p;
    let twiddles = &field.inverse[len..2 * len];
    for block in a.chunks_exact_mut(2 * len) {
        let (lo, hi) = block.split_at_mut(len);
        for ((x, y), &w) in lo.iter_mut().zip(hi.iter_mut()).zip(twiddles) {
            let u = *x;
            // The first level's twiddle is 1: no product, as in the vector kernel.
            let v = if len == 1 { *y } else { m.mul(*y, w) };
            *x = m.half_strict(u.wrapping_add(v));
            *y = m.half_strict(u.wrapping_add(two_p).wrapping_sub(v));
        }
    }
}

/// Two inverse levels in one pass: half-lengths `len`, then `2 len`.
#[inline(always)]
fn inverse_levels(a: &mut [u32], len: usize, field: &PrimeField) {
    let m = field.mont;
    let two_p = 2 * m.p;
    let (outer_lo, outer_hi) = field.inverse[2 * len..4 * len].split_at(len);
    let inner = &field.inverse[len..2 * len];
    for block in a.chunks_exact_mut(4 * len) {
        let (first, second) = block.split_at_mut(2 * len);
        let (x0, x1) = first.split_at_mut(len);
        let (x2, x3) = second.split_at_mut(len);
        for j in 0..len {
            let w = inner[j];
            let (a0, a2) = (x0[j], x2[j]);
            let (a1, a3) = (m.mul(x1[j], w), m.mul(x3[j], w));
            let b0 = m.half_strict(a0.wrapping_add(a1));
            let b1 = m.half_strict(a0.wrapping_add(two_p).wrapping_sub(a1));
            let b2 = m.mul(m.half_strict(a2.wrapping_add(a3)), outer_lo[j]);
            let b3 = m.mul(
                m.half_strict(a2.wrapping_add(two_p).wrapping_sub(a3)),
                outer_hi[j],
            );
            x0[j] = m.half_strict(b0.wrapping_add(b2));
            x2[j] = m.half_strict(b0.wrapping_add(two_p).wrapping_sub(b2));
            x1[j] = m.half_strict(b1.wrapping_add(b3));
            x3[j] = m.half_strict(b1.wrapping_add(two_p).wrapping_sub(b3));
        }
    }
}

/// The decimation-in-time inverse (without the factor `1 / size`): bit-reversed
/// order in, natural order out, values in `[0, 2p)`.
#[inline(always)]
fn inverse_portable(a: &mut [u32], field: &PrimeField) {
    let n = a.len();
    let mut len = 1;
    while len < n && len < 8 {
        inverse_level(a, len, field);
        len *= 2;
    }
    while 4 * len <= n {
        inverse_levels(a, len, field);
        len *= 4;
    }
    while len < n {
        inverse_level(a, len, field);
        len *= 2;
    }
}

/// `a = a * b * c` pointwise (`c` from [`PrimeField::pointwise_factor`]).
#[inline(always)]
fn pointwise_portable(a: &mut [u32], b: &[u32], c: u32, m: Montgomery) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x = m.mul(m.mul(*x, y), c);
    }
}

/// `a = a * a * c` pointwise.
#[inline(always)]
fn square_portable(a: &mut [u32], c: u32, m: Montgomery) {
    for x in a.iter_mut() {
        *x = m.mul(m.mul(*x, *x), c);
    }
}

/// `out[i] = (x[i] + [x[i] > half] offset) mod p`.
#[inline(always)]
fn reduce_balanced_portable(
    x: &[u64],
    out: &mut [u32],
    half: u64,
    offset: u64,
    field: &PrimeField,
) {
    for (slot, &v) in out.iter_mut().zip(x) {
        *slot = field.reduce_u64(if v > half { v + offset } else { v });
    }
}

/// One Garner digit: `value = (value - sum_j digits[j] radix[j]) inverse mod p`
/// elementwise, from `value` in `[0, 2p)` and digits below `2^30`, to `[0, p)`.
#[inline(always)]
fn garner_digit_portable(
    value: &mut [u32],
    digits: &[&[u32]],
    radix: &[u32],
    inverse: u32,
    m: Montgomery,
) {
    let two_p = 2 * m.p;
    for (j, v) in value.iter_mut().enumerate() {
        let mut x = *v;
        for (d, &r) in digits.iter().zip(radix) {
            let term = m.mul(d[j], r);
            x = m.half_strict(x.wrapping_add(two_p).wrapping_sub(term));
        }
        *v = m.strict(m.mul(x, inverse));
    }
}

/// Whether the AVX2 kernels can run.
fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The forward transform, vectorised where the CPU allows.
fn forward(a: &mut [u32], field: &PrimeField) {
    #[cfg(target_arch = "x86_64")]
    if a.len() >= 16 && avx2() {
        // SAFETY: the CPU has AVX2, as checked just above, the only
        // requirement of `ntt_avx2::forward`.
        return unsafe { super::ntt_avx2::forward(a, field) };
    }
    forward_portable(a, field)
}

/// The inverse transform, vectorised where the CPU allows.
fn inverse(a: &mut [u32], field: &PrimeField) {
    #[cfg(target_arch = "x86_64")]
    if a.len() >= 16 && avx2() {
        // SAFETY: as in `forward`.
        return unsafe { super::ntt_avx2::inverse(a, field) };
    }
    inverse_portable(a, field)
}

/// Splits `n` elements into a part for 8-lane kernels and the rest: the part
/// is empty unless the CPU has AVX2.
fn lane_split(n: usize) -> usize {
    if avx2() { n - n % 8 } else { 0 }
}

/// [`pointwise_portable`], vectorised where the CPU allows.
fn pointwise(a: &mut [u32], b: &[u32], c: u32, m: Montgomery) {
    let split = lane_split(a.len());
    #[cfg(target_arch = "x86_64")]
    if split > 0 {
        // SAFETY: `split > 0`, so the CPU has AVX2 (see `lane_split`), the
        // only requirement of the AVX2 kernel.
        unsafe { super::ntt_avx2::pointwise(&mut a[..split], &b[..split], c, m) };
    }
    pointwise_portable(&mut a[split..], &b[split..], c, m);
}

/// [`square_portable`], vectorised where the CPU allows.
fn square(a: &mut [u32], c: u32, m: Montgomery) {
    let split = lane_split(a.len());
    #[cfg(target_arch = "x86_64")]
    if split > 0 {
        // SAFETY: `split > 0`, so the CPU has AVX2 (see `lane_split`), the
        // only requirement of the AVX2 kernel.
        unsafe { super::ntt_avx2::square(&mut a[..split], c, m) };
    }
    square_portable(&mut a[split..], c, m);
}

/// [`reduce_balanced_portable`], vectorised where the CPU allows.
fn reduce_balanced(x: &[u64], out: &mut [u32], half: u64, offset: u64, field: &PrimeField) {
    let split = lane_split(x.len());
    #[cfg(target_arch = "x86_64")]
    if split > 0 {
        // SAFETY: `split > 0`, so the CPU has AVX2 (see `lane_split`), the
        // only requirement of the AVX2 kernel.
        unsafe { super::ntt_avx2::reduce_balanced(&x[..split], out, half, offset, field) };
    }
    reduce_balanced_portable(&x[split..], &mut out[split..], half, offset, field);
}

/// [`garner_digit_portable`], vectorised where the CPU allows.
fn garner_digit(value: &mut [u32], digits: &[&[u32]], radix: &[u32], inverse: u32, m: Montgomery) {
    let split = lane_split(value.len());
    #[cfg(target_arch = "x86_64")]
    if split > 0 {
        // SAFETY: `split > 0`, so the CPU has AVX2 (see `lane_split`), the
        // only requirement of the AVX2 kernel.
        unsafe { super::ntt_avx2::garner_digit(&mut value[..split], digits, radix, inverse, m) };
    }
    let rest: Vec<&[u32]> = digits.iter().map(|d| &d[split..]).collect();
    garner_digit_portable(&mut value[split..], &rest, radix, inverse, m);
}

/// Reduction of `u128` values below `q * 2^64` modulo a fixed `q < 2^63`, by a
/// two-word division with a precomputed reciprocal (Möller and Granlund).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reducer {
    q: u64,
    shift: u32,
    /// `q << shift`, with its top bit set.
    d: u64,
    /// `floor((2^128 - 1) / d) - 2^64`.
    v: u64,
}

impl Reducer {
    pub(super) fn new(q: u64) -> Reducer {
        assert!((1..1 << 63).contains(&q), "modulus out of range");
        let shift = q.leading_zeros();
        let d = q << shift;
        let v = (u128::MAX / u128::from(d) - (1u128 << 64)) as u64;
        Reducer { q, shift, d, v }
    }

    pub(super) fn modulus(&self) -> u64 {
        self.q
    }

    /// `x mod q` for `x < q * 2^64`.
    #[inline(always)]
    pub(super) fn rem(&self, x: u128) -> u64 {
        debug_assert!(x >> 64 < u128::from(self.q));
        // x < q * 2^64 makes the shifted high word smaller than d.
        let x = x << self.shift;
        let (u1, u0) = ((x >> 64) as u64, x as u64);
        let estimate = (u128::from(self.v) * u128::from(u1)).wrapping_add(x);
        let q1 = ((estimate >> 64) as u64).wrapping_add(1);
        let q0 = estimate as u64;
        let mut r = u0.wrapping_sub(q1.wrapping_mul(self.d));
        if r > q0 {
            r = r.wrapping_add(self.d);
        }
        if r >= self.d {
            r -= self.d;
        }
        r >> self.shift
    }

    /// `a * b mod q`.
    #[inline(always)]
    pub(super) fn mul(&self, a: u64, b: u64) -> u64 {
        self.rem(u128::from(a % self.q) * u128::from(b % self.q))
    }
}

/// Transforms of one sequence, one array per prime, in bit-reversed order.
#[derive(Debug)]
pub(super) struct Spectrum {
    size: usize,
    values: Vec<Vec<u32>>,
}

/// Exact convolutions of residues modulo `input_modulus` for transforms of up
/// to `max_size` points, over as many primes as the exactness bound needs.
#[derive(Debug)]
pub(super) struct Convolution {
    fields: Vec<PrimeField>,
    input_modulus: u64,
    max_size: usize,
    /// Garner: `(p_0 ... p_{i-1})^-1 mod p_i` in Montgomery form.
    garner_inverse: Vec<u32>,
    /// Garner: `garner_radix[i][j] = p_0 ... p_{j-1} mod p_i` (`j < i`), in
    /// Montgomery form.
    garner_radix: Vec<Vec<u32>>,
    /// Mixed-radix digits of `floor((P - 1) / 2)`, most significant first.
    half_digits: Vec<u32>,
    threads: usize,
}

impl Spectrum {
    pub(super) fn size(&self) -> usize {
        self.size
    }
}

impl Convolution {
    /// Primes for convolutions of balanced residues modulo `input_modulus`
    /// (`< 2^63`) of up to `max_size` points (a power of two `<= 2^23`).
    pub(super) fn new(input_modulus: u64, max_size: usize, threads: usize) -> Result<Convolution> {
        if !max_size.is_power_of_two() || max_size > 1 << MAX_LOG_SIZE {
            return Err(Error::Internal(format!(
                "kayles: transform size {max_size} is not a power of two up to 2^{MAX_LOG_SIZE}"
            )));
        }
        if input_modulus == 0 || input_modulus >= 1 << 63 {
            return Err(Error::Internal(
                "kayles: convolution modulus out of range".into(),
            ));
        }
        // Coefficients are at most max_size * h^2 in absolute value.
        let h = BigUint::from(input_modulus / 2);
        let needed = BigUint::from(2u32) * BigUint::from(max_size) * &h * &h;
        let mut product = BigUint::from(1u32);
        let mut count = 0;
        while product <= needed {
            if count == PRIMES.len() {
                return Err(Error::Internal(
                    "kayles: not enough transform primes for this modulus".into(),
                ));
            }
            product *= PRIMES[count];
            count += 1;
        }
        let primes = &PRIMES[..count];
        let fields: Vec<PrimeField> = primes
            .iter()
            .map(|&p| PrimeField::new(p, max_size))
            .collect();
        let mut garner_inverse = Vec::with_capacity(count);
        let mut garner_radix = Vec::with_capacity(count);
        for (i, field) in fields.iter().enumerate() {
            let p = u64::from(primes[i]);
            let mut radix = Vec::with_capacity(i);
            let mut prefix = 1u64;
            for &q in &primes[..i] {
                radix.push(field.mont.strict(field.mont.to_form(prefix as u32)));
                prefix = prefix * u64::from(q) % p;
            }
            let inverse = inv_mod(prefix, p).expect("distinct primes") as u32;
            garner_inverse.push(field.mont.strict(field.mont.to_form(inverse)));
            garner_radix.push(radix);
        }
        // Digits of (P - 1) / 2 in the mixed radix p_0, p_1, ...
        let mut half = (product - 1u32) / 2u32;
        let mut half_digits = Vec::with_capacity(count);
        for &p in primes {
            let digit = &half % p;
            half_digits.push(digit.to_u32_digits().first().copied().unwrap_or(0));
            half /= p;
        }
        half_digits.reverse();
        Ok(Convolution {
            fields,
            input_modulus,
            max_size,
            garner_inverse,
            garner_radix,
            half_digits,
            threads: threads.max(1),
        })
    }

    /// Runs `job(i, &mut item_i)` for each prime's item, on up to `threads`
    /// threads when transforms of `size` points are worth a thread.
    fn per_prime<T: Send>(&self, items: &mut [T], size: usize, job: impl Fn(usize, &mut T) + Sync) {
        let size_worth_threads = 1 << 14;
        if self.threads == 1 || items.len() == 1 || size < size_worth_threads {
            for (i, item) in items.iter_mut().enumerate() {
                job(i, item);
            }
            return;
        }
        let per_thread = items.len().div_ceil(self.threads);
        std::thread::scope(|scope| {
            for (c, chunk) in items.chunks_mut(per_thread).enumerate() {
                let job = &job;
                scope.spawn(move || {
                    for (k, item) in chunk.iter_mut().enumerate() {
                        job(c * per_thread + k, item);
                    }
                });
            }
        });
    }

    /// The transforms of `x` (residues modulo the input modulus, at most `size`
    /// of them) zero-padded to `size` points.
    pub(super) fn spectrum(&self, x: &[u64], size: usize) -> Spectrum {
        assert!(size.is_power_of_two() && size <= self.max_size && x.len() <= size);
        let r = self.input_modulus;
        debug_assert!(x.iter().all(|&v| v < r));
        let mut values: Vec<Vec<u32>> = (0..self.fields.len()).map(|_| Vec::new()).collect();
        self.per_prime(&mut values, size, |i, out| {
            let field = &self.fields[i];
            let p = u64::from(field.mont.p);
            // Residues above R/2 stand for v - R = v + offset - p ceil(R/p).
            let offset = r.div_ceil(p) * p - r;
            let mut buffer = vec![0u32; size];
            reduce_balanced(x, &mut buffer, r / 2, offset, field);
            forward(&mut buffer, field);
            *out = buffer;
        });
        Spectrum { size, values }
    }

    /// The pointwise product of two spectra of one size.
    pub(super) fn multiply(&self, a: &Spectrum, b: &Spectrum) -> Spectrum {
        self.multiply_into(
            Spectrum {
                size: a.size,
                values: a.values.clone(),
            },
            b,
        )
    }

    /// The pointwise product of two spectra of one size, in the place of `a`.
    pub(super) fn multiply_into(&self, mut a: Spectrum, b: &Spectrum) -> Spectrum {
        assert_eq!(a.size, b.size);
        let size = a.size;
        self.per_prime(&mut a.values, size, |i, out| {
            let field = &self.fields[i];
            pointwise(out, &b.values[i], field.pointwise_factor(size), field.mont);
        });
        a
    }

    /// The pointwise square of a spectrum, in its place.
    pub(super) fn square_into(&self, mut a: Spectrum) -> Spectrum {
        let size = a.size;
        self.per_prime(&mut a.values, size, |i, out| {
            let field = &self.fields[i];
            square(out, field.pointwise_factor(size), field.mont);
        });
        a
    }

    /// Coefficients `ranges` of the cyclic convolution whose spectrum is
    /// `product`, reduced modulo `out`.
    pub(super) fn coefficients(
        &self,
        mut product: Spectrum,
        ranges: &[Range<usize>],
        out: &Reducer,
    ) -> Vec<Vec<u64>> {
        assert!(ranges.iter().all(|range| range.end <= product.size));
        self.per_prime(&mut product.values, product.size, |i, values| {
            inverse(values, &self.fields[i]);
        });
        // Garner's digits in place: values[i] becomes d_i with
        // x = d_0 + d_1 p_0 + d_2 p_0 p_1 + ... in [0, P).
        let k = self.fields.len();
        for range in ranges {
            for i in 0..k {
                let (done, rest) = product.values.split_at_mut(i);
                let digits: Vec<&[u32]> = done.iter().map(|d| &d[range.clone()]).collect();
                garner_digit(
                    &mut rest[0][range.clone()],
                    &digits,
                    &self.garner_radix[i],
                    self.garner_inverse[i],
                    self.fields[i].mont,
                );
            }
        }
        let q = out.modulus();
        // p_0 ... p_{j-1} mod q, and -P mod q.
        let mut radix_mod_q = Vec::with_capacity(k);
        let mut prefix = 1u64 % q;
        for field in &self.fields {
            radix_mod_q.push(prefix);
            prefix = out.mul(prefix, u64::from(field.mont.p));
        }
        let minus_p_mod_q = (q - prefix) % q;
        let values = &product.values;
        let exact = |index: usize| {
            let negative = self.above_half(|j| values[j][index]);
            let mut total: u128 = (0..k)
                .map(|j| u128::from(values[j][index]) * u128::from(radix_mod_q[j]))
                .sum();
            if negative {
                total += u128::from(minus_p_mod_q);
            }
            out.rem(total)
        };
        ranges
            .iter()
            .map(|range| range.clone().map(exact).collect())
            .collect()
    }

    /// Whether the mixed-radix number with digits `digit(0)` (least
    /// significant) to `digit(k - 1)` exceeds `(P - 1) / 2`: then its class
    /// stands for the negative `x - P`. The top digit nearly always decides.
    #[inline(always)]
    fn above_half(&self, digit: impl Fn(usize) -> u32) -> bool {
        let top = self.fields.len() - 1;
        let high = digit(top);
        high > self.half_digits[0]
            || (high == self.half_digits[0]
                && (0..top)
                    .rev()
                    .map(&digit)
                    .gt(self.half_digits[1..].iter().copied()))
    }

    /// Coefficients `range` of the cyclic convolution whose spectrum is
    /// `product`, reduced modulo `out`.
    pub(super) fn coefficient_range(
        &self,
        product: Spectrum,
        range: Range<usize>,
        out: &Reducer,
    ) -> Vec<u64> {
        let mut values = self.coefficients(product, std::slice::from_ref(&range), out);
        values.pop().expect("one range")
    }

    /// The cyclic convolution of `a` and `b` on `size` points, reduced modulo
    /// `out`: the whole operation, for tests and small products.
    #[cfg(test)]
    pub(super) fn convolve(&self, a: &[u64], b: &[u64], size: usize, out: &Reducer) -> Vec<u64> {
        let product = self.multiply(&self.spectrum(a, size), &self.spectrum(b, size));
        self.coefficient_range(product, 0..size, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn transform_primes_are_primes_with_deep_roots() {
        for p in PRIMES {
            assert!(crate::modular::is_prime(u64::from(p)), "{p}");
            assert!(p < 1 << 30);
            assert_eq!((p - 1) % (1 << MAX_LOG_SIZE), 0, "{p}");
        }
    }

    #[test]
    fn reducer_matches_division() {
        let mut rng = Rng(1);
        let moduli = [
            1u64,
            2,
            3,
            4,
            1_953_125,
            1 << 14,
            32_000_000_000,
            3_814_697_265_625,
            (1 << 63) - 1,
            3_200_000_000_000_000_000,
        ];
        for &q in &moduli {
            let reducer = Reducer::new(q);
            for _ in 0..20_000 {
                let x = (u128::from(rng.below(q)) << 64) | u128::from(rng.next_u64());
                assert_eq!(u128::from(reducer.rem(x)), x % u128::from(q), "{x} mod {q}");
            }
            for x in [0u128, 1, u128::from(q) - 1, (u128::from(q) << 64) - 1] {
                assert_eq!(u128::from(reducer.rem(x)), x % u128::from(q), "{x} mod {q}");
            }
        }
    }

    /// The exact cyclic convolution of the balanced representatives.
    fn schoolbook(a: &[u64], b: &[u64], size: usize, r: u64, out: u64) -> Vec<u64> {
        let balanced = |x: u64| {
            if x > r / 2 {
                i128::from(x) - i128::from(r)
            } else {
                i128::from(x)
            }
        };
        let mut c = vec![0i128; size];
        for (i, &x) in a.iter().enumerate() {
            for (j, &y) in b.iter().enumerate() {
                c[(i + j) % size] += balanced(x) * balanced(y);
            }
        }
        c.iter()
            .map(|&v| v.rem_euclid(i128::from(out)) as u64)
            .collect()
    }

    #[test]
    fn convolution_equals_schoolbook() {
        let mut rng = Rng(2);
        // Odd and even moduli, small and up to 2^62, as inputs and as outputs.
        let moduli = [
            (1_953_125u64, 1_953_125u64),
            (1 << 13, 1 << 14),
            (1 << 22, 1 << 23),
            (16_000_000_000, 32_000_000_000),
            (3_814_697_265_625, 3_814_697_265_625),
            (1_600_000_000_000_000_000, 3_200_000_000_000_000_000),
            (7, 7),
        ];
        for &(r, out) in &moduli {
            for size in [1usize, 2, 4, 8, 64, 512, 2048] {
                let conv = Convolution::new(r, size.max(2048), 2).unwrap();
                let reducer = Reducer::new(out);
                let la = 1 + rng.below(size as u64) as usize;
                let lb = 1 + rng.below(size as u64) as usize;
                let mut a: Vec<u64> = (0..la).map(|_| rng.below(r)).collect();
                let b: Vec<u64> = (0..lb).map(|_| rng.below(r)).collect();
                // Extreme representatives: the largest magnitudes, both signs.
                if la > 3 {
                    a[0] = r / 2;
                    a[1] = r / 2 + 1;
                    a[2] = r - 1;
                }
                let fast = conv.convolve(&a, &b, size, &reducer);
                assert_eq!(fast, schoolbook(&a, &b, size, r, out), "r {r} size {size}");
            }
        }
    }

    #[test]
    fn vector_kernels_equal_the_portable_ones() {
        if !avx2() {
            return;
        }
        let mut rng = Rng(5);
        for &p in &PRIMES[..3] {
            // Past 2^15 points the vector transforms run by cache blocks.
            for log in (4..=12).chain([16, 17]) {
                let n = 1usize << log;
                let field = PrimeField::new(p, n);
                let m = field.mont;
                // Lazy inputs anywhere in [0, 2p).
                let x: Vec<u32> = (0..n).map(|_| rng.below(2 * u64::from(p)) as u32).collect();
                let y: Vec<u32> = (0..n).map(|_| rng.below(2 * u64::from(p)) as u32).collect();
                let (mut fast, mut slow) = (x.clone(), x.clone());
                forward(&mut fast, &field);
                forward_portable(&mut slow, &field);
                assert_eq!(fast, slow, "forward p {p} n {n}");
                let (mut fast, mut slow) = (x.clone(), x.clone());
                inverse(&mut fast, &field);
                inverse_portable(&mut slow, &field);
                assert_eq!(fast, slow, "inverse p {p} n {n}");
                // The transforms invert each other up to the factor n.
                let mut round = x.clone();
                forward(&mut round, &field);
                inverse(&mut round, &field);
                let scale = u64::from(p) - (u64::from(p) - 1) / n as u64;
                let scale = field.mont.strict(field.mont.to_form(scale as u32));
                let expect: Vec<u32> = x.iter().map(|&v| m.strict(m.strict(v))).collect();
                let got: Vec<u32> = round.iter().map(|&v| m.strict(m.mul(v, scale))).collect();
                assert_eq!(got, expect, "round trip p {p} n {n}");
                let (mut fast, mut slow) = (x.clone(), x.clone());
                let factor = field.pointwise_factor(n);
                pointwise(&mut fast, &y, factor, m);
                pointwise_portable(&mut slow, &y, factor, m);
                assert_eq!(fast, slow, "pointwise p {p} n {n}");
                let wide: Vec<u64> = (0..n + 3).map(|_| rng.below(1 << 63)).collect();
                let (half, offset) = (rng.below(1 << 63), rng.below(1 << 40));
                let (mut fast, mut slow) = (vec![0u32; n + 3], vec![0u32; n + 3]);
                reduce_balanced(&wide, &mut fast, half, offset, &field);
                reduce_balanced_portable(&wide, &mut slow, half, offset, &field);
                assert_eq!(fast, slow, "reduce p {p} n {n}");
                let digits: Vec<Vec<u32>> = (0..3)
                    .map(|_| (0..n + 5).map(|_| rng.below(1 << 30) as u32).collect())
                    .collect();
                let views: Vec<&[u32]> = digits.iter().map(|d| &d[..]).collect();
                let radix = [rng.below(u64::from(p)) as u32, 5, p - 1];
                let mut value: Vec<u32> = (0..n + 5)
                    .map(|_| rng.below(2 * u64::from(p)) as u32)
                    .collect();
                let mut slow = value.clone();
                garner_digit(&mut value, &views, &radix, 12345, m);
                garner_digit_portable(&mut slow, &views, &radix, 12345, m);
                assert_eq!(value, slow, "garner p {p} n {n}");
            }
        }
    }

    #[test]
    fn the_sign_turns_just_above_half_the_product() {
        for modulus in [16_000_000_000u64, 1_953_125, 1_600_000_000_000_000_000] {
            let conv = Convolution::new(modulus, 1 << 20, 1).unwrap();
            let primes: Vec<u32> = conv.fields.iter().map(|f| f.mont.p).collect();
            let product: BigUint = primes.iter().map(|&p| BigUint::from(p)).product();
            let half = (&product - 1u32) / 2u32;
            let digits_of = |x: &BigUint| {
                let mut rest = x.clone();
                primes
                    .iter()
                    .map(|&p| {
                        let digit = (&rest % p).to_u32_digits().first().copied().unwrap_or(0);
                        rest /= p;
                        digit
                    })
                    .collect::<Vec<u32>>()
            };
            let one = BigUint::from(1u32);
            for (x, negative) in [
                (BigUint::from(0u32), false),
                (half.clone() - &one, false),
                (half.clone(), false),
                (half.clone() + &one, true),
                (half.clone() + BigUint::from(primes[0]), true),
                (half.clone() - BigUint::from(primes[0]), false),
                (&product - &one, true),
            ] {
                let digits = digits_of(&x);
                assert_eq!(conv.above_half(|j| digits[j]), negative, "{x}");
            }
        }
    }

    #[test]
    fn the_bound_holds_at_the_extremes() {
        // All coefficients at the largest magnitude: the sums reach the bound
        // size * (R/2)^2 that the primes are chosen for.
        for (r, size) in [
            (16_000_000_000u64, 4096usize),
            (1_953_125, 4096),
            (1 << 22, 1024),
        ] {
            let conv = Convolution::new(r, size, 1).unwrap();
            let out = Reducer::new(2 * r);
            for fill in [r / 2, r / 2 + 1] {
                let a = vec![fill; size];
                let fast = conv.convolve(&a, &a, size, &out);
                assert_eq!(
                    fast,
                    schoolbook(&a, &a, size, r, 2 * r),
                    "r {r} fill {fill}"
                );
            }
        }
    }
}
