//! What a `sliders` job keeps and its shards exchange: the plan (in the job
//! record), each shard's task, and the partial result each shard reports.

use serde::{Deserialize, Serialize};

use tally_kernels::sliders;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlidersPlan {
    /// The prefix tasks; copied into the shards, then dropped from the record.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// The weight of each prefix (the number of shortest sequences extending
    /// it), by which the prefixes are grouped into shards; decimal, for u128.
    #[serde(default)]
    pub prefix_weights: Vec<String>,
    #[serde(default)]
    pub shortest_length: u32,
    /// Boards reachable (prefixes plan), or found up to the target's level
    /// (frontier plan).
    #[serde(default)]
    pub boards: u64,
    /// Frontier plan: the size of each level found so far.
    #[serde(default)]
    pub levels: Vec<u64>,
    /// Frontier plan: the shards of each level (`buckets[k]` for level `k`),
    /// one level ahead of the levels found.
    #[serde(default)]
    pub buckets: Vec<u32>,
    /// Frontier plan: the target's level once found (`D`).
    #[serde(default)]
    pub target_level: Option<u32>,
    /// Frontier plan: the number of shortest sequences counted by the forward
    /// search (decimal, for u128).
    #[serde(default)]
    pub sequences: String,
    /// Frontier plan: the levels of the shortest-path graph found so far, as
    /// dense board indices, until the graph stage takes them.
    #[serde(default)]
    pub graph: Vec<Vec<u64>>,
    /// Frontier plan: the highest graph level of each backward stage so far
    /// (a stage takes one level, or several small ones); empty in plans
    /// made before stages took several, whose stage `D + 1 + i` is graph
    /// level `D - i`.
    #[serde(default)]
    pub backward_tops: Vec<u32>,
    /// Frontier plan: its levels' buckets are in the compact form
    /// (`sliders::forms`); plans made before it was write the raw form to
    /// the end (a bucket's tag says its form to its readers).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compact: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SlidersTask {
    /// A batch of prefixes, enumerated one after the other. `weighted`: the
    /// work units are shortest sequences (the shard's `work_total` is the sum of
    /// the prefixes' weights); false in shards planned before weights existed,
    /// whose units are prefixes.
    SliderPrefixes {
        prefixes: Vec<String>,
        #[serde(default)]
        weighted: bool,
        /// Frontier plan: the graph is read from the previous stage's output
        /// instead of searched for.
        #[serde(default)]
        graph: bool,
    },
    /// Frontier plan: bucket `bucket` of the `buckets` of forward level
    /// `level`, written for the `buckets_out` shards of the next.
    SliderLevel {
        level: u32,
        bucket: u32,
        buckets: u32,
        buckets_out: u32,
        /// Its output in the compact form; jobs planned before it was, raw.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
    /// Frontier plan: bucket `bucket` of the `buckets` of level `level` of the
    /// shortest-path graph, whose neighbours go to the `buckets_out` shards of
    /// the level before; the target is at distance `shortest`.
    SliderGraphLevel {
        level: u32,
        bucket: u32,
        buckets: u32,
        buckets_out: u32,
        shortest: u32,
        /// Its output in the compact form; jobs planned before it was, raw.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
    /// Frontier plan: graph levels `top` down to `bottom` in one shard, which
    /// reads every bucket of each level's members (`member_buckets[i]`
    /// buckets for level `top - i`) and every one of the `neighbour_buckets`
    /// buckets the stage before sent (none next to the target): small levels,
    /// where a stage each would cost more than their work. The last level's
    /// neighbours go to the `buckets_out` shards of the level below it.
    SliderGraphLevels {
        top: u32,
        bottom: u32,
        member_buckets: Vec<u32>,
        neighbour_buckets: u32,
        buckets_out: u32,
        shortest: u32,
        /// Its output in the compact form; jobs planned before it was, raw.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        compact: bool,
    },
    /// Frontier plan: the graph's levels (dense board indices), to become
    /// stage data and prefix tasks.
    SliderGraph { layers: Vec<Vec<u64>> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlidersPartial {
    /// Exact sums over the prefixes enumerated so far.
    SliderSums {
        prefixes_done: u32,
        sums: sliders::PathSums,
    },
    /// A forward level's boards in one bucket, and the number of shortest
    /// sequences (decimal) if the target is among them.
    SliderLevel {
        level: u32,
        boards: u64,
        #[serde(default)]
        target_paths: Option<String>,
    },
    /// A graph level's boards in one bucket (dense indices).
    SliderGraphLevel { level: u32, boards: Vec<u64> },
    /// Several graph levels' boards (dense indices), level `top` first.
    SliderGraphLevels { top: u32, levels: Vec<Vec<u64>> },
    /// The prefix tasks over the graph, with their weights, and the number of
    /// shortest sequences (decimal).
    SliderGraph {
        prefixes: Vec<String>,
        weights: Vec<String>,
        sequences: String,
    },
}
