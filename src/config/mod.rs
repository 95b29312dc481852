//! Every setting of the server, declared once in [`table`], read from the
//! environment (and the `.env` file, [`dotenv`]) and validated together so
//! that a bad start names all the bad variables at once, before a port is
//! bound. [`Config`] is what the rest of the server uses.
//!
//! - [`table`]: the settings (name, default, how read, doc, secret, group),
//!   and the `serve --help` and GETTING_STARTED texts made from them.
//! - [`values`]: the table checked against the environment.
//! - [`parse`]: how one value is read (also for the worker's settings).
//! - [`dotenv`]: the `.env` file and where each value came from.

pub mod dotenv;
pub mod parse;
pub mod table;
pub mod values;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::auth::hosts::HostRule;

pub use dotenv::{DotEnv, ENV_FILE, Source, load_dotenv, parse_dotenv, source_of};
pub(crate) use parse::VarReader;
pub use parse::{log_directives, parse_switch};
pub use table::{SETTINGS, Setting};
pub use values::{Effective, Values};

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
    /// Requests in flight per token, and per address for requests without
    /// a valid token; `0` disables the cap.
    pub max_in_flight: usize,
    /// Open connections per direct peer address (an IPv6 one by its /64),
    /// trusted proxies exempt while `trust_proxy` is on; `0` disables.
    pub max_connections_per_ip: usize,
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
    /// A task in progress this quiet is stuck (`CHATROOM_STUCK_AFTER`; zero: off).
    pub stuck_after: Duration,
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
    /// How long a request body may go without a byte before it is cut with
    /// `408`. Not read from the environment; tests shorten it.
    pub body_idle_timeout: Duration,
}

/// The MQTT bridge settings (present only when `CHATROOM_MQTT_HOST` is set).
#[derive(Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub pass: Option<crate::secret::Secret>,
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

/// Whether this build can speak TLS to the MQTT broker.
pub const TLS_BUILT_IN: bool = cfg!(feature = "mqtt-tls");

/// Why `CHATROOM_MQTT_TLS=on` cannot work in a build without the feature.
pub const NO_TLS: &str = "this build has no TLS for MQTT: build with `--features mqtt-tls` \
     (`cargo install --locked --path . --features mqtt-tls`; the Docker image has it), \
     or set CHATROOM_MQTT_TLS=off";

/// The loopback origins allowed on `/mcp` by default (the table's default
/// of `CHATROOM_ALLOWED_ORIGINS`, as a list).
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
    "CHATROOM_PUSH_BURST",
];

/// Where the agent-side commands look for the server when `CHATROOM_URL`
/// is unset: the server's own default listen address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The header of `/healthz` that names the kind of database the server runs
/// on (`sqlite` or `postgresql`), so a load test can say what it measured.
/// Only the kind: never a path, a host or a URL.
pub const DATABASE_HEADER: &str = "x-chatroom-database";

/// Every `CHATROOM_*` variable some part of chatroom reads: the server's
/// settings, compose's and the agent side's.
pub fn known_variables() -> impl Iterator<Item = &'static str> {
    SETTINGS
        .iter()
        .map(|s| s.name)
        .chain(COMPOSE_VARIABLES.iter().copied())
        .chain(CLIENT_VARIABLES.iter().copied())
}

/// Whether `name` is a `CHATROOM_*` variable some part of chatroom reads
/// (the tests' `CHATROOM_TEST_*` included).
pub fn is_known_variable(name: &str) -> bool {
    known_variables().any(|v| v == name) || name.starts_with("CHATROOM_TEST_")
}

/// Whether this process runs in a container (Docker or Podman), where the
/// admin commands are `docker compose exec chatroom chatroom …`.
pub fn in_container() -> bool {
    std::path::Path::new("/.dockerenv").exists()
        || std::path::Path::new("/run/.containerenv").exists()
}

