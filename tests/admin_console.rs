//! The admin console over HTTP: `/admin` and `/v1/admin/*` — every gate
//! (off, public side, token kinds, throttle), every action, the admin log,
//! and that no answer ever carries a raw token it should not.

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use chatroom::auth::hosts::HostRule;
use chatroom::config::Config;
use common::{Grant, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

/// A client of the console API that keeps every answer it saw, so a test can
/// scan them all for raw tokens afterwards.
struct Console {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    seen: Mutex<Vec<(String, String)>>,
}

/// One answer: status, headers and body (JSON when it parses, else a string).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
    json: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

impl Console {
    fn new(s: &TestServer, token: Option<&str>) -> Console {
        Console {
            http: reqwest::Client::new(),
            base: s.url.clone(),
            token: token.map(str::to_owned),
            seen: Mutex::new(Vec::new()),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        self.seen
            .lock()
            .unwrap()
            .push((format!("{method} {path} -> {status}"), text.clone()));
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None, &[]).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(Method::POST, path, Some(body), &[]).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send(Method::DELETE, path, None, &[]).await
    }

    async fn state(&self) -> Value {
        let a = self.get("/v1/admin/state").await;
        assert_eq!(a.status, 200, "{}", a.text);
        a.json
    }
}

/// A server with the console on, a `lobby` room and a whole-server admin
/// `root`; `tweak` adjusts the configuration further.
async fn start(tweak: impl FnOnce(&mut Config)) -> (TestServer, String) {
    let s = TestServer::start_with(|c| {
        c.admin_api = true;
        tweak(c);
    })
    .await;
    s.room("lobby").await;
    let root = s
        .token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            all_rooms: true,
            ..Grant::default()
        })
        .await;
    (s, root)
}

/// Every console route with a body that would be valid for it.
fn every_route() -> Vec<(Method, &'static str, Option<Value>)> {
    vec![
        (Method::GET, "/admin", None),
        (Method::GET, "/admin/app.js", None),
        (Method::GET, "/admin/app.css", None),
        (Method::GET, "/v1/admin/state", None),
        (Method::POST, "/v1/admin/rooms", Some(json!({"name": "x"}))),
        (
            Method::POST,
            "/v1/admin/rooms/lobby/info",
            Some(json!({"description": "x"})),
        ),
        (
            Method::POST,
            "/v1/admin/rooms/lobby/retention",
            Some(json!({"days": 1})),
        ),
        (Method::DELETE, "/v1/admin/rooms/lobby?confirm=lobby", None),
        (
            Method::POST,
            "/v1/admin/tokens",
            Some(json!({"agent": "x", "room": "lobby"})),
        ),
        (
            Method::POST,
            "/v1/admin/tokens/revoke",
            Some(json!({"agent": "x"})),
        ),
        (
            Method::POST,
            "/v1/admin/tokens/purge",
            Some(json!({"older_than_days": 1})),
        ),
        // A wrong method must not tell the console apart from nothing.
        (Method::GET, "/v1/admin/tokens", None),
    ]
}

/// An answer as a probe sees it: status, header names (but `date`) with
/// their values (but `content-length`), and body.
type Shape = (u16, Vec<(String, String)>, String);

fn shape(a: &Answer) -> Shape {
    let mut headers: Vec<(String, String)> = a
        .headers
        .iter()
        .filter(|(k, _)| k.as_str() != "date")
        .map(|(k, v)| {
            let v = if k.as_str() == "content-length" {
                ""
            } else {
                v.to_str().unwrap()
            };
            (k.as_str().to_owned(), v.to_owned())
        })
        .collect();
    headers.sort();
    (a.status, headers, a.text.clone())
}

/// What the server answers for a path that does not exist: a hidden
/// console must answer exactly the same.
async fn unknown_route(c: &Console, path: &str, headers: &[(&str, &str)]) -> Shape {
    shape(&c.send(Method::GET, path, None, headers).await)
}

/// Asserts that `a` looks exactly like the answer to an unknown path.
fn same_as_unknown(a: &Answer, unknown: &Shape, what: &str) {
    assert_eq!(
        &shape(a),
        unknown,
        "{what} must look like a path that does not exist"
    );
}

