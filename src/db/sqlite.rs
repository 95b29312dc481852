//! The SQLite backend: one file in WAL mode, a pool of long-lived reader
//! connections and a single writer connection. Writes queue for the writer
//! in process (no busy-wait between our own connections) and start with
//! `BEGIN IMMEDIATE`, so a transaction never upgrades a read lock and SQLite
//! serialises writers: event ids commit in id order.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};
use sqlx::{Connection, Row};

use super::*;
use crate::domain::board::{NewNote, Status};
use crate::error::Error;

pub struct SqliteStore {
    read: SqlitePool,
    write: SqlitePool,
    /// A connection of its own to watch `PRAGMA data_version`.
    watch: tokio::sync::Mutex<SqliteConnection>,
}

impl SqliteStore {
    /// Opens (creating if needed) and migrates the database file at `path`.
    pub async fn open(path: &str) -> anyhow::Result<SqliteStore> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL + NORMAL: a commit survives a crash of the process; only a
            // power loss can take the last commits back.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            .pragma("temp_store", "memory")
            .pragma("cache_size", "-16000");
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await
            .map_err(|e| anyhow::anyhow!("cannot open database {path}: {e}"))?;
        sqlx::migrate!("migrations/sqlite")
            .run(&write)
            .await
            .map_err(|e| anyhow::anyhow!("cannot migrate database {path}: {e}"))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone().read_only(true))
            .await?;
        let watch = SqliteConnection::connect_with(&options.read_only(true)).await?;
        Ok(SqliteStore {
            read,
            write,
            watch: tokio::sync::Mutex::new(watch),
        })
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.write.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Copies the database to `path` as one consistent snapshot, while
    /// writers keep going (`VACUUM INTO`).
    pub async fn backup(&self, path: &str) -> Result<()> {
        sqlx::query("VACUUM INTO $1")
            .bind(path)
            .execute(&self.read)
            .await?;
        Ok(())
    }

    /// `PRAGMA integrity_check` answers `ok`.
    pub async fn integrity_ok(&self) -> Result<bool> {
        let row = sqlx::query("PRAGMA integrity_check")
            .fetch_one(&self.read)
            .await?;
        Ok(row.get::<String, _>(0) == "ok")
    }
}

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn parse_list(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_default()
}

fn room_from_row(r: &SqliteRow) -> Room {
    Room {
        name: r.get("name"),
        description: r.get("description"),
        repo_url: r.get("repo_url"),
        onboarding_notes: r.get("onboarding_notes"),
        retention_days: r.get("retention_days"),
    }
}

fn token_from_row(r: &SqliteRow) -> TokenRecord {
    TokenRecord {
        id: r.get("id"),
        agent: r.get("agent"),
        room: r.get("room"),
        also_rooms: parse_list(r.get("also_rooms")),
        readonly: r.get("readonly"),
        admin: r.get("admin"),
        all_rooms: r.get("all_rooms"),
        lead: r.get("lead"),
        skills: parse_list(r.get("skills")),
        created_ts: r.get("created_ts"),
        revoked_ts: r.get("revoked_ts"),
        last_seen: r.try_get("last_seen").unwrap_or(None),
    }
}

fn message_from_row(r: &SqliteRow) -> Message {
    Message {
        id: r.get("id"),
        room: r.get("room"),
        ts: r.get("ts"),
        author: r.get("author"),
        body: r.get("body"),
        reply_to: r.get("reply_to"),
    }
}

