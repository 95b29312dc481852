//! Storage: the implementations of the domain's [`Store`] port, SQLite (the
//! embedded default) and PostgreSQL, chosen by the database URL. Each write
//! method is one transaction that makes the change and stores the domain's
//! [`Record`] of it (events, mentions, audit row) together, so an event
//! never exists without its change or the other way. The rules (who may,
//! which transitions, what an event says, who is the actor) are not here:
//! they live in `domain/`, which decides; the store only writes what was
//! decided, guarded by the version it was decided on. This module imports
//! from `domain/` and never the other way.
//!
//! On PostgreSQL any number of replicas share the database: everything that
//! must hold across them (claims, versions, event order, token revocation)
//! is enforced in the database, and each replica's store relays the events
//! of the others to its in-process bus ([`Store::start_relay`]).

#[macro_use]
mod rows;
mod batch;
pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use crate::domain::limits;
use crate::domain::model::*;
use crate::domain::store::prelude::*;
use crate::domain::store::{CursorRead, Page};
use crate::error::Result;
use rows::*;

/// The answer to a search stopped at its time limit
/// ([`limits::SEARCH_MILLIS`]), on either backend.
fn search_too_slow() -> crate::error::Error {
    crate::error::Error::invalid(format!(
        "the search ran for {} ms and was stopped; search for rarer or more words",
        limits::SEARCH_MILLIS
    ))
}

/// The bound of a mentions read after `since_id`, for both backends'
/// `seq > bound`: `since_id` 0 (from the start) keeps the notes placed
/// before any message, at `seq` 0. One bare comparison is a range of the
/// `(room, agent, seq)` index, where `seq > x OR x = 0` would be a filter
/// over every mention the agent ever had.
fn mentions_after(since_id: i64) -> i64 {
    if since_id == 0 { -1 } else { since_id }
}

/// The event `e` of a write by `actor` in `room` at `now`, as stored with
/// `id` (both backends answer a write with its stored events).
fn stored_event(room: &str, now: i64, actor: &str, e: NewEvent, id: i64) -> Event {
    Event {
        id,
        room: room.to_owned(),
        ts: now,
        kind: e.kind.as_str().to_owned(),
        actor: actor.to_owned(),
        task_id: e.task_id,
        message_id: e.message_id,
        detail: e.detail,
    }
}

/// The metadata of file `f`, stored with `id` by the record's actor.
fn stored_file(id: i64, f: &NewFile, record: &Record) -> FileMeta {
    FileMeta {
        file_id: id,
        name: f.name.clone(),
        sha256: f.sha256.clone(),
        size: f.content.len() as i64,
        mime: f.mime.clone(),
        author: record.actor.clone(),
        ts: record.now,
        expires_at: f.expires_at,
        task_id: f.task_id,
    }
}

/// The broken build that `tests/history` must catch, in `history-fault`
/// builds only: with `CHATROOM_HISTORY_FAULT=unguarded-claim` a claim is
/// written without its version guard (decided on the task as read, written
/// whatever happened since). Every other change, and every other build,
/// keeps `sql` as it is.
#[cfg(feature = "history-fault")]
pub(crate) fn unguard(sql: &str, c: &TaskChange) -> String {
    let claim = c
        .record
        .events
        .iter()
        .any(|e| e.kind == EventKind::TaskClaimed);
    if claim && std::env::var("CHATROOM_HISTORY_FAULT").as_deref() == Ok("unguarded-claim") {
        // Versions are positive: `version <> -N` holds for every row.
        sql.replace("AND version = ", "AND version <> -")
    } else {
        sql.to_owned()
    }
}

/// The type of a column, for moving rows between backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    Int,
    Text,
    Bool,
    /// A list of strings (JSON text on SQLite, `TEXT[]` on PostgreSQL).
    List,
    /// A JSON value (text on SQLite, `JSONB` on PostgreSQL).
    Json,
    Bytes,
}

