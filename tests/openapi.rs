//! The OpenAPI document at `/v1/openapi.json` against the real server: it
//! validates as OpenAPI 3.1 (the `openapi-spec-validator` that `.ci/run`
//! installs into `CHATROOM_TEST_PYTHON`'s venv), every operation it names is
//! a route the server answers on, with the status and media type the
//! document gives, every other method of its paths is not, and no `/v1`
//! route reaches the router without passing through a described route
//! table.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use chatroom::domain::tokens::Grant;
use common::TestServer;
use common::rest::Rest;
use serde_json::Value;

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch"];

/// The document the server serves, fetched without a token.
async fn document(s: &TestServer) -> Value {
    let resp = reqwest::get(format!("{}/v1/openapi.json", s.url))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    resp.json().await.unwrap()
}

/// A console-on server (the document describes `/v1/admin/*` too).
async fn server() -> TestServer {
    TestServer::start_sqlite_with(|c| c.admin_api = true).await
}

/// A path of the document with its parameters filled in: a room and ids
/// that do not exist, so that no call changes anything.
fn concrete(path: &str) -> String {
    path.replace("{id}", "999999")
        .replace("{room}", "no-such-room")
}

/// The document is valid OpenAPI 3.1 by an outside validator, and says so.
#[tokio::test]
async fn document_validates_as_openapi_3_1() {
    let python = std::env::var("CHATROOM_TEST_PYTHON")
        .expect("CHATROOM_TEST_PYTHON must name the venv's python (.ci/run installs it)");
    let s = server().await;
    let doc = document(&s).await;
    assert_eq!(doc["openapi"], "3.1.0", "{doc}");
    let file = s.dir.path().join("openapi.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let out = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            "import json, sys\n\
             from openapi_spec_validator import validate, OpenAPIV31SpecValidator\n\
             validate(json.load(open(sys.argv[1])), cls=OpenAPIV31SpecValidator)\n\
             print('valid')",
        )
        .arg(&file)
        .output()
        .expect("run the validator");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "valid",
        "openapi-spec-validator refused the document:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    s.stop().await;
}

/// Every documented operation is served, and nothing else on its path:
/// without a token each answers `401` (the document alone `200`), while a
/// path the document lacks answers `404`; with a whole-server admin token
/// each documented method reaches its handler (no `405`, and a `404` only
/// as a JSON error about the missing room or id), and every other method
/// of the path answers `405`.
#[tokio::test]
async fn every_documented_operation_is_a_route() {
    let s = server().await;
    let doc = document(&s).await;
    s.room("lobby").await;
    let admin = s
        .token_with(Grant {
            agent: "root".into(),
            room: "lobby".into(),
            admin: true,
            all_rooms: true,
            lead: true,
            ..Grant::default()
        })
        .await;
    let http = reqwest::Client::new();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.len() >= 20, "{paths:?}");
    let mut operations = 0;
    for (path, item) in paths {
        let url = format!("{}{}", s.url, concrete(path));
        for method in METHODS {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let documented = item.get(*method).is_some();
            let what = format!("{} {path}", method.to_uppercase());
            let anonymous = http.request(m.clone(), &url).send().await.unwrap();
            let with_token = http
                .request(m, &url)
                .bearer_auth(&admin)
                .send()
                .await
                .unwrap();
            let status = with_token.status().as_u16();
            if !documented {
                assert_eq!(status, 405, "{what} is not documented, yet answers");
                continue;
            }
            operations += 1;
            let public = path == "/v1/openapi.json";
            assert_eq!(
                anonymous.status().as_u16(),
                if public { 200 } else { 401 },
                "{what} without a token"
            );
            assert_ne!(status, 405, "{what} is documented, but not routed");
            if status == 404 {
                let body: Value = with_token.json().await.unwrap_or(Value::Null);
                assert!(
                    body["error"]["code"].is_string(),
                    "{what}: a bare 404, not the handler's: {body}"
                );
            }
            let op = &item[*method];
            assert!(
                public || op["security"][0].get("bearer").is_some(),
                "{what} names no bearer security: {op}"
            );
        }
    }
    assert!(operations >= 25, "only {operations} operations");
    let missing = http
        .get(format!("{}/v1/not-a-route", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    s.stop().await;
}

/// With a token, each documented `GET` of a room answers one of its
/// documented statuses with a documented media type (`/v1/stream` is
/// `text/event-stream`, `format=text` digests `text/plain`).
#[tokio::test]
async fn documented_answers_match_the_real_ones() {
    let s = server().await;
    let doc = document(&s).await;
    let rest = common::rest::rest(&s, "alice").await;
    rest.post("/v1/messages", serde_json::json!({"body": "hello"}))
        .await;
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(op) = item.get("get") else { continue };
        if path.contains('{') || path.starts_with("/v1/admin") {
            continue;
        }
        let resp = rest
            .http
            .get(format!("{}{path}", s.url))
            .bearer_auth(&rest.token)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16().to_string();
        let responses = op["responses"].as_object().unwrap();
        let answer = responses
            .get(&status)
            .unwrap_or_else(|| panic!("GET {path}: {status} is not documented: {responses:?}"));
        let media = resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let documented: BTreeSet<&String> = answer["content"]
            .as_object()
            .map(|c| c.keys().collect())
            .unwrap_or_default();
        assert!(
            documented.contains(&media),
            "GET {path}: answered {media}, documented {documented:?}"
        );
        checked += 1;
        // A stream never ends: its head is all this needs.
        drop(resp);
    }
    assert!(checked >= 8, "only {checked} routes checked");
    let text = Rest::get(&rest, "/v1/whats_new?format=text").await;
    let documented = &doc["paths"]["/v1/whats_new"]["get"]["responses"]["200"]["content"];
    assert!(
        documented.get("text/plain").is_some()
            && text.header("content-type").starts_with("text/plain"),
        "{documented}"
    );
    s.stop().await;
}

/// No `/v1` route is given to the router by hand, where it would be served
/// without being described: the server's code registers `/v1` paths only
/// through the route tables (`routes!` with `#[utoipa::path]`), besides
/// the console's gate, which wraps the described console routes.
#[test]
fn no_v1_route_bypasses_the_document() {
    let mut found = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for call in [".route(", ".route_service(", ".nest(", ".nest_service("] {
                for (at, _) in text.match_indices(call) {
                    let rest = text[at + call.len()..].trim_start();
                    if let Some(lit) = rest.strip_prefix('"')
                        && lit.starts_with("/v1")
                    {
                        let end = lit.find('"').unwrap_or(lit.len());
                        found.push(format!("{}: {call}\"{}\"", path.display(), &lit[..end]));
                    }
                }
            }
        }
    }
    let by_hand: Vec<&String> = found
        .iter()
        .filter(|f| !f.ends_with(".route_service(\"/v1/admin/{*rest}\""))
        .collect();
    assert!(
        by_hand.is_empty(),
        "/v1 routes registered outside a described route table: {by_hand:#?}"
    );
    assert_eq!(found.len(), 1, "the console's gate moved: {found:#?}");
}
