//! `chatroom setup claude|codex|gemini [--dir DIR]` (SPEC §8a): writes one
//! agent's MCP entry and hooks into that client's project-scoped files, so
//! two agents on one machine, in two folders, never overwrite each other:
//!
//! - Claude Code: `.mcp.json` (the HTTP entry) and `.claude/settings.local.json`
//!   (the prompt hook, presence, and the Stop hook that rewakes);
//! - Codex: `.codex/config.toml` (`[mcp_servers.chatroom]`) and `.codex/hooks.json`;
//! - Gemini CLI: `.gemini/settings.json` (`mcpServers` and `hooks`).
//!
//! Each also gets `<client dir>/chatroom.env` (mode 0600), the connection
//! its hooks read (`--connection`). Existing files are merged into (our
//! entries replaced, everything else kept); a file that does not parse is
//! left alone and named. The token is never printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::channel_stream::{Conn, ConnArgs, write_conn_file};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    Claude,
    Codex,
    Gemini,
}

#[derive(Args)]
pub struct SetupArgs {
    /// The client to set up.
    #[arg(value_enum)]
    client: Target,
    /// The project folder (default: the current one).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    #[command(flatten)]
    conn: ConnArgs,
}

/// The name of our entries in every client's files.
const NAME: &str = "chatroom";

pub async fn run(args: SetupArgs) -> anyhow::Result<ExitCode> {
    let Some(conn) = args.conn.conn() else {
        eprintln!(
            "chatroom setup: no token: set CHATROOM_TOKEN to the agent's token (cr_…, from `chatroom admin add-token`) or pass --token"
        );
        return Ok(ExitCode::from(2));
    };
    let dir = match std::fs::canonicalize(&args.dir) {
        Ok(d) if d.is_dir() => d,
        _ => {
            eprintln!(
                "chatroom setup: --dir {} is not a folder",
                args.dir.display()
            );
            return Ok(ExitCode::from(2));
        }
    };
    match write(args.client, &dir, &conn) {
        Ok(written) => {
            println!("chatroom setup: wrote");
            for f in &written {
                println!("  {}", f.display());
            }
            println!("{}", todo(args.client, &dir));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("chatroom setup: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Writes the client's files in `dir`; returns them.
pub fn write(client: Target, dir: &Path, conn: &Conn) -> Result<Vec<PathBuf>, String> {
    let sub = dir.join(match client {
        Target::Claude => ".claude",
        Target::Codex => ".codex",
        Target::Gemini => ".gemini",
    });
    std::fs::create_dir_all(&sub).map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
    let env_file = sub.join("chatroom.env");
    write_conn_file(&env_file, conn)
        .map_err(|e| format!("cannot write {}: {e}", env_file.display()))?;
    let hook = |extra: &str| {
        format!(
            "chatroom hook{extra} --connection {}",
            shell_quote(&env_file.to_string_lossy())
        )
    };
    let mcp_url = format!("{}/mcp", conn.base);
    let bearer = format!("Bearer {}", conn.token);
    let mut written = vec![env_file.clone()];
    match client {
        Target::Claude => {
            let mcp = dir.join(".mcp.json");
            merge_json(&mcp, |v| {
                v["mcpServers"][NAME] =
                    json!({"type": "http", "url": mcp_url, "headers": {"Authorization": bearer}});
            })?;
            let settings = sub.join("settings.local.json");
            merge_json(&settings, |v| {
                let plain = json!({"type": "command", "command": hook(""), "timeout": 10});
                for event in ["SessionStart", "UserPromptSubmit", "SessionEnd"] {
                    set_hook(v, event, plain.clone());
                }
                set_hook(
                    v,
                    "Stop",
                    json!({"type": "command", "command": hook(" --rewake --wait 50m"),
                           "async": true, "asyncRewake": true, "timeout": 3300}),
                );
            })?;
            written.extend([mcp, settings]);
        }
        Target::Codex => {
            let config = sub.join("config.toml");
            merge_toml(&config, &mcp_url, &bearer)?;
            let hooks = sub.join("hooks.json");
            merge_json(&hooks, |v| {
                let h =
                    json!({"type": "command", "command": hook(" --client codex"), "timeout": 10});
                for event in ["SessionStart", "UserPromptSubmit", "Stop"] {
                    set_hook(v, event, h.clone());
                }
            })?;
            written.extend([config, hooks]);
        }
        Target::Gemini => {
            let settings = sub.join("settings.json");
            merge_json(&settings, |v| {
                v["mcpServers"][NAME] =
                    json!({"httpUrl": mcp_url, "headers": {"Authorization": bearer}});
                // Gemini CLI's hook timeouts are in milliseconds.
                let h = json!({"type": "command", "name": NAME, "command": hook(" --client gemini"), "timeout": 10_000});
                for event in ["SessionStart", "BeforeAgent", "AfterAgent", "SessionEnd"] {
                    set_hook(v, event, h.clone());
                }
            })?;
            written.push(settings);
        }
    }
    Ok(written)
}

/// A path quoted for the shell the clients run hooks with.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `hooks.EVENT` holds our one hook: earlier ones of ours are replaced,
/// everyone else's kept.
fn set_hook(v: &mut Value, event: &str, hook: Value) {
    let groups = &mut v["hooks"][event];
    let mut kept: Vec<Value> = groups
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|g| {
            !g["hooks"].as_array().is_some_and(|hs| {
                hs.iter().any(|h| {
                    h["command"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("chatroom hook"))
                })
            })
        })
        .collect();
    kept.push(json!({"hooks": [hook]}));
    *groups = Value::Array(kept);
}

/// Reads `path` (an object, or nothing yet), lets `f` change it, writes it
/// back; a file that is not a JSON object is left alone.
fn merge_json(path: &Path, f: impl FnOnce(&mut Value)) -> Result<(), String> {
    let mut v = match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "{} is not valid JSON ({e}); fix or move it, then run setup again",
                    path.display()
                )
            })?;
            if !v.is_object() {
                return Err(format!("{} is not a JSON object", path.display()));
            }
            v
        }
        _ => json!({}),
    };
    f(&mut v);
    let text = serde_json::to_string_pretty(&v).expect("JSON") + "\n";
    write_private(path, &text)
}

