//! The model: the values the domain decides on and the store keeps — rooms,
//! tokens, chat, the board, files, events — and the [`Record`] of what a
//! write stores beside its main row. Both backends read and write these
//! types; nothing here touches storage.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::secret::TokenHash;

/// The actor of events the server makes itself (a lapsed lease).
pub const SERVER_ACTOR: &str = "(server)";
/// The actor of changes made with the admin CLI, which has no token.
pub const ADMIN_ACTOR: &str = "(admin)";

named_enum! {
    /// What an event says happened. Stored and shown as its snake_case name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum EventKind {
        Message => "message",
        TaskCreated => "task_created",
        TaskClaimed => "task_claimed",
        TaskUpdated => "task_updated",
        TaskReleased => "task_released",
        NoteAdded => "note_added",
        TaskSubmitted => "task_submitted",
        TaskReviewed => "task_reviewed",
        TaskCancelled => "task_cancelled",
        TaskLeaseExpired => "task_lease_expired",
        FileAdded => "file_added",
        FileDeleted => "file_deleted",
        RoomInfoUpdated => "room_info_updated",
        RetentionSet => "retention_set",
        TaskStuck => "task_stuck",
    }
}

/// What a write stores beside its main row, all decided in the domain: the
/// events it appends (by `actor`, at `now`), the mentions in the text it
/// adds, and its audit row. A backend stores one in the transaction of the
/// main statement, after [`Record::stamp`] has given it the ids that
/// statement assigned; it takes no decision of its own.
#[derive(Debug, Clone)]
pub struct Record {
    /// The time of the write: its rows, events and audit row carry it.
    pub now: i64,
    /// Who the write is by: its events, its message or note, its audit row.
    pub actor: String,
    pub events: Vec<NewEvent>,
    /// The agents (lowercase) the write's message or note mentions.
    pub mentions: Vec<String>,
    /// The tool whose audit row the write carries; `None` writes none (a
    /// change with no call behind it: the server's own, the admin CLI's).
    pub audit_tool: Option<&'static str>,
    /// The task the write concerns, named by its audit row and mentions.
    pub task_id: Option<i64>,
}

/// What the main statement of a write assigned or removed, which only the
/// store learns (see [`Record::stamp`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    /// The new message's id: its event and mentions point to it.
    pub message_id: Option<i64>,
    /// The new task's id: every event and the audit row point to it.
    pub task_id: Option<i64>,
    /// The new note's id, for the `note_added` event.
    pub note_id: Option<i64>,
    /// The new file's id, for the `file_added` event.
    pub file_id: Option<i64>,
    /// What setting the retention pruned, for the `retention_set` event.
    pub pruned: Option<PruneCount>,
}

impl Record {
    /// A write by `actor` at `now`, carrying the audit row of `audit_tool`.
    pub fn new(actor: impl Into<String>, audit_tool: Option<&'static str>, now: i64) -> Record {
        Record {
            now,
            actor: actor.into(),
            events: Vec::new(),
            mentions: Vec::new(),
            audit_tool,
            task_id: None,
        }
    }

    /// Appends an event.
    pub fn event(
        mut self,
        kind: EventKind,
        task_id: Option<i64>,
        message_id: Option<i64>,
        detail: Value,
    ) -> Record {
        self.events.push(NewEvent {
            kind,
            task_id,
            message_id,
            detail,
        });
        self
    }

    /// Completes the record with what the main statement assigned: the
    /// events then say which message, task, note or file they are about.
    pub fn stamp(&mut self, w: &Written) {
        if w.task_id.is_some() {
            self.task_id = w.task_id;
        }
        for e in &mut self.events {
            if w.message_id.is_some() {
                e.message_id = w.message_id;
            }
            if w.task_id.is_some() {
                e.task_id = w.task_id;
            }
            match (e.kind, w.note_id, w.file_id, w.pruned) {
                (EventKind::NoteAdded, Some(id), _, _) => e.detail["note_id"] = json!(id),
                (EventKind::FileAdded, _, Some(id), _) => e.detail["file_id"] = json!(id),
                (EventKind::RetentionSet, _, _, Some(p)) => e.detail["pruned"] = json!(p),
                _ => {}
            }
        }
    }
}

