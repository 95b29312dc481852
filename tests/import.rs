//! `chatroom admin import-chatroommcp`, run as the built binary on
//! ChatRoomMCP-format databases these tests build themselves (the table
//! layout of ChatRoomMCP's SQLite file), then checked through a real server:
//! the old tokens work, `whats_new` does not replay history, and the board,
//! chat and files are all there. Refusals change nothing.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use common::{TestServer, run_cli};
use rusqlite::{Connection, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// ChatRoomMCP's tables as its current version lays them out.
const SCHEMA: &str = "
CREATE TABLE rooms (
    name TEXT PRIMARY KEY, created_ts TEXT NOT NULL,
    description TEXT, repo_url TEXT, onboarding_notes TEXT, retention_days INTEGER);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY, agent_name TEXT NOT NULL, default_room TEXT NOT NULL,
    allowed_rooms TEXT NOT NULL DEFAULT '[]', created_ts TEXT NOT NULL, last_seen TEXT,
    revoked INTEGER NOT NULL DEFAULT 0, readonly INTEGER NOT NULL DEFAULT 0,
    admin INTEGER NOT NULL DEFAULT 0, all_rooms INTEGER NOT NULL DEFAULT 0, revoked_ts TEXT);
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'pending', assignee TEXT,
    depends_on TEXT NOT NULL DEFAULT '[]', version INTEGER NOT NULL DEFAULT 1,
    created_by TEXT NOT NULL, created_ts TEXT NOT NULL, updated_ts TEXT NOT NULL);
CREATE TABLE notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id INTEGER NOT NULL, room TEXT NOT NULL,
    author TEXT NOT NULL, ts TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, ts TEXT NOT NULL,
    kind TEXT NOT NULL, task_id INTEGER, actor TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
    message_id INTEGER);
CREATE TABLE cursors (
    agent_name TEXT NOT NULL, room TEXT NOT NULL, last_event_id INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent_name, room));
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, ts TEXT NOT NULL,
    author TEXT NOT NULL, body TEXT NOT NULL, reply_to INTEGER);
CREATE TABLE files (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, name TEXT NOT NULL,
    sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    mime TEXT NOT NULL DEFAULT 'application/octet-stream', author TEXT NOT NULL,
    ts TEXT NOT NULL, content BLOB NOT NULL, expires_at TEXT);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

/// The same tables before ChatRoomMCP added token flags, room info, file
/// expiry and the event's message id.
const OLD_SCHEMA: &str = "
CREATE TABLE rooms (name TEXT PRIMARY KEY, created_ts TEXT NOT NULL);
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY, agent_name TEXT NOT NULL, default_room TEXT NOT NULL,
    allowed_rooms TEXT NOT NULL DEFAULT '[]', created_ts TEXT NOT NULL, last_seen TEXT,
    revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '', status TEXT NOT NULL DEFAULT 'pending', assignee TEXT,
    depends_on TEXT NOT NULL DEFAULT '[]', version INTEGER NOT NULL DEFAULT 1,
    created_by TEXT NOT NULL, created_ts TEXT NOT NULL, updated_ts TEXT NOT NULL);
CREATE TABLE notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id INTEGER NOT NULL, room TEXT NOT NULL,
    author TEXT NOT NULL, ts TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, ts TEXT NOT NULL,
    kind TEXT NOT NULL, task_id INTEGER, actor TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '');
CREATE TABLE cursors (
    agent_name TEXT NOT NULL, room TEXT NOT NULL, last_event_id INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent_name, room));
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, ts TEXT NOT NULL,
    author TEXT NOT NULL, body TEXT NOT NULL, reply_to INTEGER);
CREATE TABLE files (
    id INTEGER PRIMARY KEY AUTOINCREMENT, room TEXT NOT NULL, name TEXT NOT NULL,
    sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    mime TEXT NOT NULL DEFAULT 'application/octet-stream', author TEXT NOT NULL,
    ts TEXT NOT NULL, content BLOB NOT NULL);
";

