//! A newcomer's first hour, through the real binary: `.env` read as docker
//! compose reads it (and warned about), settings validated and logged,
//! logs without colour off a terminal, `doctor`, `quickstart`, `--version`,
//! completions and the man page, and errors that say what to do.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{McpClient, TestServer, binary, free_port, wait_healthy};
use serde_json::json;

/// Runs `chatroom ARGS` in `dir` with only `env` (and PATH) set.
async fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = tokio::process::Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chatroom");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `chatroom serve` in `dir`; `stop` returns what it logged.
fn serve_in(dir: &Path) -> tokio::process::Child {
    tokio::process::Command::new(binary())
        .arg("serve")
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn stop(mut child: tokio::process::Child) -> String {
    let _ = child.start_kill();
    let out = child.wait_with_output().await.unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A line appended to a copy of `.env.example` takes effect (the last line
/// wins, as in compose); a malformed line is warned about by number and the
/// lines after it still count; an unknown name is warned about; the log has
/// no colour codes off a terminal; the settings are logged once, secrets
/// hidden.
#[tokio::test]
async fn dotenv_appended_lines_take_effect_and_bad_lines_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".env.example"))
            .unwrap();
    let lines_before = example.lines().count();
    let dotenv = format!(
        "{example}CHATROOM_ALLOWED_HOSTS=localhost\nCHATROOM_DB=\"unclosed\nCHATROOM_ALOWED_ORIGINS=x\nCHATROOM_ALLOWED_HOSTS=localhost,127.0.0.1,homeserver.lan\nCHATROOM_LISTEN=127.0.0.1:{port}\nCHATROOM_MQTT_HOST=127.0.0.1\nCHATROOM_MQTT_PORT=1\nCHATROOM_MQTT_PASS=hunter2\n"
    );
    std::fs::write(dir.path().join(".env"), dotenv).unwrap();
    let child = serve_in(dir.path());
    let url = format!("http://127.0.0.1:{port}");
    assert!(
        wait_healthy(&url, Duration::from_secs(30)).await,
        "the CHATROOM_LISTEN after a malformed line was not used"
    );
    let client = reqwest::Client::new();
    let status = client
        .get(format!("{url}/"))
        .header("host", "homeserver.lan:8080")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "the last CHATROOM_ALLOWED_HOSTS line must win");
    let log = stop(child).await;
    let n = lines_before + 2;
    assert!(
        log.contains(&format!(".env line {n}: CHATROOM_DB")),
        "{log}"
    );
    assert!(
        log.contains(&format!(".env line {}: CHATROOM_ALOWED_ORIGINS", n + 1))
            && log.contains("did you mean CHATROOM_ALLOWED_ORIGINS"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            ".env line {}: CHATROOM_ALLOWED_HOSTS is set again (also on line {})",
            n + 2,
            n - 1
        )),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a piped log: {log}"
    );
    assert_eq!(log.matches("effective settings").count(), 1, "{log}");
    assert!(
        log.contains("CHATROOM_ALLOWED_HOSTS=localhost:*,127.0.0.1:*,homeserver.lan:*"),
        "{log}"
    );
    assert!(log.contains("CHATROOM_MQTT_PASS=***"), "{log}");
    assert!(!log.contains("hunter2"), "a secret reached the log: {log}");
}

/// The process environment wins over `.env`.
#[tokio::test]
async fn environment_wins_over_dotenv() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "CHATROOM_DB=from-dotenv.db\nCHATROOM_LOG=debug\n",
    )
    .unwrap();
    let (_, out, _) = run_in(
        dir.path(),
        &["doctor", "--server"],
        &[("CHATROOM_DB", "from-env.db")],
    )
    .await;
    assert!(
        out.contains("CHATROOM_DB=from-env.db  (environment, over .env line 1)"),
        "{out}"
    );
    assert!(out.contains("CHATROOM_LOG=debug  (.env line 2)"), "{out}");
    assert!(
        out.contains("CHATROOM_LISTEN=127.0.0.1:8080  (default)"),
        "{out}"
    );
}

/// A bad `CHATROOM_LOG` stops the start with a message naming it, as every
/// other variable does.
#[tokio::test]
async fn bad_log_filter_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_in(dir.path(), &["serve"], &[("CHATROOM_LOG", "warning")]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("CHATROOM_LOG") && err.contains("warning"),
        "{err}"
    );
    assert!(
        !dir.path().join("chatroom.db").exists(),
        "stopped before the database"
    );
}

