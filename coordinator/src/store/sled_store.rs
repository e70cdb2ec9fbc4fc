//! The on-disk backend: one sled database, one sled tree per [`Tree`], a
//! multi-tree transaction per batch, then a flush.
//!
//! The store carries a product marker and a schema version; a foreign,
//! unversioned or newer data directory is refused rather than misread. Every
//! commit also counts itself, and the count is checked against the commit mark
//! (`mark.rs`) on open, so a store that lost acknowledged commits is refused
//! instead of silently rolled back. Large blob values are kept in files beside
//! sled (`spill.rs`), which sled references.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

use crate::error::{CoordinatorError, Result};

use super::api::{Batch, NEXT_JOB_KEY, Store, Tree};
use super::mark::{MARK_FILE, Mark, MarkFile, MarkRead};
use super::spill::{SPILL_THRESHOLD, SpillRef, ValueFiles};

/// The current layout of the store. A data directory written by another layout
/// is refused rather than misread.
pub const SCHEMA_VERSION: u32 = 1;
const SCHEMA_KEY: &[u8] = b"schema";
const PRODUCT_KEY: &[u8] = b"product";
const PRODUCT: &[u8] = b"tally";
/// The number of commits, written by every commit in its own transaction.
const COMMITS_KEY: &[u8] = b"commits";
/// The content digest: the sum (mod 2^64) of [`entry_hash`] over every entry
/// but these two keys, kept by every commit in its own transaction. sled
/// skips a damaged message and keeps reading its log, so a store can lose an
/// old entry and still hold the latest commit count; the digest, recomputed
/// on open, tells.
const DIGEST_KEY: &[u8] = b"digest";

/// Present in the data directory while a fresh store is initialised. A
/// directory with sled's files but no readable tally schema is refused as
/// damaged, unless this marker shows that its first start was interrupted.
const INIT_MARKER: &str = "tally-init";

/// The on-disk backend: one sled database, one sled tree per [`Tree`].
pub struct SledStore {
    dir: PathBuf,
    /// sled's handles, replaced when a failed write left sled unusable
    /// (`None` only while they are being replaced, or if that failed).
    handles: RwLock<Option<Handles>>,
    /// Set by a failed write: sled refuses everything after a failed write
    /// (a full disk, an I/O error) until it is opened again, so the next
    /// commit opens it again first. That is how work resumes by itself once
    /// space is freed.
    broken: AtomicBool,
    /// Held across a whole commit, so that the commit count, the store and
    /// the mark file advance in the order of the commits.
    mark: Mutex<Marked>,
    recovery: Option<Recovery>,
    /// The spilled values of [`Tree::Blobs`].
    values: ValueFiles,
}

/// The sled tree of references to spilled values, after the [`Tree::ALL`]
/// trees: its index in [`Handles::trees`] and in the content digest.
const SPILLED: usize = Tree::ALL.len();
const SPILLED_NAME: &str = "spilled";

struct Handles {
    dir: PathBuf,
    db: sled::Db,
    /// The trees of [`Tree::ALL`], in order, then the [`SPILLED`] tree.
    trees: Vec<sled::Tree>,
}

impl Handles {
    fn open(dir: &Path, fresh: bool) -> Result<Handles> {
        let db = open_db(dir, fresh)?;
        if !fresh {
            check_existing(&db, dir)?;
        }
        let trees = Tree::ALL
            .iter()
            .map(|t| t.name())
            .chain([SPILLED_NAME])
            .map(|name| db.open_tree(name))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| fault(dir, &e))?;
        Ok(Handles {
            dir: dir.to_path_buf(),
            db,
            trees,
        })
    }

    fn tree(&self, tree: Tree) -> &sled::Tree {
        &self.trees[tree_index(tree)]
    }

    fn spilled(&self) -> &sled::Tree {
        &self.trees[SPILLED]
    }

    /// Every spilled value's key and reference.
    fn spilled_refs(&self) -> Result<Vec<(Vec<u8>, SpillRef)>> {
        self.spilled()
            .iter()
            .map(|entry| {
                let (key, value) = entry.map_err(|e| fault(&self.dir, &e))?;
                let spilled = SpillRef::decode(&value).ok_or_else(|| {
                    CoordinatorError::Store(format!(
                        "the store in {} has a malformed value reference",
                        self.dir.display()
                    ))
                })?;
                Ok((key.to_vec(), spilled))
            })
            .collect()
    }
}

