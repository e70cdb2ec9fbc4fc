//! Tests of the pegs kernel: the check values of the seed, and a reference model
//! built from board pictures and barycentric coordinates that shares no code
//! with the bitboards (plain enumeration of jump sequences, no memo, no
//! symmetry).

use std::collections::BTreeSet;

use super::memo::Memo;
use super::set::BoardSet;
use super::*;

const ENGLISH_PICTURE: [&str; 7] = [
    "  ooo  ", "  ooo  ", "ooooooo", "ooooooo", "ooooooo", "  ooo  ", "  ooo  ",
];
const FRENCH_PICTURE: [&str; 7] = [
    "  ooo  ", " ooooo ", "ooooooo", "ooooooo", "ooooooo", " ooooo ", "  ooo  ",
];
const DIAMOND_PICTURE: [&str; 9] = [
    "    o    ",
    "   ooo   ",
    "  ooooo  ",
    " ooooooo ",
    "ooooooooo",
    " ooooooo ",
    "  ooooo  ",
    "   ooo   ",
    "    o    ",
];

/// A map of the plane, about the centre of a cross board.
type PlaneMap = fn(i32, i32) -> (i32, i32);

/// A board described independently of the kernel: jumps as triples of hole
/// indices (hole number - 1) and symmetries as permutations of the indices.
struct Reference {
    holes: usize,
    jumps: Vec<(usize, usize, usize)>,
    symmetries: Vec<Vec<usize>>,
}

impl Reference {
    fn new(shape: BoardShape) -> Reference {
        match shape {
            BoardShape::English => Reference::cross(&ENGLISH_PICTURE),
            BoardShape::French => Reference::cross(&FRENCH_PICTURE),
            BoardShape::Triangle(side) => Reference::triangle(side as i32),
            BoardShape::Diamond => Reference::cross(&DIAMOND_PICTURE),
        }
    }

    /// Holes are the `o` of the picture, numbered in reading order; jumps go
    /// two cells in one of the four directions; symmetries are the 8 maps
    /// `(x, y) -> (+-x, +-y), (+-y, +-x)` about the centre.
    fn cross(picture: &[&str]) -> Reference {
        let centre = picture.len() as i32 / 2;
        let mut cells = Vec::new();
        for (y, line) in picture.iter().enumerate() {
            for (x, ch) in line.chars().enumerate() {
                if ch == 'o' {
                    cells.push((x as i32 - centre, y as i32 - centre));
                }
            }
        }
        let index = |p: (i32, i32)| cells.iter().position(|&c| c == p);
        let mut jumps = Vec::new();
        for (i, &(x, y)) in cells.iter().enumerate() {
            for (dx, dy) in [(1, 0), (-1, 0), (0, 1), (0, -1)] {
                if let (Some(o), Some(t)) =
                    (index((x + dx, y + dy)), index((x + 2 * dx, y + 2 * dy)))
                {
                    jumps.push((i, o, t));
                }
            }
        }
        let maps: [PlaneMap; 8] = [
            |x, y| (x, y),
            |x, y| (-x, y),
            |x, y| (x, -y),
            |x, y| (-x, -y),
            |x, y| (y, x),
            |x, y| (-y, x),
            |x, y| (y, -x),
            |x, y| (-y, -x),
        ];
        let symmetries = maps
            .iter()
            .map(|f| {
                cells
                    .iter()
                    .map(|&(x, y)| index(f(x, y)).unwrap())
                    .collect()
            })
            .collect();
        Reference {
            holes: cells.len(),
            jumps,
            symmetries,
        }
    }

    /// Holes in barycentric coordinates `(a, b, c)`, `a + b + c = side - 1`
    /// (row `a + b`, position `b` in the row); jumps go two cells along one of
    /// the six vectors with entries 1, -1, 0; symmetries permute `a, b, c`.
    fn triangle(side: i32) -> Reference {
        let mut cells = Vec::new();
        for row in 0..side {
            for pos in 0..=row {
                cells.push([row - pos, pos, side - 1 - row]);
            }
        }
        let index = |p: [i32; 3]| cells.iter().position(|&c| c == p);
        let mut jumps = Vec::new();
        for (i, &cell) in cells.iter().enumerate() {
            for d in [
                [1, -1, 0],
                [-1, 1, 0],
                [1, 0, -1],
                [-1, 0, 1],
                [0, 1, -1],
                [0, -1, 1],
            ] {
                let step = |k: i32| [cell[0] + k * d[0], cell[1] + k * d[1], cell[2] + k * d[2]];
                if let (Some(o), Some(t)) = (index(step(1)), index(step(2))) {
                    jumps.push((i, o, t));
                }
            }
        }
        let orders = [
            [0, 1, 2],
            [1, 0, 2],
            [0, 2, 1],
            [2, 1, 0],
            [1, 2, 0],
            [2, 0, 1],
        ];
        let symmetries = orders
            .iter()
            .map(|o| {
                cells
                    .iter()
                    .map(|c| index([c[o[0]], c[o[1]], c[o[2]]]).unwrap())
                    .collect()
            })
            .collect();
        Reference {
            holes: cells.len(),
            jumps,
            symmetries,
        }
    }

