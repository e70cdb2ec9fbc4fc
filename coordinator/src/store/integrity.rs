//! What tells a store that lost acknowledged data from one that did not: the
//! commit count and content digest every commit writes, checked on open
//! against the mark file and the entries themselves; what `--recover` then
//! accepts.

use std::ops::Bound;
use std::path::Path;

use crate::error::{CoordinatorError, Result};

use super::api::{Batch, NEXT_JOB_KEY, Tree};
use super::faults::fault;
use super::mark::{MARK_FILE, Mark, MarkFile, MarkRead};

/// The number of commits, written by every commit in its own transaction.
pub(super) const COMMITS_KEY: &[u8] = b"commits";

/// The content digest: the sum (mod 2^64) of [`entry_hash`] over every entry
/// but these keys, kept by every commit in its own transaction. sled skips a
/// damaged message and keeps reading its log, so a store can lose an old
/// entry and still hold the latest commit count; the digest, recomputed on
/// open, tells.
pub(super) const DIGEST_KEY: &[u8] = b"digest-xxh3";

/// The digest of stores written before [`DIGEST_KEY`]: the same sum over
/// FNV-1a (byte at a time, a quarter of a restart's time on a large store).
/// Such a store is checked against it once, and its next commit replaces it.
pub(super) const LEGACY_DIGEST_KEY: &[u8] = b"digest";

/// The content digest summed over a store's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Digests {
    /// Over [`entry_hash`]: what the next commit moves.
    pub(super) current: u64,
    /// Over [`legacy_entry_hash`], for a store that holds only the legacy digest.
    pub(super) legacy: Option<u64>,
}

/// The mark file and what it last recorded.
pub(super) struct Marked {
    pub(super) file: MarkFile,
    /// The last mark written: every commit up to it is acknowledged.
    pub(super) current: Mark,
    /// The mark of the last batch applied (at or past `current`): the next
    /// flush writes it.
    pub(super) applied: Mark,
    /// The content digest after the last batch applied (set once the store
    /// is read).
    pub(super) digest: u64,
    /// The files of the value references the batches applied dropped (a file
    /// once per reference), with the commit that dropped them: released once
    /// that commit is flushed, and a file goes with its last reference.
    pub(super) unreferenced: Vec<(u64, String)>,
    /// Whether the store still holds [`LEGACY_DIGEST_KEY`]: the next commit
    /// removes it.
    pub(super) legacy_digest: bool,
}

impl Marked {
    pub(super) fn new(file: MarkFile, current: Mark) -> Marked {
        Marked {
            file,
            current,
            applied: current,
            digest: 0,
            unreferenced: Vec::new(),
            legacy_digest: false,
        }
    }
}

/// What `--recover` accepted when it opened a store that had lost
/// acknowledged commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Commits acknowledged before the damage, per the mark (0 if the mark
    /// itself was lost).
    pub acknowledged: u64,
    /// Commits the store still holds.
    pub intact: u64,
    /// The next job number: never below one already handed out.
    pub next_job: u64,
}

impl Recovery {
    pub fn lost_commits(&self) -> u64 {
        self.acknowledged.saturating_sub(self.intact)
    }
}

/// How to treat a store that has lost acknowledged commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnLoss {
    /// Refuse to open it (the default).
    #[default]
    Refuse,
    /// Open it with what is intact (`tally coordinator --recover`).
    Recover,
}

/// The job counter a batch writes, or 0.
pub(super) fn written_job_counter(batch: &Batch) -> u64 {
    batch
        .writes
        .iter()
        .filter(|w| w.tree == Tree::Meta && w.key == NEXT_JOB_KEY)
        .filter_map(|w| w.value.as_deref()?.try_into().ok())
        .map(u64::from_be_bytes)
        .max()
        .unwrap_or(0)
}

/// The commit count and job counter the store itself holds.
pub(super) fn stored_mark(meta: &sled::Tree, dir: &Path) -> Result<Mark> {
    let counter = |key: &[u8]| -> Result<u64> {
        match meta.get(key)? {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    CoordinatorError::Store(format!(
                        "the store in {} has a malformed {} counter",
                        dir.display(),
                        String::from_utf8_lossy(key)
                    ))
                }),
        }
    };
    Ok(Mark {
        commits: counter(COMMITS_KEY)?,
        next_job: counter(NEXT_JOB_KEY)?,
    })
}

