//! The scheduler's state machine, driven without clocks or networks.

use std::sync::Arc;

use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::values::EncodedTask;
use tally_wire::proto;

use crate::error::{CoordinatorError, Result};
use crate::store::{MemoryStore, Store, StoreWrapper};

use super::{
    Grant, Registration, Report, ReportedFailure, ReportedResult, Scheduler, SchedulerConfig,
};

/// A worker registration with `n` slots and the default memory budget.
fn slots(n: u32) -> Registration {
    Registration {
        hostname: "test-host".into(),
        slots: n,
        version: "test".into(),
        memory_budget: 0,
        capabilities: Vec::new(),
        incarnation: String::new(),
        oom_kills: 0,
    }
}

fn kayles(pins: u64) -> JobSpec {
    let mut spec = JobSpec::new(KaylesSpec { pins, digits: 9 });
    spec.options.lease_ttl_ms = 1_000;
    spec
}

/// The answer computed in one call, without the scheduler.
pub(super) fn direct_answer(spec: &JobSpec) -> tally_kinds::kind::Answer {
    ValidSpec::new(spec.clone())
        .unwrap()
        .compute_direct(1, &Control::new())
        .unwrap()
}

fn new_scheduler(store: Arc<dyn Store>) -> Scheduler {
    registered(Scheduler::load(store, SchedulerConfig::default(), 0).unwrap())
}

/// The scheduler with the workers the tests lease for registered.
pub(super) fn registered(mut s: Scheduler) -> Scheduler {
    for worker in ["w", "v", "a", "b", "other", "gone", "honest", "faulty"] {
        s.register(worker, slots(4), format!("session-{worker}"), 0);
    }
    s
}

pub(super) fn submit(s: &mut Scheduler, spec: &JobSpec) -> String {
    let spec = ValidSpec::new(spec.clone()).unwrap();
    let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
    s.submit(spec, plan, None, Vec::new(), 0).unwrap().0.id
}

fn result_of(grant: &Grant) -> Report {
    report_from("w", grant, false)
}

/// The worker's report for `grant`, optionally corrupted as a faulty machine would.
pub(super) fn report_from(worker: &str, grant: &Grant, corrupt: bool) -> Report {
    let task = EncodedTask::from_bytes(&grant.task).unwrap();
    let mut outcome = grant
        .spec
        .execute_once(&task, &KernelCache::new(), &Control::new())
        .unwrap();
    if corrupt {
        grant
            .spec
            .fault_injection()
            .corrupt_for_testing(&mut outcome.partial)
            .unwrap();
    }
    let result = ReportedResult {
        partial: outcome.partial.to_bytes(),
        work_done: outcome.work_done,
        compute_us: 0,
    };
    Report::result(
        worker,
        grant.lease.clone(),
        result,
        outcome.output.into_bytes().unwrap(),
    )
}

fn event_count(s: &Scheduler, job: &str) -> usize {
    s.events(job, 0).unwrap().len()
}

#[test]
fn a_job_runs_to_the_direct_answer() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = kayles(30);
    let id = submit(&mut s, &spec);
    // A first lease that fills the worker's slots still starts the job.
    let first = s.lease("w", 1, 1).unwrap();
    let running = s.job(&id, 1).unwrap();
    assert_eq!(running.state, proto::JobState::Running as i32);
    assert_eq!(running.started_ms, 1);
    let mut grants = s.lease("w", 100, 5).unwrap();
    grants.extend(first);
    assert_eq!(
        grants.len() as u32,
        tally_kernels::kayles::character_count(30)
    );
    assert_eq!(s.job(&id, 6).unwrap().started_ms, 1);
    for g in &grants {
        s.report(result_of(g), 2).unwrap();
    }
    let job = s.job(&id, 3).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);
    let direct = direct_answer(&spec);
    assert_eq!(job.answer, direct.line);
    assert_eq!(job.shards_done, grants.len() as u64);
}

/// Found by the chaos suite: a result of an attempt that expired but was not
/// yet re-issued is accepted; the shard must then leave the queue, or it is
/// leased (computed) and accepted a second time.
#[test]
fn a_late_result_of_an_expired_attempt_takes_the_shard_out_of_the_queue() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(10));
    let grants = s.lease("w", 100, 0).unwrap();
    assert_eq!(s.expire_leases(5_000).unwrap(), grants.len());
    // The holder was only slow (a SIGSTOP, a paused coordinator): its result
    // arrives before anyone else leased the shard, and is accepted.
    let late = &grants[0];
    s.report(result_of(late), 5_001).unwrap();
    let again = s.lease("other", 100, 60_000).unwrap();
    assert_eq!(again.len(), grants.len() - 1);
    assert!(again.iter().all(|g| g.lease.index != late.lease.index));
    for g in &again {
        let mut r = result_of(g);
        r.worker = "other".into();
        s.report(r, 60_001).unwrap();
    }
    let job = s.job(&id, 60_002).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);
    let accepted = s
        .events(&id, 0)
        .unwrap()
        .iter()
        .filter(|e| e.kind == "accepted")
        .count();
    assert_eq!(accepted, grants.len(), "a shard was accepted twice");
}

#[test]
fn stale_attempts_are_refused_and_change_nothing() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(10));
    let first = s.lease("a", 1, 0).unwrap().remove(0);
    assert_eq!(s.expire_leases(5_000).unwrap(), 1);
    // Backoff: not leased again before its delay.
    assert!(
        s.lease("b", 100, 5_001)
            .unwrap()
            .iter()
            .all(|g| g.lease.index != first.lease.index)
    );
    let again = s.lease("b", 100, 60_000).unwrap();
    let second = again
        .iter()
        .find(|g| g.lease.index == first.lease.index)
        .unwrap();
    assert_eq!(second.lease.attempt, first.lease.attempt + 1);
    let before = event_count(&s, &id);
    let err = s.report(result_of(&first), 60_001).unwrap_err();
    assert!(
        matches!(err, CoordinatorError::FailedPrecondition(_)),
        "{err}"
    );
    assert_eq!(event_count(&s, &id), before);
    assert_eq!(s.job(&id, 60_002).unwrap().shards_done, 0);
    // The current attempt is accepted; a second report of it is refused.
    let mut current = result_of(second);
    current.worker = "b".into();
    s.report(current.clone(), 60_003).unwrap();
    assert!(matches!(
        s.report(current, 60_004),
        Err(CoordinatorError::FailedPrecondition(_))
    ));
}

/// A worker can tell a stored result from one dropped because its job had
/// finished: both say stop at the end, only the first says accepted.
#[test]
fn a_result_for_a_finished_job_is_answered_as_not_accepted() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(10));
    let grants = s.lease("w", 2, 0).unwrap();
    assert_eq!(grants.len(), 2);
    let stored = s.report(result_of(&grants[0]), 1).unwrap();
    assert!(stored.accepted && !stored.stop);
    s.cancel(&id, 2).unwrap();
    let before = event_count(&s, &id);
    let dropped = s.report(result_of(&grants[1]), 3).unwrap();
    assert!(dropped.stop && !dropped.accepted);
    assert_eq!(event_count(&s, &id), before, "nothing recorded");
}

#[test]
fn malformed_results_are_refused_and_change_nothing() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(10));
    let grants = s.lease("w", 2, 0).unwrap();
    let before = event_count(&s, &id);
    // The result of character 1 reported on the shard of character 0.
    let mut wrong = result_of(&grants[1]);
    wrong.lease = grants[0].lease.clone();
    assert!(matches!(
        s.report(wrong, 1),
        Err(CoordinatorError::InvalidArgument(_))
    ));
    let mut garbage = result_of(&grants[0]);
    garbage.result = Some(ReportedResult {
        partial: b"{not json".to_vec(),
        work_done: 1,
        compute_us: 0,
    });
    assert!(matches!(
        s.report(garbage, 1),
        Err(CoordinatorError::InvalidArgument(_))
    ));
    let mut unknown = result_of(&grants[0]);
    unknown.lease = "job-424242/1/0/1".parse().unwrap();
    assert!(matches!(
        s.report(unknown, 1),
        Err(CoordinatorError::NotFound(_))
    ));
    assert_eq!(event_count(&s, &id), before);
    assert_eq!(s.job(&id, 2).unwrap().shards_done, 0);
}

