//! Checks of the hex kernel against the public values and against independent
//! brute-force counts on small boards.

use std::collections::HashMap;

use super::*;
use crate::Error;
use crate::modular::{inv_mod, mul_mod};

const P: u32 = DEFAULT_MODULUS;

fn residue(exact: u128, p: u32) -> u32 {
    (exact % u128::from(p)) as u32
}

/// Small boards (M <= 16 cells) as bit masks, cell (r, c) at bit r*N + c.
struct SmallBoard {
    side: usize,
    neighbours: Vec<u32>,
}

impl SmallBoard {
    fn new(side: usize) -> Self {
        let n = side as isize;
        let mut neighbours = vec![0u32; side * side];
        for r in 0..n {
            for c in 0..n {
                for (dr, dc) in [(0, -1), (0, 1), (-1, 0), (-1, 1), (1, -1), (1, 0)] {
                    let (rr, cc) = (r + dr, c + dc);
                    if (0..n).contains(&rr) && (0..n).contains(&cc) {
                        neighbours[(r * n + c) as usize] |= 1 << (rr * n + cc);
                    }
                }
            }
        }
        SmallBoard { side, neighbours }
    }

    fn row_mask(&self, r: usize) -> u32 {
        ((1u32 << self.side) - 1) << (r * self.side)
    }

    fn col_mask(&self, c: usize) -> u32 {
        (0..self.side).fold(0, |m, r| m | 1 << (r * self.side + c))
    }

    /// Whether `stones` join the `from` side to the `to` side (flood fill).
    fn connects(&self, stones: u32, from: u32, to: u32) -> bool {
        let mut reached = stones & from;
        loop {
            if reached & to != 0 {
                return true;
            }
            let mut grown = reached;
            let mut rest = reached;
            while rest != 0 {
                let cell = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                grown |= self.neighbours[cell] & stones;
            }
            if grown == reached {
                return false;
            }
            reached = grown;
        }
    }

    fn top_bottom(&self, stones: u32) -> bool {
        self.connects(stones, self.row_mask(0), self.row_mask(self.side - 1))
    }

    fn left_right(&self, stones: u32) -> bool {
        self.connects(stones, self.col_mask(0), self.col_mask(self.side - 1))
    }

    /// All C_k by enumeration of the 2^M sets; checks on the way that every full
    /// colouring has exactly one winner.
    fn crossings(&self) -> Vec<u64> {
        let m = self.side * self.side;
        let all = if m == 32 { u32::MAX } else { (1u32 << m) - 1 };
        let mut counts = vec![0u64; m + 1];
        for white in 0..=all {
            let w = self.top_bottom(white);
            let b = self.left_right(all & !white);
            assert!(
                w != b,
                "side {}: colouring {white:#x} has {} winners",
                self.side,
                w as u8 + b as u8
            );
            if w {
                counts[white.count_ones() as usize] += 1;
            }
        }
        counts
    }

    /// Number of games still possible from a position (White moves when both have
    /// as many stones); a game ends when the mover completes a path.
    fn games(&self, white: u32, black: u32, memo: &mut HashMap<(u32, u32), u64>) -> u64 {
        if let Some(&g) = memo.get(&(white, black)) {
            return g;
        }
        let m = self.side * self.side;
        let white_moves = white.count_ones() == black.count_ones();
        let mut total = 0;
        for cell in 0..m {
            let bit = 1u32 << cell;
            if (white | black) & bit != 0 {
                continue;
            }
            total += if white_moves {
                if self.top_bottom(white | bit) {
                    1
                } else {
                    self.games(white | bit, black, memo)
                }
            } else if self.left_right(black | bit) {
                1
            } else {
                self.games(white, black | bit, memo)
            };
        }
        memo.insert((white, black), total);
        total
    }
}