/// Whether the entries the store holds still sum to the digest its last
/// commit wrote. A store without a digest has never been counted (a fresh
/// store, or one written before digests existed) and passes; one with a
/// commit count but no digest has lost it.
pub(super) fn content_intact(
    meta: &sled::Tree,
    dir: &Path,
    stored: Mark,
    digests: Digests,
) -> Result<bool> {
    let read = |key: &[u8]| -> Result<Option<Option<u64>>> {
        let value = meta.get(key).map_err(|e| fault(dir, &e))?;
        Ok(value.map(|v| <[u8; 8]>::try_from(v.as_ref()).ok().map(u64::from_be_bytes)))
    };
    if let Some(written) = read(DIGEST_KEY)? {
        return Ok(written == Some(digests.current));
    }
    match read(LEGACY_DIGEST_KEY)? {
        Some(written) => Ok(written.is_some() && written == digests.legacy),
        None => Ok(stored.commits == 0),
    }
}

/// Checks the store's own count against the mark file. A fresh store, or one
/// written before marks existed (no count, no mark), gets a new mark; a store
/// behind its mark, or one whose mark is missing or unreadable, has lost
/// acknowledged data and is refused, or with [`OnLoss::Recover`] accepted as
/// it is, its counters raised to the mark's.
pub(super) fn reconcile_mark(
    dir: &Path,
    fresh: bool,
    stored: Mark,
    on_loss: OnLoss,
) -> Result<(Marked, Option<Recovery>)> {
    let keep = |current: Mark| -> Result<(Marked, Option<Recovery>)> {
        let file = MarkFile::open(dir)?;
        Ok((Marked::new(file, current), None))
    };
    let read = if fresh {
        MarkRead::Missing
    } else {
        MarkFile::read(dir)?
    };
    let lost = match read {
        MarkRead::Missing if fresh || stored.commits == 0 => {
            let file = MarkFile::create(dir, stored)?;
            return Ok((Marked::new(file, stored), None));
        }
        MarkRead::Found(mark) if stored.commits >= mark.commits => {
            return keep(Mark {
                commits: stored.commits,
                next_job: stored.next_job.max(mark.next_job),
            });
        }
        MarkRead::Found(mark) => Loss::Behind(mark),
        MarkRead::Missing => Loss::Unverifiable("its commit mark file is missing"),
        MarkRead::Damaged => Loss::Unverifiable("its commit mark file is damaged"),
    };
    if on_loss == OnLoss::Refuse {
        return Err(CoordinatorError::Store(lost.refusal(dir, stored)));
    }
    let acknowledged = match lost {
        Loss::Behind(mark) => mark,
        Loss::Unverifiable(_) | Loss::Changed => Mark::default(),
    };
    let current = Mark {
        commits: stored.commits.max(acknowledged.commits),
        next_job: stored.next_job.max(acknowledged.next_job),
    };
    tracing::warn!(dir = %dir.display(), "{}; recovering from what is intact (--recover)", lost.finding(dir, stored));
    let file = MarkFile::create(dir, current)?;
    let recovery = Recovery {
        acknowledged: acknowledged.commits,
        intact: stored.commits,
        next_job: current.next_job.max(1),
    };
    Ok((Marked::new(file, current), Some(recovery)))
}

/// Why a store cannot be trusted as it is.
pub(super) enum Loss {
    /// The store holds fewer commits than were acknowledged.
    Behind(Mark),
    /// Whether commits were lost cannot be told.
    Unverifiable(&'static str),
    /// The entries no longer sum to the digest of the last commit: one was
    /// lost or changed, though the latest commit is there.
    Changed,
}

impl Loss {
    /// The refusal of a start without `--recover`.
    pub(super) fn refusal(&self, dir: &Path, stored: Mark) -> String {
        format!(
            "{}. Refusing to start; `tally coordinator --recover` continues from what is \
             intact, and jobs may go back to an earlier state",
            self.finding(dir, stored)
        )
    }

