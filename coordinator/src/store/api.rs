//! The store's contract: the trees, the batches of writes and the [`Store`]
//! trait that every backend implements.

use crate::error::Result;

/// The trees of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tree {
    /// Schema version and counters.
    Meta,
    /// Job records by job id.
    Jobs,
    /// Shard records by (job, stage, index).
    Shards,
    /// Stage output and checkpoints: large opaque blobs.
    Blobs,
    /// Per-job event log by (job, sequence).
    Events,
    /// Idempotency keys to job ids.
    Keys,
}

impl Tree {
    pub const ALL: [Tree; 6] = [
        Tree::Meta,
        Tree::Jobs,
        Tree::Shards,
        Tree::Blobs,
        Tree::Events,
        Tree::Keys,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Tree::Meta => "meta",
            Tree::Jobs => "jobs",
            Tree::Shards => "shards",
            Tree::Blobs => "blobs",
            Tree::Events => "events",
            Tree::Keys => "keys",
        }
    }
}

/// The job counter in [`Tree::Meta`]: the next job's number, big-endian u64.
/// The disk store keeps its highest value beside its commit mark too, so job
/// ids never go back, even when a damaged store is recovered.
pub const NEXT_JOB_KEY: &[u8] = b"next_job";

/// The coordinator's epoch in [`Tree::Meta`], big-endian u64: one more at
/// each load of the scheduler, and the high half of every attempt number
/// leased after it, so that leases, which are never written, are fenced
/// across restarts (see `tally_wire::lease::Attempt`).
pub const EPOCH_KEY: &[u8] = b"epoch";

/// One write of a commit: `None` removes the key.
#[derive(Clone, Debug)]
pub struct Write {
    pub tree: Tree,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// A set of writes applied all together or not at all.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub writes: Vec<Write>,
}

impl Batch {
    pub fn put(&mut self, tree: Tree, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            tree,
            key: key.into(),
            value: Some(value.into()),
        });
    }

    pub fn remove(&mut self, tree: Tree, key: impl Into<Vec<u8>>) {
        self.writes.push(Write {
            tree,
            key: key.into(),
            value: None,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.writes.len()
    }
}

/// A transactional key-value store. A batch is applied atomically
/// ([`Store::apply`]: readable at once, durable only after the next
/// [`Store::flush`]); callers acknowledge nothing before the flush that
/// follows their apply has returned. Many applies share one flush: that is
/// the coordinator's group commit.
pub trait Store: Send + Sync {
    /// Applies `batch` atomically, not yet durably.
    fn apply(&self, batch: Batch) -> Result<()>;
    /// Makes every batch applied before the call durable.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// Batches applied so far (never goes back): a flush that starts after
    /// reading `n` here makes the first `n` durable.
    fn applied(&self) -> u64;
    /// Applies and flushes `batch`.
    fn commit(&self, batch: Batch) -> Result<()> {
        self.apply(batch)?;
        self.flush()
    }
    /// After a failed apply or flush: opens the store again if it needs to
    /// be, so that it can be read and written. Batches applied but not
    /// flushed may be gone afterwards, so the caller reads its state back.
    fn reopen_if_broken(&self) -> Result<()> {
        Ok(())
    }
    /// Waits for any check of the store's content still running since it
    /// was opened; fails if the store lost acknowledged data.
    fn verify(&self) -> Result<()> {
        Ok(())
    }
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The length of the value at `key`, without reading a large one.
    fn value_len(&self, tree: Tree, key: &[u8]) -> Result<Option<u64>> {
        Ok(self.get(tree, key)?.map(|v| v.len() as u64))
    }
    /// All entries whose key starts with `prefix`, in key order.
    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Every key of `tree`, in key order, without reading the values (the
    /// replica's snapshot reads the values one at a time).
    fn keys(&self, tree: Tree) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .scan_prefix(tree, &[])?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }
    /// The entry with the greatest key that starts with `prefix` (a job's
    /// last event, without reading the others). Not for spilled blobs.
    fn last_in_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        Ok(self.scan_prefix(tree, prefix)?.pop())
    }
    /// Bytes the store occupies on disk, if it has a disk.
    fn size_on_disk(&self) -> Option<u64> {
        None
    }
}
