//! The core MCP surface: identity, rooms, chat, events, cursors, waits.

mod common;

use std::time::Duration;

use common::{Grant, TestServer};
use serde_json::json;

/// `whoami` reports exactly what the token grants.
#[tokio::test]
async fn whoami_reports_the_token() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    s.room("dev").await;
    let t = s
        .token_with(Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            also_rooms: vec!["dev".into()],
            lead: true,
            skills: vec!["rust".into()],
            ..Grant::default()
        })
        .await;
    let me = s.mcp(&t).call("whoami", json!({})).await;
    assert_eq!(me["agent"], "alice");
    assert_eq!(me["room"], "lobby");
    assert_eq!(me["rooms"], json!(["lobby", "dev"]));
    assert_eq!(me["lead"], true);
    assert_eq!(me["readonly"], false);
    assert_eq!(me["skills"], json!(["rust"]));
    assert_eq!(me["you_are"], "alice");
}

/// Missing, malformed, unknown and revoked tokens get 401 with
/// `WWW-Authenticate: Bearer` and the JSON error body, before any MCP work.
#[tokio::test]
async fn bad_tokens_get_401() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let http = reqwest::Client::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}});
    for auth in [
        None,
        Some("Bearer nope"),
        Some("Bearer cr_notarealtoken"),
        Some("Basic abc"),
    ] {
        let mut req = http
            .post(format!("{}/mcp", s.url))
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{auth:?}");
        // `Bearer`, with the OAuth hint (SPEC §2a).
        let challenge = resp.headers()["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.starts_with("Bearer resource_metadata="),
            "{challenge}"
        );
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], "unauthorized");
    }
    alice.call("whoami", json!({})).await;
    s.core.revoke_agent("alice").await.unwrap();
    let (status, v) = alice.rpc(&body).await;
    assert_eq!(status, 401, "{v}");
}

/// Revoking one agent leaves the others working.
#[tokio::test]
async fn revoking_one_agent_spares_the_others() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    s.core.revoke_agent("alice").await.unwrap();
    let (status, _) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(status, 401);
    bob.call("post_message", json!({"body": "still here"}))
        .await;
}

/// An argument naming another agent as the author is ignored: identity comes
/// from the token only.
#[tokio::test]
async fn identity_comes_only_from_the_token() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let r = alice
        .call(
            "post_message",
            json!({"body": "hello", "author": "bob", "agent": "bob", "you_are": "bob"}),
        )
        .await;
    assert_eq!(r["author"], "alice");
    let msgs = alice.call("read_messages", json!({})).await;
    assert_eq!(msgs["messages"][0]["author"], "alice");
}

/// A room the token is not granted is `forbidden` whether or not it exists,
/// with the same message; ids from another room are `not_found`.
#[tokio::test]
async fn rooms_are_isolated() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "secret").await;
    let posted = bob.call("post_message", json!({"body": "in secret"})).await;
    let existing = alice
        .try_call("read_messages", json!({"room": "secret"}))
        .await;
    let missing = alice
        .try_call("read_messages", json!({"room": "nosuchroom"}))
        .await;
    assert_eq!(existing.code(), "forbidden");
    assert_eq!(missing.code(), "forbidden");
    let strip = |m: &serde_json::Value| {
        m["error"]["message"]
            .as_str()
            .unwrap()
            .replace("secret", "X")
            .replace("nosuchroom", "X")
    };
    assert_eq!(
        strip(&existing.body),
        strip(&missing.body),
        "the message must not reveal existence"
    );
    assert_eq!(
        alice
            .refused(
                "post_message",
                json!({"body": "x", "reply_to": posted["message_id"]})
            )
            .await,
        "not_found"
    );
    assert_eq!(
        alice.refused("whats_new", json!({"room": "../etc"})).await,
        "invalid_argument"
    );
    let msgs = alice.call("read_messages", json!({})).await;
    assert_eq!(msgs["messages"], json!([]));
}

