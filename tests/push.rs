//! Push clients other than the channel, and presence: `chatroom watch
//! --monitor` and `chatroom hook --rewake` (the real binary against a real
//! server: exit codes, stderr), the hooks' presence over REST, and
//! `post_message`'s `reach` for each state.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use common::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const T: Duration = Duration::from_secs(20);

async fn presence(url: &str, token: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{url}/v1/presence"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The monitor prints one pointer line per event for the agent (no agent
/// text), ending "call whats_new"; its own words and plain talk print nothing.
#[tokio::test]
async fn the_monitor_prints_pointers() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let lead = s
        .token_with(common::Grant {
            agent: "bob".into(),
            room: "lobby".into(),
            lead: true,
            ..common::Grant::default()
        })
        .await;
    let bob = s.mcp(&lead);
    let token = s.token("alice", "lobby").await;
    let alice = s.mcp(&token);
    let mut child = tokio::process::Command::new(common::binary())
        .args(["watch", "--monitor"])
        .env_clear()
        .env("CHATROOM_URL", &s.url)
        .env("CHATROOM_TOKEN", &token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    common::wait_for_push(&s.url, &token, "alice").await;
    alice
        .call("post_message", json!({"body": "me @alice"}))
        .await;
    bob.call("post_message", json!({"body": "chatting"})).await;
    let task = bob
        .call(
            "create_task",
            json!({"title": "secret title", "assignee": "alice"}),
        )
        .await;
    let _ = task;
    let line = tokio::time::timeout(T, out.next_line())
        .await
        .expect("a line")
        .unwrap()
        .unwrap();
    assert!(line.starts_with("chatroom[lobby] event #"), "{line}");
    assert!(line.contains("task_created by bob [task #"), "{line}");
    assert!(line.contains("(assigned to you)"), "{line}");
    assert!(line.ends_with("— call whats_new"), "{line}");
    assert!(!line.contains("secret title"), "pointers only: {line}");
}

/// A bad token stops the monitor with a clear line and a non-zero exit.
#[tokio::test]
async fn the_monitor_stops_on_a_bad_token() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let env = HashMap::from([
        ("CHATROOM_URL", s.url.clone()),
        (
            "CHATROOM_TOKEN",
            "cr_wrong-wrong-wrong-wrong-wrong-wrong".to_owned(),
        ),
    ]);
    let (code, _, err) = common::run_cli(&["watch", "--monitor"], &env).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("token was refused"), "{err}");
}

async fn rewake(
    url: &str,
    token: &str,
    wait: &str,
    state: &std::path::Path,
) -> tokio::process::Child {
    let mut child = tokio::process::Command::new(common::binary())
        .args(["hook", "--rewake", "--wait", wait])
        .env_clear()
        .env("CHATROOM_URL", url)
        .env("CHATROOM_TOKEN", token)
        .env("CHATROOM_HOOK_STATE_DIR", state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(br#"{"hook_event_name":"Stop","session_id":"s-1"}"#)
        .await
        .unwrap();
    drop(stdin);
    child
}

async fn finish(child: tokio::process::Child) -> (i32, String, String) {
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .expect("exits in time")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Rewake waits for the next event for the agent, then exits 2 with the
/// framed digest on stderr (and nothing on stdout); the agent is `waiting`
/// while it waits. A mention already past the cursor wakes it at once.
#[tokio::test]
async fn rewake_exits_2_with_the_digest() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let state = tempfile::tempdir().unwrap();
    let child = rewake(&s.url, &token, "5m", state.path()).await;
    common::wait_for_push(&s.url, &token, "alice").await;
    let p = presence(&s.url, &token).await;
    let me = p["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "alice")
        .unwrap()
        .clone();
    assert_eq!(me["state"], "waiting", "{p}");
    bob.call("post_message", json!({"body": "just chatting"}))
        .await;
    bob.call("post_message", json!({"body": "@alice please review"}))
        .await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("=== BEGIN UNTRUSTED DATA"), "{err}");
    assert!(err.contains("please review"), "{err}");
    assert!(err.contains("mentions you"), "{err}");

    // Unread and for her: the next Stop wakes at once.
    bob.call("post_message", json!({"body": "@alice one more"}))
        .await;
    let child = rewake(&s.url, &token, "5m", state.path()).await;
    let (code, _, err) = finish(child).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one more"), "{err}");
}

/// A wait that ends with nothing exits 0 silently and leaves the agent idle.
#[tokio::test]
async fn rewake_ends_silently() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let state = tempfile::tempdir().unwrap();
    let child = rewake(&s.url, &token, "2s", state.path()).await;
    bob.call("post_message", json!({"body": "not for alice"}))
        .await;
    let (code, out, err) = finish(child).await;
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    let p = presence(&s.url, &token).await;
    assert!(
        p["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent"] == "alice" && a["state"] == "idle"),
        "{p}"
    );
}

