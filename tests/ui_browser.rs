//! The `/ui` dashboard in a real headless Chromium, driven by playwright-core
//! (tests/browser/ui.mjs), at a phone's, a laptop's and a wide monitor's
//! size. `.ci/run` installs both and sets `CHATROOM_TEST_NODE_MODULES`;
//! without it this test fails, on purpose. The screenshots land in
//! `$CARGO_TARGET_DIR/ui-shots/` for people to look at.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chatroom::config::Config;
use common::{Grant, McpClient, TestServer};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

/// Where the screenshots go: `ui-shots/` in the Cargo target folder, for
/// people to look at.
fn screenshot_dir() -> PathBuf {
    let dir = common::browser::screenshot_path("ui-shots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

/// Markdown an agent would write: a list, code, a link, a task reference.
const MARKDOWN: &str = "Release plan for **0.2**:\n\n- build the image\n- run `cargo test`\n\n```sh\ndocker compose up -d\n```\n\nDetails at https://git.example.org/team/sync and in #1.";

/// What a hostile agent would try: markup, handlers, script links, a
/// remote image and an unbroken word of `word` characters, long enough to
/// push the layout sideways.
fn hostile(word: usize) -> String {
    format!(
        "<script>window.__pwned = 1</script> <img src=x onerror=\"window.__pwned = 2\"> [click](javascript:window.__pwned=3) ![track](http://203.0.113.7/pixel.png) {}",
        "A".repeat(word)
    )
}

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
    alice
        .call(
            "create_task",
            json!({"title": "Review the backup script", "assignee": "dave"}),
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
    let wal = carol
        .call(
            "create_task",
            json!({"title": "Benchmark WAL checkpointing on 2 cores", "claim": true}),
        )
        .await["created"]["id"]
        .clone();
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
            json!({"name": "wal-bench.csv", "content_base64": "bW9kZSxwNTAscDk5CnBhc3NpdmUsMS4yLDMuNAo=", "mime": "text/csv", "task_id": wal}),
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

/// The driver's side of the conversation: it prints `WANT <step>` and waits
/// for the test to do that step and answer with one line.
struct Driver {
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: ChildStderr,
}

impl Driver {
    /// The next line from the driver; on its failure, its stderr.
    async fn expect(&mut self, what: &str) -> String {
        let line = tokio::time::timeout(Duration::from_secs(120), self.stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("the driver reached {what:?} in time"))
            .unwrap()
            .unwrap_or_default();
        if !line.starts_with(what) {
            use tokio::io::AsyncReadExt;
            let mut err = String::new();
            let _ = self.stderr.read_to_string(&mut err).await;
            panic!("driver: expected {what:?}, got {line:?}\n{err}");
        }
        line
    }

    async fn say(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
}

/// A server started again by the test itself.
struct Restarted {
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Restarted {
    /// A server on `addr` over the SQLite file at `db_path`.
    async fn at(addr: std::net::SocketAddr, db_path: &str) -> Restarted {
        let mut config = Config::for_tests(db_path);
        config.rate_limit_per_minute = 0;
        config.auth_fail_limit = 0;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind the old address again");
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(chatroom::server::launch(config, listener, shutdown.clone()));
        Restarted { shutdown, handle }
    }

    /// Stops it and waits until it has let go of its port.
    async fn stop(self) {
        self.shutdown.cancel();
        self.handle
            .await
            .expect("server task")
            .expect("server result");
    }
}

/// Opens /ui in Chromium at 390, 768, 1280, 1440 and 1920 px: pastes a
/// token, sees seeded data live and a new task without a reload; no size
/// scrolls sideways, the phone reaches chat by a tab, every board column is
/// visible from 1280 px; Markdown renders as elements and a hostile message
/// stays inert and inside its box; editing the hash switches rooms; another
/// room shows its unread messages and mentions; the offline banner comes
/// when the server stops and goes when it is back; a revoked token gets the
/// refused banner.
#[tokio::test]
async fn dashboard_in_a_real_browser() {
    let Ok(node_modules) = std::env::var("CHATROOM_TEST_NODE_MODULES") else {
        panic!(
            "CHATROOM_TEST_NODE_MODULES is not set: it must name the node_modules folder holding \
             playwright-core (.ci/run installs it and sets the variable)"
        );
    };
    // SQLite whatever the environment says: the test restarts the server on
    // the same file.
    let s = TestServer::start_sqlite().await;
    let alice = seed(&s).await;
    let bob = s.agent("bob", "lobby").await;
    bob.call("post_message", json!({"body": MARKDOWN})).await;
    // A message holds at most 8,000 characters; a result 20,000.
    bob.call("post_message", json!({"body": hostile(7_800)}))
        .await;
    let odd = bob
        .call(
            "create_task",
            json!({"title": "Check the hostile result", "claim": true}),
        )
        .await["created"]["id"]
        .clone();
    bob.call(
        "submit_result",
        json!({"task_id": odd, "result": hostile(10_000)}),
    )
    .await;
    let ops = s.agent("olga", "infra").await;
    ops.call("post_message", json!({"body": "Infra is quiet today."}))
        .await;
    let observer = s
        .token_with(Grant {
            agent: "maria".into(),
            room: "lobby".into(),
            also_rooms: vec!["infra".into()],
            readonly: true,
            ..Grant::default()
        })
        .await;
    let shots = screenshot_dir();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/ui.mjs");
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_UI_URL", &s.url)
        .env("CHATROOM_UI_TOKEN", &observer)
        .env("CHATROOM_UI_SHOTS", &shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (is Node.js installed?)");
    let mut d = Driver {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
        stderr: child.stderr.take().unwrap(),
    };

    d.expect("WANT task").await;
    let title = "Rotate the staging tokens";
    alice
        .call(
            "create_task",
            json!({"title": title, "priority": "urgent", "body": "Before Friday."}),
        )
        .await;
    d.say(&format!("TASK {title}")).await;

    // A mention in the other room, then news in this one (which makes the
    // page re-read the rooms' counts).
    d.expect("WANT unread").await;
    ops.call(
        "post_message",
        json!({"body": "@maria the infra dashboard needs your eyes."}),
    )
    .await;
    ops.call("post_message", json!({"body": "And a second note."}))
        .await;
    alice
        .call("post_message", json!({"body": "Standup in five minutes."}))
        .await;
    d.say("UNREAD").await;

    d.expect("WANT stop").await;
    let addr = s.addr;
    let dir = s.stop_keeping_files().await;
    let db_path = dir
        .path()
        .join("chatroom.db")
        .to_string_lossy()
        .into_owned();
    d.say("STOPPED").await;

    d.expect("WANT start").await;
    let restarted = Restarted::at(addr, &db_path).await;
    d.say("STARTED").await;

    d.expect("WANT revoke").await;
    let store = chatroom::db::open(&format!("sqlite://{db_path}"))
        .await
        .expect("open the database");
    let core = chatroom::domain::Core::offline(store);
    assert_eq!(core.revoke_agent("maria").await.unwrap(), 1);
    // The open stream ends with the server; its reconnect meets the
    // revocation.
    restarted.stop().await;
    let again = Restarted::at(addr, &db_path).await;
    d.say("REVOKED").await;

    let result = d.expect("RESULT ").await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("node exits")
        .unwrap();
    assert!(status.success(), "{result}");
    let v: serde_json::Value = serde_json::from_str(&result["RESULT ".len()..]).unwrap();
    assert!(v["column"].as_str().unwrap().contains("col-pending"), "{v}");
    for size in ["390x844", "768x1024", "1280x800", "1440x900", "1920x1080"] {
        assert!(shots.join(format!("ui-{size}.png")).exists(), "{size}");
    }
    again.stop().await;
    println!("screenshots: {}", shots.display());
}

/// The agents list shows each agent's presence state and its age: the
/// states their hooks reported over `POST /v1/presence`, and for an agent
/// that reports none, the state its calls give; a change arrives over the
/// stream without a reload. Screenshots at 1280 and 390 px
/// (`presence-*.png`).
#[tokio::test]
async fn presence_on_the_dashboard() {
    let Ok(node_modules) = std::env::var("CHATROOM_TEST_NODE_MODULES") else {
        panic!(
            "CHATROOM_TEST_NODE_MODULES is not set: it must name the node_modules folder holding \
             playwright-core (.ci/run installs it and sets the variable)"
        );
    };
    let s = TestServer::start().await;
    s.room("lobby").await;
    let http = reqwest::Client::new();
    let mut tokens = std::collections::HashMap::new();
    for (agent, state) in [
        ("alice", Some("working")),
        ("bob", Some("waiting")),
        ("carol", Some("idle")),
        ("dave", Some("offline")),
        ("erin", None),
    ] {
        let token = s.token(agent, "lobby").await;
        match state {
            Some(state) => {
                let r = http
                    .post(format!("{}/v1/presence", s.url))
                    .bearer_auth(&token)
                    .json(&json!({ "state": state }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
            // Erin's client has no hooks: she only calls tools.
            None => {
                s.mcp(&token)
                    .call("post_message", json!({"body": "erin here, no hooks"}))
                    .await;
            }
        }
        tokens.insert(agent, token);
    }
    let observer = s
        .token_with(Grant {
            agent: "maria".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await;
    let shots = screenshot_dir();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser/presence.mjs");
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_UI_URL", &s.url)
        .env("CHATROOM_UI_TOKEN", &observer)
        .env("CHATROOM_UI_SHOTS", &shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node (is Node.js installed?)");
    let mut d = Driver {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
        stderr: child.stderr.take().unwrap(),
    };
    d.expect("WANT change").await;
    let r = http
        .post(format!("{}/v1/presence", s.url))
        .bearer_auth(&tokens["bob"])
        .json(&json!({"state": "working"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    d.say("CHANGED").await;
    let result = d.expect("RESULT ").await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("node exits")
        .unwrap();
    assert!(status.success(), "{result}");
    let v: serde_json::Value = serde_json::from_str(&result["RESULT ".len()..]).unwrap();
    let before = &v["before"];
    for (agent, state) in [
        ("alice", "working"),
        ("bob", "waiting"),
        ("carol", "idle"),
        ("dave", "offline"),
        ("erin", "online"),
    ] {
        assert_eq!(before[agent]["state"], state, "{agent}: {v}");
        let text = before[agent]["text"].as_str().unwrap();
        assert!(
            text.starts_with(state) && text.contains("just now"),
            "{agent} shows its state and its age: {text:?}"
        );
    }
    assert!(
        before["erin"]["title"]
            .as_str()
            .unwrap()
            .contains("from its last call"),
        "{v}"
    );
    assert_eq!(v["after"]["bob"]["state"], "working", "{v}");
    for size in ["1280x800", "390x844"] {
        assert!(shots.join(format!("presence-{size}.png")).exists());
    }
    println!("screenshots: {}", shots.display());
}
