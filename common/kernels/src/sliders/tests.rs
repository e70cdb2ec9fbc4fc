//! Tests of the sliders kernel: the check values of the seed, closed forms, and
//! brute force on board strings that shares no code with the kernel.

use std::collections::{HashMap, HashSet, VecDeque};

use super::arith::Arith;
use super::board::{Geometry, parse_board};
use super::state::Layout;
use super::*;
use crate::{Control, Error};

const E_BOARD: &str = "RRBBRBBBRWRBRRBB";

fn space(params: &SliderParams) -> SliderSpace {
    SliderSpace::build(params, &Control::new()).expect("build")
}

fn invalid_message(r: Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

use crate::test_rng::Rng;

/// Random boards for the tests.
trait RandomBoard {
    fn board(&mut self, cells: usize, counts: [usize; 3]) -> String;
}

impl RandomBoard for Rng {
    /// A random board with `counts` R, B, G tiles (the rest of the cells is one W).
    fn board(&mut self, cells: usize, counts: [usize; 3]) -> String {
        assert_eq!(counts.iter().sum::<usize>() + 1, cells);
        let mut v: Vec<u8> = std::iter::once(b'W')
            .chain(std::iter::repeat_n(b'R', counts[0]))
            .chain(std::iter::repeat_n(b'B', counts[1]))
            .chain(std::iter::repeat_n(b'G', counts[2]))
            .collect();
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
        String::from_utf8(v).unwrap()
    }
}

// ---- brute force on board strings, independent of the packed boards ----

/// Legal moves of a board string: (letter, board after the move).
fn string_moves(board: &[u8], rows: usize, cols: usize) -> Vec<(u8, Vec<u8>)> {
    let z = board.iter().position(|&c| c == b'W').unwrap();
    let (r, c) = (z / cols, z % cols);
    let mut out = Vec::new();
    let mut push = |letter: u8, src: usize| {
        let mut b = board.to_vec();
        b.swap(z, src);
        out.push((letter, b));
    };
    if c + 1 < cols {
        push(b'L', z + 1);
    }
    if c > 0 {
        push(b'R', z - 1);
    }
    if r + 1 < rows {
        push(b'U', z + cols);
    }
    if r > 0 {
        push(b'D', z - cols);
    }
    out
}

/// Breadth-first search over board strings: distances and the number of edges.
fn flood(rows: usize, cols: usize, start: &str) -> (HashMap<Vec<u8>, u32>, usize) {
    let mut dist = HashMap::new();
    let mut queue = VecDeque::new();
    dist.insert(start.as_bytes().to_vec(), 0u32);
    queue.push_back(start.as_bytes().to_vec());
    let mut degree_sum = 0;
    while let Some(b) = queue.pop_front() {
        let d = dist[&b];
        for (_, w) in string_moves(&b, rows, cols) {
            degree_sum += 1;
            if !dist.contains_key(&w) {
                dist.insert(w.clone(), d + 1);
                queue.push_back(w);
            }
        }
    }
    (dist, degree_sum / 2)
}

/// Every move sequence of length 0, 1, 2, ... up to `max_len`, without any
/// pruning: the first length reaching the target, the number of sequences of
/// that length reaching it and the exact sum of their checksums (computed with
/// `%`).
fn brute_force(p: &SliderParams, max_len: u32) -> Option<(u32, u128, u128)> {
    fn go(b: &[u8], left: u32, c: u64, p: &SliderParams, target: &[u8], acc: &mut (u128, u128)) {
        if left == 0 {
            if b == target {
                acc.0 += 1;
                acc.1 += u128::from(c);
            }
            return;
        }
        for (letter, w) in string_moves(b, p.rows as usize, p.cols as usize) {
            let c2 = (p.base * c + u64::from(letter)) % p.modulus;
            go(&w, left - 1, c2, p, target, acc);
        }
    }
    for len in 0..=max_len {
        let mut acc = (0u128, 0u128);
        go(p.start.as_bytes(), len, 0, p, p.target.as_bytes(), &mut acc);
        if acc.0 > 0 {
            return Some((len, acc.0, acc.1));
        }
    }
    None
}

/// All distinct arrangements of a multiset of letters.
fn arrangements(letters: &mut [u8], out: &mut Vec<Vec<u8>>) {
    fn rec(prefix: &mut Vec<u8>, counts: &mut [(u8, usize)], n: usize, out: &mut Vec<Vec<u8>>) {
        if prefix.len() == n {
            out.push(prefix.clone());
            return;
        }
        for i in 0..counts.len() {
            if counts[i].1 > 0 {
                counts[i].1 -= 1;
                prefix.push(counts[i].0);
                rec(prefix, counts, n, out);
                prefix.pop();
                counts[i].1 += 1;
            }
        }
    }
    letters.sort();
    let mut counts: Vec<(u8, usize)> = Vec::new();
    for &l in letters.iter() {
        match counts.last_mut() {
            Some((x, k)) if *x == l => *k += 1,
            _ => counts.push((l, 1)),
        }
    }
    rec(&mut Vec::new(), &mut counts, letters.len(), out);
}

fn binom(n: u128, k: u128) -> u128 {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// Enumerates the whole space from every prefix set of several sizes and checks
/// that the totals agree with each other and with the count over layers.
fn check_enumeration(s: &SliderSpace) -> PathSums {
    let control = Control::new();
    let whole = s.enumerate("", &control).unwrap();
    let dp = s.dp_totals();
    let p = u128::from(s.params().modulus);
    assert_eq!(dp.count, whole.count);
    assert_eq!(u128::from(dp.count_mod), whole.count % p);
    assert_eq!(u128::from(dp.checksum_sum_mod), whole.checksum_sum % p);
    assert_eq!(s.path_count(), whole.count);
    for min_count in [1usize, 2, 3, 7, 40, 1000] {
        let tasks = s.prefix_tasks(min_count);
        let depth = s.prefix_depth(min_count) as usize;
        assert_eq!(tasks.len() as u128, s.prefix_count(depth as u32));
        assert!(tasks.len() >= min_count || depth == s.shortest_length() as usize);
        assert!(tasks.iter().all(|t| t.len() == depth));
        assert!(tasks.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
        let mut total = PathSums::default();
        for t in &tasks {
            let part = s.enumerate(t, &control).unwrap();
            assert!(
                part.count > 0,
                "every prefix extends to a shortest sequence"
            );
            total.merge(part);
        }
        assert_eq!(total, whole, "min_count {min_count}");
    }
    whole
}

// ---- the check values of the seed ----

#[test]
fn checksum_of_the_statement() {
    assert_eq!(checksum("LULUR", 243, 100_000_007).unwrap(), 19_761_398);
    assert_eq!(checksum("ULLUR", 243, 100_000_007).unwrap(), 71_678_660);
    assert_eq!(checksum("", 243, 100_000_007).unwrap(), 0);
    assert_eq!(checksum("L", 243, 100_000_007).unwrap(), 76);
    assert!(invalid_message(checksum("LUX", 243, 100_000_007)).contains("'X' at position 3"));
    assert!(invalid_message(checksum("l", 243, 100_000_007)).contains("unknown move"));
    assert!(invalid_message(checksum("L", 243, 1)).contains("modulus must be at least 2"));
    assert!(invalid_message(checksum("L", 500, 300)).contains("base must be below"));
    assert!(invalid_message(checksum("L", 1 << 40, 1 << 41)).contains("too large"));
}

#[test]
fn lulur_turns_the_start_into_e() {
    assert_eq!(apply_moves(4, 4, DEFAULT_START, "LULUR").unwrap(), E_BOARD);
    assert_eq!(apply_moves(4, 4, DEFAULT_START, "ULLUR").unwrap(), E_BOARD);
    assert_eq!(apply_moves(4, 4, DEFAULT_START, "").unwrap(), DEFAULT_START);
    // Lower case and row separators are accepted, the output is canonical.
    assert_eq!(
        apply_moves(4, 4, "wrbb/rrbb/rrbb/rrbb", "LULUR").unwrap(),
        E_BOARD
    );
    assert_eq!(
        normalize_board(4, 4, "RRBB/RBBB/RWRB/RRBB").unwrap(),
        E_BOARD
    );
    let m = invalid_message(apply_moves(4, 4, DEFAULT_START, "LULURRRD"));
    assert!(m.contains("move 7 (R) is illegal"), "{m}");
    let m = invalid_message(apply_moves(4, 4, DEFAULT_START, "D"));
    assert!(
        m.contains("no tile above the empty cell at row 1, column 1"),
        "{m}"
    );
    // Each move is undone by the opposite one.
    let back = apply_moves(4, 4, E_BOARD, "LDRDR").unwrap();
    assert_eq!(back, DEFAULT_START);
}

#[test]
fn the_default_boards_span_102960_boards_and_154440_edges() {
    let s = space(&SliderParams::default());
    assert_eq!(s.reachable_boards(), 102_960);
    assert_eq!(s.edges(), 154_440);
    assert_eq!(board_count(&SliderParams::default()).unwrap(), 102_960);
    assert_eq!(16 * binom(15, 7), 102_960);
    assert_eq!(6435 * 48 / 2, 154_440);
}

#[test]
fn two_shortest_sequences_lead_to_e() {
    let params = SliderParams::new(4, 4, DEFAULT_START, E_BOARD);
    let s = space(&params);
    assert_eq!(s.shortest_length(), 5);
    assert_eq!(s.dag_boards(), 7);
    assert_eq!(s.prefix_tasks(usize::MAX), vec!["LULUR", "ULLUR"]);
    let sums = check_enumeration(&s);
    assert_eq!(
        sums,
        PathSums {
            count: 2,
            checksum_sum: 91_440_058
        }
    );
    assert_eq!(s.dp_totals().checksum_sum_mod, 91_440_058);
}

#[test]
fn the_project_euler_instance() {
    let s = space(&SliderParams::default());
    assert_eq!(s.shortest_length(), 32);
    assert_eq!(s.dag_boards(), 33);
    let sums = check_enumeration(&s);
    assert_eq!(sums.count, 1);
    // The single sequence replays from the start to the target, and its
    // checksum is the sum.
    let paths = s.prefix_tasks(usize::MAX);
    assert_eq!(paths.len(), 1);
    let path = &paths[0];
    assert_eq!(path.len(), 32);
    assert_eq!(
        apply_moves(4, 4, DEFAULT_START, path).unwrap(),
        DEFAULT_TARGET
    );
    let c = checksum(path, DEFAULT_BASE, DEFAULT_MODULUS).unwrap();
    assert_eq!(sums.checksum_sum, u128::from(c));
    assert_eq!(s.dp_totals().checksum_sum_mod, c);
    // Section 4 of the seed: as many L as R and U as D.
    let n = |ch| path.chars().filter(|&x| x == ch).count();
    assert_eq!((n('L'), n('U')), (n('R'), n('D')));
}

// ---- closed forms and brute force ----

#[test]
fn every_colouring_is_reachable_on_larger_boards() {
    // All arrangements are reachable when some colour has two tiles (the
    // numbered puzzle reaches half of all arrangements, and swapping two tiles of
    // one colour moves between the halves); edges: every colouring with the empty
    // cell on z has degree(z) neighbours.
    let cases: &[(u32, u32, [usize; 3])] = &[
        (2, 3, [2, 3, 0]),
        (2, 3, [1, 2, 2]),
        (3, 2, [4, 1, 0]),
        (3, 3, [4, 4, 0]),
        (3, 3, [3, 3, 2]),
        (2, 4, [3, 2, 2]),
        (2, 5, [4, 5, 0]),
        (3, 4, [4, 4, 3]),
        (4, 3, [1, 1, 9]),
        (4, 5, [6, 13, 0]),
        (5, 5, [3, 21, 0]),
        (5, 5, [0, 2, 22]),
    ];
    let mut rng = Rng(7);
    for &(rows, cols, counts) in cases {
        let cells = (rows * cols) as usize;
        let start = rng.board(cells, counts);
        let target = rng.board(cells, counts);
        let params = SliderParams::new(rows, cols, &start, &target);
        let s = space(&params);
        let t = cells as u128 - 1;
        let (k1, k2) = (counts[0] as u128, counts[1] as u128);
        let arrangements = binom(t, k1) * binom(t - k1, k2);
        assert_eq!(s.reachable_boards() as u128, cells as u128 * arrangements);
        assert_eq!(board_count(&params).unwrap(), cells as u128 * arrangements);
        let grid = Geometry::new(rows, cols).grid_edges() as u128;
        assert_eq!(s.edges() as u128, arrangements * grid, "{rows}x{cols}");
    }
}

#[test]
fn flood_fill_over_strings_agrees() {
    let cases: &[(u32, u32, [usize; 3])] = &[
        (2, 2, [1, 1, 1]),
        (2, 2, [2, 1, 0]),
        (2, 2, [0, 0, 3]),
        (2, 3, [2, 2, 1]),
        (3, 2, [3, 2, 0]),
        (3, 3, [3, 3, 2]),
        (2, 4, [3, 2, 2]),
        (4, 4, [7, 8, 0]),
    ];
    let mut rng = Rng(11);
    for &(rows, cols, counts) in cases {
        let cells = (rows * cols) as usize;
        let start = rng.board(cells, counts);
        let (dist, edges) = flood(rows as usize, cols as usize, &start);
        for _ in 0..5 {
            let target = rng.board(cells, counts);
            let params = SliderParams::new(rows, cols, &start, &target);
            match dist.get(target.as_bytes()) {
                Some(&d) => {
                    let s = space(&params);
                    assert_eq!(s.reachable_boards(), dist.len());
                    assert_eq!(s.edges(), edges);
                    assert_eq!(s.shortest_length(), d);
                    // The shortest-path graph by the seed's two-search test.
                    let (dist_t, _) = flood(rows as usize, cols as usize, &target);
                    let on_path = |b: &Vec<u8>| dist[b] + dist_t[b] == d;
                    let boards = dist.keys().filter(|b| on_path(b)).count();
                    let useful: usize = dist
                        .keys()
                        .filter(|b| on_path(b))
                        .map(|b| {
                            string_moves(b, rows as usize, cols as usize)
                                .iter()
                                .filter(|(_, w)| dist[w] == dist[b] + 1 && on_path(w))
                                .count()
                        })
                        .sum();
                    assert_eq!((s.dag_boards(), s.dag_moves()), (boards, useful));
                }
                None => {
                    let m = invalid_message(SliderSpace::build(&params, &Control::new()));
                    assert!(m.contains("cannot be reached"), "{m}");
                    assert!(m.contains(&format!("only {} of", dist.len())), "{m}");
                }
            }
        }
    }
}

#[test]
fn the_dense_index_is_a_bijection() {
    let cases: &[(u32, u32, &str)] = &[
        (2, 2, "WRBG"),
        (2, 3, "WRRBBG"),
        (3, 3, "WRRRBBBGG"),
        (3, 3, "WGGGGGGGB"),
        (2, 4, "WRRRRBBB"),
        (3, 4, "WRRRRRRBBBGG"),
        (2, 5, "WBBBBBGGGG"),
        (4, 4, "WRRRRRRRRRRRRRBG"),
        (3, 5, "WRRRRRRRRRRRBBG"),
        (5, 3, "WRRRRBBBBBBBBBB"),
        (5, 5, "WRRRRRRRRRRRRRRRRRRRRRBBG"),
        (2, 5, "WRRRBBBGGG"),
        (4, 5, "WRRRRRRRRRRRRRRRRBBG"),
        (5, 4, "WGRRRRRRRRRRRRRRRRBB"),
    ];
    for &(rows, cols, letters) in cases {
        let geom = Geometry::new(rows, cols);
        let mut all = Vec::new();
        arrangements(&mut letters.as_bytes().to_vec(), &mut all);
        let counts = parse_board(letters, &geom, "test").unwrap().counts;
        let layout = Layout::new(&geom, &counts);
        assert_eq!(layout.total() as usize, all.len());
        assert_eq!(layout.state_at(layout.total()), None);
        let mut seen = HashSet::new();
        for a in &all {
            let codes = parse_board(std::str::from_utf8(a).unwrap(), &geom, "test")
                .unwrap()
                .codes;
            let state = layout.state(&codes);
            assert_eq!(layout.codes(state), codes, "round trip");
            let i = layout.index(state);
            assert!(i < layout.total());
            assert!(seen.insert(i), "index {i} twice");
            assert_eq!(
                layout.state_at(i),
                Some(state),
                "index {i} back to its board"
            );
            // Every move on the masks is the move on the cells.
            let string_moves = string_moves(a, rows as usize, cols as usize);
            let mask_moves = layout.moves(state.blank());
            assert_eq!(string_moves.len(), mask_moves.len());
            for m in mask_moves {
                let (_, after) = string_moves.iter().find(|(l, _)| *l == m.letter).unwrap();
                let after = parse_board(std::str::from_utf8(after).unwrap(), &geom, "test")
                    .unwrap()
                    .codes;
                assert_eq!(layout.codes(layout.apply(m, state)), after);
            }
        }
    }
}

#[test]
fn brute_force_agrees_on_tiny_boards() {
    let cases: &[(u32, u32, [usize; 3], u32)] = &[
        (2, 2, [1, 1, 1], 8),
        (2, 2, [2, 1, 0], 8),
        (2, 3, [2, 2, 1], 12),
        (2, 3, [3, 2, 0], 12),
        (3, 2, [1, 2, 2], 12),
        (3, 3, [4, 4, 0], 10),
        (3, 3, [3, 3, 2], 10),
        (2, 4, [3, 2, 2], 10),
        (2, 3, [4, 1, 0], 12),
        (3, 3, [6, 1, 1], 10),
        (2, 4, [1, 5, 1], 10),
        (3, 3, [0, 1, 7], 10),
    ];
    let mut rng = Rng(2024);
    let mut checked = 0;
    let mut several = 0;
    for &(rows, cols, counts, max_len) in cases {
        let cells = (rows * cols) as usize;
        for round in 0..12 {
            let start = rng.board(cells, counts);
            let target = rng.board(cells, counts);
            let mut params = SliderParams::new(rows, cols, &start, &target);
            if round % 3 == 1 {
                params.base = 10;
                params.modulus = 97;
            }
            let built = SliderSpace::build(&params, &Control::new());
            let Ok(s) = built else {
                let m = invalid_message(built);
                assert!(m.contains("cannot be reached"));
                assert_eq!(brute_force(&params, 6), None, "2 x 2 cycle has 12 boards");
                continue;
            };
            if s.shortest_length() > max_len {
                // Too long to search blindly; still no shorter sequence exists.
                assert_eq!(
                    brute_force(&params, max_len.min(s.shortest_length() - 1)),
                    None
                );
                continue;
            }
            let (d, count, sum) = brute_force(&params, max_len).expect("reachable");
            assert_eq!(s.shortest_length(), d, "{start} -> {target}");
            let sums = check_enumeration(&s);
            assert_eq!((sums.count, sums.checksum_sum), (count, sum));
            checked += 1;
            if count > 1 {
                several += 1;
            }
        }
    }
    assert!(checked >= 80 && several >= 10, "{checked} {several}");
}

#[test]
fn single_colour_boards_count_lattice_paths() {
    // With one colour only the empty cell matters: from one corner to the other
    // the shortest sequences are the monotone lattice paths.
    for (rows, cols) in [(2u32, 3u32), (3, 3), (2, 4), (3, 4), (4, 4), (5, 5), (2, 5)] {
        let cells = (rows * cols) as usize;
        let start = format!("W{}", "G".repeat(cells - 1));
        let target = format!("{}W", "G".repeat(cells - 1));
        let params = SliderParams::new(rows, cols, &start, &target);
        let s = space(&params);
        let d = rows + cols - 2;
        assert_eq!(s.shortest_length(), d);
        assert_eq!(s.reachable_boards(), cells);
        let sums = check_enumeration(&s);
        assert_eq!(sums.count, binom(u128::from(d), u128::from(rows - 1)));
        let (bd, bcount, bsum) = brute_force(&params, d).unwrap();
        assert_eq!((bd, bcount, bsum), (d, sums.count, sums.checksum_sum));
    }
}

#[test]
fn layer_count_agrees_with_enumeration_on_larger_boards() {
    let cases: &[(u32, u32, [usize; 3])] = &[
        (3, 4, [4, 4, 3]),
        (4, 3, [6, 5, 0]),
        (2, 5, [3, 3, 3]),
        (5, 2, [2, 3, 4]),
        (4, 4, [2, 3, 10]),
        (4, 5, [4, 15, 0]),
        (3, 5, [7, 7, 0]),
        (5, 5, [2, 1, 21]),
        (4, 4, [1, 1, 13]),
        (4, 5, [2, 0, 17]),
        (5, 5, [1, 2, 21]),
        (5, 4, [2, 2, 15]),
    ];
    let mut rng = Rng(99);
    let mut several = 0;
    for &(rows, cols, counts) in cases {
        let cells = (rows * cols) as usize;
        let mut done = 0;
        let mut tries = 0;
        while done < 2 && tries < 50 {
            tries += 1;
            let start = rng.board(cells, counts);
            let target = rng.board(cells, counts);
            let mut params = SliderParams::new(rows, cols, &start, &target);
            if tries % 2 == 0 {
                params.base = 1_000_003;
                params.modulus = (1u64 << 40) - 87;
            }
            let s = space(&params);
            if s.path_count() > 200_000 {
                continue;
            }
            let sums = check_enumeration(&s);
            assert!(sums.checksum_sum < sums.count * u128::from(params.modulus));
            done += 1;
            if sums.count > 1 {
                several += 1;
            }
        }
        assert_eq!(done, 2, "{rows}x{cols}");
    }
    assert!(several >= 8, "{several}");
}

#[test]
fn start_equal_to_target() {
    let s = space(&SliderParams::new(4, 4, DEFAULT_START, DEFAULT_START));
    assert_eq!(s.shortest_length(), 0);
    assert_eq!(s.prefix_tasks(10), vec![String::new()]);
    let sums = s.enumerate("", &Control::new()).unwrap();
    assert_eq!(
        sums,
        PathSums {
            count: 1,
            checksum_sum: 0
        }
    );
    assert_eq!(
        s.dp_totals(),
        DpTotals {
            count: 1,
            count_mod: 1,
            checksum_sum_mod: 0
        }
    );
}

// ---- errors ----

#[test]
fn validation_errors_are_clear() {
    let ok = SliderParams::default();
    assert_eq!(validate(&ok), Ok(()));
    let with = |f: &dyn Fn(&mut SliderParams)| {
        let mut p = ok.clone();
        f(&mut p);
        invalid_message(validate(&p))
    };
    let m = with(&|p| p.rows = 6);
    assert_eq!(m, "rows must be between 2 and 5, got 6");
    let m = with(&|p| p.cols = 1);
    assert_eq!(m, "cols must be between 2 and 5, got 1");
    let m = with(&|p| p.start = "WRBBRRBBRRBBRRB".into());
    assert_eq!(m, "start board has 15 cells, a 4 x 4 board needs 16");
    let m = with(&|p| p.target = "WBRBBRBRRBRBBRBRB".into());
    assert_eq!(m, "target board has 17 cells, a 4 x 4 board needs 16");
    let m = with(&|p| p.start = "WRBBRXBBRRBBRRBB".into());
    assert!(m.starts_with("start board: unknown character 'X' at position 6 (row 2, column 2)"));
    let m = with(&|p| p.start = "WRBBRRBB/RRBBRRBB".into());
    assert!(m.contains("2 rows separated by '/'"), "{m}");
    let m = with(&|p| p.start = "WRBB/RRBBR/RBB/RRBB".into());
    assert!(m.contains("row 2 has 5 cells"), "{m}");
    let m = with(&|p| p.start = "WRBBRRBBRRBBRRBW".into());
    assert!(m.contains("2 empty cells W (positions 1, 16)"), "{m}");
    let m = with(&|p| p.start = "RRBBRRBBRRBBRRBB".into());
    assert!(m.contains("no empty cell"), "{m}");
    let m = with(&|p| p.target = "WRRBBRBRRBRBBRBR".into());
    assert!(
        m.contains("different tiles: the start has 7 R, 8 B, 0 G, the target has 8 R, 7 B, 0 G"),
        "{m}"
    );
    let m = with(&|p| p.target = "WBRBBRBRRBRBBRBG".into());
    assert!(m.contains("different tiles"), "{m}");
    let m = with(&|p| p.modulus = 1);
    assert!(m.contains("modulus must be at least 2"), "{m}");
    let m = with(&|p| p.base = p.modulus);
    assert!(m.contains("base must be below the modulus"), "{m}");
    let m = with(&|p| {
        p.base = 1 << 33;
        p.modulus = 1 << 34;
    });
    assert!(m.contains("too large"), "{m}");
    // 5 x 5 with three colours of eight tiles: far too many boards.
    let m = with(&|p| {
        p.rows = 5;
        p.cols = 5;
        p.start = format!("W{}{}{}", "R".repeat(8), "B".repeat(8), "G".repeat(8));
        p.target = p.start.clone();
    });
    assert!(m.contains("more than the limit"), "{m}");
    // Non-ASCII characters are reported, not a panic.
    let m = with(&|p| p.start = "WRBBRRBBRRBBRRBé".into());
    assert!(m.contains("'é' at position 16"), "{m}");
}

#[test]
fn an_unreachable_target_is_refused() {
    // On 2 x 2 the three tiles only rotate around the cycle: R, G, B in clockwise
    // order can never become B, G, R.
    let params = SliderParams::new(2, 2, "WRBG", "WBRG");
    let m = invalid_message(SliderSpace::build(&params, &Control::new()));
    assert!(
        m.starts_with("the target board cannot be reached from the start board"),
        "{m}"
    );
    assert!(m.contains("only 12 of the 24 boards"), "{m}");
    assert_eq!(brute_force(&params, 12), None);
}

#[test]
fn bad_prefixes_are_refused() {
    let s = space(&SliderParams::new(4, 4, DEFAULT_START, E_BOARD));
    let c = Control::new();
    assert!(invalid_message(s.enumerate("LR", &c)).contains("move 2 (R) does not lie"));
    assert!(invalid_message(s.enumerate("D", &c)).contains("move 1 (D)"));
    assert!(invalid_message(s.enumerate("LULURL", &c)).contains("more than the shortest"));
    assert!(invalid_message(s.enumerate("Lx", &c)).contains("unknown move 'x' at position 2"));
    assert_eq!(
        s.enumerate("LULUR", &c).unwrap(),
        PathSums {
            count: 1,
            checksum_sum: 19_761_398
        }
    );
    assert_eq!(s.enumerate("UL", &c).unwrap().count, 1);
}

#[test]
fn a_cancelled_control_stops_the_kernel() {
    let cancelled = Control::new();
    cancelled.cancel();
    let params = SliderParams::default();
    assert_eq!(
        SliderSpace::build(&params, &cancelled).err(),
        Some(Error::Cancelled)
    );
    let s = space(&params);
    assert_eq!(s.enumerate("", &cancelled), Err(Error::Cancelled));
    assert_eq!(s.dp_totals_checked(&cancelled), Err(Error::Cancelled));
    // Validation still comes first.
    let bad = SliderParams { rows: 9, ..params };
    assert!(matches!(
        SliderSpace::build(&bad, &cancelled),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn work_units_are_reported() {
    let control = Control::new();
    let s = SliderSpace::build(&SliderParams::default(), &control).unwrap();
    let after_build = control.work_done();
    assert!(after_build >= s.reachable_boards() as u64);
    s.enumerate("", &control).unwrap();
    assert!(control.work_done() > after_build);
}

#[test]
fn path_sums_merge_exactly() {
    let mut a = PathSums {
        count: 3,
        checksum_sum: u128::from(u64::MAX),
    };
    a.merge(PathSums {
        count: 4,
        checksum_sum: u128::from(u64::MAX),
    });
    assert_eq!(
        a,
        PathSums {
            count: 7,
            checksum_sum: 2 * u128::from(u64::MAX)
        }
    );
    assert_eq!(
        a.checked_merge(PathSums {
            count: u128::MAX,
            checksum_sum: 0
        }),
        None
    );
}

#[test]
fn barrett_reduction_matches_the_remainder() {
    let mut rng = Rng(5);
    for modulus in [
        2u64,
        3,
        97,
        100_000_007,
        (1 << 40) - 87,
        (1 << 62) + 1,
        u64::MAX,
    ] {
        let a = Arith::new(0, modulus).unwrap();
        for x in [
            0,
            1,
            modulus - 1,
            modulus,
            modulus.wrapping_mul(2),
            u64::MAX,
            u64::MAX - 1,
        ] {
            assert_eq!(a.reduce(x), x % modulus);
        }
        for _ in 0..10_000 {
            let x = rng.next_u64();
            assert_eq!(a.reduce(x), x % modulus, "{x} mod {modulus}");
        }
    }
}

#[test]
fn arbitrary_input_never_panics() {
    let alphabet: Vec<char> = "WRBGwrbg/LUD xé0".chars().collect();
    let mut rng = Rng(31);
    for _ in 0..3000 {
        let rows = rng.below(7) as u32;
        let cols = rng.below(7) as u32;
        let mut word = |max: usize| -> String {
            let len = rng.below(max + 1);
            (0..len)
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        };
        let (start, target, moves) = (word(30), word(30), word(12));
        let params = SliderParams {
            rows,
            cols,
            start: start.clone(),
            target,
            base: 243,
            modulus: 100_000_007,
        };
        let _ = validate(&params);
        let _ = apply_moves(rows, cols, &start, &moves);
        let _ = checksum(&moves, 243, 100_000_007);
        let _ = normalize_board(rows, cols, &start);
    }
    // Valid boards and random moves: an illegal move is an error, never a panic,
    // and legal ones agree with the brute-force moves on strings.
    for _ in 0..500 {
        let board = rng.board(12, [4, 4, 3]);
        let moves: String = (0..rng.below(10))
            .map(|_| ['L', 'R', 'U', 'D'][rng.below(4)])
            .collect();
        let mut b = board.as_bytes().to_vec();
        let mut legal = true;
        for m in moves.bytes() {
            match string_moves(&b, 3, 4).into_iter().find(|(l, _)| *l == m) {
                Some((_, w)) => b = w,
                None => legal = false,
            }
            if !legal {
                break;
            }
        }
        match apply_moves(3, 4, &board, &moves) {
            Ok(after) => assert!(legal && after.as_bytes() == b.as_slice()),
            Err(Error::InvalidArgument(m)) => assert!(!legal && m.contains("is illegal")),
            Err(e) => panic!("{e}"),
        }
    }
}

// ---- prefix weights and the balanced shard plan ----

/// Boards with thousands of shortest sequences: four blue corner tiles in a red
/// 5 x 5 board (the blank takes one to the opposite corner), and a three-colour
/// 4 x 4 board.
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

#[test]
fn prefix_weights_count_the_sequences_extending_them() {
    let control = Control::new();
    for &(rows, cols, start, target) in WEIGHTED {
        let s = space(&SliderParams::new(rows, cols, start, target));
        let total = s.path_count();
        for (min_count, parts) in [(1, 1), (4, 2), (16, 8), (64, 64), (3, 200)] {
            let tasks = s.balanced_prefix_tasks(min_count, parts);
            let depth = s.balanced_prefix_depth(min_count, parts);
            assert!(depth >= s.prefix_depth(min_count));
            assert_eq!(tasks.len() as u128, s.prefix_count(depth));
            assert!(
                tasks.windows(2).all(|w| w[0].0 < w[1].0),
                "sorted, distinct"
            );
            let heaviest = tasks.iter().map(|t| t.1).max().unwrap();
            assert_eq!(heaviest, s.heaviest_prefix(depth));
            // Deep enough for the balance asked for, or as deep as it may go.
            assert!(
                heaviest * 4 * parts as u128 <= total
                    || depth == s.shortest_length()
                    || s.prefix_count(depth + 1) > MAX_BALANCED_PREFIXES as u128,
                "{start}: depth {depth}, heaviest {heaviest} of {total}"
            );
            let mut sum = 0u128;
            for (prefix, weight) in &tasks {
                assert_eq!(s.prefix_weight(prefix).unwrap(), *weight);
                let before = control.work_done();
                let part = s.enumerate(prefix, &control).unwrap();
                assert_eq!(part.count, *weight, "{start}: prefix {prefix}");
                // The kernel's work units are the sequences it finds.
                assert_eq!(control.work_done() - before, *weight as u64);
                sum += weight;
            }
            assert_eq!(sum, total, "{start}: the weights sum to the path count");
        }
    }
}
