//! Each structure rule broken on purpose in a small tree of its own: the
//! finding names the file and the line, and the clean tree has none.

use std::fs;

use serde_json::json;
use tempfile::TempDir;

use super::{
    Finding, files_without_doc_line, import_circles, kernels_network_dependencies, kind_modules,
    long_files, runners_naming_kinds,
};

/// A workspace in miniature: a binary, a coordinator whose store and
/// service use each other one way, a kinds crate with one kind (`hex`, its
/// `JobKind` in a submodule), a test impl and a module that is no kind.
const CLEAN: &[(&str, &str)] = &[
    ("Cargo.toml", "[workspace]\n"),
    (
        "src/main.rs",
        "//! The binary.\nuse tally_kinds::spec::JobSpec;\nfn main() {}\n",
    ),
    ("coordinator/Cargo.toml", "[package]\n"),
    (
        "coordinator/src/lib.rs",
        "//! The coordinator.\npub mod service;\npub mod store;\npub use store::Store;\n",
    ),
    (
        "coordinator/src/service.rs",
        "//! Serves.\nuse crate::Store;\npub fn serve(_: Store) {}\n#[cfg(test)]\n\
         mod tests;\n#[cfg(test)]\nmod inline {\n    use super::*;\n    use tally_kinds::hex::Hex;\n}\n",
    ),
    (
        "coordinator/src/service/tests.rs",
        "//! Tests.\nuse tally_kinds::hex::Hex;\n",
    ),
    (
        "coordinator/src/store.rs",
        "//! Stores.\npub struct Store;\n#[cfg(test)]\nmod tests {\n    use crate::service::serve;\n}\n",
    ),
    ("common/kinds/Cargo.toml", "[package]\n"),
    (
        "common/kinds/src/lib.rs",
        "//! Kinds.\npub mod guest;\npub mod hex;\npub mod spec;\n",
    ),
    (
        "common/kinds/src/hex/mod.rs",
        "//! Hex.\nmod job;\npub use job::Hex;\n",
    ),
    (
        "common/kinds/src/hex/job.rs",
        "//! Hex's job.\nuse crate::spec::JobKind;\npub struct Hex;\nimpl JobKind for Hex {}\n",
    ),
    (
        "common/kinds/src/spec.rs",
        "//! Specs.\npub trait JobKind {}\npub struct JobSpec;\n#[cfg(test)]\n\
         mod tests {\n    struct Fake;\n    impl super::JobKind for Fake {}\n}\n",
    ),
    (
        "common/kinds/src/guest.rs",
        "//! Module digests.\npub const DIGEST: u8 = 0;\n",
    ),
];

fn tree(changes: &[(&str, &str)]) -> TempDir {
    let root = tempfile::tempdir().expect("a temporary directory");
    for (name, text) in CLEAN.iter().chain(changes) {
        let path = root.path().join(name);
        fs::create_dir_all(path.parent().expect("a file has a directory")).unwrap();
        fs::write(path, text).unwrap();
    }
    root
}

fn places(findings: &[Finding]) -> Vec<String> {
    findings
        .iter()
        .map(|f| format!("{}:{}", f.file, f.line))
        .collect()
}

fn lines(count: usize) -> String {
    (0..count)
        .map(|n| format!("const C{n}: u8 = 0;\n"))
        .collect()
}

#[test]
fn clean_tree_breaks_no_rule() {
    let root = tree(&[]);
    let root = root.path();
    assert_eq!(kind_modules(root).into_iter().collect::<Vec<_>>(), ["hex"]);
    for (rule, findings) in [
        ("kind names", runners_naming_kinds(root)),
        ("long files", long_files(root)),
        ("doc lines", files_without_doc_line(root)),
        ("circles", import_circles(root)),
    ] {
        assert!(findings.is_empty(), "{rule}: {findings:?}");
    }
}

#[test]
fn runner_naming_a_kind_module_is_caught() {
    let service = "//! Serves.\nuse crate::Store;\nuse tally_kinds::{hex, spec};\n\
                   pub fn serve(_: Store) {\n    let _ = tally_kinds::hex::Hex;\n}\n\
                   pub fn shown() -> String {\n    format!(\"{:?}\", tally_kinds::hex::NAME)\n}\n\
                   use tally_kinds::guest::DIGEST;\n";
    let worker = "//! Works.\nuse ::tally_kinds::hex::Hex as Kind;\n";
    let root = tree(&[
        ("coordinator/src/service.rs", service),
        ("worker/Cargo.toml", "[package]\n"),
        ("worker/src/lib.rs", worker),
    ]);
    let findings = runners_naming_kinds(root.path());
    assert_eq!(
        places(&findings),
        [
            "coordinator/src/service.rs:3",
            "coordinator/src/service.rs:5",
            "coordinator/src/service.rs:8",
            "worker/src/lib.rs:2"
        ],
        "{findings:?}"
    );
    assert!(
        findings[0]
            .to_string()
            .contains("names the kind module `tally_kinds::hex`"),
        "{}",
        findings[0]
    );
}

