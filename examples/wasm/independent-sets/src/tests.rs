//! Tests of the independent-sets example, built natively: shard sums against OEIS,
//! a brute force and the transfer matrix, checkpoints, cancellation, bad input.

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

/// Every subset of the `n * n` cells, kept when no two of its cells are
/// horizontal or vertical neighbours.
fn brute_force(n: usize) -> u64 {
    let cells = n * n;
    let independent = |set: u64| {
        (0..cells).all(|cell| {
            let (row, column) = (cell / n, cell % n);
            set >> cell & 1 == 0
                || ((column + 1 == n || set >> (cell + 1) & 1 == 0)
                    && (row + 1 == n || set >> (cell + n) & 1 == 0))
        })
    };
    (0..1u64 << cells).filter(|&set| independent(set)).count() as u64
}

/// The transfer matrix applied row by row, pair by pair of row states, modulo
/// `p` (with `p` above every count, exact).
fn transfer_matrix(n: u32, p: u128) -> u128 {
    if n == 0 {
        return 1;
    }
    let states: Vec<u32> = (0..1 << n).filter(|m| m & (m >> 1) == 0).collect();
    let mut counts = vec![1u128; states.len()];
    for _ in 1..n {
        counts = states
            .iter()
            .map(|&s| {
                states
                    .iter()
                    .zip(&counts)
                    .filter(|&(&t, _)| s & t == 0)
                    .fold(0, |sum, (_, &c)| (sum + c) % p)
            })
            .collect();
    }
    counts.iter().fold(0, |sum, &c| (sum + c) % p)
}

#[test]
fn sums_over_shards_match_oeis() {
    for (n, &expected) in A006506.iter().enumerate() {
        for shards in [1, 3, 7] {
            for p in PRIMES {
                assert_eq!(
                    u128::from(sharded(&format!("n={n}"), shards, p)),
                    expected % u128::from(p),
                    "n = {n}, {shards} shards, p = {p}"
                );
            }
        }
    }
}

#[test]
fn brute_force_agrees() {
    for (n, &oeis) in A006506.iter().enumerate().take(5) {
        let expected = brute_force(n);
        assert_eq!(u128::from(expected), oeis, "brute force, n = {n}");
        for shards in [1, 2, 5, 40] {
            assert_eq!(sharded(&format!("n={n}"), shards, 1_000_000_007), expected);
        }
    }
}

#[test]
fn transfer_matrix_agrees() {
    assert_eq!(transfer_matrix(11, u128::MAX), A006506[11]);
    // Exact up to 14 (the count is below 2^128), then modulo a prime.
    for n in 12..=14 {
        let exact = transfer_matrix(n, u128::MAX);
        for p in [1_000_000_007, (1 << 61) - 1] {
            for shards in [1, 6] {
                assert_eq!(
                    u128::from(sharded(&format!("n={n}"), shards, p)),
                    exact % u128::from(p),
                    "n = {n}, {shards} shards, p = {p}"
                );
            }
        }
    }
    for n in [15, 16] {
        let p = (1 << 61) - 1;
        let expected = transfer_matrix(n, u128::from(p)) as u64;
        for shards in [1, 5, 40] {
            assert_eq!(sharded(&format!("n={n}"), shards, p), expected);
        }
    }
}

#[test]
fn row_states_are_the_masks_without_adjacent_bits() {
    assert_eq!(row_states(0), vec![0]);
    assert_eq!(row_states(3), vec![0b000, 0b001, 0b010, 0b100, 0b101]);
    // Fibonacci numbers.
    assert_eq!(row_states(10).len(), 144);
    assert_eq!(row_states(16).len(), 2584);
}

#[test]
fn progress_counts_row_steps() {
    let mut shard = Shard::new(1, 4, 1_000_000_007, "n=9", &[]).unwrap();
    run_shard_with(&mut shard, 1).unwrap();
    assert_eq!(
        shard.progress_log(),
        &[(0, 5), (1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    );
    // After each of the steps 1 to 3 (not the last, which only the sum follows).
    assert_eq!(shard.checkpoints().len(), 3);
    assert_eq!(shard.cancel_polls(), 4);
}

#[test]
fn resuming_from_any_checkpoint_gives_the_same_residue() {
    for (n, index, shards) in [(12, 0, 1), (11, 2, 3), (10, 6, 7), (13, 1, 2)] {
        let p = 1_000_000_007;
        let params = format!("n={n}");
        let fresh = run_shard(index, shards, p, &params, &[], 1).unwrap();
        let mut shard = Shard::new(index, shards, p, &params, &[]).unwrap();
        assert_eq!(run_shard_with(&mut shard, 1).unwrap(), fresh);
        let checkpoints = shard.checkpoints();
        assert_eq!(checkpoints.len() as u64, n / 2 - 1);
        for (k, state) in checkpoints.iter().enumerate() {
            let mut resumed = Shard::new(index, shards, p, &params, state).unwrap();
            assert_eq!(run_shard_with(&mut resumed, 1).unwrap(), fresh);
            assert_eq!(resumed.progress_log()[0], (k as u64 + 1, n / 2 + 1));
        }
    }
}

#[test]
fn a_cancelled_shard_saves_its_state_and_resumes() {
    let p = (1 << 61) - 1;
    let params = "n=14\ncheckpoint_every=0";
    let fresh = run_shard(3, 4, p, params, &[], 1).unwrap();
    let mut shard = Shard::new(3, 4, p, params, &[]).unwrap();
    shard.cancel_after(5);
    assert_eq!(run_shard_with(&mut shard, 1), Err(KernelError::Cancelled));
    // Saved only on cancelling, after 5 of the 7 steps: before step 6, which
    // gives the lower half's vector, so only `f` is saved.
    let [state] = shard.checkpoints() else {
        panic!("one checkpoint expected")
    };
    assert_eq!(state.len(), 8 * (HEADER_LEN + 987));
    assert_eq!(run_shard(3, 4, p, params, state, 1).unwrap(), fresh);
}

#[test]
fn unusable_states_fail_the_attempt() {
    let p = 1_000_000_007;
    let params = "n=8";
    let mut shard = Shard::new(0, 2, p, params, &[]).unwrap();
    run_shard_with(&mut shard, 1).unwrap();
    let state = shard.checkpoints()[2].clone();
    assert!(run_shard(0, 2, p, params, &state, 1).is_ok());
    let mut too_big = state.clone();
    too_big[8 * HEADER_LEN..8 * HEADER_LEN + 8].copy_from_slice(&p.to_le_bytes());
    for (index, shards, p, params, state) in [
        (1, 2, p, params, state.clone()),
        (0, 3, p, params, state.clone()),
        (0, 2, 1_000_000_009, params, state.clone()),
        (0, 2, p, "n=9", state.clone()),
        (0, 2, p, params, state[..state.len() - 8].to_vec()),
        (0, 2, p, params, state[..state.len() - 1].to_vec()),
        (0, 2, p, params, too_big),
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
        ("n=25", 1, "parameter `n` = 25 is out of range"),
        ("n=", 1, "parameter `n` must be a decimal"),
        ("n=8\ncheckpoint_every=x", 1, "`checkpoint_every`"),
        (
            "n=8",
            0,
            "writes 1 residue(s) per shard, the job asks for 0",
        ),
    ] {
        let error = run_shard(0, 1, 1_000_000_007, params, &[], outputs).unwrap_err();
        assert_eq!(error.code(), -1, "{params}");
        assert!(error.to_string().contains(message), "{params}: {error}");
    }
}
