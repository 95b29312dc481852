//! Storage: one [`Store`] trait, with SQLite (the embedded default) and
//! PostgreSQL behind it, chosen by the database URL. Each write method is one
//! transaction that makes the change, appends its event and its audit row
//! together, so an event never exists without its change or the other way.
//! The rules (who may, which transitions) are not here: they live in
//! `domain/`, which decides; the store only writes what was decided, guarded
//! by the version it was decided on.
//!
//! On PostgreSQL any number of replicas share the database: everything that
//! must hold across them (claims, versions, event order, token revocation)
//! is enforced in the database, and each replica's store relays the events
//! of the others to its in-process bus ([`Store::start_relay`]).

pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use tokio_util::sync::CancellationToken;

use crate::domain::EventBus;
use crate::error::Result;

/// A room and its settings.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Room {
    pub name: String,
    pub description: String,
    pub repo_url: String,
    pub onboarding_notes: String,
    pub retention_days: i64,
}

/// Room info fields to change; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct RoomInfo {
    pub description: Option<String>,
    pub repo_url: Option<String>,
    pub onboarding_notes: Option<String>,
}

/// A room with its counts, for listings.
#[derive(Debug, Clone, Serialize)]
pub struct RoomSummary {
    #[serde(flatten)]
    pub room: Room,
    pub open_tasks: i64,
    pub messages: i64,
    pub files: i64,
}

/// How many tasks of a room are in each status (the MQTT status topic).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct TaskCounts {
    pub pending: i64,
    pub in_progress: i64,
    pub blocked: i64,
    pub in_review: i64,
    pub done: i64,
    pub cancelled: i64,
}

impl TaskCounts {
    /// Counts from `(status, count)` rows, as both backends read them.
    pub fn from_rows(rows: Vec<(String, i64)>) -> TaskCounts {
        let mut c = TaskCounts::default();
        for (status, n) in rows {
            match status.as_str() {
                "pending" => c.pending = n,
                "in_progress" => c.in_progress = n,
                "blocked" => c.blocked = n,
                "in_review" => c.in_review = n,
                "done" => c.done = n,
                "cancelled" => c.cancelled = n,
                _ => {}
            }
        }
        c
    }
}

/// A token as stored: everything but the raw value.
#[derive(Debug, Clone, Serialize)]
pub struct TokenRecord {
    pub id: i64,
    pub agent: String,
    pub room: String,
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub revoked_ts: Option<i64>,
    #[serde(with = "crate::clock::ts_opt")]
    pub last_seen: Option<i64>,
}

/// A token to store; `hash` is the SHA-256 of the raw token.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub hash: String,
    pub agent: String,
    pub room: String,
    pub also_rooms: Vec<String>,
    pub readonly: bool,
    pub admin: bool,
    pub all_rooms: bool,
    pub lead: bool,
    pub skills: Vec<String>,
}

/// One chat message.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub id: i64,
    #[serde(skip)]
    pub room: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub author: String,
    pub body: String,
    pub reply_to: Option<i64>,
}

/// One entry of a room's history.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub id: i64,
    pub room: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub kind: String,
    pub actor: String,
    pub task_id: Option<i64>,
    pub message_id: Option<i64>,
    pub detail: Value,
}

/// An event to append; the store assigns id and time.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: &'static str,
    pub task_id: Option<i64>,
    pub message_id: Option<i64>,
    pub detail: Value,
}

/// One append-only audit row: who called which tool, on what, with what outcome.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub ts: i64,
    pub agent: String,
    pub room: Option<String>,
    pub tool: String,
    pub task_id: Option<i64>,
    pub outcome: String,
}

/// Filters for `read_events`.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub since_id: i64,
    pub limit: i64,
    pub kind: Option<String>,
    pub task_id: Option<i64>,
}

/// A page of events after an agent's cursor.
#[derive(Debug, Clone)]
pub struct EventPage {
    /// The cursor before this read (0 on the first look).
    pub since: i64,
    /// Whether the agent had never looked at this room before.
    pub first_look: bool,
    pub events: Vec<Event>,
    /// Events left after this page.
    pub remaining: i64,
}

/// A member of a room as `list_agents` shows it.
#[derive(Debug, Clone)]
pub struct Member {
    pub agent: String,
    pub lead: bool,
    pub readonly: bool,
    pub admin: bool,
    pub skills: Vec<String>,
    pub last_seen: Option<i64>,
}

/// An admin-console log entry.
#[derive(Debug, Clone, Serialize)]
pub struct AdminLogEntry {
    pub id: i64,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub actor: String,
    pub address: String,
    pub action: String,
    pub target: String,
    pub flagged: bool,
}

pub use crate::domain::oauth::{
    CodeTake, GrantRecord, NewAuthCode, NewConnectCode, NewOAuthToken, OAuthClient,
    OAuthTokenRecord,
};

