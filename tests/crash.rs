//! Crash safety of the real binary on SQLite: a mixed load, SIGKILL in the
//! middle of it, a restart on the same file. Every call that had answered
//! success is still there, and the database passes `PRAGMA integrity_check`.

mod common;
#[path = "spawned/mod.rs"]
mod spawned;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;
use spawned::Spawned;
use tokio::sync::{Mutex, Notify};

/// What the server acknowledged before it was killed.
#[derive(Default, Debug)]
struct Acked {
    /// message id -> body
    messages: BTreeMap<i64, String>,
    /// task id -> claimer
    claims: BTreeMap<i64, String>,
    /// note id -> (task id, body)
    notes: BTreeMap<i64, (i64, String)>,
    /// file id -> sha256
    files: BTreeMap<i64, String>,
}

/// One tool call; `Err` when there was no complete answer (the server died).
async fn call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    tool: &str,
    args: Value,
) -> Result<Value, ()> {
    let resp = http
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}})
            .to_string(),
        )
        .send()
        .await
        .map_err(|_| ())?;
    if resp.status() != 200 {
        return Err(());
    }
    let v: Value = resp.json().await.map_err(|_| ())?;
    let result = &v["result"];
    let text = result["content"][0]["text"].as_str().ok_or(())?;
    let body: Value = serde_json::from_str(text).map_err(|_| ())?;
    assert_ne!(
        result["isError"],
        json!(true),
        "{tool} refused under load: {body}"
    );
    Ok(body)
}

/// What the workers share.
struct Load {
    url: String,
    acked: Mutex<Acked>,
    /// Acknowledged writes so far.
    count: AtomicUsize,
    /// After this many, the server is killed.
    threshold: usize,
    reached: Notify,
}

/// One worker of the mixed load: messages, tasks claimed by the other agent,
/// notes and small files, until the server stops answering.
async fn worker(n: usize, me: (String, String), peer: (String, String), load: Arc<Load>) {
    let http = reqwest::Client::new();
    let (url, acked) = (&load.url, &load.acked);
    let bump = |k: usize| {
        if load.count.fetch_add(k, Ordering::SeqCst) + k >= load.threshold {
            load.reached.notify_one();
        }
    };
    for i in 0.. {
        let step: Result<(), ()> = async {
            match i % 4 {
                0 => {
                    let body = format!("worker {n} message {i}");
                    let r = call(&http, url, &me.1, "post_message", json!({"body": body})).await?;
                    acked.lock().await.messages.insert(r["message_id"].as_i64().unwrap(), body);
                    bump(1);
                }
                1 => {
                    let title = format!("worker {n} task {i}");
                    let r = call(&http, url, &me.1, "create_task", json!({"title": title})).await?;
                    let id = r["created"]["id"].as_i64().unwrap();
                    let c = call(&http, url, &peer.1, "claim_task", json!({"task_id": id})).await?;
                    assert_eq!(c["claimed"], true, "{c}");
                    acked.lock().await.claims.insert(id, peer.0.clone());
                    bump(1);
                    let body = format!("worker {n} note on {id}");
                    let r = call(&http, url, &peer.1, "add_note", json!({"task_id": id, "body": body})).await?;
                    acked.lock().await.notes.insert(r["note_id"].as_i64().unwrap(), (id, body));
                    bump(1);
                }
                2 => {
                    let content = format!("file {i} of worker {n}\n").repeat(1 + i % 50);
                    let sha = hex::encode(sha2::Sha256::digest(content.as_bytes()));
                    let r = call(
                        &http,
                        url,
                        &me.1,
                        "put_file",
                        json!({"name": format!("w{n}-{i}.txt"),
                               "content_base64": base64::engine::general_purpose::STANDARD.encode(&content)}),
                    )
                    .await?;
                    assert_eq!(r["sha256"], sha);
                    acked.lock().await.files.insert(r["file_id"].as_i64().unwrap(), sha);
                    bump(1);
                }
                _ => {
                    call(&http, url, &me.1, "whats_new", json!({})).await?;
                }
            }
            Ok(())
        }
        .await;
        if step.is_err() {
            return;
        }
    }
}

