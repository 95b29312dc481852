//! The admin command line, run as the real binary against a real database
//! (the test server's: SQLite, or PostgreSQL with `CHATROOM_TEST_PG_URL`),
//! also while a server runs on it.

mod common;

use std::collections::HashMap;

use common::{TestServer, run_cli};
use serde_json::{Value, json};

/// `add-token` prints the token alone on a line; `--json` prints one object
/// with `token`, `agent`, `room`; both tokens work on a running server.
#[tokio::test]
async fn add_token_prints_a_working_token() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    let (code, out, err) =
        run_cli(&["admin", "add-room", "lobby", "--description", "hi"], &env).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("lobby"));
    let (code, out, _) = run_cli(
        &["admin", "add-token", "--agent", "alice", "--room", "lobby"],
        &env,
    )
    .await;
    assert_eq!(code, 0);
    let token = out
        .lines()
        .find(|l| l.starts_with("cr_"))
        .expect("a line starting cr_");
    assert_eq!(out.trim(), token, "stdout holds the token alone");
    s.mcp(token).call("whoami", json!({})).await;
    let (code, out, _) = run_cli(
        &[
            "admin",
            "add-token",
            "--agent",
            "bob",
            "--room",
            "lobby",
            "--lead",
            "--skill",
            "rust",
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["agent"], "bob");
    assert_eq!(v["room"], "lobby");
    assert_eq!(v["lead"], true);
    let me = s
        .mcp(v["token"].as_str().unwrap())
        .call("whoami", json!({}))
        .await;
    assert_eq!(me["skills"], json!(["rust"]));
}

