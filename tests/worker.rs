//! `chatroom worker`: the real binary against a real server and a fake
//! OpenAI-compatible endpoint (axum on loopback; no real model, no real key).
//! The worker runs with `WORKER_POLL_INTERVAL=0.2` (fractions are accepted)
//! so each test takes a second or two.

mod common;

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{Grant, McpClient, TestServer, binary};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio::time::Instant;

const API_KEY: &str = "sk-test-DO-NOT-LOG-7f3a9c";
const LIMIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------- fake model

/// What the fake endpoint answers to one call.
#[derive(Clone)]
enum Reply {
    Answer(String),
    Status(u16, &'static str),
    /// Never answers (until the worker gives up on the call).
    Hang,
}

/// One call the fake endpoint received.
#[derive(Clone)]
struct Seen {
    auth: Option<String>,
    body: Value,
    at: Instant,
}

impl Seen {
    fn system(&self) -> &str {
        self.body["messages"][0]["content"].as_str().unwrap_or("")
    }
    fn user(&self) -> &str {
        self.body["messages"][1]["content"].as_str().unwrap_or("")
    }
}

struct ModelState {
    script: Mutex<VecDeque<Reply>>,
    /// Answered once the script is used up.
    fallback: Mutex<Reply>,
    calls: Mutex<Vec<Seen>>,
    count: watch::Sender<usize>,
}

/// An OpenAI-compatible `/v1/chat/completions` on loopback.
struct FakeModel {
    base_url: String,
    state: Arc<ModelState>,
}

impl FakeModel {
    async fn start(script: Vec<Reply>, fallback: Reply) -> FakeModel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeModel::start_on(listener, script, fallback)
    }

    /// The endpoint on `listener` (a port the test chose beforehand).
    fn start_on(
        listener: tokio::net::TcpListener,
        script: Vec<Reply>,
        fallback: Reply,
    ) -> FakeModel {
        let state = Arc::new(ModelState {
            script: Mutex::new(script.into()),
            fallback: Mutex::new(fallback),
            calls: Mutex::new(Vec::new()),
            count: watch::channel(0).0,
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(completions))
            .with_state(state.clone());
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeModel {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    fn calls(&self) -> Vec<Seen> {
        self.state.calls.lock().unwrap().clone()
    }

    /// Calls whose task text holds `title`.
    fn calls_about(&self, title: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.user().contains(title))
            .count()
    }

    fn set_fallback(&self, reply: Reply) {
        *self.state.fallback.lock().unwrap() = reply;
    }

    /// Waits until the endpoint has received `n` calls.
    async fn wait_calls(&self, n: usize) {
        let mut rx = self.state.count.subscribe();
        tokio::time::timeout(LIMIT, rx.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("the model never got {n} calls"))
            .unwrap();
    }
}

async fn completions(
    State(st): State<Arc<ModelState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let reply = {
        let next = st.script.lock().unwrap().pop_front();
        next.unwrap_or_else(|| st.fallback.lock().unwrap().clone())
    };
    st.calls.lock().unwrap().push(Seen {
        auth: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned()),
        body,
        at: Instant::now(),
    });
    st.count.send_modify(|n| *n += 1);
    match reply {
        Reply::Answer(text) => Json(json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }))
        .into_response(),
        Reply::Status(code, body) => (StatusCode::from_u16(code).unwrap(), body).into_response(),
        Reply::Hang => std::future::pending().await,
    }
}

// ---------------------------------------------------------------- the worker process

/// A running `chatroom worker` whose stdout and stderr are collected.
struct WorkerProc {
    child: tokio::process::Child,
    output: Arc<Mutex<String>>,
    lines: watch::Receiver<usize>,
}

