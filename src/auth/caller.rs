//! The one extractor every surface (MCP, REST, SSE, the console) takes the
//! identity of a request with: the domain's [`Caller`], taken from its
//! bearer token and nothing else.

use axum::extract::FromRequestParts;
use axum::http::Extensions;
use axum::http::request::Parts;

pub use crate::domain::model::Caller;
use crate::error::Error;

impl Caller {
    /// The caller the token layer ([`require_token`](super::layers::require_token))
    /// put into a request's extensions.
    pub fn of(extensions: &Extensions) -> Option<&Caller> {
        extensions.get::<Caller>()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Caller, Error> {
        Caller::of(&parts.extensions).cloned().ok_or_else(|| {
            // The token layer guarantees a caller; reaching here is a wiring bug.
            Error::internal(anyhow::anyhow!("a route is missing the token layer"))
        })
    }
}
