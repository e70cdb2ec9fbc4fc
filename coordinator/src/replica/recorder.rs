//! The store wrapper that records every batch applied for the replica: the
//! group commit is unchanged (an apply copies its batch into a queue, a
//! flush notes which batches it made durable), and the shipper takes the
//! durable ones from the queue in the background.
//!
//! *Invariant:* the queue holds, in order and without a gap, every batch
//! applied since its generation's first change, numbered one after another;
//! when that cannot hold (a failed apply or flush may have lost batches, or
//! the queue outgrew its bound), the queue is emptied and marked broken, and
//! the next generation starts from a snapshot instead of a parent.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::now_ms;
use crate::error::Result;
use crate::store::{Batch, Store, StoreWrapper};

/// Bytes of batches the queue holds at most while the object store does not
/// take them: past it they are dropped, and replication starts again from a
/// snapshot once it can.
pub const QUEUE_LIMIT: u64 = 512 * 1024 * 1024;

/// One batch waiting to be shipped.
pub struct Recorded {
    /// Its place among every batch recorded (across generations).
    pub order: u64,
    pub generation: u64,
    pub seq: u64,
    pub batch: Batch,
    pub bytes: u64,
    pub applied_ms: u64,
}

#[derive(Default)]
pub struct Queue {
    /// Whether batches are recorded (replication has started).
    pub active: bool,
    /// The generation batches are numbered in, and the number of its last.
    pub generation: u64,
    pub last_seq: u64,
    /// Batches recorded, of this generation or the one before it.
    pub pending: VecDeque<Recorded>,
    pub pending_bytes: u64,
    /// Batches recorded so far, and how many of them are durable.
    pub recorded: u64,
    pub durable: u64,
    /// Batches may have been lost from the queue: the next generation has no
    /// parent (see the module's invariant).
    pub broken: Option<String>,
    /// Batches taken from the queue and being shipped: how many, and when
    /// the first of them was applied.
    pub in_flight: (u64, u64),
    /// Since when the replica has had no consistent point past the store's
    /// changes (a gap in the log, until the next whole snapshot).
    pub unprotected_since_ms: Option<u64>,
    /// Held across each recorded apply, from the store's write to the
    /// batch's number: whoever must see the store and the numbering agree
    /// (a generation's beginning, a snapshot's ends) takes it, on a
    /// blocking thread. The queue's own lock is never held across a write,
    /// so that its readers (the shipper, the metrics) never wait on the disk.
    pub applying: Arc<Mutex<()>>,
}

impl Queue {
    fn break_off(&mut self, why: String) {
        if self.active && self.broken.is_none() {
            tracing::warn!(why = %why, "the replica's log stops here; it starts again from a snapshot");
            self.broken = Some(why);
            self.unprotected_since_ms.get_or_insert_with(now_ms);
        }
        self.pending.clear();
        self.pending_bytes = 0;
    }

    /// Starts a new generation: the batches from now on are numbered from 1
    /// in it. Returns the last change of the one before (its parent point).
    pub fn begin(&mut self, generation: u64) -> u64 {
        let through = self.last_seq;
        self.generation = generation;
        self.last_seq = 0;
        self.active = true;
        self.broken = None;
        through
    }
}

/// A store whose applied batches are recorded for the replica.
pub struct RecordingStore {
    inner: Arc<dyn Store>,
    queue: Arc<Mutex<Queue>>,
    applying: Arc<Mutex<()>>,
}

impl RecordingStore {
    pub fn new(inner: Arc<dyn Store>) -> (RecordingStore, Arc<Mutex<Queue>>) {
        let queue = Arc::new(Mutex::new(Queue::default()));
        let applying = queue.lock().applying.clone();
        let store = RecordingStore {
            inner,
            queue: queue.clone(),
            applying,
        };
        (store, queue)
    }
}

