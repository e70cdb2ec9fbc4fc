//! The quotient `s` and the square root `r` of one character, computed in one of
//! the two coprime parts of the working modulus `2M = 2^(b+1+d) * 5^d`.
//!
//! Each part keeps its residues in a form whose long dot products vectorise:
//! the power of two in wrapping `u16` lanes (16 per AVX2 register; `u32` from
//! `d = 12` on), the power of five up to `5^9` as three `i16` limb arrays for
//! `pmaddwd` (Karatsuba, see [`FiveSplit`]), larger powers in `u32` lanes summed
//! in `u64`, or in `u64` lanes summed in `u128`. An AVX2 build of the dot
//! products is chosen at run time; the portable build is the fallback.

use super::rational::Fraction;
use crate::modular::mul_mod;
use crate::{Error, Result};

/// Arithmetic of one part of the modulus, and how it stores residue arrays.
trait Ring: Send + 'static {
    type Store: Send + 'static;
    /// An array of `len` zero residues.
    fn store(&self, len: usize) -> Self::Store;
    fn get(&self, store: &Self::Store, i: usize) -> u64;
    fn set(&self, store: &mut Self::Store, i: usize, x: u64);
    /// An integer reduced into the part.
    fn reduce(&self, x: i64) -> u64;
    /// `sum_{t < len} a[a_at + t] * b[b_at + t]`, reduced.
    fn dot(&self, a: &Self::Store, a_at: usize, b: &Self::Store, b_at: usize, len: usize) -> u64;
    /// `a - b`, reduced.
    fn sub(&self, a: u64, b: u64) -> u64;
    /// `r_k` from `2 r_k = s_k - 2 * pairs - middle^2`.
    fn halve(&self, s: u64, pairs: u64, middle: Option<u64>) -> Result<u64>;
    /// The modulus of the stored root coefficients.
    fn root_modulus(&self) -> u64;
}

/// `Ring` storage members for a plain vector of lanes.
macro_rules! plain_store {
    ($lane:ty) => {
        type Store = Vec<$lane>;
        fn store(&self, len: usize) -> Vec<$lane> {
            vec![0; len]
        }
        fn get(&self, store: &Vec<$lane>, i: usize) -> u64 {
            u64::from(store[i])
        }
        fn set(&self, store: &mut Vec<$lane>, i: usize, x: u64) {
            store[i] = x as $lane;
        }
        fn dot(&self, a: &Vec<$lane>, a_at: usize, b: &Vec<$lane>, b_at: usize, len: usize) -> u64 {
            self.lane_dot(&a[a_at..a_at + len], &b[b_at..b_at + len])
        }
    };
}

/// `$name`: `$portable`, compiled a second time for AVX2 as `$avx2`, which
/// runs when the CPU has it.
macro_rules! avx2_dispatch {
    ($(#[$doc:meta])* $name:ident = $portable:ident / $avx2:ident ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        /// # Safety
        /// The CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2($($arg: $ty),*) -> $ret {
            $portable($($arg),*)
        }

        $(#[$doc])*
        fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, as checked just above, the only
                // requirement of `$avx2`.
                return unsafe { $avx2($($arg),*) };
            }
            $portable($($arg),*)
        }
    };
}

#[inline(always)]
fn wrapping_dot_u16_portable(a: &[u16], b: &[u16]) -> u16 {
    a.iter()
        .zip(b)
        .fold(0u16, |acc, (&x, &y)| acc.wrapping_add(x.wrapping_mul(y)))
}

#[inline(always)]
fn wrapping_dot_u32_portable(a: &[u32], b: &[u32]) -> u32 {
    a.iter()
        .zip(b)
        .fold(0u32, |acc, (&x, &y)| acc.wrapping_add(x.wrapping_mul(y)))
}

