//! The settings table through the real binary: `serve --help` lists every
//! setting, the start-up line shows every setting that has a value with its
//! source, a bad start names every bad variable, and the `.env` file named
//! by `CHATROOM_ENV_FILE` is read, warned about and credited as a container
//! sees it (compose passes its values on as environment variables).

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use chatroom::config::SETTINGS;
use common::{binary, free_port, wait_healthy};

/// A `chatroom` command in `dir` with only `env` (and PATH, HOME) set.
fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `chatroom ARGS` to its end: (exit code, stdout, stderr).
async fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = command(dir, args, env)
        .output()
        .await
        .expect("run chatroom");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `chatroom serve` until it answers, then stops it; returns what it
/// logged and its address (`CHATROOM_LISTEN` of `env`, else a free port).
async fn serve_log(dir: &Path, env: &[(&str, &str)]) -> (String, String) {
    let listen = match env.iter().find(|(k, _)| *k == "CHATROOM_LISTEN") {
        Some((_, v)) => v.to_string(),
        None => format!("127.0.0.1:{}", free_port()),
    };
    let mut env = env.to_vec();
    env.push(("CHATROOM_LISTEN", &listen));
    let mut child = command(dir, &["serve"], &env).spawn().unwrap();
    let healthy = wait_healthy(&format!("http://{listen}"), Duration::from_secs(30)).await;
    let _ = child.start_kill();
    let out = child.wait_with_output().await.unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(healthy, "the server did not answer on {listen}: {log}");
    (log, listen)
}

/// `chatroom serve --help` names every setting of the table with its default.
#[tokio::test]
async fn serve_help_lists_every_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = run_in(dir.path(), &["serve", "--help"], &[]).await;
    assert_eq!(code, 0);
    for s in SETTINGS {
        let default = if s.default.is_empty() {
            "unset"
        } else {
            s.default
        };
        assert!(
            out.contains(&format!("{} [default: {default}", s.name)),
            "{} is missing from serve --help:\n{out}",
            s.name
        );
    }
    assert!(
        out.contains("CHATROOM_MQTT_PASS [default: unset; secret"),
        "{out}"
    );
}

/// The start-up line shows every setting that has a value, those of OAuth,
/// the trusted proxies and the stream cap included, each with its source
/// when it is not the default; a secret only as `***`.
#[tokio::test]
async fn start_line_shows_every_setting() {
    let dir = tempfile::tempdir().unwrap();
    let (log, listen) = serve_log(
        dir.path(),
        &[
            ("CHATROOM_MQTT_USER", "someone"),
            ("CHATROOM_OAUTH_ACCESS_TTL", "600"),
        ],
    )
    .await;
    let line = log
        .lines()
        .find(|l| l.contains("effective settings"))
        .unwrap_or_else(|| panic!("no settings line: {log}"));
    for s in SETTINGS {
        if !s.default.is_empty() {
            assert!(
                line.contains(&format!("{}=", s.name)),
                "{} missing: {line}",
                s.name
            );
        }
    }
    assert!(
        line.contains(&format!("CHATROOM_LISTEN={listen} (environment)")),
        "{line}"
    );
    assert!(
        line.contains("CHATROOM_OAUTH_ACCESS_TTL=600 (environment)"),
        "{line}"
    );
    assert!(line.contains("CHATROOM_OAUTH=on "), "{line}");
    assert!(line.contains("CHATROOM_MAX_STREAMS_PER_TOKEN=8"), "{line}");
    assert!(
        line.contains("CHATROOM_TRUSTED_PROXIES=127.0.0.0/8,"),
        "{line}"
    );
    assert!(
        line.contains("CHATROOM_MQTT_USER=*** (environment)"),
        "{line}"
    );
    assert!(!line.contains("someone"), "{line}");
}

/// A bad start names every bad variable (the bridge's included while the
/// bridge is off), exits non-zero, and creates no database.
#[tokio::test]
async fn bad_start_names_every_bad_variable() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_in(
        dir.path(),
        &["serve"],
        &[
            ("CHATROOM_MAX_STREAMS_PER_TOKEN", "many"),
            ("CHATROOM_OAUTH", "perhaps"),
            ("CHATROOM_TRUSTED_PROXIES", "10.0.0.0/33"),
            ("CHATROOM_MQTT_PORT", "0"),
        ],
    )
    .await;
    assert_ne!(code, 0);
    for name in [
        "CHATROOM_MAX_STREAMS_PER_TOKEN",
        "CHATROOM_OAUTH",
        "CHATROOM_TRUSTED_PROXIES",
        "CHATROOM_MQTT_PORT",
    ] {
        assert!(err.contains(name), "{name}: {err}");
    }
    assert!(!dir.path().join("chatroom.db").exists());
}

