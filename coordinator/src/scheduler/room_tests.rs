//! A frontier job whose next stage would not fit the stage store's disk
//! waits at its barrier, saying why, and goes on once there is room.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tally_kinds::pegs::PegsSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto;

use crate::store::{MemoryStore, Store};

use super::stage_room::{RoomSource, StageRoom};
use super::tests::{direct_answer, registered, staged_report, submit};
use super::{Scheduler, SchedulerConfig};

/// A disk whose free space the test sets.
#[derive(Default)]
struct SetRoom(AtomicU64);

impl StageRoom for SetRoom {
    fn free_bytes(&self) -> Option<u64> {
        Some(self.0.load(Ordering::SeqCst))
    }
}

const PLENTY: u64 = 1 << 50;

fn config(room: &Arc<SetRoom>) -> SchedulerConfig {
    SchedulerConfig {
        stage_room: Some(RoomSource(room.clone())),
        ..SchedulerConfig::default()
    }
}

/// Leases and reports every shard the stage has.
fn run_stage(s: &mut Scheduler, now: u64) {
    for grant in s.lease("w", 100, now).unwrap() {
        let report = staged_report(s, &grant);
        s.report(report, now).unwrap();
    }
}

fn events_of(s: &Scheduler, id: &str, kind: &str) -> usize {
    let events = s.events(id, 0).unwrap();
    events.iter().filter(|e| e.kind == kind).count()
}

#[test]
fn a_frontier_job_short_of_room_waits_at_its_barrier_and_goes_on_when_there_is_room() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let room = Arc::new(SetRoom(AtomicU64::new(PLENTY)));
    let mut s = registered(Scheduler::load(store.clone(), config(&room), 0).unwrap());
    let spec = JobSpec::new(PegsSpec {
        board: "triangle:6".into(),
        start: Some(4),
        end: None,
        prefixes: 0,
        plan: None,
        buckets: 2,
        by_final_hole: false,
        no_prune: false,
    });
    let id = submit(&mut s, &spec);
    let mut now = 1;
    for _ in 0..3 {
        run_stage(&mut s, now);
        now += 1;
    }
    let stage = s.job(&id, now).unwrap().stage;
    assert_eq!(stage, 4, "three stages ran with room");

    // The disk fills: the barrier after stage 4 holds.
    room.0.store(0, Ordering::SeqCst);
    run_stage(&mut s, now);
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.stage, 4, "the job went past a barrier without room");
    assert_eq!(job.state(), proto::JobState::Running);
    assert!(job.waiting.contains("short of room"), "{}", job.waiting);
    assert!(
        job.waiting.contains("stage 5 is guessed"),
        "{}",
        job.waiting
    );
    assert!(
        s.lease("w", 100, now).unwrap().is_empty(),
        "nothing to lease"
    );
    assert_eq!(events_of(&s, &id, "waiting"), 1);

    // Tried again without room: still waiting, said once.
    assert_eq!(s.retry_room_waits(now).unwrap(), 0);
    assert_eq!(events_of(&s, &id, "waiting"), 1);
    assert_eq!(s.job(&id, now).unwrap().stage, 4);

    // A restart asks again, and still waits.
    s = registered(Scheduler::load(store.clone(), config(&room), now).unwrap());
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.stage, 4);
    assert!(job.waiting.contains("short of room"), "{}", job.waiting);

    // Room again: the barrier passes and the job finishes with its answer.
    room.0.store(PLENTY, Ordering::SeqCst);
    assert_eq!(s.retry_room_waits(now).unwrap(), 1);
    assert_eq!(events_of(&s, &id, "room"), 1);
    assert_eq!(s.job(&id, now).unwrap().stage, 5);
    while !s.job(&id, now).unwrap().state().is_finished() {
        run_stage(&mut s, now);
        now += 1;
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state(), proto::JobState::Succeeded, "{}", job.error);
    assert_eq!(job.answer, direct_answer(&spec).line);
    // Each stage's event says how much stage data the stage before wrote.
    let written: Vec<u64> = s
        .events(&id, 0)
        .unwrap()
        .iter()
        .filter(|e| e.kind == "stage")
        .filter_map(|e| {
            let (_, bytes) = e.message.split_once("stage data written: ")?;
            bytes.strip_suffix(" bytes")?.parse().ok()
        })
        .collect();
    assert!(written.len() >= 4, "{written:?}");
    assert!(written.iter().all(|&b| b > 0), "{written:?}");
}

#[test]
fn jobs_with_known_stages_never_wait_for_room() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let room = Arc::new(SetRoom(AtomicU64::new(0)));
    let mut s = registered(Scheduler::load(store, config(&room), 0).unwrap());
    let spec = JobSpec::new(tally_kinds::kayles::KaylesSpec {
        pins: 30,
        digits: 9,
    });
    let id = submit(&mut s, &spec);
    let mut now = 1;
    while !s.job(&id, now).unwrap().state().is_finished() {
        run_stage(&mut s, now);
        now += 1;
        assert!(now < 100, "the job does not finish");
    }
    assert_eq!(s.job(&id, now).unwrap().answer, direct_answer(&spec).line);
}
