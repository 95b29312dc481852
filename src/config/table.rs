//! The table of the server's settings: each one declared here once, with
//! its default, how its value is read, whether it is a secret, and the
//! line of documentation that `chatroom serve --help`, GETTING_STARTED.md
//! and `.env.example` show. Parsing ([`Values`](super::Values)), the start-up
//! settings line, `chatroom doctor` and the drift tests all read this table,
//! so a setting cannot be half-added.
//!
//! Adding a setting: one row below (in its group), then a field of
//! [`Config`](super::Config) filled from it in `Config::from_values`
//! (`v.switch("CHATROOM_X")`, `v.number("CHATROOM_X")`, …), then
//! `CHATROOM_UPDATE_DOCS=1 cargo nextest run --test docs -E 'test(settings)'`
//! for GETTING_STARTED.md and a commented line in `.env.example`.

use super::parse;

/// One setting of the server.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The environment variable, `CHATROOM_…`.
    pub name: &'static str,
    /// The default, written as it would be in `.env`; empty for none.
    pub default: &'static str,
    pub kind: Kind,
    /// One line for `--help` and the guides: what it does, in a user's words.
    pub doc: &'static str,
    /// How its value may be shown in the start-up line and by `doctor`.
    pub shown: Shown,
    pub group: Group,
}

/// How a setting's text is read and checked.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// `on`/`off`/`true`/`false`/`1`/`0`, any case.
    Switch,
    /// A whole number from `min` to `max`.
    Number { min: u64, max: u64 },
    /// Free text (a path, a host name).
    Text,
    /// An `http://` or `https://` URL; a trailing `/` is dropped.
    Url,
    /// One of these words, any case.
    Choice(&'static [&'static str]),
    /// A comma-separated list; each entry checked (and written out) by the function.
    List(fn(&str) -> Result<String, String>),
    /// Checked (and written out) by the function.
    Custom(fn(&str) -> Result<String, String>),
}

/// How much of a value may be shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Plain,
    /// Only whether it is set (`***`): a password, or half of a credential.
    Secret,
    /// A URL whose password is replaced by `***`.
    WithoutPassword,
}

/// The groups of the table, in the order the guides and `--help` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Storage,
    Access,
    Pages,
    OAuth,
    Limits,
    Mqtt,
    Logs,
}

impl Group {
    pub fn title(self) -> &'static str {
        match self {
            Group::Storage => "Listening and storage",
            Group::Access => "Who may connect",
            Group::Pages => "Dashboard and console",
            Group::OAuth => "OAuth sign-in for apps",
            Group::Limits => "Limits and housekeeping",
            Group::Mqtt => "MQTT bridge",
            Group::Logs => "Logs",
        }
    }
}

impl Kind {
    /// Reads `v` (trimmed, not empty) into the text the server will use,
    /// or says why it cannot.
    pub fn check(&self, v: &str) -> Result<String, String> {
        match self {
            Kind::Switch => parse::parse_switch(v)
                .map(|on| if on { "on" } else { "off" }.to_owned())
                .ok_or_else(|| format!("expected on or off, got {v:?}")),
            Kind::Number { min, max } => match v.parse::<u64>() {
                Ok(n) if (*min..=*max).contains(&n) => Ok(n.to_string()),
                _ => Err(parse::number_error(min, max, v)),
            },
            Kind::Text => Ok(v.to_owned()),
            Kind::Url => {
                if v.starts_with("http://") || v.starts_with("https://") {
                    Ok(v.trim_end_matches('/').to_owned())
                } else {
                    Err("expected an http:// or https:// URL".into())
                }
            }
            Kind::Choice(words) => {
                let lower = v.to_ascii_lowercase();
                if words.contains(&lower.as_str()) {
                    Ok(lower)
                } else {
                    Err(format!("expected {}", words.join(" or ")))
                }
            }
            Kind::List(entry) => Ok(parse::split_list(v)
                .map(entry)
                .collect::<Result<Vec<_>, _>>()?
                .join(",")),
            Kind::Custom(f) => f(v),
        }
    }

