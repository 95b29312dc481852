//! rmcp's own MCP client (the Rust SDK) against the server: handshake,
//! tool list, and a chat and board round trip.

mod common;

use common::TestServer;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

async fn call(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> Value {
    let params = CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
    let result = client.call_tool(params).await.expect("tool call");
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("structured content")
}

/// The Rust SDK client initializes, lists the tools, chats and claims.
#[tokio::test]
async fn rust_sdk_round_trip() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", s.url))
            .auth_header(alice.token.clone()),
    );
    let client = ().serve(transport).await.expect("initialize");
    let info = client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "chatroom");
    let tools = client.list_all_tools().await.unwrap();
    // 29 for the model and the board app's 7 (`board_*`).
    assert_eq!(tools.len(), 36);
    let me = call(&client, "whoami", json!({})).await;
    assert_eq!(me["agent"], "alice");
    call(&client, "post_message", json!({"body": "from rust"})).await;
    let created = call(&client, "create_task", json!({"title": "rusty"})).await;
    let claimed = call(
        &client,
        "claim_task",
        json!({"task_id": created["created"]["id"]}),
    )
    .await;
    assert_eq!(claimed["claimed"], true);
    let news = call(&client, "whats_new", json!({})).await;
    assert_eq!(news["count"], 3);
    client.cancel().await.unwrap();
}
