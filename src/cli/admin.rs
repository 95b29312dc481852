//! `chatroom admin …`: rooms and tokens, written straight to the database.
//! A running server sees the change on its next request (tokens are looked
//! up on every call, so a revocation takes effect at once).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::clock::{fmt_ts, now_ms};
use crate::db;
use crate::domain::model::RoomInfo;
use crate::domain::store::Store;
use crate::domain::{limits, oauth, rooms, tokens};

#[derive(Args)]
pub struct AdminArgs {
    // Both read from the environment by hand, not with clap's `env`: clap
    // then shows them in every usage line as if they were required whenever
    // the variable is set (the image sets CHATROOM_DB), even to nothing.
    /// SQLite database file [default: CHATROOM_DB, else chatroom.db].
    #[arg(long, global = true)]
    db: Option<String>,
    /// PostgreSQL URL; when set, used instead of --db [default: CHATROOM_DATABASE_URL].
    #[arg(long, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create the database (and migrate it) if needed.
    Init,
    #[command(flatten)]
    Webhooks(super::admin_webhooks::WebhookCommand),
    /// Create a room.
    AddRoom {
        /// Room name: 1-64 chars of A-Z a-z 0-9 - _ . (kept as written)
        name: String,
        #[arg(long)]
        description: Option<String>,
        #[arg(long)]
        repo_url: Option<String>,
        #[arg(long)]
        onboarding_notes: Option<String>,
    },
    /// List rooms with their counts.
    ListRooms {
        #[arg(long)]
        json: bool,
    },
    /// Show a room's info, or change it when fields are given.
    RoomInfo {
        #[arg(long)]
        room: String,
        #[arg(long)]
        description: Option<String>,
        #[arg(long)]
        repo_url: Option<String>,
        #[arg(long)]
        onboarding_notes: Option<String>,
    },
    /// Mint a token for an agent; it is printed once, on a line of its own.
    AddToken {
        /// The agent's name (its identity in every room).
        #[arg(long)]
        agent: String,
        /// The token's default room (created when it does not exist yet).
        #[arg(long)]
        room: String,
        /// Another room this token may use (repeatable).
        #[arg(long = "also-room")]
        also_rooms: Vec<String>,
        /// Observer: read tools only.
        #[arg(long)]
        readonly: bool,
        /// Room admin: retention, room deletion, any file.
        #[arg(long)]
        admin: bool,
        /// Every room on the server.
        #[arg(long)]
        all_rooms: bool,
        /// Leader: reviews, cancels, assigns.
        #[arg(long)]
        lead: bool,
        /// A skill the agent has (repeatable).
        #[arg(long = "skill")]
        skills: Vec<String>,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Mint a one-time connect code for an app that signs in with OAuth
    /// (claude.ai, Claude Desktop and mobile, ChatGPT, Claude Code): the app
    /// becomes this agent once its user enters the code on the sign-in page.
    Connect {
        /// The agent's name (its identity in every room).
        #[arg(long)]
        agent: String,
        /// The default room (must exist).
        #[arg(long)]
        room: String,
        /// Another room the app may use (repeatable).
        #[arg(long = "also-room")]
        also_rooms: Vec<String>,
        /// Observer: read tools only.
        #[arg(long)]
        readonly: bool,
        /// Room admin: retention, room deletion, any file.
        #[arg(long)]
        admin: bool,
        /// Every room on the server.
        #[arg(long)]
        all_rooms: bool,
        /// Leader: reviews, cancels, assigns.
        #[arg(long)]
        lead: bool,
        /// A skill the agent has (repeatable).
        #[arg(long = "skill")]
        skills: Vec<String>,
        /// How long the code stays valid, in minutes.
        #[arg(long, default_value_t = 15)]
        ttl_minutes: i64,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// List tokens and OAuth grants (never the raw values, which are not stored).
    ListTokens {
        #[arg(long)]
        json: bool,
    },
    /// Revoke every token of an agent (--agent), or one token (--token).
    Revoke {
        /// Every token of this agent, its OAuth apps included.
        #[arg(long, required_unless_present = "token", conflicts_with = "token")]
        agent: Option<String>,
        /// One token, by the ID `list-tokens` shows (7, or g7 for an OAuth
        /// app); the agent's other tokens keep working.
        #[arg(long)]
        token: Option<tokens::TokenRef>,
    },
    /// Delete tokens revoked more than N days ago.
    PurgeTokens {
        #[arg(long)]
        older_than_days: i64,
        /// Confirm.
        #[arg(long)]
        yes: bool,
    },
    /// Keep a room's chat, events and files N days (0 = keep); prunes at once.
    SetRetention {
        #[arg(long)]
        room: String,
        #[arg(long)]
        days: i64,
    },
    /// Delete a room with everything in it (audit rows stay).
    DeleteRoom {
        #[arg(long)]
        room: String,
        /// Confirm.
        #[arg(long)]
        yes: bool,
    },
    /// Print a room's chat, tasks with notes, and files list (to keep or to read).
    Export {
        #[arg(long)]
        room: String,
        #[arg(long, value_enum, default_value_t)]
        format: super::export::ExportFormat,
    },
    /// Write a consistent copy of the SQLite database to PATH, also while `serve` runs.
    Backup {
        /// A new file (never overwritten), e.g. /data/backup-2026-11-29.db.
        path: std::path::PathBuf,
    },
    /// Copy a whole instance, ids kept, into another, empty database (e.g.
    /// `--from sqlite://chatroom.db --to postgres://…`); stop its servers first.
    Copy {
        /// The database to copy: sqlite://PATH or postgres://…
        #[arg(long)]
        from: String,
        /// The empty database to fill: sqlite://PATH or postgres://…
        #[arg(long)]
        to: String,
    },
    /// Bring a ChatRoomMCP instance over from its SQLite file: rooms, tokens
    /// (they keep working), board, chat, files, events and cursors. Stop the
    /// old server first; the file itself is only read.
    #[command(name = "import-chatroommcp")]
    ImportChatroommcp {
        /// The ChatRoomMCP database file (its CHATROOM_DB, e.g. data/chatroom.db).
        path: std::path::PathBuf,
        /// The database to import into: sqlite://PATH or postgres://… (default:
        /// the configured one, --db / CHATROOM_DATABASE_URL).
        #[arg(long)]
        to: Option<String>,
    },
}

pub async fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    let (url, from) = database(&args);
    // Refuse before touching the database where a confirmation is missing.
    match &args.command {
        AdminCommand::DeleteRoom { yes: false, room } => {
            anyhow::bail!(
                "deleting room {room:?} removes its tasks, chat, files and events: add --yes to confirm"
            )
        }
        AdminCommand::PurgeTokens { yes: false, .. } => {
            anyhow::bail!("purging deletes revoked tokens for good: add --yes to confirm")
        }
        AdminCommand::Backup { path } => super::export::refuse_existing(path)?,
        _ => {}
    }
    // Reading commands never create an empty database by mistake.
    if let (AdminCommand::Backup { .. } | AdminCommand::Export { .. }, Some(file)) =
        (&args.command, url.strip_prefix("sqlite://"))
        && !std::path::Path::new(file).exists()
    {
        anyhow::bail!(
            "no database at {file} (set CHATROOM_DB or --db to the server's database file)"
        );
    }
    if let AdminCommand::Copy { from, to } = &args.command {
        return super::copy::run(from, to).await;
    }
    if let AdminCommand::ImportChatroommcp { path, to } = &args.command {
        let to = to.as_deref().map(super::copy::url).unwrap_or(url);
        return super::import::run(path, &to).await;
    }
    // Which database, said on stderr (stdout stays the command's own), so
    // a command run in the wrong folder does not pass unnoticed.
    let (shown, existed) = match url.strip_prefix("sqlite://") {
        Some(file) => {
            let path = std::path::Path::new(file);
            super::doctor::sqlite_folder_writable(path).map_err(anyhow::Error::msg)?;
            (
                format!(
                    "{} ({from})",
                    std::path::absolute(path)
                        .unwrap_or_else(|_| path.to_owned())
                        .display()
                ),
                path.exists(),
            )
        }
        None => {
            super::doctor::postgres_reachable(&url)
                .await
                .map_err(anyhow::Error::msg)?;
            (
                format!("{} ({from})", crate::config::redact_url(&url)),
                true,
            )
        }
    };
    let store = db::open(&url)
        .await
        .map_err(|e| anyhow::anyhow!("{e:#} [database {shown}]"))?;
    match execute(store, args.command).await {
        Ok(code) => {
            eprintln!(
                "chatroom: database {shown}{}",
                if existed { "" } else { ", created now" }
            );
            Ok(code)
        }
        Err(e) => Err(anyhow::anyhow!("{e:#} [database {shown}]")),
    }
}

/// The database to use, and where the choice came from, as said on
/// stderr: a flag (`--database-url`, `--db`), a variable (with its `.env`
/// line when the file set it), or the default file.
fn database(args: &AdminArgs) -> (String, String) {
    let given = |flag: &Option<String>, flag_name: &str, var: &str| {
        let set = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        if let Some(v) = flag.as_deref().and_then(set) {
            return Some((v, flag_name.to_owned()));
        }
        let v = std::env::var(var).ok().as_deref().and_then(set)?;
        let from = match crate::config::source_of(var) {
            crate::config::Source::File { file, line } => format!("{var}, {file} line {line}"),
            _ => var.to_owned(),
        };
        Some((v, from))
    };
    if let Some(found) = given(
        &args.database_url,
        "--database-url",
        "CHATROOM_DATABASE_URL",
    ) {
        return found;
    }
    let (file, from) = given(&args.db, "--db", "CHATROOM_DB")
        .unwrap_or_else(|| ("chatroom.db".into(), "CHATROOM_DB".into()));
    (format!("sqlite://{file}"), from)
}

async fn execute(store: Arc<dyn Store>, command: AdminCommand) -> anyhow::Result<ExitCode> {
    match command {
        AdminCommand::Webhooks(c) => {
            return super::admin_webhooks::execute(store.as_ref(), c).await;
        }
        AdminCommand::Init => {
            store.health().await?;
            println!("database ready");
        }
        AdminCommand::AddRoom {
            name,
            description,
            repo_url,
            onboarding_notes,
        } => {
            let info = RoomInfo {
                description,
                repo_url,
                onboarding_notes,
            };
            rooms::create(store.as_ref(), &name, info).await?;
            println!("room {name} created");
        }
        AdminCommand::ListRooms { json } => {
            let list = store.list_rooms(now_ms()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no rooms yet: chatroom admin add-room NAME");
            } else {
                println!(
                    "{:<24} {:>6} {:>9} {:>6} {:>9}",
                    "ROOM", "OPEN", "MESSAGES", "FILES", "RETENTION"
                );
                for r in list {
                    let keep = if r.room.retention_days == 0 {
                        "keep".to_owned()
                    } else {
                        format!("{}d", r.room.retention_days)
                    };
                    println!(
                        "{:<24} {:>6} {:>9} {:>6} {:>9}",
                        r.room.name, r.open_tasks, r.messages, r.files, keep
                    );
                }
            }
        }
        AdminCommand::RoomInfo {
            room,
            description,
            repo_url,
            onboarding_notes,
        } => {
            crate::domain::names::check_room(&room)?;
            let info = RoomInfo {
                description,
                repo_url,
                onboarding_notes,
            };
            let current = if info.description.is_none()
                && info.repo_url.is_none()
                && info.onboarding_notes.is_none()
            {
                store.get_room(&room).await?
            } else {
                rooms::check_info(&info)?;
                store
                    .update_room_info(
                        &room,
                        &info,
                        rooms::info_changed(&info, rooms::by_admin(now_ms())),
                    )
                    .await?
                    .map(|(r, _)| r)
            };
            let Some(r) = current else {
                anyhow::bail!("room {room:?} does not exist");
            };
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
        AdminCommand::AddToken {
            agent,
            room,
            also_rooms,
            readonly,
            admin,
            all_rooms,
            lead,
            skills,
            json,
        } => {
            // The whole grant is checked before a missing room is created.
            crate::domain::names::check_agent(&agent)?;
            for skill in &skills {
                limits::non_empty("skill", skill)?;
                limits::check("skill", skill, limits::SKILL)?;
            }
            create_missing_rooms(store.as_ref(), std::iter::once(&room).chain(&also_rooms)).await?;
            let grant = tokens::Grant {
                agent,
                room,
                also_rooms,
                readonly,
                admin,
                all_rooms,
                lead,
                skills,
            };
            let (secret, record) = tokens::mint(store.as_ref(), grant).await?;
            if json {
                let mut v = json!(record);
                v["token"] = json!(secret.expose());
                println!("{v}");
            } else {
                eprintln!(
                    "token for agent {} in room {} (shown once; store it now):",
                    record.agent, record.room
                );
                println!("{}", secret.expose());
            }
        }
        AdminCommand::Connect {
            agent,
            room,
            also_rooms,
            readonly,
            admin,
            all_rooms,
            lead,
            skills,
            ttl_minutes,
            json,
        } => {
            let grant = tokens::Grant {
                agent,
                room,
                also_rooms,
                readonly,
                admin,
                all_rooms,
                lead,
                skills,
            };
            let (code, info) = oauth::mint_connect_code(store.as_ref(), grant, ttl_minutes).await?;
            if json {
                let mut v = json!(info);
                v["code"] = json!(code.expose());
                v["ttl_minutes"] = json!(ttl_minutes);
                println!("{v}");
            } else {
                eprintln!(
                    "connect code for agent {} in room {} (one use, valid {ttl_minutes} min): \
                     add the server's /mcp URL to the app as a custom connector, and enter \
                     this code on the sign-in page it opens:",
                    info.agent, info.room
                );
                println!("{}", code.expose());
            }
        }
        AdminCommand::ListTokens { json } => {
            let list = store.list_tokens().await?;
            let grants = store.oauth_list_grants().await?;
            if json {
                let mut all: Vec<serde_json::Value> = list.iter().map(|t| json!(t)).collect();
                for g in &grants {
                    let mut v = json!(g);
                    v["kind"] = json!("oauth");
                    all.push(v);
                }
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                // Each token's own last use (to the minute), not its agent's:
                // of an agent's several tokens, a forgotten or leaked one
                // shows up as never used, or used when its owner was not.
                println!(
                    "{:<5} {:<20} {:<20} {:<28} {:<24} STATE",
                    "ID", "AGENT", "ROOM", "FLAGS", "LAST USED"
                );
                for t in list {
                    let mut flags = Vec::new();
                    for (on, name) in [
                        (t.readonly, "readonly"),
                        (t.admin, "admin"),
                        (t.all_rooms, "all_rooms"),
                        (t.lead, "lead"),
                    ] {
                        if on {
                            flags.push(name);
                        }
                    }
                    let state = match t.revoked_ts {
                        Some(ts) => format!("revoked {}", fmt_ts(ts)),
                        None => "active".into(),
                    };
                    let mut room = t.room.clone();
                    if !t.also_rooms.is_empty() {
                        room = format!("{room} +{}", t.also_rooms.len());
                    }
                    println!(
                        "{:<5} {:<20} {:<20} {:<28} {:<24} {state}",
                        t.id,
                        t.agent,
                        room,
                        flags.join(","),
                        t.last_used.map(fmt_ts).unwrap_or_else(|| "never".into()),
                    );
                }
                for g in grants {
                    let mut flags = Vec::new();
                    for (on, name) in [
                        (g.readonly, "readonly"),
                        (g.admin, "admin"),
                        (g.all_rooms, "all_rooms"),
                        (g.lead, "lead"),
                    ] {
                        if on {
                            flags.push(name);
                        }
                    }
                    let state = match g.revoked_ts {
                        Some(ts) => format!("revoked {}", fmt_ts(ts)),
                        None => "active".into(),
                    };
                    let mut room = g.room.clone();
                    if !g.also_rooms.is_empty() {
                        room = format!("{room} +{}", g.also_rooms.len());
                    }
                    println!(
                        "{:<5} {:<20} {:<20} {:<28} {:<24} {state}, OAuth app {:?}",
                        format!("g{}", g.id),
                        g.agent,
                        room,
                        flags.join(","),
                        "-",
                        g.client_name,
                    );
                }
            }
        }
        AdminCommand::Revoke {
            token: Some(which), ..
        } => {
            let agent = tokens::revoke_one(store.as_ref(), which).await?;
            let others = store
                .list_tokens()
                .await?
                .iter()
                .filter(|t| t.agent == agent && t.revoked_ts.is_none())
                .count();
            println!(
                "revoked token {which} of {agent} ({agent} keeps {others} other active token(s))"
            );
        }
        AdminCommand::Revoke { agent, .. } => {
            let agent = agent.unwrap_or_default();
            let n = tokens::revoke(store.as_ref(), &agent).await?;
            if n == 0 {
                eprintln!("agent {agent:?} has no active token");
                return Ok(ExitCode::FAILURE);
            }
            println!("revoked {n} token(s) of {agent}");
        }
        AdminCommand::PurgeTokens {
            older_than_days, ..
        } => {
            let n = tokens::purge(store.as_ref(), older_than_days).await?;
            println!("purged {n} revoked token(s)");
        }
        AdminCommand::SetRetention { room, days } => {
            crate::domain::names::check_room(&room)?;
            rooms::check_retention(days)?;
            let Some((_, pruned)) = store
                .set_retention(
                    &room,
                    days,
                    rooms::retention_set(days, rooms::by_admin(now_ms())),
                )
                .await?
            else {
                anyhow::bail!("room {room:?} does not exist");
            };
            println!(
                "room {room} keeps {}; pruned {} message(s), {} event(s), {} file(s)",
                if days == 0 {
                    "everything".to_owned()
                } else {
                    format!("{days} day(s)")
                },
                pruned.messages,
                pruned.events,
                pruned.files
            );
        }
        // `run` handles it before opening --db; here for completeness.
        AdminCommand::Copy { from, to } => return super::copy::run(&from, &to).await,
        // `run` handles it: the source is checked before any database opens.
        AdminCommand::ImportChatroommcp { .. } => {
            anyhow::bail!("import-chatroommcp needs its destination URL (see `run`)")
        }
        AdminCommand::DeleteRoom { room, .. } => {
            crate::domain::names::check_room(&room)?;
            if !store.delete_room(&room).await? {
                anyhow::bail!("room {room:?} does not exist");
            }
            println!("room {room} deleted");
        }
        AdminCommand::Export { room, format } => {
            return super::export::export(store.as_ref(), &room, format).await;
        }
        AdminCommand::Backup { path } => return super::export::backup(store.as_ref(), &path).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates each named room that does not exist yet, saying so on stderr: a
/// token for a new room is how ChatRoomMCP users start one, and their
/// scripts do it that way. Every name is checked before any is created.
async fn create_missing_rooms(
    store: &dyn Store,
    names: impl Iterator<Item = &String>,
) -> anyhow::Result<()> {
    let names: Vec<&String> = names.collect();
    for name in &names {
        crate::domain::names::check_room(name)?;
    }
    for name in names {
        if store.get_room(name).await?.is_some() {
            continue;
        }
        match rooms::create(store, name, RoomInfo::default()).await {
            Ok(_) => eprintln!("room {name} did not exist: created it"),
            // Created meanwhile by someone else: it exists, which is all we need.
            Err(crate::error::Error::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
