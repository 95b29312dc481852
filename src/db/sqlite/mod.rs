//! The SQLite backend: one file in WAL mode, one writer connection and a few
//! reader connections, driven through rusqlite on the calling thread.
//!
//! Why not sqlx here: sqlx runs every SQLite connection on a worker thread of
//! its own and every statement is a round trip to it — two thread wake-ups
//! per statement, which measured as most of the server's CPU time under load
//! (see BENCHMARKS.md). A statement on a cached prepared statement takes
//! microseconds, so it runs in place; the few calls that can take long
//! (pruning, deleting a room, backups, copies, listings with counts) go to
//! tokio's blocking pool instead. sqlx still owns the schema: migrations run
//! through `sqlx::migrate!` on open, as on PostgreSQL.
//!
//! Writes queue for the one writer in process (an async mutex: a waiting
//! write parks its task, not a thread), share commits under load
//! ([`writer`]), and start with `BEGIN IMMEDIATE`, so a transaction never
//! upgrades a read lock and SQLite serialises writers: event ids commit in
//! id order.

mod checkpoint;
mod oauth;
mod webhooks;
mod writer;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use serde_json::{Value, json};

use super::*;
use crate::domain::events;
use crate::domain::oauth::{
    CodeTake, GrantRecord, NewAuthCode, NewConnectCode, NewOAuthToken, OAuthClient,
    OAuthTokenRecord, Rotation,
};
use crate::error::Error;
use writer::Writer;

/// Idle reader connections kept open; more are opened when several threads
/// read at once and closed again beyond this.
const IDLE_READERS: usize = 8;

pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: String,
    writer: Writer,
    readers: Mutex<Vec<Connection>>,
    /// Stops the checkpointer thread when the store goes.
    _checkpointer: std::sync::mpsc::Sender<()>,
}

impl SqliteStore {
    /// Opens (creating if needed) and migrates the database file at `path`.
    pub async fn open(path: &str) -> anyhow::Result<SqliteStore> {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| match unwritable(path) {
                Some(why) => anyhow::anyhow!("cannot open database {path}: {why}"),
                None => anyhow::anyhow!("cannot open database {path}: {e}"),
            })?;
        sqlx::migrate!("migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|e| anyhow::anyhow!("cannot migrate database {path}: {e}"))?;
        pool.close().await;
        let open = |read_only| {
            open_connection(path, read_only)
                .map_err(|e| anyhow::anyhow!("cannot open database {path}: {e}"))
        };
        // Checkpoints are the checkpointer's, off the write path.
        let writer = Writer::new(open(false)?);
        let checkpointer = checkpoint::spawn(open(false)?, writer.pauser())
            .map_err(|e| anyhow::anyhow!("cannot start the WAL checkpointer: {e}"))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                writer,
                readers: Mutex::new(vec![open(true)?]),
                _checkpointer: checkpointer,
            }),
        })
    }

    /// Runs `f` on a reader connection, in place.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.inner.read(f)
    }

    /// Runs `f` on a reader connection on the blocking pool: for reads whose
    /// cost grows with the data (counts over whole tables, dumps, backups).
    async fn read_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.read(f))
            .await
            .map_err(|e| Error::internal(anyhow::anyhow!("database task failed: {e}")))?
    }

    /// Runs `f` as one write on the writer, in place; an error undoes all
    /// `f` did and nothing else.
    async fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.inner.writer.write(f).await
    }

    /// [`Self::write`] on the blocking pool, for writes that can take long
    /// (pruning, deleting a room, loading a copy).
    async fn write_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.inner.writer.write_blocking(f).await
    }

    /// Copies the database to `path` as one consistent snapshot, while
    /// writers keep going (`VACUUM INTO`).
    pub async fn backup(&self, path: &str) -> Result<()> {
        let path = path.to_owned();
        self.read_blocking(move |c| {
            c.execute("VACUUM INTO ?1", [path])?;
            Ok(())
        })
        .await
    }

    /// `PRAGMA integrity_check` answers `ok`.
    pub async fn integrity_ok(&self) -> Result<bool> {
        self.read_blocking(|c| {
            let verdict: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
            Ok(verdict == "ok")
        })
        .await
    }
}

impl Inner {
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let idle = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match idle {
            Some(c) => c,
            None => open_connection(&self.path, true)?,
        };
        let out = f(&conn);
        let mut idle = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        out
    }
}

/// Why the database cannot be opened, when the cause is a permission: the
/// file, or the folder it is to be created in, is not writable by this
/// process. The usual case is a bind-mounted data folder that Docker made
/// as root while the image runs as uid 1000, so the answer names the folder
/// and the `chown` that fixes it.
pub fn unwritable(path: &str) -> Option<String> {
    let file = std::path::Path::new(path);
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let denied = |e: std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    let (what, shown, chown) = if file.exists() {
        let e = std::fs::OpenOptions::new().write(true).open(file).err()?;
        (denied(e).then_some("the file")?, file, "chown -R")
    } else {
        // A probe file: the one sure test of "may create files here".
        let probe = dir.join(format!(".chatroom-probe-{}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                return None;
            }
            Err(e) => (denied(e).then_some("the folder")?, dir, "chown"),
        }
    };
    // /proc/self belongs to the process's own uid and gid.
    #[cfg(unix)]
    let ids = std::fs::metadata("/proc/self").ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.uid().to_string(), m.gid().to_string())
    });
    #[cfg(not(unix))]
    let ids: Option<(String, String)> = None;
    let (uid, gid) = ids.unwrap_or_else(|| ("UID".into(), "GID".into()));
    let dir = dir.display();
    Some(format!(
        "{what} {} is not writable by uid {uid}, which this server runs as: \
         give the folder to that user, sudo {chown} {uid}:{gid} {dir} (for the \
         Docker image, the host folder mounted there, e.g. ./data beside \
         docker-compose.yml)",
        shown.display()
    ))
}

