//! Stage data outside the coordinator (`--stage-store`): the same jobs give
//! the same answers through the coordinator's own store, a shared directory
//! and S3 (a moto server); a damaged or missing blob is refused and computed
//! again; a worker killed in the middle of an upload leaves nothing
//! referenced; an S3 endpoint unreachable for 10 s only pauses a job; the
//! secret key appears nowhere. Coordinator and workers run as processes, with
//! the AWS environment a deployment would give them.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tally_kernels::sliders::SliderParams;
use tally_kinds::pegs::{PegsPlanName, PegsSpec};
use tally_kinds::sliders::{SlidersPlanName, SlidersSpec};
use tally_kinds::spec::JobSpec;
use tally_kinds::values::EncodedTask;
use tally_kinds::{Control, dynamic::ShardContext};
use tally_stage::{BlobRef, StageStore, StageStoreUrl, blob_key};
use tally_wire::lease::LeaseId;
use tally_wire::proto::report_message::Body;
use tally_wire::proto::{self, JobState};

use crate::support::s3::{BUCKET, MotoS3, SECRET};
use crate::support::{
    ChildGuard, direct_answer, events, free_port, hex_cell_step, http_get, jobs_client, metric,
    pegs_frontier, runtime, spawn_tally, state, submit, tally_bin, valid, wait_finished,
    workers_client,
};

/// Where a test's stage data goes.
enum Store {
    Coordinator,
    File(tempfile::TempDir),
    S3(MotoS3, String),
}

impl Store {
    fn file() -> Store {
        Store::File(tempfile::tempdir().unwrap())
    }

    /// A moto-backed store under `prefix`, its environment set in this
    /// process (the caller is still single-threaded); `None`: skipped.
    fn s3(prefix: &str) -> Option<Store> {
        let s3 = MotoS3::start()?;
        s3.set_env();
        Some(Store::S3(s3, prefix.to_string()))
    }

    fn url(&self) -> String {
        match self {
            Store::Coordinator => "coordinator".into(),
            Store::File(dir) => format!("file://{}", dir.path().display()),
            Store::S3(_, prefix) => format!("s3://{BUCKET}/{prefix}"),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        match self {
            Store::S3(s3, _) => s3.env(),
            _ => Vec::new(),
        }
    }

    /// The store as the test reads it (`None` for the coordinator's own).
    fn open(&self) -> Option<StageStore> {
        let url: StageStoreUrl = self.url().parse().unwrap();
        StageStore::open(&url)
            .unwrap()
            .map(|s| s.with_patience(Duration::from_secs(30)))
    }
}

/// What the store holds besides the owner records and the replicas of the
/// data directories' prefixes (which stay while the prefix is used).
async fn stage_blobs(store: &StageStore) -> Vec<String> {
    let mut keys = store.list(None).await.unwrap();
    keys.retain(|key| !matches!(key.split('/').nth(1), Some("owner" | "replica")));
    keys
}

/// A coordinator and its workers, as processes, each logging to a file.
struct Cluster {
    url: String,
    http: std::net::SocketAddr,
    env: Vec<(String, String)>,
    logs: tempfile::TempDir,
    _coordinator: ChildGuard,
    workers: Vec<ChildGuard>,
}

impl Cluster {
    /// A coordinator on `store`, sweeping it every `sweep_every`, that takes
    /// stage outputs up to `inline` inline (`"0"`: every output is a blob).
    fn start(store: &Store, sweep_every: &str, inline: &str) -> Cluster {
        let logs = tempfile::tempdir().unwrap();
        let port = free_port();
        let http = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let env = store.env();
        let data = logs.path().join("data");
        let coordinator = spawn_tally(
            &[
                "coordinator",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--http",
                &http.to_string(),
                "--data",
                data.to_str().unwrap(),
                "--stage-store",
                &store.url(),
                "--stage-sweep-every",
                sweep_every,
                "--inline-stage-output",
                inline,
            ],
            &env,
            &logs.path().join("coordinator.log"),
        );
        Cluster {
            url: format!("http://127.0.0.1:{port}"),
            http,
            env,
            logs,
            _coordinator: coordinator,
            workers: Vec::new(),
        }
    }

