//! `blocks`: the configurations a sliding-block puzzle reaches (exact). Two
//! plans: `frontier` (the default), the breadth-first search by layers, each
//! large layer split into buckets by a hash of the state, one shard per bucket
//! (see `blocks::levels`), so that layers are spread over the workers, while
//! layers small enough for one shard run together in one stage; and `search`,
//! one shard running the whole search on one worker.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{
    Answer, FaultInjection, FileReader, FinishedStage, JobKind, NextStage, Outcome, Planned,
    ShardRun, SpecArgs, SpecOf, StageRead, no_output, single_input, single_stored,
};
use crate::{Control, MemorySpill, Result, Room, Stored, invalid};
use tally_kernels::blocks;
use tally_kernels::blocks::LevelBucket;
use tally_kernels::buckets::{
    add_level_sizes, bucket_count, bucket_of, encode_buckets, gathered_ranges, length_at,
    levels_note, split_buckets, states_per_slot,
};
use tally_kernels::compact::ListForm;
use tally_kernels::spill::{StoredSource, stage_output};
use tally_wire::proto;

pub struct Blocks;

/// The names of a layer bucket's three lists, in their order.
const LISTS: [&str; 3] = ["candidates", "current layer", "previous layer"];

/// What a layer shard reads: bucket `q` of every shard of the previous
/// stage, framed but not decoded, in memory or in a file the worker wrote as
/// it arrived, so that a layer is read as streams
/// (`blocks::expand_bucket_within`) and never held decoded whole.
pub struct BlocksInput {
    stored: Arc<dyn Stored>,
    /// Each sender's bucket: the byte ranges of its three lists.
    senders: Vec<[Range<u64>; 3]>,
}

impl BlocksInput {
    /// The gathered buckets (see `tally_kernels::buckets`: each a length and
    /// a `LevelBucket`), their framing checked; the lists are checked as they
    /// are read.
    fn new(stored: Arc<dyn Stored>) -> Result<BlocksInput> {
        let mut senders = Vec::new();
        for segment in gathered_ranges(&*stored)? {
            let mut list_at = segment.start;
            let mut lists: [Range<u64>; 3] = Default::default();
            for (i, what) in LISTS.iter().enumerate() {
                let what = format!("layer bucket: the length of its {what}");
                let list = length_at(&*stored, list_at, segment.end, &what)?;
                let list_end = (list_at + 8)
                    .checked_add(list)
                    .filter(|&e| e <= segment.end)
                    .ok_or_else(|| invalid!("layer bucket: its lists run past the end"))?;
                lists[i] = list_at + 8..list_end;
                list_at = list_end;
            }
            if list_at != segment.end {
                return Err(invalid!(
                    "layer bucket: {} bytes after its lists",
                    segment.end - list_at
                ));
            }
            senders.push(lists);
        }
        Ok(BlocksInput { stored, senders })
    }

    /// Every sender's bucket in `form`, decoded into memory.
    fn decode_all(&self, form: ListForm) -> Result<Vec<LevelBucket>> {
        (self.senders.iter().enumerate())
            .map(|(sender, lists)| {
                let read = |i: usize| {
                    let bytes = self.stored.read_range(lists[i].clone())?;
                    let label = format!("layer bucket of sender {sender}: its {}", LISTS[i]);
                    blocks::decode_states_as(form, &bytes, &label)
                };
                Ok(LevelBucket {
                    candidates: read(0)?,
                    current: read(1)?,
                    previous: read(2)?,
                })
            })
            .collect()
    }
}

