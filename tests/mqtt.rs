//! The MQTT bridge against a real broker: a `mosquitto` of our own on a free
//! port per test, read by a rumqttc subscriber the way an automation would.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatroom::config::MqttConfig;
use chatroom::db;
use chatroom::domain::Core;
use chatroom::domain::model::RoomInfo;
use common::{Grant, McpClient, TestServer, free_port};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, oneshot};

const MOSQUITTO: &str = "/usr/sbin/mosquitto";
/// How long anything that should happen promptly may take before a test fails.
const PATIENCE: Duration = Duration::from_secs(15);

/// A topic prefix no other test uses (plain `[a-z0-9-]`, so its Home
/// Assistant id is itself).
fn unique_prefix() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand::random::<u16>()
    )
}

/// A mosquitto of our own, restartable on the same port.
struct Broker {
    port: u16,
    /// Holds the config and the saved sessions; removed on drop.
    _dir: tempfile::TempDir,
    conf: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Broker {
    /// An anonymous broker that keeps sessions across a clean restart.
    async fn start() -> Broker {
        Broker::start_with("allow_anonymous true\n").await
    }

    async fn start_with(extra: &str) -> Broker {
        let port = free_port();
        let dir = tempfile::tempdir().expect("temp dir");
        let conf = dir.path().join("mosquitto.conf");
        let text = format!(
            "listener {port} 127.0.0.1\nuser root\npersistence true\npersistence_location {}/\n\
             log_dest none\n{extra}",
            dir.path().display()
        );
        std::fs::write(&conf, text).expect("write mosquitto.conf");
        let mut broker = Broker {
            port,
            _dir: dir,
            conf,
            child: None,
        };
        broker.run().await;
        broker
    }

    async fn run(&mut self) {
        assert!(self.child.is_none());
        let child = tokio::process::Command::new(MOSQUITTO)
            .arg("-c")
            .arg(&self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start mosquitto");
        self.child = Some(child);
        // A bounded wait for an outside process to come up.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "mosquitto did not come up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the broker the way an operator would (it saves its sessions).
    async fn stop(&mut self) {
        let mut child = self.child.take().expect("broker running");
        signal(&child, "TERM").await;
        tokio::time::timeout(PATIENCE, child.wait())
            .await
            .expect("mosquitto stops")
            .expect("mosquitto exit");
    }

    fn bridge_config(&self, prefix: &str) -> MqttConfig {
        MqttConfig {
            host: "127.0.0.1".into(),
            port: self.port,
            user: None,
            pass: None,
            prefix: prefix.into(),
            tls: false,
            ha_discovery: false,
        }
    }
}

async fn signal(child: &tokio::process::Child, sig: &str) {
    let pid = child.id().expect("running").to_string();
    let status = tokio::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid])
        .status()
        .await
        .expect("kill");
    assert!(status.success());
}

/// One message as a subscriber got it.
#[derive(Debug)]
struct Received {
    topic: String,
    retain: bool,
    payload: Vec<u8>,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.payload)
            .unwrap_or_else(|e| panic!("{} is not JSON ({e}): {:?}", self.topic, self.text()))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// A subscriber on the broker; it reconnects by itself, and with a
/// persistent session it gets what was published while it was away.
struct Subscriber {
    rx: mpsc::UnboundedReceiver<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscriber {
    async fn connect(port: u16, filter: &str) -> Subscriber {
        Subscriber::connect_with(port, filter, |_| {}).await
    }

    async fn connect_with(
        port: u16,
        filter: &str,
        tweak: impl FnOnce(&mut MqttOptions),
    ) -> Subscriber {
        let id = format!("test-{}", unique_prefix());
        let mut options = MqttOptions::new(id, "127.0.0.1", port);
        options.set_max_packet_size(1 << 20, 1 << 20);
        tweak(&mut options);
        let (client, mut eventloop) = AsyncClient::new(options, 16);
        client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .expect("subscribe");
        let (tx, rx) = mpsc::unbounded_channel();
        let (subscribed_tx, subscribed) = oneshot::channel();
        let task = tokio::spawn(async move {
            let _client = client;
            let mut subscribed_tx = Some(subscribed_tx);
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(s) = subscribed_tx.take() {
                            let _ = s.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let _ = tx.send(Received {
                            topic: p.topic,
                            retain: p.retain,
                            payload: p.payload.to_vec(),
                        });
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        tokio::time::timeout(PATIENCE, subscribed)
            .await
            .expect("SUBACK in time")
            .expect("subscriber alive");
        Subscriber { rx, task }
    }

    /// The next message on `topic`, skipping others.
    async fn next_on(&mut self, topic: &str) -> Received {
        let got = tokio::time::timeout(PATIENCE, async {
            loop {
                let m = self.rx.recv().await.expect("subscriber alive");
                if m.topic == topic {
                    return m;
                }
            }
        })
        .await;
        got.unwrap_or_else(|_| panic!("nothing arrived on {topic}"))
    }

    /// The first message on `topic` for which `accept` holds.
    async fn until(&mut self, topic: &str, accept: impl Fn(&Value) -> bool) -> Value {
        let got = tokio::time::timeout(PATIENCE, async {
            loop {
                let v = self.next_on(topic).await.json();
                if accept(&v) {
                    return v;
                }
            }
        })
        .await;
        got.unwrap_or_else(|_| panic!("no matching message on {topic}"))
    }
}

/// A server whose bridge talks to `broker` under `prefix`, once the bridge
/// is connected (its retained `online` seen).
async fn bridged_server(broker: &Broker, prefix: &str, ha: bool) -> TestServer {
    let mut online = Subscriber::connect(broker.port, &format!("{prefix}/bridge/online")).await;
    let mut mqtt = broker.bridge_config(prefix);
    mqtt.ha_discovery = ha;
    let server = TestServer::start_with(|c| c.mqtt = Some(mqtt)).await;
    let topic = format!("{prefix}/bridge/online");
    assert_eq!(online.next_on(&topic).await.text(), "online");
    let m = Subscriber::connect(broker.port, &topic)
        .await
        .next_on(&topic)
        .await;
    assert_eq!(m.text(), "online");
    assert!(m.retain, "online is retained");
    server
}

/// A posted message and a claimed task are published as event JSON on
/// `<prefix>/<room>/<kind>`, and a later subscriber finds the retained room
/// status reflecting the claim.
#[tokio::test]
async fn events_and_status_reach_the_broker() {
    let broker = Broker::start().await;
    let prefix = unique_prefix();
    let mut sub = Subscriber::connect(broker.port, &format!("{prefix}/#")).await;
    let s = bridged_server(&broker, &prefix, false).await;
    let alice = s.agent("alice", "lobby").await;

    let posted = alice
        .call("post_message", json!({"body": "hello broker"}))
        .await;
    let m = sub.next_on(&format!("{prefix}/lobby/message")).await;
    assert!(!m.retain);
    let e = m.json();
    let mut keys: Vec<_> = e.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "actor",
            "data",
            "detail",
            "id",
            "kind",
            "message_id",
            "room",
            "task_id",
            "ts"
        ]
    );
    assert_eq!(e["room"], "lobby");
    assert_eq!(e["kind"], "message");
    assert_eq!(e["actor"], "alice");
    assert_eq!(e["message_id"], posted["message_id"]);
    assert_eq!(e["detail"], "hello broker");
    assert_eq!(e["data"]["body"], "hello broker");
    assert_eq!(e["task_id"], Value::Null);
    assert!(e["id"].as_i64().unwrap() > 0);
    assert!(e["ts"].as_str().unwrap().ends_with('Z'));

    let task =
        alice.call("create_task", json!({"title": "wire it"})).await["created"]["id"].clone();
    let claimed = alice.call("claim_task", json!({"task_id": task})).await;
    assert_eq!(claimed["claimed"], true);
    let c = sub
        .next_on(&format!("{prefix}/lobby/task_claimed"))
        .await
        .json();
    assert_eq!(c["kind"], "task_claimed");
    assert_eq!(c["task_id"], task);
    assert_eq!(c["actor"], "alice");
    assert!(c["id"].as_i64() > e["id"].as_i64());

    // Once the bridge has published the status after the claim ...
    let status_topic = format!("{prefix}/lobby/status");
    sub.until(&status_topic, |v| v["tasks"]["in_progress"] == 1)
        .await;
    // ... a subscriber that comes later finds it retained.
    let mut late = Subscriber::connect(broker.port, &status_topic).await;
    let first = late.next_on(&status_topic).await;
    assert!(first.retain, "the status is retained");
    let st = first.json();
    assert_eq!(st["room"], "lobby");
    assert_eq!(
        st["tasks"],
        json!({"pending": 0, "in_progress": 1, "blocked": 0, "in_review": 0, "done": 0, "cancelled": 0})
    );
    assert_eq!(st["agents_active"], 1);
    assert_eq!(st["last_activity_ts"], c["ts"]);
    assert!(st["ts"].as_str().unwrap().ends_with('Z'));
    s.stop().await;
}

/// Rooms named with capitals publish under their name as written, and two
/// rooms that differ only in case (`projA`, `proja`) keep their own topics.
#[tokio::test]
async fn room_names_keep_their_case_in_topics() {
    let broker = Broker::start().await;
    let prefix = unique_prefix();
    let mut sub = Subscriber::connect(broker.port, &format!("{prefix}/#")).await;
    let s = bridged_server(&broker, &prefix, false).await;
    let upper = s.agent("alice", "projA").await;
    let lower = s.agent("bob", "proja").await;
    upper.call("post_message", json!({"body": "in A"})).await;
    let m = sub.next_on(&format!("{prefix}/projA/message")).await.json();
    assert_eq!(m["room"], "projA");
    assert_eq!(m["actor"], "alice");
    assert_eq!(m["data"]["body"], "in A");
    lower.call("post_message", json!({"body": "in a"})).await;
    let m = sub.next_on(&format!("{prefix}/proja/message")).await.json();
    assert_eq!(m["room"], "proja");
    assert_eq!(m["actor"], "bob");
    assert_eq!(m["data"]["body"], "in a");
    s.stop().await;
}

/// With the broker stopped, tool calls still succeed without waiting for it;
/// once it is back on the same port the bridge reconnects by itself, delivers
/// what queued up meanwhile, and publishes later events.
#[tokio::test]
async fn the_bridge_rides_out_a_broker_restart() {
    let mut broker = Broker::start().await;
    let prefix = unique_prefix();
    // A persistent session, so the broker keeps what arrives while we are away.
    let mut sub = Subscriber::connect_with(broker.port, &format!("{prefix}/+/message"), |o| {
        o.set_clean_session(false);
    })
    .await;
    let s = bridged_server(&broker, &prefix, false).await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "before"})).await;
    let m = sub.next_on(&format!("{prefix}/lobby/message")).await;
    assert_eq!(m.json()["data"]["body"], "before", "{}", m.text());

