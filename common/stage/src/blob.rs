//! The format of a stage blob: an index of SHA-256 digests, one per 64 KiB
//! chunk of the data, then the data. The coordinator commits only the blob's
//! key, size and the digest of its index; a reader checks the index against
//! that digest and every chunk it reads against the index, so a reader of one
//! bucket (a byte range) checks what it reads without reading the rest.
//!
//! Layout: `TSB1`, the chunk size (u32 LE), the data length (u64 LE), the
//! chunks' digests (32 bytes each), the data.

use std::ops::Range;

use sha2::{Digest, Sha256};
use tally_kinds::{Error as KindError, Stored};

use crate::error::{Result, StageError};

const MAGIC: &[u8; 4] = b"TSB1";
const HEADER: u64 = 16;
/// The data each digest covers: a bucket read costs at most two chunks more
/// than the bucket.
pub const CHUNK: u64 = 64 * 1024;

/// A blob as committed: where it is, how long it is, and the digest of its
/// index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlobRef {
    pub key: String,
    pub size: u64,
    pub digest: [u8; 32],
    /// Where the blob starts in its object: 0 for a blob of its own, else
    /// its place in a pack of several shards' outputs (see
    /// [`crate::StageStore::put_pack`]).
    pub offset: u64,
}

/// The first bytes of a reference as the coordinator stores it: a blob of
/// its own, and one in a pack (the offset follows the digest).
const REF_MAGIC: &[u8; 4] = b"TSBR";
const PACKED_REF_MAGIC: &[u8; 4] = b"TSBP";

impl BlobRef {
    /// The reference as the coordinator stores it: `TSBR`, the size (u64
    /// LE), the digest, the key; a blob in a pack: `TSBP`, the size, the
    /// digest, the offset (u64 LE), the key. (A blob of its own keeps the
    /// form of the releases before packs.)
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(52 + self.key.len());
        let packed = self.offset > 0;
        bytes.extend_from_slice(match packed {
            true => PACKED_REF_MAGIC,
            false => REF_MAGIC,
        });
        bytes.extend_from_slice(&self.size.to_le_bytes());
        bytes.extend_from_slice(&self.digest);
        if packed {
            bytes.extend_from_slice(&self.offset.to_le_bytes());
        }
        bytes.extend_from_slice(self.key.as_bytes());
        bytes
    }

    /// Whether `bytes` begin as a reference [`BlobRef::encode`] wrote: bytes
    /// that do are never kept as anything else, so a stored value is told
    /// apart from a reference by its first bytes.
    pub fn is_encoded(bytes: &[u8]) -> bool {
        bytes.starts_with(REF_MAGIC) || bytes.starts_with(PACKED_REF_MAGIC)
    }

    /// A reference [`BlobRef::encode`] wrote, or `None`.
    pub fn decode(bytes: &[u8]) -> Option<BlobRef> {
        let packed = bytes.starts_with(PACKED_REF_MAGIC);
        let key_at = if packed { 52 } else { 44 };
        if bytes.len() <= key_at || !BlobRef::is_encoded(bytes) {
            return None;
        }
        let offset = match packed {
            true => u64::from_le_bytes(bytes[44..52].try_into().ok()?),
            false => 0,
        };
        Some(BlobRef {
            size: u64::from_le_bytes(bytes[4..12].try_into().ok()?),
            digest: bytes[12..44].try_into().ok()?,
            offset,
            key: String::from_utf8(bytes[key_at..].to_vec()).ok()?,
        })
    }

    /// The byte range of the blob in its object.
    pub fn in_object(&self) -> Range<u64> {
        self.offset..self.offset + self.size
    }
}

impl From<&BlobRef> for tally_wire::proto::BlobRef {
    fn from(blob: &BlobRef) -> Self {
        tally_wire::proto::BlobRef {
            key: blob.key.clone(),
            size: blob.size,
            sha256: blob.digest.to_vec(),
            offset: blob.offset,
        }
    }
}

