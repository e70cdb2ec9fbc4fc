//! The coordinator as KEDA's external scaler, called through a client of
//! KEDA's contract: the slots the jobs' runnable work could use over their
//! lives, a job's `max_slots` in the metric, and the scaler's token.

use std::collections::HashMap;
use std::time::Duration;

use tally_kinds::kayles::KaylesSpec;
use tally_kinds::queens::QueensSpec;
use tally_kinds::spec::JobSpec;
use tally_kinds::synthetic::SyntheticSpec;
use tally_wire::proto::externalscaler::external_scaler_client::ExternalScalerClient;
use tally_wire::proto::externalscaler::{GetMetricsRequest, ScaledObjectRef};
use tally_wire::transport::Tokens;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::Channel;

use crate::support::*;

fn scaled(metadata: &[(&str, &str)]) -> ScaledObjectRef {
    ScaledObjectRef {
        name: "tally-worker".into(),
        namespace: "tally".into(),
        scaler_metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
    }
}

async fn scaler(url: &str) -> ExternalScalerClient<Channel> {
    ExternalScalerClient::connect(url.to_string())
        .await
        .expect("connects")
}

/// The metric and whether the scaler is active, with `metadata`.
async fn demand(
    client: &mut ExternalScalerClient<Channel>,
    metadata: &[(&str, &str)],
) -> (i64, bool) {
    let metrics = client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(scaled(metadata)),
            metric_name: "tally-slots".into(),
        })
        .await
        .expect("metrics")
        .into_inner();
    let active = client
        .is_active(scaled(metadata))
        .await
        .expect("is active")
        .into_inner()
        .result;
    (metrics.metric_values[0].metric_value, active)
}

/// The next answer of an `IsActive` stream, within a bound.
async fn next_active(
    stream: &mut tonic::Streaming<tally_wire::proto::externalscaler::IsActiveResponse>,
) -> bool {
    tokio::time::timeout(Duration::from_secs(60), stream.next())
        .await
        .expect("the stream answers")
        .expect("the stream goes on")
        .expect("an answer")
        .result
}

/// Over the jobs' lives (none, queued, one shard held, all finished) the
/// metric is the shards of their current stages not yet done, each job at
/// most its `max_slots`, and the scaler is active while it is not zero; the
/// push stream says so as it changes; the metric's spec takes the trigger's
/// slots a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaler_reports_the_slots_the_jobs_could_use_over_their_lives() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = scaler(&url).await;
    let mut jobs = jobs_client(&url).await;
    assert_eq!(demand(&mut client, &[]).await, (0, false));
    let mut stream = client
        .stream_is_active(scaled(&[]))
        .await
        .expect("a stream")
        .into_inner();
    assert!(!next_active(&mut stream).await);

    // Jobs of three kinds, no worker yet: all queued.
    let synthetic = JobSpec::new(SyntheticSpec {
        shards: 40,
        terms_per_shard: 1,
    });
    let mut capped = JobSpec::new(QueensSpec { n: 10 });
    capped.options.max_slots = 3;
    let kayles = JobSpec::new(KaylesSpec {
        pins: 30,
        digits: 9,
    });
    let mut submitted = Vec::new();
    for (i, spec) in [&synthetic, &capped, &kayles].into_iter().enumerate() {
        submitted.push(submit(&mut jobs, spec, &format!("scaled {i}")).await);
    }
    let queens_shards = get_job(&mut jobs, &submitted[1].id).await.shards_total;
    let kayles_shards = get_job(&mut jobs, &submitted[2].id).await.shards_total;
    assert!(queens_shards > 3, "{queens_shards}");
    let all = 40 + 3 + kayles_shards as i64;
    assert_eq!(demand(&mut client, &[]).await, (all, true));
    assert!(next_active(&mut stream).await);

    // A shard held by a worker still takes a slot.
    let (lease, session) = hold_a_shard(&url, "holder").await;
    assert_eq!(demand(&mut client, &[]).await, (all, true));

    // The spec: the metric over the trigger's slots a worker.
    for (slots, target) in [(None, 1), (Some("4"), 4)] {
        let metadata: Vec<(&str, &str)> =
            slots.map(|s| ("slotsPerWorker", s)).into_iter().collect();
        let spec = client
            .get_metric_spec(scaled(&metadata))
            .await
            .expect("a spec")
            .into_inner();
        assert_eq!(spec.metric_specs[0].metric_name, "tally-slots");
        assert_eq!(spec.metric_specs[0].target_size, target);
    }
    for bad in ["0", "-2", "two", "70000"] {
        let err = client
            .get_metric_spec(scaled(&[("slotsPerWorker", bad)]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad}: {err:?}");
        assert!(err.message().contains("slotsPerWorker"), "{err:?}");
    }
    let err = client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(scaled(&[])),
            metric_name: "cpu".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    // Workers run everything (the held shard's lease expires and goes to
    // them): the metric falls to zero and the stream says so.
    let _ = (lease, session);
    let workers = Workers::start(&url, 2, 2);
    for job in &submitted {
        let done = wait_finished(&mut jobs, &job.id, Duration::from_secs(300)).await;
        assert_eq!(
            state(&done),
            tally_wire::proto::JobState::Succeeded,
            "{done:?}"
        );
    }
    assert_eq!(demand(&mut client, &[]).await, (0, false));
    assert!(!next_active(&mut stream).await);
    workers.stop().await;
    coordinator.shutdown().await;
}

