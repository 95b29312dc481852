//! The PostgreSQL backend: a connection pool shared by any number of `serve`
//! replicas, each of them stateless.
//!
//! What must hold across replicas is enforced here, in the database:
//! - every write that touches a room runs in one transaction that first takes
//!   the room's transaction lock (`pg_advisory_xact_lock`), so the ids of a
//!   room's events, messages, notes and mentions are handed out in the order
//!   the transactions commit: a reader never sees id 101 before id 100, and a
//!   cursor never skips a late commit (a plain sequence would allow that);
//! - task changes are written guarded by the version the domain decided on
//!   (`... WHERE version = $n`), so of two racing claims one updates a row and
//!   the other finds it moved on;
//! - every event is announced with `NOTIFY chatroom_events` in its own
//!   transaction (payload `room id`), which each replica's relay turns into
//!   bus events ([`Store::start_relay`]).

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Map, Value, json};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio_util::sync::CancellationToken;

mod cache;
mod oauth;
mod turns;
mod webhooks;
mod writer;

use cache::{Cache, Lookup};

use super::*;
use crate::domain::EventBus;
use crate::domain::oauth::{
    CodeTake, GrantRecord, NewAuthCode, NewConnectCode, NewOAuthToken, OAuthClient,
    OAuthTokenRecord, Rotation,
};
use crate::error::Error;

/// The channel every event is announced on.
pub const CHANNEL: &str = "chatroom_events";
/// `application_name` of the relay's listening connection (operators and
/// tests can find it in `pg_stat_activity`).
pub const RELAY_APPLICATION: &str = "chatroom-relay";
/// First key of the per-room transaction locks (the second is the room's
/// hash), so they do not collide with other users of advisory locks.
const ROOM_LOCK: i32 = 0x6368_6174; // "chat"
/// Connections per replica.
const POOL_SIZE: u32 = 16;

pub struct PostgresStore {
    pool: PgPool,
    options: PgConnectOptions,
    /// Group commit of each room's writes (`postgres/writer.rs`).
    writers: writer::Writers,
    /// Tokens, rooms and OAuth access tokens read, trusted while the relay
    /// hears their changes (`postgres/cache.rs`).
    cache: Arc<Cache>,
    /// Advancing reads of one cursor queue here (`postgres/turns.rs`).
    turns: turns::Turns,
}

impl PostgresStore {
    /// Connects to `url` and migrates the database.
    pub async fn open(url: &str) -> anyhow::Result<PostgresStore> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("bad PostgreSQL URL (CHATROOM_DATABASE_URL): {e}"))?
            .application_name("chatroom");
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to PostgreSQL: {e}"))?;
        // Replicas starting together are fine: the migrator holds a lock.
        sqlx::migrate!("migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| anyhow::anyhow!("cannot migrate the PostgreSQL database: {e}"))?;
        Ok(PostgresStore {
            writers: writer::Writers::new(pool.clone()),
            pool,
            options,
            cache: Arc::new(Cache::new()),
            turns: turns::Turns::default(),
        })
    }

    /// A transaction holding `room`'s lock: writers of one room take turns,
    /// writers of different rooms do not wait for each other.
    async fn begin_room(&self, room: &str) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ROOM_LOCK)
            .bind(room)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

/// One `whats_new` page as read, before the cursor moves.
struct CursorPage {
    /// The stored cursor (`None`: the agent's first look).
    cursor: Option<i64>,
    since: i64,
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
    let rows = sqlx::query(CURSOR_PAGE)
        .bind(room)
        .bind(agent)
        .bind(skip_own)
        .bind(limit)
        .bind(crate::domain::events::page_window(limit))
        .fetch_all(db)
        .await?;
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
        if r.get::<Option<i64>, _>("id").is_some() {
            events.push(event_from_row(r));
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
        events,
        cut,
    })
}

/// Takes the row lock of `agent`'s cursor in `room`, if it has one.
async fn lock_cursor(tx: &mut PgConnection, room: &str, agent: &str) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar(
            "SELECT event_id FROM cursors WHERE room = $1 AND agent = $2 FOR UPDATE",
        )
        .bind(room)
        .bind(agent)
        .fetch_optional(tx)
        .await?,
    )
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

/// The latest event id of every room that has events (one index lookup per room).
async fn latest_per_room(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT r.name, l.id FROM rooms r \
         CROSS JOIN LATERAL (SELECT MAX(e.id) AS id FROM events e WHERE e.room = r.name) l \
         WHERE l.id IS NOT NULL",
    )
    .fetch_all(pool)
    .await?)
}

fn room_from_row(r: &PgRow) -> Room {
    Room {
        name: r.get("name"),
        description: r.get("description"),
        repo_url: r.get("repo_url"),
        onboarding_notes: r.get("onboarding_notes"),
        retention_days: r.get("retention_days"),
    }
}

fn token_from_row(r: &PgRow) -> TokenRecord {
    TokenRecord {
        id: r.get("id"),
        grant: Grant {
            agent: r.get("agent"),
            room: r.get("room"),
            also_rooms: r.get("also_rooms"),
            readonly: r.get("readonly"),
            admin: r.get("admin"),
            all_rooms: r.get("all_rooms"),
            lead: r.get("lead"),
            skills: r.get("skills"),
            profile: Profile::stored(r.get::<Option<&str>, _>("profile")),
        },
        created_ts: r.get("created_ts"),
        revoked_ts: r.get("revoked_ts"),
        last_seen: r.try_get("last_seen").unwrap_or(None),
        last_used: r.get("last_used_ts"),
    }
}

fn message_from_row(r: &PgRow) -> Message {
    Message {
        id: r.get("id"),
        room: r.get("room"),
        ts: r.get("ts"),
        author: r.get("author"),
        body: r.get("body"),
        reply_to: r.get("reply_to"),
    }
}

const EVENT_COLUMNS: &str =
    "id, room, ts, kind, actor, task_id, message_id, detail::text AS detail";

fn event_from_row(r: &PgRow) -> Event {
    let detail: String = r.get("detail");
    Event {
        id: r.get("id"),
        room: r.get("room"),
        ts: r.get("ts"),
        kind: r.get("kind"),
        actor: r.get("actor"),
        task_id: r.get("task_id"),
        message_id: r.get("message_id"),
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    }
}

fn file_from_row(r: &PgRow) -> FileMeta {
    FileMeta {
        file_id: r.get("id"),
        name: r.get("name"),
        sha256: r.get("sha256"),
        size: r.get("size"),
        mime: r.get("mime"),
        author: r.get("author"),
        ts: r.get("ts"),
        expires_at: r.get("expires_ts"),
        task_id: r.get("task_id"),
    }
}

fn task_from_row(r: &PgRow) -> Result<Task> {
    let status: String = r.get("status");
    Ok(Task {
        id: r.get("id"),
        room: r.get("room"),
        title: r.get("title"),
        body: r.get("body"),
        status: Status::parse(&status)
            .map_err(|_| Error::internal(anyhow::anyhow!("task has unknown status {status:?}")))?,
        assignee: r.get("assignee"),
        depends_on: Vec::new(),
        blocked_by_unfinished: Vec::new(),
        version: r.get("version"),
        created_by: r.get("created_by"),
        created_ts: r.get("created_ts"),
        updated_ts: r.get("updated_ts"),
        priority: r.get("priority"),
        required_skill: r.get("required_skill"),
        needs_review: r.get("needs_review"),
        result: r.get("result"),
        lease_expires_ts: r.get("lease_expires_ts"),
        lease_seconds: r.get("lease_seconds"),
    })
}

