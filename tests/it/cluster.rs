//! The runner in one process: a coordinator and workers on loopback. Every job's
//! answer through the runner must equal the kernels' own answer.

use crate::support;

use std::time::Duration;

use support::*;
use tally_kernels::sliders::{SliderParams, SliderSpace};
use tally_kinds::Control;
use tally_kinds::blocks::{BlocksPlanName, BlocksSpec};
use tally_kinds::hex::{HexPlan, HexSpec};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::pegs::{PegsPlanName, PegsSpec};
use tally_kinds::sliders::{SlidersPlanName, SlidersSpec};
use tally_kinds::spec::JobSpec;
use tally_wire::lease::Attempt;
use tally_wire::proto::{self, JobState};

fn hex_points(side: u32, modulus: u32, exact: bool) -> JobSpec {
    JobSpec::new(HexSpec {
        side,
        modulus,
        plan: HexPlan::Points,
        shards_per_step: 0,
        exact,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hex_points_equals_cell_step_and_the_direct_kernel() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 2, 2);
    let mut client = jobs_client(&coordinator.url()).await;
    for side in 1..=9 {
        for modulus in [1_000_000_007, 998_244_353] {
            let points = hex_points(side, modulus, false);
            let cell = JobSpec::new(HexSpec {
                side,
                modulus,
                plan: HexPlan::CellStep,
                shards_per_step: 2,
                exact: false,
                points_per_shard: 0,
                graph: Default::default(),
                graph_parts: 0,
            });
            let a = submit(&mut client, &points, "").await;
            let b = submit(&mut client, &cell, "").await;
            let a = wait_finished(&mut client, &a.id, Duration::from_secs(120)).await;
            let b = wait_finished(&mut client, &b.id, Duration::from_secs(120)).await;
            assert_eq!(
                state(&a),
                JobState::Succeeded,
                "points side {side}: {}",
                a.error
            );
            assert_eq!(
                state(&b),
                JobState::Succeeded,
                "cell-step side {side}: {}",
                b.error
            );
            assert_eq!(a.answer, b.answer, "side {side} mod {modulus}");
            assert_eq!(a.answer, direct_answer(&cell), "side {side} mod {modulus}");
        }
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_hex_counts_through_the_runner() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 2, 1);
    let mut client = jobs_client(&coordinator.url()).await;
    for (side, games) in [(1, "1"), (2, "24"), (3, "257760"), (4, "10663950528000")] {
        let job = submit(&mut client, &hex_points(side, 1_000_000_007, true), "").await;
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
        assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
        assert_eq!(done.answer, games, "side {side}");
    }
    // Larger sides: the exact count reduced mod p equals the residue of the sweep.
    for side in [6, 7] {
        let job = submit(&mut client, &hex_points(side, 1_000_000_007, true), "").await;
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
        let reduced = done.answer.bytes().fold(0u64, |acc, d| {
            (acc * 10 + (d - b'0') as u64) % 1_000_000_007
        });
        assert_eq!(
            reduced.to_string(),
            direct_answer(&hex_cell_step(side, 1)),
            "side {side}"
        );
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

/// A worker that alters its results: the extra point catches it; the job fails
/// with the reason and never reports a wrong answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_corrupted_evaluation_is_caught_not_answered() {
    let coordinator = start_coordinator(None).await;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut config = tally_worker::WorkerConfig::new(coordinator.url());
    config.corrupt_results = true;
    config.slots = 2;
    config.threads = 2;
    let mut rx2 = rx.clone();
    let worker = tokio::spawn(tally_worker::run(config, async move {
        let _ = rx2.wait_for(|s| *s).await;
    }));
    let mut client = jobs_client(&coordinator.url()).await;
    let job = submit(&mut client, &hex_points(6, 1_000_000_007, false), "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Failed);
    assert!(done.answer.is_empty());
    assert!(
        done.error.contains("disagree")
            || done.error.contains("singular")
            || done.error.contains("determine"),
        "{}",
        done.error
    );
    let _ = stop.send(true);
    let _ = worker.await;
    drop(rx);
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hex_cell_step_equals_the_direct_kernel_for_several_shard_counts() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 2, 2);
    let mut client = jobs_client(&coordinator.url()).await;
    let cases = [
        (1, 1),
        (2, 1),
        (3, 2),
        (4, 3),
        (5, 1),
        (5, 4),
        (6, 7),
        (7, 2),
        (8, 1),
        (8, 5),
    ];
    for (side, shards) in cases {
        let spec = hex_cell_step(side, shards);
        let job = submit(&mut client, &spec, "").await;
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
        assert_eq!(
            state(&done),
            JobState::Succeeded,
            "side {side}: {}",
            done.error
        );
        assert_eq!(
            done.answer,
            direct_answer(&spec),
            "side {side}, {shards} shards per step"
        );
        assert_eq!(done.shards_done, done.shards_total);
        let expected_stages = (side * (side - 1)).max(1);
        assert_eq!(done.stages_total, expected_stages);
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kayles_and_sliders_equal_the_direct_kernels() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 3, 1);
    let mut client = jobs_client(&coordinator.url()).await;
    let mut specs = vec![
        JobSpec::new(KaylesSpec { pins: 0, digits: 9 }),
        JobSpec::new(KaylesSpec {
            pins: 20,
            digits: 18,
        }),
        JobSpec::new(KaylesSpec {
            pins: 3000,
            digits: 9,
        }),
        JobSpec::new(SlidersSpec {
            board: SliderParams::default(),
            prefixes: 0,
            ..Default::default()
        }),
    ];
    // A three-colour board with many shortest sequences, split into many prefixes.
    for prefixes in [1, 10, 200] {
        specs.push(JobSpec::new(SlidersSpec {
            board: SliderParams::new(4, 4, "WRRRRRRGRRRRRRRB", "BRRRRRRGRRRRRRRW"),
            prefixes,
            ..Default::default()
        }));
    }
    for spec in specs {
        let job = submit(&mut client, &spec, "").await;
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
        assert_eq!(
            state(&done),
            JobState::Succeeded,
            "{}: {}",
            valid(&spec).describe(),
            done.error
        );
        assert_eq!(
            done.answer,
            direct_answer(&spec),
            "{}",
            valid(&spec).describe()
        );
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

/// Every move sequence of exactly `len` moves from `start`, over board strings
/// (row by row, `W` empty; the letter is the direction the tile moves): the
/// number reaching `target` and the exact sum of their checksums.
fn brute_force_sliders(cols: usize, start: &[u8], target: &[u8], len: u32) -> (u128, u128) {
    fn go(b: &mut Vec<u8>, cols: usize, left: u32, c: u64, target: &[u8], acc: &mut (u128, u128)) {
        if left == 0 {
            if b == target {
                acc.0 += 1;
                acc.1 += u128::from(c);
            }
            return;
        }
        let z = b.iter().position(|&x| x == b'W').unwrap();
        let (r, k, rows) = (z / cols, z % cols, b.len() / cols);
        // (letter, the cell whose tile slides into the empty cell)
        let mut moves = Vec::new();
        if k + 1 < cols {
            moves.push((b'L', z + 1));
        }
        if k > 0 {
            moves.push((b'R', z - 1));
        }
        if r + 1 < rows {
            moves.push((b'U', z + cols));
        }
        if r > 0 {
            moves.push((b'D', z - cols));
        }
        for (letter, src) in moves {
            b.swap(z, src);
            go(
                b,
                cols,
                left - 1,
                (243 * c + u64::from(letter)) % 100_000_007,
                target,
                acc,
            );
            b.swap(z, src);
        }
    }
    let mut acc = (0, 0);
    go(&mut start.to_vec(), cols, len, 0, target, &mut acc);
    acc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_5x5_slider_job_on_several_workers_equals_brute_force_and_the_layer_count() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 3, 2);
    let mut client = jobs_client(&coordinator.url()).await;
    // One red and one blue tile among 22 green: the blank crosses the board
    // around both.
    let (start, target) = ("WGGGGGRGGGGGGGGGGGBGGGGGG", "GGGGGGRGGGGGGGGGGGBGGGGGW");
    let params = SliderParams::new(5, 5, start, target);
    let space = SliderSpace::build(&params, &Control::new()).unwrap();
    let dp = space.dp_totals();
    let d = space.shortest_length();
    // No shorter sequence reaches the target; brute force over all of length D.
    for len in 0..d {
        assert_eq!(
            brute_force_sliders(5, start.as_bytes(), target.as_bytes(), len).0,
            0
        );
    }
    let (count, sum) = brute_force_sliders(5, start.as_bytes(), target.as_bytes(), d);
    assert!(count > 4, "{count} sequences");
    assert_eq!(dp.count, count);
    assert_eq!(u128::from(dp.checksum_sum_mod), sum % 100_000_007);
    for prefixes in [3, 8] {
        let spec = JobSpec::new(SlidersSpec {
            board: params.clone(),
            prefixes,
            ..Default::default()
        });
        let job = submit(&mut client, &spec, "").await;
        assert!(job.shards_total > 1, "{} shards", job.shards_total);
        // The work units are sequences: the shards' weights sum to the count.
        assert_eq!(u128::from(job.work_total), count);
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
        assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
        assert_eq!(done.answer, sum.to_string());
        assert_eq!(done.work_done, done.work_total);
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slider_jobs_really_split_into_many_shards() {
    let coordinator = start_coordinator(None).await;
    let mut client = jobs_client(&coordinator.url()).await;
    let spec = JobSpec::new(SlidersSpec {
        board: SliderParams::new(4, 4, "WRRRRRRGRRRRRRRB", "BRRRRRRGRRRRRRRW"),
        prefixes: 200,
        ..Default::default()
    });
    let job = submit(&mut client, &spec, "").await;
    assert!(job.shards_total >= 20, "only {} shards", job.shards_total);
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_idempotency_key_returns_the_same_job() {
    let coordinator = start_coordinator(None).await;
    let mut client = jobs_client(&coordinator.url()).await;
    let spec = hex_cell_step(3, 1);
    let first = client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(&spec)),
            idempotency_key: "k-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let again = client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(&spec)),
            idempotency_key: "k-1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let other = client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(&spec)),
            idempotency_key: "k-2".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(first.created && !again.created && other.created);
    assert_eq!(
        first.job.as_ref().unwrap().id,
        again.job.as_ref().unwrap().id
    );
    assert_ne!(first.job.unwrap().id, other.job.unwrap().id);
    // The same key with another spec is a conflict, not the old job.
    let conflict = client
        .submit(proto::SubmitRequest {
            spec: Some(proto_spec(&hex_cell_step(4, 1))),
            idempotency_key: "k-1".into(),
            ..Default::default()
        })
        .await
        .expect_err("a key reused for another spec is refused");
    assert_eq!(conflict.code(), tonic::Code::AlreadyExists, "{conflict:?}");
    assert!(
        conflict.message().contains("different spec"),
        "{conflict:?}"
    );
    let listed = client
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert_eq!(listed.len(), 2);
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_specs_are_refused_with_invalid_argument_and_change_nothing() {
    let coordinator = start_coordinator(None).await;
    let mut client = jobs_client(&coordinator.url()).await;
    let bad = [
        proto::JobSpec {
            kind: None,
            options: None,
        },
        proto::JobSpec {
            kind: Some(proto::job_spec::Kind::Hex(proto::HexSpec {
                side: tally_kernels::hex::MAX_SIDE + 1,
                ..Default::default()
            })),
            options: None,
        },
        proto::JobSpec {
            kind: Some(proto::job_spec::Kind::Kayles(proto::KaylesSpec {
                pins: 7,
                digits: 9,
            })),
            options: None,
        },
        proto::JobSpec {
            kind: Some(proto::job_spec::Kind::Sliders(proto::SlidersSpec {
                rows: 2,
                cols: 2,
                start: "WRBG".into(),
                target: "WBRG".into(),
                ..Default::default()
            })),
            options: None,
        },
        // A megabyte board: the refusal may quote it, but only in part.
        proto::JobSpec {
            kind: Some(proto::job_spec::Kind::Sliders(proto::SlidersSpec {
                rows: 4,
                cols: 4,
                start: "X".repeat(1 << 20),
                target: "WBRBBRBRRBRBBRBR".into(),
                ..Default::default()
            })),
            options: None,
        },
    ];
    for spec in bad {
        let status = client
            .submit(proto::SubmitRequest {
                spec: Some(spec.clone()),
                idempotency_key: String::new(),
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{spec:?}: {status:?}"
        );
        assert!(!status.message().is_empty());
        assert!(
            status.message().len() <= tally_coordinator::error::MAX_STATUS_MESSAGE,
            "a status message of {} bytes",
            status.message().len()
        );
    }
    let listed = client
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    assert!(listed.is_empty(), "a refused spec created a job");
    let missing = client
        .get(proto::GetJobRequest {
            job_id: "job-999999".into(),
        })
        .await;
    assert_eq!(missing.unwrap_err().code(), tonic::Code::NotFound);
    coordinator.shutdown().await;
}

/// A fake worker holds attempt 1, lets it expire; attempt 2 goes to another
/// worker; the report of attempt 1 is then refused and changes nothing.
///
/// The leases are short (the expiry is what makes attempt 1 stale), so every
/// lease is left to expire before the log is compared: from then on nothing
/// but the report could change it, however slowly the test runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_from_a_stale_attempt_is_refused() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 20,
        digits: 9,
    });
    spec.options.lease_ttl_ms = 500;
    spec.options.max_attempts = 10;
    let job = submit(&mut client, &spec, "").await;
    let mut w = workers_client(&url).await;
    let stale = register(&mut w, "stale").await;
    let fresh = register(&mut w, "fresh").await;
    let lease = |worker: &str| proto::LeaseRequest {
        lease_ahead: 0,
        worker_id: worker.into(),
        free_slots: 1,
        wait_ms: 5_000,
        session: if worker == "stale" { &stale } else { &fresh }.clone(),
    };
    let first = w
        .lease(lease("stale"))
        .await
        .unwrap()
        .into_inner()
        .leases
        .remove(0);
    let first_attempt = Attempt(first.attempt);
    assert_eq!(
        first_attempt.to_string(),
        "1.1",
        "the first lease of epoch 1"
    );
    // Let the lease expire (no heartbeats), then lease the same shard again.
    let mut second = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let leases = w
            .lease(proto::LeaseRequest {
                lease_ahead: 0,
                free_slots: 16,
                ..lease("fresh")
            })
            .await
            .unwrap()
            .into_inner()
            .leases;
        if let Some(l) = leases.into_iter().find(|l| l.index == first.index) {
            second = Some(l);
            break;
        }
    }
    let second = second.expect("the shard was leased again");
    assert_eq!(second.attempt, first.attempt + 1);
    // Attempt 2 and the fresh worker's other leases lapse as well (nobody
    // leases again): the expiry timer has nothing left to add to the log.
    loop {
        let j = get_job(&mut client, &job.id).await;
        assert_eq!(state(&j), JobState::Running, "{}", j.error);
        if j.shards_leased == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = events(&mut client, &job.id).await;
    assert!(
        before
            .iter()
            .any(|e| e.kind == "expired" && e.shard == second.index && e.attempt == second.attempt),
        "attempt 2 expired"
    );

    // A well-formed result for the stale attempt.
    let stream = tokio_stream::iter(result_report(&spec, &first, "stale", &stale));
    let status = w.report(stream).await.expect_err("stale report refused");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("stale"), "{}", status.message());

    let after = events(&mut client, &job.id).await;
    assert_eq!(before, after, "the refused report changed the job's log");
    let job_now = get_job(&mut client, &job.id).await;
    assert_eq!(job_now.shards_done, 0);
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_stops_the_work_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(Some(dir.path())).await;
    let url = coordinator.url();
    // A shard still running at the stop would hold it for the whole drain.
    let workers = Workers::start_with(&url, 1, 2, |c| c.drain_timeout = Duration::from_secs(120));
    let mut client = jobs_client(&url).await;
    // Long enough to be running when cancelled.
    let spec = JobSpec::new(KaylesSpec {
        pins: 2_000_000,
        digits: 9,
    });
    let job = submit(&mut client, &spec, "").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let j = get_job(&mut client, &job.id).await;
        if j.shards_leased > 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never leased");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = client
        .cancel(proto::CancelRequest {
            job_id: job.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state(&cancelled), JobState::Cancelled);
    // The worker stops its shards: no lease stays renewed, nothing more is accepted.
    let accepted_at_cancel = events(&mut client, &job.id)
        .await
        .iter()
        .filter(|e| e.kind == "accepted")
        .count();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let accepted_later = events(&mut client, &job.id)
        .await
        .iter()
        .filter(|e| e.kind == "accepted")
        .count();
    assert_eq!(
        accepted_at_cancel, accepted_later,
        "shards were accepted after the cancel"
    );
    // The revoked shards stopped: nothing is left to drain.
    let stopping = std::time::Instant::now();
    workers.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(60),
        "workers took too long to stop"
    );
    coordinator.shutdown().await;

    let coordinator = start_coordinator(Some(dir.path())).await;
    let mut client = jobs_client(&coordinator.url()).await;
    let reloaded = get_job(&mut client, &job.id).await;
    assert_eq!(state(&reloaded), JobState::Cancelled);
    let result = client
        .result(proto::ResultRequest {
            job_id: job.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(result.state, JobState::Cancelled as i32);
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_streams_progress_until_the_job_finishes() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 1, 2);
    let mut client = jobs_client(&coordinator.url()).await;
    let job = submit(&mut client, &hex_cell_step(6, 2), "").await;
    let mut stream = client
        .watch(proto::WatchRequest {
            job_id: job.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(update) = stream.message().await.unwrap() {
        seen.push(update);
    }
    let last = seen.last().unwrap();
    assert_eq!(state(last), JobState::Succeeded);
    assert!(seen.len() >= 2, "only {} updates", seen.len());
    assert!(
        seen.windows(2).all(|w| w[0].work_done <= w[1].work_done),
        "progress went backwards"
    );
    workers.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_catch_a_worker_that_returns_wrong_numbers() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 600,
        digits: 9,
    });
    spec.options.replicas = 2;
    spec.options.max_attempts = 2;
    let mut client = jobs_client(&url).await;

    // Two honest workers agree: the job succeeds with the direct answer, each
    // shard computed by both.
    let honest = Workers::start(&url, 2, 1);
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    let log = events(&mut client, &job.id).await;
    for shard in 0..done.shards_total as u32 {
        let by = |kind: &str| {
            log.iter()
                .filter(|e| e.kind == kind && e.shard == shard)
                .map(|e| e.worker_id.clone())
                .collect::<Vec<_>>()
        };
        let (replica, accepted) = (by("replica"), by("accepted"));
        assert_eq!((replica.len(), accepted.len()), (1, 1), "shard {shard}");
        assert_ne!(
            replica[0], accepted[0],
            "shard {shard} computed twice by one worker"
        );
    }
    honest.stop().await;

    // One honest and one faulty worker never agree: the job fails, no answer.
    let honest = Workers::start(&url, 1, 1);
    let faulty = Workers::start_with(&url, 1, 1, |c| {
        c.worker_id = format!("faulty-{}", std::process::id());
        c.corrupt_results = true;
    });
    let mut spec = spec.clone();
    spec.options.priority = 1; // a different spec: a new job
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Failed);
    assert!(done.error.contains("replicas disagree"), "{}", done.error);
    assert!(done.answer.is_empty());
    honest.stop().await;
    faulty.stop().await;
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pegs_through_several_workers_equal_the_single_process_count() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    // Without a final hole (one search to the last peg), and with one: the
    // start hole (one search meeting itself) or another hole (two searches),
    // with odd (triangles 5, 6) and even (triangle 4) numbers of jumps.
    let games = [
        ("triangle:5", Some(1), None),
        ("triangle:6", Some(4), None),
        ("triangle:5", Some(13), Some(13)),
        ("triangle:6", Some(1), Some(1)),
        ("triangle:6", Some(2), Some(8)),
        ("triangle:4", Some(2), Some(3)),
    ];
    // The prefixes plan, and the frontier plan with 1, 2, 7 and chosen buckets.
    let plans = [
        (PegsPlanName::Prefixes, 5, 0),
        (PegsPlanName::Frontier, 0, 1),
        (PegsPlanName::Frontier, 0, 2),
        (PegsPlanName::Frontier, 0, 7),
        (PegsPlanName::Frontier, 0, 0),
    ];
    for workers in [1, 3] {
        let running = Workers::start(&url, workers, 1);
        for (board, start, end) in games {
            for (plan, prefixes, buckets) in plans {
                let spec = JobSpec::new(PegsSpec {
                    board: board.into(),
                    start,
                    end,
                    prefixes,
                    plan: Some(plan),
                    buckets,
                    by_final_hole: false,
                    no_prune: false,
                });
                let name = format!("{board} {start:?} {end:?} {plan:?} {buckets} buckets");
                let job = submit(&mut client, &spec, "").await;
                let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
                assert_eq!(state(&done), JobState::Succeeded, "{name}: {}", done.error);
                assert_eq!(
                    done.answer,
                    direct_answer(&spec),
                    "{name}, {workers} workers"
                );
                let stages = u64::from(done.stages_total);
                if buckets > 1 && end.is_none() {
                    // The start alone, then a stage per level, each split.
                    assert!(stages >= 10, "{name}: {stages} stages");
                    assert_eq!(done.shards_total, 1 + u64::from(buckets) * (stages - 1));
                } else if buckets > 1 {
                    // Half the levels of each search, then the join.
                    assert!(stages >= 4, "{name}: {stages} stages");
                    assert!(done.shards_total > stages * (u64::from(buckets) - 1));
                } else if plan == PegsPlanName::Prefixes {
                    assert!(done.shards_total > 1, "{name}: one shard only");
                }
            }
        }
        running.stop().await;
    }
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliders_frontier_through_several_workers_equal_the_single_process_answer() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    // Two and three colours, many shortest sequences, and start = target.
    let boards = [
        (3, 3, "WRRRRBBBB", "WBBBBRRRR"),
        (4, 4, "WRRRRRRGRRRRRRRB", "BRRRRRRGRRRRRRRW"),
        (2, 3, "WRRBBG", "WRRBBG"),
    ];
    for workers in [1, 3] {
        let running = Workers::start(&url, workers, 1);
        for (rows, cols, start, target) in boards {
            for buckets in [1, 2, 7, 0] {
                let spec = JobSpec::new(SlidersSpec {
                    board: SliderParams::new(rows, cols, start, target),
                    plan: SlidersPlanName::Frontier,
                    buckets,
                    ..Default::default()
                });
                let name = format!("{start} -> {target}, {buckets} buckets, {workers} workers");
                let job = submit(&mut client, &spec, "").await;
                let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
                assert_eq!(state(&done), JobState::Succeeded, "{name}: {}", done.error);
                assert_eq!(done.answer, direct_answer(&spec), "{name}");
                if buckets > 1 && start != target {
                    // Every level but the start's, and every graph level
                    // but the target's, split.
                    assert!(
                        done.shards_total > u64::from(done.stages_total),
                        "{name}: {} shards in {} stages",
                        done.shards_total,
                        done.stages_total
                    );
                }
            }
        }
        running.stop().await;
    }
    coordinator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocks_through_the_runner_equal_the_single_process_count() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 2, 1);
    let mut client = jobs_client(&coordinator.url()).await;
    for puzzle in [
        "aa1.\na23.\n4567\nsame: 1234567\n",
        "ab.\ncd#\n..e\nsame: abcde\n",
        "aab\n.cb\n.cd\n",
    ] {
        let spec = JobSpec::new(BlocksSpec {
            puzzle: puzzle.into(),
            plan: BlocksPlanName::Search,
            buckets: 0,
        });
        let job = submit(&mut client, &spec, "").await;
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
        assert_eq!(
            state(&done),
            JobState::Succeeded,
            "{puzzle}: {}",
            done.error
        );
        assert_eq!(done.answer, direct_answer(&spec), "{puzzle}");
    }
    // A bad puzzle is refused at submission with its line and reason.
    let bad = proto::JobSpec {
        kind: Some(proto::job_spec::Kind::Blocks(proto::BlocksSpec {
            puzzle: "aa1.\na2a.\n".into(),
            plan: "frontier".into(),
            buckets: 0,
        })),
        options: None,
    };
    let status = client
        .submit(proto::SubmitRequest {
            spec: Some(bad),
            idempotency_key: String::new(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("line 2"), "{}", status.message());
    workers.stop().await;
    coordinator.shutdown().await;
}

/// The frontier plan: a stage per layer, each layer's states in buckets over
/// shards. With 1, 2 and 7 buckets per layer and the automatic choice, on one
/// worker and on three, every puzzle's count, layers and largest layer equal
/// the single-process search's; the events name each layer's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocks_frontier_layers_over_buckets_equal_the_single_process_search() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    for workers in [1, 3] {
        let running = Workers::start(&url, workers, 1);
        // 208, 120 and 13,860 configurations in 37 layers.
        let cases: [(&str, &[u32]); 3] = [
            ("aa1.\na23.\n4567\nsame: 1234567\n", &[1, 2, 7, 0]),
            ("ab.\ncd#\n..e\nsame: abcde\n", &[1, 2, 7, 0]),
            ("aab.\naab.\ncd..\nefgh\nsame: cdefgh\n", &[7]),
        ];
        for (puzzle, bucket_counts) in cases {
            for &buckets in bucket_counts {
                let spec = JobSpec::new(BlocksSpec {
                    puzzle: puzzle.into(),
                    plan: BlocksPlanName::Frontier,
                    buckets,
                });
                let job = submit(&mut client, &spec, "").await;
                let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
                assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
                let direct = valid(&spec)
                    .compute_direct(2, &tally_kinds::Control::new())
                    .unwrap();
                assert_eq!(
                    done.answer, direct.line,
                    "{buckets} buckets, {workers} workers"
                );
                let result = client
                    .result(proto::ResultRequest {
                        job_id: job.id.clone(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let details: serde_json::Value =
                    serde_json::from_str(&result.details_json).unwrap();
                assert_eq!(details["layers"], direct.details["layers"]);
                assert_eq!(details["largest_layer"], direct.details["largest_layer"]);
                let layers = details["layers"].as_u64().unwrap();
                let noted: Vec<String> = events(&mut client, &job.id)
                    .await
                    .into_iter()
                    .filter(|e| e.kind == "stage")
                    .map(|e| e.message)
                    .collect();
                if buckets > 1 {
                    // A stage per layer and an empty one; each layer split.
                    assert_eq!(u64::from(done.stages_total), layers + 1);
                    assert!(done.shards_total > layers + 1, "layers were split");
                    assert_eq!(noted.len() as u64, layers, "{noted:?}");
                    assert!(noted.iter().all(|n| n.starts_with("layer ")), "{noted:?}");
                } else {
                    // Layers that fit one shard run in one stage, without barriers.
                    assert!(u64::from(done.stages_total) < layers, "{noted:?}");
                }
            }
        }
        running.stop().await;
    }
    coordinator.shutdown().await;
}

/// A staged job's stage data goes with it: after a hex cell-step job that
/// moved tens of megabytes of frontier vectors through the store, the data
/// directory holds no value file and no sled blob file, and stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_staged_job_leaves_no_stage_data_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(Some(dir.path())).await;
    let url = coordinator.url();
    let workers = Workers::start(&url, 2, 1);
    let mut client = jobs_client(&url).await;
    let spec = hex_cell_step(9, 2);
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    workers.stop().await;
    coordinator.shutdown().await;
    let files_in = |sub: &str| {
        std::fs::read_dir(dir.path().join(sub))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!(files_in("values"), 0, "value files left behind");
    assert_eq!(files_in("blobs"), 0, "sled blob files left behind");
    let size: u64 = walk_sizes(dir.path());
    eprintln!("data directory after the job: {size} bytes");
    assert!(size < 8 << 20, "the store holds {size} bytes after the job");
}

fn walk_sizes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                walk_sizes(&e.path())
            } else {
                m.len()
            }
        })
        .sum()
}

/// A lease shorter than the default heartbeat interval (1 s) is renewed in
/// time: heartbeats come three times per lease. Each shard holds its lease
/// 1.5 s, two leases' worth; with beats once a second most attempts lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_shorter_than_a_second_are_renewed_in_time() {
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start_with(&coordinator.url(), 1, 8, |c| {
        c.shard_delay = Duration::from_millis(1_500);
    });
    let mut client = jobs_client(&coordinator.url()).await;
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 300,
        digits: 6,
    });
    spec.options.lease_ttl_ms = 800;
    // Spare attempts absorb a stall of the machine longer than a lease.
    spec.options.max_attempts = 10;
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    // Beats once a second let most attempts lapse; three per lease, at most
    // one in a stall of the machine.
    let expired = events(&mut client, &job.id)
        .await
        .iter()
        .filter(|e| e.kind == "expired")
        .count() as u64;
    assert!(expired * 4 <= done.shards_total, "{expired} leases lapsed");
    workers.stop().await;
    coordinator.shutdown().await;
}