    /// What was found, for a refusal or a recovery alike.
    pub(super) fn finding(&self, dir: &Path, stored: Mark) -> String {
        let what = match self {
            Loss::Behind(mark) => format!(
                "has lost acknowledged data: it holds {} commits, but {} were acknowledged \
                 ({} lost; a file in it is damaged)",
                stored.commits,
                mark.commits,
                mark.commits - stored.commits
            ),
            Loss::Unverifiable(why) => {
                format!("cannot be checked for lost data: {why} ({MARK_FILE})")
            }
            Loss::Changed => "has lost acknowledged data: its entries no longer match the \
                 digest of its last commit (an entry was lost or changed; a file in it is damaged)"
                .to_string(),
        };
        format!("the store in {} {what}", dir.display())
    }
}

pub(super) fn tree_index(tree: Tree) -> usize {
    Tree::ALL.iter().position(|t| *t == tree).unwrap()
}

/// Whether an entry of the tree at `tree` (an index into [`Handles::trees`])
/// counts in the content digest: all but the commit count and the digest
/// itself, which every commit rewrites.
pub(super) fn digested(tree: usize, key: &[u8]) -> bool {
    !(tree == tree_index(Tree::Meta)
        && (key == COMMITS_KEY || key == DIGEST_KEY || key == LEGACY_DIGEST_KEY))
}

/// One entry's share of the content digest: XXH3 (64 bits) of its tree's
/// index, key length, key and value. (A spilled value counts through its
/// reference, which holds the file's digest.)
pub(super) fn entry_hash(tree: usize, key: &[u8], value: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&[tree as u8]);
    hasher.update(&(key.len() as u32).to_le_bytes());
    hasher.update(key);
    hasher.update(value);
    hasher.digest()
}

/// An entry's share of the legacy digest: FNV-1a of the same bytes.
pub(super) fn legacy_entry_hash(tree: usize, key: &[u8], value: &[u8]) -> u64 {
    let tree = [tree as u8];
    let key_len = (key.len() as u32).to_le_bytes();
    tally_wire::digest::fnv1a64_parts(&[&tree, &key_len, key, value])
}

/// The content digest recomputed from every entry the store holds, summed
/// over the machine's cores: the trees are cut into key ranges at job ids
/// (every tree but `Meta` and `Keys` is keyed by job id first) and the ranges
/// summed by as many threads. The sum does not depend on the cut.
/// A store that holds only the legacy digest also gets that summed.
pub(super) fn content_digest(trees: &[sled::Tree], dir: &Path) -> Result<Digests> {
    let meta = &trees[tree_index(Tree::Meta)];
    let has = |key: &[u8]| meta.contains_key(key).map_err(|e| fault(dir, &e));
    let legacy = !has(DIGEST_KEY)? && has(LEGACY_DIGEST_KEY)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let ranges = key_ranges(trees, dir, threads * 4)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let sum_ranges = || -> Result<(u64, u64)> {
        let (mut current, mut old) = (0u64, 0u64);
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some((tree, range)) = ranges.get(i) else {
                return Ok((current, old));
            };
            for entry in trees[*tree].range::<Vec<u8>, _>(range.clone()) {
                let (key, value) = entry.map_err(|e| fault(dir, &e))?;
                if digested(*tree, &key) {
                    current = current.wrapping_add(entry_hash(*tree, &key, &value));
                    if legacy {
                        old = old.wrapping_add(legacy_entry_hash(*tree, &key, &value));
                    }
                }
            }
        }
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(sum_ranges)).collect();
        let (mut current, mut old) = sum_ranges()?;
        for helper in helpers {
            let (c, o) = helper.join().map_err(|_| {
                CoordinatorError::Internal("a store check thread panicked".into())
            })??;
            current = current.wrapping_add(c);
            old = old.wrapping_add(o);
        }
        Ok(Digests {
            current,
            legacy: legacy.then_some(old),
        })
    })
}

type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Every tree cut into at most `pieces` key ranges at job ids spread evenly
/// over the jobs (one range per tree when there are too few jobs to cut at).
fn key_ranges(trees: &[sled::Tree], dir: &Path, pieces: usize) -> Result<Vec<(usize, KeyRange)>> {
    let jobs = &trees[tree_index(Tree::Jobs)];
    let job_keys: Vec<sled::IVec> = jobs
        .iter()
        .keys()
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| fault(dir, &e))?;
    let mut cuts: Vec<Vec<u8>> = (1..pieces)
        .filter_map(|i| job_keys.get(i * job_keys.len() / pieces))
        .map(|k| k.to_vec())
        .collect();
    cuts.dedup();
    let mut ranges = Vec::new();
    for tree in 0..trees.len() {
        let mut from = Bound::Unbounded;
        for cut in &cuts {
            ranges.push((tree, (from, Bound::Excluded(cut.clone()))));
            from = Bound::Included(cut.clone());
        }
        ranges.push((tree, (from, Bound::Unbounded)));
    }
    Ok(ranges)
}
