//! Every setting of the server, declared once, read from the environment (and
//! `.env` when present), and validated together so that a bad start names all
//! the bad variables at once, before a port is bound.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::hosts::HostRule;

/// Everything `serve` needs to know, after validation.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// SQLite file used when `database_url` is unset.
    pub db_path: String,
    /// `postgres://…` to run on PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// `None` when DNS-rebinding protection is off.
    pub allowed_hosts: Option<Vec<HostRule>>,
    pub allowed_origins: Vec<String>,
    pub trust_proxy: bool,
    /// Direct peers whose forwarded-address headers `trust_proxy` believes.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Open SSE streams plus parked `wait_for_change` calls per token; `0`
    /// disables the cap.
    pub max_streams_per_token: usize,
    /// `0` disables the failed-auth throttle.
    pub auth_fail_limit: u32,
    pub auth_fail_window: Duration,
    /// `0` disables the per-token rate limit.
    pub rate_limit_per_minute: u32,
    pub enable_ui: bool,
    pub admin_api: bool,
    pub console_lan_only: bool,
    pub public_url: Option<String>,
    pub public_hosts: Vec<String>,
    pub lan_url: Option<String>,
    /// OAuth 2.1 sign-in for apps that cannot send a header (SPEC §2a).
    pub oauth: bool,
    /// How long an OAuth access token lives.
    pub oauth_access_ttl: Duration,
    /// How long an OAuth refresh token (and so a grant left unused) lives.
    pub oauth_refresh_ttl: Duration,
    /// Whether a `client_id` that is an `https` URL is fetched as a client
    /// ID metadata document (`off`: such apps are told to register).
    pub oauth_cimd: bool,
    pub max_wait: Duration,
    pub max_file_bytes: usize,
    pub prune: bool,
    pub prune_interval: Duration,
    pub mqtt: Option<MqttConfig>,
    pub log_filter: String,
    pub log_json: bool,
    /// How long a client may take to send a request's head before its
    /// connection is closed. Not read from the environment; tests shorten it.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a whole request body before it is
    /// refused with `408`: a minute, plus a second for every 64 KiB of the
    /// file cap. Not read from the environment; tests shorten it.
    pub body_read_timeout: Duration,
}

/// The MQTT bridge settings (present only when `CHATROOM_MQTT_HOST` is set).
#[derive(Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub pass: Option<crate::auth::token::Secret>,
    pub prefix: String,
    pub tls: bool,
    pub ha_discovery: bool,
}

impl std::fmt::Debug for MqttConfig {
    // The password never reaches a log line, even through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user.as_ref().map(|_| "***"))
            .field("pass", &self.pass.as_ref().map(|_| "***"))
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .field("ha_discovery", &self.ha_discovery)
            .finish()
    }
}

/// Every variable `Config::from_env` reads; the `.env.example` drift test
/// compares against this list.
pub const VARIABLES: &[&str] = &[
    "CHATROOM_LISTEN",
    "CHATROOM_DB",
    "CHATROOM_DATABASE_URL",
    "CHATROOM_ALLOWED_HOSTS",
    "CHATROOM_ALLOWED_ORIGINS",
    "CHATROOM_DNS_REBIND_PROTECTION",
    "CHATROOM_TRUST_PROXY",
    "CHATROOM_TRUSTED_PROXIES",
    "CHATROOM_MAX_STREAMS_PER_TOKEN",
    "CHATROOM_AUTH_FAIL_LIMIT",
    "CHATROOM_AUTH_FAIL_WINDOW",
    "CHATROOM_RATE_LIMIT_PER_MINUTE",
    "CHATROOM_ENABLE_UI",
    "CHATROOM_ADMIN_API",
    "CHATROOM_CONSOLE_LAN_ONLY",
    "CHATROOM_PUBLIC_URL",
    "CHATROOM_PUBLIC_HOSTS",
    "CHATROOM_LAN_URL",
    "CHATROOM_MAX_WAIT_S",
    "CHATROOM_MAX_FILE_BYTES",
    "CHATROOM_PRUNE",
    "CHATROOM_PRUNE_INTERVAL",
    "CHATROOM_OAUTH",
    "CHATROOM_OAUTH_ACCESS_TTL",
    "CHATROOM_OAUTH_REFRESH_DAYS",
    "CHATROOM_OAUTH_CIMD",
    "CHATROOM_MQTT_HOST",
    "CHATROOM_MQTT_PORT",
    "CHATROOM_MQTT_USER",
    "CHATROOM_MQTT_PASS",
    "CHATROOM_MQTT_PREFIX",
    "CHATROOM_MQTT_TLS",
    "CHATROOM_MQTT_HA_DISCOVERY",
    "CHATROOM_LOG",
    "CHATROOM_LOG_FORMAT",
];

