//! Property tests of the board's state machine against a real server: random
//! sequences of create / claim / update / release / submit / review / cancel
//! / note, with random `expected_version`, by random agents in random roles
//! (holder, creator, lead, admin, other writer, observer), plus contended
//! claims. After every operation the invariants hold: at most one holder,
//! versions only grow and by exactly one per change, final states stay
//! final, each change appends exactly its events, refused calls change
//! nothing.
//!
//! `PROPTEST_CASES` (default 24) and `CHATROOM_PROPTEST_OPS` (default 30)
//! scale it up locally.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Grant, McpClient, TestServer, ToolResult};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// Plain writers; "other" and contended claims draw from them.
const PLAIN: [&str; 3] = ["ann", "bob", "cat"];
/// Who may create tasks.
const CREATORS: [&str; 5] = ["ann", "bob", "cat", "lea", "adm"];
/// Who races for a contended claim.
const RACERS: [&str; 4] = ["ann", "bob", "cat", "lea"];
const STATUSES: [&str; 7] = [
    "pending",
    "in_progress",
    "blocked",
    "in_review",
    "done",
    "cancelled",
    "bogus",
];

/// How the caller stands to the task.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Holder,
    Creator,
    Lead,
    Admin,
    /// A plain writer who neither created nor holds the task.
    Other,
    /// A read-only token.
    Observer,
}

/// What `expected_version` to send.
#[derive(Debug, Clone, Copy)]
enum Ver {
    Omit,
    Current,
    /// The current version plus this (never zero).
    Stale(i64),
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        by: usize,
        needs_review: bool,
    },
    Claim {
        who: Who,
        task: usize,
    },
    /// Four writers claim the same task at once.
    Race {
        task: usize,
    },
    Update {
        who: Who,
        task: usize,
        status: Option<&'static str>,
        body: bool,
        note: bool,
        ver: Ver,
    },
    Release {
        who: Who,
        task: usize,
    },
    Submit {
        who: Who,
        task: usize,
    },
    Review {
        who: Who,
        task: usize,
        approve: bool,
        note: bool,
    },
    Cancel {
        who: Who,
        task: usize,
    },
    Note {
        who: Who,
        task: usize,
    },
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        4 => Just(Who::Holder),
        2 => Just(Who::Creator),
        1 => Just(Who::Lead),
        1 => Just(Who::Admin),
        2 => Just(Who::Other),
        1 => Just(Who::Observer),
    ]
}

/// Reviews are for creators and leads; others are tried now and then.
fn reviewer() -> impl Strategy<Value = Who> {
    prop_oneof![
        2 => Just(Who::Creator),
        2 => Just(Who::Lead),
        2 => who(),
    ]
}

