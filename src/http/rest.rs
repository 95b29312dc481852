//! The `/v1` REST API (SPEC §4, admin routes aside): the same domain calls as
//! the MCP tools, for hooks, scripts, `curl` and the dashboard. Every route
//! sits behind [`require_token`], takes `?room=`, passes
//! [`admit`] (rate limit, audit row), answers in the shapes of
//! [`present`], and answers errors as `{"error": {"code", "message"}}` with
//! the status of the code.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, middleware};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{Api, JsonBody, Params, body_error};
use crate::auth::body::body_guard;
use crate::auth::require_token;
use crate::domain::model::RoomInfo;
use crate::error::{Error, Result};
use crate::present::{self, UNTRUSTED_WARNING, digest};
use crate::state::AppState;

use super::openapi::RoomQuery;

/// How many events `/v1/whats_new` returns at most (for hooks).
const WHATS_NEW_LIMIT: i64 = 100;

/// The `/v1` route table: each handler with its OpenAPI description
/// ([`openapi`](super::openapi)), served and described from this one list.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(whats_new))
        .routes(routes!(list_tasks))
        .routes(routes!(get_task))
        .routes(routes!(read_messages, post_message))
        .routes(routes!(read_events))
        .routes(routes!(list_agents))
        .routes(routes!(list_rooms))
        .routes(routes!(delete_room))
        .routes(routes!(room_info, set_room_info))
        .routes(routes!(set_retention))
        .routes(routes!(list_files, upload_file))
        .routes(routes!(download_file, delete_file))
        .routes(routes!(super::sse::stream))
        .routes(routes!(presence, set_presence))
}

/// The `/v1` routes of this module, each behind the bearer-token layer.
pub fn routes(state: AppState) -> Router<AppState> {
    let body_limit = state.body_limit();
    let (router, _) = api().split_for_parts();
    router
        // The rooms' shared boards, for the stream alone.
        .layer(super::sse::boards())
        .layer(DefaultBodyLimit::max(body_limit))
        // The body is read only once the token is known (inner layer).
        .route_layer(middleware::from_fn_with_state(state.clone(), body_guard))
        .route_layer(middleware::from_fn_with_state(state, require_token))
}

/// An id from the path; anything but an integer is `not_found`.
fn parse_id(what: &str, raw: &str) -> Result<i64> {
    raw.parse()
        .map_err(|_| Error::not_found(format!("{what} ids are integers; there is no {what} here")))
}

