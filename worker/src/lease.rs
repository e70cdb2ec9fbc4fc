//! The lease loop: register with the coordinator, lease shards up to the free
//! slots and a queue beyond them (granted for jobs of short shards only), and
//! start an attempt for each, which waits in the queue for a slot; on
//! shutdown, drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tally_wire::proto;
use tokio::task::JoinSet;

use crate::attempt;
use crate::backoff::Backoff;
use crate::config::hostname;
use crate::context::{Context, LEASE_AHEAD, LeaseRoom};
use crate::error::{Result, WorkerError};

/// With every slot taken, how long to wait for one to free before looking again.
const FULL_RECHECK: Duration = Duration::from_millis(500);

/// After the drain timeout, how long the hand-backs and final reports still
/// in flight may take. Past it the worker stops without them: when the
/// coordinator is unreachable their leases simply expire there.
pub const REPORT_GRACE: Duration = Duration::from_secs(5);

pub(crate) struct LeaseLoop {
    ctx: Arc<Context>,
    registered: bool,
    /// Set by the first registration: a stage store the worker cannot use
    /// then stops it; later (a coordinator restarted) only its shards fail.
    started: bool,
    backoff: Backoff,
    shards: JoinSet<()>,
    /// Set when a request for queue room alone got nothing (the jobs' shards
    /// are long): it is not asked again until a lease is granted.
    ahead_refused: bool,
    /// The highest coordinator epoch this worker has registered with, by
    /// the data directory's prefix in the stage store (what a coordinator
    /// restored from that prefix's replica keeps): a coordinator of the same
    /// prefix at a lower epoch was replaced by a restored one (it may still
    /// run, cut off), and its leases are refused.
    highest_epoch: std::collections::HashMap<String, u64>,
    /// The epoch of the coordinator registered with.
    epoch: u64,
}

impl LeaseLoop {
    pub(crate) fn new(ctx: Arc<Context>) -> LeaseLoop {
        LeaseLoop {
            ctx,
            registered: false,
            started: false,
            backoff: Backoff::new(),
            shards: JoinSet::new(),
            ahead_refused: false,
            highest_epoch: std::collections::HashMap::new(),
            epoch: 0,
        }
    }

    /// Leases until `shutdown` completes, then drains: running shards get the
    /// drain timeout to finish, the rest are handed back. Fails at once if the
    /// coordinator refuses the worker's credentials, or names at the first
    /// registration a stage store this worker cannot use.
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

    /// One step: register, lease, or wait for a free slot. With every slot
    /// busy the worker asks only for queue room, once the queue is half
    /// empty, so that one call carries many shards.
    async fn turn(&mut self) -> Result<()> {
        if !self.registered || self.ctx.session_lost() {
            return self.register().await;
        }
        while self.shards.try_join_next().is_some() {}
        let room = self.ctx.lease_room();
        let queue_room = room.ahead >= LEASE_AHEAD / 2 && !self.ahead_refused;
        if room.free > 0 || queue_room {
            self.lease(room).await;
        } else {
            let _ = tokio::time::timeout(FULL_RECHECK, self.ctx.slot_freed()).await;
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
            memory_budget_bytes: config.memory_budget,
            capabilities: self.ctx.capabilities(),
            incarnation: self.ctx.incarnation.clone(),
            oom_kills: crate::config::oom_kills(),
        };
        match self
            .ctx
            .coordinator
            .register(&self.ctx.stats, request)
            .await
        {
            Ok(response) => {
                tracing::info!(worker = %config.worker_id, coordinator = %config.coordinator, "registered");
                let lineage = response.stage_store.clone();
                let seen = self.highest_epoch.get(&lineage).copied().unwrap_or(0);
                if response.epoch < seen && lineage != "coordinator" {
                    tracing::error!(
                        coordinator = %config.coordinator,
                        epoch = response.epoch,
                        seen,
                        "this coordinator serves an older epoch than one this worker worked for: \
                         it was replaced by a coordinator restored from its replica; refusing its \
                         leases and registering again later"
                    );
                    self.backoff.wait().await;
                    return Ok(());
                }
                self.highest_epoch.insert(lineage, response.epoch.max(seen));
                self.epoch = response.epoch;
                let usable = self.ctx.use_stage_store(&response.stage_store).await;
                self.ctx
                    .set_inline_stage_output(response.max_inline_stage_output);
                self.ctx.set_takes_packed(response.takes_packed_outputs);
                if !self.started {
                    usable?;
                }
                self.started = true;
                self.ctx.set_session(response.session);
                self.registered = true;
                // The backoff is reset by a lease that works, not here: a
                // coordinator that registers workers but cannot lease (its
                // disk is full) must not be asked again ten times a second.
            }
            // Retrying cannot help: the operator must fix the token (a wrong
            // one, or the client token where the worker token belongs).
            Err(e)
                if matches!(
                    e.code(),
                    tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
                ) =>
            {
                return Err(WorkerError::Refused(e));
            }
            Err(e) => {
                // A coordinator that does not answer is said once (see `calls`).
                match tally_wire::deadline::not_answered(&e) {
                    true => {
                        tracing::debug!(error = %e.message(), "registration not answered; retrying")
                    }
                    false => {
                        tracing::warn!(error = %e.message(), code = ?e.code(), "registration failed; retrying")
                    }
                }
                self.backoff.wait().await;
            }
        }
        Ok(())
    }

