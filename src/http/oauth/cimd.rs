//! Client ID Metadata Documents: a `client_id` that is an `https` URL names
//! a JSON document describing the client. Fetching it means this server
//! makes a request where an outsider points it, so the fetch is fenced in:
//! `https` on port 443 only (no probing of other ports); the name resolved
//! by our own resolver, which refuses every address that is not public
//! (loopback, private, link-local, …), so the check holds for the address
//! actually connected to; a literal IP checked the same way; no redirects,
//! no proxy; a short timeout and a size cap.
//!
//! Fetches are bounded: at most [`MAX_IN_FLIGHT`] at once and
//! [`MAX_PER_ADDRESS`] per asking address; name lookups run on at most
//! [`DNS_THREADS`] blocking threads, each holding its permit until the
//! system resolver returns, so names whose DNS never answers cannot fill
//! tokio's blocking pool (the system resolver is kept, rather than an async
//! one, so `/etc/hosts`, Docker's DNS and search domains work as for every
//! other program on the host). A document is cached as its
//! `Cache-Control: max-age` says, within [`MIN_CACHE`]–[`MAX_CACHE`]; a
//! failure of the host (DNS, TLS, connection, timeout, private address) is
//! cached per host for [`FAILURE_CACHE`], so a flood naming one host costs
//! one fetch a minute.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::Semaphore;

use crate::domain::oauth::{ClientInfo, ClientSource, check_redirect_uri};

/// The largest document accepted.
const MAX_BYTES: usize = 64 * 1024;
/// How long a fetch may take, all in.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long a name lookup may take.
const DNS_TIMEOUT: Duration = Duration::from_secs(3);
/// A document without `Cache-Control` is kept this long.
const DEFAULT_CACHE: Duration = Duration::from_secs(300);
/// The least a document is kept (`no-store`, `max-age=0` included): a
/// flood of sign-ins naming it costs one fetch a minute.
pub const MIN_CACHE: Duration = Duration::from_secs(60);
/// The most a document is kept, whatever it asks: an app's change of its
/// redirect URIs is seen within a day.
pub const MAX_CACHE: Duration = Duration::from_secs(86_400);
/// How long a failure is remembered (per host, or per URL for a bad
/// document).
pub const FAILURE_CACHE: Duration = Duration::from_secs(60);
/// The most documents and failed hosts cached at once.
const CACHE_MAX: usize = 1_000;
/// Fetches in flight at once, for everyone.
pub const MAX_IN_FLIGHT: usize = 16;
/// Fetches in flight at once for one asking address (IPv6 by /64).
pub const MAX_PER_ADDRESS: usize = 2;
/// Blocking threads name lookups may occupy at once.
pub const DNS_THREADS: usize = 8;

/// Why a client ID metadata document cannot be used: the cause, for the
/// page and the log, with what the server's owner can do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// `CHATROOM_OAUTH_CIMD=off`.
    Off,
    /// Not an `https` URL on port 443 with a path.
    BadUrl(String),
    /// The name did not resolve (or not in time).
    Dns(String),
    /// It resolves only to loopback, private or link-local addresses.
    NotPublic(String),
    /// The TLS handshake failed (certificate, protocol).
    Tls(String),
    /// No connection, or no answer in time.
    Unreachable(String),
    Timeout(String),
    TooLarge,
    Status(u16),
    /// Fetched, but not a usable document.
    BadDocument(String),
    /// Too many fetches at once (for everyone, or from this address).
    Busy,
}

impl Refused {
    /// What the sign-in page says: the cause and what to do.
    pub fn message(&self) -> String {
        let no_outbound = "If this server cannot reach the internet (no outbound HTTPS), the owner can set \
                           CHATROOM_OAUTH_CIMD=off so apps register instead.";
        match self {
            Refused::Off => "This server does not fetch app descriptions (CHATROOM_OAUTH_CIMD=off): the app \
                 must register with the server instead. Remove the connector in the app and add it again; \
                 most apps then register by themselves."
                .into(),
            Refused::BadUrl(why) => format!("The app's description address cannot be used: {why}."),
            Refused::Dns(host) => format!(
                "The server could not look up {host} (DNS) to read the app's description. {no_outbound} \
                 Otherwise check the server's DNS settings, then try again."
            ),
            Refused::NotPublic(host) => format!(
                "The app's description at {host} is not on a public address (it resolves to loopback, \
                 private or link-local addresses), and this server never fetches from those."
            ),
            Refused::Tls(host) => format!(
                "The secure connection to {host} failed (TLS: its certificate or protocol was not \
                 accepted). Check the server's clock and CA certificates, or try again later."
            ),
            Refused::Unreachable(host) => format!(
                "The server could not connect to {host} to read the app's description. {no_outbound}"
            ),
            Refused::Timeout(host) => format!(
                "{host} did not send the app's description in time ({} s). Try again in a minute. {no_outbound}",
                TIMEOUT.as_secs()
            ),
            Refused::TooLarge => format!(
                "The app's description is larger than {} KiB, so it was not read.",
                MAX_BYTES / 1024
            ),
            Refused::Status(code) => format!(
                "The app's description address answered HTTP {code}; the app's maker must fix it."
            ),
            Refused::BadDocument(why) => {
                format!("The app's description is not usable: {why}; the app's maker must fix it.")
            }
            Refused::Busy => "The server is reading many app descriptions at once; try again in a minute."
                .into(),
        }
    }

