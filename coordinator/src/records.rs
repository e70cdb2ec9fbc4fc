//! The typed records kept in the store, and their keys.
//!
//! Job records are JSON. Shard and event records, millions of them in a large
//! job, are written in a compact binary form (postcard behind a tag byte):
//! less than half their JSON size, and cheaper to write and read back.
//! Either form is read, so stores written as JSON load as they are. Large
//! opaque data (stage output, checkpoints) is kept raw in the blob tree. Keys
//! are built so that a prefix scan returns a job's shards, blobs or events in
//! (stage, index) or sequence order.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::values::{EncodedPartial, EncodedTask, JobPlan};
use tally_wire::proto;

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

/// A job as stored. Its spec is checked again when the record is read back
/// (`S` is [`ValidSpec`]); a spec this release refuses is read as the JSON
/// it was stored as ([`UncheckedJobRecord`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord<S = ValidSpec> {
    pub id: String,
    /// Submission order, for ordering jobs of equal priority.
    pub seq: u64,
    pub spec: S,
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
    /// The user who submitted it; `None` for a job stored before jobs had
    /// owners, which is the admin's ([`crate::users::ADMIN`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Slot-milliseconds its shards have held leases, as of the record's
    /// last write (the scheduler meters it between calls).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slot_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl<S> JobRecord<S> {
    /// The same record with another form of its spec.
    pub fn with_spec<T>(self, spec: T) -> JobRecord<T> {
        JobRecord {
            id: self.id,
            seq: self.seq,
            spec,
            plan: self.plan,
            state: self.state,
            idempotency_key: self.idempotency_key,
            created_ms: self.created_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            stage: self.stage,
            shards_per_stage: self.shards_per_stage,
            work_per_stage: self.work_per_stage,
            answer: self.answer,
            details: self.details,
            error: self.error,
            deleted_ms: self.deleted_ms,
            final_counts: self.final_counts,
            owner: self.owner,
            slot_ms: self.slot_ms,
        }
    }

    /// The user the job belongs to.
    pub fn owner(&self) -> &str {
        self.owner.as_deref().unwrap_or(crate::users::ADMIN)
    }
}

/// A job record whose spec is kept as the JSON it was stored as, unchecked:
/// how a job whose stored spec this release refuses is read, listed and
/// written back (in the layout of every release, so an older one reads it).
pub type UncheckedJobRecord = JobRecord<serde_json::Value>;

impl UncheckedJobRecord {
    /// The stored spec checked, or why this release refuses it.
    pub fn check_spec(&self) -> std::result::Result<ValidSpec, String> {
        match serde_json::from_value::<JobSpec>(self.spec.clone()) {
            Ok(spec) => ValidSpec::new(spec).map_err(|e| e.to_string()),
            Err(e) => Err(format!("invalid job spec: {e}")),
        }
    }

    /// The kind the stored spec names ("" if it names none).
    pub fn kind_name(&self) -> &str {
        self.spec.get("kind").and_then(|k| k.as_str()).unwrap_or("")
    }
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
    /// Attempts handed back by their workers since the scheduler was loaded
    /// (in memory only: a restart hands nothing back, so a count since load
    /// catches a worker or kernel that hands shards back for ever).
    #[serde(skip)]
    pub hand_backs: u32,
    /// Attempts whose worker vanished while running the shard (its lease
    /// expired with the worker no longer heard from: killed, out of memory),
    /// and the largest memory budget among those workers: from
    /// [`VANISHED_LIMIT`] on, the shard goes only to workers of a larger
    /// budget. In memory only (a restart forgets them; its attempts stay
    /// counted).
    #[serde(skip)]
    pub vanished: u32,
    #[serde(skip)]
    pub vanished_budget: u64,
    /// Set while the shard waits for room: its last attempt found none on
    /// its worker's disk, and this names the worker and says why (in
    /// memory only: a restart tries again).
    #[serde(skip)]
    pub no_room_note: Option<String>,
}

/// Vanished workers after which a shard is offered only to workers with a
/// larger memory budget than theirs.
pub const VANISHED_LIMIT: u32 = 2;

