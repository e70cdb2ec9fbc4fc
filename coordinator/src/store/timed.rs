//! A store wrapper that times every flush (the durable part of a group
//! commit) into the coordinator's store-commit histogram, marks it for the
//! watchdog while it runs, and counts the batches applied.

use std::sync::Arc;

use crate::error::Result;
use crate::metrics::CoordinatorMetrics;
use crate::watchdog::Holds;

use super::api::{Batch, Store};
use super::wrapper::StoreWrapper;

/// Times every flush into a histogram.
pub struct TimedStore {
    inner: Arc<dyn Store>,
    commits: Arc<CoordinatorMetrics>,
    holds: Arc<Holds>,
}

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, commits: Arc<CoordinatorMetrics>, holds: Arc<Holds>) -> Self {
        TimedStore {
            inner,
            commits,
            holds,
        }
    }
}

impl StoreWrapper for TimedStore {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }

    fn wrapped_apply(&self, batch: Batch) -> Result<()> {
        self.inner.apply(batch)?;
        self.commits.store_batches.add(1);
        Ok(())
    }

    fn wrapped_flush(&self) -> Result<()> {
        let started = std::time::Instant::now();
        let _flushing = self.holds.flush.begin("the store's flush (fsync)");
        let result = self.inner.flush();
        self.commits.store_commit.observe(started.elapsed());
        result
    }
}
