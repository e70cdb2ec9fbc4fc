//! Exact answers of the kinds that count modulo primes chosen for a bound
//! (`wasm`, `wasm-sweep`): the primes below 2^62 whose product passes the
//! bound, the spare primes drawn from the job's own digest that check it,
//! and the CRT that joins the residues.

use num_bigint::BigUint;
use sha2::{Digest, Sha256};

use crate::{Error, Result, invalid};
use tally_kernels::modular::{inv_mod, is_prime};

/// Every prime is below this (residues times residues fit in 128 bits).
pub const PRIME_LIMIT: u64 = 1 << 62;
/// The modulus when a job names none.
pub const DEFAULT_MODULUS: u64 = 1_000_000_007;
/// The largest bound an exact job may claim, in bits.
pub const MAX_BOUND_BITS: u32 = 4096;

/// Spare primes an exact job runs beyond those its bound needs (at most 4:
/// each is drawn from 8 bytes of a SHA-256).
pub const SPARE_PRIMES: usize = 1;
const _: () = assert!(SPARE_PRIMES >= 1 && SPARE_PRIMES <= 4);

/// The number below the product of `primes` with these residues (Garner's
/// mixed-radix form, one prime at a time).
pub fn crt(residues: &[u64], primes: &[u64]) -> Result<BigUint> {
    let mut value = BigUint::from(0u32);
    let mut product = BigUint::from(1u32);
    for (&r, &p) in residues.iter().zip(primes) {
        let reduced = residue(&value, p);
        let product_mod = residue(&product, p);
        let inverse = inv_mod(product_mod, p)
            .ok_or_else(|| Error::Internal(format!("the primes are not coprime at {p}")))?;
        let diff = (u128::from(r) + u128::from(p) - u128::from(reduced)) % u128::from(p);
        let step = (diff * u128::from(inverse) % u128::from(p)) as u64;
        value += &product * step;
        product *= p;
    }
    Ok(value)
}

/// `value mod p`.
pub fn residue(value: &BigUint, p: u64) -> u64 {
    (value % p).to_u64_digits().first().copied().unwrap_or(0)
}

/// The largest primes below 2^62, as many as make a product of at least
/// 2^bits (so that every value below 2^bits has its own residues).
pub fn primes_for_bits(bits: u32) -> Vec<u64> {
    let goal = BigUint::from(1u32) << bits;
    let mut product = BigUint::from(1u32);
    let mut primes = Vec::new();
    let mut candidate = PRIME_LIMIT - 1;
    while product < goal {
        while !is_prime(candidate) {
            candidate -= 2;
        }
        primes.push(candidate);
        product *= candidate;
        candidate -= 2;
    }
    primes
}

/// Checks a job's choice of prime (`modulus`, a prime below 2^62) or, with
/// `exact`, of bound (`bound_bits`, 1 to [`MAX_BOUND_BITS`], and no
/// modulus); `job` names the job in the messages (`a wasm job`). The primes
/// the job runs: 1, or at most those the bound needs and the spares (a
/// bound, not the primes themselves, so that checking a spec, which every
/// lease does, stays cheap).
pub fn check_choice(exact: bool, modulus: u64, bound_bits: u32, job: &str) -> Result<u64> {
    if exact {
        if !(1..=MAX_BOUND_BITS).contains(&bound_bits) {
            return Err(invalid!(
                "an exact {job} needs bound_bits between 1 and {MAX_BOUND_BITS} (every \
                 value of the answer below 2^bound_bits), not {bound_bits}"
            ));
        }
        if modulus != 0 {
            return Err(invalid!("an exact {job} takes no modulus"));
        }
        // Every prime is above 2^61.
        Ok(u64::from(bound_bits.div_ceil(61)) + SPARE_PRIMES as u64)
    } else {
        if bound_bits != 0 {
            return Err(invalid!("bound_bits goes with exact only"));
        }
        if modulus >= PRIME_LIMIT || !is_prime(modulus) {
            return Err(invalid!(
                "the modulus must be a prime below 2^62, not {modulus}"
            ));
        }
        Ok(1)
    }
}

/// The modulus and bound of a job's command-line options: the modulus given
/// (or the default) for a modular job, the bound for an exact one.
pub fn modulus_and_bound(exact: bool, modulus: Option<u64>, bound_bits: Option<u32>) -> (u64, u32) {
    match exact {
        true => (0, bound_bits.unwrap_or(0)),
        false => (modulus.unwrap_or(DEFAULT_MODULUS), 0),
    }
}

