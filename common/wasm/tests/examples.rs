//! The example kernels (`examples/wasm/*.wasm`, built by
//! `examples/wasm/build.sh`) in the sandbox: their sums over shards equal the
//! published counts (OEIS A000170, A006506) and, shard by shard, the same
//! code built natively; a shard resumed from one of its checkpoints gives the
//! same residue.

use tally_wasm::{Hooks, Kernel, Limits, Sandbox, ShardCall};

const QUEENS: &[u8] = include_bytes!("../../../examples/wasm/queens.wasm");
const INDEPENDENT_SETS: &[u8] = include_bytes!("../../../examples/wasm/independent-sets.wasm");

const P: u64 = 1_000_000_007;
/// A prime near 2^61, where products need 122 bits.
const P61: u64 = (1 << 61) - 1;

#[derive(Default)]
struct Kept {
    checkpoints: Vec<Vec<u8>>,
}

impl Hooks for Kept {
    fn progress(&mut self, _done: u64, _total: u64) {}
    fn checkpoint(&mut self, state: &[u8]) {
        self.checkpoints.push(state.to_vec());
    }
    fn cancelled(&self) -> bool {
        false
    }
}

type Native = fn(u64, u64, u64, &str, &[u8], usize) -> Result<Vec<u64>, tally_guest::KernelError>;

/// The sum over `shards` shards modulo `prime`, in the sandbox, each shard
/// checked against the native build.
fn sum(
    sandbox: &Sandbox,
    kernel: &Kernel,
    native: Native,
    params: &str,
    shards: u64,
    prime: u64,
) -> u64 {
    let mut total = 0u64;
    for shard in 0..shards {
        let call = ShardCall {
            shard,
            shards,
            prime,
            params,
            state: &[],
            outputs: 1,
        };
        let got = sandbox.run(kernel, &call, &mut Kept::default()).unwrap();
        let want = native(shard, shards, prime, params, &[], 1).unwrap();
        assert_eq!(got, want, "{params:?} shard {shard}/{shards}");
        total = (total + got[0]) % prime;
    }
    total
}

#[test]
fn queens_in_the_sandbox_equal_the_published_counts_and_the_native_build() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let kernel = sandbox.load(QUEENS).unwrap();
    for (n, &count) in tally_example_queens::A000170
        .iter()
        .enumerate()
        .take(12)
        .skip(1)
    {
        for shards in [1, 3, 7] {
            let params = format!("n={n}\n");
            for prime in [P, P61] {
                let got = sum(
                    &sandbox,
                    &kernel,
                    tally_example_queens::run_shard,
                    &params,
                    shards,
                    prime,
                );
                assert_eq!(got, count % prime, "n={n}, {shards} shards");
            }
        }
    }
}

#[test]
fn independent_sets_in_the_sandbox_equal_the_published_counts_and_the_native_build() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let kernel = sandbox.load(INDEPENDENT_SETS).unwrap();
    let published = tally_example_independent_sets::A006506;
    for (n, &count) in published.iter().enumerate().take(10).skip(1) {
        for shards in [1, 3, 7] {
            let params = format!("n={n}\n");
            for prime in [P, P61] {
                let native = tally_example_independent_sets::run_shard;
                let got = sum(&sandbox, &kernel, native, &params, shards, prime);
                assert_eq!(
                    u128::from(got),
                    count % u128::from(prime),
                    "n={n}, {shards} shards"
                );
            }
        }
    }
}

#[test]
fn a_queens_shard_resumed_from_its_checkpoint_gives_the_same_residue() {
    let sandbox = Sandbox::new(Limits::default()).unwrap();
    let kernel = sandbox.load(QUEENS).unwrap();
    let params = "n=10\ncheckpoint_every=1\n";
    let call = ShardCall {
        shard: 1,
        shards: 2,
        prime: P,
        params,
        state: &[],
        outputs: 1,
    };
    let mut kept = Kept::default();
    let fresh = sandbox.run(&kernel, &call, &mut kept).unwrap();
    assert!(
        kept.checkpoints.len() > 2,
        "{} checkpoints",
        kept.checkpoints.len()
    );
    for state in [
        &kept.checkpoints[0],
        &kept.checkpoints[kept.checkpoints.len() / 2],
    ] {
        let resumed = ShardCall { state, ..call };
        assert_eq!(
            sandbox
                .run(&kernel, &resumed, &mut Kept::default())
                .unwrap(),
            fresh
        );
    }
}
