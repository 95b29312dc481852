//! The small pages that tell a person where they are: the bare address
//! (`/`), what `/mcp` is for whoever opens it in a browser, and the
//! console's page while it is off.
//! Each is an askama template on the one base (`templates/pages/`), with
//! the shared look and nothing else.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// Only our stylesheet and logo; no script, no form, never framed.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; \
form-action 'none'; frame-ancestors 'none'";

fn html(status: StatusCode, page: askama::Result<String>) -> Response {
    let Ok(body) = page else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    super::shared::page_response(status, CSP, "no-cache", body)
}

#[derive(Template)]
#[template(path = "pages/mcp.html")]
struct McpPage {
    /// The dashboard is on and shown to this request.
    ui: bool,
    oauth: bool,
    /// This endpoint's URL as the request reached it.
    url: String,
}

/// In front of `/mcp`: a browser that opens it (a `GET` asking for
/// `text/html`, without a token) gets a page saying what this address is
/// and where to go. Every other request, an API client's, passes on to the
/// `/mcp` layers untouched, so its `401`/`405` answers stay as they are.
pub async fn mcp_in_a_browser(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let h = req.headers();
    let browser = req.method() == Method::GET
        && !h.contains_key(header::AUTHORIZATION)
        && h.get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.split(',').any(|t| t.trim().starts_with("text/html")));
    if !browser {
        return next.run(req).await;
    }
    let base = super::oauth::base_url(
        &state.config,
        h.get(header::HOST).and_then(|v| v.to_str().ok()),
        super::from_public_side(&state.config, h),
    );
    let page = McpPage {
        ui: state.config.enable_ui && !super::console_hidden(&state.config, h),
        oauth: state.config.oauth,
        url: format!("{base}/mcp"),
    };
    html(StatusCode::OK, page.render())
}

#[derive(Template)]
#[template(path = "pages/console_off.html")]
struct ConsoleOff;

/// `GET /admin` while `CHATROOM_ADMIN_API` is off: `404`, with a page that
/// says how to turn the console on.
pub fn console_off() -> Response {
    html(StatusCode::NOT_FOUND, ConsoleOff.render())
}

#[derive(Template)]
#[template(path = "pages/root.html")]
struct Root {
    ui: bool,
}

/// `GET /`: what this server is and where to go (the dashboard only when
/// it is on and shown to this request, `ui`).
pub fn root(ui: bool) -> Response {
    html(StatusCode::OK, Root { ui }.render())
}
