//! The official Python MCP SDK as a client, in both of its modes.

mod common;

use common::TestServer;
use serde_json::Value;

/// The venv Python with the `mcp` package that `.ci/run` sets up.
fn python() -> String {
    std::env::var("CHATROOM_TEST_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        let venv = format!("{home}/.cache/chatroom/tools/venv/bin/python");
        assert!(
            std::path::Path::new(&venv).exists(),
            "the Python MCP SDK is not installed: run `bash .ci/run` once (or set CHATROOM_TEST_PYTHON)"
        );
        venv
    })
}

async fn drive(mode: &str) -> Value {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(format!("{}/mcp", s.url))
        .arg(&alice.token)
        .arg(mode)
        .output()
        .await
        .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python SDK client failed ({mode}):\n{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    // What the SDK posted is really in the room.
    let read = alice.call("read_messages", serde_json::json!({})).await;
    assert_eq!(
        read["messages"][0]["body"],
        format!("hello from python ({mode})")
    );
    v
}

fn check(v: &Value, mode: &str) {
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "whoami",
        "post_message",
        "read_messages",
        "claim_task",
        "whats_new",
    ] {
        assert!(tools.contains(&t), "{mode}: {t} missing from {tools:?}");
    }
    assert_eq!(v["whoami"]["agent"], "alice");
    assert_eq!(v["posted"]["ok"], true);
    assert_eq!(v["messages"][0]["author"], "alice");
    assert_eq!(v["refused_is_error"], true);
    assert_eq!(v["refused"]["error"]["code"], "invalid_argument");
}

/// `mode="auto"` negotiates the newest protocol and works end to end.
#[tokio::test]
async fn python_sdk_auto_mode() {
    let v = drive("auto").await;
    check(&v, "auto");
}

/// `mode="legacy"` uses the initialize handshake and works end to end.
#[tokio::test]
async fn python_sdk_legacy_mode() {
    let v = drive("legacy").await;
    check(&v, "legacy");
}