/// With `CHATROOM_ADMIN_API` off, the assets and every API route answer
/// `404` exactly as a path that does not exist, with or without a
/// whole-server admin token, and nothing changes; the page itself is a
/// `404` that names `CHATROOM_ADMIN_API` on the LAN side, and a bare one,
/// like an unknown path, from the public side.
#[tokio::test]
async fn console_is_404_while_off() {
    let (s, root) = start(|c| c.admin_api = false).await;
    for token in [None, Some(root.as_str())] {
        let c = Console::new(&s, token);
        for (method, path, body) in every_route() {
            let a = c.send(method.clone(), path, body, &[]).await;
            assert_eq!(a.status, 404, "{method} {path} with {token:?}: {}", a.text);
            if method == Method::GET && path == "/admin" {
                assert!(
                    a.text.contains("CHATROOM_ADMIN_API=on"),
                    "the page says how to turn the console on: {}",
                    a.text
                );
                assert!(
                    a.headers["content-type"]
                        .to_str()
                        .unwrap()
                        .starts_with("text/html")
                );
                assert!(!a.text.contains("lobby"), "the page holds no data");
                let public = c
                    .send(Method::GET, path, None, &[("CF-Ray", "8a1b2c3d4e5f-AMS")])
                    .await;
                same_as_unknown(
                    &public,
                    &unknown_route(&c, "/no-such-page", &[("CF-Ray", "8a1b2c3d4e5f-AMS")]).await,
                    "/admin from the public side while off",
                );
                continue;
            }
            let probe = if path.starts_with("/v1/") {
                "/v1/no-such-route"
            } else {
                "/no-such-page"
            };
            same_as_unknown(
                &a,
                &unknown_route(&c, probe, &[]).await,
                &format!("{method} {path}"),
            );
        }
    }
    assert!(s.store.get_room("lobby").await.unwrap().is_some());
    assert!(s.store.get_room("x").await.unwrap().is_none());
}

/// With `CHATROOM_CONSOLE_LAN_ONLY` on, requests through the public side (an
/// edge header, or a Host in `CHATROOM_PUBLIC_HOSTS`) get `404` before
/// authentication, even with a valid admin token; LAN requests get in, and
/// with LAN-only off the public side does too.
#[tokio::test]
async fn public_side_gets_404() {
    let allow = |c: &mut Config| {
        let mut rules = HostRule::loopback();
        rules.push(HostRule::parse("chat.example.com").unwrap());
        c.allowed_hosts = Some(rules);
        c.public_hosts = vec!["chat.example.com".into()];
    };
    let (s, root) = start(allow).await;
    let edges: [(&str, &str); 5] = [
        ("CF-Ray", "8a1b2c3d4e5f-AMS"),
        ("CF-Connecting-IP", "203.0.113.9"),
        ("CF-IPCountry", "NL"),
        ("X-Forwarded-For", "203.0.113.9"),
        ("Host", "chat.example.com"),
    ];
    for token in [None, Some(root.as_str())] {
        let c = Console::new(&s, token);
        for edge in edges {
            for (method, path, body) in every_route() {
                let a = c.send(method.clone(), path, body, &[edge]).await;
                assert_eq!(a.status, 404, "{method} {path} via {edge:?}: {}", a.text);
                let probe = if path.starts_with("/v1/") {
                    "/v1/no-such-route"
                } else {
                    "/no-such-page"
                };
                let unknown = unknown_route(&c, probe, &[edge]).await;
                same_as_unknown(&a, &unknown, &format!("{method} {path} via {edge:?}"));
            }
        }
    }
    let lan = Console::new(&s, Some(&root));
    assert_eq!(lan.get("/v1/admin/state").await.status, 200);
    assert_eq!(lan.get("/admin").await.status, 200);

    let (open, root) = start(|c| {
        allow(c);
        c.console_lan_only = false;
    })
    .await;
    let c = Console::new(&open, Some(&root));
    for edge in edges {
        let a = c.send(Method::GET, "/v1/admin/state", None, &[edge]).await;
        assert_eq!(a.status, 200, "{edge:?}: {}", a.text);
    }
}

/// No or a bad token gets `401` (and counts for the throttle, `429` past
/// the limit); a plain token, a room admin and an all-rooms non-admin get
/// `403`; only admin + all_rooms gets in. A Host outside the allowlist is
/// `421` before any of it.
#[tokio::test]
async fn only_whole_server_admins_get_in() {
    let (s, root) = start(|c| c.auth_fail_limit = 3).await;
    let plain = s.token("alice", "lobby").await;
    let room_admin = s
        .token_with(Grant {
            agent: "ra".into(),
            room: "lobby".into(),
            admin: true,
            ..Grant::default()
        })
        .await;
    let everywhere = s
        .token_with(Grant {
            agent: "ops".into(),
            room: "lobby".into(),
            all_rooms: true,
            lead: true,
            ..Grant::default()
        })
        .await;
    for token in [plain.as_str(), room_admin.as_str(), everywhere.as_str()] {
        let c = Console::new(&s, Some(token));
        for (method, path, body) in every_route() {
            if path.starts_with("/admin") || method == Method::GET && path == "/v1/admin/tokens" {
                continue;
            }
            let a = c.send(method.clone(), path, body, &[]).await;
            assert_eq!(a.status, 403, "{method} {path}: {}", a.text);
            assert_eq!(a.code(), "forbidden");
        }
    }
    let c = Console::new(&s, Some(&root));
    assert_eq!(c.get("/v1/admin/state").await.status, 200);
    assert!(
        s.store.get_room("lobby").await.unwrap().is_some(),
        "nothing changed"
    );
    assert!(
        s.store.get_room("x").await.unwrap().is_none(),
        "nothing changed"
    );

    let wrong_host = c
        .send(
            Method::GET,
            "/v1/admin/state",
            None,
            &[("Host", "evil.example")],
        )
        .await;
    assert_eq!(wrong_host.status, 421);

    let anonymous = Console::new(&s, None);
    let a = anonymous.get("/v1/admin/state").await;
    assert_eq!(a.status, 401);
    assert!(
        a.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer resource_metadata=")
    );
    assert_eq!(a.code(), "unauthorized");
    let bad = Console::new(&s, Some("cr_notarealtoken"));
    assert_eq!(
        bad.post("/v1/admin/rooms", json!({"name": "y"}))
            .await
            .status,
        401
    );
    assert_eq!(bad.get("/v1/admin/state").await.status, 401);
    let throttled = anonymous.get("/v1/admin/state").await;
    assert_eq!(throttled.status, 429, "{}", throttled.text);
    assert!(throttled.headers.contains_key("retry-after"));
    assert_eq!(
        c.get("/v1/admin/state").await.status,
        200,
        "a valid token is never throttled"
    );
}

