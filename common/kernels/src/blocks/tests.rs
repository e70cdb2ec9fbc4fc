//! Tests of the blocks kernel: the Project Euler values, a brute force over
//! every placement that shares no code with the kernel, the layer rule driven
//! slice by slice, move symmetry, the file format's rejections, frontier bytes
//! and cancellation.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::{Control, Error};

/// The small example of Project Euler 766 (208 configurations): an L piece,
/// seven interchangeable unit squares, two empty cells.
const SAMPLE: &str = "\
; Project Euler 766, the example of the statement
aa1.
a23.
4567
same: 1234567
";

/// The classic Klotski board: a 2 x 2 block, a horizontal domino, four
/// vertical dominoes and four unit squares on 4 x 5.
const KLOTSKI: &str = "\
aXXb
aXXb
cdde
c12e
3..4
same: abce
same: 1234
";

/// Small puzzles for the brute force: blocked cells, shapes whose anchor is
/// not their leftmost cell, pieces of one shape that are not interchangeable,
/// puzzles where nothing moves.
const SMALL: &[(&str, &str)] = &[
    ("sample", SAMPLE),
    ("six distinct tiles", "12\n34\n5.\n"),
    (
        "dominoes around a hole",
        "aab.\nc#bd\nceed\nsame: ae\nsame: bcd\n",
    ),
    (
        "L, dominoes, blocked cell",
        "aab.\nacb.\ndd#e\nf..e\nsame: cf\nsame: be\n",
    ),
    ("mirrored L pieces", ".a..\naa#b\nc.bb\nsame: ab\n"),
    ("same shapes, not interchangeable", "ab..\ncd..\n..#.\n"),
    ("stuck", "a.\naa\n"),
    ("no pieces", "..\n.#\n"),
    ("klotski", KLOTSKI),
];

