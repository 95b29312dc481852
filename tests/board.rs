//! The board over MCP: contended claims, the transition table cell by cell,
//! versions, dependencies, skills, assignment, review, leases, notes.

mod common;

use std::collections::{HashMap, HashSet};

use common::{Grant, McpClient, TestServer};
use futures::future::join_all;
use serde_json::{Value, json};

/// The cast of the table test, all in room `board`.
struct Cast {
    creator: McpClient,
    holder: McpClient,
    lead: McpClient,
    admin: McpClient,
    other: McpClient,
    observer: McpClient,
}

async fn cast(s: &TestServer) -> Cast {
    s.room("board").await;
    let mk = |agent: &str, lead: bool, admin: bool, readonly: bool| Grant {
        agent: agent.into(),
        room: "board".into(),
        lead,
        admin,
        readonly,
        ..Grant::default()
    };
    Cast {
        creator: s.mcp(&s.token_with(mk("creator", false, false, false)).await),
        holder: s.mcp(&s.token_with(mk("holder", false, false, false)).await),
        lead: s.mcp(&s.token_with(mk("lead1", true, false, false)).await),
        admin: s.mcp(&s.token_with(mk("admin1", false, true, false)).await),
        other: s.mcp(&s.token_with(mk("other", false, false, false)).await),
        observer: s.mcp(&s.token_with(mk("observer", false, false, true)).await),
    }
}

fn id(v: &Value) -> i64 {
    v["id"].as_i64().expect("task id")
}

async fn task(c: &McpClient, id: i64) -> Value {
    c.call("get_task", json!({"task_id": id})).await["task"].clone()
}

/// Exactly one of 50 concurrent claimants wins; the losers are told who holds it.
#[tokio::test]
async fn fifty_claimants_one_winner() {
    let s = TestServer::start().await;
    s.room("race").await;
    let creator = s.agent("creator", "race").await;
    let t = id(&creator
        .call("create_task", json!({"title": "contested"}))
        .await["created"]);
    let mut clients = Vec::new();
    for i in 0..50 {
        clients.push(s.mcp(&s.token(&format!("agent{i}"), "race").await));
    }
    let results = join_all(
        clients
            .iter()
            .map(|c| c.call("claim_task", json!({"task_id": t}))),
    )
    .await;
    let winners: Vec<&Value> = results.iter().filter(|r| r["claimed"] == true).collect();
    assert_eq!(winners.len(), 1, "exactly one winner");
    let holder = winners[0]["task"]["assignee"].as_str().unwrap().to_owned();
    for r in results.iter().filter(|r| r["claimed"] == false) {
        assert!(r["reason"].as_str().unwrap().contains(&holder), "{r}");
        assert_eq!(r["task"]["assignee"], holder.as_str());
    }
    let claims = creator
        .call("read_events", json!({"kind": "task_claimed"}))
        .await;
    assert_eq!(claims["count"], 1, "one event for the one change");
    assert_eq!(task(&creator, t).await["version"], 2);
}

/// A storm of 200 tasks claimed by 20 agents at once: every task ends with
/// exactly one holder, and the wins add up to 200.
#[tokio::test]
async fn claim_storm_200_by_20() {
    let s = TestServer::start().await;
    s.room("storm").await;
    let creator = s.agent("creator", "storm").await;
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(id(&creator
            .call("create_task", json!({"title": format!("t{i}")}))
            .await["created"]));
    }
    let mut agents = Vec::new();
    for i in 0..20 {
        agents.push((
            format!("w{i}"),
            s.mcp(&s.token(&format!("w{i}"), "storm").await),
        ));
    }
    let runs = agents.iter().enumerate().map(|(n, (name, c))| {
        let mut order = ids.clone();
        order.rotate_left(n * 10);
        async move {
            let mut won = Vec::new();
            for t in order {
                let r = c.call("claim_task", json!({"task_id": t})).await;
                if r["claimed"] == true {
                    assert_eq!(r["task"]["assignee"], name.as_str());
                    won.push(t);
                }
            }
            (name.clone(), won)
        }
    });
    let results = join_all(runs).await;
    let mut owner: HashMap<i64, String> = HashMap::new();
    for (name, won) in &results {
        for t in won {
            assert!(
                owner.insert(*t, name.clone()).is_none(),
                "task {t} claimed twice"
            );
        }
    }
    assert_eq!(owner.len(), 200, "every task claimed once");
    let mut before = None;
    let mut seen = 0;
    loop {
        let mut args = json!({"limit": 200});
        if let Some(b) = before {
            args["before_id"] = json!(b);
        }
        let page = creator.call("list_tasks", args).await;
        let tasks = page["tasks"].as_array().unwrap().clone();
        if tasks.is_empty() {
            break;
        }
        for t in &tasks {
            assert_eq!(t["status"], "in_progress");
            assert_eq!(t["assignee"].as_str().unwrap(), owner[&id(t)]);
            assert_eq!(t["version"], 2);
        }
        seen += tasks.len();
        before = Some(id(tasks.last().unwrap()));
    }
    assert_eq!(seen, 200);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    Holder,
    Creator,
    Lead,
    Admin,
    Other,
    Observer,
}

