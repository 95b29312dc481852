//! `chatroom bench --scenario webhooks` (SPEC §7a): how long an event
//! takes from `post_message` to a webhook receiver, and whether webhooks on
//! a room slow `post_message` down.
//!
//! Needs a whole-server admin token as the first `--token` and the console
//! API on (`CHATROOM_ADMIN_API=on`): the webhooks are added and removed
//! through `/v1/admin/webhooks`. The receiver runs in this process on
//! loopback, so the server must run on the same machine.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Agent, Load, Origin, Report, Sample, delivery_report, throughput};

/// Messages posted one after another to time delivery.
const LATENCY_POSTS: usize = 200;
/// Webhooks on the room for the second `post_message` run.
const MANY: usize = 100;

pub(super) async fn run(
    agents: &[Agent],
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Report> {
    let admin = &agents[0];
    let room = match &admin.room {
        Some(r) => r.clone(),
        None => admin
            .call("whoami", json!({}))
            .await
            .map_err(anyhow::Error::msg)?["room"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    // The receiver: records when each body arrived.
    let seen: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let app = axum::Router::new().fallback({
        let seen = seen.clone();
        move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let text = v["data"]["body"].as_str().unwrap_or_default().to_owned();
                seen.lock().unwrap().push((Instant::now(), text));
                axum::http::StatusCode::NO_CONTENT
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // 1. post_message with no webhook.
    let load = Load {
        agents,
        concurrency,
        duration,
        min_steps: 0,
    };
    let post = |a: Agent, i: u64| async move {
        a.call_ok(
            "post_message",
            json!({"body": format!("bench message {i}")}),
        )
        .await
    };
    let without = throughput("post_message", load, post).await;

    // 2. Delivery latency, one webhook, one post at a time.
    let mut ids = vec![add(admin, &room, &url).await?];
    let origin = Origin::now();
    let mut samples = Vec::with_capacity(LATENCY_POSTS);
    let mut errors = 0;
    for i in 0..LATENCY_POSTS {
        let body = format!("latency probe {i}");
        let sent = Instant::now();
        admin
            .call_ok("post_message", json!({"body": body}))
            .await
            .map_err(anyhow::Error::msg)?;
        let deadline = sent + Duration::from_secs(15);
        let arrived = loop {
            let at = seen
                .lock()
                .unwrap()
                .iter()
                .find(|(_, t)| *t == body)
                .map(|(at, _)| *at);
            if let Some(at) = at {
                break Some(at);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        match arrived {
            Some(at) => samples.push(Sample {
                sent_us: sent.duration_since(origin.at).as_micros() as u64,
                latency_us: at.duration_since(sent).as_micros() as u64,
            }),
            None => errors += 1,
        }
    }
    let mut r = delivery_report(
        "webhooks",
        1,
        origin,
        samples,
        errors,
        "post_message sent to the webhook receiver's arrival (one webhook, one post at a time)",
    );

    // 3. post_message with MANY webhooks on the room.
    for _ in 1..MANY {
        ids.push(add(admin, &room, &url).await?);
    }
    let before = seen.lock().unwrap().len();
    let with = throughput("post_message", load, post).await;
    let expected = with.calls as usize * MANY;
    // Let the deliveries of that run finish (at most a minute), to count them.
    let drained = Instant::now();
    while seen.lock().unwrap().len() - before < expected
        && drained.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered = seen.lock().unwrap().len() - before;
    for id in ids {
        let _ = admin
            .http
            .delete(format!("{}/v1/admin/webhooks/{id}", admin.base))
            .bearer_auth(&admin.token)
            .send()
            .await;
    }
    server.abort();
    let summary = |r: &Report| json!({"calls_per_s": r.calls_per_s, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "errors": r.errors});
    r.extra
        .insert("post_message_without_webhooks".into(), summary(&without));
    r.extra
        .insert(format!("post_message_with_{MANY}_webhooks"), summary(&with));
    r.extra.insert(
        "deliveries_after_the_run".into(),
        json!({"expected": expected, "delivered": delivered,
               "drain_s": drained.elapsed().as_secs_f64()}),
    );
    Ok(r)
}

/// Adds a webhook for every event of `room` through the console API.
async fn add(admin: &Agent, room: &str, url: &str) -> anyhow::Result<i64> {
    let r = admin
        .http
        .post(format!("{}/v1/admin/webhooks", admin.base))
        .bearer_auth(&admin.token)
        .json(&json!({"room": room, "url": url, "events": "message"}))
        .send()
        .await?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        anyhow::bail!(
            "adding a webhook failed ({status}: {v}); the webhooks scenario needs a whole-server \
             admin token as the first --token and CHATROOM_ADMIN_API=on"
        );
    }
    v["id"]
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("no webhook id in {v}"))
}
