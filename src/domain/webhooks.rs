//! Webhooks out and inbound URLs (SPEC §7a): the rules, once, for the CLI,
//! the console, the delivery worker ([`crate::webhooks`]) and the inbound
//! route ([`crate::http::inbound`]).
//!
//! Out: which events a webhook wants, the Standard Webhooks signature, the
//! presets' shapes (ntfy, Discord, Slack, Home Assistant), the back-off and
//! the pause. In: the three ways a sender proves itself (a bearer secret, a
//! Standard Webhooks signature, GitHub's `X-Hub-Signature-256`) and what
//! its body asks for (a message, a task, a GitHub event in one line).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use rand::TryRng;
use serde_json::Value;
use sha2::Sha256;

use crate::domain::model::Event;
use crate::domain::store::prelude::*;
use crate::domain::store::webhooks::{Inbound, NewWebhook, Webhook};
use crate::domain::{Core, Owner, names};
use crate::error::{Error, Result};

/// The formats a webhook can speak.
pub const FORMATS: [&str; 5] = ["standard", "ntfy", "discord", "slack", "homeassistant"];

/// What a webhook gets unless told otherwise: mentions, new and finished
/// tasks, reviews, stuck tasks.
pub const DEFAULT_EVENTS: [&str; 5] = [
    "mention",
    "task_created",
    "task_submitted",
    "task_reviewed",
    "task_stuck",
];

/// How long one attempt may take before it counts as failed.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The first retry waits this long; each next one twice as long, up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN_MS: i64 = 5_000;
pub const BACKOFF_MAX_MS: i64 = 3_600_000;
/// An event that failed for this long is given up (the next one follows).
pub const GIVE_UP_AFTER_MS: i64 = 24 * 3_600_000;
/// Failures in a row that pause a webhook.
pub const PAUSE_AFTER: i64 = 50;
/// The longest a body from an inbound sender may be.
pub const INBOUND_MAX_BYTES: usize = 256 * 1024;
/// A Standard Webhooks timestamp further than this from now is refused.
pub const SIGNATURE_TOLERANCE_S: i64 = 5 * 60;
/// The most webhooks a server keeps (a limit refused, not truncated).
pub const MAX_WEBHOOKS: usize = 1000;

type HmacSha256 = Hmac<Sha256>;

/// Checks what `add-webhook` was given and makes the webhook to store: a
/// `standard` one gets a fresh signing secret (`whsec_…`).
pub fn new_webhook(room: &str, url: &str, format: &str, events: &str) -> Result<NewWebhook> {
    names::check_room(room)?;
    let format = format.trim().to_ascii_lowercase();
    if !FORMATS.contains(&format.as_str()) {
        return Err(Error::invalid(format!(
            "unknown format {format:?}; formats are {}",
            FORMATS.join(", ")
        )));
    }
    check_url(url)?;
    Ok(NewWebhook {
        room: room.to_owned(),
        url: url.trim().to_owned(),
        events: parse_events(events)?,
        secret: (format == "standard").then(new_secret),
        format,
    })
}

/// `--events`: empty for the default set, `all`, or a comma-separated list
/// of kinds (and `mention`: messages and notes that mention someone).
pub fn parse_events(s: &str) -> Result<Vec<String>> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(DEFAULT_EVENTS.iter().map(|k| (*k).to_owned()).collect());
    }
    if s.eq_ignore_ascii_case("all") {
        return Ok(vec!["all".into()]);
    }
    let mut out: Vec<String> = Vec::new();
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let k = k.to_ascii_lowercase();
        if k != "mention" && crate::domain::model::EventKind::named(&k).is_none() {
            return Err(Error::invalid(format!(
                "unknown event kind {k:?}; use all, mention or one of {}",
                crate::domain::events::KINDS.join(", ")
            )));
        }
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

