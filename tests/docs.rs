//! The docs against the program: every command of README.md,
//! GETTING_STARTED.md and CLOUDFLARE_TUNNEL.md that can run on this machine
//! runs, in order, against a real `chatroom serve` (Docker's `exec`/`run`
//! of the chatroom service run the same binary on the same database); every
//! `.env` snippet reads without a warning and is a valid configuration;
//! every JSON snippet parses; and docs/TOOLS.md is what the server's tool
//! list and the tools' answers say (`CHATROOM_UPDATE_DOCS=1` rewrites it).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chatroom::config::{Config, parse_dotenv};
use chatroom::domain::tokens::Grant;
use common::{TestServer, binary, free_port, wait_healthy};
use serde_json::{Value, json};

const GUIDES: &[&str] = &["README.md", "GETTING_STARTED.md", "CLOUDFLARE_TUNNEL.md"];

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A fenced block of a Markdown file: its info string, first line, text.
struct Block {
    info: String,
    line: usize,
    text: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize, String)> = None; // marker, info, line, text
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some((marker, info, start, body)) = &mut open {
            if trimmed.trim_end() == marker.as_str() {
                out.push(Block {
                    info: std::mem::take(info),
                    line: *start,
                    text: std::mem::take(body),
                });
                open = None;
            } else {
                // Blocks inside list items are indented.
                body.push_str(line.strip_prefix("  ").unwrap_or(line));
                body.push('\n');
            }
            continue;
        }
        if trimmed.starts_with("```") {
            let marker: String = trimmed.chars().take_while(|c| *c == '`').collect();
            let info = trimmed[marker.len()..].trim().to_owned();
            open = Some((marker, info, n + 2, String::new()));
        }
    }
    out
}

/// Whether a shell block is the text of a `.env` file (only `NAME=value`
/// lines and comments), which the guides give to paste into `.env`.
fn is_env_snippet(text: &str) -> bool {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    !lines.is_empty()
        && lines.iter().all(|l| {
            l.split_once('=').is_some_and(|(name, value)| {
                // `NAME=value cmd` is a command with an environment.
                let value = value.split(" #").next().unwrap_or("").trim();
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !value.contains(char::is_whitespace)
            })
        })
}

/// Why a shell command cannot run here (needs Docker's engine, another
/// machine, a model, or changes this machine), or `None` to run it.
fn not_runnable(command: &str) -> Option<&'static str> {
    if command.contains("chat.example.com") || command.contains("postgres") {
        return Some("another machine or PostgreSQL");
    }
    if command.contains("chatroom serve") || command.contains("-- serve") {
        return Some("the test runs the server itself");
    }
    if command.contains("chatroom watch") || command.contains("chatroom worker") {
        return Some("runs until stopped (tests/watch.rs and tests/worker.rs cover it)");
    }
    // A new folder to work in (under the test's HOME) is fine.
    let words: Vec<&str> = command.split_whitespace().collect();
    if let ["mkdir", "-p", a, "&&", "cd", b] = words.as_slice()
        && a == b
    {
        return None;
    }
    for segment in command.split("&&").flat_map(|s| s.split([';', '|'])) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        let Some(first) = words.iter().find(|w| !w.contains('=')).copied() else {
            continue;
        };
        let docker_chatroom = segment.contains("docker compose exec")
            && segment.contains("chatroom chatroom ")
            || segment.contains("docker compose run --rm chatroom ");
        if segment.contains("import-chatroommcp") {
            return Some("needs a ChatRoomMCP database; tests/import.rs covers it");
        }
        if first == "docker" && !docker_chatroom {
            return Some("the Docker engine");
        }
        if [
            "cp", "mkdir", "sudo", "cd", "git", "claude", "ssh", "mv", "bash", "openssl",
        ]
        .contains(&first)
            || segment.trim_start().starts_with("cargo install")
        {
            return Some("changes this machine");
        }
    }
    None
}

/// Turns a guide's shell block into the lines of a script that runs here:
/// URLs point at the test server, `/data` at its folder, `cr_…` at a real
/// token, `cargo run --release --` at the built binary.
fn runnable(block: &Block, origin: &str, server: &str, dir: &Path, token: &str) -> String {
    let mut script = String::new();
    let mut pending = String::new();
    for line in block.text.lines() {
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        let command = command.trim();
        if command.is_empty() || command.starts_with('#') {
            continue;
        }
        if let Some(why) = not_runnable(command) {
            script.push_str(&format!("# skipped ({why}): {command}\n"));
            continue;
        }
        let data = dir.to_path_buf();
        let command = command
            .replace("http://127.0.0.1:8080", server)
            .replace("http://localhost:8080", server)
            .replace("http://homeserver.lan:8080", server)
            .replace("sqlite:///data/", &format!("sqlite://{}/", data.display()))
            .replace("/data/", &format!("{}/", data.display()))
            .replace("cr_…", token)
            .replace("cargo run --release --", "chatroom");
        script.push_str(&format!(
            "echo '+ {origin}:{}' >&2\n{command}\n",
            block.line
        ));
    }
    script
}

