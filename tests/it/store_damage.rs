//! Damage anywhere in a stopped coordinator's data directory: bytes flipped
//! or overwritten at random offsets of every file, not only at the ends. Each
//! damaged copy must either open with every acknowledged write intact, or be
//! refused with one clear line; never open with acknowledged data missing (a
//! silent rollback). A refused copy is then opened with `--recover`'s mode,
//! which must start from what is intact with the job counter never going back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tally_coordinator::store::{Batch, NEXT_JOB_KEY, OnLoss, SledStore, Store, Tree};
use tally_kernels::test_rng::Rng;

/// Every tree's content, as a store should hold it.
type Content = BTreeMap<(Tree, Vec<u8>), Vec<u8>>;

/// Commits a few hundred batches of mixed sizes (some large enough to fill
/// several of sled's log segments), with removals, and returns what the store
/// acknowledged.
fn write_store(dir: &Path, rng: &mut Rng) -> Content {
    let store = SledStore::open(dir).expect("a fresh store opens");
    let mut content = read_all(&store);
    for commit in 0..300u64 {
        let mut batch = Batch::default();
        for _ in 0..rng.range(1, 6) {
            let tree = *rng.pick(&[Tree::Jobs, Tree::Shards, Tree::Blobs, Tree::Events]);
            let key = format!("k{:04}", rng.below(400u64)).into_bytes();
            if rng.chance(15) {
                batch.remove(tree, key.clone());
                content.remove(&(tree, key));
            } else {
                let len = if tree == Tree::Blobs && rng.chance(10) {
                    rng.range(20_000, 120_000)
                } else {
                    rng.range(1, 300)
                } as usize;
                let value: Vec<u8> = (0..len).map(|_| rng.below(256u64) as u8).collect();
                batch.put(tree, key.clone(), value.clone());
                content.insert((tree, key), value);
            }
        }
        let next_job = (commit + 2).to_be_bytes().to_vec();
        batch.put(Tree::Meta, NEXT_JOB_KEY, next_job.clone());
        content.insert((Tree::Meta, NEXT_JOB_KEY.to_vec()), next_job);
        store.commit(batch).expect("commits");
    }
    // The store's own counters are part of what it acknowledged.
    read_all(&store)
}

fn read_all(store: &dyn Store) -> Content {
    let mut content = Content::new();
    for tree in Tree::ALL {
        for (k, v) in store.scan_prefix(tree, b"").expect("scans") {
            content.insert((tree, k), v);
        }
    }
    content
}

fn files_of(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_of(&path));
        } else if std::fs::metadata(&path).unwrap().len() > 0 {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Flips one byte, or overwrites a short run, at a random offset of `file`.
fn damage(file: &Path, rng: &mut Rng) -> String {
    let mut bytes = std::fs::read(file).unwrap();
    let at = rng.below(bytes.len());
    let what = if rng.chance(50) {
        bytes[at] ^= 1 << rng.below(8u32);
        "flipped a bit"
    } else {
        let end = (at + rng.range(1, 64) as usize).min(bytes.len());
        for b in &mut bytes[at..end] {
            *b = rng.below(256u64) as u8;
        }
        "overwrote a run"
    };
    std::fs::write(file, &bytes).unwrap();
    format!("{what} at {at} of {}", file.display())
}

#[derive(Default, Debug)]
struct Tally {
    intact: usize,
    refused: usize,
    /// Refusals by what the line says.
    lost_commits: usize,
    unverifiable: usize,
    unreadable: usize,
    recovered: usize,
    refused_even_with_recover: usize,
    silent: Vec<String>,
}

#[test]
fn damage_anywhere_in_a_store_is_refused_or_harmless_never_a_silent_rollback() {
    let mut rng = Rng::new(0xDA3A6E);
    let work = tempfile::tempdir().unwrap();
    let original = work.path().join("original");
    let acknowledged = write_store(&original, &mut rng);
    let files = files_of(&original);
    let (values, targets): (Vec<PathBuf>, Vec<PathBuf>) = files
        .iter()
        .cloned()
        .partition(|f| f.parent().is_some_and(|p| p.ends_with("values")));
    assert!(!values.is_empty(), "large values are kept in files");
    let mut tally = Tally::default();
    const CASES: usize = 160;
    for case in 0..CASES {
        let copy = work.path().join(format!("case-{case}"));
        copy_dir(&original, &copy);
        // sled's files and the mark one by one; the value files as one more
        // choice, so that their number does not crowd out the rest.
        let pick = match rng.below(targets.len() as u64 + 1) as usize {
            i if i < targets.len() => &targets[i],
            _ => rng.pick(&values),
        };
        let file = copy.join(pick.strip_prefix(&original).unwrap());
        let how = damage(&file, &mut rng);
        match SledStore::open(&copy) {
            Ok(store) => {
                if read_all(&store) == acknowledged {
                    tally.intact += 1;
                } else {
                    tally.silent.push(how);
                }
            }
            Err(e) => {
                let line = e.to_string();
                assert!(
                    !line.contains('\n') && line.contains(&copy.display().to_string()),
                    "case {case} ({how}): the refusal must be one line naming the store: {line}"
                );
                assert!(
                    !line.contains("backtrace"),
                    "case {case} ({how}): the refusal must be in words: {line}"
                );
                tally.refused += 1;
                if line.contains("lost acknowledged data") {
                    tally.lost_commits += 1;
                } else if line.contains("cannot be checked") {
                    tally.unverifiable += 1;
                } else {
                    tally.unreadable += 1;
                }
                match SledStore::open_with(&copy, OnLoss::Recover) {
                    Ok(store) => {
                        let next_job = store
                            .get(Tree::Meta, NEXT_JOB_KEY)
                            .unwrap()
                            .map(|v| u64::from_be_bytes(v.try_into().unwrap()));
                        let acknowledged_next = acknowledged[&(Tree::Meta, NEXT_JOB_KEY.to_vec())]
                            .clone()
                            .try_into()
                            .map(u64::from_be_bytes)
                            .unwrap();
                        // Only a lost mark leaves nothing to raise the counter to.
                        if !how.contains(tally_coordinator::store::MARK_FILE) {
                            assert_eq!(
                                next_job,
                                Some(acknowledged_next),
                                "case {case} ({how}): job ids must never go back"
                            );
                        }
                        tally.recovered += 1;
                    }
                    Err(_) => tally.refused_even_with_recover += 1,
                }
            }
        }
        std::fs::remove_dir_all(&copy).unwrap();
    }
    eprintln!(
        "{CASES} damaged copies over {} files ({} of them value files): {} intact, {} refused ({} lost acknowledged data, {} mark unreadable, {} unreadable by sled; {} then recovered, {} unreadable even with --recover), {} silent rollbacks",
        files.len(),
        values.len(),
        tally.intact,
        tally.refused,
        tally.lost_commits,
        tally.unverifiable,
        tally.unreadable,
        tally.recovered,
        tally.refused_even_with_recover,
        tally.silent.len()
    );
    assert!(
        tally.silent.is_empty(),
        "damage opened with acknowledged data missing: {:#?}",
        tally.silent
    );
    assert!(tally.refused > 0, "some damage must have been found");
}
