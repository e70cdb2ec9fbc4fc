//! A full disk under the coordinator's store: work pauses with a clear
//! "disk is full" status (no raw error), resumes by itself once space is
//! freed, without a restart, and every answer is the direct kernel's. Needs
//! root to mount a small tmpfs; outside CI it says so and passes without it.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto::JobState;

/// A small tmpfs, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path, bytes: u64) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs(path.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Writes `path` until the filesystem is full.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a; 16 << 10];
    let mut written = 0;
    while file
        .write_all(&chunk)
        .and_then(|()| file.sync_data())
        .is_ok()
    {
        written += chunk.len() as u64;
    }
    written
}

fn kayles(pins: u64) -> JobSpec {
    JobSpec::new(KaylesSpec { pins, digits: 9 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_pauses_work_and_it_resumes_by_itself_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    let _tmpfs = match Tmpfs::mount(&mount, 8 << 20) {
        Ok(t) => t,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "skipped: cannot mount a tmpfs here ({why}); run as root to test a full disk"
            );
            return;
        }
        Err(why) => panic!("CI is set but a tmpfs cannot be mounted: {why}"),
    };
    let started = Instant::now();
    let at = || format!("{:.1} s", started.elapsed().as_secs_f64());
    let coordinator = start_coordinator(Some(&mount.join("data"))).await;
    let mut client = jobs_client(&coordinator.url()).await;
    // Each job with its pins, to check its answer at the end.
    let mut submitted = vec![(submit(&mut client, &kayles(300), "").await, 300)];
    let filled = fill(&mount.join("filler"));
    eprintln!("{}: filled the disk ({filled} bytes)", at());

    // Submitting writes the store: once the disk is full, it is refused with
    // a status that says so.
    let mut refusal = None;
    for pins in (10..400).step_by(2) {
        let request = tally_wire::proto::SubmitRequest {
            spec: Some(proto_spec(&kayles(pins))),
            idempotency_key: String::new(),
            ..Default::default()
        };
        match client.submit(request).await {
            Ok(response) => submitted.push((response.into_inner().job.unwrap(), pins)),
            Err(status) => {
                refusal = Some(status);
                break;
            }
        }
    }
    let refusal = refusal.expect("a full disk refuses a submission");
    eprintln!("{}: refused: {}", at(), refusal.message());
    assert_eq!(
        refusal.code(),
        tonic::Code::ResourceExhausted,
        "{refusal:?}"
    );
    assert!(
        refusal.message().contains("is full") && !refusal.message().contains('\n'),
        "{}",
        refusal.message()
    );

    // Workers start while the disk is still full (their leases are refused).
    let workers = Workers::start(&coordinator.url(), 2, 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::fs::remove_file(mount.join("filler")).unwrap();
    eprintln!("{}: freed the space", at());

    // Without a restart: new work is accepted and everything finishes right.
    submitted.push((submit(&mut client, &kayles(1000), "").await, 1000));
    for (job, pins) in &submitted {
        let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
        assert_eq!(
            state(&done),
            JobState::Succeeded,
            "{}: {}",
            job.id,
            done.error
        );
        assert_eq!(done.answer, direct_answer(&kayles(*pins)), "{}", job.id);
    }
    eprintln!(
        "{}: {} jobs finished, each equal to the direct kernel",
        at(),
        submitted.len()
    );
    workers.stop().await;
    let limit = tally_coordinator::server::SHUTDOWN_GRACE
        + tally_coordinator::server::STORE_CLOSE_LIMIT
        + Duration::from_secs(5);
    tokio::time::timeout(limit, coordinator.shutdown())
        .await
        .expect("the shutdown ends within its bound");
}

/// A worker whose spill directory is full: its shards that spill stop with
/// a reason that says so, count no failed attempt, and the job waits saying
/// why until a worker with room runs them; the answer is the kernel alone's.
/// Needs root, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_spill_disk_makes_the_job_wait_and_the_shard_runs_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    let _tmpfs = match Tmpfs::mount(&mount, 1 << 20) {
        Ok(t) => t,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!(
                "skipped: cannot mount a tmpfs here ({why}); run as root to test a full disk"
            );
            return;
        }
        Err(why) => panic!("CI is set but a tmpfs cannot be mounted: {why}"),
    };
    let full = mount.join("spill");
    let filler = mount.join("filler");
    let took_its_directory = move || async move {
        // The worker has taken its directory; now nothing more fits.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_dir(&full).map_or(true, |mut d| d.next().is_none()) {
            assert!(
                Instant::now() < deadline,
                "the worker never took its spill directory"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        fill(&filler);
    };
    let spill = mount.join("spill");
    waits_for_room_and_runs_where_there_is(
        dir.path(),
        move |config| config.spill_dir = spill.clone(),
        took_its_directory,
        "No space left",
    )
    .await;
}

