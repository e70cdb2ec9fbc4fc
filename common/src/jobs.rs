//! The runner's view of each job kind: how a job is prepared and split into
//! stages of shards, how one shard is executed (with checkpoints), how partial
//! results are encoded, and how the final answer is computed from them.
//!
//! Everything here is synchronous and deterministic. The coordinator calls
//! [`prepare`], [`plan_stage`] and [`finish`]; the worker calls [`execute`].
//! Partial results are stored per shard and combined only in [`finish`], so a
//! merge is idempotent by construction: accepting a shard twice is impossible
//! (attempt fencing) and would not change the sum anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::spec::{HexPlan, HexSpec, JobSpec, KindSpec};
use crate::{Control, Error, Result, blocks, hex, invalid, kayles, pegs, sliders};

/// What one shard computes, serialised as JSON into the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ShardTask {
    /// Target states `[start, end)` of hex cell step `step` (0 is the top row).
    /// On the last stage the shard returns the sum of its polynomials instead of
    /// the polynomials themselves.
    HexStep {
        step: u32,
        start: u32,
        end: u32,
        last: bool,
    },
    /// The full hex crossing polynomial at a few points, modulo one prime.
    HexPoints { modulus: u32, points: Vec<u32> },
    /// One Walsh character of the kayles series.
    KaylesCharacter { character: u32 },
    /// Peg solitaire positions after a few jumps, with the number of jump
    /// sequences reaching each, counted over shared layers.
    PegTasks { tasks: Vec<PegShardTask> },
    /// The whole breadth-first search of a sliding-block puzzle.
    BlocksSearch,
    /// A batch of slider prefixes, enumerated one after the other. `weighted`:
    /// the work units are shortest sequences (the shard's `work_total` is the
    /// sum of the prefixes' weights); false in shards planned before weights
    /// existed, whose units are prefixes.
    SliderPrefixes {
        prefixes: Vec<String>,
        #[serde(default)]
        weighted: bool,
    },
}

/// A peg solitaire task as it travels in a shard: the multiplicity as a
/// decimal string, because internally tagged enums cannot carry `u128`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PegShardTask {
    pub board: u64,
    pub multiplicity: String,
}

impl PegShardTask {
    fn from_task(task: &pegs::PegTask) -> PegShardTask {
        PegShardTask {
            board: task.board,
            multiplicity: task.multiplicity.to_string(),
        }
    }

    fn to_task(&self) -> Result<pegs::PegTask> {
        Ok(pegs::PegTask {
            board: self.board,
            multiplicity: self
                .multiplicity
                .parse()
                .map_err(|_| invalid!("malformed peg task multiplicity {:?}", self.multiplicity))?,
        })
    }
}

impl ShardTask {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("shard tasks always serialise")
    }

    pub fn decode(bytes: &[u8]) -> Result<ShardTask> {
        serde_json::from_slice(bytes).map_err(|e| invalid!("malformed shard task: {e}"))
    }
}

/// A shard's (partial) result, serialised as JSON. Externally tagged: serde's
/// internally tagged enums cannot carry the `u128` sums.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partial {
    /// Nothing to merge: the shard's output is stage data.
    None,
    /// Sum of the crossing polynomials over a range of states, mod p.
    HexCrossings { residues: Vec<u32> },
    /// (x, P(x) mod p) for the shard's points, P the full crossing polynomial.
    HexEvaluations {
        modulus: u32,
        evaluations: Vec<(u32, u32)>,
    },
    /// c_h(m) modulo 2^b * 10^d.
    KaylesCharacter { character: u32, value: u128 },
    /// Exact sums over the prefixes enumerated so far.
    SliderSums {
        prefixes_done: u32,
        sums: sliders::PathSums,
    },
    /// The configurations a sliding-block puzzle reaches.
    BlocksCount {
        configurations: u64,
        layers: u32,
        largest_layer: u64,
    },
    /// Solutions from a batch of peg solitaire tasks (multiplicities applied).
    PegCount {
        tasks: u32,
        solutions: u128,
        positions: u64,
    },
}

impl Partial {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("partials always serialise")
    }

    pub fn decode(bytes: &[u8]) -> Result<Partial> {
        if bytes.is_empty() {
            return Ok(Partial::None);
        }
        serde_json::from_slice(bytes).map_err(|e| invalid!("malformed partial result: {e}"))
    }
}

/// Facts about a job computed once, when it is submitted, and stored with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub stages_total: u32,
    /// Hex: number of frontier states; the other kinds leave it 0.
    pub states: u64,
    /// Hex: coefficients per state.
    pub stride: u64,
    /// Kayles: number of Walsh characters.
    pub characters: u32,
    /// Sliders: the prefix tasks, and facts about the board graph.
    pub prefixes: Vec<String>,
    /// Sliders: the weight of each prefix (the number of shortest sequences
    /// extending it), by which the prefixes are grouped into shards. Empty in
    /// plans made before weights existed: those group the prefixes by count.
    #[serde(default)]
    pub prefix_weights: Vec<u128>,
    pub shortest_length: u32,
    pub boards: u64,
    /// Pegs: the prefix tasks.
    #[serde(default)]
    pub peg_tasks: Vec<pegs::PegTask>,
    /// Hex points plan: the primes (one, or several for exact counts) and the
    /// evaluation points used with each.
    #[serde(default)]
    pub primes: Vec<u32>,
    #[serde(default)]
    pub points: Vec<u32>,
}

impl JobPlan {
    fn empty() -> JobPlan {
        JobPlan {
            stages_total: 1,
            states: 0,
            stride: 0,
            characters: 0,
            prefixes: Vec::new(),
            prefix_weights: Vec::new(),
            shortest_length: 0,
            boards: 0,
            peg_tasks: Vec::new(),
            primes: Vec::new(),
            points: Vec::new(),
        }
    }
}

/// One shard of a stage, ready to be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedShard {
    pub task: ShardTask,
    pub work_total: u64,
}

