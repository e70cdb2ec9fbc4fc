//! Final reports sent together: while a `ReportBatch` call is in flight, the
//! reports of the shards that finish meanwhile wait, and go in the next call
//! (as a group commit does with flushes); a batch of much stage output may
//! leave while one other is in flight, since its transfer and checks take
//! longer than a flush. A worker with many short shards then
//! makes one round trip for many results instead of one each; a worker with
//! one long shard at a time sends each report at once, as before.
//!
//! While the worker still computes shards, a batch waits a few milliseconds
//! for their reports to join it (see [`LINGER`]), so that short shards share
//! one call and one flush by the dozen.
//!
//! Each report still gets its own answer, as `Report` would have given it, and
//! the shard's own loop (`reports::deliver_final_report`) retries or gives up
//! exactly as it does for a streamed report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tally_kinds::Control;
use tally_stage::pack_key;
use tally_wire::lease::LeaseId;
use tally_wire::limits::{MAX_BATCH_OUTPUT, MAX_BATCH_REPORTS};
use tally_wire::proto;
use tokio::sync::{mpsc, oneshot};

use crate::context::{Context, QueuedReport as Queued, ReportAnswer as Answer};

/// Reports with more stage output than this go through `Report` in chunks.
pub(crate) const MAX_BATCHED_OUTPUT: usize = MAX_BATCH_OUTPUT / 4;

/// Sends `report` in the next batch and waits for its answer. The sending
/// task holds the context weakly, so it ends with the worker.
pub(crate) async fn send(ctx: &Arc<Context>, report: proto::BatchedReport) -> Answer {
    let batches = &ctx.batches;
    if let Some(inbox) = batches.inbox.lock().take() {
        tokio::spawn(send_batches(Arc::downgrade(ctx), inbox));
    }
    let (answer, answered) = oneshot::channel();
    let queued = Queued { report, answer };
    if batches.queue.send(queued).is_err() {
        return Err(tonic::Status::unavailable("the worker is stopping"));
    }
    answered
        .await
        .unwrap_or_else(|_| Err(tonic::Status::unavailable("the worker is stopping")))
}

/// How long a batch waits for more reports while the worker still computes
/// shards whose reports would join it: far below a flush's share of a short
/// shard's cost, and nothing next to a long shard.
const LINGER: Duration = Duration::from_millis(5);

/// Reports that make a batch worth a flush of its own: past them a batch
/// lingers no longer.
const FULL_ENOUGH: usize = 256;

async fn send_batches(ctx: Weak<Context>, mut inbox: mpsc::UnboundedReceiver<Queued>) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    let mut next = None;
    loop {
        let first = match next.take() {
            Some(first) => first,
            None => match inbox.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut batch = Forming::new(first);
        next = batch.fill(&mut inbox, &ctx).await;
        // A batch of much output leaves while the one before it is still
        // answered (its transfer and checks, not a flush, are what it waits
        // for); a small one waits for the batches on their way, then for
        // more reports, so that short shards share flushes.
        let permits = match batch.bytes >= OVERLAPPED_OUTPUT {
            true => 1,
            false => BATCHES_IN_FLIGHT as u32,
        };
        let Ok(permit) = in_flight.clone().acquire_many_owned(permits).await else {
            return;
        };
        if next.is_none() && permits > 1 {
            next = batch.fill(&mut inbox, &ctx).await;
        }
        let Some(ctx) = ctx.upgrade() else { return };
        tokio::spawn(async move {
            send_batch(&ctx, batch.reports).await;
            drop(permit);
        });
    }
}

/// A batch being formed, and the output it carries.
struct Forming {
    reports: Vec<Queued>,
    bytes: usize,
}

impl Forming {
    fn new(first: Queued) -> Forming {
        Forming {
            bytes: first.report.output.len(),
            reports: vec![first],
        }
    }

    fn is_full(&self) -> bool {
        self.reports.len() >= MAX_BATCH_REPORTS
    }

