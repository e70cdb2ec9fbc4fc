//! Tests of the sliders kind: shard plans balanced by weight, shards that
//! resume from checkpoints, plans stored before weights existed, the plan
//! options checked.

use tally_kernels::Control;
use tally_kernels::balance::group_by_weight;
use tally_kernels::sliders::{DEFAULT_START, DEFAULT_TARGET, SliderParams, SliderSpace};
use tally_kernels::test_rng::Rng;

/// Boards with thousands of shortest sequences (as in the kernel's tests).
const WEIGHTED: &[(u32, u32, &str, &str)] = &[
    (
        5,
        5,
        "WRRRB/RRRRR/RRRRR/RRRRR/BRRRB",
        "BRRRB/RRRRR/RRRRR/RRRRR/BRRRW",
    ),
    (4, 4, "WRRRRRRGRRRRRRRB", "BRRRRRRGRRRRRRRW"),
    (4, 4, DEFAULT_START, DEFAULT_TARGET),
];

fn space(params: &SliderParams) -> SliderSpace {
    SliderSpace::build(params, &Control::new()).expect("build")
}

use super::{Sliders, SlidersPartial, SlidersPlan, SlidersSpec, SlidersTask};
use crate::cache::KernelCache;
use crate::kind::{CHECKPOINT_EVERY, Checkpoint, JobKind, Planned, ShardRun};

fn sliders_spec(rows: u32, cols: u32, start: &str, target: &str, prefixes: u32) -> SlidersSpec {
    SlidersSpec {
        board: SliderParams::new(rows, cols, start, target),
        prefixes,
        plan: super::SlidersPlanName::Prefixes,
        buckets: 0,
    }
}

fn weights_of(plan: &SlidersPlan) -> Vec<u128> {
    plan.prefix_weights
        .iter()
        .map(|w| w.parse().unwrap())
        .collect()
}

fn shard_prefixes(shard: &Planned<SlidersTask>) -> &[String] {
    let SlidersTask::SliderPrefixes {
        prefixes, weighted, ..
    } = &shard.task
    else {
        panic!("not a prefix task: {:?}", shard.task);
    };
    assert!(weighted);
    prefixes
}

/// Runs one shard in this thread, collecting its checkpoints.
fn run_shard(
    spec: &SlidersSpec,
    task: &SlidersTask,
    checkpoint: &[u8],
    control: &Control,
    checkpoint_every: std::time::Duration,
    on_checkpoint: &mut dyn FnMut(Checkpoint<SlidersPartial>),
) -> crate::kind::Outcome<SlidersPartial> {
    let cache = KernelCache::new();
    let mut run = ShardRun {
        input: None,
        checkpoint: &checkpoint.to_vec(),
        cache: &cache,
        control,
        checkpoint_every,
        on_checkpoint,
        room: None,
    };
    Sliders::execute(spec, task, &mut run).unwrap()
}

#[test]
fn shards_have_equal_weights_summing_to_the_path_count() {
    for &(rows, cols, start, target) in WEIGHTED {
        let s = space(&SliderParams::new(rows, cols, start, target));
        let total = s.path_count();
        for parts in [2u32, 8, 16, 64] {
            let spec = sliders_spec(rows, cols, start, target, parts);
            let plan = Sliders::prepare(&spec, &KernelCache::new(), &Control::new()).unwrap();
            assert_eq!(plan.prefixes.len(), plan.prefix_weights.len());
            let shards = Sliders::plan_stage(&spec, &plan, 1).unwrap();
            assert_eq!(
                shards,
                Sliders::plan_stage(&spec, &plan, 1).unwrap(),
                "deterministic"
            );
            assert_eq!(shards.len(), (parts as usize).min(plan.prefixes.len()));
            let mut seen: Vec<String> = Vec::new();
            let mut loads = Vec::new();
            for shard in &shards {
                let prefixes = shard_prefixes(shard);
                assert!(prefixes.windows(2).all(|w| w[0] < w[1]), "sorted");
                let weight: u128 = prefixes.iter().map(|p| s.prefix_weight(p).unwrap()).sum();
                assert_eq!(u128::from(shard.work_total), weight);
                loads.push(weight);
                seen.extend(prefixes.iter().cloned());
            }
            seen.sort();
            assert_eq!(seen, plan.prefixes, "every prefix in exactly one shard");
            assert_eq!(loads.iter().sum::<u128>(), total);
            // The greedy rule keeps every two shards within one prefix of each
            // other; with the heaviest prefix below 1/(4 * shards) of the total,
            // the heaviest shard is within 5/4 of the mean.
            let heaviest = weights_of(&plan).into_iter().max().unwrap();
            let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
            assert!(max - min <= heaviest, "{start}/{parts}: {loads:?}");
            if heaviest * 4 * u128::from(parts) <= total {
                let n = loads.len() as u128;
                assert!(
                    4 * max * n <= 5 * total + 4 * n,
                    "{start}/{parts}: {loads:?}"
                );
                assert!(
                    4 * min * n + 4 * n >= 3 * total,
                    "{start}/{parts}: {loads:?}"
                );
            }
        }
    }
}