    broker.stop().await;
    for i in 0..3 {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            alice.call("post_message", json!({"body": format!("during {i}")})),
        )
        .await;
        assert!(r.is_ok(), "a tool call waited on the stopped broker");
    }

    broker.run().await;
    for i in 0..3 {
        let m = sub.next_on(&format!("{prefix}/lobby/message")).await;
        assert_eq!(m.json()["data"]["body"], format!("during {i}"));
    }
    alice.call("post_message", json!({"body": "after"})).await;
    let m = sub.next_on(&format!("{prefix}/lobby/message")).await;
    assert_eq!(m.json()["data"]["body"], "after");
    s.stop().await;
}

/// With `CHATROOM_MQTT_HA_DISCOVERY` on, each room gets retained Home
/// Assistant sensor configs whose JSON points at the room's status topic.
#[tokio::test]
async fn home_assistant_discovery_topics_are_retained() {
    let broker = Broker::start().await;
    let prefix = unique_prefix();
    let filter = format!("homeassistant/sensor/chatroom_{prefix}_lobby/+/config");
    let mut sub = Subscriber::connect(broker.port, &filter).await;
    let s = bridged_server(&broker, &prefix, true).await;
    let alice = s.agent("alice", "lobby").await;
    alice.call("post_message", json!({"body": "hi"})).await;
    let sensors = ["open_tasks", "in_progress", "in_review", "last_activity"];
    for _ in 0..5 {
        tokio::time::timeout(PATIENCE, sub.rx.recv())
            .await
            .expect("discovery configs in time")
            .expect("subscriber alive");
    }
    // A later subscriber (Home Assistant starting up) finds them retained.
    let mut late = Subscriber::connect(broker.port, &filter).await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        let m = tokio::time::timeout(PATIENCE, late.rx.recv())
            .await
            .expect("retained config")
            .expect("subscriber alive");
        assert!(m.retain, "{} is retained", m.topic);
        let config = m.json();
        assert_eq!(config["state_topic"], format!("{prefix}/lobby/status"));
        assert_eq!(
            config["availability_topic"],
            format!("{prefix}/bridge/online")
        );
        assert!(
            config["value_template"]
                .as_str()
                .unwrap()
                .contains("value_json")
        );
        assert!(
            config["unique_id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("chatroom_{prefix}_lobby_"))
        );
        assert_eq!(
            config["device"]["identifiers"],
            json!([format!("chatroom_{prefix}_lobby")])
        );
        seen.push(m.topic.split('/').nth(3).unwrap().to_owned());
    }
    for sensor in sensors {
        assert!(seen.iter().any(|s| s == sensor), "{sensor} in {seen:?}");
    }
    s.stop().await;
}

