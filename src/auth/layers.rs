//! The guards in front of the routes, as axum middleware: the Host allowlist
//! (every route), the browser-Origin check (`/mcp`) and the bearer token
//! (`/mcp`, `/v1`, the console API), plus the client address they log and
//! throttle by.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::body::{close_after, has_body};
use super::hosts::{host_allowed, origin_allowed};
use crate::config::Config;

use crate::error::{Error, http_error};
use crate::state::AppState;

/// `421` for a Host outside the allowlist (DNS-rebinding protection), on
/// every route but `/healthz`.
pub async fn host_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
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
            return early(
                &req,
                http_error(
                    StatusCode::MISDIRECTED_REQUEST,
                    "misdirected_request",
                    &format!(
                        "the Host {:?} is not allowed: add it to CHATROOM_ALLOWED_HOSTS in the server's .env (or environment) and restart it, or use a name already listed there",
                        host.as_deref()
                            .map(crate::domain::names::truncate_for_message)
                            .unwrap_or_default()
                    ),
                ),
            );
        }
    }
    next.run(req).await
}

/// `403` for a browser Origin not allowed on `/mcp`.
pub async fn origin_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|o| origin_allowed(&state.config.allowed_origins, o));
        if !allowed {
            return early(
                &req,
                http_error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "this browser Origin is not allowed; add it to CHATROOM_ALLOWED_ORIGINS",
                ),
            );
        }
    }
    next.run(req).await
}

/// A refusal given before the body of `req` was read: with `Connection:
/// close` when there is a body, which is never read (see
/// [`close_after`]).
fn early(req: &Request, response: Response) -> Response {
    if has_body(req) {
        close_after(response)
    } else {
        response
    }
}

/// The bearer token from `Authorization`, if well-formed.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// What the `Authorization` header of a request held, as far as the
/// refusal of a request without a valid token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented {
    /// No `Authorization` header, or another scheme than `Bearer`.
    Missing,
    /// A bearer value that cannot be a token of this server.
    Malformed,
    /// A well-formed token the server does not accept (never issued,
    /// revoked, purged or expired: which one is not said).
    NotAccepted,
}

impl Presented {
    /// What the header of `headers` holds, when it holds no valid token.
    fn of(headers: &HeaderMap) -> Presented {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Presented::Missing;
        };
        let Some((scheme, token)) = value.to_str().ok().and_then(|v| v.split_once(' ')) else {
            return Presented::Malformed;
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Presented::Missing;
        }
        let token = token.trim();
        let shaped = (token.starts_with(crate::domain::oauth::ACCESS_PREFIX)
            || token.starts_with(crate::secret::PREFIX))
            && token.len() <= 200
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if shaped {
            Presented::NotAccepted
        } else {
            Presented::Malformed
        }
    }

    /// The `401` text: what is wrong and what to do, never whether a
    /// token once existed.
    pub fn message(self) -> &'static str {
        match self {
            Presented::Missing => {
                "this needs a bearer token: send Authorization: Bearer cr_… \
                 (the owner mints one with `chatroom admin add-token`)"
            }
            Presented::Malformed => {
                "the Authorization header does not hold a chatroom token: send \
                 Authorization: Bearer cr_… with the token as it was printed, nothing around it"
            }
            Presented::NotAccepted => {
                "this token is not accepted (it may be mistyped, revoked or expired); \
                 ask the server's owner for a new one"
            }
        }
    }
}

/// Authenticates the bearer token and puts the [`Caller`](super::Caller)
/// into the request, where the [`Caller`](super::Caller) extractor finds
/// it; `401` otherwise (saying whether the token was missing, malformed or
/// not accepted), `429` for an address past the failed-credential limit (a
/// valid token is always served).
pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let addr = client_addr(&state.config, req.headers(), peer);
    let caller = match bearer(req.headers()) {
        Some(raw) => match state.core.verify(raw).await {
            Ok(c) => c,
            Err(e) => return early(&req, e.into_response()),
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
                return early(
                    &req,
                    Error::RateLimited {
                        message: format!(
                            "too many failed credentials from this address; retry in {retry} s"
                        ),
                        retry_after_s: retry,
                    }
                    .into_response(),
                );
            }
            state.throttle.record_failure(addr);
            let path = req
                .extensions()
                .get::<axum::extract::OriginalUri>()
                .map(|u| u.path().to_owned())
                .unwrap_or_else(|| req.uri().path().to_owned());
            let presented = Presented::of(req.headers());
            tracing::info!(%addr, %path, ?presented, "refused a request without a valid token");
            early(
                &req,
                Error::Unauthorized(presented.message().into()).into_response(),
            )
        }
    }
}

/// The client's address: the direct peer, or, with `CHATROOM_TRUST_PROXY`
/// and a peer in `CHATROOM_TRUSTED_PROXIES`, the address that proxy reports
/// (`CF-Connecting-IP`, `X-Real-IP`, else the right-most `X-Forwarded-For`
/// entry that is not itself a trusted proxy: the entries left of it are
/// whatever the client chose to send). A client reaching the port directly
/// cannot forge its address this way.
pub fn client_addr(config: &Config, headers: &HeaderMap, peer: Option<SocketAddr>) -> IpAddr {
    let direct = peer
        .map(|p| p.ip().to_canonical())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let trusted = |ip: &IpAddr| config.trusted_proxies.iter().any(|n| n.contains(ip));
    if !config.trust_proxy || !trusted(&direct) {
        return direct;
    }
    let parse = |v: &str| v.trim().parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    for name in ["cf-connecting-ip", "x-real-ip"] {
        if let Some(ip) = headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(parse)
        {
            return ip;
        }
    }
    // Every X-Forwarded-For line in order, as one list; walk it from the
    // right past the trusted proxies.
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    let mut client = direct;
    for entry in forwarded.iter().rev() {
        match parse(entry) {
            Some(ip) if trusted(&ip) => client = ip,
            Some(ip) => return ip,
            // Garbage from here on left: the last trusted hop is as far as
            // the chain can be believed.
            None => break,
        }
    }
    client
}
