//! The events area of the storage port: a room's events and each agent's
//! cursor in them.

use async_trait::async_trait;

use crate::domain::model::*;
use crate::error::Result;

/// A read of the events after an agent's cursor in a room.
#[derive(Debug, Clone, Copy)]
pub struct CursorRead<'a> {
    pub room: &'a str,
    pub agent: &'a str,
    /// The most events the page shows.
    pub limit: i64,
    /// Moves the cursor past the page in the same transaction.
    pub advance: bool,
    /// Leaves the agent's own events out of the page (they still move the
    /// cursor).
    pub skip_own: bool,
}

/// Events and the agents' cursors.
#[async_trait]
pub trait EventStore: Send + Sync {
    async fn read_events(&self, room: &str, filter: &EventFilter) -> Result<Vec<Event>>;
    async fn latest_event_id(&self, room: &str) -> Result<i64>;
    /// [`EventStore::read_events`] and [`EventStore::latest_event_id`]
    /// together, in one round trip where the backend has them.
    async fn read_events_latest(
        &self,
        room: &str,
        filter: &EventFilter,
    ) -> Result<(Vec<Event>, i64)> {
        let events = self.read_events(room, filter).await?;
        Ok((events, self.latest_event_id(room).await?))
    }
    /// The page of events after the agent's cursor that `read` asks for.
    async fn events_after_cursor(&self, read: CursorRead<'_>) -> Result<EventPage>;
    /// Whether an event by someone other than `agent` lies past its cursor.
    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>>;
    async fn cursor(&self, room: &str, agent: &str) -> Result<i64>;
    /// Sets the agent's cursor in `room` back from `from` to `to`, if it is
    /// still at `from`; `false` when it had moved on. For a cursor beyond
    /// the room's history (a database restored under newer cursors), which
    /// would hide what is written next; cursors otherwise only move forward.
    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool>;
}
