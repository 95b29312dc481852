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
/// The body limit of `/mcp` at the default file cap: twice 1 MiB in base64
/// plus 64 KiB.
const MCP_LIMIT: usize = (2 * 1_048_576usize).div_ceil(3) * 4 + 64 * 1024;

/// Connects to `addr` from the loopback address `127.0.0.N` picked by `i`
/// (Linux answers for all of 127/8), so an attack from many addresses can
/// be played from one machine and the per-address caps are not what stops it.
async fn connect_from(i: usize, addr: &str) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    let from = std::net::Ipv4Addr::new(127, 0, (1 + i / 200) as u8, (2 + i % 200) as u8);
    sock.bind((from, 0).into()).expect("bind a loopback source");
    sock.connect(addr.parse().expect("addr"))
        .await
        .expect("connect")
}

/// Opens a connection (from the `i`th loopback address) that sends the head
/// of `POST path` declaring `declared` body bytes of `content_type`, sends
/// `sent` of them (or what the server takes before it closes) and stalls.
/// Returns the socket, still open.
async fn stalled_with(
    i: usize,
    addr: &str,
    path: &str,
    token: Option<&str>,
    content_type: &str,
    declared: usize,
    sent: usize,
) -> TcpStream {
    let mut sock = connect_from(i, addr).await;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n{auth}\
         Accept: application/json, text/event-stream\r\nContent-Length: {declared}\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).await.expect("head");
    let _ = sock.write_all(&vec![b' '; sent]).await;
    sock
}

/// [`stalled_with`] a JSON body of [`DECLARED`] bytes, [`SENT`] of them sent.
async fn stalled(i: usize, addr: &str, path: &str, token: Option<&str>) -> TcpStream {
    stalled_with(i, addr, path, token, "application/json", DECLARED, SENT).await
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

/// Keeps stalled requests alive the way an attacker would: one more body
/// byte on each socket every half second, so none is ever idle, until
/// `stop` is cancelled. Each socket's answer (`None`: closed unanswered) is
/// sent on the channel once the server gives it.
fn hold(
    socks: Vec<TcpStream>,
    stop: tokio_util::sync::CancellationToken,
) -> (
    tokio::task::JoinSet<()>,
    tokio::sync::mpsc::UnboundedReceiver<Option<(u16, String)>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut set = tokio::task::JoinSet::new();
    for sock in socks {
        let (tx, stop) = (tx.clone(), stop.clone());
        set.spawn(async move {
            let (mut read, mut write) = sock.into_split();
            let trickle = async {
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                    if write.write_all(b" ").await.is_err() {
                        break;
                    }
                }
                // Stalled for good from here: the idle gap cuts it.
                std::future::pending::<()>().await;
            };
            let answer = async {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                loop {
                    match read.read(&mut buf).await {
                        Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                    if got.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&got).to_string();
                text.split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .map(|s| (s, text))
            };
            tokio::select! {
                a = answer => { let _ = tx.send(a); }
                _ = trickle => {}
            }
            // Keep the socket open until the test lets go of it.
            std::future::pending::<()>().await;
        });
    }
    (set, rx)
}

/// What an agent gets while an attack runs: a 600 KB `put_file` over
/// `/mcp` and a `POST /v1/messages`; their HTTP statuses.
async fn agent_probe(url: &str, token: &str) -> (u16, u16) {
    let (mcp, v) = common::McpClient::new(url, token)
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "put_file", "arguments":
                {"name": "probe.bin", "content_base64": base64_of(600_000)}}}))
        .await;
    if mcp == 200 {
        assert_ne!(v["result"]["isError"], json!(true), "{v}");
    }
    let rest = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .bearer_auth(token)
        .json(&json!({"body": "still served"}))
        .send()
        .await
        .expect("an answer")
        .status()
        .as_u16();
    (mcp, rest)
}

/// Tallies answers: status → count (`0`: closed unanswered).
fn tally(
    answers: impl IntoIterator<Item = Option<(u16, String)>>,
) -> std::collections::BTreeMap<u16, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for a in answers {
        *counts.entry(a.map_or(0, |(s, _)| s)).or_default() += 1;
    }
    counts
}

