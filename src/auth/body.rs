//! How a request body is read, and what one client may hold while it is.
//!
//! The guard sits inside the Host, Origin and bearer checks of its route,
//! so on `/mcp`, `/v1` and the console a request without a valid token
//! costs its headers and never a byte of body memory. The sign-in routes
//! are public and have no token to check first; their requests, like every
//! request without a valid token, draw on a small budget of their own
//! ([`ANONYMOUS_BUDGET`](super::budget::ANONYMOUS_BUDGET)), so however many of them an anonymous caller
//! stalls, the agents' budget stays whole.
//!
//! Every request holds a [`Ticket`](super::budget::Ticket) until its answer is made: one of its
//! holder's places in flight (a token's, or an address's for a request
//! without a valid token: `CHATROOM_MAX_IN_FLIGHT`), and the body bytes it
//! holds in memory, charged as they arrive (never reserved from a declared
//! `Content-Length`), within its holder's share of the budget
//! ([`SHARE_OF`](super::budget::SHARE_OF)) and the budget itself. A body that stalls for
//! `body_idle_timeout` without a byte is cut; one that has not arrived
//! whole within `body_read_timeout` is too.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, OriginalUri, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::Caller;
use super::budget::{ANONYMOUS_BODY, Holder, Refusal};
use crate::error::{Error, http_error};
use crate::state::AppState;

/// The body limit of every route but `/mcp` and `POST /v1/files`: the
/// largest text field (a 20,000-character result) with JSON escaping.
pub const SMALL_BODY: usize = 256 * 1024;

/// The limit of the route `req` is for: the file cap in base64 on `/mcp`
/// and `POST /v1/files`, [`SMALL_BODY`] elsewhere.
fn limit_for(state: &AppState, req: &Request) -> usize {
    let path = path_of(req);
    let large = path == "/mcp"
        || path.starts_with("/mcp/")
        || (req.method() == Method::POST && path == "/v1/files");
    if large {
        state.body_limit()
    } else {
        SMALL_BODY.min(state.body_limit())
    }
}

fn path_of(req: &Request) -> &str {
    req.extensions()
        .get::<OriginalUri>()
        .map_or_else(|| req.uri().path(), |u| u.path())
}

/// Whether a request says it carries a body.
pub fn has_body(req: &Request) -> bool {
    let headers = req.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}

/// How reading a body went wrong.
enum Cut {
    /// An answer to give (`413`, `429`).
    Answer(Response),
    /// The client went away or broke the framing mid-body.
    Broken,
    /// No byte for `body_idle_timeout`.
    Stalled,
}

