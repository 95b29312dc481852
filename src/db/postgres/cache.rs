//! What a replica keeps of the `tokens` and `rooms` tables (and of OAuth
//! access tokens with their grants), so that a call does not pay two round
//! trips (its token, its room) before its own statement: on one replica
//! those lookups were two of a post's three statements.
//!
//! The rule that makes it safe: a revoked token is refused at once, on
//! every replica. Any change of either table commits with an announcement
//! on [`CHANNEL`] (a trigger, migration 0005, so `chatroom admin` and
//! hand-written SQL announce too), the replica's relay hears it and forgets
//! that table. The cache is trusted only while the relay listens: from the
//! moment its connection is lost until it listens again, every lookup goes
//! to the database. A change on this replica also forgets at once, before
//! its call returns, without waiting for the announcement to come back.
//!
//! A change committed here is not done until every replica has heard it:
//! [`heard_everywhere`] asks every relay to answer once it has heard all
//! that was announced before, and waits for each, so whichever replica
//! serves the next request honours it — `chatroom admin revoke` returns
//! when the token is refused everywhere, not a moment before.
//!
//! Only rows found are kept (a token minted or a room made on another
//! replica is found at its first use), each for at most [`TTL`], which
//! bounds what a listening connection that died before the replica noticed
//! could leave stale.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPool};

use crate::domain::model::{Room, TokenRecord};
use crate::domain::oauth::{GrantRecord, OAuthTokenRecord};

/// The channel the migration's trigger announces on; the payload is the
/// table's name.
pub const CHANNEL: &str = "chatroom_cache";
/// An announcement on [`CHANNEL`] that asks each relay to answer on
/// [`HEARD`] with what follows it, once everything announced before is heard.
pub const PING: &str = "ping ";
/// The channel relays answer a [`PING`] on.
pub const HEARD: &str = "chatroom_cache_heard";
/// Longest a change waits for the replicas to say they heard it. Past it,
/// nothing read before the change is served anyway: a row read just before
/// it may be kept just after it, for [`TTL`] more.
const HEARD_WAIT: Duration = Duration::from_secs(2);
/// Longest a row is kept without being read again: the bound on a change
/// missed by a listening connection that died without the replica noticing
/// yet (a lost connection is normally noticed at once). At the rates where
/// the cache matters, a token read once a second is no cost.
const TTL: Duration = Duration::from_secs(1);
/// Rows kept per table; past it the table's rows are all forgotten (only
/// valid tokens and existing rooms get in, so this is a large deployment,
/// not an attack).
const MAX_ROWS: usize = 10_000;

/// The cached rows of one table, by key.
pub struct Table<T> {
    rows: Mutex<HashMap<String, (T, Instant)>>,
    /// Bumped by every forgetting: a row read from the database before a
    /// change was announced is not kept after it.
    generation: AtomicU64,
}

impl<T: Clone> Table<T> {
    fn new() -> Self {
        Table {
            rows: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }

    fn get(&self, key: &str) -> Option<T> {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.get(key)
            .filter(|(_, at)| at.elapsed() < TTL)
            .map(|(row, _)| row.clone())
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps `row`, read when the table was at `generation`, unless the
    /// table changed since.
    fn put(&self, key: &str, row: T, generation: u64) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock that `forget` takes to clear, so a change
        // announced after the check clears this row too.
        if self.generation() != generation {
            return;
        }
        if rows.len() >= MAX_ROWS {
            rows.clear();
        }
        rows.insert(key.to_owned(), (row, Instant::now()));
    }

    fn forget(&self) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        rows.clear();
    }
}

/// An OAuth access token with its grant.
pub type Access = (OAuthTokenRecord, GrantRecord);

/// Tokens (by hash), rooms (by name) and OAuth access tokens (by hash),
/// trusted while the relay listens.
pub struct Cache {
    listening: AtomicBool,
    pub tokens: Table<TokenRecord>,
    pub rooms: Table<Room>,
    access: Table<Access>,
}

/// Where a lookup stands: the row if it was kept, else what keeping the
/// row read from the database needs (the table's generation, if trusted).
pub enum Lookup<T> {
    Hit(T),
    Miss(Option<u64>),
}

impl Cache {
    pub fn new() -> Cache {
        Cache {
            listening: AtomicBool::new(false),
            tokens: Table::new(),
            rooms: Table::new(),
            access: Table::new(),
        }
    }

    /// The relay listens (again): announcements reach this replica from now
    /// on. Called after `LISTEN` returned, so nothing committed later is
    /// missed; what was kept before is forgotten.
    pub fn listening(&self) {
        self.forget_all();
        self.listening.store(true, Ordering::Release);
    }

    /// The relay lost its connection: announcements may be missed until it
    /// listens again, so nothing is trusted (nor kept) meanwhile.
    pub fn deaf(&self) {
        self.listening.store(false, Ordering::Release);
        self.forget_all();
    }

    fn forget_all(&self) {
        self.tokens.forget();
        self.rooms.forget();
        self.access.forget();
    }

    /// An announcement: `table` changed.
    pub fn changed(&self, table: &str) {
        match table {
            "tokens" => self.tokens.forget(),
            "rooms" => self.rooms.forget(),
            "oauth_tokens" | "oauth_grants" => self.access.forget(),
            ping if ping.starts_with(PING) => {}
            _ => self.forget_all(),
        }
    }

