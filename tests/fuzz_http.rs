//! A proptest-driven fuzzer of `/mcp` against the real binary: arbitrary
//! bytes, random JSON-RPC shapes, random tool names with arguments of wrong
//! types, deep nesting, huge strings and numbers. The server never panics,
//! never answers `500` or an internal error, stays healthy, and its memory
//! stays bounded while it is sent many bodies near the size limit.
//!
//! `CHATROOM_FUZZ_CASES` sets the number of random requests (default 400).

mod common;
#[path = "spawned/mod.rs"]
mod spawned;

use std::sync::Arc;

use base64::Engine;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use serde_json::{Value, json};
use spawned::Spawned;

/// Names that are not tools, besides the tools of the contract
/// (`chatroom::mcp::TOOLS`).
const NOT_TOOLS: &[&str] = &["", "WHOAMI", "no_such_tool", "../etc/passwd"];

/// Argument names the tools know, so random values reach their parsers.
const ARG_NAMES: &[&str] = &[
    "task_id",
    "room",
    "body",
    "limit",
    "since_id",
    "status",
    "title",
    "expected_version",
    "name",
    "content_base64",
    "timeout_s",
    "query",
    "file_id",
    "approve",
    "note",
    "reason",
    "days",
    "lease_seconds",
    "depends_on",
    "claim",
    "assignee",
    "before_id",
    "kind",
    "reply_to",
    "mime",
    "expires_in_hours",
    "priority",
    "needs_review",
    "required_skill",
    "result",
    "description",
    "repo_url",
    "onboarding_notes",
];

const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "notifications/initialized",
    "notifications/cancelled",
    "resources/list",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..24).prop_map(|c| c.into_iter().collect())
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-3i64..3).prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Tool arguments: known names with values of any type, and some unknown names.
fn arguments() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        4 => prop::sample::select(ARG_NAMES).prop_map(str::to_owned),
        1 => text(),
    ];
    prop_oneof![
        6 => prop::collection::vec((key, json_value()), 0..6)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        1 => json_value(),
    ]
}

/// One hostile request body and its extra headers.
#[derive(Debug, Clone)]
struct Probe {
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

fn rpc_shape() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof![Just(json!("2.0")), json_value()]),
        prop::option::of(json_value()),
        prop_oneof![
            3 => prop::sample::select(METHODS).prop_map(str::to_owned),
            1 => text(),
        ],
        prop::option::of(json_value()),
    )
        .prop_map(|(jsonrpc, id, method, params)| {
            let mut m = serde_json::Map::new();
            if let Some(v) = jsonrpc {
                m.insert("jsonrpc".into(), v);
            }
            if let Some(v) = id {
                m.insert("id".into(), v);
            }
            m.insert("method".into(), json!(method));
            if let Some(v) = params {
                m.insert("params".into(), v);
            }
            Value::Object(m)
        })
}

/// Every tool of the contract and a few names that are not tools.
fn tool_names() -> Vec<&'static str> {
    chatroom::mcp::TOOLS
        .iter()
        .chain(NOT_TOOLS)
        .copied()
        .collect()
}

fn tool_call() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            5 => prop::sample::select(tool_names()).prop_map(str::to_owned),
            1 => text(),
        ],
        arguments(),
        prop_oneof![
            4 => any::<i64>().prop_map(|n| json!(n)),
            1 => text().prop_map(Value::String),
            1 => json_value(),
        ],
    )
        .prop_map(|(name, args, id)| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": name, "arguments": args}})
        })
}

fn headers() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    (
        prop_oneof![
            Just(None),
            Just(Some("2025-06-18".to_owned())),
            Just(Some("2025-11-25".to_owned())),
            Just(Some("2026-07-28".to_owned())),
            text().prop_map(Some),
        ],
        prop::option::of(text()),
    )
        .prop_map(|(version, method)| {
            let mut h = Vec::new();
            if let Some(v) = version {
                h.push(("mcp-protocol-version", v));
            }
            if let Some(m) = method {
                h.push(("mcp-method", m));
            }
            h
        })
}

