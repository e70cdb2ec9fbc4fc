//! Sweeps over keyed states (the kernel ABI's version 2, see
//! `docs/wasm-abi.md`): a model says what a state's children and
//! weights are; whoever runs it sums the counts of equal keys.
//!
//! Level 0 holds the start states with their counts. Each step expands every
//! state of a level into children, each a key with a multiplier: a child's
//! count is its parent's times the multiplier, and the counts of equal keys
//! are summed. Every state of every level adds its count times its weights
//! (`L` integers) to the answer. Counts are kept modulo each prime of a run,
//! so multipliers and weights are integers below [`MAX_FACTOR`], reduced
//! modulo each prime by the runner, and one sweep serves every prime.
//!
//! Natively, [`run_sweep`] runs a whole sweep in memory and checks the
//! model's output as a runner must (keys within the plan's limit, at most the
//! plan's children a state, factors below [`MAX_FACTOR`]): the reference a
//! distributed run is tested against.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::modular::{add_mod, mul_mod};
use crate::{KernelError, Params};

/// Multipliers and weights are below this: a residue of any prime below
/// 2^62 after one reduction.
pub const MAX_FACTOR: u64 = 1 << 62;
/// The longest key a plan may allow.
pub const MAX_KEY_LIMIT: usize = 4096;
/// The most steps a sweep may take.
pub const MAX_STEPS: u32 = 1 << 20;
/// The most children one state may have.
pub const MAX_CHILDREN: usize = 1 << 16;
/// The most weights a state may have.
pub const MAX_OUTPUTS: usize = 4096;

/// When a sweep ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepEnd {
    /// After this many steps: levels `0..=steps` count.
    Steps(u32),
    /// At the first empty level (at most [`MAX_STEPS`] steps).
    WhenEmpty,
}

/// What a model tells its runner before the sweep starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepPlan {
    /// The longest key (at most [`MAX_KEY_LIMIT`] bytes).
    pub key_limit: usize,
    /// Weights a state has, `L` (1 to [`MAX_OUTPUTS`]).
    pub outputs: usize,
    pub end: SweepEnd,
    /// The most children one state may have (at most [`MAX_CHILDREN`]).
    pub most_children: usize,
}

impl SweepPlan {
    /// The plan's own limits, checked: `Err` names the first it breaks.
    pub fn check(&self) -> Result<(), String> {
        if self.key_limit == 0 || self.key_limit > MAX_KEY_LIMIT {
            return Err(alloc::format!(
                "a key limit of {} bytes (1 to {MAX_KEY_LIMIT})",
                self.key_limit
            ));
        }
        if self.outputs == 0 || self.outputs > MAX_OUTPUTS {
            return Err(alloc::format!(
                "{} weights a state (1 to {MAX_OUTPUTS})",
                self.outputs
            ));
        }
        if self.most_children == 0 || self.most_children > MAX_CHILDREN {
            return Err(alloc::format!(
                "at most {} children a state (1 to {MAX_CHILDREN})",
                self.most_children
            ));
        }
        if let SweepEnd::Steps(steps) = self.end
            && steps > MAX_STEPS
        {
            return Err(alloc::format!("{steps} steps (at most {MAX_STEPS})"));
        }
        Ok(())
    }
}

/// A model of keyed states: what a runner asks of it. Keys are byte strings
/// the model chooses (a canonical form when states are counted up to
/// symmetry); equal keys are one state.
pub trait Sweep: Sized {
    /// The model from the job's parameters: `Err(BadParams)` refuses them.
    fn new(params: &Params<'_>) -> Result<Self, KernelError>;

    /// Its plan, asked once.
    fn plan(&self) -> SweepPlan;

    /// The start states: `emit(key, count)` for each (equal keys add up).
    fn starts(&self, emit: &mut dyn FnMut(&[u8], u64));

    /// The children of the state `key` of level `step`: `emit(child,
    /// multiplier)` for each (equal children add up).
    fn expand(
        &mut self,
        step: u32,
        key: &[u8],
        emit: &mut dyn FnMut(&[u8], u64),
    ) -> Result<(), KernelError>;

    /// The weights of the state `key` of level `step` (`out` holds `L`
    /// zeros). By default a state of the last level weighs 1 in every output
    /// and any other 0; a sweep that ends when a level is empty has no last
    /// level, so it must say its weights itself.
    fn weights(&self, step: u32, key: &[u8], last: bool, out: &mut [u64]) {
        let _ = (step, key);
        if last {
            out.fill(1);
        }
    }
}

/// What a native sweep found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepAnswer {
    /// For each prime, the `L` residues of the answer.
    pub residues: Vec<Vec<u64>>,
    /// States in each level swept (the empty level that ended it included).
    pub levels: Vec<u64>,
}

