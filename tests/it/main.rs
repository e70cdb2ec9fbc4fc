//! The integration tests, in one binary (one link of the workspace instead of
//! one per suite). Each module is a suite; `support` holds what they share.
//! The process suites run the `tally` binary; python helpers live in
//! `tests/python`.

mod autoscale;
mod bad_input;
mod chaos;
mod cli;
mod cluster;
mod compat;
mod full_disk;
mod grpc_clients;
mod kinds;
mod liveness;
mod netfaults;
mod observability;
mod processes;
mod restore;
mod security;
mod shutdown;
mod stage_owner;
mod stage_store;
mod storage_crash;
mod store_damage;
mod structure;
mod support;
mod users;
mod wasm;
mod wasm_sweep;
