//! The one SQLite writer, with group commit.
//!
//! Every write runs in place on the writer connection, inside a savepoint of
//! a transaction that may be shared. When a write is done and others already
//! queue behind it, it leaves the transaction open for them and waits; the
//! last of the queue (or the write that fills the batch) commits for all.
//! Under load one `COMMIT` — one set of WAL frames, one full-text segment —
//! carries many writes. On a runtime of several threads a write with nobody
//! queued behind it lingers for one turn of the scheduler before it commits
//! (writes arriving meanwhile join its batch), so requests spread over the
//! runtime's threads share commits too, at the cost of one task switch. Either way a
//! write returns only after the commit that carries it, with its outcome: a
//! failed write rolls back to its savepoint and leaves the others alone; a
//! failed commit fails every write it carried.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{Mutex, watch};

use crate::db::batch::{Outcome, settle};
use crate::error::{Error, Result};

/// Most writes one commit carries, so a steady queue still commits often.
const MAX_BATCH: usize = 64;

pub struct Writer {
    state: Arc<Mutex<State>>,
    /// Writes waiting for the connection; the holder leaves the batch open
    /// for them while there are any.
    queued: Arc<AtomicUsize>,
    /// Set while the checkpointer waits for the writer between two batches:
    /// the open batch then commits at its next write instead of staying
    /// open for the queue.
    ending: Arc<AtomicBool>,
}

struct State {
    conn: Connection,
    batch: Option<Batch>,
    /// Batches begun so far: tells a lingering write whether the batch it
    /// owes a commit to is still the open one.
    batches: u64,
    /// Run in the transaction just before every commit (the store's
    /// deferred index work), outside any write's savepoint.
    before_commit: Option<&'static str>,
}

struct Batch {
    number: u64,
    writes: usize,
    done: watch::Sender<Outcome>,
}

impl Writer {
    pub fn new(conn: Connection) -> Writer {
        Writer {
            state: Arc::new(Mutex::new(State {
                conn,
                batch: None,
                batches: 0,
                before_commit: None,
            })),
            queued: Arc::new(AtomicUsize::new(0)),
            ending: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Runs `sql` in each batch's transaction just before its commit, after
    /// every write's savepoint is released; its failure fails the batch
    /// like a failed commit.
    pub fn before_commit(self, sql: &'static str) -> Writer {
        // Only `new` has handed the state out yet: the lock is free.
        if let Ok(mut state) = self.state.try_lock() {
            state.before_commit = Some(sql);
        }
        self
    }

    /// A handle that lets a thread outside the runtime (the checkpointer)
    /// act while no write is in progress.
    pub fn pauser(&self) -> Pauser {
        Pauser {
            state: self.state.clone(),
            ending: self.ending.clone(),
        }
    }

    /// Runs `f` as one write, in place (for writes that take microseconds).
    pub async fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let queued = Queued::new(self);
        let mut state = self.state.lock().await;
        queued.acquired();
        let (out, next) = run(&mut state, &self.queued, &self.ending, lingers(), f);
        drop(state);
        match next {
            Next::Done => out,
            Next::Wait(pending) => settle(out, Some(pending)).await,
            Next::CommitSoon(number, pending) => {
                // Until the commit below runs, a cancelled request must
                // still see the batch committed: the guard does it then.
                let owed = CommitOwed {
                    state: Some(self.state.clone()),
                    number,
                };
                tokio::task::yield_now().await;
                owed.pay().await;
                match out {
                    Ok(_) => settle(out, Some(pending)).await,
                    Err(_) => out,
                }
            }
        }
    }

    /// Runs `f` as one write on the blocking pool (for writes that can take
    /// long: pruning, deleting a room, loading a copy).
    pub async fn write_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let queued = Queued::new(self);
        let mut state = self.state.clone().lock_owned().await;
        queued.acquired();
        let (counter, ending) = (self.queued.clone(), self.ending.clone());
        let (out, next) =
            tokio::task::spawn_blocking(move || run(&mut state, &counter, &ending, false, f))
                .await
                .map_err(|e| Error::internal(anyhow::anyhow!("database task failed: {e}")))?;
        match next {
            Next::Wait(pending) => settle(out, Some(pending)).await,
            // Not asked to linger, `run` commits itself.
            Next::Done | Next::CommitSoon(..) => out,
        }
    }
}

/// Whether a write with nobody queued behind it lingers: only on a runtime
/// of several threads, where writes from the others can join its batch. On
/// one thread it would only hold the transaction open while that thread
/// runs other tasks, and one of those may wait on the database itself (a
/// second store of the same file, as tests open, blocks the thread in
/// SQLite's busy handler and the lingering write never comes back).
fn lingers() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// What a write does after `run`.
enum Next {
    /// Its batch has ended (committed, or failed and said so in the result).
    Done,
    /// Its batch was left open for the writes queued behind it: wait for
    /// the commit that one of them makes.
    Wait(watch::Receiver<Outcome>),
    /// Nobody queued: it lingers, then commits batch `number` unless
    /// another write has already.
    CommitSoon(u64, watch::Receiver<Outcome>),
}

