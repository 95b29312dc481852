//! Test fixtures: a real server on `127.0.0.1:0` with a real database, and
//! clients that speak to it the way outside clients do.
//!
//! The database is a fresh SQLite file, or with `CHATROOM_TEST_PG_URL` set
//! (e.g. `postgres://postgres@127.0.0.1:PORT/postgres`) a fresh PostgreSQL
//! database created on that server for each `TestServer` and dropped after
//! it: the same contract tests then run against PostgreSQL.
#![allow(dead_code)]

pub mod browser;
pub mod consent;
pub mod rest;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chatroom::config::Config;
use chatroom::db;
use chatroom::domain::Core;
use chatroom::domain::model::RoomInfo;
use chatroom::domain::store::prelude::*;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use chatroom::domain::tokens::Grant;

/// The environment variable naming the PostgreSQL server to test against.
pub const PG_ENV: &str = "CHATROOM_TEST_PG_URL";

/// The PostgreSQL server to test against, when one is given.
pub fn pg_server() -> Option<String> {
    std::env::var(PG_ENV).ok().filter(|u| !u.trim().is_empty())
}

/// A database of its own on the test PostgreSQL server, dropped (best
/// effort) when this value is.
pub struct PgDatabase {
    pub url: String,
    server: String,
    name: String,
}

impl PgDatabase {
    /// Creates a uniquely named database on `server`.
    pub async fn create(server: &str) -> PgDatabase {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "chatroom_test_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        sweep_databases(server).await;
        pg_admin(server, &format!("CREATE DATABASE {name}")).await;
        PgDatabase {
            url: with_database(server, &name),
            server: server.to_owned(),
            name,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (server, sql) = (
            self.server.clone(),
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
        // Drop may run inside a runtime: use a thread with its own.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async move {
                    if let Ok(mut conn) =
                        <sqlx::PgConnection as sqlx::Connection>::connect(&server).await
                    {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                            .execute(&mut conn)
                            .await;
                    }
                });
            }
        })
        .join();
    }
}

/// Drops the test databases left by test processes that are gone (a test
/// that stops its server and then reads its store keeps the database past
/// `stop`; its process ending is the database's end).
async fn sweep_databases(server: &str) {
    let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(server).await else {
        return;
    };
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname::text FROM pg_database WHERE datname LIKE 'chatroom_test_%'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    for name in names {
        let pid = name.split('_').nth(2).unwrap_or("");
        if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut conn)
                .await;
        }
    }
}

/// Runs one statement on the test PostgreSQL server's maintenance database.
async fn pg_admin(server: &str, sql: &str) {
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(server)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {PG_ENV}: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `url` with its database name replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let query = tail.find('?').map(|i| &tail[i..]).unwrap_or("");
    format!("{scheme}://{authority}/{name}{query}")
}