const ROLES: [Role; 6] = [
    Role::Holder,
    Role::Creator,
    Role::Lead,
    Role::Admin,
    Role::Other,
    Role::Observer,
];
const STATUSES: [&str; 6] = [
    "pending",
    "in_progress",
    "blocked",
    "in_review",
    "done",
    "cancelled",
];

#[derive(Clone, Debug)]
enum Act {
    Claim,
    SetStatus(&'static str),
    Release,
    Submit,
    Approve,
    Reject,
    Cancel,
    Note,
    Body,
}

fn acts() -> Vec<Act> {
    let mut v = vec![Act::Claim];
    for s in ["pending", "in_progress", "blocked", "done", "cancelled"] {
        v.push(Act::SetStatus(s));
    }
    v.extend([
        Act::Release,
        Act::Submit,
        Act::Approve,
        Act::Reject,
        Act::Cancel,
        Act::Note,
        Act::Body,
    ]);
    v
}

/// What the contract (SPEC §3) says should happen: `Ok(new status)`, or the
/// refusal (`"soft"` for claimed/released false, else an error code).
fn expected(status: &str, act: &Act, role: Role) -> Result<&'static str, &'static str> {
    if role == Role::Observer {
        return Err("read_only");
    }
    // In `pending` there is no holder: the holder agent is just a writer.
    let holds = role == Role::Holder && matches!(status, "in_progress" | "blocked" | "in_review");
    let creator_lead_admin = matches!(role, Role::Creator | Role::Lead | Role::Admin);
    let open_from = matches!(status, "pending" | "in_progress" | "blocked");
    let final_ = matches!(status, "done" | "cancelled");
    let same = |s: &str| -> &'static str { STATUSES.iter().find(|x| **x == s).copied().unwrap() };
    match act {
        Act::Claim => {
            if status == "pending" {
                Ok("in_progress")
            } else {
                Err("soft")
            }
        }
        Act::SetStatus(to) => {
            if !open_from {
                return Err("conflict");
            }
            let allowed = if *to == "cancelled" {
                creator_lead_admin
            } else {
                holds || creator_lead_admin
            };
            if allowed {
                Ok(same(to))
            } else {
                Err("forbidden")
            }
        }
        Act::Release => {
            if matches!(status, "in_progress" | "blocked") && holds {
                Ok("pending")
            } else {
                Err("soft")
            }
        }
        Act::Submit => {
            if !matches!(status, "in_progress" | "blocked") {
                Err("conflict")
            } else if holds {
                Ok("done")
            } else {
                Err("forbidden")
            }
        }
        Act::Approve | Act::Reject => {
            if status != "in_review" {
                Err("conflict")
            } else if matches!(role, Role::Lead | Role::Creator) {
                Ok(if matches!(act, Act::Approve) {
                    "done"
                } else {
                    "pending"
                })
            } else {
                Err("forbidden")
            }
        }
        Act::Cancel => {
            if final_ {
                Err("conflict")
            } else if creator_lead_admin {
                Ok("cancelled")
            } else {
                Err("forbidden")
            }
        }
        Act::Note => Ok(same(status)),
        Act::Body => {
            if !(holds || creator_lead_admin) {
                Err("forbidden")
            } else if final_ {
                Err("conflict")
            } else {
                Ok(same(status))
            }
        }
    }
}

/// Puts a fresh task into `status`, held by `holder` where it is held.
async fn task_in(c: &Cast, status: &str) -> i64 {
    let needs_review = status == "in_review";
    let t = id(&c
        .creator
        .call(
            "create_task",
            json!({"title": "cell", "needs_review": needs_review}),
        )
        .await["created"]);
    match status {
        "pending" => {}
        "in_progress" => {
            c.holder.call("claim_task", json!({"task_id": t})).await;
        }
        "blocked" => {
            c.holder.call("claim_task", json!({"task_id": t})).await;
            c.holder
                .call("update_task", json!({"task_id": t, "status": "blocked"}))
                .await;
        }
        "in_review" | "done" => {
            c.holder.call("claim_task", json!({"task_id": t})).await;
            c.holder
                .call("submit_result", json!({"task_id": t, "result": "r"}))
                .await;
        }
        "cancelled" => {
            c.creator.call("cancel_task", json!({"task_id": t})).await;
        }
        _ => unreachable!(),
    }
    assert_eq!(task(&c.creator, t).await["status"], status);
    t
}

fn client(c: &Cast, role: Role) -> &McpClient {
    match role {
        Role::Holder => &c.holder,
        Role::Creator => &c.creator,
        Role::Lead => &c.lead,
        Role::Admin => &c.admin,
        Role::Other => &c.other,
        Role::Observer => &c.observer,
    }
}

async fn run_cell(c: &Cast, status: &'static str, act: Act, role: Role) -> Result<(), String> {
    let t = task_in(c, status).await;
    let before = task(&c.creator, t).await;
    let who = client(c, role);
    let (tool, args) = match &act {
        Act::Claim => ("claim_task", json!({"task_id": t})),
        Act::SetStatus(to) => ("update_task", json!({"task_id": t, "status": to})),
        Act::Release => ("release_task", json!({"task_id": t})),
        Act::Submit => ("submit_result", json!({"task_id": t, "result": "answer"})),
        Act::Approve => ("review_task", json!({"task_id": t, "approve": true})),
        Act::Reject => (
            "review_task",
            json!({"task_id": t, "approve": false, "note": "redo"}),
        ),
        Act::Cancel => ("cancel_task", json!({"task_id": t, "reason": "r"})),
        Act::Note => ("add_note", json!({"task_id": t, "body": "n"})),
        Act::Body => ("update_task", json!({"task_id": t, "body": "new body"})),
    };
    let r = who.try_call(tool, args).await;
    let soft_refused = r.body["claimed"] == false || r.body["released"] == false;
    let outcome: Result<String, String> = if r.is_error {
        Err(r.code().to_owned())
    } else if soft_refused {
        Err("soft".into())
    } else {
        Ok(task(&c.creator, t).await["status"]
            .as_str()
            .unwrap()
            .to_owned())
    };
    let want = expected(status, &act, role)
        .map(str::to_owned)
        .map_err(str::to_owned);
    let after = task(&c.creator, t).await;
    let cell = format!("{status} × {act:?} × {role:?}");
    if outcome != want {
        return Err(format!(
            "{cell}: got {outcome:?}, want {want:?} ({})",
            r.body
        ));
    }
    match outcome {
        Err(_) if after != before => Err(format!("{cell}: a refused call changed the task")),
        Ok(_) if after["version"].as_i64() != before["version"].as_i64().map(|v| v + 1) => {
            Err(format!("{cell}: a change must bump the version by one"))
        }
        _ => Ok(()),
    }
}

/// Every status × action × role cell of the transition table behaves as the
/// contract says, and a refused call changes nothing.
#[tokio::test]
async fn transition_table_every_cell() {
    let s = TestServer::start().await;
    let c = cast(&s).await;
    let mut cells = Vec::new();
    for status in STATUSES {
        for act in acts() {
            for role in ROLES {
                cells.push((status, act.clone(), role));
            }
        }
    }
    let mut failures = Vec::new();
    for chunk in cells.chunks(24) {
        let results = join_all(
            chunk
                .iter()
                .map(|(st, a, r)| run_cell(&c, st, a.clone(), *r)),
        )
        .await;
        failures.extend(results.into_iter().filter_map(Result::err));
    }
    assert!(
        failures.is_empty(),
        "{} cells failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(cells.len(), 6 * 13 * 6);
}

/// A stale `expected_version` is refused with the current task; without one
/// the write goes through with a `_warning`.
#[tokio::test]
async fn optimistic_concurrency() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    let t = a.call("create_task", json!({"title": "doc"})).await["created"].clone();
    let v1 = t["version"].as_i64().unwrap();
    let r = a
        .call(
            "update_task",
            json!({"task_id": id(&t), "body": "alice's", "expected_version": v1}),
        )
        .await;
    assert_eq!(r["updated"], true);
    assert!(r.get("_warning").is_none());
    let stale = a
        .call(
            "update_task",
            json!({"task_id": id(&t), "body": "again", "expected_version": v1}),
        )
        .await;
    assert_eq!(stale["updated"], false);
    assert_eq!(stale["current"]["version"], v1 + 1);
    assert_eq!(stale["current"]["body"], "alice's");
    assert!(stale["reason"].as_str().unwrap().contains("stale"));
    let blind = b
        .call("update_task", json!({"task_id": id(&t), "note": "fyi"}))
        .await;
    assert_eq!(blind["updated"], true);
    assert!(blind["_warning"].is_string());
    assert_eq!(blind["task"]["version"], v1 + 2);
}

/// A task with unfinished dependencies cannot be claimed until they are done.
#[tokio::test]
async fn dependencies_gate_claims() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    let other_room = s.agent("carol", "elsewhere").await;
    let dep = id(&a.call("create_task", json!({"title": "first"})).await["created"]);
    let foreign = id(&other_room.call("create_task", json!({"title": "x"})).await["created"]);
    assert_eq!(
        a.refused(
            "create_task",
            json!({"title": "bad", "depends_on": [foreign]})
        )
        .await,
        "not_found"
    );
    let t = a
        .call(
            "create_task",
            json!({"title": "second", "depends_on": [dep]}),
        )
        .await["created"]
        .clone();
    assert_eq!(t["depends_on"], json!([dep]));
    assert_eq!(t["blocked_by_unfinished"], json!([dep]));
    let r = b.call("claim_task", json!({"task_id": id(&t)})).await;
    assert_eq!(r["claimed"], false);
    assert!(r["reason"].as_str().unwrap().contains("dependenc"));
    a.call("claim_task", json!({"task_id": dep})).await;
    a.call("submit_result", json!({"task_id": dep, "result": "done"}))
        .await;
    let now = task(&b, id(&t)).await;
    assert_eq!(now["blocked_by_unfinished"], json!([]));
    assert_eq!(
        b.call("claim_task", json!({"task_id": id(&t)})).await["claimed"],
        true
    );
}

