//! OAuth 2.1 sign-in (SPEC §2a): discovery, registration, the consent page
//! with a connect code, the token endpoint, and OAuth access tokens on
//! `/mcp` and `/v1` — with real clients, and every refusal.

mod common;

use std::collections::HashMap;

use base64::Engine;
use common::{Grant, TestServer, run_cli};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The venv Python with the `mcp` package that `.ci/run` sets up.
fn python() -> String {
    std::env::var("CHATROOM_TEST_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/chatroom/tools/venv/bin/python")
    })
}

/// A connect code for `agent` in `room` (created if needed), as `chatroom
/// admin connect` mints it.
async fn connect_code(s: &TestServer, grant: Grant) -> String {
    for room in std::iter::once(&grant.room).chain(grant.also_rooms.iter()) {
        if s.store.get_room(room).await.unwrap().is_none() {
            s.room(room).await;
        }
    }
    let (code, _) = s
        .core
        .mint_connect_code(grant, 15)
        .await
        .expect("mint a connect code");
    code.expose().to_owned()
}

fn grant(agent: &str, room: &str) -> Grant {
    Grant {
        agent: agent.into(),
        room: room.into(),
        ..Grant::default()
    }
}

const REDIRECT: &str = "http://127.0.0.1:53682/callback";

/// A PKCE pair (verifier, S256 challenge).
fn pkce() -> (String, String) {
    let verifier = format!("v{}", "x".repeat(50));
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// An OAuth client spoken by hand: every request as a client or a browser
/// sends it, redirects not followed.
struct App {
    http: reqwest::Client,
    base: String,
    client_id: String,
    verifier: String,
    challenge: String,
    /// The `Host` to send (a replica behind the same name as another).
    host: Option<String>,
    redirect: String,
}

/// What the authorization endpoint answered.
struct Answer {
    status: u16,
    location: Option<String>,
    body: String,
}

impl Answer {
    fn query(&self) -> HashMap<String, String> {
        let location = self.location.as_deref().expect("a redirect");
        let url = reqwest::Url::parse(location).expect("an absolute redirect");
        url.query_pairs().into_owned().collect()
    }

    /// The hidden fields of the consent form.
    fn fields(&self) -> HashMap<String, String> {
        common::consent::hidden_fields(&self.body)
            .into_iter()
            .collect()
    }
}

impl App {
    /// Registers a public client with `REDIRECT`.
    async fn register(s: &TestServer) -> App {
        App::register_with(s, REDIRECT).await
    }

    /// Registers a public client with `redirect`.
    async fn register_with(s: &TestServer, redirect: &str) -> App {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = http
            .post(format!("{}/oauth/register", s.url))
            .json(&json!({"client_name": "Test app", "redirect_uris": [redirect], "token_endpoint_auth_method": "none"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let v: Value = r.json().await.unwrap();
        let (verifier, challenge) = pkce();
        App {
            http,
            base: s.url.clone(),
            client_id: v["client_id"].as_str().unwrap().to_owned(),
            verifier,
            challenge,
            host: None,
            redirect: redirect.to_owned(),
        }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.post(format!("{}{path}", self.base));
        match &self.host {
            Some(h) => r.header("host", h),
            None => r,
        }
    }

    fn authorize_params(&self) -> Vec<(String, String)> {
        [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", self.redirect.as_str()),
            ("state", "st4te"),
            ("code_challenge", self.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", &format!("{}/mcp", self.base)),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    async fn get_authorize(&self, params: &[(String, String)]) -> Answer {
        let r = self
            .http
            .get(format!(
                "{}/oauth/authorize?{}",
                self.base,
                encode(params.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            ))
            .send()
            .await
            .unwrap();
        answer(r).await
    }

    async fn post_authorize(&self, form: &HashMap<String, String>) -> Answer {
        let r = self
            .post("/oauth/authorize")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(form.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
            .send()
            .await
            .unwrap();
        answer(r).await
    }

    /// Opens the consent page and submits `code` with `decision`.
    async fn consent(&self, code: &str, decision: &str) -> Answer {
        let page = self.get_authorize(&self.authorize_params()).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let mut form = page.fields();
        form.insert("connect_code".into(), code.into());
        form.insert("decision".into(), decision.into());
        self.post_authorize(&form).await
    }

    /// An authorization code approved with `connect`.
    async fn code(&self, connect: &str) -> String {
        let a = self.consent(connect, "approve").await;
        assert_eq!(a.status, 303, "{}", a.body);
        a.query()["code"].clone()
    }

    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let r = self
            .post("/oauth/token")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(form.iter().copied()))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn exchange(&self, code: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect),
            ("code_verifier", &self.verifier),
        ])
        .await
    }

    async fn refresh(&self, refresh: &str) -> (u16, Value) {
        self.token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh),
            ("client_id", &self.client_id),
        ])
        .await
    }

    /// The whole dance: access and refresh token for `connect`.
    async fn sign_in(&self, connect: &str) -> Value {
        let code = self.code(connect).await;
        let (status, tokens) = self.exchange(&code).await;
        assert_eq!(status, 200, "{tokens}");
        tokens
    }
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn encode<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

async fn answer(r: reqwest::Response) -> Answer {
    Answer {
        status: r.status().as_u16(),
        location: r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: r.text().await.unwrap_or_default(),
    }
}

/// The official Python SDK's OAuth client discovers, registers, signs in
/// through the consent page, calls tools as the connect code's agent, and
/// refreshes (rotating the refresh token) by itself.
#[tokio::test]
async fn python_sdk_oauth_client_does_the_whole_dance() {
    for method in ["default", "none"] {
        let s = TestServer::start().await;
        let code = connect_code(&s, grant("phone", "lobby")).await;
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/oauth_client.py");
        let out = tokio::process::Command::new(python())
            .arg(script)
            .arg(format!("{}/mcp", s.url))
            .arg(&code)
            .arg(method)
            .output()
            .await
            .expect("run python");
        assert!(
            out.status.success(),
            "python OAuth client failed ({method}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert_eq!(v["whoami"]["agent"], "phone");
        assert_eq!(v["whoami"]["room"], "lobby");
        assert_eq!(v["whoami_after_refresh"]["agent"], "phone");
        assert_eq!(v["posted"]["ok"], true);
        assert_eq!(v["page"]["client_name"], "Python SDK test app");
        assert_eq!(v["page"]["has_csrf"], true);
        assert!(
            v["page"]["csp"]
                .as_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        let expected_method = if method == "none" {
            "none"
        } else {
            "client_secret_basic"
        };
        assert_eq!(v["auth_method"], expected_method);
        let tokens = v["tokens"].as_array().unwrap();
        assert_eq!(tokens.len(), 2, "one exchange and one refresh: {tokens:?}");
        assert_ne!(tokens[0]["access_token"], tokens[1]["access_token"]);
        assert_ne!(tokens[0]["refresh_token"], tokens[1]["refresh_token"]);
        assert_eq!(tokens[0]["expires_in"], 3600);
        assert_eq!(tokens[0]["scope"], "chatroom");
        // What the app posted is in the room, by the agent the code named.
        let alice = s.agent("alice", "lobby").await;
        let read = alice.call("read_messages", json!({})).await;
        assert_eq!(read["messages"][0]["author"], "phone");
        assert_eq!(read["messages"][0]["body"], "hello over OAuth");
        // No secret the app holds is in the database file.
        if !s.on_postgres() {
            let stopped = s.stop_keeping_files().await;
            let mut db = Vec::new();
            for f in std::fs::read_dir(stopped.path()).unwrap() {
                // A `-wal` or `-shm` file may go between the listing and
                // the read (its content is then in the main file).
                if let Ok(bytes) = std::fs::read(f.unwrap().path()) {
                    db.extend(bytes);
                }
            }
            let db = String::from_utf8_lossy(&db);
            let mut secrets: Vec<String> = vec![code.clone()];
            for t in tokens {
                secrets.push(t["access_token"].as_str().unwrap().into());
                secrets.push(t["refresh_token"].as_str().unwrap().into());
            }
            if let Some(secret) = v["client_secret"].as_str() {
                secrets.push(secret.into());
            }
            for secret in secrets {
                assert!(!db.contains(&secret), "a secret is in the database file");
            }
        }
    }
}

/// The `WWW-Authenticate` header of an answer.
fn www_auth(r: &reqwest::Response) -> String {
    r.headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Both protected-resource metadata paths and the authorization-server
/// metadata say what SPEC §2a lists, with URLs of the request's host.
#[tokio::test]
async fn discovery_metadata_is_complete() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let v: Value = http
            .get(format!("{}{path}", s.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // RFC 9728 §3.3: the resource is the URL the metadata URL was made
        // from — the server itself at the root, `/mcp` below it.
        let resource = if path.ends_with("/mcp") {
            format!("{}/mcp", s.url)
        } else {
            s.url.clone()
        };
        assert_eq!(v["resource"], resource, "{path}");
        assert_eq!(v["authorization_servers"], json!([s.url]));
        assert_eq!(v["scopes_supported"], json!(["chatroom"]));
        assert_eq!(v["bearer_methods_supported"], json!(["header"]));
    }
    let v: Value = http
        .get(format!("{}/.well-known/oauth-authorization-server", s.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["issuer"], s.url);
    for (key, path) in [
        ("authorization_endpoint", "/oauth/authorize"),
        ("token_endpoint", "/oauth/token"),
        ("registration_endpoint", "/oauth/register"),
        ("revocation_endpoint", "/oauth/revoke"),
    ] {
        assert_eq!(v[key], format!("{}{path}", s.url));
    }
    assert_eq!(v["response_types_supported"], json!(["code"]));
    assert_eq!(
        v["grant_types_supported"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(v["code_challenge_methods_supported"], json!(["S256"]));
    assert!(
        v["token_endpoint_auth_methods_supported"]
            .as_array()
            .unwrap()
            .contains(&json!("none"))
    );
    assert_eq!(v["client_id_metadata_document_supported"], true);
    assert_eq!(v["authorization_response_iss_parameter_supported"], true);
    // Through the public side, the URLs are CHATROOM_PUBLIC_URL's.
    let p = TestServer::start_with(|c| {
        c.public_url = Some("https://rooms.example.org".into());
    })
    .await;
    let v: Value = http
        .get(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            p.url
        ))
        .header("cf-ray", "1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["resource"], "https://rooms.example.org/mcp");
    assert_eq!(
        v["authorization_servers"],
        json!(["https://rooms.example.org"])
    );
}

/// Every `401` of `/mcp` and `/v1` points at the metadata, and says
/// `invalid_token` when a token was sent.
#[tokio::test]
async fn every_401_carries_the_resource_metadata_hint() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    let hint = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        s.url
    );
    let mcp = || {
        http.post(format!("{}/mcp", s.url))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
    };
    let none = mcp().send().await.unwrap();
    assert_eq!(none.status(), 401);
    let h = www_auth(&none);
    assert!(h.starts_with("Bearer ") && h.contains(&hint), "{h}");
    assert!(!h.contains("invalid_token"), "{h}");
    let body: Value = none.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let bad = mcp().bearer_auth("cra_nonsense").send().await.unwrap();
    assert_eq!(bad.status(), 401);
    let h = www_auth(&bad);
    assert!(
        h.contains(&hint) && h.contains("error=\"invalid_token\""),
        "{h}"
    );
    for path in ["/v1/rooms", "/v1/whats_new", "/v1/stream"] {
        let r = http.get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert!(www_auth(&r).contains(&hint), "{path}");
        let r = http
            .get(format!("{}{path}", s.url))
            .bearer_auth("cr_wrong")
            .send()
            .await
            .unwrap();
        assert!(www_auth(&r).contains("invalid_token"), "{path}");
    }
}

/// `CHATROOM_OAUTH=off` removes every OAuth route and the hint.
#[tokio::test]
async fn oauth_off_removes_routes_and_hint() {
    let s = TestServer::start_with(|c| c.oauth = false).await;
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/oauth/authorize",
        "/oauth/consent.css",
    ] {
        let r = http.get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    for path in ["/oauth/register", "/oauth/token", "/oauth/revoke"] {
        let r = http.post(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let r = http
        .get(format!("{}/v1/rooms", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(www_auth(&r), "Bearer");
}

/// Registration takes https and loopback-http redirect URIs only, answers
/// RFC 7591 errors for bad metadata, and is rate-limited per address.
#[tokio::test]
async fn registration_refuses_bad_metadata_and_floods() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    let register = |body: String| {
        http.post(format!("{}/oauth/register", s.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let ok = register(json!({"redirect_uris": ["https://claude.ai/api/mcp/auth_callback"], "client_name": "Claude"}).to_string()).await.unwrap();
    assert_eq!(ok.status(), 201);
    let v: Value = ok.json().await.unwrap();
    assert!(v["client_id"].as_str().unwrap().starts_with("crcl_"));
    assert_eq!(v["token_endpoint_auth_method"], "client_secret_basic");
    assert!(v["client_secret"].as_str().unwrap().starts_with("crcs_"));
    for uris in [
        json!(["http://example.com/cb"]),
        json!(["http://192.168.1.2/cb"]),
        json!(["javascript:alert(1)"]),
        json!(["https://a.example/cb#x"]),
        json!(["cb"]),
        json!([]),
        json!([7]),
        json!(null),
    ] {
        let r = register(json!({ "redirect_uris": uris }).to_string())
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{uris}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_redirect_uri", "{uris}");
    }
    for body in [
        "not json".to_owned(),
        "[]".to_owned(),
        json!({"redirect_uris": [REDIRECT], "grant_types": ["password"]}).to_string(),
        json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"})
            .to_string(),
        json!({"redirect_uris": [REDIRECT], "client_name": 5}).to_string(),
    ] {
        let r = register(body.clone()).await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_client_metadata", "{body}");
    }
    // 14 registrations so far; the address may make 30 an hour.
    let mut statuses = Vec::new();
    for _ in 0..20 {
        let r = register(json!({"redirect_uris": [REDIRECT]}).to_string())
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        16,
        "{statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&429));
}

/// An unknown client or an unregistered redirect URI gets the error page,
/// never a redirect; so does every error of a client the owner never
/// approved (anyone can register one naming any address: no open
/// redirect); PKCE missing or plain and a foreign `resource` are sent back
/// to the redirect URI of a client approved before.
#[tokio::test]
async fn authorize_refuses_without_open_redirects() {
    let s = TestServer::start().await;
    let app = App::register(&s).await;
    let evil = App::register_with(&s, "https://evil.example/landing").await;
    let mut bad = evil.authorize_params();
    bad.retain(|(k, _)| k != "code_challenge");
    let a = evil.get_authorize(&bad).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(
        a.location.is_none(),
        "an unapproved client is never redirected to"
    );
    assert!(a.body.contains("nothing was sent"), "{}", a.body);
    // Approved once by the owner: from then on its errors go back to it.
    app.sign_in(&connect_code(&s, grant("tablet", "lobby")).await)
        .await;
    let with = |key: &str, value: Option<&str>| {
        let mut p = app.authorize_params();
        p.retain(|(k, _)| k != key);
        if let Some(v) = value {
            p.push((key.into(), v.into()));
        }
        p
    };
    for params in [
        with("client_id", Some("crcl_unknown")),
        with("client_id", None),
        with("redirect_uri", Some("https://evil.example/cb")),
        with(
            "redirect_uri",
            Some("http://127.0.0.1:53682/callback/other"),
        ),
    ] {
        let a = app.get_authorize(&params).await;
        assert_eq!(a.status, 400, "{params:?}");
        assert!(a.location.is_none(), "{params:?}");
        assert!(a.body.contains("id=\"error\""), "{}", a.body);
    }
    for (params, error) in [
        (with("code_challenge", None), "invalid_request"),
        (
            with("code_challenge_method", Some("plain")),
            "invalid_request",
        ),
        (with("code_challenge_method", None), "invalid_request"),
        (with("code_challenge", Some("short")), "invalid_request"),
        (
            with("response_type", Some("token")),
            "unsupported_response_type",
        ),
        (
            with("resource", Some("https://other.example/mcp")),
            "invalid_target",
        ),
    ] {
        let a = app.get_authorize(&params).await;
        assert_eq!(a.status, 303, "{params:?}: {}", a.body);
        assert!(a.location.as_deref().unwrap().starts_with(REDIRECT));
        let q = a.query();
        assert_eq!(q["error"], error, "{params:?}");
        assert_eq!(q["state"], "st4te");
        assert_eq!(q["iss"], s.url);
    }
    // A repeated parameter is refused on the page.
    let mut twice = app.authorize_params();
    twice.push(("state".into(), "again".into()));
    let a = app.get_authorize(&twice).await;
    assert_eq!(a.status, 400);
    assert!(a.location.is_none());
}

/// The consent page: a wrong or used connect code shows the page again with
/// an error; deny sends `access_denied`; a forged form is refused; a right
/// code redirects with `code`, `state` and `iss`.
#[tokio::test]
async fn consent_page_takes_one_right_code_once() {
    let s = TestServer::start().await;
    let app = App::register(&s).await;
    let connect = connect_code(&s, grant("tablet", "lobby")).await;
    let page = app.get_authorize(&app.authorize_params()).await;
    assert!(page.body.contains("Test app"));
    assert!(
        page.body.contains("127.0.0.1:53682"),
        "names where it returns"
    );
    let wrong = app.consent("crc-0000-0000-0000", "approve").await;
    assert_eq!(wrong.status, 400);
    assert!(wrong.location.is_none());
    assert!(
        wrong.body.contains("wrong, used or expired"),
        "{}",
        wrong.body
    );
    let garbage = app.consent("not a code at all", "approve").await;
    assert_eq!(garbage.status, 400);
    let denied = app.consent(&connect, "deny").await;
    assert_eq!(denied.status, 303);
    assert_eq!(denied.query()["error"], "access_denied");
    assert_eq!(denied.query()["state"], "st4te");
    // A form whose fields were changed after the page made it.
    let mut forged = page.fields();
    forged.insert("state".into(), "other".into());
    forged.insert("connect_code".into(), connect.clone());
    forged.insert("decision".into(), "approve".into());
    let r = app.post_authorize(&forged).await;
    assert_eq!(r.status, 403);
    assert!(r.location.is_none());
    let mut no_csrf = page.fields();
    no_csrf.remove("csrf");
    no_csrf.insert("connect_code".into(), connect.clone());
    no_csrf.insert("decision".into(), "approve".into());
    assert_eq!(app.post_authorize(&no_csrf).await.status, 403);
    // The right code, typed loosely, once.
    let loose = connect.to_uppercase().replace('-', " ");
    let ok = app.consent(&loose, "approve").await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    let q = ok.query();
    assert!(q["code"].starts_with("crac_"));
    assert_eq!(q["state"], "st4te");
    assert_eq!(q["iss"], s.url);
    let again = app.consent(&connect, "approve").await;
    assert_eq!(again.status, 400);
    assert!(again.body.contains("wrong, used or expired"));
}

/// Wrong connect codes count in the failed-auth throttle: past the limit the
/// address gets `429`, even with a right code.
#[tokio::test]
async fn wrong_connect_codes_are_throttled() {
    let s = TestServer::start_with(|c| c.auth_fail_limit = 3).await;
    let app = App::register(&s).await;
    let connect = connect_code(&s, grant("tablet", "lobby")).await;
    for _ in 0..3 {
        assert_eq!(
            app.consent("crc-0000-0000-0000", "approve").await.status,
            400
        );
    }
    let blocked = app.consent(&connect, "approve").await;
    assert_eq!(blocked.status, 429);
    assert!(blocked.location.is_none());
}

/// The token endpoint refuses a wrong or missing PKCE verifier, another
/// client, another redirect URI, a foreign resource, unknown grant types and
/// clients; a replayed authorization code revokes the tokens it gave.
#[tokio::test]
async fn token_endpoint_refusals() {
    let s = TestServer::start().await;
    let app = App::register(&s).await;
    let other = App::register(&s).await;
    let post = |form: Vec<(&'static str, String)>| {
        let app = &app;
        async move {
            let pairs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            app.token(&pairs).await
        }
    };
    let err = |v: &Value| v["error"].as_str().unwrap_or("").to_owned();
    // Each refusal spends a fresh code where it needs one.
    let code = app
        .code(&connect_code(&s, grant("a1", "lobby")).await)
        .await;
    let (st, v) = post(vec![
        ("grant_type", "authorization_code".into()),
        ("code", code.clone()),
        ("client_id", app.client_id.clone()),
        ("redirect_uri", REDIRECT.into()),
        ("code_verifier", format!("w{}", "x".repeat(50))),
    ])
    .await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_grant".into()),
        "wrong verifier"
    );
    let code = app
        .code(&connect_code(&s, grant("a2", "lobby")).await)
        .await;
    let (st, v) = post(vec![
        ("grant_type", "authorization_code".into()),
        ("code", code),
        ("client_id", app.client_id.clone()),
        ("redirect_uri", REDIRECT.into()),
    ])
    .await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_request".into()),
        "no verifier"
    );
    let code = app
        .code(&connect_code(&s, grant("a3", "lobby")).await)
        .await;
    let (st, v) = other.exchange(&code).await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_grant".into()),
        "another client"
    );
    let code = app
        .code(&connect_code(&s, grant("a4", "lobby")).await)
        .await;
    let (st, v) = post(vec![
        ("grant_type", "authorization_code".into()),
        ("code", code),
        ("client_id", app.client_id.clone()),
        ("redirect_uri", "http://127.0.0.1:1/other".into()),
        ("code_verifier", app.verifier.clone()),
    ])
    .await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_grant".into()),
        "another redirect"
    );
    let code = app
        .code(&connect_code(&s, grant("a5", "lobby")).await)
        .await;
    let (st, v) = post(vec![
        ("grant_type", "authorization_code".into()),
        ("code", code),
        ("client_id", app.client_id.clone()),
        ("redirect_uri", REDIRECT.into()),
        ("code_verifier", app.verifier.clone()),
        ("resource", "https://elsewhere.example/mcp".into()),
    ])
    .await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_target".into()),
        "foreign resource"
    );
    for (form, status, error) in [
        (
            vec![
                ("grant_type", "password".to_owned()),
                ("client_id", app.client_id.clone()),
            ],
            400,
            "unsupported_grant_type",
        ),
        (
            vec![("client_id", app.client_id.clone())],
            400,
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "authorization_code".to_owned()),
                ("code", "crac_x".into()),
                ("client_id", "crcl_forgotten".into()),
            ],
            401,
            "invalid_client",
        ),
        (
            vec![
                ("grant_type", "refresh_token".to_owned()),
                ("refresh_token", "crr_x".into()),
            ],
            401,
            "invalid_client",
        ),
        (
            vec![
                ("grant_type", "authorization_code".to_owned()),
                ("code", "nonsense".into()),
                ("client_id", app.client_id.clone()),
                ("code_verifier", app.verifier.clone()),
            ],
            400,
            "invalid_grant",
        ),
    ] {
        let (st, v) = post(form.clone()).await;
        assert_eq!((st, err(&v)), (status, error.into()), "{form:?}");
    }
    // Not a form at all.
    let r = reqwest::Client::new()
        .post(format!("{}/oauth/token", s.url))
        .json(&json!({"grant_type": "authorization_code"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_request");
    // A replayed code: refused, and the tokens it gave stop working.
    let code = app
        .code(&connect_code(&s, grant("a6", "lobby")).await)
        .await;
    let (st, tokens) = app.exchange(&code).await;
    assert_eq!(st, 200);
    let mcp = s.mcp(tokens["access_token"].as_str().unwrap());
    assert_eq!(mcp.call("whoami", json!({})).await["agent"], "a6");
    let (st, v) = app.exchange(&code).await;
    assert_eq!(
        (st, err(&v)),
        (400, "invalid_grant".into()),
        "replayed code"
    );
    let (st, _) = mcp
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(st, 401, "a replayed code revokes its grant");
}

/// Refresh tokens rotate. The token just replaced, presented again within
/// 30 s (on the server's clock, moved by hand), gets the same successor and
/// a fresh access token; later, or two rotations old, it revokes the whole
/// grant.
#[tokio::test]
async fn refresh_tokens_rotate_with_a_grace_then_reuse_revokes_the_grant() {
    let clock = chatroom::clock::Clock::manual(chatroom::clock::now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let app = App::register(&s).await;
    let first = app
        .sign_in(&connect_code(&s, grant("phone", "lobby")).await)
        .await;
    let r1 = first["refresh_token"].as_str().unwrap();
    let (st, second) = app.refresh(r1).await;
    assert_eq!(st, 200, "{second}");
    assert_eq!(second["token_type"], "Bearer");
    let r2 = second["refresh_token"].as_str().unwrap();
    assert_ne!(r1, r2);
    let a2 = s.mcp(second["access_token"].as_str().unwrap());
    assert_eq!(a2.call("whoami", json!({})).await["agent"], "phone");
    // The other client may not use this grant's refresh token.
    let other = App::register(&s).await;
    assert_eq!(other.refresh(r2).await.1["error"], "invalid_grant");
    // The answer was lost: r1 again, 29 s later, gets r2 again.
    clock.advance(std::time::Duration::from_secs(29));
    let (st, retry) = app.refresh(r1).await;
    assert_eq!(st, 200, "{retry}");
    assert_eq!(retry["refresh_token"], r2, "the same successor");
    assert_ne!(retry["access_token"], second["access_token"]);
    let a2b = s.mcp(retry["access_token"].as_str().unwrap());
    assert_eq!(a2b.call("whoami", json!({})).await["agent"], "phone");
    // Past the grace, the spent r1 is a leak: the grant goes, r2 and the
    // access tokens with it.
    clock.advance(std::time::Duration::from_secs(2));
    let (st, v) = app.refresh(r1).await;
    assert_eq!((st, v["error"].as_str().unwrap()), (400, "invalid_grant"));
    assert_eq!(app.refresh(r2).await.1["error"], "invalid_grant");
    for token in [&a2, &a2b] {
        let (st, _) = token
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await;
        assert_eq!(st, 401);
    }
    // Two rotations old, even within 30 s of the last rotation: revoked.
    let t = app
        .sign_in(&connect_code(&s, grant("tablet", "lobby")).await)
        .await;
    let t1 = t["refresh_token"].as_str().unwrap();
    let (_, t2) = app.refresh(t1).await;
    let (st, t3) = app.refresh(t2["refresh_token"].as_str().unwrap()).await;
    assert_eq!(st, 200, "{t3}");
    let (st, v) = app.refresh(t1).await;
    assert_eq!((st, v["error"].as_str().unwrap()), (400, "invalid_grant"));
    let (st, v) = app.refresh(t3["refresh_token"].as_str().unwrap()).await;
    assert_eq!(
        (st, v["error"].as_str().unwrap()),
        (400, "invalid_grant"),
        "{v}"
    );
}

/// Many requests at once with one refresh token, over their own sockets
/// (two tabs, a retry racing its original): every one gets the same
/// successor, the grant lives on, and the successor refreshes — on SQLite's
/// single writer and on PostgreSQL across two replicas alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_refreshes_get_one_successor() {
    let s = TestServer::start().await;
    let replica = if s.on_postgres() {
        Some(s.replica().await)
    } else {
        None
    };
    let app = App::register(&s).await;
    let first = app
        .sign_in(&connect_code(&s, grant("phone", "lobby")).await)
        .await;
    let r1 = first["refresh_token"].as_str().unwrap().to_owned();
    let mut calls = Vec::new();
    for i in 0..8 {
        let base = match (&replica, i % 2) {
            (Some(r), 1) => r.url.clone(),
            _ => s.url.clone(),
        };
        let form = encode(
            [
                ("grant_type", "refresh_token"),
                ("refresh_token", r1.as_str()),
                ("client_id", app.client_id.as_str()),
            ]
            .into_iter(),
        );
        calls.push(tokio::spawn(async move {
            // A client of its own: a socket of its own.
            let r = reqwest::Client::new()
                .post(format!("{base}/oauth/token"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }));
    }
    let mut successors = std::collections::HashSet::new();
    let mut access = std::collections::HashSet::new();
    for call in calls {
        let (st, v) = call.await.unwrap();
        assert_eq!(st, 200, "{v}");
        successors.insert(v["refresh_token"].as_str().unwrap().to_owned());
        access.insert(v["access_token"].as_str().unwrap().to_owned());
    }
    assert_eq!(successors.len(), 1, "one successor: {successors:?}");
    assert_eq!(access.len(), 8, "a fresh access token each");
    let r2 = successors.into_iter().next().unwrap();
    for a in &access {
        assert_eq!(s.mcp(a).call("whoami", json!({})).await["agent"], "phone");
    }
    let (st, v) = app.refresh(&r2).await;
    assert_eq!(st, 200, "the successor refreshes: {v}");
}

/// An OAuth access token works on `/mcp` and `/v1` with the agent, rooms
/// and flags of its connect code: read-only stays read-only, rooms outside
/// the grant are forbidden.
#[tokio::test]
async fn grants_carry_the_connect_codes_rooms_and_flags() {
    let s = TestServer::start().await;
    s.room("other").await;
    let app = App::register(&s).await;
    let watcher = app
        .sign_in(
            &connect_code(
                &s,
                Grant {
                    readonly: true,
                    also_rooms: vec!["side".into()],
                    ..grant("watcher", "lobby")
                },
            )
            .await,
        )
        .await;
    let token = watcher["access_token"].as_str().unwrap();
    let mcp = s.mcp(token);
    let me = mcp.call("whoami", json!({})).await;
    assert_eq!(me["agent"], "watcher");
    // An app's agent is a member of its rooms.
    let agents = mcp.call("list_agents", json!({"room": "side"})).await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent"] == "watcher" && a["is_you"] == true),
        "{agents}"
    );
    assert_eq!(me["readonly"], true);
    assert_eq!(me["rooms"], json!(["lobby", "side"]));
    assert_eq!(
        mcp.refused("post_message", json!({"body": "hi"})).await,
        "read_only"
    );
    mcp.call("read_messages", json!({"room": "side"})).await;
    assert_eq!(
        mcp.refused("read_messages", json!({"room": "other"})).await,
        "forbidden"
    );
    let r = reqwest::Client::new()
        .get(format!("{}/v1/rooms", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["agent"], "watcher");
    // The live stream serves it too.
    let mut stream = reqwest::Client::new()
        .get(format!("{}/v1/stream?after=now", s.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let first = stream.chunk().await.unwrap().expect("a first event");
    assert!(
        String::from_utf8_lossy(&first).contains("event:"),
        "{first:?}"
    );
    drop(stream);
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", s.url))
        .bearer_auth(token)
        .json(&json!({"body": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

/// Revocation: the RFC 7009 endpoint and `admin revoke --agent` end a grant
/// at once; `list-tokens` shows grants with their app's name; an expired
/// access token is refused.
#[tokio::test]
async fn revocation_listing_and_expiry() {
    let clock = chatroom::clock::Clock::manual(chatroom::clock::now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let app = App::register(&s).await;
    // The endpoint.
    let t = app
        .sign_in(&connect_code(&s, grant("phone", "lobby")).await)
        .await;
    let mcp = s.mcp(t["access_token"].as_str().unwrap());
    mcp.call("whoami", json!({})).await;
    let r = app
        .http
        .post(format!("{}/oauth/revoke", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode(
            [
                ("token", t["refresh_token"].as_str().unwrap()),
                ("client_id", app.client_id.as_str()),
            ]
            .into_iter(),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (st, _) = mcp
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(st, 401, "revoking the refresh token ends the grant");
    // An unknown token is fine (RFC 7009 §2.2); no token is not.
    let r = app
        .http
        .post(format!("{}/oauth/revoke", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode(
            [
                ("token", "crr_unknown"),
                ("client_id", app.client_id.as_str()),
            ]
            .into_iter(),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .http
        .post(format!("{}/oauth/revoke", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode([("client_id", app.client_id.as_str())].into_iter()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // `admin revoke --agent` and `list-tokens`.
    let t = app
        .sign_in(&connect_code(&s, grant("laptop", "lobby")).await)
        .await;
    let mcp = s.mcp(t["access_token"].as_str().unwrap());
    mcp.call("whoami", json!({})).await;
    let env = s.cli_env();
    let (code, out, _) = run_cli(&["admin", "list-tokens"], &env).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("laptop") && out.contains("\"Test app\""),
        "{out}"
    );
    let (code, out, err) = run_cli(&["admin", "revoke", "--agent", "laptop"], &env).await;
    assert_eq!(code, 0, "{out}{err}");
    let (st, _) = mcp
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(st, 401, "admin revoke ends the grant at once");
    assert_eq!(
        app.refresh(t["refresh_token"].as_str().unwrap()).await.1["error"],
        "invalid_grant"
    );
    let (_, out, _) = run_cli(&["admin", "list-tokens", "--json"], &env).await;
    let list: Value = serde_json::from_str(&out).unwrap();
    let laptop = list
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["agent"] == "laptop")
        .unwrap();
    assert_eq!(laptop["kind"], "oauth");
    assert_eq!(laptop["client_name"], "Test app");
    assert!(laptop["revoked_ts"].is_string());
    // `purge-tokens` forgets revoked grants with revoked tokens.
    let (code, out, err) = run_cli(
        &["admin", "purge-tokens", "--older-than-days", "0", "--yes"],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (_, out, _) = run_cli(&["admin", "list-tokens", "--json"], &env).await;
    assert!(!out.contains("laptop"), "{out}");
    // Expiry.
    let t = app
        .sign_in(&connect_code(&s, grant("tv", "lobby")).await)
        .await;
    let mcp = s.mcp(t["access_token"].as_str().unwrap());
    mcp.call("whoami", json!({})).await;
    // Its lifetime passes on the server's clock: refused at once, on
    // either backend (no cache keeps it past its expiry).
    let ttl = t["expires_in"].as_u64().unwrap();
    clock.advance(std::time::Duration::from_secs(ttl - 1));
    mcp.call("whoami", json!({})).await;
    clock.advance(std::time::Duration::from_secs(2));
    let (st, _) = mcp
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(st, 401, "an expired access token is refused");
}

/// `chatroom admin connect` prints a `crc-` code alone on a line (or JSON),
/// refuses bad arguments, and the code signs an app in.
#[tokio::test]
async fn admin_connect_mints_codes() {
    let clock = chatroom::clock::Clock::manual(chatroom::clock::now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    s.room("lobby").await;
    let env = s.cli_env();
    let (code, out, err) = run_cli(
        &[
            "admin", "connect", "--agent", "phone", "--room", "lobby", "--lead",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let line = out.trim();
    assert!(line.starts_with("crc-") && !line.contains(' '), "{out}");
    let (code, out, _) = run_cli(
        &[
            "admin",
            "connect",
            "--agent",
            "phone2",
            "--room",
            "lobby",
            "--ttl-minutes",
            "5",
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["code"].as_str().unwrap().starts_with("crc-"));
    assert_eq!(v["agent"], "phone2");
    assert_eq!(v["ttl_minutes"], 5);
    for args in [
        vec!["admin", "connect", "--agent", "x", "--room", "nope"],
        vec![
            "admin",
            "connect",
            "--agent",
            "x",
            "--room",
            "lobby",
            "--ttl-minutes",
            "0",
        ],
        vec!["admin", "connect", "--agent", "bad name", "--room", "lobby"],
    ] {
        let (code, _, err) = run_cli(&args, &env).await;
        assert_ne!(code, 0, "{args:?}");
        assert!(!err.trim().is_empty());
    }
    let app = App::register(&s).await;
    let t = app.sign_in(line).await;
    let me = s
        .mcp(t["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["agent"], "phone");
    assert_eq!(me["lead"], true);
    // An expired code is refused like a wrong one.
    let (_, out, _) = run_cli(
        &["admin", "connect", "--agent", "late", "--room", "lobby"],
        &env,
    )
    .await;
    // Its 15 minutes (counted from the command line's own clock) pass on
    // the server's, with room for however long the steps above took.
    clock.advance(std::time::Duration::from_secs(20 * 60));
    let a = app.consent(out.trim(), "approve").await;
    assert_eq!(a.status, 400);
}

/// A client ID metadata document is fetched only from public addresses:
/// URLs on loopback (by name or literal) get the error page, never a fetch.
#[tokio::test]
async fn metadata_documents_on_private_addresses_are_refused() {
    let s = TestServer::start().await;
    let app = App::register(&s).await;
    for client_id in [
        format!("https://localhost:{}/client.json", s.addr.port()),
        format!("https://127.0.0.1:{}/client.json", s.addr.port()),
        "https://10.0.0.1/client.json".to_owned(),
        "https://[::1]/client.json".to_owned(),
        "https://localhost/client.json".to_owned(),
    ] {
        let mut params = app.authorize_params();
        params.retain(|(k, _)| k != "client_id");
        params.push(("client_id".into(), client_id.clone()));
        let a = app.get_authorize(&params).await;
        assert_eq!(a.status, 400, "{client_id}");
        assert!(a.location.is_none());
        assert!(
            a.body.contains("not on a public address") || a.body.contains("port 443"),
            "{client_id}: {}",
            a.body
        );
    }
    let mut params = app.authorize_params();
    params.retain(|(k, _)| k != "client_id");
    params.push((
        "client_id".into(),
        format!("http://127.0.0.1:{}/c.json", s.addr.port()),
    ));
    let a = app.get_authorize(&params).await;
    assert_eq!(a.status, 400);
    assert!(a.location.is_none());
}

/// The consent page comes from one server and is answered through another
/// on the same database (PostgreSQL replicas when given), the code is
/// exchanged through the second and the token used through the first.
#[tokio::test]
async fn a_sign_in_spans_replicas() {
    let a = TestServer::start().await;
    let b = TestServer::on_database(&a.db_url).await;
    let app_a = App::register(&a).await;
    let connect = connect_code(&a, grant("phone", "lobby")).await;
    let page = app_a.get_authorize(&app_a.authorize_params()).await;
    assert_eq!(page.status, 200);
    let mut form = page.fields();
    form.insert("connect_code".into(), connect);
    form.insert("decision".into(), "approve".into());
    // Both answer to one name, as replicas behind a load balancer do.
    let app_b = App {
        base: b.url.clone(),
        host: Some(a.addr.to_string()),
        ..app_a
    };
    let answer = app_b.post_authorize(&form).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let code = answer.query()["code"].clone();
    let (st, tokens) = app_b.exchange(&code).await;
    assert_eq!(st, 200, "{tokens}");
    let me = a
        .mcp(tokens["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["agent"], "phone");
}

/// rmcp's client-side OAuth (the Rust SDK) discovers, registers, signs in
/// through the consent page answered over HTTP, refreshes, and calls tools
/// through its authorized transport.
#[tokio::test]
async fn rmcp_oauth_client_does_the_whole_dance() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::auth::{AuthClient, AuthorizationRequest, OAuthState};
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let s = TestServer::start().await;
    let connect = connect_code(
        &s,
        Grant {
            lead: true,
            ..grant("rusty", "lobby")
        },
    )
    .await;
    let mcp_url = format!("{}/mcp", s.url);
    let mut state = OAuthState::new(&mcp_url, None).await.expect("oauth state");
    state
        .start_authorization(
            AuthorizationRequest::new(REDIRECT)
                .with_client_name("rmcp test app")
                .with_initial_scope_selection(),
        )
        .await
        .expect("discover and register");
    let url = state
        .get_authorization_url()
        .await
        .expect("authorization URL");
    // The browser: open the page, type the code, approve.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = answer(browser.get(&url).send().await.unwrap()).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("rmcp test app"));
    let mut form = page.fields();
    form.insert("connect_code".into(), connect);
    form.insert("decision".into(), "approve".into());
    let approved = answer(
        browser
            .post(format!("{}/oauth/authorize", s.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(form.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(approved.status, 303, "{}", approved.body);
    state
        .handle_callback_url(approved.location.as_deref().unwrap())
        .await
        .expect("exchange the code");
    let manager = state.into_authorization_manager().expect("authorized");
    let first = manager.get_access_token().await.unwrap();
    manager.refresh_token().await.expect("refresh");
    let second = manager.get_access_token().await.unwrap();
    assert_ne!(first, second, "a refresh issues a new access token");
    let transport = StreamableHttpClientTransport::with_client(
        AuthClient::new(reqwest::Client::default(), manager),
        StreamableHttpClientTransportConfig::with_uri(mcp_url),
    );
    let client = ().serve(transport).await.expect("initialize");
    let params = rmcp::model::CallToolRequestParams::new("whoami");
    let me = client
        .call_tool(params)
        .await
        .unwrap()
        .structured_content
        .unwrap();
    assert_eq!(me["agent"], "rusty");
    assert_eq!(me["lead"], true);
    client.cancel().await.unwrap();
}

/// A writer into a shared buffer, for capturing the server's log.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// No connect code, authorization code, token or client secret reaches the
/// log, at any level, through a whole sign-in with its refusals.
#[tokio::test]
async fn no_secret_in_the_log() {
    let log = LogBuffer::default();
    let writer = log.clone();
    let _ = tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let s = TestServer::start().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let reg: Value = http
        .post(format!("{}/oauth/register", s.url))
        .json(&json!({"client_name": "Logged app", "redirect_uris": [REDIRECT]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let secret = reg["client_secret"].as_str().unwrap().to_owned();
    let (verifier, challenge) = pkce();
    let app = App {
        http,
        base: s.url.clone(),
        client_id: reg["client_id"].as_str().unwrap().to_owned(),
        verifier,
        challenge,
        host: None,
        redirect: REDIRECT.to_owned(),
    };
    let connect = connect_code(&s, grant("phone", "lobby")).await;
    app.consent("crc-0000-0000-0000", "approve").await;
    let code = app.code(&connect).await;
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", app.client_id, secret));
    let token = |form: &[(&str, &str)]| {
        let request = app
            .post("/oauth/token")
            .header("authorization", format!("Basic {basic}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(form.iter().copied()));
        async move {
            let v: Value = request.send().await.unwrap().json().await.unwrap();
            v
        }
    };
    let exchange = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", app.verifier.as_str()),
    ];
    let first = token(&exchange).await;
    let access = first["access_token"].as_str().expect("tokens").to_owned();
    let refresh = first["refresh_token"].as_str().unwrap().to_owned();
    s.mcp(&access).call("whoami", json!({})).await;
    let second = token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh)]).await;
    let refresh2 = second["refresh_token"].as_str().unwrap().to_owned();
    let third = token(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", &refresh2),
    ])
    .await;
    let refresh3 = third["refresh_token"].as_str().unwrap().to_owned();
    // Refusals that carry the secrets: a replayed code and a refresh token
    // two rotations old, a dead access token.
    token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh)]).await;
    token(&exchange).await;
    s.mcp(&access)
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    s.stop().await;
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("an app was connected"),
        "the log was captured"
    );
    assert!(text.contains("spent refresh token"), "the reuse was logged");
    for secret in [
        &connect, &code, &access, &refresh, &refresh2, &refresh3, &secret,
    ] {
        assert!(!text.contains(secret.as_str()), "a secret is in the log");
    }
}

/// The console's "Connect an app" mints a connect code for a whole-server
/// admin only, with the `/mcp` URL and steps, and the code signs an app in.
#[tokio::test]
async fn console_connect_an_app() {
    let s = TestServer::start_with(|c| c.admin_api = true).await;
    s.room("lobby").await;
    let admin = s
        .token_with(Grant {
            admin: true,
            all_rooms: true,
            ..grant("owner", "lobby")
        })
        .await;
    let plain = s.token("bob", "lobby").await;
    let http = reqwest::Client::new();
    let body = json!({"agent": "phone", "room": "lobby", "readonly": true, "ttl_minutes": 30});
    let r = http
        .post(format!("{}/v1/admin/connect", s.url))
        .bearer_auth(&plain)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .post(format!("{}/v1/admin/connect", s.url))
        .bearer_auth(&admin)
        .json(&json!({"agent": "phone", "room": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .post(format!("{}/v1/admin/connect", s.url))
        .bearer_auth(&admin)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let v: Value = r.json().await.unwrap();
    let code = v["code"].as_str().unwrap();
    assert!(code.starts_with("crc-"));
    assert_eq!(v["ttl_minutes"], 30);
    assert_eq!(v["mcp_url"]["lan"], format!("{}/mcp", s.url));
    assert!(
        v["steps"]["claude_ai"]
            .as_str()
            .unwrap()
            .contains("Add custom connector")
    );
    assert!(
        v["steps"]["claude_code"]
            .as_str()
            .unwrap()
            .starts_with("claude mcp add --transport http")
    );
    let app = App::register(&s).await;
    let t = app.sign_in(code).await;
    let me = s
        .mcp(t["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(
        (me["agent"].as_str(), me["readonly"].as_bool()),
        (Some("phone"), Some(true))
    );
    // The admin log names the mint, never the code.
    let state: Value = http
        .get(format!("{}/v1/admin/state", s.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["oauth"]["enabled"], true);
    assert_eq!(state["oauth"]["grants"][0]["agent"], "phone");
    assert_eq!(state["oauth"]["grants"][0]["client_name"], "Test app");
    let log = state.to_string();
    assert!(log.contains("oauth.connect"), "{log:.500}");
    assert!(!log.contains(code));
}

/// One sign-in in real Chromium, at a phone's width: the consent page shows
/// the app and where it returns, says so when a code is wrong, and with the
/// right code sends the browser back to the app with a code that exchanges.
#[tokio::test]
async fn consent_page_in_a_real_browser() {
    let Ok(node_modules) = std::env::var("CHATROOM_TEST_NODE_MODULES") else {
        panic!(
            "CHATROOM_TEST_NODE_MODULES is not set: it must name the node_modules folder holding \
             playwright-core (.ci/run installs it and sets the variable)"
        );
    };
    let s = TestServer::start().await;
    // The app's end of the redirect: a listener that answers anything.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirect = format!("http://{}/callback", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 15\r\nconnection: close\r\n\r\nback in the app")
                    .await;
            });
        }
    });
    let app = App::register_with(&s, &redirect).await;
    let connect = connect_code(&s, grant("phone", "lobby")).await;
    let auth_url = format!(
        "{}/oauth/authorize?{}",
        s.url,
        encode(
            app.authorize_params()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
        )
    );
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&target).unwrap();
    let shot = target.join("oauth-consent.png");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/oauth.mjs");
    let out = tokio::process::Command::new("node")
        .arg(script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_AUTH_URL", &auth_url)
        .env("CHATROOM_CONNECT_CODE", &connect)
        .env("CHATROOM_REDIRECT", &redirect)
        .env("CHATROOM_SHOT", &shot)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run node (is Node.js installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "driver failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["clientName"], "Test app");
    assert_eq!(
        v["returnHost"].as_str().unwrap(),
        redirect
            .trim_start_matches("http://")
            .trim_end_matches("/callback")
    );
    assert_eq!(v["overflow"], false, "no sideways scroll on a phone");
    assert_ne!(
        v["styled"], "rgba(0, 0, 0, 0)",
        "the stylesheet loaded: {v}"
    );
    assert!(
        v["wrong"]
            .as_str()
            .unwrap()
            .contains("wrong, used or expired")
    );
    // The page with the wrong-code message is itself a `400`, which Chromium
    // reports; nothing else may go wrong.
    let problems: Vec<&Value> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p.as_str().unwrap().contains("status of 400"))
        .collect();
    assert!(problems.is_empty(), "{v}");
    let callback = reqwest::Url::parse(v["callback"].as_str().unwrap()).unwrap();
    let q: HashMap<String, String> = callback.query_pairs().into_owned().collect();
    assert_eq!(q["state"], "st4te");
    assert_eq!(q["iss"], s.url);
    let (st, tokens) = app.exchange(&q["code"]).await;
    assert_eq!(st, 200, "{tokens}");
    let me = s
        .mcp(tokens["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["agent"], "phone");
    assert!(shot.exists());
}

/// The console's "Connect an app" button in real Chromium mints a code from
/// the mint form's choices, the code signs an app in, and "Signed-in apps"
/// then lists it with its app's name.
#[tokio::test]
async fn console_connect_an_app_in_a_real_browser() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let node_modules = std::env::var("CHATROOM_TEST_NODE_MODULES").expect(
        "CHATROOM_TEST_NODE_MODULES names playwright-core's node_modules (.ci/run sets it)",
    );
    let s = TestServer::start_with(|c| c.admin_api = true).await;
    s.room("lobby").await;
    let admin = s
        .token_with(Grant {
            admin: true,
            all_rooms: true,
            ..grant("owner", "lobby")
        })
        .await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/browser/oauth_console.mjs"
    );
    let mut child = tokio::process::Command::new("node")
        .arg(script)
        .env("NODE_PATH", &node_modules)
        .env("CHATROOM_UI_URL", &s.url)
        .env("CHATROOM_UI_TOKEN", &admin)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    // A stuck driver fails the test instead of hanging the suite.
    let driver_line = std::time::Duration::from_secs(120);
    let first = tokio::time::timeout(driver_line, lines.next_line())
        .await
        .expect("the browser driver printed no code within 120 s")
        .unwrap()
        .unwrap_or_default();
    let Some(code) = first.strip_prefix("CODE ") else {
        let out = child.wait_with_output().await.unwrap();
        panic!("driver: {first}\n{}", String::from_utf8_lossy(&out.stderr));
    };
    let app = App::register(&s).await;
    let t = app.sign_in(code.trim()).await;
    let me = s
        .mcp(t["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(
        (me["agent"].as_str(), me["readonly"].as_bool()),
        (Some("tablet"), Some(true))
    );
    stdin.write_all(b"GO\n").await.unwrap();
    let result = tokio::time::timeout(driver_line, lines.next_line())
        .await
        .expect("the browser driver printed no result within 120 s")
        .unwrap()
        .unwrap_or_default();
    let status = child.wait().await.unwrap();
    let Some(json_text) = result.strip_prefix("RESULT ") else {
        panic!("driver: {result} ({status})");
    };
    let v: Value = serde_json::from_str(json_text).unwrap();
    assert!(
        v["steps"]
            .as_str()
            .unwrap()
            .contains("Add custom connector"),
        "{v}"
    );
    assert!(v["listed"].as_str().unwrap().contains("tablet"), "{v}");
    assert!(v["listed"].as_str().unwrap().contains("Test app"), "{v}");
    assert_eq!(v["problems"], json!([]), "{v}");
    assert!(status.success());
}

/// Claude Code's way (RFC 8252 §7.3): it registers
/// `http://localhost/callback` and comes back on whatever port it opened at
/// run time. The port-less registration matches; the token request must
/// name the redirect URI again (RFC 6749 §4.1.3), with the same loopback
/// rule; every other address still has to match exactly.
#[tokio::test]
async fn loopback_redirect_on_a_port_chosen_at_run_time() {
    let s = TestServer::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut app = App::register_with(&s, "http://localhost/callback").await;
    app.redirect = format!("http://localhost:{port}/callback");
    let page = app.get_authorize(&app.authorize_params()).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains(&format!("localhost:{port}")),
        "{}",
        page.body
    );
    let code = app
        .code(&connect_code(&s, grant("claude-code", "lobby")).await)
        .await;
    // Without redirect_uri at the token endpoint: refused, the code kept.
    let (st, v) = app
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &app.client_id),
            ("code_verifier", &app.verifier),
        ])
        .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (400, Some("invalid_request")),
        "{v}"
    );
    // A fresh code, exchanged as the client does.
    let code = app
        .code(&connect_code(&s, grant("claude-code", "lobby")).await)
        .await;
    let (st, tokens) = app.exchange(&code).await;
    assert_eq!(st, 200, "{tokens}");
    let me = s
        .mcp(tokens["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["agent"], "claude-code");
    // Another path, another host or a non-loopback port change: the page.
    for other in [
        format!("http://localhost:{port}/other"),
        format!("http://127.0.0.1:{port}/callback"),
    ] {
        let mut p = app.authorize_params();
        p.retain(|(k, _)| k != "redirect_uri");
        p.push(("redirect_uri".into(), other.clone()));
        let a = app.get_authorize(&p).await;
        assert_eq!(a.status, 400, "{other}");
        assert!(a.location.is_none());
    }
    let mut web = App::register_with(&s, "https://app.example/cb").await;
    web.redirect = "https://app.example:8443/cb".into();
    let a = web.get_authorize(&web.authorize_params()).await;
    assert_eq!(a.status, 400, "https redirects match exactly");
    drop(listener);
}

/// Cursor's and VS Code's private-use schemes (RFC 8252 §7.1) register, as
/// public clients; the consent page names the scheme the code goes to, and
/// approving sends the browser there. `javascript:`, `data:`, `file:`,
/// `vbscript:`, `about:`, `blob:` and plain `http` off loopback are still
/// `invalid_redirect_uri`.
#[tokio::test]
async fn native_app_schemes_register_as_public_clients() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    let register = |uris: Value, method: Option<&str>| {
        let mut body = json!({"client_name": "Cursor", "redirect_uris": uris});
        if let Some(m) = method {
            body["token_endpoint_auth_method"] = json!(m);
        }
        http.post(format!("{}/oauth/register", s.url))
            .json(&body)
            .send()
    };
    for uri in [
        "cursor://anysphere.cursor-retrieval/oauth/user-chatroom/callback",
        "vscode://vscode.github-authentication/did-authenticate",
    ] {
        let r = register(json!([uri]), None).await.unwrap();
        assert_eq!(r.status(), 201, "{uri}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v["token_endpoint_auth_method"], "none",
            "a native app is public"
        );
        assert!(v.get("client_secret").is_none());
    }
    for bad in [
        "javascript:alert(1)",
        "data:text/html,hi",
        "file:///etc/passwd",
        "vbscript:msgbox",
        "about:blank",
        "blob:https://a.example/1",
        "http://example.com/cb",
    ] {
        let r = register(json!([bad]), Some("none")).await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_redirect_uri", "{bad}");
    }
    let app = App::register_with(&s, "cursor://anysphere.cursor-retrieval/oauth/cb").await;
    let page = app.get_authorize(&app.authorize_params()).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("cursor:"), "{}", page.body);
    let a = app
        .consent(&connect_code(&s, grant("cursor", "lobby")).await, "approve")
        .await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert!(
        a.location
            .as_deref()
            .unwrap()
            .starts_with("cursor://anysphere.cursor-retrieval/oauth/cb?")
    );
    let (st, tokens) = app.exchange(&a.query()["code"]).await;
    assert_eq!(st, 200, "{tokens}");
}

/// `CHATROOM_OAUTH_CIMD=off`: an app whose client_id is a URL is told, on
/// the page, to register instead, and the metadata no longer offers it.
#[tokio::test]
async fn client_metadata_documents_can_be_turned_off() {
    let s = TestServer::start_with(|c| c.oauth_cimd = false).await;
    let app = App::register(&s).await;
    let mut params = app.authorize_params();
    params.retain(|(k, _)| k != "client_id");
    params.push(("client_id".into(), "https://app.example/client.json".into()));
    let a = app.get_authorize(&params).await;
    assert_eq!(a.status, 400);
    assert!(a.body.contains("CHATROOM_OAUTH_CIMD=off"), "{}", a.body);
    let v: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["client_id_metadata_document_supported"], false);
}

/// Browser-run clients: `/oauth/register`, `/oauth/token` and
/// `/oauth/revoke` answer preflights and carry CORS headers for any origin;
/// `/mcp` only for an origin in `CHATROOM_ALLOWED_ORIGINS`, and any other
/// origin still gets `403`, preflight included.
#[tokio::test]
async fn cors_for_browser_run_clients() {
    let s = TestServer::start().await;
    let http = reqwest::Client::new();
    let preflight = |path: &str, origin: &str| {
        http.request(reqwest::Method::OPTIONS, format!("{}{path}", s.url))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, authorization",
            )
            .send()
    };
    let acao = |r: &reqwest::Response| {
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    for path in ["/oauth/register", "/oauth/token", "/oauth/revoke"] {
        let r = preflight(path, "https://inspector.example").await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        assert_eq!(acao(&r).as_deref(), Some("*"), "{path}");
        let allowed = r.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(allowed.contains("authorization"), "{path}: {allowed}");
    }
    let r = http
        .post(format!("{}/oauth/register", s.url))
        .header("origin", "https://inspector.example")
        .json(&json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(acao(&r).as_deref(), Some("*"));
    // /mcp: the default list holds the loopback origins.
    let ok = "http://localhost:6274";
    let r = preflight("/mcp", ok).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(acao(&r).as_deref(), Some(ok));
    let r = http
        .post(format!("{}/mcp", s.url))
        .header("origin", ok)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(acao(&r).as_deref(), Some(ok));
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(exposed.contains("www-authenticate"), "{exposed}");
    let r = preflight("/mcp", "https://evil.example").await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(acao(&r).is_none());
}

/// Registrations are limited per address, IPv6 counted by its /64 (a host
/// there holds 2^64 addresses); another network registers on.
#[tokio::test]
async fn registrations_are_limited_per_ipv6_network() {
    let s = TestServer::start_with(|c| c.trust_proxy = true).await;
    let http = reqwest::Client::new();
    let register = |from: String| {
        http.post(format!("{}/oauth/register", s.url))
            .header("x-forwarded-for", from)
            .json(&json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
            .send()
    };
    for i in 0..30 {
        let r = register(format!("2001:db8:7:1:{i:x}::1")).await.unwrap();
        assert_eq!(r.status(), 201, "{i}");
    }
    let r = register("2001:db8:7:1:ffff::1".into()).await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    let r = register("2001:db8:7:2::1".into()).await.unwrap();
    assert_eq!(r.status(), 201, "another /64");
}

/// The store of registrations never stays full: an unused registration
/// expires after an hour (the server's clock, moved by hand), and when the
/// store is at its cap the oldest unused one makes room; a client that
/// signed in is never evicted.
#[tokio::test]
async fn unused_registrations_expire_and_the_oldest_makes_room() {
    use chatroom::domain::oauth::OAuthClient;
    use chatroom::domain::store::oauth::ClientLimit;
    let clock = chatroom::clock::Clock::manual(chatroom::clock::now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let idle = App::register(&s).await;
    let used = App::register(&s).await;
    used.sign_in(&connect_code(&s, grant("phone", "lobby")).await)
        .await;
    clock.advance(std::time::Duration::from_secs(61 * 60));
    App::register(&s).await; // registering sweeps
    let page = idle.get_authorize(&idle.authorize_params()).await;
    assert_eq!(page.status, 400);
    assert!(
        page.body.contains("forgotten after an hour"),
        "{}",
        page.body
    );
    let (st, v) = idle.refresh("crr_whatever").await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("invalid_client")),
        "register again"
    );
    let page = used.get_authorize(&used.authorize_params()).await;
    assert_eq!(page.status, 200, "a client that signed in stays");
    // At a cap of 3 (2 stored now: `used` and the last one), the oldest
    // unused goes first; `used` never does.
    let client = |id: &str, at: i64| OAuthClient {
        client_id: id.into(),
        secret_hash: None,
        client_name: id.into(),
        redirect_uris: vec![REDIRECT.into()],
        auth_method: "none".into(),
        created_ts: at,
        used_ts: None,
    };
    let now = clock.now_ms();
    let before = now - 3_600_000;
    for (i, id) in ["crcl_a", "crcl_b", "crcl_c"].iter().enumerate() {
        assert!(
            s.store
                .oauth_insert_client(
                    &client(id, now + i as i64),
                    ClientLimit {
                        max: 3,
                        unused_before: before,
                    },
                )
                .await
                .unwrap()
        );
    }
    assert!(
        s.store
            .oauth_client(&used.client_id)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        s.store.oauth_client("crcl_a").await.unwrap().is_none(),
        "the oldest unused went"
    );
    assert!(s.store.oauth_client("crcl_c").await.unwrap().is_some());
}

/// The connect-code form has a throttle of its own: wrong bearer tokens
/// from the same address (everyone behind a tunnel without
/// `CHATROOM_TRUST_PROXY`) never lock out the owner's right code; wrong
/// codes do.
#[tokio::test]
async fn bad_bearer_tokens_do_not_block_the_connect_code() {
    let s = TestServer::start_with(|c| c.auth_fail_limit = 3).await;
    let http = reqwest::Client::new();
    for _ in 0..5 {
        http.get(format!("{}/v1/rooms", s.url))
            .bearer_auth("cr_wrong")
            .send()
            .await
            .unwrap();
    }
    let r = http
        .get(format!("{}/v1/rooms", s.url))
        .bearer_auth("cr_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "the bearer throttle is on");
    let app = App::register(&s).await;
    let ok = app
        .consent(&connect_code(&s, grant("tablet", "lobby")).await, "approve")
        .await;
    assert_eq!(ok.status, 303, "{}", ok.body);
}

/// The token endpoint is rate limited per grant: a refresh loop gets `429`
/// with `Retry-After` after a dozen a minute, and the grant still works.
#[tokio::test]
async fn refresh_loops_are_rate_limited_per_grant() {
    let s = TestServer::start().await;
    let app = App::register(&s).await;
    let mut t = app
        .sign_in(&connect_code(&s, grant("phone", "lobby")).await)
        .await;
    let mut statuses = Vec::new();
    for _ in 0..14 {
        let (st, v) = app.refresh(t["refresh_token"].as_str().unwrap()).await;
        statuses.push(st);
        if st == 200 {
            t = v;
        } else {
            assert_eq!(v["error"], "temporarily_unavailable", "{v}");
        }
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        12,
        "{statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&429));
    let me = s
        .mcp(t["access_token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["agent"], "phone");
}

/// An agent known only through an OAuth grant is a member of its room for
/// the mention index: `@claudeweb` reaches its `my_mentions` and flags
/// `mentions_you` in its `whats_new` (both backends).
#[tokio::test]
async fn an_app_agent_gets_its_mentions() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let app = App::register(&s).await;
    let t = app
        .sign_in(&connect_code(&s, grant("claudeweb", "lobby")).await)
        .await;
    let web = s.mcp(t["access_token"].as_str().unwrap());
    web.call("whats_new", json!({})).await;
    let agents = alice.call("list_agents", json!({})).await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent"] == "claudeweb"),
        "{agents}"
    );
    alice
        .call(
            "post_message",
            json!({"body": "@claudeweb please look at #1"}),
        )
        .await;
    let m = web.call("my_mentions", json!({})).await;
    assert_eq!(m["count"], 1, "{m}");
    let news = web.call("whats_new", json!({})).await;
    let flagged = news["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["mentions_you"] == true);
    assert!(flagged, "{news}");
}

/// A stream opened with an OAuth access token ends when that token
/// expires, saying why; nothing is delivered on it after that.
#[tokio::test]
async fn a_stream_ends_when_its_access_token_expires() {
    let s =
        TestServer::start_with(|c| c.oauth_access_ttl = std::time::Duration::from_secs(2)).await;
    let alice = s.agent("alice", "lobby").await;
    let app = App::register(&s).await;
    let t = app
        .sign_in(&connect_code(&s, grant("claudeweb", "lobby")).await)
        .await;
    let mut stream = common::rest::Rest::new(&s.url, t["access_token"].as_str().unwrap())
        .stream("after=now")
        .await;
    let mut last = None;
    while let Some(e) = stream.next_within(std::time::Duration::from_secs(60)).await {
        last = Some(e);
    }
    let last = last.expect("the stream says why it ends");
    assert!(last.data.to_string().contains("expired"), "{last:?}");
    // The app's next call with that token is refused too.
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/rooms", s.url))
        .bearer_auth(t["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    drop(alice);
}

/// An app known only through its OAuth grant has presence as any agent:
/// listed before its first call (`offline`), `online` from its calls, the
/// state it reports itself over `POST /v1/presence`; and `reach` answers
/// for it: `offline`, `next_turn` once it reported, `push` while a push
/// client of it follows the room.
#[tokio::test]
async fn oauth_apps_have_presence_and_reach() {
    let s = TestServer::start().await;
    let code = connect_code(&s, grant("webapp", "lobby")).await;
    let app = App::register(&s).await;
    let access = app.sign_in(&code).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let bob = s.agent("bob", "lobby").await;
    let http = reqwest::Client::new();
    let webapp = async || -> Value {
        let v: Value = http
            .get(format!("{}/v1/presence", s.url))
            .bearer_auth(&bob.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == "webapp")
            .cloned()
            .unwrap_or_else(|| panic!("the app is not listed: {v}"))
    };
    let reach = async || -> Value {
        bob.call("post_message", json!({"body": "@webapp are you there?"}))
            .await["reach"]["webapp"]
            .clone()
    };
    let p = webapp().await;
    assert_eq!(p["state"], "offline", "{p}");
    assert_eq!(p["state_source"], "activity", "{p}");
    assert_eq!(reach().await, "offline");

    s.mcp(&access).call("whoami", json!({})).await;
    let p = webapp().await;
    assert_eq!(p["state"], "online", "{p}");
    assert!(p["state_ts"].is_string(), "{p}");

    let r = http
        .post(format!("{}/v1/presence", s.url))
        .bearer_auth(&access)
        .json(&json!({"state": "working"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let p = webapp().await;
    assert_eq!(p["state"], "working", "{p}");
    assert_eq!(p["state_source"], "reported", "{p}");
    assert_eq!(reach().await, "next_turn");

    let stream = http
        .get(format!("{}/v1/stream?client=channel&after=now", s.url))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    common::wait_for_push(&s.url, &bob.token, "webapp").await;
    assert_eq!(reach().await, "push");
    drop(stream);
}
