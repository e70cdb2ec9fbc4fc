//! One shard attempt, from its lease to its final report: computed, counted,
//! reported, and its slot given back.

use std::sync::Arc;
use std::time::Instant;

use tally_wire::proto;

use crate::context::{Context, ShardHandle};
use crate::execute;
use crate::reports::{self, Ending, ShardResult};

pub(crate) async fn run_shard(
    ctx: Arc<Context>,
    lease: proto::ShardLease,
    handle: Arc<ShardHandle>,
) {
    let lease_id = &lease.lease_id;
    // Leased ahead, the shard waits here for a slot; stopped meanwhile (a
    // revoked lease, a drain) it never starts.
    let Some(slot) = ctx.compute_slot(&handle).await else {
        let ending = match handle.is_revoked() {
            true => Ending::Stopped,
            false => Ending::HandedBack,
        };
        ctx.stats.record_abandoned();
        ctx.ended(lease_id);
        reports::deliver_final_report(&ctx, lease_id, ending).await;
        ctx.release(lease_id);
        return;
    };
    let started = Instant::now();
    tracing::debug!(lease = %lease_id, "shard started");
    let computed = execute::compute_shard(&ctx, &lease, &handle).await;
    let compute_us = (started.elapsed().as_micros() as u64).max(1);
    drop(slot);
    let ending = Ending::of(computed, handle.is_revoked(), handle.control.is_cancelled());
    let ending = match ending {
        Ending::Done(result) => Ending::Done(ShardResult {
            compute_us,
            ..result
        }),
        other => other,
    };
    match &ending {
        Ending::Done(result) => {
            // An output held for the report that is small next to the slot's
            // share leaves room for the next shard while it travels.
            if result.output.len() as u64 <= ctx.memory_share() / 8 {
                ctx.reporting(lease_id);
            }
            ctx.stats
                .record_completed(started.elapsed(), result.work_done);
            let io = result.io;
            tracing::info!(
                lease = %lease_id,
                seconds = started.elapsed().as_secs_f64(),
                read = io.read,
                written = io.written,
                spilled = io.spilled,
                "shard finished"
            );
        }
        Ending::Failed { message, .. } => {
            ctx.stats.record_failed();
            tracing::warn!(lease = %lease_id, error = %message, "shard failed");
        }
        Ending::NoRoom(message) => {
            ctx.stats.record_failed();
            tracing::warn!(lease = %lease_id, error = %message,
                "no room for the shard's files: it is given back to wait for room");
        }
        Ending::HandedBack | Ending::Stopped => ctx.stats.record_abandoned(),
    }
    ctx.ended(lease_id);
    reports::deliver_final_report(&ctx, lease_id, ending).await;
    ctx.release(lease_id);
}
