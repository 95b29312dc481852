//! Webhooks out and in, and stuck tasks (SPEC §7a), against real receivers
//! on loopback ports: Standard Webhooks signatures checked by the
//! reference library, retries and order under a clock moved by hand, a
//! restart mid-retry, the pause, each preset's shape accepted by a stand-in
//! of its service, and the inbound URL with each of its three proofs.

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use chatroom::clock::{Clock, now_ms};
use chatroom::config::Config;
use chatroom::domain::store::webhooks::Webhook;
use common::{McpClient, TestServer, run_cli};
use serde_json::{Value, json};
use tokio::sync::watch;

/// One request a receiver got, and what it answered.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    status: u16,
}

impl Hit {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Clone)]
struct Shared {
    hits: Arc<Mutex<Vec<Hit>>>,
    count: watch::Sender<usize>,
    /// Statuses to answer, in turn; then `otherwise`.
    script: Arc<Mutex<VecDeque<u16>>>,
    otherwise: u16,
}

/// A receiver on a loopback port: records every request, answers by its
/// script, and under `/ntfy/`, `/discord/`, `/slack/` and `/api/webhook/`
/// checks the body as that service documents it.
struct Receiver {
    url: String,
    shared: Shared,
}

impl Receiver {
    async fn start(script: &[u16], otherwise: u16) -> Receiver {
        let shared = Shared {
            hits: Arc::default(),
            count: watch::channel(0).0,
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
            otherwise,
        };
        let app = Router::new().fallback(receive).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, shared }
    }

    /// Waits until `n` requests have come (at most 30 s).
    async fn wait(&self, n: usize) -> Vec<Hit> {
        let mut rx = self.shared.count.subscribe();
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} deliveries did not arrive: {:?}", self.hits()))
            .unwrap();
        self.hits()
    }

    fn hits(&self) -> Vec<Hit> {
        self.shared.hits.lock().unwrap().clone()
    }
}

async fn receive(State(s): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let path = uri.path().to_owned();
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let (status, answer) = if path.starts_with("/ntfy/") {
        ntfy(&headers, &body)
    } else if path.starts_with("/discord/") {
        discord(&headers, &body)
    } else if path.starts_with("/slack/") {
        slack(&headers, &body)
    } else if path.starts_with("/api/webhook/") {
        homeassistant(&headers, &body)
    } else {
        let status = s.script.lock().unwrap().pop_front().unwrap_or(s.otherwise);
        (status, String::new())
    };
    s.hits.lock().unwrap().push(Hit {
        path,
        headers,
        body: body.to_vec(),
        status,
    });
    s.count.send_modify(|c| *c += 1);
    (StatusCode::from_u16(status).unwrap(), answer).into_response()
}

fn is_json(h: &HashMap<String, String>) -> bool {
    h.get("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
}

/// ntfy's publish: the body is the message (UTF-8 text), `Title` and
/// `Tags` headers optional; answers the message as JSON.
fn ntfy(h: &HashMap<String, String>, body: &[u8]) -> (u16, String) {
    match std::str::from_utf8(body) {
        Ok(text) if !text.trim().is_empty() && text.len() <= 4096 && h.contains_key("title") => (
            200,
            json!({"id": "x1", "event": "message", "topic": "t", "message": text}).to_string(),
        ),
        _ => (400, r#"{"code":40001,"error":"invalid request"}"#.into()),
    }
}

/// Discord's Execute Webhook: JSON with `content` of 1 to 2000
/// characters (or embeds); answers `204 No Content`.
fn discord(h: &HashMap<String, String>, body: &[u8]) -> (u16, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let content = v["content"].as_str().unwrap_or("");
    if is_json(h) && !content.is_empty() && content.chars().count() <= 2000 {
        (204, String::new())
    } else {
        (
            400,
            r#"{"message": "Cannot send an empty message", "code": 50006}"#.into(),
        )
    }
}

/// Slack's incoming webhook: JSON with a non-empty `text`; answers `ok`.
fn slack(h: &HashMap<String, String>, body: &[u8]) -> (u16, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if !is_json(h) {
        return (400, "invalid_payload".into());
    }
    match v["text"].as_str() {
        Some(t) if !t.is_empty() => (200, "ok".into()),
        _ => (400, "no_text".into()),
    }
}

/// Home Assistant's webhook trigger: a JSON body (it becomes
/// `trigger.json`); answers `200` with an empty body.
fn homeassistant(h: &HashMap<String, String>, body: &[u8]) -> (u16, String) {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(_)) if is_json(h) => (200, String::new()),
        _ => (400, String::new()),
    }
}

