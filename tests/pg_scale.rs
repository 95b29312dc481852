//! Scale-out on PostgreSQL: several `serve` replicas on one database behave
//! as one server (claims, wake-ups, cursors), the relay survives a lost
//! connection, and `admin copy` moves a SQLite instance over whole.
//!
//! PostgreSQL only: needs `CHATROOM_TEST_PG_URL` (`.ci/run` starts a private
//! PostgreSQL and sets it for its PostgreSQL pass; its SQLite pass leaves this
//! file out with `-E 'not binary(pg_scale)'`).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chatroom::db::{self, TABLES};
use chatroom::domain::model::{AdminLogEntry, Event};
use chatroom::domain::{Call, Core, EventBus, Settings};
use common::{Grant, McpClient, PgDatabase, TestServer, run_cli};
use futures::StreamExt;
use futures::future::join_all;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// The test PostgreSQL server, or a failure that says how to provide one.
fn pg_server() -> String {
    common::pg_server().unwrap_or_else(|| {
        panic!(
            "tests/pg_scale.rs runs against PostgreSQL: set {}=postgres://USER@HOST:PORT/postgres \
             (.ci/run starts a private server and sets it)",
            common::PG_ENV
        )
    })
}

/// Two replicas (in-process `serve`s on their own ports) on one fresh database.
async fn two_replicas() -> (TestServer, TestServer) {
    pg_server();
    let a = TestServer::start().await;
    let b = a.replica().await;
    (a, b)
}

/// A replica's bus without its HTTP side: a store on `url` relaying what any
/// replica commits.
struct Observer {
    rx: broadcast::Receiver<Arc<Event>>,
    shutdown: CancellationToken,
}

impl Observer {
    async fn start(url: &str) -> Observer {
        let store = db::open(url).await.expect("open");
        let bus = EventBus::new();
        let rx = bus.subscribe();
        let shutdown = CancellationToken::new();
        store
            .start_relay(bus, shutdown.clone())
            .await
            .expect("relay");
        Observer { rx, shutdown }
    }

    /// The next `n` events of `room`, or a failure after 20 s.
    async fn next(&mut self, room: &str, n: usize) -> Vec<Arc<Event>> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while got.len() < n {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Ok(e)) if e.room == room => got.push(e),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("bus: {e}"),
                Err(_) => panic!("only {} of {n} events arrived: {got:?}", got.len()),
            }
        }
        got
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// 50 concurrent claimants split across two replicas: exactly one wins, and
/// both replicas then show the task claimed by the winner.
#[tokio::test]
async fn claims_across_replicas_have_one_winner() {
    let (a, b) = two_replicas().await;
    let creator = a.agent("creator", "race").await;
    let t = creator
        .call("create_task", json!({"title": "contested"}))
        .await["created"]["id"]
        .as_i64()
        .unwrap();
    let mut clients = Vec::new();
    for i in 0..50u32 {
        let token = a.token(&format!("agent{i}"), "race").await;
        clients.push(if i.is_multiple_of(2) {
            a.mcp(&token)
        } else {
            b.mcp(&token)
        });
    }
    let results = join_all(
        clients
            .iter()
            .map(|c| c.call("claim_task", json!({"task_id": t}))),
    )
    .await;
    let winners: Vec<&Value> = results.iter().filter(|r| r["claimed"] == true).collect();
    assert_eq!(winners.len(), 1, "exactly one winner: {results:?}");
    let holder = winners[0]["task"]["assignee"].as_str().unwrap();
    for r in results.iter().filter(|r| r["claimed"] == false) {
        assert_eq!(r["task"]["assignee"], holder, "{r}");
    }
    for replica in [&a, &b] {
        let seen = replica
            .mcp(&creator.token)
            .call("get_task", json!({"task_id": t}))
            .await;
        assert_eq!(seen["task"]["status"], "in_progress");
        assert_eq!(seen["task"]["assignee"], holder);
        assert_eq!(seen["task"]["version"], 2);
    }
    let claims = b
        .mcp(&creator.token)
        .call("read_events", json!({"kind": "task_claimed"}))
        .await;
    assert_eq!(claims["count"], 1, "one event for the one change");
}

