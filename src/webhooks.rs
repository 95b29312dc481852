//! Webhooks out (SPEC §7a): the delivery worker, a consumer of the event
//! bus beside the MQTT bridge.
//!
//! The queue is in the database: a webhook's queue is its room's events
//! after its cursor, and its row holds the retry state of the event at the
//! head. So delivery survives a restart, is in order per webhook (the next
//! event waits until the one before it is delivered or given up), and is
//! at least once (the cursor moves only after the receiver said 2xx). A
//! worker leases the webhooks it works on (`WebhookStore::claim_webhooks`),
//! so on PostgreSQL one replica delivers each.
//!
//! Nothing here runs inside a request: a tool call commits its event and
//! returns; the bus only wakes this worker, which reads the events back.
//! Redirects are never followed, each attempt has [`ATTEMPT_TIMEOUT`], a
//! target resolving to the server's own address is refused, and neither
//! secrets nor target URLs (Discord's and Slack's carry their token) are
//! logged: a webhook is named by its id and host.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::broadcast::error::TryRecvError;
use tokio::task::JoinSet;

use crate::clock::now_ms;
use crate::domain::Core;
use crate::domain::model::{Event, EventFilter};
use crate::domain::store::webhooks::{Lease, Progress, Webhook};
use crate::domain::webhooks::{
    ATTEMPT_TIMEOUT, GIVE_UP_AFTER_MS, PAUSE_AFTER, backoff_ms, is_own_address, wants,
};
use crate::present::webhook::delivery;

/// How often the worker looks whether something fell due.
const TICK: Duration = Duration::from_millis(250);
/// Without any sign of work, a look at the database this often anyway (a
/// retry scheduled by another replica or before a restart, a webhook
/// resumed by the CLI).
const IDLE_LOOK: Duration = Duration::from_secs(30);
/// How long a lease lasts; a worker gives a webhook back well before.
const LEASE_MS: i64 = 60_000;
/// A lease's work stops after this long (the rest follows on the next).
const LEASE_WORK: Duration = Duration::from_secs(30);
/// Webhooks delivered to at once, at most: deliveries take a bounded share
/// of the server (a backlog waits in the database instead).
const IN_FLIGHT: usize = 8;
/// Events read per look.
const PAGE: i64 = 100;

/// Runs until `core.shutdown`: delivers to every webhook whose room has
/// events past its cursor. `listen` is the server's own address, which a
/// webhook may not point at.
pub async fn run(core: Core, listen: SocketAddr) {
    // Made when a webhook first has work: a server without webhooks never
    // loads the TLS trust store (its memory and code pages).
    let mut client: Option<reqwest::Client> = None;
    let owner = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
    let mut rx = core.bus.subscribe();
    let mut tick = tokio::time::interval(TICK);
    let mut inflight: JoinSet<Option<i64>> = JoinSet::new();
    // Work may be waiting from before a restart.
    let mut dirty = true;
    let mut next_due: Option<i64> = None;
    let mut last_look: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = core.shutdown.cancelled() => break,
            r = rx.recv() => match r {
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                _ => dirty = true,
            },
            Some(done) = inflight.join_next(), if !inflight.is_empty() => {
                if let Ok(Some(due)) = done {
                    next_due = Some(next_due.map_or(due, |d| d.min(due)));
                }
                // What came in meanwhile is worked on now.
                dirty = true;
            }
            _ = tick.tick() => {}
        }
        while let Ok(_) | Err(TryRecvError::Lagged(_)) = rx.try_recv() {
            dirty = true;
        }
        let now = core.clock.now_ms();
        let due = next_due.is_some_and(|d| d <= now);
        let idle = last_look.is_none_or(|t| t.elapsed() >= IDLE_LOOK);
        if idle {
            // Retries this worker did not schedule: when the first falls due.
            last_look = Some(tokio::time::Instant::now());
            if let Some(first) = pending_retry(&core).await {
                next_due = Some(next_due.map_or(first, |d| d.min(first)));
            }
        }
        if !(dirty || due || idle) {
            continue;
        }
        let room = IN_FLIGHT.saturating_sub(inflight.len()) as i64;
        if room == 0 {
            continue;
        }
        dirty = false;
        if due {
            next_due = None;
        }
        let lease = Lease {
            owner: &owner,
            now,
            until: now + LEASE_MS,
        };
        match core.store.claim_webhooks(lease, room).await {
            Ok(hooks) => {
                if hooks.is_empty() {
                    continue;
                }
                let client = match &client {
                    Some(c) => c.clone(),
                    None => match http_client() {
                        Ok(c) => client.insert(c).clone(),
                        Err(e) => {
                            // The leases taken run out; another replica may deliver.
                            tracing::error!(error = %e, "cannot build the webhook HTTP client; webhooks are off");
                            return;
                        }
                    },
                };
                for hook in hooks {
                    let (core, client, owner) = (core.clone(), client.clone(), owner.clone());
                    inflight.spawn(async move { work(&core, &client, &owner, listen, hook).await });
                }
            }
            Err(e) => e.log_if_internal(),
        }
    }
    // Attempts in flight end with the process; their leases run out and
    // the next start (or another replica) delivers those events again.
    inflight.abort_all();
}

