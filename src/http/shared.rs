//! Serving the embedded web tree ([`crate::assets`]): `/assets/*`, what
//! every page shares (the theme, light and dark after
//! `prefers-color-scheme`, the logo, the shared ES modules and the vendored
//! Markdown libraries), and the helper that serves any embedded file.
//!
//! The shared assets hold no data, so they are served to everyone, like
//! `/healthz`; the dashboard's and the console's own files are served by
//! their modules, behind their gates.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::assets::{Asset, SHARED};
use crate::state::AppState;

/// `/assets/*`.
pub fn routes() -> Router<AppState> {
    serve(Router::new(), SHARED)
}

/// `router` with a `GET` route for each of `assets`.
pub fn serve<S: Clone + Send + Sync + 'static>(
    mut router: Router<S>,
    assets: &'static [Asset],
) -> Router<S> {
    for a in assets {
        router = router.route(
            a.path,
            get(move || async move { asset(a.content_type, a.body) }),
        );
    }
    router
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

/// A rendered server page (these small pages, the sign-in pages) with the
/// headers every one of them gets: its content security policy, never
/// framed, never sniffed, no referrer, and how it may be cached.
pub fn page_response(
    status: StatusCode,
    csp: &'static str,
    cache_control: &'static str,
    html: String,
) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, csp),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, cache_control),
        ],
        html,
    )
        .into_response()
}
