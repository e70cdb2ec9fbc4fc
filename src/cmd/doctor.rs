//! `tally doctor`: checks what a user needs before submitting: the config
//! file, the coordinator's reachability and health, the token, the versions
//! and live workers.

use std::path::Path;
use std::process::ExitCode;

use tally_wire::deadline::{self, Deadlined};
use tally_wire::proto;
use tally_wire::proto::job_service_client::JobServiceClient;
use tally_wire::transport;

use crate::client::{Remote, quick};
use crate::output::outln;

/// One line of `tally doctor`.
struct Check {
    name: &'static str,
    ok: bool,
    /// A warning does not fail the doctor.
    warning: bool,
    detail: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            warning: false,
            detail: detail.into(),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: false,
            warning: false,
            detail: detail.into(),
        }
    }

    /// Passes when `ok`, else warns without failing the doctor.
    fn warn_unless(name: &'static str, ok: bool, detail: String) -> Check {
        Check {
            name,
            ok,
            warning: !ok,
            detail,
        }
    }
}

/// Checks what a user needs before submitting: the config, the coordinator's
/// reachability and health, the token, the versions and live workers.
pub async fn execute(
    remote: &Remote,
    config_path: Option<&Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut checks = vec![Check::pass(
        "config",
        match config_path {
            Some(p) => format!("{} loaded", p.display()),
            None => "no config file (flags and environment only)".into(),
        },
    )];
    let url = remote.shown();
    let channel = match transport::endpoint(&remote.url, &remote.security) {
        Ok(endpoint) => match tokio::time::timeout(deadline::CALL, endpoint.connect()).await {
            Ok(connected) => connected.map_err(|e| transport::with_causes(&e)),
            Err(_) => Err(format!(
                "no connection within {}",
                deadline::seconds(deadline::CALL)
            )),
        },
        Err(e) => Err(e.to_string()),
    };
    match channel {
        Err(e) => checks.push(Check::fail(
            "reachable",
            format!("cannot connect to {url}: {e}"),
        )),
        Ok(channel) => {
            let how = if remote.url.starts_with("https://") {
                " over TLS"
            } else {
                " (plain text)"
            };
            checks.push(Check::pass("reachable", format!("{url}{how}")));
            checks.push(check_health(channel.clone()).await);
            checks.extend(check_service(remote, channel).await?);
        }
    }
    print_checks(&checks, json)
}

async fn check_health(channel: tonic::transport::Channel) -> Check {
    let mut client = tonic_health::pb::health_client::HealthClient::new(Deadlined::new(channel));
    let health = client
        .check(quick(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        }))
        .await;
    match health {
        Ok(r) if r.get_ref().status == 1 => Check::pass("health", "serving"),
        Ok(r) => Check::fail("health", format!("status {}", r.get_ref().status)),
        Err(e) => Check::fail("health", e.message()),
    }
}

/// The token, the versions and the live workers, from one `Info` call.
async fn check_service(
    remote: &Remote,
    channel: tonic::transport::Channel,
) -> anyhow::Result<Vec<Check>> {
    let mut client = JobServiceClient::new(transport::authorized(channel, &remote.security)?);
    let info = client.info(quick(proto::InfoRequest {})).await;
    let info = match info {
        Ok(info) => info.into_inner(),
        Err(e) if e.code() == tonic::Code::Unauthenticated => {
            return Ok(vec![Check::fail(
                "token",
                format!(
                    "{} (set TALLY_TOKEN or --token-file to the coordinator's token)",
                    e.message()
                ),
            )]);
        }
        Err(e) => return Ok(vec![Check::fail("token", e.message())]),
    };
    let ours = env!("CARGO_PKG_VERSION");
    let replica = match &info.replica {
        None => Check::pass(
            "replica",
            "none (the store is not replicated: no stage store outside the coordinator, or \
             --replicate-every 0)",
        ),
        Some(r) => {
            let behind = r.lag_ms > 3 * r.every_ms.max(1000);
            let detail = format!(
                "{} ({} behind, {} change(s) waiting, generation {}, snapshot {}){}",
                r.url,
                humantime::format_duration(std::time::Duration::from_millis(r.lag_ms / 100 * 100)),
                r.pending_changes,
                r.generation,
                match r.snapshot_generation {
                    0 => "being written".to_string(),
                    g => format!("of generation {g}"),
                },
                match r.last_error.is_empty() {
                    true => String::new(),
                    false => format!("; last error: {}", r.last_error),
                }
            );
            Check::warn_unless("replica", !behind && r.last_error.is_empty(), detail)
        }
    };
    Ok(vec![
        Check::pass(
            "token",
            if remote.security.token.is_some() {
                "accepted"
            } else {
                "none needed"
            },
        ),
        Check::warn_unless(
            "version",
            info.version == ours,
            format!("tally {ours}, coordinator {}", info.version),
        ),
        Check::warn_unless(
            "workers",
            info.workers_live > 0,
            format!(
                "{} live; {} job(s), {} unfinished",
                info.workers_live, info.jobs, info.jobs_unfinished
            ),
        ),
        replica,
    ])
}

/// Prints the checks; the exit code fails when a check failed (not warned).
fn print_checks(checks: &[Check], json: bool) -> anyhow::Result<ExitCode> {
    let failed = checks.iter().any(|c| !c.ok && !c.warning);
    if json {
        let list: Vec<_> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "ok": c.ok,
                    "warning": c.warning,
                    "detail": c.detail,
                })
            })
            .collect();
        let mut value = serde_json::json!({ "ok": !failed, "checks": list });
        if failed {
            value["exit_code"] = 1.into();
        }
        outln!("{value}")?;
    } else {
        for c in checks {
            let mark = match (c.ok, c.warning) {
                (true, _) => "ok  ",
                (false, true) => "warn",
                (false, false) => "FAIL",
            };
            outln!("{mark} {:<10} {}", c.name, c.detail)?;
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