fn ver() -> impl Strategy<Value = Ver> {
    prop_oneof![
        2 => Just(Ver::Omit),
        2 => Just(Ver::Current),
        1 => prop_oneof![(1i64..4), (-4i64..-1), Just(1_000_000i64)].prop_map(Ver::Stale),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let task = any::<usize>();
    prop_oneof![
        2 => (0..CREATORS.len(), any::<bool>()).prop_map(|(by, needs_review)| Op::Create { by, needs_review }),
        3 => (who(), task).prop_map(|(who, task)| Op::Claim { who, task }),
        1 => task.prop_map(|task| Op::Race { task }),
        4 => (
            who(),
            task,
            prop::option::of(prop::sample::select(&STATUSES[..])),
            any::<bool>(),
            any::<bool>(),
            ver(),
        )
            .prop_map(|(who, task, status, body, note, ver)| Op::Update { who, task, status, body, note, ver }),
        1 => (who(), task).prop_map(|(who, task)| Op::Release { who, task }),
        2 => (who(), task).prop_map(|(who, task)| Op::Submit { who, task }),
        2 => (reviewer(), task, any::<bool>(), any::<bool>())
            .prop_map(|(who, task, approve, note)| Op::Review { who, task, approve, note }),
        1 => (who(), task).prop_map(|(who, task)| Op::Cancel { who, task }),
        1 => (who(), task).prop_map(|(who, task)| Op::Note { who, task }),
    ]
}

/// What can be seen of a task from outside.
#[derive(Debug, Clone, PartialEq)]
struct Snap {
    status: String,
    assignee: Option<String>,
    version: i64,
    body: String,
    result: Value,
    created_by: String,
    notes: usize,
    events: usize,
}

impl Snap {
    fn is_final(&self) -> bool {
        self.status == "done" || self.status == "cancelled"
    }
}

/// One random case: a room of its own, its agents, the tasks made so far
/// and what the test knows about them.
struct Case {
    room: String,
    clients: HashMap<&'static str, McpClient>,
    /// task ids in creation order
    tasks: Vec<i64>,
    /// the last snapshot of each task
    snaps: HashMap<i64, Snap>,
    /// events beyond one per version (a note riding along a change)
    extra: HashMap<i64, usize>,
    log: Vec<String>,
    /// (operation kind, accepted) -> count, to see what the cases exercised
    tally: BTreeMap<(&'static str, bool), u32>,
}

type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

impl Case {
    async fn new(s: &TestServer, n: usize) -> Case {
        let room = format!("pt{n}");
        s.room(&room).await;
        let mut clients = HashMap::new();
        for (agent, lead, admin, readonly) in [
            ("ann", false, false, false),
            ("bob", false, false, false),
            ("cat", false, false, false),
            ("lea", true, false, false),
            ("adm", false, true, false),
            ("obs", false, false, true),
        ] {
            let token = s
                .token_with(Grant {
                    agent: agent.into(),
                    room: room.clone(),
                    lead,
                    admin,
                    readonly,
                    ..Grant::default()
                })
                .await;
            clients.insert(agent, s.mcp(&token));
        }
        Case {
            room,
            clients,
            tasks: Vec::new(),
            snaps: HashMap::new(),
            extra: HashMap::new(),
            log: Vec::new(),
            tally: BTreeMap::new(),
        }
    }

    async fn snap(&self, id: i64) -> Snap {
        let adm = &self.clients["adm"];
        let t = adm.call("get_task", json!({"task_id": id})).await;
        let task = &t["task"];
        let events = adm
            .call("read_events", json!({"task_id": id, "limit": 500}))
            .await;
        Snap {
            status: task["status"].as_str().unwrap().to_owned(),
            assignee: task["assignee"].as_str().map(str::to_owned),
            version: task["version"].as_i64().unwrap(),
            body: task["body"].as_str().unwrap_or("").to_owned(),
            result: task["result"].clone(),
            created_by: task["created_by"].as_str().unwrap().to_owned(),
            notes: task["notes"].as_array().unwrap().len(),
            events: events["events"].as_array().unwrap().len(),
        }
    }

    /// The agent that plays `who` for a task as it is.
    fn agent(&self, who: Who, snap: &Snap) -> &'static str {
        let known = |a: &str| CREATORS.iter().copied().find(|c| *c == a);
        match who {
            Who::Holder => snap.assignee.as_deref().and_then(known).unwrap_or("ann"),
            Who::Creator => known(&snap.created_by).unwrap(),
            Who::Lead => "lea",
            Who::Admin => "adm",
            Who::Observer => "obs",
            Who::Other => PLAIN
                .iter()
                .copied()
                .find(|a| *a != snap.created_by && Some(*a) != snap.assignee.as_deref())
                .unwrap(),
        }
    }

    async fn call(&mut self, agent: &'static str, tool: &str, args: Value) -> ToolResult {
        let r = self.clients[agent].try_call(tool, args.clone()).await;
        self.log.push(format!(
            "{agent} {tool} {args} -> {}",
            if r.is_error {
                r.code().to_owned()
            } else {
                "ok".into()
            }
        ));
        r
    }

    /// Runs one operation and checks every invariant it touches.
    async fn step(&mut self, i: usize, op: &Op) -> Check {
        if let Op::Create { by, needs_review } = op {
            let agent = CREATORS[*by];
            let r = self
                .call(
                    agent,
                    "create_task",
                    json!({"title": format!("task {i}"), "needs_review": needs_review}),
                )
                .await;
            ensure!(!r.is_error, "create_task refused: {}", r.body);
            *self.tally.entry(("create", true)).or_default() += 1;
            let id = r.body["created"]["id"].as_i64().unwrap();
            let snap = self.snap(id).await;
            ensure!(
                snap.version == 1 && snap.events == 1 && snap.status == "pending",
                "a new task is pending at version 1 with one event: {snap:?}"
            );
            self.tasks.push(id);
            self.snaps.insert(id, snap);
            self.extra.insert(id, 0);
            return Ok(());
        }
        if self.tasks.is_empty() {
            return Ok(());
        }
        let (who, task) = match op {
            Op::Claim { who, task }
            | Op::Update { who, task, .. }
            | Op::Release { who, task }
            | Op::Submit { who, task }
            | Op::Review { who, task, .. }
            | Op::Cancel { who, task }
            | Op::Note { who, task } => (Some(*who), *task),
            Op::Race { task } => (None, *task),
            Op::Create { .. } => unreachable!(),
        };
        let id = self.tasks[task % self.tasks.len()];
        let before = self.snaps[&id].clone();
        let agent = who.map(|w| self.agent(w, &before)).unwrap_or("ann");

        // (accepted, events it appends, notes it adds)
        let (accepted, events, notes, winner) = match op {
            Op::Race { .. } => {
                let calls = RACERS.map(|a| {
                    let c = self.clients[a].clone();
                    async move { (a, c.try_call("claim_task", json!({"task_id": id})).await) }
                });
                let results = futures::future::join_all(calls).await;
                let winners: Vec<&str> = results
                    .iter()
                    .filter(|(_, r)| !r.is_error && r.body["claimed"] == true)
                    .map(|(a, _)| *a)
                    .collect();
                self.log
                    .push(format!("race for {id} -> winners {winners:?}"));
                ensure!(
                    winners.len() <= 1,
                    "two claimants won task {id}: {winners:?}"
                );
                let claimable = (before.status == "pending"
                    && before
                        .assignee
                        .as_deref()
                        .is_none_or(|a| RACERS.contains(&a)))
                    || (before.status == "blocked" && before.assignee.is_none());
                ensure!(
                    winners.len() == usize::from(claimable),
                    "a contended claim of {before:?} had winners {winners:?}"
                );
                (!winners.is_empty(), 1, 0, winners.first().copied())
            }
            Op::Claim { .. } => {
                let r = self.call(agent, "claim_task", json!({"task_id": id})).await;
                let ok = !r.is_error && r.body["claimed"] == true;
                (ok, 1, 0, ok.then_some(agent))
            }
            Op::Update {
                status,
                body,
                note,
                ver,
                ..
            } => {
                let mut args = json!({"task_id": id});
                if let Some(s) = status {
                    args["status"] = json!(s);
                }
                if *body {
                    args["body"] = json!(format!("body {i}"));
                }
                if *note {
                    args["note"] = json!(format!("note {i}"));
                }
                match ver {
                    Ver::Omit => {}
                    Ver::Current => args["expected_version"] = json!(before.version),
                    Ver::Stale(d) => args["expected_version"] = json!(before.version + d),
                }
                let r = self.call(agent, "update_task", args).await;
                let ok = !r.is_error && r.body["updated"] == true;
                if matches!(ver, Ver::Stale(_)) {
                    ensure!(!ok, "a stale expected_version was accepted: {}", r.body);
                }
                let changes = status.is_some() || *body;
                let events = if changes { 1 + usize::from(*note) } else { 1 };
                (ok, events, usize::from(*note), None)
            }
            Op::Release { .. } => {
                let r = self
                    .call(agent, "release_task", json!({"task_id": id}))
                    .await;
                (!r.is_error && r.body["released"] == true, 1, 0, None)
            }
            Op::Submit { .. } => {
                let r = self
                    .call(
                        agent,
                        "submit_result",
                        json!({"task_id": id, "result": format!("result {i}")}),
                    )
                    .await;
                (!r.is_error, 1, 0, None)
            }
            Op::Review { approve, note, .. } => {
                let mut args = json!({"task_id": id, "approve": approve});
                if *note {
                    args["note"] = json!(format!("review {i}"));
                }
                let r = self.call(agent, "review_task", args).await;
                (
                    !r.is_error,
                    1 + usize::from(*note),
                    usize::from(*note),
                    None,
                )
            }
            Op::Cancel { .. } => {
                let r = self
                    .call(agent, "cancel_task", json!({"task_id": id}))
                    .await;
                (!r.is_error, 1, 0, None)
            }
            Op::Note { .. } => {
                let r = self
                    .call(
                        agent,
                        "add_note",
                        json!({"task_id": id, "body": format!("note {i}")}),
                    )
                    .await;
                (!r.is_error, 1, 1, None)
            }
            Op::Create { .. } => unreachable!(),
        };

        let kind = match op {
            Op::Create { .. } => "create",
            Op::Claim { .. } => "claim",
            Op::Race { .. } => "contended claim",
            Op::Update { .. } => "update",
            Op::Release { .. } => "release",
            Op::Submit { .. } => "submit",
            Op::Review { .. } => "review",
            Op::Cancel { .. } => "cancel",
            Op::Note { .. } => "note",
        };
        *self.tally.entry((kind, accepted)).or_default() += 1;
        let after = self.snap(id).await;
        ensure!(
            after.version >= before.version,
            "version went back: {before:?} -> {after:?}"
        );
        if before.is_final() {
            ensure!(
                after.status == before.status,
                "a final task left {}: {after:?}",
                before.status
            );
        }
        if who == Some(Who::Observer) {
            ensure!(!accepted, "an observer changed a task");
        }
        if who == Some(Who::Other) {
            let role_bound = match op {
                Op::Update { status, body, .. } => status.is_some() || *body,
                Op::Release { .. } | Op::Submit { .. } | Op::Cancel { .. } | Op::Review { .. } => {
                    true
                }
                _ => false,
            };
            ensure!(
                !(role_bound && accepted),
                "{agent}, neither holder, creator, lead nor admin, did {op:?}"
            );
        }
        if accepted {
            ensure!(
                after.version == before.version + 1,
                "a change moved the version by {}: {before:?} -> {after:?}",
                after.version - before.version
            );
            ensure!(
                after.events == before.events + events,
                "a change appended {} events, not {events}: {before:?} -> {after:?}",
                after.events as i64 - before.events as i64
            );
            ensure!(
                after.notes == before.notes + notes,
                "a change added {} notes, not {notes}",
                after.notes as i64 - before.notes as i64
            );
            if let Some(w) = winner {
                ensure!(
                    after.assignee.as_deref() == Some(w) && after.status == "in_progress",
                    "{w} won the claim but the task is {after:?}"
                );
            }
            *self.extra.get_mut(&id).unwrap() += events - 1;
        } else {
            ensure!(
                after == before,
                "a refused call changed the task: {before:?} -> {after:?}"
            );
        }
        ensure!(
            after.events == after.version as usize + self.extra[&id],
            "task {id} has {} events for version {} (+{} riding notes)",
            after.events,
            after.version,
            self.extra[&id]
        );
        if after.status == "in_progress" {
            ensure!(
                after.assignee.is_some(),
                "in progress without a holder: {after:?}"
            );
        }
        self.snaps.insert(id, after);
        Ok(())
    }

    /// The end of a case: every task, read afresh, agrees with what was seen.
    async fn finish(&self) -> Check {
        for id in &self.tasks {
            let now = self.snap(*id).await;
            ensure!(
                now == self.snaps[id],
                "task {id} changed with nobody calling: {:?} -> {now:?}",
                self.snaps[id]
            );
            ensure!(
                now.events == now.version as usize + self.extra[id],
                "task {id}: {} events for version {}",
                now.events,
                now.version
            );
        }
        // Nothing leaked into another room's board.
        let listed = self.clients["adm"]
            .call("list_tasks", json!({"limit": 200}))
            .await;
        ensure!(
            listed["count"] == json!(self.tasks.len()),
            "room {} lists {} tasks, {} were made",
            self.room,
            listed["count"],
            self.tasks.len()
        );
        Ok(())
    }
}

async fn run_case(
    s: &TestServer,
    n: usize,
    ops: &[Op],
    tally: &Mutex<BTreeMap<(&'static str, bool), u32>>,
) -> Check {
    let mut case = Case::new(s, n).await;
    // Every case starts with two tasks to act on, one of them waiting for
    // review, so that reviews are reached without luck.
    let mut all = vec![
        Op::Create {
            by: 0,
            needs_review: false,
        },
        Op::Create {
            by: 3,
            needs_review: true,
        },
        Op::Claim {
            who: Who::Holder,
            task: 1,
        },
        Op::Submit {
            who: Who::Holder,
            task: 1,
        },
    ];
    all.extend_from_slice(ops);
    for (i, op) in all.iter().enumerate() {
        if let Err(e) = case.step(i, op).await {
            return Err(format!(
                "{e}\nafter op {i} {op:?}\ncalls:\n{}",
                case.log.join("\n")
            ));
        }
    }
    {
        let mut total = tally.lock().unwrap();
        for (k, v) in &case.tally {
            *total.entry(*k).or_default() += v;
        }
    }
    case.finish().await
}

fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Random operation sequences by random roles keep every board invariant.
#[test]
fn board_invariants_hold_under_random_operations() {
    let cases = env_or("PROPTEST_CASES", 24);
    let ops = env_or("CHATROOM_PROPTEST_OPS", 30) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(TestServer::start());
    let counter = AtomicUsize::new(0);
    let tally = Mutex::new(BTreeMap::new());
    let mut runner = TestRunner::new(PtConfig {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..PtConfig::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..=ops), |ops| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        rt.block_on(run_case(&server, n, &ops, &tally))
            .map_err(TestCaseError::fail)
    });
    let tally = tally.into_inner().unwrap();
    let summary: Vec<String> = [
        "create",
        "claim",
        "contended claim",
        "update",
        "release",
        "submit",
        "review",
        "cancel",
        "note",
    ]
    .iter()
    .map(|k| {
        let ok = tally.get(&(*k, true)).copied().unwrap_or(0);
        let no = tally.get(&(*k, false)).copied().unwrap_or(0);
        format!("{k} {ok} done/{no} refused")
    })
    .collect();
    println!(
        "board property test: {} cases (shrinking included), up to {ops} operations each: {}",
        counter.load(Ordering::SeqCst),
        summary.join(", ")
    );
    // A run that refused everything would prove little. (Rarer moves such as
    // reviews are in the printed tally; their count varies from run to run.)
    for k in ["claim", "update", "submit", "note"] {
        assert!(
            result.is_err() || tally.get(&(k, true)).copied().unwrap_or(0) > 0,
            "no {k} was ever accepted: the generator is off"
        );
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(server.stop());
}
