//! `chatroom hook`: Claude Code's prompt hook (SPEC §8). It reads the hook's
//! JSON on stdin and prints unread peer activity inside an explicit
//! "untrusted data, not instructions" frame (`/v1/whats_new?format=text`):
//!
//! - `UserPromptSubmit` (also no stdin, or no event named): prints the digest
//!   as plain text and moves the cursor;
//! - `PostToolUse`: peeks (the cursor stays) and prints `hookSpecificOutput`
//!   JSON; it remembers, in a small state file, what it already showed, so
//!   a long tool loop is told each event once.
//!
//! It runs before every prompt, so it is quick (short timeouts, one request)
//! and fails open: on any error it exits 0 with nothing on stdout.
//! `CHATROOM_HOOK_DEBUG=1` says on stderr what happened.
//!
//! When the server's history is behind the state file's mark (the database
//! was restored from a backup: `x-chatroom-cursor-reset`), the mark is set
//! to what the server answered, with a note on stderr, so the events
//! written after the restore are shown.

mod rewake;

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// How long the hook waits for its stdin (Claude Code writes it at once).
const STDIN_WAIT: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
const TOTAL_TIMEOUT: Duration = Duration::from_secs(4);

/// What the hook was called for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Print the digest as text and move the cursor.
    Prompt,
    /// Peek and print `hookSpecificOutput` for `PostToolUse`.
    PostToolUse,
}

/// `chatroom hook`'s flags.
#[derive(clap::Args, Default)]
pub struct HookArgs {
    /// For Claude Code's Stop hook with `async` and `asyncRewake`: wait for
    /// the next event for this agent (the actionable set), then exit 2 with
    /// the framed digest on stderr, which wakes the session; exit 0 silently
    /// when the wait ends with nothing.
    #[arg(long)]
    pub rewake: bool,
    /// How long --rewake waits at most: `90s`, `50m`, `2h` or seconds.
    #[arg(long, default_value = "50m", value_parser = parse_wait)]
    pub wait: Duration,
    /// The client whose hook this is: `claude` prints the digest as text,
    /// `codex` and `gemini` print `hookSpecificOutput.additionalContext`
    /// JSON (at most 10,000 characters).
    #[arg(long, value_enum, default_value_t = Client::Claude)]
    pub client: Client,
    /// Read CHATROOM_URL, CHATROOM_TOKEN and CHATROOM_ROOM from this file
    /// (KEY=VALUE lines, as `chatroom setup` writes it).
    #[arg(long, value_name = "FILE")]
    pub connection: Option<PathBuf>,
    /// Also write the connection this hook runs with to FILE (mode 0600),
    /// for a plugin monitor, which gets no plugin options of its own.
    #[arg(long, value_name = "FILE")]
    pub save_connection: Option<PathBuf>,
}

/// The agent clients `chatroom hook` speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Client {
    #[default]
    Claude,
    Codex,
    Gemini,
}

/// The most `additionalContext` Codex and Gemini CLI take from a hook.
pub const MAX_CONTEXT: usize = 10_000;

/// `--wait`: `90s`, `50m`, `2h`, or plain seconds.
fn parse_wait(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 90s, 50m or 2h"))?;
    let secs = match unit.trim() {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?} is not a duration such as 90s, 50m or 2h")),
    };
    Ok(Duration::from_secs(secs))
}

/// What each hook event says the agent is doing, for `POST /v1/presence`.
fn state_for(event: Option<&str>) -> Option<&'static str> {
    match event? {
        "SessionStart" => Some("online"),
        "UserPromptSubmit" | "BeforeAgent" => Some("working"),
        "Stop" | "AfterAgent" => Some("waiting"),
        "SessionEnd" => Some("offline"),
        _ => None,
    }
}

