//! The store replicated to the stage store, and restored from it on a new
//! node: the disaster-recovery copy of everything the coordinator's disk
//! holds (job records, accepted partials, checkpoints, events).
//!
//! `recorder.rs` queues every batch the scheduler applies (the group commit
//! is untouched); `shipper.rs` ships the durable ones every
//! `--replicate-every` as sealed log segments, after a generation's manifest
//! and beside its snapshot, read while the coordinator serves; `restore.rs`
//! rebuilds a store in an empty data directory from the newest consistent
//! point, and `on_start.rs` runs it before a coordinator opens its store;
//! `format.rs` names and lays out the objects.
//!
//! *Invariants:* a change is shipped only once the store has made it durable,
//! in order, without a gap in its generation (a possible gap begins a new
//! generation from a snapshot); a restore uses only what the replica proves
//! (whole snapshots, sealed objects, a log without a gap) and says which
//! objects it refused; a restored store's job counter and epoch are raised
//! to the latest owner record's (ids never given twice, leases of the
//! coordinator it replaces outranked).

mod format;
mod loss;
mod on_start;
mod recorder;
mod restore;
mod shipper;

pub use format::Parent;
pub use on_start::{refuse_unfinished_restore, restore_before_start};
pub use recorder::{Queue, RecordingStore};
pub use restore::{Floors, RESTORED_KEY, RESTORING_MARKER, Restored, prepare_target, restore};
pub use shipper::{PrefixHold, ReplicaStatus, Shipper};

/// How often changes are shipped by default.
pub const REPLICATE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// How long a stopping coordinator spends shipping its last changes.
pub const LAST_SHIPMENT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