#[test]
fn a_reload_keeps_accepted_results_and_attempt_numbers_only_grow() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let id = submit(&mut s, &kayles(20));
    let grants = s.lease("w", 3, 0).unwrap();
    s.report(result_of(&grants[0]), 1).unwrap();
    drop(s);
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 10).unwrap());
    let job = s.job(&id, 10).unwrap();
    assert_eq!(job.shards_done, 1);
    assert_eq!(job.shards_leased, 0, "leases do not outlive a restart");
    // The leases from before are stale: their results are refused.
    assert!(s.report(result_of(&grants[1]), 11).is_err());
    let again = s.lease("v", 100, 20).unwrap();
    for old in &grants[1..] {
        let newer = again
            .iter()
            .find(|g| g.lease.index == old.lease.index)
            .unwrap();
        assert!(newer.lease.attempt > old.lease.attempt);
    }
    assert!(again.iter().all(|g| g.lease.index != grants[0].lease.index));
    assert!(
        s.events(&id, 0)
            .unwrap()
            .iter()
            .any(|e| e.kind == "resumed")
    );
}

#[test]
fn repeated_failures_fail_the_job_with_the_workers_message() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = kayles(0); // a single shard
    let id = submit(&mut s, &spec);
    let mut now = 0;
    for attempt in 1..=spec.options.max_attempts as u64 {
        now += 100_000;
        let grant = s.lease("w", 1, now).unwrap().remove(0);
        let first = tally_wire::lease::Attempt::epoch_floor(s.epoch()).0;
        assert_eq!(
            (grant.lease.index, grant.lease.attempt),
            (0, first + attempt)
        );
        let failure = ReportedFailure {
            message: "disk on fire".into(),
            permanent: false,
            handed_back: false,
            no_room: false,
        };
        s.report(Report::failure("w", grant.lease, failure), now)
            .unwrap();
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state, proto::JobState::Failed as i32);
    assert!(job.error.contains("disk on fire"), "{}", job.error);
    assert!(s.lease("w", 100, now + 100_000).unwrap().is_empty());
}

#[test]
fn handed_back_shards_return_at_once_without_counting_an_attempt() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(10));
    let grant = s.lease("w", 1, 0).unwrap().remove(0);
    let failure = ReportedFailure {
        message: "draining".into(),
        permanent: false,
        handed_back: true,
        no_room: false,
    };
    s.report(Report::failure("w", grant.lease.clone(), failure), 1)
        .unwrap();
    let again = s.lease("v", 100, 1).unwrap();
    assert!(
        again
            .iter()
            .any(|g| g.lease.index == grant.lease.index
                && g.lease.attempt == grant.lease.attempt + 1)
    );
    assert_eq!(s.job(&id, 2).unwrap().shards_failed_attempts, 0);
}

/// A shard handed back again and again (a worker or kernel that never
/// computes it) waits longer and longer between leases and then fails its
/// job, naming the hand-backs: it is never leased for ever.
#[test]
fn a_shard_handed_back_without_end_fails_its_job_after_a_bounded_number_of_leases() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = kayles(0); // a single shard
    let id = submit(&mut s, &spec);
    let mut now = 0;
    let mut leases = 0u64;
    let mut waited = Vec::new();
    loop {
        let grants = s.lease("w", 1, now).unwrap();
        let Some(grant) = grants.into_iter().next() else {
            let job = s.job(&id, now).unwrap();
            if job.state == proto::JobState::Failed as i32 {
                assert!(job.error.contains("handed back"), "{}", job.error);
                break;
            }
            // In backoff: the shard is not leased before its time.
            now += 1_000;
            *waited.last_mut().unwrap() += 1_000;
            continue;
        };
        leases += 1;
        assert!(
            leases <= super::reports::MAX_HAND_BACKS + 1,
            "leased for ever"
        );
        let failure = ReportedFailure {
            message: "worker shutting down".into(),
            permanent: false,
            handed_back: true,
            no_room: false,
        };
        s.report(Report::failure("w", grant.lease, failure), now)
            .unwrap();
        waited.push(0u64);
    }
    assert_eq!(leases, super::reports::MAX_HAND_BACKS + 1);
    // The first hand-backs return at once, later ones after a backoff.
    assert!(waited[..4].iter().all(|&w| w == 0), "{waited:?}");
    assert!(waited[8..].iter().any(|&w| w > 0), "{waited:?}");
    let events = s.events(&id, 0).unwrap();
    assert!(
        events.len() < 3 * leases as usize + 10,
        "{} events",
        events.len()
    );
}

/// A storm of checkpoints of one attempt leaves one event that counts them;
/// the next attempt's checkpoints start an event of their own.
#[test]
fn checkpoints_of_one_attempt_are_coalesced_into_one_event() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(0));
    let checkpoint = |work_done| super::ReportedCheckpoint {
        state: vec![1, 2, 3],
        partial: Vec::new(),
        work_done,
        state_blob: None,
    };
    let grant = s.lease("w", 1, 0).unwrap().remove(0);
    // The lease's event waits for the job's next batch, or the next tick.
    let before = s.events(&id, 0).unwrap().len();
    s.write_deferred_events().unwrap();
    assert_eq!(s.events(&id, 0).unwrap().len(), before + 1);
    let before = before + 1;
    for work in 0..500 {
        s.report(
            Report::checkpoint("w", grant.lease.clone(), checkpoint(work)),
            1,
        )
        .unwrap();
    }
    let events = s.events(&id, 0).unwrap();
    assert_eq!(events.len(), before + 1);
    let last = events.last().unwrap();
    assert_eq!(last.kind, "checkpoint");
    assert!(last.message.contains("500 checkpoints"), "{}", last.message);
    assert!(last.message.starts_with("work "), "{}", last.message);
    let failure = ReportedFailure {
        message: "worker shutting down".into(),
        permanent: false,
        handed_back: true,
        no_room: false,
    };
    s.report(Report::failure("w", grant.lease, failure), 2)
        .unwrap();
    let again = s.lease("w", 1, 3).unwrap().remove(0);
    s.report(
        Report::checkpoint("w", again.lease.clone(), checkpoint(0)),
        4,
    )
    .unwrap();
    let events = s.events(&id, 0).unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.attempt),
        ("checkpoint", again.lease.attempt)
    );
    assert!(!last.message.contains("checkpoints of"), "{}", last.message);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[test]
fn higher_priority_jobs_are_leased_first() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let low = submit(&mut s, &kayles(10));
    let mut urgent = kayles(12);
    urgent.options.priority = 5;
    let high = submit(&mut s, &urgent);
    let grants = s.lease("w", 100, 0).unwrap();
    let high_count = tally_kernels::kayles::character_count(12) as usize;
    assert!(grants.len() > high_count);
    assert!(grants[..high_count].iter().all(|g| g.lease.job == high));
    assert!(grants[high_count..].iter().all(|g| g.lease.job == low));
}

