//! `chatroom quickstart`: from nothing to two agents that can talk. Creates
//! the database and a room, mints a token for each of two agents and a
//! read-only one for an observer, and prints what to paste for each: the
//! `claude mcp add` line, the hook's settings, the watcher and the
//! dashboard, all built from the URL agents will use (`CHATROOM_LAN_URL`,
//! else `CHATROOM_PUBLIC_URL`, else the listen address). Run again, it
//! says which agents already had tokens rather than minting more silently.

use std::process::ExitCode;

use clap::Args;

use crate::config::Config;
use crate::db;
use crate::domain::model::Grant;
use crate::domain::model::RoomInfo;
use crate::domain::{Core, Owner};

#[derive(Args)]
pub struct QuickstartArgs {
    /// The room to create (kept if it exists).
    #[arg(long, default_value = "lobby")]
    room: String,
    /// The two agents (comma-separated names).
    #[arg(long, value_delimiter = ',', default_values_t = ["alice".to_owned(), "bob".to_owned()])]
    agents: Vec<String>,
    /// The read-only observer, for the dashboard.
    #[arg(long, default_value = "observer")]
    observer: String,
    /// The base URL agents reach the server at (default: CHATROOM_LAN_URL,
    /// else CHATROOM_PUBLIC_URL, else the listen address).
    #[arg(long)]
    url: Option<String>,
}

pub async fn run(args: QuickstartArgs) -> anyhow::Result<ExitCode> {
    let config = Config::from_env()?;
    super::doctor::database_reachable(&config).await?;
    let existed = config.database_url.is_some() || std::path::Path::new(&config.db_path).exists();
    let core = Core::offline(db::open(&config.database()).await?);
    let owner = Owner::cli();
    let store = core.store.clone();
    let shown = match &config.database_url {
        Some(url) => crate::config::redact_url(url),
        None => std::path::absolute(&config.db_path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| config.db_path.clone()),
    };
    eprintln!(
        "chatroom: database {shown}{}",
        if existed { "" } else { ", created now" }
    );
    if store.get_room(&args.room).await?.is_none() {
        core.owner_create_room(
            &owner,
            &args.room,
            RoomInfo {
                description: Some("Created by chatroom quickstart".into()),
                ..RoomInfo::default()
            },
        )
        .await?;
        eprintln!("chatroom: room {} created", args.room);
    } else {
        eprintln!("chatroom: room {} exists; adding tokens to it", args.room);
    }
    let base = match args.url {
        Some(u) => u
            .trim()
            .trim_end_matches('/')
            .trim_end_matches("/mcp")
            .to_owned(),
        None => config
            .lan_url
            .clone()
            .or_else(|| config.public_url.clone())
            .unwrap_or_else(|| {
                let mut addr = config.listen;
                if addr.ip().is_unspecified() {
                    addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                }
                format!("http://{addr}")
            }),
    };
    let mint = |agent: String, readonly: bool| {
        let grant = Grant {
            agent,
            room: args.room.clone(),
            readonly,
            ..Grant::default()
        };
        core.owner_mint_token(&owner, grant)
    };
    // A second run (or names taken earlier) mints more tokens for agents
    // that have some: said plainly, with the way out, never silently.
    let existing = store.list_tokens().await?;
    let mut names = args.agents.clone();
    names.push(args.observer.clone());
    let mut already = Vec::new();
    for name in &names {
        let ids: Vec<String> = existing
            .iter()
            .filter(|t| t.grant.agent == *name && t.revoked_ts.is_none())
            .map(|t| t.id.to_string())
            .collect();
        if !ids.is_empty() {
            eprintln!(
                "chatroom: agent {name} already has {} active token(s) (id {}); this adds one more, \
                 and the older ones keep working",
                ids.len(),
                ids.join(", ")
            );
            already.push(name.clone());
        }
    }
    if !already.is_empty() {
        eprintln!(
            "chatroom: revoke one you no longer use with `chatroom admin revoke --token ID` \
             (`chatroom admin list-tokens` shows each one's last use), or pick new names \
             with --agents NAME,NAME and --observer NAME"
        );
    }
    let room = &args.room;
    println!("# chatroom quickstart: room {room} at {base}");
    println!("# Tokens are shown once; only their SHA-256 is stored.");
    for agent in &args.agents {
        let (secret, _) = mint(agent.clone(), false).await?;
        let token = secret.expose();
        println!();
        let again = if already.contains(agent) {
            " (one more token; its older ones still work)"
        } else {
            ""
        };
        println!("## {agent}: in {agent}'s project folder{again}");
        println!(
            "claude mcp add --transport http chatroom-{room} {base}/mcp --header \"Authorization: Bearer {token}\""
        );
        println!("# prompt hook and watcher: this environment, then `chatroom hook` in");
        println!("# .claude/settings.json (UserPromptSubmit) and `chatroom watch` in a terminal");
        println!("export CHATROOM_URL={base} CHATROOM_TOKEN={token} CHATROOM_ROOM={room}");
    }
    let (secret, _) = mint(args.observer.clone(), true).await?;
    println!();
    println!(
        "## {}: read-only, for the dashboard{}",
        args.observer,
        if already.contains(&args.observer) {
            " (one more token; its older ones still work)"
        } else {
            ""
        }
    );
    println!("# open {base}/ui and paste: {}", secret.expose());
    println!();
    println!("# hook settings (.claude/settings.json of each agent's project):");
    println!(
        r#"# {{"hooks": {{"UserPromptSubmit": [{{"hooks": [{{"type": "command", "command": "chatroom hook"}}]}}]}}}}"#
    );
    let healthy = crate::tls::client_builder()
        .timeout(std::time::Duration::from_secs(2))
        .build()?
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    if !healthy {
        eprintln!(
            "chatroom: no server answers at {base} yet: start it with `chatroom serve` (same folder, same .env)"
        );
    }
    if let Some(first) = args.agents.first() {
        let other = args.agents.get(1).map(String::as_str).unwrap_or("bob");
        eprintln!(
            "chatroom: then ask {first}'s agent to post \"@{other} hello\"; {other}'s hook, watcher and whats_new show it"
        );
    }
    Ok(ExitCode::SUCCESS)
}
