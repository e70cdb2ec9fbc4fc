//! The compact form of a frontier level's lists: keys strictly increasing,
//! each with a count, in checksummed chunks.
//!
//! A list is its entry count (a varint), then chunks of at most
//! [`CHUNK_ENTRIES`] entries until that count is reached. A chunk is its entry
//! count and its payload's length (varints), the CRC-32 of those two and the
//! payload (u32, little-endian), then the payload: for each entry the gap
//! from the previous key (the first key of the list itself) and the count, as
//! bit codes (`bitcode`: Rice codes of the gaps, each count's length and its
//! bits). A list of keys alone (a set: blocks' layers, sliders' boards)
//! writes no counts ([`ChunkWriter::keys_only`], [`encode_keys`]) and reads
//! each with a count of 1. The caller chooses keys that make the gaps small (pegs: the rank of
//! a board among the boards of its peg count, see `pegs::LevelForm`).
//!
//! The count comes first so that a reader knows where the list ends, and it is
//! known only once the list is written: a writer to a spill run returns it and
//! writes the chunks (as `spill::CountedList::Spilled` keeps them). Readers
//! read a chunk at a time from a [`Source`], never the list whole, and refuse,
//! naming the list, a chunk whose checksum fails (bytes damaged on a disk or in
//! transit that a varint reader would take for other numbers), a list cut
//! short, and entries not strictly increasing.

use crate::bitcode::{decode_chunk, encode_chunk};
use crate::spill::{Source, VarintStream};
use crate::{Error, Result, invalid, varint};

/// Entries of a chunk at most: a chunk is read and checked whole, so it
/// stays small (at most 74 bytes an entry).
pub const CHUNK_ENTRIES: usize = 4096;

/// Bytes of one entry at most: two escaped codes of a `u128`.
const MAX_ENTRY_BYTES: u128 = 74;

/// The form of a job's level lists, fixed when the job is planned: the
/// form of the kind (varints) in jobs planned before the compact form, the
/// compact form since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListForm {
    #[default]
    Raw,
    Compact,
}

impl ListForm {
    /// The form of a plan or task that says whether it is compact.
    pub fn compact_if(compact: bool) -> ListForm {
        match compact {
            true => ListForm::Compact,
            false => ListForm::Raw,
        }
    }
}

/// Writes a list's chunks as its entries come; the entry count, which comes
/// first in the list, is [`ChunkWriter::finish`]'s.
#[derive(Default)]
pub struct ChunkWriter {
    gaps: Vec<u128>,
    counts: Vec<u128>,
    /// Counts are not written (each is read as 1).
    keys_only: bool,
    payload: Vec<u8>,
    previous: Option<u128>,
    entries: u128,
}

impl ChunkWriter {
    pub fn new() -> ChunkWriter {
        ChunkWriter::default()
    }

    /// A writer of keys alone: [`ChunkWriter::push_key`].
    pub fn keys_only() -> ChunkWriter {
        ChunkWriter {
            keys_only: true,
            ..ChunkWriter::default()
        }
    }

    /// Appends a key of a list of keys alone.
    #[inline]
    pub fn push_key(&mut self, key: u128, out: &mut Vec<u8>) {
        debug_assert!(self.keys_only);
        self.push(key, 1, out);
    }

    /// Appends an entry; each full chunk goes to the end of `out`.
    ///
    /// # Panics
    /// If `key` is not above the previous key (lists are sorted and
    /// deduplicated by construction, so this is a bug in the caller).
    #[inline]
    pub fn push(&mut self, key: u128, count: u128, out: &mut Vec<u8>) {
        let gap = match self.previous {
            None => key,
            Some(previous) => {
                assert!(key > previous, "compact lists need increasing keys");
                key - previous
            }
        };
        self.gaps.push(gap);
        if !self.keys_only {
            self.counts.push(count);
        }
        self.previous = Some(key);
        self.entries += 1;
        if self.gaps.len() == CHUNK_ENTRIES {
            self.end_chunk(out);
        }
    }

    fn end_chunk(&mut self, out: &mut Vec<u8>) {
        if self.gaps.is_empty() {
            return;
        }
        self.payload.clear();
        let counts = Some(&self.counts[..]).filter(|_| !self.keys_only);
        encode_chunk(&self.gaps, counts, &mut self.payload);
        let start = out.len();
        varint::push(out, self.gaps.len() as u128);
        varint::push(out, self.payload.len() as u128);
        let crc = chunk_crc(&out[start..], &self.payload);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.payload);
        self.gaps.clear();
        self.counts.clear();
    }

    /// Writes the last chunk to `out`: the entries of the list.
    pub fn finish(mut self, out: &mut Vec<u8>) -> u128 {
        self.end_chunk(out);
        self.entries
    }
}

