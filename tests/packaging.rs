//! Packaging (SPEC §10), checked without a Docker engine: the files that ship
//! with the image agree with the code, the binary keeps the image's runtime
//! contract when run the way the Dockerfile runs it, and every `chatroom`
//! command the guides give parses.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chatroom::config::{Config, SETTINGS};
use serde_json::json;

/// The server's settings, from its table.
static VARIABLES: std::sync::LazyLock<Vec<&str>> =
    std::sync::LazyLock::new(|| SETTINGS.iter().map(|s| s.name).collect());

use chatroom::config::{CLIENT_VARIABLES as CLIENT_ENV, COMPOSE_VARIABLES};

/// Variables of the agent-side commands (SPEC §3 and §8): hook, watch, worker.
const WORKER_VARIABLES: &[&str] = &[
    "WORKER_MODEL_BASE_URL",
    "WORKER_MODEL_NAME",
    "WORKER_API_KEY",
    "WORKER_POLL_INTERVAL",
    "WORKER_MAX_TASKS_PER_HOUR",
    "WORKER_MODEL_TIMEOUT",
    "WORKER_COOLDOWN_SECONDS",
    "WORKER_MAX_FAILURES",
    "WORKER_ALLOW_INSECURE_HTTP",
];

fn is_client_variable(name: &str) -> bool {
    CLIENT_ENV.contains(&name) || WORKER_VARIABLES.contains(&name)
}

/// The guides whose commands must be real.
const GUIDES: &[&str] = &[
    "GETTING_STARTED.md",
    "CLOUDFLARE_TUNNEL.md",
    "README.md",
    "BENCHMARKS.md",
];

fn repo_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `NAME=value` lines of an env file, commented out (`# NAME=…`) or not.
fn env_lines(text: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let (body, commented) = match line.trim().strip_prefix('#') {
            Some(rest) => (rest.trim(), true),
            None => (line.trim(), false),
        };
        let Some((name, value)) = body.split_once('=') else {
            continue;
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            && name.starts_with(|c: char| c.is_ascii_uppercase());
        if name_ok {
            out.push((name.to_owned(), value.trim().to_owned(), commented));
        }
    }
    out
}

/// Every `${NAME…}` a compose file interpolates.
fn interpolated(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        rest = &rest[at + 2..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.insert(name);
        }
    }
    names
}

/// `.env.example` names every variable the server reads, and every
/// CHATROOM_*/WORKER_* variable in it is read by the server, used by compose,
/// or an agent-side variable that GETTING_STARTED.md documents.
#[test]
fn env_example_matches_the_config() {
    let example = env_lines(&repo_file(".env.example"));
    let named: BTreeSet<&str> = example.iter().map(|(n, _, _)| n.as_str()).collect();
    let missing: Vec<_> = VARIABLES.iter().filter(|v| !named.contains(*v)).collect();
    assert!(missing.is_empty(), ".env.example lacks {missing:?}");
    for v in COMPOSE_VARIABLES
        .iter()
        .chain(["CLOUDFLARE_TUNNEL_TOKEN"].iter())
    {
        assert!(named.contains(v), ".env.example lacks {v}");
    }
    let guide = repo_file("GETTING_STARTED.md");
    for name in &named {
        if !(name.starts_with("CHATROOM_") || name.starts_with("WORKER_")) {
            continue;
        }
        if VARIABLES.contains(name) || COMPOSE_VARIABLES.contains(name) {
            continue;
        }
        assert!(
            is_client_variable(name),
            ".env.example has {name}, which neither the server, compose nor an agent-side command reads"
        );
        assert!(
            guide.contains(name),
            "{name} is in .env.example but GETTING_STARTED.md does not document it"
        );
    }
    for v in CLIENT_ENV.iter().chain(WORKER_VARIABLES) {
        assert!(named.contains(v), ".env.example lacks {v}");
    }
}