/// What kind of storage failure an error is: each has its own message, and a
/// full disk its own status (the work waits for space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    Full,
    Permission,
    Io,
    Corruption,
}

impl StorageFault {
    pub fn of(e: &sled::Error) -> StorageFault {
        match e {
            sled::Error::Io(io) => StorageFault::of_io(io),
            sled::Error::Corruption { .. } => StorageFault::Corruption,
            _ => StorageFault::Io,
        }
    }

    pub fn of_io(e: &std::io::Error) -> StorageFault {
        use std::io::ErrorKind;
        // ENOSPC, EDQUOT; EACCES, EPERM, EROFS.
        match (e.kind(), e.raw_os_error()) {
            (ErrorKind::StorageFull | ErrorKind::QuotaExceeded, _) | (_, Some(28 | 122)) => {
                StorageFault::Full
            }
            (ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem, _)
            | (_, Some(1 | 13 | 30)) => StorageFault::Permission,
            _ => StorageFault::Io,
        }
    }
}

/// Runs a call into sled, turning a panic into an error: sled 0.34 panics on
/// some damaged files instead of returning its corruption error, and a damaged
/// store must be refused with a clear line, not crash the coordinator.
fn guarded<T>(dir: &Path, call: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        // sled's message may dump a whole page: one short line is enough.
        let why: String = why.chars().take(120).collect::<String>().replace('\n', " ");
        Err(CoordinatorError::Store(format!(
            "the store in {} is damaged: sled failed reading it ({why})",
            dir.display()
        )))
    })
}

/// The coordinator's error for a storage failure in `dir`, classified, in one line.
fn fault(dir: &Path, e: &sled::Error) -> CoordinatorError {
    let dir = dir.display();
    let detail = match e {
        // sled wraps the OS error in another: name the OS error itself.
        sled::Error::Io(io) => match io
            .get_ref()
            .and_then(|e| e.downcast_ref::<std::io::Error>())
        {
            Some(inner) => inner.to_string(),
            None => io.to_string(),
        },
        other => other.to_string(),
    };
    match StorageFault::of(e) {
        StorageFault::Full => CoordinatorError::StoreFull(format!(
            "the disk holding the store in {dir} is full ({detail}); work is paused until space is freed"
        )),
        StorageFault::Permission => CoordinatorError::Store(format!(
            "no permission to write the store in {dir} ({detail})"
        )),
        StorageFault::Io => {
            CoordinatorError::Store(format!("I/O error in the store in {dir} ({detail})"))
        }
        StorageFault::Corruption => {
            CoordinatorError::Store(format!("the store in {dir} is damaged ({detail})"))
        }
    }
}

/// The mark file and what it last recorded.
struct Marked {
    file: MarkFile,
    current: Mark,
    /// The content digest after the last commit (set once the store is read).
    digest: u64,
}

impl Marked {
    fn new(file: MarkFile, current: Mark) -> Marked {
        Marked {
            file,
            current,
            digest: 0,
        }
    }
}

/// What `--recover` accepted when it opened a store that had lost
/// acknowledged commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Commits acknowledged before the damage, per the mark (0 if the mark
    /// itself was lost).
    pub acknowledged: u64,
    /// Commits the store still holds.
    pub intact: u64,
    /// The next job number: never below one already handed out.
    pub next_job: u64,
}

impl Recovery {
    pub fn lost_commits(&self) -> u64 {
        self.acknowledged.saturating_sub(self.intact)
    }
}

/// How to treat a store that has lost acknowledged commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLoss {
    /// Refuse to open it (the default).
    #[default]
    Refuse,
    /// Open it with what is intact (`tally coordinator --recover`).
    Recover,
}

impl SledStore {
    /// Opens (or creates) the store in `dir`. Refuses a directory that holds
    /// something other than a tally store, a store that sled cannot read back
    /// (damaged), a store of another schema version, or one that lost
    /// acknowledged commits.
    pub fn open(dir: &Path) -> Result<SledStore> {
        SledStore::open_with(dir, OnLoss::Refuse)
    }

    /// Opens the store in `dir`; `on_loss` says what to do if it has lost
    /// acknowledged commits.
    pub fn open_with(dir: &Path, on_loss: OnLoss) -> Result<SledStore> {
        guarded(dir, || SledStore::open_unguarded(dir, on_loss))
    }

