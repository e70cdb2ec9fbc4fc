//! The sled side of `SledStore`: the handles on its trees (one per
//! [`Tree`], and the references to spilled values) and the one multi-tree
//! transaction a flush writes.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::error::{CoordinatorError, Result};

use super::api::Tree;
use super::directory::{check_existing, open_db};
use super::faults::fault;
use super::integrity::{
    COMMITS_KEY, DIGEST_KEY, LEGACY_DIGEST_KEY, digested, entry_hash, tree_index,
};
use super::overlay::{Entry, Writes};
use super::spill::SpillRef;

/// The sled tree of references to spilled values, after the [`Tree::ALL`]
/// trees: its index in [`Handles::trees`] and in the content digest.
const SPILLED: usize = Tree::ALL.len();

const SPILLED_NAME: &str = "spilled";

pub(super) struct Handles {
    pub(super) dir: PathBuf,
    pub(super) db: sled::Db,
    /// The trees of [`Tree::ALL`], in order, then the [`SPILLED`] tree.
    pub(super) trees: Vec<sled::Tree>,
}

impl Handles {
    pub(super) fn open(dir: &Path, fresh: bool) -> Result<Handles> {
        let db = open_db(dir, fresh)?;
        if !fresh {
            check_existing(&db, dir)?;
        }
        let trees = Tree::ALL
            .iter()
            .map(|t| t.name())
            .chain([SPILLED_NAME])
            .map(|name| db.open_tree(name))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| fault(dir, &e))?;
        Ok(Handles {
            dir: dir.to_path_buf(),
            db,
            trees,
        })
    }

    pub(super) fn tree(&self, tree: Tree) -> &sled::Tree {
        &self.trees[tree_index(tree)]
    }

    pub(super) fn spilled(&self) -> &sled::Tree {
        &self.trees[SPILLED]
    }

    /// Every spilled value's key and reference.
    pub(super) fn spilled_refs(&self) -> Result<Vec<(Vec<u8>, SpillRef)>> {
        self.spilled()
            .iter()
            .map(|entry| {
                let (key, value) = entry.map_err(|e| fault(&self.dir, &e))?;
                let spilled = SpillRef::decode(&value).ok_or_else(|| {
                    CoordinatorError::Store(format!(
                        "the store in {} has a malformed value reference",
                        self.dir.display()
                    ))
                })?;
                Ok((key.to_vec(), spilled))
            })
            .collect()
    }
}

/// One insert (`Some`) or removal (`None`) of a key in the sled tree at an
/// index of [`Handles::trees`].
type TreeOp<'a> = (usize, &'a [u8], Option<Cow<'a, [u8]>>);

/// What a commit writes besides its writes.
pub(super) struct Commit {
    /// The store's commit count after it.
    pub(super) count: u64,
    /// The content digest before it.
    pub(super) digest: u64,
    /// The store still holds the FNV-1a digest of an older release.
    pub(super) remove_legacy_digest: bool,
}

/// Whether the store holds the digest of a release before the XXH3 digest.
pub(super) fn holds_legacy_digest(handles: &Handles, dir: &Path) -> Result<bool> {
    handles
        .tree(Tree::Meta)
        .contains_key(LEGACY_DIGEST_KEY)
        .map_err(|e| fault(dir, &e))
}

/// Writes every batch applied since the last flush (`writes`, the latest
/// write of each key) in one transaction over every tree, with the commit
/// count and the content digest moved on (durable once sled is flushed). A
/// spilled blob value is stored as its reference. Returns the new digest and
/// the files of the references it dropped (a file once per reference).
pub(super) fn write_batch(
    handles: &Handles,
    writes: &Writes,
    commit: Commit,
) -> Result<(u64, Vec<String>)> {
    let Commit {
        count: commits,
        digest,
        remove_legacy_digest,
    } = commit;
    use sled::Transactional;
    use sled::transaction::{ConflictableTransactionError, TransactionError};
    // Each write as operations on sled's trees: a blob write also clears the
    // key from the tree it does not use.
    let blobs = tree_index(Tree::Blobs);
    let mut ops: Vec<TreeOp> = Vec::new();
    for ((tree, key), entry) in writes {
        let key = key.as_slice();
        let value = match entry {
            Entry::Put(value) => Some(Cow::Borrowed(value.as_slice())),
            Entry::Spilled(spilled) => Some(Cow::Owned(spilled.encode())),
            Entry::Remove => None,
        };
        match (tree, entry) {
            (Tree::Blobs, Entry::Spilled(_)) => {
                ops.push((SPILLED, key, value));
                ops.push((blobs, key, None));
            }
            (Tree::Blobs, _) => {
                ops.push((blobs, key, value));
                ops.push((SPILLED, key, None));
            }
            (tree, _) => ops.push((tree_index(*tree), key, value)),
        }
    }
    let meta = tree_index(Tree::Meta);
    let written = handles
        .trees
        .as_slice()
        .transaction(|trees| {
            // Each operation's old value comes back from sled: the digest
            // moves by the difference, without reading the store.
            let mut next = digest;
            let mut unreferenced = Vec::new();
            for (tree, key, value) in &ops {
                let old = match value {
                    Some(v) => trees[*tree].insert(*key, v.as_ref())?,
                    None => trees[*tree].remove(*key)?,
                };
                if digested(*tree, key) {
                    if let Some(old) = &old {
                        next = next.wrapping_sub(entry_hash(*tree, key, old));
                    }
                    if let Some(v) = value {
                        next = next.wrapping_add(entry_hash(*tree, key, v));
                    }
                }
                if *tree == SPILLED
                    && let Some(old) = old.as_deref().and_then(SpillRef::decode)
                {
                    unreferenced.push(old.name);
                }
            }
            trees[meta].insert(COMMITS_KEY, &commits.to_be_bytes())?;
            trees[meta].insert(DIGEST_KEY, &next.to_be_bytes())?;
            if remove_legacy_digest {
                trees[meta].remove(LEGACY_DIGEST_KEY)?;
            }
            Ok::<_, ConflictableTransactionError<()>>((next, unreferenced))
        })
        .map_err(|e| match e {
            TransactionError::Storage(e) => fault(&handles.dir, &e),
            TransactionError::Abort(()) => CoordinatorError::Internal("a commit aborted".into()),
        })?;
    Ok(written)
}
