//! The context a kernel runs in: which shard, the prime, the parameters, the
//! saved state, and the calls back to the host.

use crate::error::KernelError;
use crate::params::{ParamError, Params};

#[cfg(not(target_arch = "wasm32"))]
use alloc::vec::Vec;

/// The largest state the host keeps from `tally.checkpoint` (64 MiB).
pub const MAX_STATE_LEN: usize = 64 << 20;

/// One shard of a job, as the kernel sees it.
///
/// On `wasm32`, [`progress`](Shard::progress), [`cancelled`](Shard::cancelled)
/// and [`checkpoint`](Shard::checkpoint) call the `tally` imports. Natively they
/// are recorded in the shard, where a test reads them back, and `cancelled`
/// answers `true` once `Shard::cancel_after` allows.
#[derive(Debug)]
pub struct Shard<'a> {
    index: u64,
    count: u64,
    prime: u64,
    params: Params<'a>,
    state: &'a [u8],
    #[cfg(not(target_arch = "wasm32"))]
    host: NativeHost,
}

/// What the native stand-in for the host records.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug, Default)]
struct NativeHost {
    progress: Vec<(u64, u64)>,
    checkpoints: Vec<Vec<u8>>,
    polls: u64,
    cancel_after: Option<u64>,
}

impl<'a> Shard<'a> {
    /// Shard `index` of `count` modulo `prime`, with the parameters as `K=V`
    /// lines and the state saved by an earlier attempt (empty on a fresh start).
    /// Fails with [`KernelError::BadParams`] unless `index < count` and
    /// `prime >= 2`, or when the parameters do not parse.
    pub fn new(
        index: u64,
        count: u64,
        prime: u64,
        params: &'a str,
        state: &'a [u8],
    ) -> Result<Self, KernelError> {
        if index >= count {
            return Err(KernelError::BadParams(alloc::format!(
                "shard {index} of {count}: the index must be below the count"
            )));
        }
        if prime < 2 {
            return Err(KernelError::BadParams(alloc::format!(
                "modulus {prime}: it must be a prime"
            )));
        }
        Ok(Shard {
            index,
            count,
            prime,
            params: Params::parse(params)?,
            state,
            #[cfg(not(target_arch = "wasm32"))]
            host: NativeHost::default(),
        })
    }

    /// Like [`new`](Shard::new), from raw parameter bytes.
    pub fn from_bytes(
        index: u64,
        count: u64,
        prime: u64,
        params: &'a [u8],
        state: &'a [u8],
    ) -> Result<Self, KernelError> {
        let params = core::str::from_utf8(params).map_err(|_| ParamError::NotUtf8)?;
        Shard::new(index, count, prime, params, state)
    }

    /// This shard's index, below [`count`](Shard::count).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The number of shards of the job.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The prime the residues are taken modulo.
    pub fn prime(&self) -> u64 {
        self.prime
    }

    /// The job's parameters.
    pub fn params(&self) -> &Params<'a> {
        &self.params
    }

    /// The state to resume from: empty on a fresh start, otherwise bytes this
    /// shard passed to [`checkpoint`](Shard::checkpoint) in an earlier attempt.
    pub fn state(&self) -> &'a [u8] {
        self.state
    }

    /// How many of the items `0..total` are this shard's when items are dealt
    /// round-robin (item `j` to shard `j % count`).
    pub fn share_len(&self, total: u64) -> u64 {
        if self.index >= total {
            0
        } else {
            (total - self.index - 1) / self.count + 1
        }
    }

    /// This shard's items among `0..total` when dealt round-robin: `index`,
    /// `index + count`, `index + 2 * count`, ...
    pub fn share(&self, total: u64) -> impl Iterator<Item = u64> + use<> {
        let (first, step) = (self.index, self.count);
        (0..self.share_len(total)).map(move |k| first + k * step)
    }

    /// Tells the host how far the shard has got: `done` out of `total`, in any
    /// unit.
    pub fn progress(&mut self, done: u64, total: u64) {
        #[cfg(target_arch = "wasm32")]
        crate::host::progress(done, total);
        #[cfg(not(target_arch = "wasm32"))]
        self.host.progress.push((done, total));
    }

    /// Whether the host wants the shard to stop; the kernel then returns
    /// [`KernelError::Cancelled`] soon.
    pub fn cancelled(&mut self) -> bool {
        #[cfg(target_arch = "wasm32")]
        {
            crate::host::cancelled()
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.host.polls += 1;
            self.host
                .cancel_after
                .is_some_and(|allowed| self.host.polls > allowed)
        }
    }

    /// Hands the host a state a later attempt of this shard can resume from.
    /// Returns `false`, and hands nothing, for a state over [`MAX_STATE_LEN`].
    pub fn checkpoint(&mut self, state: &[u8]) -> bool {
        if state.len() > MAX_STATE_LEN {
            return false;
        }
        #[cfg(target_arch = "wasm32")]
        crate::host::checkpoint(state);
        #[cfg(not(target_arch = "wasm32"))]
        self.host.checkpoints.push(state.to_vec());
        true
    }
}

