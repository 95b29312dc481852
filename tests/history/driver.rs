//! The workload driver of `tests/history`: real `chatroom serve` processes
//! (one on SQLite, or several replicas on one PostgreSQL database), N
//! concurrent clients calling the board and chat tools over MCP, and faults
//! injected on loopback while they run. Every call is written to a history
//! file (JSON lines) with its invocation and completion time and its result:
//! `ok`, `refused` (the server answered no, and wrote nothing), or `unknown`
//! (a timeout, a lost connection, an internal error: it may or may not have
//! taken effect). A call that never reached a server (connection refused) is
//! not a call and is only counted. The checker (`tests/history/checker`)
//! decides whether the history is linearizable.
//!
//! `history_driver run …` drives one history; `history_driver pauser …` is
//! the paused agent of the lease fault, a process of its own so that it can
//! be stopped with SIGSTOP while it holds a claim.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The room every client works in.
const ROOM: &str = "lobby";
/// How long a call may take before its outcome is `unknown`.
const CALL_TIMEOUT: Duration = Duration::from_secs(4);
/// The lease of the paused agent's claim, and of some clients' claims.
const LEASE_SECONDS: i64 = 1;

#[derive(Parser)]
#[command(about = "Recorded histories of the board and chat under faults")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the servers, run the clients and the faults, write the history.
    Run(RunArgs),
    /// The agent the lease fault pauses (started by `run`).
    Pauser(PauserArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// sqlite or postgres.
    #[arg(long, default_value = "sqlite")]
    backend: String,
    /// How long the clients run.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// The history file (JSON lines).
    #[arg(long)]
    out: PathBuf,
    /// The `chatroom` binary to run.
    #[arg(long)]
    bin: PathBuf,
    /// A folder for the databases and the servers' logs.
    #[arg(long)]
    dir: PathBuf,
    /// PostgreSQL's maintenance database URL (postgres backend).
    #[arg(long)]
    pg_url: Option<String>,
    /// A shell command that restarts PostgreSQL (the pg-restart fault).
    #[arg(long)]
    pg_restart: Option<String>,
    /// Replicas on PostgreSQL.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Open tasks the clients contend for.
    #[arg(long, default_value_t = 6)]
    tasks: usize,
    /// Mean time between two faults.
    #[arg(long, default_value_t = 6000)]
    fault_every_ms: u64,
    /// The faults to inject (comma-separated); empty: every fault the backend has.
    #[arg(long, default_value = "")]
    faults: String,
}

#[derive(clap::Args)]
struct PauserArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    token: String,
    #[arg(long)]
    task: i64,
}

/// Microseconds since the epoch: one clock for the driver and the pauser.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// splitmix64: a seeded, reproducible choice of operations and faults.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The history file: one JSON object a line, written as calls complete.
struct History {
    out: Mutex<Box<dyn Write + Send>>,
    ops: AtomicU64,
    faults: AtomicU64,
    unsent: AtomicU64,
}

impl History {
    fn create(path: &Path) -> History {
        History::to(Box::new(std::fs::File::create(path).expect("history file")))
    }
    /// Each line is written through at once: a killed driver keeps its history.
    fn to(out: Box<dyn Write + Send>) -> History {
        History {
            out: Mutex::new(out),
            ops: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            unsent: AtomicU64::new(0),
        }
    }
    fn write(&self, v: &Value) {
        if v["kind"] == "op" {
            self.ops.fetch_add(1, Ordering::Relaxed);
        } else if v["kind"] == "fault" {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        let mut out = self.out.lock().unwrap();
        writeln!(out, "{v}").expect("history write");
        out.flush().expect("history flush");
    }
    fn flush(&self) {
        self.out.lock().unwrap().flush().expect("history flush");
    }
}

/// How a call ended.
enum Outcome {
    /// A tool result that is not an error.
    Ok(Value),
    /// A tool error that says nothing was written (its code and message).
    Refused(String, String),
    /// No answer, or an answer that does not say whether it was written.
    Unknown(String),
    /// The request never reached a server.
    NotSent,
}

/// One MCP client: a bearer token, plain JSON-RPC over HTTP.
#[derive(Clone)]
struct Client {
    name: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    fn new(name: &str, token: &str) -> Client {
        Client {
            name: name.to_owned(),
            token: token.to_owned(),
            http: reqwest::Client::builder()
                .timeout(CALL_TIMEOUT)
                .build()
                .expect("http client"),
        }
    }