/// A task claimed through one replica is seen claimed through the other, and
/// a second claim through the other is refused with the holder named.
#[tokio::test]
async fn a_claim_on_one_replica_holds_on_the_other() {
    let (a, b) = two_replicas().await;
    let alice = a.agent("alice", "lobby").await;
    let bob = b.mcp(&a.token("bob", "lobby").await);
    let t = alice
        .call("create_task", json!({"title": "one holder"}))
        .await["created"]["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        alice.call("claim_task", json!({"task_id": t})).await["claimed"],
        true
    );
    let seen = bob.call("get_task", json!({"task_id": t})).await;
    assert_eq!(seen["task"]["assignee"], "alice");
    let second = bob.call("claim_task", json!({"task_id": t})).await;
    assert_eq!(second["claimed"], false, "{second}");
    assert!(second["reason"].as_str().unwrap().contains("alice"));
}

/// A token revoked through one replica's database handle is refused by
/// every replica on its next call, though each had it in its cache
/// (`db/postgres/cache.rs`: the change is announced as it commits).
#[tokio::test]
async fn revocation_takes_effect_on_every_replica_at_once() {
    let (a, b) = two_replicas().await;
    let alice = a.agent("alice", "lobby").await;
    let bob = a.agent("bob", "lobby").await;
    for replica in [&a, &b] {
        replica.mcp(&alice.token).call("whoami", json!({})).await;
    }
    // Both relays busy for a second: each is told of an event it cannot
    // read back and retries before it hears anything else. A revocation
    // that returned before every replica heard it would be served now.
    let admin = sqlx::PgPool::connect(&a.db_url).await.unwrap();
    relay_connections_reach(&admin, 2).await;
    sqlx::query("SELECT pg_notify($1, 'lobby 999999999')")
        .bind(chatroom::db::postgres::CHANNEL)
        .execute(&admin)
        .await
        .unwrap();
    let (code, _, err) = run_cli(&["admin", "revoke", "--agent", "alice"], &a.cli_env()).await;
    assert_eq!(code, 0, "{err}");
    for replica in [&a, &b] {
        let (status, _) = replica
            .mcp(&alice.token)
            .rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await;
        assert_eq!(status, 401);
        replica.mcp(&bob.token).call("whoami", json!({})).await;
    }
    admin.close().await;
}

