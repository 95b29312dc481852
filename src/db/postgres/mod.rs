//! The PostgreSQL backend: a connection pool shared by any number of `serve`
//! replicas, each of them stateless.
//!
//! What must hold across replicas is enforced here, in the database:
//! - every write that touches a room runs in one transaction that first takes
//!   the room's transaction lock (`pg_advisory_xact_lock`), so the ids of a
//!   room's events, messages, notes and mentions are handed out in the order
//!   the transactions commit: a reader never sees id 101 before id 100, and a
//!   cursor never skips a late commit (a plain sequence would allow that);
//! - task changes are written guarded by the version the domain decided on
//!   (`... WHERE version = $n`), so of two racing claims one updates a row and
//!   the other finds it moved on;
//! - every event is announced with `NOTIFY chatroom_events` in its own
//!   transaction (payload `room id`), which each replica's relay turns into
//!   bus events ([`Store::start_relay`]).
//!
//! This file holds the store, its pool, the writes every area shares and the
//! relay; each area of the port has its own file (`rooms.rs`, `tokens.rs`,
//! `chat.rs`, `events.rs`, `board.rs`, `files.rs`, `audit.rs`, `copy.rs`,
//! `oauth.rs`, `webhooks.rs`), and `rows.rs` runs their statements (arguments
//! from tuples, rows read through the shared mapping of `db/rows.rs`);
//! `stats.rs` keeps the planner's statistics fresh after a burst.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Map, Value, json};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio_util::sync::CancellationToken;

mod audit;
mod board;
mod cache;
mod chat;
mod copy;
mod events;
mod files;
mod oauth;
mod rooms;
mod rows;
mod stats;
mod tokens;
mod turns;
mod webhooks;
mod writer;

use cache::Cache;
use rows::*;

use super::*;
use crate::domain::EventBus;
use crate::error::Error;

/// The channel every event is announced on.
pub const CHANNEL: &str = "chatroom_events";
/// `application_name` of the relay's listening connection (operators and
/// tests can find it in `pg_stat_activity`).
pub const RELAY_APPLICATION: &str = "chatroom-relay";
/// First key of the per-room transaction locks (the second is the room's
/// hash), so they do not collide with other users of advisory locks.
const ROOM_LOCK: i32 = 0x6368_6174; // "chat"
/// Connections per replica.
const POOL_SIZE: u32 = 16;

pub struct PostgresStore {
    pool: PgPool,
    options: PgConnectOptions,
    /// Group commit of each room's writes (`postgres/writer.rs`).
    writers: writer::Writers,
    /// Tokens, rooms and OAuth access tokens read, trusted while the relay
    /// hears their changes (`postgres/cache.rs`).
    cache: Arc<Cache>,
    /// Advancing reads of one cursor queue here (`postgres/turns.rs`).
    turns: turns::Turns,
}

impl PostgresStore {
    /// Connects to `url` and migrates the database.
    pub async fn open(url: &str) -> anyhow::Result<PostgresStore> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| anyhow::anyhow!("bad PostgreSQL URL (CHATROOM_DATABASE_URL): {e}"))?
            .application_name("chatroom");
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.clone())
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to PostgreSQL: {e}"))?;
        // Replicas starting together are fine: the migrator holds a lock.
        sqlx::migrate!("migrations/postgres")
            .run(&pool)
            .await
            .map_err(|e| anyhow::anyhow!("cannot migrate the PostgreSQL database: {e}"))?;
        Ok(PostgresStore {
            writers: writer::Writers::new(pool.clone()),
            pool,
            options,
            cache: Arc::new(Cache::new()),
            turns: turns::Turns::default(),
        })
    }

    /// After a change of tokens, grants or rooms committed: waits until every
    /// replica's relay has heard it (`cache.rs`), so the next request honours
    /// it whichever replica serves it. This replica forgot already.
    async fn heard_everywhere(&self) {
        if let Err(e) = cache::heard_everywhere(&self.pool, RELAY_APPLICATION).await {
            tracing::warn!(error = %e, "could not confirm that every replica heard a change");
        }
    }

    /// After a change of `table` that `done` (or failed to): this replica
    /// forgets the table's rows before it answers (every replica does on the
    /// announcement), and when rows changed, waits until every replica heard.
    async fn forget_everywhere(&self, table: &str, done: sqlx::Result<u64>) -> Result<u64> {
        self.cache.changed(table);
        let n = done?;
        if n > 0 {
            self.heard_everywhere().await;
        }
        Ok(n)
    }

    /// A transaction holding `room`'s lock: writers of one room take turns,
    /// writers of different rooms do not wait for each other.
    async fn begin_room(&self, room: &str) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ROOM_LOCK)
            .bind(room)
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }
}

/// The latest event id of every room that has events (one index lookup per room).
async fn latest_per_room(pool: &PgPool) -> Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT r.name, l.id FROM rooms r \
         CROSS JOIN LATERAL (SELECT MAX(e.id) AS id FROM events e WHERE e.room = r.name) l \
         WHERE l.id IS NOT NULL",
    )
    .fetch_all(pool)
    .await?)
}

