//! Replicated shards: each replica from a different worker, and agreement.

use std::sync::Arc;

use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto;

use crate::store::{MemoryStore, Store};

use super::tests::{direct_answer, registered, report_from as report, submit};
use super::{Scheduler, SchedulerConfig};

fn replicated(replicas: u32, max_attempts: u32) -> JobSpec {
    let mut spec = JobSpec::new(KaylesSpec {
        pins: 30,
        digits: 9,
    });
    spec.options.replicas = replicas;
    spec.options.max_attempts = max_attempts;
    spec
}

/// Leases everything `worker` may take and reports it.
fn serve(s: &mut Scheduler, worker: &str, corrupt: bool, now: u64) -> usize {
    let grants = s.lease(worker, 100, now).unwrap();
    for g in &grants {
        s.report(report(worker, g, corrupt), now).unwrap();
    }
    grants.len()
}

#[test]
fn each_replica_comes_from_a_different_worker_and_they_must_agree() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = registered(Scheduler::load(store.clone(), SchedulerConfig::default(), 0).unwrap());
    let id = submit(&mut s, &replicated(2, 3));
    let shards = serve(&mut s, "a", false, 1);
    assert!(shards > 0);
    // Worker a has computed every shard once: it may not take them again.
    assert_eq!(s.lease("a", 100, 2).unwrap().len(), 0);
    let job = s.job(&id, 2).unwrap();
    assert_eq!(job.shards_done, 0, "one replica does not finish a shard");
    // The first replicas survive a restart.
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 3).unwrap());
    assert_eq!(s.lease("a", 100, 3).unwrap().len(), 0);
    assert_eq!(serve(&mut s, "b", false, 4), shards);
    let job = s.job(&id, 5).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);
    let direct = direct_answer(&replicated(1, 3));
    assert_eq!(job.answer, direct.line);
    let events = s.events(&id, 0).unwrap();
    let kinds = |k: &str| events.iter().filter(|e| e.kind == k).count();
    assert_eq!(kinds("replica"), shards);
    assert_eq!(kinds("accepted"), shards);
    for e in events.iter().filter(|e| e.kind == "accepted") {
        assert_eq!(e.worker, "b");
    }
}

#[test]
fn a_disagreement_discards_both_results_and_fails_the_job_after_max_attempts() {
    let mut s = registered(
        Scheduler::load(Arc::new(MemoryStore::new()), SchedulerConfig::default(), 0).unwrap(),
    );
    let id = submit(&mut s, &replicated(2, 2));
    let mut now = 1;
    // An honest worker and a faulty one: every shard disagrees.
    for round in 0..2 {
        now += 60_000; // past any backoff
        let honest = serve(&mut s, "honest", false, now);
        now += 60_000;
        let faulty = serve(&mut s, "faulty", true, now);
        assert!(honest > 0 && faulty > 0, "round {round}");
        let job = s.job(&id, now).unwrap();
        assert_eq!(job.shards_done, 0, "no disagreeing shard is accepted");
        if round == 0 {
            assert_eq!(job.state, proto::JobState::Running as i32);
        }
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state, proto::JobState::Failed as i32);
    assert!(job.error.contains("replicas disagree"), "{}", job.error);
    assert!(job.answer.is_empty());
    let events = s.events(&id, 0).unwrap();
    assert!(events.iter().all(|e| e.kind != "accepted"));
}

/// With one worker and two replicas per shard, the job cannot go on: it says
/// so, once, instead of waiting without a word.
#[test]
fn a_job_waiting_for_another_worker_says_so_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 0).unwrap());
    let id = submit(&mut s, &replicated(2, 3));
    assert!(serve(&mut s, "a", false, 1) > 0);
    for now in 2..5 {
        assert!(s.lease("a", 100, now).unwrap().is_empty());
    }
    let waiting: Vec<_> = s
        .events(&id, 0)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "waiting")
        .collect();
    assert_eq!(waiting.len(), 1, "said once");
    assert!(
        waiting[0].message.contains("different worker"),
        "{:?}",
        waiting[0]
    );
    assert_eq!(waiting[0].worker, "a");
    // Another worker lets it go on.
    assert!(serve(&mut s, "b", false, 6) > 0);
    assert_eq!(
        s.job(&id, 7).unwrap().state,
        proto::JobState::Succeeded as i32
    );
}

/// A worker may send a result again when the answer to the first was lost
/// (its call's deadline passed): the one replica it made is counted once,
/// and the shard still waits for another worker's.
#[test]
fn a_replica_sent_again_by_its_worker_is_counted_once() {
    let mut s = registered(
        Scheduler::load(Arc::new(MemoryStore::new()), SchedulerConfig::default(), 0).unwrap(),
    );
    let id = submit(&mut s, &replicated(2, 3));
    let grants = s.lease("a", 100, 1).unwrap();
    assert!(!grants.is_empty());
    for g in &grants {
        let first = s.report(report("a", g, false), 2).unwrap();
        assert!(first.accepted, "kept as a replica");
        let again = s.report(report("a", g, false), 3).unwrap();
        assert!(!again.accepted, "the same replica again is not kept");
    }
    let job = s.job(&id, 4).unwrap();
    assert_eq!(job.shards_done, 0, "no shard done on one worker's replicas");
    assert_eq!(s.lease("a", 100, 5).unwrap().len(), 0);
    assert_eq!(serve(&mut s, "b", false, 6), grants.len());
    let job = s.job(&id, 7).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);
    let events = s.events(&id, 0).unwrap();
    let replicas = events.iter().filter(|e| e.kind == "replica").count();
    assert_eq!(replicas, grants.len(), "one replica event a shard");
}
