//! `GET /v1/stream`: a room's live feed as Server-Sent Events, for the
//! dashboard and `chatroom watch`.
//!
//! Events: `ready` first (who and where, the latest ids), then `activity`
//! (one per room event, with `by_you`/`mentions_you`), `chat` (one per
//! message), `board` (open tasks, and the latest closed ones, at connect and
//! after a board change) and `files` (the file list at connect and after a
//! file change). `after=all|now|N` picks where the `activity` replay starts,
//! `after_msg=N` where the `chat` replay does; `tail=N` (with `after=all`)
//! replays only the last N of each. `client=channel|monitor|rewake` marks
//! a push client (SPEC §8a): it is counted for `reach` while connected, and
//! its `activity` also carries `actionable` (why the event concerns the
//! agent, `domain::push`, or null) and the agent's `attention`. Other
//! streams (the dashboard's) also get `presence` when an agent's state or
//! attention changes on this replica: `{room, agent, state, ts,
//! attention}`, as MQTT publishes it. Replays come from the database, then the
//! stream follows the in-process event bus (a lagging stream re-reads from
//! the database). A keep-alive comment goes out every 15 s. Streams never
//! move cursors, and all of them end when the server shuts down. A stream
//! counts against its token's `CHATROOM_MAX_STREAMS_PER_TOKEN` (`429` past
//! it) and ends with an `unauthorized` `error` event within a second of the
//! token's revocation ([`auth::streams`](crate::auth::streams)). The
//! `board` snapshot is read and serialized once per room and change
//! ([`Boards`]); each stream adds its viewer's `can` to every task.
//!
//! A position beyond the room's history (`after=N` past its latest event,
//! or `after_msg=M` past its latest message, when the database was restored
//! from a backup since the client read there) gets a `reset` event after
//! `ready` — `{reason: "cursor_ahead", requested_after, latest_event_id,
//! resumed_after}` and the `_msg` / `latest_message_id` counterparts — and
//! the stream carries on from `resumed_after`
//! ([`Core::cursor_ahead`](crate::domain::Core::cursor_ahead)).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::streams::{Slot, expires_at};
use crate::domain::events::Ids;
use crate::domain::model::Status;
use crate::domain::model::{Event, EventFilter, TaskQuery};
use crate::domain::push;
use crate::domain::{Call, Core};
use crate::error::{Error, Result};
use crate::present::{self, UNTRUSTED_WARNING, Viewer};
use crate::state::AppState;

use super::extract::{Api, Params};

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events read from the database per page while replaying.
const PAGE: i64 = 500;
/// The most `tail=` may ask for.
const MAX_TAIL: i64 = 1000;
/// How many closed tasks a `board` event carries besides the open ones.
const CLOSED_SHOWN: i64 = 30;

/// Each room's `board` snapshot, built once per change and shared by every
/// stream of the room: with many streams open, a board change costs one
/// read of the board and one serialization, not one per stream.
#[derive(Default)]
pub struct Boards {
    rooms: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Snapshot>>>>>,
}

/// A room's board as read for the `board` event (serialized once; each
/// viewer's copy adds its `can`), and the newest event of the room it shows.
struct Snapshot {
    as_of: i64,
    board: Arc<BoardTasks>,
}

/// The open tasks and the latest closed ones.
struct BoardTasks {
    open: present::SharedTasks,
    closed: present::SharedTasks,
}