/// The loopback origins allowed on `/mcp` by default.
pub const DEFAULT_ORIGINS: &[&str] =
    &["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// A configuration that failed validation; the message lists every bad variable.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n{}", .0.join("\n"))]
pub struct ConfigError(pub Vec<String>);

/// Variables of the compose files (published address and port).
pub const COMPOSE_VARIABLES: &[&str] = &["CHATROOM_BIND", "CHATROOM_PORT"];

/// Variables of the agent-side commands (SPEC §8): hook, watch, worker.
/// `WORKER_*` ones are checked by the worker itself.
pub const CLIENT_VARIABLES: &[&str] = &[
    "CHATROOM_URL",
    "CHATROOM_TOKEN",
    "CHATROOM_ROOM",
    "CHATROOM_HOOK_DEBUG",
    "CHATROOM_HOOK_STATE_DIR",
];

/// Where the agent-side commands look for the server when `CHATROOM_URL`
/// is unset: the server's own default listen address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Whether `name` is a `CHATROOM_*` variable some part of chatroom reads
/// (the tests' `CHATROOM_TEST_*` included).
pub fn is_known_variable(name: &str) -> bool {
    VARIABLES.contains(&name)
        || COMPOSE_VARIABLES.contains(&name)
        || CLIENT_VARIABLES.contains(&name)
        || name.starts_with("CHATROOM_TEST_")
}

/// What reading `.env` found: the values it set and what was wrong with it.
#[derive(Debug, Default, Clone)]
pub struct DotEnv {
    /// The file read (`.env` in the working directory), when it exists.
    pub path: Option<std::path::PathBuf>,
    /// Every variable the file sets, last line winning: name → (value, line).
    pub values: std::collections::BTreeMap<String, (String, usize)>,
    /// Duplicate, unparsable and unknown lines, each naming its line number.
    pub warnings: Vec<String>,
}

/// Where a setting's value comes from, as `chatroom doctor` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process environment (which wins over `.env`).
    Environment,
    /// `.env`, at this line.
    DotEnv(usize),
    /// Neither: the built-in default.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Environment => f.write_str("environment"),
            Source::DotEnv(line) => write!(f, ".env line {line}"),
            Source::Default => f.write_str("default"),
        }
    }
}

static DOTENV: std::sync::OnceLock<DotEnv> = std::sync::OnceLock::new();

/// Reads `.env` from the working directory (when present) into the process
/// environment, never overriding a variable that is already set. Call it
/// once, before any thread starts; later calls return the first reading.
pub fn load_dotenv() -> &'static DotEnv {
    DOTENV.get_or_init(|| {
        let path = std::path::Path::new(".env");
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return DotEnv::default(),
            Err(e) => {
                return DotEnv {
                    warnings: vec![format!(".env: cannot read it: {e}")],
                    ..DotEnv::default()
                };
            }
        };
        let mut dotenv = parse_dotenv(&text, |name| std::env::var(name).ok());
        dotenv.path = Some(std::env::current_dir().unwrap_or_default().join(".env"));
        // The values are already parsed and interpolated; hand them to
        // dotenvy (which sets the environment) in a form it reads verbatim.
        let mut clean = String::new();
        for (name, (value, _)) in &dotenv.values {
            if std::env::var_os(name).is_none() {
                let escaped = value
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('$', "\\$")
                    .replace('\n', "\\n");
                clean.push_str(&format!("{name}=\"{escaped}\"\n"));
            }
        }
        if let Err(e) = dotenvy::from_read(std::io::Cursor::new(clean)) {
            dotenv.warnings.push(format!(".env: cannot apply it: {e}"));
        }
        dotenv
    })
}

/// Where `name`'s value comes from in this process.
pub fn source_of(name: &str) -> Source {
    let dotenv = load_dotenv();
    match dotenv.values.get(name) {
        // Set by .env only when the environment did not have it already.
        Some((value, line)) if std::env::var(name).ok().as_deref() == Some(value.as_str()) => {
            Source::DotEnv(*line)
        }
        _ if std::env::var_os(name).is_some() => Source::Environment,
        _ => Source::Default,
    }
}

