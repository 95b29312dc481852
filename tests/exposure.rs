//! What protects a server exposed to a network: the Host allowlist, the
//! browser-Origin check, the failed-credential throttle and the rate limit.

mod common;

use std::time::Duration;

use chatroom::auth::hosts::HostRule;
use common::TestServer;
use serde_json::{Value, json};

fn whoami() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}})
}

async fn post(url: &str, headers: &[(&str, &str)], body: &Value) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// A Host outside the allowlist gets `421` before authentication, on `/mcp`;
/// `/healthz` is exempt; an allowed `host:*` entry admits any port.
#[tokio::test]
async fn host_allowlist_answers_421_first() {
    let s = TestServer::start_with(|c| {
        c.allowed_hosts = Some(vec![
            HostRule::parse("127.0.0.1").unwrap(),
            HostRule::parse("chat.example.com:*").unwrap(),
        ])
    })
    .await;
    let alice = s.agent("alice", "lobby").await;
    let url = format!("{}/mcp", s.url);
    let r = post(&url, &[("Host", "evil.example")], &whoami()).await;
    assert_eq!(r.status(), 421);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["code"].is_string());
    // 421 comes before 401: no token needed to be refused by Host.
    let r = post(
        &url,
        &[("Host", "evil.example"), ("Authorization", "Bearer x")],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 421);
    let auth = format!("Bearer {}", alice.token);
    let r = post(
        &url,
        &[("Host", "chat.example.com:8443"), ("Authorization", &auth)],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 200);
    let r = post(
        &url,
        &[("Host", "chat.example.com"), ("Authorization", &auth)],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 200);
    let health = reqwest::Client::new()
        .get(format!("{}/healthz", s.url))
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");
}

/// The default allowlist is loopback only.
#[tokio::test]
async fn default_allowlist_is_loopback() {
    let s = TestServer::start().await;
    let r = post(
        &format!("{}/mcp", s.url),
        &[("Host", "192.168.1.20:8080")],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 421);
    let r = post(
        &format!("{}/mcp", s.url),
        &[("Host", "localhost:8080")],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 401, "allowed Host, no token");
}

/// A browser Origin not allowed on `/mcp` gets `403` after the Host check and
/// before authentication; allowed origins and requests without one pass.
#[tokio::test]
async fn foreign_origin_gets_403() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let auth = format!("Bearer {}", alice.token);
    let url = format!("{}/mcp", s.url);
    let r = post(
        &url,
        &[("Origin", "https://evil.example"), ("Authorization", &auth)],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 403);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "forbidden");
    let r = post(&url, &[("Origin", "https://evil.example")], &whoami()).await;
    assert_eq!(r.status(), 403, "before authentication");
    let r = post(
        &url,
        &[("Origin", "https://evil.example"), ("Host", "evil.example")],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 421, "after the Host check");
    let r = post(
        &url,
        &[
            ("Origin", "http://localhost:3000"),
            ("Authorization", &auth),
        ],
        &whoami(),
    )
    .await;
    assert_eq!(r.status(), 200);
}

/// Past the failed-credential limit an address gets `429` with
/// `Retry-After`, while a valid token from the same address is still served.
#[tokio::test]
async fn failed_credentials_are_throttled_but_valid_tokens_served() {
    let s = TestServer::start_with(|c| {
        c.auth_fail_limit = 3;
        c.auth_fail_window = Duration::from_secs(300);
    })
    .await;
    let alice = s.agent("alice", "lobby").await;
    let url = format!("{}/mcp", s.url);
    for _ in 0..3 {
        let r = post(&url, &[("Authorization", "Bearer cr_wrong")], &whoami()).await;
        assert_eq!(r.status(), 401);
    }
    let r = post(&url, &[("Authorization", "Bearer cr_wrong")], &whoami()).await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&retry));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limited");
    let r = post(&url, &[], &whoami()).await;
    assert_eq!(r.status(), 429, "no token counts as failed too");
    // A valid token is always served and does not reset the window.
    alice.call("whoami", json!({})).await;
    let r = post(&url, &[("Authorization", "Bearer cr_wrong")], &whoami()).await;
    assert_eq!(r.status(), 429);
}

/// Forwarded addresses are believed only with `CHATROOM_TRUST_PROXY`.
#[tokio::test]
async fn forwarded_addresses_need_trust_proxy() {
    let s = TestServer::start_with(|c| c.auth_fail_limit = 2).await;
    let url = format!("{}/mcp", s.url);
    for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        post(&url, &[("X-Forwarded-For", ip)], &whoami()).await;
    }
    let r = post(&url, &[("X-Forwarded-For", "10.0.0.9")], &whoami()).await;
    assert_eq!(
        r.status(),
        429,
        "without trust, every request counts against the peer"
    );

    let s = TestServer::start_with(|c| {
        c.auth_fail_limit = 2;
        c.trust_proxy = true;
    })
    .await;
    let url = format!("{}/mcp", s.url);
    for _ in 0..3 {
        post(&url, &[("CF-Connecting-IP", "10.0.0.1")], &whoami()).await;
    }
    let r = post(&url, &[("CF-Connecting-IP", "10.0.0.1")], &whoami()).await;
    assert_eq!(r.status(), 429);
    let r = post(&url, &[("CF-Connecting-IP", "10.0.0.2")], &whoami()).await;
    assert_eq!(r.status(), 401, "another client address is not throttled");
}

/// Past `CHATROOM_RATE_LIMIT_PER_MINUTE`, tool calls are `rate_limited` with a
/// retry hint; `tools/list` does not count; other tokens are unaffected.
#[tokio::test]
async fn per_token_rate_limit() {
    let s = TestServer::start_with(|c| c.rate_limit_per_minute = 5).await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    for _ in 0..10 {
        let (status, _) = alice
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await;
        assert_eq!(status, 200);
    }
    for _ in 0..5 {
        alice.call("whoami", json!({})).await;
    }
    let r = alice
        .try_call("post_message", json!({"body": "one too many"}))
        .await;
    assert!(r.is_error);
    assert_eq!(r.code(), "rate_limited");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry in")
    );
    bob.call("whoami", json!({})).await;
    let msgs = bob.call("read_messages", json!({})).await;
    assert_eq!(
        msgs["messages"],
        json!([]),
        "the refused call changed nothing"
    );
}

/// A body over the limit is refused with `413` and our JSON body.
#[tokio::test]
async fn oversized_body_is_refused() {
    let s = TestServer::start_with(|c| c.max_file_bytes = 1024).await;
    let alice = s.agent("alice", "lobby").await;
    let big = "x".repeat(200_000);
    let (status, v) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "post_message", "arguments": {"body": big}}}))
        .await;
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"]["code"], "too_large");
}
