//! The `chatroom` command line: `serve`, the `admin` commands, and the
//! client-side helpers. Each subcommand parses, calls the library, prints.

mod admin;
mod admin_webhooks;
mod bench;
mod channel;
mod channel_stream;
mod copy;
mod doctor;
mod doctor_push;
mod export;
mod hook;
mod import;
mod quickstart;
mod setup;
mod watch;
mod worker;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};

/// `chatroom --version`: the crate version and the commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CHATROOM_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "chatroom",
    version = VERSION,
    about = "A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP.",
    long_about = "A self-hosted coordination server for AI agents: shared rooms with a chat and a board, over MCP.\n\n\
Configuration comes from CHATROOM_* environment variables (and a .env file in the working directory when present, \
or the file CHATROOM_ENV_FILE names; the environment wins over it); `chatroom serve --help` lists every setting.\n\
Quick start: `chatroom quickstart` (a room, two agents and an observer, with the lines to paste), then `chatroom serve`. \
`chatroom doctor` checks a setup."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (MCP at /mcp, health at /healthz).
    #[command(after_help = crate::config::table::help_text())]
    Serve,
    /// Administer rooms and tokens directly in the database (works while `serve` runs).
    Admin(admin::AdminArgs),
    /// Exit 0 when the local server answers /healthz (for container health checks).
    Healthcheck {
        /// Base URL of the server (default: from CHATROOM_LISTEN).
        #[arg(long)]
        url: Option<String>,
    },
    /// Check a setup, server side and agent side: each line ok, warn or fail, with the fix.
    Doctor(doctor::DoctorArgs),
    /// Set up a demo room with two agents and an observer, and print what to paste.
    Quickstart(quickstart::QuickstartArgs),
    /// Load generator: measures a server with the tools of the contract (run the
    /// server with CHATROOM_RATE_LIMIT_PER_MINUTE=0).
    Bench(bench::BenchArgs),
    /// Run an API-only model as a board worker (configured by the environment; see its --help).
    Worker(worker::WorkerArgs),
    /// Claude Code prompt hook: prints unread peer activity, framed as untrusted data.
    ///
    /// Reads the hook's JSON on stdin (`UserPromptSubmit`, the default, moves the
    /// cursor; `PostToolUse` peeks and prints hookSpecificOutput JSON). Env:
    /// CHATROOM_URL (base URL, no /mcp; default http://127.0.0.1:8080),
    /// CHATROOM_TOKEN, CHATROOM_ROOM; CHATROOM_HOOK_STATE_DIR is where it keeps
    /// what it showed (default: $XDG_STATE_HOME/chatroom or ~/.local/state/chatroom);
    /// CHATROOM_HOOK_DEBUG=1 explains on stderr. Never fails: on any error it
    /// prints nothing and exits 0. It also reports the agent's state
    /// (POST /v1/presence) on SessionStart, UserPromptSubmit, Stop and SessionEnd.
    /// `--rewake` is the Stop hook that wakes an idle session (see its --help).
    Hook(hook::HookArgs),
    /// Follow a room live, one line per notification (for Claude Code's Monitor tool).
    Watch(watch::WatchArgs),
    /// A stdio MCP server for Claude Code channels: pushes the room's events for this agent
    /// into an idle session (`claude --dangerously-load-development-channels server:chatroom`).
    ///
    /// Env: CHATROOM_URL, CHATROOM_TOKEN, CHATROOM_ROOM (or --connection FILE);
    /// CHATROOM_PUSH_BURST (20): notifications per 5 minutes before pushes pause 10 minutes.
    /// Content is framed as untrusted peer data; replies go through chatroom's post_message.
    Channel(channel::ChannelArgs),
    /// Write one agent's MCP entry and hooks into a client's project files
    /// (claude: .mcp.json + .claude/settings.local.json; codex: .codex/config.toml +
    /// .codex/hooks.json; gemini: .gemini/settings.json), merging into what is there.
    /// Token from CHATROOM_TOKEN (never printed).
    Setup(setup::SetupArgs),
    /// Print a shell completion script, e.g. `chatroom completions bash > /etc/bash_completion.d/chatroom`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff): `chatroom man > chatroom.1`, a subcommand's
    /// (`chatroom man admin add-token`), or every page into a folder (`--dir`).
    Man(ManArgs),
}

