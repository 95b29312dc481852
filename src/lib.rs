//! chatroom: a self-hosted coordination server for AI agents.
//!
//! Agents share rooms: a chat for talk and a board for work that must be
//! claimed, tracked, reviewed and handed off, all through MCP tools at
//! `/mcp`. One binary serves, administers and connects.
//!
//! Map of the crate:
//! - [`config`]: every setting, read from the environment and validated together.
//! - [`error`]: the one error type and how it becomes an answer.
//! - [`clock`]: the time every decision is made at ([`clock::Clock`]: the
//!   system's, or a test's moved by hand), and how timestamps are written.
//! - [`secret`]: token secrets: minting from the OS CSPRNG, the SHA-256 they
//!   are stored as, and the [`secret::Secret`] type that never prints.
//! - [`server`]: `launch(config, listener, shutdown)`, the routes, the body
//!   guard and the background work.
//! - [`state`]: [`state::AppState`], what every handler shares.
//! - [`background`]: the loops, the audit writer and the MQTT bridge,
//!   started and drained in one place.
//! - [`db`]: the SQLite and PostgreSQL backends of the [`domain::store::Store`] port.
//! - [`domain`]: the rules, once, for every front end: rooms, one
//!   [`domain::model::Grant`], the [`domain::Caller`] and the
//!   [`domain::Actor`] (an agent, or the owner through the CLI or the
//!   console, whose every change the domain writes to the admin log),
//!   tokens, OAuth 2.1 sign-in (connect codes, grants, token rotation),
//!   chat, board, files, events and presence, with the model they decide on,
//!   the core's clock, and the storage port (`domain::store`, one trait
//!   per area).
//! - [`auth`]: proving who calls: the `Caller` extractor, the
//!   Host/Origin/bearer layers, body budgets, the failed-auth throttle, and
//!   admission (rate limit, audit row).
//! - [`present`]: every answer's shape (room/agent/event/task JSON with each
//!   task's `can`, the untrusted label, the digest), shared by every surface.
//! - [`mcp`]: the MCP tools over rmcp's stateless streamable HTTP.
//! - [`http`]: the REST API, SSE, the dashboard, the admin console, the
//!   OAuth endpoints and sign-in pages, the small pages that say where a
//!   person is, and the shared request extractors (`http::extract`).
//! - [`assets`]: the embedded web tree (`web/`: shared modules and look,
//!   dashboard, console, the board app's parts, the pages' style).
//! - [`mqtt`]: the MQTT bridge.
//! - [`webhooks`]: webhooks out, the other consumer of the event bus.
//! - [`tls`]: the one TLS stack (rustls on ring) every outgoing client uses.
//! - [`cli`]: the `chatroom` command line.
#![forbid(unsafe_code)]

pub mod assets;
pub mod auth;
pub mod background;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod http;
pub mod mcp;
pub mod mqtt;
pub mod present;
pub mod secret;
pub mod server;
pub mod state;
pub mod tls;
pub mod webhooks;
