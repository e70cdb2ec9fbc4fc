//! Every kind of the registry, through the runner: a small job of each runs on
//! an in-process cluster and its answer equals the kind's direct computation;
//! the sixth kind, queens, equals the published values.

use std::time::Duration;

use crate::support::*;
use tally_kinds as kinds;
use tally_kinds::Control;
use tally_kinds::spec::{JobSpec, ValidSpec};
use tally_wire::proto::{self, JobState};

async fn run_to_answer(
    client: &mut tally_wire::proto::job_service_client::JobServiceClient<tonic::transport::Channel>,
    spec: &ValidSpec,
) -> proto::Job {
    let job = client
        .submit(proto::SubmitRequest {
            spec: Some(spec.into()),
            idempotency_key: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    let done = wait_finished(client, &job.id, Duration::from_secs(600)).await;
    assert_eq!(
        state(&done),
        JobState::Succeeded,
        "{}: {}",
        job.description,
        done.error
    );
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_job_of_every_kind_equals_its_direct_answer() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 2, 2);
    assert_eq!(kinds::names().len(), kinds::KINDS.len());
    // A kind without a small example (wasm: its jobs need a module and have
    // no direct computation; tests/it/wasm.rs compares its examples with the
    // published counts) is left out.
    for kind in kinds::KINDS {
        let name = kind.name();
        let Some(params) = kind.small_example() else {
            continue;
        };
        let example = JobSpec {
            kind: name.to_string(),
            params: params.unwrap_or_else(|e| panic!("{name}: {e}")),
            options: Default::default(),
        };
        let spec = ValidSpec::new(example).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(spec.kind_name(), name);
        let done = run_to_answer(&mut client, &spec).await;
        let direct = spec.compute_direct(2, &Control::new()).unwrap();
        assert_eq!(done.answer, direct.line, "{name}");
        assert_eq!(done.kind, name);
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

/// OEIS A000170, n = 1..=12.
const QUEENS: [u64; 12] = [1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queens_through_the_runner_gives_the_published_counts() {
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let workers = Workers::start(&url, 2, 2);
    for (n, expected) in (1..).zip(QUEENS) {
        let spec = JobSpec::from_json(&format!(r#"{{"kind": "queens", "n": {n}}}"#)).unwrap();
        let done = run_to_answer(&mut client, &spec).await;
        assert_eq!(done.answer, expected.to_string(), "n = {n}");
        assert!(done.shards_total >= 1);
        if n >= 8 {
            assert!(done.shards_total > 1, "n = {n} is split into shards");
        }
    }
    workers.stop().await;
    coordinator.shutdown().await;
}

#[test]
fn queens_specs_are_checked_at_the_edge() {
    for bad in [0, tally_kernels::queens::MAX_N + 1] {
        let err = JobSpec::from_json(&format!(r#"{{"kind": "queens", "n": {bad}}}"#)).unwrap_err();
        assert!(err.to_string().contains("n must be between 1 and"), "{err}");
    }
    let err = JobSpec::from_json(r#"{"kind": "queens", "n": 8, "rows": 2}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = JobSpec::from_json(r#"{"kind": "rooks", "n": 8}"#).unwrap_err();
    assert!(err.to_string().contains("unknown job kind"), "{err}");
    // The proto form round-trips.
    let spec = JobSpec::from_json(r#"{"kind": "queens", "n": 18}"#).unwrap();
    let wire = proto::JobSpec::from(&spec);
    assert_eq!(ValidSpec::try_from(&wire).unwrap(), spec);
}