#[derive(clap::Args)]
struct ManArgs {
    /// The subcommand whose page to print, e.g. `admin add-token`.
    command: Vec<String>,
    /// Write every page (chatroom.1, chatroom-serve.1, chatroom-admin-add-token.1, …) into this folder.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    dir: Option<std::path::PathBuf>,
}

/// What `chatroom serve` hands the validated settings and the bound listener
/// to: the server. The binary wires it in (`main.rs` passes
/// `server::launch`), so that the command line does not depend on the server.
pub type Launch =
    fn(
        Config,
        tokio::net::TcpListener,
        CancellationToken,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>>;

/// Parses the command line and runs it (`serve` through `launch`); the exit
/// code says how it went.
pub fn main(launch: Launch) -> ExitCode {
    let dotenv = config::load_dotenv();
    let cli = Cli::parse();
    if let Command::Hook(args) = cli.command {
        // On every prompt: its own small runtime, and it never fails.
        return hook::main(args);
    }
    match &cli.command {
        // Logged once logging is set up; the doctor lists them itself.
        Command::Serve | Command::Doctor(_) => {}
        _ => {
            for w in &dotenv.warnings {
                eprintln!("chatroom: warning: {w}");
            }
        }
    }
    match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "chatroom",
                &mut std::io::stdout(),
            );
            return ExitCode::SUCCESS;
        }
        Command::Man(args) => return man(args),
        _ => {}
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
            Command::Serve => serve(launch).await,
            Command::Admin(args) => admin::run(args).await,
            Command::Healthcheck { url } => healthcheck(url).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Quickstart(args) => quickstart::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Worker(args) => worker::run(args).await,
            Command::Watch(args) => watch::run(args).await,
            Command::Channel(args) => channel::run(args).await,
            Command::Setup(args) => setup::run(args).await,
            Command::Hook(_) => Ok(ExitCode::SUCCESS),
            Command::Completions { .. } | Command::Man(_) => Ok(ExitCode::SUCCESS),
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

