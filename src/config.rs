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

/// Loads `.env` (when present) into the process environment without
/// overriding variables that are already set.
pub fn load_dotenv() {
    let _ = dotenvy::dotenv();
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
}
