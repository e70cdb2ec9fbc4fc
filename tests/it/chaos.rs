//! Chaos: real coordinator and worker processes killed with SIGKILL, frozen with
//! SIGSTOP and restarted at seeded random moments while hex, kayles and sliders
//! jobs run. Every answer must equal the kernels' and no acknowledged result may
//! be computed again. The driver is `support/chaos.rs`.
//!
//! `TALLY_CHAOS_SEED=N` replays a schedule; `TALLY_CHAOS_SECS=S` sets the fault
//! window. The long run (README, "Reliability testing"):
//!
//! ```sh
//! TALLY_CHAOS_SECS=600 cargo nextest run --release --test it --run-ignored all chaos::chaos_long
//! ```

use crate::support;

use support::chaos::{ChaosConfig, ChaosReport, run};

fn check(report: &ChaosReport) {
    eprintln!(
        "chaos summary (replay with TALLY_CHAOS_SEED={}):\n{}",
        report.seed,
        report.table()
    );
    assert!(
        report.violations.is_empty(),
        "chaos seed {} broke invariants (logs and store kept in {}):\n{}",
        report.seed,
        report.workdir.display(),
        report.violations.join("\n")
    );
    assert!(report.coordinator_kills >= 1 && report.worker_kills >= 1);
    assert!(report.coordinator_stops >= 1 && report.worker_stops >= 1);
    for kind in ["hex", "kayles", "sliders"] {
        assert!(
            report.jobs_verified.get(kind).copied().unwrap_or(0) >= 1,
            "no {kind} job was verified"
        );
    }
    assert!(
        report.acknowledged > 0,
        "no worker logged an accepted result"
    );
    assert_eq!(report.recomputed_after_accept, 0);
}

/// The short run of the normal suite: 30 s of faults (`TALLY_CHAOS_SECS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_short() {
    let config = ChaosConfig::from_env(30);
    let report = run(&config).await;
    check(&report);
}

/// The long run: 600 s of faults unless `TALLY_CHAOS_SECS` says otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run with --run-ignored all (see the README)"]
async fn chaos_long() {
    let mut config = ChaosConfig::from_env(600);
    config.settle = std::time::Duration::from_secs(180);
    let report = run(&config).await;
    check(&report);
}
