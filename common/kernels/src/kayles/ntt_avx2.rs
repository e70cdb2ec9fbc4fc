//! The transform kernels of `ntt` with explicit AVX2: eight `u32` lanes per
//! register, Montgomery products by `vpmuludq` on the even and the odd lanes.
//! Every function computes exactly what its portable counterpart in `ntt`
//! computes (the tests compare them), and every one requires AVX2: each is
//! compiled for it, and `ntt` calls them only after it has seen the CPU has it.
//! Calls between them need no proof (they share the feature); only the loads
//! and stores, which are not bounds-checked, are unsafe.

use std::arch::x86_64::{
    __m128i, __m256i, _mm_loadu_si128, _mm256_add_epi32, _mm256_add_epi64, _mm256_and_si256,
    _mm256_blend_epi32, _mm256_broadcastsi128_si256, _mm256_cmpgt_epi64, _mm256_loadu_si256,
    _mm256_min_epu32, _mm256_mul_epu32, _mm256_permute2x128_si256, _mm256_permutevar8x32_epi32,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setr_epi32, _mm256_srli_epi64,
    _mm256_storeu_si256, _mm256_sub_epi32, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64,
    _mm256_unpacklo_epi32, _mm256_unpacklo_epi64,
};

use super::field::{Montgomery, PrimeField};

/// Lanes per register.
const LANES: usize = 8;

/// The broadcast constants of one prime.
#[derive(Clone, Copy)]
struct Lanes {
    p: __m256i,
    two_p: __m256i,
    neg_inv: __m256i,
}

/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn lanes(m: Montgomery) -> Lanes {
    Lanes {
        p: _mm256_set1_epi32(m.p as i32),
        two_p: _mm256_set1_epi32((2 * m.p) as i32),
        neg_inv: _mm256_set1_epi32(m.neg_inv as i32),
    }
}

/// The 8 lanes at `ptr`.
///
/// # Safety
/// `ptr` is valid for reads of 8 `u32`s (any alignment); the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load(ptr: *const u32) -> __m256i {
    // SAFETY: the 32 bytes at `ptr` are readable, as the caller guarantees;
    // an unaligned load needs no alignment.
    unsafe { _mm256_loadu_si256(ptr.cast::<__m256i>()) }
}

/// Writes the 8 lanes at `ptr`.
///
/// # Safety
/// `ptr` is valid for writes of 8 `u32`s (any alignment); the CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store(ptr: *mut u32, v: __m256i) {
    // SAFETY: the 32 bytes at `ptr` are writable, as the caller guarantees;
    // an unaligned store needs no alignment.
    unsafe { _mm256_storeu_si256(ptr.cast::<__m256i>(), v) }
}

/// Lanewise Montgomery product `a b 2^-32 mod p` in `[0, 2p)`, for `a b < p 2^32`.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn mul(a: __m256i, b: __m256i, c: Lanes) -> __m256i {
    let t_even = _mm256_mul_epu32(a, b);
    let t_odd = _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), _mm256_srli_epi64::<32>(b));
    // Only the low 32 bits of m = t * (-p^-1) matter, and mul_epu32 reads
    // only those.
    let m_even = _mm256_mul_epu32(t_even, c.neg_inv);
    let m_odd = _mm256_mul_epu32(t_odd, c.neg_inv);
    let u_even = _mm256_add_epi64(t_even, _mm256_mul_epu32(m_even, c.p));
    let u_odd = _mm256_add_epi64(t_odd, _mm256_mul_epu32(m_odd, c.p));
    // The results are the high halves of the 64-bit lanes.
    _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(u_even), u_odd)
}

/// `[0, 4p)` to `[0, 2p)`.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn half_strict(x: __m256i, c: Lanes) -> __m256i {
    _mm256_min_epu32(x, _mm256_sub_epi32(x, c.two_p))
}

/// `[0, 2p)` to `[0, p)`.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn strict(x: __m256i, c: Lanes) -> __m256i {
    _mm256_min_epu32(x, _mm256_sub_epi32(x, c.p))
}

/// `u + v` and `u - v`, both in `[0, 2p)`, for `u, v` in `[0, 2p)`.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn add_sub(u: __m256i, v: __m256i, c: Lanes) -> (__m256i, __m256i) {
    (
        half_strict(_mm256_add_epi32(u, v), c),
        half_strict(_mm256_sub_epi32(_mm256_add_epi32(u, c.two_p), v), c),
    )
}

