//! Rooms on SQLite: creating, changing, deleting and pruning them.

use super::*;

/// Deletes a room's chat, events, mentions and files older than `cutoff`.
fn prune_room(c: &Connection, room: &str, cutoff: i64) -> Result<PruneCount> {
    let messages = exec(
        c,
        "DELETE FROM messages WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    exec(
        c,
        "DELETE FROM mentions WHERE room = ?1 AND ts < ?2 AND message_id IS NOT NULL",
        params![room, cutoff],
    )?;
    let events = exec(
        c,
        "DELETE FROM events WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    let files = exec(
        c,
        "DELETE FROM files WHERE room = ?1 AND ts < ?2",
        params![room, cutoff],
    )?;
    Ok(PruneCount {
        messages,
        events,
        files,
    })
}

#[async_trait]
impl RoomStore for SqliteStore {
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool> {
        self.write(|c| {
            let n = exec(
                c,
                "INSERT INTO rooms (name, description, repo_url, onboarding_notes, retention_days, created_ts) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (name) DO NOTHING",
                params![
                    room.name,
                    room.description,
                    room.repo_url,
                    room.onboarding_notes,
                    room.retention_days,
                    now
                ],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn get_room(&self, name: &str) -> Result<Option<Room>> {
        self.read_row(select!(room_columns, " FROM rooms WHERE name = ?1"), [name])
    }

    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>> {
        // Counts over whole tables: off the async workers.
        self.read_blocking(move |c| {
            rows(
                c,
                select!(room_columns, ", \
                 (SELECT COUNT(*) FROM tasks t WHERE t.room = r.name AND t.status IN (?2, ?3, ?4, ?5)) AS open_tasks, \
                 (SELECT COUNT(*) FROM messages m WHERE m.room = r.name) AS messages, \
                 (SELECT COUNT(*) FROM files f WHERE f.room = r.name AND (f.expires_ts IS NULL OR f.expires_ts > ?1)) AS files \
                 FROM rooms r ORDER BY r.name"),
                params![
                    now,
                    Status::OPEN[0].as_str(),
                    Status::OPEN[1].as_str(),
                    Status::OPEN[2].as_str(),
                    Status::OPEN[3].as_str()
                ],
            )
        })
        .await
    }

    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>> {
        self.write(|c| {
            let Some(updated) = row(
                c,
                concat!("UPDATE rooms SET description = COALESCE(?2, description), \
                 repo_url = COALESCE(?3, repo_url), onboarding_notes = COALESCE(?4, onboarding_notes) \
                 WHERE name = ?1 RETURNING ", room_columns!()),
                params![room, info.description, info.repo_url, info.onboarding_notes],
            )?
            else {
                return Ok(None);
            };
            let event = only(store_record(c, room, record, &Written::default())?)?;
            Ok(Some((updated, event)))
        })
        .await
    }

    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>> {
        // Pruning a large room takes a while: off the async workers.
        let room = room.to_owned();
        self.write_blocking(move |c| {
            let n = exec(
                c,
                "UPDATE rooms SET retention_days = ?2 WHERE name = ?1",
                params![room, days],
            )?;
            if n == 0 {
                return Ok(None);
            }
            let pruned = if days > 0 {
                prune_room(c, &room, record.now - days * 86_400_000)?
            } else {
                PruneCount::default()
            };
            let written = Written {
                pruned: Some(pruned),
                ..Written::default()
            };
            let event = only(store_record(c, &room, record, &written)?)?;
            Ok(Some((event, pruned)))
        })
        .await
    }

    async fn delete_room(&self, room: &str) -> Result<bool> {
        let room = room.to_owned();
        self.write_blocking(move |c| {
            for sql in [
                "DELETE FROM task_deps WHERE task_id IN (SELECT id FROM tasks WHERE room = ?1)",
                "DELETE FROM notes WHERE room = ?1",
                "DELETE FROM tasks WHERE room = ?1",
                "DELETE FROM messages WHERE room = ?1",
                "DELETE FROM mentions WHERE room = ?1",
                "DELETE FROM files WHERE room = ?1",
                "DELETE FROM events WHERE room = ?1",
                "DELETE FROM cursors WHERE room = ?1",
                "DELETE FROM presence WHERE room = ?1",
                "DELETE FROM agent_status WHERE room = ?1",
            ] {
                c.execute(sql, [&room])?;
            }
            Ok(c.execute("DELETE FROM rooms WHERE name = ?1", [&room])? == 1)
        })
        .await
    }

    async fn prune(&self, now: i64) -> Result<PruneCount> {
        let sql = "SELECT name, retention_days FROM rooms WHERE retention_days > 0";
        let rooms: Vec<(String, i64)> = self.read_rows(sql, [])?;
        let mut total = PruneCount::default();
        // One transaction a room, so writers get their turn in between.
        for (room, days) in rooms {
            let n = self
                .write_blocking(move |c| prune_room(c, &room, now - days * 86_400_000))
                .await?;
            total.messages += n.messages;
            total.events += n.events;
            total.files += n.files;
        }
        total.files += self
            .write_blocking(move |c| {
                exec(
                    c,
                    "DELETE FROM files WHERE expires_ts IS NOT NULL AND expires_ts <= ?1",
                    [now],
                )
            })
            .await?;
        Ok(total)
    }
}
