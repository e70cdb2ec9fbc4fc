//! The layered count and the prefix tasks of a shard plan.
//!
//! Every jump removes one peg, so the boards reachable from the tasks fall into
//! layers by their number of pegs. The forward pass builds the layers from the
//! top down: the distinct canonical children of layer `p` (plus the tasks with
//! `p - 1` pegs) form layer `p - 1`. The backward pass counts from the bottom
//! up: the count of a board of layer `p` is the sum over its jumps of the count
//! of the child in layer `p - 1`, and only the nonzero counts (the solvable
//! boards, a small minority) are kept, one layer at a time. Both passes stream
//! through the layers; the only random accesses go to the solvable boards of
//! one layer and to the small per-partition sets of `set`.

use std::collections::HashMap;

use super::memo::Memo;
use super::set::BoardSet;
use super::{POLL_BOARDS, PegCount, PegGame, PegTask};
use crate::{Control, Error, Result, invalid};

/// Layers below this many boards are processed on one thread (small in tests,
/// so that they reach the threaded code).
const MIN_PARALLEL_BOARDS: usize = if cfg!(test) { 64 } else { 1 << 16 };

/// Boards whose children are looked up together in the backward pass.
const GROUP: usize = 16;

/// A task after validation.
struct Root {
    index: usize,
    board: u64,
    pegs: usize,
}

/// Counts `tasks` together: `on_progress(done, sum)` is called once per task
/// when its count is known, tasks with fewer pegs first.
pub(crate) fn count_tasks(
    game: &PegGame,
    tasks: &[PegTask],
    threads: usize,
    control: &Control,
    on_progress: &mut dyn FnMut(usize, u128),
) -> Result<PegCount> {
    control.check()?;
    let mut result = PegCount::default();
    let mut done = 0;
    let mut finish = |task: &PegTask, count: u128, result: &mut PegCount| -> Result<()> {
        let weighted = count
            .checked_mul(task.multiplicity)
            .and_then(|w| w.checked_add(result.solutions))
            .ok_or_else(|| Error::Internal("pegs: count exceeds 128 bits".into()))?;
        result.solutions = weighted;
        done += 1;
        on_progress(done, weighted);
        Ok(())
    };

    // Tasks answered without a search: one peg, or parities no final position has.
    let mut roots = Vec::new();
    for (index, task) in tasks.iter().enumerate() {
        if task.board & !game.holes != 0 || task.board == 0 {
            return Err(invalid!(
                "task board {:#x} is not a nonempty set of holes of the {} board",
                task.board,
                game.shape
            ));
        }
        let board = game.canonicalizer.canonical(task.board);
        let pegs = board.count_ones() as usize;
        if pegs == 1 {
            finish(task, game.final_value(board), &mut result)?;
        } else if !game.may_finish(board) {
            finish(task, 0, &mut result)?;
        } else if !game.worth_expanding(board) {
            result.pruned_boards += 1;
            finish(task, 0, &mut result)?;
        } else {
            roots.push(Root { index, board, pegs });
        }
    }
    let Some(top) = roots.iter().map(|r| r.pegs).max() else {
        return Ok(result);
    };

    // Forward: layers[p] holds the canonical boards with p >= 2 pegs.
    let mut layers: Vec<Vec<u64>> = vec![Vec::new(); top + 1];
    let roots_with = |pegs: usize| {
        roots
            .iter()
            .filter(move |r| r.pegs == pegs)
            .map(|r| r.board)
    };
    layers[top] = distinct(roots_with(top));
    let mut boards = layers[top].len();
    for p in (3..=top).rev() {
        let mut below = expand(game, &layers[p], roots_with(p - 1), threads, control)?;
        // Boards no allowed end can be reached from count 0: they are left
        // out of the layer, so nothing below them is listed.
        if game.pruner().is_some() {
            let reached = below.len();
            below.retain(|&b| game.worth_expanding(b));
            result.pruned_boards += (reached - below.len()) as u64;
        }
        boards += below.len();
        if boards > game.max_boards {
            return Err(invalid!(
                "the count visits more than {} boards; split it into prefix tasks",
                game.max_boards
            ));
        }
        layers[p - 1] = below;
    }
    result.memo_boards = boards as u64;

    // Backward: the solvable boards of the layer below with their counts.
    let mut below: Option<Memo> = None;
    for (p, layer) in layers.iter_mut().enumerate().skip(2) {
        let layer = std::mem::take(layer);
        let solvable = evaluate(game, &layer, below.as_ref(), threads, control)?;
        drop(layer);
        result.solvable_boards += solvable.len() as u64;
        for root in roots.iter().filter(|r| r.pegs == p) {
            finish(&tasks[root.index], solvable.get(root.board), &mut result)?;
        }
        below = Some(solvable);
    }
    Ok(result)
}