/// `required_skill` limits who may claim; assignment reserves a task, and
/// only a lead may assign to someone else.
#[tokio::test]
async fn skills_and_assignment() {
    let s = TestServer::start().await;
    s.room("lobby").await;
    let rustacean = s.mcp(
        &s.token_with(Grant {
            agent: "rusty".into(),
            room: "lobby".into(),
            skills: vec!["Rust".into()],
            ..Grant::default()
        })
        .await,
    );
    let plain = s.agent("plain", "lobby").await;
    let lead = s.mcp(
        &s.token_with(Grant {
            agent: "boss".into(),
            room: "lobby".into(),
            lead: true,
            ..Grant::default()
        })
        .await,
    );
    let t = id(&plain
        .call(
            "create_task",
            json!({"title": "needs rust", "required_skill": "rust"}),
        )
        .await["created"]);
    let r = plain.call("claim_task", json!({"task_id": t})).await;
    assert_eq!(r["claimed"], false);
    assert!(r["reason"].as_str().unwrap().contains("skill"));
    assert_eq!(
        rustacean.call("claim_task", json!({"task_id": t})).await["claimed"],
        true
    );

    assert_eq!(
        plain
            .refused(
                "create_task",
                json!({"title": "for rusty", "assignee": "rusty"})
            )
            .await,
        "forbidden"
    );
    let mine = plain
        .call("create_task", json!({"title": "for me", "assignee": "me"}))
        .await;
    assert_eq!(mine["created"]["assignee"], "plain");
    let reserved = id(&lead
        .call(
            "create_task",
            json!({"title": "for rusty", "assignee": "rusty"}),
        )
        .await["created"]);
    let r = plain.call("claim_task", json!({"task_id": reserved})).await;
    assert_eq!(r["claimed"], false);
    assert!(r["reason"].as_str().unwrap().contains("rusty"));
    assert_eq!(
        rustacean
            .call("claim_task", json!({"task_id": reserved}))
            .await["claimed"],
        true
    );
    let listed = plain.call("list_tasks", json!({"assignee": "rusty"})).await;
    assert_eq!(listed["count"], 2);
}

