//! The inner loops of a cell step: sums of a few residue slices modulo `p`.
//!
//! Residues are below `p < 2^31`, so the sum of two of them fits a `u32` and one
//! conditional subtraction, written as `min(s, s - p)` (the wrapped difference is
//! huge when `s < p`), reduces it. The loops work on blocks of [`LANES`] residues
//! that the compiler turns into vector instructions. The callers compile their
//! loops twice, for the baseline target and with AVX2 (see [`has_avx2`]).

use std::ops::Range;

/// Residues per block of the inner loops.
const LANES: usize = 8;

type Lanes = [u32; LANES];

/// Whether the AVX2 versions of the loops (which also use POPCNT) may run on this
/// CPU.
#[inline]
pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `s mod p` for `s < 2p`.
#[inline(always)]
fn reduce(s: u32, p: u32) -> u32 {
    s.min(s.wrapping_sub(p))
}

#[inline(always)]
fn lanes(slice: &[u32], i: usize) -> &Lanes {
    slice[i * LANES..(i + 1) * LANES].try_into().unwrap()
}

#[inline(always)]
fn lanes_mut(slice: &mut [u32], i: usize) -> &mut Lanes {
    (&mut slice[i * LANES..(i + 1) * LANES]).try_into().unwrap()
}

/// `dst = sum over the sources of input[at(src) + base ..][..dst.len()]` mod `p`,
/// for `dst.len()` a multiple of [`LANES`]; with explicit AVX2 instructions when
/// `AVX` (only instantiated inside functions compiled for AVX2).
#[inline(always)]
fn gather_lanes<const AVX: bool>(
    dst: &mut [u32],
    input: &[u32],
    sources: &[u32],
    at: impl Fn(u32) -> usize,
    base: usize,
    p: u32,
) {
    let len = dst.len();
    let slice = |src: u32| &input[at(src) + base..][..len];
    #[cfg(target_arch = "x86_64")]
    {
        if AVX {
            // SAFETY: `AVX` is only set on CPUs with AVX2; all slices have `len`
            // residues, a multiple of 8.
            unsafe {
                match *sources {
                    [] => dst.fill(0),
                    [a] => avx2::copy(dst, slice(a)),
                    [a, b] => avx2::add2(dst, slice(a), slice(b), p),
                    [a, b, ref rest @ ..] => {
                        avx2::add2(dst, slice(a), slice(b), p);
                        let mut rest = rest;
                        while let [c, d, ref tail @ ..] = *rest {
                            avx2::acc2(dst, slice(c), slice(d), p);
                            rest = tail;
                        }
                        if let [c] = *rest {
                            avx2::acc1(dst, slice(c), p);
                        }
                    }
                }
            }
            return;
        }
    }
    let blocks = len / LANES;
    match *sources {
        [] => dst.fill(0),
        [a] => dst.copy_from_slice(slice(a)),
        [a, ref rest @ ..] => {
            dst.copy_from_slice(slice(a));
            for &e in rest {
                let e = slice(e);
                for i in 0..blocks {
                    let (x, d) = (lanes(e, i), lanes_mut(dst, i));
                    for j in 0..LANES {
                        d[j] = reduce(d[j] + x[j], p);
                    }
                }
            }
        }
    }
}

/// `d = 0`.
#[inline(always)]
fn zero<const AVX: bool>(d: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if AVX {
            // SAFETY: `AVX` is only set on CPUs with AVX2.
            unsafe { avx2::zero(d) };
            return;
        }
    }
    d.fill(0);
}

