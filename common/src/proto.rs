//! Types and services generated from `proto/tally/v1/tally.proto`.

#![allow(clippy::all, missing_docs)]

tonic::include_proto!("tally.v1");

/// The encoded file descriptor set of the contract, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/tally_descriptor.bin"));