/// One layer shard that shares its stage: its input read as streams, within
/// the shard's room (in memory without one).
fn layer_within(
    puzzle: &blocks::Puzzle,
    input: &BlocksInput,
    buckets_out: u32,
    form: ListForm,
    room: Option<&mut Room<'_>>,
    control: &Control,
) -> Result<Outcome<BlocksPartial>> {
    let mut in_memory = MemorySpill::default();
    let mut room = Room::or_in_memory(room, &mut in_memory);
    let senders = (input.senders.iter())
        .map(|lists| std::array::from_fn(|i| StoredSource::new(&*input.stored, lists[i].clone())))
        .collect();
    let layer =
        blocks::expand_bucket_within(puzzle, senders, buckets_out, form, &mut room, control)?;
    let output = stage_output(&layer.sent, &mut *room.spill)?;
    Ok(Outcome {
        output,
        partial: BlocksPartial::Layers {
            sizes: vec![layer.states],
            buckets: buckets_out,
        },
        work_done: 1,
    })
}

/// Longest accepted puzzle text.
pub const MAX_PUZZLE_BYTES: usize = 64 * 1024;

/// Most shards of one layer of the frontier plan.
pub const MAX_BUCKETS: u32 = 1024;

/// States of a layer per shard of the next layer when the frontier plan
/// chooses the bucket count and the workers' memory allows: about 1 GB a
/// shard (see [`SHARD_BYTES_PER_STATE`]).
const STATES_PER_BUCKET: u64 = 2_000_000;

/// Memory a layer shard takes per state of its bucket: the lists it is sent,
/// the layer, and the neighbours it sends on (measured: 0.8 to 1.05 GB of
/// worker for buckets of 1.6 to 1.9 million states).
const SHARD_BYTES_PER_STATE: u64 = 600;

/// The fewest states per shard the plan sizes to a small worker: below it,
/// the runner's cost per shard would outweigh the shard.
const MIN_STATES_PER_BUCKET: u64 = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BlocksPlanName {
    /// One shard: the whole search on one worker.
    Search,
    /// Layers split into buckets over shards; layers small enough for one
    /// shard run together in one stage.
    #[default]
    Frontier,
}

