//! `chatroom doctor`: checks a setup the way a newcomer would find it broken,
//! and says what to do. Server side: the settings as `serve` will read them
//! (and from where), the database, the port, the Host allowlist against the
//! URLs agents are given. Agent side (with `CHATROOM_URL` / `CHATROOM_TOKEN`):
//! the server is reached, the Host is accepted, the token is known, the
//! hook can keep its state. Every line is `ok`, `warn` or `fail`; the exit
//! code is non-zero when a line failed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};

use crate::auth::hosts::host_allowed;
use crate::config::{self, Config};

#[derive(Args)]
pub struct DoctorArgs {
    /// Only the server side (settings, database, port, allowlist).
    #[arg(long, conflicts_with = "agent")]
    server: bool,
    /// Only the agent side (CHATROOM_URL, CHATROOM_TOKEN, the hook's state).
    #[arg(long)]
    agent: bool,
}

/// How one check came out.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Warn,
    Fail,
}

/// The report so far: one line per check. A check (here or in a file of
/// its own) takes `&mut Report` and says `ok`, `warn` or `fail` with the fix.
#[derive(Default)]
pub(crate) struct Report {
    worst: Option<Level>,
}

impl Report {
    fn line(&mut self, level: Level, text: impl AsRef<str>) {
        let tag = match level {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        };
        println!("{tag}  {}", text.as_ref());
        self.worst = self.worst.max(Some(level));
    }
    pub(crate) fn ok(&mut self, text: impl AsRef<str>) {
        self.line(Level::Ok, text);
    }
    pub(crate) fn warn(&mut self, text: impl AsRef<str>) {
        self.line(Level::Warn, text);
    }
    pub(crate) fn fail(&mut self, text: impl AsRef<str>) {
        self.line(Level::Fail, text);
    }
    /// A line under the last check, without a verdict.
    pub(crate) fn note(&self, text: impl AsRef<str>) {
        println!("      {}", text.as_ref());
    }
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    let agent_configured =
        std::env::var_os("CHATROOM_URL").is_some() || std::env::var_os("CHATROOM_TOKEN").is_some();
    if !args.agent {
        println!("== server side (what `chatroom serve` here would do)");
        server_side(&mut report).await;
    }
    if args.agent || (!args.server && agent_configured) {
        println!("== agent side (CHATROOM_URL, CHATROOM_TOKEN, the hook)");
        agent_side(&mut report).await;
    } else if !args.server {
        println!(
            "== agent side: skipped (set CHATROOM_URL and CHATROOM_TOKEN, or pass --agent, to check an agent's setup)"
        );
    }
    Ok(match report.worst {
        Some(Level::Fail) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}

async fn server_side(report: &mut Report) {
    let dotenv = config::load_dotenv();
    match &dotenv.path {
        Some(path) => report.ok(format!(
            "{} read from {} ({} variable(s); the environment wins over it)",
            dotenv.label,
            path.display(),
            dotenv.values.len()
        )),
        // A file CHATROOM_ENV_FILE names but that is missing is warned about below.
        None if std::env::var_os(config::ENV_FILE).is_some_and(|v| !v.is_empty()) => {}
        None => report.ok(format!(
            "no .env in {} (settings come from the environment and the defaults)",
            std::env::current_dir().unwrap_or_default().display()
        )),
    }
    for w in &dotenv.warnings {
        report.warn(w);
    }
    let values = match config::Values::read(&config::env_map()) {
        Ok(v) => v,
        Err(e) => {
            for bad in &e.0 {
                report.fail(format!(
                    "{} (fix it in {} or the environment)",
                    bad.trim(),
                    dotenv.label
                ));
            }
            return;
        }
    };
    report.ok("settings are valid; as `serve` reads them:");
    for e in values.effective() {
        report.note(format!("{}={}  ({})", e.setting.name, e.shown, e.source));
    }
    let config = Config::from_values(&values);
    database(report, &config).await;
    port(report, &config).await;
    allowlist(report, &config);
}

/// The database `serve` would open: reachable and writable, without
/// creating anything.
async fn database(report: &mut Report, config: &Config) {
    if let Some(url) = &config.database_url {
        match postgres_reachable(url).await {
            Ok(()) => {}
            Err(why) => {
                report.fail(why);
                return;
            }
        }
        match crate::db::open(url).await {
            Ok(store) => {
                report.ok(format!(
                    "PostgreSQL {} is reachable and migrated",
                    config::redact_url(url)
                ));
                tokens(report, store.as_ref()).await;
            }
            Err(e) => report.fail(format!(
                "PostgreSQL {}: {e:#} (check the user, password and database in CHATROOM_DATABASE_URL)",
                config::redact_url(url)
            )),
        }
        return;
    }
    let path = PathBuf::from(&config.db_path);
    if let Err(why) = sqlite_folder_writable(&path) {
        report.fail(why);
        return;
    }
    if !path.exists() {
        report.warn(format!(
            "the SQLite file {} does not exist yet: `chatroom serve` or `chatroom admin init` creates it (CHATROOM_DB names it; is this the folder you meant?)",
            absolute(&path).display()
        ));
        return;
    }
    if let Err(e) = std::fs::OpenOptions::new().write(true).open(&path) {
        report.fail(format!(
            "the SQLite file {} is not writable: {e} (chown it to the user that runs chatroom)",
            absolute(&path).display()
        ));
        return;
    }
    match crate::db::open(&config.database()).await {
        Ok(store) => {
            report.ok(format!(
                "SQLite database {} opens and is writable",
                absolute(&path).display()
            ));
            tokens(report, store.as_ref()).await;
        }
        Err(e) => report.fail(format!(
            "the SQLite file {}: {e:#}",
            absolute(&path).display()
        )),
    }
}

async fn tokens(report: &mut Report, store: &dyn crate::domain::store::Store) {
    match store.list_tokens().await {
        Ok(list) if list.iter().any(|t| t.revoked_ts.is_none()) => report.ok(format!(
            "{} active token(s)",
            list.iter().filter(|t| t.revoked_ts.is_none()).count()
        )),
        Ok(_) => report.warn(
            "no active token yet: `chatroom quickstart`, or `chatroom admin add-room lobby` and `chatroom admin add-token --agent alice --room lobby`",
        ),
        Err(e) => report.warn(format!("cannot list the tokens: {e}")),
    }
}

/// Whether the port is free, or already served by a chatroom.
async fn port(report: &mut Report, config: &Config) {
    match std::net::TcpListener::bind(config.listen) {
        Ok(_) => report.ok(format!("{} is free to listen on", config.listen)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let mut addr = config.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let answer = client()
                .get(format!("http://{addr}/healthz"))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success());
            if answer == Some(true) {
                report.ok(format!(
                    "{} is in use by a running server that answers /healthz (a chatroom already serving?)",
                    config.listen
                ));
            } else {
                report.fail(format!(
                    "{} is in use by another program: stop it, or set CHATROOM_LISTEN to a free address",
                    config.listen
                ));
            }
        }
        Err(e) => report.fail(format!(
            "cannot listen on {} (CHATROOM_LISTEN): {e}",
            config.listen
        )),
    }
}

/// The URLs agents are told must pass the Host check, and be reachable.
fn allowlist(report: &mut Report, config: &Config) {
    let urls = [
        ("CHATROOM_LAN_URL", config.lan_url.as_deref()),
        ("CHATROOM_PUBLIC_URL", config.public_url.as_deref()),
    ];
    let Some(rules) = &config.allowed_hosts else {
        report.warn(
            "CHATROOM_DNS_REBIND_PROTECTION=off: any Host is accepted; turn it on and list the names in CHATROOM_ALLOWED_HOSTS",
        );
        return;
    };
    let mut any = false;
    for (name, url) in urls {
        let Some(url) = url else { continue };
        any = true;
        let Ok(parsed) = reqwest::Url::parse(url) else {
            continue;
        };
        let host = match (parsed.host_str(), parsed.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            _ => continue,
        };
        if host_allowed(rules, &host) {
            report.ok(format!("{name} {url}: its Host {host} is allowed"));
        } else {
            report.fail(format!(
                "{name} {url}: its Host {host} is not in CHATROOM_ALLOWED_HOSTS, so agents using it get 421: add {} to CHATROOM_ALLOWED_HOSTS",
                parsed.host_str().unwrap_or(&host)
            ));
        }
        if name == "CHATROOM_LAN_URL"
            && config.listen.ip().is_loopback()
            && !parsed.host_str().is_some_and(|h| {
                h == "localhost"
                    || h.parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            })
        {
            report.warn(format!(
                "CHATROOM_LAN_URL points at another machine's view of this one, but the server listens on {} only: set CHATROOM_LISTEN=0.0.0.0:{} (in Docker, CHATROOM_BIND=0.0.0.0)",
                config.listen,
                config.listen.port()
            ));
        }
        if name == "CHATROOM_PUBLIC_URL"
            && config.console_lan_only
            && !config
                .public_hosts
                .iter()
                .any(|h| Some(h.as_str()) == parsed.host_str())
        {
            report.warn(format!(
                "CHATROOM_PUBLIC_URL's host is not in CHATROOM_PUBLIC_HOSTS: behind a tunnel its edge headers still hide /ui and /admin, but through a plain proxy they would show; add {} to CHATROOM_PUBLIC_HOSTS",
                parsed.host_str().unwrap_or("")
            ));
        }
    }
    if !any {
        report.ok(format!(
            "the allowlist is {} (set CHATROOM_LAN_URL or CHATROOM_PUBLIC_URL to check the URLs agents use)",
            rules
                .iter()
                .map(|r| r.display())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
}

async fn agent_side(report: &mut Report) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let base = match env("CHATROOM_URL") {
        Some(raw) => match base_url(&raw) {
            Ok(base) => {
                report.ok(format!("CHATROOM_URL is {base}"));
                base
            }
            Err(why) => {
                report.fail(why);
                return;
            }
        },
        None => {
            report.warn(format!(
                "CHATROOM_URL is not set: the hook and the watcher use {}",
                config::DEFAULT_URL
            ));
            config::DEFAULT_URL.to_owned()
        }
    };
    let client = client();
    if !reachable(report, &client, &base).await {
        return;
    }
    let token = env("CHATROOM_TOKEN").map(|raw| token(report, &raw));
    whoami(report, &client, &base, token.as_deref()).await;
    hook_state(report);
    for c in super::doctor_push::checks() {
        report.line(if c.warn { Level::Warn } else { Level::Ok }, c.text);
    }
}

/// `CHATROOM_URL` as the hook and the watcher use it (a pasted `/mcp` or
/// trailing `/` forgiven), or what is wrong with it.
fn base_url(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    let base = raw.trim_end_matches('/');
    let base = base
        .strip_suffix("/mcp")
        .unwrap_or(base)
        .trim_end_matches('/');
    if !base.contains("://") {
        return Err(format!(
            "CHATROOM_URL={raw} lacks its scheme: set CHATROOM_URL=http://{base} (https:// only where a tunnel or proxy serves it)"
        ));
    }
    let url = reqwest::Url::parse(base).map_err(|e| {
        format!(
            "CHATROOM_URL={raw} is not a URL ({e}): e.g. CHATROOM_URL=http://homeserver.lan:8080"
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "CHATROOM_URL={raw} must be http://HOST:PORT or https://HOST, e.g. CHATROOM_URL=http://homeserver.lan:8080"
        ));
    }
    Ok(base.to_owned())
}

/// `CHATROOM_TOKEN` as it must be sent; a pasted `Bearer ` prefix or
/// quotes are named (and left out, so the other checks still run).
fn token(report: &mut Report, raw: &str) -> String {
    let mut token = raw.trim();
    if token
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("bearer "))
    {
        report.fail(
            "CHATROOM_TOKEN starts with `Bearer `: set it to the token alone (cr_…); the hook, the watcher and the `Authorization: Bearer ${CHATROOM_TOKEN}` header add `Bearer ` themselves",
        );
        token = token[7..].trim();
    }
    let unquoted = token.trim_matches(['"', '\'']);
    if unquoted.len() != token.len() {
        report.fail("CHATROOM_TOKEN is in quotes: set it to the token alone (cr_…)");
        token = unquoted;
    }
    token.to_owned()
}

/// `{base}/healthz` answers; when it cannot be reached over https but
/// answers over plain http on the same port, that is what is said.
async fn reachable(report: &mut Report, client: &reqwest::Client, base: &str) -> bool {
    let error = match client.get(format!("{base}/healthz")).send().await {
        Ok(r) if r.status().is_success() => {
            report.ok(format!("{base}/healthz answers"));
            return true;
        }
        Ok(r) => {
            report.fail(format!(
                "{base}/healthz answered {}: is CHATROOM_URL a chatroom server's base URL (without /mcp)?",
                r.status()
            ));
            return false;
        }
        Err(e) => e,
    };
    if let Some(plain) = plain_http(base)
        && client
            .get(format!("{plain}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    {
        report.fail(format!(
            "{base} does not speak https, but {plain} answers: the server speaks plain HTTP, so set CHATROOM_URL={plain} (https comes from a tunnel or a proxy in front of it; CLOUDFLARE_TUNNEL.md)"
        ));
    } else {
        report.fail(format!(
            "cannot reach {base}: {} (is the server running and published there? is CHATROOM_URL right?)",
            super::cause_chain(&error)
        ));
    }
    false
}

/// The `http://` URL of the same host and port as an `https://` one.
fn plain_http(base: &str) -> Option<String> {
    let mut url = reqwest::Url::parse(base).ok()?;
    if url.scheme() != "https" {
        return None;
    }
    let port = url.port_or_known_default()?;
    url.set_scheme("http").ok()?;
    url.set_port(Some(port)).ok()?;
    Some(url.as_str().trim_end_matches('/').to_owned())
}

/// Calls `whoami` with the token: the Host, the token and its rooms.
async fn whoami(report: &mut Report, client: &reqwest::Client, base: &str, token: Option<&str>) {
    let whoami = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}}});
    let mut request = client
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&whoami);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let answer = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            report.fail(format!(
                "cannot call {base}/mcp: {}",
                super::cause_chain(&e)
            ));
            return;
        }
    };
    let status = answer.status().as_u16();
    let retry_after = answer
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = answer.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    // What the server said, in its words: the error's message, else the text.
    let said = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| text.trim().chars().take(200).collect());
    let host = reqwest::Url::parse(base)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    match (status, token) {
        (421, _) => {
            report.fail(format!(
                "the server refuses the Host {host} (421): add {host} to the server's CHATROOM_ALLOWED_HOSTS"
            ));
        }
        (429, _) if said.contains("failed credentials") => {
            report.fail(format!(
                "the server turns this machine away for {} s (429): too many requests came from here with a wrong or missing token (its failed-login throttle, CHATROOM_AUTH_FAIL_LIMIT within CHATROOM_AUTH_FAIL_WINDOW). Fix CHATROOM_TOKEN, then run `chatroom doctor` again once that time is over",
                retry_after.as_deref().unwrap_or("some")
            ));
        }
        (429, _) => {
            report.fail(format!(
                "the server limits this token's calls (429: {said}); the server's CHATROOM_RATE_LIMIT_PER_MINUTE sets how many a minute"
            ));
        }
        (401, None) => {
            report.ok(format!("the server accepts the Host {host}"));
            report.fail(
                "CHATROOM_TOKEN is not set: set it to this agent's token (cr_…, from `chatroom admin add-token`)",
            );
        }
        (401, Some(_)) => {
            report.ok(format!("the server accepts the Host {host}"));
            report.fail(format!(
                "the server refuses CHATROOM_TOKEN (401: {said}): mistyped, revoked, or minted for another server's database; `chatroom admin list-tokens` there shows it"
            ));
        }
        (200, Some(_)) => {
            report.ok(format!("the server accepts the Host {host}"));
            who(report, &body);
        }
        (status, _) => report.fail(format!("{base}/mcp answered HTTP {status}: {said}")),
    }
}