/// A read-only whole-server admin may look but not change anything.
#[tokio::test]
async fn readonly_admin_can_only_look() {
    let (s, _) = start(|_| {}).await;
    let t = s
        .token_with(Grant {
            agent: "auditor".into(),
            room: "lobby".into(),
            admin: true,
            all_rooms: true,
            readonly: true,
            ..Grant::default()
        })
        .await;
    let c = Console::new(&s, Some(&t));
    assert_eq!(c.get("/v1/admin/state").await.status, 200);
    let a = c.post("/v1/admin/rooms", json!({"name": "nope"})).await;
    assert_eq!((a.status, a.code()), (403, "read_only"), "{}", a.text);
    let a = c
        .post("/v1/admin/tokens", json!({"agent": "x", "room": "lobby"}))
        .await;
    assert_eq!((a.status, a.code()), (403, "read_only"));
    assert!(s.store.get_room("nope").await.unwrap().is_none());
}

/// `/admin` is a shell with no data, served with strict security headers,
/// no inline script or style, and its script and stylesheet from the binary.
#[tokio::test]
async fn page_is_a_shell_with_security_headers() {
    let (s, _) = start(|_| {}).await;
    s.room("secret-project").await;
    let c = Console::new(&s, None);
    let page = c.get("/admin").await;
    assert_eq!(page.status, 200);
    let h = &page.headers;
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("script-src 'self'") && csp.contains("style-src 'self'"));
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    assert!(csp.contains("frame-ancestors 'none'"));
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert!(!h.contains_key("set-cookie"));
    let html = &page.text;
    assert!(!html.contains("secret-project") && !html.contains("lobby"));
    assert!(!html.contains("style="), "no inline style attributes");
    assert!(!html.contains("<style"), "no inline style element");
    for (i, chunk) in html.split("<script").enumerate().skip(1) {
        assert!(
            chunk.starts_with(" type=\"module\" src=\"/admin/app.js"),
            "script #{i} is not the app's module"
        );
    }
    assert!(!has_event_attribute(html), "no inline event handlers");

    let js = c.get("/admin/app.js").await;
    assert_eq!(js.status, 200);
    assert!(
        js.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(js.text.contains("sessionStorage"));
    assert!(
        !js.text.contains("innerHTML"),
        "agent text goes in as text only"
    );
    let css = c.get("/admin/app.css").await;
    assert_eq!(css.status, 200);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}

/// Whether an HTML text holds an inline event handler attribute (`onclick=`…).
fn has_event_attribute(html: &str) -> bool {
    html.match_indices(" on").any(|(i, _)| {
        let rest = &html[i + 3..];
        let letters = rest.chars().take_while(|c| c.is_ascii_lowercase()).count();
        letters > 0 && rest[letters..].starts_with('=')
    })
}

