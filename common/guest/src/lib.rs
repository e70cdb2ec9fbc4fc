//! The guest side of tally's `wasm` job kind (kernel ABI version 1, see
//! `docs/wasm-abi.md`): write a kernel as a plain Rust function, hand it to
//! [`tally_kernel!`], and build the crate as a `cdylib` for
//! `wasm32-unknown-unknown`.
//!
//! Layer: apart from the others: it imports no tally crate, and only user
//! modules and the example kernels link it (natively, in the tests and
//! benchmarks).
//!
//! A kernel computes one shard of a modular sum. This one counts `0 + 1 + ... + n`,
//! each shard adding the terms dealt to it:
//!
//! ```
//! use tally_guest::{KernelError, Shard, add_mod, check_outputs};
//!
//! fn triangle(shard: &mut Shard<'_>, out: &mut [u64]) -> Result<usize, KernelError> {
//!     check_outputs(out, 1)?;
//!     let n = shard.params().get_u64("n")?;
//!     let p = shard.prime();
//!     let mut sum = 0;
//!     for k in shard.share(n + 1) {
//!         sum = add_mod(sum, k % p, p);
//!     }
//!     out[0] = sum;
//!     Ok(1)
//! }
//!
//! tally_guest::tally_kernel!(triangle);
//!
//! # fn main() {
//! // Natively, the macro defines `run_shard`.
//! let residues: Vec<u64> = (0..3)
//!     .map(|i| run_shard(i, 3, 1_000_000_007, "n=100", &[], 1).unwrap()[0])
//!     .collect();
//! assert_eq!(residues.iter().sum::<u64>(), 5050);
//! # }
//! ```
//!
//! On `wasm32` the crate is `no_std` (with `alloc`): it brings a global
//! allocator, a panic handler that traps (so does a failed allocation), the
//! bindings of the three `tally` imports, and the memory glue of the exports.
//! The module it yields imports only what the kernel uses of `tally.progress`,
//! `tally.cancelled` and `tally.checkpoint`.
//!
//! The allocator (`BumpAllocator`, wasm32 only) hands out blocks upwards from
//! the end of the module's initial memory, growing the memory as needed, and
//! never gives pages back: only freeing the most recent block reclaims
//! anything. Allocate the big buffers once and reuse them. Memory allocated in
//! one `tally_shard` call stays used in the calls after it on the same
//! instance.
//!
//! [`sweep`] is the model's side of ABI version 2 (sweeps over
//! keyed states, `docs/wasm-abi.md`): the [`sweep::Sweep`] trait,
//! [`tally_sweep!`] and a native runner.
//!
//! Natively the crate uses `std`, and [`tally_kernel!`] defines `run_shard` and
//! `run_shard_with` instead of the exports, so the kernel can be tested and
//! benchmarked on the host through the same code path ([`run_kernel`]); the
//! host calls are recorded in the [`Shard`] rather than sent anywhere.

#![cfg_attr(target_arch = "wasm32", no_std)]
// The guest's unsafe code is its side of the ABI; each block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

extern crate alloc;

mod error;
#[cfg(target_arch = "wasm32")]
mod host;
mod modular;
mod params;
mod shard;
pub mod state;
pub mod sweep;
#[cfg(target_arch = "wasm32")]
mod wasm;

pub use error::KernelError;
pub use modular::{add_mod, mul_mod, sub_mod};
pub use params::{ParamError, Params};
pub use shard::{MAX_STATE_LEN, Shard};
#[cfg(target_arch = "wasm32")]
pub use wasm::BumpAllocator;

/// The ABI version this crate implements, the value of `tally_abi_version`.
pub const ABI_VERSION: i32 = 1;

