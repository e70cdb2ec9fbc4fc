//! The worker's spill directory: sorted runs of shards that outgrow their
//! memory share (see `tally_kernels::spill`), in files.
//!
//! Each worker owns `SPILL_DIR/<worker id>.<pid>.<n>/`, holding an exclusive
//! lock on its `lock` file while it lives; each attempt writes its runs under
//! a directory of its own there, removed when the attempt ends. A worker that
//! dies (kill -9, a lost node) leaves its directory behind: the next worker
//! to start on the same spill directory finds its lock free and removes it,
//! so the directory holds only the attempts of live workers.
//!
//! A shard's stage input larger than a quarter of its memory share (for the
//! kinds that read their input as a stream) is written there too, as it
//! arrives ([`Gathering`]), and read back by ranges; removed when the input
//! is dropped.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tally_kinds::{Error, Spill, Stored};

use crate::error::{Result, WorkerError};
use crate::spill_room::{Claim, SpillRoom, spill_io_error};

const LOCK_FILE: &str = "lock";
/// Buffer of each run being written: runs are written sequentially.
const WRITE_BUFFER: usize = 1 << 20;

/// This worker's part of a spill directory.
pub(crate) struct SpillDir {
    root: PathBuf,
    /// Held (locked) while the worker lives.
    _lock: File,
    next_attempt: AtomicU64,
    room: Arc<SpillRoom>,
}

impl SpillDir {
    /// Takes `spill_dir/<worker_id>/` for this worker, first removing the
    /// directories of workers that died there; its files hold at most
    /// `limit` bytes at once.
    pub(crate) fn open(spill_dir: &Path, worker_id: &str, limit: Option<u64>) -> Result<SpillDir> {
        let refused = |what: &str, e: std::io::Error| {
            WorkerError::Config(format!(
                "spill directory {}: cannot {what}: {e}",
                spill_dir.display()
            ))
        };
        std::fs::create_dir_all(spill_dir).map_err(|e| refused("create it", e))?;
        let swept = sweep_dead(spill_dir).map_err(|e| refused("read it", e))?;
        if swept > 0 {
            tracing::info!(dir = %spill_dir.display(), swept, "removed the spill files of workers that stopped uncleanly");
        }
        // The process id and a number of this process's own, so that two
        // workers of one id (in two processes, or two in one) never share a
        // directory.
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let n = OPENED.fetch_add(1, Ordering::Relaxed);
        let name: String = format!("{worker_id}.{}.{n}", std::process::id())
            .chars()
            .map(
                |c| match c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    true => c,
                    false => '_',
                },
            )
            .collect();
        let root = spill_dir.join(name);
        std::fs::create_dir_all(&root).map_err(|e| refused("create a directory in it", e))?;
        let lock = File::create(root.join(LOCK_FILE)).map_err(|e| refused("write in it", e))?;
        // Another worker starting on the same spill directory may sweep this
        // one before it is locked; the attempts create it again when they
        // spill, so that costs nothing.
        lock.try_lock().map_err(|e| {
            WorkerError::Config(format!(
                "spill directory {}: cannot lock it ({e})",
                root.display()
            ))
        })?;
        Ok(SpillDir {
            root,
            _lock: lock,
            next_attempt: AtomicU64::new(0),
            room: SpillRoom::new(spill_dir, limit),
        })
    }

    /// The bytes its files hold, and their limit.
    pub(crate) fn room(&self) -> &SpillRoom {
        &self.room
    }

    /// An empty spill for one attempt.
    pub(crate) fn attempt(&self) -> FileSpill {
        let n = self.next_attempt.fetch_add(1, Ordering::Relaxed);
        FileSpill {
            dir: self.root.join(format!("attempt-{n}")),
            made_dir: false,
            runs: Vec::new(),
            open: None,
            written: 0,
            room: self.room.clone(),
        }
    }
}

impl SpillDir {
    /// An empty input that stays in memory up to `in_memory` bytes, then
    /// moves to a file of this directory (`None`: always in memory).
    pub(crate) fn gathering(&self, in_memory: Option<u64>) -> Gathering {
        let n = self.next_attempt.fetch_add(1, Ordering::Relaxed);
        Gathering {
            memory: Vec::new(),
            file: None,
            in_memory,
            path: self.root.join(format!("input-{n}")),
            len: 0,
            claim: Claim::new(&self.room),
        }
    }
}