#[test]
fn grouping_by_weight_is_greedy_and_deterministic() {
    assert!(group_by_weight(&[], 4).is_empty());
    assert_eq!(group_by_weight(&[7], 4), vec![vec![0]]);
    assert_eq!(group_by_weight(&[1, 2, 3], 0), vec![vec![0, 1, 2]]);
    // Decreasing weights, each to the lightest group (lower group on ties):
    // 9 -> g0, 5 (index 1) -> g1, 5 (index 5) -> g2, 4 -> g1 (tie at 5),
    // 3 -> g2 (5 < 9), 1 -> g2 (8 < 9).
    let groups = group_by_weight(&[3, 5, 9, 1, 4, 5], 3);
    assert_eq!(groups, vec![vec![2], vec![1, 4], vec![0, 3, 5]]);
    let mut rng = Rng(5);
    for _ in 0..200 {
        let n = 1 + rng.below(60);
        let weights: Vec<u128> = (0..n).map(|_| 1 + rng.below(1000) as u128).collect();
        let parts = 1 + rng.below(12);
        let groups = group_by_weight(&weights, parts);
        assert_eq!(groups, group_by_weight(&weights, parts));
        assert_eq!(groups.len(), parts.min(n));
        let mut all: Vec<usize> = groups.concat();
        all.sort();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        let loads: Vec<u128> = groups
            .iter()
            .map(|g| g.iter().map(|&i| weights[i]).sum())
            .collect();
        let heaviest = *weights.iter().max().unwrap();
        let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
        assert!(max - min <= heaviest, "{weights:?} / {parts}: {loads:?}");
    }
}

#[test]
fn a_shard_counts_sequences_and_resumes_from_a_checkpoint() {
    let (rows, cols, start, target) = WEIGHTED[0];
    let spec = sliders_spec(rows, cols, start, target, 2);
    let plan = Sliders::prepare(&spec, &KernelCache::new(), &Control::new()).unwrap();
    let shards = Sliders::plan_stage(&spec, &plan, 1).unwrap();
    let shard = &shards[0];
    assert!(shard_prefixes(shard).len() >= 3);
    // A checkpoint after every prefix.
    let control = Control::new();
    let mut checkpoints = Vec::new();
    let whole = run_shard(
        &spec,
        &shard.task,
        &[],
        &control,
        std::time::Duration::ZERO,
        &mut |c| checkpoints.push((c.state.into_bytes().unwrap(), c.work_done)),
    );
    assert_eq!(whole.work_done, shard.work_total);
    assert_eq!(
        control.work_done(),
        shard.work_total,
        "the searches are not counted"
    );
    assert_eq!(checkpoints.len(), shard_prefixes(shard).len() - 1);
    assert!(checkpoints.windows(2).all(|w| w[0].1 < w[1].1));
    let (state, at) = checkpoints[checkpoints.len() / 2].clone();
    let resumed_control = Control::new();
    let resumed = run_shard(
        &spec,
        &shard.task,
        &state,
        &resumed_control,
        CHECKPOINT_EVERY,
        &mut |_| {},
    );
    assert!(at < shard.work_total);
    assert_eq!(
        resumed_control.work_done(),
        shard.work_total,
        "continues from {at}"
    );
    assert_eq!(resumed.work_done, shard.work_total);
    assert_eq!(resumed.partial, whole.partial);
    let SlidersPartial::SliderSums { sums, .. } = whole.partial else {
        panic!("not sums: {:?}", whole.partial);
    };
    assert_eq!(u128::from(shard.work_total), sums.count);
}

#[test]
fn plans_stored_without_weights_still_plan_by_count() {
    let (rows, cols, start, target) = WEIGHTED[1];
    let spec = sliders_spec(rows, cols, start, target, 40);
    let plan = Sliders::prepare(&spec, &KernelCache::new(), &Control::new()).unwrap();
    // The plan as an older coordinator stored it: no weights.
    let mut json = serde_json::to_value(&plan).unwrap();
    json.as_object_mut().unwrap().remove("prefix_weights");
    let old: SlidersPlan = serde_json::from_value(json).unwrap();
    assert!(old.prefix_weights.is_empty());
    let shards = Sliders::plan_stage(&spec, &old, 1).unwrap();
    let mut count = 0;
    for shard in &shards {
        let SlidersTask::SliderPrefixes {
            prefixes, weighted, ..
        } = &shard.task
        else {
            panic!("not a prefix task: {:?}", shard.task);
        };
        assert!(!weighted);
        assert_eq!(shard.work_total, prefixes.len() as u64);
        count += prefixes.len();
        // An unweighted task as an older coordinator encoded it.
        let encoded = serde_json::json!({"type": "slider-prefixes", "prefixes": prefixes});
        let task: SlidersTask = serde_json::from_value(encoded).unwrap();
        assert_eq!(&task, &shard.task);
        let control = Control::new();
        let outcome = run_shard(&spec, &task, &[], &control, CHECKPOINT_EVERY, &mut |_| {});
        assert_eq!(outcome.work_done, shard.work_total);
        assert_eq!(control.work_done(), shard.work_total);
    }
    assert_eq!(count, plan.prefixes.len());
}

#[test]
fn plan_options_are_checked() {
    let frontier_spec = |buckets: u32| SlidersSpec {
        board: SliderParams::new(3, 3, "WRBRBRBRB", "WBRBRBRBR"),
        plan: super::SlidersPlanName::Frontier,
        buckets,
        ..SlidersSpec::default()
    };
    let refused = |spec: SlidersSpec, what: &str| {
        let e = Sliders::validate(&spec).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    let mut prefixes_with_buckets = frontier_spec(4);
    prefixes_with_buckets.plan = super::SlidersPlanName::Prefixes;
    refused(prefixes_with_buckets, "buckets are for the frontier plan");
    refused(
        frontier_spec(super::MAX_BUCKETS + 1),
        "buckets must be between 1 and 1024",
    );
    assert!(super::SlidersPlanName::parse("levels").is_err());
    assert_eq!(
        super::SlidersPlanName::parse("").unwrap(),
        super::SlidersPlanName::Prefixes
    );
    // The proto form round-trips the plan and the buckets.
    let spec = frontier_spec(5);
    let proto = Sliders::spec_to_proto(&spec);
    assert_eq!(Sliders::spec_from_proto(&proto).unwrap().unwrap(), spec);
}
