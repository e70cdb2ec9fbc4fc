//! The sandbox for user kernels compiled to WebAssembly (`docs/wasm-abi.md`),
//! on wasmtime. A module is checked once when it is loaded (its size, that
//! it imports nothing but the ABI's three functions and exports what the ABI
//! asks); each shard then runs in a fresh instance with a memory limit, a
//! fuel budget (its CPU-time limit) and epoch interruption (cancellation),
//! on a thread its caller keeps for its shards while the caller forwards its progress
//! and checkpoints. Nothing else reaches the module: no filesystem, network,
//! clock or randomness. Execution is deterministic (NaNs canonicalised, no
//! threads, relaxed SIMD deterministic), so replicas agree bit for bit.
//!
//! Layer: above the kinds ([`GuestSandbox`] is the kind layer's
//! `GuestRuntime`) and the kernels (a [`sweep::SweepSession`] is a sweep
//! level's `SweepModel`), the only tally crates it imports; below the
//! binary, which makes the one
//! sandbox and hands it to the parts that load modules. Modules, from the
//! bottom up: `shard_thread`; this file ([`Sandbox`], [`Limits`],
//! [`WasmError`]); `sweep` (sweep modules and their sessions); `runtime`
//! ([`GuestSandbox`], and a session as a sweep level's `SweepModel`).

#![forbid(unsafe_code)]

mod runtime;
mod shard_thread;
pub mod sweep;

pub use runtime::GuestSandbox;
/// One shard's call, and what a running shard tells its caller and asks it:
/// the runner's own types, so the `wasm` kind hands them over as they are.
pub use tally_kinds::guest::{GuestCall as ShardCall, GuestHooks as Hooks};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use wasmtime::{
    Caller, Config, Engine, ExternType, FuncType, Instance, InstancePre, Linker, Memory, Module,
    Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc, UpdateDeadline, ValType,
};

/// The ABI version this sandbox speaks.
pub const ABI_VERSION: i32 = 1;

/// What the sandbox allows one module and one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest module accepted, in bytes.
    pub module_bytes: usize,
    /// The largest linear memory of one instance, in bytes.
    pub memory_bytes: usize,
    /// The fuel one shard may burn (about one unit per wasm instruction).
    pub fuel: u64,
    /// The largest checkpoint state a module may hand over, in bytes.
    pub checkpoint_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            module_bytes: tally_kinds::guest::MAX_MODULE_BYTES,
            memory_bytes: 1 << 30,
            fuel: 1 << 44,
            checkpoint_bytes: 64 << 20,
        }
    }
}

/// Why a module or a shard failed. Every variant but `Failed` and
/// `Cancelled` is the module's own doing and would happen again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    /// The module is not one the sandbox runs (too large, not wasm, outside
    /// the ABI).
    #[error("the module is refused: {0}")]
    Refused(String),
    /// The module refused the job's parameters (`-1`), saying why through
    /// `tally.say` (empty when it did not).
    #[error("the module refused the parameters{}", said(.0))]
    BadParams(String),
    /// The module trapped (a panic, an out-of-bounds access, `unreachable`).
    #[error("the module trapped: {0}")]
    Trap(String),
    #[error("the module used all its fuel ({0} units): a shard's CPU-time limit")]
    OutOfFuel(u64),
    #[error("the module asked for more than its memory limit of {0} bytes")]
    MemoryLimit(usize),
    #[error("the module returned {got} residues, the job asks for {want}")]
    WrongOutputs { got: i64, want: u32 },
    #[error("the module returned residue {value} at {index}, not below the prime {prime}")]
    ResidueOutOfRange {
        index: usize,
        value: u64,
        prime: u64,
    },
    #[error("the module handed over a checkpoint of {0} bytes, above the limit")]
    CheckpointTooLarge(usize),
    /// The module said it failed (`-2`), or the host could not run it.
    #[error("the shard failed: {0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
    #[error("the module returned -3 (cancelled), but the shard was not cancelled")]
    CancelledUnasked,
    /// A sweep module's answer broke its plan or the ABI's limits.
    #[error("the module broke the sweep's rules: {0}")]
    Malformed(String),
}

