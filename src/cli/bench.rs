//! `chatroom bench`: a load generator speaking the tools of the contract to
//! any server that has them (this one, or another of the same design), over
//! keep-alive HTTP connections, exactly as MCP clients send them.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use clap::{Args, ValueEnum};
use futures::StreamExt;
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[path = "bench_push.rs"]
mod push;
#[path = "bench_webhooks.rs"]
mod webhooks;

#[derive(Args)]
pub struct BenchArgs {
    /// Base URL of the server under test (without /mcp). Give it once per
    /// replica of one database to spread the tokens over them in turn
    /// (token 1 to the first URL, token 2 to the second, ...).
    #[arg(long = "url", env = "CHATROOM_URL", default_value = crate::config::DEFAULT_URL)]
    urls: Vec<String>,
    /// Bearer token; give several for scenarios with several agents (used in
    /// turn). Default: CHATROOM_TOKEN, as the hook and the watcher read it.
    #[arg(
        long = "token",
        env = "CHATROOM_TOKEN",
        hide_env_values = true,
        required = true
    )]
    tokens: Vec<String>,
    /// What to measure; `all` runs every scenario in turn.
    #[arg(long, value_enum, default_value = "post_message")]
    scenario: Scenario,
    /// Concurrent clients (connections, waiters or stream subscribers).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds each throughput scenario runs.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Tasks created for `claim_storm`.
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// Room to use (default: each token's default room).
    #[arg(long)]
    room: Option<String>,
    /// Skip the /healthz baseline (no ratio to the bare HTTP ceiling).
    #[arg(long)]
    no_baseline: bool,
    /// Messages to post into the room before measuring, to see how a room
    /// that already holds many behaves (compare with a run without).
    #[arg(long, default_value_t = 0)]
    prefill: u64,
    /// Messages with common words that `search` posts into the last
    /// token's room (a room the first token cannot read) before measuring.
    #[arg(long, default_value_t = 20_000)]
    foreign: u64,
    /// Backlogs `growth` measures at, in events behind (ascending).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    backlog: Vec<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    push: push::PushArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
enum Scenario {
    Baseline,
    /// Extra: `whoami`, the cheapest authenticated tool call (MCP + auth floor).
    Whoami,
    PostMessage,
    ReadMessages,
    WhatsNew,
    ClaimStorm,
    WaitWake,
    SseFanout,
    Mixed,
    /// Extra: `create_task` calls.
    CreateTask,
    /// Extra: `update_task` calls (a note each) on one task per client.
    UpdateTask,
    /// Extra: `search` from the first token's room, which holds none of the
    /// words, while the last token's room (another room) holds `--foreign`
    /// messages full of them: what a search costs should not depend on it.
    Search,
    /// Extra: how `whats_new` grows with the backlog. The first token posts
    /// (many posts at once, through `post_message`) until the second token's
    /// cursor is `--backlog` events behind, for each size in turn; at each,
    /// 15 calls one after another and 16 at once on that one cursor (as the
    /// prompt hook and the agent share one).
    Growth,
    /// Extra: `--concurrency` real `chatroom channel` processes follow the
    /// room; `--mentions` posts `@mention` their agents in turn, each timed
    /// to the notification on its channel's stdout (`bench_push.rs`).
    Channel,
    /// Extra: delivery from `post_message` to a webhook receiver, and
    /// `post_message` with 100 webhooks on the room (`bench_webhooks.rs`).
    Webhooks,
    All,
}

/// What one scenario measured.
#[derive(Debug, Clone, Serialize, Default)]
struct Report {
    scenario: String,
    concurrency: usize,
    seconds: f64,
    calls: u64,
    errors: u64,
    calls_per_s: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// When the scenario started (UTC, milliseconds), the origin of every
    /// `offset_ms` in `slowest`.
    #[serde(skip_serializing_if = "String::is_empty")]
    started: String,
    /// The slowest 0.1 % of calls (at least one), in the order they were
    /// sent: when each was sent and how long it took, to match a stall
    /// with what the server was doing then (its log, a profile).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    slowest: Vec<SlowCall>,
    /// This scenario's rate as a fraction of the /healthz baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    of_baseline: Option<f64>,
    /// Scenario-specific findings (claims, double claims, deliveries…).
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    extra: serde_json::Map<String, Value>,
}

/// One of the slowest calls of a scenario.
#[derive(Debug, Clone, Serialize)]
struct SlowCall {
    /// When it was sent, UTC wall clock with milliseconds.
    sent: String,
    /// When it was sent, in milliseconds after the scenario started.
    offset_ms: f64,
    /// How long it took.
    latency_ms: f64,
}

/// One measured call: when it was sent (microseconds after the scenario
/// started) and how long it took (microseconds).
#[derive(Debug, Clone, Copy)]
struct Sample {
    sent_us: u64,
    latency_us: u64,
}