/// The signature of a kernel: fill `out` with this shard's residues (each below
/// `shard.prime()`) and return how many were written, which must be `out.len()`.
pub type KernelFn = fn(&mut Shard<'_>, &mut [u64]) -> Result<usize, KernelError>;

/// Fails with [`KernelError::BadParams`] unless the job asked for exactly
/// `expected` residues per shard (`--outputs`).
pub fn check_outputs(out: &[u64], expected: usize) -> Result<(), KernelError> {
    if out.len() == expected {
        Ok(())
    } else {
        Err(KernelError::BadParams(alloc::format!(
            "this kernel writes {expected} residue(s) per shard, the job asks for {}",
            out.len()
        )))
    }
}

/// Runs `kernel` on `shard`, then checks what it claims to have written: at most
/// `out.len()` residues, each below the prime (a breach is
/// [`KernelError::Failed`]). Both the wasm export and the native `run_shard` go
/// through here.
pub fn run_kernel(
    kernel: KernelFn,
    shard: &mut Shard<'_>,
    out: &mut [u64],
) -> Result<usize, KernelError> {
    let written = kernel(shard, out)?;
    let prime = shard.prime();
    match out.get(..written) {
        Some(residues) if residues.iter().all(|&r| r < prime) => Ok(written),
        _ => Err(KernelError::Failed),
    }
}

/// Runs `kernel` natively on a shard built from the ABI's arguments, with a
/// zeroed output buffer of `outputs` slots; returns the residues written.
#[cfg(not(target_arch = "wasm32"))]
pub fn run_native(
    kernel: KernelFn,
    shard: u64,
    shards: u64,
    prime: u64,
    params: &str,
    state: &[u8],
    outputs: usize,
) -> Result<alloc::vec::Vec<u64>, KernelError> {
    let mut context = Shard::new(shard, shards, prime, params, state)?;
    run_native_with(kernel, &mut context, outputs)
}

/// Like [`run_native`] on a shard the caller built, so that it can read the
/// recorded progress and checkpoints afterwards or have the shard cancelled.
#[cfg(not(target_arch = "wasm32"))]
pub fn run_native_with(
    kernel: KernelFn,
    shard: &mut Shard<'_>,
    outputs: usize,
) -> Result<alloc::vec::Vec<u64>, KernelError> {
    let mut out = alloc::vec![0; outputs];
    let written = run_kernel(kernel, shard, &mut out)?;
    out.truncate(written);
    Ok(out)
}

/// Defines the entry points of a kernel crate around `kernel`, a function with
/// the signature [`KernelFn`]. Invoke it once, at the root of the crate.
///
/// On `wasm32` it exports `tally_abi_version`, `tally_alloc` and `tally_shard`
/// (the linker exports `memory`). Natively it defines instead:
///
/// - `pub fn run_shard(shard: u64, shards: u64, prime: u64, params: &str,
///   state: &[u8], outputs: usize) -> Result<Vec<u64>, KernelError>`, and
/// - `pub fn run_shard_with(shard: &mut Shard, outputs: usize) -> Result<Vec<u64>, KernelError>`.
#[macro_export]
macro_rules! tally_kernel {
    ($kernel:path) => {
        const _: $crate::KernelFn = $kernel;

        /// ABI export: the version of the kernel ABI this module implements.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_abi_version() -> i32 {
            $crate::ABI_VERSION
        }

        /// ABI export: `len` bytes of memory for the host to write into.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_alloc(len: i32) -> i32 {
            $crate::__private::host_alloc(len)
        }

        /// ABI export: computes one shard into `out`.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn tally_shard(
            shard: i64,
            shards: i64,
            prime: i64,
            params: i32,
            params_len: i32,
            state: i32,
            state_len: i32,
            out: i32,
            out_len: i32,
        ) -> i32 {
            // SAFETY: the host hands regions of this module's memory that it
            // obtained from `tally_alloc` and filled, as the ABI requires.
            unsafe {
                $crate::__private::wasm_shard(
                    $kernel, shard, shards, prime, params, params_len, state, state_len, out,
                    out_len,
                )
            }
        }

        /// Runs shard `shard` of `shards` modulo `prime` natively, with the
        /// parameters as `K=V` lines and a saved state (empty for a fresh start);
        /// returns the residues written into `outputs` slots.
        #[cfg(not(target_arch = "wasm32"))]
        pub fn run_shard(
            shard: u64,
            shards: u64,
            prime: u64,
            params: &str,
            state: &[u8],
            outputs: usize,
        ) -> ::core::result::Result<$crate::__private::Vec<u64>, $crate::KernelError> {
            $crate::run_native($kernel, shard, shards, prime, params, state, outputs)
        }

        /// Runs the kernel natively on a shard built with `Shard::new`, which
        /// records the progress and checkpoints and may be set to be cancelled.
        #[cfg(not(target_arch = "wasm32"))]
        pub fn run_shard_with(
            shard: &mut $crate::Shard<'_>,
            outputs: usize,
        ) -> ::core::result::Result<$crate::__private::Vec<u64>, $crate::KernelError> {
            $crate::run_native_with($kernel, shard, outputs)
        }
    };
}

