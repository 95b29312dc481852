//! How one value is read: switches, lists, and the checks of the settings
//! whose text has a shape (an address, a host rule, a CIDR, a PostgreSQL
//! URL, a topic prefix, a log filter). Each check returns the value as the
//! server will use it (its canonical text) or why it is wrong. Also the
//! [`VarReader`] of the agent-side commands (the worker's settings).

use std::collections::HashMap;

use crate::auth::hosts::HostRule;

/// Parses a switch value: `on`/`off`/`true`/`false`/`1`/`0` (and
/// `yes`/`no`), any case.
pub fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Splits a comma-separated list, dropping blanks.
pub fn split_list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `ADDRESS:PORT`.
pub(super) fn socket_addr(v: &str) -> Result<String, String> {
    v.parse::<std::net::SocketAddr>()
        .map(|a| a.to_string())
        .map_err(|_| "expected ADDRESS:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:8080".into())
}

/// A `postgres://` URL.
pub(super) fn postgres_url(v: &str) -> Result<String, String> {
    if v.starts_with("postgres://") || v.starts_with("postgresql://") {
        Ok(v.to_owned())
    } else {
        Err("expected a postgres:// URL (leave it empty to use the SQLite file CHATROOM_DB)".into())
    }
}

/// One Host allowlist entry, as [`HostRule`] writes it (`host:*`, `host:port`).
pub(super) fn host_rule(v: &str) -> Result<String, String> {
    HostRule::parse(v).map(|r| r.display())
}

/// One browser Origin (or `null`).
pub(super) fn origin(v: &str) -> Result<String, String> {
    if v == "null" || v.contains("://") {
        Ok(v.to_owned())
    } else {
        Err(format!("entry {v:?} needs a scheme, e.g. https://{v}"))
    }
}

/// One CIDR range; a bare address is a range of one.
pub(super) fn cidr(v: &str) -> Result<String, String> {
    v.parse::<ipnet::IpNet>()
        .or_else(|_| v.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|net| net.to_string())
        .map_err(|_| format!("{v:?} is not a CIDR range such as 10.0.0.0/8"))
}

/// One host name, compared without case.
pub(super) fn host_name(v: &str) -> Result<String, String> {
    Ok(v.to_ascii_lowercase())
}

/// An MQTT topic prefix: no wildcards, not only slashes.
pub(super) fn topic_prefix(v: &str) -> Result<String, String> {
    if v.contains(['+', '#']) || v.trim_matches('/').is_empty() {
        Err("must be a plain topic prefix without + or #".into())
    } else {
        Ok(v.to_owned())
    }
}

/// A length of time: a number of seconds, or one followed by `s`, `m`, `h`
/// or `d` (`2h`, `90m`); `0` means off. Kept as written.
pub(super) fn duration(v: &str) -> Result<String, String> {
    duration_secs(v).map(|_| v.trim().to_owned())
}

/// The seconds a [`duration`] value stands for.
pub fn duration_secs(v: &str) -> Result<u64, String> {
    let v = v.trim().to_ascii_lowercase();
    let (digits, unit) = match v.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => v.split_at(i),
        None => (v.as_str(), "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| "must be a length of time such as 2h, 90m, 3600 or 0 (off)".to_string())?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err("must end in s, m, h or d (2h, 90m, 3600s), or be 0 (off)".into()),
    };
    n.checked_mul(per)
        .filter(|s| *s <= 365 * 86_400)
        .ok_or_else(|| "must be at most a year".into())
}

/// A `CHATROOM_LOG` value, kept as written once [`log_directives`] reads it.
pub(super) fn log_filter(v: &str) -> Result<String, String> {
    log_directives(v).map(|_| v.to_owned())
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

/// Reads settings that are not the server's (the worker's) from a map of
/// environment variables. A bad value is noted (`NAME: why`) and reading
/// goes on with the default, so one start names every bad variable.
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
            _ => Err(number_error(min, max, v)),
        })
    }
}

/// Why `v` is not a whole number from `min` to `max`.
pub(super) fn number_error(
    min: impl std::fmt::Display,
    max: impl std::fmt::Display,
    v: &str,
) -> String {
    format!("expected a whole number from {min} to {max}, got {v:?}")
}