/// A time `secs` from now as ChatRoomMCP writes it (Python's `isoformat`).
fn iso(secs: i64) -> String {
    let t = time::OffsetDateTime::now_utc() + time::Duration::seconds(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

fn sha_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A ChatRoomMCP database in a folder of its own, and the raw tokens it
/// holds (their hashes are what the file stores).
struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    tokens: HashMap<&'static str, String>,
    /// The scratch file's bytes, large enough to span several pages.
    scratch: Vec<u8>,
}

impl Fixture {
    fn conn(&self) -> Connection {
        Connection::open(&self.path).unwrap()
    }

    fn digest(&self) -> String {
        sha_hex(&std::fs::read(&self.path).unwrap())
    }
}

/// Builds a ChatRoomMCP instance: rooms `projA` (with info and a 30-day
/// retention) and `projB`, a room only a message names (`lateRoom`), five
/// tokens (writers `box1` and `box2`, an observer, a revoked one, an
/// all-rooms admin), four tasks (one done, one depending on it, one held by
/// box2), a note, a thread, events with box1's cursor at the end and box2's
/// halfway, and three files (plain, expiring later, expired).
fn fixture(schema: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chatroom.db");
    let c = Connection::open(&path).unwrap();
    c.execute_batch(schema).unwrap();
    let old = !schema.contains("retention_days");
    let tag = format!("{:x}", rand_tag());
    let mut tokens = HashMap::new();
    for agent in ["box1", "box2", "viewer", "gone", "root"] {
        tokens.insert(
            agent,
            format!("cr_{agent}_{tag}_abcdefghijklmnopqrstuvwxyz0123"),
        );
    }
    let ago = |m: i64| iso(-60 * m);
    if old {
        for room in ["projA", "projB"] {
            c.execute(
                "INSERT INTO rooms (name, created_ts) VALUES (?1, ?2)",
                params![room, ago(120)],
            )
            .unwrap();
        }
        for (agent, allowed, revoked) in [
            ("box1", "[\"projB\"]", 0),
            ("box2", "[]", 0),
            ("viewer", "[]", 0),
            ("gone", "[]", 1),
            ("root", "[\"projB\", \"lateRoom\"]", 0),
        ] {
            c.execute(
                "INSERT INTO tokens (token_hash, agent_name, default_room, allowed_rooms, created_ts, revoked) \
                 VALUES (?1, ?2, 'projA', ?3, ?4, ?5)",
                params![sha_hex(tokens[agent].as_bytes()), agent, allowed, ago(100), revoked],
            )
            .unwrap();
        }
    } else {
        c.execute(
            "INSERT INTO rooms VALUES ('projA', ?1, 'alpha project', 'https://example.invalid/a', 'read the README', 30)",
            params![ago(120)],
        )
        .unwrap();
        c.execute(
            "INSERT INTO rooms (name, created_ts) VALUES ('projB', ?1)",
            params![ago(110)],
        )
        .unwrap();
        for (agent, allowed, revoked, readonly, admin, all_rooms) in [
            ("box1", "[\"projB\"]", 0, 0, 0, 0),
            ("box2", "[]", 0, 0, 0, 0),
            ("viewer", "[]", 0, 1, 0, 0),
            ("gone", "[]", 1, 0, 0, 0),
            ("root", "[]", 0, 0, 1, 1),
        ] {
            c.execute(
                "INSERT INTO tokens (token_hash, agent_name, default_room, allowed_rooms, created_ts, \
                 last_seen, revoked, readonly, admin, all_rooms, revoked_ts) \
                 VALUES (?1, ?2, 'projA', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    sha_hex(tokens[agent].as_bytes()),
                    agent,
                    allowed,
                    ago(100),
                    ago(1),
                    revoked,
                    readonly,
                    admin,
                    all_rooms,
                    (revoked == 1).then(|| ago(50))
                ],
            )
            .unwrap();
        }
    }
    for (room, title, status, assignee, deps, version) in [
        ("projA", "step A", "done", Some("box1"), "[]", 3),
        ("projA", "step B", "pending", None, "[1]", 1),
        ("projA", "held task", "in_progress", Some("box2"), "[]", 2),
        ("projB", "other room", "pending", None, "[]", 1),
    ] {
        c.execute(
            "INSERT INTO tasks (room, title, body, status, assignee, depends_on, version, created_by, created_ts, updated_ts) \
             VALUES (?1, ?2, 'the body', ?3, ?4, ?5, ?6, 'box1', ?7, ?8)",
            params![room, title, status, assignee, deps, version, ago(90), ago(30)],
        )
        .unwrap();
    }
    c.execute(
        "INSERT INTO notes (task_id, room, author, ts, body) VALUES (1, 'projA', 'box1', ?1, 'finished, thanks @box2')",
        params![ago(29)],
    )
    .unwrap();
    for (room, author, body, reply_to) in [
        ("projA", "box1", "hello @box2", None),
        ("projA", "box2", "hi back", Some(1)),
        ("projB", "box1", "over here", None),
        ("lateRoom", "hermit", "alone", None),
    ] {
        c.execute(
            "INSERT INTO messages (room, ts, author, body, reply_to) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![room, ago(20), author, body, reply_to],
        )
        .unwrap();
    }
    // Events 1-8 in projA, 9-10 in projB.
    let events: [Ev; 10] = [
        ("projA", "task_created", "box1", Some(1), None, "step A"),
        ("projA", "task_created", "box1", Some(2), None, "step B"),
        ("projA", "task_created", "box1", Some(3), None, "held task"),
        ("projA", "message", "box1", None, Some(1), "hello @box2"),
        ("projA", "message", "box2", None, Some(2), "hi back"),
        ("projA", "task_claimed", "box2", Some(3), None, ""),
        (
            "projA",
            "note_added",
            "box1",
            Some(1),
            None,
            "finished, thanks @box2",
        ),
        (
            "projA",
            "file_added",
            "box1",
            None,
            None,
            "notes.txt (11 B)",
        ),
        ("projB", "task_created", "box1", Some(4), None, "other room"),
        ("projB", "message", "box1", None, Some(3), "over here"),
    ];
    for (room, kind, actor, task, message, detail) in events {
        if old {
            c.execute(
                "INSERT INTO events (room, ts, kind, task_id, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![room, ago(15), kind, task, actor, detail],
            )
            .unwrap();
        } else {
            c.execute(
                "INSERT INTO events (room, ts, kind, task_id, actor, detail, message_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![room, ago(15), kind, task, actor, detail, message],
            )
            .unwrap();
        }
    }
    c.execute(
        "INSERT INTO cursors VALUES ('box1', 'projA', 8), ('box2', 'projA', 4), ('box1', 'projB', 10)",
        [],
    )
    .unwrap();
    let scratch: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let files: [(&str, &[u8], &str, Option<String>); 3] = [
        ("notes.txt", b"hello world", "text/plain", None),
        (
            "scratch.bin",
            &scratch,
            "application/octet-stream",
            Some(iso(86_400)),
        ),
        ("old.txt", b"gone by now", "text/plain", Some(iso(-3_600))),
    ];
    for (name, content, mime, expires) in files {
        if old {
            c.execute(
                "INSERT INTO files (room, name, sha256, size, mime, author, ts, content) \
                 VALUES ('projA', ?1, ?2, ?3, ?4, 'box1', ?5, ?6)",
                params![
                    name,
                    sha_hex(content),
                    content.len() as i64,
                    mime,
                    ago(10),
                    content
                ],
            )
            .unwrap();
        } else {
            c.execute(
                "INSERT INTO files (room, name, sha256, size, mime, author, ts, content, expires_at) \
                 VALUES ('projA', ?1, ?2, ?3, ?4, 'box1', ?5, ?6, ?7)",
                params![name, sha_hex(content), content.len() as i64, mime, ago(10), content, expires],
            )
            .unwrap();
        }
    }
    drop(c);
    Fixture {
        _dir: dir,
        path,
        tokens,
        scratch,
    }
}

