//! The board app under an independent MCP Apps host: the MCP Inspector
//! (npm `@modelcontextprotocol/inspector`), which connects to the server
//! itself with the bearer header, renders show_board's app in its Apps tab
//! and forwards the app's tool calls. Driven in headless Chromium by
//! `tests/browser/inspector.mjs` at 1280 px, and the app's frame at 390 px;
//! screenshots land in `$CARGO_TARGET_DIR/app-shots/inspector-*.png`.
//!
//! `.ci/run` installs the Inspector and sets `CHATROOM_TEST_INSPECTOR` (its
//! launcher) with `CHATROOM_TEST_NODE22` and `CHATROOM_TEST_NODE_MODULES`
//! (playwright-core); without them this test fails.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::TestServer;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

fn required(var: &str, what: &str) -> PathBuf {
    let path = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: {what} is needed for this test; run `bash .ci/run` once, or export {var}")
    });
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{var}={} does not exist; run `bash .ci/run`",
        path.display()
    );
    path
}

/// Under the Inspector the board app renders on protocol 2026-07-28, only
/// show_board is listed as an app, and a person's Claim goes through the
/// Inspector's bridge to the server as the app-only tool, under the
/// token's own name; at 390 px the app does not scroll sideways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_app_under_the_mcp_inspector() {
    let node = required("CHATROOM_TEST_NODE22", "a Node 22 binary");
    let inspector = required("CHATROOM_TEST_INSPECTOR", "the MCP Inspector");
    let modules = required("CHATROOM_TEST_NODE_MODULES", "playwright-core");
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    for i in 1..=3 {
        alice
            .call(
                "create_task",
                json!({"title": format!("Task {i} for the Inspector")}),
            )
            .await;
    }
    alice
        .call("post_message", json!({"body": "Hello from **the room**."}))
        .await;
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let mut child = tokio::process::Command::new(&node)
        .arg(&inspector)
        .args(["--web", "--transport", "http", "--protocol-era", "modern"])
        .arg("--server-url")
        .arg(format!("{}/mcp", s.url))
        .arg("--header")
        .arg(format!("Authorization: Bearer {}", alice.token))
        .env("HOME", home.path())
        .env("MCP_STORAGE_DIR", home.path())
        .env("MCP_INSPECTOR_SECRET_STORE", "memory")
        .env("CLIENT_PORT", port.to_string())
        .env("MCP_SANDBOX_PORT", common::free_port().to_string())
        .env("MCP_APP_ORIGIN_PORT", common::free_port().to_string())
        // The Inspector's own login (for its proxy) is off: it listens on
        // loopback for this test only.
        .env("DANGEROUSLY_OMIT_AUTH", "true")
        .env("MCP_AUTO_OPEN_ENABLED", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the Inspector");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let up = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("is up and running") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(up, Ok(true), "the Inspector did not start");
    // Keep reading its output so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let shots = common::browser::screenshot_path("app-shots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/inspector.mjs");
    let output = tokio::process::Command::new(&node)
        .arg(&script)
        .env("NODE_PATH", &modules)
        .env(
            "CHATROOM_INSPECTOR_URL",
            format!("http://127.0.0.1:{port}/"),
        )
        .env("CHATROOM_APP_SHOTS", &shots)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run the browser script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_else(|| panic!("no RESULT:\n{stdout}\n{stderr}"));
    println!("under the Inspector: {result}");
    assert_eq!(result["ok"], true);
    assert_eq!(result["protocol"], "MCP 2026-07-28");
    assert_eq!(
        result["apps"],
        json!(["show_board"]),
        "app-only tools are not apps"
    );
    assert_eq!(result["width_390"][0], result["width_390"][1], "{result}");

    // The claim is on the server, by alice, through the app-only tool.
    let title = result["claimed"].as_str().unwrap();
    let tasks = alice
        .call("list_tasks", json!({"status": "in_progress"}))
        .await;
    let held = tasks["tasks"].as_array().unwrap();
    assert!(
        held.iter()
            .any(|t| t["title"] == title && t["assignee"] == "alice"),
        "{tasks}"
    );
    let audit = s.store.dump_table("audit", 0, 10_000).await.unwrap();
    assert!(
        audit
            .iter()
            .any(|r| r["tool"] == "board_claim" && r["agent"] == "alice"),
        "the click is not audited as the app's: {audit:?}"
    );
    for shot in ["inspector-1280", "inspector-1280-claimed", "inspector-390"] {
        let bytes = std::fs::metadata(shots.join(format!("{shot}.png")))
            .unwrap_or_else(|e| panic!("{shot}: {e}"))
            .len();
        assert!(bytes > 20_000, "{shot} looks blank ({bytes} bytes)");
    }
    child.kill().await.ok();
}
