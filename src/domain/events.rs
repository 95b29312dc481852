//! A room's history: reading it, the per-agent cursor of `whats_new`, and
//! `wait_for_change`, which parks until a peer's event lands.
//!
//! A cursor can lie beyond the history: a client read event 13, then the
//! database was restored from a backup that ends at event 6, and the ids
//! handed out next are 7, 8… — at or below the cursor, so never shown.
//! [`Core::cursor_ahead`] spots such a cursor, and streams and `whats_new`
//! say so (`reset`, `cursor_reset`) and resume from what exists.

use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;

use crate::domain::model::{Event, EventFilter, EventKind, EventPage, Room};
use crate::domain::store::CursorRead;
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

/// How far back, in ids, a cursor beyond the history resumes at most: a
/// stream or `whats_new` set back replays at most this many events.
const MAX_CATCH_UP: i64 = 1000;

/// `remaining` counts at most this many events. A page's cost stays that of
/// the page and this many index entries, however far behind the cursor is;
/// beyond it the answer says `remaining_more` instead of counting the whole
/// backlog. (The `whats_new` tool's description gives the number.)
pub const REMAINING_CAP: i64 = 1000;

/// How many events after a cursor one page read looks at (ids and whether
/// the page shows each): the page, [`REMAINING_CAP`] more to count, and one
/// to tell whether anything lies beyond.
pub fn page_window(limit: i64) -> i64 {
    limit + REMAINING_CAP + 1
}

/// How a page read cuts the events after a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCut {
    /// How many events the page shows, and the last of them.
    pub shown: usize,
    pub last_shown: Option<i64>,
    /// Where the cursor goes past this page.
    pub new_cursor: i64,
    pub remaining: i64,
    pub remaining_more: bool,
}

/// The one rule of a `whats_new` page, for both stores. `window` is what a
/// read of [`page_window`] events after `since` found, in id order, each id
/// with whether the page shows it (the caller's own events are not shown
/// when left out); `high` is the room's latest id as the same read saw it.
///
/// The page is the first `limit` shown events. The cursor moves past the
/// page; when the page is not full it moves past everything looked at (own
/// events included): to `high` when the window reached the end, else to the
/// window's last id. `remaining` counts the shown events after the new
/// cursor within the window, at most [`REMAINING_CAP`]; `remaining_more`
/// says more may lie beyond (the count reached its cap, or the window did
/// not reach the end).
pub fn cut_page(since: i64, high: i64, window: &[(i64, bool)], limit: i64) -> PageCut {
    let limit = limit.max(0) as usize;
    let full_window = window.len() as i64 >= page_window(limit as i64);
    let mut shown = 0;
    let mut last_shown = None;
    let mut looked = 0;
    for &(id, show) in window {
        if shown == limit {
            break;
        }
        looked += 1;
        if show {
            shown += 1;
            last_shown = Some(id);
        }
    }
    let new_cursor = match (shown == limit, last_shown, window.last()) {
        (true, Some(last), _) => last,
        (_, _, Some(&(last, _))) if full_window => last,
        _ => high.max(since),
    };
    let rest = window[looked..]
        .iter()
        .filter(|&&(id, show)| show && id > new_cursor)
        .count() as i64;
    PageCut {
        shown,
        last_shown,
        new_cursor,
        remaining: rest.min(REMAINING_CAP),
        remaining_more: rest > REMAINING_CAP || full_window,
    }
}

/// Which ids a cursor counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ids {
    Events,
    Messages,
}

impl Ids {
    fn table(self) -> &'static str {
        match self {
            Ids::Events => "events",
            Ids::Messages => "messages",
        }
    }
}

/// The highest ids the database held when this server started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdsAtStart {
    pub events: i64,
    pub messages: i64,
}

/// A cursor that lay beyond the room's history, and where reading resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorReset {
    /// The cursor as the client (or the stored cursor) had it.
    pub requested_after: i64,
    /// The room's latest id.
    pub latest: i64,
    /// Where reading resumes instead (at most `latest`).
    pub resumed_after: i64,
}