const TASK_COLUMNS: &str = "id, room, title, body, status, assignee, version, created_by, created_ts, updated_ts, priority, required_skill, needs_review, result, lease_seconds, lease_expires_ts";

fn task_sql(template: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(template.replacen("{}", TASK_COLUMNS, 1))
}

/// Fills `depends_on` and `blocked_by_unfinished` of `tasks` in one query.
async fn fill_deps(conn: &mut PgConnection, tasks: &mut [Task]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = tasks.iter().map(|t| t.id).collect();
    let rows: Vec<(i64, i64, Option<String>)> = sqlx::query_as(
        "SELECT d.task_id, d.depends_on, t.status FROM task_deps d \
         LEFT JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id = ANY($1) ORDER BY d.depends_on",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    for (task_id, dep, status) in rows {
        if let Some(task) = tasks.iter_mut().find(|t| t.id == task_id) {
            task.depends_on.push(dep);
            if status.as_deref() != Some(Status::Done.as_str()) {
                task.blocked_by_unfinished.push(dep);
            }
        }
    }
    Ok(())
}

async fn load_task(conn: &mut PgConnection, room: &str, id: i64) -> Result<Option<Task>> {
    // The task and its dependencies (those not done yet apart): one round
    // trip, as `fill_deps` gives them.
    let row = sqlx::query(task_sql(
        "SELECT {}, \
            ARRAY(SELECT d.depends_on FROM task_deps d WHERE d.task_id = tasks.id \
                ORDER BY d.depends_on) AS deps, \
            ARRAY(SELECT d.depends_on FROM task_deps d LEFT JOIN tasks u ON u.id = d.depends_on \
                WHERE d.task_id = tasks.id AND u.status IS DISTINCT FROM $3 ORDER BY d.depends_on) AS blocked \
         FROM tasks WHERE id = $1 AND room = $2",
    ))
    .bind(id)
    .bind(room)
    .bind(Status::Done.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let mut task = task_from_row(&row)?;
    task.depends_on = row.get("deps");
    task.blocked_by_unfinished = row.get("blocked");
    Ok(Some(task))
}

/// Stores the rest of a write as the domain recorded it, in the write's
/// transaction and in one statement: the mention rows of the message or
/// note written, the events (each announced to every replica), the audit
/// row. `written` is what the main statement assigned. The caller holds the
/// room's lock, so event ids come after every committed id of the room.
async fn store_record(
    conn: &mut PgConnection,
    room: &str,
    mut record: Record,
    written: &Written,
) -> Result<Vec<Event>> {
    record.stamp(written);
    let Record {
        now,
        actor,
        events,
        mentions,
        audit_tool,
        task_id,
    } = record;
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let task_ids: Vec<Option<i64>> = events.iter().map(|e| e.task_id).collect();
    let message_ids: Vec<Option<i64>> = events.iter().map(|e| e.message_id).collect();
    let details: Vec<String> = events.iter().map(|e| e.detail.to_string()).collect();
    // A mention row points at its message or note. Its `seq` places it
    // among the room's messages for `since_id`: a message's own id, or for
    // a note the room's newest message id when the note was written. Event
    // ids are handed out in the order of the record's events.
    let ids: Vec<(i64, bool)> = sqlx::query_as(
        "WITH ev AS (INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
            SELECT $1, $2, u.kind, $3, u.task_id, u.message_id, u.detail::jsonb \
            FROM UNNEST($4::text[], $5::bigint[], $6::bigint[], $7::text[]) \
                WITH ORDINALITY AS u(kind, task_id, message_id, detail, n) \
            ORDER BY u.n RETURNING id), \
         mn AS (INSERT INTO mentions (room, agent, message_id, note_id, task_id, ts, seq) \
            SELECT $1, m.a, $8, $9, $10, $2, \
                COALESCE($8, (SELECT MAX(id) FROM messages WHERE room = $1), 0) \
            FROM UNNEST($11::text[]) WITH ORDINALITY AS m(a, n) ORDER BY m.n), \
         au AS (INSERT INTO audit (ts, agent, room, tool, task_id, outcome) \
            SELECT $2, $3, $1, $12, $10, 'ok' WHERE $12::text IS NOT NULL) \
         SELECT id, pg_notify('chatroom_events', $1 || ' ' || id) IS NULL FROM ev ORDER BY id",
    )
    .bind(room)
    .bind(now)
    .bind(&actor)
    .bind(&kinds)
    .bind(&task_ids)
    .bind(&message_ids)
    .bind(&details)
    .bind(written.message_id)
    .bind(written.note_id)
    .bind(task_id)
    .bind(&mentions)
    .bind(audit_tool)
    .fetch_all(&mut *conn)
    .await
    .map_err(text_error)?;
    if ids.len() != events.len() {
        return Err(Error::internal(anyhow::anyhow!(
            "{} events were stored of {}",
            ids.len(),
            events.len()
        )));
    }
    Ok(events
        .into_iter()
        .zip(ids)
        .map(|(e, (id, _))| Event {
            id,
            room: room.to_owned(),
            ts: now,
            kind: e.kind.as_str().to_owned(),
            actor: actor.clone(),
            task_id: e.task_id,
            message_id: e.message_id,
            detail: e.detail,
        })
        .collect())
}

/// The one event of a write that records one.
fn only(events: Vec<Event>) -> Result<Event> {
    events
        .into_iter()
        .next()
        .ok_or_else(|| Error::internal(anyhow::anyhow!("the write recorded no event")))
}

/// PostgreSQL refuses the NUL character in text, which SQLite stores: say so
/// plainly instead of failing with an internal error.
fn text_error(e: sqlx::Error) -> Error {
    let code = e
        .as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned());
    match code.as_deref() {
        // character_not_in_repertoire, untranslatable_character
        Some("22021") | Some("22P05") => nul_refused(),
        _ => e.into(),
    }
}

fn nul_refused() -> Error {
    Error::invalid("text must not contain the NUL character (U+0000) on this server's database")
}

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
async fn prune_room(conn: &mut PgConnection, room: &str, cutoff: i64) -> Result<PruneCount> {
    let messages = sqlx::query("DELETE FROM messages WHERE room = $1 AND ts < $2")
        .bind(room)
        .bind(cutoff)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM mentions WHERE room = $1 AND ts < $2 AND message_id IS NOT NULL")
        .bind(room)
        .bind(cutoff)
        .execute(&mut *conn)
        .await?;
    let events = sqlx::query("DELETE FROM events WHERE room = $1 AND ts < $2")
        .bind(room)
        .bind(cutoff)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    let files = sqlx::query("DELETE FROM files WHERE room = $1 AND ts < $2")
        .bind(room)
        .bind(cutoff)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    Ok(PruneCount {
        messages,
        events,
        files,
    })
}

// Who holds a room's membership: every token and every OAuth grant (an app
// signed in with a connect code is an agent like a token's), one rule for
// the member list and the mention index.
macro_rules! credentials {
    () => {
        "(SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts, created_ts FROM tokens \
         UNION ALL SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts, created_ts FROM oauth_grants)"
    };
}

#[async_trait]
impl Store for PostgresStore {
    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn start_relay(&self, bus: EventBus, shutdown: CancellationToken) -> Result<()> {
        let relay = Relay {
            pool: self.pool.clone(),
            options: self.options.clone().application_name(RELAY_APPLICATION),
            bus,
            cache: self.cache.clone(),
        };
        // Listen first, then note where each room stands: an event committed
        // in between is announced, none is lost.
        let listener = relay.listen().await?;
        relay.bus.start_relay(latest_per_room(&self.pool).await?);
        tokio::spawn(relay.run(listener, shutdown));
        Ok(())
    }
}

