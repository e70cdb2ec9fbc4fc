//! What the job view and the job errors say: a failed shard named by stage
//! and shard in words, when a job was deleted, the progress of a plan that
//! finds its stages as it goes, and why a job waits.

use std::sync::Arc;

use serde_json::json;
use tally_kernels::sliders::SliderParams;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::sliders::{SlidersPlanName, SlidersSpec};
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::values::JobPlan;
use tally_kinds::wasm::WasmSpec;
use tally_wire::proto;

use crate::store::MemoryStore;

use super::tests::{registered, staged_report, submit};
use super::{Registration, Report, ReportedFailure, Scheduler, SchedulerConfig};

/// A scheduler that knows no worker.
fn alone() -> Scheduler {
    Scheduler::load(Arc::new(MemoryStore::new()), SchedulerConfig::default(), 0).unwrap()
}

fn worker(slots: u32, capabilities: &[&str]) -> Registration {
    Registration {
        hostname: "test-host".into(),
        slots,
        version: "test".into(),
        memory_budget: 0,
        capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
        incarnation: String::new(),
        oom_kills: 0,
    }
}

/// A job of one shard.
fn one_shard() -> JobSpec {
    JobSpec::new(KaylesSpec { pins: 0, digits: 9 })
}

fn failure(message: &str) -> ReportedFailure {
    ReportedFailure {
        message: message.into(),
        permanent: false,
        handed_back: false,
        no_room: false,
    }
}

/// A sliders job of the frontier plan: a stage a level, found as it goes.
fn frontier() -> JobSpec {
    JobSpec::new(SlidersSpec {
        board: SliderParams::new(3, 3, "WRRRRBBBB", "WBBBBRRRR"),
        plan: SlidersPlanName::Frontier,
        buckets: 2,
        ..Default::default()
    })
}

#[test]
fn a_failed_job_names_its_stage_and_shard_in_words() {
    let mut s = registered(alone());
    let spec = one_shard();
    let id = submit(&mut s, &spec);
    let mut now = 0;
    for _ in 0..spec.options.max_attempts {
        now += 100_000;
        let grant = s.lease("w", 1, now).unwrap().remove(0);
        s.report(
            Report::failure("w", grant.lease, failure("disk on fire")),
            now,
        )
        .unwrap();
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state(), proto::JobState::Failed);
    assert_eq!(
        job.error,
        "stage 1, shard 0 failed after 3 attempt(s): disk on fire"
    );
}

#[test]
fn asking_for_a_deleted_job_says_when_it_was_deleted_as_a_date() {
    let mut s = registered(alone());
    let id = submit(&mut s, &one_shard());
    s.delete(&id, true, 1_700_000_000_000).unwrap();
    let gone = s.job(&id, 1_700_000_000_001).unwrap_err().to_string();
    assert!(
        gone.contains("was deleted at 2023-11-14T22:13:20Z;"),
        "{gone}"
    );
    assert!(!gone.contains("epoch"), "{gone}");
}

/// A plan that finds its stages as it goes says so until it is finished,
/// and claims no time left: the work of the stages not found yet is unknown.
#[test]
fn a_frontier_job_claims_no_fraction_or_eta_it_does_not_know() {
    let mut s = registered(alone());
    let spec = frontier();
    let id = submit(&mut s, &spec);
    let mut now = 1;
    let mut seen_mid_way = 0;
    while !s.job(&id, now).unwrap().state().is_finished() {
        for grant in s.lease("w", 100, now).unwrap() {
            let report = staged_report(&mut s, &grant);
            s.report(report, now).unwrap();
        }
        now += 1_000;
        let job = s.job(&id, now).unwrap();
        if !job.state().is_finished() {
            assert!(job.stages_unknown, "stage {}", job.stage);
            assert_eq!(job.eta_ms, 0, "stage {}: {job:?}", job.stage);
            assert!(job.work_done > 0 && job.elapsed_ms > 0);
            seen_mid_way += 1;
        }
    }
    assert!(seen_mid_way >= 3, "{seen_mid_way} views mid-way");
    let done = s.job(&id, now).unwrap();
    assert_eq!(done.state(), proto::JobState::Succeeded, "{}", done.error);
    assert!(!done.stages_unknown);
    // A plan of known stages has its fraction and its eta.
    let known = submit(
        &mut s,
        &JobSpec::new(KaylesSpec {
            pins: 30,
            digits: 9,
        }),
    );
    let grants = s.lease("w", 100, now).unwrap();
    let report = staged_report(&mut s, &grants[0]);
    s.report(report, now + 500).unwrap();
    let job = s.job(&known, now + 1_000).unwrap();
    assert!(!job.stages_unknown);
    assert!(job.eta_ms > 0, "{job:?}");
}

/// A wasm job of two shards, planned as the coordinator plans it (without
/// a sandbox here: its one prime is given).
fn wasm_job(s: &mut Scheduler) -> String {
    let module: Arc<[u8]> = Arc::from(&b"module bytes"[..]);
    let digest = tally_kinds::guest::sha256_hex(&module);
    let spec = ValidSpec::new(JobSpec::new(WasmSpec {
        module_sha256: digest.clone(),
        shards: 2,
        params: Vec::new(),
        modulus: 1_000_000_007,
        exact: false,
        bound_bits: 0,
        outputs: 1,
    }))
    .unwrap();
    let plan = JobPlan {
        stages_total: 1,
        facts: json!({ "primes": [1_000_000_007u64] })
            .as_object()
            .unwrap()
            .clone(),
    };
    s.submit(spec, plan, None, vec![(digest, module)], 0)
        .unwrap()
        .0
        .id
}

