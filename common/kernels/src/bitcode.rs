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
//!
//! A chunk of a list of keys alone (every count 1) has `m` = [`KEYS_ONLY`]
//! and no count codes, so a set costs only its gaps; its gaps are Rice
//! codes, or, where that is shorter (gaps whose lengths spread over tens of
//! bits, as the states of a blocks layer do), each coded as a count is
//! (`k` = [`GAPS_AS_COUNTS`], then two more bytes: the shortest gap's
//! length, and the Rice parameter of the lengths over it, which the writer
//! picks as the one that codes them shortest).

/// A unary quotient this long or longer is written in full instead.
const ESCAPE: u32 = 24;
/// The Rice parameter of a count's length over the chunk's shortest.
const LENGTH_RICE: u32 = 2;
/// The `m` of a chunk of keys alone: no count is written, each is 1 (a
/// count's length is at most 128, so no other chunk has it).
const KEYS_ONLY: u8 = 255;
/// The `k` of a chunk of keys alone whose gaps are coded as counts are.
const GAPS_AS_COUNTS: u8 = 255;
/// The largest Rice parameter of the gaps' lengths in such a chunk.
const MAX_GAP_LENGTH_RICE: u32 = 6;

/// Bits of `value` as a Rice code of parameter `k`.
fn rice_bits(value: u128, k: u32) -> u64 {
    match value >> k {
        q if q >= u128::from(ESCAPE) => u64::from(ESCAPE + 8 + bit_len(value)),
        q => q as u64 + 1 + u64::from(k),
    }
}

/// Bits of `value` coded as a count of a chunk whose shortest is `m` long,
/// its length over `m` a Rice code of parameter `r`.
fn length_bits(value: u128, m: u32, r: u32) -> u64 {
    let n = bit_len(value);
    rice_bits(u128::from(n - m), r) + u64::from(n.saturating_sub(1))
}

fn bit_len(value: u128) -> u32 {
    128 - value.leading_zeros()
}

/// `value`'s Rice code of parameter `k` as bits and their number, when it
/// fits one [`BitWriter::put`] (the quotient's ones, its zero, the low bits).
#[inline]
fn short_rice(value: u128, k: u32) -> Option<(u64, u32)> {
    if k >= 64 || value >> k >= u128::from(ESCAPE) {
        return None;
    }
    let q = (value >> k) as u32;
    let n = q + 1 + k;
    (n <= 56).then(|| {
        (
            ((1u64 << q) - 1) | ((value as u64) & ((1u64 << k) - 1)) << (q + 1),
            n,
        )
    })
}