/// The same with a worker's `--spill-limit` below what its shards spill:
/// no root needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spill_limit_makes_the_job_wait_and_the_shard_runs_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("limited");
    waits_for_room_and_runs_where_there_is(
        dir.path(),
        move |config| {
            config.spill_dir = spill.clone();
            config.spill_limit = Some(64 << 10);
        },
        || async {},
        "its --spill-limit is 65.5 KB",
    )
    .await;
}

/// A pegs job on a worker that has no room for its spill (`cramped`, once
/// `cramped_ready` has run): it waits, its `waiting` line and one event
/// saying why, with no attempt counted (it may have one); once that worker
/// stops and one with room starts, it succeeds with the direct answer.
async fn waits_for_room_and_runs_where_there_is<R: std::future::Future<Output = ()>>(
    dir: &Path,
    cramped: impl Fn(&mut tally_worker::WorkerConfig) + Send + Sync + 'static,
    cramped_ready: impl FnOnce() -> R,
    says: &str,
) {
    let mut config =
        tally_coordinator::CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
    config.scheduler.no_room_retry_ms = 500;
    let coordinator = tally_coordinator::start(with_sandbox(config))
        .await
        .expect("coordinator starts");
    let mut client = jobs_client(&coordinator.url()).await;
    let cramped_workers = Workers::start_with(&coordinator.url(), 1, 1, move |config| {
        config.worker_id = "cramped".into();
        config.memory_budget = 256 << 10;
        cramped(config);
    });
    cramped_ready().await;
    let params = serde_json::json!({"board": "triangle:6", "start": 4, "buckets": 2});
    let mut spec = JobSpec {
        kind: "pegs".into(),
        params: params.as_object().unwrap().clone(),
        options: Default::default(),
    };
    spec.options.max_attempts = 1;
    let job = submit(&mut client, &spec, "").await;
    // Alone, the worker stops the first shard that spills, saying why, and
    // the job waits for room: no attempt counted, so it does not fail.
    let deadline = Instant::now() + Duration::from_secs(120);
    let waiting = loop {
        let view = get_job(&mut client, &job.id).await;
        assert_ne!(state(&view), JobState::Failed, "{}", view.error);
        if view.waiting.contains("found no room on disk") {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "the job never waited for room: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        waiting.waiting.contains("on worker cramped") && waiting.waiting.contains(says),
        "{}",
        waiting.waiting
    );
    assert_eq!(waiting.shards_failed_attempts, 0);
    // The shard goes to a worker with room once the cramped one stops.
    cramped_workers.stop().await;
    let roomy_spill = dir.join("roomy");
    let roomy = Workers::start_with(&coordinator.url(), 1, 2, |config| {
        config.worker_id = "roomy".into();
        config.memory_budget = 256 << 10;
        config.spill_dir = roomy_spill.clone();
    });
    let done = wait_finished(&mut client, &job.id, Duration::from_secs(300)).await;
    assert_eq!(state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, direct_answer(&spec));
    assert_eq!(done.waiting, "");
    let events = events(&mut client, &job.id).await;
    assert!(
        !events.iter().any(|e| e.kind.contains("fail")),
        "{events:?}"
    );
    let no_room: Vec<_> = events.iter().filter(|e| e.kind == "no-room").collect();
    assert!(
        !no_room.is_empty()
            && no_room
                .iter()
                .all(|e| e.worker_id == "cramped" && e.message.contains(says)),
        "{no_room:?}"
    );
    roomy.stop().await;
    coordinator.shutdown().await;
}