/// `add-token` on a room that does not exist creates it (and its
/// `--also-room`s) and says so on stderr, as ChatRoomMCP does; the token
/// works there at once. Bad names are refused with a one-line reason, and
/// nothing is created for a grant that is refused.
#[tokio::test]
async fn add_token_creates_missing_rooms() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    let (code, out, err) = run_cli(
        &[
            "admin",
            "add-token",
            "--agent",
            "a",
            "--room",
            "projA",
            "--also-room",
            "projB",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let token = out.trim();
    assert!(
        token.starts_with("cr_"),
        "stdout holds the token alone: {out}"
    );
    assert!(
        err.contains("room projA did not exist: created it"),
        "{err}"
    );
    assert!(
        err.contains("room projB did not exist: created it"),
        "{err}"
    );
    for room in ["projA", "projB"] {
        assert!(s.store.get_room(room).await.unwrap().is_some(), "{room}");
    }
    assert!(s.store.get_room("proja").await.unwrap().is_none());
    let me = s.mcp(token).call("whoami", json!({})).await;
    assert_eq!(me["room"], "projA", "{me}");
    // A second token for the now existing room creates nothing.
    let (code, _, err) = run_cli(
        &["admin", "add-token", "--agent", "b", "--room", "projA"],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("created"), "{err}");

    for bad in [
        vec!["--agent", "a", "--room", "Bad Name"],
        vec!["--agent", "a", "--room", "../up"],
        vec!["--agent", "a", "--room", "fresh", "--also-room", " "],
        vec!["--agent", "bad agent", "--room", "fresh"],
    ] {
        let args: Vec<&str> = ["admin", "add-token"].into_iter().chain(bad).collect();
        let (code, out, err) = run_cli(&args, &env).await;
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty());
        assert!(err.contains("not valid"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(s.store.get_room("fresh").await.unwrap().is_none());
    let (code, _, err) = run_cli(&["admin", "add-room", "Bad Name"], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("not valid"), "{err}");
    let (code, _, _) = run_cli(&["admin", "add-room", "dup"], &env).await;
    assert_eq!(code, 0);
    let (code, _, err) = run_cli(&["admin", "add-room", "dup"], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");
}

/// Room names keep their case through the admin commands: `projA` and
/// `proja` are two rooms, each listed, changed, exported and deleted on its
/// own.
#[tokio::test]
async fn room_names_are_case_sensitive() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    for (room, desc) in [("projA", "upper"), ("proja", "lower")] {
        let (code, _, err) =
            run_cli(&["admin", "add-room", room, "--description", desc], &env).await;
        assert_eq!(code, 0, "{err}");
    }
    let (_, out, _) = run_cli(&["admin", "list-rooms", "--json"], &env).await;
    let list: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"projA") && names.contains(&"proja"),
        "{names:?}"
    );
    let (code, out, _) = run_cli(&["admin", "room-info", "--room", "projA"], &env).await;
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["description"],
        "upper"
    );
    let (code, out, err) = run_cli(
        &["admin", "export", "--room", "projA", "--format", "json"],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let export: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(export["room"]["name"], "projA", "{export}");
    assert_eq!(export["room"]["description"], "upper", "{export}");
    let (code, _, err) = run_cli(
        &["admin", "set-retention", "--room", "proja", "--days", "7"],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_cli(&["admin", "delete-room", "--room", "PROJA", "--yes"], &env).await;
    assert_ne!(code, 0, "PROJA is neither room");
    assert!(err.contains("does not exist"), "{err}");
    let (code, _, _) = run_cli(&["admin", "delete-room", "--room", "projA", "--yes"], &env).await;
    assert_eq!(code, 0);
    assert!(s.store.get_room("projA").await.unwrap().is_none());
    let lower = s
        .store
        .get_room("proja")
        .await
        .unwrap()
        .expect("proja stays");
    assert_eq!(lower.retention_days, 7);
    assert_eq!(lower.description, "lower");
}

/// `list-tokens` never prints a raw token; `revoke` takes effect on the
/// running server at once.
#[tokio::test]
async fn list_tokens_hides_secrets_and_revoke_is_immediate() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    run_cli(&["admin", "add-room", "lobby"], &env).await;
    let (_, out, _) = run_cli(
        &["admin", "add-token", "--agent", "alice", "--room", "lobby"],
        &env,
    )
    .await;
    let token = out.trim().to_owned();
    let alice = s.mcp(&token);
    alice.call("whoami", json!({})).await;
    for args in [
        &["admin", "list-tokens"][..],
        &["admin", "list-tokens", "--json"][..],
    ] {
        let (code, out, err) = run_cli(args, &env).await;
        assert_eq!(code, 0);
        assert!(out.contains("alice"));
        assert!(!out.contains(&token) && !err.contains(&token));
        assert!(!out.contains(&token[3..20]), "not even part of it");
    }
    let (code, out, _) = run_cli(&["admin", "revoke", "--agent", "alice"], &env).await;
    assert_eq!(code, 0);
    assert!(out.contains("revoked 1"));
    let (status, _) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(status, 401);
    let (code, out, _) = run_cli(&["admin", "list-tokens"], &env).await;
    assert_eq!(code, 0);
    assert!(out.contains("revoked"));
    let (code, _, err) = run_cli(&["admin", "purge-tokens", "--older-than-days", "0"], &env).await;
    assert_ne!(code, 0, "purge needs --yes");
    assert!(err.contains("--yes"));
    let (code, out, _) = run_cli(
        &["admin", "purge-tokens", "--older-than-days", "0", "--yes"],
        &env,
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("purged 1"));
}

/// `list-tokens` shows each token's own last use, so an agent's unused
/// token stands out; `revoke --token ID` revokes that one alone (at once,
/// on the running server) and leaves the agent's other tokens working.
#[tokio::test]
async fn one_token_at_a_time() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    let mint = || async {
        let (code, out, err) = run_cli(
            &[
                "admin",
                "add-token",
                "--agent",
                "alice",
                "--room",
                "lobby",
                "--json",
            ],
            &env,
        )
        .await;
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        (
            v["id"].as_i64().unwrap(),
            v["token"].as_str().unwrap().to_owned(),
        )
    };
    let (used_id, used) = mint().await;
    let (idle_id, idle) = mint().await;
    let (leaked_id, leaked) = mint().await;
    s.mcp(&used).call("whoami", json!({})).await;

    let (code, out, err) = run_cli(
        &["admin", "revoke", "--token", &leaked_id.to_string()],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("revoked token {leaked_id} of alice"))
            && out.contains("keeps 2 other"),
        "{out}"
    );
    let (status, _) = s
        .mcp(&leaked)
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    assert_eq!(status, 401, "the revoked token is refused at once");
    s.mcp(&used).call("whoami", json!({})).await;
    s.mcp(&idle).call("whoami", json!({})).await;

    // Refusals name the id and say why, and change nothing.
    for (args, says) in [
        (vec!["--token", &*leaked_id.to_string()], "revoked already"),
        (vec!["--token", "9999"], "no token 9999"),
        (vec!["--token", "g9999"], "no token g9999"),
        (vec!["--token", "alice"], "not a token id"),
        (
            vec!["--token", "1", "--agent", "alice"],
            "cannot be used with",
        ),
        (vec![], "--agent"),
    ] {
        let argv: Vec<&str> = ["admin", "revoke"]
            .into_iter()
            .chain(args.iter().map(|a| &**a))
            .collect();
        let (code, _, err) = run_cli(&argv, &env).await;
        assert_ne!(code, 0, "{argv:?}");
        assert!(err.contains(says), "{argv:?}: {err}");
    }
    s.mcp(&idle).call("whoami", json!({})).await;

    // The last use reaches the database with the presence batch; stopping
    // the server writes what is pending.
    let _files = s.stop_keeping_files().await;
    let (code, out, err) = run_cli(&["admin", "list-tokens", "--json"], &env).await;
    assert_eq!(code, 0, "{err}");
    let list: Vec<Value> = serde_json::from_str(&out).unwrap();
    let of = |id: i64| list.iter().find(|t| t["id"] == id).unwrap().clone();
    assert!(of(used_id)["last_used"].is_string(), "{out}");
    assert!(of(idle_id)["last_used"].is_string(), "{out}");
    assert!(of(leaked_id)["last_used"].is_null(), "never used: {out}");
    assert!(of(leaked_id)["revoked_ts"].is_string(), "{out}");
    let (code, out, _) = run_cli(&["admin", "list-tokens"], &env).await;
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().contains("LAST USED"), "{out}");
    let row = |id: i64| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(&*id.to_string()))
            .unwrap_or_else(|| panic!("no row {id}: {out}"))
            .to_owned()
    };
    assert!(
        row(leaked_id).contains("never") && row(leaked_id).contains("revoked"),
        "{out}"
    );
    assert!(!row(used_id).contains("never"), "{out}");
}