/// `(u + v, (u - v) w)`: the forward butterfly.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn forward_butterfly(u: __m256i, v: __m256i, w: __m256i, c: Lanes) -> (__m256i, __m256i) {
    (
        half_strict(_mm256_add_epi32(u, v), c),
        mul(_mm256_sub_epi32(_mm256_add_epi32(u, c.two_p), v), w, c),
    )
}

/// `(u + v w, u - v w)`: the inverse butterfly.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn inverse_butterfly(u: __m256i, v: __m256i, w: __m256i, c: Lanes) -> (__m256i, __m256i) {
    add_sub(u, mul(v, w, c), c)
}

/// The 128-bit twiddle group `table[at..at + 4]` in both halves.
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
fn twiddle_quad(table: &[u32], at: usize) -> __m256i {
    assert!(at + 4 <= table.len());
    // SAFETY: the 4 lanes (16 bytes) at `at` are inside `table`, as asserted;
    // an unaligned load needs no alignment.
    let quad = unsafe { _mm_loadu_si128(table.as_ptr().add(at).cast::<__m128i>()) };
    _mm256_broadcastsi128_si256(quad)
}

/// One forward level of half-length `len >= 8`.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn forward_level(a: &mut [u32], len: usize, field: &PrimeField) {
    let c = lanes(field.mont);
    let twiddles = &field.forward[len..2 * len];
    assert!(len.is_multiple_of(LANES) && a.len().is_multiple_of(2 * len));
    for block in a.chunks_exact_mut(2 * len) {
        let (lo, hi) = block.split_at_mut(len);
        for j in (0..len).step_by(LANES) {
            // SAFETY: `len` is a multiple of 8 (asserted), so `j + 8 <= len`,
            // the length of `lo`, `hi` and `twiddles`.
            unsafe {
                let (x, y) = forward_butterfly(
                    load(lo.as_ptr().add(j)),
                    load(hi.as_ptr().add(j)),
                    load(twiddles.as_ptr().add(j)),
                    c,
                );
                store(lo.as_mut_ptr().add(j), x);
                store(hi.as_mut_ptr().add(j), y);
            }
        }
    }
}

/// Forward levels of half-lengths `2 len` and `len >= 8` in one pass.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn forward_levels(a: &mut [u32], len: usize, field: &PrimeField) {
    let c = lanes(field.mont);
    let (outer_lo, outer_hi) = field.forward[2 * len..4 * len].split_at(len);
    let inner = &field.forward[len..2 * len];
    assert!(len.is_multiple_of(LANES) && a.len().is_multiple_of(4 * len));
    for block in a.chunks_exact_mut(4 * len) {
        let ptr = block.as_mut_ptr();
        for j in (0..len).step_by(LANES) {
            // SAFETY: `len` is a multiple of 8 (asserted), so `j + 8 <= len`:
            // `j + 3 len + 8 <= 4 len`, the length of `block`, and `j + 8` is
            // at most the length `len` of each twiddle slice.
            unsafe {
                let (p0, p1, p2, p3) = (
                    ptr.add(j),
                    ptr.add(j + len),
                    ptr.add(j + 2 * len),
                    ptr.add(j + 3 * len),
                );
                let (b0, b2) =
                    forward_butterfly(load(p0), load(p2), load(outer_lo.as_ptr().add(j)), c);
                let (b1, b3) =
                    forward_butterfly(load(p1), load(p3), load(outer_hi.as_ptr().add(j)), c);
                let w = load(inner.as_ptr().add(j));
                let (c0, c1) = forward_butterfly(b0, b1, w, c);
                let (c2, c3) = forward_butterfly(b2, b3, w, c);
                store(p0, c0);
                store(p1, c1);
                store(p2, c2);
                store(p3, c3);
            }
        }
    }
}

