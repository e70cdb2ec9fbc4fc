//! Frontier jobs run through their stage data in this process, in the
//! compact form and in the raw form of jobs an older release planned.

use std::collections::BTreeMap;

use super::{Pegs, PegsPlanName, PegsSpec, PegsTask};
use crate::cache::KernelCache;
use crate::kind::{Answer, JobKind};
use crate::staged_tests::{StageOutputs, as_older_release, run_stages};
use crate::{Control, Result};
use tally_kernels::buckets::split_buckets;
use tally_kernels::pegs::{BoardRanks, LevelForm, PegGame, StageBucket, parse_board};

/// Runs a frontier job stage by stage as the runner does, each shard given
/// its bucket of the previous stage's outputs and each result checked;
/// `older` stores the plan and every task as an older release did. The
/// answer and every stage's outputs.
fn run_frontier(spec: &PegsSpec, older: bool) -> Result<(Answer, StageOutputs)> {
    let cache = KernelCache::new();
    let control = Control::new();
    let mut plan = Pegs::prepare(spec, &cache, &control)?;
    assert!(plan.compact, "a new frontier plan writes the compact form");
    if older {
        plan = as_older_release(&plan);
    }
    let stored = |task: &PegsTask| match older {
        true => as_older_release(task),
        false => task.clone(),
    };
    run_stages::<Pegs>(spec, plan, stored, |_| {})
}

fn spec(board: &str, start: u32, end: Option<u32>, buckets: u32) -> PegsSpec {
    PegsSpec {
        board: board.into(),
        start: Some(start),
        end,
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets,
        by_final_hole: false,
        no_prune: false,
    }
}

/// Each stage's positions with their counts, sorted.
type StagePositions = BTreeMap<usize, Vec<(u64, u128)>>;

/// Every bucket of every stage's outputs decoded in `form`: the positions
/// and the bytes.
fn read_stages(
    stages: &[Vec<Vec<u8>>],
    form: LevelForm,
    ranks: &BoardRanks,
) -> Result<(StagePositions, u64)> {
    let mut positions = StagePositions::new();
    let mut bytes = 0;
    for (stage, outputs) in stages.iter().enumerate() {
        for output in outputs {
            for bucket in split_buckets(output)? {
                bytes += bucket.len() as u64;
                let decoded = StageBucket::decode_as(bucket, form, ranks, "test")?;
                let entry = positions.entry(stage).or_default();
                for list in [decoded.level, decoded.joined] {
                    entry.extend(list.boards.into_iter().zip(list.counts));
                }
            }
        }
    }
    for list in positions.values_mut() {
        list.sort_unstable();
    }
    Ok((positions, bytes))
}

/// A job planned by an older release (its plan and tasks without the compact
/// form) writes and reads the raw form to the end, which today's reader of
/// that form reads; a new job writes the same positions in fewer bytes;
/// both answer what the direct count answers.
#[test]
fn jobs_of_an_older_release_keep_the_raw_form_and_new_jobs_write_the_compact_one() {
    let specs = [
        spec("triangle:6", 4, None, 3),
        spec("triangle:5", 1, Some(13), 2),
        spec("triangle:6", 1, Some(1), 0),
    ];
    for spec in &specs {
        let direct = Pegs::direct(spec, 1, &Control::new()).unwrap();
        let (new, new_stages) = run_frontier(spec, false).unwrap();
        let (old, old_stages) = run_frontier(spec, true).unwrap();
        assert_eq!(new.line, direct.line, "{spec:?}");
        assert_eq!(old.line, direct.line, "{spec:?}");
        let game = PegGame::new(parse_board(&spec.board).unwrap(), spec.start, spec.end).unwrap();
        let ranks = BoardRanks::new(game.hole_mask());
        let (raw, raw_bytes) = read_stages(&old_stages, LevelForm::Raw, &ranks).unwrap();
        let (compact, compact_bytes) =
            read_stages(&new_stages, LevelForm::Compact, &ranks).unwrap();
        assert_eq!(raw, compact, "{spec:?}");
        assert!(raw.values().map(Vec::len).sum::<usize>() > 1000, "{spec:?}");
        assert!(
            compact_bytes * 5 < raw_bytes * 4,
            "{spec:?}: {compact_bytes} bytes compact, {raw_bytes} raw"
        );
        // Neither form reads as the other.
        assert!(read_stages(&old_stages, LevelForm::Compact, &ranks).is_err());
        assert!(read_stages(&new_stages, LevelForm::Raw, &ranks).is_err());
    }
}

/// A damaged level is refused as the check of a shard's result reads it,
/// naming the level, the bucket and the chunk.
#[test]
fn a_damaged_compact_level_is_refused_naming_it() {
    let spec = spec("triangle:6", 4, None, 2);
    let (_, stages) = run_frontier(&spec, false).unwrap();
    let (stage, shard) = (stages.iter().enumerate())
        .flat_map(|(s, outputs)| (0..outputs.len()).map(move |i| (s, i)))
        .max_by_key(|&(s, i)| stages[s][i].len())
        .unwrap();
    let output = &stages[stage][shard];
    let game = PegGame::new(parse_board(&spec.board).unwrap(), spec.start, None).unwrap();
    let ranks = BoardRanks::new(game.hole_mask());
    let largest = (split_buckets(output).unwrap().into_iter())
        .max_by_key(|b| b.len())
        .unwrap();
    assert!(largest.len() > 1000, "{} bytes", largest.len());
    let at = largest.as_ptr() as usize - output.as_ptr() as usize + largest.len() / 2;
    let mut damaged = output.clone();
    damaged[at] ^= 0x10;
    let mut refused = 0;
    for (index, bucket) in split_buckets(&damaged).unwrap().into_iter().enumerate() {
        let label = format!("peg level {}: output bucket {index}", stage + 1);
        if let Err(e) = StageBucket::decode_as(bucket, LevelForm::Compact, &ranks, &label) {
            let e = e.to_string();
            assert!(e.starts_with(&format!("{label}: its level: chunk ")), "{e}");
            assert!(e.contains("is damaged"), "{e}");
            refused += 1;
        }
    }
    assert_eq!(refused, 1, "one bucket is damaged");
}