    /// `key`'s row of `table` (`|c| &c.tokens`, …): the one kept, else the
    /// one `read` finds in the database, kept for next time.
    pub async fn read_through<T: Clone, E>(
        &self,
        table: fn(&Cache) -> &Table<T>,
        key: &str,
        read: impl Future<Output = Result<Option<T>, E>>,
    ) -> Result<Option<T>, E> {
        let at = match self.lookup(table(self), key) {
            Lookup::Hit(row) => return Ok(Some(row)),
            Lookup::Miss(at) => at,
        };
        let row = read.await?;
        if let Some(row) = &row {
            keep(table(self), key, row, at);
        }
        Ok(row)
    }

    pub fn access(&self, hash: &str) -> Lookup<Access> {
        self.lookup(&self.access, hash)
    }

    pub fn keep_access(&self, hash: &str, row: &Access, at: Option<u64>) {
        keep(&self.access, hash, row, at);
    }

    fn lookup<T: Clone>(&self, table: &Table<T>, key: &str) -> Lookup<T> {
        if !self.listening.load(Ordering::Acquire) {
            return Lookup::Miss(None);
        }
        // The generation before the read: a change announced while the
        // database is read keeps its row out.
        let generation = table.generation();
        match table.get(key) {
            Some(row) => Lookup::Hit(row),
            None => Lookup::Miss(Some(generation)),
        }
    }
}

/// Keeps `row`, read when `table` was at generation `at` (`None`: while
/// the cache was not trusted, so it is not kept).
fn keep<T: Clone>(table: &Table<T>, key: &str, row: &T, at: Option<u64>) {
    if let Some(generation) = at {
        table.put(key, row.clone(), generation);
    }
}

/// Waits until the relay of every replica of this database has heard all
/// that was announced before the call (at most [`HEARD_WAIT`]): one ping
/// through [`CHANNEL`], an answer from each relay. Notifications reach each
/// listener in commit order and a relay applies a batch's changes before it
/// answers, so an answer means the change before it is applied there.
pub async fn heard_everywhere(pool: &PgPool, relay_application: &str) -> sqlx::Result<()> {
    let mut answers = PgListener::connect_with(pool).await?;
    answers.listen(HEARD).await?;
    let relays: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = $1",
    )
    .bind(relay_application)
    .fetch_one(pool)
    .await?;
    if relays == 0 {
        return Ok(());
    }
    let nonce = format!("{:016x}", rand::random::<u64>());
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(format!("{PING}{nonce}"))
        .execute(pool)
        .await?;
    let heard = async {
        let mut heard = 0;
        while heard < relays {
            if answers.recv().await?.payload() == nonce {
                heard += 1;
            }
        }
        sqlx::Result::Ok(())
    };
    match tokio::time::timeout(HEARD_WAIT, heard).await {
        Ok(done) => done,
        Err(_) => {
            // A replica that stopped since it was counted, or one too old
            // to answer: what it kept has expired by now.
            tracing::debug!(relays, "not every replica answered a change in time");
            Ok(())
        }
    }
}

/// A relay's answer to the ping that carried `nonce` (see [`heard_everywhere`]).
pub async fn answer(pool: &PgPool, nonce: &str) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(HEARD)
        .bind(nonce)
        .execute(pool)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(name: &str) -> Room {
        Room {
            name: name.into(),
            description: String::new(),
            repo_url: String::new(),
            onboarding_notes: String::new(),
            retention_days: 0,
        }
    }

    /// A cache whose relay listens.
    fn listening() -> Cache {
        let c = Cache::new();
        c.listening();
        c
    }

    /// Where room `name` stands in `c`'s rooms.
    fn find(c: &Cache, name: &str) -> Lookup<Room> {
        c.lookup(&c.rooms, name)
    }

    fn miss(l: Lookup<Room>) -> Option<u64> {
        match l {
            Lookup::Hit(r) => panic!("unexpected hit: {r:?}"),
            Lookup::Miss(at) => at,
        }
    }

    /// Keeps room `name`, as read at `at`.
    fn keep_room(c: &Cache, name: &str, at: Option<u64>) {
        keep(&c.rooms, name, &room(name), at);
    }

    #[test]
    fn nothing_is_kept_or_trusted_until_the_relay_listens() {
        let c = Cache::new();
        assert_eq!(miss(find(&c, "a")), None);
        keep_room(&c, "a", None);
        c.listening();
        assert!(miss(find(&c, "a")).is_some());
    }

    #[test]
    fn a_row_read_before_a_change_is_not_kept_after_it() {
        let c = listening();
        let at = miss(find(&c, "a"));
        c.changed("rooms");
        keep_room(&c, "a", at);
        let at = miss(find(&c, "a"));
        keep_room(&c, "a", at);
        assert!(matches!(find(&c, "a"), Lookup::Hit(r) if r.name == "a"));
        // A change of the other table leaves it; one of its own forgets it.
        c.changed("tokens");
        assert!(matches!(find(&c, "a"), Lookup::Hit(_)));
        c.changed("rooms");
        assert!(miss(find(&c, "a")).is_some());
    }

    #[test]
    fn a_lost_connection_forgets_and_stops_trusting() {
        let c = listening();
        let at = miss(find(&c, "a"));
        keep_room(&c, "a", at);
        c.deaf();
        assert_eq!(miss(find(&c, "a")), None);
        c.listening();
        assert!(miss(find(&c, "a")).is_some(), "forgotten, not restored");
    }
}