/// Native only: the recorded host calls, and cancellation on demand.
#[cfg(not(target_arch = "wasm32"))]
impl Shard<'_> {
    /// Makes [`cancelled`](Shard::cancelled) answer `true` from its call number
    /// `polls + 1` on, counting every call since the shard was made.
    pub fn cancel_after(&mut self, polls: u64) -> &mut Self {
        self.host.cancel_after = Some(polls);
        self
    }

    /// Every `(done, total)` reported, in order.
    pub fn progress_log(&self) -> &[(u64, u64)] {
        &self.host.progress
    }

    /// Every state handed to [`checkpoint`](Shard::checkpoint), in order.
    pub fn checkpoints(&self) -> &[Vec<u8>] {
        &self.host.checkpoints
    }

    /// How many times [`cancelled`](Shard::cancelled) was called.
    pub fn cancel_polls(&self) -> u64 {
        self.host.polls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn arguments_are_checked() {
        assert!(Shard::new(0, 1, 7, "", &[]).is_ok());
        let error = Shard::new(3, 3, 7, "", &[]).unwrap_err();
        assert_eq!(error.code(), -1);
        assert!(Shard::new(0, 0, 7, "", &[]).is_err());
        assert!(Shard::new(0, 1, 1, "", &[]).is_err());
        let error = Shard::new(0, 1, 7, "junk", &[]).unwrap_err();
        assert!(
            matches!(&error, KernelError::BadParams(m) if m.contains("`junk`")),
            "{error}"
        );
        let error = Shard::from_bytes(0, 1, 7, b"n=\xff", &[]).unwrap_err();
        assert_eq!(
            error,
            KernelError::BadParams("the parameters are not valid UTF-8".into())
        );
    }

    #[test]
    fn round_robin_shares() {
        let shares = |count: u64, total: u64| {
            (0..count)
                .map(|index| {
                    let shard = Shard::new(index, count, 7, "", &[]).unwrap();
                    assert_eq!(shard.share(total).count() as u64, shard.share_len(total));
                    shard.share(total).collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(shares(3, 7), vec![vec![0, 3, 6], vec![1, 4], vec![2, 5]]);
        assert_eq!(shares(4, 2), vec![vec![0], vec![1], vec![], vec![]]);
        assert_eq!(shares(1, 0), vec![Vec::<u64>::new()]);
    }

    #[test]
    fn host_calls_are_recorded() {
        let mut shard = Shard::new(0, 1, 7, "", b"saved").unwrap();
        assert_eq!(shard.state(), b"saved");
        shard.progress(1, 4);
        assert!(shard.checkpoint(b"one"));
        assert!(!shard.cancelled());
        shard.cancel_after(2);
        assert!(!shard.cancelled());
        assert!(shard.cancelled());
        assert!(shard.cancelled());
        assert_eq!(shard.cancel_polls(), 4);
        assert_eq!(shard.progress_log(), &[(1, 4)]);
        assert_eq!(shard.checkpoints(), &[b"one".to_vec()]);
    }
}
