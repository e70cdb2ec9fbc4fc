//! The checksum step `c -> (base * c + letter) mod modulus` in 64-bit arithmetic
//! with a Barrett reduction instead of a division.

use crate::{Result, invalid};

/// Largest ASCII code of a move letter (`U`).
pub(crate) const MAX_LETTER: u64 = b'U' as u64;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Arith {
    pub(crate) base: u64,
    pub(crate) modulus: u64,
    /// floor(2^64 / modulus)
    barrett: u64,
}

impl Arith {
    /// Checks that `modulus >= 2`, `base < modulus` and that
    /// `base * (modulus - 1) + 85` fits in a `u64`.
    pub(crate) fn new(base: u64, modulus: u64) -> Result<Arith> {
        if modulus < 2 {
            return Err(invalid!("modulus must be at least 2, got {modulus}"));
        }
        if base >= modulus {
            return Err(invalid!(
                "base must be below the modulus, got base {base} and modulus {modulus}"
            ));
        }
        let fits = base
            .checked_mul(modulus - 1)
            .and_then(|x| x.checked_add(MAX_LETTER))
            .is_some();
        if !fits {
            return Err(invalid!(
                "base {base} and modulus {modulus} are too large: \
                 base * (modulus - 1) + 85 must be below 2^64"
            ));
        }
        Ok(Arith {
            base,
            modulus,
            barrett: ((1u128 << 64) / u128::from(modulus)) as u64,
        })
    }

    /// `x mod modulus` for any `x`.
    #[inline]
    pub(crate) fn reduce(&self, x: u64) -> u64 {
        // q <= x / m and q > x / m - 2, so one correction is enough.
        let q = ((u128::from(x) * u128::from(self.barrett)) >> 64) as u64;
        let r = x - q * self.modulus;
        if r >= self.modulus {
            r - self.modulus
        } else {
            r
        }
    }

    /// One checksum step; `c < modulus`.
    #[inline]
    pub(crate) fn step(&self, c: u64, letter: u8) -> u64 {
        self.reduce(self.base * c + u64::from(letter))
    }
}
