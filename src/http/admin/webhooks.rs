//! The console's webhooks and inbound URLs (SPEC §7a): listed in the
//! state, added and removed here through the same domain functions as
//! `chatroom admin add-webhook` and `add-inbound`. Secrets are answered
//! once, at creation; target URLs are listed by their origin only.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Actor, JsonBody, record};
use crate::domain::webhooks;
use crate::error::{Error, Result};
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
        .map(|h| {
            let mut v = json!(h);
            v["url"] = json!(crate::webhooks::shown_url(&h.url));
            v
        })
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewWebhookBody {
    room: String,
    url: String,
    #[serde(default)]
    events: String,
    #[serde(default)]
    format: Option<String>,
}

pub(super) async fn add_webhook(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(b): JsonBody<NewWebhookBody>,
) -> Result<Response> {
    let format = b.format.unwrap_or_else(|| "standard".into());
    let now = state.core.clock.now_ms();
    let hook = webhooks::add_webhook(
        state.core.store.as_ref(),
        b.room.trim(),
        &b.url,
        &format,
        &b.events,
        now,
    )
    .await?;
    let target = format!(
        "webhook #{} on room {} ({}, {})",
        hook.id,
        hook.room,
        hook.format,
        crate::webhooks::shown_url(&hook.url)
    );
    record(&state, &actor, "webhook.add", target, false).await;
    let mut v = json!(hook);
    v["secret"] = json!(hook.secret);
    v["shown_once"] = json!(hook.secret.is_some());
    v["ok"] = json!(true);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

pub(super) async fn remove_webhook(
    State(state): State<AppState>,
    actor: Actor,
    Path(IdPath { id }): Path<IdPath>,
) -> Result<Json<Value>> {
    if !state.core.store.delete_webhook(id).await? {
        return Err(Error::not_found(format!("no webhook {id}")));
    }
    record(
        &state,
        &actor,
        "webhook.remove",
        format!("webhook #{id}"),
        false,
    )
    .await;
    Ok(Json(json!({"ok": true, "removed": id})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewInboundBody {
    room: String,
    agent: String,
}

pub(super) async fn add_inbound(
    State(state): State<AppState>,
    actor: Actor,
    JsonBody(b): JsonBody<NewInboundBody>,
) -> Result<Response> {
    let now = state.core.clock.now_ms();
    let i = webhooks::add_inbound(
        state.core.store.as_ref(),
        b.room.trim(),
        b.agent.trim(),
        now,
    )
    .await?;
    let target = format!("inbound URL for agent {} in room {}", i.agent, i.room);
    record(&state, &actor, "inbound.add", target, false).await;
    let mut v = json!(i);
    v["path"] = json!(webhooks::inbound_path(&i.key));
    v["secret"] = json!(i.secret);
    v["shown_once"] = json!(true);
    v["ok"] = json!(true);
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

pub(super) async fn remove_inbound(
    State(state): State<AppState>,
    actor: Actor,
    Path(KeyPath { key }): Path<KeyPath>,
) -> Result<Json<Value>> {
    if !state.core.store.delete_inbound(&key).await? {
        return Err(Error::not_found("no such inbound URL"));
    }
    record(
        &state,
        &actor,
        "inbound.remove",
        format!("inbound URL {key}"),
        false,
    )
    .await;
    Ok(Json(json!({"ok": true})))
}
