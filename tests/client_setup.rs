//! `chatroom setup claude|codex|gemini`: the real binary writes each
//! client's project files, which parse as that client reads them; two
//! agents in two folders keep their own tokens; existing files are merged
//! into; the token is never printed.

mod common;

use std::collections::HashMap;

use serde_json::{Value, json};

async fn setup(client: &str, dir: &std::path::Path, token: &str) -> (i32, String, String) {
    let env = HashMap::from([
        ("CHATROOM_URL", "http://127.0.0.1:8080".to_owned()),
        ("CHATROOM_TOKEN", token.to_owned()),
    ]);
    common::run_cli(&["setup", client, "--dir", dir.to_str().unwrap()], &env).await
}

fn json_file(path: std::path::PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn private(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
}

/// Claude Code: `.mcp.json` holds the HTTP entry, settings.local.json the
/// hooks in the settings shape (event → matcher groups → command hooks),
/// the Stop one async with asyncRewake; other servers and hooks are kept.
#[tokio::test]
async fn claude_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".mcp.json"),
        r#"{"mcpServers": {"other": {"type": "stdio", "command": "x"}}}"#,
    )
    .unwrap();
    let token = "cr_alice-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let (code, out, err) = setup("claude", dir.path(), token).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(token) && !err.contains(token), "never echoed");
    assert!(out.contains("Still to do"), "{out}");
    let mcp = json_file(dir.path().join(".mcp.json"));
    assert_eq!(mcp["mcpServers"]["other"]["command"], "x", "kept");
    let entry = &mcp["mcpServers"]["chatroom"];
    assert_eq!(entry["type"], "http");
    assert_eq!(entry["url"], "http://127.0.0.1:8080/mcp");
    assert_eq!(entry["headers"]["Authorization"], format!("Bearer {token}"));
    let settings = json_file(dir.path().join(".claude/settings.local.json"));
    for event in ["SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"] {
        let groups = settings["hooks"][event].as_array().unwrap();
        assert_eq!(groups.len(), 1, "{event}");
        let h = &groups[0]["hooks"][0];
        assert_eq!(h["type"], "command");
        assert!(h["command"].as_str().unwrap().starts_with("chatroom hook"));
    }
    let stop = &settings["hooks"]["Stop"][0]["hooks"][0];
    assert!(stop["command"].as_str().unwrap().contains("--rewake"));
    assert_eq!(
        (stop["async"].clone(), stop["asyncRewake"].clone()),
        (json!(true), json!(true))
    );
    private(&dir.path().join(".claude/chatroom.env"));
    private(&dir.path().join(".mcp.json"));
    // Again: still one hook per event.
    let (code, _, _) = setup("claude", dir.path(), token).await;
    assert_eq!(code, 0);
    let settings = json_file(dir.path().join(".claude/settings.local.json"));
    assert_eq!(settings["hooks"]["Stop"].as_array().unwrap().len(), 1);
}

/// Codex: config.toml parses as TOML with the entry and its header, other
/// tables kept; hooks.json has the hooks with `--client codex`.
#[tokio::test]
async fn codex_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".codex")).unwrap();
    std::fs::write(
        dir.path().join(".codex/config.toml"),
        "# mine\nmodel = \"o3\"\n\n[mcp_servers.other]\ncommand = \"x\"\n",
    )
    .unwrap();
    let token = "cr_bob-token-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    let (code, out, err) = setup("codex", dir.path(), token).await;
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains(token));
    let text = std::fs::read_to_string(dir.path().join(".codex/config.toml")).unwrap();
    assert!(text.contains("# mine"), "comments kept: {text}");
    let doc: toml_edit::DocumentMut = text.parse().expect("TOML");
    assert_eq!(doc["model"].as_str(), Some("o3"));
    assert_eq!(doc["mcp_servers"]["other"]["command"].as_str(), Some("x"));
    let entry = &doc["mcp_servers"]["chatroom"];
    assert_eq!(entry["url"].as_str(), Some("http://127.0.0.1:8080/mcp"));
    assert_eq!(
        entry["http_headers"]["Authorization"].as_str(),
        Some(format!("Bearer {token}").as_str())
    );
    let hooks = json_file(dir.path().join(".codex/hooks.json"));
    let cmd = hooks["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(cmd.contains("--client codex"), "{cmd}");
}

/// Gemini CLI: settings.json with `mcpServers.chatroom.httpUrl` and the
/// hooks (timeouts in milliseconds).
#[tokio::test]
async fn gemini_files() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = setup(
        "gemini",
        dir.path(),
        "cr_carol-token-cccccccccccccccccccccccccccccc",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let s = json_file(dir.path().join(".gemini/settings.json"));
    assert_eq!(
        s["mcpServers"]["chatroom"]["httpUrl"],
        "http://127.0.0.1:8080/mcp"
    );
    let h = &s["hooks"]["BeforeAgent"][0]["hooks"][0];
    assert!(h["command"].as_str().unwrap().contains("--client gemini"));
    assert_eq!(h["timeout"], 10_000);
}

/// Two agents in two folders: each folder keeps its own token.
#[tokio::test]
async fn two_folders_keep_their_tokens() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let ta = "cr_alice-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let tb = "cr_bob-token-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    assert_eq!(setup("claude", a.path(), ta).await.0, 0);
    assert_eq!(setup("claude", b.path(), tb).await.0, 0);
    let auth = |d: &std::path::Path| {
        json_file(d.join(".mcp.json"))["mcpServers"]["chatroom"]["headers"]["Authorization"].clone()
    };
    assert_eq!(auth(a.path()), format!("Bearer {ta}"));
    assert_eq!(auth(b.path()), format!("Bearer {tb}"));
    let env_a = std::fs::read_to_string(a.path().join(".claude/chatroom.env")).unwrap();
    assert!(env_a.contains(ta) && !env_a.contains(tb));
}

/// A file that does not parse is left alone, and named.
#[tokio::test]
async fn a_broken_file_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".mcp.json"), "{ not json").unwrap();
    let (code, _, err) = setup(
        "claude",
        dir.path(),
        "cr_x-token-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        err.contains(".mcp.json") && err.contains("not valid JSON"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".mcp.json")).unwrap(),
        "{ not json"
    );
}

/// Claude Code's own parser reads what `setup claude` wrote: `claude mcp
/// get chatroom` (the real CLI, `CHATROOM_TEST_CLAUDE`, offline) in each of
/// two folders finds the project-scoped HTTP entry with that folder's token.
#[tokio::test]
async fn claude_reads_each_folders_entry() {
    let Ok(claude) = std::env::var("CHATROOM_TEST_CLAUDE") else {
        panic!("set CHATROOM_TEST_CLAUDE to the Claude Code CLI (.ci/run installs it)");
    };
    let home = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let ta = "cr_alice-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let tb = "cr_bob-token-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    assert_eq!(setup("claude", a.path(), ta).await.0, 0);
    assert_eq!(setup("claude", b.path(), tb).await.0, 0);
    for (dir, mine, other) in [(a.path(), ta, tb), (b.path(), tb, ta)] {
        let out = tokio::process::Command::new(&claude)
            .args(["mcp", "get", "chatroom"])
            .current_dir(dir)
            .env("HOME", home.path())
            .output()
            .await
            .expect("run claude");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("Project config"), "{text}");
        assert!(text.contains("Type: http"), "{text}");
        assert!(text.contains("http://127.0.0.1:8080/mcp"), "{text}");
        assert!(text.contains(&format!("Bearer {mine}")), "{text}");
        assert!(!text.contains(other), "{text}");
    }
}
