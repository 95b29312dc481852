//! The admin console in a real browser: headless Chromium driven by npm
//! `playwright-core` (tests/browser/admin.mjs) signs in, creates a room,
//! mints a token and reads it from the modal; this test then uses that
//! token over MCP. Needs `CHATROOM_TEST_NODE_MODULES` (set by .ci/run) and
//! Debian's `/usr/bin/chromium`; without them it fails, it never skips.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::browser::screenshot_path;
use common::{Grant, TestServer};
use serde_json::{Value, json};

/// Signing in, creating a room and minting in the browser yields a token
/// that works over MCP as the new agent in the new room.
#[tokio::test]
async fn mint_in_the_browser_then_use_the_token_over_mcp() {
    let modules = std::env::var("CHATROOM_TEST_NODE_MODULES").unwrap_or_default();
    assert!(
        !modules.is_empty(),
        "CHATROOM_TEST_NODE_MODULES is not set: run the tests through .ci/run, or install \
         playwright-core (npm install --prefix \"$TOOLS/node\" playwright-core) and export \
         CHATROOM_TEST_NODE_MODULES=\"$TOOLS/node/node_modules\""
    );
    assert!(
        PathBuf::from(&modules).join("playwright-core").is_dir(),
        "no playwright-core under CHATROOM_TEST_NODE_MODULES={modules}"
    );
    assert!(
        PathBuf::from("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: apt-get install chromium (.ci/run does)"
    );

    let s = TestServer::start_with(|c| c.admin_api = true).await;
    s.room("lobby").await;
    let root = s
        .token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            all_rooms: true,
            ..Grant::default()
        })
        .await;
    let shot = screenshot_path("admin-mint.png");
    let _ = std::fs::remove_file(&shot);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/admin.mjs");
    let child = tokio::process::Command::new("node")
        .arg(&script)
        .env("CHATROOM_TEST_NODE_MODULES", &modules)
        .env("CHATROOM_URL", &s.url)
        .env("CHATROOM_ADMIN_TOKEN", &root)
        .env("SCREENSHOT", &shot)
        .env("SCREENSHOT_PAGE", shot.with_file_name("admin-console.png"))
        // playwright-core never downloads a browser; make sure nothing tries.
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (is Node.js installed?)");
    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("the browser script did not finish within 90 s")
        .expect("browser script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser script failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let line = stdout.lines().last().expect("the script printed nothing");
    let v: Value = serde_json::from_str(line).expect("a JSON line");
    let token = v["token"].as_str().expect("token");
    assert!(
        v["claude_mcp_add"]
            .as_str()
            .unwrap()
            .contains(&format!("{}/mcp", s.url))
    );

    let bot = s.mcp(token);
    let me = bot.call("whoami", json!({})).await;
    assert_eq!(me["agent"], "browser-bot");
    assert_eq!(me["room"], "browser-room");
    assert_eq!(me["lead"], true);
    assert_eq!(me["skills"], json!(["testing", "review"]));
    let posted = bot
        .call("post_message", json!({"body": "minted in a browser"}))
        .await;
    assert_eq!(posted["room"], "browser-room");
    let room = s.store.get_room("browser-room").await.unwrap().unwrap();
    assert!(
        room.description.starts_with("<b>bold</b>"),
        "stored as typed"
    );
    assert!(
        s.store.get_room("scratch").await.unwrap().is_none(),
        "deleted from the browser"
    );
    assert!(shot.exists(), "no screenshot at {}", shot.display());
}