/// The final result of a job.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The answer line, as printed by the CLI.
    pub line: String,
    /// The full result as a JSON object.
    pub details: serde_json::Value,
}

/// One side's graph, filled by the first caller while the others wait.
type GraphSlot = Arc<Mutex<Option<Arc<hex::HexGraph>>>>;

/// Caches the expensive per-job structures (hex state graphs, slider graphs) so a
/// worker builds each once, whatever the number of shards it runs.
#[derive(Default)]
pub struct KernelCache {
    hex: Mutex<HashMap<u32, GraphSlot>>,
    sliders: Mutex<HashMap<String, Arc<sliders::SliderSpace>>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelCache")
            .field("hex_sides", &self.hex.lock().unwrap().len())
            .field("slider_spaces", &self.sliders.lock().unwrap().len())
            .finish()
    }
}

impl KernelCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The state graph of `side`, built once: concurrent callers for the same
    /// side wait for the one build (a second copy of a large graph would double
    /// the worker's memory), callers for other sides do not.
    pub fn hex_graph(&self, side: u32) -> Result<Arc<hex::HexGraph>> {
        let slot = self.hex.lock().unwrap().entry(side).or_default().clone();
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(graph) = slot.as_ref() {
            return Ok(graph.clone());
        }
        // The other shards of this worker wait for the graph: give the build all cores.
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let graph = Arc::new(hex::HexGraph::build_parallel(side, threads)?);
        *slot = Some(graph.clone());
        Ok(graph)
    }

    pub fn slider_space(
        &self,
        params: &sliders::SliderParams,
        control: &Control,
    ) -> Result<Arc<sliders::SliderSpace>> {
        let key = serde_json::to_string(params).expect("params serialise");
        if let Some(space) = self.sliders.lock().unwrap().get(&key) {
            return Ok(space.clone());
        }
        let space = Arc::new(sliders::SliderSpace::build(params, control)?);
        let mut cache = self.sliders.lock().unwrap();
        // Keep the cache small: slider graphs can be large.
        if cache.len() >= 4 {
            cache.clear();
        }
        Ok(cache.entry(key).or_insert(space).clone())
    }
}

/// Default number of shards per hex cell step for a graph of `states` states.
pub fn default_hex_shards_per_step(states: u64) -> u32 {
    states.div_ceil(4096).clamp(1, 8) as u32
}

/// Points per hex points shard: one vectorised pass of the scalar sweep.
pub const HEX_POINTS_PER_SHARD: usize = hex::POINTS_PER_PASS;

/// Default minimum number of slider prefix tasks, and of shards.
pub const DEFAULT_SLIDER_PREFIXES: u32 = 64;
/// At most this many shards for the prefixes of one slider job.
pub const MAX_SLIDER_SHARDS: usize = 256;
/// Largest `work_total` of one slider shard (sequences). Only a shard that
/// could never finish reaches it; the cap keeps a job's sum of `work_total`
/// far from overflowing.
pub const MAX_SLIDER_SHARD_UNITS: u64 = 1 << 55;

/// Number of shards the prefixes of a slider job are grouped into (fewer if
/// there are fewer prefixes): the `prefixes` asked for (default
/// [`DEFAULT_SLIDER_PREFIXES`]), at most [`MAX_SLIDER_SHARDS`].
pub fn slider_shards(s: &crate::spec::SlidersSpec) -> usize {
    slider_min_prefixes(s).clamp(1, MAX_SLIDER_SHARDS)
}

fn slider_min_prefixes(s: &crate::spec::SlidersSpec) -> usize {
    if s.prefixes == 0 {
        DEFAULT_SLIDER_PREFIXES as usize
    } else {
        s.prefixes as usize
    }
}

/// Groups weighted tasks into `parts` groups (fewer if there are fewer tasks)
/// of about equal total weight, by the longest-processing-time rule: the tasks
/// in decreasing weight (ties: lower index first) each go to the group with the
/// least weight so far (ties: lower group first). Deterministic. Each group
/// lists its task indices in increasing order. A group's weight differs from
/// the mean by at most the heaviest task; in practice far less, because the
/// light tasks placed last fill the gaps the heavy ones left.
pub fn group_by_weight(weights: &[u128], parts: usize) -> Vec<Vec<usize>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if weights.is_empty() {
        return Vec::new();
    }
    let parts = parts.clamp(1, weights.len());
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].cmp(&weights[a]).then(a.cmp(&b)));
    let mut loads: BinaryHeap<Reverse<(u128, usize)>> =
        (0..parts).map(|g| Reverse((0, g))).collect();
    let mut groups = vec![Vec::new(); parts];
    for i in order {
        let Reverse((load, g)) = loads.pop().expect("parts >= 1");
        groups[g].push(i);
        loads.push(Reverse((load.saturating_add(weights[i]), g)));
    }
    for group in &mut groups {
        group.sort_unstable();
    }
    groups
}
/// Default minimum number of peg solitaire prefix tasks. Tasks of one shard share
/// their layers, so a shard holds several tasks and the shards stay few.
pub const DEFAULT_PEG_PREFIXES: u32 = 256;
/// At most this many shards for one peg solitaire job.
pub const MAX_PEG_SHARDS: usize = 32;

fn peg_game(p: &crate::spec::PegsSpec) -> Result<pegs::PegGame> {
    pegs::PegGame::new(pegs::parse_board(&p.board)?, p.start, p.end)
}