/// One level: each key with its count modulo each prime.
type Level = BTreeMap<Vec<u8>, Vec<u64>>;

/// Runs the sweep of model `S` on `params` (`K=V` lines) in memory, its
/// counts modulo each of `primes` (each a prime below 2^62), checking the
/// model's output as a runner does.
pub fn run_sweep<S: Sweep>(params: &str, primes: &[u64]) -> Result<SweepAnswer, KernelError> {
    let params = Params::parse(params).map_err(KernelError::from)?;
    if primes.is_empty() || primes.iter().any(|p| !(2..MAX_FACTOR).contains(p)) {
        return Err(KernelError::BadParams(
            "each prime must be below 2^62".into(),
        ));
    }
    let mut model = S::new(&params)?;
    let plan = model.plan();
    plan.check().map_err(KernelError::Malformed)?;
    let mut level = Level::new();
    let mut fault = None;
    let ones = vec![1; primes.len()];
    model.starts(&mut |key, count| {
        if let Err(why) = add_state(&mut level, &plan, primes, key, &ones, count) {
            fault.get_or_insert(alloc::format!("start state: {why}"));
        }
    });
    if let Some(why) = fault {
        return Err(KernelError::Malformed(why));
    }
    let mut residues = vec![vec![0u64; plan.outputs]; primes.len()];
    let mut levels = Vec::new();
    let mut weights = vec![0u64; plan.outputs];
    for step in 0..=MAX_STEPS {
        levels.push(level.len() as u64);
        let last = match plan.end {
            SweepEnd::Steps(steps) => step == steps,
            SweepEnd::WhenEmpty => level.is_empty(),
        };
        for (key, counts) in &level {
            weights.fill(0);
            model.weights(step, key, last, &mut weights);
            if let Some(w) = weights.iter().find(|&&w| w >= MAX_FACTOR) {
                return Err(KernelError::Malformed(alloc::format!(
                    "a weight of {w} at level {step}, not below 2^62"
                )));
            }
            for ((sums, &count), &p) in residues.iter_mut().zip(counts).zip(primes) {
                for (sum, &w) in sums.iter_mut().zip(&weights) {
                    *sum = add_mod(*sum, mul_mod(count, w % p, p), p);
                }
            }
        }
        if last {
            return Ok(SweepAnswer { residues, levels });
        }
        let mut next = Level::new();
        for (key, counts) in &level {
            let mut children = 0usize;
            let mut fault = None;
            model.expand(step, key, &mut |child, multiplier| {
                children += 1;
                if let Err(why) = add_state(&mut next, &plan, primes, child, counts, multiplier) {
                    fault.get_or_insert(why);
                }
            })?;
            if let Some(why) = fault {
                return Err(KernelError::Malformed(alloc::format!(
                    "a child at level {}: {why}",
                    step + 1
                )));
            }
            if children > plan.most_children {
                return Err(KernelError::Malformed(alloc::format!(
                    "a state of level {step} has {children} children, more than the plan's {}",
                    plan.most_children
                )));
            }
        }
        level = next;
    }
    Err(KernelError::Malformed(alloc::format!(
        "no empty level after {MAX_STEPS} steps"
    )))
}

/// Adds `counts` (one per prime) times `factor` to `key`'s counts in
/// `level`.
fn add_state(
    level: &mut Level,
    plan: &SweepPlan,
    primes: &[u64],
    key: &[u8],
    counts: &[u64],
    factor: u64,
) -> Result<(), String> {
    if key.len() > plan.key_limit {
        return Err(alloc::format!(
            "a key of {} bytes, past the plan's {}",
            key.len(),
            plan.key_limit
        ));
    }
    if factor >= MAX_FACTOR {
        return Err(alloc::format!("a multiplier of {factor}, not below 2^62"));
    }
    let sums = level
        .entry(key.to_vec())
        .or_insert_with(|| vec![0; primes.len()]);
    for ((sum, &count), &p) in sums.iter_mut().zip(counts).zip(primes) {
        *sum = add_mod(*sum, mul_mod(count, factor % p, p), p);
    }
    Ok(())
}

// ---- the records a model and its runner exchange (ABI version 2) ----