    /// Solutions from `start` (a hole number) by final hole index, by plain
    /// enumeration of every jump sequence.
    fn solutions_by_final_hole(&self, start: u32) -> Vec<u128> {
        let mut pegs = vec![true; self.holes];
        pegs[start as usize - 1] = false;
        let mut out = vec![0; self.holes];
        self.enumerate(&mut pegs, self.holes - 1, &mut out);
        out
    }

    fn enumerate(&self, pegs: &mut [bool], left: usize, out: &mut [u128]) {
        if left == 1 {
            out[pegs.iter().position(|&p| p).unwrap()] += 1;
            return;
        }
        for &(f, o, t) in &self.jumps {
            if pegs[f] && pegs[o] && !pegs[t] {
                (pegs[f], pegs[o], pegs[t]) = (false, false, true);
                self.enumerate(pegs, left - 1, out);
                (pegs[f], pegs[o], pegs[t]) = (true, true, false);
            }
        }
    }

    /// The number of jump sequences of length `depth` from `start`.
    fn sequences(&self, start: u32, depth: usize) -> u128 {
        fn go(r: &Reference, pegs: &mut [bool], depth: usize) -> u128 {
            if depth == 0 {
                return 1;
            }
            let mut n = 0;
            for &(f, o, t) in &r.jumps {
                if pegs[f] && pegs[o] && !pegs[t] {
                    (pegs[f], pegs[o], pegs[t]) = (false, false, true);
                    n += go(r, pegs, depth - 1);
                    (pegs[f], pegs[o], pegs[t]) = (true, true, false);
                }
            }
            n
        }
        let mut pegs = vec![true; self.holes];
        pegs[start as usize - 1] = false;
        go(self, &mut pegs, depth)
    }
}

impl Reference {
    /// The positions after `depth` jumps from `start`, as bit masks of hole
    /// indices, each reduced to the least of its images.
    fn orbits_after(&self, start: u32, depth: usize) -> BTreeSet<u64> {
        let mask = |pegs: &[bool]| {
            pegs.iter()
                .enumerate()
                .filter(|&(_, &p)| p)
                .fold(0u64, |m, (i, _)| m | 1 << i)
        };
        let mut layer = BTreeSet::from([mask(
            &(1..=self.holes as u32)
                .map(|h| h != start)
                .collect::<Vec<_>>(),
        )]);
        for _ in 0..depth {
            let mut next = BTreeSet::new();
            for &board in &layer {
                for &(f, o, t) in &self.jumps {
                    let has = |i: usize| board >> i & 1 == 1;
                    if has(f) && has(o) && !has(t) {
                        next.insert(board ^ (1 << f | 1 << o | 1 << t));
                    }
                }
            }
            layer = next;
        }
        layer
            .into_iter()
            .map(|board| {
                self.symmetries
                    .iter()
                    .map(|perm| {
                        (0..self.holes)
                            .filter(|&i| board >> i & 1 == 1)
                            .fold(0u64, |m, i| m | 1 << perm[i])
                    })
                    .min()
                    .unwrap()
            })
            .collect()
    }
}

/// The 41-hole diamond's first levels through the frontier kernel (its
/// sheared layout and table symmetries) against the reference's plain
/// enumeration: the jump sequences of each length, and the positions up to
/// symmetry.
#[test]
fn diamond_levels_match_plain_enumeration() {
    let game = PegGame::new(BoardShape::Diamond, None, None).unwrap();
    assert_eq!(game.start_hole(), 21);
    let reference = Reference::new(BoardShape::Diamond);
    let control = Control::new();
    let mut level = vec![levels::start_bucket(&game)];
    for depth in 1..=5 {
        let found = levels::expand_level(&game, depth - 1, level, 3, &control).unwrap();
        level = found.sent;
        let ways: u128 = level.iter().flat_map(|b| b.counts.iter()).sum();
        let boards: usize = level.iter().map(|b| b.boards.len()).sum();
        assert_eq!(
            ways,
            reference.sequences(21, depth as usize),
            "depth {depth}"
        );
        assert_eq!(
            boards,
            reference.orbits_after(21, depth as usize).len(),
            "depth {depth}"
        );
    }
}

fn solutions(shape: BoardShape, start: Option<u32>, end: Option<u32>) -> u128 {
    count_solutions(shape, start, end, 1, &Control::new())
        .unwrap()
        .solutions
}

