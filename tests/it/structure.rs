//! The structure test, as rust-analyzer's tidy test: the workspace's layering
//! rules (docs/testing.md, "The structure rules") checked on its own source,
//! each finding named by file and line. Each rule is a function of a root
//! directory, so that `planted` can break it in a small tree of its own.

mod graph;
mod planted;
mod source;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use syn::visit::{self, Visit};

use source::{Workspace, is_test_only, named_paths, test_only_lines};

/// The most lines a file may have outside its tests.
pub const MOST_LINES: usize = 800;

/// The crates that know a kind only through its dynamic face and the
/// registry: the coordinator, the worker and the binary.
const RUNNERS: [&str; 3] = ["coordinator/src/", "worker/src/", "src/"];

const KINDS_ROOT: &str = "common/kinds/src/lib.rs";

const KERNELS: &str = "tally-kernels";

/// Crates that speak to a network (or, for clap, to a command line): the
/// kernels compute, and a dependency on these would pull a runtime into them.
/// A name matches itself and its family (`tokio-util`, `tonic-build`).
const NETWORK_CRATES: &str = "tokio tonic prost clap hyper h2 h3 tower reqwest mio socket2 \
    object_store quinn ureq curl isahc surf async-std smol axum warp actix tungstenite rustls \
    native-tls openssl hickory";

/// One broken rule: where, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub file: String,
    /// 0 when the finding is about the file as a whole.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file, self.message),
            line => write!(f, "{}:{line}: {}", self.file, self.message),
        }
    }
}

/// The kind modules: the top-level modules of tally-kinds whose non-test
/// code implements `JobKind`.
pub fn kind_modules(root: &Path) -> BTreeSet<String> {
    let workspace = Workspace::read(root);
    kinds_in(root, &workspace)
}

fn kinds_in(root: &Path, workspace: &Workspace) -> BTreeSet<String> {
    let crates = workspace.crates(root);
    let tests = workspace.test_files(&crates);
    let Some(kinds) = crates.iter().find(|tree| {
        tree.modules
            .get(&Vec::new())
            .is_some_and(|f| f == KINDS_ROOT)
    }) else {
        return BTreeSet::new();
    };
    kinds
        .files
        .iter()
        .filter(|(file, module)| !module.path.is_empty() && !module.test && !tests.contains(*file))
        .filter(|(file, _)| implements_job_kind(&workspace.files[*file].syntax))
        .map(|(_, module)| module.path[0].clone())
        .collect()
}

fn implements_job_kind(syntax: &syn::File) -> bool {
    struct Impls(bool);
    impl Visit<'_> for Impls {
        fn visit_item(&mut self, item: &syn::Item) {
            if !is_test_only(source::item_attrs(item)) {
                visit::visit_item(self, item);
            }
        }
        fn visit_item_impl(&mut self, item: &syn::ItemImpl) {
            self.0 |= item.trait_.as_ref().is_some_and(|(path, _)| {
                path.segments
                    .last()
                    .is_some_and(|last| last.ident == "JobKind")
            });
            visit::visit_item_impl(self, item);
        }
    }
    let mut impls = Impls(false);
    impls.visit_file(syntax);
    impls.0
}

/// Rule 1: the non-test code of the coordinator, the worker and the binary
/// names no kind module (`tally_kinds::hex`).
pub fn runners_naming_kinds(root: &Path) -> Vec<Finding> {
    let workspace = Workspace::read(root);
    let kinds = kinds_in(root, &workspace);
    let tests = workspace.test_files(&workspace.crates(root));
    let mut findings = Vec::new();
    for (file, source) in &workspace.files {
        if !RUNNERS.iter().any(|dir| file.starts_with(dir)) || tests.contains(file) {
            continue;
        }
        for named in named_paths(&source.syntax, true) {
            let words: Vec<&str> = named
                .segments
                .iter()
                .map(String::as_str)
                .skip_while(|w| w.is_empty())
                .collect();
            if let ["tally_kinds", kind, ..] = words.as_slice()
                && kinds.contains(*kind)
            {
                findings.push(Finding {
                    file: file.clone(),
                    line: named.line,
                    message: format!(
                        "names the kind module `tally_kinds::{kind}`: the coordinator, the worker \
                         and the binary reach a kind only through `tally_kinds::dynamic` and the registry"
                    ),
                });
            }
        }
    }
    findings
}