/// Tokens and rooms changed by hand in the database, not through chatroom,
/// are seen by every replica on its next call too; so is a revocation made
/// while the replicas' listening connections were down.
#[tokio::test]
async fn changes_by_hand_and_while_deaf_reach_every_replica() {
    let (a, b) = two_replicas().await;
    let alice = a.agent("alice", "lobby").await;
    let bob = a.agent("bob", "lobby").await;
    let carol = a.agent("carol", "lobby").await;
    let admin = sqlx::PgPool::connect(&a.db_url).await.unwrap();
    relay_connections_reach(&admin, 2).await;
    let status = |replica: &TestServer, token: &str| {
        let c = replica.mcp(token);
        async move {
            c.rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
                .await
                .0
        }
    };
    for replica in [&a, &b] {
        let info = replica
            .mcp(&alice.token)
            .call("get_room_info", json!({}))
            .await;
        assert_eq!(info["description"], "", "{info}");
        replica.mcp(&bob.token).call("whoami", json!({})).await;
    }
    sqlx::query("UPDATE rooms SET description = 'by hand' WHERE name = 'lobby'")
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query("UPDATE tokens SET revoked_ts = 1 WHERE agent = 'bob'")
        .execute(&admin)
        .await
        .unwrap();
    // The announcement is heard just after the commit, not with it: a call
    // made the same instant may come first, so each replica gets a moment —
    // half the second a kept row lives, so this fails if announcements
    // were not heard (the rows were read just before the changes).
    for replica in [&a, &b] {
        let deadline = Instant::now() + Duration::from_millis(500);
        loop {
            let info = replica
                .mcp(&alice.token)
                .call("get_room_info", json!({}))
                .await;
            let bob = status(replica, &bob.token).await;
            if info["description"] == "by hand" && bob == 401 {
                break;
            }
            assert!(Instant::now() < deadline, "{info}, bob {bob}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        replica.mcp(&carol.token).call("whoami", json!({})).await;
    }
    // Deaf: the listening connections killed and carol revoked at once,
    // before they are back. What the replicas kept was forgotten when they
    // lost the connection, so the change is not missed after it.
    let killed: Vec<(i32, bool)> = sqlx::query_as(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(chatroom::db::postgres::RELAY_APPLICATION)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(
        killed.len() == 2 && killed.iter().all(|k| k.1),
        "{killed:?}"
    );
    let killed: Vec<i32> = killed.into_iter().map(|k| k.0).collect();
    sqlx::query("UPDATE tokens SET revoked_ts = 1 WHERE agent = 'carol'")
        .execute(&admin)
        .await
        .unwrap();
    // Both replicas noticed and listen again (new connections).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let new: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND datname = current_database() AND NOT pid = ANY($2)",
        )
        .bind(chatroom::db::postgres::RELAY_APPLICATION)
        .bind(&killed)
        .fetch_one(&admin)
        .await
        .unwrap();
        if new >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{new} of 2 relays back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for replica in [&a, &b] {
        assert_eq!(status(replica, &carol.token).await, 401);
        replica.mcp(&alice.token).call("whoami", json!({})).await;
    }
    relay_connections_reach(&admin, 2).await;
    admin.close().await;
}

/// `wait_for_change` parked on replica A wakes when an agent posts through
/// replica B, well before its timeout.
#[tokio::test]
async fn wait_on_one_replica_wakes_on_a_post_through_the_other() {
    let (a, b) = two_replicas().await;
    let bob = a.agent("bob", "lobby").await;
    let alice = b.mcp(&a.token("alice", "lobby").await);
    // Bob has read everything: the wait can only end on a new event.
    bob.call("whats_new", json!({})).await;
    let parked = {
        let bob = bob.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = bob.call("wait_for_change", json!({"timeout_s": 30})).await;
            (r, started.elapsed())
        })
    };
    // Give the wait a moment to park (it answers at once if the post wins
    // the race, which proves less but is still correct).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posted = alice
        .call("post_message", json!({"body": "across replicas"}))
        .await;
    let (r, waited) = tokio::time::timeout(Duration::from_secs(20), parked)
        .await
        .expect("the parked wait ended")
        .unwrap();
    assert_eq!(r["changed"], true, "{r}");
    assert!(
        r["hint"].as_str().unwrap().contains("message by alice"),
        "{r}"
    );
    assert!(
        waited < Duration::from_secs(20),
        "woke by the event, not the timeout"
    );
    let news = bob.call("whats_new", json!({})).await;
    assert_eq!(
        news["events"][0]["message_id"], posted["message_id"],
        "{news}"
    );
}

/// A replica's bus receives the events committed through the other replica
/// in id order, and its own events once (the relay reads them back too, but
/// does not announce them again).
#[tokio::test]
async fn a_replica_bus_sees_every_event_once_in_order() {
    let (a, b) = two_replicas().await;
    // Replica C, in process: its domain core writes, its store relays.
    let shutdown = CancellationToken::new();
    let store = db::open(&a.db_url).await.unwrap();
    let core = Core::new(
        store.clone(),
        Settings {
            max_wait: Duration::from_secs(5),
            max_file_bytes: 1024,
        },
        shutdown.clone(),
    );
    let mut rx = core.bus.subscribe();
    store
        .start_relay(core.bus.clone(), shutdown.clone())
        .await
        .unwrap();
    let alice = b.agent("alice", "lobby").await;
    let carol = core
        .verify(&a.token("carol", "lobby").await)
        .await
        .unwrap()
        .unwrap();
    let mut from_b = Vec::new();
    let mut from_c = Vec::new();
    for i in 0..10 {
        let r = alice
            .call("post_message", json!({"body": format!("b{i}")}))
            .await;
        from_b.push(r["message_id"].as_i64().unwrap());
        let m = core
            .post_message(
                &Call::new(carol.clone(), "post_message"),
                None,
                &format!("c{i}"),
                None,
            )
            .await
            .unwrap();
        from_c.push(m.message.id);
    }
    // A last event through B: everything before it has been relayed by the
    // time it is, so any repeat would show up before it.
    let last = alice.call("post_message", json!({"body": "last"})).await["message_id"]
        .as_i64()
        .unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.last().and_then(|e: &Arc<Event>| e.message_id) != Some(last) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(e)) => got.push(e),
            other => panic!("bus: {other:?} after {got:?}"),
        }
    }
    let relayed: Vec<i64> = got
        .iter()
        .filter(|e| e.actor == "alice")
        .filter_map(|e| e.message_id)
        .collect();
    from_b.push(last);
    assert_eq!(relayed, from_b, "the other replica's events, in order");
    let own: Vec<i64> = got
        .iter()
        .filter(|e| e.actor == "carol")
        .filter_map(|e| e.message_id)
        .collect();
    assert_eq!(own, from_c, "its own events, once each");
    assert_eq!(got.len(), 21, "nothing announced twice");
    shutdown.cancel();
}