/// The commit a lingering write owes its batch; paid when the write comes
/// back, or by a spawned task if the write is dropped (its request was
/// cancelled) while it lingers.
struct CommitOwed {
    state: Option<Arc<Mutex<State>>>,
    number: u64,
}

impl CommitOwed {
    async fn pay(mut self) {
        if let Some(state) = self.state.take() {
            commit_batch(&mut *state.lock().await, self.number);
        }
    }
}

impl Drop for CommitOwed {
    fn drop(&mut self) {
        let (Some(state), number) = (self.state.take(), self.number) else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { commit_batch(&mut *state.lock().await, number) });
        }
    }
}

/// Commits batch `number` if it is still the open one (a write that joined
/// it may have committed it already).
fn commit_batch(state: &mut State, number: u64) {
    if state.batch.as_ref().is_some_and(|b| b.number == number) {
        // A failed commit is told to every write of the batch.
        let _ = commit(state);
    }
}

/// Runs `f` in a savepoint of the open batch (opening one if needed), then
/// commits unless others queue behind or (with `linger`) the caller is to
/// commit after a turn of the scheduler. Gives `f`'s result and what the
/// caller does next.
fn run<T>(
    state: &mut State,
    queued: &AtomicUsize,
    ending: &AtomicBool,
    linger: bool,
    f: impl FnOnce(&Connection) -> Result<T>,
) -> (Result<T>, Next) {
    if state.batch.is_some() && state.conn.is_autocommit() {
        // The open batch's transaction is gone (it ended with an error that
        // nobody saw through): its writes are lost, say so to their waiters.
        finish(
            state,
            Err("the transaction was rolled back by the database".to_owned()),
        );
    }
    if state.batch.is_none() {
        if !state.conn.is_autocommit()
            && let Err(e) = state.conn.execute_batch("ROLLBACK")
        {
            // What a failed commit left open could not be undone either.
            return (Err(e.into()), Next::Done);
        }
        if let Err(e) = state.conn.execute_batch("BEGIN IMMEDIATE") {
            return (Err(e.into()), Next::Done);
        }
        state.batches += 1;
        state.batch = Some(Batch {
            number: state.batches,
            writes: 0,
            done: watch::Sender::new(None),
        });
    }
    // A panic in `f` is turned into an error of this write: unwinding out of
    // here would leave the batch open with writes waiting on it.
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        in_savepoint(&state.conn, f)
    }))
    .unwrap_or_else(|_| {
        tracing::error!("a database write panicked; it was rolled back");
        Err(Error::internal(anyhow::anyhow!(
            "a database write panicked"
        )))
    });
    if state.conn.is_autocommit() {
        // SQLite rolled the whole transaction back (an I/O error, a full
        // disk): every write of the batch is lost.
        let lost = "the transaction was rolled back by the database".to_owned();
        finish(state, Err(lost.clone()));
        return (
            out.and(Err(Error::internal(anyhow::anyhow!(lost)))),
            Next::Done,
        );
    }
    let Some(batch) = state.batch.as_mut() else {
        return (out, Next::Done);
    };
    if out.is_ok() {
        batch.writes += 1;
    }
    if batch.writes < MAX_BATCH && !ending.load(Ordering::Acquire) {
        if queued.load(Ordering::Acquire) > 0 {
            // The next writer carries the batch on; wait for its commit.
            return match out.is_ok() {
                true => (out, Next::Wait(batch.done.subscribe())),
                false => (out, Next::Done),
            };
        }
        if linger {
            // A failed write has nothing to wait for, but the batch still
            // owes its earlier writes a commit.
            return (out, Next::CommitSoon(batch.number, batch.done.subscribe()));
        }
    }
    match commit(state) {
        Ok(()) => (out, Next::Done),
        Err(e) => (
            out.and(Err(Error::internal(anyhow::anyhow!(e)))),
            Next::Done,
        ),
    }
}

/// Runs `f` between `SAVEPOINT` and `RELEASE`; a failure — or a panic —
/// rolls back to the savepoint, so the batch keeps only the writes that
/// succeeded.
fn in_savepoint<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    let savepoint = Savepoint::open(conn)?;
    let value = f(conn)?;
    savepoint.release()?;
    Ok(value)
}

/// An open savepoint of one write, rolled back when dropped unreleased.
struct Savepoint<'c> {
    conn: &'c Connection,
    released: bool,
}

