//! The one place every call passes on its way to the domain, whatever the
//! surface (MCP tools, `/v1`, SSE, the console): the per-token rate limit,
//! then the call, then the audit row of a call whose write did not carry
//! its own in its transaction.

use super::Caller;
use crate::clock::now_ms;
use crate::domain::model::AuditRow;
use crate::domain::{Call, names};
use crate::error::Error;
use crate::state::AppState;

/// Which budget a call draws on, and how a refusal names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meter {
    /// An MCP tool call.
    Tools,
    /// A `/v1` request.
    Requests,
    /// Not rate limited (the console: a whole-server admin).
    Unmetered,
}

impl Meter {
    /// Takes one call from the token's budget; the refusal if it is spent.
    fn check(self, state: &AppState, token_id: i64) -> Result<(), Error> {
        let noun = match self {
            Meter::Tools => "tool calls",
            Meter::Requests => "calls",
            Meter::Unmetered => return Ok(()),
        };
        state
            .rate
            .check(token_id)
            .map_err(|retry| Error::RateLimited {
                message: format!(
                    "rate limit of {} {noun} a minute reached for this token; retry in {retry} s",
                    state.config.rate_limit_per_minute
                ),
                retry_after_s: retry,
            })
    }
}

/// The room argument of a call, as far as its audit row cares.
#[derive(Debug, Clone, Copy)]
pub enum RoomArg<'a> {
    /// No room named: the token's default room.
    Default,
    /// The room the caller sent, as it sent it.
    Named(&'a str),
    /// A room argument that is not even a string.
    Malformed,
}

impl RoomArg<'_> {
    /// A room given as an optional string (`?room=`, a path segment).
    pub fn of(room: Option<&str>) -> RoomArg<'_> {
        match room {
            Some(r) if !r.trim().is_empty() => RoomArg::Named(r),
            _ => RoomArg::Default,
        }
    }

    /// The room an audit row records: the default room, or the named one
    /// if it is a valid name the token may act in; nothing for a refused or
    /// malformed one, which is never copied (an audit row stays small
    /// whatever a caller sends).
    pub fn recorded(self, caller: &Caller) -> Option<String> {
        match self {
            RoomArg::Default => Some(caller.room.clone()),
            RoomArg::Named(r) => {
                let r = r.trim();
                (names::check_room(r).is_ok() && caller.granted(r)).then(|| r.to_owned())
            }
            RoomArg::Malformed => None,
        }
    }
}

/// What a surface answers a call with, as far as admission cares.
pub trait Answer {
    /// The answer to a call refused before it ran.
    fn refused(e: Error) -> Self;
    /// The audit outcome: `ok` or the error code; `None` writes no row (a
    /// call the protocol layer refused before it was a call).
    fn outcome(&self) -> Option<String>;
}

impl<T> Answer for Result<T, Error> {
    fn refused(e: Error) -> Self {
        Err(e)
    }

    fn outcome(&self) -> Option<String> {
        Some(match self {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.code().to_owned(),
        })
    }
}

/// Runs `work` for `call` if `meter` allows it, then queues the audit row
/// (in `room`, what [`RoomArg::recorded`] gave, about `task_id`) unless the
/// call's own write carried one. A refused call is recorded the same way.
pub async fn admit<A: Answer>(
    state: &AppState,
    call: &Call,
    meter: Meter,
    room: Option<String>,
    task_id: Option<i64>,
    work: impl AsyncFnOnce() -> A,
) -> A {
    let answer = match meter.check(state, call.token_id) {
        Err(e) => A::refused(e),
        Ok(()) => work().await,
    };
    if !call.audited()
        && let Some(outcome) = answer.outcome()
    {
        state.audit(AuditRow {
            ts: now_ms(),
            agent: call.agent.clone(),
            room,
            tool: call.tool.to_owned(),
            task_id,
            outcome,
        });
    }
    answer
}
