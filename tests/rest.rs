//! The `/v1` REST API over real HTTP: routes, shapes, and every refusal.

mod common;

use common::rest::{Rest, rest};
use common::{Grant, TestServer};
use serde_json::json;

/// Without a valid token every `/v1` route answers 401 with the JSON error
/// body and `WWW-Authenticate: Bearer`; unknown `/v1` paths stay 404.
#[tokio::test]
async fn v1_needs_a_token() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    for token in ["", "cr_nope"] {
        let c = Rest::new(&s.url, token);
        for path in [
            "/v1/whats_new",
            "/v1/tasks",
            "/v1/messages",
            "/v1/rooms",
            "/v1/files/1",
            "/v1/stream",
        ] {
            let a = c.get(path).await;
            assert_eq!(a.status, 401, "{path}");
            assert_eq!(a.code(), "unauthorized", "{path}");
            assert!(
                a.header("www-authenticate")
                    .starts_with("Bearer resource_metadata=")
            );
        }
        let a = c.post("/v1/messages", json!({"body": "hi"})).await;
        assert_eq!(a.status, 401);
    }
    let alice = rest(&s, "alice").await;
    assert_eq!(alice.get("/v1/nope").await.status, 404);
}

/// A message posted over REST is 201 and reads back in order, with the
/// untrusted-content warning; replies must name a message of the room.
#[tokio::test]
async fn messages_post_and_read() {
    let s = TestServer::start().await;
    let alice = rest(&s, "alice").await;
    let bob = rest(&s, "bob").await;
    let a = alice
        .post("/v1/messages", json!({"body": "hello @bob"}))
        .await;
    assert_eq!(a.status, 201, "{:?}", a.json);
    assert_eq!(a.json["ok"], true);
    assert_eq!(a.json["author"], "alice");
    assert_eq!(a.json["room"], "lobby");
    let first = a.json["message_id"].as_i64().unwrap();
    let a = bob
        .post("/v1/messages", json!({"body": "hi", "reply_to": first}))
        .await;
    assert_eq!(a.status, 201);
    let a = bob.get("/v1/messages?since_id=0").await;
    assert_eq!(a.status, 200);
    let msgs = a.json["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["body"], "hello @bob");
    assert_eq!(msgs[1]["reply_to"], first);
    assert_eq!(
        a.json["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );
    assert_eq!(a.json["latest_id"], msgs[1]["id"]);
    let a = bob.get(&format!("/v1/messages?since_id={first}")).await;
    assert_eq!(a.json["messages"].as_array().unwrap().len(), 1);

    let a = bob
        .post("/v1/messages", json!({"body": "x", "reply_to": 999_999}))
        .await;
    assert_eq!((a.status, a.code()), (404, "not_found"));
    let a = bob.post("/v1/messages", json!({"body": "  "})).await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
    let a = bob
        .post("/v1/messages", json!({"body": "x".repeat(8001)}))
        .await;
    assert_eq!((a.status, a.code()), (413, "too_large"));
    let a = bob
        .send(
            bob.http
                .post(format!("{}/v1/messages", s.url))
                .bearer_auth(&bob.token)
                .body("{not json"),
        )
        .await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
}

/// `/v1/tasks` lists open tasks only; `/v1/tasks/{id}` gives one with notes;
/// unknown ids, ids of another room and non-numbers are 404.
#[tokio::test]
async fn tasks_open_and_one() {
    let s = TestServer::start().await;
    let mcp = s.agent("alice", "lobby").await;
    let alice = rest(&s, "alice").await;
    let open = mcp.call("create_task", json!({"title": "open one"})).await;
    let open_id = open["created"]["id"].as_i64().unwrap();
    let done = mcp
        .call("create_task", json!({"title": "done one", "claim": true}))
        .await;
    let done_id = done["created"]["id"].as_i64().unwrap();
    mcp.call("submit_result", json!({"task_id": done_id, "result": "ok"}))
        .await;
    mcp.call("add_note", json!({"task_id": open_id, "body": "a note"}))
        .await;

    let a = alice.get("/v1/tasks").await;
    assert_eq!(a.status, 200);
    let ids: Vec<i64> = a.json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![open_id]);
    assert!(a.json["untrusted_content_warning"].is_string());

    let a = alice.get(&format!("/v1/tasks/{open_id}")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json["task"]["title"], "open one");
    assert_eq!(a.json["task"]["notes"][0]["body"], "a note");
    assert_eq!(
        a.json["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );

    s.room("other").await;
    let other = s.agent("carol", "other").await;
    let theirs = other.call("create_task", json!({"title": "theirs"})).await;
    let theirs_id = theirs["created"]["id"].as_i64().unwrap();
    for path in [
        format!("/v1/tasks/{theirs_id}"),
        "/v1/tasks/999999".to_owned(),
        "/v1/tasks/abc".to_owned(),
    ] {
        let a = alice.get(&path).await;
        assert_eq!((a.status, a.code()), (404, "not_found"), "{path}");
    }
}

/// Read-only tokens are refused writes (403 `read_only`); a room the token is
/// not granted is 403 `forbidden`; a malformed room name is 400.
#[tokio::test]
async fn refusals_by_grant() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    s.room("secret").await;
    let observer = Rest::new(
        &s.url,
        &s.token_with(Grant {
            agent: "watcher".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await,
    );
    let a = observer.get("/v1/tasks").await;
    assert_eq!(a.status, 200);
    let a = observer.post("/v1/messages", json!({"body": "hi"})).await;
    assert_eq!((a.status, a.code()), (403, "read_only"));
    let a = observer
        .post_bytes("/v1/files?name=a.txt", b"data".to_vec())
        .await;
    assert_eq!((a.status, a.code()), (403, "read_only"));
    let a = observer
        .post("/v1/rooms/lobby/info", json!({"description": "x"}))
        .await;
    assert_eq!((a.status, a.code()), (403, "read_only"));

    let alice = rest(&s, "alice").await;
    for path in [
        "/v1/tasks?room=secret",
        "/v1/messages?room=secret",
        "/v1/whats_new?room=secret",
        "/v1/tasks?room=does-not-exist",
    ] {
        let a = alice.get(path).await;
        assert_eq!((a.status, a.code()), (403, "forbidden"), "{path}");
        assert!(!a.text().contains("does not exist"), "{path}: {}", a.text());
    }
    let a = alice
        .post("/v1/messages?room=secret", json!({"body": "x"}))
        .await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));
    let a = alice.get("/v1/tasks?room=..%2Fetc").await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
}

/// Raw upload is 201 and downloads byte for byte with its type and a safe
/// attachment disposition; empty, path-like and missing names are 400;
/// over the cap is 413; delete is the uploader's (or an admin's).
#[tokio::test]
async fn files_up_and_down() {
    let s = TestServer::start_with(|c| c.max_file_bytes = 2048).await;
    let alice = rest(&s, "alice").await;
    let bob = rest(&s, "bob").await;
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 13, 10]).collect();
    let a = alice
        .send(
            alice
                .http
                .post(format!(
                    "{}/v1/files?name=r%C3%A9sum%C3%A9%20%22v2%22.bin&expires_in_hours=2",
                    s.url
                ))
                .bearer_auth(&alice.token)
                .header("content-type", "application/x-demo")
                .body(bytes.clone()),
        )
        .await;
    assert_eq!(a.status, 201, "{:?}", a.json);
    assert_eq!(a.json["size"], bytes.len());
    assert_eq!(a.json["name"], "résumé \"v2\".bin");
    assert!(a.json["expires_at"].is_string());
    let id = a.json["file_id"].as_i64().unwrap();

    let a = bob.get(&format!("/v1/files/{id}")).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.bytes, bytes);
    assert_eq!(a.header("content-type"), "application/x-demo");
    assert_eq!(a.header("x-content-type-options"), "nosniff");
    let cd = a.header("content-disposition");
    assert!(
        cd.starts_with("attachment; filename=\"r_sum_ _v2_.bin\""),
        "{cd}"
    );
    assert!(
        cd.contains("filename*=UTF-8''r%C3%A9sum%C3%A9%20%22v2%22.bin"),
        "{cd}"
    );

    let a = bob.get("/v1/files").await;
    assert_eq!(a.json["files"][0]["file_id"], id);

    for name in ["", "%20", "..%2Fx", "a%2Fb", "a%5Cb", "..", "a%0Ab"] {
        let a = alice
            .post_bytes(&format!("/v1/files?name={name}"), b"x".to_vec())
            .await;
        assert_eq!((a.status, a.code()), (400, "invalid_argument"), "{name:?}");
    }
    let a = alice.post_bytes("/v1/files", b"x".to_vec()).await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
    let a = alice.post_bytes("/v1/files?name=e.txt", Vec::new()).await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
    let a = alice
        .post_bytes("/v1/files?name=big.bin", vec![7; 2049])
        .await;
    assert_eq!((a.status, a.code()), (413, "too_large"));
    let a = alice
        .post_bytes("/v1/files?name=huge.bin", vec![7; 200 * 1024])
        .await;
    assert_eq!((a.status, a.code()), (413, "too_large"));
    let a = alice
        .post_bytes("/v1/files?name=x&expires_in_hours=0", b"x".to_vec())
        .await;
    assert_eq!(a.status, 400);

    let a = bob.delete(&format!("/v1/files/{id}")).await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));
    let a = alice.delete(&format!("/v1/files/{id}")).await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["file_id"], id);
    let a = bob.get(&format!("/v1/files/{id}")).await;
    assert_eq!((a.status, a.code()), (404, "not_found"));
    let a = alice.delete(&format!("/v1/files/{id}")).await;
    assert_eq!(a.status, 404);
}

