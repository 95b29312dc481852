//! `last_seen` per agent and room, kept in memory on every call and written to
//! the database in batches, so a read-only call costs no write.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::now_ms;
use crate::domain::store::Store;

#[derive(Default)]
pub struct Presence {
    seen: Mutex<HashMap<(String, String), i64>>,
    dirty: Mutex<Vec<(String, String, i64)>>,
}

// A poisoned lock is taken over, as everywhere in the server: what these
// maps hold stays valid after a panic elsewhere, and one panicked request
// must not fail every later one.
impl Presence {
    /// Records that `agent` acted in `room` now.
    pub fn touch(&self, room: &str, agent: &str) {
        let now = now_ms();
        let key = (room.to_owned(), agent.to_owned());
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let stale = seen.get(&key).is_none_or(|&t| now - t >= 1_000);
        if stale {
            seen.insert(key, now);
            self.dirty.lock().unwrap_or_else(|p| p.into_inner()).push((
                room.to_owned(),
                agent.to_owned(),
                now,
            ));
        }
    }

    /// The freshest `last_seen` known in memory.
    pub fn last_seen(&self, room: &str, agent: &str) -> Option<i64> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(room.to_owned(), agent.to_owned()))
            .copied()
    }

    /// Writes what changed since the last flush.
    pub async fn flush(&self, store: &dyn Store) {
        let batch = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()));
        if batch.is_empty() {
            return;
        }
        if let Err(e) = store.save_presence(&batch).await {
            tracing::warn!(error = %e, "could not save presence; will retry");
            self.dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(batch);
        }
    }
}