fn puzzle(text: &str) -> Puzzle {
    parse_puzzle(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn count(text: &str, threads: usize) -> BlocksCount {
    count_reachable(&puzzle(text), threads, &Control::new()).expect("count")
}

fn invalid_message(text: &str) -> String {
    match parse_puzzle(text) {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument for\n{text}\ngot {other:?}"),
    }
}

/// Asserts that `text` is rejected with a message naming `line` and `reason`.
fn assert_rejected(text: &str, line: &str, reason: &str) {
    let message = invalid_message(text);
    assert!(
        message.contains(line) && message.contains(reason),
        "message {message:?} should name {line:?} and {reason:?}"
    );
}

use crate::test_rng::Rng;

// ---------------------------------------------------------------------------
// Brute force: reads the grid itself, enumerates every placement of the
// pieces (pieces of one group as a sorted list of anchors), joins placements by
// legal unit slides and counts the component of the start with union-find.

struct Brute {
    rows: i32,
    cols: i32,
    blocked: Vec<bool>,
    /// Per type: the shape as offsets from its first cell in reading order.
    shapes: Vec<Vec<(i32, i32)>>,
    counts: Vec<usize>,
    start: Vec<Vec<(i32, i32)>>,
}

impl Brute {
    fn read(text: &str) -> Brute {
        let mut grid: Vec<Vec<char>> = Vec::new();
        let mut groups: Vec<Vec<char>> = Vec::new();
        for line in text.lines() {
            let line = line.split(';').next().unwrap().trim();
            if let Some(list) = line.strip_prefix("same:") {
                groups.push(list.chars().filter(|c| !c.is_whitespace()).collect());
            } else if !line.is_empty() {
                grid.push(line.chars().collect());
            }
        }
        let (rows, cols) = (grid.len() as i32, grid[0].len() as i32);
        let mut cells: HashMap<char, Vec<(i32, i32)>> = HashMap::new();
        let mut blocked = Vec::new();
        for (r, row) in grid.iter().enumerate() {
            for (c, &ch) in row.iter().enumerate() {
                blocked.push(ch == '#');
                if ch != '.' && ch != '#' {
                    cells.entry(ch).or_default().push((r as i32, c as i32));
                }
            }
        }
        let mut names: Vec<char> = cells.keys().copied().collect();
        names.sort_unstable();
        for name in names {
            if !groups.iter().any(|g| g.contains(&name)) {
                groups.push(vec![name]);
            }
        }
        let mut brute = Brute {
            rows,
            cols,
            blocked,
            shapes: Vec::new(),
            counts: Vec::new(),
            start: Vec::new(),
        };
        for group in &groups {
            let first = &cells[&group[0]];
            let (r0, c0) = first[0];
            brute
                .shapes
                .push(first.iter().map(|&(r, c)| (r - r0, c - c0)).collect());
            brute.counts.push(group.len());
            let mut anchors: Vec<(i32, i32)> = group.iter().map(|ch| cells[ch][0]).collect();
            anchors.sort_unstable();
            brute.start.push(anchors);
        }
        brute
    }

    /// Cells of a piece of type `t` anchored at `anchor`, if it lies on free
    /// ground (inside the grid, off blocked cells).
    fn cells(&self, t: usize, anchor: (i32, i32)) -> Option<Vec<(i32, i32)>> {
        self.shapes[t]
            .iter()
            .map(|&(dr, dc)| (anchor.0 + dr, anchor.1 + dc))
            .map(|(r, c)| {
                let inside = r >= 0 && c >= 0 && r < self.rows && c < self.cols;
                (inside && !self.blocked[(r * self.cols + c) as usize]).then_some((r, c))
            })
            .collect()
    }

    /// Every configuration: per type, a sorted list of anchors, no overlaps.
    fn enumerate(&self) -> Vec<Vec<Vec<(i32, i32)>>> {
        let slots: Vec<usize> = (0..self.shapes.len())
            .flat_map(|t| std::iter::repeat_n(t, self.counts[t]))
            .collect();
        let mut config = vec![Vec::new(); self.shapes.len()];
        let mut used = vec![false; (self.rows * self.cols) as usize];
        let mut all = Vec::new();
        self.place(&slots, &mut config, &mut used, &mut all);
        all
    }

    /// Places the pieces of `slots` one by one; pieces of one type in
    /// increasing anchor order, so each configuration is listed once.
    fn place(
        &self,
        slots: &[usize],
        config: &mut Vec<Vec<(i32, i32)>>,
        used: &mut [bool],
        all: &mut Vec<Vec<Vec<(i32, i32)>>>,
    ) {
        let Some((&t, rest)) = slots.split_first() else {
            all.push(config.clone());
            return;
        };
        let from = config[t].last().map_or(0, |&(r, c)| r * self.cols + c + 1);
        for index in from..self.rows * self.cols {
            let anchor = (index / self.cols, index % self.cols);
            let Some(cells) = self.cells(t, anchor) else {
                continue;
            };
            let slot = |&(r, c): &(i32, i32)| (r * self.cols + c) as usize;
            if cells.iter().any(|cell| used[slot(cell)]) {
                continue;
            }
            cells.iter().for_each(|cell| used[slot(cell)] = true);
            config[t].push(anchor);
            self.place(rest, config, used, all);
            config[t].pop();
            cells.iter().for_each(|cell| used[slot(cell)] = false);
        }
    }

    /// Number of configurations connected to the start by unit slides.
    fn reachable(&self) -> usize {
        let all = self.enumerate();
        let index: HashMap<&Vec<Vec<(i32, i32)>>, usize> =
            all.iter().enumerate().map(|(i, c)| (c, i)).collect();
        let mut parent: Vec<usize> = (0..all.len()).collect();
        fn root(parent: &mut [usize], mut x: usize) -> usize {
            while parent[x] != x {
                parent[x] = parent[parent[x]];
                x = parent[x];
            }
            x
        }
        for (i, config) in all.iter().enumerate() {
            let mut occupied: HashMap<(i32, i32), (usize, usize)> = HashMap::new();
            for (t, anchors) in config.iter().enumerate() {
                for (k, &a) in anchors.iter().enumerate() {
                    for c in self.cells(t, a).expect("enumerated on free ground") {
                        occupied.insert(c, (t, k));
                    }
                }
            }
            for (t, anchors) in config.iter().enumerate() {
                for (k, &(r, c)) in anchors.iter().enumerate() {
                    for (dr, dc) in [(-1, 0), (1, 0), (0, -1), (0, 1)] {
                        let target = (r + dr, c + dc);
                        let Some(cells) = self.cells(t, target) else {
                            continue;
                        };
                        if cells
                            .iter()
                            .any(|cell| occupied.get(cell).is_some_and(|&o| o != (t, k)))
                        {
                            continue;
                        }
                        let mut next = config.clone();
                        next[t][k] = target;
                        next[t].sort_unstable();
                        let j = index[&next];
                        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                        parent[a] = b;
                    }
                }
            }
        }
        let start = index[&self.start];
        let start_root = root(&mut parent, start);
        (0..all.len())
            .filter(|&i| root(&mut parent, i) == start_root)
            .count()
    }
}

/// Layer sizes of a plain breadth-first search with a set of every state seen:
/// no use of the layer rule.
fn layers_with_visited_set(p: &Puzzle) -> Vec<usize> {
    let mut seen = HashSet::from([p.initial_state()]);
    let mut layer = vec![p.initial_state()];
    let mut sizes = Vec::new();
    let mut out = Vec::new();
    while !layer.is_empty() {
        sizes.push(layer.len());
        let mut next = Vec::new();
        for &s in &layer {
            p.neighbours(s, &mut out);
            for &n in &out {
                if seen.insert(n) {
                    next.push(n);
                }
            }
        }
        layer = next;
    }
    sizes
}

/// Layer sizes of the search driven slice by slice through `expand_layer`,
/// each layer shipped through its byte encoding.
fn layers_by_slices(p: &Puzzle, slices: usize) -> Vec<usize> {
    let control = Control::new();
    let mut previous: Vec<u128> = Vec::new();
    let mut current = vec![p.initial_state()];
    let mut sizes = Vec::new();
    while !current.is_empty() {
        sizes.push(current.len());
        let mut parts = Vec::new();
        for s in 0..slices {
            let range = s * current.len() / slices..(s + 1) * current.len() / slices;
            let part = expand_layer(p, &current, &previous, range, &control).expect("expand");
            assert!(
                part.windows(2).all(|w| w[0] < w[1]),
                "slice output not sorted"
            );
            parts.push(part);
        }
        let mut next: Vec<u128> = parts.concat();
        next.sort_unstable();
        next.dedup();
        assert_eq!(merge_states(parts), next);
        let shipped = decode_states(&encode_states(&next)).expect("decode");
        assert_eq!(shipped, next);
        previous = std::mem::replace(&mut current, shipped);
    }
    sizes
}

// ---------------------------------------------------------------------------

#[test]
fn statement_example_has_208_configurations() {
    for threads in [1, 2, 3] {
        assert_eq!(count(SAMPLE, threads).configurations, 208);
    }
}

#[test]
fn project_euler_766() {
    let p = puzzle(PE766);
    assert_eq!(p.rows(), 5);
    assert_eq!(p.cols(), 6);
    assert_eq!(p.piece_count(), 14);
    assert_eq!(p.piece_types().len(), 6);
    assert_eq!(p.bits_per_cell(), 3);
    assert_eq!(p.state_bits(), 90);
    let one = count_reachable(&p, 1, &Control::new()).expect("count");
    assert_eq!(one.configurations, 2_613_742);
    let two = count_reachable(&p, 2, &Control::new()).expect("count");
    assert_eq!(one, two);
    assert_eq!(one.layers, 1369);
    assert_eq!(one.largest_layer, 12712);
}

#[test]
fn brute_force_agrees_on_small_puzzles() {
    for &(name, text) in SMALL {
        let expected = Brute::read(text).reachable();
        let got = count(text, 1);
        assert_eq!(got.configurations, expected as u64, "{name}");
        assert_eq!(count(text, 2), got, "{name}");
    }
    assert_eq!(Brute::read(SAMPLE).reachable(), 208);
    // Half the orderings of six distinct tiles on 3 x 2 are reachable.
    assert_eq!(Brute::read(SMALL[1].1).reachable(), 360);
    assert_eq!(count("a.\naa\n", 1).configurations, 1);
}

#[test]
fn layers_driven_by_slices_match_a_visited_set_search() {
    for text in [SAMPLE, KLOTSKI, SMALL[3].1, SMALL[4].1] {
        let p = puzzle(text);
        let reference = layers_with_visited_set(&p);
        let total: usize = reference.iter().sum();
        let counted = count_reachable(&p, 1, &Control::new()).expect("count");
        assert_eq!(counted.configurations, total as u64);
        assert_eq!(counted.layers as usize, reference.len());
        assert_eq!(
            counted.largest_layer as usize,
            *reference.iter().max().unwrap()
        );
        for slices in [1, 2, 3, 7] {
            assert_eq!(layers_by_slices(&p, slices), reference, "{slices} slices");
        }
    }
}

#[test]
fn moves_are_symmetric_and_stay_valid() {
    for text in [SAMPLE, KLOTSKI, SMALL[2].1, SMALL[3].1, SMALL[4].1] {
        let p = puzzle(text);
        let mut seen = HashSet::from([p.initial_state()]);
        let mut stack = vec![p.initial_state()];
        let (mut out, mut back) = (Vec::new(), Vec::new());
        while let Some(s) = stack.pop() {
            p.neighbours(s, &mut out);
            let distinct: HashSet<u128> = out.iter().copied().collect();
            assert_eq!(distinct.len(), out.len(), "repeated neighbour");
            for &n in &out {
                assert_ne!(n, s);
                p.check_state(n).expect("a neighbour is a configuration");
                p.neighbours(n, &mut back);
                assert!(
                    back.contains(&s),
                    "no way back from\n{}to\n{}",
                    p.render(n),
                    p.render(s)
                );
                if seen.insert(n) {
                    stack.push(n);
                }
            }
        }
    }
}

#[test]
fn a_slide_moves_one_piece_by_one_cell() {
    let p = puzzle(SAMPLE);
    assert_eq!(p.render(p.initial_state()), "aa1.\na11.\n1111\n");
    let mut out = Vec::new();
    p.neighbours(p.initial_state(), &mut out);
    let mut boards: Vec<String> = out.iter().map(|&s| p.render(s)).collect();
    boards.sort();
    assert_eq!(
        boards,
        [
            "aa.1\na11.\n1111\n",
            "aa1.\na1.1\n1111\n",
            "aa1.\na111\n111.\n"
        ]
    );
}

#[test]
fn anchors_give_the_initial_placement() {
    let p = puzzle(SAMPLE);
    let expected: Vec<(usize, usize, usize)> = vec![
        (0, 0, 0),
        (1, 0, 2),
        (1, 1, 1),
        (1, 1, 2),
        (1, 2, 0),
        (1, 2, 1),
        (1, 2, 2),
        (1, 2, 3),
    ];
    assert_eq!(p.anchors(p.initial_state()), expected);
    assert_eq!(puzzle("..\n.#\n").anchors(0), []);
}

#[test]
fn puzzle_description() {
    let p = puzzle(PE766);
    let names: Vec<&str> = p.piece_types().iter().map(|t| t.pieces.as_str()).collect();
    assert_eq!(names, ["ab", "cd", "ef", "123456", "X", "h"]);
    assert_eq!(p.piece_types()[0].shape, [(0, 0), (0, 1), (1, 0)]);
    assert_eq!(p.piece_types()[1].shape, [(0, 0), (1, -1), (1, 0)]);
    assert_eq!(
        p.render(p.initial_state()),
        ".aacaa\n.accae\n11XXee\n11XXec\n11hhcc\n"
    );
    let summary = p.describe();
    for part in ["5 x 6 grid", "2 empty", "14 pieces of 6 types", "90-bit"] {
        assert!(summary.contains(part), "{summary}");
    }
    let blocked = puzzle(SMALL[3].1);
    assert_eq!(blocked.blocked(), 1 << 10);
    assert!(blocked.describe().contains("1 blocked"));
}

#[test]
fn format_accepts_comments_blanks_and_spacing() {
    let text = "\
; a comment line

   aa1.   ; a row with a comment
a23.
4567

SAME : 1 2 3 4567 ; spaces and case
";
    let p = puzzle(text);
    assert_eq!(p.piece_types().len(), 2);
    assert_eq!(p.piece_types()[1].pieces, "1234567");
    assert_eq!(count(text, 1).configurations, 208);
    // Without `same:` lines the squares are distinct pieces: more configurations.
    let distinct = count("aa1.\na23.\n4567\n", 1).configurations;
    assert!(distinct > 208);
}

#[test]
fn format_rejections_name_line_and_reason() {
    assert_rejected("a..\n..\n", "line 2", "ragged");
    assert_rejected("; c\na.a\n...\n", "line 2", "piece 'a' is not connected");
    assert_rejected("a..\n...\n..a\n", "line 3", "piece 'a' is not connected");
    assert_rejected("ab\ncd\n", "line 1", "no empty cell");
    assert_rejected("\n\nab\nba\n", "line 3", "not connected");
    assert_rejected("a.*\n", "line 1, column 3", "unknown character '*'");
    assert_rejected("a.é\n", "line 1, column 3", "unknown character");
    assert_rejected("a .\n", "line 1, column 2", "blank inside a grid row");
    assert_rejected(
        "aab\n..b\nsame: ab\n",
        "line 3",
        "'a' and 'b' have different shapes",
    );
    assert_rejected("ab.\nsame: az\n", "line 2", "unknown piece 'z'");
    assert_rejected("ab.\nsame: a.\n", "line 2", "unknown piece '.'");
    assert_rejected(
        "abc.\nsame: ab\nsame: bc\n",
        "line 3",
        "piece 'b' is already in the 'same:' group of line 2",
    );
    assert_rejected("ab.\nsame: aba\n", "line 2", "piece 'a' is listed twice");
    assert_rejected("ab.\nsame: a\n", "line 2", "at least two pieces");
    assert_rejected("ab.\nsmae: ab\n", "line 2", "unknown directive 'smae'");
    assert_rejected("ab.\nsame: ab\n..\n", "line 3", "grid row after");
    assert!(invalid_message("; only a comment\n\n").contains("no grid"));
    // 9 x 15 = 135 cells.
    let wide = format!(
        "a{}\n{}",
        ".".repeat(14),
        format!("{}\n", ".".repeat(15)).repeat(8)
    );
    assert_rejected(&wide, "line 1", "limit is 128");
    // 64 cells x 3 bits (4 types) = 192 bits.
    let big = format!("; big\nabcd....\n{}", "........\n".repeat(7));
    assert_rejected(
        &big,
        "line 2",
        "64 cells x 3 bits per cell (4 piece types) = 192 bits",
    );
    // 64 cells x 2 bits (3 types) = 128 bits: accepted.
    let fits = format!("abc.....\n{}", "........\n".repeat(7));
    assert_eq!(puzzle(&fits).state_bits(), 128);
}

#[test]
fn full_width_states_work() {
    // 64 cells x 2 bits: the last cell's field is the top of the state, and
    // piece 'c' (code 3) starts there.
    let text = format!("{}####a...\n####.b.c\n", "########\n".repeat(6));
    let p = puzzle(&text);
    assert_eq!(p.state_bits(), 128);
    assert_eq!(p.initial_state() >> 126, 3);
    let layered = layers_by_slices(&p, 2);
    assert_eq!(layered, layers_with_visited_set(&p));
    assert_eq!(layered.iter().sum::<usize>(), 8 * 7 * 6);
    assert_eq!(count(&text, 2).configurations, 8 * 7 * 6);
}

#[test]
fn many_types_use_wide_fields() {
    // Three unit squares circle in a walled 2 x 2 corner; the other pieces
    // have no empty cell next to them and never move.
    for (text, bits) in [
        ("ab#ABC\nc.#DEF\n", 4),
        ("ab#ABC\nc.#DEF\n###GHI\nJKLMNO\n", 5),
    ] {
        let p = puzzle(text);
        assert_eq!(p.bits_per_cell(), bits);
        assert_eq!(count(text, 2).configurations, 12);
        assert_eq!(layers_by_slices(&p, 3), layers_with_visited_set(&p));
    }
}

#[test]
fn foreign_states_are_rejected() {
    let p = puzzle(SAMPLE);
    let s = p.initial_state();
    p.check_state(s).expect("initial state");
    let bits = p.bits_per_cell();
    let field = |cell: u32, code: u128| code << (cell * bits);
    // A state bit beyond the last cell.
    assert!(p.check_state(s | 1 << p.state_bits()).is_err());
    // A unit square removed; one added on an empty cell.
    assert!(p.check_state(s ^ field(2, 2)).is_err());
    assert!(p.check_state(s | field(3, 2)).is_err());
    // A unit square moved onto the L piece.
    assert!(p.check_state(s ^ field(2, 2) ^ field(1, 2)).is_err());
    // A code no type has (the sample has 2 types, codes 1 and 2).
    assert!(p.check_state(s | field(3, 3)).is_err());
    // The L piece anchored where it does not fit.
    assert!(p.check_state(s ^ field(0, 1) ^ field(3, 1)).is_err());
    // Through expand_layer: a state of another puzzle, unsorted layers, a bad slice.
    let other = puzzle(KLOTSKI).initial_state();
    let control = Control::new();
    assert!(matches!(
        expand_layer(&p, &[other], &[], 0..1, &control),
        Err(Error::InvalidArgument(_))
    ));
    assert!(expand_layer(&p, &[s, s], &[], 0..1, &control).is_err());
    assert!(expand_layer(&p, &[s], &[s + 1, s], 0..1, &control).is_err());
    assert!(expand_layer(&p, &[s], &[], 0..2, &control).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 1..0;
    assert!(expand_layer(&p, &[s], &[], backwards, &control).is_err());
    // Unchecked neighbours of garbage never panic.
    let mut rng = Rng(7);
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let garbage = (rng.next_u64() as u128) << 64 | rng.next_u64() as u128;
        p.neighbours(garbage, &mut out);
        let _ = p.render(garbage);
        assert!(p.check_state(garbage).is_err() || garbage == s);
    }
}

#[test]
fn frontier_bytes_round_trip() {
    let mut rng = Rng(11);
    let mut lists: Vec<Vec<u128>> = vec![
        vec![],
        vec![0],
        vec![u128::MAX],
        vec![0, u128::MAX],
        vec![1, 2, 3, 1 << 90, (1 << 90) + 1],
    ];
    for len in [10, 1000] {
        let mut v: Vec<u128> = (0..len)
            .map(|_| ((rng.next_u64() as u128) << 64 | rng.next_u64() as u128) >> rng.below(120))
            .collect();
        v.sort_unstable();
        v.dedup();
        lists.push(v);
    }
    lists.push(layers_by_slices_last(&puzzle(KLOTSKI)));
    for list in lists {
        let bytes = encode_states(&list);
        assert_eq!(decode_states(&bytes).expect("decode"), list);
        // Every truncation is refused.
        for cut in 0..bytes.len() {
            assert!(decode_states(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // So is anything appended.
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_states(&longer).is_err());
    }
    // A Klotski layer takes far less than 16 bytes per state.
    let layer = layers_by_slices_last(&puzzle(KLOTSKI));
    assert!(encode_states(&layer).len() < layer.len() * 8);
}

/// The largest layer of a puzzle's search.
fn layers_by_slices_last(p: &Puzzle) -> Vec<u128> {
    let control = Control::new();
    let (mut previous, mut current) = (Vec::new(), vec![p.initial_state()]);
    let mut largest = Vec::new();
    while !current.is_empty() {
        if current.len() > largest.len() {
            largest = current.clone();
        }
        let next = expand_layer(p, &current, &previous, 0..current.len(), &control).unwrap();
        previous = std::mem::replace(&mut current, next);
    }
    largest
}

#[test]
fn frontier_garbage_is_refused_without_panics() {
    let refused = |bytes: &[u8], reason: &str| match decode_states(bytes) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(reason), "{m:?} vs {reason:?}"),
        other => panic!("{bytes:?} gave {other:?}"),
    };
    refused(&[], "truncated");
    refused(&[2, 5], "2 states announced but only 1 bytes follow");
    refused(&[2, 5, 0], "not strictly increasing");
    refused(&[1, 0x80, 0x00], "shortest form");
    refused(&[1, 5, 9], "trailing");
    refused(&[0x80; 30], "longer than 19 bytes");
    let mut overflow = vec![1];
    overflow.extend([0xff; 18]);
    overflow.push(0x04);
    refused(&overflow, "overflows 128 bits");
    let mut sum = vec![2];
    sum.extend([0xff; 18]);
    sum.push(0x03); // u128::MAX
    sum.push(1); // + 1
    refused(&sum, "overflows 128 bits");
    let mut rng = Rng(3);
    for _ in 0..20_000 {
        let len = rng.below(40);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if !bytes.is_empty() && rng.below(2) == 0 {
            bytes[0] = rng.below(8) as u8; // plausible counts
        }
        if let Ok(states) = decode_states(&bytes) {
            // Only canonical encodings are accepted.
            assert_eq!(encode_states(&states), bytes);
        }
    }
}

#[test]
fn work_is_one_unit_per_configuration() {
    let control = Control::new();
    let counted = count_reachable(&puzzle(SAMPLE), 2, &control).expect("count");
    assert_eq!(control.work_done(), counted.configurations);
    assert!(count_reachable(&puzzle(SAMPLE), 0, &control).is_err());
}

#[test]
fn cancellation_stops_the_search() {
    let p = puzzle(PE766);
    let control = Control::new();
    control.cancel();
    assert_eq!(count_reachable(&p, 2, &control), Err(Error::Cancelled));
    let s = [p.initial_state()];
    assert_eq!(
        expand_layer(&p, &s, &[], 0..1, &control),
        Err(Error::Cancelled)
    );
    // Cancelled while running, once 50 000 units of work are done.
    let control = Control::cancelled_at_work(50_000);
    assert_eq!(count_reachable(&p, 2, &control), Err(Error::Cancelled));
}

#[test]
fn merging_keeps_one_of_each_state() {
    assert_eq!(merge_states(vec![]), Vec::<u128>::new());
    assert_eq!(
        merge_states(vec![
            vec![1, 4, 9],
            vec![],
            vec![2, 4, 10],
            vec![0, 9],
            vec![u128::MAX]
        ]),
        [0, 1, 2, 4, 9, 10, u128::MAX]
    );
}

#[test]
fn state_set_finds_what_it_holds() {
    use super::state_set::StateSet;
    let mut rng = Rng(5);
    let states: Vec<u128> = (0..5000)
        .map(|i| {
            if i % 3 == 0 {
                i as u128
            } else {
                (rng.next_u64() as u128) << 64 | rng.next_u64() as u128
            }
        })
        .collect();
    // Starts tiny, so it grows several times.
    let mut set = StateSet::with_capacity(1);
    for &s in &states {
        assert!(set.insert(s));
        assert!(!set.insert(s));
    }
    for &s in &states {
        assert!(set.contains(s));
    }
    let absent = (0..5000)
        .filter(|&i| !set.contains((i as u128) << 100))
        .count();
    assert!(absent >= 4999);
    assert!(!set.insert(u128::MAX));
    assert!(!set.contains(u128::MAX));
}

/// The sizes of the first `layers` layers of `p` by the single-process
/// search.
fn layers_by_search(p: &Puzzle, layers: usize) -> Vec<usize> {
    let control = Control::new();
    let mut previous: Vec<u128> = Vec::new();
    let mut current = vec![p.initial_state()];
    let mut sizes = Vec::new();
    for _ in 0..layers {
        sizes.push(current.len());
        let next = expand_layer(p, &current, &previous, 0..current.len(), &control).unwrap();
        previous = std::mem::replace(&mut current, next);
    }
    sizes
}

/// The sizes of the first `layers` layers of `p` by buckets (three a layer,
/// gathered again into one for the next), each equal to the single-process
/// search's.
fn layers_by_buckets_as_by_search(p: &Puzzle, layers: usize) -> Vec<usize> {
    let control = Control::new();
    let mut inbox = vec![super::start_bucket(p)];
    let mut sizes = Vec::new();
    for (layer, searched) in layers_by_search(p, layers).into_iter().enumerate() {
        let (states, out) = super::expand_bucket(p, inbox, 3, &control).unwrap();
        assert_eq!(states, searched as u64, "layer {layer}");
        sizes.push(searched);
        inbox = vec![super::LevelBucket {
            candidates: merge_states(out.iter().map(|b| b.candidates.clone()).collect()),
            current: merge_states(out.iter().map(|b| b.current.clone()).collect()),
            previous: merge_states(out.iter().map(|b| b.previous.clone()).collect()),
        }];
    }
    sizes
}

/// The benchmark puzzle of `examples/` (235,378,560 configurations, too many
/// for the suite): it parses as documented, and its first layers by buckets
/// equal the single-process search's first layers.
#[test]
fn the_large_example_puzzle_parses_and_starts_as_the_search_does() {
    let p = puzzle(include_str!("../../../../examples/puzzle-235m.blocks"));
    assert_eq!((p.rows(), p.cols()), (4, 6));
    assert_eq!(p.piece_count(), 14);
    assert_eq!(p.piece_types().len(), 6);
    assert_eq!(layers_by_buckets_as_by_search(&p, 12).len(), 12);
}

/// The benchmark puzzle past 10^9 configurations: the 235m puzzle with one
/// unit square told apart. It parses as documented, its first layers by
/// buckets equal the single-process search's, and each layer is bounded by
/// the 235m puzzle's: forgetting the mark maps a path to a path, so a
/// configuration of the 235m puzzle's layer `k` has a marked one in layer
/// `k`, and a marked one of layer `k` forgets to one of the 235m puzzle's
/// layers up to `k`, with the mark on one of its nine unit squares.
#[test]
fn the_two_billion_example_puzzle_starts_as_the_search_does_within_nine_times_the_235m_one() {
    let p = puzzle(include_str!("../../../../examples/puzzle-2g.blocks"));
    let plain = puzzle(include_str!("../../../../examples/puzzle-235m.blocks"));
    assert_eq!((p.rows(), p.cols()), (4, 6));
    assert_eq!(p.piece_count(), 14);
    assert_eq!(p.piece_types().len(), 7);
    let marked = layers_by_buckets_as_by_search(&p, 12);
    let mut unmarked_so_far = 0;
    for (layer, (&marked, unmarked)) in marked.iter().zip(layers_by_search(&plain, 12)).enumerate()
    {
        unmarked_so_far += unmarked;
        assert!(
            unmarked <= marked && marked <= 9 * unmarked_so_far,
            "layer {layer}: {marked} configurations against {unmarked} ({unmarked_so_far} so far)"
        );
    }
}