/// Runs `f` on the queue with no recorded apply in progress, on the blocking
/// pool (it may wait for a write to the disk).
pub async fn with_no_apply<T: Send + 'static>(
    queue: &Arc<Mutex<Queue>>,
    f: impl FnOnce(&mut Queue) -> T + Send + 'static,
) -> Result<T> {
    let queue = queue.clone();
    tokio::task::spawn_blocking(move || {
        let applying = queue.lock().applying.clone();
        let _no_apply = applying.lock();
        let mut queue = queue.lock();
        f(&mut queue)
    })
    .await
    .map_err(|e| crate::error::CoordinatorError::Internal(format!("the replica's queue: {e}")))
}

fn batch_bytes(batch: &Batch) -> u64 {
    let writes = batch.writes.iter();
    writes
        .map(|w| 16 + w.key.len() as u64 + w.value.as_ref().map_or(0, |v| v.len() as u64))
        .sum()
}

impl StoreWrapper for RecordingStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    fn wrapped_apply(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Held across the apply: batches are numbered in the order the store
        // applies them.
        // (Held in every case: a generation that begins while a batch is
        // applied unrecorded could miss it in its snapshot and its log.)
        let _applying = self.applying.lock();
        // Nothing is recorded before replication starts (the first snapshot
        // reads it), nor past a gap until the next generation begins.
        let recorded = {
            let queue = self.queue.lock();
            queue.active && queue.broken.is_none()
        };
        if !recorded {
            return self.inner.apply(batch);
        }
        let copy = batch.clone();
        if let Err(e) = self.inner.apply(batch) {
            self.queue
                .lock()
                .break_off(format!("a store write failed: {e}"));
            return Err(e);
        }
        let bytes = batch_bytes(&copy);
        let mut queue = self.queue.lock();
        if queue.pending_bytes + bytes > QUEUE_LIMIT {
            let why = format!(
                "more than {} MiB of changes waited to be shipped",
                QUEUE_LIMIT >> 20
            );
            queue.break_off(why);
            return Ok(());
        }
        queue.last_seq += 1;
        queue.recorded += 1;
        let (generation, seq, order) = (queue.generation, queue.last_seq, queue.recorded);
        queue.pending_bytes += bytes;
        queue.pending.push_back(Recorded {
            order,
            generation,
            seq,
            batch: copy,
            bytes,
            applied_ms: now_ms(),
        });
        Ok(())
    }

    fn wrapped_flush(&self) -> Result<()> {
        // Every batch numbered by now was applied before the flush starts.
        let target = self.queue.lock().recorded;
        match self.inner.flush() {
            Ok(()) => {
                let mut queue = self.queue.lock();
                queue.durable = queue.durable.max(target);
                Ok(())
            }
            Err(e) => {
                self.queue
                    .lock()
                    .break_off(format!("a store flush failed: {e}"));
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Tree};

    fn put(n: u8) -> Batch {
        let mut b = Batch::default();
        b.put(Tree::Jobs, vec![n], vec![n; 3]);
        b
    }

    #[test]
    fn batches_are_numbered_in_order_and_durable_after_their_flush() {
        let (store, queue) = RecordingStore::new(Arc::new(MemoryStore::new()));
        store.apply(put(1)).unwrap();
        assert!(
            queue.lock().pending.is_empty(),
            "nothing recorded before replication starts"
        );
        assert_eq!(queue.lock().begin(1), 0);
        store.apply(put(2)).unwrap();
        store.apply(Batch::default()).unwrap();
        store.apply(put(3)).unwrap();
        {
            let q = queue.lock();
            let seqs: Vec<u64> = q.pending.iter().map(|r| r.seq).collect();
            assert_eq!(seqs, vec![1, 2]);
            assert_eq!(q.durable, 0);
        }
        store.flush().unwrap();
        assert_eq!(queue.lock().durable, 2);
        // A new generation numbers from 1 again; its parent point is 2.
        assert_eq!(queue.lock().begin(2), 2);
        store.apply(put(4)).unwrap();
        let q = queue.lock();
        let last = q.pending.back().unwrap();
        assert_eq!((last.generation, last.seq), (2, 1));
        assert_eq!(store.get(Tree::Jobs, &[4]).unwrap(), Some(vec![4; 3]));
    }
}