/// `sum a_i b_i` of `i16` values, summing `chunk` products (which must fit an
/// `i32`) between widenings to `i64`; vectorises to `pmaddwd`.
#[inline(always)]
fn chunked_dot_i16_portable(a: &[i16], b: &[i16], chunk: usize) -> i64 {
    let mut total = 0i64;
    for (ca, cb) in a.chunks(chunk).zip(b.chunks(chunk)) {
        let part = ca.iter().zip(cb).fold(0i32, |acc, (&x, &y)| {
            acc.wrapping_add(i32::from(x).wrapping_mul(i32::from(y)))
        });
        total += i64::from(part);
    }
    total
}

/// `sum a_i b_i mod p` for residues below `p < 2^32`, summing `chunk` products
/// (which cannot overflow `u64`) between reductions.
#[inline(always)]
fn chunked_dot_u32_portable(a: &[u32], b: &[u32], p: u64, chunk: usize) -> u64 {
    let mut total = 0u64;
    for (ca, cb) in a.chunks(chunk).zip(b.chunks(chunk)) {
        let part = ca.iter().zip(cb).fold(0u64, |acc, (&x, &y)| {
            acc.wrapping_add(u64::from(x).wrapping_mul(u64::from(y)))
        });
        total = (total + part % p) % p;
    }
    total
}

avx2_dispatch!(
    /// `sum a_i b_i mod 2^16`.
    wrapping_dot_u16 = wrapping_dot_u16_portable / wrapping_dot_u16_avx2 (a: &[u16], b: &[u16]) -> u16
);
avx2_dispatch!(
    /// `sum a_i b_i mod 2^32`.
    wrapping_dot_u32 = wrapping_dot_u32_portable / wrapping_dot_u32_avx2 (a: &[u32], b: &[u32]) -> u32
);
avx2_dispatch!(
    /// `sum a_i b_i mod p` for `p < 2^32`.
    chunked_dot_u32 = chunked_dot_u32_portable / chunked_dot_u32_avx2 (a: &[u32], b: &[u32], p: u64, chunk: usize) -> u64
);

/// The three dot products of [`FiveSplit`]: `sum a[t]_i b[t]_i` for `t < 3`,
/// where `chunk` products of any of them fit an `i32`.
fn split_dot(a: [&[i16]; 3], b: [&[i16]; 3], chunk: usize) -> [i64; 3] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, as checked just above, the only
        // requirement of `split_dot_avx2`.
        return unsafe { split_dot_avx2(a, b, chunk) };
    }
    [0, 1, 2].map(|t| chunked_dot_i16_portable(a[t], b[t], chunk))
}

/// [`split_dot`] with explicit AVX2: `pmaddwd` of 16 `i16` pairs into 8 `i32`
/// lanes, three accumulators. A lane receives `chunk` products over `8 * chunk`
/// terms, so lanes are widened to `i64` every `8 * chunk` terms.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn split_dot_avx2(a: [&[i16]; 3], b: [&[i16]; 3], chunk: usize) -> [i64; 3] {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_setzero_si256,
        _mm256_storeu_si256,
    };
    const WIDTH: usize = 16;
    let len = a[0].len();
    assert!(a.iter().chain(&b).all(|x| x.len() == len));
    let block = (8 * chunk / WIDTH).max(1) * WIDTH;
    let mut totals = [0i64; 3];
    let mut i = 0;
    while i + WIDTH <= len {
        let end = (i + block).min(len - (len - i) % WIDTH);
        let mut acc = [_mm256_setzero_si256(); 3];
        while i < end {
            for t in 0..3 {
                // SAFETY: `i + WIDTH <= end <= len` (`end` is `i` plus a
                // multiple of `WIDTH`, at most `len`), the length of all six
                // slices (asserted): 16 `i16`s at `i` are inside each.
                let (x, y) = unsafe {
                    (
                        _mm256_loadu_si256(a[t].as_ptr().add(i).cast::<__m256i>()),
                        _mm256_loadu_si256(b[t].as_ptr().add(i).cast::<__m256i>()),
                    )
                };
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(x, y));
            }
            i += WIDTH;
        }
        for t in 0..3 {
            let mut lanes = [0i32; 8];
            // SAFETY: `lanes` is 8 `i32`s, the 32 bytes of one vector, and an
            // unaligned store needs no alignment.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), acc[t]) };
            totals[t] += lanes.iter().map(|&v| i64::from(v)).sum::<i64>();
        }
    }
    for j in i..len {
        for t in 0..3 {
            totals[t] += i64::from(a[t][j]) * i64::from(b[t][j]);
        }
    }
    totals
}