impl TryFrom<&tally_wire::proto::BlobRef> for BlobRef {
    type Error = StageError;

    /// A reference as a message carries it: a key that a blob key can be, a
    /// 32-byte digest, and a size an index fits in.
    fn try_from(blob: &tally_wire::proto::BlobRef) -> Result<BlobRef> {
        let bad = |why: &str| StageError::Refused(format!("a blob reference {why}"));
        if blob.key.is_empty() || blob.key.len() > 1024 {
            return Err(bad("needs a key of 1 to 1024 bytes"));
        }
        if object_store::path::Path::parse(&blob.key).is_err() {
            return Err(bad("has a malformed key"));
        }
        let digest = blob
            .sha256
            .as_slice()
            .try_into()
            .map_err(|_| bad("needs a 32-byte SHA-256 digest"))?;
        if blob.size < HEADER {
            return Err(bad("is shorter than a blob header"));
        }
        if blob.offset.checked_add(blob.size).is_none() {
            return Err(bad("runs past the end of any object"));
        }
        if blob.offset > 0 && !crate::keys::is_pack_key(&blob.key) {
            return Err(bad("has an offset, and its key names no pack"));
        }
        Ok(BlobRef {
            key: blob.key.clone(),
            size: blob.size,
            digest,
            offset: blob.offset,
        })
    }
}

/// `data` framed as a blob, and the digest of its index.
pub fn encode(data: &[u8]) -> (Vec<u8>, [u8; 32]) {
    let (mut blob, digest) = index(data);
    blob.extend_from_slice(data);
    (blob, digest)
}

/// The index a blob of `data` starts with (the data follows it), and its
/// digest: what a writer sends before the data, without copying the data.
pub fn index(data: &[u8]) -> (Vec<u8>, [u8; 32]) {
    let chunks = (data.len() as u64).div_ceil(CHUNK) as usize;
    let mut index = Vec::with_capacity(HEADER as usize + 32 * chunks);
    index.extend_from_slice(MAGIC);
    index.extend_from_slice(&(CHUNK as u32).to_le_bytes());
    index.extend_from_slice(&(data.len() as u64).to_le_bytes());
    for chunk in data.chunks(CHUNK as usize) {
        index.extend_from_slice(&Sha256::digest(chunk));
    }
    let digest = Sha256::digest(&index).into();
    (index, digest)
}

/// [`index`] of bytes read by ranges (a shard's output in a file), read
/// once in order.
pub fn index_stored(data: &dyn Stored) -> std::result::Result<(Vec<u8>, [u8; 32]), KindError> {
    let len = data.len();
    let chunks = len.div_ceil(CHUNK) as usize;
    let mut index = Vec::with_capacity(HEADER as usize + 32 * chunks);
    index.extend_from_slice(MAGIC);
    index.extend_from_slice(&(CHUNK as u32).to_le_bytes());
    index.extend_from_slice(&len.to_le_bytes());
    // Many chunks a read: the file is read in large sequential pieces.
    let step = 64 * CHUNK;
    let mut at = 0;
    while at < len {
        let piece = data.read_range(at..(at + step).min(len))?;
        for chunk in piece.chunks(CHUNK as usize) {
            index.extend_from_slice(&Sha256::digest(chunk));
        }
        at += piece.len() as u64;
    }
    let digest = Sha256::digest(&index).into();
    Ok((index, digest))
}

/// A blob's index, checked against the committed reference.
#[derive(Clone, Debug)]
pub struct Index {
    chunk: u64,
    data_len: u64,
    digests: Vec<[u8; 32]>,
}

/// The most bytes of a blob of `size` bytes that its index can take: read at
/// once, so the index costs one request.
pub fn index_bound(size: u64) -> u64 {
    // The smallest chunk a writer may use is 4 KiB: past it the index would
    // outgrow what a reader is willing to fetch up front.
    (HEADER + 32 * size.div_ceil(4096)).min(size)
}

