//! The board inside the chat app (MCP Apps, SEP-1865): the one UI resource,
//! `ui://chatroom/board`, that hosts render in a sandboxed iframe when
//! `show_board` is called, and the `_meta` that ties the tool to it.
//!
//! The document is self-contained: the shared look, the shared modules the
//! app imports (DOM, time, Markdown with its vendored libraries), the app's
//! own script and style, and the ext-apps app bridge (vendored verbatim,
//! see `web/board/vendor/README.md`) are inlined once, at the first read,
//! from the embedded web tree ([`crate::assets`]). It holds no token, URL or
//! room data: everything it shows it gets by calling tools through the
//! host, and what it offers on a task is the task's `can`.

use std::sync::LazyLock;

use rmcp::model::{MetaObject, ReadResourceResult, Resource, ResourceContents};
use serde_json::{Value, json};

use crate::assets::board::{CSS as BOARD_CSS, EXT_APPS_JS, HTML as BOARD_HTML, JS as BOARD_JS};
use crate::assets::{self, MARKED_JS, PURIFY_JS, THEME_CSS};

/// The app's resource URI, named by `show_board`'s `_meta.ui.resourceUri`.
pub const BOARD_URI: &str = "ui://chatroom/board";

/// The MCP Apps extension's id in `capabilities.extensions`.
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The MIME type MCP Apps hosts look for.
pub const MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The document, assembled once.
static DOCUMENT: LazyLock<String> = LazyLock::new(assemble);

/// `_meta` of the resource: nothing is loaded from or sent to any other
/// origin (empty lists are the secure default, said out loud), and a frame
/// around the app.
fn resource_meta() -> MetaObject {
    meta(json!({
        "ui": {
            "csp": {
                "connectDomains": [],
                "resourceDomains": [],
                "frameDomains": [],
                "baseUriDomains": [],
            },
            "prefersBorder": true,
        }
    }))
}

/// `_meta` of `show_board`: the nested key of the spec, and the flat key
/// that hosts written before it still read.
pub fn tool_meta() -> MetaObject {
    meta(json!({
        "ui": { "resourceUri": BOARD_URI },
        "ui/resourceUri": BOARD_URI,
    }))
}

/// `_meta` of an app-only tool: hidden from the model, called by the
/// board app's buttons (`_meta.ui.visibility: ["app"]`). No `resourceUri`:
/// calling one opens nothing (hosts list the tools that have one as apps).
pub fn app_only_meta() -> MetaObject {
    meta(json!({
        "ui": { "visibility": ["app"] },
    }))
}

fn meta(v: Value) -> MetaObject {
    match v {
        Value::Object(map) => MetaObject(map),
        _ => MetaObject::new(),
    }
}

pub fn resource() -> Resource {
    let mut r = Resource::new(BOARD_URI, "chatroom-board")
        .with_title("chatroom board")
        .with_description(
            "The room's board, chat and activity, with claim, release, notes, messages and reviews.",
        )
        .with_mime_type(MIME_TYPE);
    r.meta = Some(resource_meta());
    r
}

/// A room's board as a resource (`chatroom://room/<name>/board`): read it
/// for the open tasks as JSON, listen to it for `resources/updated`.
pub fn board_resource(room: &str) -> Resource {
    Resource::new(super::listen::board_uri(room), format!("{room}-board"))
        .with_title(format!("board of room {room}"))
        .with_description("The room's open tasks as JSON; subscriptions/listen sends notifications/resources/updated when they change.")
        .with_mime_type("application/json")
}

/// `resources/read` of the board app, if `uri` names it.
pub fn read(uri: &str) -> Option<ReadResourceResult> {
    (uri == BOARD_URI).then(|| {
        ReadResourceResult::new(vec![
            ResourceContents::text(DOCUMENT.as_str(), BOARD_URI)
                .with_mime_type(MIME_TYPE)
                .with_meta(resource_meta()),
        ])
    })
}

