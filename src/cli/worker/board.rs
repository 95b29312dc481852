//! The board side: an MCP client of `/mcp` (rmcp's streamable-HTTP client)
//! speaking the same tools any agent uses, with the worker's own token.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::secret::Secret;

/// How long one board call may take before the worker gives up on it.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Tasks fetched per `list_tasks` page.
pub const PAGE_SIZE: i64 = 100;

/// The fields of a task the worker uses.
#[derive(Debug, Clone, Deserialize)]
pub struct BoardTask {
    pub id: i64,
    pub title: String,
    #[serde(default)]
    pub body: String,
    pub status: String,
    pub assignee: Option<String>,
    pub required_skill: Option<String>,
    #[serde(default)]
    pub blocked_by_unfinished: Vec<i64>,
    #[serde(default)]
    pub priority: String,
    #[serde(default)]
    pub created_by: String,
    #[serde(default)]
    pub version: i64,
}

/// Who the worker is on the board (from `whoami`).
#[derive(Debug, Clone, Deserialize)]
pub struct Me {
    pub agent: String,
    pub room: String,
    #[serde(default)]
    pub skills: Vec<String>,
    #[serde(default)]
    pub readonly: bool,
}

/// Why a board call failed. The text names no secret.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// The tool answered with an error (`isError: true`).
    #[error("{tool} refused: {code}: {message}")]
    Refused {
        tool: &'static str,
        code: String,
        message: String,
    },
    #[error("{tool} failed: {detail}")]
    Failed { tool: &'static str, detail: String },
}

/// A connected MCP client of the board.
pub struct Board {
    service: RunningService<RoleClient, ClientConfig>,
}

impl Board {
    /// Connects to `mcp_url` (the `initialize` handshake) with `token`.
    pub async fn connect(mcp_url: &str, token: &Secret) -> anyhow::Result<Board> {
        let http = crate::tls::client_builder()
            .connect_timeout(Duration::from_secs(10))
            // The token must not follow a redirect to some other host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("chatroom-worker/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let config = StreamableHttpClientTransportConfig::with_uri(mcp_url.to_owned())
            .auth_header(token.expose().to_owned());
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let info = ClientConfig::new(
            Default::default(),
            Implementation::new("chatroom-worker", env!("CARGO_PKG_VERSION")),
        );
        let service = tokio::time::timeout(CALL_TIMEOUT, info.serve(transport))
            .await
            .map_err(|_| anyhow::anyhow!("the board did not answer within {CALL_TIMEOUT:?}"))?
            .map_err(|e| match e.auth_challenge() {
                Some(_) => anyhow::anyhow!(
                    "the board refused CHATROOM_TOKEN (HTTP 401): check the token, or mint a new one"
                ),
                None => anyhow::anyhow!("cannot connect to the board at CHATROOM_URL: {e}"),
            })?;
        Ok(Board { service })
    }

    /// Calls `tool`; returns its JSON result, or the refusal.
    pub async fn call(&self, tool: &'static str, args: Value) -> Result<Value, BoardError> {
        let failed = |detail: String| BoardError::Failed { tool, detail };
        let Value::Object(args) = args else {
            return Err(failed("arguments must be an object".into()));
        };
        let params = CallToolRequestParams::new(tool).with_arguments(args);
        let result = tokio::time::timeout(CALL_TIMEOUT, self.service.call_tool(params))
            .await
            .map_err(|_| failed(format!("no answer within {CALL_TIMEOUT:?}")))?
            .map_err(|e| failed(e.to_string()))?;
        let body = match result.structured_content {
            Some(v) => v,
            None => result
                .content
                .iter()
                .find_map(|c| c.as_text())
                .and_then(|t| serde_json::from_str(&t.text).ok())
                .unwrap_or(Value::Null),
        };
        if result.is_error == Some(true) {
            return Err(BoardError::Refused {
                tool,
                code: body["error"]["code"].as_str().unwrap_or("error").to_owned(),
                message: body["error"]["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        Ok(body)
    }

    pub async fn whoami(&self) -> Result<Me, BoardError> {
        let v = self.call("whoami", json!({})).await?;
        serde_json::from_value(v).map_err(|e| BoardError::Failed {
            tool: "whoami",
            detail: format!("unexpected answer: {e}"),
        })
    }

    /// Every task matching the filters, paging back with `before_id`.
    pub async fn all_tasks(
        &self,
        status: &str,
        assignee: Option<&str>,
    ) -> Result<Vec<BoardTask>, BoardError> {
        let mut all = Vec::new();
        let mut before_id: Option<i64> = None;
        loop {
            let mut args = json!({"status": status, "limit": PAGE_SIZE});
            if let Some(a) = assignee {
                args["assignee"] = json!(a);
            }
            if let Some(b) = before_id {
                args["before_id"] = json!(b);
            }
            let v = self.call("list_tasks", args).await?;
            let page: Vec<BoardTask> =
                serde_json::from_value(v["tasks"].clone()).map_err(|e| BoardError::Failed {
                    tool: "list_tasks",
                    detail: format!("unexpected answer: {e}"),
                })?;
            let full = page.len() as i64 >= PAGE_SIZE;
            // Newest first: the next page lies below the smallest id seen.
            let lowest = page.iter().map(|t| t.id).min();
            all.extend(page);
            match lowest {
                Some(id) if full && before_id.is_none_or(|b| id < b) => before_id = Some(id),
                _ => return Ok(all),
            }
        }
    }

    /// Claims task `id`; `Ok(Ok(version))` when it is ours (the task's
    /// version after the claim), `Ok(Err(reason))` when the board said no
    /// (someone was faster, say).
    pub async fn claim(
        &self,
        id: i64,
        lease_seconds: i64,
    ) -> Result<Result<i64, String>, BoardError> {
        let v = self
            .call(
                "claim_task",
                json!({"task_id": id, "lease_seconds": lease_seconds}),
            )
            .await?;
        if v["claimed"] == json!(true) {
            Ok(Ok(v["task"]["version"].as_i64().unwrap_or(0)))
        } else {
            Ok(Err(v["reason"].as_str().unwrap_or("refused").to_owned()))
        }
    }

    /// Releases task `id`; `Ok(false)` when the board said it was not ours.
    pub async fn release(&self, id: i64, reason: &str) -> Result<bool, BoardError> {
        let v = self
            .call("release_task", json!({"task_id": id, "reason": reason}))
            .await?;
        Ok(v["released"] == json!(true))
    }

    pub async fn submit(&self, id: i64, result: &str) -> Result<(), BoardError> {
        self.call("submit_result", json!({"task_id": id, "result": result}))
            .await
            .map(|_| ())
    }

    pub async fn note(&self, id: i64, body: &str) -> Result<(), BoardError> {
        self.call("add_note", json!({"task_id": id, "body": body}))
            .await
            .map(|_| ())
    }

    /// Ends the MCP session (a no-op for a stateless server, but polite).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}
