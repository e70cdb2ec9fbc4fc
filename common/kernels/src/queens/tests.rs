//! Tests of the queens kernel: a brute force over permutations, the published
//! values, prefixes of any depth, bad input and cancellation.

use super::*;

/// Counts by trying every permutation of columns (one queen per row and per
/// column) and checking the diagonals: no masks, no symmetry, no prefixes.
fn brute_force(n: usize) -> u64 {
    fn place(n: usize, columns: &mut Vec<usize>, used: &mut [bool]) -> u64 {
        let row = columns.len();
        if row == n {
            return 1;
        }
        let mut count = 0;
        for c in 0..n {
            let attacked = columns
                .iter()
                .enumerate()
                .any(|(r, &qc)| qc.abs_diff(c) == row - r);
            if used[c] || attacked {
                continue;
            }
            used[c] = true;
            columns.push(c);
            count += place(n, columns, used);
            columns.pop();
            used[c] = false;
        }
        count
    }
    place(n, &mut Vec::new(), &mut vec![false; n])
}

/// OEIS A000170, n = 1..=18.
const PUBLISHED: [u64; 18] = [
    1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596, 2279184, 14772512, 95815104,
    666090624,
];

#[test]
fn the_kernel_agrees_with_brute_force_on_small_boards() {
    for n in 1..=9 {
        let expected = brute_force(n as usize);
        assert_eq!(count(n, 2, &Control::new()).unwrap(), expected, "n = {n}");
    }
}

#[test]
fn prefixes_of_any_depth_sum_to_the_count() {
    for n in 1..=10u32 {
        let expected = brute_force(n as usize);
        for depth in 1..=n.min(4) {
            let total: u64 = prefixes(n, depth)
                .iter()
                .map(|p| count_prefix(n, p).unwrap())
                .sum();
            assert_eq!(total, expected, "n = {n}, depth {depth}");
        }
    }
}

#[test]
fn the_kernel_gives_the_published_values() {
    for n in 1..=14u32 {
        assert_eq!(
            count(n, 2, &Control::new()).unwrap(),
            PUBLISHED[n as usize - 1],
            "n = {n}"
        );
    }
}

#[test]
fn prefixes_are_placements_and_the_mirror_halves_are_weighted() {
    for prefix in prefixes(8, 3) {
        assert!(Board::place(8, &prefix).is_ok(), "{prefix:?}");
        assert!(prefix[0] < 4);
        assert_eq!(prefix_weight(8, &prefix), 2);
    }
    assert_eq!(prefix_weight(7, &[3]), 1);
    assert_eq!(prefix_weight(7, &[2]), 2);
    assert!(prefix_depth(12, 64) >= 2);
}

#[test]
fn bad_prefixes_and_sizes_are_refused() {
    assert!(count_prefix(8, &[0, 1]).is_err(), "attacking");
    assert!(count_prefix(8, &[0, 0]).is_err(), "same column");
    assert!(count_prefix(8, &[9]).is_err(), "off the board");
    assert!(count_prefix(8, &[]).is_err());
    assert!(validate(0).is_err());
    assert!(validate(MAX_N + 1).is_err());
}

#[test]
fn a_cancelled_count_stops() {
    let control = Control::new();
    control.cancel();
    assert_eq!(count(12, 1, &control), Err(crate::Error::Cancelled));
}
