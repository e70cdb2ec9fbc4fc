//! Ships the store's changes to the replica in the background: every
//! `--replicate-every`, the durable batches the recorder queued go up as one
//! log segment of the current generation; a generation begins with a
//! manifest and a snapshot read while the coordinator serves, and a new one
//! begins when the log since the snapshot outgrows it (then its parent is the
//! old one, so a restore has a point while the new snapshot is still being
//! written). Nothing here waits on the group commit, and the group commit
//! never waits on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tally_stage::StageStore;
use tokio::task::JoinHandle;

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::store::{Store, Tree};

use super::format::{
    Manifest, Parent, REPLICA_DIR, ReplicaObject, SnapshotDone, encode_change, encode_entry,
    encode_json, manifest_key, segment_key, snapshot_done_key, snapshot_part_key,
};
use super::recorder::{Queue, Recorded, with_no_apply};

/// A snapshot part or log segment holds about this many bytes at most (one
/// change larger than it goes up alone).
const OBJECT_BYTES: usize = 32 * 1024 * 1024;

/// A new generation begins when the log since the snapshot exceeds both the
/// snapshot and this.
const COMPACT_AFTER: u64 = 64 * 1024 * 1024;

/// How the replica stands, for `/metrics` and `tally doctor`: read live
/// from the recorder's queue, so that "nothing waits" means the replica has
/// every change the store has made.
pub struct ReplicaStatus {
    queue: Arc<Mutex<Queue>>,
    pub shipped_changes: AtomicU64,
    pub shipped_bytes: AtomicU64,
    pub generation: AtomicU64,
    /// The newest generation whose snapshot is whole.
    pub snapshot_generation: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

impl ReplicaStatus {
    pub fn new(queue: Arc<Mutex<Queue>>) -> ReplicaStatus {
        ReplicaStatus {
            queue,
            shipped_changes: AtomicU64::default(),
            shipped_bytes: AtomicU64::default(),
            generation: AtomicU64::default(),
            snapshot_generation: AtomicU64::default(),
            last_error: Mutex::new(None),
        }
    }

    /// Changes applied and not yet in the replica (those being shipped
    /// included), and since when the oldest has waited (ms since the Unix
    /// epoch; 0 when none waits). While the replica has no consistent point
    /// past a gap (its log broken, or the snapshot of a generation without a
    /// parent not whole yet), the wait counts from the gap.
    pub fn waiting(&self) -> (u64, u64) {
        let queue = self.queue.lock();
        let changes = queue.pending.len() as u64 + queue.in_flight.0;
        let oldest = [
            queue.pending.front().map(|r| r.applied_ms),
            (queue.in_flight.0 > 0).then_some(queue.in_flight.1),
            queue.unprotected_since_ms,
        ];
        (changes, oldest.into_iter().flatten().min().unwrap_or(0))
    }

    /// How far the replica is behind the store now (ms).
    pub fn lag_ms(&self, now_ms: u64) -> u64 {
        match self.waiting().1 {
            0 => 0,
            since => now_ms.saturating_sub(since),
        }
    }

