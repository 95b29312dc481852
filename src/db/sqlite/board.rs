//! Tasks, notes, mentions and search on SQLite.

use super::*;

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
    )?;
    attach_deps(tasks, deps);
    Ok(())
}

fn load_task(c: &Connection, room: &str, id: i64) -> Result<Option<Task>> {
    let sql = select!(task_columns, " FROM tasks WHERE id = ?1 AND room = ?2");
    let Some(found) = row(c, sql, params![id, room])? else {
        return Ok(None);
    };
    let mut tasks = [found];
    fill_deps(c, &mut tasks)?;
    let [task] = tasks;
    Ok(Some(task))
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
/// ([`crate::db::mentions_after`] gives the bound).
const MY_MENTIONS: &str = "SELECT x.seq, x.message_id, x.note_id, x.task_id, \
        COALESCE(m.author, n.author) AS author, COALESCE(m.ts, n.ts) AS ts, COALESCE(m.body, n.body) AS body \
     FROM mentions x LEFT JOIN messages m ON m.id = x.message_id LEFT JOIN notes n ON n.id = x.note_id \
     WHERE x.room = ?1 AND x.agent = ?2 AND x.seq > ?3 AND (m.id IS NOT NULL OR n.id IS NOT NULL) \
     ORDER BY x.seq, x.id LIMIT ?4";

#[async_trait]
impl BoardStore for SqliteStore {
    async fn create_task(&self, room: &str, t: NewTask) -> Result<(Task, Vec<Event>)> {
        self.write(|c| {
            let id: i64 = insert(
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
                    t.record.now,
                    t.priority,
                    t.required_skill,
                    t.needs_review
                ],
            )?;
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
            let events = store_record(c, room, t.record, &written)?;
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
        let sql = select!(
            task_columns,
            " FROM tasks WHERE room = ?1 \
             AND (?2 = '[]' OR status IN (SELECT value FROM json_each(?2))) \
             AND (?3 IS NULL OR assignee = ?3) AND id < ?4 \
             ORDER BY id DESC LIMIT ?5"
        );
        self.read(|c| {
            let tx = c.unchecked_transaction()?;
            let mut tasks = rows(
                &tx,
                sql,
                params![
                    room,
                    statuses,
                    q.assignee,
                    q.before_id.unwrap_or(i64::MAX),
                    q.limit
                ],
            )?;
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
            )?))
        })
    }

    async fn apply_task_change(
        &self,
        room: &str,
        c: TaskChange,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        self.write(|tx| {
            let (id, now) = (c.task_id, c.record.now);
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
        self.read_rows(
                "SELECT room, id FROM tasks WHERE lease_expires_ts IS NOT NULL AND lease_expires_ts <= ?1 \
                 AND status IN (?2, ?3) LIMIT 500",
                params![
                    now,
                    Status::LEASED[0].as_str(),
                    Status::LEASED[1].as_str()
                ],
        )
    }

    async fn notes(&self, task_id: i64) -> Result<Vec<Note>> {
        self.read_rows(
            select!(note_columns, " FROM notes WHERE task_id = ?1 ORDER BY id"),
            [task_id],
        )
    }

    async fn my_mentions(&self, room: &str, agent: &str, page: Page) -> Result<Vec<Mention>> {
        self.read_rows(
            MY_MENTIONS,
            params![
                room,
                agent,
                super::mentions_after(page.since_id),
                page.limit
            ],
        )
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
            let found: Vec<(i64, String)> = within_search_time(c, |c| {
                rows(
                    c,
                    "SELECT s.rowid AS rid, snippet(search_fts, 0, '[', ']', '…', 12) AS snippet \
                     FROM search_fts s WHERE search_fts MATCH ?1 AND s.room = ?2 ORDER BY rank LIMIT ?3",
                    params![query, room, limit],
                )
            })?;
            let mut hits = Vec::with_capacity(found.len());
            for (rid, snippet) in found {
                let id = rid / 4;
                let (kind, sql) = match rid % 4 {
                    1 => ("message", "SELECT NULL, author, ts FROM messages WHERE id = ?1"),
                    2 => ("task", "SELECT id, created_by, created_ts FROM tasks WHERE id = ?1"),
                    _ => ("note", "SELECT task_id, author, ts FROM notes WHERE id = ?1"),
                };
                if let Some((task_id, author, ts)) = row(c, sql, [id])? {
                    hits.push(SearchHit {
                        kind: kind.into(),
                        message_id: (kind == "message").then_some(id),
                        task_id,
                        note_id: (kind == "note").then_some(id),
                        author,
                        ts,
                        snippet,
                    });
                }
            }
            Ok(hits)
        })
        .await
    }
}
