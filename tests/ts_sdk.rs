//! The official TypeScript MCP SDK (npm `@modelcontextprotocol/sdk`) as a
//! client with a bearer header: handshake, tool list, a chat and a claim.
//!
//! `.ci/run` installs the SDK and sets `CHATROOM_TEST_NODE_MODULES_TS` (its
//! `node_modules`) and `CHATROOM_TEST_NODE22`; without them this test fails.

mod common;

use common::TestServer;
use serde_json::{Value, json};

fn required(var: &str, what: &str) -> std::path::PathBuf {
    let path = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: {what} is needed for this test. Run `bash .ci/run` once (it installs \
             the MCP npm packages into ~/.cache/chatroom/tools and exports {var}), or export {var} yourself"
        )
    });
    let path = std::path::PathBuf::from(path);
    assert!(
        path.exists(),
        "{var}={} does not exist: {what} is not installed; run `bash .ci/run`",
        path.display()
    );
    path
}

/// The TypeScript SDK client initializes, lists the tools, posts and reads a
/// message, creates and claims a task, and gets tool errors as tool errors.
#[tokio::test]
async fn typescript_sdk_round_trip() {
    let node = required("CHATROOM_TEST_NODE22", "a Node 22 binary");
    let modules = required(
        "CHATROOM_TEST_NODE_MODULES_TS",
        "the TypeScript MCP SDK (@modelcontextprotocol/sdk)",
    );
    assert!(
        modules
            .join("@modelcontextprotocol/sdk/package.json")
            .exists(),
        "{} holds no @modelcontextprotocol/sdk; run `bash .ci/run`",
        modules.display()
    );
    // ES modules resolve packages from the script's own folder: run a copy
    // of the driver next to a link to the SDK's node_modules.
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("sdk_client.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ts/sdk_client.mjs"),
        &script,
    )
    .unwrap();
    std::os::unix::fs::symlink(&modules, work.path().join("node_modules")).unwrap();

    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let out = tokio::process::Command::new(&node)
        .arg(&script)
        .arg(format!("{}/mcp", s.url))
        .arg(&alice.token)
        .output()
        .await
        .expect("run node");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "TypeScript SDK client failed:\n{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");

    assert_eq!(v["server"]["name"], "chatroom");
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for t in [
        "whoami",
        "post_message",
        "read_messages",
        "create_task",
        "claim_task",
    ] {
        assert!(tools.contains(&t), "{t} missing from {tools:?}");
    }
    assert_eq!(v["posted"]["isError"], false, "{v}");
    assert_eq!(v["posted"]["body"]["author"], "alice");
    assert_eq!(v["posted"]["structured"], v["posted"]["body"]);
    assert_eq!(
        v["messages"]["body"]["messages"][0]["body"],
        "hello from typescript"
    );
    assert_eq!(v["claimed"]["body"]["claimed"], true, "{v}");
    assert_eq!(v["claimed"]["body"]["task"]["assignee"], "alice");
    assert_eq!(v["again"]["body"]["claimed"], false);
    assert_eq!(v["refused"]["isError"], true);
    assert_eq!(v["refused"]["body"]["error"]["code"], "invalid_argument");

    // What the SDK did is really in the room.
    let id = v["created"]["body"]["created"]["id"].clone();
    let task = alice.call("get_task", json!({"task_id": id})).await;
    assert_eq!(task["task"]["assignee"], "alice");
    assert_eq!(task["task"]["status"], "in_progress");
    let read = alice.call("read_messages", json!({})).await;
    assert_eq!(read["messages"][0]["body"], "hello from typescript");
}
