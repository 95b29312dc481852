//! The one in-process event bus: every committed event is published here, and
//! `wait_for_change`, SSE and the MQTT bridge subscribe. Nothing polls.
//!
//! With several replicas on one PostgreSQL database, events committed on
//! another replica arrive through the store's relay (`Store::start_relay`),
//! which reads them back from the events table in id order. Once a relay
//! runs, the bus remembers which ids it announced, so an event written here
//! and also read back by the relay is announced once.
//!
//! The bus also keeps the highest event and message ids it knows exist
//! (those the database held at start and every id announced since), so a
//! cursor at or below them is known to lie within the history without a
//! database read ([`Core::cursor_ahead`](crate::domain::Core::cursor_ahead)).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::broadcast;

use crate::domain::model::Event;

/// How many events a slow subscriber may fall behind before it is told it
/// lagged (it then re-reads from the database).
const CAPACITY: usize = 8192;

#[derive(Clone)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<Event>>,
    /// Set when a relay starts: per room, the ids already announced.
    seen: Arc<OnceLock<Mutex<HashMap<String, Seen>>>>,
    /// The highest ids known to exist: events, then messages.
    high: Arc<[AtomicI64; 2]>,
}

/// What a room has announced: every id up to `upto` (the relay has read the
/// room that far) and the ids above it announced by local writers.
#[derive(Default)]
struct Seen {
    upto: i64,
    above: BTreeSet<i64>,
}

impl Seen {
    /// Records `id`; `true` the first time.
    fn first(&mut self, id: i64) -> bool {
        id > self.upto && self.above.insert(id)
    }
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus::new()
    }
}

impl EventBus {
    pub fn new() -> EventBus {
        let (tx, _) = broadcast::channel(CAPACITY);
        EventBus {
            tx,
            seen: Arc::new(OnceLock::new()),
            high: Arc::new([AtomicI64::new(0), AtomicI64::new(0)]),
        }
    }

    /// Records that ids up to `events` and `messages` exist (the database's
    /// high-water marks when the server starts).
    pub fn note_high(&self, events: i64, messages: i64) {
        self.high[0].fetch_max(events, Ordering::Relaxed);
        self.high[1].fetch_max(messages, Ordering::Relaxed);
    }

    /// The highest event id known to exist (0 when none is known).
    pub fn known_event_high(&self) -> i64 {
        self.high[0].load(Ordering::Relaxed)
    }

    /// The highest message id known to exist (0 when none is known).
    pub fn known_message_high(&self) -> i64 {
        self.high[1].load(Ordering::Relaxed)
    }

    fn note(&self, e: &Event) {
        self.note_high(e.id, e.message_id.unwrap_or(0));
    }

    /// Announces committed events; having no subscriber is fine.
    pub fn publish(&self, events: impl IntoIterator<Item = Event>) {
        match self.seen.get() {
            None => {
                for e in events {
                    self.note(&e);
                    let _ = self.tx.send(Arc::new(e));
                }
            }
            Some(seen) => {
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                for e in events {
                    self.note(&e);
                    if seen.entry(e.room.clone()).or_default().first(e.id) {
                        let _ = self.tx.send(Arc::new(e));
                    }
                }
            }
        }
    }

    /// Turns on deduplication for a relay, with the rooms' latest ids when it
    /// starts (older events are history, not news).
    pub fn start_relay(&self, latest: impl IntoIterator<Item = (String, i64)>) {
        let rooms = latest
            .into_iter()
            .map(|(room, upto)| {
                (
                    room,
                    Seen {
                        upto,
                        above: BTreeSet::new(),
                    },
                )
            })
            .collect();
        let _ = self.seen.set(Mutex::new(rooms));
    }

    /// How far the relay has read `room` (0 for a room it has not seen).
    pub fn relayed_upto(&self, room: &str) -> i64 {
        self.seen
            .get()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()))
            .and_then(|s| s.get(room).map(|r| r.upto))
            .unwrap_or(0)
    }

    /// Announces events of `room` read back from the database in id order
    /// (from any replica), skipping those already announced, and records
    /// that the room is read up to `upto`.
    pub fn publish_relayed(&self, room: &str, events: Vec<Event>, upto: i64) {
        let Some(seen) = self.seen.get() else {
            return self.publish(events);
        };
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let r = seen.entry(room.to_owned()).or_default();
        for e in events {
            self.note(&e);
            if r.first(e.id) {
                let _ = self.tx.send(Arc::new(e));
            }
        }
        if upto > r.upto {
            r.upto = upto;
            r.above = r.above.split_off(&(upto + 1));
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(room: &str, id: i64) -> Event {
        Event {
            id,
            room: room.into(),
            ts: 0,
            kind: "message".into(),
            actor: "a".into(),
            task_id: None,
            message_id: None,
            detail: serde_json::Value::Null,
        }
    }

    fn drain(rx: &mut broadcast::Receiver<Arc<Event>>) -> Vec<i64> {
        std::iter::from_fn(|| rx.try_recv().ok().map(|e| e.id)).collect()
    }

    /// Once a relay runs, an event announced locally and read back by the
    /// relay (in either order) is announced once; history is not news.
    #[test]
    fn relayed_events_are_announced_once() {
        let bus = EventBus::new();
        let mut rx = bus.subscribe();
        bus.start_relay([("r".to_string(), 10)]);
        bus.publish([event("r", 5)]);
        bus.publish([event("r", 12)]);
        bus.publish_relayed(
            "r",
            vec![event("r", 11), event("r", 12), event("r", 13)],
            13,
        );
        bus.publish([event("r", 13)]);
        bus.publish_relayed("s", vec![event("s", 1)], 1);
        bus.publish([event("s", 1)]);
        assert_eq!(drain(&mut rx), vec![12, 11, 13, 1]);
        assert_eq!(bus.relayed_upto("r"), 13);
        assert_eq!(bus.relayed_upto("t"), 0);
    }

    /// The known high-water marks grow with what is announced, never shrink.
    #[test]
    fn knows_the_highest_ids() {
        let bus = EventBus::new();
        bus.note_high(10, 4);
        let mut message = event("r", 12);
        message.message_id = Some(7);
        bus.publish([event("r", 11), message]);
        bus.note_high(5, 2);
        assert_eq!((bus.known_event_high(), bus.known_message_high()), (12, 7));
    }
}
