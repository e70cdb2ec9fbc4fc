//! The `tally` command line: the answer is the last stdout line, `--json` is one
//! object, bad input is one clear stderr line and a non-zero exit, never a panic.

use crate::support;

use std::process::{Command, Output};

use support::*;

fn tally(args: &[&str]) -> Output {
    Command::new(tally_bin())
        .args(args)
        .env_remove("TALLY_COORDINATOR")
        .output()
        .expect("runs")
}

fn last_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

/// The path of an example module in the checkout.
fn example_module(name: &str) -> String {
    format!("{}/examples/wasm/{name}.wasm", env!("CARGO_MANIFEST_DIR"))
}

fn h4_mod_p() -> String {
    (10_663_950_528_000u64 % 1_000_000_007).to_string()
}

#[test]
fn run_prints_the_answer_as_the_last_line() {
    let out = tally(&["run", "hex", "--side", "4"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(last_line(&out), h4_mod_p());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "stdout holds only the answer"
    );

    let out = tally(&["run", "kayles", "--pins", "20"]);
    assert_eq!(last_line(&out), "000049844");
    let queens = example_module("queens");
    let out = tally(&[
        "run", "wasm", "--module", &queens, "--shards", "8", "--param", "n=12",
    ]);
    assert_eq!(
        last_line(&out),
        tally_example_queens::A000170[12].to_string()
    );
    let sets = example_module("independent-sets");
    let exact = [
        "run",
        "wasm",
        "--module",
        &sets,
        "--shards",
        "4",
        "--param",
        "n=10",
        "--exact",
        "--bound-bits",
        "64",
    ];
    let out = tally(&exact);
    let published = tally_example_independent_sets::A006506[10];
    assert_eq!(last_line(&out), published.to_string());
    let out = tally(&["run", "sliders", "--workers", "2"]);
    assert!(out.status.success());
    let direct = tally(&["run", "sliders", "--direct"]);
    assert_eq!(last_line(&out), last_line(&direct));
}

/// Shards sized for the user: `--shards auto` picks a count (said on
/// stderr) and the answer is the one any count gives; a count of 0 is
/// refused, naming auto. (What is called short, and how auto counts, is
/// tested with set timings in `src/sizing.rs`.)
#[test]
fn shards_auto_picks_a_count_and_short_shards_are_said() {
    let queens = example_module("queens");
    let out = tally(&[
        "run", "wasm", "--module", &queens, "--shards", "auto", "--param", "n=10",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        last_line(&out),
        tally_example_queens::A000170[10].to_string()
    );
    assert!(stderr.contains("--shards auto: "), "{stderr}");
    let bad = tally(&["run", "wasm", "--module", &queens, "--shards", "0"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("or auto"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn a_wasm_spec_file_sends_its_module_with_attach() {
    let queens = example_module("queens");
    let digest = tally_kinds::guest::sha256_hex(&std::fs::read(&queens).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("queens.json");
    let text = format!(
        r#"{{"kind": "wasm", "module_sha256": "{digest}", "shards": 4, "params": ["n=9"]}}"#
    );
    std::fs::write(&spec, text).unwrap();
    let spec = spec.display().to_string();
    let out = tally(&["run", "--spec-file", &spec, "--attach", &queens]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        last_line(&out),
        tally_example_queens::A000170[9].to_string()
    );
    // Without it, the embedded coordinator holds no such module.
    let out = tally(&["run", "--spec-file", &spec]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("does not hold"), "{stderr}");
    // An exact sum needs no modulus: the file leaves it out, as the flags do.
    let exact = dir.path().join("queens-exact.json");
    let text = format!(
        r#"{{"kind": "wasm", "module_sha256": "{digest}", "shards": 4, "params": ["n=9"],
            "exact": true, "bound_bits": 64}}"#
    );
    std::fs::write(&exact, text).unwrap();
    let exact = exact.display().to_string();
    let out = tally(&["run", "--spec-file", &exact, "--attach", &queens]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        last_line(&out),
        tally_example_queens::A000170[9].to_string()
    );
}

/// A kind named with a spec file (`tally run hex --spec-file job.json`)
/// takes its required flags from the file, which must be of that kind; its
/// flags and the file together are still refused.
#[test]
fn a_kind_named_with_a_spec_file_takes_its_flags_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("hex.json");
    std::fs::write(&spec, r#"{"kind": "hex", "side": 2}"#).unwrap();
    let spec = spec.display().to_string();
    let out = tally(&["run", "hex", "--spec-file", &spec]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(last_line(&out), "24");
    for (args, says) in [
        (
            &["run", "kayles", "--spec-file", &spec][..],
            "a spec of a hex job, not kayles",
        ),
        (
            &["run", "hex", "--side", "3", "--spec-file", &spec][..],
            "not both",
        ),
    ] {
        let out = tally(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {says:?} not in {stderr}");
    }
}

#[test]
fn json_is_one_object_and_global_flags_go_anywhere() {
    for args in [
        &["--json", "run", "kayles", "--pins", "6"][..],
        &["run", "--json", "kayles", "--pins", "6"][..],
        &["run", "kayles", "--pins", "6", "--json"][..],
    ] {
        let out = tally(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(value["answer"], "000000008", "{args:?}");
        assert_eq!(value["state"], "succeeded");
    }
}

#[test]
fn bad_input_gets_one_clear_line_and_a_non_zero_exit() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "hex", "--side", "0"], "side"),
        (&["run", "hex", "--side", "21"], "side"),
        (
            &["run", "hex", "--side", "5", "--modulus", "1000000008"],
            "prime",
        ),
        (&["run", "kayles", "--pins", "7"], "even"),
        (&["run", "kayles", "--pins", "-4"], "-4"),
        (&["run", "kayles", "--pins", "100000000000"], "pins"),
        (
            &["run", "kayles", "--pins", "10", "--digits", "0"],
            "digits",
        ),
        (
            &[
                "run",
                "sliders",
                "--start",
                "WRBBRRBBRRBBRRB",
                "--target",
                "WBRBBRBRRBRBBRBR",
            ],
            "16",
        ),
        (
            &[
                "run",
                "sliders",
                "--start",
                "WRBBRRBBRRBBRRBX",
                "--target",
                "WBRBBRBRRBRBBRBR",
            ],
            "X",
        ),
        (
            &[
                "run",
                "sliders",
                "--start",
                "WRBBRRBBRRBBRRRR",
                "--target",
                "WBRBBRBRRBRBBRBR",
            ],
            "different tiles",
        ),
        (
            &[
                "run", "sliders", "--rows", "2", "--cols", "2", "--start", "WRBG", "--target",
                "WBRG",
            ],
            "reach",
        ),
        (
            &[
                "run",
                "sliders",
                "--rows",
                "6",
                "--cols",
                "2",
                "--start",
                "WRBBRRBBRRBB",
                "--target",
                "WRBBRRBBRRBB",
            ],
            "6",
        ),
        (&["run"], "kind"),
        (
            &["status", "job-1", "--coordinator", "http://127.0.0.1:1"],
            "coordinator",
        ),
    ];
    for (args, needle) in cases {
        let out = tally(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            stderr.to_lowercase().contains(&needle.to_lowercase()),
            "{args:?}: {needle:?} not in {stderr}"
        );
        // The parser's errors too: one line with a hint, no usage.
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
    }
}

/// Files named on the command line are read with a bound (`/dev/zero` is
/// refused at once), a spec file that does not parse is bad input (exit 2),
/// and with `--json` a failure is one JSON object on stdout too.
#[test]
fn named_files_are_read_with_a_bound_and_bad_spec_files_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.json");
    std::fs::write(&spec, "{\"kind\": \"kayles\", \"pins\": ").unwrap();
    let spec = spec.display().to_string();
    let queens = example_module("queens");
    let cases: &[(&[&str], &str)] = &[
        (&["--token-file", "/dev/zero", "list"], "larger than"),
        (
            &[
                "--tls-ca",
                "/dev/zero",
                "list",
                "--coordinator",
                "https://127.0.0.1:1",
            ],
            "larger than",
        ),
        (&["submit", "--spec-file", "/dev/zero"], "larger than"),
        (&["run", "blocks", "--puzzle", "/dev/zero"], "larger than"),
        (&["submit", "--spec-file", &spec], "job.json"),
        (
            &["run", "wasm", "--module", "/dev/zero", "--shards", "1"],
            "larger than",
        ),
        (
            &["run", "wasm", "--module", &spec, "--shards", "1"],
            "not a valid module",
        ),
        (
            &[
                "run", "wasm", "--module", &queens, "--shards", "2", "--direct",
            ],
            "leave out --direct",
        ),
    ];
    for (args, needle) in cases {
        let out = tally(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    let out = tally(&["--json", "submit", "--spec-file", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(value["exit_code"], 2);
    assert!(
        value["error"].as_str().unwrap().contains("job.json"),
        "{value}"
    );
}

/// A coordinator open to the network with no authentication at all must be
/// asked for explicitly; the refusal touches nothing.
#[test]
fn a_coordinator_beyond_loopback_needs_authentication_or_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.display().to_string();
    let out = tally(&["coordinator", "--listen", "0.0.0.0:0", "--data", &data_arg]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no authentication") && stderr.contains("--insecure"),
        "{stderr}"
    );
    assert!(!data.exists(), "the refusal created the data directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_status_watch_result_list_and_cancel_against_a_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.txt");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let _coordinator = spawn_coordinator(port, &dir.path().join("data"), &log);
    jobs_client(&url).await;
    let run = |args: Vec<&str>| {
        let url = url.clone();
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        std::thread::spawn(move || {
            Command::new(tally_bin())
                .args(&args)
                .env("TALLY_COORDINATOR", url)
                .output()
                .unwrap()
        })
        .join()
        .unwrap()
    };
    let out = run(vec!["submit", "hex", "--side", "5"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = last_line(&out);
    assert!(id.starts_with("job-"), "{id}");

    let status = run(vec!["status", &id, "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for field in [
        "id",
        "kind",
        "state",
        "stage",
        "stages_total",
        "shards_done",
        "shards_total",
        "work_done",
        "work_total",
        "elapsed_ms",
        "eta_ms",
        "answer",
        "error",
    ] {
        assert!(value.get(field).is_some(), "status --json lacks {field}");
    }
    assert_eq!(value["state"], "queued");
    // No worker yet: the job says why it waits.
    assert_eq!(value["waiting"], "no worker is connected");
    let text = String::from_utf8_lossy(&run(vec!["status", &id]).stdout).to_string();
    assert!(
        text.contains("\n  waiting   no worker is connected\n"),
        "{text}"
    );

    let _worker = spawn_worker(&url, "cli-worker", 2, &[], &log);
    let watched = run(vec!["watch", &id]);
    assert!(
        watched.status.success(),
        "{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    let direct = tally(&["run", "hex", "--side", "5", "--direct"]);
    assert_eq!(last_line(&watched), last_line(&direct));
    assert_eq!(last_line(&run(vec!["result", &id])), last_line(&direct));

    let text = String::from_utf8_lossy(&run(vec!["status", &id]).stdout).to_string();
    assert!(
        text.contains("succeeded") && text.contains("shards"),
        "{text}"
    );
    let list = String::from_utf8_lossy(&run(vec!["list"]).stdout).to_string();
    assert!(list.lines().next().unwrap().starts_with("ID"), "{list}");
    assert!(list.contains(&id));

    // Cancel a queued job; a second cancel is harmless; cancelling a finished job is refused.
    let queued = last_line(&run(vec![
        "submit",
        "kayles",
        "--pins",
        "2000000",
        "--priority",
        "-5",
    ]));
    let cancelled = run(vec!["cancel", &queued]);
    assert!(String::from_utf8_lossy(&cancelled.stdout).contains("cancelled"));
    assert!(run(vec!["cancel", &queued]).status.success());
    let refused = run(vec!["cancel", &id]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("already succeeded"));

    // Pages and filters: two jobs, one a page; the hint names the next page.
    let text = |args: Vec<&str>| {
        let out = run(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let first = text(vec!["list", "--limit", "1"]);
    assert!(first.contains(&id) && !first.contains(&queued), "{first}");
    let hint = first.lines().last().unwrap();
    assert!(
        hint.starts_with("more: tally list --page-token "),
        "{first}"
    );
    let mut next: Vec<&str> = hint["more: tally ".len()..].split(' ').collect();
    let second = text(std::mem::take(&mut next));
    assert!(
        second.contains(&queued) && !second.contains(&id),
        "{hint:?} gave {second}"
    );
    let all = text(vec!["list", "--limit", "1", "--all"]);
    assert!(
        all.contains(&id) && all.contains(&queued) && !all.contains("more:"),
        "{all}"
    );
    let cancelled = text(vec!["list", "--state", "cancelled", "--kind", "kayles"]);
    assert!(
        cancelled.contains(&queued) && !cancelled.contains(&id),
        "{cancelled}"
    );
    let bad = run(vec!["list", "--state", "sleeping"]);
    assert_eq!(bad.status.code(), Some(2));
    let refusal = String::from_utf8_lossy(&bad.stderr);
    assert!(
        refusal.contains("invalid value 'sleeping' for '--state") && refusal.contains("cancelled"),
        "{refusal}"
    );

    // Delete: the job goes, asking for it says so, the list no longer has it.
    let deleted = text(vec!["delete", &queued]);
    assert!(
        deleted.starts_with(&format!("{queued} deleted (store ")),
        "{deleted}"
    );
    let asked = run(vec!["result", &queued]);
    assert!(!asked.status.success());
    assert!(String::from_utf8_lossy(&asked.stderr).contains("was deleted"));
    let listed = text(vec!["list", "--all"]);
    assert!(
        listed.contains(&id) && !listed.contains(&queued),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_token_and_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let worker_token_file = dir.path().join("worker-token");
    std::fs::write(&worker_token_file, "w0rker-token\n").unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");

    // A client token alone would let its holders act as workers: refused.
    let alone = Command::new(tally_bin())
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("refused"))
        .arg("--token-file")
        .arg(&token_file)
        .env_remove("TALLY_WORKER_TOKEN")
        .env_remove("TALLY_WORKER_TOKEN_FILE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("needs a worker token too"), "{stderr}");

    let log = std::fs::File::create(dir.path().join("coordinator.log")).unwrap();
    let child = Command::new(tally_bin())
        .args([
            "coordinator",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data",
        ])
        .arg(dir.path().join("data"))
        .arg("--token-file")
        .arg(&token_file)
        .arg("--worker-token-file")
        .arg(&worker_token_file)
        .stderr(log)
        .spawn()
        .unwrap();
    let _guard = ChildGuard(child);
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(tally_bin());
        command
            .args(args)
            .env_remove("TALLY_TOKEN")
            .env_remove("TALLY_TOKEN_FILE")
            .env("TALLY_CONFIG", dir.path().join("missing.toml"));
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    };
    // Wait until it serves (health needs no token).
    jobs_client(&url).await;

    // A named config file that does not exist is an error.
    let missing = run(&["list", "--coordinator", &url], &[]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("missing.toml"));

    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("coordinator = \"{url}\"\n")).unwrap();
    let config_env = ("TALLY_CONFIG", config.to_str().unwrap());

    // No token: the doctor names the problem and fails; commands are refused.
    let doctor = run(&["doctor"], &[config_env]);
    let text = String::from_utf8_lossy(&doctor.stdout).to_string();
    assert_eq!(doctor.status.code(), Some(1), "{text}");
    assert!(text.contains("ok   reachable"), "{text}");
    assert!(text.contains("ok   health"), "{text}");
    assert!(text.contains("FAIL token"), "{text}");
    let refused = run(&["list"], &[config_env]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("token"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The token from the environment: accepted.
    let listed = run(&["list"], &[config_env, ("TALLY_TOKEN", "s3cret-token")]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );

    // The token file from the config file: every check passes but the
    // warning about workers, which does not fail.
    std::fs::write(
        &config,
        format!(
            "coordinator = \"{url}\"\ntoken_file = \"{}\"\n",
            token_file.display()
        ),
    )
    .unwrap();
    let doctor = run(&["doctor", "--json"], &[config_env]);
    let value: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(value["ok"], true, "{value}");
    let check = |name: &str| {
        value["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("{name} in {value}"))
            .clone()
    };
    assert_eq!(check("token")["ok"], true);
    assert_eq!(check("version")["ok"], true);
    assert_eq!(check("workers")["warning"], true);
    assert!(doctor.status.success());
    // A flag beats the config file.
    let elsewhere = run(
        &["doctor", "--coordinator", "http://127.0.0.1:1"],
        &[config_env],
    );
    assert_eq!(elsewhere.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&elsewhere.stdout).contains("FAIL reachable"));

    // An unknown key in the config file, or a line that does not parse, is
    // refused in one line naming the file and the place.
    for (text, says) in [
        (
            "coordinater = \"x\"\n",
            "line 1, column 1: unknown field `coordinater`",
        ),
        (
            "coordinator = \"x\"\nlog_level = \n",
            "line 2, column 13: string values must be quoted",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let refused = run(&["list"], &[config_env]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("config.toml"), "{stderr}");
        assert!(stderr.contains(says), "{says:?} not in {stderr}");
    }
}

#[test]
fn completions_are_generated_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = tally(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("tally") && script.contains("submit"),
            "{shell}"
        );
    }
    assert!(!tally(&["completions", "cmd"]).status.success());
}

/// Bad input exits 2 wherever it is found (the parser, the command, a file
/// it names), with one line on stderr, and under `--json` one JSON object on
/// stdout with that line; the parser's errors carry a hint, not a usage dump.
#[test]
fn bad_input_exits_2_with_one_line_and_under_json_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "").unwrap();
    let empty = empty.display().to_string();
    let spec = dir.path().join("job.json");
    std::fs::write(&spec, r#"{"kind": "kayles", "pins": 10}"#).unwrap();
    let spec = spec.display().to_string();
    let data = dir.path().join("data").display().to_string();
    let garbage = dir.path().join("ca.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let garbage = garbage.display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "kayles", "--pins", "10", "--workers", "0"],
            "--workers",
        ),
        (
            &["run", "kayles", "--pins", "10", "--threads", "0"],
            "--threads",
        ),
        (
            &["run", "kayles", "--pins", "10", "--slots", "0"],
            "--slots",
        ),
        (&["worker", "--threads", "0"], "--threads"),
        (&["worker", "--slots", "0"], "--slots"),
        (
            &["worker", "--allow-wasm", "--wasm-fuel", "0"],
            "--wasm-fuel",
        ),
        (&["worker", "--checkpoint-ms", "5"], "--checkpoint-ms"),
        (
            &["run", "kayles", "--pins", "10", "--spec-file", &spec],
            "not both",
        ),
        (&["run"], "name a job kind"),
        (&["list", "--state", "bogus"], "bogus"),
        (&["--token-file", &empty, "list"], "the token is empty"),
        (
            &[
                "--worker-token-file",
                &empty,
                "coordinator",
                "--data",
                &data,
            ],
            "the token is empty",
        ),
        (
            &["--tls-ca", &empty, "coordinator", "--data", &data],
            "--tls-cert",
        ),
        (
            &["run", "hex", "--sid", "4"],
            "similar argument exists: '--side'",
        ),
        (&["run", "bogus"], "unrecognized subcommand 'bogus'"),
        (&["run", "hex"], "--side"),
        (&["run", "kayles", "--pins", "x"], "--pins"),
        (&["frobnicate"], "frobnicate"),
        // A coordinator URL that is not one, refused before connecting.
        (&["--coordinator", "ftp://127.0.0.1:1", "list"], "ftp://"),
        (
            &["--coordinator", "notaurl", "status", "job-1"],
            "not a URL",
        ),
        (&["--coordinator", "http://", "list"], "no host"),
        (
            &[
                "--tls-ca",
                &garbage,
                "--coordinator",
                "https://127.0.0.1:1",
                "list",
            ],
            "holds no PEM certificate",
        ),
        (
            &[
                "--coordinator",
                "http://127.0.0.1:1",
                "list",
                "--limit",
                "0",
            ],
            "--limit",
        ),
    ];
    for (args, needle) in cases {
        for json in [false, true] {
            let args: Vec<&str> = if json {
                [&["--json"], *args].concat()
            } else {
                args.to_vec()
            };
            let out = tally(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
            assert!(
                stderr.contains(needle),
                "{args:?}: {needle:?} not in {stderr}"
            );
            assert!(!stderr.contains("Usage:"), "{args:?}: {stderr}");
            if !json {
                assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
                continue;
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout}");
            let value: serde_json::Value =
                serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"));
            assert_eq!(value["exit_code"], 2, "{args:?}");
            let line = stderr.trim_end().strip_prefix("error: ").unwrap();
            assert_eq!(value["error"], line, "{args:?}");
        }
    }
    assert!(
        !dir.path().join("data").exists(),
        "a refusal made the data directory"
    );
    // A parser error names where to read more; help and version still answer.
    let out = tally(&["run", "hex", "--sid", "4"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("see 'tally run hex --help'"), "{stderr}");
    for flag in ["--help", "--version"] {
        let out = tally(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        assert!(!out.stdout.is_empty(), "{flag}");
    }
}

/// `tally run` knows how many workers it has: more replicas than that is
/// refused at once instead of a job that waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_more_replicas_than_its_workers() {
    let args = [
        "run",
        "kayles",
        "--pins",
        "100",
        "--workers",
        "1",
        "--replicas",
        "2",
    ];
    let child = tokio::process::Command::new(tally_bin())
        .args(args)
        .env_remove("TALLY_COORDINATOR")
        .kill_on_drop(true)
        .output();
    // A generous bound only so that a job left waiting fails the test.
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), child)
        .await
        .expect("refused at once, not left waiting")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--replicas 2") && stderr.contains("--workers 2"),
        "{stderr}"
    );
    let enough = [
        "run",
        "kayles",
        "--pins",
        "10",
        "--workers",
        "2",
        "--replicas",
        "2",
    ];
    let enough = tokio::task::spawn_blocking(move || tally(&enough))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&enough.stderr);
    assert!(enough.status.success(), "{stderr}");
    assert_eq!(last_line(&enough), "000000076");
}

/// `tally` with its standard output a pipe whose reader has already gone.
fn tally_into_a_closed_pipe(args: &[&str], coordinator: Option<&str>) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = Command::new(tally_bin());
    command.args(args).env_remove("TALLY_COORDINATOR");
    if let Some(url) = coordinator {
        command.env("TALLY_COORDINATOR", url);
    }
    command.stdout(writer).output().unwrap()
}

/// A reader that stops early (`| head -1`) ends the command quietly, with the
/// status a shell gives `cat` there (141: 128 + SIGPIPE), not a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_standard_output_ends_the_command_quietly() {
    let quiet = |args: &[&str], out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    };
    for args in [
        &["run", "kayles", "--pins", "10", "--json"][..],
        &["run", "kayles", "--pins", "10"][..],
        &["run", "kayles", "--pins", "10", "--direct"][..],
        &["completions", "bash"][..],
    ] {
        let args = args.to_vec();
        let out = tokio::task::spawn_blocking({
            let args = args.clone();
            move || tally_into_a_closed_pipe(&args, None)
        })
        .await
        .unwrap();
        quiet(&args, &out);
    }
    let coordinator = start_coordinator(None).await;
    let url = coordinator.url();
    let mut client = jobs_client(&url).await;
    let spec = tally_kinds::spec::JobSpec::new(tally_kinds::kayles::KaylesSpec {
        pins: 10,
        digits: 9,
    });
    let job = submit(&mut client, &spec, "").await;
    assert!(!events(&mut client, &job.id).await.is_empty());
    for args in [
        vec!["events", &job.id],
        vec!["status", &job.id],
        vec!["list"],
    ] {
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        let url = url.clone();
        let out = tokio::task::spawn_blocking({
            let args = args.clone();
            move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                tally_into_a_closed_pipe(&args, Some(&url))
            }
        })
        .await
        .unwrap();
        quiet(&args.iter().map(String::as_str).collect::<Vec<_>>(), &out);
    }
    coordinator.shutdown().await;
}

/// Every failure of a hex flag is one clear line naming its limit, and a
/// spec file is held to the same rules as the flags.
#[test]
fn hex_flags_past_their_limits_are_refused_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec_file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let points_3 = spec_file(
        "points.json",
        r#"{"kind": "hex", "side": 4, "points_per_shard": 3}"#,
    );
    let exact_17 = spec_file(
        "exact.json",
        r#"{"kind": "hex", "side": 4, "exact": true, "modulus": 17}"#,
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "hex", "--side", "4", "--modulus", "4294967296"],
            "below 2^31",
        ),
        (
            &[
                "run",
                "hex",
                "--side",
                "4",
                "--modulus",
                "99999999999999999999999",
            ],
            "below 2^31",
        ),
        (
            &["run", "hex", "--side", "4", "--modulus", "2147483648"],
            "below 2^31",
        ),
        (
            &["run", "hex", "--side", "4", "--exact", "--modulus", "17"],
            "'--exact' cannot be used with '--modulus <MODULUS>'",
        ),
        (
            &["run", "hex", "--side", "4", "--points-per-shard", "3"],
            "possible values: 16, 8, 4, 2, 1",
        ),
        (
            &["run", "hex", "--side", "4", "--points-per-shard", "0"],
            "possible values: 16, 8, 4, 2, 1",
        ),
        (
            &["run", "--spec-file", &points_3],
            "points per shard must be 16, 8, 4, 2 or 1, got 3",
        ),
        (
            &["run", "--spec-file", &exact_17],
            "an exact hex count takes no modulus",
        ),
    ];
    for (args, needle) in cases {
        let out = tally(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: {needle:?} not in {stderr}"
        );
        assert!(!stderr.contains("0..=4294967295"), "{args:?}: {stderr}");
    }
    // The largest of each is accepted.
    let out = tally(&[
        "run",
        "hex",
        "--side",
        "4",
        "--modulus",
        "2147483647",
        "--points-per-shard",
        "16",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        last_line(&out),
        (10_663_950_528_000u64 % 2_147_483_647).to_string()
    );
}

/// `tally --help` names every kind of the registry.
#[test]
fn help_names_every_kind() {
    let out = tally(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for kind in tally_kinds::names() {
        assert!(help.contains(kind), "{kind} not in {help}");
    }
}

/// The coordinator's banner says which API needs a token and which is open.
#[test]
fn the_coordinator_banner_says_which_api_is_open() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("worker-token");
    std::fs::write(&token, "worker-secret-0123456789").unwrap();
    let data = dir.path().join("data");
    let mut child = ChildGuard(
        Command::new(tally_bin())
            .arg("--worker-token-file")
            .arg(&token)
            .args(["coordinator", "--listen", "127.0.0.1:0", "--data"])
            .arg(&data)
            .env_remove("TALLY_TOKEN")
            .env_remove("TALLY_TOKEN_FILE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = child.0.stderr.take().unwrap();
    // Read until the banner; the coordinator exiting first ends the lines.
    let banner = std::io::BufReader::new(stderr)
        .lines()
        .map(Result::unwrap)
        .find(|line| line.starts_with("coordinator listening on"))
        .expect("a banner");
    assert!(
        banner.contains("job API open") && banner.contains("worker API needs a token"),
        "{banner}"
    );
    assert!(!banner.contains("tokens"), "{banner}");
}

#[test]
fn run_keeps_stage_data_on_disk_by_default_or_where_it_is_told_and_counts_the_same() {
    let spec = ["run", "pegs", "--board", "triangle:5", "--start", "4"];
    let in_coordinator = tally(&[&spec[..], &["--stage-store", "coordinator"]].concat());
    assert!(
        in_coordinator.status.success(),
        "{}",
        String::from_utf8_lossy(&in_coordinator.stderr)
    );
    // By default, in the directory `stage` of the run's data directory; but
    // this board's levels are small, and stay inline in the run's store.
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let by_default = tally(&[&spec[..], &["--data", data_dir]].concat());
    assert!(
        by_default.status.success(),
        "{}",
        String::from_utf8_lossy(&by_default.stderr)
    );
    assert_eq!(last_line(&by_default), last_line(&in_coordinator));
    let written = walk(&data.path().join("stage"));
    assert!(!written.iter().any(|p| p.contains("/jobs/")), "{written:?}");
    // With nothing inline, in the directory `stage`.
    let all_out = tempfile::tempdir().unwrap();
    let all_out_dir = all_out.path().to_str().unwrap();
    let none_inline = ["--inline-stage-output", "0"];
    let blobs = tally(&[&spec[..], &["--data", all_out_dir], &none_inline[..]].concat());
    assert_eq!(last_line(&blobs), last_line(&in_coordinator));
    let written = walk(&all_out.path().join("stage"));
    assert!(
        written.iter().any(|p| p.contains("/jobs/job-000001/")),
        "{written:?}"
    );
    // The same data directory starts again with its stage directory.
    let again = tally(&[&spec[..], &["--data", data_dir]].concat());
    assert_eq!(last_line(&again), last_line(&in_coordinator));
    let stage = tempfile::tempdir().unwrap();
    let url = format!("file://{}", stage.path().display());
    let staged = tally(&[&spec[..], &["--stage-store", &url], &none_inline[..]].concat());
    assert!(
        staged.status.success(),
        "{}",
        String::from_utf8_lossy(&staged.stderr)
    );
    assert_eq!(last_line(&staged), last_line(&in_coordinator));
    // The frontier levels went to the stage store, under the run's prefix.
    let written = walk(stage.path());
    assert!(
        written.iter().any(|p| p.contains("/jobs/job-000001/")),
        "{written:?}"
    );
}

#[test]
fn run_fits_a_job_to_its_memory_budget_or_refuses_it_with_the_numbers() {
    // One slot, whose least budget (about 157 MB) this passes: the job is
    // what does not fit.
    let out = tally(&[
        "run",
        "hex",
        "--side",
        "18",
        "--memory-budget",
        "160MB",
        "--slots",
        "1",
        "--threads",
        "1",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("per worker") && stderr.contains("160.0 MB"),
        "{stderr}"
    );
    let out = tally(&["run", "hex", "--side", "4", "--memory-budget", "1GB"]);
    assert_eq!(last_line(&out), h4_mod_p());
}

#[test]
fn a_memory_budget_below_what_the_slots_need_is_refused_with_the_numbers() {
    for args in [
        &[
            "run",
            "pegs",
            "--board",
            "english",
            "--memory-budget",
            "64MiB",
            "--slots",
            "2",
        ][..],
        &[
            "worker",
            "--coordinator",
            "http://127.0.0.1:1",
            "--memory-budget",
            "64MiB",
            "--slots",
            "2",
        ],
    ] {
        let out = tally(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(
                "--memory-budget 67.1 MB is less than the 268.4 MB a worker of 2 slot(s) needs"
            ) && stderr.contains("or fewer --slots"),
            "{args:?}: {stderr}"
        );
    }
    // One slot needs less: the same budget with one slot runs.
    let out = tally(&[
        "run",
        "pegs",
        "--board",
        "triangle:5",
        "--memory-budget",
        "160MB",
        "--slots",
        "1",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every path below `dir`.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.display().to_string());
            if path.is_dir() {
                todo.push(path);
            }
        }
    }
    found
}

/// `tally` with `args` and its standard error a pipe whose reader has gone.
fn tally_with_stderr_closed(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(tally_bin())
        .args(args)
        .env_remove("TALLY_COORDINATOR")
        .stderr(writer)
        .output()
        .unwrap()
}

/// A standard error nobody reads loses its lines, never the exit code: no
/// panic (exit 101) while saying why a command failed.
#[test]
fn a_closed_standard_error_keeps_the_exit_code() {
    for (args, code) in [
        (&["list", "--coordinator", "http://127.0.0.1:1"][..], 1),
        (&["run", "bogus"][..], 2),
        (&["run", "kayles", "--pins", "3"][..], 2),
    ] {
        let out = tally_with_stderr_closed(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}");
    }
}

/// A coordinator that cannot be reached is a failure (exit 1), not bad
/// input, and the line says why: where, and what the connection met.
#[test]
fn an_unreachable_coordinator_exits_1_saying_why() {
    let url = "http://127.0.0.1:1";
    for args in [
        &["list"][..],
        &["status", "job-000001"][..],
        &["cancel", "job-000001"][..],
    ] {
        for json in [false, true] {
            let mut line: Vec<&str> = vec!["--coordinator", url];
            if json {
                line.push("--json");
            }
            line.extend(args);
            let out = tally(&line);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{line:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{line:?}: {stderr}");
            assert!(
                stderr.contains(&format!("cannot reach the coordinator at {url}"))
                    && stderr.contains("Connection refused"),
                "{line:?}: {stderr}"
            );
            if json {
                let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(value["exit_code"], 1, "{line:?}: {value}");
            }
        }
    }
    let doctor = tally(&["doctor", "--coordinator", url, "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(doctor.status.code(), Some(1), "{value}");
    assert_eq!(value["exit_code"], 1, "{value}");
    assert!(value.to_string().contains("Connection refused"), "{value}");
}

/// Credentials in `--coordinator` (or `TALLY_COORDINATOR`) authenticate
/// nothing: every command that talks to a coordinator refuses them as bad
/// input, and nothing it prints or logs shows the password; `run`, which
/// talks to its own, ignores the flag.
#[test]
fn credentials_in_the_coordinator_url_are_refused_and_never_shown() {
    const PASSWORD: &str = "hunter2pass";
    // A password with a `/` ends the URL's authority early, as a parser sees it.
    let urls = [
        format!("http://admin:{PASSWORD}@127.0.0.1:1"),
        format!("http://admin:{PASSWORD}/x@127.0.0.1:1"),
    ];
    let clients: &[&[&str]] = &[
        &["list"],
        &["doctor"],
        &["status", "job-000001"],
        &["watch", "job-000001"],
        &["result", "job-000001"],
        &["cancel", "job-000001"],
        &["delete", "job-000001"],
        &["events", "job-000001"],
        &["submit", "kayles", "--pins", "10"],
        &["worker"],
    ];
    let run: &[&str] = &["run", "kayles", "--pins", "10"];
    for url in &urls {
        for args in clients.iter().chain([&run]) {
            for (json, by_env) in [(false, false), (true, false), (false, true)] {
                let mut command = Command::new(tally_bin());
                command.args(*args).arg("--log-level=debug");
                if json {
                    command.arg("--json");
                }
                if by_env {
                    command.env("TALLY_COORDINATOR", url);
                } else {
                    command
                        .env_remove("TALLY_COORDINATOR")
                        .args(["--coordinator", url]);
                }
                let out = command.output().unwrap();
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(!said.contains(PASSWORD), "{args:?}: {said}");
                if *args == run {
                    assert!(out.status.success(), "{args:?}: {said}");
                    continue;
                }
                assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
                assert!(
                    said.contains("credentials do not belong in the URL"),
                    "{args:?}: {said}"
                );
            }
        }
    }
}

/// An in-process worker of `tally run` that cannot start (its spill
/// directory is a file) ends the run with its reason and the exit code
/// `tally worker` gives it, instead of a job that waits for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_worker_cannot_start_ends_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let file = file.display().to_string();
    for json in [false, true] {
        let mut args = vec![
            "run",
            "kayles",
            "--pins",
            "10",
            "--workers",
            "2",
            "--spill-dir",
            &file,
        ];
        if json {
            args.push("--json");
        }
        let child = tokio::process::Command::new(tally_bin())
            .args(&args)
            .env_remove("TALLY_COORDINATOR")
            .kill_on_drop(true)
            .output();
        // A generous bound only so that a run left waiting fails the test.
        let out = tokio::time::timeout(std::time::Duration::from_secs(120), child)
            .await
            .expect("the run ends, not left waiting")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("no error line: {stderr}"));
        assert!(
            line.contains("an in-process worker stopped")
                && line.contains(&format!("spill directory {file}")),
            "{line}"
        );
        if json {
            let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(value["exit_code"], 2, "{value}");
        }
    }
    let worker = tally(&[
        "worker",
        "--coordinator",
        "http://127.0.0.1:1",
        "--spill-dir",
        &file,
    ]);
    assert_eq!(worker.status.code(), Some(2));
}

/// A job that fails is a failure (exit 1) with its reason; under `--json`
/// its object carries the exit code, as every failure's does.
#[test]
fn a_failed_job_exits_1_and_its_json_carries_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("trap.wasm");
    let trap = wat::parse_str(
        r#"(module
             (memory (export "memory") 1)
             (func (export "tally_abi_version") (result i32) (i32.const 1))
             (func (export "tally_alloc") (param i32) (result i32) (i32.const 4096))
             (func (export "tally_shard")
               (param i64 i64 i64 i32 i32 i32 i32 i32 i32) (result i32) unreachable))"#,
    )
    .unwrap();
    std::fs::write(&module, trap).unwrap();
    let module = module.display().to_string();
    let args = [
        "run",
        "wasm",
        "--module",
        &module,
        "--shards",
        "2",
        "--max-attempts",
        "1",
    ];
    let out = tally(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the module trapped"), "{stderr}");
    let out = tally(&[&args[..], &["--json"]].concat());
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(1), "{value}");
    assert_eq!(value["state"], "failed", "{value}");
    assert_eq!(value["exit_code"], 1, "{value}");
}

/// Ctrl-C during `tally run --json` is one JSON object too, with the exit
/// code 130 it ends with and what became of the job.
#[test]
fn an_interrupted_run_under_json_says_so_in_one_object() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    // Far longer than the moment it takes to interrupt it.
    let args = ["run", "hex", "--side", "16", "--data", &data, "--json"];
    let mut child = Command::new(tally_bin())
        .args(args)
        .env_remove("TALLY_COORDINATOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tally runs");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("started job-000001") {
        let mut line = String::new();
        let read = stderr.read_line(&mut line).unwrap();
        assert!(read > 0, "run ended before it started the job: {seen}");
        seen += &line;
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{seen}");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(value["exit_code"], 130, "{value}");
    assert_eq!(value["id"], "job-000001", "{value}");
    assert!(
        value["error"].as_str().unwrap().contains("is kept in"),
        "{value}"
    );
}