fn probe() -> impl Strategy<Value = Probe> {
    let body = prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..512),
        3 => rpc_shape().prop_map(|v| v.to_string().into_bytes()),
        6 => tool_call().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(rpc_shape(), 0..4)
            .prop_map(|v| Value::Array(v).to_string().into_bytes()),
    ];
    (body, prop_oneof![3 => Just(Vec::new()), 1 => headers()])
        .prop_map(|(body, headers)| Probe { body, headers })
}

/// Bodies no random generator is likely to hit.
fn fixed_probes() -> Vec<(&'static str, Vec<u8>)> {
    let deep = |n: usize, open: &str, close: &str| {
        format!("{}{}", open.repeat(n), close.repeat(n)).into_bytes()
    };
    let in_args = |value: String| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"post_message","arguments":{{"body":{value}}}}}}}"#
        )
        .into_bytes()
    };
    let huge_digits = format!("1{}", "0".repeat(100_000));
    vec![
        ("100k levels of [", "[".repeat(100_000).into_bytes()),
        ("1M levels of [ closed", deep(300_000, "[", "]")),
        ("100k levels of {\"a\":", "{\"a\":".repeat(100_000).into_bytes()),
        (
            "deep nesting inside tool arguments",
            in_args(format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))),
        ),
        (
            "a huge string argument",
            in_args(format!("\"{}\"", "x".repeat(1_000_000))),
        ),
        (
            "a huge title",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"create_task","arguments":{{"title":"{}"}}}}}}"#,
                "t".repeat(1_000_000)
            )
            .into_bytes(),
        ),
        ("a huge number argument", in_args(huge_digits.clone())),
        (
            "a huge task id",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"get_task","arguments":{{"task_id":{huge_digits}}}}}}}"#
            )
            .into_bytes(),
        ),
        (
            "1e999 everywhere",
            br#"{"jsonrpc":"2.0","id":1e999,"method":"tools/call","params":{"name":"read_messages","arguments":{"limit":1e999,"since_id":-1e999}}}"#.to_vec(),
        ),
        (
            "i64 edges",
            br#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"tools/call","params":{"name":"list_tasks","arguments":{"limit":-9223372036854775808,"before_id":9223372036854775807}}}"#.to_vec(),
        ),
        (
            "a lone surrogate",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"post_message","arguments":{"body":"\ud800"}}}"#.to_vec(),
        ),
        (
            "a NUL in a message",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"post_message","arguments":{"body":"a\u0000b"}}}"#.to_vec(),
        ),
        (
            "a NUL in a room name",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_messages","arguments":{"room":"lob\u0000by"}}}"#.to_vec(),
        ),
        (
            "a NUL in a search",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"\u0000 OR * NEAR("}}}"#.to_vec(),
        ),
        (
            "invalid UTF-8",
            [&br#"{"jsonrpc":"2.0","id":1,"method":"ping","x":""#[..], &[0xff, 0xfe, 0xc0], b"\"}"].concat(),
        ),
        ("a byte order mark", [&[0xef, 0xbb, 0xbf][..], br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#].concat()),
        ("an empty body", Vec::new()),
        ("just null", b"null".to_vec()),
        ("an empty batch", b"[]".to_vec()),
        (
            "duplicate keys",
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","method":"ping","params":{"name":"whoami","name":"nope"}}"#.to_vec(),
        ),
        (
            "strict base64 edge",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"put_file","arguments":{"name":"a","content_base64":"===="}}}"#.to_vec(),
        ),
        (
            "a path-like file name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"put_file","arguments":{{"name":"../../etc/passwd","content_base64":"{}"}}}}}}"#,
                base64::engine::general_purpose::STANDARD.encode(b"x")
            )
            .into_bytes(),
        ),
        ("over the body limit", vec![b' '; 2 * 1024 * 1024]),
    ]
}