/// Computes the facts the plan needs (the expensive part of planning: building the
/// hex graph, the slider searches). Runs once per job, at submission.
pub fn prepare(spec: &JobSpec, cache: &KernelCache, control: &Control) -> Result<JobPlan> {
    spec.validate()?;
    let mut plan = JobPlan::empty();
    match &spec.kind {
        KindSpec::Hex(h) if h.plan == HexPlan::Points => {
            // No graph here: each worker builds its own, the coordinator only solves.
            plan.states = hex::known_state_count(h.side).unwrap_or(0);
            plan.stride = (h.side * h.side / 2 + 1) as u64;
            plan.primes = if h.exact {
                hex::exact_primes(h.side)
            } else {
                vec![h.modulus]
            };
            plan.points = hex::points_layout(h.side, *plan.primes.iter().min().unwrap()).points;
        }
        KindSpec::Hex(h) => {
            let graph = cache.hex_graph(h.side)?;
            plan.states = graph.num_states() as u64;
            plan.stride = graph.stride() as u64;
            plan.stages_total = (graph.num_steps() as u32).max(1);
        }
        KindSpec::Kayles(k) => plan.characters = kayles::character_count(k.pins),
        KindSpec::Sliders(s) => {
            let space = cache.slider_space(&s.board, control)?;
            let tasks = space.balanced_prefix_tasks(slider_min_prefixes(s), slider_shards(s));
            (plan.prefixes, plan.prefix_weights) = tasks.into_iter().unzip();
            plan.shortest_length = space.shortest_length();
            plan.boards = space.reachable_boards() as u64;
        }
        KindSpec::Pegs(p) => {
            let game = peg_game(p)?;
            let wanted = if p.prefixes == 0 {
                DEFAULT_PEG_PREFIXES
            } else {
                p.prefixes
            };
            plan.peg_tasks = game.prefix_tasks(wanted as usize);
        }
        // One shard: the puzzle is checked by validate, the search runs on a worker.
        KindSpec::Blocks(_) => {}
    }
    Ok(plan)
}

/// The shards of stage `stage` (1-based). Deterministic: the same spec and plan
/// always give the same shards, which is what makes re-planning after a crash safe.
pub fn plan_stage(spec: &JobSpec, plan: &JobPlan, stage: u32) -> Result<Vec<PlannedShard>> {
    if stage == 0 || stage > plan.stages_total {
        return Err(Error::Internal(format!(
            "stage {stage} is outside 1..={}",
            plan.stages_total
        )));
    }
    let shards = match &spec.kind {
        KindSpec::Hex(h) if h.plan == HexPlan::Points => {
            let mut shards = Vec::new();
            for &modulus in &plan.primes {
                for points in plan.points.chunks(HEX_POINTS_PER_SHARD) {
                    shards.push(PlannedShard {
                        task: ShardTask::HexPoints {
                            modulus,
                            points: points.to_vec(),
                        },
                        work_total: points.len() as u64,
                    });
                }
            }
            shards
        }
        KindSpec::Hex(h) => {
            let states = plan.states;
            let wanted = if h.shards_per_step == 0 {
                default_hex_shards_per_step(states)
            } else {
                h.shards_per_step
            };
            let count = (wanted as u64).clamp(1, states.max(1));
            // Side 1 has no cell steps: its single stage reduces the top row (step 0).
            let step = if hex_steps(spec) == 0 { 0 } else { stage };
            (0..count)
                .map(|i| {
                    let start = (states * i / count) as u32;
                    let end = (states * (i + 1) / count) as u32;
                    PlannedShard {
                        task: ShardTask::HexStep {
                            step,
                            start,
                            end,
                            last: stage == plan.stages_total,
                        },
                        work_total: (end - start) as u64,
                    }
                })
                .collect()
        }
        KindSpec::Kayles(k) => {
            let m = k.pins / 2 + 1;
            (0..plan.characters)
                .map(|character| PlannedShard {
                    task: ShardTask::KaylesCharacter { character },
                    work_total: kayles_work(m),
                })
                .collect()
        }
        KindSpec::Blocks(_) => vec![PlannedShard {
            task: ShardTask::BlocksSearch,
            // Configurations are not known in advance: progress counts the shard.
            work_total: 1,
        }],
        KindSpec::Pegs(_) => {
            let n = plan.peg_tasks.len();
            let batch = n.div_ceil(MAX_PEG_SHARDS).max(1);
            plan.peg_tasks
                .chunks(batch)
                .map(|chunk| PlannedShard {
                    task: ShardTask::PegTasks {
                        tasks: chunk.iter().map(PegShardTask::from_task).collect(),
                    },
                    work_total: chunk.len() as u64,
                })
                .collect()
        }
        KindSpec::Sliders(s) if plan.prefix_weights.len() == plan.prefixes.len() => {
            group_by_weight(&plan.prefix_weights, slider_shards(s))
                .into_iter()
                .map(|group| {
                    let weight = group
                        .iter()
                        .fold(0u128, |acc, &i| acc.saturating_add(plan.prefix_weights[i]));
                    PlannedShard {
                        task: ShardTask::SliderPrefixes {
                            prefixes: group.iter().map(|&i| plan.prefixes[i].clone()).collect(),
                            weighted: true,
                        },
                        work_total: slider_units(weight).min(MAX_SLIDER_SHARD_UNITS),
                    }
                })
                .collect()
        }
        // A plan stored before prefixes had weights: batches by count.
        KindSpec::Sliders(_) => {
            let n = plan.prefixes.len();
            let batch = n.div_ceil(MAX_SLIDER_SHARDS).max(1);
            plan.prefixes
                .chunks(batch)
                .map(|chunk| PlannedShard {
                    task: ShardTask::SliderPrefixes {
                        prefixes: chunk.to_vec(),
                        weighted: false,
                    },
                    work_total: chunk.len() as u64,
                })
                .collect()
        }
    };
    Ok(shards)
}

/// Slider work units (sequences) as a counter value, saturating.
fn slider_units(sequences: u128) -> u64 {
    u64::try_from(sequences).unwrap_or(u64::MAX)
}

fn hex_steps(spec: &JobSpec) -> u32 {
    match &spec.kind {
        KindSpec::Hex(h) => h.side * h.side.saturating_sub(1),
        _ => 0,
    }
}

/// Kayles work units for `computed` coefficients: the square-root recurrence costs
/// about k multiplications for coefficient k, so work grows with the square.
fn kayles_work(computed: u64) -> u64 {
    computed * computed / 2
}

