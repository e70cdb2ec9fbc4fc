//! What one job kind means to the runner: the [`JobKind`] trait, and the typed
//! values a kind plans, computes and returns.
//!
//! A kind lives in one module of this crate over its kernel. It owns its spec
//! (one serde struct, which is its command-line options too unless they
//! differ from its fields, see [`SpecArgs`]; its proto form; validation,
//! description and a small example job), its plan (prepared once at
//! submission, split into stages of shards), shard execution, the check of a
//! reported result, the final answer and the direct computation without the
//! runner. The runner sees none of these types: it holds them encoded (see
//! `values`) and reaches the kind through the registry (`kinds`), so that the
//! coordinator, the worker and the tests name no kind.
//!
//! Everything here is synchronous and deterministic: the same spec and plan
//! always give the same shards, which is what makes re-planning after a crash
//! safe, and partial results are combined only in [`JobKind::finish`], so
//! accepting a shard twice (which attempt fencing prevents) could not change a sum.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cache::KernelCache;
use crate::{Control, Result, Room, StageOutput, Stored};
use tally_wire::proto;

/// Default interval between checkpoints of a running shard.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(3);

/// The memory a worker is assumed to have when no registered worker has said
/// (`tally worker --memory-budget`).
pub const WORKER_MEMORY_BUDGET: u64 = 8_000_000_000;

/// Shards of one job a worker is assumed to hold at once in an estimate.
pub const ESTIMATE_SLOTS: u64 = 2;

/// The worker a job is fitted to: its memory budget and the shards it runs
/// at once (its slots).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerRoom {
    pub budget: u64,
    pub slots: u64,
}

impl WorkerRoom {
    /// The worker assumed when none has registered.
    pub const ASSUMED: WorkerRoom = WorkerRoom {
        budget: WORKER_MEMORY_BUDGET,
        slots: ESTIMATE_SLOTS,
    };
}

/// Values a kind stores and sends: JSON through serde, compared for replicas.
pub trait KindValue:
    Serialize + DeserializeOwned + Clone + Debug + PartialEq + Send + Sync
{
}
impl<T: Serialize + DeserializeOwned + Clone + Debug + PartialEq + Send + Sync> KindValue for T {}