/// Residues modulo `2^bits` (quotient) and `2^(bits-1)` (root); `bits <= 32`.
///
/// Halving: the integers satisfy `2 r_k = s_k - S_k` with
/// `S_k = 2 sum_{0<i<k/2} r_i r_{k-i} + [k even] r_{k/2}^2`. Suppose `s_k` is
/// known modulo `2^K` and every earlier `r_i` only modulo `2^(K-1)`. Changing
/// `r_i` by a multiple `2^(K-1) t` changes `2 r_i r_{k-i}` by `2^K t r_{k-i}`, and
/// `r_{k/2}^2` by `2^K t r_{k/2} + 2^(2K-2) t^2`, both `0 mod 2^K` since `K >= 2`.
/// So `V = s_k - S_k mod 2^K` is computable and equals `2 r_k mod 2^K`: it is
/// even (an odd `V` reveals a bug), and `V / 2 = r_k mod 2^(K-1)`, which is what
/// the next steps need. The `r_k` are integers (signed row counts), which is what
/// makes `V` even. Wrapping `u16`/`u32` arithmetic is exact modulo `2^K`.
macro_rules! two_adic {
    ($name:ident, $lane:ty, $dot:ident) => {
        struct $name {
            bits: u32,
        }

        impl $name {
            fn mask(&self) -> u64 {
                (1u64 << self.bits) - 1
            }

            fn lane_dot(&self, a: &[$lane], b: &[$lane]) -> u64 {
                u64::from($dot(a, b)) & self.mask()
            }
        }

        impl Ring for $name {
            plain_store!($lane);

            fn reduce(&self, x: i64) -> u64 {
                (x as u64) & self.mask()
            }
            fn sub(&self, a: u64, b: u64) -> u64 {
                a.wrapping_sub(b) & self.mask()
            }
            fn halve(&self, s: u64, pairs: u64, middle: Option<u64>) -> Result<u64> {
                let square = middle.map_or(0, |r| r.wrapping_mul(r));
                let v = s.wrapping_sub(pairs.wrapping_mul(2)).wrapping_sub(square) & self.mask();
                if v & 1 == 1 {
                    return Err(Error::Internal(
                        "kayles: odd value to halve in the square root".into(),
                    ));
                }
                Ok(v >> 1)
            }
            fn root_modulus(&self) -> u64 {
                1 << (self.bits - 1)
            }
        }
    };
}

two_adic!(TwoAdic16, u16, wrapping_dot_u16);
two_adic!(TwoAdic32, u32, wrapping_dot_u32);

/// The members shared by the rings modulo `p = 5^d`: 2 is invertible, so
/// `r_k = (s_k - S_k) / 2` holds exactly modulo `p`.
macro_rules! five_adic_common {
    () => {
        fn reduce(&self, x: i64) -> u64 {
            x.rem_euclid(self.p as i64) as u64
        }
        fn sub(&self, a: u64, b: u64) -> u64 {
            (a + self.p - b) % self.p
        }
        fn halve(&self, s: u64, pairs: u64, middle: Option<u64>) -> Result<u64> {
            let mul = |a: u64, b: u64| {
                if self.p <= 1 << 32 {
                    a * b % self.p
                } else {
                    mul_mod(a, b, self.p)
                }
            };
            let square = middle.map_or(0, |r| mul(r, r));
            let taken = (2 * pairs + square) % self.p;
            Ok(mul(self.sub(s, taken), self.p.div_ceil(2)))
        }
        fn root_modulus(&self) -> u64 {
            self.p
        }
    };
}

