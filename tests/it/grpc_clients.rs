//! Standard gRPC tooling against the coordinator: health checks and a Python
//! grpcio client that knows the API only through server reflection.

use crate::support;

use std::process::Command;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_service_reports_serving() {
    let coordinator = start_coordinator(None).await;
    let channel = tonic::transport::Endpoint::from_shared(coordinator.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", "tally.v1.JobService", "tally.v1.WorkerService"] {
        let response = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            response.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    coordinator.shutdown().await;
}

fn python_has_grpc() -> bool {
    Command::new("python3")
        .args(["-c", "import grpc, grpc_reflection"])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_client_with_only_reflection_submits_and_reads_a_job() {
    if !python_has_grpc() {
        // CI installs grpcio; elsewhere the test says what it needs.
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with grpcio and grpcio-reflection is required in CI"
        );
        eprintln!("skipped: pip install grpcio grpcio-reflection to run this test");
        return;
    }
    let coordinator = start_coordinator(None).await;
    let workers = Workers::start(&coordinator.url(), 1, 2);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/reflection_client.py"
    );
    let target = coordinator.addr.to_string();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .arg(target)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
    let services: Vec<&str> = seen["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for expected in [
        "grpc.health.v1.Health",
        "tally.v1.JobService",
        "tally.v1.WorkerService",
    ] {
        assert!(
            services.contains(&expected),
            "{services:?} lacks {expected}"
        );
    }
    assert_eq!(seen["state"], "JOB_STATE_SUCCEEDED");
    let spec = tally_kinds::spec::JobSpec::new(tally_kinds::kayles::KaylesSpec {
        pins: 20,
        digits: 9,
    });
    assert_eq!(seen["answer"], direct_answer(&spec));
    workers.stop().await;
    coordinator.shutdown().await;
}
