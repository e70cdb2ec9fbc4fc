//! The in-memory backend, for tests and for coordinators without a data
//! directory: nothing survives the process.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Result;

use super::api::{Batch, Store, Tree};

/// The in-memory backend, for unit tests.
#[derive(Default)]
pub struct MemoryStore {
    trees: Mutex<BTreeMap<Tree, KeyValues>>,
    applied: AtomicU64,
}

type KeyValues = BTreeMap<Vec<u8>, Vec<u8>>;

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for MemoryStore {
    fn applied(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        let mut trees = self.trees.lock();
        for w in batch.writes {
            let tree = trees.entry(w.tree).or_default();
            match w.value {
                Some(v) => {
                    tree.insert(w.key, v);
                }
                None => {
                    tree.remove(&w.key);
                }
            }
        }
        self.applied.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .trees
            .lock()
            .get(&tree)
            .and_then(|t| t.get(key).cloned()))
    }

    fn scan_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let trees = self.trees.lock();
        let Some(t) = trees.get(&tree) else {
            return Ok(Vec::new());
        };
        Ok(t.range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn last_in_prefix(&self, tree: Tree, prefix: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let trees = self.trees.lock();
        Ok(trees.get(&tree).and_then(|t| {
            t.range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .last()
                .map(|(k, v)| (k.clone(), v.clone()))
        }))
    }
}
