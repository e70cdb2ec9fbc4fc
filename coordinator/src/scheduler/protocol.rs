//! What crosses the scheduler's boundary: the leases it hands out, the reports
//! it receives, what it answers to them, and what it knows of each worker.

use tally_kinds::kind::WORKER_MEMORY_BUDGET;
use tally_kinds::spec::ValidSpec;
use tally_kinds::values::{EncodedPartial, EncodedTask, JobPlan};
use tally_stage::BlobRef;
use tally_wire::digest::fnv1a64;
use tally_wire::lease::LeaseId;

use crate::error::Result;

#[cfg(doc)]
use super::Scheduler;

/// A worker not heard from for this long is shown as lost.
pub const WORKER_LOST_MS: u64 = 10_000;

/// A worker silent this long is dropped from the list of workers.
pub const WORKER_FORGOTTEN_MS: u64 = 10 * 60 * 1000;

#[derive(Clone, Debug)]
pub struct WorkerInfo {
    pub hostname: String,
    /// The secret of the worker's current session, given at registration;
    /// every later call of the worker carries it.
    pub session: String,
    pub slots: u32,
    pub version: String,
    /// The memory the worker said it may use for shards, in bytes (0: not
    /// said; [`WORKER_MEMORY_BUDGET`] is assumed).
    pub memory_budget: u64,
    /// What the worker runs besides the built-in kinds (`wasm`).
    pub capabilities: Vec<String>,
    pub last_seen_ms: u64,
    /// See [`Registration`].
    pub incarnation: String,
    pub oom_kills: u64,
}

/// What a worker says of itself when it registers.
#[derive(Clone, Debug, Default)]
pub struct Registration {
    pub hostname: String,
    pub slots: u32,
    pub version: String,
    pub memory_budget: u64,
    pub capabilities: Vec<String>,
    /// The worker process's own id (see the proto's `incarnation`); empty:
    /// not said.
    pub incarnation: String,
    /// Out-of-memory kills its cgroup counts (0: not known).
    pub oom_kills: u64,
}

/// A worker id registered by a new process while the old one's registration
/// was known: the old process is gone, and its leases with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restarted {
    /// The old process's memory budget.
    pub budget: u64,
    /// The out-of-memory kills its cgroup counts now, when more than the old
    /// process said at its registration (the kernel killed it, most likely).
    pub oom_kills: Option<u64>,
}

impl WorkerInfo {
    /// The memory the worker may use for shards: what it said, or the
    /// default assumed.
    pub fn memory_budget(&self) -> u64 {
        match self.memory_budget {
            0 => WORKER_MEMORY_BUDGET,
            said => said,
        }
    }

    /// Heard from within [`WORKER_LOST_MS`] of `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.last_seen_ms + WORKER_LOST_MS >= now_ms
    }
}

/// A lease handed to a worker.
#[derive(Clone, Debug)]
pub struct Grant {
    pub lease: LeaseId,
    pub spec: ValidSpec,
    pub task: Vec<u8>,
    /// The checkpoint to start from, if it is small enough to come along.
    pub checkpoint: Vec<u8>,
    /// The size of a checkpoint too large to come along (fetched apart), or 0.
    pub checkpoint_bytes: u64,
    /// A checkpoint in the stage store, which the worker reads itself.
    pub checkpoint_blob: Option<BlobRef>,
    pub ttl_ms: u64,
    pub work_total: u64,
}

/// One report of a shard attempt, as received from a worker.
#[derive(Clone, Debug)]
pub struct Report {
    pub worker: String,
    pub lease: LeaseId,
    /// The last checkpoint of the report.
    pub checkpoint: Option<ReportedCheckpoint>,
    /// The stage output that comes with the result: its bytes, or with a
    /// stage store outside the coordinator, its blob's reference as stored
    /// ([`BlobRef::encode`]).
    pub output: Vec<u8>,
    /// The output's blob in the stage store, if it is there.
    pub output_blob: Option<BlobRef>,
    pub result: Option<ReportedResult>,
    pub failure: Option<ReportedFailure>,
    /// The result's shape was checked by its kind already, outside the
    /// scheduler's lock (see [`Scheduler::result_to_check`]).
    pub checked: bool,
}

