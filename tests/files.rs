//! Shared files over MCP: exact bytes, strict base64, the cap, expiry and
//! who may delete.

mod common;

use base64::Engine;
use common::{Grant, TestServer};
use serde_json::json;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Bytes go in and come out exactly, with their SHA-256 and size.
#[tokio::test]
async fn round_trip_exact_bytes() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 255, 10, 13]).collect();
    let put = a
        .call("put_file", json!({"name": "blob.bin", "content_base64": b64(&bytes), "mime": "application/x-test"}))
        .await;
    assert_eq!(put["ok"], true);
    assert_eq!(put["size"], bytes.len());
    assert_eq!(
        put["sha256"],
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
    );
    assert!(put["expires_at"].is_null());
    let got = b.call("get_file", json!({"file_id": put["file_id"]})).await;
    assert_eq!(got["content_base64"], b64(&bytes));
    assert_eq!(got["name"], "blob.bin");
    assert_eq!(got["mime"], "application/x-test");
    assert_eq!(got["author"], "alice");
    assert_eq!(
        got["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );
    let list = b.call("list_files", json!({})).await;
    assert_eq!(list["count"], 1);
    assert!(list["files"][0].get("content_base64").is_none());
    let ev = b.call("read_events", json!({"kind": "file_added"})).await;
    assert_eq!(ev["count"], 1);
}

/// Non-strict base64, empty files, path-like names and files over the cap
/// are refused, and nothing is stored.
#[tokio::test]
async fn bad_files_are_refused() {
    let s = TestServer::start_with(|c| c.max_file_bytes = 1000).await;
    let a = s.agent("alice", "lobby").await;
    let ok = b64(b"hello");
    for (name, content, code) in [
        ("a.txt", "aGVsbG8", "invalid_argument"), // missing padding
        ("a.txt", "aGVs bG8=", "invalid_argument"), // whitespace
        ("a.txt", "!!!!", "invalid_argument"),
        ("a.txt", "", "invalid_argument"), // empty
        ("../etc/passwd", ok.as_str(), "invalid_argument"),
        ("a/b.txt", ok.as_str(), "invalid_argument"),
        ("..", ok.as_str(), "invalid_argument"),
        ("", ok.as_str(), "invalid_argument"),
        ("new\nline", ok.as_str(), "invalid_argument"),
    ] {
        assert_eq!(
            a.refused("put_file", json!({"name": name, "content_base64": content}))
                .await,
            code,
            "{name:?} {content:?}"
        );
    }
    let big = b64(&vec![7u8; 1001]);
    assert_eq!(
        a.refused("put_file", json!({"name": "big", "content_base64": big}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused(
            "put_file",
            json!({"name": "x", "content_base64": ok, "expires_in_hours": 0})
        )
        .await,
        "invalid_argument"
    );
    assert_eq!(
        a.refused(
            "put_file",
            json!({"name": "x", "content_base64": ok, "task_id": 999})
        )
        .await,
        "not_found"
    );
    assert_eq!(a.call("list_files", json!({})).await["count"], 0);
    a.call(
        "put_file",
        json!({"name": "fits", "content_base64": b64(&[1u8; 1000])}),
    )
    .await;
}

/// An expired file is invisible at once, before any sweep.
#[tokio::test]
async fn expired_files_vanish() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let put = a
        .call(
            "put_file",
            json!({"name": "tmp.txt", "content_base64": b64(b"soon gone"), "expires_in_hours": 1}),
        )
        .await;
    assert!(put["expires_at"].is_string());
    a.call("get_file", json!({"file_id": put["file_id"]})).await;
    // Let the hour pass: move the expiry into the past in the database.
    s.exec_sql(
        "UPDATE files SET expires_ts = 1 WHERE id = $1",
        put["file_id"].as_i64().unwrap(),
    )
    .await;
    assert_eq!(
        a.refused("get_file", json!({"file_id": put["file_id"]}))
            .await,
        "not_found"
    );
    assert_eq!(a.call("list_files", json!({})).await["count"], 0);
    assert_eq!(
        a.refused("delete_file", json!({"file_id": put["file_id"]}))
            .await,
        "not_found"
    );
}

/// Only the uploader or a room admin deletes a file; another room's file id
/// is `not_found`.
#[tokio::test]
async fn delete_rules() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    let eve = s.agent("eve", "elsewhere").await;
    let admin = s.mcp(
        &s.token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await,
    );
    let f1 = a
        .call(
            "put_file",
            json!({"name": "one", "content_base64": b64(b"1")}),
        )
        .await["file_id"]
        .clone();
    let f2 = a
        .call(
            "put_file",
            json!({"name": "two", "content_base64": b64(b"2")}),
        )
        .await["file_id"]
        .clone();
    assert_eq!(
        b.refused("delete_file", json!({"file_id": f1})).await,
        "forbidden"
    );
    // Asked without a room, a file of a room the token lacks is refused as
    // such; named with the caller's own room, it is not there.
    assert_eq!(
        eve.refused("get_file", json!({"file_id": f1})).await,
        "forbidden"
    );
    assert_eq!(
        eve.refused("get_file", json!({"file_id": f1, "room": "elsewhere"}))
            .await,
        "not_found"
    );
    assert_eq!(
        eve.refused("delete_file", json!({"file_id": f1})).await,
        "not_found"
    );
    a.call("delete_file", json!({"file_id": f1})).await;
    admin.call("delete_file", json!({"file_id": f2})).await;
    assert_eq!(a.call("list_files", json!({})).await["count"], 0);
    assert_eq!(
        a.call("read_events", json!({"kind": "file_deleted"})).await["count"],
        2
    );
}

/// File results carry ChatRoomMCP's keys beside ours: `id` with `file_id`
/// in `put_file`, `get_file` and `list_files`, and `delete_file` answers
/// the deleted file's metadata under `deleted`.
#[tokio::test]
async fn file_results_carry_the_original_keys() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let put = a
        .call(
            "put_file",
            json!({"name": "k.txt", "content_base64": b64(b"keys"), "mime": "text/plain"}),
        )
        .await;
    let id = put["file_id"].as_i64().unwrap();
    assert_eq!(put["id"], id);
    let got = a.call("get_file", json!({"file_id": id})).await;
    assert_eq!(
        (got["id"].as_i64(), got["file_id"].as_i64()),
        (Some(id), Some(id))
    );
    let list = a.call("list_files", json!({})).await;
    assert_eq!(list["files"][0]["id"], id);
    assert_eq!(list["files"][0]["file_id"], id);
    let del = a.call("delete_file", json!({"file_id": id})).await;
    assert_eq!(del["ok"], true);
    assert_eq!(del["file_id"], id);
    let d = &del["deleted"];
    assert_eq!(d["id"], id);
    assert_eq!(d["name"], "k.txt");
    assert_eq!(d["size"], 4);
    assert_eq!(d["mime"], "text/plain");
    assert_eq!(d["author"], "alice");
    assert_eq!(d["sha256"], put["sha256"]);
    assert!(d["ts"].is_string());
    assert!(d.get("expires_at").is_some());
}