/// The Rice code of parameter `k` at the start of `word` (at least 57 bits
/// peeked): its number and the bits it takes, when it lies within them.
#[inline]
fn peeked_rice(word: u64, k: u32) -> Option<(u64, u32)> {
    let q = word.trailing_ones();
    let n = q + 1 + k;
    (q < ESCAPE && n <= 57).then(|| (u64::from(q) << k | (word >> (q + 1)) & ((1u64 << k) - 1), n))
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
    #[inline]
    fn put_wide(&mut self, value: u128, n: u32) {
        // Most codes are short: one put, without the loop.
        if n <= 56 {
            self.put(value as u64, n);
            return;
        }
        self.put_long(value, n);
    }

    #[cold]
    fn put_long(&mut self, value: u128, n: u32) {
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
        if let Some((code, n)) = short_rice(value, k) {
            self.put(code, n);
            return;
        }
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

    /// `value` as a count of a chunk whose shortest count is `m` bits long:
    /// its length over `m` (a Rice code of parameter `r`), then its bits
    /// below the top one.
    #[inline]
    fn length_coded(&mut self, value: u128, m: u32, r: u32) {
        let n = bit_len(value);
        let (over, below) = (n - m, n.saturating_sub(1));
        // Most counts fit one put: the length's code and the bits below the
        // top one together.
        if let Some((code, used)) = short_rice(u128::from(over), r)
            && used + below <= 56
        {
            let bits = (value as u64) & ((1u64 << below) - 1);
            self.put(code | bits << used, used + below);
            return;
        }
        self.rice(u128::from(over), r);
        if n > 1 {
            self.put_wide(value, n - 1);
        }
    }

    fn finish(self) {
        if self.bits > 0 {
            self.out.push(self.acc as u8);
        }
    }
}

/// Appends the payload of a chunk of `gaps` and `counts` (as many) to `out`;
/// without counts, a chunk of keys alone.
pub(crate) fn encode_chunk(gaps: &[u128], counts: Option<&[u128]>, out: &mut Vec<u8>) {
    // Rice codes cost least near k = log2(mean gap * ln 2); the first gap of
    // a list (a key itself) would skew the mean, so it is left out.
    let inner = &gaps[gaps.len().min(1)..];
    let mean = match inner.len() {
        0 => 1.0,
        n => inner.iter().map(|&g| g as f64).sum::<f64>() / n as f64,
    };
    let k = (mean * std::f64::consts::LN_2).max(1.0).log2().floor() as u32;
    let k = k.min(120);
    out.push(k as u8);
    let Some(counts) = counts else {
        let mg = gaps.iter().map(|&g| bit_len(g)).min().unwrap_or(0);
        let (as_counts, r) = (0..=MAX_GAP_LENGTH_RICE)
            .map(|r| (gaps.iter().map(|&g| length_bits(g, mg, r)).sum::<u64>(), r))
            .min()
            .expect("rice parameters");
        let as_rice: u64 = gaps.iter().map(|&g| rice_bits(g, k)).sum();
        let by_length = as_counts < as_rice;
        if by_length {
            let last = out.len() - 1;
            out[last] = GAPS_AS_COUNTS;
        }
        out.push(KEYS_ONLY);
        if by_length {
            out.push(mg as u8);
            out.push(r as u8);
        }
        let mut bits = BitWriter {
            out,
            acc: 0,
            bits: 0,
        };
        for &gap in gaps {
            match by_length {
                true => bits.length_coded(gap, mg, r),
                false => bits.rice(gap, k),
            }
        }
        bits.finish();
        return;
    };
    let m = counts.iter().map(|&c| bit_len(c)).min().unwrap_or(0);
    out.push(m as u8);
    let mut bits = BitWriter {
        out,
        acc: 0,
        bits: 0,
    };
    for (&gap, &count) in gaps.iter().zip(counts) {
        bits.rice(gap, k);
        bits.length_coded(count, m, LENGTH_RICE);
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

    #[inline]
    fn get_wide(&mut self, n: u32) -> Option<u128> {
        // Most codes are short: one get, without the loop.
        if n <= 56 {
            return self.get(n).map(u128::from);
        }
        self.get_long(n)
    }

    #[cold]
    fn get_long(&mut self, n: u32) -> Option<u128> {
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
        let word = self.peek();
        // Most codes lie in the word peeked: the low bits are read from it.
        if let Some((value, used)) = peeked_rice(word, k)
            && self.left() >= used as usize
        {
            self.at += used as usize;
            return Some(u128::from(value));
        }
        let q = word.trailing_ones().min(ESCAPE);
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

impl BitReader<'_> {
    /// A number coded as [`BitWriter::length_coded`] codes it.
    #[inline]
    fn length_coded(&mut self, m: u32, r: u32) -> Option<u128> {
        // Most counts lie in the word peeked, their length's code and their
        // bits below the top one.
        let word = self.peek();
        if let Some((over, length)) = peeked_rice(word, r) {
            let n = over + u64::from(m);
            let used = length + n.saturating_sub(1) as u32;
            if (2..=57).contains(&n) && used <= 57 && self.left() >= used as usize {
                let below = (word >> length) & ((1u64 << (n - 1)) - 1);
                self.at += used as usize;
                return Some(u128::from(1u64 << (n - 1) | below));
            }
        }
        let n = u32::try_from(self.rice(r)?).ok()?.checked_add(m)?;
        match n {
            0 => Some(0),
            1 => Some(1),
            2..=128 => Some((1u128 << (n - 1)) | self.get_wide(n - 1)?),
            _ => None,
        }
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
    let keys_only = m == KEYS_ONLY;
    let by_length = keys_only && k == GAPS_AS_COUNTS;
    // Gaps coded as counts: the shortest gap's length and the Rice parameter
    // of the lengths in two more bytes.
    let (head, mg, r) = match by_length {
        true => (4, u32::from(*payload.get(2)?), u32::from(*payload.get(3)?)),
        false => (2, 0, 0),
    };
    let (k, m) = (u32::from(k), u32::from(m));
    if (k > 120 && !by_length) || (m > 128 && !keys_only) || mg > 128 || r > MAX_GAP_LENGTH_RICE {
        return None;
    }
    let mut bits = BitReader {
        bytes: &payload[head..],
        at: 0,
    };
    into.clear();
    for _ in 0..entries {
        if by_length {
            into.push((bits.length_coded(mg, r)?, 1));
            continue;
        }
        let gap = bits.rice(k)?;
        if keys_only {
            into.push((gap, 1));
            continue;
        }
        into.push((gap, bits.length_coded(m, LENGTH_RICE)?));
    }
    // Only the padding of the last byte may follow, all zeros.
    let used = bits.at.div_ceil(8);
    (used == payload.len() - head && bits.get_wide((used * 8 - bits.at) as u32)? == 0).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Codes of every length round-trip, across the lengths where one put
    /// or one peeked word holds a whole code and where it does not.
    #[test]
    fn codes_of_every_length_round_trip() {
        let mut back = Vec::new();
        for bits in 0..=128u32 {
            let top = |b: u32| if b == 0 { 0 } else { u128::MAX >> (128 - b) };
            let near: Vec<u128> = [
                top(bits),
                top(bits) >> 1,
                1u128.checked_shl(bits).unwrap_or(1),
            ]
            .into_iter()
            .collect();
            // Even gaps (a Rice parameter near their length) with one wider,
            // and counts of every length from the shortest up.
            let gaps: Vec<u128> = (0..40).map(|i| near[i % 3] | 1).collect();
            let counts: Vec<u128> = (0..40).map(|i| top((bits + i as u32) % 129)).collect();
            for written in [Some(&counts[..]), None] {
                let mut payload = Vec::new();
                encode_chunk(&gaps, written, &mut payload);
                decode_chunk(&payload, gaps.len(), &mut back).expect("a chunk");
                let counts = written.map_or(vec![1; gaps.len()], <[u128]>::to_vec);
                let expected: Vec<(u128, u128)> = gaps.iter().copied().zip(counts).collect();
                assert_eq!(back, expected, "{bits} bits");
                assert!(
                    decode_chunk(&payload[..payload.len() - 1], gaps.len(), &mut back).is_none()
                );
            }
        }
    }

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
            let mut back = Vec::new();
            let keys_only: Vec<u128> = vec![1; n];
            // Counts written, and keys alone (each read with a count of 1).
            for (counts, written) in [(&counts, Some(&counts[..])), (&keys_only, None)] {
                let mut payload = Vec::new();
                encode_chunk(&gaps, written, &mut payload);
                decode_chunk(&payload, n, &mut back).expect("a chunk");
                let expected: Vec<(u128, u128)> =
                    gaps.iter().copied().zip(counts.iter().copied()).collect();
                assert_eq!(back, expected, "round {round}");
                assert!(decode_chunk(&payload[..payload.len() - 1], n, &mut back).is_none());
                let mut longer = payload.clone();
                longer.push(0);
                assert!(decode_chunk(&longer, n, &mut back).is_none());
            }
            // Keys alone take fewer bytes than the same keys with counts of 1.
            let (mut alone, mut ones) = (Vec::new(), Vec::new());
            encode_chunk(&gaps, None, &mut alone);
            encode_chunk(&gaps, Some(&keys_only), &mut ones);
            assert!(alone.len() < ones.len() || n < 3, "round {round}");
        }
    }
}
