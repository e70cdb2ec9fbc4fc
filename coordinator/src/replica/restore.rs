//! Rebuilds a store in a new data directory from the replica: the newest
//! consistent point (a whole snapshot and the log after it without a gap, or
//! a generation's parent at its branch point and its own log), skipping with
//! a clear line every object found damaged or truncated, never anything the
//! replica does not prove. A point that loses more than the tail the replica
//! had not shipped (a gap in the log, see `loss.rs`) is refused unless the
//! loss is accepted.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use tally_stage::{StageError, StageStore};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::store::{Batch, EPOCH_KEY, NEXT_JOB_KEY, SledStore, Store, Tree};

use super::format::{
    Manifest, REPLICA_DIR, ReplicaObject, SnapshotDone, decode_entries, decode_json,
    decode_segment, manifest_key, snapshot_done_key, snapshot_part_key,
};
use super::loss::{Listed, Loss, assess};

use crate::store::LOST_AND_FOUND;
pub use crate::store::RESTORING_MARKER;

/// Where a restored store records what it was restored from, in [`Tree::Meta`].
pub const RESTORED_KEY: &[u8] = b"restored";

/// The least the restored store's counters are raised to: the job counter
/// (ids never given again) and the coordinator's epoch (its leases outrank
/// every lease of the coordinator it replaces). From the latest owner record
/// of the prefix.
#[derive(Clone, Copy, Debug, Default)]
pub struct Floors {
    pub next_job: u64,
    pub epoch: u64,
}

/// What a restore did.
#[derive(Clone, Debug)]
pub struct Restored {
    pub generation: u64,
    /// The change of `generation` the store is at.
    pub change: u64,
    /// In words, for the log and the restored record.
    pub point: String,
    /// Objects refused as damaged, each with why.
    pub refused: Vec<String>,
    /// What the replica held past the point and the restore lost, in words
    /// (accepted, or no more than the last segment shipped).
    pub lost: Option<String>,
    pub changes_replayed: u64,
    pub entries: u64,
    /// The generation after every one listed: the restored coordinator's
    /// first, which continues the restored point.
    pub next_generation: u64,
}

/// Log segments in order: key, first change, last change.
type Segments = Vec<(String, u64, u64)>;

/// One step of a plan.
#[derive(Debug)]
enum Step {
    Snapshot {
        generation: u64,
        done: SnapshotDone,
    },
    /// Changes from `start` on, in segments: key, first, last.
    Log {
        start: u64,
        keys: Segments,
    },
}

/// Whether `dir` may be restored into: absent, empty, or left by an
/// unfinished restore (emptied then).
pub fn prepare_target(dir: &Path) -> Result<()> {
    let entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter(|e| e.file_name() != LOST_AND_FOUND)
            .map(|e| e.path())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(CoordinatorError::InvalidArgument(format!(
                "cannot read data directory {}: {e}",
                dir.display()
            )));
        }
    };
    if entries.is_empty() {
        return Ok(());
    }
    if !dir.join(RESTORING_MARKER).exists() {
        return Err(CoordinatorError::InvalidArgument(format!(
            "data directory {} is not empty: a restore writes only into an empty one (it never \
             replaces a store)",
            dir.display()
        )));
    }
    tracing::warn!(dir = %dir.display(), "emptying what an unfinished restore left");
    for path in entries {
        let removed = match path.is_dir() {
            true => std::fs::remove_dir_all(&path),
            false => std::fs::remove_file(&path),
        };
        removed.map_err(|e| {
            CoordinatorError::InvalidArgument(format!("cannot remove {}: {e}", path.display()))
        })?;
    }
    Ok(())
}