    /// What values it takes, for `--help` (empty where the doc says it).
    pub fn hint(&self) -> String {
        match self {
            Kind::Switch => "on/off".into(),
            Kind::Number { min, max } => format!("{min}-{max}"),
            Kind::Url => "URL".into(),
            Kind::Choice(words) => words.join("|"),
            Kind::List(_) => "list".into(),
            Kind::Text | Kind::Custom(_) => String::new(),
        }
    }
}

impl Setting {
    const fn new(
        group: Group,
        name: &'static str,
        default: &'static str,
        kind: Kind,
        doc: &'static str,
    ) -> Setting {
        Setting {
            name,
            default,
            kind,
            doc,
            shown: Shown::Plain,
            group,
        }
    }

    const fn secret(mut self) -> Setting {
        self.shown = Shown::Secret;
        self
    }

    const fn without_password(mut self) -> Setting {
        self.shown = Shown::WithoutPassword;
        self
    }
}

const fn number(min: u64, max: u64) -> Kind {
    Kind::Number { min, max }
}

const DAY: u64 = 86_400;

use Group::*;
use Kind::{Custom, List, Switch, Text, Url};

/// Every setting `chatroom serve` reads.
pub const SETTINGS: &[Setting] = &[
    // --- Listening and storage
    Setting::new(
        Storage,
        "CHATROOM_LISTEN",
        "127.0.0.1:8080",
        Custom(parse::socket_addr),
        "address and port to listen on (the image sets 0.0.0.0:8080)",
    ),
    Setting::new(
        Storage,
        "CHATROOM_DB",
        "chatroom.db",
        Text,
        "the SQLite database file (the image: /data/chatroom.db)",
    ),
    Setting::new(
        Storage,
        "CHATROOM_DATABASE_URL",
        "",
        Custom(parse::postgres_url),
        "postgres://USER:PASSWORD@HOST:5432/DB to run on PostgreSQL instead of SQLite",
    )
    .without_password(),
    Setting::new(
        Storage,
        "CHATROOM_ENV_FILE",
        ".env",
        Text,
        "the .env file to read, relative to the working directory (from the environment only; in Docker, the mounted .env)",
    ),
    // --- Who may connect
    Setting::new(
        Access,
        "CHATROOM_ALLOWED_HOSTS",
        "localhost,127.0.0.1,[::1]",
        List(parse::host_rule),
        "Host header values answered (421 otherwise): host, host:port or host:*",
    ),
    Setting::new(
        Access,
        "CHATROOM_ALLOWED_ORIGINS",
        "http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
        List(parse::origin),
        "browser Origins allowed on /mcp (403 otherwise); requests without an Origin are not affected",
    ),
    Setting::new(
        Access,
        "CHATROOM_DNS_REBIND_PROTECTION",
        "on",
        Switch,
        "the Host check against DNS rebinding; off drops it",
    ),
    Setting::new(
        Access,
        "CHATROOM_TRUST_PROXY",
        "off",
        Switch,
        "believe CF-Connecting-IP / X-Real-IP / X-Forwarded-For from a peer in CHATROOM_TRUSTED_PROXIES",
    ),
    Setting::new(
        Access,
        "CHATROOM_TRUSTED_PROXIES",
        "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7",
        List(parse::cidr),
        "CIDRs of the proxies whose forwarded-address headers are believed",
    ),
    Setting::new(
        Access,
        "CHATROOM_AUTH_FAIL_LIMIT",
        "20",
        number(0, 1_000_000),
        "failed logins one address may make within the window before it gets 429; 0 disables the throttle",
    ),
    Setting::new(
        Access,
        "CHATROOM_AUTH_FAIL_WINDOW",
        "300",
        number(1, DAY),
        "the failed-login window, in seconds",
    ),
    Setting::new(
        Access,
        "CHATROOM_RATE_LIMIT_PER_MINUTE",
        "600",
        number(0, 10_000_000),
        "tool calls per token per minute; 0 disables the limit",
    ),
    Setting::new(
        Access,
        "CHATROOM_MAX_STREAMS_PER_TOKEN",
        "8",
        number(0, 1_000_000),
        "open SSE streams plus parked wait_for_change calls per token (429 past it); 0 disables the cap",
    ),
    Setting::new(
        Access,
        "CHATROOM_MAX_IN_FLIGHT",
        "32",
        number(0, 1_000_000),
        "requests in flight per token, and per client address for requests without a valid token (429 past it); 0 disables the cap",
    ),
    Setting::new(
        Access,
        "CHATROOM_MAX_CONNECTIONS_PER_IP",
        "256",
        number(0, 1_000_000),
        "open connections per address (IPv6 by its /64), closed unread past it; trusted proxies are not counted while CHATROOM_TRUST_PROXY is on; 0 disables the cap",
    ),
    // --- Dashboard and console
    Setting::new(
        Pages,
        "CHATROOM_ENABLE_UI",
        "on",
        Switch,
        "the read-only dashboard at /ui",
    ),
    Setting::new(
        Pages,
        "CHATROOM_ADMIN_API",
        "off",
        Switch,
        "the admin console at /admin and /v1/admin/*",
    ),
    Setting::new(
        Pages,
        "CHATROOM_CONSOLE_LAN_ONLY",
        "on",
        Switch,
        "hide /ui, /admin and /v1/admin/* from requests that came through the public side",
    ),
    Setting::new(
        Pages,
        "CHATROOM_PUBLIC_URL",
        "",
        Url,
        "base URL remote agents use, e.g. https://chat.example.com (setup text, sign-in pages)",
    ),
    Setting::new(
        Pages,
        "CHATROOM_PUBLIC_HOSTS",
        "",
        List(parse::host_name),
        "host names that mean the public side, e.g. chat.example.com",
    ),
    Setting::new(
        Pages,
        "CHATROOM_LAN_URL",
        "",
        Url,
        "base URL agents on the LAN use, e.g. http://homeserver.lan:8080 (setup text)",
    ),
    // --- OAuth sign-in for apps
    Setting::new(
        OAuth,
        "CHATROOM_OAUTH",
        "on",
        Switch,
        "OAuth 2.1 sign-in with a connect code, for apps that cannot send a header; off removes its routes",
    ),
    Setting::new(
        OAuth,
        "CHATROOM_OAUTH_ACCESS_TTL",
        "3600",
        number(1, 7 * DAY),
        "seconds an OAuth access token lives (apps refresh it by themselves)",
    ),
    Setting::new(
        OAuth,
        "CHATROOM_OAUTH_REFRESH_DAYS",
        "30",
        number(1, 3_650),
        "days an OAuth refresh token lives; an app unused this long signs in again",
    ),
    Setting::new(
        OAuth,
        "CHATROOM_OAUTH_CIMD",
        "on",
        Switch,
        "look up apps whose client_id is a URL (a client ID metadata document) over outbound HTTPS; off tells them to register",
    ),
    // --- Limits and housekeeping
    Setting::new(
        Limits,
        "CHATROOM_MAX_WAIT_S",
        "90",
        number(1, 3_600),
        "longest wait_for_change, in seconds",
    ),
    Setting::new(
        Limits,
        "CHATROOM_MAX_FILE_BYTES",
        "1048576",
        number(1, 1 << 30),
        "largest shared file, in bytes",
    ),
    Setting::new(
        Limits,
        "CHATROOM_PRUNE",
        "on",
        Switch,
        "the retention and file-expiry sweep",
    ),
    Setting::new(
        Limits,
        "CHATROOM_PRUNE_INTERVAL",
        "3600",
        number(1, 7 * DAY),
        "seconds between two sweeps",
    ),
    Setting::new(
        Limits,
        "CHATROOM_STUCK_AFTER",
        "2h",
        Custom(parse::duration),
        "a task in progress this long without an update, note or lease renewal gets one task_stuck event (0: off)",
    ),
    // --- MQTT bridge
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_HOST",
        "",
        Text,
        "the broker's host name; unset keeps the bridge off",
    ),
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_PORT",
        "1883",
        number(1, 65_535),
        "the broker's port (usually 8883 with TLS)",
    ),
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_USER",
        "",
        Text,
        "the user name at the broker",
    )
    .secret(),
    Setting::new(Mqtt, "CHATROOM_MQTT_PASS", "", Text, "that user's password").secret(),
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_PREFIX",
        "chatroom",
        Custom(parse::topic_prefix),
        "topics are <prefix>/<room>/<kind> and the retained <prefix>/<room>/status",
    ),
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_TLS",
        "off",
        Switch,
        "connect to the broker with TLS",
    ),
    Setting::new(
        Mqtt,
        "CHATROOM_MQTT_HA_DISCOVERY",
        "off",
        Switch,
        "Home Assistant discovery topics (retained, under homeassistant/) for each room",
    ),
    // --- Logs
    Setting::new(
        Logs,
        "CHATROOM_LOG",
        "info",
        Custom(parse::log_filter),
        "a level (error, warn, info, debug, trace) for chatroom itself, or a tracing filter such as info,tower_http=debug",
    ),
    Setting::new(
        Logs,
        "CHATROOM_LOG_FORMAT",
        "text",
        Kind::Choice(&["text", "json"]),
        "text, or json for one JSON object per line",
    ),
];

