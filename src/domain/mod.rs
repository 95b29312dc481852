//! The rules of chatroom, once, for every front-end (MCP tools, REST, CLI,
//! console): rooms and grants, tokens, chat, the board, files, events and
//! cursors. Front-ends parse input, call a method here, and render.

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
pub mod push;
pub mod rooms;
pub mod store;
pub mod store_webhooks;
pub mod stuck;
pub mod tokens;
pub mod webhooks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::auth::Caller;
use crate::clock::Clock;
use crate::error::{Error, Result};
use model::{Record, Room};
use store::Store;

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