/// Whether a switch-like query value is on (`1`, `true`, `on`, `yes`).
fn switch(v: &Option<String>) -> bool {
    v.as_deref()
        .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct WhatsNewParams {
    /// `1` (or `true`, `on`, `yes`): look without moving the cursor.
    peek: Option<String>,
    /// `json` (the default) or `text`, the framed digest for a hook.
    format: Option<String>,
    /// Leave out events up to this id (a peeking hook's own mark).
    after_id: Option<i64>,
    /// At most this many events (1 to 100; a hook with a small context
    /// budget asks for fewer).
    limit: Option<i64>,
}

/// For hooks: up to 100 events after the caller's cursor, the caller's own
/// left out; moves the cursor unless `peek=1`. `format=text` answers the
/// framed digest, empty when nothing is new. `x-chatroom-last-event-id`
/// says how far the answer reaches; a cursor or `after_id` beyond the
/// room's history is set back, and the answer says so (`cursor_reset`,
/// `x-chatroom-cursor-reset: LATEST`).
#[utoipa::path(
    get,
    path = "/v1/whats_new",
    tag = "hooks",
    params(RoomQuery, WhatsNewParams),
    responses(
        (status = 200, description = "JSON: `{since_event_id, count, events, remaining, remaining_more, moved_cursor}`, with `room_onboarding` on the first look and `cursor_reset` when the cursor was set back; `format=text`: the framed digest, empty when nothing is new", content(
            (Object = "application/json"),
            (String = "text/plain"),
        ), headers(
            ("x-chatroom-last-event-id" = i64, description = "How far the answer reaches"),
            ("x-chatroom-cursor-reset" = i64, description = "Set when the cursor was beyond the room's history: the room's latest event id"),
        )),
    ),
)]
async fn whats_new(
    State(s): State<AppState>,
    api: Api,
    Params(p): Params<WhatsNewParams>,
) -> Result<Response> {
    let advance = !switch(&p.peek);
    let news = api
        .run(&s, "v1:whats_new", None, async |call| {
            s.core
                .whats_new(
                    call,
                    api.room(),
                    p.limit.unwrap_or(WHATS_NEW_LIMIT).clamp(1, WHATS_NEW_LIMIT),
                    advance,
                    true,
                    p.after_id,
                )
                .await
        })
        .await?;
    let (room, page) = (&news.room, &news.page);
    // This route is the hooks' (SPEC §4): a hook seen, for `reach`.
    s.core
        .presence
        .hook_seen(&room.name, &api.caller.agent, s.core.clock.now_ms());
    let last_id = page.events.last().map_or(page.since, |e| e.id);
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-chatroom-last-event-id",
        HeaderValue::from(last_id.max(news.after.unwrap_or(0))),
    );
    if let Some(r) = &news.reset {
        headers.insert("x-chatroom-cursor-reset", HeaderValue::from(r.latest));
    }
    match p.format.as_deref() {
        Some("text") => {
            let text = digest::render(room, page, &api.caller.agent, news.reset.as_ref());
            let content_type = (header::CONTENT_TYPE, "text/plain; charset=utf-8");
            Ok((headers, [content_type], text).into_response())
        }
        None | Some("json") => {
            let mut body = present::news(&news, &api.caller.agent);
            body["moved_cursor"] = json!(advance);
            Ok((headers, Json(api.untrusted(&room.name, body))).into_response())
        }
        Some(other) => Err(Error::invalid(format!(
            "format {other:?} is not known; use text or json"
        ))),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TaskParams {
    /// A status (pending, in_progress, blocked, in_review, done,
    /// cancelled) or `open` (the default).
    status: Option<String>,
    /// Only tasks of this agent; `me` for the caller.
    assignee: Option<String>,
    /// How many (default 200).
    limit: Option<i64>,
    /// Page back: only tasks with an id below this.
    before_id: Option<i64>,
}

/// Open tasks, newest first (`status=` picks others).
#[utoipa::path(
    get,
    path = "/v1/tasks",
    tag = "board",
    params(RoomQuery, TaskParams),
    responses((status = 200, description = "`{count, tasks}`: each task with `can`, the actions the caller may take on it", body = Object)),
)]
async fn list_tasks(
    State(s): State<AppState>,
    api: Api,
    Params(p): Params<TaskParams>,
) -> Result<Json<Value>> {
    let status = p.status.as_deref().unwrap_or("open");
    let (room, tasks) = api
        .run(&s, "v1:list_tasks", None, async |call| {
            let limit = Some(p.limit.unwrap_or(200));
            s.core
                .list_tasks(
                    call,
                    api.room(),
                    Some(status),
                    p.assignee.as_deref(),
                    limit,
                    p.before_id,
                )
                .await
        })
        .await?;
    Ok(Json(
        api.untrusted(&room, present::task_list(&tasks, &api.caller)),
    ))
}