    fn open_unguarded(dir: &Path, on_loss: OnLoss) -> Result<SledStore> {
        let fresh = prepare_directory(dir)?;
        let handles = Handles::open(dir, fresh)?;
        let stored = stored_mark(handles.tree(Tree::Meta), dir)?;
        let (mut marked, mut recovery) = reconcile_mark(dir, fresh, stored, on_loss)?;
        let digest = content_digest(&handles)?;
        if !content_intact(handles.tree(Tree::Meta), dir, stored, digest)? {
            let lost = Loss::Changed;
            if on_loss == OnLoss::Refuse {
                return Err(CoordinatorError::Store(lost.message(dir, stored)));
            }
            tracing::warn!(dir = %dir.display(), "{}; recovering from what is intact", lost.message(dir, stored));
            recovery.get_or_insert(Recovery {
                acknowledged: marked.current.commits,
                intact: stored.commits,
                next_job: marked.current.next_job.max(1),
            });
        }
        marked.digest = digest;
        let values = ValueFiles::open(dir)?;
        let damaged = damaged_values(&handles, &values)?;
        if let Some((_, why)) = damaged.first() {
            let lost = format!(
                "the store in {} has lost acknowledged data: {} of its value files are \
                 missing or damaged ({why})",
                dir.display(),
                damaged.len()
            );
            if on_loss == OnLoss::Refuse {
                return Err(CoordinatorError::Store(format!(
                    "{lost}. Refusing to start; `tally coordinator --recover` continues from \
                     what is intact, and jobs may go back to an earlier state"
                )));
            }
            tracing::warn!("{lost}; recovering from what is intact");
            recovery.get_or_insert(Recovery {
                acknowledged: marked.current.commits,
                intact: marked.current.commits,
                next_job: marked.current.next_job.max(1),
            });
        }
        let mut store = SledStore {
            dir: dir.to_path_buf(),
            handles: RwLock::new(Some(handles)),
            broken: AtomicBool::new(false),
            mark: Mutex::new(marked),
            recovery,
            values,
        };
        if !damaged.is_empty() {
            // The entries of lost values go: their readers see them missing.
            let mut batch = Batch::default();
            for (key, _) in damaged {
                batch.remove(Tree::Blobs, key);
            }
            store.commit(batch)?;
        }
        store.sweep_values()?;
        if let Some(recovery) = store.recovery.take() {
            store.write_recovered(&recovery)?;
            store.recovery = Some(recovery);
        }
        store.check_schema(dir)?;
        if fresh {
            end_init(dir)?;
        }
        Ok(store)
    }

    /// Deletes the value files no entry references.
    fn sweep_values(&self) -> Result<()> {
        let referenced: HashSet<String> = self
            .with_handles(|h| Ok(h.spilled_refs()?.into_iter().map(|(_, r)| r.name).collect()))?;
        let removed = self.values.sweep(&referenced)?;
        if removed > 0 {
            tracing::info!(dir = %self.dir.display(), removed, "removed value files of unfinished commits");
        }
        Ok(())
    }

    /// What `--recover` accepted, if this open recovered a damaged store.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// Makes the recovered store agree with the mark: the commit count and the
    /// job counter never go back.
    fn write_recovered(&self, recovery: &Recovery) -> Result<()> {
        let mut batch = Batch::default();
        batch.put(
            Tree::Meta,
            NEXT_JOB_KEY,
            recovery.next_job.to_be_bytes().to_vec(),
        );
        self.commit(batch)
    }

    /// Runs `f` on sled's handles.
    fn with_handles<T>(&self, f: impl FnOnce(&Handles) -> Result<T>) -> Result<T> {
        let handles = self.handles.read().unwrap_or_else(|p| p.into_inner());
        match handles.as_ref() {
            Some(handles) => f(handles),
            None => Err(CoordinatorError::Store(format!(
                "the store in {} could not be opened again after a failed write",
                self.dir.display()
            ))),
        }
    }

    /// Opens sled again after a failed write left it unusable. The store
    /// must still hold every commit acknowledged before; the failed commit
    /// may have reached the disk too, so the count and the digest go on from
    /// what the store holds.
    fn reopen(&self, marked: &mut Marked) -> Result<()> {
        let mut handles = self.handles.write().unwrap_or_else(|p| p.into_inner());
        // The old handles must be gone before sled can take its lock again.
        drop(handles.take());
        let reopened = Handles::open(&self.dir, false)?;
        let meta = reopened.tree(Tree::Meta);
        let stored = stored_mark(meta, &self.dir)?;
        let acknowledged = marked.current;
        let digest = content_digest(&reopened)?;
        let lost = if stored.commits < acknowledged.commits {
            Some(Loss::Behind(acknowledged))
        } else if !content_intact(meta, &self.dir, stored, digest)? {
            Some(Loss::Changed)
        } else {
            None
        };
        if let Some(lost) = lost {
            return Err(CoordinatorError::Store(lost.message(&self.dir, stored)));
        }
        marked.current.commits = stored.commits;
        marked.current.next_job = acknowledged.next_job.max(stored.next_job);
        marked.digest = digest;
        *handles = Some(reopened);
        self.broken.store(false, Ordering::SeqCst);
        tracing::info!(dir = %self.dir.display(), "the store is writable again");
        Ok(())
    }

