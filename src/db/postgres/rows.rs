//! Row mapping shared by the PostgreSQL areas: the column lists and the
//! `*_from_row` functions that read them.

use super::*;

pub(super) fn room_from_row(r: &PgRow) -> Room {
    Room {
        name: r.get("name"),
        description: r.get("description"),
        repo_url: r.get("repo_url"),
        onboarding_notes: r.get("onboarding_notes"),
        retention_days: r.get("retention_days"),
    }
}

/// The grant columns of a token, connect code or OAuth grant row, by name.
pub(super) fn grant_from_row(r: &PgRow) -> Grant {
    Grant {
        agent: r.get("agent"),
        room: r.get("room"),
        also_rooms: r.get("also_rooms"),
        readonly: r.get("readonly"),
        admin: r.get("admin"),
        all_rooms: r.get("all_rooms"),
        lead: r.get("lead"),
        skills: r.get("skills"),
        profile: Profile::stored(r.get::<Option<&str>, _>("profile")),
    }
}

pub(super) fn token_from_row(r: &PgRow) -> TokenRecord {
    TokenRecord {
        id: r.get("id"),
        grant: grant_from_row(r),
        created_ts: r.get("created_ts"),
        revoked_ts: r.get("revoked_ts"),
        last_seen: r.try_get("last_seen").unwrap_or(None),
        last_used: r.get("last_used_ts"),
    }
}

pub(super) fn message_from_row(r: &PgRow) -> Message {
    Message {
        id: r.get("id"),
        room: r.get("room"),
        ts: r.get("ts"),
        author: r.get("author"),
        body: r.get("body"),
        reply_to: r.get("reply_to"),
    }
}

pub(super) const EVENT_COLUMNS: &str =
    "id, room, ts, kind, actor, task_id, message_id, detail::text AS detail";

pub(super) fn event_from_row(r: &PgRow) -> Event {
    let detail: String = r.get("detail");
    Event {
        id: r.get("id"),
        room: r.get("room"),
        ts: r.get("ts"),
        kind: r.get("kind"),
        actor: r.get("actor"),
        task_id: r.get("task_id"),
        message_id: r.get("message_id"),
        detail: serde_json::from_str(&detail).unwrap_or(Value::Null),
    }
}

pub(super) fn file_from_row(r: &PgRow) -> FileMeta {
    FileMeta {
        file_id: r.get("id"),
        name: r.get("name"),
        sha256: r.get("sha256"),
        size: r.get("size"),
        mime: r.get("mime"),
        author: r.get("author"),
        ts: r.get("ts"),
        expires_at: r.get("expires_ts"),
        task_id: r.get("task_id"),
    }
}

pub(super) fn task_from_row(r: &PgRow) -> Result<Task> {
    let status: String = r.get("status");
    Ok(Task {
        id: r.get("id"),
        room: r.get("room"),
        title: r.get("title"),
        body: r.get("body"),
        status: Status::parse(&status)
            .map_err(|_| Error::internal(anyhow::anyhow!("task has unknown status {status:?}")))?,
        assignee: r.get("assignee"),
        depends_on: Vec::new(),
        blocked_by_unfinished: Vec::new(),
        version: r.get("version"),
        created_by: r.get("created_by"),
        created_ts: r.get("created_ts"),
        updated_ts: r.get("updated_ts"),
        priority: r.get("priority"),
        required_skill: r.get("required_skill"),
        needs_review: r.get("needs_review"),
        result: r.get("result"),
        lease_expires_ts: r.get("lease_expires_ts"),
        lease_seconds: r.get("lease_seconds"),
    })
}

pub(super) const TASK_COLUMNS: &str = "id, room, title, body, status, assignee, version, created_by, created_ts, updated_ts, priority, required_skill, needs_review, result, lease_seconds, lease_expires_ts";

/// A page read with the room's latest id (`l.latest LEFT JOIN LATERAL` the
/// page): every row carries `latest`, and an empty page is one row whose
/// `id` is NULL.
pub(super) fn page_with_latest<T>(rows: &[PgRow], item: fn(&PgRow) -> T) -> (Vec<T>, i64) {
    let latest = rows.first().map_or(0, |r| r.get("latest"));
    let page = rows
        .iter()
        .filter(|r| r.get::<Option<i64>, _>("id").is_some())
        .map(item)
        .collect();
    (page, latest)
}
