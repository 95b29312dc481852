//! Presence, per agent and room: `last_seen` (every call), the state its
//! hooks report (`POST /v1/presence`: `online`, `working`, `waiting`,
//! `idle`, `offline`), its attention switch (`set_attention`), and what
//! `post_message` answers as `reach` for each agent it mentions (SPEC §8a):
//!
//! - `push`: a push client of the agent (`chatroom channel`, `chatroom
//!   watch --monitor`, a waiting `chatroom hook --rewake`) follows the room
//!   now, and its attention is not `focus`;
//! - `next_turn`: its hook was seen within 30 minutes, so it reads the room
//!   at its next prompt;
//! - `offline`: neither.
//!
//! The server learns of a push client from the stream itself: the client
//! says what it is (`/v1/stream?client=channel|monitor|rewake`) and is
//! counted while connected ([`PushClient`]). The count is this replica's;
//! each replica also writes a mark for its connected agents to the
//! database every [`PUSH_BEAT`] and clears it when the last one goes, so
//! replicas sharing a PostgreSQL database see each other's clients within
//! [`PUSH_FRESH_MS`]. `last_seen` and hook marks are kept in memory on
//! every call and written in batches, so a read costs no write; states and
//! attention are written when set (a few times per turn at most). Each
//! token's own last use is kept the same way, written at most once a
//! minute per token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::clock::{fmt_ts, now_ms};
use crate::domain::model::{AgentStatus, ReachMark};
use crate::domain::push::Attention;
use crate::domain::store::prelude::*;
use crate::domain::{Call, Core};
use crate::error::{Error, Result};

/// An agent that reports no state is `online` while it was seen within
/// this window (the dashboard's "active").
pub const ACTIVE_MS: i64 = 5 * 60 * 1000;
/// A hook seen within this window makes the agent `next_turn`.
pub const HOOK_FRESH_MS: i64 = 30 * 60 * 1000;
/// How often each replica renews the marks of its connected push clients.
pub const PUSH_BEAT: Duration = Duration::from_secs(15);
/// A push mark older than this is not believed (three missed beats).
pub const PUSH_FRESH_MS: i64 = 45_000;
/// How long the attention a stream reads is trusted before it is read
/// again (another replica may have set it).
const ATTENTION_TTL_MS: i64 = 5_000;

named_enum! {
    /// What an agent's hooks say it is doing.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum State {
        Online => "online",
        Working => "working",
        Waiting => "waiting",
        Idle => "idle",
        Offline => "offline",
    }
}

impl State {
    pub fn parse(s: &str) -> Result<State> {
        State::named(s.trim()).ok_or_else(|| {
            Error::invalid(format!(
                "state must be one of online, working, waiting, idle, offline, not {:?}",
                crate::domain::names::truncate_for_message(s)
            ))
        })
    }
}

named_enum! {
    /// Whether a message reaches a mentioned agent soon (`reach`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Reach {
        Push => "push",
        NextTurn => "next_turn",
        Offline => "offline",
    }
}

/// A switch an agent sets on itself in a room, kept in its presence row
/// beside the time it was set: the state its hooks report, or its
/// attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    State(State),
    Attention(Attention),
}

impl Switch {
    /// The name it is stored under.
    pub fn as_str(self) -> &'static str {
        match self {
            Switch::State(s) => s.as_str(),
            Switch::Attention(a) => a.as_str(),
        }
    }
}

/// A change of an agent's state or attention, for the MQTT bridge.
#[derive(Debug, Clone)]
pub struct Change {
    pub room: String,
    pub agent: String,
    pub state: Option<State>,
    pub state_ts: Option<i64>,
    pub attention: Attention,
}

impl Change {
    /// The retained MQTT payload of `<prefix>/<room>/agents/<agent>/state`.
    pub fn payload(&self) -> Value {
        json!({
            "room": self.room,
            "agent": self.agent,
            "state": self.state.map(State::as_str),
            "ts": self.state_ts.map(fmt_ts),
            "attention": self.attention.as_str(),
        })
    }
}

