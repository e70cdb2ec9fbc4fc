//! The job table: every job the scheduler holds, by id; the idempotency keys
//! that name them; the counter that numbers them; the ids of deleted jobs
//! (only their tombstones remain in the store); the jobs whose stored spec
//! this release refuses (failed, kept apart: nothing runs them); and whose
//! turn it is among jobs of equal priority.
//!
//! *Invariants:* a key names a job of the table; an id is given once (the
//! counter only grows, and a deleted job's id stays taken).

use std::collections::{BTreeMap, HashMap};

use crate::error::{CoordinatorError, Result};
use crate::records::job_id;

use super::job::JobEntry;
use super::stored::RefusedJob;

pub(super) struct Jobs {
    entries: BTreeMap<String, JobEntry>,
    /// Idempotency keys to job ids.
    keys: HashMap<String, String>,
    /// The number of the next job submitted.
    next_seq: u64,
    /// Deleted jobs' ids, with when they were deleted.
    deleted: HashMap<String, u64>,
    /// Jobs whose stored spec this release refuses, by id; never in
    /// `entries`.
    refused: BTreeMap<String, RefusedJob>,
    /// By owner, the submission number of their job the last lease served:
    /// an owner's jobs of equal priority are served in turn from the one
    /// after it (fairness needs no durability, so this is not stored).
    served_last: HashMap<String, u64>,
}

/// One owner's jobs that may have shards to lease, in groups of equal
/// priority, highest first (see [`Jobs::leasing_order`]).
pub(super) struct OwnerQueue {
    pub(super) owner: String,
    pub(super) groups: Vec<Vec<(u64, String)>>,
}

impl Jobs {
    /// An empty table whose next job is number `next_seq`.
    pub(super) fn new(next_seq: u64) -> Jobs {
        Jobs {
            entries: BTreeMap::new(),
            keys: HashMap::new(),
            next_seq,
            deleted: HashMap::new(),
            refused: BTreeMap::new(),
            served_last: HashMap::new(),
        }
    }

