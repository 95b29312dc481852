//! The storage contract, below the domain: every `Store` method, called the
//! way the domain calls it, on SQLite always and on PostgreSQL when
//! `CHATROOM_TEST_PG_URL` is set, so the two backends are held to the same
//! answers directly and not only through MCP. Also the lease rules on an
//! injected clock, which move time without sleeping.

mod common;

use std::sync::Arc;
use std::time::Duration;

use chatroom::clock::Clock;
use chatroom::db;
use chatroom::domain::chat::message_record;
use chatroom::domain::model::*;
use chatroom::domain::store::oauth::{ClientLimit, ConnectApproval};
use chatroom::domain::store::prelude::*;
use chatroom::domain::store::{CursorRead, NewMessage, Page};
use chatroom::domain::{Call, Core, Settings, rooms};
use common::{Grant, PgDatabase, pg_server};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// One backend under test, with what keeps its database alive.
struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
    dir: tempfile::TempDir,
    _pg: Option<PgDatabase>,
}

/// A fresh SQLite store, and a fresh PostgreSQL one when a server is given.
async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let mut out = vec![Backend {
        name: "sqlite",
        store: db::open(&url).await.unwrap(),
        dir,
        _pg: None,
    }];
    if let Some(server) = pg_server() {
        let pg = PgDatabase::create(&server).await;
        out.push(Backend {
            name: "postgres",
            store: db::open(&pg.url).await.unwrap(),
            dir: tempfile::tempdir().unwrap(),
            _pg: Some(pg),
        });
    }
    out
}

const NOW: i64 = 1_800_000_000_000;

fn room(name: &str) -> Room {
    Room {
        name: name.into(),
        description: "d".into(),
        repo_url: String::new(),
        onboarding_notes: String::new(),
        retention_days: 0,
    }
}

fn token(hash: &str, agent: &str, room: &str) -> NewToken {
    NewToken {
        hash: hash.into(),
        grant: Grant {
            agent: agent.into(),
            room: room.into(),
            skills: vec!["rust".into()],
            ..Grant::default()
        },
    }
}

fn new_task(title: &str, depends_on: Vec<i64>) -> NewTask {
    NewTask {
        title: title.into(),
        body: "body".into(),
        depends_on,
        status: Status::Pending,
        assignee: None,
        created_by: "alice".into(),
        priority: "normal".into(),
        required_skill: None,
        needs_review: false,
        record: created(NOW),
    }
}

/// A message of `body`, answering `reply_to`.
fn message(body: &str, reply_to: Option<i64>) -> NewMessage<'_> {
    NewMessage { body, reply_to }
}

/// A read after `agent`'s cursor in `room`.
fn cursor_read<'a>(
    room: &'a str,
    agent: &'a str,
    limit: i64,
    advance: bool,
    skip_own: bool,
) -> CursorRead<'a> {
    CursorRead {
        room,
        agent,
        limit,
        advance,
        skip_own,
    }
}

fn created(now: i64) -> Record {
    Record::new("alice", Some("create_task"), now).event(
        EventKind::TaskCreated,
        None,
        None,
        json!({}),
    )
}

/// A change of `task` to `status`, by `actor`, with an optional note.
fn change(task: &Task, status: Status, actor: &str, note: Option<&str>, now: i64) -> TaskChange {
    let mut record = Record::new(actor, Some("update_task"), now).event(
        EventKind::TaskUpdated,
        Some(task.id),
        None,
        json!({}),
    );
    record.task_id = Some(task.id);
    if let Some(n) = note {
        record.mentions = chatroom::domain::chat::mentions(n);
        record = record.event(EventKind::NoteAdded, Some(task.id), None, json!({}));
    }
    TaskChange {
        task_id: task.id,
        expected_version: task.version,
        status,
        assignee: Some(actor.into()),
        body: task.body.clone(),
        result: None,
        lease_seconds: None,
        lease_expires_ts: None,
        note: note.map(str::to_owned),
        record,
    }
}

/// Rooms: create (once), read, list with counts, change info and retention, delete.
#[tokio::test]
async fn rooms_round_trip() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.health().await.unwrap();
        assert!(s.create_room(&room("lobby"), NOW).await.unwrap(), "{n}");
        assert!(
            !s.create_room(&room("lobby"), NOW).await.unwrap(),
            "{n}: twice"
        );
        assert_eq!(
            s.get_room("lobby").await.unwrap(),
            Some(room("lobby")),
            "{n}"
        );
        assert_eq!(s.get_room("nowhere").await.unwrap(), None, "{n}");
        let info = RoomInfo {
            repo_url: Some("https://example.org/r".into()),
            ..RoomInfo::default()
        };
        let (updated, event) = s
            .update_room_info(
                "lobby",
                &info,
                rooms::info_changed(&info, rooms::by_admin(NOW)),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(updated.repo_url, "https://example.org/r", "{n}");
        assert_eq!(updated.description, "d", "{n}: untouched fields stay");
        assert_eq!(event.kind, "room_info_updated", "{n}");
        assert_eq!(event.actor, ADMIN_ACTOR, "{n}");
        assert_eq!(event.detail["fields"], json!(["repo_url"]), "{n}");
        assert!(
            s.update_room_info("nowhere", &info, rooms::by_admin(NOW))
                .await
                .unwrap()
                .is_none(),
            "{n}"
        );
        // An old message is pruned by setting a retention; the event says so.
        let old = message_record(
            Record::new("alice", None, NOW - 3 * 86_400_000),
            "old",
            None,
        );
        s.post_message("lobby", message("old", None), old)
            .await
            .unwrap();
        let (event, pruned) = s
            .set_retention(
                "lobby",
                2,
                rooms::retention_set(2, Record::new("alice", Some("set_retention"), NOW)),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(pruned.messages, 1, "{n}");
        assert_eq!(event.kind, "retention_set", "{n}");
        assert_eq!(event.detail["days"], 2, "{n}");
        assert_eq!(event.detail["pruned"]["messages"], 1, "{n}");
        assert_eq!(
            s.get_room("lobby").await.unwrap().unwrap().retention_days,
            2
        );
        let fresh = message_record(Record::new("alice", None, NOW), "fresh", None);
        s.post_message("lobby", message("fresh", None), fresh)
            .await
            .unwrap();
        // Prune as of a day later removes nothing new; three days later, the rest.
        assert_eq!(s.prune(NOW + 86_400_000).await.unwrap().messages, 0, "{n}");
        assert_eq!(
            s.prune(NOW + 3 * 86_400_000).await.unwrap().messages,
            1,
            "{n}"
        );
        s.create_room(&room("side"), NOW).await.unwrap();
        let list = s.list_rooms(NOW).await.unwrap();
        assert_eq!(
            list.iter()
                .map(|r| r.room.name.as_str())
                .collect::<Vec<_>>(),
            ["lobby", "side"],
            "{n}"
        );
        assert!(s.delete_room("side").await.unwrap(), "{n}");
        assert!(!s.delete_room("side").await.unwrap(), "{n}: twice");
        assert_eq!(s.list_rooms(NOW).await.unwrap().len(), 1, "{n}");
    }
}