/// A job's modulus as the proto gives it: 0 is the default, unless exact.
pub fn modulus_from_proto(exact: bool, modulus: u64) -> u64 {
    match (exact, modulus) {
        (false, 0) => DEFAULT_MODULUS,
        (_, m) => m,
    }
}

/// A job's description of its primes: `mod P` or `exact (below 2^B)`.
pub fn describe_choice(exact: bool, modulus: u64, bound_bits: u32) -> String {
    match exact {
        true => format!("exact (below 2^{bound_bits})"),
        false => format!("mod {modulus}"),
    }
}

/// The primes of an exact job: those [`primes_for_bits`] gives, then
/// [`SPARE_PRIMES`] more, each the first prime at or below a number drawn by
/// the digest of `described` (the job's spec) between 2^61 and 2^62 (about
/// 5 * 10^16 primes), so that no fixed value slips past the spares of every
/// job.
pub fn exact_primes(bound_bits: u32, described: &[u8]) -> Vec<u64> {
    let mut primes = primes_for_bits(bound_bits);
    let digest = Sha256::digest(described);
    for draw in digest.chunks_exact(8).take(SPARE_PRIMES) {
        let word = u64::from_le_bytes(draw.try_into().expect("8 bytes"));
        let half = PRIME_LIMIT >> 1;
        let mut candidate = half | (word & (half - 1)) | 1;
        while !is_prime(candidate) || primes.contains(&candidate) {
            candidate -= 2;
        }
        primes.push(candidate);
    }
    primes
}

/// Value `index` of an exact answer from its residues modulo `primes`, the
/// last `spares` of them spares: the CRT over the bound's primes, checked
/// to be below 2^bound_bits and to have the residues the spare primes
/// summed. A sum S at or above the product of the bound's primes comes back
/// from the CRT as a smaller number V; a spare prime misses it only if it
/// divides S - V, which has fewer than log2(S) / 61 prime factors above
/// 2^61, while each prime is drawn with probability below 2^-50 (the gaps
/// between primes near 2^62 are below 1,500): below 2^-40 for any S under
/// 2^65536. A plan without spares (made before they were run) has the first
/// check only.
pub fn checked_value(
    bound_bits: u32,
    primes: &[u64],
    spares: usize,
    index: usize,
    residues: &[u64],
) -> Result<BigUint> {
    let joined = primes.len() - spares;
    let value = crt(&residues[..joined], &primes[..joined])?;
    let spares_agree = primes[joined..]
        .iter()
        .zip(&residues[joined..])
        .all(|(&p, &r)| residue(&value, p) == r);
    if value.bits() > u64::from(bound_bits) || !spares_agree {
        return Err(invalid!(
            "value {index} of the answer is not below 2^{bound_bits}: {}, so the CRT cannot \
             give it (raise --bound-bits)",
            if spares_agree {
                "the primes' reconstruction is above the bound"
            } else {
                "the spare prime's residue disagrees with the reconstruction"
            }
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_primes_cover_the_bound_and_no_more() {
        for bits in [1, 61, 62, 63, 124, 200, 4096] {
            let primes = primes_for_bits(bits);
            assert!(primes.iter().all(|&p| p < PRIME_LIMIT && is_prime(p)));
            let product: BigUint = primes.iter().map(|&p| BigUint::from(p)).product();
            assert!(product >= BigUint::from(1u32) << bits, "bits {bits}");
            let fewer: BigUint = primes[1..].iter().map(|&p| BigUint::from(p)).product();
            assert!(fewer < BigUint::from(1u32) << bits, "bits {bits}");
            // The bound the kinds' checks count tasks with holds.
            assert!(primes.len() as u32 <= bits.div_ceil(61), "bits {bits}");
        }
    }

    #[test]
    fn the_crt_gives_back_numbers_below_the_product_of_the_primes() {
        let primes = primes_for_bits(200);
        let mut rng = tally_kernels::test_rng::Rng::new(7);
        for _ in 0..50 {
            let value = (0..3).fold(BigUint::from(0u32), |v, _| (v << 64) + rng.next_u64())
                % (BigUint::from(1u32) << 190);
            let residues: Vec<u64> = primes.iter().map(|&p| residue(&value, p)).collect();
            assert_eq!(crt(&residues, &primes).unwrap(), value);
        }
    }
}