/// How long such a shard waits for a worker with a larger budget: past it,
/// with none live, it goes to the largest live worker (a kill that was not
/// for memory looks the same), and its failed attempts bound the tries.
pub const LARGER_WORKER_PATIENCE_MS: u64 = 90_000;

impl ShardRecord {
    /// The memory budget a worker needs to be offered this shard: more than
    /// that of the workers that vanished while running it, once
    /// [`VANISHED_LIMIT`] did; `None` while any worker may take it.
    pub fn needs_budget_over(&self) -> Option<u64> {
        (self.vanished >= VANISHED_LIMIT).then_some(self.vanished_budget)
    }
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
            hand_backs: 0,
            vanished: 0,
            vanished_budget: 0,
            no_room_note: None,
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

/// One entry of the audit log: who asked for what, and whether it was done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    pub time_ms: u64,
    pub user: String,
    /// "submit", "cancel", "delete", or what was refused ("events",
    /// "cancel", ...).
    pub action: String,
    pub job: String,
    /// False for a refusal.
    pub done: bool,
    pub message: String,
}

impl Record for AuditRecord {
    const COMPACT: bool = true;
}

/// Where the audit log lives in [`Tree::Events`](crate::store::Tree::Events):
/// outside every job's prefix (job ids start `job-`), so that a job's
/// deletion never takes its audit entries with it.
pub const AUDIT_PREFIX: &[u8] = b"audit/";