/// Tokens: insert, find by hash, list, revoke, purge; members and presence.
#[tokio::test]
async fn tokens_and_presence() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let id = s
            .insert_token(&token("h1", "alice", "lobby"), NOW)
            .await
            .unwrap();
        s.insert_token(&token("h2", "bob", "lobby"), NOW)
            .await
            .unwrap();
        let t = s.token_by_hash("h1").await.unwrap().unwrap();
        assert_eq!(
            (t.id, t.grant.agent.as_str(), t.created_ts),
            (id, "alice", NOW),
            "{n}"
        );
        assert_eq!(t.grant.skills, ["rust"], "{n}");
        assert!(s.token_by_hash("nope").await.unwrap().is_none(), "{n}");
        s.save_presence(&[("lobby".into(), "alice".into(), NOW + 5)])
            .await
            .unwrap();
        let members = s.members("lobby").await.unwrap();
        assert_eq!(members.len(), 2, "{n}");
        assert_eq!(members[0].agent, "alice", "{n}");
        assert_eq!(members[0].last_seen, Some(NOW + 5), "{n}");
        let listed = s.list_tokens().await.unwrap();
        assert_eq!(listed.len(), 2, "{n}");
        assert_eq!(listed[0].last_seen, Some(NOW + 5), "{n}");
        assert_eq!(s.revoke_agent("bob", NOW + 10).await.unwrap(), 1, "{n}");
        assert_eq!(s.revoke_agent("bob", NOW + 11).await.unwrap(), 0, "{n}");
        assert_eq!(s.members("lobby").await.unwrap().len(), 1, "{n}");
        assert_eq!(s.purge_tokens(NOW + 9).await.unwrap(), 0, "{n}");
        assert_eq!(s.purge_tokens(NOW + 10).await.unwrap(), 1, "{n}");
        assert!(s.token_by_hash("h2").await.unwrap().is_none(), "{n}");
    }
}

/// Each token keeps its own last use (a later stamp wins, an older one never
/// moves it back), apart from its agent's other tokens; one token is revoked
/// alone, once.
#[tokio::test]
async fn each_token_its_own_last_use_and_revocation() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let used = s
            .insert_token(&token("u1", "alice", "lobby"), NOW)
            .await
            .unwrap();
        let idle = s
            .insert_token(&token("u2", "alice", "lobby"), NOW)
            .await
            .unwrap();
        s.save_token_use(&[(used, NOW + 7), (used, NOW + 6)])
            .await
            .unwrap();
        s.save_token_use(&[(used, NOW + 5), (9_999, NOW)])
            .await
            .unwrap();
        s.save_presence(&[("lobby".into(), "alice".into(), NOW + 8)])
            .await
            .unwrap();
        let listed = s.list_tokens().await.unwrap();
        let of = |id: i64| listed.iter().find(|t| t.id == id).unwrap().clone();
        assert_eq!(of(used).last_used, Some(NOW + 7), "{n}");
        assert_eq!(of(idle).last_used, None, "{n}: never used");
        assert_eq!(
            of(idle).last_seen,
            Some(NOW + 8),
            "{n}: the agent's presence"
        );
        assert!(s.revoke_token(idle, NOW + 9).await.unwrap(), "{n}");
        assert!(!s.revoke_token(idle, NOW + 10).await.unwrap(), "{n}: twice");
        assert!(
            !s.revoke_token(9_999, NOW).await.unwrap(),
            "{n}: no such token"
        );
        assert!(
            s.token_by_hash("u1")
                .await
                .unwrap()
                .unwrap()
                .revoked_ts
                .is_none(),
            "{n}"
        );
        assert_eq!(
            s.token_by_hash("u2").await.unwrap().unwrap().revoked_ts,
            Some(NOW + 9),
            "{n}"
        );
    }
}

/// Agent status: a state and an attention switch are kept with their
/// times; hook marks keep their latest; push marks are set as given (`0`
/// clears one); deleting the room removes the rows.
#[tokio::test]
async fn agent_status_round_trip() {
    use chatroom::domain::model::ReachMark;
    use chatroom::domain::presence::{State, Switch};
    use chatroom::domain::push::Attention;
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let state = |s: &str| Switch::State(State::named(s).unwrap());
        s.save_switch("lobby", "alice", state("working"), NOW)
            .await
            .unwrap();
        let dnd = Switch::Attention(Attention::Dnd);
        s.save_switch("lobby", "alice", dnd, NOW + 1).await.unwrap();
        s.save_switch("lobby", "alice", state("waiting"), NOW + 2)
            .await
            .unwrap();
        let mark = |hook: Option<i64>, push: Option<i64>| ReachMark {
            room: "lobby".into(),
            agent: "bob".into(),
            hook_seen_ts: hook,
            push_seen_ts: push,
        };
        s.save_reach_marks(&[mark(Some(NOW + 9), Some(NOW)), mark(Some(NOW + 3), None)])
            .await
            .unwrap();
        let st = s.agent_statuses("lobby").await.unwrap();
        assert_eq!(st.len(), 2, "{n}");
        assert_eq!(st[0].agent, "alice", "{n}");
        assert_eq!(st[0].state.as_deref(), Some("waiting"), "{n}");
        assert_eq!(st[0].state_ts, Some(NOW + 2), "{n}");
        assert_eq!(st[0].attention.as_deref(), Some("dnd"), "{n}");
        assert_eq!(
            st[1].hook_seen_ts,
            Some(NOW + 9),
            "{n}: the latest hook stays"
        );
        assert_eq!(st[1].push_seen_ts, Some(NOW), "{n}");
        s.save_reach_marks(&[mark(None, Some(0))]).await.unwrap();
        let st = s.agent_statuses("lobby").await.unwrap();
        assert_eq!(st[1].push_seen_ts, Some(0), "{n}: cleared");
        assert_eq!(st[1].hook_seen_ts, Some(NOW + 9), "{n}");
        assert!(s.delete_room("lobby").await.unwrap());
        assert!(s.agent_statuses("lobby").await.unwrap().is_empty(), "{n}");
    }
}