/// The review gate: submit goes to `in_review`; reject needs a note and
/// clears the holder; approve makes it `done`.
#[tokio::test]
async fn review_gate() {
    let s = TestServer::start().await;
    let creator = s.agent("creator", "lobby").await;
    let worker = s.agent("worker", "lobby").await;
    let t = id(&creator
        .call(
            "create_task",
            json!({"title": "check me", "needs_review": true}),
        )
        .await["created"]);
    worker
        .call("claim_task", json!({"task_id": t, "lease_seconds": 600}))
        .await;
    let r = worker
        .call("submit_result", json!({"task_id": t, "result": "v1"}))
        .await;
    assert_eq!(r["task"]["status"], "in_review");
    assert_eq!(r["task"]["result"], "v1");
    assert!(
        r["task"]["lease_expires_ts"].is_null(),
        "the lease ends with in_progress"
    );
    assert_eq!(
        creator
            .refused("review_task", json!({"task_id": t, "approve": false}))
            .await,
        "invalid_argument"
    );
    let r = creator
        .call(
            "review_task",
            json!({"task_id": t, "approve": false, "note": "needs tests"}),
        )
        .await;
    assert_eq!(r["task"]["status"], "pending");
    assert!(r["task"]["assignee"].is_null());
    let got = creator.call("get_task", json!({"task_id": t})).await;
    assert_eq!(got["task"]["notes"][0]["body"], "needs tests");
    worker.call("claim_task", json!({"task_id": t})).await;
    worker
        .call("update_task", json!({"task_id": t, "status": "done"}))
        .await;
    assert_eq!(
        task(&creator, t).await["status"],
        "in_review",
        "done via update also goes to review"
    );
    let r = creator
        .call("review_task", json!({"task_id": t, "approve": true}))
        .await;
    assert_eq!(r["task"]["status"], "done");
    assert_eq!(
        creator
            .refused("review_task", json!({"task_id": t, "approve": true}))
            .await,
        "conflict"
    );
}

