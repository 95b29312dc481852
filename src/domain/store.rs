//! The port: the one storage contract the domain writes through. The
//! backends in `db/` implement it; the domain never sees which one runs.

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::domain::EventBus;
use crate::domain::model::*;
use crate::error::Result;

/// The storage contract. Both backends pass the same tests
/// (`tests/store_contract.rs`).
///
/// A write takes what the domain decided: the main row, and a [`Record`] of
/// the events, mentions and audit row that go with it, stamped with `now`.
/// The store writes both in one transaction and decides nothing itself.
#[async_trait]
pub trait Store: crate::domain::store_webhooks::WebhookStore + Send + Sync + 'static {
    /// `Ok` when the database answers.
    async fn health(&self) -> Result<()>;

    // Rooms
    async fn create_room(&self, room: &Room, now: i64) -> Result<bool>;
    async fn get_room(&self, name: &str) -> Result<Option<Room>>;
    /// Every room with its counts; files that expired by `now` do not count.
    async fn list_rooms(&self, now: i64) -> Result<Vec<RoomSummary>>;
    async fn update_room_info(
        &self,
        room: &str,
        info: &RoomInfo,
        record: Record,
    ) -> Result<Option<(Room, Event)>>;
    async fn set_retention(
        &self,
        room: &str,
        days: i64,
        record: Record,
    ) -> Result<Option<(Event, PruneCount)>>;
    async fn delete_room(&self, room: &str) -> Result<bool>;
    /// Prunes every room past its retention, and expired files, as of `now`.
    async fn prune(&self, now: i64) -> Result<PruneCount>;

    // Tokens and presence
    async fn insert_token(&self, token: &NewToken, now: i64) -> Result<i64>;
    async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>>;
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    async fn revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    /// Revokes the token with `id`; `false` when there is none or it was
    /// revoked already.
    async fn revoke_token(&self, id: i64, now: i64) -> Result<bool>;
    async fn purge_tokens(&self, revoked_before: i64) -> Result<u64>;
    async fn members(&self, room: &str) -> Result<Vec<Member>>;
    /// The agents (lowercase, each once) of live tokens that can read
    /// `room`: its own tokens, those naming it among their rooms, and
    /// all-rooms tokens. Only they are indexed as mentioned there.
    async fn room_agents(&self, room: &str) -> Result<Vec<String>>;
    async fn save_presence(&self, seen: &[(String, String, i64)]) -> Result<()>;
    /// Records `(token id, ts)` as each token's last use (a later one kept).
    async fn save_token_use(&self, used: &[(i64, i64)]) -> Result<()>;
    /// Sets the state `agent`'s hooks report in `room`, at `ts`.
    async fn save_agent_state(&self, room: &str, agent: &str, state: &str, ts: i64) -> Result<()>;
    /// Sets `agent`'s attention switch in `room`, at `ts`.
    async fn save_attention(&self, room: &str, agent: &str, attention: &str, ts: i64)
    -> Result<()>;
    /// Writes a batch of marks: a hook seen keeps the latest time; a push
    /// mark is set as given (`0` clears it).
    async fn save_reach_marks(&self, marks: &[ReachMark]) -> Result<()>;
    /// Every agent of `room` with a presence row, by name.
    async fn agent_statuses(&self, room: &str) -> Result<Vec<AgentStatus>>;

    // Chat
    /// Posts `body` by the record's actor; the record's mentions are the message's.
    async fn post_message(
        &self,
        room: &str,
        body: &str,
        reply_to: Option<i64>,
        record: Record,
    ) -> Result<(Message, Event)>;
    async fn read_messages(&self, room: &str, since_id: i64, limit: i64) -> Result<Vec<Message>>;
    /// The room and author of message `id`.
    async fn message_origin(&self, id: i64) -> Result<Option<(String, String)>>;
    async fn latest_message_id(&self, room: &str) -> Result<i64>;
    /// [`Store::read_messages`] and [`Store::latest_message_id`] together,
    /// in one round trip where the backend has them.
    async fn read_messages_latest(
        &self,
        room: &str,
        since_id: i64,
        limit: i64,
    ) -> Result<(Vec<Message>, i64)> {
        let messages = self.read_messages(room, since_id, limit).await?;
        Ok((messages, self.latest_message_id(room).await?))
    }

    // Events and cursors
    async fn read_events(&self, room: &str, filter: &EventFilter) -> Result<Vec<Event>>;
    async fn latest_event_id(&self, room: &str) -> Result<i64>;
    /// [`Store::read_events`] and [`Store::latest_event_id`] together, in
    /// one round trip where the backend has them.
    async fn read_events_latest(
        &self,
        room: &str,
        filter: &EventFilter,
    ) -> Result<(Vec<Event>, i64)> {
        let events = self.read_events(room, filter).await?;
        Ok((events, self.latest_event_id(room).await?))
    }
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
    /// Sets the agent's cursor in `room` back from `from` to `to`, if it is
    /// still at `from`; `false` when it had moved on. For a cursor beyond
    /// the room's history (a database restored under newer cursors), which
    /// would hide what is written next; cursors otherwise only move forward.
    async fn reset_cursor(&self, room: &str, agent: &str, from: i64, to: i64) -> Result<bool>;

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
        record: Record,
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
        change: TaskChange,
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
        record: Record,
    ) -> Result<(FileMeta, Event)>;
    async fn get_file(&self, room: &str, id: i64, now: i64) -> Result<Option<(FileMeta, Vec<u8>)>>;
    async fn file_meta(&self, room: &str, id: i64, now: i64) -> Result<Option<FileMeta>>;
    /// The room that holds file `id`, unless it expired by `now`.
    async fn file_room(&self, id: i64, now: i64) -> Result<Option<String>>;
    async fn list_files(&self, room: &str, limit: i64, now: i64) -> Result<Vec<FileMeta>>;
    async fn delete_file(&self, room: &str, id: i64, record: Record) -> Result<Option<Event>>;

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

    // Moving an instance (`chatroom admin copy`); `table` is one of `db::TABLES`.
    /// Up to `limit` rows of `table` in key order, as JSON objects of the
    /// `db::TABLES` columns (bytes in base64): those with an `id` above
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
    /// In one transaction: forgets unused registrations created before
    /// `unused_before`, makes room by forgetting the oldest unused one when
    /// `max` clients are stored, and stores `client`. `false` (nothing
    /// stored) when the store is full of clients that were used.
    async fn oauth_insert_client(
        &self,
        client: &OAuthClient,
        max: i64,
        unused_before: i64,
    ) -> Result<bool>;
    async fn oauth_client(&self, client_id: &str) -> Result<Option<OAuthClient>>;
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
    /// The access token with `hash` and its grant.
    async fn oauth_token(&self, hash: &str) -> Result<Option<(OAuthTokenRecord, GrantRecord)>>;
    /// The grant whose live refresh token, or the one it replaced, has `hash`.
    async fn oauth_grant_by_refresh(&self, hash: &str) -> Result<Option<GrantRecord>>;
    async fn oauth_grant(&self, id: i64) -> Result<Option<GrantRecord>>;
    /// In one transaction, if the grant is not revoked and its live refresh
    /// token is still `old_hash`: makes `new_hash` the live one (the old one
    /// becomes its predecessor, rotated at `now`) and stores the access
    /// token. `false` (nothing changed) otherwise.
    async fn oauth_rotate_refresh(&self, rotation: &Rotation) -> Result<bool>;
    async fn oauth_revoke_grant(&self, grant_id: i64, now: i64) -> Result<bool>;
    /// Revokes every grant of `agent`; returns how many.
    async fn oauth_revoke_agent(&self, agent: &str, now: i64) -> Result<u64>;
    async fn oauth_list_grants(&self) -> Result<Vec<GrantRecord>>;
    /// Deletes grants revoked before `revoked_before` (with their tokens).
    async fn oauth_purge_grants(&self, revoked_before: i64) -> Result<u64>;
    /// The server key `name`, stored as `fresh` if there was none yet (every
    /// replica gets the same one).
    async fn oauth_key(&self, name: &str, fresh: &str) -> Result<String>;
    /// Forgets what has expired as of `now`: unused registrations after an
    /// hour, spent or expired codes and tokens, grants run out; by index,
    /// in small batches, each its own short write.
    async fn oauth_prune(&self, now: i64) -> Result<u64>;
}
