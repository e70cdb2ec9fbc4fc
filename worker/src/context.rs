//! What the worker's tasks share: its configuration, the connection to the
//! coordinator, the compute pool, the running shards and the counters.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tally_kinds::Control;
use tally_kinds::dynamic::StageInput;
use tally_kinds::kind::StageRead;
use tally_stage::store::CHECK_PATIENCE;
use tally_stage::{StageStore, StageStoreUrl};
use tally_wire::proto;
use tokio::sync::Notify;

use crate::calls::Coordinator;
use crate::config::WorkerConfig;
use crate::error::{Result, WorkerError};
use crate::metrics::{Gauges, WorkerStats};
use crate::pool::ComputePool;
use crate::spill::SpillDir;

/// The coordinator's answer to one final report.
pub(crate) type ReportAnswer = std::result::Result<proto::ReportResponse, tonic::Status>;

/// A final report waiting for the next `ReportBatch` call (see `batch.rs`),
/// and where its answer goes.
pub(crate) struct QueuedReport {
    pub report: proto::BatchedReport,
    pub answer: tokio::sync::oneshot::Sender<ReportAnswer>,
}

/// The queue of final reports waiting for the next batch; its receiving end
/// is taken by the task that sends them, started with the first report.
pub(crate) struct Batches {
    pub queue: tokio::sync::mpsc::UnboundedSender<QueuedReport>,
    pub inbox: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<QueuedReport>>>,
}

impl Batches {
    fn new() -> Batches {
        let (queue, inbox) = tokio::sync::mpsc::unbounded_channel();
        Batches {
            queue,
            inbox: Mutex::new(Some(inbox)),
        }
    }
}

/// Heartbeats when no lease asks for more.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// The fastest heartbeat: the shortest lease a job may ask for (500 ms) gets
/// three beats.
pub(crate) const MIN_HEARTBEAT_EVERY: Duration = Duration::from_millis(100);

/// The heartbeat interval for leases whose shortest lives `shortest`.
pub(crate) fn heartbeat_every(shortest: Option<Duration>) -> Duration {
    shortest
        .map(|ttl| ttl / 3)
        .unwrap_or(HEARTBEAT_EVERY)
        .clamp(MIN_HEARTBEAT_EVERY, HEARTBEAT_EVERY)
}

/// A running shard as the worker's other tasks see it.
#[derive(Default)]
pub(crate) struct ShardHandle {
    pub control: Control,
    /// The lease's time to live: heartbeats come at least three times within it.
    pub ttl: Duration,
    /// Set when the coordinator no longer wants this attempt (revoked lease,
    /// refused report): the shard then stops without a final report.
    revoked: AtomicBool,
    /// Set once the shard is computed and only its final report is on its
    /// way: its lease is still renewed, but its slot may run the next shard.
    reporting: AtomicBool,
    /// Set once the attempt has ended and only its final report (if any)
    /// is on its way.
    ended: AtomicBool,
    /// Set while the shard waits in the worker's queue for a slot (leased
    /// ahead): its lease is renewed, and it holds no slot.
    queued: AtomicBool,
    /// Wakes a queued shard that is stopped before it got a slot.
    stopped: Notify,
}

impl ShardHandle {
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Relaxed);
        self.cancel();
    }

    /// Asks the shard to stop (and hand its lease back), queued or running.
    pub(crate) fn cancel(&self) {
        self.control.cancel();
        self.stopped.notify_one();
    }

    /// Resolves once the shard is asked to stop (at once if it was).
    pub(crate) async fn stop_requested(&self) {
        self.stopped.notified().await
    }

    /// The shard leaves the queue: it has a slot, or it ends.
    pub(crate) fn dequeue(&self) {
        self.queued.store(false, Ordering::Relaxed);
    }

    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Relaxed)
    }
}

/// The decoded stage outputs a shard reads, for (job, what it reads).
pub(crate) type CachedStage = ((String, Vec<StageRead>), StageInput);

