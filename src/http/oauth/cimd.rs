//! Client ID Metadata Documents: a `client_id` that is an `https` URL names
//! a JSON document describing the client. Fetching it means this server
//! makes a request where an outsider points it, so the fetch is fenced in:
//! `https` only; the name resolved by our own resolver, which refuses every
//! address that is not public (loopback, private, link-local, …), so the
//! check holds for the address actually connected to; a literal IP checked
//! the same way; no redirects, no proxy; a short timeout and a size cap.
//! Documents are cached a few minutes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::domain::oauth::{ClientInfo, check_redirect_uri};

/// The largest document accepted.
const MAX_BYTES: usize = 64 * 1024;
/// How long a fetch may take, all in.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long a fetched document (or a refusal) is kept.
const CACHE_FOR: Duration = Duration::from_secs(300);
/// The most documents cached at once.
const CACHE_MAX: usize = 1_000;

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

/// Resolves names as the system does, then keeps only public addresses; a
/// name with none left is an error, so the client never connects to one.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 443))
                .await?
                .collect();
            let public: Vec<SocketAddr> = found.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(Box::new(NotPublic) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[derive(Debug)]
struct NotPublic;

impl std::fmt::Display for NotPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the name resolves to no public address")
    }
}

impl std::error::Error for NotPublic {}

/// Whether a fetch failed because our resolver refused the address.
fn refused_address(e: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if err.downcast_ref::<NotPublic>().is_some()
            || err.to_string().contains("no public address")
        {
            return true;
        }
        cause = err.source();
    }
    false
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

/// A fetched document (or why it was refused) and when.
type Cached = (Instant, Result<ClientInfo, String>);

/// Fetches and caches client ID metadata documents.
pub struct Fetcher {
    http: reqwest::Client,
    cache: Mutex<HashMap<String, Cached>>,
}

impl Fetcher {
    pub fn new() -> Fetcher {
        let http = reqwest::Client::builder()
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .dns_resolver(Arc::new(PublicOnly))
            .user_agent(concat!("chatroom/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the metadata client builds");
        Fetcher {
            http,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client `url` describes; `Err` says why it cannot be used (shown
    /// on the error page; never a secret).
    pub async fn client(&self, url: &str) -> Result<ClientInfo, String> {
        if let Some((at, found)) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            && at.elapsed() < CACHE_FOR
        {
            return found.clone();
        }
        let found = self.fetch(url).await;
        if let Err(why) = &found {
            tracing::info!(client_id = %crate::domain::names::truncate_for_message(url), why = %why, "a client ID metadata document was refused");
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, (at, _)| at.elapsed() < CACHE_FOR);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(url.to_owned(), (Instant::now(), found.clone()));
        found
    }

    async fn fetch(&self, url: &str) -> Result<ClientInfo, String> {
        let parsed = url::Url::parse(url).map_err(|_| "the client_id is not a URL".to_owned())?;
        if parsed.scheme() != "https" {
            return Err("a client ID metadata document is fetched only over https".into());
        }
        if parsed.path().len() <= 1 || parsed.fragment().is_some() || !parsed.username().is_empty()
        {
            return Err(
                "a client ID metadata URL needs a path and no fragment or credentials".into(),
            );
        }
        // A literal address never reaches the resolver: check it here.
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => None,
            None => return Err("the client ID metadata URL has no host".into()),
        };
        if literal.is_some_and(|ip| !is_public(ip)) {
            return Err("the client ID metadata document is not on a public address".into());
        }
        let response = self.http.get(parsed).send().await.map_err(|e| {
            if refused_address(&e) {
                "the client ID metadata document is not on a public address".to_owned()
            } else {
                "the client ID metadata document could not be fetched".to_owned()
            }
        })?;
        if !response.status().is_success() {
            return Err(format!(
                "the client ID metadata document answered HTTP {}",
                response.status().as_u16()
            ));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BYTES as u64)
        {
            return Err("the client ID metadata document is too large".into());
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|_| "the client ID metadata document could not be read".to_owned())?;
            if body.len() + chunk.len() > MAX_BYTES {
                return Err("the client ID metadata document is too large".into());
            }
            body.extend_from_slice(&chunk);
        }
        let doc: Document = serde_json::from_slice(&body)
            .map_err(|_| "the client ID metadata document is not valid JSON metadata".to_owned())?;
        if doc.client_id != url {
            return Err("the client ID metadata document names another client_id".into());
        }
        if doc.redirect_uris.is_empty() || doc.redirect_uris.len() > 10 {
            return Err("the client ID metadata document must list 1 to 10 redirect_uris".into());
        }
        for uri in &doc.redirect_uris {
            check_redirect_uri(uri)?;
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
            .unwrap_or_else(|| parsed_host(url));
        Ok(ClientInfo {
            client_id: doc.client_id,
            client_name: name,
            redirect_uris: doc.redirect_uris,
            secret_hash: None,
            registered: false,
        })
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher::new()
    }
}

fn parsed_host(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "an app".into())
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
}