    fn add_worker(&mut self, id: &str, slots: usize, extra: &[&str]) {
        let slots = slots.to_string();
        let mut args = vec![
            "worker",
            "--coordinator",
            &self.url,
            "--id",
            id,
            "--slots",
            &slots,
            "--threads",
            &slots,
        ];
        args.extend_from_slice(extra);
        let log = self.log_path(id);
        self.workers.push(spawn_tally(&args, &self.env, &log));
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.logs.path().join(format!("{name}.log"))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }
}

/// A sliders frontier job: its graph stages read older levels, which the
/// coordinator keeps (`kept_stages`).
fn sliders_frontier() -> JobSpec {
    JobSpec::new(SlidersSpec {
        board: SliderParams::new(3, 3, "WRRRRBBBB", "WBBBBRRRR"),
        plan: SlidersPlanName::Frontier,
        buckets: 2,
        ..Default::default()
    })
}

fn with_ttl(mut spec: JobSpec, ttl_ms: u64) -> JobSpec {
    spec.options.lease_ttl_ms = ttl_ms;
    spec
}

/// Waits (at most `limit`) for `check`.
async fn eventually(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ------------------------------------------------------- the same answers

/// Frontier jobs (pegs, sliders) and a hex cell-step job through `store`: the answers equal
/// the direct kernels'; with a store outside the coordinator, its blobs are
/// swept once the jobs are done, and the secret key shows nowhere.
fn the_same_answers(store: Store) {
    runtime().block_on(async {
        let mut cluster = Cluster::start(&store, "1s", "0");
        cluster.add_worker("w1", 1, &[]);
        cluster.add_worker("w2", 1, &[]);
        let mut client = jobs_client(&cluster.url).await;
        let specs = [pegs_frontier(), sliders_frontier(), hex_cell_step(5, 3)];
        let mut ids = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            ids.push(submit(&mut client, spec, &format!("same-{i}")).await.id);
        }
        for (spec, id) in specs.iter().zip(&ids) {
            let job = wait_finished(&mut client, id, Duration::from_secs(240)).await;
            assert_eq!(state(&job), JobState::Succeeded, "{id}: {}", job.error);
            assert_eq!(
                job.answer,
                direct_answer(spec),
                "{id} through {}",
                store.url()
            );
        }
        let Some(opened) = store.open() else { return };
        // Written, then swept once nothing referenced them.
        eventually(
            "the stage store emptied by the sweep",
            Duration::from_secs(60),
            async || {
                stage_blobs(&opened).await.is_empty()
                    && cluster
                        .log("coordinator")
                        .contains("stage blobs no longer referenced deleted")
            },
        )
        .await;
        if let Store::S3(..) = store {
            let mut seen = cluster.log("coordinator") + &cluster.log("w1") + &cluster.log("w2");
            for id in &ids {
                for event in events(&mut client, id).await {
                    seen += &event.message;
                }
            }
            seen += &http_get(cluster.http, "/metrics").1;
            seen += &http_get(cluster.http, "/").1;
            assert!(seen.contains("s3://"), "the logs name the store");
            assert!(!seen.contains(SECRET), "the secret key was shown");
        }
    });
}

#[test]
fn jobs_give_the_same_answers_through_the_coordinators_own_stage_store() {
    the_same_answers(Store::Coordinator);
}

#[test]
fn jobs_give_the_same_answers_through_a_shared_directory() {
    the_same_answers(Store::file());
}

#[test]
fn jobs_give_the_same_answers_through_s3() {
    if let Some(store) = Store::s3("same-answers") {
        the_same_answers(store);
    }
}

// ------------------------------------- small outputs held by the coordinator

/// Frontier and hex cell-step jobs through a shared directory whose
/// coordinator keeps outputs up to 256 bytes itself: their stages mix blobs
/// and held outputs, read whole and by buckets, and the answers equal the direct
/// kernels'; fewer blobs are written than with nothing inline, and some are.
#[test]
fn stages_that_mix_blobs_and_outputs_held_by_the_coordinator_give_the_same_answers() {
    runtime().block_on(async {
        let mut written = Vec::new();
        for inline in ["0", "256B"] {
            let store = Store::file();
            // No sweep during the jobs: every blob written is still there.
            let mut cluster = Cluster::start(&store, "1h", inline);
            cluster.add_worker("w1", 2, &[]);
            let mut client = jobs_client(&cluster.url).await;
            for (i, spec) in [pegs_frontier(), hex_cell_step(5, 3)].iter().enumerate() {
                let id = submit(&mut client, spec, &format!("mixed-{i}")).await.id;
                let job = wait_finished(&mut client, &id, Duration::from_secs(240)).await;
                assert_eq!(state(&job), JobState::Succeeded, "{id}: {}", job.error);
                assert_eq!(job.answer, direct_answer(spec), "{id}, {inline} inline");
            }
            written.push(stage_blobs(&store.open().unwrap()).await.len());
            // The worker read the outputs it had sent inline from its own
            // copies, not back from the coordinator (its log waited for).
            let own = "stage outputs this worker computed read from its own copies";
            if inline != "0" {
                eventually("the worker's log", Duration::from_secs(60), async || {
                    cluster.log("w1").contains(own)
                })
                .await;
            }
            let reused = cluster.log("w1").contains(own);
            assert_eq!(reused, inline != "0", "{inline} inline");
        }
        let [none_inline, mixed] = written[..] else {
            unreachable!()
        };
        assert!(
            0 < mixed && mixed < none_inline,
            "blobs written: {none_inline} with nothing inline, {mixed} with 256 bytes"
        );
    });
}

/// With many shards a step (or a level), the outputs of a report batch go
/// into one pack of the stage store: with two workers, each reads its own
/// outputs from memory and the other's from the packs (whole, or by bucket),
/// none is computed again, each job's answer is the direct kernel's, and once
/// the jobs are done the sweep deletes their packs.
fn outputs_in_packs(store: Store, specs: &[JobSpec]) {
    runtime().block_on(async {
        let mut cluster = Cluster::start(&store, "1s", "256KiB");
        let metrics =
            [free_port(), free_port()].map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)));
        for (worker, http) in ["w1", "w2"].iter().zip(&metrics) {
            cluster.add_worker(worker, 2, &["--http", &http.to_string()]);
        }
        let count = |name: &str| -> u64 {
            metrics
                .iter()
                .map(|&http| metric(&http_get(http, "/metrics").1, name))
                .sum()
        };
        let mut client = jobs_client(&cluster.url).await;
        for (i, spec) in specs.iter().enumerate() {
            let packs_before = count("tally_worker_stage_packs_written_total");
            let id = submit(&mut client, spec, &format!("packed-{i}")).await.id;
            let job = wait_finished(&mut client, &id, Duration::from_secs(240)).await;
            assert_eq!(state(&job), JobState::Succeeded, "{id}: {}", job.error);
            assert_eq!(job.answer, direct_answer(spec), "{id}");
            let packs = count("tally_worker_stage_packs_written_total") - packs_before;
            assert!(packs > 0, "{id} wrote no pack");
        }
        let packed = count("tally_worker_stage_outputs_packed_total");
        let reused = count("tally_worker_stage_outputs_reused_total");
        assert!(
            packed > 0 && reused > 0,
            "{packed} packed, {reused} read from own copies"
        );
        assert_eq!(count("tally_worker_stage_blobs_recomputed_total"), 0);
        let opened = store.open().unwrap();
        eventually("the packs swept", Duration::from_secs(60), async || {
            stage_blobs(&opened).await.is_empty()
        })
        .await;
    });
}