/// The start of a scenario, on the monotonic clock that times calls and on
/// the wall clock that server logs use.
#[derive(Debug, Clone, Copy)]
struct Origin {
    at: Instant,
    wall: SystemTime,
}

impl Origin {
    fn now() -> Origin {
        Origin {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// A call sent at `sent` that came back at `done`.
    fn sample(&self, sent: Instant, done: Instant) -> Sample {
        Sample {
            sent_us: sent.saturating_duration_since(self.at).as_micros() as u64,
            latency_us: done.saturating_duration_since(sent).as_micros() as u64,
        }
    }

    /// The wall-clock time `offset_us` after the start, as the server's
    /// log prints it (UTC, RFC 3339 with milliseconds).
    fn wall_at(&self, offset_us: u64) -> String {
        let t = self.wall + Duration::from_micros(offset_us);
        let ms = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        crate::clock::fmt_ts(ms)
    }
}

/// What the server under test says about itself: the database it runs on
/// (the `x-chatroom-database` header of `/healthz`; `unknown` for a server
/// that does not send it).
async fn server_database(http: &reqwest::Client, base: &str) -> String {
    match http.get(format!("{base}/healthz")).send().await {
        Ok(r) => r
            .headers()
            .get(crate::config::DATABASE_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown")
            .to_owned(),
        Err(_) => "unknown".to_owned(),
    }
}

/// A keep-alive MCP client of one token.
#[derive(Clone)]
struct Agent {
    http: reqwest::Client,
    mcp: String,
    base: String,
    token: String,
    room: Option<String>,
}

impl Agent {
    /// Reads `whats_new` until nothing remains: this agent's cursor is then
    /// at the end of its room.
    async fn catch_up(&self) -> anyhow::Result<()> {
        loop {
            let r = self
                .call("whats_new", json!({"limit": 200}))
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            if r["remaining"].as_i64().unwrap_or(0) == 0 {
                return Ok(());
            }
        }
    }

    /// Sends one `tools/call` and reads the whole answer.
    async fn send(&self, tool: &str, mut args: Value) -> Result<(StatusCode, Bytes), String> {
        if let (Some(room), Some(obj)) = (&self.room, args.as_object_mut()) {
            obj.entry("room").or_insert(json!(room));
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let resp = self
            .http
            .post(&self.mcp)
            .bearer_auth(&self.token)
            .header("Accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("request: {}", super::cause_chain(&e)))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| format!("body: {e}"))?;
        Ok((status, bytes))
    }

    /// One `tools/call`; `Ok(structured result)` or `Err(reason)`.
    async fn call(&self, tool: &str, args: Value) -> Result<Value, String> {
        let (status, bytes) = self.send(tool, args).await?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| format!("body: {e}"))?;
        if !status.is_success() {
            return Err(format!("HTTP {status}: {v}"));
        }
        let result = &v["result"];
        if result["isError"] == json!(true) || result.is_null() {
            return Err(result["content"][0]["text"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("no result: {v}")));
        }
        if let Some(s) = result.get("structuredContent") {
            return Ok(s.clone());
        }
        let text = result["content"][0]["text"].as_str().ok_or("no result")?;
        serde_json::from_str(text).map_err(|e| format!("result: {e}"))
    }

    /// One `tools/call` whose result is not needed, only that it succeeded.
    async fn call_ok(&self, tool: &str, args: Value) -> Result<(), String> {
        self.call_as::<serde::de::IgnoredAny>(tool, args)
            .await
            .map(drop)
    }

    /// One `tools/call` whose structured result is read straight into `T`
    /// (fields `T` lacks are skipped, not built), so the loader, which shares
    /// the machine with the server, spends little on answers.
    async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        tool: &str,
        args: Value,
    ) -> Result<T, String> {
        #[derive(Deserialize)]
        struct Answer<T> {
            result: Option<Outcome<T>>,
        }
        #[derive(Deserialize)]
        struct Outcome<T> {
            #[serde(rename = "isError", default)]
            is_error: bool,
            #[serde(rename = "structuredContent")]
            structured: Option<T>,
        }
        let (status, bytes) = self.send(tool, args).await?;
        match serde_json::from_slice::<Answer<T>>(&bytes) {
            Ok(Answer {
                result:
                    Some(Outcome {
                        is_error: false,
                        structured: Some(v),
                    }),
            }) if status.is_success() => Ok(v),
            _ => Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(500)])
            )),
        }
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.concurrency == 0 || args.duration <= 0.0 {
        anyhow::bail!("--concurrency and --duration must be positive");
    }
    let bases: Vec<String> = args
        .urls
        .iter()
        .map(|u| u.trim_end_matches('/').trim_end_matches("/mcp").to_owned())
        .collect();
    let base = bases.join(", ");
    let http = crate::tls::client_builder()
        .pool_max_idle_per_host(args.concurrency * 2 + 8)
        .tcp_nodelay(true)
        .build()?;
    let agents: Vec<Agent> = args
        .tokens
        .iter()
        .zip(bases.iter().cycle())
        .map(|(t, base)| Agent {
            http: http.clone(),
            mcp: format!("{base}/mcp"),
            base: base.clone(),
            token: t.clone(),
            room: args.room.clone(),
        })
        .collect();
    let database = server_database(&http, &bases[0]).await;
    // Fail fast on a bad URL or token, with a tool every server of this
    // design has (ChatRoomMCP has no `whoami`), so both can be measured.
    for a in &agents {
        a.call("read_messages", json!({"limit": 1}))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "a first call (read_messages) failed for a token ({e}); is the server up and the token valid?{}",
                    limit_hint(&e)
                )
            })?;
    }
    if args.prefill > 0 {
        prefill(&agents, args.concurrency, args.prefill).await?;
    }
    let scenarios = match args.scenario {
        Scenario::All => vec![
            Scenario::PostMessage,
            Scenario::ReadMessages,
            Scenario::WhatsNew,
            Scenario::ClaimStorm,
            Scenario::WaitWake,
            Scenario::SseFanout,
            Scenario::Mixed,
        ],
        Scenario::Baseline => vec![],
        s => vec![s],
    };
    let duration = Duration::from_secs_f64(args.duration);
    let load = Load {
        agents: &agents,
        concurrency: args.concurrency,
        duration,
        min_steps: 0,
    };
    let mut reports = Vec::new();
    let baseline = if args.no_baseline && args.scenario != Scenario::Baseline {
        None
    } else {
        let r = throughput("baseline", load, |a, _| async move {
            let r = a
                .http
                .get(format!("{}/healthz", a.base))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if r.status().is_success() {
                Ok(())
            } else {
                Err(format!("HTTP {}", r.status()))
            }
        })
        .await;
        let rate = r.calls_per_s;
        reports.push(r);
        Some(rate)
    };
    for s in scenarios {
        let mut r = match s {
            Scenario::Whoami => {
                throughput("whoami", load, |a, _| async move {
                    a.call_ok("whoami", json!({})).await
                })
                .await
            }
            Scenario::PostMessage => {
                throughput("post_message", load, |a, i| async move {
                    a.call_ok(
                        "post_message",
                        json!({"body": format!("bench message {i}")}),
                    )
                    .await
                })
                .await
            }
            Scenario::ReadMessages => {
                seed_messages(&agents[0], 100).await?;
                throughput("read_messages", load, |a, _| async move {
                    a.call_ok("read_messages", json!({"limit": 50})).await
                })
                .await
            }
            Scenario::WhatsNew => {
                throughput("whats_new", load, |a, _| async move {
                    a.call_ok("whats_new", json!({"limit": 50})).await
                })
                .await
            }
            Scenario::ClaimStorm => claim_storm(&agents, args.concurrency, args.tasks).await?,
            Scenario::WaitWake => wait_wake(&agents, args.concurrency).await?,
            Scenario::SseFanout => sse_fanout(&agents, args.concurrency).await?,
            Scenario::Mixed => {
                let steps = Steps::default();
                let each = steps.clone();
                let mut r = throughput(
                    "mixed",
                    Load {
                        min_steps: MIXED_CYCLE,
                        ..load
                    },
                    move |a, i| {
                        let each = each.clone();
                        async move {
                            let t = Instant::now();
                            let (step, r) = mixed_step(&a, i).await;
                            each.record(step, t.elapsed());
                            r
                        }
                    },
                )
                .await;
                r.extra.insert("steps".into(), steps.summary());
                r
            }
            Scenario::CreateTask => {
                throughput("create_task", load, |a, i| async move {
                    a.call_ok("create_task", json!({"title": format!("bench task {i}")}))
                        .await
                })
                .await
            }
            Scenario::UpdateTask => {
                let mut ids = Vec::new();
                for w in 0..args.concurrency {
                    let a = &agents[w % agents.len()];
                    let t = a
                        .call("create_task", json!({"title": format!("updated {w}")}))
                        .await
                        .map_err(|e| anyhow::anyhow!(e))?;
                    ids.push(t["created"]["id"].clone());
                }
                let ids = Arc::new(ids);
                throughput("update_task", load, move |a, i| {
                    let id = ids[(i / 1_000_000) as usize % ids.len()].clone();
                    async move {
                        a.call_ok("update_task", json!({"task_id": id, "note": "progress"}))
                            .await
                    }
                })
                .await
            }
            Scenario::Search => search(&agents, args.concurrency, duration, args.foreign).await?,
            Scenario::Growth => growth(&agents, args.concurrency, &args.backlog, args.json).await?,
            Scenario::Channel => push::channel(&agents, args.concurrency, &args.push).await?,
            Scenario::Webhooks => webhooks::run(&agents, args.concurrency, duration).await?,
            Scenario::All | Scenario::Baseline => unreachable!(),
        };
        if let Some(b) = baseline
            && b > 0.0
            && r.calls_per_s > 0.0
        {
            r.of_baseline = Some(r.calls_per_s / b);
        }
        reports.push(r);
    }
    let failed = reports.iter().any(|r| {
        r.errors > 0
            || r.extra
                .get("double_claims")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                > 0
    });
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "url": bases[0],
                "urls": bases,
                "server": {"database": database},
                "reports": reports
            }))?
        );
    } else {
        println!("server {base}, database: {database}");
        print_table(&reports);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_table(reports: &[Report]) {
    println!(
        "{:<14} {:>5} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9}",
        "scenario",
        "conc",
        "calls",
        "calls/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "errors",
        "of /healthz"
    );
    for r in reports {
        println!(
            "{:<14} {:>5} {:>9} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7} {:>9}",
            r.scenario,
            r.concurrency,
            r.calls,
            r.calls_per_s,
            r.p50_ms,
            r.p95_ms,
            r.p99_ms,
            r.max_ms,
            r.errors,
            r.of_baseline
                .map(|f| format!("{:.1}%", f * 100.0))
                .unwrap_or_default()
        );
        for (k, v) in &r.extra {
            println!("{:<14} {k}: {v}", "");
        }
    }
    for r in reports.iter().filter(|r| !r.slowest.is_empty()) {
        println!(
            "\n{}: the slowest {} of {} calls (started {}), in the order sent",
            r.scenario,
            r.slowest.len(),
            r.calls,
            r.started
        );
        println!("  {:<24} {:>10} {:>10}", "sent (UTC)", "+ms", "took ms");
        for c in &r.slowest {
            println!(
                "  {:<24} {:>10.1} {:>10.2}",
                c.sent, c.offset_ms, c.latency_ms
            );
        }
    }
}

impl Report {
    /// The report of a scenario whose every call is one of `samples`
    /// (`errors` of them failed), over `seconds`.
    fn of_samples(
        scenario: &str,
        concurrency: usize,
        seconds: f64,
        errors: u64,
        origin: Origin,
        samples: Vec<Sample>,
    ) -> Report {
        let mut r = Report {
            scenario: scenario.to_owned(),
            concurrency,
            seconds,
            calls: samples.len() as u64,
            errors,
            ..Report::default()
        };
        fill_latencies(&mut r, origin, samples);
        r
    }
}

/// Latency percentiles of `samples`, in milliseconds, and the slowest
/// 0.1 % of them (at least one) with the time each was sent.
fn fill_latencies(r: &mut Report, origin: Origin, mut samples: Vec<Sample>) {
    if samples.is_empty() {
        return;
    }
    samples.sort_unstable_by_key(|s| s.latency_us);
    let pick = |q: f64| {
        samples[((samples.len() as f64 - 1.0) * q).round() as usize].latency_us as f64 / 1000.0
    };
    r.p50_ms = pick(0.50);
    r.p95_ms = pick(0.95);
    r.p99_ms = pick(0.99);
    r.max_ms = samples.last().map_or(0, |s| s.latency_us) as f64 / 1000.0;
    let n = samples.len().div_ceil(1000);
    let mut slowest = samples.split_off(samples.len() - n);
    slowest.sort_unstable_by_key(|s| s.sent_us);
    r.started = origin.wall_at(0);
    r.slowest = slowest
        .into_iter()
        .map(|s| SlowCall {
            sent: origin.wall_at(s.sent_us),
            offset_ms: s.sent_us as f64 / 1000.0,
            latency_ms: s.latency_us as f64 / 1000.0,
        })
        .collect();
}

/// What a throughput run puts on the server: `concurrency` workers, taking
/// turns over `agents`, stepping for `duration`, and each at least
/// `min_steps` times however long they take (`mixed` reports every one of
/// its steps, also on a slow machine or with a short `--duration`).
#[derive(Clone, Copy)]
struct Load<'a> {
    agents: &'a [Agent],
    concurrency: usize,
    duration: Duration,
    min_steps: u64,
}