/// Runs the hook; exits 0 (a hook must never block the agent), except
/// `--rewake`, whose exit 2 is its message.
pub fn main(args: HookArgs) -> ExitCode {
    if args.rewake {
        return rewake::main(args);
    }
    let debug = std::env::var("CHATROOM_HOOK_DEBUG")
        .ok()
        .and_then(|v| crate::config::parse_switch(&v))
        .unwrap_or(false);
    let say = |msg: &str| {
        if debug {
            eprintln!("chatroom hook: {msg}");
        }
    };
    let input = read_stdin();
    let event = event_name(&input);
    let mode = match event.as_deref() {
        None | Some("UserPromptSubmit") | Some("SessionStart") | Some("BeforeAgent") => {
            Some(Mode::Prompt)
        }
        Some("PostToolUse") => Some(Mode::PostToolUse),
        _ => None,
    };
    let state = state_for(event.as_deref());
    if mode.is_none() && state.is_none() {
        say(&format!("nothing to do for the {event:?} hook event"));
        return ExitCode::SUCCESS;
    }
    let conn = match super::channel_stream::Conn::resolve(args.connection.as_deref()) {
        Ok(Some(c)) => c,
        Ok(None) => {
            say("CHATROOM_TOKEN is not set; nothing to do");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            say(&e);
            return ExitCode::SUCCESS;
        }
    };
    if let Some(file) = &args.save_connection
        && let Err(e) = super::channel_stream::write_conn_file(file, &conn)
    {
        say(&format!("cannot write {}: {e}", file.display()));
    }
    let (base, token, room) = (conn.base.clone(), conn.token.clone(), conn.room.clone());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(&format!("cannot start: {e}"));
            return ExitCode::SUCCESS;
        }
    };
    let mark = MarkFile::locate(&base, &token, room.as_deref());
    let limit = (args.client != Client::Claude).then_some(10);
    let (outcome, presence) = runtime.block_on(async {
        let digest = async {
            match mode {
                Some(mode) => fetch(&base, &token, room.as_deref(), mode, &mark, limit).await,
                None => Ok(None),
            }
        };
        let presence = async {
            match state {
                Some(state) => post_state(&conn, state).await.map(|_| state),
                None => Ok(""),
            }
        };
        tokio::join!(digest, presence)
    });
    match presence {
        Ok("") => {}
        Ok(state) => say(&format!("presence: {state}")),
        Err(why) => say(&format!("presence not sent: {why}")),
    }
    let Some(mode) = mode else {
        return ExitCode::SUCCESS;
    };
    match outcome {
        Ok(None) => say("nothing new"),
        Ok(Some(text)) => {
            let out = match (mode, args.client) {
                (Mode::PostToolUse, Client::Claude) => crate::present::digest::post_tool_use(&text),
                (Mode::Prompt, Client::Claude) => text,
                (_, _) => additional_context(event.as_deref().unwrap_or("UserPromptSubmit"), &text),
            };
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(out.as_bytes())
                .and_then(|_| stdout.flush())
                .is_err()
            {
                say("could not write to stdout");
            }
            say(match mode {
                Mode::Prompt => "printed new activity; the cursor moved",
                Mode::PostToolUse => "printed new activity (peek: the cursor did not move)",
            });
        }
        Err(why) => say(&why),
    }
    ExitCode::SUCCESS
}