#[async_trait]
impl RoomStore for PostgresStore {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&room.name)
        .bind(&room.description)
        .bind(&room.repo_url)
        .bind(&room.onboarding_notes)
        .bind(room.retention_days)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        let at = match self.cache.room(name) {
            Lookup::Hit(room) => return Ok(Some(room)),
            Lookup::Miss(at) => at,
        };
        let row = sqlx::query("SELECT * FROM rooms WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        let room = row.as_ref().map(room_from_row);
        if let Some(room) = &room {
            self.cache.keep_room(name, room, at);
        }
        Ok(room)
    }

    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>> {
        let rows = sqlx::query(
            "SELECT r.*, \
             (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status = ANY($2)) AS open_tasks, \
             (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
             (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > $1)) AS files \
             FROM rooms r ORDER BY r.name COLLATE \"C\"",
        )
        .bind(now)
        .bind(Status::OPEN.map(Status::as_str).as_slice())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| RoomSummary {
                room: room_from_row(r),
                open_tasks: r.get("open_tasks"),
                messages: r.get("messages"),
                files: r.get("files"),
            })
            .collect())
    }

    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>> {
        let mut tx = self.begin_room(room).await?;
        let row = sqlx::query(
            "UPDATE rooms SET description = COALESCE($2, description), \
             repo_url = COALESCE($3, repo_url), onboarding_notes = COALESCE($4, onboarding_notes) \
             WHERE name = $1 RETURNING *",
        )
        .bind(room)
        .bind(&info.description)
        .bind(&info.repo_url)
        .bind(&info.onboarding_notes)
        .fetch_optional(&mut *tx)
        .await
        .map_err(text_error)?;
        let Some(row) = row else { return Ok(None) };
        let updated = room_from_row(&row);
        let event = only(store_record(&mut tx, room, record, &Written::default()).await?)?;
        tx.commit().await?;
        self.cache.changed("rooms");
        Ok(Some((updated, event)))
    }

    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>> {
        let mut tx = self.begin_room(room).await?;
        let done = sqlx::query("UPDATE rooms SET retention_days = $2 WHERE name = $1")
            .bind(room)
            .bind(days)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let pruned = if days > 0 {
            prune_room(&mut tx, room, record.now - days * 86_400_000).await?
        } else {
            PruneCount::default()
        };
        let written = Written {
            pruned: Some(pruned),
            ..Written::default()
        };
        let event = only(store_record(&mut tx, room, record, &written).await?)?;
        tx.commit().await?;
        self.cache.changed("rooms");
        Ok(Some((event, pruned)))
    }

    async fn delete_room(&self, room: &str) -> Result<bool> {
        let mut tx = self.begin_room(room).await?;
        for sql in [
            "DELETE FROM task_deps WHERE task_id IN (SELECT id FROM tasks WHERE room = $1)",
            "DELETE FROM notes WHERE room = $1",
            "DELETE FROM tasks WHERE room = $1",
            "DELETE FROM messages WHERE room = $1",
            "DELETE FROM mentions WHERE room = $1",
            "DELETE FROM files WHERE room = $1",
            "DELETE FROM events WHERE room = $1",
            "DELETE FROM cursors WHERE room = $1",
            "DELETE FROM presence WHERE room = $1",
            "DELETE FROM agent_status WHERE room = $1",
        ] {
            sqlx::query(sql).bind(room).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM rooms WHERE name = $1")
            .bind(room)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.cache.changed("rooms");
        Ok(done.rows_affected() == 1)
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let rooms: Vec<(String, i64)> =
            sqlx::query_as("SELECT name, retention_days FROM rooms WHERE retention_days > 0")
                .fetch_all(&self.pool)
                .await?;
        let mut total = PruneCount::default();
        for (room, days) in rooms {
            let mut tx = self.begin_room(&room).await?;
            let n = prune_room(&mut tx, &room, now - days * 86_400_000).await?;
            tx.commit().await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        total.files +=
            sqlx::query("DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= $1")
                .bind(now)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(total)
    }
}

#[async_trait]
impl TokenStore for PostgresStore {
    async fn insert_token(&self, t: &NewToken, now: i64) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO tokens (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        )
        .bind(&t.hash)
        .bind(&t.grant.agent)
        .bind(&t.grant.room)
        .bind(&t.grant.also_rooms)
        .bind(t.grant.readonly)
        .bind(t.grant.admin)
        .bind(t.grant.all_rooms)
        .bind(t.grant.lead)
        .bind(&t.grant.skills)
        .bind(now)
        .bind(t.grant.profile.as_str())
        .fetch_one(&self.pool)
        .await
        .map_err(text_error)?)
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
        let at = match self.cache.token(hash) {
            Lookup::Hit(token) => return Ok(Some(token)),
            Lookup::Miss(at) => at,
        };
        let row = sqlx::query("SELECT * FROM tokens WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        let token = row.as_ref().map(token_from_row);
        if let Some(token) = &token {
            self.cache.keep_token(hash, token, at);
        }
        Ok(token)
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT t.*, (SELECT MAX(p.last_seen_ts) FROM presence p WHERE p.agent = t.agent) AS last_seen \
             FROM tokens t ORDER BY t.id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(token_from_row).collect())
    }

    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE tokens SET revoked_ts = $2 WHERE agent = $1 AND revoked_ts IS NULL",
        )
        .bind(agent)
        .bind(now)
        .execute(&self.pool)
        .await;
        // Every replica forgets on the announcement; this one before it answers.
        self.cache.changed("tokens");
        Ok(done?.rows_affected())
    }

    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool> {
        let done =
            sqlx::query("UPDATE tokens SET revoked_ts = $2 WHERE id = $1 AND revoked_ts IS NULL")
                .bind(id)
                .bind(now)
                .execute(&self.pool)
                .await;
        self.cache.changed("tokens");
        Ok(done?.rows_affected() == 1)
    }

    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64> {
        let done =
            sqlx::query("DELETE FROM tokens WHERE revoked_ts IS NOT NULL AND revoked_ts <= $1")
                .bind(revoked_before)
                .execute(&self.pool)
                .await;
        self.cache.changed("tokens");
        Ok(done?.rows_affected())
    }

    async fn members(&self, room: &str) -> Result<Vec<Member>> {
        // One line per agent; the skills are those of the agent's newest
        // token that reaches the room.
        let rows = sqlx::query(concat!(
            "WITH m AS (SELECT t.* FROM ", credentials!(), " t WHERE t.revoked_ts IS NULL AND (t.room = $1 \
                OR $1 = ANY(t.also_rooms) \
                OR (t.all_rooms AND EXISTS (SELECT 1 FROM presence p WHERE p.room = $1 AND p.agent = t.agent)))) \
             SELECT m.agent, bool_or(m.lead) AS lead, bool_and(m.readonly) AS readonly, bool_or(m.admin) AS admin, \
             (SELECT m2.skills FROM m m2 WHERE m2.agent = m.agent ORDER BY m2.created_ts DESC LIMIT 1) AS skills, \
             (SELECT p.last_seen_ts FROM presence p WHERE p.room = $1 AND p.agent = m.agent) AS last_seen \
             FROM m GROUP BY m.agent ORDER BY m.agent COLLATE \"C\"",
        ))
        .bind(room)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Member {
                agent: r.get("agent"),
                lead: r.get("lead"),
                readonly: r.get("readonly"),
                admin: r.get("admin"),
                skills: r.get("skills"),
                last_seen: r.get("last_seen"),
            })
            .collect())
    }

    async fn room_agents(&self, room: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(concat!(
            "SELECT DISTINCT lower(t.agent) FROM ",
            credentials!(),
            " t WHERE t.revoked_ts IS NULL AND (t.room = $1 OR t.all_rooms OR $1 = ANY(t.also_rooms))",
        ))
        .bind(room)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        // One statement, rows in key order: replicas flushing at the same
        // time lock the rows in the same order and never deadlock.
        let mut rows: Vec<&(String, String, i64)> = seen.iter().collect();
        rows.sort_by(|a, b| {
            (&a.0, &a.1, std::cmp::Reverse(a.2)).cmp(&(&b.0, &b.1, std::cmp::Reverse(b.2)))
        });
        rows.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        let rooms: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        let ts: Vec<i64> = rows.iter().map(|r| r.2).collect();
        sqlx::query(
            "INSERT INTO presence (room, agent, last_seen_ts) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[]) \
             ON CONFLICT (room, agent) DO UPDATE \
             SET last_seen_ts = GREATEST(presence.last_seen_ts, excluded.last_seen_ts)",
        )
        .bind(rooms)
        .bind(agents)
        .bind(ts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()> {
        if used.is_empty() {
            return Ok(());
        }
        // In id order, for the same reason as presence above. The cache
        // trigger ignores this column (migration 0007): replicas keep their
        // tokens.
        let mut rows = used.to_vec();
        rows.sort_by_key(|&(id, ts)| (id, std::cmp::Reverse(ts)));
        rows.dedup_by_key(|r| r.0);
        let (ids, ts): (Vec<i64>, Vec<i64>) = rows.into_iter().unzip();
        sqlx::query(
            "UPDATE tokens t SET last_used_ts = GREATEST(t.last_used_ts, u.ts) \
             FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, ts) WHERE t.id = u.id",
        )
        .bind(ids)
        .bind(ts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn save_agent_state(&self, room: &str, agent: &str, state: &str, ts: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO agent_status (room, agent, state, state_ts) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (room, agent) DO UPDATE SET state = excluded.state, state_ts = excluded.state_ts",
        )
        .bind(room)
        .bind(agent)
        .bind(state)
        .bind(ts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn save_attention(
        &self,
        room: &str,
        agent: &str,
        attention: &str,
        ts: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO agent_status (room, agent, attention, attention_ts) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (room, agent) DO UPDATE SET attention = excluded.attention, attention_ts = excluded.attention_ts",
        )
        .bind(room)
        .bind(agent)
        .bind(attention)
        .bind(ts)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()> {
        if marks.is_empty() {
            return Ok(());
        }
        // One row per agent (the batch's last push mark, its latest hook),
        // in key order, so replicas flushing at once never deadlock.
        let mut merged: std::collections::BTreeMap<(&str, &str), (Option<i64>, Option<i64>)> =
            std::collections::BTreeMap::new();
        for m in marks {
            let e = merged.entry((&m.room, &m.agent)).or_default();
            e.0 = e.0.max(m.hook_seen_ts);
            if m.push_seen_ts.is_some() {
                e.1 = m.push_seen_ts;
            }
        }
        let rooms: Vec<&str> = merged.keys().map(|k| k.0).collect();
        let agents: Vec<&str> = merged.keys().map(|k| k.1).collect();
        let hooks: Vec<Option<i64>> = merged.values().map(|v| v.0).collect();
        let pushes: Vec<Option<i64>> = merged.values().map(|v| v.1).collect();
        sqlx::query(
            "INSERT INTO agent_status (room, agent, hook_seen_ts, push_seen_ts) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[]) \
             ON CONFLICT (room, agent) DO UPDATE SET \
             hook_seen_ts = GREATEST(agent_status.hook_seen_ts, excluded.hook_seen_ts), \
             push_seen_ts = COALESCE(excluded.push_seen_ts, agent_status.push_seen_ts)",
        )
        .bind(rooms)
        .bind(agents)
        .bind(hooks)
        .bind(pushes)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>> {
        let rows: Vec<(
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<i64>,
            Option<i64>,
        )> = sqlx::query_as(
            "SELECT agent, state, state_ts, attention, hook_seen_ts, push_seen_ts \
                 FROM agent_status WHERE room = $1 ORDER BY agent",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(
                |(agent, state, state_ts, attention, hook_seen_ts, push_seen_ts)| AgentStatus {
                    agent,
                    state,
                    state_ts,
                    attention,
                    hook_seen_ts,
                    push_seen_ts,
                },
            )
            .collect())
    }
}

#[async_trait]
impl ChatStore for PostgresStore {
    async fn post_message(
        &self,
        room: &str,
        body: &str,
        reply_to: Option<i64>,
        mut record: Record,
    ) -> Result<(Message, Event)> {
        // What PostgreSQL would refuse in the statement, refused before it,
        // so that the statement cannot fail on what it writes and needs no
        // savepoint of its own (`Writers::write_one`): the names in it are
        // checked names, the rest is the body (also in the event's detail).
        if body.contains('\0') {
            return Err(nul_refused());
        }
        let (room, body) = (room.to_owned(), body.to_owned());
        self.writers
            .write_one(&room.clone(), move |c| {
                Box::pin(async move {
                    // The message, its event (announced), its mentions and
                    // the audit row: one statement, one round trip.
                    let [event] = std::mem::take(&mut record.events).try_into().map_err(|_| {
                        Error::internal(anyhow::anyhow!("a message records one event"))
                    })?;
                    let (id, event_id, _): (i64, i64, bool) = sqlx::query_as(
                        "WITH m AS (INSERT INTO messages (room, ts, author, body, reply_to) \
                            VALUES ($1, $2, $3, $4, $5) RETURNING id), \
                         ev AS (INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
                            SELECT $1, $2, $6, $3, $7, m.id, $8::jsonb FROM m RETURNING id, message_id), \
                         mn AS (INSERT INTO mentions (room, agent, message_id, note_id, task_id, ts, seq) \
                            SELECT $1, x.a, m.id, NULL, $11, $2, m.id \
                            FROM m, UNNEST($9::text[]) WITH ORDINALITY AS x(a, n) ORDER BY x.n), \
                         au AS (INSERT INTO audit (ts, agent, room, tool, task_id, outcome) \
                            SELECT $2, $3, $1, $10, $11, 'ok' WHERE $10::text IS NOT NULL) \
                         SELECT ev.message_id, ev.id, pg_notify('chatroom_events', $1 || ' ' || ev.id) IS NULL FROM ev",
                    )
                    .bind(&room)
                    .bind(record.now)
                    .bind(&record.actor)
                    .bind(&body)
                    .bind(reply_to)
                    .bind(event.kind.as_str())
                    .bind(event.task_id)
                    .bind(event.detail.to_string())
                    .bind(&record.mentions)
                    .bind(record.audit_tool)
                    .bind(record.task_id)
                    .fetch_one(&mut *c)
                    .await
                    .map_err(text_error)?;
                    let event = Event {
                        id: event_id,
                        room: room.clone(),
                        ts: record.now,
                        kind: event.kind.as_str().to_owned(),
                        actor: record.actor.clone(),
                        task_id: event.task_id,
                        message_id: Some(id),
                        detail: event.detail,
                    };
                    let message = Message {
                        id,
                        room,
                        ts: record.now,
                        author: record.actor,
                        body,
                        reply_to,
                    };
                    Ok((message, event))
                })
            })
            .await
    }

    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>> {
        let rows =
            sqlx::query("SELECT * FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3")
                .bind(room)
                .bind(since_id)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.iter().map(message_from_row).collect())
    }

    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>> {
        Ok(
            sqlx::query_as("SELECT room, author FROM messages WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn latest_message_id(&self, room: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM messages WHERE room = $1")
                .bind(room)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn read_messages_latest(
        &self,
        room: &str,
        since_id: i64,
        limit: i64,
    ) -> Result<(Vec<Message>, i64)> {
        let rows = sqlx::query(
            "SELECT l.latest, m.id, m.room, m.ts, m.author, m.body, m.reply_to \
             FROM (SELECT COALESCE(MAX(id), 0) AS latest FROM messages WHERE room = $1) l \
             LEFT JOIN LATERAL (SELECT * FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3) m \
             ON true ORDER BY m.id",
        )
        .bind(room)
        .bind(since_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(page_with_latest(&rows, message_from_row))
    }
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn read_events_latest(&self, room: &str, f: &EventFilter) -> Result<(Vec<Event>, i64)> {
        let rows = sqlx::query(
            "SELECT l.latest, e.id, e.room, e.ts, e.kind, e.actor, e.task_id, e.message_id, e.detail \
             FROM (SELECT COALESCE(MAX(id), 0) AS latest FROM events WHERE room = $1) l \
             LEFT JOIN LATERAL (SELECT id, room, ts, kind, actor, task_id, message_id, detail::text AS detail \
                FROM events WHERE room = $1 AND id > $2 \
                AND ($3::text IS NULL OR kind = $3) AND ($4::bigint IS NULL OR task_id = $4) \
                ORDER BY id LIMIT $5) e \
             ON true ORDER BY e.id",
        )
        .bind(room)
        .bind(f.since_id)
        .bind(&f.kind)
        .bind(f.task_id)
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(page_with_latest(&rows, event_from_row))
    }

    async fn read_events(&self, room: &str, f: &EventFilter) -> Result<Vec<Event>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE room = $1 AND id > $2 \
             AND ($3::text IS NULL OR kind = $3) AND ($4::bigint IS NULL OR task_id = $4) \
             ORDER BY id LIMIT $5"
        )))
        .bind(room)
        .bind(f.since_id)
        .bind(&f.kind)
        .bind(f.task_id)
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(event_from_row).collect())
    }

    async fn latest_event_id(&self, room: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1")
                .bind(room)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn events_after_cursor(
        &self,
        room: &str,
        agent: &str,
        limit: i64,
        advance: bool,
        skip_own: bool,
    ) -> Result<EventPage> {
        // An advancing read joins its cursor's queue on this replica at
        // once: callers of one cursor then read one after another, each
        // after the one before has moved it, instead of all reading the
        // same page first and then waiting to find it taken.
        let _turn = match advance {
            true => Some(self.turns.take(room, agent).await),
            false => None,
        };
        // Most polls find nothing new: those read without a lock and leave
        // the cursor as it is.
        let seen = cursor_page(&self.pool, room, agent, limit, skip_own).await?;
        let moves = seen.cursor.is_none() || seen.cut.new_cursor != seen.since;
        if !advance || !moves {
            let first_look = seen.cursor.is_none();
            return Ok(seen.into_page(first_look));
        }
        // An advancing read decides its page once: it holds the cursor's row
        // (across replicas the row lock orders the callers of one cursor),
        // reads the page after where the one before it left the cursor, and
        // moves it in the same transaction.
        let mut tx = self.pool.begin().await?;
        // A cursor is a read position: the commit need not wait for the
        // WAL flush. A database crash can lose the last moves, which shows
        // those pages again (never skips one); the events themselves are
        // committed as usual. The queue behind this cursor waits one
        // flush less per caller.
        sqlx::query("SET LOCAL synchronous_commit = off")
            .execute(&mut *tx)
            .await?;
        let mut first_look = false;
        if lock_cursor(&mut tx, room, agent).await?.is_none() {
            // A first look makes the row (a concurrent first look waits on
            // it, finds it made and takes the lock after this one).
            let made = sqlx::query(
                "INSERT INTO cursors (room, agent, event_id) VALUES ($1, $2, 0) \
                 ON CONFLICT (room, agent) DO NOTHING",
            )
            .bind(room)
            .bind(agent)
            .execute(&mut *tx)
            .await?;
            first_look = made.rows_affected() == 1;
            if !first_look && lock_cursor(&mut tx, room, agent).await?.is_none() {
                return Err(Error::conflict(
                    "the cursor went while it was read (the room was deleted?); try again",
                ));
            }
        }
        let page = cursor_page(&mut *tx, room, agent, limit, skip_own).await?;
        if first_look || page.cut.new_cursor != page.since {
            sqlx::query("UPDATE cursors SET event_id = $3 WHERE room = $1 AND agent = $2")
                .bind(room)
                .bind(agent)
                .bind(page.cut.new_cursor)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(page.into_page(first_look))
    }

    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE cursors SET event_id = $4 WHERE room = $1 AND agent = $2 AND event_id = $3",
        )
        .bind(room)
        .bind(agent)
        .bind(from)
        .bind(to)
        .execute(&self.pool)
        .await?;
        Ok(n.rows_affected() == 1)
    }

    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM events WHERE room = $1 AND actor <> $2 AND id > \
             COALESCE((SELECT event_id FROM cursors WHERE room = $1 AND agent = $2), 0) \
             ORDER BY id LIMIT 1",
        )
        .bind(room)
        .bind(agent)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn cursor(&self, room: &str, agent: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT event_id FROM cursors WHERE room = $1 AND agent = $2")
                .bind(room)
                .bind(agent)
                .fetch_optional(&self.pool)
                .await?
                .unwrap_or(0),
        )
    }
}

