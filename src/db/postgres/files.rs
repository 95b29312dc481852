//! Files on PostgreSQL.

use super::*;

#[async_trait]
impl FileStore for PostgresStore {
    async fn put_file(&self, room: &str, f: &NewFile, record: Record) -> Result<(FileMeta, Event)> {
        let mut tx = self.begin_room(room).await?;
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
        .bind(&record.actor)
        .bind(record.now)
        .bind(f.expires_at)
        .bind(f.task_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(text_error)?;
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
        let event = only(store_record(&mut tx, room, record, &written).await?)?;
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
        .fetch_optional(&self.pool)
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
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(file_from_row))
    }

    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT room FROM files WHERE id = $1 AND (expires_ts IS NULL OR expires_ts > $2)",
        )
        .bind(id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>> {
        let rows = sqlx::query(
            "SELECT id, name, sha256, size, mime, author, ts, expires_ts, task_id FROM files \
             WHERE room = $1 AND (expires_ts IS NULL OR expires_ts > $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(room)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(file_from_row).collect())
    }

    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>> {
        let mut tx = self.begin_room(room).await?;
        let done = sqlx::query("DELETE FROM files WHERE id = $1 AND room = $2")
            .bind(id)
            .bind(room)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let event = only(store_record(&mut tx, room, record, &Written::default()).await?)?;
        tx.commit().await?;
        Ok(Some(event))
    }
}