/// Runs `step` as `load` says, with a progress line.
async fn throughput<F, Fut>(name: &str, load: Load<'_>, step: F) -> Report
where
    F: Fn(Agent, u64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let Load {
        agents,
        concurrency,
        duration,
        min_steps,
    } = load;
    let calls = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let first_error: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let origin = Origin::now();
    let started = origin.at;
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let agent = agents[w % agents.len()].clone();
        let (calls, errors, stop, step, first_error) = (
            calls.clone(),
            errors.clone(),
            stop.clone(),
            step.clone(),
            first_error.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            let first = w as u64 * 1_000_000;
            let mut i = first;
            while !stop.load(Ordering::Relaxed) || i - first < min_steps {
                let t = Instant::now();
                let r = step(agent.clone(), i).await;
                lat.push(origin.sample(t, Instant::now()));
                calls.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = r {
                    errors.fetch_add(1, Ordering::Relaxed);
                    first_error.lock().unwrap().get_or_insert(e);
                }
                i += 1;
            }
            lat
        }));
    }
    let deadline = started + duration;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1000).min(deadline - Instant::now())).await;
        let n = calls.load(Ordering::Relaxed);
        let t = started.elapsed().as_secs_f64();
        eprint!(
            "\r{name:<14} {t:>5.1}s {n:>9} calls {:>8.0}/s errors {}   ",
            n as f64 / t,
            errors.load(Ordering::Relaxed)
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for w in workers {
        samples.extend(w.await.unwrap_or_default());
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!();
    if let Some(e) = first_error.lock().unwrap().take() {
        eprintln!("{name}: first error: {e}{}", limit_hint(&e));
    }
    let mut r = Report {
        scenario: name.to_owned(),
        concurrency,
        seconds,
        calls: calls.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        ..Report::default()
    };
    r.calls_per_s = r.calls as f64 / seconds;
    fill_latencies(&mut r, origin, samples);
    r
}

/// What to do when an error says the server is limiting the load: a bench
/// measures the server, not its per-token limits.
fn limit_hint(error: &str) -> &'static str {
    if error.contains("429") || error.contains("rate_limited") || error.contains("rate limit") {
        "\n  the server limits calls per token: run it with CHATROOM_RATE_LIMIT_PER_MINUTE=0 \
         CHATROOM_MAX_IN_FLIGHT=0 CHATROOM_MAX_CONNECTIONS_PER_IP=0 \
         (and CHATROOM_MAX_STREAMS_PER_TOKEN=0 for the waiter and stream scenarios)"
    } else if error.contains("too_many_streams") || error.contains("streams") {
        "\n  the server caps streams per token: run it with CHATROOM_MAX_STREAMS_PER_TOKEN=0"
    } else {
        ""
    }
}