    /// A short cause for the log.
    pub fn cause(&self) -> &'static str {
        match self {
            Refused::Off => "off",
            Refused::BadUrl(_) => "bad url",
            Refused::Dns(_) => "dns",
            Refused::NotPublic(_) => "private address",
            Refused::Tls(_) => "tls",
            Refused::Unreachable(_) => "unreachable",
            Refused::Timeout(_) => "timeout",
            Refused::TooLarge => "too large",
            Refused::Status(_) => "http status",
            Refused::BadDocument(_) => "bad document",
            Refused::Busy => "busy",
        }
    }

    /// Whether the failure is the host's (remembered per host).
    fn of_host(&self) -> bool {
        matches!(
            self,
            Refused::Dns(_)
                | Refused::NotPublic(_)
                | Refused::Tls(_)
                | Refused::Unreachable(_)
                | Refused::Timeout(_)
        )
    }
}

/// Whether `ip` is an address on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1])) // shared address space
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (18..20).contains(&o[1])) // benchmarking
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local
                || (s[0] & 0xffc0) == 0xfe80 // link-local
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
                || (s[0] == 0x64 && s[1] == 0xff9b)) // NAT64 of any v4, private included
        }
    }
}

/// Resolves names with the system resolver on a bounded number of blocking
/// threads, then keeps only public addresses; a name with none left is an
/// error, so the client never connects to one.
struct PublicOnly {
    threads: Arc<Semaphore>,
}

#[derive(Debug)]
enum ResolveError {
    NotPublic,
    Failed,
    Busy,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResolveError::NotPublic => "the name resolves to no public address",
            ResolveError::Failed => "the name could not be resolved",
            ResolveError::Busy => "too many name lookups at once",
        })
    }
}

impl std::error::Error for ResolveError {}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let threads = self.threads.clone();
        Box::pin(async move {
            let boxed = |e: ResolveError| Box::new(e) as Box<dyn std::error::Error + Send + Sync>;
            let permit = threads
                .try_acquire_owned()
                .map_err(|_| boxed(ResolveError::Busy))?;
            // The permit goes with the thread: it is released when the
            // lookup returns, not when this future gives up waiting.
            let lookup = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                (host.as_str(), 443)
                    .to_socket_addrs()
                    .map(|a| a.collect::<Vec<SocketAddr>>())
            });
            let found = match tokio::time::timeout(DNS_TIMEOUT, lookup).await {
                Ok(Ok(Ok(found))) => found,
                _ => return Err(boxed(ResolveError::Failed)),
            };
            let public: Vec<SocketAddr> = found.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(boxed(ResolveError::NotPublic));
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// What a fetch error was, from its chain of causes.
fn classify(e: &reqwest::Error, host: &str) -> Refused {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut text = String::new();
    while let Some(err) = cause {
        match err.downcast_ref::<ResolveError>() {
            Some(ResolveError::NotPublic) => return Refused::NotPublic(host.to_owned()),
            Some(ResolveError::Failed) => return Refused::Dns(host.to_owned()),
            Some(ResolveError::Busy) => return Refused::Busy,
            None => {}
        }
        text.push_str(&err.to_string().to_ascii_lowercase());
        text.push(' ');
        cause = err.source();
    }
    if text.contains("no public address") {
        Refused::NotPublic(host.to_owned())
    } else if text.contains("could not be resolved") || text.contains("dns error") {
        Refused::Dns(host.to_owned())
    } else if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
        Refused::Tls(host.to_owned())
    } else if e.is_timeout() {
        Refused::Timeout(host.to_owned())
    } else {
        Refused::Unreachable(host.to_owned())
    }
}