/// Rooms are created with the name rules of SPEC §2 (bad names `400`, a
/// duplicate `409`, an oversized field `413`, unknown fields `400`).
#[tokio::test]
async fn create_room_checks_names() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    let a = c
        .post(
            "/v1/admin/rooms",
            json!({"name": "backend", "description": "the API", "repo_url": "https://git.example/api", "onboarding_notes": "read the README"}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    assert_eq!(a.json["room"]["name"], "backend");
    let room = s.store.get_room("backend").await.unwrap().unwrap();
    assert_eq!(room.description, "the API");
    assert_eq!(room.onboarding_notes, "read the README");
    for bad in [
        "",
        " ",
        "Back/end",
        "a b",
        "..",
        ".",
        "a/b",
        "../etc",
        "ä",
        &"a".repeat(65),
    ] {
        let a = c.post("/v1/admin/rooms", json!({"name": bad})).await;
        assert_eq!(
            (a.status, a.code()),
            (400, "invalid_argument"),
            "{bad:?}: {}",
            a.text
        );
    }
    let dup = c.post("/v1/admin/rooms", json!({"name": "backend"})).await;
    assert_eq!((dup.status, dup.code()), (409, "conflict"));
    let big = c
        .post(
            "/v1/admin/rooms",
            json!({"name": "big", "description": "x".repeat(2001)}),
        )
        .await;
    assert_eq!((big.status, big.code()), (413, "too_large"));
    assert!(s.store.get_room("big").await.unwrap().is_none());
    let typo = c
        .post("/v1/admin/rooms", json!({"name": "t", "descripton": "x"}))
        .await;
    assert_eq!((typo.status, typo.code()), (400, "invalid_argument"));
    let not_json = c
        .send(
            Method::POST,
            "/v1/admin/rooms",
            None,
            &[("Content-Type", "text/plain")],
        )
        .await;
    assert_eq!(
        (not_json.status, not_json.code()),
        (400, "invalid_argument")
    );
    let rooms: Vec<String> = c.state().await["rooms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rooms, ["backend", "lobby"]);
}

/// Minting answers the token once with setup text for the LAN and public
/// URLs; the token works over MCP, and the CLI command given mints the same
/// grant.
#[tokio::test]
async fn mint_gives_setup_for_both_urls() {
    let (s, root) = start(|c| {
        c.lan_url = Some("http://box.lan:8080".into());
        c.public_url = Some("https://chat.example.com".into());
    })
    .await;
    s.room("dev").await;
    let c = Console::new(&s, Some(&root));
    let a = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": "bob", "room": "lobby", "also_rooms": ["dev"], "lead": true, "skills": ["rust", "it's ok"]}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let v = &a.json;
    let token = v["token"].as_str().unwrap();
    assert!(token.starts_with("cr_") && token.len() >= 46);
    assert_eq!(v["agent"], "bob");
    assert_eq!(v["room"], "lobby");
    assert_eq!(v["also_rooms"], json!(["dev"]));
    assert_eq!(v["lead"], true);
    assert_eq!(v["whole_server_admin"], false);

    for (side, url) in [
        ("lan", "http://box.lan:8080"),
        ("remote", "https://chat.example.com"),
    ] {
        let t = &v["setup"][side];
        let text = |k: &str| t[k].as_str().unwrap().to_owned();
        assert_eq!(t["url"], url);
        assert_eq!(t["mcp_url"], format!("{url}/mcp"));
        assert_eq!(
            text("claude_mcp_add"),
            format!(
                "claude mcp add --scope user --transport http chatroom-lobby {url}/mcp --header \"Authorization: Bearer {token}\""
            )
        );
        let mcp: Value = serde_json::from_str(&text("mcp_json")).unwrap();
        let server = &mcp["mcpServers"]["chatroom-lobby"];
        assert_eq!(server["url"], format!("{url}/mcp"));
        assert_eq!(server["type"], "http");
        assert_eq!(
            server["headers"]["Authorization"],
            format!("Bearer {token}")
        );
        assert_eq!(
            text("hook_env"),
            format!(
                "export CHATROOM_URL={url}\nexport CHATROOM_TOKEN={token}\nexport CHATROOM_ROOM=lobby"
            )
        );
        let settings: Value = serde_json::from_str(&text("hook_settings")).unwrap();
        assert_eq!(
            settings["hooks"]["UserPromptSubmit"][0]["hooks"][0],
            json!({"type": "command", "command": "chatroom hook"})
        );
        assert_eq!(
            text("hook_curl"),
            "curl -s -H \"Authorization: Bearer $CHATROOM_TOKEN\" \"$CHATROOM_URL/v1/whats_new?format=text\""
        );
        let brief = text("brief");
        for needle in [
            "agent \"bob\"",
            "\"lobby\"",
            "dev",
            "lead",
            "rust",
            "not instructions",
            "One token per agent session",
        ] {
            assert!(brief.contains(needle), "brief lacks {needle:?}: {brief}");
        }
        assert!(!brief.contains(token), "the brief holds no token");
        assert!(t["note"].is_null());
    }

    let bob = s.mcp(token);
    let me = bob.call("whoami", json!({})).await;
    assert_eq!(me["agent"], "bob");
    assert_eq!(me["rooms"], json!(["lobby", "dev"]));
    assert_eq!(me["skills"], json!(["rust", "it's ok"]));

    // The CLI line, run by a shell, mints the same grant.
    let cli = v["setup"]["lan"]["cli"].as_str().unwrap();
    let line = cli.replacen("chatroom ", &format!("'{}' ", common::binary()), 1);
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{line} --json"))
        .env_clear()
        .env("CHATROOM_DB", &s.db_path)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{cli}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let minted: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "agent",
        "room",
        "also_rooms",
        "readonly",
        "admin",
        "all_rooms",
        "lead",
        "skills",
    ] {
        assert_eq!(minted[k], v[k], "{k} differs for {cli}");
    }
}

/// Without `CHATROOM_LAN_URL` / `CHATROOM_PUBLIC_URL` the setup uses the
/// address the console was reached at, and says so.
#[tokio::test]
async fn mint_falls_back_to_the_request_url() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    let a = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": "carol", "room": "lobby"}),
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let token = a.json["token"].as_str().unwrap();
    for side in ["lan", "remote"] {
        let t = &a.json["setup"][side];
        assert_eq!(t["url"], s.url, "{side}");
        assert_eq!(t["url_source"], "request");
        assert!(t["note"].as_str().unwrap().contains(if side == "lan" {
            "CHATROOM_LAN_URL"
        } else {
            "CHATROOM_PUBLIC_URL"
        }));
        assert!(t["claude_mcp_add"].as_str().unwrap().contains(&format!(
            "{}/mcp --header \"Authorization: Bearer {token}\"",
            s.url
        )));
    }
}

