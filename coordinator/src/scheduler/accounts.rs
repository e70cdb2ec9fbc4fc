//! What the scheduler keeps of a shared cluster, below the operations on
//! it (`sharing`): the users, each one's decayed slot time, where the audit
//! log stands, and the account a user reads.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::records::{AUDIT_PREFIX, AuditRecord, decode};
use crate::store::{Store, Tree};
use crate::users::Users;

/// How long a user's past slot time takes to count half (`--fair-share-half-life`).
pub const DEFAULT_HALF_LIFE_MS: u64 = 60 * 60 * 1000;

/// Audit entries kept: past it, the oldest go as new ones come.
pub const AUDIT_KEEP: u64 = 100_000;

/// What a call asks of a job, for [`Scheduler::authorize`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Get, watch, list, read the result.
    See,
    /// Read the event log.
    Events,
    Cancel,
    Delete,
}

impl Access {
    pub(super) fn verb(self) -> &'static str {
        match self {
            Access::See => "see",
            Access::Events => "read the events of",
            Access::Cancel => "cancel",
            Access::Delete => "delete",
        }
    }

    pub(super) fn action(self) -> &'static str {
        match self {
            Access::See => "see",
            Access::Events => "events",
            Access::Cancel => "cancel",
            Access::Delete => "delete",
        }
    }
}

/// The users, their metered slot time and the audit log's place.
pub(super) struct Sharing {
    pub(super) users: Arc<Users>,
    /// Decayed slot-milliseconds by user, as of `as_of_ms`.
    pub(super) usage: HashMap<String, f64>,
    pub(super) as_of_ms: u64,
    pub(super) audit_next: u64,
    pub(super) audit_first: u64,
}

impl Sharing {
    /// Reads where the audit log stands.
    pub(super) fn load(store: &dyn Store) -> Result<Sharing> {
        let entries = store.scan_prefix(Tree::Events, AUDIT_PREFIX)?;
        let seq = |bytes: &[u8]| decode::<AuditRecord>("audit entry", bytes).map(|a| a.seq);
        let audit_first = entries.first().map(|(_, v)| seq(v)).transpose()?;
        let audit_next = entries.last().map(|(_, v)| seq(v)).transpose()?;
        Ok(Sharing {
            users: Arc::new(Users::open()),
            usage: HashMap::new(),
            as_of_ms: 0,
            audit_next: audit_next.map_or(0, |s| s + 1),
            audit_first: audit_first.unwrap_or(0),
        })
    }

    /// Takes over what lives only in memory from the state before a reload.
    pub(super) fn continue_from(&mut self, before: &mut Sharing) {
        self.users = before.users.clone();
        self.usage = std::mem::take(&mut before.usage);
        self.as_of_ms = before.as_of_ms;
    }
}

/// A user's account: what their jobs hold and have used.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Account {
    /// Shards of their jobs leased now.
    pub slots_held: u32,
    /// Their jobs queued or running.
    pub jobs_unfinished: u32,
    /// Jobs they own that the coordinator keeps.
    pub jobs: u32,
    /// Slot-seconds their jobs' shards have held leases, all told.
    pub slot_seconds: f64,
    /// Shards of their jobs done.
    pub shards_done: u64,
    /// Stage data their unfinished jobs hold.
    pub stage_bytes: u64,
    /// Slot-seconds with history decayed: what the fair share compares.
    pub decayed_slot_seconds: f64,
}
