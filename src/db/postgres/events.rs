//! Events and cursors on PostgreSQL: a `whats_new` page read in one
//! statement, and its cursor moved under the cursor's row lock.

use super::turns::Ask;
use super::*;

/// The arguments of an event filter after `room` (`$2` to `$5`).
fn filter_args<'a>(room: &'a str, f: &'a EventFilter) -> impl Args<'a> {
    (room, f.since_id, &f.kind, f.task_id, f.limit)
}

/// One `whats_new` page as read, before the cursor moves.
struct CursorPage {
    /// The stored cursor (`None`: the agent's first look).
    cursor: Option<i64>,
    since: i64,
    /// The room's latest event id when it was read.
    high: i64,
    events: Vec<Event>,
    cut: crate::domain::events::PageCut,
}

/// The agent's cursor, the room's latest id, the ids of the window after the
/// cursor ([`page_window`](crate::domain::events::page_window), each with
/// whether the page shows it) and the page's events: one statement, so one
/// snapshot. Everything up to the room's latest visible id is committed
/// (ids become visible in order), so reading up to it and no further keeps
/// the page and the cursor consistent even while writers commit.
///
/// Its cost is the page's and the window's, however far behind the cursor
/// is: the window is one range of the `(room, id)` index with a `LIMIT`
/// (the bounds as scalar subqueries, so they are the index condition and
/// not a filter), the page's rows are fetched by primary key, so the plan needs no
/// statistics to be right (a burst the planner has not seen yet changes
/// nothing; docs/POSTGRES.md shows it).
const CURSOR_PAGE: &str = "WITH s AS (SELECT c.event_id AS cursor, COALESCE(c.event_id, 0) AS since, \
        (SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1) AS high \
        FROM (SELECT 1) one \
        LEFT JOIN cursors c ON c.room = $1 AND c.agent = $2), \
     w AS (SELECT e.id, (NOT $3 OR e.actor <> $2) AS shown FROM events e \
        WHERE e.room = $1 AND e.id > (SELECT since FROM s) AND e.id <= (SELECT high FROM s) \
        ORDER BY e.id LIMIT $5), \
     n AS (SELECT id, shown, CASE WHEN shown AND COUNT(*) FILTER (WHERE shown) OVER (ORDER BY id) <= $4 \
        THEN id END AS page_id FROM w) \
     SELECT s.cursor, s.since, s.high, n.id AS wid, n.shown, \
        p.id, p.room, p.ts, p.kind, p.actor, p.task_id, p.message_id, p.detail::text AS detail \
     FROM s LEFT JOIN n ON true LEFT JOIN events p ON p.id = n.page_id \
     ORDER BY n.id";

/// Reads one page on `db` (the pool, or a transaction holding the cursor).
async fn cursor_page<'e>(
    db: impl sqlx::PgExecutor<'e>,
    room: &str,
    agent: &str,
    limit: i64,
    skip_own: bool,
) -> Result<CursorPage> {
    let window = crate::domain::events::page_window(limit);
    let args = (room, agent, skip_own, limit, window);
    let rows = args.bind_to(sqlx::query(CURSOR_PAGE)).fetch_all(db).await?;
    let first = rows
        .first()
        .ok_or_else(|| Error::internal(anyhow::anyhow!("the cursor query gave no row")))?;
    let cursor: Option<i64> = first.get("cursor");
    let since: i64 = first.get("since");
    let high: i64 = first.get("high");
    let mut window = Vec::with_capacity(rows.len());
    let mut events = Vec::new();
    for r in &rows {
        if let Some(id) = r.get::<Option<i64>, _>("wid") {
            window.push((id, r.get::<bool, _>("shown")));
        }
        // The page's columns come after the cursor's and the window's.
        if r.get::<Option<i64>, _>("id").is_some() {
            events.push(Event::from_cols(&At(r, 5))?);
        }
    }
    let cut = crate::domain::events::cut_page(since, high, &window, limit);
    if events.len() != cut.shown {
        return Err(Error::internal(anyhow::anyhow!(
            "the cursor query gave {} events for a page of {}",
            events.len(),
            cut.shown
        )));
    }
    Ok(CursorPage {
        cursor,
        since,
        high,
        events,
        cut,
    })
}

