//! Storage: the implementations of the domain's [`Store`] port, SQLite (the
//! embedded default) and PostgreSQL, chosen by the database URL. Each write
//! method is one transaction that makes the change and stores the domain's
//! [`Record`] of it (events, mentions, audit row) together, so an event
//! never exists without its change or the other way. The rules (who may,
//! which transitions, what an event says, who is the actor) are not here:
//! they live in `domain/`, which decides; the store only writes what was
//! decided, guarded by the version it was decided on. This module imports
//! from `domain/` and never the other way.
//!
//! What the two backends share lives here once: the schema (`tables.rs`,
//! for copies), the column lists of the rows they read (`columns.rs`), how
//! each model reads such a row (`rows.rs`), and the event and file a write
//! answers with.
//!
//! On PostgreSQL any number of replicas share the database: everything that
//! must hold across them (claims, versions, event order, token revocation)
//! is enforced in the database, and each replica's store relays the events
//! of the others to its in-process bus ([`Store::start_relay`]).

#[macro_use]
mod columns;
mod batch;
pub mod postgres;
mod rows;
pub mod sqlite;
mod tables;

use std::sync::Arc;

use crate::domain::limits;
use crate::domain::model::*;
use crate::domain::store::prelude::*;
use crate::domain::store::{CursorRead, NewMessage, Page};
use crate::error::Result;
use rows::*;
pub use tables::{Col, TABLES, Table};

/// The answer to a search stopped at its time limit
/// ([`limits::SEARCH_MILLIS`]), on either backend.
fn search_too_slow() -> crate::error::Error {
    crate::error::Error::invalid(format!(
        "the search ran for {} ms and was stopped; search for rarer or more words",
        limits::SEARCH_MILLIS
    ))
}

/// The bound of a mentions read after `since_id`, for both backends'
/// `seq > bound`: `since_id` 0 (from the start) keeps the notes placed
/// before any message, at `seq` 0. One bare comparison is a range of the
/// `(room, agent, seq)` index, where `seq > x OR x = 0` would be a filter
/// over every mention the agent ever had.
fn mentions_after(since_id: i64) -> i64 {
    if since_id == 0 { -1 } else { since_id }
}

/// The event `e` of a write by `actor` in `room` at `now`, as stored with
/// `id` (both backends answer a write with its stored events).
fn stored_event(room: &str, now: i64, actor: &str, e: NewEvent, id: i64) -> Event {
    Event {
        id,
        room: room.to_owned(),
        ts: now,
        kind: e.kind.as_str().to_owned(),
        actor: actor.to_owned(),
        task_id: e.task_id,
        message_id: e.message_id,
        detail: e.detail,
    }
}

/// The metadata of file `f`, stored with `id` by the record's actor.
fn stored_file(id: i64, f: &NewFile, record: &Record) -> FileMeta {
    FileMeta {
        file_id: id,
        name: f.name.clone(),
        sha256: f.sha256.clone(),
        size: f.content.len() as i64,
        mime: f.mime.clone(),
        author: record.actor.clone(),
        ts: record.now,
        expires_at: f.expires_at,
        task_id: f.task_id,
    }
}

/// The broken build that `tests/history` must catch, in `history-fault`
/// builds only: with `CHATROOM_HISTORY_FAULT=unguarded-claim` a claim is
/// written without its version guard (decided on the task as read, written
/// whatever happened since). Every other change, and every other build,
/// keeps `sql` as it is.
#[cfg(feature = "history-fault")]
pub(crate) fn unguard(sql: &str, c: &TaskChange) -> String {
    let claim = c
        .record
        .events
        .iter()
        .any(|e| e.kind == EventKind::TaskClaimed);
    if claim && std::env::var("CHATROOM_HISTORY_FAULT").as_deref() == Ok("unguarded-claim") {
        // Versions are positive: `version <> -N` holds for every row.
        sql.replace("AND version = ", "AND version <> -")
    } else {
        sql.to_owned()
    }
}

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://…`),
/// creating and migrating it as needed.
pub async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        Ok(Arc::new(sqlite::SqliteStore::open(path).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PostgresStore::open(url).await?))
    } else {
        anyhow::bail!("unsupported database URL (expected sqlite://PATH or postgres://…)")
    }
}
