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
    assert!(html.contains(r#"<script src="/ui/app.js"#), "{html}");
    assert!(!html.contains("lobby"), "the shell holds no data");
    assert!(!html.contains("<script>"), "no inline script");
    assert!(!html.contains("style="), "no inline style");

    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
        ("/ui/markdown.js", "text/javascript"),
        ("/ui/vendor/marked.js", "text/javascript"),
        ("/ui/vendor/purify.js", "text/javascript"),
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
    for script in ["/ui/app.js", "/ui/markdown.js"] {
        let js = get(&format!("{}{script}", s.url), &[])
            .await
            .text()
            .await
            .unwrap();
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
}

/// The look every page shares is served to everyone, the public side too
/// (a sign-in page there links it), and holds nothing but style.
#[tokio::test]
async fn shared_stylesheet_and_logo() {
    let s = TestServer::start_with(|c| c.enable_ui = false).await;
    for (path, kind) in [
        ("/assets/theme.css", "text/css"),
        ("/assets/logo.svg", "image/svg+xml"),
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
