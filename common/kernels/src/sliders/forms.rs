//! The compact form of the frontier plan's buckets (`crate::compact`), the
//! form of jobs planned since it was; each bucket's tag says its form, so a
//! reader reads either.
//!
//! - A forward bucket ([`TAG_FORWARD_COMPACT`]): the tag, the byte length of
//!   its candidates' list (u64, little-endian), the candidates as a compact
//!   list (key `board << 4 | back`, the moves back in the low four bits as
//!   the raw form has them in its gaps, count the sequences), then the
//!   previous level's boards as a compact list of keys alone.
//! - Members ([`TAG_MEMBERS_COMPACT`]) and a graph level's neighbours
//!   ([`TAG_NEIGHBOURS_COMPACT`]): the tag, then the boards as a compact list
//!   of keys alone.
//!
//! The moves back go in the key rather than the count: a Rice code writes
//! the low bits of a gap as they are, so either place costs the same four
//! bits, and the key keeps the raw form's layout.

use super::buckets::{Candidate, ForwardBucket, TAG_MEMBERS, TAG_NEIGHBOURS};
use crate::compact::{ChunkWriter, ListForm, ListStream, encode_keys, encode_list};
use crate::spill::Source;
use crate::varint::push_increasing;
use crate::{Result, invalid};

/// Tag of a forward bucket in the compact form.
pub(super) const TAG_FORWARD_COMPACT: u8 = 6;
/// Tag of a bucket of a level's boards in the compact form.
pub(super) const TAG_MEMBERS_COMPACT: u8 = 7;
/// Tag of a bucket of a graph level's neighbours in the compact form.
pub(super) const TAG_NEIGHBOURS_COMPACT: u8 = 8;

/// The compact key of a candidate.
#[inline]
pub(super) fn candidate_key(board: u64, back: u8) -> u128 {
    u128::from(board) << 4 | u128::from(back & 15)
}

/// The candidate of a compact key and count, checked; `label` and `i` name
/// it in errors.
#[inline]
pub(super) fn candidate_of(key: u128, paths: u128, label: &str, i: u64) -> Result<Candidate> {
    let board =
        u64::try_from(key >> 4).map_err(|_| invalid!("{label}: candidate {i} is too large"))?;
    if paths == 0 {
        return Err(invalid!("{label}: candidate {i} is reached by no sequence"));
    }
    Ok(Candidate {
        board,
        paths,
        back: (key & 15) as u8,
    })
}

/// A forward bucket in the compact form, from its candidates (increasing
/// boards) and the previous level's boards.
pub(super) fn encode_forward_compact(
    candidates: impl IntoIterator<Item = Candidate>,
    previous: &[u64],
) -> Vec<u8> {
    let list =
        encode_list((candidates.into_iter()).map(|c| (candidate_key(c.board, c.back), c.paths)));
    let mut out = Vec::with_capacity(9 + list.len() + previous.len());
    out.push(TAG_FORWARD_COMPACT);
    out.extend_from_slice(&(list.len() as u64).to_le_bytes());
    out.extend_from_slice(&list);
    out.extend_from_slice(&encode_keys(previous.iter().map(|&b| u128::from(b))));
    out
}

/// Where a compact forward bucket's two lists lie in it (after its tag),
/// from the length that follows the tag; `label` names it in errors.
pub(super) fn forward_lists(
    len: u64,
    head: [u8; 8],
    label: &str,
) -> Result<(std::ops::Range<u64>, std::ops::Range<u64>)> {
    let candidates = u64::from_le_bytes(head);
    let start = 9;
    let end = start + candidates.min(len);
    if candidates > len - start.min(len) {
        return Err(invalid!("{label}: its candidates run past its end"));
    }
    Ok((start..end, end..len))
}

/// Reads [`encode_forward_compact`]'s bytes; `label` names the bucket.
pub(super) fn decode_forward_compact(bytes: &[u8], label: &str) -> Result<ForwardBucket> {
    let head = bytes
        .get(1..9)
        .ok_or_else(|| invalid!("{label}: cut short before its candidates"))?;
    let (candidates, previous) =
        forward_lists(bytes.len() as u64, head.try_into().expect("8 bytes"), label)?;
    let range = |r: std::ops::Range<u64>| &bytes[r.start as usize..r.end as usize];
    let mut list = ListStream::new(range(candidates), format!("{label}: its candidates"))?;
    let mut bucket = ForwardBucket::default();
    while let Some((key, paths)) = list.pull()? {
        let i = bucket.candidates.len() as u64;
        (bucket.candidates).push(candidate_of(key, paths, label, i)?);
    }
    bucket.previous = read_boards(range(previous), &format!("{label}: its previous level"))?;
    Ok(bucket)
}

/// A compact list of boards, read whole; `label` names it in errors.
fn read_boards<S: Source>(source: S, label: &str) -> Result<Vec<u64>> {
    let mut list = ListStream::new(source, label.to_string())?;
    let mut boards = Vec::new();
    while let Some((key, _)) = list.pull()? {
        boards.push(board_of(key, label)?);
    }
    Ok(boards)
}

