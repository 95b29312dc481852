//! The port: the one storage contract the domain writes through, split by
//! area (one trait and one file each). The backends in `db/` implement it;
//! the domain never sees which one runs.
//!
//! A method called on an `Arc<dyn Store>` (or a generic store) needs its area
//! trait in scope: `use crate::domain::store::prelude::*;`.

pub mod audit;
pub mod board;
pub mod chat;
pub mod copy;
pub mod events;
pub mod files;
pub mod oauth;
pub mod rooms;
pub mod tokens;
pub mod webhooks;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::domain::EventBus;
use crate::error::Result;

pub use audit::AuditStore;
pub use board::BoardStore;
pub use chat::{ChatStore, NewMessage};
pub use copy::CopyStore;
pub use events::{CursorRead, EventStore};
pub use files::FileStore;
pub use oauth::OAuthStore;
pub use rooms::RoomStore;
pub use tokens::TokenStore;
pub use webhooks::WebhookStore;

/// A page of rows after `since_id` (an id, or a mention's place), at most
/// `limit` of them.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub since_id: i64,
    pub limit: i64,
}

/// Every trait of the port, for the callers of store methods.
pub mod prelude {
    pub use super::{
        AuditStore, BoardStore, ChatStore, CopyStore, EventStore, FileStore, OAuthStore, RoomStore,
        Store, TokenStore, WebhookStore,
    };
}

/// The storage contract: every area, and what concerns the whole database
/// (health, backups, the relay between replicas). Both backends pass the
/// same tests (`tests/store_contract.rs`).
///
/// A write takes what the domain decided: the main row, and a
/// [`Record`](crate::domain::model::Record) of the events, mentions and
/// audit row that go with it, stamped with `now`. The store writes both in
/// one transaction and decides nothing itself.
#[async_trait]
pub trait Store:
    RoomStore
    + TokenStore
    + ChatStore
    + EventStore
    + BoardStore
    + FileStore
    + AuditStore
    + OAuthStore
    + CopyStore
    + WebhookStore
    + Send
    + Sync
    + 'static
{
    /// `Ok` when the database answers.
    async fn health(&self) -> Result<()>;

    // Maintenance
    /// Writes one consistent copy of the whole database to `path`, a file
    /// that must not exist yet, while writers keep going. A backend without
    /// a built-in copy refuses and names the tool to use instead.
    async fn backup(&self, path: &str) -> Result<()> {
        let _ = path;
        Err(crate::error::Error::invalid(
            "this database has no built-in backup: use its own tools (pg_dump for PostgreSQL)",
        ))
    }

    // Cross-replica wake-ups
    /// Starts relaying events committed by other replicas of the same
    /// database to `bus`, until `shutdown`. A backend that only one process
    /// can serve (SQLite) has nothing to relay.
    async fn start_relay(&self, _bus: EventBus, _shutdown: CancellationToken) -> Result<()> {
        Ok(())
    }
}
