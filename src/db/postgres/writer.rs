//! Group commit for the writes of a room, as the SQLite writer does it
//! (`db/sqlite/writer.rs`).
//!
//! A room's writes take the room's transaction lock and hold it until they
//! commit, so that ids commit in order (see `postgres.rs`). One write per
//! transaction therefore pays a commit — a WAL flush — while every other
//! writer of the room waits on the lock: on a busy disk that flush is the
//! whole cost, and a room took 600–1,400 posts a second.
//!
//! Here the writes of one room on one replica queue for one connection.
//! The first opens a transaction and takes the room's lock; each write runs
//! in a savepoint of it (a failed write rolls back to its savepoint and
//! leaves the others alone); a write that is done while others queue
//! behind it leaves the transaction open for them and waits; the last of
//! the queue (or the write that fills the batch) commits for all. A write
//! returns only after the commit that carries it, with its outcome; a
//! failed commit fails every write it carried. Writes of other replicas
//! wait on the room's lock as before, between batches.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use tokio::sync::{Mutex, watch};

use super::ROOM_LOCK;
use crate::db::batch::{Outcome, settle};
use crate::error::{Error, Result};

/// Most writes one commit carries. Each write is a subtransaction, and
/// PostgreSQL keeps up to 64 of them per transaction in shared memory
/// before snapshots of every session get slower.
const MAX_BATCH: usize = 32;

/// The group-commit writers of every room this replica writes to.
pub struct Writers {
    pool: PgPool,
    rooms: std::sync::Mutex<HashMap<String, Arc<RoomWriter>>>,
}

struct RoomWriter {
    room: String,
    state: Mutex<State>,
    /// Writes waiting for the connection; the holder leaves the batch open
    /// for them while there are any.
    queued: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// The connection of the open batch.
    conn: Option<PoolConnection<Postgres>>,
    batch: Option<Batch>,
}

struct Batch {
    /// Writes that succeeded in it.
    writes: usize,
    /// Whether a write's savepoint is open (released by the next write's
    /// round trip, or by the commit).
    savepoint: bool,
    done: watch::Sender<Outcome>,
}

/// A write: statements run on the batch's connection.
pub type Write<'c, T> = BoxFuture<'c, Result<T>>;

impl Writers {
    pub fn new(pool: PgPool) -> Writers {
        Writers {
            pool,
            rooms: Default::default(),
        }
    }

    fn room(&self, room: &str) -> Arc<RoomWriter> {
        let mut rooms = self.rooms.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = rooms.get(room) {
            return w.clone();
        }
        // Rooms come and go: forget writers nobody uses before adding one.
        if rooms.len() >= 1024 {
            rooms.retain(|_, w| Arc::strong_count(w) > 1);
        }
        let w = Arc::new(RoomWriter {
            room: room.to_owned(),
            state: Mutex::new(State::default()),
            queued: AtomicUsize::new(0),
        });
        rooms.insert(room.to_owned(), w.clone());
        w
    }

    /// Runs `f` as one write of `room`, holding the room's lock, in a
    /// transaction it may share with other writes of the room; returns once
    /// that transaction committed (or failed). A failure of `f` undoes all
    /// it did and nothing else.
    pub async fn write<T, F>(&self, room: &str, f: F) -> Result<T>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> Write<'c, T> + Send,
        T: Send,
    {
        self.write_in(room, Guard::Savepoint, f).await
    }

    /// [`Self::write`] for a write of one statement that cannot fail on
    /// what it writes (checked before): it runs without a savepoint of its
    /// own, one round trip less. Should it fail all the same, the batch
    /// that carries it fails with it — every write of it gets an error and
    /// none is committed.
    pub async fn write_one<T, F>(&self, room: &str, f: F) -> Result<T>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> Write<'c, T> + Send,
        T: Send,
    {
        self.write_in(room, Guard::None, f).await
    }

    async fn write_in<T, F>(&self, room: &str, guard: Guard, f: F) -> Result<T>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> Write<'c, T> + Send,
        T: Send,
    {
        let w = self.room(room);
        let queued = Queued::new(&w);
        let mut state = w.state.lock().await;
        queued.acquired();
        let (out, pending) = {
            let mut held = Held {
                state: &mut state,
                finished: false,
            };
            let r = run(&mut held, &self.pool, &w, guard, f).await;
            held.finished = true;
            r
        };
        drop(state);
        settle(out, pending).await
    }
}

/// How a write's failure is kept from the other writes of its batch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// Its own savepoint: a failure rolls back to it.
    Savepoint,
    /// None: a failure loses the batch.
    None,
}

/// The state while a write runs on it. Dropped unfinished — the write was
/// cancelled, or it panicked, half-way through a statement — it fails the
/// batch and closes its connection (PostgreSQL rolls the transaction back),
/// so no write waits on a batch nobody carries on.
struct Held<'a> {
    state: &'a mut State,
    finished: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.finished {
            lose(
                self.state,
                "a write was stopped half-way; its transaction was rolled back",
            );
        }
    }
}

