//! `chatroom doctor`'s checks for push (SPEC §8a), on the agent's machine:
//! the Claude Code version, the variables that silently turn channels off,
//! and the debug log's "Channel notifications skipped" line.
//!
//! Claude Code registers a channel only while a feature flag it fetches is
//! on; with `DISABLE_TELEMETRY` or `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`
//! set (also `DO_NOT_TRACK`, `CLAUDE_CODE_DISABLE_FEATURE_FLAGS`,
//! `DISABLE_GROWTHBOOK`) it fetches no flags, so channel notifications are
//! skipped ("channels feature is not currently available") without a word
//! in the session. Monitors and the rewake hook do not depend on it.

use std::path::PathBuf;

/// One check's outcome: a warning or not, and its line.
pub struct Check {
    pub warn: bool,
    pub text: String,
}

/// The variables that turn channels off, the first two the usual ones.
pub const CHANNEL_BLOCKERS: [&str; 5] = [
    "DISABLE_TELEMETRY",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DO_NOT_TRACK",
    "CLAUDE_CODE_DISABLE_FEATURE_FLAGS",
    "DISABLE_GROWTHBOOK",
];

/// The oldest Claude Code with channels (a research preview since 2.1.80).
const MIN_CHANNELS: (u32, u32, u32) = (2, 1, 80);

pub fn checks() -> Vec<Check> {
    let mut out = Vec::new();
    let ok = |text: String| Check { warn: false, text };
    let warn = |text: String| Check { warn: true, text };
    match claude_version() {
        Some((v, text)) if v >= MIN_CHANNELS => out.push(ok(format!(
            "Claude Code {text}: channels, plugin monitors and the rewake hook are there"
        ))),
        Some((_, text)) => out.push(warn(format!(
            "Claude Code {text} is older than {}.{}.{}, which channels need: update it (`claude update`); the prompt hook still works",
            MIN_CHANNELS.0, MIN_CHANNELS.1, MIN_CHANNELS.2
        ))),
        None => out.push(ok(
            "Claude Code is not on PATH here (`claude --version`): push checks for it skipped".into(),
        )),
    }
    let set: Vec<&str> = CHANNEL_BLOCKERS
        .into_iter()
        .filter(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
        .collect();
    if set.is_empty() {
        out.push(ok(format!(
            "none of {} is set: Claude Code can turn channels on",
            CHANNEL_BLOCKERS[..2].join(", ")
        )));
    } else {
        out.push(warn(format!(
            "{} set: Claude Code then fetches no feature flags and silently skips channel notifications; \
             unset it for sessions that load the channel (the monitor and the rewake hook still work)",
            set.join(", ")
        )));
    }
    match skipped_line() {
        Some((file, line)) => out.push(warn(format!(
            "the latest Claude Code debug log ({}) says: {line}",
            file.display()
        ))),
        None => out.push(ok(
            "when channel notifications do not arrive, start `claude --debug` and look in its debug log \
             (~/.claude/debug/) for \"Channel notifications skipped: <reason>\""
                .into(),
        )),
    }
    out
}

/// `claude --version`, as numbers and as printed.
fn claude_version() -> Option<((u32, u32, u32), String)> {
    let out = std::process::Command::new("claude")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let first = text.split_whitespace().next()?;
    let mut parts = first.split('.').map(|p| p.parse::<u32>().ok());
    let v = (parts.next()??, parts.next()??, parts.next()??);
    Some((v, first.to_owned()))
}

/// A "Channel notifications skipped" line in the newest debug log.
fn skipped_line() -> Option<(PathBuf, String)> {
    let dir = PathBuf::from(std::env::var_os("HOME")?).join(".claude/debug");
    let newest = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()?
        .1;
    let text = std::fs::read_to_string(&newest).ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("Channel notifications skipped"))?;
    Some((newest, line.trim().chars().take(300).collect()))
}