/// Minting refuses bad input with the domain's errors and stores nothing;
/// minting a whole-server admin is flagged.
#[tokio::test]
async fn mint_refusals_and_flag() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    let before = s.store.list_tokens().await.unwrap().len();
    for (body, status, code) in [
        (json!({"agent": "x", "room": "nosuch"}), 404, "not_found"),
        (
            json!({"agent": "x", "room": "lobby", "also_rooms": ["nosuch"]}),
            404,
            "not_found",
        ),
        (
            json!({"agent": "a b", "room": "lobby"}),
            400,
            "invalid_argument",
        ),
        (
            json!({"agent": "", "room": "lobby"}),
            400,
            "invalid_argument",
        ),
        (
            json!({"agent": "x", "room": "lob/by"}),
            400,
            "invalid_argument",
        ),
        (
            json!({"agent": "x", "room": "lobby", "skills": ["s".repeat(101)]}),
            413,
            "too_large",
        ),
        (
            json!({"agent": "x", "room": "lobby", "read_only": true}),
            400,
            "invalid_argument",
        ),
        (json!({"agent": "x"}), 400, "invalid_argument"),
    ] {
        let a = c.post("/v1/admin/tokens", body.clone()).await;
        assert_eq!((a.status, a.code()), (status, code), "{body}: {}", a.text);
    }
    assert_eq!(s.store.list_tokens().await.unwrap().len(), before);
    let a = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": "boss", "room": "lobby", "admin": true, "all_rooms": true}),
        )
        .await;
    assert_eq!(a.status, 201);
    assert_eq!(a.json["whole_server_admin"], true);
    let log = c.state().await["log"].clone();
    assert_eq!(log[0]["action"], "token.mint");
    assert_eq!(log[0]["flagged"], true);
}

/// Revoking kills every token of the agent at once (their next call is
/// `401`); revoking your own agent needs `confirm_self`.
#[tokio::test]
async fn revoke_with_self_guard() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    let bob1 = s.mcp(&s.token("bob", "lobby").await);
    let bob2 = s.mcp(&s.token("bob", "lobby").await);
    let alice = s.mcp(&s.token("alice", "lobby").await);
    bob1.call("whoami", json!({})).await;
    let a = c
        .post("/v1/admin/tokens/revoke", json!({"agent": "bob"}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json["revoked"], 2);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(bob1.rpc(&ping).await.0, 401);
    assert_eq!(bob2.rpc(&ping).await.0, 401);
    alice.call("whoami", json!({})).await;
    let again = c
        .post("/v1/admin/tokens/revoke", json!({"agent": "bob"}))
        .await;
    assert_eq!((again.status, again.code()), (404, "not_found"));

    let selfish = c
        .post("/v1/admin/tokens/revoke", json!({"agent": "root"}))
        .await;
    assert_eq!(
        (selfish.status, selfish.code()),
        (409, "conflict"),
        "{}",
        selfish.text
    );
    assert!(
        selfish.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("confirm_self")
    );
    let state = c.state().await;
    let roots: Vec<&Value> = state["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["agent"] == "root")
        .collect();
    assert!(roots[0]["revoked_ts"].is_null());
    assert_eq!(roots[0]["is_you"], true);
    let done = c
        .post(
            "/v1/admin/tokens/revoke",
            json!({"agent": "root", "confirm_self": true}),
        )
        .await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(c.get("/v1/admin/state").await.status, 401);
}

/// Purging deletes only tokens revoked longer ago than asked; bad day
/// counts are refused.
#[tokio::test]
async fn purge_revoked_tokens() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    s.token("old", "lobby").await;
    s.token("live", "lobby").await;
    c.post("/v1/admin/tokens/revoke", json!({"agent": "old"}))
        .await;
    let a = c
        .post("/v1/admin/tokens/purge", json!({"older_than_days": 1}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json["purged"], 0, "revoked just now: kept");
    let a = c
        .post("/v1/admin/tokens/purge", json!({"older_than_days": 0}))
        .await;
    assert_eq!(a.json["purged"], 1);
    let agents: Vec<String> = s
        .store
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.grant.agent)
        .collect();
    assert_eq!(agents, ["root", "live"]);
    for bad in [
        json!({"older_than_days": -1}),
        json!({"older_than_days": "x"}),
        json!({}),
    ] {
        let a = c.post("/v1/admin/tokens/purge", bad.clone()).await;
        assert_eq!((a.status, a.code()), (400, "invalid_argument"), "{bad}");
    }
}

