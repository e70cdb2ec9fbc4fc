//! The lease loop: register with the coordinator, lease shards up to the free
//! slots and start an attempt for each; on shutdown, drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tally_common::proto;
use tokio::task::JoinSet;

use crate::attempt;
use crate::backoff::Backoff;
use crate::config::hostname;
use crate::context::Context;
use crate::error::{Result, WorkerError};

/// With every slot taken, how long to wait for one to free before looking again.
const FULL_RECHECK: Duration = Duration::from_millis(500);

pub(crate) struct LeaseLoop {
    ctx: Arc<Context>,
    registered: bool,
    backoff: Backoff,
    shards: JoinSet<()>,
}

impl LeaseLoop {
    pub(crate) fn new(ctx: Arc<Context>) -> LeaseLoop {
        LeaseLoop {
            ctx,
            registered: false,
            backoff: Backoff::new(),
            shards: JoinSet::new(),
        }
    }

    /// Leases until `shutdown` completes, then drains: running shards get the
    /// drain timeout to finish, the rest are handed back. Fails at once if the
    /// coordinator refuses the worker's credentials.
    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        loop {
            let stop = tokio::select! {
                _ = &mut shutdown => true,
                turn = self.turn() => {
                    turn?;
                    false
                }
            };
            if stop {
                break;
            }
        }
        self.drain().await;
        Ok(())
    }

    /// One step: register, wait for a free slot, or lease.
    async fn turn(&mut self) -> Result<()> {
        if !self.registered {
            return self.register().await;
        }
        while self.shards.try_join_next().is_some() {}
        match self.ctx.free_slots() {
            0 => {
                let _ = tokio::time::timeout(FULL_RECHECK, self.ctx.slot_freed()).await;
            }
            free => self.lease(free).await,
        }
        Ok(())
    }

    async fn register(&mut self) -> Result<()> {
        let config = &self.ctx.config;
        let request = proto::RegisterRequest {
            worker_id: config.worker_id.clone(),
            hostname: hostname(),
            slots: config.slots as u32,
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        match self.ctx.client().register(request).await {
            Ok(_) => {
                tracing::info!(worker = %config.worker_id, coordinator = %config.coordinator, "registered");
                self.registered = true;
                self.backoff.reset();
            }
            // Retrying cannot help: the operator must fix the token.
            Err(e) if e.code() == tonic::Code::Unauthenticated => return Err(WorkerError::Rpc(e)),
            Err(e) => {
                tracing::warn!(error = %e.message(), "coordinator unreachable; retrying");
                self.backoff.wait().await;
            }
        }
        Ok(())
    }

    /// Asks for up to `free` shards and starts an attempt for each.
    async fn lease(&mut self, free: usize) {
        let request = proto::LeaseRequest {
            worker_id: self.ctx.config.worker_id.clone(),
            free_slots: free as u32,
            wait_ms: self.ctx.config.lease_wait.as_millis() as u64,
        };
        match self.ctx.client().lease(request).await {
            Ok(response) => {
                self.backoff.reset();
                for lease in response.into_inner().leases {
                    let handle = self.ctx.track(&lease.lease_id);
                    let shard = attempt::run_shard(self.ctx.clone(), lease, handle);
                    self.shards.spawn(shard);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.message(), code = ?e.code(), "lease request failed; retrying");
                if e.code() == tonic::Code::Unavailable {
                    self.registered = false;
                }
                self.backoff.wait().await;
            }
        }
    }

    /// Lets the running shards finish within the drain timeout, then cancels
    /// the rest, which hand their leases back.
    async fn drain(mut self) {
        let running = self.ctx.running();
        let timeout = self.ctx.config.drain_timeout;
        if running > 0 {
            tracing::info!(running, ?timeout, "draining: finishing running shards");
        }
        let drained = tokio::time::timeout(timeout, async {
            while self.shards.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!("drain timeout: handing back unfinished shards");
            self.ctx.cancel_all();
            while self.shards.join_next().await.is_some() {}
        }
    }
}
