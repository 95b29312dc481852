//! What `GET /v1/admin/state` shows: the server's posture (which protections
//! are on, its URLs and limits, the MQTT bridge), counts, rooms, tokens and
//! the admin log. Nothing here ever holds a raw token (none is stored), a
//! database URL or a broker credential.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::domain::model::{AdminLogEntry, RoomSummary, TokenRecord};
use crate::state::AppState;

/// How many admin log entries the state carries.
pub const LOG_ENTRIES: i64 = 200;

/// Which protections are on, and the settings an operator checks.
pub fn posture(state: &AppState, headers: &HeaderMap) -> Value {
    let c = &state.config;
    let m = &state.mqtt;
    let mqtt = json!({
        "configured": c.mqtt.is_some(),
        "enabled": m.enabled.load(Ordering::Relaxed),
        "connected": m.connected.load(Ordering::Relaxed),
        "published": m.published.load(Ordering::Relaxed),
        "dropped": m.dropped.load(Ordering::Relaxed),
        // Host, port, prefix and TLS only: the user and password stay out.
        "host": c.mqtt.as_ref().map(|m| m.host.clone()),
        "port": c.mqtt.as_ref().map(|m| m.port),
        "prefix": c.mqtt.as_ref().map(|m| m.prefix.clone()),
        "tls": c.mqtt.as_ref().map(|m| m.tls),
        "ha_discovery": c.mqtt.as_ref().map(|m| m.ha_discovery),
    });
    json!({
        "host_check": {
            "on": c.allowed_hosts.is_some(),
            "allowed_hosts": c.allowed_hosts.as_ref().map(|rules| rules.iter().map(|r| r.display()).collect::<Vec<_>>()),
        },
        "allowed_origins": c.allowed_origins,
        "throttle": {
            "on": c.auth_fail_limit > 0,
            "limit": c.auth_fail_limit,
            "window_s": c.auth_fail_window.as_secs(),
            "tracked_addresses": state.throttle.tracked(),
        },
        "trust_proxy": c.trust_proxy,
        "rate_limit": {
            "on": c.rate_limit_per_minute > 0,
            "per_minute": c.rate_limit_per_minute,
        },
        "ui": c.enable_ui,
        "admin_api": c.admin_api,
        "console_lan_only": c.console_lan_only,
        "public_hosts": c.public_hosts,
        "urls": {
            "lan_url": c.lan_url,
            "public_url": c.public_url,
            "reached": super::setup::reached_url(c, headers),
        },
        "max_file_bytes": c.max_file_bytes,
        "max_wait_s": c.max_wait.as_secs(),
        "prune": {"on": c.prune, "interval_s": c.prune_interval.as_secs()},
        "database": if c.database_url.is_some() { "postgres" } else { "sqlite" },
        "mqtt": mqtt,
    })
}

/// A token as the console lists it: the stored record (which holds no raw
/// value) plus whether it is the caller's own.
pub fn token_view(t: &TokenRecord, caller: &Caller) -> Value {
    let mut v = json!(t);
    v["is_you"] = json!(t.id == caller.token_id);
    v["you_agent"] = json!(t.grant.agent == caller.agent);
    v["whole_server_admin"] = json!(t.grant.admin && t.grant.all_rooms);
    // ChatRoomMCP's flag beside our `revoked_ts`.
    v["revoked"] = json!(t.revoked_ts.is_some());
    v
}

/// The whole console state in one answer.
pub fn state_view(
    state: &AppState,
    headers: &HeaderMap,
    caller: &Caller,
    rooms: &[RoomSummary],
    tokens: &[TokenRecord],
    log: &[AdminLogEntry],
) -> Value {
    let active: Vec<&TokenRecord> = tokens.iter().filter(|t| t.revoked_ts.is_none()).collect();
    let agents: BTreeSet<&str> = active.iter().map(|t| t.grant.agent.as_str()).collect();
    let (lan, _) = super::setup::base_urls(&state.config, headers);
    json!({
        // The two client URLs at the top, where ChatRoomMCP's clients read
        // them: the LAN one (configured, else as the console was reached)
        // and the public one (configured only, never guessed; else null).
        "lan_url": lan.url,
        "public_url": state.config.public_url,
        "server": {"name": "chatroom", "version": env!("CARGO_PKG_VERSION")},
        "you": {"agent": caller.agent, "token_id": caller.token_id},
        "posture": posture(state, headers),
        "counts": {
            "rooms": rooms.len(),
            "tokens": tokens.len(),
            "active_tokens": active.len(),
            "revoked_tokens": tokens.len() - active.len(),
            "agents": agents.len(),
        },
        "rooms": rooms,
        "tokens": tokens.iter().map(|t| token_view(t, caller)).collect::<Vec<_>>(),
        "log": log,
    })
}