/// A shard's stage input as it arrives: in memory, or past its limit in a
/// file written sequentially.
pub(crate) struct Gathering {
    memory: Vec<u8>,
    file: Option<BufWriter<File>>,
    in_memory: Option<u64>,
    path: PathBuf,
    len: u64,
    /// The room its file holds.
    claim: Claim,
}

impl Gathering {
    fn failed(&self, what: &str, e: std::io::Error) -> WorkerError {
        let what = format!("spill directory: cannot {what} {}", self.path.display());
        WorkerError::Kernel(spill_io_error(what, e))
    }

    /// Bytes gathered so far.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<()> {
        let past_limit = self
            .in_memory
            .is_some_and(|limit| self.len + bytes.len() as u64 > limit);
        if self.file.is_none() && past_limit {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| self.failed("create the directory of", e))?;
            }
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&self.path)
                .map_err(|e| self.failed("create", e))?;
            let mut file = BufWriter::with_capacity(WRITE_BUFFER, file);
            self.claim.grow(self.memory.len() as u64)?;
            file.write_all(&self.memory)
                .map_err(|e| self.failed("write", e))?;
            self.memory = Vec::new();
            self.file = Some(file);
        }
        match self.file.as_mut() {
            Some(file) => {
                self.claim.grow(bytes.len() as u64)?;
                if let Err(e) = file.write_all(bytes) {
                    return Err(self.failed("write", e));
                }
            }
            None => self.memory.extend_from_slice(bytes),
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Drops the bytes past `len` (a part that must be read again).
    pub(crate) fn truncate(&mut self, len: u64) -> Result<()> {
        if len >= self.len {
            return Ok(());
        }
        match self.file.as_mut() {
            Some(file) => {
                let cut = file
                    .flush()
                    .and_then(|()| file.get_ref().set_len(len))
                    .and_then(|()| file.seek(SeekFrom::Start(len)).map(|_| ()));
                if let Err(e) = cut {
                    return Err(self.failed("cut", e));
                }
                self.claim.shrink_to(len);
            }
            None => self.memory.truncate(len as usize),
        }
        self.len = len;
        Ok(())
    }

    /// The gathered bytes, and whether they are in a file.
    pub(crate) fn finish(mut self) -> Result<(Arc<dyn Stored>, bool)> {
        let Some(file) = self.file.take() else {
            return Ok((Arc::new(std::mem::take(&mut self.memory)), false));
        };
        let file = match file.into_inner() {
            Ok(file) => file,
            Err(e) => return Err(self.failed("write", e.into_error())),
        };
        let empty = Claim::new(self.claim.room());
        let claim = std::mem::replace(&mut self.claim, empty);
        let stored = SpooledInput {
            file,
            path: std::mem::take(&mut self.path),
            len: self.len,
            remove: true,
            _claim: Arc::new(claim),
        };
        Ok((Arc::new(stored), true))
    }
}

