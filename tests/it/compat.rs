//! A store written by the previous release opens and every job in it finishes.
//!
//! `tests/fixtures/store-0.1/` was written by tally 0.1 (before kinds were one
//! module each) with `tests/fixtures/make-store-0.1.sh`: three jobs finished, jobs of most kinds of that release stopped
//! part way (accepted shards, checkpoints, a hex cell-step job between stages)
//! with their leases held by a worker that was killed, and jobs still queued.
//! The new release must read the specs, plans, shards, partial results and
//! checkpoints as they were stored and finish every job with the direct answer.

use std::path::Path;
use std::time::Duration;

use crate::support::*;
use tally_kinds::Control;
use tally_kinds::spec::ValidSpec;
use tally_wire::proto::{self, JobState};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

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
