//! The mention index under load a writer can choose: only agents of the
//! room are indexed, at most 20 a body, each row pointing at its message or
//! note (not a copy of it), pruned with what it points at; and `my_mentions`
//! pages by message id. On SQLite always, on PostgreSQL with
//! `CHATROOM_TEST_PG_URL`.

mod common;

use common::{Grant, McpClient, TestServer};
use serde_json::{Value, json};

/// The logical size of the SQLite database in bytes (WAL content included).
async fn sqlite_bytes(s: &TestServer) -> i64 {
    let pool = sqlx::SqlitePool::connect(&s.db_url).await.unwrap();
    let n: i64 = sqlx::query_scalar(
        "SELECT p.page_count * s.page_size FROM pragma_page_count() p, pragma_page_size() s",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    n
}

fn ids(m: &Value, key: &str) -> Vec<i64> {
    m["mentions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x[key].as_i64())
        .collect()
}

async fn count(c: &McpClient) -> i64 {
    c.call("my_mentions", json!({"room": "lobby"})).await["count"]
        .as_i64()
        .unwrap()
}

async fn post(c: &McpClient, body: &str) -> i64 {
    c.call("post_message", json!({"body": body})).await["message_id"]
        .as_i64()
        .expect("message id")
}

/// Ten messages of 1,650 made-up `@names` each add one mention row each
/// (for the one real agent they name), events that list only that agent,
/// and on SQLite a few times the bytes posted, not 1,650 copies of them.
#[tokio::test]
async fn many_word_mentions_stay_bounded() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    // 1,650 distinct two-letter names, none of them an agent.
    let letters: Vec<char> = ('a'..='z').chain('0'..='9').chain('α'..='ω').collect();
    let names: Vec<String> = letters
        .iter()
        .flat_map(|a| letters.iter().map(move |b| format!("@{a}{b}")))
        .take(1650)
        .collect();
    assert_eq!(names.len(), 1650);
    let body = format!("@bob {}", names.join(" "));
    assert!(body.chars().count() <= 8000, "{}", body.len());
    let before = if s.on_postgres() {
        0
    } else {
        sqlite_bytes(&s).await
    };
    for _ in 0..10 {
        post(&alice, &body).await;
    }
    assert_eq!(s.store.count_rows("mentions").await.unwrap(), 10);
    let news = bob.call("whats_new", json!({})).await;
    let events = news["events"].as_array().unwrap();
    let messages: Vec<&Value> = events.iter().filter(|e| e["kind"] == "message").collect();
    assert_eq!(messages.len(), 10, "{news}");
    for e in messages {
        assert_eq!(e["data"]["mentions"], json!(["bob"]), "{e}");
        assert_eq!(e["mentions_you"], true);
    }
    assert_eq!(bob.call("my_mentions", json!({})).await["count"], 10);
    if !s.on_postgres() {
        let grown = sqlite_bytes(&s).await - before;
        let posted = 10 * body.len() as i64;
        // The message, its event and its search index: a small multiple of
        // the text (the old index copied the body 1,651 times: 1,651x).
        assert!(
            grown < 20 * posted,
            "grew {grown} bytes for {posted} posted"
        );
    }
}

/// Only agents who can read the room are indexed (its own tokens, tokens
/// naming it among their rooms, all-rooms tokens), at most 20 a body in
/// order of appearance; `whats_new` flags exactly those.
#[tokio::test]
async fn only_room_agents_are_indexed_at_most_twenty() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    s.room("other").await;
    s.token("zed", "other").await;
    let boss = s
        .token_with(Grant {
            agent: "Boss".into(),
            room: "other".into(),
            all_rooms: true,
            ..Grant::default()
        })
        .await;
    let guest = s
        .token_with(Grant {
            agent: "guest".into(),
            room: "other".into(),
            also_rooms: vec!["lobby".into()],
            ..Grant::default()
        })
        .await;
    let mut cast = Vec::new();
    for i in 0..22 {
        let name = format!("a{i:02}");
        cast.push((name.clone(), s.mcp(&s.token(&name, "lobby").await)));
    }
    // zed and nobody are no agents of lobby; boss and guest are; then 22
    // room agents, of which the first 18 fit under the cap of 20.
    let listed: Vec<String> = cast.iter().map(|(n, _)| format!("@{n}")).collect();
    let body = format!("@zed @nobody @BOSS @guest {}", listed.join(" "));
    post(&alice, &body).await;
    assert_eq!(s.store.count_rows("mentions").await.unwrap(), 20);
    assert_eq!(count(&s.mcp(&boss)).await, 1);
    assert_eq!(count(&s.mcp(&guest)).await, 1);
    for (i, (name, c)) in cast.iter().enumerate() {
        let want = i64::from(i < 18);
        assert_eq!(count(c).await, want, "{name}");
        let news = c.call("whats_new", json!({})).await;
        let flagged = news["events"][0]["mentions_you"] == true;
        assert_eq!(flagged, i < 18, "{name}: {news}");
    }
}

