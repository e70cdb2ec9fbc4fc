//! This data directory's hold on its stage-store prefix (the owner records
//! of `tally_stage::owner`): taken at start, renewed while serving, checked
//! before every deletion pass of the sweep, released at a clean stop. A copy
//! of the data directory (a restored backup, a cloned machine) has the same
//! prefix; it is refused at start, and a coordinator that finds the prefix
//! taken from it (by such a copy, or by a coordinator restored from its
//! replica) deletes and ships nothing there and stops serving. Each record
//! also carries the holder's epoch and the job numbers it reserves, which a
//! restore raises its counters to, and, once a restore took the prefix, the
//! epoch it took it at: the data directory it was taken from was superseded,
//! and is refused for good (no new prefix brings its stale jobs back).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tally_stage::{Claim, OwnerRecord, StageStore, StageStoreUrl};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::replica::{PrefixHold, Restored};
use crate::scheduler::KeptStageOwner;
use crate::shared::{SCHEDULER_WAIT_LIMIT, Shared};
use crate::store::Store;

/// Job numbers each owner record reserves beyond the next one: submissions
/// past the reservation wait for the next renewal (10 s by default), so this
/// bounds a burst to this many jobs between two renewals.
pub const JOB_IDS_RESERVED: u64 = 100_000;

/// What to do about a prefix held by a copy of this data directory.
const REMEDY: &str = "start the copy with --new-stage-prefix to give it a prefix of its own \
                      (its unfinished jobs compute again the stage data they do not find there)";

/// This coordinator's hold on its stage-store prefix.
pub struct StageOwner {
    store: StageStore,
    nonce: String,
    data: String,
    since_ms: u64,
    /// The epoch of the latest owner record this coordinator wrote; held
    /// across each renewal and check, so that they do not interleave.
    epoch: tokio::sync::Mutex<u64>,
    /// Set once the prefix is found taken by another: kept until the stop.
    lost: AtomicBool,
    /// Woken when the prefix is found lost: the coordinator stops serving.
    pub lost_notice: tokio::sync::Notify,
    /// This coordinator's epoch, written in every record.
    serving: u64,
    /// The epoch at which a restore took the prefix for this data
    /// directory, if one did: written in every record.
    restored_at: Option<u64>,
    /// The job numbers the latest record reserves, shared with the
    /// scheduler (which hands out none at or above it).
    ids_below: Arc<AtomicU64>,
    shared: Arc<Shared>,
}

impl PrefixHold for StageOwner {
    fn is_lost(&self) -> bool {
        StageOwner::is_lost(self)
    }
}

/// How a start takes the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    /// As a coordinator on its data directory: see [`Claim`].
    Start,
    /// After a restore from the prefix's replica, which watched the latest
    /// record already: taken from whoever holds it.
    AfterRestore,
    /// As a start whose latest record, of this epoch, was watched already
    /// (see [`new_prefix_needed`]): taken if it still is the latest.
    Watched(u64),
}