/// Chat, events and cursors: a message writes its event, mentions and audit
/// row; cursors advance only when asked.
#[tokio::test]
async fn chat_events_and_cursors() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let before = s.audit_count().await.unwrap();
        let record = message_record(
            Record::new("alice", Some("post_message"), NOW),
            "hi @bob",
            None,
        );
        let (m, e) = s
            .post_message("lobby", message("hi @bob", None), record)
            .await
            .unwrap();
        assert_eq!(
            (m.author.as_str(), m.ts, m.body.as_str()),
            ("alice", NOW, "hi @bob")
        );
        assert_eq!(e.kind, "message", "{n}");
        assert_eq!(e.message_id, Some(m.id), "{n}");
        assert_eq!(e.actor, "alice", "{n}");
        assert_eq!(e.detail["mentions"], json!(["bob"]), "{n}");
        assert_eq!(s.audit_count().await.unwrap(), before + 1, "{n}: audited");
        let reply = message_record(Record::new("bob", None, NOW + 1), "yes", Some(m.id));
        let (r, _) = s
            .post_message("lobby", message("yes", Some(m.id)), reply)
            .await
            .unwrap();
        assert_eq!(r.reply_to, Some(m.id), "{n}");
        assert_eq!(
            s.audit_count().await.unwrap(),
            before + 1,
            "{n}: no tool, no row"
        );
        let read = s.read_messages("lobby", 0, 10).await.unwrap();
        assert_eq!(read.iter().map(|m| m.id).collect::<Vec<_>>(), [m.id, r.id]);
        assert_eq!(s.read_messages("lobby", m.id, 10).await.unwrap().len(), 1);
        assert_eq!(
            s.message_origin(m.id).await.unwrap(),
            Some(("lobby".to_owned(), m.author.clone()))
        );
        assert_eq!(s.latest_message_id("lobby").await.unwrap(), r.id, "{n}");
        let mentions = s
            .my_mentions(
                "lobby",
                "bob",
                Page {
                    since_id: 0,
                    limit: 10,
                },
            )
            .await
            .unwrap();
        assert_eq!(mentions.len(), 1, "{n}");
        assert_eq!(mentions[0].message_id, Some(m.id), "{n}");
        // Events, filtered.
        let all = s
            .read_events(
                "lobby",
                &EventFilter {
                    since_id: 0,
                    limit: 10,
                    kind: None,
                    task_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(all.len(), 2, "{n}");
        let latest = s.latest_event_id("lobby").await.unwrap();
        assert_eq!(latest, all[1].id, "{n}");
        let none = s
            .read_events(
                "lobby",
                &EventFilter {
                    since_id: 0,
                    limit: 10,
                    kind: Some("task_created".into()),
                    task_id: None,
                },
            )
            .await
            .unwrap();
        assert!(none.is_empty(), "{n}");
        // Cursors: a peek leaves it; an advance moves it past the page.
        assert_eq!(
            s.peer_event_after_cursor("lobby", "alice").await.unwrap(),
            Some(all[1].id)
        );
        let peek = s
            .events_after_cursor(cursor_read("lobby", "alice", 10, false, true))
            .await
            .unwrap();
        assert!(peek.first_look, "{n}");
        assert_eq!(peek.events.len(), 1, "{n}: own events skipped");
        assert_eq!(s.cursor("lobby", "alice").await.unwrap(), 0, "{n}");
        let page = s
            .events_after_cursor(cursor_read("lobby", "alice", 1, true, false))
            .await
            .unwrap();
        assert_eq!((page.events.len(), page.remaining), (1, 1), "{n}");
        assert_eq!(s.cursor("lobby", "alice").await.unwrap(), all[0].id, "{n}");
        let page = s
            .events_after_cursor(cursor_read("lobby", "alice", 10, true, false))
            .await
            .unwrap();
        assert!(!page.first_look, "{n}");
        assert_eq!((page.since, page.remaining), (all[0].id, 0), "{n}");
        assert_eq!(
            s.peer_event_after_cursor("lobby", "alice").await.unwrap(),
            None
        );
        assert_eq!(s.cursor("lobby", "alice").await.unwrap(), latest, "{n}");
        // A cursor is set back only from where it is.
        let back = s.reset_cursor("lobby", "alice", latest + 1, 0).await;
        assert!(!back.unwrap(), "{n}: not where it is");
        assert_eq!(s.cursor("lobby", "alice").await.unwrap(), latest, "{n}");
        let back = s.reset_cursor("lobby", "alice", latest, all[0].id).await;
        assert!(back.unwrap(), "{n}");
        assert_eq!(s.cursor("lobby", "alice").await.unwrap(), all[0].id, "{n}");
        assert!(
            !s.reset_cursor("lobby", "carol", 0, 0).await.unwrap(),
            "{n}"
        );
        // Search finds the message by a word of it.
        let hits = s.search("lobby", &["hi".into()], 10).await.unwrap();
        assert_eq!(hits.len(), 1, "{n}");
        assert_eq!(hits[0].message_id, Some(m.id), "{n}");
    }
}

/// Audit rows and the admin log.
#[tokio::test]
async fn audit_and_admin_log() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        let before = s.audit_count().await.unwrap();
        let row = AuditRow {
            ts: NOW,
            agent: "alice".into(),
            room: Some("lobby".into()),
            tool: "read_messages".into(),
            task_id: None,
            outcome: "ok".into(),
        };
        s.insert_audit(&[row.clone(), row]).await.unwrap();
        s.insert_audit(&[]).await.unwrap();
        assert_eq!(s.audit_count().await.unwrap(), before + 2, "{n}");
        for action in ["first", "second"] {
            s.insert_admin_log(&AdminLogEntry {
                id: 0,
                ts: NOW,
                actor: "owner".into(),
                address: "127.0.0.1".into(),
                action: action.into(),
                target: "lobby".into(),
                flagged: false,
            })
            .await
            .unwrap();
        }
        let log = s.admin_log(10).await.unwrap();
        assert_eq!(
            log.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
            ["second", "first"],
            "{n}: newest first"
        );
    }
}

