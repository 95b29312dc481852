//! The storage port of webhooks out, inbound URLs and stuck-task marks
//! (SPEC §7a): one area of the [`Store`](crate::domain::store::Store),
//! which requires it. The rules are in [`webhooks`](crate::domain::webhooks)
//! and [`stuck`](crate::domain::stuck); the stores write what they decided.

use async_trait::async_trait;
use serde::Serialize;

use crate::domain::model::{Event, Record};
use crate::error::Result;

/// A webhook as stored: its target and its delivery state.
#[derive(Debug, Clone, Serialize)]
pub struct Webhook {
    pub id: i64,
    pub room: String,
    pub url: String,
    /// `standard`, `ntfy`, `discord`, `slack` or `homeassistant`.
    pub format: String,
    /// The kinds delivered (see [`webhooks::wants`](crate::domain::webhooks::wants)).
    pub events: Vec<String>,
    /// The signing secret (`whsec_…`) of a `standard` webhook; never shown
    /// after it is made, never logged.
    #[serde(skip)]
    pub secret: Option<String>,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    /// Where its delivery stands.
    #[serde(flatten)]
    pub delivery: Progress,
}

/// A webhook to store.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub room: String,
    pub url: String,
    pub format: String,
    pub events: Vec<String>,
    pub secret: Option<String>,
}

/// A webhook's delivery state: as stored (in [`Webhook`]), and as a
/// worker writes it back when it lets go of one
/// ([`WebhookStore::save_webhook`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// The last event delivered or passed over.
    pub cursor: i64,
    /// Attempts at the event after `cursor` so far.
    pub attempts: i64,
    /// No attempt before this time.
    #[serde(skip)]
    pub next_ts: i64,
    /// When the event after `cursor` first failed.
    #[serde(skip)]
    pub first_fail_ts: Option<i64>,
    /// Failures in a row (any event); at the threshold it pauses.
    pub failures: i64,
    pub paused: bool,
    /// Events delivered: so far, as stored; by this lease, as written back
    /// (added to the count).
    pub delivered: i64,
    /// The last attempt's time and outcome (`200`, `timeout`, …).
    #[serde(with = "crate::clock::ts_opt")]
    pub last_ts: Option<i64>,
    pub last_status: Option<String>,
}

/// An inbound URL as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Inbound {
    pub id: i64,
    /// The URL's last part: `/v1/inbound/{key}`.
    pub key: String,
    pub room: String,
    pub agent: String,
    /// Kept for the HMAC checks, which need it; never shown again, never logged.
    #[serde(skip)]
    pub secret: String,
    #[serde(skip)]
    pub secret_hash: String,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub last_used_ts: Option<i64>,
}

/// A worker's hold on the webhooks it claims: `owner` delivers them from
/// `now` until `until`, when the lease runs out.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub owner: &'a str,
    pub now: i64,
    pub until: i64,
}

/// A task `in_progress` whose last activity lies before a cutoff.
#[derive(Debug, Clone)]
pub struct StuckTask {
    pub room: String,
    pub task_id: i64,
    pub title: String,
    pub holder: Option<String>,
    /// The latest of its update, its notes and its lease renewal.
    pub activity_ts: i64,
}

#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Stores a webhook whose queue starts after the room's latest event.
    async fn insert_webhook(&self, hook: &NewWebhook, now: i64) -> Result<Webhook>;
    async fn list_webhooks(&self) -> Result<Vec<Webhook>>;
    async fn delete_webhook(&self, id: i64) -> Result<bool>;
    /// Un-pauses a webhook (its failures start again from zero).
    async fn resume_webhook(&self, id: i64) -> Result<bool>;
    /// Takes `lease` on up to `limit` webhooks with work: not paused, due by
    /// its `now`, not leased by another, with an event of their room after
    /// their cursor.
    async fn claim_webhooks(&self, lease: Lease<'_>, limit: i64) -> Result<Vec<Webhook>>;
    /// Writes `progress` back and ends `owner`'s lease; `false` when the
    /// lease was lost (or the webhook removed) meanwhile.
    async fn save_webhook(&self, id: i64, owner: &str, progress: &Progress) -> Result<bool>;

    async fn insert_inbound(&self, inbound: &Inbound) -> Result<i64>;
    async fn inbound_by_key(&self, key: &str) -> Result<Option<Inbound>>;
    async fn list_inbound(&self) -> Result<Vec<Inbound>>;
    async fn delete_inbound(&self, key: &str) -> Result<bool>;
    async fn touch_inbound(&self, id: i64, now: i64) -> Result<()>;

    /// Tasks `in_progress` whose last activity lies before `before` and
    /// that have no `task_stuck` mark for that activity, at most `limit`.
    async fn stuck_tasks(&self, before: i64, limit: i64) -> Result<Vec<StuckTask>>;
    /// In one transaction: marks `task` stuck as of its `activity_ts` and
    /// writes `record`'s event; `None` (nothing written) when it was marked
    /// for that activity already (another replica was first).
    async fn record_stuck(&self, task: &StuckTask, record: Record) -> Result<Option<Event>>;
}