/// The forward levels of half-lengths 4, 2 and 1, on two blocks of 8 at a time.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn forward_tail(a: &mut [u32], field: &PrimeField) {
    let c = lanes(field.mont);
    assert!(a.len().is_multiple_of(16) && field.forward.len() >= 8);
    let w4 = twiddle_quad(&field.forward, 4);
    let (f2, f3) = (field.forward[2] as i32, field.forward[3] as i32);
    let w2 = _mm256_setr_epi32(f2, f3, f2, f3, f2, f3, f2, f3);
    // SAFETY: `a.len()` is a multiple of 16 (asserted), so `at + 16 <= a.len()`
    // in every step: `ptr` and `ptr + 8`, and the loads and stores of 8 lanes
    // at them, are inside `a`.
    unsafe {
        for at in (0..a.len()).step_by(16) {
            let ptr = a.as_mut_ptr().add(at);
            let (v, v2) = (load(ptr), load(ptr.add(LANES)));
            // Half-length 4: first halves of the blocks against second halves.
            let (lo, hi) = (
                _mm256_permute2x128_si256::<0x20>(v, v2),
                _mm256_permute2x128_si256::<0x31>(v, v2),
            );
            let (y_lo, y_hi) = forward_butterfly(lo, hi, w4, c);
            // Half-length 2: [y0 y1 y4 y5] against [y2 y3 y6 y7].
            let (z_a, z_b) = forward_butterfly(
                _mm256_unpacklo_epi64(y_lo, y_hi),
                _mm256_unpackhi_epi64(y_lo, y_hi),
                w2,
                c,
            );
            // Half-length 1 (twiddle 1): [z0 z2 z4 z6] against [z1 z3 z5 z7].
            let (p, q) = (
                _mm256_unpacklo_epi32(z_a, z_b),
                _mm256_unpackhi_epi32(z_a, z_b),
            );
            let (s, t) = add_sub(_mm256_unpacklo_epi64(p, q), _mm256_unpackhi_epi64(p, q), c);
            let (r1, r2) = (_mm256_unpacklo_epi32(s, t), _mm256_unpackhi_epi32(s, t));
            store(ptr, _mm256_permute2x128_si256::<0x20>(r1, r2));
            store(ptr.add(LANES), _mm256_permute2x128_si256::<0x31>(r1, r2));
        }
    }
}

/// Points of a block that stays in the core's cache while all its levels run.
const CACHE_BLOCK: usize = 1 << 15;

/// The forward levels from half-length `len` down to 1.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn forward_from(a: &mut [u32], mut len: usize, field: &PrimeField) {
    while len >= 32 {
        forward_levels(a, len / 2, field);
        len /= 4;
    }
    while len >= 8 {
        forward_level(a, len, field);
        len /= 2;
    }
    forward_tail(a, field);
}

/// The forward transform (see `ntt::forward_portable`); `a.len() >= 16`. The
/// levels whose butterflies span more than a cache block run over the whole
/// array, then each block runs all the others while it is in cache: the same
/// butterflies in another order.
///
/// # Safety
/// The CPU has AVX2 (`ntt::forward` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn forward(a: &mut [u32], field: &PrimeField) {
    let n = a.len();
    let mut len = n / 2;
    while 2 * len > CACHE_BLOCK {
        if len > CACHE_BLOCK {
            forward_levels(a, len / 2, field);
            len /= 4;
        } else {
            forward_level(a, len, field);
            len /= 2;
        }
    }
    for block in a.chunks_exact_mut(n.min(CACHE_BLOCK)) {
        forward_from(block, len, field);
    }
}

/// One inverse level of half-length `len >= 8`.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn inverse_level(a: &mut [u32], len: usize, field: &PrimeField) {
    let c = lanes(field.mont);
    let twiddles = &field.inverse[len..2 * len];
    assert!(len.is_multiple_of(LANES) && a.len().is_multiple_of(2 * len));
    for block in a.chunks_exact_mut(2 * len) {
        let (lo, hi) = block.split_at_mut(len);
        for j in (0..len).step_by(LANES) {
            // SAFETY: as in `forward_level`.
            unsafe {
                let (x, y) = inverse_butterfly(
                    load(lo.as_ptr().add(j)),
                    load(hi.as_ptr().add(j)),
                    load(twiddles.as_ptr().add(j)),
                    c,
                );
                store(lo.as_mut_ptr().add(j), x);
                store(hi.as_mut_ptr().add(j), y);
            }
        }
    }
}

/// Inverse levels of half-lengths `len >= 8` and `2 len` in one pass.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn inverse_levels(a: &mut [u32], len: usize, field: &PrimeField) {
    let c = lanes(field.mont);
    let (outer_lo, outer_hi) = field.inverse[2 * len..4 * len].split_at(len);
    let inner = &field.inverse[len..2 * len];
    assert!(len.is_multiple_of(LANES) && a.len().is_multiple_of(4 * len));
    for block in a.chunks_exact_mut(4 * len) {
        let ptr = block.as_mut_ptr();
        for j in (0..len).step_by(LANES) {
            // SAFETY: as in `forward_levels`.
            unsafe {
                let (p0, p1, p2, p3) = (
                    ptr.add(j),
                    ptr.add(j + len),
                    ptr.add(j + 2 * len),
                    ptr.add(j + 3 * len),
                );
                let w = load(inner.as_ptr().add(j));
                let (b0, b1) = inverse_butterfly(load(p0), load(p1), w, c);
                let (b2, b3) = inverse_butterfly(load(p2), load(p3), w, c);
                let (c0, c2) = inverse_butterfly(b0, b2, load(outer_lo.as_ptr().add(j)), c);
                let (c1, c3) = inverse_butterfly(b1, b3, load(outer_hi.as_ptr().add(j)), c);
                store(p0, c0);
                store(p1, c1);
                store(p2, c2);
                store(p3, c3);
            }
        }
    }
}

