//! What every push client shares (`chatroom channel`, `chatroom watch
//! --monitor`, `chatroom hook --rewake`): where the server is and the
//! token ([`Conn`], from flags, a connection file or the environment), and
//! [`Follower`], one `/v1/stream?client=…` followed across reconnects that
//! hands out each event once, by id.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

/// A server, a token and a room to follow.
#[derive(Clone)]
pub struct Conn {
    pub base: String,
    pub token: String,
    pub room: Option<String>,
}

/// The server, token and room flags of the agent-side commands, each read
/// from its variable when not given.
#[derive(clap::Args)]
pub struct ConnArgs {
    /// The server's base URL, without /mcp.
    #[arg(long, env = "CHATROOM_URL", default_value = crate::config::DEFAULT_URL)]
    pub url: String,
    /// The agent's token (cr_…); better from CHATROOM_TOKEN than on the command line.
    #[arg(long, env = "CHATROOM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The room (default: the token's default room).
    #[arg(long, env = "CHATROOM_ROOM")]
    pub room: Option<String>,
}

impl ConnArgs {
    /// The connection the flags name (the URL without a trailing `/` or
    /// `/mcp`, blanks trimmed); `None` without a token.
    pub fn conn(self) -> Option<Conn> {
        let token = self.token.filter(|t| !t.trim().is_empty())?;
        Some(Conn {
            base: base_url(&self.url),
            token: token.trim().to_owned(),
            room: self.room.filter(|r| !r.trim().is_empty()),
        })
    }
}

/// A server's base URL as given, without a trailing `/` or `/mcp`.
fn base_url(url: &str) -> String {
    url.trim()
        .trim_end_matches('/')
        .trim_end_matches("/mcp")
        .to_owned()
}

/// A connection file: `CHATROOM_URL=…`, `CHATROOM_TOKEN=…`,
/// `CHATROOM_ROOM=…` lines (what `chatroom hook --save-connection` and
/// `chatroom setup` write, mode 0600).
pub fn read_conn_file(path: &Path) -> Result<HashMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the connection file {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim().trim_matches('"').to_owned();
            (k.trim().to_owned(), v)
        })
        .collect())
}

/// Writes a connection file readable by its owner only.
pub fn write_conn_file(path: &Path, conn: &Conn) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = format!(
        "# chatroom connection (a secret: keep this file private)\nCHATROOM_URL={}\nCHATROOM_TOKEN={}\n",
        conn.base, conn.token
    );
    if let Some(room) = &conn.room {
        text.push_str(&format!("CHATROOM_ROOM={room}\n"));
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::rename(tmp, path)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl Conn {
    /// The connection: from `file` when given, else from the environment:
    /// a Claude Code plugin's options (`CLAUDE_PLUGIN_OPTION_URL`,
    /// `…_TOKEN`, `…_ROOM`, which Claude Code gives plugin hooks) before
    /// `CHATROOM_URL`, `CHATROOM_TOKEN`, `CHATROOM_ROOM`. `None` without a
    /// token.
    pub fn resolve(file: Option<&Path>) -> Result<Option<Conn>, String> {
        let values = match file {
            Some(f) => read_conn_file(f)?,
            None => HashMap::new(),
        };
        let get = |key: &str| {
            if file.is_some() {
                return values.get(&format!("CHATROOM_{key}")).cloned();
            }
            env(&format!("CLAUDE_PLUGIN_OPTION_{key}")).or_else(|| env(&format!("CHATROOM_{key}")))
        };
        let Some(token) = get("TOKEN").filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let base = get("URL")
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| crate::config::DEFAULT_URL.into());
        Ok(Some(Conn {
            base: base_url(&base),
            token,
            room: get("ROOM").filter(|r| !r.is_empty()),
        }))
    }
}

/// Where a client keeps small state (the hook's mark, the rewake guard):
/// `CHATROOM_HOOK_STATE_DIR`, else the user's state directory.
pub fn state_dir() -> Option<PathBuf> {
    env("CHATROOM_HOOK_STATE_DIR")
        .map(PathBuf::from)
        .or_else(|| env("XDG_STATE_HOME").map(|d| PathBuf::from(d).join("chatroom")))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".local/state/chatroom")))
}

/// What the stream handed out.
#[derive(Debug)]
pub enum Item {
    /// Connected (again): `{room, you_are, latest_event_id, …}`.
    Ready(Value),
    /// A room event not seen before, with `actionable` and `attention`.
    Activity(Value),
    /// The board (open tasks), at connect and after a change.
    Board(Value),
}

/// Why a connection ended.
#[derive(Debug)]
pub enum End {
    /// A passing failure (the server restarts, the network): reconnect.
    Retry(String),
    /// Reconnecting cannot help (the token was refused).
    Fatal(String),
}

