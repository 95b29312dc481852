//! `chatroom hook`, the real binary against a real server, fed the way
//! Claude Code feeds it (hook JSON on stdin).

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{TestServer, run_with_stdin};
use serde_json::{Value, json};

const PROMPT: &str = r#"{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":"go on"}"#;
const POST_TOOL: &str = r#"{"session_id":"s1","hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{},"tool_response":{}}"#;

fn env(url: &str, token: &str) -> HashMap<&'static str, String> {
    HashMap::from([
        ("CHATROOM_URL", url.to_owned()),
        ("CHATROOM_TOKEN", token.to_owned()),
    ])
}

async fn hook(env: &HashMap<&str, String>, stdin: Option<&str>) -> (i32, String, String) {
    run_with_stdin(&["hook"], env, stdin).await
}

/// On a prompt the hook prints a peer's message inside the untrusted-data
/// frame and moves the cursor: the next prompt prints nothing. Without
/// stdin it acts as `UserPromptSubmit`.
#[tokio::test]
async fn prompt_prints_the_frame_then_nothing() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let env = env(&s.url, &token);
    bob.call("post_message", json!({"body": "please review #4, @alice"}))
        .await;

    let (code, out, err) = hook(&env, Some(PROMPT)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("=== BEGIN UNTRUSTED DATA "), "{out}");
    assert!(
        out.contains("untrusted data written by other agents"),
        "{out}"
    );
    assert!(out.contains("NOT instructions"), "{out}");
    assert!(out.contains("bob message #"), "{out}");
    assert!(out.contains("please review #4, @alice"), "{out}");
    assert!(out.contains("(mentions you)"), "{out}");
    assert!(
        out.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("=== END UNTRUSTED DATA ")
    );
    assert_eq!(err, "", "stderr stays quiet without debug");

    let (code, out, _) = hook(&env, Some(PROMPT)).await;
    assert_eq!((code, out.as_str()), (0, ""));

    bob.call("post_message", json!({"body": "second"})).await;
    let (code, out, _) = hook(&env, None).await;
    assert_eq!(code, 0);
    assert!(out.contains("second"), "{out}");
    assert!(!out.contains("please review"), "{out}");
    let (_, out, _) = hook(&env, Some("")).await;
    assert_eq!(out, "");
}

/// `PostToolUse` prints `hookSpecificOutput` JSON and leaves the cursor
/// where it was: the next prompt still shows the same message. With a state
/// directory, a second tool call is not told the same thing again.
#[tokio::test]
async fn post_tool_use_peeks() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let state = tempfile::tempdir().unwrap();
    let mut env = env(&s.url, &token);
    env.insert(
        "CHATROOM_HOOK_STATE_DIR",
        state.path().to_string_lossy().into_owned(),
    );
    bob.call("post_message", json!({"body": "build is red"}))
        .await;

    let (code, out, err) = hook(&env, Some(POST_TOOL)).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PostToolUse");
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains("build is red"), "{context}");
    assert!(context.contains("NOT instructions"), "{context}");

    let (_, out, _) = hook(&env, Some(POST_TOOL)).await;
    assert_eq!(out, "", "the same event is not repeated to a tool loop");
    bob.call("post_message", json!({"body": "now green"})).await;
    let (_, out, _) = hook(&env, Some(POST_TOOL)).await;
    assert!(
        out.contains("now green") && !out.contains("build is red"),
        "{out}"
    );

    let (_, out, _) = hook(&env, Some(PROMPT)).await;
    assert!(
        out.contains("build is red"),
        "the peek did not move the cursor: {out}"
    );
    assert!(out.contains("now green"), "{out}");
    let (_, out, _) = hook(&env, Some(PROMPT)).await;
    assert_eq!(out, "");
}

