//! Exponential backoff between retries of a call to the coordinator, with
//! jitter, so that workers refused at once (a coordinator restarting) do not
//! all come back at once.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

const FIRST: Duration = Duration::from_millis(100);
const LONGEST: Duration = Duration::from_secs(5);

/// 100 ms doubling to 5 s; each wait drawn between half the step and the step.
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { next: FIRST }
    }

    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }

    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.step()).await;
    }

    /// The next wait, and the step after it.
    fn step(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(LONGEST);
        jittered(step, random_fraction())
    }
}

/// Between half of `step` and `step`, by `fraction` (in [0, 1)).
fn jittered(step: Duration, fraction: f64) -> Duration {
    step / 2 + step.mul_f64(fraction.clamp(0.0, 1.0) / 2.0)
}

/// A fraction in [0, 1) that differs from call to call and process to
/// process: the standard library's randomly keyed hasher of nothing.
fn random_fraction() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_to_a_bound_each_within_half_of_its_step() {
        let mut backoff = Backoff::new();
        let mut step = FIRST;
        for _ in 0..20 {
            let wait = backoff.step();
            assert!(wait >= step / 2 && wait <= step, "{wait:?} of {step:?}");
            step = (step * 2).min(LONGEST);
        }
        assert_eq!(backoff.next, LONGEST);
        backoff.reset();
        assert!(backoff.step() <= FIRST);
        assert_eq!(jittered(LONGEST, 0.0), LONGEST / 2);
        assert!(jittered(LONGEST, 0.999) <= LONGEST);
        let draws: std::collections::HashSet<u64> =
            (0..8).map(|_| random_fraction().to_bits()).collect();
        assert!(draws.len() > 1, "the jitter varies");
    }
}