/// An event row: room, kind, actor, task id, message id, detail.
type Ev = (
    &'static str,
    &'static str,
    &'static str,
    Option<i64>,
    Option<i64>,
    &'static str,
);

/// A distinct tag per fixture, so tokens never repeat across tests.
fn rand_tag() -> u128 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    nanos ^ (u128::from(std::process::id()) << 64) ^ u128::from(SEQ.fetch_add(1, Ordering::Relaxed))
}

/// The environment of an admin command on the SQLite file `db`.
fn on_file(db: &Path) -> HashMap<&'static str, String> {
    HashMap::from([("CHATROOM_DB", db.to_string_lossy().into_owned())])
}

/// Imports `fx` with `env` (and `extra` arguments); returns the outcome.
async fn import(
    fx: &Fixture,
    extra: &[&str],
    env: &HashMap<&'static str, String>,
) -> (i32, String, String) {
    let path = fx.path.to_string_lossy().into_owned();
    let mut args = vec!["admin", "import-chatroommcp", path.as_str()];
    args.extend(extra);
    run_cli(&args, env).await
}

/// The SOURCE and IMPORTED columns of one table's line of the import report.
fn counts(out: &str, table: &str) -> (String, i64) {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(table))
        .unwrap_or_else(|| panic!("no line for {table} in:\n{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    (cols[1].to_owned(), cols[2].parse().unwrap())
}

/// How far the import moved each kind of id (0 into a fresh database).
#[derive(Clone, Copy, Default)]
struct Shift {
    tasks: i64,
    messages: i64,
    events: i64,
}

/// Everything the fixture holds, checked through the server's MCP tools.
async fn assert_imported(s: &TestServer, fx: &Fixture, at: Shift) {
    let (t, m, e) = (at.tasks, at.messages, at.events);
    let box1 = s.mcp(&fx.tokens["box1"]);
    let box2 = s.mcp(&fx.tokens["box2"]);

    let me = box1.call("whoami", json!({})).await;
    assert_eq!(me["agent"], "box1");
    assert_eq!(me["rooms"], json!(["projA", "projB"]), "{me}");

    // The cursors came along: box1 had seen everything, box2 half of it.
    let news = box1.call("whats_new", json!({})).await;
    assert_eq!(
        news["count"], 0,
        "box1 saw it all on the old server: {news}"
    );
    let news = box2.call("whats_new", json!({})).await;
    let ids: Vec<i64> = news["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [e + 5, e + 6, e + 7, e + 8], "{news}");
    assert_eq!(news["events"][0]["kind"], "message");
    assert_eq!(news["events"][0]["message_id"], m + 2);
    assert_eq!(news["events"][2]["kind"], "note_added");
    assert_eq!(box2.call("whats_new", json!({})).await["count"], 0);

    // The board: status, version, holder, dependencies, notes.
    let a = box1.call("get_task", json!({"task_id": t + 1})).await;
    assert_eq!(a["task"]["title"], "step A");
    assert_eq!(a["task"]["status"], "done");
    assert_eq!(a["task"]["version"], 3);
    assert_eq!(a["task"]["assignee"], "box1");
    assert_eq!(a["task"]["notes"][0]["body"], "finished, thanks @box2");
    assert_eq!(a["task"]["notes"][0]["author"], "box1");
    let b = box1.call("get_task", json!({"task_id": t + 2})).await;
    assert_eq!(b["task"]["status"], "pending");
    assert_eq!(b["task"]["depends_on"], json!([t + 1]), "{b}");
    assert_eq!(b["task"]["blocked_by_unfinished"], json!([]), "{b}");
    let held = box1.call("get_task", json!({"task_id": t + 3})).await;
    assert_eq!(held["task"]["assignee"], "box2");
    assert_eq!(held["task"]["status"], "in_progress");
    // The holder goes on from the version it had.
    let up = box2
        .call(
            "update_task",
            json!({"task_id": t + 3, "status": "done", "expected_version": 2}),
        )
        .await;
    assert_eq!(up["task"]["version"], 3, "{up}");
    assert_eq!(up["task"]["status"], "done");
    let other = box1
        .call("get_task", json!({"task_id": t + 4, "room": "projB"}))
        .await;
    assert_eq!(other["task"]["title"], "other room");

    // Chat with its thread, and the mention index.
    let chat = box1.call("read_messages", json!({})).await;
    let msgs = chat["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "{chat}");
    assert_eq!(msgs[0]["id"], m + 1);
    assert_eq!(msgs[0]["body"], "hello @box2");
    assert_eq!(msgs[1]["reply_to"], m + 1);
    assert_eq!(msgs[1]["author"], "box2");
    let mentions = box2.call("my_mentions", json!({})).await;
    assert_eq!(mentions["count"], 2, "the message and the note: {mentions}");

    // Files with their bytes and expiry; the expired one is gone.
    let files = box1.call("list_files", json!({})).await;
    let mut names: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["notes.txt", "scratch.bin"], "{files}");
    for f in files["files"].as_array().unwrap() {
        let got = box1
            .call("get_file", json!({"file_id": f["file_id"]}))
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(got["content_base64"].as_str().unwrap())
            .unwrap();
        if f["name"] == "notes.txt" {
            assert_eq!(bytes, b"hello world");
            assert_eq!(f["expires_at"], Value::Null);
        } else {
            assert_eq!(bytes, fx.scratch);
            assert!(f["expires_at"].is_string(), "{f}");
            assert_eq!(got["sha256"], sha_hex(&fx.scratch));
        }
    }

    // Flags: the observer reads only, the revoked token is refused, the
    // all-rooms admin reaches the room only a message named.
    let viewer = s.mcp(&fx.tokens["viewer"]);
    viewer.call("read_messages", json!({})).await;
    assert_eq!(
        viewer
            .refused("post_message", json!({"body": "let me in"}))
            .await,
        "read_only"
    );
    let (status, _) = s
        .mcp(&fx.tokens["gone"])
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "whoami", "arguments": {}}}))
        .await;
    assert_eq!(status, 401, "a revoked token stays revoked");
    let root = s.mcp(&fx.tokens["root"]);
    let late = root
        .call("read_messages", json!({"room": "lateRoom"}))
        .await;
    assert_eq!(late["messages"][0]["body"], "alone", "{late}");

    // New rows come after the imported ones.
    let created = box1
        .call("create_task", json!({"title": "after the move"}))
        .await;
    assert!(
        created["created"]["id"].as_i64().unwrap() > t + 4,
        "{created}"
    );
    let posted = box1
        .call("post_message", json!({"body": "new server"}))
        .await;
    assert!(posted["message_id"].as_i64().unwrap() > m + 4, "{posted}");
}

