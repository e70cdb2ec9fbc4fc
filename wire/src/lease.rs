//! Lease ids: the name of one attempt of one shard, `<job>/<stage>/<index>/<attempt>`.
//!
//! The coordinator builds them when it leases a shard; workers hold them as
//! opaque strings and send them back with every heartbeat and report, where
//! the coordinator parses them again. The job id may itself contain `/`: the
//! last three fields are numbers, so the id is split from the right.

use std::fmt;
use std::str::FromStr;

use crate::Error;
use crate::error::invalid;

/// One attempt of one shard. The attempt number is the fencing token: the
/// coordinator accepts a report only from the shard's current attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId {
    pub job: String,
    /// The stage of the shard (1-based).
    pub stage: u32,
    /// The shard's index within its stage.
    pub index: u32,
    pub attempt: u64,
}

impl LeaseId {
    pub fn new(job: impl Into<String>, stage: u32, index: u32, attempt: u64) -> LeaseId {
        LeaseId {
            job: job.into(),
            stage,
            index,
            attempt,
        }
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let LeaseId {
            job,
            stage,
            index,
            attempt,
        } = self;
        write!(f, "{job}/{stage}/{index}/{attempt}")
    }
}

impl FromStr for LeaseId {
    type Err = Error;

    fn from_str(id: &str) -> Result<LeaseId, Error> {
        let bad = || invalid!("malformed lease id {id:?}");
        let mut parts = id.rsplitn(4, '/');
        let attempt = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let index = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let stage = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let job = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        Ok(LeaseId::new(job, stage, index, attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_round_trip_and_reject_garbage() {
        let id = LeaseId::new("job-000007", 3, 12, 2);
        assert_eq!(id.to_string(), "job-000007/3/12/2");
        assert_eq!(id.to_string().parse::<LeaseId>().unwrap(), id);
        let nested = LeaseId::new("a/b", 1, 0, 9);
        assert_eq!(nested.to_string().parse::<LeaseId>().unwrap(), nested);
        for bad in ["", "a/b/c", "job/1/2/x", "/1/2/3", "job/1/-2/3"] {
            assert!(bad.parse::<LeaseId>().is_err(), "{bad:?}");
        }
    }
}
