//! Both backends against the same exercise, and the sled backend's refusals
//! and recoveries.

use super::directory::{LOCK_WAIT, open_waiting_for_lock};
use super::{Batch, MARK_FILE, MemoryStore, NEXT_JOB_KEY, OnLoss, SledStore, Store, Tree};

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
    // The last entry of a prefix is the scan's last, whatever is around it.
    let mut b = Batch::default();
    for key in [
        "j-1/0001",
        "j-1/0002",
        "j-1/0010",
        "j-10/0001",
        "j-2/0000",
        "j-1",
    ] {
        b.put(
            Tree::Events,
            key.as_bytes().to_vec(),
            key.as_bytes().to_vec(),
        );
    }
    store.commit(b).unwrap();
    for prefix in ["j-1/", "j-10/", "j-2/", "j-3/", "j-", "a/", "z"] {
        let scanned = store.scan_prefix(Tree::Events, prefix.as_bytes()).unwrap();
        let last = store
            .last_in_prefix(Tree::Events, prefix.as_bytes())
            .unwrap();
        assert_eq!(last.as_ref(), scanned.last(), "{prefix}");
    }
    assert_eq!(
        store
            .last_in_prefix(Tree::Events, b"j-1/")
            .unwrap()
            .unwrap()
            .0,
        b"j-1/0010"
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
    // sled's flusher thread may hold the lock a moment after the store is
    // dropped: wait for it (bounded), as the coordinator's own open does.
    let plain = open_waiting_for_lock(dir.path());
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
    assert!(!err.to_string().contains("damaged"), "{err}");
    assert!(started.elapsed() >= LOCK_WAIT);
}

#[test]
fn foreign_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("holds no tally store"), "{err}");
}

/// A volume's root, as a new ext filesystem leaves it, is an empty data
/// directory; the same with anything else in it is not.
#[test]
fn a_volume_root_with_only_lost_and_found_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(super::LOST_AND_FOUND)).unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    drop(store);
    SledStore::open(dir.path()).unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::create_dir(other.path().join(super::LOST_AND_FOUND)).unwrap();
    std::fs::write(other.path().join("notes.txt"), "hello").unwrap();
    assert!(SledStore::open(other.path()).is_err());
}

/// Commits `n` batches, each naming a new job and raising the job counter.
fn commit_jobs(store: &SledStore, range: std::ops::Range<u64>) {
    for seq in range {
        let mut b = Batch::default();
        b.put(Tree::Jobs, format!("job-{seq}").into_bytes(), b"r".to_vec());
        b.put(Tree::Meta, NEXT_JOB_KEY, (seq + 1).to_be_bytes().to_vec());
        store.commit(b).unwrap();
    }
}

fn copy_files(from: &std::path::Path, to: &std::path::Path, except: &str) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.file_name() != except && entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A store whose files went back to an earlier state (what sled makes of a
/// log damaged in the middle) is refused, and `--recover` starts from what is
/// intact without ever handing out a job number twice.
#[test]
fn a_store_that_went_back_is_refused_and_recovered_without_reusing_ids() {
    let dir = tempfile::tempdir().unwrap();
    let earlier = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 1..4);
    }
    copy_files(dir.path(), earlier.path(), MARK_FILE);
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 4..9);
    }
    // sled's files as they were three jobs ago, the mark as it is now.
    copy_files(earlier.path(), dir.path(), MARK_FILE);
    let err = SledStore::open(dir.path()).err().expect("refused");
    let line = err.to_string();
    assert!(line.contains("lost acknowledged data"), "{line}");
    assert!(line.contains("--recover") && !line.contains('\n'), "{line}");
    // Refusing changed nothing: it is refused again.
    assert!(SledStore::open(dir.path()).is_err());

    let store = SledStore::open_with(dir.path(), OnLoss::Recover).unwrap();
    let recovery = store.recovery().cloned().expect("a recovery");
    assert!(recovery.lost_commits() > 0, "{recovery:?}");
    assert_eq!(recovery.next_job, 9);
    assert_eq!(
        store.get(Tree::Jobs, b"job-3").unwrap(),
        Some(b"r".to_vec())
    );
    assert_eq!(store.get(Tree::Jobs, b"job-5").unwrap(), None);
    let counter = store.get(Tree::Meta, NEXT_JOB_KEY).unwrap().unwrap();
    assert_eq!(counter, 9u64.to_be_bytes());
    commit_jobs(&store, 9..10);
    drop(store);
    // Once recovered, the store and its mark agree again.
    let store = SledStore::open(dir.path()).unwrap();
    assert!(store.recovery().is_none());
    assert_eq!(
        store.get(Tree::Jobs, b"job-9").unwrap(),
        Some(b"r".to_vec())
    );
}

