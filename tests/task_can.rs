//! `can`, the actions a task's viewer may take on it, against what the
//! tools actually do: for tasks in every state and callers in every role,
//! each action `can` lists goes through and each one it leaves out is
//! refused; and every surface that shows a task shows the same `can`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::rest::Rest;
use common::{Grant, McpClient, TestServer};
use serde_json::{Value, json};

/// Every action `can` may name.
const ACTIONS: [&str; 7] = [
    "claim", "release", "note", "update", "submit", "review", "cancel",
];

/// The callers of the matrix, by name.
struct People {
    /// A writer who creates most tasks.
    cara: McpClient,
    /// A writer with the skill `rust`, who holds the held tasks.
    hal: McpClient,
    lead: McpClient,
    /// A room admin.
    ada: McpClient,
    /// A writer with no part in any task.
    oli: McpClient,
    /// A read-only token.
    obs: McpClient,
}

impl People {
    async fn new(s: &TestServer) -> People {
        s.room("lobby").await;
        let grant = |agent: &str| Grant {
            agent: agent.into(),
            room: "lobby".into(),
            ..Grant::default()
        };
        let mint = async |g: Grant| s.mcp(&s.token_with(g).await);
        People {
            cara: mint(grant("cara")).await,
            hal: mint(Grant {
                skills: vec!["rust".into()],
                ..grant("hal")
            })
            .await,
            lead: mint(Grant {
                lead: true,
                ..grant("lead")
            })
            .await,
            ada: mint(Grant {
                admin: true,
                ..grant("ada")
            })
            .await,
            oli: mint(grant("oli")).await,
            obs: mint(Grant {
                readonly: true,
                ..grant("obs")
            })
            .await,
        }
    }

