//! Frontier jobs run through their stage data in this process, in the
//! compact form and in the raw form of jobs an older release planned.

use super::{Sliders, SlidersPlanName, SlidersSpec, SlidersTask};
use crate::cache::KernelCache;
use crate::kind::{Answer, JobKind};
use crate::staged_tests::{StageOutputs, as_older_release, run_stages};
use crate::{Control, Result};
use tally_kernels::buckets::split_buckets;
use tally_kernels::sliders::SliderParams;
use tally_kernels::sliders::levels::{self, ForwardBucket};

/// Runs a frontier job stage by stage as the runner does, each shard given
/// what `stage_reads` names and each result checked; `older` stores the
/// plan and every task as an older release did. The answer and every
/// stage's outputs.
fn run_frontier(spec: &SlidersSpec, older: bool) -> Result<(Answer, StageOutputs)> {
    let cache = KernelCache::new();
    let control = Control::new();
    let mut plan = Sliders::prepare(spec, &cache, &control)?;
    assert!(plan.compact, "a new frontier plan writes the compact form");
    if older {
        plan = as_older_release(&plan);
        assert!(!plan.compact);
    }
    let stored = |task: &SlidersTask| match older {
        true => as_older_release(task),
        false => task.clone(),
    };
    run_stages::<Sliders>(spec, plan, stored, |_| {})
}

/// Project Euler 244's boards, every graph level a stage of its own (whose
/// shards send neighbours on).
fn spec(buckets: u32) -> SlidersSpec {
    super::frontier::GROUP_BOARDS.set(0);
    SlidersSpec {
        board: SliderParams::default(),
        plan: SlidersPlanName::Frontier,
        buckets,
        ..SlidersSpec::default()
    }
}

/// What a level bucket holds, read by its tag in either form.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Forward(ForwardBucket),
    Members(Vec<u64>),
    Neighbours(Vec<u64>),
    Graph(Vec<Vec<u64>>),
}

/// Every bucket of every stage's outputs decoded, with the tags of the
/// level buckets and the bytes of the level buckets.
fn read_stages(stages: &[Vec<Vec<u8>>]) -> Result<(Vec<Held>, Vec<u8>, u64)> {
    let (mut held, mut tags, mut bytes) = (Vec::new(), Vec::new(), 0);
    for output in stages.iter().flatten().filter(|o| !o.is_empty()) {
        for bucket in split_buckets(output)? {
            let tag = bucket.first().copied();
            held.push(match tag {
                Some(4) => Held::Graph(levels::decode_graph(bucket)?),
                _ if levels::is_forward_tag(tag) => Held::Forward(ForwardBucket::decode(bucket)?),
                Some(2 | 7) => Held::Members(levels::decode_members(bucket)?),
                _ => Held::Neighbours(levels::decode_neighbours(bucket)?),
            });
            if tag != Some(4) {
                tags.extend(tag);
                bytes += bucket.len() as u64;
            }
        }
    }
    tags.sort_unstable();
    tags.dedup();
    Ok((held, tags, bytes))
}

/// A job planned by an older release (its plan and tasks without the compact
/// form) writes the raw form to the end, which today's readers read; a new
/// job writes the same buckets compact in fewer bytes; both answer what the
/// search alone answers.
#[test]
fn jobs_of_an_older_release_keep_the_raw_form_and_new_jobs_write_the_compact_one() {
    for buckets in [2, 3] {
        let spec = spec(buckets);
        let direct = Sliders::direct(&spec, 1, &Control::new()).unwrap();
        let (new, new_stages) = run_frontier(&spec, false).unwrap();
        let (old, old_stages) = run_frontier(&spec, true).unwrap();
        assert_eq!(new.line, direct.line, "{buckets} buckets");
        assert_eq!(old.line, direct.line, "{buckets} buckets");
        assert_eq!(new.details["sequences"], direct.details["sequences"]);
        let (raw, raw_tags, raw_bytes) = read_stages(&old_stages).unwrap();
        let (compact, compact_tags, compact_bytes) = read_stages(&new_stages).unwrap();
        assert_eq!(raw, compact, "{buckets} buckets");
        assert!(raw.len() > 20, "{} buckets", raw.len());
        // Forward buckets, members, a graph level's neighbours: the raw tags
        // in the old job, the compact ones in the new.
        assert_eq!(raw_tags, [2, 3, 5], "{buckets} buckets");
        assert_eq!(compact_tags, [6, 7, 8], "{buckets} buckets");
        assert!(
            compact_bytes * 10 < raw_bytes * 9,
            "{buckets} buckets: {compact_bytes} bytes compact, {raw_bytes} raw"
        );
    }
}

/// A damaged forward bucket is refused naming the list, when it is read
/// whole and when the next level reads it as a stream.
#[test]
fn a_damaged_compact_level_is_refused_naming_the_list() {
    let spec = spec(2);
    let (_, stages) = run_frontier(&spec, false).unwrap();
    let largest = (stages.iter().flatten())
        .flat_map(|output| split_buckets(output).unwrap_or_default())
        .filter(|b| b.first() == Some(&6))
        .max_by_key(|b| b.len())
        .unwrap()
        .to_vec();
    assert!(largest.len() > 1000, "{} bytes", largest.len());
    let candidates = u64::from_le_bytes(largest[1..9].try_into().unwrap()) as usize;
    let mut damaged = largest.clone();
    damaged[9 + candidates / 2] ^= 0x20;
    let e = ForwardBucket::decode(&damaged).unwrap_err().to_string();
    assert!(
        e.starts_with("forward bucket: its candidates: chunk "),
        "{e}"
    );
    assert!(e.contains("is damaged"), "{e}");
    let e = ForwardBucket::decode(&largest[..largest.len() - 1]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("forward bucket: its previous level: truncated"),
        "{e}"
    );
}
