//! The runner's overhead: `tally run hex` through the embedded runner against
//! the kernel alone, and the cost per shard (hex cell-step with few and many
//! shards a step, `-- shards`; shards of no work, `-- synthetic`), with
//! `TALLY_BENCH_BEFORE=BIN` for an older build alongside.

use crate::runner_processes::{builds, median, median_with_peak, middle};

/// `tally run hex --side 11` through the runner against the kernel alone
/// (both plans), and the cost per extra shard at side 10 (90 against 9,990
/// shards).
pub fn hex_overhead(runs: usize) {
    for plan in ["points", "cell-step"] {
        let (direct, a) = median(
            &["run", "hex", "--side", "11", "--direct", "--threads", "2"],
            runs,
        );
        let (runner, b) = median(&["run", "hex", "--side", "11", "--plan", plan], runs);
        assert_eq!(a, b, "runner and kernel disagree");
        println!(
            "hex side 11, {plan} plan: kernel alone {direct:.3} s, through the runner {runner:.3} s, ratio {:.2} (answer {a})",
            runner / direct
        );
    }

    let few = [
        "run",
        "hex",
        "--side",
        "10",
        "--plan",
        "cell-step",
        "--shards-per-step",
        "1",
    ];
    let many = [
        "run",
        "hex",
        "--side",
        "10",
        "--plan",
        "cell-step",
        "--shards-per-step",
        "111",
    ];
    let (t_few, a) = median(&few, runs);
    let (t_many, b) = median(&many, runs);
    assert_eq!(a, b);
    let shards_few = 90.0;
    let shards_many = 90.0 * 111.0;
    println!(
        "hex side 10: {shards_few} shards {t_few:.3} s, {shards_many} shards {t_many:.3} s: {:.3} ms per extra shard",
        (t_many - t_few) * 1e3 / (shards_many - shards_few)
    );
}

/// The runner's cost per shard at about 10^5 shards: `tally run hex --side 11
/// --plan cell-step` with 1 and with 1,024 shards per cell step (110 and
/// 112,640 shards), the difference per extra shard; and the same with the
/// binary named by `TALLY_BENCH_BEFORE` (an older build), when set, run
/// alternately in the same run.
pub fn shard_cost(runs: usize) {
    let job = |per_step: &str| {
        [
            "run",
            "hex",
            "--side",
            "11",
            "--plan",
            "cell-step",
            "--shards-per-step",
            per_step,
        ]
        .map(String::from)
    };
    let binaries = builds();
    let (few, many) = (110.0, 110.0 * 1024.0);
    let mut costs = Vec::new();
    for (name, binary) in &binaries {
        let time = |args: &[String]| median_with_peak(binary.as_os_str(), args, runs);
        let (t_few, a, _) = time(&job("1"));
        let (t_many, b, peak) = time(&job("1024"));
        assert_eq!(a, b, "{name}: the answers differ");
        let per_shard = (t_many - t_few) * 1e3 / (many - few);
        println!(
            "{name}: hex side 11 cell-step, {few} shards {t_few:.2} s, {many} shards {t_many:.2} s \
             (peak {:.0} MB): {per_shard:.3} ms per extra shard",
            peak as f64 / 1e6
        );
        costs.push(per_shard);
    }
    if let [now, before] = costs[..] {
        println!("cost per shard, this build / before: {:.2}", now / before);
    }
}

/// The runner's own cost per shard, with nothing else in the way: `tally run
/// synthetic` (shards of one term each) with 1,000 and with `shards` shards,
/// 128 slots (so that leases and reports go many to a round trip), the
/// difference per extra shard, and the peak memory of the larger job; and the
/// same with the binary named by `TALLY_BENCH_BEFORE` (an older build), when
/// set, the two run alternately in the same run.
pub fn synthetic_cost(shards: u64, runs: usize) {
    let job = |n: u64| {
        ["run", "synthetic", "--slots", "128", "--shards"]
            .map(String::from)
            .into_iter()
            .chain([n.to_string()])
            .collect::<Vec<_>>()
    };
    let binaries = builds();
    let few = 1_000;
    // Alternate the builds run by run, so that both see the same machine.
    let mut times = vec![(Vec::new(), Vec::new(), String::new(), 0u64); binaries.len()];
    for _ in 0..runs {
        for ((_, binary), (t_few, t_many, answer, peak)) in binaries.iter().zip(&mut times) {
            t_few.push(median_with_peak(binary, &job(few), 1).0);
            let (t, a, p) = median_with_peak(binary, &job(shards), 1);
            t_many.push(t);
            *answer = a;
            *peak = (*peak).max(p);
        }
    }
    let mut costs = Vec::new();
    for ((name, _), (t_few, t_many, answer, peak)) in binaries.iter().zip(times) {
        let (t_few, t_many) = (middle(t_few), middle(t_many));
        let per_shard = (t_many - t_few) * 1e3 / (shards - few) as f64;
        println!(
            "{name}: synthetic {few} shards {t_few:.2} s, {shards} shards {t_many:.2} s (peak {:.0} MB, \
             answer {answer}): {per_shard:.3} ms per extra shard",
            peak as f64 / 1e6
        );
        costs.push(per_shard);
    }
    if let [now, before] = costs[..] {
        println!("cost per shard, this build / before: {:.2}", now / before);
    }
}
