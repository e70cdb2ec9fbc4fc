//! Runs a single-stage job's shards in this process over a few threads, with
//! no runner: for the direct computations of kinds that have no single-sweep
//! driver of their own.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cache::KernelCache;
use crate::kind::{Answer, CHECKPOINT_EVERY, JobKind, ShardRun};
use crate::{Control, Error, Result};

pub fn run_locally<K: JobKind>(
    spec: &K::Spec,
    threads: usize,
    control: &Control,
) -> Result<Answer> {
    let cache = KernelCache::new();
    let plan = K::prepare(spec, &cache, control)?;
    if K::stages(spec, &plan) != 1 {
        return Err(Error::Internal(
            "only single-stage plans run locally".into(),
        ));
    }
    let shards = K::plan_stage(spec, &plan, 1)?;
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<K::Partial>>> = Mutex::new(vec![None; shards.len()]);
    let run_shards = || -> Result<()> {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(shard) = shards.get(i) else {
                return Ok(());
            };
            let mut run = ShardRun {
                input: None,
                checkpoint: &crate::kind::NO_CHECKPOINT,
                cache: &cache,
                control,
                checkpoint_every: CHECKPOINT_EVERY,
                on_checkpoint: &mut |_| {},
                room: None,
            };
            let outcome = K::execute(spec, &shard.task, &mut run)?;
            results.lock()[i] = Some(outcome.partial);
        }
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, shards.len().max(1)))
            .map(|_| scope.spawn(run_shards))
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::Internal("a shard thread panicked".into())))
        })
    })?;
    let partials = results
        .into_inner()
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::Internal("a shard produced no result".into()))?;
    K::finish(spec, &plan, partials)
}
