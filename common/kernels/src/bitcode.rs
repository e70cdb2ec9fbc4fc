//! The payload of a compact list's chunk (see `compact`): its entries' key
//! gaps and counts as bit codes, which take a byte or more less an entry
//! than varints where counts run to 40 bits and more.
//!
//! The payload is two bytes, `k` and `m`, then bits, low bit first: for
//! each entry its gap as a Rice code of parameter `k` (the quotient
//! `gap >> k` in unary, a 1 per unit and a 0, then the `k` low bits), and its
//! count as the number of its significant bits less `m` (a Rice code of
//! parameter 2) followed by those bits below the top one (a count of 0 has
//! none). A quotient of [`ESCAPE`] or more is written as [`ESCAPE`] ones and
//! then the number in full (its bit count in 8 bits, then its bits), so no
//! gap or count takes more than a few bits over its own. The writer picks
//! `k` from the chunk's mean gap and `m` as its shortest count.

/// A unary quotient this long or longer is written in full instead.
const ESCAPE: u32 = 24;
/// The Rice parameter of a count's length over the chunk's shortest.
const LENGTH_RICE: u32 = 2;

fn bit_len(value: u128) -> u32 {
    128 - value.leading_zeros()
}

struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    bits: u32,
}

impl BitWriter<'_> {
    /// Appends the low `n` bits of `value`, `n` up to 56.
    #[inline]
    fn put(&mut self, value: u64, n: u32) {
        debug_assert!(n <= 56 && self.bits < 8);
        let value = value & ((1u64 << n) - 1);
        self.acc |= value << self.bits;
        self.bits += n;
        // Whole bytes leave together: at most 7, as fewer than 8 bits wait.
        let whole = self.bits / 8;
        if whole > 0 {
            self.out
                .extend_from_slice(&self.acc.to_le_bytes()[..whole as usize]);
            self.acc = if whole == 8 {
                0
            } else {
                self.acc >> (whole * 8)
            };
            self.bits %= 8;
        }
    }

    /// Appends the low `n` bits of `value`, any `n` up to 128.
    fn put_wide(&mut self, value: u128, n: u32) {
        let mut at = 0;
        while at < n {
            let take = (n - at).min(56);
            self.put((value >> at) as u64, take);
            at += take;
        }
    }

    /// `value` as a Rice code of parameter `k`.
    #[inline]
    fn rice(&mut self, value: u128, k: u32) {
        let quotient = value >> k;
        if quotient >= u128::from(ESCAPE) {
            self.put((1 << ESCAPE) - 1, ESCAPE);
            let n = bit_len(value);
            self.put(u64::from(n), 8);
            self.put_wide(value, n);
            return;
        }
        let q = quotient as u32;
        // q ones, then a zero.
        self.put((1u64 << q) - 1, q + 1);
        self.put_wide(value, k);
    }

    fn finish(self) {
        if self.bits > 0 {
            self.out.push(self.acc as u8);
        }
    }
}

/// Appends the payload of a chunk of `gaps` and `counts` (as many) to `out`.
pub(crate) fn encode_chunk(gaps: &[u128], counts: &[u128], out: &mut Vec<u8>) {
    // Rice codes cost least near k = log2(mean gap * ln 2); the first gap of
    // a list (a key itself) would skew the mean, so it is left out.
    let inner = &gaps[gaps.len().min(1)..];
    let mean = match inner.len() {
        0 => 1.0,
        n => inner.iter().map(|&g| g as f64).sum::<f64>() / n as f64,
    };
    let k = (mean * std::f64::consts::LN_2).max(1.0).log2().floor() as u32;
    let k = k.min(120);
    let m = counts.iter().map(|&c| bit_len(c)).min().unwrap_or(0);
    out.push(k as u8);
    out.push(m as u8);
    let mut bits = BitWriter {
        out,
        acc: 0,
        bits: 0,
    };
    for (&gap, &count) in gaps.iter().zip(counts) {
        bits.rice(gap, k);
        let n = bit_len(count);
        bits.rice(u128::from(n - m), LENGTH_RICE);
        if n > 1 {
            bits.put_wide(count, n - 1);
        }
    }
    bits.finish();
}

struct BitReader<'a> {
    bytes: &'a [u8],
    /// The next bit to read.
    at: usize,
}

