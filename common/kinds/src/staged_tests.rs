//! Test support: a multi-stage job run in this process the way the runner
//! runs it, stage by stage, each shard handed the buckets its `stage_reads`
//! name and each result checked before the next stage is planned.

use crate::cache::KernelCache;
use crate::kind::{Answer, FinishedStage, JobKind, NO_CHECKPOINT, NextStage, ShardRun};
use crate::{Control, Result};
use tally_kernels::buckets::gather_bucket;

/// A plan or task as an older release stored it: without its `compact`
/// field (the form of stage data it did not know).
pub(crate) fn as_older_release<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    let mut json = serde_json::to_value(value).unwrap();
    if let Some(object) = json.as_object_mut() {
        object.remove("compact");
    }
    serde_json::from_value(json).unwrap()
}

/// Every stage's outputs, in shard order.
pub(crate) type StageOutputs = Vec<Vec<Vec<u8>>>;

/// Runs `plan` to its answer. `stored` gives each task as the shard gets it
/// (say, as an older release stored it); `seen` is shown each task first.
/// Every stage an input reads must be the one before or one the plan keeps.
/// The answer and every stage's outputs.
pub(crate) fn run_stages<K: JobKind>(
    spec: &K::Spec,
    plan: K::Plan,
    stored: impl Fn(&K::Task) -> K::Task,
    seen: impl FnMut(&K::Task),
) -> Result<(Answer, StageOutputs)> {
    run_stages_in::<K>(&KernelCache::new(), spec, plan, stored, seen)
}

/// [`run_stages`] with the shards' kernel cache (say, one holding a
/// sandbox and a module).
pub(crate) fn run_stages_in<K: JobKind>(
    cache: &KernelCache,
    spec: &K::Spec,
    mut plan: K::Plan,
    stored: impl Fn(&K::Task) -> K::Task,
    mut seen: impl FnMut(&K::Task),
) -> Result<(Answer, StageOutputs)> {
    let control = Control::new();
    let mut shards = K::plan_stage(spec, &plan, 1)?;
    let mut stages: StageOutputs = Vec::new();
    for stage in 1.. {
        let kept = K::kept_stages(spec, &plan, stage);
        let mut partials = Vec::new();
        let mut outputs = Vec::new();
        for shard in &shards {
            let task = stored(&shard.task);
            seen(&task);
            let mut parts = Vec::new();
            for read in K::stage_reads(spec, stage, &task) {
                assert!(
                    read.stage + 1 == stage || kept.contains(&read.stage),
                    "stage {stage} reads {read:?}, not kept"
                );
                let previous: Vec<&[u8]> = stages[read.stage as usize - 1]
                    .iter()
                    .map(Vec::as_slice)
                    .collect();
                parts.push(gather_bucket(&previous, read.bucket.expect("bucketed"))?);
            }
            let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let input = match slices.is_empty() {
                true => None,
                false => Some(K::decode_stage_inputs(spec, &slices)?),
            };
            let mut on_checkpoint = |_| {};
            let mut run = ShardRun {
                input: input.as_ref(),
                checkpoint: &NO_CHECKPOINT,
                cache,
                control: &control,
                checkpoint_every: std::time::Duration::from_secs(3600),
                on_checkpoint: &mut on_checkpoint,
                room: None,
            };
            let outcome = K::execute(spec, &task, &mut run)?;
            let output = outcome.output.into_bytes()?;
            K::check_result(spec, &plan, &task, &outcome.partial, &output)?;
            partials.push(outcome.partial);
            outputs.push(output);
        }
        stages.push(outputs);
        let finished = FinishedStage {
            stage,
            stages_total: stage,
            partials: &partials,
            slots: 3,
            slot_memory: 0,
            stage_bytes: 0,
            stage_room: None,
        };
        match K::next_stage(spec, &mut plan, finished)? {
            NextStage::Shards(next, _) => shards = next,
            NextStage::Finish => return Ok((K::finish(spec, &plan, partials)?, stages)),
        }
    }
    unreachable!("the stages end")
}