pub type Result<T> = std::result::Result<T, WasmError>;

/// What a module said before it failed, as the end of an error line.
fn said(what: &str) -> String {
    match what.is_empty() {
        true => String::new(),
        false => format!(": {what}"),
    }
}

/// The error of a module's `-1` or `-2`, with what it said (`tally.say`).
pub(crate) fn refused_or_failed(returned: i32, what: Option<String>) -> WasmError {
    let what = what.unwrap_or_default();
    match returned {
        -1 => WasmError::BadParams(what),
        _ => WasmError::Failed(format!("the module said it failed{}", said(&what))),
    }
}

/// The most bytes of a `tally.say` line the host keeps.
pub const MAX_SAID_BYTES: usize = 1024;

/// The engine shared by every module of a worker, and the thread that ticks
/// its epoch.
pub struct Sandbox {
    instances: Instances,
    ticking: Arc<AtomicBool>,
}

/// What makes and runs instances: cheap to clone, so that a shard's call can
/// move to its shard thread.
#[derive(Clone)]
struct Instances {
    engine: Engine,
    limits: Limits,
}

/// How often running shards look at their cancellation.
const TICK: Duration = Duration::from_millis(10);

impl Sandbox {
    pub fn new(limits: Limits) -> Result<Sandbox> {
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .cranelift_nan_canonicalization(true)
            .relaxed_simd_deterministic(true)
            .max_wasm_stack(1 << 20)
            // Errors reach users as one line: no wasm backtraces are attached.
            .wasm_backtrace_max_frames(None);
        // Threads (shared memory) are not built in: the `threads` feature is off.
        let engine = Engine::new(&config).map_err(|e| WasmError::Failed(one_line(&e)))?;
        let ticking = Arc::new(AtomicBool::new(true));
        let (ticker, running) = (engine.weak(), ticking.clone());
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while running.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    match ticker.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(|e| WasmError::Failed(format!("no epoch thread: {e}")))?;
        Ok(Sandbox {
            instances: Instances { engine, limits },
            ticking,
        })
    }

    pub fn limits(&self) -> Limits {
        self.instances.limits
    }

    /// Compiles and checks a module: its size, its imports (only the ABI's),
    /// its exports (the ABI's, with their types) and the ABI version it
    /// speaks (called in an instance with little fuel), so that a module no
    /// shard could run is refused before any shard is planned.
    pub fn load(&self, bytes: &[u8]) -> Result<Kernel> {
        self.load_as(bytes, ABI_VERSION)
    }

    /// [`Sandbox::load`] of a module of ABI `version` (1: shards, 2: a
    /// sweep).
    fn load_as(&self, bytes: &[u8], version: i32) -> Result<Kernel> {
        let limits = self.instances.limits;
        let engine = &self.instances.engine;
        if bytes.len() > limits.module_bytes {
            return Err(WasmError::Refused(format!(
                "it has {} bytes, above the limit of {}",
                bytes.len(),
                limits.module_bytes
            )));
        }
        let module = Module::new(engine, bytes).map_err(|e| {
            WasmError::Refused(format!("it is not a valid module: {}", one_line(&e)))
        })?;
        check_imports(engine, &module)?;
        let sweeps = module.get_export("tally_sweep_expand").is_some();
        if version == ABI_VERSION && sweeps {
            return Err(WasmError::Refused(
                "it is a sweep module (it exports tally_sweep_expand, ABI version 2): run it \
                 as a wasm-sweep job (docs/kinds/wasm-sweep.md)"
                    .into(),
            ));
        }
        if version != ABI_VERSION && !sweeps && module.get_export("tally_shard").is_some() {
            return Err(WasmError::Refused(
                "it is a shard module (it exports tally_shard, ABI version 1): run it as a \
                 wasm job (docs/kinds/wasm.md)"
                    .into(),
            ));
        }
        check_exports(engine, &module, version)?;
        // Linked once: a shard's instance is then made without a linker.
        let linked = linker(engine)?
            .instantiate_pre(&module)
            .map_err(|e| WasmError::Refused(format!("it cannot be linked: {}", one_line(&e))))?;
        let kernel = Kernel { linked };
        self.check_version(&kernel, version)?;
        Ok(kernel)
    }