fn invalid_message<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(m)) => m,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn all_shapes() -> Vec<BoardShape> {
    let mut shapes = vec![BoardShape::English, BoardShape::French, BoardShape::Diamond];
    shapes.extend((MIN_TRIANGLE_SIDE..=MAX_TRIANGLE_SIDE).map(BoardShape::Triangle));
    shapes
}

// ---- values ----

#[test]
fn triangle_five_counts() {
    let t5 = BoardShape::Triangle(5);
    assert_eq!(solutions(t5, None, None), 29_760);
    assert_eq!(solutions(t5, Some(1), None), 29_760);
    assert_eq!(solutions(t5, Some(2), None), 14_880);
    assert_eq!(solutions(t5, Some(4), None), 85_258);
    assert_eq!(solutions(t5, Some(5), None), 1_550);
}

#[test]
fn memoized_counts_match_plain_enumeration() {
    // Starts 1, 2, 4, 5 of the side-5 triangle are one hole of each symmetry
    // class; the side-4 triangle is tried from every hole.
    let cases = [(4, (1..=10).collect::<Vec<u32>>()), (5, vec![1, 2, 4, 5])];
    for (side, starts) in cases {
        let shape = BoardShape::Triangle(side);
        let reference = Reference::new(shape);
        for start in starts {
            let by_end = reference.solutions_by_final_hole(start);
            let total: u128 = by_end.iter().sum();
            assert_eq!(
                solutions(shape, Some(start), None),
                total,
                "{shape} from {start}"
            );
            for end in 1..=shape.holes() {
                assert_eq!(
                    solutions(shape, Some(start), Some(end)),
                    by_end[end as usize - 1],
                    "{shape} from {start} to {end}"
                );
            }
        }
    }
}

#[test]
fn symmetry_reduction_keeps_counts_and_shrinks_the_memo() {
    let cases = [
        (BoardShape::Triangle(5), Some(1), None),
        (BoardShape::Triangle(5), Some(4), Some(15)),
        (BoardShape::Triangle(6), Some(1), None),
        (BoardShape::Triangle(6), Some(1), Some(1)),
        (BoardShape::Triangle(6), Some(5), Some(13)),
        (BoardShape::Triangle(6), Some(13), Some(13)),
    ];
    for (shape, start, end) in cases {
        let game = PegGame::new(shape, start, end).unwrap();
        let reduced = game.count(&Control::new()).unwrap();
        let plain = game
            .clone()
            .without_symmetry()
            .count(&Control::new())
            .unwrap();
        assert_eq!(
            reduced.solutions, plain.solutions,
            "{shape} {start:?} {end:?}"
        );
        assert!(reduced.solutions > 0, "{shape} {start:?} {end:?}");
        assert!(
            reduced.memo_boards < plain.memo_boards,
            "{shape} {start:?} {end:?}: {} vs {}",
            reduced.memo_boards,
            plain.memo_boards
        );
    }
}

