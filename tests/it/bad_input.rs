//! Bad input against a running coordinator, table by table: every spec value at
//! its limit (accepted) and just past it (refused), and malformed or misdirected
//! worker messages. A refused row must give its gRPC code and a message naming
//! the problem, and leave the jobs, their event logs and the leases held on
//! them exactly as they were.

use crate::support;

use std::collections::BTreeMap;

use serde::Serialize;
use support::*;
use tally_kernels::{hex, kayles};
use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::dynamic::{ShardContext, StageInput};
use tally_kinds::hex::{self as hex_kind, HexPartial, HexPlan, HexSpec, MAX_SHARDS_PER_STEP};
use tally_kinds::kind::{CHECKPOINT_EVERY, WORKER_MEMORY_BUDGET, WorkerRoom};

/// The largest shard output a coordinator that keeps stage data itself (as
/// the coordinators of these tests do) takes.
const COORDINATOR_OUTPUT_LIMIT: Option<u64> =
    Some(tally_wire::limits::MAX_REPORT_OUTPUT_BYTES as u64);
use tally_kinds::sliders::{MAX_PREFIX_TASKS, SlidersPartial, SlidersTask};
use tally_kinds::spec::{self, JobSpec, ValidSpec};
use tally_kinds::values::{EncodedTask, ShardOutcome};
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::worker_service_client::WorkerServiceClient;
use tally_wire::proto::{self, job_spec::Kind, report_message::Body};
use tonic::Code;
use tonic::transport::Channel;