/// A claim with a lease lapses back to `pending` with a `task_lease_expired`
/// event when the holder does not touch the task; a note by the holder renews
/// it. Time moves on the server's clock, by hand.
#[tokio::test]
async fn leases_lapse_and_renew() {
    let clock = chatroom::clock::Clock::manual(chatroom::clock::now_ms());
    let s = TestServer::start_at(clock.clone(), |_| {}).await;
    let a = s.agent("alice", "lobby").await;
    let watcher = s.agent("watcher", "lobby").await;
    let t = id(&a.call("create_task", json!({"title": "leased"})).await["created"]);
    assert_eq!(
        a.refused("claim_task", json!({"task_id": t, "lease_seconds": 0}))
            .await,
        "invalid_argument"
    );
    assert_eq!(
        a.refused("claim_task", json!({"task_id": t, "lease_seconds": 86401}))
            .await,
        "invalid_argument"
    );
    let claimed = a
        .call("claim_task", json!({"task_id": t, "lease_seconds": 60}))
        .await;
    let first_expiry = claimed["task"]["lease_expires_ts"]
        .as_str()
        .unwrap()
        .to_owned();
    // A note by the holder renews the lease (the expiry moves later).
    clock.advance(std::time::Duration::from_secs(1));
    let noted = a
        .call("add_note", json!({"task_id": t, "body": "working"}))
        .await;
    assert!(noted["task"]["lease_expires_ts"].as_str().unwrap() > first_expiry.as_str());
    // A short lease lapses through the sweeper: wait for its event.
    let t2 = id(&a.call("create_task", json!({"title": "short"})).await["created"]);
    watcher.call("whats_new", json!({})).await;
    a.call("claim_task", json!({"task_id": t2, "lease_seconds": 1}))
        .await;
    // Its second passes on the server's clock; the sweeper applies it.
    clock.advance(std::time::Duration::from_secs(2));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = watcher
            .call("wait_for_change", json!({"timeout_s": 5}))
            .await;
        let news = watcher.call("whats_new", json!({})).await;
        if news["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "task_lease_expired")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lease never lapsed: {r}"
        );
    }
    let after = task(&watcher, t2).await;
    assert_eq!(after["status"], "pending");
    assert!(after["assignee"].is_null());
    assert!(after["lease_expires_ts"].is_null());
    assert_eq!(
        watcher.call("claim_task", json!({"task_id": t2})).await["claimed"],
        true
    );
}