/// The Python SDK's stdio client launches `chatroom channel` and drives it
/// in `mode`: the handshake answers 2025-11-25 with the `claude/channel`
/// capability (never the permission relay), and a mention posted by
/// another agent arrives as `notifications/claude/channel` with its meta.
async fn channel_over_stdio(mode: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/channel_client.py"
    );
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .arg(common::binary())
        .arg(&s.url)
        .arg(&token)
        .arg(mode)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run python");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut line = async || {
        tokio::time::timeout(std::time::Duration::from_secs(30), out.next_line())
            .await
            .expect("the script answers in time")
            .unwrap()
            .unwrap_or_default()
    };
    let ready = line().await;
    let Some(ready) = ready.strip_prefix("READY ") else {
        let o = child.wait_with_output().await.unwrap();
        panic!(
            "no handshake ({mode}): {ready}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let v: Value = serde_json::from_str(ready).unwrap();
    assert_eq!(v["protocol"], "2025-11-25", "{v}");
    assert_eq!(v["server"], "chatroom-channel", "{v}");
    let experimental = &v["capabilities"]["experimental"];
    assert_eq!(experimental["claude/channel"], serde_json::json!({}), "{v}");
    assert!(
        experimental.get("claude/channel/permission").is_none(),
        "{v}"
    );
    assert!(
        v["instructions"].as_str().unwrap().contains("untrusted"),
        "{v}"
    );

    common::wait_for_push(&s.url, &token, "alice").await;
    let posted = bob
        .call(
            "post_message",
            serde_json::json!({"body": "@alice the review is yours"}),
        )
        .await;
    assert_eq!(posted["reach"]["alice"], "push", "{posted}");
    stdin.write_all(b"go\n").await.unwrap();
    let notified = line().await;
    let Some(notified) = notified.strip_prefix("NOTIFIED ") else {
        let o = child.wait_with_output().await.unwrap();
        panic!(
            "no notification ({mode}): {notified}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let n: Value = serde_json::from_str(notified).unwrap();
    let meta = &n["meta"];
    assert_eq!(meta["room"], "lobby", "{n}");
    assert_eq!(meta["kind"], "message", "{n}");
    assert_eq!(meta["actor"], "bob", "{n}");
    assert_eq!(
        meta["message_id"],
        posted["message_id"].as_i64().unwrap().to_string(),
        "{n}"
    );
    for key in meta.as_object().unwrap().keys() {
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "meta key {key:?}"
        );
    }
    assert!(n["content"].as_str().unwrap().contains("bob"), "{n}");
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("the script ends")
        .unwrap();
    assert!(status.success());
}

/// The SDK's stdio client with the initialize handshake (as Claude Code).
#[tokio::test]
async fn python_sdk_drives_the_channel_legacy() {
    channel_over_stdio("legacy").await;
}

/// The SDK's stdio client in `auto` mode: its discovery probe falls back to
/// the handshake, which still answers 2025-11-25.
#[tokio::test]
async fn python_sdk_drives_the_channel_auto() {
    channel_over_stdio("auto").await;
}

/// On 2026-07-28 the SDK sees it all: the tool list kept an hour and
/// private, the app-only tools marked, the prompts, the skill (the plugin's
/// text), the board resource and its listen stream (the acknowledgment,
/// then an update when the board changes), show_board's short summary, and
/// a worker token's short list with a call outside it refused.
#[tokio::test]
async fn python_sdk_speaks_2026_07_28_in_full() {
    use chatroom::domain::profile::Profile;
    let s = TestServer::start().await;
    let full = s.agent("alice", "lobby").await;
    let worker = s
        .token_with(common::Grant {
            agent: "wally".into(),
            room: "lobby".into(),
            profile: Profile::Worker,
            ..common::Grant::default()
        })
        .await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_2026.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .arg(format!("{}/mcp", s.url))
        .arg(&full.token)
        .arg(&worker)
        .output()
        .await
        .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python SDK client failed:\n{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["tools_ttl_ms"], 3_600_000, "{v}");
    assert_eq!(v["tools_cache_scope"], "private", "{v}");
    assert!(
        v["app_only"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "board_claim"),
        "{v}"
    );
    assert_eq!(
        v["prompts"],
        serde_json::json!(["handoff", "join", "standup"])
    );
    assert!(
        v["join"].as_str().unwrap().contains("You are @alice"),
        "{v}"
    );
    assert!(v["join"].as_str().unwrap().contains("hand me off"), "{v}");
    assert!(
        v["handoff"].as_str().unwrap().contains("release_task"),
        "{v}"
    );
    assert!(
        v["standup"].as_str().unwrap().contains("What you hold"),
        "{v}"
    );
    let resources = v["resources"].as_array().unwrap();
    for uri in [
        "ui://chatroom/board",
        "skill://chatroom/coordination/SKILL.md",
        "chatroom://room/lobby/board",
    ] {
        assert!(resources.iter().any(|r| r == uri), "{uri} missing: {v}");
    }
    let plugin = include_str!("../plugin/skills/chatroom/SKILL.md");
    assert_eq!(
        v["skill"]
            .as_str()
            .unwrap()
            .replacen("name: coordination", "name: chatroom", 1),
        plugin,
        "the skill is the plugin's text"
    );
    assert_eq!(v["board_resource"]["count"], 1, "{v}");
    let text = v["show_board_text"].as_str().unwrap();
    assert!(
        text.len() <= 4000 && text.contains("Board of room lobby"),
        "{text}"
    );
    assert!(
        !text.starts_with('{'),
        "the model gets a summary, not the board: {text}"
    );
    assert_eq!(v["show_board_has_board"], true);
    assert_eq!(
        v["honored"],
        serde_json::json!(["chatroom://room/lobby/board"])
    );
    assert_eq!(v["updated"], "chatroom://room/lobby/board", "{v}");
    assert_eq!(v["worker_tools"].as_array().unwrap().len(), 10, "{v}");
    assert!(
        !v["worker_tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "review_task")
    );
    assert_eq!(v["worker_refused_is_error"], true);
    assert_eq!(v["worker_refused"]["error"]["code"], "forbidden", "{v}");
}
