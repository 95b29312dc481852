//! Rooms on PostgreSQL: creating, changing, deleting and pruning them.

use super::*;

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
async fn prune_room(conn: &mut PgConnection, room: &str, cutoff: i64) -> Result<PruneCount> {
    let args = (room, cutoff);
    let messages = exec(
        &mut *conn,
        "DELETE FROM messages WHERE room = $1 AND ts < $2",
        args,
    )
    .await?;
    let mentions = "DELETE FROM mentions WHERE room = $1 AND ts < $2 AND message_id IS NOT NULL";
    exec(&mut *conn, mentions, args).await?;
    let events = exec(
        &mut *conn,
        "DELETE FROM events WHERE room = $1 AND ts < $2",
        args,
    )
    .await?;
    let files = exec(
        &mut *conn,
        "DELETE FROM files WHERE room = $1 AND ts < $2",
        args,
    )
    .await?;
    Ok(PruneCount {
        messages,
        events,
        files,
    })
}

#[async_trait]
impl RoomStore for PostgresStore {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool> {
        let sql = "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING";
        let info = (
            &room.name,
            &room.description,
            &room.repo_url,
            &room.onboarding_notes,
        );
        let args = info.then((room.retention_days, now));
        Ok(exec(&self.pool, sql, args).await.map_err(text_error)? == 1)
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        let sql = select!(room_columns, " FROM rooms WHERE name = $1");
        let read = fetch_opt(&self.pool, sql, (name,));
        Ok(self.cache.read_through(|c| &c.rooms, name, read).await?)
    }

    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>> {
        let open = Status::OPEN.map(Status::as_str);
        Ok(fetch_all(
            &self.pool,
            select!(room_columns, ", \
             (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status = ANY($2)) AS open_tasks, \
             (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
             (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > $1)) AS files \
             FROM rooms r ORDER BY r.name COLLATE \"C\""),
            (now, open.as_slice()),
        )
        .await?)
    }

    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>> {
        let mut tx = self.begin_room(room).await?;
        let updated = fetch_opt(
            &mut *tx,
            concat!(
                "UPDATE rooms SET description = COALESCE($2, description), \
             repo_url = COALESCE($3, repo_url), onboarding_notes = COALESCE($4, onboarding_notes) \
             WHERE name = $1 RETURNING ",
                room_columns!()
            ),
            (
                room,
                &info.description,
                &info.repo_url,
                &info.onboarding_notes,
            ),
        )
        .await
        .map_err(text_error)?;
        let Some(updated) = updated else {
            return Ok(None);
        };
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
        let sql = "UPDATE rooms SET retention_days = $2 WHERE name = $1";
        if exec(&mut *tx, sql, (room, days)).await? == 0 {
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
            exec(&mut *tx, sql, (room,)).await?;
        }
        let deleted = exec(&mut *tx, "DELETE FROM rooms WHERE name = $1", (room,)).await?;
        tx.commit().await?;
        self.cache.changed("rooms");
        self.heard_everywhere().await;
        Ok(deleted == 1)
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let sql = "SELECT name, retention_days FROM rooms WHERE retention_days > 0";
        let rooms: Vec<(String, i64)> = sqlx::query_as(sql).fetch_all(&self.pool).await?;
        let mut total = PruneCount::default();
        for (room, days) in rooms {
            let mut tx = self.begin_room(&room).await?;
            let n = prune_room(&mut tx, &room, now - days * 86_400_000).await?;
            tx.commit().await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        let expired = "DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= $1";
        total.files += exec(&self.pool, expired, (now,)).await?;
        Ok(total)
    }
}