/// What a response must never be: a `5xx`, a JSON-RPC internal error, or a
/// tool result with the `internal` code.
fn check_answer(what: &str, status: u16, body: &str) {
    assert!(status < 500, "{what}: HTTP {status}: {body:.300}");
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let bad = |m: &Value| m["error"]["code"] == json!(-32603);
        let many = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
        for m in &many {
            assert!(!bad(m), "{what}: JSON-RPC internal error: {body:.300}");
            if let Some(text) = m["result"]["content"][0]["text"].as_str() {
                let inner: Value = serde_json::from_str(text).unwrap_or(Value::Null);
                assert_ne!(
                    inner["error"]["code"], "internal",
                    "{what}: internal tool error: {body:.300}"
                );
            }
        }
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: Vec<u8>,
    headers: &[(&'static str, String)],
    oversized: bool,
) -> (u16, String) {
    let mut req = http
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body);
    for (k, v) in headers {
        if let Ok(v) = reqwest::header::HeaderValue::from_str(v) {
            req = req.header(*k, v);
        }
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
        // A body over the limit is answered 413 before it is read, and the
        // connection closed: the client may see that as a broken send.
        Err(e) if oversized => (413, format!("(connection closed while sending: {e})")),
        Err(e) => panic!("no answer, the connection was dropped: {e}"),
    }
}

fn assert_clean_log(server: &Spawned) {
    let log = server.log();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
    assert!(
        !log.contains("internal error"),
        "the server logged an internal error:\n{log}"
    );
}

/// Random and hand-picked hostile bodies never panic the server, never get a
/// `5xx` or an internal error, and leave it healthy and serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bodies_never_break_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db").to_string_lossy().into_owned();
    let server = Spawned::start(
        &db,
        &[
            ("CHATROOM_MAX_WAIT_S", "1"),
            ("CHATROOM_RATE_LIMIT_PER_MINUTE", "0"),
        ],
    )
    .await;
    let token = server.token("fuzz", "lobby", &[]).await;
    let url = format!("{}/mcp", server.url);
    let http = reqwest::Client::new();

    for (what, body) in fixed_probes() {
        let oversized = body.len() > 1_500_000;
        let (status, answer) = post(&http, &url, &token, body, &[], oversized).await;
        check_answer(what, status, &answer);
    }

    let cases: u32 = std::env::var("CHATROOM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(PtConfig {
        failure_persistence: None,
        ..PtConfig::default()
    });
    let strategy = probe();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..cases {
        let probe = strategy.new_tree(&mut runner).expect("a probe").current();
        let what = format!(
            "random probe {i}: {:.200}",
            String::from_utf8_lossy(&probe.body)
        );
        let (status, answer) = post(&http, &url, &token, probe.body, &probe.headers, false).await;
        *statuses.entry(status).or_default() += 1;
        check_answer(&what, status, &answer);
        let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        let outcome = if v["result"]["isError"] == json!(true) {
            let text = v["result"]["content"][0]["text"].as_str().unwrap_or("");
            let inner: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            format!(
                "tool error {}",
                inner["error"]["code"].as_str().unwrap_or("?")
            )
        } else if v["result"].is_object() {
            "result".to_owned()
        } else if let Some(code) = v["error"]["code"].as_i64() {
            format!("JSON-RPC error {code}")
        } else {
            format!("HTTP {status}")
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    println!("fuzzed {cases} random requests; statuses {statuses:?}; outcomes {outcomes:?}");

    assert!(common::wait_healthy(&server.url, std::time::Duration::from_secs(5)).await);
    let me = server.mcp(&token).call("whoami", json!({})).await;
    assert_eq!(me["agent"], "fuzz");
    assert_clean_log(&server);
}

/// Many bodies near the size limit, four at a time, leave the server's
/// memory bounded: nothing of them is kept once they are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_bodies_keep_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db").to_string_lossy().into_owned();
    // A file cap of 384 KiB makes the body limit 1,088 KiB.
    let cap: usize = 384 * 1024;
    let limit = (2 * cap).div_ceil(3) * 4 + 64 * 1024;
    let server = Spawned::start(
        &db,
        &[
            ("CHATROOM_MAX_FILE_BYTES", "393216"),
            ("CHATROOM_RATE_LIMIT_PER_MINUTE", "0"),
            ("CHATROOM_LOG", "warn"),
        ],
    )
    .await;
    let token = server.token("big", "lobby", &[]).await;
    let url = Arc::new(format!("{}/mcp", server.url));
    let token = Arc::new(token);
    let http = reqwest::Client::new();
    let near = limit - 2 * 1024;
    let bodies: Vec<Arc<Vec<u8>>> = vec![
        // A message far over its own size cap: refused as too_large.
        Arc::new(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "post_message", "arguments": {"body": "m".repeat(near - 200)}}})
            .to_string()
            .into_bytes(),
        ),
        // Not JSON at all.
        Arc::new((0..near).map(|i| (i * 7 % 251) as u8).collect()),
        // Nesting as deep as the body allows.
        Arc::new("[".repeat(near).into_bytes()),
        // A number as long as the body allows.
        Arc::new(
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"get_task","arguments":{{"task_id":{}}}}}}}"#,
                "9".repeat(near - 200)
            )
            .into_bytes(),
        ),
        // A file just under the cap, stored.
        Arc::new(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "put_file", "arguments": {"name": "big.bin",
                "content_base64": base64::engine::general_purpose::STANDARD.encode(vec![7u8; cap - 1024])}}})
            .to_string()
            .into_bytes(),
        ),
        // Just over the limit: 413.
        Arc::new(vec![b' '; limit + 1]),
    ];
    let send = |rounds: usize| {
        let (http, url, token, bodies) = (http.clone(), url.clone(), token.clone(), bodies.clone());
        async move {
            let mut n = 0;
            for r in 0..rounds {
                let batch: Vec<_> = (0..4)
                    .map(|k| {
                        // Files only now and then, so the disk does not fill.
                        let mut pick = (r * 4 + k) % bodies.len();
                        if pick == 4 && r % 8 != 0 {
                            pick = 0;
                        }
                        let (http, url, token, body) = (
                            http.clone(),
                            url.clone(),
                            token.clone(),
                            bodies[pick].clone(),
                        );
                        async move {
                            let oversized = body.len() > limit;
                            post(&http, &url, &token, body.to_vec(), &[], oversized).await
                        }
                    })
                    .collect();
                for (status, answer) in futures::future::join_all(batch).await {
                    check_answer("near-limit body", status, &answer);
                    n += 1;
                }
            }
            n
        }
    };
    send(12).await;
    let before = server.rss();
    let rounds: usize = std::env::var("CHATROOM_FUZZ_BIG_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90);
    let sent = send(rounds).await;
    let after = server.rss();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "{sent} near-limit bodies (~{:.0} MiB in all): RSS {:.1} MiB -> {:.1} MiB",
        mib((sent * near) as u64),
        mib(before),
        mib(after)
    );
    assert!(
        after < before + 64 * 1024 * 1024,
        "RSS grew by {:.1} MiB while bodies were answered",
        mib(after.saturating_sub(before))
    );
    assert!(common::wait_healthy(&server.url, std::time::Duration::from_secs(5)).await);
    assert_clean_log(&server);
}

