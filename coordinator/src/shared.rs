//! What every call of the coordinator goes through: the scheduler behind its
//! lock, run off the async runtime, and answered only once its changes are
//! durable; with what the services and background tasks share besides (the
//! kernel cache, the wake-ups of lease polls and watches, the metrics).
//!
//! *Invariant:* a call that used the scheduler answers nothing a crash could
//! take back but soft state (leases): it waits, outside the lock, for the
//! group commit to cover its own changes and every change applied before it
//! that was not a lease's. After a failed write the scheduler is read back
//! from the store before the next call uses it.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tally_kinds::cache::KernelCache;
use tally_stage::StageStoreUrl;
use tokio::sync::{Notify, broadcast};

use crate::error::{CoordinatorError, Result};
use crate::group_commit::GroupCommit;
use crate::metrics::CoordinatorMetrics;
use crate::panic_fence::SetOnPanic;
use crate::records::attachment_key;
use crate::scheduler::Scheduler;
use crate::store::Tree;

/// The wall clock in Unix milliseconds, as the scheduler takes it.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether a call's answer waits for its changes to be durable.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    Wait,
    Soft,
}

/// State shared by both services and the background tasks.
pub struct Shared {
    /// `None` once the coordinator has shut down: dropping the scheduler closes
    /// the store, so a restart in the same process can open it again.
    scheduler: Mutex<Option<Scheduler>>,
    /// Structures built while planning (slider graphs); shared with in-process
    /// workers so that they do not build them again.
    pub cache: Arc<KernelCache>,
    /// Woken when shards may have become leasable.
    pub work_ready: Notify,
    /// Ids of jobs that changed.
    pub changes: broadcast::Sender<String>,
    pub metrics: Arc<CoordinatorMetrics>,
    /// Makes the scheduler's changes durable before calls answer.
    group: GroupCommit,
    /// Set when a write failed: the scheduler is read back from the store
    /// before the next call uses it.
    reload: AtomicBool,
    /// The store's applied count after the last call whose changes must be
    /// durable before it answers: what a call that changed nothing waits for.
    owed: AtomicU64,
    /// Where stage data lives; workers learn it when they register.
    pub stage_store: StageStoreUrl,
    /// With a stage store outside the coordinator: the largest stage output
    /// a report may carry inline, kept here (workers learn it when they
    /// register); 0 with none.
    pub inline_stage_output: usize,
    /// The replica of the store and how it stands, once replication started.
    pub replica: std::sync::OnceLock<ReplicaView>,
}

/// The replica as the services show it.
pub struct ReplicaView {
    /// The data directory's prefix it is under (what `--restore-from` takes).
    pub url: String,
    pub every: std::time::Duration,
    pub status: Arc<crate::replica::ReplicaStatus>,
}

impl Shared {
    pub fn new(
        scheduler: Scheduler,
        metrics: Arc<CoordinatorMetrics>,
        cache: Arc<KernelCache>,
        group: GroupCommit,
        stage_store: StageStoreUrl,
        inline_stage_output: usize,
    ) -> Arc<Shared> {
        // Everything the store holds at start was committed (flushed).
        group.durable_through(scheduler.store().applied());
        let (changes, _) = broadcast::channel(1024);
        Arc::new(Shared {
            scheduler: Mutex::new(Some(scheduler)),
            cache,
            work_ready: Notify::new(),
            changes,
            metrics,
            group,
            reload: AtomicBool::new(false),
            owed: AtomicU64::new(0),
            inline_stage_output: match stage_store.is_external() {
                true => inline_stage_output,
                false => 0,
            },
            stage_store,
            replica: std::sync::OnceLock::new(),
        })
    }

