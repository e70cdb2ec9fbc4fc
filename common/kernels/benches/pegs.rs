//! Times the `pegs` kernel: the English board from the centre to the centre,
//! triangles of side 6 and 7, and parts of the French board (a whole French
//! count from a solvable start would visit billions of boards, see below).
//! Prints the wall and CPU time, the solutions, the boards visited and
//! solvable, and the peak resident memory of the process so far (`VmHWM`).
//!
//! `cargo bench -p tally-kernels --bench pegs [-- CASE...]` with cases `english`,
//! `triangle6`, `triangle7`, `french` (default: all), and `levels-english`,
//! `levels-french6`: the search by levels from the English centre and the
//! French hole 6, pruned and not, positions reached and expanded per level. `PEGS_BENCH_THREADS` sets
//! the threads (when unset, every case runs on 1 and on 2 threads).
//!
//! The French part shows the centre start ruled out by the parity invariants,
//! the growth of the classes after d jumps from hole 1 (a start the invariants
//! allow), and batches of `PEGS_BENCH_FRENCH_TASKS` (default 3) random boards
//! after 14, 12 and 10 jumps from hole 1, counted to the end.

mod support;

use std::time::{Duration, Instant};

use support::peak;
use tally_kernels::Control;
use tally_kernels::pegs::{
    BoardShape, PegCount, PegGame, PegTask, expand_level, pegs_at_level, start_bucket,
};

/// User plus system CPU time of this process so far, all threads (Linux; the
/// kernel counts it in ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // The fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let ticks: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse().ok())
        .collect();
    ticks.iter().sum::<f64>() / 100.0
}

fn report(name: &str, threads: usize, elapsed: Duration, cpu: f64, count: &PegCount) {
    println!(
        "{name:<34} threads {threads}: {:>7.2} s (cpu {cpu:>7.2} s)  solutions {:>26}  \
         boards {:>10}  solvable {:>10}  peak {}",
        elapsed.as_secs_f64(),
        count.solutions,
        count.memo_boards,
        count.solvable_boards,
        peak()
    );
}

fn time_game(name: &str, game: &PegGame, threads: usize) -> PegCount {
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let count = game
        .count_with_threads(threads, &Control::new())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    report(name, threads, start.elapsed(), cpu_seconds() - cpu, &count);
    count
}

fn thread_counts() -> Vec<usize> {
    match std::env::var("PEGS_BENCH_THREADS") {
        Ok(t) => vec![t.parse().expect("PEGS_BENCH_THREADS")],
        Err(_) => vec![1, 2],
    }
}

fn english(threads: &[usize]) {
    let game = PegGame::new(BoardShape::English, None, Some(17)).expect("english");
    for &t in threads {
        let count = time_game("english 17 -> 17", &game, t);
        assert_eq!(count.solutions, 40_861_647_040_079_968);
    }
}

fn triangle(side: u32, start: u32, threads: &[usize]) {
    let game = PegGame::new(BoardShape::Triangle(side), Some(start), None).expect("triangle");
    for &t in threads {
        time_game(&format!("triangle:{side} {start} -> any"), &game, t);
    }
}

