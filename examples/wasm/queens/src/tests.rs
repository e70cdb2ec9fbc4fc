//! Tests of the queens example, built natively: shard sums against OEIS and a
//! brute force, prefixes, checkpoints, cancellation, bad input.

use super::*;

const PRIMES: [u64; 4] = [1_000_000_007, (1 << 61) - 1, 7, 2];

/// The sum of every shard's residue, modulo `p`.
fn sharded(params: &str, shards: u64, p: u64) -> u64 {
    (0..shards).fold(0, |sum, shard| {
        let out = run_shard(shard, shards, p, params, &[], 1).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0] < p);
        add_mod(sum, out[0], p)
    })
}

/// Every permutation of the columns, kept when no two queens share a diagonal.
fn brute_force(n: usize) -> u64 {
    fn permute(columns: &mut Vec<usize>, placed: usize, solutions: &mut u64) {
        if placed == columns.len() {
            let safe = (0..placed)
                .all(|i| (i + 1..placed).all(|j| columns[i].abs_diff(columns[j]) != j - i));
            *solutions += u64::from(safe);
            return;
        }
        for k in placed..columns.len() {
            columns.swap(placed, k);
            permute(columns, placed + 1, solutions);
            columns.swap(placed, k);
        }
    }
    let mut solutions = 0;
    permute(&mut (0..n).collect(), 0, &mut solutions);
    solutions
}

#[test]
fn sums_over_shards_match_oeis() {
    for (n, &expected) in A000170.iter().enumerate().take(13) {
        for shards in [1, 3, 7] {
            for p in PRIMES {
                assert_eq!(
                    sharded(&format!("n={n}"), shards, p),
                    expected % p,
                    "n = {n}, {shards} shards, p = {p}"
                );
            }
        }
    }
}

#[test]
fn larger_boards_with_many_shards() {
    let p = (1 << 61) - 1;
    assert_eq!(sharded("n=13", 50, p), A000170[13]);
    assert_eq!(sharded("n=14\ndepth=4", 400, p), A000170[14]);
}

#[test]
fn brute_force_agrees() {
    for (n, &oeis) in A000170.iter().enumerate().take(9) {
        let expected = brute_force(n);
        assert_eq!(expected, oeis, "brute force, n = {n}");
        for shards in [1, 2, 5] {
            assert_eq!(sharded(&format!("n={n}"), shards, 1_000_000_007), expected);
        }
    }
}

#[test]
fn every_depth_gives_the_same_count() {
    for n in [1u64, 5, 8] {
        for depth in 0..=n {
            for shards in [1, 4, 100] {
                assert_eq!(
                    sharded(&format!("n={n}\ndepth={depth}"), shards, 1_000_000_007),
                    A000170[n as usize],
                    "n = {n}, depth = {depth}, {shards} shards"
                );
            }
        }
    }
}

#[test]
fn prefixes_are_the_placements_of_the_first_rows() {
    let full = (1 << 8) - 1;
    assert_eq!(prefixes(full, 0), vec![Rows::EMPTY]);
    assert_eq!(prefixes(full, 1).len(), 8);
    // Two queens on the first two rows: 8 * 8 pairs, minus the 8 same-column
    // and 2 * 7 diagonal ones.
    assert_eq!(prefixes(full, 2).len(), 64 - 8 - 14);
    assert_eq!(prefixes(full, 8).len(), 92);
    assert!(prefixes((1 << 3) - 1, 3).is_empty());
}

#[test]
fn progress_counts_the_shards_prefixes() {
    let params = "n=9\ncheckpoint_every=4";
    let mut shard = Shard::new(2, 5, 1_000_000_007, params, &[]).unwrap();
    run_shard_with(&mut shard, 1).unwrap();
    let prefixes = prefixes((1 << 9) - 1, 3).len() as u64;
    let mine = (prefixes - 2).div_ceil(5);
    let log = shard.progress_log();
    assert_eq!(log.len() as u64, mine + 1);
    for (k, &(done, total)) in log.iter().enumerate() {
        assert_eq!((done, total), (k as u64, mine));
    }
    assert_eq!(shard.checkpoints().len() as u64, (mine - 1) / 4);
    assert_eq!(shard.cancel_polls(), mine);
}

