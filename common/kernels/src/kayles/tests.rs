//! Tests of the kayles kernel: the Grundy values and their periodic extension,
//! the winner rule against the game solved by brute force, the series against a
//! direct method, threads, checkpoints and their refusals.

use super::grundy::{Periodicity, mex_values, periodicity, proven_period};
use super::rational::{block_series, character_fraction};
use super::*;
use crate::test_rng::Rng;

/// `f(n) mod 10^digits` through the public driver (odd `n`: 0).
fn f(n: u64, digits: u32) -> u64 {
    if n % 2 == 1 {
        return 0;
    }
    fair_rows(n, digits, 2, &Control::new()).unwrap()
}

#[test]
fn grundy_values_match_the_seed() {
    let g = grundy_values(1000);
    assert_eq!(
        g[..=20],
        [
            0, 0, 1, 1, 2, 0, 3, 1, 1, 0, 3, 3, 2, 2, 4, 0, 5, 2, 2, 3, 3
        ]
    );
    assert_eq!(g.iter().max(), Some(&9));
    assert_eq!(g.iter().position(|&v| v == 9), Some(86));
    assert_eq!(character_bits(&g), 4);
    assert_eq!(character_bits(&g[..=6]), 2);
    assert_eq!(character_bits(&g[..=1]), 0);
    assert_eq!(character_count(1000), 16);
    assert_eq!(character_count(MAX_PINS), 16);
    assert_eq!(character_modulus(1000, 9), 16_000_000_000);
}

#[test]
fn periodic_extension_matches_the_mex_rule() {
    let proven = Periodicity {
        start: 53,
        period: 34,
    };
    assert_eq!(proven_period(&mex_values(1024)), Some(proven));
    assert_eq!(periodicity(), Some(proven));
    // Too few values to satisfy the test: 2 * 53 + 34 + 2 > 160 - 34 + 1.
    assert_eq!(proven_period(&mex_values(160)), None);
    assert_eq!(grundy_values(6000), mex_values(6000));
    assert_eq!(grundy_values(3000), mex_values(3000));
    assert_eq!(grundy_values(5), mex_values(5));
}

#[test]
fn given_values() {
    assert_eq!(f(0, 18), 1);
    assert_eq!(f(2, 18), 0);
    assert_eq!(f(6, 18), 8);
    assert_eq!(f(20, 18), 49844);
    assert_eq!(f(20, 3), 844);
    assert_eq!(format_answer(844, 3), "844");
    assert_eq!(format_answer(8, 9), "000000008");
    assert_eq!(format_answer(0, 1), "0");
}

// ---------------------------------------------------------------------------
// The original partisan game, solved by brute force.

const PLACES: usize = 12;
const EMPTY: u8 = 0;
const BLUE: u8 = 1;
const RED: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Blue,
    Red,
    First,
    Second,
}

fn decode(mut code: usize) -> [u8; PLACES] {
    let mut row = [EMPTY; PLACES];
    for place in row.iter_mut() {
        *place = (code % 3) as u8;
        code /= 3;
    }
    row
}

/// `wins[c][code]`: the player of colour `c + 1` moving first in `code` wins.
/// Every move empties a place, which lowers the base-3 code, so increasing
/// codes are solved after all their options.
fn solve_game() -> [Vec<bool>; 2] {
    let total = 3usize.pow(PLACES as u32);
    let powers: Vec<usize> = (0..PLACES).map(|i| 3usize.pow(i as u32)).collect();
    let mut wins = [vec![false; total], vec![false; total]];
    for code in 0..total {
        let row = decode(code);
        for mover in [BLUE, RED] {
            let other = usize::from(2 - mover);
            let mut options = Vec::new();
            for i in 0..PLACES {
                if row[i] == mover {
                    options.push(code - usize::from(row[i]) * powers[i]);
                }
                if i + 1 < PLACES
                    && row[i] != EMPTY
                    && row[i + 1] != EMPTY
                    && (row[i] == mover || row[i + 1] == mover)
                {
                    options.push(
                        code - usize::from(row[i]) * powers[i]
                            - usize::from(row[i + 1]) * powers[i + 1],
                    );
                }
            }
            wins[usize::from(mover - 1)][code] = options.iter().any(|&o| !wins[other][o]);
        }
    }
    wins
}