/// Jobs of equal priority take turns, one shard each, across lease calls and
/// within one; a job of higher priority still goes first.
#[test]
fn jobs_of_equal_priority_are_leased_in_turn() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let jobs: Vec<String> = (0..3).map(|_| submit(&mut s, &kayles(30))).collect();
    let job_of = |g: &Grant| jobs.iter().position(|j| *j == g.lease.job).unwrap();
    // One shard a call: 0, 1, 2, 0, 1, 2, ...
    let one_at_a_time: Vec<usize> = (0..7)
        .map(|t| job_of(&s.lease("w", 1, t).unwrap()[0]))
        .collect();
    assert_eq!(one_at_a_time, [0, 1, 2, 0, 1, 2, 0]);
    // Five in one call go on from job 1, round by round.
    let five: Vec<usize> = s.lease("w", 5, 10).unwrap().iter().map(job_of).collect();
    assert_eq!(five, [1, 2, 0, 1, 2]);
    // A job of higher priority takes everything it has first.
    let mut urgent = kayles(10);
    urgent.options.priority = 1;
    let high = submit(&mut s, &urgent);
    let urgent_shards = tally_kernels::kayles::character_count(10) as u32;
    let grants = s.lease("w", urgent_shards + 2, 20).unwrap();
    let (first, rest) = grants.split_at(urgent_shards as usize);
    assert!(first.iter().all(|g| g.lease.job == high));
    assert_eq!(rest.iter().map(job_of).collect::<Vec<_>>(), [0, 1]);
}

/// Deleting: an unfinished job only with force; afterwards only the
/// tombstone remains, asking for the job says it was deleted, and its id is
/// never given again, after a reload too.
#[test]
fn a_deleted_job_leaves_only_its_tombstone_and_its_id_is_never_reused() {
    use crate::records::shard_prefix;
    use crate::store::Tree;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let id = submit(&mut s, &kayles(10));
    let grants = s.lease("w", 1, 0).unwrap();
    let events_before = event_count(&s, &id);
    let refused = s.delete(&id, false, 1).unwrap_err();
    assert!(
        matches!(&refused, CoordinatorError::FailedPrecondition(m) if m.contains("cancel it first")),
        "{refused}"
    );
    assert_eq!(event_count(&s, &id), events_before, "nothing changed");
    let kept = submit(&mut s, &kayles(12));
    s.delete(&id, true, 2).unwrap();
    for tree in [Tree::Shards, Tree::Events, Tree::Blobs] {
        assert!(
            store
                .scan_prefix(tree, &shard_prefix(&id))
                .unwrap()
                .is_empty(),
            "{tree:?}"
        );
    }
    assert!(
        !store
            .scan_prefix(Tree::Shards, &shard_prefix(&kept))
            .unwrap()
            .is_empty()
    );
    let gone = s.result(&id).unwrap_err().to_string();
    assert!(gone.contains("was deleted"), "{gone}");
    assert!(s.events(&id, 0).is_err());
    assert_eq!(s.list(3).len(), 1, "the other job stays");
    // The deleted job's worker reports: refused, nothing comes back.
    let late = s.report(result_of(&grants[0]), 4).unwrap_err().to_string();
    assert!(late.contains("was deleted"), "{late}");
    let next = submit(&mut s, &kayles(10));
    assert!(next != id && next != kept);
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 5).unwrap());
    assert!(
        s.job(&id, 5)
            .unwrap_err()
            .to_string()
            .contains("was deleted")
    );
    let after_reload = submit(&mut s, &kayles(10));
    assert!(![&id, &kept, &next].contains(&&after_reload));
    assert_eq!(s.list(6).len(), 3);
}

/// A finished job's counts go into its record and its shards out of memory;
/// its view stays the same, after a reload too, which reads no shard of it.
#[test]
fn finished_jobs_keep_their_view_without_their_shards() {
    use crate::records::shard_prefix;
    use crate::store::Tree;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let id = submit(&mut s, &kayles(30));
    let running = submit(&mut s, &kayles(10));
    let grants = s.lease("w", 3, 0).unwrap();
    s.report(result_of(&grants[0]), 1).unwrap();
    // One attempt fails (its lease expires), then the job is cancelled.
    s.expire_leases(1_000_000).unwrap();
    s.cancel(&id, 1_000_001).unwrap();
    let before = s.job(&id, 2_000_000).unwrap();
    assert!(before.shards_failed_attempts >= 1 && before.shards_done == 1);
    assert_eq!(
        s.settle_finished(2_000_000).unwrap(),
        1,
        "only the finished job"
    );
    assert_eq!(s.settle_finished(2_000_001).unwrap(), 0, "once");
    assert_eq!(s.jobs.get(&id).unwrap().shards.len(), 0);
    assert_ne!(s.jobs.get(&running).unwrap().shards.len(), 0);
    assert_eq!(s.job(&id, 3_000_000).unwrap(), before);
    // Without its shard records, a reload shows the same job.
    let mut batch = crate::store::Batch::default();
    for (key, _) in store.scan_prefix(Tree::Shards, &shard_prefix(&id)).unwrap() {
        batch.remove(Tree::Shards, key);
    }
    store.commit(batch).unwrap();
    let s = Scheduler::load(store, SchedulerConfig::default(), 4_000_000).unwrap();
    assert_eq!(s.job(&id, 5_000_000).unwrap(), before);
}

/// Retention deletes finished jobs whose end is at or before the cutoff,
/// and nothing unfinished.
#[test]
fn retention_deletes_only_jobs_finished_long_enough_ago() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let early = submit(&mut s, &kayles(10));
    let late = submit(&mut s, &kayles(10));
    let running = submit(&mut s, &kayles(10));
    s.cancel(&early, 100).unwrap();
    s.cancel(&late, 200).unwrap();
    assert_eq!(s.delete_finished_before(99, 300).unwrap(), 0);
    assert_eq!(s.delete_finished_before(150, 300).unwrap(), 1);
    assert!(s.job(&early, 300).is_err());
    assert!(s.job(&late, 300).is_ok());
    assert_eq!(s.delete_finished_before(1_000, 1_000).unwrap(), 1);
    assert!(s.job(&running, 1_000).is_ok(), "an unfinished job is kept");
}

/// Leases are soft state: a restart starts a new epoch, in which every lease
/// handed out before is stale. Their shards are leased again at once, with
/// no failed attempt counted; reports and heartbeats of the old attempts are
/// refused; a result accepted before the restart is never leased again.
#[test]
fn a_restart_makes_every_earlier_lease_stale_and_its_shard_pending() {
    use tally_wire::lease::Attempt;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let first_epoch = s.epoch();
    let id = submit(&mut s, &kayles(30));
    let held = s.lease("gone", 4, 1).unwrap();
    assert_eq!(held.len(), 4);
    assert!(
        held.iter()
            .all(|g| Attempt(g.lease.attempt).epoch() == first_epoch)
    );
    // One result is accepted before the restart; a checkpoint is saved.
    s.report(report_from("gone", &held[0], false), 1).unwrap();
    let checkpoint = super::ReportedCheckpoint {
        state: vec![1, 2, 3],
        partial: Vec::new(),
        work_done: 0,
        state_blob: None,
    };
    s.report(
        Report::checkpoint("gone", held[1].lease.clone(), checkpoint),
        1,
    )
    .unwrap();
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 2).unwrap());
    assert_eq!(s.epoch(), first_epoch + 1);
    let total = tally_kernels::kayles::character_count(30) as usize;
    let again = s.lease("w", 1_000, 2).unwrap();
    assert_eq!(
        again.len(),
        total - 1,
        "every shard but the one done, at once"
    );
    assert!(
        again.iter().all(|g| g.lease.index != held[0].lease.index),
        "the accepted shard is not leased again"
    );
    let resumed = again
        .iter()
        .find(|g| g.lease.index == held[1].lease.index)
        .unwrap();
    assert_eq!(
        resumed.checkpoint,
        vec![1, 2, 3],
        "resumes from its checkpoint"
    );
    for old in &held[1..] {
        let newer = again
            .iter()
            .find(|g| g.lease.index == old.lease.index)
            .unwrap();
        assert!(newer.lease.attempt > old.lease.attempt);
        let e = s.report(report_from("gone", old, false), 3).unwrap_err();
        assert!(
            e.to_string().contains("before the coordinator restarted"),
            "{e}"
        );
    }
    let beat = proto::LeaseProgress {
        lease_id: held[2].lease.to_string(),
        work_done: 0,
    };
    s.register("gone", slots(4), "session-gone".into(), 3);
    assert_eq!(
        s.heartbeat("gone", &[beat], 3),
        vec![held[2].lease.to_string()]
    );
    let job = s.job(&id, 3).unwrap();
    assert_eq!(job.shards_failed_attempts, 0);
    assert_eq!(job.shards_done, 1);
}