/// Whether a shard of `stage` needs the merged output of the previous stage.
pub fn needs_stage_input(spec: &JobSpec, stage: u32) -> bool {
    matches!(spec.kind, KindSpec::Hex(_)) && stage >= 2
}

/// What a running shard hands to its worker along the way.
pub enum ShardEvent {
    /// A resumable state and the partial result it stands for.
    Checkpoint {
        state: Vec<u8>,
        partial: Partial,
        work_done: u64,
    },
}

/// What a finished shard returns.
#[derive(Debug)]
pub struct ShardOutcome {
    /// Stage data for the next stage (hex cell steps), else empty.
    pub output: Vec<u8>,
    pub partial: Partial,
    pub work_done: u64,
}

/// Runs one shard. `input` is the merged output of the previous stage when
/// [`needs_stage_input`] says so; `checkpoint` is the last accepted checkpoint of
/// an earlier attempt (or empty). `on_event` receives a checkpoint at most every
/// `checkpoint_every` on kinds that can resume; `control` carries cancellation
/// and a live work counter.
#[allow(clippy::too_many_arguments)]
pub fn execute(
    spec: &JobSpec,
    task: &ShardTask,
    input: Option<&[u32]>,
    checkpoint: &[u8],
    cache: &KernelCache,
    control: &Control,
    checkpoint_every: std::time::Duration,
    on_event: &mut dyn FnMut(ShardEvent),
) -> Result<ShardOutcome> {
    match (&spec.kind, task) {
        (
            KindSpec::Hex(h),
            ShardTask::HexStep {
                step,
                start,
                end,
                last,
            },
        ) => {
            let graph = cache.hex_graph(h.side)?;
            execute_hex_step(
                &graph, h.modulus, *step, *start, *end, *last, input, control,
            )
        }
        (KindSpec::Hex(h), ShardTask::HexPoints { modulus, points }) => {
            control.check()?;
            let valid =
                *modulus == h.modulus || (h.exact && hex::exact_primes(h.side).contains(modulus));
            if !valid || points.is_empty() || points.len() > HEX_POINTS_PER_SHARD {
                return Err(invalid!("hex points shard does not belong to this job"));
            }
            let graph = cache.hex_graph(h.side)?;
            let values = graph.evaluate_points(points, *modulus);
            control.check()?;
            control.add_work(points.len() as u64);
            Ok(ShardOutcome {
                output: Vec::new(),
                partial: Partial::HexEvaluations {
                    modulus: *modulus,
                    evaluations: points.iter().copied().zip(values).collect(),
                },
                work_done: points.len() as u64,
            })
        }
        (KindSpec::Kayles(k), ShardTask::KaylesCharacter { character }) => execute_kayles(
            k.pins,
            k.digits,
            *character,
            checkpoint,
            control,
            checkpoint_every,
            on_event,
        ),
        (KindSpec::Sliders(s), ShardTask::SliderPrefixes { prefixes, weighted }) => {
            // The searches are not the shard's work units: count them apart.
            let space = cache.slider_space(&s.board, &control.with_own_counter())?;
            execute_sliders(
                &space,
                prefixes,
                *weighted,
                checkpoint,
                control,
                checkpoint_every,
                on_event,
            )
        }
        (KindSpec::Blocks(b), ShardTask::BlocksSearch) => {
            let puzzle = blocks::parse_puzzle(&b.puzzle)?;
            // The shard's own counter would exceed work_total: count on a private one.
            let inner = Control::new();
            let count = std::thread::scope(|scope| {
                let search = scope.spawn(|| blocks::count_reachable(&puzzle, 1, &inner));
                while !search.is_finished() {
                    if control.is_cancelled() {
                        inner.cancel();
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                search.join().expect("the search does not panic")
            })?;
            control.add_work(1);
            Ok(ShardOutcome {
                output: Vec::new(),
                partial: Partial::BlocksCount {
                    configurations: count.configurations,
                    layers: count.layers,
                    largest_layer: count.largest_layer,
                },
                work_done: 1,
            })
        }
        (KindSpec::Pegs(p), ShardTask::PegTasks { tasks }) => {
            let game = peg_game(p)?;
            let tasks = tasks
                .iter()
                .map(PegShardTask::to_task)
                .collect::<Result<Vec<_>>>()?;
            let count = game.count_from(&tasks, control, |_, _| {})?;
            // Work units are tasks: the kernel's own units are not known in advance.
            control.add_work(tasks.len() as u64);
            Ok(ShardOutcome {
                output: Vec::new(),
                partial: Partial::PegCount {
                    tasks: tasks.len() as u32,
                    solutions: count.solutions,
                    positions: count.memo_boards,
                },
                work_done: tasks.len() as u64,
            })
        }
        _ => Err(invalid!(
            "the shard task does not belong to a {} job",
            spec.kind_name()
        )),
    }
}

/// Encodes truncated polynomials (`stride` residues each) for transport and
/// storage. The nonzero coefficients of a frontier state's polynomial always form
/// one contiguous run, and about half of all coefficients of a sweep are zero, so
/// each polynomial is written as `[first degree: u8][length: u8]` followed by the
/// `length` residues of that run (little-endian u32).
pub fn encode_polynomials(values: &[u32], stride: usize) -> Vec<u8> {
    debug_assert!(stride <= u8::MAX as usize && values.len().is_multiple_of(stride));
    let mut bytes = Vec::with_capacity(values.len() * 2 + values.len() / stride * 2);
    for poly in values.chunks_exact(stride) {
        let (first, len) = match poly.iter().position(|&c| c != 0) {
            None => (0, 0),
            Some(first) => {
                let last = poly.iter().rposition(|&c| c != 0).unwrap_or(first);
                (first, last + 1 - first)
            }
        };
        bytes.push(first as u8);
        bytes.push(len as u8);
        for c in &poly[first..first + len] {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
    }
    bytes
}

/// Walks [`encode_polynomials`] output, checking every run against `stride` and
/// every residue against `modulus`, and hands each polynomial's run to `visit`
/// as (first degree, coefficients). Returns the number of polynomials.
fn walk_polynomials(
    bytes: &[u8],
    stride: usize,
    modulus: u32,
    mut visit: impl FnMut(usize, &[u8]),
) -> Result<usize> {
    let (mut at, mut count) = (0, 0);
    while at < bytes.len() {
        let header = bytes
            .get(at..at + 2)
            .ok_or_else(|| invalid!("polynomial data ends inside a header at byte {at}"))?;
        let (first, len) = (header[0] as usize, header[1] as usize);
        if first + len > stride {
            return Err(invalid!(
                "polynomial run {first}+{len} exceeds {stride} coefficients at byte {at}"
            ));
        }
        at += 2;
        let run = bytes
            .get(at..at + 4 * len)
            .ok_or_else(|| invalid!("polynomial data ends inside a run at byte {at}"))?;
        at += 4 * len;
        for word in run.chunks_exact(4) {
            let c = u32::from_le_bytes(word.try_into().unwrap());
            if c >= modulus {
                return Err(invalid!(
                    "coefficient {c} is not a residue modulo {modulus}"
                ));
            }
        }
        visit(first, run);
        count += 1;
    }
    Ok(count)
}

/// Decodes [`encode_polynomials`] output into dense polynomials, checking every
/// run against `stride` and every residue against `modulus`.
pub fn decode_polynomials(bytes: &[u8], stride: usize, modulus: u32) -> Result<Vec<u32>> {
    let mut values = Vec::with_capacity(bytes.len() / 2);
    walk_polynomials(bytes, stride, modulus, |first, run| {
        let base = values.len();
        values.resize(base + stride, 0);
        for (slot, word) in values[base + first..].iter_mut().zip(run.chunks_exact(4)) {
            *slot = u32::from_le_bytes(word.try_into().unwrap());
        }
    })?;
    Ok(values)
}

/// Checks [`encode_polynomials`] output without decoding it; returns the number
/// of polynomials.
pub fn check_polynomials(bytes: &[u8], stride: usize, modulus: u32) -> Result<usize> {
    walk_polynomials(bytes, stride, modulus, |_, _| {})
}

/// The stage data a shard of `stage` reads, decoded once per worker and stage
/// from the bytes the coordinator serves.
pub fn decode_stage_input(spec: &JobSpec, bytes: &[u8]) -> Result<Vec<u32>> {
    match &spec.kind {
        KindSpec::Hex(h) => {
            let stride = (h.side * h.side / 2 + 1) as usize;
            decode_polynomials(bytes, stride, h.modulus)
        }
        _ => Err(invalid!("{} jobs have no stage data", spec.kind_name())),
    }
}

#[allow(clippy::too_many_arguments)]
fn execute_hex_step(
    graph: &hex::HexGraph,
    modulus: u32,
    step: u32,
    start: u32,
    end: u32,
    last: bool,
    input: Option<&[u32]>,
    control: &Control,
) -> Result<ShardOutcome> {
    control.check()?;
    let states = graph.num_states();
    let stride = graph.stride();
    let (start, end) = (start as usize, end as usize);
    if start >= end || end > states || step as usize > graph.num_steps() {
        return Err(invalid!(
            "hex shard [{start}, {end}) at step {step} does not fit {states} states and {} steps",
            graph.num_steps()
        ));
    }
    let initial;
    let previous: &[u32] = if step <= 1 {
        initial = graph.initial_vector(modulus);
        &initial
    } else {
        let words =
            input.ok_or_else(|| invalid!("hex step {step} needs the previous stage's data"))?;
        if words.len() != states * stride {
            return Err(invalid!(
                "stage data holds {} residues, expected {}",
                words.len(),
                states * stride
            ));
        }
        words
    };
    let out = if step == 0 {
        previous[start * stride..end * stride].to_vec()
    } else {
        let mut out = vec![0u32; (end - start) * stride];
        graph.step_range(step as usize, previous, start..end, modulus, &mut out);
        out
    };
    control.add_work((end - start) as u64);
    if last {
        let mut sums = vec![0u64; stride];
        for poly in out.chunks_exact(stride) {
            for (s, &c) in sums.iter_mut().zip(poly) {
                *s = (*s + c as u64) % modulus as u64;
            }
        }
        let residues = sums.into_iter().map(|s| s as u32).collect();
        Ok(ShardOutcome {
            output: Vec::new(),
            partial: Partial::HexCrossings { residues },
            work_done: (end - start) as u64,
        })
    } else {
        Ok(ShardOutcome {
            output: encode_polynomials(&out, stride),
            partial: Partial::None,
            work_done: (end - start) as u64,
        })
    }
}

/// Coefficients computed between two checkpoints of a kayles character.
const KAYLES_CHUNK: usize = 2_048;
/// Default interval between checkpoints of a running shard.
pub const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

fn execute_kayles(
    pins: u64,
    digits: u32,
    character: u32,
    checkpoint: &[u8],
    control: &Control,
    checkpoint_every: std::time::Duration,
    on_event: &mut dyn FnMut(ShardEvent),
) -> Result<ShardOutcome> {
    let mut series = if checkpoint.is_empty() {
        kayles::CharacterSeries::new(pins, digits, character)?
    } else {
        let words = bytes_to_u64s(checkpoint)?;
        kayles::CharacterSeries::restore(pins, digits, character, &words)?
    };
    let mut last_checkpoint = std::time::Instant::now();
    while !series.is_done() {
        let upto = series.computed() + KAYLES_CHUNK;
        series.advance(upto, control)?;
        if !series.is_done() && last_checkpoint.elapsed() >= checkpoint_every {
            last_checkpoint = std::time::Instant::now();
            on_event(ShardEvent::Checkpoint {
                state: u64s_to_bytes(&series.checkpoint()),
                partial: Partial::None,
                work_done: kayles_work(series.computed() as u64),
            });
        }
    }
    let value = series
        .value()
        .ok_or_else(|| Error::Internal("kayles series finished without a value".into()))?;
    Ok(ShardOutcome {
        output: Vec::new(),
        partial: Partial::KaylesCharacter {
            character,
            value: value as u128,
        },
        work_done: kayles_work(series.target() as u64),
    })
}

fn u64s_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_u64s(bytes: &[u8]) -> Result<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(invalid!(
            "checkpoint length {} is not a multiple of 8",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

#[derive(Serialize, Deserialize)]
struct SliderCheckpoint {
    prefixes_done: u32,
    sums: sliders::PathSums,
}

/// Enumerates the prefixes of a slider shard one after the other, with a
/// checkpoint between two prefixes. Weighted shards count sequences: the
/// kernel adds the sequences it finds to `control` as it goes, and a finished
/// prefix has added exactly its weight, which is checked. Unweighted (older)
/// shards count prefixes, with the kernel's units on a counter of its own.
#[allow(clippy::too_many_arguments)]
fn execute_sliders(
    space: &sliders::SliderSpace,
    prefixes: &[String],
    weighted: bool,
    checkpoint: &[u8],
    control: &Control,
    checkpoint_every: std::time::Duration,
    on_event: &mut dyn FnMut(ShardEvent),
) -> Result<ShardOutcome> {
    let (mut done, mut sums) = if checkpoint.is_empty() {
        (0usize, sliders::PathSums::default())
    } else {
        let c: SliderCheckpoint = serde_json::from_slice(checkpoint)
            .map_err(|e| invalid!("malformed slider checkpoint: {e}"))?;
        if c.prefixes_done as usize > prefixes.len() {
            return Err(invalid!("slider checkpoint is past the end of its shard"));
        }
        (c.prefixes_done as usize, c.sums)
    };
    let units_of = |prefix: &str| -> Result<u64> {
        if weighted {
            space.prefix_weight(prefix).map(slider_units)
        } else {
            Ok(1)
        }
    };
    let own_counter;
    let kernel_control = if weighted {
        control
    } else {
        own_counter = control.with_own_counter();
        &own_counter
    };
    // A resumed shard's progress continues from its checkpoint.
    let mut units = 0u64;
    for prefix in &prefixes[..done] {
        units = units.saturating_add(units_of(prefix)?);
    }
    control.add_work(units);
    let mut last_checkpoint = std::time::Instant::now();
    while done < prefixes.len() {
        let prefix = &prefixes[done];
        let part = space.enumerate(prefix, kernel_control)?;
        let weight = units_of(prefix)?;
        if weighted && slider_units(part.count) != weight {
            return Err(Error::Internal(format!(
                "prefix {prefix:?} has {} shortest sequences, but the graph counts {weight}",
                part.count
            )));
        }
        if !weighted {
            control.add_work(1);
        }
        sums.merge(part);
        units = units.saturating_add(weight);
        done += 1;
        if done < prefixes.len() && last_checkpoint.elapsed() >= checkpoint_every {
            last_checkpoint = std::time::Instant::now();
            let state = SliderCheckpoint {
                prefixes_done: done as u32,
                sums,
            };
            on_event(ShardEvent::Checkpoint {
                state: serde_json::to_vec(&state).expect("checkpoint serialises"),
                partial: Partial::SliderSums {
                    prefixes_done: done as u32,
                    sums,
                },
                work_done: units,
            });
        }
    }
    Ok(ShardOutcome {
        output: Vec::new(),
        partial: Partial::SliderSums {
            prefixes_done: done as u32,
            sums,
        },
        work_done: units,
    })
}

/// The answer from the partial results of the last stage, in shard order.
pub fn finish(spec: &JobSpec, plan: &JobPlan, partials: &[Partial]) -> Result<Answer> {
    match &spec.kind {
        KindSpec::Hex(h) if h.plan == HexPlan::Points => finish_hex_points(h, plan, partials),
        KindSpec::Hex(h) => {
            let p = h.modulus as u64;
            let mut crossings = vec![0u64; plan.stride as usize];
            for partial in partials {
                let Partial::HexCrossings { residues } = partial else {
                    return Err(Error::Internal("hex job with a foreign partial".into()));
                };
                if residues.len() != crossings.len() {
                    return Err(Error::Internal("hex partial of the wrong length".into()));
                }
                for (c, &r) in crossings.iter_mut().zip(residues) {
                    *c = (*c + r as u64) % p;
                }
            }
            let crossings: Vec<u32> = crossings.into_iter().map(|c| c as u32).collect();
            Ok(hex_residue_answer(h, plan, &crossings))
        }
        KindSpec::Kayles(k) => {
            let mut values = vec![None; plan.characters as usize];
            for partial in partials {
                let Partial::KaylesCharacter { character, value } = partial else {
                    return Err(Error::Internal("kayles job with a foreign partial".into()));
                };
                let slot = values
                    .get_mut(*character as usize)
                    .ok_or_else(|| Error::Internal("kayles character out of range".into()))?;
                *slot = Some(*value as _);
            }
            let values: Vec<_> = values
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Error::Internal("a kayles character is missing".into()))?;
            Ok(kayles_answer(
                k,
                kayles::combine(k.pins, k.digits, &values)?,
            ))
        }
        KindSpec::Blocks(b) => match partials {
            [
                Partial::BlocksCount {
                    configurations,
                    layers,
                    largest_layer,
                },
            ] => Ok(blocks_answer(b, *configurations, *layers, *largest_layer)),
            _ => Err(Error::Internal(
                "a blocks job has exactly one blocks partial".into(),
            )),
        },
        KindSpec::Pegs(p) => {
            let mut solutions: u128 = 0;
            let mut positions: u64 = 0;
            for partial in partials {
                let Partial::PegCount {
                    solutions: s,
                    positions: b,
                    ..
                } = partial
                else {
                    return Err(Error::Internal("pegs job with a foreign partial".into()));
                };
                solutions = solutions
                    .checked_add(*s)
                    .ok_or_else(|| Error::Internal("peg solution count overflows".into()))?;
                positions += b;
            }
            Ok(pegs_answer(p, solutions, positions))
        }
        KindSpec::Sliders(s) => {
            let mut total = sliders::PathSums::default();
            for partial in partials {
                let Partial::SliderSums { sums, .. } = partial else {
                    return Err(Error::Internal("sliders job with a foreign partial".into()));
                };
                total.merge(*sums);
            }
            Ok(Answer {
                line: total.checksum_sum.to_string(),
                details: serde_json::json!({
                    "kind": "sliders",
                    "rows": s.board.rows,
                    "cols": s.board.cols,
                    "start": s.board.start,
                    "target": s.board.target,
                    "boards": plan.boards,
                    "shortest_length": plan.shortest_length,
                    "sequences": total.count.to_string(),
                    "checksum_sum": total.checksum_sum.to_string(),
                }),
            })
        }
    }
}

/// The answer computed in this process by the kernels' own drivers, without
/// shards: the reference that every run through the runner must equal.
pub fn compute_direct(spec: &JobSpec, threads: usize, control: &Control) -> Result<Answer> {
    spec.validate()?;
    let threads = threads.max(1);
    match &spec.kind {
        // Exact counts have no single-sweep driver: evaluate every point here.
        KindSpec::Hex(h) if h.exact => run_locally(spec, threads, control),
        KindSpec::Hex(h) => {
            let answer = hex::count_games(h.side, h.modulus, threads, control)?;
            let plan = JobPlan {
                states: answer.states as u64,
                stride: answer.crossings.len() as u64,
                ..JobPlan::empty()
            };
            let mut sweep = spec.clone();
            if let KindSpec::Hex(h) = &mut sweep.kind {
                h.plan = HexPlan::CellStep;
            }
            finish(
                &sweep,
                &plan,
                &[Partial::HexCrossings {
                    residues: answer.crossings,
                }],
            )
        }
        KindSpec::Kayles(k) => Ok(kayles_answer(
            k,
            kayles::fair_rows(k.pins, k.digits, threads, control)?,
        )),
        KindSpec::Blocks(b) => {
            let puzzle = blocks::parse_puzzle(&b.puzzle)?;
            let count = blocks::count_reachable(&puzzle, threads, control)?;
            Ok(blocks_answer(
                b,
                count.configurations,
                count.layers,
                count.largest_layer,
            ))
        }
        KindSpec::Pegs(p) => {
            let count = pegs::count_solutions(
                pegs::parse_board(&p.board)?,
                p.start,
                p.end,
                threads,
                control,
            )?;
            Ok(pegs_answer(p, count.solutions, count.memo_boards))
        }
        KindSpec::Sliders(s) => {
            let space = sliders::SliderSpace::build(&s.board, control)?;
            let sums = space.enumerate("", control)?;
            let plan = JobPlan {
                shortest_length: space.shortest_length(),
                boards: space.reachable_boards() as u64,
                ..JobPlan::empty()
            };
            finish(
                spec,
                &plan,
                &[Partial::SliderSums {
                    prefixes_done: 1,
                    sums,
                }],
            )
        }
    }
}

/// The answer of a blocks job.
fn blocks_answer(
    b: &crate::spec::BlocksSpec,
    configurations: u64,
    layers: u32,
    largest_layer: u64,
) -> Answer {
    let puzzle = blocks::parse_puzzle(&b.puzzle)
        .map(|p| p.describe())
        .unwrap_or_default();
    Answer {
        line: configurations.to_string(),
        details: serde_json::json!({
            "kind": "blocks",
            "puzzle": puzzle,
            "configurations": configurations,
            "layers": layers,
            "largest_layer": largest_layer,
        }),
    }
}

/// The answer of a pegs job.
fn pegs_answer(p: &crate::spec::PegsSpec, solutions: u128, positions: u64) -> Answer {
    let default_start = pegs::parse_board(&p.board)
        .map(|b| b.default_start())
        .unwrap_or(0);
    Answer {
        line: solutions.to_string(),
        details: serde_json::json!({
            "kind": "pegs",
            "board": p.board,
            "start": p.start.unwrap_or(default_start),
            "end": p.end,
            "solutions": solutions.to_string(),
            // Summed over shards: each shard keeps its own positions.
            "positions": positions,
        }),
    }
}

/// The answer of a kayles job from f(n) mod 10^d.
fn kayles_answer(k: &crate::spec::KaylesSpec, fair: u64) -> Answer {
    let line = kayles::format_answer(fair, k.digits);
    Answer {
        line: line.clone(),
        details: serde_json::json!({
            "kind": "kayles",
            "pins": k.pins,
            "digits": k.digits,
            "fair_rows_mod": line,
        }),
    }
}

/// Runs a single-stage job's shards in this process over `threads` threads.
fn run_locally(spec: &JobSpec, threads: usize, control: &Control) -> Result<Answer> {
    let cache = KernelCache::new();
    let plan = prepare(spec, &cache, control)?;
    if plan.stages_total != 1 {
        return Err(Error::Internal(
            "only single-stage plans run locally".into(),
        ));
    }
    let shards = plan_stage(spec, &plan, 1)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Partial>>> = Mutex::new(vec![None; shards.len()]);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(shards.len()))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(shard) = shards.get(i) else {
                            return Ok(());
                        };
                        let outcome = execute(
                            spec,
                            &shard.task,
                            None,
                            &[],
                            &cache,
                            control,
                            CHECKPOINT_EVERY,
                            &mut |_| {},
                        )?;
                        results.lock().unwrap()[i] = Some(outcome.partial);
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::Internal("a shard thread panicked".into())))
        })
    })?;
    let partials = results
        .into_inner()
        .unwrap()
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::Internal("a shard produced no result".into()))?;
    finish(spec, &plan, &partials)
}