/// A read-only token can read but every write tool is refused with `read_only`.
#[tokio::test]
async fn readonly_token_cannot_write() {
    let s = TestServer::start().await;
    let writer = s.agent("alice", "lobby").await;
    let task = writer.call("create_task", json!({"title": "t"})).await["created"]["id"].clone();
    let t = s
        .token_with(Grant {
            agent: "watcher".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await;
    let observer = s.mcp(&t);
    observer.call("read_messages", json!({})).await;
    observer.call("whats_new", json!({})).await;
    observer.call("list_tasks", json!({})).await;
    let writes = [
        ("post_message", json!({"body": "x"})),
        ("set_room_info", json!({"description": "x"})),
        ("create_task", json!({"title": "x"})),
        ("claim_task", json!({"task_id": task})),
        ("update_task", json!({"task_id": task, "note": "x"})),
        ("release_task", json!({"task_id": task})),
        ("add_note", json!({"task_id": task, "body": "x"})),
        ("submit_result", json!({"task_id": task, "result": "x"})),
        ("review_task", json!({"task_id": task, "approve": true})),
        ("cancel_task", json!({"task_id": task})),
        (
            "put_file",
            json!({"name": "a.txt", "content_base64": "aGk="}),
        ),
        ("set_retention", json!({"days": 1})),
        ("delete_room", json!({"room": "lobby"})),
    ];
    for (tool, args) in writes {
        assert_eq!(observer.refused(tool, args).await, "read_only", "{tool}");
    }
    let msgs = writer.call("read_messages", json!({})).await;
    assert_eq!(msgs["messages"], json!([]), "nothing was written");
}

/// An `all_rooms` token reaches every room, including ones made later.
#[tokio::test]
async fn all_rooms_token_reaches_every_room() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let t = s
        .token_with(Grant {
            agent: "ops".into(),
            room: "lobby".into(),
            all_rooms: true,
            ..Grant::default()
        })
        .await;
    s.room("later").await;
    let ops = s.mcp(&t);
    let r = ops
        .call("post_message", json!({"body": "hi", "room": "later"}))
        .await;
    assert_eq!(r["room"], "later");
    assert_eq!(
        ops.refused("read_messages", json!({"room": "nope"})).await,
        "not_found"
    );
}

/// Size limits are enforced in characters, refused with `too_large`, and
/// nothing is stored.
#[tokio::test]
async fn size_limits_refuse_and_store_nothing() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    // 8,000 multi-byte characters fit; 8,001 do not.
    alice
        .call("post_message", json!({"body": "é".repeat(8000)}))
        .await;
    assert_eq!(
        alice
            .refused("post_message", json!({"body": "x".repeat(8001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        alice
            .refused("set_room_info", json!({"description": "d".repeat(2001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        alice
            .refused("set_room_info", json!({"repo_url": "u".repeat(501)}))
            .await,
        "too_large"
    );
    assert_eq!(
        alice
            .refused(
                "set_room_info",
                json!({"onboarding_notes": "n".repeat(8001)})
            )
            .await,
        "too_large"
    );
    let msgs = alice.call("read_messages", json!({})).await;
    assert_eq!(msgs["messages"].as_array().unwrap().len(), 1);
    let info = alice.call("get_room_info", json!({})).await;
    assert_eq!(info["description"], "");
}

/// Wrong types, missing arguments and bad values are `invalid_argument`;
/// limits are clamped.
#[tokio::test]
async fn malformed_arguments_are_invalid_argument() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    assert_eq!(
        alice.refused("post_message", json!({})).await,
        "invalid_argument"
    );
    assert_eq!(
        alice.refused("post_message", json!({"body": 5})).await,
        "invalid_argument"
    );
    assert_eq!(
        alice.refused("post_message", json!({"body": "  "})).await,
        "invalid_argument"
    );
    assert_eq!(
        alice
            .refused("read_messages", json!({"since_id": "x"}))
            .await,
        "invalid_argument"
    );
    assert_eq!(
        alice.refused("set_room_info", json!({})).await,
        "invalid_argument"
    );
    assert_eq!(
        alice.refused("read_events", json!({"kind": "nope"})).await,
        "invalid_argument"
    );
    for _ in 0..3 {
        alice.call("post_message", json!({"body": "m"})).await;
    }
    let r = alice.call("read_messages", json!({"limit": -5})).await;
    assert_eq!(
        r["messages"].as_array().unwrap().len(),
        1,
        "a negative limit clamps to 1"
    );
    let r = alice.call("read_messages", json!({"limit": 100000})).await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 3);
    assert_eq!(
        r["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );
}

/// Unknown tools and unparsable bodies get JSON-RPC errors, never a 500.
#[tokio::test]
async fn protocol_errors_keep_json_rpc_shape() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let (status, v) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["error"]["code"], -32602);
    for body in ["{\"jsonrpc\": \"2.0\",", "not json at all", "\u{0}\u{1}"] {
        let (status, v) = alice.post_raw(body.into()).await;
        assert_eq!(status, 400, "{body:?}: {v}");
        assert_eq!(v["error"]["code"], -32700, "{v}");
    }
    let (status, v) = alice.post_raw("[1, 2]".into()).await;
    assert!(status < 500, "{v}");
    // A tools/call works as the very first request, without initialize.
    let (status, v) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(status, 200);
    assert!(v["result"]["tools"].as_array().unwrap().len() >= 27);
}

/// Replies must name a message of the same room; threads are kept.
#[tokio::test]
async fn replies_and_read_order() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let first = alice.call("post_message", json!({"body": "first"})).await["message_id"]
        .as_i64()
        .unwrap();
    alice
        .call("post_message", json!({"body": "second", "reply_to": first}))
        .await;
    assert_eq!(
        alice
            .refused("post_message", json!({"body": "x", "reply_to": 999}))
            .await,
        "not_found"
    );
    let r = alice.call("read_messages", json!({"since_id": 0})).await;
    let msgs = r["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["body"], "first");
    assert_eq!(msgs[1]["reply_to"], first);
    assert_eq!(r["latest_id"], msgs[1]["id"]);
    let r = alice
        .call("read_messages", json!({"since_id": first}))
        .await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 1);
}

/// A stored cursor beyond the room's history (a database whose cursors
/// are newer than its events) would hide every event written next:
/// `whats_new` sets it back, shows them, and says so in `cursor_reset`
/// once.
#[tokio::test]
async fn whats_new_sets_back_a_cursor_beyond_the_history() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    bob.call("post_message", json!({"body": "seen"})).await;
    alice.call("whats_new", json!({})).await;
    let n = s
        .exec_sql(
            "UPDATE cursors SET event_id = $1 WHERE agent = 'alice'",
            1000,
        )
        .await;
    assert_eq!(n, 1);
    bob.call("post_message", json!({"body": "new @alice"}))
        .await;

    let r = alice.call("whats_new", json!({})).await;
    let latest = r["events"].as_array().unwrap().last().unwrap()["id"].clone();
    assert_eq!(
        r["events"].as_array().unwrap().last().unwrap()["data"]["body"],
        "new @alice",
        "{r}"
    );
    assert_eq!(r["cursor_reset"]["requested_after"], 1000, "{r}");
    assert_eq!(r["cursor_reset"]["latest_event_id"], latest, "{r}");
    assert_eq!(
        r["since_event_id"], r["cursor_reset"]["resumed_after"],
        "{r}"
    );
    let again = alice.call("whats_new", json!({})).await;
    assert_eq!(again["count"], 0, "{again}");
    assert!(again.get("cursor_reset").is_none(), "{again}");
    bob.call("post_message", json!({"body": "later"})).await;
    let later = alice.call("whats_new", json!({})).await;
    assert_eq!(later["count"], 1, "{later}");
    assert_eq!(later["events"][0]["data"]["body"], "later");
}

/// `whats_new`: the first look shows the backlog and the onboarding, flags
/// own events and mentions, moves the cursor; the next look is empty;
/// `remaining` counts what a small page left.
#[tokio::test]
async fn whats_new_moves_the_cursor() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    alice
        .call(
            "set_room_info",
            json!({"onboarding_notes": "read the README"}),
        )
        .await;
    alice
        .call("post_message", json!({"body": "hey @Bob, look"}))
        .await;
    bob.call("post_message", json!({"body": "mine"})).await;
    let first = bob.call("whats_new", json!({"limit": 2})).await;
    assert_eq!(first["since_event_id"], 0);
    assert_eq!(first["count"], 2);
    assert_eq!(first["remaining"], 1);
    assert_eq!(
        first["room_onboarding"]["onboarding_notes"],
        "read the README"
    );
    assert_eq!(
        first["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );
    let ev = &first["events"][1];
    assert_eq!(ev["kind"], "message");
    assert_eq!(ev["mentions_you"], true);
    assert_eq!(ev["by_you"], false);
    let second = bob.call("whats_new", json!({})).await;
    assert_eq!(second["count"], 1);
    assert_eq!(second["events"][0]["by_you"], true);
    assert!(second.get("room_onboarding").is_none());
    let third = bob.call("whats_new", json!({})).await;
    assert_eq!(third["count"], 0);
    assert_eq!(third["remaining"], 0);
    // read_events never moves anyone's cursor.
    let all = bob.call("read_events", json!({"since_id": 0})).await;
    assert_eq!(all["count"], 3);
    assert_eq!(bob.call("whats_new", json!({})).await["count"], 0);
    let kinds = bob.call("read_events", json!({"kind": "message"})).await;
    assert_eq!(kinds["count"], 2);
}

/// `wait_for_change` parks until a peer posts, ignores the caller's own
/// events, and times out with `changed: false`.
#[tokio::test]
async fn wait_for_change_wakes_on_a_peer_event() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    // Nothing new for alice yet: a short wait times out.
    let r = alice
        .call("wait_for_change", json!({"timeout_s": 0.2}))
        .await;
    assert_eq!(r["changed"], false);
    assert!(r["waited_s"].as_f64().unwrap() >= 0.19);
    // Her own post does not count.
    alice.call("post_message", json!({"body": "me"})).await;
    let r = alice
        .call("wait_for_change", json!({"timeout_s": 0.2}))
        .await;
    assert_eq!(r["changed"], false);
    // Parked, then woken by bob.
    let waiter = {
        let alice = alice.clone();
        tokio::spawn(async move {
            alice
                .call("wait_for_change", json!({"timeout_s": 30}))
                .await
        })
    };
    // Give the waiter time to park (its wake does not depend on this).
    tokio::time::sleep(Duration::from_millis(100)).await;
    bob.call("post_message", json!({"body": "wake up"})).await;
    let r = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r["changed"], true);
    assert!(r["hint"].as_str().unwrap().contains("message by bob"));
    assert!(r["waited_s"].as_f64().unwrap() < 30.0);
    // It did not move the cursor: an event already past it returns at once.
    let r = alice
        .call("wait_for_change", json!({"timeout_s": 30}))
        .await;
    assert_eq!(r["changed"], true);
    alice.call("whats_new", json!({})).await;
    let r = alice
        .call("wait_for_change", json!({"timeout_s": 0.1}))
        .await;
    assert_eq!(r["changed"], false);
}

/// `timeout_s` is clamped into range rather than refused.
#[tokio::test]
async fn wait_timeout_is_clamped() {
    let s = TestServer::start_with(|c| c.max_wait = Duration::from_secs(1)).await;
    let alice = s.agent("alice", "lobby").await;
    let r = alice
        .call("wait_for_change", json!({"timeout_s": -3}))
        .await;
    assert_eq!(r["changed"], false);
    let r = alice
        .call("wait_for_change", json!({"timeout_s": 10_000}))
        .await;
    let waited = r["waited_s"].as_f64().unwrap();
    assert!(
        (0.9..5.0).contains(&waited),
        "clamped to CHATROOM_MAX_WAIT_S: {waited}"
    );
}

/// Room info: any writer sets it, everyone reads it, events record it.
#[tokio::test]
async fn room_info_round_trip() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let r = alice
        .call(
            "set_room_info",
            json!({"description": "we build", "repo_url": "https://example.com/r"}),
        )
        .await;
    assert_eq!(r["description"], "we build");
    let info = alice.call("get_room_info", json!({})).await;
    assert_eq!(info["name"], "lobby");
    assert_eq!(info["repo_url"], "https://example.com/r");
    assert_eq!(info["retention_days"], 0);
    let ev = alice
        .call("read_events", json!({"kind": "room_info_updated"}))
        .await;
    assert_eq!(ev["count"], 1);
}

/// `list_agents` shows members with flags and marks the caller.
#[tokio::test]
async fn list_agents_shows_members() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    s.token_with(Grant {
        agent: "lead1".into(),
        room: "lobby".into(),
        lead: true,
        ..Grant::default()
    })
    .await;
    alice.call("whoami", json!({})).await;
    alice.call("read_messages", json!({})).await;
    let r = alice.call("list_agents", json!({})).await;
    let agents = r["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    let me = agents.iter().find(|a| a["agent"] == "alice").unwrap();
    assert_eq!(me["is_you"], true);
    assert!(me["last_seen"].is_string());
    let lead = agents.iter().find(|a| a["agent"] == "lead1").unwrap();
    assert_eq!(lead["lead"], true);
    assert_eq!(lead["is_you"], false);
}

/// Retention and room deletion are for room admins; set_retention prunes at
/// once; delete_room needs the room named.
#[tokio::test]
async fn retention_and_deletion_are_admin_only() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let t = s
        .token_with(Grant {
            agent: "admin1".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await;
    let admin = s.mcp(&t);
    alice.call("post_message", json!({"body": "old"})).await;
    assert_eq!(
        alice.refused("set_retention", json!({"days": 1})).await,
        "forbidden"
    );
    assert_eq!(
        admin.refused("set_retention", json!({"days": 3651})).await,
        "invalid_argument"
    );
    assert_eq!(
        admin.refused("set_retention", json!({"days": -1})).await,
        "invalid_argument"
    );
    let r = admin.call("set_retention", json!({"days": 30})).await;
    assert_eq!(r["retention_days"], 30);
    assert_eq!(
        admin.call("get_room_info", json!({})).await["retention_days"],
        30
    );
    assert_eq!(
        alice.refused("delete_room", json!({"room": "lobby"})).await,
        "forbidden"
    );
    assert_eq!(
        admin.refused("delete_room", json!({})).await,
        "invalid_argument"
    );
    admin.call("delete_room", json!({"room": "lobby"})).await;
    assert_eq!(alice.refused("read_messages", json!({})).await, "not_found");
    // Audit rows survive the room.
    assert!(s.store.audit_count().await.unwrap() > 0);
}

/// Every tool call leaves one audit row: writes, reads and refusals alike.
#[tokio::test]
async fn every_call_is_audited() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "one"})).await;
    alice.call("read_messages", json!({})).await;
    alice.refused("post_message", json!({"body": ""})).await;
    alice.call("whoami", json!({})).await;
    let store = s.store.clone();
    s.stop().await;
    let rows = store.audit_count().await.unwrap();
    assert_eq!(rows, 4, "one row per call");
}

