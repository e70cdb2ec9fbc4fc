//! The typed records kept in the store, and their keys.
//!
//! Records are JSON; large opaque data (stage output, checkpoints) is kept raw in
//! the blob tree. Keys are built so that a prefix scan returns a job's shards,
//! blobs or events in (stage, index) or sequence order.

use serde::{Deserialize, Serialize};
use tally_common::spec::ValidSpec;
use tally_common::values::{EncodedPartial, EncodedTask, JobPlan};

use crate::{CoordinatorError, Result};

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
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
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

/// 64-bit FNV-1a: stable across versions and platforms, unlike std's hasher.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
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

/// A lease id names one attempt of one shard: `<job>/<stage>/<index>/<attempt>`.
pub fn lease_id(job: &str, stage: u32, index: u32, attempt: u64) -> String {
    format!("{job}/{stage}/{index}/{attempt}")
}

pub fn parse_lease_id(id: &str) -> Result<(String, u32, u32, u64)> {
    let bad = || CoordinatorError::InvalidArgument(format!("malformed lease id {id:?}"));
    let mut parts = id.rsplitn(4, '/');
    let attempt = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let index = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let stage = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let job = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    Ok((job.to_string(), stage, index, attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_round_trip_and_reject_garbage() {
        let id = lease_id("job-000007", 3, 12, 2);
        assert_eq!(
            parse_lease_id(&id).unwrap(),
            ("job-000007".to_string(), 3, 12, 2)
        );
        for bad in ["", "a/b/c", "job/1/2/x", "/1/2/3", "job/1/-2/3"] {
            assert!(parse_lease_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn output_keys_sort_by_shard_then_chunk() {
        let c = checkpoint_key("j", 1, 2);
        let o = output_key("j", 1, 2, 0);
        assert!(c < o);
        assert!(output_key("j", 1, 2, 9) < output_key("j", 1, 3, 0));
    }
}