/// Bits of the low limb of [`FiveSplit`].
const LOW_BITS: u32 = 10;

/// Residues modulo `p = 5^d <= 5^9` as balanced values `v` (`|v| <= p / 2`)
/// split into `v = lo + 2^10 hi`, `lo` in `[-512, 512)`, with `lo + hi` kept too:
/// three `i16` arrays. A dot product is three `pmaddwd` dot products,
/// `sum v v' = L + 2^10 (S - L - H) + 2^20 H` with `L = sum lo lo'`,
/// `H = sum hi hi'`, `S = sum (lo + hi)(lo' + hi')` (Karatsuba), each exact in
/// `i32` over `chunk` terms and in `i64` over all.
struct FiveSplit {
    p: u64,
    chunk: usize,
}

struct SplitStore {
    lo: Vec<i16>,
    hi: Vec<i16>,
    sum: Vec<i16>,
}

impl FiveSplit {
    /// The ring for `p` when its limbs fit, that is for `p <= 5^9`.
    fn new(p: u64) -> Option<FiveSplit> {
        let half = p / 2;
        let low = 1u64 << (LOW_BITS - 1);
        let high = (half + low) >> LOW_BITS;
        let sum = low + high;
        if sum > i16::MAX as u64 || p > 5u64.pow(9) {
            return None;
        }
        // Products are at most sum^2; keep whole vectors in a chunk.
        let chunk = (i32::MAX as u64 / (sum * sum).max(1)) as usize / 64 * 64;
        (chunk >= 256).then_some(FiveSplit {
            p,
            chunk: chunk.min(1 << 20),
        })
    }
}

impl Ring for FiveSplit {
    type Store = SplitStore;

    fn store(&self, len: usize) -> SplitStore {
        SplitStore {
            lo: vec![0; len],
            hi: vec![0; len],
            sum: vec![0; len],
        }
    }

    fn get(&self, store: &SplitStore, i: usize) -> u64 {
        let v = i64::from(store.lo[i]) + (i64::from(store.hi[i]) << LOW_BITS);
        v.rem_euclid(self.p as i64) as u64
    }

    fn set(&self, store: &mut SplitStore, i: usize, x: u64) {
        let v = if x > self.p / 2 {
            x as i64 - self.p as i64
        } else {
            x as i64
        };
        let lo = ((v + 512) & 1023) - 512;
        let hi = (v - lo) >> LOW_BITS;
        store.lo[i] = lo as i16;
        store.hi[i] = hi as i16;
        store.sum[i] = (lo + hi) as i16;
    }

    fn dot(&self, a: &SplitStore, a_at: usize, b: &SplitStore, b_at: usize, len: usize) -> u64 {
        let [low, high, both] = split_dot(
            [
                &a.lo[a_at..][..len],
                &a.hi[a_at..][..len],
                &a.sum[a_at..][..len],
            ],
            [
                &b.lo[b_at..][..len],
                &b.hi[b_at..][..len],
                &b.sum[b_at..][..len],
            ],
            self.chunk,
        );
        let total = low + ((both - low - high) << LOW_BITS) + (high << (2 * LOW_BITS));
        total.rem_euclid(self.p as i64) as u64
    }

    five_adic_common!();
}

/// Residues modulo `p = 5^d < 2^32` in `u32` lanes, products summed in `u64`.
struct FiveAdic32 {
    p: u64,
    chunk: usize,
}

impl FiveAdic32 {
    fn lane_dot(&self, a: &[u32], b: &[u32]) -> u64 {
        chunked_dot_u32(a, b, self.p, self.chunk)
    }
}