/// One kind of count. Implemented by a unit struct per kind; every method is an
/// associated function, so the kind carries no state of its own.
pub trait JobKind: Send + Sync + 'static {
    /// The parameters of a job of this kind (`{"kind": NAME, ...fields}` in a
    /// spec file, the kind's message in the proto `oneof`).
    type Spec: KindValue + 'static;
    /// The kind's own command-line options, under `tally run|submit NAME`:
    /// the spec itself when it derives `clap::Args` too (one struct, its
    /// fields the flags), else a struct of their own (see [`SpecArgs`]).
    type Args: SpecArgs<Self::Spec>;
    /// Facts computed once at submission and stored with the job. Fields must
    /// tolerate unknown names and default missing ones: stored plans outlive
    /// versions.
    type Plan: Serialize + DeserializeOwned + Send + Sync;
    /// What one shard computes.
    type Task: KindValue;
    /// A shard's (partial) result.
    type Partial: KindValue;
    /// The previous stage's merged output, decoded once per worker and stage;
    /// `()` for kinds whose shards read none.
    type StageInput: Send + Sync + 'static;

    /// The kind's name in specs, on the CLI and in job descriptions.
    const NAME: &'static str;
    /// One line for `tally run --help`.
    const ABOUT: &'static str;
    /// Example command lines for the kind's help, one per line (may be empty).
    const EXAMPLES: &'static str = "";

    // ------------------------------------------------------------- the spec

    fn spec_to_proto(spec: &Self::Spec) -> proto::job_spec::Kind;
    /// The spec from the proto `oneof` (zero values select defaults), or `None`
    /// when the message is another kind's.
    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<Self::Spec>>;
    /// Checks every value; the message names the value and the accepted range.
    fn validate(spec: &Self::Spec) -> Result<()>;
    /// A one-line human description, e.g. `hex side 11 mod 1000000007 (points)`.
    fn describe(spec: &Self::Spec) -> String;
    /// A small job of the kind, done in a second or so, whose answer
    /// [`JobKind::direct`] computes too: the tests run the example of every
    /// registered kind through the runner and compare the two answers. `None`
    /// for a kind that has no such job.
    fn small_example() -> Option<Self::Spec>;
    /// What the job needs, in its most demanding stage. The coordinator
    /// refuses (unless forced) a job whose smallest shard fits no worker's
    /// memory budget.
    fn estimate(_spec: &Self::Spec) -> Option<ResourceEstimate> {
        None
    }
    /// What the shards of stage `stage` need, where stages differ (the hex
    /// graph built by one shard, then read by the others a group at a time):
    /// the coordinator gives a worker only as many of the stage's shards at
    /// once as its budget holds by this.
    fn stage_estimate(spec: &Self::Spec, _stage: u32) -> Option<ResourceEstimate> {
        Self::estimate(spec)
    }
    /// The spec made to fit `worker` where the kind can cut its shards
    /// smaller (the hex points plan: fewer points a shard), and a
    /// coordinator that takes shard outputs of at most `output_limit` bytes
    /// (`None`: any, through its stage store); only choices the spec left
    /// open change. Unchanged by default.
    fn fit_to_budget(
        spec: &Self::Spec,
        _worker: WorkerRoom,
        _output_limit: Option<u64>,
    ) -> Self::Spec {
        spec.clone()
    }
    /// The shard count, where the user chose it (synthetic, wasm, the hex
    /// cell-step plan): the client times a shard before it submits, says
    /// when shards are far shorter than the runner's own cost a shard, and
    /// picks the count itself for [`ShardCount::Auto`] where the kind takes
    /// it. `None`: the kind decides.
    fn shard_count(_spec: &Self::Spec) -> Option<ShardCount> {
        None
    }
    /// The spec with `shards` shards, for a kind that takes
    /// [`ShardCount::Auto`]; unchanged by default.
    fn with_shard_count(spec: &Self::Spec, _shards: u64) -> Self::Spec {
        spec.clone()
    }
    /// The SHA-256 (hex) of every attachment the job needs (a wasm job's
    /// module): the coordinator must hold them to accept the job, and a
    /// worker fetches them before it runs a shard.
    fn attachments(_spec: &Self::Spec) -> Vec<String> {
        Vec::new()
    }
    /// What a worker must offer to be given the job's shards (see
    /// `guest::WASM_CAPABILITY`); `None` for the built-in kernels.
    fn capability(_spec: &Self::Spec) -> Option<&'static str> {
        None
    }

    // ------------------------------------------------------------- planning

    /// Computes the facts the plan needs (the expensive part of planning).
    fn prepare(spec: &Self::Spec, cache: &KernelCache, control: &Control) -> Result<Self::Plan>;
    /// Number of stages; each stage's shards start when the previous stage's
    /// are all done.
    fn stages(_spec: &Self::Spec, _plan: &Self::Plan) -> u32 {
        1
    }
    /// Whether [`JobKind::stages`] counts every stage of the job; false for a
    /// plan that finds its stages as it goes (a frontier search, one stage a
    /// level), whose progress then covers only the stages found so far.
    fn stages_known(_spec: &Self::Spec) -> bool {
        true
    }
    /// The shards of `stage` (1-based). Deterministic.
    fn plan_stage(
        spec: &Self::Spec,
        plan: &Self::Plan,
        stage: u32,
    ) -> Result<Vec<Planned<Self::Task>>>;
    /// Drops what the stored job record need not keep once the first stage is
    /// planned (facts that live in the shards' tasks).
    fn trim_plan(_plan: &mut Self::Plan) {}
    /// What follows a stage once all its shards are done: the next stage's
    /// shards, or the end of the job. The plan may record what the stage found
    /// (a frontier plan keeps each level's size and decides here how many
    /// shards the next level gets); it is stored with the stage transition, so
    /// this runs once per barrier, or again with the same inputs after a
    /// crash. The default follows the stage count [`JobKind::stages`] gave at
    /// planning, and [`JobKind::plan_stage`].
    fn next_stage(
        spec: &Self::Spec,
        plan: &mut Self::Plan,
        finished: FinishedStage<'_, Self::Partial>,
    ) -> Result<NextStage<Self::Task>> {
        if finished.stage < finished.stages_total {
            let shards = Self::plan_stage(spec, plan, finished.stage + 1)?;
            Ok(NextStage::Shards(shards, String::new()))
        } else {
            Ok(NextStage::Finish)
        }
    }

    // ------------------------------------------------------------- execution

    /// The stage outputs a shard of `stage` with `task` reads, in order: the
    /// previous stage's, all of it or one bucket of every shard's output (see
    /// `buckets`), and any older stage the kind keeps with
    /// [`JobKind::kept_stages`]. None by default.
    fn stage_reads(_spec: &Self::Spec, _stage: u32, _task: &Self::Task) -> Vec<StageRead> {
        Vec::new()
    }
    /// Decodes what [`JobKind::stage_reads`] named, in its order, once per
    /// worker and stage (see [`single_input`] for kinds that read one).
    fn decode_stage_inputs(_spec: &Self::Spec, _parts: &[&[u8]]) -> Result<Self::StageInput> {
        Err(crate::invalid!("{} jobs have no stage data", Self::NAME))
    }
    /// Whether the kind reads its stage input as a stream, so that a worker
    /// may keep an input larger than its memory share in a file
    /// ([`JobKind::decode_stored_inputs`]) instead of memory.
    const STREAMS_STAGE_INPUT: bool = false;
    /// How much of a stage input a worker keeps in memory before it writes
    /// the rest to a file, for a shard of memory share `share`: all of it
    /// (`None`) unless the kind streams its input, then a quarter of the
    /// share. A kind may keep less (hex: a staged graph, read a group at a
    /// time, is never held in memory; polynomials are held whole).
    fn stage_input_memory(_spec: &Self::Spec, share: u64) -> Option<u64> {
        Self::STREAMS_STAGE_INPUT.then_some(share / 4)
    }
    /// [`JobKind::decode_stage_inputs`] of parts that may be in files: read
    /// into memory, unless the kind streams its input.
    fn decode_stored_inputs(
        spec: &Self::Spec,
        parts: Vec<Arc<dyn Stored>>,
    ) -> Result<Self::StageInput> {
        decode_in_memory::<Self>(spec, &parts)
    }
    /// The stages older than `stage - 1` whose output the shards of `stage` or
    /// of a later stage still read: the coordinator keeps them (in its store)
    /// and deletes every other output once the stage after it is done. Called
    /// at each barrier and at recovery, with the plan as stored.
    fn kept_stages(_spec: &Self::Spec, _plan: &Self::Plan, _stage: u32) -> Vec<u32> {
        Vec::new()
    }
    /// Runs one shard.
    fn execute(
        spec: &Self::Spec,
        task: &Self::Task,
        run: &mut ShardRun<'_, Self::StageInput, Self::Partial>,
    ) -> Result<Outcome<Self::Partial>>;

    // ------------------------------------------------------------- results

    /// Checks the shape of a reported result against its shard (the partial's
    /// variant, lengths, ranges, the size of any stage output) before it is
    /// accepted; a refusal changes nothing.
    fn check_result(
        spec: &Self::Spec,
        plan: &Self::Plan,
        task: &Self::Task,
        partial: &Self::Partial,
        output: &[u8],
    ) -> Result<()>;
    /// Whether two replicas of a shard computed the same result: equal, but
    /// for what describes how a run went rather than what it found (the
    /// bytes a shard spilled, which follow its worker's memory).
    fn same_result(a: &Self::Partial, b: &Self::Partial) -> bool {
        a == b
    }
    /// The answer from the partial results of the last stage, in shard order.
    fn finish(spec: &Self::Spec, plan: &Self::Plan, partials: Vec<Self::Partial>)
    -> Result<Answer>;
    /// The answer computed in this process by the kernel's own driver, without
    /// shards: the reference every run through the runner must equal.
    fn direct(spec: &Self::Spec, threads: usize, control: &Control) -> Result<Answer>;
}