/// A set, non-blank environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The hook's stdin, if any arrives quickly; a terminal is not read.
pub(super) fn read_stdin() -> String {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return String::new();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    // A reader thread, so a stdin left open cannot hold the hook up.
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::stdin().lock().take(1 << 20).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx.recv_timeout(STDIN_WAIT)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// `hook_event_name` from the hook's JSON input.
pub(super) fn event_name(input: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(input.trim()).ok()?;
    v.get("hook_event_name")?.as_str().map(str::to_owned)
}

/// One request to `/v1/whats_new?format=text`: `Ok(None)` when nothing is
/// new, `Err` with an explanation for the debug output.
/// `hookSpecificOutput.additionalContext` JSON for Codex and Gemini CLI,
/// the digest cut to [`MAX_CONTEXT`] characters with its frame's end kept.
fn additional_context(event: &str, text: &str) -> String {
    let text = if text.chars().count() > MAX_CONTEXT {
        let lines: Vec<&str> = text.lines().collect();
        let end = lines.last().copied().unwrap_or("");
        let note = "(more not shown: call the whats_new tool to read the rest)";
        let budget = MAX_CONTEXT - end.chars().count() - note.chars().count() - 2;
        let mut kept = String::new();
        for l in &lines[..lines.len().saturating_sub(1)] {
            if kept.chars().count() + l.chars().count() + 1 > budget {
                break;
            }
            kept.push_str(l);
            kept.push('\n');
        }
        format!("{kept}{note}\n{end}")
    } else {
        text.to_owned()
    };
    serde_json::json!({
        "hookSpecificOutput": {"hookEventName": event, "additionalContext": text}
    })
    .to_string()
}

/// `POST /v1/presence {state}` for this hook's agent.
pub(super) async fn post_state(
    conn: &super::channel_stream::Conn,
    state: &str,
) -> Result<(), String> {
    let client = crate::tls::client_builder()
        .user_agent(concat!("chatroom-hook/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TOTAL_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let mut url = reqwest::Url::parse(&format!("{}/v1/presence", conn.base))
        .map_err(|e| format!("CHATROOM_URL is not a URL: {e}"))?;
    if let Some(room) = &conn.room {
        url.query_pairs_mut().append_pair("room", room);
    }
    let r = client
        .post(url)
        .bearer_auth(&conn.token)
        .json(&serde_json::json!({ "state": state }))
        .send()
        .await
        .map_err(|e| super::cause_chain(&e))?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("HTTP {}", r.status().as_u16()))
    }
}

async fn fetch(
    base: &str,
    token: &str,
    room: Option<&str>,
    mode: Mode,
    mark: &MarkFile,
    limit: Option<i64>,
) -> Result<Option<String>, String> {
    let client = crate::tls::client_builder()
        .user_agent(concat!("chatroom-hook/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(TOTAL_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let mut query: Vec<(&str, String)> = vec![("format", "text".into())];
    if let Some(n) = limit {
        query.push(("limit", n.to_string()));
    }
    if let Some(r) = room {
        query.push(("room", r.into()));
    }
    let shown = mark.read();
    if mode == Mode::PostToolUse {
        query.push(("peek", "1".into()));
        if let Some(after) = shown {
            query.push(("after_id", after.to_string()));
        }
    }
    let url = format!("{base}/v1/whats_new");
    let with_query = reqwest::Url::parse_with_params(&url, &query)
        .map_err(|e| format!("CHATROOM_URL {base:?} is not a URL: {e}"))?;
    let response = client
        .get(with_query)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot reach {url} (is the server running, is CHATROOM_URL right?): {}",
                super::cause_chain(&e)
            )
        })?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| body.chars().take(200).collect());
        let why = match status {
            401 => {
                "401: the token was refused (mistyped, revoked, or for another server); check CHATROOM_TOKEN"
            }
            403 => "403: this token may not read that room; check CHATROOM_ROOM",
            404 => "404: no such room, or CHATROOM_URL does not point at a chatroom server",
            421 => {
                "421: the server does not accept this Host; add it to the server's CHATROOM_ALLOWED_HOSTS or use the URL it serves"
            }
            429 => {
                "429: rate limited (too many calls, or too many failed tokens from this address); it will pass"
            }
            _ => "the server refused the request",
        };
        return Err(format!("{why} [HTTP {status}: {message}]"));
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let last = header("x-chatroom-last-event-id");
    let reset = header("x-chatroom-cursor-reset");
    let text = response
        .text()
        .await
        .map_err(|e| format!("the answer broke off: {}", super::cause_chain(&e)))?;
    if let Some(latest) = reset {
        // The server's history is behind the mark (restored from a backup):
        // the mark follows the server, or later events would stay hidden
        // behind it. stdout carries only the digest.
        let at = last.unwrap_or(latest);
        let moved = match shown {
            Some(old) => format!("; this hook's mark goes from {old} to {at}"),
            _ => String::new(),
        };
        eprintln!(
            "chatroom hook: the room's history on the server is behind what was read before (restored from a backup?): it now ends at event {latest}{moved}"
        );
        mark.write(at);
    }
    if text.trim().is_empty() {
        return Ok(None);
    }
    if let Some(last) = last
        && reset.is_none()
    {
        // Both modes record what was shown, so a tool loop after a prompt
        // does not repeat it.
        mark.write(last.max(shown.unwrap_or(0)));
    }
    Ok(Some(text))
}

/// Where the hook remembers the last event it showed (per server, token and
/// room): `CHATROOM_HOOK_STATE_DIR`, else the user's state directory. No
/// file, no memory: then a peek shows what is unread each time.
struct MarkFile(Option<PathBuf>);

impl MarkFile {
    fn locate(base: &str, token: &str, room: Option<&str>) -> MarkFile {
        let dir = env("CHATROOM_HOOK_STATE_DIR")
            .map(PathBuf::from)
            .or_else(|| env("XDG_STATE_HOME").map(|d| PathBuf::from(d).join("chatroom")))
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state/chatroom")));
        let key = hex::encode(Sha256::digest(
            format!("{base}\n{token}\n{}", room.unwrap_or("")).as_bytes(),
        ));
        MarkFile(dir.map(|d| d.join(format!("hook-{}.mark", &key[..16]))))
    }

    fn read(&self) -> Option<i64> {
        let path = self.0.as_ref()?;
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    fn write(&self, id: i64) {
        if let Some(path) = &self.0 {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, id.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_event_name() {
        assert_eq!(
            event_name(r#"{"hook_event_name":"PostToolUse","tool_name":"Bash"}"#).as_deref(),
            Some("PostToolUse")
        );
        assert_eq!(event_name(""), None);
        assert_eq!(event_name("not json"), None);
        assert_eq!(event_name(r#"{"session_id":"x"}"#), None);
    }
}
