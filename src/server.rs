//! `launch(config, listener, shutdown)`: wires the state, serves every route
//! behind its guards (the layers of [`auth::layers`](crate::auth::layers)
//! and the body guard of [`auth::body`](crate::auth::body)), runs the [`Background`] work, and drains when
//! `shutdown` is cancelled.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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
use crate::auth::budget::address_group;
use crate::auth::layers::{host_guard, origin_guard, require_token};
use crate::background::Background;
use crate::config::Config;

use crate::state::{AppState, state};

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
    let (state, audit_rx) = state(config, shutdown.clone(), clock).await?;
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
    // Where it really listens (port 0 picks one): webhooks never call it.
    let background = Background::start(&state, audit_rx, listener.local_addr()?)?;
    let app = router(state.clone());
    tracing::info!(
        listen = %listener.local_addr()?,
        database = %crate::config::redact_url(&state.config.database()),
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
        let admin = admin_command();
        tracing::warn!(
            "no tokens yet: create a room and mint one, e.g. `{admin} add-room lobby` then \
             `{admin} add-token --agent alice --room lobby` (the token is printed once)"
        );
    }
    serve(listener, app, &state.config, shutdown).await;
    background.drain(state).await;
    tracing::info!("chatroom stopped");
    Ok(())
}

/// The most a request head may take in hyper's read buffer: a head (or
/// the part of one sent so far) past it gets `431` and its connection
/// closes, so a client sending endless headers costs at most this much.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// Accepts connections until `shutdown` is cancelled, then waits for the open
/// ones to finish. This is `axum::serve` with what it has no knob for: a
/// client must send a request's head within `header_read_timeout` and
/// within [`MAX_HEAD_BYTES`], or its connection is closed, so a slow or
/// endless head cannot hold memory; and one address holds at most
/// `CHATROOM_MAX_CONNECTIONS_PER_IP` connections ([`Connections`]). Bodies
/// are bounded by [`body_guard`]; responses (long-polls, SSE) are not
/// bounded at all.
async fn serve(listener: TcpListener, app: Router, config: &Config, shutdown: CancellationToken) {
    let connections = Arc::new(Connections::new(config));
    let header_timeout = config.header_read_timeout;
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
        // Over its address's cap the connection is closed unread: answering
        // would mean reading its head, which is what the cap spares.
        let Some(place) = connections.open(peer.ip()) else {
            drop(stream);
            continue;
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
                .max_buf_size(MAX_HEAD_BYTES)
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
            drop(place);
            drop(open);
        });
    }
    drop(listener);
    drop(open_rx);
    open_tx.closed().await;
}

/// The open connections per direct peer address (an IPv6 one by its /64).
/// Behind a proxy every client shares the proxy's address, so with
/// `CHATROOM_TRUST_PROXY=on` the peers in `CHATROOM_TRUSTED_PROXIES` are
/// not counted here: their requests are counted by the forwarded address,
/// per request ([`body_guard`]).
struct Connections {
    /// `0`: no cap.
    max: usize,
    exempt: Vec<ipnet::IpNet>,
    open: Mutex<HashMap<IpAddr, usize>>,
    /// Connections closed over the cap since the last log line.
    refused: AtomicU64,
}

/// One open connection's place; given back when dropped.
struct Place {
    connections: Arc<Connections>,
    addr: IpAddr,
}

impl Connections {
    fn new(config: &Config) -> Connections {
        Connections {
            max: config.max_connections_per_ip,
            exempt: if config.trust_proxy {
                config.trusted_proxies.clone()
            } else {
                Vec::new()
            },
            open: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
        }
    }

    /// A place for one more connection from `peer`, or `None` when its
    /// address holds the cap already. Uncounted peers get a place too.
    fn open(self: &Arc<Self>, peer: IpAddr) -> Option<Option<Place>> {
        let peer = peer.to_canonical();
        if self.max == 0 || self.exempt.iter().any(|n| n.contains(&peer)) {
            return Some(None);
        }
        let addr = address_group(peer);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(addr).or_default();
        if *n >= self.max {
            // One line per thousand refusals: a flood must not flood the log.
            if self
                .refused
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(1000)
            {
                tracing::warn!(%addr, cap = self.max, "closed a connection over the address's cap (CHATROOM_MAX_CONNECTIONS_PER_IP)");
            }
            return None;
        }
        *n += 1;
        Some(Some(Place {
            connections: self.clone(),
            addr,
        }))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        crate::auth::release(&self.connections.open, &self.addr, |n| {
            *n -= 1;
            *n == 0
        });
    }
}

/// How the owner runs an admin command where this server runs: from a
/// clone through cargo, inside the container through compose, else the binary.
fn admin_command() -> &'static str {
    // `cargo run` sets it for the program it runs.
    if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
        if cfg!(debug_assertions) {
            "cargo run -- admin"
        } else {
            "cargo run --release -- admin"
        }
    } else if crate::config::in_container() {
        "docker compose exec chatroom chatroom admin"
    } else {
        "chatroom admin"
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

async fn healthz(State(state): State<AppState>) -> Response {
    let kind = if state.config.database().starts_with("sqlite://") {
        "sqlite"
    } else {
        "postgresql"
    };
    match state.core.store.health().await {
        Ok(()) => (
            StatusCode::OK,
            [(crate::config::DATABASE_HEADER, kind)],
            "ok",
        )
            .into_response(),
        Err(e) => {
            e.log_if_internal();
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}