type Body =
    std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>;

/// One room's stream, followed across reconnects from the last event seen.
pub struct Follower {
    http: reqwest::Client,
    conn: Conn,
    kind: &'static str,
    /// The newest event handed out; a reconnect resumes after it.
    pub after: Option<i64>,
    /// Events at or below this id are never handed out (again).
    floor: Option<i64>,
    /// The ids handed out above `floor`: concurrent writers announce their
    /// events in the order they finish, not always in id order, so one
    /// stream can bring event 11 before event 10; each is handed out once.
    recent: BTreeSet<i64>,
    body: Option<(Body, SseParser)>,
    queue: std::collections::VecDeque<Item>,
}

/// How many handed-out ids a follower remembers to tell a late event from
/// one seen already.
const RECENT: usize = 4096;

/// How long a silent stream is trusted (the server comments every 15 s).
const STALL: Duration = Duration::from_secs(45);

impl Follower {
    /// A follower of `conn`'s room, saying it is a `kind` push client,
    /// starting after event `after` (`None`: from now).
    pub fn new(conn: Conn, kind: &'static str, after: Option<i64>) -> Follower {
        let http = crate::tls::client_builder()
            .user_agent(format!("chatroom-{kind}/{}", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("an HTTP client");
        Follower {
            http,
            conn,
            kind,
            after,
            floor: after,
            recent: BTreeSet::new(),
            body: None,
            queue: Default::default(),
        }
    }

    /// The next item; connects first when not connected. An `Err` ends
    /// the connection (call again to reconnect after a pause).
    pub async fn next(&mut self) -> Result<Item, End> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Ok(item);
            }
            if self.body.is_none() {
                let body = self.connect().await?;
                self.body = Some((body, SseParser::default()));
            }
            let (body, parser) = self.body.as_mut().expect("connected");
            let chunk = match next_chunk(body).await {
                Ok(chunk) => chunk,
                Err(gap) => {
                    self.body = None;
                    return Err(End::Retry(gap.to_string()));
                }
            };
            for (name, data) in parser.push(&chunk) {
                let Ok(data) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                match name.as_str() {
                    "ready" => {
                        if self.after.is_none() {
                            self.after = data["latest_event_id"].as_i64();
                            self.floor = self.after;
                        }
                        self.queue.push_back(Item::Ready(data));
                    }
                    "activity" => {
                        let Some(id) = data["id"].as_i64() else {
                            continue;
                        };
                        if !self.first_time(id) {
                            continue;
                        }
                        self.queue.push_back(Item::Activity(data));
                    }
                    "board" => self.queue.push_back(Item::Board(data)),
                    "reset" => {
                        if let Some(resumed) = data["resumed_after"].as_i64() {
                            eprintln!(
                                "chatroom {}: the server's history is behind this client's (restored from a backup?); resuming after event {resumed}",
                                self.kind
                            );
                            self.after = Some(resumed);
                            self.floor = Some(resumed);
                            self.recent.clear();
                        }
                    }
                    "error" => {
                        self.body = None;
                        let message = data["error"]["message"].as_str().unwrap_or("stream error");
                        let code = data["error"]["code"].as_str().unwrap_or("");
                        return Err(if code == "unauthorized" {
                            End::Fatal(format!("the server ended the stream: {message}"))
                        } else {
                            End::Retry(format!("the server ended the stream: {message}"))
                        });
                    }
                    _ => {}
                }
            }
        }
    }

    /// Whether event `id` was not handed out yet; records it.
    fn first_time(&mut self, id: i64) -> bool {
        if self.floor.is_some_and(|f| id <= f) || !self.recent.insert(id) {
            return false;
        }
        self.after = Some(self.after.map_or(id, |a| a.max(id)));
        while self.recent.len() > RECENT {
            if let Some(oldest) = self.recent.pop_first() {
                self.floor = Some(self.floor.map_or(oldest, |f| f.max(oldest)));
            }
        }
        true
    }

    async fn connect(&mut self) -> Result<Body, End> {
        let after = self.after.map_or("now".to_owned(), |a| a.to_string());
        let mut query = vec![("after", after), ("client", self.kind.to_owned())];
        if let Some(room) = &self.conn.room {
            query.push(("room", room.clone()));
        }
        let url = format!("{}/v1/stream", self.conn.base);
        let with_query = reqwest::Url::parse_with_params(&url, &query).map_err(|e| {
            End::Fatal(format!(
                "CHATROOM_URL {:?} is not a URL: {e}",
                self.conn.base
            ))
        })?;
        let response = self
            .http
            .get(with_query)
            .bearer_auth(&self.conn.token)
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| {
                End::Retry(format!(
                    "cannot reach {url}: {} (is the server running, is CHATROOM_URL right?)",
                    super::cause_chain(&e)
                ))
            })?;
        let status = response.status().as_u16();
        if status != 200 {
            let message = refusal_message(response).await;
            return Err(match status {
                401 => End::Fatal(format!(
                    "the token was refused (HTTP 401: {message}); check CHATROOM_TOKEN"
                )),
                403 | 404 | 421 | 400 => End::Fatal(format!("HTTP {status}: {message}")),
                _ => End::Retry(format!("HTTP {status}: {message}")),
            });
        }
        Ok(Box::pin(response.bytes_stream()))
    }
}

