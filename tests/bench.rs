//! `chatroom bench` as a smoke test: every scenario runs briefly against a
//! real server with zero errors and no double claims. Speed is not asserted.

mod common;

use std::collections::HashMap;

use common::{TestServer, run_cli};
use serde_json::{Value, json};

/// Every scenario completes without an error; the claim storm verifies
/// that no task was won twice.
#[tokio::test]
async fn every_scenario_runs_clean() {
    let s = TestServer::start().await;
    s.room("bench").await;
    let mut args = vec![
        "bench".to_owned(),
        "--url".into(),
        s.url.clone(),
        "--scenario".into(),
        "all".into(),
        "--concurrency".into(),
        "4".into(),
        "--duration".into(),
        "0.5".into(),
        "--tasks".into(),
        "40".into(),
        "--json".into(),
    ];
    for i in 0..4 {
        args.push("--token".into());
        args.push(s.token(&format!("bench{i}"), "bench").await);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&argv, &HashMap::new()).await;
    assert_eq!(code, 0, "bench failed:\n{err}\n{out}");
    let v: Value = serde_json::from_str(&out).expect("--json prints one object");
    let database = if s.on_postgres() {
        "postgresql"
    } else {
        "sqlite"
    };
    assert_eq!(v["server"]["database"], database, "{v}");
    let reports = v["reports"].as_array().unwrap();
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "baseline",
            "post_message",
            "read_messages",
            "whats_new",
            "claim_storm",
            "wait_wake",
            "sse_fanout",
            "mixed"
        ]
    );
    for r in reports {
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["calls"].as_u64().unwrap() > 0, "{r}");
        check_slowest(r);
    }
    let storm = reports
        .iter()
        .find(|r| r["scenario"] == "claim_storm")
        .unwrap();
    assert_eq!(storm["extra"]["double_claims"], 0);
    assert_eq!(storm["extra"]["claimed"], 40);
    let post = reports
        .iter()
        .find(|r| r["scenario"] == "post_message")
        .unwrap();
    assert!(post["of_baseline"].as_f64().unwrap() > 0.0);
    // `mixed` says what each of its steps took; they add up to its calls.
    let mixed = reports.iter().find(|r| r["scenario"] == "mixed").unwrap();
    let steps = mixed["extra"]["steps"].as_object().expect("steps");
    let mut kinds: Vec<&str> = steps.keys().map(String::as_str).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "get_room_info",
            "list_tasks",
            "post_message",
            "read_messages",
            "search",
            "task (3 calls)",
            "whats_new"
        ],
        "{mixed}"
    );
    let calls: u64 = steps.values().map(|s| s["calls"].as_u64().unwrap()).sum();
    assert_eq!(calls, mixed["calls"].as_u64().unwrap(), "{mixed}");
    for s in steps.values() {
        assert!(
            s["p99_ms"].as_f64().unwrap() >= s["p50_ms"].as_f64().unwrap(),
            "{s}"
        );
    }
}