impl Index {
    /// Parses and checks the index at the start of `head` (at least the
    /// index's bytes) against `blob`.
    pub fn parse(blob: &BlobRef, head: &[u8]) -> Result<Index> {
        let corrupt = |why: &str| StageError::Corrupt {
            key: blob.key.clone(),
            why: why.to_string(),
        };
        if head.len() < HEADER as usize || &head[..4] != MAGIC {
            return Err(corrupt("it does not start with a blob header"));
        }
        let chunk = u64::from(u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")));
        let data_len = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if chunk < 4096 {
            return Err(corrupt("its chunk size is below 4 KiB"));
        }
        let count = data_len.div_ceil(chunk);
        let index_len = HEADER + 32 * count;
        if index_len.checked_add(data_len) != Some(blob.size) {
            return Err(corrupt(&format!(
                "its header says {data_len} bytes of data, which does not fit its committed size of {} bytes",
                blob.size
            )));
        }
        let Some(index) = head.get(..index_len as usize) else {
            return Err(corrupt("its index is cut short"));
        };
        if <[u8; 32]>::from(Sha256::digest(index)) != blob.digest {
            return Err(corrupt("its index does not match the committed digest"));
        }
        let digests = index[HEADER as usize..]
            .chunks(32)
            .map(|d| d.try_into().expect("32 bytes"))
            .collect();
        Ok(Index {
            chunk,
            data_len,
            digests,
        })
    }

    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Where the data starts in the blob.
    pub fn data_offset(&self) -> u64 {
        HEADER + 32 * self.digests.len() as u64
    }

    /// The chunk-aligned range of the data that covers `range`.
    pub fn covering(&self, range: &Range<u64>) -> Range<u64> {
        let start = range.start / self.chunk * self.chunk;
        let end = range.end.div_ceil(self.chunk) * self.chunk;
        start..end.min(self.data_len)
    }

    /// Checks `bytes`, the data at the chunk-aligned `at`, chunk by chunk.
    pub fn check(&self, blob: &BlobRef, at: u64, bytes: &[u8]) -> Result<()> {
        let first = at / self.chunk;
        for (i, chunk) in bytes.chunks(self.chunk as usize).enumerate() {
            let expected = self.digests.get(first as usize + i);
            if expected != Some(&<[u8; 32]>::from(Sha256::digest(chunk))) {
                return Err(StageError::Corrupt {
                    key: blob.key.clone(),
                    why: format!("chunk {} does not match its digest", first as usize + i),
                });
            }
        }
        Ok(())
    }
}

/// The data of a whole blob, checked against `blob`.
pub fn decode(blob: &BlobRef, bytes: &[u8]) -> Result<Vec<u8>> {
    if bytes.len() as u64 != blob.size {
        return Err(StageError::Corrupt {
            key: blob.key.clone(),
            why: format!(
                "it holds {} bytes, {} were committed",
                bytes.len(),
                blob.size
            ),
        });
    }
    let index = Index::parse(blob, bytes)?;
    let data = &bytes[index.data_offset() as usize..];
    index.check(blob, 0, data)?;
    Ok(data.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(data: &[u8]) -> (Vec<u8>, BlobRef) {
        let (bytes, digest) = encode(data);
        let blob = BlobRef {
            key: "k".into(),
            size: bytes.len() as u64,
            digest,
            offset: 0,
        };
        (bytes, blob)
    }

    #[test]
    fn blobs_round_trip_at_every_size_around_a_chunk() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            let (bytes, blob) = committed(&data);
            assert_eq!(decode(&blob, &bytes).unwrap(), data, "length {len}");
            assert!(index_bound(blob.size) >= Index::parse(&blob, &bytes).unwrap().data_offset());
        }
    }

