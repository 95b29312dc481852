//! The console's webhooks and inbound URLs (SPEC §7a): listed in the
//! state, added and removed here through the same domain functions as
//! `chatroom admin add-webhook` and `add-inbound`. Secrets are answered
//! once, at creation; target URLs are listed by their origin only.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::{Admin, JsonBody, created};
use crate::domain::Owner;
use crate::domain::webhooks;
use crate::error::Result;
use crate::present;
use crate::state::AppState;

// By name: the console's outer route holds a parameter of its own.
#[derive(Deserialize)]
pub(super) struct IdPath {
    id: i64,
}

#[derive(Deserialize)]
pub(super) struct KeyPath {
    key: String,
}

/// What the console's state shows of webhooks and inbound URLs.
pub(super) async fn view(state: &AppState) -> Result<Value> {
    let store = state.core.store.as_ref();
    let hooks: Vec<Value> = store
        .list_webhooks()
        .await?
        .iter()
        .map(present::webhook::listed)
        .collect();
    let inbound: Vec<Value> = store
        .list_inbound()
        .await?
        .iter()
        .map(|i| {
            let mut v = json!(i);
            v["path"] = json!(webhooks::inbound_path(&i.key));
            v
        })
        .collect();
    Ok(json!({"webhooks": hooks, "inbound": inbound}))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewWebhookBody {
    room: String,
    url: String,
    #[serde(default)]
    events: String,
    #[serde(default)]
    format: Option<String>,
}

/// Adds a webhook; its signing secret is answered this once.
#[utoipa::path(
    post,
    path = "/v1/admin/webhooks",
    tag = "admin",
    operation_id = "admin_add_webhook",
    request_body(content = NewWebhookBody, content_type = "application/json"),
    responses((status = 201, description = "The webhook, with `secret` shown once (`standard` format)", body = Object)),
)]
pub(super) async fn add_webhook(
    State(state): State<AppState>,
    actor: Admin,
    JsonBody(b): JsonBody<NewWebhookBody>,
) -> Result<Response> {
    let format = b.format.unwrap_or_else(|| "standard".into());
    let call = actor.call("admin.add_webhook");
    let owner = Owner::console(&call, actor.addr);
    let hook = state
        .core
        .owner_add_webhook(&owner, b.room.trim(), &b.url, &format, &b.events)
        .await?;
    let shown_once = hook.secret.is_some();
    Ok(created(
        &hook,
        json!({"secret": hook.secret, "shown_once": shown_once, "ok": true}),
    ))
}

/// Removes a webhook.
#[utoipa::path(
    delete,
    path = "/v1/admin/webhooks/{id}",
    tag = "admin",
    operation_id = "admin_remove_webhook",
    params(("id" = i64, Path, description = "The webhook's id")),
    responses((status = 200, description = "`{ok, removed}`", body = Object)),
)]
pub(super) async fn remove_webhook(
    State(state): State<AppState>,
    actor: Admin,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<Value>> {
    let call = actor.call("admin.remove_webhook");
    let owner = Owner::console(&call, actor.addr);
    state.core.owner_remove_webhook(&owner, id).await?;
    Ok(Json(json!({"ok": true, "removed": id})))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NewInboundBody {
    room: String,
    agent: String,
}

/// Adds an inbound URL; its secret is answered this once.
#[utoipa::path(
    post,
    path = "/v1/admin/inbound",
    tag = "admin",
    operation_id = "admin_add_inbound",
    request_body(content = NewInboundBody, content_type = "application/json"),
    responses((status = 201, description = "The inbound URL's `key` and `path`, with `secret` shown once", body = Object)),
)]
pub(super) async fn add_inbound(
    State(state): State<AppState>,
    actor: Admin,
    JsonBody(b): JsonBody<NewInboundBody>,
) -> Result<Response> {
    let call = actor.call("admin.add_inbound");
    let owner = Owner::console(&call, actor.addr);
    let i = state
        .core
        .owner_add_inbound(&owner, b.room.trim(), b.agent.trim())
        .await?;
    let path = webhooks::inbound_path(&i.key);
    Ok(created(
        &i,
        json!({"path": path, "secret": i.secret, "shown_once": true, "ok": true}),
    ))
}

/// Removes an inbound URL.
#[utoipa::path(
    delete,
    path = "/v1/admin/inbound/{key}",
    tag = "admin",
    operation_id = "admin_remove_inbound",
    params(("key" = String, Path, description = "The inbound URL's key (`in_…`)")),
    responses((status = 200, description = "`{ok, removed}`", body = Object)),
)]
pub(super) async fn remove_inbound(
    State(state): State<AppState>,
    actor: Admin,
    Path(KeyPath { key }): Path<KeyPath>,
) -> Result<Json<Value>> {
    let call = actor.call("admin.remove_inbound");
    let owner = Owner::console(&call, actor.addr);
    state.core.owner_remove_inbound(&owner, &key).await?;
    Ok(Json(json!({"ok": true, "removed": key})))
}