/// What a row expects.
#[derive(Debug)]
enum Expect {
    /// Stored; the job that comes back carries the same spec.
    Accepted,
    /// Valid, but not submitted because planning it would build a large graph:
    /// checked through the same conversion and validation the service runs.
    Valid,
    Refused(Code, &'static str),
}

use Expect::*;

/// Anything past tonic's decoding limit is refused by tonic itself.
const OVERSIZED: usize = tally_wire::limits::MAX_MESSAGE_BYTES + 1;

// ------------------------------------------------------------ spec values

fn kind(kind: Kind) -> proto::JobSpec {
    proto::JobSpec {
        kind: Some(kind),
        options: None,
    }
}

fn hex_spec(side: u32, modulus: u32, plan: &str) -> proto::HexSpec {
    proto::HexSpec {
        side,
        modulus,
        plan: plan.into(),
        shards_per_step: 0,
        exact: false,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    }
}

fn hex(side: u32, modulus: u32) -> proto::JobSpec {
    kind(Kind::Hex(hex_spec(side, modulus, "")))
}

fn hex_with(side: u32, adjust: impl FnOnce(&mut proto::HexSpec)) -> proto::JobSpec {
    let mut h = hex_spec(side, 0, "");
    adjust(&mut h);
    kind(Kind::Hex(h))
}

/// `spec` with `--force`: past the memory estimate's refusal.
fn forced(spec: proto::JobSpec) -> proto::JobSpec {
    proto::JobSpec {
        options: Some(proto::RunnerOptions {
            force: true,
            ..Default::default()
        }),
        ..spec
    }
}

fn kayles(pins: u64, digits: u32) -> proto::JobSpec {
    kind(Kind::Kayles(proto::KaylesSpec { pins, digits }))
}

fn sliders(rows: u32, cols: u32, start: &str, target: &str) -> proto::JobSpec {
    sliders_with(rows, cols, start, target, |_| {})
}

fn sliders_with(
    rows: u32,
    cols: u32,
    start: &str,
    target: &str,
    adjust: impl FnOnce(&mut proto::SlidersSpec),
) -> proto::JobSpec {
    let mut s = proto::SlidersSpec {
        rows,
        cols,
        start: start.into(),
        target: target.into(),
        checksum_base: 0,
        checksum_modulus: 0,
        prefixes: 0,
        ..Default::default()
    };
    adjust(&mut s);
    kind(Kind::Sliders(s))
}

/// A small kayles job with adjusted runner options.
fn options(adjust: impl FnOnce(&mut proto::RunnerOptions)) -> proto::JobSpec {
    let mut o = proto::RunnerOptions::default();
    adjust(&mut o);
    proto::JobSpec {
        options: Some(o),
        ..kayles(10, 0)
    }
}

/// The smallest hex side whose cell-step plan is refused by the resource
/// estimate (without --force), from the estimate itself.
fn first_side_over_budget() -> u32 {
    (1..=hex::MAX_SIDE)
        .find(|&side| {
            let h = HexSpec {
                side,
                modulus: hex::DEFAULT_MODULUS,
                plan: HexPlan::CellStep,
                shards_per_step: 0,
                exact: false,
                points_per_shard: 0,
                graph: Default::default(),
                graph_parts: 0,
            };
            hex_kind::estimate(&h).smallest_worker_bytes() > WORKER_MEMORY_BUDGET
        })
        .expect("some side is over the budget")
}

fn spec_rows() -> Vec<(String, proto::JobSpec, Expect)> {
    let max_side = hex::MAX_SIDE;
    let max_pins = kayles::MAX_PINS;
    let max_digits = kayles::MAX_DIGITS;
    let over = first_side_over_budget();
    let cells_25 = format!("W{}", "R".repeat(24));
    vec![
        // Runner options.
        (
            "priority max".into(),
            options(|o| o.priority = spec::MAX_PRIORITY),
            Accepted,
        ),
        (
            "priority min".into(),
            options(|o| o.priority = -spec::MAX_PRIORITY),
            Accepted,
        ),
        (
            "priority max+1".into(),
            options(|o| o.priority = spec::MAX_PRIORITY + 1),
            Refused(
                Code::InvalidArgument,
                "priority must be between -1000 and 1000, got 1001",
            ),
        ),
        (
            "priority min-1".into(),
            options(|o| o.priority = -spec::MAX_PRIORITY - 1),
            Refused(Code::InvalidArgument, "got -1001"),
        ),
        (
            "priority i32::MIN".into(),
            options(|o| o.priority = i32::MIN),
            Refused(Code::InvalidArgument, "priority must be between"),
        ),
        (
            "priority i32::MAX".into(),
            options(|o| o.priority = i32::MAX),
            Refused(Code::InvalidArgument, "priority must be between"),
        ),
        (
            "max attempts 0 (default)".into(),
            options(|o| o.max_attempts = 0),
            Accepted,
        ),
        (
            "max attempts 1".into(),
            options(|o| o.max_attempts = 1),
            Accepted,
        ),
        (
            "max attempts max".into(),
            options(|o| o.max_attempts = spec::MAX_ATTEMPTS),
            Accepted,
        ),
        (
            "max attempts max+1".into(),
            options(|o| o.max_attempts = spec::MAX_ATTEMPTS + 1),
            Refused(
                Code::InvalidArgument,
                "max attempts must be between 1 and 100, got 101",
            ),
        ),
        (
            "max attempts u32::MAX".into(),
            options(|o| o.max_attempts = u32::MAX),
            Refused(Code::InvalidArgument, "max attempts"),
        ),
        (
            "lease TTL 0 (default)".into(),
            options(|o| o.lease_ttl_ms = 0),
            Accepted,
        ),
        (
            "lease TTL min".into(),
            options(|o| o.lease_ttl_ms = spec::MIN_LEASE_TTL_MS),
            Accepted,
        ),
        (
            "lease TTL min-1".into(),
            options(|o| o.lease_ttl_ms = spec::MIN_LEASE_TTL_MS - 1),
            Refused(
                Code::InvalidArgument,
                "lease TTL must be between 500 and 3600000 ms, got 499",
            ),
        ),
        (
            "lease TTL max".into(),
            options(|o| o.lease_ttl_ms = spec::MAX_LEASE_TTL_MS),
            Accepted,
        ),
        (
            "lease TTL max+1".into(),
            options(|o| o.lease_ttl_ms = spec::MAX_LEASE_TTL_MS + 1),
            Refused(Code::InvalidArgument, "got 3600001"),
        ),
        (
            "lease TTL u64::MAX".into(),
            options(|o| o.lease_ttl_ms = u64::MAX),
            Refused(Code::InvalidArgument, "lease TTL"),
        ),
        (
            "replicas 0 (default)".into(),
            options(|o| o.replicas = 0),
            Accepted,
        ),
        ("replicas 1".into(), options(|o| o.replicas = 1), Accepted),
        (
            "replicas max".into(),
            options(|o| o.replicas = spec::MAX_REPLICAS),
            Accepted,
        ),
        (
            "replicas max+1".into(),
            options(|o| o.replicas = spec::MAX_REPLICAS + 1),
            Refused(
                Code::InvalidArgument,
                "replicas must be between 1 and 3, got 4",
            ),
        ),
        (
            "max slots 0 (no cap)".into(),
            options(|o| o.max_slots = 0),
            Accepted,
        ),
        (
            "max slots max".into(),
            options(|o| o.max_slots = spec::MAX_JOB_SLOTS),
            Accepted,
        ),
        (
            "max slots max+1".into(),
            options(|o| o.max_slots = spec::MAX_JOB_SLOTS + 1),
            Refused(Code::InvalidArgument, "max slots must be at most 1000000"),
        ),
        // Hex.
        (
            "hex side 0".into(),
            hex(0, 0),
            Refused(
                Code::InvalidArgument,
                "side must be between 1 and 20, got 0",
            ),
        ),
        ("hex side 1".into(), hex(1, 0), Accepted),
        (
            "hex side 16 (the largest in a u64 state)".into(),
            hex(hex::NARROW_SIDES, 0),
            Accepted,
        ),
        (
            "hex side 17 (the smallest in a u128 state)".into(),
            hex(hex::NARROW_SIDES + 1, 0),
            Accepted,
        ),
        (
            "hex side 17, exact".into(),
            hex_with(hex::NARROW_SIDES + 1, |h| h.exact = true),
            Accepted,
        ),
        (
            // The graph as stage data, in parts: a point worker holds no graph.
            "hex side max".into(),
            hex(max_side, 0),
            Accepted,
        ),
        (
            "hex side max, graph in the workers (over the memory budget)".into(),
            hex_with(max_side, |h| h.graph = "worker".into()),
            Refused(Code::InvalidArgument, "or --force"),
        ),
        (
            "hex side max, the most graph parts".into(),
            hex_with(max_side, |h| h.graph_parts = hex::max_graph_parts(max_side)),
            Accepted,
        ),
        (
            "hex side 9, one graph part past the most".into(),
            hex_with(9, |h| h.graph_parts = hex::max_graph_parts(9) + 1),
            Refused(Code::InvalidArgument, "is built in at most"),
        ),
        (
            "hex graph parts with the graph in the workers".into(),
            hex_with(9, |h| {
                h.graph = "worker".into();
                h.graph_parts = 2;
            }),
            Refused(Code::InvalidArgument, "--graph stage"),
        ),
        (
            "hex side max, exact, forced".into(),
            forced(hex_with(max_side, |h| h.exact = true)),
            Accepted,
        ),
        (
            "hex side max+1".into(),
            hex(max_side + 1, 0),
            Refused(
                Code::InvalidArgument,
                "side must be between 1 and 20, got 21",
            ),
        ),
        (
            "hex side u32::MAX".into(),
            hex(u32::MAX, 0),
            Refused(Code::InvalidArgument, "side must be between"),
        ),
        (
            "hex cell-step, one cell, modulus 2".into(),
            hex_with(1, |h| {
                h.plan = "cell-step".into();
                h.modulus = 2;
            }),
            Accepted,
        ),
        (
            "hex points, one cell, modulus 2 (no evaluation point)".into(),
            hex(1, 2),
            Refused(
                Code::InvalidArgument,
                "modulus 2 is too small for the points plan of side 1: it has 0 evaluation points, the plan needs 1",
            ),
        ),
        (
            "hex points, one cell, modulus 3".into(),
            hex(1, 3),
            Refused(
                Code::InvalidArgument,
                "modulus 3 is too small for the points plan",
            ),
        ),
        (
            "hex points, one cell, modulus 5 (one evaluation point)".into(),
            hex(1, 5),
            Accepted,
        ),
        (
            "hex modulus 1".into(),
            hex(1, 1),
            Refused(
                Code::InvalidArgument,
                "modulus must be greater than the number of cells 1^2 = 1, got 1",
            ),
        ),
        (
            "hex modulus not prime".into(),
            hex(1, 4),
            Refused(Code::InvalidArgument, "modulus must be a prime, got 4"),
        ),
        (
            "hex modulus Carmichael".into(),
            hex(3, 561),
            Refused(Code::InvalidArgument, "modulus must be a prime, got 561"),
        ),
        (
            "hex modulus 1e9+8".into(),
            hex(3, 1_000_000_008),
            Refused(Code::InvalidArgument, "modulus must be a prime"),
        ),
        (
            "hex modulus = cells".into(),
            hex(4, 16),
            Refused(
                Code::InvalidArgument,
                "greater than the number of cells 4^2 = 16",
            ),
        ),
        (
            "hex modulus prime below cells".into(),
            hex(4, 13),
            Refused(Code::InvalidArgument, "greater than the number of cells"),
        ),
        (
            "hex modulus smallest prime above cells".into(),
            hex(4, 17),
            Accepted,
        ),
        (
            "hex modulus largest prime below 2^31".into(),
            hex(5, 2_147_483_647),
            Accepted,
        ),
        (
            "hex modulus 2^31".into(),
            hex(5, 1 << 31),
            Refused(Code::InvalidArgument, "modulus must be below 2^31"),
        ),
        (
            "hex modulus u32::MAX".into(),
            hex(5, u32::MAX),
            Refused(Code::InvalidArgument, "modulus must be below 2^31"),
        ),
        (
            "hex plan points".into(),
            hex_with(3, |h| h.plan = "points".into()),
            Accepted,
        ),
        (
            "hex plan cell-step".into(),
            hex_with(3, |h| h.plan = "cell-step".into()),
            Accepted,
        ),
        (
            "hex plan capitalised".into(),
            hex_with(3, |h| h.plan = "Points".into()),
            Refused(Code::InvalidArgument, "unknown hex plan \"Points\""),
        ),
        (
            "hex plan misspelt".into(),
            hex_with(3, |h| h.plan = "cellstep".into()),
            Refused(Code::InvalidArgument, "unknown hex plan"),
        ),
        (
            "hex shards per step max".into(),
            hex_with(2, |h| {
                h.plan = "cell-step".into();
                h.shards_per_step = MAX_SHARDS_PER_STEP;
            }),
            Accepted,
        ),
        (
            "hex shards per step max+1".into(),
            hex_with(2, |h| {
                h.plan = "cell-step".into();
                h.shards_per_step = MAX_SHARDS_PER_STEP + 1;
            }),
            Refused(
                Code::InvalidArgument,
                "shards per step must be at most 1024, got 1025",
            ),
        ),
        (
            "hex exact cell-step".into(),
            hex_with(3, |h| {
                h.plan = "cell-step".into();
                h.exact = true;
            }),
            Refused(
                Code::InvalidArgument,
                "exact hex counts need the points plan",
            ),
        ),
        (
            "hex points per shard 3 (not a power of two)".into(),
            hex_with(5, |h| h.points_per_shard = 3),
            Refused(
                Code::InvalidArgument,
                "points per shard must be 16, 8, 4, 2 or 1, got 3",
            ),
        ),
        (
            "hex points per shard 16".into(),
            hex_with(5, |h| h.points_per_shard = 16),
            Accepted,
        ),
        (
            "hex exact with a modulus".into(),
            hex_with(5, |h| {
                h.exact = true;
                h.modulus = 1_000_000_009;
            }),
            Refused(Code::InvalidArgument, "an exact hex count takes no modulus"),
        ),
        (
            "hex exact naming the default modulus".into(),
            hex_with(5, |h| {
                h.exact = true;
                h.modulus = hex::DEFAULT_MODULUS;
            }),
            Accepted,
        ),
        (
            format!(
                "hex cell-step side {} (last within the memory budget)",
                over - 1
            ),
            hex_with(over - 1, |h| h.plan = "cell-step".into()),
            Valid,
        ),
        (
            format!("hex cell-step side {over} (over the memory budget)"),
            hex_with(over, |h| h.plan = "cell-step".into()),
            Refused(Code::InvalidArgument, "use the points plan, or --force"),
        ),
        (
            "hex cell-step side 16, forced".into(),
            forced(hex_with(hex::NARROW_SIDES, |h| h.plan = "cell-step".into())),
            Valid,
        ),
        (
            "hex cell-step side 17, forced".into(),
            forced(hex_with(hex::NARROW_SIDES + 1, |h| {
                h.plan = "cell-step".into()
            })),
            Refused(
                Code::InvalidArgument,
                "the cell-step plan supports sides up to 16, got 17",
            ),
        ),
        // Kayles.
        ("kayles pins 0".into(), kayles(0, 0), Accepted),
        (
            "kayles pins odd".into(),
            kayles(1, 0),
            Refused(Code::InvalidArgument, "pins must be even, got 1"),
        ),
        ("kayles pins max".into(), kayles(max_pins, 0), Accepted),
        (
            "kayles pins max+1 (odd)".into(),
            kayles(max_pins + 1, 0),
            Refused(Code::InvalidArgument, "pins must be even"),
        ),
        (
            "kayles pins max+2".into(),
            kayles(max_pins + 2, 0),
            Refused(
                Code::InvalidArgument,
                format!("pins must be at most {max_pins}, got {}", max_pins + 2).leak(),
            ),
        ),
        (
            "kayles pins u64::MAX-1".into(),
            kayles(u64::MAX - 1, 0),
            Refused(Code::InvalidArgument, "pins must be at most"),
        ),
        ("kayles digits 0 (default)".into(), kayles(10, 0), Accepted),
        ("kayles digits 1".into(), kayles(10, 1), Accepted),
        ("kayles digits max".into(), kayles(10, max_digits), Accepted),
        (
            "kayles digits max+1".into(),
            kayles(10, max_digits + 1),
            Refused(
                Code::InvalidArgument,
                "digits must be between 1 and 18, got 19",
            ),
        ),
        (
            "kayles digits u32::MAX".into(),
            kayles(10, u32::MAX),
            Refused(Code::InvalidArgument, "digits must be between"),
        ),
        // Sliders.
        (
            "sliders default boards".into(),
            sliders(0, 0, "", ""),
            Accepted,
        ),
        (
            "sliders smallest board".into(),
            sliders(2, 2, "WRBB", "BRBW"),
            Accepted,
        ),
        (
            "sliders largest board".into(),
            sliders(5, 5, &cells_25, &cells_25.chars().rev().collect::<String>()),
            Accepted,
        ),
        (
            "sliders rows min-1".into(),
            sliders(1, 4, "WRBB", "BRBW"),
            Refused(Code::InvalidArgument, "rows must be between 2 and 5, got 1"),
        ),
        (
            "sliders rows max+1".into(),
            sliders(6, 2, "WRBBRRBBRRBB", "RBBWRRBBRRBB"),
            Refused(Code::InvalidArgument, "rows must be between 2 and 5, got 6"),
        ),
        (
            "sliders cols min-1".into(),
            sliders(4, 1, "WRBB", "BRBW"),
            Refused(Code::InvalidArgument, "cols must be between 2 and 5, got 1"),
        ),
        (
            "sliders cols max+1".into(),
            sliders(2, 6, "WRBBRRBBRRBB", "RBBWRRBBRRBB"),
            Refused(Code::InvalidArgument, "cols must be between 2 and 5, got 6"),
        ),
        (
            "sliders start without target".into(),
            sliders(2, 2, "WRBB", ""),
            Refused(
                Code::InvalidArgument,
                "give both a start and a target board, or neither",
            ),
        ),
        (
            "sliders target without start".into(),
            sliders(2, 2, "", "WRBB"),
            Refused(
                Code::InvalidArgument,
                "give both a start and a target board, or neither",
            ),
        ),
        (
            "sliders board too short".into(),
            sliders(2, 2, "WRB", "BRBW"),
            Refused(
                Code::InvalidArgument,
                "start board has 3 cells, a 2 x 2 board needs 4",
            ),
        ),
        (
            "sliders board too long".into(),
            sliders(2, 2, "WRBB", "BRBWR"),
            Refused(Code::InvalidArgument, "target board has 5 cells"),
        ),
        (
            "sliders rows of the wrong width".into(),
            sliders(2, 2, "WRB/B", "BRBW"),
            Refused(Code::InvalidArgument, "start board row 1 has 3 cells"),
        ),
        (
            "sliders unknown letter".into(),
            sliders(2, 2, "WRBX", "BRBW"),
            Refused(Code::InvalidArgument, "unknown character 'X'"),
        ),
        (
            "sliders no empty cell".into(),
            sliders(2, 2, "RRBB", "BRBW"),
            Refused(Code::InvalidArgument, "start board has no empty cell W"),
        ),
        (
            "sliders two empty cells".into(),
            sliders(2, 2, "WRBW", "BRBW"),
            Refused(Code::InvalidArgument, "2 empty cells W"),
        ),
        (
            "sliders different tiles".into(),
            sliders(2, 2, "WRBB", "WRRB"),
            Refused(Code::InvalidArgument, "different tiles"),
        ),
        (
            "sliders 5 x 5, 12 + 12 tiles (within the board limit)".into(),
            sliders(
                5,
                5,
                "WRRRRRRRRRRRRBBBBBBBBBBBB",
                "RRRRRRRRRRRRBBBBBBBBBBBBW",
            ),
            Valid,
        ),
        (
            "sliders too many boards".into(),
            sliders(
                5,
                5,
                "WRRRRRRRRBBBBBBBBGGGGGGGG",
                "RRRRRRRRBBBBBBBBGGGGGGGGW",
            ),
            Refused(Code::InvalidArgument, "more than the limit"),
        ),
        (
            "sliders modulus 1".into(),
            sliders_with(2, 2, "WRBB", "BRBW", |s| s.checksum_modulus = 1),
            Refused(Code::InvalidArgument, "modulus must be at least 2, got 1"),
        ),
        (
            "sliders modulus = base".into(),
            sliders_with(2, 2, "WRBB", "BRBW", |s| s.checksum_modulus = 243),
            Refused(Code::InvalidArgument, "base must be below the modulus"),
        ),
        (
            "sliders modulus = base + 1".into(),
            sliders_with(2, 2, "WRBB", "BRBW", |s| s.checksum_modulus = 244),
            Accepted,
        ),
        (
            "sliders base and modulus overflow".into(),
            sliders_with(2, 2, "WRBB", "BRBW", |s| {
                s.checksum_base = u64::MAX - 1;
                s.checksum_modulus = u64::MAX;
            }),
            Refused(Code::InvalidArgument, "must be below 2^64"),
        ),
        (
            "sliders prefixes max".into(),
            sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| s.prefixes = MAX_PREFIX_TASKS),
            Accepted,
        ),
        (
            "sliders prefixes max+1".into(),
            sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| {
                s.prefixes = MAX_PREFIX_TASKS + 1
            }),
            Refused(
                Code::InvalidArgument,
                "prefixes must be at most 100000, got 100001",
            ),
        ),
        // The request itself.
        (
            "no kind".into(),
            proto::JobSpec {
                kind: None,
                options: None,
            },
            Refused(Code::InvalidArgument, "names no kind"),
        ),
    ]
}

