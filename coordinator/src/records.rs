//! The typed records kept in the store, and their keys.
//!
//! Records are JSON; large opaque data (stage output, checkpoints) is kept raw in
//! the blob tree. Keys are built so that a prefix scan returns a job's shards,
//! blobs or events in (stage, index) or sequence order.

use serde::{Deserialize, Serialize};
use tally_common::proto;
use tally_common::spec::ValidSpec;
use tally_common::values::{EncodedPartial, EncodedTask, JobPlan};

use crate::error::{CoordinatorError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn to_proto(self) -> proto::JobState {
        match self {
            JobState::Queued => proto::JobState::Queued,
            JobState::Running => proto::JobState::Running,
            JobState::Succeeded => proto::JobState::Succeeded,
            JobState::Failed => proto::JobState::Failed,
            JobState::Cancelled => proto::JobState::Cancelled,
        }
    }

    pub fn is_finished(self) -> bool {
        self.to_proto().is_finished()
    }

    pub fn name(self) -> &'static str {
        self.to_proto().name()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    /// Submission order, for ordering jobs of equal priority.
    pub seq: u64,
    pub spec: ValidSpec,
    /// The plan facts, without the slider prefixes (those live in the shards).
    pub plan: JobPlan,
    pub state: JobState,
    pub idempotency_key: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// The stage whose shards are current (1-based).
    pub stage: u32,
    pub shards_per_stage: u64,
    pub work_per_stage: u64,
    pub answer: Option<String>,
    pub details: Option<serde_json::Value>,
    pub error: Option<String>,
    /// Set on the record left when the job was deleted (a tombstone: the rest
    /// of the job is gone; the id stays taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_ms: Option<u64>,
    /// A finished job's counts, once its shards are no longer kept in memory
    /// (nor read at start): what its view shows from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_counts: Option<FinalCounts>,
}

/// What a finished job's view needs of its shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalCounts {
    pub shards_done: u64,
    pub shards_total: u64,
    pub work_done: u64,
    pub work_total: u64,
    pub failed_attempts: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardState {
    Pending,
    Leased,
    Done,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    pub job: String,
    pub stage: u32,
    pub index: u32,
    pub task: EncodedTask,
    pub work_total: u64,
    pub state: ShardState,
    /// The number of the latest lease (the fencing token); 0 before the first.
    pub attempt: u64,
    /// Attempts that ended without a result (error reported or lease expired).
    pub failed_attempts: u32,
    pub worker: Option<String>,
    pub lease_expires_ms: u64,
    /// Not leased again before this time (backoff after a failed attempt).
    pub not_before_ms: u64,
    pub work_done: u64,
    /// The accepted result once done; the partial of the last checkpoint before.
    pub partial: Option<EncodedPartial>,
    pub has_checkpoint: bool,
    pub output_chunks: u32,
    pub last_error: Option<String>,
    /// Results of earlier replicas that the remaining ones must equal, each from
    /// a different worker (jobs with more than one replica).
    #[serde(default)]
    pub replicas: Vec<ReplicaRecord>,
    /// When the current lease last made progress (leased, or its work grew),
    /// by the scheduler's clock; in memory only (0: not known since a load).
    #[serde(skip)]
    pub progress_ms: u64,
}

impl ShardRecord {
    /// A shard as planned: pending, never leased.
    pub fn planned(job: &str, stage: u32, index: u32, task: EncodedTask, work_total: u64) -> Self {
        ShardRecord {
            job: job.to_string(),
            stage,
            index,
            task,
            work_total,
            state: ShardState::Pending,
            attempt: 0,
            failed_attempts: 0,
            worker: None,
            lease_expires_ms: 0,
            not_before_ms: 0,
            work_done: 0,
            partial: None,
            has_checkpoint: false,
            output_chunks: 0,
            last_error: None,
            replicas: Vec::new(),
            progress_ms: 0,
        }
    }
}

/// One worker's result for a replicated shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    pub worker: String,
    pub attempt: u64,
    pub partial: EncodedPartial,
    /// FNV-1a of the stage output, so that outputs are compared without being kept.
    pub output_digest: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub seq: u64,
    pub time_ms: u64,
    pub kind: String,
    pub stage: u32,
    pub shard: u32,
    pub attempt: u64,
    pub worker: String,
    pub message: String,
}

/// The id of job number `seq`.
pub fn job_id(seq: u64) -> String {
    format!("job-{seq:06}")
}

pub fn job_key(job: &str) -> Vec<u8> {
    job.as_bytes().to_vec()
}

pub fn shard_prefix(job: &str) -> Vec<u8> {
    format!("{job}/").into_bytes()
}

pub fn shard_key(job: &str, stage: u32, index: u32) -> Vec<u8> {
    format!("{job}/{stage:08}/{index:08}").into_bytes()
}

pub fn output_key(job: &str, stage: u32, index: u32, chunk: u32) -> Vec<u8> {
    format!("{job}/{stage:08}/{index:08}/o{chunk:06}").into_bytes()
}

pub fn checkpoint_key(job: &str, stage: u32, index: u32) -> Vec<u8> {
    format!("{job}/{stage:08}/{index:08}/c").into_bytes()
}

pub fn event_prefix(job: &str) -> Vec<u8> {
    format!("{job}/").into_bytes()
}

pub fn event_key(job: &str, seq: u64) -> Vec<u8> {
    format!("{job}/{seq:012}").into_bytes()
}

pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("records always serialise")
}

pub fn decode<T: for<'de> Deserialize<'de>>(what: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| CoordinatorError::Store(format!("corrupt {what} record: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keys_sort_by_shard_then_chunk() {
        let c = checkpoint_key("j", 1, 2);
        let o = output_key("j", 1, 2, 0);
        assert!(c < o);
        assert!(output_key("j", 1, 2, 9) < output_key("j", 1, 3, 0));
    }
}