#[test]
fn outputs_in_packs_in_a_shared_directory_are_read_by_every_worker_and_swept() {
    // A frontier job too: its shards read their buckets from the packs (from
    // hole 2: the position classes rule out every end from the default, 1).
    let pegs = JobSpec::new(PegsSpec {
        board: "triangle:7".into(),
        start: Some(2),
        end: None,
        prefixes: 0,
        plan: Some(PegsPlanName::Frontier),
        buckets: 8,
        by_final_hole: false,
        no_prune: false,
    });
    outputs_in_packs(Store::file(), &[hex_cell_step(8, 8), pegs]);
}

#[test]
fn outputs_in_packs_in_s3_are_read_by_every_worker_and_swept() {
    if let Some(store) = Store::s3("packs") {
        outputs_in_packs(store, &[hex_cell_step(8, 8)]);
    }
}

/// A worker's report with its output inline is refused past the size the
/// coordinator said at registration, and when the output begins as a
/// stored reference does; one within it is accepted, and the next stage's
/// listing names it held, refused to a worker that does not read held
/// outputs.
#[test]
fn inline_outputs_are_taken_within_the_limit_and_listed_as_held() {
    runtime().block_on(async {
        let store = Store::file();
        let mut cluster = Cluster::start(&store, "1h", "1KiB");
        let spec = hex_cell_step(4, 1);
        let mut jobs = jobs_client(&cluster.url).await;
        let id = submit(&mut jobs, &spec, "inline").await.id;
        let mut client = workers_client(&cluster.url).await;
        let worker = "test-hand";
        let registered = client
            .register(proto::RegisterRequest {
                worker_id: worker.into(),
                slots: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(registered.max_inline_stage_output, 1024);
        let session = registered.session;
        let lease = lease_one(&mut client, worker, &session).await;
        assert_eq!(lease.stage, 1);
        let valid = valid(&spec);
        let task = EncodedTask::from_bytes(&lease.task).unwrap();
        let outcome = compute_here(&valid, &task, None);
        let output = outcome.output.into_bytes().unwrap();
        assert!(
            !output.is_empty() && output.len() <= 1024,
            "{}",
            output.len()
        );
        let report = |output: Vec<u8>| {
            [
                Body::Header(proto::ReportHeader {
                    worker_id: worker.into(),
                    lease_id: lease.lease_id.clone(),
                    session: session.clone(),
                    output_bytes: output.len() as u64,
                }),
                Body::Output(proto::OutputChunk {
                    data: output.into(),
                }),
                Body::Result(proto::ReportResult {
                    compute_us: 0,
                    partial: outcome.partial.to_bytes(),
                    work_done: lease.work_total,
                }),
            ]
            .map(|body| proto::ReportMessage { body: Some(body) })
        };
        let reference = BlobRef {
            key: "jobs/x/1/0.1.output".into(),
            size: 1,
            digest: [0; 32],
            offset: 0,
        }
        .encode();
        for (refused, says) in [
            (vec![0; 1025], "takes up to 1024 bytes inline"),
            (reference, "begin as a stage-store reference does"),
        ] {
            let status = client
                .report(tokio_stream::iter(report(refused)))
                .await
                .unwrap_err();
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
            assert!(status.message().contains(says), "{}", status.message());
        }
        let answer = client
            .report(tokio_stream::iter(report(output)))
            .await
            .unwrap();
        assert!(answer.into_inner().accepted);
        let listing = |reads_held: bool| {
            let mut client = client.clone();
            let request = proto::StageBlobsRequest {
                job_id: id.clone(),
                stage: 1,
                worker_id: worker.into(),
                session: session.clone(),
                reads_held,
                reads_packed: false,
            };
            async move { client.stage_blobs(request).await }
        };
        let status = listing(false).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(
            status.message().contains("holds itself"),
            "{}",
            status.message()
        );
        let listed = listing(true).await.unwrap().into_inner();
        assert_eq!(listed.held, [0]);
        assert!(listed.blobs.iter().all(|blob| blob.key.is_empty()));
        cluster.add_worker("w1", 1, &[]);
        let job = wait_finished(&mut jobs, &id, Duration::from_secs(240)).await;
        assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
        assert_eq!(job.answer, direct_answer(&spec));
    });
}

// ------------------------------------------- damaged blobs computed again

/// A shard's outcome computed in this process, from `input`.
fn compute_here(
    valid: &tally_kinds::spec::ValidSpec,
    task: &EncodedTask,
    input: Option<&tally_kinds::dynamic::StageInput>,
) -> tally_kinds::values::ShardOutcome {
    valid
        .execute(
            task,
            ShardContext {
                input,
                checkpoint: &tally_kinds::kind::NO_CHECKPOINT,
                cache: &tally_kinds::cache::KernelCache::new(),
                control: &Control::new(),
                checkpoint_every: Duration::from_secs(3600),
                on_event: &mut |_| {},
                room: None,
            },
        )
        .unwrap()
}

/// One shard leased as `worker`.
async fn lease_one(
    client: &mut tally_wire::proto::worker_service_client::WorkerServiceClient<
        tonic::transport::Channel,
    >,
    worker: &str,
    session: &str,
) -> proto::ShardLease {
    client
        .lease(proto::LeaseRequest {
            worker_id: worker.into(),
            free_slots: 1,
            wait_ms: 2_000,
            session: session.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .leases
        .remove(0)
}

/// Registers as a worker: its session, and the stage store the coordinator
/// names (its own place in the configured store).
async fn register_for_store(
    client: &mut tally_wire::proto::worker_service_client::WorkerServiceClient<
        tonic::transport::Channel,
    >,
    worker: &str,
) -> (String, StageStore) {
    let answer = client
        .register(proto::RegisterRequest {
            worker_id: worker.into(),
            hostname: "test".into(),
            slots: 64,
            version: "test".into(),
            memory_budget_bytes: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let url: StageStoreUrl = answer.stage_store.parse().unwrap();
    let store = StageStore::open(&url)
        .unwrap()
        .expect("a store outside the coordinator");
    (answer.session, store)
}

/// Plays a worker for the job's first `stages` stages (of
/// `shards_per_stage` shards each), with the stage store the coordinator
/// names at registration (returned too): leases each shard,
/// computes it here (reading its input from the store), writes its output
/// to the store (a blob each, or with `packed` all of a stage in one pack)
/// and reports the blob. Returns the blobs of the last stage.
async fn run_stages_here(
    cluster: &Cluster,
    spec: &JobSpec,
    stages: u32,
    shards_per_stage: usize,
    packed: bool,
) -> (Vec<BlobRef>, StageStore) {
    let worker = "test-hand";
    let mut client = workers_client(&cluster.url).await;
    let (session, store) = register_for_store(&mut client, worker).await;
    let store = &store;
    let valid = valid(spec);
    let mut last = Vec::new();
    for stage in 1..=stages {
        let mut computed = Vec::new();
        // Exactly the stage's shards: a lease of the next stage would be held
        // from the workers that must compute it.
        while computed.len() < shards_per_stage {
            let leases = client
                .lease(proto::LeaseRequest {
                    lease_ahead: 0,
                    worker_id: worker.into(),
                    free_slots: (shards_per_stage - computed.len()) as u32,
                    wait_ms: 2_000,
                    session: session.clone(),
                })
                .await
                .unwrap()
                .into_inner()
                .leases;
            for lease in leases {
                assert_eq!(lease.stage, stage);
                let task = EncodedTask::from_bytes(&lease.task).unwrap();
                let mut parts = Vec::new();
                for read in valid.stage_reads(stage, &task).unwrap() {
                    let listed = client
                        .stage_blobs(proto::StageBlobsRequest {
                            job_id: lease.job_id.clone(),
                            stage: read.stage,
                            worker_id: worker.into(),
                            session: session.clone(),
                            reads_held: false,
                            reads_packed: packed,
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .blobs;
                    assert!(read.bucket.is_none(), "the hex plan reads whole stages");
                    let mut merged = Vec::new();
                    for blob in &listed {
                        let blob = BlobRef::try_from(blob).unwrap();
                        merged.extend(store.read(&blob, &Control::new()).await.unwrap());
                    }
                    parts.push(merged);
                }
                let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                let input =
                    (!slices.is_empty()).then(|| valid.decode_stage_inputs(&slices).unwrap());
                let outcome = compute_here(&valid, &task, input.as_ref());
                computed.push((lease, outcome));
            }
        }
        computed.sort_by_key(|(lease, _)| lease.index);
        let outputs = computed
            .iter()
            .map(|(_, outcome)| outcome.output.clone().into_bytes().unwrap());
        let blobs = match packed {
            true => {
                let first: LeaseId = computed[0].0.lease_id.parse().unwrap();
                let outputs = outputs.map(bytes::Bytes::from).collect();
                let key = tally_stage::pack_key(&first, 0);
                store
                    .put_pack(&key, outputs, &Control::new())
                    .await
                    .unwrap()
            }
            false => {
                let mut blobs = Vec::new();
                for ((lease, _), output) in computed.iter().zip(outputs) {
                    let lease_id: LeaseId = lease.lease_id.parse().unwrap();
                    let key = blob_key(&lease_id, "output");
                    blobs.push(store.put(&key, output, &Control::new()).await.unwrap());
                }
                blobs
            }
        };
        for ((lease, outcome), blob) in computed.iter().zip(&blobs) {
            let messages = [
                Body::Header(proto::ReportHeader {
                    worker_id: worker.into(),
                    lease_id: lease.lease_id.clone(),
                    session: session.clone(),
                    output_bytes: 0,
                }),
                Body::OutputBlob(proto::BlobRef::from(blob)),
                Body::Result(proto::ReportResult {
                    compute_us: 0,
                    partial: outcome.partial.to_bytes(),
                    work_done: lease.work_total,
                }),
            ]
            .map(|body| proto::ReportMessage { body: Some(body) });
            let answer = client.report(tokio_stream::iter(messages)).await.unwrap();
            assert!(answer.into_inner().accepted);
        }
        last = blobs;
    }
    (last, store.clone())
}

/// Stages 1 and 2 of a hex cell-step job computed by hand; then one blob of
/// stage 2 is overwritten with other content and another deleted. The
/// worker that reads them refuses both, computes their shards again (from
/// stage 1, which the coordinator keeps for this), writes them back, and
/// the job's answer is the direct kernel's.
fn damaged_blobs_are_computed_again(store: Store) {
    runtime().block_on(async {
        let cluster = &mut Cluster::start(&store, "1h", "0");
        let spec = hex_cell_step(4, 2);
        let mut client = jobs_client(&cluster.url).await;
        let id = submit(&mut client, &spec, "damaged").await.id;
        let (stage2, opened) = run_stages_here(cluster, &spec, 2, 2, false).await;
        assert_eq!(stage2.len(), 2, "two shards per step");
        let control = Control::new();
        opened
            .put(&stage2[0].key, &b"other content"[..], &control)
            .await
            .unwrap();
        opened.delete(&stage2[1].key).await.unwrap();
        for blob in &stage2 {
            assert!(
                opened.read(blob, &control).await.is_err(),
                "{} is unusable",
                blob.key
            );
        }

        cluster.add_worker("w1", 2, &[]);
        let job = wait_finished(&mut client, &id, Duration::from_secs(240)).await;
        assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
        assert_eq!(job.answer, direct_answer(&spec));
        let again = "stage blob computed again and written back";
        eventually("the worker's log", Duration::from_secs(60), async || {
            cluster.log("w1").matches(again).count() >= 2
        })
        .await;
        let log = cluster.log("w1");
        assert!(
            log.contains("stage blob refused; computing its shard again"),
            "{log}"
        );
        assert_eq!(
            log.matches("stage blob computed again and written back")
                .count(),
            2,
            "{log}"
        );
        // Written back whole, under the committed keys.
        for blob in &stage2 {
            assert!(
                opened.read(blob, &control).await.is_ok(),
                "{} restored",
                blob.key
            );
        }
    });
}

#[test]
fn damaged_and_missing_blobs_in_a_shared_directory_are_computed_again() {
    damaged_blobs_are_computed_again(Store::file());
}

#[test]
fn damaged_and_missing_blobs_in_s3_are_computed_again() {
    if let Some(store) = Store::s3("damaged") {
        damaged_blobs_are_computed_again(store);
    }
}

/// Stages 1 and 2 of a hex cell-step job computed by hand, each stage's
/// outputs in one pack. A listing of stage 2 is refused to a worker that
/// does not read packs, and a report naming a pack of another stage is
/// refused. Then the middle blob of stage 2's pack is damaged: the worker
/// that reads the pack refuses that blob alone, computes its shard again
/// without writing into the pack, reads the pack's other blobs as they are,
/// and the answer is the direct kernel's.
#[test]
fn a_damaged_blob_in_a_pack_is_computed_again_alone() {
    runtime().block_on(async {
        let store = Store::file();
        let cluster = &mut Cluster::start(&store, "1h", "0");
        let spec = hex_cell_step(4, 3);
        let mut client = jobs_client(&cluster.url).await;
        let id = submit(&mut client, &spec, "damaged-pack").await.id;
        let (stage2, opened) = run_stages_here(cluster, &spec, 2, 3, true).await;
        assert_eq!(stage2.len(), 3);
        assert!(
            stage2
                .iter()
                .all(|b| b.key == stage2[0].key && b.offset > 0)
        );

        let mut workers = workers_client(&cluster.url).await;
        let old = "test-old";
        let (session, _) = register_for_store(&mut workers, old).await;
        let status = workers
            .stage_blobs(proto::StageBlobsRequest {
                job_id: id.clone(),
                stage: 2,
                worker_id: old.into(),
                session: session.clone(),
                reads_held: true,
                reads_packed: false,
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(
            status.message().contains("in packs"),
            "{}",
            status.message()
        );
        let lease = lease_one(&mut workers, old, &session).await;
        assert_eq!(lease.stage, 3);
        let report = |last: Body| {
            let header = Body::Header(proto::ReportHeader {
                worker_id: old.into(),
                lease_id: lease.lease_id.clone(),
                session: session.clone(),
                output_bytes: 0,
            });
            let blob = Body::OutputBlob(proto::BlobRef::from(&stage2[0]));
            let bodies = match last {
                Body::Failure(_) => vec![header, last],
                _ => vec![header, blob, last],
            };
            tokio_stream::iter(
                bodies
                    .into_iter()
                    .map(|body| proto::ReportMessage { body: Some(body) })
                    .collect::<Vec<_>>(),
            )
        };
        let result = Body::Result(proto::ReportResult {
            compute_us: 0,
            partial: Vec::new(),
            work_done: lease.work_total,
        });
        let status = workers.report(report(result)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("not of its job and stage"),
            "{}",
            status.message()
        );
        let handed_back = Body::Failure(proto::ReportFailure {
            message: "handing back".into(),
            permanent: false,
            handed_back: true,
            no_room: false,
        });
        workers.report(report(handed_back)).await.unwrap();

        // The pack written again with one byte of its middle output changed:
        // the same places, one blob that no longer matches its digest.
        let control = Control::new();
        let mut outputs = Vec::new();
        for blob in &stage2 {
            outputs.push(opened.read(blob, &control).await.unwrap());
        }
        outputs[1][0] ^= 1;
        let outputs = outputs.into_iter().map(bytes::Bytes::from).collect();
        let rewritten = opened
            .put_pack(&stage2[0].key, outputs, &control)
            .await
            .unwrap();
        assert_eq!(rewritten[1].offset, stage2[1].offset);
        assert!(opened.read(&stage2[1], &control).await.is_err());

        cluster.add_worker("w1", 2, &[]);
        let job = wait_finished(&mut client, &id, Duration::from_secs(240)).await;
        assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
        assert_eq!(job.answer, direct_answer(&spec));
        eventually("the worker's log", Duration::from_secs(60), async || {
            cluster
                .log("w1")
                .contains("stage blob in a pack computed again")
        })
        .await;
        let log = cluster.log("w1");
        assert!(log.contains("stage blob in a pack computed again"), "{log}");
        assert!(!log.contains("written back"), "{log}");
        // Nothing was written into the pack: its damaged blob is as it was.
        assert!(opened.read(&stage2[1], &control).await.is_err());
        for blob in [&stage2[0], &stage2[2]] {
            assert!(opened.read(blob, &control).await.is_ok());
        }
    });
}

// ------------------------------------------- two directories, one store

/// Two coordinators with data directories of their own and one stage store
/// (a lost directory replaced, say): their job ids are the same, and each
/// one's sweep leaves the other's blobs alone, so both jobs finish right.
#[test]
fn two_data_directories_share_a_stage_store_without_touching_each_others_blobs() {
    runtime().block_on(async {
        let store = Store::file();
        let mut first = Cluster::start(&store, "1s", "0");
        let mut second = Cluster::start(&store, "1s", "0");
        first.add_worker("w1", 1, &["--shard-delay-ms", "50"]);
        second.add_worker("w2", 1, &["--shard-delay-ms", "50"]);
        let spec = pegs_frontier();
        let mut clients = [
            jobs_client(&first.url).await,
            jobs_client(&second.url).await,
        ];
        let mut ids = Vec::new();
        for client in &mut clients {
            ids.push(submit(client, &spec, "shared").await.id);
        }
        assert_eq!(ids[0], ids[1], "both directories start their job ids alike");
        for (client, id) in clients.iter_mut().zip(&ids) {
            let job = wait_finished(client, id, Duration::from_secs(240)).await;
            assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
            assert_eq!(job.answer, direct_answer(&spec));
        }
    });
}

// ------------------------------------------------- killed in mid-upload

/// A worker killed with SIGKILL halfway through writing a stage blob: the
/// half-written blob is never visible nor referenced, the shard is leased
/// again once its lease lapses, the job gets the direct kernel's answer, and
/// the sweep leaves the store empty.
fn killed_mid_upload(store: Store) {
    runtime().block_on(async {
        let mut cluster = Cluster::start(&store, "1s", "0");
        let opened = store.open().expect("a store outside the coordinator");
        cluster.add_worker("paused", 1, &["--pause-mid-upload-ms", "600000"]);
        let spec = with_ttl(hex_cell_step(4, 1), 2_000);
        let mut client = jobs_client(&cluster.url).await;
        let id = submit(&mut client, &spec, "mid-upload").await.id;
        eventually(
            "the worker pauses in mid-upload",
            Duration::from_secs(120),
            async || cluster.log("paused").contains("pausing mid-upload"),
        )
        .await;
        cluster.workers[0].kill9();
        let log = cluster.log("paused");
        let line = log
            .lines()
            .find(|l| l.contains("pausing mid-upload"))
            .unwrap();
        let key = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("key="))
            .unwrap_or_else(|| panic!("no key in {line:?}"))
            .to_string();
        let listed = opened.list(None).await.unwrap();
        assert!(
            !listed.iter().any(|k| k.ends_with(&key)),
            "{key} is visible"
        );

        cluster.add_worker("w1", 1, &[]);
        let job = wait_finished(&mut client, &id, Duration::from_secs(240)).await;
        assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
        assert_eq!(job.answer, direct_answer(&spec));
        // The cut attempt's shard was accepted from a later attempt.
        let (prefix, stage, index, attempt) = tally_stage::blob_owner(&key).unwrap();
        assert_eq!(prefix, tally_stage::job_prefix(&id));
        let accepted = events(&mut client, &id)
            .await
            .into_iter()
            .find(|e| e.kind == "accepted" && e.stage == stage && e.shard == index)
            .expect("the shard was accepted");
        assert!(
            accepted.attempt > attempt,
            "accepted from attempt {}",
            accepted.attempt
        );
        eventually(
            "the stage store emptied by the sweep",
            Duration::from_secs(60),
            async || stage_blobs(&opened).await.is_empty(),
        )
        .await;
    });
}

#[test]
fn a_worker_killed_in_mid_upload_to_a_shared_directory_leaves_nothing_referenced() {
    killed_mid_upload(Store::file());
}

#[test]
fn a_worker_killed_in_mid_upload_to_s3_leaves_nothing_referenced() {
    if let Some(store) = Store::s3("mid-upload") {
        killed_mid_upload(store);
    }
}

// --------------------------------------------------------- an S3 outage

/// The S3 endpoint unreachable for 10 s in the middle of a job: the worker
/// waits and retries, no attempt fails, and the job finishes with the
/// direct kernel's answer once the endpoint is back.
#[test]
fn an_s3_endpoint_unreachable_for_10_s_only_pauses_the_job() {
    let Some(store) = Store::s3("outage") else {
        return;
    };
    runtime().block_on(async {
        let mut cluster = Cluster::start(&store, "1s", "0");
        cluster.add_worker("w1", 2, &["--shard-delay-ms", "300"]);
        let spec = hex_cell_step(6, 2);
        let mut client = jobs_client(&cluster.url).await;
        let id = submit(&mut client, &spec, "outage").await.id;
        eventually(
            "the job reaches stage 3",
            Duration::from_secs(120),
            async || {
                events(&mut client, &id)
                    .await
                    .iter()
                    .any(|e| e.kind == "stage" && e.stage >= 3)
            },
        )
        .await;
        let Store::S3(s3, _) = &store else {
            unreachable!()
        };
        s3.stop();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during = events(&mut client, &id).await;
        s3.resume();
        let job = wait_finished(&mut client, &id, Duration::from_secs(300)).await;
        assert_eq!(state(&job), JobState::Succeeded, "{}", job.error);
        assert_eq!(job.answer, direct_answer(&spec));
        eventually("the worker's log", Duration::from_secs(60), async || {
            let log = cluster.log("w1");
            log.contains("stage store") && log.contains("retrying")
        })
        .await;
        let log = cluster.log("w1");
        let all = events(&mut client, &id).await;
        assert!(
            !all.iter()
                .any(|e| e.kind == "failed-attempt" || e.kind == "expired"),
            "no attempt failed: {:?}",
            all.iter()
                .filter(|e| e.kind == "failed-attempt" || e.kind == "expired")
                .collect::<Vec<_>>()
        );
        assert!(all.len() > during.len(), "the job went on after the outage");
        assert!(!log.contains(SECRET));
    });
}

// ------------------------------------------------- changing the stage store

/// A data directory with an unfinished job keeps the stage store the job
/// began with: a coordinator started on it with another refuses to start,
/// saying which job and which store; with the first store it starts.
#[test]
fn a_data_directory_keeps_its_stage_store_while_a_job_is_unfinished() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let log = dir.path().join("coordinator.log");
        let port = free_port();
        let start = |store: &str| {
            spawn_tally(
                &[
                    "coordinator",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--data",
                    data.to_str().unwrap(),
                    "--stage-store",
                    store,
                ],
                &[],
                &log,
            )
        };
        let mut first = start("coordinator");
        let mut client = jobs_client(&format!("http://127.0.0.1:{port}")).await;
        let id = submit(&mut client, &hex_cell_step(4, 1), "kept").await.id;
        first.kill9();
        let other = format!("file://{}", dir.path().join("stage").display());
        let mut refused = start(&other);
        let status = refused.0.wait().unwrap();
        assert!(
            !status.success(),
            "a coordinator with another stage store started"
        );
        let said = std::fs::read_to_string(&log).unwrap();
        assert!(
            said.contains(&id) && said.contains("keep their stage data in coordinator"),
            "{said}"
        );
        let _again = start("coordinator");
        let mut client = jobs_client(&format!("http://127.0.0.1:{port}")).await;
        let job = crate::support::get_job(&mut client, &id).await;
        assert_eq!(state(&job), JobState::Queued);
    });
}

// ------------------------------------------- refused at start, saying why

/// Runs `tally ARGS` with no environment but `env`, and returns its exit
/// status (`None`: still running after `limit`, then killed) and its stderr.
fn run_alone(
    args: &[&str],
    env: &[(String, String)],
    limit: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut child = ChildGuard(
        Command::new(tally_bin())
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn tally"),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child);
    (status, std::fs::read_to_string(&log).unwrap_or_default())
}

/// The line of `said` that starts with `error: `.
fn error_line(said: &str) -> &str {
    said.lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in {said}"))
}

/// A `--stage-store` value with credentials in it, given on the command
/// line or in `TALLY_STAGE_STORE`, is refused (exit 2) without a word of
/// what lies between `//` and `@`.
#[test]
fn a_stage_store_url_with_credentials_is_refused_without_showing_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for url in [
        "s3://AKIAEXAMPLE:SuperSecret123@bucket/p",
        "s3://AKIAEXAMPLE/SuperSecret123@bucket/p",
        "gs://AKIAEXAMPLE:SuperSecret123@bucket/p",
        "file://AKIAEXAMPLE:SuperSecret123@/var/stage",
    ] {
        for from_env in [false, true] {
            let mut args = vec!["coordinator", "--data", data.to_str().unwrap()];
            let mut env = Vec::new();
            match from_env {
                true => env.push(("TALLY_STAGE_STORE".to_string(), url.to_string())),
                false => args.extend(["--stage-store", url]),
            }
            let (status, said) = run_alone(&args, &env, Duration::from_secs(30));
            let status = status.expect("refused at once");
            assert_eq!(status.code(), Some(2), "{url}: {said}");
            assert!(error_line(&said).contains("--stage-store"), "{url}: {said}");
            for secret in ["SuperSecret123", "AKIAEXAMPLE"] {
                assert!(!said.contains(secret), "{url} (env: {from_env}): {said}");
            }
        }
    }
    assert!(!data.exists(), "a refused start touched the data directory");
}

/// An S3 stage store the coordinator cannot use is refused at start (exit
/// 2), in one line naming the bucket, the endpoint and the variable to set:
/// a missing bucket, a plain-HTTP endpoint without `AWS_ALLOW_HTTP`, an
/// `AWS_ALLOW_HTTP` that is empty.
#[test]
fn a_coordinator_refuses_to_start_on_an_s3_store_it_cannot_use() {
    let Some(s3) = MotoS3::start() else {
        return;
    };
    let good = s3.env();
    let endpoint = good
        .iter()
        .find(|(k, _)| k == "AWS_ENDPOINT_URL")
        .map(|(_, v)| v.clone())
        .unwrap();
    let changed = |name: &str, value: Option<&str>| -> Vec<(String, String)> {
        let mut env: Vec<_> = good.iter().filter(|(k, _)| k != name).cloned().collect();
        env.extend(value.map(|v| (name.to_string(), v.to_string())));
        env
    };
    let cases = [
        (
            "s3://tally-missing/p".to_string(),
            good.clone(),
            vec!["tally-missing", "NoSuchBucket", "create the bucket"],
        ),
        (
            format!("s3://{BUCKET}/p"),
            changed("AWS_ALLOW_HTTP", None),
            vec![BUCKET, "AWS_ALLOW_HTTP=true"],
        ),
        (
            format!("s3://{BUCKET}/p"),
            changed("AWS_ALLOW_HTTP", Some("")),
            vec![BUCKET, "AWS_ALLOW_HTTP"],
        ),
    ];
    for (url, env, parts) in cases {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let listen = format!("127.0.0.1:{}", free_port());
        let args = [
            "coordinator",
            "--listen",
            &listen,
            "--data",
            data.to_str().unwrap(),
            "--stage-store",
            &url,
        ];
        let (status, said) = run_alone(&args, &env, Duration::from_secs(90));
        let status = status.unwrap_or_else(|| panic!("{url} started: {said}"));
        assert_eq!(status.code(), Some(2), "{url}: {said}");
        let line = error_line(&said);
        for part in parts.iter().chain(&[endpoint.as_str(), "AWS_ENDPOINT_URL"]) {
            assert!(line.contains(part), "{part:?} not in {line}");
        }
        assert!(!said.contains(SECRET), "{said}");
        assert!(!said.contains("coordinator listening"), "{said}");
    }
}

/// A worker told of an S3 stage store it cannot use (here its environment
/// lacks `AWS_ALLOW_HTTP`) stops at its first registration, saying why in
/// one line with exit code 2 (its configuration), instead of failing each
/// shard it is given.
#[test]
fn a_worker_that_cannot_use_the_stage_store_says_so_at_once() {
    let Some(s3) = MotoS3::start() else {
        return;
    };
    let store = Store::S3(s3, "worker-check".into());
    let cluster = Cluster::start(&store, "1h", "0");
    let env: Vec<_> = store
        .env()
        .into_iter()
        .filter(|(k, _)| k != "AWS_ALLOW_HTTP")
        .collect();
    let args = ["worker", "--coordinator", &cluster.url, "--id", "no-http"];
    let (status, said) = run_alone(&args, &env, Duration::from_secs(90));
    let status = status.unwrap_or_else(|| panic!("the worker kept running: {said}"));
    assert_eq!(status.code(), Some(2), "{said}");
    let line = error_line(&said);
    for part in [BUCKET, "AWS_ALLOW_HTTP=true", "AWS_ENDPOINT_URL"] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
}
