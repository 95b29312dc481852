//! The board inside the chat app (MCP Apps, SPEC §4a) over JSON-RPC: the
//! resources capability, the `ui://chatroom/board` resource and its `_meta`,
//! the error for an unknown resource, `show_board`'s `_meta` and answer, and
//! the room rules on it.

mod common;

use chatroom::domain::tokens::Grant;
use common::{McpClient, TestServer};
use serde_json::{Value, json};

const URI: &str = "ui://chatroom/board";
const MIME: &str = "text/html;profile=mcp-app";

async fn rpc(c: &McpClient, method: &str, params: Value) -> Value {
    let (status, v) = c
        .rpc(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .await;
    assert_eq!(status, 200, "{method}: HTTP {status}: {v}");
    v
}

/// `initialize` advertises resources beside tools, prompts, and the
/// `io.modelcontextprotocol/ui` and skills extensions.
#[tokio::test]
async fn resources_capability_is_advertised() {
    let s = TestServer::start().await;
    let c = s.agent("alice", "lobby").await;
    let v = rpc(
        &c,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    )
    .await;
    let caps = &v["result"]["capabilities"];
    assert!(caps["resources"].is_object(), "{v}");
    assert!(caps["tools"].is_object(), "{v}");
    // MCP Apps and skills, declared to a client that declared nothing
    // (hosts probe with empty capabilities first); prompts; and what
    // subscriptions/listen delivers.
    let ext = &caps["extensions"];
    assert_eq!(
        ext["io.modelcontextprotocol/ui"]["mimeTypes"],
        json!(["text/html;profile=mcp-app"]),
        "{v}"
    );
    assert!(ext["io.modelcontextprotocol/skills"].is_object(), "{v}");
    assert!(caps["prompts"].is_object(), "{v}");
    assert_eq!(caps["resources"]["subscribe"], true, "{v}");
    assert_eq!(caps["tools"]["listChanged"], true, "{v}");
}

/// `resources/list` names the board app with its mime type and a CSP that
/// allows no outside origin; `resources/read` (without `initialize`, as
/// every stateless call) answers one self-contained HTML document.
#[tokio::test]
async fn the_board_resource_is_listed_and_read() {
    let s = TestServer::start().await;
    let c = s.agent("alice", "lobby").await;
    let v = rpc(&c, "resources/list", json!({})).await;
    let list = v["result"]["resources"].as_array().expect("resources");
    // The app, the coordination skill, and the board of the one room.
    assert_eq!(list.len(), 3, "{v}");
    assert_eq!(list[0]["uri"], URI);
    assert_eq!(list[1]["uri"], "skill://chatroom/coordination/SKILL.md");
    assert_eq!(list[2]["uri"], "chatroom://room/lobby/board");
    assert_eq!(list[0]["mimeType"], MIME);
    let no_domains = json!({"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []});
    assert_eq!(list[0]["_meta"]["ui"]["csp"], no_domains);

    let v = rpc(&c, "resources/read", json!({"uri": URI})).await;
    let contents = v["result"]["contents"].as_array().expect("contents");
    assert_eq!(contents.len(), 1, "{v}");
    let doc = &contents[0];
    assert_eq!(doc["uri"], URI);
    assert_eq!(doc["mimeType"], MIME);
    assert_eq!(doc["_meta"]["ui"]["csp"], no_domains);
    let html = doc["text"].as_str().expect("text");
    assert!(html.starts_with("<!doctype html>"), "{}", &html[..80]);
    // Self-contained: nothing to fetch, and no secret or address of ours.
    for outside in ["<script src", "<link", "@import", "url(http", "src=\"http"] {
        assert!(!html.contains(outside), "the document loads {outside}");
    }
    assert!(
        !html.contains(&c.token),
        "the caller's token is in the document"
    );
    // Nothing shaped like a token (`cr_` and 43 URL-safe characters).
    let token_like = html.match_indices("cr_").any(|(i, _)| {
        html[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .count()
            >= 40
    });
    assert!(!token_like, "a token-like string is in the document");
    assert!(
        !html.contains(&s.url),
        "the server's URL is in the document"
    );
    // The app bridge and the dashboard's sanitiser are inside.
    assert!(html.contains("globalThis.McpExtApps=Object.freeze({"));
    assert!(html.contains("ChatroomMarkdown"));
    assert!(html.contains("DOMPurify"));
}

/// An unknown URI is a JSON-RPC resource-not-found error (-32002), for any
/// string a client sends.
#[tokio::test]
async fn unknown_resources_are_not_found() {
    let s = TestServer::start().await;
    let c = s.agent("alice", "lobby").await;
    for uri in [
        "ui://chatroom/other",
        "file:///etc/passwd",
        "",
        "ui://chatroom/board/../x",
    ] {
        let v = rpc(&c, "resources/read", json!({"uri": uri})).await;
        assert_eq!(v["error"]["code"], -32002, "{uri:?}: {v}");
        assert!(v["result"].is_null(), "{v}");
    }
    // A malformed read is a JSON-RPC error of the MCP layer, not a crash.
    let v = rpc(&c, "resources/read", json!({"uri": 5})).await;
    let code = v["error"]["code"].as_i64().unwrap_or(0);
    assert!([-32601, -32602].contains(&code), "{v}");
    // And the server is still there.
    c.call("whoami", json!({})).await;
}

/// Resources need a token like everything else at /mcp.
#[tokio::test]
async fn resources_need_a_token() {
    let s = TestServer::start().await;
    let c = McpClient::new(&s.url, "cr_not_a_real_token_at_all_0000000000000");
    let (status, _) = c
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": URI}}),
        )
        .await;
    assert_eq!(status, 401);
}

/// `show_board` carries `_meta.ui.resourceUri`; the tool list keeps every
/// other tool, none of which opens the app.
#[tokio::test]
async fn show_board_points_at_the_app() {
    let s = TestServer::start().await;
    let c = s.agent("alice", "lobby").await;
    let v = rpc(&c, "tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for name in [
        "whoami",
        "claim_task",
        "review_task",
        "post_message",
        "wait_for_change",
    ] {
        assert!(names.contains(&name), "{name} missing");
    }
    let board = tools
        .iter()
        .find(|t| t["name"] == "show_board")
        .expect("show_board");
    assert_eq!(board["_meta"]["ui"]["resourceUri"], URI);
    assert!(
        board["inputSchema"]["properties"]["room"].is_object(),
        "{board}"
    );
    for t in tools.iter().filter(|t| t["name"] != "show_board") {
        let name = t["name"].as_str().unwrap();
        if name.starts_with("board_") {
            // The app's buttons: hidden from the model, opening nothing.
            assert_eq!(t["_meta"]["ui"], json!({"visibility": ["app"]}), "{t}");
        } else {
            assert!(t.get("_meta").is_none(), "{name} has _meta");
        }
    }
}

/// The answer: every status as a column, the chat oldest first with its
/// threads, the activity, all labelled untrusted; one audit row.
#[tokio::test]
async fn show_board_shows_the_room() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let bob = s.agent("bob", "lobby").await;
    let t1 = alice.call("create_task", json!({"title": "one"})).await["created"]["id"].clone();
    let t2 = bob
        .call("create_task", json!({"title": "two", "claim": true}))
        .await["created"]["id"]
        .clone();
    let first = alice
        .call("post_message", json!({"body": "hello @bob"}))
        .await["message_id"]
        .clone();
    bob.call("post_message", json!({"body": "hi", "reply_to": first}))
        .await;
    let v = bob.call("show_board", json!({})).await;
    assert_eq!(v["room"], "lobby");
    assert_eq!(v["you_are"], "bob");
    assert!(v["untrusted_content_warning"].is_string(), "{v}");
    let board = v["board"].as_object().expect("board");
    for status in [
        "pending",
        "in_progress",
        "blocked",
        "in_review",
        "done",
        "cancelled",
    ] {
        assert!(board[status].is_array(), "no column {status}: {v}");
    }
    assert_eq!(board["pending"][0]["id"], t1);
    assert_eq!(board["in_progress"][0]["id"], t2);
    assert_eq!(board["in_progress"][0]["assignee"], "bob");
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2);
    assert_eq!(msgs[0]["body"], "hello @bob");
    assert_eq!(msgs[0]["mentions_you"], true);
    assert_eq!(msgs[1]["reply_to"], first);
    assert_eq!(v["latest_message_id"], msgs[1]["id"]);
    let events = v["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "task_claimed" && e["by_you"] == true),
        "{v}"
    );
    assert_eq!(v["latest_event_id"], events.last().unwrap()["id"]);
    // Five calls, five audit rows: show_board's many reads make one.
    let store = s.store.clone();
    s.stop().await;
    assert_eq!(
        store.audit_count().await.unwrap(),
        5,
        "one audit row per call"
    );
}

/// A long room shows its newest chat and activity, not its oldest.
#[tokio::test]
async fn show_board_shows_the_newest() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    let other = s.agent("zed", "elsewhere").await;
    for n in 0..130 {
        alice
            .call("post_message", json!({"body": format!("m{n}")}))
            .await;
        // Interleaved ids of another room must not shift the window.
        if n % 3 == 0 {
            other.call("post_message", json!({"body": "noise"})).await;
        }
    }
    let v = alice.call("show_board", json!({})).await;
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 50);
    assert_eq!(msgs[0]["body"], "m80");
    assert_eq!(msgs[49]["body"], "m129");
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), 40);
    assert_eq!(events[39]["data"]["body"], "m129");
    assert!(
        events.iter().all(|e| e["actor"] == "alice"),
        "another room's events leaked"
    );
}