#[test]
fn resuming_from_any_checkpoint_gives_the_same_residue() {
    let p = 1_000_000_007;
    let params = "n=10\ncheckpoint_every=1";
    for (index, shards) in [(0, 1), (1, 3), (6, 7)] {
        let fresh = run_shard(index, shards, p, params, &[], 1).unwrap();
        let mut shard = Shard::new(index, shards, p, params, &[]).unwrap();
        assert_eq!(run_shard_with(&mut shard, 1).unwrap(), fresh);
        let checkpoints = shard.checkpoints();
        assert!(checkpoints.len() > 10);
        for state in checkpoints {
            let mut resumed = Shard::new(index, shards, p, params, state).unwrap();
            assert_eq!(run_shard_with(&mut resumed, 1).unwrap(), fresh);
            // It picks up where the state left off.
            let (done, _) = resumed.progress_log()[0];
            assert_eq!(done, decode_words(state).unwrap()[6]);
            assert!(done > 0);
        }
    }
}

#[test]
fn a_cancelled_shard_saves_its_state_and_resumes() {
    let p = (1 << 61) - 1;
    let params = "n=11";
    let fresh = run_shard(1, 2, p, params, &[], 1).unwrap();
    let mut shard = Shard::new(1, 2, p, params, &[]).unwrap();
    shard.cancel_after(40);
    assert_eq!(run_shard_with(&mut shard, 1), Err(KernelError::Cancelled));
    assert_eq!(KernelError::Cancelled.code(), -3);
    let state = shard.checkpoints().last().unwrap().clone();
    // 40 prefixes done, saved at 16 and 32, then on cancelling.
    assert_eq!(shard.checkpoints().len(), 3);
    assert_eq!(decode_words(&state).unwrap()[6], 40);
    assert_eq!(run_shard(1, 2, p, params, &state, 1).unwrap(), fresh);
}

#[test]
fn unusable_states_fail_the_attempt() {
    let p = 1_000_000_007;
    let params = "n=8\ncheckpoint_every=1";
    let mut shard = Shard::new(0, 2, p, params, &[]).unwrap();
    run_shard_with(&mut shard, 1).unwrap();
    let state = shard.checkpoints()[0].clone();
    assert!(run_shard(0, 2, p, params, &state, 1).is_ok());
    // Another shard's, another prime's, another board's, or damaged.
    for (index, shards, p, params, state) in [
        (1, 2, p, params, state.clone()),
        (0, 3, p, params, state.clone()),
        (0, 2, 1_000_000_009, params, state.clone()),
        (0, 2, p, "n=9", state.clone()),
        (0, 2, p, params, state[..state.len() - 1].to_vec()),
        (0, 2, p, params, b"not a state".to_vec()),
    ] {
        let error = run_shard(index, shards, p, params, &state, 1).unwrap_err();
        assert_eq!(error, KernelError::Failed);
        assert_eq!(error.code(), -2);
    }
}

#[test]
fn bad_parameters_fail_the_job() {
    for (params, outputs, message) in [
        ("", 1, "missing parameter `n`"),
        ("n=33", 1, "parameter `n` = 33 is out of range"),
        ("n=x", 1, "parameter `n` must be a decimal"),
        ("n=8\ndepth=9", 1, "parameter `depth` = 9 is out of range"),
        ("n=8\ncheckpoint_every=-1", 1, "`checkpoint_every`"),
        (
            "n=8",
            2,
            "writes 1 residue(s) per shard, the job asks for 2",
        ),
        ("n=8\nx", 1, "parameter line `x`"),
    ] {
        let error = run_shard(0, 1, 1_000_000_007, params, &[], outputs).unwrap_err();
        assert_eq!(error.code(), -1, "{params}");
        assert!(error.to_string().contains(message), "{params}: {error}");
    }
}