/// Posts `n` messages from `concurrency` clients, with a progress line.
async fn prefill(agents: &[Agent], concurrency: usize, n: u64) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let progress = {
        let next = next.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let done = next.load(Ordering::Relaxed).min(n);
                let t = started.elapsed().as_secs_f64();
                eprint!("\rprefill        {t:>5.1}s {done:>9} of {n} messages   ");
            }
        })
    };
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (agent, next) = (agents[w % agents.len()].clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<(), String>(());
                    }
                    agent
                        .call_ok(
                            "post_message",
                            json!({"body": format!("prefill message {i}")}),
                        )
                        .await?;
                }
            })
        })
        .collect();
    let mut outcome = Ok(());
    for w in workers {
        if let Err(e) = w.await? {
            outcome = Err(anyhow::anyhow!("prefill: {e}"));
        }
    }
    progress.abort();
    eprintln!();
    outcome
}

/// `growth`: see [`Scenario::Growth`]. The report's latencies are the
/// single calls' at every size; `extra.sizes` has each size's median and
/// the 16 callers' p99.
async fn growth(
    agents: &[Agent],
    concurrency: usize,
    sizes: &[u64],
    json: bool,
) -> anyhow::Result<Report> {
    const ONE_BY_ONE: usize = 15;
    const AT_ONCE: usize = 16;
    const PAGE: i64 = 50;
    let [poster, reader, ..] = agents else {
        anyhow::bail!(
            "growth needs two --token of one room: a poster and a reader (another agent)"
        );
    };
    if sizes.is_empty() || sizes.windows(2).any(|w| w[0] >= w[1]) {
        anyhow::bail!("--backlog takes ascending sizes, e.g. 1000,10000,100000");
    }
    // The reader starts at the end of the room.
    reader.catch_up().await?;
    let origin = Origin::now();
    let timed = async |a: &Agent| {
        let sent = Instant::now();
        let r = a.call_ok("whats_new", json!({"limit": PAGE})).await;
        (r, origin.sample(sent, Instant::now()))
    };
    let (mut samples, mut rows, mut errors) = (Vec::new(), Vec::new(), 0);
    let mut behind = 0u64;
    for &size in sizes {
        let seeded = Instant::now();
        prefill(std::slice::from_ref(poster), concurrency, size - behind).await?;
        let seed_s = seeded.elapsed().as_secs_f64();
        let mut single = Vec::new();
        for _ in 0..ONE_BY_ONE {
            let (r, s) = timed(reader).await;
            errors += u64::from(r.is_err());
            single.push(s.latency_us);
            samples.push(s);
        }
        let mut shared: Vec<u64> = futures::future::join_all((0..AT_ONCE).map(|_| timed(reader)))
            .await
            .into_iter()
            .map(|(r, s)| {
                errors += u64::from(r.is_err());
                s.latency_us
            })
            .collect();
        single.sort_unstable();
        shared.sort_unstable();
        let median_ms = single[single.len() / 2] as f64 / 1000.0;
        let p99_ms = shared[((shared.len() - 1) as f64 * 0.99).round() as usize] as f64 / 1000.0;
        if !json {
            println!(
                "growth {size:>8} behind: whats_new median {median_ms:>7.2} ms, {AT_ONCE} at once p99 {p99_ms:>7.2} ms (seeded in {seed_s:.1} s)"
            );
        }
        rows.push(json!({"behind": size, "median_ms": median_ms, "at_once_p99_ms": p99_ms, "seed_s": seed_s}));
        behind = size - ((ONE_BY_ONE + AT_ONCE) as u64 * PAGE as u64).min(size);
    }
    let seconds = origin.at.elapsed().as_secs_f64();
    let mut r = Report::of_samples("growth", AT_ONCE, seconds, errors, origin, samples);
    r.extra.insert("sizes".into(), Value::Array(rows));
    Ok(r)
}