type Key = (String, String);

/// A room's attention switches as read (per agent), and when.
type Switches = (i64, HashMap<String, Attention>);

fn key(room: &str, agent: &str) -> Key {
    (room.to_owned(), agent.to_owned())
}

pub struct Presence {
    seen: Mutex<HashMap<Key, i64>>,
    dirty: Mutex<Vec<(String, String, i64)>>,
    /// The latest hook seen per agent, and those not written yet.
    hooks: Mutex<HashMap<Key, i64>>,
    /// This replica's push clients per agent.
    push: Mutex<HashMap<Key, usize>>,
    /// Marks waiting for the next flush.
    marks: Mutex<Vec<ReachMark>>,
    /// When the push marks were last renewed.
    push_beat: Mutex<i64>,
    /// Each room's attention switches as last read, and when.
    attention: Mutex<HashMap<String, Switches>>,
    changes: broadcast::Sender<Change>,
    /// Each token's last use (by token id; OAuth grants, negative ids, are
    /// not recorded), and the uses not written yet.
    used: Mutex<Uses>,
}

/// Each token's latest use, and the `(token id, ts)` not written yet.
type Uses = (HashMap<i64, i64>, Vec<(i64, i64)>);

/// A token's last use is written at most this often (ms): enough to tell a
/// token in use from a forgotten or leaked one.
const TOKEN_USE_EVERY_MS: i64 = 60_000;

impl Default for Presence {
    fn default() -> Presence {
        Presence {
            seen: Mutex::default(),
            dirty: Mutex::default(),
            hooks: Mutex::default(),
            push: Mutex::default(),
            marks: Mutex::default(),
            push_beat: Mutex::default(),
            attention: Mutex::default(),
            changes: broadcast::channel(1024).0,
            used: Mutex::default(),
        }
    }
}

/// One connected push client; counted until dropped.
pub struct PushClient {
    presence: Arc<Presence>,
    key: Key,
}

impl Drop for PushClient {
    fn drop(&mut self) {
        let mut push = lock(&self.presence.push);
        if let Some(n) = push.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                push.remove(&self.key);
                // The last one here went: clear this replica's mark, so
                // `reach` says so at once (another replica's beat renews
                // it if it still holds one).
                self.presence.mark(&self.key, None, Some(0));
            }
        }
    }
}