/// `quickstart` run a second time says that alice, bob and the observer
/// already had tokens (naming their ids) and how to revoke or rename,
/// instead of minting more without a word; the first run says nothing of it.
#[tokio::test]
async fn quickstart_again_says_it_adds_tokens() {
    let s = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let quickstart = || async {
        let out = tokio::process::Command::new(common::binary())
            .args(["quickstart", "--url", &s.url])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(s.cli_env())
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (_, err) = quickstart().await;
    assert!(!err.contains("already has"), "{err}");
    let first: Vec<i64> = s
        .store
        .list_tokens()
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    let (out, err) = quickstart().await;
    for agent in ["alice", "bob", "observer"] {
        let id = s
            .store
            .list_tokens()
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.grant.agent == agent && first.contains(&t.id))
            .unwrap()
            .id;
        assert!(
            err.contains(&format!(
                "agent {agent} already has 1 active token(s) (id {id})"
            )),
            "{err}"
        );
    }
    assert!(
        err.contains("chatroom admin revoke --token ID") && err.contains("--agents"),
        "{err}"
    );
    assert!(
        out.contains("## alice: in alice's project folder (one more token"),
        "{out}"
    );
    assert_eq!(s.store.list_tokens().await.unwrap().len(), 6);
}

/// `delete-room` needs `--yes`; with it, the room and its content are gone.
#[tokio::test]
async fn delete_room_needs_yes() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    let alice = s.agent("alice", "lobby").await;
    alice
        .call("post_message", json!({"body": "keep me?"}))
        .await;
    let (code, _, err) = run_cli(&["admin", "delete-room", "--room", "lobby"], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("--yes"));
    alice.call("read_messages", json!({})).await;
    let (code, _, err) = run_cli(&["admin", "delete-room", "--room", "lobby", "--yes"], &env).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(alice.refused("read_messages", json!({})).await, "not_found");
    let (code, _, _) = run_cli(&["admin", "delete-room", "--room", "lobby", "--yes"], &env).await;
    assert_ne!(code, 0, "already gone");
}

/// `room-info`, `set-retention` and `list-rooms` work and validate.
#[tokio::test]
async fn room_commands() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    run_cli(&["admin", "add-room", "lobby"], &env).await;
    let (code, out, _) = run_cli(
        &[
            "admin",
            "room-info",
            "--room",
            "lobby",
            "--repo-url",
            "https://x",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("https://x"));
    let (code, _, err) = run_cli(
        &[
            "admin",
            "set-retention",
            "--room",
            "lobby",
            "--days",
            "9999",
        ],
        &env,
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("days"), "{err}");
    let (code, out, _) = run_cli(
        &["admin", "set-retention", "--room", "lobby", "--days", "7"],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run_cli(&["admin", "list-rooms", "--json"], &env).await;
    assert_eq!(code, 0);
    let rooms: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rooms[0]["name"], "lobby");
    assert_eq!(rooms[0]["retention_days"], 7);
    assert_eq!(rooms[0]["repo_url"], "https://x");
}