/// Rule 2: no non-test file has more than [`MOST_LINES`] lines outside its
/// `#[cfg(test)]` items; benches count.
pub fn long_files(root: &Path) -> Vec<Finding> {
    let workspace = Workspace::read(root);
    let tests = workspace.test_files(&workspace.crates(root));
    let mut findings = Vec::new();
    for (file, source) in workspace
        .files
        .iter()
        .filter(|(file, _)| !tests.contains(*file))
    {
        let test_lines = test_only_lines(&source.syntax);
        let counted: Vec<usize> = (1..=source.text.lines().count())
            .filter(|line| !test_lines.contains(line))
            .collect();
        if counted.len() > MOST_LINES {
            findings.push(Finding {
                file: file.clone(),
                line: counted[MOST_LINES],
                message: format!(
                    "{} lines outside its tests, more than {MOST_LINES} (this is line {}): \
                     split it along its concerns",
                    counted.len(),
                    MOST_LINES + 1
                ),
            });
        }
    }
    findings
}

/// Rule 3: every Rust file, tests included, opens with a `//!` line (blank
/// lines before it allowed).
pub fn files_without_doc_line(root: &Path) -> Vec<Finding> {
    let workspace = Workspace::read(root);
    let mut findings = Vec::new();
    for (file, source) in &workspace.files {
        let opening = source
            .text
            .lines()
            .enumerate()
            .find(|(_, text)| !text.trim().is_empty());
        if opening.is_some_and(|(_, text)| text.trim_start().starts_with("//!")) {
            continue;
        }
        findings.push(Finding {
            file: file.clone(),
            line: opening.map_or(1, |(at, _)| at + 1),
            message: "opens without a `//!` line: begin with one saying what the file holds".into(),
        });
    }
    findings
}

/// The workspace's resolved dependency graph for this machine's platform
/// (`--filter-platform`: offline, cargo has only the packages it builds).
pub fn cargo_metadata(root: &Path) -> Value {
    let cargo =
        std::env::var("CARGO").unwrap_or_else(|_| option_env!("CARGO").unwrap_or("cargo").into());
    let version = Command::new(&cargo)
        .arg("-vV")
        .output()
        .expect("`cargo -vV` runs");
    let version = String::from_utf8_lossy(&version.stdout);
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("cargo names its host");
    let output = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--locked",
            "--filter-platform",
            host,
        ])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("`cargo metadata` runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

/// Rule 4: the kernels reach no network crate through their normal (not
/// dev) dependencies, directly or through others.
pub fn kernels_network_dependencies(metadata: &Value) -> Vec<Finding> {
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let names: BTreeMap<String, String> = list(&metadata["packages"])
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?.to_owned(), p["name"].as_str()?.to_owned())))
        .collect();
    let manifest = |id: &str| {
        let packages = list(&metadata["packages"]);
        let path = packages
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["manifest_path"].as_str().map(str::to_owned));
        let root = metadata["workspace_root"]
            .as_str()
            .map(|r| format!("{r}/"))
            .unwrap_or_default();
        path.map(|p| p.strip_prefix(&root).unwrap_or(&p).to_owned())
            .unwrap_or_else(|| KERNELS.into())
    };
    let Some(kernels) = names
        .iter()
        .find(|(_, name)| *name == KERNELS)
        .map(|(id, _)| id.clone())
    else {
        return vec![Finding {
            file: "Cargo.toml".into(),
            line: 0,
            message: format!("no package {KERNELS} in the workspace: the rule checks nothing"),
        }];
    };
    let normal_deps: BTreeMap<String, Vec<String>> = list(&metadata["resolve"]["nodes"])
        .iter()
        .map(|node| {
            let deps = list(&node["deps"])
                .iter()
                .filter(|dep| {
                    list(&dep["dep_kinds"])
                        .iter()
                        .any(|kind| kind["kind"].is_null())
                })
                .filter_map(|dep| dep["pkg"].as_str().map(str::to_owned))
                .collect();
            (node["id"].as_str().unwrap_or_default().to_owned(), deps)
        })
        .collect();
    let mut reached_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([kernels.clone()]);
    while let Some(id) = queue.pop_front() {
        for dep in normal_deps.get(&id).into_iter().flatten() {
            if *dep != kernels && !reached_from.contains_key(dep) {
                reached_from.insert(dep.clone(), id.clone());
                queue.push_back(dep.clone());
            }
        }
    }
    let name = |id: &str| names.get(id).cloned().unwrap_or_else(|| id.to_owned());
    let mut findings = Vec::new();
    for id in reached_from.keys().filter(|id| is_network(&name(id))) {
        let mut chain = vec![name(id)];
        let mut at = id;
        while let Some(from) = reached_from.get(at) {
            chain.push(name(from));
            at = from;
        }
        chain.push(name(&kernels));
        chain.reverse();
        chain.dedup();
        findings.push(Finding {
            file: manifest(&kernels),
            line: 0,
            message: format!("{KERNELS} depends on the network crate {} ({}): the kernels compute and do no I/O of the network", name(id), chain.join(" -> ")),
        });
    }
    findings
}