/// The board: create with dependencies, a guarded change with a note and its
/// mentions, a stale change that writes nothing, counts and leases.
#[tokio::test]
async fn board_round_trip() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let (dep, events) = s
            .create_task("lobby", new_task("dep", vec![]))
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{n}");
        assert_eq!(
            events[0].task_id,
            Some(dep.id),
            "{n}: the new id is stamped"
        );
        assert_eq!(dep.created_ts, NOW, "{n}");
        let (task, _) = s
            .create_task("lobby", new_task("main", vec![dep.id]))
            .await
            .unwrap();
        assert_eq!(task.depends_on, [dep.id], "{n}");
        assert_eq!(task.blocked_by_unfinished, [dep.id], "{n}");
        assert_eq!(
            s.get_task("lobby", task.id).await.unwrap().as_ref(),
            Some(&task)
        );
        assert!(
            s.get_task("elsewhere", task.id).await.unwrap().is_none(),
            "{n}"
        );
        // A change with a note: the note, its mention and its id in the event.
        let c = change(
            &task,
            Status::InProgress,
            "alice",
            Some("ping @carol"),
            NOW + 1,
        );
        let (moved, events) = s.apply_task_change("lobby", c).await.unwrap().unwrap();
        assert_eq!(
            (moved.status, moved.version),
            (Status::InProgress, 2),
            "{n}"
        );
        assert_eq!(moved.updated_ts, NOW + 1, "{n}");
        let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["task_updated", "note_added"], "{n}");
        let notes = s.notes(task.id).await.unwrap();
        assert_eq!(notes.len(), 1, "{n}");
        assert_eq!(events[1].detail["note_id"], notes[0].id, "{n}");
        let mentions = s
            .my_mentions(
                "lobby",
                "carol",
                Page {
                    since_id: 0,
                    limit: 10,
                },
            )
            .await
            .unwrap();
        assert_eq!(mentions.len(), 1, "{n}");
        assert_eq!(
            (mentions[0].note_id, mentions[0].task_id),
            (Some(notes[0].id), Some(task.id)),
            "{n}"
        );
        // Decided on the old version: nothing is written.
        let stale = change(&task, Status::Blocked, "bob", None, NOW + 2);
        assert!(
            s.apply_task_change("lobby", stale).await.unwrap().is_none(),
            "{n}"
        );
        assert_eq!(s.notes(task.id).await.unwrap().len(), 1, "{n}");
        let counts = s.task_counts("lobby").await.unwrap();
        assert_eq!((counts.pending, counts.in_progress), (1, 1), "{n}");
        let open = s
            .list_tasks(
                "lobby",
                &TaskQuery {
                    statuses: vec![Status::InProgress],
                    assignee: None,
                    limit: 10,
                    before_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            open.iter().map(|t| t.id).collect::<Vec<_>>(),
            [task.id],
            "{n}"
        );
        // A lease that lapses at NOW + 100 is found from then on, not before.
        let mut leased = change(&moved, Status::InProgress, "alice", None, NOW + 3);
        leased.lease_seconds = Some(1);
        leased.lease_expires_ts = Some(NOW + 100);
        s.apply_task_change("lobby", leased).await.unwrap().unwrap();
        assert!(s.lapsed_leases(NOW + 99).await.unwrap().is_empty(), "{n}");
        assert_eq!(
            s.lapsed_leases(NOW + 100).await.unwrap(),
            [("lobby".to_owned(), task.id)],
            "{n}"
        );
        let hits = s.search("lobby", &["main".into()], 10).await.unwrap();
        assert_eq!(hits[0].task_id, Some(task.id), "{n}");
    }
}