    fn check_schema(&self, dir: &Path) -> Result<()> {
        let (product, version, empty) = self.with_handles(|handles| {
            let meta = handles.tree(Tree::Meta);
            let empty = Tree::ALL.iter().all(|t| handles.tree(*t).is_empty());
            Ok((meta.get(PRODUCT_KEY)?, meta.get(SCHEMA_KEY)?, empty))
        })?;
        match (product, version) {
            (None, None) => {
                if !empty {
                    return Err(CoordinatorError::InvalidArgument(format!(
                        "the store in {} has data but no schema version; refusing to use it",
                        dir.display()
                    )));
                }
                let mut batch = Batch::default();
                batch.put(Tree::Meta, PRODUCT_KEY, PRODUCT);
                batch.put(
                    Tree::Meta,
                    SCHEMA_KEY,
                    SCHEMA_VERSION.to_be_bytes().to_vec(),
                );
                self.commit(batch)
            }
            (product, version) => check_marker(product.as_deref(), version.as_deref(), dir),
        }
    }
}

/// Refuses an existing sled database without a tally schema before any tree is
/// created in it: one written by another program, or one whose data sled could
/// not read back.
fn check_existing(db: &sled::Db, dir: &Path) -> Result<()> {
    let refuse = |why: &str| {
        Err(CoordinatorError::InvalidArgument(format!(
            "the store in {} {why}; refusing to use it",
            dir.display()
        )))
    };
    let names = db.tree_names();
    if !names
        .iter()
        .any(|n| n.as_ref() == Tree::Meta.name().as_bytes())
    {
        // sled always has its default tree, which tally never writes.
        if names.len() > 1 || !db.is_empty() {
            return refuse("was not written by tally");
        }
        return refuse(
            "holds nothing sled can read back: it is damaged, or it was never a tally store",
        );
    }
    let meta = db.open_tree(Tree::Meta.name())?;
    match (meta.get(PRODUCT_KEY)?, meta.get(SCHEMA_KEY)?) {
        (None, None) => {
            let mut trees = names.iter().map(|n| db.open_tree(n));
            if trees.all(|t| t.is_ok_and(|t| t.is_empty())) {
                refuse(
                    "is empty and has no schema version: its first start did not finish; remove it to start afresh",
                )
            } else {
                refuse("has data but no schema version")
            }
        }
        (product, version) => check_marker(product.as_deref(), version.as_deref(), dir),
    }
}

/// Accepts this product's marker with this schema version only.
fn check_marker(product: Option<&[u8]>, version: Option<&[u8]>, dir: &Path) -> Result<()> {
    match (product, version) {
        (Some(PRODUCT), Some(version)) => {
            let found = <[u8; 4]>::try_from(version)
                .map(u32::from_be_bytes)
                .map_err(|_| {
                    CoordinatorError::InvalidArgument(format!(
                        "the store in {} has a malformed schema version",
                        dir.display()
                    ))
                })?;
            if found != SCHEMA_VERSION {
                return Err(CoordinatorError::InvalidArgument(format!(
                    "the store in {} has schema version {found}; this tally reads version {SCHEMA_VERSION}",
                    dir.display()
                )));
            }
            Ok(())
        }
        _ => Err(CoordinatorError::InvalidArgument(format!(
            "the store in {} was not written by tally; refusing to use it",
            dir.display()
        ))),
    }
}