/// SIGKILL under a mixed load loses nothing that was acknowledged, and the
/// SQLite file is intact after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db").to_string_lossy().into_owned();
    let env = [
        ("CHATROOM_RATE_LIMIT_PER_MINUTE", "0"),
        ("CHATROOM_LOG", "warn"),
    ];
    let mut server = Spawned::start(&db, &env).await;
    let alice = (
        "alice".to_owned(),
        server.token("alice", "lobby", &[]).await,
    );
    let bob = ("bob".to_owned(), server.token("bob", "lobby", &[]).await);
    let url = format!("{}/mcp", server.url);

    let threshold: usize = std::env::var("CHATROOM_CRASH_KILL_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let load = Arc::new(Load {
        url: url.clone(),
        acked: Mutex::new(Acked::default()),
        count: AtomicUsize::new(0),
        threshold,
        reached: Notify::new(),
    });
    let workers: Vec<_> = (0..6)
        .map(|n| {
            let (me, peer) = if n % 2 == 0 {
                (alice.clone(), bob.clone())
            } else {
                (bob.clone(), alice.clone())
            };
            tokio::spawn(worker(n, me, peer, load.clone()))
        })
        .collect();
    // Kill in the middle of the load, with calls in flight.
    load.reached.notified().await;
    server.kill().await;
    for w in workers {
        w.await.expect("worker");
    }
    let acked = std::mem::take(&mut *load.acked.lock().await);

    let mut server = Spawned::start(&db, &env).await;
    let reader = server.mcp(&alice.1);

    // Messages.
    let mut messages = BTreeMap::new();
    let mut since = 0;
    loop {
        let r = reader
            .call("read_messages", json!({"since_id": since, "limit": 200}))
            .await;
        let page = r["messages"].as_array().unwrap().clone();
        if page.is_empty() {
            break;
        }
        for m in &page {
            messages.insert(
                m["id"].as_i64().unwrap(),
                m["body"].as_str().unwrap().to_owned(),
            );
        }
        since = page.last().unwrap()["id"].as_i64().unwrap();
    }
    let found_messages = acked
        .messages
        .iter()
        .filter(|(id, body)| messages.get(id) == Some(body))
        .count();

    // Claims and notes.
    let mut found_claims = 0;
    let mut found_notes = 0;
    let task_ids: BTreeSet<i64> = acked
        .claims
        .keys()
        .copied()
        .chain(acked.notes.values().map(|(t, _)| *t))
        .collect();
    for id in &task_ids {
        let t = reader.call("get_task", json!({"task_id": id})).await;
        let task = &t["task"];
        if let Some(claimer) = acked.claims.get(id)
            && task["assignee"] == json!(claimer)
            && task["status"] == "in_progress"
        {
            found_claims += 1;
        }
        for note in task["notes"].as_array().unwrap() {
            let nid = note["id"].as_i64().unwrap();
            if acked.notes.get(&nid) == Some(&(*id, note["body"].as_str().unwrap().to_owned())) {
                found_notes += 1;
            }
        }
    }

    // Files, content included.
    let mut found_files = 0;
    for (id, sha) in &acked.files {
        let r = reader.try_call("get_file", json!({"file_id": id})).await;
        if r.is_error {
            continue;
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(r.body["content_base64"].as_str().unwrap())
            .unwrap();
        if &hex::encode(sha2::Sha256::digest(&bytes)) == sha {
            found_files += 1;
        }
    }
    let unacked_messages = messages.len() - found_messages;
    println!(
        "crash test: acknowledged before SIGKILL: messages {}, claims {}, notes {}, files {}; \
         found after restart: messages {found_messages}, claims {found_claims}, notes {found_notes}, files {found_files}; \
         messages present but never acknowledged (in flight at the kill): {unacked_messages}",
        acked.messages.len(),
        acked.claims.len(),
        acked.notes.len(),
        acked.files.len(),
    );
    assert!(
        acked.messages.len() + acked.claims.len() + acked.notes.len() + acked.files.len()
            >= threshold,
        "the load did not get going before the kill"
    );
    assert_eq!(found_messages, acked.messages.len(), "lost messages");
    assert_eq!(found_claims, acked.claims.len(), "lost claims");
    assert_eq!(found_notes, acked.notes.len(), "lost notes");
    assert_eq!(found_files, acked.files.len(), "lost files");

    // The restarted server still writes, then stops cleanly; the file is intact.
    reader
        .call("post_message", json!({"body": "after the crash"}))
        .await;
    server.stop().await;
    use sqlx::Connection;
    let mut conn = sqlx::sqlite::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(&db),
    )
    .await
    .expect("open the database file");
    let check: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    println!("crash test: PRAGMA integrity_check = {}", check.join("; "));
    assert_eq!(check, vec!["ok".to_owned()]);
    conn.close().await.unwrap();
}
