//! `/ui`: the read-only live dashboard. The page is an askama shell that
//! holds no data; plain JavaScript and CSS, embedded in the binary, ask the
//! `/v1` API with a token the user pastes (kept in `sessionStorage` only)
//! and follow `/v1/stream` with `fetch`. No build step, no CDN: it works on
//! a LAN with no internet. Off with `CHATROOM_ENABLE_UI=off`; hidden from the
//! public side with `CHATROOM_CONSOLE_LAN_ONLY` (both `404`).

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::error::http_error;
use crate::server::AppState;

const APP_JS: &str = include_str!("../../templates/ui/app.js");
const APP_CSS: &str = include_str!("../../templates/ui/app.css");
const FAVICON: &str = include_str!("../../templates/ui/favicon.svg");

/// The Content-Security-Policy of every `/ui` answer: only this origin's
/// own script, style and API; no inline code; no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard routes; none at all while `CHATROOM_ENABLE_UI` is off.
pub fn routes(state: AppState) -> Router<AppState> {
    if !state.config.enable_ui {
        return Router::new();
    }
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .route("/ui/app.js", get(app_js))
        .route("/ui/app.css", get(app_css))
        .route("/ui/favicon.svg", get(favicon))
        .route_layer(middleware::from_fn_with_state(state, guard))
}

/// The page shell.
#[derive(Template, WebTemplate)]
#[template(path = "ui.html")]
struct Page {
    version: &'static str,
}

async fn page() -> Page {
    Page {
        version: env!("CARGO_PKG_VERSION"),
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn favicon() -> Response {
    asset("image/svg+xml", FAVICON)
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