/// The row of `name`, if the server reads it.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// The settings part of `chatroom serve --help`: every setting by group,
/// with its default, the values it takes and its line of documentation.
pub fn help_text() -> String {
    let mut out = String::from(
        "Settings: CHATROOM_* environment variables, or lines of the .env file (CHATROOM_ENV_FILE); \
         the environment wins over the file, and within the file the last line wins. Switches take \
         on/off/true/false/1/0; lists are comma-separated; an empty value means the default. \
         A bad value stops the start with a message naming the variable; `chatroom doctor` shows \
         each setting with where it came from.\n",
    );
    let mut group = None;
    for s in SETTINGS {
        if group != Some(s.group) {
            group = Some(s.group);
            out.push_str(&format!("\n{}:\n", s.group.title()));
        }
        let default = if s.default.is_empty() {
            "unset"
        } else {
            s.default
        };
        let hint = s.kind.hint();
        let mut facts = format!("default: {default}");
        if !hint.is_empty() && !matches!(s.kind, Kind::Switch | Kind::List(_)) {
            facts.push_str(&format!("; {hint}"));
        }
        if s.shown == Shown::Secret {
            facts.push_str("; secret, never shown");
        }
        out.push_str(&format!("  {} [{facts}]\n          {}\n", s.name, s.doc));
    }
    out
}

/// The settings reference of GETTING_STARTED.md: a table per group.
pub fn markdown() -> String {
    let mut out = String::new();
    let mut group = None;
    for s in SETTINGS {
        if group != Some(s.group) {
            if group.is_some() {
                out.push('\n');
            }
            group = Some(s.group);
            out.push_str(&format!(
                "**{}**\n\n| variable | default | meaning |\n|---|---|---|\n",
                s.group.title()
            ));
        }
        let default = if s.default.is_empty() {
            "—".to_owned()
        } else {
            format!("`{}`", s.default)
        };
        out.push_str(&format!(
            "| `{}` | {default} | {} |\n",
            s.name,
            markdown_text(s.doc)
        ));
    }
    out
}

/// Plain text for a Markdown table cell: `|`, `*`, `<` and `>` as themselves.
fn markdown_text(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('*', "\\*")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