    /// Calls the module's `tally_abi_version` in an instance of its own with
    /// [`VERSION_CHECK_FUEL`].
    fn check_version(&self, kernel: &Kernel, expected: i32) -> Result<()> {
        let (events, _) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (mut store, instance) = self
            .instances
            .instantiate(kernel, events, stop, VERSION_CHECK_FUEL)
            .map_err(|e| WasmError::Refused(format!("it cannot be instantiated: {e}")))?;
        let version_fn: TypedFunc<(), i32> = instance
            .get_typed_func(&mut store, "tally_abi_version")
            .map_err(|_| WasmError::Refused("it does not export tally_abi_version".into()))?;
        let version = version_fn.call(&mut store, ()).map_err(|e| {
            WasmError::Refused(format!(
                "its tally_abi_version did not return (within {VERSION_CHECK_FUEL} units of \
                 fuel): {}",
                one_line(&e)
            ))
        })?;
        check_version(version, expected)
    }

    /// Runs one shard of `kernel`; `hooks` gets its progress and checkpoints
    /// as they come and is asked whether to stop. The shard runs on a thread
    /// that this thread keeps for its shards (one made a shard cost more
    /// than a short shard itself) while this one forwards its events.
    pub fn run(
        &self,
        kernel: &Kernel,
        call: &ShardCall<'_>,
        hooks: &mut dyn Hooks,
    ) -> Result<Vec<u64>> {
        let stop = Arc::new(AtomicBool::new(false));
        let (events, received) = mpsc::channel();
        let (instances, kernel, call) =
            (self.instances.clone(), kernel.clone(), OwnedCall::of(call));
        let shard_stop = stop.clone();
        let done = shard_thread::run(move || {
            instances.run_here(&kernel, &call.borrowed(), events, shard_stop)
        })?;
        loop {
            match received.recv_timeout(TICK * 5) {
                Ok(Event::Progress(done, total)) => hooks.progress(done, total),
                Ok(Event::Checkpoint(state)) => hooks.checkpoint(&state),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            if hooks.cancelled() {
                stop.store(true, Ordering::Relaxed);
            }
        }
        done.recv()
            .map_err(|_| WasmError::Failed("the shard thread panicked".into()))?
    }
}

impl Instances {
    /// A fresh instance of `kernel` in a store of its own with `fuel`, the
    /// memory limit and the stop flag.
    fn instantiate(
        &self,
        kernel: &Kernel,
        events: mpsc::Sender<Event>,
        stop: Arc<AtomicBool>,
        fuel: u64,
    ) -> Result<(Store<Host>, Instance)> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.limits.memory_bytes)
            .instances(1)
            .memories(1)
            .tables(4)
            .trap_on_grow_failure(true)
            .build();
        let host = Host {
            limits,
            events,
            stop,
            checkpoint_bytes: self.limits.checkpoint_bytes,
            fuel,
            failure: None,
            said: None,
        };
        let mut store = Store::new(&self.engine, host);
        store.limiter(|host| &mut host.limits);
        store
            .set_fuel(fuel)
            .map_err(|e| WasmError::Failed(one_line(&e)))?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |context| {
            if context.data().stop.load(Ordering::Relaxed) {
                return Err(wasmtime::Error::msg(CANCELLED));
            }
            Ok(UpdateDeadline::Continue(1))
        });
        let instance = kernel
            .linked
            .instantiate(&mut store)
            .map_err(|e| self.explain(&mut store, e))?;
        Ok((store, instance))
    }

    fn run_here(
        &self,
        kernel: &Kernel,
        call: &ShardCall<'_>,
        events: mpsc::Sender<Event>,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<u64>> {
        let (mut store, instance) =
            self.instantiate(kernel, events, stop.clone(), self.limits.fuel)?;
        // The version was checked when the kernel was loaded.
        let exports = Exports::of(&instance, &mut store)?;
        let params = exports.place(&mut store, call.params.as_bytes())?;
        let state = exports.place(&mut store, call.state)?;
        let out_bytes = call.outputs as usize * 8;
        let out = exports.place(&mut store, &vec![0; out_bytes])?;
        let args = (
            call.shard as i64,
            call.shards as i64,
            call.prime as i64,
            params,
            call.params.len() as i32,
            state,
            call.state.len() as i32,
            out,
            call.outputs as i32,
        );
        let returned = exports
            .shard
            .call(&mut store, args)
            .map_err(|e| self.explain(&mut store, e))?;
        if let Some(failure) = store.data_mut().failure.take() {
            return Err(failure);
        }
        match returned {
            -1 | -2 => return Err(refused_or_failed(returned, store.data_mut().said.take())),
            // -3 answers a cancellation; without one it is the module's
            // fault (a hand-back would lease the shard again at once).
            -3 if stop.load(Ordering::Relaxed) => return Err(WasmError::Cancelled),
            -3 => return Err(WasmError::CancelledUnasked),
            n if n != i64::from(call.outputs) as i32 => {
                return Err(WasmError::WrongOutputs {
                    got: i64::from(n),
                    want: call.outputs,
                });
            }
            _ => {}
        }
        let mut bytes = vec![0; out_bytes];
        exports
            .memory
            .read(&store, out as u32 as usize, &mut bytes)
            .map_err(|_| WasmError::Trap("the output buffer is out of bounds".into()))?;
        let residues: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        if let Some((index, &value)) = residues.iter().enumerate().find(|(_, r)| **r >= call.prime)
        {
            return Err(WasmError::ResidueOutOfRange {
                index,
                value,
                prime: call.prime,
            });
        }
        Ok(residues)
    }

    /// What a wasmtime error means for the shard.
    fn explain(&self, store: &mut Store<Host>, error: wasmtime::Error) -> WasmError {
        if let Some(failure) = store.data_mut().failure.take() {
            return failure;
        }
        if error.to_string() == CANCELLED
            || error.chain().any(|cause| cause.to_string() == CANCELLED)
        {
            return WasmError::Cancelled;
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => WasmError::OutOfFuel(store.data().fuel),
            Some(trap) => WasmError::Trap(trap.to_string()),
            None if format!("{error:#}").contains("forcing trap when growing memory") => {
                WasmError::MemoryLimit(self.limits.memory_bytes)
            }
            None => WasmError::Trap(one_line(&error)),
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticking.store(false, Ordering::Relaxed);
    }
}

/// The message of the epoch callback's trap when the shard is stopped.
const CANCELLED: &str = "tally: the shard was cancelled";

/// The fuel of the ABI version check at load: returning a constant takes a
/// few units, and a module's start function must be as quick.
const VERSION_CHECK_FUEL: u64 = 100_000;

/// Refuses a module that speaks another ABI version, naming both.
fn check_version(version: i32, expected: i32) -> Result<()> {
    if version == expected {
        return Ok(());
    }
    Err(WasmError::Refused(format!(
        "it speaks ABI version {version}, and this sandbox speaks ABI version {expected} \
         (docs/wasm-abi.md)"
    )))
}

/// A wasmtime error as one line: its causes joined, with no line breaks (a
/// user reads it in a job's error).
fn one_line(error: &wasmtime::Error) -> String {
    format!("{error:#}")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A checked, compiled module. (The runner names modules by the SHA-256 it
/// computed when it received them; the sandbox does not hash them again.)
#[derive(Clone)]
pub struct Kernel {
    linked: InstancePre<Host>,
}

/// A shard's call, owned, to move to the shard thread.
struct OwnedCall {
    shard: u64,
    shards: u64,
    prime: u64,
    params: String,
    state: Vec<u8>,
    outputs: u32,
}

impl OwnedCall {
    fn of(call: &ShardCall<'_>) -> OwnedCall {
        OwnedCall {
            shard: call.shard,
            shards: call.shards,
            prime: call.prime,
            params: call.params.to_string(),
            state: call.state.to_vec(),
            outputs: call.outputs,
        }
    }

    fn borrowed(&self) -> ShardCall<'_> {
        ShardCall {
            shard: self.shard,
            shards: self.shards,
            prime: self.prime,
            params: &self.params,
            state: &self.state,
            outputs: self.outputs,
        }
    }
}

enum Event {
    Progress(u64, u64),
    Checkpoint(Vec<u8>),
}

/// What the host functions of one instance share.
struct Host {
    limits: StoreLimits,
    events: mpsc::Sender<Event>,
    stop: Arc<AtomicBool>,
    checkpoint_bytes: usize,
    /// The fuel the store started with.
    fuel: u64,
    /// A failure a host function found, reported instead of the trap it caused.
    failure: Option<WasmError>,
    /// The last line the module said (`tally.say`): why it returns `-1` or
    /// `-2`.
    said: Option<String>,
}

/// The ABI's imports, by name and type.
fn abi_imports(engine: &Engine) -> [(&'static str, FuncType); 4] {
    [
        (
            "progress",
            FuncType::new(engine, [ValType::I64, ValType::I64], []),
        ),
        ("cancelled", FuncType::new(engine, [], [ValType::I32])),
        (
            "checkpoint",
            FuncType::new(engine, [ValType::I32, ValType::I32], []),
        ),
        (
            "say",
            FuncType::new(engine, [ValType::I32, ValType::I32], []),
        ),
    ]
}

fn check_imports(engine: &Engine, module: &Module) -> Result<()> {
    let abi = abi_imports(engine);
    for import in module.imports() {
        let name = format!("{}.{}", import.module(), import.name());
        let allowed = abi
            .iter()
            .find(|(n, _)| import.module() == "tally" && import.name() == *n);
        match (allowed, import.ty()) {
            (Some((_, want)), ExternType::Func(got)) if FuncType::eq(&got, want) => {}
            (Some(_), _) => {
                return Err(WasmError::Refused(format!(
                    "it imports {name} with another type than the ABI's"
                )));
            }
            (None, _) => {
                return Err(WasmError::Refused(format!(
                    "it imports {name}, which the ABI does not offer (only tally.progress, \
                     tally.cancelled, tally.checkpoint and tally.say)"
                )));
            }
        }
    }
    Ok(())
}

/// The exports of ABI `version` with their types.
fn check_exports(engine: &Engine, module: &Module, version: i32) -> Result<()> {
    let i32_ = ValType::I32;
    let i64_ = ValType::I64;
    let wanted = if version == sweep::SWEEP_ABI_VERSION {
        let i32s = |n: usize| FuncType::new(engine, vec![i32_.clone(); n], [i32_.clone()]);
        vec![
            ("tally_abi_version", i32s(0)),
            ("tally_alloc", i32s(1)),
            ("tally_sweep_plan", i32s(4)),
            ("tally_sweep_starts", i32s(4)),
            ("tally_sweep_expand", i32s(7)),
            ("tally_sweep_weights", i32s(8)),
        ]
    } else {
        vec![
            (
                "tally_abi_version",
                FuncType::new(engine, [], [i32_.clone()]),
            ),
            (
                "tally_alloc",
                FuncType::new(engine, [i32_.clone()], [i32_.clone()]),
            ),
            (
                "tally_shard",
                FuncType::new(
                    engine,
                    [
                        i64_.clone(),
                        i64_.clone(),
                        i64_,
                        i32_.clone(),
                        i32_.clone(),
                        i32_.clone(),
                        i32_.clone(),
                        i32_.clone(),
                        i32_.clone(),
                    ],
                    [i32_],
                ),
            ),
        ]
    };
    for (name, want) in wanted {
        match module.get_export(name) {
            Some(ExternType::Func(got)) if FuncType::eq(&got, &want) => {}
            Some(_) => {
                return Err(WasmError::Refused(format!(
                    "its export {name} does not have the ABI's type"
                )));
            }
            None => return Err(WasmError::Refused(format!("it does not export {name}"))),
        }
    }
    match module.get_export("memory") {
        Some(ExternType::Memory(_)) => Ok(()),
        _ => Err(WasmError::Refused("it does not export its memory".into())),
    }
}

/// The host functions, bound by name.
fn linker(engine: &Engine) -> Result<Linker<Host>> {
    let mut linker = Linker::new(engine);
    let failed = |e: wasmtime::Error| WasmError::Failed(one_line(&e));
    linker
        .func_wrap(
            "tally",
            "progress",
            |caller: Caller<'_, Host>, done: i64, total: i64| {
                let _ = caller
                    .data()
                    .events
                    .send(Event::Progress(done as u64, total as u64));
            },
        )
        .map_err(failed)?;
    linker
        .func_wrap("tally", "cancelled", |caller: Caller<'_, Host>| {
            i32::from(caller.data().stop.load(Ordering::Relaxed))
        })
        .map_err(failed)?;
    linker
        .func_wrap(
            "tally",
            "checkpoint",
            |mut caller: Caller<'_, Host>, ptr: i32, len: i32| -> wasmtime::Result<()> {
                let len = len as u32 as usize;
                if len > caller.data().checkpoint_bytes {
                    caller.data_mut().failure = Some(WasmError::CheckpointTooLarge(len));
                    return Err(wasmtime::Error::msg("checkpoint too large"));
                }
                let memory = caller
                    .get_export("memory")
                    .and_then(|e| e.into_memory())
                    .ok_or_else(|| wasmtime::Error::msg("no memory"))?;
                let mut state = vec![0; len];
                if memory
                    .read(&caller, ptr as u32 as usize, &mut state)
                    .is_err()
                {
                    caller.data_mut().failure = Some(WasmError::Trap(format!(
                        "its checkpoint state ({len} bytes at {:#x}) lies outside its memory",
                        ptr as u32
                    )));
                    return Err(wasmtime::Error::msg("checkpoint out of bounds"));
                }
                let _ = caller.data().events.send(Event::Checkpoint(state));
                Ok(())
            },
        )
        .map_err(failed)?;
    linker
        .func_wrap(
            "tally",
            "say",
            |mut caller: Caller<'_, Host>, ptr: i32, len: i32| {
                let len = (len as u32 as usize).min(MAX_SAID_BYTES);
                let Some(memory) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
                    return;
                };
                let mut text = vec![0; len];
                // A line out of bounds is not said; the module's return says
                // the rest.
                if memory.read(&caller, ptr as u32 as usize, &mut text).is_ok() {
                    let line: String = String::from_utf8_lossy(&text)
                        .chars()
                        .map(|c| if c.is_control() { ' ' } else { c })
                        .collect();
                    caller.data_mut().said = Some(line.trim().to_string());
                }
            },
        )
        .map_err(failed)?;
    Ok(linker)
}