/// Fake `docker`: `compose exec [-T] chatroom chatroom ARGS` and `compose
/// run --rm chatroom ARGS` are the same binary on the same database.
const FAKE_DOCKER: &str = r#"#!/bin/sh
[ "$1" = compose ] || { echo "docs test: cannot run docker $*" >&2; exit 97; }
shift
while [ "${1#-}" != "$1" ]; do shift 2; done
verb=$1; shift
while [ "${1#-}" != "$1" ]; do shift; done
service=$1; shift
[ "$service" = chatroom ] || { echo "docs test: no service $service" >&2; exit 97; }
if [ "$verb" = exec ]; then [ "$1" = chatroom ] && shift; fi
# The image's database: /data/chatroom.db, which is the server's folder here.
CHATROOM_DB="$DOCS_DATA/chatroom.db" exec chatroom "$@"
"#;

/// Fake `curl`: the real one, failing on an HTTP error as a person would notice it.
const FAKE_CURL: &str = "#!/bin/sh\nexec /usr/bin/curl --fail-with-body \"$@\"\n";

/// A real server in a fresh folder, as a guide's reader would start it.
struct Served {
    dir: tempfile::TempDir,
    url: String,
    child: tokio::process::Child,
    bin: PathBuf,
}

impl Served {
    async fn start() -> Served {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("home")).unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(binary(), bin.join("chatroom")).unwrap();
        for (name, text) in [("docker", FAKE_DOCKER), ("curl", FAKE_CURL)] {
            std::fs::write(bin.join(name), text).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut served = Served {
            child: tokio::process::Command::new(binary())
                .arg("serve")
                .current_dir(dir.path())
                .env_clear()
                .envs(Served::base_env(dir.path()))
                .env("CHATROOM_LISTEN", format!("127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap(),
            dir,
            url,
            bin,
        };
        assert!(
            wait_healthy(&served.url, Duration::from_secs(30)).await,
            "the server did not start"
        );
        let _ = &mut served;
        served
    }

    /// The server keeps `chatroom.db` in its folder, as a reader's would.
    fn base_env(dir: &Path) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".into(), dir.join("home").display().to_string()),
            ("DOCS_DATA".into(), dir.display().to_string()),
        ]
    }