impl WorkerProc {
    fn spawn(dir: &Path, env: &[(String, String)]) -> WorkerProc {
        let mut child = command(dir, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chatroom worker");
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = watch::channel(0usize);
        let tx = Arc::new(tx);
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for reader in [
            Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
            Box::new(stderr),
        ] {
            let (output, tx) = (output.clone(), tx.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(reader).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut out = output.lock().unwrap();
                    out.push_str(&line);
                    out.push('\n');
                    tx.send_modify(|n| *n += 1);
                }
            });
        }
        WorkerProc {
            child,
            output,
            lines,
        }
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Waits for an output line holding `message` (and `task_id=ID` when given).
    async fn wait_line(&mut self, message: &str, task_id: Option<i64>) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            self.lines.borrow_and_update();
            if let Some(line) = self
                .output()
                .lines()
                .find(|l| line_has(l, message, task_id))
            {
                return line.to_owned();
            }
            if tokio::time::timeout_at(deadline, self.lines.changed())
                .await
                .is_err()
            {
                panic!(
                    "no line {message:?} (task {task_id:?}) within {LIMIT:?}; output:\n{}",
                    self.output()
                );
            }
        }
    }

    fn pid(&self) -> String {
        self.child.id().expect("still running").to_string()
    }

    /// Sends `signal` (e.g. `INT`) with the shell's kill builtin.
    async fn signal(&self, signal: &str) {
        let status = tokio::process::Command::new("sh")
            .args(["-c", &format!("kill -{signal} {}", self.pid())])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    async fn exit_code(&mut self) -> i32 {
        let status = tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the worker did not exit; output:\n{}", self.output()))
            .unwrap();
        status.code().unwrap_or(-1)
    }
}

fn line_has(line: &str, message: &str, task_id: Option<i64>) -> bool {
    line.contains(message)
        && task_id.is_none_or(|id| {
            line.split_whitespace()
                .any(|w| w == format!("task_id={id}"))
        })
}

fn command(dir: &Path, env: &[(String, String)]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.arg("worker")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k, v)))
        // Away from any .env file in the checkout.
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

