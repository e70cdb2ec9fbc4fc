//! Credentials and TLS: calls without the right token are UNAUTHENTICATED; a
//! client token cannot call the worker API nor a worker token the job API
//! (PERMISSION_DENIED); worker calls need the session given at registration;
//! a worker with its token completes jobs, and registers again when the
//! coordinator restarts; TLS with client certificates (mutual TLS) lets in only
//! clients holding a certificate from the configured CA.

use crate::support;

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tally_coordinator::{CoordinatorConfig, RunningCoordinator};
use tally_kinds::kayles::KaylesSpec;
use tally_kinds::spec::JobSpec;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::proto::worker_service_client::WorkerServiceClient;
use tally_wire::proto::{self, JobState};
use tally_wire::transport::{self, AuthChannel, ClientSecurity, ClientTls, ServerTls, Tokens};
use tonic::Code;

use support::Workers;

const TOKEN: &str = "correct-horse-battery-staple";
const WORKER_TOKEN: &str = "worker-horse-battery-staple";

/// A coordinator that requires the client and worker tokens (or none).
async fn start(secured: bool, tls: Option<ServerTls>) -> RunningCoordinator {
    let mut config = CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
    if secured {
        config.tokens = Tokens {
            client: Some(TOKEN.into()),
            worker: Some(WORKER_TOKEN.into()),
            scaler: None,
        };
    }
    config.tls = tls;
    tally_coordinator::start(config).await.expect("starts")
}

fn security(token: Option<&str>) -> ClientSecurity {
    ClientSecurity {
        token: token.map(str::to_string),
        tls: ClientTls::default(),
    }
}

fn jobs(url: &str, security: &ClientSecurity) -> JobServiceClient<AuthChannel> {
    JobServiceClient::new(transport::lazy_channel(url, security).unwrap())
}

fn workers(url: &str, security: &ClientSecurity) -> WorkerServiceClient<AuthChannel> {
    WorkerServiceClient::new(transport::lazy_channel(url, security).unwrap())
}

fn small_job() -> JobSpec {
    JobSpec::new(KaylesSpec {
        pins: 400,
        digits: 9,
    })
}

fn code<T>(result: Result<T, tonic::Status>) -> Code {
    result.map_or_else(|s| s.code(), |_| Code::Ok)
}