    /// Runs `script` in the server's folder with the agent variables set.
    async fn run(&self, script: &str, token: &str) -> (i32, String, String) {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = tokio::process::Command::new("sh")
            .arg("-ec")
            .arg(script)
            .current_dir(self.dir.path())
            .env_clear()
            .envs(Served::base_env(self.dir.path()))
            .env("PATH", path)
            .env("CHATROOM_URL", &self.url)
            .env("CHATROOM_TOKEN", token)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The guides as a reader follows them: the README on its own, the tunnel
/// guide after the getting-started guide it builds on, on the same server.
const READINGS: &[&[&str]] = &[
    &["README.md"],
    &["GETTING_STARTED.md", "CLOUDFLARE_TUNNEL.md"],
];

/// Every runnable command of each guide runs, top to bottom on one fresh
/// server per reading, and succeeds.
#[tokio::test]
async fn guide_commands_run_against_a_real_server() {
    for reading in READINGS {
        let served = Served::start().await;
        // The reader's own token for `$CHATROOM_TOKEN` and `cr_…`: every room.
        let (code, out, err) = served
            .run(
                "chatroom admin add-room docs-reader >/dev/null && chatroom admin add-token --agent docs-reader --room docs-reader --all-rooms",
                "",
            )
            .await;
        assert_eq!(code, 0, "{err}");
        let token = out.trim().to_owned();
        let mut script = String::new();
        for guide in *reading {
            let mut ran = 0;
            for block in blocks(&repo_file(guide)) {
                if !["sh", "bash", "shell", "console"].contains(&block.info.as_str())
                    || is_env_snippet(&block.text)
                {
                    continue;
                }
                let part = runnable(&block, guide, &served.url, served.dir.path(), &token);
                ran += part.lines().filter(|l| l.starts_with("echo '+ ")).count();
                script.push_str(&part);
            }
            assert!(ran >= 2, "{guide}: only {ran} commands can run\n{script}");
        }
        let (code, out, err) = served.run(&script, &token).await;
        let names = reading.join(" + ");
        assert_eq!(
            code, 0,
            "{names}: a documented command failed (the last `+` line names it)\n--- script\n{script}\n--- stdout\n{out}\n--- stderr\n{err}"
        );
        // What the walkthrough promises: bob's hook showed alice's mention.
        if reading.contains(&"README.md") {
            assert!(
                out.contains("@bob can you review the parser?") && out.contains("UNTRUSTED DATA"),
                "README.md: bob's hook did not show alice's message\n--- stdout\n{out}\n--- stderr\n{err}"
            );
        }
        served.stop().await;
    }
}

/// Every `.env` snippet the guides give reads without a warning (known
/// names, no duplicates, parsable lines) and is a valid configuration.
#[test]
fn env_snippets_are_valid() {
    let mut seen = 0;
    for guide in GUIDES {
        for block in blocks(&repo_file(guide)) {
            if !is_env_snippet(&block.text) {
                continue;
            }
            seen += 1;
            let dotenv = parse_dotenv(&block.text, |_| None);
            assert!(
                dotenv.warnings.is_empty(),
                "{guide}:{}: {:?}",
                block.line,
                dotenv.warnings
            );
            let vars: HashMap<String, String> = dotenv
                .values
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect();
            if let Err(e) = Config::from_map(&vars) {
                panic!("{guide}:{}: {e}", block.line);
            }
        }
    }
    assert!(seen >= 4, "found only {seen} .env snippets");
}

/// Every JSON snippet of the guides (settings files, `.mcp.json`) parses.
#[test]
fn json_snippets_parse() {
    for guide in GUIDES {
        for block in blocks(&repo_file(guide)) {
            if block.info == "json" {
                let parsed: Result<Value, _> = serde_json::from_str(&block.text);
                assert!(parsed.is_ok(), "{guide}:{}: {parsed:?}", block.line);
            }
        }
    }
}

// ---- The tool reference ------------------------------------------------------

/// What the reference run saw: each tool's answers' keys (one set per
/// call), and the task objects inside any answer (their keys, and the
/// values of their `can`).
#[derive(Default)]
struct Seen {
    answers: HashMap<String, Vec<BTreeSet<String>>>,
    task_keys: Vec<BTreeSet<String>>,
    can: BTreeSet<String>,
}

impl Seen {
    fn record(&mut self, tool: &str, v: &Value) {
        let set: BTreeSet<String> = v
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        self.answers.entry(tool.to_owned()).or_default().push(set);
        self.tasks_in(v);
    }

    /// Every object with a `can` list is a task as its viewer sees it.
    fn tasks_in(&mut self, v: &Value) {
        match v {
            Value::Object(o) => {
                if let Some(Value::Array(can)) = o.get("can") {
                    self.task_keys.push(o.keys().cloned().collect());
                    self.can
                        .extend(can.iter().filter_map(Value::as_str).map(str::to_owned));
                }
                o.values().for_each(|v| self.tasks_in(v));
            }
            Value::Array(a) => a.iter().for_each(|v| self.tasks_in(v)),
            _ => {}
        }
    }
}

/// One call of every tool, in an order in which each succeeds, then the
/// answers that differ: a claim and a release refused, a stale update, a
/// wait that saw a change, a cursor set back. Every key of every answer is
/// a result key.
async fn call_every_tool(s: &TestServer) -> Seen {
    s.room("docs").await;
    s.room("scratch").await;
    let token = s
        .token_with(Grant {
            agent: "writer".into(),
            room: "docs".into(),
            also_rooms: vec![],
            readonly: false,
            admin: true,
            all_rooms: true,
            lead: true,
            skills: vec![],
            profile: Default::default(),
        })
        .await;
    let c = s.mcp(&token);
    let rival = s.agent("rival", "docs").await;
    let mut seen = Seen::default();
    for (tool, args) in [
        ("whoami", json!({})),
        ("get_room_info", json!({})),
        ("set_room_info", json!({"description": "docs"})),
        ("list_agents", json!({})),
        ("post_message", json!({"body": "hello @writer"})),
        ("set_attention", json!({"attention": "dnd"})),
        ("read_messages", json!({})),
        ("read_events", json!({})),
        ("my_mentions", json!({})),
        ("search", json!({"query": "hello"})),
        ("whats_new", json!({})),
        ("wait_for_change", json!({"timeout_s": 1})),
    ] {
        let v = c.call(tool, args).await;
        seen.record(tool, &v);
    }
    // A change by another agent since the last look: the wait says what.
    rival
        .call("post_message", json!({"body": "a change"}))
        .await;
    let v = c.call("wait_for_change", json!({"timeout_s": 1})).await;
    seen.record("wait_for_change", &v);
    let v = c
        .call("create_task", json!({"title": "one", "needs_review": true}))
        .await;
    seen.record("create_task", &v);
    let id = v["created"]["id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no task id in {v}"));
    for (tool, args) in [
        ("list_tasks", json!({})),
        ("show_board", json!({})),
        ("get_task", json!({"task_id": id})),
        ("claim_task", json!({"task_id": id})),
        ("update_task", json!({"task_id": id, "body": "more"})),
        // A stale version: refused, with the task as it is now.
        (
            "update_task",
            json!({"task_id": id, "body": "again", "expected_version": 1}),
        ),
        ("add_note", json!({"task_id": id, "body": "a note"})),
        ("submit_result", json!({"task_id": id, "result": "done"})),
        ("review_task", json!({"task_id": id, "approve": true})),
    ] {
        let v = c.call(tool, args).await;
        seen.record(tool, &v);
    }
    let v = c.call("create_task", json!({"title": "two"})).await;
    let two = v["created"]["id"].as_i64().unwrap();
    // Not held by writer yet: a release refused, with the reason.
    let v = c.call("release_task", json!({"task_id": two})).await;
    seen.record("release_task", &v);
    c.call("claim_task", json!({"task_id": two})).await;
    // Held by writer: another's claim refused, with the reason.
    let v = rival.call("claim_task", json!({"task_id": two})).await;
    seen.record("claim_task", &v);
    for (tool, args) in [
        ("release_task", json!({"task_id": two})),
        ("cancel_task", json!({"task_id": two})),
    ] {
        let v = c.call(tool, args).await;
        seen.record(tool, &v);
    }
    let v = c
        .call(
            "put_file",
            json!({"name": "notes.txt", "content_base64": "aGVsbG8=", "mime": "text/plain"}),
        )
        .await;
    seen.record("put_file", &v);
    let file = v["file_id"]
        .as_i64()
        .or_else(|| v["file"]["id"].as_i64())
        .unwrap_or_else(|| panic!("no file id in {v}"));
    for (tool, args) in [
        ("list_files", json!({})),
        ("get_file", json!({"file_id": file})),
        ("delete_file", json!({"file_id": file})),
        ("set_retention", json!({"days": 0})),
        ("delete_room", json!({"room": "scratch"})),
    ] {
        let v = c.call(tool, args).await;
        seen.record(tool, &v);
    }
    // The board app's own tools (what a person's clicks call).
    let v = c
        .call(
            "create_task",
            json!({"title": "three", "needs_review": true}),
        )
        .await;
    let three = v["created"]["id"].as_i64().unwrap();
    for (tool, args) in [
        ("board_refresh", json!({"room": "docs"})),
        ("board_task", json!({"task_id": three, "room": "docs"})),
        ("board_claim", json!({"task_id": three, "room": "docs"})),
        (
            "board_note",
            json!({"task_id": three, "body": "from the app", "room": "docs"}),
        ),
        ("board_release", json!({"task_id": three, "room": "docs"})),
        (
            "board_post",
            json!({"body": "from the app", "room": "docs"}),
        ),
    ] {
        let v = c.call(tool, args).await;
        seen.record(tool, &v);
    }
    c.call("claim_task", json!({"task_id": three, "room": "docs"}))
        .await;
    c.call(
        "submit_result",
        json!({"task_id": three, "result": "r", "room": "docs"}),
    )
    .await;
    let v = c
        .call(
            "board_review",
            json!({"task_id": three, "approve": true, "room": "docs"}),
        )
        .await;
    seen.record("board_review", &v);
    // A cursor beyond the room's history (a database restored from an
    // older backup): whats_new sets it back and says so.
    s.exec_sql(
        "UPDATE cursors SET event_id = $1 WHERE agent = 'writer'",
        100_000,
    )
    .await;
    let v = c.call("whats_new", json!({})).await;
    assert!(v.get("cursor_reset").is_some(), "{v}");
    seen.record("whats_new", &v);
    seen
}

/// The Markdown reference: every tool of `tools/list` with its description,
/// its arguments (from the input schema) and its result keys.
fn render(tools: &[Value], seen: &Seen) -> String {
    let mut md = String::from(
        "# Tool reference\n\n\
Every MCP tool at `/mcp`, as the server lists it (`tools/list`). Generated by\n\
`tests/docs.rs` from the running server, which fails when this file is out\n\
of date; `CHATROOM_UPDATE_DOCS=1 cargo nextest run --test docs` rewrites it.\n\
Every answer also carries `room` and `you_are`; answers holding what other\n\
agents wrote carry `untrusted_content_warning`.\n\n\
An event (`whats_new`, `read_events`, `show_board`, the `/v1` stream and\n\
MQTT) is `{id, room, ts, kind, actor, task_id, message_id, detail, data}`:\n\
`detail` is one line of text saying what happened (a message's or note's\n\
own text, a new task's title; at most 200 characters, a longer one ends in\n\
`…`), `data` the\n\
structured record (`body`, `mentions`, `title`, `status`, `file_id`, …).\n\n",
    );
    let list = |set: &BTreeSet<String>| {
        set.iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let all: BTreeSet<String> = seen.task_keys.iter().flatten().cloned().collect();
    let (every, some): (BTreeSet<String>, BTreeSet<String>) = all
        .into_iter()
        .partition(|k| seen.task_keys.iter().all(|t| t.contains(k)));
    md.push_str(&format!(
        "A task (`task`, `tasks`, `created`, `current`, the board's columns) has\n\
the keys {}; some also carry {}. `can` lists what you may\n\
do with the task now, each an action of a tool ({}),\n\
so a client offers only what will work.\n\n\
\"Result keys\" below are the keys of every answer of a tool; those after\n\
\"sometimes\" only some answers carry (a refused claim's `reason`, a stale\n\
update's `current`, the hint of a wait that saw a change, …).\n\n",
        list(&every),
        list(&some),
        list(&seen.can),
    ));
    let mut names: Vec<&Value> = tools.iter().collect();
    names.sort_by_key(|t| t["name"].as_str().unwrap_or("").to_owned());
    md.push_str("| tool | what it does |\n|---|---|\n");
    for t in &names {
        let name = t["name"].as_str().unwrap_or("");
        let first = t["description"]
            .as_str()
            .unwrap_or("")
            .split(". ")
            .next()
            .unwrap_or("")
            .trim_end_matches('.');
        md.push_str(&format!(
            "| [`{name}`](#{name}) | {} |\n",
            first.replace('|', "\\|")
        ));
    }
    for t in names {
        let name = t["name"].as_str().unwrap_or("");
        md.push_str(&format!(
            "\n## {name}\n\n{}\n\n",
            t["description"].as_str().unwrap_or("")
        ));
        let schema = &t["inputSchema"];
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut props: Vec<(&String, &Value)> = schema["properties"]
            .as_object()
            .map(|o| o.iter().collect())
            .unwrap_or_default();
        props.sort_by_key(|(k, _)| (!required.contains(k.as_str()), k.to_string()));
        if props.is_empty() {
            md.push_str("Arguments: none.\n\n");
        } else {
            md.push_str("| argument | type | | meaning |\n|---|---|---|---|\n");
            for (arg, p) in props {
                let ty = match &p["type"] {
                    Value::String(s) => s.clone(),
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .filter(|s| *s != "null")
                        .collect::<Vec<_>>()
                        .join(" or "),
                    _ => "any".into(),
                };
                let ty = if ty == "array" {
                    format!("array of {}", p["items"]["type"].as_str().unwrap_or("any"))
                } else {
                    ty
                };
                md.push_str(&format!(
                    "| `{arg}` | {ty} | {} | {} |\n",
                    if required.contains(arg.as_str()) {
                        "required"
                    } else {
                        ""
                    },
                    p["description"]
                        .as_str()
                        .unwrap_or("")
                        .replace('|', "\\|")
                        .replace('\n', " ")
                ));
            }
            md.push('\n');
        }
        match seen.answers.get(name) {
            Some(answers) => {
                let shown = |k: &&String| {
                    !["room", "you_are", "untrusted_content_warning"].contains(&k.as_str())
                };
                let all: BTreeSet<String> = answers.iter().flatten().cloned().collect();
                let always: BTreeSet<String> = all
                    .iter()
                    .filter(|k| answers.iter().all(|a| a.contains(*k)))
                    .filter(shown)
                    .cloned()
                    .collect();
                let sometimes: BTreeSet<String> = all
                    .iter()
                    .filter(|k| !always.contains(*k))
                    .filter(shown)
                    .cloned()
                    .collect();
                md.push_str(&format!("Result keys: {}", list(&always)));
                if !sometimes.is_empty() {
                    md.push_str(&format!("; sometimes {}", list(&sometimes)));
                }
                md.push_str(".\n");
            }
            None => md.push_str("Result keys: not exercised by the reference run.\n"),
        }
    }
    md.push_str(&beyond_tools(tools));
    md
}

/// The reference's second part: the tool profiles (each profile's tools,
/// from the server's own table), the prompts, the skill and the resources.
fn beyond_tools(tools: &[Value]) -> String {
    use chatroom::domain::profile::Profile;
    let mut md = String::from(
        "\n# Tool profiles\n\n\
A token (and a connect code, and so the OAuth grant it approves) has a tool\n\
profile: `chatroom admin add-token --profile NAME` (also `connect`, and\n\
`profile` in the console's mint). The token sees only its profile's tools in\n\
`tools/list`, and a call to any other is refused (`forbidden`). `full` is the\n\
default. BENCHMARKS.md gives each list's size.\n\n\
| profile | tools |\n|---|---|\n",
    );
    for p in Profile::ALL {
        let names: Vec<String> = tools
            .iter()
            .filter_map(|t| t["name"].as_str())
            .filter(|n| p.allows(n))
            .map(|n| format!("`{n}`"))
            .collect();
        let list = if p == Profile::Full {
            format!("all {}", names.len())
        } else {
            format!("{} ({})", names.join(", "), names.len())
        };
        md.push_str(&format!("| `{}` | {list} |\n", p.as_str()));
    }
    md.push_str(
        "\nThe `board_*` tools are the board app's own (`_meta.ui.visibility: [\"app\"]`):\n\
hosts hide them from the model, the app's buttons call them, and their audit\n\
rows name them, so a person's click (via the app) is told apart from a\n\
model's call.\n\n\
# Prompts\n\n\
| prompt | arguments | what it gives |\n|---|---|---|\n\
| `join` | `room?` | who you are, the room and its onboarding notes, the tasks you hold, those waiting for your review and the pending ones you may claim |\n\
| `standup` | `room?` | what changed since your last look (your cursor does not move), what you hold, what waits for review |\n\
| `handoff` | `task_id`, `room?` | the task and its latest notes, and the two steps: a note another agent can take over from, then `release_task` |\n\n\
# Skill\n\n\
The skills extension (`io.modelcontextprotocol/skills`) serves the\n\
coordination protocol as `skill://chatroom/coordination/SKILL.md`\n\
(`skills/list`, `skills/get`, `resources/read`): the text of the Claude Code\n\
plugin's skill (`plugin/skills/chatroom/SKILL.md`, compiled in), its\n\
frontmatter `name` being `coordination` as the URI says.\n\n\
# Resources\n\n\
| resource | what |\n|---|---|\n\
| `ui://chatroom/board` | the board app (`text/html;profile=mcp-app`), opened by `show_board` |\n\
| `skill://chatroom/coordination/SKILL.md` | the coordination skill (`text/markdown`) |\n\
| `chatroom://room/<name>/board` | one per room the token may read: its open tasks as JSON, each with `can`; `subscriptions/listen` with `resourceSubscriptions` sends `notifications/resources/updated` when they change |\n\n\
Lists (`tools/list`, `prompts/list`, `resources/list`, `skills/list`) and the\n\
app's document carry `ttlMs: 3600000` and `cacheScope: \"private\"`; a board\n\
resource `ttlMs: 0`.\n",
    );
    md
}

/// docs/TOOLS.md lists every tool the server has, with its arguments and
/// the keys its answer carries, exactly as the running server says.
#[tokio::test]
async fn tool_reference_is_current() {
    let s = TestServer::start_sqlite().await;
    let seen = call_every_tool(&s).await;
    s.room("reader").await;
    let token = s.token("reader", "reader").await;
    let (status, listed) = s
        .mcp(&token)
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .await;
    assert_eq!(status, 200, "{listed}");
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        assert!(
            seen.answers.contains_key(name),
            "the reference run does not call {name}: add it to call_every_tool"
        );
    }
    let expected = render(&tools, &seen);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/TOOLS.md");
    if std::env::var_os("CHATROOM_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == expected,
        "docs/TOOLS.md is out of date: run CHATROOM_UPDATE_DOCS=1 cargo nextest run --test docs"
    );
}

/// The start and end of the settings reference in GETTING_STARTED.md.
const SETTINGS_START: &str = "<!-- settings: made from src/config/table.rs; CHATROOM_UPDATE_DOCS=1 cargo nextest run --test docs rewrites it -->\n";
const SETTINGS_END: &str = "<!-- end of settings -->";

/// GETTING_STARTED.md's settings reference is the settings table: every
/// setting the server reads, with its default and its line of doc, and no
/// other (`CHATROOM_UPDATE_DOCS=1` rewrites it).
#[test]
fn settings_reference_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("GETTING_STARTED.md");
    let guide = std::fs::read_to_string(&path).unwrap();
    let start = guide
        .find(SETTINGS_START)
        .expect("the settings start marker")
        + SETTINGS_START.len();
    let end = start
        + guide[start..]
            .find(SETTINGS_END)
            .expect("the settings end marker");
    let expected = format!("\n{}\n", chatroom::config::table::markdown());
    if std::env::var_os("CHATROOM_UPDATE_DOCS").is_some() {
        std::fs::write(
            &path,
            format!("{}{expected}{}", &guide[..start], &guide[end..]),
        )
        .unwrap();
        return;
    }
    assert!(
        guide[start..end] == expected,
        "GETTING_STARTED.md's settings are out of date: run CHATROOM_UPDATE_DOCS=1 cargo nextest run --test docs -E 'test(settings_reference)'"
    );
}