/// Parses the text of a `.env` file the way docker compose does: `NAME=value`
/// lines (optionally after `export `), `#` comments (inline ones after a
/// space when the value is unquoted), single quotes literal, double quotes
/// with `\` escapes, `${NAME}`, `${NAME:-default}` and `$NAME` expanded in
/// unquoted and double-quoted values (from `env`, then earlier lines), and
/// the last line for a variable winning. A line that cannot be read is
/// warned about and skipped; the lines after it still count.
pub fn parse_dotenv(text: &str, env: impl Fn(&str) -> Option<String>) -> DotEnv {
    let mut out = DotEnv::default();
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((name, rest)) = line.split_once('=') else {
            out.warnings.push(format!(
                ".env line {n}: not NAME=value, ignored: {}",
                shorten(line)
            ));
            continue;
        };
        let name = name.trim();
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !name_ok {
            out.warnings.push(format!(
                ".env line {n}: {:?} is not a variable name, line ignored",
                shorten(name)
            ));
            continue;
        }
        let lookup = |var: &str| env(var).or_else(|| out.values.get(var).map(|(v, _)| v.clone()));
        let value = match dotenv_value(rest.trim_start(), &lookup) {
            Ok(v) => v,
            Err(why) => {
                out.warnings
                    .push(format!(".env line {n}: {name}: {why}, line ignored"));
                continue;
            }
        };
        if name.starts_with("CHATROOM_") && !is_known_variable(name) {
            let hint = closest(name)
                .map(|c| format!(" (did you mean {c}?)"))
                .unwrap_or_default();
            out.warnings.push(format!(
                ".env line {n}: {name} is not a chatroom setting{hint}; it has no effect"
            ));
        }
        if let Some((_, first)) = out.values.get(name) {
            out.warnings.push(format!(
                ".env line {n}: {name} is set again (also on line {first}); the last line wins, as in docker compose"
            ));
        }
        out.values.insert(name.to_owned(), (value, n));
    }
    out
}

/// One value of a `.env` line (the text after `=`).
fn dotenv_value(rest: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let after_quote = |tail: &str| -> Result<(), String> {
        let tail = tail.trim();
        if tail.is_empty() || tail.starts_with('#') {
            Ok(())
        } else {
            Err(format!("text after the closing quote: {}", shorten(tail)))
        }
    };
    if let Some(body) = rest.strip_prefix('\'') {
        let end = body
            .find('\'')
            .ok_or("the single quote is not closed on this line")?;
        after_quote(&body[end + 1..])?;
        return Ok(body[..end].to_owned());
    }
    if let Some(body) = rest.strip_prefix('"') {
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    after_quote(&body[i + 1..])?;
                    return expand(&value, lookup);
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('$') => value.push_str("$$"),
                    Some(e) => value.push(e),
                    None => break,
                },
                '$' => value.push('$'),
                c => value.push(c),
            }
        }
        return Err("the double quote is not closed on this line".into());
    }
    // Unquoted: a comment starts at a `#` after whitespace.
    let mut end = rest.len();
    let bytes = rest.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            end = i;
            break;
        }
    }
    expand(rest[..end].trim(), lookup)
}

/// Expands `${NAME}`, `${NAME:-default}`, `${NAME-default}` and `$NAME`;
/// `$$` stands for a literal `$`.
fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at + 1..];
        if let Some(tail) = rest.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = rest.strip_prefix('{') {
            let close = tail.find('}').ok_or("a ${ is not closed")?;
            let inner = &tail[..close];
            let (name, default, if_empty) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d), true),
                None => match inner.split_once('-') {
                    Some((n, d)) => (n, Some(d), false),
                    None => (inner, None, false),
                },
            };
            let value = lookup(name);
            let value = match (value, default) {
                (Some(v), Some(d)) if if_empty && v.is_empty() => d.to_owned(),
                (Some(v), _) => v,
                (None, Some(d)) => d.to_owned(),
                (None, None) => String::new(),
            };
            out.push_str(&value);
            rest = &tail[close + 1..];
        } else {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if len == 0 {
                out.push('$');
            } else {
                out.push_str(&lookup(&rest[..len]).unwrap_or_default());
            }
            rest = &rest[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The known variable nearest to a misspelt one, when it is near enough.
fn closest(name: &str) -> Option<&'static str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    };
    VARIABLES
        .iter()
        .chain(COMPOSE_VARIABLES)
        .chain(CLIENT_VARIABLES)
        .map(|v| (distance(name, v), *v))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, v)| v)
}

