//! `chatroom admin add-webhook / webhooks / remove-webhook / resume-webhook`
//! and `add-inbound / inbound / remove-inbound` (SPEC §7a): webhooks out
//! and inbound URLs, written straight to the database like the rest of
//! `admin`. A running server's worker picks a new webhook up on its next
//! look; secrets are printed once, here, and never again.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::print_listing;
use crate::clock::fmt_ts;
use crate::domain::webhooks;
use crate::domain::{Core, Owner};
use crate::present;

#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Send a room's events to a URL: signed as Standard Webhooks
    /// (`standard`, its secret printed once) or in the shape of ntfy,
    /// Discord, Slack or Home Assistant.
    AddWebhook {
        #[arg(long)]
        room: String,
        /// Where to POST (http or https; a LAN address is fine).
        #[arg(long)]
        url: String,
        /// Comma-separated kinds (`mention` for messages that mention
        /// someone), or `all` [default: mentions, new and finished tasks,
        /// reviews, stuck tasks].
        #[arg(long, default_value = "")]
        events: String,
        /// standard, ntfy, discord, slack or homeassistant.
        #[arg(long, default_value = "standard")]
        format: String,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// List the webhooks with their last delivery, status and failures.
    Webhooks {
        #[arg(long)]
        json: bool,
    },
    /// Remove a webhook.
    RemoveWebhook { id: i64 },
    /// Start delivering to a paused webhook again.
    ResumeWebhook { id: i64 },
    /// Make a URL an automation (CI, a backup script, GitHub) can POST to,
    /// posting as AGENT in ROOM; its secret is printed once.
    AddInbound {
        #[arg(long)]
        room: String,
        #[arg(long)]
        agent: String,
        #[arg(long)]
        json: bool,
    },
    /// List the inbound URLs.
    Inbound {
        #[arg(long)]
        json: bool,
    },
    /// Remove an inbound URL (by its key, the `in_…` part of it).
    RemoveInbound { key: String },
}

/// Where the server is reached, to print whole inbound URLs.
fn base_url() -> Option<String> {
    ["CHATROOM_PUBLIC_URL", "CHATROOM_LAN_URL"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .map(|v| v.trim().trim_end_matches('/').to_owned())
        .find(|v| !v.is_empty())
}

pub async fn execute(
    core: &Core,
    owner: &Owner<'_>,
    command: WebhookCommand,
) -> anyhow::Result<ExitCode> {
    let store = core.store.as_ref();
    match command {
        WebhookCommand::AddWebhook {
            room,
            url,
            events,
            format,
            json,
        } => {
            let hook = core
                .owner_add_webhook(owner, &room, &url, &format, &events)
                .await?;
            if json {
                println!(
                    "{}",
                    json!({"id": hook.id, "room": hook.room, "format": hook.format,
                           "events": hook.events, "secret": hook.secret})
                );
            } else {
                println!("webhook {} added on room {}", hook.id, hook.room);
                if let Some(secret) = &hook.secret {
                    eprintln!("its signing secret (shown once; give it to the receiver now):");
                    println!("{secret}");
                }
            }
        }
        WebhookCommand::Webhooks { json } => {
            let list = store.list_webhooks().await?;
            let rows: Vec<_> = list.iter().map(present::webhook::listed).collect();
            let none = "no webhooks yet: chatroom admin add-webhook --room ROOM --url URL";
            print_listing(json, &rows, none, || {
                println!(
                    "{:>4} {:<16} {:<14} {:<8} {:>9} {:>8} {:<24} URL",
                    "ID", "ROOM", "FORMAT", "STATUS", "DELIVERED", "FAILURES", "LAST"
                );
                for h in &list {
                    let d = &h.delivery;
                    let last = match (&d.last_ts, &d.last_status) {
                        (Some(ts), Some(s)) => format!("{} {s}", &fmt_ts(*ts)[..19]),
                        _ => "never".into(),
                    };
                    println!(
                        "{:>4} {:<16} {:<14} {:<8} {:>9} {:>8} {:<24} {}",
                        h.id,
                        h.room,
                        h.format,
                        if d.paused { "paused" } else { "active" },
                        d.delivered,
                        d.failures,
                        last,
                        webhooks::shown_url(&h.url)
                    );
                }
            })?;
        }
        WebhookCommand::RemoveWebhook { id } => {
            core.owner_remove_webhook(owner, id).await?;
            println!("webhook {id} removed");
        }
        WebhookCommand::ResumeWebhook { id } => {
            core.owner_resume_webhook(owner, id).await?;
            println!("webhook {id} resumed");
        }
        WebhookCommand::AddInbound { room, agent, json } => {
            let i = core.owner_add_inbound(owner, &room, &agent).await?;
            let path = webhooks::inbound_path(&i.key);
            let url = base_url().map(|b| format!("{b}{path}"));
            if json {
                println!(
                    "{}",
                    json!({"key": i.key, "room": i.room, "agent": i.agent, "path": path,
                           "url": url, "secret": i.secret})
                );
            } else {
                println!(
                    "url: {}",
                    url.unwrap_or_else(|| format!("http://HOST:PORT{path}"))
                );
                eprintln!(
                    "its secret (shown once): send it as Authorization: Bearer, or sign with it"
                );
                println!("secret: {}", i.secret);
            }
        }
        WebhookCommand::Inbound { json } => {
            let list = store.list_inbound().await?;
            let none = "no inbound URLs yet: chatroom admin add-inbound --room ROOM --agent NAME";
            print_listing(json, &list, none, || {
                println!("{:<28} {:<16} {:<16} LAST USED", "KEY", "ROOM", "AGENT");
                for i in &list {
                    println!(
                        "{:<28} {:<16} {:<16} {}",
                        i.key,
                        i.room,
                        i.agent,
                        i.last_used_ts.map(fmt_ts).unwrap_or_else(|| "never".into())
                    );
                }
            })?;
        }
        WebhookCommand::RemoveInbound { key } => {
            core.owner_remove_inbound(owner, &key).await?;
            println!("inbound URL {key} removed");
        }
    }
    Ok(ExitCode::SUCCESS)
}
