//! A room's messages on SQLite.

use super::*;

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
                |r| message_from_row(r),
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