/// Stores the rest of a write as the domain recorded it, in the write's
/// transaction and in one statement: the mention rows of the message or
/// note written, the events (each announced to every replica), the audit
/// row. `written` is what the main statement assigned. The caller holds the
/// room's lock, so event ids come after every committed id of the room.
async fn store_record(
    conn: &mut PgConnection,
    room: &str,
    mut record: Record,
    written: &Written,
) -> Result<Vec<Event>> {
    record.stamp(written);
    let (now, events) = (record.now, &record.events);
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let task_ids: Vec<Option<i64>> = events.iter().map(|e| e.task_id).collect();
    let message_ids: Vec<Option<i64>> = events.iter().map(|e| e.message_id).collect();
    let details: Vec<String> = events.iter().map(|e| e.detail.to_string()).collect();
    // A mention row points at its message or note. Its `seq` places it
    // among the room's messages for `since_id`: a message's own id, or for
    // a note the room's newest message id when the note was written. Event
    // ids are handed out in the order of the record's events.
    let ids: Vec<(i64, bool)> = sqlx::query_as(
        "WITH ev AS (INSERT INTO events (room, ts, kind, actor, task_id, message_id, detail) \
            SELECT $1, $2, u.kind, $3, u.task_id, u.message_id, u.detail::jsonb \
            FROM UNNEST($4::text[], $5::bigint[], $6::bigint[], $7::text[]) \
                WITH ORDINALITY AS u(kind, task_id, message_id, detail, n) \
            ORDER BY u.n RETURNING id), \
         mn AS (INSERT INTO mentions (room, agent, message_id, note_id, task_id, ts, seq) \
            SELECT $1, m.a, $8, $9, $10, $2, \
                COALESCE($8, (SELECT MAX(id) FROM messages WHERE room = $1), 0) \
            FROM UNNEST($11::text[]) WITH ORDINALITY AS m(a, n) ORDER BY m.n), \
         au AS (INSERT INTO audit (ts, agent, room, tool, task_id, outcome) \
            SELECT $2, $3, $1, $12, $10, 'ok' WHERE $12::text IS NOT NULL) \
         SELECT id, pg_notify('chatroom_events', $1 || ' ' || id) IS NULL FROM ev ORDER BY id",
    )
    .bind(room)
    .bind(now)
    .bind(&record.actor)
    .bind(&kinds)
    .bind(&task_ids)
    .bind(&message_ids)
    .bind(&details)
    .bind(written.message_id)
    .bind(written.note_id)
    .bind(record.task_id)
    .bind(&record.mentions)
    .bind(record.audit_tool)
    .fetch_all(&mut *conn)
    .await
    .map_err(text_error)?;
    if ids.len() != events.len() {
        return Err(Error::internal(anyhow::anyhow!(
            "{} events were stored of {}",
            ids.len(),
            events.len()
        )));
    }
    let actor = record.actor;
    Ok((record.events.into_iter().zip(ids))
        .map(|(e, (id, _))| stored_event(room, now, &actor, e, id))
        .collect())
}

/// The one event of a write that records one.
fn only(events: Vec<Event>) -> Result<Event> {
    events
        .into_iter()
        .next()
        .ok_or_else(|| Error::internal(anyhow::anyhow!("the write recorded no event")))
}

/// PostgreSQL refuses the NUL character in text, which SQLite stores: say so
/// plainly instead of failing with an internal error.
fn text_error(e: sqlx::Error) -> Error {
    let code = e
        .as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned());
    match code.as_deref() {
        // character_not_in_repertoire, untranslatable_character
        Some("22021") | Some("22P05") => nul_refused(),
        _ => e.into(),
    }
}

fn nul_refused() -> Error {
    Error::invalid("text must not contain the NUL character (U+0000) on this server's database")
}

#[async_trait]
impl Store for PostgresStore {
    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn start_relay(&self, bus: EventBus, shutdown: CancellationToken) -> Result<()> {
        let relay = Relay {
            pool: self.pool.clone(),
            options: self.options.clone().application_name(RELAY_APPLICATION),
            bus,
            cache: self.cache.clone(),
            freshness: Default::default(),
        };
        // Listen first, then note where each room stands: an event committed
        // in between is announced, none is lost.
        let listener = relay.listen().await?;
        relay.bus.start_relay(latest_per_room(&self.pool).await?);
        tokio::spawn(relay.run(listener, shutdown));
        Ok(())
    }
}

/// Stops trusting the cache when the relay ends, however it ends.
struct DeafOnDrop(Arc<Cache>);

impl Drop for DeafOnDrop {
    fn drop(&mut self) {
        self.0.deaf();
    }
}

/// Relays the events that other replicas commit to this replica's bus, and
/// the announcements of changed tokens and rooms to its cache.
struct Relay {
    pool: PgPool,
    options: PgConnectOptions,
    bus: EventBus,
    cache: Arc<Cache>,
    /// Counts the events heard, for the planner's statistics (`stats.rs`).
    freshness: Arc<stats::Freshness>,
}

