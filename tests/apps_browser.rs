//! The board app in a real headless Chromium, hosted the way an MCP Apps
//! host does (tests/browser/apps.mjs: the ext-apps `AppBridge`, a frame
//! sandboxed to scripts under the resource's CSP, `tools/call` forwarded to
//! this server with the host's token). `.ci/run` installs playwright-core
//! and sets `CHATROOM_TEST_NODE_MODULES`; without it this test fails, on
//! purpose. Screenshots land in `$CARGO_TARGET_DIR/app-shots/`.

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use chatroom::domain::tokens::Grant;
use common::TestServer;
use serde_json::{Value, json};

/// What a hostile agent would try: markup, handlers, script links, a remote
/// image, and an unbroken word long enough to push the layout sideways.
fn hostile() -> String {
    format!(
        "<script>window.__pwned = 1</script> <img src=x onerror=\"window.__pwned = 2\"> [click](javascript:window.__pwned=3) ![track](http://203.0.113.7/pixel.png) <iframe src=\"https://203.0.113.7/\"></iframe> {}",
        "A".repeat(400)
    )
}

/// Hosts the app as a writer (1280 and 390 px, light and dark), a lead and
/// a read-only observer: the board renders with every column, chat threads
/// and activity; a claim, a note and a reply made in the app land on the
/// server under the caller's name; the lead's approval moves a task to
/// done and a rejection needs a note; the observer is offered no write;
/// hostile agent text stays inert; nothing leaves the frame.
#[tokio::test]
async fn board_app_in_a_real_browser() {
    let Ok(node_modules) = std::env::var("CHATROOM_TEST_NODE_MODULES") else {
        panic!(
            "CHATROOM_TEST_NODE_MODULES is not set: it must name the node_modules folder holding \
             playwright-core (.ci/run installs it and sets the variable)"
        );
    };
    let s = TestServer::start().await;
    s.room("lobby").await;
    let lead_token = s
        .token_with(Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            lead: true,
            ..Grant::default()
        })
        .await;
    let alice = s.mcp(&lead_token);
    let writer_token = s.token("bob", "lobby").await;
    let bob = s.mcp(&writer_token);
    let carol = s.agent("carol", "lobby").await;
    let observer_token = s
        .token_with(Grant {
            agent: "olga".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await;

    let claim_me = alice
        .call(
            "create_task",
            json!({"title": "Claim me", "body": "A **plain** task.", "priority": "high"}),
        )
        .await["created"]["id"]
        .clone();
    let mut review = Vec::new();
    for title in ["Ship the docs", "Tidy the logs"] {
        let id = carol
            .call(
                "create_task",
                json!({"title": title, "claim": true, "needs_review": true}),
            )
            .await["created"]["id"]
            .clone();
        carol
            .call(
                "submit_result",
                json!({"task_id": id, "result": "Done, see the PR."}),
            )
            .await;
        review.push(id);
    }
    let blocked = carol
        .call(
            "create_task",
            json!({"title": "Wait for the fix", "claim": true}),
        )
        .await["created"]["id"]
        .clone();
    carol
        .call(
            "update_task",
            json!({"task_id": blocked, "status": "blocked"}),
        )
        .await;
    let title = format!(
        "<img src=x onerror=\"window.__pwned = 4\"> [x](javascript:window.__pwned=5) {}",
        "W".repeat(90)
    );
    carol
        .call("create_task", json!({"title": title, "body": hostile()}))
        .await;
    let plan = alice
        .call(
            "post_message",
            json!({"body": "Plan for today: **bold** moves, see https://example.org/plan and #1."}),
        )
        .await["message_id"]
        .clone();
    carol
        .call(
            "post_message",
            json!({"body": "Sounds good @bob", "reply_to": plan}),
        )
        .await;
    carol.call("post_message", json!({"body": hostile()})).await;

    let shots = common::browser::screenshot_path("app-shots");
    std::fs::create_dir_all(&shots).expect("screenshot folder");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/apps.mjs");
    let tokens = json!({"writer": writer_token, "lead": lead_token, "observer": observer_token});
    let output = tokio::process::Command::new("node")
        .arg(&script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_APP_URL", &s.url)
        .env("CHATROOM_APP_TOKENS", tokens.to_string())
        .env("CHATROOM_APP_SHOTS", &shots)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run node (is Node.js installed?)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result: Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_else(|| panic!("no RESULT line:\n{stdout}\n{stderr}"));
    assert_eq!(result["ok"], true, "{stdout}\n{stderr}");
    println!(
        "model told: {}; panel in a fixed frame: {}",
        result["told"], result["panel_fixed_frame"]
    );

    // The person's clicks went through the app-only tools: their audit
    // rows name them (via the app), not the model's tools.
    let audit = s.store.dump_table("audit", 0, 10_000).await.unwrap();
    let tools_of = |agent: &str| -> Vec<String> {
        audit
            .iter()
            .filter(|r| r["agent"] == agent)
            .filter_map(|r| r["tool"].as_str().map(str::to_owned))
            .collect()
    };
    let bob_tools = tools_of("bob");
    for t in ["board_claim", "board_note", "board_release", "board_post"] {
        assert!(
            bob_tools.iter().any(|x| x == t),
            "{t} not audited: {bob_tools:?}"
        );
    }
    for t in ["claim_task", "add_note", "release_task", "post_message"] {
        assert!(
            !bob_tools.iter().any(|x| x == t),
            "a click audited as {t}: {bob_tools:?}"
        );
    }
    assert!(tools_of("alice").iter().any(|x| x == "board_review"));

    // What the app did is on the server, under the caller's own name.
    let task = |v: Value| v["task"].clone();
    let claimed = task(bob.call("get_task", json!({"task_id": claim_me})).await);
    assert_eq!(claimed["status"], "in_progress");
    assert_eq!(claimed["assignee"], "bob");
    assert_eq!(claimed["notes"][0]["author"], "bob");
    assert_eq!(
        claimed["notes"][0]["body"],
        "Started on it from the **chat app**."
    );
    let approved = task(bob.call("get_task", json!({"task_id": review[0]})).await);
    assert_eq!(approved["status"], "done");
    let rejected = task(bob.call("get_task", json!({"task_id": review[1]})).await);
    assert_eq!(rejected["status"], "pending");
    assert!(rejected["assignee"].is_null(), "{rejected}");
    let reviews = bob
        .call("read_events", json!({"kind": "task_reviewed"}))
        .await;
    let actors: Vec<&str> = reviews["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["actor"].as_str())
        .collect();
    assert_eq!(actors, ["alice", "alice"]);
    let released = bob
        .call("read_events", json!({"kind": "task_released"}))
        .await;
    assert_eq!(released["events"][0]["actor"], "bob", "{released}");
    assert_eq!(released["count"], 1, "{released}");
    let msgs = bob.call("read_messages", json!({})).await;
    let reply = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["body"] == "On it, from the app.")
        .expect("the reply landed")
        .clone();
    assert_eq!(reply["author"], "bob");
    assert_eq!(reply["reply_to"], plan);
    // The observer changed nothing.
    let olga = s.mcp(&observer_token);
    let events = olga.call("read_events", json!({"limit": 500})).await;
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["actor"] != "olga"),
        "the read-only token wrote"
    );
    for shot in [
        "app-1280",
        "app-390",
        "app-390-chat",
        "app-lead-1280",
        "app-lead-fixed-frame",
        "app-readonly-390",
    ] {
        let bytes = std::fs::metadata(shots.join(format!("{shot}.png")))
            .unwrap_or_else(|e| panic!("{shot}: {e}"))
            .len();
        // A frame that never painted is one flat colour, a few kB.
        assert!(bytes > 20_000, "{shot} looks blank ({bytes} bytes)");
    }
    println!("screenshots: {}", shots.display());
}