/// A target URL: `http` or `https`, with a host. A LAN address is fine
/// (the owner chose it); the server's own address is refused at delivery
/// ([`is_own_address`]).
pub fn check_url(url: &str) -> Result<url::Url> {
    let parsed = url::Url::parse(url.trim())
        .map_err(|e| Error::invalid(format!("the webhook URL {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(Error::invalid(
            "a webhook URL starts with http:// or https:// and names a host",
        ));
    }
    if url.len() > 2048 {
        return Err(Error::invalid("a webhook URL has at most 2048 characters"));
    }
    Ok(parsed)
}

/// Whether `addr` is where this server itself listens (`listen`): the same
/// port on the same address, or on any local address when it listens on
/// all of them. A webhook never calls the server back.
pub fn is_own_address(addr: std::net::SocketAddr, listen: std::net::SocketAddr) -> bool {
    if addr.port() != listen.port() {
        return false;
    }
    let ip = addr.ip().to_canonical();
    ip == listen.ip().to_canonical()
        || ip.is_loopback()
        || (listen.ip().is_unspecified() && (ip.is_unspecified() || is_private(ip)))
}

fn is_private(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_private() || v4.is_link_local(),
        std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// A fresh secret: `whsec_` and 24 random bytes in base64, as Standard
/// Webhooks' libraries expect it (they sign with the decoded bytes).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 24];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is available");
    format!("whsec_{}", B64.encode(bytes))
}

