//! Each example kernel in the sandbox against the same code built natively:
//! the whole count (every shard, one after another, on one thread), median
//! of 3 runs each, and the ratio. `cargo bench -p tally-wasm --bench examples
//! [-- QUEENS_N SETS_N]` (defaults 14 and 20).

use std::time::Instant;

use tally_wasm::{Hooks, Limits, Sandbox, ShardCall};

const QUEENS: &[u8] = include_bytes!("../../../examples/wasm/queens.wasm");
const INDEPENDENT_SETS: &[u8] = include_bytes!("../../../examples/wasm/independent-sets.wasm");
const P: u64 = 1_000_000_007;
const SHARDS: u64 = 8;
const RUNS: usize = 3;

struct Quiet;

impl Hooks for Quiet {
    fn progress(&mut self, _: u64, _: u64) {}
    fn checkpoint(&mut self, _: &[u8]) {}
    fn cancelled(&self) -> bool {
        false
    }
}

type Native = fn(u64, u64, u64, &str, &[u8], usize) -> Result<Vec<u64>, tally_guest::KernelError>;

/// The median time of `count` and its result.
fn median(mut count: impl FnMut() -> u64) -> (f64, u64) {
    let mut times = Vec::new();
    let mut result = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        result = count();
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (times[RUNS / 2], result)
}

fn compare(name: &str, module: &[u8], native: Native, params: &str) {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let kernel = sandbox.load(module).unwrap();
    let (wasm, a) = median(|| {
        (0..SHARDS)
            .map(|shard| {
                let call = ShardCall {
                    shard,
                    shards: SHARDS,
                    prime: P,
                    params,
                    state: &[],
                    outputs: 1,
                };
                sandbox.run(&kernel, &call, &mut Quiet).unwrap()[0]
            })
            .fold(0, |sum, r| (sum + r) % P)
    });
    let (native, b) = median(|| {
        (0..SHARDS)
            .map(|shard| native(shard, SHARDS, P, params, &[], 1).unwrap()[0])
            .fold(0, |sum, r| (sum + r) % P)
    });
    assert_eq!(a, b, "{name}: the sandbox and the native build disagree");
    println!(
        "{name} ({SHARDS} shards, one thread): sandbox {wasm:.3} s, native {native:.3} s, \
         ratio {:.2} (median of {RUNS}; answer mod {P}: {a})",
        wasm / native
    );
}

fn main() {
    let args: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let queens = args.first().copied().unwrap_or(14);
    let sets = args.get(1).copied().unwrap_or(20);
    compare(
        &format!("queens n={queens}"),
        QUEENS,
        tally_example_queens::run_shard,
        &format!("n={queens}\n"),
    );
    compare(
        &format!("independent sets n={sets}"),
        INDEPENDENT_SETS,
        tally_example_independent_sets::run_shard,
        &format!("n={sets}\n"),
    );
}