/// Why a stream gave no next chunk.
#[derive(Debug)]
pub enum Gap {
    /// Nothing came for [`STALL`].
    Silent,
    /// The server ended the stream (it is restarting).
    Closed,
    /// The connection failed; the cause chain.
    Broke(String),
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gap::Silent => f.write_str("the stream went silent"),
            Gap::Closed => f.write_str("the server closed the stream"),
            Gap::Broke(cause) => write!(f, "the stream broke off: {cause}"),
        }
    }
}

/// The stream's next chunk, trusting a silent stream for [`STALL`].
pub async fn next_chunk<S>(body: &mut S) -> Result<axum::body::Bytes, Gap>
where
    S: futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin,
{
    match tokio::time::timeout(STALL, body.next()).await {
        Err(_) => Err(Gap::Silent),
        Ok(None) => Err(Gap::Closed),
        Ok(Some(Err(e))) => Err(Gap::Broke(super::cause_chain(&e))),
        Ok(Some(Ok(chunk))) => Ok(chunk),
    }
}

/// The server's message of a refused stream (its JSON error's `message`,
/// else the start of the body).
pub async fn refusal_message(response: reqwest::Response) -> String {
    let body = response.text().await.unwrap_or_default();
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| body.chars().take(200).collect())
}

/// A reconnect pause that doubles up to 30 s.
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff(Duration::from_secs(1))
    }
}

impl Backoff {
    pub fn reset(&mut self) {
        self.0 = Duration::from_secs(1);
    }

    pub async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
    }
}

/// A minimal Server-Sent Events parser: bytes in, `(event, data)` out.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    pub fn push(&mut self, chunk: &[u8]) -> Vec<(String, String)> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some((end, skip)) = block_end(&self.buf) {
            let block: Vec<u8> = self.buf.drain(..end + skip).take(end).collect();
            let text = String::from_utf8_lossy(&block);
            let mut name = String::from("message");
            let mut data: Vec<&str> = Vec::new();
            for line in text.lines() {
                if line.starts_with(':') {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => name = value.to_owned(),
                    "data" => data.push(value),
                    _ => {}
                }
            }
            if !data.is_empty() {
                out.push((name, data.join("\n")));
            }
        }
        out
    }
}

/// Where the first event block ends (a blank line) and the separator length.
fn block_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.push(b": keep-alive\n\nevent: act").is_empty());
        let got = p.push(b"ivity\nid: 3\ndata: {\"a\":1}\n\nevent: chat\ndata: x\n\n");
        assert_eq!(
            got,
            vec![
                ("activity".to_owned(), "{\"a\":1}".to_owned()),
                ("chat".to_owned(), "x".to_owned())
            ]
        );
    }

    fn follower(after: Option<i64>) -> Follower {
        let conn = Conn {
            base: "http://127.0.0.1:1".into(),
            token: "cr_x".into(),
            room: None,
        };
        Follower::new(conn, "channel", after)
    }

    /// An event announced after a newer one (two writers finishing out of
    /// id order) is still handed out, and each id only once.
    #[test]
    fn late_events_are_handed_out_once() {
        let mut f = follower(Some(10));
        assert!(!f.first_time(9), "at or below the start");
        assert!(!f.first_time(10));
        assert!(f.first_time(12));
        assert!(f.first_time(11), "late, not seen yet");
        assert!(!f.first_time(11));
        assert!(!f.first_time(12));
        assert_eq!(f.after, Some(12), "a reconnect resumes after the newest");
    }

    /// The memory of ids is bounded: past it, the oldest become the floor.
    #[test]
    fn the_memory_of_ids_is_bounded() {
        let mut f = follower(Some(0));
        for id in 1..=(RECENT as i64 + 10) {
            assert!(f.first_time(id));
        }
        assert_eq!(f.recent.len(), RECENT);
        assert_eq!(f.floor, Some(10));
        assert!(!f.first_time(5));
    }
}
