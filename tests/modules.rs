//! The module graph has no cycles: a newcomer can read any module knowing only the ones
//! it names, and the UI's lesson code reads the app through a plain view, never the app
//! itself. A module depends on another when its code (comments and unit tests aside)
//! names it by a `crate::`, `super::` or `self::` path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path of a file under `root`: `ui/panes/mod.rs` is `ui::panes`.
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without line comments and without its unit tests.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts at `crate`, `super` or `self`, with `a::{b, c::D}` groups
/// spread into `a::b` and `a::c::D`.
fn paths(code: &str) -> Vec<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            if code[..i].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let rest = &code[i..];
            let end = rest
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(rest.len());
            let head = rest[..end].trim_end_matches(':').to_string();
            if rest[end..].starts_with('{') {
                let group = &rest[end + 1..rest[end..].find('}').map_or(end + 1, |j| end + j)];
                for item in group.split(',') {
                    let item: String = item
                        .trim()
                        .chars()
                        .take_while(|&c| is_ident(c) || c == ':')
                        .collect();
                    out.push(format!("{head}::{item}"));
                }
            }
            out.push(head);
        }
    }
    out
}

/// The module `path` (seen from `from`) names, if it is one of `modules`.
fn resolve(from: &str, path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let mut base: Vec<&str> = Vec::new();
    let mut segs = path.split("::").filter(|s| !s.is_empty()).peekable();
    match segs.next()? {
        "crate" => {}
        "self" => base.extend(from.split("::").filter(|s| !s.is_empty())),
        "super" => {
            base.extend(from.split("::").filter(|s| !s.is_empty()));
            base.pop();
            while segs.peek() == Some(&"super") {
                segs.next();
                base.pop();
            }
        }
        _ => return None,
    }
    let segs: Vec<&str> = segs.collect();
    (1..=segs.len()).rev().find_map(|n| {
        let m = [&base[..], &segs[..n]].concat().join("::");
        modules.contains(&m).then_some(m)
    })
}

/// Which modules each module under `root` names, parents and children left out (a
/// parent declares its children, and a child may use what its parent re-exports).
fn graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(root, f)).collect();
    let mut g = Graph::new();
    for f in &files {
        let m = module_of(root, f);
        let text = code(&std::fs::read_to_string(f).unwrap());
        let deps = paths(&text)
            .iter()
            .filter_map(|p| resolve(&m, p, &modules))
            .filter(|d| {
                d != &m
                    && !d.is_empty()
                    && !m.starts_with(&format!("{d}::"))
                    && !d.starts_with(&format!("{m}::"))
            })
            .collect();
        g.insert(m, deps);
    }
    g
}

/// The groups of modules that reach each other (Tarjan's strongly connected components
/// with more than one member).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct S<'a> {
        g: &'a Graph,
        next: usize,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                s.low.insert(v, s.low[v].min(lw));
            } else if s.stack.contains(&w.as_str()) {
                let iw = s.index[w.as_str()];
                s.low.insert(v, s.low[v].min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let at = s.stack.iter().rposition(|x| *x == v).unwrap();
            let mut comp: Vec<String> = s.stack.drain(at..).map(str::to_string).collect();
            comp.sort();
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = S {
        g,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn the_crate_has_no_import_cycles() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.len() > 50, "the walk found the modules: {}", g.len());
    assert!(
        g["ui::app"].contains("lesson::tutor"),
        "the walk sees real dependencies"
    );
    let found = cycles(&g);
    assert!(found.is_empty(), "modules that reach each other: {found:?}");
}

#[test]
fn a_cycle_through_a_brace_group_or_super_is_found() {
    let d = tempfile::tempdir().unwrap();
    let w = |p: &str, s: &str| {
        let p = d.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    w("lib.rs", "pub mod ui;\npub mod kv;\n");
    w("ui/mod.rs", "pub mod app;\npub mod tutor;\n");
    w("ui/app.rs", "use super::{tutor::Tutor, keys};\n");
    w(
        "ui/tutor.rs",
        "// crate::kv is only mentioned\nuse crate::ui::app::App;\n",
    );
    w("kv/mod.rs", "pub fn f() {}\n");
    w(
        "kv/pool.rs",
        "#[cfg(test)]\nmod tests {\n use crate::ui::app::App;\n}\n",
    );
    let g = graph(d.path());
    assert_eq!(
        cycles(&g),
        vec![vec!["ui::app".to_string(), "ui::tutor".to_string()]]
    );
    assert!(g["ui::tutor"].iter().all(|m| m != "kv"), "{g:?}");
    assert!(g["kv::pool"].is_empty(), "{g:?}");
}

#[test]
fn pictures_and_lessons_read_reports_not_the_worker_thread() {
    // The report types are plain data (`report`); the worker thread is one producer of
    // them, a recording another. What draws or teaches depends on the data only.
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for (m, deps) in &g {
        if ["views", "export", "lesson"]
            .iter()
            .any(|p| m == p || m.starts_with(&format!("{p}::")))
        {
            let into: Vec<_> = deps.iter().filter(|d| d.starts_with("worker")).collect();
            assert!(into.is_empty(), "{m} imports {into:?}");
        }
    }
    assert!(
        g["views::heatmap"].contains("report"),
        "the walk sees `report`"
    );
}

/// ARCHITECTURE.md's module map as (the top-level modules of a row, the ones its
/// "depends on" column names); `None` for "everything above" and "the library", which
/// allow any module of the rows above.
fn module_map(doc: &str) -> Vec<(Vec<String>, Option<BTreeSet<String>>)> {
    let names = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_string())
            .collect()
    };
    let table = doc
        .split("## Module map")
        .nth(1)
        .expect("ARCHITECTURE.md has a module map");
    table
        .lines()
        .skip_while(|l| !l.starts_with("| module"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let (module, deps) = (cells[0].trim_start_matches("| "), cells[cells.len() - 1]);
            let open = deps.contains("everything above") || deps.contains("the library");
            // The column may add words in parentheses; only the module names count.
            let named = names(deps.split(" (").next().unwrap_or(deps))
                .into_iter()
                .collect();
            (names(module), (!open).then_some(named))
        })
        .collect()
}

