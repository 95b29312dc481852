//! A server exposed to the internet under hostile load (SPEC §3 "Under
//! hostile load", issue 21): each test reproduces an attack against a real
//! server on a loopback port and asserts the bound that holds it.

mod common;
#[path = "spawned/mod.rs"]
mod spawned;

use std::time::Duration;

use common::TestServer;
use serde_json::{Value, json};
use spawned::Spawned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;

/// How many stalled connections the memory tests open.
const STALLED: usize = 1000;
/// The body each stalled request declares (just under the default limit).
const DECLARED: usize = 1_450_000;
/// How much of it each one sends before it stalls.
const SENT: usize = 128 * 1024;

/// Opens a connection that sends the head of `POST path` declaring
/// [`DECLARED`] body bytes, sends [`SENT`] of them (or what the server takes
/// before it closes) and stalls. Returns the socket, still open.
async fn stalled(addr: &str, path: &str, token: Option<&str>) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.expect("connect");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}\
         Content-Length: {DECLARED}\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.expect("head");
    let _ = sock.write_all(&vec![b' '; SENT]).await;
    sock
}

/// Reads the status of the answer on `sock`, if the server gave one.
async fn status_of(sock: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    loop {
        let n = sock.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).to_string();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((status, text))
}

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// A thousand anonymous requests, each stalled part-way through a large
/// declared body, are answered from their headers (`401`, or `429` once the
/// address is throttled, with `Connection: close`) and cost the server no
/// body memory: resident memory stays within a bound far below what their
/// bodies would take.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_anonymous_bodies_cost_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chat.db").to_string_lossy().to_string();
    let server = Spawned::start(&db, &[("CHATROOM_LOG", "warn")]).await;
    let addr = addr_of(&server.url);
    let before = server.rss();
    let mut socks = Vec::new();
    let opened = futures::future::join_all((0..STALLED).map(|i| {
        let addr = addr.clone();
        let path = if i % 2 == 0 { "/v1/messages" } else { "/mcp" };
        async move { stalled(&addr, path, None).await }
    }))
    .await;
    socks.extend(opened);
    // Each is answered from its headers, or (the unread body still coming)
    // reset by the server; none is left waiting for its body.
    let mut answered = 0;
    for sock in &mut socks {
        if let Some((status, head)) = status_of(sock).await {
            assert!(status == 401 || status == 429, "answered {status}: {head}");
            assert!(
                head.to_ascii_lowercase().contains("connection: close"),
                "an early answer must close: {head}"
            );
            answered += 1;
        }
    }
    let during = server.rss();
    println!(
        "{answered} of {STALLED} stalled anonymous requests answered, RSS {:.1} -> {:.1} MiB",
        before as f64 / MIB as f64,
        during as f64 / MIB as f64
    );
    assert!(answered > 0, "no stalled request was answered");
    // What the bodies sent would take in memory, were they read.
    let bodies = (STALLED * SENT) as u64;
    assert!(
        during < before + 48 * MIB,
        "RSS grew {:.1} MiB under {STALLED} stalled anonymous bodies ({} MiB sent)",
        (during.saturating_sub(before)) as f64 / MIB as f64,
        bodies / MIB
    );
    drop(socks);
    assert!(common::wait_healthy(&server.url, Duration::from_secs(5)).await);
    let after = server.rss();
    assert!(
        after < before + 48 * MIB,
        "RSS after: {after}, before: {before}"
    );
}