impl Drop for Gathering {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A stage input in a file, removed with it (`remove`), or a spill run kept
/// past its attempt.
struct SpooledInput {
    file: File,
    path: PathBuf,
    len: u64,
    remove: bool,
    /// The file's room in the directory, given back with the last handle.
    _claim: Arc<Claim>,
}

impl Stored for SpooledInput {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> tally_kinds::Result<usize> {
        let want = buf.len().min(self.len.saturating_sub(offset) as usize);
        read_fully(&self.file, offset, &mut buf[..want]).map_err(|e| {
            spill_io_error(
                format!("spill directory: cannot read {}", self.path.display()),
                e,
            )
        })
    }
}

impl Drop for SpooledInput {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Fills `buf` from `file` at `offset`, or up to its end.
fn read_fully(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

impl SpillDir {
    /// Removes this worker's directory: called when the worker stops, since
    /// the context holding this may outlive it a moment in other tasks.
    pub(crate) fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Removes the directories under `spill_dir` whose lock no live worker holds.
fn sweep_dead(spill_dir: &Path) -> std::io::Result<usize> {
    let mut swept = 0;
    for entry in std::fs::read_dir(spill_dir)? {
        let path = entry?.path();
        let Ok(lock) = File::open(path.join(LOCK_FILE)) else {
            continue;
        };
        if lock.try_lock().is_ok() && std::fs::remove_dir_all(&path).is_ok() {
            swept += 1;
        }
    }
    Ok(swept)
}

/// One attempt's runs, a file each, removed with it.
pub(crate) struct FileSpill {
    dir: PathBuf,
    /// Whether `dir` was made: most attempts never spill, and their end
    /// then costs no call to the file system.
    made_dir: bool,
    /// The runs, `None` once released.
    runs: Vec<Option<Run>>,
    open: Option<(BufWriter<File>, Claim)>,
    written: u64,
    room: Arc<SpillRoom>,
}

/// An ended run, and its room in the directory (shared with the handles
/// that keep it).
struct Run {
    file: File,
    claim: Arc<Claim>,
}

impl FileSpill {
    fn failed(&self, what: &str, e: std::io::Error) -> Error {
        let what = format!("spill directory {}: cannot {what}", self.dir.display());
        spill_io_error(what, e)
    }

    fn run(&self, run: u32) -> tally_kinds::Result<&Run> {
        self.runs
            .get(run as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Internal(format!("spill: no run {run}")))
    }

    fn run_path(&self, run: u32) -> PathBuf {
        self.dir.join(format!("run-{run}"))
    }
}

impl Spill for FileSpill {
    fn write(&mut self, bytes: &[u8]) -> tally_kinds::Result<()> {
        if self.open.is_none() {
            std::fs::create_dir_all(&self.dir).map_err(|e| self.failed("create it", e))?;
            self.made_dir = true;
            let path = self.run_path(self.runs.len() as u32);
            let file = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| self.failed("create a run", e))?;
            let file = BufWriter::with_capacity(WRITE_BUFFER, file);
            self.open = Some((file, Claim::new(&self.room)));
        }
        let (open, claim) = self.open.as_mut().expect("a run is open");
        claim.grow(bytes.len() as u64)?;
        if let Err(e) = open.write_all(bytes) {
            return Err(self.failed("write a run", e));
        }
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn end_run(&mut self) -> tally_kinds::Result<u32> {
        let (file, claim) = match self.open.take() {
            Some((open, claim)) => {
                let file = open
                    .into_inner()
                    .map_err(|e| self.failed("write a run", e.into_error()))?;
                (file, claim)
            }
            // An empty run.
            None => {
                self.write(&[])?;
                return self.end_run();
            }
        };
        let claim = Arc::new(claim);
        self.runs.push(Some(Run { file, claim }));
        Ok(self.runs.len() as u32 - 1)
    }

    fn read_at(&self, run: u32, offset: u64, buf: &mut [u8]) -> tally_kinds::Result<usize> {
        read_fully(&self.run(run)?.file, offset, buf).map_err(|e| self.failed("read a run", e))
    }

    fn bytes_written(&self) -> u64 {
        self.written
    }

    /// The run through a handle of its own: readable after the attempt's
    /// directory is removed, its disk space freed when the last handle goes.
    fn keep_run(&self, run: u32) -> tally_kinds::Result<Arc<dyn Stored>> {
        let kept = self.run(run)?;
        let cloned = (kept.file)
            .try_clone()
            .and_then(|file| Ok((file.metadata()?.len(), file)))
            .map_err(|e| self.failed("keep a run", e));
        let (len, file) = cloned?;
        Ok(Arc::new(SpooledInput {
            file,
            path: self.run_path(run),
            len,
            remove: false,
            _claim: kept.claim.clone(),
        }))
    }

    /// Removes the run's file: its space is freed when the last handle that
    /// [`Spill::keep_run`] gave is dropped.
    fn release_run(&mut self, run: u32) -> tally_kinds::Result<()> {
        self.run(run)?;
        self.runs[run as usize] = None;
        std::fs::remove_file(self.run_path(run)).map_err(|e| self.failed("remove a run", e))
    }
}

impl Drop for FileSpill {
    fn drop(&mut self) {
        self.open = None;
        self.runs.clear();
        if self.made_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_written_read_back_and_removed_with_their_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = SpillDir::open(dir.path(), "w/1", None).unwrap();
        let mut spill = spill_dir.attempt();
        spill.write(b"hello ").unwrap();
        spill.write(b"runs").unwrap();
        assert_eq!(spill.end_run().unwrap(), 0);
        assert_eq!(spill.end_run().unwrap(), 1, "an empty run");
        let mut buf = [0u8; 16];
        assert_eq!(spill.read_at(0, 6, &mut buf).unwrap(), 4);
        assert_eq!(&buf[..4], b"runs");
        assert_eq!(spill.read_at(1, 0, &mut buf).unwrap(), 0);
        assert_eq!(spill.bytes_written(), 10);
        let kept = spill.keep_run(0).unwrap();
        assert!(spill.keep_run(2).is_err(), "no such run");
        let attempt = spill.dir.clone();
        assert!(attempt.exists());
        drop(spill);
        assert!(!attempt.exists(), "removed with the attempt");
        // A kept run (a shard's output) is read after its attempt is gone.
        assert_eq!(kept.len(), 10);
        assert_eq!(kept.read_range(0..10).unwrap(), b"hello runs");
        assert!(kept.read_range(5..11).is_err(), "past its end");
    }

    #[test]
    fn a_released_run_lives_on_in_its_kept_handle_only() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = SpillDir::open(dir.path(), "w", None).unwrap();
        let mut spill = spill_dir.attempt();
        spill.write(b"checkpoint").unwrap();
        let run = spill.end_run().unwrap();
        let kept = spill.keep_run(run).unwrap();
        spill.release_run(run).unwrap();
        assert!(!spill.run_path(run).exists(), "its file is removed");
        let mut byte = [0u8];
        assert!(spill.read_at(run, 0, &mut byte).is_err());
        assert!(spill.keep_run(run).is_err());
        assert!(spill.release_run(run).is_err(), "released once");
        assert_eq!(kept.read_range(0..10).unwrap(), b"checkpoint");
        // The runs after it are numbered on.
        spill.write(b"next").unwrap();
        assert_eq!(spill.end_run().unwrap(), run + 1);
    }

    #[test]
    fn an_input_moves_to_a_file_past_its_limit_reads_back_and_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = SpillDir::open(dir.path(), "w", None).unwrap();
        let inputs = || {
            std::fs::read_dir(&spill_dir.root)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with("input-")
                })
                .count()
        };
        let read_all = |stored: &dyn Stored| stored.read_range(0..stored.len()).unwrap();
        // Within its limit: memory, and a cut part read again.
        let mut small = spill_dir.gathering(Some(10));
        small.push(b"abcd").unwrap();
        small.push(b"zz").unwrap();
        small.truncate(4).unwrap();
        small.push(b"ef").unwrap();
        let (stored, in_file) = small.finish().unwrap();
        assert!(!in_file);
        assert_eq!(read_all(&*stored), b"abcdef");
        // Past it: a file holding everything pushed, cut and read again.
        let mut large = spill_dir.gathering(Some(10));
        large.push(b"0123456").unwrap();
        large.push(b"789abc").unwrap();
        assert_eq!(inputs(), 1, "moved to a file");
        large.truncate(8).unwrap();
        large.push(b"XYZ").unwrap();
        assert_eq!(large.len(), 11);
        let (stored, in_file) = large.finish().unwrap();
        assert!(in_file);
        assert_eq!(read_all(&*stored), b"01234567XYZ");
        let mut buf = [0u8; 8];
        assert_eq!(
            stored.read_at(9, &mut buf).unwrap(),
            2,
            "short only at the end"
        );
        assert!(stored.read_range(5..12).is_err(), "a range past the end");
        drop(stored);
        assert_eq!(inputs(), 0, "removed with the input");
        // An input dropped before it is finished leaves nothing either.
        let mut dropped = spill_dir.gathering(Some(0));
        dropped.push(b"x").unwrap();
        assert_eq!(inputs(), 1);
        drop(dropped);
        assert_eq!(inputs(), 0);
        // Without a limit: always memory.
        let mut unlimited = spill_dir.gathering(None);
        unlimited.push(&[7; 100]).unwrap();
        assert!(!unlimited.finish().unwrap().1);
    }

    #[test]
    fn a_dead_workers_spill_is_swept_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let live = SpillDir::open(dir.path(), "live", None).unwrap();
        let mut kept = live.attempt();
        kept.write(b"x").unwrap();
        kept.end_run().unwrap();
        // A worker that died: its directory and lock file, nobody holding it.
        let dead = dir.path().join("dead");
        std::fs::create_dir_all(dead.join("attempt-0")).unwrap();
        std::fs::write(dead.join("attempt-0/run-0"), b"stale").unwrap();
        std::fs::write(dead.join(LOCK_FILE), b"").unwrap();
        let other = SpillDir::open(dir.path(), "other", None).unwrap();
        assert!(!dead.exists(), "the dead worker's spill is swept");
        assert!(kept.dir.exists(), "the live worker's is kept");
        let twin = SpillDir::open(dir.path(), "live", None).unwrap();
        assert_ne!(twin.root, live.root, "one directory per worker");
        drop(twin);
        drop(other);
        drop(kept);
        drop(live);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