/// Runs `chatroom worker` to its end; returns (exit code, stderr).
async fn run_to_end(dir: &Path, env: &[(String, String)]) -> (i32, String) {
    let out = tokio::time::timeout(LIMIT, command(dir, env).output())
        .await
        .expect("the worker should stop at once")
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

// ---------------------------------------------------------------- the board

/// A server, a lead who writes tasks, the worker's token and a fake model.
struct Setup {
    s: TestServer,
    lead: McpClient,
    worker_token: String,
    model: FakeModel,
}

impl Setup {
    async fn new(skills: &[&str], script: Vec<Reply>, fallback: Reply) -> Setup {
        Setup::on(TestServer::start().await, skills, script, fallback).await
    }

    async fn on(s: TestServer, skills: &[&str], script: Vec<Reply>, fallback: Reply) -> Setup {
        s.room("lobby").await;
        let lead = s.mcp(
            &s.token_with(Grant {
                agent: "lead".into(),
                room: "lobby".into(),
                lead: true,
                ..Grant::default()
            })
            .await,
        );
        let worker_token = s
            .token_with(Grant {
                agent: "robot".into(),
                room: "lobby".into(),
                skills: skills.iter().map(|s| s.to_string()).collect(),
                ..Grant::default()
            })
            .await;
        let model = FakeModel::start(script, fallback).await;
        Setup {
            s,
            lead,
            worker_token,
            model,
        }
    }

    /// The worker's environment: the test defaults, then `extra`.
    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("CHATROOM_URL", self.s.url.as_str()),
            ("CHATROOM_TOKEN", &self.worker_token),
            ("WORKER_MODEL_BASE_URL", &self.model.base_url),
            ("WORKER_MODEL_NAME", "test-model"),
            ("WORKER_API_KEY", API_KEY),
            ("WORKER_POLL_INTERVAL", "0.2"),
            ("WORKER_MODEL_TIMEOUT", "10"),
            // Where it keeps its claim across a crash.
            ("XDG_STATE_HOME", self.s.dir.path().to_str().unwrap()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        env
    }

    fn worker(&self, extra: &[(&str, &str)]) -> WorkerProc {
        WorkerProc::spawn(self.s.dir.path(), &self.env(extra))
    }

    fn as_worker(&self) -> McpClient {
        self.s.mcp(&self.worker_token)
    }

    async fn task(&self, title: impl AsRef<str>, extra: Value) -> i64 {
        let title = title.as_ref();
        let mut args = json!({"title": title, "body": format!("body of {title}")});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        self.lead.call("create_task", args).await["created"]["id"]
            .as_i64()
            .unwrap()
    }

    async fn get(&self, id: i64) -> Value {
        self.lead
            .call("get_task", json!({"task_id": id}))
            .await
            .get("task")
            .cloned()
            .unwrap()
    }

    /// Polls the board until task `id` has `status`.
    async fn wait_status(&self, id: i64, status: &str) -> Value {
        let deadline = Instant::now() + LIMIT;
        loop {
            let t = self.get(id).await;
            if t["status"] == status {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never became {status}: {t}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The task's events, oldest first, as (kind, actor) pairs.
    async fn events(&self, id: i64) -> Vec<(String, String)> {
        let v = self
            .lead
            .call("read_events", json!({"task_id": id, "limit": 500}))
            .await;
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["kind"].as_str().unwrap().to_owned(),
                    e["actor"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Polls until task `id` has an event of `kind`.
    async fn wait_event(&self, id: i64, kind: &str) {
        let deadline = Instant::now() + LIMIT;
        while !self.events(id).await.iter().any(|(k, _)| k == kind) {
            assert!(Instant::now() < deadline, "task {id} never got {kind}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many claim_task calls the worker made on task `id`, from the
    /// audit log, once its submit_result on task `after` is written there
    /// (the audit writer keeps call order).
    async fn claim_attempts(&self, id: i64, after: i64) -> i64 {
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", self.s.db_path))
            .await
            .unwrap();
        let count = |tool: &'static str, task: i64| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM audit WHERE agent = 'robot' AND tool = $1 AND task_id = $2",
                )
                .bind(tool)
                .bind(task)
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        };
        let deadline = Instant::now() + LIMIT;
        while count("submit_result", after).await == 0 {
            assert!(Instant::now() < deadline, "no audit row for submit_result");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        count("claim_task", id).await
    }
}

fn answer(text: &str) -> Reply {
    Reply::Answer(text.to_owned())
}

// ---------------------------------------------------------------- tests

/// It claims tasks needing one of its skills (any case) or none, and leaves
/// tasks needing a skill it lacks.
#[tokio::test]
async fn claims_only_tasks_matching_its_skills() {
    let t = Setup::new(&["rust"], vec![], answer("done")).await;
    let python = t
        .task("needs python", json!({"required_skill": "python"}))
        .await;
    let rust = t
        .task("needs rust", json!({"required_skill": "Rust"}))
        .await;
    let any = t.task("needs nothing", json!({})).await;
    let mut w = t.worker(&[]);
    t.wait_status(rust, "done").await;
    t.wait_status(any, "done").await;
    w.wait_line("submitted", Some(any)).await;
    let p = t.get(python).await;
    assert_eq!(p["status"], "pending");
    assert_eq!(p["assignee"], Value::Null);
    assert_eq!(t.model.calls_about("needs python"), 0);
    assert_eq!(t.claim_attempts(python, any).await, 0);
}

/// A task reserved for another agent is never even tried; one reserved for
/// the worker itself is done.
#[tokio::test]
async fn never_claims_a_task_assigned_to_another_agent() {
    let t = Setup::new(&[], vec![], answer("done")).await;
    let bobs = t.task("for bob", json!({"assignee": "bob"})).await;
    let mine = t.task("for robot", json!({"assignee": "robot"})).await;
    let open = t.task("for anyone", json!({})).await;
    let _w = t.worker(&[]);
    t.wait_status(mine, "done").await;
    t.wait_status(open, "done").await;
    let b = t.get(bobs).await;
    assert_eq!(b["status"], "pending");
    assert_eq!(b["assignee"], "bob");
    assert_eq!(t.claim_attempts(bobs, open).await, 0);
    assert_eq!(t.model.calls_about("for bob"), 0);
}

/// The model's answer becomes the task's result; the request carries the
/// model name, the key in the Authorization header, and the task as data.
#[tokio::test]
async fn submits_the_models_answer() {
    let t = Setup::new(&[], vec![answer("  the answer is 42\n")], answer("x")).await;
    let id = t.task("compute the answer", json!({})).await;
    let mut w = t.worker(&[]);
    let task = t.wait_status(id, "done").await;
    assert_eq!(task["result"], "the answer is 42");
    assert_eq!(task["assignee"], "robot");
    w.wait_line("claimed", Some(id)).await;
    w.wait_line("submitted", Some(id)).await;
    let call = &t.model.calls()[0];
    assert_eq!(call.body["model"], "test-model");
    assert_eq!(
        call.auth.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    assert_eq!(call.body["messages"][0]["role"], "system");
    assert!(
        call.system().contains("written by another agent"),
        "{}",
        call.system()
    );
    assert!(call.system().contains("data"), "{}", call.system());
    assert!(!call.system().contains("compute the answer"));
    assert!(call.user().contains("compute the answer"));
    assert!(call.user().contains("body of compute the answer"));
}

// Checks that the first answer releases the task (pending, no holder, no
// result) with a log line.
async fn released_after(first: Reply) -> (Setup, WorkerProc, i64) {
    let t = Setup::new(&[], vec![first], answer("fine")).await;
    let id = t.task("fragile task", json!({})).await;
    let mut w = t.worker(&[]);
    t.wait_event(id, "task_released").await;
    let task = t.wait_status(id, "pending").await;
    assert_eq!(task["assignee"], Value::Null);
    assert_eq!(task["result"], Value::Null);
    w.wait_line("released", Some(id)).await;
    (t, w, id)
}

/// A failed model call (HTTP 500) releases the task.
#[tokio::test]
async fn releases_the_task_when_the_model_call_fails() {
    let (t, w, _) = released_after(Reply::Status(500, "upstream exploded")).await;
    assert!(w.output().contains("HTTP 500"), "{}", w.output());
    assert_eq!(t.model.calls().len(), 1);
}

/// An empty (whitespace-only) answer releases the task.
#[tokio::test]
async fn releases_the_task_on_an_empty_answer() {
    let (_t, w, _) = released_after(answer(" \n ")).await;
    assert!(w.output().contains("empty answer"), "{}", w.output());
}

/// An answer over 20,000 characters releases the task (nothing is
/// truncated); one of exactly 20,000 is submitted.
#[tokio::test]
async fn releases_the_task_on_an_oversized_answer() {
    let (t, w, _) = released_after(answer(&"é".repeat(20_001))).await;
    assert!(w.output().contains("20001 characters"), "{}", w.output());
    t.model.set_fallback(answer(&"é".repeat(20_000)));
    let ok = t.task("big but fine", json!({})).await;
    let task = t.wait_status(ok, "done").await;
    assert_eq!(task["result"].as_str().unwrap().chars().count(), 20_000);
}

/// A failed task is not tried again before its cool-down has passed.
#[tokio::test]
async fn a_failed_task_cools_down() {
    let t = Setup::new(&[], vec![Reply::Status(503, "busy")], answer("ok")).await;
    let id = t.task("try twice", json!({})).await;
    let _w = t.worker(&[("WORKER_COOLDOWN_SECONDS", "1")]);
    t.wait_status(id, "done").await;
    let calls = t.model.calls();
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at.duration_since(calls[0].at);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

/// After WORKER_MAX_FAILURES failures it posts a note saying why (no model
/// output, no key) and never tries that task again.
#[tokio::test]
async fn gives_up_after_max_failures_with_a_note() {
    let t = Setup::new(
        &[],
        vec![],
        Reply::Status(500, "MODEL-OUTPUT-MARKER stack trace"),
    )
    .await;
    let hopeless = t.task("hopeless", json!({})).await;
    let mut w = t.worker(&[
        ("WORKER_MAX_FAILURES", "2"),
        ("WORKER_COOLDOWN_SECONDS", "0"),
    ]);
    w.wait_line("gave up", Some(hopeless)).await;
    let task = t.get(hopeless).await;
    assert_eq!(task["status"], "pending");
    let notes = task["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = notes[0]["body"].as_str().unwrap();
    assert_eq!(notes[0]["author"], "robot");
    assert!(
        note.contains("gave up") && note.contains("2 failed attempts"),
        "{note}"
    );
    assert!(note.contains("@lead"), "{note}");
    assert!(note.contains("HTTP 500"), "{note}");
    assert!(
        !note.contains("MODEL-OUTPUT-MARKER") && !note.contains(API_KEY),
        "{note}"
    );
    // With no cool-down, the older task would come first if it were still tried.
    t.model.set_fallback(answer("ok"));
    let later = t.task("later", json!({})).await;
    t.wait_status(later, "done").await;
    assert_eq!(t.model.calls_about("hopeless"), 2);
    assert_eq!(t.get(hopeless).await["status"], "pending");
}

/// The hourly cap counts every model call, failed ones too; at the cap the
/// worker waits instead of claiming.
#[tokio::test]
async fn the_hourly_cap_counts_every_call() {
    let t = Setup::new(&[], vec![Reply::Status(500, "no")], answer("ok")).await;
    let failing = t.task("first", json!({})).await;
    let done = t.task("second", json!({})).await;
    let waiting = t.task("third", json!({})).await;
    let mut w = t.worker(&[("WORKER_MAX_TASKS_PER_HOUR", "2")]);
    w.wait_line("hourly cap", None).await;
    assert_eq!(t.get(failing).await["status"], "pending");
    assert_eq!(t.get(done).await["status"], "done");
    let third = t.get(waiting).await;
    assert_eq!(third["status"], "pending");
    assert_eq!(third["assignee"], Value::Null);
    assert!(
        !t.events(waiting)
            .await
            .iter()
            .any(|(k, _)| k == "task_claimed")
    );
    assert_eq!(t.model.calls().len(), 2);
}

/// After a crash (SIGKILL during a model call) the next start hands back
/// the claim that run made, logging its id, and then works it like any
/// other; a task its agent holds from another session (the same token used
/// by hand) is left alone, and said so.
#[tokio::test]
async fn releases_only_its_own_claims_on_start() {
    let t = Setup::new(&[], vec![Reply::Hang], answer("ok")).await;
    let crashed_on = t.task("left by the crash", json!({})).await;
    let mut crashed = t.worker(&[("WORKER_MODEL_TIMEOUT", "60")]);
    t.model.wait_calls(1).await;
    crashed.signal("KILL").await;
    crashed.exit_code().await;
    assert_eq!(t.get(crashed_on).await["status"], "in_progress");
    let by_hand = t.task("held by another session", json!({})).await;
    let session = t.as_worker();
    assert_eq!(
        session
            .call("claim_task", json!({"task_id": by_hand}))
            .await["claimed"],
        true
    );

    let mut w = t.worker(&[]);
    w.wait_line("released a claim left by an earlier run", Some(crashed_on))
        .await;
    let line = w.wait_line("left alone", Some(by_hand)).await;
    assert!(line.contains("not claimed by this worker"), "{line}");
    t.wait_status(crashed_on, "done").await;
    let kinds: Vec<String> = t
        .events(crashed_on)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let after_crash = kinds.iter().rposition(|k| k == "task_claimed").unwrap();
    assert_eq!(kinds[after_crash - 1], "task_released", "{kinds:?}");
    let held = t.get(by_hand).await;
    assert_eq!(
        (held["status"].as_str(), held["assignee"].as_str()),
        (Some("in_progress"), Some("robot"))
    );
    assert!(
        !w.output()
            .lines()
            .any(|l| line_has(l, "released", Some(by_hand))),
        "{}",
        w.output()
    );
}

/// While the model endpoint does not answer, the worker claims nothing (no
/// task is taken and handed back, no failure counted) and says which URL
/// failed and why; once it answers, the waiting task is done at once,
/// without a cool-down.
#[tokio::test]
async fn an_unreachable_model_stops_claiming_until_it_answers() {
    let t = Setup::new(&[], vec![], answer("ok")).await;
    // A port nothing listens on, until the endpoint starts there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let base = format!("http://{addr}/v1");
    let id = t.task("waits for the model", json!({})).await;
    let mut w = t.worker(&[
        ("WORKER_MODEL_BASE_URL", &base),
        ("WORKER_COOLDOWN_SECONDS", "3600"),
    ]);
    let line = w.wait_line("does not answer", None).await;
    assert!(
        line.contains(&format!("{base}/chat/completions")),
        "names the URL: {line}"
    );
    assert!(
        line.to_lowercase().contains("refused"),
        "names the cause: {line}"
    );
    assert!(!line.contains(API_KEY), "{line}");
    // Five polls later: still not claimed, never handed back. (Nothing
    // happens to wait for: the worker is meant to do nothing.)
    tokio::time::sleep(Duration::from_secs(1)).await;
    let task = t.get(id).await;
    assert_eq!(task["status"], "pending", "{task}");
    assert!(
        !t.events(id)
            .await
            .iter()
            .any(|(k, _)| k == "task_claimed" || k == "task_released"),
        "{:?}",
        t.events(id).await
    );
    assert_eq!(
        w.output().matches("does not answer").count(),
        1,
        "logged once: {}",
        w.output()
    );
    let model = FakeModel::start_on(
        tokio::net::TcpListener::bind(addr).await.unwrap(),
        vec![],
        answer("done now"),
    );
    t.wait_status(id, "done").await;
    w.wait_line("answers again", None).await;
    assert_eq!(model.calls().len(), 1);
}

/// A matching task behind more than a page of non-matching ones is found.
#[tokio::test]
async fn finds_a_match_behind_many_non_matching_tasks() {
    let t = Setup::new(&[], vec![], answer("found")).await;
    let needle = t.task("the needle", json!({})).await;
    for chunk in 0..10 {
        let creates = (0..25).map(|i| {
            t.task(
                format!("hay {chunk}-{i}"),
                json!({"required_skill": "cobol"}),
            )
        });
        futures::future::join_all(creates).await;
    }
    let _w = t.worker(&[]);
    t.wait_status(needle, "done").await;
    assert_eq!(t.model.calls().len(), 1);
}

// A signal during a model call: the call is abandoned, the task is pending
// again, and the worker exits 0.
async fn stop_during_model_call(signal: &str) {
    let t = Setup::new(&[], vec![], Reply::Hang).await;
    let id = t.task("slow task", json!({})).await;
    let mut w = t.worker(&[("WORKER_MODEL_TIMEOUT", "60")]);
    t.model.wait_calls(1).await;
    w.signal(signal).await;
    assert_eq!(w.exit_code().await, 0, "{}", w.output());
    let task = t.get(id).await;
    assert_eq!(task["status"], "pending");
    assert_eq!(task["assignee"], Value::Null);
    assert!(
        line_has(&w.output(), "released", Some(id)),
        "{}",
        w.output()
    );
}

/// Ctrl+C (SIGINT) during a model call releases the task and exits 0.
#[tokio::test]
async fn sigint_during_a_model_call_releases_and_exits_0() {
    stop_during_model_call("INT").await;
}

/// SIGTERM during a model call releases the task and exits 0.
#[tokio::test]
async fn sigterm_during_a_model_call_releases_and_exits_0() {
    stop_during_model_call("TERM").await;
}

/// Plain http:// to a non-loopback host, or any other scheme, stops the
/// worker at once with one line naming the variable (and not echoing the
/// URL); missing and malformed settings are named the same way.
#[tokio::test]
async fn bad_settings_stop_it_at_once_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let good = |extra: &[(&str, &str)]| {
        let mut env: Vec<(String, String)> = [
            ("CHATROOM_URL", "http://127.0.0.1:9"),
            ("CHATROOM_TOKEN", "cr_unused"),
            ("WORKER_MODEL_BASE_URL", "https://api.example.com/v1"),
            ("WORKER_MODEL_NAME", "m"),
            ("WORKER_API_KEY", API_KEY),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        env
    };
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("CHATROOM_URL", "http://192.168.1.20:8080")],
            "CHATROOM_URL",
        ),
        (&[("CHATROOM_URL", "ftp://127.0.0.1")], "CHATROOM_URL"),
        (
            &[(
                "WORKER_MODEL_BASE_URL",
                "http://api.example.com/v1?key=LEAKED-IN-URL",
            )],
            "WORKER_MODEL_BASE_URL",
        ),
        (&[("WORKER_MODEL_BASE_URL", "")], "WORKER_MODEL_BASE_URL"),
        (&[("CHATROOM_TOKEN", "")], "CHATROOM_TOKEN"),
        (&[("WORKER_MODEL_NAME", "")], "WORKER_MODEL_NAME"),
        (&[("WORKER_POLL_INTERVAL", "-1")], "WORKER_POLL_INTERVAL"),
        (
            &[("WORKER_MAX_TASKS_PER_HOUR", "many")],
            "WORKER_MAX_TASKS_PER_HOUR",
        ),
        (&[("WORKER_MODEL_TIMEOUT", "0")], "WORKER_MODEL_TIMEOUT"),
        (
            &[("WORKER_COOLDOWN_SECONDS", "soon")],
            "WORKER_COOLDOWN_SECONDS",
        ),
        (&[("WORKER_MAX_FAILURES", "0")], "WORKER_MAX_FAILURES"),
        (
            &[("WORKER_ALLOW_INSECURE_HTTP", "perhaps")],
            "WORKER_ALLOW_INSECURE_HTTP",
        ),
        (
            &[
                ("WORKER_ALLOW_INSECURE_HTTP", "on"),
                ("WORKER_MODEL_BASE_URL", "gopher://example.com"),
            ],
            "WORKER_MODEL_BASE_URL",
        ),
    ];
    for (extra, variable) in cases {
        let (code, out) = run_to_end(dir.path(), &good(extra)).await;
        assert_ne!(code, 0, "{extra:?}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{extra:?}: {out}");
        assert!(out.contains(variable), "{extra:?}: {out}");
        for other in ["CHATROOM_URL", "WORKER_MODEL_BASE_URL", "CHATROOM_TOKEN"] {
            if other != *variable {
                assert!(!out.contains(&format!("{other}:")), "{extra:?}: {out}");
            }
        }
        assert!(
            !out.contains("LEAKED-IN-URL") && !out.contains(API_KEY),
            "{out}"
        );
    }
}

/// A token the board rejects, or a read-only one, stops the worker at once
/// with a message naming CHATROOM_TOKEN and never showing it.
#[tokio::test]
async fn a_rejected_or_read_only_token_stops_it() {
    let t = Setup::new(&[], vec![], answer("x")).await;
    let bad = "cr_not-a-real-token-4b1d";
    let (code, out) = run_to_end(t.s.dir.path(), &t.env(&[("CHATROOM_TOKEN", bad)])).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("CHATROOM_TOKEN") && out.contains("401"),
        "{out}"
    );
    assert!(!out.contains(bad), "{out}");
    let observer =
        t.s.token_with(Grant {
            agent: "watcher".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await;
    let (code, out) = run_to_end(t.s.dir.path(), &t.env(&[("CHATROOM_TOKEN", &observer)])).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("CHATROOM_TOKEN") && out.contains("read-only"),
        "{out}"
    );
    assert!(!out.contains(&observer), "{out}");
    assert!(t.model.calls().is_empty());
}

/// With WORKER_ALLOW_INSECURE_HTTP=on, plain http:// to a host that is not
/// loopback (here 0.0.0.0, which reaches this machine) is accepted.
#[tokio::test]
async fn insecure_http_is_allowed_when_switched_on() {
    let s = TestServer::start_with(|c| c.allowed_hosts = None).await;
    let t = Setup::on(s, &[], vec![], answer("over the LAN")).await;
    let id = t.task("lan task", json!({})).await;
    let board = t.s.url.replace("127.0.0.1", "0.0.0.0");
    let model = t.model.base_url.replace("127.0.0.1", "0.0.0.0");
    let env = [
        ("CHATROOM_URL", board.as_str()),
        ("WORKER_MODEL_BASE_URL", model.as_str()),
    ];
    let (code, out) = run_to_end(t.s.dir.path(), &t.env(&env)).await;
    assert_ne!(code, 0);
    assert!(
        out.contains("CHATROOM_URL") && out.contains("WORKER_MODEL_BASE_URL"),
        "{out}"
    );
    let _w = t.worker(&[env[0], env[1], ("WORKER_ALLOW_INSECURE_HTTP", "on")]);
    assert_eq!(t.wait_status(id, "done").await["result"], "over the LAN");
}

/// Neither key, the token nor the model's answer ever reaches the worker's
/// output, even with every crate logging at trace; task titles are logged without control
/// characters.
#[tokio::test]
async fn secrets_and_answers_never_reach_the_output() {
    let t = Setup::new(
        &[],
        vec![answer("SECRET-ANSWER-MARKER"), Reply::Status(401, API_KEY)],
        answer("x"),
    )
    .await;
    let ok = t.task("evil\u{1b}[2J\ntitle", json!({})).await;
    let bad = t.task("second", json!({})).await;
    let mut w = t.worker(&[("CHATROOM_LOG", "trace,chatroom=trace")]);
    t.wait_status(ok, "done").await;
    t.wait_event(bad, "task_released").await;
    w.wait_line("released", Some(bad)).await;
    w.signal("INT").await;
    assert_eq!(w.exit_code().await, 0);
    let out = w.output();
    assert!(line_has(&out, "claimed", Some(ok)), "{out}");
    assert!(out.contains("evil[2Jtitle"), "{out}");
    assert!(!out.contains('\u{1b}'), "{out}");
    assert!(!out.contains(API_KEY), "{out}");
    assert!(!out.contains(&t.worker_token), "{out}");
    assert!(!out.contains("SECRET-ANSWER-MARKER"), "{out}");
    assert_eq!(
        t.model.calls()[0].auth.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
}

/// `chatroom worker --help` explains every variable.
#[tokio::test]
async fn help_explains_every_variable() {
    let out = tokio::process::Command::new(binary())
        .args(["worker", "--help"])
        .env_clear()
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for variable in [
        "CHATROOM_URL",
        "CHATROOM_TOKEN",
        "WORKER_MODEL_BASE_URL",
        "WORKER_MODEL_NAME",
        "WORKER_API_KEY",
        "WORKER_POLL_INTERVAL",
        "WORKER_MAX_TASKS_PER_HOUR",
        "WORKER_MODEL_TIMEOUT",
        "WORKER_COOLDOWN_SECONDS",
        "WORKER_MAX_FAILURES",
        "WORKER_ALLOW_INSECURE_HTTP",
    ] {
        assert!(help.contains(variable), "{variable} missing from:\n{help}");
    }
}