    async fn call(&self, base: &str, tool: &str, args: Value) -> Outcome {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}});
        let resp = match self
            .http
            .post(format!("{base}/mcp"))
            .bearer_auth(&self.token)
            .header("Accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Outcome::NotSent,
            Err(e) => return Outcome::Unknown(format!("send: {e}")),
        };
        let status = resp.status().as_u16();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) => return Outcome::Unknown(format!("body: {e}")),
        };
        if status == 429 {
            return Outcome::NotSent;
        }
        if status != 200 {
            return Outcome::Unknown(format!("HTTP {status}"));
        }
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            return Outcome::Unknown("not JSON".into());
        };
        let result = &v["result"];
        let Some(text) = result["content"][0]["text"].as_str() else {
            return Outcome::Unknown(format!("no tool result: {v}"));
        };
        let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        if result["isError"] == json!(true) {
            let code = body["error"]["code"].as_str().unwrap_or("").to_owned();
            // Not written, for certain: the domain refused before writing.
            return match code.as_str() {
                "conflict" | "forbidden" | "not_found" | "invalid_argument" => {
                    let msg = body["error"]["message"].as_str().unwrap_or("").to_owned();
                    Outcome::Refused(code, msg)
                }
                _ => Outcome::Unknown(format!("error {code}")),
            };
        }
        Outcome::Ok(body)
    }
}

/// A task as an answer shows it: what the checker's model compares.
fn observed(task: &Value) -> Value {
    json!({
        "status": task["status"],
        "assignee": task["assignee"],
        "version": task["version"],
    })
}

