//! Push: what reaches an agent that sits idle (SPEC §8a), decided once for
//! every surface that pushes — the stream's `actionable` flag, `chatroom
//! channel`, `chatroom watch --monitor` and `chatroom hook --rewake`.
//!
//! - [`actionable`]: why an event concerns an agent enough to wake it, if
//!   it does (the one rule; the stream applies it server-side, where the
//!   agent's lead flag and the event's full record are known).
//! - [`Attention`]: the agent's own switch (`set_attention`), and
//!   [`Mode`]: what a push client asked for; [`pushes`] combines the three.
//! - [`Coalescer`] and [`Guard`]: the pacing every push client shares —
//!   bursts within 2 s go out as one notification, and at most
//!   `CHATROOM_PUSH_BURST` notifications per 5 minutes, then one notice and
//!   a 10-minute pause, so two agents answering each other cannot wake each
//!   other forever. Both are driven by the caller's clock (milliseconds),
//!   so their tests move time by hand.
//! - [`lease_warning_at`]: when a lease the agent holds is "about to end".

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::model::Event;
use crate::error::{Error, Result};

/// Bursts within this many milliseconds coalesce into one notification.
pub const COALESCE_MS: i64 = 2_000;
/// The loop guard counts notifications over this window.
pub const GUARD_WINDOW_MS: i64 = 5 * 60 * 1000;
/// How long pushes pause once the guard trips.
pub const GUARD_PAUSE_MS: i64 = 10 * 60 * 1000;
/// `CHATROOM_PUSH_BURST` when unset: notifications per [`GUARD_WINDOW_MS`].
pub const DEFAULT_BURST: usize = 20;
/// The environment variable that sets the loop guard's burst.
pub const BURST_VAR: &str = "CHATROOM_PUSH_BURST";

named_enum! {
    /// Why an event should reach an agent. The names are what the stream's
    /// `actionable` field and the channel's `reason` meta carry.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Reason {
        /// A message or note that `@mentions` the agent.
        Mention => "mention",
        /// A reply to the agent's message, or a note on a task it holds.
        Reply => "reply",
        /// A task created assigned to the agent.
        Assigned => "assigned",
        /// A task the agent submitted, rejected in review and sent back.
        SentBack => "sent_back",
        /// A task changed by someone else while the agent holds it.
        TaskChanged => "task_changed",
        /// A submitted task waiting for review, for a lead of the room.
        Review => "review",
        /// The agent's claim is gone: its lease lapsed, or the task was
        /// cancelled or taken from it.
        ClaimLost => "claim_lost",
        /// A lease the agent holds is about to end (no event: the push client
        /// sees it coming from the board, [`lease_warning_at`]).
        LeaseEnding => "lease_ending",
    }
}

impl Reason {
    /// The reason in a few words for the agent ("mentions you").
    pub const fn words(self) -> &'static str {
        match self {
            Reason::Mention => "mentions you",
            Reason::Reply => "replies to you",
            Reason::Assigned => "assigned to you",
            Reason::SentBack => "sent back to you",
            Reason::TaskChanged => "changes your task",
            Reason::Review => "waits for your review",
            Reason::ClaimLost => "your claim is gone",
            Reason::LeaseEnding => "your lease is about to end",
        }
    }
}

/// Who an event is judged for: the agent, and whether it is a lead of the
/// room (leads are asked for reviews).
#[derive(Debug, Clone, Copy)]
pub struct Recipient<'a> {
    pub agent: &'a str,
    pub lead: bool,
}