/// One task with its notes: `{task: {…, notes}}`.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}",
    tag = "board",
    params(("id" = i64, Path, description = "The task's id"), RoomQuery),
    responses((status = 200, description = "`{task}`: the task with `can` and its `notes`", body = Object)),
)]
async fn get_task(
    State(s): State<AppState>,
    api: Api,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let id = parse_id("task", &id)?;
    let (task, notes) = api
        .run(&s, "v1:get_task", Some(id), async |call| {
            s.core.get_task(call, api.room(), id).await
        })
        .await?;
    let t = present::task_with_notes(&task, &notes, &api.caller);
    Ok(Json(api.untrusted(&task.room, json!({"task": t}))))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct MessageParams {
    /// Messages with an id above this (default 0: from the start).
    since_id: Option<i64>,
    /// How many.
    limit: Option<i64>,
}

/// Chat messages oldest first after `since_id`; never moves the cursor.
#[utoipa::path(
    get,
    path = "/v1/messages",
    tag = "chat",
    params(RoomQuery, MessageParams),
    responses((status = 200, description = "`{count, messages, latest_id}`", body = Object)),
)]
async fn read_messages(
    State(s): State<AppState>,
    api: Api,
    Params(p): Params<MessageParams>,
) -> Result<Json<Value>> {
    let (room, messages, latest) = api
        .run(&s, "v1:read_messages", None, async |call| {
            s.core
                .read_messages(call, api.room(), p.since_id.unwrap_or(0), p.limit)
                .await
        })
        .await?;
    Ok(Json(
        api.untrusted(&room, present::messages(&messages, latest)),
    ))
}

#[derive(Deserialize, ToSchema)]
struct NewMessage {
    /// The message text; `@name` mentions an agent.
    body: String,
    /// Id of a message of the same room this replies to.
    reply_to: Option<i64>,
}

/// Posts a chat message (writer tokens): `201 {ok, message_id, author}`.
#[utoipa::path(
    post,
    path = "/v1/messages",
    tag = "chat",
    params(RoomQuery),
    request_body(content = NewMessage, content_type = "application/json", description = "Read as JSON whatever the Content-Type says"),
    responses((status = 201, description = "`{ok, message_id, author, reach}`", body = Object)),
)]
async fn post_message(
    State(s): State<AppState>,
    api: Api,
    JsonBody(m): JsonBody<NewMessage>,
) -> Result<Response> {
    let posted = api
        .run(&s, "v1:post_message", None, async |call| {
            s.core
                .post_message(call, api.room(), &m.body, m.reply_to)
                .await
        })
        .await?;
    let body = present::posted(&posted);
    Ok((
        StatusCode::CREATED,
        Json(api.reply(&posted.message.room, body)),
    )
        .into_response())
}

#[derive(Deserialize, ToSchema)]
struct NewState {
    /// `online`, `working`, `waiting`, `idle` or `offline`.
    state: String,
}

/// A hook says what its agent is doing: `{state}` (`online`, `working`,
/// `waiting`, `idle`, `offline`).
#[utoipa::path(
    post,
    path = "/v1/presence",
    tag = "hooks",
    params(RoomQuery),
    request_body(content = NewState, content_type = "application/json"),
    responses((status = 200, description = "`{ok, agent, state, ts, attention}`", body = Object)),
)]
async fn set_presence(
    State(s): State<AppState>,
    api: Api,
    JsonBody(b): JsonBody<NewState>,
) -> Result<Json<Value>> {
    let change = api
        .run(&s, "v1:presence", None, async |call| {
            s.core.set_state(call, api.room(), &b.state).await
        })
        .await?;
    let body = json!({
        "ok": true,
        "agent": change.agent,
        "state": change.state,
        "ts": change.state_ts.map(crate::clock::fmt_ts),
        "attention": change.attention,
    });
    Ok(Json(api.reply(&change.room, body)))
}

/// Each agent's presence in the room: state and its time, attention,
/// whether a push client follows the room, when its hook was last seen.
#[utoipa::path(
    get,
    path = "/v1/presence",
    tag = "hooks",
    params(RoomQuery),
    responses((status = 200, description = "`{agents}`", body = Object)),
)]
async fn presence(State(s): State<AppState>, api: Api) -> Result<Json<Value>> {
    let (room, agents) = api
        .run(&s, "v1:presence", None, async |call| {
            let room = s.core.room(call, api.room()).await?.name;
            let agents = s.core.presence_of(&room).await?;
            Ok((room, agents))
        })
        .await?;
    Ok(Json(api.reply(&room, json!({"agents": agents}))))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct EventParams {
    /// Events with an id above this (default 0).
    since_id: Option<i64>,
    /// How many (default 100).
    limit: Option<i64>,
    /// Only events of this kind (e.g. message, task_claimed).
    kind: Option<String>,
    /// Only events of this task.
    task_id: Option<i64>,
}

/// The room's history in order; never moves the cursor.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "chat",
    params(RoomQuery, EventParams),
    responses((status = 200, description = "`{count, events, latest_event_id, cursor_unchanged}`", body = Object)),
)]
async fn read_events(
    State(s): State<AppState>,
    api: Api,
    Params(p): Params<EventParams>,
) -> Result<Json<Value>> {
    let filter = crate::domain::model::EventFilter {
        since_id: p.since_id.unwrap_or(0),
        limit: p.limit.unwrap_or(100),
        kind: p.kind,
        task_id: p.task_id,
    };
    let (room, events, latest) = api
        .run(&s, "v1:read_events", p.task_id, async |call| {
            s.core.read_events(call, api.room(), filter).await
        })
        .await?;
    Ok(Json(api.untrusted(&room, present::events(&events, latest))))
}

