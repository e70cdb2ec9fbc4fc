//! The scheduler: the synchronous state machine of jobs, stages, shards and leases.
//!
//! Invariants (see docs/checkpoint-protocol.md):
//! - every change that a client or worker may rely on is written to the store as
//!   one batch, and the store has flushed it before the call returns;
//! - a shard's `attempt` only grows: it carries the load's epoch, committed
//!   before anything is leased in it (a lease itself writes nothing), so two
//!   leases never share an attempt number, even across coordinator restarts;
//! - a result is accepted only from the shard's current attempt, once: the shard
//!   becomes `Done` in the same batch that stores its partial and output;
//! - a stage's shards are planned only when every shard of the previous stage is
//!   done (the barrier), deterministically from the spec, so planning again after
//!   a crash yields the same shards.
//!
//! The in-memory state is derived from the store at [`Scheduler::load`]; nothing
//! that matters lives only in memory except lease renewals (a restart gives every
//! outstanding lease a fresh TTL) and live progress.
//!
//! Each submodule adds one responsibility's methods to [`Scheduler`]; they
//! share the state of `state` and the event log of `events`, and none imports
//! this module.

mod acceptance;
mod blobs;
pub use blobs::KeptStageOwner;
mod clients;
mod demand;
mod events;
mod expiry;
mod job;
mod jobs;
mod leasing;
mod protocol;
mod recovery;
mod refused;
mod reports;
mod room;
mod stage_room;
pub use stage_room::{DiskRoom, RoomSource, StageRoom};
mod accounts;
mod shard_table;
mod sharing;
pub use accounts::{AUDIT_KEEP, Access, Account, DEFAULT_HALF_LIFE_MS};
mod stage_outputs;
mod stored;
pub use stage_outputs::{HeldRead, Piece, StageBlobs, StageSource};
mod stages;
mod state;
mod views;
mod waiting;
mod workers;

#[cfg(test)]
mod refused_tests;
#[cfg(test)]
mod replica_tests;
#[cfg(test)]
mod room_tests;
#[cfg(test)]
mod sharing_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod view_tests;

pub use clients::EVENTS_PER_CALL;
pub use demand::SlotDemand;
pub use protocol::{
    Grant, Registration, Report, ReportOutcome, ReportedCheckpoint, ReportedFailure,
    ReportedResult, Restarted, ResultCheck, WORKER_FORGOTTEN_MS, WORKER_LOST_MS, WorkerInfo,
};
pub use state::{Scheduler, SchedulerConfig};
pub use views::{DEFAULT_PAGE, ListPage, MAX_PAGE};