/// `.env.example` sets nothing: every line is commented out (so a line a
/// guide tells you to add takes effect however the copy is edited), and the
/// values it shows are the defaults.
#[test]
fn env_example_shows_the_defaults_commented_out() {
    let lines = env_lines(&repo_file(".env.example"));
    for (name, _, commented) in &lines {
        assert!(commented, "{name} must be commented out in .env.example");
    }
    let shown: HashMap<String, String> = lines
        .into_iter()
        .filter(|(name, _, _)| VARIABLES.contains(&name.as_str()))
        .map(|(name, value, _)| (name, value))
        .collect();
    assert_eq!(shown.len(), VARIABLES.len(), "{shown:?}");
    let from_example =
        Config::from_map(&shown).expect(".env.example must show a valid configuration");
    let defaults = Config::from_map(&HashMap::new()).unwrap();
    assert_eq!(format!("{from_example:?}"), format!("{defaults:?}"));
}

/// docker-compose.yml hands every server variable to the container, pins the
/// image's listen address and database path, and every variable either
/// compose file interpolates is in `.env.example`.
#[test]
fn compose_files_pass_the_configuration_through() {
    let compose = repo_file("docker-compose.yml");
    for v in VARIABLES.iter() {
        match *v {
            "CHATROOM_LISTEN" => assert!(compose.contains("CHATROOM_LISTEN: 0.0.0.0:8080")),
            "CHATROOM_DB" => assert!(compose.contains("CHATROOM_DB: /data/chatroom.db")),
            // Set to the .env compose mounts, where it mounts one.
            "CHATROOM_ENV_FILE" => {}
            _ => assert!(
                compose.contains(&format!("{v}: ${{{v}:-}}")),
                "docker-compose.yml does not pass {v} to the container"
            ),
        }
    }
    assert!(
        compose.contains("'${CHATROOM_BIND:-127.0.0.1}:${CHATROOM_PORT:-8080}:8080'"),
        "published address"
    );
    assert!(compose.contains("- ./data:/data"));
    // The server reads the .env of this folder itself, mounted read-only
    // as part of the folder (a bind mount of a missing file would create a
    // directory in its place); tests/docker/smoke.sh checks what it says.
    assert!(
        compose.contains("- ./:/etc/chatroom:ro"),
        "the folder, read-only"
    );
    assert!(compose.contains("CHATROOM_ENV_FILE: /etc/chatroom/.env"));
    assert!(!compose.contains("- ./.env:"), "never the file alone");
    let named: BTreeSet<String> = env_lines(&repo_file(".env.example"))
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    let overlay = repo_file("docker-compose.cloudflared.yml");
    for name in interpolated(&compose).union(&interpolated(&overlay)) {
        assert!(
            named.contains(name),
            "compose interpolates ${{{name}}}, which .env.example does not list"
        );
    }
}

