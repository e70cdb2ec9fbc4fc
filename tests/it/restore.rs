//! Losing the coordinator's node, disk and all: the store is replicated to
//! the stage store, and a coordinator on an empty data directory restores it
//! (`--restore-from`). Jobs of four kinds in flight (hex cell-step, pegs
//! frontier, kayles, wasm with its module as an attachment) finish with the
//! right answers, finished jobs keep theirs, no id is given twice, and with
//! the replica caught up nothing accepted is lost; the old coordinator, run
//! again, stops, is refused as superseded at its next start, and a worker
//! that registered with the restored one refuses it; a damaged or truncated
//! replica object is refused by name and the restore uses the newest
//! consistent point before it; a gap in the log refuses the restore unless
//! its loss is accepted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use tally_coordinator::CoordinatorError;
use tally_coordinator::replica::{Floors, restore};
use tally_coordinator::store::{SledStore, Store, Tree};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_kinds::synthetic::SyntheticSpec;
use tally_kinds::wasm::{DEFAULT_MODULUS, WasmSpec};
use tally_stage::{StageStore, StageStoreUrl};
use tally_wire::proto::{self, JobState};

use crate::support::s3::{BUCKET, MotoS3};
use crate::support::{spawn_tally, wait_for_log_line};

type JobClient = tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>;
use crate::support::{
    ChildGuard, direct_answer, free_port, get_job, hex_cell_step, jobs_client, pegs_frontier,
    proto_spec, runtime, state, submit, tally_bin, wait_finished,
};

const QUEENS: &[u8] = include_bytes!("../../examples/wasm/queens.wasm");
/// Solutions of the 13-queens problem (OEIS A000170).
const QUEENS_13: &str = "73712";

/// Where the stage store (and the replica) is.
enum Stage {
    File(tempfile::TempDir),
    S3(MotoS3),
}