/// The venv Python with the `standardwebhooks` package (`.ci/run`).
fn python() -> String {
    std::env::var("CHATROOM_TEST_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/chatroom/tools/venv/bin/python")
    })
}

/// Runs tests/python/standard_webhooks.py with `args`; its stdout as JSON.
async fn reference(args: &[&str]) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/standard_webhooks.py"
    );
    let out = tokio::process::Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .await
        .expect("run python");
    assert!(
        out.status.success(),
        "standardwebhooks {}: {}",
        args[0],
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from the script")
}

/// `admin add-webhook … --json`.
async fn add_webhook(s: &TestServer, args: &[&str]) -> Value {
    let mut all = vec!["admin", "add-webhook", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = run_cli(&all, &s.cli_env()).await;
    assert_eq!(code, 0, "add-webhook: {err}");
    serde_json::from_str(out.trim()).expect("JSON")
}

/// `admin webhooks --json`.
async fn list_webhooks(s: &TestServer) -> Vec<Value> {
    let (code, out, err) = run_cli(&["admin", "webhooks", "--json"], &s.cli_env()).await;
    assert_eq!(code, 0, "webhooks: {err}");
    serde_json::from_str(&out).expect("JSON")
}

/// Waits until the stored webhooks satisfy `ok` (the worker writes its
/// state back just after the receiver answered).
async fn settled(s: &TestServer, ok: impl Fn(&[Webhook]) -> bool) -> Vec<Webhook> {
    for _ in 0..500 {
        let hooks = s.store.list_webhooks().await.unwrap();
        if ok(&hooks) {
            return hooks;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the webhooks did not settle: {:?}",
        s.store.list_webhooks().await.unwrap()
    );
}

/// The event id a Standard Webhooks delivery carries.
fn event_id(hit: &Hit) -> i64 {
    hit.json()["id"].as_i64().expect("an event id")
}

async fn created(c: &McpClient, title: &str) -> i64 {
    c.call("create_task", json!({"title": title})).await["created"]["id"]
        .as_i64()
        .expect("task id")
}

/// A `standard` delivery verifies with the Standard Webhooks reference
/// library (id, timestamp, signature over the exact body), carries the
/// event's JSON, and the default set skips plain chatter but takes a mention.
#[tokio::test]
async fn standard_signature_verifies_with_the_reference_library() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lab").await;
    let _bob = s.agent("bob", "lab").await;
    let rx = Receiver::start(&[], 200).await;
    let hook = add_webhook(&s, &["--room", "lab", "--url", &format!("{}/in", rx.url)]).await;
    let secret = hook["secret"].as_str().expect("a secret is shown once");
    assert!(secret.starts_with("whsec_"), "{secret}");
    alice
        .call("post_message", json!({"body": "just chatting"}))
        .await;
    alice
        .call("post_message", json!({"body": "@bob the build is red"}))
        .await;
    let hit = rx.wait(1).await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, &hit.body).unwrap();
    let headers = json!({
        "webhook-id": hit.header("webhook-id"),
        "webhook-timestamp": hit.header("webhook-timestamp"),
        "webhook-signature": hit.header("webhook-signature"),
    })
    .to_string();
    let verified = reference(&["verify", secret, body_file.to_str().unwrap(), &headers]).await;
    assert_eq!(verified["kind"], "message");
    assert_eq!(verified["room"], "lab");
    assert_eq!(verified["actor"], "alice");
    assert_eq!(verified["data"]["body"], "@bob the build is red");
    // A forged body does not verify.
    std::fs::write(&body_file, b"{\"kind\":\"message\"}").unwrap();
    let out = tokio::process::Command::new(python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/standard_webhooks.py"
        ))
        .args(["verify", secret, body_file.to_str().unwrap(), &headers])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success(), "a forged body verified");
    // The secret is never listed again.
    settled(&s, |h| h[0].delivery.delivered == 1).await;
    let listed = list_webhooks(&s).await;
    assert!(!listed[0].to_string().contains(secret));
    s.stop().await;
}