/// Takes the row lock of `agent`'s cursor in `room`, if it has one.
async fn lock_cursor(tx: &mut PgConnection, room: &str, agent: &str) -> Result<Option<i64>> {
    let sql = "SELECT event_id FROM cursors WHERE room = $1 AND agent = $2 FOR UPDATE";
    Ok(fetch_opt(tx, sql, (room, agent)).await?)
}

/// One turn at `agent`'s cursor: the pages of `asks`, in order, each
/// answered on its own reply (the asks of callers gone meanwhile are left
/// out, so no page is handed to no one).
async fn serve_turn(pool: PgPool, room: String, agent: String, asks: Vec<Ask>) {
    let asks: Vec<Ask> = asks.into_iter().filter(|a| !a.reply.is_closed()).collect();
    if asks.is_empty() {
        return;
    }
    match read_turn(&pool, &room, &agent, &asks).await {
        Ok(pages) => {
            for (ask, page) in asks.into_iter().zip(pages) {
                let _ = ask.reply.send(Ok(page));
            }
        }
        Err(e) => {
            let again =
                || Error::internal(anyhow::anyhow!("a read of the same cursor failed: {e}"));
            let mut asks = asks.into_iter();
            let others: Vec<Ask> = asks.by_ref().skip(1).collect();
            for ask in others {
                let _ = ask.reply.send(Err(again()));
            }
            if let Some(first) = asks.next() {
                let _ = first.reply.send(Err(e));
            }
        }
    }
}

/// The pages of one turn. Most polls find nothing new: those read without a
/// lock and leave the cursor as it is. Otherwise the turn decides every
/// page once: it holds the cursor's row (across replicas the row lock
/// orders the turns of one cursor), reads each page after where the one
/// before it left the cursor, and moves it, all in one transaction.
async fn read_turn(pool: &PgPool, room: &str, agent: &str, asks: &[Ask]) -> Result<Vec<EventPage>> {
    let first = &asks[0];
    let seen = cursor_page(pool, room, agent, first.limit, first.skip_own).await?;
    if seen.cursor.is_some() && seen.since >= seen.high {
        // Nothing after the cursor: every ask gets the same empty page.
        let page = seen.into_page(false);
        return Ok(asks.iter().map(|_| page.clone()).collect());
    }
    if asks.len() == 1 && seen.cursor.is_some() && seen.cut.new_cursor == seen.since {
        return Ok(vec![seen.into_page(false)]);
    }
    // A cursor is a read position: its commit need not wait for the WAL
    // flush. A database crash can lose the last moves, which shows those
    // pages again (never skips one); the events themselves are committed
    // as usual. The setting rides on the `BEGIN`, no round trip more.
    let mut tx = pool
        .begin_with("BEGIN; SET LOCAL synchronous_commit = off")
        .await?;
    let mut first_look = false;
    if lock_cursor(&mut tx, room, agent).await?.is_none() {
        // A first look makes the row (a concurrent first look waits on
        // it, finds it made and takes the lock after this one).
        let sql = "INSERT INTO cursors (room, agent, event_id) VALUES ($1, $2, 0) \
             ON CONFLICT (room, agent) DO NOTHING";
        first_look = exec(&mut *tx, sql, (room, agent)).await? == 1;
        if !first_look && lock_cursor(&mut tx, room, agent).await?.is_none() {
            return Err(Error::conflict(
                "the cursor went while it was read (the room was deleted?); try again",
            ));
        }
    }
    let mut pages = Vec::with_capacity(asks.len());
    for ask in asks {
        let page = cursor_page(&mut *tx, room, agent, ask.limit, ask.skip_own).await?;
        if page.cut.new_cursor != page.since {
            let sql = "UPDATE cursors SET event_id = $3 WHERE room = $1 AND agent = $2";
            exec(&mut *tx, sql, (room, agent, page.cut.new_cursor)).await?;
        }
        // Only the turn's first page is the agent's first look.
        pages.push(page.into_page(first_look && pages.is_empty()));
    }
    tx.commit().await?;
    Ok(pages)
}