/// `--help` works everywhere and a bad argument exits non-zero.
#[tokio::test]
async fn help_everywhere() {
    let env = HashMap::new();
    for args in [
        &["--help"][..],
        &["serve", "--help"][..],
        &["admin", "--help"][..],
        &["admin", "add-token", "--help"][..],
        &["healthcheck", "--help"][..],
    ] {
        let (code, out, _) = run_cli(args, &env).await;
        assert_eq!(code, 0, "{args:?}");
        assert!(out.contains("Usage"), "{args:?}: {out}");
    }
    let (code, _, err) = run_cli(&["admin", "add-token", "--agent"], &env).await;
    assert_ne!(code, 0);
    assert!(!err.is_empty());
}

/// `doctor --agent` says what is wrong with the URL and the token instead
/// of failing later with a library's words: a URL without `http://`,
/// `https://` against the plain server, a token pasted with `Bearer `, and
/// the failed-login throttle as a sentence, not JSON.
#[tokio::test]
async fn doctor_names_what_is_wrong_with_url_and_token() {
    let s = TestServer::start_with(|c| c.auth_fail_limit = 1).await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let doctor = |url: String, token: String| async move {
        let env = HashMap::from([("CHATROOM_URL", url), ("CHATROOM_TOKEN", token)]);
        run_cli(&["doctor", "--agent"], &env).await
    };
    let bare = s.url.trim_start_matches("http://").to_owned();
    let (code, out, _) = doctor(bare.clone(), token.clone()).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "FAIL  CHATROOM_URL={bare} lacks its scheme: set CHATROOM_URL=http://{bare}"
        )),
        "{out}"
    );
    assert!(!out.contains("relative URL"), "{out}");

    let https = format!("https://{bare}");
    let (code, out, _) = doctor(https.clone(), token.clone()).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "{https} does not speak https, but {} answers",
            s.url
        )) && out.contains(&format!("set CHATROOM_URL={}", s.url)),
        "{out}"
    );

    let (code, out, _) = doctor(s.url.clone(), format!("Bearer {token}")).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL  CHATROOM_TOKEN starts with `Bearer `"),
        "{out}"
    );
    assert!(
        out.contains("whoami: agent alice"),
        "the rest is still checked: {out}"
    );

    // One failure is the limit here; the next call is turned away.
    let (_, out, _) = doctor(s.url.clone(), "cr_wrong".into()).await;
    assert!(out.contains("refuses CHATROOM_TOKEN (401"), "{out}");
    let (code, out, _) = doctor(s.url.clone(), "cr_wrong".into()).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("turns this machine away for")
            && out.contains("failed-login throttle")
            && !out.contains('{'),
        "{out}"
    );
}

/// Every admin command names where its database came from: `--db`, the
/// variable, or a `.env` line.
#[tokio::test]
async fn admin_names_where_the_database_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: Vec<&'static str>, env: Vec<(&'static str, &'static str)>| {
        let dir = dir.path().to_owned();
        async move {
            let out = tokio::process::Command::new(common::binary())
                .args(args)
                .current_dir(dir)
                .env_clear()
                .envs(env)
                .output()
                .await
                .unwrap();
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let err = run(
        vec!["admin", "init", "--db", "flag.db"],
        vec![("CHATROOM_DB", "env.db")],
    )
    .await;
    assert!(err.contains("flag.db (--db), created now"), "{err}");
    let err = run(vec!["admin", "init"], vec![("CHATROOM_DB", "env.db")]).await;
    assert!(err.contains("env.db (CHATROOM_DB), created now"), "{err}");
    std::fs::write(
        dir.path().join(".env"),
        "CHATROOM_LOG=info\nCHATROOM_DB=file.db\n",
    )
    .unwrap();
    let err = run(vec!["admin", "init"], vec![]).await;
    assert!(
        err.contains("file.db (CHATROOM_DB, .env line 2), created now"),
        "{err}"
    );
}

