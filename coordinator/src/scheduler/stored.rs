//! A job's records as read back: the job record, its spec checked, or
//! refused by this release (a check made stricter since the release that
//! stored it: `refused.rs` holds such jobs apart), and the number of its
//! next event. Below the job table, which keeps the refused jobs.

use crate::error::Result;
use crate::records::{EventRecord, JobRecord, UncheckedJobRecord, decode, event_prefix};
use crate::store::{Store, Tree};

/// A job whose stored spec this release refuses.
pub(super) struct RefusedJob {
    /// The record as stored (failed at load if it was unfinished), its spec
    /// the JSON it was stored as.
    pub(super) rec: UncheckedJobRecord,
    /// Why this release refuses the spec.
    pub(super) why: String,
}

/// A job record as read back: its spec checked, or refused by this release.
pub(super) enum StoredJob {
    Checked(JobRecord),
    Refused(UncheckedJobRecord, String),
}

/// Reads a job record. Only a record that does not parse even with its spec
/// left unchecked is corrupt: one whose spec alone is refused is a job of an
/// older release.
pub(super) fn read_job(bytes: &[u8]) -> Result<StoredJob> {
    let corrupt = match decode::<JobRecord>("job", bytes) {
        Ok(rec) => return Ok(StoredJob::Checked(rec)),
        Err(e) => e,
    };
    let Ok(unchecked) = decode::<UncheckedJobRecord>("job", bytes) else {
        return Err(corrupt);
    };
    Ok(match unchecked.check_spec() {
        Ok(spec) => StoredJob::Checked(unchecked.with_spec(spec)),
        Err(why) => StoredJob::Refused(unchecked, why),
    })
}

/// The error a job gets when this release refuses its stored spec.
pub(super) fn refusal(why: &str) -> String {
    format!(
        "this release refuses the stored spec: {why}; submit the job again with a spec it accepts"
    )
}

/// The number of the job's next event. Only the last event is read: a long
/// job has millions.
pub(super) fn next_event_seq(store: &dyn Store, id: &str) -> Result<u64> {
    Ok(store
        .last_in_prefix(Tree::Events, &event_prefix(id))?
        .map(|(_, v)| decode::<EventRecord>("event", &v).map(|e| e.seq + 1))
        .transpose()?
        .unwrap_or(0))
}
