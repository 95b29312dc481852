//! Search scoped to the caller's room inside the index, on both backends
//! (SQLite always, PostgreSQL with `CHATROOM_TEST_PG_URL`), and existing
//! databases carried over by the migrations. Room names here use `.`, `-`
//! and `_` (capitals are not room names yet: `names::check_room`).

mod common;

use std::collections::HashSet;

use chatroom::db;
use chatroom::domain::store::Page;
use common::TestServer;
use serde_json::{Value, json};

fn hits(r: &Value) -> Vec<(String, String)> {
    r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["kind"].as_str().unwrap().to_owned(),
                h["snippet"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Rooms whose names differ only by `.`, `-`, `_` or a prefix each find
/// their own message, task and note for a word all of them use, and
/// nothing of the others; a room with none of it finds nothing.
#[tokio::test]
async fn search_never_crosses_rooms() {
    let s = TestServer::start().await;
    let rooms = ["a.b", "a-b", "a_b", "ab", "a", "b.a", "x.y-z_1"];
    let mut agents = Vec::new();
    for (i, room) in rooms.iter().enumerate() {
        let c = s.agent(&format!("agent{i}"), room).await;
        c.call(
            "post_message",
            json!({"body": format!("shared word, mark{i}")}),
        )
        .await;
        let t = c
            .call(
                "create_task",
                json!({"title": format!("shared task mark{i}")}),
            )
            .await["created"]["id"]
            .as_i64()
            .unwrap();
        c.call(
            "add_note",
            json!({"task_id": t, "body": format!("shared note mark{i}")}),
        )
        .await;
        agents.push(c);
    }
    for (i, c) in agents.iter().enumerate() {
        let r = c.call("search", json!({"query": "shared"})).await;
        let found = hits(&r);
        let kinds: HashSet<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds, HashSet::from(["message", "task", "note"]), "{r}");
        assert_eq!(found.len(), 3, "{}: {r}", rooms[i]);
        for (_, snippet) in &found {
            assert!(snippet.contains(&format!("mark{i}")), "{}: {r}", rooms[i]);
        }
        // Another room's own word is nowhere to be found here.
        let j = (i + 1) % rooms.len();
        let r = c.call("search", json!({"query": format!("mark{j}")})).await;
        assert_eq!(r["count"], 0, "{}: {r}", rooms[i]);
    }
    let empty = s.agent("loner", "empty.room").await;
    let r = empty.call("search", json!({"query": "shared word"})).await;
    assert_eq!(r["count"], 0, "{r}");
}

/// A database made by the first schema, with messages, a note, mentions
/// (copied bodies, made-up `@words` among them) and its old search index,
/// opens under the new one: search finds its rows in their room only and
/// `my_mentions` reads the bodies through the message and the note.
#[tokio::test]
async fn an_old_sqlite_database_migrates() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    std::fs::create_dir(&first).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/migrations/sqlite/0001_init.sql"
        ),
        first.join("0001_init.sql"),
    )
    .unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite://{}", path.display());
    {
        let opts = url
            .parse::<sqlx::sqlite::SqliteConnectOptions>()
            .unwrap()
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
        sqlx::migrate::Migrator::new(first.as_path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        for sql in [
            "INSERT INTO rooms (name, created_ts) VALUES ('lobby', 1), ('other.x', 1)",
            "INSERT INTO tokens (hash, agent, room, created_ts) VALUES ('h1', 'Bob', 'lobby', 1)",
            "INSERT INTO messages (id, room, ts, author, body) VALUES \
                (1, 'lobby', 10, 'alice', 'hello @bob and @nobody, gizmo'), \
                (2, 'other.x', 11, 'eve', 'gizmo elsewhere')",
            "INSERT INTO tasks (id, room, title, status, created_by, created_ts, updated_ts) \
                VALUES (1, 'lobby', 'gizmo task', 'pending', 'alice', 12, 12)",
            "INSERT INTO notes (id, task_id, room, ts, author, body) \
                VALUES (1, 1, 'lobby', 13, 'alice', 'note for @bob')",
            "INSERT INTO mentions (room, agent, message_id, note_id, task_id, author, ts, body) VALUES \
                ('lobby', 'bob', 1, NULL, NULL, 'alice', 10, 'hello @bob and @nobody, gizmo'), \
                ('lobby', 'nobody', 1, NULL, NULL, 'alice', 10, 'hello @bob and @nobody, gizmo'), \
                ('lobby', 'bob', NULL, 1, 1, 'alice', 13, 'note for @bob')",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let store = db::open(&url).await.unwrap();
    assert_eq!(
        store.count_rows("mentions").await.unwrap(),
        2,
        "@nobody went"
    );
    let m = store
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
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].message_id, m[0].body.as_str()),
        (Some(1), "hello @bob and @nobody, gizmo")
    );
    assert_eq!(
        (m[1].note_id, m[1].body.as_str()),
        (Some(1), "note for @bob")
    );
    assert!(
        store
            .my_mentions(
                "lobby",
                "bob",
                Page {
                    since_id: 1,
                    limit: 10
                }
            )
            .await
            .unwrap()
            .is_empty(),
        "the note sits at message 1"
    );
    let words = vec!["gizmo".to_owned()];
    let found = store.search("lobby", &words, 10).await.unwrap();
    let kinds: HashSet<&str> = found.iter().map(|h| h.kind.as_str()).collect();
    assert_eq!(kinds, HashSet::from(["message", "task"]));
    let there = store.search("other.x", &words, 10).await.unwrap();
    assert_eq!(there.len(), 1);
    assert_eq!(there[0].message_id, Some(2));
}

/// Writes that commit together are all found, on both backends: posts sent
/// at once share group commits (SQLite indexes a batch's text just before
/// its commit), and a task whose body changes is found by its new words
/// and no longer by its old ones.
#[tokio::test]
async fn every_write_of_a_burst_is_found_and_a_changed_body_replaces_its_words() {
    let s = TestServer::start().await;
    let c = s.agent("poster", "burst").await;
    let posts = (0..48).map(|i| {
        let c = &c;
        async move {
            c.call("post_message", json!({"body": format!("burst word{i}")}))
                .await
        }
    });
    futures::future::join_all(posts).await;
    for i in 0..48 {
        let r = c.call("search", json!({"query": format!("word{i}")})).await;
        assert_eq!(r["count"], 1, "word{i}: {r}");
    }
    let t = c
        .call("create_task", json!({"title": "index", "body": "oldword"}))
        .await["created"]["id"]
        .as_i64()
        .unwrap();
    c.call("update_task", json!({"task_id": t, "body": "newword"}))
        .await;
    let old = c.call("search", json!({"query": "oldword"})).await;
    assert_eq!(old["count"], 0, "{old}");
    let new = c.call("search", json!({"query": "newword"})).await;
    assert_eq!(new["count"], 1, "{new}");
}
