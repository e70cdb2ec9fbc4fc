//! A worker's reports, from the moment they are read off the wire to their
//! answer: the stage store checked, a result checked by its kind outside the
//! scheduler's lock, the reports taken under the lock (after the worker's
//! session), then counted in the metrics and announced to the watchers and
//! the lease polls. One report (`Report`) and a batch of final reports
//! (`ReportBatch`) take the same way; a batch shares one lock and one flush.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use tally_stage::{BlobRef, is_pack_key, job_prefix, pack_owner};
use tally_wire::lease::LeaseId;
use tonic::Status;

use crate::clock::now_ms;
use crate::error::{CoordinatorError, Result};
use crate::metrics::CoordinatorMetrics;
use crate::scheduler::{Report, ReportOutcome};
use crate::shared::Shared;

/// Takes one report of `session`: answered as the scheduler answers it, or
/// refused with the first check it fails.
pub async fn take_report(
    shared: &Arc<Shared>,
    report: Report,
    session: String,
) -> std::result::Result<ReportOutcome, Status> {
    check_stage_store(shared, &report)?;
    let ending = Ending::of(&report);
    let started = Instant::now();
    let metrics = &shared.metrics;
    // A result is checked by its kind (which may decode all its stage
    // output) before the lock is taken to accept it, so that a large
    // result does not hold up every other call.
    let checked = check_results(shared, vec![report]).await.pop();
    let report = match checked.expect("one report in, one out") {
        Ok(report) => report,
        Err(e) => {
            metrics.report_latency.observe(started.elapsed());
            metrics.reports_refused.add(1);
            return Err(e.into());
        }
    };
    let outcome = shared
        .with_scheduler(move |s| {
            s.check_session(&report.worker, &session)?;
            s.report(report, now_ms())
        })
        .await;
    metrics.report_latency.observe(started.elapsed());
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            metrics.reports_refused.add(1);
            return Err(e.into());
        }
    };
    ending.count(metrics, &outcome);
    if ending.finished {
        announce(shared, [&ending.lease.job]);
    }
    Ok(outcome)
}

/// Takes the final reports of one `ReportBatch` call of `worker`, each as
/// read off the wire (or refused there): each is checked and accepted or
/// refused on its own, as [`take_report`] would; those that pass their
/// checks go through one scheduler call, so they share its lock and one
/// group flush. A refused session or a failed store fails the whole call
/// (the worker sends the batch again). The answers are in the reports' order.
pub async fn take_batch(
    shared: &Arc<Shared>,
    worker: String,
    session: String,
    reports: Vec<std::result::Result<Report, Status>>,
) -> std::result::Result<Vec<std::result::Result<ReportOutcome, Status>>, Status> {
    let started = Instant::now();
    let metrics = &shared.metrics;
    let mut answers: Vec<Option<std::result::Result<ReportOutcome, Status>>> =
        (0..reports.len()).map(|_| None).collect();
    let mut read = Vec::new();
    for (position, report) in reports.into_iter().enumerate() {
        match report.and_then(|r| check_stage_store(shared, &r).map(|()| r)) {
            Ok(report) => read.push((position, report)),
            Err(status) => answers[position] = Some(Err(status)),
        }
    }
    let (positions, reports): (Vec<usize>, Vec<Report>) = read.into_iter().unzip();
    let mut checked = Vec::new();
    for (position, report) in positions
        .into_iter()
        .zip(check_results(shared, reports).await)
    {
        match report {
            Ok(report) => checked.push((position, report)),
            Err(e) => answers[position] = Some(Err(e.into())),
        }
    }
    let taken = shared
        .with_scheduler(move |s| {
            s.check_session(&worker, &session)?;
            let now = now_ms();
            let mut taken = Vec::with_capacity(checked.len());
            for (position, report) in checked {
                let ending = Ending::of(&report);
                let outcome = s.report(report, now);
                if let Err(e @ (CoordinatorError::Store(_) | CoordinatorError::StoreFull(_))) =
                    outcome
                {
                    return Err(e);
                }
                taken.push((position, ending, outcome));
            }
            Ok(taken)
        })
        .await?;
    let mut changed_jobs = BTreeSet::new();
    for (position, ending, outcome) in taken {
        metrics.report_latency.observe(started.elapsed());
        answers[position] = Some(match outcome {
            Ok(outcome) => {
                ending.count(metrics, &outcome);
                if ending.finished {
                    changed_jobs.insert(ending.lease.job);
                }
                Ok(outcome)
            }
            Err(e) => Err(e.into()),
        });
    }
    announce(shared, &changed_jobs);
    let answers: Vec<_> = answers
        .into_iter()
        .map(|a| a.expect("every report has an answer"))
        .collect();
    let refusals = answers.iter().filter(|a| a.is_err()).count();
    metrics.reports_refused.add(refusals as u64);
    Ok(answers)
}