/// As in a container: `CHATROOM_ENV_FILE` names the mounted file, and the
/// environment holds what compose passed from it (the same values, empty
/// ones for the lines left out, and one from before the file was edited).
/// The file's unknown name and the stale value are warned about at start;
/// the values compose passed on count as the file's, in the start-up line
/// and in `doctor`; the empty ones as defaults.
#[tokio::test]
async fn env_file_is_read_and_credited_as_compose_passes_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/chatroom.env"),
        format!(
            "CHATROOM_LOG=debug\nCHATROOM_ALOWED_HOSTS=box\nCHATROOM_LISTEN={listen}\nCHATROOM_MAX_WAIT_S=60\n"
        ),
    )
    .unwrap();
    let env = [
        ("CHATROOM_ENV_FILE", "config/chatroom.env"),
        ("CHATROOM_LOG", "debug"),
        ("CHATROOM_LISTEN", listen.as_str()),
        ("CHATROOM_MAX_WAIT_S", "30"),
        ("CHATROOM_PRUNE", ""),
        ("CHATROOM_ALLOWED_HOSTS", ""),
    ];
    let (log, _) = serve_log(dir.path(), &env).await;
    assert!(
        log.contains("chatroom.env line 2: CHATROOM_ALOWED_HOSTS is not a chatroom setting (did you mean CHATROOM_ALLOWED_HOSTS?)"),
        "{log}"
    );
    assert!(
        log.contains("chatroom.env line 4: CHATROOM_MAX_WAIT_S is also set in the environment"),
        "{log}"
    );
    let line = log
        .lines()
        .find(|l| l.contains("effective settings"))
        .unwrap();
    assert!(
        line.contains("CHATROOM_LOG=debug (chatroom.env line 1)"),
        "{line}"
    );
    assert!(
        line.contains(&format!("CHATROOM_LISTEN={listen} (chatroom.env line 3)")),
        "{line}"
    );
    assert!(
        line.contains("CHATROOM_MAX_WAIT_S=30 (environment, over chatroom.env line 4)"),
        "{line}"
    );
    assert!(
        line.contains("CHATROOM_ENV_FILE=config/chatroom.env (environment)"),
        "{line}"
    );
    assert!(line.contains("CHATROOM_PRUNE=on "), "{line}");

    let (_, out, _) = run_in(dir.path(), &["doctor", "--server"], &env).await;
    assert!(out.contains("chatroom.env read from"), "{out}");
    assert!(
        out.contains("CHATROOM_LOG=debug  (chatroom.env line 1)"),
        "{out}"
    );
    assert!(out.contains("CHATROOM_PRUNE=on  (default)"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("warn") && l.contains("CHATROOM_ALOWED_HOSTS")),
        "{out}"
    );
}

/// A file `CHATROOM_ENV_FILE` names that is not there is warned about,
/// while a missing `.env` is not.
#[tokio::test]
async fn a_missing_env_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, err) = run_in(
        dir.path(),
        &["admin", "list-rooms"],
        &[("CHATROOM_ENV_FILE", "/no/such/chatroom.env")],
    )
    .await;
    assert!(
        err.contains("warning: CHATROOM_ENV_FILE=/no/such/chatroom.env: no such file"),
        "{err}"
    );
    let (_, _, err) = run_in(dir.path(), &["admin", "list-rooms"], &[]).await;
    assert!(!err.contains("warning"), "{err}");
}

/// The first start says how to mint a token the way this server was
/// started: through cargo from a clone, in a container through compose, or
/// the installed binary.
#[tokio::test]
async fn first_start_says_how_to_mint_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = serve_log(dir.path(), &[]).await;
    let admin = if chatroom::config::in_container() {
        "docker compose exec chatroom chatroom admin"
    } else {
        "chatroom admin"
    };
    assert!(
        log.contains("no tokens yet") && log.contains(&format!("`{admin} add-token --agent alice")),
        "{log}"
    );
    let (log, _) = serve_log(dir.path(), &[("CARGO_MANIFEST_DIR", "/src/chatroom")]).await;
    assert!(log.contains("`cargo run -- admin add-room lobby`"), "{log}");
}
