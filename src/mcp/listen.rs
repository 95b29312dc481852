//! `subscriptions/listen` (MCP 2026-07-28): a client opts in to
//! `notifications/resources/updated` for the board of the rooms it names,
//! `chatroom://room/<name>/board`, and to `toolsListChanged`, and stops
//! polling. rmcp sends the acknowledgment (with the subscription id) first;
//! from then on each change to a subscribed board (an event about a task in
//! that room, from this replica or another through the bus) sends one
//! update, at most one per [`COALESCE`]. Nothing the filter did not ask
//! for is sent. The stream ends with its client, at shutdown, and when its
//! token is revoked.
//!
//! The tool list changes only with the server or the token's profile, and
//! neither changes under an open stream, so `toolsListChanged` is accepted
//! and never fires.

use std::collections::HashSet;
use std::time::Duration;

use rmcp::ErrorData;
use rmcp::model::{
    ResourceUpdatedNotification, ResourceUpdatedNotificationParam, ServerNotification,
    SubscriptionFilter,
};
use rmcp::service::SubscriptionContext;
use tokio::sync::broadcast::error::RecvError;

use crate::auth::Caller;
use crate::domain::names;
use crate::state::AppState;

/// Updates of one board closer together than this become one.
const COALESCE: Duration = Duration::from_millis(200);

const PREFIX: &str = "chatroom://room/";
const SUFFIX: &str = "/board";

/// The board resource of `room`.
pub fn board_uri(room: &str) -> String {
    format!("{PREFIX}{room}{SUFFIX}")
}

/// The room a board URI names, if it is one (the name checked as a room
/// name, so no path or empty name passes).
pub fn board_room(uri: &str) -> Option<&str> {
    let room = uri.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    names::check_room(room).ok()?;
    Some(room)
}

/// What the server accepts of a requested filter: the tool list's changes
/// and any well-formed board URI (whether the caller may read that room is
/// decided per stream: a room it may not read never sends anything, and
/// the answer is the same whether the room exists or not).
pub fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed;
    accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|u| board_room(u).is_some())
            .cloned()
            .collect()
    });
    accepted
}

/// Runs one listen stream for `caller` until it ends.
pub async fn run(
    state: &AppState,
    caller: Caller,
    context: SubscriptionContext,
) -> Result<(), ErrorData> {
    let rooms: HashSet<String> = context
        .accepted()
        .resource_subscriptions
        .iter()
        .flatten()
        .filter_map(|u| board_room(u))
        .filter(|r| caller.granted(r))
        .map(str::to_owned)
        .collect();
    // Counts against the token's streams; ends when it is revoked.
    let slot = state
        .streams
        .open(&caller)
        .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
    let mut events = state.core.bus.subscribe();
    let shutdown = state.core.shutdown.clone();
    let sink = context.sink().clone();
    let mut dirty: HashSet<String> = HashSet::new();
    // When the first change since the last flush arrived, plus COALESCE.
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let at = due.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            _ = context.cancelled() => break,
            _ = shutdown.cancelled() => break,
            _ = slot.revoked() => break,
            () = tokio::time::sleep_until(at), if due.is_some() => {
                due = None;
                for room in dirty.drain() {
                    let update = ResourceUpdatedNotification::new(
                        ResourceUpdatedNotificationParam::new(board_uri(&room)),
                    );
                    if sink
                        .send(ServerNotification::ResourceUpdatedNotification(update))
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                }
            }
            got = events.recv() => match got {
                Ok(e) => {
                    if e.task_id.is_some() && rooms.contains(&e.room) {
                        dirty.insert(e.room.clone());
                        due.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE);
                    }
                }
                // Fell behind: every subscribed board may have changed.
                Err(RecvError::Lagged(_)) => {
                    dirty.extend(rooms.iter().cloned());
                    due.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE);
                }
                Err(RecvError::Closed) => break,
            },
        }
    }
    Ok(())
}
