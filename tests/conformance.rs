//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`)
//! against the server: `server-initialize`, `ping`, `tools-list`,
//! `dns-rebinding-protection`, `http-header-validation`, `server-stateless`,
//! (its subscription checks included: the acknowledgment, the subscription
//! id, the filter), for the board app's resource `resources-list` and
//! `sep-2164-resource-not-found`, the cache hints (`caching`) and the
//! coordination skill (`sep-2640-skills-*`), with `tests/conformance-baseline.yml` excusing only
//! the checks that call the suite's own demo tools.
//!
//! The suite cannot send a bearer token, so it talks to a tiny reverse proxy
//! that lives only in this test: it adds `Authorization` and forwards
//! everything else unchanged (Host and Origin included, so the DNS-rebinding
//! checks reach the server's own guards). No deployment has such a way in.
//!
//! The suite's authorization-server scenarios
//! (`authorization-server-metadata-endpoint`, `authorization-code-grant`)
//! run against the server's own sign-in, the consent page answered over HTTP
//! as a person in a browser would, with a connect code.
//!
//! `.ci/run` installs Node 22 and the suite and sets `CHATROOM_TEST_NODE22`
//! and `CHATROOM_TEST_CONFORMANCE`; without them these tests fail.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use common::TestServer;
use serde_json::Value;

const SCENARIOS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "http-header-validation",
    "server-stateless",
    "resources-list",
    "sep-2164-resource-not-found",
    "caching",
    "sep-2640-skills-enumeration",
    "sep-2640-skills-manifest",
    // Not `sep-2640-skills-directory`: the skill is one file and the server
    // does not declare `directoryRead`, so every check of it is skipped.
];