/// The words of the foreign room's messages, and of every search.
const COMMON_WORDS: &str = "alpha bravo charlie delta echo foxtrot golf hotel";

/// `search`: fills the last token's room with `foreign` messages of
/// [`COMMON_WORDS`], then searches them from the first token's room, which
/// must be another one (and should hold none of them): one word, then all
/// eight, in turn.
async fn search(
    agents: &[Agent],
    concurrency: usize,
    duration: Duration,
    foreign: u64,
) -> anyhow::Result<Report> {
    let (searcher, filler) = match agents {
        [first, .., last] => (first.clone(), last.clone()),
        _ => anyhow::bail!(
            "search needs two tokens of different rooms: --token SEARCHER --token FOREIGN"
        ),
    };
    let room_of = |a: Agent| async move {
        a.call("whoami", json!({}))
            .await
            .map(|w| {
                a.room
                    .clone()
                    .unwrap_or_else(|| w["room"].as_str().unwrap_or_default().to_owned())
            })
            .map_err(|e| anyhow::anyhow!("whoami: {e}"))
    };
    let (mine, theirs) = (
        room_of(searcher.clone()).await?,
        room_of(filler.clone()).await?,
    );
    if mine == theirs {
        anyhow::bail!(
            "search needs the first and the last token in different rooms (both are in {mine:?})"
        );
    }
    let filler = Agent {
        room: Some(theirs),
        ..filler
    };
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (agent, next) = (filler.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= foreign {
                        return Ok::<(), String>(());
                    }
                    let body = format!("{COMMON_WORDS} {i}");
                    agent.call_ok("post_message", json!({"body": body})).await?;
                }
            })
        })
        .collect();
    for w in workers {
        w.await?
            .map_err(|e| anyhow::anyhow!("filling the foreign room: {e}"))?;
    }
    eprintln!(
        "search         {foreign} foreign messages in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let one = [searcher];
    let load = Load {
        agents: &one,
        concurrency,
        duration,
        min_steps: 0,
    };
    let mut r = throughput("search", load, |a, i| async move {
        let query = if i % 2 == 0 { "alpha" } else { COMMON_WORDS };
        a.call_ok("search", json!({"query": query, "limit": 20}))
            .await
    })
    .await;
    r.extra.insert("foreign_messages".into(), json!(foreign));
    Ok(r)
}

