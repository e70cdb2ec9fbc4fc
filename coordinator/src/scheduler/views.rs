//! What clients read: the proto views of jobs and their results, derived from
//! the records and the in-memory progress.

use tally_wire::proto;

use crate::error::{CoordinatorError, Result};
use crate::records::{FinalCounts, JobRecord, JobState};

use super::job::JobEntry;
use super::state::Scheduler;
use super::stored::RefusedJob;
use super::waiting::Fleet;

impl Scheduler {
    pub fn job(&self, id: &str, now_ms: u64) -> Result<proto::Job> {
        if let Some(refused) = self.jobs.refused(id) {
            return Ok(refused.view(now_ms));
        }
        let fleet = self.fleet(now_ms);
        Ok(self.view_of(self.jobs.get(id)?, &fleet, now_ms))
    }

    /// Every job, in id order.
    pub fn list(&self, now_ms: u64) -> Vec<proto::Job> {
        let fleet = self.fleet(now_ms);
        let mut jobs: Vec<proto::Job> = self
            .jobs
            .iter()
            .map(|e| self.view_of(e, &fleet, now_ms))
            .chain(self.jobs.refused_jobs().map(|r| r.view(now_ms)))
            .collect();
        jobs.sort_by(|a, b| a.id.cmp(&b.id));
        jobs
    }

    /// The job's view with why it waits, if it does.
    fn view_of(&self, entry: &JobEntry, fleet: &Fleet, now_ms: u64) -> proto::Job {
        let mut job = entry.view(now_ms);
        job.waiting = self.waiting(entry, fleet, now_ms);
        job
    }

    /// One page of jobs in submission order, filtered (see `ListJobsRequest`),
    /// and the token of the next page (empty on the last).
    pub fn list_page(&self, request: &ListPage, now_ms: u64) -> (Vec<proto::Job>, String) {
        let runnable = self.jobs.iter().map(Listed::Entry);
        let refused = self.jobs.refused_jobs().map(Listed::Refused);
        let mut matching = runnable
            .chain(refused)
            .filter(|e| request.after.is_none_or(|a| e.seq() > a))
            .filter(|e| request.states.is_empty() || request.states.contains(&e.state()))
            .filter(|e| request.kind.as_deref().is_none_or(|k| e.kind_name() == k))
            .filter(|e| request.owner.as_deref().is_none_or(|o| e.owner() == o))
            .collect::<Vec<_>>();
        matching.sort_by_key(|e| e.seq());
        let more = matching.len() > request.limit;
        matching.truncate(request.limit);
        let next = match matching.last() {
            Some(last) if more => last.seq().to_string(),
            _ => String::new(),
        };
        let fleet = self.fleet(now_ms);
        let jobs = matching
            .iter()
            .map(|listed| match listed {
                Listed::Entry(e) => self.view_of(e, &fleet, now_ms),
                Listed::Refused(r) => r.view(now_ms),
            })
            .collect();
        (jobs, next)
    }

    /// The answer or the error of a finished job.
    pub fn result(&self, id: &str) -> Result<proto::JobResult> {
        if let Some(refused) = self.jobs.refused(id) {
            return Ok(refused.result());
        }
        let rec = &self.jobs.get(id)?.rec;
        if !rec.state.is_finished() {
            return Err(CoordinatorError::FailedPrecondition(format!(
                "job {id} is {} and has no result yet",
                rec.state.name()
            )));
        }
        Ok(result_of(rec))
    }
}

/// A finished job's answer or error, as its record holds them.
pub(super) fn result_of<S>(rec: &JobRecord<S>) -> proto::JobResult {
    proto::JobResult {
        job_id: rec.id.clone(),
        state: rec.state.to_proto() as i32,
        answer: rec.answer.clone().unwrap_or_default(),
        details_json: rec
            .details
            .as_ref()
            .map(|d| d.to_string())
            .unwrap_or_default(),
        error: rec.error.clone().unwrap_or_default(),
    }
}

/// A job a page may list: runnable, or refused at load.
enum Listed<'a> {
    Entry(&'a JobEntry),
    Refused(&'a RefusedJob),
}

impl Listed<'_> {
    fn seq(&self) -> u64 {
        match self {
            Listed::Entry(e) => e.rec.seq,
            Listed::Refused(r) => r.rec.seq,
        }
    }

    fn state(&self) -> JobState {
        match self {
            Listed::Entry(e) => e.rec.state,
            Listed::Refused(r) => r.rec.state,
        }
    }

    fn kind_name(&self) -> &str {
        match self {
            Listed::Entry(e) => e.rec.spec.kind_name(),
            Listed::Refused(r) => r.rec.kind_name(),
        }
    }

    fn owner(&self) -> &str {
        match self {
            Listed::Entry(e) => e.rec.owner(),
            Listed::Refused(r) => r.rec.owner(),
        }
    }
}

/// Work and shards over all stages, and the timing derived from them.
struct Progress {
    shards_done: u64,
    shards_total: u64,
    work_done: u64,
    work_total: u64,
    elapsed_ms: u64,
    eta_ms: u64,
}