/// `tally_abi_version` of a sweep module.
pub const SWEEP_ABI_VERSION: i32 = 2;
/// What an export returns when `out` is too small: the bytes it needs are
/// then in the first 8 bytes of `out` (when it has 8), and the runner calls
/// again with more room or a smaller batch.
pub const NEEDS_ROOM: i32 = -4;
/// The bytes of a plan record.
pub const PLAN_BYTES: usize = 20;

/// A plan as `tally_sweep_plan` writes it: five little-endian u32, the key
/// limit, `L`, the end (0: a number of steps, 1: when a level is empty),
/// the steps (0 for the latter) and the most children a state.
pub fn plan_record(plan: &SweepPlan) -> [u8; PLAN_BYTES] {
    let (end, steps) = match plan.end {
        SweepEnd::Steps(steps) => (0u32, steps),
        SweepEnd::WhenEmpty => (1, 0),
    };
    let words = [
        plan.key_limit as u32,
        plan.outputs as u32,
        end,
        steps,
        plan.most_children as u32,
    ];
    let mut record = [0u8; PLAN_BYTES];
    for (chunk, word) in record.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    record
}

/// A key as records carry it: its length (u16) and its bytes. The caller
/// has checked the length against [`MAX_KEY_LIMIT`].
pub fn push_key(out: &mut Vec<u8>, key: &[u8]) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
}

/// Splits a batch of key records (as [`push_key`] writes them); `None` when
/// a record is cut short.
pub fn keys_of(mut batch: &[u8]) -> impl Iterator<Item = Option<&[u8]>> {
    core::iter::from_fn(move || {
        if batch.is_empty() {
            return None;
        }
        let Some((len, rest)) = batch.split_first_chunk::<2>() else {
            batch = &[];
            return Some(None);
        };
        let len = u16::from_le_bytes(*len) as usize;
        if rest.len() < len {
            batch = &[];
            return Some(None);
        }
        let (key, rest) = rest.split_at(len);
        batch = rest;
        Some(Some(key))
    })
}

/// `tally_sweep_starts`'s bytes: a record (key, count as u64) per start.
/// A key past [`MAX_KEY_LIMIT`] is the model's fault, found here.
pub fn starts_records<S: Sweep>(model: &S) -> Result<Vec<u8>, KernelError> {
    let mut out = Vec::new();
    let mut long = None;
    model.starts(&mut |key, count| {
        if key.len() > MAX_KEY_LIMIT {
            long.get_or_insert(key.len());
            return;
        }
        push_key(&mut out, key);
        out.extend_from_slice(&count.to_le_bytes());
    });
    match long {
        Some(len) => Err(too_long(len)),
        None => Ok(out),
    }
}

fn too_long(len: usize) -> KernelError {
    KernelError::Malformed(alloc::format!("a key of {len} bytes, past {MAX_KEY_LIMIT}"))
}

/// `tally_sweep_expand`'s bytes for the batch of key records `keys` of
/// level `step`: a record (parent index as u32, key, multiplier as u64) per
/// child, in the order of their parents.
pub fn expand_records<S: Sweep>(
    model: &mut S,
    step: u32,
    keys: &[u8],
) -> Result<Vec<u8>, KernelError> {
    let mut out = Vec::new();
    for (parent, key) in keys_of(keys).enumerate() {
        let key = key.ok_or_else(|| KernelError::BadParams("a batch record cut short".into()))?;
        let mut long = None;
        model.expand(step, key, &mut |child, multiplier| {
            if child.len() > MAX_KEY_LIMIT {
                long.get_or_insert(child.len());
                return;
            }
            out.extend_from_slice(&(parent as u32).to_le_bytes());
            push_key(&mut out, child);
            out.extend_from_slice(&multiplier.to_le_bytes());
        })?;
        if let Some(len) = long {
            return Err(too_long(len));
        }
    }
    Ok(out)
}

