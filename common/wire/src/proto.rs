//! Types and services generated from `proto/tally/v1/tally.proto`.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("tally.v1");

/// KEDA's external scaler contract (`proto/externalscaler/externalscaler.proto`),
/// which the coordinator serves beside its own.
pub mod externalscaler {
    tonic::include_proto!("externalscaler");
}

/// The encoded file descriptor set of the contract, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tally_descriptor.bin"));

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
    use super::{Job, JobState};

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