/// Into a new SQLite database (the configured one): every table arrives
/// with its ids, the counts are printed and match the source, and the old
/// tokens, cursors, board, chat and files all work on the new server.
#[tokio::test]
async fn import_brings_the_whole_instance() {
    let fx = fixture(SCHEMA);
    let before = fx.digest();
    let dest = tempfile::tempdir().unwrap();
    let db = dest.path().join("new.db");
    let (code, out, err) = import(&fx, &[], &on_file(&db)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        counts(&out, "rooms"),
        ("2".into(), 3),
        "lateRoom added: {out}"
    );
    assert!(err.contains("lateRoom"), "{err}");
    for (table, n) in [
        ("tokens", 5),
        ("tasks", 4),
        ("notes", 1),
        ("messages", 4),
        ("events", 10),
        ("cursors", 3),
        ("files", 3),
    ] {
        assert_eq!(counts(&out, table), (n.to_string(), n), "{table}: {out}");
    }
    assert_eq!(counts(&out, "task_deps").1, 1);
    assert_eq!(counts(&out, "mentions").1, 2);
    assert!(!out.contains("MISMATCH"), "{out}");
    assert!(out.contains("ids are kept"), "{out}");
    assert_eq!(fx.digest(), before, "the source is only read");

    let s = TestServer::on_database(&format!("sqlite://{}", db.display())).await;
    let info = s
        .mcp(&fx.tokens["box1"])
        .call("get_room_info", json!({}))
        .await;
    assert_eq!(info["description"], "alpha project", "{info}");
    assert_eq!(info["repo_url"], "https://example.invalid/a");
    assert_eq!(info["onboarding_notes"], "read the README");
    assert_eq!(info["retention_days"], 30);
    assert_imported(&s, &fx, Shift::default()).await;
    let (_, listed, _) = run_cli(&["admin", "list-tokens", "--json"], &on_file(&db)).await;
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let gone = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["agent"] == "gone")
        .unwrap();
    assert!(gone["revoked_ts"].is_string(), "{gone}");
    let root = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["agent"] == "root")
        .unwrap();
    assert_eq!(
        (root["admin"].clone(), root["all_rooms"].clone()),
        (json!(true), json!(true))
    );
    s.stop().await;
}

