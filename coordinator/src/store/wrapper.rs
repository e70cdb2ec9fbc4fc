//! A store that wraps another and adds to its writes (timing them, recording
//! them for the replica): such a wrapper writes only what it adds, and every
//! other call goes to the store it wraps unchanged.

use crate::error::Result;

use super::api::{Batch, Store, Tree};

/// A store made of another ([`StoreWrapper::inner`]) and what it does
/// around its applies and flushes; every such wrapper is a [`Store`].
pub trait StoreWrapper: Send + Sync {
    /// The store wrapped.
    fn inner(&self) -> &dyn Store;

    /// What [`Store::apply`] does: by default the wrapped store's apply.
    fn wrapped_apply(&self, batch: Batch) -> Result<()> {
        self.inner().apply(batch)
    }

    /// What [`Store::flush`] does: by default the wrapped store's flush.
    fn wrapped_flush(&self) -> Result<()> {
        self.inner().flush()
    }
}

/// Every call but the apply and the flush reads the wrapped store; a commit
/// is the wrapper's apply, then its flush (the trait's own default).
impl<W: StoreWrapper> Store for W {
    fn apply(&self, batch: Batch) -> Result<()> {
        self.wrapped_apply(batch)
    }

    fn flush(&self) -> Result<()> {
        self.wrapped_flush()
    }

    fn applied(&self) -> u64 {
        self.inner().applied()
    }

    fn reopen_if_broken(&self) -> Result<()> {
        self.inner().reopen_if_broken()
    }

    fn verify(&self) -> Result<()> {
        self.inner().verify()
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner().get(tree, key)
    }

    fn value_len(&self, tree: Tree, key: &[u8]) -> Result<Option<u64>> {
        self.inner().value_len(tree, key)
    }

    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner().scan_prefix(tree, prefix)
    }

    fn keys(&self, tree: Tree) -> Result<Vec<Vec<u8>>> {
        self.inner().keys(tree)
    }

    fn last_in_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.inner().last_in_prefix(tree, prefix)
    }

    fn size_on_disk(&self) -> Option<u64> {
        self.inner().size_on_disk()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::metrics::CoordinatorMetrics;
    use crate::store::{Batch, SledStore, Store, TimedStore, Tree};
    use crate::watchdog::Holds;

    #[test]
    fn a_wrapper_adds_to_the_writes_and_passes_every_other_call_on() {
        let dir = tempfile::tempdir().unwrap();
        let sled: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let metrics = Arc::new(CoordinatorMetrics::default());
        let timed = TimedStore::new(sled.clone(), metrics.clone(), Arc::new(Holds::default()));
        let mut batch = Batch::default();
        batch.put(Tree::Jobs, b"a/1".to_vec(), b"x".to_vec());
        batch.put(Tree::Jobs, b"a/2".to_vec(), b"yy".to_vec());
        timed.commit(batch).unwrap();
        // What the wrapper adds: its apply counted the batch.
        assert_eq!(metrics.store_batches.get(), 1);
        // The rest is the wrapped store's, not the trait's defaults.
        assert_eq!(timed.applied(), sled.applied());
        assert!(timed.applied() > 0);
        assert_eq!(timed.get(Tree::Jobs, b"a/2").unwrap(), Some(b"yy".to_vec()));
        assert_eq!(timed.value_len(Tree::Jobs, b"a/2").unwrap(), Some(2));
        assert_eq!(
            timed.scan_prefix(Tree::Jobs, b"a/").unwrap(),
            sled.scan_prefix(Tree::Jobs, b"a/").unwrap()
        );
        assert_eq!(timed.keys(Tree::Jobs).unwrap().len(), 2);
        assert_eq!(
            timed.last_in_prefix(Tree::Jobs, b"a/").unwrap(),
            Some((b"a/2".to_vec(), b"yy".to_vec()))
        );
        assert!(timed.size_on_disk().is_some(), "the disk store's size");
        assert_eq!(timed.size_on_disk(), sled.size_on_disk());
        timed.verify().unwrap();
        timed.reopen_if_broken().unwrap();
    }
}
