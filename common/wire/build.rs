//! Compiles the gRPC contract in `proto/` with protox (pure Rust, no protoc) and
//! generates the prost messages and tonic services; also writes the encoded file
//! descriptor set that the coordinator serves through gRPC reflection.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not when it is compiled: a target directory
    // shared by two checkouts reuses one compiled script for both.
    let proto_root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let proto_file = proto_root.join("tally/v1/tally.proto");
    // KEDA's external scaler contract, which the coordinator serves too.
    let scaler_file = proto_root.join("externalscaler/externalscaler.proto");
    // Relative to this package, not absolute: a target directory shared by two
    // checkouts of the workspace (their build outputs share one hash) must see
    // each checkout's own contract, not the one built last.
    println!("cargo:rerun-if-changed=../../proto/tally/v1/tally.proto");
    println!("cargo:rerun-if-changed=../../proto/externalscaler/externalscaler.proto");

    let descriptors = protox::compile([&proto_file, &scaler_file], [&proto_root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("tally_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::StrictCodec")
        // Stage output travels in 1 MiB chunks: as `Bytes`, a sender slices
        // one buffer and a report's copies share it instead of copying it.
        .bytes(".tally.v1.OutputChunk.data")
        // And so does a batched report's output: the worker's kept copy, the
        // report and the pack it may go into share one buffer.
        .bytes(".tally.v1.BatchedReport.output")
        .compile_fds(descriptors)?;
    Ok(())
}