/// Opens one connection with the settings every connection needs.
fn open_connection(path: &str, read_only: bool) -> rusqlite::Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.set_prepared_statement_cache_capacity(64);
    // Plans that do not depend on bound values. Without this, SQLite (built
    // with STAT4) marks a statement whose plan could depend on a parameter —
    // any `LIMIT ?` — and re-prepares it at every new binding, so cached
    // statements were compiled again on each call (16 % of the server's time
    // in `read_messages`).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // WAL + NORMAL: a commit survives a crash of the process; only a power
    // loss can take the last commits back.
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;",
    )?;
    conn.pragma_update(None, "cache_size", if read_only { -8000 } else { -16000 })?;
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // No checkpoint inside a commit: the checkpointer does them
        // (`checkpoint.rs`).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    }
    Ok(conn)
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn parse_list(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_default()
}

/// Runs a cached statement and maps every row.
fn rows<T, P: rusqlite::Params>(
    c: &Connection,
    sql: &str,
    params: P,
    map: impl FnMut(&Row) -> rusqlite::Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = c.prepare_cached(sql)?;
    let out = stmt
        .query_map(params, map)?
        .collect::<rusqlite::Result<Vec<T>>>()?;
    Ok(out)
}

/// Runs a cached statement and maps its first row, if any.
fn row<T, P: rusqlite::Params>(
    c: &Connection,
    sql: &str,
    params: P,
    map: impl FnOnce(&Row) -> rusqlite::Result<T>,
) -> Result<Option<T>> {
    let mut stmt = c.prepare_cached(sql)?;
    Ok(stmt.query_row(params, map).optional()?)
}

/// Runs a cached statement that returns no rows; gives the rows changed.
fn exec<P: rusqlite::Params>(c: &Connection, sql: &str, params: P) -> Result<u64> {
    let mut stmt = c.prepare_cached(sql)?;
    Ok(stmt.execute(params)? as u64)
}

// Who holds a room's membership: every token and every OAuth grant (an app
// signed in with a connect code is an agent like a token's), one rule for
// the member list and the mention index.
macro_rules! credentials {
    () => {
        "(SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts FROM tokens \
         UNION ALL SELECT agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, revoked_ts FROM oauth_grants)"
    };
}

// The columns of the rows read on every call, in the order their `*_from_row`
// reads them by position (a lookup by name costs a string search per value).
macro_rules! room_columns {
    () => {
        "name, description, repo_url, onboarding_notes, retention_days"
    };
}
macro_rules! token_columns {
    () => {
        "id, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, revoked_ts, last_used_ts, profile"
    };
}
macro_rules! message_columns {
    () => {
        "id, room, ts, author, body, reply_to"
    };
}
macro_rules! event_columns {
    () => {
        "id, room, ts, kind, actor, task_id, message_id, detail"
    };
}

fn room_from_row(r: &Row) -> rusqlite::Result<Room> {
    Ok(Room {
        name: r.get(0)?,
        description: r.get(1)?,
        repo_url: r.get(2)?,
        onboarding_notes: r.get(3)?,
        retention_days: r.get(4)?,
    })
}

/// A row of `token_columns!()` followed by `last_seen` (or `NULL`).
fn token_from_row(r: &Row) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: r.get(0)?,
        grant: Grant {
            agent: r.get(1)?,
            room: r.get(2)?,
            also_rooms: parse_list(&r.get::<_, String>(3)?),
            readonly: r.get(4)?,
            admin: r.get(5)?,
            all_rooms: r.get(6)?,
            lead: r.get(7)?,
            skills: parse_list(&r.get::<_, String>(8)?),
            profile: Profile::stored(r.get::<_, Option<String>>(12)?.as_deref()),
        },
        created_ts: r.get(9)?,
        revoked_ts: r.get(10)?,
        last_used: r.get(11)?,
        last_seen: r.get(13)?,
    })
}

fn message_from_row(r: &Row) -> rusqlite::Result<Message> {
    Ok(Message {
        id: r.get(0)?,
        room: r.get(1)?,
        ts: r.get(2)?,
        author: r.get(3)?,
        body: r.get(4)?,
        reply_to: r.get(5)?,
    })
}

fn event_from_row(r: &Row) -> rusqlite::Result<Event> {
    let detail: String = r.get(7)?;
    Ok(Event {
        id: r.get(0)?,
        room: r.get(1)?,
        ts: r.get(2)?,
        kind: r.get(3)?,
        actor: r.get(4)?,
        task_id: r.get(5)?,
        message_id: r.get(6)?,
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    })
}

fn file_from_row(r: &Row) -> rusqlite::Result<FileMeta> {
    Ok(FileMeta {
        file_id: r.get("id")?,
        name: r.get("name")?,
        sha256: r.get("sha256")?,
        size: r.get("size")?,
        mime: r.get("mime")?,
        author: r.get("author")?,
        ts: r.get("ts")?,
        expires_at: r.get("expires_ts")?,
        task_id: r.get("task_id")?,
    })
}

/// A row of `TASK_COLUMNS`; its status is checked by the caller
/// ([`checked_status`]).
fn task_from_row(r: &Row) -> rusqlite::Result<(Task, String)> {
    let status: String = r.get(4)?;
    Ok((
        Task {
            id: r.get(0)?,
            room: r.get(1)?,
            title: r.get(2)?,
            body: r.get(3)?,
            status: Status::Pending,
            assignee: r.get(5)?,
            depends_on: Vec::new(),
            blocked_by_unfinished: Vec::new(),
            version: r.get(6)?,
            created_by: r.get(7)?,
            created_ts: r.get(8)?,
            updated_ts: r.get(9)?,
            priority: r.get(10)?,
            required_skill: r.get(11)?,
            needs_review: r.get(12)?,
            result: r.get(13)?,
            lease_expires_ts: r.get(15)?,
            lease_seconds: r.get(14)?,
        },
        status,
    ))
}

fn checked_status((mut task, status): (Task, String)) -> Result<Task> {
    task.status = Status::parse(&status)
        .map_err(|_| Error::internal(anyhow::anyhow!("task has unknown status {status:?}")))?;
    Ok(task)
}

const TASK_COLUMNS: &str = "id, room, title, body, status, assignee, version, created_by, created_ts, updated_ts, priority, required_skill, needs_review, result, lease_seconds, lease_expires_ts";

fn const_format_task(template: &str) -> String {
    template.replacen("{}", TASK_COLUMNS, 1)
}

