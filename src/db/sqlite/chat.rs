//! A room's messages on SQLite.

use super::*;

#[async_trait]
impl ChatStore for SqliteStore {
    async fn post_message(
        &self,
        room: &str,
        m: NewMessage<'_>,
        record: Record,
    ) -> Result<(Message, Event)> {
        let NewMessage { body, reply_to } = m;
        self.write(|c| {
            let id: i64 = insert(
                c,
                "INSERT INTO messages (room, ts, author, body, reply_to) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                params![room, record.now, record.actor, body, reply_to],
            )?;
            let written = Written {
                message_id: Some(id),
                ..Written::default()
            };
            let message = Message {
                id,
                room: room.to_owned(),
                ts: record.now,
                author: record.actor.clone(),
                body: body.to_owned(),
                reply_to,
            };
            let event = only(store_record(c, room, record, &written)?)?;
            Ok((message, event))
        })
        .await
    }

    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>> {
        self.read_rows(
            select!(
                message_columns,
                " FROM messages WHERE room = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
            ),
            params![room, since_id, limit],
        )
    }

    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>> {
        self.read_row("SELECT room, author FROM messages WHERE id = ?1", [id])
    }

    async fn latest_message_id(&self, room: &str) -> Result<i64> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM messages WHERE room = ?1";
        Ok(self.read_row(sql, [room])?.unwrap_or(0))
    }
}
