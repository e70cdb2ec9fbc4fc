//! The tally worker: registers with a coordinator, leases shards up to its free
//! slots, runs each on the dedicated [`pool::ComputePool`], streams checkpoints
//! while it computes, and reports each result until the coordinator has it.
//!
//! The worker holds no durable state: everything it has not reported is lost on a
//! crash, and the coordinator re-leases the shard (from its last accepted
//! checkpoint) once the lease expires.
//!
//! Layer: above the stage store, the kinds, the wire and the kernels (whose
//! bucket framing it reads stage data by); below the binary. Outside its tests
//! it imports no kind's module, and never the coordinator.
//!
//! Modules, from the top; a module imports only modules below it:
//! - `lease` (the lease loop and the drain) starts an `attempt` per leased
//!   shard, which has `execute` compute it (the only calls into the kind
//!   layer) and `reports` send its checkpoints and final report;
//! - `execute` reads the stage data through `held` (the outputs the
//!   coordinator holds, and the worker's own) and `fetch` (every fetch, with
//!   its retries); `reports` sends final reports in batches through `batch`;
//! - `heartbeat` and `http` run beside the loop;
//! - all of them share the `context`, which holds the worker's parts: `calls`
//!   (every call to the coordinator, each with its deadline), `spill` (the
//!   spill directory), `budget` (each slot's share of the memory),
//!   `own_outputs` and the compute `pool`;
//! - `config`, `error`, `metrics` and `backoff` are the ground.

#![forbid(unsafe_code)]

mod attempt;
mod backoff;
mod batch;
mod budget;
mod calls;
mod config;
mod context;
mod error;
mod execute;
mod fetch;
mod heartbeat;
mod held;
mod http;
mod lease;
mod metrics;
mod own_outputs;
pub mod pool;
mod reports;
mod spill;
mod spill_room;
#[cfg(test)]
mod test_support;

use std::future::Future;
use std::sync::Arc;

pub use budget::budget_refusal;
pub use config::{WorkerConfig, default_spill_dir, default_worker_id, machine_memory};
pub use error::{Result, WorkerError};
pub use lease::REPORT_GRACE;
pub use metrics::WorkerStats;

/// Runs the worker until `shutdown` completes, then drains: no new leases,
/// running shards get `drain_timeout` to finish, the rest are handed back.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<Arc<WorkerStats>> {
    let ctx = Arc::new(context::Context::new(config)?);
    let metrics_server = match ctx.config.http {
        Some(addr) => Some(http::serve_metrics(ctx.clone(), addr).await?),
        None => None,
    };
    let heartbeat = tokio::spawn(heartbeat::heartbeat_loop(ctx.clone()));
    let leased = lease::LeaseLoop::new(ctx.clone()).run(shutdown).await;
    ctx.spill.remove();
    heartbeat.abort();
    if let Some(server) = metrics_server {
        server.abort();
    }
    leased.map(|()| ctx.stats.clone())
}