fn brute_outcome(wins: &[Vec<bool>; 2], code: usize) -> Outcome {
    match (wins[0][code], wins[1][code]) {
        (true, false) => Outcome::Blue,
        (false, true) => Outcome::Red,
        (true, true) => Outcome::First,
        (false, false) => Outcome::Second,
    }
}

/// The winner rule: the lead decides; at lead 0 the nim-sum of the alternating
/// blocks does.
fn rule_outcome(row: &[u8], grundy: &[u8]) -> Outcome {
    let lead: i64 = row
        .iter()
        .map(|&p| match p {
            BLUE => 1,
            RED => -1,
            _ => 0,
        })
        .sum();
    let mut nim = 0u8;
    let mut block = 0usize;
    for (i, &p) in row.iter().enumerate() {
        if p == EMPTY {
            nim ^= grundy[block];
            block = 0;
        } else if block > 0 && row[i - 1] == p {
            nim ^= grundy[block];
            block = 1;
        } else {
            block += 1;
        }
    }
    nim ^= grundy[block];
    match lead {
        d if d > 0 => Outcome::Blue,
        d if d < 0 => Outcome::Red,
        _ if nim != 0 => Outcome::First,
        _ => Outcome::Second,
    }
}

#[test]
fn winner_rule_and_counts_match_the_original_game() {
    let wins = solve_game();
    let grundy = grundy_values(PLACES);
    for code in 0..wins[0].len() {
        let row = decode(code);
        assert_eq!(
            brute_outcome(&wins, code),
            rule_outcome(&row, &grundy),
            "{row:?}"
        );
    }
    for n in 0..=PLACES {
        let fair = (0..1usize << n)
            .filter(|word| {
                let code: usize = (0..n)
                    .map(|i| (1 + (word >> i & 1)) * 3usize.pow(i as u32))
                    .sum();
                brute_outcome(&wins, code) == Outcome::Second
            })
            .count() as u64;
        assert_eq!(fair, f(n as u64, 18), "n = {n}");
    }
}

// ---------------------------------------------------------------------------
// An independent pin-by-pin dynamic programme (no series, no characters).

const DP_MOD: u64 = 1_000_000_000_000_000_000;

/// `f(n) mod 10^18` for every `n <= max_n`: the state after each pin is the
/// colour of the last pin, the lead, the nim-sum of the finished blocks and the
/// length of the current alternating block.
fn fair_rows_by_pins(max_n: usize) -> Vec<u64> {
    let g = grundy_values(max_n);
    let nims = (usize::from(*g.iter().max().unwrap()) + 1).next_power_of_two();
    let leads = 2 * max_n + 1;
    let lens = max_n + 1;
    let index = |colour: usize, lead: i64, nim: usize, len: usize| {
        ((colour * leads + (lead + max_n as i64) as usize) * nims + nim) * lens + len
    };
    let size = 2 * leads * nims * lens;
    let mut cur = vec![0u64; size];
    let mut next = vec![0u64; size];
    let mut counts = vec![1u64];
    cur[index(0, 1, 0, 1)] = 1;
    cur[index(1, -1, 0, 1)] = 1;
    let add = |slot: &mut u64, v: u64| {
        *slot += v;
        if *slot >= DP_MOD {
            *slot -= DP_MOD;
        }
    };
    for i in 1..=max_n {
        // Only leads that can still return to 0 by pin max_n matter.
        let lim = i.min(max_n - i + 1) as i64;
        let mut fair = 0u64;
        for colour in 0..2 {
            for nim in 0..nims {
                for len in 1..=i {
                    if nim ^ usize::from(g[len]) == 0 {
                        let v = cur[index(colour, 0, nim, len)];
                        add(&mut fair, v);
                    }
                }
            }
        }
        counts.push(fair);
        if i == max_n {
            break;
        }
        next.fill(0);
        for colour in 0..2 {
            let step = if colour == 0 { 1 } else { -1 };
            for lead in -lim..=lim {
                for nim in 0..nims {
                    for len in 1..=i {
                        let v = cur[index(colour, lead, nim, len)];
                        if v == 0 {
                            continue;
                        }
                        // Same colour again: the block ends, a new one starts.
                        let closed = nim ^ usize::from(g[len]);
                        add(&mut next[index(colour, lead + step, closed, 1)], v);
                        // The other colour: the block grows.
                        add(&mut next[index(1 - colour, lead - step, nim, len + 1)], v);
                    }
                }
            }
        }
        std::mem::swap(&mut cur, &mut next);
    }
    counts
}