/// What `whats_new` found.
#[derive(Debug, Clone)]
pub struct News {
    pub room: Room,
    pub page: EventPage,
    /// The caller's `after` as applied: set back to where reading resumed
    /// when it lay beyond the history.
    pub after: Option<i64>,
    /// Set when the stored cursor, or `after`, lay beyond the history.
    pub reset: Option<CursorReset>,
}

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
            && EventKind::named(kind).is_none()
        {
            return Err(Error::invalid(format!(
                "unknown kind {kind:?}; kinds are {}",
                KINDS.join(", ")
            )));
        }
        filter.since_id = filter.since_id.max(0);
        filter.limit = limits::clamp_limit(Some(filter.limit), 100, 500);
        let (events, latest) = self.store.read_events_latest(&room.name, &filter).await?;
        Ok((room.name, events, latest))
    }

    /// Reads the ids the database holds as the server starts, for
    /// [`cursor_ahead`](Self::cursor_ahead).
    pub async fn note_start(mut self) -> Result<Core> {
        let start = IdsAtStart {
            events: self.store.id_high_water(Ids::Events.table()).await?,
            messages: self.store.id_high_water(Ids::Messages.table()).await?,
        };
        self.bus.note_high(start.events, start.messages);
        self.ids_at_start = Some(start);
        Ok(self)
    }

    /// `Some` when a cursor `after` lies beyond `room`'s history: past the
    /// room's latest id (`latest`, read when not given) and past every id
    /// the database ever handed out, so the ids handed out next would be at
    /// or below it and never shown (the database was restored from a
    /// backup, or replaced). A cursor past the room's latest id but within
    /// the ids handed out (other rooms' events, pruned ones) misses nothing
    /// and is left alone.
    ///
    /// Reading then resumes after the room's latest id; or, when that came
    /// after what the database held when this server started (the usual
    /// restore is stop, swap the file, start), after what it held then, so
    /// what was written between the start and the client's return is shown
    /// too (at most [`MAX_CATCH_UP`] ids back).
    pub async fn cursor_ahead(
        &self,
        room: &str,
        ids: Ids,
        after: i64,
        latest: Option<i64>,
    ) -> Result<Option<CursorReset>> {
        let known = match ids {
            Ids::Events => self.bus.known_event_high(),
            Ids::Messages => self.bus.known_message_high(),
        };
        if after <= known {
            return Ok(None);
        }
        let latest = match (latest, ids) {
            (Some(l), _) => l,
            (None, Ids::Events) => self.store.latest_event_id(room).await?,
            (None, Ids::Messages) => self.store.latest_message_id(room).await?,
        };
        if after <= latest || after <= self.store.id_high_water(ids.table()).await? {
            return Ok(None);
        }
        let at_start = self.ids_at_start.map(|s| match ids {
            Ids::Events => s.events,
            Ids::Messages => s.messages,
        });
        let resumed_after = at_start
            .map_or(latest, |s| latest.min(s))
            .max(latest - MAX_CATCH_UP)
            .max(0);
        Ok(Some(CursorReset {
            requested_after: after,
            latest,
            resumed_after,
        }))
    }

    /// Events after the caller's cursor, and after `after` (a peeking
    /// hook's own mark) when given. `advance` moves the cursor past the
    /// page; `skip_own` leaves the caller's own events out. A stored cursor
    /// or an `after` beyond the room's history ([`cursor_ahead`](Self::cursor_ahead))
    /// is set back, also by a peek, and the answer says so.
    pub async fn whats_new(
        &self,
        call: &Call,
        room: Option<&str>,
        limit: i64,
        advance: bool,
        skip_own: bool,
        after: Option<i64>,
    ) -> Result<News> {
        let room = self.room(call, room).await?;
        let read = async || {
            self.store
                .events_after_cursor(CursorRead {
                    room: &room.name,
                    agent: &call.agent,
                    limit,
                    advance,
                    skip_own,
                })
                .await
        };
        let mut page = read().await?;
        let mut reset = None;
        // Only a cursor with nothing after it can lie beyond the history.
        if page.events.is_empty()
            && page.since > 0
            && let Some(r) = self
                .cursor_ahead(&room.name, Ids::Events, page.since, None)
                .await?
        {
            tracing::info!(
                room = %room.name,
                agent = %call.agent,
                cursor = r.requested_after,
                latest_event_id = r.latest,
                resumed_after = r.resumed_after,
                "an agent's cursor lay beyond the room's history (a restored database?); set back"
            );
            match self
                .store
                .reset_cursor(&room.name, &call.agent, r.requested_after, r.resumed_after)
                .await
            {
                // Also when a concurrent call moved it first: read it again.
                Ok(_) => page = read().await?,
                Err(e) => tracing::warn!(
                    room = %room.name,
                    agent = %call.agent,
                    error = %e,
                    "cannot set the cursor back; events up to it stay hidden from whats_new"
                ),
            }
            reset = Some(r);
        }
        let mut after = after;
        if let Some(a) = after {
            // An event of the page past it shows it lies within the history.
            if page.events.last().is_none_or(|e| e.id <= a)
                && let Some(r) = self.cursor_ahead(&room.name, Ids::Events, a, None).await?
            {
                tracing::info!(
                    room = %room.name,
                    agent = %call.agent,
                    after_id = a,
                    latest_event_id = r.latest,
                    resumed_after = r.resumed_after,
                    "whats_new was asked for events beyond the room's history (a restored database?); resuming from what exists"
                );
                after = Some(r.resumed_after);
                reset = Some(r);
            }
            let floor = after.unwrap_or(0);
            page.events.retain(|e| e.id > floor);
        }
        Ok(News {
            room,
            page,
            after,
            reset,
        })
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
        let filter = EventFilter::after(id - 1, 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn window(ids: std::ops::RangeInclusive<i64>, own: impl Fn(i64) -> bool) -> Vec<(i64, bool)> {
        ids.map(|id| (id, !own(id))).collect()
    }

    #[test]
    fn a_short_backlog_is_counted_exactly() {
        let w = window(11..=18, |_| false);
        let cut = cut_page(10, 18, &w, 5);
        assert_eq!(
            (cut.shown, cut.last_shown, cut.new_cursor),
            (5, Some(15), 15)
        );
        assert_eq!((cut.remaining, cut.remaining_more), (3, false));
        let all = cut_page(10, 18, &w, 50);
        assert_eq!((all.shown, all.new_cursor, all.remaining), (8, 18, 0));
        assert!(!all.remaining_more);
        // Nothing after the cursor, or a cursor past the room's end: it stays.
        assert_eq!(cut_page(18, 18, &[], 5).new_cursor, 18);
        assert_eq!(cut_page(30, 18, &[], 5).new_cursor, 30);
    }

    #[test]
    fn a_long_backlog_is_counted_to_the_cap() {
        let limit = 50;
        let w = window(1..=page_window(limit), |_| false);
        let cut = cut_page(0, 1_000_000, &w, limit);
        assert_eq!((cut.shown, cut.new_cursor), (50, 50));
        assert_eq!((cut.remaining, cut.remaining_more), (REMAINING_CAP, true));
        // Exactly the cap left: counted, nothing more.
        let w = window(1..=limit + REMAINING_CAP, |_| false);
        let cut = cut_page(0, limit + REMAINING_CAP, &w, limit);
        assert_eq!((cut.remaining, cut.remaining_more), (REMAINING_CAP, false));
    }

    #[test]
    fn own_events_move_the_cursor_but_are_not_shown_or_counted() {
        // Every other event is the caller's own.
        let w = window(1..=10, |id| id % 2 == 0);
        let cut = cut_page(0, 10, &w, 2);
        assert_eq!((cut.shown, cut.last_shown, cut.new_cursor), (2, Some(3), 3));
        assert_eq!((cut.remaining, cut.remaining_more), (3, false));
        // A window of nothing but own events: past it, and more may follow.
        let limit = 5;
        let w = window(1..=page_window(limit), |_| true);
        let cut = cut_page(0, 5_000, &w, limit);
        assert_eq!((cut.shown, cut.new_cursor), (0, page_window(limit)));
        assert_eq!((cut.remaining, cut.remaining_more), (0, true));
    }
}
