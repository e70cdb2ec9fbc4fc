//! Both backends against the same exercise, and the sled backend's refusals
//! and recoveries.

use super::sled_store::LOCK_WAIT;
use super::{Batch, MemoryStore, SledStore, Store, Tree};

fn exercise(store: &dyn Store) {
    let mut b = Batch::default();
    b.put(Tree::Jobs, b"a/1".to_vec(), b"x".to_vec());
    b.put(Tree::Jobs, b"a/2".to_vec(), b"y".to_vec());
    b.put(Tree::Jobs, b"b/1".to_vec(), b"z".to_vec());
    b.put(Tree::Events, b"a/1".to_vec(), b"e".to_vec());
    store.commit(b).unwrap();
    let a = store.scan_prefix(Tree::Jobs, b"a/").unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[1].1, b"y");
    let mut b = Batch::default();
    b.remove(Tree::Jobs, b"a/1".to_vec());
    store.commit(b).unwrap();
    assert_eq!(store.get(Tree::Jobs, b"a/1").unwrap(), None);
    assert_eq!(
        store.get(Tree::Events, b"a/1").unwrap(),
        Some(b"e".to_vec())
    );
}

#[test]
fn memory_store_commits_and_scans() {
    exercise(&MemoryStore::new());
}

#[test]
fn sled_store_commits_scans_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        exercise(&store);
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.get(Tree::Jobs, b"a/2").unwrap(), Some(b"y".to_vec()));
}

/// A crash while sled writes a snapshot leaves a partial
/// `snap.<lsn>.generating`, which sled alone then reads as corruption.
#[test]
fn an_unfinished_snapshot_left_by_a_crash_does_not_lose_the_store() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        exercise(&store);
    }
    let partial = dir.path().join("snap.00000000FFFFFFFF.generating");
    std::fs::write(&partial, [7u8; 40]).unwrap();
    let plain = sled::Config::new().path(dir.path()).open();
    assert!(
        matches!(plain, Err(sled::Error::Corruption { .. })),
        "sled alone opens it: {:?}",
        plain.map(|_| ())
    );
    let store = SledStore::open(dir.path()).expect("opens after removing the partial file");
    assert_eq!(store.get(Tree::Jobs, b"a/2").unwrap(), Some(b"y".to_vec()));
    assert!(!partial.exists());
}

#[test]
fn a_store_in_use_is_refused_after_a_short_wait() {
    let dir = tempfile::tempdir().unwrap();
    let _first = SledStore::open(dir.path()).unwrap();
    let started = std::time::Instant::now();
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("in use by another"), "{err}");
    assert!(started.elapsed() >= LOCK_WAIT);
}

#[test]
fn foreign_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("holds no tally store"), "{err}");
}
