//! The shape of the source tree: modules import each other without cycles (at the top
//! level of `src/` and one level below), no source file grows past 800 lines (the test
//! kit's neither), and the library never names the test kit. Read from the files
//! themselves: `crate::a::b` and `super::b` in code outside comments and unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are module `a/b`; deeper files belong to `a/b` too.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.truncate(2);
    parts
}

/// The code of a file: its unit tests and comment lines dropped.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module names following `prefix` in `code` (`crate::a::b` gives `["a", "b"]`).
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<&'a str>> + 'a {
    code.match_indices(prefix).map(move |(at, _)| {
        code[at + prefix.len()..]
            .split("::")
            .take(2)
            .map(|s| {
                let end = s
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(s.len());
                &s[..end]
            })
            .collect()
    })
}

/// A cycle of `edges`, if there is one (depth-first search).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            return Some(path[at..].to_vec());
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// The `src/` folders of the workspace's crates: the service's, then the test kit's.
fn crate_sources() -> [PathBuf; 2] {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [root.join("src"), root.join("crates/icefeed-testkit/src")]
}

#[test]
fn modules_import_each_other_without_cycles_and_files_stay_small() {
    let [src, kit] = crate_sources();
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut kit_files = Vec::new();
    source_files(&kit, &mut kit_files);
    let mut long: Vec<String> = kit_files
        .iter()
        .map(|file| (file, std::fs::read_to_string(file).unwrap().lines().count()))
        .filter(|(_, lines)| *lines > MAX_LINES)
        .map(|(file, lines)| format!("{} ({lines} lines)", file.display()))
        .collect();
    let is_module = |parts: &[&str]| {
        let path = src.join(parts.join("/"));
        path.is_dir() || path.with_extension("rs").is_file()
    };
    let (mut top, mut nested): (BTreeMap<_, BTreeSet<_>>, BTreeMap<_, BTreeSet<_>>) =
        Default::default();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let relative = file.strip_prefix(&src).unwrap();
        if text.lines().count() > MAX_LINES {
            long.push(format!(
                "{} ({} lines)",
                relative.display(),
                text.lines().count()
            ));
        }
        let me = module_of(relative);
        let code = code(&text);
        for path in paths_after(&code, "crate::") {
            if path[0] != me[0] {
                top.entry(me[0].clone())
                    .or_default()
                    .insert(path[0].to_string());
            }
            let target = match path.get(1) {
                Some(sub) if is_module(&[path[0], sub]) => format!("{}/{sub}", path[0]),
                _ => path[0].to_string(),
            };
            let mine = me.join("/");
            if target != mine && !mine.starts_with(&format!("{target}/")) {
                nested.entry(mine).or_default().insert(target);
            }
        }
        // `super::b` from `a/b2.rs` names the sibling `a/b`.
        let sibling = me.len() == 2 && !relative.ends_with("mod.rs");
        for path in paths_after(&code, "super::").filter(|_| sibling) {
            if path[0] != me[1] && is_module(&[&me[0], path[0]]) {
                nested
                    .entry(me.join("/"))
                    .or_default()
                    .insert(format!("{}/{}", me[0], path[0]));
            }
        }
    }
    assert!(
        top.len() > 5 && nested.len() > 20,
        "read too few imports: {top:?}"
    );
    assert_eq!(
        find_cycle(&top),
        None,
        "top-level modules import each other in a cycle"
    );
    assert_eq!(
        find_cycle(&nested),
        None,
        "modules import each other in a cycle"
    );
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

/// The test kit (table writers for the demo, the tests and the benchmarks) is a
/// dependency of the package only for the binary's `icefeed demo`: the service library
/// never uses it, so fixture code stays out of the product.
#[test]
fn the_library_never_names_the_test_kit() {
    let [src, _] = crate_sources();
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let naming: Vec<_> = files
        .iter()
        .filter(|f| **f != src.join("main.rs"))
        .filter(|f| code(&std::fs::read_to_string(f).unwrap()).contains("icefeed_testkit"))
        .collect();
    assert!(
        naming.is_empty(),
        "library files naming the test kit: {naming:?}"
    );
}