pub(crate) struct Context {
    pub config: WorkerConfig,
    /// This run's id, sent at every registration (see `config::new_incarnation`).
    pub(crate) incarnation: String,
    /// The coordinator, every call to it with its deadline.
    pub coordinator: Coordinator,
    pub pool: ComputePool,
    /// One permit a slot, and one more a compute thread (see
    /// [`dispatch_permits`]): a shard is prepared and handed to the compute
    /// pool only while it holds one; shards leased ahead wait for one in the
    /// worker's queue.
    compute_slots: Arc<tokio::sync::Semaphore>,
    /// Where shards past their memory share spill.
    pub spill: SpillDir,
    /// The running shards by lease id.
    active: Mutex<HashMap<String, Arc<ShardHandle>>>,
    slot_freed: Notify,
    leases_changed: Notify,
    /// The decoded output of the last stage fetched.
    pub stage_cache: tokio::sync::Mutex<Option<CachedStage>>,
    /// The stage outputs this worker sent inline, for the next stage's input.
    pub own_outputs: Mutex<crate::own_outputs::OwnOutputs>,
    pub stats: Arc<WorkerStats>,
    /// The session of the current registration; empty before the first.
    session: Mutex<String>,
    /// Set when a call was refused for its session (the coordinator restarted
    /// or forgot this worker): the lease loop registers again.
    session_lost: AtomicBool,
    /// Final reports waiting for the next `ReportBatch` call.
    pub batches: Batches,
    /// Set when the coordinator does not know `ReportBatch` (an older
    /// version): every report then goes through `Report`.
    pub batching_refused: AtomicBool,
    /// Where stage data lives, as the coordinator said at registration.
    stage: Mutex<StageData>,
    /// With a stage store: the largest output the coordinator takes inline
    /// with its report, as it said at registration (0: none).
    inline_stage_output: AtomicU64,
    /// Whether the coordinator takes outputs in packs (see `batch::pack`).
    takes_packed: AtomicBool,
    /// The process's peak memory, held to `config.peak_budget`.
    pub(crate) peak: crate::budget::PeakWatch,
}

/// Shards that may be prepared (input read, kernel built) and handed to the
/// compute pool at once: the slots, and one more for each compute thread.
/// Only shards leased ahead ever use the extra ones (a worker holds more
/// shards than slots only when the coordinator leased it short shards
/// ahead): each waits at the pool, ready, so a compute thread goes from one
/// short shard straight to the next instead of idling while the async side
/// reports the last and prepares the next (a wake-up and a hand-off, about
/// 0.2 ms: more than a hex cell-step shard of side 11 computes). At most
/// `threads` kernels run at once whatever the count.
fn dispatch_permits(config: &WorkerConfig) -> usize {
    config.slots.max(1) + config.threads.max(1)
}

/// Where stage data lives for this worker.
#[derive(Clone, Debug, Default)]
pub(crate) enum StageData {
    /// Streamed through the coordinator.
    #[default]
    Coordinator,
    /// In a store the worker reads and writes itself.
    Store(StageStore),
    /// In a store this worker cannot open (a directory not mounted, no
    /// credentials): every shard fails saying why.
    Unusable(String),
}

impl Context {
    pub(crate) fn new(config: WorkerConfig) -> Result<Context> {
        if config.allow_wasm && config.kernel_cache.guest_runtime().is_none() {
            return Err(WorkerError::Config(
                "wasm jobs are allowed but no sandbox was given to run them in: put one in the \
                 worker's kernel cache"
                    .into(),
            ));
        }
        crate::budget::warn_if_budget_is_small(config.memory_budget, config.slots);
        Ok(Context {
            incarnation: crate::config::new_incarnation(),
            spill: SpillDir::open(&config.spill_dir, &config.worker_id, config.spill_limit)?,
            coordinator: Coordinator::connect(&config.coordinator, &config.security)?,
            pool: ComputePool::new(config.threads),
            compute_slots: Arc::new(tokio::sync::Semaphore::new(dispatch_permits(&config))),
            active: Mutex::new(HashMap::new()),
            slot_freed: Notify::new(),
            leases_changed: Notify::new(),
            stage_cache: tokio::sync::Mutex::new(None),
            own_outputs: Mutex::new(Default::default()),
            stats: Arc::new(WorkerStats::default()),
            session: Mutex::new(String::new()),
            session_lost: AtomicBool::new(false),
            batches: Batches::new(),
            batching_refused: AtomicBool::new(false),
            stage: Mutex::new(StageData::Coordinator),
            inline_stage_output: AtomicU64::new(0),
            takes_packed: AtomicBool::new(false),
            peak: crate::budget::PeakWatch::new(config.peak_budget),
            config,
        })
    }