/// Solves each prime's evaluations for the crossing counts, checks them at the
/// point not used to solve, and computes H(N) modulo the prime or, with several
/// primes, exactly.
fn finish_hex_points(h: &HexSpec, plan: &JobPlan, partials: &[Partial]) -> Result<Answer> {
    let mut per_prime: Vec<Vec<(u32, u32)>> = vec![Vec::new(); plan.primes.len()];
    for partial in partials {
        let Partial::HexEvaluations {
            modulus,
            evaluations,
        } = partial
        else {
            return Err(Error::Internal(
                "hex points job with a foreign partial".into(),
            ));
        };
        let i = plan
            .primes
            .iter()
            .position(|p| p == modulus)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "evaluations modulo {modulus}, not a prime of the job"
                ))
            })?;
        per_prime[i].extend_from_slice(evaluations);
    }
    let crossings: Vec<Vec<u32>> = plan
        .primes
        .iter()
        .zip(&per_prime)
        .map(|(&p, evaluations)| hex::solve_crossings(h.side, p, evaluations))
        .collect::<Result<_>>()?;
    let half = (h.side * h.side / 2) as usize;
    if h.exact {
        let exact = hex::exact_crossings(h.side, &plan.primes, &crossings)?;
        let games = hex::exact_game_count(h.side, &exact);
        let modulus = hex::DEFAULT_MODULUS;
        let residues: Vec<u32> = exact[..=half]
            .iter()
            .map(|c| (c % modulus).try_into().expect("a residue fits"))
            .collect();
        Ok(Answer {
            line: games.to_string(),
            details: serde_json::json!({
                "kind": "hex",
                "side": h.side,
                "plan": h.plan.name(),
                "exact": true,
                "primes": plan.primes,
                "games": games.to_string(),
                "games_mod_1000000007": hex::game_count(h.side, &residues, modulus),
                "crossings": exact.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            }),
        })
    } else {
        Ok(hex_residue_answer(h, plan, &crossings[0]))
    }
}

