//! Measures the stage data of the pegs frontier plan level by level, as its
//! shards write it: for each level, its positions (distinct classes), the
//! copies of them the shards of the level before sent (a position reached
//! from parents in several shards is sent by each), and the bytes of those
//! lists in the raw form (`PegBucket::encode`, jobs planned before the
//! compact form) and in the compact form (`pegs::LevelForm::Compact`), split
//! into the bytes of the keys and of the counts. The shards run one after
//! another in this process, through `expand_level_within`, reading the
//! compact form.
//!
//! `cargo bench -p tally-kernels --bench pegs_stage -- BOARD START BUCKETS [LAST]`:
//! BOARD as `--board`, START a hole (0: the board's default), BUCKETS a
//! shard count for every level or `default` (the plan's choice on 2 slots:
//! one shard per 500,000 positions of the level before, in rounds of 2),
//! LAST the last level to run (default: to the end). `PEGS_STAGE_DUMP=DIR`
//! writes each level's largest list in both forms to DIR (to try a general
//! compressor on them).

use std::time::Instant;

use tally_kernels::Control;
use tally_kernels::buckets::bucket_count;
use tally_kernels::compact::ListStream;
use tally_kernels::pegs::{
    BoardRanks, LevelForm, PegGame, SentBucket, expand_level_within, parse_board, start_bucket,
};
use tally_kernels::spill::{MemorySpill, Room};

fn varint_len(value: u128) -> u64 {
    u64::from((128 - value.leading_zeros()).max(1).div_ceil(7))
}

/// The bytes of one compact list: `(entries, raw form, compact form, keys
/// of the compact form, counts)`.
fn measure(list: &[u8], ranks: &BoardRanks) -> (u64, u64, u64, u64, u64) {
    let mut stream = ListStream::new(list, "measured list".into()).expect("a list");
    let raw_head = varint_len(stream.len());
    let (mut entries, mut raw, mut keys, mut counts) = (0, raw_head, 0, 0);
    let (mut previous_key, mut previous_board) = (0u128, 0u64);
    while let Some((key, ways)) = stream.pull().expect("a list") {
        let board = ranks.board(key).expect("a board");
        raw += varint_len(u128::from(board - previous_board)) + varint_len(ways);
        keys += varint_len(key - previous_key);
        counts += varint_len(ways);
        (previous_key, previous_board) = (key, board);
        entries += 1;
    }
    (entries, raw, list.len() as u64, keys, counts)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [board, start, buckets, rest @ ..] = args.as_slice() else {
        eprintln!("usage: pegs_stage BOARD START BUCKETS [LAST]");
        std::process::exit(2);
    };
    let shape = parse_board(board).expect("a board");
    let start: u32 = start.parse().expect("START");
    let game = PegGame::new(shape, (start > 0).then_some(start), None).expect("a game");
    let fixed: Option<u32> = (buckets != "default").then(|| buckets.parse().expect("BUCKETS"));
    let last: u32 = rest.first().map_or(u32::MAX, |l| l.parse().expect("LAST"));
    let dump = std::env::var("PEGS_STAGE_DUMP").ok();
    let ranks = BoardRanks::new(game.hole_mask());
    let form = LevelForm::Compact;
    let control = Control::new();

    println!(
        "{board} from {start}, buckets {buckets}\n\
         level | positions | shards | copies | raw bytes | compact bytes | raw B/pos | \
         compact B/pos | key B/copy | count B/copy | s"
    );
    let mut inbox: Vec<Vec<Vec<u8>>> = vec![vec![start_bucket(&game).encode_as(form, &ranks)]];
    let mut size_before = 1u64;
    let mut totals = (0u64, 0u64, 0u64);
    for level in 0..=last {
        let clock = Instant::now();
        let buckets_out =
            fixed.unwrap_or_else(|| bucket_count(size_before, 500_000, 125_000, 0, 1024, 2));
        let (mut positions, mut sent) = (0u64, (0u64, 0u64, 0u64, 0u64, 0u64));
        for parts in &inbox {
            for part in parts {
                let m = measure(part, &ranks);
                sent = (
                    sent.0 + m.0,
                    sent.1 + m.1,
                    sent.2 + m.2,
                    sent.3 + m.3,
                    sent.4 + m.4,
                );
            }
        }
        let mut next: Vec<Vec<Vec<u8>>> = vec![Vec::new(); buckets_out as usize];
        let shards = inbox.len();
        let mut largest: Option<&Vec<u8>> = None;
        for parts in &inbox {
            largest = parts.iter().chain(largest).max_by_key(|p| p.len());
        }
        if let (Some(dir), Some(list)) = (&dump, largest) {
            std::fs::write(format!("{dir}/level-{level}.compact"), list).expect("dump");
            let decoded = tally_kernels::pegs::PegBucket::decode_as(list, form, &ranks, "dump")
                .expect("a list");
            std::fs::write(format!("{dir}/level-{level}.raw"), decoded.encode()).expect("dump");
        }
        let more = tally_kernels::pegs::pegs_at_level(&game, level).is_some_and(|p| p > 1);
        for parts in std::mem::take(&mut inbox) {
            let mut spill = MemorySpill::default();
            let mut room = Room {
                memory: u64::MAX,
                spill: &mut spill,
            };
            let bytes = parts.iter().map(|p| p.len() as u64).sum();
            let slices = parts.iter().map(Vec::as_slice).collect();
            let out = expand_level_within(
                &game,
                level,
                slices,
                bytes,
                buckets_out,
                form,
                &mut room,
                &control,
            )
            .expect("a level");
            positions += out.states;
            drop(parts);
            for (q, bucket) in out.sent.into_iter().enumerate() {
                match bucket {
                    SentBucket::Bytes(bytes) => next[q].push(bytes),
                    SentBucket::Spilled { .. } => unreachable!("nothing spills"),
                }
            }
        }
        let (entries, raw, compact, keys, counts) = sent;
        let per = |bytes: u64, n: u64| bytes as f64 / n.max(1) as f64;
        println!(
            "{level:>5} | {positions:>11} | {shards:>4} | {:>5.2} | {raw:>13} | {compact:>13} | \
             {:>7.1} | {:>7.1} | {:>5.2} | {:>5.2} | {:.1}",
            per(entries, positions),
            per(raw, positions),
            per(compact, positions),
            per(keys, entries),
            per(counts, entries),
            clock.elapsed().as_secs_f64()
        );
        totals = (totals.0 + positions, totals.1 + raw, totals.2 + compact);
        if positions == 0 || !more {
            break;
        }
        size_before = positions;
        inbox = next;
    }
    println!(
        "total | {:>11} | raw {} bytes, compact {} bytes: {:.1} and {:.1} B/pos",
        totals.0,
        totals.1,
        totals.2,
        totals.1 as f64 / totals.0 as f64,
        totals.2 as f64 / totals.0 as f64
    );
}
