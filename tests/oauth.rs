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
    let (code, _) = chatroom::domain::oauth::mint_connect_code(s.store.as_ref(), grant, 15)
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
        let mut out = HashMap::new();
        for input in self.body.split("<input").skip(1) {
            let attr = |name: &str| {
                let key = format!("{name}=\"");
                input.find(&key).map(|i| {
                    let rest = &input[i + key.len()..];
                    html_unescape(&rest[..rest.find('"').unwrap()])
                })
            };
            if attr("type").as_deref() == Some("hidden") {
                out.insert(attr("name").unwrap(), attr("value").unwrap_or_default());
            }
        }
        out
    }
}

fn html_unescape(s: &str) -> String {
    s.replace("&#x2f;", "/")
        .replace("&#47;", "/")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

impl App {
    /// Registers a public client with `REDIRECT`.
    async fn register(s: &TestServer) -> App {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = http
            .post(format!("{}/oauth/register", s.url))
            .json(&json!({"client_name": "Test app", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
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
        }
    }

    fn authorize_params(&self) -> Vec<(String, String)> {
        [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", REDIRECT),
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
            .http
            .post(format!("{}/oauth/authorize", self.base))
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
            .http
            .post(format!("{}/oauth/token", self.base))
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
            ("redirect_uri", REDIRECT),
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
                db.extend(std::fs::read(f.unwrap().path()).unwrap());
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