/// With tokens, the scaler takes its own token (or, without one, the client
/// token) in the trigger's `token` metadata or as a bearer token, and
/// refuses a caller without it, or with the worker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaler_takes_its_token_in_the_trigger_metadata() {
    for scaler_token in [Some("scaler-secret"), None] {
        let mut config =
            tally_coordinator::CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
        config.tokens = Tokens {
            client: Some("client-secret".into()),
            worker: Some("worker-secret".into()),
            scaler: scaler_token.map(str::to_string),
        };
        let coordinator = tally_coordinator::start(config).await.expect("starts");
        let mut client = scaler(&coordinator.url()).await;
        let good = scaler_token.unwrap_or("client-secret");
        assert_eq!(demand(&mut client, &[("token", good)]).await, (0, false));
        let mut refused = vec![None, Some("worker-secret"), Some("guess")];
        if scaler_token.is_some() {
            refused.push(Some("client-secret"));
        }
        for token in refused {
            let metadata: Vec<(&str, &str)> = token.map(|t| ("token", t)).into_iter().collect();
            let err = client.is_active(scaled(&metadata)).await.unwrap_err();
            assert_eq!(err.code(), Code::Unauthenticated, "{token:?}: {err:?}");
        }
        // As a bearer token too.
        let mut request = tonic::Request::new(scaled(&[]));
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {good}").parse().unwrap());
        assert!(!client.is_active(request).await.unwrap().into_inner().result);
        coordinator.shutdown().await;
    }
}

/// A worker process the scenario's driver started, and when.
struct Scaled {
    child: ChildGuard,
    started: std::time::Instant,
}