/// What checking a reported result needs: the job's spec and plan and the
/// shard's task, copied out so that the check runs without the lock.
pub struct ResultCheck {
    pub spec: ValidSpec,
    pub plan: JobPlan,
    pub task: EncodedTask,
}

impl ResultCheck {
    /// The kind's check of `report`'s result (its partial and output).
    pub fn run(&self, report: &Report) -> Result<()> {
        let Some(result) = &report.result else {
            return Ok(());
        };
        let partial = EncodedPartial::from_bytes(&result.partial)?;
        self.spec
            .check_result(&self.plan, &self.task, &partial, report.output_to_check())?;
        Ok(())
    }
}

impl Report {
    /// A report that carries nothing yet.
    pub fn new(worker: impl Into<String>, lease: LeaseId) -> Report {
        Report {
            worker: worker.into(),
            lease,
            checkpoint: None,
            output: Vec::new(),
            output_blob: None,
            result: None,
            failure: None,
            checked: false,
        }
    }

    /// A final result, with the stage output it produced.
    pub fn result(
        worker: impl Into<String>,
        lease: LeaseId,
        result: ReportedResult,
        output: Vec<u8>,
    ) -> Report {
        Report {
            result: Some(result),
            output,
            ..Report::new(worker, lease)
        }
    }

    /// The report with its output in the stage store, as `blob`.
    pub fn with_output_blob(mut self, blob: BlobRef) -> Report {
        self.output = blob.encode();
        self.output_blob = Some(blob);
        self
    }

    /// The output the kind checks: none when it is in the stage store (its
    /// readers check it as they decode it).
    pub fn output_to_check(&self) -> Option<&[u8]> {
        match self.output_blob {
            Some(_) => None,
            None => Some(&self.output),
        }
    }

    /// What replicas of a shard compare of their outputs: the content, never
    /// where it is (a blob's key names its attempt). An output sent inline
    /// counts as the blob it would have been (the digest of its index), so a
    /// replica whose output went into a pack and one whose output came
    /// inline agree when their bytes do.
    pub fn output_digest(&self) -> u64 {
        match &self.output_blob {
            Some(blob) => fnv1a64(&blob.digest),
            None => fnv1a64(&tally_stage::blob::index(&self.output).1),
        }
    }

    pub fn checkpoint(
        worker: impl Into<String>,
        lease: LeaseId,
        checkpoint: ReportedCheckpoint,
    ) -> Report {
        Report {
            checkpoint: Some(checkpoint),
            ..Report::new(worker, lease)
        }
    }

    pub fn failure(worker: impl Into<String>, lease: LeaseId, failure: ReportedFailure) -> Report {
        Report {
            failure: Some(failure),
            ..Report::new(worker, lease)
        }
    }
}

/// A resumable point of a shard: the kernel's state and its partial so far,
/// both encoded as the worker sent them.
#[derive(Clone, Debug)]
pub struct ReportedCheckpoint {
    /// The state, or empty when it is in the stage store.
    pub state: Vec<u8>,
    pub partial: Vec<u8>,
    pub work_done: u64,
    /// The state's blob in the stage store, if it is there.
    pub state_blob: Option<BlobRef>,
}

/// A shard's final partial result, encoded as the worker sent it.
#[derive(Clone, Debug)]
pub struct ReportedResult {
    pub partial: Vec<u8>,
    pub work_done: u64,
    /// The worker's time on the shard, its queue not counted (0: unknown).
    pub compute_us: u64,
}

#[derive(Clone, Debug)]
pub struct ReportedFailure {
    pub message: String,
    pub permanent: bool,
    pub handed_back: bool,
    /// The worker had no room on disk for the shard's files: not counted
    /// as a failed attempt; the shard waits and is tried again.
    pub no_room: bool,
}

/// What the scheduler tells the worker after a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportOutcome {
    /// The worker should stop working on this shard.
    pub stop: bool,
    /// The report's result was stored (as the shard's result or a replica); a
    /// result for a job that is already finished is answered with `stop` and
    /// dropped.
    pub accepted: bool,
}

impl ReportOutcome {
    /// Stop: the report changed nothing (a finished job, an attempt already counted).
    pub const STOP: ReportOutcome = ReportOutcome {
        stop: true,
        accepted: false,
    };
    /// Carry on: a checkpoint, or nothing, was recorded.
    pub const CONTINUE: ReportOutcome = ReportOutcome {
        stop: false,
        accepted: false,
    };
}
