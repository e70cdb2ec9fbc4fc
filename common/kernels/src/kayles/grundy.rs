//! Grundy values of Dawson's Kayles (the octal game 0.07): the mixed-pair game
//! played on one alternating block of pins.

use std::sync::OnceLock;

/// Lengths evaluated by the mex rule before a period is first looked for; the
/// table doubles until the periodicity test succeeds or [`MAX_HEAD`] is reached.
const FIRST_HEAD: usize = 128;

/// The longest table searched for a period.
const MAX_HEAD: usize = 1 << 15;

/// The most pins a move of 0.07 removes: `k = 2` in the periodicity test.
const MAX_REMOVED: usize = 2;

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

/// `g(L + period) = g(L)` for every `L >= start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Periodicity {
    pub(super) start: usize,
    pub(super) period: usize,
}

/// The smallest period that the periodicity test for octal games proves from
/// the values in `g` alone.
///
/// The test (Guy and Smith; Berlekamp, Conway and Guy, *Winning Ways*, ch. 4):
/// let an octal game with finitely many code digits remove at most `k` tokens
/// in a move. If there are `n0 >= 0` and `p >= 1` with `g(n + p) = g(n)` for
/// every `n` with `n0 <= n < 2 n0 + p + k`, then `g(n + p) = g(n)` for every
/// `n >= n0`.
///
/// Why, for 0.07 (`k = 2`): by induction on `n >= 2 n0 + p + k`. The options of
/// `n + p` are `g(a) ^ g(c)` with `a + c = n + p - 2 >= 2 (n0 + p)`, so one part,
/// say `c`, is at least `n0 + p`, and `g(c) = g(c - p)` with `n0 <= c - p < n`:
/// each option of `n + p` is an option of `n` (split `n - 2` as `a + (c - p)`).
/// Conversely an option `a + c = n - 2` of `n` has a part `c >= n0`, and
/// `g(c + p) = g(c)`, so it is an option of `n + p`. Equal option sets give
/// `g(n + p) = g(n)`. Every split is a legal 0.07 move, so nothing else is used.
///
/// So for each `p` the smallest `n0` with `g(n + p) = g(n)` on
/// `n0 <= n <= last - p` is found, and `p` is proven when that range covers
/// `[n0, 2 n0 + p + k)`, that is when `2 n0 + p + k <= last - p + 1`.
pub(super) fn proven_period(g: &[u8]) -> Option<Periodicity> {
    let last = g.len().checked_sub(1)?;
    (1..=last / 4).find_map(|p| {
        // Smallest n0 with g(L + p) = g(L) for all n0 <= L <= last - p.
        let mut n0 = last - p + 1;
        while n0 > 0 && g[n0 - 1] == g[n0 - 1 + p] {
            n0 -= 1;
        }
        (2 * n0 + p + MAX_REMOVED <= last - p + 1).then_some(Periodicity {
            start: n0,
            period: p,
        })
    })
}

/// The mex values, from `FIRST_HEAD` on doubled until the periodicity test
/// proves a period (or up to `MAX_HEAD` values without one), and that period;
/// computed once per process.
fn head() -> &'static (Vec<u8>, Option<Periodicity>) {
    static TABLE: OnceLock<(Vec<u8>, Option<Periodicity>)> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut len = FIRST_HEAD;
        loop {
            let g = mex_values(len);
            let period = proven_period(&g);
            if period.is_some() || len >= MAX_HEAD {
                return (g, period);
            }
            len *= 2;
        }
    })
}

/// The proven periodicity of Dawson's Kayles (period 34 from `L = 53` on).
#[cfg(test)]
pub(super) fn periodicity() -> Option<Periodicity> {
    head().1
}

/// `g(0..=max_len)` of Dawson's Kayles: the Grundy value of the mixed-pair game on
/// an alternating block of `L` pins. Values beyond the mex table follow from the
/// period that the periodicity test proves on it; without a proof they would
/// come from the mex rule itself.
pub fn grundy_values(max_len: usize) -> Vec<u8> {
    let (g, period) = head();
    if max_len < g.len() {
        return g[..=max_len].to_vec();
    }
    match period {
        Some(Periodicity { period: p, .. }) => {
            let mut values = Vec::with_capacity(max_len + 1);
            values.extend_from_slice(g);
            for l in g.len()..=max_len {
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
/// when the period already bounds every value: every value from the start of
/// the period on repeats one of the table.
pub(super) fn bits_for_pins(pins: u64) -> u32 {
    let (g, period) = head();
    match usize::try_from(pins) {
        Ok(n) if n < g.len() => character_bits(&g[..=n]),
        _ if period.is_some() => character_bits(g),
        Ok(n) => character_bits(&grundy_values(n)),
        Err(_) => unreachable!("no period and more than usize::MAX pins"),
    }
}