#[async_trait]
impl AuditStore for PostgresStore {
    async fn insert_audit(&self, rows: &[AuditRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        // One statement for the whole batch.
        let ts: Vec<i64> = rows.iter().map(|r| r.ts).collect();
        let agents: Vec<&str> = rows.iter().map(|r| r.agent.as_str()).collect();
        let rooms: Vec<Option<&str>> = rows.iter().map(|r| r.room.as_deref()).collect();
        let tools: Vec<&str> = rows.iter().map(|r| r.tool.as_str()).collect();
        let task_ids: Vec<Option<i64>> = rows.iter().map(|r| r.task_id).collect();
        let outcomes: Vec<&str> = rows.iter().map(|r| r.outcome.as_str()).collect();
        sqlx::query(
            "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) \
             SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])",
        )
        .bind(ts)
        .bind(agents)
        .bind(rooms)
        .bind(tools)
        .bind(task_ids)
        .bind(outcomes)
        .execute(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(())
    }

    async fn audit_count(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM audit")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn insert_admin_log(&self, e: &AdminLogEntry) -> Result<()> {
        sqlx::query(
            "INSERT INTO admin_log (ts, actor, address, action, target, flagged) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(e.ts)
        .bind(&e.actor)
        .bind(&e.address)
        .bind(&e.action)
        .bind(&e.target)
        .bind(e.flagged)
        .execute(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(())
    }

    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>> {
        let rows = sqlx::query("SELECT * FROM admin_log ORDER BY id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| AdminLogEntry {
                id: r.get("id"),
                ts: r.get("ts"),
                actor: r.get("actor"),
                address: r.get("address"),
                action: r.get("action"),
                target: r.get("target"),
                flagged: r.get("flagged"),
            })
            .collect())
    }
}

#[async_trait]
impl BoardStore for PostgresStore {
    async fn create_task(
        &self,
        room: &str,
        t: &NewTask,
        record: Record,
    ) -> Result<(Task, Vec<Event>)> {
        let (room, t) = (room.to_owned(), t.clone());
        self.writers
            .write(&room.clone(), move |tx| {
                Box::pin(async move {
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO tasks (room, title, body, status, assignee, version, created_by, created_ts, updated_ts, \
                         priority, required_skill, needs_review) \
                         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7, $8, $9, $10) RETURNING id",
                    )
                    .bind(&room)
                    .bind(&t.title)
                    .bind(&t.body)
                    .bind(t.status.as_str())
                    .bind(&t.assignee)
                    .bind(&t.created_by)
                    .bind(record.now)
                    .bind(&t.priority)
                    .bind(&t.required_skill)
                    .bind(t.needs_review)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(text_error)?;
                    if !t.depends_on.is_empty() {
                        sqlx::query(
                            "INSERT INTO task_deps (task_id, depends_on) SELECT $1, d FROM UNNEST($2::bigint[]) AS d \
                             ON CONFLICT DO NOTHING",
                        )
                        .bind(id)
                        .bind(&t.depends_on)
                        .execute(&mut *tx)
                        .await?;
                    }
                    let task = load_task(tx, &room, id).await?.ok_or_else(|| {
                        Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
                    })?;
                    let written = Written {
                        task_id: Some(id),
                        ..Written::default()
                    };
                    let events = store_record(tx, &room, record, &written).await?;
                    Ok((task, events))
                })
            })
            .await
    }

