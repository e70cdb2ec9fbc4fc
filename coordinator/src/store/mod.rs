//! The durable store: a few named trees of byte keys and values, with atomic,
//! flushed multi-tree commits. [`SledStore`] keeps them on disk; [`MemoryStore`]
//! keeps them in memory; [`TimedStore`] times the commits of either: it is a
//! [`StoreWrapper`], which adds to a store's writes and passes every other
//! call on (the replica's recorder is another). The typed records on top
//! live in [`crate::records`].
//!
//! *Invariant:* `commit` returns only once its batch is durable, all of it or
//! none of it; callers acknowledge nothing before it returns.

mod api;
mod directory;
mod faults;
mod integrity;
mod mark;
mod memory;
mod overlay;
mod sled_store;
mod sled_trees;
mod spill;
mod timed;
mod wrapper;

#[cfg(test)]
mod stress_tests;
#[cfg(test)]
mod tests;

pub use api::{Batch, EPOCH_KEY, NEXT_JOB_KEY, Store, Tree, Write};
pub use directory::{LOST_AND_FOUND, RESTORING_MARKER, SCHEMA_VERSION, STAGE_DIR};
pub use integrity::{OnLoss, Recovery};
pub use mark::MARK_FILE;
pub use memory::MemoryStore;
pub use sled_store::SledStore;
pub use timed::TimedStore;
pub use wrapper::StoreWrapper;