/// Several `--url`s (replicas of one database) take the tokens in turn:
/// here two servers of their own, each knowing only its own token, so a
/// call sent to the wrong one would fail.
#[tokio::test]
async fn tokens_are_spread_over_the_urls_in_turn() {
    let (a, b) = (TestServer::start().await, TestServer::start().await);
    a.room("bench").await;
    b.room("bench").await;
    let (ta, tb) = (a.token("one", "bench").await, b.token("two", "bench").await);
    let argv = [
        "bench",
        "--url",
        &a.url,
        "--url",
        &b.url,
        "--token",
        &ta,
        "--token",
        &tb,
        "--scenario",
        "post_message",
        "--concurrency",
        "2",
        "--duration",
        "0.3",
        "--no-baseline",
        "--json",
    ];
    let (code, out, err) = run_cli(&argv, &HashMap::new()).await;
    assert_eq!(code, 0, "bench failed:\n{err}\n{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["urls"], json!([a.url, b.url]), "{v}");
    assert_eq!(v["reports"][0]["errors"], 0, "{v}");
    for (server, token) in [(&a, &ta), (&b, &tb)] {
        let page = server
            .mcp(token)
            .call("read_messages", json!({"limit": 5}))
            .await;
        assert!(!page["messages"].as_array().unwrap().is_empty(), "{page}");
    }
}

/// A report lists its slowest 0.1 % of calls (at least one), in the order
/// sent, each with the UTC time it was sent, its offset from the start of
/// the scenario and its latency: the slowest of all is the report's `max`,
/// and none is faster than its `p99`.
fn check_slowest(r: &Value) {
    let calls = r["calls"].as_u64().unwrap();
    let slowest = r["slowest"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(slowest.len() as u64, calls.div_ceil(1000), "{r}");
    let started = r["started"].as_str().unwrap();
    assert!(is_utc_ms(started), "{started}");
    let seconds = r["seconds"].as_f64().unwrap();
    let (p99, max) = (r["p99_ms"].as_f64().unwrap(), r["max_ms"].as_f64().unwrap());
    let mut last_offset = 0.0;
    let mut slowest_seen: f64 = 0.0;
    for c in slowest {
        let sent = c["sent"].as_str().unwrap();
        assert!(is_utc_ms(sent), "{c}");
        assert!(sent >= started, "{c} before {started}");
        let offset = c["offset_ms"].as_f64().unwrap();
        assert!(offset >= last_offset && offset <= seconds * 1000.0, "{r}");
        last_offset = offset;
        let latency = c["latency_ms"].as_f64().unwrap();
        assert!(latency >= p99 && latency <= max, "{c} in {r}");
        slowest_seen = slowest_seen.max(latency);
    }
    assert_eq!(slowest_seen, max, "{r}");
}

/// `2026-11-29T12:00:00.123Z`.
fn is_utc_ms(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 24
        && t.ends_with('Z')
        && b[10] == b'T'
        && b[19] == b'.'
        && t[..4].bytes().all(|c| c.is_ascii_digit())
        && t[20..23].bytes().all(|c| c.is_ascii_digit())
}

/// The table names the database of the server under test and lists the
/// slowest calls of each scenario with the time each was sent.
#[tokio::test]
async fn table_names_the_database_and_the_slowest_calls() {
    let s = TestServer::start().await;
    s.room("bench").await;
    let token = s.token("tabled", "bench").await;
    let (code, out, err) = run_cli(
        &[
            "bench",
            "--url",
            &s.url,
            "--token",
            &token,
            "--scenario",
            "whats_new",
            "--concurrency",
            "2",
            "--duration",
            "0.3",
        ],
        &HashMap::new(),
    )
    .await;
    assert_eq!(code, 0, "bench failed:\n{err}\n{out}");
    let database = if s.on_postgres() {
        "postgresql"
    } else {
        "sqlite"
    };
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.ends_with(&format!("database: {database}"))),
        "{out}"
    );
    let listing = out
        .split("whats_new: the slowest ")
        .nth(1)
        .unwrap_or_else(|| panic!("no listing of the slowest calls:\n{out}"));
    let row = listing.lines().nth(2).unwrap_or_default();
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{row:?} in\n{out}");
    assert!(is_utc_ms(fields[0]), "{row:?}");
    assert!(
        fields[1].parse::<f64>().is_ok() && fields[2].parse::<f64>().is_ok(),
        "{row:?}"
    );
}

/// `/healthz` says which database the server runs on, and nothing more
/// about it.
#[tokio::test]
async fn healthz_names_the_database_kind() {
    let s = TestServer::start().await;
    let r = reqwest::get(format!("{}/healthz", s.url)).await.unwrap();
    assert_eq!(r.status(), 200);
    let expected = if s.on_postgres() {
        "postgresql"
    } else {
        "sqlite"
    };
    assert_eq!(r.headers()["x-chatroom-database"], expected);
    assert_eq!(r.text().await.unwrap(), "ok");
}