/// A thousand authenticated requests stalled mid-body hold at most the
/// budget of body bytes in flight: past it they get `429` with
/// `Retry-After` and `Connection: close` before a byte is read; resident
/// memory stays bounded, and once the sockets close the budget and the
/// memory come back (a full upload is accepted again, RSS falls back).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_bodies_share_one_budget_and_give_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chat.db").to_string_lossy().to_string();
    let server = Spawned::start(&db, &[("CHATROOM_LOG", "warn")]).await;
    let token = server.token("alice", "lobby", &[]).await;
    let addr = addr_of(&server.url);
    let before = server.rss();
    let opened = futures::future::join_all((0..STALLED).map(|_| {
        let (addr, token) = (addr.clone(), token.clone());
        async move { stalled(&addr, "/mcp", Some(&token)).await }
    }))
    .await;
    // The budget is sixteen of the largest bodies, at least 32 MiB: it
    // holds this many of the declared ones; the others are refused at once.
    let limit = (2 * 1_048_576usize).div_ceil(3) * 4 + 64 * 1024;
    let budget = (limit * 16).max(32 * MIB as usize);
    let fits = budget / DECLARED;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = tokio::task::JoinSet::new();
    for mut sock in opened {
        let tx = tx.clone();
        readers.spawn(async move {
            let answer = status_of(&mut sock).await;
            let _ = tx.send(answer);
            // Keep the socket open until the test lets go of it.
            std::future::pending::<()>().await;
        });
    }
    // The others are refused at once: `429`, or reset by the server when
    // the unread body was still coming in.
    let mut read = 0;
    for _ in 0..STALLED - fits {
        if let Some((status, head)) = rx.recv().await.unwrap() {
            assert_eq!(status, 429, "{head}");
            let lower = head.to_ascii_lowercase();
            assert!(lower.contains("retry-after: 1"), "{head}");
            assert!(lower.contains("connection: close"), "{head}");
            read += 1;
        }
    }
    assert!(read > 0, "no refusal was read");
    let during = server.rss();
    println!(
        "{fits} stalled in the budget, RSS {:.1} -> {:.1} MiB",
        before as f64 / MIB as f64,
        during as f64 / MIB as f64
    );
    assert!(
        during < before + 96 * MIB,
        "RSS grew {:.1} MiB under {STALLED} stalled bodies",
        (during.saturating_sub(before)) as f64 / MIB as f64
    );
    // Nothing else is answered while the held bodies are due.
    assert!(rx.try_recv().is_err());
    readers.shutdown().await;
    // The budget comes back as the server notices the closed sockets.
    let mcp = server.mcp(&token);
    // More than what the budget has left while the bodies are held.
    let big = base64_of(600_000);
    let mut accepted = false;
    for _ in 0..100 {
        let (status, v) = mcp
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "put_file", "arguments": {"name": "big.bin", "content_base64": big}}}))
            .await;
        if status == 200 {
            assert_ne!(v["result"]["isError"], json!(true), "{v}");
            accepted = true;
            break;
        }
        assert_eq!(status, 429, "{v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        accepted,
        "the budget did not come back after the sockets closed"
    );
    let after = server.rss();
    println!(
        "RSS after the sockets closed: {:.1} MiB",
        after as f64 / MIB as f64
    );
    assert!(
        after < before + 48 * MIB,
        "RSS after the sockets closed: {:.1} MiB (before {:.1})",
        after as f64 / MIB as f64,
        before as f64 / MIB as f64
    );
}

fn base64_of(n: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(vec![7u8; n])
}

/// The size of a SQLite database on disk, its write-ahead log included.
fn db_bytes(path: &str) -> u64 {
    let size = |p: String| std::fs::metadata(p).map_or(0, |m| m.len());
    size(path.to_owned()) + size(format!("{path}-wal"))
}

/// Twenty `whoami` calls naming a 1.3 MB room, half of them past the rate
/// limit, and `/v1` calls with a long `?room=`, leave the database nearly as
/// it was: the audit row records a room the call was allowed to name,
/// never the argument's text.
#[tokio::test]
async fn huge_room_arguments_do_not_grow_the_audit() {
    let s = TestServer::start_sqlite_with(|c| c.rate_limit_per_minute = 10).await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("whoami", json!({})).await;
    let db = s.db_path.clone();
    let before = db_bytes(&db);
    let huge = "x".repeat(1_300_000);
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..20 {
        let r = alice.try_call("whoami", json!({"room": huge})).await;
        match r.code() {
            "" => ok += 1,
            "rate_limited" => limited += 1,
            other => panic!("whoami answered {other}: {}", r.body),
        }
    }
    assert!(
        ok > 0 && limited > 0,
        "{ok} answered, {limited} rate limited"
    );
    let long = "y".repeat(6_000);
    let status = reqwest::Client::new()
        .get(format!("{}/v1/tasks?room={long}", s.url))
        .bearer_auth(&alice.token)
        .send()
        .await
        .unwrap()
        .status();
    assert!(status == 400 || status == 403 || status == 429, "{status}");
    let dir = s.stop_keeping_files().await;
    let after = db_bytes(&db);
    assert!(
        after < before + 512 * 1024,
        "the database grew {} bytes after huge room arguments",
        after.saturating_sub(before)
    );
    drop(dir);
}

