//! One stage-store prefix per data directory. A copy of a data directory (a
//! restored backup, a cloned machine) shares its original's prefix: it is
//! refused at start, naming the clash and `--new-stage-prefix`, with which
//! both then run their jobs side by side; a coordinator whose prefix was
//! taken deletes nothing there and stops; after an unclean stop, of two copies started
//! at once exactly one takes the prefix back; the flag left in a restarted
//! service's command keeps the prefix. Coordinators run as processes on one
//! shared directory store.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use tally_kinds::Control;
use tally_stage::{OwnerRecord, StageStore, StageStoreUrl, blob_key};
use tally_wire::lease::LeaseId;
use tally_wire::proto::JobState;

use crate::support::{
    ChildGuard, direct_answer, free_port, hex_cell_step, jobs_client, runtime,
    spawn_coordinator_with, spawn_worker, state, submit, wait_finished, wait_for_log_line,
};

/// A data directory, its log, and the shared stage store.
struct Node {
    data: PathBuf,
    log: PathBuf,
    stage: String,
}

impl Node {
    fn new(root: &Path, name: &str) -> Node {
        Node {
            data: root.join(name),
            log: root.join(format!("{name}.log")),
            stage: format!("file://{}", root.join("stage").display()),
        }
    }

    /// A coordinator on this data directory (sweeping every second,
    /// renewing its hold on the prefix every 200 ms), and its URL.
    fn start(&self, extra: &[&str]) -> (ChildGuard, String) {
        let port = free_port();
        let mut args = vec![
            "--stage-store",
            &self.stage,
            "--stage-sweep-every",
            "1s",
            "--stage-owner-renew-every",
            "200ms",
        ];
        args.extend_from_slice(extra);
        let child = spawn_coordinator_with(port, &self.data, &self.log, &args);
        (child, format!("http://127.0.0.1:{port}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A copy of this data directory, as `cp -r` makes it.
    fn copy(&self, root: &Path, name: &str) -> Node {
        let copy = Node::new(root, name);
        let status = Command::new("cp")
            .arg("-r")
            .arg(&self.data)
            .arg(&copy.data)
            .status()
            .unwrap();
        assert!(status.success(), "cp -r");
        copy
    }
}

/// The process's exit, if it comes within `limit`.
fn exit_within(child: &mut ChildGuard, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops a coordinator as an operator does (SIGTERM), and waits for it.
fn stop_cleanly(child: &mut ChildGuard) {
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    unsafe {
        libc::kill(child.pid() as i32, libc::SIGTERM);
    }
    let status = exit_within(child, Duration::from_secs(60)).expect("stops on SIGTERM");
    assert!(status.success(), "{status}");
}

/// The refusal a coordinator's log ends with.
fn refusal(log: &str) -> &str {
    log.lines()
        .rev()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no refusal in {log}"))
}

/// The data directories' own prefixes in the shared store.
fn prefixes(root: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root.join("stage"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("d-"))
        .collect();
    found.sort();
    found
}

/// Stop A, `cp -r A B`, start both: B is refused, naming A's data
/// directory and `--new-stage-prefix`; with that flag B gets a prefix of its
/// own, and the two hand out the same job ids and both get right answers.
#[test]
fn a_copied_data_directory_is_refused_its_originals_stage_store_prefix() {
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let a = Node::new(root.path(), "a");
        let (mut first, url) = a.start(&[]);
        let mut client = jobs_client(&url).await;
        let spec = hex_cell_step(4, 2);
        let early = submit(&mut client, &spec, "before-the-copy").await.id;
        stop_cleanly(&mut first);
        let b = a.copy(root.path(), "b");

        let (_a, a_url) = a.start(&[]);
        let mut a_client = jobs_client(&a_url).await;
        let (mut refused, _) = b.start(&[]);
        let status = exit_within(&mut refused, Duration::from_secs(60))
            .expect("the copy is refused at start");
        assert_eq!(status.code(), Some(2), "{}", b.log());
        let log = b.log();
        let said = refusal(&log);
        assert!(
            said.contains(&format!(
                "belongs to the data directory {}",
                a.data.display()
            )) && said.contains("a copy")
                && said.contains("--new-stage-prefix"),
            "{said}"
        );
        assert_eq!(prefixes(root.path()).len(), 1);

        let (_b, b_url) = b.start(&["--new-stage-prefix"]);
        let mut b_client = jobs_client(&b_url).await;
        assert_eq!(prefixes(root.path()).len(), 2, "B has a prefix of its own");
        let logs = root.path().join("workers.log");
        let _wa = spawn_worker(&a_url, "wa", 2, &[], &logs);
        let _wb = spawn_worker(&b_url, "wb", 2, &[], &logs);
        let a_job = submit(&mut a_client, &spec, "after-a").await.id;
        let b_job = submit(&mut b_client, &spec, "after-b").await.id;
        assert_eq!(a_job, b_job, "both directories hand out the same next id");
        for client in [&mut a_client, &mut b_client] {
            for id in [early.as_str(), a_job.as_str()] {
                let job = wait_finished(client, id, Duration::from_secs(240)).await;
                assert_eq!(state(&job), JobState::Succeeded, "{id}: {}", job.error);
                assert_eq!(job.answer, direct_answer(&spec));
            }
        }
    });
}

/// A coordinator whose prefix a copy of its data directory took (as one
/// would once this coordinator stalled past its renewals, or a coordinator
/// restored from its replica) deletes nothing there and stops serving at
/// once, saying why.
#[test]
fn a_coordinator_whose_prefix_was_taken_deletes_nothing_there_and_stops() {
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let a = Node::new(root.path(), "a");
        let (mut a_child, url) = a.start(&[]);
        jobs_client(&url).await;
        let own = prefixes(root.path()).pop().expect("the prefix of A");
        let store = StageStore::open(&StageStoreUrl::File(own))
            .unwrap()
            .unwrap();
        let control = Control::default();
        let unreferenced = |job: &str| blob_key(&LeaseId::new(job, 1, 0, 1), "output");
        let listed = async |key: &str| {
            let keys = store.list(Some("jobs")).await.unwrap();
            keys.iter().any(|k| k == key)
        };

        // While A holds its prefix, the sweep deletes what nothing references.
        let first = unreferenced("job-900001");
        store
            .put(&first, &b"stage data"[..], &control)
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while listed(&first).await {
            assert!(Instant::now() < deadline, "the sweep never deleted {first}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let latest = store.owner().await.unwrap().expect("A's owner record");
        let copy = OwnerRecord {
            epoch: latest.epoch + 1_000,
            nonce: "0123456789abcdef".into(),
            data: "/srv/copy-of-a".into(),
            since_ms: latest.since_ms,
            released: false,
            serving: latest.serving,
            ids_below: latest.ids_below,
            restored_at: None,
        };
        assert!(store.put_owner(&copy).await.unwrap());
        let second = unreferenced("job-900002");
        store
            .put(&second, &b"the copy's stage data"[..], &control)
            .await
            .unwrap();
        // A's next renewal finds the prefix taken: it stops, deleting nothing.
        let status =
            tokio::task::block_in_place(|| exit_within(&mut a_child, Duration::from_secs(60)))
                .expect("A stopped once its prefix was taken");
        assert!(!status.success());
        assert!(
            listed(&second).await,
            "a blob under a prefix A lost was deleted"
        );
        let log = a.log();
        assert!(
            log.contains("lost its stage-store prefix")
                && log.contains("was taken by the data directory /srv/copy-of-a"),
            "{log}"
        );
    });
}

/// A coordinator killed (its hold on the prefix not released), its data
/// directory copied, and both copies started at once: each watches the hold
/// go unrenewed, one takes the prefix and serves, the other is refused.
#[test]
fn after_an_unclean_stop_one_of_two_copies_takes_the_prefix_back_and_the_other_is_refused() {
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let a = Node::new(root.path(), "a");
        let (mut killed, url) = a.start(&[]);
        jobs_client(&url).await;
        killed.kill9();
        let b = a.copy(root.path(), "b");

        let (mut a_child, a_url) = a.start(&[]);
        let (mut b_child, b_url) = b.start(&[]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let (loser, winner, winner_url) = loop {
            if let Some(status) = a_child.0.try_wait().unwrap() {
                break ((status, &a), (&mut b_child, &b), b_url.clone());
            }
            if let Some(status) = b_child.0.try_wait().unwrap() {
                break ((status, &b), (&mut a_child, &a), a_url.clone());
            }
            assert!(
                Instant::now() < deadline,
                "both copies serve on one prefix:\n{}\n{}",
                a.log(),
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (status, node) = loser;
        assert_eq!(status.code(), Some(2), "{}", node.log());
        let log = node.log();
        let said = refusal(&log);
        assert!(
            said.contains("copy") && said.contains("--new-stage-prefix"),
            "{said}"
        );
        let (child, node) = winner;
        jobs_client(&winner_url).await;
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the copy that took the prefix stopped: {}",
            node.log()
        );
        let limit = Duration::from_secs(60);
        wait_for_log_line(
            &node.log,
            &["watching the prefix before taking it back"],
            limit,
        )
        .await;
    });
}

/// `--new-stage-prefix` left in a service's command: each restart of the
/// data directory that still holds its prefix keeps it (after a clean stop,
/// and after a kill once its hold goes unrenewed), saying the flag was
/// ignored, so the blobs under it are never orphaned.
#[test]
fn new_stage_prefix_left_in_a_service_command_keeps_the_prefix_at_each_restart() {
    runtime().block_on(async {
        let root = tempfile::tempdir().unwrap();
        let a = Node::new(root.path(), "a");
        let (mut first, url) = a.start(&[]);
        jobs_client(&url).await;
        stop_cleanly(&mut first);
        let own = prefixes(root.path());
        assert_eq!(own.len(), 1);

        let (mut again, url) = a.start(&["--new-stage-prefix"]);
        jobs_client(&url).await;
        assert_eq!(
            prefixes(root.path()),
            own,
            "a clean restart drew a new prefix"
        );
        let limit = Duration::from_secs(60);
        wait_for_log_line(&a.log, &["--new-stage-prefix ignored"], limit).await;
        again.kill9();

        let (_third, url) = a.start(&["--new-stage-prefix"]);
        jobs_client(&url).await;
        assert_eq!(
            prefixes(root.path()),
            own,
            "a restart after a kill drew a new prefix"
        );
        // Said before it served, maybe written after: waited for.
        let deadline = Instant::now() + limit;
        while a.log().matches("--new-stage-prefix ignored").count() < 2 {
            assert!(Instant::now() < deadline, "{}", a.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}