/// What `whoami` said: the agent, its room and rooms, its flags; and
/// whether `CHATROOM_ROOM` is one of them.
fn who(report: &mut Report, body: &Value) {
    let result = &body["result"];
    let who = result
        .get("structuredContent")
        .cloned()
        .or_else(|| {
            result["content"][0]["text"]
                .as_str()
                .and_then(|t| serde_json::from_str(t).ok())
        })
        .unwrap_or(Value::Null);
    if result["isError"] == json!(true) || who.is_null() {
        report.fail(format!("whoami failed: {body}"));
        return;
    }
    let rooms: Vec<&str> = who["rooms"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    report.ok(format!(
        "whoami: agent {} in room {} (rooms {}{}{})",
        who["agent"].as_str().unwrap_or("?"),
        who["room"].as_str().unwrap_or("?"),
        rooms.join(","),
        if who["readonly"] == json!(true) {
            ", read-only"
        } else {
            ""
        },
        if who["lead"] == json!(true) {
            ", lead"
        } else {
            ""
        },
    ));
    if let Some(room) = std::env::var("CHATROOM_ROOM")
        .ok()
        .filter(|r| !r.trim().is_empty())
        && !rooms.contains(&room.trim())
    {
        report.fail(format!(
            "CHATROOM_ROOM={room} is not one of this token's rooms ({}): fix CHATROOM_ROOM or mint the token with --also-room {room}",
            rooms.join(",")
        ));
    }
}

/// The hook keeps what it showed in a state directory; without one it
/// repeats itself between tool calls.
fn hook_state(report: &mut Report) {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let dir = env("CHATROOM_HOOK_STATE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("XDG_STATE_HOME").map(|d| PathBuf::from(d).join("chatroom")))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state/chatroom")));
    let Some(dir) = dir else {
        report.warn(
            "the hook has no state directory (no CHATROOM_HOOK_STATE_DIR, XDG_STATE_HOME or HOME): it cannot remember what it showed",
        );
        return;
    };
    let probe = dir.join(format!(".doctor-{}", std::process::id()));
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&probe, b"")) {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            report.ok(format!(
                "the hook's state directory {} is writable",
                dir.display()
            ));
        }
        Err(e) => report.warn(format!(
            "the hook's state directory {} is not writable ({e}): set CHATROOM_HOOK_STATE_DIR to one that is",
            dir.display()
        )),
    }
}

