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
//!
//! This file holds the store, its connections and the writes every area
//! shares; each area of the port has its own file (`rooms.rs`, `tokens.rs`,
//! `chat.rs`, `events.rs`, `board.rs`, `files.rs`, `audit.rs`, `copy.rs`,
//! `oauth.rs`, `webhooks.rs`); `rows.rs` reads a row for the mapping both
//! backends share (`db/rows.rs`).

mod audit;
mod board;
mod chat;
mod checkpoint;
mod copy;
mod events;
mod files;
mod oauth;
mod rooms;
mod rows;
mod tokens;
mod webhooks;
mod writer;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Params, Row, params};
use serde_json::{Value, json};

use super::*;
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
        let conn = open(false)?;
        // Rows written by anything but the writer (none should be) are
        // indexed now, before any search.
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {INDEX_PENDING} COMMIT;"))
            .map_err(|e| anyhow::anyhow!("cannot index database {path}: {e}"))?;
        let writer = Writer::new(conn).before_commit(INDEX_PENDING);
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

    /// [`rows`] on a reader connection, in place.
    fn read_rows<T: FromCols>(&self, sql: &str, params: impl Params) -> Result<Vec<T>> {
        self.read(|c| rows(c, sql, params))
    }

    /// [`row`] on a reader connection, in place.
    fn read_row<T: FromCols>(&self, sql: &str, params: impl Params) -> Result<Option<T>> {
        self.read(|c| row(c, sql, params))
    }

    /// One statement as a write of its own; the rows it changed.
    async fn write_exec(&self, sql: &str, params: impl Params + Send) -> Result<u64> {
        self.write(|c| exec(c, sql, params)).await
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
/// Moves the text of the rows written since the last commit into the
/// full-text index, one FTS5 segment for a whole batch (migration 0012 says
/// why it waits for the commit).
const INDEX_PENDING: &str = "INSERT OR REPLACE INTO search_fts (rowid, body, room_key, room) \
     SELECT id, body, room_key, room FROM search_pending ORDER BY id; \
     DELETE FROM search_pending;";

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

/// Runs a cached statement; every row, each read as a `T`.
fn rows<T: FromCols>(c: &Connection, sql: &str, params: impl Params) -> Result<Vec<T>> {
    let mut stmt = c.prepare_cached(sql)?;
    let found = stmt.query_map(params, |r| T::from_cols(r))?;
    Ok(found.collect::<rusqlite::Result<Vec<T>>>()?)
}

/// Runs a cached statement; its first row read as a `T`, if any.
fn row<T: FromCols>(c: &Connection, sql: &str, params: impl Params) -> Result<Option<T>> {
    let mut stmt = c.prepare_cached(sql)?;
    Ok(stmt.query_row(params, |r| T::from_cols(r)).optional()?)
}

/// Runs a cached `INSERT … RETURNING`; the row it returned.
fn insert<T: FromCols>(c: &Connection, sql: &str, params: impl Params) -> Result<T> {
    row(c, sql, params)?
        .ok_or_else(|| Error::internal(anyhow::anyhow!("INSERT … RETURNING gave no row")))
}

/// Runs a cached statement that returns no rows; gives the rows changed.
fn exec(c: &Connection, sql: &str, params: impl Params) -> Result<u64> {
    let mut stmt = c.prepare_cached(sql)?;
    Ok(stmt.execute(params)? as u64)
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
    let (now, task_id) = (record.now, record.task_id);
    // A mention row points at its message or note. Its `seq` places it
    // among the room's messages for `since_id`: a message's own id, or for
    // a note the room's newest message id when the note was written.
    for agent in &record.mentions {
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
    let mut stored = Vec::with_capacity(record.events.len());
    let mut stmt = c.prepare_cached(
        "INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
    )?;
    for e in record.events {
        let id: i64 = stmt.query_row(
            params![
                room,
                now,
                e.kind.as_str(),
                record.actor,
                e.task_id,
                e.message_id,
                e.detail.to_string()
            ],
            |r| r.get(0),
        )?;
        stored.push(stored_event(room, now, &record.actor, e, id));
    }
    if let Some(tool) = record.audit_tool {
        exec(
            c,
            "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES (?1, ?2, ?3, ?4, ?5, 'ok')",
            params![now, record.actor, room, tool, task_id],
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

#[async_trait]
impl Store for SqliteStore {
    async fn backup(&self, path: &str) -> Result<()> {
        SqliteStore::backup(self, path).await
    }

    async fn health(&self) -> Result<()> {
        self.read_row::<i64>("SELECT 1", [])?;
        Ok(())
    }
}
