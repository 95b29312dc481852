//! Request limits against slow and hostile clients: an oversized body is
//! refused before it is read whole, a slow head or body cannot hold a
//! connection forever, long-polls are not cut by those bounds, and a flood
//! of bad tokens from many addresses leaves the server's memory bounded.

mod common;
#[path = "spawned/mod.rs"]
mod spawned;

use std::time::Duration;

use common::TestServer;
use serde_json::json;
use spawned::Spawned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads what the server sends until it closes the connection or `limit`
/// passes; returns the text and whether the connection was closed.
async fn read_until_close(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads until a whole response head has arrived (or `limit` passes).
async fn read_head(stream: &mut TcpStream, limit: Duration) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn post_head(addr: &str, token: &str, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n{extra}\r\n"
    )
}

/// A declared Content-Length far over the limit gets `413` while the body is
/// still being trickled in: the server does not wait to read it.
#[tokio::test]
async fn oversized_declared_body_is_refused_early() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = post_head(
        &s.addr.to_string(),
        &alice.token,
        "Content-Length: 1000000000\r\n",
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // A little of the body, then nothing more: the answer must not wait for the rest.
    stream.write_all(&[b' '; 1024]).await.unwrap();
    let answer = read_head(&mut stream, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    // And nothing was written.
    let read = alice.call("read_messages", json!({})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 0);
}

/// A chunked body with no declared length is refused with `413` as soon as
/// it grows past the limit, before it ends.
#[tokio::test]
async fn oversized_chunked_body_is_refused_when_it_crosses_the_limit() {
    let s = TestServer::start_with(|c| c.max_file_bytes = 3 * 1024).await;
    let alice = s.agent("alice", "lobby").await;
    // The limit is twice the cap in base64 plus 64 KiB of room for the rest.
    let limit = 8 * 1024 + 64 * 1024;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = post_head(
        &s.addr.to_string(),
        &alice.token,
        "Transfer-Encoding: chunked\r\n",
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'x'; 16 * 1024];
    let mut sent = 0;
    // Never the terminating chunk: the server must answer on its own.
    while sent <= limit + chunk.len() {
        let framed = [
            format!("{:x}\r\n", chunk.len()).into_bytes(),
            chunk.clone(),
            b"\r\n".to_vec(),
        ]
        .concat();
        if stream.write_all(&framed).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let answer = read_head(&mut stream, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
}

/// A client that never finishes its request head is disconnected once the
/// header read timeout passes; the server stays healthy.
#[tokio::test]
async fn slow_request_head_is_cut_off() {
    let s = TestServer::start_with(|c| c.header_read_timeout = Duration::from_millis(500)).await;
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    stream
        .write_all(format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", s.addr).as_bytes())
        .await
        .unwrap();
    // The rest of the head never comes.
    let (_, closed) = read_until_close(&mut stream, Duration::from_secs(15)).await;
    assert!(closed, "the server kept a half-sent request head open");
    assert!(common::wait_healthy(&s.url, Duration::from_secs(5)).await);
}

/// A body trickled slower than the body read timeout allows gets `408` and
/// writes nothing.
#[tokio::test]
async fn slow_request_body_gets_408() {
    let s = TestServer::start_with(|c| c.body_read_timeout = Duration::from_millis(500)).await;
    let alice = s.agent("alice", "lobby").await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "post_message", "arguments": {"body": "slow"}}})
    .to_string();
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = post_head(
        &s.addr.to_string(),
        &alice.token,
        &format!("Content-Length: {}\r\n", body.len()),
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Half the body, and the rest never.
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let answer = read_head(&mut stream, Duration::from_secs(15)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    let read = alice.call("read_messages", json!({})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 0);
}

/// The request bounds do not cut answers that take long: a `wait_for_change`
/// long-poll outlives both timeouts and ends on its own terms.
#[tokio::test]
async fn long_poll_outlives_the_request_timeouts() {
    let s = TestServer::start_with(|c| {
        c.header_read_timeout = Duration::from_millis(300);
        c.body_read_timeout = Duration::from_millis(300);
    })
    .await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("whats_new", json!({})).await;
    let waited = alice.call("wait_for_change", json!({"timeout_s": 2})).await;
    assert_eq!(waited["changed"], false, "{waited}");
    assert!(waited["waited_s"].as_f64().unwrap() >= 1.9, "{waited}");
    // The same keep-alive client can still be served afterwards.
    alice
        .call("post_message", json!({"body": "still here"}))
        .await;
}

/// Thousands of bad tokens from thousands of forwarded addresses (with
/// `CHATROOM_TRUST_PROXY=on`) are refused, and the server's memory stays
/// bounded: the throttle forgets old addresses instead of growing.
#[tokio::test]
async fn bad_token_flood_from_many_addresses_keeps_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db").to_string_lossy().into_owned();
    let server = Spawned::start(
        &db,
        &[
            ("CHATROOM_TRUST_PROXY", "on"),
            ("CHATROOM_AUTH_FAIL_LIMIT", "3"),
            ("CHATROOM_LOG", "warn"),
        ],
    )
    .await;
    let good = server.token("alice", "lobby", &[]).await;
    let total: u32 = std::env::var("CHATROOM_FLOOD_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6_000);
    let http = reqwest::Client::new();
    let flood = |from: u32, to: u32| {
        let http = http.clone();
        let url = format!("{}/mcp", server.url);
        async move {
            let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
            let mut i = from;
            while i < to {
                let batch: Vec<_> = (i..to.min(i + 32))
                    .map(|n| {
                        let ip = std::net::Ipv4Addr::from(0x0a00_0000u32 + n);
                        http.post(&url)
                            .header("Authorization", format!("Bearer cr_bad{n:08}"))
                            .header("X-Forwarded-For", ip.to_string())
                            .header("Accept", "application/json, text/event-stream")
                            .header("Content-Type", "application/json")
                            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
                            .send()
                    })
                    .collect();
                for r in futures::future::join_all(batch).await {
                    *statuses
                        .entry(r.expect("an answer").status().as_u16())
                        .or_default() += 1;
                }
                i = to.min(i + 32);
            }
            statuses
        }
    };
    // Warm up the allocator and the pools, then measure.
    flood(0, 1_000).await;
    let before = server.rss();
    let statuses = flood(1_000, total).await;
    let after = server.rss();
    println!(
        "bad-token flood: {} requests from as many addresses, RSS {} KiB -> {} KiB, statuses {statuses:?}",
        total - 1_000,
        before / 1024,
        after / 1024
    );
    assert_eq!(statuses.keys().copied().collect::<Vec<_>>(), vec![401]);
    assert!(
        after < before + 32 * 1024 * 1024,
        "RSS grew by {} KiB over the flood",
        (after - before) / 1024
    );
    // The throttle still works for one address, and a good token is served.
    let mut last = 0;
    for _ in 0..5 {
        last = http
            .post(format!("{}/mcp", server.url))
            .header("Authorization", "Bearer cr_nope")
            .header("X-Forwarded-For", "192.0.2.1")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
    }
    assert_eq!(last, 429);
    let me = server.mcp(&good).call("whoami", json!({})).await;
    assert_eq!(me["agent"], "alice");
}

/// A body that stops arriving is cut after the idle gap (`408`, saying it
/// stalled), long before the whole-body deadline, and writes nothing.
#[tokio::test]
async fn a_stalled_body_is_cut_after_the_idle_gap() {
    let s = TestServer::start_with(|c| {
        c.body_idle_timeout = Duration::from_millis(300);
        c.body_read_timeout = Duration::from_secs(3600);
    })
    .await;
    let alice = s.agent("alice", "lobby").await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "post_message", "arguments": {"body": "stalled"}}})
    .to_string();
    let mut stream = TcpStream::connect(s.addr).await.unwrap();
    let head = post_head(
        &s.addr.to_string(),
        &alice.token,
        &format!("Content-Length: {}\r\n", body.len()),
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let (answer, _) = read_until_close(&mut stream, Duration::from_secs(60)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("stalled"), "{answer}");
    let read = alice.call("read_messages", json!({})).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 0);
}