#[test]
fn a_store_whose_commit_mark_is_missing_cannot_be_checked_and_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 1..3);
    }
    std::fs::remove_file(dir.path().join(MARK_FILE)).unwrap();
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("mark file is missing"), "{err}");
    let store = SledStore::open_with(dir.path(), OnLoss::Recover).unwrap();
    assert_eq!(store.recovery().map(|r| r.next_job), Some(3));
    assert_eq!(
        store.get(Tree::Jobs, b"job-2").unwrap(),
        Some(b"r".to_vec())
    );
}

/// A store written before commit marks existed has no count and no mark: it
/// opens, and is marked from then on.
#[test]
fn a_store_without_a_count_or_a_mark_is_marked_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 1..3);
    }
    // What an older release left: its own keys, no count, no mark.
    {
        let db = open_waiting_for_lock(dir.path()).unwrap();
        db.open_tree("meta").unwrap().remove(b"commits").unwrap();
        db.flush().unwrap();
    }
    std::fs::remove_file(dir.path().join(MARK_FILE)).unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        assert!(store.recovery().is_none());
        commit_jobs(&store, 3..4);
    }
    assert!(dir.path().join(MARK_FILE).exists());
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get(Tree::Jobs, b"job-3").unwrap(),
        Some(b"r".to_vec())
    );
}

/// sled can skip a damaged message in the middle of its log and still hold the
/// latest commit: an old entry is gone but the commit count is whole. The
/// content digest tells, and the store is refused.
#[test]
fn a_store_that_lost_an_old_entry_but_kept_its_last_commit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 1..6);
    }
    // What such damage leaves: one early entry missing, nothing else changed.
    {
        let db = open_waiting_for_lock(dir.path()).unwrap();
        db.open_tree("jobs").unwrap().remove(b"job-2").unwrap();
        db.flush().unwrap();
    }
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(
        err.to_string().contains("no longer match the digest"),
        "{err}"
    );
    let store = SledStore::open_with(dir.path(), OnLoss::Recover).unwrap();
    assert!(store.recovery().is_some());
    assert_eq!(
        store.get(Tree::Jobs, b"job-3").unwrap(),
        Some(b"r".to_vec())
    );
    drop(store);
    // Recovered, the digest is that of what is there: it opens plainly again.
    let store = SledStore::open(dir.path()).unwrap();
    assert!(store.recovery().is_none());
}