/// `expires_in_hours` takes a fraction: half an hour expires 30 minutes
/// after the upload. Zero, negative and over-long values stay refused.
#[tokio::test]
async fn fractional_expiry_is_accepted_and_checked() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let put = a
        .call(
            "put_file",
            json!({"name": "half.txt", "content_base64": b64(b"x"), "expires_in_hours": 0.5}),
        )
        .await;
    let got = a.call("get_file", json!({"file_id": put["file_id"]})).await;
    let ts = |v: &serde_json::Value| {
        let t = time::OffsetDateTime::parse(
            v.as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        (t.unix_timestamp_nanos() / 1_000_000) as i64
    };
    let lifetime = ts(&got["expires_at"]) - ts(&got["ts"]);
    assert!(
        (1_799_000..=1_801_000).contains(&lifetime),
        "lifetime {lifetime} ms"
    );
    for bad in [json!(0.0), json!(-0.5), json!(87_600.5), json!(1e300)] {
        assert_eq!(
            a.refused(
                "put_file",
                json!({"name": "x", "content_base64": b64(b"x"), "expires_in_hours": bad})
            )
            .await,
            "invalid_argument",
            "{bad}"
        );
    }
    assert_eq!(a.call("list_files", json!({})).await["count"], 1);
}

/// A file over the cap is refused with a message naming the cap.
#[tokio::test]
async fn over_the_cap_says_cap() {
    let s = TestServer::start_with(|c| c.max_file_bytes = 10).await;
    let a = s.agent("alice", "lobby").await;
    let r = a
        .try_call(
            "put_file",
            json!({"name": "big", "content_base64": b64(&[1u8; 11])}),
        )
        .await;
    assert_eq!(r.code(), "too_large");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("the cap is 10 bytes"), "{msg}");
}

/// At the default cap (1 MiB), a 2 MiB file still reaches the tool, which
/// refuses it naming the cap; a body past twice the cap is refused by the
/// transport with `413` before it is read whole.
#[tokio::test]
async fn twice_the_cap_is_refused_by_the_tool() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let r = a
        .try_call(
            "put_file",
            json!({"name": "big.bin", "content_base64": b64(&vec![b'x'; 2 * 1024 * 1024])}),
        )
        .await;
    assert_eq!(r.code(), "too_large");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("the cap is 1048576 bytes"), "{msg}");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "put_file",
        "arguments": {"name": "huge.bin", "content_base64": b64(&vec![b'x'; 3 * 1024 * 1024])}}});
    let answer = reqwest::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(&a.token)
        .header("accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    assert!(
        answer
            .text()
            .await
            .unwrap()
            .contains("the cap of this route")
    );
    assert_eq!(a.call("list_files", json!({})).await["count"], 0);
}