/// A room and its settings.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Room {
    pub name: String,
    pub description: String,
    pub repo_url: String,
    pub onboarding_notes: String,
    pub retention_days: i64,
}

/// Room info fields to change; `None` leaves a field as it is. Declared
/// once, like [`Grant`]: read from the REST body (serde) and the CLI's flags
/// (clap).
// (And flattened into `set_room_info`'s arguments, whose schema schemars
// makes; the doc comment above is the OpenAPI description.)
#[derive(
    Debug, Clone, Default, Deserialize, clap::Args, utoipa::ToSchema, rmcp::schemars::JsonSchema,
)]
#[schemars(crate = "rmcp::schemars")]
#[group(skip)]
pub struct RoomInfo {
    /// What the room is for (max 2,000 chars).
    #[arg(long)]
    pub description: Option<String>,
    /// The repository the room works on (max 500 chars).
    #[arg(long)]
    pub repo_url: Option<String>,
    /// What a newcomer should read first (max 8,000 chars).
    #[arg(long)]
    pub onboarding_notes: Option<String>,
}

impl RoomInfo {
    /// The names of the fields this changes, as the `room_info_updated` event lists them.
    pub fn changed_fields(&self) -> Vec<&'static str> {
        [
            ("description", self.description.is_some()),
            ("repo_url", self.repo_url.is_some()),
            ("onboarding_notes", self.onboarding_notes.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
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
            match Status::parse(&status) {
                Ok(Status::Pending) => c.pending = n,
                Ok(Status::InProgress) => c.in_progress = n,
                Ok(Status::Blocked) => c.blocked = n,
                Ok(Status::InReview) => c.in_review = n,
                Ok(Status::Done) => c.done = n,
                Ok(Status::Cancelled) => c.cancelled = n,
                Err(_) => {}
            }
        }
        c
    }
}

/// Who is calling: the agent and the grant of its token (or of its app's
/// OAuth grant), read through as the caller's own fields.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: i64,
    /// The hash of the token, so an open stream can re-check it without
    /// reading the request's `Authorization` again.
    pub token_hash: TokenHash,
    pub grant: Grant,
}

impl Caller {
    /// The caller of the token stored as `t`, whose hash is `token_hash`.
    pub fn new(t: TokenRecord, token_hash: TokenHash) -> Caller {
        Caller {
            token_id: t.id,
            token_hash,
            grant: t.grant,
        }
    }
}

impl std::ops::Deref for Caller {
    type Target = Grant;
    fn deref(&self) -> &Grant {
        &self.grant
    }
}

/// A token as stored: everything but the raw value.
#[derive(Debug, Clone, Serialize)]
pub struct TokenRecord {
    pub id: i64,
    #[serde(flatten)]
    pub grant: Grant,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub revoked_ts: Option<i64>,
    /// When the agent was last seen, with any of its tokens (presence).
    #[serde(with = "crate::clock::ts_opt")]
    pub last_seen: Option<i64>,
    /// When this token itself was last used, to the minute (`None`: never).
    #[serde(with = "crate::clock::ts_opt")]
    pub last_used: Option<i64>,
}

/// A token to store; `hash` is the SHA-256 of the raw token.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub hash: String,
    pub grant: Grant,
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

/// One entry of a room's history (shown by `present::event`).
#[derive(Debug, Clone)]
pub struct Event {
    pub id: i64,
    pub room: String,
    pub ts: i64,
    pub kind: String,
    pub actor: String,
    pub task_id: Option<i64>,
    pub message_id: Option<i64>,
    /// The structured record (`data` in every answer).
    pub detail: Value,
}

/// An event to append; the store assigns its id, and its time and actor
/// come from its [`Record`].
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: EventKind,
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