    pub(super) fn get(&self, id: &str) -> Result<&JobEntry> {
        self.entries.get(id).ok_or_else(|| self.missing(id))
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Result<&mut JobEntry> {
        let missing = self.missing(id);
        self.entries.get_mut(id).ok_or(missing)
    }

    /// Whether the id names a job, runnable or refused (else why not).
    pub(super) fn check_exists(&self, id: &str) -> Result<()> {
        match self.entries.contains_key(id) || self.refused.contains_key(id) {
            true => Ok(()),
            false => Err(self.missing(id)),
        }
    }

    /// The job of an id whose stored spec this release refuses.
    pub(super) fn refused(&self, id: &str) -> Option<&RefusedJob> {
        self.refused.get(id)
    }

    /// Every job whose stored spec this release refuses, in id order.
    pub(super) fn refused_jobs(&self) -> impl Iterator<Item = &RefusedJob> {
        self.refused.values()
    }

    /// Adds a job whose stored spec this release refuses, under its
    /// idempotency key if it has one.
    pub(super) fn add_refused(&mut self, job: RefusedJob) {
        let id = job.rec.id.clone();
        if let Some(key) = &job.rec.idempotency_key {
            self.keys.insert(key.clone(), id.clone());
        }
        self.refused.insert(id, job);
    }

    /// The job of an id the caller has already looked up: a missing job is a bug.
    pub(super) fn known(&mut self, id: &str) -> &mut JobEntry {
        self.entries
            .get_mut(id)
            .expect("the job was looked up before")
    }

    /// The error for a job id that names no job: deleted, or never given.
    fn missing(&self, id: &str) -> CoordinatorError {
        match self.deleted.get(id) {
            Some(&when) => CoordinatorError::NotFound(format!(
                "job {id} was deleted at {}; its results and events are gone",
                utc_time(when)
            )),
            None => CoordinatorError::NotFound(format!("no job {id:?}")),
        }
    }

    /// Every job, in id order (which is submission order).
    pub(super) fn iter(&self) -> impl Iterator<Item = &JobEntry> {
        self.entries.values()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut JobEntry> {
        self.entries.values_mut()
    }

    /// The ids of the jobs still queued or running.
    pub(super) fn unfinished(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(_, e)| !e.rec.state.is_finished())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The id of the job submitted under `key`.
    pub(super) fn by_key(&self, key: &str) -> Option<&String> {
        self.keys.get(key)
    }

    /// The number the next job submitted gets.
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Notes that job number `seq` was given (its number is stored).
    pub(super) fn numbered(&mut self, seq: u64) {
        self.next_seq = seq + 1;
    }

    /// Adds a job, under its idempotency key if it has one.
    pub(super) fn add(&mut self, entry: JobEntry) {
        let id = entry.rec.id.clone();
        if let Some(key) = &entry.rec.idempotency_key {
            self.keys.insert(key.clone(), id.clone());
        }
        self.entries.insert(id, entry);
    }

    /// Drops a deleted job (and its key), remembering when it was deleted.
    pub(super) fn remove(&mut self, id: &str, when_ms: u64) {
        let key = match (self.entries.remove(id), self.refused.remove(id)) {
            (Some(entry), _) => entry.rec.idempotency_key,
            (None, Some(refused)) => refused.rec.idempotency_key,
            (None, None) => None,
        };
        if let Some(key) = key {
            self.keys.remove(&key);
        }
        self.note_deleted(id, when_ms);
    }

    /// Remembers a job deleted at `when_ms`, found as a tombstone.
    pub(super) fn note_deleted(&mut self, id: &str, when_ms: u64) {
        self.deleted.insert(id.to_string(), when_ms);
    }

    /// The ids given out whose jobs the table does not hold, deleted or lost.
    pub(super) fn absent_ids(&self) -> Vec<String> {
        (1..self.next_seq)
            .map(job_id)
            .filter(|id| !self.entries.contains_key(id) && !self.refused.contains_key(id))
            .collect()
    }

    /// Jobs that may have shards to lease, by owner; an owner's by
    /// submission number and id, in groups of equal priority, highest first;
    /// within a group in submission order, turned to start after the owner's
    /// job served last.
    pub(super) fn leasing_order(&self) -> Vec<OwnerQueue> {
        let mut order: Vec<(&str, i32, u64, &String)> = self
            .entries
            .values()
            .filter(|e| e.is_leasable())
            .map(|e| {
                let priority = -e.rec.spec.options().priority;
                (e.rec.owner(), priority, e.rec.seq, &e.rec.id)
            })
            .collect();
        order.sort();
        let mut queues: Vec<OwnerQueue> = Vec::new();
        let mut last: Option<(&str, i32)> = None;
        for (owner, priority, seq, id) in order {
            if last.map(|(o, _)| o) != Some(owner) {
                queues.push(OwnerQueue {
                    owner: owner.to_string(),
                    groups: Vec::new(),
                });
            }
            if last != Some((owner, priority)) {
                if let Some(queue) = queues.last_mut() {
                    queue.groups.push(Vec::new());
                }
                last = Some((owner, priority));
            }
            if let Some(group) = queues.last_mut().and_then(|q| q.groups.last_mut()) {
                group.push((seq, id.clone()));
            }
        }
        for queue in &mut queues {
            if let Some(&last) = self.served_last.get(&queue.owner) {
                for group in &mut queue.groups {
                    let turn = group.partition_point(|&(seq, _)| seq <= last);
                    group.rotate_left(turn);
                }
            }
        }
        queues
    }

    /// Notes that `owner`'s job number `seq` got a lease: their next turn
    /// starts after it.
    pub(super) fn served(&mut self, owner: &str, seq: u64) {
        match self.served_last.get_mut(owner) {
            Some(last) => *last = seq,
            None => {
                self.served_last.insert(owner.to_string(), seq);
            }
        }
    }

    /// Takes up the turns where `before` left them (a table read again).
    pub(super) fn continue_turns(&mut self, before: &Jobs) {
        self.served_last = before.served_last.clone();
    }
}

/// A time in Unix milliseconds as users read times: UTC, to the second
/// (RFC 3339, as the coordinator's log lines show theirs).
pub(super) fn utc_time(ms: u64) -> String {
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(when).to_string()
}
