//! What a coordinator does about its replica before it opens its store: a
//! restore into an empty data directory (`--restore-from`), after making sure
//! no live coordinator owns the replica; or the refusal of a data directory
//! a restore left unfinished.

use std::path::Path;
use std::time::Duration;

use tally_stage::{StageStore, StageStoreUrl};

use crate::error::{CoordinatorError, Result};

use super::format::REPLICA_DIR;
use super::restore::{Floors, RESTORING_MARKER, Restored, prepare_target, restore};

/// Restores the store into the empty data directory `dir` from the replica
/// under `from` (a data directory's prefix) before anything else: watches
/// the prefix's latest owner record first for three of `watch_every` (a
/// coordinator still renewing it is alive: refused), and sets `stage_store`
/// to the store above `from` unless it names one (then it must be that one).
/// A point that loses more than the replica's last interval is refused
/// unless `accept_loss`.
pub async fn restore_before_start(
    dir: Option<&Path>,
    stage_store: &mut StageStoreUrl,
    from: &StageStoreUrl,
    watch_every: Duration,
    patience: Duration,
    accept_loss: bool,
) -> Result<Restored> {
    let dir = dir.ok_or_else(|| {
        CoordinatorError::InvalidArgument("--restore-from needs a data directory".into())
    })?;
    prepare_target(dir)?;
    let Some((above, _)) = from.split_last() else {
        return Err(CoordinatorError::InvalidArgument(format!(
            "--restore-from {from}: name a data directory's prefix in the stage store \
             (<stage store>/d-…, as the old coordinator's log and `tally doctor` show it)"
        )));
    };
    match &*stage_store {
        StageStoreUrl::Coordinator => *stage_store = above.clone(),
        given if *given == above => {}
        given => {
            return Err(CoordinatorError::InvalidArgument(format!(
                "--restore-from {from} is a prefix of {above}, not of --stage-store {given}: the \
                 restored jobs' stage data is there"
            )));
        }
    }
    // Opening a directory store creates it: a wrong path must change nothing.
    if let StageStoreUrl::File(path) = from
        && !path.is_dir()
    {
        return Err(CoordinatorError::InvalidArgument(format!(
            "--restore-from {from}: there is no such directory"
        )));
    }
    let objects = StageStore::open(from)?
        .ok_or_else(|| CoordinatorError::InvalidArgument("--restore-from coordinator".into()))?
        .with_patience(patience);
    let listed = objects.list(Some(REPLICA_DIR)).await?;
    if listed.is_empty() {
        return Err(CoordinatorError::InvalidArgument(format!(
            "--restore-from {from}: there is no replica there (a coordinator replicates its \
             store under its data directory's prefix, {}, when --replicate-every is not 0)",
            above.within("d-…")
        )));
    }
    let latest = objects.owner().await?;
    if let Some(record) = latest.as_ref().filter(|r| !r.released) {
        tracing::warn!(holder = %record.holder(), "watching the replica's owner before restoring: a coordinator that still renews it is alive");
        if objects.watch_owner(record, watch_every).await?.is_some() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "--restore-from {from}: {} still renews its hold on the prefix: it is alive, \
                 and two coordinators must never own one replica; stop it first",
                record.holder()
            )));
        }
    }
    let floors = Floors {
        next_job: latest.as_ref().map_or(0, |r| r.ids_below),
        epoch: latest.as_ref().map_or(0, |r| r.serving),
    };
    let restored = restore(&objects, dir, floors, accept_loss).await?;
    for refused in &restored.refused {
        tracing::error!(object = %refused, "a replica object was refused");
    }
    if let Some(lost) = &restored.lost {
        tracing::error!(lost = %lost, accepted = accept_loss, "the restore lost changes the replica held");
    }
    tracing::warn!(
        point = %restored.point,
        refused = restored.refused.len(),
        "restored the store from the replica; results accepted after this point are computed again"
    );
    Ok(restored)
}

/// Refuses to start on a data directory a restore left unfinished.
pub fn refuse_unfinished_restore(dir: Option<&Path>) -> Result<()> {
    match dir {
        Some(dir) if dir.join(RESTORING_MARKER).exists() => {
            Err(CoordinatorError::FailedPrecondition(format!(
                "data directory {}: a restore into it did not finish; run the restore again \
                 (--restore-from), which starts it over",
                dir.display()
            )))
        }
        _ => Ok(()),
    }
}
