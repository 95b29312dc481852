//! `launch(config, listener, shutdown)`: wires the state, serves every route
//! behind its guards (the layers of [`auth::layers`](crate::auth::layers)
//! and the body guard of [`auth::body`](crate::auth::body)), runs the [`Background`] work, and drains when
//! `shutdown` is cancelled.

use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;

use crate::auth::body::body_guard;
use crate::auth::layers::{host_guard, origin_guard, require_token};
use crate::background::Background;
use crate::config::Config;

// Where handlers took the state from before it had a file of its own.
pub use crate::state::AppState;
use crate::state::state;

/// Serves on `listener` until `shutdown` is cancelled, then drains.
pub async fn launch(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    launch_at(config, listener, shutdown, crate::clock::Clock::system()).await
}

/// [`launch`] with the domain deciding at `clock`'s time (tests move it by
/// hand instead of sleeping).
pub async fn launch_at(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
    clock: crate::clock::Clock,
) -> anyhow::Result<()> {
    let (mut state, audit_rx) = state(config, shutdown.clone()).await?;
    state.core.clock = clock;
    // Events committed by other replicas of the same database reach this
    // one's bus (no-op on SQLite, which one process serves).
    state
        .core
        .store
        .start_relay(state.core.bus.clone(), shutdown.clone())
        .await
        .map_err(|e| match e {
            crate::error::Error::Internal(cause) => cause.context("cannot start the event relay"),
            other => anyhow::anyhow!("cannot start the event relay: {other}"),
        })?;
    let background = Background::start(&state, audit_rx)?;
    let app = router(state.clone());
    tracing::info!(
        listen = %listener.local_addr()?,
        database = %redact_url(&state.config.database()),
        host_check = state.config.allowed_hosts.is_some(),
        "chatroom is serving"
    );
    if state
        .core
        .store
        .list_tokens()
        .await
        .map(|t| t.is_empty())
        .unwrap_or(false)
    {
        tracing::warn!(
            "no tokens yet: create a room and mint one, e.g. `chatroom admin add-room lobby` then \
             `chatroom admin add-token --agent alice --room lobby` (the token is printed once)"
        );
    }
    serve(listener, app, state.config.header_read_timeout, shutdown).await;
    background.drain(state).await;
    tracing::info!("chatroom stopped");
    Ok(())
}

/// Accepts connections until `shutdown` is cancelled, then waits for the open
/// ones to finish. This is `axum::serve` with one addition it has no knob
/// for: a client must send a request's head within `header_timeout`, or its
/// connection is closed, so a slow client cannot hold a connection open by
/// trickling headers. Bodies are bounded by [`body_guard`]; responses
/// (long-polls, SSE) are not bounded at all.
async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    // Each connection holds a receiver; `closed()` resolves when all are gone.
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo(peer));
                tower::ServiceExt::oneshot(app.clone(), req)
            });
        let shutdown = shutdown.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// Hides the password of a database URL.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Every route, behind the Host check; bodies are read only behind the
/// token check of their route ([`body_guard`]).
pub fn router(state: AppState) -> Router {
    // CORS only inside the Origin check: an Origin not in
    // CHATROOM_ALLOWED_ORIGINS still gets its 403, preflight included.
    let allowed = state.config.allowed_origins.clone();
    let cors = tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::AllowOrigin::predicate(
            move |origin, _| {
                origin
                    .to_str()
                    .is_ok_and(|o| crate::auth::hosts::origin_allowed(&allowed, o))
            },
        ))
        .allow_methods([http::Method::GET, http::Method::POST, http::Method::DELETE])
        .allow_headers([
            http::header::AUTHORIZATION,
            http::header::CONTENT_TYPE,
            http::header::ACCEPT,
            http::HeaderName::from_static("mcp-protocol-version"),
            http::HeaderName::from_static("mcp-session-id"),
            http::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            http::header::WWW_AUTHENTICATE,
            http::HeaderName::from_static("mcp-session-id"),
            http::HeaderName::from_static("mcp-protocol-version"),
        ])
        .max_age(Duration::from_secs(600));
    let mcp = ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::pages::mcp_in_a_browser,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), origin_guard))
        .layer(cors)
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn_with_state(state.clone(), body_guard))
        .layer(middleware::from_fn(crate::mcp::map_transport_errors))
        .service(crate::mcp::service(state.clone()));
    Router::new()
        .route("/healthz", get(healthz))
        .nest_service("/mcp", mcp)
        .merge(crate::http::routes(state.clone()))
        .layer(middleware::from_fn_with_state(state.clone(), crate::http::oauth::hint_unauthorized))
        .layer(middleware::from_fn_with_state(state.clone(), host_guard))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                |req: &Request| {
                    tracing::debug_span!("request", method = %req.method(), path = %req.uri().path())
                },
            ),
        )
        .with_state(state)
}

/// The header of `/healthz` that names the kind of database the server runs
/// on (`sqlite` or `postgresql`), so a load test can say what it measured.
/// Only the kind: never a path, a host or a URL.
pub const DATABASE_HEADER: &str = "x-chatroom-database";

async fn healthz(State(state): State<AppState>) -> Response {
    let kind = if state.config.database().starts_with("sqlite://") {
        "sqlite"
    } else {
        "postgresql"
    };
    match state.core.store.health().await {
        Ok(()) => (StatusCode::OK, [(DATABASE_HEADER, kind)], "ok").into_response(),
        Err(e) => {
            e.log_if_internal();
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}
