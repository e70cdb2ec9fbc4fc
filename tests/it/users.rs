//! A coordinator shared by a team, through real processes: the users file
//! (refused at start naming its line, read again on SIGHUP, a refused reload
//! keeping the users before it), ownership through the CLI and a Python
//! grpcio client, quotas, the audit log, and a store and configuration of an
//! earlier release serving with its single token as the admin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::*;

const WORKER_TOKEN: &str = "worker-token-0123456789";
const ADMIN_TOKEN: &str = "admin-token-0123456789";

/// The files of a team's coordinator.
struct Team {
    dir: tempfile::TempDir,
    url: String,
    port: u16,
    /// Where the coordinator serves `/metrics` and the status.
    http: std::net::SocketAddr,
}

impl Team {
    fn new() -> Team {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("worker-token"), WORKER_TOKEN).unwrap();
        std::fs::write(dir.path().join("admin-token"), ADMIN_TOKEN).unwrap();
        let port = free_port();
        Team {
            url: format!("http://127.0.0.1:{port}"),
            port,
            http: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
            dir,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A token of `name`'s, and its line in a users file as `tally hash-token` hashes it.
    fn user_line(&self, name: &str, role: &str, settings: &str) -> String {
        let token = format!("{name}-token-0123456789");
        let file = self.path(&format!("{name}-token"));
        std::fs::write(&file, &token).unwrap();
        let out = Command::new(tally_bin())
            .arg("hash-token")
            .arg("--token-file")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(hash.starts_with("sha256:") && hash.len() == 71, "{hash}");
        format!("{name} {role} {hash} {settings}\n")
    }

    /// The coordinator's flags for its tokens, and for the users file with
    /// `users`.
    fn flags(&self, users: bool) -> Vec<String> {
        let mut flags = vec![
            "--token-file".to_string(),
            self.file("admin-token"),
            "--worker-token-file".into(),
            self.file("worker-token"),
            "--http".into(),
            self.http.to_string(),
        ];
        if users {
            flags.extend(["--users-file".into(), self.file("users")]);
        }
        flags
    }

    fn coordinator(&self, users: bool) -> ChildGuard {
        let flags = self.flags(users);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        spawn_coordinator_with(
            self.port,
            &self.path("data"),
            &self.path("coordinator.log"),
            &flags,
        )
    }

    fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// `tally ARGS` as the holder of `token`.
    fn tally(&self, token: &str, args: &[&str]) -> Output {
        Command::new(tally_bin())
            .args(["--coordinator", &self.url])
            .args(args)
            .env("TALLY_TOKEN", token)
            .env_remove("TALLY_TOKEN_FILE")
            .output()
            .unwrap()
    }

    /// Waits until the coordinator answers `whoami` for `token`.
    fn wait_serving(&self, token: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.tally(token, &["whoami"]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the coordinator never served: {}",
                text(&out)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Submits a synthetic job as the holder of `token`; its id.
    fn submit(&self, token: &str) -> Result<String, String> {
        let out = self.tally(token, &["submit", "synthetic", "--shards", "4"]);
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim()
                .to_string()),
            false => Err(text(&out)),
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn token_of(name: &str) -> String {
    format!("{name}-token-0123456789")
}

fn hangup(coordinator: &ChildGuard) {
    let status = Command::new("kill")
        .args(["-HUP", &coordinator.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn users_change_only_their_own_jobs_and_the_audit_log_keeps_every_refusal() {
    let team = Team::new();
    let users = team.user_line("alice", "user", "weight=3")
        + &team.user_line("bob", "user", "queued=1 slots=2")
        + &team.user_line("carol", "admin", "");
    std::fs::write(team.path("users"), users).unwrap();
    let _coordinator = team.coordinator(true);
    let (alice, bob, carol) = (token_of("alice"), token_of("bob"), token_of("carol"));
    team.wait_serving(&alice);

    let whoami = text(&team.tally(&alice, &["whoami"]));
    assert!(
        whoami.starts_with("alice (user), fair-share weight 3"),
        "{whoami}"
    );
    // No worker: the jobs stay queued.
    let job = team.submit(&alice).unwrap();
    let status = text(&team.tally(&bob, &["status", &job]));
    assert!(
        status.contains("owner     alice"),
        "bob sees alice's job: {status}"
    );

    // Bob may not cancel, delete or read the events of alice's job.
    for (args, verb) in [
        (vec!["cancel", job.as_str()], "cancel"),
        (vec!["delete", "--force", job.as_str()], "delete"),
        (vec!["events", job.as_str()], "read the events of"),
    ] {
        let out = team.tally(&bob, &args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        let said = text(&out);
        assert!(
            said.contains(&format!("bob may not {verb} job {job}: it is alice's")),
            "{args:?}: {said}"
        );
    }
    // Bob's quota of one job queued or running refuses his second, with the numbers.
    team.submit(&bob).unwrap();
    let refused = team.submit(&bob).unwrap_err();
    assert!(
        refused.contains("bob has 1 jobs queued or running, and their quota is 1"),
        "{refused}"
    );
    // An admin of the file, and the client token's admin, may.
    let out = team.tally(&carol, &["cancel", &job]);
    assert!(out.status.success(), "{}", text(&out));
    let out = team.tally(ADMIN_TOKEN, &["delete", &job]);
    assert!(out.status.success(), "{}", text(&out));

    // Every refusal is in the audit log; a user reads only their own entries.
    let audit = |token: &str| -> Vec<serde_json::Value> {
        let out = team.tally(token, &["--json", "events", "--audit"]);
        assert!(out.status.success(), "{}", text(&out));
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        all["audit"].as_array().unwrap().clone()
    };
    let entries = audit(&carol);
    let seen: Vec<(&str, &str, bool)> = entries
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap();
            (field("user"), field("action"), e["done"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("alice", "submit", true),
            ("bob", "cancel", false),
            ("bob", "delete", false),
            ("bob", "events", false),
            ("bob", "submit", true),
            ("bob", "submit", false),
            ("carol", "cancel", true),
            ("admin", "delete", true),
        ]
    );
    let bobs = audit(&bob);
    assert_eq!(bobs.len(), 5);
    assert!(bobs.iter().all(|e| e["user"] == "bob"));

    // Each user's account in /metrics (labelled by user) and the status.
    let (_, metrics) = http_get(team.http, "/metrics");
    for line in [
        "tally_user_jobs_unfinished{user=\"bob\"} 1",
        "tally_user_jobs_unfinished{user=\"alice\"} 0",
        "tally_user_slots_held{user=\"carol\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    let (_, status) = http_get(team.http, "/api/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let users: Vec<&str> = (status["users"].as_array().unwrap().iter())
        .map(|u| u["user"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["admin", "alice", "bob", "carol"]);

    // The same rules through a Python grpcio client that knows the API only
    // by reflection, its token on every call.
    let others = team.submit(&carol).unwrap();
    if let Some(seen) = python_user(&team, &alice, &others) {
        assert_eq!(seen["name"], "alice");
        assert_eq!(seen["weight"], 3);
        assert_eq!(seen["own_job_owner"], "alice");
        assert_eq!(seen["cancel_others"], "PERMISSION_DENIED");
        assert_eq!(seen["events_of_others"], "PERMISSION_DENIED");
    }
}

/// What `tests/python/users_client.py` saw, or `None` where python lacks
/// grpcio (CI installs it).
fn python_user(team: &Team, token: &str, others_job: &str) -> Option<serde_json::Value> {
    let has_grpc = Command::new("python3")
        .args(["-c", "import grpc, grpc_reflection"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpc {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with grpcio and grpcio-reflection is required in CI"
        );
        eprintln!("skipped the python client: pip install grpcio grpcio-reflection");
        return None;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/users_client.py");
    let out = Command::new("python3")
        .args([
            script,
            &format!("127.0.0.1:{}", team.port),
            token,
            others_job,
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "python client: {}", text(&out));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn a_users_file_is_read_again_on_sighup_and_a_bad_one_is_refused_naming_its_line() {
    let team = Team::new();
    let alice = team.user_line("alice", "user", "");
    // At start: a user whose token is the worker token.
    let leaked = format!(
        "mallory user {} \n",
        tally_coordinator::users::token_hash_text(WORKER_TOKEN)
    );
    std::fs::write(team.path("users"), format!("{alice}{leaked}")).unwrap();
    let out = Command::new(tally_bin())
        .args([
            "coordinator",
            "--listen",
            &format!("127.0.0.1:{}", team.port),
        ])
        .arg("--data")
        .arg(team.path("data"))
        .args(team.flags(true))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("line 2: mallory's token is the worker token"),
        "{}",
        text(&out)
    );

    std::fs::write(team.path("users"), &alice).unwrap();
    let coordinator = team.coordinator(true);
    team.wait_serving(&token_of("alice"));
    let bob = token_of("bob");
    let refused = team.tally(&bob, &["whoami"]);
    assert!(
        text(&refused).contains("invalid bearer token"),
        "{}",
        text(&refused)
    );

    // Bob is added: a SIGHUP lets him in.
    let log = team.path("coordinator.log");
    std::fs::write(
        team.path("users"),
        alice.clone() + &team.user_line("bob", "user", ""),
    )
    .unwrap();
    hangup(&coordinator);
    block_on(wait_for_log_line(
        &log,
        &["users file read again", "users=3"],
        Duration::from_secs(30),
    ));
    assert!(team.tally(&bob, &["whoami"]).status.success());

    // A file naming bob twice is refused at the reload; bob and alice still serve.
    let twice =
        alice.clone() + &team.user_line("bob", "user", "") + &team.user_line("bob", "admin", "");
    std::fs::write(team.path("users"), twice).unwrap();
    hangup(&coordinator);
    let text_of_log = block_on(wait_for_log_line(
        &log,
        &[
            "users file refused",
            "line 3: the user bob is already named by line 2",
        ],
        Duration::from_secs(30),
    ));
    assert!(text_of_log.contains("the users before it keep serving"));
    let me = text(&team.tally(&bob, &["whoami"]));
    assert!(
        me.starts_with("bob (user)"),
        "the users before the refused file serve: {me}"
    );
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// The store of an earlier release and its configuration (one client token,
/// a worker token, no users file) start and serve: the token is the admin,
/// and the jobs stored before jobs had owners are the admin's to cancel.
#[test]
fn a_store_and_config_of_an_earlier_release_serve_with_the_single_token_as_admin() {
    let team = Team::new();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-0.1");
    copy_dir(&fixture, &team.path("data"));
    let _coordinator = team.coordinator(false);
    team.wait_serving(ADMIN_TOKEN);
    let me = text(&team.tally(ADMIN_TOKEN, &["whoami"]));
    assert!(me.starts_with("admin (admin)"), "{me}");
    let out = team.tally(ADMIN_TOKEN, &["--json", "list", "--state", "queued"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobs = listed["jobs"].as_array().unwrap();
    assert!(!jobs.is_empty(), "the fixture holds queued jobs");
    assert!(jobs.iter().all(|j| j["owner"] == "admin"), "{listed}");
    let id = jobs[0]["id"].as_str().unwrap();
    let out = team.tally(ADMIN_TOKEN, &["cancel", id]);
    assert!(out.status.success(), "{}", text(&out));
    // A job submitted now is the admin's too.
    let job = team.submit(ADMIN_TOKEN).unwrap();
    assert!(text(&team.tally(ADMIN_TOKEN, &["status", &job])).contains("owner     admin"));
}

/// The KEDA metric through the external scaler, called as KEDA calls it
/// with the client token (the scaler's, without a token of its own).
fn scaler_metric(team: &Team) -> i64 {
    use tally_wire::proto::externalscaler::external_scaler_client::ExternalScalerClient;
    use tally_wire::proto::externalscaler::{GetMetricsRequest, ScaledObjectRef};
    block_on(async {
        let mut client = ExternalScalerClient::connect(team.url.clone())
            .await
            .unwrap();
        let scaled = ScaledObjectRef {
            name: "tally-worker".into(),
            namespace: "tally".into(),
            scaler_metadata: [("token".to_string(), ADMIN_TOKEN.to_string())].into(),
        };
        let metrics = client
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(scaled),
                metric_name: "tally-slots".into(),
            })
            .await
            .unwrap()
            .into_inner();
        metrics.metric_values[0].metric_value
    })
}

/// A user's slot quota, through real processes: the scaler counts no more
/// of their work than the quota lets run, and a worker with free slots holds
/// no more of their shards, the job saying why it waits.
#[test]
fn a_slot_quota_holds_a_users_leases_and_the_scalers_metric() {
    let team = Team::new();
    let users = team.user_line("bob", "user", "slots=2") + &team.user_line("carol", "user", "");
    std::fs::write(team.path("users"), users).unwrap();
    let _coordinator = team.coordinator(true);
    let (bob, carol) = (token_of("bob"), token_of("carol"));
    team.wait_serving(&bob);
    // Shards of a second or more: eight of bob's hold the worker a while.
    let submit = |token: &str, shards: &str| {
        let out = team.tally(
            token,
            &[
                "submit",
                "synthetic",
                "--shards",
                shards,
                "--terms-per-shard",
                "1073741824",
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .trim()
            .to_string()
    };
    let job = submit(&bob, "8");
    assert_eq!(scaler_metric(&team), 2, "bob's 8 shards, 2 of them let run");
    let carols = submit(&carol, "3");
    assert_eq!(scaler_metric(&team), 5);
    let out = team.tally(&carol, &["cancel", &carols]);
    assert!(out.status.success(), "{}", text(&out));

    let _worker = spawn_tally(
        &[
            "worker",
            "--coordinator",
            &team.url,
            "--slots",
            "4",
            "--id",
            "w1",
        ],
        &[("TALLY_WORKER_TOKEN".into(), WORKER_TOKEN.into())],
        &team.path("worker.log"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = team.tally(&bob, &["--json", "status", &job]);
        assert!(out.status.success(), "{}", text(&out));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let leased = status["shards_leased"].as_u64().unwrap();
        assert!(leased <= 2, "bob's quota is 2 slots: {status}");
        let waiting = status["waiting"].as_str().unwrap();
        if leased == 2 && waiting.contains("their quota is 2") {
            assert!(waiting.contains("bob's jobs hold 2 slot(s)"), "{waiting}");
            break;
        }
        assert!(
            status["state"] != "succeeded" && Instant::now() < deadline,
            "never seen holding its quota: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
