//! Tests of pruning by pagoda functions: the pagodas are pagodas, and pruned
//! and unpruned searches count the same on every kernel.

use std::collections::BTreeMap;

use super::pagoda::Pagoda;
use super::*;
use crate::Control;

/// Of one level: its classes, those expanded and the jumps to children
/// left out as they were made.
type LevelSizes = (u64, u64, u64);

/// A search by levels in one bucket, from `game`'s start: the solutions, the
/// one-peg classes' sums, and each level's sizes.
fn by_levels(game: &PegGame) -> (u128, BTreeMap<u64, u128>, Vec<LevelSizes>) {
    let control = Control::new();
    let mut inbox = vec![start_bucket(game)];
    let mut solutions = 0;
    let mut finals = BTreeMap::new();
    let mut sizes = Vec::new();
    for level in 0.. {
        let Some(pegs) = pegs_at_level(game, level).filter(|&p| p >= 1) else {
            break;
        };
        if pegs == 1 {
            for last in &inbox {
                for (&board, &ways) in last.boards.iter().zip(&last.counts) {
                    finals.insert(board, ways);
                }
            }
        }
        let part = expand_level(game, level, inbox, 1, &control).unwrap();
        solutions += part.solutions;
        sizes.push((part.states, part.expanded, part.pruned));
        if part.states == 0 {
            break;
        }
        inbox = part.sent;
    }
    (solutions, finals, sizes)
}

fn triangle_games() -> Vec<PegGame> {
    let mut games = Vec::new();
    for side in [5, 6] {
        let shape = BoardShape::Triangle(side);
        for start in 1..=shape.holes() {
            let game = PegGame::new(shape, Some(start), None).unwrap();
            if game.ends_ruled_out().is_none() {
                games.push(game);
            }
        }
    }
    games
}

#[test]
fn pruned_and_unpruned_level_searches_agree_on_every_triangle_start() {
    let mut pruned_somewhere = false;
    for game in triangle_games() {
        // By final hole: positions reduced by the symmetries fixing the start.
        let game = game.fixing_start();
        let name = format!("{} from {}", game.shape(), game.start_hole());
        let (solutions, finals, sizes) = by_levels(&game);
        let (plain, plain_finals, plain_sizes) = by_levels(&game.clone().without_pruning());
        assert_eq!(solutions, plain, "{name}");
        assert_eq!(finals, plain_finals, "{name}: by final class");
        for (&(states, expanded, _), &(plain_states, plain_expanded, plain_pruned)) in
            sizes.iter().zip(&plain_sizes)
        {
            assert_eq!(plain_states, plain_expanded, "{name}: nothing pruned");
            assert_eq!(plain_pruned, 0, "{name}: nothing pruned");
            // The children a level keeps can finish as far as the pagodas
            // tell (on symmetric rules, their canonical images too), so only
            // the start may be pruned at expansion; the positions kept are
            // among the unpruned search's.
            assert!(expanded == states || expanded == 0 && states == 1, "{name}");
            assert!(states <= plain_states, "{name}");
        }
        pruned_somewhere |= sizes.iter().any(|&(_, _, p)| p > 0);
    }
    assert!(pruned_somewhere, "the pagodas prune on the triangles");
}

#[test]
fn pruned_and_unpruned_layered_counts_agree_on_every_triangle_start() {
    for game in triangle_games() {
        let name = format!("{} from {}", game.shape(), game.start_hole());
        let control = Control::new();
        let pruned = game.count(&control).unwrap();
        let plain = game.clone().without_pruning().count(&control).unwrap();
        assert_eq!(pruned.solutions, plain.solutions, "{name}");
        assert_eq!(plain.pruned_boards, 0);
        assert!(pruned.memo_boards <= plain.memo_boards, "{name}");
        assert!(pruned.solvable_boards == plain.solvable_boards, "{name}");
        // Each final hole alone too, on the smaller triangle.
        if game.shape() != BoardShape::Triangle(5) {
            continue;
        }
        for end in 1..=game.shape().holes() {
            let game = PegGame::new(game.shape(), Some(game.start_hole()), Some(end)).unwrap();
            let pruned = game.count(&control).unwrap().solutions;
            let plain = game.without_pruning().count(&control).unwrap().solutions;
            assert_eq!(pruned, plain, "{name} to {end}");
        }
    }
}

