//! Tasks, notes, mentions and search on PostgreSQL.

use super::*;

/// Fills `depends_on` and `blocked_by_unfinished` of `tasks` in one query.
async fn fill_deps(conn: &mut PgConnection, tasks: &mut [Task]) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = tasks.iter().map(|t| t.id).collect();
    let deps = sqlx::query_as(
        "SELECT d.task_id, d.depends_on, t.status FROM task_deps d \
         LEFT JOIN tasks t ON t.id = d.depends_on \
         WHERE d.task_id = ANY($1) ORDER BY d.depends_on",
    );
    attach_deps(tasks, deps.bind(ids).fetch_all(&mut *conn).await?);
    Ok(())
}

async fn load_task(conn: &mut PgConnection, room: &str, id: i64) -> Result<Option<Task>> {
    // The task and its dependencies (those not done yet apart): one round
    // trip, as `fill_deps` gives them.
    let sql = select!(
        task_columns,
        ", ARRAY(SELECT d.depends_on FROM task_deps d WHERE d.task_id = tasks.id \
                ORDER BY d.depends_on) AS deps, \
            ARRAY(SELECT d.depends_on FROM task_deps d LEFT JOIN tasks u ON u.id = d.depends_on \
                WHERE d.task_id = tasks.id AND u.status IS DISTINCT FROM $3 ORDER BY d.depends_on) AS blocked \
         FROM tasks WHERE id = $1 AND room = $2"
    );
    let args = (id, room, Status::Done.as_str());
    let Some(r) = args.bind_to(sqlx::query(sql)).fetch_optional(conn).await? else {
        return Ok(None);
    };
    let mut task = Task::from_cols(&r)?;
    task.depends_on = r.try_get("deps")?;
    task.blocked_by_unfinished = r.try_get("blocked")?;
    Ok(Some(task))
}

#[async_trait]
impl BoardStore for PostgresStore {
    async fn create_task(&self, room: &str, t: NewTask) -> Result<(Task, Vec<Event>)> {
        let room = room.to_owned();
        self.writers
            .write(&room.clone(), move |tx| {
                Box::pin(async move {
                    let sql = "INSERT INTO tasks (room, title, body, status, assignee, version, created_by, created_ts, updated_ts, \
                         priority, required_skill, needs_review) \
                         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7, $8, $9, $10) RETURNING id";
                    let task = (&t.title, &t.body, t.status.as_str(), &t.assignee, &t.created_by);
                    let rest = (t.record.now, &t.priority, &t.required_skill, t.needs_review);
                    let args = (&room,).then(task).then(rest);
                    let id: i64 = fetch_one(&mut *tx, sql, args).await.map_err(text_error)?;
                    if !t.depends_on.is_empty() {
                        let sql = "INSERT INTO task_deps (task_id, depends_on) \
                             SELECT $1, d FROM UNNEST($2::bigint[]) AS d ON CONFLICT DO NOTHING";
                        exec(&mut *tx, sql, (id, &t.depends_on)).await?;
                    }
                    let task = load_task(tx, &room, id).await?.ok_or_else(|| {
                        Error::internal(anyhow::anyhow!("task vanished inside its transaction"))
                    })?;
                    let written = Written {
                        task_id: Some(id),
                        ..Written::default()
                    };
                    let events = store_record(tx, &room, t.record, &written).await?;
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
        let sql = "SELECT status, COUNT(*)::BIGINT FROM tasks WHERE room = $1 GROUP BY status";
        let rows = sqlx::query_as(sql).bind(room).fetch_all(&self.pool).await?;
        Ok(TaskCounts::from_rows(rows))
    }

    async fn list_tasks(&self, room: &str, q: &TaskQuery) -> Result<Vec<Task>> {
        let statuses: Vec<&str> = q.statuses.iter().map(|s| s.as_str()).collect();
        let mut conn = self.pool.acquire().await?;
        let sql = select!(
            task_columns,
            " FROM tasks WHERE room = $1 \
             AND (cardinality($2::text[]) = 0 OR status = ANY($2)) \
             AND ($3::text IS NULL OR assignee = $3) AND id < $4 \
             ORDER BY id DESC LIMIT $5"
        );
        let args = (
            room,
            statuses,
            &q.assignee,
            q.before_id.unwrap_or(i64::MAX),
            q.limit,
        );
        let mut tasks = fetch_all(&mut *conn, sql, args).await?;
        fill_deps(&mut conn, &mut tasks).await?;
        Ok(tasks)
    }

    async fn apply_task_change(
        &self,
        room: &str,
        c: TaskChange,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        let (room, id) = (room.to_owned(), c.task_id);
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
                    let change = (c.status.as_str(), &c.assignee, &c.body, &c.result);
                    let lease = (c.lease_seconds, c.lease_expires_ts);
                    let args = (id, &room).then(change).then(lease).then((now, c.expected_version));
                    if exec(&mut *tx, sql, args).await.map_err(text_error)? == 0 {
                        return Ok(None);
                    }
                    let mut written = Written::default();
                    if let Some(body) = &c.note {
                        let sql = "INSERT INTO notes (task_id, room, ts, author, body) \
                             VALUES ($1, $2, $3, $4, $5) RETURNING id";
                        let args = (id, &room, now, &c.record.actor, body);
                        let note_id = fetch_one(&mut *tx, sql, args).await;
                        written.note_id = Some(note_id.map_err(text_error)?);
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
        let sql = "SELECT room, id FROM tasks WHERE lease_expires_ts IS NOT NULL \
             AND lease_expires_ts <= $1 AND status = ANY($2) LIMIT 500";
        let leased = Status::LEASED.map(Status::as_str);
        let rows = sqlx::query_as(sql).bind(now).bind(leased.as_slice());
        Ok(rows.fetch_all(&self.pool).await?)
    }

    async fn notes(&self, task_id: i64) -> Result<Vec<Note>> {
        let sql = select!(note_columns, " FROM notes WHERE task_id = $1 ORDER BY id");
        Ok(fetch_all(&self.pool, sql, (task_id,)).await?)
    }

    async fn my_mentions(&self, room: &str, agent: &str, page: Page) -> Result<Vec<Mention>> {
        let sql = "SELECT x.seq, x.message_id, x.note_id, x.task_id, \
                COALESCE(m.author, n.author) AS author, COALESCE(m.ts, n.ts) AS ts, COALESCE(m.body, n.body) AS body \
             FROM mentions x LEFT JOIN messages m ON m.id = x.message_id LEFT JOIN notes n ON n.id = x.note_id \
             WHERE x.room = $1 AND x.agent = $2 AND x.seq > $3 AND (m.id IS NOT NULL OR n.id IS NOT NULL) \
             ORDER BY x.seq, x.id LIMIT $4";
        let args = (
            room,
            agent,
            super::mentions_after(page.since_id),
            page.limit,
        );
        Ok(fetch_all(&self.pool, sql, args).await?)
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
