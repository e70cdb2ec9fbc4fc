//! The heartbeat: once a second, or three times within the shortest lease it
//! holds, the worker tells the coordinator how far each running shard has got,
//! which renews their leases, and stops the shards whose leases the
//! coordinator has revoked. It also holds the process's peak memory to its
//! budget (`budget::PeakWatch`).

use std::sync::Arc;

use tally_wire::proto;

use crate::context::Context;

/// Beats until aborted.
pub(crate) async fn heartbeat_loop(ctx: Arc<Context>) {
    let mut last = tokio::time::Instant::now();
    loop {
        // A new lease may be shorter than the interval: look again when one starts.
        let next = last + ctx.heartbeat_every();
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = ctx.leases_changed() => continue,
        }
        last = tokio::time::Instant::now();
        ctx.peak.check();
        let leases = ctx
            .progress()
            .into_iter()
            .map(|(lease_id, work_done)| proto::LeaseProgress {
                lease_id,
                work_done,
            })
            .collect();
        let session = ctx.session();
        let request = proto::HeartbeatRequest {
            worker_id: ctx.config.worker_id.clone(),
            leases,
            session: session.clone(),
        };
        // A heartbeat is not retried: the next beat, at most a second
        // later, carries newer progress.
        match ctx.coordinator.heartbeat(&ctx.stats, request).await {
            Ok(response) => {
                for id in response.revoked_lease_ids {
                    ctx.revoke(&id);
                }
            }
            Err(e) if e.code() == tonic::Code::Unauthenticated => {
                tracing::debug!(error = %e.message(), "heartbeat refused; registering again");
                ctx.session_refused(&session);
            }
            Err(e) => tracing::debug!(error = %e.message(), "heartbeat failed"),
        }
    }
}
