//! A store holding jobs whose specs this release refuses (accepted by older
//! releases): each fails alone at load, once, and stays readable; the other
//! jobs load and run.

use std::sync::Arc;

use serde_json::{Value, json};
use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::hex::{HexGraphPlace, HexPlan, HexSpec};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_wire::proto::{self, JobState};

use crate::error::CoordinatorError;
use crate::records::{job_key, shard_prefix};
use crate::store::{Batch, MemoryStore, Store, Tree};

use super::tests::{direct_answer, registered, report_from, submit};
use super::{ListPage, Scheduler, SchedulerConfig};

fn hex(exact: bool, points_per_shard: u32) -> JobSpec {
    JobSpec::new(HexSpec {
        side: 4,
        modulus: tally_kernels::hex::DEFAULT_MODULUS,
        plan: HexPlan::Points,
        shards_per_step: 0,
        exact,
        points_per_shard,
        graph: HexGraphPlace::Worker,
        graph_parts: 0,
    })
}

fn kayles(pins: u64) -> JobSpec {
    JobSpec::new(KaylesSpec { pins, digits: 9 })
}

/// Rewrites the spec of a stored job record as an older release wrote it.
fn store_spec_as_older_release(store: &dyn Store, id: &str, edit: impl FnOnce(&mut Value)) {
    let bytes = store.get(Tree::Jobs, &job_key(id)).unwrap().unwrap();
    let mut record: Value = serde_json::from_slice(&bytes).unwrap();
    edit(&mut record["spec"]);
    let mut batch = Batch::default();
    batch.put(
        Tree::Jobs,
        job_key(id),
        serde_json::to_vec(&record).unwrap(),
    );
    store.commit(batch).unwrap();
}

fn load(store: &Arc<dyn Store>, now_ms: u64) -> Scheduler {
    registered(Scheduler::load(store.clone(), SchedulerConfig::default(), now_ms).unwrap())
}

fn state(job: &proto::Job) -> JobState {
    JobState::try_from(job.state).unwrap()
}

/// Leases and reports every shard there is to lease, until none is left.
fn run_all(s: &mut Scheduler, now_ms: u64) {
    loop {
        let grants = s.lease("w", 100, now_ms).unwrap();
        if grants.is_empty() {
            return;
        }
        for g in &grants {
            s.report(report_from("w", g, false), now_ms).unwrap();
        }
    }
}