impl Ring for FiveAdic32 {
    plain_store!(u32);
    five_adic_common!();
}

/// Residues modulo `p = 5^d < 2^42` in `u64` lanes: products below `2^84`,
/// summed in `u128`.
struct FiveAdic64 {
    p: u64,
}

impl FiveAdic64 {
    fn lane_dot(&self, a: &[u64], b: &[u64]) -> u64 {
        let sum = a.iter().zip(b).fold(0u128, |acc, (&x, &y)| {
            acc.wrapping_add(u128::from(x) * u128::from(y))
        });
        (sum % u128::from(self.p)) as u64
    }
}

impl Ring for FiveAdic64 {
    plain_store!(u64);
    five_adic_common!();
}

/// One part of a character's computation, behind a trait object so a series can
/// pick its representation at run time.
pub(super) trait Residues: Send {
    /// Computes and stores `s_k` (all `s_j`, `j < k`, known).
    fn quotient(&mut self, k: usize) -> u64;
    /// Computes `s_k`, then `r_k` (all `r_j`, `j < k`, known).
    fn step(&mut self, k: usize) -> Result<()>;
    fn root(&self, k: usize) -> u64;
    fn set_root(&mut self, k: usize, value: u64);
    fn root_modulus(&self) -> u64;
}

struct Part<R: Ring> {
    ring: R,
    /// Numerator coefficients, reduced.
    num: Vec<u64>,
    /// Denominator coefficients `1..=terms` (the constant term is 1).
    den: R::Store,
    terms: usize,
    /// Number of coefficients the arrays hold.
    cap: usize,
    /// `s_k` at `cap - 1 - k`, so that `sum_j den_j s_{k-j}` reads both forwards.
    quotient_rev: R::Store,
    root: R::Store,
    /// `r_k` at `cap - 1 - k`.
    root_rev: R::Store,
}

impl<R: Ring> Part<R> {
    fn new(ring: R, fraction: &Fraction, cap: usize) -> Self {
        let num = fraction.num.iter().map(|&x| ring.reduce(x)).collect();
        let terms = fraction.den.len() - 1;
        let mut den = ring.store(terms);
        for (j, &x) in fraction.den[1..].iter().enumerate() {
            ring.set(&mut den, j, ring.reduce(x));
        }
        Part {
            num,
            den,
            terms,
            cap,
            quotient_rev: ring.store(cap),
            root: ring.store(cap),
            root_rev: ring.store(cap),
            ring,
        }
    }
}

impl<R: Ring> Residues for Part<R> {
    fn quotient(&mut self, k: usize) -> u64 {
        let terms = self.terms.min(k);
        let sum = self
            .ring
            .dot(&self.den, 0, &self.quotient_rev, self.cap - k, terms);
        let s = self.ring.sub(self.num.get(k).copied().unwrap_or(0), sum);
        self.ring.set(&mut self.quotient_rev, self.cap - 1 - k, s);
        s
    }

    fn step(&mut self, k: usize) -> Result<()> {
        let s = self.quotient(k);
        let r = if k == 0 {
            if s != 1 {
                return Err(Error::Internal("kayles: quotient must start with 1".into()));
            }
            1
        } else {
            let pairs = (k - 1) / 2;
            let sum = self
                .ring
                .dot(&self.root, 1, &self.root_rev, self.cap - k, pairs);
            let middle = k
                .is_multiple_of(2)
                .then(|| self.ring.get(&self.root, k / 2));
            self.ring.halve(s, sum, middle)?
        };
        self.set_root(k, r);
        Ok(())
    }

    fn root(&self, k: usize) -> u64 {
        self.ring.get(&self.root, k)
    }

    fn set_root(&mut self, k: usize, value: u64) {
        self.ring.set(&mut self.root, k, value);
        self.ring.set(&mut self.root_rev, self.cap - 1 - k, value);
    }

    fn root_modulus(&self) -> u64 {
        self.ring.root_modulus()
    }
}