async fn seed_messages(agent: &Agent, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        agent
            .call("post_message", json!({"body": format!("seed {i}")}))
            .await
            .map_err(|e| anyhow::anyhow!("seeding: {e}"))?;
    }
    Ok(())
}

/// How many steps make one round of `mixed`'s kinds ([`mixed_step`]).
const MIXED_CYCLE: u64 = 10;

/// One step of a plausible agent: mostly reading, some chat, some board work.
/// One step of `mixed` and what it was (a task's step is three calls:
/// create and claim, a note, the result).
async fn mixed_step(a: &Agent, i: u64) -> (&'static str, Result<(), String>) {
    match i % MIXED_CYCLE {
        0..=2 => (
            "whats_new",
            a.call_ok("whats_new", json!({"limit": 20})).await,
        ),
        3 => (
            "read_messages",
            a.call_ok("read_messages", json!({"limit": 20})).await,
        ),
        4 | 5 => (
            "post_message",
            a.call_ok(
                "post_message",
                json!({"body": format!("status update {i}")}),
            )
            .await,
        ),
        6 => (
            "list_tasks",
            a.call_ok("list_tasks", json!({"status": "open", "limit": 20}))
                .await,
        ),
        7 => ("task (3 calls)", mixed_task(a, i).await),
        8 => ("get_room_info", a.call_ok("get_room_info", json!({})).await),
        _ => (
            "search",
            a.call_ok("search", json!({"query": "status"})).await,
        ),
    }
}