/// `create_task` with `claim: true` writes two events; list filters work.
#[tokio::test]
async fn create_and_list() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    let t = a
        .call(
            "create_task",
            json!({"title": "mine", "claim": true, "priority": "high"}),
        )
        .await;
    assert_eq!(t["created"]["status"], "in_progress");
    assert_eq!(t["created"]["assignee"], "alice");
    assert_eq!(t["created"]["priority"], "high");
    assert_eq!(
        t["untrusted_content_warning"],
        chatroom::mcp::UNTRUSTED_WARNING
    );
    let evs = a
        .call("read_events", json!({"task_id": id(&t["created"])}))
        .await;
    let kinds: Vec<&str> = evs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["task_created", "task_claimed"]);
    assert_eq!(
        a.refused("create_task", json!({"title": "x", "priority": "asap"}))
            .await,
        "invalid_argument"
    );
    let open = b.call("create_task", json!({"title": "open one"})).await;
    let done = id(&b
        .call("create_task", json!({"title": "finished", "claim": true}))
        .await["created"]);
    b.call("submit_result", json!({"task_id": done, "result": "ok"}))
        .await;
    assert_eq!(b.call("list_tasks", json!({})).await["count"], 3);
    assert_eq!(
        b.call("list_tasks", json!({"status": "open"})).await["count"],
        2
    );
    assert_eq!(
        b.call("list_tasks", json!({"status": "done"})).await["count"],
        1
    );
    assert_eq!(
        a.call("list_tasks", json!({"assignee": "me"})).await["count"],
        1
    );
    assert_eq!(
        b.refused("list_tasks", json!({"status": "finished"})).await,
        "invalid_argument"
    );
    let page = b.call("list_tasks", json!({"limit": 1})).await;
    assert_eq!(page["tasks"][0]["id"], done, "newest first");
    let older = b
        .call("list_tasks", json!({"limit": 5, "before_id": done}))
        .await;
    assert_eq!(older["tasks"][0]["id"], open["created"]["id"]);
    assert_eq!(
        b.refused("get_task", json!({"task_id": 9999})).await,
        "not_found"
    );
}

