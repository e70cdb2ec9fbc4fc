//! The inner loops of a cell step: sums of a few residue slices modulo `p`.
//!
//! Residues are below `p < 2^31`, so the sum of two of them fits a `u32` and one
//! conditional subtraction, written as `min(s, s - p)` (the wrapped difference is
//! huge when `s < p`), reduces it. The loops work on blocks of [`LANES`] residues
//! that the compiler turns into vector instructions. The callers compile their
//! loops twice, for the baseline target and with AVX2 (see [`Isa`]).

use std::ops::Range;

/// Residues per block of the inner loops.
const LANES: usize = 8;

type Lanes = [u32; LANES];

/// Which build of the loops runs: the portable one (`Isa<false>`) or the one
/// with AVX2 and POPCNT (`Isa<true>`). The loops are generic over `AVX` and take
/// an `Isa<AVX>`; since [`Isa::detect`] is the only way to make an `Isa<true>`,
/// holding one shows that the CPU runs those instructions, and the AVX2 loops
/// cannot be reached on a CPU without them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Isa<const AVX: bool> {
    /// Private: an `Isa<true>` comes from [`Isa::detect`] only.
    _detected: (),
}

impl Isa<false> {
    pub(crate) const PORTABLE: Isa<false> = Isa { _detected: () };
}

impl Isa<true> {
    /// `Some` on a CPU with AVX2 and POPCNT.
    #[inline]
    pub(crate) fn detect() -> Option<Isa<true>> {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("popcnt");
            avx2.then_some(Isa { _detected: () })
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
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
/// by blocks of [`LANES`]; with explicit AVX2 instructions when `AVX`
/// (instantiated only inside functions compiled for AVX2).
///
/// # Safety
/// `dst.len()` is a multiple of [`LANES`]: the AVX2 loops store whole blocks
/// unchecked. The caller checks it anyway, to choose between this function and
/// [`gather_scalar`].
#[inline(always)]
unsafe fn gather_lanes<const AVX: bool>(
    isa: Isa<AVX>,
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
            // SAFETY: `isa` is an `Isa<true>`, so the CPU has AVX2 and POPCNT
            // (see `Isa::detect`); `dst.len()` is a multiple of 8, as the
            // caller guarantees, and every source slice has the same length
            // (`slice` cuts it to `len`).
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
    let _ = isa;
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
fn zero<const AVX: bool>(isa: Isa<AVX>, d: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if AVX {
            // SAFETY: `isa` is an `Isa<true>`, so the CPU has AVX2 and POPCNT
            // (see `Isa::detect`), the features `avx2::zero` is compiled for.
            unsafe { avx2::zero(d) };
            return;
        }
    }
    let _ = isa;
    d.fill(0);
}

/// The AVX2 loops: 8 residues per instruction, `s mod p` as `min(s, s - p)`.
///
/// Every function is compiled for AVX2 and POPCNT, so a caller compiled
/// without them must know that the CPU has them: the callers hold an
/// `Isa<true>`.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// The 8 residues `s[i..i + 8]`.
    ///
    /// # Safety
    /// `i + 8 <= s.len()` (the load is not bounds-checked); the CPU has AVX2
    /// and POPCNT.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn load(s: &[u32], i: usize) -> __m256i {
        debug_assert!(i + 8 <= s.len());
        // SAFETY: the 32 bytes at `s[i]` lie inside `s`, as the caller
        // guarantees; an unaligned load needs no alignment.
        unsafe { _mm256_loadu_si256(s.as_ptr().add(i) as *const __m256i) }
    }