/// `tally_sweep_weights`'s bytes for the batch `keys` of level `step`
/// (`last` when it is the sweep's last): `outputs` weights (u64) a key.
pub fn weights_records<S: Sweep>(
    model: &S,
    step: u32,
    last: bool,
    keys: &[u8],
    outputs: usize,
) -> Result<Vec<u8>, KernelError> {
    let mut out = Vec::new();
    let mut weights = vec![0u64; outputs];
    for key in keys_of(keys) {
        let key = key.ok_or_else(|| KernelError::BadParams("a batch record cut short".into()))?;
        weights.fill(0);
        model.weights(step, key, last, &mut weights);
        for w in &weights {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    Ok(out)
}

/// Defines the entry points of a sweep module around `$model`, a type that
/// implements [`Sweep`]. Invoke it once, at the root of the crate.
///
/// On `wasm32` it exports `tally_abi_version` (2), `tally_alloc`,
/// `tally_sweep_plan`, `tally_sweep_starts`, `tally_sweep_expand` and
/// `tally_sweep_weights` (see `docs/wasm-abi.md`). Natively it
/// defines instead `pub fn run_sweep_native(params: &str, primes: &[u64])`,
/// the whole sweep in memory ([`run_sweep`]).
#[macro_export]
macro_rules! tally_sweep {
    ($model:ty) => {
        #[cfg(target_arch = "wasm32")]
        static TALLY_SWEEP_MODEL: $crate::__private::ModelCell<$model> =
            $crate::__private::ModelCell::new();

        /// ABI export: the version of the kernel ABI this module implements.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_abi_version() -> i32 {
            $crate::sweep::SWEEP_ABI_VERSION
        }

        /// ABI export: `len` bytes of memory for the host to write into.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_alloc(len: i32) -> i32 {
            $crate::__private::host_alloc(len)
        }

        /// ABI export: the sweep's plan.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_sweep_plan(
            params: i32,
            params_len: i32,
            out: i32,
            out_len: i32,
        ) -> i32 {
            // SAFETY: the host hands regions it obtained from `tally_alloc`.
            unsafe {
                $crate::__private::wasm_sweep(
                    &TALLY_SWEEP_MODEL,
                    params,
                    params_len,
                    out,
                    out_len,
                    |model| {
                        Ok($crate::sweep::plan_record(&$crate::sweep::Sweep::plan(model)).to_vec())
                    },
                )
            }
        }

        /// ABI export: the start states.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        pub extern "C" fn tally_sweep_starts(
            params: i32,
            params_len: i32,
            out: i32,
            out_len: i32,
        ) -> i32 {
            // SAFETY: as for `tally_sweep_plan`.
            unsafe {
                $crate::__private::wasm_sweep(
                    &TALLY_SWEEP_MODEL,
                    params,
                    params_len,
                    out,
                    out_len,
                    |model| $crate::sweep::starts_records(model),
                )
            }
        }

        /// ABI export: the children of a batch of states of level `step`.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn tally_sweep_expand(
            step: i32,
            params: i32,
            params_len: i32,
            keys: i32,
            keys_len: i32,
            out: i32,
            out_len: i32,
        ) -> i32 {
            // SAFETY: as for `tally_sweep_plan`; `keys` too.
            unsafe {
                let keys = $crate::__private::host_slice(keys, keys_len);
                $crate::__private::wasm_sweep(
                    &TALLY_SWEEP_MODEL,
                    params,
                    params_len,
                    out,
                    out_len,
                    |model| $crate::sweep::expand_records(model, step as u32, keys),
                )
            }
        }

        /// ABI export: the weights of a batch of states of level `step`.
        #[cfg(target_arch = "wasm32")]
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn tally_sweep_weights(
            step: i32,
            last: i32,
            params: i32,
            params_len: i32,
            keys: i32,
            keys_len: i32,
            out: i32,
            out_len: i32,
        ) -> i32 {
            // SAFETY: as for `tally_sweep_expand`.
            unsafe {
                let keys = $crate::__private::host_slice(keys, keys_len);
                $crate::__private::wasm_sweep(
                    &TALLY_SWEEP_MODEL,
                    params,
                    params_len,
                    out,
                    out_len,
                    |model| {
                        let outputs = $crate::sweep::Sweep::plan(model).outputs;
                        $crate::sweep::weights_records(model, step as u32, last != 0, keys, outputs)
                    },
                )
            }
        }

        /// Runs the whole sweep natively, each count modulo every one of
        /// `primes`, checking the model's output as a runner does.
        #[cfg(not(target_arch = "wasm32"))]
        pub fn run_sweep_native(
            params: &str,
            primes: &[u64],
        ) -> ::core::result::Result<$crate::sweep::SweepAnswer, $crate::KernelError> {
            $crate::sweep::run_sweep::<$model>(params, primes)
        }
    };
}

/// The least of `images` (a key's images under a group of symmetries, the key
/// itself among them): the canonical key of its class.
pub fn least_image<I: IntoIterator<Item = u128>>(images: I) -> u128 {
    images.into_iter().min().unwrap_or(0)
}

