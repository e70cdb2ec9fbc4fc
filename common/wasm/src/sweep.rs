//! Sweep modules (kernel ABI version 2, see
//! `docs/wasm-abi.md`): a module says what a state's children and
//! weights are, and its caller sums the counts of equal keys. A
//! [`SweepSession`] is one instance of a module, kept for a shard's batches,
//! whose every answer is checked against the module's plan and the ABI's
//! limits before its caller sees it. The `wasm-sweep` kind plans sweeps
//! and runs a session a level shard.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

use tally_kernels::sweep::SweepChildren;
use wasmtime::{Store, TypedFunc};

use crate::{Host, Instances, Kernel, Result, Sandbox, WasmError, one_line};

/// `tally_abi_version` of a sweep module.
pub const SWEEP_ABI_VERSION: i32 = 2;
/// What an export returns when its output buffer is too small.
const NEEDS_ROOM: i32 = -4;
pub use tally_kinds::guest::{
    MAX_SWEEP_CHILDREN as MAX_CHILDREN, MAX_SWEEP_FACTOR as MAX_FACTOR,
    MAX_SWEEP_KEY_LIMIT as MAX_KEY_LIMIT, MAX_SWEEP_OUTPUTS as MAX_OUTPUTS,
    MAX_SWEEP_STEPS as MAX_STEPS,
};
/// The most bytes one call may answer with.
pub const MAX_ANSWER_BYTES: usize = 1 << 30;
/// The first output buffer of a session.
const FIRST_OUT_BYTES: usize = 64 << 10;

/// When a sweep ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SweepEnd {
    Steps(u32),
    WhenEmpty,
}

/// A module's plan, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepPlan {
    pub key_limit: usize,
    pub outputs: usize,
    pub end: SweepEnd,
    pub most_children: usize,
}

type SweepFunc4 = TypedFunc<(i32, i32, i32, i32), i32>;
type ExpandFunc = TypedFunc<(i32, i32, i32, i32, i32, i32, i32), i32>;
type WeightsFunc = TypedFunc<(i32, i32, i32, i32, i32, i32, i32, i32), i32>;

/// One instance of a sweep module, its parameters placed once and its
/// buffers reused from call to call (a module's allocator need not free).
pub struct SweepSession {
    store: Store<Host>,
    memory: wasmtime::Memory,
    alloc: TypedFunc<i32, i32>,
    plan_fn: SweepFunc4,
    starts_fn: SweepFunc4,
    expand_fn: ExpandFunc,
    weights_fn: WeightsFunc,
    params: (i32, i32),
    /// The keys buffer (as large as the largest batch so far), and the
    /// bytes of the batch in it.
    keys: Buffer,
    keys_len: usize,
    out: Buffer,
    instances: Instances,
    plan: SweepPlan,
}

/// A region of the module's memory the session owns: its address and size.
#[derive(Clone, Copy, Default)]
struct Buffer {
    at: i32,
    len: usize,
}

impl Sandbox {
    /// Compiles and checks a sweep module, as [`Sandbox::load`] checks a
    /// shard module: its size, its imports, the exports of version 2 and
    /// the version it speaks.
    pub fn load_sweep(&self, bytes: &[u8]) -> Result<Kernel> {
        self.load_as(bytes, SWEEP_ABI_VERSION)
    }