impl CursorPage {
    fn into_page(self, first_look: bool) -> EventPage {
        EventPage {
            since: self.since,
            first_look,
            events: self.events,
            remaining: self.cut.remaining,
            remaining_more: self.cut.remaining_more,
        }
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn read_events_latest(&self, room: &str, f: &EventFilter) -> Result<(Vec<Event>, i64)> {
        let rows = sqlx::query(concat!(
            "SELECT l.latest, e.* \
             FROM (SELECT COALESCE(MAX(id), 0) AS latest FROM events WHERE room = $1) l \
             LEFT JOIN LATERAL (SELECT ",
            event_columns!(),
            " FROM events WHERE room = $1 AND id > $2 \
                AND ($3::text IS NULL OR kind = $3) AND ($4::bigint IS NULL OR task_id = $4) \
                ORDER BY id LIMIT $5) e \
             ON true ORDER BY e.id"
        ));
        let rows = filter_args(room, f)
            .bind_to(rows)
            .fetch_all(&self.pool)
            .await?;
        Ok(page_with_latest(&rows)?)
    }

    async fn read_events(&self, room: &str, f: &EventFilter) -> Result<Vec<Event>> {
        let sql = select!(
            event_columns,
            " FROM events WHERE room = $1 AND id > $2 \
             AND ($3::text IS NULL OR kind = $3) AND ($4::bigint IS NULL OR task_id = $4) \
             ORDER BY id LIMIT $5"
        );
        Ok(fetch_all(&self.pool, sql, filter_args(room, f)).await?)
    }

    async fn latest_event_id(&self, room: &str) -> Result<i64> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1";
        Ok(fetch_one(&self.pool, sql, (room,)).await?)
    }

    async fn events_after_cursor(&self, read: CursorRead<'_>) -> Result<EventPage> {
        let (room, agent) = (read.room, read.agent);
        if !read.advance {
            let seen = cursor_page(&self.pool, room, agent, read.limit, read.skip_own).await?;
            let first_look = seen.cursor.is_none();
            return Ok(seen.into_page(first_look));
        }
        // An advancing read queues at its cursor on this replica at once:
        // each turn serves every caller queued by then (`turns.rs`), instead
        // of all of them reading the same page first and then waiting to
        // find it taken.
        let (pool, r, a) = (self.pool.clone(), room.to_owned(), agent.to_owned());
        let serve = move |asks| serve_turn(pool, r, a, asks);
        self.turns.read(read, serve).await
    }

    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool> {
        let sql =
            "UPDATE cursors SET event_id = $4 WHERE room = $1 AND agent = $2 AND event_id = $3";
        Ok(exec(&self.pool, sql, (room, agent, from, to)).await? == 1)
    }

    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>> {
        let sql = "SELECT id FROM events WHERE room = $1 AND actor <> $2 AND id > \
             COALESCE((SELECT event_id FROM cursors WHERE room = $1 AND agent = $2), 0) \
             ORDER BY id LIMIT 1";
        Ok(fetch_opt(&self.pool, sql, (room, agent)).await?)
    }

    async fn cursor(&self, room: &str, agent: &str) -> Result<i64> {
        let sql = "SELECT event_id FROM cursors WHERE room = $1 AND agent = $2";
        Ok(fetch_opt(&self.pool, sql, (room, agent))
            .await?
            .unwrap_or(0))
    }
}