/// `since_id` is a message id: with mentions in messages m1 < m2 < m3,
/// `since_id: m1` returns m2 and m3 (issue 17), and `next_since_id` pages on
/// without losing any. A note sits at the room's newest message when it was
/// written.
#[tokio::test]
async fn my_mentions_since_id_is_a_message_id() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    for i in 0..4 {
        post(&alice, &format!("plain {i}")).await;
    }
    let m1 = post(&alice, "one @bob").await;
    let m2 = post(&alice, "two @bob").await;
    let task = alice.call("create_task", json!({"title": "t"})).await["created"]["id"]
        .as_i64()
        .unwrap();
    alice
        .call("add_note", json!({"task_id": task, "body": "note @bob"}))
        .await;
    let m3 = post(&alice, "three @bob").await;
    let got = bob.call("my_mentions", json!({"since_id": m1})).await;
    assert_eq!(ids(&got, "message_id"), [m2, m3], "{got}");
    assert_eq!(
        ids(&got, "note_id").len(),
        1,
        "the note came after m2: {got}"
    );
    assert_eq!(got["mentions"][1]["body"], "note @bob");
    assert_eq!(got["mentions"][1]["author"], "alice");
    // A page of two would end between m2 and the note after it: it ends
    // before m2 instead, and the next page starts there; nothing is lost.
    let all = bob.call("my_mentions", json!({"limit": 2})).await;
    assert_eq!(ids(&all, "message_id"), [m1], "{all}");
    assert_eq!(all["next_since_id"], m1);
    let rest = bob
        .call("my_mentions", json!({"since_id": all["next_since_id"]}))
        .await;
    assert_eq!(ids(&rest, "message_id"), [m2, m3], "{rest}");
    assert_eq!(ids(&rest, "note_id").len(), 1);
    assert_eq!(rest["next_since_id"], m3);
    let page = bob.call("my_mentions", json!({"limit": 3})).await;
    assert_eq!(page["count"], 3, "{page}");
    assert_eq!(page["next_since_id"], m2);
    let none = bob.call("my_mentions", json!({"since_id": m3})).await;
    assert_eq!(none["count"], 0);
}

/// Retention prunes message mentions with their messages (notes stay, and
/// so do their mentions); deleting the room removes every mention row.
#[tokio::test]
async fn mentions_go_with_what_they_point_at() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let admin = s.mcp(
        &s.token_with(Grant {
            agent: "keeper".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await,
    );
    post(&alice, "old @bob").await;
    let task = alice.call("create_task", json!({"title": "t"})).await["created"]["id"]
        .as_i64()
        .unwrap();
    alice
        .call("add_note", json!({"task_id": task, "body": "note @bob"}))
        .await;
    assert_eq!(s.store.count_rows("mentions").await.unwrap(), 2);
    // Two days pass for everything written so far.
    let day2 = 2 * 86_400_000;
    s.exec_sql("UPDATE messages SET ts = ts - $1", day2).await;
    s.exec_sql("UPDATE notes SET ts = ts - $1", day2).await;
    s.exec_sql("UPDATE mentions SET ts = ts - $1", day2).await;
    s.exec_sql("UPDATE events SET ts = ts - $1", day2).await;
    admin.call("set_retention", json!({"days": 1})).await;
    assert_eq!(s.store.count_rows("mentions").await.unwrap(), 1);
    let left = bob.call("my_mentions", json!({})).await;
    assert_eq!(ids(&left, "message_id"), Vec::<i64>::new(), "{left}");
    assert_eq!(ids(&left, "note_id").len(), 1, "{left}");
    admin.call("delete_room", json!({"room": "lobby"})).await;
    assert_eq!(s.store.count_rows("mentions").await.unwrap(), 0);
}