/// Many writes of one room at once, as a busy room sends them: both
/// backends group them into shared transactions (`db/sqlite/writer.rs`,
/// `db/postgres/writer.rs`). Every write gets its own result, every one that
/// succeeded is stored whole with its event, ids are handed out in the
/// order the writes committed, and a write the database refuses in the
/// middle of a batch fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_of_a_room_commit_together_and_fail_alone() {
    for b in backends().await {
        let n = b.name;
        let s = b.store.clone();
        s.create_room(&room("busy"), NOW).await.unwrap();
        let (dep, _) = s
            .create_task("busy", new_task("dep", vec![]))
            .await
            .unwrap();
        // A write each backend refuses in its statements, after the ones
        // before it in the same write ran: SQLite a dependency named twice
        // (the table's key), PostgreSQL a NUL in a text column.
        let refused = |i: usize| match n {
            "sqlite" => new_task(&format!("refused {i}"), vec![dep.id, dep.id]),
            _ => new_task(&format!("refused {i}\0"), vec![]),
        };
        let before = s.audit_count().await.unwrap();
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..120usize {
            let s = s.clone();
            let refused = refused(i);
            writes.spawn(async move {
                match i % 6 {
                    0 => {
                        let r = s.create_task("busy", refused).await;
                        (
                            i,
                            r.map(|(t, e)| (t.id, e[0].id)).map_err(|e| e.to_string()),
                        )
                    }
                    1 => {
                        let t = new_task(&format!("task {i}"), vec![dep.id]);
                        let r = s.create_task("busy", t).await;
                        (i, Ok(r.map(|(t, e)| (t.id, e[0].id)).unwrap()))
                    }
                    _ => {
                        let body = format!("message {i}");
                        let record = message_record(
                            Record::new("alice", Some("post_message"), NOW),
                            &body,
                            None,
                        );
                        let (m, e) = s
                            .post_message("busy", message(&body, None), record)
                            .await
                            .unwrap();
                        (i, Ok((m.id, e.id)))
                    }
                }
            });
        }
        let mut results = writes.join_all().await;
        results.sort_by_key(|(i, _)| *i);
        let mut event_ids = Vec::new();
        for (i, r) in &results {
            match (i % 6, r) {
                (0, Err(_)) => {}
                (0, Ok(_)) => panic!("{n}: write {i} should have been refused"),
                (_, Ok((_, event))) => event_ids.push(*event),
                (_, Err(e)) => panic!("{n}: write {i} failed: {e}"),
            }
        }
        assert_eq!(event_ids.len(), 100, "{n}");
        // Every message is there, with its own body, once.
        let messages = s.read_messages("busy", 0, 200).await.unwrap();
        let mut bodies: Vec<_> = messages.iter().map(|m| m.body.clone()).collect();
        bodies.sort();
        let mut want: Vec<_> = (0..120)
            .filter(|i| i % 6 > 1)
            .map(|i| format!("message {i}"))
            .collect();
        want.sort();
        assert_eq!(bodies, want, "{n}");
        for (i, r) in &results {
            if let (2.., Ok((id, _))) = (i % 6, r) {
                let m = messages.iter().find(|m| m.id == *id).unwrap();
                assert_eq!(m.body, format!("message {i}"), "{n}: its own result");
            }
        }
        // The tasks: the one depended on and the twenty accepted, none refused.
        let tasks = s
            .list_tasks(
                "busy",
                &TaskQuery {
                    statuses: vec![],
                    assignee: None,
                    limit: 100,
                    before_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(tasks.len(), 21, "{n}");
        assert!(tasks.iter().all(|t| !t.title.starts_with("refused")), "{n}");
        assert!(
            tasks
                .iter()
                .filter(|t| t.id != dep.id)
                .all(|t| t.depends_on == [dep.id]),
            "{n}: a dependency of an accepted task"
        );
        // One event per accepted write, no more; the refused left none.
        let events = s
            .read_events(
                "busy",
                &EventFilter {
                    since_id: 0,
                    limit: 500,
                    kind: None,
                    task_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(events.len(), 101, "{n}: the dep's event and one per write");
        event_ids.sort();
        let stored: Vec<_> = events.iter().skip(1).map(|e| e.id).collect();
        assert_eq!(stored, event_ids, "{n}");
        // Ids in commit order: a message's event comes after the events of
        // the messages before it.
        let mut by_message: Vec<_> = events
            .iter()
            .filter_map(|e| e.message_id.map(|m| (m, e.id)))
            .collect();
        by_message.sort();
        assert!(by_message.windows(2).all(|w| w[0].1 < w[1].1), "{n}");
        assert_eq!(
            s.audit_count().await.unwrap(),
            before + 100,
            "{n}: audited once each"
        );
    }
}

/// Files: put, read, list, expiry as of `now`, delete with its event.
#[tokio::test]
async fn files_round_trip() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let file = NewFile {
            name: "a.txt".into(),
            mime: "text/plain".into(),
            content: b"hello".to_vec(),
            sha256: "x".into(),
            expires_at: Some(NOW + 1000),
            task_id: None,
        };
        let record = Record::new("alice", Some("put_file"), NOW).event(
            EventKind::FileAdded,
            None,
            None,
            json!({"name": "a.txt"}),
        );
        let (meta, event) = s.put_file("lobby", &file, record).await.unwrap();
        assert_eq!(
            (meta.author.as_str(), meta.ts, meta.size),
            ("alice", NOW, 5),
            "{n}"
        );
        assert_eq!(
            event.detail["file_id"], meta.file_id,
            "{n}: the new id is stamped"
        );
        let (got, bytes) = s
            .get_file("lobby", meta.file_id, NOW)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.name.as_str(), bytes.as_slice()),
            ("a.txt", &b"hello"[..]),
            "{n}"
        );
        assert!(
            s.file_meta("lobby", meta.file_id, NOW)
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            s.file_meta("lobby", meta.file_id, NOW + 1000)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            s.file_room(meta.file_id, NOW).await.unwrap().as_deref(),
            Some("lobby"),
            "{n}"
        );
        assert_eq!(
            s.file_room(meta.file_id, NOW + 1000).await.unwrap(),
            None,
            "{n}: expired"
        );
        assert_eq!(s.file_room(meta.file_id + 99, NOW).await.unwrap(), None);
        assert_eq!(
            s.list_files("lobby", 10, NOW).await.unwrap().len(),
            1,
            "{n}"
        );
        assert!(
            s.list_files("lobby", 10, NOW + 1000)
                .await
                .unwrap()
                .is_empty(),
            "{n}"
        );
        let record = Record::new("alice", Some("delete_file"), NOW).event(
            EventKind::FileDeleted,
            None,
            None,
            json!({"file_id": meta.file_id}),
        );
        let event = s
            .delete_file("lobby", meta.file_id, record.clone())
            .await
            .unwrap();
        assert_eq!(event.map(|e| e.kind), Some("file_deleted".into()), "{n}");
        assert!(
            s.delete_file("lobby", meta.file_id, record)
                .await
                .unwrap()
                .is_none(),
            "{n}"
        );
        assert!(
            s.get_file("lobby", meta.file_id, NOW)
                .await
                .unwrap()
                .is_none(),
            "{n}"
        );
    }
}

/// Copying an instance: dump, load elsewhere, counts, id floors; backups.
#[tokio::test]
async fn copy_and_backup() {
    for b in backends().await {
        let s = b.store.as_ref();
        let n = b.name;
        s.create_room(&room("lobby"), NOW).await.unwrap();
        let record = message_record(Record::new("alice", None, NOW), "one", None);
        let (m, _) = s
            .post_message("lobby", message("one", None), record)
            .await
            .unwrap();
        let rows = s.dump_table("messages", 0, 10).await.unwrap();
        assert_eq!(rows.len(), 1, "{n}");
        assert_eq!(rows[0]["body"], "one", "{n}");
        assert_eq!(s.count_rows("messages").await.unwrap(), 1, "{n}");
        assert!(s.id_high_water("messages").await.unwrap() >= m.id, "{n}");
        assert!(s.dump_table("no_such_table", 0, 10).await.is_err(), "{n}");
        // Loaded into a fresh store of the same backend, with the ids kept.
        let copy = match b.name {
            "sqlite" => {
                let url = format!("sqlite://{}", b.dir.path().join("copy.db").display());
                (db::open(&url).await.unwrap(), None)
            }
            _ => {
                let pg = PgDatabase::create(&pg_server().unwrap()).await;
                (db::open(&pg.url).await.unwrap(), Some(pg))
            }
        };
        let c = copy.0.as_ref();
        c.load_rows("rooms", &s.dump_table("rooms", 0, 10).await.unwrap())
            .await
            .unwrap();
        c.load_rows("messages", &rows).await.unwrap();
        c.set_id_floor("messages", 1000).await.unwrap();
        assert_eq!(
            c.read_messages("lobby", 0, 10).await.unwrap()[0].id,
            m.id,
            "{n}"
        );
        let next = message_record(Record::new("alice", None, NOW), "two", None);
        let (m2, _) = c
            .post_message("lobby", message("two", None), next)
            .await
            .unwrap();
        assert!(m2.id > 1000, "{n}: ids continue after the floor");
        // Backup: SQLite writes a copy; PostgreSQL names its own tool.
        let path = b.dir.path().join("backup.db");
        let backed = s.backup(path.to_str().unwrap()).await;
        match b.name {
            "sqlite" => {
                backed.unwrap();
                assert!(path.exists());
            }
            _ => assert!(backed.unwrap_err().to_string().contains("pg_dump")),
        }
        // A relay starts (and on SQLite has nothing to do) until shut down.
        let shutdown = CancellationToken::new();
        s.start_relay(chatroom::domain::EventBus::new(), shutdown.clone())
            .await
            .unwrap();
        shutdown.cancel();
    }
}