/// Calls `tool` and records it: `rec` is the operation's own fields,
/// `read` turns an `ok` answer into (result, fields to record). Returns the
/// answer, or `None` when the call did not reach a server.
async fn record(
    h: &History,
    c: &Client,
    base: &str,
    tool: &str,
    args: Value,
    mut rec: Value,
    read: impl Fn(&Value) -> (&'static str, Value),
) -> Option<Outcome> {
    let call = now_us();
    let out = c.call(base, tool, args).await;
    let ret = now_us();
    rec["kind"] = json!("op");
    rec["client"] = json!(c.name);
    rec["call"] = json!(call);
    rec["ret"] = json!(ret);
    match &out {
        Outcome::NotSent => {
            h.unsent.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Outcome::Ok(body) => {
            let (res, fields) = read(body);
            rec["res"] = json!(res);
            if let (Value::Object(r), Value::Object(f)) = (&mut rec, fields) {
                r.extend(f);
            }
        }
        Outcome::Refused(code, msg) => {
            rec["res"] = json!("refused");
            rec["code"] = json!(code);
            rec["why"] = json!(msg);
        }
        Outcome::Unknown(why) => {
            rec["res"] = json!("unknown");
            rec["why"] = json!(why);
        }
    }
    h.write(&rec);
    Some(out)
}

/// A task change answered with a flag (`claimed`, `released`, `updated`):
/// `ok` with the task written, or `refused` with the task as it is.
fn soft(flag: &'static str, current: &'static str) -> impl Fn(&Value) -> (&'static str, Value) {
    move |b| {
        if b[flag] == json!(true) {
            ("ok", json!({"t": observed(&b["task"])}))
        } else {
            (
                "refused",
                json!({"t": observed(&b[current]), "reason": b["reason"]}),
            )
        }
    }
}

/// The version an answer shows, if any.
fn version_of(out: &Outcome, key: &str) -> Option<i64> {
    match out {
        Outcome::Ok(b) => b[key]["version"].as_i64(),
        _ => None,
    }
}

/// Board calls, recorded.
impl Client {
    async fn claim(
        &self,
        h: &History,
        base: &str,
        task: i64,
        lease: Option<i64>,
    ) -> Option<Outcome> {
        let mut args = json!({"task_id": task});
        if let Some(l) = lease {
            args["lease_seconds"] = json!(l);
        }
        record(
            h,
            self,
            base,
            "claim_task",
            args,
            json!({"op": "claim", "task": task, "lease": lease}),
            soft("claimed", "task"),
        )
        .await
    }
    async fn release(&self, h: &History, base: &str, task: i64) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "release_task",
            json!({"task_id": task}),
            json!({"op": "release", "task": task}),
            soft("released", "task"),
        )
        .await
    }
    async fn update(
        &self,
        h: &History,
        base: &str,
        task: i64,
        expected: i64,
        note: &str,
    ) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "update_task",
            json!({"task_id": task, "expected_version": expected, "note": note}),
            json!({"op": "update", "task": task, "expected": expected}),
            soft("updated", "current"),
        )
        .await
    }
    async fn submit(&self, h: &History, base: &str, task: i64) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "submit_result",
            json!({"task_id": task, "result": "done"}),
            json!({"op": "submit", "task": task}),
            |b| ("ok", json!({"t": observed(&b["task"])})),
        )
        .await
    }
    async fn read_task(&self, h: &History, base: &str, task: i64) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "get_task",
            json!({"task_id": task}),
            json!({"op": "read", "task": task}),
            |b| ("ok", json!({"t": observed(&b["task"])})),
        )
        .await
    }
    /// Creates a task; its id when the answer says it.
    async fn create(&self, h: &History, base: &str, title: &str) -> Option<i64> {
        let out = record(
            h,
            self,
            base,
            "create_task",
            json!({"title": title}),
            json!({"op": "create", "title": title}),
            |b| {
                (
                    "ok",
                    json!({"task": b["created"]["id"], "t": observed(&b["created"])}),
                )
            },
        )
        .await?;
        match out {
            Outcome::Ok(b) => b["created"]["id"].as_i64(),
            _ => None,
        }
    }
    async fn post(&self, h: &History, base: &str, body: &str) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "post_message",
            json!({"body": body}),
            json!({"op": "post", "room": ROOM, "body": body}),
            |b| ("ok", json!({"id": b["message_id"]})),
        )
        .await
    }
    async fn read_messages(
        &self,
        h: &History,
        base: &str,
        since: i64,
        limit: i64,
    ) -> Option<Outcome> {
        record(
            h,
            self,
            base,
            "read_messages",
            json!({"since_id": since, "limit": limit}),
            json!({"op": "read_messages", "room": ROOM, "since": since, "limit": limit}),
            |b| {
                let msgs: Vec<Value> = b["messages"]
                    .as_array()
                    .map(|m| m.iter().map(|m| json!([m["id"], m["body"]])).collect())
                    .unwrap_or_default();
                ("ok", json!({"msgs": msgs}))
            },
        )
        .await
    }
}