/// Requests without a valid token never crowd out agents: 800 anonymous
/// `POST /oauth/token` requests from 100 addresses, each declaring 60,000
/// body bytes, sending half and then one byte every half second, draw on
/// the small budget of requests without a token (bytes charged as they
/// arrive, not reserved from the declared length); an agent's 600 KB
/// upload over `/mcp` and its `/v1` write are served meanwhile. Once the
/// trickle stops, the idle gap cuts every held request (`408`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_sign_in_bodies_leave_agents_served() {
    const SOCKETS: usize = 800;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chat.db").to_string_lossy().to_string();
    let server = Spawned::start(&db, &[("CHATROOM_LOG", "warn")]).await;
    let token = server.token("alice", "lobby", &[]).await;
    let addr = addr_of(&server.url);
    let form = "application/x-www-form-urlencoded";
    let socks =
        futures::future::join_all(
            (0..SOCKETS).map(|i| {
                let addr = addr.clone();
                async move {
                    stalled_with(i % 100, &addr, "/oauth/token", None, form, 60_000, 30_000).await
                }
            }),
        )
        .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (held, mut answers) = hold(socks, stop.clone());
    // The attack runs (every socket trickles) while the agent is served.
    let got = agent_probe(&server.url, &token).await;
    let mut early = Vec::new();
    while let Ok(a) = answers.try_recv() {
        early.push(a);
    }
    let early = tally(early);
    println!(
        "{SOCKETS} stalled sign-in requests: the agent got /mcp {} and /v1 {}; answered \
         while held: {early:?}",
        got.0, got.1
    );
    assert_eq!(
        got,
        (200, 201),
        "the agent was not served during the attack"
    );
    // The ones refused at once were refused for the budget or the cap.
    for status in early.keys() {
        assert!(*status == 429 || *status == 0, "{early:?}");
    }
    let waiting = SOCKETS - early.values().sum::<usize>();
    assert!(waiting > 0, "no sign-in request was held: {early:?}");
    // Once they stop sending, the idle gap cuts every held request.
    stop.cancel();
    let mut late = Vec::new();
    for _ in 0..waiting {
        late.push(answers.recv().await.unwrap());
    }
    let late = tally(late);
    println!("after the trickle stopped: {late:?}");
    assert!(late.keys().all(|s| *s == 408 || *s == 0), "{late:?}");
    assert!(late.contains_key(&408), "{late:?}");
    drop(held);
}

/// One token's stalled bodies take at most its share of the agents'
/// budget and its `CHATROOM_MAX_IN_FLIGHT` places: a read-only token with
/// forty `/mcp` requests declaring the largest body, each sending 512 KiB
/// and trickling, holds a quarter of the budget at most (the rest get
/// `429`), while another agent's upload and write are served; resident
/// memory stays bounded and comes back when they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tokens_stalled_bodies_take_only_its_share() {
    const SOCKETS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chat.db").to_string_lossy().to_string();
    let server = Spawned::start(&db, &[("CHATROOM_LOG", "warn")]).await;
    let reader = server.token("viewer", "lobby", &["--readonly"]).await;
    let bob = server.token("bob", "lobby", &[]).await;
    let addr = addr_of(&server.url);
    let before = server.rss();
    let socks = futures::future::join_all((0..SOCKETS).map(|i| {
        let (addr, reader) = (addr.clone(), reader.clone());
        async move {
            let json = "application/json";
            stalled_with(i, &addr, "/mcp", Some(&reader), json, MCP_LIMIT, 512 * 1024).await
        }
    }))
    .await;
    let stop = tokio_util::sync::CancellationToken::new();
    let (held, mut answers) = hold(socks, stop.clone());
    let got = agent_probe(&server.url, &bob).await;
    let during = server.rss();
    let mut early = Vec::new();
    while let Ok(a) = answers.try_recv() {
        early.push(a);
    }
    let early = tally(early);
    println!(
        "{SOCKETS} stalled /mcp bodies of one read-only token: another agent got /mcp {} and \
         /v1 {}; the token's answered while held: {early:?}; RSS {:.1} -> {:.1} MiB",
        got.0,
        got.1,
        before as f64 / MIB as f64,
        during as f64 / MIB as f64
    );
    assert_eq!(got, (200, 201), "another agent was not served");
    assert!(early.keys().all(|s| *s == 429 || *s == 0), "{early:?}");
    assert!(early.get(&429).is_some_and(|n| *n > 0), "{early:?}");
    assert!(
        during < before + 96 * MIB,
        "RSS grew {:.1} MiB",
        (during.saturating_sub(before)) as f64 / MIB as f64
    );
    stop.cancel();
    drop(answers);
    drop(held);
    // Their places come back: the token is served again.
    let mut served = false;
    for _ in 0..200 {
        let (status, _) = server
            .mcp(&reader)
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "whoami", "arguments": {}}}))
            .await;
        if status == 200 {
            served = true;
            break;
        }
        assert_eq!(status, 429);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(served, "the token's places did not come back");
    let after = server.rss();
    println!(
        "RSS after they closed: {:.1} MiB",
        after as f64 / MIB as f64
    );
    assert!(
        after < before + 48 * MIB,
        "RSS after: {after}, before: {before}"
    );
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
    let mut socks = futures::future::join_all((0..STALLED).map(|i| {
        let addr = addr.clone();
        let path = if i % 2 == 0 { "/v1/messages" } else { "/mcp" };
        async move { stalled(i, &addr, path, None).await }
    }))
    .await;
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