    pub fn pending_changes(&self) -> u64 {
        self.waiting().0
    }
}

/// The data directory's hold on its stage-store prefix, as the shipper asks
/// it (`stage_owner::StageOwner` above the replica implements it).
pub trait PrefixHold: Send + Sync {
    /// Whether another coordinator has taken the prefix: nothing is
    /// shipped there any more.
    fn is_lost(&self) -> bool;
}

/// What the shipper works with.
pub struct Shipper {
    /// The store as the scheduler writes it (the snapshot reads it).
    pub store: Arc<dyn Store>,
    pub queue: Arc<Mutex<Queue>>,
    /// The data directory's own prefix in the stage store.
    pub objects: StageStore,
    pub status: Arc<ReplicaStatus>,
    /// The hold on the prefix: nothing is shipped once another coordinator
    /// took it.
    pub owner: Option<Arc<dyn PrefixHold>>,
    /// The data directory, named in manifests.
    pub data: String,
    /// A restored store: the generation its queue was begun in before the
    /// load, and the restored point it continues.
    pub continues: Option<(u64, Parent)>,
}

/// The generation being written and its snapshot.
struct Current {
    generation: u64,
    snapshot: Option<JoinHandle<Result<SnapshotDone>>>,
    /// The whole snapshot, once written, and the log bytes shipped since.
    done: Option<SnapshotDone>,
    log_bytes: u64,
    shipped_seq: u64,
}

impl Shipper {
    /// Ships every `every` until `stop` resolves, then ships what is left
    /// (for at most `last_limit`). Returns only then; failures are logged and
    /// retried at the next round.
    pub async fn run(
        self,
        every: Duration,
        stop: impl std::future::Future<Output = ()>,
        last_limit: Duration,
    ) {
        // A restored store's changes are recorded from its load on, in the
        // generation the restore chose, continuing the point it restored.
        let continued = match self.continues {
            Some((generation, parent)) => match self.open(generation, Some(parent)).await {
                Ok(current) => Some(current),
                Err(e) => {
                    self.failed(&e);
                    None
                }
            },
            None => None,
        };
        let mut current = loop {
            if let Some(current) = continued {
                break current;
            }
            match self.begin(None).await {
                Ok(current) => break current,
                Err(e) => {
                    self.failed(&e);
                    tokio::time::sleep(every).await;
                }
            }
        };
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = &mut stop => break,
            }
            if let Err(e) = self.round(&mut current).await {
                self.failed(&e);
            }
        }
        if self.lost() {
            return;
        }
        let last = tokio::time::timeout(last_limit, self.ship_log(&mut current)).await;
        match last {
            Ok(Ok(())) => tracing::info!("the replica has every change"),
            Ok(Err(e)) => tracing::warn!(error = %e, "the last changes were not shipped"),
            Err(_) => tracing::warn!(?last_limit, "the last changes were not shipped in time"),
        }
        if let Some(snapshot) = current.snapshot.take() {
            snapshot.abort();
        }
    }

    fn failed(&self, e: &CoordinatorError) {
        tracing::warn!(error = %e, "replicating the store failed; trying again");
        *self.status.last_error.lock() = Some(e.to_string());
    }

    fn lost(&self) -> bool {
        self.owner.as_ref().is_some_and(|o| o.is_lost())
    }

    async fn round(&self, current: &mut Current) -> Result<()> {
        if self.lost() {
            return Err(CoordinatorError::FailedPrecondition(
                "the stage-store prefix was taken by another coordinator: nothing is shipped"
                    .into(),
            ));
        }
        // Left set until the next generation begins: nothing is recorded
        // meanwhile, and the snapshot reads it all.
        let broken = self.queue.lock().broken.clone();
        if let Some(why) = broken {
            tracing::info!(why = %why, "the replica begins a generation from a snapshot");
            if let Some(snapshot) = current.snapshot.take() {
                snapshot.abort();
            }
            *current = self.begin(None).await?;
        }
        self.ship_log(current).await?;
        if let Some(snapshot) = current.snapshot.take_if(|s| s.is_finished()) {
            let written = snapshot
                .await
                .map_err(|e| CoordinatorError::Internal(format!("the snapshot task: {e}")))?;
            match written {
                Ok(done) => {
                    tracing::info!(
                        generation = current.generation,
                        entries = done.entries,
                        bytes = done.bytes,
                        "the replica's snapshot is whole"
                    );
                    current.done = Some(done);
                }
                // The log went on: a new generation, whose parent is this
                // one, takes another snapshot.
                Err(e) => {
                    self.failed(&e);
                    let parent = Parent {
                        generation: current.generation,
                        through: 0,
                    };
                    *current = self.begin(Some(parent)).await?;
                    return Ok(());
                }
            }
        }
        if let Some(done) = &current.done
            && current.shipped_seq >= done.to
            && self.status.snapshot_generation.load(Ordering::Relaxed) != current.generation
        {
            self.status
                .snapshot_generation
                .store(current.generation, Ordering::Relaxed);
            self.queue.lock().unprotected_since_ms = None;
            self.remove_older(current.generation).await?;
        }
        let compact = current
            .done
            .as_ref()
            .is_some_and(|d| current.log_bytes > d.bytes.max(COMPACT_AFTER));
        if compact {
            let parent = Parent {
                generation: current.generation,
                through: 0,
            };
            *current = self.begin(Some(parent)).await?;
        }
        *self.status.last_error.lock() = None;
        Ok(())
    }

    /// Begins the next generation: numbers the changes from now on in it,
    /// writes its manifest (with `parent`, whose `through` is filled in here)
    /// and starts its snapshot.
    async fn begin(&self, parent: Option<Parent>) -> Result<Current> {
        let listed = self.objects.list(Some(REPLICA_DIR)).await?;
        let newest = listed
            .iter()
            .filter_map(|k| ReplicaObject::parse(k))
            .map(|o| o.generation())
            .max()
            .unwrap_or(0);
        let generation = newest + 1;
        let unprotected = parent.is_none();
        let through = with_no_apply(&self.queue, move |queue| {
            let through = queue.begin(generation);
            if unprotected && queue.unprotected_since_ms.is_none() {
                queue.unprotected_since_ms = Some(now_ms());
            }
            through
        })
        .await?;
        let parent = parent.map(|p| Parent { through, ..p });
        self.open(generation, parent).await
    }

    /// Writes the manifest of `generation` (the queue numbers changes in it
    /// already) and starts its snapshot.
    async fn open(&self, generation: u64, parent: Option<Parent>) -> Result<Current> {
        let manifest = Manifest {
            generation,
            parent,
            created_ms: now_ms(),
            data: self.data.clone(),
        };
        let written = self
            .objects
            .put_sealed(
                &manifest_key(generation),
                vec![encode_json(&manifest).into()],
            )
            .await;
        if let Err(e) = written {
            // Its changes could not be read without it.
            self.queue.lock().broken = Some("a manifest was not written".into());
            return Err(e.into());
        }
        self.status.generation.store(generation, Ordering::Relaxed);
        let snapshot = tokio::spawn(snapshot(
            self.store.clone(),
            self.queue.clone(),
            self.objects.clone(),
            generation,
        ));
        tracing::info!(generation, ?parent, "the replica began a generation");
        Ok(Current {
            generation,
            snapshot: Some(snapshot),
            done: None,
            log_bytes: 0,
            shipped_seq: 0,
        })
    }

    /// Ships the durable changes queued, in segments; on failure they go
    /// back to the queue's front for the next round.
    async fn ship_log(&self, current: &mut Current) -> Result<()> {
        let taken: Vec<Recorded> = {
            let mut queue = self.queue.lock();
            let durable = queue.durable;
            let n = queue
                .pending
                .iter()
                .take_while(|r| r.order <= durable)
                .count();
            let taken: Vec<Recorded> = queue.pending.drain(..n).collect();
            queue.in_flight = (
                taken.len() as u64,
                taken.first().map_or(0, |r| r.applied_ms),
            );
            taken
        };
        let mut sent = 0;
        let result = self.ship_taken(&taken, &mut sent, current).await;
        let unsent = taken.into_iter().skip(sent);
        let mut queue = self.queue.lock();
        queue.in_flight = (0, 0);
        if result.is_err() && queue.broken.is_none() {
            for r in unsent.rev() {
                queue.pending.push_front(r);
            }
        }
        result
    }

    async fn ship_taken(
        &self,
        taken: &[Recorded],
        sent: &mut usize,
        current: &mut Current,
    ) -> Result<()> {
        while *sent < taken.len() {
            let generation = taken[*sent].generation;
            let first = taken[*sent].seq;
            let mut body = Vec::new();
            let mut end = *sent;
            while end < taken.len()
                && taken[end].generation == generation
                && (end == *sent || body.len() < OBJECT_BYTES)
            {
                encode_change(taken[end].seq, &taken[end].batch, &mut body);
                end += 1;
            }
            let last = taken[end - 1].seq;
            let bytes = body.len() as u64;
            let written = self
                .objects
                .put_sealed(&segment_key(generation, first, last), vec![body.into()])
                .await?;
            let changes = (end - *sent) as u64;
            let recorded: u64 = taken[*sent..end].iter().map(|r| r.bytes).sum();
            {
                let mut queue = self.queue.lock();
                queue.pending_bytes = queue.pending_bytes.saturating_sub(recorded);
                queue.in_flight = match taken.get(end) {
                    Some(next) => ((taken.len() - end) as u64, next.applied_ms),
                    None => (0, 0),
                };
            }
            self.status
                .shipped_changes
                .fetch_add(changes, Ordering::Relaxed);
            self.status
                .shipped_bytes
                .fetch_add(written, Ordering::Relaxed);
            if generation == current.generation {
                current.log_bytes += bytes;
                current.shipped_seq = last;
            }
            *sent = end;
        }
        Ok(())
    }

    /// Deletes the generations before the one before `newest` (whose
    /// snapshot is whole): one older point is kept in case the newest is
    /// found damaged.
    async fn remove_older(&self, newest: u64) -> Result<()> {
        let listed = self.objects.list(Some(REPLICA_DIR)).await?;
        let objects: Vec<(String, ReplicaObject)> = listed
            .into_iter()
            .filter_map(|k| ReplicaObject::parse(&k).map(|o| (k, o)))
            .collect();
        let whole = |g: u64| {
            objects
                .iter()
                .any(|(_, o)| *o == ReplicaObject::SnapshotDone { generation: g })
        };
        let keep_from = objects
            .iter()
            .map(|(_, o)| o.generation())
            .filter(|&g| g < newest && whole(g))
            .max()
            .unwrap_or(newest);
        for (key, object) in &objects {
            if object.generation() < keep_from {
                self.objects.delete(key).await?;
            }
        }
        Ok(())
    }
}

