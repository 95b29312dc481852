//! The worker's settings: read from the environment once, validated together,
//! so a bad start names every bad variable on one line before any network call.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use crate::config::VarReader;
use crate::secret::Secret;

/// What `chatroom worker` runs with, after validation. Secrets print `***`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The board's MCP endpoint (`CHATROOM_URL` + `/mcp`).
    pub mcp_url: String,
    pub board_token: Secret,
    /// `WORKER_MODEL_BASE_URL` + `/chat/completions`.
    pub completions_url: String,
    pub model_name: String,
    /// Absent for local endpoints that take no key.
    pub api_key: Option<Secret>,
    pub poll_interval: Duration,
    pub max_calls_per_hour: u32,
    pub model_timeout: Duration,
    pub cooldown: Duration,
    pub max_failures: u32,
}

impl Settings {
    /// Parses `vars`; on failure, one message per bad variable, each naming it.
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Settings, Vec<String>> {
        let mut r = VarReader::new(vars);
        let allow_insecure = r.switch("WORKER_ALLOW_INSECURE_HTTP", false);
        let board = url(&mut r, "CHATROOM_URL", allow_insecure);
        let board_token = r.required("CHATROOM_TOKEN");
        let model = url(&mut r, "WORKER_MODEL_BASE_URL", allow_insecure);
        let model_name = r.required("WORKER_MODEL_NAME");
        let api_key = r.string("WORKER_API_KEY").map(Secret::new);
        let poll_interval = seconds(&mut r, "WORKER_POLL_INTERVAL", 10.0, 0.01, 86_400.0);
        let max_calls_per_hour = r.number("WORKER_MAX_TASKS_PER_HOUR", 10u32, 1, 1_000_000);
        let model_timeout = seconds(&mut r, "WORKER_MODEL_TIMEOUT", 120.0, 0.01, 86_400.0);
        let cooldown = seconds(
            &mut r,
            "WORKER_COOLDOWN_SECONDS",
            900.0,
            0.0,
            30.0 * 86_400.0,
        );
        let max_failures = r.number("WORKER_MAX_FAILURES", 3u32, 1, 1_000);
        let (Some(board), Some(board_token), Some(model), Some(model_name)) =
            (board, board_token, model, model_name)
        else {
            return Err(r.errors);
        };
        if !r.errors.is_empty() {
            return Err(r.errors);
        }
        // The documented form is the base URL; a pasted `/mcp` is forgiven.
        let mcp_url = if board.ends_with("/mcp") {
            board
        } else {
            format!("{board}/mcp")
        };
        Ok(Settings {
            mcp_url,
            board_token: Secret::new(board_token),
            completions_url: format!("{model}/chat/completions"),
            model_name,
            api_key,
            poll_interval,
            max_calls_per_hour,
            model_timeout,
            cooldown,
            max_failures,
        })
    }
}

/// A URL the worker may send a secret to. The value itself is never
/// repeated in a message: a careless one may carry a key.
fn url(r: &mut VarReader, name: &str, allow_insecure: bool) -> Option<String> {
    let v = r.required(name)?;
    match check_url(&v, allow_insecure) {
        Ok(()) => Some(v.trim_end_matches('/').to_owned()),
        Err(why) => {
            r.bad(name, why);
            None
        }
    }
}

fn seconds(r: &mut VarReader, name: &str, default: f64, min: f64, max: f64) -> Duration {
    r.parse(name, Duration::from_secs_f64(default), |v| {
        match v.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= min && n <= max => Ok(Duration::from_secs_f64(n)),
            _ => Err(format!(
                "expected seconds from {min} to {max} (fractions allowed)"
            )),
        }
    })
}

/// `https://` anywhere; `http://` only to a loopback host unless the user
/// opted in for a LAN. Anything else is refused.
pub fn check_url(url: &str, allow_insecure: bool) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "expected an http:// or https:// URL")?;
    let host = parsed.host_str().ok_or("expected a URL with a host")?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if allow_insecure || is_loopback(host) => Ok(()),
        "http" => Err(
            "plain http:// is allowed only to a loopback host; use https://, or set WORKER_ALLOW_INSECURE_HTTP=on for a host on your LAN",
        ),
        _ => Err("expected an http:// or https:// URL"),
    }
}

/// `localhost`, `127.0.0.0/8` or `[::1]`.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        let mut v: HashMap<String, String> = [
            ("CHATROOM_URL", "http://127.0.0.1:8080"),
            ("CHATROOM_TOKEN", "cr_x"),
            ("WORKER_MODEL_BASE_URL", "https://api.example.com/v1/"),
            ("WORKER_MODEL_NAME", "m"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, val) in pairs {
            v.insert(k.to_string(), val.to_string());
        }
        v
    }

    /// Unset variables take their documented defaults; the URLs gain their paths.
    #[test]
    fn defaults_and_urls() {
        let s = Settings::from_map(&vars(&[])).unwrap();
        assert_eq!(s.mcp_url, "http://127.0.0.1:8080/mcp");
        assert_eq!(
            s.completions_url,
            "https://api.example.com/v1/chat/completions"
        );
        assert_eq!(s.poll_interval, Duration::from_secs(10));
        assert_eq!(s.max_calls_per_hour, 10);
        assert_eq!(s.model_timeout, Duration::from_secs(120));
        assert_eq!(s.cooldown, Duration::from_secs(900));
        assert_eq!(s.max_failures, 3);
        assert!(s.api_key.is_none());
    }

    /// Durations take fractions of a second.
    #[test]
    fn fractional_seconds_are_accepted() {
        let s = Settings::from_map(&vars(&[("WORKER_POLL_INTERVAL", "0.2")])).unwrap();
        assert_eq!(s.poll_interval, Duration::from_millis(200));
    }

    /// Every bad or missing variable is reported, each by name.
    #[test]
    fn every_bad_variable_is_named() {
        let errors = Settings::from_map(&vars(&[
            ("CHATROOM_TOKEN", ""),
            ("WORKER_POLL_INTERVAL", "soon"),
            ("WORKER_MAX_TASKS_PER_HOUR", "0"),
            ("WORKER_MODEL_TIMEOUT", "NaN"),
            ("WORKER_MAX_FAILURES", "-1"),
            ("WORKER_ALLOW_INSECURE_HTTP", "maybe"),
        ]))
        .unwrap_err();
        for name in [
            "CHATROOM_TOKEN",
            "WORKER_POLL_INTERVAL",
            "WORKER_MAX_TASKS_PER_HOUR",
            "WORKER_MODEL_TIMEOUT",
            "WORKER_MAX_FAILURES",
            "WORKER_ALLOW_INSECURE_HTTP",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(name)),
                "{name}: {errors:?}"
            );
        }
    }

    /// https anywhere, http only to loopback unless switched on, no other scheme.
    #[test]
    fn http_only_to_loopback_unless_allowed() {
        for ok in [
            "https://example.com",
            "http://localhost:1",
            "http://127.0.0.1",
            "http://127.1.2.3:9",
            "http://[::1]:8080",
        ] {
            assert_eq!(check_url(ok, false), Ok(()), "{ok}");
        }
        for bad in [
            "http://example.com",
            "http://192.168.1.2:8080",
            "http://localhost.evil.com",
            "ftp://127.0.0.1",
            "127.0.0.1:8080",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert_eq!(check_url("http://192.168.1.2:8080", true), Ok(()));
        assert!(check_url("ftp://example.com", true).is_err());
    }
}
