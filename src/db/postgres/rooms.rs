//! Rooms on PostgreSQL: creating, changing, deleting and pruning them.

use super::*;

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
async fn prune_room(conn: &mut PgConnection, room: &str, cutoff: i64) -> Result<PruneCount> {
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
impl RoomStore for PostgresStore {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&room.name)
        .bind(&room.description)
        .bind(&room.repo_url)
        .bind(&room.onboarding_notes)
        .bind(room.retention_days)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(text_error)?;
        Ok(done.rows_affected() == 1)
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        let at = match self.cache.room(name) {
            Lookup::Hit(room) => return Ok(Some(room)),
            Lookup::Miss(at) => at,
        };
        let row = sqlx::query("SELECT * FROM rooms WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        let room = row.as_ref().map(room_from_row);
        if let Some(room) = &room {
            self.cache.keep_room(name, room, at);
        }
        Ok(room)
    }

    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>> {
        let rows = sqlx::query(
            "SELECT r.*, \
             (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status = ANY($2)) AS open_tasks, \
             (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
             (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > $1)) AS files \
             FROM rooms r ORDER BY r.name COLLATE \"C\"",
        )
        .bind(now)
        .bind(Status::OPEN.map(Status::as_str).as_slice())
        .fetch_all(&self.pool)
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
        record: Record,
    ) -> Result<Option<(Room, Event)>> {
        let mut tx = self.begin_room(room).await?;
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
        .await
        .map_err(text_error)?;
        let Some(row) = row else { return Ok(None) };
        let updated = room_from_row(&row);
        let event = only(store_record(&mut tx, room, record, &Written::default()).await?)?;
        tx.commit().await?;
        self.cache.changed("rooms");
        self.heard_everywhere().await;
        Ok(Some((updated, event)))
    }

    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>> {
        let mut tx = self.begin_room(room).await?;
        let done = sqlx::query("UPDATE rooms SET retention_days = $2 WHERE name = $1")
            .bind(room)
            .bind(days)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        let pruned = if days > 0 {
            prune_room(&mut tx, room, record.now - days * 86_400_000).await?
        } else {
            PruneCount::default()
        };
        let written = Written {
            pruned: Some(pruned),
            ..Written::default()
        };
        let event = only(store_record(&mut tx, room, record, &written).await?)?;
        tx.commit().await?;
        self.cache.changed("rooms");
        self.heard_everywhere().await;
        Ok(Some((event, pruned)))
    }

    async fn delete_room(&self, room: &str) -> Result<bool> {
        let mut tx = self.begin_room(room).await?;
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
            "DELETE FROM agent_status WHERE room = $1",
        ] {
            sqlx::query(sql).bind(room).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM rooms WHERE name = $1")
            .bind(room)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        self.cache.changed("rooms");
        self.heard_everywhere().await;
        Ok(done.rows_affected() == 1)
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let rooms: Vec<(String, i64)> =
            sqlx::query_as("SELECT name, retention_days FROM rooms WHERE retention_days > 0")
                .fetch_all(&self.pool)
                .await?;
        let mut total = PruneCount::default();
        for (room, days) in rooms {
            let mut tx = self.begin_room(&room).await?;
            let n = prune_room(&mut tx, &room, now - days * 86_400_000).await?;
            tx.commit().await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        total.files +=
            sqlx::query("DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= $1")
                .bind(now)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(total)
    }
}
