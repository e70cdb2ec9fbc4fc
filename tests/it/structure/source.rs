//! The workspace's Rust sources as the structure rules read them: every file
//! parsed by syn, each crate's module tree, which code only the tests compile,
//! and the paths each file names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, Meta, Token, UseTree};

/// The Rust files of a tree, parsed; keyed by their path from the root, with
/// `/` between the parts.
pub struct Workspace {
    pub files: BTreeMap<String, Source>,
}

pub struct Source {
    pub text: String,
    pub syntax: syn::File,
}

impl Workspace {
    /// Reads every `.rs` file under `root`, leaving out build output
    /// (`target/`) and hidden directories. A file that does not parse fails
    /// the test that reads it: every rule needs its syntax.
    pub fn read(root: &Path) -> Workspace {
        let mut names = Vec::new();
        rust_files(root, "", &mut names);
        let files = names
            .into_iter()
            .map(|name| {
                let text = fs::read_to_string(root.join(&name))
                    .unwrap_or_else(|e| panic!("{name}: cannot be read: {e}"));
                let syntax = syn::parse_file(&text).unwrap_or_else(|e| {
                    panic!("{name}:{}: does not parse: {e}", e.span().start().line)
                });
                (name, Source { text, syntax })
            })
            .collect();
        Workspace { files }
    }

    /// The module tree of every crate: libraries, binaries, benches, test
    /// binaries and build scripts, found where cargo looks for them beside
    /// each `Cargo.toml`.
    pub fn crates(&self, root: &Path) -> Vec<ModuleTree> {
        self.files
            .keys()
            .filter(|name| is_crate_root(root, name))
            .map(|name| ModuleTree::of(self, name))
            .collect()
    }

    /// The files only tests compile: under a `tests/` directory, named
    /// `tests.rs`, `*_tests.rs` or `test_support.rs`, or declared only by a
    /// `#[cfg(test)]` module.
    pub fn test_files(&self, crates: &[ModuleTree]) -> BTreeSet<String> {
        let compiled: BTreeSet<&String> = crates
            .iter()
            .flat_map(|tree| tree.files.iter())
            .filter(|(_, file)| !file.test)
            .map(|(name, _)| name)
            .collect();
        let declared_for_tests = crates
            .iter()
            .flat_map(|tree| tree.files.iter())
            .filter(|(name, file)| file.test && !compiled.contains(name))
            .map(|(name, _)| name.clone());
        let named_as_tests = self.files.keys().filter(|name| {
            let file = name.rsplit('/').next().unwrap_or(name);
            name.starts_with("tests/")
                || name.contains("/tests/")
                || file == "tests.rs"
                || file == "test_support.rs"
                || file.ends_with("_tests.rs")
        });
        named_as_tests.cloned().chain(declared_for_tests).collect()
    }
}