/// The client deliveries go out on: no redirects, each attempt bounded.
fn http_client() -> reqwest::Result<reqwest::Client> {
    crate::tls::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT)
        .user_agent(concat!("chatroom-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// When the earliest retry of an active webhook falls due, if one waits.
async fn pending_retry(core: &Core) -> Option<i64> {
    match core.store.list_webhooks().await {
        Ok(hooks) => hooks
            .iter()
            .filter(|h| !h.delivery.paused && h.delivery.next_ts > 0)
            .map(|h| h.delivery.next_ts)
            .min(),
        Err(e) => {
            e.log_if_internal();
            None
        }
    }
}

/// Delivers `hook`'s due events in order until one fails, the queue is
/// empty or the lease's time is up, then writes the state back. Returns
/// when a retry falls due, if one was scheduled.
async fn work(
    core: &Core,
    client: &reqwest::Client,
    owner: &str,
    listen: SocketAddr,
    hook: Webhook,
) -> Option<i64> {
    let started = tokio::time::Instant::now();
    // The lease carries on from the event the webhook is at and its
    // failures so far; the rest is what this lease does.
    let d = &hook.delivery;
    let mut p = Progress {
        cursor: d.cursor,
        attempts: d.attempts,
        first_fail_ts: d.first_fail_ts,
        failures: d.failures,
        ..Progress::default()
    };
    let host = url::Url::parse(&hook.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    'queue: loop {
        let filter = EventFilter::after(p.cursor, PAGE);
        let events = match core.store.read_events(&hook.room, &filter).await {
            Ok(e) => e,
            Err(e) => {
                e.log_if_internal();
                break;
            }
        };
        if events.is_empty() {
            break;
        }
        for e in events {
            if !wants(&hook.events, &e) {
                p.cursor = e.id;
                continue;
            }
            // Retries count from when the attempt began.
            let now = core.clock.now_ms();
            let outcome = attempt(client, &hook, &e, listen).await;
            p.last_ts = Some(now);
            match outcome {
                Ok(status) => {
                    p.cursor = e.id;
                    p.attempts = 0;
                    p.first_fail_ts = None;
                    p.failures = 0;
                    p.delivered += 1;
                    p.last_status = Some(status);
                }
                Err(why) => {
                    p.attempts += 1;
                    p.failures += 1;
                    let first = *p.first_fail_ts.get_or_insert(now);
                    p.next_ts = now + backoff_ms(p.attempts);
                    if now - first >= GIVE_UP_AFTER_MS {
                        tracing::warn!(webhook = hook.id, %host, event = e.id, attempts = p.attempts,
                            "a webhook event failed for 24 hours; given up, the next one follows");
                        p.cursor = e.id;
                        p.attempts = 0;
                        p.first_fail_ts = None;
                    }
                    if p.failures >= PAUSE_AFTER {
                        p.paused = true;
                        tracing::warn!(webhook = hook.id, %host, failures = p.failures,
                            "a webhook failed {PAUSE_AFTER} times in a row and is paused \
                             (chatroom admin resume-webhook ID)");
                    } else {
                        tracing::info!(webhook = hook.id, %host, event = e.id, attempt = p.attempts,
                            outcome = %why, retry_in_ms = p.next_ts - now, "webhook delivery failed");
                    }
                    p.last_status = Some(why);
                    break 'queue;
                }
            }
            if core.shutdown.is_cancelled() || started.elapsed() > LEASE_WORK {
                break 'queue;
            }
        }
    }
    let retry = (!p.paused && p.next_ts > 0).then_some(p.next_ts);
    match core.store.save_webhook(hook.id, owner, &p).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(
                webhook = hook.id,
                "webhook lease lost or webhook removed meanwhile"
            )
        }
        Err(e) => e.log_if_internal(),
    }
    retry
}

/// One attempt: `Ok` with the status on a 2xx answer, else what went wrong.
async fn attempt(
    client: &reqwest::Client,
    hook: &Webhook,
    e: &Event,
    listen: SocketAddr,
) -> Result<String, String> {
    let url = url::Url::parse(&hook.url).map_err(|_| "bad URL".to_owned())?;
    own_address_check(&url, listen).await?;
    let d = delivery(hook, e, now_ms() / 1000);
    let mut req = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, d.content_type);
    for (k, v) in &d.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    match req.body(d.body).send().await {
        Ok(r) if r.status().is_success() => Ok(r.status().as_u16().to_string()),
        Ok(r) if r.status().is_redirection() => Err(format!(
            "{} (redirects are not followed)",
            r.status().as_u16()
        )),
        Ok(r) => Err(r.status().as_u16().to_string()),
        Err(err) if err.is_timeout() => Err("timeout".into()),
        Err(err) if err.is_connect() => Err("unreachable".into()),
        Err(_) => Err("failed".into()),
    }
}

/// Refuses a target that resolves to the server's own listening address.
async fn own_address_check(url: &url::Url, listen: SocketAddr) -> Result<(), String> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| "unresolved".to_owned())?;
    for a in addrs {
        if is_own_address(a, listen) {
            return Err("refused: the server's own address".into());
        }
    }
    Ok(())
}
