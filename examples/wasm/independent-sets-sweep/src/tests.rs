//! The sweep against brute force, the published counts of square grids, and
//! the version 1 example; bad sizes refused.

use super::*;

const PRIMES: [u64; 2] = [(1 << 61) - 1, 1_000_000_007];

/// Independent sets of the `rows x cols` grid by brute force over every
/// subset of its vertices.
fn brute_force(rows: usize, cols: usize) -> u64 {
    let cells = rows * cols;
    (0u64..1 << cells)
        .filter(|&set| {
            (0..cells).all(|v| {
                set >> v & 1 == 0
                    || ((v % cols + 1 == cols || set >> (v + 1) & 1 == 0)
                        && (v + cols >= cells || set >> (v + cols) & 1 == 0))
            })
        })
        .count() as u64
}

#[test]
fn the_sweep_counts_what_brute_force_counts() {
    for rows in 1..=4 {
        for cols in 1..=4 {
            let answer = run_sweep_native(&alloc::format!("n={cols}\nm={rows}"), &PRIMES).unwrap();
            let exact = brute_force(rows, cols);
            assert_eq!(
                answer.residues,
                [[exact], [exact % PRIMES[1]]],
                "{rows} x {cols}"
            );
        }
    }
}

#[test]
fn square_grids_give_the_published_values_and_the_sharded_kernels() {
    // OEIS A006506, n = 1 to 12.
    let published: [u128; 12] = [
        2,
        7,
        63,
        1_234,
        55_447,
        5_598_861,
        1_280_128_950,
        660_647_962_955,
        770_548_397_261_707,
        2_030_049_051_145_980_050,
        12_083_401_651_433_651_945_979,
        162_481_813_349_792_588_536_582_997,
    ];
    for (n, &value) in (1..=12).zip(&published) {
        let answer = run_sweep_native(&alloc::format!("n={n}"), &PRIMES[..1]).unwrap();
        let value = (value % u128::from(PRIMES[0])) as u64;
        assert_eq!(answer.residues, [[value]], "n = {n}");
        // The version 1 example, in three shards, modulo the same prime.
        if n <= 9 {
            let sharded: u64 = (0..3)
                .map(|i| {
                    tally_example_independent_sets::run_shard(
                        i,
                        3,
                        PRIMES[0],
                        &alloc::format!("n={n}"),
                        &[],
                        1,
                    )
                    .unwrap()[0]
                })
                .fold(0, |sum, r| tally_guest::add_mod(sum, r, PRIMES[0]));
            assert_eq!(sharded, value, "n = {n}");
        }
    }
}

#[test]
fn bad_sizes_are_refused() {
    for params in ["n=0", "n=23", "n=3\nm=0", "m=3"] {
        assert!(
            matches!(
                run_sweep_native(params, &PRIMES),
                Err(KernelError::BadParams(_))
            ),
            "{params}"
        );
    }
}