/// Opens `GET /v1/stream` for `token`; the response as it started.
async fn open_stream(url: &str, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{url}/v1/stream"))
        .bearer_auth(token)
        .send()
        .await
        .expect("stream request")
}

/// Reads an SSE response to its end; the text it carried.
async fn read_to_end(mut r: reqwest::Response) -> String {
    let mut text = String::new();
    while let Ok(Some(chunk)) = r.chunk().await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

/// Starts `n` waits of `client`, with nothing new for them yet (the cursor
/// moved first), so they park; [`until_capped`] tells when they have.
async fn park_waits(
    client: &common::McpClient,
    n: usize,
) -> Vec<tokio::task::JoinHandle<common::ToolResult>> {
    client.call("whats_new", json!({})).await;
    (0..n)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move {
                // A probe of `until_capped` may hold the last place for a
                // moment: then this wait is refused, and tries again.
                loop {
                    let r = c
                        .try_call("wait_for_change", json!({"timeout_s": 80}))
                        .await;
                    if r.code() != "rate_limited" {
                        return r;
                    }
                }
            })
        })
        .collect()
}

/// Probes with zero-second waits until the token's cap refuses one, which
/// happens only once the streams and parked waits hold all of it.
async fn until_capped(client: &common::McpClient) {
    for _ in 0..10_000 {
        let r = client
            .try_call("wait_for_change", json!({"timeout_s": 0}))
            .await;

        if r.is_error {
            assert_eq!(r.code(), "rate_limited", "{}", r.body);
            return;
        }
    }
    panic!("the cap never filled");
}

/// A token holds at most `CHATROOM_MAX_STREAMS_PER_TOKEN` (8) open SSE
/// streams and parked waits together: the 9th stream gets HTTP `429` with
/// `Retry-After`, the 9th wait a `rate_limited` tool error; another token
/// is not affected, and a closed stream gives its place back.
#[tokio::test]
async fn ninth_stream_or_wait_of_a_token_gets_429() {
    let s = TestServer::start_with(|c| c.max_streams_per_token = 8).await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let mut streams = Vec::new();
    for _ in 0..4 {
        let r = open_stream(&s.url, &alice.token).await;
        assert_eq!(r.status(), 200);
        streams.push(r);
    }
    let waits = park_waits(&alice, 4).await;
    until_capped(&alice).await;
    let ninth = open_stream(&s.url, &alice.token).await;
    assert_eq!(ninth.status(), 429);
    assert_eq!(ninth.headers()["retry-after"], "1");
    let v: Value = ninth.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limited", "{v}");
    assert_eq!(
        alice
            .refused("wait_for_change", json!({"timeout_s": 0}))
            .await,
        "rate_limited"
    );
    // Another token has its own places.
    assert_eq!(open_stream(&s.url, &bob.token).await.status(), 200);
    // A closed stream gives its place back (noticed as its body is dropped).
    drop(streams.pop());
    let mut reopened = false;
    for _ in 0..10_000 {
        let r = open_stream(&s.url, &alice.token).await;
        if r.status() == 200 {
            reopened = true;
            break;
        }
        assert_eq!(r.status(), 429);
        tokio::task::yield_now().await;
    }
    assert!(reopened, "a closed stream's place never came back");
    // The parked waits still answer normally when something changes.
    bob.call("post_message", json!({"body": "hello"})).await;
    for w in waits {
        let r = w.await.unwrap();
        assert!(!r.is_error, "{}", r.body);
        assert_eq!(r.body["changed"], json!(true));
    }
}

