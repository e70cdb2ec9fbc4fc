//! Final reports sent together: while two `ReportBatch` calls are in flight, the
//! reports of the shards that finish meanwhile wait, and go in the next call
//! (as a group commit does with flushes). A worker with many short shards then
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

use std::sync::{Arc, Weak};
use std::time::Duration;

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
        let mut bytes = first.report.output.len();
        let mut batch = vec![first];
        let linger_until = tokio::time::Instant::now() + LINGER;
        while batch.len() < MAX_BATCH_REPORTS {
            if batch.len() >= FULL_ENOUGH && inbox.is_empty() {
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
            bytes += queued.report.output.len();
            if bytes > MAX_BATCH_OUTPUT {
                next = Some(queued);
                break;
            }
            batch.push(queued);
        }
        let Some(strong) = ctx.upgrade() else { return };
        // A batch leaves while the one before it is still answered: the
        // coordinator commits them in one flush or in two that overlap.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        tokio::spawn(async move {
            send_batch(&strong, batch).await;
            drop(permit);
        });
    }
}

/// Batches on their way at once.
const BATCHES_IN_FLIGHT: usize = 2;

/// One `ReportBatch` call; every report of the batch gets its answer, or the
/// call's error.
async fn send_batch(ctx: &Context, batch: Vec<Queued>) {
    let session = ctx.session();
    let (reports, answers): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|q| (q.report, q.answer)).unzip();
    let count = reports.len();
    let request = proto::ReportBatchRequest {
        worker_id: ctx.config.worker_id.clone(),
        session: session.clone(),
        reports,
    };
    match ctx.client().report_batch(request).await {
        Ok(response) => {
            let verdicts = response.into_inner().verdicts;
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
}
