//! Row mapping shared by the SQLite areas: the column lists of the rows
//! read on every call and the `*_from_row` functions that read them.

use super::*;

// The columns of the rows read on every call, in the order their `*_from_row`
// reads them by position (a lookup by name costs a string search per value).
macro_rules! room_columns {
    () => {
        "name, description, repo_url, onboarding_notes, retention_days"
    };
}

macro_rules! token_columns {
    () => {
        "id, agent, room, also_rooms, readonly, admin, all_rooms, lead, skills, created_ts, revoked_ts, last_used_ts, profile"
    };
}

macro_rules! message_columns {
    () => {
        "id, room, ts, author, body, reply_to"
    };
}

macro_rules! event_columns {
    () => {
        "id, room, ts, kind, actor, task_id, message_id, detail"
    };
}

pub(super) fn room_from_row(r: &Row) -> rusqlite::Result<Room> {
    Ok(Room {
        name: r.get(0)?,
        description: r.get(1)?,
        repo_url: r.get(2)?,
        onboarding_notes: r.get(3)?,
        retention_days: r.get(4)?,
    })
}

/// The grant read from a row whose columns `agent, room, also_rooms,
/// readonly, admin, all_rooms, lead, skills` start at `first`, with its
/// profile at `profile` (tokens, connect codes and OAuth grants alike).
pub(super) fn grant_at(r: &Row, first: usize, profile: usize) -> rusqlite::Result<Grant> {
    Ok(Grant {
        agent: r.get(first)?,
        room: r.get(first + 1)?,
        also_rooms: parse_list(&r.get::<_, String>(first + 2)?),
        readonly: r.get(first + 3)?,
        admin: r.get(first + 4)?,
        all_rooms: r.get(first + 5)?,
        lead: r.get(first + 6)?,
        skills: parse_list(&r.get::<_, String>(first + 7)?),
        profile: Profile::stored(r.get::<_, Option<String>>(profile)?.as_deref()),
    })
}

/// A row of `token_columns!()` followed by `last_seen` (or `NULL`).
pub(super) fn token_from_row(r: &Row) -> rusqlite::Result<TokenRecord> {
    Ok(TokenRecord {
        id: r.get(0)?,
        grant: grant_at(r, 1, 12)?,
        created_ts: r.get(9)?,
        revoked_ts: r.get(10)?,
        last_used: r.get(11)?,
        last_seen: r.get(13)?,
    })
}

pub(super) fn message_from_row(r: &Row) -> rusqlite::Result<Message> {
    Ok(Message {
        id: r.get(0)?,
        room: r.get(1)?,
        ts: r.get(2)?,
        author: r.get(3)?,
        body: r.get(4)?,
        reply_to: r.get(5)?,
    })
}

pub(super) fn event_from_row(r: &Row) -> rusqlite::Result<Event> {
    let detail: String = r.get(7)?;
    Ok(Event {
        id: r.get(0)?,
        room: r.get(1)?,
        ts: r.get(2)?,
        kind: r.get(3)?,
        actor: r.get(4)?,
        task_id: r.get(5)?,
        message_id: r.get(6)?,
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    })
}

pub(super) fn file_from_row(r: &Row) -> rusqlite::Result<FileMeta> {
    Ok(FileMeta {
        file_id: r.get("id")?,
        name: r.get("name")?,
        sha256: r.get("sha256")?,
        size: r.get("size")?,
        mime: r.get("mime")?,
        author: r.get("author")?,
        ts: r.get("ts")?,
        expires_at: r.get("expires_ts")?,
        task_id: r.get("task_id")?,
    })
}

/// A row of `TASK_COLUMNS`; its status is checked by the caller
/// ([`checked_status`]).
pub(super) fn task_from_row(r: &Row) -> rusqlite::Result<(Task, String)> {
    let status: String = r.get(4)?;
    Ok((
        Task {
            id: r.get(0)?,
            room: r.get(1)?,
            title: r.get(2)?,
            body: r.get(3)?,
            status: Status::Pending,
            assignee: r.get(5)?,
            depends_on: Vec::new(),
            blocked_by_unfinished: Vec::new(),
            version: r.get(6)?,
            created_by: r.get(7)?,
            created_ts: r.get(8)?,
            updated_ts: r.get(9)?,
            priority: r.get(10)?,
            required_skill: r.get(11)?,
            needs_review: r.get(12)?,
            result: r.get(13)?,
            lease_expires_ts: r.get(15)?,
            lease_seconds: r.get(14)?,
        },
        status,
    ))
}

pub(super) fn checked_status((mut task, status): (Task, String)) -> Result<Task> {
    task.status = Status::parse(&status)
        .map_err(|_| Error::internal(anyhow::anyhow!("task has unknown status {status:?}")))?;
    Ok(task)
}

pub(super) const TASK_COLUMNS: &str = "id, room, title, body, status, assignee, version, created_by, created_ts, updated_ts, priority, required_skill, needs_review, result, lease_seconds, lease_expires_ts";
