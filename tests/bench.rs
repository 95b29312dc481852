//! `chatroom bench` as a smoke test: every scenario runs briefly against a
//! real server with zero errors and no double claims. Speed is not asserted.

mod common;

use std::collections::HashMap;

use common::{TestServer, run_cli};
use serde_json::Value;

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
    assert!(err.contains("whoami failed"), "{err}");
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
