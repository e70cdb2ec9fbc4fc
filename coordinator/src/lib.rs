//! The tally coordinator: accepts jobs from clients, splits them into shards,
//! leases shards to workers, checkpoints every accepted result in a durable store
//! and computes each job's answer.
//!
//! Layers, from the bottom up; a module imports only modules below it:
//! - [`clock`] (the wall clock in Unix milliseconds), [`error`], [`records`]
//!   (the typed records kept in the store and their keys), [`metrics`] (what
//!   the coordinator measures) and [`watchdog`] (who holds the scheduler lock
//!   or a flush, since when; past its limits the coordinator is unhealthy,
//!   then exits);
//! - [`store`]: a transactional key-value store (sled on disk, or in memory);
//! - [`replica`]: the store's batches recorded and shipped to the stage
//!   store, and a store restored from there (it wraps the store and knows
//!   nothing above it);
//! - [`scheduler`]: the synchronous state machine of jobs, stages, shards and
//!   leases; every state change is one atomic batch applied to the store;
//! - [`group_commit`]: a call answers only once a flush covers its batch, one
//!   flush for every call that applied meanwhile;
//! - [`shared`]: what every call goes through: the scheduler behind its lock,
//!   run off the async runtime, answered once its changes are durable;
//! - [`service`]: the tonic JobService, a thin async shell over [`shared`];
//! - [`intake`]: a worker's reports from the wire to their answer (checked
//!   outside the lock, taken under it, counted and announced);
//! - [`worker_service`]: the tonic WorkerService, the same shell for workers;
//! - [`stage_owner`]: the data directory's hold on its stage-store prefix
//!   (refused at start to a copy of the directory; checked by each sweep);
//! - [`http`]: the `--http` listener: Prometheus text, a JSON status and the
//!   status page;
//! - [`background`]: the background tasks (lease expiry, the metrics sampler,
//!   the stage store's sweep and prefix, the health service's verdict);
//! - [`server`]: wires the services, health, reflection, the HTTP listener and
//!   the background tasks.

#![forbid(unsafe_code)]

pub mod background;
pub mod clock;
pub mod error;
pub mod group_commit;
pub mod http;
pub mod intake;
pub mod metrics;
mod panic_fence;
pub mod records;
pub mod replica;
pub mod scaler;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod shared;
pub mod stage_owner;
pub mod store;
pub mod watchdog;
pub mod worker_service;

pub use error::{CoordinatorError, Result};
pub use server::{CoordinatorConfig, RunningCoordinator, start};
/// The directory a data directory may hold beside the store, for stage data
/// kept on the same disk (`tally run`'s stage store by default): a data
/// directory holding only it still counts as empty for a new store.
pub use store::STAGE_DIR;
