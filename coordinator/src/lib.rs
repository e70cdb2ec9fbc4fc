//! The tally coordinator: accepts jobs from clients, splits them into shards,
//! leases shards to workers, checkpoints every accepted result in a durable store
//! and computes each job's answer.
//!
//! Layer: above the stage store, the kinds, the wire and the kernels (whose
//! bucket framing it serves stage data by); below the binary. Outside its
//! tests it imports no kind's module, and never the worker.
//!
//! Layers, from the bottom up; a module imports only modules below it:
//! - the ground: [`error`], [`metrics`], [`clock`] (the coordinator's clock,
//!   `now_ms`), `panic_fence` (a panic in a critical section has its state
//!   read back) and [`watchdog`] (who holds the scheduler lock or a flush,
//!   since when; past its limits the coordinator is unhealthy, then exits);
//! - [`store`]: a transactional key-value store (sled on disk, or in memory),
//!   its flushes timed for the metrics (a `StoreWrapper`);
//! - [`records`]: the typed records kept in the store and their keys;
//! - [`replica`]: the store's batches recorded (another `StoreWrapper`) and
//!   shipped to the stage store, and a store restored from there; it knows
//!   nothing above it (the prefix's hold reaches it as a `PrefixHold`);
//! - [`scheduler`]: the synchronous state machine of jobs, stages, shards and
//!   leases; every state change is one atomic batch applied to the store;
//! - [`group_commit`]: a call answers only once a flush covers its batch, one
//!   flush for every call that applied meanwhile;
//! - [`shared`]: what every call goes through: the scheduler behind its lock,
//!   run off the async runtime, answered once its changes are durable;
//! - over [`shared`]: [`service`] (the tonic JobService, a thin async shell),
//!   [`intake`] (a worker's reports from the wire to their answer: checked
//!   outside the lock, taken under it, counted and announced), [`scaler`]
//!   (KEDA's external scaler); [`worker_service`] (the tonic WorkerService,
//!   the same shell for workers) over [`intake`];
//! - [`stage_owner`]: the data directory's hold on its stage-store prefix
//!   (refused at start to a copy of the directory; checked by each sweep;
//!   the replica's shipping stops once another coordinator holds it);
//! - [`http`]: the `--http` listener: Prometheus text, a JSON status and the
//!   status page;
//! - [`background`]: the background tasks (lease expiry, the metrics sampler,
//!   the stage store's sweep and prefix, the health service's verdict);
//! - [`server`]: [`start`] wires the services, health, reflection, the HTTP
//!   listener and the background tasks.

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
pub mod users;
pub mod watchdog;
pub mod worker_service;

pub use error::{CoordinatorError, Result};
pub use server::{CoordinatorConfig, RunningCoordinator, start};
/// The directory a data directory may hold beside the store, for stage data
/// kept on the same disk (`tally run`'s stage store by default): a data
/// directory holding only it still counts as empty for a new store.
pub use store::STAGE_DIR;