impl BitReader<'_> {
    /// The bits left to read.
    #[inline]
    fn left(&self) -> usize {
        self.bytes.len() * 8 - self.at
    }

    /// The next 57 bits or more, low bit first, zeros past the end.
    #[inline]
    fn peek(&self) -> u64 {
        let first = self.at / 8;
        let word = match self.bytes.get(first..first + 8) {
            Some(eight) => u64::from_le_bytes(eight.try_into().expect("8 bytes")),
            None => {
                let mut word = [0u8; 8];
                let tail = &self.bytes[first.min(self.bytes.len())..];
                word[..tail.len()].copy_from_slice(tail);
                u64::from_le_bytes(word)
            }
        };
        word >> (self.at % 8)
    }

    /// The next `n` bits (up to 56), or `None` past the end.
    #[inline]
    fn get(&mut self, n: u32) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        if n as usize > self.left() {
            return None;
        }
        let value = self.peek() & ((1u64 << n) - 1);
        self.at += n as usize;
        Some(value)
    }

    fn get_wide(&mut self, n: u32) -> Option<u128> {
        let mut value = 0u128;
        let mut at = 0;
        while at < n {
            let take = (n - at).min(56);
            value |= u128::from(self.get(take)?) << at;
            at += take;
        }
        Some(value)
    }

    #[inline]
    fn rice(&mut self, k: u32) -> Option<u128> {
        // The unary quotient: its ones and the zero after them, all within
        // the payload (zeros past its end are not a terminator).
        let q = self.peek().trailing_ones().min(ESCAPE);
        if q == ESCAPE {
            if self.left() < ESCAPE as usize {
                return None;
            }
            self.at += ESCAPE as usize;
            let n = self.get(8)? as u32;
            if n > 128 {
                return None;
            }
            return self.get_wide(n);
        }
        if self.left() < q as usize + 1 {
            return None;
        }
        self.at += q as usize + 1;
        let low = self.get_wide(k)?;
        Some((u128::from(q) << k) | low)
    }
}

/// The `entries` gaps and counts of a chunk's payload, or `None` if it is
/// not one (too short, numbers past 128 bits, bits left over).
pub(crate) fn decode_chunk(
    payload: &[u8],
    entries: usize,
    into: &mut Vec<(u128, u128)>,
) -> Option<()> {
    let (&k, &m) = (payload.first()?, payload.get(1)?);
    let (k, m) = (u32::from(k), u32::from(m));
    if k > 120 || m > 128 {
        return None;
    }
    let mut bits = BitReader {
        bytes: &payload[2..],
        at: 0,
    };
    into.clear();
    for _ in 0..entries {
        let gap = bits.rice(k)?;
        let n = u32::try_from(bits.rice(LENGTH_RICE)?)
            .ok()?
            .checked_add(m)?;
        let count = match n {
            0 => 0,
            1 => 1,
            2..=128 => (1u128 << (n - 1)) | bits.get_wide(n - 1)?,
            _ => return None,
        };
        into.push((gap, count));
    }
    // Only the padding of the last byte may follow, all zeros.
    let used = bits.at.div_ceil(8);
    (used == payload.len() - 2 && bits.get_wide((used * 8 - bits.at) as u32)? == 0).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn chunks_round_trip_and_refuse_what_is_not_one() {
        let mut rng = Rng::new(5501);
        for round in 0..300 {
            let n = 1 + rng.below(300u64) as usize;
            let wide = |rng: &mut Rng| {
                let v = (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
                v >> rng.below(129u64).min(127)
            };
            let gaps: Vec<u128> = (0..n)
                .map(|i| match (i, round % 3) {
                    (0, _) | (_, 0) => wide(&mut rng),
                    _ => u128::from(rng.below(1000u64)),
                })
                .collect();
            let counts: Vec<u128> = (0..n)
                .map(|_| match rng.below(3u64) {
                    0 => wide(&mut rng),
                    1 => u128::MAX >> rng.below(3u64),
                    _ => u128::from(rng.below(5u64)),
                })
                .collect();
            let mut payload = Vec::new();
            encode_chunk(&gaps, &counts, &mut payload);
            let mut back = Vec::new();
            decode_chunk(&payload, n, &mut back).expect("a chunk");
            let expected: Vec<(u128, u128)> = gaps.iter().copied().zip(counts.clone()).collect();
            assert_eq!(back, expected, "round {round}");
            assert!(decode_chunk(&payload[..payload.len() - 1], n, &mut back).is_none());
            let mut longer = payload.clone();
            longer.push(0);
            assert!(decode_chunk(&longer, n, &mut back).is_none());
        }
    }
}