/// Many writers across both replicas and a `whats_new` reader: the reader
/// sees every event exactly once, in id order, though transactions commit
/// concurrently.
#[tokio::test]
async fn cursor_reader_sees_every_event_once_under_concurrent_writers() {
    let (a, b) = two_replicas().await;
    a.room("busy").await;
    let reader = a.mcp(
        &a.token_with(Grant {
            agent: "reader".into(),
            room: "busy".into(),
            readonly: true,
            ..Grant::default()
        })
        .await,
    );
    reader.call("whats_new", json!({})).await;
    let mut writers = Vec::new();
    for w in 0..8u32 {
        let token = a.token(&format!("writer{w}"), "busy").await;
        writers.push(if w.is_multiple_of(2) {
            a.mcp(&token)
        } else {
            b.mcp(&token)
        });
    }
    const PER_WRITER: usize = 25;
    let total = writers.len() * PER_WRITER;
    let done = CancellationToken::new();
    let reading = {
        let (reader, b_reader, done) = (reader.clone(), b.mcp(&reader.token), done.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut turn = 0usize;
            loop {
                let finished = done.is_cancelled();
                // Alternate replicas: the cursor lives in the database.
                let via = if turn.is_multiple_of(2) {
                    &reader
                } else {
                    &b_reader
                };
                turn += 1;
                let page = via.call("whats_new", json!({"limit": 200})).await;
                let events = page["events"].as_array().unwrap().clone();
                seen.extend(events.iter().map(|e| e["id"].as_i64().unwrap()));
                if finished && events.is_empty() && page["remaining"] == 0 {
                    return seen;
                }
            }
        })
    };
    let writing = writers.iter().enumerate().map(|(w, c)| async move {
        for i in 0..PER_WRITER {
            c.call("post_message", json!({"body": format!("w{w} m{i}")}))
                .await;
        }
    });
    join_all(writing).await;
    done.cancel();
    let seen = tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .expect("the reader caught up")
        .unwrap();
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in id order, no repeats"
    );
    let all = a
        .mcp(&reader.token)
        .call("read_events", json!({"limit": 500}))
        .await;
    let all: Vec<i64> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(all.len(), total);
    assert_eq!(seen, all, "every event exactly once");
}

