//! Frontiers as bytes, for shipping a BFS layer between machines.
//!
//! Layout: the number of states, the first state, then the gap from each state
//! to the next (at least 1, since a frontier is strictly increasing); every
//! number is an unsigned LEB128 varint (7 bits per byte, low bits first, high
//! bit set on all but the last byte). States of one layer are close together
//! in the sorted order, so gaps take far fewer bytes than whole states.

use crate::varint::{Reader, push as push_varint};
use crate::{Result, invalid};

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
    let mut reader = Reader::new(bytes, "frontier bytes");
    let count = reader.varint("the state count")?;
    // Every state takes at least one byte: a larger count is garbage, and the
    // check bounds the allocation by the input size.
    let remaining = reader.remaining() as u128;
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
    reader.finish(&format!("{count} states"))?;
    Ok(states)
}
