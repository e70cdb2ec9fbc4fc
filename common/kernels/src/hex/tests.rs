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
    assert_eq!(msg(validate(0, P)), "side must be between 1 and 20, got 0");
    assert_eq!(
        msg(validate(21, P)),
        "side must be between 1 and 20, got 21"
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
    assert!(HexGraph::build(MAX_SIDE + 1).is_err());
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
    // Cancelled while running, as the first step is counted: the threads
    // stop at the next step (side 8 takes 56).
    for threads in [1, 2] {
        let control = Control::cancelled_at_work(1);
        assert_eq!(graph.sweep(P, threads, &control), Err(Error::Cancelled));
        assert!(control.work_done() < graph.total_work());
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
                assert_eq!(graph.masks, reference.masks, "the states, in order");
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
fn hex_build_counts_its_work_and_stops_when_cancelled() {
    // A build counts BUILD_WORK units as it goes, the same graph as without
    // a control; cancelled before it starts or in the middle of the search
    // or of the gather lists (as its count reaches a unit), it stops with
    // `Cancelled`.
    for side in [1u32, 6, 9] {
        let control = Control::new();
        let graph = HexGraph::build_controlled(side, 2, &control).unwrap();
        assert_eq!(control.work_done(), BUILD_WORK, "side {side}");
        let reference = HexGraph::build_parallel(side, 2).unwrap();
        assert_eq!(graph.masks, reference.masks, "side {side}");
        let xs = [3u32, 5, 7];
        assert_eq!(
            graph.evaluate_points(&xs, P),
            reference.evaluate_points(&xs, P)
        );
    }
    let cancelled = Control::new();
    cancelled.cancel();
    assert!(matches!(
        HexGraph::build_controlled(9, 2, &cancelled),
        Err(Error::Cancelled)
    ));
    // At side 9 the search is one round (70 units), then the gather lists
    // of two columns at a time.
    for at in [1, 75, 85, BUILD_WORK] {
        let control = Control::cancelled_at_work(at);
        let stopped = HexGraph::build_controlled(9, 2, &control);
        assert!(matches!(stopped, Err(Error::Cancelled)), "at {at}");
    }
}

/// What the AVX2 step of the points plan reads unchecked: every source of a
/// target lies in the target's group, and every list of other sources ends
/// with a padding entry.
#[test]
fn hex_sources_lie_in_their_targets_group() {
    for side in 1u32..=9 {
        for width in 1..=side as usize {
            let graph = HexGraph::build_with(side, 2, width).unwrap();
            for block in &graph.blocks {
                let n = block.members.len();
                let mut group = vec![0; n];
                for (g, w) in block.group_offsets.windows(2).enumerate() {
                    group[w[0] as usize..w[1] as usize].fill(g);
                }
                for gather in &block.cols {
                    assert_eq!(gather.info.len(), n);
                    let mut at = 0;
                    for (target, &byte) in gather.info.iter().enumerate() {
                        let count = usize::from(byte & graph::COUNT_MASK);
                        for &source in &gather.others[at..at + count] {
                            assert_eq!(
                                group[source as usize], group[target],
                                "side {side} width {width}: source {source} of target {target}"
                            );
                        }
                        at += count;
                    }
                    assert_eq!(gather.others.len(), at + 1, "one padding entry");
                }
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

/// The full polynomial `C_0..C_M mod p` from the cell-step sweep.
fn swept_full(graph: &HexGraph, p: u32) -> Vec<u32> {
    full_crossings(graph.side(), &serial(graph, p), p)
}

/// Evaluations of the graph's polynomial at every point of the layout.
fn layout_evaluations(graph: &HexGraph, p: u32) -> Vec<(u32, u32)> {
    let layout = points_layout(graph.side(), p);
    let values = graph.evaluate_points(&layout.points, p);
    layout.points.into_iter().zip(values).collect()
}

fn internal_message(r: Result<Vec<u32>>) -> String {
    match r {
        Err(Error::Internal(m)) => m,
        other => panic!("expected an internal error, got {other:?}"),
    }
}

fn invalid_message(r: Result<Vec<u32>>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

#[test]
fn hex_known_state_counts() {
    for side in 1..=12u32 {
        let graph = HexGraph::build(side).unwrap();
        assert_eq!(
            known_state_count(side),
            Some(graph.num_states() as u64),
            "side {side}"
        );
        assert!(graph.memory_bytes() > 0);
    }
    assert_eq!(known_state_count(0), None);
    assert_eq!(known_state_count(19), None);
    assert_eq!(known_state_count(16), Some(5_126_520));
    assert_eq!(known_state_count(17), Some(14_453_451));
    assert_eq!(known_state_count(18), Some(40_843_521));
}

/// The sides a measurement runs, `FROM-TO` from the variable `var`.
fn sides_from_env(var: &str, default: &str) -> std::ops::RangeInclusive<u32> {
    let sides = std::env::var(var).unwrap_or_else(|_| default.into());
    let (from, to) = sides.split_once('-').expect("sides as FROM-TO");
    from.parse().expect("a side")..=to.parse().expect("a side")
}

/// The counts of the table past side 12, from the graph itself: minutes and
/// gigabytes from side 16 on, so run by hand (`cargo test --release -p
/// tally-kernels -- --ignored hex_large_state_counts`, `HEX_COUNT_SIDES=13-17`).
#[test]
#[ignore]
fn hex_large_state_counts() {
    let sides = sides_from_env("HEX_COUNT_SIDES", "13-16");
    for side in sides {
        let started = std::time::Instant::now();
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        println!(
            "side {side}: {} states, graph {} bytes, built in {:.1} s",
            graph.num_states(),
            graph.memory_bytes(),
            started.elapsed().as_secs_f64()
        );
        if let Some(known) = known_state_count(side) {
            assert_eq!(known, graph.num_states() as u64, "side {side}");
        }
    }
}

#[test]
fn hex_state_counts_follow_the_motzkin_column_and_estimates_extend_it() {
    // The known counts (each from a built graph) against the Motzkin
    // triangle's column, computed here by its own recurrence on whole rows.
    let mut row = vec![1u64];
    let mut column = Vec::new();
    for len in 1..=MAX_SIDE as usize + 1 {
        let mut next = vec![0u64; len + 1];
        for (k, value) in next.iter_mut().enumerate() {
            for j in [k.wrapping_sub(1), k, k + 1] {
                *value += row.get(j).copied().unwrap_or(0);
            }
        }
        row = next;
        column.push(row.get(2).copied().unwrap_or(0));
    }
    for side in 1..=MAX_SIDE {
        let term = column[side as usize];
        if let Some(known) = known_state_count(side) {
            assert_eq!(known, term, "side {side}");
        }
        assert_eq!(estimated_state_count(side), term, "side {side}");
    }
    assert_eq!(estimated_state_count(20), 328_233_969);
}

#[test]
fn hex_points_layout() {
    for side in 1..=16u32 {
        let m = (side * side) as usize;
        let layout = points_layout(side, P);
        let k = ((m - 1) / 2 + 1).saturating_sub(side as usize);
        assert_eq!(layout.unknowns, k, "side {side}");
        assert_eq!(layout.points.len(), k + layout.spares + 1);
        // 2, 3, 4, ... for a large prime.
        assert!(layout.points.iter().zip(2..).all(|(&x, y)| x == y));
        assert_eq!(layout.check_point(), layout.points.last().copied());
    }
    assert_eq!(points_layout(16, P).unknowns, 112);
    assert_eq!(points_layout(16, P).passes(POINTS_PER_PASS), 8);
    // A small prime: no point together with its inverse, none of 0, 1, p - 1.
    let p = 101;
    let layout = points_layout(7, p);
    let q = u64::from(p);
    for (i, &x) in layout.points.iter().enumerate() {
        assert!((2..p - 1).contains(&x));
        let inverse = inv_mod(u64::from(x), q).unwrap() as u32;
        assert!(!layout.points[..i].contains(&inverse), "{x} and {inverse}");
        assert!(!layout.points[..i].contains(&x));
    }
}

#[test]
fn hex_points_solve_matches_sweep() {
    for side in 1..=9u32 {
        let graph = HexGraph::build(side).unwrap();
        for p in [P, 2_147_483_647] {
            let expected = swept_full(&graph, p);
            let evaluations = layout_evaluations(&graph, p);
            assert_eq!(
                solve_crossings(side, p, &evaluations).unwrap(),
                expected,
                "side {side} p {p}"
            );
            // Any order.
            let mut reversed = evaluations.clone();
            reversed.reverse();
            assert_eq!(solve_crossings(side, p, &reversed).unwrap(), expected);
        }
    }
}

#[test]
fn hex_evaluate_points_every_layout() {
    // Widths (one block per column up to one per row), threads, and both ways
    // of taking the steps of a wide block agree with the swept polynomial.
    let xs: Vec<u32> = (0..21).map(|i| i * 7919 + 2).collect();
    for side in [1u32, 2, 5, 7, 8] {
        let reference = HexGraph::build(side).unwrap();
        let full = swept_full(&reference, P);
        let expected: Vec<u32> = xs.iter().map(|&x| eval_poly(&full, x, P)).collect();
        for width in 1..=side as usize {
            let graph = HexGraph::build_with(side, 2, width).unwrap();
            for threads in [1, 3] {
                for split in [usize::MAX, 0] {
                    group_pass::SPLIT_BYTES.store(split, std::sync::atomic::Ordering::Relaxed);
                    let got = graph
                        .evaluate_points_with(&xs, P, threads, &Control::new())
                        .unwrap();
                    group_pass::SPLIT_BYTES.store(1 << 20, std::sync::atomic::Ordering::Relaxed);
                    assert_eq!(
                        got, expected,
                        "side {side} width {width} threads {threads} split {split}"
                    );
                }
            }
        }
    }
}

#[test]
fn hex_pass_resumes_from_a_vector_in_the_first_blocks_order() {
    // The vector a pass resumes from (and so every checkpoint of a release
    // before or after this one) is in the order of the first block's
    // positions, whatever order the pass keeps it in: the vector after the top
    // row, made here in that order, resumed after 0 rounds, gives the
    // uninterrupted pass's values.
    for side in [3u32, 6, 8] {
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let xs = [5u32, 7, 11, 13];
        let expected = graph.evaluate_points(&xs, P);
        let first = &graph.blocks[0];
        let mut vector = vec![0u8; graph.num_states() * 4 * xs.len()];
        for (i, &mask) in graph.masks.iter().enumerate() {
            if let Some(degree) = graph::top_row_degree(mask) {
                let at = first.position[i] as usize * 4 * xs.len();
                for (k, &x) in xs.iter().enumerate() {
                    let value =
                        crate::modular::pow_mod(u64::from(x), u64::from(degree), u64::from(P));
                    vector[at + 4 * k..at + 4 * k + 4]
                        .copy_from_slice(&(value as u32).to_le_bytes());
                }
            }
        }
        let resumed = graph
            .evaluate_pass(
                &xs,
                P,
                2,
                &Control::new(),
                Some(Resume::new(0, &vector)),
                &|_| {},
            )
            .unwrap();
        assert_eq!(resumed, expected, "side {side}");
    }
}

/// A new file to read and write, never one that exists.
fn new_file(path: &std::path::Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .unwrap()
}

/// A spill of one file, as a worker gives a kernel (runs one after another).
struct FileSpill {
    file: std::sync::Arc<std::fs::File>,
    written: u64,
    open: u64,
    runs: Vec<(u64, u64)>,
}

impl FileSpill {
    fn create(path: &std::path::Path) -> FileSpill {
        let file = new_file(path);
        FileSpill {
            file: std::sync::Arc::new(file),
            written: 0,
            open: 0,
            runs: Vec::new(),
        }
    }
}

/// One run of a [`FileSpill`].
struct FileRun {
    file: std::sync::Arc<std::fs::File>,
    start: u64,
    len: u64,
}

fn io(e: std::io::Error) -> Error {
    Error::Failed(format!("test file: {e}"))
}

impl crate::spill::Stored for FileRun {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = buf.len().min(self.len.saturating_sub(offset) as usize);
        self.file
            .read_exact_at(&mut buf[..n], self.start + offset)
            .map_err(io)?;
        Ok(n)
    }
}

impl crate::spill::Spill for FileSpill {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, self.written).map_err(io)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn end_run(&mut self) -> Result<u32> {
        self.runs.push((self.open, self.written));
        self.open = self.written;
        Ok(self.runs.len() as u32 - 1)
    }

    fn read_at(&self, run: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.keep_run(run)?.read_at(offset, buf)
    }

    fn bytes_written(&self) -> u64 {
        self.written
    }

    fn keep_run(&self, run: u32) -> Result<std::sync::Arc<dyn crate::spill::Stored>> {
        let (start, end) = self.runs[run as usize];
        Ok(std::sync::Arc::new(FileRun {
            file: self.file.clone(),
            start,
            len: end - start,
        }))
    }

    /// The runs share one file, freed with the spill: nothing to free sooner.
    fn release_run(&mut self, _run: u32) -> Result<()> {
        Ok(())
    }
}

/// A scratch in a file, as a worker gives a pass; or one that fails.
struct FileScratch {
    file: std::fs::File,
    fail_reads: bool,
}

impl FileScratch {
    fn create(path: &std::path::Path) -> FileScratch {
        let file = new_file(path);
        FileScratch {
            file,
            fail_reads: false,
        }
    }
}

impl crate::spill::Scratch for FileScratch {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        if self.fail_reads {
            return Err(Error::Failed("the test scratch refuses reads".into()));
        }
        self.file.read_exact_at(buf, offset).map_err(io)
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, offset).map_err(io)
    }

    fn clear(&self, len: u64) -> Result<()> {
        self.file.set_len(0).map_err(io)?;
        self.file.set_len(len).map_err(io)
    }
}

/// A scratch that keeps the trait's own `clear` (zeros written).
struct ZeroedScratch(FileScratch);

impl crate::spill::Scratch for ZeroedScratch {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.0.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.0.write_at(offset, bytes)
    }
}

#[test]
fn hex_spilled_passes_give_the_same_values() {
    // A pass with the graph spilled, read a group at a time, and its vector
    // in memory or in a scratch, agrees with the pass in memory at every lane
    // count and thread count, whether the spill is in memory or in a file.
    let dir = tempfile::tempdir().unwrap();
    for side in [1u32, 2, 5, 8] {
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let mut in_memory = crate::spill::MemorySpill::default();
        let mut in_file = FileSpill::create(&dir.path().join(format!("graph-{side}")));
        let spills = [
            graph.spill(&mut in_memory).unwrap(),
            graph.spill(&mut in_file).unwrap(),
        ];
        let scratch = FileScratch::create(&dir.path().join(format!("vector-{side}")));
        let zeroed = ZeroedScratch(FileScratch::create(
            &dir.path().join(format!("zeroed-{side}")),
        ));
        // Garbage where the vector goes: the pass clears it before it reads.
        let garbage = vec![0xA5; 64 * graph.num_states()];
        crate::spill::Scratch::write_at(&scratch, 0, &garbage).unwrap();
        crate::spill::Scratch::write_at(&zeroed, 0, &garbage).unwrap();
        for spilled in &spills {
            assert_eq!(spilled.num_states(), graph.num_states());
            for count in [1usize, 3, 8, 16] {
                let xs: Vec<u32> = (0..count as u32).map(|i| i * 7_919 + 2).collect();
                let expected = graph.evaluate_points(&xs, P);
                for threads in [1, 3] {
                    let scratches: [Option<&dyn crate::spill::Scratch>; 3] =
                        [None, Some(&scratch), Some(&zeroed)];
                    for vector in scratches {
                        let control = Control::new();
                        let options = PassOptions {
                            scratch: vector,
                            ..PassOptions::new(threads, &control)
                        };
                        let got = spilled.evaluate_pass(&xs, P, &options).unwrap();
                        assert_eq!(
                            got,
                            expected,
                            "side {side}, {count} points, {threads} threads, vector in scratch {}",
                            vector.is_some()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn hex_spilled_pass_stops_at_a_failing_scratch_or_a_damaged_spill() {
    // A scratch that fails is the pass's error, not a panic; a damaged
    // spilled part (a source past its group) is refused, never stepped
    // through.
    let dir = tempfile::tempdir().unwrap();
    let graph = HexGraph::build(4).unwrap();
    let path = dir.path().join("graph");
    let mut spill = FileSpill::create(&path);
    let spilled = graph.spill(&mut spill).unwrap();
    let mut scratch = FileScratch::create(&dir.path().join("vector"));
    scratch.fail_reads = true;
    let control = Control::new();
    let options = PassOptions {
        scratch: Some(&scratch),
        ..PassOptions::new(2, &control)
    };
    let err = spilled.evaluate_pass(&[3, 5], P, &options).unwrap_err();
    assert!(
        matches!(&err, Error::Failed(m) if m.contains("refuses reads")),
        "{err:?}"
    );
    // The last source of the last group: the four bytes before the index
    // (the trailer's first eight bytes give the index's length).
    let mut bytes = std::fs::read(&path).unwrap();
    let trailer = bytes.len() - 16;
    let index_len = u64::from_le_bytes(bytes[trailer..trailer + 8].try_into().unwrap());
    let last = trailer - index_len as usize - 4;
    bytes[last..last + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = spilled
        .evaluate_pass(&[3, 5], P, &PassOptions::new(2, &Control::new()))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Failed(m) if m.contains("damaged")),
        "{err:?}"
    );
}

/// Every checkpoint of a pass, as (rounds done, residues as little-endian bytes).
type Checkpoints = std::sync::Mutex<Vec<(usize, Vec<u8>)>>;

fn keep_checkpoint(kept: &Checkpoints) -> impl Fn(PassPoint<'_>) + Sync + '_ {
    move |at: PassPoint<'_>| {
        let bytes = at
            .residues()
            .flatten()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        kept.lock().unwrap().push((at.rounds_done, bytes));
    }
}

#[test]
fn hex_spilled_and_in_memory_passes_resume_from_each_others_checkpoints() {
    // Both passes show the same vector after every round, and each resumes
    // from the other's checkpoints (the spilled one with its vector in
    // memory or in a scratch) to the same values.
    let dir = tempfile::tempdir().unwrap();
    let graph = HexGraph::build_parallel(6, 2).unwrap();
    let spilled = graph
        .spill(&mut crate::spill::MemorySpill::default())
        .unwrap();
    let scratch = FileScratch::create(&dir.path().join("vector"));
    let control = Control::new();
    for count in [3usize, 16] {
        let xs: Vec<u32> = (0..count as u32).map(|i| i * 31 + 2).collect();
        let expected = graph.evaluate_points(&xs, P);
        let (in_memory, in_spill) = (Checkpoints::default(), Checkpoints::default());
        let values = graph
            .evaluate_pass(&xs, P, 2, &control, None, &keep_checkpoint(&in_memory))
            .unwrap();
        assert_eq!(values, expected);
        let keep = keep_checkpoint(&in_spill);
        let options = PassOptions {
            after_round: &keep,
            ..PassOptions::new(2, &control)
        };
        assert_eq!(spilled.evaluate_pass(&xs, P, &options).unwrap(), expected);
        drop(keep);
        let (in_memory, in_spill) = (
            in_memory.into_inner().unwrap(),
            in_spill.into_inner().unwrap(),
        );
        assert_eq!(in_memory.len(), graph.pass_rounds() - 1, "{count} points");
        assert!(in_memory == in_spill, "{count} points: the vectors differ");
        for (done, vector) in &in_memory {
            let resume = Some(Resume::new(*done, vector));
            let from_spilled = graph
                .evaluate_pass(&xs, P, 2, &control, resume, &|_| {})
                .unwrap();
            assert_eq!(from_spilled, expected, "{count} points, after {done}");
            for vector in [None, Some(&scratch as &dyn crate::spill::Scratch)] {
                let options = PassOptions {
                    resume,
                    scratch: vector,
                    ..PassOptions::new(2, &control)
                };
                let got = spilled.evaluate_pass(&xs, P, &options).unwrap();
                assert_eq!(
                    got,
                    expected,
                    "{count} points, after {done}, scratch {}",
                    vector.is_some()
                );
            }
        }
        // A checkpoint of another width, past the last round or with a
        // residue not below the modulus is refused, by both passes.
        let (done, vector) = &in_memory[0];
        let mut too_large = vector.clone();
        let last = too_large.len() - 4;
        too_large[last..].copy_from_slice(&P.to_le_bytes());
        for resume in [
            Resume {
                from: 4,
                ..Resume::new(*done, vector)
            },
            Resume::new(graph.pass_rounds(), vector),
            Resume::new(*done, &too_large),
        ] {
            let options = PassOptions {
                resume: Some(resume),
                ..PassOptions::new(2, &control)
            };
            assert!(spilled.evaluate_pass(&xs, P, &options).is_err());
            let refused = graph.evaluate_pass(&xs, P, 2, &control, Some(resume), &|_| {});
            assert!(refused.is_err());
        }
        // Behind a header, as a checkpoint holds it: the same values.
        let mut with_header = b"HEAD".to_vec();
        with_header.extend_from_slice(vector);
        let behind = Resume {
            from: 4,
            ..Resume::new(*done, &with_header)
        };
        let got = graph.evaluate_pass(&xs, P, 2, &control, Some(behind), &|_| {});
        assert_eq!(got.unwrap(), expected);
    }
}

#[test]
fn hex_spilled_graph_opens_from_its_bytes_and_refuses_a_damaged_index() {
    // The spilled form is one run of bytes that a pass anywhere opens; an
    // index or trailer damaged anywhere is refused.
    let graph = HexGraph::build_parallel(4, 2).unwrap();
    let mut spill = crate::spill::MemorySpill::default();
    let spilled = graph.spill(&mut spill).unwrap();
    let bytes = crate::spill::Spill::keep_run(&spill, 0)
        .unwrap()
        .read_range(0..spilled.spilled_bytes())
        .unwrap();
    let control = Control::new();
    let options = PassOptions::new(1, &control);
    let xs = [2, 3, 5];
    let expected = graph.evaluate_points(&xs, P);
    let opened = SpilledGraph::open(std::sync::Arc::new(bytes.clone())).unwrap();
    assert_eq!(
        (opened.side(), opened.num_states()),
        (4, graph.num_states())
    );
    assert_eq!(opened.evaluate_pass(&xs, P, &options).unwrap(), expected);
    let trailer = bytes.len() - 16;
    let index_len = u64::from_le_bytes(bytes[trailer..trailer + 8].try_into().unwrap()) as usize;
    let index = trailer - index_len;
    for at in index..bytes.len() {
        for flip in [0x01u8, 0x10, 0x80] {
            let mut damaged = bytes.clone();
            damaged[at] ^= flip;
            let err = SpilledGraph::open(std::sync::Arc::new(damaged)).err();
            assert!(
                err.is_some_and(|e| e.to_string().contains("damaged")),
                "byte {at} of {} flipped by {flip:#x} opened",
                bytes.len()
            );
        }
    }
    assert!(SpilledGraph::open(std::sync::Arc::new(bytes[..bytes.len() - 1].to_vec())).is_err());
    assert!(SpilledGraph::open(std::sync::Arc::new(bytes[1..].to_vec())).is_err());
}

/// A field of this process's status in megabytes (`VmRSS:`, `VmHWM:`).
fn process_mb(field: &str) -> f64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<f64>()
        .unwrap()
        / 1e3
}

/// A pass with the graph spilled (and its vector in memory or in a scratch
/// file) against one in memory: CPU (one thread) and the process's peak
/// memory during the pass once the graph is dropped (`HEX_SPILL_SIDES=15-17
/// cargo test --release -p tally-kernels --lib -- --ignored
/// hex_spilled_pass_cost --nocapture`; the files in `HEX_SPILL_DIR`, default
/// the system's temporary directory).
#[test]
#[ignore]
fn hex_spilled_pass_cost() {
    let sides = sides_from_env("HEX_SPILL_SIDES", "12-13");
    let base = std::env::var("HEX_SPILL_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let status = process_mb;
    for side in sides {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let xs: Vec<u32> = (0..16u32).map(|i| i * 7919 + 2).collect();
        let started = std::time::Instant::now();
        let expected = graph
            .evaluate_pass(&xs, P, 1, &Control::new(), None, &|_| {})
            .unwrap();
        let memory = started.elapsed().as_secs_f64();
        let (graph_mb, vector_mb) = (
            graph.memory_bytes() as f64 / 1e6,
            graph.pass_bytes(16) as f64 / 1e6,
        );
        let started = std::time::Instant::now();
        let mut spill = FileSpill::create(&dir.path().join("graph"));
        let spilled = graph.spill(&mut spill).unwrap();
        let spill_took = started.elapsed().as_secs_f64();
        drop(graph);
        println!(
            "side {side}: {} states; in memory, 16 points: {memory:.2} s (graph {graph_mb:.0} MB, \
             vector {vector_mb:.0} MB); graph spilled in {spill_took:.2} s ({:.0} MB), largest \
             group {} states",
            spilled.num_states(),
            spilled.spilled_bytes() as f64 / 1e6,
            spilled.max_group(),
        );
        let scratch = FileScratch::create(&dir.path().join("vector"));
        for (points, in_scratch) in [(16, false), (8, false), (16, true)] {
            std::fs::write("/proc/self/clear_refs", "5").unwrap();
            let before = status("VmRSS:");
            let vector: Option<&dyn crate::spill::Scratch> = in_scratch.then_some(&scratch);
            let started = std::time::Instant::now();
            let control = Control::new();
            let options = PassOptions {
                scratch: vector,
                ..PassOptions::new(1, &control)
            };
            let got: Vec<u32> = xs
                .chunks(points)
                .flat_map(|batch| spilled.evaluate_pass(batch, P, &options).unwrap())
                .collect();
            let took = started.elapsed().as_secs_f64();
            assert_eq!(got, expected);
            println!(
                "  graph spilled, {points} points a pass, vector in {}: {took:.2} s ({:.3}x), \
                 peak {:.0} MB ({before:.0} MB before)",
                if in_scratch { "a file" } else { "memory" },
                took / memory,
                status("VmHWM:"),
            );
        }
    }
}

#[test]
fn hex_group_copies_give_the_same_values() {
    // A pass that copies each group's part of the graph out before its steps
    // (as one reading its graph from a file would) agrees with the swept
    // polynomial at every lane count, both ways of taking a wide block's steps.
    for side in [2u32, 4, 7, 8] {
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        assert_eq!(graph.blocks.len(), 2, "two blocks a row at side {side}");
        let full = swept_full(&graph, P);
        for count in [1usize, 3, 8, 16] {
            let xs: Vec<u32> = (0..count as u32).map(|i| i * 104_729 + 3).collect();
            let expected: Vec<u32> = xs.iter().map(|&x| eval_poly(&full, x, P)).collect();
            for split in [usize::MAX, 0] {
                group_pass::SPLIT_BYTES.store(split, std::sync::atomic::Ordering::Relaxed);
                let got = graph.evaluate_pass_group_copies(&xs, P, 2).unwrap();
                group_pass::SPLIT_BYTES.store(1 << 20, std::sync::atomic::Ordering::Relaxed);
                assert_eq!(got, expected, "side {side}, {count} points, split {split}");
            }
        }
    }
}

/// What a pass costs when each group's part of the graph is copied out
/// before its steps, as a pass reading its graph group by group from a file
/// would hold it, against the pass on the graph in memory; and a pass of 8
/// points against one of 16 (`HEX_STREAM_SIDES=14-16 cargo test --release -p
/// tally-kernels --lib -- --ignored hex_streamed_pass_cost --nocapture`; one
/// thread, so that the times are CPU).
#[test]
#[ignore]
fn hex_streamed_pass_cost() {
    let sides = sides_from_env("HEX_STREAM_SIDES", "12-13");
    for side in sides {
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let xs: Vec<u32> = (0..16u32).map(|i| i * 7919 + 2).collect();
        let time = |copies: bool, points: usize| {
            let started = std::time::Instant::now();
            let values: Vec<u32> = xs
                .chunks(points)
                .flat_map(|batch| match copies {
                    true => graph.evaluate_pass_group_copies(batch, P, 1).unwrap(),
                    false => graph
                        .evaluate_pass(batch, P, 1, &Control::new(), None, &|_| {})
                        .unwrap(),
                })
                .collect();
            (started.elapsed().as_secs_f64(), values)
        };
        let (memory16, expected) = time(false, 16);
        let (copied16, values16) = time(true, 16);
        let (memory8, values8m) = time(false, 8);
        let (copied8, values8) = time(true, 8);
        assert!(values16 == expected && values8 == expected && values8m == expected);
        let largest = graph.blocks.iter().map(|b| b.max_group).max().unwrap();
        let group_bytes = |b: &super::graph::Block| {
            b.cols.iter().map(|c| c.bytes()).sum::<usize>() + 4 * b.from_prev.len()
        };
        let pass_graph: usize = graph.blocks.iter().map(group_bytes).sum();
        println!(
            "side {side}: {} states; 16 points: in memory {memory16:.2} s, group copies {copied16:.2} s \
             ({:.3}x); 8 points twice: in memory {memory8:.2} s ({:.3}x of 16), group copies \
             {copied8:.2} s ({:.3}x of 16 in memory); graph read a pass {:.1} MB a row, largest group {largest} states",
            graph.num_states(),
            copied16 / memory16,
            memory8 / memory16,
            copied8 / memory16,
            pass_graph as f64 / 1e6,
        );
    }
}

#[test]
fn hex_evaluate_points_cancelled() {
    let graph = HexGraph::build(6).unwrap();
    let control = Control::new();
    control.cancel();
    for threads in [1, 2] {
        assert_eq!(
            graph.evaluate_points_with(&[2, 3], P, threads, &control),
            Err(Error::Cancelled)
        );
    }
}

#[test]
fn hex_points_corruption_is_caught() {
    for side in [3u32, 6, 9] {
        let graph = HexGraph::build(side).unwrap();
        let evaluations = layout_evaluations(&graph, P);
        // Any single wrong value: a solving point, a spare or the check point.
        for i in 0..evaluations.len() {
            for delta in [1, P - 1, 123_456] {
                let mut bad = evaluations.clone();
                bad[i].1 = ((u64::from(bad[i].1) + u64::from(delta)) % u64::from(P)) as u32;
                let message = internal_message(solve_crossings(side, P, &bad));
                assert_eq!(
                    message,
                    format!(
                        "the evaluation at x = {} disagrees with the solved counts (a corrupted evaluation?)",
                        bad[i].0
                    ),
                    "side {side}, evaluation {i}"
                );
            }
        }
        // Two evaluations at the same point that disagree.
        let mut twice = evaluations.clone();
        twice.push((evaluations[0].0, (evaluations[0].1 + 1) % P));
        assert!(internal_message(solve_crossings(side, P, &twice)).contains("disagrees"));
        // A value that is not a residue.
        let mut huge = evaluations.clone();
        huge[0].1 = P;
        assert!(invalid_message(solve_crossings(side, P, &huge)).contains("not a residue"));
    }
}

#[test]
fn hex_points_singular_sets() {
    let side = 7u32;
    let graph = HexGraph::build(side).unwrap();
    let expected = swept_full(&graph, P);
    let value = |x: u32| eval_poly(&expected, x, P);
    let layout = points_layout(side, P);
    let k = layout.unknowns;
    let mut points = layout.points.clone();
    // x = 1 (an empty equation) and a repeated point among the solving points:
    // the spares make up for them.
    points[0] = 1;
    points[1] = points[2];
    let evaluations: Vec<(u32, u32)> = points.iter().map(|&x| (x, value(x))).collect();
    assert_eq!(solve_crossings(side, P, &evaluations).unwrap(), expected);
    // x and 1/x give proportional equations; p - 1 and 0 are no better.
    let mut points = layout.points.clone();
    points[0] = inv_mod(u64::from(points[3]), u64::from(P)).unwrap() as u32;
    points[1] = P - 1;
    let evaluations: Vec<(u32, u32)> = points.iter().map(|&x| (x, value(x))).collect();
    assert_eq!(solve_crossings(side, P, &evaluations).unwrap(), expected);
    // Three useless points: too few independent equations are refused.
    let mut points = layout.points.clone();
    points[0] = 1;
    points[1] = points[2];
    points[3] = points[4];
    let evaluations: Vec<(u32, u32)> = points.iter().map(|&x| (x, value(x))).collect();
    assert!(
        invalid_message(solve_crossings(side, P, &evaluations))
            .starts_with("the points do not determine the counts (singular even with spares)")
    );
    // K evaluations leave nothing to check with.
    let few: Vec<(u32, u32)> = layout.points[..k].iter().map(|&x| (x, value(x))).collect();
    assert!(invalid_message(solve_crossings(side, P, &few)).contains("too few evaluations"));
    // K + 1 independent ones are enough: K to solve, one to check.
    let enough: Vec<(u32, u32)> = layout.points[..=k].iter().map(|&x| (x, value(x))).collect();
    assert_eq!(solve_crossings(side, P, &enough).unwrap(), expected);
    // Sides 1 and 2 have no unknowns; the evaluations are still checked.
    for side in [1u32, 2] {
        let graph = HexGraph::build(side).unwrap();
        let expected = swept_full(&graph, P);
        assert_eq!(solve_crossings(side, P, &[]).unwrap(), expected);
        let evaluations = layout_evaluations(&graph, P);
        assert_eq!(solve_crossings(side, P, &evaluations).unwrap(), expected);
        let mut bad = evaluations.clone();
        bad[0].1 ^= 1;
        assert!(internal_message(solve_crossings(side, P, &bad)).contains("disagrees"));
    }
    assert!(solve_crossings(17, P, &[]).is_err());
    assert!(solve_crossings(7, 49, &[]).is_err());
}

/// Exact `C_0..C_M` through the residues modulo [`exact_primes`], each from the
/// sweep or, when `points`, from the points solver.
fn exact_counts(side: u32, points: bool) -> Vec<num_bigint::BigUint> {
    let graph = HexGraph::build(side).unwrap();
    let primes = exact_primes(side);
    let residues: Vec<Vec<u32>> = primes
        .iter()
        .map(|&p| {
            if points {
                solve_crossings(side, p, &layout_evaluations(&graph, p)).unwrap()
            } else {
                swept_full(&graph, p)
            }
        })
        .collect();
    exact_crossings(side, &primes, &residues).unwrap()
}

#[test]
fn hex_exact_counts_and_games() {
    let big = |v: u128| num_bigint::BigUint::from(v);
    let public: [u128; 4] = [1, 24, 257_760, 10_663_950_528_000];
    for (i, &h) in public.iter().enumerate() {
        let side = i as u32 + 1;
        for points in [false, true] {
            let counts = exact_counts(side, points);
            assert_eq!(exact_game_count(side, &counts), big(h), "H({side})");
        }
    }
    let as_u64 = |c: &[num_bigint::BigUint]| -> Vec<u64> {
        c.iter().map(|v| u64::try_from(v).unwrap()).collect()
    };
    assert_eq!(
        as_u64(&exact_counts(3, true)),
        [0, 0, 0, 8, 42, 84, 76, 36, 9, 1]
    );
    assert_eq!(
        as_u64(&exact_counts(4, true)),
        [
            0, 0, 0, 0, 20, 228, 1158, 3420, 6435, 8020, 6850, 4140, 1800, 560, 120, 16, 1
        ]
    );
    // Larger sides: the exact H(N) reduced modulo p is the residue of the sweep;
    // C_N = (N + 1) 2^(N-2).
    for side in 5..=8u32 {
        let counts = exact_counts(side, side == 6);
        assert!(!exact_primes(side).is_empty());
        let games = exact_game_count(side, &counts);
        let residue = u32::try_from(&(games % num_bigint::BigUint::from(P))).unwrap();
        let graph = HexGraph::build(side).unwrap();
        assert_eq!(
            residue,
            game_count(side, &serial(&graph, P), P),
            "side {side}"
        );
        assert_eq!(
            counts[side as usize],
            big(u128::from(side + 1) << (side - 2))
        );
    }
    assert_eq!(exact_primes(6).len(), 2);
}

#[test]
fn hex_exact_primes_suffice() {
    let mut previous = 0;
    for side in 1..=16u32 {
        let m = (side * side) as usize;
        let primes = exact_primes(side);
        let mut binom = num_bigint::BigUint::from(1u32);
        for k in 1..=m / 2 {
            binom = binom * num_bigint::BigUint::from(m - k + 1) / num_bigint::BigUint::from(k);
        }
        let product = |ps: &[u32]| {
            ps.iter().fold(num_bigint::BigUint::from(1u32), |acc, &p| {
                acc * num_bigint::BigUint::from(p)
            })
        };
        assert!(product(&primes) > binom, "side {side}");
        // No more primes than needed, largest first, all valid moduli.
        assert!(product(&primes[..primes.len() - 1]) <= binom, "side {side}");
        assert_eq!(primes[0], 2_147_483_647);
        assert!(primes.windows(2).all(|w| w[0] > w[1]));
        assert!(primes.iter().all(|&p| validate(side, p).is_ok()));
        assert!(primes.len() >= previous);
        previous = primes.len();
    }
    assert_eq!(exact_primes(16).len(), 9);
}

#[test]
fn hex_exact_crossings_checks() {
    let side = 5u32;
    let graph = HexGraph::build(side).unwrap();
    let primes = exact_primes(side);
    let good: Vec<Vec<u32>> = primes.iter().map(|&p| swept_full(&graph, p)).collect();
    exact_crossings(side, &primes, &good).unwrap();
    // A wrong residue breaks C_k + C_(M-k) = binom(M, k) or a bound.
    for k in [5usize, 9, 12, 20] {
        let mut bad = good.clone();
        bad[0][k] = (bad[0][k] + 1) % primes[0];
        assert!(
            matches!(
                exact_crossings(side, &primes, &bad),
                Err(Error::Internal(_))
            ),
            "k {k}"
        );
    }
    // C_N and C_(M-N) moved together keep C_k + C_(M-k) = binom(M, k): the
    // count of shortest paths catches it.
    let (n, m) = (side as usize, (side * side) as usize);
    let mut bad = good.clone();
    for (list, &p) in bad.iter_mut().zip(&primes) {
        list[n] = (list[n] + 1) % p;
        list[m - n] = (list[m - n] + p - 1) % p;
    }
    match exact_crossings(side, &primes, &bad) {
        Err(Error::Internal(message)) => assert!(message.contains("shortest paths"), "{message}"),
        other => panic!("expected the shortest-path check, got {other:?}"),
    }
    // Too few primes for side 6, a foreign prime, lists of the wrong length.
    let graph6 = HexGraph::build(6).unwrap();
    let one = vec![swept_full(&graph6, P)];
    assert!(matches!(
        exact_crossings(6, &[P], &one),
        Err(Error::InvalidArgument(m)) if m.contains("does not exceed")
    ));
    assert!(exact_crossings(side, &[P, P], &[good[0].clone(), good[0].clone()]).is_err());
    assert!(exact_crossings(side, &primes, &[good[0][..10].to_vec()]).is_err());
    assert!(exact_crossings(side, &[], &[]).is_err());
}

#[test]
fn hex_full_crossings_identity() {
    for side in 1..=6u32 {
        let graph = HexGraph::build(side).unwrap();
        let half = serial(&graph, P);
        let m = (side * side) as usize;
        assert_eq!(full_crossings(side, &half, P), complete(m, &half, P));
        // At x = 1 the completed polynomial is 2^(M-1).
        let full = full_crossings(side, &half, P);
        assert_eq!(
            eval_poly(&full, 1, P),
            crate::modular::pow_mod(2, m as u64 - 1, u64::from(P)) as u32
        );
    }
}

#[test]
fn hex_points_solver_large_sides() {
    // Unknowns drawn at random: the layout's points determine them at every
    // side up to 16, for the default prime and for every prime of the exact
    // count (which share the layout of their smallest).
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for side in 10..=16u32 {
        let m = (side * side) as usize;
        let primes = exact_primes(side);
        let layout = points_layout(side, *primes.iter().min().unwrap());
        for p in std::iter::once(P).chain(primes) {
            let mut half = vec![0u32; m / 2 + 1];
            for c in half[side as usize..].iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *c = (seed % u64::from(p)) as u32;
            }
            // For even M, C_(M/2) is known: binom(M, M/2) / 2.
            if m.is_multiple_of(2) {
                let binom = binomials_mod(m, p)[m / 2];
                half[m / 2] =
                    (u64::from(binom) * inv_mod(2, u64::from(p)).unwrap() % u64::from(p)) as u32;
            }
            let full = full_crossings(side, &half, p);
            let evaluations: Vec<(u32, u32)> = layout
                .points
                .iter()
                .map(|&x| (x, eval_poly(&full, x, p)))
                .collect();
            assert_eq!(
                solve_crossings(side, p, &evaluations).unwrap(),
                full,
                "side {side} p {p}"
            );
        }
    }
}

/// How the graph's bytes divide among its parts, and how its gather lists
/// are laid out, for choosing how to shrink or split it past side 18 (`cargo
/// test --release -p tally-kernels -- --ignored hex_graph_layout
/// --nocapture`, `HEX_LAYOUT_SIDES=12-16`). Per block: its groups, the
/// largest, and per column how many other sources lie within 2^8 and 2^16
/// positions of their group's start, and how many sit at the same rank in
/// their chunk as their target in its own (a source a sweep could compute).
#[test]
#[ignore]
fn hex_graph_layout() {
    let sides = sides_from_env("HEX_LAYOUT_SIDES", "12-14");
    for side in sides {
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let n = graph.num_states() as f64;
        let per_state = |bytes: usize| bytes as f64 / n;
        println!(
            "side {side}: {} states, {:.1} bytes a state (masks {:.1}, narrow masks {:.1})",
            graph.num_states(),
            per_state(graph.memory_bytes()),
            per_state(8 * graph.masks.capacity()),
            per_state(4 * graph.narrow_masks.capacity()),
        );
        for (b, block) in graph.blocks.iter().enumerate() {
            let orders = 4
                * (block.members.capacity()
                    + block.position.capacity()
                    + block.masks.capacity()
                    + block.from_prev.capacity());
            let width = block.cols.len();
            let mut line = format!(
                "  block {b} (columns {}..{}): orders {:.1} B, {} groups, largest {}, {} chunks;",
                block.first_col,
                block.first_col + width,
                per_state(orders),
                block.groups(),
                block.max_group,
                block.chunk_offsets.len() - 1,
            );
            // The group and chunk of every position.
            let mut group_of = vec![0u32; block.members.len()];
            for g in 0..block.groups() {
                let range = block.group_offsets[g] as usize..block.group_offsets[g + 1] as usize;
                group_of[range].fill(g as u32);
            }
            let mut chunk_of = vec![0u32; block.members.len()];
            for c in 0..block.chunk_offsets.len() - 1 {
                let range = block.chunk_offsets[c] as usize..block.chunk_offsets[c + 1] as usize;
                chunk_of[range].fill(c as u32);
            }
            for (k, gather) in block.cols.iter().enumerate() {
                let (mut near8, mut near16, mut aligned, mut total) = (0u64, 0u64, 0u64, 0u64);
                let mut offset = 0;
                for pos in 0..gather.info.len() {
                    let count = gather.count(pos);
                    let group_start = block.group_offsets[group_of[pos] as usize] as usize;
                    let chunk = chunk_of[pos] as usize;
                    let rank = pos - block.chunk_offsets[chunk] as usize;
                    let partner = chunk ^ (1 << k);
                    for &source in &gather.others[offset..offset + count] {
                        let source = source as usize;
                        total += 1;
                        near8 += u64::from(source - group_start < 1 << 8);
                        near16 += u64::from(source - group_start < 1 << 16);
                        let source_rank =
                            source.wrapping_sub(block.chunk_offsets[partner] as usize);
                        aligned +=
                            u64::from(chunk_of[source] as usize == partner && source_rank == rank);
                    }
                    offset += count;
                }
                let share = |x: u64| 100.0 * x as f64 / total.max(1) as f64;
                line += &format!(
                    " col {}: {:.2} others a state ({:.1} B), {:.0}%/{:.0}% within 2^8/2^16, {:.0}% aligned;",
                    block.first_col + k,
                    total as f64 / n,
                    per_state(gather.bytes()),
                    share(near8),
                    share(near16),
                    share(aligned),
                );
            }
            println!("{line}");
        }
    }
}

/// The graph built in parts against the build by search: CPU time and the
/// process's peak memory of each (`HEX_PARTS_SIDES=16-17 cargo test
/// --release -p tally-kernels --lib -- --ignored hex_parts_build_cost
/// --nocapture`; parts in files of `HEX_SPILL_DIR`). The parts are built one
/// after another on two threads, first, so that the peak they show is theirs;
/// then a pass of 8 points over the joined parts against one over the
/// searched graph spilled.
#[test]
#[ignore]
fn hex_parts_build_cost() {
    let sides = sides_from_env("HEX_PARTS_SIDES", "12-13");
    let base = std::env::var("HEX_SPILL_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let peak_mb = || process_mb("VmHWM:");
    // User and system time of the process (fields 14 and 15 of its stat, in
    // ticks of 1/100 s).
    let cpu = || -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
    };
    for side in sides {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let count = crate::hex::graph_part_count(side)
            .max(4)
            .min(crate::hex::max_graph_parts(side));
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let (started, cpu0) = (std::time::Instant::now(), cpu());
        let mut parts = Vec::new();
        for part in 0..count {
            let mut spill = FileSpill::create(&dir.path().join(format!("part-{part}")));
            parts.push(
                crate::hex::build_graph_part(side, part, count, 2, &Control::new(), &mut spill)
                    .unwrap(),
            );
        }
        let (parts_wall, parts_cpu, parts_peak) =
            (started.elapsed().as_secs_f64(), cpu() - cpu0, peak_mb());
        let joined = SpilledGraph::open_parts(side, parts).unwrap();
        println!(
            "side {side}: {count} parts built in {parts_wall:.1} s ({parts_cpu:.1} s CPU), peak \
             {parts_peak:.0} MB; {:.0} MB in all",
            joined.spilled_bytes() as f64 / 1e6
        );
        let (started, cpu0) = (std::time::Instant::now(), cpu());
        let graph = HexGraph::build_parallel(side, 2).unwrap();
        let mut spill = FileSpill::create(&dir.path().join("searched"));
        let searched = graph.spill(&mut spill).unwrap();
        println!(
            "  searched and spilled: {:.1} s ({:.1} s CPU), peak {:.0} MB",
            started.elapsed().as_secs_f64(),
            cpu() - cpu0,
            peak_mb()
        );
        drop(graph);
        let xs: Vec<u32> = (0..8u32).map(|i| i * 7919 + 2).collect();
        let mut values = Vec::new();
        for (what, g) in [("parts", &joined), ("searched", &searched)] {
            let (started, cpu0) = (std::time::Instant::now(), cpu());
            let control = Control::new();
            values.push(
                g.evaluate_pass(&xs, P, &PassOptions::new(1, &control))
                    .unwrap(),
            );
            println!(
                "  a pass of 8 points over the {what} graph: {:.1} s ({:.1} s CPU)",
                started.elapsed().as_secs_f64(),
                cpu() - cpu0
            );
        }
        assert_eq!(values[0], values[1]);
    }
}