/// A job as the client sees it, without the fields that move with the clock.
fn frozen(mut job: proto::Job) -> proto::Job {
    job.elapsed_ms = 0;
    job.eta_ms = 0;
    job.slot_seconds = 0.0;
    job
}

/// Everything a refused request must leave as it was.
#[derive(Debug, PartialEq)]
struct Observed {
    jobs: Vec<proto::Job>,
    events: BTreeMap<String, Vec<proto::Event>>,
}

async fn observe(client: &mut JobServiceClient<Channel>) -> Observed {
    let jobs: Vec<proto::Job> = client
        .list(proto::ListJobsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .jobs
        .into_iter()
        .map(frozen)
        .collect();
    let mut all = BTreeMap::new();
    for job in &jobs {
        all.insert(job.id.clone(), events(client, &job.id).await);
    }
    Observed { jobs, events: all }
}

fn check_status(name: &str, status: &tonic::Status, code: Code, needle: &str) {
    assert_eq!(status.code(), code, "{name}: {status:?}");
    assert!(
        status.message().contains(needle),
        "{name}: {:?} does not contain {needle:?}",
        status.message()
    );
}

/// Every spec value at its limit is accepted and comes back unchanged; just
/// past it the submission is refused with a message naming the value, and
/// nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spec_value_is_accepted_at_its_limit_and_refused_past_it() {
    let coordinator = start_coordinator(None).await;
    let mut client = jobs_client(&coordinator.url()).await;
    let rows = spec_rows();
    let (mut accepted, mut valid, mut refused) = (0, 0, 0);
    for (name, spec, expect) in rows {
        let before = observe(&mut client).await;
        match expect {
            Valid => {
                ValidSpec::try_from(&spec).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
                valid += 1;
            }
            Accepted => {
                let job = client
                    .submit(proto::SubmitRequest {
                        spec: Some(spec.clone()),
                        idempotency_key: String::new(),
                        ..Default::default()
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{name}: refused: {e:?}"))
                    .into_inner()
                    .job
                    .unwrap();
                // No worker is registered: the job is fitted to the budget
                // a worker is assumed to have (the points a hex shard).
                let sent = ValidSpec::try_from(&spec)
                    .unwrap()
                    .fitted_to(WorkerRoom::ASSUMED, "no worker", COORDINATOR_OUTPUT_LIMIT)
                    .unwrap();
                let stored = ValidSpec::try_from(job.spec.as_ref().unwrap()).unwrap();
                assert_eq!(sent, stored, "{name}: the stored spec differs");
                // Cancelled at once so that the table's jobs never run.
                client
                    .cancel(proto::CancelRequest {
                        job_id: job.id.clone(),
                    })
                    .await
                    .unwrap();
                let after = observe(&mut client).await;
                assert_eq!(after.jobs.len(), before.jobs.len() + 1, "{name}");
                accepted += 1;
            }
            Refused(code, needle) => {
                let status = client
                    .submit(proto::SubmitRequest {
                        spec: Some(spec.clone()),
                        idempotency_key: format!("refused {name}"),
                        ..Default::default()
                    })
                    .await
                    .expect_err(&name);
                check_status(&name, &status, code, needle);
                // The same refusal as the spec conversion gives in process
                // (or, for memory, the fit to the budget a worker is assumed
                // to have when none has registered).
                let in_process = ValidSpec::try_from(&spec).and_then(|spec| {
                    spec.fitted_to(WorkerRoom::ASSUMED, "no worker", COORDINATOR_OUTPUT_LIMIT)
                });
                assert!(in_process.is_err(), "{name}");
                assert_eq!(observe(&mut client).await, before, "{name}: state changed");
                refused += 1;
            }
        }
    }
    // The request around the spec.
    let before = observe(&mut client).await;
    let small = Some(kayles(10, 0));
    let requests = [
        (
            "no spec",
            None,
            String::new(),
            Code::InvalidArgument,
            "the request has no job spec",
        ),
        (
            "idempotency key 257 bytes",
            small.clone(),
            "k".repeat(257),
            Code::InvalidArgument,
            "longer than 256 bytes",
        ),
        (
            "message over the limit",
            small.clone(),
            "k".repeat(OVERSIZED),
            Code::OutOfRange,
            "message length too large",
        ),
    ];
    for (name, spec, key, code, needle) in requests {
        let status = client
            .submit(proto::SubmitRequest {
                spec,
                idempotency_key: key,
                ..Default::default()
            })
            .await
            .expect_err(name);
        check_status(name, &status, code, needle);
        assert_eq!(observe(&mut client).await, before, "{name}: state changed");
        refused += 1;
    }
    let key = "k".repeat(256);
    let first = submit(&mut client, &checked(&kayles(10, 0)), &key).await;
    let again = submit(&mut client, &checked(&kayles(10, 0)), &key).await;
    assert_eq!(first.id, again.id, "a 256-byte key is kept");
    accepted += 1;
    let before = observe(&mut client).await;
    let status = client
        .submit(proto::SubmitRequest {
            spec: Some(kayles(12, 0)),
            idempotency_key: key,
            ..Default::default()
        })
        .await
        .expect_err("a key reused for another spec");
    check_status("key reused", &status, Code::AlreadyExists, "different spec");
    assert!(status.message().len() < 300, "the key is not echoed whole");
    assert_eq!(
        observe(&mut client).await,
        before,
        "key reused: state changed"
    );
    refused += 1;
    eprintln!(
        "spec limits: {accepted} accepted, {valid} validated only (large plans), {refused} refused"
    );
    coordinator.shutdown().await;
}

/// Accepted at a limit means it runs: the extreme values that are cheap to
/// compute go through a cluster and must give the kernels' own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_at_their_limits_run_to_the_direct_answer() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    // Three workers: three replicas must come from three different ones.
    let workers = Workers::start(&url, 3, 1);
    let one_colour = format!("W{}", "R".repeat(24));
    let cases = [
        (
            "hex cell-step, one cell, modulus 2",
            hex_with(1, |h| {
                h.plan = "cell-step".into();
                h.modulus = 2;
            }),
        ),
        ("hex points, one cell, modulus 5", hex(1, 5)),
        ("hex points, side 2, modulus 5", hex(2, 5)),
        (
            "hex points, side 3, modulus 11 (no spare point)",
            hex(3, 11),
        ),
        ("hex points, side 4, modulus 17", hex(4, 17)),
        (
            "hex points, side 5, modulus 2^31 - 1",
            hex(5, 2_147_483_647),
        ),
        ("hex exact, one cell", hex_with(1, |h| h.exact = true)),
        ("kayles, no pins", kayles(0, 0)),
        ("kayles, one digit", kayles(30, 1)),
        ("kayles, 18 digits", kayles(30, kayles::MAX_DIGITS)),
        ("sliders 2 x 2", sliders(2, 2, "WRBB", "BRBW")),
        (
            "sliders 5 x 5 of one colour",
            sliders(
                5,
                5,
                &one_colour,
                &one_colour.chars().rev().collect::<String>(),
            ),
        ),
        (
            "sliders modulus = base + 1",
            sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| s.checksum_modulus = 244),
        ),
        ("max attempts 1", options(|o| o.max_attempts = 1)),
        ("replicas 3", options(|o| o.replicas = spec::MAX_REPLICAS)),
        ("priority max", options(|o| o.priority = spec::MAX_PRIORITY)),
        (
            "priority min",
            options(|o| o.priority = -spec::MAX_PRIORITY),
        ),
    ];
    let mut submitted = Vec::new();
    for (name, wire) in &cases {
        let spec = ValidSpec::try_from(wire)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .spec()
            .clone();
        submitted.push((name, submit(&mut client, &spec, "").await.id, spec));
    }
    for (name, id, spec) in submitted {
        let done = wait_finished(&mut client, &id, std::time::Duration::from_secs(60)).await;
        assert_eq!(
            state(&done),
            proto::JobState::Succeeded,
            "{name}: {}",
            done.error
        );
        assert_eq!(done.answer, direct_answer(&spec), "{name}");
    }
    eprintln!(
        "limits: {} jobs at their limits ran to the direct answer",
        cases.len()
    );
    workers.stop().await;
    coordinator.shutdown().await;
}

// ------------------------------------------------------------ worker messages

/// One request of a bad-input row.
enum Call {
    /// The messages of one report stream (`None` is a message without a body).
    Report(Vec<Option<Body>>),
    Lease(proto::LeaseRequest),
    Register(proto::RegisterRequest),
    Heartbeat(proto::HeartbeatRequest),
    Fetch(proto::FetchStageDataRequest),
    FetchCheckpoint(proto::FetchCheckpointRequest),
    StageBlobs(proto::StageBlobsRequest),
    StageShard(proto::StageShardRequest),
    Get(String),
    Cancel(String),
    Result(String),
    Events(String),
}

struct Row {
    name: String,
    call: Call,
    code: Code,
    needle: String,
}

fn row(name: impl Into<String>, call: Call, code: Code, needle: impl Into<String>) -> Row {
    Row {
        name: name.into(),
        call,
        code,
        needle: needle.into(),
    }
}

async fn send(
    workers: &mut WorkerServiceClient<Channel>,
    messages: Vec<Option<Body>>,
) -> Result<proto::ReportResponse, tonic::Status> {
    let stream = tokio_stream::iter(
        messages
            .into_iter()
            .map(|body| proto::ReportMessage { body }),
    );
    workers.report(stream).await.map(|r| r.into_inner())
}

