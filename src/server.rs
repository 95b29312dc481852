//! `launch(config, listener, shutdown)`: wires the state, serves every route
//! behind its guards (the layers of [`auth::layers`](crate::auth::layers)
//! and the body guard here), runs the [`Background`] work, and drains when
//! `shutdown` is cancelled.

use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::Instrument;

use crate::auth::layers::{host_guard, origin_guard, require_token};
use crate::background::Background;
use crate::config::Config;
use crate::error::{Error, http_error};

// Where handlers took the state from before it had a file of its own.
pub use crate::state::AppState;
use crate::state::state;

/// Serves on `listener` until `shutdown` is cancelled, then drains.
pub async fn launch(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (state, audit_rx) = state(config, shutdown.clone()).await?;
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

/// Bounds how a request body is read, on every route: a declared length over
/// the limit is refused (`413`) before a byte of it is read, a body that grows
/// past the limit is refused as soon as it does, and a body that has not
/// arrived whole within `body_read_timeout` gets `408`, so a slow client
/// cannot hold a request open by trickling its body. The handler then gets
/// the body from memory. Only the request is bounded: a long-poll or a stream
/// may answer for as long as it likes.
async fn body_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = state.body_limit();
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return body_too_large();
    }
    let (parts, body) = req.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            let chunk = chunk.map_err(|_| None)?;
            if buf.len() + chunk.len() > limit {
                return Err(Some(body_too_large()));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    match tokio::time::timeout(state.config.body_read_timeout, read).await {
        Ok(Ok(buf)) => {
            let req = Request::from_parts(parts, axum::body::Body::from(buf));
            let reads_only =
                req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD;
            // `/mcp` decides per tool (see `mcp::Chatroom::call_tool`).
            if reads_only || req.uri().path().starts_with("/mcp") {
                return next.run(req).await;
            }
            // A request that may change something runs to its end even if its
            // client goes away meanwhile: a change once committed is always
            // announced and audited, never cut off between commit and event.
            tokio::spawn(next.run(req).in_current_span())
                .await
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "a request failed to finish");
                    http_error(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        "the request failed; see the server log",
                    )
                })
        }
        Ok(Err(Some(too_large))) => too_large,
        // The client went away or broke the framing mid-body.
        Ok(Err(None)) => http_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "the request body could not be read",
        ),
        Err(_) => {
            tracing::info!(path = %parts.uri.path(), "a request body took too long to arrive");
            close_after(http_error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time; send it at once",
            ))
        }
    }
}

fn body_too_large() -> Response {
    close_after(
        Error::TooLarge(
            "the request body is over the limit (CHATROOM_MAX_FILE_BYTES, base64 included)".into(),
        )
        .into_response(),
    )
}

/// Marks an answer given before the request body was read whole: the rest of
/// the body is never read, so the connection cannot carry another request,
/// and the client must not put it back in its pool.
fn close_after(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

/// Hides the password of a database URL.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Every route, behind the Host check.
pub fn router(state: AppState) -> Router {
    let mcp = ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(state.clone(), origin_guard))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .layer(middleware::from_fn(crate::mcp::map_transport_errors))
        .service(crate::mcp::service(state.clone()));
    Router::new()
        .route("/healthz", get(healthz))
        .nest_service("/mcp", mcp)
        .merge(crate::http::routes(state.clone()))
        .layer(middleware::from_fn_with_state(state.clone(), crate::http::oauth::hint_unauthorized))
        .layer(middleware::from_fn_with_state(state.clone(), body_guard))
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

async fn healthz(State(state): State<AppState>) -> Response {
    match state.core.store.health().await {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(e) => {
            e.log_if_internal();
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}
