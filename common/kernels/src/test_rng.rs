//! SplitMix64: the one small seeded generator of the tests (the kernels' unit
//! tests here and the integration tests' support). It is the same on every
//! platform and whatever crate versions are in the lock file, so a seed
//! replays the same run. Not for anything but test data and test schedules.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator whose state is the seed mixed with a constant (the chaos
    /// and network-fault suites' seeds replay through this; `Rng(seed)`
    /// starts from the seed itself).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (up to a bias of `n / 2^64`), of `n`'s type.
    pub fn below<N: Bound>(&mut self, n: N) -> N {
        N::from_u64(self.next_u64() % n.to_u64())
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// A duration of `lo..=hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The integer types [`Rng::below`] draws: positive bounds that fit in `u64`.
pub trait Bound: Copy {
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! bound {
    ($($t:ty),*) => {$(
        impl Bound for $t {
            fn to_u64(self) -> u64 {
                u64::try_from(self).expect("a bound that fits in u64")
            }
            fn from_u64(v: u64) -> Self {
                <$t>::try_from(v).expect("below the bound")
            }
        }
    )*};
}

bound!(u8, u16, u32, u64, usize, i32, i64);

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn splitmix64_reference_values_and_bounds() {
        // The first outputs of SplitMix64 seeded with 0.
        let mut rng = Rng(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut rng = Rng::new(7);
        for n in 1..50usize {
            assert!(rng.below(n) < n);
            let x = rng.range(3, 3 + n as u64);
            assert!((3..=3 + n as u64).contains(&x));
        }
        assert!(rng.below(5i32) >= 0);
        assert!(!rng.chance(0) && rng.chance(100));
    }
}