impl Relay {
    /// A listening connection of its own (named [`RELAY_APPLICATION`]).
    async fn listen(&self) -> Result<PgListener> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(self.options.clone())
            .await?;
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.ignore_pool_close_event(true);
        // A lost connection is replaced by `run`, which then catches up.
        listener.eager_reconnect(false);
        listener.listen_all([CHANNEL, cache::CHANNEL]).await?;
        // Announcements of changed tokens and rooms reach this replica from
        // here on: what it keeps of them can be trusted again.
        self.cache.listening();
        Ok(listener)
    }

    /// Waits for announcements and relays them; a lost listening connection
    /// is replaced and the events committed meanwhile are read from the
    /// table, so nothing is missed.
    async fn run(self, mut listener: PgListener, shutdown: CancellationToken) {
        // Once the relay stops, changes go unheard: nothing kept is trusted.
        let _deaf = DeafOnDrop(self.cache.clone());
        loop {
            let lost = tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.try_recv() => match received {
                    Ok(Some(n)) => {
                        let (mut rooms, mut pings) = (Vec::new(), Vec::new());
                        let buffered = std::iter::from_fn(|| listener.next_buffered());
                        for n in std::iter::once(n).chain(buffered) {
                            if n.channel() != cache::CHANNEL {
                                rooms.push(announced(n.payload()));
                            } else if let Some(nonce) = n.payload().strip_prefix(cache::PING) {
                                pings.push(nonce.to_owned());
                            } else {
                                self.cache.changed(n.payload());
                            }
                        }
                        // The changes before each ping are applied: say so.
                        for nonce in pings {
                            if let Err(e) = cache::answer(&self.pool, &nonce).await {
                                Error::from(e).log_if_internal();
                            }
                        }
                        self.freshness.heard(rooms.len(), &self.pool);
                        self.relay_announced(rooms).await;
                        false
                    }
                    Ok(None) => true,
                    Err(e) => {
                        tracing::warn!(error = %e, "the event relay lost its PostgreSQL connection");
                        true
                    }
                },
            };
            if lost {
                self.cache.deaf();
                let mut wait = Duration::from_millis(100);
                listener = loop {
                    match self.listen().await {
                        Ok(l) => break l,
                        Err(e) => {
                            e.log_if_internal();
                            tokio::select! {
                                _ = shutdown.cancelled() => return,
                                _ = tokio::time::sleep(wait) => {}
                            }
                            wait = (wait * 2).min(Duration::from_secs(5));
                        }
                    }
                };
                tracing::info!("the event relay is listening again; catching up");
                if let Err(e) = self.catch_up().await {
                    e.log_if_internal();
                }
            }
        }
    }

    /// Relays what the announcements name: per room, every event past what
    /// the bus has, up to (at least) the announced id.
    async fn relay_announced(&self, announced: Vec<Option<(String, i64)>>) {
        let mut rooms: Vec<(String, i64)> = Vec::new();
        for (room, id) in announced.into_iter().flatten() {
            match rooms.iter_mut().find(|(r, _)| *r == room) {
                Some(entry) => entry.1 = entry.1.max(id),
                None => rooms.push((room, id)),
            }
        }
        for (room, id) in rooms {
            if let Err(e) = self.relay_room(&room, id).await {
                e.log_if_internal();
            }
        }
    }

    /// After a reconnection: relays every room that moved on meanwhile.
    async fn catch_up(&self) -> Result<()> {
        for (room, id) in latest_per_room(&self.pool).await? {
            self.relay_room(&room, id).await?;
        }
        Ok(())
    }

    /// Reads `room`'s events past what the bus has, in id order, and
    /// publishes them. An announcement arrives once its transaction
    /// committed, so the announced id is normally visible at once; a few
    /// short retries cover a slow snapshot (or an event pruned meanwhile).
    async fn relay_room(&self, room: &str, announced: i64) -> Result<()> {
        const PAGE: usize = 500;
        let mut attempt = 0u32;
        loop {
            let from = self.bus.relayed_upto(room);
            if from >= announced {
                return Ok(());
            }
            let sql = select!(
                event_columns,
                " FROM events WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3"
            );
            let args = (room, from, PAGE as i64);
            let events: Vec<Event> = fetch_all(&self.pool, sql, args).await?;
            let full = events.len() == PAGE;
            if let Some(last) = events.last().map(|e| e.id) {
                self.bus.publish_relayed(room, events, last);
            }
            if full || self.bus.relayed_upto(room) >= announced {
                continue;
            }
            attempt += 1;
            if attempt > 5 {
                tracing::warn!(room, announced, "an announced event could not be read back");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10 << attempt)).await;
        }
    }
}

/// The `(room, id)` an announcement names.
fn announced(payload: &str) -> Option<(String, i64)> {
    let (room, id) = payload.rsplit_once(' ')?;
    Some((room.to_owned(), id.parse().ok()?))
}
