//! Events and cursors on SQLite: a `whats_new` page and its cursor move
//! in one transaction.

use super::*;
use crate::domain::events;

/// The events of a room after `since` up to `upto`, optionally without
/// `agent`'s own.
const EVENTS_AFTER: &str = select!(
    event_columns,
    " FROM events WHERE room = ?1 AND id > ?2 AND id <= ?5 AND (?3 = 0 OR actor <> ?4) ORDER BY id"
);

/// The ids a page read looks at after `since` ([`events::page_window`]),
/// each with whether the page shows it.
const EVENT_WINDOW: &str = "SELECT id, (?3 = 0 OR actor <> ?4) FROM events \
     WHERE room = ?1 AND id > ?2 ORDER BY id LIMIT ?5";

/// One `whats_new` page read on `c` (a transaction: the reads agree): the
/// stored cursor, the page, the cut. Its cost is the page's and a bounded
/// window's ([`events::cut_page`]), however far behind the cursor is.
fn event_page(
    c: &Connection,
    read: CursorRead<'_>,
) -> Result<(Option<i64>, Vec<Event>, events::PageCut)> {
    let CursorRead {
        room,
        agent,
        limit,
        skip_own,
        ..
    } = read;
    let cursor: Option<i64> = row(
        c,
        "SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2",
        params![room, agent],
    )?;
    let since = cursor.unwrap_or(0);
    let window: Vec<(i64, bool)> = rows(
        c,
        EVENT_WINDOW,
        params![room, since, skip_own, agent, events::page_window(limit)],
    )?;
    // A window that stops short reached the room's latest event.
    let high = window.last().map_or(since, |&(id, _)| id);
    let cut = events::cut_page(since, high, &window, limit);
    let page = match cut.last_shown {
        Some(upto) => rows(c, EVENTS_AFTER, params![room, since, skip_own, agent, upto])?,
        None => Vec::new(),
    };
    Ok((cursor, page, cut))
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn read_events(&self, room: &str, f: &EventFilter) -> Result<Vec<Event>> {
        self.read_rows(
            select!(
                event_columns,
                " FROM events WHERE room = ?1 AND id > ?2 \
                 AND (?3 IS NULL OR kind = ?3) AND (?4 IS NULL OR task_id = ?4) \
                 ORDER BY id LIMIT ?5"
            ),
            params![room, f.since_id, f.kind, f.task_id, f.limit],
        )
    }

    async fn latest_event_id(&self, room: &str) -> Result<i64> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM events WHERE room = ?1";
        Ok(self.read_row(sql, [room])?.unwrap_or(0))
    }

    async fn events_after_cursor(&self, read: CursorRead<'_>) -> Result<EventPage> {
        // A peek only reads (in one read transaction, so its reads agree); an
        // advancing read moves the cursor in the same transaction as the
        // read, so two concurrent reads never both get a page.
        let peek = |c: &Connection| {
            let tx = c.unchecked_transaction()?;
            let page = event_page(&tx, read)?;
            tx.finish()?;
            Ok(page)
        };
        let (cursor, events, cut) = if read.advance {
            // Most polls find nothing new and would leave the cursor where
            // it is: those are answered from a reader, and never queue for
            // the writer (behind a batch of posts, or a checkpoint's pause).
            let seen = self.read(peek)?;
            if seen.0 == Some(seen.2.new_cursor) && seen.1.is_empty() {
                return Ok(EventPage {
                    since: seen.2.new_cursor,
                    first_look: false,
                    events: seen.1,
                    remaining: seen.2.remaining,
                    remaining_more: seen.2.remaining_more,
                });
            }
            self.write(|c| {
                let page = event_page(c, read)?;
                exec(
                    c,
                    "INSERT INTO cursors (room, agent, event_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (room, agent) DO UPDATE SET event_id = MAX(event_id, excluded.event_id)",
                    params![read.room, read.agent, page.2.new_cursor],
                )?;
                Ok(page)
            })
            .await?
        } else {
            self.read(peek)?
        };
        Ok(EventPage {
            since: cursor.unwrap_or(0),
            first_look: cursor.is_none(),
            events,
            remaining: cut.remaining,
            remaining_more: cut.remaining_more,
        })
    }

    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>> {
        self.read_row(
            "SELECT id FROM events WHERE room = ?1 AND actor <> ?2 AND id > \
                 COALESCE((SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2), 0) \
                 ORDER BY id LIMIT 1",
            params![room, agent],
        )
    }

    async fn cursor(&self, room: &str, agent: &str) -> Result<i64> {
        self.read(|c| {
            Ok(row(
                c,
                "SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2",
                params![room, agent],
            )?
            .unwrap_or(0))
        })
    }

    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool> {
        let sql =
            "UPDATE cursors SET event_id = ?4 WHERE room = ?1 AND agent = ?2 AND event_id = ?3";
        Ok(self.write_exec(sql, (room, agent, from, to)).await? == 1)
    }
}
