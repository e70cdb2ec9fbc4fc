//! The sweep against a depth-first count of every jump sequence on small
//! boards (square and triangular moves, with and without a final hole, up
//! to symmetry and without), the board names, and bad parameters refused.

use std::collections::HashMap;

use super::*;

const PRIMES: [u64; 2] = [(1 << 61) - 1, 1_000_000_007];

/// The solutions from `board` by trying every jump, memoised.
fn depth_first(board: u64, jumps: &[Jump], end: Option<u64>, memo: &mut HashMap<u64, u64>) -> u64 {
    if board.count_ones() == 1 {
        return u64::from(end.is_none_or(|e| e == board));
    }
    if let Some(&known) = memo.get(&board) {
        return known;
    }
    let count = jumps
        .iter()
        .filter(|j| board & j.pegs == j.pegs && board & j.landing == 0)
        .map(|j| depth_first(board ^ j.pegs ^ j.landing, jumps, end, memo))
        .sum();
    memo.insert(board, count);
    count
}

/// The sweep's answer modulo the 61-bit prime, for `params`.
fn swept(params: &str) -> u64 {
    run_sweep_native(params, &PRIMES).unwrap().residues[0][0]
}

#[test]
fn the_sweep_counts_what_a_depth_first_search_counts() {
    let boards = [
        ("ooo/ooo/ooo", "square"),
        ("oooo/oooo/oooo", "square"),
        ("ooooo/ooooo/ooo..", "square"),
        (".ooo./ooooo/.ooo.", "square"),
        ("o/oo/ooo/oooo/ooooo", "triangle"),
    ];
    let mut solvable = 0;
    for (picture, moves) in boards {
        let base = format!("board={picture}\nmoves={moves}");
        let holes = picture.bytes().filter(|&b| b == b'o').count();
        for start in 1..=holes {
            for end in [None, Some(1), Some(holes)] {
                let mut params = format!("{base}\nstart={start}\nsymmetry=0");
                if let Some(end) = end {
                    params.push_str(&format!("\nend={end}"));
                }
                let plain = PegsSweep::new(&Params::parse(&params).unwrap()).unwrap();
                let expected =
                    depth_first(plain.start, &plain.jumps, plain.end, &mut HashMap::new());
                assert_eq!(swept(&params), expected, "{params}");
                let reduced = params.replace("symmetry=0", "symmetry=1");
                assert_eq!(swept(&reduced), expected, "{reduced}");
                solvable += usize::from(expected > 0);
            }
        }
    }
    // The boards are not all hopeless: the check could fail.
    assert!(solvable > 20, "{solvable}");
}

#[test]
fn the_named_boards_are_their_pictures_with_their_symmetries() {
    let english = PegsSweep::new(&Params::parse("board=english\nstart=17").unwrap()).unwrap();
    assert_eq!(english.pegs, 32);
    assert_eq!(english.images.len(), 7, "the centre is fixed by all 8");
    // Hole 2 (the top row's middle) is fixed by the left-right reflection
    // alone, hole 1 (left of it) by none.
    for (end, images) in [(2, 1), (1, 0)] {
        let picture = format!("board={ENGLISH}\nstart=17\nend={end}");
        let model = PegsSweep::new(&Params::parse(&picture).unwrap()).unwrap();
        assert_eq!(model.images.len(), images, "end {end}");
    }
    let french = PegsSweep::new(&Params::parse("board=french\nstart=6").unwrap()).unwrap();
    assert_eq!(french.pegs, 36);
    assert_eq!(french.key_bytes, 5);
    // From the English centre, one jump: four positions, one class.
    let mut english = english;
    let mut children = Vec::new();
    let start = english.key(english.start);
    english
        .expand(0, &start[..5], &mut |key, _| children.push(key.to_vec()))
        .unwrap();
    assert_eq!(children.len(), 4);
    assert!(children.iter().all(|c| *c == children[0]));
}

#[test]
fn bad_parameters_are_refused() {
    for params in [
        "start=1",
        "board=oox\nstart=1",
        "board=o\nstart=1",
        "board=ooo\nstart=4",
        "board=ooo\nstart=1\nend=0",
        "board=ooo\nstart=1\nmoves=hex",
        "board=ooo\nstart=1\nsymmetry=2",
    ] {
        let refused = run_sweep_native(params, &PRIMES);
        assert!(
            matches!(refused, Err(KernelError::BadParams(_))),
            "{params}: {refused:?}"
        );
    }
}