/// The distinct boards of `boards`.
fn distinct(boards: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = boards.collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The distinct canonical children of `layer` together with `extra`.
fn expand(
    game: &PegGame,
    layer: &[u64],
    extra: impl Iterator<Item = u64>,
    threads: usize,
    control: &Control,
) -> Result<Vec<u64>> {
    // About 8 jumps per board on the cross boards, at most 12 on triangles.
    let inserts = layer.len() * 10;
    let partitions = BoardSet::partitions_for(inserts);
    let expand_part = |part: &[u64]| -> Result<BoardSet> {
        let mut set = BoardSet::new(partitions);
        let mut children = Vec::with_capacity(64);
        for block in part.chunks(POLL_BOARDS) {
            control.check()?;
            for &board in block {
                children.clear();
                game.push_children(board, &mut children);
                for &child in &children {
                    set.insert(child);
                }
            }
            control.add_work(block.len() as u64);
        }
        Ok(set)
    };
    let mut sets = if threads <= 1 || layer.len() < MIN_PARALLEL_BOARDS {
        vec![expand_part(layer)?]
    } else {
        let share = layer.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = layer
                .chunks(share)
                .map(|part| scope.spawn(|| expand_part(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("pegs expansion thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?
    };
    for board in extra {
        sets[0].insert(board);
    }
    Ok(BoardSet::union(sets, threads))
}

/// The solvable boards of `layer` with their counts; `below` holds those of
/// the layer below, `None` when the children have one peg.
fn evaluate(
    game: &PegGame,
    layer: &[u64],
    below: Option<&Memo>,
    threads: usize,
    control: &Control,
) -> Result<Memo> {
    if below.is_some_and(|b| b.len() == 0) {
        // Nothing below is solvable, so nothing here is.
        control.add_work(layer.len() as u64);
        return Ok(Memo::with_capacity(0));
    }
    let evaluate_part = |part: &[u64]| -> Result<Vec<(u64, u128)>> {
        let mut solvable = Vec::new();
        let mut children = Vec::with_capacity(GROUP * 16);
        let mut ends = Vec::with_capacity(GROUP);
        for block in part.chunks(POLL_BOARDS) {
            control.check()?;
            // A group of boards at a time: the table lines of all their
            // children are requested before the first one is read.
            for group in block.chunks(GROUP) {
                children.clear();
                ends.clear();
                for &board in group {
                    game.push_children(board, &mut children);
                    ends.push(children.len());
                }
                if let Some(memo) = below {
                    for &child in &children {
                        memo.prefetch_filter(child);
                    }
                    for child in children.iter_mut() {
                        if memo.may_hold(*child) {
                            memo.prefetch_slot(*child);
                        } else {
                            *child = 0;
                        }
                    }
                }
                let mut first = 0;
                for (&board, &end) in group.iter().zip(&ends) {
                    let jumps = &children[first..end];
                    first = end;
                    let total: u128 = match below {
                        None => jumps
                            .iter()
                            .try_fold(0, |sum, &c| add_counts(sum, game.final_value(c)))?,
                        Some(memo) => jumps
                            .iter()
                            .filter(|&&c| c != 0)
                            .try_fold(0, |sum, &c| add_counts(sum, memo.probe(c)))?,
                    };
                    if total != 0 {
                        solvable.push((board, total));
                    }
                }
            }
            control.add_work(block.len() as u64);
        }
        Ok(solvable)
    };
    let parts = if threads <= 1 || layer.len() < MIN_PARALLEL_BOARDS {
        vec![evaluate_part(layer)?]
    } else {
        let share = layer.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let handles: Vec<_> = layer
                .chunks(share)
                .map(|part| scope.spawn(|| evaluate_part(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("pegs evaluation thread panicked"))
                .collect::<Result<Vec<_>>>()
        })?
    };
    let mut memo = Memo::with_capacity(parts.iter().map(Vec::len).sum());
    for (board, count) in parts.into_iter().flatten() {
        memo.insert(board, count);
    }
    Ok(memo)
}

// ---- shard plans ----

/// The classes one jump after the classes of `layer` that may still finish,
/// with the number of jump sequences reaching them. Boards without jumps drop out: with more than one
/// peg they have no solution, and one-peg boards only occur at the last depth.
fn next_layer(game: &PegGame, layer: &HashMap<u64, u128>) -> Result<HashMap<u64, u128>> {
    let mut next: HashMap<u64, u128> = HashMap::with_capacity(layer.len() * 4);
    let mut children = Vec::new();
    for (&board, &ways) in layer {
        // A pruned class has no solution, nor has any class below it: its
        // share of a child's multiplicity multiplies a count of 0.
        if !game.worth_expanding(board) {
            continue;
        }
        children.clear();
        game.push_children(board, &mut children);
        for &child in &children {
            let sum = next.entry(child).or_insert(0);
            *sum = add_counts(*sum, ways)?;
        }
    }
    Ok(next)
}

/// `a + b` for counts of jump sequences, refused past 128 bits rather than
/// wrapped: every sum of counts in the kernels goes through a checked add.
pub(crate) fn add_counts(a: u128, b: u128) -> Result<u128> {
    a.checked_add(b)
        .ok_or_else(|| crate::Error::Internal("pegs: count exceeds 128 bits".into()))
}

fn start_layer(game: &PegGame) -> HashMap<u64, u128> {
    HashMap::from([(game.canonicalizer.canonical(game.start), 1)])
}

fn into_tasks(layer: HashMap<u64, u128>) -> Vec<PegTask> {
    let mut tasks: Vec<PegTask> = layer
        .into_iter()
        .map(|(board, multiplicity)| PegTask {
            board,
            multiplicity,
        })
        .collect();
    tasks.sort_by_key(|t| t.board);
    tasks
}

/// The distinct canonical boards after `d` jumps with the number of jump
/// sequences reaching each, for the smallest `d` with at least `min_tasks`
/// boards; when no depth has that many, the depth with the most boards.
pub(crate) fn prefix_tasks(game: &PegGame, min_tasks: usize) -> Result<Vec<PegTask>> {
    let mut layer = start_layer(game);
    let mut widest = layer.clone();
    while layer.len() < min_tasks {
        let next = next_layer(game, &layer)?;
        if next.is_empty() {
            break;
        }
        layer = next;
        if layer.len() > widest.len() {
            widest = layer.clone();
        }
    }
    Ok(into_tasks(if layer.len() < min_tasks {
        widest
    } else {
        layer
    }))
}

/// The classes after exactly `depth` jumps (none when no sequence is that long).
#[cfg(test)]
pub(crate) fn tasks_at_depth(game: &PegGame, depth: usize) -> Vec<PegTask> {
    let mut layer = start_layer(game);
    for _ in 0..depth {
        layer = next_layer(game, &layer).expect("a test board's counts fit");
    }
    into_tasks(layer)
}
