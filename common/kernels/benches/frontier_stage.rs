//! Measures the stage data of the blocks and sliders frontier plans level by
//! level, in the raw form (jobs planned before the compact form) and in the
//! compact form (`compact::ListForm::Compact`, jobs planned since): for each
//! level, its states, and the bytes every shard of the level sent on (a
//! blocks layer's three lists of each bucket; a sliders level's forward
//! buckets and members), over the level's states. The shards run one after
//! another in this process, through the kernels' in-memory levels.
//!
//! `cargo bench -p tally-kernels --bench frontier_stage -- blocks FILE BUCKETS`
//! (FILE a puzzle file, `-` for Project Euler 766's), or
//! `cargo bench -p tally-kernels --bench frontier_stage -- sliders ROWS COLS START TARGET BUCKETS`.

use std::time::Instant;

use tally_kernels::Control;
use tally_kernels::blocks::{self, LevelBucket};
use tally_kernels::buckets::split_buckets;
use tally_kernels::compact::ListForm;
use tally_kernels::sliders::SliderParams;
use tally_kernels::sliders::levels::{self, Boards, ForwardBucket};

/// Prints a level's row and adds it to the totals.
fn row(level: usize, states: u64, raw: u64, compact: u64, totals: &mut [u64; 3]) {
    let per = |bytes: u64| bytes as f64 / states.max(1) as f64;
    println!(
        "| {level} | {states} | {raw} | {:.2} | {compact} | {:.2} | {:.2} |",
        per(raw),
        per(compact),
        raw as f64 / compact.max(1) as f64
    );
    *totals = [totals[0] + states, totals[1] + raw, totals[2] + compact];
}

fn header(what: &str) {
    println!(
        "| {what} | states | raw bytes | raw B/state | compact bytes | compact B/state | raw/compact |"
    );
    println!("|---|---|---|---|---|---|---|");
}

fn total(totals: [u64; 3], started: Instant) {
    let [states, raw, compact] = totals;
    println!(
        "| all | {states} | {raw} | {:.2} | {compact} | {:.2} | {:.2} |",
        raw as f64 / states as f64,
        compact as f64 / states as f64,
        raw as f64 / compact as f64
    );
    println!("({:.1} s)", started.elapsed().as_secs_f64());
}

fn blocks_levels(file: &str, buckets: u32) {
    let text = match file {
        "-" => blocks::PE766.to_string(),
        path => std::fs::read_to_string(path).expect("a puzzle file"),
    };
    let puzzle = blocks::parse_puzzle(&text).expect("a puzzle");
    let control = Control::new();
    let started = Instant::now();
    header("layer");
    let mut totals = [0; 3];
    let mut inbox: Vec<Vec<LevelBucket>> = vec![vec![blocks::start_bucket(&puzzle)]];
    for layer in 0.. {
        let mut next: Vec<Vec<LevelBucket>> = vec![Vec::new(); buckets as usize];
        let (mut states, mut raw, mut compact) = (0, 0, 0);
        for inputs in inbox {
            let (found, out) =
                blocks::expand_bucket(&puzzle, inputs, buckets, &control).expect("a layer");
            states += found;
            for (q, bucket) in out.into_iter().enumerate() {
                raw += bucket.encode_as(ListForm::Raw).len() as u64;
                compact += bucket.encode_as(ListForm::Compact).len() as u64;
                next[q].push(bucket);
            }
        }
        if states == 0 {
            break;
        }
        row(layer, states, raw, compact, &mut totals);
        inbox = next;
    }
    total(totals, started);
}

fn sliders_levels(params: &SliderParams, buckets: u32) {
    let boards = Boards::new(params).expect("boards");
    let control = Control::new();
    let started = Instant::now();
    header("level");
    let mut totals = [0; 3];
    let b = buckets as usize;
    let (start, start_members) = levels::start_input(&boards);
    let mut inputs: Vec<Vec<ForwardBucket>> = vec![start];
    let mut members: Vec<Vec<Vec<u64>>> = vec![start_members];
    for level in 0.. {
        let mut next_inputs = vec![Vec::new(); b];
        let mut next_members = vec![Vec::new(); b];
        let (mut states, mut raw, mut compact, mut found) = (0, 0, 0, false);
        for q in 0..inputs.len() {
            for form in [ListForm::Raw, ListForm::Compact] {
                let out = levels::expand_forward(
                    &boards,
                    &inputs[q],
                    &members[q],
                    buckets,
                    form,
                    &control,
                )
                .expect("a level");
                let parts = split_buckets(&out.output).expect("buckets");
                let bytes: u64 = parts.iter().map(|p| p.len() as u64).sum();
                if form == ListForm::Raw {
                    raw += bytes;
                    continue;
                }
                compact += bytes;
                states += out.boards;
                found |= out.target_paths.is_some();
                for r in 0..b {
                    next_inputs[r].push(ForwardBucket::decode(parts[r]).expect("a bucket"));
                    next_members[r].push(levels::decode_members(parts[b + r]).expect("members"));
                }
            }
        }
        if states == 0 {
            break;
        }
        row(level, states, raw, compact, &mut totals);
        if found {
            break;
        }
        inputs = next_inputs;
        members = next_members;
    }
    total(totals, started);
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["blocks", file, buckets] => blocks_levels(file, buckets.parse().expect("BUCKETS")),
        ["sliders", rows, cols, start, target, buckets] => sliders_levels(
            &SliderParams::new(
                rows.parse().expect("ROWS"),
                cols.parse().expect("COLS"),
                start,
                target,
            ),
            buckets.parse().expect("BUCKETS"),
        ),
        _ => {
            eprintln!(
                "usage: frontier_stage blocks FILE BUCKETS | sliders ROWS COLS START TARGET BUCKETS"
            );
            std::process::exit(2);
        }
    }
}