    async fn get_task(&self, room: &str, id: i64) -> Result<Option<Task>> {
        let mut conn = self.pool.acquire().await?;
        load_task(&mut conn, room, id).await
    }

    async fn task_counts(&self, room: &str) -> Result<TaskCounts> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, COUNT(*)::BIGINT FROM tasks WHERE room = $1 GROUP BY status",
        )
        .bind(room)
        .fetch_all(&self.pool)
        .await?;
        Ok(TaskCounts::from_rows(rows))
    }

    async fn list_tasks(&self, room: &str, q: &TaskQuery) -> Result<Vec<Task>> {
        let statuses: Vec<&str> = q.statuses.iter().map(|s| s.as_str()).collect();
        let mut conn = self.pool.acquire().await?;
        let rows = sqlx::query(task_sql(
            "SELECT {} FROM tasks WHERE room = $1 \
             AND (cardinality($2::text[]) = 0 OR status = ANY($2)) \
             AND ($3::text IS NULL OR assignee = $3) AND id < $4 \
             ORDER BY id DESC LIMIT $5",
        ))
        .bind(room)
        .bind(statuses)
        .bind(&q.assignee)
        .bind(q.before_id.unwrap_or(i64::MAX))
        .bind(q.limit)
        .fetch_all(&mut *conn)
        .await?;
        let mut tasks = rows.iter().map(task_from_row).collect::<Result<Vec<_>>>()?;
        fill_deps(&mut conn, &mut tasks).await?;
        Ok(tasks)
    }

    async fn apply_task_change(
        &self,
        room: &str,
        id: i64,
        c: TaskChange,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        let room = room.to_owned();
        self.writers
            .write(&room.clone(), move |tx| {
                Box::pin(async move {
                    let now = c.record.now;
                    // Guarded by the version the domain decided on: a change
                    // decided on a task that moved on since (on any replica)
                    // writes nothing.
                    let sql = "UPDATE tasks SET status = $3, assignee = $4, body = $5, result = $6, lease_seconds = $7, \
                         lease_expires_ts = $8, version = version + 1, updated_ts = $9 \
                         WHERE id = $1 AND room = $2 AND version = $10";
                    #[cfg(feature = "history-fault")]
                    let sql = sqlx::AssertSqlSafe(crate::db::unguard(sql, &c));
                    let done = sqlx::query(sql)
                    .bind(id)
                    .bind(&room)
                    .bind(c.status.as_str())
                    .bind(&c.assignee)
                    .bind(&c.body)
                    .bind(&c.result)
                    .bind(c.lease_seconds)
                    .bind(c.lease_expires_ts)
                    .bind(now)
                    .bind(c.expected_version)
                    .execute(&mut *tx)
                    .await
                    .map_err(text_error)?;
                    if done.rows_affected() == 0 {
                        return Ok(None);
                    }
                    let mut written = Written::default();
                    if let Some(body) = &c.note {
                        let note_id: i64 = sqlx::query_scalar(
                            "INSERT INTO notes (task_id, room, ts, author, body) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                        )
                        .bind(id)
                        .bind(&room)
                        .bind(now)
                        .bind(&c.record.actor)
                        .bind(body)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(text_error)?;
                        written.note_id = Some(note_id);
                    }
                    let events = store_record(tx, &room, c.record, &written).await?;
                    let task = load_task(tx, &room, id).await?.ok_or_else(|| {
                        Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
                    })?;
                    Ok(Some((task, events)))
                })
            })
            .await
    }

    async fn lapsed_leases(&self, now: i64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT room, id FROM tasks WHERE lease_expires_ts IS NOT NULL AND lease_expires_ts <= $1 \
             AND status = ANY($2) LIMIT 500",
        )
        .bind(now)
        .bind(Status::LEASED.map(Status::as_str).as_slice())
        .fetch_all(&self.pool)
        .await?)
    }

    async fn notes(&self, task_id: i64) -> Result<Vec<Note>> {
        let rows = sqlx::query("SELECT * FROM notes WHERE task_id = $1 ORDER BY id")
            .bind(task_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| Note {
                id: r.get("id"),
                task_id: r.get("task_id"),
                author: r.get("author"),
                ts: r.get("ts"),
                body: r.get("body"),
            })
            .collect())
    }

    async fn my_mentions(
        &self,
        room: &str,
        agent: &str,
        since_id: i64,
        limit: i64,
    ) -> Result<Vec<Mention>> {
        let rows = sqlx::query(
            "SELECT x.seq, x.message_id, x.note_id, x.task_id, \
                COALESCE(m.author, n.author) AS author, COALESCE(m.ts, n.ts) AS ts, COALESCE(m.body, n.body) AS body \
             FROM mentions x LEFT JOIN messages m ON m.id = x.message_id LEFT JOIN notes n ON n.id = x.note_id \
             WHERE x.room = $1 AND x.agent = $2 AND x.seq > $3 AND (m.id IS NOT NULL OR n.id IS NOT NULL) \
             ORDER BY x.seq, x.id LIMIT $4",
        )
        .bind(room)
        .bind(agent)
        .bind(super::mentions_after(since_id))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Mention {
                seq: r.get("seq"),
                message_id: r.get("message_id"),
                note_id: r.get("note_id"),
                task_id: r.get("task_id"),
                author: r.get("author"),
                ts: r.get("ts"),
                body: r.get("body"),
            })
            .collect())
    }

    async fn search(&self, room: &str, words: &[String], limit: i64) -> Result<Vec<SearchHit>> {
        // The words are letters and digits only; `plainto_tsquery` ANDs them
        // and reads nothing in them as syntax. The query text is split by the
        // same function as the indexed text, and ANDed with the lexeme of
        // the room (see the migration 0004), so the index walks this room's
        // rows only. The statement stops at the time limit.
        let mut tx = self.pool.begin().await?;
        sqlx::query(AssertSqlSafe(format!(
            "SET LOCAL statement_timeout = {}",
            limits::SEARCH_MILLIS
        )))
        .execute(&mut *tx)
        .await?;
        let rows = sqlx::query(
            "WITH q AS (SELECT plainto_tsquery('simple', \
                 regexp_replace($2, '[^[:alnum:]]+', ' ', 'g')) && room_search_query($1) AS rq, \
                 plainto_tsquery('simple', regexp_replace($2, '[^[:alnum:]]+', ' ', 'g')) AS q), \
             hits AS ( \
                 SELECT 'message' AS kind, m.id AS id, NULL::bigint AS task_id, m.author, m.ts, m.body AS text, \
                     ts_rank(search_words(m.body), q.q) AS rank \
                 FROM messages m, q WHERE m.room = $1 AND room_search_words(m.room, m.body) @@ q.rq \
                 UNION ALL \
                 SELECT 'task', t.id, t.id, t.created_by, t.created_ts, t.title || E'\\n' || t.body, \
                     ts_rank(search_words(t.title || E'\\n' || t.body), q.q) \
                 FROM tasks t, q WHERE t.room = $1 AND room_search_words(t.room, t.title || E'\\n' || t.body) @@ q.rq \
                 UNION ALL \
                 SELECT 'note', n.id, n.task_id, n.author, n.ts, n.body, \
                     ts_rank(search_words(n.body), q.q) \
                 FROM notes n, q WHERE n.room = $1 AND room_search_words(n.room, n.body) @@ q.rq \
                 ORDER BY rank DESC, id DESC LIMIT $3) \
             SELECT hits.kind, hits.id, hits.task_id, hits.author, hits.ts, \
                 ts_headline('simple', hits.text, q.q, \
                     'StartSel=[, StopSel=], MaxWords=12, MinWords=4, ShortWord=0, MaxFragments=1, FragmentDelimiter=…') AS snippet \
             FROM hits, q ORDER BY hits.rank DESC, hits.id DESC",
        )
        .bind(room)
        .bind(words.join(" "))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.code().as_deref() == Some("57014") => {
                search_too_slow()
            }
            _ => e.into(),
        })?;
        tx.commit().await?;
        Ok(rows
            .iter()
            .map(|r| {
                let kind: String = r.get("kind");
                let id: i64 = r.get("id");
                SearchHit {
                    message_id: (kind == "message").then_some(id),
                    task_id: r.get("task_id"),
                    note_id: (kind == "note").then_some(id),
                    kind,
                    author: r.get("author"),
                    ts: r.get("ts"),
                    snippet: r.get("snippet"),
                }
            })
            .collect())
    }
}

