//! The request extractors every HTTP surface shares: [`Api`] (the caller
//! and its `?room=`, run through admission), [`JsonBody`] (a JSON body,
//! whatever its `Content-Type`) and [`Params`] (a query string). Each
//! refuses with the project's error body, never axum's.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::auth::admit::RoomArg;
use crate::auth::{Caller, Meter, admit};
use crate::domain::Call;
use crate::error::{Error, Result};
use crate::present::Reply;
use crate::state::AppState;

/// What every `/v1` handler starts from: the caller the token layer
/// authenticated, and the `?room=` it asks for.
pub struct Api {
    pub caller: Caller,
    pub room: Option<String>,
}

#[derive(Deserialize)]
struct RoomParam {
    room: Option<String>,
}

impl FromRequestParts<AppState> for Api {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Api> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let Query(RoomParam { room }) = Query::try_from_uri(&parts.uri)
            .map_err(|e| Error::invalid(format!("bad query string: {}", e.body_text())))?;
        Ok(Api {
            caller,
            room: room.filter(|r| !r.trim().is_empty()),
        })
    }
}

impl Api {
    /// The room the call names, if any (the token's default room otherwise).
    pub fn room(&self) -> Option<&str> {
        self.room.as_deref()
    }

    /// Runs one call through `route` and [`admit`]: the per-token rate
    /// limit, the domain work in `f`, and the audit row when the domain
    /// wrote none.
    pub async fn run<T>(
        &self,
        state: &AppState,
        route: &'static str,
        task_id: Option<i64>,
        f: impl AsyncFnOnce(&Call) -> Result<T>,
    ) -> Result<T> {
        let call = Call::new(self.caller.clone(), route);
        // A sign of life, also for a call that names no room.
        state.core.seen(&self.caller);
        let room = RoomArg::of(self.room.as_deref()).recorded(&self.caller);
        admit(state, &call, Meter::Requests, room, task_id, async || {
            f(&call).await
        })
        .await
    }

    /// A result object for `room`, carrying `room` and `you_are` like the
    /// MCP tools' results.
    pub fn reply(&self, room: &str, body: Value) -> Value {
        Reply::new(&self.caller, room, body).into_value()
    }

    /// [`reply`](Self::reply) for results holding agent-written text.
    pub fn untrusted(&self, room: &str, body: Value) -> Value {
        Reply::new(&self.caller, room, body)
            .untrusted()
            .into_value()
    }
}

/// A JSON request body, read whatever the `Content-Type` says (so `curl -d`
/// works); a malformed one is `invalid_argument`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| Error::invalid(format!("the body is not the JSON this route takes: {e}")))
    }
}

/// A request body that could not be read: over the cap is `too_large`.
pub fn body_error(e: BytesRejection) -> Error {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        Error::TooLarge(
            "the request body is over the limit (CHATROOM_MAX_FILE_BYTES); nothing was stored"
                .into(),
        )
    } else {
        Error::invalid(format!("cannot read the request body: {}", e.body_text()))
    }
}

/// Query parameters; a malformed query string is `invalid_argument`.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self> {
        Query::try_from_uri(&parts.uri)
            .map(|Query(v)| Params(v))
            .map_err(|e| Error::invalid(format!("bad query string: {}", e.body_text())))
    }
}