/// A line or value cut to a readable length for a warning.
fn shorten(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The tracing filter for a `CHATROOM_LOG` value: a bare level applies to
/// our crate (the SDK's per-request chatter stays at `warn`); anything else
/// must be a filter whose every directive ends in a level, so that a typo
/// (`warning`, `inf`) stops the start instead of silencing the log.
pub fn log_directives(value: &str) -> Result<String, String> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let value = value.trim();
    let lower = value.to_ascii_lowercase();
    if LEVELS.contains(&lower.as_str()) {
        return Ok(format!(
            "warn,chatroom={lower},tower_http={lower},rmcp=warn"
        ));
    }
    for directive in split_list(value) {
        let level = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None => directive,
        };
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "expected a level (error, warn, info, debug, trace, off) or a filter such as info,tower_http=debug; {directive:?} does not end in a level"
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(value)
        .map(|_| value.to_owned())
        .map_err(|e| format!("not a log filter ({e}); e.g. info or info,tower_http=debug"))
}

/// Reads the process environment into a map, so that parsing is testable.
pub fn env_map() -> HashMap<String, String> {
    std::env::vars().collect()
}

impl Config {
    /// Parses and validates every setting from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_map(&env_map())
    }

    /// Parses and validates every setting from `vars`.
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Config, ConfigError> {
        let mut r = VarReader::new(vars);
        let listen = r.parse("CHATROOM_LISTEN", "127.0.0.1:8080".parse().unwrap(), |v| {
            v.parse::<SocketAddr>()
                .map_err(|_| "expected ADDRESS:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:8080".into())
        });
        let db_path = r
            .string("CHATROOM_DB")
            .unwrap_or_else(|| "chatroom.db".into());
        let database_url = r.string("CHATROOM_DATABASE_URL");
        if let Some(url) = &database_url
            && !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
        {
            r.bad(
                "CHATROOM_DATABASE_URL",
                "expected a postgres:// URL (leave it empty to use the SQLite file CHATROOM_DB)",
            );
        }
        let rebind = r.switch("CHATROOM_DNS_REBIND_PROTECTION", true);
        let hosts = r.parse("CHATROOM_ALLOWED_HOSTS", HostRule::loopback(), |v| {
            let rules: Result<Vec<_>, _> = split_list(v).map(HostRule::parse).collect();
            rules
        });
        let allowed_origins = r
            .string("CHATROOM_ALLOWED_ORIGINS")
            .map(|v| split_list(&v).map(str::to_owned).collect::<Vec<_>>())
            .unwrap_or_else(|| DEFAULT_ORIGINS.iter().map(|s| s.to_string()).collect());
        for origin in &allowed_origins {
            if origin != "null" && !origin.contains("://") {
                r.bad(
                    "CHATROOM_ALLOWED_ORIGINS",
                    &format!("entry {origin:?} needs a scheme, e.g. https://{origin}"),
                );
            }
        }
        let trust_proxy = r.switch("CHATROOM_TRUST_PROXY", false);
        let trusted_proxies = r.parse("CHATROOM_TRUSTED_PROXIES", default_proxies(), |v| {
            split_list(v)
                .map(|c| {
                    c.parse::<ipnet::IpNet>()
                        .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                        .map_err(|_| format!("{c:?} is not a CIDR range such as 10.0.0.0/8"))
                })
                .collect::<Result<Vec<_>, _>>()
        });
        let max_streams_per_token =
            r.number("CHATROOM_MAX_STREAMS_PER_TOKEN", 8usize, 0, 1_000_000);
        let auth_fail_limit = r.number("CHATROOM_AUTH_FAIL_LIMIT", 20u32, 0, 1_000_000);
        let auth_fail_window = r.number("CHATROOM_AUTH_FAIL_WINDOW", 300u64, 1, 86_400);
        let rate_limit_per_minute =
            r.number("CHATROOM_RATE_LIMIT_PER_MINUTE", 600u32, 0, 10_000_000);
        let enable_ui = r.switch("CHATROOM_ENABLE_UI", true);
        let admin_api = r.switch("CHATROOM_ADMIN_API", false);
        let console_lan_only = r.switch("CHATROOM_CONSOLE_LAN_ONLY", true);
        let public_url = r.url("CHATROOM_PUBLIC_URL");
        let public_hosts = r
            .string("CHATROOM_PUBLIC_HOSTS")
            .map(|v| split_list(&v).map(|h| h.to_ascii_lowercase()).collect())
            .unwrap_or_default();
        let lan_url = r.url("CHATROOM_LAN_URL");
        let oauth = r.switch("CHATROOM_OAUTH", true);
        let oauth_access_ttl = r.number("CHATROOM_OAUTH_ACCESS_TTL", 3600u64, 1, 7 * 86_400);
        let oauth_refresh_days = r.number("CHATROOM_OAUTH_REFRESH_DAYS", 30u64, 1, 3_650);
        let oauth_cimd = r.switch("CHATROOM_OAUTH_CIMD", true);
        let max_wait = r.number("CHATROOM_MAX_WAIT_S", 90u64, 1, 3_600);
        let max_file_bytes = r.number("CHATROOM_MAX_FILE_BYTES", 1_048_576usize, 1, 1 << 30);
        let prune = r.switch("CHATROOM_PRUNE", true);
        let prune_interval = r.number("CHATROOM_PRUNE_INTERVAL", 3600u64, 1, 7 * 86_400);
        let mqtt = r.string("CHATROOM_MQTT_HOST").map(|host| MqttConfig {
            host,
            port: r.number("CHATROOM_MQTT_PORT", 1883u16, 1, u16::MAX),
            user: r.string("CHATROOM_MQTT_USER"),
            pass: r
                .string("CHATROOM_MQTT_PASS")
                .map(crate::auth::token::Secret::new),
            prefix: r
                .string("CHATROOM_MQTT_PREFIX")
                .unwrap_or_else(|| "chatroom".into()),
            tls: r.switch("CHATROOM_MQTT_TLS", false),
            ha_discovery: r.switch("CHATROOM_MQTT_HA_DISCOVERY", false),
        });
        if let Some(m) = &mqtt
            && (m.prefix.contains(['+', '#']) || m.prefix.trim_matches('/').is_empty())
        {
            r.bad(
                "CHATROOM_MQTT_PREFIX",
                "must be a plain topic prefix without + or #",
            );
        }
        if mqtt.as_ref().is_some_and(|m| m.tls) && !crate::mqtt::TLS_BUILT_IN {
            r.bad("CHATROOM_MQTT_TLS", crate::mqtt::NO_TLS);
        }
        let log_filter = r.string("CHATROOM_LOG").unwrap_or_else(|| "info".into());
        if let Err(why) = log_directives(&log_filter) {
            r.bad("CHATROOM_LOG", &why);
        }
        let log_json = match r.string("CHATROOM_LOG_FORMAT").as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(_) => {
                r.bad("CHATROOM_LOG_FORMAT", "expected text or json");
                false
            }
        };
        if !r.errors.is_empty() {
            return Err(ConfigError(
                r.errors.iter().map(|e| format!("  {e}")).collect(),
            ));
        }
        Ok(Config {
            listen,
            db_path,
            database_url,
            allowed_hosts: rebind.then_some(hosts),
            allowed_origins,
            trust_proxy,
            trusted_proxies,
            max_streams_per_token,
            auth_fail_limit,
            auth_fail_window: Duration::from_secs(auth_fail_window),
            rate_limit_per_minute,
            enable_ui,
            admin_api,
            console_lan_only,
            public_url,
            public_hosts,
            lan_url,
            oauth,
            oauth_access_ttl: Duration::from_secs(oauth_access_ttl),
            oauth_refresh_ttl: Duration::from_secs(oauth_refresh_days * 86_400),
            oauth_cimd,
            max_wait: Duration::from_secs(max_wait),
            max_file_bytes,
            prune,
            prune_interval: Duration::from_secs(prune_interval),
            mqtt,
            log_filter,
            log_json,
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60 + (max_file_bytes / 65_536) as u64),
        })
    }

    /// The database to open: the PostgreSQL URL when given, else the SQLite file.
    pub fn database(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.db_path),
        }
    }

    /// The effective value of every setting, as `serve` logs it at start and
    /// `chatroom doctor` shows it. Secrets never appear: a password in the
    /// database URL and the MQTT user and password print as `***`.
    pub fn effective(&self) -> Vec<(&'static str, String)> {
        let switch = |b: bool| if b { "on" } else { "off" }.to_owned();
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let mut out = vec![
            ("CHATROOM_LISTEN", self.listen.to_string()),
            ("CHATROOM_DB", self.db_path.clone()),
            (
                "CHATROOM_DATABASE_URL",
                self.database_url
                    .as_deref()
                    .map(redact_url)
                    .unwrap_or_default(),
            ),
            (
                "CHATROOM_ALLOWED_HOSTS",
                match &self.allowed_hosts {
                    Some(rules) => rules
                        .iter()
                        .map(HostRule::display)
                        .collect::<Vec<_>>()
                        .join(","),
                    None => "(any: DNS-rebinding protection is off)".into(),
                },
            ),
            ("CHATROOM_ALLOWED_ORIGINS", self.allowed_origins.join(",")),
            (
                "CHATROOM_DNS_REBIND_PROTECTION",
                switch(self.allowed_hosts.is_some()),
            ),
            ("CHATROOM_TRUST_PROXY", switch(self.trust_proxy)),
            ("CHATROOM_AUTH_FAIL_LIMIT", self.auth_fail_limit.to_string()),
            (
                "CHATROOM_AUTH_FAIL_WINDOW",
                self.auth_fail_window.as_secs().to_string(),
            ),
            (
                "CHATROOM_RATE_LIMIT_PER_MINUTE",
                self.rate_limit_per_minute.to_string(),
            ),
            ("CHATROOM_ENABLE_UI", switch(self.enable_ui)),
            ("CHATROOM_ADMIN_API", switch(self.admin_api)),
            ("CHATROOM_CONSOLE_LAN_ONLY", switch(self.console_lan_only)),
            ("CHATROOM_PUBLIC_URL", opt(&self.public_url)),
            ("CHATROOM_PUBLIC_HOSTS", self.public_hosts.join(",")),
            ("CHATROOM_LAN_URL", opt(&self.lan_url)),
            ("CHATROOM_MAX_WAIT_S", self.max_wait.as_secs().to_string()),
            ("CHATROOM_MAX_FILE_BYTES", self.max_file_bytes.to_string()),
            ("CHATROOM_PRUNE", switch(self.prune)),
            (
                "CHATROOM_PRUNE_INTERVAL",
                self.prune_interval.as_secs().to_string(),
            ),
        ];
        match &self.mqtt {
            None => out.push(("CHATROOM_MQTT_HOST", String::new())),
            Some(m) => out.extend([
                ("CHATROOM_MQTT_HOST", m.host.clone()),
                ("CHATROOM_MQTT_PORT", m.port.to_string()),
                // The user name is half of the credential: never shown either.
                (
                    "CHATROOM_MQTT_USER",
                    if m.user.is_some() { "***" } else { "" }.to_owned(),
                ),
                (
                    "CHATROOM_MQTT_PASS",
                    if m.pass.is_some() { "***" } else { "" }.to_owned(),
                ),
                ("CHATROOM_MQTT_PREFIX", m.prefix.clone()),
                ("CHATROOM_MQTT_TLS", switch(m.tls)),
                ("CHATROOM_MQTT_HA_DISCOVERY", switch(m.ha_discovery)),
            ]),
        }
        out.push(("CHATROOM_LOG", self.log_filter.clone()));
        out.push((
            "CHATROOM_LOG_FORMAT",
            if self.log_json { "json" } else { "text" }.to_owned(),
        ));
        out
    }

    /// A configuration for tests: loopback, no throttles, an explicit database.
    pub fn for_tests(db_path: &str) -> Config {
        let mut vars = HashMap::new();
        vars.insert("CHATROOM_DB".to_string(), db_path.to_string());
        Config::from_map(&vars).expect("defaults are valid")
    }
}

