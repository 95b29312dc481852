//! The admin console: the `/admin` page (a shell that holds no data until a
//! token is pasted) and its API under `/v1/admin/*`.
//!
//! Gates, in this order, so that a hidden console reveals nothing:
//! 1. `404` unless `CHATROOM_ADMIN_API` is on, and `404` to the public side
//!    while `CHATROOM_CONSOLE_LAN_ONLY` is on (the page and its assets too);
//! 2. on the API, `401` without a valid bearer token (and the failed-auth
//!    throttle), via [`require_token`];
//! 3. `403` unless the token is a whole-server admin (`admin` + `all_rooms`),
//!    and `read_only` for a read-only one that tries to change something.
//!
//! The token travels only as a bearer header (the page keeps it in
//! `sessionStorage`), never in a cookie, so no cross-site request can act.
//! Every mutation goes through the domain functions, is written to the admin
//! log with actor and client address, and gets a log line (never a token).

mod posture;
pub mod setup;
mod webhooks;

use std::net::{IpAddr, SocketAddr};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::assets::ADMIN;
use crate::auth::admit::RoomArg;
use crate::auth::{Caller, Meter, admit, client_addr, require_token};
use crate::clock::now_ms;
use crate::domain::model::{AdminLogEntry, RoomInfo};
use crate::domain::{Call, rooms, tokens};
use crate::error::{Error, Result, http_error};
use crate::state::AppState;

/// Every route of the console, each behind the gates above.
pub fn routes(state: AppState) -> Router<AppState> {
    let api = Router::new()
        .route("/v1/admin/state", get(get_state))
        .route("/v1/admin/rooms", post(create_room))
        .route("/v1/admin/rooms/{room}", delete(delete_room))
        .route("/v1/admin/rooms/{room}/info", post(room_info))
        .route("/v1/admin/rooms/{room}/retention", post(room_retention))
        .route("/v1/admin/tokens", post(mint_token))
        .route("/v1/admin/tokens/revoke", post(revoke_tokens))
        .route("/v1/admin/tokens/purge", post(purge_tokens))
        .route("/v1/admin/connect", post(connect_app))
        .route("/v1/admin/webhooks", post(webhooks::add_webhook))
        .route("/v1/admin/webhooks/{id}", delete(webhooks::remove_webhook))
        .route("/v1/admin/inbound", post(webhooks::add_inbound))
        .route("/v1/admin/inbound/{key}", delete(webhooks::remove_inbound))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::auth::body::body_guard,
        ))
        .route_layer(middleware::from_fn(server_admin_only))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
        .route_layer(middleware::from_fn(scrub_errors));
    let page = super::shared::serve(Router::new().route("/admin", get(page)), ADMIN);
    let console = api
        .merge(page)
        .layer(middleware::from_fn(security_headers))
        .with_state(state.clone());
    // The gate wraps the whole console as one service, in front of its
    // routing: a gated answer carries nothing (no `Allow` for a wrong
    // method, no console headers) that a missing path lacks.
    let gated = tower::ServiceBuilder::new()
        .layer(middleware::from_fn_with_state(state, console_gate))
        .service(console);
    Router::new()
        .route_service("/admin", gated.clone())
        .route_service("/admin/{*rest}", gated.clone())
        .route_service("/v1/admin/{*rest}", gated)
}

// ---------------------------------------------------------------------------
// Gates

/// `404` while the console is off or hidden from this (public-side) request,
/// before anything else looks at the request. The answer is the router's own
/// answer for a path that does not exist (a bare `404`), so a probe cannot
/// tell a hidden console from no console; the tests hold the two equal.
///
/// One exception, on the LAN side only: `GET /admin` while the console is
/// off is a page (still `404`) that names `CHATROOM_ADMIN_API`, for the
/// owner who opened it before turning the console on. The public side
/// cannot tell an off console from a hidden one.
async fn console_gate(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let hidden = crate::http::console_hidden(&state.config, req.headers());
    if !state.config.admin_api
        && !hidden
        && req.method() == Method::GET
        && req.uri().path() == "/admin"
    {
        return super::pages::console_off();
    }
    if !state.config.admin_api || hidden {
        return StatusCode::NOT_FOUND.into_response();
    }
    next.run(req).await
}

