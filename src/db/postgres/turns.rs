//! Advancing reads of one `whats_new` cursor on this replica are served in
//! turns, and each turn serves every caller queued at its start: one
//! transaction takes the cursor's row lock, reads their pages one after
//! another (each after where the one before left the cursor) and commits
//! once. So the callers of one cursor hold one pooled connection between
//! them, not one each while they wait on the lock (which would starve every
//! other query of the pool), and sixteen callers cost one commit, not
//! sixteen in a row. Across replicas the row lock alone orders the turns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::domain::model::EventPage;
use crate::domain::store::CursorRead;
use crate::error::Result;

type Key = (String, String);

/// What one caller asks of its cursor, and where its page goes.
pub struct Ask {
    pub limit: i64,
    pub skip_own: bool,
    pub reply: oneshot::Sender<Result<EventPage>>,
}

/// One cursor's queue: the callers not served yet, and the turn.
#[derive(Default)]
struct Queue {
    asks: Mutex<Vec<Ask>>,
    turn: tokio::sync::Mutex<()>,
}

/// One queue per cursor that someone is reading; a queue goes when its last
/// caller is done, so the map holds only the cursors being read now.
#[derive(Default)]
pub struct Turns {
    queues: Mutex<HashMap<Key, Arc<Queue>>>,
}

impl Turns {
    /// Queues `read` at its cursor and waits for its page. The caller whose turn comes while asks are waiting serves
    /// them all with `serve` (its own among them), in the order they came,
    /// before the next turn begins. `serve` runs as a task of its own, so
    /// the pages of the others are read and answered even if this caller
    /// goes away meanwhile.
    pub async fn read<F, Fut>(&self, read: CursorRead<'_>, serve: F) -> Result<EventPage>
    where
        F: FnOnce(Vec<Ask>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let key = (read.room.to_owned(), read.agent.to_owned());
        let queue = self.lock().entry(key.clone()).or_default().clone();
        let (reply, mut page) = oneshot::channel();
        lock(&queue.asks).push(Ask {
            limit: read.limit,
            skip_own: read.skip_own,
            reply,
        });
        let leave = Leave {
            turns: self,
            key,
            queue: Some(queue),
        };
        let queue = leave.queue.as_ref().expect("set above");
        {
            let _turn = queue.turn.lock().await;
            // A turn before this one took this ask and answered it before
            // it ended; otherwise this ask is still queued, and this turn
            // serves it with every ask that came since.
            if let Ok(answer) = page.try_recv() {
                return answer;
            }
            let asks = std::mem::take(&mut *lock(&queue.asks));
            // A panic in `serve` drops the replies: every caller waiting
            // on them gets the error below.
            let _ = tokio::spawn(serve(asks)).await;
        }
        page.await.unwrap_or_else(|_| {
            Err(crate::error::Error::internal(anyhow::anyhow!(
                "a cursor's turn ended without answering"
            )))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Queue>>> {
        lock(&self.queues)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the cursor's queue from the map once its last caller is gone
/// (also one that gave up while waiting).
struct Leave<'a> {
    turns: &'a Turns,
    key: Key,
    queue: Option<Arc<Queue>>,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        // Under the map's lock, where every caller got its handle: a queue
        // only the map still holds has no one waiting on it.
        let mut queues = self.turns.lock();
        drop(self.queue.take());
        if queues
            .get(&self.key)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            queues.remove(&self.key);
        }
    }
}