/// `.env.example` lists exactly the settings of the table (besides the
/// compose, tunnel and agent-side variables), each at the table's default.
#[test]
fn env_example_settings_are_the_table() {
    let example = repo_file(".env.example");
    let mut shown = HashMap::new();
    for line in example.lines() {
        let Some((name, value)) = line.trim().trim_start_matches('#').trim().split_once('=') else {
            continue;
        };
        if name.starts_with("CHATROOM_")
            && !name.contains(' ')
            && !chatroom::config::COMPOSE_VARIABLES.contains(&name)
            && !chatroom::config::CLIENT_VARIABLES.contains(&name)
        {
            assert!(
                shown
                    .insert(name.to_owned(), value.trim().to_owned())
                    .is_none(),
                ".env.example shows {name} twice"
            );
        }
    }
    let table: BTreeSet<&str> = chatroom::config::SETTINGS.iter().map(|s| s.name).collect();
    let listed: BTreeSet<&str> = shown.keys().map(String::as_str).collect();
    assert_eq!(listed, table, ".env.example and the settings table differ");
    for s in chatroom::config::SETTINGS {
        assert_eq!(
            shown[s.name], s.default,
            "{}'s default in .env.example",
            s.name
        );
    }
}

/// README's Administration section names every `chatroom admin` command
/// the binary has (as `chatroom admin --help` lists them), and no other.
#[test]
fn readme_names_every_admin_command() {
    let out = std::process::Command::new(binary())
        .args(["admin", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    let readme = repo_file("README.md");
    let section = readme
        .split("## Administration")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has an Administration section");
    let list = section
        .split("lists the commands (")
        .nth(1)
        .and_then(|s| s.split(")").next())
        .expect("the section lists the commands in parentheses");
    let named: Vec<String> = list
        .split(',')
        .map(|c| c.trim().trim_matches('`').to_owned())
        .collect();
    assert_eq!(
        named, commands,
        "README's admin command list is not `chatroom admin --help`'s"
    );
}

// ---- "Wake an idle agent" ----------------------------------------------------

/// GETTING_STARTED's "Wake an idle agent" section, up to the next `## `.
fn wake_section() -> String {
    let guide = repo_file("GETTING_STARTED.md");
    let start = guide
        .find("## Wake an idle agent")
        .expect("GETTING_STARTED has a \"Wake an idle agent\" section");
    let rest = &guide[start + 3..];
    let end = rest.find("\n## ").map_or(rest.len(), |i| i + 1);
    rest[..end].to_owned()
}

/// The section says what each of the four ways needs and what to check
/// when nothing arrives, in the words `chatroom doctor` and Claude Code use.
#[test]
fn wake_section_covers_each_way_and_the_checks() {
    let text = wake_section();
    for needed in [
        "claude plugin marketplace add",
        "claude plugin install chatroom@chatroom",
        "an interactive Claude Code session",
        "`claude -p` included",
        "a claude.ai sign-in and the development-channels flag",
        "--dangerously-load-development-channels",
        "any client with hooks",
        "chatroom doctor",
        "Claude Code version",
        "DISABLE_TELEMETRY",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "Channel notifications skipped",
        "`reach`",
    ] {
        assert!(text.contains(needed), "the section lacks {needed:?}");
    }
}

/// The channel entry the section gives for `.mcp.json` starts a channel
/// that a client can shake hands with: the documented command, arguments
/// and variables, pointed at a real server.
#[tokio::test]
async fn wake_section_channel_entry_runs() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let block = blocks(&wake_section())
        .into_iter()
        .find(|b| b.info == "json" && b.text.contains("\"channel\""))
        .expect("the section gives a .mcp.json channel entry");
    let v: Value = serde_json::from_str(&block.text).unwrap();
    let entry = &v["mcpServers"]["chatroom"];
    assert_eq!(entry["command"], "chatroom");
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let mut cmd = tokio::process::Command::new(binary());
    cmd.args(
        entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap()),
    )
    .env_clear();
    for (k, v) in entry["env"].as_object().unwrap() {
        let v = v
            .as_str()
            .unwrap()
            .replace("http://127.0.0.1:8080", &s.url)
            .replace("cr_…", &token);
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "docs", "version": "1"}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
        .await
        .expect("an answer in time")
        .unwrap()
        .expect("the channel answers");
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    assert!(
        answer["result"]["capabilities"]["experimental"]["claude/channel"].is_object(),
        "{answer}"
    );
    common::wait_for_push(&s.url, &token, "alice").await;
}