/// Why `e` should reach `to`, or `None`: the actionable set of SPEC §8a.
/// Never for the agent's own events.
///
/// | reason | events |
/// |---|---|
/// | `mention` | `message`, `note_added` whose indexed mentions name the agent |
/// | `reply` | a `message` replying to one of the agent's; a `note_added` on a task it holds or held |
/// | `assigned` | `task_created` with the agent as assignee |
/// | `sent_back` | `task_reviewed` rejecting a task the agent held |
/// | `review` | `task_submitted` into `in_review`, for a lead |
/// | `claim_lost` | a task taken from the agent: lease lapsed, cancelled, assignee changed |
/// | `task_changed` | `task_updated` by someone else on a task the agent holds |
pub fn actionable(e: &Event, to: Recipient<'_>) -> Option<Reason> {
    if e.actor == to.agent {
        return None;
    }
    let d = &e.detail;
    let is = |key: &str| d[key].as_str() == Some(to.agent);
    let mentioned = d["mentions"].as_array().is_some_and(|m| {
        let lower = to.agent.to_lowercase();
        m.iter().any(|n| n.as_str() == Some(lower.as_str()))
    });
    match e.kind.as_str() {
        "message" if mentioned => Some(Reason::Mention),
        "message" if is("reply_to_author") => Some(Reason::Reply),
        "note_added" | "task_stuck" if mentioned => Some(Reason::Mention),
        "note_added" if is("assignee") || is("previous_assignee") => Some(Reason::Reply),
        "task_created" if is("assignee") => Some(Reason::Assigned),
        "task_reviewed" if d["approve"].as_bool() == Some(false) && is("previous_assignee") => {
            Some(Reason::SentBack)
        }
        "task_submitted" if to.lead && d["status"].as_str() == Some("in_review") => {
            Some(Reason::Review)
        }
        "task_lease_expired" if is("previous_assignee") => Some(Reason::ClaimLost),
        "task_cancelled" if is("assignee") || is("previous_assignee") => Some(Reason::ClaimLost),
        k if k.starts_with("task_") && is("previous_assignee") && !is("assignee") => {
            Some(Reason::ClaimLost)
        }
        "task_updated" if is("assignee") => Some(Reason::TaskChanged),
        _ => None,
    }
}

named_enum! {
    /// The agent's own switch over what pushes (`set_attention`); the events
    /// still wait in `whats_new` whatever it says.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Attention {
        /// Everything the push client asked for.
        #[default]
        Open => "open",
        /// Do not disturb: only mentions and assignments push.
        Dnd => "dnd",
        /// Nothing pushes.
        Focus => "focus",
    }
}

impl Attention {
    pub fn parse(s: &str) -> Result<Attention> {
        let s = s.trim();
        Attention::named(s).ok_or_else(|| {
            Error::invalid(format!(
                "attention must be open, dnd or focus, not {:?}",
                crate::domain::names::truncate_for_message(s)
            ))
        })
    }

    /// Whether an event of `reason` (`None`: not actionable) may push.
    pub fn lets(self, reason: Option<Reason>) -> bool {
        match self {
            Attention::Open => true,
            Attention::Dnd => matches!(reason, Some(Reason::Mention | Reason::Assigned)),
            Attention::Focus => false,
        }
    }
}

/// What a push client asked for (`--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Mentions of the agent only.
    Mentions,
    /// The actionable set ([`actionable`]).
    #[default]
    Actionable,
    /// Every event of another agent.
    All,
}

impl Mode {
    pub fn wants(self, reason: Option<Reason>) -> bool {
        match self {
            Mode::Mentions => reason == Some(Reason::Mention),
            Mode::Actionable => reason.is_some(),
            Mode::All => true,
        }
    }
}

/// Whether an event of another agent, actionable for `reason`, pushes to a
/// client in `mode` while the agent's attention is `attention`.
pub fn pushes(mode: Mode, attention: Attention, reason: Option<Reason>) -> bool {
    mode.wants(reason) && attention.lets(reason)
}

/// What the stream's `activity` event says for a push client: the reason,
/// and the agent's attention when it was sent.
pub fn from_activity(data: &Value) -> (Option<Reason>, Attention) {
    let reason = data["actionable"].as_str().and_then(Reason::named);
    let attention = data["attention"]
        .as_str()
        .and_then(|a| Attention::parse(a).ok())
        .unwrap_or_default();
    (reason, attention)
}

/// Holds notifications while one went out less than [`COALESCE_MS`] ago:
/// the first of a quiet spell goes out at once (no added delay), the rest
/// of its burst wait and go out together when the window ends.
#[derive(Debug)]
pub struct Coalescer<T> {
    window_ms: i64,
    pending: Vec<T>,
    last_sent: Option<i64>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Coalescer<T> {
        Coalescer::new(COALESCE_MS)
    }
}

impl<T> Coalescer<T> {
    pub fn new(window_ms: i64) -> Coalescer<T> {
        Coalescer {
            window_ms,
            pending: Vec::new(),
            last_sent: None,
        }
    }

    /// Takes `item` at `now`: the batch to send now, if the window is open.
    pub fn offer(&mut self, item: T, now: i64) -> Option<Vec<T>> {
        self.pending.push(item);
        if self.pending.len() == 1 && self.last_sent.is_none_or(|t| now - t >= self.window_ms) {
            return self.take(now);
        }
        None
    }

    /// When the held batch is due, if one is held.
    pub fn due(&self) -> Option<i64> {
        if self.pending.is_empty() {
            return None;
        }
        Some(self.last_sent.map_or(0, |t| t + self.window_ms))
    }