/// A `chatroom serve` process on a fixed port, restartable on it.
struct Server {
    name: String,
    bin: PathBuf,
    port: u16,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Server {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    async fn start(&mut self) {
        for attempt in 0..50 {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .expect("log");
            let child = tokio::process::Command::new(&self.bin)
                .arg("serve")
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .env("CHATROOM_LISTEN", format!("127.0.0.1:{}", self.port))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .expect("spawn chatroom serve");
            self.child = Some(child);
            if wait_healthy(&self.url(), Duration::from_secs(20)).await {
                return;
            }
            // Not up: the port may still be held, or PostgreSQL away.
            self.kill().await;
            tokio::time::sleep(Duration::from_millis(100 * (attempt + 1).min(10))).await;
        }
        panic!("{} did not come up; see {}", self.name, self.log.display());
    }
    async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}

async fn wait_healthy(url: &str, limit: Duration) -> bool {
    let http = reqwest::Client::new();
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Ok(r) = http
            .get(format!("{url}/healthz"))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A TCP proxy on loopback between a replica and PostgreSQL. Cut, it
/// forwards nothing (a black hole: the connections stay open and silent);
/// healed, the connections held through the cut are closed, as a real
/// network's would time out, and new ones pass again.
struct Proxy {
    port: u16,
    cut: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let port = listener.local_addr().unwrap().port();
        let (cut, rx) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let Ok((down, _)) = listener.accept().await else {
                    continue;
                };
                let rx = rx.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move { proxy_one(down, &upstream, rx).await });
            }
        });
        Proxy { port, cut }
    }
    fn set_cut(&self, cut: bool) {
        let _ = self.cut.send(cut);
    }
}

async fn proxy_one(mut down: TcpStream, upstream: &str, mut rx: watch::Receiver<bool>) {
    // A connection made during a cut hears nothing until the heal, then closes.
    if *rx.borrow_and_update() {
        let _ = rx.wait_for(|c| !*c).await;
        return;
    }
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return;
    };
    let cut = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => false,
        r = rx.wait_for(|c| *c) => r.is_ok(),
    };
    if cut {
        // Cut: hold both ends open and silent until the heal.
        let _ = rx.wait_for(|c| !*c).await;
    }
    drop((down, up));
}

/// What the clients share.
struct Shared {
    history: History,
    urls: Vec<String>,
    /// Open tasks to contend for.
    pool: Mutex<Vec<i64>>,
    /// Every task created, for the final reads.
    all_tasks: Mutex<Vec<i64>>,
    stop: AtomicBool,
    want_tasks: usize,
}

impl Shared {
    fn pick_url(&self, rng: &mut Rng) -> &str {
        &self.urls[rng.below(self.urls.len() as u64) as usize]
    }
    fn add_task(&self, id: i64) {
        self.pool.lock().unwrap().push(id);
        self.all_tasks.lock().unwrap().push(id);
    }
}