/// Fault injection for the tests, apart from [`JobKind`]: what a worker run
/// with `--corrupt-results` (hidden; the replica and result-check tests) does
/// to each of its results. Every registered kind implements it, in its own
/// module, so that the tests can corrupt any kind's results; the runner
/// reaches it only through `SpecOps::fault_injection`.
pub trait FaultInjection: JobKind {
    /// Alters a result the way a faulty machine might, so that the checks
    /// downstream (result checks, replicas) can be exercised.
    fn corrupt_for_testing(partial: &mut Self::Partial);
}

/// Command-line options that make a spec of type `S`. A spec that derives
/// `clap::Args` is its own options; a kind whose flags are not its spec's
/// fields (a file read into the spec, a value the flags leave open)
/// implements this for an options struct of its own.
pub trait SpecArgs<S>: clap::Args + clap::FromArgMatches {
    /// The spec from the options; `files` reads the files they name (the kind
    /// itself does no I/O).
    fn into_spec(self, files: &dyn FileReader) -> Result<S>;
}

impl<S: clap::Args + clap::FromArgMatches> SpecArgs<S> for S {
    fn into_spec(self, _files: &dyn FileReader) -> Result<S> {
        Ok(self)
    }
}

/// Reads the files that command-line options name, for the kinds' parsers.
pub trait FileReader {
    fn read_to_string(&self, path: &Path) -> Result<String>;
    /// Reads a file that goes with the job as an attachment (at most
    /// `guest::MAX_MODULE_BYTES`) and returns its SHA-256 in hex, by which
    /// the spec names it.
    fn attach(&self, path: &Path) -> Result<String>;
}