    /// The held batch, once it is due at `now`.
    pub fn flush(&mut self, now: i64) -> Option<Vec<T>> {
        match self.due() {
            Some(due) if due <= now => self.take(now),
            _ => None,
        }
    }

    fn take(&mut self, now: i64) -> Option<Vec<T>> {
        self.last_sent = Some(now);
        Some(std::mem::take(&mut self.pending))
    }
}

/// What the loop guard says about one more notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Send,
    /// The burst is spent: send the pause notice instead; pushes resume at
    /// `until`.
    PauseNotice {
        until: i64,
    },
    /// Paused: send nothing.
    Paused {
        until: i64,
    },
}

/// The loop guard: at most `burst` notifications per [`GUARD_WINDOW_MS`];
/// the one past it becomes a notice and pushes pause [`GUARD_PAUSE_MS`].
/// Serialisable, so a hook that runs once per turn keeps it in a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Guard {
    burst: usize,
    sent: VecDeque<i64>,
    paused_until: Option<i64>,
}

impl Guard {
    pub fn new(burst: usize) -> Guard {
        Guard {
            burst: burst.max(1),
            sent: VecDeque::new(),
            paused_until: None,
        }
    }

    /// The guard `CHATROOM_PUSH_BURST` asks for; a bad value is an error
    /// naming the variable.
    pub fn from_env() -> std::result::Result<Guard, String> {
        match std::env::var(BURST_VAR)
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            None => Ok(Guard::new(DEFAULT_BURST)),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Guard::new(n)),
                _ => Err(format!(
                    "{BURST_VAR}={v:?} is not a whole number of at least 1 (notifications per 5 minutes; default {DEFAULT_BURST})"
                )),
            },
        }
    }

    /// Decides on one more notification at `now`, and counts it if sent.
    pub fn admit(&mut self, now: i64) -> Admit {
        if let Some(until) = self.paused_until {
            if now < until {
                return Admit::Paused { until };
            }
            self.paused_until = None;
            self.sent.clear();
        }
        while self
            .sent
            .front()
            .is_some_and(|&t| now - t >= GUARD_WINDOW_MS)
        {
            self.sent.pop_front();
        }
        if self.sent.len() < self.burst {
            self.sent.push_back(now);
            return Admit::Send;
        }
        let until = now + GUARD_PAUSE_MS;
        self.paused_until = Some(until);
        Admit::PauseNotice { until }
    }

    /// The pause notice's text.
    pub fn notice(&self) -> String {
        format!(
            "chatroom: more than {} notifications in 5 minutes, so pushes pause for 10 minutes \
             (a loop guard: agents answering each other could otherwise wake each other forever). \
             Nothing is lost: call whats_new to read what arrived.",
            self.burst
        )
    }
}