/// The room's members with their flags and `last_seen` (presence).
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "rooms",
    params(RoomQuery),
    responses((status = 200, description = "`{agents}`", body = Object)),
)]
async fn list_agents(State(s): State<AppState>, api: Api) -> Result<Json<Value>> {
    let (room, members) = api
        .run(&s, "v1:list_agents", None, async |call| {
            s.core.list_agents(call, api.room()).await
        })
        .await?;
    Ok(Json(
        api.reply(&room, present::agents(members, &api.caller.agent)),
    ))
}

/// The rooms this token is granted, with their counts.
#[utoipa::path(
    get,
    path = "/v1/rooms",
    tag = "rooms",
    params(RoomQuery),
    responses((status = 200, description = "`{agent, default_room, all_rooms, admin, readonly, lead, rooms}`: the rooms this token is granted, with their counts", body = Object)),
)]
async fn list_rooms(State(s): State<AppState>, api: Api) -> Result<Json<Value>> {
    let rooms = api
        .run(&s, "v1:list_rooms", None, async |call| {
            // A named room is authorised like on every other route.
            if api.room.is_some() {
                s.core.room(call, api.room()).await?;
            }
            s.core.store.list_rooms(s.core.clock.now_ms()).await
        })
        .await?;
    let c = &api.caller;
    let rooms: Vec<_> = rooms
        .into_iter()
        .filter(|r| c.granted(&r.room.name))
        .collect();
    Ok(Json(json!({
        "agent": c.agent,
        "default_room": c.room,
        "all_rooms": c.all_rooms,
        "admin": c.admin,
        "readonly": c.readonly,
        "lead": c.lead,
        "rooms": rooms,
        "untrusted_content_warning": UNTRUSTED_WARNING,
    })))
}

/// A room's info, as `get_room_info`.
#[utoipa::path(
    get,
    path = "/v1/rooms/{room}/info",
    tag = "rooms",
    params(("room" = String, Path, description = "The room")),
    responses((status = 200, description = "`{name, description, repo_url, onboarding_notes, retention_days}`", body = Object)),
)]
async fn room_info(
    State(s): State<AppState>,
    api: Api,
    Path(room): Path<String>,
) -> Result<Json<Value>> {
    let room = api
        .run(&s, "v1:get_room_info", None, async |call| {
            s.core.get_room_info(call, Some(&room)).await
        })
        .await?;
    Ok(Json(api.untrusted(&room.name, present::room(&room))))
}

/// Any writer sets a room's description, repo URL and onboarding notes.
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/info",
    tag = "rooms",
    params(("room" = String, Path, description = "The room")),
    request_body(content = RoomInfo, content_type = "application/json", description = "At least one field"),
    responses((status = 200, description = "`{ok, room_info, …}`", body = Object)),
)]
async fn set_room_info(
    State(s): State<AppState>,
    api: Api,
    Path(room): Path<String>,
    JsonBody(info): JsonBody<RoomInfo>,
) -> Result<Json<Value>> {
    let room = api
        .run(&s, "v1:set_room_info", None, async |call| {
            s.core.set_room_info(call, Some(&room), info).await
        })
        .await?;
    Ok(Json(
        api.untrusted(&room.name, present::room_info_set(&room)),
    ))
}

