//! The data directory around sled: checked before sled writes anything into
//! it, marked while a fresh store is initialised, opened with sled's lock
//! retried briefly and its unfinished snapshots removed, and refused when it
//! holds something other than this schema of a tally store.

use std::path::Path;

use crate::error::{CoordinatorError, Result, sled_message};

use super::api::Tree;

/// The current layout of the store. A data directory written by another layout
/// is refused rather than misread.
pub const SCHEMA_VERSION: u32 = 1;

pub(super) const SCHEMA_KEY: &[u8] = b"schema";

pub(super) const PRODUCT_KEY: &[u8] = b"product";

pub(super) const PRODUCT: &[u8] = b"tally";

/// Present in the data directory while a fresh store is initialised. A
/// directory with sled's files but no readable tally schema is refused as
/// damaged, unless this marker shows that its first start was interrupted.
pub(super) const INIT_MARKER: &str = "tally-init";

/// Refuses an existing sled database without a tally schema before any tree is
/// created in it: one written by another program, or one whose data sled could
/// not read back.
pub(super) fn check_existing(db: &sled::Db, dir: &Path) -> Result<()> {
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
pub(super) fn check_marker(
    product: Option<&[u8]>,
    version: Option<&[u8]>,
    dir: &Path,
) -> Result<()> {
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

/// The stage directory a data directory may hold beside its store (`tally
/// run` keeps its stage data there): a directory holding only it is empty.
pub const STAGE_DIR: &str = "stage";

/// What a new ext filesystem holds at its root: a data directory at a
/// volume's root (a Kubernetes persistent volume) counts as empty with it.
pub const LOST_AND_FOUND: &str = "lost+found";

/// Written into a data directory while a restore from the replica fills it
/// (`crate::replica`), and removed when the restore is whole: the store may
/// be created beside it, and a coordinator refuses to start while it is there.
pub const RESTORING_MARKER: &str = "tally-restoring";

/// Checks what `dir` holds before sled opens anything, so that sled never
/// writes into a foreign directory. Returns whether the store is fresh (empty,
/// or its first start was interrupted); a fresh store's initialisation begins.
pub(super) fn prepare_directory(dir: &Path) -> Result<bool> {
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
        Ok(mut entries) => entries.all(|entry| {
            entry.is_ok_and(|e| {
                (e.file_name() == STAGE_DIR && e.path().is_dir())
                    || e.file_name() == RESTORING_MARKER
                    || e.file_name() == LOST_AND_FOUND
            })
        }),
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
pub(super) fn open_db(dir: &Path, fresh: bool) -> Result<sled::Db> {
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
            "cannot open the store in {}{hint}: {}",
            dir.display(),
            sled_message(&e)
        ))
    })
}

pub(super) const IN_USE: &str =
    "the data directory is in use by another tally coordinator (its lock is held)";

/// How long [`SledStore::open`] waits for a held store lock.
pub(super) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// sled's page cache, at most: its default (1 GiB) would let the cache grow
/// to that much beside the scheduler's own state, and sled holds about twice
/// its cache. A coordinator of a million shards then stays under 1 GB; the
/// cost is on reads of a large store (a restart reading a million shards took
/// a median of 2.56 s with 128 MiB against 2.25 s with the default).
pub(super) const CACHE_BYTES: u64 = 48 << 20;

/// A store dropped a moment ago (a coordinator restarted in the same
/// process) keeps its file lock until sled's flusher thread notices, so a
/// held lock is retried for [`LOCK_WAIT`] before it means another coordinator.
pub(super) fn open_waiting_for_lock(dir: &Path) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .cache_capacity(CACHE_BYTES)
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
pub(super) fn remove_unfinished_snapshots(dir: &Path) -> Result<usize> {
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
pub(super) fn begin_init(dir: &Path) -> Result<()> {
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
pub(super) fn end_init(dir: &Path) -> Result<()> {
    let io = |e: std::io::Error| {
        CoordinatorError::Store(format!("cannot create the store in {}: {e}", dir.display()))
    };
    std::fs::remove_file(dir.join(INIT_MARKER)).map_err(io)?;
    sync_dir(dir).map_err(io)
}

pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