/// A file from an older ChatRoomMCP, before token flags, room info, file
/// expiry and event message ids existed, imports too.
#[tokio::test]
async fn import_reads_an_older_layout() {
    let fx = fixture(OLD_SCHEMA);
    let dest = tempfile::tempdir().unwrap();
    let db = dest.path().join("new.db");
    let (code, out, err) = import(&fx, &[], &on_file(&db)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(counts(&out, "tokens"), ("5".into(), 5));
    let s = TestServer::on_database(&format!("sqlite://{}", db.display())).await;
    let box2 = s.mcp(&fx.tokens["box2"]);
    let news = box2.call("whats_new", json!({})).await;
    assert_eq!(news["count"], 4, "{news}");
    let root = s.mcp(&fx.tokens["root"]);
    let late = root
        .call("read_messages", json!({"room": "lateRoom"}))
        .await;
    assert_eq!(late["messages"][0]["body"], "alone", "{late}");
    // Every file is there (no expiry existed), bytes intact.
    let files = s
        .mcp(&fx.tokens["box1"])
        .call("list_files", json!({}))
        .await;
    assert_eq!(files["count"], 3, "{files}");
    s.stop().await;
}

/// Into a database that is already in use: the ids move past its own, the
/// references between rows move with them, cursors still mark what was
/// seen, and the rooms that were there are untouched.
#[tokio::test]
async fn import_into_a_database_in_use_moves_ids() {
    let first = TestServer::start_sqlite().await;
    let alice = first.agent("alice", "lobby").await;
    for i in 0..3 {
        alice
            .call("post_message", json!({"body": format!("lobby {i}")}))
            .await;
        alice
            .call("create_task", json!({"title": format!("lobby task {i}")}))
            .await;
    }
    let alice_token = alice.token.clone();
    let db = first.db_path.clone();
    let high = |t: &'static str| {
        let store = first.store.clone();
        async move { store.id_high_water(t).await.unwrap() }
    };
    let shift = Shift {
        tasks: high("tasks").await,
        messages: high("messages").await,
        events: high("events").await,
    };
    let dir = first.stop_keeping_files().await;
    assert!(shift.tasks >= 3 && shift.messages >= 3 && shift.events >= 6);

    let fx = fixture(SCHEMA);
    let (code, out, err) = import(&fx, &[], &on_file(Path::new(&db))).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("ids moved"), "{out}");
    let s = TestServer::on_database(&format!("sqlite://{db}")).await;
    assert_imported(&s, &fx, shift).await;
    let lobby = s.mcp(&alice_token).call("read_messages", json!({})).await;
    assert_eq!(lobby["messages"].as_array().unwrap().len(), 3, "{lobby}");
    s.stop().await;
    drop(dir);
}