/// "When nothing arrives": `chatroom doctor --agent` on an agent's machine
/// checks the Claude Code version (the real CLI, `CHATROOM_TEST_CLAUDE`, on
/// `PATH` as `claude`), names either variable that turns channels off, and
/// shows the debug log's "Channel notifications skipped" line.
#[tokio::test]
async fn wake_section_doctor_checks_run() {
    let Ok(claude) = std::env::var("CHATROOM_TEST_CLAUDE") else {
        panic!("set CHATROOM_TEST_CLAUDE to the Claude Code CLI (.ci/run installs it)");
    };
    let s = TestServer::start().await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let home = tempfile::tempdir().unwrap();
    let debug = home.path().join(".claude/debug");
    std::fs::create_dir_all(&debug).unwrap();
    std::fs::write(
        debug.join("latest.txt"),
        "2026-01-01T00:00:00Z [DEBUG] MCP server \"chatroom\": Channel notifications skipped: channels feature is not currently available\n",
    )
    .unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(&claude, bin.join("claude")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for variable in [
        "DISABLE_TELEMETRY",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    ] {
        let env = HashMap::from([
            ("CHATROOM_URL", s.url.clone()),
            ("CHATROOM_TOKEN", token.clone()),
            (variable, "1".to_owned()),
            ("HOME", home.path().display().to_string()),
            ("PATH", path.clone()),
        ]);
        let (_, out, err) = common::run_cli(&["doctor", "--agent"], &env).await;
        assert!(
            out.lines()
                .any(|l| l.contains("Claude Code 2.") && l.contains("channels")),
            "no version check: {out}\n{err}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("warn") && l.contains(&format!("{variable} set"))),
            "{variable}: {out}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("warn")
                && l.contains("Channel notifications skipped: channels feature")),
            "{out}"
        );
    }
}

