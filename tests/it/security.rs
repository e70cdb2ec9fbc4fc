//! The bearer token and TLS: calls without the right token are UNAUTHENTICATED,
//! a worker with it completes jobs, and TLS with client certificates (mutual
//! TLS) lets in only clients holding a certificate from the configured CA.

use crate::support;

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tally_common::kinds::kayles::KaylesSpec;
use tally_common::proto::job_service_client::JobServiceClient;
use tally_common::proto::worker_service_client::WorkerServiceClient;
use tally_common::proto::{self, JobState};
use tally_common::spec::JobSpec;
use tally_common::transport::{self, AuthChannel, ClientSecurity, ClientTls, ServerTls};
use tally_coordinator::{CoordinatorConfig, RunningCoordinator};
use tonic::Code;

use support::Workers;

const TOKEN: &str = "correct-horse-battery-staple";

async fn start(token: Option<&str>, tls: Option<ServerTls>) -> RunningCoordinator {
    let mut config = CoordinatorConfig::new("127.0.0.1:0".parse().unwrap(), None);
    config.token = token.map(str::to_string);
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

/// Every RPC of both services, with what it returned.
async fn call_everything(url: &str, security: &ClientSecurity) -> Vec<(&'static str, Code)> {
    let mut j = jobs(url, security);
    let mut w = workers(url, security);
    let job_id = "job-000001".to_string();
    vec![
        (
            "Submit",
            code(
                j.submit(proto::SubmitRequest {
                    spec: Some(support::proto_spec(&small_job())),
                    idempotency_key: String::new(),
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
        ("List", code(j.list(proto::ListJobsRequest {}).await)),
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
        (
            "Register",
            code(
                w.register(proto::RegisterRequest {
                    worker_id: "w".into(),
                    hostname: "h".into(),
                    slots: 1,
                    version: "0".into(),
                })
                .await,
            ),
        ),
        (
            "Heartbeat",
            code(
                w.heartbeat(proto::HeartbeatRequest {
                    worker_id: "w".into(),
                    ..Default::default()
                })
                .await,
            ),
        ),
        (
            "Lease",
            code(
                w.lease(proto::LeaseRequest {
                    worker_id: "w".into(),
                    free_slots: 1,
                    wait_ms: 0,
                })
                .await,
            ),
        ),
        (
            "Report",
            code(
                w.report(tokio_stream::iter(Vec::<proto::ReportMessage>::new()))
                    .await,
            ),
        ),
        (
            "FetchStageData",
            code(
                w.fetch_stage_data(proto::FetchStageDataRequest {
                    job_id: job_id.clone(),
                    stage: 0,
                })
                .await,
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_without_the_token_is_unauthenticated() {
    let coordinator = start(Some(TOKEN), None).await;
    let url = coordinator.url();
    for presented in [None, Some("wrong"), Some("correct-horse-battery-stapl")] {
        for (rpc, code) in call_everything(&url, &security(presented)).await {
            assert_eq!(code, Code::Unauthenticated, "{rpc} with {presented:?}");
        }
    }
    // Nothing was created by the refused calls; with the token, calls get through.
    let with_token = call_everything(&url, &security(Some(TOKEN))).await;
    for (rpc, code) in &with_token {
        assert_ne!(*code, Code::Unauthenticated, "{rpc} with the token");
    }
    let listed = jobs(&url, &security(Some(TOKEN)))
        .list(proto::ListJobsRequest {})
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_with_the_token_finish_jobs_and_without_it_stop() {
    let coordinator = start(Some(TOKEN), None).await;
    let url = coordinator.url();

    // A worker with a wrong token fails fast with UNAUTHENTICATED.
    let mut config = tally_worker::WorkerConfig::new(url.clone());
    config.security = security(Some("wrong"));
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        tally_worker::run(config, std::future::pending()),
    )
    .await
    .expect("a refused worker stops on its own");
    match refused {
        Err(tally_worker::WorkerError::Rpc(status)) => {
            assert_eq!(status.code(), Code::Unauthenticated)
        }
        other => panic!("expected UNAUTHENTICATED, got {other:?}"),
    }

    let workers_ok = Workers::start_with(&url, 1, 2, |c| c.security = security(Some(TOKEN)));
    let mut client = jobs(&url, &security(Some(TOKEN)));
    let spec = small_job();
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(support::proto_spec(&spec)),
            idempotency_key: String::new(),
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
    let coordinator = start(Some(TOKEN), Some(pki.server_tls(true))).await;
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
            .list(proto::ListJobsRequest {})
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

    // A worker over mutual TLS finishes a job.
    let workers_tls = Workers::start_with(&url, 1, 2, |c| c.security = good.clone());
    let mut client = jobs(&url, &good);
    let spec = small_job();
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(support::proto_spec(&spec)),
            idempotency_key: String::new(),
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
    let coordinator = start(Some(TOKEN), Some(pki.server_tls(false))).await;
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
