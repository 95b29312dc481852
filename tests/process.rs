//! The real binary as an operator runs it: configuration errors, logs
//! without secrets, clean shutdown on signals with long-polls parked.
//! SQLite only, by design: it runs the binary on a database file of its own
//! and scans that file for raw tokens, so `.ci/run` leaves it out of the
//! PostgreSQL pass (nothing else in it depends on the backend).

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{McpClient, binary, free_port, run_cli, wait_healthy};
use serde_json::json;
use tokio::io::AsyncReadExt;

/// A bad configuration value stops `serve` before it binds, naming every bad
/// variable.
#[tokio::test]
async fn bad_config_names_the_variables() {
    let dir = tempfile::tempdir().unwrap();
    let env = HashMap::from([
        (
            "CHATROOM_DB",
            dir.path().join("c.db").to_string_lossy().into_owned(),
        ),
        ("CHATROOM_LISTEN", "not-an-address".to_owned()),
        ("CHATROOM_RATE_LIMIT_PER_MINUTE", "lots".to_owned()),
    ]);
    let (code, _, err) = run_cli(&["serve"], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("CHATROOM_LISTEN"), "{err}");
    assert!(err.contains("CHATROOM_RATE_LIMIT_PER_MINUTE"), "{err}");
}

/// Served by the binary: SIGTERM stops it within 5 s while a long-poll is
/// parked; no raw token appears in its debug log or in the database files.
#[tokio::test]
async fn serves_stops_on_sigterm_and_leaks_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir
        .path()
        .join("chatroom.db")
        .to_string_lossy()
        .into_owned();
    let port = free_port();
    let env = HashMap::from([("CHATROOM_DB", db.clone())]);
    run_cli(&["admin", "add-room", "lobby"], &env).await;
    let (_, token, _) = run_cli(
        &["admin", "add-token", "--agent", "alice", "--room", "lobby"],
        &env,
    )
    .await;
    let token = token.trim().to_owned();
    let (_, bob_token, _) = run_cli(
        &["admin", "add-token", "--agent", "bob", "--room", "lobby"],
        &env,
    )
    .await;
    let bob_token = bob_token.trim().to_owned();

    let mut child = tokio::process::Command::new(binary())
        .arg("serve")
        .env_clear()
        .env("CHATROOM_DB", &db)
        .env("CHATROOM_LISTEN", format!("127.0.0.1:{port}"))
        .env("CHATROOM_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        wait_healthy(&url, Duration::from_secs(20)).await,
        "server came up"
    );
    let alice = McpClient::new(&url, &token);
    alice.call("post_message", json!({"body": "hello"})).await;
    // Bad tokens and a token in an argument must not be logged either.
    let wrong = McpClient::new(&url, &format!("{token}x"));
    wrong
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    alice
        .call(
            "post_message",
            json!({"body": "see below", "token": bob_token}),
        )
        .await;

    let bob = McpClient::new(&url, &bob_token);
    let parked = tokio::spawn(async move {
        bob.try_call("wait_for_change", json!({"timeout_s": 60}))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let pid = child.id().unwrap() as i32;
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("stopped within 5 s")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let _ = parked.await;

    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .await
        .unwrap();
    assert!(log.contains("chatroom is serving"), "{log}");
    assert!(!log.contains(&token[3..]), "a token reached the log");
    assert!(
        !log.contains(&bob_token[3..]),
        "a token argument reached the log"
    );
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let hay = String::from_utf8_lossy(&bytes);
        assert!(
            !hay.contains(&token[3..]),
            "{} holds alice's raw token",
            path.display()
        );
        assert!(
            !hay.contains(&bob_token[3..]),
            "{} holds bob's raw token",
            path.display()
        );
    }
}

/// `healthcheck` exits 0 against a live server and non-zero when none answers.
#[tokio::test]
async fn healthcheck_command() {
    let s = common::TestServer::start().await;
    let env = HashMap::new();
    let (code, out, _) = run_cli(&["healthcheck", "--url", &s.url], &env).await;
    assert_eq!(code, 0);
    assert!(out.is_empty(), "quiet");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (code, _, _) = run_cli(&["healthcheck", "--url", &dead], &env).await;
    assert_ne!(code, 0);
}