    /// Opens the stage store the coordinator named at registration (unless
    /// it is the one already open), and checks it (see
    /// [`StageStore::check`]). Refused if it cannot be opened or fails its
    /// check; shards then fail saying why.
    pub(crate) async fn use_stage_store(&self, named: &str) -> Result<()> {
        let url: StageStoreUrl = match named {
            // A coordinator that does not say keeps stage data itself.
            "" => StageStoreUrl::Coordinator,
            named => match named.parse() {
                Ok(url) => url,
                Err(e) => return Err(self.stage_unusable(e)),
            },
        };
        if let StageData::Store(open) = &*self.stage.lock()
            && open.url() == &url
        {
            return Ok(());
        }
        let store = match StageStore::open(&url) {
            Ok(None) => {
                *self.stage.lock() = StageData::Coordinator;
                return Ok(());
            }
            Ok(Some(store)) => store,
            Err(e) => return Err(self.stage_unusable(e)),
        };
        let checked = store.clone().with_patience(CHECK_PATIENCE).check().await;
        if let Err(e) = checked {
            return Err(self.stage_unusable(e));
        }
        tracing::info!(store = %url, "stage data in the stage store");
        *self.stage.lock() =
            StageData::Store(store.with_mid_upload_pause(self.config.pause_mid_upload));
        Ok(())
    }

    /// Notes the stage store unusable for `why`, said once here and by
    /// every shard that needs it.
    fn stage_unusable(&self, why: tally_stage::StageError) -> WorkerError {
        tracing::error!(error = %why, "the stage store cannot be used from this worker; shards that need it fail");
        *self.stage.lock() = StageData::Unusable(why.to_string());
        WorkerError::Stage(why)
    }

    /// Notes the largest stage output the coordinator takes inline, as it
    /// said at registration (at most `MAX_INLINE_STAGE_OUTPUT`).
    pub(crate) fn set_inline_stage_output(&self, bytes: u64) {
        let bytes = bytes.min(tally_wire::limits::MAX_INLINE_STAGE_OUTPUT as u64);
        self.inline_stage_output.store(bytes, Ordering::Relaxed);
    }

    /// Notes whether the coordinator takes outputs in packs (said at each
    /// registration: an older coordinator does not).
    pub(crate) fn set_takes_packed(&self, takes: bool) {
        self.takes_packed.store(takes, Ordering::Relaxed);
    }

    pub(crate) fn takes_packed(&self) -> bool {
        self.takes_packed.load(Ordering::Relaxed)
    }

    /// The part of the worker's memory budget one shard may use (see
    /// [`crate::budget::share_of`]).
    pub(crate) fn memory_share(&self) -> u64 {
        crate::budget::share_of(self.config.memory_budget, self.config.slots)
    }

    /// Whether a stage output of `len` bytes goes to the coordinator inline
    /// rather than to the stage store.
    pub(crate) fn takes_inline(&self, len: u64) -> bool {
        len <= self.inline_stage_output.load(Ordering::Relaxed)
    }

    /// Where stage data lives: `None` for the coordinator.
    pub(crate) fn stage_store(&self) -> Result<Option<StageStore>> {
        match &*self.stage.lock() {
            StageData::Coordinator => Ok(None),
            StageData::Store(store) => Ok(Some(store.clone())),
            StageData::Unusable(why) => Err(WorkerError::Stage(
                tally_stage::StageError::InvalidConfig(why.clone()),
            )),
        }
    }

    /// The session every call but registration carries.
    pub(crate) fn session(&self) -> String {
        self.session.lock().clone()
    }

    /// Keeps the session of a new registration.
    pub(crate) fn set_session(&self, session: String) {
        *self.session.lock() = session;
        self.session_lost.store(false, Ordering::Relaxed);
    }

