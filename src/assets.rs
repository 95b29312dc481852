//! The web tree (`web/`), embedded: every file a page loads, compiled into
//! the binary, and the board app's one self-contained document assembled
//! from the same files.
//!
//! `web/shared/` (the DOM helper, time formatting, the API helper, the
//! Markdown renderer with its vendored libraries, the theme and the logo)
//! is served at `/assets/*` to everyone; `web/ui/` at `/ui/*` and
//! `web/admin/` at `/admin/*` behind their pages' gates; `web/board/` is
//! never served by URL but inlined ([`inline_modules`]); `web/pages/` holds
//! the sign-in pages' stylesheet. The pages import the shared ES modules by
//! their `/assets/…` URL, with no build step.
//!
//! Each file is named here with `include_str!` rather than embedded by a
//! folder walk (`rust-embed` and the like): the list is the allow-list of
//! what is served (the vendored licences and READMEs beside the code are
//! not), a missing file fails the build, and nothing is read from disk at
//! run time in any build.

/// The version pages put on their asset links (`?v=`), so a new binary's
/// pages never run an old cached script.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The coordination protocol as one text: the Claude Code plugin's skill
/// (`plugin/skills/chatroom/SKILL.md`), which the MCP server serves too.
pub const COORDINATION_SKILL: &str = include_str!("../plugin/skills/chatroom/SKILL.md");

/// A served file: where, as what, and its text.
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// One entry of an asset table.
macro_rules! asset {
    ($path:literal, $content_type:ident, $body:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            body: $body,
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// The shared look: colour tokens (light and dark), top bar, buttons,
/// fields, banners.
pub const THEME_CSS: &str = include_str!("../web/shared/theme.css");
/// The logo (also the favicon).
pub const LOGO_SVG: &str = include_str!("../web/shared/logo.svg");
/// `marked` (MIT), vendored unmodified: Markdown to HTML (a classic script
/// that sets `globalThis.marked`).
pub const MARKED_JS: &str = include_str!("../web/shared/vendor/marked.umd.js");
/// DOMPurify (Apache-2.0), vendored unmodified: the HTML sanitiser (a
/// classic script that sets `globalThis.DOMPurify`).
pub const PURIFY_JS: &str = include_str!("../web/shared/vendor/purify.min.js");
/// The sign-in and consent pages' stylesheet (served by the OAuth routes).
pub const SIGNIN_CSS: &str = include_str!("../web/pages/signin.css");

/// `web/shared/`, served at `/assets/*`: the ES modules every page imports
/// by these paths, the vendored libraries, the theme and the logo.
pub const SHARED: &[Asset] = &[
    asset!("/assets/theme.css", CSS, THEME_CSS),
    asset!("/assets/logo.svg", SVG, LOGO_SVG),
    asset!("/assets/dom.js", JS, include_str!("../web/shared/dom.js")),
    asset!("/assets/time.js", JS, include_str!("../web/shared/time.js")),
    asset!("/assets/api.js", JS, include_str!("../web/shared/api.js")),
    asset!(
        "/assets/markdown.js",
        JS,
        include_str!("../web/shared/markdown.js")
    ),
    asset!(
        "/assets/pages.css",
        CSS,
        include_str!("../web/pages/pages.css")
    ),
    asset!("/assets/vendor/marked.js", JS, MARKED_JS),
    asset!("/assets/vendor/purify.js", JS, PURIFY_JS),
];

/// `web/ui/`: the dashboard's modules (the entry `app.js` and one per
/// section) and stylesheet, at `/ui/*`.
pub const UI: &[Asset] = &[
    asset!("/ui/app.js", JS, include_str!("../web/ui/app.js")),
    asset!("/ui/state.js", JS, include_str!("../web/ui/state.js")),
    asset!("/ui/conn.js", JS, include_str!("../web/ui/conn.js")),
    asset!("/ui/session.js", JS, include_str!("../web/ui/session.js")),
    asset!("/ui/layout.js", JS, include_str!("../web/ui/layout.js")),
    asset!("/ui/rooms.js", JS, include_str!("../web/ui/rooms.js")),
    asset!("/ui/board.js", JS, include_str!("../web/ui/board.js")),
    asset!("/ui/chat.js", JS, include_str!("../web/ui/chat.js")),
    asset!("/ui/activity.js", JS, include_str!("../web/ui/activity.js")),
    asset!("/ui/stream.js", JS, include_str!("../web/ui/stream.js")),
    asset!("/ui/app.css", CSS, include_str!("../web/ui/app.css")),
    asset!("/ui/favicon.svg", SVG, LOGO_SVG),
];

/// `web/admin/`: the console's script and stylesheet, at `/admin/*`.
pub const ADMIN: &[Asset] = &[
    asset!("/admin/app.js", JS, include_str!("../web/admin/app.js")),
    asset!(
        "/admin/webhooks.js",
        JS,
        include_str!("../web/admin/webhooks.js")
    ),
    asset!("/admin/app.css", CSS, include_str!("../web/admin/app.css")),
];

/// `web/board/`: the parts of the board app's document.
pub mod board {
    pub const HTML: &str = include_str!("../web/board/board.html");
    pub const CSS: &str = include_str!("../web/board/board.css");
    pub const JS: &str = include_str!("../web/board/board.js");
    /// The ext-apps app bridge, `dist/src/app-with-deps.js` of the npm
    /// package as published (an ES module with no imports).
    pub const EXT_APPS_JS: &str = include_str!("../web/board/vendor/ext-apps-app-with-deps.js");
}

/// The shared module served at `path`, if there is one.
fn shared_module(path: &str) -> Option<&'static str> {
    SHARED
        .iter()
        .find(|a| a.path == path && a.content_type == JS)
        .map(|a| a.body)
}

/// The names a shared module exports (`export function|const|class NAME`).
fn exported_names(module: &str) -> Vec<&str> {
    module
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|rest| {
            let rest = rest.strip_prefix("async ").unwrap_or(rest);
            let rest = ["function ", "const ", "class ", "let "]
                .iter()
                .find_map(|k| rest.strip_prefix(k))?;
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(rest.len());
            Some(&rest[..end])
        })
        .collect()
}