/// Checkpoints come with their leases only up to a share of one message:
/// past it (or past the size of one inline checkpoint) a lease announces its
/// checkpoint's size, and only its current attempt may fetch it.
#[test]
fn a_lease_response_carries_checkpoints_up_to_its_share_of_a_message() {
    use tally_wire::limits::{INLINE_CHECKPOINT_BYTES, MAX_INLINE_CHECKPOINTS_PER_RESPONSE};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    submit(&mut s, &kayles(30));
    let total = tally_kernels::kayles::character_count(30) as usize;
    let held = s.lease("w", 100, 1).unwrap();
    assert_eq!(held.len(), total);
    let small = INLINE_CHECKPOINT_BYTES - 1;
    let sizes: Vec<usize> = (0..total)
        .map(|i| {
            if i == 0 {
                INLINE_CHECKPOINT_BYTES + 1
            } else {
                small
            }
        })
        .collect();
    assert!(sizes.iter().sum::<usize>() > MAX_INLINE_CHECKPOINTS_PER_RESPONSE + small);
    for (grant, &size) in held.iter().zip(&sizes) {
        let checkpoint = super::ReportedCheckpoint {
            state: vec![7; size],
            partial: Vec::new(),
            work_done: 0,
            state_blob: None,
        };
        s.report(Report::checkpoint("w", grant.lease.clone(), checkpoint), 2)
            .unwrap();
    }
    // Restarted: the checkpoints come with the next leases.
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 3).unwrap());
    let again = s.lease("w", 100, 4).unwrap();
    assert_eq!(again.len(), total);
    let inline: usize = again.iter().map(|g| g.checkpoint.len()).sum();
    assert!(
        inline > 0 && inline <= MAX_INLINE_CHECKPOINTS_PER_RESPONSE,
        "{inline}"
    );
    for grant in &again {
        let size = sizes[grant.lease.index as usize];
        if grant.checkpoint.is_empty() {
            assert_eq!(grant.checkpoint_bytes, size as u64, "{}", grant.lease);
            let (store, key) = s.checkpoint_of("w", &grant.lease).unwrap();
            let fetched = store.get(crate::store::Tree::Blobs, &key).unwrap().unwrap();
            assert_eq!(fetched, vec![7; size]);
            assert!(
                s.checkpoint_of("v", &grant.lease).is_err(),
                "another worker's lease"
            );
        } else {
            assert_eq!((grant.checkpoint.len(), grant.checkpoint_bytes), (size, 0));
        }
    }
    let first = again.iter().find(|g| g.lease.index == 0).unwrap();
    assert!(
        first.checkpoint.is_empty(),
        "a checkpoint above the inline size is fetched"
    );
}

#[test]
fn workers_silent_for_long_are_dropped_from_the_list() {
    let store = Arc::new(MemoryStore::new());
    let mut s = Scheduler::load(store, SchedulerConfig::default(), 0).unwrap();
    s.register("quiet", slots(1), "q".into(), 0);
    s.register("busy", slots(1), "b".into(), 0);
    let later = super::WORKER_FORGOTTEN_MS;
    s.heartbeat("busy", &[], later);
    assert_eq!(
        s.forget_silent_workers(later),
        0,
        "silent exactly the limit"
    );
    assert_eq!(s.forget_silent_workers(later + 1), 1);
    assert!(s.workers().contains_key("busy") && !s.workers().contains_key("quiet"));
}

#[test]
fn a_cancelled_job_shows_no_leases_and_its_workers_are_told_to_stop() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let id = submit(&mut s, &kayles(30));
    let grants = s.lease("w", 2, 1).unwrap();
    assert_eq!(s.job(&id, 1).unwrap().shards_leased, 2);
    s.cancel(&id, 2).unwrap();
    assert_eq!(s.job(&id, 2).unwrap().shards_leased, 0);
    let held: Vec<proto::LeaseProgress> = grants
        .iter()
        .map(|g| proto::LeaseProgress {
            lease_id: g.lease.to_string(),
            work_done: 0,
        })
        .collect();
    assert_eq!(s.heartbeat("w", &held, 3).len(), 2, "both leases revoked");
}

/// A shard stuck in a live worker: heartbeats keep coming, its work does not
/// grow. Past the stall limit they no longer renew it; it expires and goes to
/// another attempt, while a shard that progresses is renewed all along.
#[test]
fn a_shard_that_makes_no_progress_is_not_renewed_past_the_stall_limit() {
    let config = SchedulerConfig {
        stall_limit_ms: 5_000,
        ..SchedulerConfig::default()
    };
    let mut s = registered(Scheduler::load(Arc::new(MemoryStore::new()), config, 0).unwrap());
    let id = submit(&mut s, &kayles(30));
    let grants = s.lease("w", 2, 0).unwrap();
    let (stuck, moving) = (&grants[0], &grants[1]);
    let ttl = 1_000; // the spec's lease TTL
    let mut now = 0;
    let mut work = 0;
    while now < 8_000 {
        now += 500;
        work += 1;
        let leases = [
            proto::LeaseProgress {
                lease_id: stuck.lease.to_string(),
                work_done: 0,
            },
            proto::LeaseProgress {
                lease_id: moving.lease.to_string(),
                work_done: work,
            },
        ];
        assert!(s.heartbeat("w", &leases, now).is_empty());
        s.expire_leases(now).unwrap();
    }
    let events = s.events(&id, 0).unwrap();
    let expired: Vec<u32> = events
        .iter()
        .filter(|e| e.kind == "expired")
        .map(|e| e.shard)
        .collect();
    assert_eq!(
        expired,
        vec![stuck.lease.index],
        "only the stuck shard expires"
    );
    // It expired once its last renewal (at the stall limit) ran out.
    let at = events.iter().find(|e| e.kind == "expired").unwrap().time_ms;
    assert!(
        (5_000 + ttl..=5_000 + ttl + 500).contains(&at),
        "expired at {at}"
    );
}

#[test]
fn a_recovery_names_the_lost_jobs_and_marks_the_unfinished_ones() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let first = submit(&mut s, &kayles(30));
    let second = submit(&mut s, &kayles(32));
    // What a recovered store holds: the job counter raised to the mark's, the
    // records of jobs 3 and 4 gone.
    let mut batch = crate::store::Batch::default();
    batch.put(
        crate::store::Tree::Meta,
        crate::store::NEXT_JOB_KEY,
        5u64.to_be_bytes().to_vec(),
    );
    store.commit(batch).unwrap();
    let mut s = new_scheduler(store);
    let lost = s.note_recovery(7, 10).unwrap();
    assert_eq!(lost, ["job-000003", "job-000004"]);
    for id in [&first, &second] {
        let events = s.events(id, 0).unwrap();
        let recovered = events.iter().find(|e| e.kind == "recovered").unwrap();
        assert!(recovered.message.contains("lost 7 acknowledged commits"));
    }
    // Ids never go back: the next job is number 5.
    assert_eq!(submit(&mut s, &kayles(34)), "job-000005");
}

#[test]
fn a_worker_that_never_registered_gets_no_work() {
    let store = Arc::new(MemoryStore::new());
    let mut s = Scheduler::load(store, SchedulerConfig::default(), 0).unwrap();
    submit(&mut s, &kayles(30));
    let err = s.lease("made-up", 4, 1).expect_err("refused");
    assert!(matches!(err, CoordinatorError::NotFound(_)), "{err:?}");
    // A heartbeat does not register it either.
    assert!(s.heartbeat("made-up", &[], 2).is_empty());
    assert!(s.lease("made-up", 4, 3).is_err());
    s.register("made-up", slots(4), "m".into(), 4);
    assert_eq!(s.lease("made-up", 4, 5).unwrap().len(), 4);
}