    fn all(&self) -> [(&'static str, &McpClient); 6] {
        [
            ("cara", &self.cara),
            ("hal", &self.hal),
            ("lead", &self.lead),
            ("ada", &self.ada),
            ("oli", &self.oli),
            ("obs", &self.obs),
        ]
    }
}

/// The task states of the matrix.
const STATES: [&str; 11] = [
    "pending",
    "pending reserved for hal",
    "pending needing rust",
    "pending behind a dependency",
    "in_progress held by hal",
    "in_progress held by hal, needs review",
    "blocked held by hal",
    "blocked held by nobody",
    "in_review held by hal",
    "done",
    "cancelled",
];

/// A new task in `state`; its id.
async fn make(p: &People, state: &str) -> i64 {
    let create = async |who: &McpClient, args: Value| -> i64 {
        let mut args = args;
        args["title"] = json!(format!("a task {state}"));
        who.call("create_task", args).await["created"]["id"]
            .as_i64()
            .unwrap()
    };
    let claim = async |id: i64| {
        let r = p.hal.call("claim_task", json!({"task_id": id})).await;
        assert_eq!(r["claimed"], true, "{r}");
    };
    match state {
        "pending" => create(&p.cara, json!({})).await,
        "pending reserved for hal" => create(&p.lead, json!({"assignee": "hal"})).await,
        "pending needing rust" => create(&p.cara, json!({"required_skill": "rust"})).await,
        "pending behind a dependency" => {
            let dep = create(&p.cara, json!({})).await;
            create(&p.cara, json!({"depends_on": [dep]})).await
        }
        "in_progress held by hal" => {
            let id = create(&p.cara, json!({})).await;
            claim(id).await;
            id
        }
        "in_progress held by hal, needs review" => {
            let id = create(&p.cara, json!({"needs_review": true})).await;
            claim(id).await;
            id
        }
        "blocked held by hal" => {
            let id = create(&p.cara, json!({})).await;
            claim(id).await;
            p.hal
                .call("update_task", json!({"task_id": id, "status": "blocked"}))
                .await;
            id
        }
        "blocked held by nobody" => {
            let id = create(&p.cara, json!({})).await;
            p.cara
                .call("update_task", json!({"task_id": id, "status": "blocked"}))
                .await;
            id
        }
        "in_review held by hal" => {
            let id = create(&p.cara, json!({"needs_review": true})).await;
            claim(id).await;
            p.hal
                .call("submit_result", json!({"task_id": id, "result": "r"}))
                .await;
            id
        }
        "done" => {
            let id = create(&p.cara, json!({})).await;
            claim(id).await;
            p.hal
                .call("submit_result", json!({"task_id": id, "result": "r"}))
                .await;
            id
        }
        "cancelled" => {
            let id = create(&p.cara, json!({})).await;
            p.cara.call("cancel_task", json!({"task_id": id})).await;
            id
        }
        other => unreachable!("no state {other}"),
    }
}

/// The task as `who` reads it with `get_task`.
async fn read(who: &McpClient, id: i64) -> Value {
    who.call("get_task", json!({"task_id": id})).await["task"].clone()
}

fn can_of(task: &Value) -> Vec<String> {
    task["can"]
        .as_array()
        .unwrap_or_else(|| panic!("no can in {task}"))
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// The tool calls that take `action` on task `id`: the one that must go
/// through when `can` lists it (the first), and every call that must be
/// refused when it does not.
fn attempts(action: &str, id: i64) -> Vec<(&'static str, Value)> {
    let t = |extra: Value| {
        let mut v = extra;
        v["task_id"] = json!(id);
        v
    };
    match action {
        "claim" => vec![("claim_task", t(json!({})))],
        "release" => vec![("release_task", t(json!({})))],
        "note" => vec![
            ("add_note", t(json!({"body": "a note"}))),
            ("update_task", t(json!({"note": "a note"}))),
        ],
        "update" => vec![
            ("update_task", t(json!({"body": "edited"}))),
            ("update_task", t(json!({"status": "blocked"}))),
            ("update_task", t(json!({"status": "pending"}))),
            ("update_task", t(json!({"status": "in_progress"}))),
            ("update_task", t(json!({"status": "done"}))),
        ],
        "submit" => vec![("submit_result", t(json!({"result": "the result"})))],
        "review" => vec![
            ("review_task", t(json!({"approve": true}))),
            ("review_task", t(json!({"approve": false, "note": "redo"}))),
        ],
        "cancel" => vec![
            ("cancel_task", t(json!({}))),
            ("update_task", t(json!({"status": "cancelled"}))),
        ],
        other => unreachable!("no action {other}"),
    }
}

/// Whether a tool call went through: not an error, and not a soft refusal
/// (`claimed: false`, `released: false`, `updated: false`).
fn went_through(body: &Value, is_error: bool) -> bool {
    !is_error
        && ["claimed", "released", "updated"]
            .iter()
            .all(|k| body[k] != json!(false))
}

/// For every state and caller, `can` (from `get_task`) lists exactly the
/// actions the tools accept: each listed one goes through on a fresh task
/// in that state, and each left out is refused and changes nothing. A
/// read-only token is offered nothing; a skill, an assignment and an
/// unfinished dependency each keep `claim` off the list.
#[tokio::test]
async fn can_lists_exactly_what_the_tools_allow() {
    let s = TestServer::start().await;
    let p = People::new(&s).await;
    let mut table: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for state in STATES {
        for (name, who) in p.all() {
            let id = make(&p, state).await;
            let before = read(&p.cara, id).await;
            let can = can_of(&read(who, id).await);
            for action in ACTIONS.iter().filter(|a| !can.iter().any(|c| c == *a)) {
                for (tool, args) in attempts(action, id) {
                    let r = who.try_call(tool, args.clone()).await;
                    assert!(
                        !went_through(&r.body, r.is_error),
                        "{name} on a task {state}: can = {can:?} leaves out {action}, yet {tool} {args} went through: {}",
                        r.body
                    );
                }
            }
            let after = read(&p.cara, id).await;
            assert_eq!(
                before["version"], after["version"],
                "{name} on a task {state}: a refused action changed the task"
            );
            for (i, action) in can.iter().enumerate() {
                // The first listed action may use this task; each other one
                // gets a fresh task in the same state.
                let task = if i == 0 { id } else { make(&p, state).await };
                let (tool, args) = attempts(action, task).remove(0);
                let r = who.try_call(tool, args.clone()).await;
                assert!(
                    went_through(&r.body, r.is_error),
                    "{name} on a task {state}: can = {can:?} lists {action}, yet {tool} {args} was refused: {}",
                    r.body
                );
            }
            table.insert((state, name), can);
        }
    }
    let of = |state, name| table[&(state, name)].join(" ");
    assert_eq!(of("pending", "obs"), "");
    assert_eq!(of("pending", "oli"), "claim note");
    assert_eq!(of("pending", "cara"), "claim note update cancel");
    assert_eq!(of("pending reserved for hal", "hal"), "claim note");
    assert_eq!(of("pending reserved for hal", "oli"), "note");
    assert_eq!(of("pending needing rust", "hal"), "claim note");
    assert_eq!(of("pending needing rust", "oli"), "note");
    assert_eq!(of("pending behind a dependency", "hal"), "note");
    assert_eq!(
        of("in_progress held by hal", "hal"),
        "release note update submit"
    );
    assert_eq!(of("in_progress held by hal", "oli"), "note");
    assert_eq!(
        of("in_review held by hal", "lead"),
        "note update review cancel"
    );
    assert_eq!(of("in_review held by hal", "hal"), "note update");
    assert_eq!(of("done", "lead"), "note");
    assert_eq!(of("blocked held by nobody", "oli"), "claim note");
}

/// `can` is the same on every surface that shows a task to a viewer: MCP
/// (`get_task`, `list_tasks`, `show_board`, the result of a change), `/v1`
/// (`/v1/tasks`, `/v1/tasks/{id}`) and the stream's `board` snapshot, which
/// is shared by the room's streams but carries each viewer's own `can`.
#[tokio::test]
async fn every_surface_shows_the_viewers_can() {
    let s = TestServer::start().await;
    let p = People::new(&s).await;
    let mut ids = Vec::new();
    for state in STATES {
        ids.push(make(&p, state).await);
    }
    let open: Vec<i64> = {
        let mut v = Vec::new();
        for id in &ids {
            let st = read(&p.cara, *id).await["status"].clone();
            if st != "done" && st != "cancelled" {
                v.push(*id);
            }
        }
        v
    };
    let by_id = |list: &Value| -> BTreeMap<i64, Vec<String>> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|t| (t["id"].as_i64().unwrap(), can_of(t)))
            .collect()
    };
    // Two streams at once, so the second one is served the snapshot the
    // first one built.
    let streams = [
        ("cara", Rest::new(&s.url, &p.cara.token)),
        ("lead", Rest::new(&s.url, &p.lead.token)),
        ("obs", Rest::new(&s.url, &p.obs.token)),
    ];
    let mut open_streams = Vec::new();
    for (name, rest) in &streams {
        open_streams.push((*name, rest.stream("room=lobby&after=now").await));
    }
    for ((name, rest), (_, stream)) in streams.iter().zip(open_streams.iter_mut()) {
        let who = p.all().into_iter().find(|(n, _)| n == name).unwrap().1;
        let mut expected = BTreeMap::new();
        for id in &ids {
            expected.insert(*id, can_of(&read(who, *id).await));
        }
        let listed = who.call("list_tasks", json!({"limit": 200})).await;
        let listed = by_id(&listed["tasks"]);
        for id in &ids {
            assert_eq!(listed[id], expected[id], "{name}: list_tasks, task {id}");
        }
        let board = who.call("show_board", json!({})).await;
        let mut shown = BTreeMap::new();
        for column in board["board"].as_object().unwrap().values() {
            shown.extend(by_id(column));
        }
        for id in &ids {
            assert_eq!(shown[id], expected[id], "{name}: show_board, task {id}");
        }
        let v1 = rest.get("/v1/tasks?room=lobby").await;
        let v1 = by_id(&v1.json["tasks"]);
        for id in &open {
            assert_eq!(v1[id], expected[id], "{name}: /v1/tasks, task {id}");
        }
        for id in &ids {
            let one = rest.get(&format!("/v1/tasks/{id}?room=lobby")).await;
            assert_eq!(
                can_of(&one.json["task"]),
                expected[id],
                "{name}: /v1/tasks/{id}"
            );
        }
        let snapshot = stream.expect("board", Duration::from_secs(10)).await.data;
        let mut streamed = by_id(&snapshot["tasks"]);
        streamed.extend(by_id(&snapshot["closed"]));
        for id in &ids {
            assert_eq!(streamed[id], expected[id], "{name}: the stream, task {id}");
        }
        assert_eq!(snapshot["room"], "lobby");
        assert_eq!(
            snapshot["count"],
            json!(snapshot["tasks"].as_array().unwrap().len())
        );
    }
    // The result of a change shows the changer's `can` after it.
    let id = make(&p, "pending").await;
    let claimed = p.hal.call("claim_task", json!({"task_id": id})).await;
    assert_eq!(
        can_of(&claimed["task"]),
        ["release", "note", "update", "submit"]
    );
    let noted = p
        .oli
        .call("add_note", json!({"task_id": id, "body": "hi"}))
        .await;
    assert_eq!(can_of(&noted["task"]), ["note"]);
}