    /// A session of `kernel` (from [`Sandbox::load_sweep`]) for `params`:
    /// one instance, its plan asked and checked. Once `stop` is set, a call
    /// running or made later stops within a tick of the epoch (about
    /// 10 ms), `Cancelled`.
    pub fn start_sweep(
        &self,
        kernel: &Kernel,
        params: &str,
        stop: Arc<AtomicBool>,
    ) -> Result<SweepSession> {
        let fuel = self.instances.limits.fuel;
        let (events, _) = mpsc::channel();
        let (mut store, instance) = self.instances.instantiate(kernel, events, stop, fuel)?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| WasmError::Refused("it does not export its memory".into()))?;
        let alloc = typed_export(&instance, &mut store, "tally_alloc")?;
        let plan_fn = typed_export(&instance, &mut store, "tally_sweep_plan")?;
        let starts_fn = typed_export(&instance, &mut store, "tally_sweep_starts")?;
        let expand_fn = typed_export(&instance, &mut store, "tally_sweep_expand")?;
        let weights_fn = typed_export(&instance, &mut store, "tally_sweep_weights")?;
        let placeholder = SweepPlan {
            key_limit: 0,
            outputs: 0,
            end: SweepEnd::WhenEmpty,
            most_children: 0,
        };
        let mut session = SweepSession {
            store,
            memory,
            alloc,
            plan_fn,
            starts_fn,
            expand_fn,
            weights_fn,
            params: (0, 0),
            keys: Buffer::default(),
            keys_len: 0,
            out: Buffer::default(),
            instances: self.instances.clone(),
            plan: placeholder,
        };
        let params_at = session.place_new(params.as_bytes())?;
        session.params = (params_at, params.len() as i32);
        let record = session.call(|s, out| {
            let (params, params_len) = s.params;
            s.plan_fn
                .call(&mut s.store, (params, params_len, out.at, out.len as i32))
        })?;
        session.plan = plan_of(&record)?;
        Ok(session)
    }
}

/// The export `name` of `instance` with the types `P -> R` (checked at load).
fn typed_export<P, R>(
    instance: &wasmtime::Instance,
    store: &mut Store<Host>,
    name: &str,
) -> Result<TypedFunc<P, R>>
where
    P: wasmtime::WasmParams,
    R: wasmtime::WasmResults,
{
    instance
        .get_typed_func(store, name)
        .map_err(|e| WasmError::Refused(format!("its export {name}: {}", one_line(&e))))
}

/// The plan a module wrote, checked against the ABI's limits.
fn plan_of(record: &[u8]) -> Result<SweepPlan> {
    let malformed = |why: String| Err(WasmError::Malformed(format!("its plan: {why}")));
    if record.len() != 20 {
        return malformed(format!("{} bytes, not 20", record.len()));
    }
    let word = |i: usize| u32::from_le_bytes(record[4 * i..4 * i + 4].try_into().expect("4"));
    let (key_limit, outputs) = (word(0) as usize, word(1) as usize);
    let most_children = word(4) as usize;
    let end = match (word(2), word(3)) {
        (0, steps) if steps <= MAX_STEPS => SweepEnd::Steps(steps),
        (0, steps) => return malformed(format!("{steps} steps, past {MAX_STEPS}")),
        (1, _) => SweepEnd::WhenEmpty,
        (kind, _) => return malformed(format!("end {kind}, neither 0 (steps) nor 1 (when empty)")),
    };
    if !(1..=MAX_KEY_LIMIT).contains(&key_limit) {
        return malformed(format!(
            "a key limit of {key_limit} bytes (1 to {MAX_KEY_LIMIT})"
        ));
    }
    if !(1..=MAX_OUTPUTS).contains(&outputs) {
        return malformed(format!("{outputs} weights a state (1 to {MAX_OUTPUTS})"));
    }
    if !(1..=MAX_CHILDREN).contains(&most_children) {
        return malformed(format!(
            "{most_children} children a state (1 to {MAX_CHILDREN})"
        ));
    }
    Ok(SweepPlan {
        key_limit,
        outputs,
        end,
        most_children,
    })
}

/// Reads records from the front of an answer, each cut short an error.
struct Records<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Records<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(WasmError::Malformed(format!("{} cut short", self.what)));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn key(&mut self, limit: usize) -> Result<&'a [u8]> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")) as usize;
        if len > limit {
            return Err(WasmError::Malformed(format!(
                "{}: a key of {len} bytes, past the plan's {limit}",
                self.what
            )));
        }
        self.take(len)
    }

    fn factor(&mut self, what: &str) -> Result<u64> {
        let value = self.u64()?;
        if value >= MAX_FACTOR {
            return Err(WasmError::Malformed(format!(
                "{}: a {what} of {value}, not below 2^62",
                self.what
            )));
        }
        Ok(value)
    }
}

impl SweepSession {
    pub fn plan(&self) -> SweepPlan {
        self.plan
    }