impl JobEntry {
    /// The job as clients see it at `now_ms` (without why it waits: see
    /// `Scheduler::waiting`).
    pub(super) fn view(&self, now_ms: u64) -> proto::Job {
        let rec = &self.rec;
        let p = self.progress(now_ms);
        proto::Job {
            id: rec.id.clone(),
            kind: rec.spec.kind_name().to_string(),
            state: rec.state.to_proto() as i32,
            spec: Some((&rec.spec).into()),
            created_ms: rec.created_ms,
            started_ms: rec.started_ms.unwrap_or(0),
            finished_ms: rec.finished_ms.unwrap_or(0),
            stage: rec.stage,
            stages_total: rec.plan.stages_total,
            shards_done: p.shards_done,
            shards_total: p.shards_total,
            work_done: p.work_done,
            work_total: p.work_total,
            elapsed_ms: p.elapsed_ms,
            eta_ms: p.eta_ms,
            answer: rec.answer.clone().unwrap_or_default(),
            error: rec.error.clone().unwrap_or_default(),
            // A finished job holds no lease: its workers are told to stop at
            // their next heartbeat, whatever its shard records last said.
            shards_leased: if rec.state.is_finished() {
                0
            } else {
                self.shards.leased().count() as u64
            },
            shards_failed_attempts: match rec.final_counts {
                Some(counts) => counts.failed_attempts,
                None => self.shards.failed_attempts(),
            },
            description: rec.spec.describe(),
            stages_unknown: !rec.state.is_finished() && !rec.spec.stages_known(),
            waiting: String::new(),
            owner: rec.owner().to_string(),
            slot_seconds: rec.slot_ms as f64 / 1000.0,
        }
    }

    fn progress(&self, now_ms: u64) -> Progress {
        let rec = &self.rec;
        if let Some(c) = rec.final_counts {
            return Progress {
                shards_done: c.shards_done,
                shards_total: c.shards_total,
                work_done: c.work_done,
                work_total: c.work_total,
                elapsed_ms: elapsed_ms(rec, now_ms),
                eta_ms: 0,
            };
        }
        // The stages done and the current one as they are; the stages known
        // to follow (a fixed plan's) as the first stage was. A frontier plan
        // knows no stage beyond the current one.
        let later = rec.plan.stages_total.saturating_sub(rec.stage) as u64;
        // A job never leased is still the first stage as planned.
        let (current_shards, current_work) = if self.shards_loaded {
            (self.shards.len() as u64, self.shards.work_total())
        } else {
            (rec.shards_per_stage, rec.work_per_stage)
        };
        let shards_total = self.shards_done_before + current_shards + rec.shards_per_stage * later;
        let work_total = self.work_done_before + current_work + rec.work_per_stage * later;
        let (shards_done, work_done) = if rec.state == JobState::Succeeded {
            (shards_total, work_total)
        } else {
            (self.shards_done(), self.work_done())
        };
        let elapsed_ms = elapsed_ms(rec, now_ms);
        // A plan that finds its stages as it goes knows only the work of the
        // stages found so far: the rest is no fraction of that.
        let eta_ms = if rec.state.is_finished()
            || !rec.spec.stages_known()
            || work_done == 0
            || elapsed_ms == 0
        {
            0
        } else {
            let remaining = work_total.saturating_sub(work_done) as u128;
            (remaining * elapsed_ms as u128 / work_done as u128) as u64
        };
        Progress {
            shards_done,
            shards_total,
            work_done,
            work_total,
            elapsed_ms,
            eta_ms,
        }
    }
}

impl JobEntry {
    /// The counts a finished job's view shows, from its shards.
    pub(super) fn final_counts(&self, now_ms: u64) -> FinalCounts {
        let p = self.progress(now_ms);
        FinalCounts {
            shards_done: p.shards_done,
            shards_total: p.shards_total,
            work_done: p.work_done,
            work_total: p.work_total,
            failed_attempts: self.shards.failed_attempts(),
        }
    }
}

pub(super) fn elapsed_ms<S>(rec: &JobRecord<S>, now_ms: u64) -> u64 {
    match rec.started_ms {
        Some(start) => rec.finished_ms.unwrap_or(now_ms).saturating_sub(start),
        None => 0,
    }
}

/// Jobs of a page when the request gives no limit, and the most it may ask for.
pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 1000;

/// A checked `ListJobsRequest`.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub limit: usize,
    /// The submission number of the last job of the previous page (the page
    /// token is that number).
    pub after: Option<u64>,
    pub states: Vec<JobState>,
    pub kind: Option<String>,
    /// Only this user's jobs.
    pub owner: Option<String>,
}

impl ListPage {
    /// Checks a request; every bad value is `InvalidArgument`, named.
    pub fn from_request(r: &proto::ListJobsRequest) -> Result<ListPage> {
        let invalid = |m: String| CoordinatorError::InvalidArgument(m);
        let limit = match r.limit as usize {
            0 => DEFAULT_PAGE,
            n if n > MAX_PAGE => {
                return Err(invalid(format!(
                    "limit must be at most {MAX_PAGE}, got {n}"
                )));
            }
            n => n,
        };
        let after = match r.page_token.as_str() {
            "" => None,
            token => Some(token.parse::<u64>().map_err(|_| {
                invalid(format!(
                    "malformed page token {token:?}: pass a next_page_token"
                ))
            })?),
        };
        let states = r
            .states
            .iter()
            .map(|&s| match proto::JobState::try_from(s) {
                Ok(proto::JobState::Queued) => Ok(JobState::Queued),
                Ok(proto::JobState::Running) => Ok(JobState::Running),
                Ok(proto::JobState::Succeeded) => Ok(JobState::Succeeded),
                Ok(proto::JobState::Failed) => Ok(JobState::Failed),
                Ok(proto::JobState::Cancelled) => Ok(JobState::Cancelled),
                _ => Err(invalid(format!("unknown job state {s} in the filter"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let kind = match r.kind.as_str() {
            "" => None,
            name => Some(
                tally_kinds::lookup(name)
                    .map_err(|e| invalid(e.to_string()))?
                    .name()
                    .to_string(),
            ),
        };
        let owner = Some(r.owner.clone()).filter(|o| !o.is_empty());
        Ok(ListPage {
            limit,
            after,
            states,
            kind,
            owner,
        })
    }
}