/// `List` pages in submission order and filters by state and kind; a bad
/// request is refused, naming the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_listed_a_page_at_a_time_and_filtered() {
    use tally_kinds::queens::QueensSpec;
    let coordinator = start_coordinator(None).await;
    let mut client = jobs_client(&coordinator.url()).await;
    // No workers: the jobs stay queued; every third is a queens job, every
    // fourth cancelled.
    let mut ids = Vec::new();
    for i in 0..25u64 {
        let spec = if i % 3 == 0 {
            JobSpec::new(QueensSpec { n: 6 })
        } else {
            JobSpec::new(KaylesSpec {
                pins: 10 + 2 * i,
                digits: 3,
            })
        };
        let job = submit(&mut client, &spec, "").await;
        if i % 4 == 0 {
            client
                .cancel(proto::CancelRequest {
                    job_id: job.id.clone(),
                })
                .await
                .unwrap();
        }
        ids.push(job.id);
    }
    let list = |limit: u32, page_token: String, states: Vec<JobState>, kind: &str| {
        proto::ListJobsRequest {
            limit,
            page_token,
            states: states.into_iter().map(|s| s as i32).collect(),
            kind: kind.into(),
            owner: String::new(),
        }
    };
    // Pages of 10 chain through every job once, in submission order.
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = client
            .list(list(10, token, vec![], ""))
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(page.jobs.len() <= 10);
        seen.extend(page.jobs.into_iter().map(|j| j.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ids);
    // Filters, alone and together.
    let ids_where = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
        (0..25)
            .filter(|&i| keep(i))
            .map(|i| ids[i].clone())
            .collect()
    };
    let page_of = |r: proto::ListJobsResponse| -> Vec<String> {
        assert!(r.next_page_token.is_empty());
        r.jobs.into_iter().map(|j| j.id).collect()
    };
    let cancelled = client
        .list(list(0, String::new(), vec![JobState::Cancelled], ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page_of(cancelled), ids_where(&|i| i % 4 == 0));
    let queens = client
        .list(list(0, String::new(), vec![], "queens"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page_of(queens), ids_where(&|i| i % 3 == 0));
    let queued_kayles = client
        .list(list(0, String::new(), vec![JobState::Queued], "kayles"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        page_of(queued_kayles),
        ids_where(&|i| i % 3 != 0 && i % 4 != 0)
    );
    // Bad requests.
    for (request, needle) in [
        (
            list(1001, String::new(), vec![], ""),
            "limit must be at most 1000",
        ),
        (list(0, "page 2".into(), vec![], ""), "malformed page token"),
        (list(0, String::new(), vec![], "chess"), "unknown job kind"),
    ] {
        let status = client.list(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(needle), "{}", status.message());
    }
    let mut bad_state = list(0, String::new(), vec![], "");
    bad_state.states = vec![99];
    let status = client.list(bad_state).await.unwrap_err();
    assert!(
        status.message().contains("unknown job state 99"),
        "{}",
        status.message()
    );
    coordinator.shutdown().await;
}

/// `--retain-finished`: a finished job, its stage data and events go after
/// the retention time; an unfinished one stays; the id is not reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finished_jobs_are_deleted_after_their_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = tally_coordinator::CoordinatorConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        Some(dir.path().join("data")),
    );
    config.retain_finished = Some(Duration::from_millis(300));
    let coordinator = tally_coordinator::start(config).await.unwrap();
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 1, 2);
    // A staged job: its stage outputs were in the store while it ran.
    let spec = hex_cell_step(5, 2);
    let job = submit(&mut client, &spec, "").await;
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    workers.stop().await;
    let waiting = submit(
        &mut client,
        &JobSpec::new(KaylesSpec {
            pins: 10,
            digits: 3,
        }),
        "",
    )
    .await;
    // Gone within a bound that holds under load (retention runs every second).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let gone = loop {
        match client
            .result(proto::ResultRequest {
                job_id: job.id.clone(),
            })
            .await
        {
            Err(status) => break status,
            Ok(_) => {
                assert!(std::time::Instant::now() < deadline, "never deleted");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(gone.code(), tonic::Code::NotFound);
    assert!(gone.message().contains("was deleted"), "{}", gone.message());
    let listed = client
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    let ids: Vec<&str> = listed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, [waiting.id.as_str()], "the queued job stays");
    let next = submit(
        &mut client,
        &JobSpec::new(KaylesSpec {
            pins: 10,
            digits: 3,
        }),
        "",
    )
    .await;
    assert!(next.id != job.id && next.id != waiting.id);
    coordinator.shutdown().await;
}