/// A server running in this process, with its own database.
pub struct TestServer {
    pub url: String,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    /// The SQLite file (unused when the test runs on PostgreSQL).
    pub db_path: String,
    /// The database the server runs on: `sqlite://…` or `postgres://…`.
    pub db_url: String,
    /// A second handle on the same database, as the admin CLI would have.
    pub store: Arc<dyn Store>,
    /// The rules over [`store`](Self::store), deciding at the server's clock.
    pub core: Core,
    pub shutdown: CancellationToken,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
    /// Dropped after the server (fields drop in order).
    pg: Option<PgDatabase>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// Starts with the test defaults (no rate limit), adjusted by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        let pg = match pg_server() {
            Some(server) => Some(PgDatabase::create(&server).await),
            None => None,
        };
        TestServer::launch(pg.as_ref().map(|d| d.url.clone()), pg, tweak).await
    }

    /// A server on a fresh SQLite file, whatever the environment says.
    pub async fn start_sqlite() -> TestServer {
        TestServer::launch(None, None, |_| {}).await
    }

    /// [`start_sqlite`](Self::start_sqlite), adjusted by `tweak`.
    pub async fn start_sqlite_with(tweak: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::launch(None, None, tweak).await
    }

    /// A server on an existing PostgreSQL database (left in place after it).
    pub async fn on_database(url: &str) -> TestServer {
        TestServer::launch(Some(url.to_owned()), None, |_| {}).await
    }

    /// Another replica serving the same PostgreSQL database as this one.
    pub async fn replica(&self) -> TestServer {
        assert!(self.on_postgres(), "replicas share a PostgreSQL database");
        TestServer::on_database(&self.db_url).await
    }

    /// A server whose domain decides at `clock`'s time (moved by hand).
    pub async fn start_at(
        clock: chatroom::clock::Clock,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        let pg = match pg_server() {
            Some(server) => Some(PgDatabase::create(&server).await),
            None => None,
        };
        let url = pg.as_ref().map(|d| d.url.clone());
        TestServer::launch_at(url, pg, tweak, clock).await
    }

    async fn launch(
        database_url: Option<String>,
        pg: Option<PgDatabase>,
        tweak: impl FnOnce(&mut Config),
    ) -> TestServer {
        TestServer::launch_at(database_url, pg, tweak, chatroom::clock::Clock::system()).await
    }

    async fn launch_at(
        database_url: Option<String>,
        pg: Option<PgDatabase>,
        tweak: impl FnOnce(&mut Config),
        clock: chatroom::clock::Clock,
    ) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let db_path = dir
            .path()
            .join("chatroom.db")
            .to_string_lossy()
            .into_owned();
        let mut config = TestServer::config(&db_path);
        config.database_url = database_url;
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        TestServer::serve(config, listener, dir, db_path, pg, clock).await
    }

    /// The tests' configuration on the SQLite file `db_path`: no rate
    /// limit, no stream, in-flight or connection cap, no failed-auth
    /// throttle (each has its own tests; load-shaped tests park many waits
    /// per token).
    fn config(db_path: &str) -> Config {
        let mut config = Config::for_tests(db_path);
        config.rate_limit_per_minute = 0;
        config.max_streams_per_token = 0;
        config.max_in_flight = 0;
        config.max_connections_per_ip = 0;
        config.auth_fail_limit = 0;
        config
    }

    /// Starts the server of `config` on `listener`.
    async fn serve(
        config: Config,
        listener: tokio::net::TcpListener,
        dir: tempfile::TempDir,
        db_path: String,
        pg: Option<PgDatabase>,
        clock: chatroom::clock::Clock,
    ) -> TestServer {
        let db_url = config.database();
        let store = db::open(&db_url).await.expect("open db");
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let core = Core::offline(store.clone()).with_clock(clock.clone());
        let handle = tokio::spawn(chatroom::server::launch_at(
            config,
            listener,
            shutdown.clone(),
            clock,
        ));
        TestServer {
            url: format!("http://{addr}"),
            addr,
            dir,
            db_path,
            db_url,
            store,
            core,
            shutdown,
            handle: Some(handle),
            pg,
        }
    }

    /// Whether this server runs on PostgreSQL.
    pub fn on_postgres(&self) -> bool {
        self.db_url.starts_with("postgres")
    }

    /// The environment that points the `chatroom` binary at this server's
    /// database.
    pub fn cli_env(&self) -> HashMap<&'static str, String> {
        if self.on_postgres() {
            HashMap::from([("CHATROOM_DATABASE_URL", self.db_url.clone())])
        } else {
            HashMap::from([("CHATROOM_DB", self.db_path.clone())])
        }
    }

    /// Runs one SQL statement with one integer argument (`$1`) straight on
    /// the database, whichever backend it is (to arrange what no tool can,
    /// such as the passing of time); returns the rows affected.
    pub async fn exec_sql(&self, sql: &'static str, arg: i64) -> u64 {
        if self.on_postgres() {
            let pool = sqlx::PgPool::connect(&self.db_url).await.unwrap();
            let n = sqlx::query(sql).bind(arg).execute(&pool).await.unwrap();
            pool.close().await;
            n.rows_affected()
        } else {
            let pool = sqlx::SqlitePool::connect(&self.db_url).await.unwrap();
            let n = sqlx::query(sql).bind(arg).execute(&pool).await.unwrap();
            pool.close().await;
            n.rows_affected()
        }
    }

    pub async fn room(&self, name: &str) {
        self.core
            .create_room(name, RoomInfo::default())
            .await
            .expect("create room");
    }

    /// Mints a plain writer token for `agent` in `room`.
    pub async fn token(&self, agent: &str, room: &str) -> String {
        self.token_with(Grant {
            agent: agent.into(),
            room: room.into(),
            ..Grant::default()
        })
        .await
    }

    pub async fn token_with(&self, grant: Grant) -> String {
        let (secret, _) = self.core.mint_token(grant).await.expect("mint");
        secret.expose().to_owned()
    }

    /// A room `name` and a client for `agent` in it.
    pub async fn agent(&self, agent: &str, room: &str) -> McpClient {
        if self.store.get_room(room).await.unwrap().is_none() {
            self.room(room).await;
        }
        let token = self.token(agent, room).await;
        self.mcp(&token)
    }

    pub fn mcp(&self, token: &str) -> McpClient {
        McpClient::new(&self.url, token)
    }

    /// Stops the server and waits for it to drain. A PostgreSQL database
    /// stays (the test may still read `store`); a later test run drops it
    /// once this process is gone.
    pub async fn stop(mut self) {
        self.halt().await;
    }

    /// Stops the server and hands over its folder (and so its SQLite file),
    /// which would otherwise go with it.
    pub async fn stop_keeping_files(mut self) -> tempfile::TempDir {
        self.halt().await;
        std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"))
    }

    /// A backup written by `chatroom admin backup`, as an operator makes
    /// one while the server runs; the file lives in the returned folder.
    pub async fn backup(&self) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("backup.db");
        let (code, _, err) = run_cli(
            &["admin", "backup", path.to_str().expect("a UTF-8 path")],
            &self.cli_env(),
        )
        .await;
        assert_eq!(code, 0, "admin backup: {err}");
        (dir, path)
    }

    /// A restore as GETTING_STARTED §8 does it, on SQLite: stops this
    /// server and starts one on a copy of `backup` (a file `chatroom admin
    /// backup` wrote) at the same address, so clients reconnect to it as to
    /// a restarted server.
    pub async fn restore(mut self, backup: &std::path::Path) -> TestServer {
        assert!(!self.on_postgres(), "admin backup is SQLite's");
        let addr = self.addr;
        self.halt().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let db_path = dir
            .path()
            .join("chatroom.db")
            .to_string_lossy()
            .into_owned();
        std::fs::copy(backup, &db_path).expect("copy the backup in place");
        // The old listener is gone; its port frees up at once or very soon.
        let listener = loop {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        TestServer::serve(
            TestServer::config(&db_path),
            listener,
            dir,
            db_path,
            None,
            chatroom::clock::Clock::system(),
        )
        .await
    }

    async fn halt(&mut self) {
        std::mem::forget(self.pg.take());
        self.shutdown.cancel();
        if let Some(h) = self.handle.take() {
            h.await.expect("server task").expect("server result");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A raw JSON-RPC client of `/mcp`, as curl or any other client sends it.
#[derive(Clone)]
pub struct McpClient {
    pub http: reqwest::Client,
    pub url: String,
    pub token: String,
}

/// What a tool call answered.
#[derive(Debug, Clone)]
pub struct ToolResult {
    pub is_error: bool,
    pub body: Value,
}

impl ToolResult {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

impl McpClient {
    pub fn new(base: &str, token: &str) -> McpClient {
        McpClient {
            http: reqwest::Client::new(),
            url: format!("{base}/mcp"),
            token: token.to_owned(),
        }
    }

    /// POSTs a JSON-RPC body; returns the status and the parsed JSON (or a
    /// string holding the raw body when it is not JSON).
    pub async fn rpc(&self, body: &Value) -> (u16, Value) {
        self.post_raw(body.to_string()).await
    }

    pub async fn post_raw(&self, body: String) -> (u16, Value) {
        let resp = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .bearer_auth(&self.token)
            .body(body)
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// Calls a tool and returns its result.
    pub async fn try_call(&self, tool: &str, args: Value) -> ToolResult {
        let (status, v) = self
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}))
            .await;
        assert_eq!(status, 200, "{tool}: HTTP {status}: {v}");
        let result = &v["result"];
        assert!(result.is_object(), "{tool}: not a tool result: {v}");
        let text = result["content"][0]["text"].as_str().unwrap_or("");
        let mut body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        if let Some(structured) = result.get("structuredContent") {
            // The board's text for the model is a summary; the app reads
            // the structured content.
            if matches!(tool, "show_board" | "board_refresh") && result["isError"] != json!(true) {
                assert!(
                    text.chars().count() <= 4000 && !text.starts_with('{'),
                    "{tool}: the text is not a short summary: {text}"
                );
                body = structured.clone();
            }
            assert_eq!(
                structured, &body,
                "{tool}: text and structured content differ"
            );
        }
        ToolResult {
            is_error: result["isError"] == json!(true),
            body,
        }
    }

    /// Calls a tool that must succeed.
    pub async fn call(&self, tool: &str, args: Value) -> Value {
        let r = self.try_call(tool, args).await;
        assert!(!r.is_error, "{tool} failed: {}", r.body);
        r.body
    }

    /// Calls a tool that must be refused; returns the error code.
    pub async fn refused(&self, tool: &str, args: Value) -> String {
        let r = self.try_call(tool, args).await;
        assert!(r.is_error, "{tool} should have been refused: {}", r.body);
        r.code().to_owned()
    }
}

/// The built `chatroom` binary.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_chatroom")
}

/// Runs `chatroom ARGS` with `env` and returns (exit code, stdout, stderr).
pub async fn run_cli(args: &[&str], env: &HashMap<&str, String>) -> (i32, String, String) {
    let out = tokio::process::Command::new(binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chatroom");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `chatroom ARGS` with `env` and `stdin`; returns (exit code, stdout, stderr).
pub async fn run_with_stdin(
    args: &[&str],
    env: &HashMap<&str, String>,
    stdin: Option<&str>,
) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run chatroom");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut pipe, input.as_bytes())
            .await
            .unwrap();
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("chatroom finished in time")
        .expect("chatroom output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `url/healthz` answers, up to `limit`.
pub async fn wait_healthy(url: &str, limit: Duration) -> bool {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if let Ok(r) = client.get(format!("{url}/healthz")).send().await
            && r.status().is_success()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// Waits until the server counts a push client (channel, monitor, rewake)
/// of `agent`, as `GET /v1/presence` reports it.
pub async fn wait_for_push(url: &str, token: &str, agent: &str) {
    let http = reqwest::Client::new();
    for _ in 0..400 {
        let v: Value = http
            .get(format!("{url}/v1/presence"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["agents"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a["agent"] == agent && a["push"] == true))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no push client of {agent} connected");
}