/// OAuth parameter names, so random values reach the parsers behind them.
const OAUTH_PARAMS: &[&str] = &[
    "grant_type",
    "code",
    "client_id",
    "client_secret",
    "redirect_uri",
    "code_verifier",
    "refresh_token",
    "resource",
    "token",
    "token_type_hint",
    "response_type",
    "code_challenge",
    "code_challenge_method",
    "state",
    "scope",
    "csrf",
    "connect_code",
    "decision",
];

/// Values near what the endpoints expect, and nonsense.
fn oauth_value(client_id: String) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => text(),
        1 => Just(client_id),
        1 => prop_oneof![
            Just("authorization_code".to_owned()),
            Just("refresh_token".to_owned()),
            Just("S256".to_owned()),
            Just("plain".to_owned()),
            Just("code".to_owned()),
            Just("approve".to_owned()),
            Just("http://127.0.0.1:53682/callback".to_owned()),
            Just("https://127.0.0.1/client.json".to_owned()),
            Just("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".to_owned()),
            Just("crc-0000-0000-0000".to_owned()),
        ],
        1 => (prop_oneof![Just("crac_"), Just("crr_"), Just("cra_"), Just("crcl_"), Just("1.")], text())
            .prop_map(|(p, t)| format!("{p}{t}")),
        1 => (1usize..6000).prop_map(|n| "x".repeat(n)),
    ]
}

