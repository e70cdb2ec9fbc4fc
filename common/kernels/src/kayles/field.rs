//! Arithmetic modulo one NTT prime: Montgomery products and the twiddle
//! tables of every transform level. The portable transforms in `ntt` and the
//! AVX2 ones in `ntt_avx2` both build on it.

use crate::modular::{inv_mod, pow_mod};

/// The largest transform: `2^23` points.
pub(super) const MAX_LOG_SIZE: u32 = 23;

/// Montgomery arithmetic modulo an odd `p < 2^30` with `2^32` as the radix.
/// Products take operands below `2p` (or one below `4p`, the other below `p`)
/// and return values below `2p`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Montgomery {
    pub(super) p: u32,
    /// `-p^-1 mod 2^32`.
    pub(super) neg_inv: u32,
    /// `2^64 mod p`: multiplying by it enters Montgomery form.
    r2: u32,
}

impl Montgomery {
    pub(super) fn new(p: u32) -> Montgomery {
        // Newton's iteration for the inverse modulo 2^32: each step doubles the
        // correct low bits, starting from 3 correct bits (p * p = 1 mod 8).
        let mut inv = p;
        for _ in 0..4 {
            inv = inv.wrapping_mul(2u32.wrapping_sub(p.wrapping_mul(inv)));
        }
        let r2 = ((1u128 << 64) % u128::from(p)) as u32;
        Montgomery {
            p,
            neg_inv: inv.wrapping_neg(),
            r2,
        }
    }

    /// `t * 2^-32 mod p`, in `[0, 2p)`, for `t < p * 2^32`.
    #[inline(always)]
    pub(super) fn reduce(self, t: u64) -> u32 {
        let m = (t as u32).wrapping_mul(self.neg_inv);
        (t.wrapping_add(u64::from(m) * u64::from(self.p)) >> 32) as u32
    }

    #[inline(always)]
    pub(super) fn mul(self, a: u32, b: u32) -> u32 {
        self.reduce(u64::from(a) * u64::from(b))
    }

    /// `x * 2^32 mod p` in `[0, 2p)`.
    pub(super) fn to_form(self, x: u32) -> u32 {
        self.mul(x, self.r2)
    }

    /// `x` reduced from `[0, 2p)` to `[0, p)`.
    #[inline(always)]
    pub(super) fn strict(self, x: u32) -> u32 {
        x.min(x.wrapping_sub(self.p))
    }

    /// `x` reduced from `[0, 4p)` to `[0, 2p)`.
    #[inline(always)]
    pub(super) fn half_strict(self, x: u32) -> u32 {
        x.min(x.wrapping_sub(2 * self.p))
    }
}

/// One prime: its arithmetic and the twiddle factors of every level.
#[derive(Debug)]
pub(super) struct PrimeField {
    pub(super) mont: Montgomery,
    /// `forward[len + j] = w_{2 len}^j` for `j < len`, in Montgomery form.
    pub(super) forward: Vec<u32>,
    /// `inverse[len + j] = w_{2 len}^-j`.
    pub(super) inverse: Vec<u32>,
    /// `floor(2^64 / p)`, for reducing `u64` values.
    barrett: u64,
}

impl PrimeField {
    pub(super) fn new(p: u32, max_size: usize) -> PrimeField {
        let mont = Montgomery::new(p);
        let p64 = u64::from(p);
        let root = pow_mod(generator(p64), (p64 - 1) >> MAX_LOG_SIZE, p64);
        let root_inv = inv_mod(root, p64).expect("a root of unity is invertible");
        let table = |base: u64| {
            let size = max_size.max(2);
            let mut table = vec![0u32; size];
            // The top level by repeated products, each lower level from every
            // other entry of the one above: w_{2 len}^j = w_{4 len}^{2j}.
            let top = size / 2;
            let step_exp = (1u64 << MAX_LOG_SIZE) / size as u64;
            let step = mont.strict(mont.to_form(pow_mod(base, step_exp, p64) as u32));
            let mut w = mont.strict(mont.to_form(1));
            for slot in &mut table[top..] {
                *slot = w;
                w = mont.strict(mont.mul(w, step));
            }
            let mut len = top / 2;
            while len >= 1 {
                for j in 0..len {
                    table[len + j] = table[2 * len + 2 * j];
                }
                len /= 2;
            }
            table
        };
        PrimeField {
            mont,
            forward: table(root),
            inverse: table(root_inv),
            barrett: u64::MAX / p64,
        }
    }

    /// `x mod p` for any `u64`.
    #[inline(always)]
    pub(super) fn reduce_u64(&self, x: u64) -> u32 {
        let q = ((u128::from(x) * u128::from(self.barrett)) >> 64) as u64;
        let r = x - q * u64::from(self.mont.p);
        // The estimate is low by at most 2.
        let r = r.min(r.wrapping_sub(u64::from(self.mont.p)));
        r.min(r.wrapping_sub(u64::from(self.mont.p))) as u32
    }

    /// `c` such that `mul(mul(a, b), c) = a * b / size mod p`.
    pub(super) fn pointwise_factor(&self, size: usize) -> u32 {
        let p = u64::from(self.mont.p);
        let size_inv = inv_mod(size as u64 % p, p).expect("sizes are powers of two") as u32;
        self.mont
            .to_form(self.mont.strict(self.mont.to_form(size_inv)))
    }
}

/// The smallest generator of the multiplicative group modulo the prime `p`.
fn generator(p: u64) -> u64 {
    let mut factors = Vec::new();
    let mut rest = p - 1;
    let mut f = 2;
    while f * f <= rest {
        if rest.is_multiple_of(f) {
            factors.push(f);
            while rest.is_multiple_of(f) {
                rest /= f;
            }
        }
        f += 1;
    }
    if rest > 1 {
        factors.push(rest);
    }
    (2..p)
        .find(|&g| factors.iter().all(|&q| pow_mod(g, (p - 1) / q, p) != 1))
        .expect("a prime has a generator")
}