#[test]
fn pin_dp_matches_the_series() {
    let counts = fair_rows_by_pins(200);
    for n in (1..=200).step_by(2) {
        assert_eq!(counts[n], 0, "n = {n}");
    }
    assert_eq!(counts[6], 8);
    assert_eq!(counts[20], 49844);
    for n in (0..=200).step_by(2) {
        assert_eq!(f(n as u64, 18), counts[n], "n = {n}");
        assert_eq!(f(n as u64, 9), counts[n] % 1_000_000_000, "n = {n}");
    }
}

// ---------------------------------------------------------------------------
// Series checks.

fn run(pins: u64, digits: u32, character: u32) -> CharacterSeries {
    let mut series = CharacterSeries::quadratic(pins, digits, character).unwrap();
    series.advance(usize::MAX, &Control::new()).unwrap();
    assert!(series.is_done());
    series
}

#[test]
fn trivial_character_gives_central_binomials() {
    for (pins, digits) in [(2000u64, 9u32), (400, 18), (300, 12), (300, 13), (200, 1)] {
        let series = run(pins, digits, 0);
        let modulus = series.modulus();
        // Row 2k of Pascal's triangle, modulo M.
        let mut row = vec![1u128];
        for k in 0..series.target() {
            assert_eq!(
                series.coefficient(k),
                Some(row[k]),
                "pins {pins}, digits {digits}, k {k}"
            );
            for _ in 0..2 {
                let mut longer = vec![1u128; row.len() + 1];
                for j in 1..row.len() {
                    longer[j] = (row[j - 1] + row[j]) % modulus;
                }
                row = longer;
            }
        }
        assert_eq!(series.coefficient(series.target()), None);
    }
}

/// `a * b mod m` for `m < 2^127`.
fn mul_mod_wide(a: u128, mut b: u128, m: u128) -> u128 {
    let (mut a, mut acc) = (a % m, 0u128);
    b %= m;
    while b > 0 {
        if b & 1 == 1 {
            acc = (acc + a) % m;
        }
        a = (a + a) % m;
        b >>= 1;
    }
    acc
}