/// The eight images of an `rows x cols` grid of bits (bit `r * cols + c`)
/// under the symmetries of the rectangle: four when it is not square (the
/// identity, the two reflections and the half turn), eight when it is.
pub fn grid_images(bits: u128, rows: usize, cols: usize) -> Vec<u128> {
    assert!(rows * cols <= 128, "a grid of at most 128 cells");
    let cell = |r: usize, c: usize| bits >> (r * cols + c) & 1;
    let map = |f: &dyn Fn(usize, usize) -> (usize, usize, usize)| {
        let mut image = 0u128;
        for r in 0..rows {
            for c in 0..cols {
                let (r2, c2, width) = f(r, c);
                image |= cell(r, c) << (r2 * width + c2);
            }
        }
        image
    };
    let (h, w) = (rows - 1, cols - 1);
    let mut images = vec![
        bits,
        map(&|r, c| (r, w - c, cols)),
        map(&|r, c| (h - r, c, cols)),
        map(&|r, c| (h - r, w - c, cols)),
    ];
    if rows == cols {
        images.extend([
            map(&|r, c| (c, r, rows)),
            map(&|r, c| (w - c, r, rows)),
            map(&|r, c| (c, h - r, rows)),
            map(&|r, c| (w - c, h - r, rows)),
        ]);
    }
    images
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMES: [u64; 3] = [1_000_000_007, (1 << 61) - 1, 998_244_353];

    /// Domino tilings of a `rows x cols` rectangle, a column at a time: a
    /// state is the set of cells of the next column that dominoes from this
    /// one already cover.
    struct Dominoes {
        rows: usize,
        cols: u32,
    }

    impl Dominoes {
        /// Every way to cover the column's cells not in `filled`: each cell
        /// either pokes a domino into the next column or pairs with the
        /// cell below it. `emit(next column's filled cells)`.
        fn fill(&self, row: usize, filled: u32, poked: u32, emit: &mut dyn FnMut(&[u8], u64)) {
            if row == self.rows {
                emit(&poked.to_le_bytes(), 1);
                return;
            }
            if filled >> row & 1 == 1 {
                return self.fill(row + 1, filled, poked, emit);
            }
            self.fill(row + 1, filled, poked | 1 << row, emit);
            if row + 1 < self.rows && filled >> (row + 1) & 1 == 0 {
                self.fill(row + 2, filled, poked, emit);
            }
        }
    }

    impl Sweep for Dominoes {
        fn new(params: &Params<'_>) -> Result<Self, KernelError> {
            Ok(Dominoes {
                rows: params.get_u64("rows")? as usize,
                cols: params.get_u64("cols")? as u32,
            })
        }
        fn plan(&self) -> SweepPlan {
            SweepPlan {
                key_limit: 4,
                outputs: 1,
                end: SweepEnd::Steps(self.cols),
                most_children: 1 << self.rows,
            }
        }
        fn starts(&self, emit: &mut dyn FnMut(&[u8], u64)) {
            emit(&0u32.to_le_bytes(), 1);
        }
        fn expand(
            &mut self,
            _step: u32,
            key: &[u8],
            emit: &mut dyn FnMut(&[u8], u64),
        ) -> Result<(), KernelError> {
            let filled = u32::from_le_bytes(key.try_into().map_err(|_| KernelError::Failed)?);
            self.fill(0, filled, 0, emit);
            Ok(())
        }
        fn weights(&self, _step: u32, key: &[u8], last: bool, out: &mut [u64]) {
            // Only the empty boundary closes the rectangle.
            out[0] = u64::from(last && key.iter().all(|&b| b == 0));
        }
    }

    /// Domino tilings by brute force: the first empty cell is covered
    /// across or down.
    fn tilings(rows: usize, cols: usize, covered: u64) -> u64 {
        let Some(cell) = (0..rows * cols).find(|&i| covered >> i & 1 == 0) else {
            return 1;
        };
        let (r, c) = (cell / cols, cell % cols);
        let mut ways = 0;
        if c + 1 < cols && covered >> (cell + 1) & 1 == 0 {
            ways += tilings(rows, cols, covered | 3 << cell);
        }
        if r + 1 < rows {
            ways += tilings(rows, cols, covered | 1 << cell | 1 << (cell + cols));
        }
        ways
    }

    #[test]
    fn a_transfer_sweep_counts_what_brute_force_counts() {
        for rows in 1..=4 {
            for cols in 1..=6 {
                let params = alloc::format!("rows={rows}\ncols={cols}");
                let answer = run_sweep::<Dominoes>(&params, &PRIMES).unwrap();
                let exact = tilings(rows, cols, 0);
                for (residues, p) in answer.residues.iter().zip(PRIMES) {
                    assert_eq!(residues, &[exact % p], "{rows} x {cols}");
                }
                assert_eq!(answer.levels.len(), cols + 1);
            }
        }
        // OEIS A004003: the 8 x 8 board.
        let answer = run_sweep::<Dominoes>("rows=8\ncols=8", &PRIMES[..1]).unwrap();
        assert_eq!(answer.residues, [[12_988_816]]);
    }

    /// Peg solitaire on the triangle of side 5 from an empty apex, until no
    /// jump is left: a state is a board, weighing 1 when one peg is left.
    struct Triangle {
        jumps: Vec<(u16, u16, u16)>,
    }

    fn triangle_jumps() -> Vec<(u16, u16, u16)> {
        let index = |r: i32, c: i32| (0..5).contains(&r) && (0..=r).contains(&c);
        let bit = |r: i32, c: i32| 1u16 << (r * (r + 1) / 2 + c);
        let mut jumps = Vec::new();
        for r in 0..5 {
            for c in 0..=r {
                for (dr, dc) in [(0, 1), (1, 0), (1, 1), (0, -1), (-1, 0), (-1, -1)] {
                    if index(r + 2 * dr, c + 2 * dc) {
                        jumps.push((bit(r, c), bit(r + dr, c + dc), bit(r + 2 * dr, c + 2 * dc)));
                    }
                }
            }
        }
        jumps
    }

    impl Sweep for Triangle {
        fn new(_params: &Params<'_>) -> Result<Self, KernelError> {
            Ok(Triangle {
                jumps: triangle_jumps(),
            })
        }
        fn plan(&self) -> SweepPlan {
            SweepPlan {
                key_limit: 2,
                outputs: 1,
                end: SweepEnd::WhenEmpty,
                most_children: self.jumps.len(),
            }
        }
        fn starts(&self, emit: &mut dyn FnMut(&[u8], u64)) {
            emit(&(0x7fffu16 & !1).to_le_bytes(), 1);
        }
        fn expand(
            &mut self,
            _step: u32,
            key: &[u8],
            emit: &mut dyn FnMut(&[u8], u64),
        ) -> Result<(), KernelError> {
            let board = u16::from_le_bytes(key.try_into().map_err(|_| KernelError::Failed)?);
            for &(from, over, to) in &self.jumps {
                if board & from != 0 && board & over != 0 && board & to == 0 {
                    emit(&(board ^ from ^ over ^ to).to_le_bytes(), 1);
                }
            }
            Ok(())
        }
        fn weights(&self, _step: u32, key: &[u8], _last: bool, out: &mut [u64]) {
            out[0] = u64::from(u16::from_le_bytes([key[0], key[1]]).count_ones() == 1);
        }
    }

    /// Jump sequences from `board` to one peg, by depth-first search.
    fn solutions(jumps: &[(u16, u16, u16)], board: u16) -> u64 {
        if board.count_ones() == 1 {
            return 1;
        }
        (jumps.iter())
            .filter(|&&(f, o, t)| board & f != 0 && board & o != 0 && board & t == 0)
            .map(|&(f, o, t)| solutions(jumps, board ^ f ^ o ^ t))
            .sum()
    }

    #[test]
    fn a_sweep_until_empty_counts_what_a_depth_first_search_counts() {
        let answer = run_sweep::<Triangle>("", &PRIMES).unwrap();
        let exact = solutions(&triangle_jumps(), 0x7fff & !1);
        assert_eq!(exact, 29_760);
        for residues in &answer.residues {
            assert_eq!(residues, &[exact]);
        }
        // 14 pegs down to 1 in 13 jumps; the level after the last jump is
        // empty.
        assert_eq!(answer.levels.len(), 15);
        assert_eq!((answer.levels[0], answer.levels[14]), (1, 0));
    }

    /// A little-endian integer of `N` bytes at the front of `bytes`, and the
    /// rest.
    fn take<const N: usize>(bytes: &[u8]) -> (u64, &[u8]) {
        let (head, rest) = bytes.split_first_chunk::<N>().expect("a whole record");
        let mut word = [0u8; 8];
        word[..N].copy_from_slice(head);
        (u64::from_le_bytes(word), rest)
    }

    /// A key record at the front of `bytes`, and the rest.
    fn take_key(bytes: &[u8]) -> (&[u8], &[u8]) {
        let (len, rest) = take::<2>(bytes);
        rest.split_at(len as usize)
    }

    /// The sweep run as a runner runs it: every exchange through the
    /// records, the keys in batches of `batch`.
    fn run_through_records<S: Sweep>(params: &str, primes: &[u64], batch: usize) -> Vec<Vec<u64>> {
        let params = Params::parse(params).unwrap();
        let mut model = S::new(&params).unwrap();
        let plan = plan_record(&model.plan());
        let word = |i: usize| take::<4>(&plan[4 * i..]).0 as u32;
        let (outputs, end, steps) = (word(1) as usize, word(2), word(3));
        let mut level = Level::new();
        let mut starts = &starts_records(&model).unwrap()[..];
        while !starts.is_empty() {
            let (key, rest) = take_key(starts);
            let (count, rest) = take::<8>(rest);
            let sums = level.entry(key.to_vec()).or_insert(vec![0; primes.len()]);
            for (sum, &p) in sums.iter_mut().zip(primes) {
                *sum = add_mod(*sum, count % p, p);
            }
            starts = rest;
        }
        let mut answer = vec![vec![0u64; outputs]; primes.len()];
        for step in 0.. {
            let last = match end {
                0 => step == steps,
                _ => level.is_empty(),
            };
            let entries: Vec<(&Vec<u8>, &Vec<u64>)> = level.iter().collect();
            let mut next = Level::new();
            for chunk in entries.chunks(batch) {
                let mut keys = Vec::new();
                for (key, _) in chunk {
                    push_key(&mut keys, key);
                }
                let weights = weights_records(&model, step, last, &keys, outputs).unwrap();
                assert_eq!(weights.len(), 8 * outputs * chunk.len());
                for ((_, counts), weights) in chunk.iter().zip(weights.chunks_exact(8 * outputs)) {
                    for ((sums, &count), &p) in answer.iter_mut().zip(*counts).zip(primes) {
                        for (sum, w) in sums.iter_mut().zip(weights.chunks_exact(8)) {
                            let w = take::<8>(w).0;
                            *sum = add_mod(*sum, mul_mod(count, w % p, p), p);
                        }
                    }
                }
                if last {
                    continue;
                }
                let children = expand_records(&mut model, step, &keys).unwrap();
                let mut children = &children[..];
                while !children.is_empty() {
                    let (parent, rest) = take::<4>(children);
                    let (key, rest) = take_key(rest);
                    let (multiplier, rest) = take::<8>(rest);
                    let counts = chunk[parent as usize].1;
                    let sums = next.entry(key.to_vec()).or_insert(vec![0; primes.len()]);
                    for ((sum, &count), &p) in sums.iter_mut().zip(counts).zip(primes) {
                        *sum = add_mod(*sum, mul_mod(count, multiplier % p, p), p);
                    }
                    children = rest;
                }
            }
            if last {
                return answer;
            }
            level = next;
        }
        unreachable!("a sweep of this test ends")
    }

    #[test]
    fn a_sweep_through_the_records_finds_what_the_native_run_finds() {
        for batch in [1, 3, 1000] {
            for (rows, cols) in [(3, 4), (4, 5), (5, 2)] {
                let params = alloc::format!("rows={rows}\ncols={cols}");
                let native = run_sweep::<Dominoes>(&params, &PRIMES).unwrap();
                let records = run_through_records::<Dominoes>(&params, &PRIMES, batch);
                assert_eq!(
                    records, native.residues,
                    "{rows} x {cols}, batches of {batch}"
                );
                assert_ne!(records[0], [0], "{rows} x {cols}");
            }
            let native = run_sweep::<Triangle>("", &PRIMES).unwrap();
            assert_eq!(
                run_through_records::<Triangle>("", &PRIMES, batch),
                native.residues
            );
        }
    }

    #[test]
    fn key_records_cut_short_are_found() {
        let mut batch = Vec::new();
        push_key(&mut batch, b"ab");
        push_key(&mut batch, b"");
        push_key(&mut batch, b"xyz");
        let keys: Vec<Option<&[u8]>> = keys_of(&batch).collect();
        assert_eq!(keys, [Some(&b"ab"[..]), Some(&b""[..]), Some(&b"xyz"[..])]);
        for cut in [1, 3, batch.len() - 1] {
            let keys: Vec<Option<&[u8]>> = keys_of(&batch[..cut]).collect();
            assert_eq!(keys.last(), Some(&None), "cut at {cut}");
        }
        let mut model = Triangle {
            jumps: triangle_jumps(),
        };
        assert!(matches!(
            expand_records(&mut model, 0, &batch[..3]),
            Err(KernelError::BadParams(_))
        ));
        // The plan's record reads back as written.
        let plan = model.plan();
        let record = plan_record(&plan);
        assert_eq!(take::<4>(&record[0..]).0, 2);
        assert_eq!(take::<4>(&record[8..]).0, 1, "ends when a level is empty");
        assert_eq!(take::<4>(&record[16..]).0 as usize, plan.most_children);
    }

    /// A model that breaks the rule `fault` names.
    struct Faulty {
        fault: String,
    }

    impl Sweep for Faulty {
        fn new(params: &Params<'_>) -> Result<Self, KernelError> {
            Ok(Faulty {
                fault: params.get("fault").unwrap_or("").into(),
            })
        }
        fn plan(&self) -> SweepPlan {
            SweepPlan {
                key_limit: if self.fault == "plan" { 0 } else { 2 },
                outputs: 1,
                end: SweepEnd::Steps(2),
                most_children: 3,
            }
        }
        fn starts(&self, emit: &mut dyn FnMut(&[u8], u64)) {
            emit(b"s", 1);
        }
        fn expand(
            &mut self,
            _step: u32,
            _key: &[u8],
            emit: &mut dyn FnMut(&[u8], u64),
        ) -> Result<(), KernelError> {
            match self.fault.as_str() {
                "long" => emit(b"abc", 1),
                "many" => (0..4u8).for_each(|i| emit(&[i], 1)),
                "big" => emit(b"a", MAX_FACTOR),
                "fail" => return Err(KernelError::Failed),
                _ => (0..3u8).for_each(|i| emit(&[i], 2)),
            }
            Ok(())
        }
        fn weights(&self, _step: u32, _key: &[u8], last: bool, out: &mut [u64]) {
            out[0] = match (self.fault.as_str(), last) {
                ("weight", _) => MAX_FACTOR,
                (_, last) => u64::from(last),
            };
        }
    }

    #[test]
    fn a_model_that_breaks_its_plan_is_refused_with_the_reason() {
        // Sound: three keys of multiplier 2 a state, twice: 3 keys of 2,
        // then 3 keys each of 3 parents times 2 times 2, 36 in all.
        let answer = run_sweep::<Faulty>("", &PRIMES[..1]).unwrap();
        assert_eq!(
            (answer.residues, answer.levels),
            (vec![vec![36]], vec![1, 3, 3])
        );
        for (fault, says) in [
            ("plan", "a key limit of 0 bytes"),
            (
                "long",
                "a child at level 1: a key of 3 bytes, past the plan's 2",
            ),
            (
                "many",
                "a state of level 0 has 4 children, more than the plan's 3",
            ),
            ("big", "a multiplier of 4611686018427387904, not below 2^62"),
            ("weight", "a weight of 4611686018427387904 at level 0"),
        ] {
            let error = run_sweep::<Faulty>(&alloc::format!("fault={fault}"), &PRIMES).unwrap_err();
            assert!(
                matches!(error, KernelError::Malformed(_)),
                "{fault}: {error}"
            );
            assert!(error.to_string().contains(says), "{fault}: {error}");
        }
        assert_eq!(
            run_sweep::<Faulty>("fault=fail", &PRIMES),
            Err(KernelError::Failed)
        );
        assert!(matches!(
            run_sweep::<Faulty>("", &[1 << 62]),
            Err(KernelError::BadParams(_))
        ));
    }

    #[test]
    fn grid_images_are_the_rectangles_symmetries() {
        // An L of four cells on a 3 x 3 grid has eight distinct images,
        // each with the same images again; a corner of a 2 x 3 grid, four.
        let l_shape = 0b000_001_111;
        let images = grid_images(l_shape, 3, 3);
        let mut distinct = images.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 8);
        for &image in &images {
            assert_eq!(image.count_ones(), 4);
            let mut again = grid_images(image, 3, 3);
            again.sort_unstable();
            assert_eq!(again, distinct);
            assert_eq!(least_image(grid_images(image, 3, 3)), distinct[0]);
        }
        let corner = 0b000_001;
        let mut images = grid_images(corner, 2, 3);
        images.sort_unstable();
        assert_eq!(images, [0b000_001, 0b000_100, 0b001_000, 0b100_000]);
    }
}