/// A board after `depth` jumps from the start of `game`, the jumps picked by
/// `seed`.
pub(super) fn random_descendant(game: &PegGame, depth: usize, mut seed: u64) -> Option<u64> {
    let mut board = game.start_board();
    for _ in 0..depth {
        let legal: Vec<&Jump> = game
            .jumps()
            .iter()
            .filter(|j| board & (j.from | j.over) == j.from | j.over && board & j.to == 0)
            .collect();
        if legal.is_empty() {
            return None;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        board ^= legal[(seed % legal.len() as u64) as usize].mask();
    }
    Some(board)
}

#[test]
fn symmetry_reduction_on_english_boards() {
    // Boards after 14 jumps (18 pegs): small enough to count without reduction.
    for end in [17, 2, 20] {
        // Without pruning: the pagodas differ with the symmetries in use.
        let game = PegGame::new(BoardShape::English, None, Some(end))
            .unwrap()
            .without_pruning();
        let plain = game.clone().without_symmetry();
        let mut solvable = 0;
        for seed in 1..5000 {
            let Some(board) = random_descendant(&game, 14, seed) else {
                continue;
            };
            let one = [PegTask {
                board,
                multiplicity: 1,
            }];
            let reduced = game.count_from(&one, &Control::new(), |_, _| {}).unwrap();
            let unreduced = plain.count_from(&one, &Control::new(), |_, _| {}).unwrap();
            assert_eq!(reduced.solutions, unreduced.solutions, "end {end}");
            if reduced.solutions > 0 {
                assert!(reduced.memo_boards < unreduced.memo_boards, "end {end}");
                solvable += 1;
                if solvable == 3 {
                    break;
                }
            }
        }
        assert_eq!(solvable, 3, "end {end}");
    }
}

/// Reversing a solution from `s` to `e` and taking complements gives a solution
/// from `e` to `s` with the same jumps: the two counts are equal.
#[test]
fn counts_are_symmetric_in_start_and_final_hole() {
    let t5 = BoardShape::Triangle(5);
    for s in 1..=15 {
        for e in s + 1..=15 {
            assert_eq!(
                solutions(t5, Some(s), Some(e)),
                solutions(t5, Some(e), Some(s))
            );
        }
    }
    let t6 = BoardShape::Triangle(6);
    for (s, e) in [(1, 5), (2, 8), (4, 19), (7, 20)] {
        let there = solutions(t6, Some(s), Some(e));
        assert!(there > 0);
        assert_eq!(there, solutions(t6, Some(e), Some(s)));
    }
}

#[test]
fn french_centre_has_no_solution() {
    let count = count_solutions(BoardShape::French, None, None, 1, &Control::new()).unwrap();
    assert_eq!(count.solutions, 0);
    assert_eq!(count.memo_boards, 0, "ruled out by the parity invariants");
}

/// The French and diamond boards from their centres (their default starts)
/// have no solution by the position classes, and say why; the English centre
/// is allowed.
#[test]
fn centres_the_position_classes_rule_out_say_why() {
    for shape in [BoardShape::French, BoardShape::Diamond] {
        let game = PegGame::new(shape, None, None).unwrap();
        let why = game.ends_ruled_out().expect("ruled out");
        assert!(why.contains("position class"), "{shape}: {why}");
        assert!(why.contains("any one-peg position"), "{shape}: {why}");
    }
    let english = PegGame::new(BoardShape::English, None, None).unwrap();
    assert_eq!(english.ends_ruled_out(), None);
    let to_a_corner = PegGame::new(BoardShape::English, None, Some(1)).unwrap();
    let why = to_a_corner.ends_ruled_out().expect("the rule of three");
    assert!(why.contains("on hole 1"), "{why}");
}

#[test]
fn parity_invariants_only_rule_out_unsolvable_games() {
    for side in [4, 5] {
        let shape = BoardShape::Triangle(side);
        let reference = Reference::new(shape);
        for start in 1..=shape.holes() {
            let by_end = reference.solutions_by_final_hole(start);
            for end in 1..=shape.holes() {
                let game = PegGame::new(shape, Some(start), Some(end)).unwrap();
                let ruled_out = game.ends_ruled_out();
                assert_eq!(ruled_out.is_some(), !game.may_finish(game.start_board()));
                if ruled_out.is_some() {
                    assert_eq!(by_end[end as usize - 1], 0, "{shape} {start} -> {end}");
                }
            }
        }
    }
    for shape in all_shapes() {
        let game = PegGame::new(shape, None, None).unwrap();
        for &w in &game.invariants {
            assert_eq!(w & !game.hole_mask(), 0);
            for jump in game.jumps() {
                assert_eq!((w & jump.mask()).count_ones() % 2, 0, "{shape}");
            }
        }
    }
    // The cross boards have the two Klein-group position classes: 4 parities.
    let english = PegGame::new(BoardShape::English, None, None).unwrap();
    assert_eq!(english.invariants.len(), 4);
    // The rule of three: from the centre, the last peg can only be in the
    // centre or three holes away from it along a row or a column.
    let finals = |shape: BoardShape| -> Vec<u32> {
        (1..=shape.holes())
            .filter(|&e| {
                let game = PegGame::new(shape, None, Some(e)).unwrap();
                game.may_finish(game.start_board())
            })
            .collect()
    };
    assert_eq!(finals(BoardShape::English), [2, 14, 17, 20, 32]);
    assert_eq!(finals(BoardShape::French), [] as [u32; 0]);
}

#[test]
#[ignore = "about 15 seconds: the English centre game"]
fn english_centre_count() {
    let t = std::time::Instant::now();
    let count = count_solutions(BoardShape::English, None, Some(17), 1, &Control::new()).unwrap();
    println!("{count:?} {:?}", t.elapsed());
    assert_eq!(count.solutions, 40_861_647_040_079_968);
    // The figures of the seed: 23 475 687 boards visited, 1 679 071 solvable.
    assert_eq!(count.memo_boards, 23_475_686);
    assert_eq!(count.solvable_boards, 1_679_071);
}

// ---- geometry ----

/// The jumps of the kernel as triples of hole indices.
fn kernel_jumps(game: &PegGame) -> BTreeSet<(usize, usize, usize)> {
    let hole = |b: u64| {
        let pegs = game.pegs_of(b);
        assert_eq!(pegs.len(), 1);
        pegs[0] as usize - 1
    };
    game.jumps()
        .iter()
        .map(|j| (hole(j.from), hole(j.over), hole(j.to)))
        .collect()
}

#[test]
fn jumps_match_the_reference_geometry() {
    for shape in all_shapes() {
        let game = PegGame::new(shape, None, None).unwrap();
        let reference = Reference::new(shape);
        assert_eq!(game.hole_mask().count_ones(), shape.holes());
        assert_eq!(reference.holes as u32, shape.holes());
        let expected: BTreeSet<_> = reference.jumps.iter().copied().collect();
        assert_eq!(kernel_jumps(&game), expected, "{shape}");
        let count = game.jumps().len();
        match shape {
            // Lines of 3, 3, 7, 7, 7, 3, 3 holes: 2 * 2 * (1 + 1 + 5 + 5 + 5 + 1 + 1).
            BoardShape::English => assert_eq!(count, 76),
            // Lines of 3, 5, 7, 7, 7, 5, 3 holes in each direction: 2 orientations
            // of 1 + 3 + 5 + 5 + 5 + 3 + 1 triples per direction.
            BoardShape::French => assert_eq!(count, 92),
            // Each of the 3 directions has lines of 1..=n holes; a line of L
            // holes has L - 2 jump triples, each in two orientations:
            // 3 * 2 * (1 + ... + (n - 2)) = 3 (n - 1) (n - 2).
            BoardShape::Triangle(n) => assert_eq!(count as u32, 3 * (n - 1) * (n - 2)),
            // Lines of 1, 3, 5, 7, 9, 7, 5, 3, 1 holes in each direction: 2
            // orientations of 1 + 3 + 5 + 7 + 5 + 3 + 1 triples per direction.
            BoardShape::Diamond => assert_eq!(count, 100),
        }
    }
}

#[test]
fn hole_numbers() {
    let english = PegGame::new(BoardShape::English, None, None).unwrap();
    // Centre 17 is row 3, column 3.
    assert_eq!(english.hole_bit(17).unwrap(), 1 << (8 * 3 + 3));
    assert_eq!(english.start_board().count_ones(), 32);
    assert_eq!(
        english.pegs_of(english.hole_mask() & !english.start_board()),
        [17]
    );
    let french = PegGame::new(BoardShape::French, None, None).unwrap();
    assert_eq!(french.start_hole(), 19);
    assert_eq!(french.hole_bit(19).unwrap(), 1 << (8 * 3 + 3));
    let triangle = PegGame::new(BoardShape::Triangle(5), None, Some(13)).unwrap();
    assert_eq!(triangle.start_hole(), 1);
    assert_eq!(triangle.end_hole(), Some(13));
    // 1 is the apex; 11..=15 the bottom row.
    assert_eq!(triangle.hole_bit(1).unwrap(), 1);
    assert_eq!(triangle.hole_bit(3).unwrap(), 1 << 9);
    assert_eq!(triangle.hole_bit(13).unwrap(), 1 << (8 * 4 + 2));
    assert!(invalid_message(triangle.hole_bit(16)).contains("between 1 and 15"));
}

/// The symmetries of the kernel as permutations of hole indices.
fn kernel_permutations(game: &PegGame) -> BTreeSet<Vec<usize>> {
    let holes = game.shape().holes();
    let mut perms = vec![Vec::new(); game.symmetry_count()];
    for h in 1..=holes {
        let images = game.symmetric_images(game.hole_bit(h).unwrap());
        for (perm, image) in perms.iter_mut().zip(images) {
            let pegs = game.pegs_of(image);
            assert_eq!(pegs.len(), 1, "a symmetry maps holes to holes");
            assert_eq!(image & !game.hole_mask(), 0);
            perm.push(pegs[0] as usize - 1);
        }
    }
    perms.into_iter().collect()
}

#[test]
fn symmetries_match_the_reference_geometry() {
    for shape in all_shapes() {
        let reference = Reference::new(shape);
        for end in std::iter::once(None).chain((1..=shape.holes()).map(Some)) {
            let game = PegGame::new(shape, None, end).unwrap();
            let expected: BTreeSet<Vec<usize>> = reference
                .symmetries
                .iter()
                .filter(|p| end.is_none_or(|e| p[e as usize - 1] == e as usize - 1))
                .cloned()
                .collect();
            assert_eq!(kernel_permutations(&game), expected, "{shape} end {end:?}");
            assert_eq!(game.symmetry_count(), expected.len());
        }
        let game = PegGame::new(shape, None, None).unwrap();
        assert_eq!(game.symmetry_count(), reference.symmetries.len());
        // Whole boards map bit by bit.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let board = x & game.hole_mask();
            let images = game.symmetric_images(board);
            let by_bits = bits(board).fold(vec![0u64; images.len()], |mut acc, b| {
                for (a, i) in acc.iter_mut().zip(game.symmetric_images(1 << b)) {
                    *a |= i;
                }
                acc
            });
            assert_eq!(images, by_bits, "{shape}");
            assert_eq!(game.canonical(board), *images.iter().min().unwrap());
        }
    }
    let count = |shape, end| {
        PegGame::new(shape, None, Some(end))
            .unwrap()
            .symmetry_count()
    };
    assert_eq!(count(BoardShape::English, 17), 8);
    assert_eq!(count(BoardShape::English, 2), 2);
    assert_eq!(count(BoardShape::English, 1), 1);
    assert_eq!(count(BoardShape::English, 9), 2);
    assert_eq!(count(BoardShape::Triangle(4), 5), 6);
    assert_eq!(count(BoardShape::Triangle(5), 1), 2);
    assert_eq!(count(BoardShape::Triangle(5), 2), 1);
}