    /// A call that carried `session` was refused as UNAUTHENTICATED: unless a
    /// newer registration has replaced it already, the worker registers again.
    pub(crate) fn session_refused(&self, session: &str) {
        if *self.session.lock() == session {
            self.session_lost.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the session was refused since the last registration.
    pub(crate) fn session_lost(&self) -> bool {
        self.session_lost.load(Ordering::Relaxed)
    }

    /// What this worker runs besides the built-in kinds, said at registration.
    pub(crate) fn capabilities(&self) -> Vec<String> {
        if self.config.allow_wasm {
            vec![tally_kinds::guest::WASM_CAPABILITY.to_string()]
        } else {
            Vec::new()
        }
    }

    /// Tracks a newly leased shard whose lease lives `ttl`, queued until it
    /// gets a slot ([`Context::compute_slot`]).
    pub(crate) fn track(&self, lease_id: &str, ttl: Duration) -> Arc<ShardHandle> {
        let handle = Arc::new(ShardHandle {
            ttl,
            queued: AtomicBool::new(true),
            ..ShardHandle::default()
        });
        let mut active = self.active.lock();
        active.insert(lease_id.to_string(), handle.clone());
        drop(active);
        self.leases_changed.notify_one();
        handle
    }

    /// The time between heartbeats: [`HEARTBEAT_EVERY`], or a third of the
    /// shortest lease held, so that a lease is renewed at least twice before
    /// it could lapse; never below [`MIN_HEARTBEAT_EVERY`].
    pub(crate) fn heartbeat_every(&self) -> Duration {
        let shortest = self.active.lock().values().map(|h| h.ttl).min();
        heartbeat_every(shortest)
    }

    /// Resolves when a shard starts (its lease may call for faster heartbeats).
    pub(crate) async fn leases_changed(&self) {
        self.leases_changed.notified().await
    }

    /// Gives back the slot of a shard whose attempt has ended.
    pub(crate) fn release(&self, lease_id: &str) {
        self.active.lock().remove(lease_id);
        self.slot_freed.notify_one();
    }

    /// The shard of `lease_id` is computed and only its report is on its way:
    /// its slot may lease the next shard meanwhile (see [`Self::free_slots`]).
    pub(crate) fn reporting(&self, lease_id: &str) {
        if let Some(shard) = self.active.lock().get(lease_id) {
            shard.reporting.store(true, Ordering::Relaxed);
        }
        self.slot_freed.notify_one();
    }

    pub(crate) async fn slot_freed(&self) {
        self.slot_freed.notified().await
    }

    pub(crate) fn running(&self) -> usize {
        self.active.lock().len()
    }

    /// Shards computing or queued: their reports are still to come.
    pub(crate) fn computing_or_queued(&self) -> usize {
        let active = self.active.lock();
        active
            .values()
            .filter(|h| !h.ended.load(Ordering::Relaxed))
            .count()
    }

    /// The attempt of `lease_id` has ended; its final report follows.
    pub(crate) fn ended(&self, lease_id: &str) {
        if let Some(shard) = self.active.lock().get(lease_id) {
            shard.ended.store(true, Ordering::Relaxed);
        }
    }

    /// Waits for a slot for `shard`: `None` if the shard is asked to stop
    /// first. The slot is held until the permit is dropped.
    pub(crate) async fn compute_slot(
        &self,
        shard: &ShardHandle,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let slot = tokio::select! {
            permit = self.compute_slots.clone().acquire_owned() => permit.ok(),
            _ = shard.stop_requested() => None,
        };
        shard.dequeue();
        slot
    }

    /// What the worker may lease now (see [`LeaseRoom`]).
    pub(crate) fn lease_room(&self) -> LeaseRoom {
        let active = self.active.lock();
        let reporting = active
            .values()
            .filter(|h| h.reporting.load(Ordering::Relaxed))
            .count();
        LeaseRoom::of(self.config.slots, active.len() - reporting, reporting)
    }

    /// The work done so far by each running shard, by lease id.
    pub(crate) fn progress(&self) -> Vec<(String, u64)> {
        let active = self.active.lock();
        let progress = active
            .iter()
            .map(|(id, h)| (id.clone(), h.control.work_done()));
        progress.collect()
    }

    /// Stops the shard of `lease_id`, if it runs here, without a final report.
    pub(crate) fn revoke(&self, lease_id: &str) {
        if let Some(shard) = self.active.lock().get(lease_id) {
            tracing::info!(lease = %lease_id, "lease revoked; stopping the shard");
            shard.revoke();
        }
    }

    /// Stops every shard, queued or running; each hands its lease back.
    pub(crate) fn cancel_all(&self) {
        for shard in self.active.lock().values() {
            shard.cancel();
        }
    }

    /// Asks every running shard for a checkpoint at its next chance: a
    /// draining worker hands each lease back with its work so far, sent as a
    /// checkpoint ([`crate::reports::forward_checkpoints`] stops the shard once
    /// one is delivered), instead of losing it.
    pub(crate) fn ask_checkpoints(&self) {
        for shard in self.active.lock().values() {
            shard.control.ask_checkpoint();
        }
    }

    /// Hands back the shards still queued (leased ahead, never started):
    /// a draining worker starts nothing new.
    pub(crate) fn hand_back_queued(&self) {
        for shard in self.active.lock().values() {
            if shard.queued.load(Ordering::Relaxed) {
                shard.cancel();
            }
        }
    }

    pub(crate) fn gauges(&self) -> Gauges {
        let active = self.active.lock();
        Gauges {
            active_shards: active.len(),
            slots: self.config.slots,
            work_in_progress: active.values().map(|h| h.control.work_done()).sum(),
            memory_budget: self.config.memory_budget,
            memory_peak: crate::budget::peak_resident(),
            spill_in_use: self.spill.room().in_use(),
            spill_peak: self.spill.room().peak(),
            spill_limit: self.spill.room().limit(),
        }
    }
}

/// Shards a worker may hold queued beyond its slots, when the coordinator
/// finds the job's shards short enough (it decides how many of these it
/// grants, from the shards' observed time).
pub(crate) const LEASE_AHEAD: usize = 128;

/// Reports of computed shards that may be on their way beyond one a slot
/// before leasing stops: several batches' worth, so that short shards keep
/// computing while a batch waits for its flush.
pub(crate) const REPORTS_ON_THEIR_WAY: usize = 4 * LEASE_AHEAD;

/// What a worker may lease: `free` shards to start at once, and `ahead` more
/// to queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseRoom {
    pub free: usize,
    pub ahead: usize,
}

impl LeaseRoom {
    /// The room of a worker of `slots` with `unstarted` shards computing or
    /// queued and `reporting` shards computed whose reports are on their
    /// way. A shard whose report is on its way holds no slot, so the next
    /// lease and input fetch overlap the report's round trip; but reports
    /// beyond what the slots and the queue hold take room again, so that
    /// reports held up (the coordinator unreachable) stop the leasing
    /// instead of piling up.
    pub(crate) fn of(slots: usize, unstarted: usize, reporting: usize) -> LeaseRoom {
        let held_up = reporting.saturating_sub(slots + REPORTS_ON_THEIR_WAY);
        let busy = unstarted + held_up;
        let room = (slots + LEASE_AHEAD).saturating_sub(busy);
        let free = slots.saturating_sub(busy).min(room);
        LeaseRoom {
            free,
            ahead: room - free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_leases_up_to_its_slots_and_queue_and_stops_when_reports_pile_up() {
        let room = |slots, unstarted, reporting| {
            let r = LeaseRoom::of(slots, unstarted, reporting);
            (r.free, r.ahead)
        };
        assert_eq!(room(2, 0, 0), (2, LEASE_AHEAD));
        assert_eq!(room(2, 2, 0), (0, LEASE_AHEAD));
        assert_eq!(room(2, 2 + LEASE_AHEAD, 0), (0, 0));
        // Computed shards reporting leave their slots to the next shards...
        let on_their_way = 2 + REPORTS_ON_THEIR_WAY;
        assert_eq!(room(2, 1, 1), (1, LEASE_AHEAD));
        assert_eq!(room(2, 0, on_their_way), (2, LEASE_AHEAD));
        // ...but reports held up beyond those take room.
        assert_eq!(room(2, 0, on_their_way + 1), (1, LEASE_AHEAD));
        assert_eq!(room(2, 0, on_their_way + 2 + LEASE_AHEAD), (0, 0));
        for slots in 1..5 {
            for unstarted in 0..=slots + LEASE_AHEAD {
                for reporting in (0..2 * (slots + REPORTS_ON_THEIR_WAY)).step_by(7) {
                    let r = LeaseRoom::of(slots, unstarted, reporting);
                    assert!(
                        unstarted + r.free <= slots.max(unstarted),
                        "never more to start than slots"
                    );
                    let held = unstarted + reporting;
                    let most = 2 * slots + LEASE_AHEAD + REPORTS_ON_THEIR_WAY;
                    assert!(
                        held + r.free + r.ahead <= most.max(held),
                        "leasing never takes a worker past its slots, queue and reports"
                    );
                }
            }
        }
    }

    #[test]
    fn heartbeats_come_three_times_per_shortest_lease() {
        let ms = Duration::from_millis;
        assert_eq!(heartbeat_every(None), HEARTBEAT_EVERY);
        assert_eq!(heartbeat_every(Some(ms(15_000))), HEARTBEAT_EVERY);
        assert_eq!(heartbeat_every(Some(ms(2_400))), ms(800));
        assert_eq!(heartbeat_every(Some(ms(30))), MIN_HEARTBEAT_EVERY);
        for ttl in [500, 501, 750, 1_000, 2_999, 3_000, 60_000] {
            let every = heartbeat_every(Some(ms(ttl)));
            assert!(
                every * 3 <= ms(ttl).max(MIN_HEARTBEAT_EVERY * 3),
                "{ttl} ms"
            );
        }
    }
}
