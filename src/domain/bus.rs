//! The one in-process event bus: every committed event is published here, and
//! `wait_for_change`, SSE and the MQTT bridge subscribe. Nothing polls.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::db::Event;

/// How many events a slow subscriber may fall behind before it is told it
/// lagged (it then re-reads from the database).
const CAPACITY: usize = 8192;

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl EventBus {
    pub fn new() -> EventBus {
        let (tx, _) = broadcast::channel(CAPACITY);
        EventBus { tx }
    }

    /// Announces committed events; having no subscriber is fine.
    pub fn publish(&self, events: impl IntoIterator<Item = crate::db::Event>) {
        for e in events {
            let _ = self.tx.send(Arc::new(e));
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}
