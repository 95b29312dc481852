//! `last_seen` per agent and room, and each token's own last use, kept in
//! memory on every call and written to the database in batches, so a call
//! costs no write of its own.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use crate::clock::now_ms;
use crate::domain::store::Store;

/// A token's last use is written at most this often (ms): enough to tell a
/// token in use from a forgotten or leaked one.
const TOKEN_USE_EVERY_MS: i64 = 60_000;

/// An agent's presence in a room is written at most this often (ms).
const SEEN_EVERY_MS: i64 = 1_000;

#[derive(Default)]
pub struct Presence {
    seen: Mutex<Stamps<(String, String)>>,
    /// By token id; OAuth grants (negative ids) are not recorded.
    used: Mutex<Stamps<i64>>,
}

/// The latest stamp per key, and the stamps not written yet.
struct Stamps<K> {
    latest: HashMap<K, i64>,
    dirty: Vec<(K, i64)>,
}

impl<K> Default for Stamps<K> {
    fn default() -> Self {
        Stamps {
            latest: HashMap::new(),
            dirty: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Stamps<K> {
    /// Stamps `key` with `now` unless it was stamped within `every` ms.
    fn stamp(&mut self, key: K, now: i64, every: i64) {
        if self.latest.get(&key).is_none_or(|&t| now - t >= every) {
            self.latest.insert(key.clone(), now);
            self.dirty.push((key, now));
        }
    }
}

// A poisoned lock is taken over, as everywhere in the server: what these
// maps hold stays valid after a panic elsewhere, and one panicked request
// must not fail every later one.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Presence {
    /// Records that `agent` acted in `room` now.
    pub fn touch(&self, room: &str, agent: &str) {
        lock(&self.seen).stamp((room.to_owned(), agent.to_owned()), now_ms(), SEEN_EVERY_MS);
    }

    /// Records that the token with `token_id` was used now.
    pub fn used(&self, token_id: i64) {
        if token_id > 0 {
            lock(&self.used).stamp(token_id, now_ms(), TOKEN_USE_EVERY_MS);
        }
    }

    /// The freshest `last_seen` known in memory.
    pub fn last_seen(&self, room: &str, agent: &str) -> Option<i64> {
        lock(&self.seen)
            .latest
            .get(&(room.to_owned(), agent.to_owned()))
            .copied()
    }

    /// Writes what changed since the last flush; what could not be written
    /// is kept for the next one.
    pub async fn flush(&self, store: &dyn Store) {
        let seen = std::mem::take(&mut lock(&self.seen).dirty);
        let rows: Vec<(String, String, i64)> = seen
            .iter()
            .map(|((room, agent), ts)| (room.clone(), agent.clone(), *ts))
            .collect();
        if !rows.is_empty()
            && let Err(e) = store.save_presence(&rows).await
        {
            tracing::warn!(error = %e, "could not save presence; will retry");
            lock(&self.seen).dirty.extend(seen);
        }
        let used = std::mem::take(&mut lock(&self.used).dirty);
        if !used.is_empty()
            && let Err(e) = store.save_token_use(&used).await
        {
            tracing::warn!(error = %e, "could not save the tokens' last use; will retry");
            lock(&self.used).dirty.extend(used);
        }
    }
}
