//! The `chatroom` command line: `serve`, the `admin` commands, and the
//! client-side helpers. Each subcommand parses, calls the library, prints.

mod admin;
mod bench;
mod copy;
mod export;
mod hook;
mod import;
mod watch;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};

#[derive(Parser)]
#[command(
    name = "chatroom",
    version,
    about = "A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP.",
    long_about = "A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP.\n\n\
Configuration comes from CHATROOM_* environment variables (and a .env file in the working directory when present).\n\
Quick start: `chatroom admin add-room lobby`, `chatroom admin add-token --agent alice --room lobby`, `chatroom serve`."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (MCP at /mcp, health at /healthz).
    Serve,
    /// Administer rooms and tokens directly in the database (works while `serve` runs).
    Admin(admin::AdminArgs),
    /// Exit 0 when the local server answers /healthz (for container health checks).
    Healthcheck {
        /// Base URL of the server (default: from CHATROOM_LISTEN).
        #[arg(long)]
        url: Option<String>,
    },
    /// Load generator: measures a server with the tools of the contract (run the
    /// server with CHATROOM_RATE_LIMIT_PER_MINUTE=0).
    Bench(bench::BenchArgs),
    /// Run an API-only model as a board worker (configured by the environment; see its --help).
    Worker(worker::WorkerArgs),
    /// Claude Code prompt hook: prints unread peer activity, framed as untrusted data.
    ///
    /// Reads the hook's JSON on stdin (`UserPromptSubmit`, the default, moves the
    /// cursor; `PostToolUse` peeks and prints hookSpecificOutput JSON). Env:
    /// CHATROOM_URL (base URL, no /mcp), CHATROOM_TOKEN, CHATROOM_ROOM;
    /// CHATROOM_HOOK_DEBUG=1 explains on stderr. Never fails: on any error it
    /// prints nothing and exits 0.
    Hook,
    /// Follow a room live, one line per notification (for Claude Code's Monitor tool).
    Watch(watch::WatchArgs),
}

/// Parses the command line and runs it; the exit code says how it went.
pub fn main() -> ExitCode {
    config::load_dotenv();
    let cli = Cli::parse();
    if let Command::Hook = cli.command {
        // On every prompt: its own small runtime, and it never fails.
        return hook::main();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chatroom: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Serve => serve().await,
            Command::Admin(args) => admin::run(args).await,
            Command::Healthcheck { url } => healthcheck(url).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Worker(args) => worker::run(args).await,
            Command::Watch(args) => watch::run(args).await,
            Command::Hook => Ok(hook::main()),
        }
    });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("chatroom: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Sets up logging from `CHATROOM_LOG` / `CHATROOM_LOG_FORMAT`.
fn init_logging(config: &Config) {
    let filter = &config.log_filter;
    // A bare level applies to our crate; the SDK's per-request chatter stays at warn.
    let directives = if ["trace", "debug", "info", "warn", "error"].contains(&filter.as_str()) {
        format!("warn,chatroom={filter},tower_http={filter},rmcp=warn")
    } else {
        filter.clone()
    };
    let env_filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,chatroom=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    if config.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn serve() -> anyhow::Result<ExitCode> {
    let config = Config::from_env()?;
    init_logging(&config);
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot listen on {} (CHATROOM_LISTEN): {e}", config.listen)
        })?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    crate::server::launch(config, listener, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// Cancels `shutdown` on SIGINT or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("can install a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}

async fn healthcheck(url: Option<String>) -> anyhow::Result<ExitCode> {
    let base = match url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => {
            let config = Config::from_env()?;
            let mut addr = config.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        }
    };
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()?;
    let healthy = match client.get(format!("{base}/healthz")).send().await {
        Ok(r) => r.status().is_success(),
        Err(_) => false,
    };
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
