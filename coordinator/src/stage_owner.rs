//! This data directory's hold on its stage-store prefix (the owner records
//! of `tally_stage::owner`): taken at start, renewed while serving, checked
//! before every deletion pass of the sweep, released at a clean stop. A copy
//! of the data directory (a restored backup, a cloned machine) has the same
//! prefix; it is refused at start, and a coordinator that finds the prefix
//! taken from it (by such a copy, or by a coordinator restored from its
//! replica) deletes and ships nothing there and stops serving. Each record
//! also carries the holder's epoch and the job numbers it reserves, which a
//! restore raises its counters to.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tally_stage::{Claim, OwnerRecord, StageStore};

use crate::error::{CoordinatorError, Result};
use crate::shared::{SCHEDULER_WAIT_LIMIT, Shared, now_ms};

/// A hold not released is watched for this many renewals before a start of
/// the same data directory takes it back (no renewal: its holder is gone).
const WATCHED_RENEWALS: u32 = 3;

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
    /// The job numbers the latest record reserves, shared with the
    /// scheduler (which hands out none at or above it).
    ids_below: Arc<AtomicU64>,
    shared: Arc<Shared>,
}

/// How a start takes the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    /// As a coordinator on its data directory: see [`Claim`].
    Start,
    /// After a restore from the prefix's replica, which watched the latest
    /// record already: taken from whoever holds it.
    AfterRestore,
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
        let ours = shared.with_scheduler(|s| s.stage_owner_nonces()).await?;
        let latest = store.owner().await?;
        let epoch = match (taking, Claim::of(latest.as_ref(), &ours)) {
            (Taking::AfterRestore, _) => latest.as_ref().map_or(1, |r| r.epoch + 1),
            (_, Claim::Take { epoch }) => epoch,
            (_, Claim::Clash(holder)) => return Err(clash(&store, &holder)),
            (_, Claim::Watch(record)) => {
                watch(&store, &record, renew_every).await?;
                record.epoch + 1
            }
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
                Some(holder) => clash(&owner.store, &holder),
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
        let by = holder.map_or_else(|| "another coordinator".to_string(), |h| h.holder());
        CoordinatorError::FailedPrecondition(format!(
            "the stage-store prefix {} was taken by {by}, a copy of this data directory: this \
             coordinator deletes nothing there any more; stop one of the two, and {REMEDY}",
            self.store.url()
        ))
    }
}

/// Waits `WATCHED_RENEWALS` renewals, reading the owner records: refused if
/// a later record than `record` appears (a coordinator with a copy of this
/// data directory is running on the prefix).
pub(crate) async fn watch(
    store: &StageStore,
    record: &OwnerRecord,
    renew_every: Duration,
) -> Result<()> {
    let watch_for = renew_every * WATCHED_RENEWALS;
    tracing::warn!(
        store = %store.url(),
        ?watch_for,
        "this data directory did not release its stage-store prefix (it stopped uncleanly, or a \
         copy of it is running on the prefix); watching the prefix before taking it back"
    );
    let deadline = tokio::time::Instant::now() + watch_for;
    let every = (renew_every / 2).max(Duration::from_millis(50));
    loop {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(());
        }
        tokio::time::sleep(every.min(deadline - now)).await;
        let latest = store.owner().await?;
        if latest.as_ref().map(|r| r.epoch) != Some(record.epoch) {
            let by = latest.map_or_else(|| "another coordinator".to_string(), |h| h.holder());
            return Err(CoordinatorError::InvalidArgument(format!(
                "the stage-store prefix {} is in use by a running coordinator with a copy of this \
                 data directory ({by}), which renewed its hold while this one watched; {REMEDY}",
                store.url()
            )));
        }
    }
}

/// The refusal of a start on a prefix `holder` holds.
fn clash(store: &StageStore, holder: &OwnerRecord) -> CoordinatorError {
    CoordinatorError::InvalidArgument(format!(
        "the stage-store prefix {} belongs to {}, not to this data directory: this one is a copy \
         of it (a restored backup or a cloned machine), and two coordinators on one prefix would \
         hand out the same job ids there and delete each other's stage data; {REMEDY}",
        store.url(),
        holder.holder()
    ))
}
