//! The tokens area of the storage port: tokens, room membership, presence
//! and the state an agent's hooks report.

use async_trait::async_trait;

use crate::domain::model::*;
use crate::domain::presence::Switch;
use crate::error::Result;

/// Tokens, membership, presence and agent state.
#[async_trait]
pub trait TokenStore: Send + Sync {
    async fn insert_token(&self, token: &NewToken, now: i64) -> Result<i64>;
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    /// Revokes the token with `id`; `false` when there is none or it was
    /// revoked already.
    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool>;
    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64>;
    async fn members(&self, room: &str) -> Result<Vec<Member>>;
    /// The agents (lowercase, each once) of live tokens that can read
    /// `room`: its own tokens, those naming it among their rooms, and
    /// all-rooms tokens. Only they are indexed as mentioned there.
    async fn room_agents(&self, room: &str) -> Result<Vec<String>>;
    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()>;
    /// Records `(token id, ts)` as each token's last use (a later one kept).
    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()>;
    /// Sets `agent`'s `switch` in `room` (the state its hooks report, or
    /// its attention), set at `ts`; its other switch is left as it is.
    async fn save_switch(&self, room: &str, agent: &str, switch: Switch, ts: i64) -> Result<()>;
    /// Writes a batch of marks: a hook seen keeps the latest time; a push
    /// mark is set as given (`0` clears it).
    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()>;
    /// Every agent of `room` with a presence row, by name.
    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>>;
}