/// One client's loop: claims, releases, guarded updates, submits, posts and
/// reads, chosen by its seeded generator, until told to stop.
async fn client_loop(me: Client, shared: Arc<Shared>, mut rng: Rng) {
    let h = &shared.history;
    let mut versions: HashMap<i64, i64> = HashMap::new();
    let mut held: HashSet<i64> = HashSet::new();
    let mut last_msg = 0i64;
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let base = shared.pick_url(&mut rng).to_owned();
        seq += 1;
        let sent = if rng.chance(35) {
            if rng.chance(55) {
                let body = format!("{}-{seq}", me.name);
                let out = me.post(h, &base, &body).await;
                if let Some(Outcome::Ok(b)) = &out {
                    last_msg = last_msg.max(b["message_id"].as_i64().unwrap_or(0));
                }
                out.map(|_| ())
            } else {
                let since = (last_msg - rng.below(25) as i64).max(0);
                let out = me.read_messages(h, &base, since, 40).await;
                if let Some(Outcome::Ok(b)) = &out
                    && let Some(id) = b["latest_id"].as_i64()
                {
                    last_msg = last_msg.max(id);
                }
                out.map(|_| ())
            }
        } else if !held.is_empty() && rng.chance(50) {
            let mut mine: Vec<i64> = held.iter().copied().collect();
            mine.sort_unstable();
            let task = mine[rng.below(mine.len() as u64) as usize];
            let v = versions.get(&task).copied().unwrap_or(1);
            match rng.below(10) {
                0..=3 => {
                    let out = me
                        .update(h, &base, task, v, &format!("{}-{seq}", me.name))
                        .await;
                    note_version(&mut versions, task, &out, "task");
                    if let Some(Outcome::Ok(b)) = &out
                        && b["updated"] == json!(false)
                    {
                        versions.insert(task, b["current"]["version"].as_i64().unwrap_or(v));
                    }
                    out.map(|_| ())
                }
                4..=6 => {
                    let out = me.submit(h, &base, task).await;
                    held.remove(&task);
                    if let Some(Outcome::Ok(_)) = &out {
                        shared.pool.lock().unwrap().retain(|t| *t != task);
                        let title = format!("task by {}-{seq}", me.name);
                        if let Some(id) = me.create(h, &base, &title).await {
                            shared.add_task(id);
                        }
                    }
                    out.map(|_| ())
                }
                _ => {
                    let out = me.release(h, &base, task).await;
                    held.remove(&task);
                    note_version(&mut versions, task, &out, "task");
                    out.map(|_| ())
                }
            }
        } else {
            let pool = shared.pool.lock().unwrap().clone();
            if pool.len() < shared.want_tasks && rng.chance(20) {
                let title = format!("task by {}-{seq}", me.name);
                if let Some(id) = me.create(h, &base, &title).await {
                    shared.add_task(id);
                }
                continue;
            }
            if pool.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let task = pool[rng.below(pool.len() as u64) as usize];
            match rng.below(10) {
                0..=5 => {
                    let lease = rng.chance(25).then_some(LEASE_SECONDS + 1);
                    let out = me.claim(h, &base, task, lease).await;
                    note_version(&mut versions, task, &out, "task");
                    match &out {
                        Some(Outcome::Ok(b)) if b["claimed"] == json!(true) => {
                            held.insert(task);
                        }
                        Some(Outcome::Ok(b)) if b["task"]["status"] == json!("done") => {
                            shared.pool.lock().unwrap().retain(|t| *t != task);
                        }
                        _ => {}
                    }
                    out.map(|_| ())
                }
                6..=8 => {
                    // A guarded update on the version last seen, often stale.
                    let v = versions.get(&task).copied().unwrap_or(1);
                    let out = me
                        .update(h, &base, task, v, &format!("{}-{seq}", me.name))
                        .await;
                    note_version(&mut versions, task, &out, "task");
                    if let Some(Outcome::Ok(b)) = &out
                        && let Some(cv) = b["current"]["version"].as_i64()
                    {
                        versions.insert(task, cv);
                    }
                    out.map(|_| ())
                }
                _ => {
                    let out = me.read_task(h, &base, task).await;
                    note_version(&mut versions, task, &out, "task");
                    out.map(|_| ())
                }
            }
        };
        // Not reached (the server is down) or not known: breathe.
        if sent.is_none() {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

fn note_version(versions: &mut HashMap<i64, i64>, task: i64, out: &Option<Outcome>, key: &str) {
    if let Some(out) = out
        && let Some(v) = version_of(out, key)
    {
        versions.insert(task, v);
    }
}

/// Mints a token for `agent` in the room through the admin CLI.
async fn mint(bin: &Path, env: &[(String, String)], agent: &str) -> String {
    let run = |args: Vec<String>| {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.output().expect("chatroom admin")
    };
    let _ = run(vec!["admin".into(), "add-room".into(), ROOM.into()]);
    let out = run(["admin", "add-token", "--agent", agent, "--room", ROOM]
        .map(String::from)
        .to_vec());
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("cr_"))
        .unwrap_or_else(|| {
            panic!(
                "add-token {agent}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .trim()
        .to_owned()
}

/// The faults of a backend, in the order a run first meets them.
fn fault_kinds(backend: &str, chosen: &str, can_restart_pg: bool) -> Vec<&'static str> {
    let all: Vec<&'static str> = if backend == "postgres" {
        let mut v = vec!["kill", "cut", "pause"];
        if can_restart_pg {
            v.insert(1, "pg-restart");
        }
        v
    } else {
        vec!["kill", "pause"]
    };
    if chosen.is_empty() {
        all
    } else {
        all.into_iter()
            .filter(|k| chosen.split(',').any(|c| c.trim() == *k))
            .collect()
    }
}

async fn run(a: RunArgs) {
    std::fs::create_dir_all(&a.dir).expect("dir");
    let mut base_env: Vec<(String, String)> = [
        ("CHATROOM_RATE_LIMIT_PER_MINUTE", "0"),
        ("CHATROOM_MAX_IN_FLIGHT", "0"),
        ("CHATROOM_MAX_CONNECTIONS_PER_IP", "0"),
        ("CHATROOM_MAX_STREAMS_PER_TOKEN", "0"),
        ("CHATROOM_AUTH_FAIL_LIMIT", "0"),
        ("CHATROOM_LOG", "warn"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // The broken build's switch reaches the servers only when set here.
    if let Ok(v) = std::env::var("CHATROOM_HISTORY_FAULT") {
        base_env.push(("CHATROOM_HISTORY_FAULT".into(), v));
    }
    let mut proxy = None;
    let mut servers = Vec::new();
    let admin_env;
    if a.backend == "postgres" {
        let admin = a.pg_url.clone().expect("--pg-url for the postgres backend");
        let name = format!("chatroom_history_{}_{}", std::process::id(), a.seed);
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .expect("PostgreSQL");
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name}"
        )))
        .execute(&mut conn)
        .await;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create database");
        let url = url::Url::parse(&admin).expect("pg url");
        let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
        let port = url.port().unwrap_or(5432);
        let direct = with_db(&admin, &name, None);
        // Replica 0 reaches PostgreSQL through the proxy the cut fault cuts.
        let p = Proxy::start(format!("{host}:{port}")).await;
        for i in 0..a.replicas.max(1) {
            let db = if i == 0 {
                with_db(&admin, &name, Some(p.port))
            } else {
                direct.clone()
            };
            let mut env = base_env.clone();
            env.push(("CHATROOM_DATABASE_URL".into(), db));
            servers.push(Server {
                name: format!("replica{i}"),
                bin: a.bin.clone(),
                port: free_port(),
                env,
                log: a.dir.join(format!("replica{i}.log")),
                child: None,
            });
        }
        admin_env = vec![("CHATROOM_DATABASE_URL".to_string(), direct)];
        proxy = Some(p);
    } else {
        let db = a.dir.join("history.db").to_string_lossy().into_owned();
        let mut env = base_env.clone();
        env.push(("CHATROOM_DB".into(), db.clone()));
        servers.push(Server {
            name: "server".into(),
            bin: a.bin.clone(),
            port: free_port(),
            env,
            log: a.dir.join("server.log"),
            child: None,
        });
        admin_env = vec![("CHATROOM_DB".to_string(), db)];
    }
    for s in &mut servers {
        s.start().await;
    }
    let mut clients = Vec::new();
    for i in 0..a.clients {
        let name = format!("c{i}");
        clients.push(Client::new(&name, &mint(&a.bin, &admin_env, &name).await));
    }
    let faulter = Client::new("fencer", &mint(&a.bin, &admin_env, "fencer").await);
    let pauser_token = mint(&a.bin, &admin_env, "pauser").await;
    let auditor = Client::new("audit", &mint(&a.bin, &admin_env, "audit").await);

    let shared = Arc::new(Shared {
        history: History::create(&a.out),
        urls: servers.iter().map(Server::url).collect(),
        pool: Mutex::new(Vec::new()),
        all_tasks: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        want_tasks: a.tasks,
    });
    shared.history.write(
        &json!({"kind": "meta", "backend": a.backend, "seed": a.seed,
        "clients": a.clients, "servers": servers.len(), "seconds": a.seconds}),
    );
    for i in 0..a.tasks {
        let id = faulter
            .create(&shared.history, &shared.urls[0], &format!("seed task {i}"))
            .await
            .expect("a first task");
        shared.add_task(id);
    }
    let mut rng = Rng(a.seed);
    let workers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::spawn(client_loop(
                c,
                shared.clone(),
                Rng(a.seed ^ ((i as u64 + 1) << 32)),
            ))
        })
        .collect();

    // The faults, one after another until the time is up.
    let kinds = fault_kinds(&a.backend, &a.faults, a.pg_restart.is_some());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.seconds);
    let mut n = 0usize;
    loop {
        let gap = a.fault_every_ms / 2 + rng.below(a.fault_every_ms.max(1));
        if kinds.is_empty() || Instant::now() + Duration::from_millis(gap) >= deadline {
            tokio::time::sleep(deadline.saturating_duration_since(Instant::now())).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let kind = kinds[n % kinds.len()];
        n += 1;
        let start = now_us();
        let target = match kind {
            "kill" => {
                let i = rng.below(servers.len() as u64) as usize;
                servers[i].kill().await;
                tokio::time::sleep(Duration::from_millis(200 + rng.below(800))).await;
                servers[i].start().await;
                servers[i].name.clone()
            }
            "pg-restart" => {
                let cmd = a.pg_restart.as_deref().unwrap_or("true");
                let st = tokio::process::Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .stdout(Stdio::null())
                    .status()
                    .await
                    .expect("pg restart");
                assert!(st.success(), "PostgreSQL restart failed: {cmd}");
                "postgresql".into()
            }
            "cut" => {
                let p = proxy.as_ref().expect("proxy");
                p.set_cut(true);
                tokio::time::sleep(Duration::from_millis(1500 + rng.below(2500))).await;
                p.set_cut(false);
                "replica0<->postgresql".into()
            }
            _ => pause_fault(&shared, &faulter, &pauser_token, &mut rng).await,
        };
        shared
            .history
            .write(&json!({"kind": "fault", "fault": kind, "target": target,
            "start": start, "end": now_us()}));
        eprintln!(
            "fault {n}: {kind} {target} at {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    // Everything healed: read every task and the whole log once more.
    if let Some(p) = &proxy {
        p.set_cut(false);
    }
    for s in &servers {
        assert!(
            wait_healthy(&s.url(), Duration::from_secs(30)).await,
            "{} is not up",
            s.name
        );
    }
    let h = &shared.history;
    let tasks = shared.all_tasks.lock().unwrap().clone();
    for (i, t) in tasks.iter().enumerate() {
        let base = &shared.urls[i % shared.urls.len()];
        while auditor.read_task(h, base, *t).await.is_none() {}
    }
    for base in &shared.urls {
        let mut since = 0;
        loop {
            let Some(Outcome::Ok(b)) = auditor.read_messages(h, base, since, 200).await else {
                break;
            };
            let page = b["messages"].as_array().cloned().unwrap_or_default();
            match page.last() {
                Some(m) => since = m["id"].as_i64().unwrap_or(i64::MAX),
                None => break,
            }
        }
    }
    h.flush();
    for s in &mut servers {
        s.kill().await;
    }
    if a.backend == "postgres"
        && let Some(admin) = &a.pg_url
        && let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await
    {
        let name = format!("chatroom_history_{}_{}", std::process::id(), a.seed);
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
    }
    println!(
        "driver: {} operations ({} calls not sent while a server was down), {} faults",
        h.ops.load(Ordering::Relaxed),
        h.unsent.load(Ordering::Relaxed),
        h.faults.load(Ordering::Relaxed)
    );
}

/// `admin` with database `name`, through `port` when given.
fn with_db(admin: &str, name: &str, port: Option<u16>) -> String {
    let mut u = url::Url::parse(admin).expect("pg url");
    u.set_path(&format!("/{name}"));
    if let Some(p) = port {
        let _ = u.set_host(Some("127.0.0.1"));
        let _ = u.set_port(Some(p));
    }
    u.to_string()
}

/// The lease fault: an agent claims a task with a short lease and keeps it
/// with guarded updates; it is stopped (SIGSTOP) while it holds the claim,
/// the lease runs out, another agent claims the task, and the first is
/// continued (SIGCONT): its next guarded update and its submit must be
/// refused.
async fn pause_fault(
    shared: &Arc<Shared>,
    fencer: &Client,
    pauser_token: &str,
    rng: &mut Rng,
) -> String {
    let h = &shared.history;
    let base = shared.pick_url(rng).to_owned();
    let Some(task) = fencer.create(h, &base, "leased task").await else {
        return "no task (create failed)".into();
    };
    shared.all_tasks.lock().unwrap().push(task);
    let exe = std::env::current_exe().expect("own path");
    let mut child = tokio::process::Command::new(exe)
        .args([
            "pauser",
            "--url",
            &base,
            "--token",
            pauser_token,
            "--task",
            &task.to_string(),
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn pauser");
    let pid = child.id().expect("pauser pid").to_string();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stopped = false;
    let forward = |line: &str| {
        if let Ok(v) = serde_json::from_str::<Value>(line)
            && v["kind"] == "op"
        {
            h.write(&v);
        }
    };
    let until = Instant::now() + Duration::from_secs(30);
    while let Ok(Ok(Some(line))) = tokio::time::timeout(
        until.saturating_duration_since(Instant::now()),
        lines.next_line(),
    )
    .await
    {
        forward(&line);
        if !stopped && line.contains("\"held\"") {
            // Stopped while it holds the claim (after a few renewals).
            tokio::time::sleep(Duration::from_millis(300 + rng.below(400))).await;
            signal("-STOP", &pid).await;
            stopped = true;
            tokio::time::sleep(Duration::from_millis(LEASE_SECONDS as u64 * 1000 + 700)).await;
            // The lease ran out: the task is anyone's, and someone takes it
            // (on a lease too, so that it comes back to the others).
            let url = shared.pick_url(rng).to_owned();
            let _ = fencer.claim(h, &url, task, Some(LEASE_SECONDS + 1)).await;
            shared.pool.lock().unwrap().push(task);
            signal("-CONT", &pid).await;
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    format!("pauser on task {task}")
}

async fn signal(sig: &str, pid: &str) {
    let _ = tokio::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .await;
}

/// The paused agent: claim with a short lease, renew it with guarded
/// updates, submit when an update is refused (it must be, after a pause).
/// Its calls go to stdout, where the driver adds them to the history.
async fn pauser(a: PauserArgs) {
    let h = History::to(Box::new(std::io::stdout()));
    let c = Client::new("pauser", &a.token);
    let Some(Outcome::Ok(b)) = c.claim(&h, &a.url, a.task, Some(LEASE_SECONDS)).await else {
        return;
    };
    if b["claimed"] != json!(true) {
        return;
    }
    let mut v = b["task"]["version"].as_i64().unwrap_or(0);
    h.write(&json!({"kind": "held"}));
    for i in 0..60 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        match c
            .update(&h, &a.url, a.task, v, &format!("renewal {i}"))
            .await
        {
            Some(Outcome::Ok(b)) if b["updated"] == json!(true) => {
                v = b["task"]["version"].as_i64().unwrap_or(v);
            }
            Some(Outcome::Ok(_)) | Some(Outcome::Refused(..)) => break,
            _ => {}
        }
    }
    let _ = c.submit(&h, &a.url, a.task).await;
}

fn main() {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match cli.cmd {
        Cmd::Run(a) => rt.block_on(run(a)),
        Cmd::Pauser(a) => rt.block_on(pauser(a)),
    }
}