    /// The start states and their counts.
    pub fn starts(&mut self) -> Result<Vec<(Vec<u8>, u64)>> {
        let bytes = self.call(|s, out| {
            let (params, params_len) = s.params;
            s.starts_fn
                .call(&mut s.store, (params, params_len, out.at, out.len as i32))
        })?;
        let mut records = Records {
            bytes: &bytes,
            what: "the start states",
        };
        let mut starts = Vec::new();
        while !records.bytes.is_empty() {
            let key = records.key(self.plan.key_limit)?.to_vec();
            starts.push((key, records.factor("count")?));
        }
        Ok(starts)
    }

    /// The children of `keys`, states of level `step`, in their parents'
    /// order, added to `out`.
    pub fn expand(&mut self, step: u32, keys: &[&[u8]], out: &mut SweepChildren) -> Result<()> {
        self.place_keys(keys)?;
        let bytes = self.call(|s, out| {
            let (params, params_len) = s.params;
            let args = (
                step as i32,
                params,
                params_len,
                s.keys.at,
                s.keys_len as i32,
                out.at,
                out.len as i32,
            );
            s.expand_fn.call(&mut s.store, args)
        })?;
        let mut records = Records {
            bytes: &bytes,
            what: "the children",
        };
        let (mut parent_at, mut of_parent) = (0u32, 0usize);
        while !records.bytes.is_empty() {
            let parent = u32::from_le_bytes(records.take(4)?.try_into().expect("4 bytes"));
            if parent < parent_at || parent as usize >= keys.len() {
                return Err(WasmError::Malformed(format!(
                    "the children: parent {parent} out of order or past the batch of {}",
                    keys.len()
                )));
            }
            of_parent = if parent == parent_at {
                of_parent + 1
            } else {
                1
            };
            parent_at = parent;
            if of_parent > self.plan.most_children {
                return Err(WasmError::Malformed(format!(
                    "state {parent} of the batch has more children than the plan's {}",
                    self.plan.most_children
                )));
            }
            let key = records.key(self.plan.key_limit)?;
            let multiplier = records.factor("multiplier")?;
            out.push(parent, key, multiplier);
        }
        Ok(())
    }

    /// The weights of `keys`, states of level `step` (`last`: the sweep's
    /// last level): `L` a key, in order.
    pub fn weights(&mut self, step: u32, last: bool, keys: &[&[u8]]) -> Result<Vec<u64>> {
        self.place_keys(keys)?;
        let bytes = self.call(|s, out| {
            let (params, params_len) = s.params;
            let args = (
                step as i32,
                i32::from(last),
                params,
                params_len,
                s.keys.at,
                s.keys_len as i32,
                out.at,
                out.len as i32,
            );
            s.weights_fn.call(&mut s.store, args)
        })?;
        let want = 8 * self.plan.outputs * keys.len();
        if bytes.len() != want {
            return Err(WasmError::Malformed(format!(
                "the weights: {} bytes for {} states of {} weights",
                bytes.len(),
                keys.len(),
                self.plan.outputs
            )));
        }
        let mut records = Records {
            bytes: &bytes,
            what: "the weights",
        };
        (0..keys.len() * self.plan.outputs)
            .map(|_| records.factor("weight"))
            .collect()
    }

    /// `bytes` in memory the module allocated for them.
    fn place_new(&mut self, bytes: &[u8]) -> Result<i32> {
        let at = self.reserve(bytes.len())?;
        self.memory
            .write(&mut self.store, at as u32 as usize, bytes)
            .map_err(|_| WasmError::Trap("tally_alloc gave memory out of bounds".into()))?;
        Ok(at)
    }

    /// `len` bytes the module allocated, within its memory, left as they
    /// are: a buffer the module or the host fills later.
    fn reserve(&mut self, len: usize) -> Result<i32> {
        let asked =
            i32::try_from(len).map_err(|_| WasmError::Failed("an argument above 2 GiB".into()))?;
        let at = self.alloc.call(&mut self.store, asked).map_err(|e| {
            WasmError::Trap(format!("tally_alloc({len}) trapped: {}", one_line(&e)))
        })?;
        if at == 0 && len > 0 {
            return Err(WasmError::MemoryLimit(self.instances.limits.memory_bytes));
        }
        if at as u32 as usize + len > self.memory.data_size(&self.store) {
            return Err(WasmError::Trap(format!(
                "tally_alloc({len}) gave memory out of bounds"
            )));
        }
        Ok(at)
    }