impl Boards {
    /// The room's slot; streams of one room build under its lock, so one
    /// builds and the others take what it built.
    fn slot(&self, room: &str) -> Arc<tokio::sync::Mutex<Option<Snapshot>>> {
        let mut rooms = self.rooms.lock().unwrap_or_else(PoisonError::into_inner);
        // Rooms no stream holds any more are dropped on the way.
        if rooms.len() > 64 {
            rooms.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        rooms.entry(room.to_owned()).or_default().clone()
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamParams {
    /// Where the `activity` replay starts: `all`, `now` (the default) or
    /// an event id.
    after: Option<String>,
    /// Where the `chat` replay starts: a message id.
    after_msg: Option<i64>,
    /// With `after=all`: replay only the last N of each (at most 1000).
    tail: Option<i64>,
    /// A push client says what it is (`channel`, `monitor`, `rewake`): it
    /// is counted for `reach`, and its `activity` carries `actionable` and
    /// `attention` (`domain::push`).
    client: Option<String>,
}

/// The push clients a stream may say it is.
const PUSH_CLIENTS: [&str; 3] = ["channel", "monitor", "rewake"];

/// Where the `activity` replay starts.
#[derive(Debug, Clone, Copy)]
enum After {
    All,
    Now,
    Id(i64),
}

fn parse_after(v: Option<&str>) -> Result<After> {
    match v.map(str::trim) {
        None | Some("") | Some("now") => Ok(After::Now),
        Some("all") => Ok(After::All),
        Some(n) => n.parse::<i64>().map(|n| After::Id(n.max(0))).map_err(|_| {
            Error::invalid(format!(
                "after must be all, now or an event id, not {:?}",
                crate::domain::names::truncate_for_message(n)
            ))
        }),
    }
}

/// The rooms' shared [`Boards`], an extension layered on the `/v1` routes
/// for the stream (they are the stream's alone, not the whole server's).
pub fn boards() -> axum::Extension<Arc<Boards>> {
    axum::Extension(Arc::new(Boards::default()))
}

/// `GET /v1/stream`: the room's live feed as Server-Sent Events.
///
/// `ready` first (who and where, the latest ids), then `activity` (one per
/// room event, with `by_you` and `mentions_you`), `chat` (one per
/// message), `board` (open tasks and the latest closed ones, each with
/// `can`) and `files`; `reset` after `ready` when `after`/`after_msg` lie
/// beyond the room's history; `error` (`unauthorized`) when the token is
/// revoked. A comment every 15 s keeps it open; it never moves a cursor.
#[utoipa::path(
    get,
    path = "/v1/stream",
    tag = "stream",
    params(super::openapi::RoomQuery, StreamParams),
    responses((status = 200, description = "A `text/event-stream` of the events named above, each `data:` a JSON object", content_type = "text/event-stream", body = String)),
)]
pub async fn stream(
    State(s): State<AppState>,
    axum::Extension(boards): axum::Extension<Arc<Boards>>,
    api: Api,
    Params(p): Params<StreamParams>,
) -> Result<Response> {
    // A place among the token's streams (429 past the cap), which also
    // ends the stream when the token is revoked.
    let slot = s.streams.open(&api.caller)?;
    let after = parse_after(p.after.as_deref())?;
    let push_client = match p.client.as_deref().map(str::trim) {
        None | Some("") => false,
        Some(c) if PUSH_CLIENTS.contains(&c) => true,
        Some(c) => {
            return Err(Error::invalid(format!(
                "client must be channel, monitor or rewake, not {:?}",
                crate::domain::names::truncate_for_message(c)
            )));
        }
    };
    let tail = p.tail.map(|t| t.clamp(1, MAX_TAIL));
    // Subscribe before anything is read, so an event landing in between is
    // seen at least once (the replay floor drops doubles).
    let bus = s.core.bus.subscribe();
    let room = api
        .run(&s, "v1:stream", None, async |call| {
            s.core.room(call, api.room()).await
        })
        .await?
        .name;
    let (tx, rx) = mpsc::channel(256);
    let push = push_client.then(|| {
        s.core
            .presence
            .push_client(&room, &api.caller.agent, s.core.clock.now_ms())
    });
    let changes = push.is_none().then(|| s.core.presence.subscribe());
    let feed = Feed {
        changes,
        push,
        core: s.core.clone(),
        boards,
        call: Call::new(api.caller.clone(), "v1:stream"),
        slot,
        room,
        bus,
        tx,
        floor: 0,
        delivered: 0,
        chat_floor: None,
        board_dirty: false,
        files_dirty: false,
    };
    tokio::spawn(feed.run(after, p.after_msg, tail));
    let events = ReceiverStream::new(rx)
        .map(Ok::<_, Infallible>)
        .take_until(s.core.shutdown.clone().cancelled_owned());
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response();
    // Tell buffering proxies (nginx) to pass events through at once.
    response
        .headers_mut()
        .insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    Ok(response)
}

/// The next presence change, if the stream follows them (a lagging stream
/// skips what it missed: the dashboard re-reads presence now and then).
async fn next_change(
    changes: &mut Option<broadcast::Receiver<crate::domain::presence::Change>>,
) -> Option<crate::domain::presence::Change> {
    let Some(rx) = changes else {
        return std::future::pending().await;
    };
    match rx.recv().await {
        Ok(c) => Some(c),
        Err(RecvError::Lagged(_)) => None,
        Err(RecvError::Closed) => {
            *changes = None;
            None
        }
    }
}

/// Why a feed stops early.
enum Stop {
    /// The client went away.
    Gone,
    /// A failure to report to the client before the stream ends.
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Fail(e)
    }
}

type Step<T = ()> = std::result::Result<T, Stop>;