fn is_network(name: &str) -> bool {
    NETWORK_CRATES.split_whitespace().any(|crate_name| {
        name == crate_name
            || name
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.starts_with(['-', '_']))
    })
}

/// Rule 5: no crate's module graph has a circle.
pub fn import_circles(root: &Path) -> Vec<Finding> {
    let workspace = Workspace::read(root);
    let mut findings = BTreeSet::new();
    for tree in workspace.crates(root) {
        let arrows = graph::arrows(&workspace, &tree);
        for members in graph::circles(&arrows) {
            let ties: Vec<String> = arrows
                .iter()
                .filter(|a| members.contains(&a.from) && members.contains(&a.to))
                .map(|a| format!("{}:{} `{}` -> {}", a.from, a.line, a.written, a.to))
                .collect();
            findings.insert(Finding {
                file: members[0].clone(),
                line: 0,
                message: format!(
                    "import circle among {}; tied by {}: move what they share below them",
                    members.join(", "),
                    ties.join(", ")
                ),
            });
        }
    }
    findings.into_iter().collect()
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[track_caller]
fn assert_none(rule: &str, findings: &[Finding]) {
    let listed: Vec<String> = findings.iter().map(Finding::to_string).collect();
    assert!(
        findings.is_empty(),
        "{rule}: {} finding(s)\n{}",
        findings.len(),
        listed.join("\n")
    );
}

#[test]
fn runners_name_no_kind_module() {
    let kinds = kind_modules(workspace_root());
    assert!(
        kinds.contains("hex") && !kinds.contains("guest"),
        "the kind modules are {kinds:?}"
    );
    assert_none(
        "a runner names a kind module",
        &runners_naming_kinds(workspace_root()),
    );
}

#[test]
fn no_source_file_passes_800_lines() {
    assert_none(
        "a source file passes 800 lines",
        &long_files(workspace_root()),
    );
}

#[test]
fn every_source_file_opens_with_a_doc_line() {
    assert_none(
        "a source file has no `//!` line",
        &files_without_doc_line(workspace_root()),
    );
}

#[test]
fn kernels_depend_on_no_network_crate() {
    let metadata = cargo_metadata(workspace_root());
    assert_none(
        "the kernels reach a network crate",
        &kernels_network_dependencies(&metadata),
    );
}

#[test]
fn module_graph_has_no_circle() {
    assert_none(
        "the module graph has a circle",
        &import_circles(workspace_root()),
    );
}
