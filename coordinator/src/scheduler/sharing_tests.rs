//! A cluster shared by users, driven without clocks or networks: ownership,
//! quotas, the fair share and the audit log.

use std::collections::HashMap;
use std::sync::Arc;

use tally_kinds::Control;
use tally_kinds::cache::KernelCache;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_kinds::synthetic::SyntheticSpec;

use crate::error::CoordinatorError;
use crate::store::MemoryStore;
use crate::users::{User, Users, UsersSource, Visibility, token_hash_text};

use super::tests::{registered, report_from};
use super::{Access, Grant, Scheduler, SchedulerConfig};

/// Users alice (weight 1), bob (weight 3) and carol (two slots, two jobs at
/// most), and the client token's admin.
fn team(visibility: Visibility) -> Arc<Users> {
    let text = [
        "alice user {a} weight=1",
        "bob user {b} weight=3",
        "carol user {c} slots=2 queued=2",
    ]
    .join("\n")
    .replace("{a}", &token_hash_text("a-token"))
    .replace("{b}", &token_hash_text("b-token"))
    .replace("{c}", &token_hash_text("c-token"));
    let source = UsersSource {
        client_token: Some("admin-token".into()),
        worker_token: Some("worker-token".into()),
        visibility,
        ..UsersSource::default()
    };
    Arc::new(source.users_from("users", Some(&text)).unwrap())
}

fn scheduler(visibility: Visibility) -> (Scheduler, Arc<Users>) {
    let store = Arc::new(MemoryStore::new());
    let mut s = registered(Scheduler::load(store, SchedulerConfig::default(), 0).unwrap());
    let users = team(visibility);
    s.set_users(users.clone());
    (s, users)
}

fn user(users: &Users, name: &str) -> User {
    (**users.named(name).unwrap()).clone()
}

fn synthetic(shards: u64) -> ValidSpec {
    ValidSpec::new(JobSpec::new(SyntheticSpec {
        shards,
        terms_per_shard: 1,
    }))
    .unwrap()
}

fn submit_as(
    s: &mut Scheduler,
    who: &User,
    spec: ValidSpec,
    now_ms: u64,
) -> crate::error::Result<String> {
    let plan = spec.prepare(&KernelCache::new(), &Control::new()).unwrap();
    s.submit_by(who, spec, plan, None, Vec::new(), now_ms)
        .map(|(job, _)| job.id)
}