#[test]
fn only_the_current_session_of_a_worker_is_accepted() {
    let store = Arc::new(MemoryStore::new());
    let mut s = Scheduler::load(store, SchedulerConfig::default(), 0).unwrap();
    let unauthenticated = |r: Result<()>| matches!(r, Err(CoordinatorError::Unauthenticated(_)));
    // Never registered: no session is accepted, not even an empty one.
    assert!(unauthenticated(s.check_session("w", "")));
    assert!(unauthenticated(s.check_session("w", "guess")));
    s.register("w", slots(1), "first".into(), 0);
    s.check_session("w", "first").unwrap();
    assert!(unauthenticated(s.check_session("w", "firs")));
    assert!(unauthenticated(s.check_session("w", "")));
    // Another worker's session is not this worker's.
    s.register("v", slots(1), "second".into(), 0);
    assert!(unauthenticated(s.check_session("w", "second")));
    // Registering again replaces the session: the old one is refused.
    s.register("w", slots(1), "third".into(), 1);
    assert!(unauthenticated(s.check_session("w", "first")));
    s.check_session("w", "third").unwrap();
    // A forgotten worker's session expires with it.
    let forgotten_at = 1 + super::protocol::WORKER_FORGOTTEN_MS + 1;
    assert_eq!(s.forget_silent_workers(forgotten_at), 2);
    assert!(unauthenticated(s.check_session("w", "third")));
}

/// A grant computed as a worker computes it: with the stage outputs its task
/// reads, fetched from the scheduler.
pub(super) fn staged_report(s: &mut Scheduler, grant: &Grant) -> Report {
    let task = EncodedTask::from_bytes(&grant.task).unwrap();
    let reads = grant.spec.stage_reads(grant.lease.stage, &task).unwrap();
    let mut parts = Vec::new();
    for read in reads {
        parts.push(
            s.stage_data(&grant.lease.job, read.stage, read.bucket)
                .unwrap_or_else(|e| panic!("{}: {read:?}: {e}", grant.lease)),
        );
    }
    let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    let input = (!slices.is_empty()).then(|| grant.spec.decode_stage_inputs(&slices).unwrap());
    let outcome = grant
        .spec
        .execute(
            &task,
            tally_kinds::dynamic::ShardContext {
                input: input.as_ref(),
                checkpoint: &tally_kinds::kind::NO_CHECKPOINT,
                cache: &KernelCache::new(),
                control: &Control::new(),
                checkpoint_every: tally_kinds::kind::CHECKPOINT_EVERY,
                on_event: &mut |_| {},
                room: None,
            },
        )
        .unwrap();
    let result = ReportedResult {
        partial: outcome.partial.to_bytes(),
        work_done: outcome.work_done,
        compute_us: 0,
    };
    Report::result(
        "w",
        grant.lease.clone(),
        result,
        outcome.output.into_bytes().unwrap(),
    )
}

/// Stages a kind keeps for later ones survive a reload and are read long
/// after they are done; once no stage reads them they are deleted, and a
/// finished job leaves no stage output in the store.
#[test]
fn kept_stage_outputs_survive_reloads_and_are_deleted_when_no_longer_read() {
    use crate::records::shard_prefix;
    use crate::store::Tree;
    use tally_kernels::sliders::SliderParams;
    use tally_kinds::sliders::{SlidersPlanName, SlidersSpec};

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let spec = JobSpec::new(SlidersSpec {
        board: SliderParams::new(3, 3, "WRRRRBBBB", "WBBBBRRRR"),
        plan: SlidersPlanName::Frontier,
        buckets: 2,
        ..Default::default()
    });
    let id = submit(&mut s, &spec);
    let blobs = |store: &Arc<dyn Store>| {
        store
            .scan_prefix(Tree::Blobs, &shard_prefix(&id))
            .unwrap()
            .len()
    };
    let mut most_blobs = 0;
    let mut now = 1;
    while !s.job(&id, now).unwrap().state().is_finished() {
        let stage = s.job(&id, now).unwrap().stage;
        for grant in s.lease("w", 100, now).unwrap() {
            let report = staged_report(&mut s, &grant);
            s.report(report, now).unwrap();
        }
        most_blobs = most_blobs.max(blobs(&store));
        // A reload at every other stage: the kept outputs come back.
        if stage.is_multiple_of(2) {
            s = registered(
                Scheduler::load(store.clone(), SchedulerConfig::default(), now).unwrap(),
            );
        }
        now += 1;
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state(), proto::JobState::Succeeded, "{}", job.error);
    assert_eq!(job.answer, direct_answer(&spec).line);
    // 22 forward levels were kept at once, each with 2 shards' outputs.
    assert!(most_blobs >= 40, "{most_blobs} outputs at most");
    assert_eq!(blobs(&store), 0, "stage outputs left behind");
}

/// A memory store whose batches fail from the `fail_from`-th on (counting from 0).
struct FailingFrom {
    inner: Arc<MemoryStore>,
    batches: std::sync::atomic::AtomicU64,
    fail_from: u64,
}

impl StoreWrapper for FailingFrom {
    fn inner(&self) -> &dyn Store {
        &*self.inner
    }
    fn wrapped_apply(&self, batch: crate::store::Batch) -> Result<()> {
        let n = self
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n >= self.fail_from {
            return Err(CoordinatorError::Store("disk unplugged".into()));
        }
        self.inner.apply(batch)
    }
}

#[test]
fn a_large_stage_is_written_in_parts_and_a_failure_between_them_never_reuses_the_id() {
    use tally_kinds::synthetic::SyntheticSpec;
    let big = JobSpec::new(SyntheticSpec {
        shards: 3 * super::clients::SUBMIT_PART as u64 + 5,
        terms_per_shard: 1,
    });
    // Whole: four parts, every shard readable after a reload.
    let store = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let before = store.applied();
    let id = submit(&mut s, &big);
    assert_eq!(
        store.applied() - before,
        4,
        "three parts ahead of the job's batch"
    );
    let mut s = Scheduler::load(store.clone(), SchedulerConfig::default(), 0).unwrap();
    s.ensure_shards(&id).unwrap();
    assert_eq!(
        s.jobs.get(&id).unwrap().shards.len(),
        3 * super::clients::SUBMIT_PART + 5
    );

    // The second part fails: the submission fails, and the next job gets a
    // new id, even after a reload, so the first part's records stay unread.
    let store = Arc::new(FailingFrom {
        inner: Arc::new(MemoryStore::new()),
        batches: Default::default(),
        // The load writes its epoch; the submission's first part goes, its
        // second fails.
        fail_from: 2,
    });
    let mut s = new_scheduler(store.clone());
    let spec = ValidSpec::new(big.clone()).unwrap();
    let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
    let err = s.submit(spec, plan, None, Vec::new(), 0).unwrap_err();
    assert!(err.to_string().contains("disk unplugged"), "{err}");
    let orphaned = store
        .inner
        .scan_prefix(crate::store::Tree::Shards, b"")
        .unwrap();
    assert_eq!(orphaned.len(), super::clients::SUBMIT_PART);
    let reloaded = Scheduler::load(store.inner.clone(), SchedulerConfig::default(), 0);
    let mut reloaded = registered(reloaded.unwrap());
    let small = JobSpec::new(SyntheticSpec {
        shards: 3,
        terms_per_shard: 1,
    });
    let next = submit(&mut reloaded, &small);
    assert_ne!(
        next, "job-000001",
        "the failed submission's id is never given again"
    );
    assert_eq!(reloaded.jobs.get(&next).unwrap().shards.len(), 3);
    assert!(reloaded.jobs.get("job-000001").is_err());
}