/// H(N) mod p from crossing counts mod p: C_0..C_(M/2) at least (the points plan
/// has all of them, the cell-step plan the lower half).
fn hex_residue_answer(h: &HexSpec, plan: &JobPlan, crossings: &[u32]) -> Answer {
    let half = (h.side * h.side / 2) as usize;
    let games = hex::game_count(h.side, &crossings[..=half], h.modulus);
    Answer {
        line: games.to_string(),
        details: serde_json::json!({
            "kind": "hex",
            "side": h.side,
            "modulus": h.modulus,
            "plan": h.plan.name(),
            "states": plan.states,
            "games_mod": games,
            "crossings_mod": crossings,
        }),
    }
}

/// What a hex job needs, by plan: memory per worker and in the coordinator, and
/// the data moved between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HexEstimate {
    pub plan: HexPlan,
    pub side: u32,
    pub states: u64,
    pub worker_memory_bytes: u64,
    pub coordinator_memory_bytes: u64,
    pub traffic_bytes: u64,
}

impl HexEstimate {
    pub fn describe(&self) -> String {
        format!(
            "hex side {} with the {} plan needs about {} per worker and {} in the coordinator, and moves about {} between them",
            self.side,
            self.plan.name(),
            format_bytes(self.worker_memory_bytes),
            format_bytes(self.coordinator_memory_bytes),
            format_bytes(self.traffic_bytes)
        )
    }
}