/// `chatroom man` has a page for every subcommand it names, each one
/// `chatroom man …` away, down to `chatroom man admin add-token`; an unknown
/// one is refused; `--dir` writes them all.
#[tokio::test]
async fn man_pages_exist_for_every_subcommand() {
    let env = HashMap::new();
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args = vec!["man".to_owned()];
        args.extend(path.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = run_cli(&args, &env).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        let title = ["chatroom".to_owned()]
            .into_iter()
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join("-");
        assert!(out.contains(&format!(".TH {title} 1")), "{args:?}: {out}");
        seen += 1;
        // Each `chatroom\-admin\-add\-token(1)` it refers to.
        for word in out.split_whitespace() {
            let Some(name) = word.strip_suffix("(1)") else {
                continue;
            };
            let name = name.replace("\\-", "-");
            let Some(sub) = name.strip_prefix(&format!("{title}-")) else {
                continue;
            };
            let mut next = path.clone();
            next.push(sub.to_owned());
            todo.push(next);
        }
    }
    assert!(seen > 20, "only {seen} pages");
    let (code, _, err) = run_cli(&["man", "admin", "add-tokens"], &env).await;
    assert_eq!(code, 2);
    assert!(
        err.contains("`chatroom admin add-tokens` is not a command"),
        "{err}"
    );
    let (code, out, _) = run_cli(&["man", "serve"], &env).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("CHATROOM_OAUTH_REFRESH_DAYS"),
        "the settings are in serve's page"
    );
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run_cli(&["man", "--dir", dir.path().to_str().unwrap()], &env).await;
    assert_eq!(code, 0, "{err}");
    assert!(dir.path().join("chatroom-admin-add-token.1").exists());
    assert!(dir.path().join("chatroom.1").exists());
}

/// Every owner change made at the command line lands in the admin log, by
/// `(admin)` from the `command line`, as the console's do; reading
/// commands and refused changes write nothing.
#[tokio::test]
async fn cli_changes_reach_the_admin_log() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    for args in [
        &["admin", "add-room", "ops"][..],
        &["admin", "room-info", "--room", "ops", "--description", "d"],
        &["admin", "room-info", "--room", "ops"],
        &["admin", "set-retention", "--room", "ops", "--days", "3"],
        &["admin", "set-retention", "--room", "ops", "--days", "99999"],
        &[
            "admin",
            "add-token",
            "--agent",
            "w",
            "--room",
            "ops",
            "--also-room",
            "new",
        ],
        &["admin", "list-tokens"],
        &["admin", "revoke", "--agent", "w"],
        &["admin", "purge-tokens", "--older-than-days", "30", "--yes"],
        &["admin", "delete-room", "--room", "new", "--yes"],
    ] {
        run_cli(args, &env).await;
    }
    let log = s.store.admin_log(50).await.unwrap();
    let got: Vec<(&str, &str)> = log
        .iter()
        .rev()
        .map(|e| {
            assert_eq!(
                (e.actor.as_str(), e.address.as_str()),
                ("(admin)", "command line")
            );
            (e.action.as_str(), e.target.as_str())
        })
        .collect();
    assert_eq!(
        got,
        [
            ("room.create", "room ops"),
            ("room.info", "room ops (description)"),
            ("room.retention", "room ops keeps 3 day(s)"),
            ("room.create", "room new"),
            ("token.mint", "agent w (token #1; room ops +new)"),
            ("token.revoke", "agent w (1 token(s))"),
            ("token.purge", "0 token(s) revoked more than 30 day(s) ago"),
            ("room.delete", "room new"),
        ]
    );
}

/// A grant's extra rooms are stored once each, sorted and without the
/// default room, whether a token or a connect code carries them
/// (`b, a, b, lobby` is `a, b`).
#[tokio::test]
async fn extra_rooms_are_stored_once_each() {
    let s = TestServer::start().await;
    let env = s.cli_env();
    let rooms = [
        "--room",
        "lobby",
        "--also-room",
        "b",
        "--also-room",
        "a",
        "--also-room",
        "b",
        "--also-room",
        "lobby",
        "--json",
    ];
    let token = [&["admin", "add-token", "--agent", "t"][..], &rooms].concat();
    let (code, out, err) = run_cli(&token, &env).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["also_rooms"], json!(["a", "b"]));
    let code_args = [&["admin", "connect", "--agent", "app"][..], &rooms].concat();
    let (code, out, err) = run_cli(&code_args, &env).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["also_rooms"], json!(["a", "b"]));
    let (_, out, _) = run_cli(&["admin", "list-tokens", "--json"], &env).await;
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["also_rooms"], json!(["a", "b"]));
}