// ---- shard plans ----

fn weighted_sum(game: &PegGame, tasks: &[PegTask]) -> u128 {
    game.count_from(tasks, &Control::new(), |_, _| {})
        .unwrap()
        .solutions
}

#[test]
fn prefix_tasks_add_up_to_the_count() {
    // (shape, start, end, also without symmetry reduction)
    let cases = [
        (BoardShape::Triangle(5), Some(1), None, true),
        (BoardShape::Triangle(5), Some(4), Some(15), true),
        (BoardShape::Triangle(5), Some(5), Some(13), true),
        (BoardShape::Triangle(5), Some(5), Some(2), true),
        (BoardShape::Triangle(6), Some(1), None, true),
        (BoardShape::Triangle(6), Some(5), Some(13), false),
        (BoardShape::Triangle(6), Some(13), Some(13), false),
    ];
    for (shape, start, end, unreduced_too) in cases {
        let reference = Reference::new(shape);
        for symmetric in [true, false] {
            if !symmetric && !unreduced_too {
                continue;
            }
            let mut game = PegGame::new(shape, start, end).unwrap();
            if !symmetric {
                game = game.without_symmetry();
            }
            let total = game.count(&Control::new()).unwrap().solutions;
            let mut depths = BTreeSet::new();
            for min_tasks in [1, 2, 5, 40, 1000, usize::MAX] {
                let tasks = game.prefix_tasks(min_tasks).unwrap();
                assert!(!tasks.is_empty());
                let label = format!("{shape} {start:?} {end:?} {symmetric} {min_tasks}");
                assert_eq!(weighted_sum(&game, &tasks), total, "{label}");
                // One depth, distinct canonical boards, sorted.
                let pegs = tasks[0].board.count_ones();
                let depth = (shape.holes() - 1 - pegs) as usize;
                depths.insert(depth);
                for pair in tasks.windows(2) {
                    assert!(pair[0].board < pair[1].board);
                }
                for task in &tasks {
                    assert_eq!(task.board.count_ones(), pegs);
                    assert_eq!(game.canonical(task.board), task.board);
                }
                // The multiplicities count the jump sequences of that length.
                if depth <= 6 {
                    let sequences: u128 = tasks.iter().map(|t| t.multiplicity).sum();
                    let expected = reference.sequences(game.start_hole(), depth);
                    assert_eq!(sequences, expected, "{label}");
                }
            }
            assert!(depths.len() >= 3, "{shape}: {depths:?}");
            // Tasks may arrive in any orientation.
            let tasks = game.prefix_tasks(40).unwrap();
            let turned: Vec<PegTask> = tasks
                .iter()
                .map(|t| PegTask {
                    board: *game.symmetric_images(t.board).last().unwrap(),
                    multiplicity: t.multiplicity,
                })
                .collect();
            assert_eq!(weighted_sum(&game, &turned), total);
        }
    }
}