/// When a push client should warn that a lease ending at `expires_ms`
/// (first seen at `seen_ms`) is about to end: a minute before, or a
/// quarter of the time left when it was seen, whichever is shorter.
pub fn lease_warning_at(expires_ms: i64, seen_ms: i64) -> i64 {
    let left = (expires_ms - seen_ms).max(0);
    expires_ms - (left / 4).min(60_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, actor: &str, detail: Value) -> Event {
        Event {
            id: 1,
            room: "lobby".into(),
            ts: 0,
            kind: kind.into(),
            actor: actor.into(),
            task_id: Some(3),
            message_id: None,
            detail,
        }
    }

    const ALICE: Recipient<'static> = Recipient {
        agent: "Alice",
        lead: false,
    };

    #[test]
    fn the_actionable_set() {
        let cases = [
            (
                "message",
                json!({"mentions": ["alice"]}),
                Some(Reason::Mention),
            ),
            (
                "message",
                json!({"mentions": [], "reply_to_author": "Alice"}),
                Some(Reason::Reply),
            ),
            ("message", json!({"mentions": ["bob"]}), None),
            (
                "note_added",
                json!({"mentions": [], "assignee": "Alice"}),
                Some(Reason::Reply),
            ),
            (
                "task_created",
                json!({"assignee": "Alice"}),
                Some(Reason::Assigned),
            ),
            ("task_created", json!({"assignee": null}), None),
            (
                "task_reviewed",
                json!({"approve": false, "assignee": null, "previous_assignee": "Alice"}),
                Some(Reason::SentBack),
            ),
            (
                "task_reviewed",
                json!({"approve": true, "assignee": "Alice"}),
                None,
            ),
            ("task_submitted", json!({"status": "in_review"}), None),
            (
                "task_lease_expired",
                json!({"assignee": null, "previous_assignee": "Alice"}),
                Some(Reason::ClaimLost),
            ),
            (
                "task_cancelled",
                json!({"assignee": "Alice"}),
                Some(Reason::ClaimLost),
            ),
            (
                "task_updated",
                json!({"assignee": "Alice"}),
                Some(Reason::TaskChanged),
            ),
            ("task_updated", json!({"assignee": "bob"}), None),
            ("file_added", json!({}), None),
        ];
        for (kind, detail, want) in cases {
            let e = event(kind, "bob", detail.clone());
            assert_eq!(actionable(&e, ALICE), want, "{kind} {detail}");
        }
        let lead = Recipient {
            agent: "Alice",
            lead: true,
        };
        let submitted = event("task_submitted", "bob", json!({"status": "in_review"}));
        assert_eq!(actionable(&submitted, lead), Some(Reason::Review));
        let done = event("task_submitted", "bob", json!({"status": "done"}));
        assert_eq!(actionable(&done, lead), None);
        // Never the agent's own.
        let own = event("message", "Alice", json!({"mentions": ["alice"]}));
        assert_eq!(actionable(&own, ALICE), None);
    }

    #[test]
    fn attention_and_modes() {
        let m = Some(Reason::Mention);
        let r = Some(Reason::Review);
        assert!(pushes(Mode::Actionable, Attention::Open, r));
        assert!(!pushes(Mode::Actionable, Attention::Open, None));
        assert!(pushes(Mode::All, Attention::Open, None));
        assert!(!pushes(Mode::Mentions, Attention::Open, r));
        assert!(pushes(Mode::Actionable, Attention::Dnd, m));
        assert!(pushes(
            Mode::Actionable,
            Attention::Dnd,
            Some(Reason::Assigned)
        ));
        assert!(!pushes(Mode::Actionable, Attention::Dnd, r));
        assert!(!pushes(Mode::All, Attention::Dnd, None));
        assert!(!pushes(Mode::Actionable, Attention::Focus, m));
        assert!(Attention::parse("loud").is_err());
    }

    /// The first of a quiet spell goes at once; its burst waits for the
    /// window's end and goes as one; after a quiet window the next goes at once.
    #[test]
    fn bursts_coalesce() {
        let mut c = Coalescer::new(2_000);
        assert_eq!(c.offer(1, 0), Some(vec![1]));
        assert_eq!(c.offer(2, 100), None);
        assert_eq!(c.offer(3, 1_900), None);
        assert_eq!(c.due(), Some(2_000));
        assert_eq!(c.flush(1_999), None);
        assert_eq!(c.flush(2_000), Some(vec![2, 3]));
        assert_eq!(c.due(), None);
        assert_eq!(c.offer(4, 3_000), None, "within 2 s of the last send");
        assert_eq!(c.flush(4_000), Some(vec![4]));
        assert_eq!(c.offer(5, 9_000), Some(vec![5]));
    }

    /// Twenty go out in five minutes; the twenty-first is the notice; then
    /// nothing for ten minutes; then a fresh window.
    #[test]
    fn the_loop_guard() {
        let mut g = Guard::new(20);
        for i in 0..20 {
            assert_eq!(g.admit(i * 1_000), Admit::Send);
        }
        let until = 20_000 + GUARD_PAUSE_MS;
        assert_eq!(g.admit(20_000), Admit::PauseNotice { until });
        assert_eq!(g.admit(until - 1), Admit::Paused { until });
        for i in 0..20 {
            assert_eq!(g.admit(until + i), Admit::Send);
        }
        // Spread out, the window never fills.
        let mut g = Guard::new(3);
        for i in 0..10 {
            assert_eq!(g.admit(i * GUARD_WINDOW_MS / 2), Admit::Send);
        }
        assert!(g.notice().contains("whats_new"));
        let back: Guard = serde_json::from_value(serde_json::to_value(&g).unwrap()).unwrap();
        assert_eq!(back.sent, g.sent);
    }

    #[test]
    fn lease_warnings() {
        // An hour's lease: a minute before.
        assert_eq!(lease_warning_at(3_600_000, 0), 3_540_000);
        // Thirty seconds: a quarter before.
        assert_eq!(lease_warning_at(30_000, 0), 22_500);
        // Already past.
        assert_eq!(lease_warning_at(1_000, 5_000), 1_000);
    }
}
