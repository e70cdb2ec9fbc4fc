//! The points plan with its graph as stage data: stage 1 builds the graph
//! and writes it in its spilled form (see the kernel's `SpilledGraph`) as
//! its output, stage 2 is the point shards, which read it a group at a time
//! from wherever their worker keeps it (a file past a quarter of the shard's
//! memory share). The graph is built once a job instead of once a worker,
//! and a point shard holds its vector and an index of the graph, not the
//! graph.
//!
//! Stage 1 is `graph_parts` shards, each a part of the graph (a run of its
//! groups, `hex::build_graph_part`) that needs a group's memory, not the
//! graph's; the point shards join the parts. A job stored before parts
//! existed (`graph_parts` 0) has one shard that builds the whole graph by
//! search (`HXG1`).

use std::sync::Arc;

use crate::kind::{Outcome, Planned, ShardRun};
use crate::{MemorySpill, Result, Spill, StageOutput, Stored, invalid};
use tally_kernels::hex;

use super::{HexInput, HexPartial, HexSpec, HexTask};

/// The stage of the point shards; the graph is built in the one before.
pub(super) const POINTS_STAGE: u32 = 2;

/// Stage 1: a shard a part of the graph (or one that builds all of it, for
/// a job stored before parts), each counting its work units as it goes (its
/// lease is renewed only while its work grows).
pub(super) fn build_shards(h: &HexSpec) -> Vec<Planned<HexTask>> {
    if h.graph_parts == 0 {
        return vec![Planned {
            task: HexTask::HexGraph { side: h.side },
            work_total: hex::BUILD_WORK,
        }];
    }
    (0..h.graph_parts)
        .map(|part| Planned {
            task: HexTask::HexGraphPart {
                side: h.side,
                part,
                parts: h.graph_parts,
            },
            work_total: hex::BUILD_WORK,
        })
        .collect()
}

/// Builds part `part` of the graph with all of the worker's cores (stopping
/// when the shard is cancelled) into the shard's spill, which hands it on
/// without reading it back.
pub(super) fn build_part(
    h: &HexSpec,
    (side, part, parts): (u32, u32, u32),
    run: &mut ShardRun<'_, HexInput, HexPartial>,
) -> Result<Outcome<HexPartial>> {
    if side != h.side || !h.staged() || parts != h.graph_parts || part >= parts {
        return Err(invalid!("hex graph part shard does not belong to this job"));
    }
    let mut in_memory = MemorySpill::default();
    let spill: &mut dyn Spill = match run.room.as_mut() {
        Some(room) => &mut *room.spill,
        None => &mut in_memory,
    };
    let stored = hex::build_graph_part(side, part, parts, super::all_cores(), run.control, spill)?;
    Ok(Outcome {
        output: StageOutput::Stored(stored),
        partial: HexPartial::None,
        work_done: hex::BUILD_WORK,
    })
}

/// Builds the graph with all of the worker's cores (stopping when the shard
/// is cancelled) and writes its spilled form to the shard's spill, which
/// hands it on without reading it back.
pub(super) fn build_graph(
    h: &HexSpec,
    side: u32,
    run: &mut ShardRun<'_, HexInput, HexPartial>,
) -> Result<Outcome<HexPartial>> {
    if side != h.side || !h.staged() {
        return Err(invalid!("hex graph shard does not belong to this job"));
    }
    let graph = hex::HexGraph::build_controlled(side, super::all_cores(), run.control)?;
    run.control.check()?;
    let mut in_memory = MemorySpill::default();
    let spill: &mut dyn Spill = match run.room.as_mut() {
        Some(room) => &mut *room.spill,
        None => &mut in_memory,
    };
    let spilled = graph.spill(spill)?;
    drop(graph);
    Ok(Outcome {
        output: StageOutput::Stored(spilled.stored()),
        partial: HexPartial::None,
        work_done: hex::BUILD_WORK,
    })
}

/// The graph a point shard reads, opened (its index checked) from the
/// stage's outputs: the parts, in order, or the one graph of a job stored
/// before parts.
pub(super) fn open_graph(h: &HexSpec, stored: Vec<Arc<dyn Stored>>) -> Result<HexInput> {
    let graph = match (h.graph_parts, stored.as_slice()) {
        (0, [graph]) => hex::SpilledGraph::open(graph.clone())?,
        (0, _) => {
            return Err(invalid!(
                "a staged hex graph is one output, got {}",
                stored.len()
            ));
        }
        // The parts, one after another in one output or more; each part
        // says which it is, and all of them must be there.
        _ => hex::SpilledGraph::open_parts(h.side, stored)?,
    };
    if graph.side() != h.side {
        return Err(invalid!(
            "the staged hex graph is of side {}, the job's side is {}",
            graph.side(),
            h.side
        ));
    }
    Ok(HexInput::Graph(graph))
}