/// A poisoned lock is taken over, as everywhere in the server: what these
/// maps hold stays valid after a panic elsewhere, and one panicked request
/// must not fail every later one.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Presence {
    /// Records that `agent` acted in `room` now.
    pub fn touch(&self, room: &str, agent: &str) {
        let now = now_ms();
        let k = key(room, agent);
        let mut seen = lock(&self.seen);
        let stale = seen.get(&k).is_none_or(|&t| now - t >= 1_000);
        if stale {
            seen.insert(k, now);
            lock(&self.dirty).push((room.to_owned(), agent.to_owned(), now));
        }
    }

    /// Records that the token with `token_id` was used now.
    pub fn used(&self, token_id: i64) {
        if token_id <= 0 {
            return;
        }
        let now = now_ms();
        let mut used = lock(&self.used);
        if used
            .0
            .get(&token_id)
            .is_none_or(|&t| now - t >= TOKEN_USE_EVERY_MS)
        {
            used.0.insert(token_id, now);
            used.1.push((token_id, now));
        }
    }

    /// The freshest `last_seen` known in memory.
    pub fn last_seen(&self, room: &str, agent: &str) -> Option<i64> {
        lock(&self.seen).get(&key(room, agent)).copied()
    }

    /// Records that `agent`'s hook called in `room` at `now`.
    pub fn hook_seen(&self, room: &str, agent: &str, now: i64) {
        let k = key(room, agent);
        let mut hooks = lock(&self.hooks);
        let stale = hooks.get(&k).is_none_or(|&t| now - t >= 1_000);
        if stale {
            hooks.insert(k.clone(), now);
            drop(hooks);
            self.mark(&k, Some(now), None);
        }
    }

    /// Counts a push client of `agent` in `room` until the handle drops.
    pub fn push_client(self: &Arc<Self>, room: &str, agent: &str, now: i64) -> PushClient {
        let k = key(room, agent);
        let first = {
            let mut push = lock(&self.push);
            let n = push.entry(k.clone()).or_default();
            *n += 1;
            *n == 1
        };
        if first {
            self.mark(&k, None, Some(now));
        }
        PushClient {
            presence: self.clone(),
            key: k,
        }
    }

    /// How many push clients of `agent` this replica holds in `room`.
    pub fn push_clients(&self, room: &str, agent: &str) -> usize {
        lock(&self.push)
            .get(&key(room, agent))
            .copied()
            .unwrap_or(0)
    }

    /// The state and attention changes, for the MQTT bridge.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    fn mark(&self, k: &Key, hook: Option<i64>, push: Option<i64>) {
        lock(&self.marks).push(ReachMark {
            room: k.0.clone(),
            agent: k.1.clone(),
            hook_seen_ts: hook,
            push_seen_ts: push,
        });
    }

    /// Writes what changed since the last flush, and renews the push marks
    /// of this replica's clients every [`PUSH_BEAT`].
    pub async fn flush(&self, store: &dyn Store) {
        let now = now_ms();
        let batch = std::mem::take(&mut *lock(&self.dirty));
        if !batch.is_empty()
            && let Err(e) = store.save_presence(&batch).await
        {
            tracing::warn!(error = %e, "could not save presence; will retry");
            lock(&self.dirty).extend(batch);
        }
        let used = std::mem::take(&mut lock(&self.used).1);
        if !used.is_empty()
            && let Err(e) = store.save_token_use(&used).await
        {
            tracing::warn!(error = %e, "could not save the tokens' last use; will retry");
            lock(&self.used).1.extend(used);
        }
        {
            let mut beat = lock(&self.push_beat);
            if now - *beat >= PUSH_BEAT.as_millis() as i64 {
                *beat = now;
                let connected: Vec<Key> = lock(&self.push).keys().cloned().collect();
                for k in connected {
                    self.mark(&k, None, Some(now));
                }
            }
        }
        let marks = std::mem::take(&mut *lock(&self.marks));
        if !marks.is_empty()
            && let Err(e) = store.save_reach_marks(&marks).await
        {
            tracing::warn!(error = %e, "could not save reach marks; will retry");
            let mut pending = lock(&self.marks);
            let later = std::mem::replace(&mut *pending, marks);
            pending.extend(later);
        }
    }

    fn cached_attention(&self, room: &str, agent: &str, now: i64) -> Option<Attention> {
        let cache = lock(&self.attention);
        let (at, switches) = cache.get(room)?;
        (now - at < ATTENTION_TTL_MS).then(|| switches.get(agent).copied().unwrap_or_default())
    }
}

/// An agent's presence as `GET /v1/presence` and the dashboard show it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentPresence {
    pub agent: String,
    pub state: Option<State>,
    #[serde(with = "crate::clock::ts_opt")]
    pub state_ts: Option<i64>,
    pub attention: Attention,
    /// Push clients connected (on this replica, or marked by another).
    pub push: bool,
    #[serde(with = "crate::clock::ts_opt")]
    pub hook_seen: Option<i64>,
    /// Where `state` comes from: `reported` (its hooks, `POST
    /// /v1/presence`) or `activity` (an agent whose client reports none,
    /// such as an OAuth app: `online` while its calls were seen within
    /// [`ACTIVE_MS`], then `idle`, `offline` if never seen).
    pub state_source: &'static str,
    #[serde(with = "crate::clock::ts_opt")]
    pub last_seen: Option<i64>,
}