/// The inverse levels of half-lengths 1, 2 and 4, on two blocks of 8 at a time.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
fn inverse_head(a: &mut [u32], field: &PrimeField) {
    let c = lanes(field.mont);
    assert!(a.len().is_multiple_of(16) && field.inverse.len() >= 8);
    let w4 = twiddle_quad(&field.inverse, 4);
    let (i2, i3) = (field.inverse[2] as i32, field.inverse[3] as i32);
    let w2 = _mm256_setr_epi32(i2, i2, i3, i3, i2, i2, i3, i3);
    // SAFETY: as in `forward_tail`: `at + 16 <= a.len()` in every step.
    unsafe {
        for at in (0..a.len()).step_by(16) {
            let ptr = a.as_mut_ptr().add(at);
            let (v, v2) = (load(ptr), load(ptr.add(LANES)));
            let (lo, hi) = (
                _mm256_permute2x128_si256::<0x20>(v, v2),
                _mm256_permute2x128_si256::<0x31>(v, v2),
            );
            // Half-length 1 (twiddle 1): [x0 x4 x2 x6] against [x1 x5 x3 x7].
            let (p, q) = (_mm256_unpacklo_epi32(lo, hi), _mm256_unpackhi_epi32(lo, hi));
            let (s, t) = add_sub(_mm256_unpacklo_epi64(p, q), _mm256_unpackhi_epi64(p, q), c);
            // Half-length 2: [y0 y4 y1 y5] against [y2 y6 y3 y7].
            let (g, h) = inverse_butterfly(
                _mm256_unpacklo_epi64(s, t),
                _mm256_unpackhi_epi64(s, t),
                w2,
                c,
            );
            // Half-length 4: [z0 z1 z2 z3] against [z4 z5 z6 z7].
            let (k, l) = (_mm256_unpacklo_epi32(g, h), _mm256_unpackhi_epi32(g, h));
            let (out_lo, out_hi) = inverse_butterfly(
                _mm256_unpacklo_epi32(k, l),
                _mm256_unpackhi_epi32(k, l),
                w4,
                c,
            );
            store(ptr, _mm256_permute2x128_si256::<0x20>(out_lo, out_hi));
            store(
                ptr.add(LANES),
                _mm256_permute2x128_si256::<0x31>(out_lo, out_hi),
            );
        }
    }
}

/// The inverse transform (see `ntt::inverse_portable`); `a.len() >= 16`. Each
/// cache block first runs the levels within it, then the wider levels run
/// over the whole array.
///
/// # Safety
/// The CPU has AVX2 (`ntt::inverse` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn inverse(a: &mut [u32], field: &PrimeField) {
    let n = a.len();
    let block = n.min(CACHE_BLOCK);
    for chunk in a.chunks_exact_mut(block) {
        inverse_head(chunk, field);
        let mut len = 8;
        while 4 * len <= block {
            inverse_levels(chunk, len, field);
            len *= 4;
        }
        while len < block {
            inverse_level(chunk, len, field);
            len *= 2;
        }
    }
    let mut len = block;
    while len < n {
        if 4 * len <= n {
            inverse_levels(a, len, field);
            len *= 4;
        } else {
            inverse_level(a, len, field);
            len *= 2;
        }
    }
}

/// `a = a b c` lanewise; `a.len()` a multiple of 8.
///
/// # Safety
/// The CPU has AVX2 (`ntt::pointwise` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn pointwise(a: &mut [u32], b: &[u32], factor: u32, m: Montgomery) {
    let c = lanes(m);
    let f = _mm256_set1_epi32(factor as i32);
    assert!(a.len().is_multiple_of(LANES) && b.len() >= a.len());
    for j in (0..a.len()).step_by(LANES) {
        // SAFETY: `a.len()` is a multiple of 8 and at most `b.len()`
        // (asserted), so `j + 8 <= a.len() <= b.len()`.
        unsafe {
            let x = mul(
                mul(load(a.as_ptr().add(j)), load(b.as_ptr().add(j)), c),
                f,
                c,
            );
            store(a.as_mut_ptr().add(j), x);
        }
    }
}