/// The AVX2 loops: 8 residues per instruction, `s mod p` as `min(s, s - p)`.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn load(s: &[u32], i: usize) -> __m256i {
        debug_assert!(i + 8 <= s.len());
        // SAFETY: i + 8 <= s.len().
        unsafe { _mm256_loadu_si256(s.as_ptr().add(i) as *const __m256i) }
    }

    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn store(d: &mut [u32], i: usize, v: __m256i) {
        debug_assert!(i + 8 <= d.len());
        // SAFETY: i + 8 <= d.len().
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().add(i) as *mut __m256i, v) }
    }

    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn reduce(s: __m256i, p: __m256i) -> __m256i {
        _mm256_min_epu32(s, _mm256_sub_epi32(s, p))
    }

    /// `d = a`. Safety: AVX2; `a.len() >= d.len()`, a multiple of 8.
    ///
    /// The loaded values pass through an opaque all-ones mask, so that the
    /// compiler does not turn the loop into a call to `memcpy`: for the few
    /// hundred bytes of a polynomial the call costs more than the copy.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn copy(d: &mut [u32], a: &[u32]) {
        assert!(a.len() >= d.len());
        let ones = std::hint::black_box(_mm256_set1_epi32(-1));
        let mut i = 0;
        while i < d.len() {
            unsafe { store(d, i, _mm256_and_si256(load(a, i), ones)) };
            i += 8;
        }
    }

    /// `d = 0` for any length, without a call to `memset` (see `copy`).
    /// Safety: AVX2.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn zero(d: &mut [u32]) {
        let zero = std::hint::black_box(_mm256_setzero_si256());
        let len = d.len();
        if len >= 8 {
            let mut i = 0;
            while i + 8 <= len {
                unsafe { store(d, i, zero) };
                i += 8;
            }
            // The tail, overlapping the last block.
            unsafe { store(d, len - 8, zero) };
        } else {
            let z = std::hint::black_box(0);
            for x in d.iter_mut() {
                *x = z;
            }
        }
    }

    /// `d = a + b mod p`. Safety: AVX2; lengths as for `copy`.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn add2(d: &mut [u32], a: &[u32], b: &[u32], p: u32) {
        assert!(a.len() >= d.len() && b.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            unsafe { store(d, i, reduce(_mm256_add_epi32(load(a, i), load(b, i)), p)) };
            i += 8;
        }
    }

    /// `d = d + a + b mod p`. Safety: AVX2; lengths as for `copy`.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn acc2(d: &mut [u32], a: &[u32], b: &[u32], p: u32) {
        assert!(a.len() >= d.len() && b.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            unsafe {
                let ab = reduce(_mm256_add_epi32(load(a, i), load(b, i)), p);
                store(d, i, reduce(_mm256_add_epi32(load(d, i), ab), p));
            }
            i += 8;
        }
    }

    /// `d = d + a mod p`. Safety: AVX2; lengths as for `copy`.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn acc1(d: &mut [u32], a: &[u32], p: u32) {
        assert!(a.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            unsafe { store(d, i, reduce(_mm256_add_epi32(load(d, i), load(a, i)), p)) };
            i += 8;
        }
    }
}

/// The same sum one residue at a time, for ranges too short for whole blocks.
#[inline(always)]
fn gather_scalar(
    dst: &mut [u32],
    input: &[u32],
    sources: &[u32],
    at: impl Fn(u32) -> usize,
    base: usize,
    p: u32,
) {
    dst.fill(0);
    for &src in sources {
        let s = &input[at(src) + base..][..dst.len()];
        for (d, &x) in dst.iter_mut().zip(s) {
            *d = reduce(*d + x, p);
        }
    }
}

/// The cell step being made: which cell is decided, and how many cells are
/// decided after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub stride: usize,
    pub side: usize,
    /// Column of the decided cell.
    pub col: usize,
    /// Row of the decided cell (>= 1).
    pub row: usize,
    /// Cells decided after this step.
    pub decided: usize,
}

impl Shape {
    /// The shape of cell step `step` (1-based).
    pub fn of_step(side: usize, stride: usize, step: usize) -> Shape {
        Shape {
            stride,
            side,
            col: (step - 1) % side,
            row: 1 + (step - 1) / side,
            decided: side + step,
        }
    }