#[test]
fn a_user_changes_only_their_own_jobs_and_every_refusal_is_audited() {
    let (mut s, users) = scheduler(Visibility::All);
    let (alice, bob) = (user(&users, "alice"), user(&users, "bob"));
    let admin = User::admin();
    let job = submit_as(&mut s, &alice, synthetic(4), 1).unwrap();
    assert_eq!(s.job(&job, 1).unwrap().owner, "alice");

    // Bob sees it, but may not cancel, delete, or read its events.
    s.authorize(&bob, &job, Access::See, 2).unwrap();
    let denied = |r: crate::error::Result<()>| match r {
        Err(CoordinatorError::PermissionDenied(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let cancel = denied(s.cancel_by(&bob, &job, 3).map(|_| ()));
    assert_eq!(
        cancel,
        format!("bob may not cancel job {job}: it is alice's (only its owner or an admin may)")
    );
    denied(s.delete_by(&bob, &job, true, 4));
    denied(s.authorize(&bob, &job, Access::Events, 5));
    assert!(
        !s.job(&job, 6).unwrap().state_name().contains("CANCELLED"),
        "nothing changed"
    );

    // The owner and an admin may.
    s.authorize(&alice, &job, Access::Events, 7).unwrap();
    s.cancel_by(&admin, &job, 8).unwrap();
    s.delete_by(&alice, &job, false, 9).unwrap();

    let log: Vec<(String, String, bool)> = (s.audit_log(0, 100, None).unwrap().into_iter())
        .map(|e| (e.user, e.action, e.done))
        .collect();
    let entry = |u: &str, a: &str, done| (u.to_string(), a.to_string(), done);
    assert_eq!(
        log,
        [
            entry("alice", "submit", true),
            entry("bob", "cancel", false),
            entry("bob", "delete", false),
            entry("bob", "events", false),
            entry("admin", "cancel", true),
            entry("alice", "delete", true),
        ]
    );
    // A user's own entries only.
    assert_eq!(s.audit_log(0, 100, Some("bob")).unwrap().len(), 3);
    assert_eq!(s.audit_log(2, 100, None).unwrap()[0].seq, 2);
}

#[test]
fn a_coordinator_that_shows_users_their_own_jobs_hides_the_others() {
    let (mut s, users) = scheduler(Visibility::Own);
    let (alice, bob) = (user(&users, "alice"), user(&users, "bob"));
    let job = submit_as(&mut s, &alice, synthetic(2), 1).unwrap();
    submit_as(&mut s, &bob, synthetic(2), 1).unwrap();
    let refused = s.authorize(&bob, &job, Access::See, 2).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("shows users only their own jobs"),
        "{refused}"
    );
    let page = super::ListPage {
        limit: 10,
        ..super::ListPage::default()
    };
    let (listed, _) = s.list_page_for(&bob, page.clone(), 3).unwrap();
    assert_eq!(
        listed.iter().map(|j| j.owner.as_str()).collect::<Vec<_>>(),
        ["bob"]
    );
    let (all, _) = s.list_page_for(&User::admin(), page.clone(), 3).unwrap();
    assert_eq!(all.len(), 2);
    let others = super::ListPage {
        owner: Some("alice".into()),
        ..page
    };
    assert!(matches!(
        s.list_page_for(&bob, others, 4),
        Err(CoordinatorError::PermissionDenied(_))
    ));
}

#[test]
fn quotas_refuse_submissions_with_the_numbers_and_hold_leases_to_the_slot_quota() {
    let (mut s, users) = scheduler(Visibility::All);
    let carol = user(&users, "carol");
    let first = submit_as(&mut s, &carol, synthetic(8), 1).unwrap();
    submit_as(&mut s, &carol, synthetic(8), 1).unwrap();
    match submit_as(&mut s, &carol, synthetic(8), 2) {
        Err(CoordinatorError::ResourceExhausted(m)) => assert_eq!(
            m,
            "carol has 2 jobs queued or running, and their quota is 2: wait for one to finish, or cancel one"
        ),
        other => panic!("expected the queued-jobs quota, got {other:?}"),
    }
    let last = s.audit_log(0, 100, None).unwrap().pop().unwrap();
    assert_eq!((last.action.as_str(), last.done), ("submit", false));

    // Four free slots, two for carol; the rest of her shards wait, saying why.
    let grants = s.lease("w", 4, 3).unwrap();
    assert_eq!(grants.len(), 2);
    let waiting = s.job(&first, 4).unwrap().waiting;
    assert!(
        waiting.contains("carol's jobs hold 2 slot(s), their quota is 2"),
        "{waiting}"
    );
    assert_eq!(
        s.slot_demand().slots,
        2,
        "the autoscaler sees only what the quota lets run"
    );
    // Another user's work takes the free slots.
    let alice = user(&users, "alice");
    submit_as(&mut s, &alice, synthetic(8), 5).unwrap();
    assert_eq!(s.lease("w", 2, 6).unwrap().len(), 2);
}

/// The shards a worker runs, with when each ends.
type Running = Vec<(u64, Grant)>;

/// Runs one worker of 4 slots from `from_ms` to `until_ms`, each shard
/// taking `shard_ms`, reporting and leasing every 50 ms; returns the most
/// slots each user's jobs held at once.
fn run_worker(
    s: &mut Scheduler,
    running: &mut Running,
    from_ms: u64,
    until_ms: u64,
    shard_ms: u64,
) -> HashMap<String, u32> {
    let mut most: HashMap<String, u32> = HashMap::new();
    let mut now = from_ms;
    while now < until_ms {
        s.meter(now);
        let (done, still): (Vec<_>, Vec<_>) = std::mem::take(running)
            .into_iter()
            .partition(|(end, _)| *end <= now);
        *running = still;
        for (_, grant) in done {
            s.report(report_from("w", &grant, false), now).unwrap();
        }
        s.meter(now);
        let free = 4 - running.len() as u32;
        for grant in s.lease("w", free, now).unwrap() {
            running.push((now + shard_ms, grant));
        }
        let mut held: HashMap<String, u32> = HashMap::new();
        for (_, grant) in running.iter() {
            *held
                .entry(s.job(&grant.lease.job, now).unwrap().owner)
                .or_default() += 1;
        }
        for (owner, n) in held {
            let top = most.entry(owner).or_default();
            *top = (*top).max(n);
        }
        now += 50;
    }
    most
}

#[test]
fn slot_time_goes_to_users_in_the_ratio_of_their_weights_and_a_user_alone_gets_every_slot() {
    let (mut s, users) = scheduler(Visibility::All);
    let (alice, bob) = (user(&users, "alice"), user(&users, "bob"));
    // Alone, alice takes all four slots.
    submit_as(&mut s, &alice, synthetic(2_000), 0).unwrap();
    let mut running = Running::new();
    let most = run_worker(&mut s, &mut running, 0, 5_000, 1_000);
    assert_eq!(most.get("alice"), Some(&4));
    // Bob arrives: with alice's past slot time decayed only a little, he takes
    // every slot that frees until his usage over weight meets hers; then
    // slot time goes 1:3. The decayed usage is what the share compares.
    submit_as(&mut s, &bob, synthetic(2_000), 5_000).unwrap();
    run_worker(&mut s, &mut running, 5_000, 65_000, 1_000);
    let alice_used = s.account("alice").decayed_slot_seconds;
    let bob_used = s.account("bob").decayed_slot_seconds;
    let ratio = bob_used / alice_used;
    assert!(
        (2.7..=3.3).contains(&ratio),
        "bob {bob_used} s, alice {alice_used} s: ratio {ratio}"
    );
    // Every slot was busy the whole time: the metered slot time adds up.
    let total = s.account("alice").slot_seconds + s.account("bob").slot_seconds;
    assert!(
        (total - 4.0 * 65.0).abs() < 4.0 * 1.0 + 1e-6,
        "{total} slot-seconds"
    );
}

#[test]
fn users_submitting_together_share_the_slots_by_weight_from_the_first_lease() {
    let (mut s, users) = scheduler(Visibility::All);
    let (alice, bob) = (user(&users, "alice"), user(&users, "bob"));
    submit_as(&mut s, &alice, synthetic(2_000), 0).unwrap();
    submit_as(&mut s, &bob, synthetic(2_000), 0).unwrap();
    let most = run_worker(&mut s, &mut Running::new(), 0, 40_000, 1_000);
    let (a, b) = (
        s.account("alice").slot_seconds,
        s.account("bob").slot_seconds,
    );
    assert!((2.7..=3.3).contains(&(b / a)), "bob {b} s, alice {a} s");
    assert!(most["bob"] >= 3, "{most:?}");
}

#[test]
fn a_worker_leases_ahead_only_while_one_user_has_work_and_its_slots_are_what_is_metered() {
    let (mut s, users) = scheduler(Visibility::All);
    let (alice, bob) = (user(&users, "alice"), user(&users, "bob"));
    let job = submit_as(&mut s, &alice, synthetic(400), 0).unwrap();
    // Shards of a millisecond: a worker may queue some beyond its slots.
    for grant in s.lease("w", 4, 0).unwrap() {
        let mut report = report_from("w", &grant, false);
        report.result.as_mut().unwrap().compute_us = 1_000;
        s.report(report, 1).unwrap();
    }
    let alone = s.lease_ahead("w", 4, 64, 2).unwrap().len();
    assert!(alone > 4, "alone, alice's shards are leased ahead: {alone}");
    // Twenty shards held on four slots for a second: four slot-seconds.
    s.meter(2);
    let before = s.account("alice").slot_seconds;
    s.meter(1_002);
    let metered = s.account("alice").slot_seconds - before;
    assert!(
        (metered - 4.0).abs() < 1e-3,
        "{alone} shards on 4 slots for 1 s: {metered} slot-s"
    );
    assert_eq!(
        s.job(&job, 1_002).unwrap().slot_seconds,
        s.account("alice").slot_seconds
    );
    // With bob's work waiting too, a worker leases only its free slots.
    submit_as(&mut s, &bob, synthetic(400), 1_003).unwrap();
    assert_eq!(s.lease_ahead("v", 4, 64, 1_004).unwrap().len(), 4);
}
