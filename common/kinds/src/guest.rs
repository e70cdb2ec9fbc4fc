//! User kernels (`docs/wasm-abi.md`) as the `wasm` kind sees them: a
//! [`GuestRuntime`] that checks and loads modules and a [`GuestModule`] that
//! runs one shard; and sweep modules (ABI version 2,
//! `docs/wasm-abi.md`): a [`GuestSweepModule`] whose instances
//! ([`GuestSweep`]) answer a level shard's batches. The sandbox that implements them (`tally-wasm`, on
//! wasmtime) is installed in a process's [`KernelCache`](crate::cache::KernelCache)
//! by whoever may use it (the coordinator to check modules at submission, a
//! worker started with `--allow-wasm` to run them), so that this crate links
//! no runtime and a worker without the flag has none to run.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use sha2::{Digest, Sha256};

use tally_kernels::sweep::SweepModel;

use crate::Result;

/// The largest module (attachment) the runner takes: it travels in one gRPC
/// message of at most [`MAX_MESSAGE_BYTES`](tally_wire::limits::MAX_MESSAGE_BYTES).
pub const MAX_MODULE_BYTES: usize = 8 << 20;

/// Loaded modules a process keeps compiled at once.
pub const MODULES_KEPT: usize = 8;

/// The capability a worker offers when it runs user kernels.
pub const WASM_CAPABILITY: &str = "wasm";

/// The limits of a sweep module's plan and answers (ABI version 2): the
/// longest key a plan may allow, the most children one state may have, the
/// most weights a state, the most steps, and the bound of every multiplier
/// and weight. The sandbox holds a module to them, and the runner checks
/// what its shards report against them again.
pub const MAX_SWEEP_KEY_LIMIT: usize = 4096;
pub const MAX_SWEEP_CHILDREN: usize = 1 << 16;
pub const MAX_SWEEP_OUTPUTS: usize = 4096;
pub const MAX_SWEEP_STEPS: u32 = 1 << 20;
pub const MAX_SWEEP_FACTOR: u64 = 1 << 62;

/// How a job sends the module it names, for a message saying it was not
/// sent: the kind's flags take the module, a spec file's job attaches it.
pub const SEND_MODULE: &str =
    "send it with the job (--module FILE with the kind's flags, --attach FILE with --spec-file)";

/// The SHA-256 of `bytes` in lowercase hex: the name of a module (an
/// attachment) in specs, the store and on the wire.
pub fn sha256_hex(bytes: &[u8]) -> String {
    tally_wire::digest::to_hex(&Sha256::digest(bytes))
}

/// The module parameters' `K=V` lines, in bytes.
pub const MAX_PARAMS_BYTES: usize = 64 << 10;
/// The parameters a job's description shows, in characters.
const DESCRIBED_PARAMS_CHARS: usize = 80;

/// Checks a user kernel job's module digest and parameters (`K=V` on one
/// line each, a non-empty `K`, at most [`MAX_PARAMS_BYTES`] in all).
pub fn check_module_and_params(module_sha256: &str, params: &[String]) -> Result<()> {
    if !is_sha256_hex(module_sha256) {
        return Err(crate::invalid!(
            "module_sha256 must be a SHA-256 in 64 lowercase hex digits, not {module_sha256:?}"
        ));
    }
    for param in params {
        match param.split_once('=') {
            Some((key, _)) if !key.is_empty() && !param.contains('\n') => {}
            _ => {
                return Err(crate::invalid!(
                    "a module parameter is K=V on one line with a non-empty K, not {param:?}"
                ));
            }
        }
    }
    let params_bytes: usize = params.iter().map(|p| p.len() + 1).sum();
    if params_bytes > MAX_PARAMS_BYTES {
        return Err(crate::invalid!(
            "the module parameters take {params_bytes} bytes, more than {MAX_PARAMS_BYTES}"
        ));
    }
    Ok(())
}