/// A refused token: a line on stderr and exit 1 (not 2: nothing to wake for).
#[tokio::test]
async fn rewake_with_a_bad_token() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let state = tempfile::tempdir().unwrap();
    let child = rewake(
        &s.url,
        "cr_wrong-wrong-wrong-wrong-wrong-wrong",
        "1m",
        state.path(),
    )
    .await;
    let (code, _, err) = finish(child).await;
    assert_eq!(code, 1);
    assert!(err.contains("token was refused"), "{err}");
}

/// States over REST: each is kept with its time; a bad one is refused.
#[tokio::test]
async fn presence_over_rest() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let http = reqwest::Client::new();
    for state in ["online", "working", "waiting", "idle", "offline"] {
        let r: Value = http
            .post(format!("{}/v1/presence", s.url))
            .bearer_auth(&token)
            .json(&json!({ "state": state }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(r["state"], state, "{r}");
        assert!(r["ts"].is_string());
        let p = presence(&s.url, &token).await;
        assert_eq!(p["agents"][0]["state"], state);
        assert!(p["agents"][0]["state_ts"].is_string());
    }
    let bad = http
        .post(format!("{}/v1/presence", s.url))
        .bearer_auth(&token)
        .json(&json!({"state": "asleep"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let anon = http
        .post(format!("{}/v1/presence", s.url))
        .json(&json!({"state": "online"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
}

/// `reach` for each state: offline (never seen), next_turn (its hook ran),
/// push (a push client follows the room), and back to next_turn under
/// `set_attention focus`.
#[tokio::test]
async fn reach_for_each_state() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let alice = s.mcp(&token);
    let post = async |body: &str| bob.call("post_message", json!({ "body": body })).await;
    let r = post("@alice hello").await;
    assert_eq!(r["reach"], json!({"alice": "offline"}), "{r}");
    let r = post("no mention").await;
    assert_eq!(r["reach"], json!({}));

    // Her prompt hook reads the room.
    let env = HashMap::from([
        ("CHATROOM_URL", s.url.clone()),
        ("CHATROOM_TOKEN", token.clone()),
    ]);
    let (code, _, _) = common::run_with_stdin(
        &["hook"],
        &env,
        Some(r#"{"hook_event_name":"UserPromptSubmit"}"#),
    )
    .await;
    assert_eq!(code, 0);
    let r = post("@alice again").await;
    assert_eq!(r["reach"]["alice"], "next_turn", "{r}");

    let mut monitor = tokio::process::Command::new(common::binary())
        .args(["watch", "--monitor"])
        .env_clear()
        .env("CHATROOM_URL", &s.url)
        .env("CHATROOM_TOKEN", &token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    common::wait_for_push(&s.url, &token, "alice").await;
    let r = post("@alice now").await;
    assert_eq!(r["reach"]["alice"], "push", "{r}");

    let a = alice
        .call("set_attention", json!({"attention": "focus"}))
        .await;
    assert_eq!(a["attention"], "focus");
    let r = post("@alice focus?").await;
    assert_eq!(r["reach"]["alice"], "next_turn", "{r}");
    assert_eq!(
        alice
            .refused("set_attention", json!({"attention": "loud"}))
            .await,
        "invalid_argument"
    );
    monitor.kill().await.unwrap();
}

/// `chatroom doctor --agent` names a variable that silently turns channels
/// off, and points at the debug log's line.
#[tokio::test]
async fn doctor_names_what_turns_channels_off() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let home = tempfile::tempdir().unwrap();
    let env = HashMap::from([
        ("CHATROOM_URL", s.url.clone()),
        ("CHATROOM_TOKEN", token),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("HOME", home.path().to_string_lossy().into_owned()),
    ]);
    let (_, out, _) = common::run_cli(&["doctor", "--agent"], &env).await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("warn") && l.contains("DISABLE_TELEMETRY set")),
        "{out}"
    );
    assert!(out.contains("Channel notifications skipped"), "{out}");
}

/// Codex and Gemini CLI get `hookSpecificOutput.additionalContext` JSON
/// naming their event, within 10,000 characters.
#[tokio::test]
async fn codex_and_gemini_hooks_print_additional_context() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    for i in 0..30 {
        bob.call(
            "post_message",
            json!({"body": format!("{i} {}", "x".repeat(900))}),
        )
        .await;
    }
    let env = HashMap::from([("CHATROOM_URL", s.url.clone()), ("CHATROOM_TOKEN", token)]);
    for (client, event) in [("codex", "UserPromptSubmit"), ("gemini", "BeforeAgent")] {
        let input = format!(r#"{{"hook_event_name":"{event}","session_id":"x"}}"#);
        let (code, out, _) =
            common::run_with_stdin(&["hook", "--client", client], &env, Some(&input)).await;
        assert_eq!(code, 0);
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
        assert_eq!(v["hookSpecificOutput"]["hookEventName"], event);
        let ctx = v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap();
        assert!(ctx.chars().count() <= 10_000, "{}", ctx.len());
        assert!(ctx.contains("UNTRUSTED DATA"), "{ctx}");
        assert!(ctx.contains("whats_new"), "{ctx}");
    }
}