impl Core {
    /// `POST /v1/presence`: the caller's hook says what it is doing.
    pub async fn set_state(&self, call: &Call, room: Option<&str>, state: &str) -> Result<Change> {
        let room = self.room(call, room).await?.name;
        let state = State::parse(state)?;
        let now = self.save_switch(call, &room, Switch::State(state)).await?;
        // Only hooks report states: this is a hook seen, too.
        self.presence.hook_seen(&room, &call.agent, now);
        let attention = self.attention(&room, &call.agent).await?;
        let change = Change {
            room,
            agent: call.agent.clone(),
            state: Some(state),
            state_ts: Some(now),
            attention,
        };
        let _ = self.presence.changes.send(change.clone());
        Ok(change)
    }

    /// `set_attention`: the caller's own switch over what pushes to it.
    pub async fn set_attention(
        &self,
        call: &Call,
        room: Option<&str>,
        attention: &str,
    ) -> Result<Change> {
        let room = self.room(call, room).await?.name;
        let attention = Attention::parse(attention)?;
        self.save_switch(call, &room, Switch::Attention(attention))
            .await?;
        // The cache of this room is read again, so this replica's streams
        // see the switch at once.
        lock(&self.presence.attention).remove(&room);
        let status = self.status_of(&room, &call.agent).await?;
        let change = Change {
            room,
            agent: call.agent.clone(),
            state: status
                .as_ref()
                .and_then(|s| s.state.as_deref())
                .and_then(|s| State::parse(s).ok()),
            state_ts: status.and_then(|s| s.state_ts),
            attention,
        };
        let _ = self.presence.changes.send(change.clone());
        Ok(change)
    }

    /// Stores the caller's `switch` in `room` at the current time, which
    /// it returns (the time the change carries).
    async fn save_switch(&self, call: &Call, room: &str, switch: Switch) -> Result<i64> {
        let now = self.clock.now_ms();
        self.store
            .save_switch(room, &call.agent, switch, now)
            .await?;
        Ok(now)
    }

    async fn status_of(&self, room: &str, agent: &str) -> Result<Option<AgentStatus>> {
        Ok(self
            .store
            .agent_statuses(room)
            .await?
            .into_iter()
            .find(|s| s.agent == agent))
    }

    /// `agent`'s attention in `room`, as read at most a few seconds ago.
    pub async fn attention(&self, room: &str, agent: &str) -> Result<Attention> {
        let now = self.clock.now_ms();
        if let Some(a) = self.presence.cached_attention(room, agent, now) {
            return Ok(a);
        }
        let switches: HashMap<String, Attention> = self
            .store
            .agent_statuses(room)
            .await?
            .into_iter()
            .filter_map(|s| {
                let a = Attention::parse(s.attention.as_deref()?).ok()?;
                Some((s.agent, a))
            })
            .collect();
        let a = switches.get(agent).copied().unwrap_or_default();
        lock(&self.presence.attention).insert(room.to_owned(), (now, switches));
        Ok(a)
    }

    /// Each agent's presence in `room`, merged from the store and what
    /// this replica holds in memory.
    pub async fn presence_of(&self, room: &str) -> Result<Vec<AgentPresence>> {
        let now = self.clock.now_ms();
        let mut out = self.known_presence(room, now).await?;
        // Every member appears, also one whose client reports no state (an
        // OAuth app, a client without hooks): its state from its calls.
        for m in self.store.members(room).await? {
            if !out.iter().any(|p| p.agent == m.agent) {
                out.push(self.merge(room, &m.agent, None, now));
            }
            if let Some(p) = out.iter_mut().find(|p| p.agent == m.agent) {
                p.last_seen = p.last_seen.max(m.last_seen);
            }
        }
        for p in &mut out {
            if p.state.is_none() {
                p.state_source = "activity";
                p.state_ts = p.last_seen;
                p.state = Some(match p.last_seen {
                    Some(t) if now - t <= ACTIVE_MS => State::Online,
                    Some(_) => State::Idle,
                    None => State::Offline,
                });
            }
        }
        out.sort_by(|a, b| a.agent.cmp(&b.agent));
        Ok(out)
    }