/// Large blob values live in pack files beside sled: the store reads them
/// back, deletes a pack once nothing references it, deletes files a crash
/// left unreferenced, and refuses a store whose file was damaged or lost
/// (`--recover` drops the entry).
#[test]
fn large_blob_values_live_in_files_that_go_with_their_entries() {
    use super::spill::{SPILL_THRESHOLD, VALUES_DIR};
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join(VALUES_DIR);
    let files = || std::fs::read_dir(&values).unwrap().count();
    let big = |fill: u8| vec![fill; SPILL_THRESHOLD + 1];
    {
        let store = SledStore::open(dir.path()).unwrap();
        let mut b = Batch::default();
        b.put(Tree::Blobs, b"j/1".to_vec(), big(1));
        b.put(Tree::Blobs, b"j/2".to_vec(), big(2));
        b.put(Tree::Blobs, b"j/3".to_vec(), b"small".to_vec());
        store.commit(b).unwrap();
        assert_eq!(files(), 1, "one pack for the commit");
        assert_eq!(store.get(Tree::Blobs, b"j/1").unwrap(), Some(big(1)));
        let all = store.scan_prefix(Tree::Blobs, b"j/").unwrap();
        let keys: Vec<&[u8]> = all.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [b"j/1".as_slice(), b"j/2", b"j/3"]);
        assert_eq!(all[1].1, big(2));
        // Replaced by a small value, removed: the pack goes; the new value
        // is in a pack of its own.
        let mut b = Batch::default();
        b.put(Tree::Blobs, b"j/1".to_vec(), b"now small".to_vec());
        b.remove(Tree::Blobs, b"j/2".to_vec());
        b.put(Tree::Blobs, b"j/4".to_vec(), big(4));
        store.commit(b).unwrap();
        assert_eq!(files(), 1);
        assert_eq!(
            store.get(Tree::Blobs, b"j/1").unwrap(),
            Some(b"now small".to_vec())
        );
        assert_eq!(store.get(Tree::Blobs, b"j/2").unwrap(), None);
    }
    // A file no entry references (a crash between writing it and committing).
    std::fs::write(values.join("99-0"), big(9)).unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(files(), 1, "the unreferenced file is swept");
        assert_eq!(store.get(Tree::Blobs, b"j/4").unwrap(), Some(big(4)));
    }
    // The referenced file damaged: refused with one line; recovered without it.
    let file = std::fs::read_dir(&values)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let refused = SledStore::open(dir.path())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("value files are missing or damaged"),
        "{refused}"
    );
    assert!(refused.contains("--recover"), "{refused}");
    let store = SledStore::open_with(dir.path(), OnLoss::Recover).unwrap();
    assert!(store.recovery().is_some());
    assert_eq!(store.get(Tree::Blobs, b"j/4").unwrap(), None);
    assert_eq!(
        store.get(Tree::Blobs, b"j/3").unwrap(),
        Some(b"small".to_vec())
    );
    assert_eq!(files(), 0);
    drop(store);
    SledStore::open(dir.path()).expect("the recovered store opens plainly");
}

#[test]
fn the_content_digest_summed_in_key_ranges_equals_the_plain_sum() {
    use super::integrity::{content_digest, digested, entry_hash};
    let dir = tempfile::tempdir().unwrap();
    let db = open_waiting_for_lock(dir.path()).unwrap();
    let trees: Vec<sled::Tree> = Tree::ALL
        .iter()
        .map(|t| db.open_tree(format!("{t:?}")).unwrap())
        .collect();
    let index = |tree: Tree| Tree::ALL.iter().position(|t| *t == tree).unwrap();
    // Jobs of very different sizes, keys before and after every job id, and
    // trees not keyed by job.
    for job in 1..=97u32 {
        let id = format!("job-{job:06}");
        trees[index(Tree::Jobs)].insert(&id, id.as_bytes()).unwrap();
        for shard in 0..(job % 13) * 7 {
            let key = format!("{id}/00000001/{shard:08}");
            trees[index(Tree::Shards)]
                .insert(key.as_bytes(), &[shard as u8; 5])
                .unwrap();
        }
        trees[index(Tree::Events)]
            .insert(format!("{id}/000000000000"), b"e")
            .unwrap();
    }
    trees[index(Tree::Shards)]
        .insert("a-key-before-every-job", b"x")
        .unwrap();
    trees[index(Tree::Shards)]
        .insert("zzz-after-every-job", b"y")
        .unwrap();
    trees[index(Tree::Keys)]
        .insert("idempotency", b"job-000003")
        .unwrap();
    trees[index(Tree::Meta)]
        .insert(super::integrity::COMMITS_KEY, &7u64.to_be_bytes())
        .unwrap();
    let mut plain = 0u64;
    let mut entries = 0;
    for (i, tree) in trees.iter().enumerate() {
        for entry in tree.iter() {
            let (key, value) = entry.unwrap();
            if digested(i, &key) {
                plain = plain.wrapping_add(entry_hash(i, &key, &value));
                entries += 1;
            }
        }
    }
    assert!(entries > 3_000, "{entries}");
    assert_eq!(content_digest(&trees, dir.path()).unwrap().current, plain);
    // One entry changed: the sum tells.
    trees[index(Tree::Shards)]
        .insert("job-000050/00000001/00000003", b"z")
        .unwrap();
    assert_ne!(content_digest(&trees, dir.path()).unwrap().current, plain);
}