/// Room info, retention and deletion from the console go through the
/// domain: members see the new info, retention is range-checked, deletion
/// needs the room name typed again.
#[tokio::test]
async fn room_info_retention_and_delete() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    let alice = s.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "hello"})).await;

    let a = c
        .post(
            "/v1/admin/rooms/lobby/info",
            json!({"description": "the front door", "onboarding_notes": "say hi"}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json["room"]["description"], "the front door");
    let info = alice.call("get_room_info", json!({})).await;
    assert_eq!(info["description"], "the front door");
    assert_eq!(info["onboarding_notes"], "say hi");
    let events = alice
        .call("read_events", json!({"kind": "room_info_updated"}))
        .await;
    assert_eq!(events["events"][0]["actor"], "root");
    let empty = c.post("/v1/admin/rooms/lobby/info", json!({})).await;
    assert_eq!((empty.status, empty.code()), (400, "invalid_argument"));
    let missing = c
        .post("/v1/admin/rooms/nosuch/info", json!({"description": "x"}))
        .await;
    assert_eq!((missing.status, missing.code()), (404, "not_found"));

    let a = c
        .post("/v1/admin/rooms/lobby/retention", json!({"days": 7}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json["room"]["retention_days"], 7);
    assert_eq!(
        s.store
            .get_room("lobby")
            .await
            .unwrap()
            .unwrap()
            .retention_days,
        7
    );
    for days in [-1, 3651] {
        let a = c
            .post("/v1/admin/rooms/lobby/retention", json!({"days": days}))
            .await;
        assert_eq!((a.status, a.code()), (400, "invalid_argument"), "{days}");
    }

    s.room("doomed").await;
    for path in [
        "/v1/admin/rooms/doomed",
        "/v1/admin/rooms/doomed?confirm=lobby",
        "/v1/admin/rooms/doomed?confirm=",
    ] {
        let a = c.delete(path).await;
        assert_eq!((a.status, a.code()), (400, "invalid_argument"), "{path}");
    }
    assert!(s.store.get_room("doomed").await.unwrap().is_some());
    let a = c.delete("/v1/admin/rooms/doomed?confirm=doomed").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(s.store.get_room("doomed").await.unwrap().is_none());
    let gone = c.delete("/v1/admin/rooms/doomed?confirm=doomed").await;
    assert_eq!((gone.status, gone.code()), (404, "not_found"));
}

/// The state shows posture (protections, hosts, URLs, limits, MQTT without
/// credentials) and counts.
#[tokio::test]
async fn state_shows_posture_and_counts() {
    let (s, root) = start(|c| {
        c.allowed_hosts = Some(vec![
            HostRule::parse("127.0.0.1:*").unwrap(),
            HostRule::parse("box.lan:8080").unwrap(),
        ]);
        c.auth_fail_limit = 7;
        c.lan_url = Some("http://box.lan:8080".into());
        c.mqtt = Some(chatroom::config::MqttConfig {
            host: "broker.lan".into(),
            port: 8883,
            user: Some("mqtt-user-name".into()),
            pass: Some("hunter2-secret".into()),
            prefix: "home/chat".into(),
            // TLS only where the build has it; the posture must say which.
            tls: chatroom::config::TLS_BUILT_IN,
            ha_discovery: false,
        });
    })
    .await;
    s.token("alice", "lobby").await;
    s.token("alice", "lobby").await;
    let c = Console::new(&s, Some(&root));
    let a = c.get("/v1/admin/state").await;
    assert_eq!(a.status, 200);
    assert!(!a.text.contains("hunter2-secret") && !a.text.contains("mqtt-user-name"));
    let p = &a.json["posture"];
    assert_eq!(p["host_check"]["on"], true);
    assert_eq!(
        p["host_check"]["allowed_hosts"],
        json!(["127.0.0.1:*", "box.lan:8080"])
    );
    assert_eq!(
        p["throttle"],
        json!({"on": true, "limit": 7, "window_s": 300, "tracked_addresses": 0})
    );
    assert_eq!(p["rate_limit"]["on"], false);
    assert_eq!(p["admin_api"], true);
    assert_eq!(p["console_lan_only"], true);
    assert_eq!(p["urls"]["lan_url"], "http://box.lan:8080");
    assert!(p["urls"]["public_url"].is_null());
    assert_eq!(p["max_file_bytes"], 1_048_576);
    assert_eq!(p["max_wait_s"], 90);
    let m = &p["mqtt"];
    assert_eq!(
        (
            m["host"].as_str(),
            m["port"].as_u64(),
            m["prefix"].as_str(),
            m["tls"].as_bool()
        ),
        (
            Some("broker.lan"),
            Some(8883),
            Some("home/chat"),
            Some(chatroom::config::TLS_BUILT_IN)
        )
    );
    assert_eq!(m["connected"], false);
    assert_eq!(m["published"], 0);
    assert_eq!(
        a.json["counts"],
        json!({"rooms": 1, "tokens": 3, "active_tokens": 3, "revoked_tokens": 0, "agents": 2})
    );
    assert_eq!(a.json["you"]["agent"], "root");
}

/// Every mutation lands in the admin log with actor, client address,
/// action and target; only whole-server admin mints are flagged.
#[tokio::test]
async fn admin_log_records_every_mutation() {
    let (s, root) = start(|_| {}).await;
    let c = Console::new(&s, Some(&root));
    assert_eq!(
        c.post("/v1/admin/rooms", json!({"name": "ops"}))
            .await
            .status,
        201
    );
    assert_eq!(
        c.post("/v1/admin/rooms/ops/info", json!({"description": "d"}))
            .await
            .status,
        200
    );
    assert_eq!(
        c.post("/v1/admin/rooms/ops/retention", json!({"days": 3}))
            .await
            .status,
        200
    );
    assert_eq!(
        c.post("/v1/admin/tokens", json!({"agent": "w", "room": "ops"}))
            .await
            .status,
        201
    );
    assert_eq!(
        c.post(
            "/v1/admin/tokens",
            json!({"agent": "boss", "room": "ops", "admin": true, "all_rooms": true})
        )
        .await
        .status,
        201
    );
    assert_eq!(
        c.post("/v1/admin/tokens/revoke", json!({"agent": "w"}))
            .await
            .status,
        200
    );
    assert_eq!(
        c.post("/v1/admin/tokens/purge", json!({"older_than_days": 30}))
            .await
            .status,
        200
    );
    assert_eq!(
        c.delete("/v1/admin/rooms/ops?confirm=ops").await.status,
        200
    );
    // A refused change is not a mutation.
    assert_eq!(
        c.post("/v1/admin/rooms", json!({"name": "Ba d"}))
            .await
            .status,
        400
    );

    let log = c.state().await["log"].as_array().unwrap().clone();
    let got: Vec<(String, String, bool)> = log
        .iter()
        .rev()
        .map(|e| {
            assert_eq!(e["actor"], "root");
            assert_eq!(e["address"], "127.0.0.1");
            (
                e["action"].as_str().unwrap().to_owned(),
                e["target"].as_str().unwrap().to_owned(),
                e["flagged"].as_bool().unwrap(),
            )
        })
        .collect();
    let actions: Vec<(&str, bool)> = got.iter().map(|(a, _, f)| (a.as_str(), *f)).collect();
    assert_eq!(
        actions,
        [
            ("room.create", false),
            ("room.info", false),
            ("room.retention", false),
            ("token.mint", false),
            ("token.mint", true),
            ("token.revoke", false),
            ("token.purge", false),
            ("room.delete", false),
        ]
    );
    assert_eq!(got[0].1, "room ops");
    assert!(
        got[4].1.contains("agent boss") && got[4].1.contains("admin, all_rooms"),
        "{}",
        got[4].1
    );
    assert!(got[5].1.contains("agent w"));
    assert_eq!(
        s.store.admin_log(100).await.unwrap().len(),
        8,
        "kept in the database"
    );
}

/// No answer of the console (state, lists, errors, every action) carries a
/// raw token, except each mint answer its own new token; a token pasted
/// into a bad body is not echoed in the error.
#[tokio::test]
async fn no_answer_carries_a_raw_token() {
    let (s, root) = start(|c| c.lan_url = Some("http://box.lan:8080".into())).await;
    let mut tokens = vec![root.clone(), s.token("alice", "lobby").await];
    let c = Console::new(&s, Some(&root));
    let mut own: HashMap<usize, String> = HashMap::new();
    c.post("/v1/admin/rooms", json!({"name": "dev"})).await;
    for (agent, admin) in [("bob", false), ("carol", true), ("dave", false)] {
        let a = c
            .post(
                "/v1/admin/tokens",
                json!({"agent": agent, "room": "dev", "admin": admin, "all_rooms": admin}),
            )
            .await;
        assert_eq!(a.status, 201);
        let t = a.json["token"].as_str().unwrap().to_owned();
        own.insert(c.seen.lock().unwrap().len() - 1, t.clone());
        tokens.push(t);
    }
    let bob = s.mcp(&tokens[2]);
    bob.call("post_message", json!({"body": "hi"})).await;
    c.post("/v1/admin/rooms/dev/info", json!({"description": "d"}))
        .await;
    c.post("/v1/admin/rooms/dev/retention", json!({"days": 5}))
        .await;
    c.post("/v1/admin/tokens/revoke", json!({"agent": "dave"}))
        .await;
    c.post("/v1/admin/tokens/purge", json!({"older_than_days": 0}))
        .await;
    c.post("/v1/admin/tokens/revoke", json!({"agent": "root"}))
        .await;
    c.post("/v1/admin/tokens/revoke", json!({"agent": tokens[1]}))
        .await;
    c.post(
        "/v1/admin/tokens/revoke",
        json!({"agent": "x", "confirm_self": tokens[1]}),
    )
    .await;
    c.post(
        "/v1/admin/tokens",
        json!({"agent": tokens[1], "room": "dev"}),
    )
    .await;
    c.post("/v1/admin/rooms", json!({"name": tokens[1]})).await;
    c.post(
        "/v1/admin/rooms",
        json!({"name": "x", "description": tokens[1].as_str(), "repo_url": 5}),
    )
    .await;
    for field in ["description", "repo_url", "onboarding_notes"] {
        let a = c
            .post(
                "/v1/admin/rooms",
                json!({"name": "y", field: format!("see {}", tokens[1])}),
            )
            .await;
        assert_eq!(a.status, 400, "a token pasted into {field} is refused");
        let a = c
            .post(
                "/v1/admin/rooms/dev/info",
                json!({field: tokens[1].as_str()}),
            )
            .await;
        assert_eq!(a.status, 400, "a token pasted into {field} is refused");
    }
    let a = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": tokens[1], "room": "dev"}),
        )
        .await;
    assert_eq!(a.status, 400, "a token pasted as agent name is refused");
    let a = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": "eve", "room": "dev", "skills": [tokens[1]]}),
        )
        .await;
    assert_eq!(a.status, 400, "a token pasted as a skill is refused");
    c.post(
        "/v1/admin/tokens/purge",
        json!({"older_than_days": tokens[1]}),
    )
    .await;
    c.delete(&format!("/v1/admin/rooms/dev?confirm={}", tokens[1]))
        .await;
    c.get("/v1/admin/state").await;
    c.get("/admin").await;
    let seen = c.seen.lock().unwrap().clone();
    assert!(seen.len() > 15);
    for (i, (what, body)) in seen.iter().enumerate() {
        for t in &tokens {
            if own.get(&i) == Some(t) {
                continue;
            }
            assert!(
                !body.contains(t.as_str()),
                "{what} carries a raw token: {body}"
            );
        }
    }
    let log = s.store.admin_log(1000).await.unwrap();
    let log_text = serde_json::to_string(&log).unwrap();
    for t in &tokens {
        assert!(
            !log_text.contains(t.as_str()),
            "the admin log holds a raw token"
        );
    }
}

