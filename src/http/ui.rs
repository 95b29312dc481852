//! `/ui`: the read-only live dashboard. The page is an askama shell that
//! holds no data; plain JavaScript modules and CSS from the embedded web
//! tree ([`crate::assets`], `web/ui/` importing `web/shared/`) ask the
//! `/v1` API with a token the user pastes (kept in `sessionStorage` only)
//! and follow `/v1/stream` with `fetch`. Agent text is rendered as Markdown
//! in the browser by the vendored `marked` and sanitised by the vendored
//! DOMPurify, the same renderer the MCP App embeds. No build step, no CDN:
//! it works on a LAN with no internet. Off with
//! `CHATROOM_ENABLE_UI=off`; hidden from the public side with
//! `CHATROOM_CONSOLE_LAN_ONLY` (both `404`).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Redirect, Response};
use axum::routing::get;

use super::shared;
use crate::assets::UI;
use crate::error::http_error;
use crate::state::AppState;

/// The Content-Security-Policy of every `/ui` answer: only this origin's
/// own script (ES modules included: `'self'` covers them and their
/// imports), style and API; no inline code; no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard routes; none at all while `CHATROOM_ENABLE_UI` is off.
pub fn routes(state: AppState) -> Router<AppState> {
    if !state.config.enable_ui {
        return Router::new();
    }
    let router = Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }));
    shared::serve(router, UI).route_layer(middleware::from_fn_with_state(state, guard))
}

/// The page shell.
#[derive(Template, WebTemplate)]
#[template(path = "ui.html")]
struct Page;

async fn page() -> Page {
    Page
}

/// `404` from the public side while the console is LAN-only; security
/// headers on everything else.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if super::console_hidden(&state.config, req.headers()) {
        return http_error(StatusCode::NOT_FOUND, "not_found", "not found");
    }
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            header::HeaderName::from_static("permissions-policy"),
            "camera=(), microphone=(), geolocation=()",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