#[async_trait]
impl FileStore for PostgresStore {
    async fn put_file(&self, room: &str, f: &NewFile, record: Record) -> Result<(FileMeta, Event)> {
        let mut tx = self.begin_room(room).await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO files (room, name, mime, size, sha256, content, author, ts, expires_ts, task_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(room)
        .bind(&f.name)
        .bind(&f.mime)
        .bind(f.content.len() as i64)
        .bind(&f.sha256)
        .bind(&f.content)
        .bind(&record.actor)
        .bind(record.now)
        .bind(f.expires_at)
        .bind(f.task_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(text_error)?;
        let meta = FileMeta {
            file_id: id,
            name: f.name.clone(),
            sha256: f.sha256.clone(),
            size: f.content.len() as i64,
            mime: f.mime.clone(),
            author: record.actor.clone(),
            ts: record.now,
            expires_at: f.expires_at,
            task_id: f.task_id,
        };
        let written = Written {
            file_id: Some(id),
            ..Written::default()
        };
        let event = only(store_record(&mut tx, room, record, &written).await?)?;
        tx.commit().await?;
        Ok((meta, event))
    }

    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>> {
        let row = sqlx::query(
            "SELECT * FROM files WHERE id = $1 AND room = $2 AND (expires_ts IS NULL OR expires_ts > $3)",
        )
        .bind(id)
        .bind(room)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| (file_from_row(&r), r.get("content"))))
    }

    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>> {
        let row = sqlx::query(
            "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
             WHERE id = $1 AND room = $2 AND (expires_ts IS NULL OR expires_ts > $3)",
        )
        .bind(id)
        .bind(room)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(file_from_row))
    }

    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT room FROM files WHERE id = $1 AND (expires_ts IS NULL OR expires_ts > $2)",
        )
        .bind(id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        let rows = sqlx::query(
            "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
             WHERE room = $1 AND (expires_ts IS NULL OR expires_ts > $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(room)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(file_from_row).collect())
    }

    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>> {
        let mut tx = self.begin_room(room).await?;
        let done = sqlx::query("DELETE FROM files WHERE id = $1 AND room = $2")
            .bind(id)
            .bind(room)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let event = only(store_record(&mut tx, room, record, &Written::default()).await?)?;
        tx.commit().await?;
        Ok(Some(event))
    }
}

