//! Tool profiles: a token's profile decides which tools it sees in
//! `tools/list` and which it may call; `add-token --profile` and `connect
//! --profile` mint them. Also the figures BENCHMARKS.md quotes: each
//! profile's `tools/list` size and `show_board`'s text for a busy room.

mod common;

use common::{Grant, TestServer, run_cli};
use serde_json::{Value, json};

use chatroom::domain::profile::Profile;

/// The `tools/list` answer a token of `profile` gets: its names and size.
async fn listed(s: &TestServer, agent: &str, profile: Profile) -> (Vec<String>, usize, String) {
    let token = s
        .token_with(Grant {
            agent: agent.into(),
            room: "lobby".into(),
            lead: profile == Profile::Lead,
            profile,
            ..Grant::default()
        })
        .await;
    let (status, v) = s
        .mcp(&token)
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .await;
    assert_eq!(status, 200, "{v}");
    let tools = v["result"]["tools"].as_array().expect("tools");
    let names = tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let bytes = serde_json::to_string(tools).unwrap().len();
    let for_model: Vec<&Value> = tools
        .iter()
        .filter(|t| t["_meta"]["ui"]["visibility"] != json!(["app"]))
        .collect();
    println!(
        "profile {profile}: without the app-only tools {} tools, {} bytes",
        for_model.len(),
        serde_json::to_string(&for_model).unwrap().len()
    );
    (names, bytes, token)
}

/// Each profile lists only its tools; a worker's list is at most a third
/// of the full one's size; a call outside the profile is refused
/// (`forbidden`, nothing changes) and audited as refused.
#[tokio::test]
async fn a_profile_lists_and_allows_only_its_tools() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let mut sizes = Vec::new();
    let mut full_bytes = 0;
    let mut worker = (Vec::new(), 0, String::new());
    for (i, p) in Profile::ALL.into_iter().enumerate() {
        let got = listed(&s, &format!("agent{i}"), p).await;
        for name in &got.0 {
            assert!(p.allows(name), "{p} lists {name}");
        }
        println!(
            "profile {p}: {} tools, {} bytes (~{} tokens)",
            got.0.len(),
            got.1,
            got.1 / 4
        );
        sizes.push((p, got.0.len(), got.1));
        match p {
            Profile::Full => full_bytes = got.1,
            Profile::Worker => worker = got,
            _ => {}
        }
    }
    assert!(
        worker.1 * 3 <= full_bytes,
        "a worker's list ({} bytes) is over a third of the full one ({full_bytes})",
        worker.1
    );
    assert_eq!(
        sizes[0].1,
        chatroom::mcp::TOOLS.len(),
        "full lists every tool"
    );
    let w = s.mcp(&worker.2);
    let created = w
        .try_call("create_task", json!({"title": "not mine to make"}))
        .await;
    assert!(created.is_error);
    assert_eq!(
        created.body["error"]["code"], "forbidden",
        "{}",
        created.body
    );
    assert!(
        created.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("profile"),
        "{}",
        created.body
    );
    // What the worker may do works.
    w.call("post_message", json!({"body": "from a worker"}))
        .await;
    let lead = s
        .token_with(Grant {
            agent: "boss".into(),
            room: "lobby".into(),
            lead: true,
            ..Grant::default()
        })
        .await;
    let tasks = s.mcp(&lead).call("list_tasks", json!({})).await;
    assert_eq!(tasks["count"], 0, "the refused call created nothing");
}

/// `add-token --profile worker` and `connect --profile worker` mint that
/// profile (shown in `--json`); a wrong name is refused, naming the choices.
#[tokio::test]
async fn the_cli_mints_profiles() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let env = s.cli_env();
    let (code, out, err) = run_cli(
        &[
            "admin",
            "add-token",
            "--agent",
            "wally",
            "--room",
            "lobby",
            "--profile",
            "worker",
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["profile"], "worker");
    let (status, listed) = s
        .mcp(v["token"].as_str().unwrap())
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 10);
    let (code, out, err) = run_cli(
        &[
            "admin",
            "connect",
            "--agent",
            "appy",
            "--room",
            "lobby",
            "--profile",
            "app",
            "--json",
        ],
        &env,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["profile"], "app");
    let (code, _, err) = run_cli(
        &[
            "admin",
            "add-token",
            "--agent",
            "x",
            "--room",
            "lobby",
            "--profile",
            "root",
        ],
        &env,
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("worker"), "{err}");
}

/// `show_board` on a busy room (30 tasks, 30 messages): the text the model
/// reads is a short summary; the board travels as structured content.
#[tokio::test]
async fn show_board_tells_the_model_little() {
    let s = TestServer::start().await;
    let alice = s.agent("alice", "lobby").await;
    for i in 0..30 {
        alice
            .call(
                "create_task",
                json!({"title": format!("task number {i} with a title of some length"), "body": "x".repeat(400)}),
            )
            .await;
        alice
            .call(
                "post_message",
                json!({"body": format!("message {i}: {}", "y".repeat(300))}),
            )
            .await;
    }
    let (status, v) = alice
        .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "show_board", "arguments": {}}}))
        .await;
    assert_eq!(status, 200);
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    let whole = serde_json::to_string(&v["result"]["structuredContent"]).unwrap();
    println!(
        "show_board: text {} characters, structured content {} characters",
        text.chars().count(),
        whole.chars().count()
    );
    assert!(text.chars().count() <= 4000, "{text}");
    assert!(text.contains("pending 30"), "{text}");
    assert!(text.contains("claimable"), "{text}");
    assert_eq!(
        v["result"]["structuredContent"]["board"]["pending"]
            .as_array()
            .unwrap()
            .len(),
        30
    );
}