/// A store written before the XXH3 digest holds only its FNV-1a digest: it
/// is checked against that once, its next commit writes the new digest in
/// its place, and a damaged legacy store is refused all the same.
#[test]
fn a_store_with_the_legacy_digest_is_checked_against_it_and_moves_on() {
    use super::integrity::{DIGEST_KEY, LEGACY_DIGEST_KEY, digested, legacy_entry_hash};
    let legacy_store = |damage: bool| {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SledStore::open(dir.path()).unwrap();
            commit_jobs(&store, 1..6);
        }
        let db = open_waiting_for_lock(dir.path()).unwrap();
        let names: Vec<&str> = Tree::ALL
            .iter()
            .map(|t| t.name())
            .chain(["spilled"])
            .collect();
        let mut sum = 0u64;
        for (i, name) in names.iter().enumerate() {
            for entry in db.open_tree(name).unwrap().iter() {
                let (key, value) = entry.unwrap();
                if digested(i, &key) {
                    sum = sum.wrapping_add(legacy_entry_hash(i, &key, &value));
                }
            }
        }
        let meta = db.open_tree("meta").unwrap();
        meta.remove(DIGEST_KEY).unwrap();
        meta.insert(LEGACY_DIGEST_KEY, &sum.to_be_bytes()).unwrap();
        if damage {
            db.open_tree("jobs").unwrap().remove(b"job-2").unwrap();
        }
        db.flush().unwrap();
        dir
    };
    let err = SledStore::open(legacy_store(true).path())
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("no longer match the digest"),
        "{err}"
    );

    let dir = legacy_store(false);
    {
        let store = SledStore::open(dir.path()).unwrap();
        assert!(store.recovery().is_none());
        commit_jobs(&store, 6..7);
    }
    {
        let db = open_waiting_for_lock(dir.path()).unwrap();
        let meta = db.open_tree("meta").unwrap();
        assert!(meta.get(LEGACY_DIGEST_KEY).unwrap().is_none());
        assert!(meta.get(DIGEST_KEY).unwrap().is_some());
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get(Tree::Jobs, b"job-6").unwrap(),
        Some(b"r".to_vec())
    );
}

/// Applied batches are readable before the flush that writes them to sled
/// (gets, scans and the last entry of a prefix, removals included), and a
/// store dropped before that flush comes back with none of them: the
/// batches of one flush reach the disk together or not at all.
#[test]
fn applied_batches_are_read_before_their_flush_and_lost_together_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = |store: &SledStore| -> Vec<String> {
        store
            .scan_prefix(Tree::Events, b"j/")
            .unwrap()
            .into_iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8(k).unwrap(),
                    String::from_utf8(v).unwrap()
                )
            })
            .collect()
    };
    {
        let store = SledStore::open(dir.path()).unwrap();
        let mut b = Batch::default();
        b.put(Tree::Events, b"j/1".to_vec(), b"a".to_vec());
        b.put(Tree::Events, b"j/2".to_vec(), b"b".to_vec());
        store.commit(b).unwrap();
        let flushed = store.applied();
        let mut b = Batch::default();
        b.put(Tree::Events, b"j/3".to_vec(), b"c".to_vec());
        b.put(Tree::Jobs, b"j".to_vec(), b"running".to_vec());
        store.apply(b).unwrap();
        let mut b = Batch::default();
        b.remove(Tree::Events, b"j/3".to_vec());
        b.remove(Tree::Events, b"j/2".to_vec());
        b.put(Tree::Events, b"j/1".to_vec(), b"a2".to_vec());
        store.apply(b).unwrap();
        assert_eq!(events(&store), ["j/1=a2"]);
        assert_eq!(
            store.last_in_prefix(Tree::Events, b"j/").unwrap(),
            Some((b"j/1".to_vec(), b"a2".to_vec()))
        );
        assert_eq!(store.get(Tree::Events, b"j/2").unwrap(), None);
        assert_eq!(
            store.get(Tree::Jobs, b"j").unwrap(),
            Some(b"running".to_vec())
        );
        assert_eq!(store.applied(), flushed + 2);
        // Dropped without a flush: a crash before the answers.
    }
    {
        let store = SledStore::open(dir.path()).unwrap();
        assert_eq!(events(&store), ["j/1=a", "j/2=b"]);
        assert_eq!(store.get(Tree::Jobs, b"j").unwrap(), None);
        let mut b = Batch::default();
        b.put(Tree::Events, b"j/3".to_vec(), b"c".to_vec());
        store.apply(b).unwrap();
        let mut b = Batch::default();
        b.remove(Tree::Events, b"j/1".to_vec());
        store.apply(b).unwrap();
        store.flush().unwrap();
        assert_eq!(events(&store), ["j/2=b", "j/3=c"]);
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(events(&store), ["j/2=b", "j/3=c"]);
}