/// The ext-apps bundle ends in one `export{a as App,…};`. In the document it
/// runs as an inline module, which nothing can import from, so its exports
/// become a frozen `globalThis.McpExtApps` instead.
fn exports_to_global(bundle: &str) -> String {
    let body = bundle.trim_end();
    let Some(start) = body.rfind("export{") else {
        panic!("the vendored ext-apps bundle has no trailing export list");
    };
    let list = body[start + "export{".len()..]
        .trim_end_matches(';')
        .trim_end_matches('}');
    let fields: Vec<String> = list
        .split(',')
        .map(|item| match item.trim().split_once(" as ") {
            Some((local, exported)) => format!("{exported}:{local}"),
            None => item.trim().to_owned(),
        })
        .collect();
    format!(
        "{}\nglobalThis.McpExtApps=Object.freeze({{{}}});\n",
        &body[..start],
        fields.join(",")
    )
}

/// The shared theme follows the system's colour scheme; in the app the host
/// says which (`hostContext.theme`, set as `data-theme` on the root). The
/// light variables are the first `:root` block, the dark ones the `:root`
/// block inside the `prefers-color-scheme: dark` query: both are repeated
/// under `:root[data-theme=…]`, which outranks the query.
fn host_theme_overrides(theme: &str) -> String {
    let block = |from: usize| -> Option<&str> {
        let open = from + theme[from..].find(":root {")? + ":root {".len();
        let close = open + theme[open..].find('}')?;
        Some(&theme[open..close])
    };
    let light = block(0).unwrap_or("");
    let dark = theme
        .find("@media (prefers-color-scheme: dark)")
        .and_then(block)
        .unwrap_or("");
    format!(
        ":root[data-theme=\"light\"] {{ color-scheme: light;{light}}}\n:root[data-theme=\"dark\"] {{ color-scheme: dark;{dark}}}\n"
    )
}

/// Inline text must not close its own element early.
fn inline_safe(text: &str, tag: &str) -> String {
    text.replace(&format!("</{tag}"), &format!("<\\/{tag}"))
}

fn assemble() -> String {
    let css = format!(
        "{THEME_CSS}\n{}\n{BOARD_CSS}",
        host_theme_overrides(THEME_CSS)
    );
    BOARD_HTML
        .replace("/*STYLE*/", &inline_safe(&css, "style"))
        .replace(
            "/*EXT_APPS*/",
            &inline_safe(&exports_to_global(EXT_APPS_JS), "script"),
        )
        .replace(
            "/*VENDOR*/",
            &inline_safe(&format!("{MARKED_JS}\n{PURIFY_JS}"), "script"),
        )
        .replace(
            "/*BOARD*/",
            &inline_safe(&assets::inline_modules(BOARD_JS), "script"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_exports_become_one_global() {
        let out = exports_to_global(
            "var a=1;function b(){}\nexport{a as App,b as applyDocumentTheme,c};\n",
        );
        assert!(
            out.ends_with("globalThis.McpExtApps=Object.freeze({App:a,applyDocumentTheme:b,c});\n"),
            "{out}"
        );
        assert!(!out.contains("export{"));
        let real = exports_to_global(EXT_APPS_JS);
        for name in [
            "App:",
            "PostMessageTransport:",
            "applyDocumentTheme:",
            "applyHostStyleVariables:",
        ] {
            assert!(real.contains(name), "the vendored bundle lost {name}");
        }
    }

    #[test]
    fn the_document_is_whole_and_loads_nothing() {
        let doc = assemble();
        for marker in ["/*STYLE*/", "/*EXT_APPS*/", "/*VENDOR*/", "/*BOARD*/"] {
            assert!(!doc.contains(marker), "{marker} left in the document");
        }
        // Each inlined part closes only its own element.
        assert_eq!(
            doc.matches("</script>").count(),
            BOARD_HTML.matches("</script>").count()
        );
        assert_eq!(doc.matches("</style>").count(), 1);
        assert!(!doc.contains("<script src") && !doc.contains("<link"));
        // The shared modules are inside; no import is left to load them.
        assert!(
            doc.contains("const __shared_dom = "),
            "the DOM helper is inlined"
        );
        assert!(
            doc.contains("const __shared_markdown = "),
            "the renderer is inlined"
        );
        assert!(!doc.contains("from '/assets/"), "an import is left");
    }

    #[test]
    fn the_host_theme_repeats_both_palettes() {
        let css = host_theme_overrides(THEME_CSS);
        assert!(css.contains(":root[data-theme=\"light\"] { color-scheme: light;"));
        assert!(css.contains("--bg: #f5f6f8;"), "{css}");
        assert!(css.contains("--bg: #0e1016;"), "{css}");
    }
}