#[derive(Deserialize, ToSchema)]
struct RetentionBody {
    /// Keep chat, events and files this many days (0 = keep everything).
    days: i64,
}

/// Room admins: keep chat, events and files `days` days; prunes at once.
#[utoipa::path(
    post,
    path = "/v1/rooms/{room}/retention",
    tag = "rooms",
    params(("room" = String, Path, description = "The room")),
    request_body(content = RetentionBody, content_type = "application/json"),
    responses((status = 200, description = "`{ok, retention_days, pruned}`", body = Object)),
)]
async fn set_retention(
    State(s): State<AppState>,
    api: Api,
    Path(room): Path<String>,
    JsonBody(b): JsonBody<RetentionBody>,
) -> Result<Json<Value>> {
    let (room, pruned) = api
        .run(&s, "v1:set_retention", None, async |call| {
            s.core.set_retention(call, Some(&room), b.days).await
        })
        .await?;
    Ok(Json(
        api.reply(&room.name, present::retention_set(&room, pruned)),
    ))
}

/// Room admins: delete the room named in the path with everything in it.
#[utoipa::path(
    delete,
    path = "/v1/rooms/{room}",
    tag = "rooms",
    params(("room" = String, Path, description = "The room to delete, named in full")),
    responses((status = 200, description = "`{ok, deleted, deleted_room}`", body = Object)),
)]
async fn delete_room(
    State(s): State<AppState>,
    api: Api,
    Path(room): Path<String>,
) -> Result<Json<Value>> {
    api.run(&s, "v1:delete_room", None, async |call| {
        s.core.delete_room(call, &room).await
    })
    .await?;
    Ok(Json(api.reply(&room, present::room_deleted(&room))))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListFilesParams {
    /// How many.
    limit: Option<i64>,
}

/// The room's files, newest first.
#[utoipa::path(
    get,
    path = "/v1/files",
    tag = "files",
    params(RoomQuery, ListFilesParams),
    responses((status = 200, description = "`{count, files}`", body = Object)),
)]
async fn list_files(
    State(s): State<AppState>,
    api: Api,
    Params(p): Params<ListFilesParams>,
) -> Result<Json<Value>> {
    let (room, files) = api
        .run(&s, "v1:list_files", None, async |call| {
            s.core.list_files(call, api.room(), p.limit).await
        })
        .await?;
    Ok(Json(api.untrusted(&room, present::files(&files))))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UploadParams {
    /// The file's name (else the `X-Chatroom-Filename` header).
    name: Option<String>,
    /// Hide and delete the file after this many hours.
    expires_in_hours: Option<f64>,
    /// Its media type (else the request's `Content-Type`).
    mime: Option<String>,
    /// Link the file to a task of the room.
    task_id: Option<i64>,
}

/// Raw bytes up: `201 {ok, file_id, name, sha256, size, expires_at}`. The
/// name comes from `?name=` or the `X-Chatroom-Filename` header; the type comes from `?mime=`, else the request's `Content-Type` (but not the
/// form type `curl -d` sends by default).
#[utoipa::path(
    post,
    path = "/v1/files",
    tag = "files",
    params(
        RoomQuery,
        UploadParams,
        ("x-chatroom-filename" = Option<String>, Header, description = "The file's name when `?name=` is not given (visible ASCII)"),
    ),
    request_body(content = [u8], content_type = "application/octet-stream", description = "The file's bytes (at most CHATROOM_MAX_FILE_BYTES)"),
    responses((status = 201, description = "`{ok, file_id, name, sha256, size, expires_at, mime}`", body = Object)),
)]
async fn upload_file(
    State(s): State<AppState>,
    api: Api,
    headers: HeaderMap,
    Params(p): Params<UploadParams>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<Response> {
    let content = body.map_err(body_error)?;
    // `?name=` first, else the `X-Chatroom-Filename` header (what
    // ChatRoomMCP's clients send); still checked like every file name.
    let name = match p.name.filter(|n| !n.trim().is_empty()) {
        Some(name) => name,
        None => match headers.get("x-chatroom-filename") {
            None => {
                return Err(Error::invalid(
                    "name must not be empty: pass ?name= or an X-Chatroom-Filename header",
                ));
            }
            Some(v) => v
                .to_str()
                .map_err(|_| {
                    Error::invalid(
                        "the X-Chatroom-Filename header must be visible ASCII; pass a non-ASCII name as ?name= (percent-encoded)",
                    )
                })?
                .to_owned(),
        },
    };
    let mime = p.mime.or_else(|| {
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.starts_with("application/x-www-form-urlencoded"))
            .map(str::to_owned)
    });
    let meta = api
        .run(&s, "v1:put_file", p.task_id, async |call| {
            s.core
                .put_file(
                    call,
                    api.room(),
                    &name,
                    content.to_vec(),
                    mime.as_deref(),
                    p.expires_in_hours,
                    p.task_id,
                )
                .await
        })
        .await?;
    let room = api.room.clone().unwrap_or_else(|| api.caller.room.clone());
    let mut body = present::file_stored(&meta);
    body["mime"] = json!(meta.mime);
    Ok((StatusCode::CREATED, Json(api.reply(&room, body))).into_response())
}

