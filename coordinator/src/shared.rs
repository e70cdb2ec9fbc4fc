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

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tally_kinds::cache::KernelCache;
use tally_stage::StageStoreUrl;
use tokio::sync::{Notify, broadcast};

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::group_commit::GroupCommit;
use crate::metrics::CoordinatorMetrics;
use crate::panic_fence::SetOnPanic;
use crate::records::attachment_key;
use crate::replica::ReplicaStatus;
use crate::scheduler::Scheduler;
use crate::store::Tree;
use crate::watchdog::{Holding, Holds, Liveness, call_name};

/// How long a call waits for the scheduler lock before it answers
/// UNAVAILABLE (the caller retries): no call waits for ever behind a stall,
/// and no blocking thread is kept past it.
pub const SCHEDULER_WAIT_LIMIT: Duration = Duration::from_secs(20);

/// How long the HTTP listener's reads wait for the scheduler lock: a scrape
/// or the status page during a stall answers at once that it cannot say.
pub const PEEK_WAIT_LIMIT: Duration = Duration::from_secs(2);

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
    /// Who holds the scheduler lock and which flush runs, since when: what
    /// the watchdog watches.
    pub holds: Arc<Holds>,
    /// Whether the coordinator serves, as the watchdog judges it.
    pub liveness: Arc<Liveness>,
    /// Fault injection: the n-th call whose name contains the text keeps the
    /// scheduler lock for ever (what a deadlock in the store does).
    stall_in: Mutex<Option<(String, u64)>>,
    stall_armed: AtomicBool,
}

/// The scheduler under its lock, with the hold marked for the watchdog
/// (released first: the fields drop in order).
struct Locked<'a> {
    _holding: Holding<'a>,
    scheduler: MutexGuard<'a, Option<Scheduler>>,
}

/// The replica as the services show it.
pub struct ReplicaView {
    /// The data directory's prefix it is under (what `--restore-from` takes).
    pub url: String,
    pub every: std::time::Duration,
    pub status: Arc<ReplicaStatus>,
}

impl Shared {
    pub fn new(
        scheduler: Scheduler,
        metrics: Arc<CoordinatorMetrics>,
        cache: Arc<KernelCache>,
        group: GroupCommit,
        stage_store: StageStoreUrl,
        inline_stage_output: usize,
        holds: Arc<Holds>,
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
            holds,
            liveness: Arc::new(Liveness::default()),
            stall_in: Mutex::new(None),
            stall_armed: AtomicBool::new(false),
        })
    }

    /// Fault injection (tests): the `nth` call from now on whose name (as
    /// the watchdog gives it) contains `call` keeps the scheduler lock for
    /// ever.
    pub fn stall_in(&self, call: &str, nth: u64) {
        *self.stall_in.lock() = Some((call.to_string(), nth.max(1)));
        self.stall_armed.store(true, Ordering::SeqCst);
    }

    /// Whether the call `by` is the one to stall in (fault injection).
    fn stalls_here(&self, by: &str) -> bool {
        if !self.stall_armed.load(Ordering::Relaxed) {
            return false;
        }
        let mut stall = self.stall_in.lock();
        match stall.as_mut() {
            Some((call, nth)) if by.contains(call.as_str()) => {
                *nth -= 1;
                *nth == 0
            }
            _ => false,
        }
    }

    /// Takes the scheduler lock for the call `by`, waiting at most `limit`:
    /// past it the call is refused as UNAVAILABLE, naming who holds it.
    fn lock(&self, by: &'static str, limit: Duration) -> Result<Locked<'_>> {
        let Some(scheduler) = self.scheduler.try_lock_for(limit) else {
            let holder = match self.holds.scheduler.held(Instant::now()) {
                Some((holder, held)) => {
                    format!(" (held by {holder} for {:.1} s)", held.as_secs_f64())
                }
                None => String::new(),
            };
            return Err(CoordinatorError::Unavailable(format!(
                "the coordinator is busy: its scheduler could not be had within {} s{holder}; try again",
                limit.as_secs_f64()
            )));
        };
        let holding = self.holds.scheduler.begin(by);
        if self.stalls_here(by) {
            tracing::warn!(
                call = by,
                "holding the scheduler lock for ever (fault injection)"
            );
            loop {
                std::thread::park();
            }
        }
        Ok(Locked {
            _holding: holding,
            scheduler,
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
        self.call_scheduler(f, Durability::Wait, SCHEDULER_WAIT_LIMIT)
            .await
    }

    /// [`Shared::with_scheduler`] waiting at most `limit` for the lock: for
    /// reads that must answer, if only to say they cannot, during a stall
    /// (the HTTP listener's).
    pub async fn with_scheduler_within<T, F>(self: &Arc<Self>, limit: Duration, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        self.call_scheduler(f, Durability::Wait, limit).await
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
        self.call_scheduler(f, Durability::Soft, SCHEDULER_WAIT_LIMIT)
            .await
    }

    async fn call_scheduler<T, F>(
        self: &Arc<Self>,
        f: F,
        durability: Durability,
        limit: Duration,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Scheduler) -> Result<T> + Send + 'static,
    {
        let shared = self.clone();
        let by = call_name::<F>();
        tokio::task::spawn_blocking(move || {
            let (result, store, ticket) = {
                let mut locked = shared.lock(by, limit)?;
                let Some(scheduler) = locked.scheduler.as_mut() else {
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
                // Leases change only inside calls: metered before each, the
                // slot time is exact (`scheduler::sharing`).
                scheduler.meter(now_ms());
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

    /// Reads the scheduler under its lock on the calling thread (a blocking
    /// one: never the runtime's), changing nothing and waiting for no flush:
    /// for copying out what work done outside the lock needs. `None` once
    /// the coordinator has shut down.
    pub fn peek<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Option<&Scheduler>) -> T,
    {
        let locked = self.lock(call_name::<F>(), SCHEDULER_WAIT_LIMIT)?;
        Ok(f(locked.scheduler.as_ref()))
    }

    /// [`Shared::peek`] from the blocking pool, waiting at most `limit` for
    /// the lock: for reads that must answer even during a stall (the HTTP
    /// listener's).
    pub async fn peek_within<T, F>(self: &Arc<Self>, limit: Duration, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Option<&Scheduler>) -> T + Send + 'static,
    {
        let shared = self.clone();
        let by = call_name::<F>();
        tokio::task::spawn_blocking(move || {
            let locked = shared.lock(by, limit)?;
            Ok(f(locked.scheduler.as_ref()))
        })
        .await
        .map_err(|e| CoordinatorError::Internal(format!("scheduler task failed: {e}")))?
    }

    /// Drops the scheduler and with it the store, after any call in progress
    /// (on a blocking thread: it waits for the lock).
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