/// A required path from the environment `.ci/run` sets up; fails loudly
/// when it is missing, so a machine without the suite cannot pass silently.
pub fn required_tool(var: &str, what: &str) -> PathBuf {
    let path = std::env::var(var).unwrap_or_else(|_| {
        panic!(
            "{var} is not set: {what} is needed for this test. Run `bash .ci/run` once (it installs \
             Node 22 and the MCP npm packages into ~/.cache/chatroom/tools and exports {var}), or \
             export {var} yourself"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.exists(),
        "{var}={} does not exist: {what} is not installed; run `bash .ci/run`",
        path.display()
    );
    path
}

/// The Node ≥ 22 binary, checked.
pub fn node22() -> PathBuf {
    let node = required_tool("CHATROOM_TEST_NODE22", "a Node 22 binary");
    let out = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .expect("run node --version");
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let major: u32 = version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 22,
        "{} is Node {version}; the conformance suite needs Node 22 or newer",
        node.display()
    );
    node
}

/// Starts the test-only proxy in front of `upstream` that adds the bearer
/// token to every request and changes nothing else.
async fn auth_proxy(upstream: SocketAddr, token: String) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bearer = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    let app = axum::Router::new().fallback(move |mut req: Request| {
        let bearer = bearer.clone();
        async move {
            req.headers_mut().insert(header::AUTHORIZATION, bearer);
            match forward(upstream, req).await {
                Ok(r) => r,
                Err(e) => (StatusCode::BAD_GATEWAY, format!("proxy: {e}")).into_response(),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// Sends `req` as it is over a fresh HTTP/1.1 connection to `upstream`
/// (hyper's connection API adds no headers of its own).
async fn forward(
    upstream: SocketAddr,
    req: Request,
) -> Result<Response, Box<dyn std::error::Error + Send + Sync>> {
    let stream = tokio::net::TcpStream::connect(upstream).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let resp = sender.send_request(req).await?;
    Ok(resp.map(axum::body::Body::new))
}

/// The checks a scenario run wrote to its output directory.
fn checks(dir: &Path) -> Vec<Value> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("output dir") {
        let path = entry.unwrap().path().join("checks.json");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let v: Value = serde_json::from_str(&text).expect("checks.json");
            all.extend(v.as_array().cloned().unwrap_or_default());
        }
    }
    all
}

/// Every listed scenario of the official conformance suite passes, except
/// the baselined checks that need the suite's demo tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_conformance_suite_passes() {
    let node = node22();
    let suite = required_tool(
        "CHATROOM_TEST_CONFORMANCE",
        "the MCP conformance suite (@modelcontextprotocol/conformance)",
    );
    let baseline = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance-baseline.yml"
    );
    let baselined: Vec<String> = std::fs::read_to_string(baseline)
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split('#').next().unwrap().trim().to_owned())
        .collect();

    let s = TestServer::start().await;
    let agent = s.agent("conformance", "lobby").await;
    let proxy = auth_proxy(s.addr, agent.token.clone()).await;
    let url = format!("http://127.0.0.1:{}/mcp", proxy.port());
    let out = tempfile::tempdir().unwrap();

    let runs = SCENARIOS.iter().map(|scenario| {
        let dir = out.path().join(scenario);
        std::fs::create_dir_all(&dir).unwrap();
        let cmd = tokio::process::Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &url, "--scenario", scenario])
            .arg("--expected-failures")
            .arg(baseline)
            .arg("-o")
            .arg(&dir)
            .env("NO_COLOR", "1")
            .kill_on_drop(true)
            .output();
        async move {
            (
                *scenario,
                dir,
                cmd.await.expect("run the conformance suite"),
            )
        }
    });
    let results = futures::future::join_all(runs).await;

    let mut totals: BTreeMap<&str, u32> = BTreeMap::new();
    let mut problems = Vec::new();
    for (scenario, dir, output) in &results {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let checks = checks(dir);
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for c in &checks {
            let id = c["id"].as_str().unwrap_or("");
            let status = c["status"].as_str().unwrap_or("");
            let key = match status {
                "SUCCESS" => "passed",
                "FAILURE"
                    if baselined
                        .iter()
                        .any(|b| b == &format!("{scenario}:{id}") || b == scenario) =>
                {
                    "expected failures"
                }
                "FAILURE" => {
                    problems.push(format!(
                        "{scenario}: {id} failed: {}",
                        c["errorMessage"].as_str().unwrap_or("")
                    ));
                    "unexpected failures"
                }
                "WARNING" => "warnings",
                "SKIPPED" => "skipped",
                _ => continue,
            };
            *counts.entry(key).or_default() += 1;
            *totals.entry(key).or_default() += 1;
        }
        println!("{scenario}: {counts:?}");
        if !output.status.success() {
            problems.push(format!(
                "{scenario}: the suite exited with {}:\n{stdout}\n{stderr}",
                output.status
            ));
        }
        if counts.get("passed").copied().unwrap_or(0) == 0 {
            problems.push(format!(
                "{scenario}: no check passed (did it run?):\n{stdout}\n{stderr}"
            ));
        }
    }
    println!(
        "conformance suite totals over {} scenarios: {totals:?}",
        SCENARIOS.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The suite's authorization-server scenarios against the server's own
/// sign-in: discovery metadata, then a whole authorization-code grant with
/// PKCE through the consent page (answered with a connect code) to a token.
/// Every check passes (0 failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_server_scenarios_pass() {
    use tokio::io::AsyncBufReadExt;
    let node = node22();
    let suite = required_tool(
        "CHATROOM_TEST_CONFORMANCE",
        "the MCP conformance suite (@modelcontextprotocol/conformance)",
    );
    let s = TestServer::start().await;
    s.room("lobby").await;
    let grant = common::Grant {
        agent: "conformance".into(),
        room: "lobby".into(),
        ..common::Grant::default()
    };
    let (connect, _) = s
        .core
        .mint_connect_code(grant, 15)
        .await
        .expect("a connect code");
    let connect = connect.expose().to_owned();
    let port = common::free_port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let registered: Value = browser
        .post(format!("{}/oauth/register", s.url))
        .json(&serde_json::json!({"client_name": "conformance", "redirect_uris": [redirect], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = registered["client_id"].as_str().unwrap().to_owned();
    let out = tempfile::tempdir().unwrap();
    let mut summary = Vec::new();
    let mut failed = Vec::new();
    // One run of both: the grant scenario reads the metadata scenario's
    // answer, so they cannot run apart.
    for scenario in ["authorization-server-metadata-endpoint+authorization-code-grant"] {
        let dir = out.path().join(scenario);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = tokio::process::Command::new(&node)
            .arg(&suite)
            .args(["authorization", "--url", &s.url])
            .args(["--client-id", &client_id, "--port", &port.to_string()])
            .args(["--resource", &format!("{}/mcp", s.url)])
            .arg("-o")
            .arg(&dir)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run the conformance suite");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            printed.push_str(&line);
            printed.push('\n');
            let line = line.trim();
            if !line.starts_with(&format!("{}/oauth/authorize?", s.url)) {
                continue;
            }
            // The person at the browser: open the page, type the code,
            // approve, and follow the redirect to the suite's callback.
            let page = browser.get(line).send().await.unwrap();
            assert_eq!(page.status(), 200);
            let mut form = common::consent::hidden_fields(&page.text().await.unwrap());
            form.push(("connect_code".into(), connect.clone()));
            form.push(("decision".into(), "approve".into()));
            let body = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form.iter())
                .finish();
            let approved = browser
                .post(format!("{}/oauth/authorize", s.url))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(approved.status(), 303);
            let location = approved.headers()["location"].to_str().unwrap().to_owned();
            // The suite prints the page's address before its callback
            // listener is up: follow the redirect once the port listens.
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the suite's callback never listened on port {port}:\n{printed}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            browser
                .get(location)
                .send()
                .await
                .expect("the suite's callback answers");
        }
        let status = child.wait().await.unwrap();
        let mut found = Vec::new();
        let mut dirs = vec![dir];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.file_name().is_some_and(|n| n == "checks.json") {
                    let v: Value =
                        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                    found.extend(v.as_array().cloned().unwrap_or_default());
                }
            }
        }
        assert!(!found.is_empty(), "{scenario}: no check ran:\n{printed}");
        for c in &found {
            let line = format!(
                "{scenario}: {} {}",
                c["id"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?")
            );
            if c["status"] != "SUCCESS" {
                failed.push(format!(
                    "{line} {}\n{printed}",
                    c["errorMessage"].as_str().unwrap_or("")
                ));
            }
            summary.push(line);
        }
        assert!(
            status.success(),
            "{scenario}: the suite exited with {status}:\n{printed}"
        );
    }
    println!("authorization-server conformance: {summary:?}");
    for id in [
        "authorization-server-metadata",
        "authorization-server-metadata-cimd",
        "authorization-code-grant",
    ] {
        assert!(
            summary
                .iter()
                .any(|l| l.contains(&format!(" {id} SUCCESS"))),
            "{id}: {summary:?}"
        );
    }
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