/// The default `CHATROOM_TRUSTED_PROXIES`: loopback and the private ranges
/// (a tunnel's connector on the same host or a private Docker network).
fn default_proxies() -> Vec<ipnet::IpNet> {
    [
        "127.0.0.0/8",
        "::1/128",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "fc00::/7",
    ]
    .iter()
    .map(|c| c.parse().expect("a valid CIDR"))
    .collect()
}

/// A URL with its password (anything before `@`) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Splits a comma-separated list, dropping blanks.
fn split_list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Parses a switch value: `on`/`off`/`true`/`false`/`1`/`0`, any case.
pub fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Reads settings from a map of environment variables. A bad value is noted
/// (`NAME: why`) and reading goes on with the default, so one start-up names
/// every bad variable; the server's config and the worker's settings share it.
pub(crate) struct VarReader<'a> {
    vars: &'a HashMap<String, String>,
    pub errors: Vec<String>,
}

impl<'a> VarReader<'a> {
    pub fn new(vars: &'a HashMap<String, String>) -> VarReader<'a> {
        VarReader {
            vars,
            errors: Vec::new(),
        }
    }

    pub fn bad(&mut self, name: &str, why: &str) {
        self.errors.push(format!("{name}: {why}"));
    }

    /// The value of `name`, with an empty value treated as unset (compose
    /// passes empty values for variables the user left blank).
    pub fn string(&self, name: &str) -> Option<String> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    /// The value of `name`, noted as missing when it is not set.
    pub fn required(&mut self, name: &str) -> Option<String> {
        let v = self.string(name);
        if v.is_none() {
            self.bad(name, "is not set");
        }
        v
    }

    pub fn parse<T>(
        &mut self,
        name: &str,
        default: T,
        f: impl FnOnce(&str) -> Result<T, String>,
    ) -> T {
        match self.string(name) {
            None => default,
            Some(v) => match f(&v) {
                Ok(t) => t,
                Err(why) => {
                    self.bad(name, &why);
                    default
                }
            },
        }
    }

    pub fn switch(&mut self, name: &str, default: bool) -> bool {
        self.parse(name, default, |v| {
            parse_switch(v).ok_or_else(|| format!("expected on or off, got {v:?}"))
        })
    }

    pub fn number<T>(&mut self, name: &str, default: T, min: T, max: T) -> T
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        self.parse(name, default, |v| match v.parse::<T>() {
            Ok(n) if n >= min && n <= max => Ok(n),
            _ => Err(format!(
                "expected a whole number from {min} to {max}, got {v:?}"
            )),
        })
    }

