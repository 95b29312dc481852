//! The identity of a request, taken from its bearer token and nothing else,
//! and the one extractor every surface (MCP, REST, SSE, the console) takes
//! it with.

use axum::extract::FromRequestParts;
use axum::http::Extensions;
use axum::http::request::Parts;

use super::token::TokenHash;
use crate::domain::model::TokenRecord;
use crate::error::Error;

/// Who is calling: the agent and the grants of its token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: i64,
    /// The hash of the token, so an open stream can re-check it without
    /// reading the request's `Authorization` again.
    pub token_hash: TokenHash,
    pub agent: String,
    /// The token's default room.
    pub room: String,
    /// Extra rooms granted besides the default one.
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
    /// Which MCP tools the token sees and may call.
    pub profile: crate::domain::profile::Profile,
}

impl Caller {
    /// The caller of the token stored as `t`, whose hash is `token_hash`.
    pub fn new(t: TokenRecord, token_hash: TokenHash) -> Caller {
        Caller {
            token_id: t.id,
            token_hash,
            agent: t.agent,
            room: t.room,
            also_rooms: t.also_rooms,
            readonly: t.readonly,
            admin: t.admin,
            all_rooms: t.all_rooms,
            lead: t.lead,
            skills: t.skills,
            profile: t.profile,
        }
    }

    /// The caller the token layer ([`require_token`](super::layers::require_token))
    /// put into a request's extensions.
    pub fn of(extensions: &Extensions) -> Option<&Caller> {
        extensions.get::<Caller>()
    }

    /// Whether this token may act in `room` (existence is checked elsewhere).
    pub fn granted(&self, room: &str) -> bool {
        self.all_rooms || self.room == room || self.also_rooms.iter().any(|r| r == room)
    }

    /// Every room named by the token (the default first).
    pub fn rooms(&self) -> Vec<String> {
        let mut rooms = vec![self.room.clone()];
        rooms.extend(self.also_rooms.iter().filter(|r| **r != self.room).cloned());
        rooms
    }

    /// Whether the token may use whole-server admin functions.
    pub fn server_admin(&self) -> bool {
        self.admin && self.all_rooms
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
