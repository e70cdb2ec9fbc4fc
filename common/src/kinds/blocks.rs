//! `blocks`: the configurations a sliding-block puzzle reaches (exact). One
//! shard: the breadth-first search runs on one worker.

use serde::{Deserialize, Serialize};

use crate::cache::KernelCache;
use crate::kind::{Answer, FileReader, JobKind, Outcome, Planned, ShardRun, SpecOf, no_output};
use crate::{Control, Result, blocks, invalid, proto};

pub struct Blocks;

/// Longest accepted puzzle text.
pub const MAX_PUZZLE_BYTES: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlocksSpec {
    /// The puzzle in the text format of `blocks` (the file's contents).
    #[serde(default = "default_puzzle")]
    pub puzzle: String,
}

fn default_puzzle() -> String {
    blocks::PE766.to_string()
}

impl SpecOf for BlocksSpec {
    type Kind = Blocks;
}

#[derive(clap::Args, Debug)]
pub struct BlocksArgs {
    /// Puzzle file (format in the README). Default: the Project Euler 766 puzzle.
    #[arg(long, value_name = "FILE")]
    pub puzzle: Option<std::path::PathBuf>,
}

/// Nothing is known before the search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlocksPlan {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum BlocksTask {
    /// The whole breadth-first search.
    BlocksSearch,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlocksPartial {
    BlocksCount {
        configurations: u64,
        layers: u32,
        largest_layer: u64,
    },
}

impl JobKind for Blocks {
    type Spec = BlocksSpec;
    type Args = BlocksArgs;
    type Plan = BlocksPlan;
    type Task = BlocksTask;
    type Partial = BlocksPartial;
    type StageInput = ();

    const NAME: &'static str = "blocks";
    const ABOUT: &'static str = "Configurations a sliding-block puzzle reaches (exact).";
    const EXAMPLES: &'static str = "  tally run blocks                      # Project Euler 766\n  tally run blocks --puzzle my.blocks";

    fn spec_from_args(args: BlocksArgs, files: &dyn FileReader) -> Result<BlocksSpec> {
        Ok(BlocksSpec {
            puzzle: match &args.puzzle {
                None => default_puzzle(),
                Some(path) => files.read_to_string(path)?,
            },
        })
    }

    fn spec_to_proto(spec: &BlocksSpec) -> proto::job_spec::Kind {
        proto::job_spec::Kind::Blocks(proto::BlocksSpec {
            puzzle: spec.puzzle.clone(),
        })
    }

    fn spec_from_proto(kind: &proto::job_spec::Kind) -> Option<Result<BlocksSpec>> {
        let proto::job_spec::Kind::Blocks(b) = kind else {
            return None;
        };
        Some(Ok(BlocksSpec {
            puzzle: if b.puzzle.is_empty() {
                default_puzzle()
            } else {
                b.puzzle.clone()
            },
        }))
    }

    fn validate(spec: &BlocksSpec) -> Result<()> {
        if spec.puzzle.len() > MAX_PUZZLE_BYTES {
            return Err(invalid!(
                "the puzzle is longer than {MAX_PUZZLE_BYTES} bytes"
            ));
        }
        blocks::parse_puzzle(&spec.puzzle).map(|_| ())
    }

    fn describe(spec: &BlocksSpec) -> String {
        match blocks::parse_puzzle(&spec.puzzle) {
            Ok(puzzle) => format!("blocks {}", puzzle.describe()),
            Err(_) => "blocks (invalid puzzle)".into(),
        }
    }

    fn prepare(_spec: &BlocksSpec, _cache: &KernelCache, _control: &Control) -> Result<BlocksPlan> {
        Ok(BlocksPlan {})
    }

    fn plan_stage(
        _spec: &BlocksSpec,
        _plan: &BlocksPlan,
        _stage: u32,
    ) -> Result<Vec<Planned<BlocksTask>>> {
        Ok(vec![Planned {
            task: BlocksTask::BlocksSearch,
            // Configurations are not known in advance: progress counts the shard.
            work_total: 1,
        }])
    }

    fn execute(
        spec: &BlocksSpec,
        task: &BlocksTask,
        run: &mut ShardRun<'_, (), BlocksPartial>,
    ) -> Result<Outcome<BlocksPartial>> {
        let BlocksTask::BlocksSearch = task;
        let puzzle = blocks::parse_puzzle(&spec.puzzle)?;
        // The search's own units would exceed work_total: count on a private
        // counter, sharing only the cancellation flag.
        let inner = run.control.with_own_counter();
        let count = blocks::count_reachable(&puzzle, 1, &inner)?;
        run.control.add_work(1);
        Ok(Outcome {
            output: Vec::new(),
            partial: BlocksPartial::BlocksCount {
                configurations: count.configurations,
                layers: count.layers,
                largest_layer: count.largest_layer,
            },
            work_done: 1,
        })
    }

    fn check_result(
        _spec: &BlocksSpec,
        _plan: &BlocksPlan,
        _task: &BlocksTask,
        _partial: &BlocksPartial,
        output: &[u8],
    ) -> Result<()> {
        no_output(output)
    }

    fn finish(
        spec: &BlocksSpec,
        _plan: &BlocksPlan,
        partials: Vec<BlocksPartial>,
    ) -> Result<Answer> {
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

    fn corrupt_for_testing(partial: &mut BlocksPartial) {
        let BlocksPartial::BlocksCount { configurations, .. } = partial;
        *configurations = configurations.wrapping_add(1);
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
