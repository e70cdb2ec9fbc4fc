//! Measures the stage data of the pegs frontier plan level by level, as its
//! shards write it: for each level, its positions (distinct classes), the
//! copies of them the shards of the level before sent (a position reached
//! from parents in several shards is sent by each), and the bytes of those
//! lists in the raw form (`PegBucket::encode`, jobs planned before the
//! compact form), with the boards as ranks but gaps and counts as varints
//! (the step between, to tell the levers apart), and in the compact form
//! (`pegs::LevelForm::Compact`). The shards run one after another in this
//! process, through `expand_level_within`, reading the compact form.
//!
//! `cargo bench -p tally-kernels --bench pegs_stage -- BOARD START BUCKETS [LAST]`:
//! BOARD as `--board`, START a hole (0: the board's default), BUCKETS a
//! shard count for every level, `default` (the plan's choice on 2 slots: a
//! shard per slot, more past 2^28 positions a shard) or `sized:N` (a shard
//! per N positions of the level before, in rounds of 2 slots; `sized:500000`
//! was the plan's choice before), LAST the last level to run (default: to the
//! end). `PEGS_STAGE_DUMP=DIR`
//! writes each level's largest list in both forms to DIR (to try a general
//! compressor on them).

use std::time::Instant;

use tally_kernels::Control;
use tally_kernels::buckets::bucket_count;
use tally_kernels::compact::ListStream;
use tally_kernels::pegs::{
    BoardRanks, LevelForm, PegBucket, PegGame, SentBucket, expand_level_within, parse_board,
    pegs_at_level, start_bucket,
};
use tally_kernels::spill::{MemorySpill, Room};

fn varint_len(value: u128) -> u64 {
    u64::from((128 - value.leading_zeros()).max(1).div_ceil(7))
}

/// The bytes of one compact list: `[entries, raw form, ranks as varints,
/// compact form]`.
fn measure(list: &[u8], ranks: &BoardRanks) -> [u64; 4] {
    let mut stream = ListStream::new(list, "measured list".into()).expect("a list");
    let head = varint_len(stream.len());
    let (mut entries, mut raw, mut varints) = (0, head, head);
    let (mut previous_key, mut previous_board) = (0u128, 0u64);
    while let Some((key, ways)) = stream.pull().expect("a list") {
        let board = ranks.board(key).expect("a board");
        raw += varint_len(u128::from(board - previous_board)) + varint_len(ways);
        varints += varint_len(key - previous_key) + varint_len(ways);
        (previous_key, previous_board) = (key, board);
        entries += 1;
    }
    [entries, raw, varints, list.len() as u64]
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
    // (positions a shard, positions worth a shard, a fixed count)
    let (per_shard, worth_a_shard, fixed) = match buckets.as_str() {
        "default" => (1 << 28, 125_000, 0),
        sized if sized.starts_with("sized:") => {
            let n: u64 = sized["sized:".len()..].parse().expect("sized:N");
            (n, n / 4, 0)
        }
        fixed => (1, 1, fixed.parse().expect("BUCKETS")),
    };
    let last: u32 = rest.first().map_or(u32::MAX, |l| l.parse().expect("LAST"));
    let dump = std::env::var("PEGS_STAGE_DUMP").ok();
    let ranks = BoardRanks::new(game.hole_mask());
    let form = LevelForm::Compact;
    let control = Control::new();

    println!(
        "{board} from {start}, buckets {buckets}\n\
         level | positions | shards | copies | raw bytes | compact bytes | raw B/pos | \
         ranks+varints B/pos | compact B/pos | s"
    );
    let mut inbox: Vec<Vec<Vec<u8>>> = vec![vec![start_bucket(&game).encode_as(form, &ranks)]];
    let mut size_before = 1u64;
    let mut totals = [0u64; 4];
    for level in 0..=last {
        let clock = Instant::now();
        let buckets_out = bucket_count(size_before, per_shard, worth_a_shard, fixed, 1024, 2);
        let mut sent = [0u64; 4];
        for part in inbox.iter().flatten() {
            for (sum, bytes) in sent.iter_mut().zip(measure(part, &ranks)) {
                *sum += bytes;
            }
        }
        if let (Some(dir), Some(list)) = (&dump, inbox.iter().flatten().max_by_key(|p| p.len())) {
            std::fs::write(format!("{dir}/level-{level}.compact"), list).expect("dump");
            let decoded = PegBucket::decode_as(list, form, &ranks, "dump").expect("a list");
            std::fs::write(format!("{dir}/level-{level}.raw"), decoded.encode()).expect("dump");
        }
        let shards = inbox.len();
        let more = pegs_at_level(&game, level).is_some_and(|p| p > 1);
        let mut next: Vec<Vec<Vec<u8>>> = vec![Vec::new(); buckets_out as usize];
        let mut positions = 0u64;
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
            for (q, bucket) in out.sent.into_iter().enumerate() {
                match bucket {
                    SentBucket::Bytes(bytes) => next[q].push(bytes),
                    SentBucket::Spilled { .. } => unreachable!("nothing spills"),
                }
            }
        }
        let [entries, raw, varints, compact] = sent;
        let per = |bytes: u64| bytes as f64 / positions.max(1) as f64;
        println!(
            "{level:>5} | {positions:>11} | {shards:>4} | {:>5.2} | {raw:>13} | {compact:>13} | \
             {:>6.1} | {:>6.1} | {:>6.1} | {:.1}",
            per(entries),
            per(raw),
            per(varints),
            per(compact),
            clock.elapsed().as_secs_f64()
        );
        for (sum, value) in totals.iter_mut().zip([positions, raw, varints, compact]) {
            *sum += value;
        }
        if positions == 0 || !more {
            break;
        }
        size_before = positions;
        inbox = next;
    }
    let [positions, raw, varints, compact] = totals;
    let per = |bytes: u64| bytes as f64 / positions.max(1) as f64;
    println!(
        "total | {positions:>11} | raw {raw} bytes, ranks+varints {varints}, compact {compact}: \
         {:.1}, {:.1} and {:.1} B/pos",
        per(raw),
        per(varints),
        per(compact)
    );
}