/// `403` for any token but a whole-server admin; `read_only` for a
/// read-only one that tries to change something. Runs after
/// [`require_token`], which put the caller into the request.
async fn server_admin_only(req: Request, next: Next) -> Response {
    let Some(caller) = Caller::of(req.extensions()) else {
        return Error::Unauthorized("a valid bearer token is required".into()).into_response();
    };
    if !caller.server_admin() {
        tracing::info!(agent = %caller.agent, path = %req.uri().path(), "refused the admin console to a token that is not a whole-server admin");
        return Error::forbidden(
            "the admin console needs a whole-server admin token (admin and all_rooms); \
             mint one with `chatroom admin add-token --agent NAME --room ROOM --admin --all-rooms`",
        )
        .into_response();
    }
    if req.method() != Method::GET && caller.readonly {
        return Error::ReadOnly(
            "this admin token is read-only: it can look at the console but not change anything"
                .into(),
        )
        .into_response();
    }
    next.run(req).await
}

/// Security headers on every console answer; the strict CSP matters for the
/// page (no inline script or style, nothing from elsewhere, no framing).
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
             frame-ancestors 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The whole-server admin making a request, and the address it came from.
pub struct Actor {
    pub caller: Caller,
    pub addr: IpAddr,
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Actor> {
        // The layers already checked this; refusing again keeps a route that
        // was wired without them closed.
        let caller = Caller::of(&parts.extensions)
            .filter(|c| c.server_admin())
            .cloned()
            .ok_or_else(|| Error::forbidden("a whole-server admin token is required"))?;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let addr = client_addr(&state.config, &parts.headers, peer);
        Ok(Actor { caller, addr })
    }
}

/// A JSON body whose rejections use our error body (and never echo a token).
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<JsonBody<T>> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(rejection) => Err(Error::invalid(format!(
                "bad request body: {}",
                redact_tokens(&rejection.body_text())
            ))),
        }
    }
}

/// The length of the run after `cr_` that makes text look like a token
/// (real ones have 43); shorter runs are left alone.
const TOKEN_LIKE_RUN: usize = 20;

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Where the first token-like run (`cr_` + enough token characters) starts
/// in `s`, and where it ends.
fn find_token(s: &str) -> Option<(usize, usize)> {
    let prefix = crate::auth::token::PREFIX;
    let mut from = 0;
    while let Some(at) = s[from..].find(prefix).map(|i| i + from) {
        let body = &s[at + prefix.len()..];
        let run = body.find(|c: char| !token_char(c)).unwrap_or(body.len());
        if run >= TOKEN_LIKE_RUN {
            return Some((at, at + prefix.len() + run));
        }
        from = at + prefix.len();
    }
    None
}