/// A large blob written twice before a flush: sled only ever references
/// the second value, and the first one's reference to the pack is released
/// by the flush (the pack goes with the second's).
#[test]
fn a_value_replaced_before_its_flush_releases_its_pack_after_it() {
    use super::spill::{SPILL_THRESHOLD, VALUES_DIR};
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join(VALUES_DIR);
    let names = || value_files(&values);
    let big = |fill: u8| vec![fill; SPILL_THRESHOLD + 1];
    let store = SledStore::open(dir.path()).unwrap();
    for fill in [1, 2] {
        let mut b = Batch::default();
        b.put(Tree::Blobs, b"j/out".to_vec(), big(fill));
        store.apply(b).unwrap();
    }
    let pack = names();
    assert_eq!(pack.len(), 1, "both values in one pack before their flush");
    assert_eq!(store.get(Tree::Blobs, b"j/out").unwrap(), Some(big(2)));
    store.flush().unwrap();
    assert_eq!(names(), pack, "the second value keeps the pack");
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.get(Tree::Blobs, b"j/out").unwrap(), Some(big(2)));
    let mut b = Batch::default();
    b.put(Tree::Blobs, b"j/out".to_vec(), big(3));
    store.commit(b).unwrap();
    let now = names();
    assert_eq!(now.len(), 1);
    assert_ne!(now, pack, "the old pack went with its last value");
    assert_eq!(store.get(Tree::Blobs, b"j/out").unwrap(), Some(big(3)));
}

/// The names of the files in a store's values directory, sorted.
fn value_files(values: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(values)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

/// A large value of `len` bytes that differs with `seed`.
fn large_value(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) as u8)
        .collect()
}

