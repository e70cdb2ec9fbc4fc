//! Lease ids: the name of one attempt of one shard, `<job>/<stage>/<index>/<attempt>`.
//!
//! An attempt number carries the coordinator's epoch in its high 32 bits
//! (see [`Attempt`]): the epoch grows by one each time a coordinator opens
//! its store, so an attempt leased before a restart never equals one leased
//! after it, although a lease is never written to disk.
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
/// coordinator accepts a report only from the shard's current attempt, of
/// its current epoch.
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

/// An attempt number: the epoch of the coordinator that leased it (high 32
/// bits) and the count of the shard's leases in that epoch (low 32 bits).
/// Attempts written before epochs existed are of epoch 0. Shown as
/// `<epoch>.<count>`, or the bare count for epoch 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attempt(pub u64);

impl Attempt {
    const EPOCH_SHIFT: u32 = 32;

    /// The attempt below every attempt of `epoch`: a shard's attempt is
    /// raised to it when a coordinator of that epoch loads the shard.
    pub fn epoch_floor(epoch: u64) -> Attempt {
        Attempt(epoch << Self::EPOCH_SHIFT)
    }

    pub fn epoch(self) -> u64 {
        self.0 >> Self::EPOCH_SHIFT
    }

    /// The next attempt of a shard whose latest is `self`, leased in `epoch`.
    pub fn next_in(self, epoch: u64) -> Attempt {
        Attempt(self.0.max(Self::epoch_floor(epoch).0) + 1)
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.0 & ((1 << Self::EPOCH_SHIFT) - 1);
        match self.epoch() {
            0 => write!(f, "{count}"),
            epoch => write!(f, "{epoch}.{count}"),
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

    #[test]
    fn attempts_of_a_later_epoch_exceed_every_attempt_of_an_earlier_one() {
        let legacy = Attempt(7);
        assert_eq!((legacy.epoch(), legacy.to_string()), (0, "7".to_string()));
        let first = legacy.next_in(1);
        assert_eq!((first.epoch(), first.to_string()), (1, "1.1".to_string()));
        assert_eq!(first.next_in(1).to_string(), "1.2");
        // However many leases an epoch made, the next epoch starts above them.
        let busy = Attempt(Attempt::epoch_floor(1).0 + 1_000_000);
        let after_restart = Attempt::epoch_floor(2).next_in(2);
        assert!(after_restart > busy);
        assert_eq!(after_restart.to_string(), "2.1");
        // A shard loaded at a later epoch skips to it; never back.
        assert_eq!(busy.next_in(1).0, busy.0 + 1);
        assert_eq!(Attempt::epoch_floor(3).next_in(2).epoch(), 3);
    }
}