/// A board after `jumps` jumps from the start of `game`, picked by `seed`.
fn random_descendant(game: &PegGame, jumps: usize, mut seed: u64) -> Option<u64> {
    let mut board = game.start_board();
    for _ in 0..jumps {
        let legal: Vec<u64> = game
            .jumps()
            .iter()
            .filter(|j| board & (j.from | j.over) == j.from | j.over && board & j.to == 0)
            .map(|j| j.mask())
            .collect();
        if legal.is_empty() {
            return None;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        board ^= legal[(seed % legal.len() as u64) as usize];
    }
    Some(board)
}

fn french(threads: &[usize]) {
    let centre = PegGame::new(BoardShape::French, None, None).expect("french");
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let count = centre.count(&Control::new()).expect("french centre");
    report(
        "french 19 -> any (parities)",
        1,
        start.elapsed(),
        cpu_seconds() - cpu,
        &count,
    );

    // Classes after d jumps from hole 1, to see how the layers grow.
    let game = PegGame::new(BoardShape::French, Some(1), None).expect("french");
    let mut min_tasks = 1;
    let mut last = 0;
    loop {
        let tasks = game.prefix_tasks(min_tasks).expect("the counts fit");
        if tasks.len() <= last {
            break;
        }
        let depth = 36 - tasks[0].board.count_ones();
        println!(
            "french 1: {:>8} classes after {depth:>2} jumps ({:.1} s)",
            tasks.len(),
            start.elapsed().as_secs_f64()
        );
        last = tasks.len();
        if last > 100_000 {
            break;
        }
        min_tasks = last + 1;
    }

    // Whole counts from boards part of the way down.
    let tasks: usize = std::env::var("PEGS_BENCH_FRENCH_TASKS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(3);
    for jumps in [14, 12, 10] {
        let boards: Vec<u64> = (1..)
            .filter_map(|seed| random_descendant(&game, jumps, seed))
            .take(tasks)
            .collect();
        for &t in threads {
            let batch: Vec<PegTask> = boards
                .iter()
                .map(|&board| PegTask {
                    board,
                    multiplicity: 1,
                })
                .collect();
            let (start, cpu) = (Instant::now(), cpu_seconds());
            let count = game
                .count_from_with_threads(&batch, t, &Control::new(), |_, _| {})
                .expect("french tasks");
            let name = format!("french 1, {tasks} boards after {jumps} jumps");
            report(&name, t, start.elapsed(), cpu_seconds() - cpu, &count);
        }
    }
}

/// The search by levels from `start` (no final hole), in one bucket on one
/// thread, pruned and with `--no-prune`'s game: per level the positions
/// reached and expanded and the seconds, until the one-peg level, a level
/// of more than `PEGS_BENCH_MAX_LEVEL` positions (default 60 million) or
/// `PEGS_BENCH_SECONDS` (default 600) per search.
fn levels(shape: BoardShape, start: Option<u32>) {
    let max_level: u64 = std::env::var("PEGS_BENCH_MAX_LEVEL")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(60_000_000);
    let seconds: u64 = std::env::var("PEGS_BENCH_SECONDS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(600);
    let game = PegGame::new(shape, start, None)
        .expect("a game")
        .fixing_start();
    for pruned in [true, false] {
        let game = game.clone().with_pruning(pruned);
        let name = format!(
            "{shape} {} levels{}",
            game.start_hole(),
            if pruned { "" } else { " (no pruning)" }
        );
        let (began, cpu) = (Instant::now(), cpu_seconds());
        if let Some(pruner) = game.pruner() {
            println!(
                "{name}: {} pagodas in {:.2} s",
                pruner.pagodas(),
                began.elapsed().as_secs_f64()
            );
        }
        let control = Control::new();
        let mut inbox = vec![start_bucket(&game)];
        let (mut reached, mut expanded) = (0u64, 0u64);
        for level in 0.. {
            if pegs_at_level(&game, level).is_none_or(|p| p == 0) {
                break;
            }
            let at = Instant::now();
            let part = expand_level(&game, level, inbox, 1, &control).expect("a level");
            reached += part.states;
            expanded += part.expanded;
            println!(
                "{name} {level:>2}: {:>11} reached {:>11} expanded {:>8.2} s",
                part.states,
                part.expanded,
                at.elapsed().as_secs_f64()
            );
            inbox = part.sent;
            let next: u64 = inbox.iter().map(|b| b.len() as u64).sum();
            if part.states == 0 || next > max_level || began.elapsed().as_secs() > seconds {
                break;
            }
        }
        println!(
            "{name}: {reached} reached, {expanded} expanded, {:.1} s (cpu {:.1} s), peak {}",
            began.elapsed().as_secs_f64(),
            cpu_seconds() - cpu,
            peak()
        );
    }
}

fn main() {
    let cases: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |case: &str| cases.is_empty() || cases.iter().any(|c| c == case);
    let threads = thread_counts();
    if wanted("triangle6") {
        triangle(6, 1, &threads);
        triangle(6, 4, &threads);
    }
    if wanted("triangle7") {
        triangle(7, 1, &threads);
        triangle(7, 4, &threads);
    }
    if wanted("english") {
        english(&threads);
    }
    if wanted("french") {
        french(&threads);
    }
    // Not in the default run: the searches by levels, pruned and not.
    if cases.iter().any(|c| c == "levels-english") {
        levels(BoardShape::English, None);
    }
    if cases.iter().any(|c| c == "levels-french6") {
        levels(BoardShape::French, Some(6));
    }
}
