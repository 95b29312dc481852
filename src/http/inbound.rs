//! `POST /v1/inbound/{key}` (SPEC §7a): an automation posts a message or
//! opens a task in a room, as the agent its inbound URL was made for.
//!
//! The sender proves itself with the URL's secret: as a bearer token, as a
//! Standard Webhooks signature, or as GitHub signs (`X-Hub-Signature-256`).
//! A bad or missing proof is `401` and changes nothing (and counts against
//! the address like a bad token). The body is read only up to
//! [`INBOUND_MAX_BYTES`]; then the call goes through the domain like any
//! agent's: the same limits, the same rate limit, the writer shown as an
//! agent (its text labelled untrusted wherever it is read).

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Caller;
use crate::auth::admit::{Meter, admit};
use crate::auth::layers::client_addr;
use crate::domain::Call;
use crate::domain::board::CreateTask;
use crate::domain::model::Grant;
use crate::domain::store::webhooks::Inbound;
use crate::domain::webhooks::{Ask, INBOUND_MAX_BYTES, InboundHeaders, parse_ask, verify};
use crate::error::{Error, Result};
use crate::secret::TokenHash;
use crate::state::AppState;

/// The inbound route table, served and described in the OpenAPI document
/// ([`openapi`](super::openapi)) from this one list.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(inbound))
}

pub fn routes() -> Router<AppState> {
    api().split_for_parts().0
}

/// `POST /v1/inbound/{key}`: an automation posts a message (`{"message"}`)
/// or opens a task (`{"task": {…}}`) as the URL's agent, proven by the
/// URL's secret as a bearer token, a Standard Webhooks signature, or
/// GitHub's `X-Hub-Signature-256`.
#[utoipa::path(
    post,
    path = "/v1/inbound/{key}",
    tag = "inbound",
    params(("key" = String, Path, description = "The inbound URL's key (`in_…`)")),
    request_body(content = Object, content_type = "application/json", description = "`{\"message\": …}`, `{\"task\": {…}}`, or a GitHub event"),
    responses((status = 200, description = "What was posted or opened", body = Object)),
)]
async fn inbound(
    State(s): State<AppState>,
    Path(key): Path<String>,
    req: Request,
) -> Result<Response> {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let addr = client_addr(&s.config, req.headers(), peer);
    if let Some(retry) = s.throttle.blocked(addr) {
        return Err(Error::RateLimited {
            message: format!("too many failed credentials from this address; retry in {retry} s"),
            retry_after_s: retry,
        });
    }
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let body = axum::body::to_bytes(body, INBOUND_MAX_BYTES)
        .await
        .map_err(|_| {
            Error::TooLarge(format!(
                "an inbound body has at most {INBOUND_MAX_BYTES} bytes"
            ))
        })?;
    let found = match crate::domain::webhooks::valid_inbound_key(&key) {
        true => s.core.store.inbound_by_key(&key).await?,
        false => None,
    };
    let now_s = crate::clock::now_ms() / 1000;
    let Some((hook, _proof)) =
        found.and_then(|h| verify(&h, &headers, &body, now_s).map(|p| (h, p)))
    else {
        s.throttle.record_failure(addr);
        tracing::info!(%addr, "refused an inbound request without a valid secret or signature");
        return Err(Error::Unauthorized(
            "this inbound URL needs its secret: Authorization: Bearer <secret>, a Standard \
             Webhooks signature, or GitHub's X-Hub-Signature-256"
                .into(),
        ));
    };
    let ask = parse_ask(&body, headers.header("x-github-event"))?;
    let call = Call::new(caller(&hook), "v1:inbound");
    let room = hook.room.clone();
    let answer = admit(
        &s,
        &call,
        Meter::Requests,
        Some(room.clone()),
        None,
        async || match ask {
            Ask::Message(text) => {
                let posted = s.core.post_message(&call, Some(&room), &text, None).await?;
                Ok(json!({"room": room, "message_id": posted.message.id}))
            }
            Ask::Task {
                title,
                body,
                priority,
            } => {
                let req = CreateTask {
                    title,
                    body,
                    priority,
                    ..CreateTask::default()
                };
                let task = s.core.create_task(&call, Some(&room), req).await?;
                Ok(json!({"room": room, "task_id": task.id}))
            }
            Ask::Nothing => Ok(json!({"room": room, "ignored": true})),
        },
    )
    .await?;
    if let Err(e) = s
        .core
        .store
        .touch_inbound(hook.id, s.core.clock.now_ms())
        .await
    {
        e.log_if_internal();
    }
    let status = if answer.get("ignored").is_some() {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(answer)).into_response())
}

/// The caller an inbound URL acts as: its agent, in its room only, a plain
/// writer (never a lead or an admin). Its rate limit is its own: a
/// negative id below every OAuth grant's (those are the grant's id negated).
fn caller(hook: &Inbound) -> Caller {
    Caller {
        token_id: INBOUND_IDS - hook.id,
        token_hash: TokenHash::of(&hook.secret_hash),
        grant: Grant {
            agent: hook.agent.clone(),
            room: hook.room.clone(),
            ..Grant::default()
        },
    }
}

/// Where inbound URLs' caller ids start (downwards), clear of OAuth grants.
const INBOUND_IDS: i64 = -(1 << 40);

impl InboundHeaders for HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}
