//! `/ui` over plain HTTP: the shell, its assets and headers, and when it
//! answers 404.

mod common;

use common::TestServer;

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request")
}

/// The page is a shell with no data, served with a strict CSP and the other
/// security headers; its script and style come from the binary itself.
#[tokio::test]
async fn shell_and_assets_with_security_headers() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let page = get(&format!("{}/ui", s.url), &[]).await;
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["referrer-policy"], "no-referrer");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="/ui/app.js"#),
        "the dashboard is an ES module: {html}"
    );
    assert!(!html.contains("lobby"), "the shell holds no data");
    assert!(!html.contains("<script>"), "no inline script");
    assert!(!html.contains("style="), "no inline style");

    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ] {
        let r = get(&format!("{}{path}", s.url), &[]).await;
        assert_eq!(r.status(), 200, "{path}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(r.headers().contains_key("content-security-policy"));
    }
    // Every script the page runs: its own modules and the shared ones they
    // import (and those the page links), none of which parses text as HTML.
    let mut scripts: Vec<String> = chatroom::assets::UI
        .iter()
        .chain(chatroom::assets::SHARED)
        .filter(|a| a.content_type.starts_with("text/javascript") && !a.path.contains("/vendor/"))
        .map(|a| a.path.to_owned())
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 12, "{scripts:?}");
    for script in &scripts {
        let r = get(&format!("{}{script}", s.url), &[]).await;
        assert_eq!(r.status(), 200, "{script}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript"),
            "{script}"
        );
        let js = r.text().await.unwrap();
        for sink in [
            ".innerHTML",
            ".outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(
                !js.contains(sink),
                "{script} {sink}: agent text is never parsed as HTML but by the sanitiser"
            );
        }
    }
    // What the modules import is served, at the path they name.
    for a in chatroom::assets::UI
        .iter()
        .filter(|a| a.path.ends_with(".js"))
    {
        for line in a.body.lines().filter(|l| l.starts_with("import ")) {
            let from = line
                .split(" from ")
                .nth(1)
                .unwrap()
                .trim()
                .trim_end_matches(';')
                .trim_matches('\'');
            let path = match from.strip_prefix("./") {
                Some(sibling) => format!("/ui/{sibling}"),
                None => from.to_owned(),
            };
            let r = get(&format!("{}{path}", s.url), &[]).await;
            assert_eq!(r.status(), 200, "{} imports {from}", a.path);
        }
    }
}

/// The look every page shares is served to everyone, the public side too
/// (a sign-in page there links it), and holds nothing but style.
#[tokio::test]
async fn shared_stylesheet_and_logo() {
    let s = TestServer::start_with(|c| c.enable_ui = false).await;
    for (path, kind) in [
        ("/assets/theme.css", "text/css"),
        ("/assets/logo.svg", "image/svg+xml"),
        ("/assets/dom.js", "text/javascript"),
        ("/assets/markdown.js", "text/javascript"),
        ("/assets/vendor/marked.js", "text/javascript"),
    ] {
        for headers in [vec![], vec![("cf-ray", "abc")]] {
            let r = get(&format!("{}{path}", s.url), &headers).await;
            assert_eq!(r.status(), 200, "{path} {headers:?}");
            let h = r.headers().clone();
            assert!(h["content-type"].to_str().unwrap().starts_with(kind));
            assert_eq!(h["x-content-type-options"], "nosniff");
        }
    }
    let css = get(&format!("{}/assets/theme.css", s.url), &[])
        .await
        .text()
        .await
        .unwrap();
    assert!(css.contains("prefers-color-scheme: dark"), "light and dark");
    assert!(!css.contains("url("), "nothing loaded from anywhere");
}

/// With `CHATROOM_CONSOLE_LAN_ONLY` (the default) the dashboard is 404 to
/// requests from the public side (edge headers, public Hosts), and 404 to
/// everyone with `CHATROOM_ENABLE_UI=off`.
#[tokio::test]
async fn hidden_from_the_public_side_and_when_off() {
    let s = TestServer::start_with(|c| {
        c.public_hosts = vec!["chat.example.org".into()];
        c.allowed_hosts = None;
    })
    .await;
    for headers in [
        vec![("cf-ray", "abc")],
        vec![("cf-connecting-ip", "203.0.113.9")],
        vec![("x-forwarded-for", "203.0.113.9")],
        vec![("host", "chat.example.org")],
    ] {
        for path in ["/ui", "/ui/app.js"] {
            let r = get(&format!("{}{path}", s.url), &headers).await;
            assert_eq!(r.status(), 404, "{path} {headers:?}");
        }
    }
    assert_eq!(get(&format!("{}/ui", s.url), &[]).await.status(), 200);

    let open = TestServer::start_with(|c| c.console_lan_only = false).await;
    let r = get(&format!("{}/ui", open.url), &[("cf-ray", "abc")]).await;
    assert_eq!(r.status(), 200);

    let off = TestServer::start_with(|c| c.enable_ui = false).await;
    for path in ["/ui", "/ui/app.js"] {
        assert_eq!(get(&format!("{}{path}", off.url), &[]).await.status(), 404);
    }
}

/// `/mcp` opened in a browser (a `GET` asking for `text/html`, no token) is
/// a page saying what the address is and where to go; every API client's
/// answer stays as it was: `401` with the JSON error without a token (or
/// with a bad one, whatever it accepts), and the MCP layer's own answer to
/// a `GET` with a valid token.
#[tokio::test]
async fn mcp_in_a_browser_is_a_page() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let url = format!("{}/mcp", s.url);
    let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
    let page = get(&url, &[("accept", browser)]).await;
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert!(h["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    let html = page.text().await.unwrap();
    assert!(
        html.contains("MCP endpoint") && html.contains(r#"href="/ui""#),
        "{html}"
    );
    assert!(!html.contains("<script"), "{html}");
    // Public side with the dashboard LAN-only: no link to it.
    let public = get(&url, &[("accept", browser), ("cf-ray", "abc")])
        .await
        .text()
        .await
        .unwrap();
    assert!(!public.contains(r#"href="/ui""#), "{public}");

    let bearer = format!("Bearer {token}");
    for (accept, auth, status) in [
        (None, None, 401),
        (Some("application/json, text/event-stream"), None, 401),
        (Some("text/event-stream"), None, 401),
        (Some("*/*"), None, 401),
        (
            Some(browser),
            Some("Bearer cr_not_a_real_token_000000000000000000"),
            401,
        ),
    ] {
        let mut headers = Vec::new();
        if let Some(a) = accept {
            headers.push(("accept", a));
        }
        if let Some(a) = auth {
            headers.push(("authorization", a));
        }
        let r = get(&url, &headers).await;
        assert_eq!(r.status(), status, "{accept:?} {auth:?}");
        assert!(r.headers().contains_key("www-authenticate"));
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{accept:?} {auth:?}");
    }
    let with_token = get(&url, &[("accept", browser), ("authorization", &bearer)]).await;
    let plain = get(&url, &[("authorization", &bearer)]).await;
    assert_eq!(with_token.status(), plain.status());
    assert_ne!(
        with_token.status(),
        200,
        "a token gets the MCP answer, not the page"
    );
    assert!(
        !with_token.text().await.unwrap().contains("MCP endpoint"),
        "a token gets the MCP answer, not the page"
    );
}