/// Size limits on every board field are refused with `too_large`.
#[tokio::test]
async fn board_size_limits() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let x = |n: usize| "x".repeat(n);
    assert_eq!(
        a.refused("create_task", json!({"title": x(201)})).await,
        "too_large"
    );
    assert_eq!(
        a.refused("create_task", json!({"title": "t", "body": x(8001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused(
            "create_task",
            json!({"title": "t", "required_skill": x(101)})
        )
        .await,
        "too_large"
    );
    let t = id(&a
        .call(
            "create_task",
            json!({"title": x(200), "body": x(8000), "claim": true}),
        )
        .await["created"]);
    assert_eq!(
        a.refused("add_note", json!({"task_id": t, "body": x(4001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused("update_task", json!({"task_id": t, "note": x(4001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused("update_task", json!({"task_id": t, "body": x(8001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused("release_task", json!({"task_id": t, "reason": x(4001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused("cancel_task", json!({"task_id": t, "reason": x(4001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused("submit_result", json!({"task_id": t, "result": x(20001)}))
            .await,
        "too_large"
    );
    assert_eq!(
        a.refused(
            "review_task",
            json!({"task_id": t, "approve": false, "note": x(4001)})
        )
        .await,
        "too_large"
    );
    assert_eq!(task(&a, t).await["version"], 1, "nothing changed");
    a.call("submit_result", json!({"task_id": t, "result": x(20000)}))
        .await;
}

/// Mentions in messages and notes reach `my_mentions`, oldest first.
#[tokio::test]
async fn mentions_index() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let b = s.agent("bob", "lobby").await;
    a.call("post_message", json!({"body": "@bob please look"}))
        .await;
    a.call(
        "post_message",
        json!({"body": "mail bob@example.com, not a mention"}),
    )
    .await;
    let t = id(&a.call("create_task", json!({"title": "t"})).await["created"]);
    a.call("add_note", json!({"task_id": t, "body": "cc @BOB"}))
        .await;
    let m = b.call("my_mentions", json!({})).await;
    let list = m["mentions"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{m}");
    assert!(list[0]["message_id"].is_i64() && list[0]["note_id"].is_null());
    assert_eq!(list[1]["task_id"], t);
    assert!(list[1]["note_id"].is_i64());
    assert_eq!(list[1]["author"], "alice");
    assert_eq!(list[1]["body"], "cc @BOB");
    let after = b
        .call("my_mentions", json!({"since_id": m["next_since_id"]}))
        .await;
    assert_eq!(after["count"], 0);
    let news = b.call("whats_new", json!({})).await;
    let flagged: Vec<&Value> = news["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["mentions_you"] == true)
        .collect();
    assert_eq!(flagged.len(), 2);
}

/// Search finds messages, tasks and notes by plain words, within the room;
/// query syntax is never interpreted.
#[tokio::test]
async fn full_text_search() {
    let s = TestServer::start().await;
    let a = s.agent("alice", "lobby").await;
    let other = s.agent("eve", "elsewhere").await;
    a.call(
        "post_message",
        json!({"body": "the flux capacitor is ready"}),
    )
    .await;
    let t = id(&a
        .call(
            "create_task",
            json!({"title": "Calibrate capacitor", "body": "carefully"}),
        )
        .await["created"]);
    a.call(
        "add_note",
        json!({"task_id": t, "body": "capacitor calibrated at 1.21 gigawatts"}),
    )
    .await;
    other
        .call("post_message", json!({"body": "capacitor in another room"}))
        .await;
    let r = a.call("search", json!({"query": "capacitor"})).await;
    assert_eq!(r["count"], 3, "{r}");
    let kinds: HashSet<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, HashSet::from(["message", "task", "note"]));
    let r = a
        .call("search", json!({"query": "Capacitor CALIBRATED"}))
        .await;
    assert_eq!(r["count"], 1);
    assert_eq!(r["results"][0]["kind"], "note");
    assert_eq!(r["results"][0]["task_id"], t);
    for q in [
        "\"unbalanced",
        "capacitor OR NOT",
        "cap* NEAR(x)",
        "-capacitor",
    ] {
        a.call("search", json!({"query": q})).await;
    }
    assert_eq!(
        a.refused("search", json!({"query": "*** ()"})).await,
        "invalid_argument"
    );
    assert_eq!(
        a.refused("search", json!({"query": ""})).await,
        "invalid_argument"
    );
}

/// Every refused claim of a held task says who holds it ("held by"), the
/// holder's own second claim included.
#[tokio::test]
async fn refused_claims_name_the_holder() {
    let s = TestServer::start().await;
    let c = cast(&s).await;
    let t = id(&c.creator.call("create_task", json!({"title": "t"})).await["created"]);
    assert_eq!(
        c.holder.call("claim_task", json!({"task_id": t})).await["claimed"],
        true
    );
    let again = c.holder.call("claim_task", json!({"task_id": t})).await;
    assert_eq!(again["claimed"], false);
    let reason = again["reason"].as_str().unwrap();
    assert!(reason.contains("held by holder (you)"), "{reason}");
    assert!(reason.contains("you already hold this task"), "{reason}");
    let other = c.other.call("claim_task", json!({"task_id": t})).await;
    assert_eq!(other["reason"], "already held by holder");
}
