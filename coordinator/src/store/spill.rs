//! Large values kept beside sled, one file each in `<data>/values/`.
//!
//! sled 0.34 writes any page above about 128 KiB as a separate blob file and
//! never deletes those files when the value is removed, so stage outputs and
//! large checkpoints grew the store without bound (a hex cell-step job of side
//! 11 left 180 MB behind). Values of [`Tree::Blobs`](super::Tree::Blobs) above
//! [`SPILL_THRESHOLD`] are therefore written here, and sled holds only a
//! reference (name, offset, length, digest) in a tree of its own: sled's
//! leaves (at most 16 entries) then stay far below its blob size. The digest
//! is XXH3 (64 bits); references written before it was are FNV-1a, and
//! references written before offsets name a whole file: both still read.
//!
//! Order of a commit: the files are written when their batch is applied (under
//! the scheduler's lock, so not fsynced there), fsynced with the directory
//! just before the sled transaction that references them is written (in the
//! flush, outside that lock), then the transaction is flushed, then the files
//! it no longer references are deleted. A crash in between leaves files no
//! entry references; opening the store deletes them. Opening also checks every
//! referenced file's length and digest, so a lost or damaged file is found
//! there like any other loss of acknowledged data.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use tally_wire::digest::fnv1a64;

use crate::error::{CoordinatorError, Result};

/// Values of the blob tree larger than this are spilled to files.
pub const SPILL_THRESHOLD: usize = 4 << 10;

/// The directory of spilled values, inside the data directory.
pub const VALUES_DIR: &str = "values";

/// Where a spilled value lives, as sled stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillRef {
    /// The file holding the value.
    pub name: String,
    /// Where the value starts in the file (0 for a whole-file reference).
    pub offset: u64,
    pub len: u64,
    pub digest: u64,
    pub format: RefFormat,
}

/// How a [`SpillRef`] is stored: where its value lies and how it was digested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefFormat {
    /// The whole file, FNV-1a: references written before XXH3.
    WholeFileFnv1a,
    /// The whole file, XXH3: references written before packs.
    WholeFileXxh3,
    /// `len` bytes at `offset` of a pack, XXH3.
    Packed,
}

impl RefFormat {
    fn digest(self) -> ValueDigest {
        match self {
            RefFormat::WholeFileFnv1a => ValueDigest::Fnv1a,
            RefFormat::WholeFileXxh3 | RefFormat::Packed => ValueDigest::Xxh3,
        }
    }
}

/// How a value's digest is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueDigest {
    /// FNV-1a, a byte at a time: references written before XXH3.
    Fnv1a,
    /// XXH3 (64 bits): some tens of times faster on the megabyte chunks of
    /// stage outputs, which are hashed when written and when read.
    Xxh3,
}

impl ValueDigest {
    fn of(self, bytes: &[u8]) -> u64 {
        match self {
            ValueDigest::Fnv1a => fnv1a64(bytes),
            ValueDigest::Xxh3 => xxhash_rust::xxh3::xxh3_64(bytes),
        }
    }
}

/// Marks a whole-file XXH3 reference: before the name, which is digits and
/// dashes. No mark is FNV-1a.
const XXH3_MARK: u8 = b'x';

/// Marks a packed reference: followed by the offset (8 bytes, big-endian),
/// then the name.
const PACKED_MARK: u8 = b'o';

impl SpillRef {
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(25 + self.name.len());
        bytes.extend_from_slice(&self.len.to_be_bytes());
        bytes.extend_from_slice(&self.digest.to_be_bytes());
        match self.format {
            RefFormat::WholeFileFnv1a => {}
            RefFormat::WholeFileXxh3 => bytes.push(XXH3_MARK),
            RefFormat::Packed => {
                bytes.push(PACKED_MARK);
                bytes.extend_from_slice(&self.offset.to_be_bytes());
            }
        }
        bytes.extend_from_slice(self.name.as_bytes());
        bytes
    }

    /// `None` for bytes that are not a reference, or that name a file outside
    /// the values directory.
    pub fn decode(bytes: &[u8]) -> Option<SpillRef> {
        let len = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let digest = u64::from_be_bytes(bytes.get(8..16)?.try_into().ok()?);
        let (format, offset, name) = match bytes.get(16..)? {
            [XXH3_MARK, name @ ..] => (RefFormat::WholeFileXxh3, 0, name),
            [PACKED_MARK, rest @ ..] => {
                let offset = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
                (RefFormat::Packed, offset, rest.get(8..)?)
            }
            name => (RefFormat::WholeFileFnv1a, 0, name),
        };
        let name = std::str::from_utf8(name).ok()?;
        let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit() || b == b'-');
        plain.then(|| SpillRef {
            name: name.to_string(),
            offset,
            len,
            digest,
            format,
        })
    }
}

