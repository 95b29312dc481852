//! WAL checkpoints off the write path.
//!
//! SQLite's automatic checkpoint runs inside the `COMMIT` that takes the log
//! past 1,000 pages: on the writer connection, on whichever async worker
//! thread that commit ran, holding the writer. Its `fsync` of the log and of
//! the database file took 25–270 ms on a busy disk, and every write — and
//! every `whats_new`, which moves a cursor — queued behind it (the p99 tail
//! of BENCHMARKS.md). With automatic checkpoints off on the writer, this
//! thread does them on a connection of its own:
//!
//! 1. when the log holds [`FRAMES`] pages not yet copied, a passive
//!    checkpoint copies them and syncs, while writers and readers go on;
//! 2. once the log is [`RESTART`] pages long, passive checkpoints catch up
//!    with it, and then, holding the writer between two batches, one more
//!    copies what was committed meanwhile (a few pages, so its syncs are
//!    short). The log is then wholly copied and the next write starts it
//!    again from the beginning, so it stays within about 16 MB. (Passive
//!    checkpoints alone never catch up with a steady stream of commits,
//!    and the log would grow without end.)

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::writer::Pauser;

/// Pages in the log not yet copied that start a checkpoint: SQLite's own
/// automatic threshold.
const FRAMES: i64 = 1000;
/// Pages in the log (copied or not) past which it is started again, which
/// needs a short pause of the writer: rarer than the copies themselves, so
/// that the pause comes once per 16 MB of log.
const RESTART: i64 = 4 * FRAMES;
/// How often the log is looked at.
const TICK: Duration = Duration::from_millis(100);

/// Starts the checkpointer of the database at `path`; it ends when the
/// returned sender is dropped.
pub fn spawn(conn: Connection, writer: Pauser) -> std::io::Result<mpsc::Sender<()>> {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
                if let Err(e) = tick(&conn, &writer) {
                    tracing::warn!(error = %e, "WAL checkpoint failed; will retry");
                }
            }
        })?;
    Ok(stop)
}

/// `(pages in the log, pages of it copied)` after a checkpoint of `mode`.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64)> {
    let sql = match mode {
        "NOOP" => "PRAGMA wal_checkpoint(NOOP)",
        _ => "PRAGMA wal_checkpoint(PASSIVE)",
    };
    conn.query_row(sql, [], |r| Ok((r.get(1)?, r.get(2)?)))
}

fn tick(conn: &Connection, writer: &Pauser) -> rusqlite::Result<()> {
    let (mut log, mut copied) = checkpoint(conn, "NOOP")?;
    if log - copied < FRAMES && log < RESTART {
        return Ok(());
    }
    let started = Instant::now();
    // The bulk, with its syncs, while everyone goes on.
    if log - copied >= FRAMES {
        (log, copied) = checkpoint(conn, "PASSIVE")?;
    }
    if log < RESTART {
        tracing::debug!(
            pages = log,
            copied,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "WAL checkpoint"
        );
        return Ok(());
    }
    // Time to start the log again. Catch up first while everyone goes
    // on, so that what is left for the writer's pause is little.
    for _ in 0..4 {
        if log - copied <= FRAMES / 16 {
            break;
        }
        (log, copied) = checkpoint(conn, "PASSIVE")?;
    }
    let unlocked = started.elapsed();
    let held = Instant::now();
    let rest = writer.between_batches(|| checkpoint(conn, "PASSIVE"));
    let held = held.elapsed();
    if let Some(done) = rest {
        (log, copied) = done?;
    }
    tracing::debug!(
        pages = log,
        copied,
        unlocked_ms = unlocked.as_secs_f64() * 1000.0,
        writer_held_ms = held.as_secs_f64() * 1000.0,
        "WAL checkpoint, log restarts"
    );
    Ok(())
}