/// How long `Cache-Control` asks a document to be kept, within bounds.
pub fn cache_for(cache_control: Option<&str>) -> Duration {
    let Some(value) = cache_control else {
        return DEFAULT_CACHE;
    };
    let mut max_age = None;
    for directive in value.split(',').map(|d| d.trim().to_ascii_lowercase()) {
        if directive == "no-store" || directive == "no-cache" {
            return MIN_CACHE;
        }
        if let Some(n) = directive.strip_prefix("max-age=") {
            max_age = n.trim_matches('"').parse::<u64>().ok();
        }
    }
    max_age
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_CACHE)
        .clamp(MIN_CACHE, MAX_CACHE)
}

/// The document's fields we read.
#[derive(serde::Deserialize)]
struct Document {
    client_id: String,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
}

/// A fetched document (or why it was refused) and until when.
type Cached = (Instant, Result<ClientInfo, Refused>);

/// Fetches and caches client ID metadata documents.
pub struct Fetcher {
    enabled: bool,
    /// Made at the first fetch: a server whose sign-ins never fetch a
    /// document never loads the TLS trust store.
    http: std::sync::OnceLock<reqwest::Client>,
    /// By URL: documents, and refusals of the document itself.
    cache: Mutex<HashMap<String, Cached>>,
    /// By host: failures of the host.
    hosts: Mutex<HashMap<String, (Instant, Refused)>>,
    in_flight: Arc<Semaphore>,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

/// One fetch's place among those in flight; gives it back when dropped.
struct Slot<'a> {
    fetcher: &'a Fetcher,
    addr: IpAddr,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut per = self
            .fetcher
            .per_address
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = per.get_mut(&self.addr) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.addr);
            }
        }
    }
}

/// `map` with entries past their time dropped when it is full, and emptied
/// if that is not enough (memory stays bounded).
fn make_room<V>(map: &mut HashMap<String, (Instant, V)>) {
    if map.len() >= CACHE_MAX {
        let now = Instant::now();
        map.retain(|_, (until, _)| *until > now);
        if map.len() >= CACHE_MAX {
            map.clear();
        }
    }
}

impl Fetcher {
    pub fn new(enabled: bool) -> Fetcher {
        Fetcher {
            enabled,
            http: std::sync::OnceLock::new(),
            cache: Mutex::new(HashMap::new()),
            hosts: Mutex::new(HashMap::new()),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            per_address: Mutex::new(HashMap::new()),
        }
    }