/// Room info is any writer's; retention and room deletion are room admins';
/// `/v1/rooms` shows the granted rooms with their counts.
#[tokio::test]
async fn room_routes() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    s.room("dev").await;
    s.room("hidden").await;
    let alice = rest(&s, "alice").await;
    let admin = Rest::new(
        &s.url,
        &s.token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            also_rooms: vec!["dev".into()],
            admin: true,
            ..Grant::default()
        })
        .await,
    );
    let a = alice
        .post(
            "/v1/rooms/lobby/info",
            json!({"description": "the lobby", "repo_url": "https://example.invalid/x"}),
        )
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["description"], "the lobby");
    let a = alice.post("/v1/rooms/lobby/info", json!({})).await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
    let a = alice
        .post("/v1/rooms/dev/info", json!({"description": "x"}))
        .await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));

    alice.post("/v1/messages", json!({"body": "one"})).await;
    let a = admin.get("/v1/rooms").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json["agent"], "root");
    assert_eq!(a.json["default_room"], "lobby");
    assert_eq!(a.json["admin"], true);
    assert_eq!(a.json["all_rooms"], false);
    let rooms = a.json["rooms"].as_array().unwrap();
    let names: Vec<&str> = rooms.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["dev", "lobby"]);
    let lobby = &rooms[1];
    assert_eq!(lobby["description"], "the lobby");
    assert_eq!(lobby["messages"], 1);
    assert_eq!(lobby["open_tasks"], 0);
    assert_eq!(lobby["files"], 0);

    let a = alice
        .post("/v1/rooms/lobby/retention", json!({"days": 7}))
        .await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));
    let a = admin
        .post("/v1/rooms/lobby/retention", json!({"days": 7}))
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["retention_days"], 7);
    let a = admin
        .post("/v1/rooms/lobby/retention", json!({"days": 4000}))
        .await;
    assert_eq!((a.status, a.code()), (400, "invalid_argument"));
    let a = admin
        .post("/v1/rooms/lobby/retention", json!({"days": "seven"}))
        .await;
    assert_eq!(a.status, 400);
    let a = admin
        .post("/v1/rooms/hidden/retention", json!({"days": 1}))
        .await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));

    let a = alice.delete("/v1/rooms/lobby").await;
    assert_eq!((a.status, a.code()), (403, "forbidden"));
    let a = admin.delete("/v1/rooms/dev").await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["deleted"], "dev");
    assert!(s.store.get_room("dev").await.unwrap().is_none());
    let a = admin.get("/v1/tasks?room=dev").await;
    assert_eq!((a.status, a.code()), (404, "not_found"));
}