    /// Asks for up to `room` shards and starts an attempt for each. Only a
    /// worker with a free slot waits for work to come.
    async fn lease(&mut self, room: LeaseRoom) {
        let wait = match room.free {
            0 => Duration::ZERO,
            _ => self.ctx.config.lease_wait,
        };
        let request = proto::LeaseRequest {
            worker_id: self.ctx.config.worker_id.clone(),
            free_slots: room.free as u32,
            wait_ms: wait.as_millis() as u64,
            session: self.ctx.session(),
            lease_ahead: room.ahead as u32,
        };
        match self.ctx.coordinator.lease(&self.ctx.stats, request).await {
            Ok(response) => {
                self.backoff.reset();
                let leases = response.leases;
                self.ahead_refused = room.free == 0 && leases.is_empty();
                for lease in leases {
                    let epoch = lease
                        .lease_id
                        .parse::<tally_wire::lease::LeaseId>()
                        .map_or(0, |id| tally_wire::lease::Attempt(id.attempt).epoch());
                    if epoch < self.epoch {
                        tracing::error!(lease = %lease.lease_id, epoch = self.epoch, "a lease of an older coordinator epoch refused");
                        self.registered = false;
                        continue;
                    }
                    let ttl = Duration::from_millis(lease.ttl_ms);
                    let handle = self.ctx.track(&lease.lease_id, ttl);
                    let shard = attempt::run_shard(self.ctx.clone(), lease, handle);
                    self.shards.spawn(shard);
                }
            }
            Err(e) => {
                match tally_wire::deadline::not_answered(&e) {
                    true => {
                        tracing::debug!(error = %e.message(), "lease request not answered; retrying")
                    }
                    false => {
                        tracing::warn!(error = %e.message(), code = ?e.code(), "lease request failed; retrying")
                    }
                }
                // Unavailable: the coordinator may have restarted; NotFound or
                // Unauthenticated: it does not know this worker or its session
                // (restarted, or forgot it).
                if matches!(
                    e.code(),
                    tonic::Code::Unavailable | tonic::Code::NotFound | tonic::Code::Unauthenticated
                ) {
                    self.registered = false;
                }
                self.backoff.wait().await;
            }
        }
    }

    /// Asks every running shard for a checkpoint at once: one that makes
    /// one hands its lease back as soon as it is delivered (the next worker
    /// resumes from it); the others may finish and report within the drain
    /// timeout. Then cancels the rest, which hand their leases back within
    /// [`REPORT_GRACE`]; whatever is still unreported then is dropped. So a
    /// drain ends within the drain timeout plus the grace, whether or not the
    /// coordinator answers.
    async fn drain(mut self) {
        // Shards leased ahead and not started go back at once.
        self.ctx.hand_back_queued();
        let running = self.ctx.running();
        let timeout = self.ctx.config.drain_timeout;
        if running > 0 {
            tracing::info!(
                running,
                ?timeout,
                "draining: asking running shards for a checkpoint, or to finish"
            );
        }
        self.ctx.ask_checkpoints();
        if self.join_all_within(timeout).await {
            return;
        }
        // Attempts that ended and only wait for their reports' answers
        // (a run stopped just after its job finished) hand nothing back.
        let unfinished = self.ctx.computing_or_queued();
        if unfinished > 0 {
            tracing::warn!(unfinished, "drain timeout: handing back unfinished shards");
        }
        self.ctx.cancel_all();
        if self.join_all_within(REPORT_GRACE).await {
            return;
        }
        tracing::warn!(
            unreported = self.shards.len(),
            "the coordinator did not take the last reports in time; stopping without them \
             (their leases expire at the coordinator)"
        );
        self.shards.shutdown().await;
    }

    /// Whether every attempt ended within `limit`.
    async fn join_all_within(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, async {
            while self.shards.join_next().await.is_some() {}
        })
        .await
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{self, Logs};

    /// A drain whose attempts have all ended, their reports still on their
    /// way (a run stopped just after its job finished), hands nothing back
    /// and says nothing of it.
    #[tokio::test]
    async fn a_drain_with_only_reports_on_their_way_hands_nothing_back() {
        let logs = Logs::capture();
        let (ctx, _spill) = test_support::context("http://127.0.0.1:1");
        let mut leases = LeaseLoop::new(ctx.clone());
        ctx.track("reported", Duration::from_secs(60)).dequeue();
        ctx.ended("reported");
        leases.shards.spawn(std::future::pending::<()>());
        leases.drain().await;
        assert_eq!(logs.count("drain timeout"), 0);
        assert_eq!(logs.count("did not take the last reports in time"), 1);
    }

    /// A drain that times out with a shard still computing hands it back, and says so.
    #[tokio::test]
    async fn a_drain_that_times_out_on_a_computing_shard_says_so() {
        let logs = Logs::capture();
        let (ctx, _spill) = test_support::context("http://127.0.0.1:1");
        let mut leases = LeaseLoop::new(ctx.clone());
        ctx.track("computing", Duration::from_secs(60)).dequeue();
        leases.shards.spawn(std::future::pending::<()>());
        leases.drain().await;
        assert_eq!(
            logs.count("drain timeout: handing back unfinished shards"),
            1
        );
        assert_eq!(logs.count("unfinished=1"), 1);
    }
}