impl StageOwner {
    /// Takes the prefix of `store` for this data directory (`data`, named in
    /// the owner record for messages), or refuses: another data directory
    /// holds it, or a copy of this one is running on it (it renews its hold
    /// every `renew_every`).
    pub async fn take(
        shared: &Arc<Shared>,
        store: StageStore,
        data: String,
        renew_every: Duration,
        taking: Taking,
    ) -> Result<StageOwner> {
        let kept = shared.with_scheduler(|s| s.stage_owner_kept()).await?;
        let ours = kept.nonces;
        let latest = store.owner().await?;
        let epoch = match (taking, Claim::of(latest.as_ref(), &ours)) {
            (Taking::AfterRestore, _) => latest.as_ref().map_or(1, |r| r.epoch + 1),
            (_, Claim::Take { epoch }) => epoch,
            (_, Claim::Clash(holder)) => return Err(clash(&store, &holder, kept.restored_at)),
            (Taking::Watched(watched), Claim::Watch(record)) if record.epoch == watched => {
                record.epoch + 1
            }
            (_, Claim::Watch(record)) => {
                tracing::warn!(
                    store = %store.url(),
                    "this data directory did not release its stage-store prefix (it stopped \
                     uncleanly, or a copy of it is running on the prefix); watching the prefix \
                     before taking it back"
                );
                if let Some(renewed) = store.watch_owner(&record, renew_every).await? {
                    return Err(in_use(&store, &renewed, kept.restored_at));
                }
                record.epoch + 1
            }
        };
        // A restore's mark goes on every record of its data directory (kept
        // there before the first record, like the nonce).
        let restored_at = match taking {
            Taking::AfterRestore => {
                shared
                    .with_scheduler(move |s| s.note_stage_owner_restored(epoch))
                    .await?;
                Some(epoch)
            }
            _ => kept.restored_at,
        };
        let (serving, ids_below) = shared
            .with_scheduler(|s| Ok((s.epoch(), s.job_ids_below())))
            .await?;
        let held = latest.map(|r| r.nonce).filter(|n| ours.contains(n));
        let nonce = shared
            .with_scheduler(move |s| s.begin_stage_owner_claim(held.as_deref()))
            .await?;
        let owner = StageOwner {
            store,
            nonce,
            data,
            since_ms: now_ms(),
            epoch: tokio::sync::Mutex::new(epoch),
            lost: AtomicBool::new(false),
            lost_notice: tokio::sync::Notify::new(),
            serving,
            restored_at,
            ids_below,
            shared: shared.clone(),
        };
        let reserve = owner.reservation().await?;
        if !owner
            .store
            .put_owner(&owner.record(epoch, false, reserve))
            .await?
        {
            // Another start took this epoch first.
            return Err(match owner.store.owner().await? {
                Some(holder) => clash(&owner.store, &holder, restored_at),
                None => CoordinatorError::Unavailable(format!(
                    "the owner records of {} vanished while this coordinator took them",
                    owner.store.url()
                )),
            });
        }
        owner.ids_below.store(reserve, Ordering::SeqCst);
        let nonce = owner.nonce.clone();
        shared
            .with_scheduler(move |s| s.end_stage_owner_claim(&nonce))
            .await?;
        owner.remove_older(epoch).await;
        tracing::info!(store = %owner.store.url(), epoch, "stage-store prefix held by this data directory");
        Ok(owner)
    }

    /// Writes the next owner record, so that a start on a copy of this data
    /// directory sees the prefix in use. Fails for good once the prefix is
    /// found taken by another ([`StageOwner::is_lost`]).
    pub async fn renew(&self) -> Result<()> {
        let mut epoch = self.epoch.lock().await;
        if self.is_lost() {
            return Err(self.lost(None));
        }
        let next = *epoch + 1;
        let reserve = self.reservation().await?;
        if !self
            .store
            .put_owner(&self.record(next, false, reserve))
            .await?
        {
            let holder = self.store.owner().await.ok().flatten();
            return Err(self.lost(holder));
        }
        *epoch = next;
        // Never lowered: the previous record's reservation may be in use.
        self.ids_below.fetch_max(reserve, Ordering::SeqCst);
        self.remove_older(next).await;
        Ok(())
    }

    /// The job numbers the next record reserves: the next one's and
    /// [`JOB_IDS_RESERVED`] more (never fewer than a record reserved).
    async fn reservation(&self) -> Result<u64> {
        let next = self
            .shared
            .peek_within(SCHEDULER_WAIT_LIMIT, |s| {
                s.map_or(0, |s| s.next_job_number())
            })
            .await?;
        let held = self.ids_below.load(Ordering::SeqCst);
        let held = if held == u64::MAX { 0 } else { held };
        Ok((next + JOB_IDS_RESERVED).max(held))
    }

    /// Whether this coordinator still holds the prefix, read from the store:
    /// the sweep asks before every deletion pass.
    pub async fn confirm(&self) -> Result<()> {
        let epoch = self.epoch.lock().await;
        let latest = self.store.owner().await?;
        match latest {
            Some(r) if !self.is_lost() && r.epoch == *epoch && r.nonce == self.nonce => Ok(()),
            other => Err(self.lost(other)),
        }
    }