/// A fresh key for an inbound URL: 18 random bytes, URL-safe.
pub fn new_inbound_key() -> String {
    let mut bytes = [0u8; 18];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random source is available");
    format!(
        "in_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// The key a `whsec_…` secret signs with: its base64 part decoded (or, for
/// a secret not in that form, its bytes).
fn signing_key(secret: &str) -> Vec<u8> {
    let body = secret.strip_prefix("whsec_").unwrap_or(secret);
    B64.decode(body)
        .unwrap_or_else(|_| secret.as_bytes().to_vec())
}

/// The Standard Webhooks signature of a message: `v1,` and the base64
/// HMAC-SHA256 of `id.timestamp.body`.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        <HmacSha256 as KeyInit>::new_from_slice(&signing_key(secret)).expect("any key length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// Whether `kinds` (a webhook's `events`) asks for `e`.
pub fn wants(kinds: &[String], e: &Event) -> bool {
    kinds.iter().any(|k| {
        k == "all"
            || *k == e.kind
            || (k == "mention"
                && matches!(e.kind.as_str(), "message" | "note_added")
                && e.detail["mentions"]
                    .as_array()
                    .is_some_and(|m| !m.is_empty()))
    })
}

/// The delay before attempt `attempts + 1` of an event that failed
/// `attempts` times: 5 s, doubling, at most an hour.
pub fn backoff_ms(attempts: i64) -> i64 {
    let shift = (attempts - 1).clamp(0, 20) as u32;
    (BACKOFF_MIN_MS << shift).min(BACKOFF_MAX_MS)
}

/// The Standard Webhooks message id of `e` at `hook`.
pub fn message_id(hook: &Webhook, e: &Event) -> String {
    format!("msg_{}_{}", hook.id, e.id)
}

/// Adds a webhook on `room` (which must exist). Only through
/// [`Core::owner_add_webhook`], which writes the admin log.
async fn add_webhook(
    store: &dyn Store,
    room: &str,
    url: &str,
    format: &str,
    events: &str,
    now: i64,
) -> Result<Webhook> {
    let hook = new_webhook(room, url, format, events)?;
    if store.get_room(room).await?.is_none() {
        return Err(Error::not_found(format!("room {room:?} does not exist")));
    }
    if store.list_webhooks().await?.len() >= MAX_WEBHOOKS {
        return Err(Error::invalid(format!(
            "this server has {MAX_WEBHOOKS} webhooks, the most it keeps: remove one first"
        )));
    }
    store.insert_webhook(&hook, now).await
}

/// Adds an inbound URL posting as `agent` in `room` (which must exist);
/// gives it with its secret, which is shown this once. Only through
/// [`Core::owner_add_inbound`], which writes the admin log.
async fn add_inbound(store: &dyn Store, room: &str, agent: &str, now: i64) -> Result<Inbound> {
    names::check_room(room)?;
    names::check_agent(agent)?;
    if store.get_room(room).await?.is_none() {
        return Err(Error::not_found(format!("room {room:?} does not exist")));
    }
    let secret = new_secret();
    let mut inbound = Inbound {
        id: 0,
        key: new_inbound_key(),
        room: room.to_owned(),
        agent: agent.to_owned(),
        secret_hash: crate::secret::hash(&secret),
        secret,
        created_ts: now,
        last_used_ts: None,
    };
    inbound.id = store.insert_inbound(&inbound).await?;
    Ok(inbound)
}

/// The path of an inbound URL.
pub fn inbound_path(key: &str) -> String {
    format!("/v1/inbound/{key}")
}

/// Whether `key` could be an inbound URL's key (what `new_inbound_key` makes).
pub fn valid_inbound_key(key: &str) -> bool {
    key.len() <= 64
        && key.starts_with("in_")
        && key[3..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

// --- In

/// How an inbound request proved itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    Bearer,
    StandardWebhooks,
    GitHub,
}

/// An inbound request's headers as its check reads them: by lower-case
/// name, as text. The HTTP surface implements it for its header map, so
/// the check reads the request's own headers and names each where it
/// reads it.
pub trait InboundHeaders {
    /// The header `name`, when present and text.
    fn header(&self, name: &str) -> Option<&str>;
}

/// Checks an inbound request against `inbound`'s secret at `now_s`
/// (seconds): a bearer secret, a Standard Webhooks signature, or GitHub's
/// `X-Hub-Signature-256`. Constant-time comparisons; `None` refuses.
pub fn verify(
    inbound: &Inbound,
    h: &impl InboundHeaders,
    body: &[u8],
    now_s: i64,
) -> Option<Proof> {
    use subtle::ConstantTimeEq;
    if let Some(auth) = h.header("authorization")
        && let Some(token) = auth.strip_prefix("Bearer ")
    {
        let given = crate::secret::hash(token.trim());
        return bool::from(given.as_bytes().ct_eq(inbound.secret_hash.as_bytes()))
            .then_some(Proof::Bearer);
    }
    if let Some(sig) = h.header("x-hub-signature-256") {
        return github_ok(&inbound.secret, sig, body).then_some(Proof::GitHub);
    }
    if let (Some(id), Some(ts), Some(sigs)) = (
        h.header("webhook-id"),
        h.header("webhook-timestamp"),
        h.header("webhook-signature"),
    ) {
        let ts: i64 = ts.trim().parse().ok()?;
        if (now_s - ts).abs() > SIGNATURE_TOLERANCE_S {
            return None;
        }
        let expected = sign(&inbound.secret, id, ts, body);
        let ok = sigs
            .split(' ')
            .any(|s| bool::from(s.as_bytes().ct_eq(expected.as_bytes())));
        return ok.then_some(Proof::StandardWebhooks);
    }
    None
}

/// GitHub's check: `sha256=` and the hex HMAC-SHA256 of the body keyed by
/// the secret as entered in GitHub.
pub fn github_ok(secret: &str, header: &str, body: &[u8]) -> bool {
    let Some(hex_sig) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Ok(given) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

/// What an inbound body asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    Message(String),
    Task {
        title: String,
        body: Option<String>,
        priority: Option<String>,
    },
    /// A GitHub event this server does not post (a `ping`).
    Nothing,
}

/// Reads an inbound body: `{"message": …}`, `{"task": {…}}`, or (from
/// GitHub, `github_event` set) the event summarised in one line.
pub fn parse_ask(body: &[u8], github_event: Option<&str>) -> Result<Ask> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::invalid(format!("the body is not JSON: {e}")))?;
    if let Some(kind) = github_event {
        return Ok(match github_line(kind, &v) {
            Some(line) => Ask::Message(line),
            None => Ask::Nothing,
        });
    }
    if let Some(m) = v.get("message") {
        let m = m
            .as_str()
            .ok_or_else(|| Error::invalid("\"message\" is text"))?;
        return Ok(Ask::Message(m.to_owned()));
    }
    if let Some(t) = v.get("task") {
        let text = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
        let title = text("title").ok_or_else(|| Error::invalid("a task needs a \"title\""))?;
        return Ok(Ask::Task {
            title,
            body: text("body"),
            priority: text("priority"),
        });
    }
    Err(Error::invalid(
        "send {\"message\": \"…\"} or {\"task\": {\"title\": \"…\", \"body\": \"…\", \"priority\": \"…\"}}",
    ))
}

/// A GitHub event in one line: a push, a workflow run that failed, an
/// issue opened (and the rest by name); `None` for a `ping`.
pub fn github_line(kind: &str, v: &Value) -> Option<String> {
    let s = |p: &str| v.pointer(p).and_then(Value::as_str).unwrap_or("?");
    let repo = s("/repository/full_name");
    Some(match kind {
        "ping" => return None,
        "push" => {
            let n = v["commits"].as_array().map_or(0, Vec::len);
            let branch = s("/ref").trim_start_matches("refs/heads/");
            format!(
                "GitHub: {} pushed {n} commit{} to {repo} {branch}: {}",
                s("/pusher/name"),
                if n == 1 { "" } else { "s" },
                s("/head_commit/message").lines().next().unwrap_or("")
            )
        }
        "workflow_run" => format!(
            "GitHub: workflow \"{}\" on {repo} {} {} ({}) {}",
            s("/workflow_run/name"),
            s("/workflow_run/head_branch"),
            s("/action"),
            v.pointer("/workflow_run/conclusion")
                .and_then(Value::as_str)
                .unwrap_or("running"),
            s("/workflow_run/html_url")
        ),
        "issues" => format!(
            "GitHub: issue #{} {} on {repo} by {}: {} {}",
            v.pointer("/issue/number")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            s("/action"),
            s("/issue/user/login"),
            s("/issue/title"),
            s("/issue/html_url")
        ),
        other => format!(
            "GitHub: {other} {} on {repo} by {}",
            v["action"].as_str().unwrap_or(""),
            s("/sender/login")
        ),
    })
}

/// The owner's webhook and inbound-URL changes, from the command line and
/// the console alike: each one decided here and written to the admin log.
impl Core {
    /// Adds a webhook on `room` (see [`add_webhook`]).
    pub async fn owner_add_webhook(
        &self,
        owner: &Owner<'_>,
        room: &str,
        url: &str,
        format: &str,
        events: &str,
    ) -> Result<Webhook> {
        let now = self.clock.now_ms();
        let hook = add_webhook(self.store.as_ref(), room, url, format, events, now).await?;
        let target = format!(
            "webhook #{} on room {} ({}, {})",
            hook.id,
            hook.room,
            hook.format,
            shown_url(&hook.url)
        );
        self.log_owner(owner.into(), "webhook.add", target, false)
            .await;
        Ok(hook)
    }

    /// Removes webhook `id`; `not_found` when there is none.
    pub async fn owner_remove_webhook(&self, owner: &Owner<'_>, id: i64) -> Result<()> {
        let found = self.store.delete_webhook(id).await?;
        let (action, target) = ("webhook.remove", format!("webhook #{id}"));
        self.log_if_found(owner, found, format!("no webhook {id}"), action, target)
            .await
    }

    /// Resumes a paused webhook `id`; `not_found` when there is none.
    pub async fn owner_resume_webhook(&self, owner: &Owner<'_>, id: i64) -> Result<()> {
        let found = self.store.resume_webhook(id).await?;
        let (action, target) = ("webhook.resume", format!("webhook #{id}"));
        self.log_if_found(owner, found, format!("no webhook {id}"), action, target)
            .await
    }

    /// Adds an inbound URL (see [`add_inbound`]); its secret is in the
    /// answer, this once.
    pub async fn owner_add_inbound(
        &self,
        owner: &Owner<'_>,
        room: &str,
        agent: &str,
    ) -> Result<Inbound> {
        let now = self.clock.now_ms();
        let i = add_inbound(self.store.as_ref(), room, agent, now).await?;
        let target = format!("inbound URL for agent {} in room {}", i.agent, i.room);
        self.log_owner(owner.into(), "inbound.add", target, false)
            .await;
        Ok(i)
    }

    /// Removes the inbound URL `key`; `not_found` when there is none.
    pub async fn owner_remove_inbound(&self, owner: &Owner<'_>, key: &str) -> Result<()> {
        let found = self.store.delete_inbound(key).await?;
        let (action, target) = ("inbound.remove", format!("inbound URL {key}"));
        self.log_if_found(owner, found, "no such inbound URL".into(), action, target)
            .await
    }

    /// An owner's change the store made (`found`) goes to the admin log as
    /// `action` on `target`; one it found nothing for is `not_found`
    /// (`missing`).
    async fn log_if_found(
        &self,
        owner: &Owner<'_>,
        found: bool,
        missing: String,
        action: &str,
        target: String,
    ) -> Result<()> {
        if !found {
            return Err(Error::not_found(missing));
        }
        self.log_owner(owner.into(), action, target, false).await;
        Ok(())
    }
}

/// A webhook's URL as shown: its origin only (Discord's and Slack's paths
/// hold their token).
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.path().len() > 1 || u.query().is_some() => {
            format!("{}/…", u.origin().ascii_serialization())
        }
        Ok(u) => u.origin().ascii_serialization(),
        Err(_) => "(bad URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// GitHub's documented test vector for `X-Hub-Signature-256`.
    #[test]
    fn github_test_vector() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(github_ok(
            "It's a Secret to Everybody",
            sig,
            b"Hello, World!"
        ));
        assert!(!github_ok(
            "It's a Secret to Everybody",
            sig,
            b"Hello, World?"
        ));
        assert!(!github_ok("another secret", sig, b"Hello, World!"));
    }

    /// The back-off doubles from 5 s and stops at an hour.
    #[test]
    fn backoff_grows_to_an_hour() {
        assert_eq!(backoff_ms(1), 5_000);
        assert_eq!(backoff_ms(2), 10_000);
        assert_eq!(backoff_ms(5), 80_000);
        assert_eq!(backoff_ms(11), BACKOFF_MAX_MS);
        assert_eq!(backoff_ms(60), BACKOFF_MAX_MS);
    }

    /// The default set takes mentions but not plain chat.
    #[test]
    fn default_events_take_mentions_not_chatter() {
        let kinds = parse_events("").unwrap();
        let mut e = Event {
            id: 1,
            room: "r".into(),
            ts: 0,
            kind: "message".into(),
            actor: "a".into(),
            task_id: None,
            message_id: Some(1),
            detail: json!({"body": "hi", "mentions": []}),
        };
        assert!(!wants(&kinds, &e));
        e.detail["mentions"] = json!(["bob"]);
        assert!(wants(&kinds, &e));
        assert!(parse_events("nonsense").is_err());
        assert_eq!(parse_events("ALL").unwrap(), vec!["all"]);
    }

    /// The own listening address is refused, other loopback ports are not.
    #[test]
    fn own_address_is_refused() {
        let listen: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(is_own_address("127.0.0.1:8080".parse().unwrap(), listen));
        assert!(is_own_address("192.168.1.5:8080".parse().unwrap(), listen));
        assert!(!is_own_address("127.0.0.1:8123".parse().unwrap(), listen));
    }
}
