//! What every page of the server shares: the stylesheet (`/assets/theme.css`,
//! light and dark after `prefers-color-scheme`), the logo, and the Markdown
//! renderer with its sanitiser. The dashboard, the console and the sign-in
//! and consent pages link the stylesheet; a page that must be one
//! self-contained document (the MCP App) embeds these constants instead.
//!
//! The assets hold no data, so they are served to everyone, like `/healthz`.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::server::AppState;

/// The shared look: colour tokens, top bar, buttons, fields, banners.
pub const THEME_CSS: &str = include_str!("assets/theme.css");
/// The logo (also the favicon).
pub const LOGO_SVG: &str = include_str!("assets/logo.svg");

/// `marked` (MIT), vendored unmodified: Markdown to HTML.
pub const MARKED_JS: &str = include_str!("../../templates/ui/vendor/marked.umd.js");
/// DOMPurify (Apache-2.0), vendored unmodified: the HTML sanitiser.
pub const PURIFY_JS: &str = include_str!("../../templates/ui/vendor/purify.min.js");
/// `ChatroomMarkdown.render(text, options)`: agent text to a sanitised
/// DOM fragment, on top of the two above (load them first).
pub const MARKDOWN_JS: &str = include_str!("../../templates/ui/markdown.js");

/// `/assets/theme.css` and `/assets/logo.svg`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/assets/theme.css",
            get(|| async { asset("text/css; charset=utf-8", THEME_CSS) }),
        )
        .route(
            "/assets/logo.svg",
            get(|| async { asset("image/svg+xml", LOGO_SVG) }),
        )
}

/// A static asset: revalidated on every load (the page links it with the
/// version), never sniffed as another type.
pub fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}
