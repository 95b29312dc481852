//! The column lists of the rows both backends read, in the order the
//! models read them (`db/rows.rs`), and `select!` to write a `SELECT` of
//! one. Macros, so that each backend's statements stay `concat!`ed
//! constants; each backend writes its own SQL around them (placeholders
//! and casts differ), only the order of the columns is shared.

// Read by position: a lookup by name costs a string search per value on
// SQLite.

/// `SELECT` the columns of a list, then the rest of the statement:
/// `select!(room_columns, " FROM rooms WHERE name = ?1")`.
macro_rules! select {
    ($columns:ident, $($rest:expr),+ $(,)?) => {
        concat!("SELECT ", $columns!(), $($rest),+)
    };
}

macro_rules! room_columns {
    () => {
        "name, description, repo_url, onboarding_notes, retention_days"
    };
}

/// A token row: these columns, then its `last_seen` (or `NULL`).
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

/// The detail is JSON: stored as text on SQLite, as `JSONB` on PostgreSQL,
/// read as text on both.
macro_rules! event_columns {
    () => {
        "id, room, ts, kind, actor, task_id, message_id, CAST(detail AS TEXT) AS detail"
    };
}

macro_rules! file_columns {
    () => {
        "id, name, sha256, size, mime, author, ts, expires_ts, task_id"
    };
}

macro_rules! task_columns {
    () => {
        "id, room, title, body, status, assignee, version, created_by, created_ts, updated_ts, priority, required_skill, needs_review, result, lease_seconds, lease_expires_ts"
    };
}

macro_rules! note_columns {
    () => {
        "id, task_id, author, ts, body"
    };
}

macro_rules! admin_log_columns {
    () => {
        "id, ts, actor, address, action, target, flagged"
    };
}

macro_rules! oauth_client_columns {
    () => {
        "client_id, secret_hash, client_name, redirect_uris, auth_method, created_ts, used_ts"
    };
}

macro_rules! auth_code_columns {
    () => {
        "grant_id, client_id, redirect_uri, code_challenge, resource, expires_ts, redirect_uri_given"
    };
}

/// An OAuth grant, its columns named through the alias `g`.
macro_rules! grant_columns {
    () => {
        "g.id, g.client_id, g.client_name, g.agent, g.room, g.also_rooms, g.readonly, g.admin, \
         g.all_rooms, g.lead, g.skills, g.created_ts, g.revoked_ts, g.refresh_hash, \
         g.refresh_prev_hash, g.refresh_rotated_ts, g.refresh_expires_ts, g.profile"
    };
}

macro_rules! webhook_columns {
    () => {
        "id, room, url, format, events, secret, created_ts, cursor, attempts, next_ts, \
         first_fail_ts, failures, paused, delivered, last_ts, last_status"
    };
}

/// The condition on a webhook `w` that a worker may lease at time `$now`
/// (a placeholder): active, due, not leased, with events past its cursor.
macro_rules! webhook_claimable {
    ($now:literal) => {
        concat!(
            "NOT w.paused AND w.next_ts <= ",
            $now,
            " AND w.lease_until <= ",
            $now,
            " AND EXISTS (SELECT 1 FROM events e WHERE e.room = w.room AND e.id > w.cursor)"
        )
    };
}

macro_rules! inbound_columns {
    () => {
        "id, key, room, agent, secret, secret_hash, created_ts, last_used_ts"
    };
}