/// One shard of a stage, ready to be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned<T> {
    pub task: T,
    /// Work units of the shard, for progress.
    pub work_total: u64,
}

/// A stage whose shards are all done (see [`JobKind::next_stage`]).
#[derive(Debug)]
pub struct FinishedStage<'a, P> {
    pub stage: u32,
    /// The stages known: [`JobKind::stages`] at planning, or as many as a
    /// plan that finds its stages as it goes has found.
    pub stages_total: u32,
    /// The stage's partial results, in shard order.
    pub partials: &'a [P],
    /// The slots of the live workers (0 with none), which a plan may spread
    /// its next stage over (see `tally_kernels::buckets::bucket_count`).
    pub slots: u32,
    /// The least memory a slot of a live worker has (the share of its
    /// budget it gives a shard, `tally_stage::memory::slot_share`; 0 when no
    /// worker said): a plan whose shards hold their states in memory sizes
    /// them to it.
    pub slot_memory: u64,
    /// About how many bytes the stage's output takes where it is stored.
    pub stage_bytes: u64,
    /// The free bytes of the stage store's disk, when known: a frontier plan
    /// makes fewer buckets when it is short of room (see
    /// `tally_kernels::buckets::within_room`).
    pub stage_room: Option<u64>,
}

/// What a barrier knows beyond the stage's partials: the live workers and
/// the stage store (see [`FinishedStage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Barrier {
    pub slots: u32,
    pub slot_memory: u64,
    pub stage_bytes: u64,
    pub stage_room: Option<u64>,
}

