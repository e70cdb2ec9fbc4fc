//! The module graph of a crate's non-test code: one node a file, an arrow
//! where a file names something of its crate by a path that starts with
//! `crate::`, `super::` or `self::` (in a `use` or in code), to the file that
//! defines it: the deepest module file on the path, or, when the name there
//! is itself imported (`pub use job::Job`), the file that import leads to.
//! A `pub use` passes a name on and is no arrow; nor is `mod x;`. Its
//! circles are its strongly connected components of more than one file.

use std::collections::BTreeMap;

use super::source::{ModuleTree, Named, Workspace, named_paths};

/// A file naming something written in another file.
pub struct Arrow {
    pub from: String,
    pub to: String,
    pub line: usize,
    /// The path as written: `super::Job`.
    pub written: String,
}

/// The names each module imports: module path -> name -> the absolute path
/// it stands for (`None`: from outside the crate).
type Imports = BTreeMap<Vec<String>, BTreeMap<String, Option<Vec<String>>>>;

pub fn arrows(workspace: &Workspace, tree: &ModuleTree) -> Vec<Arrow> {
    let mut named: Vec<(&String, Vec<String>, Named)> = Vec::new();
    for (file, module) in tree.files.iter().filter(|(_, module)| !module.test) {
        let Some(source) = workspace.files.get(file) else {
            continue;
        };
        for name in named_paths(&source.syntax, true) {
            let here = [module.path.as_slice(), &name.within].concat();
            named.push((file, here, name));
        }
    }
    let mut imports = Imports::new();
    for (_, here, name) in &named {
        if let Some(bound) = &name.bound {
            let child = |first: &String| {
                tree.modules
                    .contains_key(&[here.as_slice(), std::slice::from_ref(first)].concat())
            };
            let target = match name.segments.first() {
                Some(first) if child(first) => Some([here.as_slice(), &name.segments].concat()),
                _ => absolute(here, &name.segments),
            };
            imports
                .entry(here.clone())
                .or_default()
                .insert(bound.clone(), target);
        }
    }
    let mut arrows = Vec::new();
    for (file, here, name) in named.iter().filter(|(_, _, name)| !name.reexport) {
        let Some(to) =
            absolute(here, &name.segments).and_then(|path| definer(tree, &imports, &path, 0))
        else {
            continue;
        };
        if to != *file {
            let written = name.segments.join("::");
            arrows.push(Arrow {
                from: (*file).clone(),
                to: to.clone(),
                line: name.line,
                written,
            });
        }
    }
    arrows
}

/// The file that defines what `path` names, following imports a few steps;
/// `None` when it leads out of the crate.
fn definer<'a>(
    tree: &'a ModuleTree,
    imports: &Imports,
    path: &[String],
    steps: usize,
) -> Option<&'a String> {
    let deepest = (0..=path.len())
        .rev()
        .find(|&length| tree.modules.contains_key(&path[..length]))?;
    let imported = path
        .get(deepest)
        .and_then(|name| imports.get(&path[..deepest])?.get(name));
    match imported {
        Some(Some(target)) if steps < 8 => definer(
            tree,
            imports,
            &[target.as_slice(), &path[deepest + 1..]].concat(),
            steps + 1,
        ),
        Some(None) => None,
        _ => tree.modules.get(&path[..deepest]),
    }
}

/// The path from the crate root that `segments`, written in module `here`,
/// names; `None` for a path that does not start in the crate.
fn absolute(here: &[String], segments: &[String]) -> Option<Vec<String>> {
    let (first, mut rest) = segments.split_first()?;
    let mut base = here.to_vec();
    match first.as_str() {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            base.pop()?;
        }
        _ => return None,
    }
    while let Some((word, after)) = rest.split_first()
        && word == "super"
    {
        base.pop()?;
        rest = after;
    }
    Some([base.as_slice(), rest].concat())
}

/// The groups of files that reach each other by arrows (Tarjan's strongly
/// connected components), each with more than one file, in file order.
pub fn circles(arrows: &[Arrow]) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for arrow in arrows {
        next.entry(&arrow.from).or_default().push(&arrow.to);
        next.entry(&arrow.to).or_default();
    }
    let mut search = Components {
        next: &next,
        index: BTreeMap::new(),
        lowest: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &file in next.keys() {
        if !search.index.contains_key(file) {
            search.visit(file);
        }
    }
    search.found
}

struct Components<'a> {
    next: &'a BTreeMap<&'a str, Vec<&'a str>>,
    index: BTreeMap<&'a str, usize>,
    lowest: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    found: Vec<Vec<String>>,
}

impl<'a> Components<'a> {
    fn visit(&mut self, file: &'a str) {
        let order = self.index.len();
        self.index.insert(file, order);
        self.lowest.insert(file, order);
        self.stack.push(file);
        for &to in &self.next[file] {
            if !self.index.contains_key(to) {
                self.visit(to);
                let lowest = self.lowest[file].min(self.lowest[to]);
                self.lowest.insert(file, lowest);
            } else if self.stack.contains(&to) {
                let lowest = self.lowest[file].min(self.index[to]);
                self.lowest.insert(file, lowest);
            }
        }
        if self.lowest[file] == self.index[file] {
            let at = self
                .stack
                .iter()
                .rposition(|&member| member == file)
                .unwrap_or(0);
            let mut members: Vec<String> = self.stack.drain(at..).map(str::to_owned).collect();
            if members.len() > 1 {
                members.sort();
                self.found.push(members);
            }
        }
    }
}