async fn mixed_task(a: &Agent, i: u64) -> Result<(), String> {
    let t = a
        .call(
            "create_task",
            json!({"title": format!("task {i}"), "claim": true}),
        )
        .await?;
    let id = t["created"]["id"].clone();
    a.call("add_note", json!({"task_id": id, "body": "on it"}))
        .await?;
    a.call_ok("submit_result", json!({"task_id": id, "result": "done"}))
        .await
}

/// Latencies of `mixed` by step, so its tail can be told apart.
#[derive(Clone, Default)]
struct Steps(Arc<std::sync::Mutex<HashMap<&'static str, Vec<u32>>>>);

impl Steps {
    fn record(&self, step: &'static str, took: Duration) {
        let us = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let mut steps = self.0.lock().unwrap_or_else(|p| p.into_inner());
        steps.entry(step).or_default().push(us);
    }

    /// `{step: {calls, p50_ms, p99_ms}}`.
    fn summary(&self) -> Value {
        let mut steps = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = serde_json::Map::new();
        for (step, lat) in steps.iter_mut() {
            lat.sort_unstable();
            let pick =
                |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
            out.insert(
                (*step).to_owned(),
                json!({"calls": lat.len(), "p50_ms": pick(0.5), "p99_ms": pick(0.99)}),
            );
        }
        Value::Object(out)
    }
}

/// Creates `tasks` tasks, then every agent claims them all concurrently;
/// checks that no task was won twice and that every task has one holder.
async fn claim_storm(agents: &[Agent], concurrency: usize, tasks: usize) -> anyhow::Result<Report> {
    let creator = &agents[0];
    let mut ids = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let t = creator
            .call("create_task", json!({"title": format!("storm {i}")}))
            .await
            .map_err(|e| anyhow::anyhow!("creating tasks: {e}"))?;
        ids.push(t["created"]["id"].as_i64().unwrap_or_default());
    }
    let ids = Arc::new(ids);
    let origin = Origin::now();
    let started = origin.at;
    let mut workers = Vec::new();
    for w in 0..concurrency {
        let agent = agents[w % agents.len()].clone();
        let ids = ids.clone();
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut wins = Vec::new();
            let mut errors = 0u64;
            let n = ids.len();
            for k in 0..n {
                let id = ids[(k + w * n / concurrency.max(1)) % n];
                let t = Instant::now();
                match agent.call("claim_task", json!({"task_id": id})).await {
                    Ok(r) if r["claimed"] == json!(true) => {
                        wins.push((id, r["task"]["assignee"].as_str().unwrap_or("").to_owned()))
                    }
                    Ok(_) => {}
                    Err(_) => errors += 1,
                }
                lat.push(origin.sample(t, Instant::now()));
            }
            (lat, wins, errors)
        }));
    }
    let mut samples = Vec::new();
    let mut winners: HashMap<i64, Vec<String>> = HashMap::new();
    let mut errors = 0;
    for w in workers {
        let (lat, wins, e) = w.await?;
        samples.extend(lat);
        errors += e;
        for (id, who) in wins {
            winners.entry(id).or_default().push(who);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let double = winners.values().filter(|w| w.len() > 1).count();
    let claimed = winners.len();
    // Every task is now held by the one agent that won it.
    let mut mismatched = 0;
    for (id, who) in &winners {
        let t = creator
            .call("get_task", json!({"task_id": id}))
            .await
            .unwrap_or_default();
        if t["task"]["assignee"].as_str() != Some(who[0].as_str()) {
            mismatched += 1;
        }
    }
    let mut r = Report::of_samples("claim_storm", concurrency, seconds, errors, origin, samples);
    r.calls_per_s = r.calls as f64 / seconds;
    r.extra.insert("tasks".into(), json!(tasks));
    r.extra.insert("claimed".into(), json!(claimed));
    r.extra.insert(
        "claims_per_s".into(),
        json!((claimed as f64 / seconds).round()),
    );
    r.extra.insert("double_claims".into(), json!(double));
    r.extra
        .insert("holder_mismatches".into(), json!(mismatched));
    if double > 0 || mismatched > 0 || claimed != tasks {
        r.errors += 1;
    }
    Ok(r)
}

/// Parks `n` `wait_for_change` calls, posts once, and times how long after
/// the post's reply each waiter is back.
async fn wait_wake(agents: &[Agent], n: usize) -> anyhow::Result<Report> {
    if agents.len() < 2 {
        anyhow::bail!(
            "wait_wake needs at least two --token (a poster and waiters of other agents)"
        );
    }
    let poster = agents[0].clone();
    let waiters: Vec<Agent> = agents[1..].to_vec();
    for w in &waiters {
        // Bring each waiter's cursor to the end so the wait really parks.
        w.catch_up().await?;
    }
    let origin = Origin::now();
    let mut handles = Vec::new();
    for i in 0..n {
        let w = waiters[i % waiters.len()].clone();
        handles.push(tokio::spawn(async move {
            #[derive(Deserialize)]
            struct Waited {
                changed: bool,
            }
            let r = w
                .call_as::<Waited>("wait_for_change", json!({"timeout_s": 60}))
                .await;
            (Instant::now(), r.map(|v| v.changed))
        }));
    }
    // Let every waiter park; the server gives no signal for that.
    tokio::time::sleep(Duration::from_millis(500 + n as u64)).await;
    let sent = Instant::now();
    poster
        .call("post_message", json!({"body": "wake up"}))
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let posted = Instant::now();
    let mut samples = Vec::new();
    let mut from_send = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (at, r) = h.await?;
        match r {
            Ok(true) => {
                // Each waiter's "call" is the post: sent at `sent`.
                let sent_us = origin.sample(sent, sent).sent_us;
                samples.push(Sample {
                    sent_us,
                    latency_us: at.saturating_duration_since(posted).as_micros() as u64,
                });
                from_send.push(origin.sample(sent, at));
            }
            _ => errors += 1,
        }
    }
    let mut r = delivery_report(
        "wait_wake",
        n,
        origin,
        samples,
        errors,
        "time from the post's reply to each waiter's reply (0 when a waiter was back first)",
    );
    // The same from the moment the post was sent, which does not depend on
    // whether the post's own reply or the waiters' came back first.
    let mut sent_report = Report::default();
    fill_latencies(&mut sent_report, origin, from_send);
    r.extra
        .insert("from_send_p50_ms".into(), json!(sent_report.p50_ms));
    r.extra
        .insert("from_send_p99_ms".into(), json!(sent_report.p99_ms));
    r.extra.insert(
        "post_reply_ms".into(),
        json!(posted.duration_since(sent).as_secs_f64() * 1000.0),
    );
    Ok(r)
}