/// The straightforward method: the full series `A`, `B` modulo `2M`, long
/// division and the square root with the halving rule, all in `u128`.
fn reference_character(pins: u64, digits: u32, character: u32) -> Vec<u128> {
    let grundy = grundy_values(pins as usize);
    let modulus = (1u128 << character_bits(&grundy)) * 10u128.pow(digits);
    let wide = 2 * modulus;
    let len = pins as usize / 2 + 1;
    let (even, odd) = block_series(&grundy, character, len);
    let red = |x: i128| x.rem_euclid(wide as i128) as u128;
    // E^2 and u P^2 as exact integers.
    let mut e2 = vec![0i128; len];
    let mut p2 = vec![0i128; len];
    for i in 0..len {
        for j in 0..len - i {
            e2[i + j] += i128::from(even[i] * even[j]);
            if i + j + 1 < len && j < odd.len() && i < odd.len() {
                p2[i + j + 1] += i128::from(odd[i] * odd[j]);
            }
        }
    }
    let one = |k: usize| i128::from(k == 0);
    let a: Vec<u128> = (0..len)
        .map(|k| red(one(k) + 2 * i128::from(even[k]) + e2[k] - p2[k]))
        .collect();
    let b: Vec<u128> = (0..len)
        .map(|k| red(one(k) - 2 * i128::from(even[k]) + e2[k] - p2[k]))
        .collect();
    assert_eq!(b[0], 1);
    let mut s = vec![0u128; len];
    for k in 0..len {
        let mut v = a[k];
        for j in 1..=k {
            v = (v + wide - mul_mod_wide(b[j], s[k - j], wide)) % wide;
        }
        s[k] = v;
    }
    let mut r = vec![1u128; len];
    for k in 1..len {
        let mut v = s[k];
        for i in 1..k {
            v = (v + wide - mul_mod_wide(r[i], r[k - i], wide)) % wide;
        }
        assert_eq!(v % 2, 0, "odd value to halve");
        r[k] = v / 2;
    }
    r
}

#[test]
fn crt_split_matches_the_direct_method() {
    for (pins, digits) in [
        (300u64, 9u32),
        (240, 18),
        (160, 1),
        (200, 11),
        (200, 12),
        (200, 13),
        (120, 17),
    ] {
        for h in 0..character_count(pins) {
            let series = run(pins, digits, h);
            let reference = reference_character(pins, digits, h);
            for (k, &expected) in reference.iter().enumerate() {
                assert_eq!(
                    series.coefficient(k),
                    Some(expected),
                    "pins {pins}, digits {digits}, h {h}, k {k}"
                );
            }
        }
    }
}

#[test]
fn fractions_are_short_for_long_rows() {
    let grundy = grundy_values(4000);
    for h in 0..16 {
        let fraction = character_fraction(&grundy, h, 2001);
        assert!(
            fraction.den.len() < 100 && fraction.num.len() < 100,
            "h {h}"
        );
        assert_eq!(fraction.den[0], 1);
    }
}

#[test]
fn threads_do_not_change_the_answer() {
    let control = Control::new();
    let one = fair_rows(1000, 9, 1, &control).unwrap();
    assert_eq!(fair_rows(1000, 9, 3, &control).unwrap(), one);
    assert_eq!(fair_rows(1000, 9, 64, &control).unwrap(), one);
    assert_eq!(fair_rows(1000, 9, 0, &control).unwrap(), one);
    assert_eq!(
        fair_rows(1000, 18, 2, &control).unwrap() % 1_000_000_000,
        one
    );
    assert_eq!(control.work_done(), 5 * total_work(1000));
}

#[test]
fn checkpoint_and_restore_resume_exactly() {
    let control = Control::new();
    for (pins, digits, h) in [(1000u64, 9u32, 11u32), (600, 18, 5), (400, 13, 0)] {
        let whole = run(pins, digits, h).value().unwrap();
        let mut series = CharacterSeries::new(pins, digits, h).unwrap();
        series.advance(137, &control).unwrap();
        assert_eq!(series.computed(), 137);
        assert_eq!(series.value(), None);
        let words = series.checkpoint();
        let mut resumed = CharacterSeries::restore(pins, digits, h, &words).unwrap();
        assert_eq!(resumed.computed(), 137);
        assert_eq!(resumed.checkpoint(), words);
        resumed.advance(usize::MAX, &control).unwrap();
        assert_eq!(resumed.value(), Some(whole));
        // A checkpoint of a finished series restores as finished.
        let done = CharacterSeries::restore(pins, digits, h, &resumed.checkpoint()).unwrap();
        assert_eq!(done.value(), Some(whole));
    }
    // An empty series checkpoints too.
    let fresh = CharacterSeries::new(100, 9, 3).unwrap();
    let mut back = CharacterSeries::restore(100, 9, 3, &fresh.checkpoint()).unwrap();
    back.advance(usize::MAX, &control).unwrap();
    assert_eq!(back.value(), run(100, 9, 3).value());
}