    /// Takes the reports waiting, and those that come within [`LINGER`]
    /// while the worker still computes shards, until the batch is full: the
    /// first report that does not fit is given back.
    async fn fill(
        &mut self,
        inbox: &mut mpsc::UnboundedReceiver<Queued>,
        ctx: &Weak<Context>,
    ) -> Option<Queued> {
        let linger_until = tokio::time::Instant::now() + LINGER;
        while !self.is_full() {
            if self.reports.len() >= FULL_ENOUGH && inbox.is_empty() {
                break;
            }
            let queued = match inbox.try_recv() {
                Ok(queued) => queued,
                Err(_) => {
                    let more_coming = ctx.upgrade().is_some_and(|c| c.computing_or_queued() > 0);
                    if !more_coming {
                        break;
                    }
                    match tokio::time::timeout_at(linger_until, inbox.recv()).await {
                        Ok(Some(queued)) => queued,
                        _ => break,
                    }
                }
            };
            if let Some(back) = self.take(queued) {
                return Some(back);
            }
        }
        None
    }

    /// Adds `queued`, or gives it back if its output does not fit.
    fn take(&mut self, queued: Queued) -> Option<Queued> {
        let bytes = self.bytes + queued.report.output.len();
        if bytes > MAX_BATCH_OUTPUT {
            return Some(queued);
        }
        self.bytes = bytes;
        self.reports.push(queued);
        None
    }
}

/// Batches of much output on their way at once.
const BATCHES_IN_FLIGHT: usize = 2;

/// Stage output that makes a batch one of much output: its transfer and
/// checks, more than a flush, are what it waits for.
const OVERLAPPED_OUTPUT: usize = 64 << 10;

/// Output a batch's reports of one stage carry at least, in all, for it to
/// go into a pack: below it, a write to the stage store costs more than the
/// bytes cost the coordinator inline.
const PACK_AT_LEAST: usize = 64 << 10;

/// Packs this process has made: numbers them apart (see `pack_key`).
static PACKS_MADE: AtomicU64 = AtomicU64::new(0);

/// With a stage store and a coordinator that takes packs, the outputs that
/// would go inline with the batch's reports of one stage go instead into one
/// pack in the stage store, and those reports carry their references: the
/// coordinator then stores a reference a shard, not its bytes, and the
/// store gets one write a batch, not one a shard. A pack that cannot be
/// written leaves its outputs inline.
async fn pack(ctx: &Context, reports: &mut [proto::BatchedReport]) {
    if !ctx.takes_packed() {
        return;
    }
    let Ok(Some(store)) = ctx.stage_store() else {
        return;
    };
    let mut stages: BTreeMap<(String, u32), Vec<(usize, LeaseId)>> = BTreeMap::new();
    for (i, report) in reports.iter().enumerate() {
        if report.output.is_empty() || report.output_blob.is_some() {
            continue;
        }
        if let Ok(lease) = report.lease_id.parse::<LeaseId>() {
            let stage = (lease.job.clone(), lease.stage);
            stages.entry(stage).or_default().push((i, lease));
        }
    }
    for members in stages.into_values() {
        let bytes: usize = members.iter().map(|(i, _)| reports[*i].output.len()).sum();
        if bytes < PACK_AT_LEAST {
            continue;
        }
        let key = pack_key(&members[0].1, PACKS_MADE.fetch_add(1, Ordering::Relaxed));
        let outputs: Vec<bytes::Bytes> = members
            .iter()
            .map(|(i, _)| std::mem::take(&mut reports[*i].output))
            .collect();
        match store
            .put_pack(&key, outputs.clone(), &Control::default())
            .await
        {
            Ok(blobs) => {
                let mut own = ctx.own_outputs.lock();
                for (((i, lease), blob), output) in members.iter().zip(blobs).zip(&outputs) {
                    own.note_packed(&lease.job, lease.stage, lease.index, output, blob.digest);
                    reports[*i].output_blob = Some(proto::BlobRef::from(&blob));
                }
                ctx.stats.packs_written.fetch_add(1, Ordering::Relaxed);
                let packed = members.len() as u64;
                ctx.stats
                    .outputs_packed
                    .fetch_add(packed, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "a pack of stage outputs was not written; sending them inline");
                for ((i, _), output) in members.iter().zip(outputs) {
                    reports[*i].output = output;
                }
            }
        }
    }
}