#[test]
fn a_waiting_job_says_why_it_waits() {
    // No worker at all, then none that runs the job's modules.
    let mut s = alone();
    let plain = submit(&mut s, &one_shard());
    assert_eq!(s.job(&plain, 1).unwrap().waiting, "no worker is connected");
    let wasm = wasm_job(&mut s);
    s.register("plain", worker(1, &[]), "session-plain".into(), 1);
    let why = s.job(&wasm, 2).unwrap().waiting;
    assert!(
        why.contains("offers wasm") && why.contains("--allow-wasm"),
        "{why}"
    );
    // A worker that could take it: nothing holds the job up.
    assert_eq!(s.job(&plain, 2).unwrap().waiting, "");
    // Its one slot busy with the other job's shard.
    s.register("wasm", worker(1, &["wasm"]), "session-wasm".into(), 2);
    assert_eq!(s.lease("wasm", 1, 3).unwrap().len(), 1);
    let why = s.job(&wasm, 4).unwrap().waiting;
    assert!(why.starts_with("every slot is busy"), "{why}");

    // Shards backing off after a failed attempt, until when.
    let mut s = registered(alone());
    let id = submit(&mut s, &one_shard());
    let grant = s.lease("w", 1, 1_000).unwrap().remove(0);
    s.report(Report::failure("w", grant.lease, failure("flaky")), 1_000)
        .unwrap();
    let why = s.job(&id, 1_100).unwrap().waiting;
    assert_eq!(
        why,
        "its shards back off after failed attempts until 1970-01-01T00:00:01Z"
    );
    assert_eq!(s.job(&id, 1_300).unwrap().waiting, "");

    // Replicas that must come from a worker other than the only one.
    let mut s = alone();
    s.register("w", worker(4, &[]), "session-w".into(), 0);
    let mut spec = one_shard();
    spec.options.replicas = 2;
    let id = submit(&mut s, &spec);
    let grant = s.lease("w", 1, 1).unwrap().remove(0);
    let report = staged_report(&mut s, &grant);
    s.report(report, 2).unwrap();
    let why = s.job(&id, 3).unwrap().waiting;
    assert!(why.contains("2 replicas"), "{why}");

    // A stage barrier: the next level waits for the running shard while
    // the worker has free slots.
    let mut s = registered(alone());
    let id = submit(&mut s, &frontier());
    let leased = s.lease("w", 100, 1).unwrap();
    assert_eq!(leased.len(), 1, "the first level is one shard");
    let why = s.job(&id, 2).unwrap().waiting;
    assert_eq!(
        why,
        "at the barrier of stage 1: the next stage starts when its 1 running shard(s) finish"
    );
    // A finished job waits for nothing.
    s.cancel(&id, 3).unwrap();
    assert_eq!(s.job(&id, 4).unwrap().waiting, "");
}

/// A shard whose worker had no room on disk waits, saying why, as long as
/// it takes: no attempt is counted, the job never fails for it, and it is
/// offered again once the retry time comes.
#[test]
fn a_shard_without_room_on_disk_waits_saying_why_and_its_job_does_not_fail() {
    let retry_ms = SchedulerConfig::default().no_room_retry_ms;
    let mut s = registered(alone());
    let spec = one_shard();
    let id = submit(&mut s, &spec);
    let mut now = 1;
    let no_room = ReportedFailure {
        message: "spill directory /spill: no room for 1 MiB more".into(),
        no_room: true,
        ..failure("")
    };
    for _ in 0..3 * spec.options.max_attempts {
        let grant = s.lease("w", 1, now).unwrap().remove(0);
        s.report(Report::failure("w", grant.lease, no_room.clone()), now)
            .unwrap();
        let job = s.job(&id, now + 1).unwrap();
        assert!(!job.state().is_finished(), "{job:?}");
        assert_eq!(job.shards_failed_attempts, 0);
        assert!(
            job.waiting.starts_with(
                "shard 0 found no room on disk on worker w: spill directory /spill: no room \
                 for 1 MiB more: tried again from "
            ),
            "{}",
            job.waiting
        );
        assert!(job.waiting.contains("--spill-limit"), "{}", job.waiting);
        // It waits its retry time, and not longer.
        let early = s.lease("w", 1, now + retry_ms - 1).unwrap();
        assert!(early.is_empty(), "leased before its retry time");
        now += retry_ms;
        s.heartbeat("w", &[], now);
    }
    let events = s.events(&id, 0).unwrap();
    let said = events.iter().filter(|e| e.kind == "no-room").count();
    assert_eq!(said, 1, "one event a wait, not one a retry: {events:?}");
    // Room again: the shard runs, and the job ends right.
    let grant = s.lease("w", 1, now).unwrap().remove(0);
    let report = staged_report(&mut s, &grant);
    s.report(report, now).unwrap();
    let job = s.job(&id, now + 1).unwrap();
    assert_eq!(job.state(), proto::JobState::Succeeded, "{}", job.error);

    // A failure of another sort after a wait for room is counted, and the
    // waiting line no longer speaks of room.
    let other = submit(&mut s, &one_shard());
    now += 1;
    let grant = s.lease("w", 1, now).unwrap().remove(0);
    s.report(Report::failure("w", grant.lease, no_room.clone()), now)
        .unwrap();
    now += retry_ms;
    s.heartbeat("w", &[], now);
    let grant = s.lease("w", 1, now).unwrap().remove(0);
    s.report(
        Report::failure("w", grant.lease, failure("disk on fire")),
        now,
    )
    .unwrap();
    let job = s.job(&other, now + 1).unwrap();
    assert_eq!(job.shards_failed_attempts, 1);
    assert!(!job.waiting.contains("no room"), "{}", job.waiting);
}
