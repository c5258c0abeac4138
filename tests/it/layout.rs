//! The shape of the source tree: modules import each other without cycles (at the top
//! level of `src/` and one level below), no source file grows past 800 lines, every
//! module opens by saying what it must not reach and does not reach it, and the library
//! never names the test kit. Read from the files themselves: `crate::a::b` and `super::b`
//! in code outside comments and unit tests.

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

/// Whether `code` names the module `path` (`a` or `a::b`) through `prefix` (`crate::`,
/// or `icefeed::` from the binary), or as `super::b` from a file directly in `a/`.
fn names_module(code: &str, prefix: &str, path: &str, me: &[String]) -> bool {
    let followed = |needle: &str| {
        code.match_indices(needle).any(|(at, _)| {
            !code[at + needle.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let sibling = match path.split_once("::") {
        Some((parent, child)) if me.len() == 2 && me[0] == parent => {
            followed(&format!("super::{child}"))
        }
        _ => false,
    };
    followed(&format!("{prefix}{path}")) || sibling
}

/// What a file's opening `//!` comment says it must not reach: the module paths in
/// backticks between `Must not reach:` and the first `(`, `.` or `;` after it (a reason
/// may follow), or `None` for "the rest of the crate". `Err`: it says nothing of it.
fn must_not_reach(text: &str) -> Result<Option<Vec<String>>, &'static str> {
    if !text.starts_with("//!") {
        return Err("does not open with a `//!` comment");
    }
    let opening: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let opening = opening.join(" ");
    let Some((_, said)) = opening.split_once("Must not reach:") else {
        return Err("does not say what it must not reach (`Must not reach: ...`)");
    };
    let end = said
        .find(['(', ';'])
        .into_iter()
        .chain(said.find(". "))
        .chain(said.strip_suffix('.').map(str::len))
        .min()
        .unwrap_or(said.len());
    let said = &said[..end];
    if said.trim() == "the rest of the crate" {
        return Ok(None);
    }
    let paths: Vec<String> = said
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|p| p.trim_start_matches("crate::").to_string())
        .collect();
    if paths.is_empty() {
        return Err("names no module in backticks after `Must not reach:`");
    }
    Ok(Some(paths))
}

#[test]
fn modules_say_what_they_must_not_reach_and_do_not_reach_it() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (at, src) in crate_sources().iter().enumerate() {
        let testkit = at == 1;
        let mut files = Vec::new();
        source_files(src, &mut files);
        let is_module = |path: &str| {
            let path = src.join(path.replace("::", "/"));
            path.is_dir() || path.with_extension("rs").is_file()
        };
        for file in files {
            let relative = file.strip_prefix(src).unwrap();
            let name = relative.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&file).unwrap();
            let said = match must_not_reach(&text) {
                Err(e) => {
                    wrong.push(format!("{}: {e}", file.display()));
                    continue;
                }
                Ok(said) => said,
            };
            checked += 1;
            let me = module_of(relative);
            let code = code(&text);
            let prefix = if !testkit && name == "main.rs" {
                "icefeed::"
            } else {
                "crate::"
            };
            let Some(paths) = said else {
                let outside: BTreeSet<&str> = paths_after(&code, prefix)
                    .map(|p| p[0])
                    .filter(|m| *m != me[0])
                    .collect();
                if !outside.is_empty() {
                    wrong.push(format!(
                        "{name} says it must not reach the rest of the crate but reaches {outside:?}"
                    ));
                }
                continue;
            };
            for path in paths {
                let reaches = match path.as_str() {
                    "icefeed_testkit" if !testkit => code.contains("icefeed_testkit"),
                    "icefeed" if testkit => code.contains("icefeed::"),
                    _ if is_module(&path) => names_module(&code, prefix, &path, &me),
                    _ => {
                        wrong.push(format!("{name}: `{path}` is no module of its crate"));
                        continue;
                    }
                };
                if reaches {
                    wrong.push(format!("{name} says it must not reach `{path}` but does"));
                }
            }
        }
    }
    assert!(checked > 80, "checked only {checked} files");
    assert!(wrong.is_empty(), "module openings: {wrong:#?}");
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
