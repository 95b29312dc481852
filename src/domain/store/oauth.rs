//! The OAuth area of the storage port (SPEC §2a): clients, connect codes,
//! grants, authorization codes and tokens, every secret by its SHA-256 (see
//! `domain::oauth`).

use async_trait::async_trait;

use crate::domain::model::*;
use crate::error::Result;

/// A client's approval of a connect code, as [`OAuthStore::oauth_approve`]
/// writes it.
#[derive(Debug, Clone, Copy)]
pub struct ConnectApproval<'a> {
    /// The SHA-256 of the connect code spent.
    pub connect_hash: &'a str,
    pub client_id: &'a str,
    pub client_name: &'a str,
    /// The authorization code stored for the new grant.
    pub code: &'a NewAuthCode,
    pub now: i64,
}

/// How many registered clients the store keeps: unused ones created before
/// `unused_before` are forgotten first, and once `max` are stored the
/// oldest unused ones make room for a new one.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimit {
    pub max: i64,
    pub unused_before: i64,
}

impl ClientLimit {
    /// How many unused clients must be forgotten beside `count` stored
    /// ones for one more to fit (`0`: it fits).
    pub fn over(self, count: i64) -> i64 {
        (count - self.max + 1).max(0)
    }
}

/// OAuth clients, connect codes, grants, authorization codes and tokens.
#[async_trait]
pub trait OAuthStore: Send + Sync {
    /// In one transaction: makes room for `client` as `limit` says and
    /// stores it. `false` (nothing stored) when the store is full of
    /// clients that were used.
    async fn oauth_insert_client(&self, client: &OAuthClient, limit: ClientLimit) -> Result<bool>;
    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>>;
    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()>;
    /// In one transaction: spends the unused, unexpired connect code with
    /// `connect_hash`, creates the grant it names for the client, stores
    /// `code` for that grant and marks the client used. `None` (nothing
    /// changed) when no such connect code is left.
    async fn oauth_approve(&self, approval: ConnectApproval<'_>) -> Result<Option<i64>>;
    /// Spends the authorization code with `hash` (or finds it spent).
    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake>;
    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()>;
    /// The access token with `hash` and its grant.
    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>>;
    /// The grant whose live refresh token, or the one it replaced, has `hash`.
    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>>;
    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>>;
    /// In one transaction, if the grant is not revoked and its live refresh
    /// token is still `old_hash`: makes `new_hash` the live one (the old one
    /// becomes its predecessor, rotated at `now`) and stores the access
    /// token. `false` (nothing changed) otherwise.
    async fn oauth_rotate_refresh(&self, rotation: &Rotation) -> Result<bool>;
    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool>;
    /// Revokes every grant of `agent`; returns how many.
    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>>;
    /// Deletes grants revoked before `revoked_before` (with their tokens).
    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64>;
    /// The server key `name`, stored as `fresh` if there was none yet (every
    /// replica gets the same one).
    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String>;
    /// Forgets what has expired as of `now`: unused registrations after an
    /// hour, spent or expired codes and tokens, grants run out; by index,
    /// in small batches, each its own short write.
    async fn oauth_prune(&self, now: i64) -> Result<u64>;
}
