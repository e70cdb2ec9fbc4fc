//! What a hex job needs (memory per worker and in the coordinator, the data
//! moved), and the job fitted to its workers' memory: where the graph is and
//! how many points a shard evaluates.

use crate::kind::{ResourceEstimate, WorkerRoom};
use tally_kernels::hex;

use super::{HexGraphPlace, HexPlan, HexSpec, POINTS_PER_SHARD, points_per_shard, staged, stride};

/// Measured size of the state graph per frontier state (states, the per-column
/// transition lists and their offsets).
const GRAPH_BYTES_PER_STATE: u64 = 125;
/// Workers assumed when estimating traffic.
const ESTIMATE_WORKERS: u64 = 2;
/// A staged graph's spilled form against the graph in memory (it keeps no
/// state orders; measured at side 17: 1,212 MB against 1,691 MB).
const SPILLED_PER_GRAPH: f64 = 0.72;
/// The build's peak above the finished graph (see the kernel's `graph`).
const BUILD_PEAK: f64 = 1.1;
/// A part of the graph's build: bytes a state of the largest group (its
/// packed state, and for each of a few threads a column's lists).
const PART_BYTES_PER_GROUP_STATE: u64 = 72;

/// The spec fitted to `worker` and a coordinator that takes shard outputs of
/// at most `output_limit` bytes (see
/// [`crate::kind::JobKind::fit_to_budget`]).
pub(super) fn fitted(h: &HexSpec, worker: WorkerRoom, output_limit: Option<u64>) -> HexSpec {
    let budget = worker.budget;
    if h.plan != HexPlan::Points {
        return h.clone();
    }
    // Parts asked for mean the staged graph.
    let asked = match (h.graph, h.graph_parts) {
        (HexGraphPlace::Auto, 1..) => HexGraphPlace::Stage,
        (place, _) => place,
    };
    // The staged graph's parts: those asked for, or one for about 256 MiB
    // of graph; none for a graph in the workers.
    let parts = match h.graph_parts {
        0 => hex::graph_part_count(h.side),
        asked => asked,
    };
    let with = |graph: HexGraphPlace, points: u32| HexSpec {
        graph,
        points_per_shard: points,
        graph_parts: if graph == HexGraphPlace::Stage {
            parts
        } else {
            0
        },
        ..h.clone()
    };
    // What a worker needs for the point shards.
    let shards_need = |spec: &HexSpec| match spec.graph {
        HexGraphPlace::Stage => staged_estimate(spec, staged::POINTS_STAGE),
        _ => estimate(spec),
    };
    // The points a shard with the graph at `graph`: those the spec
    // chose, or the most (a pass of more points costs less a point: 8
    // cost 1.19 times 16 a point at side 15) such that the worker holds
    // a shard in each of its slots, else one point if it holds one shard;
    // none if not even that fits, or the staged graph's build does not,
    // or the coordinator cannot take the graph as a shard's output.
    let staged_build = estimate(&with(HexGraphPlace::Stage, 1));
    let staged_output_fits =
        output_limit.is_none_or(|limit| staged_build.largest_output_bytes <= limit);
    let points_for = |graph: HexGraphPlace| -> Option<u32> {
        let stage = graph == HexGraphPlace::Stage;
        if stage && (staged_build.smallest_worker_bytes() > budget || !staged_output_fits) {
            return None;
        }
        let fits_one = |p: u32| shards_need(&with(graph, p)).smallest_worker_bytes() <= budget;
        if h.points_per_shard != 0 {
            return fits_one(h.points_per_shard).then_some(h.points_per_shard);
        }
        [16, 8, 4, 2]
            .into_iter()
            .find(|&p| {
                shards_need(&with(graph, p)).worker_bytes_with(worker.slots.max(1)) <= budget
            })
            .or_else(|| fits_one(1).then_some(1))
    };
    let graph = match asked {
        // The staged graph where it gives a shard more points (fewer
        // passes over the graph) or where no worker holds the graph;
        // when nothing fits, the place that needs less is the one the
        // refusal gives (the staged graph only if the coordinator can take
        // it).
        HexGraphPlace::Auto => match (
            points_for(HexGraphPlace::Worker),
            points_for(HexGraphPlace::Stage),
        ) {
            (Some(worker), Some(stage)) if stage > worker => HexGraphPlace::Stage,
            (Some(_), _) => HexGraphPlace::Worker,
            (None, Some(_)) => HexGraphPlace::Stage,
            (None, None) => {
                let least = |graph| estimate(&with(graph, 1)).smallest_worker_bytes();
                match staged_output_fits
                    && least(HexGraphPlace::Stage) < least(HexGraphPlace::Worker)
                {
                    true => HexGraphPlace::Stage,
                    false => HexGraphPlace::Worker,
                }
            }
        },
        chosen => chosen,
    };
    let points = match h.points_per_shard {
        0 => points_for(graph).unwrap_or(1),
        chosen => chosen,
    };
    with(graph, points)
}

