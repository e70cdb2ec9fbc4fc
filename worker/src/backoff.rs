//! Exponential backoff between retries of a call to the coordinator.

use std::time::Duration;

const FIRST: Duration = Duration::from_millis(100);
const LONGEST: Duration = Duration::from_secs(5);

/// 100 ms doubling to 5 s.
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
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(LONGEST);
    }
}