impl BlocksPlanName {
    pub fn name(self) -> &'static str {
        match self {
            BlocksPlanName::Search => "search",
            BlocksPlanName::Frontier => "frontier",
        }
    }

    /// The empty name selects the default plan.
    pub fn parse(name: &str) -> Result<BlocksPlanName> {
        match name {
            "" => Ok(BlocksPlanName::default()),
            "search" => Ok(BlocksPlanName::Search),
            "frontier" => Ok(BlocksPlanName::Frontier),
            other => Err(invalid!(
                "unknown blocks plan {other:?}: expected \"search\" or \"frontier\""
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksSpec {
    /// The puzzle in the text format of `blocks` (the file's contents).
    #[serde(default = "default_puzzle")]
    pub puzzle: String,
    #[serde(default)]
    pub plan: BlocksPlanName,
    /// Frontier plan: shards per layer; 0 chooses from each layer's size.
    #[serde(default)]
    pub buckets: u32,
}

fn default_puzzle() -> String {
    blocks::PE766.to_string()
}

impl SpecOf for BlocksSpec {
    type Kind = Blocks;
}

#[derive(clap::Args, Debug)]
pub struct BlocksArgs {
    /// Puzzle file (format in docs/kinds/blocks.md). Default: the Project Euler 766 puzzle.
    #[arg(long, value_name = "FILE")]
    pub puzzle: Option<std::path::PathBuf>,
    /// Shard plan: frontier (the default: layers split over shards when they
    /// are large, thin layers together on one) or search (the whole search on
    /// one worker).
    #[arg(long, default_value = "frontier")]
    pub plan: String,
    /// Frontier plan: shards per layer (default: from each layer's size).
    #[arg(long, value_name = "N")]
    pub buckets: Option<u32>,
}

impl SpecArgs<BlocksSpec> for BlocksArgs {
    fn into_spec(self, files: &dyn FileReader) -> Result<BlocksSpec> {
        Ok(BlocksSpec {
            puzzle: match &self.puzzle {
                None => default_puzzle(),
                Some(path) => files.read_to_string(path)?,
            },
            plan: BlocksPlanName::parse(&self.plan)?,
            buckets: self.buckets.unwrap_or(0),
        })
    }
}

/// What the frontier plan has found so far: nothing is known before the search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlocksPlan {
    /// The size of each layer found so far.
    #[serde(default)]
    pub layers: Vec<u64>,
    /// Frontier plan: its layers' lists are in the compact form
    /// (`compact::ListForm::Compact`); plans made before it was write and
    /// read the raw form to the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compact: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum BlocksTask {
    /// The whole breadth-first search.
    BlocksSearch,
    /// Bucket `bucket` of layer `layer` (0 is the initial configuration),
    /// sending its results to the `buckets_out` buckets of the next layer. A
    /// shard `alone` in its stage goes on to the layers after it while they
    /// would have one shard too, and then writes as many buckets as the last
    /// layer it computed calls for: thin layers cost no barrier each.
    BlocksLayer {
        layer: u32,
        bucket: u32,
        buckets_out: u32,
        #[serde(default)]
        alone: bool,
        /// Its input and output lists in the compact form; jobs planned
        /// before it was, raw.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlocksPartial {
    BlocksCount {
        configurations: u64,
        layers: u32,
        largest_layer: u64,
    },
    /// The states of one bucket of each layer the shard computed (one, unless
    /// it was alone in its stage), and the buckets it wrote.
    Layers { sizes: Vec<u64>, buckets: u32 },
}

/// Shards of the layer after one of `states` states, spread over `slots`,
/// each within `slot_memory` (1 and 0, unknown, where a shard alone in its
/// stage decides: the coordinator checks its choice).
fn buckets_after(spec: &BlocksSpec, states: u64, slots: u32, slot_memory: u64) -> u32 {
    let per_bucket = states_per_slot(
        slot_memory,
        SHARD_BYTES_PER_STATE,
        MIN_STATES_PER_BUCKET,
        STATES_PER_BUCKET,
    );
    bucket_count(
        states,
        per_bucket,
        per_bucket / 4,
        spec.buckets,
        MAX_BUCKETS,
        slots,
    )
}

fn layer_shards(
    layer: u32,
    buckets: u32,
    buckets_out: u32,
    compact: bool,
) -> Vec<Planned<BlocksTask>> {
    (0..buckets)
        .map(|bucket| Planned {
            task: BlocksTask::BlocksLayer {
                layer,
                bucket,
                buckets_out,
                alone: buckets == 1,
                compact,
            },
            work_total: 1,
        })
        .collect()
}

/// The buckets a layer shard that computed layers of `sizes` writes.
fn buckets_written(spec: &BlocksSpec, task: &BlocksTask, sizes: &[u64]) -> Result<u32> {
    match task {
        BlocksTask::BlocksLayer { alone: true, .. } => Ok(buckets_after(
            spec,
            sizes.last().copied().unwrap_or(0),
            1,
            0,
        )),
        BlocksTask::BlocksLayer { buckets_out, .. } if sizes.len() == 1 => Ok(*buckets_out),
        BlocksTask::BlocksLayer { .. } => Err(invalid!(
            "a layer shard that shares its stage computes one layer, not {}",
            sizes.len()
        )),
        BlocksTask::BlocksSearch => Err(invalid!("the search plan writes no buckets")),
    }
}

impl JobKind for Blocks {
    type Spec = BlocksSpec;
    type Args = BlocksArgs;
    type Plan = BlocksPlan;
    type Task = BlocksTask;
    type Partial = BlocksPartial;
    /// The frontier plan's shard input: what each shard of the previous layer
    /// sent this bucket, kept encoded.
    type StageInput = BlocksInput;

    const NAME: &'static str = "blocks";
    const ABOUT: &'static str = "Configurations a sliding-block puzzle reaches (exact).";
    const EXAMPLES: &'static str = "  tally run blocks                      # Project Euler 766\n  tally run blocks --puzzle my.blocks\n  tally run blocks --plan frontier --workers 4";

    fn spec_to_proto(spec: &BlocksSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Blocks(proto::BlocksSpec {
            puzzle: spec.puzzle.clone(),
            plan: spec.plan.name().to_string(),
            buckets: spec.buckets,
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<BlocksSpec>> {
        let proto::job_spec::Kind::Blocks(b) = kind else {
            return None;
        };
        Some(BlocksPlanName::parse(&b.plan).map(|plan| BlocksSpec {
            puzzle: if b.puzzle.is_empty() {
                default_puzzle()
            } else {
                b.puzzle.clone()
            },
            plan,
            buckets: b.buckets,
        }))
    }

    fn validate(spec: &BlocksSpec) -> Result<()> {
        if spec.puzzle.len() > MAX_PUZZLE_BYTES {
            return Err(invalid!(
                "the puzzle is longer than {MAX_PUZZLE_BYTES} bytes"
            ));
        }
        if spec.buckets > MAX_BUCKETS {
            return Err(invalid!(
                "buckets must be at most {MAX_BUCKETS} (0 chooses from each layer's size), got {}",
                spec.buckets
            ));
        }
        if spec.buckets > 0 && spec.plan != BlocksPlanName::Frontier {
            return Err(invalid!(
                "buckets are for the frontier plan (--plan frontier)"
            ));
        }
        blocks::parse_puzzle(&spec.puzzle).map(|_| ())
    }

    fn describe(spec: &BlocksSpec) -> String {
        let puzzle = match blocks::parse_puzzle(&spec.puzzle) {
            Ok(puzzle) => puzzle.describe(),
            Err(_) => "(invalid puzzle)".into(),
        };
        match (spec.plan, spec.buckets) {
            (BlocksPlanName::Search, _) => format!("blocks {puzzle} (search)"),
            (BlocksPlanName::Frontier, 0) => format!("blocks {puzzle}"),
            (BlocksPlanName::Frontier, n) => format!("blocks {puzzle} ({n} buckets per layer)"),
        }
    }

    fn small_example() -> Option<BlocksSpec> {
        Some(BlocksSpec {
            puzzle: "aa1.\na23.\n4567\nsame: 1234567\n".into(),
            plan: BlocksPlanName::Frontier,
            buckets: 0,
        })
    }

    fn stages_known(spec: &BlocksSpec) -> bool {
        spec.plan != BlocksPlanName::Frontier
    }

    fn prepare(spec: &BlocksSpec, _cache: &KernelCache, _control: &Control) -> Result<BlocksPlan> {
        Ok(BlocksPlan {
            compact: spec.plan == BlocksPlanName::Frontier,
            ..BlocksPlan::default()
        })
    }

    fn plan_stage(
        spec: &BlocksSpec,
        plan: &BlocksPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<BlocksTask>>> {
        Ok(match spec.plan {
            BlocksPlanName::Search => vec![Planned {
                task: BlocksTask::BlocksSearch,
                // Configurations are not known in advance: progress counts the shard.
                work_total: 1,
            }],
            // Layer 0 is the initial configuration alone.
            BlocksPlanName::Frontier => {
                layer_shards(0, 1, buckets_after(spec, 1, 1, 0), plan.compact)
            }
        })
    }

    fn next_stage(
        spec: &BlocksSpec,
        plan: &mut BlocksPlan,
        finished: FinishedStage<'_, BlocksPartial>,
    ) -> Result<NextStage<BlocksTask>> {
        // The search plan's one shard (also a job stored before frontier plans
        // were the default: the partials, not the spec's default, say which).
        if let [BlocksPartial::BlocksCount { .. }] = finished.partials {
            return Ok(NextStage::Finish);
        }
        // Each layer's size, summed over the shards; the buckets they wrote.
        let mut sizes: Vec<u64> = Vec::new();
        let mut written = None;
        for partial in finished.partials {
            let BlocksPartial::Layers {
                sizes: own,
                buckets,
            } = partial
            else {
                return Err(invalid!("a frontier layer returned {partial:?}"));
            };
            if written.is_some_and(|w| w != *buckets) {
                return Err(invalid!("the shards of one layer disagree on its shape"));
            }
            written = Some(*buckets);
            add_level_sizes(&mut sizes, own, "layer")?;
        }
        let first = plan.layers.len();
        let found: Vec<u64> = sizes.iter().copied().take_while(|&n| n > 0).collect();
        let shards = written.unwrap_or(1);
        // No layer is too large: past MAX_BUCKETS shards, each takes a larger
        // part and spills past its memory share.
        plan.layers.extend(&found);
        let note = levels_note("layer", first, &found, "configurations");
        // A layer of no configurations ends the search.
        if found.len() < sizes.len() || found.is_empty() {
            return Ok(NextStage::Finish);
        }
        let last = *found.last().unwrap_or(&0);
        Ok(NextStage::Shards(
            layer_shards(
                plan.layers.len() as u32,
                shards,
                buckets_after(spec, last, finished.slots, finished.slot_memory),
                plan.compact,
            ),
            note,
        ))
    }

    /// A frontier layer reads its bucket of what every shard of the
    /// previous layer sent.
    fn stage_reads(spec: &BlocksSpec, stage: u32, task: &BlocksTask) -> Vec<StageRead> {
        if spec.plan != BlocksPlanName::Frontier || stage < 2 {
            return Vec::new();
        }
        let bucket = match task {
            BlocksTask::BlocksLayer { layer, bucket, .. } if *layer > 0 => Some(*bucket),
            _ => None,
        };
        vec![StageRead {
            stage: stage - 1,
            bucket,
        }]
    }

    fn decode_stage_inputs(_spec: &BlocksSpec, parts: &[&[u8]]) -> Result<BlocksInput> {
        BlocksInput::new(Arc::new(single_input(Self::NAME, parts)?.to_vec()))
    }

    const STREAMS_STAGE_INPUT: bool = true;

    fn decode_stored_inputs(
        _spec: &BlocksSpec,
        parts: Vec<Arc<dyn Stored>>,
    ) -> Result<BlocksInput> {
        BlocksInput::new(single_stored(Self::NAME, parts)?)
    }

    fn execute(
        spec: &BlocksSpec,
        task: &BlocksTask,
        run: &mut ShardRun<'_, BlocksInput, BlocksPartial>,
    ) -> Result<Outcome<BlocksPartial>> {
        let puzzle = blocks::parse_puzzle(&spec.puzzle)?;
        if let BlocksTask::BlocksLayer {
            layer,
            buckets_out,
            alone,
            compact,
            ..
        } = *task
        {
            let form = ListForm::compact_if(compact);
            let inner = run.control.with_own_counter();
            if !alone && layer > 0 {
                let input = run
                    .input
                    .ok_or_else(|| invalid!("layer {layer} needs the previous layer's buckets"))?;
                return layer_within(&puzzle, input, buckets_out, form, run.room.as_mut(), &inner);
            }
            // A shard alone in its stage runs layers too small to split, in
            // memory, until one is worth splitting.
            let mut inputs = match (layer, run.input) {
                (0, _) => vec![blocks::start_bucket(&puzzle)],
                (_, Some(input)) => input.decode_all(form)?,
                (_, None) => {
                    return Err(invalid!("layer {layer} needs the previous layer's buckets"));
                }
            };
            let mut sizes = Vec::new();
            let out = loop {
                let out_buckets = if alone { 1 } else { buckets_out };
                let (states, mut out) =
                    blocks::expand_bucket(&puzzle, inputs, out_buckets, &inner)?;
                sizes.push(states);
                if !alone {
                    break out;
                }
                let next = buckets_after(spec, states, 1, 0);
                if states == 0 || next > 1 {
                    break blocks::rebucket(out.pop().unwrap_or_default(), next);
                }
                inputs = out;
            };
            run.control.add_work(1);
            let buckets: Vec<Vec<u8>> = out.iter().map(|b| b.encode_as(form)).collect();
            return Ok(Outcome {
                output: encode_buckets(&buckets).into(),
                partial: BlocksPartial::Layers {
                    sizes,
                    buckets: buckets.len() as u32,
                },
                work_done: 1,
            });
        }
        // The search's own units would exceed work_total: count on a private
        // counter, sharing only the cancellation flag.
        let inner = run.control.with_own_counter();
        let count = blocks::count_reachable(&puzzle, 1, &inner)?;
        run.control.add_work(1);
        Ok(Outcome {
            output: crate::StageOutput::default(),
            partial: BlocksPartial::BlocksCount {
                configurations: count.configurations,
                layers: count.layers,
                largest_layer: count.largest_layer,
            },
            work_done: 1,
        })
    }

    fn check_result(
        spec: &BlocksSpec,
        _plan: &BlocksPlan,
        task: &BlocksTask,
        partial: &BlocksPartial,
        output: &[u8],
    ) -> Result<()> {
        match (task, partial) {
            (BlocksTask::BlocksSearch, BlocksPartial::BlocksCount { .. }) => no_output(output),
            (
                BlocksTask::BlocksLayer { .. },
                BlocksPartial::Layers {
                    sizes,
                    buckets: said,
                },
            ) => {
                let mut sent = 0u64;
                let expected = buckets_written(spec, task, sizes)?;
                let buckets = split_buckets(output)?;
                if buckets.len() != expected as usize || *said != expected {
                    return Err(invalid!(
                        "the layer shard wrote {} buckets and said {said}; the next layer has {expected}",
                        buckets.len()
                    ));
                }
                let buckets_out = &expected;
                let states = sizes
                    .last()
                    .ok_or_else(|| invalid!("a layer shard computed no layer"))?;
                let BlocksTask::BlocksLayer { layer, compact, .. } = *task else {
                    unreachable!("a layer task")
                };
                for (q, bytes) in buckets.into_iter().enumerate() {
                    let label = format!("layer {layer}'s output bucket {q}");
                    let bucket =
                        LevelBucket::decode_as(bytes, ListForm::compact_if(compact), &label)?;
                    sent += bucket.current.len() as u64;
                    let lists = [&bucket.candidates, &bucket.current, &bucket.previous];
                    if let Some(&state) = lists
                        .into_iter()
                        .flatten()
                        .find(|&&s| bucket_of(s, *buckets_out) != q as u32)
                    {
                        return Err(invalid!(
                            "state {state:#x} was sent to bucket {q}, not its own"
                        ));
                    }
                }
                // The layer's states go on as the next layer's `current` lists.
                if sent != *states {
                    return Err(invalid!(
                        "the shard counted {states} states of its last layer but sent on {sent}"
                    ));
                }
                Ok(())
            }
            (task, partial) => Err(invalid!("a {partial:?} result for the task {task:?}")),
        }
    }

    fn finish(
        spec: &BlocksSpec,
        plan: &BlocksPlan,
        partials: Vec<BlocksPartial>,
    ) -> Result<Answer> {
        if partials
            .iter()
            .all(|p| matches!(p, BlocksPartial::Layers { .. }))
        {
            let configurations = plan.layers.iter().sum();
            let largest = plan.layers.iter().max().copied().unwrap_or(0);
            return Ok(answer(
                spec,
                configurations,
                plan.layers.len() as u32,
                largest,
            ));
        }
        match partials.as_slice() {
            [
                BlocksPartial::BlocksCount {
                    configurations,
                    layers,
                    largest_layer,
                },
            ] => Ok(answer(spec, *configurations, *layers, *largest_layer)),
            _ => Err(crate::Error::Internal(
                "a blocks job has exactly one blocks partial".into(),
            )),
        }
    }

    fn direct(spec: &BlocksSpec, threads: usize, control: &Control) -> Result<Answer> {
        let puzzle = blocks::parse_puzzle(&spec.puzzle)?;
        let count = blocks::count_reachable(&puzzle, threads, control)?;
        Ok(answer(
            spec,
            count.configurations,
            count.layers,
            count.largest_layer,
        ))
    }
}

fn answer(spec: &BlocksSpec, configurations: u64, layers: u32, largest_layer: u64) -> Answer {
    let puzzle = blocks::parse_puzzle(&spec.puzzle)
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

/// Alters a result the way a faulty machine might (see [`FaultInjection`]).
impl FaultInjection for Blocks {
    fn corrupt_for_testing(partial: &mut BlocksPartial) {
        match partial {
            BlocksPartial::BlocksCount { configurations, .. } => {
                *configurations = configurations.wrapping_add(1)
            }
            BlocksPartial::Layers { sizes, .. } => {
                if let Some(last) = sizes.last_mut() {
                    *last = last.wrapping_add(1)
                }
            }
        }
    }
}

#[cfg(test)]
mod form_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn frontier(buckets: u32) -> BlocksSpec {
        BlocksSpec {
            puzzle: default_puzzle(),
            plan: BlocksPlanName::Frontier,
            buckets,
        }
    }

    fn layers(sizes: &[u64], buckets: u32) -> BlocksPartial {
        BlocksPartial::Layers {
            sizes: sizes.to_vec(),
            buckets,
        }
    }

    /// A layer is split so that each shard fits the least memory a live
    /// worker's slot has: more shards for smaller workers, the default size
    /// for large or silent ones, never below the floor.
    #[test]
    fn the_next_layer_is_split_to_fit_the_smallest_slot() {
        let spec = frontier(0);
        let plan_for = |slot_memory: u64| {
            let mut plan = BlocksPlan {
                layers: vec![1, 4, 9],
                ..BlocksPlan::default()
            };
            let partials = [layers(&[12_000_000], 1)];
            let finished = FinishedStage {
                stage: 4,
                stages_total: 4,
                partials: &partials,
                slots: 2,
                slot_memory,
                stage_bytes: 0,
                stage_room: None,
            };
            // The shards of the next layer write the buckets of the one
            // after it, sized by this layer's size.
            match Blocks::next_stage(&spec, &mut plan, finished).unwrap() {
                NextStage::Shards(shards, _) => match shards[0].task {
                    BlocksTask::BlocksLayer { buckets_out, .. } => u64::from(buckets_out),
                    ref task => panic!("{task:?}"),
                },
                NextStage::Finish => panic!("finished"),
            }
        };
        let default = plan_for(0);
        assert_eq!(default, 12_000_000 / STATES_PER_BUCKET);
        assert_eq!(
            plan_for(64 << 30),
            default,
            "a large slot takes the default"
        );
        let small = 300 << 20;
        let shards = plan_for(small);
        let per_shard = 12_000_000u64.div_ceil(shards);
        assert!(
            per_shard * SHARD_BYTES_PER_STATE <= small,
            "{shards} shards of {per_shard}"
        );
        assert!(shards > default);
        let tiny = plan_for(1 << 20);
        assert_eq!(tiny, 12_000_000 / MIN_STATES_PER_BUCKET, "the floor");
    }

    #[test]
    fn a_layer_of_any_size_is_planned_over_at_most_the_most_shards() {
        let huge = u64::MAX / 4;
        for (buckets, expected) in [(2, 2), (0, MAX_BUCKETS)] {
            let spec = frontier(buckets);
            let mut plan = BlocksPlan {
                layers: vec![1, 4, 9],
                ..BlocksPlan::default()
            };
            let partials = [layers(&[huge], 2), layers(&[huge], 2)];
            let finished = FinishedStage {
                stage: 4,
                stages_total: 4,
                partials: &partials,
                slots: 1,
                slot_memory: 0,
                stage_bytes: 0,
                stage_room: None,
            };
            match Blocks::next_stage(&spec, &mut plan, finished).unwrap() {
                NextStage::Shards(shards, note) => {
                    assert_eq!(shards.len(), 2, "the shards the last stage wrote for");
                    assert_eq!(note, format!("layer 3: {} configurations", 2 * huge));
                    let BlocksTask::BlocksLayer { buckets_out, .. } = shards[0].task else {
                        panic!("{:?}", shards[0].task);
                    };
                    assert_eq!(buckets_out, expected, "buckets {buckets}");
                }
                NextStage::Finish => panic!("finished"),
            }
        }
    }

    #[test]
    fn layers_computed_together_are_recorded_and_an_empty_one_ends_the_search() {
        let spec = frontier(0);
        let mut plan = BlocksPlan {
            layers: vec![1],
            ..BlocksPlan::default()
        };
        let partials = [layers(&[2, 5, 3], 1)];
        let finished = FinishedStage {
            stage: 2,
            stages_total: 2,
            partials: &partials,
            slots: 1,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        match Blocks::next_stage(&spec, &mut plan, finished).unwrap() {
            NextStage::Shards(shards, note) => {
                assert_eq!(note, "layers 1 to 3: 10 configurations");
                assert_eq!(shards.len(), 1);
                assert!(matches!(
                    shards[0].task,
                    BlocksTask::BlocksLayer {
                        layer: 4,
                        alone: true,
                        ..
                    }
                ));
            }
            NextStage::Finish => panic!("finished"),
        }
        assert_eq!(plan.layers, [1, 2, 5, 3]);
        let partials = [layers(&[4, 0], 1)];
        let finished = FinishedStage {
            stage: 3,
            stages_total: 3,
            partials: &partials,
            slots: 1,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        assert_eq!(
            Blocks::next_stage(&spec, &mut plan, finished).unwrap(),
            NextStage::Finish
        );
        assert_eq!(plan.layers, [1, 2, 5, 3, 4]);
        // Shards of one layer that disagree on its shape are refused.
        let partials = [layers(&[4], 2), layers(&[4, 1], 2)];
        let finished = FinishedStage {
            stage: 3,
            stages_total: 3,
            partials: &partials,
            slots: 1,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        assert!(Blocks::next_stage(&spec, &mut plan, finished).is_err());
    }

    #[test]
    fn a_layer_result_must_send_on_the_states_it_counted() {
        let spec = frontier(2);
        let puzzle = blocks::parse_puzzle(&spec.puzzle).unwrap();
        let (states, out) = blocks::expand_bucket(
            &puzzle,
            vec![blocks::start_bucket(&puzzle)],
            2,
            &Control::new(),
        )
        .unwrap();
        let output = encode_buckets(&out.iter().map(LevelBucket::encode).collect::<Vec<_>>());
        let task = BlocksTask::BlocksLayer {
            layer: 0,
            bucket: 0,
            buckets_out: 2,
            alone: false,
            compact: false,
        };
        let plan = BlocksPlan::default();
        let check = |sizes: &[u64], buckets: u32, output: &[u8]| {
            Blocks::check_result(&spec, &plan, &task, &layers(sizes, buckets), output)
        };
        check(&[states], 2, &output).unwrap();
        assert!(
            check(&[states + 1], 2, &output)
                .unwrap_err()
                .to_string()
                .contains("sent on")
        );
        assert!(
            check(&[states, states], 2, &output).is_err(),
            "two layers in a shared stage"
        );
        assert!(
            check(&[states], 3, &output).is_err(),
            "the bucket count it says"
        );
        let three = encode_buckets(&[Vec::new(), Vec::new(), Vec::new()]);
        assert!(
            check(&[0], 2, &three)
                .unwrap_err()
                .to_string()
                .contains("3 buckets")
        );
        // The two buckets swapped: their states are in the wrong buckets.
        let mut swapped = out.clone();
        swapped.swap(0, 1);
        let swapped = encode_buckets(&swapped.iter().map(LevelBucket::encode).collect::<Vec<_>>());
        assert!(
            check(&[states], 2, &swapped)
                .unwrap_err()
                .to_string()
                .contains("not its own")
        );
    }
}