impl<'c> Savepoint<'c> {
    fn open(conn: &'c Connection) -> Result<Savepoint<'c>> {
        conn.execute_batch("SAVEPOINT write")?;
        Ok(Savepoint {
            conn,
            released: false,
        })
    }

    fn release(mut self) -> Result<()> {
        self.conn.execute_batch("RELEASE write")?;
        self.released = true;
        Ok(())
    }
}

impl Drop for Savepoint<'_> {
    fn drop(&mut self) {
        // After an error that ended the whole transaction there is nothing
        // to roll back to; `run` sees that and fails the batch.
        if !self.released && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK TO write; RELEASE write");
        }
    }
}

/// Commits the open batch and tells the writes that wait on it.
fn commit(state: &mut State) -> std::result::Result<(), String> {
    let before = match state.before_commit {
        Some(sql) => state.conn.execute_batch(sql),
        None => Ok(()),
    };
    let result = before
        .and_then(|()| state.conn.execute_batch("COMMIT"))
        .map_err(|e| e.to_string());
    if result.is_err() && !state.conn.is_autocommit() {
        // A transaction still open here is rolled back again before the next
        // batch begins (see `run`).
        let _ = state.conn.execute_batch("ROLLBACK");
    }
    finish(state, result.clone());
    result
}

fn finish(state: &mut State, outcome: std::result::Result<(), String>) {
    if let Some(batch) = state.batch.take() {
        batch.done.send_replace(Some(outcome));
    }
}

/// The writer as the checkpointer sees it: it can wait for the end of the
/// open batch and hold the writer while it works.
pub struct Pauser {
    state: Arc<Mutex<State>>,
    ending: Arc<AtomicBool>,
}

impl Pauser {
    /// Runs `f` while no write is in progress and no batch is open (so no
    /// transaction of the writer is open either), blocking this thread
    /// until then; `None` when that did not come within a second. Only for
    /// threads outside the async runtime.
    pub fn between_batches<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        self.ending.store(true, Ordering::Release);
        let mut out = None;
        for _ in 0..1000 {
            let state = self.state.blocking_lock();
            if state.batch.is_none() {
                out = Some(f());
                break;
            }
            // A batch was left open for a write that queued just before
            // `ending` was set; it commits at that write.
            drop(state);
            std::thread::sleep(Duration::from_millis(1));
        }
        self.ending.store(false, Ordering::Release);
        out
    }
}

/// A write's place in the queue. Dropped before it got the connection (its
/// request was cancelled), it commits a batch that was left open for it.
struct Queued {
    state: Arc<Mutex<State>>,
    queued: Arc<AtomicUsize>,
    waiting: bool,
}

impl Queued {
    fn new(w: &Writer) -> Queued {
        w.queued.fetch_add(1, Ordering::AcqRel);
        Queued {
            state: w.state.clone(),
            queued: w.queued.clone(),
            waiting: true,
        }
    }

    fn acquired(mut self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        self.waiting = false;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        if !self.waiting {
            return;
        }
        self.queued.fetch_sub(1, Ordering::AcqRel);
        let state = self.state.clone();
        let queued = self.queued.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut state = state.lock().await;
                if state.batch.is_some() && queued.load(Ordering::Acquire) == 0 {
                    let _ = commit(&mut state);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::task::JoinHandle;

    use super::*;

    fn writer(dir: &tempfile::TempDir) -> (Writer, String) {
        let path = dir.path().join("w.db").to_string_lossy().into_owned();
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL UNIQUE);",
        )
        .unwrap();
        (Writer::new(conn), path)
    }

    /// [`writer`], to be shared by the writes of a test.
    fn shared(dir: &tempfile::TempDir) -> (Arc<Writer>, String) {
        let (writer, path) = writer(dir);
        (Arc::new(writer), path)
    }

