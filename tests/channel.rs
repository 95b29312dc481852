//! `chatroom channel` driven as Claude Code drives it: raw JSON-RPC over
//! the real binary's stdin/stdout, against a real server.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::TestServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const T: Duration = Duration::from_secs(20);

struct Channel {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Channel {
    async fn spawn(url: &str, token: &str, extra: &[(&str, &str)]) -> Channel {
        let mut child = tokio::process::Command::new(common::binary())
            .arg("channel")
            .env_clear()
            .env("CHATROOM_URL", url)
            .env("CHATROOM_TOKEN", token)
            .envs(extra.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chatroom channel");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Channel {
            child,
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, v: Value) {
        self.stdin
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(T, self.stdout.next_line())
            .await
            .expect("a message in time")
            .unwrap()
            .expect("the channel still runs");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC: {line}: {e}"))
    }

    /// The handshake as Claude Code does it, offering `offered`.
    async fn handshake(&mut self, offered: &str) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": offered,
            "capabilities": {"roots": {"listChanged": true}, "elicitation": {}},
            "clientInfo": {"name": "claude-code", "version": "2.1.332"}}}),
        )
        .await;
        let answer = self.recv().await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        answer
    }

    /// The next channel notification.
    async fn notification(&mut self) -> Value {
        loop {
            let m = self.recv().await;
            if m["method"] == "notifications/claude/channel" {
                return m["params"].clone();
            }
        }
    }

    /// Whether the channel writes nothing more before a ping is answered.
    async fn quiet(&mut self) -> bool {
        self.send(json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
            .await;
        let m = self.recv().await;
        m["id"] == 99
    }
}

/// Posts a message and waits until the server's stream delivered it to
/// every follower (a later post then surely comes after it).
async fn say(c: &common::McpClient, body: &str) -> Value {
    c.call("post_message", json!({"body": body})).await
}

/// The handshake pins 2025-11-25 whatever is offered, declares the
/// channel capability (never the permission relay) and instructions that
/// call the content untrusted and send replies through post_message.
#[tokio::test]
async fn the_handshake() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    for offered in ["2026-07-28", "2025-06-18", "2025-11-25"] {
        let mut ch = Channel::spawn(&s.url, &token, &[]).await;
        let r = ch.handshake(offered).await;
        let result = &r["result"];
        assert_eq!(result["protocolVersion"], "2025-11-25", "{offered}: {r}");
        assert_eq!(
            result["capabilities"]["experimental"]["claude/channel"],
            json!({})
        );
        assert!(
            result["capabilities"]["experimental"]
                .get("claude/channel/permission")
                .is_none()
        );
        let instructions = result["instructions"].as_str().unwrap();
        assert!(instructions.contains("untrusted"), "{instructions}");
        assert!(instructions.contains("post_message"), "{instructions}");
        assert!(ch.quiet().await);
    }
}

/// A mention arrives as one notification with the meta keys; the agent's
/// own words and plain talk push nothing.
#[tokio::test]
async fn a_mention_arrives_with_its_meta() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let alice = s.mcp(&token);
    let mut ch = Channel::spawn(&s.url, &token, &[]).await;
    ch.handshake("2025-11-25").await;
    common::wait_for_push(&s.url, &token, "alice").await;

    say(&alice, "talking to myself @alice").await;
    say(&bob, "just chatting").await;
    let posted = say(&bob, "@alice can you\nlook at the build?").await;
    let n = ch.notification().await;
    let meta = &n["meta"];
    assert_eq!(meta["room"], "lobby");
    assert_eq!(meta["kind"], "message");
    assert_eq!(meta["actor"], "bob");
    assert_eq!(meta["reason"], "mention");
    assert_eq!(
        meta["message_id"],
        posted["message_id"].as_i64().unwrap().to_string()
    );
    assert!(meta["event_id"].as_str().unwrap().parse::<i64>().is_ok());
    for (k, v) in meta.as_object().unwrap() {
        assert!(
            k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{k}"
        );
        assert!(v.is_string(), "{k}: {v}");
    }
    let content = n["content"].as_str().unwrap();
    assert!(content.contains("look at the build"), "{content}");
    assert!(content.contains("untrusted"), "{content}");
    assert!(!content.contains('\n'));
    assert!(
        ch.quiet().await,
        "nothing for alice's own words or plain talk"
    );
}

/// Across a server restart the channel reconnects after the last event it
/// saw: nothing twice, and what came after the restart arrives.
#[tokio::test]
async fn no_duplicates_across_a_restart() {
    let s = TestServer::start_sqlite().await;
    s.room("lobby").await;
    let bob_token = s.token("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let bob = s.mcp(&bob_token);
    let mut ch = Channel::spawn(&s.url, &token, &[]).await;
    ch.handshake("2025-11-25").await;
    common::wait_for_push(&s.url, &token, "alice").await;
    let a = say(&bob, "first @alice").await;
    let n = ch.notification().await;
    assert_eq!(
        n["meta"]["message_id"],
        a["message_id"].as_i64().unwrap().to_string()
    );

    let (backup_dir, backup) = s.backup().await;
    let s = s.restore(&backup).await;
    let bob = s.mcp(&bob_token);
    let b = say(&bob, "second @alice, after the restart").await;
    let n = ch.notification().await;
    assert_eq!(
        n["meta"]["message_id"],
        b["message_id"].as_i64().unwrap().to_string(),
        "the first is not pushed again: {n}"
    );
    drop(backup_dir);
}

/// A burst right after a notification goes out as one notification.
#[tokio::test]
async fn bursts_coalesce() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut ch = Channel::spawn(&s.url, &token, &[]).await;
    ch.handshake("2025-11-25").await;
    common::wait_for_push(&s.url, &token, "alice").await;
    say(&bob, "one @alice").await;
    let first = ch.notification().await;
    assert_eq!(first["meta"]["count"], "1");
    // Posted right after the first went out: within its 2 s window.
    say(&bob, "two @alice").await;
    say(&bob, "three @alice").await;
    let next = ch.notification().await;
    assert_eq!(next["meta"]["count"], "2", "{next}");
    assert!(next["content"].as_str().unwrap().contains("2 events"));
}

/// Past CHATROOM_PUSH_BURST notifications one notice says pushes pause
/// and to call whats_new; then nothing.
#[tokio::test]
async fn the_loop_guard_pauses() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut ch = Channel::spawn(&s.url, &token, &[("CHATROOM_PUSH_BURST", "2")]).await;
    ch.handshake("2025-11-25").await;
    common::wait_for_push(&s.url, &token, "alice").await;
    let mut notes = Vec::new();
    for i in 0..3 {
        say(&bob, &format!("{i} @alice")).await;
        notes.push(ch.notification().await);
    }
    let notice = &notes[2];
    assert_eq!(notice["meta"]["kind"], "push_paused", "{notice}");
    let text = notice["content"].as_str().unwrap();
    assert!(
        text.contains("pause for 10 minutes") && text.contains("whats_new"),
        "{text}"
    );
    say(&bob, "after @alice").await;
    assert!(ch.quiet().await, "paused");
}

/// A refused token: a clear line on stderr and exit status 1.
#[tokio::test]
async fn a_bad_token_exits_1() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let mut ch = Channel::spawn(&s.url, "cr_not-a-real-token-at-all-xxxxxxxxxxxxxxxx", &[]).await;
    let status = tokio::time::timeout(T, ch.child.wait())
        .await
        .expect("exits in time")
        .unwrap();
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(ch.child.stderr.as_mut().unwrap(), &mut err)
        .await
        .unwrap();
    assert!(err.contains("token was refused"), "{err}");
}
