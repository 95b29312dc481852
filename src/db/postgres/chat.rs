//! A room's messages on PostgreSQL.

use super::*;

#[async_trait]
impl ChatStore for PostgresStore {
    async fn post_message(
        &self,
        room: &str,
        m: NewMessage<'_>,
        mut record: Record,
    ) -> Result<(Message, Event)> {
        let NewMessage { body, reply_to } = m;
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
        let sql = select!(
            message_columns,
            " FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3"
        );
        let args = (room, since_id, limit);
        Ok(fetch_all(&self.pool, sql, args).await?)
    }

    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>> {
        let sql = "SELECT room, author FROM messages WHERE id = $1";
        Ok(fetch_opt(&self.pool, sql, (id,)).await?)
    }

    async fn latest_message_id(&self, room: &str) -> Result<i64> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM messages WHERE room = $1";
        Ok(fetch_one(&self.pool, sql, (room,)).await?)
    }

    async fn read_messages_latest(&self, room: &str, page: Page) -> Result<(Vec<Message>, i64)> {
        let rows = sqlx::query(
            "SELECT l.latest, m.id, m.room, m.ts, m.author, m.body, m.reply_to \
             FROM (SELECT COALESCE(MAX(id), 0) AS latest FROM messages WHERE room = $1) l \
             LEFT JOIN LATERAL (SELECT * FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3) m \
             ON true ORDER BY m.id",
        );
        let rows = (room, page.since_id, page.limit)
            .bind_to(rows)
            .fetch_all(&self.pool)
            .await?;
        Ok(page_with_latest(&rows)?)
    }
}