/// The plugin installs as the section says (the real Claude Code CLI,
/// offline, in a fresh HOME), and the README quotes the projected token
/// cost that `claude plugin details chatroom` prints.
#[test]
fn wake_section_plugin_installs_and_the_readme_quotes_its_cost() {
    let Ok(claude) = std::env::var("CHATROOM_TEST_CLAUDE") else {
        panic!("set CHATROOM_TEST_CLAUDE to the Claude Code CLI (.ci/run installs it)");
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let home = tempfile::tempdir().unwrap();
    let text = wake_section();
    let block = blocks(&text)
        .into_iter()
        .find(|b| b.text.contains("claude plugin marketplace add"))
        .expect("the section shows the plugin install");
    let run = |line: &str| {
        let words: Vec<String> = line
            .replace("/path/to/chatroom", root)
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect();
        let out = std::process::Command::new(&claude)
            .args(&words)
            .env("HOME", home.path())
            .current_dir(root)
            .output()
            .expect("run claude");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{line}: {text}");
        text
    };
    for line in block
        .text
        .lines()
        .filter(|l| l.starts_with("claude plugin"))
    {
        run(line);
    }
    let details = run("claude plugin details chatroom");
    let readme = repo_file("README.md");
    let quoted = readme
        .split("`claude plugin details chatroom` projects its cost at about ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("the README quotes the projected cost");
    assert!(
        details.contains(quoted),
        "the README says about {quoted} tokens; `claude plugin details chatroom` prints:\n{details}"
    );
}