/// What one worker is assumed to have for a job unless `--force` says otherwise.
pub const WORKER_MEMORY_BUDGET: u64 = 8_000_000_000;
/// Measured size of the hex state graph per frontier state (states, the per-column
/// transition lists and their offsets).
const HEX_GRAPH_BYTES_PER_STATE: u64 = 125;
/// Workers assumed when estimating traffic.
const ESTIMATE_WORKERS: u64 = 2;

pub fn hex_estimate(h: &HexSpec) -> HexEstimate {
    let side = h.side as u64;
    let states = hex::known_state_count(h.side).unwrap_or(0);
    let stride = side * side / 2 + 1;
    let steps = side * side.saturating_sub(1);
    let graph = states * HEX_GRAPH_BYTES_PER_STATE;
    let vector = states * stride * 4;
    let (worker, coordinator, traffic) = match h.plan {
        // Input, output and the decoded copy; the coordinator keeps the previous
        // stage and assembles the current one (about half of each is zero runs).
        HexPlan::CellStep => (
            graph + 3 * vector,
            vector,
            steps * vector / 2 * (ESTIMATE_WORKERS + 1),
        ),
        // One in-place vector of one lane per point for each of two slots, plus
        // the pass's private buffers.
        HexPlan::Points => (
            graph + 2 * (states * HEX_POINTS_PER_SHARD as u64 * 4 + (20 << 20)),
            1 << 20,
            1 << 20,
        ),
    };
    HexEstimate {
        plan: h.plan,
        side: h.side,
        states,
        worker_memory_bytes: worker,
        coordinator_memory_bytes: coordinator,
        traffic_bytes: traffic,
    }
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

/// Fault injection for tests: alters a result the way a faulty machine might,
/// so that the checks downstream (solve-and-check, replication) can be exercised.
pub fn corrupt_for_testing(partial: &mut Partial) {
    match partial {
        Partial::None => {}
        Partial::HexCrossings { residues } => {
            if let Some(r) = residues.first_mut() {
                *r = r.wrapping_add(1) % hex::DEFAULT_MODULUS;
            }
        }
        Partial::HexEvaluations {
            modulus,
            evaluations,
        } => {
            if let Some((_, v)) = evaluations.first_mut() {
                *v = (*v + 1) % *modulus;
            }
        }
        Partial::KaylesCharacter { value, .. } => *value = value.wrapping_add(1),
        Partial::SliderSums { sums, .. } => sums.checksum_sum = sums.checksum_sum.wrapping_add(1),
        Partial::PegCount { solutions, .. } => *solutions = solutions.wrapping_add(1),
        Partial::BlocksCount { configurations, .. } => {
            *configurations = configurations.wrapping_add(1)
        }
    }
}
