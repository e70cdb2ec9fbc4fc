//! Bad input against a running coordinator, table by table: every spec value at
//! its limit (accepted) and just past it (refused). A refused row must give its
//! gRPC code and a message naming the problem, and leave the jobs and their
//! event logs exactly as they were.

mod support;

use std::collections::BTreeMap;

use support::*;
use tally_common::jobs;
use tally_common::proto::job_service_client::JobServiceClient;
use tally_common::proto::{self, job_spec::Kind};
use tally_common::spec::{self, HexPlan, HexSpec, JobSpec};
use tally_common::{hex, kayles};
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
const OVERSIZED: usize = tally_coordinator::server::MAX_MESSAGE_BYTES + 1;

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
            };
            jobs::hex_estimate(&h).worker_memory_bytes > jobs::WORKER_MEMORY_BUDGET
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
        // Hex.
        (
            "hex side 0".into(),
            hex(0, 0),
            Refused(
                Code::InvalidArgument,
                "side must be between 1 and 16, got 0",
            ),
        ),
        ("hex side 1".into(), hex(1, 0), Accepted),
        ("hex side max".into(), hex(max_side, 0), Accepted),
        (
            "hex side max, exact".into(),
            hex_with(max_side, |h| h.exact = true),
            Accepted,
        ),
        (
            "hex side max+1".into(),
            hex(max_side + 1, 0),
            Refused(
                Code::InvalidArgument,
                "side must be between 1 and 16, got 17",
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
                h.shards_per_step = spec::MAX_SHARDS_PER_STEP;
            }),
            Accepted,
        ),
        (
            "hex shards per step max+1".into(),
            hex_with(2, |h| {
                h.plan = "cell-step".into();
                h.shards_per_step = spec::MAX_SHARDS_PER_STEP + 1;
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
            "hex cell-step side max, forced".into(),
            proto::JobSpec {
                options: Some(proto::RunnerOptions {
                    force: true,
                    ..Default::default()
                }),
                ..hex_with(max_side, |h| h.plan = "cell-step".into())
            },
            Valid,
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
                "pins must be at most 200000, got 200002",
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
            sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| {
                s.prefixes = spec::MAX_PREFIX_TASKS
            }),
            Accepted,
        ),
        (
            "sliders prefixes max+1".into(),
            sliders_with(2, 3, "WRRBBB", "BBBRRW", |s| {
                s.prefixes = spec::MAX_PREFIX_TASKS + 1
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
        .list(proto::ListJobsRequest {})
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
                JobSpec::try_from(&spec).unwrap_or_else(|e| panic!("{name}: refused: {e}"));
                valid += 1;
            }
            Accepted => {
                let job = client
                    .submit(proto::SubmitRequest {
                        spec: Some(spec.clone()),
                        idempotency_key: String::new(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{name}: refused: {e:?}"))
                    .into_inner()
                    .job
                    .unwrap();
                let sent = JobSpec::try_from(&spec).unwrap();
                let stored = JobSpec::try_from(job.spec.as_ref().unwrap()).unwrap();
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
                    })
                    .await
                    .expect_err(&name);
                check_status(&name, &status, code, needle);
                // The same refusal as the spec conversion gives in process.
                assert!(JobSpec::try_from(&spec).is_err(), "{name}");
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
            })
            .await
            .expect_err(name);
        check_status(name, &status, code, needle);
        assert_eq!(observe(&mut client).await, before, "{name}: state changed");
        refused += 1;
    }
    let key = "k".repeat(256);
    let first = submit(
        &mut client,
        &JobSpec::try_from(&kayles(10, 0)).unwrap(),
        &key,
    )
    .await;
    let again = submit(
        &mut client,
        &JobSpec::try_from(&kayles(12, 0)).unwrap(),
        &key,
    )
    .await;
    assert_eq!(first.id, again.id, "a 256-byte key is kept");
    accepted += 1;
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
        let spec = JobSpec::try_from(wire).unwrap_or_else(|e| panic!("{name}: {e}"));
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