/// `--version` names the commit; completions and a man page come from the
/// command-line definition.
#[tokio::test]
async fn version_completions_and_man_page() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run_in(dir.path(), &["--version"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!("chatroom {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let (code, out, _) = run_in(dir.path(), &["completions", "bash"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("add-token") && out.contains("quickstart"),
        "{out}"
    );
    let (code, out, _) = run_in(dir.path(), &["man"], &[]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains(".TH chatroom") && out.contains("doctor"),
        "{out}"
    );
}

/// Server side, `doctor` fails a LAN URL the allowlist would refuse, naming
/// the variable to change, and creates no database.
#[tokio::test]
async fn doctor_server_side_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "CHATROOM_LAN_URL=http://homeserver.lan:8080\nCHATROOM_LISTEN=127.0.0.1:0\n",
    )
    .unwrap();
    let (code, out, _) = run_in(dir.path(), &["doctor"], &[]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("FAIL")
            && l.contains("homeserver.lan")
            && l.contains("CHATROOM_ALLOWED_HOSTS")),
        "{out}"
    );
    assert!(out.contains("does not exist yet"), "{out}");
    assert!(!dir.path().join("chatroom.db").exists());
    std::fs::write(
        dir.path().join(".env"),
        "CHATROOM_LAN_URL=http://homeserver.lan:8080\nCHATROOM_ALLOWED_HOSTS=localhost,homeserver.lan\nCHATROOM_LISTEN=127.0.0.1:0\n",
    )
    .unwrap();
    let (code, out, _) = run_in(dir.path(), &["doctor", "--server"], &[]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok    CHATROOM_LAN_URL"), "{out}");
}

/// Agent side, `doctor` reaches the server, checks the Host and the token,
/// and names CHATROOM_TOKEN or CHATROOM_ALLOWED_HOSTS when they are wrong.
#[tokio::test]
async fn doctor_agent_side_checks_host_and_token() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run_in(
        dir.path(),
        &["doctor", "--agent"],
        &[("CHATROOM_URL", &s.url), ("CHATROOM_TOKEN", &token)],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("whoami: agent alice in room lobby"), "{out}");
    assert!(out.contains("state directory"), "{out}");
    let (code, out, _) = run_in(
        dir.path(),
        &["doctor", "--agent"],
        &[("CHATROOM_URL", &s.url), ("CHATROOM_TOKEN", "cr_wrong")],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL") && out.contains("CHATROOM_TOKEN"),
        "{out}"
    );
    let strict = TestServer::start_with(|c| {
        c.allowed_hosts = Some(vec![
            chatroom::auth::hosts::HostRule::parse("localhost").unwrap(),
        ])
    })
    .await;
    let (code, out, _) = run_in(
        dir.path(),
        &["doctor", "--agent"],
        &[("CHATROOM_URL", &strict.url), ("CHATROOM_TOKEN", &token)],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        out.contains("refuses the Host 127.0.0.1") && out.contains("CHATROOM_ALLOWED_HOSTS"),
        "{out}"
    );
}

/// `quickstart` makes the database, a room, two agents and an observer,
/// and the tokens it prints work as it says.
#[tokio::test]
async fn quickstart_tokens_work() {
    let s = TestServer::start_sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run_in(
        dir.path(),
        &["quickstart", "--url", &s.url],
        &[("CHATROOM_DB", &s.db_path)],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&s.db_path), "names the database: {err}");
    let tokens: Vec<&str> = out
        .split(|c: char| c.is_whitespace() || c == '"' || c == '=')
        .filter(|w| w.starts_with("cr_"))
        .collect();
    assert!(
        out.contains(&format!(
            "claude mcp add --transport http chatroom-lobby {}/mcp",
            s.url
        )),
        "{out}"
    );
    assert!(out.contains(&format!("{}/ui", s.url)), "{out}");
    let alice = McpClient::new(&s.url, tokens[0]);
    assert_eq!(alice.call("whoami", json!({})).await["agent"], "alice");
    let bob = McpClient::new(&s.url, tokens.iter().find(|t| **t != tokens[0]).unwrap());
    assert_eq!(bob.call("whoami", json!({})).await["agent"], "bob");
    let observer = McpClient::new(&s.url, tokens.last().unwrap());
    let me = observer.call("whoami", json!({})).await;
    assert_eq!(me["agent"], "observer");
    assert_eq!(me["readonly"], true);
}

