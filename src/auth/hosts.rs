//! The Host allowlist against DNS rebinding (`421`), and the browser-Origin
//! check on `/mcp` (`403`).

/// One `CHATROOM_ALLOWED_HOSTS` entry: `host`, `host:port` or `host:*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    host: String,
    /// `None` matches any port or none.
    port: Option<u16>,
}

impl HostRule {
    /// Parses one entry; a bare host and `host:*` both match any port.
    pub fn parse(entry: &str) -> Result<HostRule, String> {
        let entry = entry.trim().to_ascii_lowercase();
        let (host, port) = split_host_port(&entry);
        if host.is_empty() || host.contains(['/', ' ', '@']) {
            return Err(format!("{entry:?} is not a host, host:port or host:*"));
        }
        let port = match port {
            None | Some("*") => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .map_err(|_| format!("{entry:?} has a bad port"))?,
            ),
        };
        Ok(HostRule {
            host: normalise_v6(host),
            port,
        })
    }

    /// The loopback default: localhost, 127.0.0.1 and ::1 on any port.
    pub fn loopback() -> Vec<HostRule> {
        ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .map(|h| HostRule::parse(h).expect("static"))
            .collect()
    }

    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && (self.port.is_none() || self.port == port)
    }

    /// The entry as written in the configuration (for the console posture).
    pub fn display(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => format!("{}:*", self.host),
        }
    }
}

/// Splits `host[:port]`, keeping IPv6 brackets on the host.
fn split_host_port(value: &str) -> (&str, Option<&str>) {
    if value.starts_with('[') {
        match value.find(']') {
            Some(end) => {
                let host = &value[..=end];
                let rest = &value[end + 1..];
                (host, rest.strip_prefix(':'))
            }
            None => (value, None),
        }
    } else if value.matches(':').count() == 1 {
        let (h, p) = value.split_once(':').expect("one colon");
        (h, Some(p))
    } else if value.contains(':') {
        // A bare IPv6 address without brackets.
        (value, None)
    } else {
        (value, None)
    }
}

/// Whether a request's `Host` value is allowed by `rules`.
pub fn host_allowed(rules: &[HostRule], host_header: &str) -> bool {
    let value = host_header.trim().to_ascii_lowercase();
    let (host, port) = split_host_port(&value);
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(p) => Some(p),
            Err(_) => return false,
        },
    };
    let host = normalise_v6(host);
    rules.iter().any(|r| r.matches(&host, port))
}

/// `::1` and `[::1]` name the same host.
fn normalise_v6(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// Whether a browser `Origin` is allowed: entries are `scheme://host[:port]`,
/// `scheme://host:*`, or `null`.
pub fn origin_allowed(allowed: &[String], origin: &str) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        if entry == origin {
            return true;
        }
        match entry.strip_suffix(":*") {
            Some(base) => origin
                .strip_prefix(base)
                .is_some_and(|rest| rest.is_empty() || is_port_suffix(rest)),
            None => false,
        }
    })
}

fn is_port_suffix(rest: &str) -> bool {
    rest.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[&str]) -> Vec<HostRule> {
        entries
            .iter()
            .map(|e| HostRule::parse(e).unwrap())
            .collect()
    }

    #[test]
    fn bare_host_and_star_match_any_port_or_none() {
        let r = rules(&["example.com", "lan.local:*"]);
        assert!(host_allowed(&r, "example.com"));
        assert!(host_allowed(&r, "example.com:8443"));
        assert!(host_allowed(&r, "LAN.local"));
        assert!(host_allowed(&r, "lan.local:8090"));
        assert!(!host_allowed(&r, "evil.com"));
        assert!(!host_allowed(&r, "example.com.evil.com"));
    }

    #[test]
    fn host_with_port_matches_only_that_port() {
        let r = rules(&["box:8090"]);
        assert!(host_allowed(&r, "box:8090"));
        assert!(!host_allowed(&r, "box:8091"));
        assert!(!host_allowed(&r, "box"));
    }

    #[test]
    fn loopback_default_covers_v4_v6_and_localhost() {
        let r = HostRule::loopback();
        assert!(host_allowed(&r, "127.0.0.1:8080"));
        assert!(host_allowed(&r, "localhost"));
        assert!(host_allowed(&r, "[::1]:8080"));
        assert!(!host_allowed(&r, "192.168.1.2:8080"));
        assert!(!host_allowed(&r, "localhost:notaport"));
    }
}
