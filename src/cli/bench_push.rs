//! `chatroom bench --scenario channel`: from a post to the notification on
//! a real `chatroom channel`'s stdout. It spawns `--concurrency` channel
//! processes of this binary (the tokens after the first, in turn), shakes
//! hands with each as Claude Code does (JSON-RPC on stdin/stdout), waits
//! until each follows the room, then the first token posts `--mentions`
//! messages, each `@mentioning` the next channel's agent in turn, and each
//! is timed from sending the post to the `notifications/claude/channel`
//! line carrying its `message_id`.
//!
//! Each agent's mentions are spaced at least 2.1 s apart, so every one is
//! the first of a quiet spell and goes out at once: what is measured is the
//! path (post, stream, channel, stdout), not the 2 s coalescing window that
//! a burst waits for by design. The posts go out on a fixed schedule (not
//! one after another's delivery), so a slow delivery does not slow the
//! load. The loop guard is lifted in the spawned channels
//! (`CHATROOM_PUSH_BURST`), as 1,000 mentions in minutes would trip it.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::{Agent, Origin, Report, delivery_report};
use crate::cli::channel::METHOD;

#[derive(Args)]
pub struct PushArgs {
    /// Mentions `channel` posts, one per channel's agent in turn.
    #[arg(long, default_value_t = 1000)]
    mentions: usize,
}

/// The quiet spell each agent's mentions keep between them (longer than
/// the channel's 2 s coalescing window).
const SPACING: Duration = Duration::from_millis(2_100);
/// How long a channel may take to start and follow the room, and a
/// mention to arrive after the last post went out.
const WAIT: Duration = Duration::from_secs(30);

/// One delivery seen on a channel's stdout.
struct Seen {
    channel: usize,
    message_id: i64,
    at: Instant,
}