/// A receiver that fails twice and then succeeds gets the event three
/// times in all, with the same `webhook-id`, after 5 s and 10 s of back-off;
/// once it succeeded, the event is not sent again: the next delivery is
/// the next event.
#[tokio::test]
async fn fail_twice_then_succeed_is_delivered_once_more() {
    let clock = Clock::manual(now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let alice = s.agent("alice", "ops").await;
    let rx = Receiver::start(&[500, 503], 200).await;
    add_webhook(
        &s,
        &[
            "--room",
            "ops",
            "--url",
            &rx.url,
            "--events",
            "task_created",
        ],
    )
    .await;
    created(&alice, "first").await;
    let first = rx.wait(1).await;
    assert_eq!(first[0].status, 500);
    clock.advance(Duration::from_secs(5));
    let second = rx.wait(2).await;
    assert_eq!(second[1].status, 503);
    clock.advance(Duration::from_secs(10));
    let third = rx.wait(3).await;
    assert_eq!(third[2].status, 200);
    let ids: Vec<&str> = third.iter().map(|h| h.header("webhook-id")).collect();
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    let first_event = event_id(&third[0]);
    assert!(third.iter().all(|h| event_id(h) == first_event));
    created(&alice, "second").await;
    let fourth = rx.wait(4).await;
    assert_ne!(
        event_id(&fourth[3]),
        first_event,
        "a delivered event came again"
    );
    assert_eq!(fourth[3].json()["data"]["title"], "second");
    settled(&s, |h| h[0].delivery.delivered == 2).await;
    let listed = list_webhooks(&s).await;
    assert_eq!(listed[0]["delivered"], 2);
    assert_eq!(listed[0]["failures"], 0);
    assert_eq!(listed[0]["last_status"], "200");
    s.stop().await;
}

/// Events reach a webhook in the order they happened: while the first is
/// being retried, the ones after it wait, then follow in order.
#[tokio::test]
async fn order_is_kept_per_webhook() {
    let clock = Clock::manual(now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let alice = s.agent("alice", "ops").await;
    let rx = Receiver::start(&[500], 200).await;
    add_webhook(
        &s,
        &[
            "--room",
            "ops",
            "--url",
            &rx.url,
            "--events",
            "task_created",
        ],
    )
    .await;
    for t in ["a", "b", "c", "d"] {
        created(&alice, t).await;
    }
    rx.wait(1).await;
    clock.advance(Duration::from_secs(5));
    let hits = rx.wait(5).await;
    let titles: Vec<String> = hits
        .iter()
        .map(|h| h.json()["data"]["title"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(titles, ["a", "a", "b", "c", "d"]);
    s.stop().await;
}

/// A server stopped while an event waits for its retry delivers it after
/// the restart: the queue and the retry state are in the database.
#[tokio::test]
async fn a_restart_mid_retry_still_delivers() {
    let clock = Clock::manual(now_ms());
    let pg = match common::pg_server() {
        Some(server) => Some(common::PgDatabase::create(&server).await),
        None => None,
    };
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir
        .path()
        .join("chatroom.db")
        .to_string_lossy()
        .into_owned();
    let config = || {
        let mut c = Config::for_tests(&db_path);
        c.database_url = pg.as_ref().map(|p| p.url.clone());
        c.rate_limit_per_minute = 0;
        c
    };
    let first = Running::start(config(), clock.clone()).await;
    let store = chatroom::db::open(&config().database()).await.unwrap();
    let core = chatroom::domain::Core::offline(store.clone());
    core.create_room("ops", Default::default()).await.unwrap();
    let (token, _) = core
        .mint_token(common::Grant {
            agent: "alice".into(),
            room: "ops".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let rx = Receiver::start(&[500], 200).await;
    let env = if let Some(p) = &pg {
        HashMap::from([("CHATROOM_DATABASE_URL", p.url.clone())])
    } else {
        HashMap::from([("CHATROOM_DB", db_path.clone())])
    };
    let (code, _, err) = run_cli(
        &[
            "admin",
            "add-webhook",
            "--room",
            "ops",
            "--url",
            &rx.url,
            "--events",
            "all",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let alice = McpClient::new(&first.url, token.expose());
    alice
        .call("post_message", json!({"body": "deploy done"}))
        .await;
    let failed = rx.wait(1).await;
    assert_eq!(failed[0].status, 500);
    // Stopped once the failure is written (a lease held by a vanished
    // server would also run out, a minute later).
    for _ in 0..500 {
        if store.list_webhooks().await.unwrap()[0].delivery.attempts == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.stop().await;
    let second = Running::start(config(), clock.clone()).await;
    clock.advance(Duration::from_secs(5));
    let hits = rx.wait(2).await;
    assert_eq!(hits[1].status, 200);
    assert_eq!(hits[1].header("webhook-id"), hits[0].header("webhook-id"));
    assert_eq!(hits[1].json()["data"]["body"], "deploy done");
    second.stop().await;
}

/// A server launched by the test itself, on a database that outlives it.
struct Running {
    url: String,
    shutdown: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    async fn start(config: Config, clock: Clock) -> Running {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let handle = tokio::spawn(chatroom::server::launch_at(
            config,
            listener,
            shutdown.clone(),
            clock,
        ));
        assert!(common::wait_healthy(&url, Duration::from_secs(20)).await);
        Running {
            url,
            shutdown,
            handle,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.handle.await.unwrap().unwrap();
    }
}

/// After 50 failures in a row a webhook is paused, and `admin webhooks`
/// says so; an event failing for 24 hours is given up for the next one.
#[tokio::test]
async fn a_failing_webhook_is_paused_after_fifty_failures() {
    let clock = Clock::manual(now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let alice = s.agent("alice", "ops").await;
    let rx = Receiver::start(&[], 500).await;
    add_webhook(
        &s,
        &[
            "--room",
            "ops",
            "--url",
            &rx.url,
            "--events",
            "task_created",
        ],
    )
    .await;
    for t in ["one", "two", "three"] {
        created(&alice, t).await;
    }
    for n in 1..=50 {
        rx.wait(n).await;
        clock.advance(Duration::from_secs(3600));
    }
    settled(&s, |h| h[0].delivery.paused).await;
    let listed = list_webhooks(&s).await;
    assert_eq!(listed[0]["paused"], true, "{listed:?}");
    assert_eq!(listed[0]["failures"], 50);
    let (_, table, _) = run_cli(&["admin", "webhooks"], &s.cli_env()).await;
    assert!(table.contains("paused"), "{table}");
    // The first event was given up after a day of failures; the second followed.
    let titles: Vec<String> = rx
        .hits()
        .iter()
        .map(|h| h.json()["data"]["title"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(titles[0], "one");
    assert!(titles.contains(&"two".to_owned()), "{titles:?}");
    assert_eq!(rx.hits().len(), 50);
    // Resumed, it delivers again.
    let id = listed[0]["id"].as_i64().unwrap().to_string();
    let (code, _, _) = run_cli(&["admin", "resume-webhook", &id], &s.cli_env()).await;
    assert_eq!(code, 0);
    created(&alice, "four").await;
    rx.wait(51).await;
    s.stop().await;
}

/// Each preset's request is accepted by a stand-in of its service's
/// documented format: ntfy (text body, Title header), Discord (`content`),
/// Slack (`text`), Home Assistant (a JSON object).
#[tokio::test]
async fn each_preset_is_accepted_by_its_service_shape() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "home").await;
    let rx = Receiver::start(&[], 200).await;
    for (format, path) in [
        ("ntfy", "/ntfy/chatroom-alerts"),
        ("discord", "/discord/api/webhooks/1/tok"),
        ("slack", "/slack/services/T0/B0/x"),
        ("homeassistant", "/api/webhook/chatroom-hook"),
    ] {
        let hook = add_webhook(
            &s,
            &[
                "--room",
                "home",
                "--url",
                &format!("{}{path}", rx.url),
                "--format",
                format,
            ],
        )
        .await;
        assert!(hook["secret"].is_null(), "a preset has no signing secret");
    }
    created(&alice, "backup failed on nas").await;
    let hits = rx.wait(4).await;
    for h in &hits {
        assert!(
            h.status < 300,
            "{} refused: {:?}",
            h.path,
            String::from_utf8_lossy(&h.body)
        );
        let text = String::from_utf8_lossy(&h.body);
        assert!(text.contains("backup failed on nas"), "{}: {text}", h.path);
    }
    settled(&s, |h| h.iter().all(|w| w.delivery.delivered == 1)).await;
    let listed = list_webhooks(&s).await;
    // Tokens in Discord and Slack URLs are not shown.
    assert!(
        !listed
            .iter()
            .any(|w| w["url"].as_str().unwrap().contains("tok"))
    );
    s.stop().await;
}

/// `admin add-inbound … --json`.
async fn add_inbound(s: &TestServer, room: &str, agent: &str) -> (String, String) {
    let (code, out, err) = run_cli(
        &[
            "admin",
            "add-inbound",
            "--room",
            room,
            "--agent",
            agent,
            "--json",
        ],
        &s.cli_env(),
    )
    .await;
    assert_eq!(code, 0, "add-inbound: {err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    (
        v["path"].as_str().unwrap().to_owned(),
        v["secret"].as_str().unwrap().to_owned(),
    )
}

async fn post_inbound(s: &TestServer, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status().as_u16()
}

async fn messages(c: &McpClient) -> Value {
    c.call("read_messages", json!({})).await
}

/// An inbound URL posts as its agent with a bearer secret, and opens a
/// task when signed as a Standard Webhook (signed by the reference
/// library); what it writes is shown as an agent's, labelled untrusted.
/// A wrong secret, a bad signature and no proof are `401` and change nothing.
#[tokio::test]
async fn inbound_bearer_and_standard_webhooks() {
    let s = TestServer::start().await;
    let reader = s.agent("reader", "ops").await;
    let (path, secret) = add_inbound(&s, "ops", "ci").await;
    assert!(path.starts_with("/v1/inbound/in_"), "{path}");
    let bearer = format!("Bearer {secret}");
    let status = post_inbound(
        &s,
        &path,
        &[("authorization", &bearer)],
        r#"{"message": "nightly backup failed"}"#,
    )
    .await;
    assert_eq!(status, 201);
    let read = messages(&reader).await;
    assert_eq!(read["messages"][0]["author"], "ci");
    assert_eq!(read["messages"][0]["body"], "nightly backup failed");
    assert!(read["untrusted_content_warning"].is_string(), "{read}");
    // Standard Webhooks, signed by the reference library.
    let body =
        r#"{"task": {"title": "restore the backup", "body": "disk full", "priority": "high"}}"#;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let signed = reference(&["sign", &secret, "msg_42", file.to_str().unwrap()]).await;
    let h = |k: &str| signed[k].as_str().unwrap().to_owned();
    let (id, ts, sig) = (
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
    );
    let status = post_inbound(
        &s,
        &path,
        &[
            ("webhook-id", &id),
            ("webhook-timestamp", &ts),
            ("webhook-signature", &sig),
        ],
        body,
    )
    .await;
    assert_eq!(status, 201);
    let tasks = reader.call("list_tasks", json!({})).await;
    assert_eq!(tasks["tasks"][0]["title"], "restore the backup");
    assert_eq!(tasks["tasks"][0]["created_by"], "ci");
    assert_eq!(tasks["tasks"][0]["priority"], "high");
    // Refused: a wrong secret, a signature over another body, nothing at all.
    let before = messages(&reader).await["messages"]
        .as_array()
        .unwrap()
        .len();
    let refused = [
        post_inbound(
            &s,
            &path,
            &[("authorization", "Bearer whsec_wrong")],
            r#"{"message": "x"}"#,
        )
        .await,
        post_inbound(
            &s,
            &path,
            &[
                ("webhook-id", &id),
                ("webhook-timestamp", &ts),
                ("webhook-signature", &sig),
            ],
            r#"{"message": "tampered"}"#,
        )
        .await,
        post_inbound(&s, &path, &[], r#"{"message": "x"}"#).await,
        post_inbound(
            &s,
            "/v1/inbound/in_nosuchkey",
            &[("authorization", &bearer)],
            r#"{"message": "x"}"#,
        )
        .await,
    ];
    assert_eq!(refused, [401, 401, 401, 401]);
    let after = messages(&reader).await["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "a refused request changed something");
    assert_eq!(
        reader.call("list_tasks", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    s.stop().await;
}

/// GitHub's `X-Hub-Signature-256`: GitHub's documented test vector is
/// accepted (its body is no event, so it is refused as such, not as
/// unsigned) and one changed byte is `401`; a signed push is summarised
/// in one line and posted.
#[tokio::test]
async fn inbound_github_signature() {
    let s = TestServer::start().await;
    let reader = s.agent("reader", "ops").await;
    // GitHub's documented example secret, set as an inbound URL's secret.
    let secret = "It's a Secret to Everybody";
    s.store
        .insert_inbound(&chatroom::domain::store::webhooks::Inbound {
            id: 0,
            key: "in_githubvector".into(),
            room: "ops".into(),
            agent: "github".into(),
            secret: secret.into(),
            secret_hash: chatroom::secret::hash(secret),
            created_ts: now_ms(),
            last_used_ts: None,
        })
        .await
        .unwrap();
    let path = "/v1/inbound/in_githubvector";
    let vector = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let hub = |sig: &'static str| [("x-hub-signature-256", sig), ("x-github-event", "push")];
    assert_eq!(
        post_inbound(&s, path, &hub(vector), "Hello, World!").await,
        400
    );
    assert_eq!(
        post_inbound(&s, path, &hub(vector), "Hello, World?").await,
        401
    );
    let push = json!({
        "ref": "refs/heads/main",
        "repository": {"full_name": "acme/nas"},
        "pusher": {"name": "dana"},
        "commits": [{"id": "abc"}],
        "head_commit": {"message": "fix the backup job\n\nlong text"},
    })
    .to_string();
    use hmac::{KeyInit, Mac};
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(push.as_bytes());
    let sig = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let status = post_inbound(
        &s,
        path,
        &[("x-hub-signature-256", &sig), ("x-github-event", "push")],
        &push,
    )
    .await;
    assert_eq!(status, 201);
    let read = messages(&reader).await;
    assert_eq!(read["messages"].as_array().unwrap().len(), 1);
    let line = read["messages"][0]["body"].as_str().unwrap();
    assert_eq!(
        line,
        "GitHub: dana pushed 1 commit to acme/nas main: fix the backup job"
    );
    assert_eq!(read["messages"][0]["author"], "github");
    s.stop().await;
}

/// A task in progress with no activity for `CHATROOM_STUCK_AFTER` gets one
/// `task_stuck` event naming its holder and the room's leads, delivered by
/// a webhook too; after a note it can be stuck again, once more.
#[tokio::test]
async fn a_quiet_task_is_stuck_once_per_period() {
    let clock = Clock::manual(now_ms());
    let s = TestServer::start_at(clock.clone(), |c| c.stuck_after = Duration::from_secs(60)).await;
    let worker = s.agent("worker", "ops").await;
    let lead = s.mcp(
        &s.token_with(common::Grant {
            agent: "boss".into(),
            room: "ops".into(),
            lead: true,
            ..Default::default()
        })
        .await,
    );
    let rx = Receiver::start(&[], 200).await;
    add_webhook(
        &s,
        &["--room", "ops", "--url", &rx.url, "--events", "task_stuck"],
    )
    .await;
    let id = created(&worker, "migrate the db").await;
    worker.call("claim_task", json!({"task_id": id})).await;
    clock.advance(Duration::from_secs(61));
    let hit = rx.wait(1).await.remove(0).json();
    assert_eq!(hit["kind"], "task_stuck");
    assert_eq!(hit["task_id"], id);
    assert_eq!(hit["actor"], "chatroom");
    assert_eq!(hit["data"]["assignee"], "worker");
    let mentions = hit["data"]["mentions"].to_string();
    assert!(
        mentions.contains("worker") && mentions.contains("boss"),
        "{mentions}"
    );
    // A note is activity: the next quiet period gets its own event.
    worker
        .call("add_note", json!({"task_id": id, "body": "still on it"}))
        .await;
    clock.advance(Duration::from_secs(61));
    rx.wait(2).await;
    let events = lead
        .call("read_events", json!({"kind": "task_stuck"}))
        .await;
    assert_eq!(events["events"].as_array().unwrap().len(), 2, "{events}");
    s.stop().await;
}

/// Two replicas on one PostgreSQL database: each event reaches the
/// webhook once, in order, whichever replica's worker leased it (SQLite
/// has one server; the test then has nothing to prove and returns).
#[tokio::test]
async fn replicas_deliver_each_event_once() {
    if common::pg_server().is_none() {
        return;
    }
    let s = TestServer::start().await;
    let other = s.replica().await;
    let alice = s.agent("alice", "ops").await;
    let bob = other.agent("bob", "ops").await;
    let rx = Receiver::start(&[], 200).await;
    add_webhook(
        &s,
        &[
            "--room",
            "ops",
            "--url",
            &rx.url,
            "--events",
            "task_created",
        ],
    )
    .await;
    for i in 0..10 {
        let c = if i % 2 == 0 { &alice } else { &bob };
        created(c, &format!("t{i}")).await;
    }
    rx.wait(10).await;
    settled(&s, |h| h[0].delivery.delivered == 10).await;
    let titles: Vec<String> = rx
        .hits()
        .iter()
        .map(|h| h.json()["data"]["title"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    assert_eq!(titles, expected);
    other.stop().await;
    s.stop().await;
}

/// A webhook pointing at the server's own address is refused at delivery
/// (it would call the server back), and says so in its status.
#[tokio::test]
async fn the_servers_own_address_is_refused() {
    let s = TestServer::start_with(|_| {}).await;
    let _alice = s.agent("alice", "ops").await;
    // The test server listens on 127.0.0.1:PORT, its configured address says
    // the same port: a webhook there is its own address.
    let url = format!("{}/v1/inbound/in_loop", s.url);
    add_webhook(&s, &["--room", "ops", "--url", &url, "--events", "all"]).await;
    _alice.call("post_message", json!({"body": "hello"})).await;
    let hooks = settled(&s, |h| h[0].delivery.failures >= 1).await;
    assert_eq!(
        hooks[0].delivery.last_status.as_deref(),
        Some("refused: the server's own address")
    );
    s.stop().await;
}

/// The console lists, adds and removes webhooks and inbound URLs; a new
/// secret is answered once and never appears in the state.
#[tokio::test]
async fn the_console_adds_lists_and_removes() {
    let s = TestServer::start_with(|c| c.admin_api = true).await;
    s.room("ops").await;
    let admin = s
        .token_with(common::Grant {
            agent: "owner".into(),
            room: "ops".into(),
            admin: true,
            all_rooms: true,
            ..Default::default()
        })
        .await;
    let http = reqwest::Client::new();
    let send = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut r = http
            .request(method, format!("{}{path}", s.url))
            .bearer_auth(&admin);
        if let Some(b) = body {
            r = r.json(&b);
        }
        async move {
            let resp = r.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, hook) = send(
        reqwest::Method::POST,
        "/v1/admin/webhooks",
        Some(json!({"room": "ops", "url": "https://discord.com/api/webhooks/1/secret-token", "format": "discord"})),
    )
    .await;
    assert_eq!(status, 201, "{hook}");
    let (status, signed) = send(
        reqwest::Method::POST,
        "/v1/admin/webhooks",
        Some(json!({"room": "ops", "url": "http://192.168.1.20:8123/hook"})),
    )
    .await;
    assert_eq!(status, 201);
    let secret = signed["secret"].as_str().unwrap().to_owned();
    let (status, inbound) = send(
        reqwest::Method::POST,
        "/v1/admin/inbound",
        Some(json!({"room": "ops", "agent": "ci"})),
    )
    .await;
    assert_eq!(status, 201);
    let inbound_secret = inbound["secret"].as_str().unwrap().to_owned();
    let (_, state) = send(reqwest::Method::GET, "/v1/admin/state", None).await;
    let text = state["hooks"].to_string();
    assert_eq!(state["hooks"]["webhooks"].as_array().unwrap().len(), 2);
    assert_eq!(state["hooks"]["inbound"][0]["agent"], "ci");
    for hidden in [secret.as_str(), inbound_secret.as_str(), "secret-token"] {
        assert!(!text.contains(hidden), "{hidden} is shown in {text}");
    }
    let (status, removed) = send(
        reqwest::Method::DELETE,
        &format!("/v1/admin/webhooks/{}", hook["id"]),
        None,
    )
    .await;
    assert_eq!(status, 200, "{removed}");
    let key = inbound["key"].as_str().unwrap();
    let (status, _) = send(
        reqwest::Method::DELETE,
        &format!("/v1/admin/inbound/{key}"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let (_, state) = send(reqwest::Method::GET, "/v1/admin/state", None).await;
    assert_eq!(state["hooks"]["webhooks"].as_array().unwrap().len(), 1);
    assert!(state["hooks"]["inbound"].as_array().unwrap().is_empty());
    let (status, _) = send(
        reqwest::Method::POST,
        "/v1/admin/webhooks",
        Some(json!({"room": "ops", "url": "ftp://x", "format": "standard"})),
    )
    .await;
    assert_eq!(status, 400);
    s.stop().await;
}