#[test]
fn a_stored_spec_this_release_refuses_fails_its_job_alone_once_and_the_rest_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = load(&store, 0);
    let finished = submit(&mut s, &hex(false, 2));
    run_all(&mut s, 1);
    let answer = s.job(&finished, 1).unwrap().answer;
    assert_eq!(answer, direct_answer(&hex(false, 2)).line);
    let runnable = submit(&mut s, &kayles(20));
    // An exact job part way through, submitted under an idempotency key.
    let exact = {
        let spec = ValidSpec::new(hex(true, 1)).unwrap();
        let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
        let key = Some("exact-key".to_string());
        s.submit(spec, plan, key, Vec::new(), 0).unwrap().0.id
    };
    let grant = s
        .lease("w", 100, 1)
        .unwrap()
        .into_iter()
        .find(|g| g.lease.job == exact)
        .unwrap();
    s.report(report_from("w", &grant, false), 1).unwrap();
    let odd_points = submit(&mut s, &hex(false, 2));
    let unknown_kind = submit(&mut s, &kayles(12));
    let deleted = submit(&mut s, &kayles(10));
    s.delete(&deleted, true, 2).unwrap();
    drop(s);

    // What older releases accepted and this one refuses.
    store_spec_as_older_release(store.as_ref(), &exact, |spec| {
        spec["modulus"] = json!(1_000_003)
    });
    store_spec_as_older_release(store.as_ref(), &odd_points, |spec| {
        spec["points_per_shard"] = json!(3)
    });
    store_spec_as_older_release(store.as_ref(), &unknown_kind, |spec| {
        *spec = json!({"kind": "dominoes", "n": 3})
    });
    store_spec_as_older_release(store.as_ref(), &deleted, |spec| {
        spec["pins"] = json!("many")
    });
    store_spec_as_older_release(store.as_ref(), &finished, |spec| {
        spec["points_per_shard"] = json!(3)
    });

    let mut s = load(&store, 10);
    let failed = |s: &Scheduler, id: &str, why: &str| {
        let job = s.job(id, 11).unwrap();
        assert_eq!(state(&job), JobState::Failed, "{id}: {job:?}");
        assert!(
            job.error
                .starts_with("this release refuses the stored spec: ")
                && job.error.contains(why),
            "{id}: {}",
            job.error
        );
        let events = s.events(id, 0).unwrap();
        let last = events.last().unwrap();
        assert_eq!((last.kind.as_str(), &last.message), ("failed", &job.error));
        assert_eq!(s.result(id).unwrap().error, job.error);
        job
    };
    let exact_job = failed(&s, &exact, "an exact hex count takes no modulus");
    assert_eq!(exact_job.kind, "hex");
    assert_eq!(
        exact_job.shards_done, 1,
        "the shards it had done are counted"
    );
    assert!(exact_job.description.contains("refuses"), "{exact_job:?}");
    failed(
        &s,
        &odd_points,
        "points per shard must be 16, 8, 4, 2 or 1, got 3",
    );
    failed(&s, &unknown_kind, "dominoes");
    let gone = s.job(&deleted, 11).unwrap_err().to_string();
    assert!(gone.contains("was deleted"), "{gone}");
    // A finished job keeps its state and answer.
    let kept = s.job(&finished, 11).unwrap();
    assert_eq!(
        (state(&kept), kept.answer.as_str()),
        (JobState::Succeeded, answer.as_str())
    );
    assert!(
        kept.shards_total > 0 && kept.shards_done == kept.shards_total,
        "{kept:?}"
    );
    assert!(kept.description.contains("got 3"), "{kept:?}");

    // Listed, filtered, and read like any other job.
    let listed: Vec<String> = s.list(11).into_iter().map(|j| j.id).collect();
    let all = [&finished, &runnable, &exact, &odd_points, &unknown_kind];
    assert_eq!(listed, all.map(String::clone));
    let page = |states: Vec<crate::records::JobState>, kind: Option<&str>| {
        let request = ListPage {
            limit: 10,
            states,
            kind: kind.map(String::from),
            ..ListPage::default()
        };
        let (jobs, _) = s.list_page(&request, 11);
        jobs.into_iter().map(|j| j.id).collect::<Vec<_>>()
    };
    let failed_state = vec![crate::records::JobState::Failed];
    assert_eq!(
        page(failed_state, None),
        [&exact, &odd_points, &unknown_kind].map(String::clone)
    );
    assert_eq!(
        page(Vec::new(), Some("hex")),
        [&finished, &exact, &odd_points].map(String::clone)
    );
    let cancel = s.cancel(&exact, 11).unwrap_err();
    assert!(
        matches!(cancel, CoordinatorError::FailedPrecondition(_)),
        "{cancel}"
    );
    let spec = ValidSpec::new(hex(true, 1)).unwrap();
    let again = s.job_for_key("exact-key", &spec, 11).unwrap_err();
    assert!(
        matches!(&again, CoordinatorError::AlreadyExists(m) if m.contains("refuses")),
        "{again}"
    );

    // The other job runs to its answer.
    run_all(&mut s, 12);
    let done = s.job(&runnable, 12).unwrap();
    assert_eq!(state(&done), JobState::Succeeded);
    assert_eq!(done.answer, direct_answer(&kayles(20)).line);
    let events_of_exact = s.events(&exact, 0).unwrap().len();
    drop(s);

    // The failure was written: the next load finds it as it was, and writes
    // nothing more about it.
    let mut s = load(&store, 20);
    let exact_again = s.job(&exact, 21).unwrap();
    assert_eq!(exact_again.error, exact_job.error);
    assert_eq!(exact_again.finished_ms, exact_job.finished_ms);
    assert_eq!(s.events(&exact, 0).unwrap().len(), events_of_exact);

    // Deleted as any finished job is, and still deleted after a load.
    s.delete(&exact, false, 22).unwrap();
    for tree in [Tree::Shards, Tree::Events, Tree::Blobs] {
        let left = store.scan_prefix(tree, &shard_prefix(&exact)).unwrap();
        assert!(left.is_empty(), "{tree:?}");
    }
    let s = load(&store, 30);
    let gone = s.job(&exact, 31).unwrap_err().to_string();
    assert!(gone.contains("was deleted"), "{gone}");
    assert_eq!(s.list(31).len(), 4);
}