/// The values directory of one store.
pub struct ValueFiles {
    dir: PathBuf,
    /// Files written and not yet fsynced, by name.
    unsynced: parking_lot::Mutex<Vec<String>>,
}

impl ValueFiles {
    /// The values directory of the store in `store_dir`, created if missing.
    pub fn open(store_dir: &Path) -> Result<ValueFiles> {
        let dir = store_dir.join(VALUES_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, "create", &e))?;
        Ok(ValueFiles {
            dir,
            unsynced: Default::default(),
        })
    }

    /// Writes `value` as the file `name` (replacing a leftover of a commit
    /// that failed), not yet durably: [`ValueFiles::sync_written`] makes it so.
    pub fn write(&self, name: &str, value: &[u8]) -> Result<SpillRef> {
        let path = self.dir.join(name);
        let mut file = File::create(&path).map_err(|e| io_error(&path, "create", &e))?;
        file.write_all(value)
            .map_err(|e| io_error(&path, "write", &e))?;
        self.unsynced.lock().push(name.to_string());
        Ok(SpillRef {
            name: name.to_string(),
            offset: 0,
            len: value.len() as u64,
            digest: ValueDigest::Xxh3.of(value),
            format: RefFormat::Packed,
        })
    }

    /// Makes every file written so far durable, content and directory entry:
    /// before a transaction that references them is written. A file deleted
    /// meanwhile (replaced before it was referenced) needs nothing.
    pub fn sync_written(&self) -> Result<()> {
        let names = std::mem::take(&mut *self.unsynced.lock());
        if names.is_empty() {
            return Ok(());
        }
        for name in &names {
            let path = self.dir.join(name);
            match std::fs::File::open(&path) {
                Ok(file) => file.sync_all().map_err(|e| io_error(&path, "sync", &e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path, "open", &e)),
            }
        }
        self.sync()
    }

    /// Forgets the files written and not synced: after a failed write, the
    /// store is read back and they are swept as unreferenced.
    pub fn forget_unsynced(&self) {
        self.unsynced.lock().clear();
    }

    /// Makes the files written so far durable as directory entries.
    pub fn sync(&self) -> Result<()> {
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(&self.dir, "sync", &e))
    }

    /// The value `spilled` refers to, checked against its length and digest.
    pub fn read(&self, spilled: &SpillRef) -> Result<Vec<u8>> {
        let path = self.dir.join(&spilled.name);
        let damaged = || {
            CoordinatorError::Store(format!(
                "the value file {} is damaged: the {} bytes at {} are missing or differ from \
                 what was committed",
                path.display(),
                spilled.len,
                spilled.offset
            ))
        };
        let file = File::open(&path).map_err(|e| io_error(&path, "read", &e))?;
        let file_len = file
            .metadata()
            .map_err(|e| io_error(&path, "read", &e))?
            .len();
        // A pack holds more than the value; a file of an older reference is
        // the value. The length is checked before it is allocated.
        let fits = match spilled.format {
            RefFormat::Packed => spilled
                .offset
                .checked_add(spilled.len)
                .is_some_and(|end| end <= file_len),
            RefFormat::WholeFileFnv1a | RefFormat::WholeFileXxh3 => file_len == spilled.len,
        };
        if !fits {
            return Err(damaged());
        }
        let mut bytes = vec![0; usize::try_from(spilled.len).map_err(|_| damaged())?];
        file.read_exact_at(&mut bytes, spilled.offset)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => damaged(),
                _ => io_error(&path, "read", &e),
            })?;
        if spilled.format.digest().of(&bytes) != spilled.digest {
            return Err(damaged());
        }
        Ok(bytes)
    }

    /// Deletes the file `name`, if there; a file left behind is deleted by
    /// the next [`ValueFiles::sweep`].
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(name));
    }

    /// Deletes every file not in `referenced` (left by a commit that failed or
    /// by a crash before its old files were deleted); returns how many.
    pub fn sweep(&self, referenced: &HashSet<String>) -> Result<usize> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io_error(&self.dir, "read", &e))?;
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !referenced.contains(&name) {
                std::fs::remove_file(entry.path())
                    .map_err(|e| io_error(&entry.path(), "remove", &e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Bytes the files occupy.
    pub fn size(&self) -> u64 {
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }
}

/// A failed file operation as the store's error, classified like sled's.
fn io_error(path: &Path, what: &str, e: &std::io::Error) -> CoordinatorError {
    use super::faults::StorageFault;
    let path = path.display();
    match StorageFault::of_io(e) {
        StorageFault::Full => CoordinatorError::StoreFull(format!(
            "the disk holding {path} is full ({e}); work is paused until space is freed"
        )),
        StorageFault::Permission => {
            CoordinatorError::Store(format!("no permission to {what} {path} ({e})"))
        }
        _ => CoordinatorError::Store(format!("cannot {what} {path} ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference's bytes as a release before packs wrote them: length,
    /// digest, the mark if any, the name.
    fn whole_file_reference(len: u64, digest: u64, mark: &[u8], name: &str) -> Vec<u8> {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&digest.to_be_bytes());
        bytes.extend_from_slice(mark);
        bytes.extend_from_slice(name.as_bytes());
        bytes
    }

    #[test]
    fn references_round_trip_and_never_name_another_path() {
        let spilled = SpillRef {
            name: "17-3".into(),
            offset: 0x0102_0304_0506,
            len: 5000,
            digest: 0xdead_beef,
            format: RefFormat::Packed,
        };
        assert_eq!(SpillRef::decode(&spilled.encode()), Some(spilled.clone()));
        // References written before packs: no mark (FNV-1a) or `x` (XXH3),
        // a whole file read from its start, written back as they were.
        for (mark, format) in [
            (&b""[..], RefFormat::WholeFileFnv1a),
            (b"x", RefFormat::WholeFileXxh3),
        ] {
            let old = whole_file_reference(5000, 0xdead_beef, mark, "17-3");
            let decoded = SpillRef::decode(&old).unwrap();
            assert_eq!(decoded.format, format);
            assert_eq!(
                (decoded.name.as_str(), decoded.offset, decoded.digest),
                ("17-3", 0, 0xdead_beef)
            );
            assert_eq!(decoded.encode(), old, "written back as it was");
        }
        for name in ["../etc/passwd", "a/b", "", "17.3", "x", "o"] {
            for format in [
                RefFormat::Packed,
                RefFormat::WholeFileXxh3,
                RefFormat::WholeFileFnv1a,
            ] {
                let bad = SpillRef {
                    name: name.into(),
                    format,
                    ..spilled.clone()
                };
                assert_eq!(SpillRef::decode(&bad.encode()), None, "{name:?}");
            }
        }
        assert_eq!(SpillRef::decode(&[0; 15]), None);
        // A packed reference cut inside its offset.
        assert_eq!(SpillRef::decode(&spilled.encode()[..20]), None);
    }

    #[test]
    fn a_changed_or_missing_file_is_refused_and_unreferenced_files_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let value = vec![7u8; 10_000];
        let kept = files.write("1-0", &value).unwrap();
        let damaged = files.write("1-1", &value).unwrap();
        files.write("2-0", b"left by a failed commit").unwrap();
        files.sync_written().unwrap();
        assert_eq!(files.read(&kept).unwrap(), value);
        let path = dir.path().join(VALUES_DIR).join("1-1");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[4321] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(
            files
                .read(&damaged)
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
        files.remove("1-1");
        assert!(files.read(&damaged).is_err());
        let referenced: HashSet<String> = ["1-0".to_string()].into();
        assert_eq!(files.sweep(&referenced).unwrap(), 1);
        assert_eq!(files.read(&kept).unwrap(), value);
        assert_eq!(files.size(), 10_000);
    }

    /// Files written under the references of releases before packs (a
    /// whole file each, FNV-1a or XXH3) are read and checked by their own
    /// digest, and only whole.
    #[test]
    fn values_under_older_references_are_whole_files_checked_by_their_own_digest() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let value: Vec<u8> = (0..9000u32).map(|i| (i * 7) as u8).collect();
        let fnv = fnv1a64(&value);
        let xxh3 = xxhash_rust::xxh3::xxh3_64(&value);
        for (name, mark, digest) in [("3-0", &b""[..], fnv), ("3-1", b"x", xxh3)] {
            let path = dir.path().join(VALUES_DIR).join(name);
            std::fs::write(&path, &value).unwrap();
            let older = SpillRef::decode(&whole_file_reference(9000, digest, mark, name)).unwrap();
            assert_eq!(files.read(&older).unwrap(), value, "{name}");
            // The other digest does not pass.
            let other = if digest == fnv { xxh3 } else { fnv };
            let mismatched = SpillRef::decode(&whole_file_reference(9000, other, mark, name));
            assert!(files.read(&mismatched.unwrap()).is_err(), "{name}");
            // A whole-file value is the file: one byte more is damage too.
            let mut longer = value.clone();
            longer.push(0);
            std::fs::write(&path, &longer).unwrap();
            assert!(files.read(&older).is_err(), "{name}");
        }
    }
}