#[async_trait]
impl CopyStore for PostgresStore {
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>> {
        let t = Table::named(table)?;
        let select = t
            .columns
            .iter()
            .map(|(c, ty)| match ty {
                Col::Json => format!("{c}::text AS {c}"),
                _ => (*c).to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = if t.keyed_by_id {
            format!("SELECT {select} FROM {table} WHERE id > $1 ORDER BY id LIMIT $2")
        } else {
            format!(
                "SELECT {select} FROM {table} ORDER BY {} OFFSET $1 LIMIT $2",
                t.order_by()
            )
        };
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut obj = Map::new();
            for (c, ty) in t.columns {
                let v = match ty {
                    Col::Int => json!(r.try_get::<Option<i64>, _>(*c)?),
                    Col::Text => json!(r.try_get::<Option<String>, _>(*c)?),
                    Col::Bool => json!(r.try_get::<Option<bool>, _>(*c)?),
                    Col::List => json!(r.try_get::<Option<Vec<String>>, _>(*c)?),
                    Col::Json => r
                        .try_get::<Option<String>, _>(*c)?
                        .map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
                        .unwrap_or(Value::Null),
                    Col::Bytes => json!(
                        r.try_get::<Option<Vec<u8>>, _>(*c)?
                            .map(|b| base64::engine::general_purpose::STANDARD.encode(b))
                    ),
                };
                obj.insert((*c).to_owned(), v);
            }
            out.push(Value::Object(obj));
        }
        Ok(out)
    }

    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()> {
        let t = Table::named(table)?;
        let placeholders = t
            .columns
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| match ty {
                Col::Json => format!("${}::jsonb", i + 1),
                _ => format!("${}", i + 1),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({placeholders})",
            t.column_list()
        );
        let mut tx = self.pool.begin().await?;
        for row in rows {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for (c, ty) in t.columns {
                let v = &row[*c];
                q = match ty {
                    Col::Int => q.bind(v.as_i64()),
                    Col::Text => q.bind(v.as_str().map(str::to_owned)),
                    Col::Bool => q.bind(v.as_bool()),
                    Col::List => q.bind(serde_json::from_value::<Vec<String>>(v.clone()).ok()),
                    Col::Json => q.bind((!v.is_null()).then(|| v.to_string())),
                    Col::Bytes => q.bind(
                        v.as_str()
                            .map(|s| base64::engine::general_purpose::STANDARD.decode(s))
                            .transpose()
                            .map_err(|e| {
                                Error::invalid(format!("bad bytes in {table}.{c}: {e}"))
                            })?,
                    ),
                };
            }
            q.execute(&mut *tx).await.map_err(text_error)?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn count_rows(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        Ok(
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {}", t.name)))
                .fetch_one(&self.pool)
                .await?,
        )
    }

    async fn id_high_water(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(0);
        }
        // The sequence's last value counts only once it was used.
        Ok(sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT GREATEST(COALESCE((SELECT MAX(id) FROM {0}), 0), \
             COALESCE((SELECT last_value FROM pg_sequences \
                       WHERE schemaname || '.' || sequencename = pg_get_serial_sequence('{0}', 'id')), 0))",
            t.name
        )))
        .fetch_one(&self.pool)
        .await?)
    }

    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(());
        }
        let high = high.max(self.id_high_water(table).await?);
        sqlx::query(AssertSqlSafe(format!(
            "SELECT setval(pg_get_serial_sequence('{}', 'id'), GREATEST($1, 1), $1 > 0)",
            t.name
        )))
        .bind(high)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