/// Replaces anything that looks like a token with `cr_***`.
fn redact_tokens(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some((start, end)) = find_token(rest) {
        out.push_str(&rest[..start]);
        out.push_str("cr_***");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Refuses console input that holds something looking like a token (a
/// token pasted into the wrong field): the console would show it to every
/// admin afterwards.
fn refuse_token_like<'a>(
    fields: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<()> {
    for (field, value) in fields {
        if value.is_some_and(|v| find_token(v).is_some()) {
            return Err(Error::invalid(format!(
                "{field} holds what looks like a chatroom token; tokens are secrets and are \
                 never stored as names or text"
            )));
        }
    }
    Ok(())
}

/// Last line of defence for "never a token in an error": error answers of
/// the console API (ours, the domain's, axum's) pass through
/// [`redact_tokens`], since some echo the input they refuse.
async fn scrub_errors(req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 256 * 1024).await else {
        return http_error(status, "internal", "error answer too large");
    };
    let text = String::from_utf8_lossy(&bytes);
    if find_token(&text).is_none() {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(redact_tokens(&text)))
}

// ---------------------------------------------------------------------------
// The page

/// The console page: a shell; its script asks for a token and fetches the rest.
#[derive(Template, WebTemplate)]
#[template(path = "admin.html")]
struct AdminPage;

async fn page() -> AdminPage {
    AdminPage
}

// ---------------------------------------------------------------------------
// The API

/// Posture, counts, rooms, tokens (never a raw one) and the admin log.
async fn get_state(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
) -> Result<Json<Value>> {
    let store = state.core.store.as_ref();
    let rooms = store.list_rooms(state.core.clock.now_ms()).await?;
    let tokens = store.list_tokens().await?;
    let log = store.admin_log(posture::LOG_ENTRIES).await?;
    let mut view = posture::state_view(&state, &headers, &actor.caller, &rooms, &tokens, &log);
    // Apps signed in with OAuth, with their app's name (never a token).
    view["oauth"] = json!({
        "enabled": state.config.oauth,
        "grants": store.oauth_list_grants().await?,
    });
    view["hooks"] = webhooks::view(&state).await?;
    Ok(Json(view))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewRoom {
    name: String,
    description: Option<String>,
    repo_url: Option<String>,
    onboarding_notes: Option<String>,
}

async fn create_room(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody<NewRoom>,
) -> Result<Response> {
    refuse_token_like([
        ("description", body.description.as_deref()),
        ("repo_url", body.repo_url.as_deref()),
        ("onboarding_notes", body.onboarding_notes.as_deref()),
    ])?;
    let info = RoomInfo {
        description: body.description,
        repo_url: body.repo_url,
        onboarding_notes: body.onboarding_notes,
    };
    let room = rooms::create(state.core.store.as_ref(), body.name.trim(), info).await?;
    record(
        &state,
        &actor,
        "room.create",
        format!("room {}", room.name),
        false,
    )
    .await;
    // `created`: ChatRoomMCP's clients read it (a name in use is a conflict
    // here, so a room this answers is always new).
    let body = json!({ "ok": true, "created": true, "room": room });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The `{room}` of a console path. A struct, not a bare `String`: the
/// console is mounted behind a wildcard whose capture is also in the request.
#[derive(Deserialize)]
struct RoomPath {
    room: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoBody {
    description: Option<String>,
    repo_url: Option<String>,
    onboarding_notes: Option<String>,
}

async fn room_info(
    State(state): State<AppState>,
    actor: Actor,
    Path(RoomPath { room }): Path<RoomPath>,
    JsonBody(body): JsonBody<InfoBody>,
) -> Result<Json<Value>> {
    refuse_token_like([
        ("description", body.description.as_deref()),
        ("repo_url", body.repo_url.as_deref()),
        ("onboarding_notes", body.onboarding_notes.as_deref()),
    ])?;
    let info = RoomInfo {
        description: body.description,
        repo_url: body.repo_url,
        onboarding_notes: body.onboarding_notes,
    };
    let changed = info.changed_fields();
    let call = Call::new(actor.caller.clone(), "admin.set_room_info");
    let room = room_call(&state, &call, &room, async || {
        state.core.set_room_info(&call, Some(&room), info).await
    })
    .await?;
    record(
        &state,
        &actor,
        "room.info",
        format!("room {} ({})", room.name, changed.join(", ")),
        false,
    )
    .await;
    Ok(Json(json!({ "room": room })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionBody {
    days: i64,
}

async fn room_retention(
    State(state): State<AppState>,
    actor: Actor,
    Path(RoomPath { room }): Path<RoomPath>,
    JsonBody(body): JsonBody<RetentionBody>,
) -> Result<Json<Value>> {
    let call = Call::new(actor.caller.clone(), "admin.set_retention");
    let (room, pruned) = room_call(&state, &call, &room, async || {
        state
            .core
            .set_retention(&call, Some(&room), body.days)
            .await
    })
    .await?;
    record(
        &state,
        &actor,
        "room.retention",
        format!("room {} keeps {}", room.name, keep(room.retention_days)),
        false,
    )
    .await;
    Ok(Json(json!({ "room": room, "pruned": pruned })))
}

#[derive(Deserialize)]
struct DeleteQuery {
    /// The room name typed again, as confirmation.
    confirm: Option<String>,
}

async fn delete_room(
    State(state): State<AppState>,
    actor: Actor,
    Path(RoomPath { room }): Path<RoomPath>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<Value>> {
    if q.confirm.as_deref() != Some(room.as_str()) {
        return Err(Error::invalid(
            "deleting a room removes its tasks, chat, files and events: type the room name \
             again as confirmation (?confirm=NAME)",
        ));
    }
    let call = Call::new(actor.caller.clone(), "admin.delete_room");
    room_call(&state, &call, &room, async || {
        state.core.delete_room(&call, &room).await
    })
    .await?;
    record(&state, &actor, "room.delete", format!("room {room}"), false).await;
    Ok(Json(json!({ "deleted": room })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MintBody {
    agent: String,
    room: String,
    #[serde(default)]
    also_rooms: Vec<String>,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    all_rooms: bool,
    #[serde(default)]
    lead: bool,
    #[serde(default)]
    skills: Vec<String>,
    /// Base URL for the LAN setup text (instead of the configured one).
    lan_url: Option<String>,
    /// Base URL for the remote setup text (instead of the configured one).
    public_url: Option<String>,
}

/// Mints a token and answers it once, with the setup text for both sides.
async fn mint_token(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    JsonBody(body): JsonBody<MintBody>,
) -> Result<Response> {
    refuse_token_like(
        std::iter::once(("agent", Some(body.agent.as_str())))
            .chain(body.skills.iter().map(|s| ("skills", Some(s.as_str())))),
    )?;
    let given = setup::GivenUrls::check(body.lan_url, body.public_url)?;
    let grant = tokens::Grant {
        agent: body.agent.trim().to_owned(),
        room: body.room.trim().to_owned(),
        also_rooms: trimmed(body.also_rooms),
        readonly: body.readonly,
        admin: body.admin,
        all_rooms: body.all_rooms,
        lead: body.lead,
        skills: trimmed(body.skills),
    };
    let (secret, t) = tokens::mint(state.core.store.as_ref(), grant).await?;
    let whole_server = t.admin && t.all_rooms;
    let target = format!(
        "agent {} (token #{}; {})",
        t.agent,
        t.id,
        describe_grant(&t)
    );
    record(&state, &actor, "token.mint", target, whole_server).await;
    let mut v = json!(t);
    v["whole_server_admin"] = json!(whole_server);
    v["setup"] = setup::both(&state.config, &headers, secret.expose(), &t, &given);
    v["token"] = json!(secret.expose());
    v["ok"] = json!(true);
    v["shown_once"] = json!(true);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokeBody {
    agent: String,
    /// Needed to revoke the caller's own agent (which ends its session).
    #[serde(default)]
    confirm_self: bool,
}

async fn revoke_tokens(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<Value>> {
    let agent = body.agent.trim();
    if agent == actor.caller.agent && !body.confirm_self {
        return Err(Error::conflict(format!(
            "{agent:?} is your own agent: revoking it ends this console session too. \
             Send confirm_self: true to go ahead."
        )));
    }
    let n = tokens::revoke(state.core.store.as_ref(), agent).await?;
    if n == 0 {
        return Err(Error::not_found(format!(
            "agent {:?} has no active token",
            crate::domain::names::truncate_for_message(agent)
        )));
    }
    let target = format!("agent {agent} ({n} token(s))");
    record(&state, &actor, "token.revoke", target, false).await;
    Ok(Json(json!({ "ok": true, "agent": agent, "revoked": n })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PurgeBody {
    /// Rows revoked longer ago than this; 0: every revoked row. Required:
    /// an empty body purges nothing.
    older_than_days: i64,
}

async fn purge_tokens(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(body): JsonBody<PurgeBody>,
) -> Result<Json<Value>> {
    let days = body.older_than_days;
    let n = tokens::purge(state.core.store.as_ref(), days).await?;
    let target = format!("{n} token(s) revoked more than {days} day(s) ago");
    record(&state, &actor, "token.purge", target, false).await;
    let left = state.core.store.list_tokens().await?;
    let revoked = left.iter().filter(|t| t.revoked_ts.is_some()).count();
    Ok(Json(json!({
        "ok": true,
        "purged": n,
        "removed": n,
        "revoked_remaining": revoked,
        "live_tokens": left.len() - revoked,
        "older_than_days": days,
    })))
}

// ---------------------------------------------------------------------------
// Helpers

/// Writes one admin log entry and one log line for a mutation that
/// happened. A failed write is logged, not answered: the change is done.
async fn record(state: &AppState, actor: &Actor, action: &str, target: String, flagged: bool) {
    let entry = AdminLogEntry {
        id: 0,
        ts: now_ms(),
        actor: actor.caller.agent.clone(),
        address: actor.addr.to_string(),
        action: action.to_owned(),
        target,
        flagged,
    };
    if flagged {
        tracing::warn!(actor = %entry.actor, address = %entry.address, action, target = %entry.target, "admin console: minted a whole-server admin token");
    } else {
        tracing::info!(actor = %entry.actor, address = %entry.address, action, target = %entry.target, "admin console");
    }
    if let Err(e) = state.core.store.insert_admin_log(&entry).await {
        tracing::error!(action, "the admin log entry could not be written");
        e.log_if_internal();
    }
}

/// Runs a room call through [`admit`]: the console is not rate limited,
/// and the call gets its audit row in `room` if its write carried none.
async fn room_call<T>(
    state: &AppState,
    call: &Call,
    room: &str,
    work: impl AsyncFnOnce() -> Result<T>,
) -> Result<T> {
    admit(
        state,
        call,
        Meter::Unmetered,
        RoomArg::Named(room).recorded(&call.caller),
        None,
        work,
    )
    .await
}

fn trimmed(list: Vec<String>) -> Vec<String> {
    list.into_iter().map(|s| s.trim().to_owned()).collect()
}

fn keep(days: i64) -> String {
    if days == 0 {
        "everything".into()
    } else {
        format!("{days} day(s)")
    }
}

/// `room lobby +dev; admin, all_rooms` for the log.
fn describe_grant(t: &crate::domain::model::TokenRecord) -> String {
    let mut s = format!("room {}", t.room);
    for r in &t.also_rooms {
        s.push_str(&format!(" +{r}"));
    }
    let flags: Vec<&str> = [
        (t.readonly, "readonly"),
        (t.admin, "admin"),
        (t.all_rooms, "all_rooms"),
        (t.lead, "lead"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, f)| *f)
    .collect();
    if !flags.is_empty() {
        s.push_str("; ");
        s.push_str(&flags.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_redacted_from_messages() {
        let t = crate::auth::token::mint();
        let raw = t.expose();
        assert_eq!(
            super::redact_tokens(&format!(
                "invalid type: string \"{raw}\", expected bool; also {raw}"
            )),
            "invalid type: string \"cr_***\", expected bool; also cr_***"
        );
        assert_eq!(
            super::redact_tokens("descr_x and cr_short"),
            "descr_x and cr_short"
        );
        assert!(super::refuse_token_like([("agent", Some(raw))]).is_err());
        assert!(super::refuse_token_like([("agent", Some("cr_bot")), ("x", None)]).is_ok());
    }
}

// ---------------------------------------------------------------------------
// Connect an app (OAuth sign-in, SPEC §2a)

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectBody {
    agent: String,
    room: String,
    #[serde(default)]
    also_rooms: Vec<String>,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    all_rooms: bool,
    #[serde(default)]
    lead: bool,
    #[serde(default)]
    skills: Vec<String>,
    #[serde(default = "default_connect_minutes")]
    ttl_minutes: i64,
}

fn default_connect_minutes() -> i64 {
    15
}

/// Mints a one-time connect code for an app that signs in with OAuth, and
/// answers it once with the `/mcp` URLs and the steps for each app.
async fn connect_app(
    State(state): State<AppState>,
    actor: Actor,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ConnectBody>,
) -> Result<Response> {
    if !state.config.oauth {
        return Err(Error::invalid(
            "OAuth sign-in is off on this server (CHATROOM_OAUTH=off)",
        ));
    }
    let b = &body;
    refuse_token_like(
        std::iter::once(("agent", Some(b.agent.as_str())))
            .chain(b.skills.iter().map(|s| ("skills", Some(s.as_str())))),
    )?;
    let grant = tokens::Grant {
        agent: b.agent.trim().to_owned(),
        room: b.room.trim().to_owned(),
        also_rooms: trimmed(b.also_rooms.clone()),
        readonly: b.readonly,
        admin: b.admin,
        all_rooms: b.all_rooms,
        lead: b.lead,
        skills: trimmed(b.skills.clone()),
    };
    let (code, info) =
        crate::domain::oauth::mint_connect_code(state.core.store.as_ref(), grant, body.ttl_minutes)
            .await?;
    let whole_server = info.admin && info.all_rooms;
    let target = format!(
        "agent {} (connect code, room {}, {} min)",
        info.agent, info.room, body.ttl_minutes
    );
    record(&state, &actor, "oauth.connect", target, whole_server).await;
    let (lan, remote) = setup::base_urls(&state.config, &headers);
    let mcp = |base: &str| format!("{}/mcp", base.trim_end_matches('/'));
    let name = format!("chatroom-{}", info.room);
    let mut v = json!(info);
    v["ttl_minutes"] = json!(body.ttl_minutes);
    v["whole_server_admin"] = json!(whole_server);
    v["mcp_url"] = json!({"lan": mcp(&lan.url), "remote": mcp(&remote.url)});
    v["steps"] = json!({
        "claude_ai": format!(
            "claude.ai, Claude Desktop or the Claude mobile app: Settings → Connectors → Add custom connector → URL {} → Add, then Connect, and enter the code on the page that opens.",
            mcp(&remote.url)
        ),
        "chatgpt": format!(
            "ChatGPT: Settings → Connectors (developer mode) → Create → URL {}, authentication OAuth, then enter the code on the page that opens.",
            mcp(&remote.url)
        ),
        "claude_code": format!(
            "claude mcp add --transport http {} {}   (no header: in a session, /mcp → Authenticate, then enter the code)",
            setup::shell_quote(&name),
            setup::shell_quote(&mcp(&lan.url))
        ),
    });
    v["code"] = json!(code.expose());
    Ok((StatusCode::CREATED, Json(v)).into_response())
}
