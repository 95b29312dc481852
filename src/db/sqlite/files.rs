//! Files on SQLite.

use super::*;

#[async_trait]
impl FileStore for SqliteStore {
    async fn put_file(&self, room: &str, f: &NewFile, record: Record) -> Result<(FileMeta, Event)> {
        self.write(|c| {
            let id: i64 = insert(
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
            )?;
            let written = Written {
                file_id: Some(id),
                ..Written::default()
            };
            let meta = stored_file(id, f, &record);
            let event = only(store_record(c, room, record, &written)?)?;
            Ok((meta, event))
        })
        .await
    }

    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>> {
        self.read_row(
            select!(
                file_columns,
                ", content FROM files \
                     WHERE id = ?1 AND room = ?2 AND (expires_ts IS NULL OR expires_ts > ?3)"
            ),
            params![id, room, now],
        )
    }

    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>> {
        self.read_row(
                select!(file_columns, " FROM files WHERE id = ?1 AND room = ?2 AND (expires_ts IS NULL OR expires_ts > ?3)"
                ),
                params![id, room, now],
        )
    }

    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>> {
        self.read_row(
            "SELECT room FROM files WHERE id = ?1 AND (expires_ts IS NULL OR expires_ts > ?2)",
            params![id, now],
        )
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        self.read_rows(
                select!(file_columns, " FROM files \
                     WHERE room = ?1 AND (expires_ts IS NULL OR expires_ts > ?2) ORDER BY id DESC LIMIT ?3"
                ),
                params![room, now, limit],
        )
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
