//! Advancing reads of one `whats_new` cursor on this replica take turns
//! here before they take the cursor's row lock: the callers of one cursor
//! then hold one pooled connection between them, not one each while they
//! wait on the lock (which would starve every other query of the pool).
//! Across replicas the row lock alone orders them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Key = (String, String);

/// One queue per cursor that someone is reading; a queue goes when its last
/// caller is done, so the map holds only the cursors being read now.
#[derive(Default)]
pub struct Turns {
    queues: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A caller's turn at a cursor; the next caller's begins when it is dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    /// Waits for the turn at `agent`'s cursor in `room`.
    pub async fn take(&self, room: &str, agent: &str) -> Turn<'_> {
        let key = (room.to_owned(), agent.to_owned());
        let queue = self.lock().entry(key).or_default().clone();
        Turn {
            turns: self,
            guard: Some(queue.lock_owned().await),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<tokio::sync::Mutex<()>>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // Under the map's lock, where every waiter got its handle: a queue
        // only the map still holds has no one waiting on it (also one left
        // by a caller that gave up while waiting). The map is small: the
        // cursors being read at this moment.
        let mut queues = self.turns.lock();
        drop(self.guard.take());
        queues.retain(|_, q| Arc::strong_count(q) > 1);
    }
}
