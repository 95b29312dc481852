//! `launch(config, listener, shutdown)`: wires the state, serves every route,
//! runs the background work (audit writer, presence, lease sweeper, pruning,
//! the MQTT bridge), and drains when `shutdown` is cancelled.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tracing::Instrument;

use crate::auth::hosts::{host_allowed, origin_allowed};
use crate::auth::ratelimit::RateLimiter;
use crate::auth::throttle::Throttle;
use crate::config::Config;
use crate::db::{self, AuditRow};
use crate::domain::{Core, Settings, tokens};
use crate::error::{Error, http_error};

/// Everything a request handler may need. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub core: Core,
    pub config: Arc<Config>,
    pub throttle: Arc<Throttle>,
    pub rate: Arc<RateLimiter>,
    /// What the MQTT bridge reports (all zero while it is off).
    pub mqtt: Arc<crate::mqtt::Stats>,
    audit_tx: mpsc::UnboundedSender<AuditRow>,
}

impl AppState {
    /// Queues an audit row for the batch writer (calls that wrote their own
    /// row in their transaction do not come here).
    pub fn audit(&self, row: AuditRow) {
        if self.audit_tx.send(row).is_err() {
            tracing::error!("audit writer is gone; an audit row was not written");
        }
    }

    /// The request body limit: the file cap in base64 plus room for the rest.
    pub fn body_limit(&self) -> usize {
        self.config.max_file_bytes.div_ceil(3) * 4 + 64 * 1024
    }

    /// The client's address: the peer, or with `CHATROOM_TRUST_PROXY` the
    /// address the proxy reports.
    pub fn client_addr(&self, headers: &HeaderMap, peer: Option<SocketAddr>) -> IpAddr {
        if self.config.trust_proxy {
            for name in ["cf-connecting-ip", "x-real-ip"] {
                if let Some(ip) = headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok())
                {
                    return ip;
                }
            }
            if let Some(ip) = headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.trim().parse().ok())
            {
                return ip;
            }
        }
        peer.map(|p| p.ip())
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }
}

/// Opens the database named by `config` and builds the shared state.
pub async fn state(
    config: Config,
    shutdown: CancellationToken,
) -> anyhow::Result<(AppState, mpsc::UnboundedReceiver<AuditRow>)> {
    let store = db::open(&config.database()).await?;
    let core = Core::new(
        store,
        Settings {
            max_wait: config.max_wait,
            max_file_bytes: config.max_file_bytes,
        },
        shutdown,
    );
    let (audit_tx, audit_rx) = mpsc::unbounded_channel();
    Ok((
        AppState {
            core,
            throttle: Arc::new(Throttle::new(
                config.auth_fail_limit,
                config.auth_fail_window,
            )),
            rate: Arc::new(RateLimiter::new(config.rate_limit_per_minute)),
            mqtt: Arc::new(crate::mqtt::Stats::default()),
            config: Arc::new(config),
            audit_tx,
        },
        audit_rx,
    ))
}

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
    let bridge = match &state.config.mqtt {
        Some(mqtt) => Some(crate::mqtt::spawn(
            mqtt.clone(),
            state.core.clone(),
            state.mqtt.clone(),
        )?),
        None => None,
    };
    let background = spawn_background(&state, audit_rx);
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
    // Requests are done: flush what is kept in memory.
    state.core.presence.flush(state.core.store.as_ref()).await;
    drop(state);
    let _ = tokio::time::timeout(Duration::from_secs(3), background).await;
    if let Some(bridge) = bridge {
        // The bridge says `offline` to the broker before the process goes.
        let _ = tokio::time::timeout(Duration::from_secs(3), bridge).await;
    }
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

/// `421` for a Host outside the allowlist (DNS-rebinding protection), on
/// every route but `/healthz`.
async fn host_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(rules) = &state.config.allowed_hosts
        && req.uri().path() != "/healthz"
    {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        if !host.as_deref().is_some_and(|h| host_allowed(rules, h)) {
            tracing::info!(host = ?host.as_deref().map(crate::domain::names::truncate_for_message), "refused a request for a Host outside the allowlist");
            return http_error(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                "this Host is not allowed; add it to CHATROOM_ALLOWED_HOSTS",
            );
        }
    }
    next.run(req).await
}

