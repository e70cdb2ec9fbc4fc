//! tally's digest of values it compares later (replica outputs, spilled
//! files): 64-bit FNV-1a. Stable across versions and platforms, unlike std's
//! hasher, so digests may be stored and compared later. Not a cryptographic
//! hash: it detects disagreement, not tampering. (The coordinator's store sums
//! XXH3 over its entries instead: it hashes all of them at every restart.)

/// `bytes` in lowercase hex, two digits a byte (digests, session secrets,
/// random prefixes).
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_parts(&[bytes])
}

/// FNV-1a of the concatenation of `parts`, without building it.
pub fn fnv1a64_parts(parts: &[&[u8]]) -> u64 {
    parts
        .iter()
        .flat_map(|part| part.iter())
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a64_parts(&[b"foo", b"", b"bar"]), fnv1a64(b"foobar"));
        assert_eq!(to_hex(&[0, 0x0f, 0xa0, 0xff]), "000fa0ff");
    }
}