/// Killing the relay's listening connection loses nothing: the relay
/// reconnects, catches up from the events table, and announces each event
/// once, in order.
#[tokio::test]
async fn relay_reconnects_and_catches_up() {
    let (a, b) = two_replicas().await;
    let mut observer = Observer::start(&a.db_url).await;
    let alice = b.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "before"})).await;
    let first = observer.next("lobby", 1).await;
    let admin = sqlx::PgPool::connect(&a.db_url).await.unwrap();
    // Replicas A and B and the observer each listen (a bounded poll: A
    // may still be starting).
    relay_connections_reach(&admin, 3).await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(chatroom::db::postgres::RELAY_APPLICATION)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(killed.len() >= 3 && killed.iter().all(|k| *k), "{killed:?}");
    // Written at once, while the listeners are reconnecting.
    let mut posted = Vec::new();
    for i in 0..10 {
        let r = alice
            .call("post_message", json!({"body": format!("during {i}")}))
            .await;
        posted.push(r["message_id"].as_i64().unwrap());
    }
    let got = observer.next("lobby", 10).await;
    let messages: Vec<i64> = got.iter().filter_map(|e| e.message_id).collect();
    assert_eq!(messages, posted, "every event, once, in order");
    assert!(got[0].id > first[0].id);
    // The listeners are back.
    relay_connections_reach(&admin, 3).await;
    // And a parked wait on the other replica still wakes.
    let bob = a.mcp(&a.token("bob", "lobby").await);
    bob.call("whats_new", json!({})).await;
    let parked =
        tokio::spawn(async move { bob.call("wait_for_change", json!({"timeout_s": 30})).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    alice.call("post_message", json!({"body": "after"})).await;
    let r = tokio::time::timeout(Duration::from_secs(20), parked)
        .await
        .expect("woke")
        .unwrap();
    assert_eq!(r["changed"], true);
    admin.close().await;
}

/// A burst of posts is analysed at once: the planner's statistics count the
/// new events seconds after the burst, not after autovacuum's next look (a
/// minute, and a tenth of the table), so the `whats_new` window keeps its
/// ordered index plan (docs/POSTGRES.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_posts_is_analysed_at_once() {
    pg_server();
    let server = TestServer::start().await;
    server.room("lobby").await;
    let store = db::open(&server.db_url).await.unwrap();
    let core = Core::new(
        store,
        Settings {
            max_wait: Duration::from_secs(5),
            max_file_bytes: 1024,
        },
        CancellationToken::new(),
    );
    let carol = core
        .verify(&server.token("carol", "lobby").await)
        .await
        .unwrap()
        .unwrap();
    let admin = sqlx::PgPool::connect(&server.db_url).await.unwrap();
    let analysed = async || -> (i64, i64) {
        sqlx::query_as(
            "SELECT (SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'messages'), \
             (SELECT reltuples::bigint FROM pg_class WHERE oid = 'events'::regclass)",
        )
        .fetch_one(&admin)
        .await
        .unwrap()
    };
    assert_eq!(
        analysed().await.0,
        0,
        "messages are never analysed by hand before a burst"
    );
    let burst = 1_200;
    let posts = (0..burst).map(|i| {
        let (core, carol) = (core.clone(), carol.clone());
        async move {
            core.post_message(
                &Call::new(carol, "post_message"),
                None,
                &format!("m{i}"),
                None,
            )
            .await
            .unwrap();
        }
    });
    futures::stream::iter(posts)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    // The server's relay heard the burst and analysed (a bounded poll:
    // the analysis runs in the background).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (count, events) = analysed().await;
        if count >= 1 && events >= 1_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not analysed: {count} analyses, {events} events counted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin.close().await;
}

/// Waits (bounded) until `n` relay listening connections are open.
async fn relay_connections_reach(admin: &sqlx::PgPool, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND datname = current_database()",
        )
        .bind(chatroom::db::postgres::RELAY_APPLICATION)
        .fetch_one(admin)
        .await
        .unwrap();
        if open >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{open} of {n} relay connections");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the instance answers, through MCP, for the comparison of a copy.
async fn answers(c: &McpClient, task: i64, file: i64) -> Vec<Value> {
    let mut out = Vec::new();
    for (tool, args) in [
        ("get_task", json!({"task_id": task})),
        ("list_tasks", json!({})),
        ("read_messages", json!({})),
        ("read_events", json!({"limit": 500})),
        ("my_mentions", json!({})),
        ("search", json!({"query": "capacitor"})),
        ("get_file", json!({"file_id": file})),
        ("list_files", json!({})),
        ("list_agents", json!({})),
        ("get_room_info", json!({})),
        ("whoami", json!({})),
    ] {
        let mut v = c.call(tool, args).await;
        // Presence moves with the clock; search ranks and snippets are each
        // backend's own (FTS5, tsvector): the hits must match, in any order.
        if let Some(agents) = v["agents"].as_array_mut() {
            for agent in agents {
                if let Some(o) = agent.as_object_mut() {
                    o.remove("last_seen");
                }
            }
        }
        if let Some(hits) = v["results"].as_array_mut() {
            for hit in hits.iter_mut() {
                if let Some(o) = hit.as_object_mut() {
                    o.remove("snippet");
                }
            }
            hits.sort_by_key(|h| h.to_string());
        }
        out.push(json!({"tool": tool, "answer": v}));
    }
    out
}