/// The board of a key of a compact list of boards.
pub(super) fn board_of(key: u128, label: &str) -> Result<u64> {
    u64::try_from(key).map_err(|_| invalid!("{label}: board {key} is too large"))
}

/// The compact tag of a raw tag of a list of boards.
fn compact_tag(tag: u8) -> u8 {
    match tag {
        TAG_MEMBERS => TAG_MEMBERS_COMPACT,
        TAG_NEIGHBOURS => TAG_NEIGHBOURS_COMPACT,
        other => other,
    }
}

/// A bucket of boards (members or neighbours, `tag` their raw tag) in `form`.
pub(super) fn encode_boards_as(form: ListForm, tag: u8, boards: &[u64]) -> Vec<u8> {
    match form {
        ListForm::Raw => {
            let mut out = Vec::with_capacity(1 + 2 * boards.len());
            out.push(tag);
            push_increasing(&mut out, boards);
            out
        }
        ListForm::Compact => {
            let mut out = vec![compact_tag(tag)];
            out.extend_from_slice(&encode_keys(boards.iter().map(|&b| u128::from(b))));
            out
        }
    }
}

/// Whether `tag` is the raw tag `raw` of a list of boards or its compact one.
pub(super) fn is_boards_tag(tag: Option<u8>, raw: u8) -> bool {
    tag == Some(raw) || tag == Some(compact_tag(raw))
}

/// The boards of a compact bucket of boards (past its tag); `what` names it.
pub(super) fn decode_boards_compact(bytes: &[u8], what: &str) -> Result<Vec<u64>> {
    read_boards(&bytes[1..], what)
}

/// A writer of a compact forward bucket's candidates as they come.
pub(super) struct CandidateWriter(ChunkWriter);

impl CandidateWriter {
    pub(super) fn new() -> CandidateWriter {
        CandidateWriter(ChunkWriter::new())
    }

    #[inline]
    pub(super) fn push(&mut self, board: u64, paths: u128, back: u8, out: &mut Vec<u8>) {
        self.0.push(candidate_key(board, back), paths, out);
    }

    /// Writes the last chunk: the candidates written.
    pub(super) fn finish(self, out: &mut Vec<u8>) -> u128 {
        self.0.finish(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sliders::levels::{decode_members, decode_neighbours};
    use crate::test_rng::Rng;

    /// Random forward buckets and lists of boards (empty, small, large;
    /// boards up to 64 bits, counts up to 128) read back from the compact
    /// form; a cut or a damaged byte is refused naming the list.
    #[test]
    fn compact_buckets_round_trip_and_damaged_ones_are_refused_naming_the_list() {
        let mut rng = Rng::new(244);
        let boards = |rng: &mut Rng| {
            let len = [0, 1, 3, 5000][rng.below(4u64) as usize];
            let shift = rng.below(64u64);
            let mut list: Vec<u64> = (0..len)
                .map(|_| rng.next_u64() >> shift)
                .chain((len > 1).then_some(u64::MAX))
                .collect();
            list.sort_unstable();
            list.dedup();
            list
        };
        for round in 0..30 {
            let candidates = boards(&mut rng)
                .into_iter()
                .map(|board| Candidate {
                    board,
                    paths: match rng.below(3u64) {
                        0 => u128::MAX - u128::from(rng.below(5u64)),
                        _ => 1 + u128::from(rng.next_u64() >> rng.below(64u64)),
                    },
                    back: rng.below(16u64) as u8,
                })
                .collect();
            let bucket = ForwardBucket {
                candidates,
                previous: boards(&mut rng),
            };
            let bytes = bucket.encode_as(ListForm::Compact);
            assert_eq!(bytes[0], TAG_FORWARD_COMPACT);
            assert_eq!(
                ForwardBucket::decode(&bytes).unwrap(),
                bucket,
                "round {round}"
            );
            let members = encode_boards_as(ListForm::Compact, TAG_MEMBERS, &bucket.previous);
            assert_eq!(decode_members(&members).unwrap(), bucket.previous);
            let neighbours = encode_boards_as(ListForm::Compact, TAG_NEIGHBOURS, &bucket.previous);
            assert_eq!(decode_neighbours(&neighbours).unwrap(), bucket.previous);
            assert!(
                decode_members(&neighbours).is_err(),
                "neighbours are no members"
            );
            for _ in 0..20 {
                let cut = rng.below(bytes.len() as u64) as usize;
                let e = ForwardBucket::decode(&bytes[..cut])
                    .unwrap_err()
                    .to_string();
                assert!(e.starts_with("forward bucket: "), "cut at {cut}: {e}");
                let at = 9 + rng.below(bytes.len() as u64 - 9) as usize;
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << rng.below(8u64);
                let e = ForwardBucket::decode(&damaged).unwrap_err().to_string();
                assert!(e.starts_with("forward bucket: its "), "byte {at}: {e}");
                let cut = 1 + rng.below(members.len() as u64 - 1) as usize;
                let e = decode_members(&members[..cut]).unwrap_err().to_string();
                assert!(e.starts_with("level bucket: "), "cut at {cut}: {e}");
            }
        }
    }
}