/// The console answers carry ChatRoomMCP's keys beside ours: the page says
/// "chatroom admin"; the state has top-level `lan_url`/`public_url` and a
/// `revoked` flag per token; creating a room says `created`; a mint takes
/// `lan_url`/`public_url` for its setup text (`public` beside `remote`,
/// `claude_cli` beside `claude_mcp_add`); purge says `removed` and
/// `revoked_remaining`.
#[tokio::test]
async fn answers_carry_the_original_keys() {
    let (s, root) = start(|c| c.public_url = Some("https://chat.example.com".into())).await;
    let c = Console::new(&s, Some(&root));
    let page = c.get("/admin").await;
    assert!(page.text.contains("chatroom admin"), "{}", page.text);
    let st = c.state().await;
    assert_eq!(st["public_url"], "https://chat.example.com");
    assert!(
        st["lan_url"].as_str().unwrap().starts_with("http://"),
        "{}",
        st["lan_url"]
    );

    let made = c
        .post(
            "/v1/admin/rooms",
            json!({"name": "made", "description": "by the API"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(made.json["created"], true);
    assert_eq!(made.json["room"]["description"], "by the API");

    let m = c
        .post(
            "/v1/admin/tokens",
            json!({"agent": "dual", "room": "made", "lan_url": "http://10.0.0.5:8090/", "public_url": "https://bus.example.com"}),
        )
        .await;
    assert_eq!(m.status, 201, "{}", m.text);
    let setup = &m.json["setup"];
    assert_eq!(setup["lan"]["url"], "http://10.0.0.5:8090");
    assert_eq!(setup["public"]["url"], "https://bus.example.com");
    assert_eq!(setup["remote"], setup["public"]);
    let cli = setup["lan"]["claude_cli"].as_str().unwrap();
    assert!(cli.contains("http://10.0.0.5:8090/mcp"), "{cli}");
    assert_eq!(setup["lan"]["claude_cli"], setup["lan"]["claude_mcp_add"]);
    // The minted token works and is scoped to its room.
    let minted = s.mcp(m.json["token"].as_str().unwrap());
    assert_eq!(minted.call("whoami", json!({})).await["agent"], "dual");
    assert_eq!(
        minted.refused("list_tasks", json!({"room": "lobby"})).await,
        "forbidden"
    );
    for bad in [
        json!({"agent": "x", "room": "made", "lan_url": "ftp://x"}),
        json!({"agent": "x", "room": "made", "public_url": "https://a b"}),
        json!({"agent": "x", "room": "made", "lan_url": "http://x\"; rm -rf /"}),
    ] {
        let a = c.post("/v1/admin/tokens", bad.clone()).await;
        assert_eq!((a.status, a.code()), (400, "invalid_argument"), "{bad}");
    }

    s.token("doomed", "lobby").await;
    c.post("/v1/admin/tokens/revoke", json!({"agent": "doomed"}))
        .await;
    let tokens = c.state().await["tokens"].clone();
    let flag = |agent: &str| {
        tokens
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["agent"] == agent)
            .map(|t| t["revoked"].clone())
            .unwrap()
    };
    assert_eq!((flag("doomed"), flag("dual")), (json!(true), json!(false)));
    let far = c
        .post("/v1/admin/tokens/purge", json!({"older_than_days": 3650}))
        .await;
    assert_eq!(
        (
            far.json["removed"].as_i64(),
            far.json["revoked_remaining"].as_i64()
        ),
        (Some(0), Some(1))
    );
    let all = c
        .post("/v1/admin/tokens/purge", json!({"older_than_days": 0}))
        .await;
    assert_eq!(all.json["removed"], 1);
    assert_eq!(all.json["purged"], 1);
    assert_eq!(all.json["revoked_remaining"], 0);
    assert_eq!(all.json["live_tokens"], 2);
}
