//! Arithmetic modulo the shard's prime. The operands of `add_mod` and `sub_mod`
//! must already be reduced (below `p`); `mul_mod` takes any `u64`.

/// `a * b mod p`, through a `u128` product.
#[inline]
pub fn mul_mod(a: u64, b: u64, p: u64) -> u64 {
    ((a as u128 * b as u128) % p as u128) as u64
}

/// `a + b mod p` for `a, b < p`, for every `p` up to `u64::MAX`.
#[inline]
pub fn add_mod(a: u64, b: u64, p: u64) -> u64 {
    let (sum, carried) = a.overflowing_add(b);
    if carried || sum >= p {
        sum.wrapping_sub(p)
    } else {
        sum
    }
}

/// `a - b mod p` for `a, b < p`.
#[inline]
pub fn sub_mod(a: u64, b: u64, p: u64) -> u64 {
    if a >= b {
        a - b
    } else {
        a.wrapping_sub(b).wrapping_add(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P61: u64 = (1 << 61) - 1;

    #[test]
    fn products_do_not_overflow() {
        assert_eq!(mul_mod(P61 - 1, P61 - 1, P61), 1);
        assert_eq!(mul_mod(u64::MAX, u64::MAX, 1_000_000_007), {
            let m = u64::MAX % 1_000_000_007;
            m * m % 1_000_000_007
        });
        assert_eq!(mul_mod(5, 7, 2), 1);
    }

    #[test]
    fn sums_and_differences_wrap() {
        assert_eq!(add_mod(P61 - 1, 1, P61), 0);
        assert_eq!(add_mod(P61 - 1, P61 - 1, P61), P61 - 2);
        let big = u64::MAX - 58; // the largest prime below 2^64
        assert_eq!(add_mod(big - 1, big - 1, big), big - 2);
        assert_eq!(add_mod(3, 4, 11), 7);
        assert_eq!(sub_mod(3, 4, 11), 10);
        assert_eq!(sub_mod(0, big - 1, big), 1);
        assert_eq!(sub_mod(9, 4, 11), 5);
    }
}