fn binomials_mod(m: usize, p: u32) -> Vec<u32> {
    let q = u64::from(p);
    let mut row = vec![1u64; m + 1];
    for k in 1..=m {
        // binom(m, k) = binom(m, k-1) (m-k+1) / k
        row[k] = mul_mod(
            mul_mod(row[k - 1], (m - k + 1) as u64, q),
            inv_mod(k as u64, q).unwrap(),
            q,
        );
    }
    row.into_iter().map(|b| b as u32).collect()
}

/// C_0..C_M from the truncated counts with C_(M-k) = binom(M, k) - C_k.
fn complete(m: usize, truncated: &[u32], p: u32) -> Vec<u32> {
    let binom = binomials_mod(m, p);
    let mut full = vec![0u32; m + 1];
    full[..=m / 2].copy_from_slice(&truncated[..=m / 2]);
    for k in 0..=m / 2 {
        if m - k > m / 2 {
            full[m - k] = ((u64::from(binom[k]) + u64::from(p) - u64::from(truncated[k]))
                % u64::from(p)) as u32;
        }
    }
    full
}

fn eval_poly(coeffs: &[u32], x: u32, p: u32) -> u32 {
    let q = u64::from(p);
    coeffs.iter().rev().fold(0u64, |acc, &c| {
        (mul_mod(acc, u64::from(x), q) + u64::from(c)) % q
    }) as u32
}

fn serial(graph: &HexGraph, p: u32) -> Vec<u32> {
    graph.sweep(p, 1, &Control::new()).unwrap()
}

#[test]
fn hex_public_game_counts() {
    let exact: [u128; 4] = [1, 24, 257_760, 10_663_950_528_000];
    for (i, &h) in exact.iter().enumerate() {
        let side = i as u32 + 1;
        for threads in [1, 2] {
            let answer = count_games(side, P, threads, &Control::new()).unwrap();
            assert_eq!(answer.games, residue(h, P), "H({side})");
            assert_eq!(answer.crossings.len(), (side * side / 2) as usize + 1);
        }
        // Another prime above M gives the residue of the same integer.
        let other = 65_521;
        assert_eq!(
            count_games(side, other, 1, &Control::new()).unwrap().games,
            residue(h, other)
        );
    }
}

#[test]
fn hex_crossings_match_brute_force() {
    for side in 1..=4u32 {
        let board = SmallBoard::new(side as usize);
        let brute = board.crossings();
        let m = (side * side) as usize;
        let graph = HexGraph::build(side).unwrap();
        let swept = serial(&graph, P);
        let full = complete(m, &swept, P);
        let expected: Vec<u32> = brute.iter().map(|&c| residue(u128::from(c), P)).collect();
        assert_eq!(full, expected, "side {side}");
        // Exact counts are small here: the residues are the counts.
        assert!(brute.iter().all(|&c| c < u64::from(P)));
        if side == 3 {
            assert_eq!(brute, [0, 0, 0, 8, 42, 84, 76, 36, 9, 1]);
        }
        if side == 4 {
            assert_eq!(
                brute,
                [
                    0, 0, 0, 0, 20, 228, 1158, 3420, 6435, 8020, 6850, 4140, 1800, 560, 120, 16, 1
                ]
            );
        }
        // The untruncated scalar sweep agrees with the completed polynomial, one
        // point at a time and in batches of every size.
        let xs: Vec<u32> = vec![0, 1, 2, 3, 12_345, P - 1, 7, 8, 9, 10, 11, 1 << 30];
        let expected_values: Vec<u32> = xs.iter().map(|&x| eval_poly(&full, x, P)).collect();
        for (&x, &value) in xs.iter().zip(&expected_values) {
            assert_eq!(graph.evaluate_crossings(x, P), value, "side {side} x {x}");
        }
        for len in 0..=xs.len() {
            assert_eq!(
                graph.evaluate_points(&xs[..len], P),
                expected_values[..len],
                "side {side}, {len} points"
            );
        }
        assert_eq!(
            graph.evaluate_crossings(P + 2, P),
            expected_values[2],
            "points are reduced"
        );
    }
}

