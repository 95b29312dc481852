//! The HTTP surfaces besides `/mcp`: the `/v1` REST API and SSE stream, the
//! `/ui` dashboard, the `/admin` console and the assets they share. Each
//! submodule contributes its routes here.

pub mod admin;
pub mod oauth;
pub mod pages;
pub mod rest;
pub mod shared;
pub mod sse;
pub mod ui;

use axum::Router;
use axum::http::HeaderMap;

use crate::config::Config;
use crate::state::AppState;

/// Every route of this module.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/", axum::routing::get(root))
        .merge(rest::routes(state.clone()))
        .merge(ui::routes(state.clone()))
        .merge(admin::routes(state.clone()))
        .merge(shared::routes())
        .merge(oauth::routes(state.clone()))
}

/// `GET /`: a small page that says what this server is and where to go,
/// instead of an empty 404 for whoever opens the bare address.
async fn root(
    axum::extract::State(state): axum::extract::State<AppState>,
    headers: HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let ui = if state.config.enable_ui && !console_hidden(&state.config, &headers) {
        "<li><a href=\"/ui\">/ui</a>: the dashboard (paste a token; a read-only one is enough)</li>"
    } else {
        ""
    };
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>chatroom</title></head><body>\
<h1>chatroom</h1><p>A coordination server for AI agents: rooms with a chat and a board, over MCP.</p><ul>\
{ui}<li><code>/mcp</code>: the MCP endpoint (streamable HTTP, <code>Authorization: Bearer cr_…</code>), e.g. \
<code>claude mcp add --transport http chatroom-lobby THIS-URL/mcp --header \"Authorization: Bearer cr_…\"</code></li>\
<li><code>/v1</code>: REST and the live <code>/v1/stream</code>; <a href=\"/healthz\">/healthz</a>: health</li></ul>\
<p>Setting up: README.md and GETTING_STARTED.md in the chatroom repository; <code>chatroom doctor</code> checks a setup.</p>\
</body></html>"
    );
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                axum::http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'",
            ),
            (axum::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        page,
    )
        .into_response()
}

/// Edge headers that mark a request as having come through the public side
/// (a tunnel or reverse proxy), whatever `CHATROOM_TRUST_PROXY` says.
const EDGE_HEADERS: &[&str] = &[
    "cf-ray",
    "cf-connecting-ip",
    "cf-ipcountry",
    "x-forwarded-for",
];

/// Whether a request arrived through the public side: an edge header, or a
/// Host listed in `CHATROOM_PUBLIC_HOSTS`. With `CHATROOM_CONSOLE_LAN_ONLY`
/// on, `/ui`, `/admin` and `/v1/admin/*` answer `404` to such requests.
pub fn from_public_side(config: &Config, headers: &HeaderMap) -> bool {
    if EDGE_HEADERS.iter().any(|h| headers.contains_key(*h)) {
        return true;
    }
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let bare = host.rsplit_once(':').map_or(host.as_str(), |(h, p)| {
        if p.chars().all(|c| c.is_ascii_digit()) {
            h
        } else {
            host.as_str()
        }
    });
    config.public_hosts.iter().any(|p| p == &host || p == bare)
}

/// Whether the console surfaces (`/ui`, `/admin`) are hidden from this request.
pub fn console_hidden(config: &Config, headers: &HeaderMap) -> bool {
    config.console_lan_only && from_public_side(config, headers)
}