async fn call(
    jobs: &mut JobServiceClient<Channel>,
    workers: &mut WorkerServiceClient<Channel>,
    call: Call,
) -> Result<(), tonic::Status> {
    match call {
        Call::Report(messages) => send(workers, messages).await.map(drop),
        Call::Lease(r) => workers.lease(r).await.map(drop),
        Call::Register(r) => workers.register(r).await.map(drop),
        Call::Heartbeat(r) => workers.heartbeat(r).await.map(drop),
        Call::Fetch(r) => workers.fetch_stage_data(r).await.map(drop),
        Call::FetchCheckpoint(r) => workers.fetch_checkpoint(r).await.map(drop),
        Call::StageBlobs(r) => workers.stage_blobs(r).await.map(drop),
        Call::StageShard(r) => workers.stage_shard(r).await.map(drop),
        Call::Get(id) => jobs
            .get(proto::GetJobRequest { job_id: id })
            .await
            .map(drop),
        Call::Cancel(id) => jobs
            .cancel(proto::CancelRequest { job_id: id })
            .await
            .map(drop),
        Call::Result(id) => jobs
            .result(proto::ResultRequest { job_id: id })
            .await
            .map(drop),
        Call::Events(id) => jobs
            .events(proto::EventsRequest {
                job_id: id,
                from_sequence: 0,
            })
            .await
            .map(drop),
    }
}

const HOLDER: &str = "bad-input-holder";

/// (x, P(x) mod p) of a hex points shard.
type Evaluations = Vec<(u32, u32)>;

fn header(worker: &str, session: &str, lease: &str) -> Option<Body> {
    header_announcing(worker, session, lease, 0)
}

/// A header announcing `output_bytes` of output: only a hint of the room to
/// make, which a wrong figure must not turn into a refusal or a wrong result.
fn header_announcing(worker: &str, session: &str, lease: &str, output_bytes: u64) -> Option<Body> {
    Some(Body::Header(proto::ReportHeader {
        worker_id: worker.into(),
        lease_id: lease.into(),
        session: session.into(),
        output_bytes,
    }))
}

fn result_bytes(partial: Vec<u8>) -> Option<Body> {
    Some(Body::Result(proto::ReportResult {
        compute_us: 0,
        partial,
        work_done: 1,
    }))
}

/// A result with this partial, typed or encoded, in the JSON a worker sends.
fn result(partial: &impl Serialize) -> Option<Body> {
    result_bytes(serde_json::to_vec(partial).expect("partials serialise"))
}

fn output(data: Vec<u8>) -> Option<Body> {
    Some(Body::Output(proto::OutputChunk { data: data.into() }))
}

fn checkpoint(state: Vec<u8>, partial: Vec<u8>) -> Option<Body> {
    Some(Body::Checkpoint(proto::ReportCheckpoint {
        state,
        partial,
        work_done: 1,
        state_blob: None,
    }))
}

fn output_blob(blob: proto::BlobRef) -> Option<Body> {
    Some(Body::OutputBlob(blob))
}

/// A reference to a blob that does not exist, with a digest of `digest` bytes.
fn blob_ref(digest: usize) -> proto::BlobRef {
    proto::BlobRef {
        key: "jobs/job-000001/1/0/1/output".into(),
        size: 100,
        sha256: vec![7; digest],
        offset: 0,
    }
}

fn failure(message: &str) -> Option<Body> {
    Some(Body::Failure(proto::ReportFailure {
        message: message.into(),
        permanent: true,
        handed_back: false,
        no_room: false,
    }))
}

/// A report of `lease` by its holder (in `session`) with these messages after
/// the header.
fn by_holder(session: &str, lease: &proto::ShardLease, rest: Vec<Option<Body>>) -> Call {
    let mut messages = vec![header(HOLDER, session, &lease.lease_id)];
    messages.extend(rest);
    Call::Report(messages)
}

/// Computes a shard as an honest worker would.
fn compute(lease: &proto::ShardLease, input: Option<&StageInput>) -> ShardOutcome {
    let spec = ValidSpec::try_from(lease.spec.as_ref().unwrap()).unwrap();
    let task = EncodedTask::from_bytes(&lease.task).unwrap();
    spec.execute(
        &task,
        ShardContext {
            input,
            checkpoint: &lease.checkpoint,
            cache: &KernelCache::new(),
            control: &Control::new(),
            checkpoint_every: CHECKPOINT_EVERY,
            on_event: &mut |_| {},
            room: None,
        },
    )
    .unwrap()
}