/// A destination that already holds a room of the same name is refused,
/// and nothing is written: no token, no room, no row.
#[tokio::test]
async fn import_refuses_a_room_already_there() {
    let fx = fixture(SCHEMA);
    let dest = tempfile::tempdir().unwrap();
    let db = dest.path().join("new.db");
    let env = on_file(&db);
    assert_eq!(run_cli(&["admin", "add-room", "projB"], &env).await.0, 0);
    // A room that differs only in case is another room: no conflict there.
    assert_eq!(run_cli(&["admin", "add-room", "proja"], &env).await.0, 0);
    let (code, out, err) = import(&fx, &[], &env).await;
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("already holds room(s) projB"), "{err}");
    assert!(!err.contains("proja"), "{err}");
    let (_, rooms, _) = run_cli(&["admin", "list-rooms", "--json"], &env).await;
    let rooms: Value = serde_json::from_str(&rooms).unwrap();
    let names: Vec<&str> = rooms
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["projB", "proja"]);
    let (_, tokens, _) = run_cli(&["admin", "list-tokens", "--json"], &env).await;
    assert_eq!(serde_json::from_str::<Value>(&tokens).unwrap(), json!([]));
    // Once the room is gone, the same file imports.
    assert_eq!(
        run_cli(&["admin", "delete-room", "--room", "projB", "--yes"], &env)
            .await
            .0,
        0
    );
    let (code, out, err) = import(&fx, &[], &env).await;
    assert_eq!(code, 0, "{out}\n{err}");
    // And a second import of it is refused for every room.
    let (code, _, err) = import(&fx, &[], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("lateRoom, projA, projB"), "{err}");
}