/// Sends `GET /healthz` on a connection from `from`; whether it was
/// answered `200` (a connection closed unread gives no answer).
async fn healthz_from(from: [u8; 4], addr: std::net::SocketAddr) -> bool {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind((std::net::Ipv4Addr::from(from), 0).into())
        .unwrap();
    let Ok(mut stream) = sock.connect(addr).await else {
        return false;
    };
    let req = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    read_head(&mut stream, Duration::from_secs(10))
        .await
        .starts_with("HTTP/1.1 200")
}

/// Opens a connection from `from` that sends part of a request head and
/// stays open.
async fn half_head_from(from: [u8; 4], addr: std::net::SocketAddr) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind((std::net::Ipv4Addr::from(from), 0).into())
        .unwrap();
    let mut stream = sock.connect(addr).await.unwrap();
    stream
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .await
        .unwrap();
    stream
}

/// One address holds at most `CHATROOM_MAX_CONNECTIONS_PER_IP`
/// connections: past it a connection is closed unread, while other
/// addresses are served; a closed connection gives its place back.
#[tokio::test]
async fn connections_past_the_address_cap_are_closed_unread() {
    let s = TestServer::start_with(|c| c.max_connections_per_ip = 4).await;
    let busy = [127, 0, 0, 9];
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(half_head_from(busy, s.addr).await);
    }
    // Accepted in order: once the server has seen all four, the fifth is over.
    let mut refused = false;
    for _ in 0..200 {
        if !healthz_from(busy, s.addr).await {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "a fifth connection from one address was served");
    assert!(
        healthz_from([127, 0, 0, 10], s.addr).await,
        "another address was refused"
    );
    let alice = s.agent("alice", "lobby").await;
    alice.call("whoami", json!({})).await;
    drop(held.pop());
    let mut served = false;
    for _ in 0..200 {
        if healthz_from(busy, s.addr).await {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "a closed connection's place never came back");
}

/// Behind a tunnel every client shares the proxy's address: with
/// `CHATROOM_TRUST_PROXY=on` a trusted proxy's connections are not capped
/// by address, and requests without a token are counted by the forwarded
/// address (`CHATROOM_MAX_IN_FLIGHT`), so one client's stalled sign-ins
/// never lock out the others.
#[tokio::test]
async fn a_trusted_proxy_is_capped_per_forwarded_client() {
    let s = TestServer::start_with(|c| {
        c.trust_proxy = true;
        c.max_connections_per_ip = 2;
        c.max_in_flight = 2;
    })
    .await;
    // Loopback is a trusted proxy by default: more than two connections.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(half_head_from([127, 0, 0, 1], s.addr).await);
    }
    assert!(healthz_from([127, 0, 0, 1], s.addr).await);
    let addr = s.addr;
    let stalled_sign_in = |client: &'static str| async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /oauth/token HTTP/1.1\r\nHost: {addr}\r\nX-Forwarded-For: {client}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ngrant"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream
    };
    let _a = stalled_sign_in("203.0.113.1").await;
    let _b = stalled_sign_in("203.0.113.1").await;
    // The server takes them in order; the third of the same client is over.
    let mut third = String::new();
    for _ in 0..200 {
        let mut c = stalled_sign_in("203.0.113.1").await;
        third = read_head(&mut c, Duration::from_secs(10)).await;
        if third.starts_with("HTTP/1.1 429") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(third.starts_with("HTTP/1.1 429"), "{third}");
    // Another client behind the same proxy is served.
    let other = reqwest::Client::new()
        .post(format!("{}/oauth/token", s.url))
        .header("X-Forwarded-For", "203.0.113.2")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("grant_type=authorization_code&code=nope")
        .send()
        .await
        .unwrap();
    assert_ne!(
        other.status(),
        429,
        "another client behind the proxy was refused"
    );
    assert!(other.status().is_client_error());
}