/// A lease lapses on the domain's clock: moved by hand, no sleeping. Before
/// it runs out the holder keeps the task; after, a read returns it to
/// pending with a `task_lease_expired` event by the server.
#[tokio::test]
async fn lease_lapses_on_the_injected_clock() {
    for b in backends().await {
        let n = b.name;
        let clock = Clock::manual(NOW);
        let settings = Settings {
            max_wait: Duration::from_secs(5),
            max_file_bytes: 1024,
        };
        let core = Core::new(b.store.clone(), settings, CancellationToken::new())
            .with_clock(clock.clone());
        core.create_room("lobby", RoomInfo::default())
            .await
            .unwrap();
        let grant = Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            ..Grant::default()
        };
        let (secret, _) = core.mint_token(grant).await.unwrap();
        let caller = core.verify(secret.expose()).await.unwrap().unwrap();
        let call = Call::new(caller, "claim_task");
        let task = core
            .create_task(
                &call,
                None,
                chatroom::domain::board::CreateTask {
                    title: "leased".into(),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        core.claim_task(&call, None, task.id, Some(60))
            .await
            .unwrap();
        let (held, _) = core.get_task(&call, None, task.id).await.unwrap();
        assert_eq!(held.lease_expires_ts, Some(NOW + 60_000), "{n}");
        clock.advance(Duration::from_secs(59));
        assert_eq!(core.sweep_leases().await.unwrap(), 0, "{n}: not yet");
        // A note by the holder renews the lease from the clock's now.
        let (renewed, _) = core
            .add_note(&call, None, task.id, "working")
            .await
            .unwrap();
        assert_eq!(renewed.lease_expires_ts, Some(NOW + 119_000), "{n}");
        clock.advance(Duration::from_secs(60));
        assert_eq!(core.sweep_leases().await.unwrap(), 1, "{n}");
        let (back, _) = core.get_task(&call, None, task.id).await.unwrap();
        assert_eq!((back.status, back.assignee), (Status::Pending, None), "{n}");
        let events = b
            .store
            .read_events(
                "lobby",
                &EventFilter {
                    since_id: 0,
                    limit: 10,
                    kind: Some("task_lease_expired".into()),
                    task_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{n}");
        assert_eq!(events[0].actor, SERVER_ACTOR, "{n}");
        assert_eq!(events[0].ts, NOW + 119_000, "{n}: the clock's time");
        assert_eq!(events[0].detail["previous_assignee"], "alice", "{n}");
    }
}

/// The wait clamp is the domain's: 45 s by default, never past `max_wait`.
#[test]
fn wait_timeout_is_clamped_by_the_domain() {
    let settings = Settings {
        max_wait: Duration::from_secs(30),
        max_file_bytes: 1,
    };
    assert_eq!(settings.wait_timeout(None), Duration::from_secs(30));
    assert_eq!(
        settings.wait_timeout(Some(f64::NAN)),
        Duration::from_secs(30)
    );
    assert_eq!(settings.wait_timeout(Some(-1.0)), Duration::ZERO);
    assert_eq!(
        settings.wait_timeout(Some(2.5)),
        Duration::from_millis(2500)
    );
    assert_eq!(settings.wait_timeout(Some(1e9)), Duration::from_secs(30));
}

/// Posts `count` messages by `author` to `room`, many at once (so the
/// writers commit them in groups, as under load).
async fn post_many(s: &Arc<dyn Store>, room: &str, author: &'static str, count: usize) -> Vec<i64> {
    let mut posts = tokio::task::JoinSet::new();
    for i in 0..count {
        let (s, room) = (s.clone(), room.to_owned());
        posts.spawn(async move {
            let body = format!("{author} {i}");
            let record =
                message_record(Record::new(author, Some("post_message"), NOW), &body, None);
            s.post_message(&room, message(&body, None), record)
                .await
                .unwrap()
                .1
                .id
        });
    }
    posts.join_all().await
}

/// Many advancing reads of one cursor at once (the prompt hook and the
/// agent's own `whats_new` share one) while writers post: across all the
/// answers no event is shown twice and none is skipped, every answer gets
/// its page the first time, and the cursor ends past everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_cursor_read_by_many_at_once_shows_each_event_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for b in backends().await {
        let n = b.name;
        let s = b.store.clone();
        s.create_room(&room("shared"), NOW).await.unwrap();
        let writing = Arc::new(AtomicBool::new(true));
        let mut readers = tokio::task::JoinSet::new();
        for r in 0..12usize {
            let (s, writing) = (s.clone(), writing.clone());
            readers.spawn(async move {
                let mut answers = Vec::new();
                loop {
                    let done = !writing.load(Ordering::SeqCst);
                    // Half leave carol's own events out, as the hook does.
                    let page = s
                        .events_after_cursor(cursor_read("shared", "carol", 7, true, r % 2 == 0))
                        .await
                        .unwrap_or_else(|e| panic!("reader {r}: {e}"));
                    let ids: Vec<(i64, String)> = page
                        .events
                        .iter()
                        .map(|e| (e.id, e.actor.clone()))
                        .collect();
                    let idle = ids.is_empty();
                    answers.push((page.since, ids));
                    if done && idle && page.remaining == 0 && !page.remaining_more {
                        return answers;
                    }
                    tokio::task::yield_now().await;
                }
            });
        }
        let (a, bob, own) = tokio::join!(
            post_many(&s, "shared", "alice", 150),
            post_many(&s, "shared", "bob", 150),
            post_many(&s, "shared", "carol", 60),
        );
        writing.store(false, Ordering::SeqCst);
        let answers: Vec<_> = readers.join_all().await.into_iter().flatten().collect();
        let mut shown: Vec<i64> = Vec::new();
        for (since, ids) in &answers {
            assert!(
                ids.iter().all(|(id, _)| id > since),
                "{n}: a page starts after its cursor"
            );
            assert!(
                ids.windows(2).all(|w| w[0].0 < w[1].0),
                "{n}: a page is in order"
            );
            shown.extend(ids.iter().map(|(id, _)| *id));
        }
        let count = shown.len();
        shown.sort_unstable();
        shown.dedup();
        assert_eq!(shown.len(), count, "{n}: an event was shown twice");
        let mut peers: Vec<i64> = a.into_iter().chain(bob).collect();
        peers.sort_unstable();
        let shown_peers: Vec<i64> = shown
            .iter()
            .copied()
            .filter(|id| !own.contains(id))
            .collect();
        assert_eq!(
            shown_peers, peers,
            "{n}: every peer event shown once, none skipped"
        );
        let latest = s.latest_event_id("shared").await.unwrap();
        assert_eq!(s.cursor("shared", "carol").await.unwrap(), latest, "{n}");
    }
}

/// `remaining` counts what a page leaves exactly up to the cap, then says
/// the cap and `remaining_more`; the caller's own events left out are not
/// counted. The cursor moves the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remaining_is_exact_then_capped() {
    use chatroom::domain::events::REMAINING_CAP;
    for b in backends().await {
        let n = b.name;
        let s = b.store.clone();
        s.create_room(&room("deep"), NOW).await.unwrap();
        post_many(&s, "deep", "alice", 30).await;
        post_many(&s, "deep", "carol", 5).await;
        let peek = |own| s.events_after_cursor(cursor_read("deep", "carol", 10, false, own));
        let all = peek(false).await.unwrap();
        assert_eq!(
            (all.events.len(), all.remaining, all.remaining_more),
            (10, 25, false),
            "{n}"
        );
        let others = peek(true).await.unwrap();
        assert_eq!(
            (others.events.len(), others.remaining),
            (10, 20),
            "{n}: own left out"
        );
        assert!(!others.remaining_more, "{n}");
        post_many(&s, "deep", "alice", REMAINING_CAP as usize).await;
        let far = peek(false).await.unwrap();
        assert_eq!(
            (far.remaining, far.remaining_more),
            (REMAINING_CAP, true),
            "{n}: capped"
        );
        // Read to the end: the count comes down to an exact one again.
        let total = 35 + REMAINING_CAP;
        let mut seen = 0;
        loop {
            let page = s
                .events_after_cursor(cursor_read("deep", "carol", 200, true, false))
                .await
                .unwrap();
            seen += page.events.len() as i64;
            let left = total - seen;
            assert_eq!(page.remaining, left.min(REMAINING_CAP), "{n}: after {seen}");
            assert_eq!(
                page.remaining_more,
                left > REMAINING_CAP,
                "{n}: after {seen}"
            );
            if page.events.is_empty() {
                break;
            }
        }
        assert_eq!(seen, total, "{n}");
    }
}