/// Fills `depends_on` and `blocked_by_unfinished` of `tasks` in one query.
fn fill_deps(c: &Connection, tasks: &mut [Task]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids =
        serde_json::to_string(&tasks.iter().map(|t| t.id).collect::<Vec<_>>()).unwrap_or_default();
    let deps = rows(
        c,
        "SELECT d.task_id, d.depends_on, t.status FROM task_deps d \
         LEFT JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id IN (SELECT value FROM json_each(?1)) ORDER BY d.depends_on",
        [ids],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        },
    )?;
    for (task_id, dep, status) in deps {
        if let Some(task) = tasks.iter_mut().find(|t| t.id == task_id) {
            task.depends_on.push(dep);
            if status.as_deref() != Some(Status::Done.as_str()) {
                task.blocked_by_unfinished.push(dep);
            }
        }
    }
    Ok(())
}

fn load_task(c: &Connection, room: &str, id: i64) -> Result<Option<Task>> {
    let sql = const_format_task("SELECT {} FROM tasks WHERE id = ?1 AND room = ?2");
    let Some(found) = row(c, &sql, params![id, room], task_from_row)? else {
        return Ok(None);
    };
    let mut tasks = [checked_status(found)?];
    fill_deps(c, &mut tasks)?;
    let [task] = tasks;
    Ok(Some(task))
}

/// Stores the rest of a write as the domain recorded it, in the write's
/// transaction: the mention rows of the message or note written,
/// the events, the audit row. `written` is what the main statement assigned.
fn store_record(
    c: &Connection,
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
    // A mention row points at its message or note. Its `seq` places it
    // among the room's messages for `since_id`: a message's own id, or for
    // a note the room's newest message id when the note was written.
    for agent in &mentions {
        exec(
            c,
            "INSERT INTO mentions (room, agent, message_id, note_id, task_id, ts, seq) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                COALESCE(?3, (SELECT MAX(id) FROM messages WHERE room = ?1), 0))",
            params![
                room,
                agent,
                written.message_id,
                written.note_id,
                task_id,
                now
            ],
        )?;
    }
    let mut stored = Vec::with_capacity(events.len());
    let mut stmt = c.prepare_cached(
        "INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
    )?;
    for e in events {
        let id: i64 = stmt.query_row(
            params![
                room,
                now,
                e.kind.as_str(),
                actor,
                e.task_id,
                e.message_id,
                e.detail.to_string()
            ],
            |r| r.get(0),
        )?;
        stored.push(Event {
            id,
            room: room.to_owned(),
            ts: now,
            kind: e.kind.as_str().to_owned(),
            actor: actor.clone(),
            task_id: e.task_id,
            message_id: e.message_id,
            detail: e.detail,
        });
    }
    if let Some(tool) = audit_tool {
        exec(
            c,
            "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES (?1, ?2, ?3, ?4, ?5, 'ok')",
            params![now, actor, room, tool, task_id],
        )?;
    }
    Ok(stored)
}

/// The one event of a write that records one.
fn only(events: Vec<Event>) -> Result<Event> {
    events
        .into_iter()
        .next()
        .ok_or_else(|| Error::internal(anyhow::anyhow!("the write recorded no event")))
}

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
fn prune_room(c: &Connection, room: &str, cutoff: i64) -> Result<PruneCount> {
    let messages = exec(
        c,
        "DELETE FROM messages WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    exec(
        c,
        "DELETE FROM mentions WHERE room = ?1 AND ts < ?2 AND message_id IS NOT NULL",
        params![room, cutoff],
    )?;
    let events = exec(
        c,
        "DELETE FROM events WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    let files = exec(
        c,
        "DELETE FROM files WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    Ok(PruneCount {
        messages,
        events,
        files,
    })
}

/// Runs the search `f` on `c`, stopping it with a clear error once it has
/// run for [`limits::SEARCH_MILLIS`] (SQLite's progress handler interrupts
/// the statement), so no query holds a reader for long.
fn within_search_time<T>(c: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(limits::SEARCH_MILLIS);
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stopped.clone();
    c.progress_handler(
        10_000,
        Some(move || {
            let late = std::time::Instant::now() >= deadline;
            if late {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            late
        }),
    )?;
    let out = f(c);
    c.progress_handler(0, None::<fn() -> bool>)?;
    if stopped.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(search_too_slow());
    }
    out
}

/// An agent's mentions in a room after message `since_id`, with the body,
/// author and time of the message or note each points at. A note sits at
/// the room's newest message when it was written: `since_id` 7 leaves out
/// message 7 and the notes written between it and the next message, and
/// `since_id` 0 (from the start) keeps the notes from before any message
/// ([`super::mentions_after`] gives the bound).
const MY_MENTIONS: &str = "SELECT x.seq, x.message_id, x.note_id, x.task_id, \
        COALESCE(m.author, n.author) AS author, COALESCE(m.ts, n.ts) AS ts, COALESCE(m.body, n.body) AS body \
     FROM mentions x LEFT JOIN messages m ON m.id = x.message_id LEFT JOIN notes n ON n.id = x.note_id \
     WHERE x.room = ?1 AND x.agent = ?2 AND x.seq > ?3 AND (m.id IS NOT NULL OR n.id IS NOT NULL) \
     ORDER BY x.seq, x.id LIMIT ?4";