#[test]
fn prefix_tasks_of_small_plans() {
    let game = PegGame::new(BoardShape::Triangle(5), None, None).unwrap();
    let root = game.prefix_tasks(1).unwrap();
    assert_eq!(
        root,
        [PegTask {
            board: game.canonical(game.start_board()),
            multiplicity: 1
        }]
    );
    // The apex start has two jumps, mirror images of each other.
    let first = count::tasks_at_depth(&game, 1);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].multiplicity, 2);
    // Three classes of one-peg boards after 13 jumps (1, 7 and 13 with their
    // mirror images), none after 14.
    let last = count::tasks_at_depth(&game, 13);
    assert_eq!(last.len(), 3);
    assert_eq!(last.iter().map(|t| t.multiplicity).sum::<u128>(), 29_760);
    assert!(count::tasks_at_depth(&game, 14).is_empty());
    let english = PegGame::new(BoardShape::English, None, None).unwrap();
    let tasks = english.prefix_tasks(2).unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks.iter().map(|t| t.multiplicity).sum::<u128>(), 4 * 3);
    let tasks = english.prefix_tasks(1000).unwrap();
    assert!(tasks.len() >= 1000);
}

#[test]
fn progress_reports_every_task() {
    let game = PegGame::new(BoardShape::Triangle(6), None, None).unwrap();
    let tasks = game.prefix_tasks(30).unwrap();
    let mut seen = Vec::new();
    let count = game
        .count_from(&tasks, &Control::new(), |done, sum| seen.push((done, sum)))
        .unwrap();
    assert_eq!(seen.len(), tasks.len());
    assert!(seen.iter().enumerate().all(|(i, &(done, _))| done == i + 1));
    assert!(seen.windows(2).all(|w| w[0].1 <= w[1].1));
    assert_eq!(seen.last().unwrap().1, count.solutions);
    assert!(count.solvable_boards > 0 && count.solvable_boards < count.memo_boards);
}