#[test]
fn jobs_never_leased_are_read_back_without_their_shards_until_a_lease_wants_them() {
    let store = Arc::new(MemoryStore::new());
    let mut s = new_scheduler(store.clone());
    let specs = [kayles(30), kayles(32), kayles(34)];
    let ids: Vec<String> = specs.iter().map(|spec| submit(&mut s, spec)).collect();
    // The first job starts (one lease); the others stay queued.
    let grant = s.lease("w", 1, 0).unwrap().remove(0);
    assert_eq!(grant.lease.job, ids[0]);
    let views: Vec<proto::Job> = ids.iter().map(|id| s.job(id, 0).unwrap()).collect();

    let mut s = registered(Scheduler::load(store.clone(), SchedulerConfig::default(), 0).unwrap());
    assert!(s.jobs.get(&ids[0]).unwrap().shards_loaded);
    for id in &ids[1..] {
        let entry = s.jobs.get(id).unwrap();
        assert!(!entry.shards_loaded && entry.shards.len() == 0, "{id}");
    }
    // Their views are as before the restart.
    for (id, before) in ids.iter().zip(&views) {
        let after = s.job(id, 0).unwrap();
        assert_eq!(
            (
                after.shards_total,
                after.work_total,
                after.shards_done,
                after.state
            ),
            (
                before.shards_total,
                before.work_total,
                before.shards_done,
                before.state
            ),
            "{id}"
        );
    }
    // The lease from before the restart is stale; leases read the other
    // jobs' shards as they come, and every job ends with its answer.
    assert!(s.report(result_of(&grant), 1).is_err());
    let mut now = 1;
    loop {
        let grants = s.lease("w", 64, now).unwrap();
        if grants.is_empty() {
            break;
        }
        for grant in &grants {
            s.report(result_of(grant), now).unwrap();
        }
        now += 1;
    }
    assert!(!s.has_ready_work(now));
    for (id, spec) in ids.iter().zip(&specs) {
        assert!(s.jobs.get(id).unwrap().shards_loaded);
        let job = s.job(id, now).unwrap();
        assert_eq!(job.answer, direct_answer(spec).line, "{id}");
    }
}

/// A hex points job of side 6 in shards of one point, its graph at `graph`.
fn hex_points_of_one_point(graph: tally_kinds::hex::HexGraphPlace) -> JobSpec {
    JobSpec::new(tally_kinds::hex::HexSpec {
        side: 6,
        modulus: 1_000_000_007,
        plan: tally_kinds::hex::HexPlan::Points,
        shards_per_step: 0,
        exact: false,
        points_per_shard: 1,
        graph,
        graph_parts: 0,
    })
}

/// A worker of four slots and `memory_budget` bytes.
fn with_budget(memory_budget: u64) -> Registration {
    Registration {
        memory_budget,
        ..slots(4)
    }
}

/// A worker gets only as many shards of a job at once as its memory budget
/// holds by the job's estimate: none if not even one fits, one at a time
/// if one does; a worker that said nothing is assumed to have the default.
#[test]
fn a_worker_holds_only_the_shards_its_memory_budget_holds() {
    use tally_kinds::hex::HexGraphPlace;
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = hex_points_of_one_point(HexGraphPlace::Auto);
    let need = ValidSpec::new(spec.clone()).unwrap().estimate().unwrap();
    submit(&mut s, &spec);
    let smallest = need.smallest_worker_bytes();
    s.register("short", with_budget(smallest - 1), "s".into(), 0);
    s.register(
        "one",
        with_budget(smallest + need.shard_bytes / 2),
        "o".into(),
        0,
    );
    assert!(s.lease("short", 4, 1).unwrap().is_empty());
    let first = s.lease("one", 4, 1).unwrap();
    assert_eq!(first.len(), 1, "room for one shard at a time");
    assert!(s.lease("one", 4, 2).unwrap().is_empty());
    let outcome = s.report(report_from("one", &first[0], false), 3).unwrap();
    assert!(outcome.accepted, "{outcome:?}");
    assert_eq!(s.lease("one", 4, 4).unwrap().len(), 1);
    // "w" said nothing: the default budget holds many such shards.
    assert_eq!(s.lease("w", 4, 5).unwrap().len(), 4);
    assert!(s.lease("short", 4, 6).unwrap().is_empty());
}

/// A finished shard's checkpoint in the stage store is swept while its stage
/// still runs (a side-18 hex shard's is 1.3 GB, one for each of hundreds of
/// shards); a running shard's and the finished shard's output are kept.
#[test]
fn a_finished_shards_checkpoint_blob_is_swept_before_its_stage_ends() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    submit(&mut s, &kayles(30));
    let held = s.lease("w", 100, 1).unwrap();
    assert!(held.len() >= 2);
    let key = |grant: &Grant| tally_stage::blob_key(&grant.lease, "checkpoint-1");
    for grant in &held[..2] {
        let checkpoint = super::ReportedCheckpoint {
            state: Vec::new(),
            partial: Vec::new(),
            work_done: 0,
            state_blob: Some(tally_stage::BlobRef {
                key: key(grant),
                size: 1,
                digest: [0; 32],
                offset: 0,
            }),
        };
        s.report(Report::checkpoint("w", grant.lease.clone(), checkpoint), 2)
            .unwrap();
    }
    let unrelated = tally_stage::blob_key(&held[1].lease, "output");
    let keys = vec![key(&held[0]), key(&held[1]), unrelated.clone()];
    assert!(
        s.unreferenced_blobs(keys.clone()).unwrap().is_empty(),
        "both shards run: their attempts' blobs are kept"
    );
    s.report(result_of(&held[0]), 3).unwrap();
    assert_eq!(
        s.unreferenced_blobs(keys).unwrap(),
        vec![key(&held[0])],
        "the finished shard's checkpoint goes; the running shard's blobs stay"
    );
}

/// A running attempt's checkpoints before the one committed are swept (a
/// side-19 hex shard writes a 3.7 GB vector a minute); the committed one,
/// a later one still in flight and its other blobs stay.
#[test]
fn a_running_attempts_superseded_checkpoints_are_swept() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    submit(&mut s, &kayles(30));
    let grant = s.lease("w", 1, 1).unwrap().remove(0);
    let key = |n: u64| tally_stage::blob_key(&grant.lease, &tally_stage::checkpoint_blob_name(n));
    let checkpoint_at = |n: u64| super::ReportedCheckpoint {
        state: Vec::new(),
        partial: Vec::new(),
        work_done: 0,
        state_blob: Some(tally_stage::BlobRef {
            key: key(n),
            size: 1,
            digest: [0; 32],
            offset: 0,
        }),
    };
    let output = tally_stage::blob_key(&grant.lease, "output");
    let keys = vec![key(1), key(2), key(3), key(4), output.clone()];
    assert!(
        s.unreferenced_blobs(keys.clone()).unwrap().is_empty(),
        "nothing committed yet: every blob of the attempt may be in flight"
    );
    s.report(
        Report::checkpoint("w", grant.lease.clone(), checkpoint_at(3)),
        2,
    )
    .unwrap();
    assert_eq!(
        s.unreferenced_blobs(keys).unwrap(),
        vec![key(1), key(2)],
        "the checkpoints before the committed third go"
    );
}