fn rust_files(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        };
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && name != "target" && !name.starts_with('.') {
            rust_files(root, &path, out);
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// Whether cargo would take `name` as a crate's root file by its place.
fn is_crate_root(root: &Path, name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    let package_above = |depth: usize| {
        parts.len() >= depth
            && root
                .join(parts[..parts.len() - depth].join("/"))
                .join("Cargo.toml")
                .is_file()
    };
    match parts.as_slice() {
        [.., "src", "lib.rs" | "main.rs"] => package_above(2),
        [.., "src", "bin", _] | [.., "benches" | "tests" | "examples", _, "main.rs"] => {
            package_above(3)
        }
        [.., "benches" | "tests" | "examples", _] => package_above(2),
        [.., "build.rs"] => package_above(1),
        _ => false,
    }
}

/// One crate's modules: each module's path from the crate root (inline
/// modules too) and the file it is written in.
pub struct ModuleTree {
    pub modules: BTreeMap<Vec<String>, String>,
    pub files: BTreeMap<String, FileModule>,
}

/// A file as a module of one crate.
pub struct FileModule {
    pub path: Vec<String>,
    /// Declared under `#[cfg(test)]` (itself or a module above it).
    pub test: bool,
}

impl ModuleTree {
    fn of(workspace: &Workspace, root_file: &str) -> ModuleTree {
        let mut tree = ModuleTree {
            modules: BTreeMap::new(),
            files: BTreeMap::new(),
        };
        tree.load(workspace, root_file, Vec::new(), true, false);
        tree
    }

    /// `owns_directory`: the file's submodules sit beside it (a crate root,
    /// a `mod.rs`, a file named by `#[path]`), not in a directory of its name.
    fn load(
        &mut self,
        workspace: &Workspace,
        file: &str,
        path: Vec<String>,
        owns_directory: bool,
        test: bool,
    ) {
        let Some(source) = workspace.files.get(file) else {
            return;
        };
        if self.files.contains_key(file) {
            return;
        }
        self.modules.insert(path.clone(), file.to_owned());
        self.files.insert(
            file.to_owned(),
            FileModule {
                path: path.clone(),
                test,
            },
        );
        let here = parent(file);
        let children = if owns_directory {
            here.to_owned()
        } else {
            join(
                here,
                file.rsplit('/')
                    .next()
                    .unwrap_or(file)
                    .trim_end_matches(".rs"),
            )
        };
        self.declared(
            workspace,
            file,
            &source.syntax.items,
            &path,
            &children,
            test,
        );
    }

    fn declared(
        &mut self,
        workspace: &Workspace,
        file: &str,
        items: &[Item],
        path: &[String],
        children: &str,
        test: bool,
    ) {
        for item in items {
            let Item::Mod(module) = item else { continue };
            let name = module.ident.to_string().trim_start_matches("r#").to_owned();
            let child = [path, std::slice::from_ref(&name)].concat();
            let test = test || is_test_only(&module.attrs);
            if let Some((_, inner)) = &module.content {
                self.modules.insert(child.clone(), file.to_owned());
                self.declared(workspace, file, inner, &child, &join(children, &name), test);
            } else if let Some(named) = path_attribute(&module.attrs) {
                self.load(workspace, &join(parent(file), &named), child, true, test);
            } else if workspace
                .files
                .contains_key(&join(children, &format!("{name}.rs")))
            {
                self.load(
                    workspace,
                    &join(children, &format!("{name}.rs")),
                    child,
                    false,
                    test,
                );
            } else {
                self.load(
                    workspace,
                    &join(children, &format!("{name}/mod.rs")),
                    child,
                    true,
                    test,
                );
            }
        }
    }
}

fn parent(file: &str) -> &str {
    file.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

fn path_attribute(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        },
        _ => None,
    })
}

/// `#[cfg(test)]`, or `#[cfg(all(test, ...))]`: compiled for tests only.
pub fn is_test_only(attrs: &[Attribute]) -> bool {
    let is_test = |meta: &Meta| matches!(meta, Meta::Path(path) if path.is_ident("test"));
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .any(|attr| {
            let Ok(list) = attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
            else {
                return false;
            };
            list.iter().any(|meta| match meta {
                Meta::List(all) if all.path.is_ident("all") => all
                    .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                    .is_ok_and(|inner| inner.iter().any(is_test)),
                meta => is_test(meta),
            })
        })
}

/// `#[cfg(doc)]`: compiled for the documentation only (an import for a link).
pub fn is_doc_only(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .any(|attr| {
            attr.parse_args::<Meta>()
                .is_ok_and(|meta| matches!(meta, Meta::Path(path) if path.is_ident("doc")))
        })
}

/// The lines of a file's items that only tests compile.
pub fn test_only_lines(syntax: &syn::File) -> BTreeSet<usize> {
    struct TestItems(BTreeSet<usize>);
    impl TestItems {
        fn cover(&mut self, attrs: &[Attribute], span: Span) -> bool {
            if !is_test_only(attrs) {
                return false;
            }
            let first = attrs.iter().map(|attr| attr.span().start().line).min();
            let start = first.unwrap_or(span.start().line).min(span.start().line);
            self.0.extend(start..=span.end().line);
            true
        }
    }
    impl Visit<'_> for TestItems {
        fn visit_item(&mut self, item: &Item) {
            if !self.cover(item_attrs(item), item.span()) {
                visit::visit_item(self, item);
            }
        }
        fn visit_impl_item(&mut self, item: &syn::ImplItem) {
            let attrs = match item {
                syn::ImplItem::Fn(f) => &f.attrs,
                syn::ImplItem::Const(c) => &c.attrs,
                syn::ImplItem::Type(t) => &t.attrs,
                _ => return visit::visit_impl_item(self, item),
            };
            if !self.cover(attrs, item.span()) {
                visit::visit_impl_item(self, item);
            }
        }
    }
    let mut items = TestItems(BTreeSet::new());
    items.visit_file(syntax);
    items.0
}