/// Staged outputs of 5 to 60 KiB applied one batch each between two
/// flushes go into one pack, which the flush fsyncs once (and the
/// directory once), not once per value; they read back as written after the
/// store is opened again.
#[test]
fn values_applied_between_two_flushes_share_one_pack_synced_once() {
    use super::spill::VALUES_DIR;
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join(VALUES_DIR);
    let written: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
        .map(|i| {
            let len = 5 * 1024 + (i as usize * 7_919) % (55 * 1024);
            (format!("j/{i:04}").into_bytes(), large_value(i, len))
        })
        .collect();
    {
        let store = SledStore::open(dir.path()).unwrap();
        let synced = store.value_fsyncs();
        for (key, value) in &written[..200] {
            let mut b = Batch::default();
            b.put(Tree::Blobs, key.clone(), value.clone());
            store.apply(b).unwrap();
        }
        store.flush().unwrap();
        assert_eq!(value_files(&values).len(), 1);
        assert_eq!(store.value_fsyncs() - synced, 2, "one pack, one directory");
        // The next flush's values go to a pack of their own.
        for (key, value) in &written[200..] {
            let mut b = Batch::default();
            b.put(Tree::Blobs, key.clone(), value.clone());
            store.apply(b).unwrap();
        }
        store.flush().unwrap();
        assert_eq!(value_files(&values).len(), 2);
        assert_eq!(store.value_fsyncs() - synced, 4);
    }
    let store = SledStore::open(dir.path()).unwrap();
    for (key, value) in &written {
        let read = store.get(Tree::Blobs, key).unwrap();
        assert!(
            read.as_ref() == Some(value),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    assert_eq!(store.scan_prefix(Tree::Blobs, b"j/").unwrap(), written);
}

/// A pack stays while any of its values is referenced, across a reopen
/// (which counts the references anew), and goes with the flush that drops
/// its last one.
#[test]
fn a_pack_stays_while_any_of_its_values_is_referenced() {
    use super::spill::VALUES_DIR;
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join(VALUES_DIR);
    let value = |i: u32| large_value(i, 7_000 + i as usize);
    let key = |i: u32| format!("j/{i}").into_bytes();
    let first_pack = {
        let store = SledStore::open(dir.path()).unwrap();
        let mut b = Batch::default();
        for i in 0..6 {
            b.put(Tree::Blobs, key(i), value(i));
        }
        store.commit(b).unwrap();
        let first_pack = value_files(&values);
        assert_eq!(first_pack.len(), 1);
        // Removed, made small, replaced by a large value (in a new pack).
        let mut b = Batch::default();
        b.remove(Tree::Blobs, key(0));
        b.put(Tree::Blobs, key(1), b"small".to_vec());
        b.put(Tree::Blobs, key(2), value(20));
        store.commit(b).unwrap();
        let packs = value_files(&values);
        assert_eq!(packs.len(), 2);
        assert!(packs.contains(&first_pack[0]));
        for i in 3..6 {
            assert_eq!(store.get(Tree::Blobs, &key(i)).unwrap(), Some(value(i)));
        }
        first_pack
    };
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(value_files(&values).len(), 2);
    let mut b = Batch::default();
    b.remove(Tree::Blobs, key(3));
    b.remove(Tree::Blobs, key(4));
    store.commit(b).unwrap();
    assert!(value_files(&values).contains(&first_pack[0]));
    assert_eq!(store.get(Tree::Blobs, &key(5)).unwrap(), Some(value(5)));
    let mut b = Batch::default();
    b.put(Tree::Blobs, key(5), b"small too".to_vec());
    store.commit(b).unwrap();
    let left = value_files(&values);
    assert_eq!(left.len(), 1);
    assert!(
        !left.contains(&first_pack[0]),
        "the last value took the pack"
    );
    assert_eq!(store.get(Tree::Blobs, &key(2)).unwrap(), Some(value(20)));
    assert_eq!(
        store.get(Tree::Blobs, &key(1)).unwrap(),
        Some(b"small".to_vec())
    );
}

/// A store with five values of 8,000 bytes in one pack, in key order, and
/// the pack's path.
fn store_with_one_pack(dir: &std::path::Path) -> std::path::PathBuf {
    use super::spill::VALUES_DIR;
    let store = SledStore::open(dir).unwrap();
    let mut b = Batch::default();
    for i in 0..5 {
        b.put(
            Tree::Blobs,
            format!("j/{i}").into_bytes(),
            large_value(i, 8_000),
        );
    }
    b.put(Tree::Jobs, b"j".to_vec(), b"running".to_vec());
    store.commit(b).unwrap();
    let packs = value_files(&dir.join(VALUES_DIR));
    assert_eq!(packs.len(), 1);
    dir.join(VALUES_DIR).join(&packs[0])
}

/// A changed byte inside one packed value, or a pack cut short, is found by
/// the check on open and refused; `--recover` drops only the values lost.
#[test]
fn a_damaged_or_cut_pack_is_refused_and_recovered_without_its_lost_values() {
    let read =
        |store: &SledStore, i: u32| store.get(Tree::Blobs, format!("j/{i}").as_bytes()).unwrap();
    for (damage, lost) in [("a byte changed", &[2][..]), ("cut short", &[2, 3, 4])] {
        let dir = tempfile::tempdir().unwrap();
        let pack = store_with_one_pack(dir.path());
        let mut bytes = std::fs::read(&pack).unwrap();
        if lost.len() == 1 {
            bytes[2 * 8_000 + 1_234] ^= 0x10;
        } else {
            bytes.truncate(2 * 8_000 + 10);
        }
        std::fs::write(&pack, bytes).unwrap();
        let refused = SledStore::open(dir.path()).err().expect(damage).to_string();
        assert!(
            refused.contains("missing or damaged"),
            "{damage}: {refused}"
        );
        assert!(refused.contains("--recover"), "{damage}: {refused}");
        assert!(!refused.contains('\n'), "{damage}: {refused}");
        let store = SledStore::open_with(dir.path(), OnLoss::Recover).unwrap();
        assert!(store.recovery().is_some(), "{damage}");
        for i in 0..5 {
            let expected = (!lost.contains(&i)).then(|| large_value(i, 8_000));
            assert_eq!(read(&store, i), expected, "{damage}: value {i}");
        }
        assert_eq!(
            store.get(Tree::Jobs, b"j").unwrap(),
            Some(b"running".to_vec())
        );
        assert!(pack.exists(), "{damage}: the values left keep the pack");
        drop(store);
        let store = SledStore::open(dir.path()).expect("the recovered store opens plainly");
        assert_eq!(read(&store, 0), Some(large_value(0, 8_000)), "{damage}");
    }
}

/// A store of a release before packs references whole files (FNV-1a with no
/// mark, XXH3 with `x`): they read, a later commit packs beside them, and
/// each goes with its one reference.
#[test]
fn values_under_references_of_older_releases_read_and_go_with_their_entries() {
    use super::integrity::{DIGEST_KEY, content_digest};
    use super::spill::VALUES_DIR;
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join(VALUES_DIR);
    {
        let store = SledStore::open(dir.path()).unwrap();
        commit_jobs(&store, 1..3);
    }
    let fnv_value = large_value(1, 9_000);
    let xxh3_value = large_value(2, 12_345);
    {
        // What the older release wrote: a file per value, sled's reference
        // to it, and the content digest over them.
        let db = open_waiting_for_lock(dir.path()).unwrap();
        let trees: Vec<sled::Tree> = Tree::ALL
            .iter()
            .map(|t| t.name())
            .chain(["spilled"])
            .map(|name| db.open_tree(name).unwrap())
            .collect();
        let spilled = trees.last().unwrap();
        for (key, name, mark, value, digest) in [
            (
                "old/fnv",
                "1-0",
                &b""[..],
                &fnv_value,
                tally_wire::digest::fnv1a64(&fnv_value),
            ),
            (
                "old/xxh3",
                "2-0",
                b"x",
                &xxh3_value,
                xxhash_rust::xxh3::xxh3_64(&xxh3_value),
            ),
        ] {
            std::fs::write(values.join(name), value).unwrap();
            let mut reference = (value.len() as u64).to_be_bytes().to_vec();
            reference.extend_from_slice(&digest.to_be_bytes());
            reference.extend_from_slice(mark);
            reference.extend_from_slice(name.as_bytes());
            spilled.insert(key, reference).unwrap();
        }
        let digest = content_digest(&trees, dir.path()).unwrap().current;
        trees[0].insert(DIGEST_KEY, &digest.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert!(store.recovery().is_none());
    assert_eq!(store.get(Tree::Blobs, b"old/fnv").unwrap(), Some(fnv_value));
    assert_eq!(
        store.get(Tree::Blobs, b"old/xxh3").unwrap(),
        Some(xxh3_value.clone())
    );
    let mut b = Batch::default();
    b.put(Tree::Blobs, b"old/fnv".to_vec(), large_value(3, 5_000));
    store.commit(b).unwrap();
    let names = value_files(&values);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!names.contains(&"1-0".to_string()), "{names:?}");
    assert!(names.contains(&"2-0".to_string()), "{names:?}");
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        store.get(Tree::Blobs, b"old/fnv").unwrap(),
        Some(large_value(3, 5_000))
    );
    assert_eq!(
        store.get(Tree::Blobs, b"old/xxh3").unwrap(),
        Some(xxh3_value)
    );
}

/// Many writes applied before a flush go to sled in whole batches as they
/// pile up (the memory of one transaction is bounded); the store they leave
/// reopens with its digest intact and every batch in it.
#[test]
fn many_writes_before_a_flush_go_to_sled_in_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let keys = |store: &SledStore| store.scan_prefix(Tree::Shards, b"j/").unwrap().len();
    {
        let store = SledStore::open(dir.path()).unwrap();
        for part in 0..3u32 {
            let mut b = Batch::default();
            for i in 0..10_000u32 {
                let key = format!("j/{part}/{i:05}");
                b.put(Tree::Shards, key.into_bytes(), part.to_be_bytes().to_vec());
            }
            b.put(Tree::Jobs, b"j".to_vec(), part.to_be_bytes().to_vec());
            store.apply(b).unwrap();
            assert_eq!(keys(&store), 10_000 * (part as usize + 1));
        }
        store.flush().unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(keys(&store), 30_000);
    assert_eq!(
        store.get(Tree::Jobs, b"j").unwrap(),
        Some(2u32.to_be_bytes().to_vec())
    );
}
