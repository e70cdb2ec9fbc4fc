//! The on-disk backend: one sled database, one sled tree per [`Tree`]. An
//! apply records its writes in memory (`overlay.rs`); a flush writes every
//! batch applied since the last one in one multi-tree transaction, makes it
//! durable, then writes the commit mark.
//!
//! Around it: `directory.rs` checks and opens the data directory,
//! `integrity.rs` tells whether acknowledged data was lost, `faults.rs` names
//! storage failures, and `spill.rs` keeps large blob values in pack files
//! beside sled, which sled references.

use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::panic_fence::SetOnPanic;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{CoordinatorError, Result};

use super::api::{Batch, NEXT_JOB_KEY, Store, Tree};
use super::directory::{
    PRODUCT, PRODUCT_KEY, SCHEMA_KEY, SCHEMA_VERSION, check_marker, end_init, prepare_directory,
};
use super::faults::{fault, guarded};
use super::integrity::{
    Digests, Loss, Marked, OnLoss, Recovery, content_digest, content_intact, reconcile_mark,
    stored_mark, written_job_counter,
};
use super::mark::Mark;
use super::overlay::{Entry, Overlay};
use super::sled_trees::{Commit, Handles, holds_legacy_digest, write_batch};
use super::spill::{SPILL_THRESHOLD, SpillRef, ValueFiles};

/// The on-disk backend: one sled database, one sled tree per [`Tree`].
pub struct SledStore {
    dir: PathBuf,
    /// sled's handles, replaced when a failed write left sled unusable
    /// (`None` only while they are being replaced, or if that failed).
    handles: RwLock<Option<Handles>>,
    /// Set by a failed write: sled refuses everything after a failed write
    /// (a full disk, an I/O error) until it is opened again. Applies and
    /// flushes are refused until `reopen_if_broken` (or a commit) opens it
    /// again; that is how work resumes by itself once space is freed.
    broken: AtomicBool,
    /// Held across a whole apply, so that the commit count and the store
    /// advance in the order of the batches, and while a flush writes the mark.
    mark: Mutex<Marked>,
    /// Held across a whole flush: flushes write their marks in order.
    flushing: Mutex<()>,
    /// The writes applied and not yet in sled. Taken after `mark` when both
    /// are held.
    overlay: Mutex<Overlay>,
    /// Batches applied since the store was opened.
    applies: AtomicU64,
    recovery: Option<Recovery>,
    /// The spilled values of [`Tree::Blobs`].
    values: ValueFiles,
    /// The content check of a store opened with the check in the background.
    check: Mutex<ContentCheck>,
}

/// Where the check of the content digest stands.
enum ContentCheck {
    Done,
    /// The digest being summed on another thread, and the mark to check it
    /// against.
    Running(std::thread::JoinHandle<Result<Digests>>, Mark),
    Failed(CoordinatorError),
}