/// Endless request heads cost at most 32 KiB each and their memory comes
/// back: 1,500 anonymous sockets from 100 addresses each send up to 400 KB
/// of an unfinished head; each is answered `431` and closed once its head
/// passes 32 KiB, an agent is served meanwhile, and resident memory falls
/// back once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endless_request_heads_are_capped_and_their_memory_returns() {
    const SOCKETS: usize = 1500;
    const HEAD: usize = 400 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("chat.db").to_string_lossy().to_string();
    let server = Spawned::start(&db, &[("CHATROOM_LOG", "warn")]).await;
    let token = server.token("alice", "lobby", &[]).await;
    let addr = addr_of(&server.url);
    let before = server.rss();
    let socks = futures::future::join_all((0..SOCKETS).map(|i| {
        let addr = addr.clone();
        async move {
            let mut sock = connect_from(i % 100, &addr).await;
            let start = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nX-Pad: ");
            let _ = sock.write_all(start.as_bytes()).await;
            let pad = vec![b'a'; 16 * 1024];
            let mut sent = 0;
            while sent < HEAD {
                if sock.write_all(&pad).await.is_err() {
                    break;
                }
                sent += pad.len();
            }
            (sock, sent)
        }
    }))
    .await;
    let during = server.rss();
    let me = server.mcp(&token).call("whoami", json!({})).await;
    assert_eq!(me["agent"], "alice");
    let cut = socks.iter().filter(|(_, sent)| *sent < HEAD).count();
    let answers = tally(
        futures::future::join_all(
            socks
                .into_iter()
                .map(|(mut sock, _)| async move { status_of(&mut sock).await }),
        )
        .await,
    );
    println!(
        "{SOCKETS} endless heads of up to {} KiB: {cut} cut while sending, answers {answers:?}; \
         the agent was served; RSS {:.1} -> {:.1} MiB",
        HEAD / 1024,
        before as f64 / MIB as f64,
        during as f64 / MIB as f64
    );
    // Every socket is closed now; the memory comes back.
    let mut after = server.rss();
    for _ in 0..50 {
        assert!(common::wait_healthy(&server.url, Duration::from_secs(5)).await);
        after = server.rss();
        if after < before + 16 * MIB {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "RSS after they closed: {:.1} MiB",
        after as f64 / MIB as f64
    );
    assert!(
        during < before + 128 * MIB,
        "RSS grew {:.1} MiB under {SOCKETS} endless heads",
        (during.saturating_sub(before)) as f64 / MIB as f64
    );
    assert!(answers.keys().all(|s| *s == 431 || *s == 0), "{answers:?}");
    assert!(
        after < before + 16 * MIB,
        "RSS after the heads closed: {:.1} MiB (before {:.1})",
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

/// Reads `stream` into `seen` until it holds `text`.
async fn read_until(stream: &mut reqwest::Response, seen: &mut String, text: &str) {
    while !seen.contains(text) {
        let chunk = stream.chunk().await.unwrap().expect(text);
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
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
    read_until(&mut stream, &mut seen, "event: ready").await;
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
    read_until(&mut stream, &mut seen, "event: ready").await;
    let n = a.core.revoke_agent("bob").await.unwrap();
    assert_eq!(n, 1);
    let rest = tokio::time::timeout(Duration::from_secs(60), read_to_end(stream))
        .await
        .expect("the revoked stream ended");
    assert!(rest.contains("unauthorized"), "{rest}");
}

/// The `401` says which of three things is wrong — no token, a value that
/// is no token, a token not accepted — and an unknown token and a revoked
/// one get the same words, so no answer tells whether a token existed.
#[tokio::test]
async fn three_kinds_of_401_are_told_apart() {
    let s = TestServer::start().await;
    let bob = s.agent("bob", "lobby").await;
    s.core.revoke_agent("bob").await.unwrap();
    let message = |auth: Option<String>| {
        let url = s.url.clone();
        async move {
            let mut req = reqwest::Client::new().get(format!("{url}/v1/tasks"));
            if let Some(a) = auth {
                req = req.header("Authorization", a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 401);
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "unauthorized", "{v}");
            v["error"]["message"].as_str().unwrap().to_owned()
        }
    };
    let missing = message(None).await;
    let malformed = message(Some("Bearer Bearer cr_x y".into())).await;
    let pasted = message(Some("Bearer 'cr_abc'".into())).await;
    let unknown = message(Some(format!("Bearer cr_{}", "A".repeat(43)))).await;
    let revoked = message(Some(format!("Bearer {}", bob.token))).await;
    assert!(missing.contains("needs a bearer token"), "{missing}");
    assert!(
        malformed.contains("does not hold a chatroom token"),
        "{malformed}"
    );
    assert_eq!(malformed, pasted);
    assert!(unknown.contains("not accepted"), "{unknown}");
    assert_eq!(
        unknown, revoked,
        "a revoked token is told apart from an unknown one"
    );
    assert_ne!(missing, malformed);
    assert_ne!(malformed, unknown);
}

/// A revoked token's open stream delivers nothing written after the
/// revocation: a burst of messages posted right after `revoke` commits
/// never reaches it (each delivery waits for a look at the token list that
/// began after what it delivers was written). On SQLite, and on PostgreSQL
/// with `CHATROOM_TEST_PG_URL`.
#[tokio::test]
async fn a_revoked_stream_delivers_nothing_written_after() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let mut stream = open_stream(&s.url, &bob.token).await;
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, "event: ready").await;
    alice
        .call("post_message", json!({"body": "before the revocation"}))
        .await;
    read_until(&mut stream, &mut seen, "before the revocation").await;
    s.core.revoke_agent("bob").await.unwrap();
    for i in 0..30 {
        alice
            .call(
                "post_message",
                json!({"body": format!("after the revocation {i}")}),
            )
            .await;
    }
    let rest = tokio::time::timeout(Duration::from_secs(60), read_to_end(stream))
        .await
        .expect("the revoked stream ended");
    let slipped = rest.matches("after the revocation").count();
    println!("events delivered after the revocation: {slipped} (of 30 written)");
    assert_eq!(slipped, 0, "{rest}");
    assert!(rest.contains("unauthorized"), "{rest}");
}

/// Names that pass for others are refused where names enter: a bidi
/// override or a zero-width character in an agent name (minting) or a file
/// name (`put_file`, `POST /v1/files`), a Latin name with a Cyrillic letter
/// in it, and an all-Cyrillic look-alike of a member of the room it joins
/// (while the same name in a room without that member is fine).
#[tokio::test]
async fn look_alike_and_bidi_names_are_refused() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    s.room("elsewhere").await;
    let mint = |agent: &str, room: &str| {
        s.core.mint_token(common::Grant {
            agent: agent.into(),
            room: room.into(),
            ..Default::default()
        })
    };
    for bad in ["ali\u{202E}ecr", "bob\u{200B}", "\u{0430}lice"] {
        let e = mint(bad, "lobby").await.expect_err(bad);
        assert_eq!(e.code(), "invalid_argument", "{bad:?}: {e}");
    }
    // All Cyrillic, and the skeleton of `alice`.
    let twin = "\u{0430}\u{04CF}\u{0456}\u{0441}\u{0435}";
    let e = mint(twin, "lobby")
        .await
        .expect_err("a look-alike of alice");
    assert_eq!(e.code(), "conflict", "{e}");
    assert!(e.to_string().contains("looks like \"alice\""), "{e}");
    mint(twin, "elsewhere").await.expect("no alice there");
    // The same rule through the admin CLI.
    let (code, _, err) = run_cli(
        &["admin", "add-token", "--agent", twin, "--room", "lobby"],
        &s.cli_env(),
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("looks like"), "{err}");
    // File names.
    use base64::Engine;
    let content = base64::engine::general_purpose::STANDARD.encode(b"hi");
    for bad in ["invoice\u{202E}fdp.exe", "a\u{2066}b.txt", "x\u{200F}.md"] {
        assert_eq!(
            alice
                .refused("put_file", json!({"name": bad, "content_base64": content}))
                .await,
            "invalid_argument",
            "{bad:?}"
        );
    }
    let r = reqwest::Client::new()
        .post(format!("{}/v1/files?name=evil%E2%80%AEtxt.exe", s.url))
        .bearer_auth(&alice.token)
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}