    /// `d[i..i + 8] = v`.
    ///
    /// # Safety
    /// `i + 8 <= d.len()` (the store is not bounds-checked); the CPU has AVX2
    /// and POPCNT.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    unsafe fn store(d: &mut [u32], i: usize, v: __m256i) {
        debug_assert!(i + 8 <= d.len());
        // SAFETY: the 32 bytes at `d[i]` lie inside `d`, as the caller
        // guarantees, and `d` is borrowed mutably.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().add(i) as *mut __m256i, v) }
    }

    /// `s mod p` for `s < 2p`, lanewise.
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    fn reduce(s: __m256i, p: __m256i) -> __m256i {
        _mm256_min_epu32(s, _mm256_sub_epi32(s, p))
    }

    /// `d = a`.
    ///
    /// The loaded values pass through an opaque all-ones mask, so that the
    /// compiler does not turn the loop into a call to `memcpy`: for the few
    /// hundred bytes of a polynomial the call costs more than the copy.
    ///
    /// # Safety
    /// `d.len()` is a multiple of 8 (the last block is not checked); the CPU
    /// has AVX2 and POPCNT. A shorter `a` panics.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn copy(d: &mut [u32], a: &[u32]) {
        assert!(a.len() >= d.len());
        let ones = std::hint::black_box(_mm256_set1_epi32(-1));
        let mut i = 0;
        while i < d.len() {
            // SAFETY: `i < d.len()`, both multiples of 8, so
            // `i + 8 <= d.len() <= a.len()`.
            unsafe { store(d, i, _mm256_and_si256(load(a, i), ones)) };
            i += 8;
        }
    }

    /// `d = 0` for any length, without a call to `memset` (see `copy`).
    ///
    /// # Safety
    /// The CPU has AVX2 and POPCNT.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub fn zero(d: &mut [u32]) {
        let zero = std::hint::black_box(_mm256_setzero_si256());
        let len = d.len();
        if len >= 8 {
            let mut i = 0;
            while i + 8 <= len {
                // SAFETY: `i + 8 <= len` by the loop condition.
                unsafe { store(d, i, zero) };
                i += 8;
            }
            // The tail, overlapping the last block.
            // SAFETY: `len >= 8`, so the block `len - 8..len` is inside `d`.
            unsafe { store(d, len - 8, zero) };
        } else {
            let z = std::hint::black_box(0);
            for x in d.iter_mut() {
                *x = z;
            }
        }
    }

    /// `d = a + b mod p`.
    ///
    /// # Safety
    /// As for `copy`; a shorter `a` or `b` panics.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn add2(d: &mut [u32], a: &[u32], b: &[u32], p: u32) {
        assert!(a.len() >= d.len() && b.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            // SAFETY: `i < d.len()`, both multiples of 8, so `i + 8` is at most
            // `d.len()`, and so at most `a.len()` and `b.len()`.
            unsafe { store(d, i, reduce(_mm256_add_epi32(load(a, i), load(b, i)), p)) };
            i += 8;
        }
    }

    /// `d = d + a + b mod p`.
    ///
    /// # Safety
    /// As for `copy`; a shorter `a` or `b` panics.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn acc2(d: &mut [u32], a: &[u32], b: &[u32], p: u32) {
        assert!(a.len() >= d.len() && b.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            // SAFETY: as in `add2`.
            unsafe {
                let ab = reduce(_mm256_add_epi32(load(a, i), load(b, i)), p);
                store(d, i, reduce(_mm256_add_epi32(load(d, i), ab), p));
            }
            i += 8;
        }
    }

    /// `d = d + a mod p`.
    ///
    /// # Safety
    /// As for `copy`; a shorter `a` panics.
    #[inline]
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn acc1(d: &mut [u32], a: &[u32], p: u32) {
        assert!(a.len() >= d.len());
        let p = _mm256_set1_epi32(p as i32);
        let mut i = 0;
        while i < d.len() {
            // SAFETY: as in `copy`.
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
    fn clear<const AVX: bool>(
        self,
        isa: Isa<AVX>,
        mask: u32,
        new: &Option<Range<usize>>,
        dst: &mut [u32],
    ) {
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
            zero(isa, &mut dst[old.start..lo.min(old.end)]);
        }
        if old.end > hi {
            zero(isa, &mut dst[hi.max(old.start)..old.end]);
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
    isa: Isa<AVX>,
    shape: &Shape,
    prior: Prior,
    mask: u32,
    sources: Sources<'_, F>,
    dst: &mut [u32],
    p: u32,
) {
    let range = shape.written(mask);
    prior.clear(isa, mask, &range, dst);
    let Some(range) = range else { return };
    let base = range.start - shape.shift(mask);
    let whole = range.len().is_multiple_of(LANES);
    let dst = &mut dst[range];
    let Sources { list, input, at } = sources;
    if whole {
        // SAFETY: `whole`: the length of `dst`, `range.len()`, is a multiple
        // of `LANES`.
        unsafe { gather_lanes(isa, dst, input, list, at, base, p) };
    } else {
        gather_scalar(dst, input, list, at, base, p);
    }
}