/// Writes applied and not yet in sled past which an apply writes them to
/// sled at once (whole batches, in one transaction, not yet durably).
const MAX_UNWRITTEN: usize = 16_384;

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
        guarded(dir, || SledStore::open_unguarded(dir, on_loss, false))
    }

    /// Opens the store in `dir`, refusing a loss as [`SledStore::open`] does,
    /// but sums the content digest (which reads every entry) on another
    /// thread while the caller reads the store: [`Store::verify`] waits for
    /// it and fails if an entry was lost or changed, and nothing is written
    /// before it has passed.
    pub fn open_checking_in_background(dir: &Path) -> Result<SledStore> {
        guarded(dir, || SledStore::open_unguarded(dir, OnLoss::Refuse, true))
    }

    fn open_unguarded(dir: &Path, on_loss: OnLoss, background: bool) -> Result<SledStore> {
        let fresh = prepare_directory(dir)?;
        let handles = Handles::open(dir, fresh)?;
        let stored = stored_mark(handles.tree(Tree::Meta), dir)?;
        let (mut marked, mut recovery) = reconcile_mark(dir, fresh, stored, on_loss)?;
        marked.legacy_digest = holds_legacy_digest(&handles, dir)?;
        let mut check = ContentCheck::Done;
        let digest = if background && !fresh && on_loss == OnLoss::Refuse {
            let trees = handles.trees.clone();
            let at = dir.to_path_buf();
            let summing = std::thread::Builder::new()
                .name("tally-store-check".into())
                .spawn(move || guarded(&at, || content_digest(&trees, &at)))
                .map_err(|e| {
                    CoordinatorError::Internal(format!("cannot start the store check: {e}"))
                })?;
            check = ContentCheck::Running(summing, stored);
            None
        } else {
            Some(content_digest(&handles.trees, dir)?)
        };
        if let Some(digest) = digest
            && !content_intact(handles.tree(Tree::Meta), dir, stored, digest)?
        {
            let lost = Loss::Changed;
            if on_loss == OnLoss::Refuse {
                return Err(CoordinatorError::Store(lost.refusal(dir, stored)));
            }
            tracing::warn!(dir = %dir.display(), "{}; recovering from what is intact (--recover)", lost.finding(dir, stored));
            recovery.get_or_insert(Recovery {
                acknowledged: marked.current.commits,
                intact: stored.commits,
                next_job: marked.current.next_job.max(1),
            });
        }
        marked.digest = digest.map_or(0, |d| d.current);
        let values = ValueFiles::open(dir)?;
        let spilled = handles.spilled_refs()?;
        values.recount(spilled.iter().map(|(_, r)| r));
        let damaged = damaged_values(&spilled, &values);
        if let Some((_, why)) = damaged.first() {
            let lost = format!(
                "the store in {} has lost acknowledged data: {} of the large values in \
                 its value files are missing or damaged ({why})",
                dir.display(),
                damaged.len()
            );
            if on_loss == OnLoss::Refuse {
                return Err(CoordinatorError::Store(format!(
                    "{lost}. Refusing to start; `tally coordinator --recover` continues from \
                     what is intact, and jobs may go back to an earlier state"
                )));
            }
            tracing::warn!("{lost}; recovering from what is intact (--recover)");
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
            flushing: Mutex::new(()),
            overlay: Mutex::new(Overlay::default()),
            applies: AtomicU64::new(0),
            recovery,
            values,
            check: Mutex::new(check),
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
        let handles = self.handles.read();
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
        // What was applied and not flushed is read back from the store.
        self.overlay().clear();
        let mut handles = self.handles.write();
        // The old handles must be gone before sled can take its lock again.
        drop(handles.take());
        let reopened = Handles::open(&self.dir, false)?;
        // The values of the writes just forgotten lost their references.
        let spilled = reopened.spilled_refs()?;
        self.values.recount(spilled.iter().map(|(_, r)| r));
        let meta = reopened.tree(Tree::Meta);
        let stored = stored_mark(meta, &self.dir)?;
        let acknowledged = marked.current;
        let digest = content_digest(&reopened.trees, &self.dir)?;
        marked.legacy_digest = holds_legacy_digest(&reopened, &self.dir)?;
        let lost = if stored.commits < acknowledged.commits {
            Some(Loss::Behind(acknowledged))
        } else if !content_intact(meta, &self.dir, stored, digest)? {
            Some(Loss::Changed)
        } else {
            None
        };
        if let Some(lost) = lost {
            return Err(CoordinatorError::Store(lost.refusal(&self.dir, stored)));
        }
        marked.current.commits = stored.commits;
        marked.current.next_job = acknowledged.next_job.max(stored.next_job);
        // Batches applied but not flushed may be gone: go on from the store
        // (a reference they dropped may be there again, and the counts come
        // from the store; the sweep at the next open removes any file left
        // over).
        marked.applied = marked.current;
        marked.unreferenced.clear();
        marked.digest = digest.current;
        *handles = Some(reopened);
        self.broken.store(false, Ordering::SeqCst);
        tracing::info!(dir = %self.dir.display(), "the store is writable again");
        Ok(())
    }

    /// Waits for a content check running in the background; its failure is
    /// the store's, for every later write too.
    fn checked(&self) -> Result<()> {
        let mut check = self.check.lock();
        match std::mem::replace(&mut *check, ContentCheck::Done) {
            ContentCheck::Done => Ok(()),
            ContentCheck::Failed(e) => {
                *check = ContentCheck::Failed(e.clone());
                Err(e)
            }
            ContentCheck::Running(summing, stored) => {
                let summed = summing.join().unwrap_or_else(|_| {
                    Err(CoordinatorError::Internal(
                        "the store check panicked".into(),
                    ))
                });
                let verdict = summed.and_then(|digest| {
                    let intact = self.with_handles(|h| {
                        content_intact(h.tree(Tree::Meta), &self.dir, stored, digest)
                    })?;
                    if !intact {
                        return Err(CoordinatorError::Store(
                            Loss::Changed.refusal(&self.dir, stored),
                        ));
                    }
                    let mut marked = self.marked();
                    marked.digest = digest.current;
                    Ok(())
                });
                if let Err(e) = &verdict {
                    *check = ContentCheck::Failed(e.clone());
                }
                verdict
            }
        }
    }

    fn marked(&self) -> Held<'_, Marked> {
        Held::new(self.mark.lock(), &self.broken)
    }

    /// Held across a flush, a reopen, and an apply's early write.
    fn flush_lock(&self) -> Held<'_, ()> {
        Held::new(self.flushing.lock(), &self.broken)
    }

    fn overlay(&self) -> Held<'_, Overlay> {
        Held::new(self.overlay.lock(), &self.broken)
    }

    fn refuse_if_broken(&self) -> Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(CoordinatorError::Store(format!(
                "a write to the store in {} failed; it is opened again and read back \
                 before the next change",
                self.dir.display()
            )));
        }
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