/// `chatroom man`: the page of the command line or of one subcommand, or
/// every page into a folder. Each page names its subcommands' pages
/// (`chatroom-admin(1)`), and each of those is one `chatroom man …` away.
fn man(args: ManArgs) -> ExitCode {
    // Built, so that every subcommand knows its full name (chatroom-admin-add-token).
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let man = |cmd: &clap::Command| {
        clap_mangen::Man::new(cmd.clone()).source(format!("chatroom {}", env!("CARGO_PKG_VERSION")))
    };
    if let Some(dir) = args.dir {
        fn every<'a>(cmd: &'a clap::Command, out: &mut Vec<&'a clap::Command>) {
            out.push(cmd);
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
                every(sub, out);
            }
        }
        let mut pages = Vec::new();
        every(&root, &mut pages);
        let written: std::io::Result<Vec<_>> =
            pages.iter().map(|cmd| man(cmd).generate_to(&dir)).collect();
        return match written {
            Ok(files) => {
                eprintln!(
                    "chatroom: {} man pages written to {}",
                    files.len(),
                    dir.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "chatroom: cannot write the man pages to {}: {e}",
                    dir.display()
                );
                ExitCode::FAILURE
            }
        };
    }
    let mut page = &root;
    for (depth, name) in args.command.iter().enumerate() {
        match page.find_subcommand(name) {
            Some(sub) => page = sub,
            None => {
                eprintln!(
                    "chatroom man: `chatroom {}` is not a command; `chatroom man {}` lists the pages there",
                    args.command[..=depth].join(" "),
                    args.command[..depth].join(" ")
                );
                return ExitCode::from(2);
            }
        }
    }
    match man(page).render(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chatroom: cannot write the man page: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether log lines may carry colour: only on a terminal, and never with
/// `NO_COLOR` set (<https://no-color.org>). Docker, journald, files and
/// pipes get plain text.
fn colour_allowed() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Sets up logging from `CHATROOM_LOG` / `CHATROOM_LOG_FORMAT` (validated
/// with the rest of the configuration).
fn init_logging(config: &Config) {
    let directives = config::log_directives(&config.log_filter)
        .unwrap_or_else(|_| "warn,chatroom=info".to_owned());
    let env_filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,chatroom=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_ansi(colour_allowed())
        .with_writer(std::io::stderr);
    if config.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn serve(launch: Launch) -> anyhow::Result<ExitCode> {
    let dotenv = config::load_dotenv();
    let values = match config::Values::read(&config::env_map()) {
        Ok(v) => v,
        Err(e) => {
            // A bad .env line may be why.
            for w in &dotenv.warnings {
                eprintln!("chatroom: warning: {w}");
            }
            return Err(e.into());
        }
    };
    let config = Config::from_values(&values);
    init_logging(&config);
    for w in &dotenv.warnings {
        tracing::warn!("{w}");
    }
    // Once, so that an operator sees what the server runs with (no secret):
    // every setting of the table that has a value, and where it came from.
    let settings: Vec<String> = values
        .effective()
        .into_iter()
        .filter(|e| !e.shown.is_empty())
        .map(|e| match e.source {
            config::Source::Default => format!("{}={}", e.setting.name, e.shown),
            source => format!("{}={} ({source})", e.setting.name, e.shown),
        })
        .collect();
    tracing::info!(version = VERSION, settings = %settings.join(" "), "effective settings");
    doctor::database_reachable(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {} (CHATROOM_LISTEN): {e}{}",
                config.listen,
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    "; another program (or another chatroom) uses that port: stop it or set CHATROOM_LISTEN"
                } else {
                    ""
                }
            )
        })?;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    launch(config, listener, shutdown).await?;
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
        Some(u) => {
            let u = u.trim().trim_end_matches('/').to_owned();
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                eprintln!(
                    "chatroom healthcheck: --url {u:?} must start with http:// or https://, e.g. http://127.0.0.1:8080"
                );
                return Ok(ExitCode::FAILURE);
            }
            u
        }
        None => {
            let config = Config::from_env()?;
            let mut addr = config.listen;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        }
    };
    let client = crate::tls::client_builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()?;
    let url = format!("{base}/healthz");
    match client.get(&url).send().await {
        Ok(r) if r.status().is_success() => Ok(ExitCode::SUCCESS),
        Ok(r) => {
            let status = r.status();
            let body: String = r
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect();
            eprintln!(
                "chatroom healthcheck: {url} answered {status}: {}",
                body.trim()
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!(
                "chatroom healthcheck: cannot reach {url}: {} (is `chatroom serve` running there? CHATROOM_LISTEN or --url)",
                cause_chain(&e)
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// What a listing command prints: with `--json`, `rows` as pretty JSON;
/// else `none` (saying how to add one) when there are none; else the table
/// `table` prints.
fn print_listing<T: serde::Serialize>(
    json: bool,
    rows: &[T],
    none: &str,
    table: impl FnOnce(),
) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else if rows.is_empty() {
        println!("{none}");
    } else {
        table();
    }
    Ok(())
}

/// An error with every cause under it (`a: b: c`), as a network error's
/// top line ("error sending request") hides the reason (DNS, refused, TLS).
pub(crate) fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    /// clap's own checks of every subcommand (unique argument and group
    /// names, …), which it otherwise makes only when that subcommand runs.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
