//! The house's layers, read from the source: the domain imports no storage,
//! auth, surface or presentation; the backends import no surface; the
//! surfaces import neither `server.rs` nor each other; and no two modules
//! import each other, directly or round a circle (STYLE.md's layout).
//!
//! A path counts wherever code names it (`use crate::x`, `crate::x::f()`,
//! `super::x`); comments and `#[cfg(test)]` modules do not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of `src/` by its path (`domain::board`), with its code.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
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
            (
                parts.join("::"),
                code_of(&std::fs::read_to_string(&path).unwrap()),
            )
        })
        .collect()
}

/// The text without comments and without the unit tests at its end.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string ("https://…") is not a comment; the
            // paths this reads never stand after one on the same line.
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `module` names, each resolved to the longest module path
/// that exists (`crate::domain::board::Flow` is `domain::board`).
fn imports(module: &str, code: &str, all: &BTreeMap<String, String>) -> BTreeSet<String> {
    let resolve = |path: Vec<&str>| {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|m| all.contains_key(m))
    };
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent(module))] {
        let mut from = 0;
        while let Some(at) = code[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let rest: String = code[from..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut path: Vec<&str> = base.iter().map(String::as_str).collect();
            path.extend(rest.split("::").filter(|p| !p.is_empty()));
            if let Some(target) = resolve(path) {
                let related = target == module
                    || module.starts_with(&format!("{target}::"))
                    || target.starts_with(&format!("{module}::"));
                if !related && !target.is_empty() {
                    out.insert(target);
                }
            }
        }
    }
    out
}

/// The path `super::` names from `module` (a `mod.rs` is its folder).
fn parent(module: &str) -> Vec<String> {
    let mut parts: Vec<String> = module.split("::").map(str::to_owned).collect();
    parts.pop();
    parts
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let all = modules();
    all.iter()
        .filter(|(m, _)| !m.is_empty())
        .map(|(m, code)| (m.clone(), imports(m, code, &all)))
        .collect()
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap()
}

/// The domain decides alone: it names no backend, no auth, no surface and
/// no presentation; the backends name no surface and no auth.
#[test]
fn the_domain_and_the_backends_import_nothing_above_them() {
    let rules: [(&str, &[&str]); 2] = [
        (
            "domain",
            &[
                "db",
                "auth",
                "http",
                "mcp",
                "present",
                "cli",
                "server",
                "state",
                "mqtt",
                "webhooks",
                "background",
            ],
        ),
        (
            "db",
            &["auth", "http", "mcp", "present", "cli", "server", "state"],
        ),
    ];
    let mut wrong = Vec::new();
    for (module, targets) in graph() {
        for (layer, banned) in rules {
            if top(&module) == layer {
                for t in &targets {
                    if banned.contains(&top(t)) {
                        wrong.push(format!("{module} imports {t}"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "imports across the layers: {wrong:#?}");
}

/// The surfaces (MCP, HTTP, the command line) share the domain and the
/// presentation, never each other, and none reaches into `server.rs`.
#[test]
fn surfaces_import_neither_the_server_nor_each_other() {
    let surfaces = ["http", "mcp", "cli"];
    let mut wrong = Vec::new();
    for (module, targets) in graph() {
        if !surfaces.contains(&top(&module)) {
            continue;
        }
        for t in &targets {
            let other_surface = surfaces.contains(&top(t)) && top(t) != top(&module);
            if other_surface || top(t) == "server" {
                wrong.push(format!("{module} imports {t}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "surfaces importing upward or sideways: {wrong:#?}"
    );
}

/// No import circle between modules (Tarjan's strongly connected components
/// of the import graph; a component of more than one module is a circle).
#[test]
fn no_module_imports_round_a_circle() {
    let g = graph();
    let names: Vec<&String> = g.keys().collect();
    let at: BTreeMap<&String, usize> = names.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|m| g[*m].iter().filter_map(|t| at.get(t).copied()).collect())
        .collect();
    struct Tarjan<'a> {
        edges: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        stack: Vec<usize>,
        on_stack: Vec<bool>,
        next: usize,
        circles: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.edges[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.circles.push(component);
                }
            }
        }
    }
    let n = names.len();
    let mut t = Tarjan {
        edges: &edges,
        index: vec![None; n],
        low: vec![0; n],
        stack: Vec::new(),
        on_stack: vec![false; n],
        next: 0,
        circles: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let circles: Vec<Vec<&String>> = t
        .circles
        .iter()
        .map(|c| c.iter().map(|&i| names[i]).collect())
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

/// The reader itself: it sees an import where one is, and none in a comment.
/// The binary carries one TLS stack, rustls on ring, and reqwest has no
/// provider of its own: a client built past `tls::client_builder` (which
/// installs ring first) would panic in the release binary at `build()`,
/// while the tests, whose own reqwest brings a provider, would not notice.
#[test]
fn every_outgoing_client_is_built_on_the_one_tls_stack() {
    let bare: Vec<String> = modules()
        .into_iter()
        .filter(|(module, code)| {
            module != "tls"
                && (code.contains("Client::builder()")
                    || code.contains("Client::new()")
                    || code.contains("Client::default()"))
        })
        .map(|(module, _)| module)
        .collect();
    assert!(
        bare.is_empty(),
        "modules building a reqwest client without crate::tls::client_builder(): {bare:?}"
    );
}

#[test]
fn the_reader_finds_imports_and_skips_comments() {
    let all = modules();
    let code = code_of(
        "use crate::domain::board::Flow;\n// crate::db::open\nfn f() { super::secret::x(); }",
    );
    let found = imports("auth::caller", &code, &all);
    assert!(found.contains("domain::board"), "{found:?}");
    assert!(!found.contains("db"), "{found:?}");
    // `super::` from auth::caller is `auth`, its own parent: not counted.
    assert!(!found.iter().any(|m| m.starts_with("auth")), "{found:?}");
}