/// One `ReportBatch` call; every report of the batch gets its answer, or the
/// call's error.
async fn send_batch(ctx: &Context, batch: Vec<Queued>) {
    let session = ctx.session();
    let (mut reports, answers): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|q| (q.report, q.answer)).unzip();
    pack(ctx, &mut reports).await;
    let count = reports.len();
    let bytes = reports.iter().map(|r| r.output.len() as u64).sum();
    let request = proto::ReportBatchRequest {
        worker_id: ctx.config.worker_id.clone(),
        session: session.clone(),
        reports,
    };
    match ctx
        .coordinator
        .report_batch(&ctx.stats, request, bytes)
        .await
    {
        Ok(response) => {
            let verdicts = response.verdicts;
            if verdicts.len() != count {
                let status = tonic::Status::internal(format!(
                    "the coordinator answered {} of {count} reports",
                    verdicts.len()
                ));
                answers
                    .into_iter()
                    .for_each(|a| drop(a.send(Err(status.clone()))));
                return;
            }
            for (verdict, answer) in verdicts.into_iter().zip(answers) {
                let _ = answer.send(answer_of(verdict));
            }
        }
        Err(status) => {
            if status.code() == tonic::Code::Unauthenticated {
                ctx.session_refused(&session);
            }
            for answer in answers {
                let _ = answer.send(Err(status.clone()));
            }
        }
    }
}

/// A verdict as `Report` would have answered it.
fn answer_of(verdict: proto::ReportVerdict) -> Answer {
    if verdict.code == 0 {
        Ok(proto::ReportResponse {
            stop: verdict.stop,
            accepted: verdict.accepted,
        })
    } else {
        Err(tonic::Status::new(
            tonic::Code::from(verdict.code),
            verdict.message,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_read_as_the_streamed_report_answers() {
        let taken = answer_of(proto::ReportVerdict {
            stop: true,
            accepted: true,
            code: 0,
            message: String::new(),
        })
        .unwrap();
        assert!(taken.stop && taken.accepted);
        let refused = answer_of(proto::ReportVerdict {
            code: tonic::Code::FailedPrecondition as i32,
            message: "attempt 1 is stale".into(),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert_eq!(refused.message(), "attempt 1 is stale");
    }

    fn queued(output: usize) -> Queued {
        let (answer, _) = oneshot::channel();
        let report = proto::BatchedReport {
            output: vec![7; output].into(),
            ..Default::default()
        };
        Queued { report, answer }
    }

    /// A batch takes reports up to its output limit and gives back the first
    /// that does not fit, counting only what it holds.
    #[test]
    fn a_batch_gives_back_the_report_past_its_output_limit() {
        let mut batch = Forming::new(queued(MAX_BATCHED_OUTPUT));
        for _ in 1..MAX_BATCH_OUTPUT / MAX_BATCHED_OUTPUT {
            assert!(batch.take(queued(MAX_BATCHED_OUTPUT)).is_none());
        }
        assert_eq!(batch.bytes, MAX_BATCH_OUTPUT);
        let back = batch.take(queued(1)).expect("no room for one byte more");
        assert_eq!(back.report.output.len(), 1);
        assert_eq!(batch.bytes, MAX_BATCH_OUTPUT);
        assert!(
            batch.take(queued(0)).is_none(),
            "a report without output fits"
        );
        assert_eq!(
            batch.reports.len(),
            MAX_BATCH_OUTPUT / MAX_BATCHED_OUTPUT + 1
        );
        assert!(!batch.is_full());
    }
}