impl Store for SledStore {
    fn size_on_disk(&self) -> Option<u64> {
        let sled = self
            .with_handles(|h| Ok(h.db.size_on_disk().ok()))
            .ok()
            .flatten()?;
        Some(sled + self.values.size())
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Nothing is written before the content check has passed (it takes
        // the mark's lock itself).
        self.checked()?;
        let mut marked = self.marked();
        // Batches applied after the last good flush may be lost by the
        // reopen: the caller must read its state back first (see
        // `reopen_if_broken`), so nothing is applied on top meanwhile.
        self.refuse_if_broken()?;
        let next = Mark {
            commits: marked.applied.commits + 1,
            next_job: marked.applied.next_job.max(written_job_counter(&batch)),
        };
        let spills = self.spill(&batch, next.commits)?;
        let mut overlay = self.overlay();
        let unwritten = overlay.len() + batch.len();
        for (w, spilled) in batch.writes.into_iter().zip(spills) {
            let entry = match (spilled, w.value) {
                (Some(spilled), _) => Entry::Spilled(spilled),
                (None, Some(value)) => Entry::Put(value),
                (None, None) => Entry::Remove,
            };
            // A value replaced before sled ever referenced it releases its
            // reference to its pack once this batch is durable.
            if let Some(Entry::Spilled(old)) = overlay.insert(w.tree, w.key, entry) {
                marked.unreferenced.push((next.commits, old.name));
            }
        }
        marked.applied = next;
        self.applies.fetch_add(1, Ordering::SeqCst);
        drop(overlay);
        drop(marked);
        if unwritten > MAX_UNWRITTEN {
            // Whole batches to sled now, not yet durable: one transaction
            // holds every node it replaces until it ends, so its size bounds
            // the memory (a submission of many shards comes in parts).
            let _flushing = self.flush_lock();
            self.refuse_if_broken()?;
            if let Err(e) = self.write_overlay() {
                self.broken.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        // One flush at a time, so that marks are written in order.
        let _flushing = self.flush_lock();
        self.refuse_if_broken()?;
        {
            let marked = self.marked();
            if marked.applied == marked.current {
                return Ok(());
            }
        }
        let flushed = self.write_overlay().and_then(|target| {
            guarded(&self.dir, || {
                self.with_handles(|handles| {
                    let started = std::time::Instant::now();
                    handles.db.flush().map_err(|e| fault(&handles.dir, &e))?;
                    tracing::debug!(target: "tally_coordinator::store", flush_ms = started.elapsed().as_secs_f64() * 1e3, "flushed");
                    Ok(target)
                })
            })
        });
        let target = match flushed {
            Ok(target) => target,
            Err(e) => {
                self.broken.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        let mut marked = self.marked();
        // A reopen in between may have started the count again from what the
        // store holds: the mark never goes back.
        if target.commits > marked.current.commits {
            marked.file.write(target)?;
            marked.current = target;
        }
        let durable = marked.current.commits;
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut marked.unreferenced)
            .into_iter()
            .partition(|(commit, _)| *commit <= durable);
        marked.unreferenced = kept;
        drop(marked);
        for (_, name) in gone {
            self.values.release(&name);
        }
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.applies.load(Ordering::SeqCst)
    }

    fn verify(&self) -> Result<()> {
        self.checked()
    }

    /// Opens the store again first if a write failed (the way work resumes
    /// by itself once space is freed), then applies and flushes.
    fn commit(&self, batch: Batch) -> Result<()> {
        self.reopen_if_broken()?;
        self.apply(batch)?;
        self.flush()
    }

    fn reopen_if_broken(&self) -> Result<()> {
        if !self.broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        // No flush runs while sled is opened again.
        let _flushing = self.flush_lock();
        let mut marked = self.marked();
        if self.broken.load(Ordering::SeqCst) {
            self.reopen(&mut marked)?;
        }
        Ok(())
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        guarded(&self.dir, || self.get_unguarded(tree, key))
    }

    fn value_len(&self, tree: Tree, key: &[u8]) -> Result<Option<u64>> {
        guarded(&self.dir, || self.value_len_unguarded(tree, key))
    }

    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        guarded(&self.dir, || self.scan_unguarded(tree, prefix))
    }

    fn keys(&self, tree: Tree) -> Result<Vec<Vec<u8>>> {
        guarded(&self.dir, || {
            let unwritten = self.overlay().prefix(tree, &[]);
            let mut keys: std::collections::BTreeSet<Vec<u8>> = self.with_handles(|h| {
                let mut trees = vec![h.tree(tree)];
                if tree == Tree::Blobs {
                    trees.push(h.spilled());
                }
                trees
                    .into_iter()
                    .flat_map(|t| t.iter().keys())
                    .map(|k| k.map(|k| k.to_vec()).map_err(|e| fault(&self.dir, &e)))
                    .collect()
            })?;
            for (key, entry) in unwritten {
                match entry {
                    Entry::Remove => keys.remove(&key),
                    _ => keys.insert(key),
                };
            }
            Ok(keys.into_iter().collect())
        })
    }

    fn last_in_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        // Spilled blobs live in a tree of their own, and writes not yet in
        // sled may remove the last key: merge them as a scan does.
        if tree == Tree::Blobs || self.overlay().touches(tree, prefix) {
            return Ok(self.scan_prefix(tree, prefix)?.pop());
        }
        guarded(&self.dir, || {
            self.with_handles(|h| {
                h.tree(tree)
                    .scan_prefix(prefix)
                    .next_back()
                    .transpose()
                    .map(|last| last.map(|(k, v)| (k.to_vec(), v.to_vec())))
                    .map_err(|e| fault(&self.dir, &e))
            })
        })
    }
}

impl SledStore {
    /// Writes the batches applied and not yet in sled in one transaction
    /// (not durably); returns the mark of the last of them. The caller holds
    /// the flush lock, so transactions go in the order of their batches.
    fn write_overlay(&self) -> Result<Mark> {
        let (target, commit, writes) = {
            let marked = self.marked();
            let commit = Commit {
                count: marked.applied.commits,
                digest: marked.digest,
                remove_legacy_digest: marked.legacy_digest,
            };
            (marked.applied, commit, self.overlay().take())
        };
        if writes.is_empty() {
            return Ok(target);
        }
        // The values these writes reference go to disk first: sled may write
        // its log at any time once it holds the references. They were all
        // written before the take above; values applied since may land in
        // the same pack and are synced early with it.
        self.values.sync_written()?;
        guarded(&self.dir, || {
            self.with_handles(|handles| {
                let (digest, unreferenced) = write_batch(handles, &writes, commit)?;
                let mut marked = self.marked();
                marked.digest = digest;
                marked.legacy_digest = false;
                // Until this transaction is durable the store may come back
                // without it, referencing these values again: they are
                // released after the flush that covers it.
                marked
                    .unreferenced
                    .extend(unreferenced.into_iter().map(|name| (target.commits, name)));
                drop(marked);
                self.overlay().written();
                Ok(target)
            })
        })
    }

    /// Writes the large blob values of `batch` to the open pack (made durable
    /// by `write_overlay`, before the transaction that references them); one
    /// entry per write, `None` for a value kept in sled.
    fn spill(&self, batch: &Batch, commit: u64) -> Result<Vec<Option<SpillRef>>> {
        let mut spills = Vec::with_capacity(batch.writes.len());
        for (i, w) in batch.writes.iter().enumerate() {
            spills.push(match &w.value {
                Some(v) if w.tree == Tree::Blobs && v.len() > SPILL_THRESHOLD => {
                    Some(self.values.write(&format!("{commit}-{i}"), v)?)
                }
                _ => None,
            });
        }
        Ok(spills)
    }

    /// fsyncs of value packs and of their directory since the store opened.
    #[cfg(test)]
    pub(super) fn value_fsyncs(&self) -> u64 {
        self.values.fsyncs()
    }

    fn get_unguarded(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let unwritten = self.overlay().get(tree, key);
        if let Some(entry) = unwritten {
            return self.entry_value(entry);
        }
        // A blob key is in one of its two trees: the reference, if any, first.
        let (value, spilled) = self.with_handles(|h| {
            let read = |t: &sled::Tree| t.get(key).map_err(|e| fault(&self.dir, &e));
            if tree == Tree::Blobs
                && let Some(reference) = read(h.spilled())?
            {
                return Ok((None, Some(reference)));
            }
            Ok((read(h.tree(tree))?, None))
        })?;
        match spilled {
            Some(reference) => self.read_spilled(&reference).map(Some),
            None => Ok(value.map(|v| v.to_vec())),
        }
    }

    /// [`Store::value_len`]: a spilled value's length from its reference.
    fn value_len_unguarded(&self, tree: Tree, key: &[u8]) -> Result<Option<u64>> {
        match self.overlay().get(tree, key) {
            Some(Entry::Put(value)) => return Ok(Some(value.len() as u64)),
            Some(Entry::Spilled(spilled)) => return Ok(Some(spilled.len)),
            Some(Entry::Remove) => return Ok(None),
            None => {}
        }
        self.with_handles(|h| {
            let read = |t: &sled::Tree| t.get(key).map_err(|e| fault(&self.dir, &e));
            if tree == Tree::Blobs
                && let Some(reference) = read(h.spilled())?
            {
                let spilled = SpillRef::decode(&reference).ok_or_else(|| {
                    CoordinatorError::Store(format!(
                        "the store in {} has a malformed value reference",
                        self.dir.display()
                    ))
                })?;
                return Ok(Some(spilled.len));
            }
            Ok(read(h.tree(tree))?.map(|v| v.len() as u64))
        })
    }

    /// The value a write not yet in sled leaves.
    fn entry_value(&self, entry: Entry) -> Result<Option<Vec<u8>>> {
        match entry {
            Entry::Put(value) => Ok(Some(value)),
            Entry::Spilled(spilled) => self.values.read(&spilled).map(Some),
            Entry::Remove => Ok(None),
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
        let unwritten = self.overlay().prefix(tree, prefix);
        let stored = self.scan_stored(tree, prefix)?;
        if unwritten.is_empty() {
            return Ok(stored);
        }
        let mut merged: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = stored.into_iter().collect();
        for (key, entry) in unwritten {
            match self.entry_value(entry)? {
                Some(value) => merged.insert(key, value),
                None => merged.remove(&key),
            };
        }
        Ok(merged.into_iter().collect())
    }

    /// The entries sled holds (not the writes still in the overlay).
    fn scan_stored(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
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

/// The spilled values missing from their files or no longer matching their
/// reference: their keys, and why.
fn damaged_values(spilled: &[(Vec<u8>, SpillRef)], values: &ValueFiles) -> Vec<(Vec<u8>, String)> {
    spilled
        .iter()
        .filter_map(|(key, spilled)| {
            let why = values.read(spilled).err()?;
            Some((key.clone(), why.to_string()))
        })
        .collect()
}

/// A store lock's guard that marks the store broken when a panic unwinds
/// through it: applies and flushes are then refused until the store is opened
/// again and read back.
struct Held<'a, T> {
    // Dropped first, so the store is marked broken before the lock is free.
    _fence: SetOnPanic<'a>,
    guard: MutexGuard<'a, T>,
}

impl<'a, T> Held<'a, T> {
    fn new(guard: MutexGuard<'a, T>, broken: &'a AtomicBool) -> Self {
        Held {
            _fence: SetOnPanic(broken),
            guard,
        }
    }
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;

    #[test]
    fn a_panic_under_a_store_lock_marks_the_store_broken() {
        let lock = Mutex::new(0u32);
        let broken = AtomicBool::new(false);
        *Held::new(lock.lock(), &broken) += 1;
        assert!(!broken.load(Ordering::SeqCst));
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut held = Held::new(lock.lock(), &broken);
            *held += 1;
            panic!("a bug while the overlay is half changed");
        }));
        assert!(unwound.is_err());
        assert!(broken.load(Ordering::SeqCst));
        // The lock is not poisoned: the store's own flag refuses writes.
        assert_eq!(*lock.lock(), 2);
    }
}