/// What [`tally_kernel!`] expands to refers to; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use alloc::vec::Vec;

    #[cfg(target_arch = "wasm32")]
    pub use crate::wasm::{ModelCell, host_alloc, host_slice, wasm_shard, wasm_sweep};
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Writes what the parameters say: `count` residues, each `value`.
    fn echo(shard: &mut Shard<'_>, out: &mut [u64]) -> Result<usize, KernelError> {
        let count = shard.params().get_u64("count")? as usize;
        let value = shard.params().get_u64_or("value", 1)?;
        if shard.params().get("fail").is_some() {
            return Err(KernelError::Failed);
        }
        shard.progress(1, 1);
        for slot in out.iter_mut().take(count) {
            *slot = value;
        }
        Ok(count)
    }

    tally_kernel!(echo);

    #[test]
    fn the_macro_defines_native_entry_points() {
        assert_eq!(
            run_shard(0, 1, 7, "count=2\nvalue=6", &[], 2),
            Ok(vec![6, 6])
        );
        // Fewer residues than slots: the host will fail the shard.
        assert_eq!(run_shard(0, 1, 7, "count=1\nvalue=6", &[], 2), Ok(vec![6]));
        let mut shard = Shard::new(1, 2, 7, "count=1", b"state").unwrap();
        assert_eq!(run_shard_with(&mut shard, 1), Ok(vec![1]));
        assert_eq!(shard.progress_log(), &[(1, 1)]);
    }

    #[test]
    fn errors_and_their_codes() {
        let error = run_shard(0, 1, 7, "", &[], 1).unwrap_err();
        assert_eq!(error.code(), -1);
        assert_eq!(
            error.to_string(),
            "bad parameters: missing parameter `count` (--param count=...)"
        );
        let error = run_shard(0, 1, 7, "count=1\nfail=", &[], 1).unwrap_err();
        assert_eq!(
            (error.code(), error.to_string().as_str()),
            (-2, "the kernel failed")
        );
        assert_eq!(
            run_shard(2, 2, 7, "count=1", &[], 1).unwrap_err().code(),
            -1
        );
        assert_eq!(
            run_shard(0, 1, 0, "count=1", &[], 1).unwrap_err().code(),
            -1
        );
        assert_eq!(KernelError::Cancelled.code(), -3);
        let error = check_outputs(&[0; 3], 1).unwrap_err();
        assert_eq!(
            error.to_string(),
            "bad parameters: this kernel writes 1 residue(s) per shard, the job asks for 3"
        );
    }

    #[test]
    fn what_the_kernel_claims_is_checked() {
        // A residue not below the prime, or more residues than slots.
        assert_eq!(
            run_shard(0, 1, 7, "count=1\nvalue=7", &[], 1),
            Err(KernelError::Failed)
        );
        assert_eq!(
            run_shard(0, 1, 7, "count=2", &[], 1),
            Err(KernelError::Failed)
        );
        assert_eq!(run_shard(0, 1, 7, "count=0", &[], 0), Ok(vec![]));
    }
}