/// `403` for a browser Origin not allowed on `/mcp`.
async fn origin_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|o| origin_allowed(&state.config.allowed_origins, o));
        if !allowed {
            return http_error(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this browser Origin is not allowed; add it to CHATROOM_ALLOWED_ORIGINS",
            );
        }
    }
    next.run(req).await
}

/// The bearer token from `Authorization`, if well-formed.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Authenticates the bearer token and puts the [`Caller`](crate::auth::Caller)
/// into the request; `401` otherwise, `429` for an address past the
/// failed-credential limit (a valid token is always served).
pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let addr = state.client_addr(req.headers(), peer);
    let caller = match bearer(req.headers()) {
        Some(raw) => match tokens::verify(state.core.store.as_ref(), raw).await {
            Ok(c) => c,
            Err(e) => return e.into_response(),
        },
        None => None,
    };
    match caller {
        Some(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        None => {
            if let Some(retry) = state.throttle.blocked(addr) {
                return Error::RateLimited {
                    message: format!(
                        "too many failed credentials from this address; retry in {retry} s"
                    ),
                    retry_after_s: retry,
                }
                .into_response();
            }
            state.throttle.record_failure(addr);
            let path = req
                .extensions()
                .get::<axum::extract::OriginalUri>()
                .map(|u| u.path().to_owned())
                .unwrap_or_else(|| req.uri().path().to_owned());
            tracing::info!(%addr, %path, "refused a request without a valid token");
            Error::Unauthorized(
                "a valid bearer token is required (Authorization: Bearer cr_…)".into(),
            )
            .into_response()
        }
    }
}

/// Starts the background work; the handle ends once the audit queue is
/// drained after shutdown.
fn spawn_background(
    state: &AppState,
    mut audit_rx: mpsc::UnboundedReceiver<AuditRow>,
) -> tokio::task::JoinHandle<()> {
    let core = state.core.clone();
    let shutdown = core.shutdown.clone();
    // Presence: written in batches.
    {
        let core = core.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => core.presence.flush(core.store.as_ref()).await,
                }
            }
        });
    }
    // Leases: a lapsed one is applied within about a second.
    {
        let core = core.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => if let Err(e) = core.sweep_leases().await {
                        e.log_if_internal();
                    },
                }
            }
        });
    }
    // Retention and file expiry.
    if state.config.prune {
        let core = core.clone();
        let shutdown = shutdown.clone();
        let every = state.config.prune_interval;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => match crate::domain::oauth::prune_then(core.store.as_ref(), core.store.prune(crate::clock::now_ms()).await).await {
                        Ok(n) if n != Default::default() => tracing::info!(messages = n.messages, events = n.events, files = n.files, "pruned"),
                        Ok(_) => {}
                        Err(e) => e.log_if_internal(),
                    },
                }
            }
        });
    }
    // Audit rows of calls that wrote none themselves, in batches. A batch
    // waits a moment for the rest of its burst (a thousand waiters woken by
    // one post all answer at once), so the burst's rows take one transaction
    // written after its answers, not many written among them.
    tokio::spawn(async move {
        const BATCH: usize = 1024;
        let mut batch = Vec::with_capacity(BATCH);
        while audit_rx.recv_many(&mut batch, BATCH).await > 0 {
            let linger = tokio::time::sleep(Duration::from_millis(50));
            tokio::pin!(linger);
            while batch.len() < BATCH {
                let room = BATCH - batch.len();
                tokio::select! {
                    _ = &mut linger => break,
                    n = audit_rx.recv_many(&mut batch, room) => if n == 0 { break },
                }
            }
            let mut attempts = 0;
            while let Err(e) = core.store.insert_audit(&batch).await {
                attempts += 1;
                e.log_if_internal();
                if attempts >= 5 {
                    tracing::error!(rows = batch.len(), "giving up on a batch of audit rows");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200 * attempts)).await;
            }
            batch.clear();
        }
    })
}
