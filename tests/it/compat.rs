//! A store written by the previous release opens and every job in it finishes.
//!
//! `tests/fixtures/store-0.1/` was written by tally 0.1 (before kinds were one
//! module each) with `tests/fixtures/make-store-0.1.sh`: three jobs finished, jobs of most kinds of that release stopped
//! part way (accepted shards, checkpoints, a hex cell-step job between stages)
//! with their leases held by a worker that was killed, and jobs still queued.
//! The new release must read the specs, plans, shards, partial results and
//! checkpoints as they were stored and finish every job with the direct answer.
//! A job whose stored spec a stricter check of this release refuses fails
//! alone, and the coordinator serves the others.

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use tally_kinds::Control;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_wire::proto::{self, JobState};

fn direct(job: &proto::Job) -> String {
    let spec = ValidSpec::try_from(job.spec.as_ref().expect("a stored spec")).unwrap();
    spec.compute_direct(2, &Control::new()).unwrap().line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_by_the_previous_release_resumes_and_finishes() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-0.1");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&fixture, &data);
    // git keeps no empty directory: sled's own.
    std::fs::create_dir_all(data.join("blobs")).unwrap();

    let coordinator = start_coordinator(Some(&data)).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let before = client
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .jobs;
    let count = |s: JobState| before.iter().filter(|j| state(j) == s).count();
    assert_eq!(before.len(), 8, "the fixture's jobs");
    assert_eq!(count(JobState::Succeeded), 3, "finished before the upgrade");
    assert!(
        before
            .iter()
            .any(|j| !finished(j) && j.shards_done > 0 && j.shards_done < j.shards_total),
        "a job stopped part way"
    );
    assert!(
        before
            .iter()
            .any(|j| j.kind == "hex" && j.stage > 1 && !finished(j)),
        "a cell-step job between stages"
    );
    let kinds: std::collections::BTreeSet<&str> = before.iter().map(|j| j.kind.as_str()).collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["blocks", "hex", "kayles", "pegs", "sliders"]
    );

    // The answers stored by the previous release read back as they were.
    for job in before.iter().filter(|j| state(j) == JobState::Succeeded) {
        assert_eq!(job.answer, direct(job), "{}", job.id);
    }

    // The killed worker's leases expire; new workers finish every job.
    let workers = Workers::start(&url, 2, 2);
    for job in &before {
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(600)).await;
        assert_eq!(
            state(&done),
            JobState::Succeeded,
            "{}: {}",
            job.id,
            done.error
        );
        assert_eq!(
            done.answer,
            direct(&done),
            "{} ({})",
            job.id,
            job.description
        );
        assert!(done.shards_done >= job.shards_done, "{}", job.id);
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

/// A hex points job of side 4, each shard `points` points (0: chosen).
fn hex_points(exact: bool, points: u32) -> tally_kinds::spec::JobSpec {
    tally_kinds::spec::JobSpec::new(tally_kinds::hex::HexSpec {
        side: 4,
        modulus: tally_kernels::hex::DEFAULT_MODULUS,
        plan: tally_kinds::hex::HexPlan::Points,
        shards_per_step: 0,
        exact,
        points_per_shard: points,
        graph: tally_kinds::hex::HexGraphPlace::Worker,
        graph_parts: 0,
    })
}

/// Rewrites the spec of a stopped coordinator's stored job as an older
/// release stored it (through the store, which keeps its own digest).
fn store_spec_as_older_release(data: &Path, id: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    use tally_coordinator::records::job_key;
    use tally_coordinator::store::{Batch, SledStore, Store, Tree};
    let store = SledStore::open(data).expect("the stopped coordinator's store opens");
    let bytes = store.get(Tree::Jobs, &job_key(id)).unwrap().unwrap();
    let mut record: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    edit(&mut record["spec"]);
    let mut batch = Batch::default();
    batch.put(
        Tree::Jobs,
        job_key(id),
        serde_json::to_vec(&record).unwrap(),
    );
    store.commit(batch).unwrap();
}

/// `tally status ID` as a user runs it: its exit code and output.
fn status_text(url: &str, id: &str) -> (Option<i32>, String) {
    let out = std::process::Command::new(tally_bin())
        .args(["status", id, "--coordinator", url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (
        out.status.code(),
        text + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A store holding jobs whose specs older releases accepted and this one
/// refuses (an exact hex count with a modulus; hex points per shard 3): the
/// `tally coordinator` process starts on it, each such job fails alone with
/// the reason, written once (the next start says the same, and logs no new
/// failure), and another job of the store finishes with its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_spec_this_release_refuses_fails_its_job_alone_and_the_rest_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");

    // Three jobs stored, no worker to run them.
    let mut coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    let exact = submit(&mut client, &hex_points(true, 0), "").await.id;
    let odd_points = submit(&mut client, &hex_points(false, 2), "").await.id;
    let kayles = JobSpec::new(KaylesSpec {
        pins: 40,
        digits: 9,
    });
    let runnable = submit(&mut client, &kayles, "").await.id;
    coordinator.kill9();
    store_spec_as_older_release(&data, &exact, |spec| {
        spec["modulus"] = serde_json::json!(1_000_003)
    });
    store_spec_as_older_release(&data, &odd_points, |spec| {
        spec["points_per_shard"] = serde_json::json!(3)
    });

    let mut coordinator = spawn_coordinator(port, &data, &log);
    let _worker = spawn_worker(&url, "w1", 2, &[], &log);
    let mut client = jobs_client(&url).await;
    let refused = [
        (&exact, "an exact hex count takes no modulus"),
        (
            &odd_points,
            "points per shard must be 16, 8, 4, 2 or 1, got 3",
        ),
    ];
    let mut statuses = Vec::new();
    for (id, why) in refused {
        let (code, text) = status_text(&url, id);
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains(&format!("{id}  failed"))
                && text.contains("error     this release refuses the stored spec: ")
                && text.contains(why),
            "{text}"
        );
        statuses.push(text);
    }
    let done = wait_finished(&mut client, &runnable, Duration::from_secs(120)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&kayles));

    // Written once: the next start reads the failure back as it was.
    coordinator.kill9();
    let _coordinator = spawn_coordinator(port, &data, &log);
    let mut client = jobs_client(&url).await;
    for ((id, _), before) in refused.iter().zip(&statuses) {
        let (_, text) = status_text(&url, id);
        let error = |t: &str| {
            t.lines()
                .find(|l| l.contains("error"))
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(error(&text), error(before), "{text}");
        let failures = events(&mut client, id)
            .await
            .into_iter()
            .filter(|e| e.kind == "failed")
            .count();
        assert_eq!(failures, 1, "{id}");
    }
}
