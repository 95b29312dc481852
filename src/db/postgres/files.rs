//! Files on PostgreSQL.

use super::*;

#[async_trait]
impl FileStore for PostgresStore {
    async fn put_file(&self, room: &str, f: &NewFile, record: Record) -> Result<(FileMeta, Event)> {
        let mut tx = self.begin_room(room).await?;
        let sql = "INSERT INTO files (room, name, mime, size, sha256, content, author, ts, expires_ts, task_id) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id";
        let size = f.content.len() as i64;
        let file = (&f.name, &f.mime, size, &f.sha256, &f.content);
        let by = (&record.actor, record.now, f.expires_at, f.task_id);
        let args = (room,).then(file).then(by);
        let id: i64 = fetch_one(&mut *tx, sql, args).await.map_err(text_error)?;
        let meta = stored_file(id, f, &record);
        let written = Written {
            file_id: Some(id),
            ..Written::default()
        };
        let event = only(store_record(&mut tx, room, record, &written).await?)?;
        tx.commit().await?;
        Ok((meta, event))
    }

    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>> {
        let sql = select!(
            file_columns,
            ", content FROM files \
             WHERE id = $1 AND room = $2 AND (expires_ts IS NULL OR expires_ts > $3)"
        );
        Ok(fetch_opt(&self.pool, sql, (id, room, now)).await?)
    }

    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>> {
        let sql = select!(
            file_columns,
            " FROM files WHERE id = $1 AND room = $2 AND (expires_ts IS NULL OR expires_ts > $3)"
        );
        Ok(fetch_opt(&self.pool, sql, (id, room, now)).await?)
    }

    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>> {
        let sql =
            "SELECT room FROM files WHERE id = $1 AND (expires_ts IS NULL OR expires_ts > $2)";
        Ok(fetch_opt(&self.pool, sql, (id, now)).await?)
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        let sql = select!(
            file_columns,
            " FROM files \
             WHERE room = $1 AND (expires_ts IS NULL OR expires_ts > $2) ORDER BY id DESC LIMIT $3"
        );
        Ok(fetch_all(&self.pool, sql, (room, now, limit)).await?)
    }

    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>> {
        let mut tx = self.begin_room(room).await?;
        if exec(
            &mut *tx,
            "DELETE FROM files WHERE id = $1 AND room = $2",
            (id, room),
        )
        .await?
            == 0
        {
            return Ok(None);
        }
        let event = only(store_record(&mut tx, room, record, &Written::default()).await?)?;
        tx.commit().await?;
        Ok(Some(event))
    }
}