/// A hook's `after_id` beyond the room's history (its mark from before a
/// restore) is not applied: the answer shows the new events, says so in
/// `cursor_reset` and `x-chatroom-cursor-reset`, and its
/// `x-chatroom-last-event-id` is the server's, not the stale mark. With
/// nothing new the text stays empty (the hook stays silent) and the
/// headers still tell. An `after_id` within the ids other rooms used is
/// applied as ever.
#[tokio::test]
async fn whats_new_after_id_beyond_the_history() {
    let s = TestServer::start().await;
    let alice = rest(&s, "alice").await;
    let bob = rest(&s, "bob").await;
    let carol = s.agent("carol", "busy").await;
    bob.post("/v1/messages", json!({"body": "one"})).await;
    bob.post("/v1/messages", json!({"body": "two"})).await;
    let latest = bob.get("/v1/events").await.json["latest_event_id"]
        .as_i64()
        .unwrap();
    let stale = latest + 50;

    let a = alice
        .get(&format!("/v1/whats_new?peek=1&after_id={stale}"))
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(a.json["count"], 2, "{:?}", a.json);
    assert_eq!(
        a.json["cursor_reset"],
        json!({"requested_after": stale, "latest_event_id": latest, "resumed_after": 0})
    );
    assert_eq!(a.header("x-chatroom-cursor-reset"), latest.to_string());
    assert_eq!(a.header("x-chatroom-last-event-id"), latest.to_string());

    let a = alice
        .get(&format!(
            "/v1/whats_new?format=text&peek=1&after_id={stale}"
        ))
        .await;
    let text = a.text();
    assert!(text.starts_with("=== BEGIN UNTRUSTED DATA "), "{text}");
    assert!(text.contains("history on the server restarted"), "{text}");
    assert!(text.contains("two"), "{text}");
    assert_eq!(a.header("x-chatroom-cursor-reset"), latest.to_string());

    // Nothing new: an empty body, the headers still say it.
    alice.get("/v1/whats_new").await;
    let a = alice
        .get(&format!(
            "/v1/whats_new?format=text&peek=1&after_id={stale}"
        ))
        .await;
    assert_eq!((a.status, a.text().as_str()), (200, ""));
    assert_eq!(a.header("x-chatroom-cursor-reset"), latest.to_string());
    assert_eq!(a.header("x-chatroom-last-event-id"), latest.to_string());

    // Past the room's latest event but within the ids handed out: applied.
    bob.post("/v1/messages", json!({"body": "three"})).await;
    carol
        .call("post_message", json!({"body": "elsewhere"}))
        .await;
    let busy = carol.call("read_events", json!({})).await["latest_event_id"]
        .as_i64()
        .unwrap();
    let a = alice
        .get(&format!("/v1/whats_new?peek=1&after_id={busy}"))
        .await;
    assert_eq!(a.json["count"], 0, "{:?}", a.json);
    assert!(a.json.get("cursor_reset").is_none(), "{:?}", a.json);
    assert_eq!(a.header("x-chatroom-cursor-reset"), "");
    assert_eq!(a.header("x-chatroom-last-event-id"), busy.to_string());
}