/// A `wait_for_change` parked before `chatroom admin revoke` (another
/// process) ends on its own, without anything landing, as `unauthorized`;
/// one whose token is revoked just before a peer posts answers
/// `unauthorized` too, never the hint of what was posted after the
/// revocation.
#[tokio::test]
async fn a_revoked_parked_wait_ends_with_nothing_new() {
    let s = TestServer::start_with(|c| c.max_streams_per_token = 1).await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let carol = s.agent("carol", "lobby").await;
    let env = s.cli_env();

    let wait = park_waits(&bob, 1).await.pop().unwrap();
    until_capped(&bob).await;
    let revoked_at = std::time::Instant::now();
    let (code, _, err) = run_cli(&["admin", "revoke", "--agent", "bob"], &env).await;
    assert_eq!(code, 0, "{err}");
    let r = tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the revoked wait answered")
        .unwrap();
    println!(
        "the revoked wait ended {:?} after the revocation",
        revoked_at.elapsed()
    );
    assert!(r.is_error, "{}", r.body);
    assert_eq!(r.code(), "unauthorized", "{}", r.body);
    assert!(r.body.get("hint").is_none(), "{}", r.body);
    // Presence drops the revoked agent.
    let agents = alice.call("list_agents", json!({})).await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["agent"].as_str())
        .collect();
    assert!(
        names.contains(&"alice") && !names.contains(&"bob"),
        "{agents}"
    );

    let wait = park_waits(&carol, 1).await.pop().unwrap();
    until_capped(&carol).await;
    let (code, _, err) = run_cli(&["admin", "revoke", "--agent", "carol"], &env).await;
    assert_eq!(code, 0, "{err}");
    alice
        .call("post_message", json!({"body": "after the revocation"}))
        .await;
    let r = tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the revoked wait answered")
        .unwrap();
    assert_eq!(r.code(), "unauthorized", "{}", r.body);
    assert!(r.body.get("hint").is_none(), "{}", r.body);
    assert!(!r.body.to_string().contains("post"), "{}", r.body);
}

use common::run_cli;

/// An SSE stream of a token revoked by `chatroom admin revoke` (another
/// process) ends with an `unauthorized` error event, while a stream of
/// another token stays open.
#[tokio::test]
async fn a_revoked_tokens_stream_ends() {
    let s = TestServer::start().await;
    let _alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let mut stream = open_stream(&s.url, &bob.token).await;
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("event: ready") {
        let chunk = stream.chunk().await.unwrap().expect("ready");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let (code, _, err) = run_cli(&["admin", "revoke", "--agent", "bob"], &s.cli_env()).await;
    assert_eq!(code, 0, "{err}");
    let rest = tokio::time::timeout(Duration::from_secs(60), read_to_end(stream))
        .await
        .expect("the revoked stream ended");
    assert!(rest.contains("event: error"), "{rest}");
    assert!(rest.contains("unauthorized"), "{rest}");
}

/// Posts `whoami` to `/mcp` without a token, with `headers`; the status.
async fn anonymous(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}}}));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status().as_u16()
}

/// With `CHATROOM_TRUST_PROXY=on`, forged forwarded-address headers from a
/// peer outside `CHATROOM_TRUSTED_PROXIES` are ignored: the failed-auth
/// throttle counts the real address (127.0.0.1), whatever each request
/// claims. From a trusted peer, the right-most `X-Forwarded-For` entry that
/// is not a trusted proxy is the client, whatever is forged left of it.
#[tokio::test]
async fn forged_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let s = TestServer::start_with(|c| {
        c.auth_fail_limit = 3;
        c.trust_proxy = true;
        c.trusted_proxies = vec!["10.0.0.0/8".parse().unwrap()];
    })
    .await;
    for (i, forged) in ["1.1.1.1", "2.2.2.2", "3.3.3.3"].iter().enumerate() {
        let headers = [("X-Forwarded-For", *forged), ("CF-Connecting-IP", *forged)];
        assert_eq!(anonymous(&s.url, &headers).await, 401, "failure {i}");
    }
    let headers = [("X-Forwarded-For", "4.4.4.4"), ("X-Real-IP", "5.5.5.5")];
    assert_eq!(
        anonymous(&s.url, &headers).await,
        429,
        "the forged addresses were believed: the real peer was not throttled"
    );

    // Loopback trusted (the default): the chain is walked from the right.
    let s = TestServer::start_with(|c| {
        c.auth_fail_limit = 3;
        c.trust_proxy = true;
    })
    .await;
    for forged in ["6.6.6.6", "7.7.7.7", "8.8.8.8"] {
        let chain = format!("{forged}, 203.0.113.7, 10.1.2.3");
        assert_eq!(anonymous(&s.url, &[("X-Forwarded-For", &chain)]).await, 401);
    }
    let chain = "9.9.9.9, 203.0.113.7, 10.1.2.3";
    assert_eq!(anonymous(&s.url, &[("X-Forwarded-For", chain)]).await, 429);
    let other = "203.0.113.7, 203.0.113.8";
    assert_eq!(
        anonymous(&s.url, &[("X-Forwarded-For", other)]).await,
        401,
        "another client behind the proxy is not throttled"
    );
}