/// Ends the batch as failed and closes its connection.
fn lose(state: &mut State, why: &str) {
    if let Some(mut conn) = state.conn.take() {
        conn.close_on_drop();
    }
    finish(state, Err(why.to_owned()));
}

async fn run<T, F>(
    held: &mut Held<'_>,
    pool: &PgPool,
    w: &RoomWriter,
    guard: Guard,
    f: F,
) -> (Result<T>, Option<watch::Receiver<Outcome>>)
where
    F: for<'c> FnOnce(&'c mut PgConnection) -> Write<'c, T> + Send,
{
    let state = &mut *held.state;
    if state.batch.is_none() {
        match begin(pool, &w.room).await {
            Ok(conn) => {
                state.conn = Some(conn);
                state.batch = Some(Batch {
                    writes: 0,
                    savepoint: false,
                    done: watch::Sender::new(None),
                });
            }
            Err(e) => return (Err(e), None),
        }
    }
    let (Some(conn), Some(batch)) = (state.conn.as_mut(), state.batch.as_mut()) else {
        return (
            Err(Error::internal(anyhow::anyhow!(
                "a batch without connection"
            ))),
            None,
        );
    };
    if guard == Guard::Savepoint {
        let opened = if batch.savepoint {
            sqlx::raw_sql("RELEASE SAVEPOINT w; SAVEPOINT w")
        } else {
            sqlx::raw_sql("SAVEPOINT w")
        }
        .execute(&mut **conn)
        .await;
        if let Err(e) = opened {
            let why = format!("the transaction failed: {e}");
            lose(state, &why);
            return (Err(Error::internal(anyhow::anyhow!(why))), None);
        }
        batch.savepoint = true;
    }
    let out = f(conn).await;
    if let Err(e) = &out {
        let undone = match guard {
            Guard::Savepoint => sqlx::raw_sql("ROLLBACK TO SAVEPOINT w")
                .execute(&mut **conn)
                .await
                .map(drop)
                .map_err(|e| format!("the transaction failed: {e}")),
            Guard::None => Err(format!("a write of the batch failed: {e}")),
        };
        if let Err(why) = undone {
            // The write's error may have ended the connection, or left the
            // transaction aborted: the batch is lost with it.
            lose(state, &why);
            return (out, None);
        }
    }
    if out.is_ok() {
        batch.writes += 1;
    }
    if w.queued.load(Ordering::Acquire) > 0 && batch.writes < MAX_BATCH {
        // The next writer carries the batch on; wait for its commit.
        let pending = out.is_ok().then(|| batch.done.subscribe());
        return (out, pending);
    }
    match commit(state).await {
        Ok(()) => (out, None),
        Err(e) => (out.and(Err(Error::internal(anyhow::anyhow!(e)))), None),
    }
}

/// A connection in a new transaction holding `room`'s lock.
async fn begin(pool: &PgPool, room: &str) -> Result<PoolConnection<Postgres>> {
    let mut conn = pool.acquire().await?;
    let begun = async {
        sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(ROOM_LOCK)
            .bind(room)
            .execute(&mut *conn)
            .await
    }
    .await;
    match begun {
        Ok(_) => Ok(conn),
        Err(e) => {
            conn.close_on_drop();
            Err(e.into())
        }
    }
}

/// Commits the open batch, gives its connection back and tells the writes
/// that wait on it.
async fn commit(state: &mut State) -> std::result::Result<(), String> {
    let Some(mut conn) = state.conn.take() else {
        finish(state, Err("a batch without connection".to_owned()));
        return Err("a batch without connection".to_owned());
    };
    let result = sqlx::raw_sql("COMMIT")
        .execute(&mut *conn)
        .await
        .map(drop)
        .map_err(|e| format!("commit failed: {e}"));
    if result.is_err() {
        conn.close_on_drop();
    }
    drop(conn);
    finish(state, result.clone());
    result
}

fn finish(state: &mut State, outcome: std::result::Result<(), String>) {
    if let Some(batch) = state.batch.take() {
        batch.done.send_replace(Some(outcome));
    }
}

/// A write's place in the queue. Dropped before it got the connection (its
/// request was cancelled), it commits a batch that was left open for it.
struct Queued {
    writer: Arc<RoomWriter>,
    waiting: bool,
}

impl Queued {
    fn new(w: &Arc<RoomWriter>) -> Queued {
        w.queued.fetch_add(1, Ordering::AcqRel);
        Queued {
            writer: w.clone(),
            waiting: true,
        }
    }

    fn acquired(mut self) {
        self.writer.queued.fetch_sub(1, Ordering::AcqRel);
        self.waiting = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.waiting {
            return;
        }
        self.writer.queued.fetch_sub(1, Ordering::AcqRel);
        let writer = self.writer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut state = writer.state.lock().await;
                if state.batch.is_some() && writer.queued.load(Ordering::Acquire) == 0 {
                    let _ = commit(&mut state).await;
                }
            });
        }
    }
}