/// Each stage's shards are leased by that stage's estimate: the staged hex
/// graph's build needs the graph, its point shards a vector each, and a
/// worker gets the shards of the stage at hand as far as its budget holds
/// them.
#[test]
fn each_stage_is_leased_by_its_own_estimate() {
    use tally_kinds::hex::HexGraphPlace;
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = hex_points_of_one_point(HexGraphPlace::Stage);
    let valid = ValidSpec::new(spec.clone()).unwrap();
    let build = valid.stage_estimate(1).unwrap().smallest_worker_bytes();
    let point = valid.stage_estimate(2).unwrap().smallest_worker_bytes();
    // At side 6 the graph is small and a point shard's buffers are not.
    assert!(build < point, "{build} {point}");
    submit(&mut s, &spec);
    s.register("none", with_budget(build - 1), "n".into(), 0);
    s.register("tight", with_budget(build), "t".into(), 0);
    s.register("roomy", with_budget(point), "r".into(), 0);
    assert!(s.lease("none", 4, 1).unwrap().is_empty());
    let built = s.lease("tight", 4, 2).unwrap();
    assert_eq!(built.len(), 1, "the build, the stage's one shard");
    let outcome = s.report(report_from("tight", &built[0], false), 3).unwrap();
    assert!(outcome.accepted, "{outcome:?}");
    // The point shards: not for the worker that held the build.
    assert!(s.lease("tight", 4, 4).unwrap().is_empty());
    let points = s.lease("roomy", 4, 5).unwrap();
    assert_eq!(points.len(), 1, "room for one point shard at a time");
    assert_eq!(points[0].lease.stage, 2);
}

/// A pack holds the outputs of several shards of one stage: it stays while
/// its stage is current and, after it, while a committed output of a stage
/// the job still holds lies in it; a pack nothing committed refers to, and
/// any pack of a job the coordinator no longer runs, go.
#[test]
fn packs_are_swept_with_the_stages_whose_outputs_they_hold() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let spec = JobSpec::new(tally_kinds::hex::HexSpec {
        side: 3,
        modulus: 1_000_000_007,
        plan: tally_kinds::hex::HexPlan::CellStep,
        shards_per_step: 2,
        exact: false,
        points_per_shard: 0,
        graph: Default::default(),
        graph_parts: 0,
    });
    let job = submit(&mut s, &spec);
    // Runs the current stage, its outputs in the pack `key`; the partials
    // are those of the first stage's shards (a step's before the last holds
    // nothing: its output is all), computed for the first stage.
    let run_stage = |s: &mut Scheduler, key: &str, partial: &mut Vec<u8>| {
        let grants = s.lease("w", 100, 2).unwrap();
        assert!(!grants.is_empty());
        for (n, grant) in grants.iter().enumerate() {
            if partial.is_empty() {
                *partial = report_from("w", grant, false).result.unwrap().partial;
            }
            let result = ReportedResult {
                partial: partial.clone(),
                work_done: 1,
                compute_us: 0,
            };
            let report = Report::result("w", grant.lease.clone(), result, Vec::new())
                .with_output_blob(tally_stage::BlobRef {
                    key: key.to_string(),
                    size: 64,
                    digest: [n as u8; 32],
                    offset: 8 + 64 * n as u64,
                });
            assert!(s.report(report, 3).unwrap().accepted);
        }
        grants[0].lease.stage
    };
    let mut partial = Vec::new();
    let pack = |stage: u32, name: &str| {
        let first = tally_wire::lease::LeaseId::new(&job, stage, 0, 1);
        format!("{}-{name}", tally_stage::pack_key(&first, 0))
    };
    let (one, orphan) = (pack(1, "one"), pack(1, "orphan"));
    let (two, other_job) = (pack(2, "two"), "jobs/job-999999/1/packs/0-1-0".to_string());
    let keys = vec![one.clone(), orphan.clone(), two.clone(), other_job.clone()];
    assert_eq!(
        s.unreferenced_blobs(keys.clone()).unwrap(),
        vec![other_job.clone()],
        "stage 1 is current: its packs may still be on their way"
    );
    assert_eq!(run_stage(&mut s, &one, &mut partial), 1);
    assert_eq!(
        s.unreferenced_blobs(keys.clone()).unwrap(),
        vec![orphan.clone(), other_job.clone()],
        "stage 1 is the input of stage 2: its pack stays, the orphan goes"
    );
    assert_eq!(run_stage(&mut s, &two, &mut partial), 2);
    assert_eq!(
        s.unreferenced_blobs(keys).unwrap(),
        vec![one, orphan, other_job],
        "stage 1 is read no more: its pack goes; stage 2's stays"
    );
}

/// A job capped by `max_slots` holds at most that many leases across the
/// workers, whatever their free slots, and the other jobs take the rest; an
/// accepted shard frees its slot for the job again; its view says why it
/// waits.
#[test]
fn a_job_holds_at_most_its_max_slots_across_the_workers() {
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    let mut capped = kayles(30);
    capped.options.max_slots = 3;
    // First in line, so that only its cap leaves slots to the other.
    capped.options.priority = 1;
    let big = submit(&mut s, &capped);
    let other = submit(&mut s, &kayles(30));
    let of = |grants: &[Grant], job: &str| grants.iter().filter(|g| g.lease.job == job).count();
    let on_w = s.lease("w", 4, 0).unwrap();
    assert_eq!((of(&on_w, &big), of(&on_w, &other)), (3, 1));
    let on_v = s.lease("v", 4, 0).unwrap();
    assert_eq!((of(&on_v, &big), of(&on_v, &other)), (0, 4));
    let waiting = s.job(&big, 1).unwrap().waiting;
    assert!(
        waiting.contains("the 3 slot(s) its --max-slots allows"),
        "{waiting}"
    );
    let done = on_w.iter().find(|g| g.lease.job == big).unwrap();
    s.report(result_of(done), 2).unwrap();
    let on_a = s.lease("a", 4, 3).unwrap();
    assert_eq!((of(&on_a, &big), of(&on_a, &other)), (1, 3));
    // Uncapped, the same job would have taken every free slot first.
    let mut s = new_scheduler(Arc::new(MemoryStore::new()));
    capped.options.max_slots = 0;
    let big = submit(&mut s, &capped);
    submit(&mut s, &kayles(30));
    assert_eq!(of(&s.lease("w", 4, 0).unwrap(), &big), 4);
}

/// A scheduler with small workers of 1 GB and one of 8 GB, and a job of one
/// shard whose leases last a second and which fails after `max_attempts`.
fn small_and_large_workers(max_attempts: u32) -> (Scheduler, String) {
    let mut s =
        Scheduler::load(Arc::new(MemoryStore::new()), SchedulerConfig::default(), 0).unwrap();
    let gb = 1u64 << 30;
    for (worker, budget) in [
        ("small-1", gb),
        ("small-2", gb),
        ("small-3", gb),
        ("large", 8 * gb),
    ] {
        let registration = Registration {
            memory_budget: budget,
            ..slots(1)
        };
        s.register(worker, registration, format!("session-{worker}"), 0);
    }
    let mut spec = JobSpec::new(tally_kinds::synthetic::SyntheticSpec {
        shards: 1,
        terms_per_shard: 1,
    });
    spec.options.lease_ttl_ms = 1_000;
    spec.options.max_attempts = max_attempts;
    let id = submit(&mut s, &spec);
    (s, id)
}