/// The server binary at debug level, connecting with a user and password
/// (and then with a wrong password), never writes either to its log.
#[tokio::test]
async fn broker_credentials_never_reach_the_log() {
    let user = "bridge-user-q7x";
    let pass = "s3cret-pass-z9k";
    let has_passwd = Path::new("/usr/bin/mosquitto_passwd").exists();
    let pw_dir = tempfile::tempdir().unwrap();
    let broker = if has_passwd {
        let file = pw_dir.path().join("passwd");
        let ok = std::process::Command::new("/usr/bin/mosquitto_passwd")
            .args(["-b", "-c"])
            .arg(&file)
            .args([user, pass])
            .status()
            .expect("mosquitto_passwd")
            .success();
        assert!(ok);
        Broker::start_with(&format!(
            "allow_anonymous false\npassword_file {}\n",
            file.display()
        ))
        .await
    } else {
        Broker::start().await
    };
    let prefix = unique_prefix();
    let mut sub = Subscriber::connect_with(broker.port, &format!("{prefix}/#"), |o| {
        o.set_credentials(user, pass);
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let db_path = dir
        .path()
        .join("chatroom.db")
        .to_string_lossy()
        .into_owned();
    let core = Core::offline(db::open(&format!("sqlite://{db_path}")).await.unwrap());
    core.create_room("lobby", RoomInfo::default())
        .await
        .unwrap();
    let (token, _) = core
        .mint_token(Grant {
            agent: "alice".into(),
            room: "lobby".into(),
            ..Grant::default()
        })
        .await
        .unwrap();

    // Right credentials: the bridge connects and publishes.
    let server = Server::start(&db_path, broker.port, &prefix, user, pass).await;
    let online = sub.next_on(&format!("{prefix}/bridge/online")).await;
    assert_eq!(online.text(), "online");
    McpClient::new(&server.url, token.expose())
        .call("post_message", json!({"body": "hello"}))
        .await;
    sub.next_on(&format!("{prefix}/lobby/message")).await;
    server.wait_for_log("MQTT bridge connected").await;
    let log = server.stop().await;
    assert!(log.contains("MQTT bridge stopped"), "{log}");
    assert!(!log.contains(user), "the user name was logged:\n{log}");
    assert!(!log.contains(pass), "the password was logged:\n{log}");

    // A wrong password: refused and said so, still without credentials.
    if has_passwd {
        let wrong = "wr0ng-pass-m4p";
        let server = Server::start(&db_path, broker.port, &prefix, user, wrong).await;
        server.wait_for_log("refused the connection").await;
        let log = server.stop().await;
        assert!(!log.contains(user), "the user name was logged:\n{log}");
        assert!(!log.contains(wrong), "the password was logged:\n{log}");
    }
}

/// `CHATROOM_MQTT_TLS=on` in a build without TLS stops the server at start,
/// naming the setting.
#[cfg(not(feature = "mqtt-tls"))]
#[tokio::test]
async fn tls_without_the_feature_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = std::collections::HashMap::from([
        (
            "CHATROOM_DB",
            dir.path().join("c.db").to_string_lossy().into_owned(),
        ),
        ("CHATROOM_LISTEN", format!("127.0.0.1:{}", free_port())),
        ("CHATROOM_MQTT_HOST", "127.0.0.1".to_owned()),
        ("CHATROOM_MQTT_TLS", "on".to_owned()),
    ]);
    let (code, _, err) = common::run_cli(&["serve"], &env).await;
    assert_ne!(code, 0);
    assert!(err.contains("CHATROOM_MQTT_TLS"), "{err}");
    assert!(err.contains("mqtt-tls"), "{err}");
}

/// The real `chatroom serve` binary, its stderr collected.
struct Server {
    child: tokio::process::Child,
    url: String,
    log: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(db_path: &str, port: u16, prefix: &str, user: &str, pass: &str) -> Server {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut child = tokio::process::Command::new(common::binary())
            .arg("serve")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("CHATROOM_LISTEN", &listen)
            .env("CHATROOM_DB", db_path)
            .env("CHATROOM_LOG", "debug")
            .env("CHATROOM_MQTT_HOST", "127.0.0.1")
            .env("CHATROOM_MQTT_PORT", port.to_string())
            .env("CHATROOM_MQTT_USER", user)
            .env("CHATROOM_MQTT_PASS", pass)
            .env("CHATROOM_MQTT_PREFIX", prefix)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start chatroom");
        let log = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        let reader = tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let url = format!("http://{listen}");
        assert!(
            common::wait_healthy(&url, PATIENCE).await,
            "server did not come up: {}",
            log.lock().unwrap()
        );
        Server {
            child,
            url,
            log,
            reader,
        }
    }

    /// Waits (bounded) for a log line containing `needle`.
    async fn wait_for_log(&self, needle: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.log.lock().unwrap().contains(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server with SIGTERM; returns its whole log.
    async fn stop(mut self) -> String {
        signal(&self.child, "TERM").await;
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("server stops")
            .expect("server exit");
        assert!(status.success(), "server exit: {status}");
        let _ = tokio::time::timeout(PATIENCE, &mut self.reader).await;
        self.log.lock().unwrap().clone()
    }
}

/// An agent's state from its hook is published retained on
/// `<prefix>/<room>/agents/<agent>/state`, with a Home Assistant sensor
/// reading it when discovery is on; `set_attention` republishes it.
#[tokio::test]
async fn presence_is_published_retained() {
    let broker = Broker::start().await;
    let prefix = unique_prefix();
    let s = bridged_server(&broker, &prefix, true).await;
    s.room("lobby").await;
    let token = s.token("alice", "lobby").await;
    let topic = format!("{prefix}/lobby/agents/alice/state");
    let mut sub = Subscriber::connect(broker.port, &topic).await;
    let mut ha = Subscriber::connect(
        broker.port,
        &format!("homeassistant/sensor/chatroom_{prefix}_lobby/agent_alice/config"),
    )
    .await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/presence", s.url))
        .bearer_auth(&token)
        .json(&json!({"state": "working"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m = sub.next_on(&topic).await;
    let v = m.json();
    assert_eq!(v["state"], "working", "{v}");
    assert_eq!(v["agent"], "alice");
    assert_eq!(v["attention"], "open");
    assert!(v["ts"].is_string());
    let config = tokio::time::timeout(PATIENCE, ha.rx.recv())
        .await
        .expect("a sensor config")
        .unwrap()
        .json();
    assert_eq!(config["state_topic"], topic);
    s.mcp(&token)
        .call("set_attention", json!({"attention": "dnd"}))
        .await;
    let v = sub.until(&topic, |v| v["attention"] == "dnd").await;
    assert_eq!(v["state"], "working");
    // A later subscriber finds the state retained.
    let mut late = Subscriber::connect(broker.port, &topic).await;
    let m = late.next_on(&topic).await;
    assert!(m.retain);
    s.stop().await;
}