// Copied whatever `P` is: it holds only a reference to the partials.
impl<P> Clone for FinishedStage<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for FinishedStage<'_, P> {}

/// `--shards N` or `--shards auto` (0: the count is picked at submission).
pub fn parse_shard_count(text: &str) -> std::result::Result<u64, String> {
    match text.parse::<u64>() {
        _ if text == "auto" => Ok(0),
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "expected a count of at least 1, or auto, not {text:?}"
        )),
    }
}

/// A shard count the user chose (see [`JobKind::shard_count`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardCount {
    /// Picked when the job is submitted (`--shards auto`).
    Auto,
    Chosen(u64),
}

/// What follows a finished stage (see [`JobKind::next_stage`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextStage<T> {
    /// The next stage's shards, and a line for the job's events about the
    /// stage just finished (may be empty).
    Shards(Vec<Planned<T>>, String),
    /// The job is done: its answer comes from [`JobKind::finish`].
    Finish,
}

/// One stage output a shard reads (see [`JobKind::stage_reads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StageRead {
    pub stage: u32,
    /// One bucket of every shard's output (see `buckets`), or all of it.
    pub bucket: Option<u32>,
}

/// What a shard returns.
#[derive(Debug)]
pub struct Outcome<P> {
    /// Stage data for the next stage, else empty.
    pub output: StageOutput,
    pub partial: P,
    pub work_done: u64,
}

/// A resumable state of a running shard and the partial result it stands for.
#[derive(Debug)]
pub struct Checkpoint<P> {
    /// The state to resume from: bytes, or (a state too large to copy) a
    /// run of the shard's spill, which the worker sends from its file.
    pub state: StageOutput,
    pub partial: Option<P>,
    pub work_done: u64,
}

/// The checkpoint of a shard that has none.
pub static NO_CHECKPOINT: Vec<u8> = Vec::new();

/// What a running shard has at hand besides its task.
pub struct ShardRun<'a, I, P> {
    /// What [`JobKind::stage_reads`] named, decoded, when it named anything.
    pub input: Option<&'a I>,
    /// The last accepted checkpoint's state of an earlier attempt, or empty:
    /// in memory, or (a large one) in a file of the worker's spill directory.
    pub checkpoint: &'a dyn Stored,
    pub cache: &'a KernelCache,
    /// Cancellation and the live work counter.
    pub control: &'a Control,
    /// Kinds that can resume checkpoint at most this often.
    pub checkpoint_every: Duration,
    pub on_checkpoint: &'a mut dyn FnMut(Checkpoint<P>),
    /// The shard's memory share and spill (see [`Room`]), when the worker
    /// gives them; `None`: memory without limit, runs kept in memory.
    pub room: Option<Room<'a>>,
}

impl<I, P> ShardRun<'_, I, P> {
    /// The last accepted checkpoint's state, read whole (for kinds whose
    /// states are small).
    pub fn checkpoint_bytes(&self) -> Result<Vec<u8>> {
        self.checkpoint.read_range(0..self.checkpoint.len())
    }

    /// Hands a checkpoint to the worker.
    pub fn checkpoint(&mut self, checkpoint: Checkpoint<P>) {
        (self.on_checkpoint)(checkpoint)
    }
}

/// The final result of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The answer line, as printed by the CLI.
    pub line: String,
    /// The full result as a JSON object.
    pub details: serde_json::Value,
}

/// What a job needs: memory per worker and in the coordinator, and the data
/// moved between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceEstimate {
    /// E.g. `hex side 16 with the cell-step plan`.
    pub subject: String,
    /// What a worker needs for the job at all, shared by its shards (a graph).
    pub worker_base_bytes: u64,
    /// What each shard of the job a worker holds at once adds.
    pub shard_bytes: u64,
    pub coordinator_memory_bytes: u64,
    pub traffic_bytes: u64,
    /// The most one shard of the job sends as its output (a staged hex
    /// graph); 0 for outputs of no note.
    pub largest_output_bytes: u64,
    /// What to do instead when the job does not fit, e.g. `use the points plan`.
    pub advice: &'static str,
}