    /// The agents of `room` the store or this replica holds presence for.
    async fn known_presence(&self, room: &str, now: i64) -> Result<Vec<AgentPresence>> {
        let statuses = self.store.agent_statuses(room).await?;
        let mut out: Vec<AgentPresence> = statuses
            .into_iter()
            .map(|s| {
                let agent = s.agent.clone();
                self.merge(room, &agent, Some(s), now)
            })
            .collect();
        // Agents this replica knows of that the store has no row for yet.
        let pending: Vec<String> = {
            let hooks = lock(&self.presence.hooks);
            let push = lock(&self.presence.push);
            hooks
                .keys()
                .chain(push.keys())
                .filter(|(r, a)| r == room && !out.iter().any(|p| &p.agent == a))
                .map(|(_, a)| a.clone())
                .collect()
        };
        for agent in pending {
            if !out.iter().any(|p| p.agent == agent) {
                out.push(self.merge(room, &agent, None, now));
            }
        }
        out.sort_by(|a, b| a.agent.cmp(&b.agent));
        Ok(out)
    }

    fn merge(&self, room: &str, agent: &str, s: Option<AgentStatus>, now: i64) -> AgentPresence {
        let s = s.unwrap_or_default();
        let hook_seen = s
            .hook_seen_ts
            .max(lock(&self.presence.hooks).get(&key(room, agent)).copied());
        let push = self.presence.push_clients(room, agent) > 0
            || s.push_seen_ts
                .is_some_and(|t| t > 0 && now - t <= PUSH_FRESH_MS);
        AgentPresence {
            agent: agent.to_owned(),
            state: s.state.as_deref().and_then(|st| State::parse(st).ok()),
            state_ts: s.state_ts,
            attention: s
                .attention
                .as_deref()
                .and_then(|a| Attention::parse(a).ok())
                .unwrap_or_default(),
            push,
            hook_seen,
            state_source: "reported",
            last_seen: self.presence.last_seen(room, agent),
        }
    }

    /// `reach` for each of `agents` (mention names, lowercase) in `room`.
    pub async fn reach(&self, room: &str, agents: &[String]) -> Result<Vec<(String, Reach)>> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now_ms();
        let known = self.known_presence(room, now).await?;
        Ok(agents
            .iter()
            .map(|name| {
                let p = known.iter().find(|p| p.agent.to_lowercase() == *name);
                let reach = match p {
                    Some(p) if p.push && p.attention != Attention::Focus => Reach::Push,
                    Some(p) if p.hook_seen.is_some_and(|t| now - t <= HOOK_FRESH_MS) => {
                        Reach::NextTurn
                    }
                    _ => Reach::Offline,
                };
                (name.clone(), reach)
            })
            .collect())
    }
}

/// `reach` as a result shows it: `{agent: "push" | "next_turn" | "offline"}`.
pub fn reach_json(reach: &[(String, Reach)]) -> Value {
    Value::Object(
        reach
            .iter()
            .map(|(a, r)| (a.clone(), json!(r.as_str())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A push client counts while held; the last one going clears the mark.
    #[test]
    fn push_clients_count_while_held() {
        let p = Arc::new(Presence::default());
        let a = p.push_client("lobby", "alice", 1);
        let b = p.push_client("lobby", "alice", 2);
        assert_eq!(p.push_clients("lobby", "alice"), 2);
        drop(a);
        assert_eq!(p.push_clients("lobby", "alice"), 1);
        drop(b);
        assert_eq!(p.push_clients("lobby", "alice"), 0);
        let marks = lock(&p.marks).clone();
        assert_eq!(marks.first().unwrap().push_seen_ts, Some(1));
        assert_eq!(marks.last().unwrap().push_seen_ts, Some(0));
    }
}