/// A URL with its password (anything before `@`) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_owned(),
    }
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
        Values::read(vars).map(|v| Config::from_values(&v))
    }

    /// The configuration of checked values: each field from its row of the
    /// [table](table::SETTINGS).
    pub fn from_values(v: &Values) -> Config {
        let hosts = v
            .list("CHATROOM_ALLOWED_HOSTS")
            .iter()
            .map(|h| HostRule::parse(h).expect("checked"))
            .collect();
        let trusted_proxies = v
            .list("CHATROOM_TRUSTED_PROXIES")
            .iter()
            .map(|c| c.parse().expect("checked"))
            .collect();
        let max_file_bytes: usize = v.number("CHATROOM_MAX_FILE_BYTES");
        let mqtt = v.optional("CHATROOM_MQTT_HOST").map(|host| MqttConfig {
            host,
            port: v.number("CHATROOM_MQTT_PORT"),
            user: v.optional("CHATROOM_MQTT_USER"),
            pass: v
                .optional("CHATROOM_MQTT_PASS")
                .map(crate::secret::Secret::new),
            prefix: v.string("CHATROOM_MQTT_PREFIX"),
            tls: v.switch("CHATROOM_MQTT_TLS"),
            ha_discovery: v.switch("CHATROOM_MQTT_HA_DISCOVERY"),
        });
        let seconds = |name| Duration::from_secs(v.number(name));
        Config {
            listen: v.parsed("CHATROOM_LISTEN"),
            db_path: v.string("CHATROOM_DB"),
            database_url: v.optional("CHATROOM_DATABASE_URL"),
            allowed_hosts: v.switch("CHATROOM_DNS_REBIND_PROTECTION").then_some(hosts),
            allowed_origins: v.list("CHATROOM_ALLOWED_ORIGINS"),
            trust_proxy: v.switch("CHATROOM_TRUST_PROXY"),
            trusted_proxies,
            max_streams_per_token: v.number("CHATROOM_MAX_STREAMS_PER_TOKEN"),
            max_in_flight: v.number("CHATROOM_MAX_IN_FLIGHT"),
            max_connections_per_ip: v.number("CHATROOM_MAX_CONNECTIONS_PER_IP"),
            auth_fail_limit: v.number("CHATROOM_AUTH_FAIL_LIMIT"),
            auth_fail_window: seconds("CHATROOM_AUTH_FAIL_WINDOW"),
            rate_limit_per_minute: v.number("CHATROOM_RATE_LIMIT_PER_MINUTE"),
            enable_ui: v.switch("CHATROOM_ENABLE_UI"),
            admin_api: v.switch("CHATROOM_ADMIN_API"),
            console_lan_only: v.switch("CHATROOM_CONSOLE_LAN_ONLY"),
            public_url: v.optional("CHATROOM_PUBLIC_URL"),
            public_hosts: v.list("CHATROOM_PUBLIC_HOSTS"),
            lan_url: v.optional("CHATROOM_LAN_URL"),
            oauth: v.switch("CHATROOM_OAUTH"),
            oauth_access_ttl: seconds("CHATROOM_OAUTH_ACCESS_TTL"),
            oauth_refresh_ttl: Duration::from_secs(
                v.number::<u64>("CHATROOM_OAUTH_REFRESH_DAYS") * 86_400,
            ),
            oauth_cimd: v.switch("CHATROOM_OAUTH_CIMD"),
            max_wait: seconds("CHATROOM_MAX_WAIT_S"),
            max_file_bytes,
            prune: v.switch("CHATROOM_PRUNE"),
            prune_interval: seconds("CHATROOM_PRUNE_INTERVAL"),
            stuck_after: Duration::from_secs(
                parse::duration_secs(&v.string("CHATROOM_STUCK_AFTER")).expect("checked"),
            ),
            mqtt,
            log_filter: v.string("CHATROOM_LOG"),
            log_json: v.string("CHATROOM_LOG_FORMAT") == "json",
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60 + (max_file_bytes / 65_536) as u64),
            body_idle_timeout: Duration::from_secs(5),
        }
    }

    /// The database to open: the PostgreSQL URL when given, else the SQLite file.
    pub fn database(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.db_path),
        }
    }

    /// A configuration for tests: loopback, no throttles, an explicit database.
    pub fn for_tests(db_path: &str) -> Config {
        let mut vars = HashMap::new();
        vars.insert("CHATROOM_DB".to_string(), db_path.to_string());
        Config::from_map(&vars).expect("defaults are valid")
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
        let bad = [
            ("CHATROOM_LISTEN", "nope"),
            ("CHATROOM_ENABLE_UI", "maybe"),
            ("CHATROOM_MAX_WAIT_S", "-3"),
        ];
        let err = Config::from_map(&vars(&bad)).unwrap_err().to_string();
        for (name, _) in bad {
            assert!(err.contains(name), "{name}: {err}");
        }
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

    /// The settings `serve` logs at start never show a secret: a password
    /// in the database URL, the MQTT user and password.
    #[test]
    fn shown_settings_hide_secrets() {
        let v = Values::read(&vars(&[
            ("CHATROOM_DATABASE_URL", "postgres://u:hunter2@db:5432/c"),
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_MQTT_USER", "hunter1"),
            ("CHATROOM_MQTT_PASS", "hunter3"),
        ]))
        .unwrap();
        let shown = format!("{:?}", v.shown());
        for secret in ["hunter1", "hunter2", "hunter3"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("postgres://***@db:5432/c"), "{shown}");
    }

    /// Every row of the table: a unique `CHATROOM_*` name, a one-line doc,
    /// a default its own kind reads, rows of a group together; and every
    /// getter `Config::from_values` uses matches its row's kind (or this
    /// panics).
    #[test]
    fn the_table_is_consistent() {
        let mut names = std::collections::BTreeSet::new();
        let mut groups = Vec::new();
        for s in SETTINGS {
            assert!(s.name.starts_with("CHATROOM_"), "{}", s.name);
            assert!(names.insert(s.name), "{} twice", s.name);
            assert!(!s.doc.is_empty() && !s.doc.contains('\n'), "{}", s.name);
            if !s.default.is_empty() {
                s.kind
                    .check(s.default)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            }
            if groups.last() != Some(&s.group) {
                assert!(
                    !groups.contains(&s.group),
                    "{} is away from its group",
                    s.name
                );
                groups.push(s.group);
            }
        }
        // Every optional part switched on, so that every getter runs.
        let all = vars(&[
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_DATABASE_URL", "postgres://db/c"),
        ]);
        Config::from_map(&all).unwrap();
        assert_eq!(
            DEFAULT_ORIGINS.join(","),
            table::setting("CHATROOM_ALLOWED_ORIGINS").unwrap().default
        );
    }

    /// Bad values are named for every setting, the bridge's included when
    /// the bridge is off; a rule across two settings too.
    #[test]
    fn bad_values_are_named_whatever_else_is_set() {
        let err = Config::from_map(&vars(&[
            ("CHATROOM_MQTT_PORT", "99999"),
            ("CHATROOM_MQTT_PREFIX", "a/#"),
            ("CHATROOM_LOG_FORMAT", "xml"),
            ("CHATROOM_TRUSTED_PROXIES", "10.0.0.0/8,nope"),
            ("CHATROOM_ALLOWED_ORIGINS", "example.com"),
            ("CHATROOM_PUBLIC_URL", "chat.example.com"),
        ]))
        .unwrap_err();
        assert_eq!(err.0.len(), 6, "{err}");
        for name in [
            "CHATROOM_MQTT_PORT",
            "CHATROOM_MQTT_PREFIX",
            "CHATROOM_LOG_FORMAT",
            "CHATROOM_TRUSTED_PROXIES",
            "CHATROOM_ALLOWED_ORIGINS",
            "CHATROOM_PUBLIC_URL",
        ] {
            assert!(err.to_string().contains(name), "{err}");
        }
        let tls = Config::from_map(&vars(&[
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_MQTT_TLS", "on"),
        ]));
        assert_eq!(tls.is_err(), !TLS_BUILT_IN);
    }

    /// Values read as before the table: lists normalised, URLs without a
    /// trailing slash, days into seconds, JSON logs in any case.
    #[test]
    fn values_reach_their_fields() {
        let c = Config::from_map(&vars(&[
            ("CHATROOM_ALLOWED_HOSTS", "Box, localhost:8080 ,"),
            ("CHATROOM_TRUSTED_PROXIES", "10.1.2.3"),
            ("CHATROOM_PUBLIC_URL", "https://chat.example.com/"),
            ("CHATROOM_PUBLIC_HOSTS", "Chat.Example.com"),
            ("CHATROOM_OAUTH_REFRESH_DAYS", "2"),
            ("CHATROOM_LOG_FORMAT", "JSON"),
            ("CHATROOM_MQTT_HOST", "broker"),
            ("CHATROOM_MQTT_PORT", "8883"),
        ]))
        .unwrap();
        let hosts: Vec<String> = c
            .allowed_hosts
            .unwrap()
            .iter()
            .map(HostRule::display)
            .collect();
        assert_eq!(hosts, ["box:*", "localhost:8080"]);
        assert_eq!(c.trusted_proxies[0].to_string(), "10.1.2.3/32");
        assert_eq!(c.public_url.as_deref(), Some("https://chat.example.com"));
        assert_eq!(c.public_hosts, ["chat.example.com"]);
        assert_eq!(c.oauth_refresh_ttl, Duration::from_secs(2 * 86_400));
        assert!(c.log_json);
        let m = c.mqtt.unwrap();
        assert_eq!((m.port, m.prefix.as_str()), (8883, "chatroom"));
    }

    #[test]
    fn origins_match_scheme_host_and_port_pattern() {
        let allowed: Vec<String> = DEFAULT_ORIGINS.iter().map(|s| s.to_string()).collect();
        assert!(crate::auth::hosts::origin_allowed(
            &allowed,
            "http://localhost:3000"
        ));
        assert!(crate::auth::hosts::origin_allowed(
            &allowed,
            "http://127.0.0.1"
        ));
        assert!(!crate::auth::hosts::origin_allowed(
            &allowed,
            "http://localhost.evil.com"
        ));
        assert!(!crate::auth::hosts::origin_allowed(
            &allowed,
            "https://evil.com"
        ));
        assert!(!crate::auth::hosts::origin_allowed(
            &allowed,
            "http://localhost:3000.evil"
        ));
    }
}