/// Opens `n` `/v1/stream` subscribers, posts once, and times the delivery of
/// the post's `activity` event to each.
async fn sse_fanout(agents: &[Agent], n: usize) -> anyhow::Result<Report> {
    let poster = agents[0].clone();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(n.max(1));
    let marker = format!("fanout-{}", std::process::id());
    let mut handles = Vec::new();
    for i in 0..n {
        let a = agents[i % agents.len()].clone();
        let ready = ready_tx.clone();
        let marker = marker.clone();
        handles.push(tokio::spawn(async move {
            let mut url = format!("{}/v1/stream?after=now", a.base);
            if let Some(room) = &a.room {
                url.push_str(&format!("&room={room}"));
            }
            let resp = a
                .http
                .get(url)
                .bearer_auth(&a.token)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !resp.status().is_success() {
                return Err(format!("HTTP {}", resp.status()));
            }
            let _ = ready.send(()).await;
            let mut body = resp.bytes_stream();
            let mut buf = String::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, body.next()).await {
                let chunk = chunk.map_err(|e| e.to_string())?;
                buf.push_str(&String::from_utf8_lossy(&chunk));
                if buf.contains(&marker) {
                    return Ok(Instant::now());
                }
            }
            Err("no delivery within 30 s".into())
        }));
    }
    drop(ready_tx);
    let mut connected = 0;
    while connected < n {
        match tokio::time::timeout(Duration::from_secs(30), ready_rx.recv()).await {
            Ok(Some(())) => connected += 1,
            _ => break,
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let origin = Origin::now();
    let started = origin.at;
    poster
        .call("post_message", json!({"body": marker}))
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let mut samples = Vec::new();
    let mut errors = (n - connected) as u64;
    let mut first_error = None;
    for h in handles {
        match h.await? {
            Ok(at) => samples.push(origin.sample(started, at)),
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        eprintln!("sse_fanout: first error: {e}");
    }
    Ok(delivery_report(
        "sse_fanout",
        n,
        origin,
        samples,
        errors,
        "time from sending the post to each subscriber's delivery",
    ))
}

/// The report of a one-shot delivery scenario: latencies of `n` deliveries.
fn delivery_report(
    name: &str,
    n: usize,
    origin: Origin,
    samples: Vec<Sample>,
    errors: u64,
    measures: &str,
) -> Report {
    let seconds = origin.at.elapsed().as_secs_f64();
    let mut r = Report::of_samples(name, n, seconds, errors, origin, samples);
    r.extra.insert("measures".into(), json!(measures));
    r
}