#[test]
fn restore_refuses_bad_checkpoints() {
    let mut series = CharacterSeries::new(1000, 9, 3).unwrap();
    series.advance(100, &Control::new()).unwrap();
    let words = series.checkpoint();
    let refused = |pins, digits, h, w: &[u64]| {
        matches!(
            CharacterSeries::restore(pins, digits, h, w),
            Err(Error::InvalidArgument(_))
        )
    };
    assert!(!refused(1000, 9, 3, &words));
    assert!(refused(1000, 9, 3, &words[..words.len() - 1]));
    assert!(refused(1000, 9, 3, &words[..words.len() - 3]));
    assert!(refused(1000, 9, 3, &[]));
    assert!(refused(1000, 9, 4, &words));
    assert!(refused(1002, 9, 3, &words));
    assert!(refused(1000, 10, 3, &words));
    let mut altered = words.clone();
    altered[20] ^= 1;
    assert!(refused(1000, 9, 3, &altered));
    let garbage: Vec<u64> = (0..words.len() as u64).map(|i| i * 7919).collect();
    assert!(refused(1000, 9, 3, &garbage));
    assert!(refused(1000, 9, 16, &words));
}

#[test]
fn cancellation_stops_the_kernel() {
    let control = Control::new();
    control.cancel();
    assert_eq!(fair_rows(1000, 9, 2, &control), Err(Error::Cancelled));
    let mut series = CharacterSeries::new(1000, 9, 1).unwrap();
    assert_eq!(series.advance(10, &control), Err(Error::Cancelled));
    assert_eq!(series.computed(), 0);
    // Cancelled during a long run, as it reports its first progress: the
    // computed prefix stays usable.
    let control = Control::cancelled_at_work(1);
    let mut series = CharacterSeries::quadratic(20_000, 9, 1).unwrap();
    assert_eq!(series.advance(usize::MAX, &control), Err(Error::Cancelled));
    assert!(series.computed() > 0 && !series.is_done());
}

#[test]
fn validation() {
    assert!(validate(0, 1).is_ok());
    assert!(validate(MAX_PINS, 18).is_ok());
    let message = |pins, digits| match validate(pins, digits) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(message(7, 9).contains("even"));
    assert!(message(MAX_PINS + 2, 9).contains("at most"));
    assert!(message(10, 0).contains("digits"));
    assert!(message(10, 19).contains("digits"));
    assert!(CharacterSeries::new(7, 9, 0).is_err());
    assert!(CharacterSeries::new(6, 9, 4).is_err());
    assert!(CharacterSeries::new(6, 9, 3).is_ok());
}

