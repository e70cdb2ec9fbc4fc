//! Where stage data lives in a store: a key per attempt for its blobs, a
//! key per report batch for a pack, all under the job's prefix; and what a
//! key tells of its owner (the sweep's question).

use object_store::path::{Path, PathPart};
use tally_wire::lease::LeaseId;

/// Where one attempt of one shard writes its blob `name` (`output`,
/// `checkpoint-3`): a key no other attempt uses, so a stale attempt's blobs
/// are never the ones committed.
pub fn blob_key(lease: &LeaseId, name: &str) -> String {
    Path::from_iter([
        PathPart::from("jobs"),
        PathPart::from(lease.job.as_str()),
        PathPart::from(lease.stage.to_string()),
        PathPart::from(lease.index.to_string()),
        PathPart::from(lease.attempt.to_string()),
        PathPart::from(name),
    ])
    .to_string()
}

/// The name of an attempt's `n`-th checkpoint blob (1, 2, ...), for
/// [`blob_key`].
pub fn checkpoint_blob_name(n: u64) -> String {
    format!("checkpoint-{n}")
}

/// Which checkpoint of its attempt the blob at `key` is, if it is one
/// ([`checkpoint_blob_name`] under [`blob_key`]).
pub fn checkpoint_number(key: &str) -> Option<u64> {
    let path = Path::parse(key).ok()?;
    let name = path.parts().next_back()?;
    name.as_ref().strip_prefix("checkpoint-")?.parse().ok()
}

/// The key prefix of every blob of `job`.
pub fn job_prefix(job: &str) -> String {
    Path::from_iter([PathPart::from("jobs"), PathPart::from(job)]).to_string()
}

/// The job prefix and the lease of a key [`blob_key`] made, if it is one.
pub fn blob_owner(key: &str) -> Option<(String, u32, u32, u64)> {
    let path = Path::parse(key).ok()?;
    let parts: Vec<_> = path.parts().collect();
    let [jobs, job, stage, index, attempt, _name] = parts.as_slice() else {
        return None;
    };
    if jobs.as_ref() != "jobs" {
        return None;
    }
    let prefix = Path::from_iter([PathPart::from("jobs"), job.clone()]).to_string();
    Some((
        prefix,
        stage.as_ref().parse().ok()?,
        index.as_ref().parse().ok()?,
        attempt.as_ref().parse().ok()?,
    ))
}

/// Where a worker writes the `n`-th pack it makes for the outputs of stage
/// `first.stage` in one report batch whose first attempt is `first`:
/// `jobs/<job>/<stage>/packs/<index>-<attempt>-<n>`. An attempt is one
/// worker's, and `n` differs between the packs of a report sent again, so
/// no pack is ever written over (its blobs may be committed). Its shape
/// differs from [`blob_key`]'s, so the sweep tells the two apart.
pub fn pack_key(first: &LeaseId, n: u64) -> String {
    Path::from_iter([
        PathPart::from("jobs"),
        PathPart::from(first.job.as_str()),
        PathPart::from(first.stage.to_string()),
        PathPart::from(PACKS),
        PathPart::from(format!("{}-{}-{n}", first.index, first.attempt)),
    ])
    .to_string()
}

const PACKS: &str = "packs";

/// Whether `key` is a pack's ([`pack_key`]).
pub fn is_pack_key(key: &str) -> bool {
    pack_owner(key).is_some()
}

/// The job prefix and the stage of a pack's key ([`pack_key`]).
pub fn pack_owner(key: &str) -> Option<(String, u32)> {
    let path = Path::parse(key).ok()?;
    let parts: Vec<_> = path.parts().collect();
    let [jobs, job, stage, packs, _name] = parts.as_slice() else {
        return None;
    };
    if jobs.as_ref() != "jobs" || packs.as_ref() != PACKS {
        return None;
    }
    let prefix = Path::from_iter([PathPart::from("jobs"), job.clone()]).to_string();
    Some((prefix, stage.as_ref().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_attempt_scoped_and_parse_back_whatever_the_job_id() {
        for job in ["j-1", "team/a b%c", "x"] {
            let lease = LeaseId::new(job, 3, 7, 2);
            let key = blob_key(&lease, "output");
            let (prefix, stage, index, attempt) = blob_owner(&key).unwrap();
            assert_eq!((stage, index, attempt), (3, 7, 2), "{key}");
            assert_eq!(prefix, job_prefix(job));
            assert!(key.starts_with(&format!("{prefix}/")));
            assert_ne!(key, blob_key(&LeaseId::new(job, 3, 7, 3), "output"));
        }
        assert_eq!(blob_owner("jobs/j/1/2"), None);
        assert_eq!(blob_owner("other/j/1/2/3/output"), None);
    }

    #[test]
    fn pack_keys_name_their_stage_and_are_never_taken_for_an_attempt_blob() {
        for job in ["j-1", "team/a b%c"] {
            let key = pack_key(&LeaseId::new(job, 4, 9, 2), 0);
            assert_eq!(pack_owner(&key), Some((job_prefix(job), 4)), "{key}");
            assert!(is_pack_key(&key) && blob_owner(&key).is_none(), "{key}");
            assert_ne!(key, pack_key(&LeaseId::new(job, 4, 9, 2), 1));
            let own = blob_key(&LeaseId::new(job, 4, 9, 2), "output");
            assert!(!is_pack_key(&own), "{own}");
        }
        assert!(!is_pack_key("jobs/j/1/other/1-1"));
        assert!(!is_pack_key("jobs/j/x/packs/1-1"));
    }
}
