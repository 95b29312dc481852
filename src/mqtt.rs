//! The MQTT bridge: room events to a broker, for home automation (SPEC §7).
//!
//! Events come from the in-process bus after their transaction committed,
//! never from inside a request, and nothing here can slow or fail a tool call:
//!
//! - the *pump* moves events from the bus into a bounded queue, dropping the
//!   oldest (and counting them) when the broker cannot keep up;
//! - the *publisher* hands queued events to rumqttc while connected, and keeps
//!   the retained `<prefix>/<room>/status` (and, when asked for, the Home
//!   Assistant discovery topics) fresh, coalescing refreshes under load;
//! - the *connection* task drives rumqttc's event loop, reconnecting with
//!   back-off, and says `online`/`offline` on `<prefix>/bridge/online` (the
//!   broker says `offline` for us through the last will if we vanish).
//!
//! [`Stats`] is what the rest of the server (the console posture, logs) sees
//! of the bridge.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, EventLoop, LastWill, MqttOptions, Packet, QoS,
};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::{fmt_ts, now_ms};
use crate::config::MqttConfig;
use crate::domain::Core;
use crate::domain::model::{Event, EventFilter};
use crate::error::Result;

/// Live counters of the bridge; all zero and disconnected when it is off.
#[derive(Debug, Default)]
pub struct Stats {
    pub enabled: AtomicBool,
    pub connected: AtomicBool,
    /// Events handed to the MQTT client.
    pub published: AtomicU64,
    /// Events lost because the queue was full (or the bridge fell behind the bus).
    pub dropped: AtomicU64,
}

/// Events waiting for the broker, at most; past it the oldest are dropped.
const QUEUE_CAPACITY: usize = 10_000;
/// A room's status is republished at most this often, however busy it is.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// Every room's status is refreshed this often even without events, so that
/// `agents_active` decays.
const STATUS_SWEEP: Duration = Duration::from_secs(60);
/// An agent seen within this window counts in `agents_active`.
const ACTIVE_WINDOW_MS: i64 = 5 * 60 * 1000;
/// Reconnection back-off, doubling from the first to the last.
const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(15);
/// How often at most a log line reports dropped events.
const DROP_LOG_EVERY: Duration = Duration::from_secs(10);
/// Requests rumqttc buffers between us and the socket.
const CLIENT_CAPACITY: usize = 64;
/// An event carries at most a 20,000-character result plus its frame.
const MAX_PACKET: usize = 1 << 20;
/// Home Assistant's standard discovery prefix.
const HA_PREFIX: &str = "homeassistant";

/// Starts the bridge; the handle ends once it has said goodbye to the broker
/// after `core.shutdown`. Fails only on settings this build cannot honour.
pub fn spawn(config: MqttConfig, core: Core, stats: Arc<Stats>) -> anyhow::Result<JoinHandle<()>> {
    let prefix = config.prefix.trim_end_matches('/').to_owned();
    let client_id = format!(
        "chatroom-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let mut options = MqttOptions::new(client_id.clone(), config.host.clone(), config.port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_clean_session(true)
        .set_max_packet_size(64 * 1024, MAX_PACKET)
        .set_request_channel_capacity(CLIENT_CAPACITY)
        .set_last_will(LastWill::new(
            online_topic(&prefix),
            "offline",
            QoS::AtLeastOnce,
            true,
        ));
    if let Some(user) = &config.user {
        options.set_credentials(
            user.clone(),
            config
                .pass
                .as_ref()
                .map(|p| p.expose().to_owned())
                .unwrap_or_default(),
        );
    }
    if config.tls {
        options.set_transport(tls_transport()?);
    }
    let (client, eventloop) = AsyncClient::new(options, CLIENT_CAPACITY);

    tracing::info!(
        host = %config.host,
        port = config.port,
        prefix = %prefix,
        tls = config.tls,
        auth = config.user.is_some(),
        ha_discovery = config.ha_discovery,
        client_id = %client_id,
        "MQTT bridge starting"
    );
    stats.enabled.store(true, Ordering::Relaxed);

    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        queued: Notify::new(),
        dirty: Mutex::new(BTreeSet::new()),
        stats: stats.clone(),
        drops: Mutex::new(DropLog::default()),
    });
    let (conn_tx, conn_rx) = watch::channel(None);
    let bridge = Bridge {
        prefix,
        ha_discovery: config.ha_discovery,
        core: core.clone(),
        client: client.clone(),
        shared: shared.clone(),
    };
    // Subscribe now, before the first request can publish anything.
    let rx = core.bus.subscribe();
    let states = core.presence.subscribe();
    tokio::spawn(pump(rx, shared, core.shutdown.clone()));
    tokio::spawn(presence::publish(
        states,
        client.clone(),
        bridge.prefix.clone(),
        config.ha_discovery,
        core.shutdown.clone(),
    ));
    tokio::spawn(bridge.publish(conn_rx));
    let target = format!("{}:{}", config.host, config.port);
    Ok(tokio::spawn(drive(
        eventloop,
        client,
        online_topic(&config.prefix),
        target,
        stats,
        conn_tx,
        core.shutdown,
    )))
}