#[test]
fn hex_game_tree_matches_formula() {
    for side in 1..=3u32 {
        let board = SmallBoard::new(side as usize);
        let games = board.games(0, 0, &mut HashMap::new());
        let answer = count_games(side, P, 1, &Control::new()).unwrap();
        assert_eq!(answer.games, residue(u128::from(games), P), "side {side}");
    }
    assert_eq!(SmallBoard::new(3).games(0, 0, &mut HashMap::new()), 257_760);
}

#[test]
fn hex_state_counts() {
    let expected = [1, 3, 9, 25, 69, 189, 518, 1422, 3915, 10813, 29964];
    for (i, &count) in expected.iter().enumerate() {
        let side = i as u32 + 1;
        let graph = HexGraph::build(side).unwrap();
        assert_eq!(graph.num_states(), count, "side {side}");
        assert_eq!(graph.cells(), side * side);
        assert_eq!(graph.stride(), (side * side / 2) as usize + 1);
        assert_eq!(graph.num_steps(), (side * (side - 1)) as usize);
        assert_eq!(graph.side(), side);
    }
}

#[test]
fn hex_side_11_identities() {
    let side = 11u32;
    let m = 121usize;
    let graph = HexGraph::build(side).unwrap();
    let c = graph.sweep(P, 2, &Control::new()).unwrap();
    assert_eq!(c.len(), 61);
    assert!(c[..11].iter().all(|&v| v == 0));
    assert_eq!(c[11], 12 << 9);
    let full = complete(m, &c, P);
    for x in [2, 3] {
        assert_eq!(
            graph.evaluate_crossings(x, P),
            eval_poly(&full, x, P),
            "x = {x}"
        );
    }
    assert_eq!(
        graph.evaluate_points(&[2, 3], P),
        vec![eval_poly(&full, 2, P), eval_poly(&full, 3, P)]
    );
    // 2^120 sets contain a top-bottom path.
    let two_120 = crate::modular::pow_mod(2, 120, u64::from(P)) as u32;
    assert_eq!(graph.evaluate_crossings(1, P), two_120);
    assert_eq!(
        game_count(side, &c, P),
        count_games(side, P, 2, &Control::new()).unwrap().games
    );
}

#[test]
fn hex_threads_agree() {
    for side in [2u32, 5, 8, 9] {
        let graph = HexGraph::build(side).unwrap();
        let one = serial(&graph, P);
        for threads in [2, 3, 4] {
            let control = Control::new();
            assert_eq!(
                graph.sweep(P, threads, &control).unwrap(),
                one,
                "side {side}, {threads} threads"
            );
            assert_eq!(control.work_done(), graph.total_work());
        }
    }
}

#[test]
fn hex_step_range_splits() {
    for side in [4u32, 6] {
        let graph = HexGraph::build(side).unwrap();
        let n = graph.num_states();
        let stride = graph.stride();
        let mut vector = graph.initial_vector(P);
        for step in 1..=graph.num_steps() {
            let mut full = vec![0u32; n * stride];
            graph.step_range(step, &vector, 0..n, P, &mut full);
            // Arbitrary cut points (including empty ranges), different per step.
            let mut cuts = vec![0, n];
            for k in 0..5 {
                cuts.push((step * 7919 + k * 104_729) % (n + 1));
            }
            cuts.sort_unstable();
            for pair in cuts.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                // Garbage in `out` must be overwritten.
                let mut part = vec![u32::MAX; (b - a) * stride];
                graph.step_range(step, &vector, a..b, P, &mut part);
                assert_eq!(
                    part,
                    full[a * stride..b * stride],
                    "side {side} step {step} range {a}..{b}"
                );
            }
            vector = full;
        }
        assert_eq!(graph.crossings_from_vector(&vector, P), serial(&graph, P));
    }
}

