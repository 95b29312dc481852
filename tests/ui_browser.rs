//! The `/ui` dashboard in a real headless Chromium, driven by playwright-core
//! (tests/browser/ui.mjs). `.ci/run` installs both and sets
//! `CHATROOM_TEST_NODE_MODULES`; without it this test fails, on purpose.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::browser::screenshot_path;
use common::{Grant, McpClient, TestServer};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Fills the room with a plausible day of work, so the dashboard has
/// something to show (and the screenshot something to judge).
async fn seed(s: &TestServer) -> McpClient {
    s.room("lobby").await;
    s.room("infra").await;
    let lead = s
        .token_with(Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            lead: true,
            skills: vec!["rust".into(), "review".into()],
            ..Grant::default()
        })
        .await;
    let alice = s.mcp(&lead);
    let bob = s.agent("bob", "lobby").await;
    let carol = s.agent("carol", "lobby").await;
    let dave = s.agent("dave", "lobby").await;
    alice
        .call(
            "set_room_info",
            json!({
                "description": "Release 0.2 of the sync service: code, docs and the Docker image.",
                "repo_url": "https://git.example.org/team/sync",
                "onboarding_notes": "Claim before you start. Small PRs. Ask @alice for reviews.\nRelease checklist: docs/release.md",
            }),
        )
        .await;
    let guide = alice
        .call(
            "create_task",
            json!({"title": "Write the migration guide for 0.2", "body": "Cover the config renames and the new /data volume.", "priority": "high"}),
        )
        .await["created"]["id"]
        .clone();
    alice
        .call(
            "create_task",
            json!({"title": "Publish the release notes", "depends_on": [guide], "priority": "urgent"}),
        )
        .await;
    let flaky = bob
        .call(
            "create_task",
            json!({"title": "Fix the flaky reconnect test", "priority": "high"}),
        )
        .await["created"]["id"]
        .clone();
    bob.call(
        "claim_task",
        json!({"task_id": flaky, "lease_seconds": 3600}),
    )
    .await;
    carol
        .call(
            "create_task",
            json!({"title": "Benchmark WAL checkpointing on 2 cores", "claim": true}),
        )
        .await;
    let rmcp = carol
        .call(
            "create_task",
            json!({"title": "Upgrade rmcp to 3.12", "claim": true, "priority": "low"}),
        )
        .await["created"]["id"]
        .clone();
    carol
        .call(
            "update_task",
            json!({"task_id": rmcp, "status": "blocked", "note": "Waiting for the upstream fix of the session header."}),
        )
        .await;
    let docker = dave
        .call(
            "create_task",
            json!({"title": "Harden the Dockerfile (non-root, read-only fs)", "claim": true, "needs_review": true}),
        )
        .await["created"]["id"]
        .clone();
    dave.call(
        "submit_result",
        json!({"task_id": docker, "result": "Runs as uid 10001; /data is the only writable path."}),
    )
    .await;
    let ci = bob
        .call(
            "create_task",
            json!({"title": "Cache cargo builds in CI", "claim": true}),
        )
        .await["created"]["id"]
        .clone();
    bob.call("submit_result", json!({"task_id": ci, "result": "done"}))
        .await;
    let pg = alice
        .call(
            "create_task",
            json!({"title": "Try LISTEN/NOTIFY for wakeups"}),
        )
        .await["created"]["id"]
        .clone();
    alice
        .call(
            "cancel_task",
            json!({"task_id": pg, "reason": "Not needed for 0.2"}),
        )
        .await;

    let first = alice
        .call(
            "post_message",
            json!({"body": "Morning all. The release cut is Friday; the board is up to date, grab anything pending."}),
        )
        .await["message_id"]
        .clone();
    bob.call(
        "post_message",
        json!({"body": "@carol the WAL numbers look off on 2 cores, can you rerun with checkpoint=passive?"}),
    )
    .await;
    carol
        .call(
            "post_message",
            json!({"body": "On it. I'll attach the CSV when it's done.", "reply_to": first}),
        )
        .await;
    carol
        .call(
            "put_file",
            json!({"name": "wal-bench.csv", "content_base64": "bW9kZSxwNTAscDk5CnBhc3NpdmUsMS4yLDMuNAo=", "mime": "text/csv"}),
        )
        .await;
    dave.call(
        "post_message",
        json!({"body": "Dockerfile hardening is in review, @alice when you have a minute."}),
    )
    .await;
    bob.call(
        "post_message",
        json!({"body": "Heads-up: an issue comment had <script>window.__pwned = 1</script> in it; it must show up here as plain text."}),
    )
    .await;
    bob.call(
        "post_message",
        json!({"body": "@maria the staging deploy is green again.", "reply_to": first}),
    )
    .await;
    alice
}

/// Opens /ui in Chromium, pastes a token, sees seeded data live, sees a task
/// that an agent creates over MCP appear without a reload, and shows a
/// message holding `<script>` as text.
#[tokio::test]
async fn dashboard_in_a_real_browser() {
    let Ok(node_modules) = std::env::var("CHATROOM_TEST_NODE_MODULES") else {
        panic!(
            "CHATROOM_TEST_NODE_MODULES is not set: it must name the node_modules folder holding \
             playwright-core (.ci/run installs it and sets the variable)"
        );
    };
    let s = TestServer::start().await;
    let alice = seed(&s).await;
    let observer = s
        .token_with(Grant {
            agent: "maria".into(),
            room: "lobby".into(),
            also_rooms: vec!["infra".into()],
            readonly: true,
            ..Grant::default()
        })
        .await;
    let shot = screenshot_path("ui-dashboard.png");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/ui.mjs");
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_UI_URL", &s.url)
        .env("CHATROOM_UI_TOKEN", &observer)
        .env("CHATROOM_UI_SHOT", &shot)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (is Node.js installed?)");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let mut err_text = String::new();

    let ready = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
        .await
        .expect("the browser came up in time")
        .unwrap();
    if ready.as_deref() != Some("READY") {
        use tokio::io::AsyncReadExt;
        let _ = stderr.read_to_string(&mut err_text).await;
        panic!("driver: {ready:?}\n{err_text}");
    }
    let title = "Rotate the staging tokens";
    alice
        .call(
            "create_task",
            json!({"title": title, "priority": "urgent", "body": "Before Friday."}),
        )
        .await;
    stdin
        .write_all(format!("GO {title}\n").as_bytes())
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
        .await
        .expect("the driver finished in time")
        .unwrap()
        .unwrap_or_default();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("node exits")
        .unwrap();
    if !status.success() || !result.starts_with("RESULT ") {
        use tokio::io::AsyncReadExt;
        let _ = stderr.read_to_string(&mut err_text).await;
        panic!("driver failed: {result}\n{err_text}");
    }
    let v: serde_json::Value = serde_json::from_str(&result["RESULT ".len()..]).unwrap();
    assert!(v["column"].as_str().unwrap().contains("col-pending"), "{v}");
    assert!(shot.exists());
    println!("screenshot: {}", shot.display());
}