/// Reads every entry of the store (while it changes) and writes them as the
/// snapshot of `generation`: changes from the first not yet applied when the
/// read begins to the last applied when it ends are replayed over it.
async fn snapshot(
    store: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
    objects: StageStore,
    generation: u64,
) -> Result<SnapshotDone> {
    // Read with no apply in progress: every change the store holds when the
    // read begins (ends) is numbered at most `from` (`to`).
    let seq_now = |queue: Arc<Mutex<Queue>>| async move {
        with_no_apply(&queue, move |queue| match queue.generation == generation {
            true => Ok(queue.last_seq),
            false => Err(CoordinatorError::Unavailable(format!(
                "generation {generation} was left before its snapshot was whole"
            ))),
        })
        .await
    };
    let from = seq_now(queue.clone()).await??;
    let (parts_tx, mut parts_rx) = tokio::sync::mpsc::channel::<Result<(Vec<u8>, u64)>>(2);
    let reader = tokio::task::spawn_blocking(move || {
        let send = |part| parts_tx.blocking_send(part).is_ok();
        let mut body = Vec::new();
        let mut entries = 0u64;
        for tree in Tree::ALL {
            let keys = match store.keys(tree) {
                Ok(keys) => keys,
                Err(e) => return send(Err(e)),
            };
            for key in keys {
                let value = match store.get(tree, &key) {
                    Ok(Some(value)) => value,
                    // Removed since the keys were listed: the log has it.
                    Ok(None) => continue,
                    Err(e) => return send(Err(e)),
                };
                encode_entry(tree, &key, &value, &mut body);
                entries += 1;
                if body.len() >= OBJECT_BYTES && !send(Ok((std::mem::take(&mut body), entries))) {
                    return false;
                }
            }
        }
        body.is_empty() || send(Ok((body, entries)))
    });
    let (mut parts, mut bytes, mut entries) = (0u32, 0u64, 0u64);
    while let Some(part) = parts_rx.recv().await {
        let (body, counted) = part?;
        parts += 1;
        bytes += body.len() as u64;
        entries = counted;
        objects
            .put_sealed(&snapshot_part_key(generation, parts), vec![body.into()])
            .await?;
    }
    let whole = reader
        .await
        .map_err(|e| CoordinatorError::Internal(format!("the snapshot reader: {e}")))?;
    if !whole {
        return Err(CoordinatorError::Internal(
            "the snapshot reader stopped early".into(),
        ));
    }
    let done = SnapshotDone {
        from,
        to: seq_now(queue.clone()).await??,
        parts,
        entries,
        bytes,
    };
    objects
        .put_sealed(
            &snapshot_done_key(generation),
            vec![encode_json(&done).into()],
        )
        .await?;
    Ok(done)
}