impl EventFilter {
    /// Every kind of event after `since_id`, up to `limit` of them.
    pub fn after(since_id: i64, limit: i64) -> EventFilter {
        EventFilter {
            since_id,
            limit,
            kind: None,
            task_id: None,
        }
    }
}

/// A page of events after an agent's cursor.
#[derive(Debug, Clone)]
pub struct EventPage {
    /// The cursor before this read (0 on the first look).
    pub since: i64,
    /// Whether the agent had never looked at this room before.
    pub first_look: bool,
    pub events: Vec<Event>,
    /// Events left after this page, counted up to
    /// [`REMAINING_CAP`](crate::domain::events::REMAINING_CAP).
    pub remaining: i64,
    /// More may be left than `remaining` says: the count stopped at its cap
    /// (or, with the caller's own events left out, at the events it looked at).
    pub remaining_more: bool,
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

/// What the store keeps of an agent's presence in a room (SPEC §8a): the
/// state its hooks last said, its attention switch, and when its hook and
/// its push clients were last seen. Strings as stored; `domain::presence`
/// gives them their meaning.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStatus {
    pub agent: String,
    pub state: Option<String>,
    pub state_ts: Option<i64>,
    pub attention: Option<String>,
    pub hook_seen_ts: Option<i64>,
    pub push_seen_ts: Option<i64>,
}

/// A batch entry of the marks kept in memory and written behind: a hook
/// seen (kept at its latest), or this replica's push clients of the agent
/// still connected (a time) or all gone (`Some(0)`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReachMark {
    pub room: String,
    pub agent: String,
    pub hook_seen_ts: Option<i64>,
    pub push_seen_ts: Option<i64>,
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

/// How many rows a prune removed.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct PruneCount {
    pub messages: u64,
    pub events: u64,
    pub files: u64,
}

named_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Status {
        Pending => "pending",
        InProgress => "in_progress",
        Blocked => "blocked",
        InReview => "in_review",
        Done => "done",
        Cancelled => "cancelled",
    }
}

impl Status {
    /// The statuses `open` stands for.
    pub const OPEN: [Status; 4] = [
        Status::Pending,
        Status::InProgress,
        Status::Blocked,
        Status::InReview,
    ];

    /// The statuses a lease runs in.
    pub const LEASED: [Status; 2] = [Status::InProgress, Status::Blocked];

    pub fn parse(s: &str) -> Result<Status> {
        Status::named(s).ok_or_else(|| {
                Error::invalid(format!(
                    "unknown status {s:?}; statuses are pending, in_progress, blocked, in_review, done, cancelled"
                ))
            })
    }

    pub fn is_final(self) -> bool {
        matches!(self, Status::Done | Status::Cancelled)
    }

    /// Whether a task in this status has a holder (its assignee).
    pub fn held(self) -> bool {
        matches!(
            self,
            Status::InProgress | Status::Blocked | Status::InReview
        )
    }

    /// Whether a lease runs in this status.
    pub fn leased(self) -> bool {
        matches!(self, Status::InProgress | Status::Blocked)
    }
}

/// A task as clients see it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Task {
    pub id: i64,
    pub room: String,
    pub title: String,
    pub body: String,
    pub status: Status,
    pub assignee: Option<String>,
    pub depends_on: Vec<i64>,
    pub blocked_by_unfinished: Vec<i64>,
    pub version: i64,
    pub created_by: String,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts")]
    pub updated_ts: i64,
    pub priority: String,
    pub required_skill: Option<String>,
    pub needs_review: bool,
    pub result: Option<String>,
    #[serde(with = "crate::clock::ts_opt")]
    pub lease_expires_ts: Option<i64>,
    /// The lease length a holder's writes renew; not shown.
    #[serde(skip)]
    pub lease_seconds: Option<i64>,
}

impl Task {
    /// The holder: the assignee of a task in a held status.
    pub fn holder(&self) -> Option<&str> {
        self.assignee.as_deref().filter(|_| self.status.held())
    }