    #[test]
    fn references_round_trip_as_stored_and_as_sent() {
        let (_, blob) = committed(b"some output");
        let blob = BlobRef {
            key: "jobs/job-000001/2/3/1/output".into(),
            ..blob
        };
        assert_eq!(BlobRef::decode(&blob.encode()), Some(blob.clone()));
        assert_eq!(BlobRef::decode(b"TSBR"), None);
        assert_eq!(BlobRef::decode(&b"XXXX".repeat(20)), None);
        let sent = tally_wire::proto::BlobRef::from(&blob);
        assert_eq!(BlobRef::try_from(&sent).unwrap(), blob);
        for bad in [
            tally_wire::proto::BlobRef {
                sha256: vec![0; 31],
                ..sent.clone()
            },
            tally_wire::proto::BlobRef {
                key: String::new(),
                ..sent.clone()
            },
            tally_wire::proto::BlobRef {
                key: "a//b".into(),
                ..sent.clone()
            },
            tally_wire::proto::BlobRef {
                size: 3,
                ..sent.clone()
            },
            // An offset is a place in a pack, whose key says so.
            tally_wire::proto::BlobRef {
                offset: 8,
                ..sent.clone()
            },
            tally_wire::proto::BlobRef {
                key: "jobs/job-000001/2/packs/3-1".into(),
                offset: u64::MAX - 2,
                ..sent.clone()
            },
        ] {
            assert!(BlobRef::try_from(&bad).is_err(), "{bad:?}");
        }
        // A blob in a pack: its offset kept in both forms, and its stored
        // form told from a blob's own and from bytes that are neither.
        let packed = BlobRef {
            key: "jobs/job-000001/2/packs/3-1".into(),
            offset: 4_000_000_017,
            ..blob.clone()
        };
        let stored = packed.encode();
        assert!(BlobRef::is_encoded(&stored) && stored.starts_with(b"TSBP"));
        assert_eq!(BlobRef::decode(&stored), Some(packed.clone()));
        assert!(
            blob.encode().starts_with(b"TSBR"),
            "a blob of its own keeps its form"
        );
        let sent = tally_wire::proto::BlobRef::from(&packed);
        assert_eq!(BlobRef::try_from(&sent).unwrap(), packed);
        assert_eq!(BlobRef::decode(&stored[..52]), None, "cut before its key");
        assert_eq!(
            packed.in_object(),
            4_000_000_017..4_000_000_017 + packed.size
        );
    }

    #[test]
    fn a_changed_byte_anywhere_is_refused() {
        let data: Vec<u8> = (0..2 * CHUNK + 5).map(|i| (i % 256) as u8).collect();
        let (bytes, blob) = committed(&data);
        for at in [0, 5, 12, 20, 60, bytes.len() / 2, bytes.len() - 1] {
            let mut tampered = bytes.clone();
            tampered[at] ^= 0x40;
            let err = decode(&blob, &tampered).unwrap_err();
            assert!(
                matches!(err, StageError::Corrupt { .. }),
                "byte {at}: {err}"
            );
        }
        let err = decode(&blob, &bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.to_string().contains("committed"), "{err}");
    }

    #[test]
    fn a_range_is_checked_by_the_chunks_that_cover_it() {
        let data: Vec<u8> = (0..5 * CHUNK).map(|i| (i / 3 % 256) as u8).collect();
        let (bytes, blob) = committed(&data);
        let index = Index::parse(&blob, &bytes[..index_bound(blob.size) as usize]).unwrap();
        let want = CHUNK + 10..3 * CHUNK - 1;
        let covering = index.covering(&want);
        assert_eq!(covering, CHUNK..3 * CHUNK);
        let at = index.data_offset();
        let mut read = bytes[(at + covering.start) as usize..(at + covering.end) as usize].to_vec();
        index.check(&blob, covering.start, &read).unwrap();
        read[CHUNK as usize + 3] ^= 1;
        assert!(index.check(&blob, covering.start, &read).is_err());
    }
}