    /// Runs `f` on the scheduler from the blocking pool, then waits (outside
    /// the scheduler's lock) until every change applied so far, `f`'s
    /// included, is durable: a call answers nothing a crash could take back.
    pub async fn with_scheduler<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        self.call_scheduler(f, Durability::Wait).await
    }

    /// Runs `f` on the scheduler like [`Shared::with_scheduler`] but answers
    /// without waiting for a flush: for a call whose answer is soft state
    /// that a restart makes stale by itself (a lease: its attempt is of this
    /// load's epoch, and after a restart no report of it is accepted). What
    /// it applied is flushed with the next call that waits.
    pub async fn with_scheduler_unflushed<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        self.call_scheduler(f, Durability::Soft).await
    }

    async fn call_scheduler<T, F>(self: &Arc<Self>, f: F, durability: Durability) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || {
            let (result, store, ticket) = {
                let mut scheduler = shared.scheduler.lock();
                let Some(scheduler) = scheduler.as_mut() else {
                    return Err(CoordinatorError::Unavailable(
                        "the coordinator is shutting down".into(),
                    ));
                };
                if shared.reload.load(Ordering::SeqCst) {
                    scheduler.reload(now_ms()).map_err(|e| {
                        CoordinatorError::Unavailable(format!(
                            "the store failed and cannot be read back yet: {e}"
                        ))
                    })?;
                    shared.reload.store(false, Ordering::SeqCst);
                    // What the store holds now is durable (the load flushed
                    // it); the changes owed before were lost with the failure.
                    shared.owed.store(0, Ordering::SeqCst);
                }
                // A panic in `f` may leave the scheduler half changed: read
                // it back from the store before the next call uses it.
                let store = scheduler.store();
                let before = store.applied();
                let fence = SetOnPanic(&shared.reload);
                let result = f(scheduler);
                drop(fence);
                if let Err(CoordinatorError::Store(_) | CoordinatorError::StoreFull(_)) = &result {
                    shared.reload.store(true, Ordering::SeqCst);
                }
                let after = store.applied();
                // A call waits for its own changes, or, if it made none, for
                // every change before it that was not soft: a lease's writes
                // (its event) need no flush, so neither does a read after it.
                let ticket = match (durability, after > before) {
                    (Durability::Soft, _) => after,
                    (Durability::Wait, true) => {
                        shared.owed.fetch_max(after, Ordering::SeqCst);
                        after
                    }
                    (Durability::Wait, false) => shared.owed.load(Ordering::SeqCst).min(after),
                };
                (result, store, ticket)
            };
            if durability == Durability::Soft {
                return result;
            }
            if let Err(e) = shared.group.wait_durable(store.as_ref(), ticket) {
                shared.reload.store(true, Ordering::SeqCst);
                return Err(e);
            }
            result
        })
        .await
        .map_err(|e| CoordinatorError::Internal(format!("scheduler task failed: {e}")))?
    }

    /// Reads the scheduler under its lock on the calling thread, changing
    /// nothing and waiting for no flush: for copying out what work done
    /// outside the lock needs. `None` once the coordinator has shut down.
    pub fn peek<T>(&self, f: impl FnOnce(Option<&Scheduler>) -> T) -> T {
        let scheduler = self.scheduler.lock();
        f(scheduler.as_ref())
    }

    /// Drops the scheduler and with it the store, after any call in progress.
    pub fn close(&self) {
        let scheduler = self.scheduler.lock().take();
        drop(scheduler);
    }

    /// The attachment with this SHA-256 (hex), read from the store (outside
    /// the scheduler's lock): the store, not the kernel cache, holds the
    /// attachments jobs may name, since they go with the last job naming them.
    pub async fn attachment(self: &Arc<Self>, sha256: &str) -> Result<Option<Arc<[u8]>>> {
        let store = self.with_scheduler(|s| Ok(s.store())).await?;
        let key = attachment_key(sha256);
        let bytes = tokio::task::spawn_blocking(move || store.get(Tree::Blobs, &key))
            .await
            .map_err(|e| CoordinatorError::Internal(format!("reading an attachment: {e}")))??;
        Ok(bytes.map(Into::into))
    }

    /// Tells the watchers of `job` that it changed.
    pub fn changed(&self, job: &str) {
        let _ = self.changes.send(job.to_string());
    }
}