/// Every RPC of the job API, with what it returned.
async fn call_jobs(url: &str, security: &ClientSecurity) -> Vec<(&'static str, Code)> {
    let mut j = jobs(url, security);
    let job_id = "job-000001".to_string();
    vec![
        (
            "Submit",
            code(
                j.submit(proto::SubmitRequest {
                    spec: Some(support::proto_spec(&small_job())),
                    idempotency_key: String::new(),
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "Get",
            code(
                j.get(proto::GetJobRequest {
                    job_id: job_id.clone(),
                })
                .await,
            ),
        ),
        (
            "List",
            code(j.list(proto::ListJobsRequest::default()).await),
        ),
        (
            "Watch",
            code(
                j.watch(proto::WatchRequest {
                    job_id: job_id.clone(),
                })
                .await,
            ),
        ),
        (
            "Cancel",
            code(
                j.cancel(proto::CancelRequest {
                    job_id: job_id.clone(),
                })
                .await,
            ),
        ),
        (
            "Result",
            code(
                j.result(proto::ResultRequest {
                    job_id: job_id.clone(),
                })
                .await,
            ),
        ),
        (
            "Events",
            code(
                j.events(proto::EventsRequest {
                    job_id: job_id.clone(),
                    from_sequence: 0,
                })
                .await,
            ),
        ),
        ("Info", code(j.info(proto::InfoRequest {}).await)),
        (
            "Delete",
            code(
                // A job that does not exist: the call must not undo the others.
                j.delete(proto::DeleteRequest {
                    job_id: "job-999999".into(),
                    force: false,
                })
                .await,
            ),
        ),
    ]
}

/// Every RPC of the worker API, with what it returned; the calls after
/// registration carry the session it gave, if it gave one.
async fn call_workers(url: &str, security: &ClientSecurity) -> Vec<(&'static str, Code)> {
    let mut w = workers(url, security);
    let registered = w
        .register(proto::RegisterRequest {
            worker_id: "w".into(),
            hostname: "h".into(),
            slots: 1,
            version: "0".into(),
            memory_budget_bytes: 0,
            ..Default::default()
        })
        .await;
    let register = code(registered.as_ref().map(drop).map_err(Clone::clone));
    let session = registered.map_or_else(|_| String::new(), |r| r.into_inner().session);
    let header = proto::ReportMessage {
        body: Some(proto::report_message::Body::Header(proto::ReportHeader {
            worker_id: "w".into(),
            lease_id: "job-000001/0/0/1".into(),
            session: session.clone(),
            output_bytes: 0,
        })),
    };
    vec![
        ("Register", register),
        (
            "Heartbeat",
            code(
                w.heartbeat(proto::HeartbeatRequest {
                    worker_id: "w".into(),
                    leases: Vec::new(),
                    session: session.clone(),
                })
                .await,
            ),
        ),
        (
            "Lease",
            code(
                w.lease(proto::LeaseRequest {
                    lease_ahead: 0,
                    worker_id: "w".into(),
                    free_slots: 1,
                    wait_ms: 0,
                    session: session.clone(),
                })
                .await,
            ),
        ),
        (
            "Report",
            code(w.report(tokio_stream::iter(vec![header])).await),
        ),
        (
            "FetchStageData",
            code(
                w.fetch_stage_data(proto::FetchStageDataRequest {
                    job_id: "job-000001".into(),
                    stage: 0,
                    worker_id: "w".into(),
                    session: session.clone(),
                    bucket: None,
                    held_only: false,
                    shards: Vec::new(),
                })
                .await,
            ),
        ),
        (
            "FetchCheckpoint",
            code(
                w.fetch_checkpoint(proto::FetchCheckpointRequest {
                    worker_id: "w".into(),
                    session: session.clone(),
                    lease_id: "job-000001/0/0/1".into(),
                })
                .await,
            ),
        ),
        (
            "StageBlobs",
            code(
                w.stage_blobs(proto::StageBlobsRequest {
                    job_id: "job-000001".into(),
                    stage: 1,
                    worker_id: "w".into(),
                    session: session.clone(),
                    reads_held: false,
                    reads_packed: false,
                })
                .await,
            ),
        ),
        (
            "StageShard",
            code(
                w.stage_shard(proto::StageShardRequest {
                    job_id: "job-000001".into(),
                    stage: 1,
                    index: 0,
                    worker_id: "w".into(),
                    session,
                })
                .await,
            ),
        ),
    ]
}

async fn call_everything(url: &str, security: &ClientSecurity) -> Vec<(&'static str, Code)> {
    let mut calls = call_jobs(url, security).await;
    calls.extend(call_workers(url, security).await);
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_without_a_valid_token_is_unauthenticated() {
    let coordinator = start(true, None).await;
    let url = coordinator.url();
    for presented in [None, Some("wrong"), Some("correct-horse-battery-stapl")] {
        for (rpc, code) in call_everything(&url, &security(presented)).await {
            assert_eq!(code, Code::Unauthenticated, "{rpc} with {presented:?}");
        }
    }
    // Nothing was created by the refused calls; with the tokens, calls get through.
    let passed = |code: &Code| !matches!(code, Code::Unauthenticated | Code::PermissionDenied);
    for (rpc, code) in call_jobs(&url, &security(Some(TOKEN))).await {
        assert!(passed(&code), "{rpc} with the client token: {code:?}");
    }
    for (rpc, code) in call_workers(&url, &security(Some(WORKER_TOKEN))).await {
        assert!(passed(&code), "{rpc} with the worker token: {code:?}");
    }
    let listed = jobs(&url, &security(Some(TOKEN)))
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.jobs.len(),
        1,
        "only the authenticated submit made a job"
    );
    assert_eq!(listed.jobs[0].id, "job-000001");

    // Health stays open for orchestrators' probes.
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1, "SERVING");
    coordinator.shutdown().await;
}

/// The role checks: every worker RPC with the client token, and every job RPC
/// with the worker token, is PERMISSION_DENIED and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_credential_is_refused_the_other_roles_api() {
    let coordinator = start(true, None).await;
    let url = coordinator.url();
    let mut checked = Vec::new();
    for (rpc, code) in call_workers(&url, &security(Some(TOKEN))).await {
        assert_eq!(
            code,
            Code::PermissionDenied,
            "worker RPC {rpc} with the client token"
        );
        checked.push(format!("{rpc} with the client token: {code:?}"));
    }
    for (rpc, code) in call_jobs(&url, &security(Some(WORKER_TOKEN))).await {
        assert_eq!(
            code,
            Code::PermissionDenied,
            "job RPC {rpc} with the worker token"
        );
        checked.push(format!("{rpc} with the worker token: {code:?}"));
    }
    // The refusal names what went wrong.
    let status = workers(&url, &security(Some(TOKEN)))
        .lease(proto::LeaseRequest {
            lease_ahead: 0,
            worker_id: "w".into(),
            free_slots: 1,
            wait_ms: 0,
            session: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        status.message(),
        "a client token cannot call the worker API: it needs a worker token"
    );
    // Nothing was submitted with the worker token; no worker was registered
    // with the client token.
    let info = jobs(&url, &security(Some(TOKEN)))
        .info(proto::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.workers_live, 0);
    let listed = jobs(&url, &security(Some(TOKEN)))
        .list(proto::ListJobsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.jobs.is_empty());
    eprintln!(
        "role checks ({}):\n  {}",
        checked.len(),
        checked.join("\n  ")
    );
    coordinator.shutdown().await;
}

/// A coordinator with a client token and no worker token, or one token for
/// both roles, does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_that_blur_the_roles_do_not_start() {
    for (client, worker) in [(Some(TOKEN), None), (Some(TOKEN), Some(TOKEN))] {
        let mut config = CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
        config.tokens = Tokens {
            client: client.map(str::to_string),
            worker: worker.map(str::to_string),
            scaler: None,
        };
        let Err(e) = tally_coordinator::start(config).await else {
            panic!("started with {client:?} / {worker:?}");
        };
        assert!(e.to_string().contains("worker"), "{e}");
    }
}

/// Sessions live in the coordinator's memory: after a restart every worker's
/// session is unknown, its next call is refused, and it registers again and
/// finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_register_again_when_the_coordinator_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = support::start_coordinator(Some(dir.path())).await;
    let addr = first.addr;
    let url = first.url();
    let workers = Workers::start_with(&url, 2, 1, |c| {
        c.shard_delay = Duration::from_millis(100);
    });
    let mut client = support::jobs_client(&url).await;
    let spec = JobSpec::new(KaylesSpec {
        pins: 3_000,
        digits: 9,
    });
    let job = support::submit(&mut client, &spec, "").await;
    // Restart once some but not all shards are done.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let j = support::get_job(&mut client, &job.id).await;
        if j.shards_done > 0 {
            assert!(
                j.shards_done < j.shards_total,
                "finished before the restart"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.shutdown().await;
    let second = support::start_coordinator_on(addr, dir.path()).await;
    let mut client = support::jobs_client(&url).await;
    let done = support::wait_finished(&mut client, &job.id, Duration::from_secs(120)).await;
    assert_eq!(support::state(&done), JobState::Succeeded, "{}", done.error);
    assert_eq!(done.answer, support::direct_answer(&spec));
    let info = client
        .info(proto::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.workers_live, 2, "both workers registered again");
    workers.stop().await;
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_with_the_token_finish_jobs_and_without_it_stop() {
    let coordinator = start(true, None).await;
    let url = coordinator.url();

    // A worker with a wrong token, or with the client token, fails fast.
    for (token, expected) in [
        ("wrong", Code::Unauthenticated),
        (TOKEN, Code::PermissionDenied),
    ] {
        let mut config = tally_worker::WorkerConfig::new(url.clone());
        config.security = security(Some(token));
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            tally_worker::run(config, std::future::pending()),
        )
        .await
        .expect("a refused worker stops on its own");
        match refused {
            Err(tally_worker::WorkerError::Refused(status)) => assert_eq!(status.code(), expected),
            other => panic!("expected {expected:?}, got {other:?}"),
        }
    }

    let workers_ok = Workers::start_with(&url, 1, 2, |c| c.security = security(Some(WORKER_TOKEN)));
    let mut client = jobs(&url, &security(Some(TOKEN)));
    let spec = small_job();
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(support::proto_spec(&spec)),
            idempotency_key: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let j = client
            .get(proto::GetJobRequest {
                job_id: job.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if j.state == JobState::Succeeded as i32 {
            break j;
        }
        assert!(std::time::Instant::now() < deadline, "job did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.answer, support::direct_answer(&spec));
    workers_ok.stop().await;
    coordinator.shutdown().await;
}

/// `tally worker` with a token the coordinator refuses stops at once with
/// one clear line naming the refusal, not tonic's `code: '...'` form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_worker_says_so_in_one_clear_line() {
    let coordinator = start(true, None).await;
    let url = coordinator.url();
    for (token, says) in [
        (
            "wrong",
            "error: the coordinator refused the worker token (UNAUTHENTICATED): invalid bearer \
             token for the worker API",
        ),
        (
            TOKEN,
            "error: the coordinator refused the worker token (PERMISSION_DENIED): a client token \
             cannot call the worker API: it needs a worker token",
        ),
    ] {
        let mut child = support::ChildGuard(
            std::process::Command::new(support::tally_bin())
                .args(["worker", "--coordinator", &url, "--log-level", "error"])
                .env("TALLY_WORKER_TOKEN", token)
                .env_remove("TALLY_WORKER_TOKEN_FILE")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a refused worker must stop on its own"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{stderr}");
        assert_eq!(stderr.trim_end().lines().last(), Some(says), "{stderr}");
        assert!(!stderr.contains("code: '"), "{stderr}");
    }
    coordinator.shutdown().await;
}

struct Pki {
    ca_pem: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
    /// A client certificate from a CA the coordinator does not trust.
    rogue_cert: String,
    rogue_key: String,
}

impl Pki {
    /// The coordinator's TLS, requiring client certificates from the CA or not.
    fn server_tls(&self, client_certificates: bool) -> ServerTls {
        ServerTls {
            cert: self.server_cert.clone().into_bytes(),
            key: self.server_key.clone().into_bytes(),
            client_ca: client_certificates.then(|| self.ca_pem.clone().into_bytes()),
        }
    }
}

fn pki() -> Pki {
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let leaf = |issuer: &CertifiedIssuer<'_, KeyPair>, names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let trusted = ca("tally test CA");
    let rogue = ca("rogue CA");
    let (server_cert, server_key) = leaf(&trusted, vec!["localhost".into()]);
    let (client_cert, client_key) = leaf(&trusted, vec!["worker-1".into()]);
    let (rogue_cert, rogue_key) = leaf(&rogue, vec!["worker-2".into()]);
    Pki {
        ca_pem: trusted.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
        rogue_cert,
        rogue_key,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_tls_lets_in_only_clients_with_a_trusted_certificate() {
    let pki = pki();
    let coordinator = start(true, Some(pki.server_tls(true))).await;
    let url = format!("https://localhost:{}", coordinator.addr.port());
    let tls = |identity: Option<(&str, &str)>| ClientSecurity {
        token: Some(TOKEN.into()),
        tls: ClientTls {
            ca: Some(pki.ca_pem.clone().into_bytes()),
            identity: identity.map(|(c, k)| (c.as_bytes().to_vec(), k.as_bytes().to_vec())),
            domain: None,
        },
    };
    let list = |security: ClientSecurity, url: String| async move {
        jobs(&url, &security)
            .list(proto::ListJobsRequest::default())
            .await
            .map(|_| ())
    };

    // Trusted client certificate and token: in.
    let good = tls(Some((&pki.client_cert, &pki.client_key)));
    list(good.clone(), url.clone()).await.expect("mutual TLS");
    // No client certificate, a rogue one, or plain text: out.
    assert!(list(tls(None), url.clone()).await.is_err());
    assert!(
        list(tls(Some((&pki.rogue_cert, &pki.rogue_key))), url.clone())
            .await
            .is_err()
    );
    let plain = format!("http://127.0.0.1:{}", coordinator.addr.port());
    assert!(list(security(Some(TOKEN)), plain).await.is_err());
    // The certificate alone is not enough: the token is still checked.
    let mut no_token = good.clone();
    no_token.token = None;
    assert_eq!(
        list(no_token, url.clone()).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    // A worker over mutual TLS, with its token, finishes a job.
    let worker_security = ClientSecurity {
        token: Some(WORKER_TOKEN.into()),
        ..good.clone()
    };
    let workers_tls = Workers::start_with(&url, 1, 2, |c| c.security = worker_security.clone());
    let mut client = jobs(&url, &good);
    let spec = small_job();
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(support::proto_spec(&spec)),
            idempotency_key: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let j = client
            .get(proto::GetJobRequest {
                job_id: job.id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if j.state == JobState::Succeeded as i32 {
            assert_eq!(j.answer, support::direct_answer(&spec));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "job did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    workers_tls.stop().await;
    coordinator.shutdown().await;
}

/// A TLS failure is named: an unknown CA or a certificate for another name,
/// not just "transport error".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_failures_say_what_failed() {
    let pki = pki();
    let coordinator = start(true, Some(pki.server_tls(false))).await;
    let port = coordinator.addr.port();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let wrong_ca = dir.path().join("wrong-ca.pem");
    std::fs::write(&wrong_ca, &pki.rogue_cert).unwrap();
    let cases = [
        (
            "an unknown CA",
            format!("https://localhost:{port}"),
            wrong_ca.clone(),
        ),
        (
            "another name",
            format!("https://127.0.0.1:{port}"),
            ca.clone(),
        ),
    ];
    for (name, url, ca) in cases {
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(support::tally_bin())
                .args(["list", "--coordinator", &url, "--tls-ca"])
                .arg(ca)
                .env("TALLY_TOKEN", TOKEN)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(
            stderr.to_lowercase().contains("certificate"),
            "{name}: the line does not say what failed: {stderr}"
        );
        eprintln!("{name}: {}", stderr.trim());
    }
    coordinator.shutdown().await;
}

/// TLS material that cannot work is refused before anything is served or
/// sent, with one line saying why: a key that does not belong to its
/// certificate (server or client side), or an X.509 v1 certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_material_that_cannot_work_is_refused_with_its_reason() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let cert = write("cert.pem", &pki.server_cert);
    let other_key = write("other.key", &pki.client_key);
    let ca = write("ca.pem", &pki.ca_pem);
    let v1 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls-v1");
    let v1_cert = v1.join("server.pem").display().to_string();
    let v1_key = v1.join("server.key").display().to_string();
    let data = dir.path().join("data").display().to_string();
    // A command line, then the certificate and key it presents.
    let with_identity = |args: &[&str], cert: &str, key: &str| -> Vec<String> {
        args.iter()
            .chain(&["--tls-cert", cert, "--tls-key", key])
            .map(|s| s.to_string())
            .collect()
    };
    let coordinator_args = ["coordinator", "--listen", "127.0.0.1:0", "--data", &data];
    let client_args = [
        "list",
        "--coordinator",
        "https://localhost:1",
        "--tls-ca",
        &ca,
    ];
    let coordinator = |cert: &str, key: &str| with_identity(&coordinator_args, cert, key);
    let client = |cert: &str, key: &str| with_identity(&client_args, cert, key);
    let mismatch = "the private key does not belong to the certificate";
    let version = "the certificate is X.509 v1";
    let cases = [
        (
            "a coordinator key of another certificate",
            coordinator(&cert, &other_key),
            mismatch,
        ),
        (
            "a coordinator certificate of version 1",
            coordinator(&v1_cert, &v1_key),
            version,
        ),
        (
            "a client key of another certificate",
            client(&cert, &other_key),
            mismatch,
        ),
        (
            "a client certificate of version 1",
            client(&v1_cert, &v1_key),
            version,
        ),
    ];
    for (name, args, reason) in cases {
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(support::tally_bin())
                .args(&args)
                .env("TALLY_TOKEN", TOKEN)
                .env("TALLY_WORKER_TOKEN", WORKER_TOKEN)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.contains(reason), "{name}: {stderr}");
        eprintln!("{name}: {}", stderr.trim());
    }
    assert!(
        !dir.path().join("data").exists(),
        "a refused coordinator made a store"
    );
}
