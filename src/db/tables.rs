//! The schema as both backends have it, table by table and column by
//! column with each column's kind: what `chatroom admin copy` moves between
//! them ([`CopyStore`](crate::domain::store::CopyStore)).

use crate::error::Result;

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
