//! Saved states as little-endian `u64` words: what a kernel passes to
//! [`Shard::checkpoint`](crate::Shard::checkpoint) and reads back from
//! [`Shard::state`](crate::Shard::state).

use alloc::vec::Vec;

/// The words as bytes, 8 per word, little-endian.
pub fn encode_words(words: &[u64]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(words.len() * 8);
    for word in words {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes
}

/// The words of `bytes`, or `None` when its length is not a multiple of 8.
pub fn decode_words(bytes: &[u8]) -> Option<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|chunk| {
                let mut word = [0; 8];
                word.copy_from_slice(chunk);
                u64::from_le_bytes(word)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let words = [0, 1, u64::MAX, 0x0102_0304_0506_0708];
        let bytes = encode_words(&words);
        assert_eq!(&bytes[24..], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(decode_words(&bytes).unwrap(), words);
        assert_eq!(decode_words(&[]).unwrap(), Vec::<u64>::new());
        assert_eq!(decode_words(&bytes[1..]), None);
    }
}
