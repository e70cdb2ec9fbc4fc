//! The transport and storage form of frontier vectors: truncated polynomials,
//! one contiguous run of nonzero coefficients each.

use crate::{Result, invalid};

/// Encodes truncated polynomials (`stride` residues each) for transport and
/// storage. The nonzero coefficients of a frontier state's polynomial always form
/// one contiguous run, and about half of all coefficients of a sweep are zero, so
/// each polynomial is written as `[first degree: u8][length: u8]` followed by the
/// `length` residues of that run (little-endian u32).
pub fn encode_polynomials(values: &[u32], stride: usize) -> Vec<u8> {
    debug_assert!(stride <= u8::MAX as usize && values.len().is_multiple_of(stride));
    let mut bytes = Vec::with_capacity(values.len() * 2 + values.len() / stride * 2);
    for poly in values.chunks_exact(stride) {
        let (first, len) = match poly.iter().position(|&c| c != 0) {
            None => (0, 0),
            Some(first) => {
                let last = poly.iter().rposition(|&c| c != 0).unwrap_or(first);
                (first, last + 1 - first)
            }
        };
        bytes.push(first as u8);
        bytes.push(len as u8);
        for c in &poly[first..first + len] {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
    }
    bytes
}

/// Walks [`encode_polynomials`] output, checking every run against `stride` and
/// every residue against `modulus`, and hands each polynomial's run to `visit`
/// as (first degree, coefficients). Returns the number of polynomials.
fn walk_polynomials(
    bytes: &[u8],
    stride: usize,
    modulus: u32,
    mut visit: impl FnMut(usize, &[u8]),
) -> Result<usize> {
    let (mut at, mut count) = (0, 0);
    while at < bytes.len() {
        let header = bytes
            .get(at..at + 2)
            .ok_or_else(|| invalid!("polynomial data ends inside a header at byte {at}"))?;
        let (first, len) = (header[0] as usize, header[1] as usize);
        if first + len > stride {
            return Err(invalid!(
                "polynomial run {first}+{len} exceeds {stride} coefficients at byte {at}"
            ));
        }
        at += 2;
        let run = bytes
            .get(at..at + 4 * len)
            .ok_or_else(|| invalid!("polynomial data ends inside a run at byte {at}"))?;
        at += 4 * len;
        for word in run.chunks_exact(4) {
            let c = u32::from_le_bytes(word.try_into().unwrap());
            if c >= modulus {
                return Err(invalid!(
                    "coefficient {c} is not a residue modulo {modulus}"
                ));
            }
        }
        visit(first, run);
        count += 1;
    }
    Ok(count)
}

/// Decodes [`encode_polynomials`] output into dense polynomials, checking every
/// run against `stride` and every residue against `modulus`.
pub fn decode_polynomials(bytes: &[u8], stride: usize, modulus: u32) -> Result<Vec<u32>> {
    let mut values = Vec::with_capacity(bytes.len() / 2);
    walk_polynomials(bytes, stride, modulus, |first, run| {
        let base = values.len();
        values.resize(base + stride, 0);
        for (slot, word) in values[base + first..].iter_mut().zip(run.chunks_exact(4)) {
            *slot = u32::from_le_bytes(word.try_into().unwrap());
        }
    })?;
    Ok(values)
}

/// Checks [`encode_polynomials`] output without decoding it; returns the number
/// of polynomials.
pub fn check_polynomials(bytes: &[u8], stride: usize, modulus: u32) -> Result<usize> {
    walk_polynomials(bytes, stride, modulus, |_, _| {})
}
