//! The tally coordinator: accepts jobs from clients, splits them into shards,
//! leases shards to workers, checkpoints every accepted result in a durable store
//! and computes each job's answer.
//!
//! Layers, from the bottom up:
//! - [`store`]: a transactional key-value store (sled on disk, or in memory) and
//!   the typed records kept in it;
//! - [`scheduler`]: the synchronous state machine of jobs, stages, shards and
//!   leases; every state change is one atomic, flushed store commit;
//! - [`service`]: the tonic JobService and WorkerService, a thin async shell that
//!   runs scheduler calls off the async runtime;
//! - [`server`]: wires the services, health, reflection and background tasks;
//! - [`counters`]: what the coordinator measures (the bottom layer);
//! - [`http`]: the `--http` listener: the Prometheus endpoint and the status page.

#![forbid(unsafe_code)]

pub mod counters;
pub mod error;
pub mod http;
pub mod records;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod store;

pub use error::{CoordinatorError, Result};
pub use server::{CoordinatorConfig, RunningCoordinator, start};
