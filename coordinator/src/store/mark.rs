//! The commit high-water mark: a small file beside sled's, fsynced after every
//! commit, that says how many commits the store has acknowledged and the
//! highest job number it has handed out.
//!
//! sled checks each log message, but when one in the middle of its log is
//! damaged it silently treats the log as ending there: a store opened that way
//! has lost acknowledged commits without an error. Every commit also writes
//! the commit count into the store, in the same transaction; on open, a store
//! whose count is below the mark has lost acknowledged data and is refused.
//!
//! The file holds two slots of [`SLOT_BYTES`], each with a CRC; commit `n`
//! writes slot `n % 2`, so a write torn by a crash leaves the other slot, one
//! commit older, intact (that commit was never acknowledged).

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{CoordinatorError, Result};

/// The mark's file name in the data directory.
pub const MARK_FILE: &str = "tally-commits";

const MAGIC: &[u8; 4] = b"TLYM";
const MARK_VERSION: u32 = 1;
const SLOT_BYTES: usize = 32;

/// What the store has acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// Commits acknowledged since the store was created.
    pub commits: u64,
    /// The next job number the store had handed out (ids never go back).
    pub next_job: u64,
}

impl Mark {
    fn encode(self) -> [u8; SLOT_BYTES] {
        let mut slot = [0u8; SLOT_BYTES];
        slot[0..4].copy_from_slice(MAGIC);
        slot[4..8].copy_from_slice(&MARK_VERSION.to_le_bytes());
        slot[8..16].copy_from_slice(&self.commits.to_le_bytes());
        slot[16..24].copy_from_slice(&self.next_job.to_le_bytes());
        let crc = crc32fast::hash(&slot[0..24]);
        slot[24..28].copy_from_slice(&crc.to_le_bytes());
        slot
    }

    /// The slot's mark, or `None` if it is empty, torn or damaged.
    fn decode(slot: &[u8]) -> Option<Mark> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(slot.get(at..at + 4)?.try_into().ok()?));
        let u64_at = |at: usize| Some(u64::from_le_bytes(slot.get(at..at + 8)?.try_into().ok()?));
        if slot.get(0..4)? != MAGIC
            || u32_at(4)? != MARK_VERSION
            || crc32fast::hash(&slot[0..24]) != u32_at(24)?
        {
            return None;
        }
        Some(Mark {
            commits: u64_at(8)?,
            next_job: u64_at(16)?,
        })
    }
}

/// How the mark file of a data directory reads.
#[derive(Debug, PartialEq, Eq)]
pub enum MarkRead {
    Missing,
    /// Present, but neither slot holds a valid mark.
    Damaged,
    Found(Mark),
}

/// The open mark file, written after every commit.
pub struct MarkFile {
    file: File,
    path: PathBuf,
}

impl MarkFile {
    /// Reads the mark of `dir` without creating anything.
    pub fn read(dir: &Path) -> Result<MarkRead> {
        let path = dir.join(MARK_FILE);
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(file) => {
                // Never more than the two slots: the file is ours and small.
                file.take(2 * SLOT_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| io_error(&path, "read", e))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(MarkRead::Missing),
            Err(e) => return Err(io_error(&path, "open", e)),
        }
        let best = bytes
            .chunks(SLOT_BYTES)
            .take(2)
            .filter_map(Mark::decode)
            .max_by_key(|m| m.commits);
        Ok(best.map_or(MarkRead::Damaged, MarkRead::Found))
    }

    /// Creates (or replaces) the mark file of `dir` holding `mark`, durably.
    pub fn create(dir: &Path, mark: Mark) -> Result<MarkFile> {
        let path = dir.join(MARK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_error(&path, "create", e))?;
        let mut both = [0u8; 2 * SLOT_BYTES];
        both[..SLOT_BYTES].copy_from_slice(&mark.encode());
        both[SLOT_BYTES..].copy_from_slice(&mark.encode());
        file.write_all_at(&both, 0)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_error(&path, "write", e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(dir, "sync", e))?;
        Ok(MarkFile { file, path })
    }

    /// Opens the existing mark file of `dir` for writing.
    pub fn open(dir: &Path) -> Result<MarkFile> {
        let path = dir.join(MARK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        Ok(MarkFile { file, path })
    }

    /// Records `mark` durably, in the slot of its commit number.
    pub fn write(&self, mark: Mark) -> Result<()> {
        let offset = (mark.commits % 2) * SLOT_BYTES as u64;
        self.file
            .write_all_at(&mark.encode(), offset)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_error(&self.path, "write", e))
    }
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> CoordinatorError {
    CoordinatorError::Store(format!(
        "cannot {what} the commit mark {}: {e}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newer_intact_slot_wins_and_a_torn_slot_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let file = MarkFile::create(dir.path(), Mark::default()).unwrap();
        for commits in 1..=5 {
            file.write(Mark {
                commits,
                next_job: commits + 1,
            })
            .unwrap();
        }
        let read = MarkFile::read(dir.path()).unwrap();
        assert_eq!(
            read,
            MarkRead::Found(Mark {
                commits: 5,
                next_job: 6
            })
        );
        // Tear the newest slot (commit 5 lives in slot 1): commit 4 remains.
        let path = dir.path().join(MARK_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[SLOT_BYTES + 9] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let read = MarkFile::read(dir.path()).unwrap();
        assert_eq!(
            read,
            MarkRead::Found(Mark {
                commits: 4,
                next_job: 5
            })
        );
        // Both slots damaged: nothing can be trusted.
        bytes[3] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(MarkFile::read(dir.path()).unwrap(), MarkRead::Damaged);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(MarkFile::read(dir.path()).unwrap(), MarkRead::Missing);
    }
}