/// `channel`: see the module's documentation.
pub(super) async fn channel(agents: &[Agent], n: usize, args: &PushArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        agents.len() >= 2,
        "the channel scenario needs at least two tokens: the first posts, the channels run as the others"
    );
    anyhow::ensure!(args.mentions > 0, "--mentions must be positive");
    let poster = agents[0].clone();
    let targets = &agents[1..];
    let used = n.min(targets.len());
    let mut names = Vec::with_capacity(used);
    for a in &targets[..used] {
        let me = a
            .call("whoami", json!({}))
            .await
            .map_err(|e| anyhow::anyhow!("whoami: {e}"))?;
        names.push(me["agent"].as_str().unwrap_or_default().to_owned());
    }
    let exe = std::env::current_exe()?;
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<Seen>();
    let (ready_tx, mut ready_rx) = mpsc::channel::<Result<(), String>>(n.max(1));
    let mut children = Vec::with_capacity(n);
    let mut rss_pids = Vec::with_capacity(n);
    for c in 0..n {
        let a = &targets[c % used];
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("channel")
            .env("CHATROOM_URL", &a.base)
            .env("CHATROOM_TOKEN", &a.token)
            .env(crate::domain::push::BURST_VAR, "1000000")
            .env_remove("CLAUDE_PLUGIN_OPTION_URL")
            .env_remove("CLAUDE_PLUGIN_OPTION_TOKEN")
            .env_remove("CLAUDE_PLUGIN_OPTION_ROOM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &a.room {
            Some(r) => cmd.env("CHATROOM_ROOM", r),
            None => cmd.env_remove("CHATROOM_ROOM"),
        };
        let mut child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {} channel: {e}", exe.display()))?;
        rss_pids.extend(child.id());
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        tokio::spawn(follow(
            c,
            stdin,
            stdout,
            stderr,
            ready_tx.clone(),
            seen_tx.clone(),
        ));
        children.push(child);
    }
    drop(ready_tx);
    drop(seen_tx);
    let deadline = tokio::time::Instant::now() + WAIT;
    for _ in 0..n {
        match tokio::time::timeout_at(deadline, ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => anyhow::bail!("a channel did not start: {e}"),
            _ => anyhow::bail!("the channels did not all follow the room within {WAIT:?}"),
        }
    }
    let rss_kib: u64 = rss_pids.iter().filter_map(|&p| rss_of(p)).sum();

    let pace = SPACING / used as u32;
    eprintln!(
        "channel: {n} channels of {used} agents follow the room; {} mentions, one every {:.1} ms (about {:.0} s)",
        args.mentions,
        pace.as_secs_f64() * 1000.0,
        (pace * args.mentions as u32).as_secs_f64()
    );
    let origin = Origin::now();
    let mut posts = tokio::task::JoinSet::new();
    for i in 0..args.mentions {
        tokio::time::sleep_until((origin.at + pace * i as u32).into()).await;
        let poster = poster.clone();
        let target = i % used;
        let body = format!("@{} bench mention {i}", names[target]);
        posts.spawn(async move {
            let sent = Instant::now();
            let r = poster.call("post_message", json!({"body": body})).await;
            (target, sent, r)
        });
    }
    // Which channels each agent runs, to know what each mention expects.
    let channels_of: Vec<Vec<usize>> = (0..used)
        .map(|t| (0..n).filter(|c| c % used == t).collect())
        .collect();
    let mut sent_at: HashMap<i64, (Instant, usize)> = HashMap::new();
    let mut errors = 0u64;
    let mut first_error = None;
    let mut reach_push = 0u64;
    while let Some(done) = posts.join_next().await {
        let (target, sent, r) = done?;
        match r {
            Ok(v) => {
                if let Some(id) = v["message_id"].as_i64() {
                    sent_at.insert(id, (sent, target));
                }
                let name = names[target].to_lowercase();
                if v["reach"][&name] == json!("push") || v["reach"][&names[target]] == json!("push")
                {
                    reach_push += 1;
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let expected: usize = sent_at.values().map(|(_, t)| channels_of[*t].len()).sum();
    let mut arrived: HashMap<(i64, usize), Instant> = HashMap::new();
    let mut duplicates = 0u64;
    let mut foreign = 0u64;
    let last = tokio::time::Instant::now() + WAIT;
    while arrived.len() < expected {
        match tokio::time::timeout_at(last, seen_rx.recv()).await {
            Ok(Some(s)) => {
                let Some((_, target)) = sent_at.get(&s.message_id) else {
                    foreign += 1;
                    continue;
                };
                if s.channel % used != *target {
                    foreign += 1;
                } else if arrived.insert((s.message_id, s.channel), s.at).is_some() {
                    duplicates += 1;
                }
            }
            _ => break,
        }
    }
    drop(children);
    let missing = (expected - arrived.len()) as u64;
    if missing > 0 {
        let mut lost: Vec<(i64, usize)> = sent_at
            .iter()
            .flat_map(|(id, (_, t))| channels_of[*t].iter().map(move |c| (*id, *c)))
            .filter(|k| !arrived.contains_key(k))
            .collect();
        lost.sort_unstable();
        let shown: Vec<String> = lost
            .iter()
            .take(10)
            .map(|(id, c)| format!("message {id} on channel {c}"))
            .collect();
        eprintln!(
            "channel: {missing} deliveries never came, e.g. {}",
            shown.join(", ")
        );
    }
    let samples: Vec<_> = arrived
        .iter()
        .map(|((id, _), at)| origin.sample(sent_at[id].0, *at))
        .collect();
    if let Some(e) = &first_error {
        eprintln!("channel: first error: {e}");
    }
    let mut r = delivery_report(
        "channel",
        n,
        origin,
        samples,
        errors + missing + duplicates + foreign,
        "time from sending a post that @mentions an agent to the notifications/claude/channel line on its channel's stdout",
    );
    r.calls_per_s = 0.0;
    for (k, v) in [
        ("channels", json!(n)),
        ("agents", json!(used)),
        ("mentions", json!(args.mentions)),
        ("pace_ms", json!(pace.as_secs_f64() * 1000.0)),
        ("delivered", json!(arrived.len())),
        ("missing", json!(missing)),
        ("duplicates", json!(duplicates)),
        ("unexpected", json!(foreign)),
        ("reach_push", json!(reach_push)),
        ("channels_rss_mib", json!(rss_kib as f64 / 1024.0)),
    ] {
        r.extra.insert(k.into(), v);
    }
    Ok(r)
}

/// Drives one channel: the handshake, then every notification's message ids.
async fn follow(
    channel: usize,
    mut stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    ready: mpsc::Sender<Result<(), String>>,
    seen: mpsc::UnboundedSender<Seen>,
) {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "chatroom-bench", "version": env!("CARGO_PKG_VERSION")}}});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let mut out = BufReader::new(stdout).lines();
    let mut err = BufReader::new(stderr).lines();
    let handshake = async {
        send(&mut stdin, &init).await?;
        loop {
            let line = next_line(&mut out, "stdout")
                .await?
                .ok_or("the channel closed stdout during the handshake")?;
            let v: Value = serde_json::from_str(&line).map_err(|e| format!("{line}: {e}"))?;
            if v["id"] == json!(0) {
                if v["result"]["capabilities"]["experimental"]["claude/channel"].is_null() {
                    return Err(format!("no claude/channel capability: {line}"));
                }
                break;
            }
        }
        send(&mut stdin, &initialized).await?;
        // The channel says on stderr when it follows the room.
        loop {
            let line = next_line(&mut err, "stderr")
                .await?
                .ok_or("the channel ended before it followed the room")?;
            if line.contains("following room") {
                return Ok::<(), String>(());
            }
            if line.contains("rejected") || line.contains("refused") {
                return Err(line);
            }
        }
    };
    let outcome = handshake.await;
    let ok = outcome.is_ok();
    let _ = ready.send(outcome).await;
    if !ok {
        return;
    }
    // Keep stderr drained (reconnect lines), and stdin open: closing it
    // ends the session.
    tokio::spawn(async move { while let Ok(Some(_)) = err.next_line().await {} });
    let _stdin = stdin;
    while let Ok(Some(line)) = out.next_line().await {
        let at = Instant::now();
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["method"] != json!(METHOD) {
            continue;
        }
        let ids = v["params"]["meta"]["message_id"].as_str().unwrap_or("");
        for id in ids.split(',').filter_map(|s| s.trim().parse().ok()) {
            let _ = seen.send(Seen {
                channel,
                message_id: id,
                at,
            });
        }
    }
}

/// Writes one JSON-RPC message to a channel's stdin, as a line.
async fn send(stdin: &mut tokio::process::ChildStdin, message: &Value) -> Result<(), String> {
    stdin
        .write_all(format!("{message}\n").as_bytes())
        .await
        .map_err(|e| format!("stdin: {e}"))
}

/// The next line a channel wrote on `stream` (`None` when it closed it).
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    lines: &mut tokio::io::Lines<R>,
    stream: &str,
) -> Result<Option<String>, String> {
    lines
        .next_line()
        .await
        .map_err(|e| format!("{stream}: {e}"))
}

/// A process's resident memory in KiB (Linux), if it can be read.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