#[test]
fn tasks_survive_serialization() {
    let task = PegTask {
        board: 0x7f7f_7f00_1c1c,
        multiplicity: (1u128 << 100) + 12345,
    };
    let text = serde_json::to_string(&task).unwrap();
    assert_eq!(serde_json::from_str::<PegTask>(&text).unwrap(), task);
}

#[test]
fn empty_batches_count_nothing() {
    let game = PegGame::new(BoardShape::English, None, None).unwrap();
    let count = game
        .count_from(&[], &Control::new(), |_, _| panic!("no task"))
        .unwrap();
    assert_eq!(count, PegCount::default());
}

#[test]
fn bad_task_boards_are_refused() {
    let game = PegGame::new(BoardShape::Triangle(5), None, None).unwrap();
    for board in [0, 1 << 63, game.hole_mask() | 1 << 7] {
        let task = PegTask {
            board,
            multiplicity: 1,
        };
        let message = invalid_message(game.count_from(&[task], &Control::new(), |_, _| {}));
        assert!(message.contains("triangle:5"), "{message}");
    }
}

#[test]
fn threads_do_not_change_the_count() {
    for end in [None, Some(13)] {
        let shape = BoardShape::Triangle(6);
        let one = count_solutions(shape, Some(5), end, 1, &Control::new()).unwrap();
        let two = count_solutions(shape, Some(5), end, 2, &Control::new()).unwrap();
        assert_eq!(one.solutions, two.solutions);
    }
}

// ---- control ----

#[test]
fn cancellation_stops_the_count() {
    let control = Control::new();
    control.cancel();
    let r = count_solutions(BoardShape::Triangle(5), None, None, 1, &control);
    assert_eq!(r, Err(Error::Cancelled));

    // Inside a long count, on one and on two threads.
    for threads in [1, 2] {
        let control = Control::cancelled_at_work(200_000);
        let r = count_solutions(BoardShape::English, None, None, threads, &control);
        assert_eq!(r, Err(Error::Cancelled));
    }
}

#[test]
fn work_counts_every_pass_over_a_board() {
    let control = Control::new();
    // Without pruning: every board reached is listed and counted.
    let game = PegGame::new(BoardShape::Triangle(6), None, None)
        .unwrap()
        .without_pruning();
    let count = game.count_with_threads(1, &control).unwrap();
    // Listing the children of the boards with 3 pegs or more, counting the
    // boards with 2 pegs or more.
    let work = control.work_done();
    assert!(
        count.memo_boards < work && work < 2 * count.memo_boards,
        "{work}"
    );
    let two_pegs = count::tasks_at_depth(&game, 18);
    assert_eq!(two_pegs[0].board.count_ones(), 2);
    assert_eq!(work, 2 * count.memo_boards - two_pegs.len() as u64);
}

#[test]
fn board_limit_stops_large_counts() {
    let game = PegGame::new(BoardShape::Triangle(6), None, None)
        .unwrap()
        .with_board_limit(1000);
    let message = invalid_message(game.count(&Control::new()));
    assert!(message.contains("more than 1000 boards"), "{message}");
    let game = game.with_board_limit(MAX_BOARDS);
    assert!(game.count(&Control::new()).unwrap().solutions > 0);
}

// ---- tables ----

#[test]
fn memo_keeps_wide_counts_and_grows() {
    let mut memo = Memo::with_capacity(10);
    let mut key = 1u64;
    let value = |k: u64| u128::from(k) << (k % 64);
    for _ in 0..300_000 {
        key = key.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(7) | 1;
        memo.insert(key, value(key));
    }
    assert_eq!(memo.len(), 300_000);
    let mut key = 1u64;
    for _ in 0..300_000 {
        key = key.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(7) | 1;
        assert_eq!(memo.get(key), value(key));
    }
    assert_eq!(memo.get(2), 0);
}

#[test]
fn board_sets_hold_each_board_once() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut all = BTreeSet::new();
    for threads in [1, 3] {
        for partitions in [1, 7, 64] {
            let mut sets: Vec<BoardSet> = (0..4).map(|_| BoardSet::new(partitions)).collect();
            for i in 0..50_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Few distinct boards, many repeats, spread over the sets.
                let board = (x % 20_000) + 1;
                all.insert(board);
                sets[i % 4].insert(board);
            }
            let mut boards = BoardSet::union(sets, threads);
            boards.sort_unstable();
            assert_eq!(boards, all.iter().copied().collect::<Vec<_>>());
            all.clear();
        }
    }
}