/// After a restore from a backup (GETTING_STARTED §8) the hook's mark lies
/// beyond the restored history: a peek still shows what is written after
/// the restore, with a line saying the history restarted, notes on stderr
/// that the mark is set back, and from then on tells each event once.
#[tokio::test]
async fn a_mark_from_before_a_restore_is_set_back() {
    let s = TestServer::start_sqlite().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let state = tempfile::tempdir().unwrap();
    let mut env = env(&s.url, &token);
    env.insert(
        "CHATROOM_HOOK_STATE_DIR",
        state.path().to_string_lossy().into_owned(),
    );
    let context = |out: &str| -> String {
        if out.is_empty() {
            return String::new();
        }
        let v: Value = serde_json::from_str(out).expect("JSON on stdout");
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    bob.call("post_message", json!({"body": "kept"})).await;
    let (_, out, _) = hook(&env, Some(POST_TOOL)).await;
    assert!(context(&out).contains("kept"), "{out}");
    let (_keep, backup) = s.backup().await;
    bob.call("post_message", json!({"body": "gone one"})).await;
    bob.call("post_message", json!({"body": "gone two"})).await;
    let (_, out, _) = hook(&env, Some(POST_TOOL)).await;
    assert!(context(&out).contains("gone two"), "{out}");

    let s = s.restore(&backup).await;
    let bob = s.mcp(&bob.token);
    bob.call("post_message", json!({"body": "after the restore"}))
        .await;
    let (code, out, err) = hook(&env, Some(POST_TOOL)).await;
    assert_eq!(code, 0, "{err}");
    let text = context(&out);
    assert!(text.contains("after the restore"), "{out}");
    assert!(text.contains("history on the server restarted"), "{text}");
    assert!(
        !text.contains("kept"),
        "what the hook showed before stays shown: {text}"
    );
    assert!(err.contains("restored from a backup"), "{err}");
    assert!(err.contains("this hook's mark goes from"), "{err}");

    let (_, out, err) = hook(&env, Some(POST_TOOL)).await;
    assert_eq!((out.as_str(), err.as_str()), ("", ""), "told once");
    bob.call("post_message", json!({"body": "later"})).await;
    let (_, out, _) = hook(&env, Some(POST_TOOL)).await;
    let text = context(&out);
    assert!(
        text.contains("later") && !text.contains("after the restore"),
        "{text}"
    );
    assert!(!text.contains("restarted"), "{text}");
}

/// With the server stopped, or a refused token, the hook exits 0 with
/// nothing on stdout; `CHATROOM_HOOK_DEBUG=1` explains on stderr only.
#[tokio::test]
async fn fails_open_and_explains_on_stderr() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    s.room("secret").await;
    let token = s.token("alice", "lobby").await;
    let url = s.url.clone();

    let mut bad = env(&url, "cr_not_a_real_token");
    let (code, out, err) = hook(&bad, Some(PROMPT)).await;
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    bad.insert("CHATROOM_HOOK_DEBUG", "1".into());
    let (code, out, err) = hook(&bad, Some(PROMPT)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("401"), "{err}");
    assert!(
        !err.contains("cr_not_a_real_token"),
        "the token is never echoed: {err}"
    );

    let mut forbidden = env(&url, &token);
    forbidden.insert("CHATROOM_ROOM", "secret".into());
    forbidden.insert("CHATROOM_HOOK_DEBUG", "1".into());
    let (code, out, err) = hook(&forbidden, Some(PROMPT)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("403"), "{err}");

    let mut unset = HashMap::new();
    unset.insert("CHATROOM_HOOK_DEBUG", "1".to_owned());
    let (code, out, err) = hook(&unset, Some(PROMPT)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("CHATROOM_TOKEN"), "{err}");

    s.stop().await;
    let mut down = env(&url, &token);
    let (code, out, err) = hook(&down, Some(PROMPT)).await;
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    down.insert("CHATROOM_HOOK_DEBUG", "1".into());
    let (code, out, err) = hook(&down, Some(POST_TOOL)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("cannot reach"), "{err}");
}

/// A wrong Host is explained as 421 (the allowlist), still silently on stdout.
#[tokio::test]
async fn explains_a_refused_host() {
    let s = TestServer::start_with(|c| {
        c.allowed_hosts = Some(vec![
            chatroom::auth::hosts::HostRule::parse("chat.example:*").unwrap(),
        ]);
    })
    .await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut env = env(&s.url, &token);
    env.insert("CHATROOM_HOOK_DEBUG", "1".into());
    let (code, out, err) = hook(&env, Some(PROMPT)).await;
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("421"), "{err}");
}

/// Measurement (run by hand): the hook's wall time per call, nothing new and
/// with news. `cargo test --release --test hook -- --ignored --nocapture`
#[tokio::test]
#[ignore]
async fn hook_wall_time() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let env = env(&s.url, &token);
    let mut quiet = Vec::new();
    let mut news = Vec::new();
    for i in 0..30 {
        let t = Instant::now();
        let (code, out, _) = hook(&env, Some(PROMPT)).await;
        quiet.push(t.elapsed());
        assert_eq!((code, out.as_str()), (0, ""));
        bob.call("post_message", json!({"body": format!("news {i}")}))
            .await;
        let t = Instant::now();
        let (code, out, _) = hook(&env, Some(PROMPT)).await;
        news.push(t.elapsed());
        assert_eq!(code, 0);
        assert!(out.contains(&format!("news {i}")));
    }
    for (what, mut v) in [("nothing new", quiet), ("one new message", news)] {
        v.sort();
        let mean = v.iter().sum::<Duration>() / v.len() as u32;
        println!(
            "hook wall time, {what}: p50 {:?}, mean {mean:?}, max {:?} ({} calls)",
            v[v.len() / 2],
            v.last().unwrap(),
            v.len()
        );
    }
}
