//! `chatroom admin …`: rooms and tokens, written straight to the database.
//! A running server sees the change on its next request (tokens are looked
//! up on every call, so a revocation takes effect at once).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::clock::fmt_ts;
use crate::db;
use crate::domain::model::{Grant, GrantRecord, RoomInfo, RoomSummary, TokenRecord};
use crate::domain::store::prelude::*;
use crate::domain::{Core, Owner, rooms, tokens};

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
    /// Create a room.
    AddRoom {
        /// Room name: 1-64 chars of A-Z a-z 0-9 - _ . (kept as written)
        name: String,
        #[command(flatten)]
        info: RoomInfo,
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
        #[command(flatten)]
        info: RoomInfo,
    },
    /// Mint a token for an agent; it is printed once, on a line of its own.
    /// Its rooms are created when they do not exist yet.
    AddToken {
        #[command(flatten)]
        grant: Grant,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Mint a one-time connect code for an app that signs in with OAuth
    /// (claude.ai, Claude Desktop and mobile, ChatGPT, Claude Code): the app
    /// becomes this agent once its user enters the code on the sign-in page.
    /// Its rooms must exist.
    Connect {
        #[command(flatten)]
        grant: Grant,
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
    #[command(flatten)]
    Webhooks(super::admin_webhooks::WebhookCommand),
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
    let (file, from) = given(&args.db, "--db", "CHATROOM_DB").unwrap_or_else(|| {
        (
            "chatroom.db".into(),
            "the default; CHATROOM_DB is unset".into(),
        )
    });
    (format!("sqlite://{file}"), from)
}

async fn execute(store: Arc<dyn Store>, command: AdminCommand) -> anyhow::Result<ExitCode> {
    let core = Core::offline(store);
    let owner = Owner::cli();
    match command {
        AdminCommand::Webhooks(c) => {
            return super::admin_webhooks::execute(&core, &owner, c).await;
        }
        AdminCommand::Init => {
            core.store.health().await?;
            println!("database ready");
        }
        AdminCommand::AddRoom { name, info } => {
            core.owner_create_room(&owner, &name, info).await?;
            println!("room {name} created");
        }
        AdminCommand::ListRooms { json } => print_rooms(&core.list_rooms().await?, json)?,
        AdminCommand::RoomInfo { room, info } => {
            let r = if info.changed_fields().is_empty() {
                core.get_room_info(&owner, Some(&room)).await?
            } else {
                core.set_room_info(&owner, Some(&room), info).await?
            };
            println!("{}", serde_json::to_string_pretty(&r)?);
        }
        AdminCommand::AddToken { grant, json } => {
            // The whole grant is checked before a missing room is created.
            grant.check()?;
            for name in core
                .owner_create_missing_rooms(&owner, &grant.rooms())
                .await?
            {
                eprintln!("room {name} did not exist: created it");
            }
            let (secret, record) = core.owner_mint_token(&owner, grant).await?;
            if json {
                let mut v = json!(record);
                v["token"] = json!(secret.expose());
                println!("{v}");
            } else {
                eprintln!(
                    "token for agent {} in room {} (shown once; store it now):",
                    record.grant.agent, record.grant.room
                );
                println!("{}", secret.expose());
            }
        }
        AdminCommand::Connect {
            grant,
            ttl_minutes,
            json,
        } => {
            let (code, info) = core.owner_connect(&owner, grant, ttl_minutes).await?;
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
                    info.grant.agent, info.grant.room
                );
                println!("{}", code.expose());
            }
        }
        AdminCommand::ListTokens { json } => {
            let (tokens, grants) = core.list_tokens().await?;
            print_tokens(&tokens, &grants, json)?;
        }
        AdminCommand::Revoke {
            token: Some(which), ..
        } => {
            let (agent, others) = core.owner_revoke_token(&owner, which).await?;
            println!(
                "revoked token {which} of {agent} ({agent} keeps {others} other active token(s))"
            );
        }
        AdminCommand::Revoke { agent, .. } => {
            let agent = agent.unwrap_or_default();
            let n = core.owner_revoke_agent(&owner, &agent).await?;
            if n == 0 {
                eprintln!("agent {agent:?} has no active token");
                return Ok(ExitCode::FAILURE);
            }
            println!("revoked {n} token(s) of {agent}");
        }
        AdminCommand::PurgeTokens {
            older_than_days, ..
        } => {
            let n = core.owner_purge_tokens(&owner, older_than_days).await?;
            println!("purged {n} revoked token(s)");
        }
        AdminCommand::SetRetention { room, days } => {
            let (_, pruned) = core.set_retention(&owner, Some(&room), days).await?;
            println!(
                "room {room} keeps {}; pruned {} message(s), {} event(s), {} file(s)",
                rooms::keep(days),
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
            core.delete_room(&owner, &room).await?;
            println!("room {room} deleted");
        }
        AdminCommand::Export { room, format } => {
            return super::export::export(core.store.as_ref(), &room, format).await;
        }
        AdminCommand::Backup { path } => {
            return super::export::backup(core.store.as_ref(), &path).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `list-rooms`: a table, or JSON.
fn print_rooms(list: &[RoomSummary], json: bool) -> anyhow::Result<()> {
    let none = "no rooms yet: chatroom admin add-room NAME";
    super::print_listing(json, list, none, || {
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
    })
}

/// `list-tokens`: tokens and OAuth grants, as a table or JSON (never a
/// raw value, which is not stored).
fn print_tokens(list: &[TokenRecord], grants: &[GrantRecord], json: bool) -> anyhow::Result<()> {
    if json {
        let mut all: Vec<serde_json::Value> = list.iter().map(|t| json!(t)).collect();
        for g in grants {
            let mut v = json!(g);
            v["kind"] = json!("oauth");
            all.push(v);
        }
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    // Each token's own last use (to the minute), not its agent's: of an
    // agent's several tokens, a forgotten or leaked one shows up as never
    // used, or used when its owner was not.
    println!(
        "{:<5} {:<20} {:<20} {:<28} {:<24} STATE",
        "ID", "AGENT", "ROOM", "FLAGS", "LAST USED"
    );
    let row = |id: String, grant: &Grant, last_used: String, revoked_ts: Option<i64>| {
        let state = match revoked_ts {
            Some(ts) => format!("revoked {}", fmt_ts(ts)),
            None => "active".into(),
        };
        let mut room = grant.room.clone();
        if !grant.also_rooms.is_empty() {
            room = format!("{room} +{}", grant.also_rooms.len());
        }
        format!(
            "{id:<5} {:<20} {room:<20} {:<28} {last_used:<24} {state}",
            grant.agent,
            grant.flags().join(","),
        )
    };
    for t in list {
        let used = t.last_used.map(fmt_ts).unwrap_or_else(|| "never".into());
        println!("{}", row(t.id.to_string(), &t.grant, used, t.revoked_ts));
    }
    for g in grants {
        let line = row(format!("g{}", g.id), &g.grant, "-".into(), g.revoked_ts);
        println!("{line}, OAuth app {:?}", g.client_name);
    }
    Ok(())
}