    /// Marks the prefix free for this data directory's next start (a clean
    /// stop); nothing if it was taken by another.
    pub async fn release(&self) -> Result<()> {
        let mut epoch = self.epoch.lock().await;
        if self.is_lost() {
            return Ok(());
        }
        let next = *epoch + 1;
        let reserve = self.reservation().await?;
        if self
            .store
            .put_owner(&self.record(next, true, reserve))
            .await?
        {
            *epoch = next;
            self.remove_older(next).await;
            tracing::info!(store = %self.store.url(), "stage-store prefix released");
        }
        Ok(())
    }

    /// Why a coordinator whose prefix was taken stops.
    pub fn lost_error(&self) -> CoordinatorError {
        CoordinatorError::FailedPrecondition(format!(
            "this coordinator lost its stage-store prefix {} to another coordinator (one restored \
             from its replica, or a copy of its data directory): it stops serving at once; its \
             jobs go on at the coordinator that took the prefix",
            self.store.url()
        ))
    }

    /// Whether another data directory has taken the prefix.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn record(&self, epoch: u64, released: bool, ids_below: u64) -> OwnerRecord {
        OwnerRecord {
            epoch,
            nonce: self.nonce.clone(),
            data: self.data.clone(),
            since_ms: self.since_ms,
            released,
            serving: self.serving,
            ids_below,
            restored_at: self.restored_at,
        }
    }

    /// Deletes the records before `epoch` (only the latest counts): left
    /// for the next renewal if the store does not answer.
    async fn remove_older(&self, epoch: u64) {
        if let Err(e) = self.store.remove_owners_before(epoch).await {
            tracing::debug!(error = %e, "old owner records not deleted yet");
        }
    }

    /// Notes the prefix lost (to `holder`, if known) and says so.
    fn lost(&self, holder: Option<OwnerRecord>) -> CoordinatorError {
        self.lost.store(true, Ordering::SeqCst);
        self.lost_notice.notify_waiters();
        self.lost_notice.notify_one();
        if let Some(holder) = holder.as_ref().filter(|h| by_restore(h, self.restored_at)) {
            return superseded(&self.store, holder);
        }
        let by = holder.map_or_else(|| "another coordinator".to_string(), |h| h.holder());
        CoordinatorError::FailedPrecondition(format!(
            "the stage-store prefix {} was taken by {by}, a copy of this data directory: this \
             coordinator deletes nothing there any more; stop one of the two, and {REMEDY}",
            self.store.url()
        ))
    }
}

/// Whether `holder` took the prefix by a restore that replaced this data
/// directory (`own`: the owner epoch of the restore into this one, if any),
/// rather than being a copy of it.
fn by_restore(holder: &OwnerRecord, own: Option<u64>) -> bool {
    holder.restored_at.is_some() && holder.restored_at != own
}

/// The refusal of a start on a prefix whose holder renewed it while watched.
fn in_use(store: &StageStore, renewed: &OwnerRecord, own: Option<u64>) -> CoordinatorError {
    if by_restore(renewed, own) {
        return superseded(store, renewed);
    }
    CoordinatorError::InvalidArgument(format!(
        "the stage-store prefix {} is in use by a running coordinator with a copy of this data \
         directory ({}), which renewed its hold while this one watched; {REMEDY}",
        store.url(),
        renewed.holder()
    ))
}

/// The refusal of a data directory a restore from its replica replaced:
/// its jobs live on at the restored coordinator, so it must never serve
/// again, under this prefix or a new one.
fn superseded(store: &StageStore, holder: &OwnerRecord) -> CoordinatorError {
    let at = holder.restored_at.unwrap_or(holder.epoch);
    CoordinatorError::InvalidArgument(format!(
        "this data directory was superseded by a restore from the replica in {} at epoch {at} \
         (now held by {}): its jobs go on at the restored coordinator, and this data directory \
         must not serve again (its jobs are stale: served, they would run twice, under two \
         coordinators); keep it only as an archive, and point workers and clients at the \
         restored coordinator",
        store.url(),
        holder.holder()
    ))
}