/// Checks what `dir` holds before sled opens anything, so that sled never
/// writes into a foreign directory. Returns whether the store is fresh (empty,
/// or its first start was interrupted); a fresh store's initialisation begins.
fn prepare_directory(dir: &Path) -> Result<bool> {
    let refuse = |why: String| {
        Err(CoordinatorError::InvalidArgument(format!(
            "data directory {} {why}; refusing to use it",
            dir.display()
        )))
    };
    if dir.exists() && !dir.is_dir() {
        return Err(CoordinatorError::InvalidArgument(format!(
            "data directory {} is not a directory",
            dir.display()
        )));
    }
    // Read the directory once: `exists` says false for what it cannot read,
    // which would make an unreadable store look foreign.
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            return Err(CoordinatorError::InvalidArgument(format!(
                "cannot read data directory {}: {e}",
                dir.display()
            )));
        }
    };
    let fresh = empty || dir.join(INIT_MARKER).exists();
    if fresh {
        begin_init(dir)?;
        return Ok(true);
    }
    // sled writes both files when it creates a store.
    match (dir.join("conf").exists(), dir.join("db").exists()) {
        (true, true) => Ok(false),
        (false, false) => refuse("is not empty and holds no tally store".into()),
        (conf, _) => {
            let missing = if conf { "db" } else { "conf" };
            refuse(format!(
                "lacks the store file {missing}: it is damaged or not a tally store"
            ))
        }
    }
}

/// Opens the sled database in `dir`; an existing store that sled calls
/// corrupt because of an unfinished snapshot is opened again without it.
fn open_db(dir: &Path, fresh: bool) -> Result<sled::Db> {
    match open_waiting_for_lock(dir) {
        Err(sled::Error::Corruption { .. }) if !fresh => {
            // sled 0.34 writes a snapshot to `snap.<lsn>.generating`, then
            // renames it; but on open it also reads such a file, so a crash
            // while writing one leaves a store sled calls corrupt. The file is
            // by construction unfinished and the snapshot before it and the
            // log are intact: remove it and open again. A live coordinator on
            // the same directory would have refused the lock before this.
            let removed = remove_unfinished_snapshots(dir)?;
            if removed > 0 {
                tracing::warn!(
                    dir = %dir.display(),
                    removed,
                    "removed unfinished sled snapshot files left by a crash"
                );
            }
            open_waiting_for_lock(dir)
        }
        other => other,
    }
    .map_err(|e| {
        // Another coordinator holds the store: it is in use, not damaged.
        let in_use = matches!(&e, sled::Error::Io(io) if io.to_string().contains(IN_USE));
        let hint = if fresh || in_use {
            ""
        } else {
            " (it is damaged or not a tally store)"
        };
        CoordinatorError::Store(format!(
            "cannot open the store in {}{hint}: {e}",
            dir.display()
        ))
    })
}

const IN_USE: &str = "the data directory is in use by another tally coordinator (its lock is held)";

/// How long [`SledStore::open`] waits for a held store lock.
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A store dropped a moment ago (a coordinator restarted in the same
/// process) keeps its file lock until sled's flusher thread notices, so a
/// held lock is retried for [`LOCK_WAIT`] before it means another coordinator.
fn open_waiting_for_lock(dir: &Path) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()
        {
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.to_string().contains("acquire lock") =>
            {
                if std::time::Instant::now() >= deadline {
                    return Err(sled::Error::Io(std::io::Error::new(e.kind(), IN_USE)));
                }
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            other => return other,
        }
    }
}