    /// Inclusive range of degrees that can be non-zero in a target state with mask
    /// `mask` (see `graph::state_mask`) after the step; empty when `lo > hi`.
    ///
    /// Upper: every empty frontier cell is a decided cell that is not occupied.
    /// Lower: every occupied frontier cell counts, and the path from the top side
    /// to the top piece needs a cell in each of the rows `0..row-1`, none of them
    /// on the frontier; in row `row-1` too when no frontier cell of that row (the
    /// positions right of `col`) belongs to the top piece.
    #[inline(always)]
    pub fn bounds(&self, mask: u32) -> (usize, usize) {
        let occ = (mask & 0xFFFF).count_ones() as usize;
        let top_mask = mask >> 16;
        let hi = (self.stride - 1).min(self.decided - (self.side - occ));
        let top_above = (top_mask >> (self.col + 1)) != 0;
        let lo = occ + self.row - usize::from(top_above);
        (lo, hi)
    }

    /// Whether the decided cell is occupied in the target: its polynomial is then
    /// the sum of its sources' polynomials times `x`.
    #[inline(always)]
    pub fn shift(&self, mask: u32) -> usize {
        ((mask >> self.col) & 1) as usize
    }

    /// The degrees written for a target, `None` when its polynomial is zero: the
    /// bounds, widened to whole blocks of lanes when they fit in the polynomial.
    /// Every degree of the widened range gets its true coefficient, so the width
    /// does not matter for correctness; being a function of the state and the
    /// step alone, it tells later steps what a buffer holds.
    #[inline(always)]
    pub fn written(&self, mask: u32) -> Option<Range<usize>> {
        let (lo, hi) = self.bounds(mask);
        if lo > hi {
            return None;
        }
        let len = (hi + 1 - lo).next_multiple_of(LANES);
        if len <= self.stride - self.shift(mask) {
            let start = lo.min(self.stride - len);
            Some(start..start + len)
        } else {
            Some(lo..hi + 1)
        }
    }
}

/// What an output polynomial holds before a step writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Prior {
    /// Anything: every degree outside the written range is zeroed.
    Unknown,
    /// The same state's polynomial after an earlier step: zero outside of what
    /// that step wrote, so only that part needs clearing.
    Step(Shape),
}

impl Prior {
    /// Zeroes the degrees of `dst` that may be non-zero and lie outside `new`.
    #[inline(always)]
    fn clear<const AVX: bool>(self, mask: u32, new: &Option<Range<usize>>, dst: &mut [u32]) {
        let stride = dst.len();
        let (lo, hi) = new.as_ref().map_or((stride, stride), |r| (r.start, r.end));
        let old = match self {
            Prior::Unknown => 0..stride,
            Prior::Step(shape) => match shape.written(mask) {
                Some(r) => r,
                None => return,
            },
        };
        if old.start < lo {
            zero::<AVX>(&mut dst[old.start..lo.min(old.end)]);
        }
        if old.end > hi {
            zero::<AVX>(&mut dst[hi.max(old.start)..old.end]);
        }
    }
}

/// The source polynomials of one target: `input[at(src)..][..stride]` for each
/// `src` of `list`.
pub(crate) struct Sources<'a, F: Fn(u32) -> usize> {
    pub list: &'a [u32],
    pub input: &'a [u32],
    pub at: F,
}

/// Writes the polynomial of one target with mask `mask` into `dst` (`stride`
/// residues): the sum of its source polynomials, shifted by one degree when the
/// decided cell is occupied, zero outside the written range (`dst` held `prior`).
#[inline(always)]
pub(crate) fn target_poly<const AVX: bool, F: Fn(u32) -> usize>(
    shape: &Shape,
    prior: Prior,
    mask: u32,
    sources: Sources<'_, F>,
    dst: &mut [u32],
    p: u32,
) {
    let range = shape.written(mask);
    prior.clear::<AVX>(mask, &range, dst);
    let Some(range) = range else { return };
    let base = range.start - shape.shift(mask);
    let whole = range.len().is_multiple_of(LANES);
    let dst = &mut dst[range];
    let Sources { list, input, at } = sources;
    if whole {
        gather_lanes::<AVX>(dst, input, list, at, base, p);
    } else {
        gather_scalar(dst, input, list, at, base, p);
    }
}