/// What a job needs, by plan: memory per worker and in the coordinator, and the
/// data moved between them.
pub fn estimate(h: &HexSpec) -> ResourceEstimate {
    if h.staged() {
        // The stage that needs the most: the whole graph's build (a job
        // stored before parts), else the point shards.
        let (build, points) = (
            staged_estimate(h, 1),
            staged_estimate(h, staged::POINTS_STAGE),
        );
        let largest_output_bytes = build.largest_output_bytes;
        let most = match build.smallest_worker_bytes() > points.smallest_worker_bytes() {
            true => build,
            false => points,
        };
        return ResourceEstimate {
            largest_output_bytes,
            ..most
        };
    }
    let side = h.side as u64;
    let states = hex::estimated_state_count(h.side);
    let steps = side * side.saturating_sub(1);
    let graph = states * GRAPH_BYTES_PER_STATE;
    let vector = states * stride(h.side) * 4;
    let (base, shard, coordinator, traffic) = match h.plan {
        // Input, output and the decoded copy; the coordinator keeps the previous
        // stage and assembles the current one (about half of each is zero runs).
        HexPlan::CellStep => (
            graph + 3 * vector,
            0,
            vector,
            steps * vector / 2 * (ESTIMATE_WORKERS + 1),
        ),
        // The graph, shared; each shard an in-place vector of one lane per
        // point (a power of two), whose checkpoints go to the worker's spill
        // from the vector itself, and the pass's group buffers. The
        // coordinator holds a checkpoint as it arrives.
        HexPlan::Points => {
            let vector = pass_vector_bytes(h);
            (graph, vector + pass_buffer_bytes(vector), vector, 1 << 20)
        }
    };
    ResourceEstimate {
        subject: format!("hex side {} with the {} plan", h.side, h.plan.name()),
        worker_base_bytes: base,
        shard_bytes: shard,
        coordinator_memory_bytes: coordinator,
        traffic_bytes: traffic,
        largest_output_bytes: 0,
        advice: match h.plan {
            HexPlan::CellStep => "use the points plan",
            // The graph alone grows past a worker at side 19; one slot a
            // worker saves a pass vector.
            HexPlan::Points => "run it on workers with that much memory (one slot each needs less)",
        },
    }
}

/// What each stage needs: the build, the graph (once); a point shard, its
/// vector and its buffers (as a shard of the graph in memory), over an index
/// of the graph that its worker shares between shards.
pub(super) fn staged_estimate(h: &HexSpec, stage: u32) -> ResourceEstimate {
    let states = hex::estimated_state_count(h.side);
    let graph = states * GRAPH_BYTES_PER_STATE;
    let spilled = (graph as f64 * SPILLED_PER_GRAPH) as u64;
    // The layout every part's shard and every point shard's worker
    // computes: the tiles' starts and the blocks' chunk offsets, a few words
    // an occupancy pattern.
    let index = (16u64 << h.side) + (1 << 20);
    if stage < staged::POINTS_STAGE && h.graph_parts != 0 {
        // A group's states and, for each thread, a column's lists: about 70
        // bytes a state of the largest group (3% of the states), with a few
        // threads.
        let group = states * 3 / 100;
        return ResourceEstimate {
            subject: format!(
                "hex side {} with the points plan and its graph as stage data (a part of the graph's build)",
                h.side
            ),
            worker_base_bytes: index,
            shard_bytes: group * PART_BYTES_PER_GROUP_STATE,
            coordinator_memory_bytes: 0,
            traffic_bytes: spilled,
            largest_output_bytes: spilled.div_ceil(u64::from(h.graph_parts)),
            advice: "build the graph in more parts (--graph-parts)",
        };
    }
    if stage < staged::POINTS_STAGE {
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
    let vector = pass_vector_bytes(h);
    ResourceEstimate {
        subject: format!(
            "hex side {} with the points plan and its graph as stage data",
            h.side
        ),
        worker_base_bytes: index,
        shard_bytes: vector + pass_buffer_bytes(vector),
        coordinator_memory_bytes: vector,
        traffic_bytes: spilled * ESTIMATE_WORKERS,
        largest_output_bytes: 0,
        advice: "run it on workers with that much memory (one slot each needs less)",
    }
}

/// Bytes of a points shard's pass vector: one residue a state and lane (the
/// points rounded up to a power of two).
fn pass_vector_bytes(h: &HexSpec) -> u64 {
    let lanes = (points_per_shard(h).min(POINTS_PER_SHARD) as u64).next_power_of_two();
    hex::estimated_state_count(h.side) * lanes * 4
}

/// Bytes of a pass's two group buffers besides its `vector` bytes: each
/// holds the largest group of a block, about 3% of the states from side 12
/// to 16 (the groups grow with the states), so a sixteenth of the vector,
/// and a little for the checkpoints' pieces.
fn pass_buffer_bytes(vector: u64) -> u64 {
    vector / 16 + (4 << 20)
}