/// Raw bytes down, with the stored type, always as an attachment and
/// sandboxed, so a file can never run as a page of this origin.
#[utoipa::path(
    get,
    path = "/v1/files/{id}",
    tag = "files",
    params(("id" = i64, Path, description = "The file's id"), RoomQuery),
    responses((status = 200, description = "The bytes, with the stored type, as an attachment", content_type = "application/octet-stream", body = [u8], headers(
        ("x-chatroom-sha256" = String, description = "The SHA-256 of the bytes, in hex"),
    ))),
)]
async fn download_file(
    State(s): State<AppState>,
    api: Api,
    Path(id): Path<String>,
) -> Result<Response> {
    let id = parse_id("file", &id)?;
    let (meta, bytes) = api
        .run(&s, "v1:get_file", None, async |call| {
            s.core.get_file(call, api.room(), id).await
        })
        .await?;
    let mime = HeaderValue::from_str(&meta.mime)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let headers = [
        (header::CONTENT_TYPE, mime),
        (header::CONTENT_DISPOSITION, content_disposition(&meta.name)),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; sandbox"),
        ),
        (
            header::HeaderName::from_static("x-chatroom-sha256"),
            HeaderValue::from_str(&meta.sha256).unwrap_or(HeaderValue::from_static("")),
        ),
    ];
    Ok((headers, bytes).into_response())
}

/// `attachment` with an ASCII fallback name and the exact name in RFC 5987
/// form; nothing from the name can break out of the header.
pub fn content_disposition(name: &str) -> HeaderValue {
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && !matches!(c, '"' | '\\' | ';' | '%') || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&format!(
        "attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

/// Deletes a file (its uploader or a room admin).
#[utoipa::path(
    delete,
    path = "/v1/files/{id}",
    tag = "files",
    params(("id" = i64, Path, description = "The file's id"), RoomQuery),
    responses((status = 200, description = "`{ok, deleted, file_id}`", body = Object)),
)]
async fn delete_file(
    State(s): State<AppState>,
    api: Api,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    let id = parse_id("file", &id)?;
    let meta = api
        .run(&s, "v1:delete_file", None, async |call| {
            s.core.delete_file(call, api.room(), id).await
        })
        .await?;
    let room = api.room.clone().unwrap_or_else(|| api.caller.room.clone());
    Ok(Json(api.reply(&room, present::file_deleted(&meta))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_disposition_is_safe() {
        let v = content_disposition("a\"b;c\r\nd/é.txt");
        let s = v.to_str().unwrap();
        assert!(
            s.starts_with("attachment; filename=\"a_b_c__d/_.txt\""),
            "{s}"
        );
        assert!(
            s.ends_with("filename*=UTF-8''a%22b%3Bc%0D%0Ad%2F%C3%A9.txt"),
            "{s}"
        );
    }
}
