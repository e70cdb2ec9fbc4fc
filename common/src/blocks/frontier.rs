//! Frontiers as bytes, for shipping a BFS layer between machines.
//!
//! Layout: the number of states, the first state, then the gap from each state
//! to the next (at least 1, since a frontier is strictly increasing); every
//! number is an unsigned LEB128 varint (7 bits per byte, low bits first, high
//! bit set on all but the last byte). States of one layer are close together
//! in the sorted order, so gaps take far fewer bytes than whole states.

use crate::{Result, invalid};

/// Bytes of the longest varint of a `u128`.
const MAX_VARINT_BYTES: usize = 19;

fn push_varint(out: &mut Vec<u8>, mut value: u128) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Encodes a strictly increasing list of states.
///
/// # Panics
/// If `states` is not strictly increasing (frontiers are sorted and
/// deduplicated by construction, so this is a bug in the caller).
pub fn encode_states(states: &[u128]) -> Vec<u8> {
    assert!(
        states.windows(2).all(|w| w[0] < w[1]),
        "encode_states needs strictly increasing states"
    );
    let mut out = Vec::with_capacity(4 + states.len() * 8);
    push_varint(&mut out, states.len() as u128);
    let mut previous = None;
    for &state in states {
        match previous {
            None => push_varint(&mut out, state),
            Some(p) => push_varint(&mut out, state - p),
        }
        previous = Some(state);
    }
    out
}

/// Reads bytes written by [`encode_states`]. Anything else (truncated,
/// overlong or overflowing numbers, a gap of 0, trailing bytes) is
/// `InvalidArgument`; no input can make it panic or allocate more than the
/// input can describe.
pub fn decode_states(bytes: &[u8]) -> Result<Vec<u128>> {
    let mut reader = Reader { bytes, at: 0 };
    let count = reader.varint("the state count")?;
    // Every state takes at least one byte: a larger count is garbage, and the
    // check bounds the allocation by the input size.
    let remaining = (bytes.len() - reader.at) as u128;
    if count > remaining {
        return Err(invalid!(
            "frontier bytes: {count} states announced but only {remaining} bytes follow"
        ));
    }
    let mut states = Vec::with_capacity(count as usize);
    let mut previous: Option<u128> = None;
    for index in 0..count as usize {
        let value = reader.varint("a state")?;
        let state = match previous {
            None => value,
            Some(p) => {
                if value == 0 {
                    return Err(invalid!(
                        "frontier bytes: states are not strictly increasing (state {index} \
                         repeats the previous one)"
                    ));
                }
                p.checked_add(value)
                    .ok_or_else(|| invalid!("frontier bytes: state {index} overflows 128 bits"))?
            }
        };
        states.push(state);
        previous = Some(state);
    }
    if reader.at != bytes.len() {
        return Err(invalid!(
            "frontier bytes: {} trailing bytes after {count} states",
            bytes.len() - reader.at
        ));
    }
    Ok(states)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn varint(&mut self, what: &str) -> Result<u128> {
        let start = self.at;
        let mut value = 0u128;
        for i in 0..MAX_VARINT_BYTES {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(invalid!(
                    "frontier bytes: truncated in {what} at byte {start}"
                ));
            };
            self.at += 1;
            let payload = (byte & 0x7f) as u128;
            let shift = 7 * i as u32;
            if shift > 0 && payload >> (128 - shift) != 0 {
                return Err(invalid!(
                    "frontier bytes: {what} at byte {start} overflows 128 bits"
                ));
            }
            value |= payload << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(invalid!(
                        "frontier bytes: {what} at byte {start} is not in shortest form"
                    ));
                }
                return Ok(value);
            }
        }
        Err(invalid!(
            "frontier bytes: {what} at byte {start} is longer than {MAX_VARINT_BYTES} bytes"
        ))
    }
}