    /// The client `url` describes, fetched for a request from `addr`; `Err`
    /// says why it cannot be used (shown on the page; never a secret).
    pub async fn client(&self, url: &str, addr: IpAddr) -> Result<ClientInfo, Refused> {
        if !self.enabled {
            return Err(Refused::Off);
        }
        let parsed = check_url(url)?;
        let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
        let now = Instant::now();
        if let Some((until, found)) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            && *until > now
        {
            return found.clone();
        }
        if let Some((until, why)) = self
            .hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&host)
            && *until > now
        {
            return Err(why.clone());
        }
        let Some(_slot) = self.slot(addr) else {
            tracing::info!(%addr, "a client ID metadata fetch was refused: too many at once");
            return Err(Refused::Busy);
        };
        let fetched = self.fetch(url, parsed, &host).await;
        let now = Instant::now();
        match &fetched {
            Ok((_, keep)) => {
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                make_room(&mut cache);
                cache.insert(
                    url.to_owned(),
                    (now + *keep, fetched.clone().map(|(c, _)| c)),
                );
            }
            Err(why) => {
                tracing::warn!(
                    client_id = %crate::domain::names::truncate_for_message(url),
                    cause = why.cause(),
                    why = %why.message(),
                    "a client ID metadata document could not be used"
                );
                if why.of_host() {
                    let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
                    make_room(&mut hosts);
                    hosts.insert(host, (now + FAILURE_CACHE, why.clone()));
                } else if *why != Refused::Busy {
                    let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                    make_room(&mut cache);
                    cache.insert(url.to_owned(), (now + FAILURE_CACHE, Err(why.clone())));
                }
            }
        }
        fetched.map(|(c, _)| c)
    }

    /// A place for one more fetch from `addr`, if there is one.
    fn slot(&self, addr: IpAddr) -> Option<Slot<'_>> {
        let permit = self.in_flight.clone().try_acquire_owned().ok()?;
        let mut per = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
        let n = per.entry(addr).or_insert(0);
        if *n >= MAX_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(Slot {
            fetcher: self,
            addr,
            _permit: permit,
        })
    }

    /// The client fetches go out on: HTTPS only, no redirects, no proxy,
    /// public addresses only, each fetch bounded. Made once, at the first
    /// fetch.
    fn http(&self) -> Result<&reqwest::Client, Refused> {
        if let Some(http) = self.http.get() {
            return Ok(http);
        }
        let http = crate::tls::client_builder()
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .dns_resolver(Arc::new(PublicOnly {
                threads: Arc::new(Semaphore::new(DNS_THREADS)),
            }))
            .user_agent(concat!("chatroom/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                tracing::error!(error = %e, "cannot build the client ID metadata HTTP client");
                Refused::Tls("this server cannot make HTTPS requests".into())
            })?;
        Ok(self.http.get_or_init(|| http))
    }

    async fn fetch(
        &self,
        url: &str,
        parsed: url::Url,
        host: &str,
    ) -> Result<(ClientInfo, Duration), Refused> {
        let response = self
            .http()?
            .get(parsed)
            .send()
            .await
            .map_err(|e| classify(&e, host))?;
        if !response.status().is_success() {
            return Err(Refused::Status(response.status().as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BYTES as u64)
        {
            return Err(Refused::TooLarge);
        }
        let keep = cache_for(
            response
                .headers()
                .get(reqwest::header::CACHE_CONTROL)
                .and_then(|v| v.to_str().ok()),
        );
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| classify(&e, host))?;
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(Refused::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        let bad = |why: &str| Refused::BadDocument(why.to_owned());
        let doc: Document =
            serde_json::from_slice(&body).map_err(|_| bad("it is not JSON client metadata"))?;
        if doc.client_id != url {
            return Err(bad("it names another client_id than its own address"));
        }
        if doc.redirect_uris.is_empty() || doc.redirect_uris.len() > 10 {
            return Err(bad("it must list 1 to 10 redirect_uris"));
        }
        for uri in &doc.redirect_uris {
            check_redirect_uri(uri).map_err(Refused::BadDocument)?;
        }
        let name = doc
            .client_name
            .map(|n| {
                n.trim()
                    .chars()
                    .filter(|c| !c.is_control())
                    .take(200)
                    .collect::<String>()
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| host.to_owned());
        Ok((
            ClientInfo {
                client_id: doc.client_id,
                client_name: name,
                redirect_uris: doc.redirect_uris,
                source: ClientSource::Metadata,
                approved_before: false,
            },
            keep,
        ))
    }
}

/// A client ID metadata URL this server will fetch: `https`, port 443, a
/// path, no fragment or credentials, and a public literal address if any.
fn check_url(url: &str) -> Result<url::Url, Refused> {
    let bad = |why: &str| Refused::BadUrl(why.to_owned());
    let parsed = url::Url::parse(url).map_err(|_| bad("the client_id is not a URL"))?;
    if parsed.scheme() != "https" {
        return Err(bad("it is fetched only over https"));
    }
    if parsed.port().is_some_and(|p| p != 443) {
        return Err(bad("it is fetched only from port 443"));
    }
    if parsed.path().len() <= 1 || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err(bad("it needs a path and no fragment or credentials"));
    }
    // A literal address never reaches the resolver: check it here.
    let literal = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => None,
        None => return Err(bad("it has no host")),
    };
    if literal.is_some_and(|ip| !is_public(ip)) {
        return Err(Refused::NotPublic(
            parsed.host_str().unwrap_or_default().to_owned(),
        ));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "160.79.104.10", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn cache_control_is_honoured_within_bounds() {
        assert_eq!(cache_for(None), DEFAULT_CACHE);
        assert_eq!(cache_for(Some("max-age=3600")), Duration::from_secs(3600));
        assert_eq!(cache_for(Some("public, max-age=5")), MIN_CACHE);
        assert_eq!(cache_for(Some("max-age=99999999")), MAX_CACHE);
        assert_eq!(cache_for(Some("no-store")), MIN_CACHE);
        assert_eq!(cache_for(Some("max-age=banana")), DEFAULT_CACHE);
    }

    #[test]
    fn only_https_on_443_is_fetched() {
        assert!(check_url("https://app.example/client.json").is_ok());
        assert!(check_url("https://app.example:443/client.json").is_ok());
        for bad in [
            "https://app.example:8443/client.json",
            "https://app.example:22/x",
            "http://app.example/client.json",
            "https://app.example/",
        ] {
            assert!(matches!(check_url(bad), Err(Refused::BadUrl(_))), "{bad}");
        }
        assert!(matches!(
            check_url("https://10.0.0.1/c.json"),
            Err(Refused::NotPublic(_))
        ));
    }
}