/// One stream's producer: replays, then follows the bus.
struct Feed {
    /// The room's presence changes, for streams that are not push clients.
    changes: Option<broadcast::Receiver<crate::domain::presence::Change>>,
    /// Held while a push client follows the room (counted for `reach`).
    push: Option<crate::domain::presence::PushClient>,
    core: Core,
    boards: Arc<Boards>,
    call: Call,
    /// The stream's place among its token's; signals a revocation.
    slot: Slot,
    room: String,
    bus: broadcast::Receiver<std::sync::Arc<Event>>,
    tx: mpsc::Sender<SseEvent>,
    /// Events up to this id came from a database replay; the bus may bring
    /// them again and they are dropped there.
    floor: i64,
    /// The highest event id sent, where a lagging stream re-reads from.
    delivered: i64,
    /// Message events up to this id add no `chat` (it went out from the
    /// messages table already); `None` while no event may add one.
    chat_floor: Option<i64>,
    board_dirty: bool,
    files_dirty: bool,
}

impl Feed {
    async fn run(mut self, after: After, after_msg: Option<i64>, tail: Option<i64>) {
        let shutdown = self.core.shutdown.clone();
        let revoked = self.slot.revoked_token();
        // An OAuth access token's stream ends when the token expires.
        let expiry = match expires_at(self.core.store.as_ref(), &self.call.caller).await {
            Ok(at) => at,
            Err(e) => {
                e.log_if_internal();
                return;
            }
        };
        let expired = async move {
            match expiry {
                Some(at) => {
                    let left = at.saturating_sub(crate::clock::now_ms()).max(0) as u64;
                    tokio::time::sleep(Duration::from_millis(left)).await
                }
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => return,
            // The revocation watcher noticed the token is revoked.
            _ = revoked.cancelled() => Err(Stop::Fail(Slot::revoked_error())),
            _ = expired => Err(Stop::Fail(Slot::expired_error())),
            outcome = self.serve(after, after_msg, tail) => outcome,
        };
        if let Err(Stop::Fail(e)) = outcome {
            // Tell the client why the stream ends (e.g. the room was deleted).
            e.log_if_internal();
            let _ = self
                .tx
                .send(
                    SseEvent::default()
                        .event("error")
                        .data(e.body().to_string()),
                )
                .await;
        }
    }

    async fn serve(&mut self, after: After, after_msg: Option<i64>, tail: Option<i64>) -> Step {
        let latest_event = self.core.store.latest_event_id(&self.room).await?;
        let latest_msg = self.core.store.latest_message_id(&self.room).await?;
        self.send(
            "ready",
            None,
            json!({
                "room": self.room,
                "you_are": self.call.agent,
                "latest_event_id": latest_event,
                "latest_message_id": latest_msg,
                "untrusted_content_warning": UNTRUSTED_WARNING,
            }),
        )
        .await?;
        // Where each replay starts. With a message start, chat is replayed
        // from the messages table; without, it follows the replayed events.
        let (mut since, mut chat_since) = match (after, tail) {
            (After::Now, _) => (latest_event, Some(after_msg.unwrap_or(latest_msg))),
            (After::All, Some(n)) => {
                let since = self.tail_start(Kind::Events, latest_event, n).await?;
                let chat = match after_msg {
                    Some(m) => m,
                    None => self.tail_start(Kind::Messages, latest_msg, n).await?,
                };
                (since, Some(chat))
            }
            (After::All, None) => (0, after_msg),
            (After::Id(n), _) => (n, after_msg),
        };
        // A position beyond the room's history (the database was restored
        // from a backup since the client read it) resumes from what exists.
        let mut reset = serde_json::Map::new();
        if let After::Id(n) = after
            && let Some(r) = self
                .core
                .cursor_ahead(&self.room, Ids::Events, n, Some(latest_event))
                .await?
        {
            since = r.resumed_after;
            reset.insert("requested_after".into(), r.requested_after.into());
            reset.insert("latest_event_id".into(), r.latest.into());
            reset.insert("resumed_after".into(), r.resumed_after.into());
        }
        if let Some(m) = after_msg
            && let Some(r) = self
                .core
                .cursor_ahead(&self.room, Ids::Messages, m, Some(latest_msg))
                .await?
        {
            chat_since = Some(r.resumed_after);
            reset.insert("requested_after_msg".into(), r.requested_after.into());
            reset.insert("latest_message_id".into(), r.latest.into());
            reset.insert("resumed_after_msg".into(), r.resumed_after.into());
        }
        if !reset.is_empty() {
            let positions = Value::Object(reset.clone());
            tracing::info!(
                room = %self.room,
                agent = %self.call.agent,
                reset = %positions,
                "a stream asked for a position beyond the room's history (a restored database?); resuming from what exists"
            );
            reset.insert("reason".into(), "cursor_ahead".into());
            self.send("reset", None, Value::Object(reset)).await?;
        }
        self.floor = since;
        self.delivered = since;
        match chat_since {
            Some(m) => {
                self.chat_floor = None;
                self.replay_events(since).await?;
                self.replay_messages(m).await?;
            }
            None => {
                self.chat_floor = Some(0);
                self.replay_events(since).await?;
            }
        }
        self.board_dirty = true;
        self.files_dirty = true;
        self.flush_snapshots().await?;
        loop {
            let first = tokio::select! {
                _ = self.tx.closed() => return Err(Stop::Gone),
                c = next_change(&mut self.changes) => {
                    if let Some(c) = c.filter(|c| c.room == self.room) {
                        self.send("presence", None, c.payload()).await?;
                    }
                    continue;
                }
                r = self.bus.recv() => r,
            };
            // Take whatever else is waiting, so a burst costs one look for
            // a revocation and one `board` event.
            let mut batch = vec![first];
            while batch.len() < 256 {
                match self.bus.try_recv() {
                    Ok(e) => batch.push(Ok(e)),
                    Err(TryRecvError::Lagged(missed)) => batch.push(Err(RecvError::Lagged(missed))),
                    Err(_) => break,
                }
            }
            let mine = |r: &std::result::Result<Arc<Event>, RecvError>| match r {
                Ok(e) => e.room == self.room && e.id > self.floor,
                Err(_) => true,
            };
            // Everything in the batch was committed before this look began:
            // a token revoked before any of it is found revoked here.
            if batch.iter().any(mine) && !self.slot.confirm(self.core.store.as_ref()).await? {
                return Err(Stop::Fail(Slot::revoked_error()));
            }
            for received in batch {
                match received {
                    Ok(e) => self.live(&e).await?,
                    Err(RecvError::Lagged(missed)) => self.recover(missed).await?,
                    Err(RecvError::Closed) => return Err(Stop::Gone),
                }
            }
            self.flush_snapshots().await?;
        }
    }

    /// The bus dropped events for this slow stream: re-read them.
    async fn recover(&mut self, missed: u64) -> Step {
        tracing::debug!(missed, room = %self.room, "a stream lagged; re-reading from the database");
        let from = self.delivered;
        self.replay_events(from).await
    }

    /// An event from the bus.
    async fn live(&mut self, e: &Event) -> Step {
        if e.room != self.room || e.id <= self.floor {
            return Ok(());
        }
        self.deliver(e).await
    }

    /// Sends `activity` (and `chat` for a message) and notes what changed.
    async fn deliver(&mut self, e: &Event) -> Step {
        self.delivered = self.delivered.max(e.id);
        let viewer = Viewer::new(&self.call.agent);
        let mut activity = viewer.event(e);
        if self.push.is_some() {
            let to = push::Recipient {
                agent: &self.call.agent,
                lead: self.call.lead,
            };
            let reason = push::actionable(e, to);
            activity["actionable"] = json!(reason.map(push::Reason::as_str));
            let attention = self.core.attention(&self.room, &self.call.agent).await?;
            activity["attention"] = json!(attention.as_str());
        }
        self.send("activity", Some(e.id), activity).await?;
        match e.kind.as_str() {
            "message" => {
                if let (Some(id), Some(floor)) = (e.message_id, self.chat_floor)
                    && id > floor
                {
                    let chat = viewer.chat_from_event(e, id);
                    self.send("chat", None, chat).await?;
                }
            }
            "file_added" | "file_deleted" | "retention_set" => self.files_dirty = true,
            k if k.starts_with("task_") || k == "note_added" => self.board_dirty = true,
            _ => {}
        }
        Ok(())
    }

    /// Replays the room's events after `since` from the database.
    async fn replay_events(&mut self, since: i64) -> Step {
        let mut since = since;
        loop {
            let filter = EventFilter::after(since, PAGE);
            let page = self.core.store.read_events(&self.room, &filter).await?;
            for e in &page {
                self.deliver(e).await?;
                since = e.id;
            }
            if (page.len() as i64) < PAGE {
                self.floor = self.floor.max(self.delivered);
                return Ok(());
            }
        }
    }

    /// Replays the room's messages after `since` as `chat`.
    async fn replay_messages(&mut self, since: i64) -> Step {
        let mut since = since;
        loop {
            let page = self
                .core
                .store
                .read_messages(&self.room, since, PAGE)
                .await?;
            for m in &page {
                let chat = present::chat(m, &self.call.agent);
                self.send("chat", None, chat).await?;
                since = m.id;
            }
            if (page.len() as i64) < PAGE {
                self.chat_floor = Some(since);
                return Ok(());
            }
        }
    }

    /// Sends `board` and `files` if something changed them.
    async fn flush_snapshots(&mut self) -> Step {
        if std::mem::take(&mut self.board_dirty) {
            let board = self.shared_board().await?;
            let text = present::board_event(&self.room, &board.open, &board.closed, &self.call);
            self.send_text("board", &text).await?;
        }
        if std::mem::take(&mut self.files_dirty) {
            let (_, files) = self
                .core
                .list_files(&self.call, Some(&self.room), Some(200))
                .await?;
            let body = json!({"room": self.room, "count": files.len(), "files": files});
            self.send("files", None, body).await?;
        }
        Ok(())
    }

    /// The room's board as of at least the newest event this stream has
    /// delivered: the shared snapshot when it is that fresh, else built now
    /// (once, for every stream of the room waiting on it).
    async fn shared_board(&self) -> Result<Arc<BoardTasks>> {
        let slot = self.boards.slot(&self.room);
        let mut snapshot = slot.lock().await;
        if let Some(s) = snapshot.as_ref()
            && s.as_of >= self.delivered
        {
            return Ok(s.board.clone());
        }
        // Read before the board, so the board shows at least this event.
        let as_of = self.core.store.latest_event_id(&self.room).await?;
        let board = Arc::new(self.board().await?);
        *snapshot = Some(Snapshot {
            as_of,
            board: board.clone(),
        });
        Ok(board)
    }

    /// Open tasks (through the domain, so lapsed leases are applied), and
    /// the latest closed ones.
    async fn board(&self) -> Result<BoardTasks> {
        let (_, tasks) = self
            .core
            .list_tasks(
                &self.call,
                Some(&self.room),
                Some("open"),
                None,
                Some(200),
                None,
            )
            .await?;
        let closed = self
            .core
            .store
            .list_tasks(
                &self.room,
                &TaskQuery {
                    statuses: vec![Status::Done, Status::Cancelled],
                    assignee: None,
                    limit: CLOSED_SHOWN,
                    before_id: None,
                },
            )
            .await?;
        Ok(BoardTasks {
            open: present::SharedTasks::new(tasks),
            closed: present::SharedTasks::new(closed),
        })
    }

    /// Sends an event whose data is already serialized.
    async fn send_text(&self, name: &str, data: &str) -> Step {
        let event = SseEvent::default().event(name).data(data);
        self.tx.send(event).await.map_err(|_| Stop::Gone)
    }

    async fn send(&self, name: &str, id: Option<i64>, data: Value) -> Step {
        let mut event = SseEvent::default().event(name).data(data.to_string());
        if let Some(id) = id {
            event = event.id(id.to_string());
        }
        self.tx.send(event).await.map_err(|_| Stop::Gone)
    }

    /// The id after which the last `n` events (or messages) of the room lie.
    /// Ids are shared by all rooms, so the window is widened until it holds
    /// `n` of this room's, or reaches the start.
    async fn tail_start(&self, kind: Kind, latest: i64, n: i64) -> Result<i64> {
        let mut span = n.max(1);
        loop {
            let start = (latest - span).max(0);
            let mut ids = std::collections::VecDeque::new();
            let mut since = start;
            loop {
                let page: Vec<i64> = match kind {
                    Kind::Events => {
                        let filter = EventFilter::after(since, PAGE);
                        let page = self.core.store.read_events(&self.room, &filter).await?;
                        page.iter().map(|e| e.id).collect()
                    }
                    Kind::Messages => {
                        let page = self
                            .core
                            .store
                            .read_messages(&self.room, since, PAGE)
                            .await?;
                        page.iter().map(|m| m.id).collect()
                    }
                };
                let full = page.len() as i64 == PAGE;
                for id in page {
                    since = id;
                    ids.push_back(id);
                    // Keep one more than `n`: its id is where the tail starts.
                    if ids.len() as i64 > n + 1 {
                        ids.pop_front();
                    }
                }
                if !full {
                    break;
                }
            }
            if ids.len() as i64 > n {
                return Ok(ids[0]);
            }
            if start == 0 {
                return Ok(0);
            }
            if ids.len() as i64 == n {
                // Exactly n in the window: the tail starts at the window's start.
                return Ok(start);
            }
            span = span.saturating_mul(4);
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Events,
    Messages,
}
