//! How a request body is read, once the Host, Origin and bearer checks have
//! passed (the guard sits inside them, so a request without a valid token
//! costs its headers and never a byte of body memory): the limit of the
//! route, a deadline for the whole body, and a budget of body bytes in
//! flight across all requests.

use std::sync::Arc;

use axum::extract::{OriginalUri, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::error::{Error, http_error};
use crate::state::AppState;

/// The body limit of every route but `/mcp` and `POST /v1/files`: the
/// largest text field (a 20,000-character result) with JSON escaping.
pub const SMALL_BODY: usize = 256 * 1024;
/// The least the budget of body bytes in flight holds.
const MIN_BUDGET: usize = 32 * 1024 * 1024;

/// The body bytes all requests together may hold in memory at once: a
/// semaphore whose permits are bytes.
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
}

impl BodyBudget {
    /// A budget of sixteen of the largest bodies, and at least 32 MiB.
    pub fn for_limit(large: usize) -> BodyBudget {
        let total = large
            .saturating_mul(16)
            .clamp(MIN_BUDGET, Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total)),
        }
    }

    /// Grows `held` to cover `n` bytes, if the budget has them.
    fn cover(&self, held: &mut Option<OwnedSemaphorePermit>, n: usize) -> bool {
        let have = held.as_ref().map_or(0, |p| p.num_permits());
        if n <= have {
            return true;
        }
        let Ok(want) = u32::try_from(n - have) else {
            return false;
        };
        match self.bytes.clone().try_acquire_many_owned(want) {
            Ok(more) => {
                match held {
                    Some(p) => p.merge(more),
                    None => *held = Some(more),
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// The limit of the route `req` is for: the file cap in base64 on `/mcp`
/// and `POST /v1/files`, [`SMALL_BODY`] elsewhere.
fn limit_for(state: &AppState, req: &Request) -> usize {
    let path = req
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| req.uri().path(), |u| u.path());
    let large = path == "/mcp"
        || path.starts_with("/mcp/")
        || (req.method() == Method::POST && path == "/v1/files");
    if large {
        state.body_limit()
    } else {
        SMALL_BODY.min(state.body_limit())
    }
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

/// Bounds how a request body is read: a declared length over the route's
/// limit is refused (`413`) before a byte of it is read, a body that grows
/// past it is refused as soon as it does, a body that has not arrived whole
/// within `body_read_timeout` gets `408`, and a body the budget of bytes in
/// flight cannot hold gets `429` with `Retry-After`, so a slow client cannot
/// hold a request open by trickling its body and many cannot fill the
/// memory together. The buffer grows with the bytes that arrive, never from
/// the declared length, and its share of the budget is held until the
/// answer is made. The handler then gets the body from memory. Only the
/// request is bounded: a long-poll or a stream may answer for as long as it
/// likes.
pub async fn body_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = limit_for(&state, &req);
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return body_too_large();
    }
    let budget = &state.bodies;
    let mut held = None;
    // A declared length takes its share at once: a client stalling a byte
    // short holds the budget, never more memory than the budget.
    if let Some(n) = declared
        && !budget.cover(&mut held, n as usize)
    {
        return budget_spent();
    }
    let (parts, body) = req.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            let chunk = chunk.map_err(|_| None)?;
            let len = buf.len() + chunk.len();
            if len > limit {
                return Err(Some(body_too_large()));
            }
            if !budget.cover(&mut held, len) {
                return Err(Some(budget_spent()));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    let buf = match tokio::time::timeout(state.config.body_read_timeout, read).await {
        Ok(Ok(buf)) => buf,
        Ok(Err(Some(refused))) => return refused,
        // The client went away or broke the framing mid-body.
        Ok(Err(None)) => {
            return close_after(http_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "the request body could not be read",
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
    let path = req
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| req.uri().path().to_owned(), |u| u.path().to_owned());
    // `/mcp` decides per tool (see `mcp::Chatroom::call_tool`).
    if reads_only || path.starts_with("/mcp") {
        let response = next.run(req).await;
        drop(held);
        return response;
    }
    // A request that may change something runs to its end even if its
    // client goes away meanwhile: a change once committed is always
    // announced and audited, never cut off between commit and event.
    tokio::spawn(
        async move {
            let response = next.run(req).await;
            drop(held);
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

fn body_too_large() -> Response {
    close_after(
        Error::TooLarge(
            "the request body is over the cap of this route (on /mcp and POST /v1/files: \
             CHATROOM_MAX_FILE_BYTES, in base64 on /mcp, plus 64 KiB; 256 KiB elsewhere)"
                .into(),
        )
        .into_response(),
    )
}

fn budget_spent() -> Response {
    tracing::info!("refused a request body: the bodies in flight fill the budget");
    close_after(
        Error::RateLimited {
            message: "the server holds as many request bodies as it takes at once; retry in 1 s"
                .into(),
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