#[test]
fn hex_validate_messages() {
    let msg = |r: Result<()>| match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    assert_eq!(msg(validate(0, P)), "side must be between 1 and 16, got 0");
    assert_eq!(
        msg(validate(17, P)),
        "side must be between 1 and 16, got 17"
    );
    assert!(msg(validate(11, 1_000_000_008)).contains("prime"));
    assert!(msg(validate(11, 113)).contains("greater than the number of cells"));
    assert!(msg(validate(11, 121)).contains("121"));
    assert!(msg(validate(11, 2_147_483_659)).contains("below 2^31"));
    assert!(msg(validate(11, 1 << 31)).contains("below 2^31"));
    validate(11, 127).unwrap();
    validate(16, 2_147_483_647).unwrap();
    validate(1, 2).unwrap();
    assert!(HexGraph::build(0).is_err());
    assert!(HexGraph::build(17).is_err());
    assert!(count_games(3, 9, 1, &Control::new()).is_err());
    let graph = HexGraph::build(3).unwrap();
    assert!(matches!(
        graph.sweep(4, 1, &Control::new()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn hex_large_modulus() {
    // The largest prime below 2^31: sums of two residues still fit a u32.
    let p = 2_147_483_647;
    let answer = count_games(4, p, 2, &Control::new()).unwrap();
    assert_eq!(answer.games, residue(10_663_950_528_000, p));
}

#[test]
fn hex_cancelled() {
    let graph = HexGraph::build(8).unwrap();
    for threads in [1, 2, 3] {
        let control = Control::new();
        control.cancel();
        assert_eq!(graph.sweep(P, threads, &control), Err(Error::Cancelled));
        assert_eq!(
            count_games(5, P, threads, &control).unwrap_err(),
            Error::Cancelled
        );
    }
    // Cancelled while running: the threads stop at the next step.
    for threads in [1, 2] {
        let control = Control::new();
        let result = std::thread::scope(|scope| {
            let run = scope.spawn(|| graph.sweep(P, threads, &control));
            while control.work_done() == 0 && !run.is_finished() {
                std::thread::yield_now();
            }
            control.cancel();
            run.join().unwrap()
        });
        // Side 8 takes 56 steps: the sweep can hardly finish before the cancel.
        assert!(result == Err(Error::Cancelled) || control.work_done() == graph.total_work());
        assert!(control.work_done() <= graph.total_work());
    }
}

#[test]
fn hex_build_options_agree() {
    for side in [1u32, 2, 5, 7] {
        let reference = HexGraph::build(side).unwrap();
        let expected = serial(&reference, P);
        for threads in [1, 2, 3] {
            for width in 1..=side as usize + 1 {
                let graph = HexGraph::build_with(side, threads, width).unwrap();
                assert_eq!(graph.num_states(), reference.num_states());
                assert!((0..graph.num_states()).all(|i| graph.state(i) == reference.state(i)));
                for step in 1..=graph.num_steps() {
                    assert_eq!(graph.num_transitions(step), reference.num_transitions(step));
                }
                assert_eq!(
                    graph.sweep(P, threads, &Control::new()).unwrap(),
                    expected,
                    "side {side} width {width}"
                );
            }
        }
    }
}

#[test]
fn hex_step_range_pipeline_matches_sweep() {
    // The distributed plan: initial vector, every step as a few ranges, the sum.
    for side in [3u32, 5, 7] {
        let graph = HexGraph::build(side).unwrap();
        let (n, stride) = (graph.num_states(), graph.stride());
        let mut vector = graph.initial_vector(P);
        for step in 1..=graph.num_steps() {
            let mut next = vec![0u32; n * stride];
            let cut = n / 3;
            graph.step_range(step, &vector, 0..cut, P, &mut next[..cut * stride]);
            graph.step_range(step, &vector, cut..n, P, &mut next[cut * stride..]);
            vector = next;
        }
        assert_eq!(
            graph.crossings_from_vector(&vector, P),
            serial(&graph, P),
            "side {side}"
        );
    }
}