fn event_from_row(r: &SqliteRow) -> Event {
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

fn file_from_row(r: &SqliteRow) -> FileMeta {
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

fn task_from_row(r: &SqliteRow) -> Result<Task> {
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

/// Fills `depends_on` and `blocked_by_unfinished` of `tasks` in one query.
async fn fill_deps(conn: &mut SqliteConnection, tasks: &mut [Task]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids =
        serde_json::to_string(&tasks.iter().map(|t| t.id).collect::<Vec<_>>()).unwrap_or_default();
    let rows = sqlx::query(
        "SELECT d.task_id, d.depends_on, t.status FROM task_deps d \
         LEFT JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id IN (SELECT value FROM json_each($1)) ORDER BY d.depends_on",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        let task_id: i64 = row.get(0);
        let dep: i64 = row.get(1);
        let status: Option<String> = row.get(2);
        if let Some(task) = tasks.iter_mut().find(|t| t.id == task_id) {
            task.depends_on.push(dep);
            if status.as_deref() != Some("done") {
                task.blocked_by_unfinished.push(dep);
            }
        }
    }
    Ok(())
}

async fn load_task(conn: &mut SqliteConnection, room: &str, id: i64) -> Result<Option<Task>> {
    let sql = const_format_task("SELECT {} FROM tasks WHERE id = $1 AND room = $2");
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .bind(room)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let mut tasks = [task_from_row(&row)?];
    fill_deps(conn, &mut tasks).await?;
    let [task] = tasks;
    Ok(Some(task))
}

fn const_format_task(template: &str) -> String {
    template.replacen("{}", TASK_COLUMNS, 1)
}

async fn insert_event(
    conn: &mut SqliteConnection,
    room: &str,
    actor: &str,
    now: i64,
    e: &NewEvent,
) -> Result<Event> {
    let detail = e.detail.to_string();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(room)
    .bind(now)
    .bind(e.kind)
    .bind(actor)
    .bind(e.task_id)
    .bind(e.message_id)
    .bind(&detail)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Event {
        id,
        room: room.to_owned(),
        ts: now,
        kind: e.kind.to_owned(),
        actor: actor.to_owned(),
        task_id: e.task_id,
        message_id: e.message_id,
        detail: e.detail.clone(),
    })
}

async fn insert_audit_row(
    conn: &mut SqliteConnection,
    audit: &Audit,
    room: &str,
    task_id: Option<i64>,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES ($1, $2, $3, $4, $5, 'ok')",
    )
    .bind(now)
    .bind(&audit.agent)
    .bind(room)
    .bind(audit.tool)
    .bind(task_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn insert_mentions(
    conn: &mut SqliteConnection,
    room: &str,
    agents: &[String],
    message_id: Option<i64>,
    note_id: Option<i64>,
    task_id: Option<i64>,
    author: &str,
    body: &str,
    now: i64,
) -> Result<()> {
    for agent in agents {
        sqlx::query(
            "INSERT INTO mentions (room, agent, message_id, note_id, task_id, author, ts, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(room)
        .bind(agent)
        .bind(message_id)
        .bind(note_id)
        .bind(task_id)
        .bind(author)
        .bind(now)
        .bind(body)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
async fn prune_room(conn: &mut SqliteConnection, room: &str, cutoff: i64) -> Result<PruneCount> {
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

#[async_trait]
impl Store for SqliteStore {
    async fn backup(&self, path: &str) -> Result<()> {
        SqliteStore::backup(self, path).await
    }

    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    async fn tokens_generation(&self) -> Result<i64> {
        let mut conn = self.watch.lock().await;
        Ok(sqlx::query_scalar("PRAGMA data_version")
            .fetch_one(&mut *conn)
            .await?)
    }

    async fn create_room(&self, room: &Room) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&room.name)
        .bind(&room.description)
        .bind(&room.repo_url)
        .bind(&room.onboarding_notes)
        .bind(room.retention_days)
        .bind(crate::clock::now_ms())
        .execute(&self.write)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        let row = sqlx::query("SELECT * FROM rooms WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.as_ref().map(room_from_row))
    }

    async fn list_rooms(&self) -> Result<Vec<RoomSummary>> {
        let rows = sqlx::query(
            "SELECT r.*, \
             (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status IN ('pending','in_progress','blocked','in_review')) AS open_tasks, \
             (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
             (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > $1)) AS files \
             FROM rooms r ORDER BY r.name",
        )
        .bind(crate::clock::now_ms())
        .fetch_all(&self.read)
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
        audit: Option<&Audit>,
    ) -> Result<Option<(Room, Event)>> {
        let now = crate::clock::now_ms();
        let mut tx = self.begin().await?;
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
        .await?;
        let Some(row) = row else { return Ok(None) };
        let updated = room_from_row(&row);
        let mut fields = Vec::new();
        if info.description.is_some() {
            fields.push("description");
        }
        if info.repo_url.is_some() {
            fields.push("repo_url");
        }
        if info.onboarding_notes.is_some() {
            fields.push("onboarding_notes");
        }
        let actor = audit.map(|a| a.agent.as_str()).unwrap_or("(admin)");
        let event = insert_event(
            &mut tx,
            room,
            actor,
            now,
            &NewEvent {
                kind: "room_info_updated",
                task_id: None,
                message_id: None,
                detail: json!({"fields": fields}),
            },
        )
        .await?;
        if let Some(audit) = audit {
            insert_audit_row(&mut tx, audit, room, None, now).await?;
        }
        tx.commit().await?;
        Ok(Some((updated, event)))
    }

    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        audit: Option<&Audit>,
        now: i64,
    ) -> Result<Option<(Event, PruneCount)>> {
        let mut tx = self.begin().await?;
        let done = sqlx::query("UPDATE rooms SET retention_days = $2 WHERE name = $1")
            .bind(room)
            .bind(days)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let pruned = if days > 0 {
            prune_room(&mut tx, room, now - days * 86_400_000).await?
        } else {
            PruneCount::default()
        };
        let actor = audit.map(|a| a.agent.as_str()).unwrap_or("(admin)");
        let event = insert_event(
            &mut tx,
            room,
            actor,
            now,
            &NewEvent {
                kind: "retention_set",
                task_id: None,
                message_id: None,
                detail: json!({"days": days, "pruned": pruned}),
            },
        )
        .await?;
        if let Some(audit) = audit {
            insert_audit_row(&mut tx, audit, room, None, now).await?;
        }
        tx.commit().await?;
        Ok(Some((event, pruned)))
    }

    async fn delete_room(&self, room: &str) -> Result<bool> {
        let mut tx = self.begin().await?;
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
        ] {
            sqlx::query(sql).bind(room).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM rooms WHERE name = $1")
            .bind(room)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let rooms: Vec<(String, i64)> =
            sqlx::query_as("SELECT name, retention_days FROM rooms WHERE retention_days > 0")
                .fetch_all(&self.read)
                .await?;
        let mut total = PruneCount::default();
        for (room, days) in rooms {
            let mut tx = self.begin().await?;
            let n = prune_room(&mut tx, &room, now - days * 86_400_000).await?;
            tx.commit().await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        total.files +=
            sqlx::query("DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= $1")
                .bind(now)
                .execute(&self.write)
                .await?
                .rows_affected();
        Ok(total)
    }

    async fn insert_token(&self, t: &NewToken) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO tokens (hash, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(&t.hash)
        .bind(&t.agent)
        .bind(&t.room)
        .bind(json_list(&t.also_rooms))
        .bind(t.readonly)
        .bind(t.admin)
        .bind(t.all_rooms)
        .bind(t.lead)
        .bind(json_list(&t.skills))
        .bind(crate::clock::now_ms())
        .fetch_one(&self.write)
        .await?)
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>> {
        let row = sqlx::query("SELECT * FROM tokens WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.as_ref().map(token_from_row))
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT t.*, (SELECT MAX(p.last_seen_ts) FROM presence p WHERE p.agent = t.agent) AS last_seen \
             FROM tokens t ORDER BY t.id",
        )
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(token_from_row).collect())
    }

    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64> {
        Ok(
            sqlx::query(
                "UPDATE tokens SET revoked_ts = $2 WHERE agent = $1 AND revoked_ts IS NULL",
            )
            .bind(agent)
            .bind(now)
            .execute(&self.write)
            .await?
            .rows_affected(),
        )
    }

    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM tokens WHERE revoked_ts IS NOT NULL AND revoked_ts <= $1")
                .bind(revoked_before)
                .execute(&self.write)
                .await?
                .rows_affected(),
        )
    }

    async fn members(&self, room: &str) -> Result<Vec<Member>> {
        let rows = sqlx::query(
            "SELECT t.agent, MAX(t.lead) AS lead, MIN(t.readonly) AS readonly, MAX(t.admin) AS admin, \
             t.skills, (SELECT p.last_seen_ts FROM presence p WHERE p.room = $1 AND p.agent = t.agent) AS last_seen \
             FROM tokens t \
             WHERE t.revoked_ts IS NULL AND (t.room = $1 \
                OR EXISTS (SELECT 1 FROM json_each(t.also_rooms) j WHERE j.value = $1) \
                OR (t.all_rooms = 1 AND EXISTS (SELECT 1 FROM presence p WHERE p.room = $1 AND p.agent = t.agent))) \
             GROUP BY t.agent ORDER BY t.agent",
        )
        .bind(room)
        .fetch_all(&self.read)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Member {
                agent: r.get("agent"),
                lead: r.get("lead"),
                readonly: r.get("readonly"),
                admin: r.get("admin"),
                skills: parse_list(r.get("skills")),
                last_seen: r.get("last_seen"),
            })
            .collect())
    }

    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()> {
        let mut tx = self.begin().await?;
        for (room, agent, ts) in seen {
            sqlx::query(
                "INSERT INTO presence (room, agent, last_seen_ts) VALUES ($1, $2, $3) \
                 ON CONFLICT (room, agent) DO UPDATE SET last_seen_ts = MAX(last_seen_ts, excluded.last_seen_ts)",
            )
            .bind(room)
            .bind(agent)
            .bind(ts)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn post_message(
        &self,
        room: &str,
        author: &str,
        body: &str,
        reply_to: Option<i64>,
        mentions: &[String],
        audit: &Audit,
    ) -> Result<(Message, Event)> {
        let now = crate::clock::now_ms();
        let mut tx = self.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO messages (room, ts, author, body, reply_to) VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(room)
        .bind(now)
        .bind(author)
        .bind(body)
        .bind(reply_to)
        .fetch_one(&mut *tx)
        .await?;
        insert_mentions(
            &mut tx,
            room,
            mentions,
            Some(id),
            None,
            None,
            author,
            body,
            now,
        )
        .await?;
        let event = insert_event(
            &mut tx,
            room,
            author,
            now,
            &NewEvent {
                kind: "message",
                task_id: None,
                message_id: Some(id),
                detail: json!({"body": body, "reply_to": reply_to, "mentions": mentions}),
            },
        )
        .await?;
        insert_audit_row(&mut tx, audit, room, None, now).await?;
        tx.commit().await?;
        Ok((
            Message {
                id,
                room: room.to_owned(),
                ts: now,
                author: author.to_owned(),
                body: body.to_owned(),
                reply_to,
            },
            event,
        ))
    }

    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>> {
        let rows =
            sqlx::query("SELECT * FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3")
                .bind(room)
                .bind(since_id)
                .bind(limit)
                .fetch_all(&self.read)
                .await?;
        Ok(rows.iter().map(message_from_row).collect())
    }

    async fn message_room(&self, id: i64) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT room FROM messages WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.read)
                .await?,
        )
    }

    async fn latest_message_id(&self, room: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM messages WHERE room = $1")
                .bind(room)
                .fetch_one(&self.read)
                .await?,
        )
    }

    async fn read_events(&self, room: &str, f: &EventFilter) -> Result<Vec<Event>> {
        let rows = sqlx::query(
            "SELECT * FROM events WHERE room = $1 AND id > $2 \
             AND ($3 IS NULL OR kind = $3) AND ($4 IS NULL OR task_id = $4) \
             ORDER BY id LIMIT $5",
        )
        .bind(room)
        .bind(f.since_id)
        .bind(&f.kind)
        .bind(f.task_id)
        .bind(f.limit)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(event_from_row).collect())
    }

    async fn latest_event_id(&self, room: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events WHERE room = $1")
                .bind(room)
                .fetch_one(&self.read)
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
        // A peek only reads; an advancing read moves the cursor in the same
        // transaction as the read, so two concurrent reads never both get a page.
        let mut tx = if advance {
            self.begin().await?
        } else {
            self.read.begin().await?
        };
        let cursor: Option<i64> =
            sqlx::query_scalar("SELECT event_id FROM cursors WHERE room = $1 AND agent = $2")
                .bind(room)
                .bind(agent)
                .fetch_optional(&mut *tx)
                .await?;
        let since = cursor.unwrap_or(0);
        let rows = sqlx::query(
            "SELECT * FROM events WHERE room = $1 AND id > $2 AND ($3 = 0 OR actor <> $4) ORDER BY id LIMIT $5",
        )
        .bind(room)
        .bind(since)
        .bind(skip_own)
        .bind(agent)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let events: Vec<Event> = rows.iter().map(event_from_row).collect();
        // The cursor moves past the page; when own events are skipped and the
        // page is not full, it moves past everything seen (own events included).
        let new_cursor = if (events.len() as i64) < limit {
            sqlx::query_scalar("SELECT COALESCE(MAX(id), $2) FROM events WHERE room = $1")
                .bind(room)
                .bind(since)
                .fetch_one(&mut *tx)
                .await?
        } else {
            events.last().map(|e| e.id).unwrap_or(since)
        };
        let remaining: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM events WHERE room = $1 AND id > $2 AND ($3 = 0 OR actor <> $4)",
        )
        .bind(room)
        .bind(new_cursor)
        .bind(skip_own)
        .bind(agent)
        .fetch_one(&mut *tx)
        .await?;
        if advance {
            sqlx::query(
                "INSERT INTO cursors (room, agent, event_id) VALUES ($1, $2, $3) \
                 ON CONFLICT (room, agent) DO UPDATE SET event_id = MAX(event_id, excluded.event_id)",
            )
            .bind(room)
            .bind(agent)
            .bind(new_cursor)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        }
        Ok(EventPage {
            since,
            first_look: cursor.is_none(),
            events,
            remaining,
        })
    }

    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM events WHERE room = $1 AND actor <> $2 AND id > \
             COALESCE((SELECT event_id FROM cursors WHERE room = $1 AND agent = $2), 0) \
             ORDER BY id LIMIT 1",
        )
        .bind(room)
        .bind(agent)
        .fetch_optional(&self.read)
        .await?)
    }

    async fn cursor(&self, room: &str, agent: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT event_id FROM cursors WHERE room = $1 AND agent = $2")
                .bind(room)
                .bind(agent)
                .fetch_optional(&self.read)
                .await?
                .unwrap_or(0),
        )
    }

    async fn insert_audit(&self, rows: &[AuditRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        for r in rows {
            sqlx::query(
                "INSERT INTO audit (ts, agent, room, tool, task_id, outcome) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(r.ts)
            .bind(&r.agent)
            .bind(&r.room)
            .bind(&r.tool)
            .bind(r.task_id)
            .bind(&r.outcome)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn audit_count(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM audit")
            .fetch_one(&self.read)
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
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>> {
        let rows = sqlx::query("SELECT * FROM admin_log ORDER BY id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.read)
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

    async fn create_task(
        &self,
        room: &str,
        t: &NewTask,
        audit: &Audit,
    ) -> Result<(Task, Vec<Event>)> {
        let mut tx = self.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO tasks (room, title, body, status, assignee, version, created_by, created_ts, updated_ts, \
             priority, required_skill, needs_review) \
             VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7, $8, $9, $10) RETURNING id",
        )
        .bind(room)
        .bind(&t.title)
        .bind(&t.body)
        .bind(t.status.as_str())
        .bind(&t.assignee)
        .bind(&t.created_by)
        .bind(t.now)
        .bind(&t.priority)
        .bind(&t.required_skill)
        .bind(t.needs_review)
        .fetch_one(&mut *tx)
        .await?;
        for dep in &t.depends_on {
            sqlx::query("INSERT INTO task_deps (task_id, depends_on) VALUES ($1, $2)")
                .bind(id)
                .bind(dep)
                .execute(&mut *tx)
                .await?;
        }
        let task = load_task(&mut tx, room, id).await?.ok_or_else(|| {
            Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
        })?;
        let base = json!({"title": task.title, "status": task.status, "assignee": task.assignee, "version": 1});
        let mut created = base.clone();
        created["priority"] = json!(task.priority);
        created["depends_on"] = json!(task.depends_on);
        let mut events = vec![
            insert_event(
                &mut tx,
                room,
                &t.created_by,
                t.now,
                &NewEvent {
                    kind: "task_created",
                    task_id: Some(id),
                    message_id: None,
                    detail: created,
                },
            )
            .await?,
        ];
        if t.claimed {
            events.push(
                insert_event(
                    &mut tx,
                    room,
                    &t.created_by,
                    t.now,
                    &NewEvent {
                        kind: "task_claimed",
                        task_id: Some(id),
                        message_id: None,
                        detail: base,
                    },
                )
                .await?,
            );
        }
        insert_audit_row(&mut tx, audit, room, Some(id), t.now).await?;
        tx.commit().await?;
        Ok((task, events))
    }

    async fn get_task(&self, room: &str, id: i64) -> Result<Option<Task>> {
        let mut conn = self.read.acquire().await?;
        load_task(&mut conn, room, id).await
    }

    async fn list_tasks(&self, room: &str, q: &TaskQuery) -> Result<Vec<Task>> {
        let statuses =
            serde_json::to_string(&q.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>())
                .unwrap_or_default();
        let sql = const_format_task(
            "SELECT {} FROM tasks WHERE room = $1 \
             AND ($2 = '[]' OR status IN (SELECT value FROM json_each($2))) \
             AND ($3 IS NULL OR assignee = $3) AND ($4 IS NULL OR id < $4) \
             ORDER BY id DESC LIMIT $5",
        );
        let mut conn = self.read.acquire().await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(room)
            .bind(statuses)
            .bind(&q.assignee)
            .bind(q.before_id)
            .bind(q.limit)
            .fetch_all(&mut *conn)
            .await?;
        let mut tasks = rows.iter().map(task_from_row).collect::<Result<Vec<_>>>()?;
        fill_deps(&mut conn, &mut tasks).await?;
        Ok(tasks)
    }

    async fn task_counts(&self, room: &str) -> Result<TaskCounts> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM tasks WHERE room = $1 GROUP BY status")
                .bind(room)
                .fetch_all(&self.read)
                .await?;
        Ok(TaskCounts::from_rows(rows))
    }

    async fn apply_task_change(
        &self,
        room: &str,
        id: i64,
        c: &TaskChange,
        audit: Option<&Audit>,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(
            "UPDATE tasks SET status = $3, assignee = $4, body = $5, result = $6, lease_seconds = $7, \
             lease_expires_ts = $8, version = version + 1, updated_ts = $9 \
             WHERE id = $1 AND room = $2 AND version = $10",
        )
        .bind(id)
        .bind(room)
        .bind(c.status.as_str())
        .bind(&c.assignee)
        .bind(&c.body)
        .bind(&c.result)
        .bind(c.lease_seconds)
        .bind(c.lease_expires_ts)
        .bind(c.now)
        .bind(c.expected_version)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let actor = audit
            .map(|a| a.agent.clone())
            .unwrap_or_else(|| crate::domain::board::SERVER_ACTOR.to_owned());
        let note_id = match &c.note {
            Some(NewNote {
                author,
                body,
                mentions,
            }) => {
                let note_id: i64 = sqlx::query_scalar(
                    "INSERT INTO notes (task_id, room, ts, author, body) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                )
                .bind(id)
                .bind(room)
                .bind(c.now)
                .bind(author)
                .bind(body)
                .fetch_one(&mut *tx)
                .await?;
                insert_mentions(
                    &mut tx,
                    room,
                    mentions,
                    None,
                    Some(note_id),
                    Some(id),
                    author,
                    body,
                    c.now,
                )
                .await?;
                Some(note_id)
            }
            None => None,
        };
        let mut events = Vec::with_capacity(c.events.len());
        for e in &c.events {
            let mut e = e.clone();
            if e.kind == "note_added"
                && let (Some(note_id), Some(note)) = (note_id, &c.note)
            {
                e.detail["note_id"] = json!(note_id);
                e.detail["body"] = json!(note.body);
                e.detail["mentions"] = json!(note.mentions);
            }
            events.push(insert_event(&mut tx, room, &actor, c.now, &e).await?);
        }
        if let Some(audit) = audit {
            insert_audit_row(&mut tx, audit, room, Some(id), c.now).await?;
        }
        let task = load_task(&mut tx, room, id).await?.ok_or_else(|| {
            Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
        })?;
        tx.commit().await?;
        Ok(Some((task, events)))
    }

    async fn lapsed_leases(&self, now: i64) -> Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT room, id FROM tasks WHERE lease_expires_ts IS NOT NULL AND lease_expires_ts <= $1 \
             AND status IN ('in_progress', 'blocked') LIMIT 500",
        )
        .bind(now)
        .fetch_all(&self.read)
        .await?)
    }

    async fn notes(&self, task_id: i64) -> Result<Vec<Note>> {
        let rows = sqlx::query("SELECT * FROM notes WHERE task_id = $1 ORDER BY id")
            .bind(task_id)
            .fetch_all(&self.read)
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
            "SELECT * FROM mentions WHERE room = $1 AND agent = $2 AND id > $3 ORDER BY id LIMIT $4",
        )
        .bind(room)
        .bind(agent)
        .bind(since_id)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        Ok(rows
            .iter()
            .map(|r| Mention {
                id: r.get("id"),
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
        // Each word is quoted as an FTS5 string, so nothing in a query is
        // ever read as search syntax; the words must all appear.
        let query = words
            .iter()
            .map(|w| format!("\"{}\"", w.replace('"', "")))
            .collect::<Vec<_>>()
            .join(" ");
        let rows = sqlx::query(
            "SELECT s.rowid AS rid, snippet(search_fts, 0, '[', ']', '…', 12) AS snippet \
             FROM search_fts s WHERE search_fts MATCH $1 AND s.room = $2 ORDER BY rank LIMIT $3",
        )
        .bind(&query)
        .bind(room)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        let mut hits = Vec::with_capacity(rows.len());
        for r in rows {
            let rid: i64 = r.get("rid");
            let snippet: String = r.get("snippet");
            let (kind, id) = (rid % 4, rid / 4);
            let hit = match kind {
                1 => sqlx::query("SELECT author, ts FROM messages WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?
                    .map(|m| SearchHit {
                        kind: "message".into(),
                        message_id: Some(id),
                        task_id: None,
                        note_id: None,
                        author: m.get("author"),
                        ts: m.get("ts"),
                        snippet,
                    }),
                2 => sqlx::query("SELECT created_by, created_ts FROM tasks WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?
                    .map(|t| SearchHit {
                        kind: "task".into(),
                        message_id: None,
                        task_id: Some(id),
                        note_id: None,
                        author: t.get("created_by"),
                        ts: t.get("created_ts"),
                        snippet,
                    }),
                _ => sqlx::query("SELECT task_id, author, ts FROM notes WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.read)
                    .await?
                    .map(|n| SearchHit {
                        kind: "note".into(),
                        message_id: None,
                        task_id: n.get("task_id"),
                        note_id: Some(id),
                        author: n.get("author"),
                        ts: n.get("ts"),
                        snippet,
                    }),
            };
            hits.extend(hit);
        }
        Ok(hits)
    }

    async fn put_file(&self, room: &str, f: &NewFile, audit: &Audit) -> Result<(FileMeta, Event)> {
        let mut tx = self.begin().await?;
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
        .bind(&f.author)
        .bind(f.now)
        .bind(f.expires_at)
        .bind(f.task_id)
        .fetch_one(&mut *tx)
        .await?;
        let meta = FileMeta {
            file_id: id,
            name: f.name.clone(),
            sha256: f.sha256.clone(),
            size: f.content.len() as i64,
            mime: f.mime.clone(),
            author: f.author.clone(),
            ts: f.now,
            expires_at: f.expires_at,
            task_id: f.task_id,
        };
        let event = insert_event(
            &mut tx,
            room,
            &f.author,
            f.now,
            &NewEvent {
                kind: "file_added",
                task_id: f.task_id,
                message_id: None,
                detail: json!({"file_id": id, "name": f.name, "size": meta.size, "sha256": f.sha256}),
            },
        )
        .await?;
        insert_audit_row(&mut tx, audit, room, f.task_id, f.now).await?;
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
        .fetch_optional(&self.read)
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
        .fetch_optional(&self.read)
        .await?;
        Ok(row.as_ref().map(file_from_row))
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        let rows = sqlx::query(
            "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
             WHERE room = $1 AND (expires_ts IS NULL OR expires_ts > $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(room)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(file_from_row).collect())
    }

    async fn delete_file(&self, room: &str, id: i64, audit: &Audit) -> Result<Option<Event>> {
        let now = crate::clock::now_ms();
        let mut tx = self.begin().await?;
        let row =
            sqlx::query("DELETE FROM files WHERE id = $1 AND room = $2 RETURNING name, task_id")
                .bind(id)
                .bind(room)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(row) = row else { return Ok(None) };
        let name: String = row.get("name");
        let task_id: Option<i64> = row.get("task_id");
        let event = insert_event(
            &mut tx,
            room,
            &audit.agent,
            now,
            &NewEvent {
                kind: "file_deleted",
                task_id,
                message_id: None,
                detail: json!({"file_id": id, "name": name}),
            },
        )
        .await?;
        insert_audit_row(&mut tx, audit, room, task_id, now).await?;
        tx.commit().await?;
        Ok(Some(event))
    }

    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>> {
        let t = Table::named(table)?;
        let sql = if t.keyed_by_id {
            format!(
                "SELECT {} FROM {table} WHERE id > $1 ORDER BY id LIMIT $2",
                t.column_list()
            )
        } else {
            format!(
                "SELECT {} FROM {table} ORDER BY {} LIMIT $2 OFFSET $1",
                t.column_list(),
                t.order_by()
            )
        };
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut obj = serde_json::Map::new();
            for (c, ty) in t.columns {
                let v = match ty {
                    Col::Int => json!(r.try_get::<Option<i64>, _>(*c)?),
                    Col::Text => json!(r.try_get::<Option<String>, _>(*c)?),
                    Col::Bool => json!(r.try_get::<Option<bool>, _>(*c)?),
                    Col::List => json!(r.try_get::<Option<String>, _>(*c)?.map(|s| parse_list(&s))),
                    Col::Json => r
                        .try_get::<Option<String>, _>(*c)?
                        .map(|s| serde_json::from_str(&s).unwrap_or(Value::Null))
                        .unwrap_or(Value::Null),
                    Col::Bytes => json!(r.try_get::<Option<Vec<u8>>, _>(*c)?.map(|b| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.encode(b)
                    })),
                };
                obj.insert((*c).to_owned(), v);
            }
            out.push(Value::Object(obj));
        }
        Ok(out)
    }

    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()> {
        use base64::Engine;
        let t = Table::named(table)?;
        let placeholders = (1..=t.columns.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {table} ({}) VALUES ({placeholders})",
            t.column_list()
        );
        let mut tx = self.begin().await?;
        for row in rows {
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
            for (c, ty) in t.columns {
                let v = &row[*c];
                q = match ty {
                    Col::Int => q.bind(v.as_i64()),
                    Col::Text => q.bind(v.as_str().map(str::to_owned)),
                    Col::Bool => q.bind(v.as_bool()),
                    Col::List | Col::Json => q.bind((!v.is_null()).then(|| v.to_string())),
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
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn count_rows(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {}",
            t.name
        )))
        .fetch_one(&self.read)
        .await?)
    }

    async fn id_high_water(&self, table: &str) -> Result<i64> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(0);
        }
        // AUTOINCREMENT remembers the highest id ever used in sqlite_sequence.
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT MAX(COALESCE((SELECT MAX(id) FROM {0}), 0), \
             COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{0}'), 0))",
            t.name
        )))
        .fetch_one(&self.read)
        .await?)
    }

    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()> {
        let t = Table::named(table)?;
        if !t.keyed_by_id {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        let done = sqlx::query("UPDATE sqlite_sequence SET seq = MAX(seq, $2) WHERE name = $1")
            .bind(t.name)
            .bind(high)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 && high > 0 {
            sqlx::query("INSERT INTO sqlite_sequence (name, seq) VALUES ($1, $2)")
                .bind(t.name)
                .bind(high)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
