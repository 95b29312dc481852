//! A room's history: reading it, the per-agent cursor of `whats_new`, and
//! `wait_for_change`, which parks until a peer's event lands.

use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;

use crate::domain::model::{Event, EventFilter, EventKind, EventPage, Room};
use crate::domain::{Call, Core, limits};
use crate::error::{Error, Result};

/// The name of every event kind there is.
pub const KINDS: [&str; EventKind::ALL.len()] = {
    let mut names = [""; EventKind::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = EventKind::ALL[i].as_str();
        i += 1;
    }
    names
};

/// What `wait_for_change` found.
#[derive(Debug, Clone)]
pub struct WaitOutcome {
    pub changed: bool,
    pub waited: Duration,
    /// The first peer event seen, for the hint.
    pub event: Option<Event>,
}

impl Core {
    pub async fn read_events(
        &self,
        call: &Call,
        room: Option<&str>,
        mut filter: EventFilter,
    ) -> Result<(String, Vec<Event>, i64)> {
        let room = self.room(call, room).await?;
        if let Some(kind) = &filter.kind
            && EventKind::parse(kind).is_none()
        {
            return Err(Error::invalid(format!(
                "unknown kind {kind:?}; kinds are {}",
                KINDS.join(", ")
            )));
        }
        filter.since_id = filter.since_id.max(0);
        filter.limit = limits::clamp_limit(Some(filter.limit), 100, 500);
        let events = self.store.read_events(&room.name, &filter).await?;
        let latest = self.store.latest_event_id(&room.name).await?;
        Ok((room.name, events, latest))
    }

    /// Events after the caller's cursor. `advance` moves the cursor past the
    /// page; `skip_own` leaves the caller's own events out.
    pub async fn whats_new(
        &self,
        call: &Call,
        room: Option<&str>,
        limit: i64,
        advance: bool,
        skip_own: bool,
    ) -> Result<(Room, EventPage)> {
        let room = self.room(call, room).await?;
        let page = self
            .store
            .events_after_cursor(&room.name, &call.agent, limit, advance, skip_own)
            .await?;
        Ok((room, page))
    }

    /// Parks until an event by someone else lands past the caller's cursor,
    /// `timeout` passes, or the server shuts down. Does not move the cursor.
    pub async fn wait_for_change(
        &self,
        call: &Call,
        room: Option<&str>,
        timeout: Duration,
    ) -> Result<(String, WaitOutcome)> {
        let room = self.room(call, room).await?.name;
        let started = Instant::now();
        // Subscribe before looking, so an event landing in between is not missed.
        let mut rx = self.bus.subscribe();
        let done = |event: Option<Event>| WaitOutcome {
            changed: event.is_some(),
            waited: started.elapsed(),
            event,
        };
        if let Some(id) = self
            .store
            .peer_event_after_cursor(&room, &call.agent)
            .await?
        {
            let event = self.event_by_id(&room, id).await?;
            return Ok((room, done(event.or(Some(placeholder(id))))));
        }
        let deadline = tokio::time::Instant::from_std(started + timeout);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Ok((room, done(None))),
                _ = self.shutdown.cancelled() => return Ok((room, done(None))),
                received = rx.recv() => match received {
                    Ok(e) if e.room == room && e.actor != call.agent => {
                        return Ok((room, done(Some((*e).clone()))));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if let Some(id) = self.store.peer_event_after_cursor(&room, &call.agent).await? {
                            let event = self.event_by_id(&room, id).await?;
                            return Ok((room, done(event.or(Some(placeholder(id))))));
                        }
                    }
                    Err(RecvError::Closed) => return Ok((room, done(None))),
                },
            }
        }
    }

    async fn event_by_id(&self, room: &str, id: i64) -> Result<Option<Event>> {
        let filter = EventFilter {
            since_id: id - 1,
            limit: 1,
            kind: None,
            task_id: None,
        };
        Ok(self
            .store
            .read_events(room, &filter)
            .await?
            .into_iter()
            .next())
    }
}

/// An event known only by id (pruned between the check and the read).
fn placeholder(id: i64) -> Event {
    Event {
        id,
        room: String::new(),
        ts: 0,
        kind: String::new(),
        actor: String::new(),
        task_id: None,
        message_id: None,
        detail: serde_json::Value::Null,
    }
}