    /// Writes a batch of key records to the keys buffer, grown (a new
    /// allocation) only for a batch larger than any before.
    fn place_keys(&mut self, keys: &[&[u8]]) -> Result<()> {
        let mut batch = Vec::with_capacity(keys.iter().map(|k| k.len() + 2).sum());
        for key in keys {
            let len = u16::try_from(key.len())
                .ok()
                .filter(|&len| usize::from(len) <= MAX_KEY_LIMIT)
                .ok_or_else(|| WasmError::Failed(format!("a key of {} bytes", key.len())))?;
            batch.extend_from_slice(&len.to_le_bytes());
            batch.extend_from_slice(key);
        }
        if batch.len() > self.keys.len {
            let at = self.reserve(batch.len())?;
            self.keys = Buffer {
                at,
                len: batch.len(),
            };
        }
        self.memory
            .write(&mut self.store, self.keys.at as u32 as usize, &batch)
            .map_err(|_| WasmError::Trap("the keys buffer is out of bounds".into()))?;
        self.keys_len = batch.len();
        Ok(())
    }

    /// Calls an export with the output buffer, growing it (once) when the
    /// module says it needs more room; the bytes it wrote.
    fn call(
        &mut self,
        mut export: impl FnMut(&mut SweepSession, Buffer) -> wasmtime::Result<i32>,
    ) -> Result<Vec<u8>> {
        if self.out.len == 0 {
            let at = self.reserve(FIRST_OUT_BYTES)?;
            self.out = Buffer {
                at,
                len: FIRST_OUT_BYTES,
            };
        }
        for attempt in 0..2 {
            self.store
                .set_fuel(self.instances.limits.fuel)
                .map_err(|e| WasmError::Failed(one_line(&e)))?;
            let out = self.out;
            let returned = export(self, out).map_err(|e| self.explain(e))?;
            match returned {
                n if n >= 0 => {
                    let n = n as usize;
                    if n > out.len {
                        return Err(WasmError::Malformed(format!(
                            "it wrote {n} bytes into a buffer of {}",
                            out.len
                        )));
                    }
                    let mut bytes = vec![0; n];
                    self.memory
                        .read(&self.store, out.at as u32 as usize, &mut bytes)
                        .map_err(|_| {
                            WasmError::Trap("the output buffer is out of bounds".into())
                        })?;
                    return Ok(bytes);
                }
                NEEDS_ROOM if attempt == 0 => {
                    let mut needed = [0u8; 8];
                    self.memory
                        .read(&self.store, out.at as u32 as usize, &mut needed)
                        .map_err(|_| {
                            WasmError::Trap("the output buffer is out of bounds".into())
                        })?;
                    let needed = u64::from_le_bytes(needed) as usize;
                    if needed <= out.len || needed > MAX_ANSWER_BYTES {
                        return Err(WasmError::Malformed(format!(
                            "it asked for {needed} bytes of output (more than {} and at most \
                             {MAX_ANSWER_BYTES})",
                            out.len
                        )));
                    }
                    let at = self.reserve(needed)?;
                    self.out = Buffer { at, len: needed };
                }
                NEEDS_ROOM => {
                    return Err(WasmError::Malformed(
                        "it asked for more room than it said it needed".into(),
                    ));
                }
                -1 | -2 => {
                    let said = self.store.data_mut().said.take();
                    return Err(crate::refused_or_failed(returned, said));
                }
                -3 => return Err(WasmError::CancelledUnasked),
                other => {
                    return Err(WasmError::Malformed(format!("it returned {other}")));
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    fn explain(&mut self, error: wasmtime::Error) -> WasmError {
        self.instances.explain(&mut self.store, error)
    }
}

/// The text (WAT) of a sweep module whose exports' bodies are given: its
/// plan, start states, children and weights, each writing its records at
/// `out` (the parameter the ABI names so) and returning their byte count.
/// For tests of modules that break the ABI's rules, here and through the
/// runner.
pub fn sweep_module_text(plan: &str, starts: &str, expand: &str, weights: &str) -> String {
    format!(
        r#"(module
          (memory (export "memory") 4)
          (global $next (mut i32) (i32.const 1024))
          (func (export "tally_abi_version") (result i32) (i32.const 2))
          (func (export "tally_alloc") (param $len i32) (result i32)
            (local $at i32)
            (local.set $at (global.get $next))
            (global.set $next (i32.add (global.get $next) (i32.add (local.get $len) (i32.const 8))))
            (local.get $at))
          (func (export "tally_sweep_plan") (param i32 i32 i32 i32) (result i32) {plan})
          (func (export "tally_sweep_starts") (param i32 i32 i32 i32) (result i32) {starts})
          (func (export "tally_sweep_expand") (param i32 i32 i32 i32 i32 i32 i32) (result i32)
            {expand})
          (func (export "tally_sweep_weights") (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)
            {weights}))"#
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Limits;

    const PRIME: u64 = (1 << 61) - 1;
    const SWEEP: &[u8] = include_bytes!("../../../examples/wasm/independent-sets-sweep.wasm");
    const QUEENS: &[u8] = include_bytes!("../../../examples/wasm/queens.wasm");

    /// A stop flag no one sets.
    fn never() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    /// A call that would run for hours ends `Cancelled` once the stop flag
    /// is set (set here before the call: the epoch's next tick ends it).
    #[test]
    fn a_stopped_session_ends_its_endless_call_cancelled() {
        let sandbox = Sandbox::new(Limits::default()).unwrap();
        let endless = faulty(PLAN, "(loop $again (br $again)) (i32.const 0)");
        let kernel = sandbox.load_sweep(&endless).unwrap();
        let stop = never();
        let mut session = sandbox.start_sweep(&kernel, "", stop.clone()).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(session.starts().err(), Some(WasmError::Cancelled));
    }

    fn add(sum: &mut u64, count: u64, factor: u64) {
        let product = (u128::from(count) * u128::from(factor % PRIME)) % u128::from(PRIME);
        *sum = ((u128::from(*sum) + product) % u128::from(PRIME)) as u64;
    }

    /// The sweep run by its caller through a session, the keys in batches
    /// of `batch`: the answer's first residue modulo [`PRIME`].
    fn run(session: &mut SweepSession, batch: usize) -> u64 {
        let plan = session.plan();
        let mut level: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for (key, count) in session.starts().unwrap() {
            add(level.entry(key).or_default(), 1, count);
        }
        let mut answer = 0;
        for step in 0.. {
            let last = match plan.end {
                SweepEnd::Steps(steps) => step == steps,
                SweepEnd::WhenEmpty => level.is_empty(),
            };
            let entries: Vec<(&Vec<u8>, &u64)> = level.iter().collect();
            let mut next = BTreeMap::new();
            for chunk in entries.chunks(batch) {
                let keys: Vec<&[u8]> = chunk.iter().map(|(k, _)| k.as_slice()).collect();
                let weights = session.weights(step, last, &keys).unwrap();
                for (&(_, &count), w) in chunk.iter().zip(weights.chunks(plan.outputs)) {
                    add(&mut answer, count, w[0]);
                }
                if !last {
                    let mut children = SweepChildren::default();
                    session.expand(step, &keys, &mut children).unwrap();
                    for (parent, key, multiplier) in children.iter() {
                        let count = *chunk[parent as usize].1;
                        add(next.entry(key.to_vec()).or_default(), count, multiplier);
                    }
                }
            }
            if last {
                return answer;
            }
            level = next;
        }
        unreachable!()
    }

    #[test]
    fn a_sweep_module_through_a_session_finds_what_its_native_run_finds() {
        let sandbox = Sandbox::new(Limits::default()).unwrap();
        let kernel = sandbox.load_sweep(SWEEP).unwrap();
        for (params, batch) in [("n=4", 1), ("n=6\nm=3", 7), ("n=9", 10_000), ("n=12", 50)] {
            let mut session = sandbox.start_sweep(&kernel, params, never()).unwrap();
            let native =
                tally_example_independent_sets_sweep::run_sweep_native(params, &[PRIME]).unwrap();
            assert_eq!(run(&mut session, batch), native.residues[0][0], "{params}");
        }
        // A batch whose children pass the first output buffer (64 KiB):
        // the session grows it when the module asks.
        let mut session = sandbox.start_sweep(&kernel, "n=16", never()).unwrap();
        let starts = session.starts().unwrap();
        let keys: Vec<&[u8]> = starts.iter().take(200).map(|(k, _)| k.as_slice()).collect();
        let mut children = SweepChildren::default();
        session.expand(0, &keys, &mut children).unwrap();
        assert!(
            children.len() * 18 > 64 << 10,
            "{} children",
            children.len()
        );
        let parents: Vec<u32> = children.iter().map(|(parent, _, _)| parent).collect();
        assert!(parents.windows(2).all(|w| w[0] <= w[1]));
        // Refused parameters.
        // Refused, saying why (the SDK passes its message on).
        match sandbox.start_sweep(&kernel, "n=40", never()).err() {
            Some(WasmError::BadParams(said)) => {
                assert!(said.contains("n must be 1 to 22"), "{said}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// The sandbox holds modules to the limits the guest SDK keeps to (the
    /// SDK imports no tally crate, so each side states them).
    #[test]
    fn the_limits_are_the_guest_sdks() {
        use tally_guest::sweep as guest;
        assert_eq!(SWEEP_ABI_VERSION, guest::SWEEP_ABI_VERSION);
        assert_eq!(NEEDS_ROOM, guest::NEEDS_ROOM);
        assert_eq!(MAX_KEY_LIMIT, guest::MAX_KEY_LIMIT);
        assert_eq!(MAX_CHILDREN, guest::MAX_CHILDREN);
        assert_eq!(MAX_OUTPUTS, guest::MAX_OUTPUTS);
        assert_eq!(MAX_STEPS, guest::MAX_STEPS);
        assert_eq!(MAX_FACTOR, guest::MAX_FACTOR);
    }

    /// The module's sweep, loaded and started through the kind layer's
    /// traits, run as level shards of the runner's engine, three buckets a
    /// level: the answer of its native run.
    #[test]
    fn a_sweep_module_through_level_shards_finds_what_its_native_run_finds() {
        use tally_kernels::spill::CountedList;
        use tally_kernels::sweep::{LevelShard, encode_states, key_bucket, sweep_level};
        use tally_kinds::guest::{GuestRuntime, GuestSweepEnd};
        let runtime = crate::GuestSandbox::new(Limits::default()).unwrap();
        let module = runtime.load_sweep(SWEEP).unwrap();
        let primes = [PRIME, 1_000_000_007];
        for params in ["n=5", "n=7\nm=4"] {
            let mut session = module.start(params, never()).unwrap();
            let plan = session.plan();
            let GuestSweepEnd::Steps(steps) = plan.end else {
                panic!("a sweep of fixed steps");
            };
            let buckets = 3;
            let mut first = vec![Vec::new(); buckets];
            let mut starts = session.starts().unwrap();
            starts.sort();
            for (key, count) in starts {
                let counts = primes.iter().map(|&p| count % p).collect();
                first[key_bucket(&key, buckets as u32) as usize].push((key, counts));
            }
            let mut inbox: Vec<Vec<Vec<u8>>> =
                first.iter().map(|s| vec![encode_states(s, 2)]).collect();
            let mut answer = [0u64; 2];
            for step in 0..=steps {
                let mut next = vec![Vec::new(); buckets];
                for parts in &inbox {
                    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                    let control = tally_kernels::Control::new();
                    let shard = LevelShard {
                        step,
                        last: step == steps,
                        outputs: 1,
                        buckets_out: 3,
                        batch: 16,
                        key_limit: plan.key_limit,
                    };
                    let level =
                        sweep_level(&mut *session, &shard, &primes, &parts, &control).unwrap();
                    for ((sum, found), p) in answer.iter_mut().zip(&level.answer).zip(primes) {
                        *sum = (*sum + found[0]) % p;
                    }
                    for (q, list) in level.sent.into_iter().enumerate() {
                        let CountedList::Bytes(list) = list else {
                            panic!("a level in memory sends its lists in memory");
                        };
                        next[q].push(list);
                    }
                }
                inbox = next;
            }
            let native =
                tally_example_independent_sets_sweep::run_sweep_native(params, &primes).unwrap();
            assert_eq!(
                vec![vec![answer[0]], vec![answer[1]]],
                native.residues,
                "{params}"
            );
        }
        // The module's faults are bad input to the runner: the job fails.
        let refused = module.start("n=40", never()).err().unwrap();
        assert!(
            matches!(refused, tally_kinds::Error::InvalidArgument(_)),
            "{refused}"
        );
        let refused = runtime.load(SWEEP).err().unwrap().to_string();
        assert!(refused.contains("it is a sweep module"), "{refused}");
    }

    #[test]
    fn shard_and_sweep_modules_are_told_apart_at_load() {
        let sandbox = Sandbox::new(Limits::default()).unwrap();
        let refused = sandbox.load(SWEEP).err().unwrap().to_string();
        assert!(refused.contains("it is a sweep module"), "{refused}");
        assert!(refused.contains("wasm-sweep job"), "{refused}");
        let refused = sandbox.load_sweep(QUEENS).err().unwrap().to_string();
        assert!(refused.contains("it is a shard module"), "{refused}");
        assert!(refused.contains("wasm job"), "{refused}");
    }

    /// A sweep module whose plan allows keys of 1 byte and whose start
    /// `starts` writes (in WAT: data at `out`, its byte count returned).
    fn faulty(plan: &str, starts: &str) -> Vec<u8> {
        let text = super::sweep_module_text(plan, starts, "(i32.const 0)", "(i32.const 0)");
        wat::parse_str(text).expect("the test module assembles")
    }

    /// A plan of key limit 1, 1 output, 1 step, 1 child a state.
    const PLAN: &str = "(i32.store (local.get 2) (i32.const 1))
        (i32.store offset=4 (local.get 2) (i32.const 1))
        (i32.store offset=8 (local.get 2) (i32.const 0))
        (i32.store offset=12 (local.get 2) (i32.const 1))
        (i32.store offset=16 (local.get 2) (i32.const 1))
        (i32.const 20)";

    #[test]
    fn a_sweep_module_that_breaks_the_rules_is_refused_with_the_reason() {
        let sandbox = Sandbox::new(Limits::default()).unwrap();
        let session = |plan: &str, starts: &str| {
            let kernel = sandbox.load_sweep(&faulty(plan, starts)).unwrap();
            sandbox
                .start_sweep(&kernel, "", never())
                .and_then(|mut s| s.starts())
        };
        // A start key of 2 bytes (length 2, then 'a' 'b', then a count).
        let long_key = "(i32.store16 (local.get 2) (i32.const 2))
            (i32.store16 offset=2 (local.get 2) (i32.const 0x6261))
            (i64.store offset=4 (local.get 2) (i64.const 1))
            (i32.const 12)";
        // A count of 2^62.
        let big_count = "(i32.store16 (local.get 2) (i32.const 1))
            (i32.store8 offset=2 (local.get 2) (i32.const 0x61))
            (i64.store offset=3 (local.get 2) (i64.const 0x4000000000000000))
            (i32.const 11)";
        // A record cut short, more room than it needs forever, a strange code.
        let cut = "(i32.store16 (local.get 2) (i32.const 1)) (i32.const 3)";
        let greedy = "(i64.store (local.get 2) (i64.const 0x10010)) (i32.const -4)";
        for (plan, starts, says) in [
            (PLAN, long_key, "a key of 2 bytes, past the plan's 1"),
            (
                PLAN,
                big_count,
                "a count of 4611686018427387904, not below 2^62",
            ),
            (PLAN, cut, "the start states cut short"),
            (PLAN, greedy, "more room than it said it needed"),
            (PLAN, "(i32.const -9)", "it returned -9"),
            (
                "(i32.const 12)",
                "(i32.const 0)",
                "its plan: 12 bytes, not 20",
            ),
        ] {
            let error = session(plan, starts).unwrap_err();
            assert!(
                matches!(&error, WasmError::Malformed(why) if why.contains(says)),
                "{says}: {error}"
            );
        }
        assert_eq!(session(PLAN, "(i32.const 0)").unwrap(), vec![]);
    }
}