#[test]
fn combine_checks_its_input() {
    let values: Vec<u128> = (0..16).map(|h| run(100, 9, h).value().unwrap()).collect();
    assert_eq!(combine(100, 9, &values), Ok(f(100, 9)));
    assert!(matches!(
        combine(100, 9, &values[..15]),
        Err(Error::InvalidArgument(_))
    ));
    let mut off = values.clone();
    off[0] = (off[0] + 1) % character_modulus(100, 9);
    assert!(matches!(combine(100, 9, &off), Err(Error::Internal(_))));
    off[0] = character_modulus(100, 9);
    assert!(matches!(
        combine(100, 9, &off),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn series_can_move_to_a_worker_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<CharacterSeries>();
    let series = CharacterSeries::new(50, 9, 2).unwrap();
    assert!(format!("{series:?}").contains("character: 2"));
    let value = std::thread::spawn(move || {
        let mut series = series;
        series.advance(usize::MAX, &Control::new()).unwrap();
        series.value()
    })
    .join()
    .unwrap();
    assert_eq!(value, run(50, 9, 2).value());
}

// ---------------------------------------------------------------------------
// The fast path against the quadratic recurrences.

/// Every coefficient of every character for rows of up to `pins` pins, by the
/// quadratic series and by the fast path, and `f(n)` for every even `n <= pins`
/// from both.
fn compare_all_prefixes(pins: u64, digits: u32) {
    let control = Control::new();
    let count = character_count(pins);
    let quadratic: Vec<CharacterSeries> = (0..count).map(|h| run(pins, digits, h)).collect();
    let fast: Vec<Vec<u64>> = (0..count)
        .map(|h| character_coefficients_fast(pins, digits, h, 1, &control).unwrap())
        .collect();
    let m = pins as usize / 2;
    for (h, coefficients) in fast.iter().enumerate() {
        assert_eq!(coefficients.len(), m + 1);
        for (k, &c) in coefficients.iter().enumerate() {
            assert_eq!(
                quadratic[h].coefficient(k),
                Some(u128::from(c)),
                "pins {pins}, digits {digits}, h {h}, k {k}"
            );
        }
    }
    // f(2k) from the first 2^b(2k) characters, reduced to their modulus.
    let fast_at = |h: usize, k: usize| u128::from(fast[h][k]);
    for k in 0..=m {
        let n = 2 * k as u64;
        let modulus = character_modulus(n, digits);
        let values = |source: &dyn Fn(usize) -> u128| -> Vec<u128> {
            (0..character_count(n) as usize)
                .map(|h| source(h) % modulus)
                .collect()
        };
        let by_fast = values(&|h| fast_at(h, k));
        let by_quadratic = values(&|h| quadratic[h].coefficient(k).unwrap());
        assert_eq!(
            combine(n, digits, &by_fast),
            combine(n, digits, &by_quadratic),
            "n {n}, digits {digits}"
        );
    }
}

#[test]
fn fast_path_equals_the_quadratic_series_for_every_row_up_to_4000_pins() {
    // 9 digits: one working modulus 2M; 18: the CRT split of 2M; 1, 12 and 17:
    // other prime counts of the exact convolutions.
    for digits in [9, 18, 1, 12, 17] {
        compare_all_prefixes(4000, digits);
    }
}

#[test]
fn fast_driver_equals_the_quadratic_driver_on_short_rows() {
    let control = Control::new();
    let dp = fair_rows_by_pins(200);
    for n in (0..=300u64).step_by(2) {
        for digits in [9, 18] {
            let fast = fair_rows_fast(n, digits, 2, &control).unwrap();
            assert_eq!(
                fast,
                fair_rows_quadratic(n, digits, 1, &control).unwrap(),
                "n {n}"
            );
            if n <= 200 && digits == 18 {
                assert_eq!(fast, dp[n as usize], "n {n}");
            }
        }
    }
    assert_eq!(fair_rows_fast(0, 18, 1, &control), Ok(1));
    assert_eq!(fair_rows_fast(6, 18, 1, &control), Ok(8));
    assert_eq!(fair_rows_fast(20, 18, 1, &control), Ok(49844));
    assert_eq!(fair_rows_fast(20, 3, 1, &control), Ok(844));
}

#[test]
fn fast_path_equals_the_quadratic_series_on_random_long_rows() {
    let control = Control::new();
    let mut rng = Rng(1015);
    for (i, digits) in [9u32, 9, 1, 18, 13].into_iter().enumerate() {
        let n = 2 * (1 + rng.below(10_000));
        let fast = fair_rows_fast(n, digits, 2, &control).unwrap();
        let quadratic = fair_rows_quadratic(n, digits, 2, &control).unwrap();
        assert_eq!(fast, quadratic, "n {n}, digits {digits}");
        // Per character as well, for a few of them.
        if i < 2 {
            for h in [0, 5, 15] {
                assert_eq!(
                    character_value_fast(n, digits, h, 2, &control).unwrap(),
                    run(n, digits, h).value().unwrap(),
                    "n {n}, digits {digits}, h {h}"
                );
            }
        }
    }
}

#[test]
fn fast_path_counts_its_work_and_checks_its_input() {
    let control = Control::new();
    fair_rows_fast(5000, 9, 2, &control).unwrap();
    assert_eq!(control.work_done(), total_work(5000));
    let control = Control::new();
    character_value_fast(5000, 9, 3, 1, &control).unwrap();
    assert_eq!(control.work_done(), 2501);
    assert!(matches!(
        character_value_fast(5000, 9, 16, 1, &control),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        character_value_fast(6, 9, 4, 1, &control),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        fair_rows_fast(7, 9, 1, &control),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        fair_rows_fast(MAX_PINS + 2, 9, 1, &control),
        Err(Error::InvalidArgument(_))
    ));
    // The dispatching driver takes either path and agrees with both.
    assert_eq!(
        fair_rows(FAST_PINS, 9, 2, &control),
        fair_rows_quadratic(FAST_PINS, 9, 2, &control)
    );
}

#[test]
fn cancellation_stops_the_fast_path() {
    let control = Control::new();
    control.cancel();
    assert_eq!(
        fair_rows_fast(100_000, 9, 2, &control),
        Err(Error::Cancelled)
    );
    assert_eq!(
        character_value_fast(100_000, 9, 1, 1, &control),
        Err(Error::Cancelled)
    );
    // Cancelled while running, as it reports its first progress: the
    // computation stops early.
    let control = Control::cancelled_at_work(1);
    assert_eq!(
        fair_rows_fast(1_000_000, 9, 2, &control),
        Err(Error::Cancelled)
    );
    assert!(control.work_done() < total_work(1_000_000));
}

#[test]
fn long_series_take_the_fast_path_and_checkpoint_alike() {
    let control = Control::new();
    let (pins, digits, h) = (FAST_PINS + 1000, 9, 6);
    let quadratic = run(pins, digits, h);
    let mut series = CharacterSeries::new(pins, digits, h).unwrap();
    assert!(format!("{series:?}").contains("fast"));
    series.advance(300, &control).unwrap();
    assert_eq!((series.computed(), control.work_done()), (300, 300));
    assert_eq!(series.value(), None);
    for k in 0..300 {
        assert_eq!(series.coefficient(k), quadratic.coefficient(k), "k {k}");
    }
    assert_eq!(series.coefficient(300), None);
    // A fast checkpoint equals the quadratic checkpoint of the same prefix.
    let mut partial = CharacterSeries::quadratic(pins, digits, h).unwrap();
    partial.advance(300, &control).unwrap();
    let words = series.checkpoint();
    assert_eq!(words, partial.checkpoint());
    // Restored into a fast series, the prefix is checked against the fast result.
    let mut resumed = CharacterSeries::restore(pins, digits, h, &words).unwrap();
    assert_eq!(resumed.computed(), 300);
    resumed.advance(usize::MAX, &control).unwrap();
    assert_eq!(resumed.value(), quadratic.value());
    series.advance(usize::MAX, &control).unwrap();
    assert_eq!(series.checkpoint(), quadratic.checkpoint());
    // A quadratic series resumes a fast checkpoint as well.
    let mut crossed = CharacterSeries::quadratic(pins, digits, h)
        .unwrap()
        .restored(&words)
        .unwrap();
    crossed.advance(usize::MAX, &control).unwrap();
    assert_eq!(crossed.value(), quadratic.value());
    // A prefix that passes the checksum but is not the series' is refused.
    let mut forged = words.clone();
    forged.pop();
    forged[CHECKPOINT_HEADER + 2 * 7] ^= 1;
    forged.push(checksum(&forged));
    let mut wrong = CharacterSeries::restore(pins, digits, h, &forged).unwrap();
    assert!(matches!(
        wrong.advance(usize::MAX, &control),
        Err(Error::Internal(_))
    ));
    // Cancelled before the fast computation ends: nothing is kept.
    let cancelled = Control::new();
    cancelled.cancel();
    let mut fresh = CharacterSeries::new(pins, digits, h).unwrap();
    assert_eq!(fresh.advance(10, &cancelled), Err(Error::Cancelled));
    assert_eq!(fresh.computed(), 0);
}