/// Removes sled's unfinished snapshot files (`snap.*.generating`) from `dir`;
/// returns how many there were.
fn remove_unfinished_snapshots(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| {
        CoordinatorError::Store(format!("cannot read data directory {}: {e}", dir.display()))
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path()).map_err(|e| {
                CoordinatorError::Store(format!("cannot remove {}: {e}", entry.path().display()))
            })?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Marks `dir` as being initialised, durably, before sled creates its files.
fn begin_init(dir: &Path) -> Result<()> {
    let io = |e: std::io::Error| {
        CoordinatorError::Store(format!("cannot create the store in {}: {e}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::File::create(dir.join(INIT_MARKER))
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    sync_dir(dir).map_err(io)
}

/// Removes the marker once the schema is durable.
fn end_init(dir: &Path) -> Result<()> {
    let io = |e: std::io::Error| {
        CoordinatorError::Store(format!("cannot create the store in {}: {e}", dir.display()))
    };
    std::fs::remove_file(dir.join(INIT_MARKER)).map_err(io)?;
    sync_dir(dir).map_err(io)
}

/// The job counter a batch writes, or 0.
fn written_job_counter(batch: &Batch) -> u64 {
    batch
        .writes
        .iter()
        .filter(|w| w.tree == Tree::Meta && w.key == NEXT_JOB_KEY)
        .filter_map(|w| w.value.as_deref()?.try_into().ok())
        .map(u64::from_be_bytes)
        .max()
        .unwrap_or(0)
}

/// The commit count and job counter the store itself holds.
fn stored_mark(meta: &sled::Tree, dir: &Path) -> Result<Mark> {
    let counter = |key: &[u8]| -> Result<u64> {
        match meta.get(key)? {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    CoordinatorError::Store(format!(
                        "the store in {} has a malformed {} counter",
                        dir.display(),
                        String::from_utf8_lossy(key)
                    ))
                }),
        }
    };
    Ok(Mark {
        commits: counter(COMMITS_KEY)?,
        next_job: counter(NEXT_JOB_KEY)?,
    })
}

/// Whether the entries the store holds still sum to the digest its last
/// commit wrote. A store without a digest has never been counted (a fresh
/// store, or one written before digests existed) and passes; one with a
/// commit count but no digest has lost it.
fn content_intact(meta: &sled::Tree, dir: &Path, stored: Mark, digest: u64) -> Result<bool> {
    match meta.get(DIGEST_KEY).map_err(|e| fault(dir, &e))? {
        Some(v) => Ok(<[u8; 8]>::try_from(v.as_ref()).ok().map(u64::from_be_bytes) == Some(digest)),
        None => Ok(stored.commits == 0),
    }
}

/// Checks the store's own count against the mark file. A fresh store, or one
/// written before marks existed (no count, no mark), gets a new mark; a store
/// behind its mark, or one whose mark is missing or unreadable, has lost
/// acknowledged data and is refused, or with [`OnLoss::Recover`] accepted as
/// it is, its counters raised to the mark's.
fn reconcile_mark(
    dir: &Path,
    fresh: bool,
    stored: Mark,
    on_loss: OnLoss,
) -> Result<(Marked, Option<Recovery>)> {
    let keep = |current: Mark| -> Result<(Marked, Option<Recovery>)> {
        let file = MarkFile::open(dir)?;
        Ok((Marked::new(file, current), None))
    };
    let read = if fresh {
        MarkRead::Missing
    } else {
        MarkFile::read(dir)?
    };
    let lost = match read {
        MarkRead::Missing if fresh || stored.commits == 0 => {
            let file = MarkFile::create(dir, stored)?;
            return Ok((Marked::new(file, stored), None));
        }
        MarkRead::Found(mark) if stored.commits >= mark.commits => {
            return keep(Mark {
                commits: stored.commits,
                next_job: stored.next_job.max(mark.next_job),
            });
        }
        MarkRead::Found(mark) => Loss::Behind(mark),
        MarkRead::Missing => Loss::Unverifiable("its commit mark file is missing"),
        MarkRead::Damaged => Loss::Unverifiable("its commit mark file is damaged"),
    };
    if on_loss == OnLoss::Refuse {
        return Err(CoordinatorError::Store(lost.message(dir, stored)));
    }
    let acknowledged = match lost {
        Loss::Behind(mark) => mark,
        Loss::Unverifiable(_) | Loss::Changed => Mark::default(),
    };
    let current = Mark {
        commits: stored.commits.max(acknowledged.commits),
        next_job: stored.next_job.max(acknowledged.next_job),
    };
    tracing::warn!(dir = %dir.display(), "{}; recovering from what is intact", lost.message(dir, stored));
    let file = MarkFile::create(dir, current)?;
    let recovery = Recovery {
        acknowledged: acknowledged.commits,
        intact: stored.commits,
        next_job: current.next_job.max(1),
    };
    Ok((Marked::new(file, current), Some(recovery)))
}

/// Why a store cannot be trusted as it is.
enum Loss {
    /// The store holds fewer commits than were acknowledged.
    Behind(Mark),
    /// Whether commits were lost cannot be told.
    Unverifiable(&'static str),
    /// The entries no longer sum to the digest of the last commit: one was
    /// lost or changed, though the latest commit is there.
    Changed,
}

impl Loss {
    fn message(&self, dir: &Path, stored: Mark) -> String {
        let what = match self {
            Loss::Behind(mark) => format!(
                "has lost acknowledged data: it holds {} commits, but {} were acknowledged \
                 ({} lost; a file in it is damaged)",
                stored.commits,
                mark.commits,
                mark.commits - stored.commits
            ),
            Loss::Unverifiable(why) => {
                format!("cannot be checked for lost data: {why} ({MARK_FILE})")
            }
            Loss::Changed => "has lost acknowledged data: its entries no longer match the \
                 digest of its last commit (an entry was lost or changed; a file in it is damaged)"
                .to_string(),
        };
        format!(
            "the store in {} {what}. Refusing to start; `tally coordinator --recover` \
             continues from what is intact, and jobs may go back to an earlier state",
            dir.display()
        )
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl Store for SledStore {
    fn size_on_disk(&self) -> Option<u64> {
        let sled = self
            .with_handles(|h| Ok(h.db.size_on_disk().ok()))
            .ok()
            .flatten()?;
        Some(sled + self.values.size())
    }

    fn commit(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut marked = self
            .mark
            .lock()
            .map_err(|_| CoordinatorError::Internal("the commit mark lock is poisoned".into()))?;
        if self.broken.load(Ordering::SeqCst) {
            self.reopen(&mut marked)?;
        }
        let next = Mark {
            commits: marked.current.commits + 1,
            next_job: marked.current.next_job.max(written_job_counter(&batch)),
        };
        let digest = marked.digest;
        let spills = self.spill(&batch, next.commits)?;
        let written = guarded(&self.dir, || {
            self.with_handles(|handles| write_batch(handles, &batch, &spills, next.commits, digest))
        });
        let (digest, unreferenced) = match written {
            Ok(written) => written,
            Err(e) => {
                if matches!(
                    e,
                    CoordinatorError::StoreFull(_) | CoordinatorError::Store(_)
                ) {
                    self.broken.store(true, Ordering::SeqCst);
                }
                return Err(e);
            }
        };
        marked.digest = digest;
        marked.file.write(next)?;
        marked.current = next;
        for name in unreferenced {
            self.values.remove(&name);
        }
        Ok(())
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        guarded(&self.dir, || self.get_unguarded(tree, key))
    }

    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        guarded(&self.dir, || self.scan_unguarded(tree, prefix))
    }
}

impl SledStore {
    /// Writes the large blob values of `batch` to files, durably, before the
    /// commit that references them; one entry per write, `None` for a value
    /// kept in sled.
    fn spill(&self, batch: &Batch, commit: u64) -> Result<Vec<Option<SpillRef>>> {
        let mut spills = Vec::with_capacity(batch.writes.len());
        let mut any = false;
        for (i, w) in batch.writes.iter().enumerate() {
            spills.push(match &w.value {
                Some(v) if w.tree == Tree::Blobs && v.len() > SPILL_THRESHOLD => {
                    any = true;
                    Some(self.values.write(&format!("{commit}-{i}"), v)?)
                }
                _ => None,
            });
        }
        if any {
            self.values.sync()?;
        }
        Ok(spills)
    }

    fn get_unguarded(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (value, spilled) = self.with_handles(|h| {
            let value = h.tree(tree).get(key).map_err(|e| fault(&self.dir, &e))?;
            let spilled = match tree {
                Tree::Blobs => h.spilled().get(key).map_err(|e| fault(&self.dir, &e))?,
                _ => None,
            };
            Ok((value, spilled))
        })?;
        match spilled {
            Some(reference) => self.read_spilled(&reference).map(Some),
            None => Ok(value.map(|v| v.to_vec())),
        }
    }

    fn read_spilled(&self, reference: &[u8]) -> Result<Vec<u8>> {
        let spilled = SpillRef::decode(reference).ok_or_else(|| {
            CoordinatorError::Store(format!(
                "the store in {} has a malformed value reference",
                self.dir.display()
            ))
        })?;
        self.values.read(&spilled)
    }

    fn scan_unguarded(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let scan = |t: &sled::Tree| -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            t.scan_prefix(prefix)
                .map(|r| {
                    r.map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .map_err(|e| fault(&self.dir, &e))
                })
                .collect()
        };
        let (mut entries, spilled) = self.with_handles(|h| {
            let spilled = match tree {
                Tree::Blobs => scan(h.spilled())?,
                _ => Vec::new(),
            };
            Ok((scan(h.tree(tree))?, spilled))
        })?;
        if spilled.is_empty() {
            return Ok(entries);
        }
        for (key, reference) in spilled {
            entries.push((key, self.read_spilled(&reference)?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }
}

/// The spilled values whose files are missing or no longer match their
/// reference: their keys, and why.
fn damaged_values(handles: &Handles, values: &ValueFiles) -> Result<Vec<(Vec<u8>, String)>> {
    let mut damaged = Vec::new();
    for (key, spilled) in handles.spilled_refs()? {
        if let Err(e) = values.read(&spilled) {
            damaged.push((key, e.to_string()));
        }
    }
    Ok(damaged)
}

/// One insert (`Some`) or removal (`None`) of a key in the sled tree at an
/// index of [`Handles::trees`].
type TreeOp<'a> = (usize, &'a [u8], Option<Vec<u8>>);

/// Applies `batch` in one transaction over every tree, with the commit count
/// `commits` and the content digest moved on from `digest`, then flushes:
/// durable when this returns. A blob write with a spilled value (`spills`, by
/// write) stores its reference instead. Returns the new digest and the value
/// files no longer referenced.
fn write_batch(
    handles: &Handles,
    batch: &Batch,
    spills: &[Option<SpillRef>],
    commits: u64,
    digest: u64,
) -> Result<(u64, Vec<String>)> {
    use sled::Transactional;
    use sled::transaction::{ConflictableTransactionError, TransactionError};
    // Each write as operations on sled's trees: a blob write also clears the
    // key from the tree it does not use.
    let blobs = tree_index(Tree::Blobs);
    let mut ops: Vec<TreeOp> = Vec::new();
    for (w, spilled) in batch.writes.iter().zip(spills) {
        let key = w.key.as_slice();
        match (w.tree, spilled) {
            (Tree::Blobs, Some(spilled)) => {
                ops.push((SPILLED, key, Some(spilled.encode())));
                ops.push((blobs, key, None));
            }
            (Tree::Blobs, None) => {
                ops.push((blobs, key, w.value.clone()));
                ops.push((SPILLED, key, None));
            }
            (tree, _) => ops.push((tree_index(tree), key, w.value.clone())),
        }
    }
    let meta = tree_index(Tree::Meta);
    let written = handles
        .trees
        .as_slice()
        .transaction(|trees| {
            // Each operation's old value comes back from sled: the digest
            // moves by the difference, without reading the store.
            let mut next = digest;
            let mut unreferenced = Vec::new();
            for (tree, key, value) in &ops {
                let old = match value {
                    Some(v) => trees[*tree].insert(*key, v.as_slice())?,
                    None => trees[*tree].remove(*key)?,
                };
                if digested(*tree, key) {
                    if let Some(old) = &old {
                        next = next.wrapping_sub(entry_hash(*tree, key, old));
                    }
                    if let Some(v) = value {
                        next = next.wrapping_add(entry_hash(*tree, key, v));
                    }
                }
                if *tree == SPILLED
                    && let Some(old) = old.as_deref().and_then(SpillRef::decode)
                {
                    unreferenced.push(old.name);
                }
            }
            trees[meta].insert(COMMITS_KEY, &commits.to_be_bytes())?;
            trees[meta].insert(DIGEST_KEY, &next.to_be_bytes())?;
            Ok::<_, ConflictableTransactionError<()>>((next, unreferenced))
        })
        .map_err(|e| match e {
            TransactionError::Storage(e) => fault(&handles.dir, &e),
            TransactionError::Abort(()) => CoordinatorError::Internal("a commit aborted".into()),
        })?;
    let started = std::time::Instant::now();
    handles.db.flush().map_err(|e| fault(&handles.dir, &e))?;
    tracing::debug!(target: "tally_coordinator::store", flush_ms = started.elapsed().as_secs_f64() * 1e3, "flushed");
    Ok(written)
}

fn tree_index(tree: Tree) -> usize {
    Tree::ALL.iter().position(|t| *t == tree).unwrap()
}

/// Whether an entry of the tree at `tree` (an index into [`Handles::trees`])
/// counts in the content digest: all but the commit count and the digest
/// itself, which every commit rewrites.
fn digested(tree: usize, key: &[u8]) -> bool {
    !(tree == tree_index(Tree::Meta) && (key == COMMITS_KEY || key == DIGEST_KEY))
}

/// One entry's share of the content digest: FNV-1a of its tree's index, key
/// length, key and value. (A spilled value counts through its reference,
/// which holds the file's digest.)
fn entry_hash(tree: usize, key: &[u8], value: &[u8]) -> u64 {
    let tree = [tree as u8];
    let key_len = (key.len() as u32).to_le_bytes();
    tally_common::digest::fnv1a64_parts(&[&tree, &key_len, key, value])
}

/// The content digest recomputed from every entry the store holds.
fn content_digest(handles: &Handles) -> Result<u64> {
    let mut digest = 0u64;
    for (tree, sled_tree) in handles.trees.iter().enumerate() {
        for entry in sled_tree.iter() {
            let (key, value) = entry.map_err(|e| fault(&handles.dir, &e))?;
            if digested(tree, &key) {
                digest = digest.wrapping_add(entry_hash(tree, &key, &value));
            }
        }
    }
    Ok(digest)
}