/// The CRC-32 of a chunk's head (its entries and length) and payload.
fn chunk_crc(head: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head);
    hasher.update(payload);
    hasher.finalize()
}

/// A whole list in memory, from its entries in increasing key order.
pub fn encode_list(entries: impl IntoIterator<Item = (u128, u128)>) -> Vec<u8> {
    let mut body = Vec::new();
    let mut writer = ChunkWriter::new();
    for (key, count) in entries {
        writer.push(key, count, &mut body);
    }
    with_count(writer, body)
}

/// A whole list of keys alone in memory, from its keys in increasing order.
pub fn encode_keys(keys: impl IntoIterator<Item = u128>) -> Vec<u8> {
    let mut body = Vec::new();
    let mut writer = ChunkWriter::keys_only();
    for key in keys {
        writer.push_key(key, &mut body);
    }
    with_count(writer, body)
}

/// The list of what `writer` wrote to `body`: its entry count first.
fn with_count(writer: ChunkWriter, mut body: Vec<u8>) -> Vec<u8> {
    let entries = writer.finish(&mut body);
    let mut out = Vec::with_capacity(body.len() + 4);
    varint::push(&mut out, entries);
    out.extend_from_slice(&body);
    out
}

/// A list read as it comes, a chunk at a time, checked; `label` names the
/// list in every error.
pub struct ListStream<S> {
    stream: VarintStream<S>,
    label: String,
    /// Entries of the list not read yet.
    left: u128,
    entries: u128,
    read: u128,
    payload: Vec<u8>,
    /// The chunk's gaps and counts, and the next one to read.
    chunk_entries: Vec<(u128, u128)>,
    at: usize,
    chunk: u64,
    previous: Option<u128>,
}

impl<S: Source> ListStream<S> {
    pub fn new(source: S, label: String) -> Result<ListStream<S>> {
        let mut stream = VarintStream::new(source, "compact list");
        let entries = stream
            .varint("its entry count")
            .map_err(|_| invalid!("{label}: truncated before its entry count"))?;
        Ok(ListStream {
            stream,
            label,
            left: entries,
            entries,
            read: 0,
            payload: Vec::new(),
            chunk_entries: Vec::new(),
            at: 0,
            chunk: 0,
            previous: None,
        })
    }

