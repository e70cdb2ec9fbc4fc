//! Large values kept beside sled, packed into files in `<data>/values/`.
//!
//! sled 0.34 writes any page above about 128 KiB as a separate blob file and
//! never deletes those files when the value is removed, so stage outputs and
//! large checkpoints grew the store without bound (a hex cell-step job of side
//! 11 left 180 MB behind). Values of [`Tree::Blobs`](super::Tree::Blobs) above
//! [`SPILL_THRESHOLD`] are therefore written here, and sled holds only a
//! reference (file name, offset, length, digest) in a tree of its own: sled's
//! leaves (at most 16 entries) then stay far below its blob size.
//!
//! Every large value applied between two flushes goes into one pack file,
//! named after the value that opened it (`<commit>-<write>`), so that a flush
//! fsyncs one file and the directory, not one file per value (a job of
//! thousands of small staged outputs paid thousands of fsyncs). The digest is
//! XXH3 (64 bits). References written before packs name a whole file, with an
//! XXH3 digest or, before that, FNV-1a; they still read, and such a file is a
//! pack of one value.
//!
//! Order of a commit: a value is appended to the open pack when its batch is
//! applied (under the scheduler's lock, so not fsynced there). The flush takes
//! the applied writes, then closes the open pack (values applied from then on
//! go to a new one) and fsyncs it and the directory, just before the sled
//! transaction that references them is written (outside that lock); then the
//! transaction is flushed, then the references it dropped are released. A pack
//! is deleted with its last reference: the space of its values dropped before
//! then is not reclaimed until that one goes. A crash in between leaves files
//! no entry references; opening the store deletes them. Opening also checks
//! every referenced value's length and digest, so a lost or damaged value is
//! found there like any other loss of acknowledged data.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// One lock over the open pack and the counts: closing the pack, or
    /// deleting a file whose count dropped to zero, never races an append.
    packs: parking_lot::Mutex<Packs>,
    /// fsyncs of packs and of the directory so far: the tests check that a
    /// flush pays two, not one a value.
    fsyncs: AtomicU64,
}

#[derive(Default)]
struct Packs {
    /// The pack values are appended to until the next sync closes it.
    open: Option<OpenPack>,
    /// The references to each file (in sled, or in writes on their way to
    /// it), by name: a file goes when its count drops to zero.
    references: HashMap<String, u64>,
}

struct OpenPack {
    name: String,
    file: File,
    /// The bytes its values fill: where the next one goes.
    len: u64,
}