/// What a start asks of the stage-store prefix: `--new-stage-prefix`, the
/// stage store, how often a hold is renewed, how long an unreachable store
/// is waited out.
pub struct PrefixAsked<'a> {
    pub new_stage_prefix: bool,
    pub stage_store: &'a StageStoreUrl,
    pub renew_every: Duration,
    pub patience: Duration,
}

/// Whether this start draws a new stage-store prefix for its data directory
/// (`store`), and how it takes the prefix then: after a restore, or as a
/// start (see [`new_prefix_needed`] for `--new-stage-prefix`).
pub async fn new_prefix(
    asked: PrefixAsked<'_>,
    store: &Arc<dyn Store>,
    restored: Option<&Restored>,
) -> Result<(bool, Taking)> {
    if restored.is_some() {
        return Ok((asked.new_stage_prefix, Taking::AfterRestore));
    }
    if !asked.new_stage_prefix || !asked.stage_store.is_external() {
        return Ok((asked.new_stage_prefix, Taking::Start));
    }
    let (new, watched) = new_prefix_needed(
        store.clone(),
        asked.stage_store,
        asked.renew_every,
        asked.patience,
    )
    .await?;
    Ok((new, watched.map_or(Taking::Start, Taking::Watched)))
}

/// Whether `--new-stage-prefix` (given for this start) is needed: only when
/// the prefix the data directory (`data`) kept from earlier starts, in the
/// stage store `url`, is held by a copy of it. A data directory that still
/// holds its prefix keeps it (a new one would orphan every blob of the old):
/// the flag is then ignored, with a warning. A data directory a restore
/// superseded is refused. Returns whether to draw a new prefix, and the
/// epoch of a record watched here (see [`Taking::Watched`]).
pub async fn new_prefix_needed(
    data: Arc<dyn Store>,
    url: &StageStoreUrl,
    renew_every: Duration,
    patience: Duration,
) -> Result<(bool, Option<u64>)> {
    let kept = tokio::task::spawn_blocking(move || KeptStageOwner::read(&*data))
        .await
        .map_err(|e| CoordinatorError::Internal(e.to_string()))??;
    let Some(prefix) = &kept.prefix else {
        return Ok((true, None));
    };
    let Some(store) = StageStore::open(&url.within(prefix))? else {
        return Ok((true, None));
    };
    let store = &store.with_patience(patience);
    let own = kept.restored_at;
    let ignored = |watched: Option<u64>| {
        tracing::warn!(
            store = %store.url(),
            "--new-stage-prefix ignored: this data directory still holds its stage-store prefix \
             (no copy of it does), and a new prefix would orphan every blob under the old one; \
             drop the flag"
        );
        Ok((false, watched))
    };
    let latest = store.owner().await?;
    match Claim::of(latest.as_ref(), &kept.nonces) {
        Claim::Take { .. } => ignored(None),
        Claim::Clash(holder) if by_restore(&holder, own) => Err(superseded(store, &holder)),
        Claim::Clash(_) => Ok((true, None)),
        Claim::Watch(record) => match store.watch_owner(&record, renew_every).await? {
            Some(renewed) if by_restore(&renewed, own) => Err(superseded(store, &renewed)),
            Some(_) => Ok((true, None)),
            None => ignored(Some(record.epoch)),
        },
    }
}

/// The refusal of a start on a prefix `holder` holds.
fn clash(store: &StageStore, holder: &OwnerRecord, own: Option<u64>) -> CoordinatorError {
    if by_restore(holder, own) {
        return superseded(store, holder);
    }
    CoordinatorError::InvalidArgument(format!(
        "the stage-store prefix {} belongs to {}, not to this data directory: this one is a copy \
         of it (a restored backup or a cloned machine), and two coordinators on one prefix would \
         hand out the same job ids there and delete each other's stage data; {REMEDY}",
        store.url(),
        holder.holder()
    ))
}