/// A form body: known and unknown keys, repeated keys, raw bytes.
fn oauth_form(client_id: String) -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![
        6 => prop::sample::select(OAUTH_PARAMS).prop_map(str::to_owned),
        1 => text(),
    ];
    prop_oneof![
        6 => prop::collection::vec((key, oauth_value(client_id)), 0..8).prop_map(|pairs| {
            url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(pairs)
                .finish()
                .into_bytes()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

/// Random forms, queries, content types and registration JSON at every
/// OAuth endpoint never panic the server, never get a `5xx`, always get the
/// RFC's JSON error shape from the token, revocation and registration
/// endpoints, and leave it healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_oauth_requests_never_break_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db").to_string_lossy().into_owned();
    let server = Spawned::start(&db, &[("CHATROOM_AUTH_FAIL_LIMIT", "0")]).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let registered: Value = http
        .post(format!("{}/oauth/register", server.url))
        .json(&json!({"redirect_uris": ["http://127.0.0.1:53682/callback"], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = registered["client_id"].as_str().unwrap().to_owned();
    let cases: u32 = std::env::var("CHATROOM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(PtConfig {
        failure_persistence: None,
        ..PtConfig::default()
    });
    let form = oauth_form(client_id);
    let content_type = prop_oneof![
        6 => Just("application/x-www-form-urlencoded"),
        1 => Just("application/x-www-form-urlencoded; charset=utf-8"),
        1 => Just("application/json"),
        1 => Just("text/plain"),
    ];
    let mut statuses = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..cases {
        let body = form.new_tree(&mut runner).unwrap().current();
        let ctype = content_type.new_tree(&mut runner).unwrap().current();
        let json_body = json_value().new_tree(&mut runner).unwrap().current();
        let (method, path) = [
            ("POST", "/oauth/token"),
            ("POST", "/oauth/revoke"),
            ("POST", "/oauth/authorize"),
            ("GET", "/oauth/authorize"),
            ("POST", "/oauth/register"),
        ][i as usize % 5];
        let what = format!(
            "{method} {path} probe {i}: {:.200}",
            String::from_utf8_lossy(&body)
        );
        let request = match (method, path) {
            ("GET", _) => http.get(format!(
                "{}{path}?{}",
                server.url,
                String::from_utf8_lossy(&body).replace(['#', ' '], "")
            )),
            (_, "/oauth/register") => {
                // Registration JSON: random, or random metadata around URIs.
                let value = if i % 2 == 0 {
                    json_body
                } else {
                    json!({"redirect_uris": [json_body.clone()], "client_name": json_body})
                };
                http.post(format!("{}{path}", server.url))
                    .header("content-type", "application/json")
                    .body(value.to_string())
            }
            _ => http
                .post(format!("{}{path}", server.url))
                .header("content-type", ctype)
                .body(body),
        };
        let resp = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        assert!(status < 500, "{what}: HTTP {status}: {text:.300}");
        *statuses.entry(format!("{path} {status}")).or_default() += 1;
        if path != "/oauth/authorize" && status >= 400 {
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{what}: not JSON: {text:.300}"));
            assert!(
                v["error"].is_string(),
                "{what}: not an RFC error: {text:.300}"
            );
        }
    }
    println!("fuzzed {cases} OAuth requests; statuses {statuses:?}");
    assert!(common::wait_healthy(&server.url, std::time::Duration::from_secs(5)).await);
    assert_clean_log(&server);
}