/// Signs an app in over OAuth as a client and a browser would (register,
/// consent page with a connect code, code exchange): its access token.
async fn oauth_sign_in(s: &TestServer) -> String {
    use base64::Engine;
    use sha2::Digest;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = "http://127.0.0.1:1/cb";
    let client: Value = http
        .post(format!("{}/oauth/register", s.url))
        .json(&json!({"client_name": "Copied app", "redirect_uris": [redirect], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client_id = client["client_id"].as_str().unwrap();
    let (code, _) = s
        .core
        .mint_connect_code(
            Grant {
                agent: "phone".into(),
                room: "lobby".into(),
                ..Grant::default()
            },
            15,
        )
        .await
        .unwrap();
    let verifier = "v".repeat(50);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let form = |pairs: &[(&str, &str)]| {
        url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish()
    };
    let query = form(&[
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
    ]);
    let page = http
        .get(format!("{}/oauth/authorize?{query}", s.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the consent form's csrf field");
    let approve = form(&[
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
        ("scope", "chatroom"),
        ("csrf", csrf),
        ("connect_code", code.expose()),
        ("decision", "approve"),
    ]);
    let answer = http
        .post(format!("{}/oauth/authorize", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(approve)
        .send()
        .await
        .unwrap();
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    let url = reqwest::Url::parse(&location).unwrap();
    let auth_code = url
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("an authorization code");
    let tokens: Value = http
        .post(format!("{}/oauth/token", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "authorization_code"),
            ("code", &auth_code),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_verifier", &verifier),
        ]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    tokens["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned()
}

/// `admin copy` moves a SQLite instance with everything in it to an empty
/// PostgreSQL database: every table's rows arrive (counts), the same tokens
/// work, the copy answers as the original did, new ids come after the old
/// ones, and a non-empty target is refused.
#[tokio::test]
async fn admin_copy_moves_a_sqlite_instance_to_postgres() {
    let server = pg_server();
    let src = TestServer::start_sqlite().await;
    src.room("ops").await;
    let alice = src.agent("alice", "lobby").await;
    let lead = src.mcp(
        &src.token_with(Grant {
            agent: "lead".into(),
            room: "lobby".into(),
            also_rooms: vec!["ops".into()],
            lead: true,
            skills: vec!["rust".into()],
            ..Grant::default()
        })
        .await,
    );
    src.agent("gone", "ops").await;
    src.core.revoke_agent("gone").await.unwrap();
    alice
        .call(
            "post_message",
            json!({"body": "the flux capacitor is ready, @lead"}),
        )
        .await;
    let first = lead
        .call("create_task", json!({"title": "Calibrate capacitor"}))
        .await["created"]["id"]
        .as_i64()
        .unwrap();
    let task = lead
        .call(
            "create_task",
            json!({"title": "Ship it", "body": "after calibration", "depends_on": [first]}),
        )
        .await["created"]["id"]
        .as_i64()
        .unwrap();
    alice.call("claim_task", json!({"task_id": first})).await;
    alice
        .call(
            "add_note",
            json!({"task_id": first, "body": "capacitor at 1.21 gigawatts, @lead"}),
        )
        .await;
    let file = alice
        .call(
            "put_file",
            json!({"name": "plan.txt", "content_base64": "aGVsbG8gd29ybGQ="}),
        )
        .await["file_id"]
        .as_i64()
        .unwrap();
    lead.call("whats_new", json!({})).await;
    lead.call("post_message", json!({"body": "read you"})).await;
    src.store
        .insert_admin_log(&AdminLogEntry {
            id: 0,
            ts: 1,
            actor: "owner".into(),
            address: "127.0.0.1".into(),
            action: "add-room".into(),
            target: "ops".into(),
            flagged: false,
        })
        .await
        .unwrap();
    alice
        .call("post_message", json!({"body": "unread by lead"}))
        .await;
    // An agent's attention switch (a row of agent_status).
    alice
        .call("set_attention", json!({"attention": "dnd"}))
        .await;
    // A webhook, an inbound URL, and a task gone quiet (a task_stuck mark).
    let owner = chatroom::domain::Owner::cli();
    src.core
        .owner_add_webhook(&owner, "lobby", "http://127.0.0.1:9/hook", "standard", "")
        .await
        .unwrap();
    src.core
        .owner_add_inbound(&owner, "lobby", "ci")
        .await
        .unwrap();
    let quiet = std::time::Duration::from_millis(1);
    tokio::time::sleep(quiet * 5).await;
    assert!(
        src.core.sweep_stuck(quiet).await.unwrap() >= 1,
        "a stuck task"
    );
    // An app signed in with OAuth (and a connect code left for later).
    let app_token = oauth_sign_in(&src).await;
    src.core
        .mint_connect_code(
            Grant {
                agent: "later".into(),
                room: "lobby".into(),
                ..Grant::default()
            },
            60,
        )
        .await
        .unwrap();
    let before = answers(&lead, task, file).await;
    let before_alice = answers(&alice, task, file).await;
    let lead_cursor = src.store.cursor("lobby", "lead").await.unwrap();
    let unread: Vec<Value> = src
        .store
        .read_events(
            "lobby",
            &chatroom::domain::model::EventFilter {
                since_id: lead_cursor,
                limit: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .iter()
        .filter(|e| e.actor != "lead")
        .map(|e| json!(e.id))
        .collect();
    assert!(!unread.is_empty());
    // Stop the source so its presence and audit rows are written out.
    let (src_url, src_store) = (src.db_url.clone(), src.store.clone());
    let tokens = (alice.token.clone(), lead.token.clone());
    let _files = src.stop_keeping_files().await;

    let target = PgDatabase::create(&server).await;
    let (code, out, err) = run_cli(
        &["admin", "copy", "--from", &src_url, "--to", &target.url],
        &HashMap::new(),
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("every row arrived"), "{out}");
    let copy = TestServer::on_database(&target.url).await;
    for table in TABLES {
        let (n, m) = (
            src_store.count_rows(table.name).await.unwrap(),
            copy.store.count_rows(table.name).await.unwrap(),
        );
        assert_eq!(n, m, "{}", table.name);
        assert!(n > 0, "the fixture fills {}", table.name);
        assert!(
            out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [table.name, &n.to_string(), &n.to_string()]),
            "{} counted in: {out}",
            table.name
        );
    }
    // The same tokens work and the copy answers the same; the cursors came
    // along, so whats_new continues where it stopped.
    let (alice2, lead2) = (copy.mcp(&tokens.0), copy.mcp(&tokens.1));
    let app = copy.mcp(&app_token).call("whoami", json!({})).await;
    assert_eq!(app["agent"], "phone", "the OAuth grant came along");
    assert_eq!(answers(&lead2, task, file).await, before);
    assert_eq!(answers(&alice2, task, file).await, before_alice);
    let news = lead2.call("whats_new", json!({})).await;
    assert_eq!(news["since_event_id"], lead_cursor, "{news}");
    let news: Vec<Value> = news["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["by_you"] == false)
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(news, unread);
    // New ids come after the copied ones.
    let old_max = src_store.id_high_water("events").await.unwrap();
    let posted = alice2
        .call("post_message", json!({"body": "on postgres now"}))
        .await;
    let news = lead2.call("whats_new", json!({})).await;
    assert!(
        news["events"][0]["id"].as_i64().unwrap() > old_max,
        "{news}"
    );
    assert_eq!(news["events"][0]["message_id"], posted["message_id"]);
    // A target that holds anything is refused.
    let (code, _, err) = run_cli(
        &["admin", "copy", "--from", &src_url, "--to", &target.url],
        &HashMap::new(),
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("not empty"), "{err}");
    copy.stop().await;
}

/// Every table that copy moves is one the fixture above fills, and no table
/// is forgotten (the list mirrors both migrations).
#[tokio::test]
async fn copy_covers_every_table() {
    let server = pg_server();
    let target = PgDatabase::create(&server).await;
    let store = db::open(&target.url).await.unwrap();
    let pool = sqlx::PgPool::connect(&target.url).await.unwrap();
    let tables: HashSet<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
         AND tablename NOT IN ('_sqlx_migrations', 'counters')",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let listed: HashSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
    assert_eq!(tables, listed);
    for t in TABLES {
        assert_eq!(store.count_rows(t.name).await.unwrap(), 0);
    }
    pool.close().await;
}