/// The parameters as a job's description shows them (` K=V` each), cut
/// short: a description is one line of a listing.
pub fn described_params(params: &[String]) -> String {
    let mut described: String = params.iter().map(|p| format!(" {p}")).collect();
    if let Some((cut, _)) = described.char_indices().nth(DESCRIBED_PARAMS_CHARS) {
        described.truncate(cut);
        described.push('…');
    }
    described
}

/// Whether `text` is written as [`sha256_hex`] writes digests.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One shard's call of a module.
#[derive(Clone, Copy, Debug)]
pub struct GuestCall<'a> {
    pub shard: u64,
    pub shards: u64,
    /// A prime below 2^62.
    pub prime: u64,
    /// The job's `K=V` lines, joined by `\n`.
    pub params: &'a str,
    /// The state the module saved for this shard in an earlier attempt, or empty.
    pub state: &'a [u8],
    /// The residues the shard returns.
    pub outputs: u32,
}

/// What a running module tells the caller and asks it.
pub trait GuestHooks {
    /// Work done so far in the shard, out of `total`, in the module's units.
    fn progress(&mut self, done: u64, total: u64);
    /// A state the shard can resume from.
    fn checkpoint(&mut self, state: &[u8]);
    fn cancelled(&self) -> bool;
}

/// The sandbox of a process.
pub trait GuestRuntime: Send + Sync {
    /// Compiles and checks a module (size, imports, exports). The errors are
    /// `InvalidArgument`, naming what is wrong.
    fn load(&self, module: &[u8]) -> Result<Arc<dyn GuestModule>>;

    /// Compiles and checks a sweep module (ABI version 2), as `load` checks
    /// a shard module.
    fn load_sweep(&self, module: &[u8]) -> Result<Arc<dyn GuestSweepModule>>;
}

/// A checked, compiled sweep module.
pub trait GuestSweepModule: Send + Sync {
    /// An instance of the module for the job's parameters (`K=V` lines),
    /// its plan asked and checked; refused parameters are `InvalidArgument`.
    /// Once `cancelled` is set, a call running stops soon, `Cancelled`.
    fn start(&self, params: &str, cancelled: Arc<AtomicBool>) -> Result<Box<dyn GuestSweep>>;
}

/// When a sweep ends: after a number of steps, or at its first empty level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestSweepEnd {
    Steps(u32),
    WhenEmpty,
}

/// A sweep module's plan, checked against the ABI's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestSweepPlan {
    /// The longest key, in bytes.
    pub key_limit: usize,
    /// Weights a state.
    pub outputs: usize,
    pub end: GuestSweepEnd,
    /// The most children one state may have.
    pub most_children: usize,
}

/// One instance of a sweep module: its plan, its start states, and (as a
/// [`SweepModel`]) the children and weights of a level's batches, every
/// answer checked against the plan. The module's own faults are
/// `InvalidArgument`.
pub trait GuestSweep: SweepModel + Send {
    fn plan(&self) -> GuestSweepPlan;
    /// The start states and their counts.
    fn starts(&mut self) -> Result<Vec<(Vec<u8>, u64)>>;
}

/// A checked, compiled module.
pub trait GuestModule: Send + Sync {
    /// Runs one shard in a fresh instance: its residues, each below the
    /// prime. The module's own faults (a trap, fuel or memory exhausted,
    /// refused parameters, the wrong number of residues) are
    /// `InvalidArgument`: every attempt would repeat them. A failure the
    /// module reports itself is `Failed`, and a stop asked through the hooks
    /// `Cancelled`.
    fn run(&self, call: &GuestCall<'_>, hooks: &mut dyn GuestHooks) -> Result<Vec<u64>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_in_lowercase_hex() {
        // FIPS 180-2's example.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&sha256_hex(b"")));
        assert!(!is_sha256_hex(&sha256_hex(b"").to_uppercase()));
        assert!(!is_sha256_hex("abc"));
    }
}