    /// Whether the lease ran out by `now`.
    pub fn lease_lapsed(&self, now: i64) -> bool {
        self.status.leased() && self.lease_expires_ts.is_some_and(|t| t <= now)
    }
}

/// A note on a task's thread.
#[derive(Debug, Clone, Serialize)]
pub struct Note {
    pub id: i64,
    pub task_id: i64,
    pub author: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub body: String,
}

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub title: String,
    pub body: String,
    pub depends_on: Vec<i64>,
    pub status: Status,
    pub assignee: Option<String>,
    pub created_by: String,
    pub priority: String,
    pub required_skill: Option<String>,
    pub needs_review: bool,
    /// What else creating it writes (its events, its audit row).
    pub record: Record,
}

/// The whole new state of a task's mutable fields, decided on
/// `expected_version`, with the record of what else the change writes.
#[derive(Debug, Clone)]
pub struct TaskChange {
    /// The task it changes.
    pub task_id: i64,
    pub expected_version: i64,
    pub status: Status,
    pub assignee: Option<String>,
    pub body: String,
    pub result: Option<String>,
    pub lease_seconds: Option<i64>,
    pub lease_expires_ts: Option<i64>,
    /// The body of the note the change adds, by the record's actor; the
    /// record's mentions are the note's.
    pub note: Option<String>,
    pub record: Record,
}

/// A list query.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    /// Empty means every status.
    pub statuses: Vec<Status>,
    pub assignee: Option<String>,
    pub limit: i64,
    pub before_id: Option<i64>,
}

/// A mention of an agent in a message or a note.
#[derive(Debug, Clone, Serialize)]
pub struct Mention {
    /// Where the mention sits among the room's messages, for `since_id`:
    /// the message's id, or for a note the id of the room's newest message
    /// when the note was written.
    #[serde(skip)]
    pub seq: i64,
    pub message_id: Option<i64>,
    pub note_id: Option<i64>,
    pub task_id: Option<i64>,
    pub author: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub body: String,
}

/// One search result.
#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    pub kind: String,
    pub message_id: Option<i64>,
    pub task_id: Option<i64>,
    pub note_id: Option<i64>,
    pub author: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    pub snippet: String,
}

/// A stored file's metadata.
#[derive(Debug, Clone, Serialize)]
pub struct FileMeta {
    pub file_id: i64,
    pub name: String,
    pub sha256: String,
    pub size: i64,
    pub mime: String,
    pub author: String,
    #[serde(with = "crate::clock::ts")]
    pub ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub expires_at: Option<i64>,
    pub task_id: Option<i64>,
}

/// A file to store.
#[derive(Debug, Clone)]
pub struct NewFile {
    pub name: String,
    pub mime: String,
    pub content: Vec<u8>,
    pub sha256: String,
    pub expires_at: Option<i64>,
    pub task_id: Option<i64>,
}

/// What a token, a connect code or an app's grant lets its agent do: the
/// agent's name, its rooms and its flags. Declared once: stored on tokens,
/// connect codes and OAuth grants (flattened into their records), carried
/// by every [`Caller`], read from the console's forms (serde) and the CLI's
/// flags (clap), and checked by [`Grant::check`] and [`Grant::normalized`].
#[derive(
    Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, clap::Args, utoipa::ToSchema,
)]
pub struct Grant {
    /// The agent's name (its identity in every room).
    #[arg(long)]
    pub agent: String,
    /// The default room.
    #[arg(long)]
    pub room: String,
    /// Another room granted besides the default one (repeatable).
    #[arg(long = "also-room")]
    #[serde(default)]
    pub also_rooms: Vec<String>,
    /// Observer: read tools only.
    #[arg(long)]
    #[serde(default)]
    pub readonly: bool,
    /// Room admin: retention, room deletion, any file.
    #[arg(long)]
    #[serde(default)]
    pub admin: bool,
    /// Every room on the server.
    #[arg(long)]
    #[serde(default)]
    pub all_rooms: bool,
    /// Leader: reviews, cancels, assigns.
    #[arg(long)]
    #[serde(default)]
    pub lead: bool,
    /// A skill the agent has (repeatable).
    #[arg(long = "skill")]
    #[serde(default)]
    pub skills: Vec<String>,
    /// Which tools the agent sees and may call: full (every tool), worker,
    /// lead, observer (the read tools) or app (the board app).
    #[arg(long, default_value = "full")]
    #[serde(default)]
    pub profile: crate::domain::profile::Profile,
}