/// Room rules: a room not granted is `forbidden` (whether or not it
/// exists), a granted second room is shown, other rooms' tasks never appear
/// and their ids are `not_found` here; a read-only token may look, and
/// `whoami` tells the app it may not write.
#[tokio::test]
async fn show_board_keeps_the_room_rules() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    s.room("secret").await;
    s.room("side").await;
    let alice = s.mcp(
        &s.token_with(Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            also_rooms: vec!["side".into()],
            ..Grant::default()
        })
        .await,
    );
    let spy = s.agent("mallory", "secret").await;
    let hidden = spy
        .call("create_task", json!({"title": "secret plan"}))
        .await["created"]["id"]
        .clone();
    alice
        .call("create_task", json!({"title": "side job", "room": "side"}))
        .await;

    assert_eq!(
        alice.refused("show_board", json!({"room": "secret"})).await,
        "forbidden"
    );
    assert_eq!(
        alice
            .refused("show_board", json!({"room": "nosuchroom"}))
            .await,
        "forbidden"
    );

    let lobby = alice.call("show_board", json!({})).await;
    assert!(!lobby.to_string().contains("secret plan"));
    assert!(!lobby.to_string().contains("side job"));
    let side = alice.call("show_board", json!({"room": "side"})).await;
    assert_eq!(side["room"], "side");
    assert_eq!(side["board"]["pending"][0]["title"], "side job");
    // What the app would do with an id of another room.
    assert_eq!(
        alice
            .refused("claim_task", json!({"task_id": hidden}))
            .await,
        "not_found"
    );
    assert_eq!(
        alice.refused("get_task", json!({"task_id": hidden})).await,
        "not_found"
    );

    let observer = s.mcp(
        &s.token_with(Grant {
            agent: "olga".into(),
            room: "lobby".into(),
            readonly: true,
            ..Grant::default()
        })
        .await,
    );
    let seen = observer.call("show_board", json!({})).await;
    assert_eq!(seen["room"], "lobby");
    let me = observer.call("whoami", json!({})).await;
    assert_eq!(me["readonly"], true, "the app learns it may not write");
    let task = seen["board"]["pending"].as_array().unwrap().len();
    assert_eq!(task, 0);
    let t = alice
        .call("create_task", json!({"title": "look only"}))
        .await["created"]["id"]
        .clone();
    assert_eq!(
        observer.refused("claim_task", json!({"task_id": t})).await,
        "read_only"
    );
    assert_eq!(
        observer
            .refused("post_message", json!({"body": "hi"}))
            .await,
        "read_only"
    );
}
