//! Rooms: creation, info, retention and deletion.

use serde_json::json;

use crate::domain::model::{ADMIN_ACTOR, EventKind, Member, PruneCount, Record, Room, RoomInfo};
use crate::domain::{Actor, Call, Core, Owner, limits, names};
use crate::error::{Error, Result};

/// Checks the info fields against their limits.
pub fn check_info(info: &RoomInfo) -> Result<()> {
    for (field, value, max) in [
        ("description", &info.description, limits::DESCRIPTION),
        ("repo_url", &info.repo_url, limits::REPO_URL),
        (
            "onboarding_notes",
            &info.onboarding_notes,
            limits::ONBOARDING,
        ),
    ] {
        limits::check_given(field, value.as_deref(), max)?;
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
    /// Creates a room; `conflict` when it exists.
    pub async fn create_room(&self, name: &str, info: RoomInfo) -> Result<Room> {
        names::check_room(name)?;
        check_info(&info)?;
        let room = Room {
            name: name.to_owned(),
            description: info.description.unwrap_or_default(),
            repo_url: info.repo_url.unwrap_or_default(),
            onboarding_notes: info.onboarding_notes.unwrap_or_default(),
            retention_days: 0,
        };
        if !self.store.create_room(&room, self.clock.now_ms()).await? {
            return Err(Error::conflict(format!("room {name:?} already exists")));
        }
        Ok(room)
    }

    /// The owner creates a room (logged).
    pub async fn owner_create_room(
        &self,
        owner: &Owner<'_>,
        name: &str,
        info: RoomInfo,
    ) -> Result<Room> {
        let room = self.create_room(name, info).await?;
        self.log_owner(
            owner.into(),
            "room.create",
            format!("room {}", room.name),
            false,
        )
        .await;
        Ok(room)
    }

    /// Creates each named room that does not exist yet (logged), returning
    /// the names it created: a token for a new room is how ChatRoomMCP's
    /// users start one. Every name is checked before any is created.
    pub async fn owner_create_missing_rooms(
        &self,
        owner: &Owner<'_>,
        names: &[String],
    ) -> Result<Vec<String>> {
        for name in names {
            names::check_room(name)?;
        }
        let mut created = Vec::new();
        for name in names {
            if self.store.get_room(name).await?.is_some() {
                continue;
            }
            match self
                .owner_create_room(owner, name, RoomInfo::default())
                .await
            {
                Ok(_) => created.push(name.clone()),
                // Created meanwhile by someone else: it exists, which is all we need.
                Err(Error::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(created)
    }

    /// Every room with its counts, as the owner sees them.
    pub async fn list_rooms(&self) -> Result<Vec<crate::domain::model::RoomSummary>> {
        self.store.list_rooms(self.clock.now_ms()).await
    }

    pub async fn get_room_info<'a>(
        &self,
        actor: impl Into<Actor<'a>>,
        room: Option<&str>,
    ) -> Result<Room> {
        self.acting_room(actor.into(), room).await
    }

    /// Any writer (and the owner) may change a room's description, repo URL
    /// and onboarding notes.
    pub async fn set_room_info<'a>(
        &self,
        actor: impl Into<Actor<'a>>,
        room: Option<&str>,
        info: RoomInfo,
    ) -> Result<Room> {
        let actor = actor.into();
        let room = self.acting_room(actor, room).await?;
        if let Some(call) = actor.call() {
            self.writable(call)?;
        }
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
                info_changed(&info, actor.record(self.clock.now_ms())),
            )
            .await?
            .ok_or_else(|| Error::not_found("the room was deleted meanwhile"))?;
        actor.mark_audited();
        self.bus.publish([event]);
        let target = format!("room {} ({})", room.name, info.changed_fields().join(", "));
        self.log_owner(actor, "room.info", target, false).await;
        Ok(room)
    }

    /// Room admins (and the owner) set the retention period; the room is
    /// pruned at once.
    pub async fn set_retention<'a>(
        &self,
        actor: impl Into<Actor<'a>>,
        room: Option<&str>,
        days: i64,
    ) -> Result<(Room, PruneCount)> {
        let actor = actor.into();
        let room = self.acting_room(actor, room).await?;
        if let Some(call) = actor.call() {
            self.room_admin(call)?;
        }
        check_retention(days)?;
        let (event, pruned) = self
            .store
            .set_retention(
                &room.name,
                days,
                retention_set(days, actor.record(self.clock.now_ms())),
            )
            .await?
            .ok_or_else(|| Error::not_found("the room was deleted meanwhile"))?;
        actor.mark_audited();
        self.bus.publish([event]);
        let target = format!("room {} keeps {}", room.name, keep(days));
        self.log_owner(actor, "room.retention", target, false).await;
        Ok((
            Room {
                retention_days: days,
                ..room
            },
            pruned,
        ))
    }

    /// Room admins (and the owner) delete a room with everything in it but
    /// the audit rows.
    pub async fn delete_room<'a>(&self, actor: impl Into<Actor<'a>>, room: &str) -> Result<()> {
        let actor = actor.into();
        let room = self.acting_room(actor, Some(room)).await?;
        if let Some(call) = actor.call() {
            self.room_admin(call)?;
        }
        if !self.store.delete_room(&room.name).await? {
            return Err(Error::not_found("the room was deleted meanwhile"));
        }
        let by = actor.record(0).actor;
        tracing::info!(room = %room.name, actor = %by, "room deleted");
        self.log_owner(actor, "room.delete", format!("room {}", room.name), false)
            .await;
        Ok(())
    }
}

/// How long a room keeps its history, in words (`everything`, `30 day(s)`).
pub fn keep(days: i64) -> String {
    if days == 0 {
        "everything".into()
    } else {
        format!("{days} day(s)")
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
