//! Where stage data lives when it does not pass through the coordinator: a
//! directory every worker mounts (`file://`) or an S3 bucket (`s3://`).
//! Workers write and read blobs here directly; the coordinator commits only
//! their references ([`BlobRef`]: key, size, digest) with the accepted
//! result, and deletes blobs no longer referenced.
//!
//! Layer: above the kinds and the wire, the only tally crates it imports (the
//! kernels' `Control` and `Stored` come through the kinds); below the
//! coordinator, the worker and the binary.
//!
//! Modules, from the bottom up; a module imports only modules below it:
//! `error`, `error_text` and `keys`; `url` (on `error`), `s3` (on `error`,
//! `error_text`) and `blob` (on `error`, `keys`); `store` (on all of those);
//! `memory`, `owner` and `sealed` (on `store`).

#![forbid(unsafe_code)]

pub mod blob;
pub mod error;
mod error_text;
pub mod keys;
pub mod memory;
pub mod owner;
mod s3;
pub mod sealed;
pub mod store;
pub mod url;

pub use blob::BlobRef;
pub use error::{Result, StageError};
pub use keys::{
    blob_key, blob_owner, checkpoint_blob_name, checkpoint_number, is_pack_key, job_prefix,
    pack_key, pack_owner,
};
pub use owner::{Claim, OwnerRecord};
pub use store::StageStore;
pub use url::StageStoreUrl;
