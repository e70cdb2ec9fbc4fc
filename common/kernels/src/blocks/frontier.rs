//! Frontiers as bytes, for shipping a BFS layer between machines.
//!
//! Layout: the number of states, the first state, then the gap from each state
//! to the next (at least 1, since a frontier is strictly increasing); every
//! number is an unsigned LEB128 varint (7 bits per byte, low bits first, high
//! bit set on all but the last byte). States of one layer are close together
//! in the sorted order, so gaps take far fewer bytes than whole states.

use crate::Result;
use crate::varint::{Reader, push_increasing};

/// Encodes a strictly increasing list of states.
///
/// # Panics
/// If `states` is not strictly increasing (frontiers are sorted and
/// deduplicated by construction, so this is a bug in the caller).
pub fn encode_states(states: &[u128]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + states.len() * 8);
    push_increasing(&mut out, states);
    out
}

/// Reads bytes written by [`encode_states`]. Anything else (truncated,
/// overlong or overflowing numbers, a gap of 0, trailing bytes) is
/// `InvalidArgument`; no input can make it panic or allocate more than the
/// input can describe.
pub fn decode_states(bytes: &[u8]) -> Result<Vec<u128>> {
    let mut reader = Reader::new(bytes, "frontier bytes");
    let states = reader.increasing("states")?;
    reader.finish(&format!("{} states", states.len()))?;
    Ok(states)
}
