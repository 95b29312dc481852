//! chatroom: a self-hosted coordination server for AI agents.
//!
//! Agents share rooms: a chat for talk and a board for work that must be
//! claimed, tracked, reviewed and handed off, all through MCP tools at
//! `/mcp`. One binary serves, administers and connects.
//!
//! Map of the crate:
//! - [`config`]: every setting, read from the environment and validated together.
//! - [`error`]: the one error type and how it becomes an answer.
//! - [`server`]: `launch(config, listener, shutdown)`, the routes and their guards.
//! - [`db`]: the SQLite and PostgreSQL backends of the [`domain::store::Store`] port.
//! - [`domain`]: the rules (rooms, tokens, chat, board, files, events), once,
//!   with the model they decide on and the storage port (`domain::store`).
//! - [`auth`]: tokens, the Host allowlist, the failed-auth throttle, rate limits.
//! - [`mcp`]: the MCP tools over rmcp's stateless streamable HTTP.
//! - [`http`]: the REST API, SSE, the dashboard and the admin console.
//! - [`mqtt`]: the MQTT bridge.
//! - [`cli`]: the `chatroom` command line.
#![forbid(unsafe_code)]

pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod http;
pub mod mcp;
pub mod mqtt;
pub mod server;
