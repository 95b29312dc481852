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