/// A file that is no database, a damaged one, a foreign SQLite file, a
/// chatroom database, a ChatRoomMCP file with a row that cannot be read, and
/// a missing path each get a one-line reason and change nothing: the
/// configured database is not even created, an existing one keeps its rows.
#[tokio::test]
async fn import_refuses_damaged_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh.db");
    let used = dir.path().join("used.db");
    assert_eq!(
        run_cli(&["admin", "add-room", "lobby"], &on_file(&used))
            .await
            .0,
        0
    );
    let used_before = std::fs::read(&used).unwrap();

    let garbage = dir.path().join("garbage.db");
    std::fs::write(
        &garbage,
        (0..8192u32)
            .map(|i| (i * 31 % 256) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();

    let damaged = fixture(SCHEMA);
    {
        // Overwrite the middle of the file, where the pages of tables are.
        let mut bytes = std::fs::read(&damaged.path).unwrap();
        let mid = bytes.len() / 2;
        for b in &mut bytes[4096..mid] {
            *b = 0xA5;
        }
        std::fs::write(&damaged.path, bytes).unwrap();
    }

    let foreign = dir.path().join("foreign.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('x');")
        .unwrap();

    let ours = TestServer::start_sqlite().await;
    ours.agent("alice", "lobby").await;
    let ours_path = ours.db_path.clone();

    let bad_row = fixture(SCHEMA);
    bad_row
        .conn()
        .execute("UPDATE messages SET ts = 'yesterday' WHERE id = 2", [])
        .unwrap();
    let bad_status = fixture(SCHEMA);
    bad_status
        .conn()
        .execute("UPDATE tasks SET status = 'someday' WHERE id = 3", [])
        .unwrap();
    let bad_file = fixture(SCHEMA);
    bad_file
        .conn()
        .execute("UPDATE files SET size = 3 WHERE id = 1", [])
        .unwrap();
    let bad_room = fixture(SCHEMA);
    bad_room
        .conn()
        .execute("UPDATE messages SET room = 'my room' WHERE id = 3", [])
        .unwrap();

    let cases: Vec<(String, &str)> = vec![
        (
            garbage.display().to_string(),
            "not a readable SQLite database",
        ),
        (damaged.path.display().to_string(), ""),
        (
            foreign.display().to_string(),
            "not a ChatRoomMCP database: it has no table rooms",
        ),
        (ours_path.clone(), "chatroom admin copy"),
        (
            bad_row.path.display().to_string(),
            "table messages, row id 2, column ts",
        ),
        (
            bad_status.path.display().to_string(),
            "\"someday\" is not a task status",
        ),
        (bad_file.path.display().to_string(), "table files, row id 1"),
        (
            bad_room.path.display().to_string(),
            "\"my room\" is not valid",
        ),
        (
            dir.path().join("nothing.db").display().to_string(),
            "there is no file",
        ),
    ];
    for (path, says) in &cases {
        for db in [&fresh, &used] {
            let (code, out, err) =
                run_cli(&["admin", "import-chatroommcp", path], &on_file(db)).await;
            assert_ne!(code, 0, "{path}: {out}");
            assert!(out.is_empty(), "{path}: {out}");
            assert!(err.contains(says), "{path}: {err}");
            if says.is_empty() {
                assert!(
                    err.contains("damaged") || err.contains("not a readable SQLite database"),
                    "{path}: {err}"
                );
            }
            assert_eq!(err.trim().lines().count(), 1, "{path}: {err}");
            assert!(!fresh.exists(), "{path}: the destination was created");
            assert_eq!(std::fs::read(&used).unwrap(), used_before, "{path}");
        }
    }
    ours.stop().await;
}

/// A write that fails part-way (here the destination refuses file rows)
/// is undone: the rooms, board, chat and events written before it are
/// deleted again and no token arrives, so the import can simply be rerun.
#[tokio::test]
async fn a_failed_import_is_undone() {
    let fx = fixture(SCHEMA);
    let dest = tempfile::tempdir().unwrap();
    let db = dest.path().join("new.db");
    let env = on_file(&db);
    assert_eq!(run_cli(&["admin", "add-room", "lobby"], &env).await.0, 0);
    Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER no_files BEFORE INSERT ON files \
             BEGIN SELECT RAISE(ABORT, 'the disk is full'); END;",
        )
        .unwrap();
    let (code, out, err) = import(&fx, &[], &env).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("the disk is full"), "{err}");
    assert!(err.contains("undone"), "{err}");
    let c = Connection::open(&db).unwrap();
    for (table, want) in [
        ("rooms", 1),
        ("tokens", 0),
        ("tasks", 0),
        ("task_deps", 0),
        ("notes", 0),
        ("messages", 0),
        ("mentions", 0),
        ("events", 0),
        ("cursors", 0),
        ("presence", 0),
        ("files", 0),
    ] {
        let n: i64 = c
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, want, "{table}");
    }
    // Without the fault the same file goes in.
    c.execute_batch("DROP TRIGGER no_files;").unwrap();
    drop(c);
    let (code, out, err) = import(&fx, &[], &env).await;
    assert_eq!(code, 0, "{out}\n{err}");
}

