//! Grundy values of Dawson's Kayles (the octal game 0.07): the mixed-pair game
//! played on one alternating block of pins.

use std::sync::OnceLock;

/// Lengths evaluated by the mex rule before the period is looked for.
const HEAD: usize = 1024;

/// A move of 0.07 removes exactly two pins: `t = 2` in the Guy–Smith theorem.
const REMOVED: usize = 2;

/// `g(0..=len)` straight from the mex rule: knocking out pins `i + 1` and `i + 2`
/// of a block of `l` pins leaves blocks of `i` and `l - 2 - i` pins.
pub(super) fn mex_values(len: usize) -> Vec<u8> {
    let mut g: Vec<u8> = Vec::with_capacity(len + 1);
    for l in 0..=len {
        let mut seen = [0u64; 4];
        if l >= 2 {
            // The options i and l - 2 - i give the same value: half of them suffice.
            for i in 0..=(l - 2) / 2 {
                let v = g[i] ^ g[l - 2 - i];
                seen[usize::from(v >> 6)] |= 1 << (v & 63);
            }
        }
        let word = seen.iter().position(|w| *w != u64::MAX).unwrap_or(4);
        let mex = 64 * word + seen.get(word).map_or(0, |w| w.trailing_ones() as usize);
        g.push(u8::try_from(mex).expect("Grundy values of 0.07 stay below 256"));
    }
    g
}

/// The smallest period `p` for which the Guy–Smith periodicity theorem proves
/// `g(L + p) = g(L)` for every `L >= n0` from the values in `g` alone: it suffices
/// that the identity holds for `n0 <= L < 2 * n0 + p + t`.
pub(super) fn proven_period(g: &[u8]) -> Option<usize> {
    let last = g.len().checked_sub(1)?;
    (1..=last / 4).find(|&p| {
        // Smallest n0 with g(L + p) = g(L) for all n0 <= L <= last - p.
        let mut n0 = last - p + 1;
        while n0 > 0 && g[n0 - 1] == g[n0 - 1 + p] {
            n0 -= 1;
        }
        2 * n0 + p + REMOVED <= last - p + 1
    })
}

/// `g(0..=HEAD)` and its proven period, computed once per process.
fn head() -> &'static (Vec<u8>, Option<usize>) {
    static TABLE: OnceLock<(Vec<u8>, Option<usize>)> = OnceLock::new();
    TABLE.get_or_init(|| {
        let g = mex_values(HEAD);
        let period = proven_period(&g);
        (g, period)
    })
}

/// `g(0..=max_len)` of Dawson's Kayles: the Grundy value of the mixed-pair game on
/// an alternating block of `L` pins. Values beyond the first 1024 lengths follow
/// from the period that the Guy–Smith theorem proves on those lengths (34, from
/// `L = 53` on); without a proof they would come from the mex rule itself.
pub fn grundy_values(max_len: usize) -> Vec<u8> {
    let (g, period) = head();
    if max_len <= HEAD {
        return g[..=max_len].to_vec();
    }
    match period {
        Some(p) => {
            let mut values = Vec::with_capacity(max_len + 1);
            values.extend_from_slice(g);
            for l in HEAD + 1..=max_len {
                values.push(values[l - p]);
            }
            values
        }
        None => mex_values(max_len),
    }
}

/// The number `b` of binary digits of the largest value in `grundy`: the block
/// values of the rows these lengths describe lie in `0..2^b`, so `2^b` Walsh
/// characters separate them.
pub fn character_bits(grundy: &[u8]) -> u32 {
    let max = grundy.iter().copied().max().unwrap_or(0);
    u8::BITS - max.leading_zeros()
}

/// `b` for rows of up to `pins` pins, without building a table of `pins` values
/// when the period already bounds every value.
pub(super) fn bits_for_pins(pins: u64) -> u32 {
    let (g, period) = head();
    match usize::try_from(pins) {
        Ok(n) if n <= HEAD => character_bits(&g[..=n]),
        _ if period.is_some() => character_bits(g),
        Ok(n) => character_bits(&grundy_values(n)),
        Err(_) => unreachable!("no period and more than usize::MAX pins"),
    }
}
