//! The points plan with its graph as stage data: stage 1 is one shard that
//! builds the graph and writes it in its spilled form (`HXG1`, see the
//! kernel's `SpilledGraph`) as its output; stage 2 is the point shards, which
//! read it a group at a time from wherever their worker keeps it (a file past
//! a quarter of the shard's memory share). The graph is built once a job
//! instead of once a worker, and a point shard holds its vector and an index
//! of the graph, not the graph.

use std::sync::Arc;

use crate::kind::{Outcome, Planned, ResourceEstimate, ShardRun};
use crate::{MemorySpill, Result, Spill, StageOutput, Stored, invalid};
use tally_kernels::hex;

use super::{
    GRAPH_BYTES_PER_STATE, HexInput, HexPartial, HexSpec, HexTask, POINTS_PER_SHARD,
    points_per_shard,
};

/// The stage of the point shards; the graph is built in the one before.
pub(super) const POINTS_STAGE: u32 = 2;

/// The spilled form's size against the graph in memory (it keeps no state
/// orders; measured at side 17: 1,212 MB against 1,691 MB).
const SPILLED_PER_GRAPH: f64 = 0.72;

/// The build's peak above the finished graph (see the kernel's `graph`).
const BUILD_PEAK: f64 = 1.1;

/// Stage 1: one shard that builds the graph.
pub(super) fn build_shards(h: &HexSpec) -> Vec<Planned<HexTask>> {
    vec![Planned {
        task: HexTask::HexGraph { side: h.side },
        work_total: 1,
    }]
}

/// Builds the graph with all of the worker's cores and writes its spilled
/// form to the shard's spill, which hands it on without reading it back.
pub(super) fn build_graph(
    h: &HexSpec,
    side: u32,
    run: &mut ShardRun<'_, HexInput, HexPartial>,
) -> Result<Outcome<HexPartial>> {
    if side != h.side || !h.staged() {
        return Err(invalid!("hex graph shard does not belong to this job"));
    }
    run.control.check()?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let graph = hex::HexGraph::build_parallel(side, threads)?;
    run.control.check()?;
    let mut in_memory = MemorySpill::default();
    let spill: &mut dyn Spill = match run.room.as_mut() {
        Some(room) => &mut *room.spill,
        None => &mut in_memory,
    };
    let spilled = graph.spill(spill)?;
    drop(graph);
    run.control.add_work(1);
    Ok(Outcome {
        output: StageOutput::Stored(spilled.stored()),
        partial: HexPartial::None,
        work_done: 1,
    })
}

/// The graph a point shard reads, opened (its index checked) from the
/// stage's output.
pub(super) fn open_graph(h: &HexSpec, stored: Arc<dyn Stored>) -> Result<HexInput> {
    let graph = hex::SpilledGraph::open(stored)?;
    if graph.side() != h.side {
        return Err(invalid!(
            "the staged hex graph is of side {}, the job's side is {}",
            graph.side(),
            h.side
        ));
    }
    Ok(HexInput::Graph(graph))
}

/// What each stage needs: the build, the graph (once); a point shard, its
/// vector three times (as a shard of the graph in memory: the vector, a
/// checkpoint being sent and the next) and its buffers, over an index of the
/// graph that its worker shares between shards.
pub(super) fn estimate(h: &HexSpec, stage: u32) -> ResourceEstimate {
    let states = hex::estimated_state_count(h.side);
    let graph = states * GRAPH_BYTES_PER_STATE;
    let spilled = (graph as f64 * SPILLED_PER_GRAPH) as u64;
    if stage < POINTS_STAGE {
        return ResourceEstimate {
            subject: format!(
                "hex side {} with the points plan and its graph as stage data (the graph's build)",
                h.side
            ),
            worker_base_bytes: (graph as f64 * BUILD_PEAK) as u64,
            shard_bytes: 0,
            coordinator_memory_bytes: 0,
            traffic_bytes: spilled,
            largest_output_bytes: spilled,
            advice: "build the graph on a worker with that much memory",
        };
    }
    let lanes = (points_per_shard(h).min(POINTS_PER_SHARD) as u64).next_power_of_two();
    let vector = states * lanes * 4;
    // The index: the tiles' starts and the blocks' chunk offsets, a few
    // words an occupancy pattern.
    let index = (16u64 << h.side) + (1 << 20);
    ResourceEstimate {
        subject: format!(
            "hex side {} with the points plan and its graph as stage data",
            h.side
        ),
        worker_base_bytes: index,
        shard_bytes: 3 * vector + (20 << 20),
        coordinator_memory_bytes: vector,
        traffic_bytes: spilled * super::ESTIMATE_WORKERS,
        largest_output_bytes: 0,
        advice: "run it on workers with that much memory (one slot each needs less)",
    }
}