/// The graph with every module folded into its top-level one (`ui::panes::kv` is `ui`).
fn top_level(g: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out = Graph::new();
    for (m, deps) in g {
        let t = top(m);
        let entry = out.entry(t.clone()).or_default();
        entry.extend(
            deps.iter()
                .map(|d| top(d))
                .filter(|d| d != &t && !d.is_empty()),
        );
    }
    out
}

#[test]
fn the_module_map_in_architecture_md_is_the_import_graph() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let map = module_map(&doc);
    let g = top_level(&graph(&root.join("src")));
    let mut wrong = Vec::new();
    let mut above: BTreeSet<String> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for (modules, listed) in &map {
        for m in modules.iter().filter(|m| m.as_str() != "main") {
            seen.insert(m.clone());
            let actual = g.get(m).cloned().unwrap_or_default();
            match listed {
                Some(listed) if &actual != listed => wrong.push(format!(
                    "{m}: the map says {listed:?}, the code imports {actual:?}"
                )),
                None => {
                    let beyond: Vec<_> = actual.difference(&above).collect();
                    if !beyond.is_empty() {
                        wrong.push(format!("{m}: imports {beyond:?}, which no row above holds"));
                    }
                }
                _ => {}
            }
        }
        above.extend(modules.iter().cloned());
    }
    let unmapped: Vec<_> = g
        .keys()
        .filter(|m| !m.is_empty() && !seen.contains(*m))
        .collect();
    assert!(
        unmapped.is_empty(),
        "modules missing from the map: {unmapped:?}"
    );
    assert!(
        wrong.is_empty(),
        "ARCHITECTURE.md's module map has drifted:\n{}",
        wrong.join("\n")
    );
}

/// Functions of `text` as (name, first line, lines from `fn` to its closing brace). A
/// function ends at the first line that is its own indentation and `}`.
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let body = l.trim_start();
        let indent = &l[..l.len() - body.len()];
        let rest = [
            "pub ",
            "pub(crate) ",
            "pub(super) ",
            "const ",
            "unsafe ",
            "async ",
        ]
        .iter()
        .fold(body, |b, p| b.strip_prefix(p).unwrap_or(b));
        let Some(sig) = rest.strip_prefix("fn ") else {
            continue;
        };
        // A declaration without a body, or a body on the same line.
        if l.trim_end().ends_with(';') || l.trim_end().ends_with('}') {
            continue;
        }
        let name: String = sig
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|x| *x == close) {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

#[test]
fn no_function_is_longer_than_sixty_lines() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut long = Vec::new();
    let mut seen = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (name, at, n) in function_lengths(&text) {
            seen += 1;
            if n > 60 {
                long.push(format!("{}:{at} {name}: {n} lines", f.display()));
            }
        }
    }
    assert!(seen > 500, "the walk found the functions: {seen}");
    let t = "fn a() {\n    x;\n}\n    pub fn b(&self) -> u8 { 1 }\n";
    assert_eq!(function_lengths(t), vec![("a".to_string(), 1, 3)]);
    assert!(
        long.is_empty(),
        "functions over 60 lines:\n{}",
        long.join("\n")
    );
}