/// A post by one client wakes a waiter on another while a thousand others
/// are idle in other rooms (the bus filters by room).
#[tokio::test]
async fn waits_are_scoped_to_their_room() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "other").await;
    let waiter = {
        let alice = alice.clone();
        tokio::spawn(async move {
            alice
                .call("wait_for_change", json!({"timeout_s": 0.5}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    bob.call("post_message", json!({"body": "elsewhere"})).await;
    let r = waiter.await.unwrap();
    assert_eq!(
        r["changed"], false,
        "an event in another room does not wake"
    );
}

/// An agent whose only call is `whoami` is seen: `list_agents` shows its
/// `last_seen` (every authenticated call is a sign of life).
#[tokio::test]
async fn whoami_alone_is_a_sign_of_life() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    bob.call("whoami", json!({})).await;
    let r = alice.call("list_agents", json!({})).await;
    let b = r["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "bob")
        .cloned()
        .unwrap();
    assert!(b["last_seen"].is_string(), "{b}");
}

/// Results carry ChatRoomMCP's keys beside ours: `count` from
/// `read_messages`, `cursor_unchanged` from `read_events`, `ok` and
/// `room_info` from `set_room_info`, `deleted_room` from `delete_room`.
#[tokio::test]
async fn results_carry_the_original_keys() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "hi"})).await;
    alice.call("post_message", json!({"body": "again"})).await;
    let m = alice.call("read_messages", json!({"since_id": 0})).await;
    assert_eq!(m["count"], 2);
    let e = alice.call("read_events", json!({})).await;
    assert_eq!(e["cursor_unchanged"], true);
    assert_eq!(e["count"], e["events"].as_array().unwrap().len());
    // read_events really left the cursor alone.
    assert_eq!(
        alice.call("whats_new", json!({})).await["count"],
        e["count"]
    );
    let i = alice
        .call("set_room_info", json!({"description": "the lobby"}))
        .await;
    assert_eq!(i["ok"], true);
    assert_eq!(i["description"], "the lobby");
    assert_eq!(i["room_info"]["name"], "lobby");
    assert_eq!(i["room_info"]["description"], "the lobby");
    assert!(i["room_info"].get("onboarding_notes").is_some());
    let admin = s.mcp(
        &s.token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await,
    );
    let d = admin.call("delete_room", json!({"room": "lobby"})).await;
    assert_eq!(d["deleted"], "lobby");
    assert_eq!(d["deleted_room"], "lobby");
}

/// Refusals keep the phrases ChatRoomMCP's clients match on: an ungranted
/// room "does not grant", a room-admin action "not an admin".
#[tokio::test]
async fn refusals_say_what_the_original_says() {
    let s = TestServer::start().await;
    s.room("other").await;
    let alice = s.agent("alice", "lobby").await;
    let msg = |r: common::ToolResult| r.body["error"]["message"].as_str().unwrap().to_owned();
    let r = alice
        .try_call("read_messages", json!({"room": "other"}))
        .await;
    assert_eq!(r.code(), "forbidden");
    let m = msg(r);
    assert!(m.contains("does not grant room \"other\""), "{m}");
    assert!(m.contains("lobby"), "{m}");
    for (tool, args) in [
        ("set_retention", json!({"days": 1})),
        ("delete_room", json!({"room": "lobby"})),
    ] {
        let r = alice.try_call(tool, args).await;
        assert_eq!(r.code(), "forbidden");
        let m = msg(r);
        assert!(m.contains("not an admin"), "{tool}: {m}");
    }
}