impl ResourceEstimate {
    /// A worker's memory with [`ESTIMATE_SLOTS`] shards of the job at once.
    pub fn worker_memory_bytes(&self) -> u64 {
        self.worker_bytes_with(ESTIMATE_SLOTS)
    }

    /// A worker's memory with `slots` shards of the job at once.
    pub fn worker_bytes_with(&self, slots: u64) -> u64 {
        self.worker_base_bytes + slots * self.shard_bytes
    }

    /// A worker's memory with one shard: the least any worker needs.
    pub fn smallest_worker_bytes(&self) -> u64 {
        self.worker_base_bytes + self.shard_bytes
    }

    /// Shards of the job a worker with `budget` bytes may hold at once: 0 if
    /// not even one fits, unbounded if shards add nothing.
    pub fn shards_within(&self, budget: u64) -> u64 {
        if budget < self.smallest_worker_bytes() {
            return 0;
        }
        (budget - self.worker_base_bytes)
            .checked_div(self.shard_bytes)
            .unwrap_or(u64::MAX)
    }

    pub fn describe(&self) -> String {
        format!(
            "{} needs about {} per worker ({} at least, with one shard at a time) and {} in the \
             coordinator, and moves about {} between them",
            self.subject,
            format_bytes(self.worker_memory_bytes()),
            format_bytes(self.smallest_worker_bytes()),
            format_bytes(self.coordinator_memory_bytes),
            format_bytes(self.traffic_bytes)
        )
    }
}

/// [`JobKind::decode_stage_inputs`] of `parts` read whole into memory: what
/// [`JobKind::decode_stored_inputs`] does unless a kind reads from files.
pub fn decode_in_memory<K: JobKind + ?Sized>(
    spec: &K::Spec,
    parts: &[Arc<dyn Stored>],
) -> Result<K::StageInput> {
    // Parts in memory are decoded where they are; those in files are read.
    let read = parts
        .iter()
        .map(|part| match part.in_memory() {
            Some(_) => Ok(None),
            None => part.read_range(0..part.len()).map(Some),
        })
        .collect::<Result<Vec<_>>>()?;
    let slices: Vec<&[u8]> = parts
        .iter()
        .zip(&read)
        .map(|(part, read)| read.as_deref().or(part.in_memory()).unwrap_or_default())
        .collect();
    K::decode_stage_inputs(spec, &slices)
}

pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A kind's spec type, which names its kind: `JobSpec::new(HexSpec { .. })`.
pub trait SpecOf: Serialize + Send + Sync + 'static {
    type Kind: JobKind<Spec = Self>;
}

/// The one stage output handed to [`JobKind::decode_stage_inputs`] of a kind
/// whose shards read one.
pub fn single_input<'a>(kind: &str, parts: &[&'a [u8]]) -> Result<&'a [u8]> {
    match parts {
        [one] => Ok(one),
        _ => Err(crate::invalid!(
            "{kind} shards read one stage output, not {}",
            parts.len()
        )),
    }
}

/// [`single_input`] of [`JobKind::decode_stored_inputs`]: the one stage
/// output, in memory or in a file.
pub fn single_stored(kind: &str, parts: Vec<Arc<dyn Stored>>) -> Result<Arc<dyn Stored>> {
    match <[_; 1]>::try_from(parts) {
        Ok([one]) => Ok(one),
        Err(parts) => Err(crate::invalid!(
            "{kind} shards read one stage output, not {}",
            parts.len()
        )),
    }
}

/// The check of [`JobKind::check_result`] for shards that produce no stage output.
pub fn no_output(output: &[u8]) -> Result<()> {
    if output.is_empty() {
        Ok(())
    } else {
        Err(crate::invalid!("this shard produces no stage output"))
    }
}
