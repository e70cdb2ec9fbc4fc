//! A store wrapper that times every flush (the durable part of a group
//! commit) into the coordinator's store-commit histogram, marks it for the
//! watchdog while it runs, and counts the batches applied.

use std::sync::Arc;

use crate::error::Result;
use crate::metrics::CoordinatorMetrics;
use crate::watchdog::Holds;

use super::api::{Batch, Store, Tree};

/// Times every flush into a histogram.
pub struct TimedStore {
    inner: Arc<dyn Store>,
    commits: Arc<CoordinatorMetrics>,
    holds: Arc<Holds>,
}

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, commits: Arc<CoordinatorMetrics>, holds: Arc<Holds>) -> Self {
        TimedStore {
            inner,
            commits,
            holds,
        }
    }
}

impl Store for TimedStore {
    fn apply(&self, batch: Batch) -> Result<()> {
        self.inner.apply(batch)?;
        self.commits.store_batches.add(1);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let started = std::time::Instant::now();
        let _flushing = self.holds.flush.begin("the store's flush (fsync)");
        let result = self.inner.flush();
        self.commits.store_commit.observe(started.elapsed());
        result
    }

    fn applied(&self) -> u64 {
        self.inner.applied()
    }

    fn reopen_if_broken(&self) -> Result<()> {
        self.inner.reopen_if_broken()
    }

    fn verify(&self) -> Result<()> {
        self.inner.verify()
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(tree, key)
    }

    fn value_len(&self, tree: Tree, key: &[u8]) -> Result<Option<u64>> {
        self.inner.value_len(tree, key)
    }

    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.scan_prefix(tree, prefix)
    }

    fn keys(&self, tree: Tree) -> Result<Vec<Vec<u8>>> {
        self.inner.keys(tree)
    }

    fn last_in_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.inner.last_in_prefix(tree, prefix)
    }

    fn size_on_disk(&self) -> Option<u64> {
        self.inner.size_on_disk()
    }
}