/// Every admin command says on stderr which database it used (and that it
/// created it), stdout staying the command's own; a missing folder is named
/// with CHATROOM_DB; the default file is called the default, not a
/// variable the reader never set.
#[tokio::test]
async fn admin_commands_name_their_database() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run_in(dir.path(), &["admin", "init"], &[]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "database ready");
    let file = dir.path().join("chatroom.db");
    assert!(
        err.contains(&format!(
            "database {} (the default; CHATROOM_DB is unset), created now",
            file.display()
        )),
        "{err}"
    );
    let (code, _, err) = run_in(dir.path(), &["admin", "add-room", "lobby"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out2, err2) = run_in(
        dir.path(),
        &["admin", "add-token", "--agent", "a", "--room", "lobby"],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{err2}");
    assert!(
        out2.trim().starts_with("cr_") && out2.trim().lines().count() == 1,
        "{out2}"
    );
    assert!(
        err2.contains("CHATROOM_DB") && !err2.contains("created now"),
        "{err2}"
    );
    let (code, _, err) = run_in(
        dir.path(),
        &["admin", "list-rooms"],
        &[("CHATROOM_DB", "no/such/folder/chatroom.db")],
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("CHATROOM_DB")
            && err.contains("no/such/folder")
            && err.contains("does not exist"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A usage error shows only what is missing, also with CHATROOM_DB and an
/// empty CHATROOM_DATABASE_URL in the environment (as in the image, or
/// after copying `.env.example`).
#[tokio::test]
async fn usage_errors_do_not_list_the_database_as_required() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_in(
        dir.path(),
        &["admin", "add-token", "--agent", "a"],
        &[
            ("CHATROOM_DB", "/data/chatroom.db"),
            ("CHATROOM_DATABASE_URL", ""),
        ],
    )
    .await;
    assert_eq!(code, 2);
    let usage = err
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_default();
    assert_eq!(
        usage, "Usage: chatroom admin add-token --agent <AGENT> --room <ROOM>",
        "{err}"
    );
}

/// An unreachable PostgreSQL is named with its host, port and the cause.
#[tokio::test]
async fn unreachable_postgres_names_host_and_cause() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("postgres://chatroom:secret@127.0.0.1:{port}/chatroom");
    let (code, _, err) = run_in(dir.path(), &["serve"], &[("CHATROOM_DATABASE_URL", &url)]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("CHATROOM_DATABASE_URL"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("refused"), "{err}");
    assert!(!err.contains("secret"), "{err}");
}

/// `healthcheck` says why it failed; `watch` without a token names
/// CHATROOM_TOKEN.
#[tokio::test]
async fn client_commands_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let (code, _, err) = run_in(dir.path(), &["healthcheck", "--url", &url], &[]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot reach") && err.to_lowercase().contains("refused"),
        "{err}"
    );
    let (code, _, err) = run_in(
        dir.path(),
        &["healthcheck", "--url", &format!("127.0.0.1:{port}")],
        &[],
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("http://"), "{err}");
    let (code, _, err) = run_in(dir.path(), &["watch"], &[("CHATROOM_URL", &url)]).await;
    assert_eq!(code, 2);
    assert!(err.contains("CHATROOM_TOKEN"), "{err}");
}

/// `bench` against a server that limits calls per token says to run it with
/// CHATROOM_RATE_LIMIT_PER_MINUTE=0.
#[tokio::test]
async fn bench_names_the_rate_limit() {
    let s = TestServer::start_with(|c| c.rate_limit_per_minute = 2).await;
    s.room("lobby").await;
    let token = s.token("loader", "lobby").await;
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_in(
        dir.path(),
        &[
            "bench",
            "--url",
            &s.url,
            "--scenario",
            "post_message",
            "--duration",
            "0.5",
            "--concurrency",
            "1",
            "--no-baseline",
        ],
        &[("CHATROOM_TOKEN", &token)],
    )
    .await;
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("CHATROOM_RATE_LIMIT_PER_MINUTE=0"), "{err}");
}

/// `GET /` is a small page pointing to /ui and /mcp; a refused Host is
/// named in the 421, with the variable to set.
#[tokio::test]
async fn root_page_and_refused_host_say_where_to_go() {
    let s = TestServer::start().await;
    let client = reqwest::Client::new();
    let page = client.get(format!("{}/", s.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let body = page.text().await.unwrap();
    assert!(body.contains("/ui") && body.contains("/mcp"), "{body}");
    let refused = client
        .get(format!("{}/", s.url))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 421);
    let body: serde_json::Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("evil.example") && message.contains("CHATROOM_ALLOWED_HOSTS"),
        "{message}"
    );
}