/// Refuses a report whose stage data is not where this coordinator keeps it:
/// blobs without a stage store; with one, large checkpoint states inline, and
/// output inline past the size this coordinator takes that way or beginning
/// as a stored stage-store reference does (which it could be taken for).
fn check_stage_store(shared: &Shared, report: &Report) -> std::result::Result<(), Status> {
    let store = &shared.stage_store;
    let blobs = report.output_blob.is_some()
        || report
            .checkpoint
            .as_ref()
            .is_some_and(|c| c.state_blob.is_some());
    if blobs && !store.is_external() {
        return Err(Status::failed_precondition(
            "this coordinator keeps stage data itself (--stage-store coordinator): \
             send output and checkpoints inline",
        ));
    }
    // A pack is swept with its job's stage: an output may lie only in a pack
    // of its own shard's job and stage.
    if let Some(blob) = &report.output_blob
        && is_pack_key(&blob.key)
        && pack_owner(&blob.key) != Some((job_prefix(&report.lease.job), report.lease.stage))
    {
        return Err(Status::invalid_argument(format!(
            "the output of {} lies in the pack {}, which is not of its job and stage",
            report.lease, blob.key
        )));
    }
    if store.is_external() && report.output_blob.is_none() && !report.output.is_empty() {
        let limit = shared.inline_stage_output;
        if report.output.len() > limit {
            return Err(Status::failed_precondition(format!(
                "a stage output of {} bytes goes to the stage store {store}: this coordinator \
                 takes up to {limit} bytes inline",
                report.output.len()
            )));
        }
        if BlobRef::is_encoded(&report.output) {
            return Err(Status::failed_precondition(
                "an inline stage output may not begin as a stage-store reference does: \
                 send it to the stage store",
            ));
        }
    }
    Ok(())
}

/// Checks the reports' results against their shards on the blocking pool,
/// holding the scheduler's lock only to copy what the checks need; each
/// report comes back marked checked (a report that is not the result of a
/// current attempt comes back as it was: taking it refuses it).
async fn check_results(shared: &Arc<Shared>, reports: Vec<Report>) -> Vec<Result<Report>> {
    let count = reports.len();
    let shared = shared.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let checks: Vec<_> = match shared.peek(|scheduler| {
            reports
                .iter()
                .map(|report| match (scheduler, &report.result) {
                    (Some(scheduler), Some(_)) => scheduler.result_to_check(report),
                    _ => None,
                })
                .collect()
        }) {
            Ok(checks) => checks,
            Err(e) => return reports.iter().map(|_| Err(e.clone())).collect(),
        };
        reports
            .into_iter()
            .zip(checks)
            .map(|(mut report, check)| {
                if let Some(check) = check {
                    check.run(&report)?;
                    report.checked = true;
                }
                Ok(report)
            })
            .collect::<Vec<_>>()
    })
    .await;
    match checked {
        Ok(checked) => checked,
        Err(e) => (0..count)
            .map(|_| {
                Err(CoordinatorError::Internal(format!(
                    "result check failed: {e}"
                )))
            })
            .collect(),
    }
}

/// How a report ends its attempt, noted before the scheduler takes it: what
/// its answer is counted by.
struct Ending {
    lease: LeaseId,
    /// The work of its result, if it carries one.
    accepted_work: Option<u64>,
    /// It ends the attempt (a result or a failure).
    finished: bool,
}

impl Ending {
    fn of(report: &Report) -> Ending {
        Ending {
            lease: report.lease.clone(),
            accepted_work: report.result.as_ref().map(|r| r.work_done),
            finished: report.result.is_some() || report.failure.is_some(),
        }
    }

    /// Counts an answered report: an accepted result ends its lease's timing.
    fn count(&self, metrics: &CoordinatorMetrics, outcome: &ReportOutcome) {
        match self.accepted_work {
            Some(work) if outcome.accepted => metrics.accepted(&self.lease, work),
            // A late result of a finished job: answered, not stored.
            Some(_) => metrics.lease_ended(&self.lease),
            None if self.finished => metrics.lease_ended(&self.lease),
            None => {}
        }
    }
}

/// Tells the watchers of `jobs` that they changed, and the lease polls that
/// shards may be free (an attempt ended); nothing for no job.
fn announce<'a>(shared: &Shared, jobs: impl IntoIterator<Item = &'a String>) {
    let mut any = false;
    for job in jobs {
        shared.changed(job);
        any = true;
    }
    if any {
        shared.work_ready.notify_waiters();
    }
}