#[async_trait]
impl OAuthStore for PostgresStore {
    // OAuth: see `postgres/oauth.rs`.
    async fn oauth_insert_client(
        &self,
        client: &OAuthClient,
        max: i64,
        unused_before: i64,
    ) -> Result<bool> {
        self.oauth_insert_client_impl(client, max, unused_before)
            .await
    }

    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>> {
        self.oauth_client_impl(client_id).await
    }

    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()> {
        self.oauth_insert_connect_code_impl(code).await
    }

    async fn oauth_approve(
        &self,
        connect_hash: &str,
        client_id: &str,
        client_name: &str,
        code: &NewAuthCode,
        now: i64,
    ) -> Result<Option<i64>> {
        self.oauth_approve_impl(connect_hash, client_id, client_name, code, now)
            .await
    }

    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake> {
        self.oauth_take_auth_code_impl(hash, now).await
    }

    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()> {
        self.oauth_insert_tokens_impl(tokens).await
    }

    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>> {
        self.oauth_token_impl(hash).await
    }

    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>> {
        self.oauth_grant_by_refresh_impl(hash).await
    }

    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>> {
        self.oauth_grant_impl(id).await
    }

    async fn oauth_rotate_refresh(&self, rotation: &Rotation) -> Result<bool> {
        self.oauth_rotate_refresh_impl(rotation).await
    }

    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool> {
        self.oauth_revoke_grant_impl(grant_id, now).await
    }

    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        self.oauth_revoke_agent_impl(agent, now).await
    }

    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>> {
        self.oauth_list_grants_impl().await
    }

    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64> {
        self.oauth_purge_grants_impl(revoked_before).await
    }

    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String> {
        self.oauth_key_impl(name, fresh).await
    }

    async fn oauth_prune(&self, now: i64) -> Result<u64> {
        self.oauth_prune_impl(now).await
    }
}

/// Stops trusting the cache when the relay ends, however it ends.
struct DeafOnDrop(Arc<Cache>);

impl Drop for DeafOnDrop {
    fn drop(&mut self) {
        self.0.deaf();
    }
}

/// Relays the events that other replicas commit to this replica's bus, and
/// the announcements of changed tokens and rooms to its cache.
struct Relay {
    pool: PgPool,
    options: PgConnectOptions,
    bus: EventBus,
    cache: Arc<Cache>,
}

impl Relay {
    /// A listening connection of its own (named [`RELAY_APPLICATION`]).
    async fn listen(&self) -> Result<PgListener> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(self.options.clone())
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.ignore_pool_close_event(true);
        // A lost connection is replaced by `run`, which then catches up.
        listener.eager_reconnect(false);
        listener.listen_all([CHANNEL, cache::CHANNEL]).await?;
        // Announcements of changed tokens and rooms reach this replica from
        // here on: what it keeps of them can be trusted again.
        self.cache.listening();
        Ok(listener)
    }

    /// Waits for announcements and relays them; a lost listening connection
    /// is replaced and the events committed meanwhile are read from the
    /// table, so nothing is missed.
    async fn run(self, mut listener: PgListener, shutdown: CancellationToken) {
        // Once the relay stops, changes go unheard: nothing kept is trusted.
        let _deaf = DeafOnDrop(self.cache.clone());
        loop {
            let lost = tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.try_recv() => match received {
                    Ok(Some(n)) => {
                        let mut rooms = Vec::new();
                        let buffered = std::iter::from_fn(|| listener.next_buffered());
                        for n in std::iter::once(n).chain(buffered) {
                            if n.channel() == cache::CHANNEL {
                                self.cache.changed(n.payload());
                            } else {
                                rooms.push(announced(n.payload()));
                            }
                        }
                        self.relay_announced(rooms).await;
                        false
                    }
                    Ok(None) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "the event relay lost its PostgreSQL connection");
                        true
                    }
                },
            };
            if lost {
                self.cache.deaf();
                let mut wait = Duration::from_millis(100);
                listener = loop {
                    match self.listen().await {
                        Ok(l) => break l,
                        Err(e) => {
                            e.log_if_internal();
                            tokio::select! {
                                _ = shutdown.cancelled() => return,
                                _ = tokio::time::sleep(wait) => {}
                            }
                            wait = (wait * 2).min(Duration::from_secs(5));
                        }
                    }
                };
                tracing::info!("the event relay is listening again; catching up");
                if let Err(e) = self.catch_up().await {
                    e.log_if_internal();
                }
            }
        }
    }

    /// Relays what the announcements name: per room, every event past what
    /// the bus has, up to (at least) the announced id.
    async fn relay_announced(&self, announced: Vec<Option<(String, i64)>>) {
        let mut rooms: Vec<(String, i64)> = Vec::new();
        for (room, id) in announced.into_iter().flatten() {
            match rooms.iter_mut().find(|(r, _)| *r == room) {
                Some(entry) => entry.1 = entry.1.max(id),
                None => rooms.push((room, id)),
            }
        }
        for (room, id) in rooms {
            if let Err(e) = self.relay_room(&room, id).await {
                e.log_if_internal();
            }
        }
    }

    /// After a reconnection: relays every room that moved on meanwhile.
    async fn catch_up(&self) -> Result<()> {
        for (room, id) in latest_per_room(&self.pool).await? {
            self.relay_room(&room, id).await?;
        }
        Ok(())
    }

    /// Reads `room`'s events past what the bus has, in id order, and
    /// publishes them. An announcement arrives once its transaction
    /// committed, so the announced id is normally visible at once; a few
    /// short retries cover a slow snapshot (or an event pruned meanwhile).
    async fn relay_room(&self, room: &str, announced: i64) -> Result<()> {
        const PAGE: usize = 500;
        let mut attempt = 0u32;
        loop {
            let from = self.bus.relayed_upto(room);
            if from >= announced {
                return Ok(());
            }
            let rows = sqlx::query(AssertSqlSafe(format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE room = $1 AND id > $2 ORDER BY id LIMIT {PAGE}"
            )))
            .bind(room)
            .bind(from)
            .fetch_all(&self.pool)
            .await?;
            let events: Vec<Event> = rows.iter().map(event_from_row).collect();
            let full = events.len() == PAGE;
            if let Some(last) = events.last().map(|e| e.id) {
                self.bus.publish_relayed(room, events, last);
            }
            if full || self.bus.relayed_upto(room) >= announced {
                continue;
            }
            attempt += 1;
            if attempt > 5 {
                tracing::warn!(room, announced, "an announced event could not be read back");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
        }
    }
}

/// The `(room, id)` an announcement names.
/// A page read with the room's latest id (`l.latest LEFT JOIN LATERAL` the
/// page): every row carries `latest`, and an empty page is one row whose
/// `id` is NULL.
fn page_with_latest<T>(rows: &[PgRow], item: fn(&PgRow) -> T) -> (Vec<T>, i64) {
    let latest = rows.first().map_or(0, |r| r.get("latest"));
    let page = rows
        .iter()
        .filter(|r| r.get::<Option<i64>, _>("id").is_some())
        .map(item)
        .collect();
    (page, latest)
}

fn announced(payload: &str) -> Option<(String, i64)> {
    let (room, id) = payload.rsplit_once(' ')?;
    Some((room.to_owned(), id.parse().ok()?))
}
