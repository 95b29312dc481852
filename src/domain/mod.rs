//! The rules of chatroom, once, for every front-end (MCP tools, REST, CLI,
//! console): rooms and grants, tokens, OAuth sign-in, chat, the board, files,
//! events and cursors. Front-ends parse input, call a method of the [`Core`]
//! with an [`Actor`] (an agent's [`Call`], or the [`Owner`] through the CLI
//! or the console), and render. The core decides at its injected clock and
//! sits in front of every store call; every owner change is written to the
//! admin log here, whichever front end made it.

/// Declares an enum whose every variant has one fixed name, the name it
/// is stored, shown and parsed under, written once beside it (`Variant =>
/// "name"`, as `as_str` maps it). With the enum come `ALL` (every variant,
/// in order), `as_str` (the name), `named` (the variant of a name, exactly)
/// and `Display` (the name). Attributes pass through, so serde and utoipa
/// derives see the enum as written; the names they derive must be these
/// (`tests::enum_names_match_serde_and_round_trip`).
macro_rules! named_enum {
    (
        $(#[$attr:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$variant_attr:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$attr])*
        $vis enum $name {
            $( $(#[$variant_attr])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// The name it is stored and shown under.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The variant named exactly `s`.
            pub fn named(s: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod board;
pub mod bus;
pub mod chat;
pub mod events;
pub mod files;
pub mod limits;
pub mod model;
pub mod names;
pub mod oauth;
pub mod presence;
pub mod profile;
pub mod push;
pub mod rooms;
pub mod store;
pub mod stuck;
pub mod tokens;
pub mod webhooks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::error::{Error, Result};
pub use model::Caller;
use model::{ADMIN_ACTOR, AdminLogEntry, Record, Room};
use store::prelude::*;

pub use bus::EventBus;

/// Settings the rules depend on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The longest `wait_for_change` parks ([`Settings::wait_timeout`]).
    pub max_wait: Duration,
    pub max_file_bytes: usize,
}

impl Settings {
    /// How long a `wait_for_change` asking for `requested` seconds parks:
    /// 45 s when not given (or not a number), never below 0 nor above
    /// `max_wait`.
    pub fn wait_timeout(&self, requested: Option<f64>) -> Duration {
        let requested = requested.filter(|t| !t.is_nan()).unwrap_or(45.0);
        Duration::from_secs_f64(requested.clamp(0.0, self.max_wait.as_secs_f64()))
    }
}

/// The domain core: storage, the event bus and the settings, shared by every
/// front-end. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    pub store: Arc<dyn Store>,
    pub bus: EventBus,
    pub settings: Settings,
    pub presence: Arc<presence::Presence>,
    /// Cancelled when the server shuts down; long-polls end on it.
    pub shutdown: CancellationToken,
    /// The time every decision is made at (the system's, or a test's).
    pub clock: Clock,
    /// The highest ids the database held when this server started
    /// ([`Core::note_start`]); `None` before.
    pub ids_at_start: Option<events::IdsAtStart>,
}

impl Core {
    pub fn new(store: Arc<dyn Store>, settings: Settings, shutdown: CancellationToken) -> Core {
        Core {
            store,
            bus: EventBus::new(),
            settings,
            presence: Arc::new(presence::Presence::default()),
            shutdown,
            clock: Clock::system(),
            ids_at_start: None,
        }
    }

    /// A core for the owner's command line: the rules over `store`, with no
    /// server around it (nothing waits, nothing streams).
    pub fn offline(store: Arc<dyn Store>) -> Core {
        let settings = Settings {
            max_wait: Duration::ZERO,
            max_file_bytes: 0,
        };
        Core::new(store, settings, CancellationToken::new())
    }

    /// The same core deciding at `clock`'s time (tests move it by hand).
    pub fn with_clock(mut self, clock: Clock) -> Core {
        self.clock = clock;
        self
    }

    /// The room a call acts on: the named one if the token is granted it,
    /// else the token's default room. A room the token is not granted is
    /// `forbidden` without saying whether it exists; a granted room that does
    /// not exist (any more) is `not_found`.
    pub async fn room(&self, caller: &Caller, requested: Option<&str>) -> Result<Room> {
        let name = match requested.map(str::trim).filter(|r| !r.is_empty()) {
            Some(r) => {
                names::check_room(r)?;
                r
            }
            None => caller.room.as_str(),
        };
        if !caller.granted(name) {
            return Err(Error::forbidden(format!(
                "this token does not grant room {name:?}; use one of your rooms ({}) or ask an admin for access",
                caller.rooms().join(", ")
            )));
        }
        let room =
            self.store.get_room(name).await?.ok_or_else(|| {
                Error::not_found(format!("room {name:?} does not exist (any more)"))
            })?;
        self.presence.touch(name, &caller.agent);
        self.presence.used(caller.token_id);
        Ok(room)
    }

    /// Marks `caller` as seen in its default room. Every authenticated call
    /// is a sign of life, also one that names no room (`whoami`, the rooms
    /// list); calls that act on a room are marked by [`Core::room`].
    pub fn seen(&self, caller: &Caller) {
        self.presence.touch(&caller.room, &caller.agent);
        self.presence.used(caller.token_id);
    }

    /// The name of the room a write by `caller` goes to ([`Core::room`]),
    /// refused after it for a read-only token ([`Core::writable`]).
    pub async fn writable_room(&self, caller: &Caller, requested: Option<&str>) -> Result<String> {
        let room = self.room(caller, requested).await?.name;
        self.writable(caller)?;
        Ok(room)
    }

    /// Refuses a write by a read-only (observer) token.
    pub fn writable(&self, caller: &Caller) -> Result<()> {
        if caller.readonly {
            return Err(Error::ReadOnly(
                "this token is read-only (an observer): it can read the room but not change it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Refuses a room-admin action by a token without the `admin` flag.
    pub fn room_admin(&self, caller: &Caller) -> Result<()> {
        self.writable(caller)?;
        if !caller.admin {
            return Err(Error::forbidden(
                "this token is not an admin: only a room admin token may do this; ask the server owner",
            ));
        }
        Ok(())
    }
}

/// One call into the domain: who makes it and through which tool (or route).
/// A write records its audit row in its own transaction and marks the call
/// audited; the front-end writes the row for every other call.
#[derive(Debug)]
pub struct Call {
    pub caller: Caller,
    pub tool: &'static str,
    audited: AtomicBool,
}

impl Call {
    pub fn new(caller: Caller, tool: &'static str) -> Call {
        Call {
            caller,
            tool,
            audited: AtomicBool::new(false),
        }
    }

    /// The record of a write this call makes at `now`: by its agent,
    /// carrying its audit row.
    pub fn record(&self, now: i64) -> Record {
        Record::new(self.caller.agent.as_str(), Some(self.tool), now)
    }

    /// Notes that a committed write carried this call's audit row.
    pub fn mark_audited(&self) {
        self.audited.store(true, Ordering::Relaxed);
    }

    pub fn audited(&self) -> bool {
        self.audited.load(Ordering::Relaxed)
    }
}

impl std::ops::Deref for Call {
    type Target = Caller;
    fn deref(&self) -> &Caller {
        &self.caller
    }
}

/// The server's owner making a change through the command line or the
/// console. Every change an owner makes is written to the admin log, by the
/// domain, whichever front end it came from.
#[derive(Debug)]
pub struct Owner<'a> {
    /// The console's call (its whole-server admin token, which also gets
    /// the call's audit row); `None` from the command line, which has no
    /// token behind it.
    pub call: Option<&'a Call>,
    /// Where the change came from: the console client's address, or
    /// `command line`.
    pub address: String,
}

impl Owner<'static> {
    /// The owner at the command line (`chatroom admin …`).
    pub fn cli() -> Owner<'static> {
        Owner {
            call: None,
            address: "command line".into(),
        }
    }
}

impl<'a> Owner<'a> {
    /// The owner in the console, signed in with `call`'s token, from `address`.
    pub fn console(call: &'a Call, address: impl std::fmt::Display) -> Owner<'a> {
        Owner {
            call: Some(call),
            address: address.to_string(),
        }
    }

    /// The name the admin log and the events give: the console's agent, or
    /// `(admin)` at the command line.
    pub fn name(&self) -> &str {
        self.call.map_or(ADMIN_ACTOR, |c| c.agent.as_str())
    }
}

/// Who asks the domain for a change: an agent through its token, or the
/// server's owner (through the command line or the console).
#[derive(Debug, Clone, Copy)]
pub enum Actor<'a> {
    Agent(&'a Call),
    Owner(&'a Owner<'a>),
}

impl<'a> From<&'a Call> for Actor<'a> {
    fn from(call: &'a Call) -> Actor<'a> {
        Actor::Agent(call)
    }
}

impl<'a> From<&'a Arc<Call>> for Actor<'a> {
    fn from(call: &'a Arc<Call>) -> Actor<'a> {
        Actor::Agent(call)
    }
}

impl<'a> From<&'a Owner<'a>> for Actor<'a> {
    fn from(owner: &'a Owner<'a>) -> Actor<'a> {
        Actor::Owner(owner)
    }
}

impl Actor<'_> {
    /// The token's call behind this change, if any (the command line has none).
    pub fn call(&self) -> Option<&Call> {
        match self {
            Actor::Agent(call) => Some(call),
            Actor::Owner(owner) => owner.call,
        }
    }

    /// The record of a write this actor makes at `now`: by its agent with
    /// the call's audit row, or by `(admin)` without one.
    pub fn record(&self, now: i64) -> Record {
        match self.call() {
            Some(call) => call.record(now),
            None => rooms::by_admin(now),
        }
    }

    /// Notes that a committed write carried the call's audit row.
    pub fn mark_audited(&self) {
        if let Some(call) = self.call() {
            call.mark_audited();
        }
    }
}

impl Core {
    /// The room `actor` acts on: through its token's grants ([`Core::room`]),
    /// or, from the command line, by name.
    async fn acting_room(&self, actor: Actor<'_>, room: Option<&str>) -> Result<Room> {
        if let Some(call) = actor.call() {
            return self.room(call, room).await;
        }
        let name = room.unwrap_or_default();
        names::check_room(name)?;
        self.store
            .get_room(name)
            .await?
            .ok_or_else(|| Error::not_found(format!("room {name:?} does not exist")))
    }

    /// Writes the admin log entry (and a log line) of a change `actor` made,
    /// when the actor is the owner; an agent's changes have their audit rows.
    /// A failed write is logged, not answered: the change is done.
    pub async fn log_owner(&self, actor: Actor<'_>, action: &str, target: String, flagged: bool) {
        let Actor::Owner(owner) = actor else {
            return;
        };
        let entry = AdminLogEntry {
            id: 0,
            ts: self.clock.now_ms(),
            actor: owner.name().to_owned(),
            address: owner.address.clone(),
            action: action.to_owned(),
            target,
            flagged,
        };
        if flagged {
            tracing::warn!(actor = %entry.actor, address = %entry.address, action, target = %entry.target, "owner change: a whole-server admin grant");
        } else {
            tracing::info!(actor = %entry.actor, address = %entry.address, action, target = %entry.target, "owner change");
        }
        if let Err(e) = self.store.insert_admin_log(&entry).await {
            tracing::error!(action, "the admin log entry could not be written");
            e.log_if_internal();
        }
    }
}

/// What the domain's test modules share.
#[cfg(test)]
mod testing {
    /// Holds `check` to accept every one of `good` and refuse every one
    /// of `bad`: a rule's cases as two tables.
    pub fn accepts_only<T, E>(check: impl Fn(&str) -> Result<T, E>, good: &[&str], bad: &[&str]) {
        for g in good {
            assert!(check(g).is_ok(), "{g:?} should be accepted");
        }
        for b in bad {
            assert!(check(b).is_err(), "{b:?} should be refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name of a [`named_enum!`] is the name serde writes, and names
    /// its variant back.
    #[test]
    fn enum_names_match_serde_and_round_trip() {
        macro_rules! check {
            ($($name:ty),+) => {$(
                for v in <$name>::ALL {
                    assert_eq!(serde_json::to_value(v).unwrap(), v.as_str(), "{v}");
                    assert_eq!(<$name>::named(v.as_str()), Some(v), "{v}");
                }
            )+};
        }
        check!(
            model::EventKind,
            model::Status,
            board::Can,
            presence::State,
            presence::Reach,
            push::Reason,
            push::Attention,
            profile::Profile
        );
    }

    /// The enums a person or a hook types take every name with spaces
    /// around it, and refuse one they do not have.
    #[test]
    fn typed_names_parse_trimmed_and_unknown_ones_are_refused() {
        macro_rules! check {
            ($($name:ty),+) => {$(
                for v in <$name>::ALL {
                    assert_eq!(<$name>::parse(&format!(" {v} ")).unwrap(), v, "{v}");
                }
                assert!(<$name>::parse("nonsense").is_err());
            )+};
        }
        check!(presence::State, push::Attention, profile::Profile);
    }
}