/// The power-of-two part: quotient modulo `2^bits`, root modulo `2^(bits-1)`.
pub(super) fn two_adic(bits: u32, fraction: &Fraction, cap: usize) -> Box<dyn Residues> {
    assert!((2..=32).contains(&bits), "2-adic precision out of range");
    if bits <= 16 {
        Box::new(Part::new(TwoAdic16 { bits }, fraction, cap))
    } else {
        Box::new(Part::new(TwoAdic32 { bits }, fraction, cap))
    }
}

/// The power-of-five part, modulo `5^digits` (`digits <= 18`).
pub(super) fn five_adic(digits: u32, fraction: &Fraction, cap: usize) -> Box<dyn Residues> {
    let p = 5u64.pow(digits);
    if let Some(ring) = FiveSplit::new(p) {
        return Box::new(Part::new(ring, fraction, cap));
    }
    // Products of two residues that fit `u64` between reductions.
    let chunk = (p - 1)
        .checked_mul(p - 1)
        .map_or(0, |sq| u64::MAX / sq.max(1));
    if p < 1 << 32 && chunk >= 64 {
        let chunk = usize::try_from(chunk.min(1 << 30)).unwrap_or(1 << 30);
        Box::new(Part::new(FiveAdic32 { p, chunk }, fraction, cap))
    } else {
        Box::new(Part::new(FiveAdic64 { p }, fraction, cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[i16], b: &[i16]) -> i64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| i64::from(x) * i64::from(y))
            .sum()
    }

    #[test]
    fn dot_kernels_agree_with_naive_sums() {
        let ring = FiveSplit::new(5u64.pow(9)).unwrap();
        // Extreme limbs over many chunks: no i32 lane may overflow.
        let mut store = ring.store(20_000);
        for i in 0..20_000 {
            let x = if i % 3 == 0 {
                ring.p / 2
            } else {
                ring.p / 2 + 1
            };
            ring.set(&mut store, i, x);
            assert_eq!(ring.get(&store, i), x);
        }
        for len in [0, 1, 15, 16, 17, 100, 4095, 4096, 4097, 19_999] {
            let a = [&store.lo[..len], &store.hi[..len], &store.sum[..len]];
            let b = [&store.sum[1..=len], &store.lo[1..=len], &store.hi[1..=len]];
            let expected = [0, 1, 2].map(|t| naive(a[t], b[t]));
            assert_eq!(split_dot(a, b, ring.chunk), expected, "len {len}");
            let portable = [0, 1, 2].map(|t| chunked_dot_i16_portable(a[t], b[t], ring.chunk));
            assert_eq!(portable, expected, "len {len}");
            let exact: u128 = (0..len)
                .map(|i| u128::from(ring.get(&store, i)) * u128::from(ring.get(&store, i + 1)))
                .sum();
            assert_eq!(
                u128::from(ring.dot(&store, 0, &store, 1, len)),
                exact % u128::from(ring.p)
            );
        }
        let x: Vec<u16> = (0..1000).map(|i| (i * 40_503 % 65_536) as u16).collect();
        assert_eq!(
            wrapping_dot_u16(&x[1..], &x[..999]),
            wrapping_dot_u16_portable(&x[1..], &x[..999])
        );
        let y: Vec<u32> = (0..1000u64)
            .map(|i| (i * 2_654_435_761 % 1_953_125) as u32)
            .collect();
        assert_eq!(
            wrapping_dot_u32(&y[1..], &y[..999]),
            wrapping_dot_u32_portable(&y[1..], &y[..999])
        );
        let chunked = chunked_dot_u32(&y[1..], &y[..999], 1_953_125, 64);
        let exact: u64 = y[1..]
            .iter()
            .zip(&y[..999])
            .map(|(&a, &b)| u64::from(a) * u64::from(b))
            .sum();
        assert_eq!(chunked, exact % 1_953_125);
    }
}