/// `a = a a c` lanewise; `a.len()` a multiple of 8.
///
/// # Safety
/// The CPU has AVX2 (`ntt::square` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn square(a: &mut [u32], factor: u32, m: Montgomery) {
    let c = lanes(m);
    let f = _mm256_set1_epi32(factor as i32);
    assert!(a.len().is_multiple_of(LANES));
    for j in (0..a.len()).step_by(LANES) {
        // SAFETY: `a.len()` is a multiple of 8 (asserted), so `j + 8 <= a.len()`.
        unsafe {
            let x = load(a.as_ptr().add(j));
            store(a.as_mut_ptr().add(j), mul(mul(x, x, c), f, c));
        }
    }
}

/// `out[i] = (x[i] + [x[i] > half] offset) mod p` for `u64` values; `x.len()` a
/// multiple of 8, `out` at least as long. Each value `v = hi 2^32 + lo` is
/// reduced as `REDC(hi (2^64 mod p) + lo (2^32 mod p))`, below `3p`.
///
/// # Safety
/// The CPU has AVX2 (`ntt::reduce_balanced` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn reduce_balanced(
    x: &[u64],
    out: &mut [u32],
    half: u64,
    offset: u64,
    field: &PrimeField,
) {
    let m = field.mont;
    let c = lanes(m);
    let p64 = u64::from(m.p);
    let two_64 = ((1u128 << 64) % u128::from(p64)) as i64;
    let two_32 = ((1u64 << 32) % p64) as i64;
    assert!(x.len().is_multiple_of(LANES) && out.len() >= x.len());
    let half_v = _mm256_set1_epi64x(half as i64);
    let offset_v = _mm256_set1_epi64x(offset as i64);
    let high_factor = _mm256_set1_epi64x(two_64);
    let low_factor = _mm256_set1_epi64x(two_32);
    let order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    let reduce4 = |v: __m256i| {
        // Values are below 2^63, so the signed comparison is exact.
        let v = _mm256_add_epi64(v, _mm256_and_si256(_mm256_cmpgt_epi64(v, half_v), offset_v));
        let t = _mm256_add_epi64(
            _mm256_mul_epu32(_mm256_srli_epi64::<32>(v), high_factor),
            _mm256_mul_epu32(v, low_factor),
        );
        let q = _mm256_mul_epu32(_mm256_mul_epu32(t, c.neg_inv), c.p);
        _mm256_add_epi64(t, q)
    };
    // SAFETY: `x.len()` is a multiple of 8 and at most `out.len()` (asserted),
    // so `j + 8 <= x.len() <= out.len()` in every step: the two loads of 4
    // `u64`s at `x[j]` and `x[j + 4]` and the store of 8 `u32`s at `out[j]`
    // are inside the slices.
    unsafe {
        for j in (0..x.len()).step_by(LANES) {
            let ptr = x.as_ptr().add(j).cast::<__m256i>();
            let first = reduce4(_mm256_loadu_si256(ptr));
            let second = reduce4(_mm256_loadu_si256(ptr.add(1)));
            // High halves: first in even lanes, second in odd lanes, then in order.
            let mixed = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(first), second);
            let r = _mm256_permutevar8x32_epi32(mixed, order);
            // [0, 3p) to [0, p).
            let r = strict(half_strict(r, c), c);
            store(out.as_mut_ptr().add(j), r);
        }
    }
}

/// One Garner digit: `value = (value - sum_j digits[j] radix[j]) inverse mod p`
/// lanewise, from `value` in `[0, 2p)` and digits below `2^30`, to `[0, p)`.
///
/// # Safety
/// The CPU has AVX2 (`ntt::garner_digit` checks it first).
#[target_feature(enable = "avx2")]
pub(super) fn garner_digit(
    value: &mut [u32],
    digits: &[&[u32]],
    radix: &[u32],
    inverse: u32,
    m: Montgomery,
) {
    let c = lanes(m);
    let inv = _mm256_set1_epi32(inverse as i32);
    let n = value.len();
    assert!(
        n.is_multiple_of(LANES)
            && digits.iter().all(|d| d.len() >= n)
            && radix.len() >= digits.len()
    );
    for j in (0..n).step_by(LANES) {
        // SAFETY: `n` is a multiple of 8 and every digit array holds at least
        // `n` (asserted), so `j + 8 <= n` is within `value` and each of them.
        unsafe {
            let mut v = load(value.as_ptr().add(j));
            for (d, &r) in digits.iter().zip(radix) {
                let term = mul(load(d.as_ptr().add(j)), _mm256_set1_epi32(r as i32), c);
                v = half_strict(_mm256_sub_epi32(_mm256_add_epi32(v, c.two_p), term), c);
            }
            store(value.as_mut_ptr().add(j), strict(mul(v, inv, c), c));
        }
    }
}