/// The ABI's exports of one instance.
struct Exports {
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    #[allow(clippy::type_complexity)]
    shard: TypedFunc<(i64, i64, i64, i32, i32, i32, i32, i32, i32), i32>,
}

impl Exports {
    fn of(instance: &Instance, store: &mut Store<Host>) -> Result<Exports> {
        let missing = |what: &str| WasmError::Refused(format!("it does not export {what}"));
        Ok(Exports {
            memory: instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| missing("its memory"))?,
            alloc: instance
                .get_typed_func(&mut *store, "tally_alloc")
                .map_err(|_| missing("tally_alloc"))?,
            shard: instance
                .get_typed_func(&mut *store, "tally_shard")
                .map_err(|_| missing("tally_shard"))?,
        })
    }

    /// Copies `bytes` into memory the module allocated for them.
    fn place(&self, store: &mut Store<Host>, bytes: &[u8]) -> Result<i32> {
        let len = i32::try_from(bytes.len())
            .map_err(|_| WasmError::Failed("an argument above 2 GiB".into()))?;
        let ptr = self.alloc.call(&mut *store, len).map_err(|e| {
            WasmError::Trap(format!("tally_alloc({len}) trapped: {}", one_line(&e)))
        })?;
        self.memory
            .write(&mut *store, ptr as u32 as usize, bytes)
            .map_err(|_| {
                WasmError::Trap(format!("tally_alloc({len}) gave memory out of bounds"))
            })?;
        Ok(ptr)
    }
}

#[cfg(test)]
mod tests;