/// An ES module with the shared modules it imports inlined, for a document
/// that must load nothing (the board app). Each `import { a, b as c } from
/// '/assets/x.js';` line becomes `const { a, b: c } = …;` over that module
/// run once in its own function scope (its `export` keywords dropped), so
/// its inner names never meet the importer's. Only that import form is
/// understood, and a shared module imports nothing itself; anything else
/// panics, which the tests of the assembled document catch.
pub fn inline_modules(source: &str) -> String {
    let mut modules: Vec<(&str, String)> = Vec::new();
    let mut body = String::with_capacity(source.len());
    for line in source.lines() {
        let Some(rest) = line.strip_prefix("import ") else {
            body.push_str(line);
            body.push('\n');
            continue;
        };
        let (names, from) = rest
            .split_once(" from ")
            .unwrap_or_else(|| panic!("an import this inliner cannot read: {line}"));
        let path = from.trim().trim_end_matches(';').trim_matches('\'');
        let module =
            shared_module(path).unwrap_or_else(|| panic!("{path} is not a shared module: {line}"));
        assert!(
            !module.lines().any(|l| l.starts_with("import ")),
            "the shared module {path} imports another one, which this inliner does not do"
        );
        let exports = exported_names(module);
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        let bindings: Vec<String> = names
            .split(',')
            .map(|n| {
                let n = n.trim();
                let (name, local) = n.split_once(" as ").unwrap_or((n, n));
                assert!(exports.contains(&name), "{path} does not export {name}");
                if name == local {
                    name.to_owned()
                } else {
                    format!("{name}: {local}")
                }
            })
            .collect();
        let var = format!(
            "__shared_{}",
            path.trim_start_matches("/assets/")
                .trim_end_matches(".js")
                .replace(|c: char| !c.is_alphanumeric(), "_")
        );
        if !modules.iter().any(|(p, _)| *p == path) {
            let code: String = module
                .lines()
                .map(|l| l.strip_prefix("export ").unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n");
            modules.push((
                path,
                format!(
                    "const {var} = (() => {{\n{code}\nreturn {{ {} }};\n}})();\n",
                    exports.join(", ")
                ),
            ));
        }
        body.push_str(&format!("const {{ {} }} = {var};\n", bindings.join(", ")));
    }
    let mut out: String = modules.into_iter().map(|(_, m)| m).collect();
    out.push_str(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_found() {
        assert_eq!(
            exported_names(
                "export function a() {}\nexport const $ = 1;\nexport async function b_2() {}\nexport class C {}\nconst d = 1;"
            ),
            ["a", "$", "b_2", "C"]
        );
    }

    #[test]
    fn imports_become_scoped_constants() {
        let out = inline_modules(
            "import { $, el } from '/assets/dom.js';\nimport { clock as when } from '/assets/time.js';\nimport { el as make } from '/assets/dom.js';\nwhen(1);\n",
        );
        assert!(!out.contains("import "), "{out}");
        assert!(!out.lines().any(|l| l.starts_with("export ")), "{out}");
        assert_eq!(out.matches("const __shared_dom = ").count(), 1, "{out}");
        assert!(out.contains("const { $, el } = __shared_dom;"), "{out}");
        assert!(
            out.contains("const { clock: when } = __shared_time;"),
            "{out}"
        );
        assert!(out.contains("const { el: make } = __shared_dom;"), "{out}");
        assert!(out.ends_with("when(1);\n"), "{out}");
    }

    #[test]
    #[should_panic(expected = "does not export")]
    fn a_missing_export_is_refused() {
        inline_modules("import { nothing } from '/assets/dom.js';\n");
    }

    #[test]
    fn every_shared_module_is_inlinable() {
        for a in SHARED
            .iter()
            .filter(|a| a.content_type == JS && !a.path.contains("/vendor/"))
        {
            assert!(
                !exported_names(a.body).is_empty(),
                "{} exports nothing",
                a.path
            );
            assert!(
                !a.body.lines().any(|l| l.starts_with("import ")),
                "{} imports another module",
                a.path
            );
        }
    }
}