impl ValueFiles {
    /// The values directory of the store in `store_dir`, created if missing.
    pub fn open(store_dir: &Path) -> Result<ValueFiles> {
        let dir = store_dir.join(VALUES_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, "create", &e))?;
        Ok(ValueFiles {
            dir,
            packs: Default::default(),
            fsyncs: AtomicU64::new(0),
        })
    }

    /// Counts the references to each file anew from `referenced` (all that
    /// sled holds, with no writes on their way to it) and appends no more to
    /// the open pack: at open, and after a failed write, which lost the
    /// references of the writes not yet in sled.
    pub fn recount<'a>(&self, referenced: impl IntoIterator<Item = &'a SpillRef>) {
        let mut references: HashMap<String, u64> = HashMap::new();
        for spilled in referenced {
            *references.entry(spilled.name.clone()).or_default() += 1;
        }
        *self.packs.lock() = Packs {
            open: None,
            references,
        };
    }

    /// Appends `value` to the open pack, first opening one named `name`
    /// (replacing a leftover of a commit that failed) if none is open; not
    /// yet durably: [`ValueFiles::sync_written`] makes it so.
    pub fn write(&self, name: &str, value: &[u8]) -> Result<SpillRef> {
        let digest = ValueDigest::Xxh3.of(value);
        let mut packs = self.packs.lock();
        let Packs { open, references } = &mut *packs;
        let pack = match open {
            Some(pack) => pack,
            None => open.insert(self.create_pack(name)?),
        };
        // At its offset rather than the file's end: a value whose write
        // failed part way is overwritten by the next.
        pack.file
            .write_all_at(value, pack.len)
            .map_err(|e| io_error(&self.dir.join(&pack.name), "write", &e))?;
        let offset = pack.len;
        pack.len += value.len() as u64;
        *references.entry(pack.name.clone()).or_default() += 1;
        Ok(SpillRef {
            name: pack.name.clone(),
            offset,
            len: value.len() as u64,
            digest,
            format: RefFormat::Packed,
        })
    }

    fn create_pack(&self, name: &str) -> Result<OpenPack> {
        let path = self.dir.join(name);
        let file = File::create(&path).map_err(|e| io_error(&path, "create", &e))?;
        Ok(OpenPack {
            name: name.to_string(),
            file,
            len: 0,
        })
    }

    /// Makes every value written so far durable, content and directory
    /// entry: before a transaction that references them is written. Closes
    /// the open pack, so that values written from now on go to a new one,
    /// and fsyncs it and the directory, once each; a value written before
    /// the call is in that pack or in one an earlier call synced.
    pub fn sync_written(&self) -> Result<()> {
        let Some(pack) = self.packs.lock().open.take() else {
            return Ok(());
        };
        // Outside the lock: applies go on appending to the next pack.
        let path = self.dir.join(&pack.name);
        pack.file
            .sync_all()
            .map_err(|e| io_error(&path, "sync", &e))?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(&self.dir, "sync", &e))?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// fsyncs of packs and of the directory so far.
    #[cfg(test)]
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
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

    /// Drops one reference to the file `name`, deleting the file with the
    /// last one. A pack still open is left (values may yet be appended to
    /// it), as is a file whose count was lost to a recount: the next
    /// [`ValueFiles::sweep`] deletes either if nothing references it.
    pub fn release(&self, name: &str) {
        let mut packs = self.packs.lock();
        let Some(count) = packs.references.get_mut(name) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        packs.references.remove(name);
        if packs.open.as_ref().is_some_and(|pack| pack.name == name) {
            return;
        }
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

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(VALUES_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        names
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
    fn values_written_between_syncs_share_one_pack_synced_once() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let values: Vec<Vec<u8>> = (0..50u32)
            .map(|i| (0..5_000 + i * 997).map(|j| (i + j * 31) as u8).collect())
            .collect();
        let written: Vec<SpillRef> = values
            .iter()
            .enumerate()
            .map(|(i, v)| files.write(&format!("4-{i}"), v).unwrap())
            .collect();
        assert_eq!(files_in(dir.path()), ["4-0"], "named after the first value");
        assert!(written.iter().all(|r| r.name == "4-0"));
        files.sync_written().unwrap();
        assert_eq!(files.fsyncs(), 2, "the pack and the directory, once each");
        files.sync_written().unwrap();
        assert_eq!(files.fsyncs(), 2, "nothing written since");
        for (spilled, value) in written.iter().zip(&values) {
            assert_eq!(&files.read(spilled).unwrap(), value);
        }
        let total: usize = values.iter().map(Vec::len).sum();
        assert_eq!(files.size(), total as u64);
        // The next value opens the next pack.
        let next = files.write("5-0", &values[3]).unwrap();
        assert_eq!((next.name.as_str(), next.offset), ("5-0", 0));
        assert_eq!(files_in(dir.path()), ["4-0", "5-0"]);
        files.sync_written().unwrap();
        assert_eq!(files.fsyncs(), 4);
    }

    /// Applies append while flushes close the pack: every value lands whole
    /// in one pack or the next, and each sync closes the pack it synced.
    #[test]
    fn writes_racing_syncs_land_whole() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let value = |t: usize, i: usize| vec![(t * 64 + i) as u8; 4_100 + t * 300 + i];
        let written: Vec<Vec<(SpillRef, Vec<u8>)>> = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..3)
                .map(|t| {
                    let files = &files;
                    scope.spawn(move || {
                        (0..60)
                            .map(|i| {
                                let v = value(t, i);
                                (files.write(&format!("{t}-{i}"), &v).unwrap(), v)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for _ in 0..40 {
                files.sync_written().unwrap();
            }
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        files.sync_written().unwrap();
        for (spilled, v) in written.iter().flatten() {
            assert_eq!(&files.read(spilled).unwrap(), v);
        }
        // Each pack is closed by one sync, which fsyncs it and the directory.
        assert_eq!(files_in(dir.path()).len() as u64, files.fsyncs() / 2);
    }

    #[test]
    fn a_pack_goes_with_its_last_reference_and_not_while_open() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let value = |fill: u8| vec![fill; 6_000];
        let refs: Vec<SpillRef> = (1..=3)
            .map(|f| files.write("1-0", &value(f)).unwrap())
            .collect();
        files.sync_written().unwrap();
        files.release("1-0");
        files.release("1-0");
        assert_eq!(files_in(dir.path()), ["1-0"]);
        assert_eq!(files.read(&refs[2]).unwrap(), value(3));
        files.release("1-0");
        assert!(files_in(dir.path()).is_empty());
        // Released while still open: kept, and appended to again.
        let first = files.write("2-0", &value(4)).unwrap();
        files.release(&first.name);
        let second = files.write("3-0", &value(5)).unwrap();
        assert_eq!(second.name, "2-0");
        assert_eq!(files.read(&second).unwrap(), value(5));
        files.sync_written().unwrap();
        files.release("2-0");
        assert!(files_in(dir.path()).is_empty());
        // Counted anew from what sled references: a file of an older
        // release is a pack of one value.
        std::fs::write(dir.path().join(VALUES_DIR).join("7-1"), value(6)).unwrap();
        let older = SpillRef::decode(&whole_file_reference(
            6_000,
            xxhash_rust::xxh3::xxh3_64(&value(6)),
            b"x",
            "7-1",
        ))
        .unwrap();
        let open = files.write("8-0", &value(7)).unwrap();
        files.recount([&older]);
        assert_eq!(
            files.write("9-0", &value(8)).unwrap().name,
            "9-0",
            "not 8-0"
        );
        files.release("7-1");
        files.release("8-0");
        assert_eq!(
            files_in(dir.path()),
            ["8-0", "9-0"],
            "8-0 is left to the sweep"
        );
        assert!(files.read(&open).is_ok());
    }

    #[test]
    fn a_changed_or_cut_pack_refuses_only_the_values_it_lost() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let values: Vec<Vec<u8>> = (0..4u8).map(|f| vec![f; 10_000]).collect();
        let refs: Vec<SpillRef> = values
            .iter()
            .map(|v| files.write("1-0", v).unwrap())
            .collect();
        files.sync_written().unwrap();
        let path = dir.path().join(VALUES_DIR).join("1-0");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10_000 + 4321] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let refused = files.read(&refs[1]).unwrap_err().to_string();
        assert!(refused.contains("damaged"), "{refused}");
        for i in [0, 2, 3] {
            assert_eq!(files.read(&refs[i]).unwrap(), values[i]);
        }
        // Cut inside the third value.
        std::fs::write(&path, &bytes[..25_000]).unwrap();
        assert_eq!(files.read(&refs[0]).unwrap(), values[0]);
        for i in [2, 3] {
            let refused = files.read(&refs[i]).unwrap_err().to_string();
            assert!(refused.contains("damaged"), "{refused}");
        }
        // A length past any file is refused, not allocated.
        let huge = SpillRef {
            len: u64::MAX - 5,
            ..refs[0].clone()
        };
        assert!(
            files
                .read(&huge)
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
        std::fs::remove_file(&path).unwrap();
        assert!(files.read(&refs[0]).is_err());
    }

    #[test]
    fn unreferenced_files_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let files = ValueFiles::open(dir.path()).unwrap();
        let value = vec![7u8; 10_000];
        let kept = files.write("1-0", &value).unwrap();
        files.sync_written().unwrap();
        files.write("2-0", b"left by a failed commit").unwrap();
        files.sync_written().unwrap();
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
