//! Rooms: creation, info, retention and deletion.

use serde_json::json;

use crate::domain::model::{ADMIN_ACTOR, EventKind, Member, PruneCount, Record, Room, RoomInfo};
use crate::domain::store::Store;
use crate::domain::{Call, Core, limits, names};
use crate::error::{Error, Result};

/// Checks the info fields against their limits.
pub fn check_info(info: &RoomInfo) -> Result<()> {
    if let Some(d) = &info.description {
        limits::check("description", d, limits::DESCRIPTION)?;
    }
    if let Some(u) = &info.repo_url {
        limits::check("repo_url", u, limits::REPO_URL)?;
    }
    if let Some(n) = &info.onboarding_notes {
        limits::check("onboarding_notes", n, limits::ONBOARDING)?;
    }
    Ok(())
}

/// The record of a change made with the admin CLI, which has no token
/// behind it: by `(admin)`, without an audit row.
pub fn by_admin(now: i64) -> Record {
    Record::new(ADMIN_ACTOR, None, now)
}

/// `record` with the event of changing a room's info to `info`.
pub fn info_changed(info: &RoomInfo, record: Record) -> Record {
    let detail = json!({"fields": info.changed_fields()});
    record.event(EventKind::RoomInfoUpdated, None, None, detail)
}

/// `record` with the event of setting a room's retention to `days` (the
/// store adds what it pruned, `Record::stamp`).
pub fn retention_set(days: i64, record: Record) -> Record {
    record.event(EventKind::RetentionSet, None, None, json!({"days": days}))
}

/// Creates a room; `conflict` when it exists.
pub async fn create(core_store: &dyn Store, name: &str, info: RoomInfo) -> Result<Room> {
    names::check_room(name)?;
    check_info(&info)?;
    let room = Room {
        name: name.to_owned(),
        description: info.description.unwrap_or_default(),
        repo_url: info.repo_url.unwrap_or_default(),
        onboarding_notes: info.onboarding_notes.unwrap_or_default(),
        retention_days: 0,
    };
    if !core_store
        .create_room(&room, crate::clock::now_ms())
        .await?
    {
        return Err(Error::conflict(format!("room {name:?} already exists")));
    }
    Ok(room)
}

/// Checks a retention period: 0 (keep) to 3,650 days.
pub fn check_retention(days: i64) -> Result<()> {
    if !(0..=limits::RETENTION_DAYS_MAX).contains(&days) {
        return Err(Error::invalid(format!(
            "days must be from 0 (keep everything) to {}",
            limits::RETENTION_DAYS_MAX
        )));
    }
    Ok(())
}

impl Core {
    pub async fn get_room_info(&self, call: &Call, room: Option<&str>) -> Result<Room> {
        self.room(call, room).await
    }

    /// Any writer may change a room's description, repo URL and onboarding notes.
    pub async fn set_room_info(
        &self,
        call: &Call,
        room: Option<&str>,
        info: RoomInfo,
    ) -> Result<Room> {
        let room = self.room(call, room).await?;
        self.writable(call)?;
        if info.description.is_none() && info.repo_url.is_none() && info.onboarding_notes.is_none()
        {
            return Err(Error::invalid(
                "give at least one of description, repo_url, onboarding_notes",
            ));
        }
        check_info(&info)?;
        let (room, event) = self
            .store
            .update_room_info(
                &room.name,
                &info,
                info_changed(&info, call.record(self.clock.now_ms())),
            )
            .await?
            .ok_or_else(|| Error::not_found("the room was deleted meanwhile"))?;
        call.mark_audited();
        self.bus.publish([event]);
        Ok(room)
    }

    /// Room admins set the retention period; the room is pruned at once.
    pub async fn set_retention(
        &self,
        call: &Call,
        room: Option<&str>,
        days: i64,
    ) -> Result<(Room, PruneCount)> {
        let room = self.room(call, room).await?;
        self.room_admin(call)?;
        check_retention(days)?;
        let (event, pruned) = self
            .store
            .set_retention(
                &room.name,
                days,
                retention_set(days, call.record(self.clock.now_ms())),
            )
            .await?
            .ok_or_else(|| Error::not_found("the room was deleted meanwhile"))?;
        call.mark_audited();
        self.bus.publish([event]);
        Ok((
            Room {
                retention_days: days,
                ..room
            },
            pruned,
        ))
    }

    /// Room admins delete a room with everything in it but the audit rows.
    pub async fn delete_room(&self, call: &Call, room: &str) -> Result<()> {
        let room = self.room(call, Some(room)).await?;
        self.room_admin(call)?;
        if !self.store.delete_room(&room.name).await? {
            return Err(Error::not_found("the room was deleted meanwhile"));
        }
        tracing::info!(room = %room.name, actor = %call.agent, "room deleted");
        Ok(())
    }
}

impl Core {
    /// The room's members, with `last_seen` from memory when fresher.
    pub async fn list_agents(
        &self,
        call: &Call,
        room: Option<&str>,
    ) -> Result<(String, Vec<Member>)> {
        let room = self.room(call, room).await?.name;
        let mut members = self.store.members(&room).await?;
        for m in &mut members {
            if let Some(t) = self.presence.last_seen(&room, &m.agent) {
                m.last_seen = Some(m.last_seen.map_or(t, |s| s.max(t)));
            }
        }
        Ok((room, members))
    }
}
