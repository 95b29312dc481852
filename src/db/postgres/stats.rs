//! Fresh planner statistics after a burst of writes.
//!
//! PostgreSQL plans each query from what `ANALYZE` last counted. Autovacuum
//! analyses a table once a tenth of it has changed, and looks only once a
//! minute; in between, after a burst of posts, the planner still believes a
//! room holds as few events as before. For the `whats_new` window it then
//! chose a bitmap scan of everything after the cursor and a sort, instead of
//! the ordered index range it reads when it knows the table: 36 ms instead of
//! 2 ms at 100,000 events behind, growing with the backlog
//! (docs/POSTGRES.md). The relay hears every event of every replica, so it
//! counts them here; past [`BURST`] events and a tenth of what the last
//! analysis found, the tables the hot queries read are analysed at once, in
//! the background, by one replica at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use sqlx::PgPool;

/// Events after which a burst is worth analysing, however small the table.
pub const BURST: i64 = 1_000;

/// The tables whose plans follow a burst of posts: the events of `whats_new`
/// and the history, the messages of `read_messages`, the mentions of
/// `my_mentions`.
const TABLES: &str = "ANALYZE events, messages, mentions";

/// Events heard since the last analysis, and what it counted.
#[derive(Default)]
pub struct Freshness {
    since: AtomicI64,
    rows: AtomicI64,
    running: AtomicBool,
}

impl Freshness {
    /// Counts `n` more events; starts an analysis in the background when
    /// they make a burst and none is running.
    pub fn heard(self: &Arc<Self>, n: usize, pool: &PgPool) {
        let since = self.since.fetch_add(n as i64, Ordering::Relaxed) + n as i64;
        if since < BURST + self.rows.load(Ordering::Relaxed) / 10 {
            return;
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        self.since.store(0, Ordering::Relaxed);
        let (me, pool) = (self.clone(), pool.clone());
        tokio::spawn(async move {
            match analyze(&pool).await {
                Ok(rows) => {
                    me.rows.store(rows.max(0), Ordering::Relaxed);
                    tracing::debug!(events = rows, "planner statistics after a burst");
                }
                Err(e) => tracing::warn!(error = %e, "ANALYZE after a burst failed"),
            }
            me.running.store(false, Ordering::Release);
        });
    }
}

/// Analyses [`TABLES`] unless another replica is at it; the events the
/// planner now counts (as the other replica left them, if it was at it).
async fn analyze(pool: &PgPool) -> sqlx::Result<i64> {
    let mut tx = pool.begin().await?;
    let mine: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext('chatroom.analyze'))")
            .fetch_one(&mut *tx)
            .await?;
    if mine {
        sqlx::query(TABLES).execute(&mut *tx).await?;
    }
    let rows: i64 =
        sqlx::query_scalar("SELECT reltuples::bigint FROM pg_class WHERE oid = 'events'::regclass")
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(rows)
}
