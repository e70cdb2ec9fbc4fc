//! Every call a worker or a client makes to the coordinator has a deadline:
//! a scan of their sources for the calls on the contract's generated
//! clients, each of which must pass its message through a deadline helper
//! (`deadline::request`, or the client's `quick` and `planned`), and of the
//! operations guide, whose table must name every call.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the generated clients may be named: the worker's one module of
/// calls, the client's connection, and the doctor's own checks.
const CLIENT_HOMES: [&str; 3] = ["worker/src/calls.rs", "src/client.rs", "src/cmd/doctor.rs"];

/// The arguments that give a call its deadline.
const WRAPPERS: [&str; 3] = ["request(", "quick(", "planned("];

/// Receivers that are a generated client (whitespace removed): a variable
/// or field named `client`, or a fresh connection; or one made in the same
/// statement.
const CLIENT_RECEIVERS: [&str; 3] = ["client", "client()", "connect(remote).await?"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The methods of the contract's services, as the generated clients name
/// them (`FetchStageData` is `fetch_stage_data`), and the health check.
fn methods() -> BTreeSet<(String, String)> {
    let proto = std::fs::read_to_string(root().join("proto/tally/v1/tally.proto")).unwrap();
    let mut methods = BTreeSet::new();
    for line in proto.lines() {
        let Some(rest) = line.trim().strip_prefix("rpc ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap().trim().to_string();
        methods.insert((snake(&name), name));
    }
    methods.insert(("check".into(), "Check".into()));
    assert!(methods.len() >= 19, "{methods:?}");
    methods
}

fn snake(name: &str) -> String {
    let mut snake = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}

/// The worker's and the client's sources, but their tests.
fn sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in ["worker/src", "src", "src/cmd"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let is_test = name.contains("test");
            if path.extension().is_some_and(|e| e == "rs") && !is_test {
                let text = std::fs::read_to_string(&path).unwrap();
                // The unit tests at the end of a file call no coordinator.
                let text = match text.find("#[cfg(test)]") {
                    Some(at) => text[..at].to_string(),
                    None => text,
                };
                files.push((format!("{dir}/{name}"), text));
            }
        }
    }
    assert!(files.len() > 30, "the sources were found");
    files
}

/// Comments out, whitespace gone: what the code says, as one line.
fn code(text: &str) -> String {
    let lines = text
        .lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        });
    lines
        .flat_map(|l| l.chars())
        .filter(|c| !c.is_whitespace())
        .collect()
}

/// A call of `method` on a generated client in `code`: where it is, and its
/// argument's beginning.
struct CallSite {
    file: String,
    method: String,
    argument: String,
}

fn call_sites() -> Vec<CallSite> {
    let methods = methods();
    let mut sites = Vec::new();
    for (file, text) in sources() {
        let code = code(&text);
        for (method, _) in &methods {
            let needle = format!(".{method}(");
            for (at, _) in code.match_indices(&needle) {
                let before = &code[..at];
                // The statement so far: a client made in it (`XClient::new(..).m(`).
                let statement = &before[before.rfind([';', '{', '}']).map_or(0, |i| i + 1)..];
                let on_a_client = CLIENT_RECEIVERS.iter().any(|r| before.ends_with(r))
                    || statement.contains("Client::new(");
                if !on_a_client {
                    continue;
                }
                let after = &code[at + needle.len()..];
                sites.push(CallSite {
                    file: file.clone(),
                    method: method.clone(),
                    argument: after.chars().take(40).collect(),
                });
            }
        }
    }
    sites
}

#[test]
fn every_call_on_a_generated_client_passes_a_deadline() {
    let sites = call_sites();
    let mut unbounded = Vec::new();
    for site in &sites {
        let bounded = WRAPPERS.iter().any(|w| site.argument.starts_with(w));
        println!(
            "{:<28} {:<18} {}{}",
            site.file,
            site.method,
            site.argument,
            if bounded { "" } else { "   <- NO DEADLINE" }
        );
        if !bounded {
            unbounded.push(format!("{} {}({}", site.file, site.method, site.argument));
        }
    }
    assert!(
        unbounded.is_empty(),
        "calls without a deadline: {unbounded:#?}"
    );
    // Every call of the worker service is made, from its one module.
    for method in [
        "register",
        "lease",
        "heartbeat",
        "report",
        "report_batch",
        "fetch_stage_data",
        "fetch_checkpoint",
        "stage_blobs",
        "stage_shard",
        "fetch_attachment",
    ] {
        let from: Vec<_> = sites.iter().filter(|s| s.method == method).collect();
        assert_eq!(from.len(), 1, "{method} is called once, from calls.rs");
        assert_eq!(from[0].file, "worker/src/calls.rs");
    }
    for client_method in ["submit", "get", "watch", "result", "info", "check"] {
        assert!(
            sites.iter().any(|s| s.method == client_method),
            "the scan finds the client's {client_method} calls"
        );
    }
}

#[test]
fn the_generated_clients_are_named_only_where_their_calls_are_scanned() {
    for (file, text) in sources() {
        let code = code(&text);
        let names_a_client = ["WorkerServiceClient", "JobServiceClient", "HealthClient"]
            .iter()
            .any(|c| code.contains(c));
        assert!(
            !names_a_client || CLIENT_HOMES.contains(&file.as_str()),
            "{file} names a generated client: make its calls in {CLIENT_HOMES:?}"
        );
        // A connection is bound to `client`, or called at once.
        for (at, _) in code.match_indices("connect(remote).await") {
            let bound = ["letmutclient=", "ifletOk(mutclient)="]
                .iter()
                .any(|b| code[..at].ends_with(b));
            let chained = code[at..].starts_with("connect(remote).await?.");
            assert!(
                bound || chained,
                "{file}: a connection bound to another name than `client`"
            );
        }
    }
}

/// The operations guide lists every call with its deadline.
#[test]
fn the_operations_guide_names_every_call_and_its_deadline() {
    let guide = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let table = guide
        .split("### Calls and their deadlines")
        .nth(1)
        .expect("docs/operations.md has a section \"Calls and their deadlines\"");
    let table: String = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    for (_, name) in methods() {
        assert!(
            table.contains(&format!("`{name}`")),
            "the table of calls names `{name}`"
        );
    }
}