#[test]
fn pruning_prunes_on_the_english_board_and_keeps_its_counts() {
    // Positions after 14 jumps from the centre (18 pegs), from random games:
    // counted over shared layers with and without pruning.
    let game = PegGame::new(BoardShape::English, None, None).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut tasks = Vec::new();
    while tasks.len() < 24 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if let Some(board) = super::tests::random_descendant(&game, 14, seed | 1) {
            tasks.push(PegTask {
                board,
                multiplicity: 1,
            });
        }
    }
    let control = Control::new();
    let (mut pruned_boards, mut kept, mut all, mut solutions) = (0, 0, 0, 0);
    for task in &tasks {
        let one = std::slice::from_ref(task);
        let pruned = game.count_from(one, &control, |_, _| {}).unwrap();
        let plain = (game.clone().without_pruning())
            .count_from(one, &control, |_, _| {})
            .unwrap();
        assert_eq!(pruned.solutions, plain.solutions, "{:#x}", task.board);
        assert_eq!(pruned.solvable_boards, plain.solvable_boards);
        pruned_boards += pruned.pruned_boards;
        kept += pruned.memo_boards;
        all += plain.memo_boards;
        solutions += plain.solutions;
    }
    assert!(solutions > 0);
    assert!(
        pruned_boards > 0 && 2 * kept < all,
        "pruned {pruned_boards}, kept {kept} of {all}"
    );
    // The first levels of the search from the centre by levels: some of
    // level 8's children are pruned as they are made already.
    let mut inbox = vec![start_bucket(&game)];
    let mut pruned_by_level = Vec::new();
    for level in 0..9 {
        let part = expand_level(&game, level, inbox, 1, &control).unwrap();
        pruned_by_level.push(part.pruned);
        inbox = part.sent;
    }
    assert!(
        pruned_by_level.iter().any(|&p| p > 0),
        "{pruned_by_level:?}"
    );
}

/// The English board from the centre by levels, pruned: each level's
/// classes and those expanded (`cargo nextest run -p tally-kernels
/// english_levels_pruned --run-ignored only --no-capture`).
#[test]
#[ignore = "a measurement: the whole English count, about a minute"]
fn english_levels_pruned() {
    let game = PegGame::new(BoardShape::English, None, None).unwrap();
    let started = std::time::Instant::now();
    let pruner = game.pruner().unwrap();
    println!("{} pagodas in {:?}", pruner.pagodas(), started.elapsed());
    let (solutions, _, sizes) = by_levels(&game);
    for (level, (states, expanded, pruned)) in sizes.iter().enumerate() {
        println!("level {level}: {states} kept, {expanded} expanded, {pruned} children pruned");
    }
    let reached: u64 = sizes.iter().map(|s| s.0).sum();
    let expanded: u64 = sizes.iter().map(|s| s.1).sum();
    println!(
        "{solutions} solutions, {reached} reached, {expanded} expanded, {:?}",
        started.elapsed()
    );
}

#[test]
fn every_pagoda_built_keeps_the_inequality_on_every_jump() {
    let games = [
        PegGame::new(BoardShape::English, None, None).unwrap(),
        PegGame::new(BoardShape::English, Some(10), Some(17)).unwrap(),
        PegGame::new(BoardShape::English, Some(10), Some(17))
            .unwrap()
            .searching_from(Side::End),
        PegGame::new(BoardShape::French, Some(6), None).unwrap(),
        PegGame::new(BoardShape::Diamond, Some(1), None).unwrap(),
        PegGame::new(BoardShape::Triangle(6), Some(4), None).unwrap(),
    ];
    for game in &games {
        let pruner = game.pruner().expect("pruning is on by default");
        assert!(pruner.pagodas() > 0, "{}: some pagodas", game.shape());
        for rule in pruner.rules() {
            for (pagoda, at_end) in &rule.pagodas {
                let w = pagoda.weights();
                let of = |one: u64| w[one.trailing_zeros() as usize];
                for jump in game.jumps() {
                    assert!(of(jump.from) + of(jump.over) >= of(jump.to), "{jump:?}");
                }
                assert_eq!(*at_end, pagoda.of(rule.end));
                let sum: i32 = (0..64)
                    .filter(|b| rule.end >> b & 1 == 1)
                    .map(|b| w[b])
                    .sum();
                assert_eq!(sum, *at_end);
            }
        }
        assert!(game.clone().without_pruning().pruner().is_none());
    }
    // A planted bad weight is refused: a weight on the landing hole of one
    // jump above what its other two holes give.
    let game = &games[0];
    let jump = game.jumps()[5];
    let mut weights = [0i32; 64];
    weights[jump.to.trailing_zeros() as usize] = 1;
    let e = Pagoda::new(weights, game.hole_mask(), game.jumps()).unwrap_err();
    assert!(e.to_string().contains("not a pagoda function"), "{e}");
    let mut off_board = [0i32; 64];
    off_board[63] = 1;
    assert!(Pagoda::new(off_board, game.hole_mask(), game.jumps()).is_err());
    let zero = Pagoda::new([0; 64], game.hole_mask(), game.jumps()).unwrap();
    assert_eq!(zero.of(game.start_board()), 0);
}