/// `.dockerignore` lets in everything the build reads: the manifest, the
/// sources, the migrations, files that the code includes, and any target
/// or build script the manifest names; and nothing is let in wholesale.
#[test]
fn dockerignore_lets_in_what_the_build_reads() {
    let rules: Vec<String> = repo_file(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        rules.first().map(String::as_str),
        Some("*"),
        "start by excluding everything"
    );
    let allowed: Vec<&str> = rules[1..]
        .iter()
        .map(|r| {
            r.strip_prefix('!')
                .unwrap_or_else(|| panic!("after `*`, only `!path` rules: {r}"))
        })
        .collect();
    let admits = |path: &str| {
        allowed
            .iter()
            .any(|a| path == a.trim_end_matches('/') || path.starts_with(a.trim_end_matches('/')))
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut needed = vec![
        "Cargo.toml".to_owned(),
        "Cargo.lock".to_owned(),
        "src/main.rs".to_owned(),
        "migrations/sqlite".to_owned(),
    ];
    // Files that steer the build when they exist.
    for file in [
        "templates",
        "build.rs",
        "link/startup.order",
        "askama.toml",
        ".cargo/config.toml",
        "rust-toolchain.toml",
    ] {
        if root.join(file).exists() {
            needed.push(file.to_owned());
        }
    }
    // Paths the manifest names (targets, build script, path dependencies)
    // must be in the context, or cargo refuses to read the manifest.
    let manifest = repo_file("Cargo.toml");
    for key in ["path", "build"] {
        for (at, _) in manifest.match_indices(key) {
            let before = manifest[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-') {
                continue;
            }
            let rest = manifest[at + key.len()..].trim_start();
            let Some(value) = rest.strip_prefix('=') else {
                continue;
            };
            let Some(value) = value.trim_start().strip_prefix('"') else {
                continue;
            };
            let path = &value[..value.find('"').unwrap_or(0)];
            if !path.is_empty() && !path.starts_with("..") {
                needed.push(path.trim_start_matches("./").to_owned());
            }
        }
    }
    // Files the code pulls in at compile time.
    for file in rust_files(&root.join("src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for mac in ["include_str!(\"", "include_bytes!(\"", "migrate!(\""] {
            for (at, _) in text.match_indices(mac) {
                let arg = &text[at + mac.len()..];
                let arg = &arg[..arg.find('"').unwrap()];
                let full = if mac.starts_with("migrate") {
                    root.join(arg)
                } else {
                    file.parent().unwrap().join(arg)
                };
                let rel = normalise(&full)
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| {
                        panic!("{} includes a file outside the crate", file.display())
                    });
                needed.push(rel);
            }
        }
    }
    for path in &needed {
        assert!(
            admits(path),
            ".dockerignore leaves out {path}, which the build reads"
        );
    }
    for bad in [".env", "data", "target", ".git", "tests"] {
        assert!(!admits(bad), ".dockerignore lets in {bad}");
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

// ---- The image's runtime contract ------------------------------------------

/// What the final stage of the Dockerfile says about running the binary.
#[derive(Debug, Default)]
struct Image {
    env: Vec<(String, String)>,
    user: Option<(u32, u32)>,
    workdir: Option<String>,
    volumes: Vec<String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    healthcheck: Vec<String>,
}

/// Parses the instructions of the Dockerfile's last stage.
fn parse_dockerfile(text: &str) -> Image {
    // Join continuation lines; drop comments (also inside continuations).
    let mut instructions: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        if !current.trim().is_empty() {
            instructions.push(current.trim().to_owned());
        }
        current.clear();
    }
    let mut image = Image::default();
    for ins in instructions {
        let (word, args) = ins.split_once(char::is_whitespace).unwrap_or((&ins, ""));
        let args = args.trim();
        match word.to_ascii_uppercase().as_str() {
            "FROM" => image = Image::default(),
            "ENV" => {
                if args.contains('=') {
                    for pair in args.split_whitespace() {
                        let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                        image
                            .env
                            .push((k.to_owned(), v.trim_matches('"').to_owned()));
                    }
                } else {
                    let (k, v) = args.split_once(' ').expect("ENV KEY VALUE");
                    image.env.push((k.to_owned(), v.trim().to_owned()));
                }
            }
            "USER" => {
                let (u, g) = args.split_once(':').unwrap_or((args, args));
                image.user = Some((
                    u.parse().expect("USER as a numeric uid"),
                    g.parse().expect("USER as a numeric gid"),
                ));
            }
            "WORKDIR" => image.workdir = Some(args.to_owned()),
            "VOLUME" => image
                .volumes
                .push(args.trim_matches(['[', ']', '"']).to_owned()),
            "ENTRYPOINT" => image.entrypoint = exec_form(args),
            "CMD" => image.cmd = exec_form(args),
            "HEALTHCHECK" => {
                let at = args.find("CMD").expect("HEALTHCHECK … CMD");
                image.healthcheck = exec_form(&args[at + 3..]);
            }
            _ => {}
        }
    }
    image
}

fn exec_form(args: &str) -> Vec<String> {
    serde_json::from_str(args.trim())
        .unwrap_or_else(|e| panic!("use the exec (JSON) form, not {args:?}: {e}"))
}

/// A container-like place to run the binary: `bin/` on PATH, `data/` for `/data`.
struct Sandbox {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    env: Vec<(String, String)>,
    /// uid/gid to run as; `None` when the test does not run as root.
    user: Option<(u32, u32)>,
}

impl Sandbox {
    fn command(&self, argv: &[String]) -> tokio::process::Command {
        let program = if argv[0].contains('/') {
            PathBuf::from(&argv[0])
        } else {
            self.bin.join(&argv[0])
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.data)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.user {
            // std drops the supplementary groups too when root sets a uid.
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    async fn run(&self, argv: &[&str]) -> (i32, String, String) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let out = self.command(&argv).output().await.expect("run chatroom");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// The `Uid:` and `Groups:` lines of a running process.
fn proc_identity(pid: u32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| {
                l[name.len()..]
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    (field("Uid:"), field("Groups:"))
}

/// Polls the image's own HEALTHCHECK command until it succeeds.
async fn wait_until_healthy(sandbox: &Sandbox, healthcheck: &[String]) -> bool {
    let argv: Vec<&str> = healthcheck.iter().map(String::as_str).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        if sandbox.run(&argv).await.0 == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Sends SIGTERM and waits for a clean exit, at most 5 s.
async fn stop(child: &mut tokio::process::Child) {
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("the server must stop within 5 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "exit after SIGTERM: {status}");
}

/// Run as the Dockerfile runs it (its ENV, USER, WORKDIR, ENTRYPOINT and
/// CMD, with `/data` a fresh folder owned by that user), the binary starts,
/// passes the image's HEALTHCHECK and `healthcheck --url`, stops cleanly on
/// SIGTERM within 5 s, and keeps its data across a restart.
#[tokio::test]
async fn binary_keeps_the_image_runtime_contract() {
    use std::os::unix::fs::PermissionsExt;
    let image = parse_dockerfile(&repo_file("Dockerfile"));
    let env: HashMap<&str, &str> = image
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(env.get("CHATROOM_LISTEN"), Some(&"0.0.0.0:8080"));
    assert_eq!(env.get("CHATROOM_DB"), Some(&"/data/chatroom.db"));
    assert_eq!(image.volumes, ["/data"]);
    assert_eq!(image.workdir.as_deref(), Some("/data"));
    let (uid, gid) = image.user.expect("the image names a USER");
    assert!(uid != 0 && gid != 0, "the image must not run as root");
    assert_eq!(image.healthcheck, ["chatroom", "healthcheck"]);
    assert_eq!(
        image.entrypoint.first().map(String::as_str),
        Some("chatroom")
    );

    // The container's file system, in miniature.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("bin");
    let data = dir.path().join("data");
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(&data).unwrap();
    // A copy, since the build's target folder may not be readable by that user.
    std::fs::copy(common::binary(), bin.join("chatroom")).unwrap();
    std::fs::set_permissions(bin.join("chatroom"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o750)).unwrap();
    let user = if is_root() {
        std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
        Some((uid, gid))
    } else {
        eprintln!(
            "note: not running as root, so the server runs as the current user instead of uid {uid}"
        );
        None
    };

    let port = common::free_port();
    let data_str = data.to_string_lossy().into_owned();
    let mut vars: Vec<(String, String)> = image
        .env
        .iter()
        .map(|(k, v)| {
            let v = match v.strip_prefix("/data") {
                Some(rest) => format!("{data_str}{rest}"),
                None => v.clone(),
            };
            let v = if k == "CHATROOM_LISTEN" {
                v.replace(":8080", &format!(":{port}"))
            } else {
                v
            };
            (k.clone(), v)
        })
        .collect();
    vars.push((
        "PATH".into(),
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    ));
    let sandbox = Sandbox {
        _dir: dir,
        bin,
        data: data.clone(),
        env: vars,
        user,
    };
    let serve: Vec<String> = image
        .entrypoint
        .iter()
        .chain(image.cmd.iter())
        .cloned()
        .collect();
    assert_eq!(serve, ["chatroom", "serve"]);
    let url = format!("http://127.0.0.1:{port}");

    // First run: starts, is healthy, runs as the image's user.
    let mut server = sandbox
        .command(&serve)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until_healthy(&sandbox, &image.healthcheck).await,
        "the image's HEALTHCHECK never passed"
    );
    let (code, _, err) = sandbox
        .run(&["chatroom", "healthcheck", "--url", &url])
        .await;
    assert_eq!(code, 0, "healthcheck --url: {err}");
    if user.is_some() {
        let (uids, groups) = proc_identity(server.id().unwrap());
        assert_eq!(uids, format!("{uid} {uid} {uid} {uid}"));
        assert!(
            groups.is_empty() || groups == gid.to_string(),
            "groups {groups:?}"
        );
    }

    // What `docker compose exec chatroom chatroom admin …` does.
    let (code, _, err) = sandbox
        .run(&["chatroom", "admin", "add-room", "lobby"])
        .await;
    assert_eq!(code, 0, "add-room: {err}");
    let (code, out, err) = sandbox
        .run(&[
            "chatroom",
            "admin",
            "add-token",
            "--agent",
            "alice",
            "--room",
            "lobby",
        ])
        .await;
    assert_eq!(code, 0, "add-token: {err}");
    let token = out
        .lines()
        .find(|l| l.starts_with("cr_"))
        .expect("a token line")
        .to_owned();
    let alice = common::McpClient::new(&url, &token);
    let posted = alice
        .call("post_message", json!({"body": "kept across restarts"}))
        .await;

    stop(&mut server).await;
    let (code, _, _) = sandbox
        .run(&["chatroom", "healthcheck", "--url", &url])
        .await;
    assert_ne!(code, 0, "healthcheck must fail while the server is down");
    if user.is_some() {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(data.join("chatroom.db")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (uid, gid));
    }

    // Second run on the same /data: the room, the token and the message are there.
    let mut server = sandbox
        .command(&serve)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until_healthy(&sandbox, &image.healthcheck).await,
        "no health after restart"
    );
    let read = alice.call("read_messages", json!({})).await;
    assert_eq!(read["messages"][0]["id"], posted["message_id"]);
    assert_eq!(read["messages"][0]["body"], "kept across restarts");
    stop(&mut server).await;
}

/// Run as the image's user on a data folder that user may not write (what
/// Docker leaves when it makes `./data` itself, as root), a command that
/// opens the database fails with one line naming the folder and the `chown`
/// that fixes it.
#[tokio::test]
async fn an_unwritable_data_folder_is_named_with_its_fix() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let image = parse_dockerfile(&repo_file("Dockerfile"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("bin");
    let data = dir.path().join("data");
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(&data).unwrap();
    std::fs::copy(common::binary(), bin.join("chatroom")).unwrap();
    std::fs::set_permissions(bin.join("chatroom"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Root's folder for the image's user; for anyone else, a read-only one of their own.
    let (user, (uid, gid)) = if is_root() {
        let ids = image.user.expect("the image names a USER");
        (Some(ids), ids)
    } else {
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o555)).unwrap();
        let me = std::fs::metadata("/proc/self").unwrap();
        (None, (me.uid(), me.gid()))
    };
    let db = data.join("chatroom.db");
    let sandbox = Sandbox {
        _dir: dir,
        bin: bin.clone(),
        data: data.clone(),
        env: vec![
            ("CHATROOM_DB".into(), db.display().to_string()),
            ("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())),
        ],
        user,
    };
    let (code, _, err) = sandbox.run(&["chatroom", "admin", "list-rooms"]).await;
    assert_ne!(code, 0, "the command must fail: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let folder = data.display();
    assert!(
        err.contains(&format!("the folder {folder} is not writable by uid {uid}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("sudo chown {uid}:{gid} {folder}")),
        "{err}"
    );
    assert!(!db.exists(), "nothing was created");
}

// ---- The guides' commands ----------------------------------------------------

/// One `chatroom …` invocation found in a guide.
#[derive(Debug)]
struct Invocation {
    origin: String,
    args: Vec<String>,
}

/// Splits a shell command line into words, honouring quotes; stops at a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                word.push(n);
                            }
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    word.push(n);
                }
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The `chatroom` arguments of one shell command, if it runs chatroom:
/// directly, through `docker compose exec|run SERVICE`, or `cargo run --`.
fn chatroom_args(words: &[String]) -> Option<Vec<String>> {
    let mut i = 0;
    while i < words.len()
        && (["sudo", "env", "exec", "nohup", "time"].contains(&words[i].as_str())
            || (words[i].contains('=') && !words[i].starts_with('-')))
    {
        i += 1;
    }
    let w = &words[i..];
    let first = w.first()?.as_str();
    if first == "chatroom" || first.ends_with("/chatroom") {
        return Some(w[1..].to_vec());
    }
    if first == "cargo" && w.get(1).map(String::as_str) == Some("run") {
        let dashes = w.iter().position(|a| a == "--")?;
        return Some(w[dashes + 1..].to_vec());
    }
    if first == "docker" && w.get(1).map(String::as_str) == Some("compose") {
        let mut j = 2;
        while j < w.len() && w[j].starts_with('-') {
            j += if [
                "-f",
                "--file",
                "--profile",
                "--env-file",
                "-p",
                "--project-name",
            ]
            .contains(&w[j].as_str())
            {
                2
            } else {
                1
            };
        }
        let verb = w.get(j)?.as_str();
        if verb != "exec" && verb != "run" {
            return None;
        }
        j += 1;
        while j < w.len() && w[j].starts_with('-') {
            j += if [
                "-u",
                "--user",
                "-e",
                "--env",
                "-w",
                "--workdir",
                "--entrypoint",
            ]
            .contains(&w[j].as_str())
            {
                2
            } else {
                1
            };
        }
        j += 1; // the service
        let rest = w.get(j..)?;
        return match (verb, rest.first().map(String::as_str)) {
            ("exec", Some("chatroom")) => Some(rest[1..].to_vec()),
            ("run", _) => Some(rest.to_vec()),
            _ => None,
        };
    }
    None
}

/// Every `chatroom` invocation in `text`: in shell code blocks, in the
/// `"command"` strings of JSON blocks (hook settings), and in inline code.
fn invocations(name: &str, text: &str) -> Vec<Invocation> {
    let mut found = Vec::new();
    let mut push_line = |origin: String, line: &str| {
        let line = line.trim().trim_start_matches("$ ");
        for segment in line.split(['|', ';']).flat_map(|s| s.split("&&")) {
            if let Some(args) = chatroom_args(&shell_words(segment)) {
                found.push(Invocation {
                    origin: origin.clone(),
                    args,
                });
            }
        }
    };
    let mut fence: Option<(String, String)> = None; // (fence marker, info string)
    let mut pending = String::new();
    let mut paragraph = (String::new(), String::new()); // (origin, text)
    for (n, line) in text.lines().enumerate() {
        let origin = format!("{name}:{}", n + 1);
        let trimmed = line.trim_start();
        if let Some((marker, info)) = &fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim() == marker.as_str() {
                fence = None;
                continue;
            }
            match info.as_str() {
                "" | "sh" | "bash" | "shell" | "console" | "zsh" => {
                    if let Some(head) = line.trim_end().strip_suffix('\\') {
                        pending.push_str(head);
                        pending.push(' ');
                        continue;
                    }
                    pending.push_str(line);
                    push_line(origin, &std::mem::take(&mut pending));
                }
                "json" | "jsonc" => {
                    // `"command": "…"` keys (not `"type": "command"` values).
                    for (at, key) in line.match_indices("\"command\"") {
                        let Some(value) = line[at + key.len()..].trim_start().strip_prefix(':')
                        else {
                            continue;
                        };
                        let mut strings = serde_json::Deserializer::from_str(value.trim_start())
                            .into_iter::<String>();
                        if let Some(Ok(cmd)) = strings.next() {
                            push_line(origin.clone(), &cmd);
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            inline_spans(&mut paragraph, &mut push_line);
            let marker: String = trimmed
                .chars()
                .take_while(|c| *c == '`' || *c == '~')
                .collect();
            let info = trimmed[marker.len()..].trim().to_owned();
            fence = Some((marker, info));
            continue;
        }
        // Inline code spans, which may run across the lines of a paragraph.
        if trimmed.is_empty() {
            inline_spans(&mut paragraph, &mut push_line);
        } else {
            if paragraph.0.is_empty() {
                paragraph.0 = origin;
            }
            paragraph.1.push_str(line);
            paragraph.1.push(' ');
        }
    }
    inline_spans(&mut paragraph, &mut push_line);
    found
}

/// Hands every inline code span of a paragraph (origin, text) to `push`.
fn inline_spans(paragraph: &mut (String, String), push: &mut impl FnMut(String, &str)) {
    let (origin, text) = std::mem::take(paragraph);
    for (k, span) in text.split('`').enumerate() {
        if k % 2 == 1 {
            push(origin.clone(), span);
        }
    }
}

/// What `chatroom … --help` says: subcommands, and options with whether each
/// takes a value.
struct Help {
    commands: Vec<String>,
    options: HashMap<String, bool>,
}

async fn help(path: &[String]) -> Result<Help, String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let (code, out, err) = common::run_cli(&args, &HashMap::new()).await;
    if code != 0 {
        return Err(format!("`chatroom {}` failed: {err}", args.join(" ")));
    }
    let mut commands = Vec::new();
    let mut options = HashMap::new();
    let mut section = "";
    for line in out.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line;
            continue;
        }
        let trimmed = line.trim_start();
        if section == "Commands:" && line.starts_with("  ") && !line.starts_with("   ") {
            if let Some(word) = trimmed.split_whitespace().next() {
                commands.push(word.trim_end_matches(',').to_owned());
            }
        } else if trimmed.starts_with('-') {
            // "-a, --all-rooms <X>  description": flags up to the description.
            let spec = trimmed.split("  ").next().unwrap_or("");
            let takes_value = spec.contains('<');
            for word in spec.split([',', ' ']) {
                if word.starts_with('-') {
                    options.insert(word.to_owned(), takes_value);
                }
            }
        }
    }
    Ok(Help { commands, options })
}

/// Checks one invocation: each subcommand exists, each flag is listed by
/// the `--help` of the subcommand it is given to.
async fn check(inv: &Invocation, cache: &mut HashMap<Vec<String>, Help>) -> Result<(), String> {
    let mut path: Vec<String> = Vec::new();
    let mut i = 0;
    let args: Vec<&String> = inv
        .args
        .iter()
        .take_while(|a| !a.starts_with('>') && !a.starts_with('<') && !a.starts_with("2>"))
        .collect();
    loop {
        if !cache.contains_key(&path) {
            let h = help(&path).await?;
            cache.insert(path.clone(), h);
        }
        let h = &cache[&path];
        let shown = if path.is_empty() {
            "chatroom".to_owned()
        } else {
            format!("chatroom {}", path.join(" "))
        };
        // Flags given at this level.
        while i < args.len() && args[i].starts_with('-') && args[i].len() > 1 {
            let flag = args[i].split('=').next().unwrap();
            match h.options.get(flag) {
                None => return Err(format!("`{shown}` has no flag {flag}")),
                Some(true) if !args[i].contains('=') => i += 2,
                Some(_) => i += 1,
            }
        }
        let Some(next) = args.get(i) else {
            return Ok(());
        };
        if h.commands.is_empty() {
            // A leaf: the rest are values and flags of this subcommand.
            i += 1;
            while i < args.len() {
                if args[i].starts_with('-') && args[i].len() > 1 && args[i].as_str() != "--" {
                    let flag = args[i].split('=').next().unwrap();
                    match h.options.get(flag) {
                        None => return Err(format!("`{shown}` has no flag {flag}")),
                        Some(true) if !args[i].contains('=') => i += 1,
                        Some(_) => {}
                    }
                }
                i += 1;
            }
            return Ok(());
        }
        if next.as_str() == "…" || next.as_str() == "..." {
            return Ok(());
        }
        if !h.commands.contains(next) {
            return Err(format!(
                "`{shown}` has no subcommand {next:?} (it has {:?})",
                h.commands
            ));
        }
        path.push((*next).clone());
        i += 1;
    }
}

/// Every `chatroom …` command in GETTING_STARTED.md, CLOUDFLARE_TUNNEL.md and
/// README.md names subcommands and flags that the binary has.
#[tokio::test]
async fn guide_commands_exist() {
    let mut all = Vec::new();
    for guide in GUIDES {
        let found = invocations(guide, &repo_file(guide));
        all.extend(found);
    }
    let getting_started = all
        .iter()
        .filter(|i| i.origin.starts_with("GETTING_STARTED"))
        .count();
    assert!(
        getting_started >= 15,
        "the command scanner found only {getting_started} commands in GETTING_STARTED.md"
    );
    for must in [
        ["admin", "add-room"],
        ["admin", "add-token"],
        ["admin", "revoke"],
        ["admin", "backup"],
        ["admin", "export"],
    ] {
        assert!(
            all.iter().any(|i| i.args.len() >= 2 && i.args[..2] == must),
            "the guides never show chatroom {}",
            must.join(" ")
        );
    }
    let mut cache = HashMap::new();
    let mut problems = Vec::new();
    for inv in &all {
        if let Err(why) = check(inv, &mut cache).await {
            problems.push(format!(
                "{}: chatroom {}: {why}",
                inv.origin,
                inv.args.join(" ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The command scanner finds commands where the guides put them, and the
/// checker refuses an unknown subcommand and an unknown flag.
#[tokio::test]
async fn command_checker_finds_and_refuses() {
    let text = "Run `chatroom admin\nlist-rooms --json` or `chatroom serve`.\n\n```sh\ndocker compose exec -T chatroom chatroom admin export --room lobby \\\n  --format json > lobby.json\ncurl -s x | chatroom nonsense\n```\n\n```json\n{\"type\": \"command\", \"command\": \"chatroom admin add-token --bogus\"}\n```\n";
    let found = invocations("t.md", text);
    let shown: Vec<String> = found.iter().map(|i| i.args.join(" ")).collect();
    assert_eq!(
        shown,
        [
            "admin list-rooms --json",
            "serve",
            "admin export --room lobby --format json > lobby.json",
            "nonsense",
            "admin add-token --bogus",
        ]
    );
    let mut cache = HashMap::new();
    assert!(check(&found[0], &mut cache).await.is_ok());
    assert!(check(&found[1], &mut cache).await.is_ok());
    assert!(check(&found[2], &mut cache).await.is_ok());
    assert!(check(&found[3], &mut cache).await.is_err());
    assert!(check(&found[4], &mut cache).await.is_err());
}

/// `link/startup.order`, which build.rs gives the linker of a release build
/// (see BENCHMARKS.md, "Idle memory"), is what `bench/startup-order.sh`
/// writes: one symbol a line, sorted, no repeats, and the server's own
/// start-up among them (a list made from another program would lay out
/// nothing of ours).
#[test]
fn startup_order_is_a_sorted_list_of_the_servers_functions() {
    let list = repo_file("link/startup.order");
    let names: Vec<&str> = list.lines().collect();
    assert!(names.len() > 1000, "only {} names", names.len());
    for name in &names {
        assert!(
            !name.is_empty() && !name.contains(char::is_whitespace),
            "not a symbol name: {name:?}"
        );
    }
    assert!(
        names.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
        "the list is sorted (bytewise) and has no repeats"
    );
    for part in ["8chatroom3cli", "8chatroom6server", "8chatroom2db6sqlite"] {
        assert!(
            names.iter().any(|n| n.contains(part)),
            "no function of {part} in the list"
        );
    }
}