/// `[mcp_servers.chatroom]` in Codex's config.toml, the rest kept as written.
fn merge_toml(path: &Path, url: &str, bearer: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| {
        format!(
            "{} is not valid TOML ({e}); fix or move it, then run setup again",
            path.display()
        )
    })?;
    if !doc.contains_table("mcp_servers") {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        doc.insert("mcp_servers", toml_edit::Item::Table(t));
    }
    let servers = doc["mcp_servers"]
        .as_table_mut()
        .ok_or_else(|| format!("{}: mcp_servers is not a table", path.display()))?;
    let mut entry = toml_edit::Table::new();
    entry.insert("url", toml_edit::value(url));
    let mut headers = toml_edit::InlineTable::new();
    headers.insert("Authorization", bearer.into());
    entry.insert("http_headers", toml_edit::value(headers));
    servers.insert(NAME, toml_edit::Item::Table(entry));
    write_private(path, &doc.to_string())
}

/// Writes a file that holds the token: readable by its owner only.
fn write_private(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("chatroom-tmp");
    let result = (|| {
        std::fs::write(&tmp, text)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// What the person must still do.
fn todo(client: Target, dir: &Path) -> String {
    let d = dir.display();
    let common = "These files hold the agent's token (mode 0600): keep them out of version control (add them to .gitignore).";
    match client {
        Target::Claude => format!(
            "Still to do:\n  1. Start (or restart) Claude Code in {d}; approve the project MCP server \"chatroom\" when asked (or `claude mcp list` to check it).\n  \
             2. Review the hooks with /hooks (Claude Code asks before running new project hooks).\n  \
             3. Make sure `chatroom` is on PATH for the hooks.\n{common}"
        ),
        Target::Codex => format!(
            "Still to do:\n  1. Start Codex in {d} and trust the project when asked (Codex reads .codex/ only in trusted projects).\n  \
             2. Review and trust the hooks when Codex shows them.\n  \
             3. Make sure `chatroom` is on PATH for the hooks.\n{common}"
        ),
        Target::Gemini => format!(
            "Still to do:\n  1. Start Gemini CLI in {d} and trust the folder (it reads .gemini/settings.json only in trusted folders).\n  \
             2. Check the server with /mcp and the hooks with /hooks.\n  \
             3. Make sure `chatroom` is on PATH for the hooks.\n{common}"
        ),
    }
}
