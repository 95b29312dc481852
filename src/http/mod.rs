//! The HTTP surfaces besides `/mcp`: the `/v1` REST API and SSE stream (and
//! their OpenAPI document), the
//! `/ui` dashboard, the `/admin` console, the OAuth endpoints and sign-in
//! pages, the small pages that say where a person is, and the embedded
//! assets they serve (from [`crate::assets`]). The request extractors they
//! share live in [`extract`]. Each submodule contributes its routes here.

pub mod admin;
pub mod extract;
pub mod inbound;
pub mod oauth;
pub mod openapi;
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
        .merge(openapi::api().split_for_parts().0)
        .merge(rest::routes(state.clone()))
        .merge(inbound::routes())
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
    pages::root(state.config.enable_ui && !console_hidden(&state.config, &headers))
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
