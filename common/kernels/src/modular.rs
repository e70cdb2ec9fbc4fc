//! Modular arithmetic shared by the kernels: products through `u128`, powers,
//! inverses, a deterministic primality test for `u64`, and the CRT.

/// `a * b mod m` without overflow for any `u64` operands.
#[inline]
pub fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    ((a as u128 * b as u128) % m as u128) as u64
}

/// `base^exp mod m`.
pub fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut result = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = mul_mod(result, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    result
}

/// The inverse of `a` modulo `m`, if `gcd(a, m) = 1`.
pub fn inv_mod(a: u64, m: u64) -> Option<u64> {
    let (mut old_r, mut r) = (a as i128 % m as i128, m as i128);
    let (mut old_s, mut s) = (1i128, 0i128);
    while r != 0 {
        let q = old_r / r;
        (old_r, r) = (r, old_r - q * r);
        (old_s, s) = (s, old_s - q * s);
    }
    if old_r != 1 {
        return None;
    }
    Some(old_s.rem_euclid(m as i128) as u64)
}

/// Deterministic Miller–Rabin for every `u64` (the first twelve primes are a
/// complete witness set below 3.3 * 10^24).
pub fn is_prime(n: u64) -> bool {
    const WITNESSES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in WITNESSES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let mut d = n - 1;
    let mut s = 0;
    while d.is_multiple_of(2) {
        d /= 2;
        s += 1;
    }
    'witness: for a in WITNESSES {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// Joins `x ≡ a (mod m)` and `x ≡ b (mod n)` for coprime `m`, `n` with `m * n`
/// below 2^64 into `x mod m*n`.
pub fn crt_pair(a: u64, m: u64, b: u64, n: u64) -> Option<u64> {
    let mn = m.checked_mul(n)?;
    let m_inv = inv_mod(m % n, n)?;
    // x = a + m * ((b - a) * m^-1 mod n)
    let diff = (b as i128 - a as i128).rem_euclid(n as i128) as u64;
    let k = mul_mod(diff, m_inv, n);
    Some((a as u128 + m as u128 * k as u128) as u64 % mn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primality_matches_trial_division() {
        let trial = |n: u64| {
            n >= 2
                && (2..)
                    .take_while(|d| d * d <= n)
                    .all(|d| !n.is_multiple_of(d))
        };
        for n in 0..5000u64 {
            assert_eq!(is_prime(n), trial(n), "n = {n}");
        }
        assert!(is_prime(1_000_000_007));
        assert!(is_prime(18_446_744_073_709_551_557)); // largest prime below 2^64
        assert!(!is_prime(3_215_031_751)); // strong pseudoprime to bases 2, 3, 5, 7
    }

    #[test]
    fn inverse_and_crt_round_trip() {
        let p = 1_000_000_007;
        for a in [1u64, 2, 12345, p - 1] {
            assert_eq!(mul_mod(a, inv_mod(a, p).unwrap(), p), 1);
        }
        assert_eq!(inv_mod(6, 9), None);
        for x in [0u64, 1, 777, 16_383 * 1_953_125 - 1] {
            let (m, n) = (16_384, 1_953_125);
            assert_eq!(crt_pair(x % m, m, x % n, n), Some(x));
        }
    }
}