fn online_topic(prefix: &str) -> String {
    format!("{}/bridge/online", prefix.trim_end_matches('/'))
}

#[cfg(feature = "mqtt-tls")]
fn tls_transport() -> anyhow::Result<rumqttc::Transport> {
    use tokio_rustls::rustls;
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "could not load a system CA certificate");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        anyhow::bail!(
            "CHATROOM_MQTT_TLS is on but no system CA certificates were found to check the broker's \
             certificate with (install the ca-certificates package)"
        );
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(rumqttc::Transport::tls_with_config(
        rumqttc::TlsConfiguration::Rustls(Arc::new(config)),
    ))
}

#[cfg(not(feature = "mqtt-tls"))]
fn tls_transport() -> anyhow::Result<rumqttc::Transport> {
    anyhow::bail!("{}", crate::config::NO_TLS)
}

/// What the pump and the publisher share.
struct Shared {
    queue: Mutex<VecDeque<Arc<Event>>>,
    queued: Notify,
    /// Rooms whose status changed since it was last published.
    dirty: Mutex<BTreeSet<String>>,
    stats: Arc<Stats>,
    drops: Mutex<DropLog>,
}

#[derive(Default)]
struct DropLog {
    unreported: u64,
    last: Option<Instant>,
}

// A poisoned lock is taken over, as everywhere in the server: the queues
// and sets stay valid after a panic elsewhere.
impl Shared {
    fn push(&self, event: Arc<Event>) {
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(event.room.clone());
        let overflow = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back(event);
            let mut n = 0;
            while q.len() > QUEUE_CAPACITY {
                q.pop_front();
                n += 1;
            }
            n
        };
        if overflow > 0 {
            self.dropped(
                overflow,
                "the MQTT queue is full; dropped the oldest events",
            );
        }
        self.queued.notify_one();
    }

    fn pop(&self) -> Option<Arc<Event>> {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Counts drops, and says so in the log at most every [`DROP_LOG_EVERY`].
    fn dropped(&self, n: u64, why: &'static str) {
        let total = self.stats.dropped.fetch_add(n, Ordering::Relaxed) + n;
        let mut log = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        log.unreported += n;
        if log.last.is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY) {
            tracing::warn!(dropped = log.unreported, dropped_total = total, "{why}");
            log.unreported = 0;
            log.last = Some(Instant::now());
        }
    }

    fn take_dirty(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn has_dirty(&self) -> bool {
        !self
            .dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

/// Moves committed events from the bus into the queue; never waits on the broker.
async fn pump(
    mut rx: broadcast::Receiver<Arc<Event>>,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    loop {
        let received = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.recv() => r,
        };
        match received {
            Ok(event) => shared.push(event),
            Err(broadcast::error::RecvError::Lagged(n)) => shared.dropped(
                n,
                "the MQTT bridge fell behind the event bus; dropped events",
            ),
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// The publishing side: events, statuses, discovery.
struct Bridge {
    prefix: String,
    ha_discovery: bool,
    core: Core,
    client: AsyncClient,
    shared: Arc<Shared>,
}

impl Bridge {
    /// Publishes while connected; on each new connection first says `online`
    /// and republishes every room's status (and discovery).
    async fn publish(self, mut conn: watch::Receiver<Option<u64>>) {
        let shutdown = self.core.shutdown.clone();
        let mut session = 0;
        let mut announced = HashSet::new();
        let mut last_status = Instant::now();
        let mut sweep = tokio::time::interval_at(Instant::now() + STATUS_SWEEP, STATUS_SWEEP);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let Some(current) = *conn.borrow_and_update() else {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = conn.changed() => if changed.is_err() { return },
                }
                continue;
            };
            if current != session {
                session = current;
                announced.clear();
                if self.greet(&mut announced).await.is_err() {
                    return;
                }
                last_status = Instant::now();
                continue;
            }
            // Statuses are due once a second at most; events fill the gaps.
            let status_due = self.shared.has_dirty().then(|| last_status + STATUS_EVERY);
            if let Some(due) = status_due
                && due <= Instant::now()
            {
                let rooms = self.shared.take_dirty();
                if self.statuses(rooms, &mut announced).await.is_err() {
                    return;
                }
                last_status = Instant::now();
                continue;
            }
            if let Some(event) = self.shared.pop() {
                if self.event(&event).await.is_err() {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = conn.changed() => if changed.is_err() { return },
                _ = self.shared.queued.notified() => {}
                _ = sweep.tick() => {
                    if let Ok(rooms) = self.core.store.list_rooms(self.core.clock.now_ms()).await {
                        self.shared.dirty.lock().unwrap_or_else(|p| p.into_inner())
                            .extend(rooms.into_iter().map(|r| r.room.name));
                    }
                }
                _ = tokio::time::sleep_until(status_due.unwrap_or_else(Instant::now)), if status_due.is_some() => {}
            }
        }
    }

    /// A fresh connection: `online`, then every room's discovery and status.
    async fn greet(&self, announced: &mut HashSet<String>) -> std::result::Result<(), Gone> {
        self.send(online_topic(&self.prefix), true, b"online".to_vec())
            .await?;
        // Taken first: a change after this point marks its room again.
        self.shared.take_dirty();
        let rooms = match self.core.store.list_rooms(self.core.clock.now_ms()).await {
            Ok(rooms) => rooms.into_iter().map(|r| r.room.name).collect(),
            Err(e) => {
                e.log_if_internal();
                BTreeSet::new()
            }
        };
        self.statuses(rooms, announced).await
    }

    async fn event(&self, event: &Event) -> std::result::Result<(), Gone> {
        let topic = format!("{}/{}/{}", self.prefix, event.room, event.kind);
        let payload = crate::present::event(event).to_string().into_bytes();
        self.send(topic, false, payload).await?;
        self.shared.stats.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn statuses(
        &self,
        rooms: BTreeSet<String>,
        announced: &mut HashSet<String>,
    ) -> std::result::Result<(), Gone> {
        for room in rooms {
            let status = match room_status(&self.core, &room).await {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    e.log_if_internal();
                    continue;
                }
            };
            if self.ha_discovery && announced.insert(room.clone()) {
                for (topic, config) in discovery(&self.prefix, &room) {
                    self.send(topic, true, config.to_string().into_bytes())
                        .await?;
                }
            }
            let topic = format!("{}/{}/status", self.prefix, room);
            self.send(topic, true, status.to_string().into_bytes())
                .await?;
        }
        Ok(())
    }

    /// Hands one QoS 1 message to the client; `Gone` once the client is.
    async fn send(
        &self,
        topic: String,
        retain: bool,
        payload: Vec<u8>,
    ) -> std::result::Result<(), Gone> {
        self.client
            .publish(topic, QoS::AtLeastOnce, retain, payload)
            .await
            .map_err(|_| Gone)
    }
}

/// The MQTT client (its event loop) has stopped.
struct Gone;

/// A room's status as the retained topic holds it; `None` for a room that is gone.
pub async fn room_status(core: &Core, room: &str) -> Result<Option<Value>> {
    if core.store.get_room(room).await?.is_none() {
        return Ok(None);
    }
    let tasks = core.store.task_counts(room).await?;
    let now = now_ms();
    let agents_active = core
        .store
        .members(room)
        .await?
        .iter()
        .filter(|m| {
            let seen = m.last_seen.max(core.presence.last_seen(room, &m.agent));
            seen.is_some_and(|t| now - t <= ACTIVE_WINDOW_MS)
        })
        .count();
    let latest = core.store.latest_event_id(room).await?;
    let last_activity = if latest > 0 {
        core.store
            .read_events(room, &EventFilter::after(latest - 1, 1))
            .await?
            .first()
            .map(|e| fmt_ts(e.ts))
    } else {
        None
    };
    Ok(Some(json!({
        "room": room,
        "ts": fmt_ts(now),
        "tasks": tasks,
        "agents_active": agents_active,
        "last_activity_ts": last_activity,
    })))
}

/// The Home Assistant discovery topics and configs of a room: one device per
/// room, one sensor per figure, all reading the room's status topic.
pub fn discovery(prefix: &str, room: &str) -> Vec<(String, Value)> {
    let node = format!("chatroom_{}_{}", ha_id(prefix), ha_id(room));
    let status_topic = format!("{prefix}/{room}/status");
    let device = json!({
        "identifiers": [node],
        "name": format!("chatroom {room}"),
        "manufacturer": "chatroom",
        "model": "room",
        "sw_version": env!("CARGO_PKG_VERSION"),
    });
    let open = "{{ value_json.tasks.pending + value_json.tasks.in_progress + \
                value_json.tasks.blocked + value_json.tasks.in_review }}";
    let sensors: [(&str, &str, &str, &str, Option<&str>); 5] = [
        (
            "open_tasks",
            "Open tasks",
            open,
            "mdi:clipboard-list",
            Some("tasks"),
        ),
        (
            "in_progress",
            "In progress",
            "{{ value_json.tasks.in_progress }}",
            "mdi:progress-wrench",
            Some("tasks"),
        ),
        (
            "in_review",
            "In review",
            "{{ value_json.tasks.in_review }}",
            "mdi:eye-check",
            Some("tasks"),
        ),
        (
            "agents_active",
            "Agents active",
            "{{ value_json.agents_active }}",
            "mdi:robot",
            Some("agents"),
        ),
        (
            "last_activity",
            "Last activity",
            // Home Assistant reads the string `None` as "unknown".
            "{{ value_json.last_activity_ts if value_json.last_activity_ts else None }}",
            "mdi:clock-outline",
            None,
        ),
    ];
    sensors
        .into_iter()
        .map(|(id, name, template, icon, unit)| {
            let mut config = json!({
                "name": name,
                "unique_id": format!("{node}_{id}"),
                "state_topic": status_topic,
                "value_template": template,
                "icon": icon,
                "availability_topic": online_topic(prefix),
                "payload_available": "online",
                "payload_not_available": "offline",
                "device": device,
                "origin": {"name": "chatroom", "sw_version": env!("CARGO_PKG_VERSION")},
            });
            match unit {
                Some(unit) => {
                    config["unit_of_measurement"] = json!(unit);
                    config["state_class"] = json!("measurement");
                }
                None => config["device_class"] = json!("timestamp"),
            }
            (format!("{HA_PREFIX}/sensor/{node}/{id}/config"), config)
        })
        .collect()
}

/// A name as a Home Assistant id (`[a-z0-9_-]`), without collisions: `_`
/// becomes `__`, any other byte `_xx` in hex. Capitals are escaped too, so
/// rooms `projA` and `proja` stay two devices where ids are compared
/// without regard to case (Home Assistant lower-cases entity ids).
fn ha_id(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'0'..=b'9' | b'-' => out.push(b as char),
            b'_' => out.push_str("__"),
            _ => out.push_str(&format!("_{b:02x}")),
        }
    }
    out
}

/// Agents' presence (SPEC §8a): each state change is published retained to
/// `<prefix>/<room>/agents/<agent>/state` as `{room, agent, state, ts,
/// attention}`, and with discovery on, each agent gets a Home Assistant
/// sensor reading that topic (announced with its first state). A change
/// made while the broker is away waits in rumqttc's queue or is dropped
/// like an event; the next change of the agent says the truth again.
mod presence {
    use std::collections::HashSet;

    use rumqttc::{AsyncClient, QoS};
    use serde_json::json;
    use tokio::sync::broadcast;
    use tokio_util::sync::CancellationToken;

    use super::{HA_PREFIX, ha_id, online_topic};
    use crate::domain::presence::Change;

    pub fn topic(prefix: &str, room: &str, agent: &str) -> String {
        format!("{prefix}/{room}/agents/{agent}/state")
    }

    /// The Home Assistant sensor of one agent's state.
    pub fn discovery(prefix: &str, room: &str, agent: &str) -> (String, serde_json::Value) {
        let node = format!("chatroom_{}_{}", ha_id(prefix), ha_id(room));
        let id = format!("agent_{}", ha_id(agent));
        let config = json!({
            "name": format!("{agent} state"),
            "unique_id": format!("{node}_{id}"),
            "state_topic": topic(prefix, room, agent),
            "value_template": "{{ value_json.state }}",
            "json_attributes_topic": topic(prefix, room, agent),
            "icon": "mdi:robot",
            "availability_topic": online_topic(prefix),
            "payload_available": "online",
            "payload_not_available": "offline",
            "device": {"identifiers": [node], "name": format!("chatroom {room}")},
            "origin": {"name": "chatroom", "sw_version": env!("CARGO_PKG_VERSION")},
        });
        (format!("{HA_PREFIX}/sensor/{node}/{id}/config"), config)
    }

    pub async fn publish(
        mut rx: broadcast::Receiver<Change>,
        client: AsyncClient,
        prefix: String,
        ha_discovery: bool,
        shutdown: CancellationToken,
    ) {
        let mut announced = HashSet::new();
        loop {
            let change = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = rx.recv() => match r {
                    Ok(c) => c,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(dropped = n, "the MQTT bridge fell behind presence changes");
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if ha_discovery && announced.insert((change.room.clone(), change.agent.clone())) {
                let (t, config) = discovery(&prefix, &change.room, &change.agent);
                let _ = client
                    .publish(t, QoS::AtLeastOnce, true, config.to_string().into_bytes())
                    .await;
            }
            let t = topic(&prefix, &change.room, &change.agent);
            let payload = change.payload().to_string().into_bytes();
            if client
                .publish(t, QoS::AtLeastOnce, true, payload)
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Drives the client: reconnects with back-off, keeps [`Stats::connected`]
/// and the log up to date, and on shutdown says `offline` and disconnects.
async fn drive(
    mut eventloop: EventLoop,
    client: AsyncClient,
    online: String,
    target: String,
    stats: Arc<Stats>,
    conn: watch::Sender<Option<u64>>,
    shutdown: CancellationToken,
) {
    let mut session = 0u64;
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    // Publishes the broker had not acknowledged when the connection dropped:
    // rumqttc forgets them on a clean session, so they are carried over.
    let mut carried: Vec<rumqttc::Request> = Vec::new();
    loop {
        let polled = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = eventloop.poll() => p,
        };
        match polled {
            Ok(rumqttc::Event::Incoming(Packet::ConnAck(_))) => {
                eventloop.pending.extend(carried.drain(..));
                session += 1;
                backoff = BACKOFF_MIN;
                failures = 0;
                stats.connected.store(true, Ordering::Relaxed);
                let _ = conn.send(Some(session));
                tracing::info!(broker = %target, "MQTT bridge connected");
            }
            Ok(_) => {}
            Err(e) => {
                carried.extend(
                    eventloop
                        .pending
                        .drain(..)
                        .filter(|r| matches!(r, rumqttc::Request::Publish(_))),
                );
                if stats.connected.swap(false, Ordering::Relaxed) {
                    let _ = conn.send(None);
                    tracing::warn!(broker = %target, error = %describe(&e), "MQTT bridge disconnected; reconnecting");
                } else if failures == 0 {
                    tracing::warn!(broker = %target, error = %describe(&e), "MQTT bridge cannot reach the broker; retrying");
                } else {
                    tracing::debug!(broker = %target, error = %describe(&e), retry_in_ms = backoff.as_millis() as u64, "MQTT bridge still cannot reach the broker");
                }
                failures = failures.saturating_add(1);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
    // Goodbye: a retained `offline` and a clean disconnect, briefly; if the
    // broker is out of reach its last will says the same.
    if stats.connected.swap(false, Ordering::Relaxed) {
        let _ = conn.send(None);
        let _ = client.try_publish(online, QoS::AtLeastOnce, true, "offline");
        let _ = client.try_disconnect();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                match eventloop.poll().await {
                    Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
    tracing::info!("MQTT bridge stopped");
}

/// A connection error for the log: the broker's refusal in words.
fn describe(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ConnectionRefused(
            code @ (ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized),
        ) => format!(
            "the broker refused the connection ({code:?}); check CHATROOM_MQTT_USER and CHATROOM_MQTT_PASS"
        ),
        ConnectionError::ConnectionRefused(code) => {
            format!("the broker refused the connection ({code:?})")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64) -> Arc<Event> {
        Arc::new(Event {
            id,
            room: "lobby".into(),
            ts: 0,
            kind: "message".into(),
            actor: "alice".into(),
            task_id: None,
            message_id: Some(id),
            detail: Value::Null,
        })
    }

    /// A full queue drops its oldest events, counts them, and keeps the newest.
    #[test]
    fn a_full_queue_drops_the_oldest() {
        let stats = Arc::new(Stats::default());
        let shared = Shared {
            queue: Mutex::new(VecDeque::new()),
            queued: Notify::new(),
            dirty: Mutex::new(BTreeSet::new()),
            stats: stats.clone(),
            drops: Mutex::new(DropLog::default()),
        };
        for id in 1..=(QUEUE_CAPACITY as i64 + 5) {
            shared.push(event(id));
        }
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 5);
        assert_eq!(shared.pop().unwrap().id, 6);
        assert_eq!(shared.queue.lock().unwrap().len(), QUEUE_CAPACITY - 1);
        assert_eq!(shared.take_dirty(), BTreeSet::from(["lobby".to_owned()]));
    }

    #[test]
    fn ha_ids_do_not_collide() {
        assert_eq!(ha_id("lobby"), "lobby");
        assert_ne!(ha_id("a_b"), ha_id("a.b"));
        assert_ne!(ha_id("a_2e"), ha_id("a.b"));
        assert!(
            ha_id("x/y.z_w")
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
        // Rooms differing only in case stay apart even once lower-cased.
        assert_eq!(ha_id("projA"), "proj_41");
        assert_ne!(ha_id("projA").to_lowercase(), ha_id("proja").to_lowercase());
    }

    #[test]
    fn topics_keep_the_room_as_written() {
        let topics = discovery("chatroom", "projA");
        for (_, config) in &topics {
            assert_eq!(config["state_topic"], "chatroom/projA/status");
            assert_eq!(config["device"]["name"], "chatroom projA");
        }
    }

    #[test]
    fn discovery_reads_the_status_topic() {
        let topics = discovery("home/chat", "dev.ops");
        assert_eq!(topics.len(), 5);
        for (topic, config) in &topics {
            assert!(topic.starts_with("homeassistant/sensor/chatroom_home_2fchat_dev_2eops/"));
            assert!(topic.ends_with("/config"));
            assert_eq!(config["state_topic"], "home/chat/dev.ops/status");
            assert_eq!(config["availability_topic"], "home/chat/bridge/online");
        }
    }
}