impl Grant {
    /// Whether this grant lets its agent act in `room` (existence is
    /// checked elsewhere).
    pub fn granted(&self, room: &str) -> bool {
        self.all_rooms || self.room == room || self.also_rooms.iter().any(|r| r == room)
    }

    /// Every room named by the grant (the default first).
    pub fn rooms(&self) -> Vec<String> {
        let mut rooms = vec![self.room.clone()];
        rooms.extend(self.also_rooms.iter().filter(|r| **r != self.room).cloned());
        rooms
    }

    /// Whether the grant carries whole-server admin functions.
    pub fn server_admin(&self) -> bool {
        self.admin && self.all_rooms
    }

    /// The flags that are on, by name (`readonly`, `admin`, `all_rooms`, `lead`).
    pub fn flags(&self) -> Vec<&'static str> {
        [
            (self.readonly, "readonly"),
            (self.admin, "admin"),
            (self.all_rooms, "all_rooms"),
            (self.lead, "lead"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    /// `room lobby +dev; admin, all_rooms`, for the admin log.
    pub fn describe(&self) -> String {
        let mut s = format!("room {}", self.room);
        for r in &self.also_rooms {
            s.push_str(&format!(" +{r}"));
        }
        let flags = self.flags();
        if !flags.is_empty() {
            s.push_str("; ");
            s.push_str(&flags.join(", "));
        }
        s
    }

    /// The same grant with surrounding white space cut from every name (as
    /// typed into a form).
    pub fn trimmed(self) -> Grant {
        let trim = |list: Vec<String>| list.into_iter().map(|s| s.trim().to_owned()).collect();
        Grant {
            agent: self.agent.trim().to_owned(),
            room: self.room.trim().to_owned(),
            also_rooms: trim(self.also_rooms),
            skills: trim(self.skills),
            ..self
        }
    }

    /// Checks what needs no storage: the agent's and every room's name, and
    /// each skill against its limits.
    pub fn check(&self) -> Result<()> {
        crate::domain::names::check_agent(&self.agent)?;
        for room in std::iter::once(&self.room).chain(&self.also_rooms) {
            crate::domain::names::check_room(room)?;
        }
        for skill in &self.skills {
            crate::domain::limits::non_empty("skill", skill)?;
            crate::domain::limits::check("skill", skill, crate::domain::limits::SKILL)?;
        }
        Ok(())
    }

    /// The grant as stored: its extra rooms without the default one, sorted,
    /// each once (`a, b, a` is `a, b`).
    pub fn normalized(mut self) -> Grant {
        let default_room = self.room.clone();
        self.also_rooms.retain(|r| *r != default_room);
        self.also_rooms.sort();
        self.also_rooms.dedup();
        self
    }
}

// ---------------------------------------------------------------- OAuth

/// A registered client (dynamic client registration).
#[derive(Debug, Clone)]
pub struct OAuthClient {
    pub client_id: String,
    /// SHA-256 of the client secret, for confidential clients.
    pub secret_hash: Option<String>,
    pub client_name: String,
    pub redirect_uris: Vec<String>,
    /// `none`, `client_secret_post` or `client_secret_basic`.
    pub auth_method: String,
    pub created_ts: i64,
    /// When an authorization for it was first approved.
    pub used_ts: Option<i64>,
}

/// A connect code to store.
#[derive(Debug, Clone)]
pub struct NewConnectCode {
    pub hash: String,
    pub grant: Grant,
    pub created_ts: i64,
    pub expires_ts: i64,
}

/// What a minted connect code grants and until when (never the code).
#[derive(Debug, Clone, Serialize)]
pub struct ConnectCodeInfo {
    #[serde(flatten)]
    pub grant: Grant,
    #[serde(with = "crate::clock::ts")]
    pub expires_at: i64,
}

/// An app's standing permission, as stored.
#[derive(Debug, Clone, Serialize)]
pub struct GrantRecord {
    pub id: i64,
    pub client_id: String,
    pub client_name: String,
    #[serde(flatten)]
    pub grant: Grant,
    #[serde(with = "crate::clock::ts")]
    pub created_ts: i64,
    #[serde(with = "crate::clock::ts_opt")]
    pub revoked_ts: Option<i64>,
    /// The grant's refresh-token chain (never shown).
    #[serde(skip)]
    pub refresh: RefreshChain,
}

/// A grant's refresh token as stored on the grant: one row per grant,
/// however often it refreshes (see [`refresh`]).
#[derive(Debug, Clone, Default)]
pub struct RefreshChain {
    /// SHA-256 of the live refresh token (none before the code exchange).
    pub hash: Option<String>,
    /// SHA-256 of the token the live one replaced.
    pub prev_hash: Option<String>,
    /// When the live one replaced it.
    pub rotated_ts: Option<i64>,
    /// When the live one expires.
    pub expires_ts: Option<i64>,
}

/// A refresh-token rotation to store in one transaction: the grant's live
/// token changes from `old_hash` (`None`: the grant has none yet) to
/// `new_hash`, and `access` is issued with it. It happens only if the live
/// token is still `old_hash`, so of two rotations racing on any replicas
/// one wins.
#[derive(Debug, Clone)]
pub struct Rotation {
    pub grant_id: i64,
    pub old_hash: Option<String>,
    pub new_hash: String,
    pub expires_ts: i64,
    pub access: NewOAuthToken,
    pub now: i64,
}

impl GrantRecord {
    /// The caller of an access token of this grant, whose hash is
    /// `token_hash`. Its `token_id` is the grant's id negated, so per-token
    /// limits never mix a grant with a `cr_` token.
    pub fn caller(self, token_hash: TokenHash) -> Caller {
        Caller {
            token_id: -self.id,
            token_hash,
            grant: self.grant,
        }
    }
}

/// An authorization code to store with the grant it stands for.
#[derive(Debug, Clone)]
pub struct NewAuthCode {
    pub hash: String,
    pub client_id: String,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub resource: Option<String>,
    pub expires_ts: i64,
    /// Whether the authorization request named `redirect_uri` (then the
    /// token request must name it again).
    pub redirect_uri_given: bool,
}

/// A stored authorization code.
#[derive(Debug, Clone)]
pub struct AuthCode {
    pub grant_id: i64,
    pub client_id: String,
    pub redirect_uri: String,
    pub redirect_uri_given: bool,
    pub code_challenge: String,
    pub resource: Option<String>,
    pub expires_ts: i64,
}

/// What spending an authorization code found.
#[derive(Debug, Clone)]
pub enum CodeTake {
    /// Unused until now; it is spent.
    Fresh(AuthCode),
    /// Spent before: a replay.
    Replayed {
        grant_id: i64,
    },
    Unknown,
}

/// An access token to store (refresh tokens live on their grant).
#[derive(Debug, Clone)]
pub struct NewOAuthToken {
    pub hash: String,
    pub grant_id: i64,
    /// `access`.
    pub kind: &'static str,
    pub expires_ts: i64,
}

/// A stored access token.
#[derive(Debug, Clone)]
pub struct OAuthTokenRecord {
    pub grant_id: i64,
    pub kind: String,
    pub expires_ts: i64,
    pub spent_ts: Option<i64>,
}

/// Lifetimes of what the token endpoint issues.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub access_ms: i64,
    pub refresh_ms: i64,
}