/// A bad token stops the bench at once with a clear message.
#[tokio::test]
async fn bad_token_fails_fast() {
    let s = TestServer::start().await;
    let (code, _, err) = run_cli(
        &[
            "bench",
            "--url",
            &s.url,
            "--token",
            "cr_nope",
            "--duration",
            "0.2",
        ],
        &HashMap::new(),
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("a first call (read_messages) failed"), "{err}");
}

/// `search` fills the last token's room and searches from the first one's,
/// without an error; with both tokens in one room it refuses to start.
#[tokio::test]
async fn search_scenario_runs_clean() {
    let s = TestServer::start().await;
    s.room("bench").await;
    s.room("foreign").await;
    let searcher = s.token("seeker", "bench").await;
    let filler = s.token("filler", "foreign").await;
    let run = |tokens: [String; 2]| {
        let url = s.url.clone();
        async move {
            let mut args = vec![
                "bench".to_owned(),
                "--url".into(),
                url,
                "--scenario".into(),
                "search".into(),
                "--concurrency".into(),
                "2".into(),
                "--duration".into(),
                "0.5".into(),
                "--foreign".into(),
                "50".into(),
                "--no-baseline".into(),
                "--json".into(),
            ];
            for t in tokens {
                args.push("--token".into());
                args.push(t);
            }
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            run_cli(&argv, &HashMap::new()).await
        }
    };
    let (code, out, err) = run([searcher.clone(), filler]).await;
    assert_eq!(code, 0, "bench failed:\n{err}\n{out}");
    let v: Value = serde_json::from_str(&out).expect("--json prints one object");
    let r = &v["reports"][0];
    assert_eq!(r["scenario"], "search", "{v}");
    assert_eq!(r["errors"], 0, "{r}");
    assert!(r["calls"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["extra"]["foreign_messages"], 50);
    let same = s.token("other", "bench").await;
    let (code, _, err) = run([searcher, same]).await;
    assert_ne!(code, 0);
    assert!(err.contains("different rooms"), "{err}");
}

/// `--scenario channel` spawns real `chatroom channel` processes, posts
/// mentions of their agents, and times each to the notification on the
/// channel's stdout: every mention arrives once, at the right channel, and
/// `post_message` answered `reach: push` for each.
#[tokio::test]
async fn channel_scenario_times_real_channels() {
    let s = TestServer::start().await;
    s.room("bench").await;
    let mut args: Vec<String> = [
        "bench",
        "--url",
        &s.url,
        "--scenario",
        "channel",
        "--concurrency",
        "3",
        "--mentions",
        "6",
        "--no-baseline",
        "--json",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    for i in 0..3 {
        args.push("--token".into());
        args.push(s.token(&format!("push{i}"), "bench").await);
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = run_cli(&argv, &HashMap::new()).await;
    assert_eq!(code, 0, "bench failed:\n{err}\n{out}");
    let v: Value = serde_json::from_str(&out).expect("--json prints one object");
    let r = &v["reports"][0];
    assert_eq!(r["scenario"], "channel", "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    // Three channels of two agents (the first token posts): six mentions,
    // each delivered to every channel of its agent.
    assert_eq!(r["extra"]["channels"], 3, "{r}");
    assert_eq!(r["extra"]["agents"], 2, "{r}");
    assert_eq!(r["extra"]["delivered"], 9, "{r}");
    assert_eq!(r["calls"], 9, "{r}");
    assert_eq!(r["extra"]["duplicates"], 0, "{r}");
    assert_eq!(r["extra"]["missing"], 0, "{r}");
    assert_eq!(r["extra"]["reach_push"], 6, "{r}");
    assert!(r["p50_ms"].as_f64().unwrap() > 0.0, "{r}");
}