    /// The entries the list says it holds.
    pub fn len(&self) -> u128 {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    fn truncated(&self) -> Error {
        invalid!(
            "{}: truncated in chunk {} ({} of its {} entries read)",
            self.label,
            self.chunk,
            self.read,
            self.entries
        )
    }

    fn damaged(&self, what: &str) -> Error {
        invalid!("{}: chunk {} is damaged ({what})", self.label, self.chunk)
    }

    fn next_chunk(&mut self) -> Result<()> {
        let entries = self
            .stream
            .varint("a chunk's entries")
            .map_err(|_| self.truncated())?;
        let len = self
            .stream
            .varint("a chunk's length")
            .map_err(|_| self.truncated())?;
        if entries == 0 || entries > CHUNK_ENTRIES as u128 || entries > self.left {
            return Err(self.damaged(&format!("{entries} entries")));
        }
        if len < 2 || len > MAX_ENTRY_BYTES * entries {
            return Err(self.damaged(&format!("{len} bytes for {entries} entries")));
        }
        let mut crc = [0; 4];
        self.stream
            .read_exact(&mut crc)
            .map_err(|_| self.truncated())?;
        self.payload.resize(len as usize, 0);
        self.stream
            .read_exact(&mut self.payload)
            .map_err(|_| self.truncated())?;
        let mut head = Vec::with_capacity(8);
        varint::push(&mut head, entries);
        varint::push(&mut head, len);
        if chunk_crc(&head, &self.payload) != u32::from_le_bytes(crc) {
            return Err(self.damaged("its checksum fails"));
        }
        decode_chunk(&self.payload, entries as usize, &mut self.chunk_entries)
            .ok_or_else(|| self.damaged("its entries do not fill it"))?;
        self.at = 0;
        Ok(())
    }

    /// The next key and its count, or `None` after the last (and then an
    /// error if bytes follow the list).
    #[inline]
    pub fn pull(&mut self) -> Result<Option<(u128, u128)>> {
        if self.at == self.chunk_entries.len() {
            if self.left == 0 {
                if !self.stream.at_end()? {
                    return Err(invalid!(
                        "{}: bytes after its {} entries",
                        self.label,
                        self.entries
                    ));
                }
                return Ok(None);
            }
            self.next_chunk()?;
        }
        let (gap, count) = self.chunk_entries[self.at];
        self.at += 1;
        let key = match self.previous {
            None => gap,
            Some(_) if gap == 0 => {
                return Err(invalid!(
                    "{}: entry {} repeats the previous key",
                    self.label,
                    self.read
                ));
            }
            Some(previous) => previous
                .checked_add(gap)
                .ok_or_else(|| invalid!("{}: entry {} overflows", self.label, self.read))?,
        };
        self.previous = Some(key);
        self.read += 1;
        self.left -= 1;
        self.chunk += u64::from(self.at == self.chunk_entries.len());
        Ok(Some((key, count)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Random lists: sizes across chunk boundaries, keys dense and sparse,
    /// counts small and past 64 bits.
    fn random_list(rng: &mut Rng) -> Vec<(u128, u128)> {
        let len = match rng.below(4u64) {
            0 => rng.below(3u64) as usize,
            1 => CHUNK_ENTRIES - 1 + rng.below(3u64) as usize,
            _ => rng.below(3 * CHUNK_ENTRIES as u64) as usize,
        };
        let mut key: u128 = u128::from(rng.below(1000u64));
        (0..len)
            .map(|_| {
                let small = rng.next_u64() >> rng.below(64u64);
                let entry = (key, (1 + u128::from(small)) << rng.below(64u64));
                key += 1 + match rng.below(3u64) {
                    0 => 0,
                    1 => u128::from(rng.below(300u64)),
                    _ => u128::from(rng.next_u64()) << 20,
                };
                entry
            })
            .collect()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(u128, u128)>> {
        let mut stream = ListStream::new(bytes, "level 7 part 2".into())?;
        let mut entries = Vec::new();
        while let Some(entry) = stream.pull()? {
            entries.push(entry);
        }
        Ok(entries)
    }

    #[test]
    fn lists_round_trip_whole_and_written_as_they_come() {
        let mut rng = Rng::new(55);
        for _ in 0..60 {
            let list = random_list(&mut rng);
            let bytes = encode_list(list.iter().copied());
            assert_eq!(read_all(&bytes).unwrap(), list);
            // Written chunk by chunk after a count given apart, as a spill
            // run holds it: the same bytes.
            let mut body = Vec::new();
            let mut writer = ChunkWriter::new();
            for &(key, count) in &list {
                writer.push(key, count, &mut body);
            }
            let mut head = Vec::new();
            varint::push(&mut head, writer.finish(&mut body));
            head.extend_from_slice(&body);
            assert_eq!(head, bytes);
        }
    }

    #[test]
    fn lists_of_keys_alone_round_trip_and_cost_no_count_bits() {
        let mut rng = Rng::new(57);
        for round in 0..40 {
            let mut keys: Vec<u128> = random_list(&mut rng).iter().map(|&(k, _)| k).collect();
            if round % 4 == 0 {
                keys.push(u128::MAX);
            }
            let bytes = encode_keys(keys.iter().copied());
            let ones: Vec<(u128, u128)> = keys.iter().map(|&k| (k, 1)).collect();
            assert_eq!(read_all(&bytes).unwrap(), ones);
            let mut body = Vec::new();
            let mut writer = ChunkWriter::keys_only();
            for &key in &keys {
                writer.push_key(key, &mut body);
            }
            let mut head = Vec::new();
            varint::push(&mut head, writer.finish(&mut body));
            head.extend_from_slice(&body);
            assert_eq!(head, bytes);
            if keys.len() >= 8 {
                let counted = encode_list(ones.iter().copied());
                assert!(bytes.len() < counted.len(), "round {round}");
            }
        }
    }

    #[test]
    fn damaged_and_truncated_lists_are_refused_naming_the_list() {
        let mut rng = Rng::new(56);
        let list: Vec<(u128, u128)> = (0..3 * CHUNK_ENTRIES as u128 / 2)
            .map(|i| (3 * i + 1, 1 + (i << 40)))
            .collect();
        let bytes = encode_list(list.iter().copied());
        for _ in 0..200 {
            let cut = rng.below(bytes.len());
            let e = read_all(&bytes[..cut]).unwrap_err().to_string();
            assert!(e.starts_with("level 7 part 2: "), "cut at {cut}: {e}");
            let mut damaged = bytes.clone();
            let at = rng.below(bytes.len());
            damaged[at] ^= 1 << rng.below(8u64);
            let e = read_all(&damaged).unwrap_err().to_string();
            assert!(e.starts_with("level 7 part 2: "), "byte {at}: {e}");
        }
        let e = read_all(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
        assert!(e.contains("truncated in chunk 1"), "{e}");
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x40;
        let e = read_all(&damaged).unwrap_err().to_string();
        assert!(e.contains("chunk 1 is damaged"), "{e}");
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            read_all(&longer)
                .unwrap_err()
                .to_string()
                .contains("bytes after")
        );
    }
}