    fn url(&mut self, name: &str) -> Option<String> {
        let v = self.string(name)?;
        if v.starts_with("http://") || v.starts_with("https://") {
            Some(v.trim_end_matches('/').to_owned())
        } else {
            self.bad(name, "expected an http:// or https:// URL");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config::from_map(&HashMap::new()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.rate_limit_per_minute, 600);
        assert!(c.allowed_hosts.is_some());
        assert!(c.mqtt.is_none());
    }

    #[test]
    fn every_bad_variable_is_named() {
        let err = Config::from_map(&vars(&[
            ("CHATROOM_LISTEN", "nope"),
            ("CHATROOM_ENABLE_UI", "maybe"),
            ("CHATROOM_MAX_WAIT_S", "-3"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("CHATROOM_LISTEN"), "{err}");
        assert!(err.contains("CHATROOM_ENABLE_UI"), "{err}");
        assert!(err.contains("CHATROOM_MAX_WAIT_S"), "{err}");
    }

    #[test]
    fn empty_values_mean_unset_and_switches_take_any_case() {
        let c = Config::from_map(&vars(&[
            ("CHATROOM_LISTEN", ""),
            ("CHATROOM_ADMIN_API", "ON"),
            ("CHATROOM_DNS_REBIND_PROTECTION", "False"),
        ]))
        .unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(c.admin_api);
        assert!(c.allowed_hosts.is_none());
    }

    #[test]
    fn mqtt_password_is_not_in_debug_output() {
        let c = Config::from_map(&vars(&[
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_MQTT_PASS", "hunter2"),
        ]))
        .unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    fn dotenv(text: &str) -> DotEnv {
        parse_dotenv(text, |name| (name == "FROM_ENV").then(|| "env".to_owned()))
    }

    fn value(d: &DotEnv, name: &str) -> Option<String> {
        d.values.get(name).map(|(v, _)| v.clone())
    }

    /// The last line for a variable wins, as in docker compose, and the
    /// duplicate is warned about with both line numbers.
    #[test]
    fn dotenv_last_line_wins_with_a_warning() {
        let d = dotenv(
            "CHATROOM_ALLOWED_HOSTS=localhost\n# a comment\nCHATROOM_ALLOWED_HOSTS=box,localhost\n",
        );
        assert_eq!(
            value(&d, "CHATROOM_ALLOWED_HOSTS").as_deref(),
            Some("box,localhost")
        );
        assert_eq!(d.values["CHATROOM_ALLOWED_HOSTS"].1, 3);
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(
            d.warnings[0].contains("line 3") && d.warnings[0].contains("line 1"),
            "{:?}",
            d.warnings
        );
    }

    /// A line that cannot be read is named by number and skipped; the lines
    /// after it still count.
    #[test]
    fn dotenv_bad_line_does_not_drop_the_rest() {
        let d = dotenv(
            "CHATROOM_LOG=debug\nCHATROOM_DB=\"unclosed\nnot a line\n9X=1\nCHATROOM_LISTEN=0.0.0.0:9000\n",
        );
        assert_eq!(value(&d, "CHATROOM_LOG").as_deref(), Some("debug"));
        assert_eq!(
            value(&d, "CHATROOM_LISTEN").as_deref(),
            Some("0.0.0.0:9000")
        );
        assert!(value(&d, "CHATROOM_DB").is_none());
        let joined = d.warnings.join("\n");
        for n in ["line 2", "line 3", "line 4"] {
            assert!(joined.contains(n), "{joined}");
        }
        assert_eq!(d.warnings.len(), 3, "{joined}");
    }

    /// Unknown CHATROOM_* names are warned about with the nearest known
    /// one; other programs' variables are not.
    #[test]
    fn dotenv_unknown_names_are_warned_about() {
        let d = dotenv(
            "CHATROOM_ALLOWED_HOST=box\nPOSTGRES_PASSWORD=x\nCHATROOM_TEST_PG_URL=y\nCHATROOM_PORT=8080\n",
        );
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
        assert!(
            d.warnings[0].contains("line 1") && d.warnings[0].contains("CHATROOM_ALLOWED_HOSTS"),
            "{:?}",
            d.warnings
        );
    }

    /// Quotes, inline comments, `export` and interpolation read as compose
    /// reads them.
    #[test]
    fn dotenv_values_read_as_compose_reads_them() {
        let d = dotenv(concat!(
            "export A=plain # comment\n",
            "B='single $A # kept'\n",
            "C=\"double $A \\\"q\\\" \\$A\" # comment\n",
            "D=${FROM_ENV}-${MISSING:-fallback}-$A\n",
            "E=a#b\n",
            "F=\n",
        ));
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert_eq!(value(&d, "A").as_deref(), Some("plain"));
        assert_eq!(value(&d, "B").as_deref(), Some("single $A # kept"));
        assert_eq!(value(&d, "C").as_deref(), Some("double plain \"q\" $A"));
        assert_eq!(value(&d, "D").as_deref(), Some("env-fallback-plain"));
        assert_eq!(value(&d, "E").as_deref(), Some("a#b"));
        assert_eq!(value(&d, "F").as_deref(), Some(""));
    }

    /// `CHATROOM_LOG` takes a level in any case or a filter whose every
    /// directive ends in a level; a typo is named at start.
    #[test]
    fn log_filter_is_validated() {
        for good in [
            "info",
            "DEBUG",
            "off",
            "info,tower_http=debug",
            "chatroom::mcp=trace",
        ] {
            assert!(log_directives(good).is_ok(), "{good}");
        }
        for bad in ["warning", "inf", "info,tower_http=loud", "chatroom"] {
            assert!(log_directives(bad).is_err(), "{bad}");
        }
        let err = Config::from_map(&vars(&[("CHATROOM_LOG", "warning")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CHATROOM_LOG") && err.contains("warning"),
            "{err}"
        );
    }

    /// The settings `serve` logs at start never show a secret.
    #[test]
    fn effective_settings_hide_secrets() {
        let c = Config::from_map(&vars(&[
            ("CHATROOM_DATABASE_URL", "postgres://u:hunter2@db:5432/c"),
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_MQTT_PASS", "hunter3"),
        ]))
        .unwrap();
        let shown = format!("{:?}", c.effective());
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
        assert!(shown.contains("postgres://***@db:5432/c"), "{shown}");
    }
}