/// Restores the replica in `objects` (a data directory's prefix) into the
/// empty directory `dir`, raising its counters to `floors`. Refused, with
/// nothing written, when the newest point loses more than the last interval
/// of what the replica holds (see `loss.rs`), unless `accept_loss`.
pub async fn restore(
    objects: &StageStore,
    dir: &Path,
    floors: Floors,
    accept_loss: bool,
) -> Result<Restored> {
    let existed = dir.exists();
    prepare_target(dir)?;
    let mut refused: Vec<String> = Vec::new();
    let mut bad: HashSet<String> = HashSet::new();
    loop {
        let listed = list(objects).await?;
        let Some((generation, plan)) = choose(objects, &listed, &mut bad, &mut refused).await?
        else {
            let why = match refused.is_empty() {
                true => "it holds no whole snapshot".to_string(),
                false => format!("every point is damaged: {}", refused.join("; ")),
            };
            return Err(CoordinatorError::FailedPrecondition(format!(
                "nothing to restore from {}: {why}",
                objects.url()
            )));
        };
        let point = (generation, plan_end(&plan));
        let unprotected = unprotected(objects, &listed, generation, &bad).await?;
        let loss = assess(point, &listed, &bad, &unprotected);
        if loss.beyond_last_interval() && !accept_loss {
            // Emptied when a damaged object was found while replaying.
            if !existed {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(refusal(objects, &loss, &refused));
        }
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        std::fs::write(dir.join(RESTORING_MARKER), b"").map_err(|e| io(dir, e))?;
        let lost = (!loss.is_none()).then(|| loss.describe());
        match replay(objects, dir, &plan, floors, generation, lost.as_deref()).await {
            Ok(mut restored) => {
                std::fs::remove_file(dir.join(RESTORING_MARKER)).map_err(|e| io(dir, e))?;
                restored.refused = refused;
                restored.lost = lost;
                restored.next_generation = listed.keys().max().copied().unwrap_or(0) + 1;
                return Ok(restored);
            }
            Err(Found::Damaged(key, why)) => {
                refused.push(format!("{key}: {why}"));
                bad.insert(key);
                prepare_target(dir)?;
            }
            Err(Found::Failed(e)) => return Err(e),
        }
    }
}

/// The refusal of a restore that would lose `loss`: bad input until the
/// loss is accepted (or the missing objects put back).
fn refusal(objects: &StageStore, loss: &Loss, refused: &[String]) -> CoordinatorError {
    let refused = match refused.is_empty() {
        true => String::new(),
        false => format!(" (refused as damaged: {})", refused.join("; ")),
    };
    CoordinatorError::InvalidArgument(format!(
        "the replica in {} has lost more than its last interval: {}{refused}; nothing was \
         restored. Put the missing objects back if they are anywhere, or run again with \
         --restore-accept-loss to restore the point before it (what the lost changes recorded \
         is gone: jobs submitted after it are unknown, results accepted after it are computed \
         again)",
        objects.url(),
        loss.describe()
    ))
}

/// The change of its generation a plan ends at.
fn plan_end(plan: &[Step]) -> u64 {
    match plan.last() {
        Some(Step::Log { start, keys }) => keys.last().map_or(start - 1, |(_, _, last)| *last),
        Some(Step::Snapshot { done, .. }) => done.to,
        None => 0,
    }
}

/// The generations after `chosen` that the replica had not protected yet:
/// begun without a parent (a start, or a break in the log), their log not
/// shipped through their snapshot's point (or their snapshot not whole), so
/// the replica reported them as its lag. Anything unreadable counts as
/// protected: its loss is then refused unless accepted.
async fn unprotected(
    objects: &StageStore,
    listed: &BTreeMap<u64, Listed>,
    chosen: u64,
    bad: &HashSet<String>,
) -> Result<HashSet<u64>> {
    let mut found = HashSet::new();
    for (&generation, of) in listed.range(chosen + 1..) {
        let key = manifest_key(generation);
        if !of.manifest || bad.contains(&key) {
            continue;
        }
        let manifest = match read(objects, &key).await {
            Ok(body) => decode_json::<Manifest>(&body).ok(),
            Err(Found::Damaged(..)) => None,
            Err(Found::Failed(e)) => return Err(e),
        };
        let parentless = manifest.is_some_and(|m| m.parent.is_none());
        if !parentless {
            continue;
        }
        let shipped = of.segments.values().map(|(last, _)| *last).max();
        let done_key = snapshot_done_key(generation);
        let through = match of.done && !bad.contains(&done_key) {
            false => None,
            true => match read(objects, &done_key).await {
                Ok(body) => match decode_json::<SnapshotDone>(&body) {
                    Ok(done) => Some(done.to),
                    Err(_) => continue,
                },
                Err(Found::Damaged(..)) => continue,
                Err(Found::Failed(e)) => return Err(e),
            },
        };
        if through.is_none_or(|to| shipped.unwrap_or(0) < to) {
            found.insert(generation);
        }
    }
    Ok(found)
}

fn io(dir: &Path, e: std::io::Error) -> CoordinatorError {
    CoordinatorError::Store(format!("restoring into {}: {e}", dir.display()))
}

async fn list(objects: &StageStore) -> Result<BTreeMap<u64, Listed>> {
    let mut listed: BTreeMap<u64, Listed> = BTreeMap::new();
    for key in objects.list(Some(REPLICA_DIR)).await? {
        let Some(object) = ReplicaObject::parse(&key) else {
            continue;
        };
        let entry = listed.entry(object.generation()).or_default();
        match object {
            ReplicaObject::Manifest { .. } => entry.manifest = true,
            ReplicaObject::SnapshotDone { .. } => entry.done = true,
            ReplicaObject::SnapshotPart { .. } => {}
            ReplicaObject::Segment { first, last, .. } => {
                entry.segments.insert(first, (last, key));
            }
        }
    }
    Ok(listed)
}

/// A sealed object's body, or why it cannot be used: damage is a finding
/// (the restore goes on without it), an unreachable store a failure.
async fn read(objects: &StageStore, key: &str) -> std::result::Result<bytes::Bytes, Found> {
    match objects.get_sealed(key).await {
        Ok(Some(body)) => Ok(body),
        Ok(None) => Err(Found::Damaged(key.to_string(), "it is missing".into())),
        Err(StageError::Corrupt { why, .. }) => Err(Found::Damaged(key.to_string(), why)),
        Err(e) => Err(Found::Failed(e.into())),
    }
}

enum Found {
    Damaged(String, String),
    Failed(CoordinatorError),
}

impl From<CoordinatorError> for Found {
    fn from(e: CoordinatorError) -> Found {
        Found::Failed(e)
    }
}

/// The newest generation with a consistent point, and how to get there.
async fn choose(
    objects: &StageStore,
    listed: &BTreeMap<u64, Listed>,
    bad: &mut HashSet<String>,
    refused: &mut Vec<String>,
) -> Result<Option<(u64, Vec<Step>)>> {
    for &generation in listed.keys().rev() {
        match chain(objects, listed, bad, generation, None, 0).await {
            Ok(Some(plan)) => return Ok(Some((generation, plan))),
            Ok(None) => {}
            Err(Found::Damaged(key, why)) => {
                refused.push(format!("{key}: {why}"));
                bad.insert(key);
                // The same generation may still have a point without it.
                return Box::pin(choose(objects, listed, bad, refused)).await;
            }
            Err(Found::Failed(e)) => return Err(e),
        }
    }
    Ok(None)
}

/// The steps to the state of `generation` after its change `upto` (its last
/// contiguous change when `None`), or `None` if the replica does not hold it.
async fn chain(
    objects: &StageStore,
    listed: &BTreeMap<u64, Listed>,
    bad: &HashSet<String>,
    generation: u64,
    upto: Option<u64>,
    depth: u32,
) -> std::result::Result<Option<Vec<Step>>, Found> {
    let Some(objects_of) = listed.get(&generation) else {
        return Ok(None);
    };
    let manifest_key = manifest_key(generation);
    if !objects_of.manifest || bad.contains(&manifest_key) || depth > 64 {
        return Ok(None);
    }
    let manifest: Manifest = decode_json(&read(objects, &manifest_key).await?)
        .map_err(|why| Found::Damaged(manifest_key.clone(), why))?;
    // The log of the generation without a gap from `start`, to `upto` if set.
    // It may begin with a segment holding changes before `start` too (the
    // snapshot saw them: replaying them changes nothing).
    let log_from = |start: u64| -> Option<(Segments, u64)> {
        let mut keys = Vec::new();
        let mut next = start;
        let covering = objects_of.segments.range(..start).next_back();
        let from = match covering {
            Some((&first, (last, _))) if *last >= start => first,
            _ => start,
        };
        for (&first, (last, key)) in objects_of.segments.range(from..) {
            let joins = first == next || (keys.is_empty() && first < next);
            if !joins || bad.contains(key) || upto.is_some_and(|u| *last > u) {
                break;
            }
            keys.push((key.clone(), first, *last));
            next = last + 1;
        }
        let end = next - 1;
        match upto {
            Some(u) if end != u => None,
            _ => Some((keys, end)),
        }
    };
    let done_key = snapshot_done_key(generation);
    if objects_of.done && !bad.contains(&done_key) {
        let done: SnapshotDone = decode_json(&read(objects, &done_key).await?)
            .map_err(|why| Found::Damaged(done_key.clone(), why))?;
        let parts_bad = (1..=done.parts).any(|p| bad.contains(&snapshot_part_key(generation, p)));
        if !parts_bad
            && let Some((keys, end)) = log_from(done.from + 1)
            && end >= done.to
        {
            let start = done.from + 1;
            return Ok(Some(vec![
                Step::Snapshot { generation, done },
                Step::Log { start, keys },
            ]));
        }
    }
    let Some(parent) = manifest.parent else {
        return Ok(None);
    };
    let Some((keys, _)) = log_from(1) else {
        return Ok(None);
    };
    let base = Box::pin(chain(
        objects,
        listed,
        bad,
        parent.generation,
        Some(parent.through),
        depth + 1,
    ))
    .await?;
    Ok(base.map(|mut steps| {
        steps.push(Step::Log { start: 1, keys });
        steps
    }))
}

/// Writes the plan's snapshot and changes into a new store in `dir`.
async fn replay(
    objects: &StageStore,
    dir: &Path,
    plan: &[Step],
    floors: Floors,
    generation: u64,
    lost: Option<&str>,
) -> std::result::Result<Restored, Found> {
    let store = SledStore::open(dir)?;
    let (mut entries, mut changes, mut change, mut at) = (0u64, 0u64, 0u64, String::new());
    for step in plan {
        match step {
            Step::Snapshot { generation, done } => {
                for part in 1..=done.parts {
                    let key = snapshot_part_key(*generation, part);
                    let body = read(objects, &key).await?;
                    let decoded =
                        decode_entries(&body).map_err(|why| Found::Damaged(key.clone(), why))?;
                    let mut batch = Batch::default();
                    for (tree, k, v) in decoded {
                        batch.put(tree, k, v);
                        entries += 1;
                    }
                    store.apply(batch)?;
                    store.flush()?;
                }
                at = format!(
                    "the snapshot of generation {generation} (its changes {} to {})",
                    done.from, done.to
                );
            }
            Step::Log { start, keys } => {
                for (key, first, last) in keys {
                    let body = read(objects, key).await?;
                    let batches = decode_segment(&body, *first, *last)
                        .map_err(|why| Found::Damaged(key.clone(), why))?;
                    for batch in batches {
                        store.apply(batch)?;
                        changes += 1;
                    }
                    store.flush()?;
                }
                change = keys.last().map_or(start - 1, |(_, _, last)| *last);
            }
        }
    }
    let point = format!(
        "change {change} of generation {generation}, from {at} and {changes} change(s) of the log"
    );
    let mut batch = Batch::default();
    let counter = |key: &[u8]| -> Result<u64> {
        Ok(store
            .get(Tree::Meta, key)?
            .and_then(|v| v.try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0))
    };
    let next_job = counter(NEXT_JOB_KEY)?.max(floors.next_job);
    let epoch = counter(EPOCH_KEY)?.max(floors.epoch);
    batch.put(Tree::Meta, NEXT_JOB_KEY, next_job.to_be_bytes().to_vec());
    batch.put(Tree::Meta, EPOCH_KEY, epoch.to_be_bytes().to_vec());
    let record = serde_json::json!({
        "from": objects.url().to_string(),
        "point": point,
        "at_ms": now_ms(),
        "lost": lost,
    });
    batch.put(Tree::Meta, RESTORED_KEY, record.to_string().into_bytes());
    store.commit(batch)?;
    drop(store);
    Ok(Restored {
        generation,
        change,
        point,
        refused: Vec::new(),
        lost: None,
        changes_replayed: changes,
        entries,
        next_generation: 0,
    })
}