pub fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// A path a file names, in a `use` or in code (macro arguments included).
pub struct Named {
    pub segments: Vec<String>,
    pub line: usize,
    /// The inline modules around it, within its file.
    pub within: Vec<String>,
    /// The name a `use` binds it to (`None` for a path in code or a glob).
    pub bound: Option<String>,
    /// Bound by a `pub use`: passed on, not used.
    pub reexport: bool,
}

/// Every path `syntax` names; with `code_only`, not in the items only tests
/// or the documentation compile. The bodies of `macro_rules!` are left out:
/// their paths are the caller's.
pub fn named_paths(syntax: &syn::File, code_only: bool) -> Vec<Named> {
    let mut names = Names {
        code_only,
        within: Vec::new(),
        found: Vec::new(),
        reexport: false,
    };
    names.visit_file(syntax);
    names.found
}

struct Names {
    code_only: bool,
    within: Vec<String>,
    found: Vec<Named>,
    /// Inside a `pub use`.
    reexport: bool,
}

impl Names {
    fn add(&mut self, segments: Vec<String>, span: Span) {
        let within = self.within.clone();
        let (bound, reexport) = (None, false);
        self.found.push(Named {
            segments,
            line: span.start().line,
            within,
            bound,
            reexport,
        });
    }

    fn bind(&mut self, segments: Vec<String>, span: Span, name: Option<String>) {
        self.add(segments, span);
        let last = self.found.last_mut().expect("just added");
        (last.bound, last.reexport) = (name, self.reexport);
    }

    fn use_tree(&mut self, prefix: &[String], tree: &UseTree) {
        let with = |name: &syn::Ident| [prefix, &[name.to_string()]].concat();
        match tree {
            UseTree::Path(path) => self.use_tree(&with(&path.ident), &path.tree),
            UseTree::Name(name) if name.ident == "self" => {
                self.bind(prefix.to_vec(), name.span(), prefix.last().cloned())
            }
            UseTree::Name(name) => self.bind(
                with(&name.ident),
                name.ident.span(),
                Some(name.ident.to_string()),
            ),
            UseTree::Rename(rename) => {
                let bound = Some(rename.rename.to_string());
                self.bind(with(&rename.ident), rename.ident.span(), bound)
            }
            UseTree::Glob(glob) => self.bind(prefix.to_vec(), glob.span(), None),
            UseTree::Group(group) => group
                .items
                .iter()
                .for_each(|tree| self.use_tree(prefix, tree)),
        }
    }

    /// Paths inside a macro's tokens: the `a::b::c` chains of words.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut at = 0;
        while at < trees.len() {
            match &trees[at] {
                TokenTree::Group(group) => self.tokens(group.stream()),
                TokenTree::Ident(first) => {
                    let mut segments = vec![first.to_string()];
                    while let [
                        TokenTree::Punct(a),
                        TokenTree::Punct(b),
                        TokenTree::Ident(next),
                        ..,
                    ] = &trees[at + 1..]
                        && a.as_char() == ':'
                        && b.as_char() == ':'
                    {
                        segments.push(next.to_string());
                        at += 3;
                    }
                    if segments.len() > 1 {
                        self.add(segments, first.span());
                    }
                }
                _ => {}
            }
            at += 1;
        }
    }
}

impl Visit<'_> for Names {
    fn visit_item(&mut self, item: &Item) {
        let attrs = item_attrs(item);
        if !(self.code_only && (is_test_only(attrs) || is_doc_only(attrs))) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &syn::ImplItemFn) {
        if !(self.code_only && is_test_only(&item.attrs)) {
            visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_macro(&mut self, item: &syn::ItemMacro) {
        if item.ident.is_none() {
            visit::visit_item_macro(self, item);
        }
    }

    fn visit_item_mod(&mut self, module: &syn::ItemMod) {
        self.within.push(module.ident.to_string());
        visit::visit_item_mod(self, module);
        self.within.pop();
    }

    fn visit_item_use(&mut self, item: &syn::ItemUse) {
        let root = if item.leading_colon.is_some() {
            vec![String::new()]
        } else {
            vec![]
        };
        self.reexport = !matches!(item.vis, syn::Visibility::Inherited);
        self.use_tree(&root, &item.tree);
        self.reexport = false;
    }

    fn visit_path(&mut self, path: &syn::Path) {
        if path.segments.len() > 1 {
            let segments = path
                .segments
                .iter()
                .map(|segment| segment.ident.to_string());
            self.add(segments.collect(), path.segments[0].ident.span());
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &syn::Macro) {
        visit::visit_macro(self, mac);
        self.tokens(mac.tokens.clone());
    }
}