impl Stage {
    fn url(&self) -> String {
        match self {
            Stage::File(dir) => format!("file://{}", dir.path().display()),
            Stage::S3(_) => format!("s3://{BUCKET}/restore"),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        match self {
            Stage::S3(s3) => s3.env(),
            Stage::File(_) => Vec::new(),
        }
    }
}

/// A coordinator process replicating every 200 ms and renewing its hold
/// every `renew` (`extra` adds to or overrides its options).
fn coordinator(
    stage: &Stage,
    port: u16,
    data: &Path,
    log: &Path,
    renew: &str,
    extra: &[&str],
) -> ChildGuard {
    let listen = format!("127.0.0.1:{port}");
    let url = stage.url();
    let mut args = vec![
        "coordinator",
        "--listen",
        &listen,
        "--data",
        data.to_str().unwrap(),
        "--replicate-every",
        "200ms",
        "--stage-owner-renew-every",
        renew,
    ];
    if !extra.contains(&"--restore-from") {
        args.extend(["--stage-store", &url]);
    }
    args.extend_from_slice(extra);
    spawn_tally(&args, &stage.env(), log)
}

fn worker(stage: &Stage, url: &str, id: &str, log: &Path) -> ChildGuard {
    let args = [
        "worker",
        "--coordinator",
        url,
        "--id",
        id,
        "--slots",
        "1",
        "--threads",
        "1",
        "--allow-wasm",
    ];
    spawn_tally(&args, &stage.env(), log)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits (at most `limit`) for `check`.
async fn eventually(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The replica's prefix, as the coordinator's log names it.
fn replica_url(log: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("replicating the store"))
        .unwrap_or_else(|| panic!("no replication line in {log}"));
    let at = line.find(" to=").expect("to=") + 4;
    line[at..].split_whitespace().next().unwrap().to_string()
}

/// A client of the coordinator at `url` once it serves (its restore done);
/// fails with its log if it does not within two minutes.
async fn connect_when_up(
    url: &str,
    log: &Path,
) -> tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let connect =
            tally_wire::proto::job_service_client::JobServiceClient::connect(url.to_string());
        if let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(2), connect).await {
            return client;
        }
        assert!(
            Instant::now() < deadline,
            "the restored coordinator did not serve: {}",
            read(log)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn signal(child: &ChildGuard, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig}");
}

async fn replica_info(url: &str) -> proto::ReplicaInfo {
    let mut client = jobs_client(url).await;
    let info = client.info(proto::InfoRequest {}).await.unwrap();
    info.into_inner().replica.expect("a replica")
}

fn queens_wasm() -> JobSpec {
    JobSpec::new(WasmSpec {
        module_sha256: tally_kinds::guest::sha256_hex(QUEENS),
        shards: 12,
        params: vec!["n=13".into()],
        modulus: DEFAULT_MODULUS,
        exact: false,
        bound_bits: 0,
        outputs: 1,
    })
}

/// The jobs in flight at the loss, with their expected answers.
fn jobs_in_flight() -> Vec<(JobSpec, String)> {
    let kayles = JobSpec::new(KaylesSpec {
        pins: 400_000,
        digits: 9,
    });
    let hex = hex_cell_step(8, 4);
    let pegs = pegs_frontier();
    vec![
        (hex.clone(), direct_answer(&hex)),
        (pegs.clone(), direct_answer(&pegs)),
        (kayles.clone(), direct_answer(&kayles)),
        (queens_wasm(), QUEENS_13.to_string()),
    ]
}

/// A coordinator with jobs in flight loses its node (kill -9, its data
/// directory deleted) once its replica has caught up, its workers stopped
/// mid-shard; a new one restores the replica, and the workers' address
/// (a proxy, as a Service) is pointed at it: the
/// restored jobs are where the old coordinator had them (nothing accepted
/// is recomputed), the workers carry on with it by themselves, every job
/// finishes with the right answer, the finished job keeps its answer, and
/// the next job's id is past every id the old one gave.
fn a_lost_node_is_restored(stage: Stage) {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    // The workers' address, as a Service gives it: the old coordinator's,
    // then the new one's (the old port may go to another test meanwhile).
    let new_port = free_port();
    let new_url = format!("http://127.0.0.1:{new_port}");
    let (old_data, new_data) = (root.path().join("old"), root.path().join("new"));
    let (old_log, new_log) = (root.path().join("old.log"), root.path().join("new.log"));
    let mut old = coordinator(&stage, port, &old_data, &old_log, "200ms", &[]);
    runtime().block_on(async {
        let mut client = jobs_client(&url).await;
        let service = Switch::start(port).await;
        let service_url = format!("http://127.0.0.1:{}", service.port);
        let mut workers: Vec<ChildGuard> = (0..2)
            .map(|i| {
                let log = root.path().join(format!("w{i}.log"));
                worker(&stage, &service_url, &format!("w{i}"), &log)
            })
            .collect();
        // One job finished before the loss.
        let quick = JobSpec::new(SyntheticSpec {
            shards: 5,
            terms_per_shard: 10,
        });
        let finished = submit(&mut client, &quick, "finished").await;
        let done = wait_finished(&mut client, &finished.id, Duration::from_secs(120)).await;
        assert_eq!(state(&done), JobState::Succeeded);
        let mut ids = vec![finished.id.clone()];
        let expected = jobs_in_flight();
        for (i, (spec, _)) in expected.iter().enumerate() {
            let request = proto::SubmitRequest {
                spec: Some(proto_spec(spec)),
                idempotency_key: format!("flight-{i}"),
                attachments: match spec.kind.as_str() {
                    "wasm" => vec![QUEENS.to_vec()],
                    _ => Vec::new(),
                },
            };
            let job = client.submit(request).await.unwrap().into_inner();
            ids.push(job.job.expect("a job").id);
        }
        // The workers run in steps of 150 ms until every job is under way
        // (or done), then stay stopped mid-shard.
        for w in &workers {
            signal(w, "-STOP");
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let mut all = true;
            for id in &ids[1..] {
                all &= get_job(&mut client, id).await.work_done > 0;
            }
            if all {
                break;
            }
            assert!(Instant::now() < deadline, "the jobs never got under way");
            for w in &workers {
                signal(w, "-CONT");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
            for w in &workers {
                signal(w, "-STOP");
            }
        }
        // The jobs as they stand once the replica has every change made
        // before (reports already on their way may still land: then again).
        let views = async |client: &mut JobClient| {
            let mut views = Vec::new();
            for id in &ids {
                views.push(get_job(client, id).await);
            }
            views
        };
        let settled = |views: &[proto::Job]| -> Vec<(u32, u64)> {
            views.iter().map(|j| (j.stage, j.shards_done)).collect()
        };
        let before = loop {
            let before = views(&mut client).await;
            eventually(
                "the replica caught up",
                Duration::from_secs(60),
                async || {
                    let info = replica_info(&url).await;
                    info.pending_changes == 0 && info.lag_ms == 0 && info.snapshot_generation > 0
                },
            )
            .await;
            if settled(&before) == settled(&views(&mut client).await) {
                break before;
            }
        };
        let in_flight = before[1..]
            .iter()
            .filter(|j| !super::support::finished(j))
            .count();
        assert!(
            in_flight >= 2,
            "jobs still in flight at the loss: {in_flight}"
        );
        // A job submitted last: its id was given, whether or not replicated.
        let last = submit(&mut client, &quick, "last").await.id;
        drop(client);

        old.kill9();
        std::fs::remove_dir_all(&old_data).unwrap();
        let from = replica_url(&read(&old_log));
        let _new = coordinator(
            &stage,
            new_port,
            &new_data,
            &new_log,
            "200ms",
            &["--restore-from", &from],
        );
        let mut client = connect_when_up(&new_url, &new_log).await;
        service.switch(new_port);
        let limit = Duration::from_secs(120);
        wait_for_log_line(&new_log, &["restored the store from the replica"], limit).await;
        // Its first generation continues the restored point: a second loss
        // before its own snapshot is whole still restores what it did. (The
        // shipper says so in the background, maybe after the first call.)
        let said = wait_for_log_line(&new_log, &["the replica began a generation"], limit).await;
        assert!(!said.contains("refused a damaged replica object"), "{said}");
        // Watching the old hold is no sign of an unclean stop of its own.
        assert!(
            !said.contains("did not release its stage-store prefix"),
            "{said}"
        );
        let continues = said
            .lines()
            .find(|l| l.contains("the replica began a generation"))
            .is_some_and(|l| l.contains("parent=Some(Parent { generation: 1,"));
        assert!(continues, "{said}");
        // Nothing accepted before the replica caught up is computed again
        // (the work done of running shards is live progress, not stored).
        let mut accepted = 0;
        for job in &before {
            let now = get_job(&mut client, &job.id).await;
            assert_eq!(
                (now.state, now.stage, now.shards_done, now.answer.clone()),
                (job.state, job.stage, job.shards_done, job.answer.clone()),
                "{} after the restore: {said}\nthe old coordinator: {}",
                job.id,
                read(&old_log)
            );
            accepted += now.shards_done;
        }
        assert!(accepted > 0, "no shard was accepted before the loss");
        for w in &workers {
            signal(w, "-CONT");
        }
        for (id, (spec, answer)) in ids[1..].iter().zip(&expected) {
            let job = wait_finished(&mut client, id, Duration::from_secs(300)).await;
            assert_eq!(state(&job), JobState::Succeeded, "{id}: {}", job.error);
            assert_eq!(&job.answer, answer, "{id} ({})", spec.kind);
        }
        let kept = get_job(&mut client, &finished.id).await;
        assert_eq!(
            kept.answer, done.answer,
            "the finished job keeps its answer"
        );
        let next = submit(&mut client, &quick, "after").await.id;
        for given in ids.iter().chain([&last]) {
            assert!(next > *given, "{next} given again after {given}");
        }
        for w in workers.iter_mut() {
            w.kill9();
        }
    });
}

#[test]
fn a_lost_node_is_restored_from_a_replica_in_a_shared_directory() {
    a_lost_node_is_restored(Stage::File(tempfile::tempdir().unwrap()));
}

#[test]
fn a_lost_node_is_restored_from_a_replica_in_s3() {
    let Some(s3) = MotoS3::start() else {
        return;
    };
    a_lost_node_is_restored(Stage::S3(s3));
}

/// Once the old coordinator's replica has caught up, freezes it (SIGSTOP)
/// and restores its replica into a new coordinator on `new_port`: the new
/// one, serving, and a client of it.
async fn freeze_and_restore(
    stage: &Stage,
    root: &Path,
    old: &ChildGuard,
    old_url: &str,
    old_log: &Path,
    new_port: u16,
) -> (ChildGuard, JobClient) {
    eventually(
        "the replica caught up",
        Duration::from_secs(60),
        async || {
            let info = replica_info(old_url).await;
            info.pending_changes == 0 && info.snapshot_generation > 0
        },
    )
    .await;
    signal(old, "-STOP");
    let from = replica_url(&read(old_log));
    let new_log = root.join("new.log");
    let new = coordinator(
        stage,
        new_port,
        &root.join("new"),
        &new_log,
        "200ms",
        &["--restore-from", &from],
    );
    let client = connect_when_up(&format!("http://127.0.0.1:{new_port}"), &new_log).await;
    (new, client)
}

/// The exit of a process, if it comes within `limit`.
fn exit_within(child: &mut ChildGuard, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The old coordinator, frozen while a new one restored its replica, runs
/// again: its next renewal finds its hold taken and it stops serving, while
/// the restored one finishes the job.
#[test]
fn the_old_coordinator_run_again_after_a_restore_stops() {
    let stage = Stage::File(tempfile::tempdir().unwrap());
    let root = tempfile::tempdir().unwrap();
    let (old_port, new_port) = (free_port(), free_port());
    let (old_url, new_url) = (
        format!("http://127.0.0.1:{old_port}"),
        format!("http://127.0.0.1:{new_port}"),
    );
    let old_log = root.path().join("old.log");
    let mut old = coordinator(
        &stage,
        old_port,
        &root.path().join("old"),
        &old_log,
        "200ms",
        &[],
    );
    runtime().block_on(async {
        let mut client = jobs_client(&old_url).await;
        let spec = JobSpec::new(KaylesSpec {
            pins: 4_000,
            digits: 9,
        });
        let id = submit(&mut client, &spec, "fenced").await.id;
        let (_new, mut client) =
            freeze_and_restore(&stage, root.path(), &old, &old_url, &old_log, new_port).await;
        let mut w = worker(&stage, &new_url, "w", &root.path().join("w.log"));
        signal(&old, "-CONT");
        let status = tokio::task::block_in_place(|| exit_within(&mut old, Duration::from_secs(30)))
            .expect("the old coordinator stopped");
        assert!(!status.success());
        let said = read(&old_log);
        assert!(said.contains("lost its stage-store prefix"), "{said}");
        // Started again, with or without a new prefix, it is refused: a
        // restore superseded it, and its stale jobs must not serve again.
        let prefixes = || std::fs::read_dir(stage_dir(&stage)).unwrap().count();
        let before = prefixes();
        for extra in [&[][..], &["--new-stage-prefix"][..]] {
            let again_log = root.path().join(format!("again{}.log", extra.len()));
            let mut again = coordinator(
                &stage,
                free_port(),
                &root.path().join("old"),
                &again_log,
                "200ms",
                extra,
            );
            let status =
                tokio::task::block_in_place(|| exit_within(&mut again, Duration::from_secs(60)))
                    .expect("the old coordinator is refused at start");
            let said = read(&again_log);
            assert_eq!(status.code(), Some(2), "{extra:?}: {said}");
            let refusal = said
                .lines()
                .rfind(|l| l.starts_with("error: "))
                .unwrap_or(&said);
            assert!(
                refusal.contains("superseded by a restore from the replica")
                    && refusal.contains("at epoch")
                    && refusal.contains("must not serve again")
                    && refusal.contains(&root.path().join("new").display().to_string()),
                "{extra:?}: {refusal}"
            );
            assert!(
                !refusal.contains("--new-stage-prefix") && !refusal.contains("a copy"),
                "{extra:?}: {refusal}"
            );
        }
        assert_eq!(prefixes(), before, "a prefix was drawn for the old data");
        let job = wait_finished(&mut client, &id, Duration::from_secs(120)).await;
        assert_eq!(job.answer, direct_answer(&spec));
        w.kill9();
    });
}

/// The stage store's directory.
fn stage_dir(stage: &Stage) -> &Path {
    match stage {
        Stage::File(dir) => dir.path(),
        Stage::S3(_) => unreachable!("a directory store"),
    }
}

/// A TCP proxy whose target the test switches (connections open are cut).
struct Switch {
    port: u16,
    target: Arc<AtomicU16>,
    cut: Arc<tokio::sync::Notify>,
}

impl Switch {
    async fn start(target: u16) -> Switch {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let cut = Arc::new(tokio::sync::Notify::new());
        let (to, cutting) = (target.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let to = to.load(Ordering::SeqCst);
                let cutting = cutting.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        () = cutting.notified() => {}
                    }
                });
            }
        });
        Switch { port, target, cut }
    }

    fn switch(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.cut.notify_waiters();
    }
}