pub use crate::domain::board::{
    FileMeta, Mention, NewFile, NewTask, Note, SearchHit, Task, TaskChange, TaskQuery,
};

/// What a write that carries the audit row needs to know about the call.
#[derive(Debug, Clone)]
pub struct Audit {
    pub agent: String,
    pub tool: &'static str,
}

/// The storage contract. Both backends pass the same tests.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// `Ok` when the database answers.
    async fn health(&self) -> Result<()>;

    // Rooms
    async fn create_room(&self, room: &Room) -> Result<bool>;
    async fn get_room(&self, name: &str) -> Result<Option<Room>>;
    async fn list_rooms(&self) -> Result<Vec<RoomSummary>>;
    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        audit: Option<&Audit>,
    ) -> Result<Option<(Room, Event)>>;
    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        audit: Option<&Audit>,
        now: i64,
    ) -> Result<Option<(Event, PruneCount)>>;
    async fn delete_room(&self, room: &str) -> Result<bool>;
    /// Prunes every room past its retention, and expired files, as of `now`.
    async fn prune(&self, now: i64) -> Result<PruneCount>;

    // Tokens and presence
    async fn insert_token(&self, token: &NewToken) -> Result<i64>;
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64>;
    async fn members(&self, room: &str) -> Result<Vec<Member>>;
    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()>;

    // Chat
    async fn post_message(
        &self,
        room: &str,
        author: &str,
        body: &str,
        reply_to: Option<i64>,
        mentions: &[String],
        audit: &Audit,
    ) -> Result<(Message, Event)>;
    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>>;
    async fn message_room(&self, id: i64) -> Result<Option<String>>;
    async fn latest_message_id(&self, room: &str) -> Result<i64>;

    // Events and cursors
    async fn read_events(&self, room: &str, filter: &EventFilter) -> Result<Vec<Event>>;
    async fn latest_event_id(&self, room: &str) -> Result<i64>;
    /// Events after the agent's cursor; with `advance`, moves the cursor past
    /// the returned page in the same transaction. `skip_own` leaves the
    /// agent's own events out of the page (they still move the cursor).
    async fn events_after_cursor(
        &self,
        room: &str,
        agent: &str,
        limit: i64,
        advance: bool,
        skip_own: bool,
    ) -> Result<EventPage>;
    /// Whether an event by someone other than `agent` lies past its cursor.
    async fn peer_event_after_cursor(&self, room: &str, agent: &str) -> Result<Option<i64>>;
    async fn cursor(&self, room: &str, agent: &str) -> Result<i64>;

    // Audit and admin log
    async fn insert_audit(&self, rows: &[AuditRow]) -> Result<()>;
    async fn audit_count(&self) -> Result<i64>;
    async fn insert_admin_log(&self, entry: &AdminLogEntry) -> Result<()>;
    async fn admin_log(&self, limit: i64) -> Result<Vec<AdminLogEntry>>;

    // Board
    async fn create_task(
        &self,
        room: &str,
        task: &NewTask,
        audit: &Audit,
    ) -> Result<(Task, Vec<Event>)>;
    async fn get_task(&self, room: &str, id: i64) -> Result<Option<Task>>;
    async fn list_tasks(&self, room: &str, query: &TaskQuery) -> Result<Vec<Task>>;
    /// How many of the room's tasks are in each status.
    async fn task_counts(&self, room: &str) -> Result<TaskCounts>;
    /// Writes a change decided on `change.expected_version`; `None` when the
    /// task moved on since (the caller re-reads and decides again).
    async fn apply_task_change(
        &self,
        room: &str,
        id: i64,
        change: &TaskChange,
        audit: Option<&Audit>,
    ) -> Result<Option<(Task, Vec<Event>)>>;
    /// Tasks whose lease lapsed before `now`, across rooms: `(room, id)`.
    async fn lapsed_leases(&self, now: i64) -> Result<Vec<(String, i64)>>;
    async fn notes(&self, task_id: i64) -> Result<Vec<Note>>;
    async fn my_mentions(
        &self,
        room: &str,
        agent: &str,
        since_id: i64,
        limit: i64,
    ) -> Result<Vec<Mention>>;
    async fn search(&self, room: &str, words: &[String], limit: i64) -> Result<Vec<SearchHit>>;

    // Files
    async fn put_file(
        &self,
        room: &str,
        file: &NewFile,
        audit: &Audit,
    ) -> Result<(FileMeta, Event)>;
    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>>;
    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>>;
    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>>;
    async fn delete_file(&self, room: &str, id: i64, audit: &Audit) -> Result<Option<Event>>;

    // Maintenance
    /// Writes one consistent copy of the whole database to `path`, a file
    /// that must not exist yet, while writers keep going. A backend without
    /// a built-in copy refuses and names the tool to use instead.
    async fn backup(&self, path: &str) -> Result<()> {
        let _ = path;
        Err(crate::error::Error::invalid(
            "this database has no built-in backup: use its own tools (pg_dump for PostgreSQL)",
        ))
    }

    // Cross-replica wake-ups
    /// Starts relaying events committed by other replicas of the same
    /// database to `bus`, until `shutdown`. A backend that only one process
    /// can serve (SQLite) has nothing to relay.
    async fn start_relay(&self, _bus: EventBus, _shutdown: CancellationToken) -> Result<()> {
        Ok(())
    }

    // Moving an instance (`chatroom admin copy`); `table` is one of [`TABLES`].
    /// Up to `limit` rows of `table` in key order, as JSON objects of the
    /// [`TABLES`] columns (bytes in base64): those with an `id` above
    /// `after`, or for a table without ids, those after the first `after`.
    async fn dump_table(&self, table: &str, after: i64, limit: i64) -> Result<Vec<Value>>;
    /// Inserts rows as `dump_table` gives them, keeping their ids.
    async fn load_rows(&self, table: &str, rows: &[Value]) -> Result<()>;
    /// How many rows `table` holds.
    async fn count_rows(&self, table: &str) -> Result<i64>;
    /// The highest id ever handed out in `table` (pruned rows included).
    async fn id_high_water(&self, table: &str) -> Result<i64>;
    /// Makes the ids handed out next in `table` come after `high`.
    async fn set_id_floor(&self, table: &str, high: i64) -> Result<()>;

    // OAuth (SPEC §2a): clients, connect codes, grants, authorization codes
    // and tokens, every secret by its SHA-256 (see `domain::oauth`).
    async fn oauth_insert_client(&self, client: &OAuthClient) -> Result<()>;
    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>>;
    async fn oauth_count_clients(&self) -> Result<i64>;
    async fn oauth_insert_connect_code(&self, code: &NewConnectCode) -> Result<()>;
    /// In one transaction: spends the unused, unexpired connect code with
    /// `connect_hash`, creates the grant it names for the client, stores
    /// `code` for that grant and marks the client used. `None` (nothing
    /// changed) when no such connect code is left.
    async fn oauth_approve(
        &self,
        connect_hash: &str,
        client_id: &str,
        client_name: &str,
        code: &NewAuthCode,
        now: i64,
    ) -> Result<Option<i64>>;
    /// Spends the authorization code with `hash` (or finds it spent).
    async fn oauth_take_auth_code(&self, hash: &str, now: i64) -> Result<CodeTake>;
    async fn oauth_insert_tokens(&self, tokens: &[NewOAuthToken]) -> Result<()>;
    /// The access or refresh token with `hash` and its grant.
    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>>;
    /// Spends the unspent token with `hash`; `false` when it was spent already.
    async fn oauth_spend_token(&self, hash: &str, now: i64) -> Result<bool>;
    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool>;
    /// Revokes every grant of `agent`; returns how many.
    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>>;
    /// Deletes grants revoked before `revoked_before` (with their tokens).
    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64>;
    /// The server key `name`, stored as `fresh` if there was none yet (every
    /// replica gets the same one).
    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String>;
    /// Forgets what has expired as of `now`: unused registrations after a
    /// day, spent or expired codes and tokens, grants left with no token.
    async fn oauth_prune(&self, now: i64) -> Result<u64>;
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
            columns: &[
                ("id", Int),
                ("hash", Text),
                ("agent", Text),
                ("room", Text),
                ("also_rooms", List),
                ("readonly", Bool),
                ("admin", Bool),
                ("all_rooms", Bool),
                ("lead", Bool),
                ("skills", List),
                ("created_ts", Int),
                ("revoked_ts", Int),
            ],
        },
        Table {
            name: "presence",
            keyed_by_id: false,
            columns: &[("room", Text), ("agent", Text), ("last_seen_ts", Int)],
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
                ("author", Text),
                ("ts", Int),
                ("body", Text),
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
            columns: &[
                ("id", Int),
                ("hash", Text),
                ("agent", Text),
                ("room", Text),
                ("also_rooms", List),
                ("readonly", Bool),
                ("admin", Bool),
                ("all_rooms", Bool),
                ("lead", Bool),
                ("skills", List),
                ("created_ts", Int),
                ("expires_ts", Int),
                ("used_ts", Int),
            ],
        },
        Table {
            name: "oauth_grants",
            keyed_by_id: true,
            columns: &[
                ("id", Int),
                ("client_id", Text),
                ("client_name", Text),
                ("agent", Text),
                ("room", Text),
                ("also_rooms", List),
                ("readonly", Bool),
                ("admin", Bool),
                ("all_rooms", Bool),
                ("lead", Bool),
                ("skills", List),
                ("created_ts", Int),
                ("revoked_ts", Int),
            ],
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
    ]
};

/// How many rows a prune removed.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct PruneCount {
    pub messages: u64,
    pub events: u64,
    pub files: u64,
}

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