/// A batched result of `lease` as a worker computes it.
fn batched_result(spec: &JobSpec, lease: &proto::ShardLease) -> proto::BatchedReport {
    let task = tally_kinds::values::EncodedTask::from_bytes(&lease.task).unwrap();
    let outcome = valid(spec)
        .execute_once(
            &task,
            &tally_kinds::cache::KernelCache::new(),
            &Control::new(),
        )
        .unwrap();
    proto::BatchedReport {
        lease_id: lease.lease_id.clone(),
        output: outcome.output.into_bytes().unwrap().into(),
        output_blob: None,
        ending: Some(proto::batched_report::Ending::Result(proto::ReportResult {
            compute_us: 0,
            partial: outcome.partial.to_bytes(),
            work_done: lease.work_total,
        })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_report_of_a_batch_is_accepted_or_refused_on_its_own() {
    use tally_kinds::synthetic::SyntheticSpec;
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let spec = JobSpec::new(SyntheticSpec {
        shards: 6,
        terms_per_shard: 1_000,
    });
    let job = submit(&mut client, &spec, "").await;
    let mut w = workers_client(&url).await;
    let session = register(&mut w, "batcher").await;
    let mut leases = w
        .lease(proto::LeaseRequest {
            lease_ahead: 0,
            worker_id: "batcher".into(),
            free_slots: 6,
            wait_ms: 5_000,
            session: session.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .leases;
    leases.sort_by_key(|l| l.index);
    assert_eq!(leases.len(), 6);
    let batch = |reports: Vec<proto::BatchedReport>, session: &str| proto::ReportBatchRequest {
        worker_id: "batcher".into(),
        session: session.into(),
        reports,
    };

    // A wrong session refuses the whole call and changes nothing.
    let before = events(&mut client, &job.id).await;
    let status = w
        .report_batch(batch(
            vec![batched_result(&spec, &leases[0])],
            "not-the-session",
        ))
        .await
        .expect_err("a wrong session is refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert_eq!(events(&mut client, &job.id).await, before);

    let mut stale = batched_result(&spec, &leases[2]);
    stale.lease_id = format!("{}/{}/{}/{}", job.id, leases[2].stage, leases[2].index, 7);
    let mut unreadable = batched_result(&spec, &leases[2]);
    unreadable.lease_id = "no lease".into();
    let mut unfinished = batched_result(&spec, &leases[4]);
    unfinished.ending = None;
    // A result of another shard's task: the kind's check refuses it.
    let mut wrong = batched_result(&spec, &leases[5]);
    wrong.lease_id = leases[3].lease_id.clone();
    let mut short = batched_result(&spec, &leases[3]);
    if let Some(proto::batched_report::Ending::Result(r)) = &mut short.ending {
        r.partial = br#"{"synthetic-sum": {"terms": 3, "sum": 0}}"#.to_vec();
    }
    let reports = vec![
        batched_result(&spec, &leases[0]),
        batched_result(&spec, &leases[1]),
        stale,
        unreadable,
        unfinished,
        batched_result(&spec, &leases[0]),
        short,
    ];
    let verdicts = w
        .report_batch(batch(reports, &session))
        .await
        .unwrap()
        .into_inner()
        .verdicts;
    assert_eq!(verdicts.len(), 7);
    let code = |i: usize| tonic::Code::from(verdicts[i].code);
    assert!(verdicts[0].accepted && verdicts[1].accepted, "{verdicts:?}");
    assert_eq!((code(0), code(1)), (tonic::Code::Ok, tonic::Code::Ok));
    assert_eq!(
        code(2),
        tonic::Code::FailedPrecondition,
        "{:?}",
        verdicts[2]
    );
    assert_eq!(code(3), tonic::Code::InvalidArgument, "{:?}", verdicts[3]);
    assert_eq!(code(4), tonic::Code::InvalidArgument, "{:?}", verdicts[4]);
    // The same result twice: the second changes nothing.
    assert!(!verdicts[5].accepted, "{:?}", verdicts[5]);
    assert_eq!(code(6), tonic::Code::InvalidArgument, "{:?}", verdicts[6]);
    assert!(
        verdicts[6].message.contains("3 of 1000"),
        "{:?}",
        verdicts[6]
    );
    let accepted: Vec<u32> = events(&mut client, &job.id)
        .await
        .iter()
        .filter(|e| e.kind == "accepted")
        .map(|e| e.shard)
        .collect();
    assert_eq!(accepted, [0, 1]);
    assert_eq!(get_job(&mut client, &job.id).await.shards_done, 2);

    // The rest in one batch: the job finishes with the closed form's answer.
    let rest = leases[2..]
        .iter()
        .map(|l| batched_result(&spec, l))
        .collect();
    let verdicts = w
        .report_batch(batch(rest, &session))
        .await
        .unwrap()
        .into_inner()
        .verdicts;
    assert!(
        verdicts.iter().all(|v| v.accepted && v.code == 0),
        "{verdicts:?}"
    );
    assert!(
        verdicts.last().unwrap().stop,
        "the last result finishes the job"
    );
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(60)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    let plain: u128 = (0..6_000u128).map(|i| i * i).sum::<u128>() % ((1 << 61) - 1);
    assert_eq!(done.answer, plain.to_string());

    // Too many reports in one call: refused whole.
    let many = vec![batched_result(&spec, &leases[0]); tally_wire::limits::MAX_BATCH_REPORTS + 1];
    let status = w.report_batch(batch(many, &session)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    coordinator.shutdown().await;
}
