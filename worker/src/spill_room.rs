//! Room in the worker's spill directory: the bytes its shards' files there
//! hold at once, kept within the worker's `--spill-limit`; a full disk is
//! read the same way. Out of room, a shard fails with
//! [`Error::NoRoom`], which the coordinator does not count against it: the
//! shard waits and is tried again, and its job says why it waits instead of
//! failing mid-level.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tally_kinds::Error;
use tally_kinds::kind::format_bytes;

/// Bytes a file claims at a time as it grows: one claim per megabyte
/// written, not one per write.
const CLAIM_STEP: u64 = 1 << 20;

/// The spill directory's bytes in use, and its limit.
pub(crate) struct SpillRoom {
    dir: PathBuf,
    limit: Option<u64>,
    in_use: AtomicU64,
    peak: AtomicU64,
}

impl SpillRoom {
    pub(crate) fn new(dir: &Path, limit: Option<u64>) -> Arc<SpillRoom> {
        Arc::new(SpillRoom {
            dir: dir.to_path_buf(),
            limit,
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }

    /// Bytes the worker's files in the directory hold now (claimed a
    /// megabyte at a time as they grow).
    pub(crate) fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The most [`SpillRoom::in_use`] has been.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Takes `bytes` more, or says why there is no room for them.
    fn take(&self, bytes: u64) -> Result<(), Error> {
        let before = self.in_use.fetch_add(bytes, Ordering::Relaxed);
        let after = before + bytes;
        if let Some(limit) = self.limit
            && after > limit
        {
            self.in_use.fetch_sub(bytes, Ordering::Relaxed);
            return Err(Error::NoRoom(format!(
                "spill directory {}: no room for {} more: this worker's shards hold {} there \
                 and its --spill-limit is {}",
                self.dir.display(),
                format_bytes(bytes),
                format_bytes(before),
                format_bytes(limit)
            )));
        }
        self.peak.fetch_max(after, Ordering::Relaxed);
        Ok(())
    }

    fn give_back(&self, bytes: u64) {
        self.in_use.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The room one file of the directory holds, given back when it is dropped
/// (with the file, or the last handle that reads it).
pub(crate) struct Claim {
    room: Arc<SpillRoom>,
    claimed: u64,
    used: u64,
}

impl Claim {
    pub(crate) fn new(room: &Arc<SpillRoom>) -> Claim {
        Claim {
            room: room.clone(),
            claimed: 0,
            used: 0,
        }
    }

    /// Room for `bytes` more of the file, claimed a step at a time.
    pub(crate) fn grow(&mut self, bytes: u64) -> Result<(), Error> {
        let used = self.used + bytes;
        if used > self.claimed {
            let more = (used - self.claimed).max(CLAIM_STEP);
            match self.room.take(more) {
                Ok(()) => self.claimed += more,
                // Near the limit, a whole step may not fit where the bytes do.
                Err(_) if more > used - self.claimed => {
                    let exact = used - self.claimed;
                    self.room.take(exact)?;
                    self.claimed += exact;
                }
                Err(e) => return Err(e),
            }
        }
        self.used = used;
        Ok(())
    }

    /// The room it claims from.
    pub(crate) fn room(&self) -> &Arc<SpillRoom> {
        &self.room
    }

    /// The file is cut to `len` bytes.
    pub(crate) fn shrink_to(&mut self, len: u64) {
        self.used = self.used.min(len);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.room.give_back(self.claimed);
    }
}

/// The error of a failed call on a file of the spill directory: a full disk
/// (or a quota reached) is no room, anything else a failed attempt.
pub(crate) fn spill_io_error(what: String, e: std::io::Error) -> Error {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            Error::NoRoom(format!("{what}: {e}"))
        }
        _ => Error::Failed(format!("{what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_stay_within_the_limit_and_give_their_room_back_when_dropped() {
        let room = SpillRoom::new(Path::new("/spill"), Some(3 * CLAIM_STEP + 10));
        let mut first = Claim::new(&room);
        first.grow(10).unwrap();
        assert_eq!(room.in_use(), CLAIM_STEP, "a step claimed for 10 bytes");
        first.grow(CLAIM_STEP - 10).unwrap();
        assert_eq!(room.in_use(), CLAIM_STEP, "within the step, nothing more");
        let mut second = Claim::new(&room);
        second.grow(2 * CLAIM_STEP).unwrap();
        // 10 bytes are left: a step does not fit, the bytes do.
        first.grow(10).unwrap();
        assert_eq!(room.in_use(), 3 * CLAIM_STEP + 10);
        let refused = first.grow(1).unwrap_err();
        assert!(
            matches!(&refused, Error::NoRoom(m) if m.contains("--spill-limit")),
            "{refused:?}"
        );
        assert_eq!(
            room.in_use(),
            3 * CLAIM_STEP + 10,
            "a refusal takes nothing"
        );
        drop(second);
        assert_eq!(room.in_use(), CLAIM_STEP + 10);
        first.grow(1).unwrap();
        drop(first);
        assert_eq!(room.in_use(), 0);
        assert_eq!(room.peak(), 3 * CLAIM_STEP + 10);
    }

    #[test]
    fn without_a_limit_claims_only_count() {
        let room = SpillRoom::new(Path::new("/spill"), None);
        let mut claim = Claim::new(&room);
        claim.grow(u64::MAX / 4).unwrap();
        assert_eq!(room.in_use(), u64::MAX / 4);
    }

    #[test]
    fn a_full_disk_is_no_room_and_other_errors_fail_the_attempt() {
        use std::io::{Error as IoError, ErrorKind};
        let full = spill_io_error("write".into(), IoError::from(ErrorKind::StorageFull));
        assert!(matches!(full, Error::NoRoom(_)), "{full:?}");
        let other = spill_io_error("write".into(), IoError::from(ErrorKind::PermissionDenied));
        assert!(matches!(other, Error::Failed(_)), "{other:?}");
        // A real device that is always full.
        if let Ok(mut dev_full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
            use std::io::Write;
            let e = dev_full
                .write_all(&[0; 4096])
                .and_then(|()| dev_full.flush());
            let e = spill_io_error("write".into(), e.unwrap_err());
            assert!(matches!(e, Error::NoRoom(_)), "{e:?}");
        }
    }
}
