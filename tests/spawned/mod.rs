//! The built `chatroom` binary as an operator runs it, for tests that need a
//! separate process: its memory (`/proc/<pid>/status`), its log, and killing
//! it. Included with `#[path = "spawned/mod.rs"] mod spawned;` next to
//! `mod common;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{McpClient, binary, free_port, run_cli, wait_healthy};

/// A `chatroom serve` child process with its own database and log file.
pub struct Spawned {
    pub url: String,
    pub db_path: String,
    pub log_path: PathBuf,
    pub env: HashMap<&'static str, String>,
    child: Option<tokio::process::Child>,
}

impl Spawned {
    /// Starts `chatroom serve` on a free port with `db_path` and `env`.
    pub async fn start(db_path: &str, env: &[(&'static str, &str)]) -> Spawned {
        let mut all: HashMap<&'static str, String> =
            env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
        all.insert("CHATROOM_DB", db_path.to_owned());
        let port = free_port();
        all.insert("CHATROOM_LISTEN", format!("127.0.0.1:{port}"));
        let log_path = PathBuf::from(format!("{db_path}.{port}.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        // A load test's "before" figure runs the same attack against
        // another build: `CHATROOM_TEST_SERVER_BIN=/path/to/old/chatroom`.
        let bin = std::env::var("CHATROOM_TEST_SERVER_BIN").unwrap_or_else(|_| binary().to_owned());
        let child = tokio::process::Command::new(bin)
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(all.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chatroom serve");
        let url = format!("http://127.0.0.1:{port}");
        let s = Spawned {
            url,
            db_path: db_path.to_owned(),
            log_path,
            env: all,
            child: Some(child),
        };
        assert!(
            wait_healthy(&s.url, Duration::from_secs(30)).await,
            "chatroom serve did not come up; its log:\n{}",
            s.log()
        );
        s
    }

    /// Creates `room` (if new) and mints a token with `flags` through the admin CLI.
    pub async fn token(&self, agent: &str, room: &str, flags: &[&str]) -> String {
        let env = HashMap::from([("CHATROOM_DB", self.db_path.clone())]);
        run_cli(&["admin", "add-room", room], &env).await;
        let mut args = vec!["admin", "add-token", "--agent", agent, "--room", room];
        args.extend_from_slice(flags);
        let (code, out, err) = run_cli(&args, &env).await;
        assert_eq!(code, 0, "add-token: {err}");
        out.lines()
            .find(|l| l.starts_with("cr_"))
            .expect("a token line")
            .trim()
            .to_owned()
    }

    pub fn mcp(&self, token: &str) -> McpClient {
        McpClient::new(&self.url, token)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().and_then(|c| c.id()).expect("running")
    }

    /// The resident set size of the server process, in bytes.
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the server is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGKILL: the process gets no chance to flush or clean up.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.start_kill().expect("SIGKILL");
            c.wait().await.expect("reaped");
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id().expect("running").to_string();
            let status = tokio::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .await
                .expect("kill -TERM");
            assert!(status.success());
            let exit = tokio::time::timeout(Duration::from_secs(15), c.wait())
                .await
                .expect("stopped within 15 s")
                .expect("reaped");
            assert!(exit.success(), "serve exited with {exit}");
        }
    }
}
