//! `chatroom watch`, the real binary following a real server's stream.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::TestServer;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout};

const T: Duration = Duration::from_secs(15);

struct Watcher {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Lines<BufReader<ChildStderr>>,
}

/// Spawns `chatroom watch ARGS` and waits until it says it is connected.
async fn watch(url: &str, token: &str, args: &[&str]) -> Watcher {
    let mut child = tokio::process::Command::new(common::binary())
        .arg("watch")
        .args(args)
        .env_clear()
        .env("CHATROOM_URL", url)
        .env("CHATROOM_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn chatroom watch");
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(T, stderr.next_line())
        .await
        .expect("watch connects in time")
        .unwrap()
        .expect("a line on stderr");
    assert!(line.contains("connected to room lobby"), "{line}");
    Watcher {
        child,
        stdout,
        stderr,
    }
}

/// In the default `mentions` mode a mention of the watcher's agent gives
/// exactly one line; other talk and the watcher's own posts give none.
#[tokio::test]
async fn a_mention_gives_one_line() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let alice = s.mcp(&token);
    let mut w = watch(&s.url, &token, &[]).await;

    bob.call("post_message", json!({"body": "just chatting"}))
        .await;
    alice
        .call("post_message", json!({"body": "me, myself @alice"}))
        .await;
    bob.call(
        "post_message",
        json!({"body": "@alice can you look at the build?"}),
    )
    .await;
    let line = tokio::time::timeout(T, w.stdout.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .expect("watch still running");
    assert!(line.starts_with("chatroom[lobby] "), "{line}");
    assert!(line.contains("bob message #"), "{line}");
    assert!(line.contains("can you look at the build?"), "{line}");
    assert!(line.contains("mentions you"), "{line}");

    // Nothing else is pending: a later mention is the very next line.
    bob.call("post_message", json!({"body": "ping @ALICE"}))
        .await;
    let line = tokio::time::timeout(T, w.stdout.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .unwrap();
    assert!(line.contains("ping @ALICE"), "{line}");
    w.child.kill().await.unwrap();
}

/// `board` mode prints peers' task changes, one line each.
#[tokio::test]
async fn board_mode_prints_task_changes() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut w = watch(&s.url, &token, &["--mode", "board"]).await;
    bob.call("post_message", json!({"body": "not a task"}))
        .await;
    bob.call(
        "create_task",
        json!({"title": "ship it", "priority": "high"}),
    )
    .await;
    let line = tokio::time::timeout(T, w.stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains("bob created task #"), "{line}");
    assert!(line.contains("\"ship it\""), "{line}");
    assert!(line.contains("priority high"), "{line}");
    w.child.kill().await.unwrap();
}

/// A rejected token stops the watcher with a clear message and a non-zero exit.
#[tokio::test]
async fn a_rejected_token_stops_it() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let out = tokio::time::timeout(
        T,
        tokio::process::Command::new(common::binary())
            .arg("watch")
            .env_clear()
            .env("CHATROOM_URL", &s.url)
            .env("CHATROOM_TOKEN", "cr_nope")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("watch exits in time")
    .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("token was refused"), "{err}");
    assert!(err.contains("401"), "{err}");
}

/// A watcher whose token is revoked by `chatroom admin revoke` (another
/// process) stops, as it does for a refused token: the stream ends with the
/// revocation and the watcher exits with an error naming it.
#[tokio::test]
async fn a_revoked_token_stops_it() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut w = watch(&s.url, &token, &["--mode", "all"]).await;
    let (code, _, err) =
        common::run_cli(&["admin", "revoke", "--agent", "alice"], &s.cli_env()).await;
    assert_eq!(code, 0, "{err}");
    let status = tokio::time::timeout(Duration::from_secs(60), w.child.wait())
        .await
        .expect("watch exits after the revocation")
        .unwrap();
    assert!(!status.success());
    let mut err = String::new();
    while let Ok(Some(line)) = w.stderr.next_line().await {
        err.push_str(&line);
        err.push('\n');
    }
    assert!(err.contains("revoked"), "{err}");
}

/// When the server restarts the watcher reconnects and carries on, without
/// missing what happened meanwhile.
#[tokio::test]
async fn reconnects_after_the_server_restarts() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut w = watch(&s.url, &token, &["--mode", "all"]).await;
    bob.call("post_message", json!({"body": "before"})).await;
    let line = tokio::time::timeout(T, w.stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains("before"), "{line}");

    // Same database, same port: a restart.
    let addr = s.addr;
    let db = s.db_path.clone();
    let database_url = s.on_postgres().then(|| s.db_url.clone());
    let store = s.store.clone();
    s.shutdown.cancel();
    let line = tokio::time::timeout(T, w.stderr.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.contains("reconnecting"), "{line}");
    // Written while the server is down: the watcher resumes after its last event.
    let (_, event) = store
        .post_message(
            "lobby",
            chatroom::domain::store::NewMessage {
                body: "while you were away",
                reply_to: None,
            },
            chatroom::domain::chat::message_record(
                chatroom::domain::model::Record::new(
                    "bob",
                    Some("test"),
                    chatroom::clock::now_ms(),
                ),
                "while you were away",
                None,
            ),
        )
        .await
        .unwrap();
    assert!(event.id > 0);
    let mut config = chatroom::config::Config::for_tests(&db);
    config.rate_limit_per_minute = 0;
    config.database_url = database_url;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(chatroom::server::launch(config, listener, shutdown.clone()));
    let line = tokio::time::timeout(Duration::from_secs(20), w.stdout.next_line())
        .await
        .expect("the watcher reconnects")
        .unwrap()
        .unwrap();
    assert!(line.contains("while you were away"), "{line}");
    w.child.kill().await.unwrap();
    shutdown.cancel();
    let _ = server.await;
}

/// After a restore from a backup the restored database numbers new events
/// below the watcher's position: the stream's `reset` sets the watcher back,
/// it says so on stderr, and what is written after the restore is printed.
#[tokio::test]
async fn carries_on_after_a_restore_from_a_backup() {
    let s = TestServer::start_sqlite().await;
    let bob = s.agent("bob", "lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut w = watch(&s.url, &token, &["--mode", "all"]).await;
    bob.call("post_message", json!({"body": "before the backup"}))
        .await;
    let line = next_line(&mut w.stdout).await;
    assert!(line.contains("before the backup"), "{line}");
    let (_keep, backup) = s.backup().await;
    for body in ["lost one", "lost two @alice", "lost three"] {
        bob.call("post_message", json!({"body": body})).await;
        let line = next_line(&mut w.stdout).await;
        assert!(line.contains(body), "{line}");
    }

    let s = s.restore(&backup).await;
    let note = loop {
        let line = next_line(&mut w.stderr).await;
        if line.contains("history is behind") {
            break line;
        }
    };
    assert!(note.contains("restored from a backup"), "{note}");
    assert!(note.contains("resuming after event"), "{note}");
    // The token of the backup still works; the new event's id is one the
    // watcher had seen before the restore.
    let bob = s.mcp(&bob.token);
    bob.call("post_message", json!({"body": "after the restore @alice"}))
        .await;
    let line = next_line(&mut w.stdout).await;
    assert!(line.contains("after the restore @alice"), "{line}");
    w.child.kill().await.unwrap();
    s.stop().await;
}

async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut Lines<R>) -> String {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line in time")
        .unwrap()
        .expect("watch still running")
}