pub fn audit_key(seq: u64) -> Vec<u8> {
    format!("audit/{seq:012}").into_bytes()
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

/// An attachment (a wasm module) in [`Tree::Blobs`](crate::store::Tree::Blobs),
/// by its SHA-256 in hex; outside every job's prefix, since jobs share it.
pub fn attachment_key(sha256: &str) -> Vec<u8> {
    format!("attachment/{sha256}").into_bytes()
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

/// Where the reference of a checkpoint in the stage store is kept.
pub fn checkpoint_blob_key(job: &str, stage: u32, index: u32) -> Vec<u8> {
    format!("{job}/{stage:08}/{index:08}/r").into_bytes()
}

/// Removes a shard's checkpoint, wherever it is kept.
pub fn remove_checkpoint(batch: &mut crate::store::Batch, job: &str, stage: u32, index: u32) {
    batch.remove(crate::store::Tree::Blobs, checkpoint_key(job, stage, index));
    batch.remove(
        crate::store::Tree::Blobs,
        checkpoint_blob_key(job, stage, index),
    );
}

pub fn event_prefix(job: &str) -> Vec<u8> {
    format!("{job}/").into_bytes()
}

pub fn event_key(job: &str, seq: u64) -> Vec<u8> {
    format!("{job}/{seq:012}").into_bytes()
}

/// First byte of a record in the compact form; a JSON record starts with `{`.
/// postcard is not self-describing: a field added to a compact record type
/// changes its layout, so a changed layout takes a new tag (and `decode` keeps
/// reading the old one), where JSON would have taken a `#[serde(default)]`.
const COMPACT_TAG: u8 = 0xC1;

/// A record kept in the store, and the form it is written in.
pub trait Record: Serialize + DeserializeOwned {
    /// Written in the compact binary form rather than JSON. Only for types
    /// whose serde form needs no self-description (no flattened maps, no
    /// skipped-if fields, no free JSON values).
    const COMPACT: bool;
}

impl<S: Serialize + DeserializeOwned> Record for JobRecord<S> {
    const COMPACT: bool = false;
}

impl Record for ShardRecord {
    const COMPACT: bool = true;
}

impl Record for EventRecord {
    const COMPACT: bool = true;
}

pub fn encode<T: Record>(record: &T) -> Vec<u8> {
    if T::COMPACT {
        let mut bytes = vec![COMPACT_TAG];
        postcard::to_io(record, &mut bytes).expect("records always serialise");
        bytes
    } else {
        serde_json::to_vec(record).expect("records always serialise")
    }
}

/// Reads a record in either form.
pub fn decode<T: Record>(what: &str, bytes: &[u8]) -> Result<T> {
    let corrupt =
        |e: &dyn std::fmt::Display| CoordinatorError::Store(format!("corrupt {what} record: {e}"));
    match bytes.split_first() {
        Some((&COMPACT_TAG, rest)) => postcard::from_bytes(rest).map_err(|e| corrupt(&e)),
        _ => serde_json::from_slice(bytes).map_err(|e| corrupt(&e)),
    }
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

    fn sample_shard() -> ShardRecord {
        let task = EncodedTask::encode(&(vec![1, 2, 3], u128::MAX));
        let mut shard = ShardRecord::planned("job-000007", 3, 41, task, 12);
        shard.state = ShardState::Done;
        shard.attempt = 5;
        shard.worker = Some("w-1".into());
        shard.partial = Some(EncodedPartial::encode(
            &serde_json::json!({"sum": "340282366920938463463374607431768211455"}),
        ));
        shard.last_error = Some("boom".into());
        shard.replicas.push(ReplicaRecord {
            worker: "w-2".into(),
            attempt: 4,
            partial: EncodedPartial::encode(&7u32),
            output_digest: u64::MAX,
        });
        shard
    }

    #[test]
    fn shard_and_event_records_are_compact_and_read_back_in_either_form() {
        let shard = sample_shard();
        let compact = encode(&shard);
        let json = serde_json::to_vec(&shard).unwrap();
        assert_eq!(compact[0], COMPACT_TAG);
        assert!(
            compact.len() * 2 < json.len(),
            "{} vs {}",
            compact.len(),
            json.len()
        );
        let from_compact: ShardRecord = decode("shard", &compact).unwrap();
        let from_json: ShardRecord = decode("shard", &json).unwrap();
        assert_eq!(from_compact, shard);
        assert_eq!(from_json, shard);
        // The kind's JSON text is kept verbatim (u128 digits included).
        assert_eq!(from_compact.task.json(), shard.task.json());

        let event = EventRecord {
            seq: 9,
            time_ms: 1_700_000_000_000,
            kind: "accepted".into(),
            stage: 3,
            shard: 41,
            attempt: 5,
            worker: "w-1".into(),
            message: String::new(),
        };
        let compact = encode(&event);
        assert_eq!(compact[0], COMPACT_TAG);
        assert_eq!(decode::<EventRecord>("event", &compact).unwrap(), event);
        let json = serde_json::to_vec(&event).unwrap();
        assert_eq!(decode::<EventRecord>("event", &json).unwrap(), event);
    }

    #[test]
    fn job_records_stay_json() {
        use tally_kinds::kayles::KaylesSpec;
        use tally_kinds::spec::JobSpec;
        let spec = ValidSpec::new(JobSpec::new(KaylesSpec {
            pins: 40,
            digits: 9,
        }))
        .unwrap();
        let mut facts = serde_json::Map::new();
        facts.insert("n".into(), serde_json::json!(3));
        let job = JobRecord {
            id: job_id(7),
            seq: 7,
            spec,
            plan: JobPlan {
                stages_total: 2,
                facts,
            },
            state: JobState::Running,
            idempotency_key: Some("k".into()),
            created_ms: 1,
            started_ms: Some(2),
            finished_ms: None,
            stage: 1,
            shards_per_stage: 4,
            work_per_stage: 8,
            answer: None,
            details: Some(serde_json::json!({"a": 1})),
            error: None,
            deleted_ms: None,
            final_counts: None,
            owner: Some("alice".into()),
            slot_ms: 1234,
        };
        let bytes = encode(&job);
        assert_eq!(bytes[0], b'{');
        assert_eq!(decode::<JobRecord>("job", &bytes).unwrap(), job);
    }

    #[test]
    fn damaged_records_are_refused_by_name() {
        let mut compact = encode(&sample_shard());
        compact.truncate(compact.len() / 2);
        let err = decode::<ShardRecord>("shard", &compact)
            .unwrap_err()
            .to_string();
        assert!(err.contains("corrupt shard record"), "{err}");
        let err = decode::<ShardRecord>("shard", b"{\"job\":")
            .unwrap_err()
            .to_string();
        assert!(err.contains("corrupt shard record"), "{err}");
        let err = decode::<EventRecord>("event", &[COMPACT_TAG])
            .unwrap_err()
            .to_string();
        assert!(err.contains("corrupt event record"), "{err}");
    }
}