/// A table of the schema: its name, whether rows are keyed by an `id`
/// column, and its columns. Both backends have these tables and columns.
pub struct Table {
    pub name: &'static str,
    pub keyed_by_id: bool,
    pub columns: &'static [(&'static str, Col)],
}

impl Table {
    /// The table named `name`, if it is one of ours.
    pub fn named(name: &str) -> Result<&'static Table> {
        TABLES.iter().find(|t| t.name == name).ok_or_else(|| {
            crate::error::Error::invalid(format!("{name:?} is not a table of chatroom"))
        })
    }

    /// The column names, comma-separated.
    pub fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|(c, _)| *c)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The key order (`id`, or every column for the tables without one).
    pub fn order_by(&self) -> String {
        if self.keyed_by_id {
            "id".into()
        } else {
            self.columns
                .iter()
                .filter(|(_, t)| *t == Col::Text || *t == Col::Int)
                .map(|(c, _)| *c)
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

/// A column list with the columns of a stored grant (tokens, connect codes
/// and OAuth grants alike) between `before` and `after`.
macro_rules! with_grant {
    ([$($before:expr),* $(,)?], [$($after:expr),* $(,)?]) => {
        &[
            $($before,)*
            ("agent", Text),
            ("room", Text),
            ("also_rooms", List),
            ("readonly", Bool),
            ("admin", Bool),
            ("all_rooms", Bool),
            ("lead", Bool),
            ("skills", List),
            $($after),*
        ]
    };
}

/// Every table of an instance, in an order that loads cleanly.
pub const TABLES: &[Table] = {
    use Col::*;
    &[
        Table {
            name: "rooms",
            keyed_by_id: false,
            columns: &[
                ("name", Text),
                ("description", Text),
                ("repo_url", Text),
                ("onboarding_notes", Text),
                ("retention_days", Int),
                ("created_ts", Int),
            ],
        },
        Table {
            name: "tokens",
            keyed_by_id: true,
            columns: with_grant!(
                [("id", Int), ("hash", Text)],
                [
                    ("created_ts", Int),
                    ("revoked_ts", Int),
                    ("last_used_ts", Int),
                    ("profile", Text)
                ]
            ),
        },
        Table {
            name: "presence",
            keyed_by_id: false,
            columns: &[("room", Text), ("agent", Text), ("last_seen_ts", Int)],
        },
        Table {
            name: "agent_status",
            keyed_by_id: false,
            columns: &[
                ("room", Text),
                ("agent", Text),
                ("state", Text),
                ("state_ts", Int),
                ("attention", Text),
                ("attention_ts", Int),
                ("hook_seen_ts", Int),
                ("push_seen_ts", Int),
            ],
        },
        Table {
            name: "tasks",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("title", Text),
                ("body", Text),
                ("status", Text),
                ("assignee", Text),
                ("version", Int),
                ("created_by", Text),
                ("created_ts", Int),
                ("updated_ts", Int),
                ("priority", Text),
                ("required_skill", Text),
                ("needs_review", Bool),
                ("result", Text),
                ("lease_seconds", Int),
                ("lease_expires_ts", Int),
            ],
        },
        Table {
            name: "task_deps",
            keyed_by_id: false,
            columns: &[("task_id", Int), ("depends_on", Int)],
        },
        Table {
            name: "notes",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("task_id", Int),
                ("room", Text),
                ("ts", Int),
                ("author", Text),
                ("body", Text),
            ],
        },
        Table {
            name: "messages",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("ts", Int),
                ("author", Text),
                ("body", Text),
                ("reply_to", Int),
            ],
        },
        Table {
            name: "mentions",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("agent", Text),
                ("message_id", Int),
                ("note_id", Int),
                ("task_id", Int),
                ("ts", Int),
                ("seq", Int),
            ],
        },
        Table {
            name: "events",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("ts", Int),
                ("kind", Text),
                ("actor", Text),
                ("task_id", Int),
                ("message_id", Int),
                ("detail", Json),
            ],
        },
        Table {
            name: "cursors",
            keyed_by_id: false,
            columns: &[("room", Text), ("agent", Text), ("event_id", Int)],
        },
        Table {
            name: "files",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("name", Text),
                ("mime", Text),
                ("size", Int),
                ("sha256", Text),
                ("content", Bytes),
                ("author", Text),
                ("ts", Int),
                ("expires_ts", Int),
                ("task_id", Int),
            ],
        },
        Table {
            name: "audit",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("ts", Int),
                ("agent", Text),
                ("room", Text),
                ("tool", Text),
                ("task_id", Int),
                ("outcome", Text),
            ],
        },
        Table {
            name: "admin_log",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("ts", Int),
                ("actor", Text),
                ("address", Text),
                ("action", Text),
                ("target", Text),
                ("flagged", Bool),
            ],
        },
        Table {
            name: "oauth_clients",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("client_id", Text),
                ("secret_hash", Text),
                ("client_name", Text),
                ("redirect_uris", List),
                ("auth_method", Text),
                ("created_ts", Int),
                ("used_ts", Int),
            ],
        },
        Table {
            name: "oauth_connect_codes",
            keyed_by_id: true,
            columns: with_grant!(
                [("id", Int), ("hash", Text)],
                [
                    ("profile", Text),
                    ("created_ts", Int),
                    ("expires_ts", Int),
                    ("used_ts", Int)
                ]
            ),
        },
        Table {
            name: "oauth_grants",
            keyed_by_id: true,
            columns: with_grant!(
                [("id", Int), ("client_id", Text), ("client_name", Text)],
                [
                    ("profile", Text),
                    ("created_ts", Int),
                    ("revoked_ts", Int),
                    ("refresh_hash", Text),
                    ("refresh_prev_hash", Text),
                    ("refresh_rotated_ts", Int),
                    ("refresh_expires_ts", Int)
                ]
            ),
        },
        Table {
            name: "oauth_auth_codes",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("hash", Text),
                ("grant_id", Int),
                ("client_id", Text),
                ("redirect_uri", Text),
                ("code_challenge", Text),
                ("resource", Text),
                ("created_ts", Int),
                ("expires_ts", Int),
                ("used_ts", Int),
                ("redirect_uri_given", Bool),
            ],
        },
        Table {
            name: "oauth_tokens",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("hash", Text),
                ("grant_id", Int),
                ("kind", Text),
                ("created_ts", Int),
                ("expires_ts", Int),
                ("spent_ts", Int),
            ],
        },
        Table {
            name: "oauth_keys",
            keyed_by_id: false,
            columns: &[("name", Text), ("value", Text), ("created_ts", Int)],
        },
        Table {
            name: "webhooks",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("room", Text),
                ("url", Text),
                ("format", Text),
                ("events", Text),
                ("secret", Text),
                ("created_ts", Int),
                ("cursor", Int),
                ("attempts", Int),
                ("next_ts", Int),
                ("first_fail_ts", Int),
                ("failures", Int),
                ("paused", Bool),
                ("delivered", Int),
                ("last_ts", Int),
                ("last_status", Text),
                ("lease_owner", Text),
                ("lease_until", Int),
            ],
        },
        Table {
            name: "inbound_hooks",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("key", Text),
                ("room", Text),
                ("agent", Text),
                ("secret", Text),
                ("secret_hash", Text),
                ("created_ts", Int),
                ("last_used_ts", Int),
            ],
        },
        Table {
            name: "task_stuck",
            keyed_by_id: false,
            columns: &[("task_id", Int), ("activity_ts", Int)],
        },
    ]
};

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://…`),
/// creating and migrating it as needed.
pub async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        Ok(Arc::new(sqlite::SqliteStore::open(path).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PostgresStore::open(url).await?))
    } else {
        anyhow::bail!("unsupported database URL (expected sqlite://PATH or postgres://…)")
    }
}
