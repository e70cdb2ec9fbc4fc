//! The writes applied to the disk store but not yet written to sled.
//!
//! An apply only records its writes here (readable at once); the next flush
//! writes everything applied since the last one in a single sled transaction
//! and then makes it durable. Per-apply transactions cost more than the rest
//! of the runner's work per shard (sled locks and rewrites the commit count
//! and the digest on every one); one transaction per flush is paid once for
//! every call the flush covers, and a key written twice in between (a shard
//! leased, then reported) is written once.
//!
//! Two layers: `pending` (applied since the last flush began) and `writing`
//! (taken by the flush in progress, dropped once sled holds it). A read looks
//! at `pending`, then `writing`, then sled, so every applied write stays
//! visible while it moves.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::api::Tree;
use super::spill::SpillRef;

/// One key's latest write.
#[derive(Clone, Debug)]
pub enum Entry {
    Put(Vec<u8>),
    /// A blob value written to a value file; sled will hold the reference.
    Spilled(SpillRef),
    Remove,
}

pub type Writes = BTreeMap<(Tree, Vec<u8>), Entry>;

#[derive(Default)]
pub struct Overlay {
    pending: Writes,
    writing: Arc<Writes>,
}

impl Overlay {
    /// Records a write; returns the pending entry it replaces.
    pub fn insert(&mut self, tree: Tree, key: Vec<u8>, entry: Entry) -> Option<Entry> {
        self.pending.insert((tree, key), entry)
    }

    /// Keys written and not yet handed to a flush.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// The latest write of `key` not yet in sled, if any.
    pub fn get(&self, tree: Tree, key: &[u8]) -> Option<Entry> {
        let at = (tree, key.to_vec());
        self.pending
            .get(&at)
            .or_else(|| self.writing.get(&at))
            .cloned()
    }

    /// The latest writes not yet in sled of the keys that start with
    /// `prefix`, in key order.
    pub fn prefix(&self, tree: Tree, prefix: &[u8]) -> Vec<(Vec<u8>, Entry)> {
        let mut merged: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
        for layer in [&*self.writing, &self.pending] {
            let from = (tree, prefix.to_vec());
            for ((_, key), entry) in layer
                .range(from..)
                .take_while(|((t, k), _)| *t == tree && k.starts_with(prefix))
            {
                merged.insert(key.clone(), entry.clone());
            }
        }
        merged.into_iter().collect()
    }

    /// Whether any write not yet in sled has a key that starts with `prefix`.
    pub fn touches(&self, tree: Tree, prefix: &[u8]) -> bool {
        [&*self.writing, &self.pending].into_iter().any(|layer| {
            layer
                .range((tree, prefix.to_vec())..)
                .next()
                .is_some_and(|((t, k), _)| *t == tree && k.starts_with(prefix))
        })
    }

    /// Hands the pending writes to a flush; they stay readable until
    /// [`Overlay::written`].
    pub fn take(&mut self) -> Arc<Writes> {
        debug_assert!(self.writing.is_empty(), "one flush at a time");
        self.writing = Arc::new(std::mem::take(&mut self.pending));
        self.writing.clone()
    }

    /// The flush's writes are in sled now.
    pub fn written(&mut self) {
        self.writing = Arc::default();
    }

    /// Forgets every write not yet in sled (a failed write reopened the
    /// store: what was not flushed is read back from it).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.writing = Arc::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(v: &str) -> Entry {
        Entry::Put(v.as_bytes().to_vec())
    }

    fn value(e: Option<Entry>) -> Option<String> {
        match e? {
            Entry::Put(v) => Some(String::from_utf8(v).unwrap()),
            Entry::Remove => Some("-".into()),
            Entry::Spilled(r) => Some(r.name),
        }
    }

    #[test]
    fn pending_writes_shadow_the_ones_being_written() {
        let mut overlay = Overlay::default();
        overlay.insert(Tree::Jobs, b"a".to_vec(), put("1"));
        overlay.insert(Tree::Jobs, b"b".to_vec(), put("1"));
        let taken = overlay.take();
        assert_eq!(taken.len(), 2);
        overlay.insert(Tree::Jobs, b"a".to_vec(), Entry::Remove);
        assert_eq!(value(overlay.get(Tree::Jobs, b"a")), Some("-".into()));
        assert_eq!(value(overlay.get(Tree::Jobs, b"b")), Some("1".into()));
        // Another tree with the same key is another entry.
        assert_eq!(value(overlay.get(Tree::Events, b"b")), None);
        overlay.written();
        assert_eq!(value(overlay.get(Tree::Jobs, b"b")), None);
        assert_eq!(value(overlay.get(Tree::Jobs, b"a")), Some("-".into()));
    }

    #[test]
    fn a_prefix_merges_both_layers_in_key_order_and_stops_at_the_tree() {
        let mut overlay = Overlay::default();
        overlay.insert(Tree::Events, b"j1/2".to_vec(), put("old"));
        overlay.insert(Tree::Events, b"j1/3".to_vec(), put("3"));
        overlay.take();
        overlay.insert(Tree::Events, b"j1/2".to_vec(), put("new"));
        overlay.insert(Tree::Events, b"j1/1".to_vec(), put("1"));
        overlay.insert(Tree::Events, b"j2/1".to_vec(), put("other job"));
        overlay.insert(Tree::Keys, b"j1/0".to_vec(), put("other tree"));
        let got: Vec<_> = overlay
            .prefix(Tree::Events, b"j1/")
            .into_iter()
            .map(|(k, e)| (String::from_utf8(k).unwrap(), value(Some(e)).unwrap()))
            .collect();
        assert_eq!(
            got,
            [("j1/1", "1"), ("j1/2", "new"), ("j1/3", "3")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert!(overlay.touches(Tree::Events, b"j2/"));
        assert!(!overlay.touches(Tree::Events, b"j3/"));
        assert!(!overlay.touches(Tree::Jobs, b""));
        overlay.clear();
        assert!(!overlay.touches(Tree::Events, b""));
    }
}