/// Pointing the destination at the ChatRoomMCP file itself (the same path
/// in both setups) is refused before anything opens it for writing.
#[tokio::test]
async fn import_refuses_the_source_as_destination() {
    let fx = fixture(SCHEMA);
    let before = fx.digest();
    let (code, out, err) = import(&fx, &[], &on_file(&fx.path)).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("the ChatRoomMCP file itself"), "{err}");
    let to = format!("sqlite://{}", fx.path.display());
    let (code, _, err) = import(&fx, &["--to", &to], &HashMap::new()).await;
    assert_ne!(code, 0);
    assert!(err.contains("the ChatRoomMCP file itself"), "{err}");
    assert_eq!(fx.digest(), before);
}

/// Into PostgreSQL (with `CHATROOM_TEST_PG_URL`): the same instance arrives
/// through `--to`, and the server on it sees everything.
#[tokio::test]
async fn import_into_postgres() {
    let Some(server) = common::pg_server() else {
        eprintln!("skipped: set {} to run on PostgreSQL", common::PG_ENV);
        return;
    };
    let pg = common::PgDatabase::create(&server).await;
    let fx = fixture(SCHEMA);
    // --to wins over the configured database, which stays untouched.
    let dir = tempfile::tempdir().unwrap();
    let configured = dir.path().join("configured.db");
    let (code, out, err) = import(&fx, &["--to", &pg.url], &on_file(&configured)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!configured.exists());
    assert!(!out.contains("MISMATCH"), "{out}");
    let s = TestServer::on_database(&pg.url).await;
    assert_imported(&s, &fx, Shift::default()).await;
    // The id sequences moved past the imported rows.
    let box1 = s.mcp(&fx.tokens["box1"]);
    let posted = box1
        .call("post_message", json!({"body": "and again"}))
        .await;
    assert!(posted["message_id"].as_i64().unwrap() > 5);
    let (code, _, err) = import(&fx, &["--to", &pg.url], &on_file(&configured)).await;
    assert_ne!(code, 0, "a second import is refused");
    assert!(err.contains("already holds"), "{err}");
    s.stop().await;
}

/// The import applies the rules a live server applies to what it takes in:
/// an over-long message, a task title with a terminal escape in its
/// author's name, a file name with a bidi override, each row is listed,
/// and nothing is imported.
#[tokio::test]
async fn import_refuses_rows_a_live_server_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest.db");
    let fx = fixture(SCHEMA);
    let c = fx.conn();
    c.execute(
        "UPDATE messages SET body = ?1 WHERE id = 2",
        [&"x".repeat(8_001)],
    )
    .unwrap();
    c.execute(
        "UPDATE tasks SET created_by = 'box1\u{1b}[2J' WHERE id = 3",
        [],
    )
    .unwrap();
    c.execute(
        "UPDATE files SET name = 'report\u{202E}fdp.exe' WHERE id = 1",
        [],
    )
    .unwrap();
    drop(c);
    let (code, out, err) = import(&fx, &[], &on_file(&dest)).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("3 rows break the rules"), "{err}");
    assert!(
        err.contains("message 2: message is 8001 characters"),
        "{err}"
    );
    assert!(err.contains("task 3: agent name"), "{err}");
    assert!(
        err.contains("file 1: name must be a plain file name"),
        "{err}"
    );
    assert!(err.contains("nothing was imported"), "{err}");
    // Nothing was written: the destination has no rooms.
    let (_, rooms, _) = run_cli(&["admin", "list-rooms"], &on_file(&dest)).await;
    assert!(!rooms.contains("projA"), "{rooms}");
}