/// Bounds how a request body is read: a declared length over the route's
/// limit is refused (`413`) before a byte of it is read, a body that grows
/// past it is refused as soon as it does; a holder past its requests in
/// flight, its share, or a spent budget gets `429` with `Retry-After`; a
/// body that stalls (`body_idle_timeout` without a byte) or has not arrived
/// whole within `body_read_timeout` gets `408`. The buffer grows with the
/// bytes that arrive, never from the declared length, and is charged as it
/// grows; the request's place and bytes are held until the answer is made.
/// The handler then gets the body from memory. Only the request is bounded:
/// a long-poll or a stream may answer for as long as it likes.
pub async fn body_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let holder = match Caller::of(req.extensions()) {
        Some(caller) => Holder::Token(caller.token_id),
        None => {
            let peer = req
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0);
            Holder::address(super::client_addr(&state.config, req.headers(), peer))
        }
    };
    let limit = match holder {
        Holder::Token(_) => limit_for(&state, &req),
        Holder::Address(_) => limit_for(&state, &req).min(ANONYMOUS_BODY),
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return body_too_large(holder);
    }
    let mut ticket = match state.bodies.admit(holder) {
        Ok(t) => t,
        Err(why) => return refused(&state, holder, why),
    };
    let (parts, body) = req.into_parts();
    let idle = state.config.body_idle_timeout;
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::new();
        loop {
            let next = tokio::time::timeout(idle, futures::StreamExt::next(&mut stream));
            let Some(chunk) = next.await.map_err(|_| Cut::Stalled)? else {
                return Ok(buf);
            };
            let chunk = chunk.map_err(|_| Cut::Broken)?;
            let len = buf.len() + chunk.len();
            if len > limit {
                return Err(Cut::Answer(body_too_large(holder)));
            }
            if len > buf.capacity() {
                // Grow as `Vec` would (doubling), within the limit, and charge
                // the memory taken, not only the bytes in it.
                let cap = len.max(buf.capacity() * 2).min(limit);
                ticket
                    .cover(cap)
                    .map_err(|why| Cut::Answer(refused(&state, holder, why)))?;
                buf.reserve_exact(cap - buf.len());
            }
            buf.extend_from_slice(&chunk);
        }
    };
    let buf = match tokio::time::timeout(state.config.body_read_timeout, read).await {
        Ok(Ok(buf)) => buf,
        Ok(Err(Cut::Answer(refused))) => return refused,
        Ok(Err(Cut::Broken)) => {
            return close_after(http_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "the request body could not be read",
            ));
        }
        Ok(Err(Cut::Stalled)) => {
            tracing::info!(path = %parts.uri.path(), "a request body stalled; cut it");
            return close_after(http_error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                &format!(
                    "the request body stalled ({} s without a byte); send it at once",
                    idle.as_secs_f64()
                ),
            ));
        }
        Err(_) => {
            tracing::info!(path = %parts.uri.path(), "a request body took too long to arrive");
            return close_after(http_error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time; send it at once",
            ));
        }
    };
    let req = Request::from_parts(parts, axum::body::Body::from(buf));
    let reads_only = req.method() == Method::GET || req.method() == Method::HEAD;
    // `/mcp` decides per tool (see `mcp::Chatroom::call_tool`).
    if reads_only || path_of(&req).starts_with("/mcp") {
        let response = next.run(req).await;
        drop(ticket);
        return response;
    }
    // A request that may change something runs to its end even if its
    // client goes away meanwhile: a change once committed is always
    // announced and audited, never cut off between commit and event.
    tokio::spawn(
        async move {
            let response = next.run(req).await;
            drop(ticket);
            response
        }
        .in_current_span(),
    )
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

fn body_too_large(holder: Holder) -> Response {
    let message = match holder {
        Holder::Token(_) => {
            "the request body is over the cap of this route (on /mcp and POST /v1/files: \
             CHATROOM_MAX_FILE_BYTES, in base64 on /mcp, plus 64 KiB; 256 KiB elsewhere)"
        }
        Holder::Address(_) => {
            "the request body is over the cap of a request without a valid token (64 KiB)"
        }
    };
    close_after(Error::TooLarge(message.into()).into_response())
}

/// The `429` of a refused place or body, with `Retry-After: 1`.
fn refused(state: &AppState, holder: Holder, why: Refusal) -> Response {
    let who = match holder {
        Holder::Token(_) => "this token",
        Holder::Address(_) => "this address (requests without a valid token)",
    };
    let message = match why {
        Refusal::InFlight => format!(
            "{who} has {} requests in flight already (CHATROOM_MAX_IN_FLIGHT); retry in 1 s",
            state.config.max_in_flight
        ),
        Refusal::Share => format!(
            "the request bodies in flight of {who} hold its share of the server's budget; \
             retry in 1 s, or send fewer large bodies at once"
        ),
        Refusal::Spent => match holder {
            Holder::Token(_) => {
                "the server holds as many request bodies as it takes at once; retry in 1 s".into()
            }
            Holder::Address(_) => "the server holds as many requests without a valid token \
                                   as it takes at once; retry in 1 s"
                .into(),
        },
    };
    tracing::info!(
        ?why,
        anonymous = matches!(holder, Holder::Address(_)),
        "refused a request: {message}"
    );
    close_after(
        Error::RateLimited {
            message,
            retry_after_s: 1,
        }
        .into_response(),
    )
}

/// Marks an answer given before the request body was read whole: the rest of
/// the body is never read, so the connection cannot carry another request,
/// and the client must not put it back in its pool.
pub fn close_after(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}