// ---- input ----

#[test]
fn parse_and_display() {
    for shape in all_shapes() {
        assert_eq!(parse_board(&shape.to_string()).unwrap(), shape);
    }
    assert_eq!(parse_board(" English ").unwrap(), BoardShape::English);
    assert_eq!(parse_board("FRENCH").unwrap(), BoardShape::French);
    assert_eq!(
        "triangle:5".parse::<BoardShape>().unwrap(),
        BoardShape::Triangle(5)
    );
    assert_eq!(BoardShape::Triangle(7).to_string(), "triangle:7");
    assert_eq!(BoardShape::Triangle(6).holes(), 21);

    let message = invalid_message(parse_board("hex"));
    assert!(
        message.contains("english, french, diamond or triangle:N"),
        "{message}"
    );
    let message = invalid_message(parse_board("triangle:3"));
    assert!(message.contains("between 4 and 7, got 3"), "{message}");
    let message = invalid_message(parse_board("triangle:8"));
    assert!(message.contains("between 4 and 7, got 8"), "{message}");
    for bad in ["triangle:", "triangle:x", "triangle:-5", "triangle", ""] {
        invalid_message(parse_board(bad));
    }
}

#[test]
fn validation() {
    validate(BoardShape::English, None, None).unwrap();
    validate(BoardShape::English, Some(1), Some(33)).unwrap();
    let message = invalid_message(validate(BoardShape::English, Some(34), None));
    assert!(
        message.contains("start hole must be between 1 and 33"),
        "{message}"
    );
    let message = invalid_message(validate(BoardShape::French, None, Some(0)));
    assert!(
        message.contains("final hole must be between 1 and 37"),
        "{message}"
    );
    let message = invalid_message(validate(BoardShape::Triangle(5), Some(16), None));
    assert!(
        message.contains("between 1 and 15 on the triangle:5 board"),
        "{message}"
    );
    let message = invalid_message(validate(BoardShape::Triangle(12), None, None));
    assert!(message.contains("triangle side"), "{message}");
    invalid_message(PegGame::new(BoardShape::Triangle(5), Some(0), None));
    invalid_message(count_solutions(
        BoardShape::Triangle(5),
        None,
        Some(99),
        1,
        &Control::new(),
    ));
}

#[test]
fn sums_of_counts_past_128_bits_are_refused_not_wrapped() {
    assert_eq!(count::add_counts(u128::MAX - 1, 1).unwrap(), u128::MAX);
    let error = count::add_counts(u128::MAX, 1).unwrap_err().to_string();
    assert!(error.contains("exceeds 128 bits"), "{error}");
}

#[test]
fn solutions_share_the_holes_the_parities_allow_in_each_final_class() {
    // Against the kernel's own count to each final hole: a hole the start's
    // parities rule out has no solution, and the holes of a share have as many.
    let mut resolving = 0;
    for shape in [BoardShape::Triangle(5), BoardShape::Triangle(6)] {
        for start in 1..=shape.holes() {
            let game = PegGame::new(shape, Some(start), None).unwrap();
            let counts: Vec<u128> = (1..=shape.holes())
                .map(|end| solutions(shape, Some(start), Some(end)))
                .collect();
            for end in 1..=shape.holes() {
                let allowed = game.final_holes_allowed(game.hole_bit(end).unwrap());
                if !allowed.contains(&end) {
                    assert_eq!(counts[end as usize - 1], 0, "{shape:?}: {start} -> {end}");
                }
                if let Some(share) = game.final_share(game.hole_bit(end).unwrap()) {
                    let first = share.first().map_or(0, |&h| counts[h as usize - 1]);
                    assert!(share.iter().all(|&h| counts[h as usize - 1] == first));
                }
            }
            resolving += usize::from(game.final_classes_resolve());
        }
    }
    assert!(resolving >= 10, "{resolving} starts resolve");
    // The French board from hole 6: 9 and 15 share (a mirror fixing 6 swaps
    // them), 12 and 32 are alone in their classes.
    let french = PegGame::new(BoardShape::French, Some(6), None).unwrap();
    assert!(french.final_classes_resolve());
    let share = |h| french.final_share(french.hole_bit(h).unwrap()).unwrap();
    assert_eq!(share(9), vec![9, 15]);
    assert_eq!(share(12), vec![12]);
    assert_eq!(share(32), vec![32]);
    // The English board from hole 6: 6 and 22 are one class, and no symmetry
    // fixing 6 maps one to the other.
    let english = PegGame::new(BoardShape::English, Some(6), None).unwrap();
    assert!(!english.final_classes_resolve());
}