/// The pagodas packed side by side rule out exactly the positions they rule
/// out one by one: on every position of random games and on random boards.
#[test]
fn packed_pagodas_rule_out_what_they_rule_out_one_by_one() {
    let games = [
        PegGame::new(BoardShape::English, None, None).unwrap(),
        PegGame::new(BoardShape::French, Some(6), None).unwrap(),
        PegGame::new(BoardShape::Diamond, Some(1), None).unwrap(),
        PegGame::new(BoardShape::Triangle(6), Some(4), None).unwrap(),
    ];
    let mut rng = crate::test_rng::Rng::new(55);
    for game in &games {
        let pruner = game.pruner().unwrap();
        let mut boards = Vec::new();
        for _ in 0..200 {
            let mut board = game.start_board();
            loop {
                boards.push(board);
                let moves: Vec<_> = (game.jumps().iter())
                    .filter(|j| board & (j.from | j.over) == j.from | j.over && board & j.to == 0)
                    .collect();
                if moves.is_empty() {
                    break;
                }
                let j = moves[rng.below(moves.len() as u64) as usize];
                board ^= j.from | j.over | j.to;
            }
        }
        boards.extend((0..5000).map(|_| rng.next_u64() & game.hole_mask()));
        let (mut packed, mut ruled_out) = (0, 0);
        for rule in pruner.rules() {
            packed += usize::from(rule.is_packed());
            for &board in &boards {
                let one_by_one = rule.rules_out_one_by_one(board);
                assert_eq!(
                    rule.rules_out(board),
                    one_by_one,
                    "{} {board:#x}",
                    game.shape()
                );
                ruled_out += usize::from(one_by_one);
            }
        }
        assert!(packed > 0, "{}: some rules packed", game.shape());
        assert!(ruled_out > 0, "{}: some boards ruled out", game.shape());
    }
}

/// A board's children held to the rules by the change their jumps make are
/// judged as the children themselves are, and the board as itself: on the
/// positions of random games on every shape, with each end and with all.
#[test]
fn children_are_held_to_the_rules_as_the_children_themselves_are() {
    let games = [
        PegGame::new(BoardShape::English, None, None).unwrap(),
        PegGame::new(BoardShape::English, Some(10), Some(17)).unwrap(),
        (PegGame::new(BoardShape::English, Some(10), Some(17)).unwrap()).searching_from(Side::End),
        PegGame::new(BoardShape::French, Some(6), None).unwrap(),
        PegGame::new(BoardShape::Diamond, Some(7), None).unwrap(),
        PegGame::new(BoardShape::Triangle(6), Some(4), None).unwrap(),
    ];
    let mut rng = crate::test_rng::Rng::new(5555);
    for game in games {
        let pruner = game.pruner().unwrap();
        let mut filter = pagoda::ChildFilter::new(pruner);
        let (mut parents_out, mut children_out, mut children_in) = (0, 0, 0);
        for _ in 0..100 {
            let mut board = game.start_board();
            loop {
                assert_eq!(filter.load(board), pruner.may_finish(board), "{board:#x}");
                let moves: Vec<_> = (game.jumps().iter())
                    .filter(|j| board & (j.from | j.over) == j.from | j.over && board & j.to == 0)
                    .collect();
                for j in &moves {
                    let bit = |mask: u64| mask.trailing_zeros();
                    let held = filter.child_may_finish(bit(j.from), bit(j.over), bit(j.to));
                    let child = board ^ (j.from | j.over | j.to);
                    assert_eq!(held, pruner.may_finish(child), "{board:#x} to {child:#x}");
                    (children_in, children_out) = match held {
                        true => (children_in + 1, children_out),
                        false => (children_in, children_out + 1),
                    };
                }
                // The expander's children are those the filter keeps, made
                // canonical.
                let mut all = Vec::new();
                game.push_children(board, &mut all);
                let mut kept = Vec::new();
                let left_out = game.push_children_where(board, &mut kept, |f, o, t| {
                    filter.child_may_finish(f, o, t)
                });
                assert_eq!(kept.len() as u64 + left_out, all.len() as u64);
                assert!(kept.iter().all(|c| all.contains(c)));
                parents_out += usize::from(!pruner.may_finish(board));
                if moves.is_empty() {
                    break;
                }
                let j = moves[rng.below(moves.len() as u64) as usize];
                board ^= j.from | j.over | j.to;
            }
        }
        let name = format!("{} from {}", game.shape(), game.start_hole());
        assert!(
            parents_out > 0 && children_out > 0 && children_in > 0,
            "{name}"
        );
    }
}

#[test]
fn the_end_search_prunes_towards_the_start_hole_and_its_images() {
    // Held against the start search's end, the end search would lose
    // positions that do finish: counts by meeting stay exact only with the
    // end search's own target, which the meet tests check; here, that the
    // two sides hold positions against different ends.
    let game = PegGame::new(BoardShape::English, Some(10), Some(17)).unwrap();
    let start_side = game.pruner().unwrap();
    let end_game = game.clone().searching_from(Side::End);
    let end_side = end_game.pruner().unwrap();
    let ends = |p: &Pruner| {
        let mut ends: Vec<u64> = p.rules().map(|r| r.end).collect();
        ends.sort_unstable();
        ends
    };
    assert_eq!(ends(start_side), vec![game.hole_bit(17).unwrap()]);
    let mut images = game.symmetric_images(game.hole_bit(10).unwrap());
    images.sort_unstable();
    images.dedup();
    assert_eq!(ends(end_side), images);
}