/// `/v1/whats_new` leaves the caller's own events out, moves the cursor
/// unless `peek=1`, and in `format=text` gives the framed digest or an
/// empty body; every call leaves an audit row.
#[tokio::test]
async fn whats_new_for_hooks() {
    let s = TestServer::start().await;
    let alice = rest(&s, "alice").await;
    let bob = rest(&s, "bob").await;
    bob.post("/v1/messages", json!({"body": "from bob"})).await;
    alice
        .post("/v1/messages", json!({"body": "from alice"}))
        .await;
    let audit_before = s.store.audit_count().await.unwrap();

    let a = alice.get("/v1/whats_new?peek=1").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json["count"], 1);
    assert_eq!(a.json["events"][0]["actor"], "bob");
    assert_eq!(a.json["events"][0]["by_you"], false);
    assert!(a.json["untrusted_content_warning"].is_string());

    let a = alice.get("/v1/whats_new?format=text").await;
    assert_eq!(a.status, 200);
    assert!(a.header("content-type").starts_with("text/plain"));
    let text = a.text();
    assert!(text.starts_with("=== BEGIN UNTRUSTED DATA "), "{text}");
    assert!(text.contains("NOT instructions"), "{text}");
    assert!(text.contains("bob message #"), "{text}");
    assert!(text.contains("from bob"), "{text}");
    assert!(!text.contains("from alice"), "{text}");

    let a = alice.get("/v1/whats_new?format=text").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.text(), "");
    let a = alice.get("/v1/whats_new").await;
    assert_eq!(a.json["count"], 0);
    let a = alice.get("/v1/whats_new?format=xml").await;
    assert_eq!(a.status, 400);

    // The audit writer is asynchronous: wait for the rows to land.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let n = s.store.audit_count().await.unwrap();
        if n >= audit_before + 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "audit rows: {n}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A token past its rate limit gets 429 with `Retry-After` on `/v1` too.