/// A registered client as the registration endpoint stores it.
fn client(id: &str, created_ts: i64) -> OAuthClient {
    OAuthClient {
        client_id: id.into(),
        secret_hash: None,
        client_name: format!("{id} app"),
        redirect_uris: vec!["http://127.0.0.1:9/cb".into()],
        auth_method: "none".into(),
        created_ts,
        used_ts: None,
    }
}

fn auth_code(hash: &str, client_id: &str) -> NewAuthCode {
    NewAuthCode {
        hash: hash.into(),
        client_id: client_id.into(),
        redirect_uri: "http://127.0.0.1:9/cb".into(),
        code_challenge: "challenge".into(),
        resource: Some("http://127.0.0.1:9/mcp".into()),
        expires_ts: NOW + 60_000,
        redirect_uri_given: true,
    }
}

fn access(hash: &str, grant_id: i64, expires_ts: i64) -> NewOAuthToken {
    NewOAuthToken {
        hash: hash.into(),
        grant_id,
        kind: "access",
        expires_ts,
    }
}

/// OAuth, below the domain: registration makes room by forgetting the
/// oldest unused client; a connect code and an authorization code are each
/// spent once; a refresh token rotates only from the live one, and the one
/// it replaced still finds its grant; revocation, the server keys (the first
/// one stored wins), pruning and purging.
#[tokio::test]
async fn oauth_round_trip() {
    for b in backends().await {
        let (n, s) = (b.name, &b.store);
        let limit = |max, unused_before| ClientLimit { max, unused_before };
        // Registration: two fit; a third forgets the oldest unused one.
        assert!(
            s.oauth_insert_client(&client("c1", NOW), limit(2, 0))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(
            s.oauth_insert_client(&client("c2", NOW + 1), limit(2, 0))
                .await
                .unwrap(),
            "{n}"
        );
        let c2 = s.oauth_client("c2").await.unwrap().expect("c2");
        assert_eq!(
            (c2.client_name.as_str(), c2.redirect_uris.len(), c2.used_ts),
            ("c2 app", 1, None),
            "{n}"
        );
        assert!(
            s.oauth_insert_client(&client("c3", NOW + 2), limit(2, 0))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(
            s.oauth_client("c1").await.unwrap().is_none(),
            "{n}: the oldest unused goes"
        );
        // Unused registrations older than the cut-off go first.
        assert!(
            s.oauth_insert_client(&client("c4", NOW + 3), limit(5, NOW + 1))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(s.oauth_client("c2").await.unwrap().is_none(), "{n}");
        assert!(s.oauth_client("c3").await.unwrap().is_some(), "{n}");

        // A connect code is spent once, by the first approval, and only while it lasts.
        let grant = Grant {
            agent: "webapp".into(),
            room: "lobby".into(),
            also_rooms: vec!["dev".into()],
            lead: true,
            skills: vec!["rust".into()],
            profile: chatroom::domain::profile::Profile::Worker,
            ..Grant::default()
        };
        for (hash, expires_ts) in [("connect-1", NOW + 60_000), ("connect-old", NOW - 1)] {
            s.oauth_insert_connect_code(&NewConnectCode {
                hash: hash.into(),
                grant: grant.clone(),
                created_ts: NOW - 10,
                expires_ts,
            })
            .await
            .unwrap();
        }
        let code = auth_code("code-1", "c3");
        let approve = |hash: &'static str, code: NewAuthCode| {
            let s = s.clone();
            async move {
                s.oauth_approve(ConnectApproval {
                    connect_hash: hash,
                    client_id: "c3",
                    client_name: "c3 app",
                    code: &code,
                    now: NOW,
                })
                .await
                .unwrap()
            }
        };
        assert_eq!(approve("connect-nope", code.clone()).await, None, "{n}");
        assert_eq!(
            approve("connect-old", auth_code("code-x", "c3")).await,
            None,
            "{n}: expired"
        );
        let grant_id = approve("connect-1", code.clone()).await.expect("approved");
        assert_eq!(
            approve("connect-1", auth_code("code-2", "c3")).await,
            None,
            "{n}: spent"
        );
        let stored = s.oauth_grant(grant_id).await.unwrap().expect("grant");
        assert_eq!(stored.grant, grant, "{n}: the connect code's grant, whole");
        assert_eq!(
            (stored.client_id.as_str(), stored.client_name.as_str()),
            ("c3", "c3 app"),
            "{n}"
        );
        assert_eq!((stored.created_ts, stored.revoked_ts), (NOW, None), "{n}");
        assert!(stored.refresh.hash.is_none(), "{n}");
        assert_eq!(
            s.oauth_client("c3").await.unwrap().unwrap().used_ts,
            Some(NOW),
            "{n}"
        );

        // The authorization code: fresh once, then a replay naming its grant.
        match s.oauth_take_auth_code("code-1", NOW + 5).await.unwrap() {
            CodeTake::Fresh(c) => {
                assert_eq!(c.grant_id, grant_id, "{n}");
                assert_eq!(c.code_challenge, "challenge", "{n}");
                assert_eq!(c.resource.as_deref(), code.resource.as_deref(), "{n}");
                assert!(c.redirect_uri_given, "{n}");
                assert_eq!(c.expires_ts, NOW + 60_000, "{n}");
            }
            other => panic!("{n}: {other:?}"),
        }
        assert!(
            matches!(
                s.oauth_take_auth_code("code-1", NOW + 6).await.unwrap(),
                CodeTake::Replayed { grant_id: g } if g == grant_id
            ),
            "{n}"
        );
        assert!(
            matches!(
                s.oauth_take_auth_code("code-unknown", NOW).await.unwrap(),
                CodeTake::Unknown
            ),
            "{n}"
        );

        // Refresh rotation: only from the live token, each step once.
        let rotation = |old: Option<&str>, new: &str, access_hash: &str| Rotation {
            grant_id,
            old_hash: old.map(str::to_owned),
            new_hash: new.into(),
            expires_ts: NOW + 86_400_000,
            access: access(access_hash, grant_id, NOW + 3_600_000),
            now: NOW + 10,
        };
        assert!(
            s.oauth_rotate_refresh(&rotation(None, "r1", "a1"))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(
            !s.oauth_rotate_refresh(&rotation(None, "r1b", "a1b"))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(
            s.oauth_rotate_refresh(&rotation(Some("r1"), "r2", "a2"))
                .await
                .unwrap(),
            "{n}"
        );
        assert!(
            !s.oauth_rotate_refresh(&rotation(Some("r1"), "r3", "a3"))
                .await
                .unwrap(),
            "{n}"
        );
        for hash in ["r1", "r2"] {
            let by = s.oauth_grant_by_refresh(hash).await.unwrap().expect(hash);
            assert_eq!(by.id, grant_id, "{n}: {hash}");
            assert_eq!(
                (by.refresh.hash.as_deref(), by.refresh.prev_hash.as_deref()),
                (Some("r2"), Some("r1")),
                "{n}"
            );
            assert_eq!(by.refresh.rotated_ts, Some(NOW + 10), "{n}");
        }
        assert!(
            s.oauth_grant_by_refresh("r1b").await.unwrap().is_none(),
            "{n}"
        );
        let (token, of) = s.oauth_token("a2").await.unwrap().expect("a2");
        assert_eq!(
            (token.grant_id, token.kind.as_str()),
            (grant_id, "access"),
            "{n}"
        );
        assert_eq!(
            (token.expires_ts, token.spent_ts),
            (NOW + 3_600_000, None),
            "{n}"
        );
        assert_eq!(of.grant, grant, "{n}");
        assert!(
            s.oauth_token("a1b").await.unwrap().is_none(),
            "{n}: a lost rotation stores nothing"
        );
        s.oauth_insert_tokens(&[access("a9", grant_id, NOW + 1)])
            .await
            .unwrap();
        assert!(s.oauth_token("a9").await.unwrap().is_some(), "{n}");

        // Revocation, once; a revoked grant neither rotates nor is purged early.
        assert_eq!(s.oauth_list_grants().await.unwrap().len(), 1, "{n}");
        assert_eq!(
            s.oauth_revoke_agent("webapp", NOW + 20).await.unwrap(),
            1,
            "{n}"
        );
        assert!(
            !s.oauth_revoke_grant(grant_id, NOW + 21).await.unwrap(),
            "{n}: already"
        );
        assert!(
            !s.oauth_rotate_refresh(&rotation(Some("r2"), "r4", "a4"))
                .await
                .unwrap(),
            "{n}"
        );
        assert_eq!(
            s.oauth_grant(grant_id).await.unwrap().unwrap().revoked_ts,
            Some(NOW + 20),
            "{n}"
        );
        assert_eq!(s.oauth_purge_grants(NOW + 19).await.unwrap(), 0, "{n}");

        // The server keys: the first one stored stays.
        assert_eq!(
            s.oauth_key("signing", "first").await.unwrap(),
            "first",
            "{n}"
        );
        assert_eq!(
            s.oauth_key("signing", "second").await.unwrap(),
            "first",
            "{n}"
        );

        // Pruning: the expired access token and connect code go, the live token stays.
        assert!(s.oauth_prune(NOW + 2).await.unwrap() >= 2, "{n}");
        assert!(s.oauth_token("a9").await.unwrap().is_none(), "{n}");
        assert!(s.oauth_token("a2").await.unwrap().is_some(), "{n}");
        assert_eq!(
            s.oauth_prune(NOW + 2).await.unwrap(),
            0,
            "{n}: nothing left to prune"
        );
        // Purging deletes the revoked grant with its tokens.
        assert_eq!(s.oauth_purge_grants(NOW + 20).await.unwrap(), 1, "{n}");
        assert!(s.oauth_grant(grant_id).await.unwrap().is_none(), "{n}");
        assert!(s.oauth_token("a2").await.unwrap().is_none(), "{n}");
        assert!(s.oauth_list_grants().await.unwrap().is_empty(), "{n}");
    }
}
