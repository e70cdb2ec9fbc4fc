//! Frontier jobs run through their stage data in this process, in the
//! compact form and in the raw form of jobs an older release planned.

use super::{Blocks, BlocksPlanName, BlocksSpec, BlocksTask, LISTS};
use crate::cache::KernelCache;
use crate::kind::{Answer, JobKind};
use crate::staged_tests::{StageOutputs, as_older_release, run_stages};
use crate::{Control, Result};
use tally_kernels::blocks::{LevelBucket, decode_states_as};
use tally_kernels::buckets::split_buckets;
use tally_kernels::compact::ListForm;

/// Runs a frontier job stage by stage as the runner does, each shard given
/// its bucket of the previous stage's outputs and each result checked;
/// `older` stores the plan and every task as an older release did. The
/// answer and every stage's outputs.
fn run_frontier(spec: &BlocksSpec, older: bool) -> Result<(Answer, StageOutputs)> {
    let cache = KernelCache::new();
    let control = Control::new();
    let mut plan = Blocks::prepare(spec, &cache, &control)?;
    assert!(plan.compact, "a new frontier plan writes the compact form");
    if older {
        plan = as_older_release(&plan);
        assert!(!plan.compact);
    }
    let stored = |task: &BlocksTask| match older {
        true => as_older_release(task),
        false => task.clone(),
    };
    run_stages::<Blocks>(spec, plan, stored, |_| {})
}

/// Klotski, its like pieces interchangeable.
const KLOTSKI: &str = "aXXb\naXXb\ncdde\nc12e\n3..4\nsame: abce\nsame: 1234\n";

fn spec(buckets: u32) -> BlocksSpec {
    BlocksSpec {
        puzzle: KLOTSKI.into(),
        plan: BlocksPlanName::Frontier,
        buckets,
    }
}

/// Every bucket of every stage's outputs decoded in `form`: each stage's
/// three lists' states, sorted, and the bytes.
fn read_stages(stages: &[Vec<Vec<u8>>], form: ListForm) -> Result<(Vec<[Vec<u128>; 3]>, u64)> {
    let mut bytes = 0;
    let mut lists = Vec::new();
    for outputs in stages {
        let mut stage: [Vec<u128>; 3] = Default::default();
        for output in outputs {
            for bucket in split_buckets(output)? {
                bytes += bucket.len() as u64;
                let decoded = LevelBucket::decode_as(bucket, form, "test")?;
                stage[0].extend(decoded.candidates);
                stage[1].extend(decoded.current);
                stage[2].extend(decoded.previous);
            }
        }
        stage.iter_mut().for_each(|list| list.sort_unstable());
        lists.push(stage);
    }
    Ok((lists, bytes))
}

/// A job planned by an older release (its plan and tasks without the compact
/// form) writes and reads the raw form to the end, which today's reader of
/// that form reads; a new job writes the same states in fewer bytes; both
/// answer what the search alone answers.
#[test]
fn jobs_of_an_older_release_keep_the_raw_form_and_new_jobs_write_the_compact_one() {
    for buckets in [2, 3] {
        let spec = spec(buckets);
        let direct = Blocks::direct(&spec, 1, &Control::new()).unwrap();
        let (new, new_stages) = run_frontier(&spec, false).unwrap();
        let (old, old_stages) = run_frontier(&spec, true).unwrap();
        assert_eq!(new.line, direct.line, "{buckets} buckets");
        assert_eq!(old.line, direct.line, "{buckets} buckets");
        assert_eq!(new.details, direct.details);
        let (raw, raw_bytes) = read_stages(&old_stages, ListForm::Raw).unwrap();
        let (compact, compact_bytes) = read_stages(&new_stages, ListForm::Compact).unwrap();
        assert_eq!(raw, compact, "{buckets} buckets");
        let states: usize = raw.iter().flatten().map(Vec::len).sum();
        assert!(states > 10_000, "{buckets} buckets: {states} states");
        assert!(
            compact_bytes < raw_bytes,
            "{buckets} buckets: {compact_bytes} bytes compact, {raw_bytes} raw"
        );
        // Neither form reads as the other.
        assert!(read_stages(&old_stages, ListForm::Compact).is_err());
        assert!(read_stages(&new_stages, ListForm::Raw).is_err());
    }
}

/// A damaged layer is refused as the check of a shard's result reads it
/// and as the next layer's shards read it, naming the list.
#[test]
fn a_damaged_compact_layer_is_refused_naming_the_list() {
    let spec = spec(2);
    let (_, stages) = run_frontier(&spec, false).unwrap();
    let (stage, shard) = (stages.iter().enumerate())
        .flat_map(|(s, outputs)| (0..outputs.len()).map(move |i| (s, i)))
        .max_by_key(|&(s, i)| stages[s][i].len())
        .unwrap();
    let output = &stages[stage][shard];
    let buckets = split_buckets(output).unwrap();
    let largest = buckets.iter().max_by_key(|b| b.len()).unwrap();
    assert!(largest.len() > 1000, "{} bytes", largest.len());
    // A byte in the middle of the bucket's candidates (its first list).
    let candidates = u64::from_le_bytes(largest[..8].try_into().unwrap()) as usize;
    let at = largest.as_ptr() as usize - output.as_ptr() as usize + 8 + candidates / 2;
    let mut damaged = output.clone();
    damaged[at] ^= 0x10;
    let mut refused = 0;
    for (index, bucket) in split_buckets(&damaged).unwrap().into_iter().enumerate() {
        let label = format!("layer {stage} bucket {index}");
        if let Err(e) = LevelBucket::decode_as(bucket, ListForm::Compact, &label) {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("{label}: its candidates: chunk ")),
                "{e}"
            );
            assert!(e.contains("is damaged"), "{e}");
            refused += 1;
        }
    }
    assert_eq!(refused, 1, "one bucket is damaged");
    // The list alone, as a shard that holds its input in memory reads it.
    let list = &largest[8..8 + candidates];
    let mut cut = list.to_vec();
    cut.truncate(list.len() - 3);
    let e = decode_states_as(ListForm::Compact, &cut, LISTS[0]).unwrap_err();
    assert!(e.to_string().starts_with("candidates: truncated"), "{e}");
}