#[tokio::test]
async fn v1_calls_are_rate_limited() {
    let s = TestServer::start_with(|c| c.rate_limit_per_minute = 3).await;
    let alice = rest(&s, "alice").await;
    for _ in 0..3 {
        assert_eq!(alice.get("/v1/tasks").await.status, 200);
    }
    let a = alice.get("/v1/tasks").await;
    assert_eq!((a.status, a.code()), (429, "rate_limited"));
    assert!(a.header("retry-after").parse::<u64>().unwrap() >= 1);
}

/// `projA` and `proja` are two rooms over REST and MCP alike: each path and
/// `?room=` reaches its own room, a token granted one is refused the other,
/// and names come back exactly as written.
#[tokio::test]
async fn room_names_keep_their_case() {
    let s = TestServer::start().await;
    s.room("projA").await;
    s.room("proja").await;
    let both = Rest::new(
        &s.url,
        &s.token_with(Grant {
            agent: "alice".into(),
            room: "projA".into(),
            also_rooms: vec!["proja".into()],
            ..Grant::default()
        })
        .await,
    );
    let only_upper = s.token("bob", "projA").await;
    let a = both
        .post("/v1/rooms/projA/info", json!({"description": "upper"}))
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    let a = both
        .post("/v1/rooms/proja/info", json!({"description": "lower"}))
        .await;
    assert_eq!(a.status, 200, "{:?}", a.json);
    assert_eq!(
        both.get("/v1/rooms/projA/info").await.json["description"],
        "upper"
    );
    assert_eq!(
        both.get("/v1/rooms/proja/info").await.json["description"],
        "lower"
    );
    assert_eq!(both.get("/v1/rooms/PROJA/info").await.status, 403);

    let a = both
        .post("/v1/messages?room=proja", json!({"body": "down here"}))
        .await;
    assert_eq!(a.status, 201, "{:?}", a.json);
    assert_eq!(a.json["room"], "proja");
    let a = both.get("/v1/messages?room=projA").await;
    assert_eq!(
        a.json["messages"].as_array().unwrap().len(),
        0,
        "{:?}",
        a.json
    );
    let a = both.get("/v1/messages?room=proja").await;
    assert_eq!(a.json["messages"][0]["body"], "down here");
    let names: Vec<String> = both.get("/v1/rooms").await.json["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["projA", "proja"]);

    let bob = s.mcp(&only_upper);
    let me = bob.call("whoami", json!({})).await;
    assert_eq!(me["room"], "projA", "{me}");
    assert_eq!(
        bob.refused("read_messages", json!({"room": "proja"})).await,
        "forbidden"
    );
    let read = bob.call("read_messages", json!({"room": "projA"})).await;
    assert_eq!(read["room"], "projA", "{read}");
}

/// ChatRoomMCP's clients upload with the name in an `X-Chatroom-Filename`
/// header and a fractional `expires_in_hours`; the name is still checked,
/// another room's file id is still `not_found` (SPEC §3), and the answers
/// carry the original's keys (`id`, `deleted`).
#[tokio::test]
async fn files_the_original_way() {
    let s = TestServer::start().await;
    let alice = rest(&s, "alice").await;
    s.room("elsewhere").await;
    let eve = Rest::new(&s.url, &s.token("eve", "elsewhere").await);
    let bytes: Vec<u8> = (0..200u8).collect();
    let up = |name: &str, query: &str| {
        alice.send(
            alice
                .http
                .post(format!("{}/v1/files{query}", alice.base))
                .bearer_auth(&alice.token)
                .header("X-Chatroom-Filename", name)
                .body(bytes.clone()),
        )
    };
    let a = up("raw.bin", "?expires_in_hours=0.25").await;
    assert_eq!(a.status, 201, "{:?}", a.json);
    assert_eq!(a.json["name"], "raw.bin");
    assert_eq!(a.json["size"], 200);
    assert!(a.json["expires_at"].is_string());
    let id = a.json["file_id"].as_i64().unwrap();
    assert_eq!(a.json["id"], id);
    // `?name=` wins over the header.
    let b = up("header.bin", "?name=query.bin").await;
    assert_eq!(b.json["name"], "query.bin");
    // The header's name is checked like any other.
    let c = up("../etc/passwd", "").await;
    assert_eq!((c.status, c.code()), (400, "invalid_argument"));
    for bad in ["0", "-1", "NaN", "inf", "soon"] {
        let d = up("x.bin", &format!("?expires_in_hours={bad}")).await;
        assert_eq!((d.status, d.code()), (400, "invalid_argument"), "{bad}");
    }
    let got = alice.get(&format!("/v1/files/{id}")).await;
    assert_eq!(got.bytes, bytes);
    let list = alice.get("/v1/files").await;
    assert_eq!(list.json["count"], 2);
    assert!(
        list.json["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == id)
    );
    // A file of a room the token does not grant is refused as such; named
    // with a room, a file elsewhere is simply not there.
    let e = eve.get(&format!("/v1/files/{id}")).await;
    assert_eq!((e.status, e.code()), (403, "forbidden"));
    let e = eve.get(&format!("/v1/files/{id}?room=elsewhere")).await;
    assert_eq!((e.status, e.code()), (404, "not_found"));
    let e = eve.delete(&format!("/v1/files/{id}")).await;
    assert_eq!((e.status, e.code()), (404, "not_found"));
    let del = alice.delete(&format!("/v1/files/{id}")).await;
    assert_eq!(del.status, 200);
    assert_eq!(del.json["deleted"]["id"], id);
    assert_eq!(del.json["deleted"]["name"], "raw.bin");
    assert_eq!(del.json["deleted"]["size"], 200);
}

/// REST answers carry ChatRoomMCP's keys beside ours: `count` and
/// `cursor_unchanged` on reads, `ok` and `room_info` on setting room info,
/// `deleted_room` on deleting a room; a call naming no room (`/v1/rooms`)
/// still marks the caller as seen.
#[tokio::test]
async fn rest_answers_carry_the_original_keys() {
    let s = TestServer::start().await;
    let alice = rest(&s, "alice").await;
    let bob = Rest::new(&s.url, &s.token("bob", "lobby").await);
    bob.get("/v1/rooms").await;
    let a = alice.get("/v1/agents").await;
    let b = a.json["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["agent"] == "bob")
        .cloned()
        .unwrap();
    assert!(b["last_seen"].is_string(), "{b}");

    alice.post("/v1/messages", json!({"body": "one"})).await;
    let m = alice.get("/v1/messages").await;
    assert_eq!(m.json["count"], 1);
    assert_eq!(m.json["messages"].as_array().unwrap().len(), 1);
    let e = alice.get("/v1/events").await;
    assert_eq!(e.json["cursor_unchanged"], true);
    assert!(e.json["count"].as_i64().unwrap() >= 1);
    let i = alice
        .post("/v1/rooms/lobby/info", json!({"description": "d"}))
        .await;
    assert_eq!(i.json["ok"], true);
    assert_eq!(i.json["description"], "d");
    assert_eq!(i.json["room_info"]["description"], "d");
    assert_eq!(i.json["room_info"]["name"], "lobby");
    let admin = Rest::new(
        &s.url,
        &s.token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await,
    );
    let d = admin.delete("/v1/rooms/lobby").await;
    assert_eq!(d.status, 200, "{:?}", d.json);
    assert_eq!(d.json["deleted"], "lobby");
    assert_eq!(d.json["deleted_room"], "lobby");
}

/// Every event's `detail` is one line of text saying what happened (a
/// message's or note's own text), as ChatRoomMCP's hook and watcher read
/// it, on `/v1/whats_new`, `/v1/events` and the MCP tools alike; the
/// structured record is under `data`. A long text is cut, and says so.
#[tokio::test]
async fn event_detail_is_a_line_of_text() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = rest(&s, "bob").await;
    alice
        .call("post_message", json!({"body": "sse probe\nsecond line"}))
        .await;
    let long = "word ".repeat(100);
    alice.call("post_message", json!({"body": long})).await;
    let task = alice
        .call("create_task", json!({"title": "Wire the porch light"}))
        .await["created"]["id"]
        .clone();
    alice
        .call(
            "add_note",
            json!({"task_id": task, "body": "halfway there"}),
        )
        .await;
    alice
        .call(
            "put_file",
            json!({"name": "big.bin", "content_base64": "eHh4"}),
        )
        .await;

    let a = bob.get("/v1/whats_new?peek=1").await;
    assert_eq!(a.status, 200);
    let events = a.json["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 5, "{events:?}");
    for e in &events {
        assert!(e["detail"].is_string(), "{e}");
        assert!(!e["detail"].as_str().unwrap().contains('\n'), "{e}");
        assert!(e["data"].is_object(), "{e}");
    }
    assert_eq!(events[0]["detail"], "sse probe second line");
    assert_eq!(events[0]["data"]["body"], "sse probe\nsecond line");
    let cut = events[1]["detail"].as_str().unwrap();
    assert!(cut.chars().count() <= 201, "{cut}");
    assert!(cut.ends_with('…'), "{cut}");
    assert_eq!(events[1]["data"]["body"], long);
    assert_eq!(events[2]["detail"], "Wire the porch light");
    assert_eq!(events[3]["kind"], "note_added");
    assert_eq!(events[3]["detail"], "halfway there");
    assert!(
        events[4]["detail"].as_str().unwrap().contains("big.bin"),
        "{}",
        events[4]
    );

    // The history and the MCP tools show the same shape.
    let history = bob.get("/v1/events").await;
    assert_eq!(history.json["events"][0]["detail"], "sse probe second line");
    let mcp = alice.call("read_events", json!({})).await;
    assert_eq!(mcp["events"][3]["detail"], "halfway there");
    assert_eq!(mcp["events"][3]["data"]["body"], "halfway there");
}
