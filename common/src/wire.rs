//! What both ends of the wire agree on besides the proto contract: the message
//! size limit, the chunk size of stage output, and the job states' names.

use crate::proto::{Job, JobState};

/// Largest gRPC message either side may send (one output chunk is 1 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Stage output is sent and stored in chunks of at most this size.
pub const OUTPUT_CHUNK: usize = 1 << 20;

/// A checkpoint up to this size comes with its lease; a larger one the worker
/// fetches in chunks (`FetchCheckpoint`), and sends in chunks of
/// [`OUTPUT_CHUNK`] (`CheckpointChunk`).
pub const INLINE_CHECKPOINT_BYTES: usize = 4 << 20;

/// One lease response carries at most this many bytes of checkpoints (half of
/// [`MAX_MESSAGE_BYTES`]); the leases beyond announce theirs to be fetched.
pub const MAX_INLINE_CHECKPOINTS_PER_RESPONSE: usize = 8 << 20;

/// The largest checkpoint state a report may carry (a hex pass vector of side
/// 17 at 16 points is about 0.9 GB).
pub const MAX_CHECKPOINT_BYTES: usize = 1 << 30;

/// At most this many reports in one `ReportBatch` call.
pub const MAX_BATCH_REPORTS: usize = 1_024;

/// At most this much stage output in one `ReportBatch` call (far below
/// [`MAX_MESSAGE_BYTES`]); a larger output goes through `Report` in chunks.
pub const MAX_BATCH_OUTPUT: usize = 4 << 20;

impl JobState {
    /// Every state a job can be in, in the order of its life.
    pub const KNOWN: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's lower-case name, as the CLI prints it and as metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            JobState::Unspecified => "unknown",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job has stopped for good: it will never change again.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl Job {
    /// The name of the job's state; `unknown` for a value this build does not know.
    pub fn state_name(&self) -> &'static str {
        self.state().name()
    }

    pub fn is_finished(&self) -> bool {
        self.state().is_finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_states_are_named_and_not_finished() {
        let job = Job {
            state: 99,
            ..Job::default()
        };
        assert_eq!(job.state_name(), "unknown");
        assert!(!job.is_finished());
        let names: Vec<_> = JobState::KNOWN.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            ["queued", "running", "succeeded", "failed", "cancelled"]
        );
    }
}