async fn lease_all(
    workers: &mut WorkerServiceClient<Channel>,
    session: &str,
) -> Vec<proto::ShardLease> {
    workers
        .lease(proto::LeaseRequest {
            lease_ahead: 0,
            worker_id: HOLDER.into(),
            free_slots: 1024,
            wait_ms: 0,
            session: session.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .leases
}

async fn stage_input(
    workers: &mut WorkerServiceClient<Channel>,
    session: &str,
    lease: &proto::ShardLease,
) -> Option<StageInput> {
    let spec = ValidSpec::try_from(lease.spec.as_ref().unwrap()).unwrap();
    let task = EncodedTask::from_bytes(&lease.task).unwrap();
    let reads = spec.stage_reads(lease.stage, &task).unwrap();
    if reads.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for read in reads {
        let mut stream = workers
            .fetch_stage_data(proto::FetchStageDataRequest {
                job_id: lease.job_id.clone(),
                stage: read.stage,
                worker_id: HOLDER.into(),
                session: session.into(),
                bucket: read.bucket,
                held_only: false,
                shards: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await.unwrap() {
            bytes.extend_from_slice(&chunk.data);
        }
        parts.push(bytes);
    }
    let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    Some(spec.decode_stage_inputs(&slices).unwrap())
}

/// The spec as the coordinator checks it (defaults filled in).
fn checked(wire: &proto::JobSpec) -> JobSpec {
    ValidSpec::try_from(wire).unwrap().spec().clone()
}

fn with_ttl(mut spec: JobSpec) -> JobSpec {
    // Long enough that the held leases outlive the whole table.
    spec.options.lease_ttl_ms = 600_000;
    spec
}

fn cell_step(side: u32, shards_per_step: u32) -> JobSpec {
    with_ttl(JobSpec::new(HexSpec {
        side,
        modulus: hex::DEFAULT_MODULUS,
        plan: HexPlan::CellStep,
        shards_per_step,
        exact: false,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    }))
}

/// Malformed, misdirected and stale worker messages, and requests about jobs,
/// shards and stages that do not exist: each is refused with its code and a
/// message naming the problem, and changes no job, log or lease. Afterwards the
/// same leases report their honest results and every job reaches the direct
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_worker_messages_are_refused_and_change_nothing() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let mut w = workers_client(&url).await;

    let kayles_spec = with_ttl(checked(&kayles(24, 0)));
    let points_spec = with_ttl(checked(&hex(4, 0)));
    let sliders_spec = with_ttl(checked(&sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| {
        s.prefixes = 4
    })));
    let step_spec = cell_step(3, 2);
    let last_spec = cell_step(2, 1);
    let specs = [
        &kayles_spec,
        &points_spec,
        &sliders_spec,
        &step_spec,
        &last_spec,
    ];
    let mut ids = Vec::new();
    for spec in specs {
        ids.push(submit(&mut client, spec, "").await.id);
    }
    let [k, p, s, c, l] = <[String; 5]>::try_from(ids.clone()).unwrap();

    // Hold every first-stage shard; finish the first stage of the two-stage job
    // so that its last stage, which returns crossing sums, is held too.
    let hs = register(&mut w, HOLDER).await;
    let intruder = register(&mut w, "intruder").await;
    let mut held = lease_all(&mut w, &hs).await;
    for (announced, lease) in [u64::MAX, 1]
        .into_iter()
        .cycle()
        .zip(held.iter().filter(|x| x.job_id == l))
    {
        let outcome = compute(lease, None);
        // More than a report may hold, or less than is sent: a hint only.
        let mut messages = vec![header_announcing(HOLDER, &hs, &lease.lease_id, announced)];
        messages.push(output(outcome.output.into_bytes().unwrap()));
        messages.push(result(&outcome.partial));
        send(&mut w, messages)
            .await
            .expect("an honest result is accepted");
    }
    held.retain(|x| x.job_id != l);
    held.extend(lease_all(&mut w, &hs).await);
    let of = |job: &str| -> Vec<proto::ShardLease> {
        held.iter().filter(|x| x.job_id == job).cloned().collect()
    };
    let (kl, pl, sl, cl, ll) = (of(&k), of(&p), of(&s), of(&c), of(&l));
    assert!(kl.len() >= 2 && !pl.is_empty() && !sl.is_empty() && cl.len() == 2);
    assert_eq!(
        (ll.len(), ll[0].stage),
        (1, 2),
        "the last stage of {l} is held"
    );

    let k0 = &kl[0];
    let k0_partial = compute(k0, None).partial;
    let k1_partial = compute(&kl[1], None).partial;
    let Ok(HexPartial::HexEvaluations {
        modulus,
        evaluations,
    }) = compute(&pl[0], None).partial.decode::<HexPartial>()
    else {
        panic!("points shards return evaluations");
    };
    let evaluations_with = |adjust: &dyn Fn(&mut Evaluations)| {
        let mut e = evaluations.clone();
        adjust(&mut e);
        HexPartial::HexEvaluations {
            modulus,
            evaluations: e,
        }
    };
    let SlidersTask::SliderPrefixes { prefixes, .. } = EncodedTask::from_bytes(&sl[0].task)
        .unwrap()
        .decode::<SlidersTask>()
        .unwrap()
    else {
        panic!("the prefixes plan plans prefix tasks");
    };
    let slider_prefixes = prefixes.len() as u32;
    let slider_sums = |done: u32| SlidersPartial::SliderSums {
        prefixes_done: done,
        sums: Default::default(),
    };
    let step_output = compute(&cl[0], None).output.into_bytes().unwrap();
    let step_polys = hex::check_polynomials(&step_output, 5, hex::DEFAULT_MODULUS).unwrap();
    let stride = 3; // side 2: 2 * 2 / 2 + 1 coefficients
    let sums = |residues: Vec<u32>| HexPartial::HexCrossings { residues };
    let stale = |attempt: u64| {
        let mut lease: tally_wire::lease::LeaseId = k0.lease_id.parse().unwrap();
        lease.attempt = attempt;
        lease.to_string()
    };
    let own = |lease: &str| Call::Report(vec![header(HOLDER, &hs, lease), result(&k0_partial)]);
    let long_id = "w".repeat(129);
    let big = vec![0u8; OVERSIZED];
    let p0 = tally_kernels::hex::DEFAULT_MODULUS;

    let mut rows = vec![
        // Attempts, jobs, stages and shards that are not current.
        row(
            "a later attempt",
            own(&stale(k0.attempt + 1)),
            Code::FailedPrecondition,
            format!(
                "is stale (current attempt {})",
                tally_wire::lease::Attempt(k0.attempt)
            ),
        ),
        row(
            "attempt 0",
            own(&stale(0)),
            Code::FailedPrecondition,
            format!(
                "attempt 0 of shard 1/{} of job {k} is stale (it was leased before the coordinator restarted",
                k0.index
            ),
        ),
        row(
            "unknown job",
            own("job-999999/1/0/1"),
            Code::NotFound,
            "no job \"job-999999\"",
        ),
        row(
            "unknown shard",
            own(&format!("{k}/1/999/1")),
            Code::FailedPrecondition,
            "shard 999 of stage 1",
        ),
        row(
            "unknown stage",
            own(&format!("{k}/2/0/1")),
            Code::FailedPrecondition,
            "not current (the job is at stage 1)",
        ),
        row(
            "stage 0",
            own(&format!("{k}/0/0/1")),
            Code::FailedPrecondition,
            "not current",
        ),
        row(
            "a finished stage",
            Call::Report(vec![
                header(HOLDER, &hs, &format!("{l}/1/0/1")),
                result(&HexPartial::None),
            ]),
            Code::FailedPrecondition,
            "not current (the job is at stage 2)",
        ),
    ];
    for bad in [
        String::new(),
        "garbage".into(),
        format!("{k}/1/0"),
        format!("{k}/1/0/x"),
        "/1/0/1".into(),
        format!("{k}/1/-1/1"),
        format!("{k}/1/0/-1"),
        format!("{k}/1/0/18446744073709551616"),
        format!("{k}/4294967296/0/1"),
    ] {
        rows.push(row(
            format!("malformed lease id {bad:?}"),
            own(&bad),
            Code::InvalidArgument,
            "malformed lease id",
        ));
    }
    rows.extend([
        // The shape of the stream.
        row(
            "empty report",
            Call::Report(vec![]),
            Code::InvalidArgument,
            "a report must start with its header",
        ),
        row(
            "a message without a body first",
            Call::Report(vec![None]),
            Code::InvalidArgument,
            "a report must start with its header",
        ),
        row(
            "a result before the header",
            Call::Report(vec![result(&k0_partial), header(HOLDER, &hs, &k0.lease_id)]),
            Code::InvalidArgument,
            "a report must start with its header",
        ),
        row(
            "two headers",
            by_holder(
                &hs,
                k0,
                vec![header(HOLDER, &hs, &k0.lease_id), result(&k0_partial)],
            ),
            Code::InvalidArgument,
            "a report has exactly one header, first",
        ),
        row(
            "a message without a body after the header",
            by_holder(&hs, k0, vec![None, result(&k0_partial)]),
            Code::InvalidArgument,
            "exactly one header",
        ),
        row(
            "output but no result",
            by_holder(&hs, &cl[0], vec![output(step_output.clone())]),
            Code::InvalidArgument,
            "stage output without a result",
        ),
        row(
            "a checkpoint after the result",
            by_holder(
                &hs,
                k0,
                vec![result(&k0_partial), checkpoint(vec![1], Vec::new())],
            ),
            Code::InvalidArgument,
            "nothing may follow a result or a failure",
        ),
        row(
            "two results",
            by_holder(&hs, k0, vec![result(&k0_partial), result(&k0_partial)]),
            Code::InvalidArgument,
            "nothing may follow",
        ),
        row(
            "checkpoint chunks without their checkpoint",
            by_holder(
                &hs,
                k0,
                vec![Some(Body::CheckpointChunk(proto::CheckpointChunk {
                    data: vec![1; 16],
                }))],
            ),
            Code::InvalidArgument,
            "checkpoint chunks without their checkpoint",
        ),
        row(
            "the checkpoint of a lease that starts from none",
            Call::FetchCheckpoint(proto::FetchCheckpointRequest {
                worker_id: HOLDER.into(),
                session: hs.clone(),
                lease_id: k0.lease_id.clone(),
            }),
            Code::FailedPrecondition,
            "starts from no checkpoint",
        ),
        row(
            "the checkpoint of another worker's lease",
            Call::FetchCheckpoint(proto::FetchCheckpointRequest {
                worker_id: "intruder".into(),
                session: intruder.clone(),
                lease_id: k0.lease_id.clone(),
            }),
            Code::FailedPrecondition,
            "belongs to another worker",
        ),
        row(
            "a checkpoint without a session",
            Call::FetchCheckpoint(proto::FetchCheckpointRequest {
                worker_id: HOLDER.into(),
                session: String::new(),
                lease_id: k0.lease_id.clone(),
            }),
            Code::Unauthenticated,
            "no live session given",
        ),
        row(
            "the checkpoint of a malformed lease",
            Call::FetchCheckpoint(proto::FetchCheckpointRequest {
                worker_id: HOLDER.into(),
                session: hs.clone(),
                lease_id: "job-1/x".into(),
            }),
            Code::InvalidArgument,
            "lease",
        ),
        row(
            "an output blob to a coordinator that keeps stage data itself",
            by_holder(
                &hs,
                k0,
                vec![output_blob(blob_ref(32)), result(&k0_partial)],
            ),
            Code::FailedPrecondition,
            "keeps stage data itself",
        ),
        row(
            "an output blob without a result",
            by_holder(&hs, k0, vec![output_blob(blob_ref(32))]),
            Code::InvalidArgument,
            "comes with a result",
        ),
        row(
            "an output blob beside output chunks",
            by_holder(
                &hs,
                k0,
                vec![
                    output(vec![1; 8]),
                    output_blob(blob_ref(32)),
                    result(&k0_partial),
                ],
            ),
            Code::InvalidArgument,
            "instead of output chunks",
        ),
        row(
            "two output blobs",
            by_holder(
                &hs,
                k0,
                vec![
                    output_blob(blob_ref(32)),
                    output_blob(blob_ref(32)),
                    result(&k0_partial),
                ],
            ),
            Code::InvalidArgument,
            "one output blob",
        ),
        row(
            "an output blob with a short digest",
            by_holder(
                &hs,
                k0,
                vec![output_blob(blob_ref(31)), result(&k0_partial)],
            ),
            Code::InvalidArgument,
            "32-byte SHA-256",
        ),
        row(
            "a checkpoint state both inline and a blob",
            by_holder(
                &hs,
                k0,
                vec![Some(Body::Checkpoint(proto::ReportCheckpoint {
                    state: vec![1; 8],
                    partial: Vec::new(),
                    work_done: 1,
                    state_blob: Some(blob_ref(32)),
                }))],
            ),
            Code::InvalidArgument,
            "inline or a blob, not both",
        ),
        row(
            "the blobs of a stage that cannot be read",
            Call::StageBlobs(proto::StageBlobsRequest {
                job_id: k0.job_id.clone(),
                stage: 7,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                reads_held: false,
                reads_packed: false,
            }),
            Code::FailedPrecondition,
            "no readable output of stage 7",
        ),
        row(
            "stage blobs without a session",
            Call::StageBlobs(proto::StageBlobsRequest {
                job_id: k0.job_id.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: String::new(),
                reads_held: false,
                reads_packed: false,
            }),
            Code::Unauthenticated,
            "no live session given",
        ),
        row(
            "a shard of a stage that cannot be read",
            Call::StageShard(proto::StageShardRequest {
                job_id: k0.job_id.clone(),
                stage: 7,
                index: 0,
                worker_id: HOLDER.into(),
                session: hs.clone(),
            }),
            Code::FailedPrecondition,
            "no readable output of stage 7",
        ),
        row(
            "a shard of an unknown job",
            Call::StageShard(proto::StageShardRequest {
                job_id: "job-999999".into(),
                stage: 1,
                index: 0,
                worker_id: HOLDER.into(),
                session: hs.clone(),
            }),
            Code::NotFound,
            "no job \"job-999999\"",
        ),
        row(
            "a failure after the result",
            by_holder(&hs, k0, vec![result(&k0_partial), failure("late")]),
            Code::InvalidArgument,
            "nothing may follow",
        ),
        row(
            "a result after a failure",
            by_holder(&hs, k0, vec![failure("gave up"), result(&k0_partial)]),
            Code::InvalidArgument,
            "nothing may follow",
        ),
        // Who reports.
        row(
            "a result from a worker without the lease",
            Call::Report(vec![
                header("intruder", &intruder, &k0.lease_id),
                result(&k0_partial),
            ]),
            Code::FailedPrecondition,
            "belongs to another worker",
        ),
        row(
            "a failure from a worker without the lease",
            Call::Report(vec![
                header("intruder", &intruder, &k0.lease_id),
                failure("not mine"),
            ]),
            Code::FailedPrecondition,
            "belongs to another worker",
        ),
        row(
            "a checkpoint from a worker without the lease",
            Call::Report(vec![
                header("intruder", &intruder, &k0.lease_id),
                checkpoint(vec![1], Vec::new()),
            ]),
            Code::FailedPrecondition,
            "belongs to another worker",
        ),
        row(
            "an empty worker id in a report",
            Call::Report(vec![header("", &hs, &k0.lease_id), result(&k0_partial)]),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "a 129-byte worker id in a report",
            Call::Report(vec![
                header(&long_id, &hs, &k0.lease_id),
                result(&k0_partial),
            ]),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        // Results of the wrong shape.
        row(
            "malformed partial",
            by_holder(&hs, k0, vec![result_bytes(b"{not json".to_vec())]),
            Code::InvalidArgument,
            "malformed partial result",
        ),
        row(
            "a partial of another kind",
            by_holder(&hs, k0, vec![result(&evaluations_with(&|_| {}))]),
            Code::InvalidArgument,
            "malformed partial result",
        ),
        row(
            "no partial for a kayles shard",
            by_holder(&hs, k0, vec![result_bytes(Vec::new())]),
            Code::InvalidArgument,
            "malformed partial result",
        ),
        row(
            "the result of another character",
            by_holder(&hs, k0, vec![result(&k1_partial)]),
            Code::InvalidArgument,
            "reported on the shard of character",
        ),
        row(
            "stage output from a shard that has none",
            by_holder(&hs, k0, vec![output(vec![0, 0]), result(&k0_partial)]),
            Code::InvalidArgument,
            "this shard produces no stage output",
        ),
        row(
            "a malformed checkpoint partial",
            by_holder(&hs, k0, vec![checkpoint(vec![1], b"{".to_vec())]),
            Code::InvalidArgument,
            "malformed partial result",
        ),
        row(
            "evaluations at other points",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&evaluations_with(&|e| e[0].0 += 1000))],
            ),
            Code::InvalidArgument,
            "reported on the shard of points",
        ),
        row(
            "one evaluation too few",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&evaluations_with(&|e| {
                    e.pop();
                }))],
            ),
            Code::InvalidArgument,
            "reported on the shard of points",
        ),
        row(
            "one evaluation too many",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&evaluations_with(&|e| e.push((u32::MAX, 0))))],
            ),
            Code::InvalidArgument,
            "reported on the shard of points",
        ),
        row(
            "evaluations modulo another prime",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&HexPartial::HexEvaluations {
                    modulus: 998_244_353,
                    evaluations: evaluations.clone(),
                })],
            ),
            Code::InvalidArgument,
            "modulo 998244353 reported on the shard",
        ),
        row(
            "an evaluation equal to the modulus",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&evaluations_with(&|e| e[0].1 = p0))],
            ),
            Code::InvalidArgument,
            "evaluations must be residues modulo 1000000007",
        ),
        row(
            "an evaluation of u32::MAX",
            by_holder(
                &hs,
                &pl[0],
                vec![result(&evaluations_with(&|e| e[0].1 = u32::MAX))],
            ),
            Code::InvalidArgument,
            "evaluations must be residues",
        ),
        row(
            "sliders: one prefix short",
            by_holder(&hs, &sl[0], vec![result(&slider_sums(slider_prefixes - 1))]),
            Code::InvalidArgument,
            format!(
                "slider result covers {} of {slider_prefixes} prefixes",
                slider_prefixes - 1
            ),
        ),
        row(
            "sliders: one prefix too many",
            by_holder(&hs, &sl[0], vec![result(&slider_sums(slider_prefixes + 1))]),
            Code::InvalidArgument,
            "slider result covers",
        ),
        row(
            "hex step: a partial instead of polynomials",
            by_holder(
                &hs,
                &cl[0],
                vec![output(step_output.clone()), result(&sums(vec![0; 5]))],
            ),
            Code::InvalidArgument,
            "a hex step returns polynomials, not a partial",
        ),
        row(
            "hex step: no output",
            by_holder(&hs, &cl[0], vec![result(&HexPartial::None)]),
            Code::InvalidArgument,
            format!("hex step output holds 0 polynomials, expected {step_polys}"),
        ),
        row(
            "hex step: one polynomial short",
            by_holder(
                &hs,
                &cl[0],
                vec![
                    output(hex::encode_polynomials(&vec![1; 5 * (step_polys - 1)], 5)),
                    result(&HexPartial::None),
                ],
            ),
            Code::InvalidArgument,
            "polynomials, expected",
        ),
        row(
            "hex step: output cut inside a run",
            by_holder(
                &hs,
                &cl[0],
                vec![
                    output(step_output[..step_output.len() - 1].to_vec()),
                    result(&HexPartial::None),
                ],
            ),
            Code::InvalidArgument,
            "polynomial data ends inside",
        ),
        row(
            "hex step: a run past the stride",
            by_holder(
                &hs,
                &cl[0],
                vec![
                    output(vec![4, 2, 1, 0, 0, 0, 1, 0, 0, 0]),
                    result(&HexPartial::None),
                ],
            ),
            Code::InvalidArgument,
            "exceeds 5 coefficients",
        ),
        row(
            "hex step: a coefficient equal to the modulus",
            by_holder(
                &hs,
                &cl[0],
                vec![
                    output(hex::encode_polynomials(&vec![p0; 5 * step_polys], 5)),
                    result(&HexPartial::None),
                ],
            ),
            Code::InvalidArgument,
            "is not a residue modulo 1000000007",
        ),
        row(
            "last hex step: one residue short",
            by_holder(&hs, &ll[0], vec![result(&sums(vec![0; stride - 1]))]),
            Code::InvalidArgument,
            "crossing sums have 2 residues, expected 3",
        ),
        row(
            "last hex step: one residue too many",
            by_holder(&hs, &ll[0], vec![result(&sums(vec![0; stride + 1]))]),
            Code::InvalidArgument,
            "crossing sums have 4 residues, expected 3",
        ),
        row(
            "last hex step: a residue equal to the modulus",
            by_holder(&hs, &ll[0], vec![result(&sums(vec![0, p0, 0]))]),
            Code::InvalidArgument,
            "crossing sums must be residues modulo 1000000007",
        ),
        row(
            "last hex step: no crossing sums",
            by_holder(&hs, &ll[0], vec![result(&HexPartial::None)]),
            Code::InvalidArgument,
            "the last hex stage must return crossing sums",
        ),
        row(
            "last hex step: stage output",
            by_holder(
                &hs,
                &ll[0],
                vec![output(step_output.clone()), result(&sums(vec![0; stride]))],
            ),
            Code::InvalidArgument,
            "this shard produces no stage output",
        ),
        // Size limits.
        row(
            "an output chunk over the message limit",
            by_holder(
                &hs,
                &cl[0],
                vec![output(big.clone()), result(&HexPartial::None)],
            ),
            Code::OutOfRange,
            "message length too large",
        ),
        row(
            "a checkpoint over the message limit",
            by_holder(&hs, k0, vec![checkpoint(big.clone(), Vec::new())]),
            Code::OutOfRange,
            "message length too large",
        ),
        // Other worker calls.
        row(
            "lease with an empty worker id",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: String::new(),
                free_slots: 1,
                wait_ms: 0,
                session: hs.clone(),
            }),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "lease with a 129-byte worker id",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: long_id.clone(),
                free_slots: 1,
                wait_ms: 0,
                session: hs.clone(),
            }),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "lease by a worker that never registered",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: "made-up".into(),
                free_slots: 1,
                wait_ms: 0,
                session: String::new(),
            }),
            Code::Unauthenticated,
            "no live session given for worker made-up: register again",
        ),
        row(
            "lease with a guessed session",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: HOLDER.into(),
                free_slots: 1,
                wait_ms: 0,
                session: "0123456789abcdef0123456789abcdef".into(),
            }),
            Code::Unauthenticated,
            "no live session matches",
        ),
        row(
            "lease with another worker's session",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: HOLDER.into(),
                free_slots: 1,
                wait_ms: 0,
                session: intruder.clone(),
            }),
            Code::Unauthenticated,
            "no live session matches",
        ),
        row(
            "a result without a session",
            Call::Report(vec![header(HOLDER, "", &k0.lease_id), result(&k0_partial)]),
            Code::Unauthenticated,
            "no live session given",
        ),
        row(
            "a result with another worker's session",
            Call::Report(vec![
                header(HOLDER, &intruder, &k0.lease_id),
                result(&k0_partial),
            ]),
            Code::Unauthenticated,
            "no live session matches",
        ),
        row(
            "a failure with a guessed session",
            Call::Report(vec![header(HOLDER, "guess", &k0.lease_id), failure("x")]),
            Code::Unauthenticated,
            "no live session matches",
        ),
        row(
            "a heartbeat without a session",
            Call::Heartbeat(proto::HeartbeatRequest {
                worker_id: HOLDER.into(),
                leases: Vec::new(),
                session: String::new(),
            }),
            Code::Unauthenticated,
            "no live session given",
        ),
        row(
            "stage data without a session",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: l.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: String::new(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::Unauthenticated,
            "no live session given",
        ),
        row(
            "lease 1025 slots",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: "greedy".into(),
                free_slots: 1025,
                wait_ms: 0,
                session: String::new(),
            }),
            Code::InvalidArgument,
            "free slots must be at most 1024",
        ),
        row(
            "lease u32::MAX slots",
            Call::Lease(proto::LeaseRequest {
                lease_ahead: 0,
                worker_id: "greedy".into(),
                free_slots: u32::MAX,
                wait_ms: 0,
                session: String::new(),
            }),
            Code::InvalidArgument,
            "free slots must be at most 1024",
        ),
        row(
            "register with an empty worker id",
            Call::Register(proto::RegisterRequest {
                worker_id: String::new(),
                hostname: "h".into(),
                slots: 1,
                version: "0".into(),
                memory_budget_bytes: 0,
                ..Default::default()
            }),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "register with a 129-byte worker id",
            Call::Register(proto::RegisterRequest {
                worker_id: long_id.clone(),
                hostname: "h".into(),
                slots: 1,
                version: "0".into(),
                memory_budget_bytes: 0,
                ..Default::default()
            }),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "heartbeat with an empty worker id",
            Call::Heartbeat(proto::HeartbeatRequest {
                worker_id: String::new(),
                leases: vec![proto::LeaseProgress {
                    lease_id: k0.lease_id.clone(),
                    work_done: 1,
                }],
                session: hs.clone(),
            }),
            Code::InvalidArgument,
            "worker id must be 1 to 128 bytes",
        ),
        row(
            "stage data of an unknown job",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: "job-999999".into(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::NotFound,
            "no job \"job-999999\"",
        ),
        row(
            "stage data of an empty job id",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: String::new(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::NotFound,
            "no job \"\"",
        ),
        row(
            "stage data of named shards without held_only",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: l.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: vec![0],
            }),
            Code::InvalidArgument,
            "only in a read of held outputs",
        ),
        row(
            "held stage data of shards out of order",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: l.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: true,
                shards: vec![1, 0],
            }),
            Code::InvalidArgument,
            "ascending order, each once",
        ),
        row(
            "stage data of a stage not finished",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: c.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::FailedPrecondition,
            "has no readable output of stage 1 (it is at stage 1, running)",
        ),
        row(
            "stage data of stage 0",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: l.clone(),
                stage: 0,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::FailedPrecondition,
            "has no readable output of stage 0",
        ),
        row(
            "stage data of a later stage",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: l.clone(),
                stage: 2,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::FailedPrecondition,
            "has no readable output of stage 2",
        ),
        row(
            "stage data of a single-stage job",
            Call::Fetch(proto::FetchStageDataRequest {
                job_id: k.clone(),
                stage: 1,
                worker_id: HOLDER.into(),
                session: hs.clone(),
                bucket: None,
                held_only: false,
                shards: Vec::new(),
            }),
            Code::FailedPrecondition,
            "has no readable output",
        ),
        // Client calls about jobs that do not exist or have no result.
        row(
            "get an unknown job",
            Call::Get("job-999999".into()),
            Code::NotFound,
            "no job",
        ),
        row(
            "cancel an unknown job",
            Call::Cancel("job-999999".into()),
            Code::NotFound,
            "no job",
        ),
        row(
            "result of an unknown job",
            Call::Result(String::new()),
            Code::NotFound,
            "no job",
        ),
        row(
            "events of an unknown job",
            Call::Events("../job-000001".into()),
            Code::NotFound,
            "no job",
        ),
        row(
            "result of a running job",
            Call::Result(k.clone()),
            Code::FailedPrecondition,
            "is running and has no result yet",
        ),
    ]);

    // A lease's event reaches the log with the job's next batch or the next
    // expiry tick: wait for every held lease's, so that nothing changes the
    // log while the refusals are checked.
    let before = loop {
        let observed = observe(&mut client).await;
        let logged = |x: &&proto::ShardLease| {
            observed.events[&x.job_id].iter().any(|e| {
                e.kind == "leased" && (e.stage, e.shard, e.attempt) == (x.stage, x.index, x.attempt)
            })
        };
        if held.iter().all(|x| logged(&x)) {
            break observed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let held_ids: Vec<proto::LeaseProgress> = held
        .iter()
        .map(|x| proto::LeaseProgress {
            lease_id: x.lease_id.clone(),
            work_done: 0,
        })
        .collect();
    let tried = rows.len();
    for Row {
        name,
        call: request,
        code,
        needle,
    } in rows
    {
        let status = call(&mut client, &mut w, request)
            .await
            .expect_err(&format!("{name}: accepted"));
        check_status(&name, &status, code, &needle);
        assert_eq!(observe(&mut client).await, before, "{name}: state changed");
        let revoked = w
            .heartbeat(proto::HeartbeatRequest {
                worker_id: HOLDER.into(),
                leases: held_ids.clone(),
                session: hs.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .revoked_lease_ids;
        assert!(revoked.is_empty(), "{name}: leases lost: {revoked:?}");
    }
    // Leases a worker does not hold are revoked, never renewed.
    let foreign = w
        .heartbeat(proto::HeartbeatRequest {
            worker_id: "intruder".into(),
            session: intruder.clone(),
            leases: vec![
                proto::LeaseProgress {
                    lease_id: k0.lease_id.clone(),
                    work_done: 1,
                },
                proto::LeaseProgress {
                    lease_id: "garbage".into(),
                    work_done: 1,
                },
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .revoked_lease_ids;
    assert_eq!(foreign, [k0.lease_id.clone(), "garbage".to_string()]);
    assert_eq!(
        observe(&mut client).await,
        before,
        "heartbeat changed state"
    );

    // The honest results of the same leases are still accepted, and every job
    // reaches the direct answer.
    for lease in &held {
        let input = stage_input(&mut w, &hs, lease).await;
        let outcome = compute(lease, input.as_ref());
        let mut messages = vec![header(HOLDER, &hs, &lease.lease_id)];
        if !outcome.output.is_empty() {
            messages.push(output(outcome.output.into_bytes().unwrap()));
        }
        messages.push(result(&outcome.partial));
        send(&mut w, messages)
            .await
            .unwrap_or_else(|e| panic!("{}: honest result refused: {e:?}", lease.lease_id));
    }
    let workers = Workers::start(&url, 1, 2);
    for (id, spec) in ids.iter().zip(specs) {
        let done = wait_finished(&mut client, id, std::time::Duration::from_secs(60)).await;
        assert_eq!(
            state(&done),
            proto::JobState::Succeeded,
            "{id}: {}",
            done.error
        );
        assert_eq!(done.answer, direct_answer(spec), "{id}");
    }
    workers.stop().await;
    eprintln!(
        "worker messages: {tried} bad inputs refused, {} jobs then finished",
        ids.len()
    );
    coordinator.shutdown().await;
}

// ------------------------------------------------------------ raw bytes

/// Sends arbitrary bytes as the request message; the response is not decoded.
#[derive(Clone, Default)]
struct RawBytes;

#[derive(Clone, Default)]
struct RawEncoder;

#[derive(Clone, Default)]
struct IgnoreDecoder;

impl tonic::codec::Codec for RawBytes {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = IgnoreDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> IgnoreDecoder {
        IgnoreDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        buf.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for IgnoreDecoder {
    type Item = ();
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf;
        buf.advance(buf.remaining());
        Ok(Some(()))
    }
}

/// Bytes that are not the method's protobuf message (a truncated varint, an
/// invalid wire type, a length past the end, invalid UTF-8 in a string) are
/// INVALID_ARGUMENT naming the message, on unary and streaming methods, and
/// change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_a_protobuf_message_are_invalid_arguments() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let before = observe(&mut client).await;
    let channel = Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let garbage: [(&str, Vec<u8>); 4] = [
        ("a truncated varint", vec![0x08, 0xff]),
        ("an invalid wire type", vec![0x0f]),
        ("a length past the end", vec![0x0a, 0x40, 0x01]),
        ("invalid UTF-8 in a string", vec![0x0a, 0x02, 0xff, 0xfe]),
    ];
    let methods = [
        ("/tally.v1.JobService/Get", "GetJobRequest"),
        ("/tally.v1.JobService/Cancel", "CancelRequest"),
        ("/tally.v1.WorkerService/Register", "RegisterRequest"),
        ("/tally.v1.WorkerService/Report", "ReportMessage"),
    ];
    let mut tried = 0;
    for (method, message) in methods {
        for (name, bytes) in &garbage {
            let mut grpc = tonic::client::Grpc::new(channel.clone());
            grpc.ready().await.unwrap();
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
            let status = if method.ends_with("Report") {
                let stream = tokio_stream::iter(vec![bytes.clone()]);
                grpc.client_streaming(tonic::Request::new(stream), path, RawBytes)
                    .await
                    .map(drop)
                    .expect_err(name)
            } else {
                grpc.unary(tonic::Request::new(bytes.clone()), path, RawBytes)
                    .await
                    .map(drop)
                    .expect_err(name)
            };
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{method} {name}: {status:?}"
            );
            assert!(
                status.message().contains(&format!("not a valid {message}")),
                "{method} {name}: {}",
                status.message()
            );
            tried += 1;
        }
    }
    assert_eq!(observe(&mut client).await, before, "state changed");
    eprintln!("raw bytes: {tried} malformed messages refused");
    coordinator.shutdown().await;
}

// ------------------------------------------------------------ fuzzing

/// Spec parsing under arbitrary input: proto values through the service's
/// conversion, JSON and TOML text through serde (what `--spec FILE` reads) and
/// `validate`. Nothing may panic, and every accepted spec must survive the trip
/// to proto and back unchanged, since that is how a file's spec reaches the
/// coordinator. Puzzle files for sliding blocks get the same treatment.
mod fuzz {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;
    use proptest::sample::select;
    use proptest::strategy::BoxedStrategy;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::{Map, Value, json};
    use tally_kinds::spec::{JobSpec, ValidSpec};
    use tally_wire::proto::{self, job_spec::Kind};

    const CASES: u32 = 20_000;

    fn runner() -> TestRunner {
        TestRunner::new(Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        })
    }

    fn edge_u32() -> impl Strategy<Value = u32> + Clone {
        prop_oneof![
            0u32..40,
            select(vec![
                0,
                1,
                2,
                16,
                17,
                18,
                19,
                100,
                101,
                243,
                244,
                1_024,
                1_025,
                100_000,
                100_001,
                998_244_353,
                1_000_000_007,
                2_147_483_647,
                1 << 31,
                u32::MAX,
            ]),
            any::<u32>(),
        ]
    }

    fn edge_u64() -> impl Strategy<Value = u64> + Clone {
        prop_oneof![
            (0u64..40).prop_map(|n| n * 2),
            0u64..40,
            select(vec![
                0,
                1,
                499,
                500,
                3_600_000,
                3_600_001,
                200_000,
                200_001,
                200_002,
                100_000_007,
                i64::MAX as u64,
                i64::MAX as u64 + 1,
                u64::MAX - 1,
                u64::MAX,
            ]),
            any::<u64>(),
        ]
    }

    fn edge_i32() -> impl Strategy<Value = i32> + Clone {
        prop_oneof![
            -5i32..5,
            select(vec![
                i32::MIN,
                i32::MIN + 1,
                -1_001,
                -1_000,
                1_000,
                1_001,
                i32::MAX
            ]),
            any::<i32>(),
        ]
    }

    fn board() -> impl Strategy<Value = String> + Clone {
        prop_oneof![
            Just(String::new()),
            Just("WRBB".to_string()),
            Just("BRBW".to_string()),
            prop::collection::vec(
                select(vec!['W', 'R', 'B', 'G', 'w', 'r', 'b', '/', 'X', ' ', 'é']),
                0..30
            )
            .prop_map(|c| c.into_iter().collect()),
            any::<String>(),
        ]
    }

    fn plan() -> impl Strategy<Value = String> + Clone {
        prop_oneof![
            select(vec!["", "points", "cell-step", "Points", "cell_step"]).prop_map(String::from),
            any::<String>(),
        ]
    }

    fn graph_place() -> impl Strategy<Value = String> + Clone {
        prop_oneof![
            select(vec!["", "worker", "stage", "Stage"]).prop_map(String::from),
            any::<String>(),
        ]
    }

    fn proto_spec() -> impl Strategy<Value = proto::JobSpec> {
        let small = prop_oneof![0u32..8, edge_u32()];
        let hex = (
            small.clone(),
            edge_u32(),
            plan(),
            edge_u32(),
            any::<bool>(),
            edge_u32(),
            graph_place(),
        )
            .prop_map(
                |(side, modulus, plan, shards_per_step, exact, points_per_shard, graph)| {
                    Kind::Hex(proto::HexSpec {
                        side,
                        modulus,
                        plan,
                        shards_per_step,
                        exact,
                        points_per_shard,
                        graph,
                        graph_parts: 0,
                    })
                },
            );
        let kayles = (edge_u64(), edge_u32())
            .prop_map(|(pins, digits)| Kind::Kayles(proto::KaylesSpec { pins, digits }));
        let sliders = (
            small.clone(),
            small,
            board(),
            board(),
            edge_u64(),
            edge_u64(),
            edge_u32(),
        )
            .prop_map(|(rows, cols, start, target, base, modulus, prefixes)| {
                Kind::Sliders(proto::SlidersSpec {
                    rows,
                    cols,
                    start,
                    target,
                    checksum_base: base,
                    checksum_modulus: modulus,
                    prefixes,
                    ..Default::default()
                })
            });
        let options = (
            edge_i32(),
            edge_u32(),
            edge_u64(),
            any::<bool>(),
            edge_u32(),
            edge_u32(),
        )
            .prop_map(
                |(priority, max_attempts, lease_ttl_ms, force, replicas, max_slots)| {
                    proto::RunnerOptions {
                        priority,
                        max_attempts,
                        lease_ttl_ms,
                        force,
                        replicas,
                        max_slots,
                    }
                },
            );
        (
            prop::option::weighted(0.95, prop_oneof![hex, kayles, sliders]),
            prop::option::of(options),
        )
            .prop_map(|(kind, options)| proto::JobSpec { kind, options })
    }

    /// A value for `key`: mostly of the right type and near the limits, now
    /// and then of another type.
    fn value_for(key: &'static str) -> BoxedStrategy<Value> {
        let typed: BoxedStrategy<Value> = match key {
            "kind" => select(vec!["hex", "kayles", "sliders", "Hex", "", "pegs"])
                .prop_map(Value::from)
                .boxed(),
            "side" => prop_oneof![3 => 1u32..4, 1 => 0u32..8, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            // The boards below are 2 x 2.
            "rows" | "cols" => prop_oneof![4 => Just(2u32), 1 => 0u32..8, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            "plan" => plan().prop_map(Value::from).boxed(),
            "exact" | "force" => any::<bool>().prop_map(Value::from).boxed(),
            // Both boards of a 2 x 2 puzzle with the same tiles, most of the time.
            "start" | "target" => prop_oneof![
                3 => select(vec!["WRBB", "BRBW", "wr/bb"]).prop_map(String::from),
                1 => board(),
            ]
            .prop_map(Value::from)
            .boxed(),
            "priority" => edge_i32().prop_map(Value::from).boxed(),
            "base" => prop_oneof![0u64..4, edge_u64()]
                .prop_map(Value::from)
                .boxed(),
            "modulus" => prop_oneof![
                3 => select(vec![2u64, 5, 17, 101, 244, 100_000_007, 998_244_353, 2_147_483_647]),
                1 => edge_u64(),
            ]
            .prop_map(Value::from)
            .boxed(),
            "pins" => prop_oneof![3 => (0u64..100).prop_map(|n| 2 * n), 1 => edge_u64()]
                .prop_map(Value::from)
                .boxed(),
            "lease_ttl_ms" => prop_oneof![3 => 500u64..=3_600_000, 1 => edge_u64()]
                .prop_map(Value::from)
                .boxed(),
            "digits" => prop_oneof![3 => 1u32..=18, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            "max_attempts" => prop_oneof![3 => 1u32..=100, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            "replicas" => prop_oneof![3 => 1u32..=3, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            "max_slots" => prop_oneof![3 => 0u32..=64, 1 => edge_u32()]
                .prop_map(Value::from)
                .boxed(),
            _ => edge_u32().prop_map(Value::from).boxed(),
        };
        prop_oneof![
            9 => typed,
            1 => prop_oneof![
                any::<f64>().prop_map(Value::from),
                (-5i64..0).prop_map(Value::from),
                select(vec![Value::Null, json!([]), json!({}), json!("7"), json!(true)]),
            ],
        ]
        .boxed()
    }

    const KIND_KEYS: [(&str, &[&str]); 3] = [
        (
            "hex",
            &["side", "modulus", "plan", "shards_per_step", "exact"],
        ),
        ("kayles", &["pins", "digits"]),
        (
            "sliders",
            &[
                "rows", "cols", "start", "target", "base", "modulus", "prefixes",
            ],
        ),
    ];
    const OPTION_KEYS: [&str; 6] = [
        "priority",
        "max_attempts",
        "lease_ttl_ms",
        "force",
        "replicas",
        "max_slots",
    ];

    /// Some of `keys`, each with a value, and now and then a key that does
    /// not belong.
    fn fields(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, Value)>> {
        let each: Vec<BoxedStrategy<Option<(String, Value)>>> = keys
            .iter()
            .map(|&key| {
                prop::option::weighted(0.85, value_for(key).prop_map(move |v| (key.to_string(), v)))
                    .boxed()
            })
            .collect();
        let stray = prop::option::weighted(
            0.1,
            (select(vec!["side", "pins", "rows", "bogus"]), edge_u32())
                .prop_map(|(k, v)| (k.to_string(), Value::from(v))),
        );
        (each, stray).prop_map(|(each, stray)| each.into_iter().flatten().chain(stray).collect())
    }

    /// A spec-shaped JSON object: a kind (sometimes wrong or missing), its
    /// fields, sometimes an options table.
    fn spec_object() -> impl Strategy<Value = Value> {
        let kinds: Vec<BoxedStrategy<Value>> = KIND_KEYS
            .iter()
            .map(|&(kind, keys)| {
                (
                    prop::option::weighted(0.95, value_for("kind")),
                    any::<bool>(),
                    fields(keys),
                    prop::option::of(fields(&OPTION_KEYS)),
                )
                    .prop_map(move |(named, right, fields, options)| {
                        let mut object = Map::new();
                        if let Some(named) = named {
                            object.insert("kind".into(), if right { kind.into() } else { named });
                        }
                        object.extend(fields);
                        if let Some(options) = options {
                            object.insert(
                                "options".into(),
                                Value::Object(options.into_iter().collect()),
                            );
                        }
                        Value::Object(object)
                    })
                    .boxed()
            })
            .collect();
        prop::strategy::Union::new(kinds)
    }

    /// `key = value` lines and an `[options]` table: TOML when the values allow.
    fn toml_text(spec: &Value) -> String {
        fn render(v: &Value) -> String {
            match v {
                Value::Object(m) => {
                    let inner: Vec<String> = m
                        .iter()
                        .map(|(k, v)| format!("{k} = {}", render(v)))
                        .collect();
                    format!("{{ {} }}", inner.join(", "))
                }
                Value::Null => "nan".into(),
                other => other.to_string(),
            }
        }
        let mut lines = Vec::new();
        let mut options = None;
        for (key, value) in spec.as_object().unwrap() {
            if key == "options" {
                options = Some(value);
            } else {
                lines.push(format!("{key} = {}", render(value)));
            }
        }
        if let Some(Value::Object(o)) = options {
            lines.push("[options]".into());
            lines.extend(o.iter().map(|(k, v)| format!("{k} = {}", render(v))));
        }
        lines.join("\n")
    }

    fn spec_text() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => spec_object().prop_map(|v| v.to_string()),
            3 => spec_object().prop_map(|v| toml_text(&v)),
            // Cut or garbled: a file saved half-way, a stray byte.
            2 => (spec_object(), any::<prop::sample::Index>(), any::<char>()).prop_map(
                |(v, at, c)| {
                    let text = v.to_string();
                    let mut cut: String = text.chars().take(at.index(text.len() + 1)).collect();
                    cut.push(c);
                    cut
                }
            ),
            1 => any::<String>(),
        ]
    }

    /// An accepted spec is valid, and its proto form converts back to itself
    /// and is a fixed point of the normalisation.
    fn round_trips(spec: &ValidSpec) -> Result<(), TestCaseError> {
        let again = ValidSpec::new(spec.spec().clone());
        prop_assert_eq!(
            again.as_ref().ok(),
            Some(spec),
            "checked again: {:?}",
            again
        );
        let wire = proto::JobSpec::from(spec);
        let back = ValidSpec::try_from(&wire);
        prop_assert_eq!(back.as_ref().ok(), Some(spec), "through proto: {:?}", back);
        prop_assert_eq!(proto::JobSpec::from(&back.unwrap()), wire);
        let json = serde_json::to_string(spec).unwrap();
        prop_assert_eq!(&serde_json::from_str::<ValidSpec>(&json).unwrap(), spec);
        prop_assert_eq!(
            &serde_json::from_str::<JobSpec>(&json).unwrap(),
            spec.spec()
        );
        Ok(())
    }

    /// Found by the text fuzzing below: a value that means "the default" on the
    /// wire must not be a valid value in a file.
    #[test]
    fn a_spec_file_value_the_wire_cannot_carry_is_refused() {
        let text = r#"{"kind": "sliders", "rows": 2, "cols": 2, "start": "WRBB",
            "target": "BRBW", "base": 0, "modulus": 5}"#;
        let err = JobSpec::from_json(text).expect_err("base 0 is refused");
        assert!(
            err.to_string().contains("checksum base must be at least 1"),
            "{err}"
        );
        let with_base_1 = text.replace("\"base\": 0", "\"base\": 1");
        round_trips(&JobSpec::from_json(&with_base_1).unwrap()).unwrap();
    }

    #[test]
    fn arbitrary_proto_specs_never_panic_and_accepted_ones_round_trip() {
        let accepted = AtomicUsize::new(0);
        runner()
            .run(&proto_spec(), |p| {
                if let Ok(spec) = ValidSpec::try_from(&p) {
                    accepted.fetch_add(1, Ordering::Relaxed);
                    round_trips(&spec)?;
                }
                Ok(())
            })
            .unwrap();
        let accepted = accepted.into_inner();
        eprintln!("proto specs: {CASES} tried, {accepted} accepted");
        assert!(
            accepted as u32 > CASES / 100,
            "too few valid specs to test the round trip"
        );
    }

    #[test]
    fn arbitrary_spec_text_never_panics_and_accepted_specs_round_trip() {
        let (json_ok, toml_ok) = (AtomicUsize::new(0), AtomicUsize::new(0));
        runner()
            .run(&spec_text(), |text| {
                if let Ok(spec) = JobSpec::from_json(&text) {
                    json_ok.fetch_add(1, Ordering::Relaxed);
                    round_trips(&spec)?;
                }
                if let Ok(spec) = toml::from_str::<JobSpec>(&text)
                    && let Ok(spec) = ValidSpec::new(spec)
                {
                    toml_ok.fetch_add(1, Ordering::Relaxed);
                    round_trips(&spec)?;
                }
                Ok(())
            })
            .unwrap();
        let (json_ok, toml_ok) = (json_ok.into_inner(), toml_ok.into_inner());
        eprintln!("spec text: {CASES} tried, {json_ok} accepted as JSON, {toml_ok} as TOML");
        assert!(
            json_ok > 0 && toml_ok > 0,
            "no valid spec text was generated"
        );
    }

    /// A puzzle file: the built-in one, a small one, or random grid text, each
    /// then mutated by a few random edits (insert, replace or delete a
    /// character, among those the format gives meaning to and some it does not).
    fn puzzle_text() -> impl Strategy<Value = String> {
        let base = prop_oneof![
            Just(include_str!("../../examples/pe766.blocks").to_string()),
            Just("aab\n.cb\n.c.\nsame: ac\n".to_string()),
            prop::collection::vec(
                select(vec![
                    '.', '.', '.', '#', 'a', 'a', 'b', 'c', 'X', '1', '2', '\n', '\n', ' ', ';',
                ]),
                0..80
            )
            .prop_map(|c| c.into_iter().collect::<String>()),
        ];
        let edit = (
            any::<prop::sample::Index>(),
            0u8..3,
            select(vec![
                '.', '#', 'a', 'b', 'z', 'Z', '0', '9', '\n', ' ', ';', ':', '\t', '-', 'é', '\0',
            ]),
        );
        (base, prop::collection::vec(edit, 0..6)).prop_map(|(text, edits)| {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, op, ch) in edits {
                let i = at.index(chars.len() + 1);
                match op {
                    0 => chars.insert(i, ch),
                    1 if i < chars.len() => chars[i] = ch,
                    _ if i < chars.len() => {
                        chars.remove(i);
                    }
                    _ => chars.push(ch),
                }
            }
            let mut text: String = chars.into_iter().collect();
            if text.len().is_multiple_of(7) {
                text.push_str("same: ab\n");
            }
            text
        })
    }

    /// Puzzle parsing never panics; an accepted puzzle's initial configuration
    /// is valid, every configuration one slide away is valid and slides back,
    /// and a blocks spec carrying the text round-trips as every other spec.
    #[test]
    fn arbitrary_puzzle_text_never_panics_and_accepted_puzzles_are_consistent() {
        use tally_kernels::blocks;
        use tally_kinds::blocks::BlocksSpec;
        let accepted = AtomicUsize::new(0);
        runner()
            .run(&puzzle_text(), |text| {
                let parsed = blocks::parse_puzzle(&text);
                let spec = ValidSpec::new(JobSpec::new(BlocksSpec {
                    puzzle: text.clone(),
                    plan: Default::default(),
                    buckets: 0,
                }));
                prop_assert_eq!(parsed.is_ok(), spec.is_ok(), "{:?}", text);
                let (Ok(puzzle), Ok(spec)) = (parsed, spec) else {
                    return Ok(());
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                round_trips(&spec)?;
                let initial = puzzle.initial_state();
                prop_assert!(puzzle.check_state(initial).is_ok(), "{:?}", text);
                let mut next = Vec::new();
                let mut back = Vec::new();
                puzzle.neighbours(initial, &mut next);
                for &state in &next {
                    prop_assert!(puzzle.check_state(state).is_ok(), "{:?}", text);
                    puzzle.neighbours(state, &mut back);
                    prop_assert!(back.contains(&initial), "a slide does not slide back");
                }
                Ok(())
            })
            .unwrap();
        let accepted = accepted.into_inner();
        eprintln!("puzzle text: {CASES} tried, {accepted} accepted");
        assert!(
            accepted as u32 > CASES / 100,
            "too few valid puzzles to test their invariants"
        );
    }
}