#[test]
fn file_over_800_lines_outside_tests_is_caught() {
    let long = format!("//! Long.\n{}", lines(800));
    let tested = format!(
        "//! Tested.\n{}#[cfg(test)]\nmod tests {{\n{}}}\n{}",
        lines(700),
        lines(200),
        lines(99)
    );
    let root = tree(&[
        ("benches/runner.rs", &long),
        ("coordinator/src/store.rs", &tested),
        ("coordinator/src/store_tests.rs", &lines(900)),
        ("tests/it/cluster.rs", &lines(900)),
    ]);
    let findings = long_files(root.path());
    assert_eq!(places(&findings), ["benches/runner.rs:801"], "{findings:?}");
    assert!(
        findings[0]
            .message
            .starts_with("801 lines outside its tests"),
        "{}",
        findings[0]
    );
}

#[test]
fn file_without_doc_line_is_caught() {
    let opening = "\n#![forbid(unsafe_code)]\n//! Stores.\n";
    let root = tree(&[
        ("coordinator/src/store.rs", opening),
        ("coordinator/src/service/tests.rs", "use super::*;\n"),
        ("common/kinds/src/guest.rs", "\n\n//! Digests.\n"),
    ]);
    let findings = files_without_doc_line(root.path());
    assert_eq!(
        places(&findings),
        [
            "coordinator/src/service/tests.rs:1",
            "coordinator/src/store.rs:2"
        ],
        "{findings:?}"
    );
}

#[test]
fn kernels_reaching_a_network_crate_is_caught() {
    let package = |name: &str| json!({"id": format!("{name}@1"), "name": name, "manifest_path": format!("/w/{name}/Cargo.toml")});
    let normal = json!([{"kind": null, "target": null}]);
    let dev = json!([{"kind": "dev", "target": null}]);
    let node = |name: &str, deps: Vec<(&str, &serde_json::Value)>| {
        let deps: Vec<_> = deps
            .into_iter()
            .map(|(dep, kinds)| json!({"pkg": format!("{dep}@1"), "dep_kinds": kinds}))
            .collect();
        json!({"id": format!("{name}@1"), "deps": deps})
    };
    let packages = ["tally-kernels", "num-bigint", "helper", "hyper", "tokio"].map(package);
    let metadata = |kernels_deps: Vec<(&str, &serde_json::Value)>| {
        json!({
            "workspace_root": "/w",
            "packages": packages,
            "resolve": {"nodes": [
                node("tally-kernels", kernels_deps),
                node("num-bigint", vec![]),
                node("helper", vec![("hyper", &normal)]),
                node("hyper", vec![("tokio", &normal)]),
                node("tokio", vec![]),
            ]},
        })
    };
    let clean = metadata(vec![("num-bigint", &normal), ("tokio", &dev)]);
    assert!(kernels_network_dependencies(&clean).is_empty());
    let planted = metadata(vec![("num-bigint", &normal), ("helper", &normal)]);
    let findings: Vec<String> = kernels_network_dependencies(&planted)
        .iter()
        .map(Finding::to_string)
        .collect();
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(findings[0].starts_with("tally-kernels/Cargo.toml: tally-kernels depends on the network crate hyper (tally-kernels -> helper -> hyper)"), "{findings:?}");
    assert!(
        findings[1].contains("tokio (tally-kernels -> helper -> hyper -> tokio)"),
        "{findings:?}"
    );
}

#[test]
fn import_circle_is_caught() {
    // The store names the service back: through the crate root's re-export
    // the service's `Store` is the store's file, so the two tie.
    let store =
        "//! Stores.\npub struct Store;\npub fn open() {\n    crate::service::serve(Store);\n}\n";
    let root = tree(&[("coordinator/src/store.rs", store)]);
    let findings = import_circles(root.path());
    assert_eq!(
        places(&findings),
        ["coordinator/src/service.rs:0"],
        "{findings:?}"
    );
    let message = &findings[0].message;
    assert!(
        message.contains("coordinator/src/service.rs:2 `crate::Store` -> coordinator/src/store.rs")
            && message.contains(
                "coordinator/src/store.rs:4 `crate::service::serve` -> coordinator/src/service.rs"
            ),
        "{message}"
    );
}