/// The events of a room after `since` up to `upto`, optionally without
/// `agent`'s own.
const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
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
    room: &str,
    agent: &str,
    limit: i64,
    skip_own: bool,
) -> Result<(Option<i64>, Vec<Event>, events::PageCut)> {
    let cursor: Option<i64> = row(
        c,
        "SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2",
        params![room, agent],
        |r| r.get(0),
    )?;
    let since = cursor.unwrap_or(0);
    let window: Vec<(i64, bool)> = rows(
        c,
        EVENT_WINDOW,
        params![room, since, skip_own, agent, events::page_window(limit)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    // A window that stops short reached the room's latest event.
    let high = window.last().map_or(since, |&(id, _)| id);
    let cut = events::cut_page(since, high, &window, limit);
    let page = match cut.last_shown {
        Some(upto) => rows(
            c,
            EVENTS_AFTER,
            params![room, since, skip_own, agent, upto],
            event_from_row,
        )?,
        None => Vec::new(),
    };
    Ok((cursor, page, cut))
}

#[async_trait]
impl Store for SqliteStore {
    async fn backup(&self, path: &str) -> Result<()> {
        SqliteStore::backup(self, path).await
    }

    async fn health(&self) -> Result<()> {
        self.read(|c| {
            row(c, "SELECT 1", [], |r| r.get::<_, i64>(0))?;
            Ok(())
        })
    }
}

#[async_trait]
impl RoomStore for SqliteStore {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool> {
        self.write(|c| {
            let n = exec(
                c,
                "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (name) DO NOTHING",
                params![
                    room.name,
                    room.description,
                    room.repo_url,
                    room.onboarding_notes,
                    room.retention_days,
                    now
                ],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        self.read(|c| {
            row(
                c,
                concat!("SELECT ", room_columns!(), " FROM rooms WHERE name = ?1"),
                [name],
                room_from_row,
            )
        })
    }

    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>> {
        // Counts over whole tables: off the async workers.
        self.read_blocking(move |c| {
            rows(
                c,
                concat!("SELECT ", room_columns!(), ", \
                 (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status IN (?2, ?3, ?4, ?5)) AS open_tasks, \
                 (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
                 (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > ?1)) AS files \
                 FROM rooms r ORDER BY r.name"),
                params![
                    now,
                    Status::OPEN[0].as_str(),
                    Status::OPEN[1].as_str(),
                    Status::OPEN[2].as_str(),
                    Status::OPEN[3].as_str()
                ],
                |r| {
                    Ok(RoomSummary {
                        room: room_from_row(r)?,
                        open_tasks: r.get(5)?,
                        messages: r.get(6)?,
                        files: r.get(7)?,
                    })
                },
            )
        })
        .await
    }

    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>> {
        self.write(|c| {
            let Some(updated) = row(
                c,
                concat!("UPDATE rooms SET description = COALESCE(?2, description), \
                 repo_url = COALESCE(?3, repo_url), onboarding_notes = COALESCE(?4, onboarding_notes) \
                 WHERE name = ?1 RETURNING ", room_columns!()),
                params![room, info.description, info.repo_url, info.onboarding_notes],
                room_from_row,
            )?
            else {
                return Ok(None);
            };
            let event = only(store_record(c, room, record, &Written::default())?)?;
            Ok(Some((updated, event)))
        })
        .await
    }

    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>> {
        // Pruning a large room takes a while: off the async workers.
        let room = room.to_owned();
        self.write_blocking(move |c| {
            let n = exec(
                c,
                "UPDATE rooms SET retention_days = ?2 WHERE name = ?1",
                params![room, days],
            )?;
            if n == 0 {
                return Ok(None);
            }
            let pruned = if days > 0 {
                prune_room(c, &room, record.now - days * 86_400_000)?
            } else {
                PruneCount::default()
            };
            let written = Written {
                pruned: Some(pruned),
                ..Written::default()
            };
            let event = only(store_record(c, &room, record, &written)?)?;
            Ok(Some((event, pruned)))
        })
        .await
    }

    async fn delete_room(&self, room: &str) -> Result<bool> {
        let room = room.to_owned();
        self.write_blocking(move |c| {
            for sql in [
                "DELETE FROM task_deps WHERE task_id IN (SELECT id FROM tasks WHERE room = ?1)",
                "DELETE FROM notes WHERE room = ?1",
                "DELETE FROM tasks WHERE room = ?1",
                "DELETE FROM messages WHERE room = ?1",
                "DELETE FROM mentions WHERE room = ?1",
                "DELETE FROM files WHERE room = ?1",
                "DELETE FROM events WHERE room = ?1",
                "DELETE FROM cursors WHERE room = ?1",
                "DELETE FROM presence WHERE room = ?1",
                "DELETE FROM agent_status WHERE room = ?1",
            ] {
                c.execute(sql, [&room])?;
            }
            Ok(c.execute("DELETE FROM rooms WHERE name = ?1", [&room])? == 1)
        })
        .await
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let rooms = self.read(|c| {
            rows(
                c,
                "SELECT name, retention_days FROM rooms WHERE retention_days > 0",
                [],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
            )
        })?;
        let mut total = PruneCount::default();
        // One transaction a room, so writers get their turn in between.
        for (room, days) in rooms {
            let n = self
                .write_blocking(move |c| prune_room(c, &room, now - days * 86_400_000))
                .await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        total.files += self
            .write_blocking(move |c| {
                exec(
                    c,
                    "DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= ?1",
                    [now],
                )
            })
            .await?;
        Ok(total)
    }
}

#[async_trait]
impl TokenStore for SqliteStore {
    async fn insert_token(&self, t: &NewToken, now: i64) -> Result<i64> {
        self.write(|c| {
            let id = row(
                c,
                "INSERT INTO tokens (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, profile) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id",
                params![
                    t.hash,
                    t.grant.agent,
                    t.grant.room,
                    json_list(&t.grant.also_rooms),
                    t.grant.readonly,
                    t.grant.admin,
                    t.grant.all_rooms,
                    t.grant.lead,
                    json_list(&t.grant.skills),
                    now,
                    t.grant.profile.as_str()
                ],
                |r| r.get(0),
            )?;
            id.ok_or_else(|| Error::internal(anyhow::anyhow!("INSERT … RETURNING gave no row")))
        })
        .await
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
        self.read(|c| {
            row(
                c,
                concat!(
                    "SELECT ",
                    token_columns!(),
                    ", NULL FROM tokens WHERE hash = ?1"
                ),
                [hash],
                token_from_row,
            )
        })
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        self.read(|c| {
            rows(
                c,
                concat!(
                    "SELECT ",
                    token_columns!(),
                    ", \
                 (SELECT MAX(p.last_seen_ts) FROM presence p WHERE p.agent = tokens.agent) \
                 FROM tokens ORDER BY id"
                ),
                [],
                token_from_row,
            )
        })
    }

    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        self.write(|c| {
            exec(
                c,
                "UPDATE tokens SET revoked_ts = ?2 WHERE agent = ?1 AND revoked_ts IS NULL",
                params![agent, now],
            )
        })
        .await
    }

    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool> {
        self.write(|c| {
            exec(
                c,
                "UPDATE tokens SET revoked_ts = ?2 WHERE id = ?1 AND revoked_ts IS NULL",
                params![id, now],
            )
        })
        .await
        .map(|n| n == 1)
    }

    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64> {
        self.write(|c| {
            exec(
                c,
                "DELETE FROM tokens WHERE revoked_ts IS NOT NULL AND revoked_ts <= ?1",
                [revoked_before],
            )
        })
        .await
    }

    async fn members(&self, room: &str) -> Result<Vec<Member>> {
        self.read(|c| {
            rows(
                c,
                concat!(
                "SELECT t.agent, MAX(t.lead) AS lead, MIN(t.readonly) AS readonly, MAX(t.admin) AS admin, \
                 t.skills, (SELECT p.last_seen_ts FROM presence p WHERE p.room = ?1 AND p.agent = t.agent) AS last_seen \
                 FROM ", credentials!(), " t \
                 WHERE t.revoked_ts IS NULL AND (t.room = ?1 \
                    OR EXISTS (SELECT 1 FROM json_each(t.also_rooms) j WHERE j.value = ?1) \
                    OR (t.all_rooms = 1 AND EXISTS (SELECT 1 FROM presence p WHERE p.room = ?1 AND p.agent = t.agent))) \
                 GROUP BY t.agent ORDER BY t.agent"),
                [room],
                |r| {
                    Ok(Member {
                        agent: r.get("agent")?,
                        lead: r.get("lead")?,
                        readonly: r.get("readonly")?,
                        admin: r.get("admin")?,
                        skills: parse_list(&r.get::<_, String>("skills")?),
                        last_seen: r.get("last_seen")?,
                    })
                },
            )
        })
    }

    async fn room_agents(&self, room: &str) -> Result<Vec<String>> {
        self.read(|c| {
            rows(
                c,
                concat!(
                    "SELECT DISTINCT lower(t.agent) FROM ",
                    credentials!(),
                    " t WHERE t.revoked_ts IS NULL AND (t.room = ?1 OR t.all_rooms = 1 \
                    OR EXISTS (SELECT 1 FROM json_each(t.also_rooms) j WHERE j.value = ?1))"
                ),
                [room],
                |r| r.get(0),
            )
        })
    }

    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()> {
        self.write(|c| {
            for (room, agent, ts) in seen {
                exec(
                    c,
                    "INSERT INTO presence (room, agent, last_seen_ts) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (room, agent) DO UPDATE SET last_seen_ts = MAX(last_seen_ts, excluded.last_seen_ts)",
                    params![room, agent, ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()> {
        self.write(|c| {
            for (id, ts) in used {
                exec(
                    c,
                    "UPDATE tokens SET last_used_ts = MAX(coalesce(last_used_ts, 0), ?2) WHERE id = ?1",
                    params![id, ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn save_agent_state(&self, room: &str, agent: &str, state: &str, ts: i64) -> Result<()> {
        self.write(|c| {
            exec(
                c,
                "INSERT INTO agent_status (room, agent, state, state_ts) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (room, agent) DO UPDATE SET state = excluded.state, state_ts = excluded.state_ts",
                params![room, agent, state, ts],
            )?;
            Ok(())
        })
        .await
    }

    async fn save_attention(
        &self,
        room: &str,
        agent: &str,
        attention: &str,
        ts: i64,
    ) -> Result<()> {
        self.write(|c| {
            exec(
                c,
                "INSERT INTO agent_status (room, agent, attention, attention_ts) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (room, agent) DO UPDATE SET attention = excluded.attention, attention_ts = excluded.attention_ts",
                params![room, agent, attention, ts],
            )?;
            Ok(())
        })
        .await
    }

    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()> {
        self.write(|c| {
            for m in marks {
                exec(
                    c,
                    "INSERT INTO agent_status (room, agent, hook_seen_ts, push_seen_ts) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (room, agent) DO UPDATE SET \
                     hook_seen_ts = MAX(COALESCE(hook_seen_ts, 0), COALESCE(excluded.hook_seen_ts, 0)), \
                     push_seen_ts = COALESCE(excluded.push_seen_ts, push_seen_ts)",
                    params![m.room, m.agent, m.hook_seen_ts, m.push_seen_ts],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>> {
        self.read(|c| {
            rows(
                c,
                "SELECT agent, state, state_ts, attention, NULLIF(hook_seen_ts, 0), push_seen_ts \
                 FROM agent_status WHERE room = ?1 ORDER BY agent",
                [room],
                |r| {
                    Ok(AgentStatus {
                        agent: r.get(0)?,
                        state: r.get(1)?,
                        state_ts: r.get(2)?,
                        attention: r.get(3)?,
                        hook_seen_ts: r.get(4)?,
                        push_seen_ts: r.get(5)?,
                    })
                },
            )
        })
    }
}

#[async_trait]
impl ChatStore for SqliteStore {
    async fn post_message(
        &self,
        room: &str,
        body: &str,
        reply_to: Option<i64>,
        record: Record,
    ) -> Result<(Message, Event)> {
        self.write(|c| {
            let id: i64 = row(
                c,
                "INSERT INTO messages (room, ts, author, body, reply_to) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                params![room, record.now, record.actor, body, reply_to],
                |r| r.get(0),
            )?
            .ok_or_else(|| Error::internal(anyhow::anyhow!("INSERT … RETURNING gave no row")))?;
            let message = Message {
                id,
                room: room.to_owned(),
                ts: record.now,
                author: record.actor.clone(),
                body: body.to_owned(),
                reply_to,
            };
            let written = Written {
                message_id: Some(id),
                ..Written::default()
            };
            let event = only(store_record(c, room, record, &written)?)?;
            Ok((message, event))
        })
        .await
    }

    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>> {
        self.read(|c| {
            rows(
                c,
                concat!(
                    "SELECT ",
                    message_columns!(),
                    " FROM messages WHERE room = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
                ),
                params![room, since_id, limit],
                message_from_row,
            )
        })
    }

    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>> {
        self.read(|c| {
            row(
                c,
                "SELECT room, author FROM messages WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }

    async fn latest_message_id(&self, room: &str) -> Result<i64> {
        self.read(|c| {
            Ok(row(
                c,
                "SELECT COALESCE(MAX(id), 0) FROM messages WHERE room = ?1",
                [room],
                |r| r.get(0),
            )?
            .unwrap_or(0))
        })
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn read_events(&self, room: &str, f: &EventFilter) -> Result<Vec<Event>> {
        self.read(|c| {
            rows(
                c,
                concat!(
                    "SELECT ",
                    event_columns!(),
                    " FROM events WHERE room = ?1 AND id > ?2 \
                 AND (?3 IS NULL OR kind = ?3) AND (?4 IS NULL OR task_id = ?4) \
                 ORDER BY id LIMIT ?5"
                ),
                params![room, f.since_id, f.kind, f.task_id, f.limit],
                event_from_row,
            )
        })
    }

    async fn latest_event_id(&self, room: &str) -> Result<i64> {
        self.read(|c| {
            Ok(row(
                c,
                "SELECT COALESCE(MAX(id), 0) FROM events WHERE room = ?1",
                [room],
                |r| r.get(0),
            )?
            .unwrap_or(0))
        })
    }

    async fn events_after_cursor(
        &self,
        room: &str,
        agent: &str,
        limit: i64,
        advance: bool,
        skip_own: bool,
    ) -> Result<EventPage> {
        // A peek only reads (in one read transaction, so its reads agree); an
        // advancing read moves the cursor in the same transaction as the
        // read, so two concurrent reads never both get a page.
        let peek = |c: &Connection| {
            let tx = c.unchecked_transaction()?;
            let page = event_page(&tx, room, agent, limit, skip_own)?;
            tx.finish()?;
            Ok(page)
        };
        let (cursor, events, cut) = if advance {
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
                let page = event_page(c, room, agent, limit, skip_own)?;
                exec(
                    c,
                    "INSERT INTO cursors (room, agent, event_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (room, agent) DO UPDATE SET event_id = MAX(event_id, excluded.event_id)",
                    params![room, agent, page.2.new_cursor],
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
        self.read(|c| {
            row(
                c,
                "SELECT id FROM events WHERE room = ?1 AND actor <> ?2 AND id > \
                 COALESCE((SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2), 0) \
                 ORDER BY id LIMIT 1",
                params![room, agent],
                |r| r.get(0),
            )
        })
    }

    async fn cursor(&self, room: &str, agent: &str) -> Result<i64> {
        self.read(|c| {
            Ok(row(
                c,
                "SELECT event_id FROM cursors WHERE room = ?1 AND agent = ?2",
                params![room, agent],
                |r| r.get(0),
            )?
            .unwrap_or(0))
        })
    }

    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool> {
        self.write(|c| {
            Ok(exec(
                c,
                "UPDATE cursors SET event_id = ?4 WHERE room = ?1 AND agent = ?2 AND event_id = ?3",
                params![room, agent, from, to],
            )? == 1)
        })
        .await
    }
}

#[async_trait]
impl AuditStore for SqliteStore {
    async fn insert_audit(&self, audit_rows: &[AuditRow]) -> Result<()> {
        if audit_rows.is_empty() {
            return Ok(());
        }
        self.write(|c| {
            for r in audit_rows {
                exec(
                    c,
                    "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![r.ts, r.agent, r.room, r.tool, r.task_id, r.outcome],
                )?;
            }
            Ok(())
        })
        .await
    }

    async fn audit_count(&self) -> Result<i64> {
        self.read_blocking(|c| Ok(c.query_row("SELECT COUNT(*) FROM audit", [], |r| r.get(0))?))
            .await
    }

    async fn insert_admin_log(&self, e: &AdminLogEntry) -> Result<()> {
        self.write(|c| {
            exec(
                c,
                "INSERT INTO admin_log (ts, actor, address, action, target, flagged) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![e.ts, e.actor, e.address, e.action, e.target, e.flagged],
            )?;
            Ok(())
        })
        .await
    }

    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>> {
        self.read(|c| {
            rows(
                c,
                "SELECT * FROM admin_log ORDER BY id DESC LIMIT ?1",
                [limit],
                |r| {
                    Ok(AdminLogEntry {
                        id: r.get("id")?,
                        ts: r.get("ts")?,
                        actor: r.get("actor")?,
                        address: r.get("address")?,
                        action: r.get("action")?,
                        target: r.get("target")?,
                        flagged: r.get("flagged")?,
                    })
                },
            )
        })
    }
}

#[async_trait]
impl BoardStore for SqliteStore {
    async fn create_task(
        &self,
        room: &str,
        t: &NewTask,
        record: Record,
    ) -> Result<(Task, Vec<Event>)> {
        self.write(|c| {
            let id: i64 = row(
                c,
                "INSERT INTO tasks (room, title, body, status, assignee, version, created_by, created_ts, updated_ts, \
                 priority, required_skill, needs_review) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?7, ?8, ?9, ?10) RETURNING id",
                params![
                    room,
                    t.title,
                    t.body,
                    t.status.as_str(),
                    t.assignee,
                    t.created_by,
                    record.now,
                    t.priority,
                    t.required_skill,
                    t.needs_review
                ],
                |r| r.get(0),
            )?
            .ok_or_else(|| Error::internal(anyhow::anyhow!("INSERT … RETURNING gave no row")))?;
            for dep in &t.depends_on {
                exec(
                    c,
                    "INSERT INTO task_deps (task_id, depends_on) VALUES (?1, ?2)",
                    params![id, dep],
                )?;
            }
            let task = load_task(c, room, id)?.ok_or_else(|| {
                Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
            })?;
            let written = Written {
                task_id: Some(id),
                ..Written::default()
            };
            let events = store_record(c, room, record, &written)?;
            Ok((task, events))
        })
        .await
    }

    async fn get_task(&self, room: &str, id: i64) -> Result<Option<Task>> {
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let task = load_task(&tx, room, id)?;
            tx.finish()?;
            Ok(task)
        })
    }

    async fn list_tasks(&self, room: &str, q: &TaskQuery) -> Result<Vec<Task>> {
        let statuses =
            serde_json::to_string(&q.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())
                .unwrap_or_default();
        let sql = const_format_task(
            "SELECT {} FROM tasks WHERE room = ?1 \
             AND (?2 = '[]' OR status IN (SELECT value FROM json_each(?2))) \
             AND (?3 IS NULL OR assignee = ?3) AND id < ?4 \
             ORDER BY id DESC LIMIT ?5",
        );
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let mut tasks = rows(
                &tx,
                &sql,
                params![
                    room,
                    statuses,
                    q.assignee,
                    q.before_id.unwrap_or(i64::MAX),
                    q.limit
                ],
                task_from_row,
            )?
            .into_iter()
            .map(checked_status)
            .collect::<Result<Vec<_>>>()?;
            fill_deps(&tx, &mut tasks)?;
            tx.finish()?;
            Ok(tasks)
        })
    }

    async fn task_counts(&self, room: &str) -> Result<TaskCounts> {
        self.read(|c| {
            Ok(TaskCounts::from_rows(rows(
                c,
                "SELECT status, COUNT(*) FROM tasks WHERE room = ?1 GROUP BY status",
                [room],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?))
        })
    }

    async fn apply_task_change(
        &self,
        room: &str,
        id: i64,
        c: TaskChange,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        self.write(|tx| {
            let now = c.record.now;
            let sql = "UPDATE tasks SET status = ?3, assignee = ?4, body = ?5, result = ?6, lease_seconds = ?7, \
                 lease_expires_ts = ?8, version = version + 1, updated_ts = ?9 \
                 WHERE id = ?1 AND room = ?2 AND version = ?10";
            #[cfg(feature = "history-fault")]
            let sql = &crate::db::unguard(sql, &c);
            let done = exec(
                tx,
                sql,
                params![
                    id,
                    room,
                    c.status.as_str(),
                    c.assignee,
                    c.body,
                    c.result,
                    c.lease_seconds,
                    c.lease_expires_ts,
                    now,
                    c.expected_version
                ],
            )?;
            if done == 0 {
                return Ok(None);
            }
            let mut written = Written::default();
            if let Some(body) = &c.note {
                written.note_id = row(
                    tx,
                    "INSERT INTO notes (task_id, room, ts, author, body) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                    params![id, room, now, c.record.actor, body],
                    |r| r.get(0),
                )?;
            }
            let events = store_record(tx, room, c.record, &written)?;
            let task = load_task(tx, room, id)?.ok_or_else(|| {
                Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
            })?;
            Ok(Some((task, events)))
        })
        .await
    }

    async fn lapsed_leases(&self, now: i64) -> Result<Vec<(String, i64)>> {
        self.read(|c| {
            rows(
                c,
                "SELECT room, id FROM tasks WHERE lease_expires_ts IS NOT NULL AND lease_expires_ts <= ?1 \
                 AND status IN (?2, ?3) LIMIT 500",
                params![
                    now,
                    Status::LEASED[0].as_str(),
                    Status::LEASED[1].as_str()
                ],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
    }

    async fn notes(&self, task_id: i64) -> Result<Vec<Note>> {
        self.read(|c| {
            rows(
                c,
                "SELECT * FROM notes WHERE task_id = ?1 ORDER BY id",
                [task_id],
                |r| {
                    Ok(Note {
                        id: r.get("id")?,
                        task_id: r.get("task_id")?,
                        author: r.get("author")?,
                        ts: r.get("ts")?,
                        body: r.get("body")?,
                    })
                },
            )
        })
    }

    async fn my_mentions(
        &self,
        room: &str,
        agent: &str,
        since_id: i64,
        limit: i64,
    ) -> Result<Vec<Mention>> {
        self.read(|c| {
            rows(
                c,
                MY_MENTIONS,
                params![room, agent, super::mentions_after(since_id), limit],
                |r| {
                    Ok(Mention {
                        seq: r.get("seq")?,
                        message_id: r.get("message_id")?,
                        note_id: r.get("note_id")?,
                        task_id: r.get("task_id")?,
                        author: r.get("author")?,
                        ts: r.get("ts")?,
                        body: r.get("body")?,
                    })
                },
            )
        })
    }

    async fn search(&self, room: &str, words: &[String], limit: i64) -> Result<Vec<SearchHit>> {
        // Each word is quoted as an FTS5 string, so nothing in a query is
        // ever read as search syntax; the words must all appear, in the
        // body, in a row whose room key is the caller's room (see the
        // migration 0004): the index walks that room's rows only.
        let words = words
            .iter()
            .map(|w| format!("\"{}\"", w.replace('"', "")))
            .collect::<Vec<_>>()
            .join(" ");
        let query = format!(
            "room_key : \"r{}\" AND body : ({words})",
            hex::encode_upper(room.as_bytes())
        );
        let room = room.to_owned();
        // Full-text ranking grows with the room: off the async workers.
        self.read_blocking(move |c| {
            let found = within_search_time(c, |c| {
                rows(
                    c,
                    "SELECT s.rowid AS rid, snippet(search_fts, 0, '[', ']', '…', 12) AS snippet \
                     FROM search_fts s WHERE search_fts MATCH ?1 AND s.room = ?2 ORDER BY rank LIMIT ?3",
                    params![query, room, limit],
                    |r| Ok((r.get::<_, i64>("rid")?, r.get::<_, String>("snippet")?)),
                )
            })?;
            let mut hits = Vec::with_capacity(found.len());
            for (rid, snippet) in found {
                let (kind, id) = (rid % 4, rid / 4);
                let hit = match kind {
                    1 => row(c, "SELECT author, ts FROM messages WHERE id = ?1", [id], |m| {
                        Ok(SearchHit {
                            kind: "message".into(),
                            message_id: Some(id),
                            task_id: None,
                            note_id: None,
                            author: m.get("author")?,
                            ts: m.get("ts")?,
                            snippet: snippet.clone(),
                        })
                    })?,
                    2 => row(
                        c,
                        "SELECT created_by, created_ts FROM tasks WHERE id = ?1",
                        [id],
                        |t| {
                            Ok(SearchHit {
                                kind: "task".into(),
                                message_id: None,
                                task_id: Some(id),
                                note_id: None,
                                author: t.get("created_by")?,
                                ts: t.get("created_ts")?,
                                snippet: snippet.clone(),
                            })
                        },
                    )?,
                    _ => row(
                        c,
                        "SELECT task_id, author, ts FROM notes WHERE id = ?1",
                        [id],
                        |n| {
                            Ok(SearchHit {
                                kind: "note".into(),
                                message_id: None,
                                task_id: n.get("task_id")?,
                                note_id: Some(id),
                                author: n.get("author")?,
                                ts: n.get("ts")?,
                                snippet: snippet.clone(),
                            })
                        },
                    )?,
                };
                hits.extend(hit);
            }
            Ok(hits)
        })
        .await
    }
}

#[async_trait]
impl FileStore for SqliteStore {
    async fn put_file(&self, room: &str, f: &NewFile, record: Record) -> Result<(FileMeta, Event)> {
        self.write(|c| {
            let id: i64 = row(
                c,
                "INSERT INTO files (room, name, mime, size, sha256, content, author, ts, expires_ts, task_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id",
                params![
                    room,
                    f.name,
                    f.mime,
                    f.content.len() as i64,
                    f.sha256,
                    f.content,
                    record.actor,
                    record.now,
                    f.expires_at,
                    f.task_id
                ],
                |r| r.get(0),
            )?
            .ok_or_else(|| Error::internal(anyhow::anyhow!("INSERT … RETURNING gave no row")))?;
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
            let event = only(store_record(c, room, record, &written)?)?;
            Ok((meta, event))
        })
        .await
    }

    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>> {
        self.read(|c| {
            row(
                c,
                "SELECT * FROM files WHERE id = ?1 AND room = ?2 AND (expires_ts IS NULL OR expires_ts > ?3)",
                params![id, room, now],
                |r| Ok((file_from_row(r)?, r.get("content")?)),
            )
        })
    }

    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>> {
        self.read(|c| {
            row(
                c,
                "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
                 WHERE id = ?1 AND room = ?2 AND (expires_ts IS NULL OR expires_ts > ?3)",
                params![id, room, now],
                file_from_row,
            )
        })
    }

    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>> {
        self.read(|c| {
            row(
                c,
                "SELECT room FROM files WHERE id = ?1 AND (expires_ts IS NULL OR expires_ts > ?2)",
                params![id, now],
                |r| r.get(0),
            )
        })
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        self.read(|c| {
            rows(
                c,
                "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
                 WHERE room = ?1 AND (expires_ts IS NULL OR expires_ts > ?2) ORDER BY id DESC LIMIT ?3",
                params![room, now, limit],
                file_from_row,
            )
        })
    }

    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>> {
        self.write(|c| {
            if exec(
                c,
                "DELETE FROM files WHERE id = ?1 AND room = ?2",
                params![id, room],
            )? == 0
            {
                return Ok(None);
            }
            Ok(Some(only(store_record(
                c,
                room,
                record,
                &Written::default(),
            )?)?))
        })
        .await
    }
}

#[async_trait]
impl CopyStore for SqliteStore {
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>> {
        let t = Table::named(table)?;
        let sql = if t.keyed_by_id {
            format!(
                "SELECT {} FROM {} WHERE id > ?1 ORDER BY id LIMIT ?2",
                t.column_list(),
                t.name
            )
        } else {
            format!(
                "SELECT {} FROM {} ORDER BY {} LIMIT ?2 OFFSET ?1",
                t.column_list(),
                t.name,
                t.order_by()
            )
        };
        self.read_blocking(move |c| {
            let mut stmt = c.prepare(&sql)?;
            let mut found = stmt.query(params![after, limit])?;
            let mut out = Vec::new();
            while let Some(r) = found.next()? {
                let mut obj = serde_json::Map::new();
                for (col, ty) in t.columns {
                    let v = match ty {
                        Col::Int => json!(r.get::<_, Option<i64>>(*col)?),
                        Col::Text => json!(r.get::<_, Option<String>>(*col)?),
                        Col::Bool => json!(r.get::<_, Option<bool>>(*col)?),
                        Col::List => {
                            json!(r.get::<_, Option<String>>(*col)?.map(|s| parse_list(&s)))
                        }
                        Col::Json => r
                            .get::<_, Option<String>>(*col)?
                            .map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
                            .unwrap_or(Value::Null),
                        Col::Bytes => json!(r.get::<_, Option<Vec<u8>>>(*col)?.map(|b| {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.encode(b)
                        })),
                    };
                    obj.insert((*col).to_owned(), v);
                }
                out.push(Value::Object(obj));
            }
            Ok(out)
        })
        .await
    }

    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()> {
        use base64::Engine;
        let t = Table::named(table)?;
        let placeholders = (1..=t.columns.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({placeholders})",
            t.name,
            t.column_list()
        );
        // Converted before the transaction, so a bad row changes nothing.
        let mut batch = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(t.columns.len());
            for (col, ty) in t.columns {
                let v = &row[*col];
                let text = |s: Option<String>| s.map(SqlValue::Text).unwrap_or(SqlValue::Null);
                values.push(match ty {
                    Col::Int => v.as_i64().map(SqlValue::Integer).unwrap_or(SqlValue::Null),
                    Col::Text => text(v.as_str().map(str::to_owned)),
                    Col::Bool => v
                        .as_bool()
                        .map(|b| SqlValue::Integer(b.into()))
                        .unwrap_or(SqlValue::Null),
                    Col::List | Col::Json => text((!v.is_null()).then(|| v.to_string())),
                    Col::Bytes => match v.as_str() {
                        Some(s) => SqlValue::Blob(
                            base64::engine::general_purpose::STANDARD
                                .decode(s)
                                .map_err(|e| {
                                    Error::invalid(format!("bad bytes in {table}.{col}: {e}"))
                                })?,
                        ),
                        None => SqlValue::Null,
                    },
                });
            }
            batch.push(values);
        }
        self.write_blocking(move |c| {
            let mut stmt = c.prepare(&sql)?;
            for values in batch {
                stmt.execute(rusqlite::params_from_iter(values))?;
            }
            Ok(())
        })
        .await
    }

    async fn count_rows(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        let sql = format!("SELECT COUNT(*) FROM {}", t.name);
        self.read_blocking(move |c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
            .await
    }

    async fn id_high_water(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(0);
        }
        // AUTOINCREMENT remembers the highest id ever used in sqlite_sequence.
        let sql = format!(
            "SELECT MAX(COALESCE((SELECT MAX(id) FROM {0}), 0), \
             COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{0}'), 0))",
            t.name
        );
        self.read(|c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
    }

    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(());
        }
        self.write(|c| {
            let n = exec(
                c,
                "UPDATE sqlite_sequence SET seq = MAX(seq, ?2) WHERE name = ?1",
                params![t.name, high],
            )?;
            if n == 0 && high > 0 {
                exec(
                    c,
                    "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
                    params![t.name, high],
                )?;
            }
            Ok(())
        })
        .await
    }
}

#[async_trait]
impl OAuthStore for SqliteStore {
    // OAuth: see `oauth.rs` beside this file.
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