/// A shard whose workers vanish while running it (its lease expires with the
/// worker not heard from for the lease's time to live) goes, after two of
/// them, only to a worker with a larger memory budget, and completes there; a
/// lease that expires while its worker is alive does not count; the events and the job view say
/// what the shard seems to need and why it waits; a shard that vanishes with
/// every worker fails its job with that reason after its attempts.
#[test]
fn a_shard_whose_workers_vanish_goes_only_to_a_larger_worker() {
    let (mut s, id) = small_and_large_workers(5);
    let lost = super::WORKER_LOST_MS;
    // small-1 takes it and vanishes.
    assert_eq!(s.lease("small-1", 1, 0).unwrap().len(), 1);
    let mut now = 2 * lost;
    assert_eq!(s.expire_leases(now).unwrap(), 1);
    // small-2 takes it and stays alive past the lease (it beats without
    // renewing it, as a worker whose shard is stuck): not a vanished worker.
    now += 60_000;
    assert_eq!(s.lease("small-2", 1, now).unwrap().len(), 1);
    now += 2_000;
    s.heartbeat("small-2", &[], now - 100);
    assert_eq!(s.expire_leases(now).unwrap(), 1);
    // small-3 takes it and vanishes: the second.
    now += 60_000;
    assert_eq!(s.lease("small-3", 1, now).unwrap().len(), 1);
    now += 2 * lost;
    assert_eq!(s.expire_leases(now).unwrap(), 1);
    let events = s.events(&id, 0).unwrap();
    let vanished = events
        .iter()
        .filter(|e| e.kind == "expired" && e.message.contains("vanished"))
        .count();
    assert_eq!(vanished, 2, "{events:?}");
    let needs = events.iter().find(|e| e.kind == "needs-memory");
    assert!(
        needs.is_some_and(|e| e
            .message
            .contains("goes only to workers with a larger budget")),
        "{events:?}"
    );
    // A small worker gets nothing, and the job says why it waits.
    now += 60_000;
    assert!(s.lease("small-2", 1, now).unwrap().is_empty());
    let waiting = s.job(&id, now).unwrap().waiting;
    assert!(waiting.contains("memory budget over"), "{waiting}");
    let events = s.events(&id, 0).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == "waiting" && e.message.contains("memory budget over"))
    );
    // The large one takes it and finishes the job.
    let grant = s.lease("large", 1, now).unwrap().remove(0);
    s.report(report_from("large", &grant, false), now + 1)
        .unwrap();
    let job = s.job(&id, now + 2).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);

    // Every worker vanishes with it: the job fails saying so.
    let (mut s, id) = small_and_large_workers(3);
    let mut now = 0;
    for worker in ["small-1", "small-2", "large"] {
        assert_eq!(s.lease(worker, 1, now).unwrap().len(), 1, "{worker}");
        now += 2 * lost;
        s.expire_leases(now).unwrap();
        now += 60_000;
    }
    let job = s.job(&id, now).unwrap();
    assert_eq!(job.state, proto::JobState::Failed as i32);
    assert!(
        job.error.contains("vanished while running it 3 time(s)"),
        "{}",
        job.error
    );
}

/// A shard waiting for a larger worker does not wait for ever: with none
/// live past the patience, the largest live worker takes it (a kill that was
/// not for memory looks the same as one that was), and its attempts bound
/// the tries.
#[test]
fn with_no_larger_worker_live_a_shard_goes_to_the_largest_after_the_patience() {
    let (mut s, id) = small_and_large_workers(5);
    let lost = super::WORKER_LOST_MS;
    let mut now = 0;
    for worker in ["small-1", "small-3"] {
        assert_eq!(s.lease(worker, 1, now).unwrap().len(), 1, "{worker}");
        now += 2 * lost;
        assert_eq!(s.expire_leases(now).unwrap(), 1);
        now += 60_000;
    }
    // Only small-2 is live now ("large" was last heard from at 0).
    s.heartbeat("small-2", &[], now);
    assert!(
        s.lease("small-2", 1, now).unwrap().is_empty(),
        "within the patience"
    );
    let waiting = s.job(&id, now).unwrap().waiting;
    assert!(
        waiting.contains("the largest live one takes them"),
        "{waiting}"
    );
    now += crate::records::LARGER_WORKER_PATIENCE_MS;
    s.heartbeat("small-2", &[], now);
    let grant = s.lease("small-2", 1, now).unwrap().remove(0);
    s.report(report_from("small-2", &grant, false), now + 1)
        .unwrap();
    let job = s.job(&id, now + 2).unwrap();
    assert_eq!(job.state, proto::JobState::Succeeded as i32);
}

/// A worker silent since it took its lease vanished with the shard even when
/// the expiry runs at the lease's very deadline (the tick is timed to it), and
/// one heard from after it took the lease is alive then.
#[test]
fn a_lease_expired_at_its_deadline_counts_a_silent_worker_as_vanished() {
    let (mut s, id) = small_and_large_workers(5);
    let ttl = 1_000;
    let mut now = 0;
    for worker in ["small-1", "small-2"] {
        assert_eq!(s.lease(worker, 1, now).unwrap().len(), 1, "{worker}");
        now += ttl;
        assert_eq!(s.expire_leases(now).unwrap(), 1, "{worker}");
        now += 60_000;
    }
    let events = s.events(&id, 0).unwrap();
    let vanished: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "expired" && e.message.contains("vanished"))
        .map(|e| e.worker.as_str())
        .collect();
    assert_eq!(vanished, ["small-1", "small-2"], "{events:?}");
    assert!(
        events.iter().any(|e| e.kind == "needs-memory"),
        "{events:?}"
    );

    // Heard from a millisecond after the lease (it beats without renewing
    // it): alive at the deadline, so not counted.
    let (mut s, id) = small_and_large_workers(5);
    assert_eq!(s.lease("small-1", 1, 0).unwrap().len(), 1);
    s.heartbeat("small-1", &[], 1);
    assert_eq!(s.expire_leases(ttl).unwrap(), 1);
    let events = s.events(&id, 0).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == "expired" && !e.message.contains("vanished")),
        "{events:?}"
    );
}

/// A new process of a known worker (another incarnation) holds none of the
/// old one's leases: they go back at once, each as a worker that vanished
/// with its shard (killed for lack of memory when the new process's cgroup
/// counts a new kill), and two of them send the shard to a larger worker; the
/// same process registering again (a reconnect) keeps its leases.
#[test]
fn a_restarted_worker_gives_back_the_leases_of_its_old_process() {
    let (mut s, id) = small_and_large_workers(5);
    let process = |incarnation: &str, oom_kills: u64| Registration {
        memory_budget: 1 << 30,
        incarnation: incarnation.into(),
        oom_kills,
        ..slots(1)
    };
    assert_eq!(
        s.register("small-1", process("first", 0), "s1".into(), 0),
        None
    );
    assert_eq!(s.lease("small-1", 1, 0).unwrap().len(), 1);
    // A reconnect of the same process.
    assert_eq!(
        s.register("small-1", process("first", 0), "s2".into(), 10),
        None
    );
    assert_eq!(s.job(&id, 10).unwrap().shards_leased, 1);
    // A new process whose cgroup counts a kill.
    let restarted = s.register("small-1", process("second", 1), "s3".into(), 20);
    let restarted = restarted.expect("a new process");
    assert_eq!(restarted.oom_kills, Some(1));
    assert_eq!(s.expire_restarted("small-1", &restarted, 20).unwrap(), 1);
    assert_eq!(s.job(&id, 20).unwrap().shards_leased, 0);
    // Again, after its backoff, without a kill: the second vanished worker.
    let now = 60_000;
    assert_eq!(s.lease("small-1", 1, now).unwrap().len(), 1);
    let restarted = s.register("small-1", process("third", 1), "s4".into(), now);
    let restarted = restarted.expect("a new process");
    assert_eq!(restarted.oom_kills, None);
    assert_eq!(s.expire_restarted("small-1", &restarted, now).unwrap(), 1);
    let events = s.events(&id, 0).unwrap();
    let notes: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "expired")
        .map(|e| e.message.as_str())
        .collect();
    assert!(notes[0].contains("killed for lack of memory"), "{notes:?}");
    assert!(notes[1].contains("restarted while running it"), "{notes:?}");
    assert!(
        events.iter().any(|e| e.kind == "needs-memory"),
        "{events:?}"
    );
    let later = now + 60_000;
    assert!(s.lease("small-2", 1, later).unwrap().is_empty());
    let grant = s.lease("large", 1, later).unwrap().remove(0);
    s.report(report_from("large", &grant, false), later + 1)
        .unwrap();
    assert_eq!(
        s.job(&id, later + 2).unwrap().state,
        proto::JobState::Succeeded as i32
    );
}