/// A bad `CHATROOM_TRUSTED_PROXIES` stops the start, naming the variable;
/// `CHATROOM_MAX_STREAMS_PER_TOKEN` defaults to 8.
#[test]
fn trusted_proxies_are_validated() {
    use std::collections::HashMap;
    let vars = |k: &str, v: &str| {
        HashMap::from([
            ("CHATROOM_DB".to_owned(), "/tmp/unused.db".to_owned()),
            (k.to_owned(), v.to_owned()),
        ])
    };
    let err = chatroom::config::Config::from_map(&vars(
        "CHATROOM_TRUSTED_PROXIES",
        "10.0.0.0/8, nonsense",
    ))
    .expect_err("refused");
    let text = err.0.join("\n");
    assert!(text.contains("CHATROOM_TRUSTED_PROXIES"), "{text}");
    let ok = chatroom::config::Config::from_map(&vars(
        "CHATROOM_TRUSTED_PROXIES",
        "192.0.2.1, 2001:db8::/32",
    ))
    .expect("valid");
    assert_eq!(ok.trusted_proxies.len(), 2);
    assert_eq!(ok.max_streams_per_token, 8);
    let default = chatroom::config::Config::from_map(&vars("CHATROOM_LOG", "info")).unwrap();
    assert!(
        default
            .trusted_proxies
            .iter()
            .any(|n| n.contains(&"172.20.0.2".parse::<std::net::IpAddr>().unwrap()))
    );
}

/// Reads SSE `board` events from `r` until one satisfies `done`.
async fn board_until(r: &mut reqwest::Response, done: impl Fn(&Value) -> bool) -> Value {
    let mut buf = String::new();
    loop {
        let chunk = r.chunk().await.unwrap().expect("the stream stays open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            if !frame.contains("event: board") {
                continue;
            }
            let data: String = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            let v: Value = serde_json::from_str(&data).unwrap();
            if done(&v) {
                return v;
            }
        }
    }
}

/// The board snapshot shared by a room's streams is never stale: after a
/// burst of changes every one of many streams (of several tokens) ends on
/// the board as it is after the last change.
#[tokio::test]
async fn shared_board_snapshots_follow_every_change() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let mut streams = Vec::new();
    for token in [&alice.token, &bob.token].iter().cycle().take(12) {
        let mut r = open_stream(&s.url, token).await;
        assert_eq!(r.status(), 200);
        board_until(&mut r, |_| true).await;
        streams.push(r);
    }
    let task = alice
        .call(
            "create_task",
            json!({"title": "shared board", "body": "v1"}),
        )
        .await;
    let id = task["created"]["id"].as_i64().expect("task id");
    for n in 2..=5 {
        alice
            .call(
                "update_task",
                json!({"task_id": id, "body": format!("v{n}")}),
            )
            .await;
    }
    let current = |v: &Value| {
        v["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["id"] == json!(id) && t["body"] == "v5"))
    };
    for r in &mut streams {
        let board = tokio::time::timeout(Duration::from_secs(30), board_until(r, current))
            .await
            .expect("a current board");
        assert_eq!(board["room"], "lobby");
    }
}

/// On PostgreSQL, a token revoked through another replica's database
/// handle ends the streams this replica holds for it (each replica's
/// watcher reads the shared token list). Runs with `CHATROOM_TEST_PG_URL`.
#[tokio::test]
async fn a_revocation_on_one_replica_ends_streams_on_another() {
    let a = TestServer::start().await;
    if !a.on_postgres() {
        eprintln!("skipped: set CHATROOM_TEST_PG_URL to run it");
        return;
    }
    let b = a.replica().await;
    let bob = a.agent("bob", "lobby").await;
    let mut stream = open_stream(&b.url, &bob.token).await;
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("event: ready") {
        let chunk = stream.chunk().await.unwrap().expect("ready");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let n = chatroom::domain::tokens::revoke(a.store.as_ref(), "bob")
        .await
        .unwrap();
    assert_eq!(n, 1);
    let rest = tokio::time::timeout(Duration::from_secs(60), read_to_end(stream))
        .await
        .expect("the revoked stream ended");
    assert!(rest.contains("unauthorized"), "{rest}");
}