/// The autoscaling scenario: a driver plays the HPA every second from the
/// scaler's metric (workers of one slot, at most three), starting worker
/// processes and SIGTERMing the newest when the metric falls, while jobs of
/// several kinds arrive in two waves with a pause between them. Every answer
/// is the direct one, no shard is accepted twice, every stopped worker ends
/// within its drain bound, the workers go to zero between the waves, and the
/// second wave's first shard is leased within two polls (and a process's
/// start) of its submission.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_follow_the_scalers_metric_while_jobs_come_and_go() {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    use tally_kinds::hex::{HexGraphPlace, HexPlan, HexSpec};

    const POLL: Duration = Duration::from_secs(1);
    const MOST: usize = 3;
    const DRAIN_SECONDS: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut jobs = jobs_client(&url).await;

    // The driver: every poll, the workers the metric asks for.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::<(Instant, String)>::new()));
    let stopped_within = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let driver = {
        let (url, stop, log, stopped_within) = (
            url.clone(),
            stop.clone(),
            log.clone(),
            stopped_within.clone(),
        );
        let worker_log = dir.path().join("workers.log");
        tokio::spawn(async move {
            let mut client = scaler(&url).await;
            let mut running: Vec<Scaled> = Vec::new();
            let mut stopping: Vec<(ChildGuard, Instant)> = Vec::new();
            let mut next_id = 0;
            loop {
                let (slots, _) = demand(&mut client, &[]).await;
                let desired = (slots.max(0) as usize).min(MOST);
                if stop.load(std::sync::atomic::Ordering::Relaxed)
                    && desired == 0
                    && running.is_empty()
                {
                    break;
                }
                while running.len() < desired {
                    next_id += 1;
                    let id = format!("scaled-{next_id}");
                    let drain = DRAIN_SECONDS.to_string();
                    let child =
                        spawn_worker(&url, &id, 1, &["--drain-seconds", &drain], &worker_log);
                    log.lock()
                        .unwrap()
                        .push((Instant::now(), format!("out {id}")));
                    running.push(Scaled {
                        child,
                        started: Instant::now(),
                    });
                }
                if running.len() > desired {
                    let newest = running.pop().unwrap();
                    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
                    unsafe {
                        libc::kill(newest.child.pid() as i32, libc::SIGTERM);
                    }
                    log.lock().unwrap().push((
                        Instant::now(),
                        format!("in after {:?}", newest.started.elapsed()),
                    ));
                    stopping.push((newest.child, Instant::now()));
                }
                stopping.retain_mut(|(child, since)| match child.0.try_wait().unwrap() {
                    Some(_) => {
                        stopped_within.lock().unwrap().push(since.elapsed());
                        false
                    }
                    None => true,
                });
                tokio::time::sleep(POLL).await;
            }
            for (mut child, since) in stopping {
                let _ = tokio::task::spawn_blocking(move || child.0.wait()).await;
                stopped_within.lock().unwrap().push(since.elapsed());
            }
        })
    };

    let hex = |side: u32| {
        JobSpec::new(HexSpec {
            side,
            modulus: 1_000_000_007,
            plan: HexPlan::Points,
            shards_per_step: 0,
            exact: false,
            points_per_shard: 1,
            graph: HexGraphPlace::Worker,
            graph_parts: 0,
        })
    };
    let waves = [
        vec![
            JobSpec::new(SyntheticSpec {
                shards: 24,
                terms_per_shard: 200_000,
            }),
            hex(6),
            JobSpec::new(QueensSpec { n: 9 }),
        ],
        vec![
            JobSpec::new(KaylesSpec {
                pins: 2_000,
                digits: 9,
            }),
            JobSpec::new(SyntheticSpec {
                shards: 12,
                terms_per_shard: 200_000,
            }),
        ],
    ];
    let mut first_lease_after = Vec::new();
    for (w, wave) in waves.iter().enumerate() {
        if w > 0 {
            // The workers go to zero with the work.
            let idle = Instant::now() + Duration::from_secs(120);
            while !stopped_within.lock().unwrap().len().eq(&log
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, e)| e.starts_with("out"))
                .count())
            {
                assert!(
                    Instant::now() < idle,
                    "the workers did not go to zero: {:?}",
                    log.lock().unwrap()
                );
                tokio::time::sleep(POLL).await;
            }
        }
        let submitted_at = now_ms();
        let mut ids = Vec::new();
        for (i, spec) in wave.iter().enumerate() {
            ids.push(
                submit(&mut jobs, spec, &format!("wave {w} job {i}"))
                    .await
                    .id,
            );
        }
        for (spec, id) in wave.iter().zip(&ids) {
            let done = wait_finished(&mut jobs, id, Duration::from_secs(300)).await;
            assert_eq!(
                state(&done),
                tally_wire::proto::JobState::Succeeded,
                "{done:?}"
            );
            assert_eq!(done.answer, direct_answer(spec), "{}", done.description);
            let events = events(&mut jobs, id).await;
            let mut accepted: Vec<(u32, u32)> = events
                .iter()
                .filter(|e| e.kind == "accepted")
                .map(|e| (e.stage, e.shard))
                .collect();
            let all = accepted.len();
            accepted.sort_unstable();
            accepted.dedup();
            assert_eq!(
                accepted.len(),
                all,
                "a shard accepted twice: {}",
                done.description
            );
        }
        let first = events(&mut jobs, &ids[0]).await;
        let leased = first.iter().find(|e| e.kind == "leased").map(|e| e.time_ms);
        first_lease_after.push(leased.unwrap().saturating_sub(submitted_at));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(120), driver)
        .await
        .expect("the driver scales to zero and stops")
        .unwrap();

    let events = log.lock().unwrap().clone();
    let outs = events.iter().filter(|(_, e)| e.starts_with("out")).count();
    let ins = events.iter().filter(|(_, e)| e.starts_with("in")).count();
    let stopped = stopped_within.lock().unwrap().clone();
    eprintln!(
        "scale-outs {outs}, scale-ins {ins}; workers stopped within {stopped:?}; first lease of \
         each wave {first_lease_after:?} ms after its submission"
    );
    assert!(outs >= 2 && ins == outs, "{events:?}");
    let bound =
        Duration::from_secs(DRAIN_SECONDS) + tally_worker::REPORT_GRACE + Duration::from_secs(10);
    assert!(stopped.iter().all(|d| *d < bound), "{stopped:?}");
    // The second wave came to no worker: two polls, and a process's start
    // on a loaded machine.
    let started_within = 2 * POLL.as_millis() as u64 + 15_000;
    assert!(
        first_lease_after[1] < started_within,
        "{first_lease_after:?}"
    );
    coordinator.shutdown().await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