fn client() -> reqwest::Client {
    crate::tls::client_builder()
        .timeout(Duration::from_secs(5))
        .user_agent(concat!("chatroom-doctor/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("a default client builds")
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// The folder of a SQLite file exists and is writable (SQLite writes its
/// `-wal` and `-shm` files next to it); the error names `CHATROOM_DB`.
pub(crate) fn sqlite_folder_writable(path: &Path) -> Result<(), String> {
    let folder = match absolute(path).parent() {
        Some(f) => f.to_owned(),
        None => return Ok(()),
    };
    if !folder.is_dir() {
        return Err(format!(
            "the folder {} of the database {} does not exist (CHATROOM_DB={}): create it, or point CHATROOM_DB (or --db) at a file in an existing folder",
            folder.display(),
            absolute(path).display(),
            path.display()
        ));
    }
    let probe = folder.join(format!(".chatroom-probe-{}", std::process::id()));
    match std::fs::write(&probe, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(
            match crate::db::sqlite::unwritable(&path.display().to_string()) {
                Some(why) => format!("{why} (CHATROOM_DB={})", path.display()),
                None => format!(
                    "the folder {} of the database (CHATROOM_DB={}) is not writable: {e}",
                    folder.display(),
                    path.display()
                ),
            },
        ),
    }
}

/// A PostgreSQL server answers on the URL's host and port at all; the pool's
/// own error after a refused connection ("pool timed out") names neither.
pub(crate) async fn postgres_reachable(url: &str) -> Result<(), String> {
    use std::str::FromStr;
    let options = sqlx::postgres::PgConnectOptions::from_str(url)
        .map_err(|e| format!("bad PostgreSQL URL in CHATROOM_DATABASE_URL: {e}"))?;
    let host = options.get_host().to_owned();
    let port = options.get_port();
    if host.starts_with('/') {
        // A Unix socket directory: connecting tells.
        return Ok(());
    }
    let target = format!("{host}:{port}");
    match tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(&target),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "cannot reach PostgreSQL at {target} (CHATROOM_DATABASE_URL): {e} (is it running, and is that its host name from here?)"
        )),
        Err(_) => Err(format!(
            "cannot reach PostgreSQL at {target} (CHATROOM_DATABASE_URL): no answer within 5 s (a firewall, or the wrong host?)"
        )),
    }
}

/// Before `serve` opens its database: a missing folder or an unreachable
/// PostgreSQL gets a message that names the variable and the place.
pub(crate) async fn database_reachable(config: &Config) -> anyhow::Result<()> {
    let outcome = match &config.database_url {
        Some(url) => postgres_reachable(url).await,
        None => sqlite_folder_writable(Path::new(&config.db_path)),
    };
    outcome.map_err(|why| anyhow::anyhow!(why))
}