/// A worker that registered with the restored coordinator, sent back to the
/// old one (which has not noticed yet: it renews its hold rarely), refuses
/// it and takes none of its leases.
#[test]
fn a_worker_refuses_the_coordinator_a_restore_replaced() {
    let stage = Stage::File(tempfile::tempdir().unwrap());
    let root = tempfile::tempdir().unwrap();
    let (old_port, new_port) = (free_port(), free_port());
    let old_url = format!("http://127.0.0.1:{old_port}");
    let old_log = root.path().join("old.log");
    let mut old = coordinator(
        &stage,
        old_port,
        &root.path().join("old"),
        &old_log,
        "1h",
        &["--stage-sweep-every", "1h"],
    );
    runtime().block_on(async {
        let mut client = jobs_client(&old_url).await;
        let spec = JobSpec::new(SyntheticSpec {
            shards: 4,
            terms_per_shard: 10,
        });
        let first = submit(&mut client, &spec, "before").await.id;
        // The restore watches the old hold for three of its own renewals.
        let (_new, mut restored) =
            freeze_and_restore(&stage, root.path(), &old, &old_url, &old_log, new_port).await;
        signal(&old, "-CONT");
        let proxy = Switch::start(new_port).await;
        let proxied = format!("http://127.0.0.1:{}", proxy.port);
        let wlog = root.path().join("w.log");
        let mut w = worker(&stage, &proxied, "w", &wlog);
        let job = wait_finished(&mut restored, &first, Duration::from_secs(120)).await;
        assert_eq!(state(&job), JobState::Succeeded);
        // A job only the old coordinator has, then the worker sent there.
        let stale = submit(&mut client, &spec, "stale").await.id;
        proxy.switch(old_port);
        eventually(
            "the worker refused the old coordinator",
            Duration::from_secs(60),
            async || read(&wlog).contains("older epoch than one this worker worked for"),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let untouched = get_job(&mut client, &stale).await;
        assert_eq!(
            untouched.shards_done, 0,
            "the worker ran the old coordinator's shards"
        );
        assert_eq!(untouched.shards_leased, 0);
        w.kill9();
        old.kill9();
    });
}

/// A replica written by two runs of a coordinator (two generations), then
/// damaged: a damaged last log segment is refused by name and the restore
/// stops before it; a truncated snapshot of the newest generation sends the
/// restore to the one before; with nothing whole left it refuses, naming
/// what it refused. Never anything half-restored.
#[test]
fn a_damaged_replica_object_is_refused_and_the_restore_uses_the_point_before_it() {
    let stage = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let url: StageStoreUrl = format!("file://{}", stage.path().display())
        .parse()
        .unwrap();
    let data = root.path().join("data");
    runtime().block_on(async {
        let mut ids = Vec::new();
        for run in 0..2 {
            let mut config = tally_coordinator::CoordinatorConfig::new(
                "127.0.0.1:0".parse().unwrap(),
                Some(data.clone()),
            );
            config.stage_store = url.clone();
            config.replicate_every = Duration::from_millis(100);
            let running = tally_coordinator::start(config).await.unwrap();
            let mut client = jobs_client(&running.url()).await;
            for n in 0..3 {
                let spec = JobSpec::new(SyntheticSpec {
                    shards: 2,
                    terms_per_shard: 3 + n,
                });
                ids.push(submit(&mut client, &spec, &format!("{run}-{n}")).await.id);
                // A segment of its own for each.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            let status = running.replica_status.clone().unwrap();
            eventually(
                "the snapshot is whole",
                Duration::from_secs(30),
                async || status.snapshot_generation.load(Ordering::Relaxed) > 0,
            )
            .await;
            running.shutdown().await;
        }
        let prefix = std::fs::read_dir(stage.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("d-"))
            .unwrap();
        let objects = StageStore::open(&url.within(prefix.file_name().unwrap().to_str().unwrap()))
            .unwrap()
            .unwrap();
        let jobs_in = |dir: &Path| -> Vec<String> {
            let store = SledStore::open(dir).unwrap();
            let jobs = store.scan_prefix(Tree::Jobs, b"").unwrap();
            jobs.into_iter()
                .map(|(k, _)| String::from_utf8(k).unwrap())
                .collect()
        };
        let generations: Vec<PathBuf> = {
            let mut g: Vec<PathBuf> = std::fs::read_dir(prefix.join("replica"))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            g.sort();
            g
        };
        assert!(generations.len() >= 2, "{generations:?}");
        let newest = generations.last().unwrap().clone();

        // Whole: every job of both runs.
        let whole = root.path().join("whole");
        let restored = restore(&objects, &whole, Floors::default(), false)
            .await
            .unwrap();
        assert!(restored.refused.is_empty(), "{:?}", restored.refused);
        assert_eq!(jobs_in(&whole), ids);

        // The last segment of the newest generation damaged: refused by
        // name, and the point is the change before it.
        let mut segments: Vec<PathBuf> = std::fs::read_dir(newest.join("log"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        segments.sort();
        let last = segments.last().unwrap().clone();
        let good = std::fs::read(&last).unwrap();
        let mut damaged = good.clone();
        damaged[good.len() / 2] ^= 0x40;
        std::fs::write(&last, &damaged).unwrap();
        let before_damage = root.path().join("before-damage");
        let restored = restore(&objects, &before_damage, Floors::default(), false)
            .await
            .unwrap();
        let name = last.file_name().unwrap().to_str().unwrap();
        assert_eq!(restored.refused.len(), 1, "{:?}", restored.refused);
        assert!(restored.refused[0].contains(name), "{:?}", restored.refused);
        assert!(
            restored.refused[0].contains("damaged"),
            "{:?}",
            restored.refused
        );
        let first_of_last: u64 = name.split('-').next().unwrap().parse().unwrap();
        assert_eq!(restored.change, first_of_last - 1);
        // The last interval: what a crash before shipping it would lose too.
        assert!(restored.lost.as_ref().is_some_and(|l| l.contains(name)));
        assert!(jobs_in(&before_damage).len() <= ids.len());
        assert!(!before_damage.join("tally-restoring").exists());

        // The newest snapshot truncated: the generation before it.
        std::fs::write(&last, &good).unwrap();
        let part = newest.join("snapshot/part-000001");
        let bytes = std::fs::read(&part).unwrap();
        std::fs::write(&part, &bytes[..bytes.len() - 10]).unwrap();
        let older = root.path().join("older");
        // That loses the newest generation, whose snapshot and log were
        // whole: more than the last interval, refused unless accepted.
        let err = restore(&objects, &older, Floors::default(), false)
            .await
            .unwrap_err();
        assert!(matches!(err, CoordinatorError::InvalidArgument(_)), "{err}");
        let newest_lost = format!("generation {}'s", generation_of(&newest));
        let err = err.to_string();
        assert!(
            err.contains("part-000001") && err.contains(&newest_lost),
            "{err}"
        );
        assert!(!older.exists(), "a refused restore wrote {older:?}");
        let restored = restore(&objects, &older, Floors::default(), true)
            .await
            .unwrap();
        assert!(
            restored
                .lost
                .as_ref()
                .is_some_and(|l| l.contains(&newest_lost))
        );
        assert!(
            restored
                .refused
                .iter()
                .any(|r| r.contains("part-000001") && r.contains("truncated")),
            "{:?}",
            restored.refused
        );
        assert!(restored.generation < generation_of(&newest));
        assert_eq!(jobs_in(&older), ids[..3].to_vec(), "the first run's jobs");

        // Nothing whole left: refused, naming what was refused; the
        // directory is left empty of any store.
        for g in &generations[..generations.len() - 1] {
            let part = g.join("snapshot/part-000001");
            if part.exists() {
                std::fs::write(&part, b"garbage").unwrap();
            }
        }
        let none = root.path().join("none");
        let err = restore(&objects, &none, Floors::default(), true)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("nothing to restore"), "{err}");
        assert!(err.contains("part-000001"), "{err}");
        // A start on what is left is refused until the restore is run again.
        let left = std::fs::read_dir(&none).map_or(0, |d| d.count());
        assert!(left == 0 || none.join("tally-restoring").exists());

        // A data directory in use is never restored over.
        let err = restore(&objects, &whole, Floors::default(), false)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("not empty"), "{err}");
    });
}

fn generation_of(dir: &Path) -> u64 {
    dir.file_name().unwrap().to_str().unwrap()[1..]
        .parse()
        .unwrap()
}

/// A restore that cannot be done is refused with one line saying why, and
/// writes nothing: no such directory, no replica there, a data directory in
/// use, a stage store other than the replica's.
#[test]
fn a_restore_that_cannot_be_done_is_refused_saying_why() {
    let stage = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let prefix = stage.path().join("d-0123456789abcdef");
    std::fs::create_dir_all(prefix.join("replica/g00000000000000000001")).unwrap();
    std::fs::write(prefix.join("replica/g00000000000000000001/manifest"), b"x").unwrap();
    let used = root.path().join("used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join("notes"), b"mine").unwrap();
    let missing = root.path().join("missing");
    let url = |path: &Path| format!("file://{}", path.display());
    let fresh = |name: &str| root.path().join(name);
    let other = url(&fresh("other"));
    // The data directory, where from, another option, and why it is refused.
    let cases = [
        (fresh("a"), url(&missing), None, "no such directory"),
        (
            fresh("b"),
            url(stage.path()),
            None,
            "there is no replica there",
        ),
        (used.clone(), url(&prefix), None, "is not empty"),
        (
            fresh("c"),
            url(&prefix),
            Some(["--stage-store", other.as_str()]),
            "not of --stage-store",
        ),
    ];
    let mut cases = cases.to_vec();
    // A value that is no store names the flag it was given to.
    cases.push((
        fresh("d"),
        "ftp://host/d-1".into(),
        None,
        "--restore-from \"ftp://",
    ));
    // Above a directory at the root, the prefixes are file:///d-….
    if Path::new("/tmp").is_dir() && !Path::new("/tmp/replica").exists() {
        cases.push((
            fresh("e"),
            "file:///tmp".into(),
            None,
            "prefix, file:///d-…,",
        ));
    }
    for (data, from, extra, why) in cases {
        let out = Command::new(tally_bin())
            .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .args(["--restore-from", &from])
            .args(extra.iter().flatten())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        // Bad input, each of them.
        assert_eq!(out.status.code(), Some(2), "{data:?} from {from}: {said}");
        assert!(said.contains(why), "{data:?} from {from}: {said}");
        assert!(
            !said.contains("--stage-store \""),
            "{data:?} from {from}: {said}"
        );
    }
    assert!(!missing.exists());
    for name in ["a", "c", "d", "e"] {
        assert!(!root.path().join(name).exists(), "{name} was written");
    }
    assert_eq!(std::fs::read(used.join("notes")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&used).unwrap().count(), 1);
}

/// A replica whose log lost a segment in its middle (deleted, as by a
/// careless cleanup): a restore is refused with exit code 2, naming the
/// changes missing and what a restore past them would lose, and writes
/// nothing; with `--restore-accept-loss` it restores the point before the
/// gap, saying loudly what it lost: the first job is there, the last is not.
#[test]
fn a_restore_past_a_missing_log_segment_is_refused_unless_the_loss_is_accepted() {
    let stage = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let url: StageStoreUrl = format!("file://{}", stage.path().display())
        .parse()
        .unwrap();
    runtime().block_on(async {
        let mut config = tally_coordinator::CoordinatorConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            Some(root.path().join("old")),
        );
        config.stage_store = url.clone();
        config.replicate_every = Duration::from_millis(100);
        let running = tally_coordinator::start(config).await.unwrap();
        let status = running.replica_status.clone().unwrap();
        // The snapshot first, of a store without jobs: every job is in the
        // log after it.
        eventually(
            "the snapshot is whole",
            Duration::from_secs(60),
            async || status.snapshot_generation.load(Ordering::Relaxed) > 0,
        )
        .await;
        let mut client = jobs_client(&running.url()).await;
        let mut ids = Vec::new();
        for n in 0..6 {
            let spec = JobSpec::new(SyntheticSpec {
                shards: 2,
                terms_per_shard: 3 + n,
            });
            ids.push(submit(&mut client, &spec, &format!("gap-{n}")).await.id);
            // Shipped before the next: in segments of its own.
            eventually("the job is shipped", Duration::from_secs(60), async || {
                status.pending_changes() == 0
            })
            .await;
        }
        drop(client);
        running.shutdown().await;

        let prefix = std::fs::read_dir(stage.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("d-"))
            .unwrap();
        let mut generations: Vec<PathBuf> = std::fs::read_dir(prefix.join("replica"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        generations.sort();
        let newest = generations.last().unwrap();
        let mut segments: Vec<PathBuf> = std::fs::read_dir(newest.join("log"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        segments.sort();
        assert!(segments.len() >= 6, "{segments:?}");
        let deleted = segments[segments.len() / 2].clone();
        std::fs::remove_file(&deleted).unwrap();
        let name = deleted.file_name().unwrap().to_str().unwrap().to_string();
        let (first, last) = name.split_once('-').unwrap();
        let (first, last): (u64, u64) = (first.parse().unwrap(), last.parse().unwrap());
        let generation = generation_of(newest);
        let gap = match first == last {
            true => format!("change {first} of generation {generation} is missing"),
            false => format!("changes {first} to {last} of generation {generation} are missing"),
        };

        let from = format!("file://{}", prefix.display());
        let new_data = root.path().join("new");
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec![
            "coordinator",
            "--listen",
            &listen,
            "--data",
            new_data.to_str().unwrap(),
            "--restore-from",
            &from,
        ];
        let refused_log = root.path().join("refused.log");
        let mut refused = spawn_tally(&args, &[], &refused_log);
        let status =
            tokio::task::block_in_place(|| exit_within(&mut refused, Duration::from_secs(60)));
        let said = read(&refused_log);
        let status = status.unwrap_or_else(|| panic!("the restore was not refused: {said}"));
        assert_eq!(status.code(), Some(2), "{said}");
        assert!(said.contains(&gap), "{gap}: {said}");
        let stops = format!("stops at change {} of generation {generation}", first - 1);
        assert!(
            said.contains(&stops) && said.contains("change(s) after it"),
            "{said}"
        );
        assert!(said.contains("--restore-accept-loss"), "{said}");
        assert!(!new_data.exists(), "a refused restore wrote {new_data:?}");

        let log = root.path().join("new.log");
        args.push("--restore-accept-loss");
        let mut restored = spawn_tally(&args, &[], &log);
        let mut client = connect_when_up(&format!("http://{listen}"), &log).await;
        let limit = Duration::from_secs(60);
        let said =
            wait_for_log_line(&log, &["WARNING: the restore lost changes", &gap], limit).await;
        assert!(said.contains(&stops), "{said}");
        let first_job = get_job(&mut client, &ids[0]).await;
        assert_eq!(first_job.id, ids[0]);
        let last_job = client
            .get(proto::GetJobRequest {
                job_id: ids.last().unwrap().clone(),
            })
            .await;
        assert_eq!(
            last_job.map(|_| ()).unwrap_err().code(),
            tonic::Code::NotFound,
            "a job after the gap was restored"
        );
        restored.kill9();
    });
}

/// A store whose commit mark is gone, started with `--recover`: it
/// recovers, saying what it found, and never that it refuses to start.
#[test]
fn a_start_with_recover_says_it_recovers_not_that_it_refuses() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    runtime().block_on(async {
        let config = tally_coordinator::CoordinatorConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            Some(data.clone()),
        );
        let running = tally_coordinator::start(config).await.unwrap();
        let mut client = jobs_client(&running.url()).await;
        let spec = JobSpec::new(SyntheticSpec {
            shards: 2,
            terms_per_shard: 3,
        });
        submit(&mut client, &spec, "kept").await;
        drop(client);
        running.shutdown().await;
        std::fs::remove_file(data.join("tally-commits")).unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let log = root.path().join("recover.log");
        let args = [
            "coordinator",
            "--listen",
            &listen,
            "--data",
            data.to_str().unwrap(),
            "--recover",
        ];
        let mut recovering = spawn_tally(&args, &[], &log);
        let limit = Duration::from_secs(60);
        let said = wait_for_log_line(&log, &["recovering from what is intact"], limit).await;
        let line = said
            .lines()
            .find(|l| l.contains("recovering from what is intact"))
            .unwrap();
        assert!(line.contains("commit mark file is missing"), "{line}");
        assert!(!said.contains("Refusing to start"), "{said}");
        recovering.kill9();
    });
}
