//! A webhook delivery's request, in each of the webhook formats: the
//! Standard Webhooks envelope (signed) and the presets for ntfy, Discord,
//! Slack and Home Assistant, each saying what happened in one line.

use serde_json::{Value, json};

use crate::domain::model::Event;
use crate::domain::store::webhooks::Webhook;
use crate::domain::webhooks::{message_id, shown_url, sign};

/// One attempt's request: headers and body, in the webhook's format.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub headers: Vec<(String, String)>,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// A webhook as listed (the console's state, `chatroom admin webhooks
/// --json`): its record, with the URL shown by its origin only.
pub fn listed(hook: &Webhook) -> Value {
    let mut v = json!(hook);
    v["url"] = json!(shown_url(&hook.url));
    v
}

/// One line saying what `e` was, for the presets: `[room] actor: what`.
pub fn summary(e: &Event) -> String {
    let what = super::digest::what(e, "");
    let line = format!("[{}] {}: {}", e.room, e.actor, what);
    line.chars()
        .filter(|c| !c.is_control())
        .take(1800)
        .collect()
}

/// The request delivering `e` to `hook`. `timestamp` (seconds) and the
/// message id sign a `standard` delivery; the id stays the same across
/// retries, so a receiver can drop a repeat.
pub fn delivery(hook: &Webhook, e: &Event, timestamp: i64) -> Delivery {
    let event = super::event(e);
    let text = summary(e);
    let title = format!("chatroom: {} in {}", e.kind, e.room);
    let json_body = |v: Value| v.to_string().into_bytes();
    match hook.format.as_str() {
        "ntfy" => Delivery {
            headers: vec![
                ("Title".into(), ascii(&title)),
                ("Tags".into(), "speech_balloon".into()),
            ],
            content_type: "text/plain; charset=utf-8",
            body: text.into_bytes(),
        },
        "discord" => Delivery {
            headers: Vec::new(),
            content_type: "application/json",
            body: json_body(json!({
                "content": text,
                "username": "chatroom",
                "allowed_mentions": {"parse": []},
            })),
        },
        "slack" => Delivery {
            headers: Vec::new(),
            content_type: "application/json",
            body: json_body(json!({ "text": text })),
        },
        "homeassistant" => Delivery {
            headers: Vec::new(),
            content_type: "application/json",
            body: json_body(json!({
                "title": title,
                "message": text,
                "event": event,
            })),
        },
        _ => {
            let id = message_id(hook, e);
            let body = json_body(event);
            let mut headers = vec![
                ("webhook-id".into(), id.clone()),
                ("webhook-timestamp".into(), timestamp.to_string()),
            ];
            if let Some(secret) = &hook.secret {
                headers.push((
                    "webhook-signature".into(),
                    sign(secret, &id, timestamp, &body),
                ));
            }
            Delivery {
                headers,
                content_type: "application/json",
                body,
            }
        }
    }
}

/// A header value keeps to printable ASCII.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}
