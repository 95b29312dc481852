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
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::JsonBody;
use crate::assets::ADMIN;
use crate::auth::admit::RoomArg;
use crate::auth::{Caller, Meter, admit, client_addr, require_token};
use crate::domain::model::Grant;
use crate::domain::model::RoomInfo;
use crate::domain::{Call, Owner};
use crate::error::{Error, Result, http_error};
use crate::state::AppState;

/// The console's API route table: each handler with its OpenAPI
/// description ([`openapi`](super::openapi)), served and described from
/// this one list.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_state))
        .routes(routes!(create_room))
        .routes(routes!(delete_room))
        .routes(routes!(room_info))
        .routes(routes!(room_retention))
        .routes(routes!(mint_token))
        .routes(routes!(revoke_tokens))
        .routes(routes!(purge_tokens))
        .routes(routes!(connect_app))
        .routes(routes!(webhooks::add_webhook))
        .routes(routes!(webhooks::remove_webhook))
        .routes(routes!(webhooks::add_inbound))
        .routes(routes!(webhooks::remove_inbound))
}

/// Every route of the console, each behind the gates above.
pub fn routes(state: AppState) -> Router<AppState> {
    let (api, _) = api().split_for_parts();
    let api = api
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

/// The whole-server admin making a request, and the address it came from:
/// the server's owner in the console.
pub struct Admin {
    pub caller: Caller,
    pub addr: IpAddr,
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Admin> {
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
        Ok(Admin { caller, addr })
    }
}

impl Admin {
    /// This admin's call through `tool` (its audit row, its grants).
    fn call(&self, tool: &'static str) -> Call {
        Call::new(self.caller.clone(), tool)
    }

    /// Runs `work` as the owner in the console on `room`, through `tool`
    /// and [`admit`]: the console is not rate limited, and the call gets
    /// its audit row in `room` if its write carried none.
    async fn in_room<T>(
        &self,
        state: &AppState,
        tool: &'static str,
        room: &str,
        work: impl AsyncFnOnce(&Owner<'_>) -> Result<T>,
    ) -> Result<T> {
        let call = self.call(tool);
        let owner = Owner::console(&call, self.addr);
        let at = RoomArg::Named(room).recorded(&call.caller);
        admit(state, &call, Meter::Unmetered, at, None, async || {
            work(&owner).await
        })
        .await
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
    let prefix = crate::secret::PREFIX;
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

/// A room's info fields as the core takes them; refused when one holds what
/// looks like a token.
fn checked_info(
    description: Option<String>,
    repo_url: Option<String>,
    onboarding_notes: Option<String>,
) -> Result<RoomInfo> {
    refuse_token_like([
        ("description", description.as_deref()),
        ("repo_url", repo_url.as_deref()),
        ("onboarding_notes", onboarding_notes.as_deref()),
    ])?;
    Ok(RoomInfo {
        description,
        repo_url,
        onboarding_notes,
    })
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
#[utoipa::path(
    get,
    path = "/v1/admin/state",
    tag = "admin",
    operation_id = "admin_get_state",
    responses((status = 200, description = "Posture, counts, rooms, tokens (never a raw one), signed-in apps and the admin log", body = Object)),
)]
async fn get_state(
    State(state): State<AppState>,
    actor: Admin,
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct NewRoom {
    name: String,
    description: Option<String>,
    repo_url: Option<String>,
    onboarding_notes: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/admin/rooms",
    tag = "admin",
    operation_id = "admin_create_room",
    request_body(content = NewRoom, content_type = "application/json"),
    responses((status = 201, description = "`{ok, created, room}`", body = Object)),
)]
async fn create_room(
    State(state): State<AppState>,
    actor: Admin,
    JsonBody(body): JsonBody<NewRoom>,
) -> Result<Response> {
    let info = checked_info(body.description, body.repo_url, body.onboarding_notes)?;
    let call = actor.call("admin.create_room");
    let owner = Owner::console(&call, actor.addr);
    let room = state
        .core
        .owner_create_room(&owner, body.name.trim(), info)
        .await?;
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct InfoBody {
    description: Option<String>,
    repo_url: Option<String>,
    onboarding_notes: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/admin/rooms/{room}/info",
    tag = "admin",
    operation_id = "admin_room_info",
    params(("room" = String, Path, description = "The room")),
    request_body(content = InfoBody, content_type = "application/json"),
    responses((status = 200, description = "`{room}`", body = Object)),
)]
async fn room_info(
    State(state): State<AppState>,
    actor: Admin,
    Path(RoomPath { room }): Path<RoomPath>,
    JsonBody(body): JsonBody<InfoBody>,
) -> Result<Json<Value>> {
    let info = checked_info(body.description, body.repo_url, body.onboarding_notes)?;
    let room = actor
        .in_room(&state, "admin.set_room_info", &room, async |owner| {
            state.core.set_room_info(owner, Some(&room), info).await
        })
        .await?;
    Ok(Json(json!({ "room": room })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RetentionBody {
    days: i64,
}

#[utoipa::path(
    post,
    path = "/v1/admin/rooms/{room}/retention",
    tag = "admin",
    operation_id = "admin_room_retention",
    params(("room" = String, Path, description = "The room")),
    request_body(content = RetentionBody, content_type = "application/json"),
    responses((status = 200, description = "`{room, pruned}`", body = Object)),
)]
async fn room_retention(
    State(state): State<AppState>,
    actor: Admin,
    Path(RoomPath { room }): Path<RoomPath>,
    JsonBody(body): JsonBody<RetentionBody>,
) -> Result<Json<Value>> {
    let (room, pruned) = actor
        .in_room(&state, "admin.set_retention", &room, async |owner| {
            state
                .core
                .set_retention(owner, Some(&room), body.days)
                .await
        })
        .await?;
    Ok(Json(json!({ "room": room, "pruned": pruned })))
}

#[derive(Deserialize)]
struct DeleteQuery {
    /// The room name typed again, as confirmation.
    confirm: Option<String>,
}

#[utoipa::path(
    delete,
    path = "/v1/admin/rooms/{room}",
    tag = "admin",
    operation_id = "admin_delete_room",
    params(("room" = String, Path, description = "The room"), ("confirm" = String, Query, description = "The room name again, as confirmation")),
    responses((status = 200, description = "`{deleted}`", body = Object)),
)]
async fn delete_room(
    State(state): State<AppState>,
    actor: Admin,
    Path(RoomPath { room }): Path<RoomPath>,
    Query(q): Query<DeleteQuery>,
) -> Result<Json<Value>> {
    if q.confirm.as_deref() != Some(room.as_str()) {
        return Err(Error::invalid(
            "deleting a room removes its tasks, chat, files and events: type the room name \
             again as confirmation (?confirm=NAME)",
        ));
    }
    actor
        .in_room(&state, "admin.delete_room", &room, async |owner| {
            state.core.delete_room(owner, &room).await
        })
        .await?;
    Ok(Json(json!({ "deleted": room })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct MintBody {
    #[serde(flatten)]
    grant: Grant,
    /// Base URL for the LAN setup text (instead of the configured one).
    lan_url: Option<String>,
    /// Base URL for the remote setup text (instead of the configured one).
    public_url: Option<String>,
}

/// Mints a token and answers it once, with the setup text for both sides.
#[utoipa::path(
    post,
    path = "/v1/admin/tokens",
    tag = "admin",
    operation_id = "admin_mint_token",
    request_body(content = MintBody, content_type = "application/json"),
    responses((status = 201, description = "The token record with `token` (shown once), `setup` (what to paste on each side) and `whole_server_admin`", body = Object)),
)]
async fn mint_token(
    State(state): State<AppState>,
    actor: Admin,
    headers: HeaderMap,
    JsonBody(body): JsonBody<MintBody>,
) -> Result<Response> {
    refuse_token_like_grant(&body.grant)?;
    let given = setup::GivenUrls::check(body.lan_url, body.public_url)?;
    let call = actor.call("admin.mint_token");
    let owner = Owner::console(&call, actor.addr);
    let (secret, t) = state
        .core
        .owner_mint_token(&owner, body.grant.trimmed())
        .await?;
    let setup = setup::both(&state.config, &headers, secret.expose(), &t, &given);
    Ok(created(
        &t,
        json!({
            "whole_server_admin": t.grant.server_admin(),
            "setup": setup,
            "token": secret.expose(),
            "ok": true,
            "shown_once": true,
        }),
    ))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RevokeBody {
    agent: String,
    /// Needed to revoke the caller's own agent (which ends its session).
    #[serde(default)]
    confirm_self: bool,
}

#[utoipa::path(
    post,
    path = "/v1/admin/tokens/revoke",
    tag = "admin",
    operation_id = "admin_revoke_tokens",
    request_body(content = RevokeBody, content_type = "application/json"),
    responses((status = 200, description = "`{ok, agent, revoked}`", body = Object)),
)]
async fn revoke_tokens(
    State(state): State<AppState>,
    actor: Admin,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<Value>> {
    let agent = body.agent.trim();
    if agent == actor.caller.agent && !body.confirm_self {
        return Err(Error::conflict(format!(
            "{agent:?} is your own agent: revoking it ends this console session too. \
             Send confirm_self: true to go ahead."
        )));
    }
    let call = actor.call("admin.revoke_tokens");
    let owner = Owner::console(&call, actor.addr);
    let n = state.core.owner_revoke_agent(&owner, agent).await?;
    if n == 0 {
        return Err(Error::not_found(format!(
            "agent {:?} has no active token",
            crate::domain::names::truncate_for_message(agent)
        )));
    }
    Ok(Json(json!({ "ok": true, "agent": agent, "revoked": n })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PurgeBody {
    /// Rows revoked longer ago than this; 0: every revoked row. Required:
    /// an empty body purges nothing.
    older_than_days: i64,
}

#[utoipa::path(
    post,
    path = "/v1/admin/tokens/purge",
    tag = "admin",
    operation_id = "admin_purge_tokens",
    request_body(content = PurgeBody, content_type = "application/json"),
    responses((status = 200, description = "`{ok, purged, revoked_remaining, live_tokens, older_than_days}`", body = Object)),
)]
async fn purge_tokens(
    State(state): State<AppState>,
    actor: Admin,
    JsonBody(body): JsonBody<PurgeBody>,
) -> Result<Json<Value>> {
    let days = body.older_than_days;
    let call = actor.call("admin.purge_tokens");
    let owner = Owner::console(&call, actor.addr);
    let n = state.core.owner_purge_tokens(&owner, days).await?;
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

/// `201` with what a console form made: `record`'s fields and, beside
/// them, `fields` (a secret shown this once, `ok`, …).
fn created(record: impl Serialize, fields: Value) -> Response {
    let mut v = json!(record);
    if let (Some(v), Value::Object(fields)) = (v.as_object_mut(), fields) {
        v.extend(fields);
    }
    (StatusCode::CREATED, Json(v)).into_response()
}

/// [`refuse_token_like`] over a grant's agent and skills.
fn refuse_token_like_grant(grant: &Grant) -> Result<()> {
    refuse_token_like(
        std::iter::once(("agent", Some(grant.agent.as_str())))
            .chain(grant.skills.iter().map(|s| ("skills", Some(s.as_str())))),
    )
}

#[cfg(test)]
mod tests {
    /// The console's forms take the grant's fields flattened, and still
    /// refuse a field they do not know (a typo is never silently dropped).
    #[test]
    fn grant_forms_refuse_unknown_fields() {
        use serde_json::json;
        let ok: super::MintBody =
            serde_json::from_value(json!({"agent": "a", "room": "r", "lead": true})).unwrap();
        assert!(ok.grant.lead && ok.grant.agent == "a");
        let typo = json!({"agent": "a", "room": "r", "all_room": true});
        assert!(serde_json::from_value::<super::MintBody>(typo.clone()).is_err());
        assert!(serde_json::from_value::<super::ConnectBody>(typo).is_err());
    }

    #[test]
    fn tokens_are_redacted_from_messages() {
        let t = crate::secret::mint();
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ConnectBody {
    #[serde(flatten)]
    grant: Grant,
    #[serde(default = "default_connect_minutes")]
    ttl_minutes: i64,
}

fn default_connect_minutes() -> i64 {
    15
}

/// Mints a one-time connect code for an app that signs in with OAuth, and
/// answers it once with the `/mcp` URLs and the steps for each app.
#[utoipa::path(
    post,
    path = "/v1/admin/connect",
    tag = "admin",
    operation_id = "admin_connect_app",
    request_body(content = ConnectBody, content_type = "application/json"),
    responses((status = 201, description = "The connect code (shown once) with the `/mcp` URLs and the steps for each app", body = Object)),
)]
async fn connect_app(
    State(state): State<AppState>,
    actor: Admin,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ConnectBody>,
) -> Result<Response> {
    if !state.config.oauth {
        return Err(Error::invalid(
            "OAuth sign-in is off on this server (CHATROOM_OAUTH=off)",
        ));
    }
    refuse_token_like_grant(&body.grant)?;
    let call = actor.call("admin.connect");
    let owner = Owner::console(&call, actor.addr);
    let (code, info) = state
        .core
        .owner_connect(&owner, body.grant.trimmed(), body.ttl_minutes)
        .await?;
    let (lan, remote) = setup::base_urls(&state.config, &headers);
    let mcp = |base: &str| format!("{}/mcp", base.trim_end_matches('/'));
    let name = format!("chatroom-{}", info.grant.room);
    let steps = json!({
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
    Ok(created(
        &info,
        json!({
            "ttl_minutes": body.ttl_minutes,
            "whole_server_admin": info.grant.server_admin(),
            "mcp_url": {"lan": mcp(&lan.url), "remote": mcp(&remote.url)},
            "steps": steps,
            "code": code.expose(),
        }),
    ))
}