    /// Spawns `n` concurrent writes; write `i` runs `f(c, i)`.
    fn spawn_writes<T: Send + 'static>(
        writer: &Arc<Writer>,
        n: i64,
        f: fn(&Connection, i64) -> Result<T>,
    ) -> Vec<JoinHandle<Result<T>>> {
        (0..n)
            .map(|i| {
                let writer = writer.clone();
                tokio::spawn(async move { writer.write(|c| f(c, i)).await })
            })
            .collect()
    }

    fn committed(path: &str) -> Vec<i64> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Spawns a write of `v` that panics after inserting it.
    fn spawn_panicking_write(writer: &Arc<Writer>, v: i64) -> JoinHandle<Result<()>> {
        let writer = writer.clone();
        tokio::spawn(async move {
            writer
                .write(|c| -> Result<()> {
                    c.execute("INSERT INTO t (v) VALUES (?1)", [v])?;
                    panic!("a bug in a write");
                })
                .await
        })
    }

    /// As a write in progress holding `state`: waits until another write
    /// queues behind it, writes 0, and returns with the batch left open.
    async fn leave_batch_open(
        writer: &Writer,
        state: &mut State,
    ) -> (Result<usize>, Option<watch::Receiver<Outcome>>) {
        while writer.queued.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        let (out, next) = run(state, &writer.queued, &writer.ending, false, |c| {
            Ok(c.execute("INSERT INTO t (v) VALUES (0)", [])?)
        });
        let Next::Wait(pending) = next else {
            panic!("the batch should have been left open");
        };
        (out, Some(pending))
    }

    /// Many concurrent writes, every third of which fails after writing: the
    /// failures leave nothing, every success is committed, and each write's
    /// result is its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_write_undoes_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        let tasks = spawn_writes(&writer, 300, |c, i| {
            c.execute("INSERT INTO t (v) VALUES (?1)", [i])?;
            if i % 3 == 0 {
                return Err(Error::invalid(format!("write {i} refused")));
            }
            Ok(i)
        });
        let mut ok = Vec::new();
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.unwrap() {
                Ok(v) => {
                    assert_eq!(v, i as i64);
                    ok.push(v);
                }
                Err(e) => {
                    assert_eq!(i % 3, 0, "write {i} failed: {e}");
                    assert!(e.to_string().contains(&format!("write {i} refused")));
                }
            }
        }
        assert_eq!(ok.len(), 200);
        assert_eq!(committed(&path), ok);
    }

    /// A write that waits in a batch sees the writes before it in the same
    /// batch, as a serial order would: a unique value taken earlier in the
    /// batch makes a later insert of it fail, and only that one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_in_one_batch_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        let tasks = spawn_writes(&writer, 100, |c, i| {
            Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i % 50])?)
        });
        let mut ok = 0;
        for t in tasks {
            if t.await.unwrap().is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, 50);
        assert_eq!(committed(&path), (0..50).collect::<Vec<_>>());
    }

    /// A long write on the blocking pool batches with in-place writes and
    /// commits like them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocking_writes_commit_too() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        let mut tasks = Vec::new();
        for i in 0..40i64 {
            let writer = writer.clone();
            tasks.push(tokio::spawn(async move {
                if i % 2 == 0 {
                    writer
                        .write_blocking(move |c| {
                            Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i])?)
                        })
                        .await
                } else {
                    writer
                        .write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (?1)", [i])?))
                        .await
                }
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 1);
        }
        assert_eq!(committed(&path), (0..40).collect::<Vec<_>>());
    }

    /// A batch left open for a queued write whose request is then cancelled
    /// still commits: the cancelled write hands the commit on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_queued_write_does_not_strand_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        // Hold the connection as a write in progress would.
        let mut state = writer.state.lock().await;
        let queued = {
            let writer = writer.clone();
            tokio::spawn(async move {
                writer
                    .write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (1)", [])?))
                    .await
            })
        };
        let (out, pending) = leave_batch_open(&writer, &mut state).await;
        queued.abort();
        assert!(queued.await.unwrap_err().is_cancelled());
        drop(state);
        assert_eq!(settle(out, pending).await.unwrap(), 1);
        assert_eq!(committed(&path), vec![0]);
    }

    /// A write whose request is dropped while it lingers before its commit
    /// is committed all the same, and the writer goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_dropped_while_it_lingers_is_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        {
            let mut write =
                Box::pin(writer.write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (1)", [])?)));
            // One poll runs the write and reaches the linger; then the
            // request goes away.
            let polled = futures::poll!(write.as_mut());
            assert!(
                polled.is_pending(),
                "the write should linger before it commits"
            );
        }
        writer
            .write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (2)", [])?))
            .await
            .unwrap();
        assert_eq!(committed(&path), vec![1, 2]);
    }

    /// A write that panics half-way leaves nothing behind, and the writer
    /// goes on committing the next writes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        let panicked = spawn_panicking_write(&writer, 7);
        assert!(panicked.await.unwrap().is_err());
        writer
            .write(|c| Ok(c.execute("INSERT INTO t (v) VALUES (8)", [])?))
            .await
            .unwrap();
        assert_eq!(committed(&path), vec![8]);
    }

    /// A batch left open for a write that then panics still commits the
    /// writes before it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_write_does_not_strand_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, path) = shared(&dir);
        let mut state = writer.state.lock().await;
        let panicking = spawn_panicking_write(&writer, 1);
        let (out, pending) = leave_batch_open(&writer, &mut state).await;
        drop(state);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), settle(out, pending));
        assert_eq!(waited.await.expect("stranded").unwrap(), 1);
        assert!(panicking.await.unwrap().is_err());
        assert_eq!(committed(&path), vec![0]);
    }
}
